"""The shared state format: exact ``to_dict``, version 1 and 2 loads, errors with field paths."""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

import pytest

from rollmem import (
    AsyncRollingMemory,
    AsyncSummaryMemory,
    BufferMemory,
    RollingMemory,
    SummaryMemory,
    WindowMemory,
)
from rollmem.errors import InvalidStateError, StateTypeError
from rollmem.message import Message, ToolCall


def _never(summary: str, messages: Any) -> str:
    raise AssertionError("loading must not summarize")


LOADERS: dict[str, Callable[[Any], Any]] = {
    "RollingMemory": lambda data: RollingMemory.from_dict(data, max_tokens=1, summarize_fn=_never),
    "AsyncRollingMemory": lambda data: AsyncRollingMemory.from_dict(data, max_tokens=1, summarize_fn=_never),
    "BufferMemory": lambda data: BufferMemory.from_dict(data),
    "WindowMemory": lambda data: WindowMemory.from_dict(data, max_messages=1),
    "SummaryMemory": lambda data: SummaryMemory.from_dict(data, summarize_fn=_never),
    "AsyncSummaryMemory": lambda data: AsyncSummaryMemory.from_dict(data, summarize_fn=_never),
}
every_class = pytest.mark.parametrize("load", LOADERS.values(), ids=LOADERS.keys())

V2 = {
    "version": 2,
    "summary": "they talked about the weather",
    "buffer": [
        {"role": "system", "content": "be brief", "pinned": True},
        {"role": "user", "content": "and tomorrow?", "id": "u7", "metadata": {"lang": "en", "n": [1, 2]}},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "forecast", "arguments": '{"day": 1}'}],
        },
        {"role": "tool", "content": "rain", "tool_call_id": "c1"},
        {"role": "assistant", "content": "Rain tomorrow."},
    ],
}


def test_to_dict_is_exactly_the_documented_shape(char_counter: Callable[[str], int]) -> None:
    mem = RollingMemory(token_counter=char_counter)
    mem.summary = "they talked about the weather"
    mem.add_system_message("be brief", pinned=True)
    mem.add_user_message("and tomorrow?", id="u7", metadata={"lang": "en", "n": [1, 2]})
    mem.add_assistant_message("", tool_calls=[ToolCall("c1", "forecast", '{"day": 1}')])
    mem.add_tool_message("rain", tool_call_id="c1")
    mem.add_assistant_message("Rain tomorrow.")
    data = mem.to_dict()
    assert data == V2
    assert list(data) == ["version", "summary", "buffer"]
    assert json.loads(json.dumps(data)) == V2


def test_to_dict_of_an_empty_memory() -> None:
    assert RollingMemory().to_dict() == {"version": 2, "summary": "", "buffer": []}


def test_to_dict_returns_fresh_data() -> None:
    mem = RollingMemory.from_dict(V2)
    data = mem.to_dict()
    data["buffer"].clear()
    data["summary"] = "changed"
    assert mem.to_dict() == V2


@every_class
def test_every_class_loads_version_2_verbatim(load: Callable[[Any], Any]) -> None:
    original = copy.deepcopy(V2)
    mem = load(V2)
    assert original == V2  # input untouched
    assert mem.to_dict() == V2
    assert mem.summary == V2["summary"]
    assert mem.buffer == [Message.from_dict(m) for m in V2["buffer"]]
    assert mem.get_messages()[0] == Message("system", V2["summary"])


@every_class
def test_every_class_loads_version_1(load: Callable[[Any], Any]) -> None:
    v1 = {
        "version": 1,
        "summary": "s",
        "buffer": [{"role": "user", "content": "hi"}, {"role": "ai", "content": "yo"}],
    }
    mem = load(v1)
    assert mem.buffer == [Message("user", "hi"), Message("ai", "yo")]
    assert mem.to_dict() == {**v1, "version": 2}


@every_class
def test_unknown_keys_are_ignored(load: Callable[[Any], Any]) -> None:
    data = {
        "version": 2,
        "summary": "",
        "buffer": [{"role": "user", "content": "x", "future": {"a": 1}}],
        "written_by": "rollmem 9",
    }
    assert load(data).to_dict() == {"version": 2, "summary": "", "buffer": [{"role": "user", "content": "x"}]}


BAD_STATES = [
    # data, error class, exact message, path
    ([], StateTypeError, "expected a mapping, got list", ""),
    ("{}", StateTypeError, "expected a mapping, got str", ""),
    ({"summary": "", "buffer": []}, InvalidStateError, None, "version"),
    (
        {"version": "2", "summary": "", "buffer": []},
        StateTypeError,
        "version: expected int, got str",
        "version",
    ),
    (
        {"version": True, "summary": "", "buffer": []},
        StateTypeError,
        "version: expected int, got bool",
        "version",
    ),
    ({"version": 2, "buffer": []}, InvalidStateError, "summary: missing required key", "summary"),
    (
        {"version": 2, "summary": None, "buffer": []},
        StateTypeError,
        "summary: expected str, got None",
        "summary",
    ),
    ({"version": 2, "summary": ""}, InvalidStateError, "buffer: missing required key", "buffer"),
    (
        {"version": 2, "summary": "", "buffer": {}},
        StateTypeError,
        "buffer: expected a list, got dict",
        "buffer",
    ),
    (
        {"version": 2, "summary": "", "buffer": [{"role": "user", "content": "ok"}, "hello"]},
        StateTypeError,
        "buffer[1]: expected a mapping, got str",
        "buffer[1]",
    ),
    (
        {"version": 2, "summary": "", "buffer": [{"content": "x"}]},
        InvalidStateError,
        "buffer[0].role: missing required key",
        "buffer[0].role",
    ),
    (
        {
            "version": 2,
            "summary": "",
            "buffer": [
                {"role": "user", "content": "a"},
                {"role": "user", "content": "b"},
                {"role": "user", "content": "c"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": 7, "name": "f"}]},
            ],
        },
        StateTypeError,
        "buffer[3].tool_calls[0].id: expected str, got int",
        "buffer[3].tool_calls[0].id",
    ),
    (
        {"version": 2, "summary": "", "buffer": [{"role": "user", "content": 5}]},
        StateTypeError,
        "buffer[0].content: expected str, got int",
        "buffer[0].content",
    ),
    (
        {"version": 2, "summary": "", "buffer": [{"role": "user", "content": "", "pinned": 1}]},
        StateTypeError,
        "buffer[0].pinned: expected bool, got int",
        "buffer[0].pinned",
    ),
    (
        {"version": 2, "summary": "", "buffer": [{"role": "user", "content": "", "metadata": "m"}]},
        StateTypeError,
        "buffer[0].metadata: expected a mapping, got str",
        "buffer[0].metadata",
    ),
]


@every_class
@pytest.mark.parametrize(("data", "error", "text", "path"), BAD_STATES)
def test_malformed_state_names_the_field(
    load: Callable[[Any], Any], data: Any, error: type[Exception], text: Any, path: str
) -> None:
    with pytest.raises(error) as info:
        load(data)
    assert isinstance(info.value, ValueError)
    assert info.value.path == path  # type: ignore[attr-defined]
    if text is not None:
        assert str(info.value) == text


@every_class
@pytest.mark.parametrize("version", [0, 3, -1, 20])
def test_unsupported_versions_are_refused(load: Callable[[Any], Any], version: int) -> None:
    with pytest.raises(InvalidStateError) as info:
        load({"version": version, "summary": "", "buffer": []})
    assert info.value.path == "version"
    assert str(version) in str(info.value)
    assert not isinstance(info.value, TypeError)


def test_a_bad_count_of_a_loaded_message_is_refused() -> None:
    """Found while loading or, at the latest, by the next add, which then keeps nothing."""

    def counter(text: str) -> int:
        return -1 if text == "b" else 1

    data = {"version": 2, "summary": "", "buffer": [{"role": "user", "content": c} for c in "abc"]}
    try:
        mem = RollingMemory.from_dict(data, token_counter=counter)
    except ValueError as error:  # refused while loading
        assert "token_counter" in str(error)  # noqa: PT017
    else:  # refused by the next add
        with pytest.raises(ValueError, match="token_counter"):
            mem.add_user_message("d")
        assert [m.content for m in mem.buffer] == ["a", "b", "c"]
    ok = RollingMemory.from_dict(data, token_counter=lambda text: 1)
    assert ok.stats().buffer_tokens == 3


def test_round_trip_through_json_between_classes(recorder: Any, char_counter: Callable[[str], int]) -> None:
    mem = RollingMemory(max_tokens=6, summarize_fn=recorder, token_counter=char_counter)
    for text in ["abc", "def", "gh"]:
        mem.add_user_message(text, id=text)
    text = json.dumps(mem.to_dict())
    for load in LOADERS.values():
        other = load(json.loads(text))
        assert other.to_dict() == mem.to_dict()
    assert mem.to_dict() == {
        "version": 2,
        "summary": "abc",
        "buffer": [
            {"role": "user", "content": "def", "id": "def"},
            {"role": "user", "content": "gh", "id": "gh"},
        ],
    }


def test_stats_start_fresh_after_a_load(recorder: Any) -> None:
    mem = RollingMemory.from_dict(V2, summarize_fn=recorder, token_counter=len)
    stats = mem.stats()
    assert (stats.messages, stats.pinned, stats.folds, stats.summarizer_calls) == (5, 1, 0, 0)
    assert stats.buffer_tokens == sum(len(Message.from_dict(m).token_text()) for m in V2["buffer"])


def test_restore_in_a_session_block_is_refused_on_conflict_and_update_reruns_it() -> None:
    from rollmem.errors import ConflictError
    from rollmem.sessions import Sessions
    from rollmem.stores import LogWrite, MemoryStore

    store = MemoryStore()
    sessions = Sessions(store, lambda: RollingMemory(max_tokens=100), cache_size=0)
    state = {"version": 2, "summary": "restored", "buffer": [{"role": "user", "content": "r"}]}

    def restore_then_add(memory: RollingMemory) -> None:
        memory.restore(state)
        memory.add_user_message("after")

    def lose_to_a_rival() -> None:
        with sessions.open("s") as memory:
            restore_then_add(memory)
            store.write("s", LogWrite("", summary="other", create=True))  # a rival wins

    with pytest.raises(ConflictError, match="restored"):
        lose_to_a_rival()
    rival = sessions.get("s")
    assert rival is not None
    assert rival.summary == "other"  # nothing of the refused block was written
    sessions.update("s", restore_then_add)
    saved = sessions.get("s")
    assert saved is not None
    assert saved.summary == "restored"
    assert [m.content for m in saved.buffer] == ["r", "after"]

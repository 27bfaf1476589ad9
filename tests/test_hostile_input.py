"""Hostile input: rejected at once with the path of the bad field, nothing changed; or stored and
given back losslessly. Public API only.

The text rule: every text rollmem keeps (content, role, ids, tool-call fields, metadata keys and
string values at any depth, summaries, session ids) must be valid Unicode; a lone surrogate
(half of a UTF-16 pair) is rejected where it comes in, naming the field and the index.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

import pytest

from rollmem import AsyncRollingMemory, BufferMemory, Message, RollingMemory, ToolCall, WindowMemory
from rollmem.adapters import from_anthropic, from_openai
from rollmem.errors import InvalidStateError
from rollmem.sessions import AsyncSessions, Sessions
from rollmem.stores import LogEntry, LogWrite, MemoryStore, SQLiteStore

HALF_EMOJI = json.loads('"\\ud83d"')  # what a client cutting "😀" by UTF-16 length sends
BIG = "x" * 10_000_000
DEEP = 100_000


def deep_json(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth


def deep_dict(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def snapshot(memory: Any) -> Any:
    return memory.to_dict()


# -- buffer assignment -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (["oops"], "buffer[0]: expected Message, got str"),
        ("abc", "buffer: expected an iterable of Message, got str"),
        (b"abc", "buffer: expected an iterable of Message, got bytes"),
        ({"role": "user"}, "buffer: expected an iterable of Message, got dict"),
        (5, "buffer: expected an iterable of Message, got int"),
        ([Message("user", "ok"), None], "buffer[1]: expected Message, got NoneType"),
    ],
)
def test_a_bad_buffer_assignment_is_rejected_at_once(value: Any, error: str) -> None:
    memory = RollingMemory(max_tokens=10)
    memory.add_user_message("kept")
    before = snapshot(memory)
    with pytest.raises(TypeError) as raised:
        memory.buffer = value
    assert str(raised.value) == error
    assert snapshot(memory) == before
    memory.add_user_message("still works")
    assert [m.content for m in memory.get_messages()] == ["kept", "still works"]


def test_a_buffer_assignment_from_a_generator_is_taken_whole() -> None:
    memory = WindowMemory(5)
    memory.buffer = (Message("user", str(i)) for i in range(3))
    assert [m.content for m in memory.buffer] == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        (lambda b: b.append("oops"), "buffer[2]: expected Message, got str"),
        (lambda b: b.insert(0, None), "buffer[0]: expected Message, got NoneType"),
        (lambda b: b.insert(-1, 3), "buffer[1]: expected Message, got int"),
        (lambda b: b.insert(99, 3), "buffer[2]: expected Message, got int"),
        (
            lambda b: b.extend([Message("user", "x"), {"role": "user"}]),
            "buffer[3]: expected Message, got dict",
        ),
        (lambda b: b.__iadd__([b"x"]), "buffer[2]: expected Message, got bytes"),
        (lambda b: b.__setitem__(-1, "x"), "buffer[1]: expected Message, got str"),
        (
            lambda b: b.__setitem__(slice(1, None), [Message("user", "y"), 7]),
            "buffer[2]: expected Message, got int",
        ),
        (lambda b: b.__setitem__(slice(None, None, -1), ["x", "y"]), "buffer[1]: expected Message, got str"),
    ],
    ids=[
        "append",
        "insert",
        "insert-negative",
        "insert-past-end",
        "extend",
        "+=",
        "setitem",
        "slice",
        "reversed-slice",
    ],
)
def test_an_in_place_buffer_edit_with_a_non_message_is_rejected_at_once(
    edit: Callable[[Any], Any], error: str
) -> None:
    """``memory.buffer`` is the live list: what an edit would put in it is checked before the edit,
    which then does not happen."""
    memory = RollingMemory(max_tokens=10)
    memory.add_user_message("kept")
    memory.add_assistant_message("also kept")
    before = snapshot(memory)
    with pytest.raises(TypeError) as raised:
        edit(memory.buffer)
    assert str(raised.value) == error
    assert snapshot(memory) == before
    memory.add_user_message("still works")
    assert [m.content for m in memory.get_messages()] == ["kept", "also kept", "still works"]


def test_in_place_buffer_edits_with_messages_still_work() -> None:
    memory = RollingMemory(max_tokens=100)
    memory.add_user_message("a")
    buffer = memory.buffer
    buffer.append(Message("user", "b"))
    buffer.insert(0, Message("system", "s"))
    buffer += [Message("user", "c")]
    buffer[1:2] = [Message("user", "A")]
    buffer.extend(buffer)
    assert [m.content for m in memory.buffer] == ["s", "A", "b", "c"] * 2
    assert memory.stats().buffer_tokens == 8


# -- the text rule ------------------------------------------------------------------------------


def adds() -> dict[str, Callable[[Any], Any]]:
    return {
        "content": lambda m: m.add_user_message("ab" + HALF_EMOJI),
        "id": lambda m: m.add_user_message("ok", id="id-" + HALF_EMOJI),
        "role": lambda m: m.add_message("us" + HALF_EMOJI + "er", "ok"),
        "tool_call_id": lambda m: m.add_tool_message("ok", tool_call_id=HALF_EMOJI),
        "metadata": lambda m: m.add_user_message("ok", metadata={"who": HALF_EMOJI}),
        "metadata.who.name": lambda m: m.add_user_message("ok", metadata={"who": {"name": HALF_EMOJI}}),
        "metadata.tags[1]": lambda m: m.add_user_message("ok", metadata={"tags": ["a", HALF_EMOJI]}),
    }


@pytest.mark.parametrize("field", sorted(adds()))
def test_a_lone_surrogate_is_rejected_at_the_add_naming_the_field(field: str) -> None:
    memory = RollingMemory(max_tokens=100)
    memory.add_user_message("before")
    before = snapshot(memory)
    with pytest.raises(ValueError, match="not valid Unicode") as raised:
        adds()[field](memory)
    expected = "metadata" if field == "metadata" else field
    if field == "metadata":
        expected = "metadata.who"
    assert str(raised.value).startswith(f"{expected}: not valid Unicode (lone surrogate at index ")
    assert snapshot(memory) == before


def test_the_error_gives_the_index_of_the_lone_surrogate() -> None:
    with pytest.raises(ValueError, match=r"^content: not valid Unicode \(lone surrogate at index 3\)$"):
        Message("user", "abc" + HALF_EMOJI)


@pytest.mark.parametrize("field", ["id", "name", "arguments"])
def test_a_lone_surrogate_in_a_tool_call_is_rejected(field: str) -> None:
    values = {"id": "c1", "name": "f", "arguments": "{}", field: HALF_EMOJI}
    with pytest.raises(ValueError, match=rf"^ToolCall\.{field}: not valid Unicode"):
        ToolCall(**values)


def test_a_lone_surrogate_in_a_metadata_key_is_rejected() -> None:
    with pytest.raises(ValueError, match="not valid Unicode"):
        Message("user", "ok", metadata={HALF_EMOJI: 1})


def test_a_full_emoji_and_other_unicode_pass() -> None:
    text = "😀 é 中文 \u2028 \x00"
    message = Message("user", text, id=text, metadata={text: [text]})
    assert Message.from_dict(json.loads(json.dumps(message.to_dict()))) == message


def test_a_summary_assignment_with_a_lone_surrogate_is_rejected() -> None:
    memory = RollingMemory()
    with pytest.raises(ValueError, match=r"^summary: not valid Unicode"):
        memory.summary = HALF_EMOJI
    assert memory.summary == ""


@pytest.mark.parametrize("background", [False, True])
def test_a_summarizer_returning_a_lone_surrogate_fails_the_fold_and_keeps_everything(
    background: bool,
) -> None:
    memory = RollingMemory(max_tokens=1, summarize_fn=lambda s, ms: "half " + HALF_EMOJI)
    memory.add_user_message("a")
    with pytest.raises(ValueError, match="summarize_fn returned a summary that is not valid Unicode"):
        memory.add_user_message("b")
    assert ([m.content for m in memory.buffer], memory.summary) == (["a", "b"], "")

    async def main() -> None:
        amemory = AsyncRollingMemory(
            max_tokens=1, summarize_fn=lambda s, ms: HALF_EMOJI, background=background
        )
        await amemory.add_user_message("a")

        async def add_then_flush() -> None:
            await amemory.add_user_message("b")  # a foreground fold fails in the add
            await amemory.flush()  # a background one in the flush

        with pytest.raises(ValueError, match="not valid Unicode"):
            await add_then_flush()
        assert [m.content for m in amemory.buffer] == ["a", "b"]

    asyncio.run(main())


@pytest.mark.parametrize(
    ("state", "path"),
    [
        ({"version": 2, "summary": HALF_EMOJI, "buffer": []}, "summary"),
        (
            {"version": 2, "summary": "", "buffer": [{"role": "user", "content": HALF_EMOJI}]},
            "buffer[0].content",
        ),
        (
            {"version": 2, "summary": "", "buffer": [{"role": "user", "content": "", "id": HALF_EMOJI}]},
            "buffer[0].id",
        ),
        (
            {
                "version": 2,
                "summary": "",
                "buffer": [{"role": "user", "content": "", "metadata": {"u": {"e": ["x", HALF_EMOJI]}}}],
            },
            "buffer[0].metadata.u.e[1]",
        ),
        (
            {
                "version": 2,
                "summary": "",
                "buffer": [
                    {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "name": HALF_EMOJI}]},
                ],
            },
            "buffer[0].tool_calls[0].name",
        ),
    ],
)
def test_from_dict_rejects_a_lone_surrogate_naming_the_field(state: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidStateError) as raised:
        RollingMemory.from_dict(state)
    assert raised.value.path == path
    assert "not valid Unicode" in str(raised.value)


def test_adapters_name_the_item_with_a_lone_surrogate() -> None:
    with pytest.raises(InvalidStateError, match=r"^items\[1\]\.content: not valid Unicode"):
        from_openai([{"role": "user", "content": "ok"}, {"role": "user", "content": HALF_EMOJI}])
    with pytest.raises(InvalidStateError, match=r"^messages\[0\]\.content: not valid Unicode"):
        from_anthropic(None, [{"role": "user", "content": HALF_EMOJI}])


def test_a_session_block_with_a_rejected_add_still_saves(tmp_path: Any) -> None:
    sessions = Sessions(SQLiteStore(str(tmp_path / "s.db")), lambda: RollingMemory(max_tokens=50))
    with sessions.open("s") as memory:
        memory.add_user_message("good")
        with pytest.raises(ValueError, match="not valid Unicode"):
            memory.add_user_message(HALF_EMOJI)
    saved = sessions.get("s")
    assert saved is not None
    assert [m.content for m in saved.buffer] == ["good"]


def test_a_session_id_with_a_lone_surrogate_is_rejected() -> None:
    sessions = Sessions(MemoryStore(), BufferMemory)
    wording = r"^session_id must be valid Unicode \(lone surrogate at index 0\)$"
    with pytest.raises(ValueError, match=wording), sessions.open(HALF_EMOJI):
        pass
    with pytest.raises(ValueError, match=wording):
        MemoryStore().load(HALF_EMOJI)


# -- sessions: options and stored state --------------------------------------------------------


@pytest.mark.parametrize("ttl", [float("inf"), float("nan"), 10**400, 0, -1])
def test_sessions_reject_a_ttl_no_store_can_keep_at_construction(ttl: Any) -> None:
    with pytest.raises(ValueError, match="ttl must be"):
        Sessions(MemoryStore(), BufferMemory, ttl=ttl)
    with pytest.raises(ValueError, match="ttl must be"):
        AsyncSessions(MemoryStore(), BufferMemory, ttl=ttl)


@pytest.mark.parametrize(
    "message",
    [deep_json(), '{"role": "user", "content": "", "metadata": ' + '{"a": ' * 50_000 + "{}" + "}" * 50_001],
)
def test_a_deeply_nested_logged_message_raises_invalid_state_naming_the_session(message: str) -> None:
    store = MemoryStore()
    store.write("deep", LogWrite("", (LogEntry(message, -1),), create=True))
    sessions = Sessions(store, BufferMemory)
    with pytest.raises(InvalidStateError, match=r"^session 'deep': buffer\[0\]"), sessions.open("deep"):
        pass


def test_deeply_nested_metadata_is_rejected_at_once() -> None:
    memory = BufferMemory()
    with pytest.raises(InvalidStateError, match=r"^metadata: nested too deeply$"):
        memory.add_user_message("x", metadata=deep_dict(5_000))
    assert memory.buffer == []


# -- metadata is frozen all the way down -------------------------------------------------------


def test_nested_metadata_cannot_be_changed_through_to_dict() -> None:
    memory = RollingMemory()
    memory.add_user_message("hi", metadata={"u": {"email": "a@b", "tags": ["x"]}})
    exported = memory.to_dict()
    exported["buffer"][0]["metadata"]["u"]["email"] = "***"
    exported["buffer"][0]["metadata"]["u"]["tags"].append("y")
    assert memory.buffer[0].metadata == {"u": {"email": "a@b", "tags": ["x"]}}


def test_nested_metadata_cannot_be_changed_in_place() -> None:
    message = Message("user", "hi", metadata={"u": {"email": "a@b", "tags": ["x"]}})
    with pytest.raises(TypeError, match="read-only"):
        message.metadata["u"]["email"] = "***"
    with pytest.raises(TypeError, match="read-only"):
        message.metadata["u"]["tags"].append("y")
    assert message.metadata == {"u": {"email": "a@b", "tags": ["x"]}}


def test_the_caller_keeps_no_reference_into_a_message() -> None:
    nested = {"email": "a@b", "tags": ["x"]}
    data = {
        "version": 2,
        "summary": "",
        "buffer": [{"role": "user", "content": "hi", "metadata": {"u": nested}}],
    }
    memory = RollingMemory.from_dict(data)
    message = Message("user", "hi", metadata={"u": nested})
    nested["email"] = "***"
    nested["tags"].append("y")  # type: ignore[attr-defined]
    assert memory.buffer[0].metadata["u"] == {"email": "a@b", "tags": ["x"]}
    assert message.metadata["u"] == {"email": "a@b", "tags": ["x"]}


def test_frozen_metadata_pickles_and_serializes() -> None:
    import pickle

    message = Message("user", "hi", metadata={"u": {"tags": ["x", {"k": "v"}]}, "t": (1, 2)})
    assert pickle.loads(pickle.dumps(message)) == message
    assert json.loads(json.dumps(message.to_dict()))["metadata"] == {
        "u": {"tags": ["x", {"k": "v"}]},
        "t": [1, 2],
    }
    assert message.metadata == {"u": {"tags": ["x", {"k": "v"}]}, "t": (1, 2)}


# -- the rest of the hostile corpus: stored and given back losslessly ---------------------------


@pytest.mark.parametrize(
    "text",
    ["nul\x00inside", "\ufeffbom", "\u2028line\u2029sep", "😀" * 1000, BIG],
    ids=["nul", "bom", "separators", "emoji", "10MB"],
)
def test_odd_but_valid_text_round_trips_through_a_session(text: str, tmp_path: Any) -> None:
    sessions = Sessions(SQLiteStore(str(tmp_path / "s.db")), lambda: RollingMemory(max_tokens=10**9))
    with sessions.open("s") as memory:
        memory.add_user_message(text, metadata={"copy": text[:100]})
    saved = sessions.get("s")
    assert saved is not None
    assert saved.buffer[0].content == text
    assert saved.buffer[0].metadata == {"copy": text[:100]}


def test_nan_in_metadata_round_trips_through_a_session() -> None:
    sessions = Sessions(MemoryStore(), BufferMemory)
    with sessions.open("s") as memory:
        memory.add_user_message("x", metadata={"score": float("nan"), "big": float("inf")})
    saved = sessions.get("s")
    assert saved is not None
    score = saved.buffer[0].metadata["score"]
    assert score != score  # NaN
    assert saved.buffer[0].metadata["big"] == float("inf")


# -- smaller ones --------------------------------------------------------------------------------


def test_tool_calls_none_names_the_field() -> None:
    memory = RollingMemory()
    with pytest.raises(TypeError, match=r"^tool_calls: expected a sequence of ToolCall, got None$"):
        memory.add_message("assistant", "x", tool_calls=None)  # type: ignore[arg-type]
    assert memory.buffer == []


def overhead_counter(text: str) -> int:
    return len(text.split()) + 3  # like tiktoken_counter(overhead=3)


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_summarizers_refuse_a_limit_the_counter_overhead_fills(limit: int) -> None:
    from rollmem.summarizers import async_prompt_summarizer, extractive_summarizer, prompt_summarizer

    with pytest.raises(ValueError, match=rf"^max_summary_tokens: {limit} leaves no room"):
        extractive_summarizer(limit, overhead_counter)
    with pytest.raises(ValueError, match="leaves no room"):
        prompt_summarizer(lambda prompt: "x", max_summary_tokens=limit, token_counter=overhead_counter)
    with pytest.raises(ValueError, match="leaves no room"):
        async_prompt_summarizer(_complete, max_summary_tokens=limit, token_counter=overhead_counter)


async def _complete(prompt: str) -> str:
    return "x"


def test_summarizers_accept_a_limit_just_above_the_overhead() -> None:
    from rollmem.summarizers import extractive_summarizer

    summarize = extractive_summarizer(4, overhead_counter)
    assert summarize("", [Message("user", "hello there. more")]) == "user:"

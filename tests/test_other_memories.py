"""BufferMemory, WindowMemory, SummaryMemory and AsyncSummaryMemory."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

import pytest

from rollmem import AsyncSummaryMemory, BufferMemory, SummaryMemory, WindowMemory
from rollmem.changes import Appended, Dropped, Folded, Unpinned
from rollmem.message import Message, ToolCall


def contents(mem: Any) -> list[str]:
    return [m.content for m in mem.buffer]


def state(contents: Sequence[str], summary: str = "") -> dict[str, Any]:
    return {"version": 2, "summary": summary, "buffer": [{"role": "user", "content": c} for c in contents]}


# --- BufferMemory ------------------------------------------------------------------------------------------


def test_buffer_memory_takes_no_arguments() -> None:
    with pytest.raises(TypeError):
        BufferMemory(10)  # type: ignore[call-arg]


def test_buffer_memory_keeps_everything() -> None:
    mem = BufferMemory()
    for i in range(500):
        mem.add_user_message(f"u{i}")
        mem.add_assistant_message(f"a{i}")
    assert len(mem.buffer) == 1000
    assert mem.buffer[0] == Message("user", "u0")
    assert mem.get_messages() == mem.buffer
    assert mem.summary == ""


def test_buffer_memory_add_helpers_and_reads() -> None:
    mem = BufferMemory()
    call = ToolCall("c1", "now")
    assert mem.add_system_message("sys", id="s") == Message("system", "sys", id="s")
    mem.add_user_message("hi", metadata={"k": 1}, pinned=True)
    mem.add_assistant_message("", tool_calls=[call])
    mem.add_tool_message("12:00", tool_call_id="c1")
    mem.add_message("narrator", "meanwhile")
    assert [m.role for m in mem.buffer] == ["system", "user", "assistant", "tool", "narrator"]
    assert (
        mem.get_context()
        == "system: sys\nuser: hi\nassistant:  [tool calls: now()]\ntool: 12:00\nnarrator: meanwhile"
    )
    mem.clear()
    assert mem.buffer == []


def test_buffer_memory_keeps_a_loaded_summary() -> None:
    mem = BufferMemory.from_dict(state(["a"], "earlier"))
    assert mem.get_messages() == [Message("system", "earlier"), Message("user", "a")]
    mem.add_user_message("b")
    assert mem.summary == "earlier"
    assert mem.to_dict() == state(["a", "b"], "earlier")
    mem.clear()
    assert mem.to_dict() == state([], "")


def test_buffer_memory_stats_have_no_token_fields() -> None:
    mem = BufferMemory()
    mem.add_user_message("a", pinned=True)
    mem.add_user_message("b c")
    assert mem.stats().to_dict() == {
        "messages": 2,
        "pinned": 1,
        "buffer_tokens": None,
        "summary_tokens": None,
        "max_tokens": None,
        "target_tokens": None,
        "folds": 0,
        "summarizer_calls": 0,
        "failed_folds": 0,
        "messages_summarized": 0,
        "messages_dropped": 0,
    }


def test_buffer_memory_rejects_bad_input() -> None:
    mem = BufferMemory()
    with pytest.raises(TypeError, match="content"):
        mem.add_message("user", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"messages\[1\]"):
        mem.extend([Message("user", "a"), {"role": "user", "content": "b"}])  # type: ignore[list-item]
    assert mem.buffer == []


# --- WindowMemory -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "error"),
    [(0, ValueError), (-3, ValueError), ("3", TypeError), (True, TypeError), (2.5, TypeError)],
)
def test_window_size_is_checked(bad: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="max_messages"):
        WindowMemory(bad)
    with pytest.raises(error, match="max_messages"):
        WindowMemory.from_dict(state([]), max_messages=bad)


def test_window_keeps_the_most_recent_messages() -> None:
    gone: list[list[str]] = []
    mem = WindowMemory(3, on_evict=lambda ms: gone.append([m.content for m in ms]))
    for i in range(6):
        mem.add_user_message(f"u{i}")
    assert contents(mem) == ["u3", "u4", "u5"]
    assert gone == [["u0"], ["u1"], ["u2"]]
    assert mem.summary == ""
    stats = mem.stats()
    assert (stats.messages, stats.folds, stats.messages_dropped, stats.summarizer_calls) == (3, 3, 3, 0)
    assert stats.buffer_tokens is None
    assert stats.max_tokens is None


def test_window_keyword_argument() -> None:
    mem = WindowMemory(max_messages=1)
    mem.add_user_message("a")
    mem.add_user_message("b")
    assert contents(mem) == ["b"]


def test_window_from_dict_restores_verbatim_then_trims_on_the_next_add() -> None:
    mem = WindowMemory.from_dict(state(["a", "b", "c", "d"], "old summary"), max_messages=2)
    assert contents(mem) == ["a", "b", "c", "d"]
    mem.add_user_message("e")
    assert contents(mem) == ["d", "e"]
    assert mem.get_messages()[0] == Message("system", "old summary")
    assert mem.to_dict() == state(["d", "e"], "old summary")


def test_window_extend_trims_once() -> None:
    gone: list[list[str]] = []
    mem = WindowMemory(2, on_evict=lambda ms: gone.append([m.content for m in ms]))
    mem.extend([Message("user", c) for c in "abcde"])
    assert contents(mem) == ["d", "e"]
    assert gone == [["a", "b", "c"]]


def test_window_keeps_pinned_messages() -> None:
    mem = WindowMemory(2)
    mem.add_system_message("rules", pinned=True)
    for i in range(5):
        mem.add_user_message(f"u{i}")
    assert contents(mem) == ["rules", "u4"]


# --- SummaryMemory --------------------------------------------------------------------------------------


def test_summary_memory_requires_a_summarizer() -> None:
    with pytest.raises(ValueError, match="summarize_fn"):
        SummaryMemory(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="summarize_fn"):
        AsyncSummaryMemory(None)  # type: ignore[arg-type]


async def _async_summarize(summary: str, messages: Sequence[Message]) -> str:
    return summary


def test_summary_memory_refuses_coroutine_functions() -> None:
    with pytest.raises(TypeError, match="AsyncSummaryMemory"):
        SummaryMemory(_async_summarize)
    with pytest.raises(TypeError, match="AsyncSummaryMemory"):
        SummaryMemory.from_dict(state([]), summarize_fn=_async_summarize)


class _AsyncCall:
    async def __call__(self, summary: str, messages: Sequence[Message]) -> str:
        return "never"


def test_summary_memory_refuses_awaitable_results() -> None:
    mem = SummaryMemory(_AsyncCall())
    with pytest.raises(TypeError, match="AsyncSummaryMemory"):
        mem.add_user_message("a")
    gc.collect()
    assert contents(mem) == ["a"]
    assert mem.summary == ""


def test_summary_memory_folds_every_add(recorder: Any) -> None:
    mem = SummaryMemory(recorder)
    assert mem.get_messages() == []
    assert mem.add_user_message("a") == Message("user", "a")
    assert mem.buffer == []
    assert mem.summary == "a"
    assert mem.get_messages() == [Message("system", "a")]
    mem.add_assistant_message("b")
    assert recorder.calls == [("", (Message("user", "a"),)), ("a", (Message("assistant", "b"),))]
    assert mem.get_context() == "system: a|b"


def test_summary_memory_failure_keeps_the_message_for_the_next_add(recorder: Any) -> None:
    mem = SummaryMemory(recorder)
    mem.add_user_message("a")
    recorder.fail = True
    with pytest.raises(RuntimeError, match="summarizer down"):
        mem.add_user_message("b")
    assert contents(mem) == ["b"]
    assert mem.get_messages() == [Message("system", "a"), Message("user", "b")]
    recorder.fail = False
    mem.add_user_message("c")
    assert recorder.calls[-1] == ("a", (Message("user", "b"), Message("user", "c")))
    assert mem.summary == "a|b|c"
    assert mem.buffer == []
    stats = mem.stats()
    assert (stats.folds, stats.summarizer_calls, stats.failed_folds, stats.messages_summarized) == (
        2,
        3,
        1,
        3,
    )


def test_summary_memory_shows_an_unfolded_message_before_any_summary(failing_summarizer: Any) -> None:
    mem = SummaryMemory(failing_summarizer)
    with pytest.raises(RuntimeError):
        mem.add_user_message("a")
    assert mem.get_messages() == [Message("user", "a")]


def test_summary_memory_non_str_result(recorder: Any) -> None:
    mem = SummaryMemory(lambda s, m: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="str"):
        mem.add_user_message("a")
    assert contents(mem) == ["a"]
    assert mem.summary == ""


def test_summary_memory_from_dict_restores_verbatim(recorder: Any) -> None:
    mem = SummaryMemory.from_dict(state(["a", "b"], "s"), summarize_fn=recorder)
    assert recorder.calls == []
    assert mem.get_messages() == [Message("system", "s"), Message("user", "a"), Message("user", "b")]
    mem.add_user_message("c")
    assert recorder.calls == [("s", (Message("user", "a"), Message("user", "b"), Message("user", "c")))]
    assert mem.to_dict() == state([], "s|a|b|c")


def test_summary_memory_extend_folds_once(recorder: Any) -> None:
    evicted: list[list[str]] = []
    mem = SummaryMemory(recorder, on_evict=lambda ms: evicted.append([m.content for m in ms]))
    mem.extend([Message("user", c) for c in "xyz"])
    assert len(recorder.calls) == 1
    assert mem.summary == "x|y|z"
    assert evicted == [["x", "y", "z"]]


def test_summary_memory_keeps_pinned_messages(recorder: Any) -> None:
    mem = SummaryMemory(recorder)
    mem.add_system_message("rules", pinned=True, id="r")
    mem.add_user_message("a")
    assert recorder.calls == [("", (Message("user", "a"),))]
    assert mem.get_messages() == [Message("system", "a"), Message("system", "rules", id="r", pinned=True)]
    mem.unpin("r")
    mem.add_user_message("b")
    assert mem.buffer == []
    assert mem.summary == "a|rules|b"


# --- AsyncSummaryMemory ----------------------------------------------------------------------------------


async def test_async_summary_memory_with_a_coroutine_summarizer(async_recorder: Any) -> None:
    mem = AsyncSummaryMemory(async_recorder.summarize)
    assert await mem.add_user_message("a") == Message("user", "a")
    await mem.add_assistant_message("b")
    await mem.add_system_message("c")
    await mem.add_tool_message("d", tool_call_id="x")
    await mem.add_message("narrator", "e")
    await mem.extend([Message("user", "f"), Message("user", "g")])
    assert mem.summary == "a|b|c|d|e|f|g"
    assert mem.buffer == []
    assert mem.get_messages() == [Message("system", "a|b|c|d|e|f|g")]
    assert len(async_recorder.calls) == 6


async def test_async_summary_memory_with_a_plain_summarizer(recorder: Any) -> None:
    mem = AsyncSummaryMemory(recorder)
    await mem.add_user_message("a")
    await mem.add_user_message("b")
    assert mem.summary == "a|b"


async def test_async_summary_memory_failure_then_recovery(async_recorder: Any) -> None:
    mem = AsyncSummaryMemory(async_recorder.summarize)
    await mem.add_user_message("a")
    async_recorder.fail = True
    with pytest.raises(RuntimeError, match="summarizer down"):
        await mem.add_user_message("b")
    assert mem.get_messages() == [Message("system", "a"), Message("user", "b")]
    async_recorder.fail = False
    await mem.add_user_message("c")
    assert mem.summary == "a|b|c"
    assert await mem.fold() == 0
    assert [len(batch) for _, batch in async_recorder.calls] == [1, 1, 2]


async def test_async_summary_memory_fold_after_failure(async_recorder: Any) -> None:
    mem = AsyncSummaryMemory.from_dict(state(["a", "b"]), summarize_fn=async_recorder.summarize)
    assert mem.buffer == [Message("user", "a"), Message("user", "b")]
    assert await mem.fold(keep_last=1) == 1
    assert mem.to_dict() == state(["b"], "a")


# --- one format for all -----------------------------------------------------------------------------------

FULL_STATE = {
    "version": 2,
    "summary": "so far",
    "buffer": [
        {"role": "system", "content": "rules", "pinned": True},
        {"role": "user", "content": "weather?", "id": "u1", "metadata": {"lang": "en"}},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "weather", "arguments": "{}"}],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
    ],
}


@pytest.mark.parametrize(
    ("cls", "config"),
    [
        (BufferMemory, {}),
        (WindowMemory, {"max_messages": 1}),
        (SummaryMemory, {"summarize_fn": lambda s, m: s}),
        (AsyncSummaryMemory, {"summarize_fn": lambda s, m: s}),
    ],
)
def test_every_class_round_trips_the_same_state(cls: Any, config: dict[str, Any]) -> None:
    mem = cls.from_dict(FULL_STATE, **config)
    assert mem.to_dict() == FULL_STATE
    assert mem.get_messages()[0] == Message("system", "so far")
    assert len(mem.get_messages()) == 5


# --- the change record (rollmem.changes, used by rollmem.sessions) ---------------------------------------


@pytest.mark.parametrize(
    "make",
    [lambda: BufferMemory(), lambda: WindowMemory(2), lambda: SummaryMemory(lambda s, m: s + str(len(m)))],
    ids=["BufferMemory", "WindowMemory", "SummaryMemory"],
)
def test_record_and_replay(make: Any) -> None:
    source = make()
    with source.record() as changes:
        first = source.add_user_message("a", id="a", pinned=True)
        source.add_assistant_message("b")
        source.unpin("a")
        source.pin("a")
        source.extend([Message("user", "c")])
        source.add_user_message("d")
    assert isinstance(changes[0], Appended)
    assert changes[0].messages == (first,)
    kinds = [type(change).__name__ for change in changes if not isinstance(change, (Folded, Dropped))]
    assert kinds == ["Appended", "Appended", "Unpinned", "Pinned", "Appended", "Appended"]
    target = make()
    target.replay(changes)
    assert target.to_dict() == source.to_dict()


async def test_async_record_and_replay(recorder: Any) -> None:
    source = AsyncSummaryMemory(lambda s, m: s + str(len(m)))
    with source.record() as changes:
        await source.add_user_message("a", id="a", pinned=True)
        await source.add_user_message("b")
        source.unpin("a")
        await source.fold()
    assert changes == [
        Appended((Message("user", "a", id="a", pinned=True),), (0,)),
        Appended((Message("user", "b"),), (0,)),
        Folded("1", (1,), (Message("user", "b"),)),
        Unpinned("a"),
        Folded("11", (0,), (Message("user", "a", id="a"),), keep_last=0),
    ]
    target = AsyncSummaryMemory(lambda s, m: s + str(len(m)))
    await target.replay(changes)
    assert target.to_dict() == source.to_dict() == {"version": 2, "summary": "11", "buffer": []}

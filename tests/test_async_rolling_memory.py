"""AsyncRollingMemory: the same contract as RollingMemory, with coroutine adds."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Callable

import pytest

from rollmem import AsyncRollingMemory, RollingMemory
from rollmem.changes import Appended, Cleared, Folded, SummaryAssigned
from rollmem.message import Message, ToolCall


def contents(mem: Any) -> list[str]:
    return [m.content for m in mem.buffer]


def test_defaults_and_reads_are_plain() -> None:
    mem = AsyncRollingMemory()
    assert mem.max_tokens == 2000
    assert mem.summary == ""
    assert mem.get_messages() == []
    assert mem.get_context() == ""
    mem.clear()
    assert mem.to_dict() == {"version": 2, "summary": "", "buffer": []}


@pytest.mark.parametrize(
    ("bad", "error"), [(0, ValueError), (-2, ValueError), ("5", TypeError), (True, TypeError)]
)
def test_max_tokens_is_checked(bad: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="max_tokens"):
        AsyncRollingMemory(max_tokens=bad)


async def test_add_helpers(char_counter: Callable[[str], int]) -> None:
    mem = AsyncRollingMemory(token_counter=char_counter)
    call = ToolCall("c1", "f", "1")
    assert await mem.add_user_message("u", id="1", metadata={"k": 1}) == Message(
        "user", "u", id="1", metadata={"k": 1}
    )
    await mem.add_assistant_message("", tool_calls=[call])
    await mem.add_tool_message("r", tool_call_id="c1")
    await mem.add_system_message("s", pinned=True)
    await mem.add_message("narrator", "n", id="n")
    assert mem.buffer == [
        Message("user", "u", id="1", metadata={"k": 1}),
        Message("assistant", "", tool_calls=(ToolCall("c1", "f", "1"),)),
        Message("tool", "r", tool_call_id="c1"),
        Message("system", "s", pinned=True),
        Message("narrator", "n", id="n"),
    ]


async def test_default_counter_counts_words() -> None:
    mem = AsyncRollingMemory(max_tokens=3)
    await mem.add_user_message("a b")
    await mem.add_user_message("c d")
    assert contents(mem) == ["c d"]


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_folds_with_either_kind_of_summarizer(
    char_counter: Callable[[str], int], async_recorder: Any, kind: str
) -> None:
    summarize = async_recorder.summarize if kind == "async" else async_recorder.__call__
    mem = AsyncRollingMemory(max_tokens=10, summarize_fn=summarize, token_counter=char_counter)
    await mem.add_user_message("aaaa")
    await mem.add_assistant_message("bbbb")
    await mem.add_user_message("cc")
    await mem.add_assistant_message("d")
    assert async_recorder.calls == [("", (Message("user", "aaaa"), Message("assistant", "bbbb")))]
    assert mem.summary == "aaaa|bbbb"
    assert contents(mem) == ["cc", "d"]


async def test_failure_keeps_everything(char_counter: Callable[[str], int], async_recorder: Any) -> None:
    mem = AsyncRollingMemory(max_tokens=6, summarize_fn=async_recorder.summarize, token_counter=char_counter)
    await mem.add_user_message("aaa")
    await mem.add_user_message("bbb")
    async_recorder.fail = True
    with pytest.raises(RuntimeError, match="summarizer down"):
        await mem.add_user_message("ccc")
    assert contents(mem) == ["aaa", "bbb", "ccc"]
    assert mem.summary == ""
    async_recorder.fail = False
    await mem.add_user_message("ddd")
    assert mem.summary == "aaa|bbb"
    assert contents(mem) == ["ccc", "ddd"]


async def test_non_str_summary_is_refused(char_counter: Callable[[str], int]) -> None:
    async def bad(summary: str, messages: Sequence[Message]) -> Any:
        return 7

    mem = AsyncRollingMemory(max_tokens=3, summarize_fn=bad, token_counter=char_counter)
    await mem.add_user_message("ab")
    with pytest.raises(TypeError, match="str"):
        await mem.add_user_message("cd")
    assert contents(mem) == ["ab", "cd"]
    assert mem.summary == ""


async def test_bad_input_changes_nothing() -> None:
    def counter(text: str) -> int:
        return -1 if text == "negative" else 1

    mem = AsyncRollingMemory(token_counter=counter)
    await mem.add_user_message("ok")
    with pytest.raises(TypeError, match="role"):
        await mem.add_message(None, "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="token_counter"):
        await mem.add_user_message("negative")
    with pytest.raises(TypeError, match=r"messages\[0\]"):
        await mem.extend(["x"])  # type: ignore[list-item]
    assert contents(mem) == ["ok"]


async def test_async_on_evict_is_awaited(char_counter: Callable[[str], int]) -> None:
    seen: list[list[str]] = []

    async def on_evict(messages: Sequence[Message]) -> None:
        await asyncio.sleep(0)
        seen.append([m.content for m in messages])

    mem = AsyncRollingMemory(max_tokens=2, token_counter=char_counter, on_evict=on_evict)
    await mem.add_user_message("a")
    await mem.add_user_message("b")
    await mem.add_user_message("c")
    assert seen == [["a"]]


def test_usable_from_successive_event_loops(char_counter: Callable[[str], int], recorder: Any) -> None:
    """Built outside any loop, then used by two ``asyncio.run`` calls in turn."""
    mem = AsyncRollingMemory(max_tokens=2, summarize_fn=recorder, token_counter=char_counter)

    async def add(*texts: str) -> None:
        await asyncio.gather(*(mem.add_user_message(text) for text in texts))

    asyncio.run(add("a", "b", "c"))
    asyncio.run(add("d", "e"))
    assert mem.summary + "|" + "|".join(contents(mem)) == "a|b|c|d|e"


def test_state_moves_between_the_twins(char_counter: Callable[[str], int]) -> None:
    sync = RollingMemory(token_counter=char_counter)
    sync.summary = "s"
    sync.add_assistant_message("", tool_calls=[ToolCall("c1", "f")], pinned=True)
    sync.add_tool_message("r", tool_call_id="c1", metadata={"k": 1})
    twin = AsyncRollingMemory.from_dict(sync.to_dict(), token_counter=char_counter)
    assert twin.to_dict() == sync.to_dict()
    assert twin.get_messages() == sync.get_messages()
    back = RollingMemory.from_dict(twin.to_dict())
    assert back.buffer == sync.buffer


async def test_fold_and_extend(async_recorder: Any, char_counter: Callable[[str], int]) -> None:
    mem = AsyncRollingMemory(
        max_tokens=100, summarize_fn=async_recorder.summarize, token_counter=char_counter
    )
    assert await mem.extend([Message("user", c) for c in "abcd"]) is None
    assert async_recorder.calls == []
    assert await mem.fold(keep_last=1) == 3
    assert await mem.fold(keep_last=1) == 0
    assert mem.summary == "a|b|c"
    assert contents(mem) == ["d"]
    assert len(async_recorder.calls) == 1


class _AsyncCall:
    """A summarizer object whose ``__call__`` is a coroutine function."""

    async def __call__(self, summary: str, messages: Sequence[Message]) -> str:
        await asyncio.sleep(0)
        return summary + "".join(m.content for m in messages)


async def test_an_object_with_async_call_is_awaited(char_counter: Callable[[str], int]) -> None:
    mem = AsyncRollingMemory(max_tokens=2, summarize_fn=_AsyncCall(), token_counter=char_counter)
    for c in "abcd":
        await mem.add_user_message(c)
    assert (mem.summary, contents(mem)) == ("ab", ["c", "d"])


async def test_record_and_replay(char_counter: Callable[[str], int]) -> None:
    def summarize(summary: str, messages: Sequence[Message]) -> str:
        return summary + "*" * len(messages)

    source = AsyncRollingMemory(max_tokens=3, summarize_fn=summarize, token_counter=char_counter)
    with source.record() as changes:
        await source.add_user_message("ab", id="x")
        await source.extend([Message("user", "cd")])
        source.summary = "S"
        source.clear()
        await source.add_user_message("e")
    assert changes == [
        Appended((Message("user", "ab", id="x"),), (2,)),
        Appended((Message("user", "cd"),), (2,)),
        Folded("*", (0,), (Message("user", "ab", id="x"),)),
        SummaryAssigned("S"),
        Cleared(),
        Appended((Message("user", "e"),), (1,)),
    ]
    target = AsyncRollingMemory(max_tokens=3, summarize_fn=summarize, token_counter=char_counter)
    await target.replay(changes)
    assert (
        target.to_dict()
        == source.to_dict()
        == {"version": 2, "summary": "", "buffer": [{"role": "user", "content": "e"}]}
    )


async def test_from_dict_takes_the_same_configuration(
    char_counter: Callable[[str], int], recorder: Any
) -> None:
    data = {"version": 1, "summary": "", "buffer": [{"role": "user", "content": "abc"}]}
    mem = AsyncRollingMemory.from_dict(
        data,
        max_tokens=4,
        target_tokens=2,
        summarize_fn=recorder,
        token_counter=char_counter,
        background=True,
    )
    await mem.add_user_message("de")
    await mem.flush()
    assert (mem.summary, contents(mem), mem.target_tokens) == ("abc", ["de"], 2)

"""The public change record: what each public mutation records, and mirroring with replay."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Callable

import pytest

from rollmem.changes import (
    Appended,
    BufferAssigned,
    Cleared,
    Dropped,
    Folded,
    Pinned,
    SummaryAssigned,
    Unpinned,
)
from rollmem.memory import AsyncSummaryMemory, BufferMemory, RollingMemory, SummaryMemory, WindowMemory
from rollmem.message import Message


def stars(summary: str, messages: Sequence[Message]) -> str:
    return summary + "*" * len(messages)


def test_every_public_mutation_is_recorded(char_counter: Callable[[str], int]) -> None:
    mem = RollingMemory(max_tokens=100, summarize_fn=stars, token_counter=char_counter)
    mem.add_user_message("before")
    with mem.record() as changes:
        u = mem.add_user_message("hi", id="u1")
        batch = (Message("assistant", "yo", id="a1"), Message("user", "more"))
        mem.extend(batch)
        mem.pin("u1")
        mem.unpin("u1")
        assert mem.fold(keep_last=1) == 3
        mem.summary = "S"
        mem.buffer = [Message("user", "fresh")]
        mem.clear()
    mem.add_user_message("after")
    before = Message("user", "before")
    assert changes == [
        Appended((u,), (2,)),
        Appended(batch, (2, 4)),
        Pinned("u1"),
        Unpinned("u1"),
        Folded("***", (0, 1, 2), (before, u, batch[0]), keep_last=1),
        SummaryAssigned("S"),
        BufferAssigned((Message("user", "fresh"),)),
        Cleared(),
    ]
    assert changes[4].count == 3


def test_automatic_folds_keep_pinned_units_and_name_their_positions(
    char_counter: Callable[[str], int],
) -> None:
    mem = RollingMemory(max_tokens=6, summarize_fn=stars, token_counter=char_counter)
    with mem.record() as changes:
        mem.add_user_message("aa", id="a", pinned=True)
        mem.add_user_message("bb")
        mem.add_user_message("cc")
        mem.add_user_message("dd")
    folds = [change for change in changes if isinstance(change, Folded)]
    assert folds == [Folded("*", (1,), (Message("user", "bb"),))]
    assert [m.content for m in mem.buffer] == ["aa", "cc", "dd"]


@pytest.mark.parametrize(
    "make",
    [
        lambda: BufferMemory(),
        lambda: WindowMemory(2),
        lambda: SummaryMemory(stars),
        lambda: RollingMemory(6, stars, len),
        lambda: RollingMemory(6, None, len),
    ],
    ids=["BufferMemory", "WindowMemory", "SummaryMemory", "RollingMemory", "RollingMemory-drop"],
)
def test_replay_mirrors_any_memory(make: Any) -> None:
    source, mirror = make(), make()
    source.add_user_message("start")
    mirror.restore(source.to_dict())
    with source.record() as changes:
        source.add_user_message("a", id="a", pinned=True)
        source.add_assistant_message("b")
        source.unpin("a")
        source.pin("a")
        source.extend([Message("user", "c"), Message("user", "dd")])
        source.add_user_message("eeee")
        source.summary = source.summary + "!"
    mirror.replay(changes)
    assert mirror.to_dict() == source.to_dict()


def test_window_evictions_are_drops() -> None:
    mem = WindowMemory(1)
    with mem.record() as changes:
        mem.add_user_message("a")
        mem.add_user_message("b")
    assert changes[-1] == Dropped((0,), (Message("user", "a"),))


def test_records_nest_and_end_with_their_block() -> None:
    mem = BufferMemory()
    with mem.record() as outer:
        mem.add_user_message("a")
        with mem.record() as inner:
            mem.add_user_message("b")
    mem.add_user_message("c")
    assert [c.messages[0].content for c in outer if isinstance(c, Appended)] == ["a", "b"]
    assert [c.messages[0].content for c in inner if isinstance(c, Appended)] == ["b"]


def test_async_memory_records_folds() -> None:
    async def main() -> list[Any]:
        mem = AsyncSummaryMemory(stars)
        with mem.record() as changes:
            await mem.add_user_message("a", id="a", pinned=True)
            await mem.add_user_message("b")
            mem.unpin("a")
            await mem.fold()
        return changes

    changes = asyncio.run(main())
    assert [type(c).__name__ for c in changes] == ["Appended", "Appended", "Folded", "Unpinned", "Folded"]
    assert changes[-1].keep_last == 0


def test_replay_rejects_what_is_not_a_change() -> None:
    mem = BufferMemory()
    with pytest.raises(TypeError, match=r"^changes\[1\]: expected a rollmem\.changes record, got str$"):
        mem.replay([Cleared(), "x"])  # type: ignore[list-item]
    assert mem.buffer == []


def test_restore_takes_costs_without_counting() -> None:
    calls: list[str] = []

    def counter(text: str) -> int:
        calls.append(text)
        return 1

    mem = RollingMemory(100, token_counter=counter)
    two = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    mem.restore({"version": 2, "summary": "s", "buffer": two}, costs=[5, 7])
    assert calls == []
    assert mem.costs() == [5, 7]
    assert mem.stats().buffer_tokens == 12
    with pytest.raises(ValueError, match="costs: expected 1 costs, got 2"):
        mem.restore({"version": 2, "summary": "", "buffer": two[:1]}, costs=[1, 2])
    with pytest.raises(ValueError, match=r"^costs\[1\] must be >= 0, got -1$"):
        mem.restore({"version": 2, "summary": "", "buffer": two}, costs=[1, -1])
    assert mem.summary == "s"

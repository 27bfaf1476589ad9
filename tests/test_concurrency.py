"""Threads and tasks: nothing lost, duplicated or reordered; serialized folds; clear wins; cancellation."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any, Callable

import pytest

from rollmem import AsyncRollingMemory, AsyncSummaryMemory, RollingMemory
from rollmem.message import Message

WAIT = 10.0  # seconds: only reached when something hangs


def check_no_loss(added: Sequence[Message], folded: Sequence[Message], buffer: Sequence[Message]) -> None:
    """Every message is folded once or in the buffer, once; each writer's messages keep their order."""
    seen = [m.content for m in [*folded, *buffer]]
    assert sorted(seen) == sorted(m.content for m in added)
    writers: dict[str, list[int]] = {}
    for content in seen:
        writer, number = content.split("-")
        writers.setdefault(writer, []).append(int(number))
    for numbers in writers.values():
        assert numbers == sorted(numbers)


def check_summary_chain(rec: Any, summary: str) -> None:
    """Folds ran one at a time: each call got the summary the previous one produced."""
    previous = ""
    for (given, _), result in zip(rec.calls, rec.results):
        if result is None:
            continue
        assert given == previous
        previous = result
    assert summary == previous


# --- threads --------------------------------------------------------------------------------------------


def run_writers(writer: Callable[[str], None], count: int, prefix: str) -> None:
    """Run ``writer(name)`` in ``count`` threads at once and wait for all of them."""
    threads = [threading.Thread(target=writer, args=(f"{prefix}{k}",)) for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 6)
    assert not any(thread.is_alive() for thread in threads)


def test_threads_adding_concurrently_with_a_slow_summarizer(make_recorder: Callable[..., Any]) -> None:
    rec = make_recorder(delay=0.0005)
    evicted: list[Message] = []
    mem = RollingMemory(max_tokens=60, summarize_fn=rec, token_counter=len, on_evict=evicted.extend)
    added: list[Message] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def writer(name: str) -> None:
        start.wait()
        for i in range(150):
            m = mem.add_user_message(f"{name}-{i}") if i % 2 else mem.add_assistant_message(f"{name}-{i}")
            with lock:
                added.append(m)

    run_writers(writer, 8, "t")
    assert len(added) == 1200
    check_no_loss(added, rec.folded, mem.buffer)
    check_summary_chain(rec, mem.summary)
    assert evicted == rec.folded
    mem.add_user_message("main-0")
    assert mem.stats().buffer_tokens <= 60


def test_threads_with_a_flaky_summarizer(make_recorder: Callable[..., Any]) -> None:
    rec = make_recorder()
    calls = [0]
    call_lock = threading.Lock()

    def flaky(summary: str, messages: Sequence[Message]) -> str:
        with call_lock:
            calls[0] += 1
            rec.fail = calls[0] % 3 == 0
            return str(rec(summary, messages))

    mem = RollingMemory(max_tokens=40, summarize_fn=flaky, token_counter=len)
    added: list[Message] = []
    lock = threading.Lock()

    def writer(name: str) -> None:
        for i in range(100):
            m = Message("user", f"{name}-{i}")
            try:
                assert mem.add_user_message(m.content) == m
            except RuntimeError as error:  # the fold failed; the message stays in the buffer
                if str(error) != "summarizer down":
                    raise
            with lock:
                added.append(m)

    run_writers(writer, 6, "w")
    assert len(added) == 600
    assert rec.failures > 0
    check_no_loss(added, rec.folded, mem.buffer)
    check_summary_chain(rec, mem.summary)


def in_thread(function: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(function())
        except BaseException as error:  # pragma: no cover - reported by the test
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def fold_in_flight(
    gate: Any, on_evict: Callable[[Sequence[Message]], None]
) -> tuple[RollingMemory, threading.Thread, list[Any]]:
    """A memory holding ``a``; a thread adds ``b`` and blocks in the fold of ``a`` (``gate``)."""
    mem = RollingMemory(max_tokens=1, summarize_fn=gate, token_counter=len, on_evict=on_evict)
    mem.add_user_message("a", id="a")
    thread, outcome = in_thread(lambda: mem.add_user_message("b", id="b"))
    assert gate.entered.wait(WAIT)
    return mem, thread, outcome


def finish(gate: Any, thread: threading.Thread, outcome: list[Any]) -> None:
    gate.release.set()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert outcome == [Message("user", "b", id="b")]


def test_clear_during_a_threaded_fold_wins(make_gate: Callable[[], Any]) -> None:
    evicted: list[Sequence[Message]] = []
    gate = make_gate()
    mem, thread, outcome = fold_in_flight(gate, evicted.append)
    mem.clear()
    finish(gate, thread, outcome)
    assert (mem.summary, mem.buffer) == ("", [])
    assert evicted == []
    mem.add_user_message("c")
    assert [m.content for m in mem.buffer] == ["c"]


def test_buffer_assignment_during_a_threaded_fold_wins(make_gate: Callable[[], Any]) -> None:
    evicted: list[Sequence[Message]] = []
    gate = make_gate()
    mem, thread, outcome = fold_in_flight(gate, evicted.append)
    mem.buffer = [Message("user", "x")]
    finish(gate, thread, outcome)
    assert (mem.summary, mem.buffer) == ("", [Message("user", "x")])
    assert evicted == []


def test_pin_during_a_threaded_fold_wins(make_gate: Callable[[], Any]) -> None:
    evicted: list[Sequence[Message]] = []
    gate = make_gate()
    mem, thread, outcome = fold_in_flight(gate, evicted.append)
    mem.pin("a")
    finish(gate, thread, outcome)
    assert mem.summary == ""
    assert mem.buffer == [Message("user", "a", id="a", pinned=True), Message("user", "b", id="b")]
    assert evicted == []


def test_threaded_folds_are_serialized_and_recut(make_gate: Callable[[], Any]) -> None:
    gate = make_gate()
    mem = RollingMemory(max_tokens=2, summarize_fn=gate, token_counter=len)
    mem.add_user_message("a")
    mem.add_user_message("b")
    first, first_outcome = in_thread(lambda: mem.add_user_message("c"))
    assert gate.entered.wait(WAIT)
    second, second_outcome = in_thread(lambda: mem.add_user_message("d"))
    second.join(0.2)
    assert len(gate.calls) == 1  # the second fold waits for the first
    assert [m.content for m in mem.buffer] == ["a", "b", "c", "d"]
    gate.release.set()
    first.join(WAIT)
    second.join(WAIT)
    assert gate.texts == [("", ["a"]), ("a", ["b"])]
    assert (mem.summary, [m.content for m in mem.buffer]) == ("a|b", ["c", "d"])
    assert first_outcome == [Message("user", "c")]
    assert second_outcome == [Message("user", "d")]


# --- asyncio --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("background", [False, True])
async def test_many_tasks_adding_concurrently(
    make_async_recorder: Callable[..., Any], background: bool
) -> None:
    rec = make_async_recorder(yields=3)
    evicted: list[Message] = []
    mem = AsyncRollingMemory(
        max_tokens=50,
        summarize_fn=rec.summarize,
        token_counter=len,
        on_evict=evicted.extend,
        background=background,
    )

    async def writer(name: str) -> list[Message]:
        out = []
        for i in range(20):
            out.append(await mem.add_user_message(f"{name}-{i}"))
            await asyncio.sleep(0)
        return out

    batches = await asyncio.gather(*(writer(f"k{k}") for k in range(50)))
    await mem.flush()
    mem, added = mem, [m for batch in batches for m in batch]
    assert len(added) == 1000
    check_no_loss(added, rec.folded, mem.buffer)
    check_summary_chain(rec, mem.summary)
    assert evicted == rec.folded
    assert mem.stats().buffer_tokens <= 50


async def test_many_tasks_on_async_summary_memory(make_async_recorder: Callable[..., Any]) -> None:
    rec = make_async_recorder(yields=2)
    mem = AsyncSummaryMemory(rec.summarize)

    async def writer(name: str) -> list[Message]:
        return [await mem.add_user_message(f"{name}-{i}") for i in range(10)]

    batches = await asyncio.gather(*(writer(f"s{k}") for k in range(20)))
    mem, added = mem, [m for batch in batches for m in batch]
    assert mem.buffer == []
    check_no_loss(added, rec.folded, mem.buffer)
    check_summary_chain(rec, mem.summary)


async def test_clear_during_an_async_fold_wins(make_async_gate: Callable[[], Any]) -> None:
    gate = make_async_gate()
    evicted: list[Sequence[Message]] = []
    mem = AsyncRollingMemory(
        max_tokens=1, summarize_fn=gate.summarize, token_counter=len, on_evict=evicted.append
    )
    await mem.add_user_message("a")
    task = asyncio.ensure_future(mem.add_user_message("b"))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    mem.clear()
    gate.release.set()
    assert await asyncio.wait_for(task, WAIT) == Message("user", "b")
    assert (mem.summary, mem.buffer, evicted) == ("", [], [])


async def test_pin_during_an_async_fold_wins(make_async_gate: Callable[[], Any]) -> None:
    gate = make_async_gate()
    mem = AsyncRollingMemory(max_tokens=1, summarize_fn=gate.summarize, token_counter=len)
    await mem.add_user_message("a", id="a")
    task = asyncio.ensure_future(mem.add_user_message("b"))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    mem.pin("a")
    gate.release.set()
    await asyncio.wait_for(task, WAIT)
    assert mem.summary == ""
    assert mem.buffer == [Message("user", "a", id="a", pinned=True), Message("user", "b")]


async def test_cancelled_fold_leaves_the_state_untouched(make_async_gate: Callable[[], Any]) -> None:
    gate = make_async_gate()
    evicted: list[Sequence[Message]] = []
    mem = AsyncRollingMemory(
        max_tokens=1, summarize_fn=gate.summarize, token_counter=len, on_evict=evicted.append
    )
    mem.summary = "s"
    await mem.add_user_message("a")
    task = asyncio.ensure_future(mem.add_user_message("b"))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gate.cancelled == 1
    assert (mem.summary, [m.content for m in mem.buffer], evicted) == ("s", ["a", "b"], [])
    gate.release.set()
    await asyncio.wait_for(mem.add_user_message("c"), WAIT)  # the fold lock was released
    assert (mem.summary, [m.content for m in mem.buffer]) == ("s|a|b", ["c"])
    assert gate.texts == [("s", ["a"]), ("s", ["a", "b"])]


async def test_async_folds_are_serialized_and_recut(make_async_gate: Callable[[], Any]) -> None:
    gate = make_async_gate()
    mem = AsyncRollingMemory(max_tokens=2, summarize_fn=gate.summarize, token_counter=len)
    await mem.add_user_message("a")
    await mem.add_user_message("b")
    first = asyncio.ensure_future(mem.add_user_message("c"))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    second = asyncio.ensure_future(mem.add_user_message("d"))
    for _ in range(10):
        await asyncio.sleep(0)
    assert len(gate.calls) == 1
    assert [m.content for m in mem.buffer] == ["a", "b", "c", "d"]
    gate.release.set()
    await asyncio.wait_for(asyncio.gather(first, second), WAIT)
    assert gate.texts == [("", ["a"]), ("a", ["b"])]
    assert (mem.summary, [m.content for m in mem.buffer]) == ("a|b", ["c", "d"])

"""``on_evict`` under failure and cancellation: each committed eviction reaches the hook exactly
once, an uncommitted one never. A block raises or is cancelled at each point: in its body while
a background fold is held, while its background folds are awaited, when the summarizer fails,
and while its write is in flight (a thread-backed store, whose write goes on, and an async one).
Cancelling with ``task.cancel()`` is what ``asyncio.wait_for`` does on a timeout."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from rollmem.memory import AsyncRollingMemory, BufferMemory
from rollmem.message import Message
from rollmem.sessions import AsyncSessions
from rollmem.stores import Head, LogWrite, MemoryStore, SQLiteStore

from ._support import fold_ids
from .conftest import Backend


class Held:
    """An async summarizer (fold_ids) that waits at a gate while ``hold`` is set, or fails while
    ``fail`` is set. Build it inside the event loop."""

    def __init__(self) -> None:
        self.hold = False
        self.fail = False
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def __call__(self, summary: str, messages: Sequence[Message]) -> str:
        if self.hold:
            self.entered.set()
            await self.gate.wait()
        if self.fail:
            raise RuntimeError("summarizer down")
        return fold_ids(summary, messages)

    async def release(self) -> None:
        self.hold = False
        self.gate.set()
        for _ in range(5):  # let a fold still running in a dropped memory finish
            await asyncio.sleep(0)


def hooked(seen: list[str]) -> Callable[[Sequence[Message]], None]:
    return lambda messages: seen.extend(m.content for m in messages)


async def stored(store: Any) -> tuple[str, list[str]]:
    memory = await AsyncSessions(store, BufferMemory).get("s")
    assert memory is not None
    return memory.summary, [m.content for m in memory.buffer]


async def started(held: Held, body: Callable[[AsyncRollingMemory], Any], sessions: AsyncSessions[Any]) -> Any:
    """A task running one block: add ``r`` (its fold of ``p`` held in the background), then ``body``."""
    held.hold = True

    async def block() -> None:
        async with sessions.open("s") as memory:
            await memory.add_user_message("r")
            await body(memory)

    task = asyncio.ensure_future(block())
    await held.entered.wait()
    return task


async def _p_q(sessions: AsyncSessions[Any]) -> None:
    async with sessions.open("s") as memory:
        await memory.add_user_message("p")
        await memory.add_user_message("q")


async def _then_s(sessions: AsyncSessions[Any], store: Any, seen: list[str]) -> None:
    """The next block adds ``s``: the fold of ``p`` commits now, and reaches the hook once."""
    async with sessions.open("s") as memory:
        await memory.add_user_message("s")
    assert seen == ["p"]
    assert await stored(store) == ("p", ["q", "s"])


def _background(backend: Backend, held: Held, seen: list[str]) -> AsyncSessions[Any]:
    return AsyncSessions(
        backend.store(), lambda: AsyncRollingMemory(2, held, on_evict=hooked(seen), background=True)
    )


def _interrupted(backend: Backend, interrupt: Callable[[Held, AsyncSessions[Any]], Awaitable[None]]) -> None:
    """``p`` and ``q`` stored, then ``interrupt`` runs a block that adds ``r`` and does not end well
    (its background fold of ``p`` held or failing). Then: no hook called, the store unchanged, and
    the next block commits the fold of ``p``, reaching the hook once."""

    async def main() -> None:
        held, seen = Held(), []
        sessions = _background(backend, held, seen)
        await _p_q(sessions)
        await interrupt(held, sessions)
        await held.release()
        held.fail = False
        assert seen == []
        assert await stored(backend.store()) == ("", ["p", "q"])
        await _then_s(sessions, backend.store(), seen)

    backend.run(main)


async def _cancelled(task: Any, gate: Any) -> None:
    """Cancel ``task``, let the loop run, then open ``gate``: the task ends cancelled."""
    task.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_block_that_raises_while_its_background_fold_is_held_calls_no_hook(backend: Backend) -> None:
    async def interrupt(held: Held, sessions: AsyncSessions[Any]) -> None:
        async def fail(memory: AsyncRollingMemory) -> None:
            raise TimeoutError("the caller gave up")

        task = await started(held, fail, sessions)
        with pytest.raises(TimeoutError):
            await task

    _interrupted(backend, interrupt)


def test_a_block_cancelled_in_its_body_while_a_fold_is_held_calls_no_hook(backend: Backend) -> None:
    async def interrupt(held: Held, sessions: AsyncSessions[Any]) -> None:
        async def wait(memory: AsyncRollingMemory) -> None:
            await asyncio.sleep(3600)

        task = await started(held, wait, sessions)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    _interrupted(backend, interrupt)


def test_a_block_cancelled_while_its_background_folds_are_awaited_calls_no_hook(backend: Backend) -> None:
    async def interrupt(held: Held, sessions: AsyncSessions[Any]) -> None:
        async def leave(memory: AsyncRollingMemory) -> None:
            return None  # the block ends: the sessions await the held fold before writing

        task = await started(held, leave, sessions)
        for _ in range(5):
            await asyncio.sleep(0)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    _interrupted(backend, interrupt)


def test_a_fold_that_fails_while_awaited_writes_nothing_and_calls_no_hook(backend: Backend) -> None:
    async def interrupt(held: Held, sessions: AsyncSessions[Any]) -> None:
        held.fail = True
        with pytest.raises(RuntimeError, match="summarizer down"):
            async with sessions.open("s") as memory:
                await memory.add_user_message("r")

    _interrupted(backend, interrupt)


# -- cancelled while the write is in flight ---------------------------------------------------------


class GatedSQLiteStore(SQLiteStore):
    """A real SQLiteStore whose next write, once ``gated``, waits for ``gate`` in its thread."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.gated = False
        self.entered = threading.Event()
        self.gate = threading.Event()

    def write(self, session_id: str, change: LogWrite) -> Head:
        if self.gated:
            self.gated = False
            self.entered.set()
            assert self.gate.wait(30)
        return super().write(session_id, change)


class GatedMemoryStore(MemoryStore):
    """A real MemoryStore whose next async write, once ``gated``, waits for ``gate`` (and, if
    ``before`` is set, lets it run first: another writer)."""

    def __init__(self) -> None:
        super().__init__()
        self.gated = False
        self.entered: Optional[asyncio.Event] = None
        self.gate: Optional[asyncio.Event] = None

    async def awrite(self, session_id: str, change: LogWrite) -> Head:
        if self.gated and self.entered is not None and self.gate is not None:
            self.gated = False
            self.entered.set()
            await self.gate.wait()
        return await super().awrite(session_id, change)


def _folding(store: Any, seen: list[str]) -> AsyncSessions[Any]:
    return AsyncSessions(store, lambda: AsyncRollingMemory(2, fold_ids, on_evict=hooked(seen)))


async def _turn(sessions: AsyncSessions[Any], text: str) -> None:
    async with sessions.open("s") as memory:
        await memory.add_user_message(text)


def test_a_thread_backed_write_cancelled_in_flight_still_reaches_the_hook_once(tmp_path: Path) -> None:
    store = GatedSQLiteStore(str(tmp_path / "s.db"))

    async def main() -> None:
        seen: list[str] = []
        sessions = _folding(store, seen)
        await _p_q(sessions)
        store.gated = True
        task = asyncio.ensure_future(_turn(sessions, "r"))  # folds p
        assert await asyncio.to_thread(store.entered.wait, 30)
        await _cancelled(task, store.gate)  # the write goes on in its thread
        assert seen == ["p"]  # committed, so delivered, once
        assert await stored(store) == ("p", ["q", "r"])
        await _turn(sessions, "s")
        assert seen == ["p", "q"]

    try:
        asyncio.run(main())
    finally:
        store.close()


def test_an_async_write_cancelled_in_flight_still_reaches_the_hook_once() -> None:
    store = GatedMemoryStore()

    async def main() -> None:
        seen: list[str] = []
        store.entered, store.gate = asyncio.Event(), asyncio.Event()
        sessions = _folding(store, seen)
        await _p_q(sessions)
        store.gated = True
        task = asyncio.ensure_future(_turn(sessions, "r"))
        await store.entered.wait()
        await _cancelled(task, store.gate)
        assert seen == ["p"]
        assert await stored(store) == ("p", ["q", "r"])

    asyncio.run(main())


def test_a_cancelled_write_that_lost_never_reaches_the_hook() -> None:
    store = GatedMemoryStore()

    async def main() -> None:
        seen: list[str] = []
        store.entered, store.gate = asyncio.Event(), asyncio.Event()
        sessions = _folding(store, seen)
        await _p_q(sessions)
        store.gated = True
        task = asyncio.ensure_future(_turn(sessions, "r"))  # its fold of p waits at the gate
        await store.entered.wait()
        await _turn(_folding(store, seen), "x")  # another writer folds p first
        assert seen == ["p"]
        await _cancelled(task, store.gate)  # the held fold loses its compare-and-set
        assert seen == ["p"]
        assert await stored(store) == ("p", ["q", "x"])

    asyncio.run(main())

"""AsyncSessions: the async twin, with async memories, async stores and concurrent tasks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any, Optional

import pytest

from rollmem.errors import ConflictError, InvalidStateError, StateTypeError
from rollmem.memory import AsyncRollingMemory, AsyncSummaryMemory, BufferMemory, RollingMemory
from rollmem.message import Message
from rollmem.sessions import AsyncSessions
from rollmem.stores import Head, LogWrite, MemoryStore, StoredLog

from ._support import fold_ids, put_messages
from .conftest import Backend
from .test_sessions import CountingWords, RacingStore, contents


async def afold_ids(summary: str, messages: Sequence[Message]) -> str:
    await asyncio.sleep(0)
    return fold_ids(summary, messages)


def test_round_trip_with_an_async_memory(backend: Backend) -> None:
    async def main() -> None:
        sessions = AsyncSessions(backend.store(), lambda: AsyncRollingMemory(3, afold_ids))
        assert await sessions.get("s") is None
        async with sessions.open("s") as memory:
            for word in ["a", "b", "c", "d"]:
                await memory.add_user_message(word)
        stored = await sessions.get("s")
        assert stored is not None
        assert (stored.summary, contents(stored)) == ("a", ["b", "c", "d"])
        assert await sessions.ids() == ["s"]
        assert await sessions.delete("s") is True
        assert await sessions.ids() == []

    backend.run(main)


def test_concurrent_tasks_lose_and_duplicate_nothing(backend: Backend) -> None:
    async def main() -> AsyncSessions[Any]:
        sessions = AsyncSessions(backend.store(), lambda: AsyncRollingMemory(5, afold_ids), max_retries=1000)

        async def writer(task: int) -> None:
            for index in range(5):
                async with sessions.open("s") as memory:
                    await asyncio.sleep(0)  # let the other tasks load the same revision
                    await memory.add_user_message(f"t{task}-{index}")

        await asyncio.gather(*(writer(task) for task in range(10)))
        stored = await sessions.get("s")
        assert stored is not None
        seen = stored.summary.split() + contents(stored)
        assert sorted(seen) == sorted(f"t{t}-{i}" for t in range(10) for i in range(5))
        return sessions

    sessions = backend.run(main)
    assert sessions.retries > 0


def test_interleaved_blocks_replay_on_the_with_target(backend: Backend) -> None:
    async def main() -> None:
        first = AsyncSessions(backend.store(), lambda: AsyncSummaryMemory(afold_ids))
        second = AsyncSessions(backend.store(), lambda: AsyncSummaryMemory(afold_ids))
        async with first.open("s") as memory:
            await memory.add_user_message("one")
            async with second.open("s") as other:
                await other.add_user_message("two")
        assert first.retries == 1
        assert (memory.summary, memory.buffer) == ("two one", [])
        stored = await second.get("s")
        assert stored is not None
        assert stored.to_dict() == memory.to_dict()

    backend.run(main)


def test_background_folds_are_saved(backend: Backend) -> None:
    async def main() -> None:
        sessions = AsyncSessions(backend.store(), lambda: AsyncRollingMemory(2, afold_ids, background=True))
        async with sessions.open("s") as memory:
            for word in ["a", "b", "c"]:
                await memory.add_user_message(word)
        stored = await AsyncSessions(backend.store(), BufferMemory).get("s")
        assert stored is not None
        assert (stored.summary, contents(stored)) == ("a", ["b", "c"])

    backend.run(main)


def test_background_folds_of_a_replay_are_saved(backend: Backend) -> None:
    async def main() -> None:
        def factory() -> AsyncRollingMemory:
            return AsyncRollingMemory(2, afold_ids, background=True)

        first, second = AsyncSessions(backend.store(), factory), AsyncSessions(backend.store(), factory)
        async with first.open("s") as memory:
            await memory.extend([Message("user", "a"), Message("user", "b")])
        async with first.open("s") as memory:
            await memory.add_user_message("c")
            async with second.open("s") as other:
                await other.add_user_message("d")  # saves summary "a", buffer [b, d]
        # the fold of a lost: c lands as a plain append, the fold is left to the next turn
        stored = await second.get("s")
        assert stored is not None
        assert (stored.summary, contents(stored)) == ("a", ["b", "d", "c"])
        async with first.open("s") as memory:
            await memory.add_user_message("e")  # folds in the background, awaited, saved
        stored = await second.get("s")
        assert stored is not None
        assert (stored.summary, contents(stored)) == ("a b d", ["c", "e"])

    backend.run(main)


def test_failed_background_fold_saves_nothing() -> None:
    async def fail(summary: str, messages: Sequence[Message]) -> str:
        raise RuntimeError("summarizer down")

    async def main() -> None:
        sessions = AsyncSessions(MemoryStore(), lambda: AsyncRollingMemory(1, fail, background=True))

        async def add_two() -> None:
            async with sessions.open("s") as memory:
                await memory.add_user_message("a")
                await memory.add_user_message("b")

        with pytest.raises(RuntimeError, match="summarizer down"):
            await add_two()
        assert await sessions.ids() == []

    asyncio.run(main())


def test_exception_in_block_saves_nothing(backend: Backend) -> None:
    async def main() -> None:
        sessions = AsyncSessions(backend.store(), lambda: AsyncRollingMemory(100))
        async with sessions.open("s") as memory:
            await memory.add_user_message("kept")

        async def fail_in_block() -> None:
            async with sessions.open("s") as memory:
                await memory.add_user_message("lost")
                raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            await fail_in_block()
        stored = await sessions.get("s")
        assert stored is not None
        assert contents(stored) == ["kept"]

    backend.run(main)


def test_reopening_at_the_saved_revision_recounts_nothing(backend: Backend) -> None:
    counter = CountingWords()

    async def main() -> None:
        sessions = AsyncSessions(backend.store(), lambda: AsyncRollingMemory(100, token_counter=counter))
        async with sessions.open("s") as memory:
            await memory.add_user_message("one")
            await memory.add_user_message("two")
        async with sessions.open("s") as again:
            assert again is memory
            await again.add_user_message("three")

    backend.run(main)
    assert counter.calls == 3


def test_conflict_error_after_max_retries() -> None:
    async def main() -> None:
        sessions = AsyncSessions(RacingStore(), lambda: AsyncRollingMemory(100), max_retries=2)
        with pytest.raises(ConflictError, match=r"^session 's': not saved after 2 retries"):
            async with sessions.open("s") as memory:
                await memory.add_user_message("mine")
        assert sessions.retries == 2

    asyncio.run(main())


def test_bad_stored_state_names_the_session(backend: Backend) -> None:
    async def main() -> None:
        store = backend.store()
        put_messages(store, "alice", ['{"role":"user","content":5}'])
        sessions = AsyncSessions(store, lambda: AsyncRollingMemory(100))
        with pytest.raises(
            StateTypeError, match=r"^session 'alice': buffer\[0\].content: expected str, got int$"
        ):
            async with sessions.open("alice"):
                pass
        with pytest.raises(InvalidStateError, match=r"^session 'alice': "):
            await sessions.get("alice")
        async with sessions.open("bob") as memory:
            await memory.add_user_message("fine")
        assert await sessions.ids() == ["alice", "bob"]

    backend.run(main)


def test_sync_memories_work_too() -> None:
    async def main() -> None:
        sessions = AsyncSessions(MemoryStore(), lambda: RollingMemory(2, fold_ids))
        for word in ["a", "b", "c"]:
            async with sessions.open("s") as memory:
                memory.add_user_message(word)
        stored = await sessions.get("s")
        assert stored is not None
        assert (stored.summary, contents(stored)) == ("a", ["b", "c"])

    asyncio.run(main())


class BlockingOnlyStore:
    """A log store with only blocking methods (delegating to a MemoryStore) that records its threads."""

    def __init__(self) -> None:
        self._store = MemoryStore()
        self.threads: set[int] = set()

    def _note(self) -> None:
        self.threads.add(threading.get_ident())

    def load(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        self._note()
        return self._store.load(session_id, since)

    def write(self, session_id: str, change: LogWrite) -> Head:
        self._note()
        return self._store.write(session_id, change)

    def delete(self, session_id: str) -> bool:
        self._note()
        return self._store.delete(session_id)

    def ids(self, prefix: str = "") -> list[str]:
        self._note()
        return self._store.ids(prefix)

    def purge_expired(self) -> int:
        self._note()
        return self._store.purge_expired()

    def close(self) -> None:
        self._note()


def test_a_blocking_store_is_called_off_the_event_loop() -> None:
    store = BlockingOnlyStore()

    async def main() -> int:
        sessions = AsyncSessions(store, lambda: AsyncRollingMemory(100))
        async with sessions.open("s") as memory:
            await memory.add_user_message("x")
        assert await sessions.ids() == ["s"]
        assert await sessions.purge_expired() == 0
        assert await sessions.delete("s") is True
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert store.threads
    assert loop_thread not in store.threads


def test_bad_store_is_refused() -> None:
    with pytest.raises(TypeError, match=r"^store: expected a rollmem AsyncLogStore or LogStore, got dict$"):
        AsyncSessions({}, BufferMemory)  # type: ignore[arg-type]


def test_appending_tasks_never_conflict(backend: Backend) -> None:
    """16 tasks appending to one session at once: every write is an append, none is retried."""

    async def main() -> tuple[int, list[str]]:
        sessions = AsyncSessions(backend.store(), lambda: AsyncRollingMemory(10_000), max_retries=0)
        async with sessions.open("s") as memory:
            await memory.add_user_message("start")

        async def turn(task: int) -> None:
            for index in range(4):
                async with sessions.open("s") as memory:
                    await memory.add_user_message(f"t{task}-{index}")
                    await asyncio.sleep(0)  # let the others load the same state

        await asyncio.gather(*(turn(task) for task in range(16)))
        stored = await sessions.get("s")
        assert stored is not None
        return sessions.retries, contents(stored)

    retries, kept = backend.run(main)
    assert retries == 0
    assert sorted(kept) == sorted(["start", *(f"t{t}-{i}" for t in range(16) for i in range(4))])


def test_async_update_reruns_a_coroutine_function(backend: Backend) -> None:
    async def main() -> list[str]:
        sessions = AsyncSessions(backend.store(), BufferMemory)
        other = AsyncSessions(backend.store(), BufferMemory)
        async with sessions.open("s") as memory:
            memory.add_user_message("tmp")
        runs = 0

        async def rewrite(memory: BufferMemory) -> None:
            nonlocal runs
            runs += 1
            if runs == 1:
                async with other.open("s") as concurrent:
                    concurrent.add_user_message("B")
            memory.buffer = [m for m in memory.buffer if m.content != "tmp"]

        await sessions.update("s", rewrite)
        assert runs == 2
        stored = await sessions.get("s")
        assert stored is not None
        return contents(stored)

    assert backend.run(main) == ["B"]


def test_an_async_on_evict_is_awaited_once_per_committed_eviction(backend: Backend) -> None:
    evicted: list[list[str]] = []

    async def hook(messages: Sequence[Message]) -> None:
        await asyncio.sleep(0)
        evicted.append([m.content for m in messages])

    async def main() -> None:
        def factory() -> AsyncRollingMemory:
            return AsyncRollingMemory(2, fold_ids, on_evict=hook)

        first, second = AsyncSessions(backend.store(), factory), AsyncSessions(backend.store(), factory)
        async with first.open("s") as memory:
            await memory.add_user_message("a")
            await memory.add_user_message("b")
        async with first.open("s") as memory:
            await memory.add_user_message("c")
            async with second.open("s") as other:
                await other.add_user_message("d")
            assert evicted == [["a"]]
        assert evicted == [["a"]]  # the lost fold of a: c landed as an append
        async with first.open("s") as memory:
            await memory.add_user_message("e")
        assert evicted == [["a"], ["b", "d"]]

    backend.run(main)

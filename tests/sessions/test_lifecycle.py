"""Sessions' life cycle and misuse: ``close`` and context managers, ``update`` with the wrong
kind of function, and the one session id rule shared by sessions and stores."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest

from rollmem.errors import StoreUnavailableError
from rollmem.memory import BufferMemory, RollingMemory
from rollmem.sessions import AsyncSessions, Sessions
from rollmem.stores import MemoryStore, SQLiteStore

from .conftest import Backend


def contents(memory: Any) -> list[str]:
    return [message.content for message in memory.buffer]


# -- update() with a coroutine function --------------------------------------------------------------


async def add_async(memory: Any) -> None:
    memory.add_user_message("never")


def returns_a_coroutine(memory: Any) -> Any:
    return add_async(memory)


class AsyncCall:
    async def __call__(self, memory: Any) -> None:
        memory.add_user_message("never")


@pytest.mark.parametrize(
    "fn",
    [add_async, functools.partial(add_async), returns_a_coroutine, AsyncCall()],
    ids=["async-def", "partial", "returns-coroutine", "async-call"],
)
def test_sync_update_refuses_an_async_fn_and_writes_nothing(backend: Backend, fn: Any) -> None:
    sessions = Sessions(backend.store(), BufferMemory)
    with pytest.raises(TypeError, match=r"AsyncSessions\.update"):
        sessions.update("s", fn)
    assert sessions.ids() == []
    assert sessions.get("s") is None
    with sessions.open("s") as memory:  # the session is untouched: a later turn starts it
        memory.add_user_message("hi")
    with pytest.raises(TypeError, match=r"AsyncSessions\.update"):
        sessions.update("s", fn)
    saved = sessions.get("s")
    assert saved is not None
    assert contents(saved) == ["hi"]


def test_async_update_runs_sync_and_async_functions(backend: Backend) -> None:
    async def main() -> list[str]:
        sessions = AsyncSessions(backend.store(), BufferMemory)

        def add_sync(memory: Any) -> str:
            memory.add_user_message("sync")
            return "s"

        async def add(memory: Any) -> str:
            memory.add_user_message("async")
            return "a"

        assert await sessions.update("s", add_sync) == "s"
        assert await sessions.update("s", add) == "a"
        saved = await sessions.get("s")
        assert saved is not None
        return contents(saved)

    assert backend.run(main) == ["sync", "async"]


# -- close() and context managers -----------------------------------------------------------------------


def test_sessions_close_drops_its_cache_and_leaves_the_given_store_open(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        with Sessions(store, BufferMemory) as sessions:
            with sessions.open("s") as memory:
                memory.add_user_message("a")
            kept = memory
        with sessions.open("s") as again:  # still usable; the cache is empty, so a fresh load
            assert again is not kept
            assert contents(again) == ["a"]
            again.add_user_message("b")
        sessions.close()  # twice: harmless
        assert store.ids() == ["s"], "the store given stays open"
    with pytest.raises(StoreUnavailableError, match="is closed"):
        store.load("s")
    with pytest.raises(StoreUnavailableError, match="is closed"):
        sessions.get("s")


def test_async_sessions_close_with_async_with(tmp_path: Path) -> None:
    async def main() -> list[str]:
        async with SQLiteStore(tmp_path / "s.db") as store:
            async with AsyncSessions(store, BufferMemory) as sessions, sessions.open("s") as memory:
                memory.add_user_message("a")
            await sessions.aclose()
            saved = await sessions.get("s")
            assert saved is not None
            return contents(saved)

    assert asyncio.run(main()) == ["a"]
    with pytest.raises(StoreUnavailableError, match="is closed"):
        asyncio.run(_closed_load(tmp_path))


async def _closed_load(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    await store.aclose()
    await store.aload("s")


# -- the one session id rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("session_id", "error", "message"),
    [
        (7, TypeError, "session_id: expected str, got int"),
        ("", ValueError, "session_id must not be empty"),
        ("a\x00b", ValueError, "session_id must not contain NUL characters"),
        ("a\ud83d", ValueError, r"session_id must be valid Unicode \(lone surrogate at index 1\)"),
    ],
)
def test_sessions_and_every_store_refuse_a_bad_session_id_alike(
    backend: Backend, session_id: Any, error: type[Exception], message: str
) -> None:
    store = backend.store()
    sessions = Sessions(store, lambda: RollingMemory(max_tokens=100))
    pattern = f"^{message}$"
    with pytest.raises(error, match=pattern), sessions.open(session_id):
        pass
    with pytest.raises(error, match=pattern):
        sessions.update(session_id, lambda memory: None)
    with pytest.raises(error, match=pattern):
        sessions.get(session_id)
    with pytest.raises(error, match=pattern):
        sessions.delete(session_id)
    if hasattr(store, "write"):  # a log store checks alike
        with pytest.raises(error, match=pattern):
            store.load(session_id)
        with pytest.raises(error, match=pattern):
            store.delete(session_id)
    assert sessions.ids() == []


def test_a_long_session_id_round_trips_through_sessions(backend: Backend) -> None:
    session_id = "conversation/" + "".join(f"{n:04x}" for n in range(1000))  # 4,013 characters
    sessions = Sessions(backend.store(), lambda: RollingMemory(max_tokens=100))
    with sessions.open(session_id) as memory:
        memory.add_user_message("hello")
    assert sessions.ids("conversation/") == [session_id]
    saved = sessions.get(session_id)
    assert saved is not None
    assert contents(saved) == ["hello"]
    assert sessions.delete(session_id) is True
    assert sessions.ids() == []


def test_sessions_on_a_closed_memory_store_raise_the_closed_error() -> None:
    with MemoryStore() as store:
        assert Sessions(store, BufferMemory).ids() == []
    with pytest.raises(StoreUnavailableError, match=r"^<MemoryStore with 0 sessions> is closed$"):
        Sessions(store, BufferMemory).ids()

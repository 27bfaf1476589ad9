"""Sessions through a Redis Cluster and through PgBouncer's transaction pooling: six writers on
their own sessions and four on one shared session, every message kept exactly once, no error."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rollmem.memory import AsyncRollingMemory, BufferMemory, RollingMemory
from rollmem.message import Message
from rollmem.sessions import AsyncSessions, Sessions

from . import _support
from .conftest import Backend

OWN, SHARED, ADDS = 6, 4, 40


@pytest.fixture(params=("redis-cluster", "pgbouncer"))
def scaled_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    chosen = Backend(request.param, tmp_path)
    yield chosen
    chosen.close()


def _writers() -> list[tuple[str, str]]:
    """(session id, message stem) of every writer."""
    own = [(f"own-{index}", f"o{index}") for index in range(OWN)]
    return own + [("shared", f"s{index}") for index in range(SHARED)]


def _check(backend: Backend) -> None:
    sessions = Sessions(backend.store(), BufferMemory)
    for session_id in {session_id for session_id, _ in _writers()}:
        stems = [stem for sid, stem in _writers() if sid == session_id]
        memory = sessions.get(session_id)
        assert memory is not None
        seen = memory.summary.split() + [message.content for message in memory.buffer]
        expected = {f"{stem}-{number}" for stem in stems for number in range(ADDS)}
        assert set(seen) == expected, session_id
        assert [name for name, times in Counter(seen).items() if times > 1] == [], session_id
        for stem in stems:  # each writer's messages keep their order
            assert [name for name in seen if name.startswith(stem + "-")] == [
                f"{stem}-{n}" for n in range(ADDS)
            ]


def _memory() -> RollingMemory:
    return RollingMemory(_support.WORKER_MAX_TOKENS, _support.fold_ids)


async def _afold_ids(summary: str, messages: Sequence[Message]) -> str:
    return _support.fold_ids(summary, messages)


def _amemory() -> AsyncRollingMemory:
    return AsyncRollingMemory(_support.WORKER_MAX_TOKENS, _afold_ids)


def test_writers_on_own_and_shared_sessions(scaled_backend: Backend) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(OWN + SHARED)

    def write(session_id: str, stem: str) -> None:
        sessions = Sessions(scaled_backend.store(), _memory, max_retries=1_000_000)
        try:
            start.wait()
            for number in range(ADDS):
                with sessions.open(session_id) as memory:
                    memory.add_user_message(f"{stem}-{number}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=writer) for writer in _writers()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    _check(scaled_backend)


def test_writers_on_own_and_shared_sessions_async(scaled_backend: Backend) -> None:
    async def write(session_id: str, stem: str) -> None:
        sessions: AsyncSessions[Any] = AsyncSessions(scaled_backend.store(), _amemory, max_retries=1_000_000)
        for number in range(ADDS):
            async with sessions.open(session_id) as memory:
                await memory.add_user_message(f"{stem}-{number}")

    async def main() -> None:
        await asyncio.gather(*(write(*writer) for writer in _writers()))

    scaled_backend.run(main)
    _check(scaled_backend)

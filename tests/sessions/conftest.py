"""Stores for the session tests: one fixture, parametrized over every backend.

SQLite and the in-process store always run. Redis and PostgreSQL run against real servers
named by ``ROLLMEM_TEST_REDIS_URL`` / ``ROLLMEM_TEST_POSTGRES_DSN``, and the tests of several
processes also against a Redis Cluster and PgBouncer (``ROLLMEM_TEST_REDIS_CLUSTER_URL`` /
``ROLLMEM_TEST_PGBOUNCER_DSN``; ``source .ci/services`` starts them all); without them these
tests skip, or fail when ``ROLLMEM_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, Callable, TypeVar

import pytest

from rollmem.stores import MemoryStore
from stores.servers import (
    drop_redis_keys,
    drop_table,
    pgbouncer_dsn,
    postgres_dsn,
    redis_cluster_url,
    redis_url,
    unique_name,
)

from ._support import make_store

ALL_BACKENDS = ("memory", "sqlite", "redis", "postgres")
SHARED_BACKENDS = ("sqlite", "redis", "postgres", "redis-cluster", "pgbouncer")  # seen by several processes

_T = TypeVar("_T")


class Backend:
    """Builds stores that all see the same, private, namespace of one backend."""

    def __init__(self, name: str, tmp_path: Path) -> None:
        self.name = name
        self.namespace = unique_name("rollmem_sessions")
        """The Redis key prefix stem or PostgreSQL table private to this test."""
        self.location = ""
        self._opened: list[Any] = []
        if name == "sqlite":
            self.location = str(tmp_path / "sessions.db")
        elif name == "redis":
            self.location = redis_url()
        elif name == "postgres":
            self.location = postgres_dsn()
        elif name == "redis-cluster":
            self.location = redis_cluster_url()
        elif name == "pgbouncer":
            self.location = pgbouncer_dsn()
        self._memory: Any = MemoryStore() if name == "memory" else None

    def store(self) -> Any:
        """A store on the shared namespace (the same one for every call: MemoryStore)."""
        if self._memory is not None:
            return self._memory
        store = make_store(self.name, self.location, self.namespace)
        self._opened.append(store)
        return store

    def run(self, main: Callable[[], Awaitable[_T]]) -> _T:
        """``asyncio.run(main())``, then close on that loop the stores opened meanwhile (their
        async clients belong to it)."""

        async def run_then_close() -> _T:
            opened = len(self._opened)
            try:
                return await main()
            finally:
                for store in self._opened[opened:]:
                    await store.aclose()

        return asyncio.run(run_then_close())

    def close(self) -> None:
        for store in self._opened:
            store.close()
        if self.name in ("redis", "redis-cluster"):
            drop_redis_keys(self.location, self.namespace + ":", cluster=self.name == "redis-cluster")
        elif self.name in ("postgres", "pgbouncer"):
            drop_table(self.location, self.namespace)


@pytest.fixture(params=ALL_BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Every backend, the in-process one included."""
    chosen = Backend(request.param, tmp_path)
    yield chosen
    chosen.close()


@pytest.fixture(params=SHARED_BACKENDS)
def shared_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The backends several processes can share."""
    chosen = Backend(request.param, tmp_path)
    yield chosen
    chosen.close()

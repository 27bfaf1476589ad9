"""Stores for the session tests: one fixture, parametrized over every backend.

SQLite and the in-process store always run. Redis and PostgreSQL run against real servers
named by ``ROLLMEM_TEST_REDIS_URL`` / ``ROLLMEM_TEST_POSTGRES_DSN`` (``source .ci/services``
starts both); without them these tests skip, or fail when ``ROLLMEM_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from rollmem.stores import MemoryStore

from ._support import drop_namespace, make_store

StoreMaker = Callable[[], Any]

ALL_BACKENDS = ("memory", "sqlite", "redis", "postgres")
SHARED_BACKENDS = ("sqlite", "redis", "postgres")  # seen by several processes


def service_url(variable: str) -> str:
    """The server address in ``variable``; skips (or fails under ROLLMEM_REQUIRE_SERVICES=1) without it."""
    url = os.environ.get(variable)
    if not url:
        message = f"{variable} is not set; run `source .ci/services` to start the test servers"
        if os.environ.get("ROLLMEM_REQUIRE_SERVICES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return url


class Backend:
    """Builds stores that all see the same, private, namespace of one backend."""

    def __init__(self, name: str, tmp_path: Path) -> None:
        self.name = name
        self.tag = uuid.uuid4().hex[:12]
        self.location = ""
        self._opened: list[Any] = []
        self._cleanup: list[Callable[[], None]] = []
        if name == "sqlite":
            self.location = str(tmp_path / "sessions.db")
        elif name == "redis":
            self.location = service_url("ROLLMEM_TEST_REDIS_URL")
        elif name == "postgres":
            self.location = service_url("ROLLMEM_TEST_POSTGRES_DSN")
        self._memory = MemoryStore() if name == "memory" else None

    @property
    def namespace(self) -> str:
        """The Redis prefix or PostgreSQL table private to this test."""
        return f"rollmem_test_{self.tag}"

    def store(self) -> Any:
        """A store on the shared namespace (the same one for every call: MemoryStore)."""
        if self._memory is not None:
            return self._memory
        store = make_store(self.name, self.location, self.namespace)
        self._opened.append(store)
        return store

    def close(self) -> None:
        for store in self._opened:
            store.close()
        if self.name in ("redis", "postgres"):
            drop_namespace(self.name, self.location, self.namespace)


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

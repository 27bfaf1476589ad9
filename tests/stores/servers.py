"""The real Redis and PostgreSQL servers the store tests use, from ``source .ci/services``.

Addresses and control scripts come from the environment; without them a test skips with a
message saying how to start the servers, or fails under ``ROLLMEM_REQUIRE_SERVICES=1``.
Every test works under its own key prefix or table, removed afterwards.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from .contract import service_url

__all__ = [
    "drop_redis_keys",
    "drop_table",
    "postgres_ctl",
    "postgres_dsn",
    "redis_ctl",
    "redis_url",
    "stopped",
    "unique_name",
]

HOW_TO_START = "start Redis and PostgreSQL on loopback with `source .ci/services` (Debian, as root)"


def redis_url() -> str:
    """``ROLLMEM_TEST_REDIS_URL`` (skip or fail without it)."""
    return service_url("ROLLMEM_TEST_REDIS_URL", HOW_TO_START)


def postgres_dsn() -> str:
    """``ROLLMEM_TEST_POSTGRES_DSN`` (skip or fail without it)."""
    return service_url("ROLLMEM_TEST_POSTGRES_DSN", HOW_TO_START)


def redis_ctl() -> str:
    """The script that stops and starts the test Redis (``ROLLMEM_TEST_REDIS_CTL``)."""
    return service_url("ROLLMEM_TEST_REDIS_CTL", HOW_TO_START)


def postgres_ctl() -> str:
    """The script that stops and starts the test PostgreSQL (``ROLLMEM_TEST_POSTGRES_CTL``)."""
    return service_url("ROLLMEM_TEST_POSTGRES_CTL", HOW_TO_START)


def unique_name(stem: str) -> str:
    """``stem`` plus a random suffix: one key prefix or table per test."""
    return f"{stem}_{uuid.uuid4().hex[:12]}"


def _control(script: str, action: str) -> None:
    subprocess.run([script, action], check=True, timeout=120, capture_output=True)


@contextmanager
def stopped(script: str) -> Iterator[None]:
    """Stop a server with its control ``script`` for the block, and start it again after."""
    _control(script, "stop")
    try:
        yield
    finally:
        _control(script, "start")


def drop_redis_keys(url: str, prefix: str) -> int:
    """Delete every key that starts with ``prefix`` (taken literally); return how many went."""
    import redis

    from rollmem.stores.redis import _glob_literal

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=_glob_literal(prefix) + "*", count=1000))
        return int(client.delete(*keys)) if keys else 0
    finally:
        client.close()


def drop_table(dsn: str, table: str) -> None:
    """``DROP TABLE IF EXISTS`` ``table`` (a plain or schema-qualified name)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(*table.split("."))))

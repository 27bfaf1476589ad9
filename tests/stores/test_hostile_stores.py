"""Stores on hostile edges: an index per table however long its name, errors that never repeat a
huge session id whole nor show a URL's password, unreadable stored bytes reported as
InvalidStateError."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests._optional import skip_unless

from rollmem.errors import ConflictError, InvalidStateError, StoreUnavailableError
from rollmem.stores import LogWrite, MemoryStore

from .servers import drop_redis_keys, drop_table, postgres_dsn, redis_url, unique_name

HUGE_ID = "s" * 1_000_000


def test_a_conflict_does_not_repeat_a_huge_session_id() -> None:
    store = MemoryStore()
    with pytest.raises(ConflictError) as raised:
        store.write(HUGE_ID, LogWrite("gone", expected_revision=5))
    message = str(raised.value)
    assert len(message) < 300
    assert "1000000 characters" in message


# -- PostgreSQL ------------------------------------------------------------------------------------


@pytest.fixture
def long_tables() -> Iterator[tuple[str, str]]:
    skip_unless("postgres")
    dsn = postgres_dsn()
    stem = unique_name("rollmem_long_table_name_sharing_its_start")  # 54 characters
    names = (stem + "_one", stem + "_two")
    assert len(names[0]) <= 63
    assert names[0][:52] == names[1][:52]
    yield names
    for name in names:
        drop_table(dsn, name)


def test_postgres_tables_sharing_a_long_prefix_each_get_their_index(long_tables: tuple[str, str]) -> None:
    import psycopg

    from rollmem.stores.postgres import PostgresStore

    dsn = postgres_dsn()
    for table in long_tables:
        store = PostgresStore(dsn, table=table)
        try:
            store.write("s", LogWrite("", create=True, ttl=60))
        finally:
            store.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename, indexname FROM pg_indexes WHERE tablename LIKE %s AND indexdef LIKE %s",
            (long_tables[0][:40] + "%", "%expires_at%"),
        ).fetchall()
    assert len({row[0] for row in rows}) == len({row[1] for row in rows}) == len(rows) == 2


def test_postgres_keeps_a_huge_session_id_and_its_errors_do_not_repeat_it() -> None:
    skip_unless("postgres")
    from rollmem.stores.postgres import PostgresStore

    dsn = postgres_dsn()
    table = unique_name("rollmem_test")
    store = PostgresStore(dsn, table=table)
    try:
        head = store.write(HUGE_ID, LogWrite("", create=True))  # beyond an index row: keyed by a digest
        assert store.ids() == [HUGE_ID]
        loaded = store.load(HUGE_ID)
        assert loaded is not None
        assert loaded.head == head
        with pytest.raises(ConflictError) as raised:
            store.write(HUGE_ID, LogWrite("", create=True))
        assert len(str(raised.value)) < 2000
    finally:
        store.close()
        drop_table(dsn, table)


# -- Redis -----------------------------------------------------------------------------------------


@pytest.fixture
def redis_store() -> Iterator[Any]:
    skip_unless("redis")
    from rollmem.stores.redis import RedisStore

    url = redis_url()
    prefix = unique_name("rollmem_test") + ":"
    store = RedisStore(url, prefix=prefix)
    yield store
    store.close()
    drop_redis_keys(url, prefix)


def test_redis_state_that_is_not_utf8_is_invalid_state(redis_store: Any) -> None:
    import redis

    client = redis.Redis.from_url(redis_url())
    try:  # the summary of a head
        client.hset(
            redis_store._key("t"), mapping={"incarnation": "i", "revision": 1, "tail": 0, "summary": b"\xff"}
        )
    finally:
        client.close()
    with pytest.raises(InvalidStateError, match=r"^session 't': stored summary is not valid UTF-8"):
        redis_store.load("t")


# -- no error carries a URL's password ----------------------------------------------------------------

SECRET = "S3cr3t"


@pytest.mark.parametrize(
    ("package", "make", "error"),
    [
        ("psycopg", lambda s: s.PostgresStore(f"postgresql://u:{SECRET}@[::1/db"), ValueError),
        (
            "psycopg",
            lambda s: s.PostgresStore(f"postgresql://u:{SECRET}@127.0.0.1:1/db", timeout=1).load("s"),
            StoreUnavailableError,
        ),
        ("redis", lambda s: s.RedisStore(f"redis://:{SECRET}@host:notaport/0"), ValueError),
        ("redis", lambda s: s.RedisStore(f"redis://u:{SECRET}@[::1/0"), ValueError),
        (
            "redis",
            lambda s: s.RedisStore(f"redis://:{SECRET}@127.0.0.1:1/0").load("s"),
            StoreUnavailableError,
        ),
        (
            "redis",
            lambda s: s.RedisStore(f"redis://:{SECRET}@127.0.0.1:1/0", cluster=True).load("s"),
            StoreUnavailableError,
        ),
    ],
)
def test_no_store_error_shows_a_urls_password(
    package: str, make: Callable[[Any], Any], error: type[Exception]
) -> None:
    """Neither the message nor anything chained to it (the whole traceback as printed)."""
    skip_unless({"psycopg": "postgres", "redis": "redis"}[package])
    import rollmem.stores

    with pytest.raises(error) as caught:
        make(rollmem.stores)
    printed = "".join(traceback.format_exception(caught.type, caught.value, caught.tb))
    assert SECRET not in printed

"""``rollmem migrate STORE_URL`` against a real SQLite file, Redis and PostgreSQL, with sessions
saved in the pre-0.7 layouts the way the stores' own old-layout tests save them."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollmem.cli import main
from rollmem.testing import create, texts

from .servers import (
    close_redis,
    drop_redis_keys,
    drop_table,
    postgres_dsn,
    redis_cluster_url,
    redis_url,
    unique_name,
)


def _state(*contents: str) -> str:
    return json.dumps(
        {"version": 2, "summary": "S", "buffer": [{"role": "user", "content": c} for c in contents]}
    )


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["migrate", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _check_migrates(capsys: pytest.CaptureFixture[str], store: Any, url: str, *options: str) -> None:
    """The store holds old-layout sessions "old" (["a", "b"]) and "other" (["x"]) and a current
    one, "new": a dry run counts, a run moves, a second run moves nothing; the data stays."""
    assert _run(capsys, url, "--dry-run", *options) == (
        0,
        "3 sessions: 2 to migrate, 1 already current\n",
        "",
    )
    assert store.migrate("old", dry_run=True) is True, "the dry run wrote nothing"
    assert _run(capsys, url, *options) == (0, "3 sessions: 2 migrated, 1 already current\n", "")
    assert _run(capsys, url, *options) == (0, "3 sessions: 0 migrated, 3 already current\n", "")
    assert store.migrate("old") is False
    stored = store.load("old")
    assert (stored.head.incarnation, stored.head.summary, texts(stored)) == ("legacy", "S", ["a", "b"])
    assert [(e.seq, e.cost) for e in stored.entries] == [(0, -1), (1, -1)]
    assert texts(store.load("other")) == ["x"]
    assert texts(store.load("new")) == ["fresh"]
    assert store.ids() == ["new", "old", "other"]


# -- SQLite ----------------------------------------------------------------------------------------


def _version_1_database(path: Path, *rows: tuple[str, str, Any]) -> None:
    """A database the whole-state SQLiteStore (schema version 1) wrote: (id, state, expires_at)."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.executescript(
            'CREATE TABLE rollmem_meta ("key" TEXT PRIMARY KEY NOT NULL, "value" INTEGER NOT NULL);'
            "INSERT INTO rollmem_meta VALUES ('schema_version', 1);"
            'CREATE TABLE rollmem_sessions ("session_id" TEXT PRIMARY KEY NOT NULL, "state" TEXT NOT NULL, '
            '"revision" INTEGER NOT NULL, "expires_at" REAL, "updated_at" REAL NOT NULL);'
        )
        for session_id, state, expires_at in rows:
            conn.execute(
                "INSERT INTO rollmem_sessions VALUES (?, ?, 3, ?, 0)", (session_id, state, expires_at)
            )


def test_sqlite(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from rollmem.stores import SQLiteStore

    path = tmp_path / "sessions.db"
    _version_1_database(path, ("old", _state("a", "b"), None), ("other", _state("x"), 4e9))
    store = SQLiteStore(path)
    try:
        store.write("new", create("fresh"))
        _check_migrates(capsys, store, f"sqlite://{path}")
        with contextlib.closing(sqlite3.connect(path)) as conn:
            assert conn.execute("SELECT count(*) FROM rollmem_sessions").fetchone() == (0,)
            assert conn.execute(
                "SELECT expires_at FROM rollmem_heads WHERE session_id = 'other'"
            ).fetchone() == (4e9,), "the expiry moved with the session"
    finally:
        store.close()


def test_an_unreadable_session_stays_and_is_named_while_the_others_move(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "sessions.db"
    _version_1_database(path, ("old", _state("a"), None), ("bad", '{"summary": 1, "buffer": []}', None))
    status, out, err = _run(capsys, f"sqlite://{path}")
    assert (status, out) == (
        1,
        "2 sessions: 1 migrated, 0 already current, 1 unreadable (left as they are)\n",
    )
    assert "session 'bad'" in err
    assert "summary: expected str, got int" in err
    assert len(err.splitlines()) == 1
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT session_id FROM rollmem_sessions").fetchall() == [("bad",)]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://host/x", "'ftp://host/x': expected a store URL: sqlite:///PATH"),
        ("sessions.db", "'sessions.db': expected a store URL"),
        ("sqlite:///no/such/file.db", "sqlite:///no/such/file.db: no such database file: /no/such/file.db"),
    ],
)
def test_a_bad_store_url_is_a_usage_error(capsys: pytest.CaptureFixture[str], url: str, message: str) -> None:
    status, out, err = _run(capsys, url)
    assert (status, out) == (2, "")
    assert err.startswith(f"rollmem migrate: {message}")
    assert len(err.splitlines()) == 1


def test_an_unreachable_store_exits_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(capsys, "redis://127.0.0.1:1/0")
    assert (status, out) == (1, "")
    assert err.startswith("rollmem migrate: Redis listing failed:")
    assert len(err.splitlines()) == 1


# -- Redis -----------------------------------------------------------------------------------------


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    pytest.importorskip("redis", reason='the Redis tests need pip install "rollmem[redis]"')
    prefix = unique_name("rollmem-test-migrate") + ":"
    yield prefix
    drop_redis_keys(redis_url(), prefix)


def test_redis(capsys: pytest.CaptureFixture[str], redis_prefix: str) -> None:
    import redis

    from rollmem.stores import RedisStore

    url = redis_url()
    client = redis.Redis.from_url(url)
    store = RedisStore(url, prefix=redis_prefix)
    try:
        # the 0.1 layout (prefix + id) and the whole-state layout ({id}:state), as those releases wrote them
        client.hset(f"{redis_prefix}old", mapping={"state": _state("a", "b"), "revision": 3})
        client.hset(f"{redis_prefix}{{other}}:state", mapping={"state": _state("x"), "revision": 1})
        client.pexpire(f"{redis_prefix}{{other}}:state", 600_000)
        store.write("new", create("fresh"))
        _check_migrates(capsys, store, url, "--prefix", redis_prefix)
        assert client.exists(f"{redis_prefix}old", f"{redis_prefix}{{other}}:state") == 0
        assert 0 < client.pttl(f"{redis_prefix}{{other}}:head") <= 600_000, (
            "the expiry moved with the session"
        )
        assert client.pttl(f"{redis_prefix}{{old}}:head") == -1
    finally:
        store.close()
        client.close()


def test_redis_cluster_moves_state_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """On a cluster only the ``{id}:state`` layout is read (0.1 keys could not live there)."""
    redis_cluster = pytest.importorskip("redis.cluster")
    from rollmem.stores import RedisStore

    url, prefix = redis_cluster_url(), unique_name("rollmem-test-migrate") + ":"
    client = redis_cluster.RedisCluster.from_url(url)
    store = RedisStore(url, prefix=prefix, cluster=True)
    try:
        client.hset(f"{prefix}{{st}}:state", mapping={"state": _state("a"), "revision": 2})
        store.write("new", create("fresh"))
        options = ("--prefix", prefix, "--cluster")
        assert _run(capsys, url, *options) == (0, "2 sessions: 1 migrated, 1 already current\n", "")
        assert _run(capsys, url, *options) == (0, "2 sessions: 0 migrated, 2 already current\n", "")
        assert texts(store.load("st")) == ["a"]
        assert client.exists(f"{prefix}{{st}}:state") == 0
    finally:
        store.close()
        close_redis(client)
        drop_redis_keys(url, prefix, cluster=True)


# -- PostgreSQL ------------------------------------------------------------------------------------


@pytest.fixture
def pg_table() -> Iterator[str]:
    pytest.importorskip("psycopg", reason='the PostgreSQL tests need pip install "rollmem[postgres]"')
    table = unique_name("rollmem_test_migrate")
    yield table
    drop_table(postgres_dsn(), table)


def test_postgres(capsys: pytest.CaptureFixture[str], pg_table: str) -> None:
    import psycopg

    from rollmem.stores import PostgresStore

    dsn = postgres_dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:  # the table the whole-state PostgresStore wrote
        conn.execute(
            f"CREATE TABLE {pg_table} (id text PRIMARY KEY, state text NOT NULL, revision bigint NOT NULL, "
            "expires_at timestamptz, updated_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute(
            f"INSERT INTO {pg_table} (id, state, revision) VALUES ('old', %s, 3)", (_state("a", "b"),)
        )
        conn.execute(
            f"INSERT INTO {pg_table} (id, state, revision, expires_at) "
            "VALUES ('other', %s, 1, now() + interval '1 hour')",
            (_state("x"),),
        )
    store = PostgresStore(dsn, table=pg_table)
    try:
        store.write("new", create("fresh"))
        _check_migrates(capsys, store, dsn, "--table", pg_table)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute(f"SELECT count(*) FROM {pg_table}").fetchone() == (0,)
            left = conn.execute(
                f"SELECT extract(epoch FROM expires_at - now()) FROM {pg_table}_heads "
                "WHERE session_id = 'other'"
            ).fetchone()
            assert left is not None
            assert 3000 < left[0] <= 3600, "the expiry moved with the session"
    finally:
        store.close()

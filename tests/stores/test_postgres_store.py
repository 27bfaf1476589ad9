"""PostgresStore against a real PostgreSQL on loopback, directly and through PgBouncer
(``source .ci/services``)."""

from __future__ import annotations

import asyncio
import functools
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests._optional import need

from rollmem.errors import ConflictError, StoreUnavailableError
from rollmem.stores import LogWrite
from rollmem.testing import AsyncLogStoreContract, LogStoreContract, append, create, texts

from .servers import (
    ServerStoreChecks,
    drop_table,
    pgbouncer_ctl,
    pgbouncer_dsn,
    postgres_ctl,
    postgres_dsn,
    unique_name,
)

psycopg = need("postgres", "psycopg")
psycopg_pool = need("postgres", "psycopg_pool")

from rollmem.stores.postgres import PostgresStore  # noqa: E402
from rollmem.stores.rules import LAYOUT_VERSION  # noqa: E402


@pytest.fixture
def dsn() -> str:
    return postgres_dsn()


@pytest.fixture
def table(dsn: str) -> Iterator[str]:
    table = unique_name("rollmem_test")
    yield table
    drop_table(dsn, table)


def _query(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


class _Isolated:
    """Each contract test gets its own tables, dropped afterwards."""

    @pytest.fixture(autouse=True)
    def _isolate(self, dsn: str, table: str) -> None:
        self.dsn, self.table = dsn, table

    def store_factory(self) -> Callable[[], PostgresStore]:
        return functools.partial(PostgresStore, self.dsn, table=self.table)

    def make_store(self) -> PostgresStore:
        return self.store_factory()()


class TestPostgresStore(_Isolated, LogStoreContract):
    pass


class TestPostgresStoreAsync(_Isolated, AsyncLogStoreContract):
    pass


_APPENDER = """
import sys
from rollmem.stores.postgres import PostgresStore
from rollmem.testing import append
store = PostgresStore(sys.argv[1], table=sys.argv[2])
head = store.load("s").head
for number in range(int(sys.argv[4])):
    store.write("s", append(head, f"{sys.argv[3]}-{number}"))
store.close()
"""


class _LogServerChecks(ServerStoreChecks):
    """The server checks, on the log protocol, for a PostgresStore (a subclass sets ``control``)."""

    dsn: str
    table: str
    store_name = "PostgresStore"
    extra = "postgres"
    driver_modules = ("psycopg", "psycopg_pool")
    dead_address = "host=127.0.0.1 port=1"
    driver_error = staticmethod(lambda: psycopg.OperationalError)

    def outage_store(self) -> PostgresStore:
        return PostgresStore(self.dsn, table=self.table, timeout=1)

    def test_processes_never_lose_an_update(self) -> None:
        """Four processes append at once: every message is kept once, numbered 0..99."""
        store = self.store_factory()()
        try:
            store.write("s", create())
            tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests_dir, *sys.path])}
            workers = [
                subprocess.Popen(
                    [sys.executable, "-c", _APPENDER, self.dsn, self.table, f"p{n}", "25"], env=env
                )
                for n in range(4)
            ]
            assert [worker.wait(timeout=120) for worker in workers] == [0, 0, 0, 0]
            stored = store.load("s")
            assert sorted(texts(stored)) == sorted(f"p{n}-{i}" for n in range(4) for i in range(25))
            assert [e.seq for e in stored.entries] == list(range(100))
        finally:
            store.close()


class TestPostgresStoreServer(_Isolated, _LogServerChecks):
    control = staticmethod(postgres_ctl)

    def server_connections(self) -> int:
        query = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
        return int(_query(self.dsn, query)[0][0])


class TestPostgresStoreGivenPool(_Isolated, LogStoreContract):
    """A pool of the caller's, whose connections are not in autocommit mode and return dicts."""

    @pytest.fixture(autouse=True)
    def _given(self, dsn: str) -> Iterator[None]:
        kwargs = {"row_factory": psycopg.rows.dict_row}
        with psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=8, kwargs=kwargs, open=True) as pool:
            # The pool's worker thread draws on `random` while it connects; let it finish first, or
            # Hypothesis (<6.100 on Python 3.9) sees the global random state move under a strategy.
            pool.wait()
            self.pool = pool
            yield

    def make_store(self) -> PostgresStore:
        return PostgresStore(self.pool, table=self.table)


def _columns(dsn: str, table: str) -> list[tuple[Any, ...]]:
    return _query(
        dsn,
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_name = %s ORDER BY ordinal_position",
        table,
    )


def test_tables_are_created_on_first_use_with_their_columns(dsn: str, table: str) -> None:
    store = PostgresStore(dsn, table=table)
    try:
        assert _query(dsn, "SELECT to_regclass(%s)", f"{table}_heads") == [(None,)], (
            "nothing before first use"
        )
        head = store.write("s", create("a", "b", summary="S", ttl=60))
        store.write("s", append(head, "c"))
    finally:
        store.close()
    assert _columns(dsn, f"{table}_heads") == [
        ("session_id", "text", "NO"),
        ("incarnation", "text", "NO"),
        ("revision", "bigint", "NO"),
        ("summary", "text", "NO"),
        ("tail", "bigint", "NO"),
        ("counter", "text", "YES"),
        ("expires_at", "timestamp with time zone", "YES"),
        ("updated_at", "timestamp with time zone", "NO"),
        ("full_id", "text", "YES"),
    ]
    assert _columns(dsn, f"{table}_log") == [
        ("session_id", "text", "NO"),
        ("seq", "bigint", "NO"),
        ("message", "text", "NO"),
        ("cost", "bigint", "NO"),
    ]
    assert _query(dsn, f"SELECT session_id, revision, summary, tail, counter FROM {table}_heads") == [
        ("s", 1, "S", 3, "c")
    ]
    rows = _query(dsn, f"SELECT seq, message::json->>'content', cost FROM {table}_log ORDER BY seq")
    assert rows == [(0, "a", 1), (1, "b", 1), (2, "c", 1)]
    assert _query(dsn, f"SELECT key, value FROM {table}_meta") == [("schema_version", LAYOUT_VERSION)]
    assert _query(dsn, "SELECT to_regclass(%s)", table) == [(None,)], "no table named table itself"


# -- long session ids: keyed by a digest, the id kept whole ------------------------------------------

LONG_ID = "".join(f"{n:04x}" for n in range(751))  # 3,004 characters, beyond an index row


def test_a_long_id_is_keyed_by_a_digest_and_kept_whole(dsn: str, table: str) -> None:
    marked = "\x7frollmem:sha256:" + "0" * 64  # looks like a digest key: digested in turn
    with PostgresStore(dsn, table=table) as store:
        for session_id in (LONG_ID, marked, "short"):
            store.write(session_id, create(session_id[:5]))
        assert store.ids() == sorted([LONG_ID, marked, "short"])
        assert texts(store.load(marked)) == ["\x7froll"]
    rows = _query(dsn, f"SELECT session_id, full_id FROM {table}_heads ORDER BY full_id NULLS FIRST")
    assert rows[0] == ("short", None)
    assert sorted(row[1] for row in rows[1:]) == sorted([LONG_ID, marked])
    digests = {row[0] for row in rows[1:]}
    assert all(key.startswith("\x7frollmem:sha256:") and len(key) == 80 for key in digests)
    assert marked not in digests
    assert {row[0] for row in _query(dsn, f"SELECT DISTINCT session_id FROM {table}_log")} == {
        "short",
        *digests,
    }


def test_many_stores_creating_one_table_at_once(dsn: str, table: str) -> None:
    stores = [PostgresStore(dsn, table=table) for _ in range(8)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(stores))

    def first_use(index: int) -> None:
        try:
            barrier.wait()
            stores[index].write(f"s{index}", create())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first_use, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        assert stores[0].ids() == [f"s{i}" for i in range(8)]
    finally:
        for store in stores:
            store.close()


def test_concurrent_creates_one_wins_the_others_conflict(dsn: str, table: str) -> None:
    stores = [PostgresStore(dsn, table=table) for _ in range(6)]
    stores[0].ids()  # the tables exist: the creates race on the row only
    outcomes: list[str] = []
    barrier = threading.Barrier(len(stores))

    def create_it(index: int) -> None:
        barrier.wait()
        try:
            stores[index].write("s", create(str(index)))
            outcomes.append("won")
        except ConflictError:
            outcomes.append("conflict")
        except BaseException as exc:
            outcomes.append(repr(exc))

    threads = [threading.Thread(target=create_it, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert sorted(outcomes) == ["conflict"] * 5 + ["won"]
        assert len(texts(stores[0].load("s"))) == 1
    finally:
        for store in stores:
            store.close()


def test_custom_and_schema_qualified_tables_are_separate(dsn: str, table: str) -> None:
    schema = unique_name("rollmem_schema")
    _query(dsn, f"CREATE SCHEMA {schema}")
    default_named = PostgresStore(dsn, table=table)
    qualified = PostgresStore(dsn, table=f"{schema}.{table}")
    try:
        default_named.write("s", create("public"))
        qualified.write("s", create("schema"))
        assert texts(default_named.load("s")) == ["public"]
        assert texts(qualified.load("s")) == ["schema"]
        assert qualified.table == f"{schema}.{table}"
        assert _query(dsn, f"SELECT message::json->>'content' FROM {schema}.{table}_log") == [("schema",)]
    finally:
        default_named.close()
        qualified.close()
        _query(dsn, f"DROP SCHEMA {schema} CASCADE")


def test_default_table_name(dsn: str) -> None:
    session_id = unique_name("default-table")
    existed = _query(dsn, "SELECT to_regclass('rollmem_sessions_heads')") != [(None,)]
    store = PostgresStore(dsn)
    try:
        store.write(session_id, create("x"))
        assert _query(dsn, "SELECT tail FROM rollmem_sessions_heads WHERE session_id = %s", session_id) == [
            (1,)
        ]
        assert store.delete(session_id) is True
    finally:
        store.close()
        if not existed:
            drop_table(dsn, "rollmem_sessions")


def test_long_table_names_keep_their_derived_names_within_63_characters(dsn: str) -> None:
    table = unique_name("rollmem_test").ljust(63, "x")
    store = PostgresStore(dsn, table=table)
    try:
        head = store.write("s", create("a", ttl=60))
        store.write("s", append(head, "b"))
        assert texts(store.load("s")) == ["a", "b"]
        names = [
            row[0]
            for row in _query(dsn, "SELECT relname FROM pg_class WHERE relname LIKE %s", table[:40] + "%")
        ]
        assert len(names) >= 4
        assert all(len(name) <= 63 for name in names)
        assert len(set(names)) == len(names)
    finally:
        store.close()
        drop_table(dsn, table)


@pytest.mark.parametrize(
    "table",
    [
        "sessions; DROP TABLE rollmem_sessions; --",
        'x" OR "1"="1',
        "1starts_with_digit",
        "has space",
        "a.b.c",
        "",
        "ünicode",
        "x" * 64,
    ],
)
def test_malicious_or_odd_table_names_are_rejected(dsn: str, table: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"got {table!r}")):
        PostgresStore(dsn, table=table)


def test_table_name_type_and_timeout_are_checked(dsn: str) -> None:
    with pytest.raises(TypeError, match="table: expected str, got bytes"):
        PostgresStore(dsn, table=b"t")  # type: ignore[arg-type]
    for timeout in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout must be a finite number > 0"):
            PostgresStore(dsn, timeout=timeout)


def test_bad_conninfo_or_pool() -> None:
    with pytest.raises(ValueError, match="not a valid connection string"):
        PostgresStore("host=127.0.0.1 port")
    with pytest.raises(TypeError, match=r"must be a connection string, a psycopg_pool\.ConnectionPool"):
        PostgresStore(5432)  # type: ignore[arg-type]


def test_expiry_uses_the_column_and_purge_deletes_rows(dsn: str, table: str) -> None:
    store = PostgresStore(dsn, table=table)
    try:
        store.write("old", create("x", ttl=0.05))
        store.write("new", create("x", ttl=60))
        store.write("huge", create("x", ttl=1e300))
        heads = f"{table}_heads"
        _query(dsn, f"UPDATE {heads} SET expires_at = now() - interval '1 second' WHERE session_id = 'old'")
        assert store.load("old") is None
        assert len(_query(dsn, f"SELECT session_id FROM {heads}")) == 3, "an expired row stays until purged"
        assert store.purge_expired() == 1
        assert sorted(_query(dsn, f"SELECT session_id FROM {heads}")) == [("huge",), ("new",)]
        assert sorted(_query(dsn, f"SELECT session_id FROM {table}_log")) == [("huge",), ("new",)]
        years = _query(
            dsn,
            f"SELECT extract(year FROM expires_at) - extract(year FROM now()) FROM {heads} "
            "WHERE session_id = 'huge'",
        )[0][0]
        assert years > 300, "a huge ttl means practically never"
    finally:
        store.close()


def test_a_failed_write_writes_nothing(dsn: str, table: str) -> None:
    """A write is one transaction: an error inside it (here the head row is locked past the
    lock timeout) leaves the session as it was."""
    store = PostgresStore(f"{dsn}?options=-c%20lock_timeout%3D200", table=table)
    try:
        head = store.write("s", create("one"))
        with psycopg.connect(dsn) as locker:
            locker.execute(f"SELECT * FROM {table}_heads WHERE session_id = 's' FOR UPDATE")
            with pytest.raises(StoreUnavailableError, match=r"write of session 's' failed: .*lock timeout"):
                store.write("s", append(head, "two"))
            locker.rollback()
        stored = store.load("s")
        assert (stored.head, texts(stored)) == (head, ["one"])
        assert store.write("s", append(head, "two")).tail == 2
    finally:
        store.close()


def test_given_pools_serve_one_side_and_stay_open(dsn: str, table: str) -> None:
    with psycopg_pool.ConnectionPool(dsn, min_size=1, open=True) as pool:
        store = PostgresStore(pool, table=table)
        head = store.write("s", create("x"))
        with pytest.raises(TypeError, match="given a blocking ConnectionPool: use load, write"):
            asyncio.run(store.aload("s"))
        store.close()
        assert not pool.closed
        with pytest.raises(StoreUnavailableError, match=r" is closed$"):
            store.load("s")

    async def main() -> None:
        async with psycopg_pool.AsyncConnectionPool(dsn, min_size=1, open=False) as given:
            async_store = PostgresStore(given, table=table)
            assert texts(await async_store.aload("s")) == ["x"]
            assert (await async_store.awrite("s", append(head, "y"))).tail == 2
            with pytest.raises(TypeError, match="given an AsyncConnectionPool: use the a-methods"):
                async_store.load("s")
            await async_store.aclose()
            assert not given.closed

    asyncio.run(main())


def test_conflict_names_the_live_revision(dsn: str, table: str) -> None:
    store = PostgresStore(dsn, table=table)
    try:
        head = store.write("s", create("x"))
        store.write("s", LogWrite(head.incarnation, expected_revision=1, cut=1, counter="c"))
        with pytest.raises(ConflictError, match="written against revision 1 but the store is at revision 2"):
            store.write("s", LogWrite(head.incarnation, expected_revision=1, cut=1, counter="c"))
        with pytest.raises(ConflictError, match="'" + "x" * 100 + r"'\.\.\. \(1000 characters\)"):
            store.write("x" * 1000, append(head, "y"))
    finally:
        store.close()


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (99, "version 99; this rollmem reads version 2: upgrade rollmem"),
        (1, "version 1; this rollmem reads version 2"),
    ],
)
def test_another_layout_version_is_refused(dsn: str, table: str, version: int, message: str) -> None:
    store = PostgresStore(dsn, table=table)
    store.write("s", create("x"))
    store.close()
    _query(dsn, f"UPDATE {table}_meta SET value = %s", version)
    other = PostgresStore(dsn, table=table)
    try:
        with pytest.raises(StoreUnavailableError, match=f"holds rollmem layout {message}$"):
            other.load("s")
        with pytest.raises(StoreUnavailableError, match=f"layout version {version}"):
            asyncio.run(_awrite_then_close(other, "t"))
    finally:
        other.close()
    assert _query(dsn, f"SELECT session_id FROM {table}_heads") == [("s",)]


async def _awrite_then_close(store: PostgresStore, session_id: str) -> None:
    try:
        await store.awrite(session_id, create("y"))
    finally:
        await store.aclose()


# -- through PgBouncer (transaction pooling; the rollmem_test_session alias pools by session) ----


class _ThroughPgBouncer(_Isolated):
    """Each test gets its own tables, reached through PgBouncer, dropped afterwards."""

    @pytest.fixture(autouse=True)
    def _isolate(self) -> Iterator[None]:
        self.dsn, self.table = pgbouncer_dsn(), unique_name("rollmem_test")
        yield
        drop_table(postgres_dsn(), self.table)


class TestPostgresStoreThroughPgBouncer(_ThroughPgBouncer, LogStoreContract):
    pass


class TestPostgresStoreThroughPgBouncerAsync(_ThroughPgBouncer, AsyncLogStoreContract):
    pass


class TestPostgresStoreThroughPgBouncerServer(_ThroughPgBouncer, _LogServerChecks):
    """PgBouncer stopped mid-run."""

    control = staticmethod(pgbouncer_ctl)


def _turns(store: PostgresStore, session_ids: list[str], turns: int) -> list[BaseException]:
    """Each thread creates its session, then loads it and appends or folds ``turns`` times
    (well past psycopg's threshold for preparing a statement on the server); return the errors."""
    errors: list[BaseException] = []

    def work(session_id: str) -> None:
        try:
            head = store.write(session_id, create())
            for turn in range(turns):
                stored = store.load(session_id, since=head)
                head = stored.head
                if turn % 10 == 9:
                    fold = LogWrite(
                        head.incarnation, expected_revision=head.revision, cut=head.tail, counter="c"
                    )
                    head = store.write(session_id, fold)
                else:
                    head = store.write(session_id, append(head, str(turn)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(session_id,)) for session_id in session_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


@pytest.mark.parametrize("database", ["rollmem_test", "rollmem_test_session"])
def test_threads_through_pgbouncer_use_no_prepared_statements(database: str) -> None:
    """Issue: 6 threads x 60 turns through transaction pooling failed at once with
    'prepared statement "_pg3_0" already exists' and its kin."""
    dsn = pgbouncer_dsn().rsplit("/", 1)[0] + "/" + database
    table = unique_name("rollmem_test")
    store = PostgresStore(dsn, table=table)
    try:
        session_ids = [f"s{index}" for index in range(6)]
        assert _turns(store, session_ids, 60) == []
        for session_id in session_ids:
            stored = store.load(session_id)
            assert (stored.head.revision, stored.head.tail, texts(stored)) == (7, 54, [])
    finally:
        store.close()
        drop_table(postgres_dsn(), table)


def test_a_given_pool_keeps_its_settings_and_works_behind_pgbouncer_as_documented() -> None:
    table = unique_name("rollmem_test")
    kwargs = {"prepare_threshold": None, "autocommit": True}
    try:
        with psycopg_pool.ConnectionPool(pgbouncer_dsn(), min_size=1, max_size=6, kwargs=kwargs) as pool:
            store = PostgresStore(pool, table=table)
            assert _turns(store, [f"s{index}" for index in range(6)], 30) == []
            with pool.connection() as conn:
                assert conn.prepare_threshold is None, "the store left the pool's settings alone"
    finally:
        drop_table(postgres_dsn(), table)


_FORGOTTEN = """
import asyncio, sys
from rollmem.stores.postgres import PostgresStore

store = PostgresStore(sys.argv[1], table=sys.argv[2])

async def main():
    await store.aload("s")
    for _ in range(40):
        asyncio.ensure_future(store.aload("s"))
    await asyncio.sleep(0.002)  # the pool grows: its workers are connecting as the loop ends

asyncio.run(main())
print("ended")
"""


def test_an_async_store_never_closed_does_not_hang_the_end_of_its_loop(dsn: str, table: str) -> None:
    """The pool's workers swallow the cancellation asyncio.run sends as it ends; the store
    closes the pool then, so they stop (it hung in most runs before)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", _FORGOTTEN, dsn, table],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.returncode, done.stdout) == (0, "ended\n"), done.stderr

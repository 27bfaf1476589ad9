"""PostgresStore against a real PostgreSQL on loopback, directly and through PgBouncer
(``source .ci/services``)."""

from __future__ import annotations

import asyncio
import functools
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rollmem.errors import ConflictError, StoreUnavailableError
from rollmem.stores import StoredSession

from .contract import (
    AsyncStoreContract,
    StoreContract,
)
from .servers import (
    ServerStoreChecks,
    drop_table,
    pgbouncer_ctl,
    pgbouncer_dsn,
    postgres_ctl,
    postgres_dsn,
    unique_name,
)

psycopg = pytest.importorskip("psycopg", reason='the PostgreSQL tests need pip install "rollmem[postgres]"')
psycopg_pool = pytest.importorskip(
    "psycopg_pool", reason='the PostgreSQL tests need pip install "rollmem[postgres]"'
)

from rollmem.stores.postgres import PostgresStore  # noqa: E402


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
    """Each contract test gets its own table, dropped afterwards."""

    @pytest.fixture(autouse=True)
    def _isolate(self, dsn: str, table: str) -> None:
        self.dsn, self.table = dsn, table

    def store_factory(self) -> Callable[[], PostgresStore]:
        return functools.partial(PostgresStore, self.dsn, table=self.table)

    def make_store(self) -> PostgresStore:
        return self.store_factory()()


class TestPostgresStore(_Isolated, StoreContract):
    pass


class TestPostgresStoreAsync(_Isolated, AsyncStoreContract):
    pass


class TestPostgresStoreServer(_Isolated, ServerStoreChecks):
    store_name = "PostgresStore"
    extra = "postgres"
    driver_modules = ("psycopg", "psycopg_pool")
    dead_address = "host=127.0.0.1 port=1"
    control = staticmethod(postgres_ctl)
    driver_error = staticmethod(lambda: psycopg.OperationalError)

    def outage_store(self) -> PostgresStore:
        return PostgresStore(self.dsn, table=self.table, timeout=1)


class TestPostgresStoreGivenPool(_Isolated, StoreContract):
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


def test_table_is_created_on_first_use_with_its_columns(dsn: str, table: str) -> None:
    store = PostgresStore(dsn, table=table)
    try:
        assert _query(dsn, "SELECT to_regclass(%s)", table) == [(None,)], "nothing happens before first use"
        store.save("s", "x", 0, 60)
        store.save("s", "y", 1)
    finally:
        store.close()
    columns = _query(
        dsn,
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_name = %s ORDER BY ordinal_position",
        table,
    )
    assert columns == [
        ("id", "text", "NO"),
        ("state", "text", "NO"),
        ("revision", "bigint", "NO"),
        ("expires_at", "timestamp with time zone", "YES"),
        ("updated_at", "timestamp with time zone", "NO"),
    ]
    assert _query(dsn, f"SELECT id, state, revision, expires_at FROM {table}") == [("s", "y", 2, None)]


def test_many_stores_creating_one_table_at_once(dsn: str, table: str) -> None:
    stores = [PostgresStore(dsn, table=table) for _ in range(8)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(stores))

    def first_use(index: int) -> None:
        try:
            barrier.wait()
            stores[index].save(f"s{index}", "x", 0)
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


def test_custom_and_schema_qualified_tables_are_separate(dsn: str, table: str) -> None:
    schema = unique_name("rollmem_schema")
    _query(dsn, f"CREATE SCHEMA {schema}")
    default_named = PostgresStore(dsn, table=table)
    qualified = PostgresStore(dsn, table=f"{schema}.{table}")
    try:
        default_named.save("s", "public", 0)
        qualified.save("s", "schema", 0)
        assert default_named.load("s") == StoredSession("public", 1)
        assert qualified.load("s") == StoredSession("schema", 1)
        assert qualified.table == f"{schema}.{table}"
        assert _query(dsn, f"SELECT state FROM {schema}.{table}") == [("schema",)]
    finally:
        default_named.close()
        qualified.close()
        _query(dsn, f"DROP SCHEMA {schema} CASCADE")


def test_default_table_name(dsn: str) -> None:
    session_id = unique_name("default-table")
    existed = _query(dsn, "SELECT to_regclass('rollmem_sessions')") != [(None,)]
    store = PostgresStore(dsn)
    try:
        store.save(session_id, "x", 0)
        assert _query(dsn, "SELECT state FROM rollmem_sessions WHERE id = %s", session_id) == [("x",)]
        assert store.delete(session_id) is True
    finally:
        store.close()
        if not existed:
            drop_table(dsn, "rollmem_sessions")


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
        store.save("old", "x", 0, 0.05)
        store.save("new", "x", 0, 60)
        store.save("huge", "x", 0, 1e300)
        _query(dsn, f"UPDATE {table} SET expires_at = now() - interval '1 second' WHERE id = 'old'")
        assert store.load("old") is None
        assert len(_query(dsn, f"SELECT id FROM {table}")) == 3, "an expired row stays until purged"
        assert store.purge_expired() == 1
        assert sorted(_query(dsn, f"SELECT id FROM {table}")) == [("huge",), ("new",)]
        years = _query(
            dsn,
            f"SELECT extract(year FROM expires_at) - extract(year FROM now()) FROM {table} WHERE id = 'huge'",
        )[0][0]
        assert years > 300, "a huge ttl means practically never"
    finally:
        store.close()


def test_a_failed_save_writes_nothing(dsn: str, table: str) -> None:
    """The save is one transaction: an error inside it (here the row is locked past the
    statement timeout) leaves the previous revision."""
    store = PostgresStore(f"{dsn}?options=-c%20lock_timeout%3D200", table=table)
    try:
        store.save("s", "one", 0)
        with psycopg.connect(dsn) as locker:
            locker.execute(f"SELECT * FROM {table} WHERE id = 's' FOR UPDATE")
            with pytest.raises(StoreUnavailableError, match=r"save of session 's' failed: .*lock timeout"):
                store.save("s", "two", 1)
            locker.rollback()
        assert store.load("s") == StoredSession("one", 1)
        assert store.save("s", "two", 1) == 2
    finally:
        store.close()


def test_given_pools_serve_one_side_and_stay_open(dsn: str, table: str) -> None:
    with psycopg_pool.ConnectionPool(dsn, min_size=1, open=True) as pool:
        store = PostgresStore(pool, table=table)
        store.save("s", "x", 0)
        store.close()
        assert not pool.closed
        assert store.load("s") == StoredSession("x", 1)
        with pytest.raises(TypeError, match="given a blocking ConnectionPool: use load, save"):
            asyncio.run(store.aload("s"))

    async def main() -> None:
        async with psycopg_pool.AsyncConnectionPool(dsn, min_size=1, open=False) as given:
            async_store = PostgresStore(given, table=table)
            assert await async_store.aload("s") == StoredSession("x", 1)
            assert await async_store.asave("s", "y", 1) == 2
            await async_store.aclose()
            assert not given.closed
            with pytest.raises(TypeError, match="given an AsyncConnectionPool: use the a-methods"):
                async_store.load("s")

    asyncio.run(main())


def test_conflict_names_the_live_revision(dsn: str, table: str) -> None:
    store = PostgresStore(dsn, table=table)
    try:
        store.save("s", "x", 0)
        store.save("s", "x", 1)
        with pytest.raises(
            ConflictError, match="session 's': saved against revision 1 but the store is at revision 2"
        ):
            store.save("s", "x", 1)
    finally:
        store.close()


# -- through PgBouncer (transaction pooling; the rollmem_test_session alias pools by session) ----


class _ThroughPgBouncer:
    """Each test gets its own table, reached through PgBouncer, dropped afterwards."""

    @pytest.fixture(autouse=True)
    def _isolate(self) -> Iterator[None]:
        self.dsn, self.table = pgbouncer_dsn(), unique_name("rollmem_test")
        yield
        drop_table(postgres_dsn(), self.table)

    def store_factory(self) -> Callable[[], PostgresStore]:
        return functools.partial(PostgresStore, self.dsn, table=self.table)

    def make_store(self) -> PostgresStore:
        return self.store_factory()()


class TestPostgresStoreThroughPgBouncer(_ThroughPgBouncer, StoreContract):
    pass


class TestPostgresStoreThroughPgBouncerAsync(_ThroughPgBouncer, AsyncStoreContract):
    pass


class TestPostgresStoreThroughPgBouncerServer(_ThroughPgBouncer, ServerStoreChecks):
    """PgBouncer stopped mid-run."""

    store_name = "PostgresStore"
    extra = "postgres"
    driver_modules = ("psycopg", "psycopg_pool")
    dead_address = "host=127.0.0.1 port=1"
    control = staticmethod(pgbouncer_ctl)
    driver_error = staticmethod(lambda: psycopg.OperationalError)

    def outage_store(self) -> PostgresStore:
        return PostgresStore(self.dsn, table=self.table, timeout=1)


def _turns(store: PostgresStore, session_ids: list[str], turns: int) -> list[BaseException]:
    """Each thread loads and saves its session ``turns`` times (well past psycopg's threshold
    for preparing a statement on the server); return the errors."""
    errors: list[BaseException] = []

    def work(session_id: str) -> None:
        try:
            for turn in range(turns):
                current = store.load(session_id)
                store.save(session_id, str(turn), 0 if current is None else current.revision)
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
        assert [store.load(session_id) for session_id in session_ids] == [StoredSession("59", 60)] * 6
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

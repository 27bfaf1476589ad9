"""Sessions in PostgreSQL: :class:`PostgresStore` (extra ``postgres``: psycopg 3 and psycopg_pool).

One table (created on first use) holds a row per session: ``id``, ``state``, ``revision``,
``expires_at`` and ``updated_at``. Every operation is written once, as a generator of SQL
steps; the blocking and the async methods only drive it on their kind of connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import threading
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, TypeVar, Union

from .. import _validate as v
from ..errors import MissingExtraError, StoreUnavailableError
from ._common import check_prefix, check_save, check_session_id, conflict, shown
from ._protocol import StoredSession

if TYPE_CHECKING:
    from psycopg import AsyncConnection, Connection
    from psycopg.sql import Composed
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

__all__ = ["PostgresStore"]

T = TypeVar("T")
Rows = list[tuple[Any, ...]]
# A store operation: yields (query, parameters), receives (rowcount, rows), returns its result.
Flow = Generator["tuple[Composed, Sequence[Any]]", "tuple[int, Rows]", T]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
_MAX_TTL = 10.0**10  # seconds (~317 years): longer ttls mean "practically never"
_LIVE = "(expires_at IS NULL OR expires_at > now())"
_EXPIRES = "now() + make_interval(secs => %s::double precision)"


def _import_driver() -> ModuleType:
    try:
        import psycopg
        import psycopg.sql
    except ImportError as exc:
        raise MissingExtraError("psycopg", "postgres", "PostgresStore") from exc
    try:
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError("psycopg_pool", "postgres", "PostgresStore") from exc
    return psycopg


def _check_table(table: object) -> list[str]:
    table = v.check_str("table", table)
    parts = table.split(".")
    if len(parts) > 2 or not all(_IDENTIFIER.match(part) for part in parts):
        raise ValueError(
            f"table must be a name or schema.name made of letters, digits and underscores "
            f"(not starting with a digit, at most 63 each), got {table!r}"
        )
    return parts


def _ttl_seconds(ttl: Optional[float]) -> Optional[float]:
    return None if ttl is None else min(float(ttl), _MAX_TTL)


class _Sql(NamedTuple):
    """The statements of one store, with its table name quoted as an identifier."""

    create: tuple[Composed, ...]
    load: Composed
    insert: Composed
    update: Composed
    revision: Composed
    delete: Composed
    ids: Composed
    purge: Composed


def _statements(psycopg: ModuleType, parts: list[str]) -> _Sql:
    sql = psycopg.sql
    table = sql.Identifier(*parts)
    name = parts[-1]
    if len(name) > 52:  # a long name keeps a unique index name within PostgreSQL's 63 characters
        name = name[:40] + "_" + hashlib.sha256(name.encode()).hexdigest()[:10]
    index = sql.Identifier(name + "_expires_at")

    def q(text: str) -> Composed:
        return sql.SQL(text).format(table=table, index=index)  # type: ignore[no-any-return]

    return _Sql(
        create=(
            # Serializes concurrent first uses: CREATE ... IF NOT EXISTS alone can still collide.
            q("SELECT pg_advisory_xact_lock(hashtext('rollmem:' || %s))"),
            q(
                "CREATE TABLE IF NOT EXISTS {table} (id text PRIMARY KEY, state text NOT NULL, "
                "revision bigint NOT NULL, expires_at timestamptz, "
                "updated_at timestamptz NOT NULL DEFAULT now())"
            ),
            q("CREATE INDEX IF NOT EXISTS {index} ON {table} (expires_at) WHERE expires_at IS NOT NULL"),
        ),
        load=q(f"SELECT state, revision FROM {{table}} WHERE id = %s AND {_LIVE}"),
        # An expired row counts as absent: the insert takes its place in the same statement.
        insert=q(
            "INSERT INTO {table} AS old (id, state, revision, expires_at, updated_at) "
            f"VALUES (%s, %s, 1, {_EXPIRES}, now()) "
            "ON CONFLICT (id) DO UPDATE SET state = excluded.state, revision = 1, "
            "expires_at = excluded.expires_at, updated_at = excluded.updated_at "
            "WHERE old.expires_at IS NOT NULL AND old.expires_at <= now()"
        ),
        update=q(
            f"UPDATE {{table}} SET state = %s, revision = revision + 1, expires_at = {_EXPIRES}, "
            f"updated_at = now() WHERE id = %s AND revision = %s AND {_LIVE}"
        ),
        revision=q(f"SELECT revision FROM {{table}} WHERE id = %s AND {_LIVE}"),
        delete=q(f"DELETE FROM {{table}} WHERE id = %s RETURNING {_LIVE}"),
        ids=q(f"SELECT id FROM {{table}} WHERE id LIKE %s ESCAPE '\\' AND {_LIVE}"),
        purge=q("DELETE FROM {table} WHERE expires_at <= now()"),
    )


class _NoTransaction:
    """Stands in for ``conn.transaction()`` around a single read (sync and async)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Union[type[BaseException], BaseException, TracebackType, None]) -> None:
        return None

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: Union[type[BaseException], BaseException, TracebackType, None]) -> None:
        return None


class PostgresStore:
    """A session store in a PostgreSQL table, shared by every process that reaches the server.

    ``conninfo_or_pool`` is a libpq connection string or URI, a ``psycopg_pool.ConnectionPool``
    for the blocking methods, or an ``AsyncConnectionPool`` for the ``a``-methods. From a
    connection string the store opens the pool it needs on first use (autocommit
    connections, checked before each use) and :meth:`close` / :meth:`aclose` close it; a pool
    you pass stays yours to close. The async pool a store opens belongs to the event loop
    that first used it: ``await store.aclose()`` there before using the store from another
    loop. ``timeout`` (seconds) bounds the wait for a connection of a pool the store opens,
    so a dead server fails fast.

    Behind PgBouncer (transaction or session pooling) it works with no extra setting: the
    connections the store opens never prepare statements on the server
    (``prepare_threshold=None``), since a pooler may run the next transaction on another
    server connection, where the prepared statement is missing or means something else; each
    save is one transaction and the store sets no session state. A pool you pass keeps your
    settings: to use one behind PgBouncer in transaction mode, open it with
    ``kwargs={"prepare_threshold": None}`` (and ``autocommit=True`` if you like, as the store
    does).

    ``table`` (a name or ``schema.name``, quoted as an identifier) is created on first use.
    A save is one transaction: ``INSERT ... ON CONFLICT`` for a new session (an expired row
    counts as absent), ``UPDATE ... WHERE revision = %s`` otherwise. ``ttl`` sets
    ``expires_at``; expired rows are invisible and :meth:`purge_expired` deletes them.
    Driver errors (unreachable server, pool timeout, SQL errors) raise
    :class:`~rollmem.errors.StoreUnavailableError` from the driver's exception.
    """

    def __init__(
        self,
        conninfo_or_pool: Union[str, ConnectionPool[Any], AsyncConnectionPool[Any]],
        *,
        table: str = "rollmem_sessions",
        timeout: float = 5.0,
    ) -> None:
        psycopg = _import_driver()
        import psycopg_pool

        parts = _check_table(table)
        v.check_positive_number("timeout", timeout)
        self._table = table
        self._sql = _statements(psycopg, parts)
        self._timeout = float(timeout)
        self._lock = threading.Lock()
        self._ready = False
        self._conninfo: Optional[str] = None
        self._pool: Optional[ConnectionPool[Any]] = None
        self._apool: Optional[AsyncConnectionPool[Any]] = None
        self._apool_loop: Optional[asyncio.AbstractEventLoop] = None
        if isinstance(conninfo_or_pool, str):
            try:
                options = psycopg.conninfo.conninfo_to_dict(conninfo_or_pool)
            except psycopg.Error as exc:
                raise ValueError(f"conninfo_or_pool is not a valid connection string: {exc}") from None
            self._conninfo = conninfo_or_pool
            # No server-side prepared statements: safe behind PgBouncer's transaction pooling.
            self._connect_options: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}
            if "connect_timeout" not in options:
                self._connect_options["connect_timeout"] = max(2, math.ceil(self._timeout))
        elif isinstance(conninfo_or_pool, psycopg_pool.AsyncConnectionPool):
            self._apool = conninfo_or_pool
        elif isinstance(conninfo_or_pool, psycopg_pool.ConnectionPool):
            self._pool = conninfo_or_pool
        else:
            raise TypeError(
                "conninfo_or_pool must be a connection string, a psycopg_pool.ConnectionPool or "
                f"an AsyncConnectionPool, got {type(conninfo_or_pool).__name__}"
            )

    def __repr__(self) -> str:
        return f"<PostgresStore table={self._table!r}>"

    @property
    def table(self) -> str:
        """The name of the table holding the sessions."""
        return self._table

    # -- pools ---------------------------------------------------------------------------------

    def _pool_options(self) -> dict[str, Any]:
        """Settings of the pools the store opens itself (opened by the caller, without waiting)."""
        return {
            "kwargs": self._connect_options,
            "min_size": 1,
            "max_size": 10,
            "timeout": self._timeout,
            # Give up reconnecting soon, so that the next request after an outage connects at
            # once instead of waiting out the pool's growing backoff (up to minutes).
            "reconnect_timeout": self._timeout,
            "open": False,
            "name": f"rollmem-{self._table}",
        }

    def _sync_pool(self) -> ConnectionPool[Any]:
        if self._pool is not None:
            return self._pool
        if self._conninfo is None:
            raise TypeError(
                "this PostgresStore was given an AsyncConnectionPool: use the a-methods (aload, asave, ...)"
            )
        from psycopg_pool import ConnectionPool

        with self._lock:
            if self._pool is None:
                pool: ConnectionPool[Any] = ConnectionPool(
                    self._conninfo, check=ConnectionPool.check_connection, **self._pool_options()
                )
                pool.open(wait=False)
                self._pool = pool
            return self._pool

    async def _async_pool(self) -> AsyncConnectionPool[Any]:
        loop = asyncio.get_running_loop()
        if self._conninfo is None:
            if self._apool is None:
                raise TypeError("this PostgresStore was given a blocking ConnectionPool: use load, save, ...")
            return self._apool
        from psycopg_pool import AsyncConnectionPool

        if self._apool is None:
            created: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self._conninfo, check=AsyncConnectionPool.check_connection, **self._pool_options()
            )
            await created.open(wait=False)
            with self._lock:  # publish only an open pool; a task that raced here closes its own
                won = self._apool is None
                if won:
                    self._apool, self._apool_loop = created, loop
            if not won:
                await created.close()
        return self._bound_pool(loop)

    def _bound_pool(self, loop: asyncio.AbstractEventLoop) -> AsyncConnectionPool[Any]:
        with self._lock:
            pool, pool_loop = self._apool, self._apool_loop
        if pool is None or pool_loop is not loop:
            raise RuntimeError(
                "this PostgresStore's async pool belongs to another event loop (or was just closed): "
                "await store.aclose() on that loop before using the store on a new one"
            )
        return pool

    @contextmanager
    def _errors(self, action: str, session_id: Optional[str] = None) -> Iterator[None]:
        psycopg = _import_driver()
        try:
            yield
        except psycopg.Error as exc:
            target = "" if session_id is None else f" of session {shown(session_id)}"
            raise StoreUnavailableError(f"PostgreSQL {action}{target} failed: {exc}") from exc

    # -- the operations, written once ------------------------------------------------------------

    def _create_flow(self) -> Flow[None]:
        lock, *statements = self._sql.create
        yield lock, (self._table,)
        for statement in statements:
            yield statement, ()

    def _load_flow(self, session_id: str) -> Flow[Optional[StoredSession]]:
        _, rows = yield self._sql.load, (session_id,)
        return StoredSession(rows[0][0], rows[0][1]) if rows else None

    def _save_flow(
        self, session_id: str, state: str, expected_revision: int, ttl: Optional[float]
    ) -> Flow[tuple[bool, int]]:
        """(True, new revision), or (False, live revision) when another writer saved first."""
        seconds = _ttl_seconds(ttl)
        if expected_revision == 0:
            count, _ = yield self._sql.insert, (session_id, state, seconds)
        else:
            count, _ = yield self._sql.update, (state, seconds, session_id, expected_revision)
        if count == 1:
            return True, expected_revision + 1
        _, rows = yield self._sql.revision, (session_id,)
        return False, rows[0][0] if rows else 0

    def _delete_flow(self, session_id: str) -> Flow[bool]:
        _, rows = yield self._sql.delete, (session_id,)
        return bool(rows and rows[0][0])

    def _ids_flow(self, prefix: str) -> Flow[list[str]]:
        pattern = re.sub(r"([\\%_])", r"\\\1", prefix) + "%"
        _, rows = yield self._sql.ids, (pattern,)
        return sorted(row[0] for row in rows)

    def _purge_flow(self) -> Flow[int]:
        count, _ = yield self._sql.purge, ()
        return count

    @staticmethod
    def _saved(session_id: str, expected_revision: int, result: tuple[bool, int]) -> int:
        won, revision = result
        if not won:
            raise conflict(session_id, expected_revision, revision)
        return revision

    # -- drivers ---------------------------------------------------------------------------------

    def _drive(self, conn: Connection[Any], flow: Flow[T], write: bool) -> T:
        from psycopg.rows import tuple_row

        reply: Optional[tuple[int, Rows]] = None
        with conn.transaction() if write else _NoTransaction():
            while True:
                try:
                    query, params = flow.send(reply)  # type: ignore[arg-type]
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                with conn.cursor(row_factory=tuple_row) as cursor:
                    cursor.execute(query, params)
                    reply = (cursor.rowcount, cursor.fetchall() if cursor.description else [])

    async def _adrive(self, conn: AsyncConnection[Any], flow: Flow[T], write: bool) -> T:
        from psycopg.rows import tuple_row

        reply: Optional[tuple[int, Rows]] = None
        async with conn.transaction() if write else _NoTransaction():
            while True:
                try:
                    query, params = flow.send(reply)  # type: ignore[arg-type]
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                async with conn.cursor(row_factory=tuple_row) as cursor:
                    await cursor.execute(query, params)
                    reply = (cursor.rowcount, await cursor.fetchall() if cursor.description else [])

    def _run(self, action: str, session_id: Optional[str], flow: Flow[T], *, write: bool = False) -> T:
        pool = self._sync_pool()
        with self._errors(action, session_id), pool.connection() as conn:
            if not self._ready:
                self._drive(conn, self._create_flow(), write=True)
                self._ready = True
            return self._drive(conn, flow, write)

    async def _arun(self, action: str, session_id: Optional[str], flow: Flow[T], *, write: bool = False) -> T:
        pool = await self._async_pool()
        with self._errors(action, session_id):
            async with pool.connection() as conn:
                if not self._ready:
                    await self._adrive(conn, self._create_flow(), write=True)
                    self._ready = True
                return await self._adrive(conn, flow, write)

    # -- blocking methods ------------------------------------------------------------------------

    def load(self, session_id: str) -> Optional[StoredSession]:
        """The live session, or ``None`` when it is absent or expired."""
        check_session_id(session_id)
        return self._run("load", session_id, self._load_flow(session_id))

    def save(self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None) -> int:
        """Store ``state`` if the live revision is ``expected_revision`` (0: no live session) and
        return the new revision; else raise ``ConflictError`` and change nothing. ``ttl``
        (seconds) sets the expiry; without it the session never expires."""
        check_save(session_id, state, expected_revision, ttl)
        flow = self._save_flow(session_id, state, expected_revision, ttl)
        return self._saved(session_id, expected_revision, self._run("save", session_id, flow, write=True))

    def delete(self, session_id: str) -> bool:
        """Remove the session; ``True`` if a live one was there."""
        check_session_id(session_id)
        return self._run("delete", session_id, self._delete_flow(session_id), write=True)

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        check_prefix(prefix)
        return self._run("listing", None, self._ids_flow(prefix))

    def purge_expired(self) -> int:
        """Delete the expired sessions and return how many went."""
        return self._run("purge", None, self._purge_flow(), write=True)

    def close(self) -> None:
        """Close the blocking pool this store opened (not a pool it was given)."""
        if self._conninfo is None:
            return
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    # -- async methods ---------------------------------------------------------------------------

    async def aload(self, session_id: str) -> Optional[StoredSession]:
        """Async twin of :meth:`load`."""
        check_session_id(session_id)
        return await self._arun("load", session_id, self._load_flow(session_id))

    async def asave(
        self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None
    ) -> int:
        """Async twin of :meth:`save`."""
        check_save(session_id, state, expected_revision, ttl)
        flow = self._save_flow(session_id, state, expected_revision, ttl)
        result = await self._arun("save", session_id, flow, write=True)
        return self._saved(session_id, expected_revision, result)

    async def adelete(self, session_id: str) -> bool:
        """Async twin of :meth:`delete`."""
        check_session_id(session_id)
        return await self._arun("delete", session_id, self._delete_flow(session_id), write=True)

    async def aids(self, prefix: str = "") -> list[str]:
        """Async twin of :meth:`ids`."""
        check_prefix(prefix)
        return await self._arun("listing", None, self._ids_flow(prefix))

    async def apurge_expired(self) -> int:
        """Async twin of :meth:`purge_expired`."""
        return await self._arun("purge", None, self._purge_flow(), write=True)

    async def aclose(self) -> None:
        """Close the pools this store opened (not a pool it was given); a blocking pool is closed
        in a worker thread."""
        if self._conninfo is None:
            return
        with self._lock:
            pool, self._apool, self._apool_loop = self._apool, None, None
        if pool is not None:
            await pool.close()
        if self._pool is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.close)

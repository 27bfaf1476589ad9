"""Sessions in PostgreSQL: :class:`PostgresStore` (extra ``postgres``: psycopg 3 and psycopg_pool).

Every operation is a flow of SQL steps (``(statement, parameters)``, answered by ``(rowcount,
rows)``), run on a blocking or an asyncio connection, in one transaction for a write.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import threading
import uuid
from collections.abc import Generator, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack, contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, Union

from .. import _validate as v
from .._extras import import_extra
from .._flow import arun, run
from .._validate import redact_url
from ..errors import ConflictError, StoreUnavailableError
from . import rules
from ._protocol import Head, LogEntry, LogWrite, StoredLog
from ._server import FlowStore, LoopBound

if TYPE_CHECKING:
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
_HEAD_LIVE = _LIVE.replace("expires_at", "h.expires_at")
_LOAD = (
    "SELECT h.incarnation, h.revision, h.summary, h.tail, h.counter, NULL::text, NULL::bigint, "
    "NULL::bigint, (h.incarnation = %s AND h.revision = %s) FROM {heads} h "
    f"WHERE h.session_id = %s AND {_HEAD_LIVE} "
    "UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, l.message, l.cost, l.seq, NULL "
    "FROM {heads} h JOIN {log} l ON l.session_id = h.session_id AND l.seq >= "
    "CASE WHEN h.incarnation = %s AND h.revision = %s THEN %s ELSE 0 END "
    f"WHERE h.session_id = %s AND {_HEAD_LIVE} ORDER BY 8 NULLS FIRST"
)
_ID = "coalesce(full_id, session_id)"  # a session's id, whatever its key
_READS = ("load", "listing")  # the actions that run without a transaction


def _import_driver() -> ModuleType:
    import_extra("psycopg.sql", package="psycopg", extra="postgres", feature="PostgresStore")
    import_extra("psycopg_pool", package="psycopg_pool", extra="postgres", feature="PostgresStore")
    return import_extra("psycopg", package="psycopg", extra="postgres", feature="PostgresStore")


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


_MAX_KEY_BYTES = 1024  # longer ids are keyed by a digest: an index row holds at most ~2,700 bytes
_DIGEST_MARK = "\x7frollmem:sha256:"  # starts every digest key; an id starting so is digested too


def _key(session_id: str) -> str:
    """The value of the ``session_id`` column for a session: the id itself, or for an id over
    1,024 UTF-8 bytes (or one starting with the digest mark) the mark plus the SHA-256 of the
    id, with the id kept whole in the head's ``full_id``. No id is its own key and another's."""
    raw = session_id.encode("utf-8")
    if len(raw) <= _MAX_KEY_BYTES and not session_id.startswith(_DIGEST_MARK):
        return session_id
    return _DIGEST_MARK + hashlib.sha256(raw).hexdigest()


def _derived(name: str, suffix: str) -> str:
    """``name + suffix``, shortened (with a hash of ``name``) to PostgreSQL's 63 characters."""
    if len(name) + len(suffix) > 63:
        name = name[:40] + "_" + hashlib.sha256(name.encode()).hexdigest()[:10]
    return name + suffix


class _Sql:
    """The statements of one store, with its table names quoted as identifiers."""

    def __init__(self, psycopg: ModuleType, parts: list[str]) -> None:
        sql = psycopg.sql
        schema, name = parts[:-1], parts[-1]
        names = {
            "heads": sql.Identifier(*schema, _derived(name, "_heads")),
            "log": sql.Identifier(*schema, _derived(name, "_log")),
            "meta": sql.Identifier(*schema, _derived(name, "_meta")),
            "index": sql.Identifier(_derived(name, "_heads_expires_at")),
        }

        def q(text: str) -> Composed:
            return sql.SQL(text).format(**names)  # type: ignore[no-any-return, unused-ignore]

        self.create = (
            # Serializes concurrent first uses: CREATE ... IF NOT EXISTS alone can still collide.
            q("SELECT pg_advisory_xact_lock(hashtext('rollmem:' || %s))"),
            q("CREATE TABLE IF NOT EXISTS {meta} (key text PRIMARY KEY, value bigint NOT NULL)"),
            q(
                "CREATE TABLE IF NOT EXISTS {heads} (session_id text PRIMARY KEY, "
                "incarnation text NOT NULL, revision bigint NOT NULL, summary text NOT NULL, "
                "tail bigint NOT NULL, counter text, expires_at timestamptz, "
                "updated_at timestamptz NOT NULL DEFAULT now(), full_id text)"
            ),
            q(
                "CREATE TABLE IF NOT EXISTS {log} (session_id text NOT NULL, seq bigint NOT NULL, "
                "message text NOT NULL, cost bigint NOT NULL, PRIMARY KEY (session_id, seq))"
            ),
            q("CREATE INDEX IF NOT EXISTS {index} ON {heads} (expires_at) WHERE expires_at IS NOT NULL"),
        )
        self.version = q("SELECT value FROM {meta} WHERE key = 'schema_version'")
        self.set_version = q(
            "INSERT INTO {meta} (key, value) VALUES ('schema_version', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        )
        # One statement (one snapshot): the live head's row, then its entries from `first` (the
        # caller's tail when its incarnation and revision still hold, else 0), one row each
        # without the head's columns (a long summary is sent once, not once per message).
        # Columns: the head (5), message, cost, seq, delta.
        self.load = q(_LOAD)
        self.lock_head = q(
            f"SELECT incarnation, revision, summary, tail, counter, {_LIVE} FROM {{heads}} "
            "WHERE session_id = %s FOR UPDATE"
        )
        self.insert_head = q(
            "INSERT INTO {heads} (session_id, full_id, incarnation, revision, summary, tail, counter, "
            f"expires_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, {_EXPIRES}, now()) "
            "ON CONFLICT (session_id) DO NOTHING"
        )
        self.update_head = q(
            "UPDATE {heads} SET incarnation = %s, revision = %s, summary = %s, tail = %s, counter = %s, "
            f"expires_at = {_EXPIRES}, updated_at = now() WHERE session_id = %s"
        )
        self.clear_entries = q("DELETE FROM {log} WHERE session_id = %s")
        self.cut_entries = q(
            "DELETE FROM {log} WHERE session_id = %s AND seq < %s AND NOT (seq = ANY(%s::bigint[]))"
        )
        self.insert_entries = q(
            "INSERT INTO {log} (session_id, seq, message, cost) "
            "SELECT %s, seq, message, cost FROM unnest(%s::bigint[], %s::text[], %s::bigint[]) "
            "AS e(seq, message, cost)"
        )
        self.delete_head = q(f"DELETE FROM {{heads}} WHERE session_id = %s RETURNING {_LIVE}")
        self.ids = q(f"SELECT {_ID} FROM {{heads}} WHERE {_ID} LIKE %s ESCAPE '\\' AND {_LIVE}")
        self.purge_entries = q(
            "DELETE FROM {log} WHERE session_id IN (SELECT session_id FROM {heads} WHERE expires_at <= now())"
        )
        self.purge = q("DELETE FROM {heads} WHERE expires_at <= now()")


class PostgresStore(FlowStore):
    """A log store (:class:`~rollmem.stores.LogStore` and :class:`~rollmem.stores.AsyncLogStore`)
    in PostgreSQL, shared by every process that reaches the server.

    ``conninfo_or_pool`` is a libpq connection string or URI, a ``psycopg_pool.ConnectionPool``
    for the blocking methods, or an ``AsyncConnectionPool`` for the ``a``-methods. From a
    connection string the store opens the pool it needs on first use (autocommit
    connections, checked before each use). :meth:`close` or :meth:`aclose` closes both pools
    it opened (a pool you pass stays yours to close) and the store: every later call raises
    ``StoreUnavailableError``. The async pool a store opens belongs to the event loop that
    first used it and closes when that loop ends (``asyncio.run``), so a forgotten ``aclose()``
    never hangs the exit; while that loop lives, another one gets ``RuntimeError``.
    ``timeout`` (seconds) bounds the wait for a connection of a pool the store opens, so a dead
    server fails fast.

    Behind PgBouncer (transaction or session pooling) it works with no extra setting: its own
    connections never prepare statements on the server (a pooler may run the next transaction
    on another server connection), each call is one transaction and it sets no session state.
    A pool you pass keeps your settings: behind transaction pooling, open it with
    ``kwargs={"prepare_threshold": None}``.

    ``table`` (a name or ``schema.name``, quoted as an identifier) names the tables, created on
    first use: ``<table>_heads`` (session id, incarnation, revision, summary, tail, counter
    identity, ``expires_at``), ``<table>_log`` (session id, sequence number, message JSON,
    token cost) and ``<table>_meta`` (the layout version; another one is refused, see
    :func:`~rollmem.stores.rules.check_layout`). A ``load`` is one query; a ``write`` is one
    transaction that locks the head row, checks it with the log rules (see
    :class:`~rollmem.stores.LogStore`), deletes the folded rows and inserts the new ones.
    ``ttl`` sets ``expires_at``; expired sessions are invisible and :meth:`purge_expired`
    deletes their rows. Driver errors (unreachable server, pool timeout, SQL errors) raise
    :class:`~rollmem.errors.StoreUnavailableError` from the driver's exception, a URL's
    password shown as ``****``.
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
        self._sql = _Sql(psycopg, parts)
        self._timeout = float(timeout)
        self._lock = threading.Lock()
        self._ready = False
        self._closed = False
        self._conninfo: Optional[str] = None
        self._pool: Optional[ConnectionPool[Any]] = None  # made or given
        self._given_apool: Optional[AsyncConnectionPool[Any]] = None
        self._apool: Optional[LoopBound[AsyncConnectionPool[Any]]] = None  # made, on its loop
        if isinstance(conninfo_or_pool, str):
            try:
                options = psycopg.conninfo.conninfo_to_dict(conninfo_or_pool)
            except psycopg.Error as exc:
                problem = redact_url(str(exc).strip())
                raise ValueError(f"conninfo_or_pool is not a valid connection string: {problem}") from None
            self._conninfo = conninfo_or_pool
            # No server-side prepared statements: safe behind PgBouncer's transaction pooling.
            self._connect_options: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}
            if "connect_timeout" not in options:
                self._connect_options["connect_timeout"] = max(2, math.ceil(self._timeout))
        elif isinstance(conninfo_or_pool, psycopg_pool.AsyncConnectionPool):
            self._given_apool = conninfo_or_pool
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
        """The table name the store's tables are named after."""
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
        from psycopg_pool import ConnectionPool

        with self._lock:
            if self._closed:
                raise rules.closed(repr(self))
            if self._pool is None:
                if self._conninfo is None:
                    raise TypeError(
                        "this PostgresStore was given an AsyncConnectionPool: use the a-methods "
                        "(aload, awrite, ...)"
                    )
                pool: ConnectionPool[Any] = ConnectionPool(
                    self._conninfo, check=ConnectionPool.check_connection, **self._pool_options()
                )
                pool.open(wait=False)
                self._pool = pool
            return self._pool

    async def _async_pool(self) -> AsyncConnectionPool[Any]:
        from psycopg_pool import AsyncConnectionPool

        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise rules.closed(repr(self))
            current = self._apool
        if self._conninfo is None:
            if self._given_apool is None:
                raise TypeError(
                    "this PostgresStore was given a blocking ConnectionPool: use load, write, ..."
                )
            return self._given_apool
        if current is None or current.closed:  # none yet, or its loop has ended
            created: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self._conninfo, check=AsyncConnectionPool.check_connection, **self._pool_options()
            )
            await created.open(wait=False)
            bound = await LoopBound.open(created, AsyncConnectionPool.close)
            with self._lock:  # publish only an open pool; a task that raced here closes its own
                won = not self._closed and (self._apool is None or self._apool.closed)
                if won:
                    self._apool = bound
            if not won:
                await bound.aclose()
                return await self._async_pool()
            current = bound
        if current.loop is not loop:
            raise RuntimeError(
                "this PostgresStore's async pool belongs to another event loop, which has not ended: "
                "use the store's async methods from one event loop at a time"
            )
        return current.resource

    @contextmanager
    def _errors(self, action: str, session_id: Optional[str] = None) -> Iterator[None]:
        psycopg = _import_driver()
        try:
            yield
        except psycopg.Error as exc:
            target = "" if session_id is None else f" of session {rules.shown(session_id)}"
            raise StoreUnavailableError(
                f"PostgreSQL {action}{target} failed: {redact_url(str(exc))}"
            ) from exc

    # -- the operations, written once ------------------------------------------------------------

    def _create_flow(self) -> Flow[None]:
        lock, *statements = self._sql.create
        yield lock, (self._table,)
        for statement in statements:
            yield statement, ()
        _, rows = yield self._sql.version, ()
        if rows:
            rules.check_layout(repr(self), rows[0][0])
        else:
            yield self._sql.set_version, (rules.LAYOUT_VERSION,)

    def _load_flow(self, session_id: str, since: Optional[Head]) -> Flow[Optional[StoredLog]]:
        incarnation, revision, tail = (
            ("", 0, 0) if since is None else (since.incarnation, since.revision, since.tail)
        )
        key = _key(session_id)
        _, rows = yield self._sql.load, (incarnation, revision, key, incarnation, revision, tail, key)
        if not rows:
            return None
        first = rows[0]
        head = Head(first[0], first[1], first[2], first[3], first[4])
        new = tuple.__new__  # LogEntry._make at C speed: a load builds one per stored message
        entries = tuple(new(LogEntry, row[5:8]) for row in rows[1:])
        return StoredLog(head, entries, since is not None and bool(first[8]))

    def _write_flow(self, session_id: str, change: LogWrite) -> Flow[Head]:
        sql = self._sql
        key = _key(session_id)
        _, rows = yield sql.lock_head, (key,)
        head = Head(*rows[0][:5]) if rows and rows[0][5] else None
        error = rules.write_conflict(session_id, head, change)
        if error is not None:
            raise error
        updated = rules.new_head(head, change, uuid.uuid4().hex if head is None else head.incarnation)
        fields = (
            updated.incarnation,
            updated.revision,
            updated.summary,
            updated.tail,
            updated.counter,
            _ttl_seconds(change.ttl),
        )
        if change.create and not rows:
            count, _ = yield sql.insert_head, (key, None if key == session_id else session_id, *fields)
            if count != 1:  # a concurrent create won
                raise ConflictError(
                    f"session {rules.shown(session_id)}: created as a new session but another writer "
                    "created it first"
                )
        else:  # an expired head row is taken over by a create
            if change.create or change.replace:
                yield sql.clear_entries, (key,)
            elif change.cut:  # the rule of rules.apply_write: remove below cut, except keep
                yield sql.cut_entries, (key, change.cut, sorted(set(change.keep)))
            yield sql.update_head, (*fields, key)
        if change.entries:
            first = updated.tail - len(change.entries)
            columns = (
                list(range(first, updated.tail)),
                [e.message for e in change.entries],
                [e.cost for e in change.entries],
            )
            yield sql.insert_entries, (key, *columns)
        return updated

    def _delete_flow(self, session_id: str) -> Flow[bool]:
        key = _key(session_id)
        _, rows = yield self._sql.delete_head, (key,)
        yield self._sql.clear_entries, (key,)
        return bool(rows and rows[0][0])

    def _ids_flow(self, prefix: str) -> Flow[list[str]]:
        pattern = re.sub(r"([\\%_])", r"\\\1", prefix) + "%"
        _, rows = yield self._sql.ids, (pattern,)
        return sorted(row[0] for row in rows)

    def _purge_flow(self) -> Flow[int]:
        yield self._sql.purge_entries, ()
        count, _ = yield self._sql.purge, ()
        return count

    # -- running a flow: one statement per step on the call's connection, a write in a transaction

    def _run(self, action: str, session_id: Optional[str], flow: Flow[T]) -> T:
        from psycopg.rows import tuple_row

        pool = self._sync_pool()
        with self._errors(action, session_id), pool.connection() as conn:

            def perform(step: tuple[Composed, Sequence[Any]]) -> tuple[int, Rows]:
                with conn.cursor(row_factory=tuple_row) as cursor:
                    cursor.execute(*step)
                    return cursor.rowcount, cursor.fetchall() if cursor.description else []

            if not self._ready:
                with conn.transaction():
                    run(self._create_flow(), perform)
                self._ready = True
            with ExitStack() if action in _READS else conn.transaction():
                return run(flow, perform)

    async def _arun(self, action: str, session_id: Optional[str], flow: Flow[T]) -> T:
        from psycopg.rows import tuple_row

        pool = await self._async_pool()
        with self._errors(action, session_id):
            async with pool.connection() as conn:

                async def perform(step: tuple[Composed, Sequence[Any]]) -> tuple[int, Rows]:
                    async with conn.cursor(row_factory=tuple_row) as cursor:
                        await cursor.execute(*step)
                        return cursor.rowcount, await cursor.fetchall() if cursor.description else []

                if not self._ready:
                    async with conn.transaction():
                        await arun(self._create_flow(), perform)
                    self._ready = True
                async with AsyncExitStack() if action in _READS else conn.transaction():
                    return await arun(flow, perform)

    def _take(self) -> tuple[Optional[Callable[[], None]], Optional[LoopBound[AsyncConnectionPool[Any]]]]:
        with self._lock:
            self._closed = True
            pool, bound = self._pool, self._apool
            self._pool = self._apool = self._given_apool = None
        return (None if self._conninfo is None or pool is None else pool.close), bound

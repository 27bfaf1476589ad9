"""Sessions in PostgreSQL: :class:`PostgresStore` (extra ``postgres``: psycopg 3 and psycopg_pool).

A log store: ``<table>_heads`` (a row per session) and ``<table>_log`` (a row per message),
created on first use with ``<table>_meta`` (the schema version). Every operation is written
once, as a generator of SQL steps; the blocking and the async methods only drive it on their
kind of connection.
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
from .._extras import import_extra
from ..errors import ConflictError, InvalidStateError, StoreUnavailableError
from ._legacy import read_state, write_whole
from ._protocol import Head, LogEntry, LogWrite, StoredLog
from .rules import (
    Closing,
    check_load,
    check_prefix,
    check_session_id,
    check_write,
    new_head,
    shown,
    write_conflict,
)

if TYPE_CHECKING:
    from psycopg import AsyncConnection, Connection
    from psycopg.sql import Composed
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

T = TypeVar("T")
Rows = list[tuple[Any, ...]]
# A store operation: yields (query, parameters), receives (rowcount, rows), returns its result.
Flow = Generator["tuple[Composed, Sequence[Any]]", "tuple[int, Rows]", T]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
_MAX_TTL = 10.0**10  # seconds (~317 years): longer ttls mean "practically never"
_LIVE = "(expires_at IS NULL OR expires_at > now())"
_EXPIRES = "now() + make_interval(secs => %s::double precision)"
_HEAD_LIVE = _LIVE.replace("expires_at", "h.expires_at")
_LOAD_UNION = (
    "SELECT h.incarnation, h.revision, h.summary, h.tail, h.counter, NULL::text, NULL::bigint, "
    "NULL::bigint, (h.incarnation = %s AND h.revision = %s), NULL::text FROM {heads} h "
    f"WHERE h.session_id = %s AND {_HEAD_LIVE} "
    "UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, l.message, l.cost, l.seq, NULL, NULL "
    "FROM {heads} h JOIN {log} l ON l.session_id = h.session_id AND l.seq >= "
    "CASE WHEN h.incarnation = %s AND h.revision = %s THEN %s ELSE 0 END "
    f"WHERE h.session_id = %s AND {_HEAD_LIVE}"
)
_LOAD = _LOAD_UNION + " ORDER BY 8 NULLS FIRST"
_ID = "coalesce(full_id, session_id)"  # a session's id, whatever its key


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


SCHEMA_VERSION = 2
"""The layout version this module records in ``<table>_meta``: 2 is the log layout
(``<table>_heads`` plus ``<table>_log``). Sessions of the whole-state table ``<table>``
(version 1) are read until their next write (or :meth:`PostgresStore.migrate`, ``rollmem
migrate``) moves them; that read-through is removed in 1.0. A newer version is refused."""


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


class _Sql(NamedTuple):
    """The statements of one store, with its table names quoted as identifiers."""

    create: tuple[Composed, ...]
    version: Composed
    set_version: Composed
    has_legacy: Composed
    has_full_id: Composed
    add_full_id: Composed
    raw_key: Composed
    load: Composed
    load_legacy: Composed
    lock_head: Composed
    lock_legacy: Composed
    insert_head: Composed
    replace_head: Composed
    update_head: Composed
    clear_entries: Composed
    cut_entries: Composed
    insert_entries: Composed
    delete_head: Composed
    delete_legacy: Composed
    ids: Composed
    ids_legacy: Composed
    purge_entries: Composed
    purge: Composed
    purge_legacy: Composed


def _statements(psycopg: ModuleType, parts: list[str]) -> _Sql:
    sql = psycopg.sql
    schema, name = parts[:-1], parts[-1]
    names = {
        "legacy": sql.Identifier(*parts),
        "heads": sql.Identifier(*schema, _derived(name, "_heads")),
        "log": sql.Identifier(*schema, _derived(name, "_log")),
        "meta": sql.Identifier(*schema, _derived(name, "_meta")),
        "index": sql.Identifier(_derived(name, "_heads_expires_at")),
    }

    def q(text: str) -> Composed:
        return sql.SQL(text).format(**names)  # type: ignore[no-any-return, unused-ignore]

    return _Sql(
        create=(
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
        ),
        version=q("SELECT value FROM {meta} WHERE key = 'schema_version'"),
        set_version=q(
            "INSERT INTO {meta} (key, value) VALUES ('schema_version', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        ),
        has_legacy=q("SELECT to_regclass(%s) IS NOT NULL"),
        # Tables made by 0.6 lack full_id: added once (a nullable column, which they ignore).
        has_full_id=q(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) "
            "AND attname = 'full_id' AND NOT attisdropped"
        ),
        add_full_id=q("ALTER TABLE {heads} ADD COLUMN IF NOT EXISTS full_id text"),
        # A long id stored under itself by an earlier release (it fit once compressed).
        raw_key=q("SELECT 1 FROM {heads} WHERE session_id = %s AND full_id IS NULL"),
        # One statement (one snapshot): the live head's row, then its entries from `first` (the
        # caller's tail when its incarnation and revision still hold, else 0), one row each
        # without the head's columns (a long summary is sent once, not once per message).
        # Columns: the head (5), message, cost, seq, delta.
        load=q(_LOAD),
        # The same, falling back to the whole-state table when no head row is there (its row:
        # revision in column 2, state in column 10).
        load_legacy=q(
            f"{_LOAD_UNION} UNION ALL SELECT NULL, revision, NULL, NULL, NULL, NULL, NULL, NULL, "
            f"NULL, state FROM {{legacy}} WHERE id = %s AND {_LIVE} "
            "AND NOT EXISTS (SELECT 1 FROM {heads} WHERE session_id = %s) ORDER BY 8 NULLS FIRST"
        ),
        lock_head=q(
            f"SELECT incarnation, revision, summary, tail, counter, {_LIVE} FROM {{heads}} "
            "WHERE session_id = %s FOR UPDATE"
        ),
        # The state, its revision and the seconds it has left (NULL: no expiry).
        lock_legacy=q(
            "SELECT state, revision, extract(epoch FROM expires_at - now())::double precision "
            f"FROM {{legacy}} WHERE id = %s AND {_LIVE} FOR UPDATE"
        ),
        insert_head=q(
            "INSERT INTO {heads} (session_id, full_id, incarnation, revision, summary, tail, counter, "
            f"expires_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, {_EXPIRES}, now()) "
            "ON CONFLICT (session_id) DO NOTHING"
        ),
        replace_head=q(
            "UPDATE {heads} SET full_id = %s, incarnation = %s, revision = %s, summary = %s, tail = %s, "
            f"counter = %s, expires_at = {_EXPIRES}, updated_at = now() WHERE session_id = %s"
        ),
        update_head=q(
            "UPDATE {heads} SET revision = %s, summary = %s, tail = %s, counter = %s, "
            f"expires_at = {_EXPIRES}, updated_at = now() WHERE session_id = %s"
        ),
        clear_entries=q("DELETE FROM {log} WHERE session_id = %s"),
        cut_entries=q(
            "DELETE FROM {log} WHERE session_id = %s AND seq < %s AND NOT (seq = ANY(%s::bigint[]))"
        ),
        insert_entries=q(
            "INSERT INTO {log} (session_id, seq, message, cost) "
            "SELECT %s, seq, message, cost FROM unnest(%s::bigint[], %s::text[], %s::bigint[]) "
            "AS e(seq, message, cost)"
        ),
        delete_head=q(f"DELETE FROM {{heads}} WHERE session_id = %s RETURNING {_LIVE}"),
        delete_legacy=q(f"DELETE FROM {{legacy}} WHERE id = %s RETURNING {_LIVE}"),
        ids=q(f"SELECT {_ID} FROM {{heads}} WHERE {_ID} LIKE %s ESCAPE '\\' AND {_LIVE}"),
        ids_legacy=q(
            f"SELECT {_ID} FROM {{heads}} WHERE {_ID} LIKE %s ESCAPE '\\' AND {_LIVE} "
            f"UNION SELECT id FROM {{legacy}} WHERE id LIKE %s ESCAPE '\\' AND {_LIVE}"
        ),
        purge_entries=q(
            "DELETE FROM {log} WHERE session_id IN (SELECT session_id FROM {heads} WHERE expires_at <= now())"
        ),
        purge=q("DELETE FROM {heads} WHERE expires_at <= now()"),
        purge_legacy=q("DELETE FROM {legacy} WHERE expires_at <= now()"),
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


class PostgresStore(Closing):
    """A log store (:class:`~rollmem.stores.LogStore` and :class:`~rollmem.stores.AsyncLogStore`)
    in PostgreSQL, shared by every process that reaches the server.

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
    call is one transaction and the store sets no session state. A pool you pass keeps your
    settings: to use one behind PgBouncer in transaction mode, open it with
    ``kwargs={"prepare_threshold": None}`` (and ``autocommit=True`` if you like, as the store
    does).

    ``table`` (a name or ``schema.name``, quoted as an identifier) names the tables, created on
    first use: ``<table>_heads`` (session id, incarnation, revision, summary, tail, counter
    identity, ``expires_at``), ``<table>_log`` (session id, sequence number, message JSON,
    token cost) and ``<table>_meta`` (the schema version, :data:`SCHEMA_VERSION`; a newer one
    is refused). A ``load`` is one query; a ``write`` is one transaction that locks the head
    row, checks it with the log rules (see :class:`~rollmem.stores.LogStore`), deletes the
    folded rows and inserts the new ones. Sessions saved by the whole-state release in the
    table ``<table>`` itself are read from it while they have no head row and move to the log
    tables at their next write, in the same transaction. ``ttl`` sets ``expires_at``; expired
    sessions are invisible and :meth:`purge_expired` deletes their rows. Driver errors
    (unreachable server, pool timeout, SQL errors) raise
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
        self._legacy = False  # the whole-state table of version 1 is there
        self._sql_table_name = ".".join(f'"{part}"' for part in parts)
        self._sql_heads_name = ".".join(f'"{part}"' for part in [*parts[:-1], _derived(parts[-1], "_heads")])
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
        if self._pool is not None:
            return self._pool
        if self._conninfo is None:
            raise TypeError(
                "this PostgresStore was given an AsyncConnectionPool: use the a-methods (aload, awrite, ...)"
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
                raise TypeError(
                    "this PostgresStore was given a blocking ConnectionPool: use load, write, ..."
                )
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
        _, rows = yield self._sql.version, ()
        if rows and rows[0][0] not in (1, SCHEMA_VERSION):
            found = rows[0][0]
            raise StoreUnavailableError(
                f"{self!r} holds rollmem schema version {found!r}; this rollmem reads versions 1 "
                f"and {SCHEMA_VERSION}" + (": upgrade rollmem" if found > SCHEMA_VERSION else "")
            )
        if not rows or rows[0][0] != SCHEMA_VERSION:
            yield self._sql.set_version, (SCHEMA_VERSION,)
        _, rows = yield self._sql.has_full_id, (self._sql_heads_name,)
        if not rows[0][0]:
            yield self._sql.add_full_id, ()
        _, rows = yield self._sql.has_legacy, (self._sql_table_name,)
        self._legacy = bool(rows[0][0])

    def _key_flow(self, session_id: str) -> Flow[str]:
        """The key of ``session_id`` (see :func:`_key`): a digest key, unless an earlier release
        stored this long id under itself (one more query, for digest-keyed ids only)."""
        key = _key(session_id)
        if key != session_id:
            _, rows = yield self._sql.raw_key, (session_id,)
            if rows:
                return session_id
        return key

    def _legacy_session(self, session_id: str, state: str) -> tuple[Head, list[LogEntry]]:
        """A session still in the whole-state table, read by :func:`._legacy.read_state`."""
        try:
            return read_state(session_id, state)
        except InvalidStateError as exc:
            raise StoreUnavailableError(f"{self!r}: the whole-state row of {exc}") from exc

    def _load_flow(self, session_id: str, since: Optional[Head]) -> Flow[Optional[StoredLog]]:
        incarnation, revision, tail = (
            ("", 0, 0) if since is None else (since.incarnation, since.revision, since.tail)
        )
        key = yield from self._key_flow(session_id)
        params: list[Any] = [incarnation, revision, key, incarnation, revision, tail, key]
        if self._legacy:
            _, rows = yield self._sql.load_legacy, (*params, session_id, key)
        else:
            _, rows = yield self._sql.load, params
        if not rows:
            return None
        first = rows[0]
        if first[0] is None:  # the whole-state row
            head, legacy = self._legacy_session(session_id, first[9])
            return StoredLog(head, tuple(legacy))
        head = Head(first[0], first[1], first[2], first[3], first[4])
        new = tuple.__new__  # LogEntry._make at C speed: a load builds one per stored message
        entries = tuple(new(LogEntry, row[5:8]) for row in rows[1:])
        return StoredLog(head, entries, since is not None and bool(first[8]))

    def _write_flow(self, session_id: str, change: LogWrite) -> Flow[Head]:
        sql = self._sql
        key = yield from self._key_flow(session_id)
        _, rows = yield sql.lock_head, (key,)
        row_there = bool(rows)
        head = Head(*rows[0][:5]) if rows and rows[0][5] else None
        legacy: Optional[list[LogEntry]] = None
        if not row_there and self._legacy:
            _, rows = yield sql.lock_legacy, (session_id,)
            if rows:
                head, legacy = self._legacy_session(session_id, rows[0][0])
        if legacy is not None or head is None or change.create or change.replace:
            # the one "write it whole" branch: a create, a rewrite, or a whole-state session
            updated, whole = write_whole(session_id, head, legacy or [], change)
            yield from self._store_whole(session_id, key, row_there, updated, whole, change.ttl)
            return updated
        error = write_conflict(session_id, head, change)
        if error is not None:
            raise error
        updated = new_head(head, change, head.incarnation)
        if change.cut:  # the rule of rules.apply_write: remove below cut, except keep
            yield sql.cut_entries, (key, change.cut, sorted(set(change.keep)))
        seconds = _ttl_seconds(change.ttl)
        yield (
            sql.update_head,
            (updated.revision, updated.summary, updated.tail, updated.counter, seconds, key),
        )
        first = updated.tail - len(change.entries)
        yield from self._insert_entries(
            key, [e._replace(seq=first + i) for i, e in enumerate(change.entries)]
        )
        return updated

    def _store_whole(
        self,
        session_id: str,
        key: str,
        row_there: bool,
        head: Head,
        entries: list[LogEntry],
        ttl: Optional[float],
    ) -> Flow[None]:
        """Replace every row of the session (in the whole-state table too) by ``head`` and
        ``entries``; ``row_there``: a head row (live or expired) is locked."""
        sql = self._sql
        full_id = None if key == session_id else session_id
        fields = (head.incarnation, head.revision, head.summary, head.tail, head.counter, _ttl_seconds(ttl))
        if row_there:
            yield sql.clear_entries, (key,)
            yield sql.replace_head, (full_id, *fields, key)
        else:
            count, _ = yield sql.insert_head, (key, full_id, *fields)
            if count != 1:  # a concurrent create won
                raise ConflictError(
                    f"session {shown(session_id)}: created as a new session but another writer "
                    "created it first"
                )
        if self._legacy:
            yield sql.delete_legacy, (session_id,)
        yield from self._insert_entries(key, entries)

    def _insert_entries(self, key: str, entries: list[LogEntry]) -> Flow[None]:
        if entries:
            columns = ([e.seq for e in entries], [e.message for e in entries], [e.cost for e in entries])
            yield self._sql.insert_entries, (key, *columns)

    def _migrate_flow(self, session_id: str, dry_run: bool) -> Flow[bool]:
        key = yield from self._key_flow(session_id)
        _, rows = yield self._sql.lock_head, (key,)
        if rows or not self._legacy:
            return False
        _, rows = yield self._sql.lock_legacy, (session_id,)
        if not rows:
            return False
        head, entries = self._legacy_session(session_id, rows[0][0])
        if not dry_run:
            seconds = rows[0][2]
            ttl = None if seconds is None else max(float(seconds), 0.001)
            yield from self._store_whole(session_id, key, False, head, entries, ttl)
        return True

    def _delete_flow(self, session_id: str) -> Flow[bool]:
        key = yield from self._key_flow(session_id)
        _, rows = yield self._sql.delete_head, (key,)
        live = bool(rows and rows[0][0])
        yield self._sql.clear_entries, (key,)
        if self._legacy:
            _, rows = yield self._sql.delete_legacy, (session_id,)
            live = live or bool(rows and rows[0][0])
        return live

    def _ids_flow(self, prefix: str) -> Flow[list[str]]:
        pattern = re.sub(r"([\\%_])", r"\\\1", prefix) + "%"
        if self._legacy:
            _, rows = yield self._sql.ids_legacy, (pattern, pattern)
        else:
            _, rows = yield self._sql.ids, (pattern,)
        return sorted({row[0] for row in rows})

    def _purge_flow(self) -> Flow[int]:
        yield self._sql.purge_entries, ()
        count, _ = yield self._sql.purge, ()
        if self._legacy:
            legacy, _ = yield self._sql.purge_legacy, ()
            count += legacy
        return count

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

    def load(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """The live session, or ``None`` when it is absent or expired; with ``since``, only the
        entries appended after it when its incarnation and revision still hold. One query."""
        check_load(session_id, since)
        return self._run("load", session_id, self._load_flow(session_id, since))

    def write(self, session_id: str, change: LogWrite) -> Head:
        """Apply ``change`` in one transaction and return the new head; else raise
        ``ConflictError`` and write nothing. A whole-state session is moved to the log tables."""
        check_write(session_id, change)
        return self._run("write", session_id, self._write_flow(session_id, change), write=True)

    def migrate(self, session_id: str, *, dry_run: bool = False) -> bool:
        """Move the session from the whole-state table to the log tables, as it is (head,
        entries, expiry), in one transaction; ``True`` if it was there (with ``dry_run``: it would
        move, nothing is written), ``False`` if it is already in the log tables or absent. A
        stored state that cannot be read raises ``StoreUnavailableError`` and stays where it is."""
        check_session_id(session_id)
        return self._run("migration", session_id, self._migrate_flow(session_id, dry_run), write=True)

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

    async def aload(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """Async twin of :meth:`load`."""
        check_load(session_id, since)
        return await self._arun("load", session_id, self._load_flow(session_id, since))

    async def awrite(self, session_id: str, change: LogWrite) -> Head:
        """Async twin of :meth:`write`."""
        check_write(session_id, change)
        return await self._arun("write", session_id, self._write_flow(session_id, change), write=True)

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

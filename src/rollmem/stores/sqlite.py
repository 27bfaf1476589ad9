"""A store in one SQLite database, from the standard library: many threads and processes of one machine."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from itertools import repeat
from typing import Optional, Union

from .. import _validate as v
from .._threads import in_thread
from ..errors import InvalidStateError, StoreUnavailableError
from ._legacy import described, read_state, write_whole
from ._protocol import Head, LogEntry, LogWrite, StoredLog
from .rules import (
    Closing,
    check_load,
    check_prefix,
    check_session_id,
    check_write,
    is_expired,
    shown,
    write_conflict,
)
from .rules import new_head as _new_head

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

SCHEMA_VERSION = 2
"""The layout version this module writes to the ``rollmem_meta`` table: 2 is the log layout (a
head row per session plus one row per message). A version-1 database (one JSON state per
session) is upgraded in place on first use; its sessions are read from the old table until
their next write (or :meth:`SQLiteStore.migrate`, ``rollmem migrate``) moves them; that
read-through is removed in 1.0. A newer version is refused."""

_MAX_TIMEOUT = 2_000_000.0  # SQLite's busy timeout is a 32-bit count of milliseconds
_MAX_IDLE = 16  # idle connections kept per store and process; more threads open and close their own


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


_HEADS = _quote("rollmem_heads")
_LOG = _quote("rollmem_log")
_LEGACY = _quote("rollmem_sessions")
_INDEX = _quote("rollmem_heads_expires_at")
_META = _quote("rollmem_meta")

_CREATE_META = (
    f'CREATE TABLE IF NOT EXISTS {_META} ("key" TEXT PRIMARY KEY NOT NULL, "value" INTEGER NOT NULL)'
)
_READ_VERSION = f'SELECT "value" FROM {_META} WHERE "key" = ?'
_WRITE_VERSION = f'INSERT OR REPLACE INTO {_META} ("key", "value") VALUES (?, ?)'
_CREATE_HEADS = f"""CREATE TABLE IF NOT EXISTS {_HEADS} (
    "session_id" TEXT PRIMARY KEY NOT NULL CHECK (typeof("session_id") = 'text'),
    "incarnation" TEXT NOT NULL,
    "revision" INTEGER NOT NULL CHECK (typeof("revision") = 'integer' AND "revision" > 0),
    "summary" TEXT NOT NULL,
    "tail" INTEGER NOT NULL,
    "counter" TEXT,
    "expires_at" REAL,
    "updated_at" REAL NOT NULL
)"""
_CREATE_LOG = f"""CREATE TABLE IF NOT EXISTS {_LOG} (
    "session_id" TEXT NOT NULL,
    "seq" INTEGER NOT NULL,
    "message" TEXT NOT NULL,
    "cost" INTEGER NOT NULL,
    PRIMARY KEY ("session_id", "seq")
) WITHOUT ROWID"""
_CREATE_INDEX = (
    f'CREATE INDEX IF NOT EXISTS {_INDEX} ON {_HEADS} ("expires_at") WHERE "expires_at" IS NOT NULL'
)
_HAS_LEGACY = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'rollmem_sessions'"
_HEAD = (
    f'SELECT "incarnation", "revision", "summary", "tail", "counter", "expires_at" FROM {_HEADS} '
    'WHERE "session_id" = ?'
)
_ENTRIES = f'SELECT "message", "cost", "seq" FROM {_LOG} WHERE "session_id" = ? AND "seq" >= ? ORDER BY "seq"'
_INSERT_HEAD = (
    f'INSERT OR REPLACE INTO {_HEADS} ("session_id", "incarnation", "revision", "summary", "tail", '
    '"counter", "expires_at", "updated_at") VALUES (?, ?, ?, ?, ?, ?, ?, ?)'
)
_UPDATE_HEAD = (
    f'UPDATE {_HEADS} SET "revision" = ?, "summary" = ?, "tail" = ?, "counter" = ?, "expires_at" = ?, '
    '"updated_at" = ? WHERE "session_id" = ?'
)
_INSERT_ENTRY = f'INSERT INTO {_LOG} ("session_id", "seq", "message", "cost") VALUES (?, ?, ?, ?)'
_DELETE_RANGE = f'DELETE FROM {_LOG} WHERE "session_id" = ? AND "seq" >= ? AND "seq" < ?'
_DELETE_ENTRIES = f'DELETE FROM {_LOG} WHERE "session_id" = ?'
_DELETE_HEAD = f'DELETE FROM {_HEADS} WHERE "session_id" = ?'
_IDS = (
    f'SELECT "session_id" FROM {_HEADS} WHERE "session_id" >= ? AND substr("session_id", 1, ?) = ? '
    'AND ("expires_at" IS NULL OR "expires_at" > ?)'
)
_PURGE_ENTRIES = (
    f'DELETE FROM {_LOG} WHERE "session_id" IN '
    f'(SELECT "session_id" FROM {_HEADS} WHERE "expires_at" IS NOT NULL AND "expires_at" <= ?)'
)
_PURGE_HEADS = f'DELETE FROM {_HEADS} WHERE "expires_at" IS NOT NULL AND "expires_at" <= ?'
_LEGACY_LOAD = f'SELECT "state", "revision", "expires_at" FROM {_LEGACY} WHERE "session_id" = ?'
_LEGACY_DELETE = f'DELETE FROM {_LEGACY} WHERE "session_id" = ?'
_LEGACY_IDS = (
    f'SELECT "session_id" FROM {_LEGACY} WHERE "session_id" >= ? AND substr("session_id", 1, ?) = ? '
    'AND ("expires_at" IS NULL OR "expires_at" > ?)'
)
_LEGACY_PURGE = f'DELETE FROM {_LEGACY} WHERE "expires_at" IS NOT NULL AND "expires_at" <= ?'


class _Connections:
    """The connections a store opened in this process and keeps: closed by ``close()`` or when
    the store is garbage-collected (never in a forked child: those are the parent's)."""

    __slots__ = ("idle", "pid", "shared")

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.idle: list[sqlite3.Connection] = []
        self.shared: Optional[sqlite3.Connection] = None  # an in-memory database's one connection

    def close_all(self) -> None:
        if os.getpid() != self.pid:
            return
        idle, self.idle = self.idle, []
        shared, self.shared = self.shared, None
        for conn in idle:
            conn.close()
        if shared is not None:
            shared.close()


class SQLiteStore(Closing):
    """Sessions in an SQLite database, standard library only: a log store.

    ``path`` is a database file (created when missing) or ``":memory:"`` for a private
    in-memory database shared by this store's threads and gone when it closes. A file
    database is put in WAL mode, so readers never wait for the writer; writers wait up to
    ``timeout`` seconds for each other, then raise :class:`~rollmem.errors.StoreUnavailableError`.
    Any number of threads, stores and processes of one machine may share a file (not over a
    network file system).

    Layout: ``rollmem_heads`` (one row per session: incarnation, revision, summary, tail,
    counter identity, expiry) and ``rollmem_log`` (one row per message: sequence number,
    message JSON, token cost). An append inserts its rows and touches the head's tail; a fold
    deletes the folded rows and updates the head; each write is one transaction that checks
    the head first (see :class:`~rollmem.stores.LogStore`). The tables and the schema version
    are created on first use; a version-1 database is upgraded in place (its sessions move to
    the log tables at their next write); a newer version is refused. Expiry uses the wall
    clock and expired rows stay on disk until :meth:`purge_expired`. The async methods run the
    blocking ones in a worker thread (a cancelled call may still complete there).
    """

    def __init__(self, path: Union[str, os.PathLike[str]] = ":memory:", *, timeout: float = 30.0) -> None:
        path = os.fspath(path)
        if not isinstance(path, str):
            raise TypeError(f"path must be a str or an os.PathLike of str, got {type(path).__name__}")
        if not v.is_number(timeout):
            raise v.type_error("timeout", "a number of seconds", timeout)
        if not 0 <= timeout <= _MAX_TIMEOUT:
            raise ValueError(f"timeout must be between 0 and {_MAX_TIMEOUT:.0f} seconds, got {timeout!r}")
        self.path = path
        """The database path given to the constructor."""
        self.timeout = float(timeout)
        """Seconds a write waits for another writer before failing."""
        self._in_memory = path in ("", ":memory:")
        self._lock = threading.Lock()  # guards the pool; for an in-memory database, its one connection
        self._writer = threading.Lock()  # held by the one thread of this store that is writing
        self._conns = _Connections()  # closed by close(), or when the store is collected
        weakref.finalize(self, self._conns.close_all)
        self._abandoned: list[sqlite3.Connection] = []  # a parent process's connections, never touched
        self._schema_ready = False
        self._legacy = False  # a version-1 table of whole states is still there
        self._closed = False

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # connections

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        try:
            if not self._in_memory:
                mode = self._turn_on_wal(conn)
                if mode.lower() != "wal":
                    raise StoreUnavailableError(
                        f"{self!r}: could not turn on WAL mode (journal_mode is {mode!r}); "
                        "is the file on a network file system?"
                    )
            conn.execute("PRAGMA synchronous=FULL")
            if not self._schema_ready:
                self._create_schema(conn)
                self._schema_ready = True
        except BaseException:
            conn.close()
            raise
        return conn

    def _turn_on_wal(self, conn: sqlite3.Connection) -> str:
        """Switch a file database to WAL and return the journal mode it reports. The first switch
        needs the file to itself and gets no busy handler, so it retries until ``timeout``."""
        deadline = time.monotonic() + self.timeout
        delay = 0.001
        while True:
            try:
                return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        with self._transaction_on(conn):
            conn.execute(_CREATE_META)
            row = conn.execute(_READ_VERSION, ("schema_version",)).fetchone()
            if row is not None and row[0] not in (1, SCHEMA_VERSION):
                raise StoreUnavailableError(
                    f"{self!r} holds rollmem schema version {row[0]!r}; this rollmem reads versions 1 "
                    f"and {SCHEMA_VERSION}" + (": upgrade rollmem" if _newer(row[0]) else "")
                )
            if row is None or row[0] == 1:  # new, or the whole-state layout: add the log tables
                conn.execute(_CREATE_HEADS)
                conn.execute(_CREATE_LOG)
                conn.execute(_CREATE_INDEX)
                conn.execute(_WRITE_VERSION, ("schema_version", SCHEMA_VERSION))
            self._legacy = conn.execute(_HAS_LEGACY).fetchone() is not None

    def _acquire(self) -> sqlite3.Connection:
        with self._lock:
            self._check_open()
            conns = self._conns
            if os.getpid() != conns.pid:  # forked: the parent's connections are not ours to use or close
                conns.pid = os.getpid()
                self._abandoned.extend(conns.idle)
                conns.idle = []
            if conns.idle:
                return conns.idle.pop()
        return self._open()

    def _release(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            conns = self._conns
            if not self._closed and os.getpid() == conns.pid and len(conns.idle) < _MAX_IDLE:
                conns.idle.append(conn)
                return
        conn.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError(f"{self!r} is closed")

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """A connection for one call; driver errors leave as ``StoreUnavailableError``."""
        try:
            if self._in_memory:
                with self._lock:
                    self._check_open()
                    conns = self._conns
                    if conns.shared is None:
                        conns.shared = self._open()
                    elif conns.shared.in_transaction:  # a rollback failed last time: retry it
                        conns.shared.execute("ROLLBACK")
                    yield conns.shared
                return
            conn = self._acquire()
            try:
                yield conn
            except BaseException as exc:
                if isinstance(exc, sqlite3.Error) or conn.in_transaction:
                    conn.close()
                else:
                    self._release(conn)
                raise
            self._release(conn)
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"{self!r}: {exc}") from exc

    @staticmethod
    @contextmanager
    def _transaction_on(conn: sqlite3.Connection) -> Iterator[None]:
        """One write transaction holding the write lock from the start; any exception rolls it back."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with suppress(sqlite3.Error):  # else the connection stays in_transaction: not reused
                    conn.execute("ROLLBACK")
            raise

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        # This store's threads queue on a lock; other processes wait in SQLite's busy handler.
        if not self._writer.acquire(timeout=self.timeout):
            raise StoreUnavailableError(f"{self!r}: timed out after {self.timeout} s behind another writer")
        try:
            with self._connection() as conn, self._transaction_on(conn):
                yield conn
        finally:
            self._writer.release()

    # reading

    def _corrupt(self, session_id: str, what: str) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"{self!r}: the rows of session {shown(session_id)} are corrupt ({what})"
        )

    def _read_head(self, conn: sqlite3.Connection, session_id: str, now: float) -> Optional[Head]:
        row = conn.execute(_HEAD, (session_id,)).fetchone()
        if row is None or is_expired(row[5], now):
            return None
        incarnation, revision, summary, tail, counter = row[:5]
        if not (
            isinstance(incarnation, str)
            and isinstance(summary, str)
            and type(revision) is int
            and type(tail) is int
            and (counter is None or isinstance(counter, str))
        ):
            raise self._corrupt(session_id, f"head revision {revision!r}, tail {tail!r}")
        return Head(incarnation, revision, summary, tail, counter)

    def _read_entries(self, conn: sqlite3.Connection, session_id: str, first: int) -> tuple[LogEntry, ...]:
        rows = conn.execute(_ENTRIES, (session_id, first)).fetchall()
        if rows:  # the types checked column by column, at C speed: a load reads every entry
            messages, costs, seqs = zip(*rows)
            if {*map(type, messages)} != {str} or {*map(type, costs)} | {*map(type, seqs)} != {int}:
                for message, cost, seq in rows:  # name the bad one
                    if type(message) is not str or type(cost) is not int or type(seq) is not int:
                        raise self._corrupt(session_id, f"entry {seq!r}")
        return tuple(map(tuple.__new__, repeat(LogEntry), rows))  # LogEntry._make at C speed

    def _read_legacy(
        self, conn: sqlite3.Connection, session_id: str, now: float
    ) -> Optional[tuple[Head, list[LogEntry], Optional[float]]]:
        """A session still in the version-1 table (read by :func:`._legacy.read_state`) and its
        expiry time."""
        if not self._legacy:
            return None
        row = conn.execute(_LEGACY_LOAD, (session_id,)).fetchone()
        if row is None or is_expired(row[2], now):
            return None
        try:
            if not isinstance(row[0], str):
                raise InvalidStateError("", f"expected the state as text, got {v.type_name(row[0])}")
            head, entries = read_state(session_id, row[0])
        except InvalidStateError as exc:
            raise self._corrupt(session_id, f"version-1 state: {described(exc)}") from exc
        return head, entries, row[2]

    # the LogStore protocol

    def load(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """The live session, or ``None`` when it is absent or expired; with ``since``, only the
        entries appended after it when its incarnation and revision still hold. One read
        transaction."""
        check_load(session_id, since)
        with self._connection() as conn:
            conn.execute("BEGIN")
            try:
                now = time.time()
                head = self._read_head(conn, session_id, now)
                if head is None:
                    legacy = self._read_legacy(conn, session_id, now)
                    return None if legacy is None else StoredLog(legacy[0], tuple(legacy[1]))
                delta = since is not None and (since.incarnation, since.revision) == (
                    head.incarnation,
                    head.revision,
                )
                first = since.tail if since is not None and delta else 0
                return StoredLog(head, self._read_entries(conn, session_id, first), delta)
            finally:
                conn.execute("COMMIT")

    def write(self, session_id: str, change: LogWrite) -> Head:
        """Apply ``change`` in one transaction and return the new head; else raise
        ``ConflictError`` and write nothing. A version-1 session is moved to the log tables."""
        check_write(session_id, change)
        with self._write() as conn:
            now = time.time()
            head = self._read_head(conn, session_id, now)
            legacy = None if head is not None else self._read_legacy(conn, session_id, now)
            expires_at = None if change.ttl is None else now + change.ttl
            if legacy is not None or head is None or change.create or change.replace:
                # the one "write it whole" branch: a create, a rewrite, or an old-layout session
                base, entries = (head, []) if legacy is None else legacy[:2]
                updated, whole = write_whole(session_id, base, entries, change)
                self._store_whole(conn, session_id, updated, whole, expires_at, now)
                return updated
            error = write_conflict(session_id, head, change)
            if error is not None:
                raise error
            updated = _new_head(head, change, head.incarnation)
            if change.cut:  # the rule of rules.apply_write: remove below cut, except keep
                bounds = [-1, *sorted(seq for seq in set(change.keep) if seq < change.cut), change.cut]
                ranges = [
                    (session_id, low + 1, high) for low, high in zip(bounds, bounds[1:]) if high > low + 1
                ]
                conn.executemany(_DELETE_RANGE, ranges)
            conn.execute(
                _UPDATE_HEAD,
                (
                    updated.revision,
                    updated.summary,
                    updated.tail,
                    updated.counter,
                    expires_at,
                    now,
                    session_id,
                ),
            )
            first = updated.tail - len(change.entries)
            conn.executemany(
                _INSERT_ENTRY,
                [(session_id, first + i, e.message, e.cost) for i, e in enumerate(change.entries)],
            )
        return updated

    def _store_whole(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        head: Head,
        entries: list[LogEntry],
        expires_at: Optional[float],
        now: float,
    ) -> None:
        """Replace every row of the session (in the version-1 table too) by ``head`` and ``entries``."""
        conn.execute(_DELETE_ENTRIES, (session_id,))
        if self._legacy:
            conn.execute(_LEGACY_DELETE, (session_id,))
        fields = (head.incarnation, head.revision, head.summary, head.tail, head.counter)
        conn.execute(_INSERT_HEAD, (session_id, *fields, expires_at, now))
        conn.executemany(_INSERT_ENTRY, [(session_id, e.seq, e.message, e.cost) for e in entries])

    def migrate(self, session_id: str, *, dry_run: bool = False) -> bool:
        """Move the session from the version-1 table to the log tables, as it is (head, entries,
        expiry), in one transaction; ``True`` if it was there (with ``dry_run``: it would move,
        nothing is written), ``False`` if it is already in the log tables or absent. A stored
        state that cannot be read raises ``StoreUnavailableError`` and stays where it is."""
        check_session_id(session_id)
        with self._write() as conn:
            now = time.time()
            legacy = (
                None if self._read_head(conn, session_id, now) else self._read_legacy(conn, session_id, now)
            )
            if legacy is not None and not dry_run:
                self._store_whole(conn, session_id, legacy[0], legacy[1], legacy[2], now)
        return legacy is not None

    def delete(self, session_id: str) -> bool:
        """Remove the session (its incarnation ends); ``True`` if a live one was there."""
        check_session_id(session_id)
        with self._write() as conn:
            now = time.time()
            live = self._read_head(conn, session_id, now) is not None
            if not live and self._legacy:  # the bare row: a corrupt state may still be deleted
                row = conn.execute(_LEGACY_LOAD, (session_id,)).fetchone()
                live = row is not None and not is_expired(row[2], now)
            conn.execute(_DELETE_ENTRIES, (session_id,))
            conn.execute(_DELETE_HEAD, (session_id,))
            if self._legacy:
                conn.execute(_LEGACY_DELETE, (session_id,))
        return live

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        check_prefix(prefix)
        arguments = (prefix, len(prefix), prefix, time.time())
        with self._connection() as conn:
            found = {row[0] for row in conn.execute(_IDS, arguments)}
            if self._legacy:
                found.update(row[0] for row in conn.execute(_LEGACY_IDS, arguments))
        return sorted(found)

    def purge_expired(self) -> int:
        """Delete the rows of expired sessions and return how many sessions went."""
        with self._write() as conn:
            now = time.time()
            conn.execute(_PURGE_ENTRIES, (now,))
            count = conn.execute(_PURGE_HEADS, (now,)).rowcount
            if self._legacy:
                count += conn.execute(_LEGACY_PURGE, (now,)).rowcount
            return int(count)

    def close(self) -> None:
        """Close the store's connections (an in-memory database is gone); later calls raise
        ``StoreUnavailableError``. Closing twice is harmless."""
        with self._lock:
            self._closed = True
            self._conns.close_all()

    # the AsyncLogStore protocol: the same calls, in a worker thread

    async def aload(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """Async twin of :meth:`load`."""
        return await in_thread(self.load, session_id, since)

    async def awrite(self, session_id: str, change: LogWrite) -> Head:
        """Async twin of :meth:`write`."""
        return await in_thread(self.write, session_id, change)

    async def adelete(self, session_id: str) -> bool:
        """Async twin of :meth:`delete`."""
        return await in_thread(self.delete, session_id)

    async def aids(self, prefix: str = "") -> list[str]:
        """Async twin of :meth:`ids`."""
        return await in_thread(self.ids, prefix)

    async def apurge_expired(self) -> int:
        """Async twin of :meth:`purge_expired`."""
        return await in_thread(self.purge_expired)

    async def aclose(self) -> None:
        """Async twin of :meth:`close`."""
        await in_thread(self.close)


def _newer(version: object) -> bool:
    return v.is_int(version) and isinstance(version, int) and version > SCHEMA_VERSION

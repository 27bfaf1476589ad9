"""A store in one SQLite database, from the standard library: many threads and processes of one machine."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from itertools import repeat
from typing import Optional, Union

from .. import _validate as v
from ..errors import StoreUnavailableError
from . import rules
from ._protocol import Head, LogEntry, LogWrite, StoredLog

__all__ = ["SQLiteStore"]

_MAX_TIMEOUT = 2_000_000.0  # SQLite's busy timeout is a 32-bit count of milliseconds
_MAX_IDLE = 16  # idle connections kept per store and process; more threads open and close their own


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


_HEADS = _quote("rollmem_heads")
_LOG = _quote("rollmem_log")
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


class SQLiteStore(rules.AsyncTwins):
    """Sessions in an SQLite database, standard library only: a log store.

    ``path`` is a database file (created when missing, owner-only: ``0600``, as SQLite then makes
    its ``-wal`` and ``-shm`` files) or ``":memory:"`` for a private in-memory database shared by
    this store's threads and gone when it closes. A file database is put in WAL mode, so readers
    never wait for the writer; writers wait up to ``timeout`` seconds for each other, then raise
    :class:`~rollmem.errors.StoreUnavailableError`. Any number of threads, stores and processes
    of one machine may share a file (not over a network file system).

    Layout: ``rollmem_heads`` (one row per session: incarnation, revision, summary, tail,
    counter identity, expiry) and ``rollmem_log`` (one row per message: sequence number,
    message JSON, token cost), created on first use with the layout version in
    ``rollmem_meta`` (another one is refused: :func:`~rollmem.stores.rules.check_layout`). Each
    write is one transaction that checks the head first (see :class:`~rollmem.stores.LogStore`).
    Expiry uses the wall clock; expired rows stay on disk until :meth:`purge_expired`. The async
    methods run the blocking ones in a worker thread (a cancelled call may still complete there).
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
        self._closed = False

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # connections

    def _open(self) -> sqlite3.Connection:
        if not self._in_memory:  # a new file is the owner's only: SQLite gives -wal and -shm its mode
            with suppress(OSError):  # it exists (kept as it is), or SQLite reports why it cannot be opened
                os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
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
            if row is not None:
                rules.check_layout(repr(self), row[0])
                return
            conn.execute(_CREATE_HEADS)
            conn.execute(_CREATE_LOG)
            conn.execute(_CREATE_INDEX)
            conn.execute(_WRITE_VERSION, ("schema_version", rules.LAYOUT_VERSION))

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
            raise rules.closed(repr(self))

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
            f"{self!r}: the rows of session {rules.shown(session_id)} are corrupt ({what})"
        )

    def _read_head(self, conn: sqlite3.Connection, session_id: str, now: float) -> Optional[Head]:
        row = conn.execute(_HEAD, (session_id,)).fetchone()
        if row is None or rules.is_expired(row[5], now):
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

    # the LogStore protocol

    def load(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """The live session, or ``None`` when it is absent or expired; with ``since``, only the
        entries appended after it when its incarnation and revision still hold. One read
        transaction."""
        rules.check_load(session_id, since)
        with self._connection() as conn:
            conn.execute("BEGIN")
            try:
                now = time.time()
                head = self._read_head(conn, session_id, now)
                if head is None:
                    return None
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
        ``ConflictError`` and write nothing."""
        rules.check_write(session_id, change)
        with self._write() as conn:
            now = time.time()
            head = self._read_head(conn, session_id, now)
            error = rules.write_conflict(session_id, head, change)
            if error is not None:
                raise error
            updated = rules.new_head(head, change, uuid.uuid4().hex if head is None else head.incarnation)
            fields = (updated.revision, updated.summary, updated.tail, updated.counter)
            expires_at = None if change.ttl is None else now + change.ttl
            if change.create or change.replace:
                conn.execute(_DELETE_ENTRIES, (session_id,))
            elif change.cut:  # the rule of rules.apply_write: remove below cut, except keep
                bounds = [-1, *sorted(seq for seq in set(change.keep) if seq < change.cut), change.cut]
                ranges = [
                    (session_id, low + 1, high) for low, high in zip(bounds, bounds[1:]) if high > low + 1
                ]
                conn.executemany(_DELETE_RANGE, ranges)
            if change.create:
                conn.execute(_INSERT_HEAD, (session_id, updated.incarnation, *fields, expires_at, now))
            else:
                conn.execute(_UPDATE_HEAD, (*fields, expires_at, now, session_id))
            first = updated.tail - len(change.entries)
            conn.executemany(
                _INSERT_ENTRY,
                [(session_id, first + i, e.message, e.cost) for i, e in enumerate(change.entries)],
            )
        return updated

    def delete(self, session_id: str) -> bool:
        """Remove the session (its incarnation ends); ``True`` if a live one was there."""
        rules.check_session_id(session_id)
        with self._write() as conn:
            now = time.time()
            live = self._read_head(conn, session_id, now) is not None
            conn.execute(_DELETE_ENTRIES, (session_id,))
            conn.execute(_DELETE_HEAD, (session_id,))
        return live

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        rules.check_prefix(prefix)
        arguments = (prefix, len(prefix), prefix, time.time())
        with self._connection() as conn:
            return sorted(row[0] for row in conn.execute(_IDS, arguments))

    def purge_expired(self) -> int:
        """Delete the rows of expired sessions and return how many sessions went."""
        with self._write() as conn:
            now = time.time()
            conn.execute(_PURGE_ENTRIES, (now,))
            return int(conn.execute(_PURGE_HEADS, (now,)).rowcount)

    def close(self) -> None:
        """Close the store's connections (an in-memory database is gone); later calls raise
        ``StoreUnavailableError``. Closing twice is harmless."""
        with self._lock:
            self._closed = True
            self._conns.close_all()

"""A store in one SQLite database, from the standard library: many threads and processes of one machine."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Optional, Union

from .. import _validate as v
from ..errors import StoreUnavailableError
from ._common import check_prefix, check_save, check_session_id, conflict, is_expired
from ._protocol import StoredSession

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

SCHEMA_VERSION = 1
"""The layout version this module writes to the ``rollmem_meta`` table, and the only one it reads."""

_MAX_TIMEOUT = 2_000_000.0  # SQLite's busy timeout is a 32-bit count of milliseconds
_MAX_IDLE = 16  # idle connections kept per store and process; more threads open and close their own


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


_TABLE = _quote("rollmem_sessions")
_INDEX = _quote("rollmem_sessions_expires_at")
_META = _quote("rollmem_meta")

_CREATE_META = (
    f'CREATE TABLE IF NOT EXISTS {_META} ("key" TEXT PRIMARY KEY NOT NULL, "value" INTEGER NOT NULL)'
)
_READ_VERSION = f'SELECT "value" FROM {_META} WHERE "key" = ?'
_WRITE_VERSION = f'INSERT INTO {_META} ("key", "value") VALUES (?, ?)'
_CREATE_TABLE = f"""CREATE TABLE IF NOT EXISTS {_TABLE} (
    "session_id" TEXT PRIMARY KEY NOT NULL CHECK (typeof("session_id") = 'text'),
    "state" TEXT NOT NULL CHECK (typeof("state") = 'text'),
    "revision" INTEGER NOT NULL CHECK (typeof("revision") = 'integer' AND "revision" > 0),
    "expires_at" REAL,
    "updated_at" REAL NOT NULL
)"""
_CREATE_INDEX = (
    f'CREATE INDEX IF NOT EXISTS {_INDEX} ON {_TABLE} ("expires_at") WHERE "expires_at" IS NOT NULL'
)
_LOAD = f'SELECT "state", "revision", "expires_at" FROM {_TABLE} WHERE "session_id" = ?'
_INSERT = (
    f'INSERT INTO {_TABLE} ("session_id", "state", "revision", "expires_at", "updated_at") '
    "VALUES (?, ?, ?, ?, ?)"
)
_UPDATE = (
    f'UPDATE {_TABLE} SET "state" = ?, "revision" = ?, "expires_at" = ?, "updated_at" = ? '
    'WHERE "session_id" = ?'
)
_DELETE = f'DELETE FROM {_TABLE} WHERE "session_id" = ?'
_IDS = (
    f'SELECT "session_id" FROM {_TABLE} WHERE "session_id" >= ? AND substr("session_id", 1, ?) = ? '
    'AND ("expires_at" IS NULL OR "expires_at" > ?) ORDER BY "session_id"'
)
_PURGE = f'DELETE FROM {_TABLE} WHERE "expires_at" IS NOT NULL AND "expires_at" <= ?'


class SQLiteStore:
    """Sessions in one table of an SQLite database, standard library only.

    ``path`` is a database file (created when missing) or ``":memory:"`` for a private
    in-memory database shared by this store's threads and gone when it closes. A file
    database is put in WAL mode, so readers never wait for the writer; writers wait up to
    ``timeout`` seconds for each other, then raise :class:`~rollmem.errors.StoreUnavailableError`.
    Any number of threads, stores and processes of one machine may share a file (not over a
    network file system). The table and the schema version are created on first use; a
    database written by a newer rollmem schema is refused. Every write is one transaction;
    expiry uses the wall clock and expired rows stay on disk until :meth:`purge_expired`.
    The async methods run the blocking ones in a worker thread (a cancelled call may still
    complete there).
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
        self._idle: list[sqlite3.Connection] = []
        self._shared: Optional[sqlite3.Connection] = None
        self._abandoned: list[sqlite3.Connection] = []  # a parent process's connections, never touched
        self._pid = os.getpid()
        self._schema_ready = False
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
            if row is None:
                conn.execute(_CREATE_TABLE)
                conn.execute(_CREATE_INDEX)
                conn.execute(_WRITE_VERSION, ("schema_version", SCHEMA_VERSION))
            elif row[0] != SCHEMA_VERSION:
                raise StoreUnavailableError(
                    f"{self!r} holds rollmem schema version {row[0]!r}; this rollmem reads version "
                    f"{SCHEMA_VERSION} only" + (": upgrade rollmem" if _newer(row[0]) else "")
                )

    def _acquire(self) -> sqlite3.Connection:
        with self._lock:
            self._check_open()
            if os.getpid() != self._pid:  # forked: the parent's connections are not ours to use or close
                self._pid = os.getpid()
                self._abandoned.extend(self._idle)
                self._idle = []
            if self._idle:
                return self._idle.pop()
        return self._open()

    def _release(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            if not self._closed and os.getpid() == self._pid and len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
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
                    if self._shared is None:
                        self._shared = self._open()
                    elif self._shared.in_transaction:  # a rollback failed last time: retry it
                        self._shared.execute("ROLLBACK")
                    yield self._shared
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

    # the Store protocol

    def load(self, session_id: str) -> Optional[StoredSession]:
        """The live session, or ``None`` when it is absent or expired."""
        check_session_id(session_id)
        with self._connection() as conn:
            row = conn.execute(_LOAD, (session_id,)).fetchone()
        if row is None or is_expired(row[2], time.time()):
            return None
        state, revision = row[0], row[1]
        if not isinstance(state, str) or not v.is_int(revision):
            raise StoreUnavailableError(
                f"{self!r}: the row of session {session_id!r} is corrupt "
                f"(state {type(state).__name__}, revision {revision!r})"
            )
        return StoredSession(state, revision)

    def save(self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None) -> int:
        """Store ``state`` if the live revision is ``expected_revision`` (0: no live session) and
        return the new revision; else raise ``ConflictError`` and write nothing."""
        check_save(session_id, state, expected_revision, ttl)
        with self._write() as conn:
            now = time.time()
            row = conn.execute(_LOAD, (session_id,)).fetchone()
            live_revision = 0 if row is None or is_expired(row[2], now) else row[1]
            if live_revision != expected_revision:
                raise conflict(session_id, expected_revision, live_revision)
            revision = expected_revision + 1
            expires_at = None if ttl is None else now + ttl
            if row is None:
                conn.execute(_INSERT, (session_id, state, revision, expires_at, now))
            else:
                conn.execute(_UPDATE, (state, revision, expires_at, now, session_id))
        return revision

    def delete(self, session_id: str) -> bool:
        """Remove the session; ``True`` if a live one was there."""
        check_session_id(session_id)
        with self._write() as conn:
            now = time.time()
            row = conn.execute(_LOAD, (session_id,)).fetchone()
            if row is not None:
                conn.execute(_DELETE, (session_id,))
        return row is not None and not is_expired(row[2], now)

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        check_prefix(prefix)
        with self._connection() as conn:
            rows = conn.execute(_IDS, (prefix, len(prefix), prefix, time.time())).fetchall()
        return sorted(row[0] for row in rows)

    def purge_expired(self) -> int:
        """Delete the rows of expired sessions and return how many went."""
        with self._write() as conn:
            return conn.execute(_PURGE, (time.time(),)).rowcount

    def close(self) -> None:
        """Close the store's connections (an in-memory database is gone); later calls raise
        ``StoreUnavailableError``. Closing twice is harmless."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            shared, self._shared = self._shared, None
        for conn in idle:
            conn.close()
        if shared is not None:
            shared.close()

    # the AsyncStore protocol: the same calls, in a worker thread

    async def aload(self, session_id: str) -> Optional[StoredSession]:
        """Async twin of :meth:`load`."""
        return await asyncio.to_thread(self.load, session_id)

    async def asave(
        self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None
    ) -> int:
        """Async twin of :meth:`save`."""
        return await asyncio.to_thread(self.save, session_id, state, expected_revision, ttl)

    async def adelete(self, session_id: str) -> bool:
        """Async twin of :meth:`delete`."""
        return await asyncio.to_thread(self.delete, session_id)

    async def aids(self, prefix: str = "") -> list[str]:
        """Async twin of :meth:`ids`."""
        return await asyncio.to_thread(self.ids, prefix)

    async def apurge_expired(self) -> int:
        """Async twin of :meth:`purge_expired`."""
        return await asyncio.to_thread(self.purge_expired)

    async def aclose(self) -> None:
        """Async twin of :meth:`close`."""
        await asyncio.to_thread(self.close)


def _newer(version: object) -> bool:
    return isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION

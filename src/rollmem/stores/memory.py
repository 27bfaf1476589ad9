"""An in-process store: sessions live in a dict and vanish with the process."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, NamedTuple, Optional, TypeVar

from . import rules
from ._protocol import Head, LogEntry, LogWrite, StoredLog

__all__ = ["MemoryStore"]

_T = TypeVar("_T")


class _Entry(NamedTuple):
    head: Head
    entries: list[LogEntry]
    expires_at: Optional[float]  # time.monotonic() deadline, None: never


class MemoryStore(rules.AsyncTwins):
    """A thread-safe log-structured store kept in this process's memory, for tests, scripts and
    single-process apps.

    It follows the full :class:`~rollmem.stores.LogStore` contract (incarnations, revisions,
    appends without compare-and-set, folds and rewrites with one, ``ttl``) and its
    ``AsyncLogStore`` twin; the async methods never block on I/O. Nothing survives the process,
    and separate processes do not share sessions. After :meth:`close` the sessions are gone
    and every call raises ``StoreUnavailableError``, as with every store.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, _Entry] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"<MemoryStore with {len(self._sessions)} sessions>"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The store's lock, once it is known to be open."""
        with self._lock:
            if self._closed:
                raise rules.closed(repr(self))
            yield

    def _live(self, session_id: str, now: float) -> Optional[_Entry]:
        entry = self._sessions.get(session_id)
        if entry is None or rules.is_expired(entry.expires_at, now):
            return None
        return entry

    def load(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """The live session, or ``None`` when it is absent or expired; with ``since``, only the
        entries appended after it when its incarnation and revision still hold."""
        rules.check_load(session_id, since)
        with self._locked():
            entry = self._live(session_id, time.monotonic())
            if entry is None:
                return None
            head = entry.head
            if since is not None and (since.incarnation, since.revision) == (head.incarnation, head.revision):
                return StoredLog(head, tuple(e for e in entry.entries if e.seq >= since.tail), delta=True)
            return StoredLog(head, tuple(entry.entries))

    def write(self, session_id: str, change: LogWrite) -> Head:
        """Apply ``change`` atomically and return the new head; else raise ``ConflictError``
        and change nothing."""
        rules.check_write(session_id, change)
        with self._locked():
            now = time.monotonic()
            entry = self._live(session_id, now)
            head, entries = rules.apply_write(
                session_id,
                None if entry is None else entry.head,
                [] if entry is None else entry.entries,
                change,
                uuid.uuid4().hex,
            )
            expires_at = None if change.ttl is None else now + change.ttl
            self._sessions[session_id] = _Entry(head, entries, expires_at)
        return head

    def delete(self, session_id: str) -> bool:
        """Remove the session; ``True`` if a live one was there."""
        rules.check_session_id(session_id)
        with self._locked():
            live = self._live(session_id, time.monotonic()) is not None
            self._sessions.pop(session_id, None)
        return live

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        rules.check_prefix(prefix)
        with self._locked():
            now = time.monotonic()
            found = [
                session_id
                for session_id, entry in self._sessions.items()
                if session_id.startswith(prefix) and not rules.is_expired(entry.expires_at, now)
            ]
        return sorted(found)

    def purge_expired(self) -> int:
        """Remove the expired sessions and return how many went."""
        with self._locked():
            now = time.monotonic()
            expired = [
                sid for sid, entry in self._sessions.items() if rules.is_expired(entry.expires_at, now)
            ]
            for session_id in expired:
                del self._sessions[session_id]
        return len(expired)

    def close(self) -> None:
        """Drop every session; later calls raise ``StoreUnavailableError``. Closing twice is harmless."""
        with self._lock:
            self._closed = True
            self._sessions.clear()

    async def call_blocking(self, call: Callable[..., _T], *args: Any) -> _T:
        """``call(*args)`` at once: this store never blocks on I/O."""
        return call(*args)

"""An in-process store: sessions live in a dict and vanish with the process."""

from __future__ import annotations

import threading
import time
import uuid
from typing import NamedTuple, Optional

from ._protocol import Head, LogEntry, LogWrite, StoredLog
from .rules import Closing, apply_write, check_load, check_prefix, check_session_id, check_write, is_expired

__all__ = ["MemoryStore"]


class _Entry(NamedTuple):
    head: Head
    entries: list[LogEntry]
    expires_at: Optional[float]  # time.monotonic() deadline, None: never


class MemoryStore(Closing):
    """A thread-safe log-structured store kept in this process's memory, for tests, scripts and
    single-process apps.

    It follows the full :class:`~rollmem.stores.LogStore` contract (incarnations, revisions,
    appends without compare-and-set, folds and rewrites with one, ``ttl``) and its
    ``AsyncLogStore`` twin; the async methods never block on I/O. Nothing survives the process,
    and separate processes do not share sessions.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, _Entry] = {}

    def __repr__(self) -> str:
        return f"<MemoryStore with {len(self._sessions)} sessions>"

    def _live(self, session_id: str, now: float) -> Optional[_Entry]:
        entry = self._sessions.get(session_id)
        if entry is None or is_expired(entry.expires_at, now):
            return None
        return entry

    def load(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """The live session, or ``None`` when it is absent or expired; with ``since``, only the
        entries appended after it when its incarnation and revision still hold."""
        check_load(session_id, since)
        with self._lock:
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
        check_write(session_id, change)
        with self._lock:
            now = time.monotonic()
            entry = self._live(session_id, now)
            head, entries = apply_write(
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
        check_session_id(session_id)
        with self._lock:
            live = self._live(session_id, time.monotonic()) is not None
            self._sessions.pop(session_id, None)
        return live

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        check_prefix(prefix)
        with self._lock:
            now = time.monotonic()
            found = [
                session_id
                for session_id, entry in self._sessions.items()
                if session_id.startswith(prefix) and not is_expired(entry.expires_at, now)
            ]
        return sorted(found)

    def purge_expired(self) -> int:
        """Remove the expired sessions and return how many went."""
        with self._lock:
            now = time.monotonic()
            expired = [sid for sid, entry in self._sessions.items() if is_expired(entry.expires_at, now)]
            for session_id in expired:
                del self._sessions[session_id]
        return len(expired)

    def close(self) -> None:
        """Nothing to release; the sessions stay readable."""

    async def aload(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """Async twin of :meth:`load`."""
        return self.load(session_id, since)

    async def awrite(self, session_id: str, change: LogWrite) -> Head:
        """Async twin of :meth:`write`."""
        return self.write(session_id, change)

    async def adelete(self, session_id: str) -> bool:
        """Async twin of :meth:`delete`."""
        return self.delete(session_id)

    async def aids(self, prefix: str = "") -> list[str]:
        """Async twin of :meth:`ids`."""
        return self.ids(prefix)

    async def apurge_expired(self) -> int:
        """Async twin of :meth:`purge_expired`."""
        return self.purge_expired()

    async def aclose(self) -> None:
        """Async twin of :meth:`close`."""

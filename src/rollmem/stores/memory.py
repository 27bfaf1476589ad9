"""An in-process store: sessions live in a dict and vanish with the process."""

from __future__ import annotations

import threading
import time
from typing import NamedTuple, Optional

from ._common import check_prefix, check_save, check_session_id, conflict, is_expired
from ._protocol import StoredSession

__all__ = ["MemoryStore"]


class _Entry(NamedTuple):
    state: str
    revision: int
    expires_at: Optional[float]  # time.monotonic() deadline, None: never


class MemoryStore:
    """A thread-safe store kept in this process's memory, for tests, scripts and single-process apps.

    It follows the full :class:`~rollmem.stores.Store` contract (revisions, compare-and-set,
    ``ttl``) and its ``AsyncStore`` twin; the async methods never block on I/O. Nothing
    survives the process, and separate processes do not share sessions.
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

    def load(self, session_id: str) -> Optional[StoredSession]:
        """The live session, or ``None`` when it is absent or expired."""
        check_session_id(session_id)
        with self._lock:
            entry = self._live(session_id, time.monotonic())
        return None if entry is None else StoredSession(entry.state, entry.revision)

    def save(self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None) -> int:
        """Store ``state`` if the live revision is ``expected_revision`` (0: no live session) and
        return the new revision; else raise ``ConflictError`` and change nothing."""
        check_save(session_id, state, expected_revision, ttl)
        with self._lock:
            now = time.monotonic()
            entry = self._live(session_id, now)
            live_revision = 0 if entry is None else entry.revision
            if live_revision != expected_revision:
                raise conflict(session_id, expected_revision, live_revision)
            revision = live_revision + 1
            expires_at = None if ttl is None else now + ttl
            self._sessions[session_id] = _Entry(state, revision, expires_at)
        return revision

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

    async def aload(self, session_id: str) -> Optional[StoredSession]:
        """Async twin of :meth:`load`."""
        return self.load(session_id)

    async def asave(
        self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None
    ) -> int:
        """Async twin of :meth:`save`."""
        return self.save(session_id, state, expected_revision, ttl)

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

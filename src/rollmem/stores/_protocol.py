"""The storage protocol behind :mod:`rollmem.sessions`, and its revision contract.

A store keeps, per session id, one JSON text (a memory's ``to_dict()``) and a revision
number. Revisions start at 1 for the first save and grow by one per save. Every save is a
compare-and-set: it succeeds only while the stored revision still equals the revision the
writer loaded (``0`` for "no live session": absent, deleted or expired), and raises
:class:`~rollmem.errors.ConflictError` otherwise, writing nothing. A store that cannot be
reached raises :class:`~rollmem.errors.StoreUnavailableError` from the driver's error.

Sync code calls the plain methods; async code calls the ``a``-prefixed twins, which must
not block the event loop. A store may implement only one side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, runtime_checkable

__all__ = ["AsyncStore", "Store", "StoredSession"]


@dataclass(frozen=True)
class StoredSession:
    """What a store holds for one live session."""

    state: str
    """The JSON text of the memory's ``to_dict()``."""
    revision: int
    """1 after the first save, then one more per save."""


@runtime_checkable
class Store(Protocol):
    """A blocking session store. Implementations must be safe to share between threads."""

    def load(self, session_id: str) -> Optional[StoredSession]:
        """The live session, or ``None`` when it is absent or expired."""
        ...

    def save(self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None) -> int:
        """Store ``state`` if the live revision is ``expected_revision`` (0: no live session),
        and return the new revision; else raise ``ConflictError`` and write nothing. With
        ``ttl`` the session expires that many seconds after this save."""
        ...

    def delete(self, session_id: str) -> bool:
        """Remove the session; ``True`` if a live one was there."""
        ...

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        ...

    def purge_expired(self) -> int:
        """Remove expired sessions now and return how many went."""
        ...

    def close(self) -> None:
        """Release connections the store opened itself (not ones it was given)."""
        ...


@runtime_checkable
class AsyncStore(Protocol):
    """The async twin of :class:`Store`: same contract, coroutine methods with an ``a`` prefix."""

    async def aload(self, session_id: str) -> Optional[StoredSession]: ...

    async def asave(
        self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None
    ) -> int: ...

    async def adelete(self, session_id: str) -> bool: ...

    async def aids(self, prefix: str = "") -> list[str]: ...

    async def apurge_expired(self) -> int: ...

    async def aclose(self) -> None: ...

"""The storage protocol behind :mod:`rollmem.sessions`: :class:`LogStore` / :class:`AsyncLogStore`.

Every bundled store implements it (``MemoryStore``, ``SQLiteStore``, ``RedisStore``,
``PostgresStore``). A session is a :class:`Head` (summary, incarnation, revision, counter
identity, next sequence number) plus an append-only log of :class:`LogEntry` (one message as
JSON text, its token cost, its sequence number). One method
writes, :meth:`LogStore.write`, atomically:

- an *append* (``expected_revision is None``) adds entries at the tail, numbered in commit
  order; it conflicts only when the incarnation is gone (the session was deleted, expired or
  recreated), never with other appends or folds;
- a *fold* (``expected_revision`` set) is a compare-and-set on the head's revision: it sets the
  summary, removes the entries numbered below ``cut`` except those in ``keep``, and appends;
  entries appended by others after the cut survive;
- a *rewrite* (``replace=True``) removes every entry first: it also needs ``expected_tail``;
- ``expected_tail`` (optional on a fold) also requires that nobody appended since the load;
- ``create=True`` starts a session under a new incarnation; it conflicts if one is live.

Folds and rewrites bump the revision; appends do not. A losing write raises
:class:`~rollmem.errors.ConflictError` and writes nothing. Incarnations are never reused, so a
writer that loaded a session before it was deleted can never write into its successor.
``load`` is one read; with ``since`` (a head the caller holds) a store may return only the
entries appended after it, when incarnation and revision are unchanged (``StoredLog.delta``).

A store that cannot be reached raises :class:`~rollmem.errors.StoreUnavailableError`. Sync code
calls the plain methods; async code calls the ``a``-prefixed twins, which must not block the
event loop. A store may implement only one side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional, Protocol, runtime_checkable

__all__ = ["AsyncLogStore", "Head", "LogEntry", "LogStore", "LogWrite", "StoredLog"]


@dataclass(frozen=True)
class Head:
    """The head of a log-structured session."""

    incarnation: str
    """Names this life of the session: new at each creation, never reused after a delete."""
    revision: int
    """1 at creation, one more per fold or rewrite (appends leave it alone)."""
    summary: str
    tail: int
    """The sequence number the next appended entry gets (entries are numbered from 0)."""
    counter: Optional[str] = None
    """The identity of the token counter that measured the entries' costs (``None``: unknown)."""


class LogEntry(NamedTuple):
    """One message of the log (a named tuple: a load builds one per stored message)."""

    message: str
    """The JSON text of ``Message.to_dict()``."""
    cost: int
    """Its cost by the counter named in the head (``-1``: unknown)."""
    seq: int = -1
    """Its sequence number (assigned by the store at append; ``-1`` in a write)."""


@dataclass(frozen=True)
class StoredLog:
    """What ``load`` returns: the head and the live entries, oldest first."""

    head: Head
    entries: tuple[LogEntry, ...]
    delta: bool = False
    """True when ``entries`` holds only what was appended after the ``since`` head."""


@dataclass(frozen=True)
class LogWrite:
    """One atomic write of :meth:`LogStore.write`; see the module docstring for the rules."""

    incarnation: str
    """The incarnation the writer loaded (ignored with ``create``)."""
    entries: tuple[LogEntry, ...] = ()
    """Appended at the tail, in this order."""
    expected_revision: Optional[int] = None
    """``None``: an append, no compare-and-set on the head."""
    expected_tail: Optional[int] = None
    """The tail the writer loaded, when nobody may have appended since (rewrites, some folds)."""
    summary: Optional[str] = None
    """The new summary (``None``: unchanged)."""
    cut: int = 0
    """Entries numbered below ``cut`` are removed, except those in ``keep``."""
    keep: tuple[int, ...] = ()
    replace: bool = False
    """Remove every entry before appending (a rewrite)."""
    counter: Optional[str] = None
    """The counter identity of the costs of ``entries``; stored in the head by a create, a
    rewrite or a fold (an append must carry the head's)."""
    create: bool = False
    """Start the session under a new incarnation; conflicts when one is live."""
    ttl: Optional[float] = None
    """The session expires ``ttl`` seconds after this write (``None``: never)."""

    @property
    def is_append(self) -> bool:
        """Whether this write only appends (no compare-and-set on the head)."""
        return self.expected_revision is None and not self.create and not self.replace


@runtime_checkable
class LogStore(Protocol):
    """A blocking log-structured session store. Implementations must be safe to share between threads."""

    def load(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """The live session, or ``None`` when it is absent or expired."""
        ...

    def write(self, session_id: str, change: LogWrite) -> Head:
        """Apply ``change`` atomically and return the new head; else raise ``ConflictError`` and
        write nothing."""
        ...

    def delete(self, session_id: str) -> bool:
        """Remove the session (its incarnation ends); ``True`` if a live one was there."""
        ...

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        ...

    def purge_expired(self) -> int:
        """Remove expired sessions now and return how many went."""
        ...

    def close(self) -> None:
        """Release what the store opened itself, for both sides (not what it was given); every
        later call raises :class:`~rollmem.errors.StoreUnavailableError`. Twice is harmless."""
        ...


@runtime_checkable
class AsyncLogStore(Protocol):
    """The async twin of :class:`LogStore`: same contract, coroutine methods with an ``a`` prefix."""

    async def aload(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]: ...

    async def awrite(self, session_id: str, change: LogWrite) -> Head: ...

    async def adelete(self, session_id: str) -> bool: ...

    async def aids(self, prefix: str = "") -> list[str]: ...

    async def apurge_expired(self) -> int: ...

    async def aclose(self) -> None: ...

"""The pure rules of a log store: argument checks, the conflict check, the next head and how a
write applies, so every store (bundled or third-party) accepts, rejects and applies alike.

A third-party :class:`~rollmem.stores.LogStore` keeps its own storage and asks these functions
what to do: :func:`check_write` / :func:`check_load` on the arguments, :func:`write_conflict` on
the live head (raise what it returns), :func:`new_head` for the head to store, and keeps the
entries :func:`apply_write` keeps (its reference semantics, usable as is by an in-memory store).
None of them touches storage, a clock or the network. :mod:`rollmem.testing` checks a store
against the same contract the bundled stores pass.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Callable, Optional, TypeVar, cast

from .. import _validate as v
from .._flow import in_thread
from ..errors import ConflictError, StoreUnavailableError
from ._protocol import Head, LogEntry, LogStore, LogWrite, StoredLog

__all__ = [
    "LAYOUT_VERSION",
    "AsyncTwins",
    "Closing",
    "apply_write",
    "check_layout",
    "check_load",
    "check_prefix",
    "check_session_id",
    "check_write",
    "closed",
    "is_expired",
    "new_head",
    "shown",
    "write_conflict",
]

LAYOUT_VERSION = 2
"""The version of the layout the bundled stores write (SQLite and PostgreSQL in their meta table,
Redis in each session's head). A store refuses a layout version it cannot read
(:func:`check_layout`); a future layout moves sessions over once, reading this one."""


def check_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a valid session id: a non-empty ``str`` without NUL
    characters or lone surrogates, of any length; else ``TypeError`` / ``ValueError`` naming
    ``session_id``. Sessions, every store and the integrations apply this one rule."""
    return v.check_session_id(session_id)


def check_prefix(prefix: object) -> str:
    """Return ``prefix`` if it is a ``str`` (possibly empty) a session id could start with; else
    ``TypeError`` / ``ValueError`` naming ``prefix``."""
    return v.check_storable("prefix", prefix)


def is_expired(expires_at: Optional[float], now: float) -> bool:
    """Whether a session with this expiry time (``None``: never) is gone at ``now``."""
    return expires_at is not None and expires_at <= now


def check_layout(store: object, found: object) -> None:
    """Raise :class:`~rollmem.errors.StoreUnavailableError` naming ``store`` and the version
    when it holds layout version ``found`` and that is not :data:`LAYOUT_VERSION`."""
    if found != LAYOUT_VERSION:
        newer = isinstance(found, int) and found > LAYOUT_VERSION
        raise StoreUnavailableError(
            f"{store} holds rollmem layout version {found!r}; this rollmem reads version "
            f"{LAYOUT_VERSION}" + (": upgrade rollmem" if newer else "")
        )


def closed(store: object) -> StoreUnavailableError:
    """The error every call of a closed store raises (``store`` is its ``repr``): every bundled
    store refuses every call after ``close()`` or ``aclose()``, and never reopens."""
    return StoreUnavailableError(f"{store} is closed")


def shown(session_id: str, limit: int = 100) -> str:
    """``repr(session_id)`` for an error message, cut after ``limit`` characters: an error never
    repeats a huge id whole."""
    if len(session_id) <= limit:
        return repr(session_id)
    return f"{session_id[:limit]!r}... ({len(session_id)} characters)"


_S = TypeVar("_S", bound="Closing")


class Closing:
    """``with store:`` closes it with :meth:`close` at the end of the block, ``async with
    store:`` with :meth:`aclose`; every bundled store has both."""

    def close(self) -> None:
        """Release what the store opened itself."""

    async def aclose(self) -> None:
        """Async twin of :meth:`close`."""

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(
        self, kind: Optional[type[BaseException]], error: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()

    async def __aenter__(self: _S) -> _S:
        return self

    async def __aexit__(
        self, kind: Optional[type[BaseException]], error: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.aclose()


_T = TypeVar("_T")


class AsyncTwins(Closing):
    """The ``a``-methods of a :class:`~rollmem.stores.LogStore` whose blocking methods do the
    work (``SQLiteStore``, ``MemoryStore``): each awaits its blocking twin through
    :meth:`call_blocking`, in a worker thread unless the store overrides it."""

    async def call_blocking(self, call: Callable[..., _T], *args: Any) -> _T:
        """``call(*args)`` off the event loop (in a worker thread)."""
        return await in_thread(call, *args)

    def _blocking(self) -> LogStore:
        return cast(LogStore, self)

    async def aload(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """Async twin of ``load``."""
        return await self.call_blocking(self._blocking().load, session_id, since)

    async def awrite(self, session_id: str, change: LogWrite) -> Head:
        """Async twin of ``write``."""
        return await self.call_blocking(self._blocking().write, session_id, change)

    async def adelete(self, session_id: str) -> bool:
        """Async twin of ``delete``."""
        return await self.call_blocking(self._blocking().delete, session_id)

    async def aids(self, prefix: str = "") -> list[str]:
        """Async twin of ``ids``."""
        return await self.call_blocking(self._blocking().ids, prefix)

    async def apurge_expired(self) -> int:
        """Async twin of ``purge_expired``."""
        return await self.call_blocking(self._blocking().purge_expired)

    async def aclose(self) -> None:
        """Async twin of ``close``."""
        await self.call_blocking(self._blocking().close)


# -- the log protocol: checks and the reference semantics of a write -------------------------------


def check_load(session_id: object, since: object) -> None:
    """Raise ``TypeError``/``ValueError`` naming the bad argument of a ``load`` call (``since``
    must be a :class:`~rollmem.stores.Head` or ``None``); call it before touching storage."""
    check_session_id(session_id)
    if since is not None and not isinstance(since, Head):
        raise v.type_error("since", "a Head or None", since)


def check_write(session_id: object, change: object) -> LogWrite:
    """Return ``change`` if ``write(session_id, change)`` is well formed, else raise
    ``TypeError``/``ValueError`` naming the bad argument or field (``change.entries[2].cost``);
    call it before touching storage, so a bad write changes nothing. A rewrite
    (``replace=True``, not a create) must carry ``expected_revision`` and ``expected_tail``."""
    check_session_id(session_id)
    if not isinstance(change, LogWrite):
        raise v.type_error("change", "a LogWrite", change)
    v.check_storable("change.incarnation", change.incarnation)
    for index, entry in enumerate(change.entries):
        if not isinstance(entry, LogEntry):
            raise v.type_error(f"change.entries[{index}]", "a LogEntry", entry)
        v.check_storable(f"change.entries[{index}].message", entry.message, allow_empty=False)
        if v.check_int(f"change.entries[{index}].cost", entry.cost, -1) >= 2**63:  # a signed 64-bit column
            raise v.value_error(f"change.entries[{index}].cost", "< 2**63", entry.cost)
    for name in ("expected_revision", "expected_tail"):
        value = getattr(change, name)
        if value is not None:
            v.check_int(f"change.{name}", value, 0)
    if change.summary is not None:
        v.check_storable("change.summary", change.summary)
    if change.counter is not None:
        v.check_storable("change.counter", change.counter, allow_empty=False)
    v.check_int("change.cut", change.cut, 0)
    for index, seq in enumerate(change.keep):
        v.check_int(f"change.keep[{index}]", seq, 0)
    if (
        change.replace
        and (change.expected_revision is None or change.expected_tail is None)
        and not change.create
    ):
        raise ValueError("change: a rewrite (replace=True) needs expected_revision and expected_tail")
    v.check_ttl(change.ttl)
    return change


def write_conflict(session_id: str, head: Optional[Head], change: LogWrite) -> Optional[ConflictError]:
    """The error a ``write`` of ``change`` on the live ``head`` (``None``: no live session) must
    raise, or ``None`` when it applies. Every log store decides with this one function."""
    name = f"session {shown(session_id)}"
    if change.create:
        if head is not None:
            return ConflictError(f"{name}: created as a new session but another writer created it first")
        return None
    if head is None or head.incarnation != change.incarnation:
        return ConflictError(f"{name}: the session was deleted, expired or recreated since it was loaded")
    if change.expected_revision is not None and head.revision != change.expected_revision:
        return ConflictError(
            f"{name}: written against revision {change.expected_revision} but the store is at "
            f"revision {head.revision} (another writer folded or rewrote it)"
        )
    if change.expected_tail is not None and head.tail != change.expected_tail:
        return ConflictError(f"{name}: another writer appended since it was loaded")
    if change.is_append and change.counter != head.counter:
        return ConflictError(f"{name}: the session's costs were rewritten by another token counter")
    return None


def new_head(head: Optional[Head], change: LogWrite, incarnation: str) -> Head:
    """The head to store after ``change`` applied on ``head`` (call :func:`write_conflict`
    first). A create (or ``head`` ``None``) starts revision 1 under ``incarnation`` (a new unique
    string from the store); an append keeps the revision and counter, any other write bumps the
    revision and stores ``change.counter``; ``change.summary`` (unless ``None``) replaces the
    summary; ``tail`` grows by the number of new entries."""
    if change.create or head is None:
        return Head(incarnation, 1, change.summary or "", len(change.entries), change.counter)
    revision = head.revision if change.is_append else head.revision + 1
    summary = head.summary if change.summary is None else change.summary
    counter = head.counter if change.is_append else change.counter
    return Head(head.incarnation, revision, summary, head.tail + len(change.entries), counter)


def apply_write(
    session_id: str, head: Optional[Head], entries: list[LogEntry], change: LogWrite, incarnation: str
) -> tuple[Head, list[LogEntry]]:
    """The reference semantics of ``write``: raise the :func:`write_conflict` error, else return
    the new head and the entries to store. A create or rewrite drops every old entry; any other
    write keeps those with ``seq >= change.cut`` or in ``change.keep``; the new entries get
    ``seq`` numbers from the old tail on. ``entries`` is not changed."""
    error = write_conflict(session_id, head, change)
    if error is not None:
        raise error
    updated = new_head(head, change, incarnation)
    if change.create or change.replace or head is None:
        kept: list[LogEntry] = []
    else:
        keep = set(change.keep)
        kept = [entry for entry in entries if entry.seq >= change.cut or entry.seq in keep]
    first = updated.tail - len(change.entries)
    kept.extend(LogEntry(e.message, e.cost, first + i) for i, e in enumerate(change.entries))
    return updated, kept

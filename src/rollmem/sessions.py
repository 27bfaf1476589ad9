"""Persistent sessions: one memory per conversation, kept in a store, safe for many writers.

:class:`Sessions` (sync code) and :class:`AsyncSessions` (async code) open a session as a
context manager: the memory is loaded (or created empty) through the user's factory, which
supplies all configuration; the store keeps a head (summary, incarnation, revision, counter
identity) and a log of messages with their token costs (see :mod:`rollmem.stores`).

The block's changes are taken from the memory's public change record
(:meth:`~rollmem.memory.RollingMemory.record`, :mod:`rollmem.changes`) and written as one of:

- an *append* when the block only added messages: those messages, no compare-and-set, so
  concurrent appenders never conflict;
- a *fold* when the memory evicted: the new summary and the removed entries, compare-and-set on
  the head's revision (and on the tail, when the fold reached messages the block added);
- a *rewrite* for rare changes (clear, pin/unpin, assignments, a changed token counter).

When a write loses, the latest state is loaded into the same memory object and the block's
changes are redone on it with ``memory.replay``: adds are added again, explicit ``fold()`` calls
and clears and pins are redone, automatic folds happen again by themselves. An assignment of
``summary`` or ``buffer``, a ``restore()`` (or an in-place edit of ``buffer``) cannot be
redone without losing what the other writer did: then ``ConflictError`` is raised and nothing
is written; :meth:`Sessions.update` re-runs a function on the latest state instead. The
memory's ``on_evict`` hook is held back during a block and called, once per eviction, only
after the write that commits it.

Both twins run one *flow* per operation: a generator that yields store requests and redos, and
receives their results. :class:`Sessions` performs them with plain calls,
:class:`AsyncSessions` with awaits; every decision lives in the shared base.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import operator
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Generic, Optional, Protocol, TypeVar, Union, cast

from . import _validate as v
from .changes import (
    Appended,
    BufferAssigned,
    Change,
    Cleared,
    Dropped,
    Folded,
    Pinned,
    Restored,
    SummaryAssigned,
    Unpinned,
)
from .counters import counter_identity
from .errors import ConflictError, InvalidStateError
from .message import Message, _messages_from_json
from .stores._common import new_head, shown
from .stores._protocol import (
    AsyncLogStore,
    AsyncStore,
    Head,
    LogEntry,
    LogStore,
    LogWrite,
    Store,
    StoredLog,
)
from .stores._whole import AsyncWholeStateLog, WholeStateLog

__all__ = ["AsyncSessions", "Sessions"]


class _SessionMemory(Protocol):
    """What a session needs from a memory: every rollmem memory class qualifies."""

    @property
    def summary(self) -> str: ...

    @property
    def buffer(self) -> list[Message]: ...

    @property
    def token_counter(self) -> Optional[Callable[[str], int]]: ...

    @property
    def on_evict(self) -> Optional[Callable[[Sequence[Message]], Any]]: ...

    @on_evict.setter
    def on_evict(self, hook: Optional[Callable[[Sequence[Message]], Any]]) -> None: ...

    def record(self) -> contextlib.AbstractContextManager[list[Change]]: ...

    def replay(self, changes: Iterable[Change]) -> Any: ...

    def restore(self, data: Mapping[str, Any], *, costs: Optional[Sequence[int]] = None) -> None: ...

    def costs(self) -> list[int]: ...

    def to_dict(self) -> dict[str, Any]: ...


M = TypeVar("M", bound=_SessionMemory)
_T = TypeVar("_T")

_RARE = (Cleared, Pinned, Unpinned, SummaryAssigned, BufferAssigned, Restored)
_ASSIGNMENTS = (SummaryAssigned, BufferAssigned, Restored)  # what a redo would have to overwrite


# -- requests a flow yields to its driver ---------------------------------------------------------


@dataclass(frozen=True)
class _Load:
    session_id: str
    since: Optional[Head]


@dataclass(frozen=True)
class _Write:
    session_id: str
    change: LogWrite


@dataclass(frozen=True)
class _Redo:
    memory: Any
    changes: tuple[Change, ...]


_Request = Union[_Load, _Write, _Redo]
_Flow = Generator[_Request, Any, _T]


def _advance(flow: _Flow[Any], value: Any, error: Optional[Exception]) -> tuple[bool, Any]:
    """Send ``value`` (or throw ``error``) into ``flow``: ``(False, request)`` or ``(True, result)``."""
    try:
        return False, (flow.send(value) if error is None else flow.throw(error))
    except StopIteration as stop:
        return True, stop.value


# -- what a block loaded ----------------------------------------------------------------------------


@dataclass
class _Loaded:
    """The stored head a block started from and the sequence number of each buffer message."""

    head: Optional[Head]
    seqs: list[int]
    messages: tuple[Message, ...]  # the buffer as loaded, the same objects


def _named(session_id: str, error: InvalidStateError) -> InvalidStateError:
    """The same error (same class and ``path``) with a message that starts with the session id."""
    named = type(error)(error.path, error.problem)
    named.args = (f"session {session_id!r}: {error}",)
    return named


def _messages(session_id: str, entries: Sequence[LogEntry], first: int) -> list[Message]:
    """The stored messages, as ``buffer[first]``...; a bad one raises ``InvalidStateError``
    naming the session and the item."""
    try:
        return _messages_from_json([entry.message for entry in entries], "buffer", first)
    except InvalidStateError as exc:
        raise _named(session_id, exc) from exc


def _trusted_costs(memory: _SessionMemory, head: Head, entries: Sequence[LogEntry]) -> Optional[list[int]]:
    """The stored costs when the memory's counter has the identity they were measured with."""
    identity = counter_identity(memory.token_counter)
    if identity is None or head.counter != identity:
        return None
    costs = [entry.cost for entry in entries]
    return costs if not costs or min(costs) >= 0 else None  # -1: unknown (a migrated session)


def _restore(memory: _SessionMemory, stored: Optional[StoredLog], session_id: str) -> _Loaded:
    """Put the stored state (empty when ``None``) into ``memory``, which is not recording (a load
    is not something the block did); nothing changes on error."""
    if stored is None:
        memory.restore(_EMPTY)
        return _Loaded(None, [], ())
    data = {"version": 2, "summary": stored.head.summary, "buffer": _messages(session_id, stored.entries, 0)}
    try:
        memory.restore(data, costs=_trusted_costs(memory, stored.head, stored.entries))
    except InvalidStateError as exc:
        raise _named(session_id, exc) from exc
    return _Loaded(stored.head, [entry.seq for entry in stored.entries], tuple(memory.buffer))


_EMPTY: Mapping[str, Any] = {"version": 2, "summary": "", "buffer": []}


def _entry(session_id: str, message: Message, cost: int) -> LogEntry:
    try:
        text = json.dumps(message.to_dict(), ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"session {session_id!r}: state cannot be saved as JSON: {exc}") from exc
    return LogEntry(text, cost)


# -- planning the write of a block ---------------------------------------------------------------------


@dataclass
class _Plan:
    change: Optional[LogWrite]  # None: nothing to write
    seqs_before_new: list[int]  # the loaded sequence numbers still in the buffer
    new_count: int  # entries the write appends
    redoable: bool  # whether a lost write may be redone on the latest state


def _incremental(
    session_id: str, memory: _SessionMemory, loaded: _Loaded, changes: Sequence[Change], ttl: Any
) -> Optional[_Plan]:
    """The append or fold that stores the block's changes, or ``None`` when only a rewrite can
    (the buffer was edited in place, or the record does not match it)."""
    head = loaded.head
    assert head is not None
    identity = head.counter
    buffer = memory.buffer
    if all(type(change) is Appended for change in changes):  # the common turn: C-speed checks only
        added = [m for change in changes for m in cast(Appended, change).messages]
        costs = [c for change in changes for c in cast(Appended, change).costs]
        loaded_count = len(loaded.messages)
        if (
            len(buffer) != loaded_count + len(added)
            or not all(map(operator.is_, buffer, loaded.messages))
            or not all(map(operator.is_, buffer[loaded_count:], added))
            or memory.summary != head.summary
        ):
            return None
        new = tuple(_entry(session_id, m, c) for m, c in zip(added, costs))
        append = LogWrite(head.incarnation, new, counter=identity, ttl=ttl) if new else None
        return _Plan(append, loaded.seqs, len(new), True)
    slots: list[tuple[int, Message, int]] = [(seq, m, -1) for seq, m in zip(loaded.seqs, loaded.messages)]
    removed: list[int] = []
    removed_new = folded = False
    summary: Optional[str] = None
    for change in changes:
        if isinstance(change, Appended):
            slots.extend((-1, m, c) for m, c in zip(change.messages, change.costs))
        elif isinstance(change, (Folded, Dropped)) and change.positions:  # empty: fold() found nothing
            folded = True
            if change.positions and change.positions[-1] >= len(slots):
                return None
            for position in change.positions:
                seq = slots[position][0]
                if seq < 0:
                    removed_new = True
                else:
                    removed.append(seq)
            gone = set(change.positions)
            slots = [slot for index, slot in enumerate(slots) if index not in gone]
            if isinstance(change, Folded):
                summary = change.summary
    if len(slots) != len(buffer) or any(slot[1] is not message for slot, message in zip(slots, buffer)):
        return None
    if memory.summary != (head.summary if summary is None else summary):
        return None
    alive = [slot[0] for slot in slots if slot[0] >= 0]
    new = tuple(_entry(session_id, m, c) for seq, m, c in slots if seq < 0)
    if not folded:
        append = LogWrite(head.incarnation, new, counter=identity, ttl=ttl) if new else None
        return _Plan(append, alive, len(new), True)
    cut = max(removed) + 1 if removed else 0
    fold = LogWrite(
        head.incarnation,
        new,
        expected_revision=head.revision,
        expected_tail=head.tail if removed_new else None,
        summary=summary,
        cut=cut,
        keep=tuple(seq for seq in alive if seq < cut),
        counter=identity,
        ttl=ttl,
    )
    return _Plan(fold, alive, len(new), True)


def _plan(
    session_id: str, memory: _SessionMemory, loaded: _Loaded, changes: Sequence[Change], ttl: Any
) -> _Plan:
    """Turn a block's changes into the smallest write that stores what the memory now holds."""
    head = loaded.head
    buffer = memory.buffer
    if (
        head is not None
        and memory.summary == head.summary
        and len(buffer) == len(loaded.messages)
        and all(map(operator.is_, buffer, loaded.messages))
    ):
        return _Plan(None, loaded.seqs, 0, True)  # what the block did left nothing changed
    identity = counter_identity(memory.token_counter)
    assigned = any(isinstance(change, _ASSIGNMENTS) for change in changes)
    if head is not None and head.counter == identity and not any(isinstance(c, _RARE) for c in changes):
        plan = _incremental(session_id, memory, loaded, changes, ttl)
        if plan is not None:
            return plan
        assigned = True  # edited in place: store what it holds, never redo it
    messages, costs = memory.buffer, memory.costs()
    entries = tuple(_entry(session_id, m, c) for m, c in zip(messages, costs))
    if head is None:
        write = LogWrite("", entries, summary=memory.summary, counter=identity, create=True, ttl=ttl)
    else:
        write = LogWrite(
            head.incarnation,
            entries,
            expected_revision=head.revision,
            expected_tail=head.tail,
            summary=memory.summary,
            replace=True,
            counter=identity,
            ttl=ttl,
        )
    return _Plan(write, [], len(entries), not assigned)


# -- the live memories this process saved ----------------------------------------------------------


@dataclass(frozen=True)
class _Live:
    head: Head
    seqs: list[int]
    memory: Any
    summary: str
    buffer: tuple[Message, ...]


class _LiveCache:
    """A thread-safe LRU of memories this process saved, keyed by session id."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[str, _Live] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, session_id: str) -> Optional[_Live]:
        """Remove the entry and return it if its memory was not changed since it was saved."""
        with self._lock:
            live = self._entries.pop(session_id, None)
        if live is None:
            return None
        memory = live.memory
        if memory.summary == live.summary and tuple(memory.buffer) == live.buffer:
            return live
        return None

    def put(self, session_id: str, head: Head, seqs: list[int], memory: _SessionMemory) -> None:
        if self._size == 0:
            return
        live = _Live(head, seqs, memory, memory.summary, tuple(memory.buffer))
        with self._lock:
            self._entries[session_id] = live
            self._entries.move_to_end(session_id)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def discard(self, session_id: str) -> None:
        with self._lock:
            self._entries.pop(session_id, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


# -- validation -------------------------------------------------------------------------------------


_check_session_id = v.check_session_id


def _check_options(ttl: object, max_retries: object, cache_size: object) -> None:
    v.check_ttl(ttl)
    v.check_int("max_retries", max_retries, 0)
    v.check_int("cache_size", cache_size, 0)


_SYNC_UPDATE = "Sessions.update calls fn without awaiting it; use AsyncSessions.update"


def _refuse_awaitable(result: object) -> None:
    """Raise ``TypeError`` (inside the block: nothing is written) when ``fn`` returned an
    awaitable; a coroutine is closed first, so it never warns that it was not awaited."""
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()
        raise TypeError(f"fn returned an awaitable ({type(result).__name__}): {_SYNC_UPDATE}")


class _Lost(Exception):
    """A write lost and the caller asked not to redo (``update`` re-runs its function instead)."""


def _refused(session_id: str) -> ConflictError:
    return ConflictError(
        f"session {session_id!r}: another writer saved first and the block assigned summary or buffer "
        "(or restored, or edited buffer in place), which cannot be redone without losing that "
        "writer's changes; "
        "nothing was saved. Use update(session_id, fn) to re-run the change on the latest state"
    )


def _evicted(changes: Iterable[Change]) -> list[tuple[Message, ...]]:
    return [
        change.messages for change in changes if isinstance(change, (Folded, Dropped)) and change.messages
    ]


# -- the shared logic -------------------------------------------------------------------------------


class _SessionsBase(Generic[M]):
    _async_memories = False

    def __init__(
        self,
        factory: Callable[[], M],
        ttl: Optional[float],
        max_retries: int,
        cache_size: int,
    ) -> None:
        if not callable(factory):
            raise TypeError(f"factory: expected a callable returning a memory, got {type(factory).__name__}")
        _check_options(ttl, max_retries, cache_size)
        self._factory = factory
        self._ttl = ttl
        self._max_retries = max_retries
        self._live = _LiveCache(cache_size)
        self._retries = 0
        self._retries_lock = threading.Lock()

    @property
    def factory(self) -> Callable[[], M]:
        """Builds every memory this object loads: the configuration of every session."""
        return self._factory

    @property
    def ttl(self) -> Optional[float]:
        """Seconds after its last write that a session expires (``None``: never)."""
        return self._ttl

    @property
    def max_retries(self) -> int:
        """How many times a write that lost a compare-and-set is redone before ``ConflictError``."""
        return self._max_retries

    @property
    def retries(self) -> int:
        """How many writes of this object lost a compare-and-set and were redone, in total."""
        return self._retries

    def _count_retry(self, session_id: str, retries: int, cause: Optional[BaseException]) -> int:
        """One more redo after a lost write (counted in :attr:`retries`), or ``ConflictError``
        once ``max_retries`` redos were made."""
        if retries >= self._max_retries:
            raise ConflictError(
                f"session {shown(session_id)}: not saved after {retries} retries; "
                "other writers kept saving first"
            ) from cause
        with self._retries_lock:
            self._retries += 1
        return retries + 1

    def _new_memory(self) -> M:
        memory = self._factory()
        needed = ("record", "replay", "restore", "costs", "on_evict", "token_counter", "summary", "buffer")
        if not all(hasattr(memory, name) for name in needed):
            raise TypeError(f"factory must return a rollmem memory, got {type(memory).__name__}")
        if not self._async_memories and inspect.iscoroutinefunction(memory.replay):
            raise TypeError(f"{type(memory).__name__} is an async memory: use AsyncSessions")
        return memory

    def _checkout(self, session_id: str) -> _Flow[tuple[M, _Loaded]]:
        live = self._live.take(session_id)
        stored: Optional[StoredLog] = yield _Load(session_id, None if live is None else live.head)
        if live is not None and stored is not None and stored.delta:
            memory = live.memory
            if stored.entries:  # others appended: add their messages (counted at the next add)
                first = len(live.seqs)
                added = _messages(session_id, stored.entries, first)
                memory.buffer = [*memory.buffer, *added]
            seqs = [*live.seqs, *(entry.seq for entry in stored.entries)]
            return memory, _Loaded(stored.head, seqs, tuple(memory.buffer))
        if live is not None and stored is not None and stored.head == live.head:
            return live.memory, _Loaded(live.head, live.seqs, tuple(live.memory.buffer))  # nothing moved
        memory = self._new_memory()
        return memory, _restore(memory, stored, session_id)

    def _snapshot(self, session_id: str) -> _Flow[Optional[M]]:
        stored: Optional[StoredLog] = yield _Load(session_id, None)
        if stored is None:
            return None
        memory = self._new_memory()
        _restore(memory, stored, session_id)
        return memory

    def _commit(
        self, session_id: str, memory: M, loaded: _Loaded, changes: Sequence[Change], redo: bool
    ) -> _Flow[Sequence[Change]]:
        """Write what the block changed; on a conflict reload, redo, try again. Returns the
        changes that were committed (those of the last attempt)."""
        retries = 0
        while True:
            plan = _plan(session_id, memory, loaded, changes, self._ttl)
            if plan.change is None:
                if loaded.head is not None:
                    self._live.put(session_id, loaded.head, plan.seqs_before_new, memory)
                return changes
            try:
                head: Head = yield _Write(session_id, plan.change)
            except ConflictError as exc:
                if not redo:
                    raise _Lost() from exc
                if not plan.redoable:
                    raise _refused(session_id) from exc
                retries = self._count_retry(session_id, retries, exc)
            else:
                # Kept live only when the store holds exactly this write on the loaded head: not
                # when others wrote in between (a driver's resent write returns the latest head).
                if head == new_head(loaded.head, plan.change, head.incarnation):
                    first = head.tail - plan.new_count
                    seqs = [*plan.seqs_before_new, *range(first, head.tail)]
                    self._live.put(session_id, head, seqs, memory)
                return changes
            latest: Optional[StoredLog] = yield _Load(session_id, None)
            loaded = _restore(memory, latest, session_id)
            changes = yield _Redo(memory, tuple(changes))


class Sessions(_SessionsBase[M]):
    """Memories kept in a store, one per session id.

    ``store`` is a :class:`~rollmem.stores.LogStore` (every bundled store) or a
    whole-state :class:`~rollmem.stores.Store` (wrapped in
    :class:`~rollmem.stores.WholeStateLog`). ``factory()`` builds each memory (budget,
    summarizer, counter, callbacks); the store keeps only its state, so a changed factory
    applies to every session on its next open. ``ttl`` (seconds) makes a session expire that
    long after its last write. A write that keeps losing to other writers is redone
    ``max_retries`` times, then raises :class:`~rollmem.errors.ConflictError`. Up to
    ``cache_size`` memories this object saved are kept live and reused while the store still
    holds what was saved (plus what others appended since). Thread-safe.
    """

    def __init__(
        self,
        store: Union[LogStore, Store],
        factory: Callable[[], M],
        *,
        ttl: Optional[float] = None,
        max_retries: int = 10,
        cache_size: int = 128,
    ) -> None:
        if isinstance(store, LogStore) and hasattr(store, "write"):
            log: LogStore = store
        elif isinstance(store, Store):
            log = WholeStateLog(store)
        else:
            raise v.type_error("store", "a rollmem LogStore or Store", store)
        super().__init__(factory, ttl, max_retries, cache_size)
        self._store = store
        self._log = log

    @property
    def store(self) -> Union[LogStore, Store]:
        """Where the sessions are kept."""
        return self._store

    @contextmanager
    def open(self, session_id: str) -> Iterator[M]:
        """Load the session (an empty memory when there is none) for the ``with`` block.

        When the block exits without an exception its changes are written atomically; if
        another writer wrote in between, the latest state is loaded into the same memory and
        the block's changes are redone on it (see the module docstring; an assignment raises
        ``ConflictError`` instead, nothing written). An exception in the block writes nothing.
        ``on_evict`` is called after the write, once per committed eviction. Use the memory
        inside the block only. Raises ``InvalidStateError`` naming the session for unreadable
        state, ``ConflictError`` after ``max_retries`` lost writes, ``StoreUnavailableError``
        from the store.
        """
        with self._block(session_id, redo=True) as memory:
            yield memory

    def update(self, session_id: str, fn: Callable[[M], _T]) -> _T:
        """Run ``fn(memory)`` in an ``open`` block and return its result; when another writer
        wrote first, load the latest state and run ``fn`` again on it (up to ``max_retries``
        times), instead of redoing the first run's changes. Use it for changes that assign
        ``summary`` or ``buffer``: ``fn`` may run more than once and must only change the memory.
        ``fn`` must be a plain function: a coroutine function (or an ``fn`` that returns an
        awaitable) raises ``TypeError`` and nothing is written; use :meth:`AsyncSessions.update`."""
        _check_session_id(session_id)
        if not callable(fn):
            raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")
        v.check_not_coroutine("fn", fn, _SYNC_UPDATE)
        retries = 0
        while True:
            try:
                with self._block(session_id, redo=False) as memory:
                    result = fn(memory)
                    _refuse_awaitable(result)
                return result
            except _Lost as lost:
                retries = self._count_retry(session_id, retries, lost.__cause__)

    @contextmanager
    def _block(self, session_id: str, redo: bool) -> Iterator[M]:
        _check_session_id(session_id)
        memory, loaded = self._run(self._checkout(session_id))
        hook = memory.on_evict
        memory.on_evict = None
        try:
            with memory.record() as changes:
                yield memory
            committed = self._run(self._commit(session_id, memory, loaded, changes, redo))
        finally:
            memory.on_evict = hook
        if hook is not None:
            for messages in _evicted(committed):
                hook(list(messages))  # a fresh list, as the memory gives its hook

    def get(self, session_id: str) -> Optional[M]:
        """A snapshot of the stored session (``None`` if there is none); changes to it are not saved."""
        return self._run(self._snapshot(_check_session_id(session_id)))

    def delete(self, session_id: str) -> bool:
        """Remove the session; ``True`` if there was a live one. A block that loaded it before
        can no longer write to the session (nor to a new one under the same id)."""
        self._live.discard(_check_session_id(session_id))
        return self._log.delete(session_id)

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        return self._log.ids(prefix)

    def purge_expired(self) -> int:
        """Remove the expired sessions from the store now; returns how many went."""
        return self._log.purge_expired()

    def close(self) -> None:
        """Drop the live memories this object keeps. The store is not closed: it was given, so
        it stays the caller's to close (``with SQLiteStore(path) as store:``). Closing twice is
        harmless; the object stays usable, with an empty cache."""
        self._live.clear()

    def __enter__(self) -> Sessions[M]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _run(self, flow: _Flow[_T]) -> _T:
        done, item = _advance(flow, None, None)
        while not done:
            try:
                value, error = self._perform(item), None
            except Exception as exc:
                value, error = None, exc
            done, item = _advance(flow, value, error)
        return cast(_T, item)

    def _perform(self, request: _Request) -> Any:
        if isinstance(request, _Load):
            return self._log.load(request.session_id, request.since)
        if isinstance(request, _Write):
            return self._log.write(request.session_id, request.change)
        memory = request.memory
        with memory.record() as changes:
            memory.replay(request.changes)
        return changes


class _ThreadedLog:
    """A blocking :class:`LogStore` seen as an :class:`AsyncLogStore`: each call in a worker thread."""

    def __init__(self, store: LogStore) -> None:
        self._store = store

    async def aload(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        return await asyncio.to_thread(self._store.load, session_id, since)

    async def awrite(self, session_id: str, change: LogWrite) -> Head:
        return await asyncio.to_thread(self._store.write, session_id, change)

    async def adelete(self, session_id: str) -> bool:
        return await asyncio.to_thread(self._store.delete, session_id)

    async def aids(self, prefix: str = "") -> list[str]:
        return await asyncio.to_thread(self._store.ids, prefix)

    async def apurge_expired(self) -> int:
        return await asyncio.to_thread(self._store.purge_expired)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._store.close)


def _async_log(store: object) -> AsyncLogStore:
    """Any rollmem store as an :class:`AsyncLogStore` (also used by the integrations)."""
    if isinstance(store, AsyncLogStore) and hasattr(store, "awrite"):
        return store
    if isinstance(store, LogStore) and hasattr(store, "write"):
        return _ThreadedLog(store)
    if isinstance(store, (AsyncStore, Store)):
        return AsyncWholeStateLog(store)
    raise v.type_error("store", "a rollmem AsyncLogStore, LogStore, AsyncStore or Store", store)


class AsyncSessions(_SessionsBase[M]):
    """:class:`Sessions` for async code: ``async with sessions.open(id) as mem``.

    Takes an :class:`~rollmem.stores.AsyncLogStore` or :class:`~rollmem.stores.AsyncStore`, or
    their blocking twins (called from worker threads, never on the event loop). Memories may
    be async (:class:`~rollmem.AsyncRollingMemory`, :class:`~rollmem.AsyncSummaryMemory`) or
    sync. Before a write, the folds an async memory runs in the background are awaited, so
    the write includes them; a failure of one is raised and nothing is written. ``on_evict``
    may be a coroutine function; it is awaited after the write.
    """

    _async_memories = True

    def __init__(
        self,
        store: Union[AsyncLogStore, LogStore, AsyncStore, Store],
        factory: Callable[[], M],
        *,
        ttl: Optional[float] = None,
        max_retries: int = 10,
        cache_size: int = 128,
    ) -> None:
        log = _async_log(store)
        super().__init__(factory, ttl, max_retries, cache_size)
        self._store = store
        self._log = log

    @property
    def store(self) -> Union[AsyncLogStore, LogStore, AsyncStore, Store]:
        """Where the sessions are kept."""
        return self._store

    @asynccontextmanager
    async def open(self, session_id: str) -> AsyncIterator[M]:
        """The async twin of :meth:`Sessions.open`."""
        async with self._block(session_id, redo=True) as memory:
            yield memory

    async def update(self, session_id: str, fn: Callable[[M], Union[_T, Awaitable[_T]]]) -> _T:
        """The async twin of :meth:`Sessions.update`; ``fn`` may be a coroutine function."""
        _check_session_id(session_id)
        if not callable(fn):
            raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")
        retries = 0
        while True:
            try:
                async with self._block(session_id, redo=False) as memory:
                    result = fn(memory)
                    if inspect.isawaitable(result):
                        result = await result
                return cast(_T, result)
            except _Lost as lost:
                retries = self._count_retry(session_id, retries, lost.__cause__)

    @asynccontextmanager
    async def _block(self, session_id: str, redo: bool) -> AsyncIterator[M]:
        _check_session_id(session_id)
        memory, loaded = await self._run(self._checkout(session_id))
        hook = memory.on_evict
        memory.on_evict = None
        try:
            with memory.record() as changes:
                yield memory
                await _settle(memory)
            committed = await self._run(self._commit(session_id, memory, loaded, changes, redo))
        finally:
            memory.on_evict = hook
        if hook is not None:
            for messages in _evicted(committed):
                outcome = hook(list(messages))
                if inspect.isawaitable(outcome):
                    await outcome

    async def get(self, session_id: str) -> Optional[M]:
        """A snapshot of the stored session (``None`` if there is none); changes to it are not saved."""
        return await self._run(self._snapshot(_check_session_id(session_id)))

    async def delete(self, session_id: str) -> bool:
        """Remove the session; ``True`` if there was a live one."""
        self._live.discard(_check_session_id(session_id))
        return await self._log.adelete(session_id)

    async def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        return await self._log.aids(prefix)

    async def purge_expired(self) -> int:
        """Remove the expired sessions from the store now; returns how many went."""
        return await self._log.apurge_expired()

    async def aclose(self) -> None:
        """Drop the live memories this object keeps; like :meth:`Sessions.close`, the store
        given stays open (``async with store:`` closes a store)."""
        self._live.clear()

    async def __aenter__(self) -> AsyncSessions[M]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _run(self, flow: _Flow[_T]) -> _T:
        done, item = _advance(flow, None, None)
        while not done:
            try:
                value, error = await self._perform(item), None
            except Exception as exc:
                value, error = None, exc
            done, item = _advance(flow, value, error)
        return cast(_T, item)

    async def _perform(self, request: _Request) -> Any:
        if isinstance(request, _Load):
            return await self._log.aload(request.session_id, request.since)
        if isinstance(request, _Write):
            return await self._log.awrite(request.session_id, request.change)
        memory = request.memory
        with memory.record() as changes:
            replayed = memory.replay(request.changes)
            if inspect.isawaitable(replayed):
                await replayed
            await _settle(memory)
        return changes


async def _settle(memory: Any) -> None:
    """Wait for the background folds of an async memory (a sync memory has none). A memory that
    folds in the foreground already raised its fold failures inside the block: nothing to do."""
    if getattr(memory, "background", False):
        await memory.flush()

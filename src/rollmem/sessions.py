"""Persistent sessions: one memory per conversation, kept in a store, safe for many writers.

:class:`Sessions` (sync) and :class:`AsyncSessions` (async) open a session as a context manager:
the memory is loaded (or created empty) through the user's factory, which supplies all
configuration; the store keeps a head and a log of messages with their costs (:mod:`rollmem.stores`).
The block's changes, taken from the memory's change record (:mod:`rollmem.changes`), are written
by the pure planner :mod:`rollmem._write_plan` as an *append* (no compare-and-set: appenders never
conflict), a *fold* (compare-and-set on the head's revision) or a *rewrite* (rare changes).

A lost fold of a turn that only added messages is written again on the latest head when its cut
is still valid there, else the turn's messages land as a plain append: such a turn is never
refused because others folded first. Another lost write reloads the latest state into the same
memory and redoes the block's changes (``memory.replay``, after a jittered backoff); an
assignment, a ``restore()`` or an in-place edit of ``buffer`` cannot be redone: ``ConflictError``,
nothing written (:meth:`Sessions.update` re-runs a function instead). ``on_evict`` is held back
and called once per eviction after the write that commits it, never for an uncommitted one.
Each operation is one flow, run with plain calls (:class:`Sessions`) or awaits
(:class:`AsyncSessions`): every decision lives in the shared base.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import operator
import random
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Generic, Optional, Protocol, TypeVar, Union, cast, runtime_checkable

from . import _validate as v
from ._flow import arun, resolved, run
from ._write_plan import Loaded, Plan, PlannedMemory, plan_write, read_summary, rebase_fold
from .changes import Appended, Change, Dropped, Folded
from .counters import counter_identity, trusted_costs
from .errors import ConflictError, InvalidStateError
from .message import STATE_VERSION, Message, _messages_from_json
from .stores import AsyncLogStore, Head, LogEntry, LogStore, LogWrite, StoredLog
from .stores.rules import AsyncTwins, new_head, shown

__all__ = ["AsyncSessions", "Sessions"]


@runtime_checkable
class _SessionMemory(PlannedMemory, Protocol):
    """What a session needs from a memory: every rollmem memory class qualifies (a factory's
    result is checked against this protocol)."""

    @property
    def buffer(self) -> list[Message]: ...

    @buffer.setter
    def buffer(self, messages: Iterable[Message]) -> None: ...

    @property
    def token_counter(self) -> Optional[Callable[[str], int]]: ...

    @property
    def on_evict(self) -> Optional[Callable[[Sequence[Message]], Any]]: ...

    @on_evict.setter
    def on_evict(self, hook: Optional[Callable[[Sequence[Message]], Any]]) -> None: ...

    def record(self) -> contextlib.AbstractContextManager[list[Change]]: ...

    def replay(self, changes: Iterable[Change]) -> Any: ...

    def restore(self, data: Mapping[str, Any], *, costs: Optional[Sequence[int]] = None) -> None: ...

    def to_dict(self) -> dict[str, Any]: ...


M = TypeVar("M", bound=_SessionMemory)
_T = TypeVar("_T")


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
class _Sleep:
    seconds: float


@dataclass(frozen=True)
class _Redo:
    memory: Any
    apply: Callable[[Any], Any]  # replays the block's changes, or runs update's fn again


_Request = Union[_Load, _Write, _Sleep, _Redo]
_Flow = Generator[_Request, Any, _T]
_Rerun = Optional[Callable[[Any], Any]]  # update's fn, run again on the latest state after a lost write


# -- what a block loaded ----------------------------------------------------------------------------


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
    return trusted_costs(counter_identity(memory.token_counter), head.counter, [e.cost for e in entries])


def _restore(memory: _SessionMemory, stored: Optional[StoredLog], session_id: str) -> Loaded:
    """Put the stored state (empty when ``None``) into ``memory``, which is not recording (a load
    is not something the block did); nothing changes on error."""
    if stored is None:
        memory.restore(_EMPTY)
        return Loaded(None, [], ())
    data = {
        "version": STATE_VERSION,
        "summary": read_summary(stored.head.summary),
        "buffer": _messages(session_id, stored.entries, 0),
    }
    try:
        memory.restore(data, costs=_trusted_costs(memory, stored.head, stored.entries))
    except InvalidStateError as exc:
        raise _named(session_id, exc) from exc
    return Loaded(stored.head, [entry.seq for entry in stored.entries], tuple(memory.buffer))


_EMPTY: Mapping[str, Any] = {"version": STATE_VERSION, "summary": "", "buffer": []}


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

    def put_written(
        self,
        session_id: str,
        head: Head,
        before: Optional[Head],
        write: LogWrite,
        seqs: list[int],
        memory: Any,
    ) -> None:
        """Keep ``memory`` live after ``write`` on ``before`` returned ``head``, its entries after
        ``seqs``: only when the store holds exactly this write (not when others wrote in between:
        a driver's resent write returns the latest head)."""
        if head == new_head(before, write, head.incarnation):
            self.put(session_id, head, [*seqs, *range(head.tail - len(write.entries), head.tail)], memory)

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


# -- the rules of a block ---------------------------------------------------------------------------


_SYNC_UPDATE = "Sessions.update calls fn without awaiting it; use AsyncSessions.update"


def _refuse_awaitable(result: object) -> None:
    """Raise ``TypeError`` (inside the block: nothing is written) when ``fn`` returned an
    awaitable; a coroutine is closed first, so it never warns that it was not awaited."""
    if v.unawaited(result):
        raise TypeError(f"fn returned an awaitable ({type(result).__name__}): {_SYNC_UPDATE}")


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
        self, log: Any, factory: Callable[[], M], ttl: Optional[float], max_retries: int, cache_size: int
    ) -> None:
        if not callable(factory):
            raise TypeError(f"factory: expected a callable returning a memory, got {type(factory).__name__}")
        v.check_ttl(ttl)
        v.check_int("max_retries", max_retries, 0)
        v.check_int("cache_size", cache_size, 0)
        self._log = log
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
        """How many writes of this object lost a compare-and-set and were written again, in
        total (redone on the latest state or, for a turn that only added messages, landed as a
        plain append)."""
        return self._retries

    def _count_landed(self) -> None:
        with self._retries_lock:
            self._retries += 1

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
        if not isinstance(memory, _SessionMemory):
            raise TypeError(f"factory must return a rollmem memory, got {type(memory).__name__}")
        if not self._async_memories and inspect.iscoroutinefunction(memory.replay):
            raise TypeError(f"{type(memory).__name__} is an async memory: use AsyncSessions")
        return memory

    def _checkout(self, session_id: str) -> _Flow[tuple[M, Loaded]]:
        live = self._live.take(session_id)
        stored: Optional[StoredLog] = yield _Load(session_id, None if live is None else live.head)
        if live is not None and stored is not None and stored.delta:
            memory = live.memory
            if stored.entries:  # others appended: add their messages (counted at the next add)
                first = len(live.seqs)
                added = _messages(session_id, stored.entries, first)
                memory.buffer = [*memory.buffer, *added]
            seqs = [*live.seqs, *(entry.seq for entry in stored.entries)]
            return memory, Loaded(stored.head, seqs, tuple(memory.buffer))
        if live is not None and stored is not None and stored.head == live.head:
            return live.memory, Loaded(live.head, live.seqs, tuple(live.memory.buffer))  # nothing moved
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
        self, session_id: str, memory: M, loaded: Loaded, changes: Sequence[Change], rerun: _Rerun
    ) -> _Flow[Sequence[Change]]:
        """Write what the block changed; on a conflict land an add-only turn's messages (see
        :meth:`_land`), or reload, redo (or ``rerun`` the block's function) and try again.
        Returns the changes that were committed."""
        retries = 0
        while True:
            identity = counter_identity(memory.token_counter)
            plan = plan_write(session_id, memory, loaded, changes, identity, self._ttl)
            if plan.change is None:
                if loaded.head is not None:
                    self._live.put(session_id, loaded.head, plan.seqs_before_new, memory)
                return changes
            try:
                head: Head = yield _Write(session_id, plan.change)
            except ConflictError as exc:
                if rerun is None and not plan.redoable:
                    raise _refused(session_id) from exc
                if rerun is None and plan.fallback is not None:
                    landed = yield from self._land(session_id, memory, plan, loaded, changes)
                    if landed is not None:
                        self._count_landed()
                        return landed
                retries = self._count_retry(session_id, retries, exc)
                yield _Sleep(_backoff(retries))
            else:
                self._live.put_written(
                    session_id, head, loaded.head, plan.change, plan.seqs_before_new, memory
                )
                return changes
            latest: Optional[StoredLog] = yield _Load(session_id, None)
            loaded = _restore(memory, latest, session_id)
            changes = yield _Redo(memory, rerun or operator.methodcaller("replay", tuple(changes)))

    def _land(
        self, session_id: str, memory: M, plan: Plan, loaded: Loaded, changes: Sequence[Change]
    ) -> _Flow[Optional[Sequence[Change]]]:
        """The fold of an add-only turn lost: write the same fold on the latest head when its
        cut is still valid there (the summarizer's work kept), else the turn's messages as a
        plain append, which never conflicts with other writers (the fold is left to a later
        turn, planned on the latest head). Returns the committed changes, ``None`` when both
        lost (the session was deleted, or rewritten by another counter)."""
        latest: Optional[StoredLog] = yield _Load(session_id, None)
        if latest is None:
            return None
        rebased = rebase_fold(plan, loaded, latest.head, [entry.seq for entry in latest.entries])
        if rebased is not None:
            try:
                yield _Write(session_id, rebased)
            except ConflictError:
                pass
            else:
                return changes
        fallback = plan.fallback
        assert fallback is not None
        # The memory will show what was saved: the latest state (read first, so that state
        # that cannot be read stops the turn before it writes), this turn's messages at the end.
        loaded = _restore(memory, latest, session_id)
        try:
            head: Head = yield _Write(session_id, fallback)
        except ConflictError:
            return None  # the caller reloads and redoes
        appended = [change for change in changes if isinstance(change, Appended)]
        memory.buffer = [*memory.buffer, *(m for change in appended for m in change.messages)]
        self._live.put_written(session_id, head, latest.head, fallback, loaded.seqs, memory)
        return appended


def _backoff(retries: int) -> float:
    """Seconds to wait before redo number ``retries``: jittered exponential backoff ("full
    jitter": uniform below a ceiling that doubles per retry), so writers that keep losing to
    each other spread out."""
    return random.uniform(0.0, min(_BACKOFF_CAP, _BACKOFF_BASE * 2.0 ** (retries - 1)))


_BACKOFF_BASE = 0.002
_BACKOFF_CAP = 0.25


class Sessions(_SessionsBase[M]):
    """Memories kept in a store, one per session id.

    ``store`` is a :class:`~rollmem.stores.LogStore` (every bundled store is one).
    ``factory()`` builds each memory (budget, summarizer, counter, callbacks); the store keeps
    only its state, so a changed factory
    applies to every session on its next open. ``ttl`` (seconds) makes a session expire that
    long after its last write. A write that keeps losing to other writers is redone
    ``max_retries`` times, then raises :class:`~rollmem.errors.ConflictError`. Up to
    ``cache_size`` memories this object saved are kept live and reused while the store still
    holds what was saved (plus what others appended since). Thread-safe.
    """

    _log: LogStore

    def __init__(
        self,
        store: LogStore,
        factory: Callable[[], M],
        *,
        ttl: Optional[float] = None,
        max_retries: int = 10,
        cache_size: int = 128,
    ) -> None:
        if not isinstance(store, LogStore):
            raise v.type_error("store", "a rollmem LogStore", store)
        super().__init__(store, factory, ttl, max_retries, cache_size)
        self._store = store

    @property
    def store(self) -> LogStore:
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
        with self._block(session_id) as memory:
            yield memory

    def update(self, session_id: str, fn: Callable[[M], _T]) -> _T:
        """Run ``fn(memory)`` in an ``open`` block and return its result; when another writer
        wrote first, load the latest state and run ``fn`` again on it (up to ``max_retries``
        times), instead of redoing the first run's changes. Use it for changes that assign
        ``summary`` or ``buffer``: ``fn`` may run more than once and must only change the memory.
        ``fn`` must be a plain function: a coroutine function (or an ``fn`` that returns an
        awaitable) raises ``TypeError`` and nothing is written; use :meth:`AsyncSessions.update`."""
        v.check_session_id(session_id)
        v.check_callable("fn", fn)
        v.check_not_coroutine("fn", fn, _SYNC_UPDATE)
        results: list[_T] = []

        def attempt(memory: M) -> None:
            result = fn(memory)
            _refuse_awaitable(result)
            results.append(result)

        with self._block(session_id, rerun=attempt) as memory:
            attempt(memory)
        return results[-1]

    @contextmanager
    def _block(self, session_id: str, rerun: _Rerun = None) -> Iterator[M]:
        v.check_session_id(session_id)
        memory, loaded = self._run(self._checkout(session_id))
        hook = memory.on_evict
        memory.on_evict = None  # left off a memory whose block fails: it is dropped
        with memory.record() as changes:
            yield memory
        committed = self._run(self._commit(session_id, memory, loaded, changes, rerun))
        memory.on_evict = hook
        if hook is not None:
            for messages in _evicted(committed):
                hook(list(messages))  # a fresh list, as the memory gives its hook

    def get(self, session_id: str) -> Optional[M]:
        """A snapshot of the stored session (``None`` if there is none); changes to it are not saved."""
        return self._run(self._snapshot(v.check_session_id(session_id)))

    def delete(self, session_id: str) -> bool:
        """Remove the session; ``True`` if there was a live one. A block that loaded it before
        can no longer write to the session (nor to a new one under the same id)."""
        self._live.discard(v.check_session_id(session_id))
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
        return run(flow, self._perform)

    def _perform(self, request: _Request) -> Any:
        if isinstance(request, _Load):
            return self._log.load(request.session_id, request.since)
        if isinstance(request, _Write):
            return self._log.write(request.session_id, request.change)
        if isinstance(request, _Sleep):
            return time.sleep(request.seconds)
        with request.memory.record() as changes:
            request.apply(request.memory)
        return changes


class _ThreadedLog(AsyncTwins):
    """A blocking :class:`LogStore` seen as an :class:`AsyncLogStore`: each call in a worker thread."""

    def __init__(self, store: LogStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:  # load, write, delete, ids, purge_expired
        return getattr(self._store, name)

    def close(self) -> None:
        self._store.close()


def _async_log(store: object) -> AsyncLogStore:
    """Any rollmem store as an :class:`AsyncLogStore` (also used by the integrations)."""
    if isinstance(store, AsyncLogStore):
        return store
    if isinstance(store, LogStore):
        return _ThreadedLog(store)
    raise v.type_error("store", "a rollmem AsyncLogStore or LogStore", store)


class AsyncSessions(_SessionsBase[M]):
    """:class:`Sessions` for async code: ``async with sessions.open(id) as mem``.

    Takes an :class:`~rollmem.stores.AsyncLogStore`, or a blocking
    :class:`~rollmem.stores.LogStore` (called from worker threads, never on the event loop). Memories may
    be async (:class:`~rollmem.AsyncRollingMemory`, :class:`~rollmem.AsyncSummaryMemory`) or
    sync. Before a write, the folds an async memory runs in the background are awaited, so
    the write includes them; a failure of one is raised and nothing is written. ``on_evict``
    may be a coroutine function; it is awaited after the write.
    """

    _async_memories = True
    _log: AsyncLogStore

    def __init__(
        self,
        store: Union[AsyncLogStore, LogStore],
        factory: Callable[[], M],
        *,
        ttl: Optional[float] = None,
        max_retries: int = 10,
        cache_size: int = 128,
    ) -> None:
        super().__init__(_async_log(store), factory, ttl, max_retries, cache_size)
        self._store = store

    @property
    def store(self) -> Union[AsyncLogStore, LogStore]:
        """Where the sessions are kept."""
        return self._store

    @asynccontextmanager
    async def open(self, session_id: str) -> AsyncIterator[M]:
        """The async twin of :meth:`Sessions.open`."""
        async with self._block(session_id) as memory:
            yield memory

    async def update(self, session_id: str, fn: Callable[[M], Union[_T, Awaitable[_T]]]) -> _T:
        """The async twin of :meth:`Sessions.update`; ``fn`` may be a coroutine function."""
        v.check_session_id(session_id)
        v.check_callable("fn", fn)
        results: list[_T] = []

        async def attempt(memory: M) -> None:
            result = fn(memory)
            results.append(await resolved(result))

        async with self._block(session_id, rerun=attempt) as memory:
            await attempt(memory)
        return results[-1]

    @asynccontextmanager
    async def _block(self, session_id: str, rerun: _Rerun = None) -> AsyncIterator[M]:
        v.check_session_id(session_id)
        memory, loaded = await self._run(self._checkout(session_id))
        hook = memory.on_evict
        # Left off a memory whose block fails (it is dropped): a background fold still running
        # in it calls no hook for an eviction that is never saved.
        memory.on_evict = None
        with memory.record() as changes:
            yield memory
            await _settle(memory)
        cancelled: Optional[BaseException] = None
        try:
            committed = await self._run(self._commit(session_id, memory, loaded, changes, rerun))
        except _CommittedThenCancelled as late:
            committed, cancelled = late.committed, late.cancel
        memory.on_evict = hook
        if hook is not None:
            for messages in _evicted(committed):
                await resolved(hook(list(messages)))
        if cancelled is not None:
            raise cancelled

    async def get(self, session_id: str) -> Optional[M]:
        """A snapshot of the stored session (``None`` if there is none); changes to it are not saved."""
        return await self._run(self._snapshot(v.check_session_id(session_id)))

    async def delete(self, session_id: str) -> bool:
        """Remove the session; ``True`` if there was a live one."""
        self._live.discard(v.check_session_id(session_id))
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
        """Run ``flow``; when the task was cancelled while a write was in flight and that write
        committed, the flow goes on with its head and ends (a later request raises the
        cancellation into it), then :class:`_CommittedThenCancelled` carries what it committed."""
        cancelled: list[BaseException] = []
        value = await arun(flow, functools.partial(self._perform, cancelled))
        if cancelled:
            raise _CommittedThenCancelled(cast("Sequence[Change]", value), cancelled[0])
        return value

    async def _perform(self, cancelled: list[BaseException], request: _Request) -> Any:
        if cancelled:
            raise cancelled[0]
        if isinstance(request, _Load):
            return await self._log.aload(request.session_id, request.since)
        if isinstance(request, _Write):
            return await _shielded_write(self._log, request, cancelled)
        if isinstance(request, _Sleep):
            return await asyncio.sleep(request.seconds)
        memory = request.memory
        with memory.record() as changes:
            await resolved(request.apply(memory))
            await _settle(memory)
        return changes


class _CommittedThenCancelled(BaseException):
    """A block's flow committed these changes, then the task was cancelled: hooks, then cancel."""

    def __init__(self, committed: Sequence[Change], cancel: BaseException) -> None:
        super().__init__(committed)
        self.committed = committed
        self.cancel = cancel


async def _shielded_write(log: AsyncLogStore, request: _Write, cancelled: list[BaseException]) -> Head:
    """``awrite`` shielded from cancellation: a cancelled task first learns how its write ended
    (a thread-backed store's write goes on anyway, a server may have applied it), so a committed
    eviction still reaches ``on_evict`` (the write's head is returned and the cancellation kept
    in ``cancelled``) and an uncommitted one never does (the cancellation is raised)."""
    write = asyncio.ensure_future(log.awrite(request.session_id, request.change))
    try:
        return await asyncio.shield(write)
    except asyncio.CancelledError as cancel:
        try:
            head = await write
        except Exception:
            raise cancel from None
        cancelled.append(cancel)
        return head


async def _settle(memory: Any) -> None:
    """Wait for the background folds of an async memory (a sync memory has none). A memory that
    folds in the foreground already raised its fold failures inside the block: nothing to do."""
    if getattr(memory, "background", False):
        await memory.flush()

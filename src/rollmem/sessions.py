"""Persistent sessions: one memory per conversation, kept in a store, safe for many writers.

:class:`Sessions` (sync code) and :class:`AsyncSessions` (async code) open a session as a
context manager: the memory is loaded (or created empty) through the user's factory, which
supplies all configuration; the store keeps only the state (``to_dict()`` as JSON text).
When the block exits without an exception the state is saved with a compare-and-set on the
session's revision. If another writer saved first, the latest state is loaded into the same
memory object and what the block did (the memory's recorded changes, :mod:`rollmem.changes`:
adds, folds, clears, pins, assignments) is replayed on it with ``memory.replay``, then the save
is tried again. Sessions use only the memory's public API.

Both twins run one *flow* per operation: a generator that yields store requests and replays,
and receives their results. :class:`Sessions` performs them with plain calls,
:class:`AsyncSessions` with awaits; every decision lives in the shared base.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Generator, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Generic, Optional, Protocol, TypeVar, Union, cast

from . import _validate as v
from .changes import Change
from .errors import ConflictError, InvalidStateError
from .message import Message
from .stores._protocol import AsyncStore, Store, StoredSession

__all__ = ["AsyncSessions", "Sessions"]


class _SessionMemory(Protocol):
    """What a session needs from a memory (its public API): every rollmem memory class qualifies."""

    @property
    def recording(self) -> bool: ...

    def start_recording(self) -> None: ...

    def stop_recording(self) -> tuple[Change, ...]: ...

    def replay(self, changes: Iterable[Change]) -> Any: ...

    @property
    def summary(self) -> str: ...

    @summary.setter
    def summary(self, value: str) -> None: ...

    @property
    def buffer(self) -> list[Message]: ...

    @buffer.setter
    def buffer(self, messages: Iterable[Message]) -> None: ...

    def to_dict(self) -> dict[str, Any]: ...

    def restore(self, data: Mapping[str, Any]) -> None: ...


M = TypeVar("M", bound=_SessionMemory)
_T = TypeVar("_T")


# -- requests a flow yields to its driver ---------------------------------------------------------


@dataclass(frozen=True)
class _Load:
    session_id: str


@dataclass(frozen=True)
class _Save:
    session_id: str
    state: str
    expected_revision: int
    ttl: Optional[float]


@dataclass(frozen=True)
class _Replay:
    memory: Any
    entries: tuple[Change, ...]


_Request = Union[_Load, _Save, _Replay]
_Flow = Generator[_Request, Any, _T]


def _advance(flow: _Flow[Any], value: Any, error: Optional[Exception]) -> tuple[bool, Any]:
    """Send ``value`` (or throw ``error``) into ``flow``: ``(False, request)`` or ``(True, result)``."""
    try:
        return False, (flow.send(value) if error is None else flow.throw(error))
    except StopIteration as stop:
        return True, stop.value


# -- state text -------------------------------------------------------------------------------------


def _named(session_id: str, error: InvalidStateError) -> InvalidStateError:
    """The same error (same class and ``path``) with a message that starts with the session id."""
    named = type(error)(error.path, error.problem)
    named.args = (f"session {session_id!r}: {error}",)
    return named


_EMPTY: Mapping[str, Any] = {"version": 2, "summary": "", "buffer": []}


def _parse(session_id: str, text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise _named(session_id, InvalidStateError("", "stored state is nested too deeply")) from exc
    except ValueError as exc:
        raise _named(session_id, InvalidStateError("", f"stored state is not valid JSON: {exc}")) from exc


def _dump(session_id: str, memory: _SessionMemory) -> str:
    try:
        return json.dumps(memory.to_dict(), ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"session {session_id!r}: state cannot be saved as JSON: {exc}") from exc


def _restore(memory: _SessionMemory, stored: Optional[StoredSession], session_id: str) -> None:
    """Put the stored state (empty when ``None``) into ``memory``, which is not recording (a load
    is not something the block did); nothing changes on error."""
    data = _EMPTY if stored is None else _parse(session_id, stored.state)
    try:
        memory.restore(data)
    except InvalidStateError as exc:
        raise _named(session_id, exc) from exc


# -- the live memories this process saved ----------------------------------------------------------


@dataclass(frozen=True)
class _Live:
    revision: int
    state: str
    memory: Any
    summary: str
    buffer: tuple[Message, ...]


class _LiveCache:
    """A thread-safe LRU of memories this process saved, keyed by session id."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[str, _Live] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, session_id: str, stored: Optional[StoredSession]) -> Optional[Any]:
        """Remove the entry and return its memory if the store still holds exactly what this
        process saved and the memory was not changed since."""
        with self._lock:
            live = self._entries.pop(session_id, None)
        if live is None or stored is None:
            return None
        memory = live.memory
        if (
            live.revision == stored.revision
            and live.state == stored.state
            and not memory.recording
            and memory.summary == live.summary
            and tuple(memory.buffer) == live.buffer
        ):
            return memory
        return None

    def put(self, session_id: str, revision: int, state: str, memory: _SessionMemory) -> None:
        if self._size == 0:
            return
        live = _Live(revision, state, memory, memory.summary, tuple(memory.buffer))
        with self._lock:
            self._entries[session_id] = live
            self._entries.move_to_end(session_id)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def discard(self, session_id: str) -> None:
        with self._lock:
            self._entries.pop(session_id, None)


# -- validation -------------------------------------------------------------------------------------


def _check_session_id(session_id: object) -> str:
    return v.check_text(v.check_str("session_id", session_id, allow_empty=False), "session_id")


@dataclass(frozen=True)
class _Options:
    """The settings of a sessions object, validated once, together."""

    ttl: Optional[float]
    max_retries: int
    cache_size: int

    def __post_init__(self) -> None:
        v.check_ttl(self.ttl)
        v.check_int("max_retries", self.max_retries, 0)
        v.check_int("cache_size", self.cache_size, 0)


# -- the shared logic -------------------------------------------------------------------------------


class _SessionsBase(Generic[M]):
    _takes_async_memories = False

    def __init__(
        self,
        factory: Callable[[], M],
        ttl: Optional[float],
        max_retries: int,
        cache_size: int,
    ) -> None:
        if not callable(factory):
            raise TypeError(f"factory: expected a callable returning a memory, got {type(factory).__name__}")
        self._options = options = _Options(ttl, max_retries, cache_size)
        self._factory = factory
        self._live = _LiveCache(options.cache_size)
        self._retries = 0
        self._retries_lock = threading.Lock()

    @property
    def factory(self) -> Callable[[], M]:
        """Builds every memory this object loads: the configuration of every session."""
        return self._factory

    @property
    def ttl(self) -> Optional[float]:
        """Seconds after its last save that a session expires (``None``: never)."""
        return self._options.ttl

    @property
    def max_retries(self) -> int:
        """How many times a save that lost a compare-and-set is replayed before ``ConflictError``."""
        return self._options.max_retries

    @property
    def retries(self) -> int:
        """How many saves of this object lost a compare-and-set and were replayed, in total."""
        return self._retries

    def _new_memory(self) -> M:
        memory = self._factory()
        needed = ("start_recording", "stop_recording", "replay", "to_dict", "restore", "summary", "buffer")
        if not all(hasattr(memory, name) for name in needed):
            raise TypeError(f"factory must return a rollmem memory, got {type(memory).__name__}")
        if not self._takes_async_memories and inspect.iscoroutinefunction(memory.replay):
            raise TypeError(f"{type(memory).__name__} is an async memory: use AsyncSessions")
        return memory

    def _build(self, session_id: str, stored: Optional[StoredSession]) -> M:
        memory = self._new_memory()
        _restore(memory, stored, session_id)
        return memory

    def _checkout(self, session_id: str) -> _Flow[tuple[M, Optional[StoredSession]]]:
        stored: Optional[StoredSession] = yield _Load(session_id)
        memory = self._live.take(session_id, stored)
        if memory is None:
            memory = self._build(session_id, stored)
        memory.start_recording()
        return memory, stored

    def _snapshot(self, session_id: str) -> _Flow[Optional[M]]:
        stored: Optional[StoredSession] = yield _Load(session_id)
        return None if stored is None else self._build(session_id, stored)

    def _commit(self, session_id: str, memory: M, loaded: Optional[StoredSession]) -> _Flow[None]:
        """Save what the block left in ``memory``; on a conflict reload, replay, try again."""
        entries = memory.stop_recording()
        revision = 0 if loaded is None else loaded.revision
        state = _dump(session_id, memory)
        if loaded is not None and state == loaded.state:  # nothing changed: no write
            self._live.put(session_id, revision, state, memory)
            return
        retries = 0
        while True:
            try:
                revision = yield _Save(session_id, state, revision, self._options.ttl)
            except ConflictError as exc:
                if retries >= self._options.max_retries:
                    raise ConflictError(
                        f"session {session_id!r}: not saved after {retries} retries; "
                        "other writers kept saving first"
                    ) from exc
            else:
                self._live.put(session_id, revision, state, memory)
                return
            retries += 1
            with self._retries_lock:
                self._retries += 1
            latest: Optional[StoredSession] = yield _Load(session_id)
            _restore(memory, latest, session_id)
            revision = 0 if latest is None else latest.revision
            yield _Replay(memory, entries)
            state = _dump(session_id, memory)


class Sessions(_SessionsBase[M]):
    """Memories kept in a :class:`~rollmem.stores.Store`, one per session id.

    ``factory()`` builds each memory (budget, summarizer, counter, callbacks); the store keeps
    only its state, so a changed factory applies to every session on its next open. ``ttl``
    (seconds) makes a session expire that long after its last save. A save that keeps losing
    to other writers is replayed ``max_retries`` times, then raises
    :class:`~rollmem.errors.ConflictError`. Up to ``cache_size`` memories this object saved
    are kept live and reused while the store still holds what was saved. Thread-safe.
    """

    def __init__(
        self,
        store: Store,
        factory: Callable[[], M],
        *,
        ttl: Optional[float] = None,
        max_retries: int = 10,
        cache_size: int = 128,
    ) -> None:
        if not isinstance(store, Store):
            raise TypeError(f"store: expected a rollmem Store, got {type(store).__name__}")
        super().__init__(factory, ttl, max_retries, cache_size)
        self._store = store

    @property
    def store(self) -> Store:
        """Where the sessions are kept."""
        return self._store

    @contextmanager
    def open(self, session_id: str) -> Iterator[M]:
        """Load the session (an empty memory when there is none) for the ``with`` block.

        When the block exits without an exception the memory is saved atomically; if another
        writer saved in between, the latest state is loaded into the same memory and the
        block's changes made through the memory's methods or attribute assignments are
        replayed on it. An exception in the block saves nothing. Use the memory inside the
        block only. Raises ``InvalidStateError`` naming the session for unreadable state,
        ``ConflictError`` after ``max_retries`` lost saves, ``StoreUnavailableError`` from the store.
        """
        _check_session_id(session_id)
        memory, loaded = self._run(self._checkout(session_id))
        try:
            yield memory
        except BaseException:
            memory.stop_recording()
            raise
        self._run(self._commit(session_id, memory, loaded))

    def get(self, session_id: str) -> Optional[M]:
        """A snapshot of the stored session (``None`` if there is none); changes to it are not saved."""
        return self._run(self._snapshot(_check_session_id(session_id)))

    def delete(self, session_id: str) -> bool:
        """Remove the session; ``True`` if there was a live one."""
        self._live.discard(_check_session_id(session_id))
        return self._store.delete(session_id)

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        return self._store.ids(prefix)

    def purge_expired(self) -> int:
        """Remove the expired sessions from the store now; returns how many went."""
        return self._store.purge_expired()

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
            return self._store.load(request.session_id)
        if isinstance(request, _Save):
            return self._store.save(
                request.session_id, request.state, request.expected_revision, ttl=request.ttl
            )
        request.memory.replay(request.entries)
        return None


class _ThreadedStore:
    """A blocking :class:`Store` seen as an :class:`AsyncStore`: each call runs in a worker thread."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def aload(self, session_id: str) -> Optional[StoredSession]:
        return await asyncio.to_thread(self._store.load, session_id)

    async def asave(
        self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None
    ) -> int:
        return await asyncio.to_thread(self._store.save, session_id, state, expected_revision, ttl)

    async def adelete(self, session_id: str) -> bool:
        return await asyncio.to_thread(self._store.delete, session_id)

    async def aids(self, prefix: str = "") -> list[str]:
        return await asyncio.to_thread(self._store.ids, prefix)

    async def apurge_expired(self) -> int:
        return await asyncio.to_thread(self._store.purge_expired)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._store.close)


class AsyncSessions(_SessionsBase[M]):
    """:class:`Sessions` for async code: ``async with sessions.open(id) as mem``.

    Takes an :class:`~rollmem.stores.AsyncStore` (a store with only blocking methods is called
    from worker threads, never on the event loop). Memories may be async
    (:class:`~rollmem.AsyncRollingMemory`, :class:`~rollmem.AsyncSummaryMemory`) or sync. Before
    a save, the folds an async memory runs in the background are awaited, so the saved state
    includes them; a failure of one is raised and nothing is saved.
    """

    _takes_async_memories = True

    def __init__(
        self,
        store: Union[AsyncStore, Store],
        factory: Callable[[], M],
        *,
        ttl: Optional[float] = None,
        max_retries: int = 10,
        cache_size: int = 128,
    ) -> None:
        if isinstance(store, AsyncStore):
            astore: AsyncStore = store
        elif isinstance(store, Store):
            astore = _ThreadedStore(store)
        else:
            raise TypeError(f"store: expected a rollmem AsyncStore or Store, got {type(store).__name__}")
        super().__init__(factory, ttl, max_retries, cache_size)
        self._store = store
        self._astore = astore

    @property
    def store(self) -> Union[AsyncStore, Store]:
        """Where the sessions are kept."""
        return self._store

    @asynccontextmanager
    async def open(self, session_id: str) -> AsyncIterator[M]:
        """The async twin of :meth:`Sessions.open`."""
        _check_session_id(session_id)
        memory, loaded = await self._run(self._checkout(session_id))
        try:
            yield memory
            await _settle(memory)
        except BaseException:
            memory.stop_recording()
            raise
        await self._run(self._commit(session_id, memory, loaded))

    async def get(self, session_id: str) -> Optional[M]:
        """A snapshot of the stored session (``None`` if there is none); changes to it are not saved."""
        return await self._run(self._snapshot(_check_session_id(session_id)))

    async def delete(self, session_id: str) -> bool:
        """Remove the session; ``True`` if there was a live one."""
        self._live.discard(_check_session_id(session_id))
        return await self._astore.adelete(session_id)

    async def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        return await self._astore.aids(prefix)

    async def purge_expired(self) -> int:
        """Remove the expired sessions from the store now; returns how many went."""
        return await self._astore.apurge_expired()

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
            return await self._astore.aload(request.session_id)
        if isinstance(request, _Save):
            return await self._astore.asave(
                request.session_id, request.state, request.expected_revision, ttl=request.ttl
            )
        memory = request.memory
        replayed = memory.replay(request.entries)
        if inspect.isawaitable(replayed):
            await replayed
        await _settle(memory)
        return None


async def _settle(memory: Any) -> None:
    """Wait for the background folds of an async memory (a sync memory has none). A memory that
    folds in the foreground already raised its fold failures inside the block: nothing to do."""
    if getattr(memory, "background", False):
        await memory.flush()

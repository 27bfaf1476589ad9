"""A whole-state :class:`~rollmem.stores.Store` seen as a :class:`~rollmem.stores.LogStore`.

The log is kept inside the one JSON state a whole-state store saves: the memory's ``to_dict()``
(``version``, ``summary``, ``buffer``), which any rollmem release can read, plus a ``"log"``
object with the incarnation, revision, tail, counter identity, and each message's sequence
number and cost. A state saved without ``"log"`` (by an older release) reads as incarnation
``"legacy"`` with unknown costs (a session created through this adapter gets a new, random
incarnation, so a delete still ends every writer's claim on it). Every write
loads the state, applies the change with the log rules and saves with the store's
compare-and-set, retrying when only the whole-state revision moved: correct, but each write
costs the whole state.

The load and the write are written once, as generator flows that yield the store calls they
need (``_Load``, ``_Save``) and receive their results (a lost save's ``ConflictError`` is thrown
back in); :class:`WholeStateLog` runs them on a blocking store, :class:`AsyncWholeStateLog` on an
asynchronous one (or a blocking one in worker threads). Each call object has both the blocking
and the asynchronous form of the call.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Generator
from typing import Any, NamedTuple, Optional, TypeVar, Union, cast

from .._threads import in_thread
from ..errors import ConflictError
from ._legacy import read_state, write_whole
from ._protocol import AsyncStore, Head, LogEntry, LogWrite, Store, StoredLog, StoredSession
from .rules import Closing, check_load, check_write, shown

__all__ = ["AsyncWholeStateLog", "WholeStateLog"]

_RETRIES = 100  # saves lost to writers whose changes still allowed ours, before giving up
_T = TypeVar("_T")


# -- the store calls, each in both forms ----------------------------------------------------------


class _Load(NamedTuple):
    session_id: str

    def run(self, store: Store) -> Optional[StoredSession]:
        return store.load(self.session_id)

    def arun(self, store: AsyncStore) -> Awaitable[Optional[StoredSession]]:
        return store.aload(self.session_id)


class _Save(NamedTuple):
    session_id: str
    state: str
    revision: int
    ttl: Optional[float]

    def run(self, store: Store) -> int:
        return store.save(self.session_id, self.state, self.revision, self.ttl)

    def arun(self, store: AsyncStore) -> Awaitable[int]:
        return store.asave(self.session_id, self.state, self.revision, self.ttl)


class _Delete(NamedTuple):
    session_id: str

    def run(self, store: Store) -> bool:
        return store.delete(self.session_id)

    def arun(self, store: AsyncStore) -> Awaitable[bool]:
        return store.adelete(self.session_id)


class _Ids(NamedTuple):
    prefix: str

    def run(self, store: Store) -> list[str]:
        return store.ids(self.prefix)

    def arun(self, store: AsyncStore) -> Awaitable[list[str]]:
        return store.aids(self.prefix)


class _Purge(NamedTuple):
    def run(self, store: Store) -> int:
        return store.purge_expired()

    def arun(self, store: AsyncStore) -> Awaitable[int]:
        return store.apurge_expired()


class _Close(NamedTuple):
    def run(self, store: Store) -> None:
        store.close()

    def arun(self, store: AsyncStore) -> Awaitable[None]:
        return store.aclose()


_Call = Union[_Load, _Save, _Delete, _Ids, _Purge, _Close]
# A load or a write: yields store calls, receives their results (a save's ConflictError thrown in).
_Flow = Generator[_Call, Any, _T]


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def encode(head: Head, entries: list[LogEntry]) -> str:
    """The whole state holding ``head`` and ``entries``."""
    log = {
        "incarnation": head.incarnation,
        "revision": head.revision,
        "tail": head.tail,
        "counter": head.counter,
        "seqs": [entry.seq for entry in entries],
        "costs": [entry.cost for entry in entries],
    }
    buffer = ",".join(entry.message for entry in entries)
    return f'{{"version":2,"summary":{_dump(head.summary)},"buffer":[{buffer}],"log":{_dump(log)}}}'


def _step(session_id: str, stored: Optional[StoredSession], change: LogWrite) -> tuple[str, int, Head]:
    head, entries = (None, []) if stored is None else read_state(session_id, stored.state)
    updated, kept = write_whole(session_id, head, entries, change)
    return encode(updated, kept), 0 if stored is None else stored.revision, updated


def _loaded(session_id: str, stored: Optional[StoredSession]) -> Optional[StoredLog]:
    if stored is None:
        return None
    head, entries = read_state(session_id, stored.state)
    return StoredLog(head, tuple(entries))


def _gave_up(session_id: str) -> ConflictError:
    return ConflictError(f"session {shown(session_id)}: not saved after {_RETRIES} lost saves")


def _load_flow(session_id: str, since: Optional[Head]) -> _Flow[Optional[StoredLog]]:
    check_load(session_id, since)
    return _loaded(session_id, (yield _Load(session_id)))


def _write_flow(session_id: str, change: LogWrite) -> _Flow[Head]:
    check_write(session_id, change)
    last: Optional[ConflictError] = None
    for _ in range(_RETRIES):
        text, revision, head = _step(session_id, (yield _Load(session_id)), change)
        try:
            yield _Save(session_id, text, revision, change.ttl)
        except ConflictError as exc:
            last = exc
            continue
        return head
    raise _gave_up(session_id) from last


def _advance(flow: _Flow[_T], result: Any, error: Optional[ConflictError]) -> tuple[bool, Any]:
    """Send ``result`` (or throw ``error``) into ``flow``: ``(False, call)`` or ``(True, its result)``."""
    try:
        return False, (flow.send(result) if error is None else flow.throw(error))
    except StopIteration as stop:
        return True, stop.value


class WholeStateLog(Closing):
    """A :class:`~rollmem.stores.Store` (whole state, compare-and-set saves) as a
    :class:`~rollmem.stores.LogStore`; :class:`~rollmem.sessions.Sessions` wraps such stores in it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        """The whole-state store underneath."""

    def __repr__(self) -> str:
        return f"WholeStateLog({self.store!r})"

    def _run(self, flow: _Flow[_T]) -> _T:
        done, item = _advance(flow, None, None)
        while not done:
            try:
                result, error = item.run(self.store), None
            except ConflictError as exc:
                result, error = None, exc
            done, item = _advance(flow, result, error)
        return cast(_T, item)

    def load(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """The live session (``since`` is ignored: the whole state is read anyway)."""
        return self._run(_load_flow(session_id, since))

    def write(self, session_id: str, change: LogWrite) -> Head:
        """Load, apply ``change`` by the log rules, save with compare-and-set; retried while only
        the whole-state revision moved."""
        return self._run(_write_flow(session_id, change))

    def delete(self, session_id: str) -> bool:
        """Remove the session; ``True`` if a live one was there."""
        return self.store.delete(session_id)

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        return self.store.ids(prefix)

    def purge_expired(self) -> int:
        """Remove expired sessions now and return how many went."""
        return self.store.purge_expired()

    def close(self) -> None:
        """Close the store underneath."""
        self.store.close()


class AsyncWholeStateLog(Closing):
    """:class:`WholeStateLog` for an :class:`~rollmem.stores.AsyncStore` (or a blocking
    :class:`~rollmem.stores.Store`, called from worker threads)."""

    def __init__(self, store: Union[AsyncStore, Store]) -> None:
        self.store = store
        """The whole-state store underneath."""

    async def _call(self, call: _Call) -> Any:
        store = self.store
        if isinstance(store, AsyncStore):
            return await call.arun(store)
        return await in_thread(call.run, store)

    async def _run(self, flow: _Flow[_T]) -> _T:
        done, item = _advance(flow, None, None)
        while not done:
            try:
                result, error = await self._call(item), None
            except ConflictError as exc:
                result, error = None, exc
            done, item = _advance(flow, result, error)
        return cast(_T, item)

    async def aload(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """Async twin of :meth:`WholeStateLog.load`."""
        return await self._run(_load_flow(session_id, since))

    async def awrite(self, session_id: str, change: LogWrite) -> Head:
        """Async twin of :meth:`WholeStateLog.write`."""
        return await self._run(_write_flow(session_id, change))

    async def adelete(self, session_id: str) -> bool:
        """Async twin of :meth:`WholeStateLog.delete`."""
        return bool(await self._call(_Delete(session_id)))

    async def aids(self, prefix: str = "") -> list[str]:
        """Async twin of :meth:`WholeStateLog.ids`."""
        return list(await self._call(_Ids(prefix)))

    async def apurge_expired(self) -> int:
        """Async twin of :meth:`WholeStateLog.purge_expired`."""
        return int(await self._call(_Purge()))

    async def aclose(self) -> None:
        """Async twin of :meth:`WholeStateLog.close`."""
        await self._call(_Close())

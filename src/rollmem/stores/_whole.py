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
"""

from __future__ import annotations

import json
from typing import Any, Optional, Union

from .._threads import in_thread
from ..errors import ConflictError
from ._legacy import read_state, write_whole
from ._protocol import AsyncStore, Head, LogEntry, LogWrite, Store, StoredLog, StoredSession
from .rules import Closing, check_load, check_write, shown

__all__ = ["AsyncWholeStateLog", "WholeStateLog"]

_RETRIES = 100  # saves lost to writers whose changes still allowed ours, before giving up


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


class WholeStateLog(Closing):
    """A :class:`~rollmem.stores.Store` (whole state, compare-and-set saves) as a
    :class:`~rollmem.stores.LogStore`; :class:`~rollmem.sessions.Sessions` wraps such stores in it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        """The whole-state store underneath."""

    def __repr__(self) -> str:
        return f"WholeStateLog({self.store!r})"

    def load(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """The live session (``since`` is ignored: the whole state is read anyway)."""
        check_load(session_id, since)
        return _loaded(session_id, self.store.load(session_id))

    def write(self, session_id: str, change: LogWrite) -> Head:
        """Load, apply ``change`` by the log rules, save with compare-and-set; retried while only
        the whole-state revision moved."""
        check_write(session_id, change)
        last: Optional[ConflictError] = None
        for _ in range(_RETRIES):
            text, revision, head = _step(session_id, self.store.load(session_id), change)
            try:
                self.store.save(session_id, text, revision, change.ttl)
            except ConflictError as exc:
                last = exc
                continue
            return head
        raise _gave_up(session_id) from last

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

    def _call(self, name: str, *args: Any) -> Any:
        if isinstance(self.store, AsyncStore):
            return getattr(self.store, "a" + name)(*args)
        return in_thread(getattr(self.store, name), *args)

    async def aload(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """Async twin of :meth:`WholeStateLog.load`."""
        check_load(session_id, since)
        return _loaded(session_id, await self._call("load", session_id))

    async def awrite(self, session_id: str, change: LogWrite) -> Head:
        """Async twin of :meth:`WholeStateLog.write`."""
        check_write(session_id, change)
        last: Optional[ConflictError] = None
        for _ in range(_RETRIES):
            text, revision, head = _step(session_id, await self._call("load", session_id), change)
            try:
                await self._call("save", session_id, text, revision, change.ttl)
            except ConflictError as exc:
                last = exc
                continue
            return head
        raise _gave_up(session_id) from last

    async def adelete(self, session_id: str) -> bool:
        """Async twin of :meth:`WholeStateLog.delete`."""
        return bool(await self._call("delete", session_id))

    async def aids(self, prefix: str = "") -> list[str]:
        """Async twin of :meth:`WholeStateLog.ids`."""
        return list(await self._call("ids", prefix))

    async def apurge_expired(self) -> int:
        """Async twin of :meth:`WholeStateLog.purge_expired`."""
        return int(await self._call("purge_expired"))

    async def aclose(self) -> None:
        """Async twin of :meth:`WholeStateLog.close`."""
        await self._call("close")

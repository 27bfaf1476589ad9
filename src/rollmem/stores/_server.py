"""What the server stores (Redis, PostgreSQL) share: their public methods, written once over the
flows of their operations (:class:`FlowStore`), and an asyncio client or pool bound to the event
loop that opened it (:class:`LoopBound`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator
from contextlib import suppress
from typing import Any, Callable, Generic, Optional, TypeVar

from .._flow import in_thread
from . import rules
from ._protocol import Head, LogWrite, StoredLog

__all__ = ["FlowStore", "LoopBound"]

_R = TypeVar("_R")
_T = TypeVar("_T")
_Flow = Generator[Any, Any, _T]


class LoopBound(Generic[_R]):
    """``resource``, opened on the running loop, with the coroutine function that closes it.

    It is closed by :meth:`aclose` on that loop, by :meth:`close` from blocking code, or when the
    loop cancels its tasks as it ends (``asyncio.run`` does), whichever comes first: a watcher
    task waits for one of them. So a forgotten ``aclose()`` neither leaks the resource nor hangs
    the end of the loop (a pool's workers, which may swallow that cancellation, are stopped
    while the loop still waits for them). A loop closed without cancelling its tasks reports the
    watcher ("Task was destroyed but it is pending"). Make one with ``await LoopBound.open(...)``.
    """

    def __init__(self, resource: _R, closer: Callable[[_R], Awaitable[None]]) -> None:
        self.resource = resource
        self.loop = asyncio.get_running_loop()
        self.closed = False
        """True once closing was asked for: the resource must not be used any more."""
        self._closer = closer
        self._watcher = self.loop.create_task(self._watch())

    @classmethod
    async def open(cls, resource: _R, closer: Callable[[_R], Awaitable[None]]) -> LoopBound[_R]:
        """Watch ``resource`` from now on (the watcher has started when this returns)."""
        bound = cls(resource, closer)
        await asyncio.sleep(0)  # the watcher's first step: from now on a cancellation reaches it
        return bound

    async def _watch(self) -> None:
        with suppress(asyncio.CancelledError):
            await self.loop.create_future()  # until cancelled
        self.closed = True
        await self._closer(self.resource)

    def _ask(self) -> None:
        """Have the watcher close the resource (once: a second cancellation would cut it short)."""
        if not self.closed and not self.loop.is_closed():
            self.closed = True
            self.loop.call_soon_threadsafe(self._watcher.cancel)

    async def aclose(self) -> None:
        """Close the resource and wait until it is closed (called on another loop: as :meth:`close`)."""
        self._ask()
        if asyncio.get_running_loop() is not self.loop:
            self.close()
        elif not self._watcher.done():
            await asyncio.shield(self._watcher)

    def close(self) -> None:
        """Close the resource from blocking code: at once when its loop is idle and no other loop
        runs in this thread, else as soon as its loop runs; nothing once the loop is closed (it
        closed the resource as it ended)."""
        self._ask()
        loop = self.loop
        if self._watcher.done() or loop.is_closed() or loop.is_running():
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop runs in this thread: run this one until it is closed
            loop.run_until_complete(self._watcher)


class FlowStore(rules.Closing):
    """The :class:`~rollmem.stores.LogStore` and :class:`~rollmem.stores.AsyncLogStore` methods of
    a store whose every operation is a flow (:mod:`rollmem._flow`): each checks its arguments
    (:mod:`rollmem.stores.rules`, before anything reaches the server), then runs the operation's
    flow with the store's :meth:`_run` (blocking) or :meth:`_arun` (asyncio); ``action`` names the
    operation in errors."""

    _load_flow: Callable[[str, Optional[Head]], _Flow[Optional[StoredLog]]]
    _write_flow: Callable[[str, LogWrite], _Flow[Head]]
    _delete_flow: Callable[[str], _Flow[bool]]
    _ids_flow: Callable[[str], _Flow[list[str]]]
    _purge_flow: Callable[[], _Flow[int]]

    def _take(self) -> tuple[Optional[Callable[[], object]], Optional[LoopBound[Any]]]:
        """Mark the store closed and take what it opened itself (not what it was given): how to
        close its blocking client or pool, and its asyncio one."""
        raise NotImplementedError

    def _run(self, action: str, session_id: Optional[str], flow: _Flow[_T]) -> _T:
        raise NotImplementedError

    async def _arun(self, action: str, session_id: Optional[str], flow: _Flow[_T]) -> _T:
        raise NotImplementedError

    def load(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """The live session, or ``None`` when it is absent or expired; with ``since``, only the
        entries appended after it when its incarnation and revision still hold."""
        rules.check_load(session_id, since)
        return self._run("load", session_id, self._load_flow(session_id, since))

    def write(self, session_id: str, change: LogWrite) -> Head:
        """Apply ``change`` atomically and return the new head; else raise ``ConflictError`` and
        write nothing."""
        rules.check_write(session_id, change)
        return self._run("write", session_id, self._write_flow(session_id, change))

    def delete(self, session_id: str) -> bool:
        """Remove the session (its incarnation ends); ``True`` if a live one was there."""
        rules.check_session_id(session_id)
        return self._run("delete", session_id, self._delete_flow(session_id))

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        rules.check_prefix(prefix)
        return self._run("listing", None, self._ids_flow(prefix))

    def purge_expired(self) -> int:
        """Remove the expired sessions now and return how many went."""
        return self._run("purge", None, self._purge_flow())

    async def aload(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        """Async twin of :meth:`load`."""
        rules.check_load(session_id, since)
        return await self._arun("load", session_id, self._load_flow(session_id, since))

    async def awrite(self, session_id: str, change: LogWrite) -> Head:
        """Async twin of :meth:`write`."""
        rules.check_write(session_id, change)
        return await self._arun("write", session_id, self._write_flow(session_id, change))

    async def adelete(self, session_id: str) -> bool:
        """Async twin of :meth:`delete`."""
        rules.check_session_id(session_id)
        return await self._arun("delete", session_id, self._delete_flow(session_id))

    async def aids(self, prefix: str = "") -> list[str]:
        """Async twin of :meth:`ids`."""
        rules.check_prefix(prefix)
        return await self._arun("listing", None, self._ids_flow(prefix))

    async def apurge_expired(self) -> int:
        """Async twin of :meth:`purge_expired`."""
        return await self._arun("purge", None, self._purge_flow())

    def close(self) -> None:
        """Close the clients or pools this store opened, the asyncio one too (on its loop, see
        :class:`LoopBound`), not one it was given; every later call raises
        ``StoreUnavailableError`` (``... is closed``). Closing twice is harmless."""
        close, bound = self._take()
        if close is not None:
            close()
        if bound is not None:
            bound.close()

    async def aclose(self) -> None:
        """Async twin of :meth:`close` (a blocking client or pool is closed in a worker thread)."""
        close, bound = self._take()
        if bound is not None:
            await bound.aclose()
        if close is not None:
            await in_thread(close)

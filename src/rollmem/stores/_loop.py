"""An asyncio resource a store opened on one event loop: a Redis client, a PostgreSQL pool."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from contextlib import suppress
from typing import Callable, Generic, TypeVar

__all__ = ["LoopBound"]

_R = TypeVar("_R")


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

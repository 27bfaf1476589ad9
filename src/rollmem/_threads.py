"""The one adapter from a blocking call to a coroutine, for the thread-backed async twins
(:class:`rollmem.stores.SQLiteStore`'s ``a*`` methods, the async whole-state log, and
:class:`rollmem.sessions.AsyncSessions` over a blocking store)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, TypeVar

__all__ = ["in_thread"]

_T = TypeVar("_T")


async def in_thread(call: Callable[..., _T], *args: Any) -> _T:
    """``call(*args)`` in a worker thread, awaited: the event loop never blocks on it, and the
    caller's context variables go along (:func:`asyncio.to_thread`)."""
    return await asyncio.to_thread(call, *args)

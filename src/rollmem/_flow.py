"""How a generator flow is driven: once blocking, once with asyncio; and how a blocking call is
awaited (:func:`in_thread`).

A *flow* is an operation written once as a generator. It yields a request (a call to make, a
command to send, a statement to execute), receives the result, or has the exception that
performing it raised thrown in, and finally returns its value::

    def load_flow(session_id):
        raw = yield Get(session_id)       # a request type of the module that owns the flow
        return decode(raw)

    value = run(load_flow("a"), perform)            # perform(request) -> result
    value = await arun(load_flow("a"), aperform)    # await aperform(request) -> result

Each module keeps only its request types and how to perform one (the ``perform`` it passes);
the step between two requests is written once, in :func:`_resume`. Every exception raised
while performing a request goes back into the flow, ``BaseException`` included (a cancellation
or an interrupt too): the flow decides what it handles, and what it does not handle propagates
from :func:`run` or :func:`arun` unchanged.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Generator
from typing import Any, Callable, Optional, TypeVar

__all__ = ["Flow", "arun", "in_thread", "resolved", "run"]

_R = TypeVar("_R")
_T = TypeVar("_T")

Flow = Generator[_R, Any, _T]
"""A flow yielding requests of type ``_R`` and returning ``_T``."""


def _resume(flow: Flow[_R, _T], result: Any, error: Optional[BaseException]) -> tuple[bool, Any]:
    """Send ``result`` into ``flow`` (or throw ``error`` in): ``(True, value)`` when the flow
    returned ``value``, ``(False, request)`` when it yielded its next request."""
    try:
        request = flow.send(result) if error is None else flow.throw(error)
    except StopIteration as stop:
        return True, stop.value
    return False, request


def run(flow: Flow[_R, _T], perform: Callable[[_R], Any]) -> _T:
    """Drive ``flow`` to its end, blocking: ``perform`` each request it yields and send back
    the result (or throw in what ``perform`` raised). Returns the flow's value."""
    done, value = _resume(flow, None, None)
    while not done:
        try:
            result, error = perform(value), None
        except BaseException as exc:
            result, error = None, exc
        done, value = _resume(flow, result, error)
        error = None  # no cycle through the traceback
    return value  # type: ignore[no-any-return]


async def arun(flow: Flow[_R, _T], perform: Callable[[_R], Awaitable[Any]]) -> _T:
    """Drive ``flow`` to its end on the running event loop: as :func:`run`, awaiting
    ``perform(request)``."""
    done, value = _resume(flow, None, None)
    while not done:
        try:
            result, error = await perform(value), None
        except BaseException as exc:
            result, error = None, exc
        done, value = _resume(flow, result, error)
        error = None
    return value  # type: ignore[no-any-return]


async def in_thread(call: Callable[..., _T], *args: Any) -> _T:
    """``call(*args)`` in a worker thread, awaited: the one adapter from a blocking call to a
    coroutine (a thread-backed store's ``a``-methods, a blocking store under
    :class:`~rollmem.sessions.AsyncSessions`). The event loop never blocks on it, and the caller's
    context variables go along (:func:`asyncio.to_thread`)."""
    return await asyncio.to_thread(call, *args)


async def resolved(value: Any) -> Any:
    """``value``, awaited when it is awaitable: how async code takes what a callback that may be
    a plain or a coroutine function returned."""
    return (await value) if inspect.isawaitable(value) else value

"""The engine the integrations run on (private; ``_track``: a conversation's live track; ``_state``: the state
kept in the framework). Each framework message (*native*) is one rollmem *unit*, so the core's rules decide
what folds. Here: the settings (:class:`Configured`), the memory (:func:`new_memory`) and its summarizer."""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, Callable, Generic, Optional, TypeVar, Union

from ..counters import counter_identity, words
from ..memory import AsyncRollingMemory, AsyncSummarizeFn, RollingMemory, SummarizeFn, TokenCounter
from ..message import TOOL, USER, Message
from ..policies import CacheAwareBudget, CacheProfile

N = TypeVar("N")
_T = TypeVar("_T")

DEFAULT_MAX_TOKENS = 2000
"""``max_tokens`` of every integration when none is given."""

Resolve = Callable[[Sequence[Message]], list[Message]]
Finish = Callable[[dict[str, int], Optional[BaseException]], None]
Provider = Union[CacheProfile, str, None]
Clock = Callable[[], float]
Tracer = Callable[[dict[str, int]], Finish]
"""``tracer(attributes)`` starts a fold's span (``rollmem.fold.messages``, ``.tokens_before``,
``.tokens_after``); ``finish(attributes, error)`` ends it (``.summary_tokens``, the error raised)."""
_STAMP: contextvars.ContextVar[Optional[float]] = contextvars.ContextVar("rollmem_stamp", default=None)
stamp = _STAMP.set  # stamp(when): the newest message stamp of the call handled (seconds since the epoch)
stamp_clock: Clock = lambda: _STAMP.get() or time.time()  # noqa: E731
"""The default clock where the framework stamps messages: :data:`stamp`'s, else ``time.time()``."""


class Configured:
    """The settings every integration takes, checked once as :meth:`~rollmem.AsyncRollingMemory.cached`
    checks them. Without ``target_tokens`` a memory folds as ``cached(..., provider=, clock=,
    prefix_tokens=)`` (:class:`~rollmem.policies.CacheAwareBudget`), with it as ``AsyncRollingMemory(...,
    target_tokens=)``. Saved states hold no setting: a memory rebuilt from one folds the same way."""

    def _setup(
        self,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        target_tokens: Optional[int] = None,
        provider: Provider = None,
        clock: Optional[Clock] = None,
        prefix_tokens: int = 0,
    ) -> None:
        AsyncRollingMemory(max_tokens, summarize_fn, token_counter, target_tokens=target_tokens)
        cache = CacheAwareBudget(max_tokens, provider=provider, clock=clock, prefix_tokens=prefix_tokens)
        self.max_tokens, self.summarize_fn, self.token_counter = max_tokens, summarize_fn, token_counter
        self.target_tokens, self.provider, self.clock = target_tokens, cache.provider, cache.clock
        fold = {"provider": cache.provider, "clock": cache.clock, "prefix_tokens": prefix_tokens}
        self._fold: dict[str, Any] = fold if target_tokens is None else {"target_tokens": target_tokens}
        identity = counter_identity(words if token_counter is None else token_counter)
        self._identity = identity or f"process:{uuid.uuid4().hex}"  # an unnamed counter: this object's
        self._lives: Lives[Any] = Lives()

    def _fold_tracer(self) -> Optional[Tracer]:
        """A tracer for a fold starting now (``None``: not traced); for frameworks with tracing."""
        return None

    def _count(self, text: str) -> int:
        return (self.token_counter or words)(text)


def new_memory(
    owner: Configured, resolve: Resolve = list, on_evict: Any = None, *, asynchronous: bool
) -> Any:
    """The memory an integration folds with, as :class:`Configured` says (every integration's fold
    rule is chosen here), summarizing ``resolve(evicted)`` (:func:`summarizer`)."""
    made: list[Any] = []
    fn = summarizer(owner, resolve, lambda: made[0], asynchronous)
    kind: Any = AsyncRollingMemory if asynchronous else RollingMemory
    make = kind.cached if owner.target_tokens is None else kind
    made.append(make(owner.max_tokens, fn, owner.token_counter, on_evict=on_evict, **owner._fold))
    return made[0]


def is_async(fn: object) -> bool:
    """Whether calling ``fn`` gives a coroutine (a coroutine function or ``__call__``)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__dict__.get("__call__"))


class Lives(Generic[_T]):
    """A small thread-safe LRU of live values by key; a call takes its value out while it runs."""

    def __init__(self, size: int = 256) -> None:
        self._size, self._items, self._lock = size, OrderedDict[Any, _T](), threading.Lock()

    def take(self, key: Any) -> Optional[_T]:
        with self._lock:
            return self._items.pop(key, None)

    def put(self, key: Any, value: _T) -> None:
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._size:
                self._items.popitem(last=False)


def summarizer(owner: Configured, resolve: Resolve, memory: Callable[[], Any], asynchronous: bool) -> Any:
    """``owner.summarize_fn`` as ``memory()``'s summarizer: it receives ``resolve(evicted)`` (the
    evicted natives converted afresh), and ``owner._fold_tracer()`` sees the fold."""
    fn: Any = owner.summarize_fn
    if fn is None:
        return None

    @contextlib.contextmanager
    def fold(evicted: Sequence[Message]) -> Iterator[dict[str, Any]]:
        tracer, out = owner._fold_tracer(), dict[str, Any]()
        if tracer is None:
            yield out
            return
        costs = dict(zip(map(id, memory().buffer), memory().costs()))
        before, gone = sum(costs.values()), sum(costs.get(id(m), 0) for m in evicted)
        names = ("messages", "tokens_before", "tokens_after")
        finish = tracer(
            {f"rollmem.fold.{k}": n for k, n in zip(names, (len(evicted), before, before - gone))}
        )
        try:
            yield out
        except BaseException as error:
            finish({"rollmem.fold.summary_tokens": 0}, error)
            raise
        result = out.get("summary")
        finish({"rollmem.fold.summary_tokens": owner._count(result) if isinstance(result, str) else 0}, None)

    def summarize(summary: str, evicted: Sequence[Message]) -> Any:
        with fold(evicted) as out:
            out["summary"] = fn(summary, resolve(evicted))
        return out["summary"]

    async def asummarize(summary: str, evicted: Sequence[Message]) -> Any:
        with fold(evicted) as out:
            result = fn(summary, resolve(evicted))
            out["summary"] = await result if inspect.isawaitable(result) else result
        return out["summary"]

    return asummarize if asynchronous or is_async(fn) else summarize


def unit_of(messages: Sequence[Message], **fields: Any) -> Message:
    """The one unit message standing for a native converted to ``messages`` (``fields``
    replaced): the message itself, or one tool message answering the first result's call (so it
    joins its caller's unit), every text joined."""
    first = messages[0]
    if len(messages) > 1:
        head = next((m for m in messages if m.role == TOOL), first)
        text = "\n".join(m.content for m in messages if m.content)
        first = Message(head.role, text, tool_call_id=head.tool_call_id, metadata=head.metadata)
    return replace(first, **fields) if fields else first


def opening_turn(first: Optional[Message]) -> bool:
    """Whether a request opening with ``first`` needs a user turn before it (every provider's
    rule, :func:`rollmem.adapters.user_first`)."""
    return first is not None and (first.role != USER or first.tool_call_id is not None)

"""The engine every framework integration runs on (private; with ``_track``, a conversation's
live track, and ``_state``, the state kept in the framework): each framework message (*native*)
is one rollmem *unit*, so the core's rules decide what folds. Here: the settings and defaults
(:func:`new_memory`), the summarizer converting at fold time and tracing, a small LRU, helpers."""

from __future__ import annotations

import contextlib
import inspect
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, Callable, Generic, Optional, TypeVar, Union

from ..counters import counter_identity, words
from ..memory import AsyncRollingMemory, AsyncSummarizeFn, RollingMemory, SummarizeFn, TokenCounter
from ..message import TOOL, USER, Message
from ..policies import cached_target

N = TypeVar("N")
_T = TypeVar("_T")

DEFAULT_MAX_TOKENS = 2000
"""``max_tokens`` of every integration when none is given."""

Resolve = Callable[[Sequence[Message]], list[Message]]
Finish = Callable[[dict[str, int], Optional[BaseException]], None]
Tracer = Callable[[dict[str, int]], Finish]
"""``tracer(attributes)`` starts a fold's span (``rollmem.fold.messages``, ``.tokens_before``,
``.tokens_after``); ``finish(attributes, error)`` ends it (``.summary_tokens``, the error raised)."""


class Configured:
    """The settings every integration takes, checked as :class:`~rollmem.AsyncRollingMemory` does."""

    max_tokens: int
    target_tokens: int
    summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]]
    token_counter: Optional[TokenCounter]

    def _configure(self, max_tokens: int, summarize_fn: Any, token_counter: Any, target_tokens: Any) -> None:
        AsyncRollingMemory(max_tokens, summarize_fn, token_counter, target_tokens=target_tokens)
        self.max_tokens, self.summarize_fn, self.token_counter = max_tokens, summarize_fn, token_counter
        self.target_tokens = cached_target(max_tokens) if target_tokens is None else target_tokens
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
    """The memory an integration folds with: over ``owner.max_tokens`` (by ``owner.token_counter``)
    it folds down to ``owner.target_tokens``, summarizing ``resolve(evicted)`` (:func:`summarizer`).
    Every integration's fold rule is chosen here."""
    made: list[Any] = []
    fn = summarizer(owner, resolve, lambda: made[0], asynchronous)
    kind = AsyncRollingMemory if asynchronous else RollingMemory
    made.append(
        kind(owner.max_tokens, fn, owner.token_counter, target_tokens=owner.target_tokens, on_evict=on_evict)
    )
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

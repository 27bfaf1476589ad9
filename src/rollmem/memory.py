"""The memory classes: a running summary plus a verbatim buffer of recent messages.

**How a memory is built.** Every class is a *policy* composed with a *driver*:

- the policy (:mod:`rollmem.policies`) is the eviction rule, the only one: how much a message
  costs, when to evict, what leaves (``TokenBudget`` for :class:`RollingMemory`,
  ``MessageWindow`` for :class:`WindowMemory`, ``FoldAll`` for :class:`SummaryMemory`,
  ``KeepAll`` for :class:`BufferMemory`);
- the base :class:`_Memory` holds everything that needs no I/O: state (``summary``, ``buffer``),
  reads, ``stats()``, serialization (``to_dict``, :meth:`_Memory.from_dict`,
  :meth:`_Memory.restore`) and the *flows*, generators written once that yield the calls to make
  and receive their results: :meth:`_Memory._fold_flow` (plan, yield ``summarize(summary,
  evicted)``, commit or leave everything as it was, yield ``on_evict(evicted)``), and the flows
  of settling after an add, ``extend``, ``fold(keep_last)`` and ``replay``;
- the driver only runs flows (``_drive``) and holds the fold lock. :class:`_SyncMemory` (plain
  methods, thread-safe, folds serialized by a thread lock) and :class:`_AsyncMemory` (coroutine
  methods, folds serialized by an asyncio lock, optionally in a background task) differ in
  nothing else: one calls what a flow yields, the other also awaits what returns an awaitable.

**Changes** are typed records (:mod:`rollmem.changes`): :meth:`_Memory.record` collects what a
block of work changed, ``replay`` applies it to another memory (used by :mod:`rollmem.sessions`).

**Adding a memory class** takes one policy and a constructor: subclass :class:`Memory` (sync)
or :class:`AsyncMemory` and pass the policy to ``super().__init__(policy, summarize_fn,
on_evict=...)``. ``from_dict`` and everything else come from the base (see
:mod:`rollmem.policies` for a class with a budget in characters).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, ClassVar, Optional, TypeVar, Union, overload

from . import _validate as v
from ._ledger import Ledger, Plan, checked_messages
from ._types import AsyncSummarizeFn, EvictHook, SummarizeFn, TokenCounter
from .changes import (
    _CHANGE_TYPES,
    Appended,
    BufferAssigned,
    Change,
    Cleared,
    Dropped,
    Folded,
    Pinned,
    Restored,
    SummaryAssigned,
    Unpinned,
)
from .counters import words
from .errors import InvalidStateError
from .message import (
    ASSISTANT,
    NO_METADATA,
    STATE_VERSION,
    SYSTEM,
    TOOL,
    USER,
    Message,
    ToolCall,
    _messages_from_dicts,
)
from .policies import CacheAwareBudget, CacheProfile, FoldAll, KeepAll, MessageWindow, Policy, TokenBudget

__all__ = [
    "AsyncMemory",
    "AsyncRollingMemory",
    "AsyncSummarizeFn",
    "AsyncSummaryMemory",
    "BufferMemory",
    "EvictHook",
    "Memory",
    "MemoryStats",
    "RollingMemory",
    "SummarizeFn",
    "SummaryMemory",
    "TokenCounter",
    "WindowMemory",
    "words",
]

_READABLE_VERSIONS = (1, 2)

_M = TypeVar("_M", bound="_Memory")
_T = TypeVar("_T")
PlanFn = Callable[[Ledger], Optional[Plan]]


@dataclass(frozen=True)
class MemoryStats:
    """A snapshot of a memory. Token fields are ``None`` for classes that count no tokens;
    the counters run since the memory was constructed (or loaded)."""

    messages: int
    pinned: int
    buffer_tokens: Optional[int]
    summary_tokens: Optional[int]
    max_tokens: Optional[int]
    target_tokens: Optional[int]
    folds: int
    summarizer_calls: int
    failed_folds: int
    messages_summarized: int
    messages_dropped: int

    def to_dict(self) -> dict[str, Optional[int]]:
        """The fields as a plain dict."""
        return asdict(self)


class _Fold:
    """A fold between its plan and its commit: what was cut, and what the commit must still find."""

    __slots__ = ("generation", "keep_last", "plan", "summary")

    def __init__(self, plan: Plan, summary: str, generation: int, keep_last: Optional[int]) -> None:
        self.plan = plan
        self.summary = summary
        self.generation = generation
        self.keep_last = keep_last  # set for an explicit fold(keep_last)


class _PolicySetting:
    """A memory's ``int`` attribute that reads and writes (validated) the same attribute of its
    policy: ``memory.max_tokens = 0`` raises as ``TokenBudget`` does."""

    def __init__(self, name: str, doc: str) -> None:
        self.name = name
        self.__doc__ = doc

    @overload
    def __get__(self, memory: None, owner: type) -> _PolicySetting: ...

    @overload
    def __get__(self, memory: _Memory, owner: type) -> int: ...

    def __get__(self, memory: Optional[_Memory], owner: type) -> Union[int, _PolicySetting]:
        if memory is None:
            return self
        value: int = getattr(memory._policy, self.name)
        return value

    def __set__(self, memory: _Memory, value: int) -> None:
        with memory._lock:
            setattr(memory._policy, self.name, value)


_ASYNC_TWINS: dict[type, type] = {}
"""Each sync class -> the async class with the same policy (declared by the async class:
``class AsyncRollingMemory(AsyncMemory, twin_of=RollingMemory)``)."""


def _async_advice(cls: type) -> str:
    twin = next((_ASYNC_TWINS[base] for base in cls.__mro__ if base in _ASYNC_TWINS), None)
    if twin is not None:
        return f"use {twin.__name__} for async callables"
    return f"{cls.__name__} calls it synchronously; pass a plain function (AsyncMemory takes coroutines)"


def _awaitable_result(result: object, cls: type) -> TypeError:
    close = getattr(result, "close", None)
    if callable(close):
        close()  # a coroutine that is never awaited would warn
    return TypeError(f"summarize_fn returned an awaitable: {_async_advice(cls)}")


def _check_summarizer(summarize_fn: object) -> None:
    if summarize_fn is None:
        raise ValueError("summarize_fn is required: a summary-only memory has nowhere else to keep turns")


def _check_keep_last(keep_last: object) -> int:
    return v.check_int("keep_last", keep_last, 0)


class _Call:
    """A call a flow asks its driver to make: the sync driver calls it, the async driver also
    awaits what it returns when that is awaitable. ``summary``: the result must be a summary
    (the sync driver refuses an awaitable one)."""

    __slots__ = ("args", "fn", "summary")

    def __init__(self, fn: Callable[..., Any], *args: Any, summary: bool = False) -> None:
        self.fn = fn
        self.args = args
        self.summary = summary


_Flow = Generator[_Call, Any, _T]
"""An operation written once: it yields the calls to make and receives their results (or has
their exceptions thrown in); :meth:`_SyncMemory._drive` and :meth:`_AsyncMemory._drive` run it."""


class _Memory:
    """State, reads, serialization and the fold flow shared by every memory class; the eviction
    rule is the ``policy`` given to the constructor."""

    _sync_callbacks: ClassVar[bool] = False
    """Declared by the driver: ``True`` when it calls ``summarize_fn`` and ``on_evict`` without
    awaiting them (coroutine functions are then refused, with advice naming the async twin)."""
    _folds_on_request: ClassVar[bool] = False
    """Declared by the classes with a public ``fold()``: ``replay`` redoes explicit folds."""

    def __init__(
        self,
        policy: Policy,
        summarize_fn: Optional[Callable[..., Any]] = None,
        on_evict: Optional[EvictHook] = None,
    ) -> None:
        if self._sync_callbacks:
            v.check_not_coroutine("summarize_fn", summarize_fn, _async_advice(type(self)))
            v.check_not_coroutine("on_evict", on_evict, _async_advice(type(self)))
        if not isinstance(policy, Policy):
            raise v.type_error("policy", "a rollmem.policies.Policy", policy)
        v.check_callable("summarize_fn", summarize_fn, optional=True)
        v.check_callable("on_evict", on_evict, optional=True)
        self._policy = policy
        self._cost = policy.cost
        self._summary = ""
        self._ledger = Ledger()
        self._lock = threading.RLock()
        self._summarize_fn = summarize_fn
        self._on_evict = on_evict
        self._generation = 0  # bumped by clear() and by assignments: a fold in flight then loses
        self._counts = dict.fromkeys(
            ("folds", "summarizer_calls", "failed_folds", "messages_summarized", "messages_dropped"), 0
        )
        self._summary_tokens: tuple[str, int] = ("", 0)
        self._recorders: list[list[Change]] = []  # the lists recording changes now (copied on change)
        self._journal: Optional[list[Change]] = None  # the list of start_recording(), if running
        self._counting: set[int] = set()  # threads inside a token_counter call

    @property
    def policy(self) -> Policy:
        """The eviction rule of this memory (see :mod:`rollmem.policies`)."""
        return self._policy

    def __repr__(self) -> str:
        """``<RollingMemory max_tokens=2000 target_tokens=1000: 12 messages, summary of 340 chars,
        3 folds>``: settings and sizes, read without calling the counter or any other callback."""
        settings = "".join(f" {name}={value!r}" for name, value in self._policy.settings().items())
        messages = v.plural(len(self._ledger.items), "message")
        summary = v.plural(len(self._summary), "char")
        folds = v.plural(self._counts["folds"], "fold")
        return f"<{type(self).__name__}{settings}: {messages}, summary of {summary}, {folds}>"

    # -- public state -----------------------------------------------------------------------

    @property
    def summary(self) -> str:
        """The running summary of everything folded out of the buffer (``""`` when none)."""
        return self._summary

    @summary.setter
    def summary(self, value: str) -> None:
        v.check_text(v.check_str("summary", value), "summary")
        with self._lock:
            self._summary = value
            self._generation += 1
            self._record(SummaryAssigned(value))

    @property
    def buffer(self) -> list[Message]:
        """The verbatim recent messages, oldest first. Callers may mutate or assign it; the memory
        notices and recounts only the messages it has not seen."""
        return self._ledger.items

    @buffer.setter
    def buffer(self, messages: Iterable[Message]) -> None:
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
            raise TypeError(f"buffer: expected an iterable of Message, got {type(messages).__name__}")
        messages = checked_messages(messages)  # rejected now, not at the next add
        with self._lock:
            self._ledger.replace(messages)
            self._generation += 1
            self._record(BufferAssigned(tuple(self._ledger.items)))

    # -- measuring and appending ------------------------------------------------------------

    def _measure(self, message: Message, where: str) -> int:
        ident = threading.get_ident()
        counting = self._counting
        if ident in counting:  # the counter (or the policy's cost rule) called back into this memory
            raise RuntimeError(f"token_counter called back into the memory while measuring {where}")
        counting.add(ident)
        try:
            cost = self._cost(message)
        finally:
            counting.discard(ident)
        if (type(cost) is not int and not v.is_int(cost)) or cost < 0:
            raise self._bad_cost(cost, where)
        return cost

    def _bad_cost(self, cost: object, where: str) -> Exception:
        source = self._policy.cost_source
        if not v.is_int(cost):
            return TypeError(f"{source} returned {v.type_name(cost)} for {where}; expected int")
        return ValueError(f"{source} returned {cost} for {where}; expected a non-negative int")

    def _measure_at(self, message: Message, position: int) -> int:
        return self._measure(message, f"buffer[{position}]")

    def _new_message(
        self,
        role: str,
        content: str,
        id: Optional[str],
        tool_calls: Iterable[ToolCall],
        tool_call_id: Optional[str],
        metadata: Optional[Mapping[str, Any]],
        pinned: bool,
    ) -> Message:
        return Message(
            role, content, id, tool_calls, tool_call_id, NO_METADATA if metadata is None else metadata, pinned
        )

    def _append_one(self, message: Message) -> None:
        """Count, then append one message; a failure appends nothing."""
        cost = self._measure(message, "the new message")
        with self._lock:
            ledger = self._ledger
            if ledger.dirty:
                ledger.sync(self._measure_at)
            ledger.append(message, cost)
            if self._recorders:
                self._record(Appended((message,), (cost,)))

    def _append(self, messages: Sequence[Message]) -> None:
        """Count them all, then append them all; a failure appends nothing."""
        costs = [self._measure(message, f"messages[{i}]") for i, message in enumerate(messages)]
        with self._lock:
            ledger = self._ledger
            ledger.sync(self._measure_at)
            for message, cost in zip(messages, costs):
                ledger.append(message, cost)
            self._record(Appended(tuple(messages), tuple(costs)))

    @staticmethod
    def _check_batch(messages: Iterable[Message]) -> list[Message]:
        batch = list(messages)
        for index, message in enumerate(batch):
            if not isinstance(message, Message):
                raise v.type_error(f"messages[{index}]", "Message", message)
        return batch

    def _record(self, change: Change) -> None:
        """Append ``change`` to every open recording; the caller holds the state lock."""
        for changes in self._recorders:
            changes.append(change)

    def _fold_record(
        self,
        summary: str,
        positions: tuple[int, ...],
        messages: tuple[Message, ...],
        keep_last: Optional[int],
    ) -> Change:
        if self._summarize_fn is None:
            return Dropped(positions, messages, keep_last)
        return Folded(summary, positions, messages, keep_last)

    def _record_fold(self, fold: _Fold, before: Sequence[Message], new_summary: str) -> None:
        """Record a committed fold: the buffer positions (before the commit) of what left."""
        positions: list[int] = []
        index = 0
        for message in fold.plan.messages:  # the cut is an ordered subsequence of the buffer's front
            while before[index] is not message:
                index += 1
            positions.append(index)
            index += 1
        self._record(
            self._fold_record(new_summary, tuple(positions), tuple(fold.plan.messages), fold.keep_last)
        )

    def _needs_fold(self) -> bool:
        """Whether the policy may find something to evict (or the buffer must be recounted)."""
        ledger = self._ledger
        return ledger.dirty or self._policy.over(ledger)

    # -- the fold flow ----------------------------------------------------------------------

    def _begin_fold(self, plan_fn: PlanFn, keep_last: Optional[int] = None) -> Optional[_Fold]:
        """Plan a fold; ``None`` when there is nothing to cut. The caller holds the fold lock and
        ends the fold with :meth:`_finish_fold` or :meth:`_fail_fold`."""
        ledger = self._ledger
        with self._lock:
            if ledger.dirty:
                ledger.sync(self._measure_at)
            plan = plan_fn(ledger)
            if plan is None:
                return None
            if self._summarize_fn is not None:
                self._counts["summarizer_calls"] += 1
            return _Fold(plan, self._summary, self._generation, keep_last)

    def _fail_fold(self, fold: _Fold, error: BaseException) -> None:
        """End a fold whose summarizer call raised (or was cancelled): nothing changes."""
        with self._lock:
            self._ledger.abort(fold.plan)
            if isinstance(error, Exception):
                self._counts["failed_folds"] += 1

    def _finish_fold(self, fold: _Fold, new_summary: object) -> Optional[int]:
        """Commit a fold with the summarizer's answer; returns how many messages left the buffer,
        or ``None`` when a change made meanwhile (a clear, a pin, an assignment) won."""
        if not isinstance(new_summary, str):
            error = TypeError(f"summarize_fn returned {type(new_summary).__name__}; expected str")
            self._fail_fold(fold, error)
            raise error
        if not new_summary.isascii():
            try:
                v.check_text(new_summary, "summary")
            except InvalidStateError as error:
                failure = ValueError(f"summarize_fn returned a summary that is {error.problem}")
                self._fail_fold(fold, failure)
                raise failure from None
        plan = fold.plan
        with self._lock:
            ledger = self._ledger
            before = list(ledger.items) if self._recorders else ()
            if fold.generation != self._generation or not ledger.commit(plan):
                ledger.abort(plan)
                return None
            self._summary = new_summary
            counts = self._counts
            counts["folds"] += 1
            removed = len(plan.messages)
            key = "messages_dropped" if self._summarize_fn is None else "messages_summarized"
            counts[key] += removed
            if self._recorders:
                self._record_fold(fold, before, new_summary)
        return removed

    def _fold_flow(self, plan_fn: PlanFn, keep_last: Optional[int]) -> _Flow[Optional[int]]:
        """One fold: plan, ``summarize(summary, evicted)``, commit, ``on_evict(evicted)``. The
        driver runs it holding its fold lock (:meth:`_run`); a failed or cancelled summarizer
        call leaves everything as it was and propagates. Returns what :meth:`_finish_fold` does."""
        fold = self._begin_fold(plan_fn, keep_last)
        if fold is None:
            return 0
        summarize = self._summarize_fn
        new_summary: object = fold.summary
        if summarize is not None:
            try:
                # a fresh list: a callback that changes what it is given cannot reach the ledger
                new_summary = yield _Call(summarize, fold.summary, list(fold.plan.messages), summary=True)
            except BaseException as exc:
                self._fail_fold(fold, exc)
                raise
        count = self._finish_fold(fold, new_summary)
        if count and self._on_evict is not None:
            yield _Call(self._on_evict, list(fold.plan.messages))
        return count

    def _settle_flow(self) -> _Flow[None]:
        """Fold until the policy is satisfied (a fold discarded by a change made meanwhile is
        planned again; one that finds nothing to cut ends it)."""
        while self._needs_fold():
            if (yield _Call(self._run, self._policy.plan)) == 0:
                return

    def _fold_keeping_flow(self, keep_last: object) -> _Flow[int]:
        """``fold(keep_last)``: fold all but the newest ``keep_last``; records a fold of nothing
        when nothing left."""
        keep = _check_keep_last(keep_last)
        count = yield _Call(self._run, lambda ledger: ledger.plan_keep_last(keep), keep)
        if not count:
            with self._lock:
                self._record(self._fold_record(self._summary, (), (), keep))
        return count or 0

    def _extend_flow(self, messages: Iterable[Message]) -> _Flow[None]:
        """``extend(messages)``: append them all (or none), then evict once."""
        batch = self._check_batch(messages)
        if batch:
            self._append(batch)
            yield _Call(self._prune)

    def _run(self, plan_fn: PlanFn, keep_last: Optional[int] = None) -> Any:
        """The driver runs :meth:`_fold_flow` under its fold lock: ``0`` when called back from
        inside its own fold (that fold goes on), else what the flow returns."""
        raise NotImplementedError

    def _prune(self) -> Any:
        """The driver evicts what the policy says after an add (:meth:`_settle_flow`)."""
        raise NotImplementedError

    # -- reads ------------------------------------------------------------------------------

    def get_messages(self) -> list[Message]:
        """The buffer, preceded by ``Message("system", summary)`` when the summary is non-empty."""
        with self._lock:
            summary = self._summary
            messages = list(self._ledger.items)
        if summary:
            messages.insert(0, Message(SYSTEM, summary))
        return messages

    def get_context(self) -> str:
        """``get_messages()`` as text, one ``role: content`` line per message."""
        return "\n".join(str(message) for message in self.get_messages())

    def stats(self) -> MemoryStats:
        """Sizes now and counters since construction."""
        with self._lock:
            ledger = self._ledger
            ledger.sync(self._measure_at)
            counts_tokens = self._policy.counts_tokens
            summary_tokens: Optional[int] = None
            if counts_tokens:
                text, tokens = self._summary_tokens
                if text != self._summary:
                    tokens = self._measure(Message(SYSTEM, self._summary), "the summary")
                    self._summary_tokens = (self._summary, tokens)
                summary_tokens = tokens if self._summary else 0
            limit, goal = self._policy.limits()
            return MemoryStats(
                messages=len(ledger.items),
                pinned=ledger.pinned,
                buffer_tokens=ledger.total if counts_tokens else None,
                summary_tokens=summary_tokens,
                max_tokens=limit,
                target_tokens=goal,
                **self._counts,
            )

    # -- plain mutations --------------------------------------------------------------------

    def clear(self) -> None:
        """Empty summary and buffer. A fold in flight is discarded."""
        with self._lock:
            self._summary = ""
            self._ledger.clear()
            self._generation += 1
            self._record(Cleared())

    def pin(self, message_id: str) -> None:
        """Pin every buffer message whose ``id`` is ``message_id``: it will never be evicted."""
        self._set_pinned(message_id, True)

    def unpin(self, message_id: str) -> None:
        """Let the buffer messages whose ``id`` is ``message_id`` be evicted again."""
        self._set_pinned(message_id, False)

    def _set_pinned(self, message_id: str, pinned: bool) -> None:
        with self._lock:
            ledger = self._ledger
            ledger.sync(self._measure_at)
            positions = [i for i, m in enumerate(ledger.items) if m.id == message_id]
            if not positions:
                raise KeyError(f"no message with id {message_id!r} in the buffer")
            for position in positions:
                message = ledger.items[position]
                if message.pinned != pinned:
                    ledger.set_at(position, replace(message, pinned=pinned))
            self._record(Pinned(message_id) if pinned else Unpinned(message_id))

    # -- recording and replaying changes ----------------------------------------------------

    @property
    def recording(self) -> bool:
        """Whether the changes made to this memory are being recorded (:meth:`record` or
        :meth:`start_recording`)."""
        return bool(self._recorders)

    def _open_recording(self) -> list[Change]:
        changes: list[Change] = []
        with self._lock:
            self._recorders = [*self._recorders, changes]
        return changes

    def _close_recording(self, changes: list[Change]) -> None:
        with self._lock:
            self._recorders = [other for other in self._recorders if other is not changes]

    def start_recording(self) -> None:
        """Record every change from now on, until :meth:`stop_recording`. ``RuntimeError`` if a
        recording started this way is already running (:meth:`record` blocks may run alongside)."""
        with self._lock:
            if self._journal is not None:
                raise RuntimeError("this memory is already recording its changes")
            self._journal = self._open_recording()

    def stop_recording(self) -> tuple[Change, ...]:
        """End the recording; returns the changes made since :meth:`start_recording`, in order
        (empty when none was running)."""
        with self._lock:
            changes, self._journal = self._journal, None
            if changes is not None:
                self._close_recording(changes)
        return tuple(changes or ())

    @contextmanager
    def record(self) -> Iterator[list[Change]]:
        """``with memory.record() as changes:``: the :mod:`rollmem.changes` records of what the
        block changes, from any thread or task, appended to ``changes`` in the order they happen
        (complete when the block exits). Blocks may nest or overlap; each gets every change made
        while it is open."""
        changes = self._open_recording()
        try:
            yield changes
        finally:
            self._close_recording(changes)

    def _replay_flow(self, changes: Iterable[Change]) -> _Flow[None]:
        """The replay flow: applies the plain changes itself and runs the flows of ``extend`` and
        (on the classes with a public ``fold()``) of ``fold`` for the adds and explicit folds."""
        batch = list(changes)
        for index, change in enumerate(batch):
            if not isinstance(change, _CHANGE_TYPES):
                raise v.type_error(f"changes[{index}]", "a rollmem.changes record", change)
        for change in batch:
            if isinstance(change, Appended):
                yield from self._extend_flow(change.messages)
            elif isinstance(change, (Folded, Dropped)):
                if change.keep_last is not None and self._folds_on_request:
                    yield from self._fold_keeping_flow(change.keep_last)  # automatic folds: the policy's
            elif isinstance(change, Cleared):
                self.clear()
            elif isinstance(change, (Pinned, Unpinned)):
                with contextlib.suppress(KeyError):  # the message left in the other writer's state
                    self._set_pinned(change.message_id, isinstance(change, Pinned))
            elif isinstance(change, SummaryAssigned):
                self.summary = change.summary
            elif isinstance(change, BufferAssigned):
                self.buffer = list(change.messages)
            else:
                self._restore(change.summary, list(change.messages))

    # -- what persistence needs -------------------------------------------------------------

    @property
    def on_evict(self) -> Optional[EvictHook]:
        """The hook called with the messages of each committed eviction (``None``: none). It may be
        replaced (:mod:`rollmem.sessions` holds it back until a session's changes are saved)."""
        return self._on_evict

    @on_evict.setter
    def on_evict(self, hook: Optional[EvictHook]) -> None:
        v.check_callable("on_evict", hook, optional=True)
        if self._sync_callbacks:
            v.check_not_coroutine("on_evict", hook, _async_advice(type(self)))
        self._on_evict = hook

    @property
    def token_counter(self) -> Optional[TokenCounter]:
        """The counter that measures each message (``None`` when the policy counts no tokens).
        Its identity (:func:`rollmem.counters.counter_identity`) tells whether stored costs hold."""
        counter: Optional[TokenCounter] = getattr(self._policy, "token_counter", None)
        return counter

    def costs(self) -> list[int]:
        """The cost of each buffer message by this memory's policy, aligned with :attr:`buffer`."""
        with self._lock:
            ledger = self._ledger
            ledger.sync(self._measure_at)
            return ledger.costs()

    # -- serialization ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """``{"version": 2, "summary": ..., "buffer": [message dicts]}``, JSON-ready."""
        with self._lock:
            return {
                "version": STATE_VERSION,
                "summary": self._summary,
                "buffer": [message.to_dict() for message in self._ledger.items],
            }

    @classmethod
    def from_dict(cls: type[_M], data: Mapping[str, Any], **options: Any) -> _M:
        """A new memory built as ``cls(**options)`` (the constructor's keyword arguments), holding
        the ``to_dict()`` output ``data`` (state versions 1 and 2) verbatim: no pruning, no
        summarizer call; the policy applies again from the next add. Bad state raises
        :class:`~rollmem.errors.InvalidStateError` naming the field."""
        memory = cls(**options)
        memory.restore(data)
        return memory

    def restore(self, data: Mapping[str, Any], *, costs: Optional[Sequence[int]] = None) -> None:
        """Replace summary and buffer with the ``to_dict()`` output ``data`` (versions 1 and 2;
        buffer items may also be ``Message`` objects), verbatim: no pruning, no summarizer call.
        With ``costs`` (one ``int`` >= 0 per message, measured by this memory's policy, e.g.
        stored by :mod:`rollmem.sessions`) the messages are not counted again. Nothing changes
        on error; a fold in flight is discarded. The counters of ``stats()`` go on."""
        summary, messages = _parse_state(data)
        known: Optional[list[int]] = None
        if costs is not None:
            if isinstance(costs, (str, bytes, Mapping)) or not isinstance(costs, Iterable):
                raise v.type_error("costs", "a sequence of int", costs)
            known = list(costs)
            if len(known) != len(messages):
                raise ValueError(f"costs: expected {len(messages)} costs, got {len(known)}")
            if not set(map(type, known)) <= {int} or (known and min(known) < 0):
                for index, cost in enumerate(known):  # name the bad one
                    v.check_int(f"costs[{index}]", cost, 0)
        self._restore(summary, messages, known)

    def _restore(self, summary: str, messages: list[Message], costs: Optional[list[int]] = None) -> None:
        with self._lock:
            self._summary = summary
            if costs is None:
                self._ledger.replace(messages)  # counted at the next sync
            else:
                self._ledger.load(messages, costs)
            self._generation += 1
            self._record(Restored(summary, tuple(messages)))


def _parse_state(data: object) -> tuple[str, list[Message]]:
    """Read a saved state (versions 1 and 2) into its summary and messages; errors name the field."""
    data = v.expect_mapping(data, "")
    version = v.get_int(data, "version", "")
    if version not in _READABLE_VERSIONS:
        raise InvalidStateError(
            "version", f"unsupported state version {version}; this rollmem reads versions 1 and 2"
        )
    summary = v.check_text(v.get_str(data, "summary", ""), "summary")
    items = v.get_list(data, "buffer", "")
    return summary, _messages_from_dicts(items, "buffer")


# -- sync and async drivers ------------------------------------------------------------------


class _SyncMemory(_Memory):
    """The sync driver: plain methods; thread-safe. Folds are serialized and run outside the
    state lock; ``summarize_fn`` and ``on_evict`` must be plain functions."""

    _sync_callbacks = True

    def __init__(
        self,
        policy: Policy,
        summarize_fn: Optional[SummarizeFn] = None,
        on_evict: Optional[EvictHook] = None,
    ) -> None:
        super().__init__(policy, summarize_fn, on_evict)
        self._fold_lock = threading.RLock()

    def _drive(self, flow: _Flow[_T]) -> _T:
        """Run ``flow``, making each call it yields; a summarizer that returns an awaitable fails."""
        try:
            call = next(flow)
            while True:
                try:
                    result = call.fn(*call.args)
                    if call.summary and type(result) is not str and inspect.isawaitable(result):
                        raise _awaitable_result(result, type(self))
                except BaseException as exc:
                    call = flow.throw(exc)
                else:
                    call = flow.send(result)
        except StopIteration as stop:
            done: _T = stop.value
            return done

    def add_message(
        self,
        role: str,
        content: str,
        *,
        id: Optional[str] = None,
        tool_calls: Iterable[ToolCall] = (),
        tool_call_id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        pinned: bool = False,
    ) -> Message:
        """Append a message, then evict what the policy says; returns the message."""
        message = self._new_message(role, content, id, tool_calls, tool_call_id, metadata, pinned)
        self._append_one(message)
        self._prune()
        return message

    def add_user_message(
        self,
        content: str,
        *,
        id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        pinned: bool = False,
    ) -> Message:
        """``add_message("user", content, ...)``."""
        return self.add_message(USER, content, id=id, metadata=metadata, pinned=pinned)

    def add_assistant_message(
        self,
        content: str,
        *,
        tool_calls: Iterable[ToolCall] = (),
        id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        pinned: bool = False,
    ) -> Message:
        """``add_message("assistant", content, ...)``."""
        return self.add_message(
            ASSISTANT, content, tool_calls=tool_calls, id=id, metadata=metadata, pinned=pinned
        )

    def add_system_message(
        self,
        content: str,
        *,
        id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        pinned: bool = False,
    ) -> Message:
        """``add_message("system", content, ...)``."""
        return self.add_message(SYSTEM, content, id=id, metadata=metadata, pinned=pinned)

    def add_tool_message(
        self,
        content: str,
        *,
        tool_call_id: Optional[str] = None,
        id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        pinned: bool = False,
    ) -> Message:
        """``add_message("tool", content, tool_call_id=...)``: the result of a tool call."""
        return self.add_message(
            TOOL, content, tool_call_id=tool_call_id, id=id, metadata=metadata, pinned=pinned
        )

    def extend(self, messages: Iterable[Message]) -> None:
        """Append many messages, then evict once: at most one summarizer call. All or nothing."""
        self._drive(self._extend_flow(messages))

    def _prune(self) -> None:
        ledger, policy = self._ledger, self._policy
        # _settle_flow, run inline: it runs on every add, and a fold-per-add memory pays for the
        # generator (the async driver drives the flow)
        while (ledger.dirty or policy.over(ledger)) and self._run(policy.plan) != 0:
            pass

    def _run(self, plan_fn: PlanFn, keep_last: Optional[int] = None) -> Optional[int]:
        with self._fold_lock:
            if self._ledger.in_flight:
                return 0  # called back from inside this thread's own fold: leave it to that fold
            return self._drive(self._fold_flow(plan_fn, keep_last))

    def replay(self, changes: Iterable[Change]) -> None:
        """Apply recorded changes (see :mod:`rollmem.changes`) through this memory's methods: the
        appended messages are added and this memory's policy evicts as it would have. A
        non-record raises ``TypeError`` before anything changes."""
        self._drive(self._replay_flow(changes))


class _NoLock:
    """Stands for the fold lock when the task re-entering a fold already holds it."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()


class _AsyncMemory(_Memory):
    """The async driver: coroutine methods; safe for many tasks on one loop. Folds are
    serialized; ``summarize_fn`` and ``on_evict`` may be plain or coroutine functions."""

    def __init_subclass__(cls, twin_of: Optional[type[_Memory]] = None, **kwargs: Any) -> None:
        """``class AsyncRollingMemory(AsyncMemory, twin_of=RollingMemory)``: the sync class whose
        refusal of a coroutine function names this class."""
        super().__init_subclass__(**kwargs)
        if twin_of is not None:
            _ASYNC_TWINS[twin_of] = cls

    def __init__(
        self,
        policy: Policy,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        on_evict: Optional[EvictHook] = None,
        background: bool = False,
    ) -> None:
        super().__init__(policy, summarize_fn, on_evict)
        self._background = v.check_bool("background", background)
        self._fold_lock: Optional[asyncio.Lock] = None
        self._fold_lock_loop: Optional[asyncio.AbstractEventLoop] = None
        self._fold_owner: Optional[asyncio.Task[Any]] = None
        self._task: Optional[asyncio.Task[None]] = None
        self._again = False  # an add found a background fold in flight

    async def _drive(self, flow: _Flow[_T]) -> _T:
        """Run ``flow``, making each call it yields and awaiting what returns an awaitable."""
        try:
            call = next(flow)
            while True:
                try:
                    result = call.fn(*call.args)
                    if inspect.isawaitable(result):
                        result = await result
                except BaseException as exc:
                    call = flow.throw(exc)
                else:
                    call = flow.send(result)
        except StopIteration as stop:
            done: _T = stop.value
            return done

    async def add_message(
        self,
        role: str,
        content: str,
        *,
        id: Optional[str] = None,
        tool_calls: Iterable[ToolCall] = (),
        tool_call_id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        pinned: bool = False,
    ) -> Message:
        """Append a message, then evict what the policy says (in the background when configured
        so); returns the message."""
        message = self._new_message(role, content, id, tool_calls, tool_call_id, metadata, pinned)
        self._append_one(message)
        await self._prune()
        return message

    async def add_user_message(
        self,
        content: str,
        *,
        id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        pinned: bool = False,
    ) -> Message:
        """``add_message("user", content, ...)``."""
        return await self.add_message(USER, content, id=id, metadata=metadata, pinned=pinned)

    async def add_assistant_message(
        self,
        content: str,
        *,
        tool_calls: Iterable[ToolCall] = (),
        id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        pinned: bool = False,
    ) -> Message:
        """``add_message("assistant", content, ...)``."""
        return await self.add_message(
            ASSISTANT, content, tool_calls=tool_calls, id=id, metadata=metadata, pinned=pinned
        )

    async def add_system_message(
        self,
        content: str,
        *,
        id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        pinned: bool = False,
    ) -> Message:
        """``add_message("system", content, ...)``."""
        return await self.add_message(SYSTEM, content, id=id, metadata=metadata, pinned=pinned)

    async def add_tool_message(
        self,
        content: str,
        *,
        tool_call_id: Optional[str] = None,
        id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        pinned: bool = False,
    ) -> Message:
        """``add_message("tool", content, tool_call_id=...)``: the result of a tool call."""
        return await self.add_message(
            TOOL, content, tool_call_id=tool_call_id, id=id, metadata=metadata, pinned=pinned
        )

    async def extend(self, messages: Iterable[Message]) -> None:
        """Append many messages, then evict once: at most one summarizer call. All or nothing."""
        await self._drive(self._extend_flow(messages))

    @property
    def background(self) -> bool:
        """Whether folds run as a background task (see :meth:`flush`)."""
        return self._background

    async def flush(self) -> None:
        """Wait for the folds in flight, then fold now whatever the policy still wants folded
        (retrying a background fold that failed): on return the memory is within its policy.

        Raises what ``summarize_fn`` (or ``on_evict``) raised if that last fold fails; nothing
        changed then, and the next add or ``flush()`` retries. A background failure that a
        later fold made good is not raised. Raises ``RuntimeError`` when called from a
        ``summarize_fn`` or ``on_evict`` of this memory (it would wait for itself)."""
        if self._fold_owner is not None and self._fold_owner is asyncio.current_task():
            raise RuntimeError("flush() called from a summarize_fn or on_evict: it would wait for itself")
        task = self._task
        if task is not None:
            await asyncio.wait((task,))
        async with self._lock_for_loop():
            pass
        await self._fold_until_settled()

    async def _prune(self) -> None:
        if not self._needs_fold():
            return
        if not self._background:
            await self._fold_until_settled()
        elif self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._fold_in_background())
        else:
            self._again = True  # if the fold in flight fails, this add gets an attempt of its own

    async def _fold_until_settled(self) -> None:
        await self._drive(self._settle_flow())

    async def _fold_in_background(self) -> None:
        again = True
        while again:
            self._again = False
            try:
                await self._fold_until_settled()
                return
            except Exception:  # retried by flush() and the next add
                again = self._again  # something was added while the failed fold ran

    def _lock_for_loop(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._fold_lock is None or (self._fold_lock_loop is not loop and not self._fold_lock.locked()):
            self._fold_lock = asyncio.Lock()
            self._fold_lock_loop = loop
        return self._fold_lock

    async def _run(self, plan_fn: PlanFn, keep_last: Optional[int] = None) -> Optional[int]:
        task = asyncio.current_task()
        reentered = self._fold_owner is task  # called back from a summarizer or hook of this task's fold
        if reentered and self._ledger.in_flight:
            return 0  # leave it to the fold in flight
        async with _NO_LOCK if reentered else self._lock_for_loop():  # this task holds the lock already
            owner, self._fold_owner = self._fold_owner, task
            try:
                return await self._drive(self._fold_flow(plan_fn, keep_last))
            finally:
                self._fold_owner = owner

    async def replay(self, changes: Iterable[Change]) -> None:
        """Apply recorded changes, as :meth:`Memory.replay` does, awaiting the adds and folds."""
        await self._drive(self._replay_flow(changes))


class Memory(_SyncMemory):
    """A sync memory with any eviction ``policy`` (see :mod:`rollmem.policies`); the base of the
    sync classes that fold. What the policy evicts is folded into the summary by one
    ``summarize_fn`` call (dropped when there is none); if it raises, nothing changes and the
    error propagates. ``on_evict`` is called with what left, after each committed eviction."""

    def __init__(
        self,
        policy: Policy,
        summarize_fn: Optional[SummarizeFn] = None,
        *,
        on_evict: Optional[EvictHook] = None,
    ) -> None:
        super().__init__(policy, summarize_fn, on_evict)

    _folds_on_request = True

    def fold(self, keep_last: int = 0) -> int:
        """Fold everything but the newest ``keep_last`` messages (whole units; pinned stay) now, in
        one summarizer call. Returns how many messages left the buffer."""
        return self._drive(self._fold_keeping_flow(keep_last))


class AsyncMemory(_AsyncMemory, twin_of=Memory):
    """:class:`Memory` for async code: the base of the async classes. The ``add_*`` methods,
    ``extend`` and ``fold`` are coroutines and ``summarize_fn``/``on_evict`` may be async. With
    ``background=True`` an add returns once the message is appended and the fold runs as a task
    (see :meth:`flush`); meanwhile the buffer may exceed what the policy allows."""

    def __init__(
        self,
        policy: Policy,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        *,
        on_evict: Optional[EvictHook] = None,
        background: bool = False,
    ) -> None:
        super().__init__(policy, summarize_fn, on_evict, background)

    _folds_on_request = True

    async def fold(self, keep_last: int = 0) -> int:
        """Fold everything but the newest ``keep_last`` messages (whole units; pinned stay) now, in
        one summarizer call (awaited when async). Returns how many messages left the buffer."""
        return await self._drive(self._fold_keeping_flow(keep_last))


# -- the public classes: a policy and a driver each ---------------------------------------------


class RollingMemory(Memory):
    """A running summary plus the most recent turns verbatim, within ``max_tokens``.

    After each add that puts the buffer over ``max_tokens``, the oldest whole units go (down to
    ``target_tokens``, default ``max_tokens``), aligned so the buffer does not start with a reply,
    never the newest unit; they are folded into the summary by one ``summarize_fn`` call, or
    dropped without one. If the summarizer raises, nothing changes and the error propagates.
    Thread-safe. Policy: :class:`~rollmem.policies.TokenBudget`.
    """

    max_tokens = _PolicySetting("max_tokens", "The token budget of the buffer (an ``int`` > 0); validated.")
    target_tokens = _PolicySetting(
        "target_tokens", "Evict down to this many tokens (``0 < target_tokens <= max_tokens``); validated."
    )

    def __init__(
        self,
        max_tokens: int = 2000,
        summarize_fn: Optional[SummarizeFn] = None,
        token_counter: Optional[TokenCounter] = None,
        *,
        target_tokens: Optional[int] = None,
        on_evict: Optional[EvictHook] = None,
    ) -> None:
        super().__init__(
            TokenBudget(max_tokens, target_tokens, token_counter), summarize_fn, on_evict=on_evict
        )

    @classmethod
    def cached(
        cls,
        max_tokens: int = 2000,
        summarize_fn: Optional[SummarizeFn] = None,
        token_counter: Optional[TokenCounter] = None,
        *,
        provider: Union[CacheProfile, str, None] = None,
        clock: Optional[Callable[[], float]] = None,
        prefix_tokens: int = 0,
        on_evict: Optional[EvictHook] = None,
    ) -> RollingMemory:
        """The recommended configuration: the same class with the
        :class:`~rollmem.policies.CacheAwareBudget` policy, told the ``provider`` (a
        :class:`~rollmem.policies.CacheProfile` or a name in :data:`~rollmem.policies.PROVIDERS`,
        default ``"anthropic"``), the ``clock`` (default :func:`time.monotonic`) and the
        ``prefix_tokens`` each request sends before the conversation (system prompt, tools). It
        folds early when the cache went cold anyway, down to a verbatim floor when it is warm, and
        never evicts the last user turn while within ``max_tokens``."""
        memory = cls.__new__(cls)
        policy = CacheAwareBudget(
            max_tokens, token_counter, provider=provider, clock=clock, prefix_tokens=prefix_tokens
        )
        Memory.__init__(memory, policy, summarize_fn, on_evict=on_evict)
        return memory


class AsyncRollingMemory(AsyncMemory, twin_of=RollingMemory):
    """:class:`RollingMemory` for async code: the ``add_*`` methods, ``extend`` and ``fold`` are
    coroutines and ``summarize_fn`` may be async. With ``background=True`` an add returns once the
    message is appended and the fold runs as a task (see :meth:`flush`); meanwhile the context may
    exceed the budget."""

    max_tokens = RollingMemory.max_tokens
    target_tokens = RollingMemory.target_tokens

    def __init__(
        self,
        max_tokens: int = 2000,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        *,
        target_tokens: Optional[int] = None,
        on_evict: Optional[EvictHook] = None,
        background: bool = False,
    ) -> None:
        super().__init__(
            TokenBudget(max_tokens, target_tokens, token_counter),
            summarize_fn,
            on_evict=on_evict,
            background=background,
        )

    @classmethod
    def cached(
        cls,
        max_tokens: int = 2000,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        *,
        provider: Union[CacheProfile, str, None] = None,
        clock: Optional[Callable[[], float]] = None,
        prefix_tokens: int = 0,
        on_evict: Optional[EvictHook] = None,
        background: bool = False,
    ) -> AsyncRollingMemory:
        """:meth:`RollingMemory.cached` for async code."""
        memory = cls.__new__(cls)
        policy = CacheAwareBudget(
            max_tokens, token_counter, provider=provider, clock=clock, prefix_tokens=prefix_tokens
        )
        AsyncMemory.__init__(memory, policy, summarize_fn, on_evict=on_evict, background=background)
        return memory


class BufferMemory(_SyncMemory):
    """Keeps every message; never evicts, never summarizes. A loaded summary is kept and shown.
    Policy: :class:`~rollmem.policies.KeepAll`."""

    def __init__(self) -> None:
        super().__init__(KeepAll())


class WindowMemory(_SyncMemory):
    """The most recent ``max_messages`` messages (whole units, aligned, the newest unit always
    kept); what leaves is dropped. A loaded summary is kept and shown. Policy:
    :class:`~rollmem.policies.MessageWindow`."""

    max_messages = _PolicySetting("max_messages", "How many messages the window holds (an ``int`` > 0).")

    def __init__(self, max_messages: int, *, on_evict: Optional[EvictHook] = None) -> None:
        super().__init__(MessageWindow(max_messages), on_evict=on_evict)


class SummaryMemory(Memory):
    """Summary only: every add folds the pending buffer (all but pinned messages) into the summary
    with one call. If the call fails the message stays in the buffer until the next add folds it.
    Policy: :class:`~rollmem.policies.FoldAll`."""

    def __init__(self, summarize_fn: SummarizeFn, *, on_evict: Optional[EvictHook] = None) -> None:
        _check_summarizer(summarize_fn)
        super().__init__(FoldAll(), summarize_fn, on_evict=on_evict)


class AsyncSummaryMemory(AsyncMemory, twin_of=SummaryMemory):
    """:class:`SummaryMemory` for async code, with the concurrency guarantees of
    :class:`AsyncRollingMemory`."""

    def __init__(
        self,
        summarize_fn: Union[SummarizeFn, AsyncSummarizeFn],
        *,
        on_evict: Optional[EvictHook] = None,
        background: bool = False,
    ) -> None:
        _check_summarizer(summarize_fn)
        super().__init__(FoldAll(), summarize_fn, on_evict=on_evict, background=background)

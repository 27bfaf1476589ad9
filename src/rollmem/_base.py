"""The base of every memory class (private; the classes are in :mod:`rollmem.memory`).

:class:`_MemoryState` holds the summary and the buffer (with its :class:`~rollmem._ledger.Ledger`),
measures what is added and makes the plain changes, each recorded (:mod:`rollmem.changes`); it
calls no callback but the counter. :class:`_Folding` adds the *flows*, generators written once
that yield the calls to make (:class:`_Call`) and receive their results or exceptions: the fold
(in its span, :func:`rollmem._tracing.fold_span`), settling after an add, ``extend``,
``fold(keep_last)``, ``replay``. The drivers run them with :mod:`rollmem._flow`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Callable, ClassVar, Optional, get_args

from . import _tracing
from . import _validate as v
from ._flow import Flow
from ._ledger import COST_LIMIT, Ledger, Plan, checked_messages
from ._types import EvictHook, TokenCounter
from .changes import (
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
from .errors import InvalidStateError
from .message import SYSTEM, Message
from .policies import Policy


class _MemoryState:
    """State, measuring and the plain changes shared by every memory class; the eviction rule is
    the ``policy`` given to the constructor."""

    _sync_callbacks: ClassVar[bool] = False
    """Declared by the driver: ``True`` when it calls ``summarize_fn`` and ``on_evict`` without
    awaiting them (coroutine functions are then refused, with advice naming the async twin)."""
    _async_twin: ClassVar[str] = ""
    """Declared by a sync class that has an async twin (``"AsyncRollingMemory"``): the advice."""

    def __init__(
        self,
        policy: Policy,
        summarize_fn: Optional[Callable[..., Any]] = None,
        on_evict: Optional[EvictHook] = None,
    ) -> None:
        if self._sync_callbacks:
            v.check_not_coroutine("summarize_fn", summarize_fn, self._async_advice())
            v.check_not_coroutine("on_evict", on_evict, self._async_advice())
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

    def _async_advice(self) -> str:
        if self._async_twin:
            return f"use {self._async_twin} for async callables"
        name = type(self).__name__
        return f"{name} calls it synchronously; pass a plain function (AsyncMemory takes coroutines)"

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
        if type(cost) is not int or not 0 <= cost < COST_LIMIT:
            source = self._policy.cost_source
            if not v.is_int(cost):
                raise TypeError(f"{source} returned {v.type_name(cost)} for {where}; expected int")
            if not 0 <= cost < COST_LIMIT:
                raise ValueError(
                    f"{source} returned {cost} for {where}; expected a non-negative int below 2**63"
                )
        return cost

    def _measure_at(self, message: Message, position: int) -> int:
        return self._measure(message, f"buffer[{position}]")

    def _summary_cost(self, summary: str) -> int:
        """The tokens of ``summary`` (0 when empty), measured once per summary text."""
        text, tokens = self._summary_tokens
        if text != summary:
            tokens = self._measure(Message(SYSTEM, summary), "the summary")
            self._summary_tokens = (summary, tokens)
        return tokens if summary else 0

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

    def _append(self, messages: Iterable[Message]) -> bool:
        """Check, count, then append them all; a failure appends nothing. ``False`` when none."""
        batch = list(messages)
        for index, message in enumerate(batch):
            if not isinstance(message, Message):
                raise v.type_error(f"messages[{index}]", "Message", message)
        if not batch:
            return False
        costs = [self._measure(message, f"messages[{i}]") for i, message in enumerate(batch)]
        with self._lock:
            ledger = self._ledger
            ledger.sync(self._measure_at)
            for message, cost in zip(batch, costs):
                ledger.append(message, cost)
            self._record(Appended(tuple(batch), tuple(costs)))
        return True

    # -- plain changes ----------------------------------------------------------------------

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

    def _restore(self, summary: str, messages: list[Message], costs: Optional[list[int]] = None) -> None:
        with self._lock:
            self._summary = summary
            if costs is None:
                self._ledger.replace(messages)  # counted at the next sync
            else:
                self._ledger.load(messages, costs)
            self._generation += 1
            self._record(Restored(summary, tuple(messages)))

    # -- recording changes ------------------------------------------------------------------

    def _record(self, change: Change) -> None:
        """Append ``change`` to every open recording; the caller holds the state lock."""
        for changes in self._recorders:
            changes.append(change)

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
            v.check_not_coroutine("on_evict", hook, self._async_advice())
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


PlanFn = Callable[[Ledger], Optional[Plan]]


class _Call:
    """A call a flow asks its driver to make: the sync driver calls it, the async driver also
    awaits what it returns when that is awaitable. ``summary``: the result must be a summary
    (the sync driver refuses an awaitable one)."""

    __slots__ = ("args", "fn", "summary")

    def __init__(self, fn: Callable[..., Any], *args: Any, summary: bool = False) -> None:
        self.fn = fn
        self.args = args
        self.summary = summary


class _Fold:
    """A fold between its plan and its end: what was cut, and what the commit must still find."""

    __slots__ = ("after", "ended", "generation", "keep_last", "plan", "summary")

    def __init__(self, plan: Plan, summary: str, generation: int, keep_last: Optional[int]) -> None:
        self.plan = plan
        self.summary = summary
        self.generation = generation
        self.keep_last = keep_last  # set for an explicit fold(keep_last)
        self.after = 0  # the buffer's total once committed
        self.ended = False  # committed, discarded or failed


class _Folding(_MemoryState):
    """The fold flow and the flows of settling after an add, ``extend``, ``fold(keep_last)`` and
    ``replay``; the driver runs them (:meth:`_run`, :meth:`_prune`)."""

    _folds_on_request: ClassVar[bool] = False
    """Declared by the classes with a public ``fold()``: ``replay`` redoes explicit folds."""
    _run: Callable[..., Any]
    """The driver's ``_run(plan_fn, keep_last=None)``: :meth:`_fold_flow` under its fold lock;
    ``0`` when called back from inside its own fold (that fold goes on)."""
    _prune: Callable[[], Any]
    """The driver's eviction after an add (:meth:`_settle_flow`)."""

    def _needs_fold(self) -> bool:
        """Whether the policy may find something to evict (or the buffer must be recounted)."""
        ledger = self._ledger
        return ledger.dirty or self._policy.over(ledger)

    def _begin_fold(self, plan_fn: PlanFn, keep_last: Optional[int]) -> Optional[_Fold]:
        """Plan a fold; ``None`` when there is nothing to cut."""
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
        fold.ended = True
        with self._lock:
            self._ledger.abort(fold.plan)
            if isinstance(error, Exception):
                self._counts["failed_folds"] += 1

    def _finish_fold(self, fold: _Fold, new_summary: str) -> Optional[int]:
        """Commit a fold; returns how many messages left the buffer, or ``None`` when a change made
        meanwhile (a clear, a pin, an assignment) won."""
        fold.ended = True
        plan = fold.plan
        with self._lock:
            ledger = self._ledger
            if fold.generation != self._generation or not ledger.commit(plan):
                ledger.abort(plan)
                return None
            self._summary = new_summary
            fold.after = ledger.total
            counts = self._counts
            counts["folds"] += 1
            left = len(plan.messages)
            counts["messages_dropped" if self._summarize_fn is None else "messages_summarized"] += left
            if self._recorders:
                self._record_fold(new_summary, plan, fold.keep_last)
        return left

    def _record_fold(self, summary: str, plan: Optional[Plan], keep_last: Optional[int]) -> None:
        """Record a fold: what left, at its buffer positions before the commit (none without a
        ``plan``); the caller holds the state lock."""
        positions, cut = (tuple(plan.positions), tuple(plan.messages)) if plan else ((), ())
        if self._summarize_fn is None:
            self._record(Dropped(positions, cut, keep_last))
        else:
            self._record(Folded(summary, positions, cut, keep_last))

    def _fold_flow(self, plan_fn: PlanFn, keep_last: Optional[int]) -> Flow[_Call, Optional[int]]:
        """One fold, in its span: plan, ``summarize(summary, evicted)``, commit, then
        ``on_evict(evicted)``. The driver runs it holding its fold lock (:meth:`_run`); a failed or
        cancelled summarizer call leaves everything as it was and propagates. Returns what
        :meth:`_finish_fold` does (``0`` when there is nothing to cut)."""
        fold = self._begin_fold(plan_fn, keep_last)
        if fold is None:
            return 0
        evicted = fold.plan.messages
        try:
            with _tracing.fold_span(self) as span:
                new_summary = fold.summary
                if self._summarize_fn is not None:
                    # a fresh list: a callback that changes what it is given cannot reach the ledger
                    call = _Call(self._summarize_fn, new_summary, list(evicted), summary=True)
                    new_summary = yield call
                    if type(new_summary) is not str or not new_summary.isascii():
                        new_summary = _checked_summary(new_summary)
                count = self._finish_fold(fold, new_summary)
                if span is not None:
                    self._trace(span, fold, count, new_summary)
                if count and self._on_evict is not None:
                    yield _Call(self._on_evict, list(evicted))
                return count
        except BaseException as error:
            if not fold.ended:
                self._fail_fold(fold, error)
            raise

    def _trace(self, span: Any, fold: _Fold, count: Optional[int], summary: str) -> None:
        """The integer attributes of a fold's span (see :mod:`rollmem._tracing`)."""
        span.set_attribute(_tracing.MESSAGES, count or 0)
        if count and self._policy.counts_tokens:
            span.set_attribute(_tracing.TOKENS_BEFORE, fold.after + fold.plan.cost)
            span.set_attribute(_tracing.TOKENS_AFTER, fold.after)
            try:
                span.set_attribute(_tracing.SUMMARY_TOKENS, self._summary_cost(summary))
            except Exception as error:  # the fold is committed: a counter failing here only shows
                span.record_exception(error)

    def _settle_flow(self) -> Flow[_Call, None]:
        """Fold until the policy is satisfied (a fold discarded by a change made meanwhile is
        planned again; one that finds nothing to cut ends it)."""
        while self._needs_fold():
            if (yield _Call(self._run, self._policy.plan)) == 0:
                return

    def _fold_keeping_flow(self, keep_last: object) -> Flow[_Call, int]:
        """``fold(keep_last)``: fold all but the newest ``keep_last``; records a fold of nothing
        when nothing left."""
        keep = v.check_int("keep_last", keep_last, 0)
        count = yield _Call(self._run, lambda ledger: ledger.plan_keep_last(keep), keep)
        if not count:
            with self._lock:
                self._record_fold(self._summary, None, keep)
        return count or 0

    def _extend_flow(self, messages: Iterable[Message]) -> Flow[_Call, None]:
        """``extend(messages)``: append them all (or none), then evict once."""
        if self._append(messages):
            yield _Call(self._prune)

    def _replay_flow(self, changes: Iterable[Change]) -> Flow[_Call, None]:
        """The replay flow: applies the plain changes itself and runs the flows of ``extend`` and
        (on the classes with a public ``fold()``) of ``fold`` for the adds and explicit folds."""
        batch = list(changes)
        for index, change in enumerate(batch):
            if not isinstance(change, get_args(Change)):
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


def _checked_summary(summary: object) -> str:
    """What ``summarize_fn`` returned, if it is a summary."""
    if not isinstance(summary, str):
        raise TypeError(f"summarize_fn returned {type(summary).__name__}; expected str")
    if not summary.isascii():
        try:
            v.check_text(summary, "summary")
        except InvalidStateError as error:
            raise ValueError(f"summarize_fn returned a summary that is {error.problem}") from None
    return summary

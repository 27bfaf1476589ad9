"""The memory classes: a running summary plus a verbatim buffer of recent messages.

Every class shares one state (``summary``, ``buffer``), one serialization format and one fold
*flow*: :meth:`_Memory._begin_fold` plans what leaves, the driver asks for
``summarize(summary, evicted)``, then :meth:`_Memory._finish_fold` commits (or
:meth:`_Memory._fail_fold` leaves everything as it was). Every decision lives in those three; the
sync and async drivers differ only in how they call the summarizer and the hook (await or not).
Policies differ only in how a message is measured and what a plan cuts.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, ClassVar, Optional, TypeVar, Union

from . import _validate as v
from ._ledger import Ledger, Plan
from .changes import (
    Appended,
    BufferAssigned,
    Change,
    Cleared,
    Dropped,
    Folded,
    Pinned,
    SummaryAssigned,
    Unpinned,
)
from .errors import InvalidStateError
from .message import ASSISTANT, NO_METADATA, SYSTEM, TOOL, USER, Message, ToolCall, message_from_dict

__all__ = [
    "AsyncRollingMemory",
    "AsyncSummarizeFn",
    "AsyncSummaryMemory",
    "BufferMemory",
    "EvictHook",
    "MemoryStats",
    "RollingMemory",
    "SummarizeFn",
    "SummaryMemory",
    "TokenCounter",
    "WindowMemory",
    "words",
]

TokenCounter = Callable[[str], int]
"""Counts the tokens of a text; must return a non-negative ``int``."""
SummarizeFn = Callable[[str, Sequence[Message]], str]
"""``summarize(existing_summary, evicted_messages) -> new_summary``."""
AsyncSummarizeFn = Callable[[str, Sequence[Message]], Awaitable[str]]
"""The coroutine form of :data:`SummarizeFn`, accepted by the async classes."""
EvictHook = Callable[[Sequence[Message]], Any]
"""Called with the messages that left the buffer, once per committed eviction."""

STATE_VERSION = 2
DISCARDED = -1  # what a fold flow returns when a change made while it ran won
_READABLE_VERSIONS = (1, 2)

_M = TypeVar("_M", bound="_Memory")


def words(text: str) -> int:
    """The default token counter: the number of whitespace-separated words."""
    return len(text.split())


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
        self.keep_last = keep_last


def _check_callable(name: str, value: object) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{name}: expected a callable or None, got {type(value).__name__}")


def _check_not_async(name: str, value: object, async_class: str) -> None:
    if inspect.iscoroutinefunction(value):
        raise TypeError(f"{name} is a coroutine function; use {async_class} for async callables")


def _check_budget(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def _awaitable_result(result: object, async_class: str) -> TypeError:
    close = getattr(result, "close", None)
    if callable(close):
        close()  # a coroutine that is never awaited would warn
    return TypeError(f"summarize_fn returned an awaitable; use {async_class} for async summarizers")


class _Memory:
    """State, reads, serialization and the fold flow shared by every memory class."""

    _async_twin: ClassVar[str] = "AsyncRollingMemory"

    def __init__(
        self,
        summarize_fn: Optional[Callable[..., Any]] = None,
        token_counter: Optional[TokenCounter] = None,
        on_evict: Optional[EvictHook] = None,
    ) -> None:
        _check_callable("summarize_fn", summarize_fn)
        _check_callable("token_counter", token_counter)
        _check_callable("on_evict", on_evict)
        self._summary = ""
        self._ledger = Ledger()
        self._lock = threading.RLock()
        self._summarize_fn = summarize_fn
        self._token_counter = token_counter
        self._on_evict = on_evict
        self._generation = 0  # bumped by clear() and by assignments: a fold in flight then loses
        self._counts = dict.fromkeys(
            ("folds", "summarizer_calls", "failed_folds", "messages_summarized", "messages_dropped"), 0
        )
        self._summary_tokens: tuple[str, int] = ("", 0)
        self._recorders: list[list[Change]] = []  # the lists of the record() blocks open now

    # -- public state -----------------------------------------------------------------------

    @property
    def summary(self) -> str:
        """The running summary of everything folded out of the buffer (``""`` when none)."""
        return self._summary

    @summary.setter
    def summary(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"summary: expected str, got {type(value).__name__}")
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
        with self._lock:
            self._ledger.replace(messages)
            self._generation += 1
            self._record(BufferAssigned(tuple(self._ledger.items)))

    # -- policy hooks -----------------------------------------------------------------------

    def _counts_tokens(self) -> bool:
        return False

    def _cost(self, message: Message) -> int:
        return 0

    def _plan(self) -> Optional[Plan]:
        return None

    def _needs_fold(self) -> bool:
        return False

    def _limits(self) -> tuple[Optional[int], Optional[int]]:
        return None, None

    # -- measuring and appending ------------------------------------------------------------

    def _measure(self, message: Message, where: str) -> int:
        counter = self._token_counter
        if counter is None:
            return self._cost(message)
        cost = counter(message.token_text())
        if type(cost) is not int and (isinstance(cost, bool) or not isinstance(cost, int)):
            raise TypeError(f"token_counter returned {type(cost).__name__} for {where}; expected int")
        if cost < 0:
            raise ValueError(f"token_counter returned {cost} for {where}; expected a non-negative int")
        return cost

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
        if type(tool_calls) is not tuple:
            tool_calls = tuple(tool_calls)
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
                raise TypeError(f"messages[{index}]: expected Message, got {type(message).__name__}")
        return batch

    def _record(self, change: Change) -> None:
        for changes in self._recorders:
            changes.append(change)

    # -- the public change record ------------------------------------------------------------

    @contextlib.contextmanager
    def record(self) -> Iterator[list[Change]]:
        """Collect every change made to this memory during the ``with`` block, from any thread or
        task, into the yielded list, in the order they happened (see :mod:`rollmem.changes`).
        Blocks may nest or overlap; each gets every change made while it is open."""
        changes: list[Change] = []
        with self._lock:
            self._recorders.append(changes)
        try:
            yield changes
        finally:
            with self._lock:
                self._recorders = [other for other in self._recorders if other is not changes]

    @property
    def on_evict(self) -> Optional[EvictHook]:
        """The hook called with the messages of each committed eviction (``None``: none). It may be
        replaced (:mod:`rollmem.sessions` holds it back until a session's changes are saved)."""
        return self._on_evict

    @on_evict.setter
    def on_evict(self, hook: Optional[EvictHook]) -> None:
        _check_callable("on_evict", hook)
        self._on_evict = hook

    @property
    def token_counter(self) -> Optional[TokenCounter]:
        """The counter that measures each message (``None`` for classes that count no tokens)."""
        return self._token_counter

    def costs(self) -> list[int]:
        """The cost of each buffer message by this memory's rule, aligned with :attr:`buffer`."""
        with self._lock:
            ledger = self._ledger
            ledger.sync(self._measure_at)
            return ledger.costs()

    def restore(
        self, summary: str, messages: Iterable[Message], costs: Optional[Sequence[int]] = None
    ) -> None:
        """Replace summary and buffer wholesale, as a load does: nothing is recorded, nothing is
        evicted, a fold in flight is discarded. With ``costs`` (one non-negative ``int`` per message,
        measured by this memory's rule) the messages are not counted again. Nothing changes on error."""
        if not isinstance(summary, str):
            raise TypeError(f"summary: expected str, got {type(summary).__name__}")
        batch = self._check_batch(messages)
        known: Optional[list[int]] = None
        if costs is not None:
            known = list(costs)
            if len(known) != len(batch):
                raise ValueError(f"costs: expected {len(batch)} costs, got {len(known)}")
            for index, cost in enumerate(known):
                if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
                    raise TypeError(f"costs[{index}]: expected a non-negative int, got {cost!r}")
        with self._lock:
            ledger = self._ledger
            ledger.replace(batch)
            if known is not None:
                trusted = known
                ledger.sync(lambda message, position: trusted[position])
            self._summary = summary
            self._generation += 1

    # -- the fold flow ----------------------------------------------------------------------

    def _begin_fold(
        self, plan_fn: Callable[[], Optional[Plan]], keep_last: Optional[int] = None
    ) -> Optional[_Fold]:
        """Plan a fold; ``None`` when there is nothing to cut. The caller holds the fold lock and
        ends the fold with :meth:`_finish_fold` or :meth:`_fail_fold`."""
        ledger = self._ledger
        with self._lock:
            if ledger.dirty:
                ledger.sync(self._measure_at)
            plan = plan_fn()
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

    def _finish_fold(self, fold: _Fold, new_summary: object) -> int:
        """Commit a fold with the summarizer's answer; returns how many messages left the buffer,
        or ``DISCARDED`` when a change made meanwhile (a clear, a pin, an assignment) won."""
        if not isinstance(new_summary, str):
            error = TypeError(f"summarize_fn returned {type(new_summary).__name__}; expected str")
            self._fail_fold(fold, error)
            raise error
        plan = fold.plan
        with self._lock:
            ledger = self._ledger
            before = list(ledger.items) if self._recorders else []
            if fold.generation != self._generation or not ledger.commit(plan):
                ledger.abort(plan)
                return DISCARDED
            if self._recorders:
                self._record_fold(fold, before, new_summary)
            self._summary = new_summary
            counts = self._counts
            counts["folds"] += 1
            key = "messages_dropped" if self._summarize_fn is None else "messages_summarized"
            counts[key] += len(plan.messages)
        return len(plan.messages)

    def _record_fold(self, fold: _Fold, before: list[Message], new_summary: str) -> None:
        cut = fold.plan.messages
        positions: list[int] = []
        index = 0
        for message in cut:  # the cut is an ordered subsequence of the buffer's front
            while before[index] is not message:
                index += 1
            positions.append(index)
            index += 1
        if self._summarize_fn is None:
            self._record(Dropped(tuple(positions), tuple(cut), fold.keep_last))
        else:
            self._record(Folded(new_summary, tuple(positions), tuple(cut), fold.keep_last))

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
            counts_tokens = self._counts_tokens()
            summary_tokens: Optional[int] = None
            if counts_tokens:
                text, tokens = self._summary_tokens
                if text != self._summary:
                    tokens = self._measure(Message(SYSTEM, self._summary), "the summary")
                    self._summary_tokens = (self._summary, tokens)
                summary_tokens = tokens if self._summary else 0
            limit, goal = self._limits()
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

    # -- serialization ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """``{"version": 2, "summary": ..., "buffer": [message dicts]}``, JSON-ready."""
        with self._lock:
            return {
                "version": STATE_VERSION,
                "summary": self._summary,
                "buffer": [message.to_dict() for message in self._ledger.items],
            }

    def _load(self: _M, data: object) -> _M:
        """Restore state verbatim (no pruning, no summarizer call). Nothing changes on error."""
        summary, messages = parse_state(data)
        self._summary = summary
        self._ledger.replace(messages)
        return self


def parse_state(data: object) -> tuple[str, list[Message]]:
    """Read a saved state (versions 1 and 2) into its summary and messages; errors name the field."""
    data = v.expect_mapping(data, "")
    version = v.get_int(data, "version", "")
    if version not in _READABLE_VERSIONS:
        raise InvalidStateError(
            "version", f"unsupported state version {version}; this rollmem reads versions 1 and 2"
        )
    summary = v.get_str(data, "summary", "")
    items = v.get_list(data, "buffer", "")
    messages = [message_from_dict(item, f"buffer[{index}]") for index, item in enumerate(items)]
    return summary, messages


# -- policies: how a message costs and what a plan cuts -----------------------------------------


class _Capped(_Memory):
    """Over a limit, evict whole aligned units down to a goal; the cost rule weighs the units."""

    def _bounds(self) -> tuple[int, int]:
        """``(limit, goal)`` in the units of :meth:`_Memory._measure`."""
        raise NotImplementedError

    def _needs_fold(self) -> bool:
        ledger = self._ledger
        return ledger.dirty or ledger.total > self._bounds()[0]

    def _plan(self) -> Optional[Plan]:
        return self._ledger.plan_budget(*self._bounds())


class _Budget(_Capped):
    """Token budget with hysteresis: over ``max_tokens``, evict down to ``target_tokens``."""

    def _setup_budget(self, max_tokens: int, target_tokens: Optional[int]) -> None:
        self.max_tokens = _check_budget("max_tokens", max_tokens)
        if target_tokens is None:
            target_tokens = self.max_tokens
        self.target_tokens = _check_budget("target_tokens", target_tokens)
        if self.target_tokens > self.max_tokens:
            raise ValueError(
                f"target_tokens must be at most max_tokens ({self.max_tokens}), got {self.target_tokens}"
            )
        if self._token_counter is None:
            self._token_counter = words

    def _counts_tokens(self) -> bool:
        return True

    def _bounds(self) -> tuple[int, int]:
        return self.max_tokens, min(self.target_tokens, self.max_tokens)

    def _limits(self) -> tuple[Optional[int], Optional[int]]:
        return self.max_tokens, self.target_tokens


class _Everything(_Memory):
    """Fold every non-pinned message after each add."""

    def _needs_fold(self) -> bool:
        ledger = self._ledger
        return ledger.dirty or len(ledger.items) > ledger.pinned

    def _plan(self) -> Optional[Plan]:
        return self._ledger.plan_keep_last(0)


# -- sync and async drivers ------------------------------------------------------------------


class _SyncMemory(_Memory):
    """Plain methods; thread-safe. Folds are serialized and run outside the state lock."""

    def __init__(
        self,
        summarize_fn: Optional[SummarizeFn] = None,
        token_counter: Optional[TokenCounter] = None,
        on_evict: Optional[EvictHook] = None,
    ) -> None:
        _check_not_async("summarize_fn", summarize_fn, self._async_twin)
        _check_not_async("on_evict", on_evict, self._async_twin)
        super().__init__(summarize_fn, token_counter, on_evict)
        self._fold_lock = threading.RLock()

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
        batch = self._check_batch(messages)
        if batch:
            self._append(batch)
            self._prune()

    def _prune(self) -> None:
        while self._needs_fold() and self._run(self._plan) != 0:
            pass  # a fold discarded by a change made meanwhile is planned again

    def _run(self, plan_fn: Callable[[], Optional[Plan]], keep_last: Optional[int] = None) -> int:
        with self._fold_lock:
            if self._ledger.in_flight:
                return 0  # called back from inside this thread's own fold: leave it to that fold
            fold = self._begin_fold(plan_fn, keep_last)
            if fold is None:
                return 0
            summarize = self._summarize_fn
            new_summary: object = fold.summary
            if summarize is not None:
                try:
                    new_summary = summarize(fold.summary, fold.plan.messages)
                    if type(new_summary) is not str and inspect.isawaitable(new_summary):
                        raise _awaitable_result(new_summary, self._async_twin)
                except BaseException as exc:
                    self._fail_fold(fold, exc)
                    raise
            count = self._finish_fold(fold, new_summary)
            if count > 0 and self._on_evict is not None:
                self._on_evict(fold.plan.messages)
            return count


class _SyncFolding(_SyncMemory):
    def fold(self, keep_last: int = 0) -> int:
        """Fold everything but the newest ``keep_last`` messages (whole units; pinned stay) now, in
        one summarizer call. Returns how many messages left the buffer."""
        keep = _check_keep_last(keep_last)
        count = self._run(lambda: self._ledger.plan_keep_last(keep), keep)
        return max(count, 0)


def _check_keep_last(keep_last: object) -> int:
    if isinstance(keep_last, bool) or not isinstance(keep_last, int):
        raise TypeError(f"keep_last: expected int, got {type(keep_last).__name__}")
    if keep_last < 0:
        raise ValueError(f"keep_last must be >= 0, got {keep_last}")
    return keep_last


class _AsyncMemory(_Memory):
    """Coroutine methods; safe for many tasks on one loop. Folds are serialized."""

    def __init__(
        self,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        on_evict: Optional[EvictHook] = None,
        background: bool = False,
    ) -> None:
        super().__init__(summarize_fn, token_counter, on_evict)
        if not isinstance(background, bool):
            raise TypeError(f"background: expected bool, got {type(background).__name__}")
        self._background = background
        self._fold_lock: Optional[asyncio.Lock] = None
        self._fold_lock_loop: Optional[asyncio.AbstractEventLoop] = None
        self._fold_owner: Optional[asyncio.Task[Any]] = None
        self._task: Optional[asyncio.Task[None]] = None
        self._task_error: Optional[BaseException] = None

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
        batch = self._check_batch(messages)
        if batch:
            self._append(batch)
            await self._prune()

    async def fold(self, keep_last: int = 0) -> int:
        """Fold everything but the newest ``keep_last`` messages (whole units; pinned stay) now, in
        one summarizer call. Returns how many messages left the buffer."""
        keep = _check_keep_last(keep_last)
        count = await self._run(lambda: self._ledger.plan_keep_last(keep), keep)
        return max(count, 0)

    async def flush(self) -> None:
        """Wait for the folds in flight; re-raise the last background fold failure, once."""
        task = self._task
        if task is not None:
            await asyncio.wait((task,))
        async with self._lock_for_loop():
            pass
        error, self._task_error = self._task_error, None
        if error is not None:
            raise error

    async def _prune(self) -> None:
        if not self._needs_fold():
            return
        if not self._background:
            await self._fold_until_settled()
        elif self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._fold_in_background())

    async def _fold_until_settled(self) -> None:
        while self._needs_fold() and await self._run(self._plan) != 0:
            pass  # a fold discarded by a change made meanwhile is planned again

    async def _fold_in_background(self) -> None:
        try:
            await self._fold_until_settled()
        except Exception as exc:  # kept for flush(); retried on the next add
            self._task_error = exc

    def _lock_for_loop(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._fold_lock is None or (self._fold_lock_loop is not loop and not self._fold_lock.locked()):
            self._fold_lock = asyncio.Lock()
            self._fold_lock_loop = loop
        return self._fold_lock

    async def _run(self, plan_fn: Callable[[], Optional[Plan]], keep_last: Optional[int] = None) -> int:
        task = asyncio.current_task()
        if self._fold_owner is task and self._ledger.in_flight:
            return 0  # called back from inside this task's own fold: leave it to that fold
        async with self._lock_for_loop():
            self._fold_owner = task
            try:
                fold = self._begin_fold(plan_fn, keep_last)
                if fold is None:
                    return 0
                summarize = self._summarize_fn
                new_summary: object = fold.summary
                if summarize is not None:
                    try:
                        new_summary = summarize(fold.summary, fold.plan.messages)
                        if inspect.isawaitable(new_summary):
                            new_summary = await new_summary
                    except BaseException as exc:
                        self._fail_fold(fold, exc)
                        raise
                count = self._finish_fold(fold, new_summary)
                if count > 0 and self._on_evict is not None:
                    outcome = self._on_evict(fold.plan.messages)
                    if inspect.isawaitable(outcome):
                        await outcome
                return count
            finally:
                self._fold_owner = None


# -- the public classes ----------------------------------------------------------------------


class RollingMemory(_Budget, _SyncFolding):
    """A running summary plus the most recent turns verbatim, within ``max_tokens``.

    After each add that puts the buffer over ``max_tokens``, the oldest whole units go (down to
    ``target_tokens``, default ``max_tokens``), aligned so the buffer does not start with a reply,
    never the newest unit; they are folded into the summary by one ``summarize_fn`` call, or
    dropped without one. If the summarizer raises, nothing changes and the error propagates.
    Thread-safe.
    """

    def __init__(
        self,
        max_tokens: int = 2000,
        summarize_fn: Optional[SummarizeFn] = None,
        token_counter: Optional[TokenCounter] = None,
        *,
        target_tokens: Optional[int] = None,
        on_evict: Optional[EvictHook] = None,
    ) -> None:
        super().__init__(summarize_fn, token_counter, on_evict)
        self._setup_budget(max_tokens, target_tokens)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        max_tokens: int = 2000,
        summarize_fn: Optional[SummarizeFn] = None,
        token_counter: Optional[TokenCounter] = None,
        target_tokens: Optional[int] = None,
        on_evict: Optional[EvictHook] = None,
    ) -> RollingMemory:
        """Restore ``to_dict()`` output (state versions 1 and 2) verbatim: no pruning, no summarizer
        call; the budget applies again from the next add."""
        memory = cls(max_tokens, summarize_fn, token_counter, target_tokens=target_tokens, on_evict=on_evict)
        return memory._load(data)


class AsyncRollingMemory(_Budget, _AsyncMemory):
    """:class:`RollingMemory` for async code: the ``add_*`` methods, ``extend`` and ``fold`` are
    coroutines and ``summarize_fn`` may be async. With ``background=True`` an add returns once the
    message is appended and the fold runs as a task (see :meth:`flush`); meanwhile the context may
    exceed the budget."""

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
        super().__init__(summarize_fn, token_counter, on_evict, background)
        self._setup_budget(max_tokens, target_tokens)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        max_tokens: int = 2000,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        target_tokens: Optional[int] = None,
        on_evict: Optional[EvictHook] = None,
        background: bool = False,
    ) -> AsyncRollingMemory:
        """Restore ``to_dict()`` output verbatim, as :meth:`RollingMemory.from_dict` does."""
        memory = cls(
            max_tokens,
            summarize_fn,
            token_counter,
            target_tokens=target_tokens,
            on_evict=on_evict,
            background=background,
        )
        return memory._load(data)


class BufferMemory(_SyncMemory):
    """Keeps every message; never evicts, never summarizes. A loaded summary is kept and shown."""

    def __init__(self) -> None:
        super().__init__()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BufferMemory:
        """Restore ``to_dict()`` output verbatim."""
        return cls()._load(data)


class WindowMemory(_Capped, _SyncMemory):
    """The most recent ``max_messages`` messages (whole units, aligned, the newest unit always
    kept); what leaves is dropped. A loaded summary is kept and shown."""

    def __init__(self, max_messages: int, *, on_evict: Optional[EvictHook] = None) -> None:
        super().__init__(on_evict=on_evict)
        self.max_messages = _check_budget("max_messages", max_messages)

    def _cost(self, message: Message) -> int:
        return 1

    def _bounds(self) -> tuple[int, int]:
        return self.max_messages, self.max_messages

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, max_messages: int, on_evict: Optional[EvictHook] = None
    ) -> WindowMemory:
        """Restore ``to_dict()`` output verbatim; the window applies from the next add."""
        return cls(max_messages, on_evict=on_evict)._load(data)


def _require_summarizer(summarize_fn: object) -> None:
    if summarize_fn is None:
        raise ValueError("summarize_fn is required: a summary-only memory has nowhere else to keep turns")


class SummaryMemory(_Everything, _SyncFolding):
    """Summary only: every add folds the pending buffer (all but pinned messages) into the summary
    with one call. If the call fails the message stays in the buffer until the next add folds it."""

    _async_twin = "AsyncSummaryMemory"

    def __init__(self, summarize_fn: SummarizeFn, *, on_evict: Optional[EvictHook] = None) -> None:
        _require_summarizer(summarize_fn)
        super().__init__(summarize_fn, on_evict=on_evict)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, summarize_fn: SummarizeFn, on_evict: Optional[EvictHook] = None
    ) -> SummaryMemory:
        """Restore ``to_dict()`` output verbatim, without folding."""
        return cls(summarize_fn, on_evict=on_evict)._load(data)


class AsyncSummaryMemory(_Everything, _AsyncMemory):
    """:class:`SummaryMemory` for async code, with the concurrency guarantees of
    :class:`AsyncRollingMemory`."""

    _async_twin = "AsyncSummaryMemory"

    def __init__(
        self,
        summarize_fn: Union[SummarizeFn, AsyncSummarizeFn],
        *,
        on_evict: Optional[EvictHook] = None,
        background: bool = False,
    ) -> None:
        _require_summarizer(summarize_fn)
        super().__init__(summarize_fn, on_evict=on_evict, background=background)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        summarize_fn: Union[SummarizeFn, AsyncSummarizeFn],
        on_evict: Optional[EvictHook] = None,
        background: bool = False,
    ) -> AsyncSummaryMemory:
        """Restore ``to_dict()`` output verbatim, without folding."""
        return cls(summarize_fn, on_evict=on_evict, background=background)._load(data)

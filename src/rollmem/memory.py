"""The memory classes: a running summary plus a verbatim buffer of recent messages.

Every class is a *policy* (:mod:`rollmem.policies`: the eviction rule, the only one) composed
with a *driver*: sync (plain methods, thread-safe: :class:`Memory` and the classes without a
summarizer) or async (:class:`AsyncMemory`: coroutine methods, optionally folding in a
background task). Both run
the same flows, written once in the base (the fold, settling after an add, ``extend``,
``fold(keep_last)``, ``replay``), and differ in nothing else. Every change is a typed record
(:mod:`rollmem.changes`): ``record()`` collects what a block of work changed, ``replay`` applies
it to another memory (used by :mod:`rollmem.sessions`).

**Adding a memory class** takes one policy and a constructor: subclass :class:`Memory` (sync)
or :class:`AsyncMemory` and pass the policy to ``super().__init__(policy, summarize_fn,
on_evict=...)``; ``from_dict`` and everything else come from the base (see
:mod:`rollmem.policies` for a class with a budget in characters).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional, TypeVar, Union, overload

from . import _validate as v
from ._base import PlanFn, _Call, _Folding
from ._flow import arun, resolved, run
from ._ledger import COST_LIMIT
from ._types import AsyncSummarizeFn, EvictHook, SummarizeFn, TokenCounter
from .changes import Change
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


def _check_summarizer(summarize_fn: object) -> None:
    if summarize_fn is None:
        raise ValueError("summarize_fn is required: a summary-only memory has nowhere else to keep turns")


class _Memory(_Folding):
    """Everything shared by every memory class (state, changes and flows from its bases), with
    the reads and serialization; the eviction rule is the ``policy`` given to the constructor."""

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
            limit, goal = self._policy.limits()
            return MemoryStats(
                messages=len(ledger.items),
                pinned=ledger.pinned,
                buffer_tokens=ledger.total if counts_tokens else None,
                summary_tokens=self._summary_cost(self._summary) if counts_tokens else None,
                max_tokens=limit,
                target_tokens=goal,
                **self._counts,
            )

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
        With ``costs`` (one ``int`` >= 0 and < 2**63 per message, measured by this memory's
        policy, e.g. stored by :mod:`rollmem.sessions`) the messages are not counted again.
        Nothing changes on error; a fold in flight is discarded. The counters of ``stats()`` go
        on."""
        summary, messages = _parse_state(data)
        known: Optional[list[int]] = None
        if costs is not None:
            if isinstance(costs, (str, bytes, Mapping)) or not isinstance(costs, Iterable):
                raise v.type_error("costs", "a sequence of int", costs)
            known = list(costs)
            if len(known) != len(messages):
                raise ValueError(f"costs: expected {len(messages)} costs, got {len(known)}")
            if not set(map(type, known)) <= {int} or (
                known and not 0 <= min(known) <= max(known) < COST_LIMIT
            ):
                for index, cost in enumerate(known):  # name the bad one
                    if v.check_int(f"costs[{index}]", cost, 0) >= COST_LIMIT:
                        raise v.value_error(f"costs[{index}]", "< 2**63", cost)
        self._restore(summary, messages, known)


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
        *,
        on_evict: Optional[EvictHook] = None,
    ) -> None:
        super().__init__(policy, summarize_fn, on_evict)
        self._fold_lock = threading.RLock()

    def _perform(self, call: _Call) -> Any:
        """Make a call a flow yields; a summarizer that returns an awaitable fails."""
        result = call.fn(*call.args)
        if call.summary and type(result) is not str and v.unawaited(result):
            raise TypeError(f"summarize_fn returned an awaitable: {self._async_advice()}")
        return result

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
        metadata = NO_METADATA if metadata is None else metadata
        message = Message(role, content, id, tool_calls, tool_call_id, metadata, pinned)
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
        run(self._extend_flow(messages), self._perform)

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
            return run(self._fold_flow(plan_fn, keep_last), self._perform)

    def replay(self, changes: Iterable[Change]) -> None:
        """Apply recorded changes (see :mod:`rollmem.changes`) through this memory's methods: the
        appended messages are added and this memory's policy evicts as it would have. A
        non-record raises ``TypeError`` before anything changes."""
        run(self._replay_flow(changes), self._perform)


class AsyncMemory(_Memory):
    """:class:`Memory` for async code (the async driver), the base of the async classes: safe for
    many tasks on one loop, folds serialized. The ``add_*`` methods, ``extend`` and ``fold`` are
    coroutines and ``summarize_fn``/``on_evict`` may be async. With ``background=True`` an add
    returns once the message is appended and the fold runs as a task (see :meth:`flush`);
    meanwhile the buffer may exceed what the policy allows."""

    _folds_on_request = True

    def __init__(
        self,
        policy: Policy,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        *,
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

    @staticmethod
    async def _perform(call: _Call) -> Any:
        """Make a call a flow yields, awaiting what returns an awaitable."""
        return await resolved(call.fn(*call.args))

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
        metadata = NO_METADATA if metadata is None else metadata
        message = Message(role, content, id, tool_calls, tool_call_id, metadata, pinned)
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
        await arun(self._extend_flow(messages), self._perform)

    async def fold(self, keep_last: int = 0) -> int:
        """Fold everything but the newest ``keep_last`` messages (whole units; pinned stay) now, in
        one summarizer call (awaited when async). Returns how many messages left the buffer."""
        return await arun(self._fold_keeping_flow(keep_last), self._perform)

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
        await arun(self._settle_flow(), self._perform)

    async def _prune(self) -> None:
        if not self._needs_fold():
            return
        if not self._background:
            await arun(self._settle_flow(), self._perform)
        elif self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._fold_in_background())
        else:
            self._again = True  # if the fold in flight fails, this add gets an attempt of its own

    async def _fold_in_background(self) -> None:
        again = True
        while again:
            self._again = False
            try:
                await arun(self._settle_flow(), self._perform)
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
        if self._fold_owner is task:  # called back from a summarizer or hook of this task's fold,
            if self._ledger.in_flight:  # which holds the lock: leave it to the fold in flight
                return 0
            return await arun(self._fold_flow(plan_fn, keep_last), self._perform)
        async with self._lock_for_loop():
            owner, self._fold_owner = self._fold_owner, task
            try:
                return await arun(self._fold_flow(plan_fn, keep_last), self._perform)
            finally:
                self._fold_owner = owner

    async def replay(self, changes: Iterable[Change]) -> None:
        """Apply recorded changes, as :meth:`Memory.replay` does, awaiting the adds and folds."""
        await arun(self._replay_flow(changes), self._perform)


class Memory(_SyncMemory):
    """A sync memory with any eviction ``policy`` (see :mod:`rollmem.policies`); the base of the
    sync classes that fold. What the policy evicts is folded into the summary by one
    ``summarize_fn`` call (dropped when there is none); if it raises, nothing changes and the
    error propagates. ``on_evict`` is called with what left, after each committed eviction."""

    _folds_on_request = True
    _async_twin = "AsyncMemory"

    def fold(self, keep_last: int = 0) -> int:
        """Fold everything but the newest ``keep_last`` messages (whole units; pinned stay) now, in
        one summarizer call. Returns how many messages left the buffer."""
        return run(self._fold_keeping_flow(keep_last), self._perform)


# -- the public classes: a policy and a driver each ---------------------------------------------


class RollingMemory(Memory):
    """A running summary plus the most recent turns verbatim, within ``max_tokens``.

    After each add that puts the buffer over ``max_tokens``, the oldest whole units go (down to
    ``target_tokens``, default ``max_tokens``), aligned so the buffer does not start with a reply,
    never the newest unit; they are folded into the summary by one ``summarize_fn`` call, or
    dropped without one. If the summarizer raises, nothing changes and the error propagates.
    Thread-safe. Policy: :class:`~rollmem.policies.TokenBudget`.
    """

    _async_twin = "AsyncRollingMemory"

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


class AsyncRollingMemory(AsyncMemory):
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

    _async_twin = "AsyncSummaryMemory"

    def __init__(self, summarize_fn: SummarizeFn, *, on_evict: Optional[EvictHook] = None) -> None:
        _check_summarizer(summarize_fn)
        super().__init__(FoldAll(), summarize_fn, on_evict=on_evict)


class AsyncSummaryMemory(AsyncMemory):
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

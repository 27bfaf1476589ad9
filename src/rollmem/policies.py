"""Eviction policies: *what* a memory evicts and *when*, as one small component.

Every memory class is a policy composed with a driver (see :mod:`rollmem.memory`). The policy is
the only place an eviction rule lives; the driver (sync or async) appends, asks the policy for a
plan, runs the fold and commits. A policy answers three questions about the buffer:

- :meth:`Policy.cost`: how much one message weighs (tokens, 1 per message, characters...);
- :meth:`Policy.over`: after an add, is there anything to evict? (cheap: it runs on every add);
- :meth:`Policy.plan`: which leading units leave, as a :class:`Plan` from the buffer's
  :class:`BufferView` (``plan_budget`` or ``plan_keep_last``), or ``None``.

The rollmem classes use :class:`TokenBudget` (``RollingMemory``), :class:`CacheAwareBudget`
(``RollingMemory.cached``: told the provider's :class:`CacheProfile` and a clock),
:class:`MessageWindow` (``WindowMemory``), :class:`FoldAll` (``SummaryMemory``) and
:class:`KeepAll` (``BufferMemory``).
A new memory class is one new policy plus a constructor::

    class CharBudget(Policy):
        def __init__(self, max_chars: int) -> None:
            self.max_chars = max_chars

        def cost(self, message: Message) -> int:
            return len(message.token_text())

        def over(self, buffer: BufferView) -> bool:
            return buffer.total > self.max_chars

        def plan(self, buffer: BufferView) -> Optional[Plan]:
            return buffer.plan_budget(self.max_chars, self.max_chars)

    class CharMemory(rollmem.memory.Memory):  # or AsyncMemory
        def __init__(self, max_chars: int, summarize_fn=None) -> None:
            super().__init__(CharBudget(max_chars), summarize_fn)

Policies hold settings only (no buffer state), so they are cheap and plain; a policy's methods are
called under the memory's lock and must not call back into the memory.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, ClassVar, Optional, Protocol, Union

from . import _validate as v
from ._ledger import Ledger, Plan, checked_messages
from ._types import TokenCounter
from .counters import words
from .message import USER, Message

__all__ = [
    "PROVIDERS",
    "VERBATIM_FLOOR",
    "BufferView",
    "CacheAwareBudget",
    "CacheProfile",
    "FoldAll",
    "KeepAll",
    "MessageWindow",
    "Plan",
    "Policy",
    "TokenBudget",
    "cached_target",
    "unit_spans",
]


class BufferView(Protocol):
    """What a policy sees of a memory's buffer (its bookkeeping, read-only)."""

    @property
    def items(self) -> Sequence[Message]:
        """The buffered messages, oldest first."""

    @property
    def total(self) -> int:
        """The sum of :meth:`Policy.cost` over the buffer."""

    @property
    def pinned(self) -> int:
        """How many buffered messages are pinned."""

    def plan_budget(self, limit: int, goal: int) -> Optional[Plan]:
        """When ``total > limit``: cut whole non-pinned units, oldest first, until the total is at
        most ``goal``, never the newest unit, aligned so the kept buffer does not start with a
        reply. ``None`` when under the limit or nothing can go."""

    def plan_keep_last(self, keep_last: int) -> Optional[Plan]:
        """Cut every non-pinned unit before the one holding the ``keep_last``-th newest message."""

    def costs(self) -> list[int]:
        """The cost of each buffered message, aligned with :attr:`items` (a copy)."""


class Policy:
    """The eviction rule of a memory. The base class keeps everything (see :class:`KeepAll`).

    Override :meth:`cost`, :meth:`over` and :meth:`plan`; set ``counts_tokens`` when costs are
    tokens (then ``stats()`` reports buffer and summary tokens) and :meth:`limits` for the budget
    ``stats()`` reports.
    """

    __slots__ = ()

    counts_tokens: ClassVar[bool] = False
    """Whether :meth:`cost` counts tokens (``stats()`` then reports token fields)."""

    def cost(self, message: Message) -> int:
        """The weight of one message: a non-negative ``int``, counted once per message."""
        return 0

    def over(self, buffer: BufferView) -> bool:
        """Whether :meth:`plan` may find something to evict; asked after every add."""
        return False

    def plan(self, buffer: BufferView) -> Optional[Plan]:
        """What leaves the buffer now, or ``None`` for nothing."""
        return None

    def limits(self) -> tuple[Optional[int], Optional[int]]:
        """``(max_tokens, target_tokens)`` as ``stats()`` reports them (``None`` when not tokens)."""
        return None, None

    @property
    def cost_source(self) -> str:
        """What an error names when :meth:`cost` returns a bad value: ``"<class name>.cost"``
        (``"token_counter"`` for :class:`TokenBudget`, whose costs come from its counter)."""
        return f"{type(self).__name__}.cost"

    def settings(self) -> dict[str, object]:
        """The policy's settings by name, as its ``repr`` and its memory's ``repr`` show them."""
        return {}

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.settings().items())
        return f"{type(self).__name__}({shown})"


class KeepAll(Policy):
    """Never evict (``BufferMemory``)."""

    __slots__ = ()


class TokenBudget(Policy):
    """Over ``max_tokens`` tokens, evict down to ``target_tokens`` (default ``max_tokens``).

    Tokens are counted by ``token_counter`` (default :func:`rollmem.counters.words`) on each
    message's :meth:`~rollmem.message.Message.token_text`. Both budgets are validated properties:
    ``0 < target_tokens <= max_tokens``; a ``target_tokens`` left above a lowered ``max_tokens``
    reads (and acts) as ``max_tokens``.
    """

    counts_tokens = True
    __slots__ = ("_max", "_target", "token_counter")

    def __init__(
        self,
        max_tokens: int,
        target_tokens: Optional[int] = None,
        token_counter: Optional[TokenCounter] = None,
    ) -> None:
        self._max = v.check_positive_int("max_tokens", max_tokens)
        self._target = self._checked_target(self._max if target_tokens is None else target_tokens)
        v.check_callable("token_counter", token_counter, optional=True)
        self.token_counter: TokenCounter = words if token_counter is None else token_counter

    def _checked_target(self, value: object) -> int:
        target = v.check_positive_int("target_tokens", value)
        if target > self._max:
            raise v.value_error("target_tokens", f"<= max_tokens ({self._max})", target)
        return target

    @property
    def max_tokens(self) -> int:
        """Evict when the buffer holds more tokens than this (an ``int`` > 0)."""
        return self._max

    @max_tokens.setter
    def max_tokens(self, value: int) -> None:
        self._max = v.check_positive_int("max_tokens", value)

    @property
    def target_tokens(self) -> int:
        """Evict down to this many tokens (``0 < target_tokens <= max_tokens``)."""
        return min(self._target, self._max)

    @target_tokens.setter
    def target_tokens(self, value: int) -> None:
        self._target = self._checked_target(value)

    def cost(self, message: Message) -> int:
        return self.token_counter(message.token_text())

    def over(self, buffer: BufferView) -> bool:
        return buffer.total > self._max

    def plan(self, buffer: BufferView) -> Optional[Plan]:
        limit = self._max
        return buffer.plan_budget(limit, min(self._target, limit))

    def limits(self) -> tuple[Optional[int], Optional[int]]:
        return self._max, min(self._target, self._max)

    @property
    def cost_source(self) -> str:
        return "token_counter"

    def settings(self) -> dict[str, object]:
        return {"max_tokens": self._max, "target_tokens": min(self._target, self._max)}


def cached_target(max_tokens: int) -> int:
    """A fixed deep ``target_tokens`` for prompt caching (0.7.0 development releases; the
    integrations' default until they take :class:`CacheAwareBudget`): ``1050 - max_tokens // 7``,
    at most 5/8 and at least 1/50 of ``max_tokens`` (and at least 1). It leaves little verbatim
    context right after a fold (160 tokens at 8,000); :class:`CacheAwareBudget` keeps a floor.

    A fold rewrites every token after the system prompt, so with prompt caching (a cache write at
    1x-2x the input price, a read at about 0.1x) a memory that folds a little on most turns bills
    nearly every request as a full write. Folding deeper, less often, keeps most requests a cheap
    extension of the previous one; the larger the budget, the deeper the fold that pays (1000 ->
    625, 2000 -> 765, 4000 -> 479, 6000 -> 193, 8000 -> 160). ``max_tokens`` is validated as
    :class:`TokenBudget` validates it.
    """
    limit = v.check_positive_int("max_tokens", max_tokens)
    return max(1, limit // 50, min(limit * 5 // 8, 1050 - limit // 7))


@dataclass(frozen=True)
class CacheProfile:
    """How a provider bills a cached prompt prefix, as :class:`CacheAwareBudget` needs it.

    ``min_tokens``: the shortest prefix the provider caches (``0``: no caching); ``ttl``: the
    seconds a cached prefix lives after its last use; ``read`` and ``write``: what a token read
    from and written to the cache costs, in multiples of the base input price (Anthropic's
    5-minute cache: 0.1 and 1.25; automatic caching without a write premium: ``write=1.0``).
    Invalid values raise ``TypeError``/``ValueError`` naming the field.
    """

    min_tokens: int
    ttl: float
    read: float
    write: float

    def __post_init__(self) -> None:
        v.check_int("min_tokens", self.min_tokens, 0)
        for name in ("ttl", "read", "write"):
            value = getattr(self, name)
            if not v.is_number(value):
                raise v.type_error(name, "a number", value)
            if not 0 <= value < math.inf:
                raise v.value_error(name, "a finite number >= 0", value)

    @property
    def caches(self) -> bool:
        """Whether a cached prefix costs less than a fresh one (``min_tokens > 0``, ``read < 1``)."""
        return self.min_tokens > 0 and self.read < 1.0


PROVIDERS: dict[str, CacheProfile] = {
    "anthropic": CacheProfile(1024, 300.0, 0.1, 1.25),  # Sonnet 4.5/4.6, 5-minute cache
    "anthropic-1h": CacheProfile(1024, 3600.0, 0.1, 2.0),  # Sonnet 4.5/4.6, 1-hour cache
    "anthropic-4096": CacheProfile(4096, 300.0, 0.1, 1.25),  # Opus 4.5/4.6, Haiku 4.5
    "openai": CacheProfile(1024, 300.0, 0.1, 1.0),  # GPT-5 (GPT-4.1 reads at 0.25, GPT-4o at 0.5)
    "gemini": CacheProfile(1024, 300.0, 0.1, 1.0),  # Gemini 2.5 Flash, implicit caching
    "gemini-pro": CacheProfile(2048, 300.0, 0.1, 1.0),  # Gemini 2.5 Pro, implicit caching
    "none": CacheProfile(0, 0.0, 1.0, 1.0),  # no prompt caching
}
"""Named :class:`CacheProfile` values, from the providers' documentation in 2026. OpenAI and
Google do not publish how long their automatic caches keep a prefix: 5 minutes is assumed."""

VERBATIM_FLOOR = 650
"""The base of :class:`CacheAwareBudget`'s verbatim floor: ``VERBATIM_FLOOR + 200_000 //
max_tokens`` tokens, at most 85% of the budget (1,000 -> 850, 2,000 -> 750, 4,000 -> 700,
8,000 -> 675)."""


class CacheAwareBudget(TokenBudget):
    """A token budget that folds when a provider's prompt cache makes it cheap, keeping a floor.

    Keeps every promise of :class:`TokenBudget`: after a settled add the buffer is within
    ``max_tokens`` unless only the newest or pinned units are left. Its rules:

    - **floor**: a fold keeps at least the verbatim floor (:data:`VERBATIM_FLOOR` plus
      ``200_000 // max_tokens`` tokens, at most 85% of ``max_tokens``: 750 at 2,000, 675 at
      8,000) and never evicts the last user turn with what answers it (the newest user
      message, or the one before it with its answers when the newest message is a user's),
      unless ``max_tokens`` requires it. Where the provider caches, the floor is also what a
      cacheable request needs: ``provider.min_tokens - prefix_tokens``, when that is at most
      3/4 of the budget (below the minimum nothing is cached, so folding for the cache is moot);
    - **warm cache**: over ``max_tokens``, fold down to ``target_tokens`` (the floor unless set);
    - **cold cache**: when the ``clock`` moved more than ``provider.ttl`` seconds since the
      previous add, the next request is a full cache write anyway and the fold costs only the
      summarizer call: a buffer over 4/5 of ``max_tokens`` folds now, down to the floor plus
      1/8 of the budget (when that evicts at least 1/8 of the budget). The decision holds
      until a fold brings the buffer within that limit: a background fold, or one retried
      after a failed summarizer, still acts on it;
    - **no caching** (``provider.caches`` false, or a minimum the budget cannot reach): only
      the warm rule.

    ``provider``: a :class:`CacheProfile` or a name in :data:`PROVIDERS` (default
    ``"anthropic"``); ``clock``: seconds (default :func:`time.monotonic`; an integration may
    return the newest message's timestamp); ``prefix_tokens``: what each request sends before
    the conversation (system prompt, tool definitions), which counts toward the provider's
    minimum. The policy remembers the clock's reading at the previous add, so give each memory
    its own. Bad arguments raise ``TypeError``/``ValueError`` naming them.
    """

    __slots__ = ("_cold", "_explicit", "_last", "clock", "prefix_tokens", "provider")

    def __init__(
        self,
        max_tokens: int,
        token_counter: Optional[TokenCounter] = None,
        *,
        provider: Union[CacheProfile, str, None] = None,
        clock: Optional[Callable[[], float]] = None,
        prefix_tokens: int = 0,
    ) -> None:
        super().__init__(max_tokens, None, token_counter)
        if isinstance(provider, str) and provider not in PROVIDERS:
            raise v.value_error("provider", f"one of {sorted(PROVIDERS)}", provider)
        profile = PROVIDERS[provider] if isinstance(provider, str) else provider
        if not isinstance(profile, (CacheProfile, type(None))):
            raise v.type_error("provider", "a CacheProfile, a name or None", provider)
        v.check_callable("clock", clock, optional=True)
        self.provider: CacheProfile = PROVIDERS["anthropic"] if profile is None else profile
        self.clock: Callable[[], float] = time.monotonic if clock is None else clock
        self.prefix_tokens = v.check_int("prefix_tokens", prefix_tokens, 0)
        self._explicit: Optional[int] = None
        self._last: Optional[float] = None
        self._cold = False

    @property
    def target_tokens(self) -> int:
        """Warm folds go down to this many tokens: the floor (see the class) unless set;
        ``0 < target_tokens <= max_tokens``."""
        if self._explicit is not None:
            return min(self._explicit, self._max)
        return self._depths()[0]

    @target_tokens.setter
    def target_tokens(self, value: int) -> None:
        self._explicit = self._checked_target(value)

    def _depths(self) -> tuple[int, int, int]:
        """``(floor, cold limit, cold target)``; a cold limit of 0: no cold folds."""
        budget = self._max
        floor = max(1, min(VERBATIM_FLOOR + 200_000 // budget, budget * 85 // 100))
        need = self.provider.min_tokens - self.prefix_tokens
        if not self.provider.caches or need > budget * 3 // 4:
            return floor, 0, floor
        floor = max(floor, need)
        limit = max(floor, budget * 4 // 5)
        target = floor + budget // 8
        return floor, (limit if limit - target >= budget // 8 else 0), target

    def over(self, buffer: BufferView) -> bool:
        now = self.clock()
        last, self._last = self._last, now
        _, limit, _ = self._depths()
        cold = self._cold or (last is not None and now - last > self.provider.ttl)
        # held until a fold brings the buffer within the cold limit (a later add, a background
        # fold or a fold retried after a failed summarizer acts on it), or nothing can go
        self._cold = bool(limit) and cold and buffer.total > limit
        return self._cold or buffer.total > self._max

    def plan(self, buffer: BufferView) -> Optional[Plan]:
        cold = self._cold
        limit, goal = self._max, self.target_tokens
        if cold:
            _, cold_limit, goal = self._depths()
            limit = min(limit, cold_limit)
        items = buffer.items
        turn = len(items) - 1  # the floor: the last user turn (see the class)
        for index in range(len(items) - 2, -1, -1):
            if items[index].role == USER:
                turn = index
                break
        costs = buffer.costs()
        keep = sum(costs[turn:]) + sum(cost for m, cost in zip(items[:turn], costs) if m.pinned)
        plan = buffer.plan_budget(limit, min(max(goal, keep), self._max))
        self._cold = self._cold and plan is not None  # nothing can go: the cold decision is spent
        return plan

    def limits(self) -> tuple[Optional[int], Optional[int]]:
        return self._max, self.target_tokens

    def settings(self) -> dict[str, object]:
        return {"max_tokens": self._max, "target_tokens": self.target_tokens, "provider": self.provider}


class MessageWindow(Policy):
    """Keep the newest ``max_messages`` messages (whole units); every message costs 1."""

    __slots__ = ("_max",)

    def __init__(self, max_messages: int) -> None:
        self._max = v.check_positive_int("max_messages", max_messages)

    @property
    def max_messages(self) -> int:
        """How many messages the window holds (an ``int`` > 0)."""
        return self._max

    @max_messages.setter
    def max_messages(self, value: int) -> None:
        self._max = v.check_positive_int("max_messages", value)

    def cost(self, message: Message) -> int:
        return 1

    def over(self, buffer: BufferView) -> bool:
        return buffer.total > self._max

    def plan(self, buffer: BufferView) -> Optional[Plan]:
        return buffer.plan_budget(self._max, self._max)

    def settings(self) -> dict[str, object]:
        return {"max_messages": self._max}


class FoldAll(Policy):
    """Evict every non-pinned message after each add (``SummaryMemory``: the summary is all)."""

    __slots__ = ()

    def over(self, buffer: BufferView) -> bool:
        return len(buffer.items) > buffer.pinned

    def plan(self, buffer: BufferView) -> Optional[Plan]:
        return buffer.plan_keep_last(0)


def unit_spans(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """The units of a buffer holding ``messages``, as ``(start, stop)`` index spans, oldest first.

    A unit is what every policy evicts whole: a message with ``tool_calls`` together with
    everything up to the last result (``tool_call_id``) answering one of them, a result joining
    the unit of its earliest caller still in the list; any other message alone (a result whose
    call is not in the list included). The spans cover ``messages`` in order, without gaps.
    Integrations use this to group what they render; it is the rule the memories apply. A
    non-``Message`` item raises ``TypeError`` naming ``buffer[i]``.
    """
    ledger = Ledger()
    items = checked_messages(messages)
    ledger.load(items, [0] * len(items))
    return ledger.spans()

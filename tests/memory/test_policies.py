"""Eviction policies: a seventh memory class made of one new policy, and the built-in policies."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any, Callable, Optional

import pytest

from rollmem import (
    AsyncRollingMemory,
    BufferMemory,
    Message,
    RollingMemory,
    ToolCall,
    WindowMemory,
    cached_target,
)
from rollmem.memory import AsyncMemory, Memory
from rollmem.policies import (
    PROVIDERS,
    VERBATIM_FLOOR,
    BufferView,
    CacheAwareBudget,
    CacheProfile,
    KeepAll,
    Plan,
    Policy,
    TokenBudget,
    unit_spans,
)

from .contract import MemoryContract

# -- a seventh class: a budget in characters, one policy and nothing else ---------------------------


class CharBudget(Policy):
    """Over ``max_chars`` characters, evict down to ``max_chars``."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars

    def cost(self, message: Message) -> int:
        return len(message.token_text())

    def over(self, buffer: BufferView) -> bool:
        return buffer.total > self.max_chars

    def plan(self, buffer: BufferView) -> Optional[Plan]:
        return buffer.plan_budget(self.max_chars, self.max_chars)


class CharMemory(Memory):
    def __init__(
        self, max_chars: int, summarize_fn: Optional[Callable[..., Any]] = None, **hooks: Any
    ) -> None:
        super().__init__(CharBudget(max_chars), summarize_fn, **hooks)


class AsyncCharMemory(AsyncMemory):
    def __init__(
        self, max_chars: int, summarize_fn: Optional[Callable[..., Any]] = None, **hooks: Any
    ) -> None:
        super().__init__(CharBudget(max_chars), summarize_fn, **hooks)


class TestCharMemory(MemoryContract):
    memory_class = CharMemory

    def options(self, summarize_fn: Optional[Callable[..., Any]], on_evict: Any) -> dict[str, Any]:
        return {"max_chars": 7, "summarize_fn": summarize_fn, "on_evict": on_evict}


class TestAsyncCharMemory(MemoryContract):
    memory_class = AsyncCharMemory

    def options(self, summarize_fn: Optional[Callable[..., Any]], on_evict: Any) -> dict[str, Any]:
        return {"max_chars": 7, "summarize_fn": summarize_fn, "on_evict": on_evict}


def test_the_seventh_class_evicts_by_characters(recorder: Any) -> None:
    memory = CharMemory(10, recorder)
    for text in ("aaaa", "bbbb", "cc", "d"):
        memory.add_user_message(text)
    assert recorder.texts == [("", ["aaaa"])]
    assert [m.content for m in memory.buffer] == ["bbbb", "cc", "d"]
    assert memory.fold() == 3
    assert memory.summary == "aaaa|bbbb|cc|d"
    restored = CharMemory.from_dict(memory.to_dict(), max_chars=10)
    assert restored.to_dict() == memory.to_dict()
    stats = memory.stats()
    assert (stats.buffer_tokens, stats.max_tokens) == (None, None)  # characters are not tokens


def test_a_bad_cost_names_the_policy() -> None:
    class Broken(CharBudget):
        def cost(self, message: Message) -> int:
            return 1.5  # type: ignore[return-value]

    memory = Memory(Broken(3))
    with pytest.raises(TypeError, match=r"^Broken\.cost returned float for the new message; expected int$"):
        memory.add_user_message("x")
    assert memory.buffer == []


def test_a_memory_needs_a_policy() -> None:
    with pytest.raises(TypeError, match=r"^policy: expected a rollmem\.policies\.Policy, got int$"):
        Memory(3)  # type: ignore[arg-type]


# -- the built-in policies ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "error", "message"),
    [
        ("max_tokens", 0, ValueError, "max_tokens must be > 0, got 0"),
        ("max_tokens", "5", TypeError, "max_tokens: expected int, got str"),
        ("max_tokens", True, TypeError, "max_tokens: expected int, got bool"),
        ("target_tokens", 101, ValueError, "target_tokens must be <= max_tokens (100), got 101"),
        ("target_tokens", 0, ValueError, "target_tokens must be > 0, got 0"),
        ("target_tokens", 2.0, TypeError, "target_tokens: expected int, got float"),
    ],
)
def test_budgets_are_validated_properties(
    name: str, value: Any, error: type[Exception], message: str
) -> None:
    memory = RollingMemory(max_tokens=100, target_tokens=50)
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        setattr(memory, name, value)
    assert (memory.max_tokens, memory.target_tokens) == (100, 50)


def test_a_lowered_max_tokens_caps_the_target_everywhere(recorder: Any) -> None:
    memory = RollingMemory(max_tokens=10, target_tokens=8, summarize_fn=recorder)
    memory.max_tokens = 4
    assert (memory.max_tokens, memory.target_tokens) == (4, 4)
    assert (memory.stats().max_tokens, memory.stats().target_tokens) == (4, 4)
    for word in "abcde":
        memory.add_user_message(word)
    assert [m.content for m in memory.buffer] == ["b", "c", "d", "e"]
    memory.max_tokens = 10
    assert memory.target_tokens == 8  # the target given stays; it was only capped
    assert memory.policy.limits() == (10, 8)


@pytest.mark.parametrize(
    ("max_tokens", "target"),
    [
        (1, 1),
        (2, 1),
        (10, 6),
        (1000, 625),
        (2000, 765),
        (3000, 622),
        (4000, 479),
        (6000, 193),
        (7000, 140),
        (8000, 160),
        (20000, 400),
    ],
)
def test_cached_target_folds_deeper_as_the_budget_grows(max_tokens: int, target: int) -> None:
    assert cached_target(max_tokens) == target
    assert 0 < target <= max_tokens


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, "max_tokens must be > 0, got 0"),
        (True, TypeError, "max_tokens: expected int, got bool"),
        ("5", TypeError, "max_tokens: expected int, got str"),
    ],
)
def test_cached_target_checks_max_tokens_like_the_memory(
    value: Any, error: type[Exception], message: str
) -> None:
    for build in (cached_target, RollingMemory.cached, RollingMemory):
        with pytest.raises(error, match=f"^{re.escape(message)}$"):
            build(value)


def test_cached_is_rolling_memory_with_the_cache_aware_policy(recorder: Any) -> None:
    memory = RollingMemory.cached(2000, recorder, len, on_evict=lambda evicted: None)
    assert type(memory) is RollingMemory
    assert type(memory.policy) is CacheAwareBudget
    assert memory.policy.provider == PROVIDERS["anthropic"]
    assert memory.policy.clock is time.monotonic
    # with nothing sent before the conversation, a cacheable request needs 1,024 tokens of it
    assert (memory.max_tokens, memory.target_tokens) == (2000, 1024)
    assert RollingMemory.cached(2000, prefix_tokens=1200).target_tokens == VERBATIM_FLOOR + 100 == 750
    assert RollingMemory.cached(8000, provider="anthropic-4096", prefix_tokens=1186).target_tokens == 2910
    assert RollingMemory.cached(4000, provider="anthropic-4096").target_tokens == 700  # never cacheable
    assert RollingMemory.cached(100, provider="none").target_tokens == 85  # 85% of a small budget
    assert RollingMemory().target_tokens == 2000  # the constructor's default stays max_tokens
    memory.target_tokens = 500  # an explicit target overrides the policy's
    assert memory.target_tokens == 500
    assert repr(memory).startswith("<RollingMemory max_tokens=2000 target_tokens=500")


async def test_async_cached_is_async_rolling_memory_with_the_cache_aware_policy(recorder: Any) -> None:
    memory = AsyncRollingMemory.cached(4000, recorder, provider="openai", prefix_tokens=2000, background=True)
    assert type(memory) is AsyncRollingMemory
    assert type(memory.policy) is CacheAwareBudget
    assert (memory.max_tokens, memory.target_tokens, memory.background) == (4000, 700, True)


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


LIKE_ANTHROPIC = CacheProfile(min_tokens=1024, ttl=300.0, read=0.1, write=1.25)


def hundred(role: str, n: int) -> Message:
    """A message of 100 tokens (the default counter counts words)."""
    return Message(role, " ".join([f"{role}{n}"] * 100))


def exchange(memory: Any, clock: Clock, turns: int, think: float = 30.0, start: int = 0) -> None:
    for n in range(start, start + turns):
        clock.now += think
        memory.extend([hundred("user", n)])
        clock.now += 5
        memory.extend([hundred("assistant", n)])


def test_a_warm_cache_folds_over_max_tokens_down_to_the_floor(recorder: Any) -> None:
    clock = Clock()
    memory = RollingMemory.cached(2000, recorder, provider=LIKE_ANTHROPIC, clock=clock, prefix_tokens=1200)
    exchange(memory, clock, 10)  # 2,000 tokens: at the budget, no fold
    assert recorder.calls == []
    exchange(memory, clock, 1, start=10)  # the user message makes 2,100: folds down to 750 (700 + 100)
    assert len(recorder.calls) == 1
    assert memory.stats().buffer_tokens == 800
    assert memory.buffer[0].content.startswith("user7 ")


def test_a_cold_cache_folds_early_but_not_below_its_depth(recorder: Any) -> None:
    clock = Clock()
    memory = RollingMemory.cached(2000, recorder, provider=LIKE_ANTHROPIC, clock=clock, prefix_tokens=1200)
    exchange(memory, clock, 8)  # 1,600 tokens: 4/5 of the budget, warm
    exchange(memory, clock, 1, think=299, start=8)  # 1,800 tokens, but the cache is still warm
    assert recorder.calls == []
    clock.now += 301  # idle longer than the cache lives: the next request is a full write anyway
    memory.extend([hundred("user", 9)])  # 1,900 tokens > 1,600: folds now, down to 750 + 250
    assert len(recorder.calls) == 1
    assert memory.stats().buffer_tokens == 900  # 1,000 at most, starting on a user turn
    assert memory.buffer[0].content.startswith("user5 ")
    clock.now += 400
    memory.extend([hundred("assistant", 9)])  # cold again, but 1,000 is under 1,600: no fold
    assert len(recorder.calls) == 1


def test_a_cold_decision_holds_until_a_fold_acts_on_it(recorder: Any) -> None:
    clock = Clock()
    memory = RollingMemory.cached(2000, recorder, provider=LIKE_ANTHROPIC, clock=clock, prefix_tokens=1200)
    exchange(memory, clock, 9)  # 1,800 tokens, warm
    recorder.fail = True
    clock.now += 301  # cold: the fold is planned and its summarizer fails
    with pytest.raises(RuntimeError, match=r"^summarizer down$"):
        memory.extend([hundred("user", 9)])
    assert memory.stats().buffer_tokens == 1900
    recorder.fail = False
    clock.now += 5  # warm again, and 2,000 is within max_tokens: the cold decision still folds
    memory.extend([hundred("assistant", 9)])
    assert len(recorder.calls) == 2
    assert memory.stats().buffer_tokens == 1000


async def test_a_background_fold_acts_on_the_cold_decision_of_its_add(recorder: Any) -> None:
    clock = Clock()
    memory = AsyncRollingMemory.cached(
        2000, recorder, provider=LIKE_ANTHROPIC, clock=clock, prefix_tokens=1200, background=True
    )
    for n in range(9):  # 1,800 tokens, warm
        clock.now += 30
        await memory.extend([hundred("user", n), hundred("assistant", n)])
    clock.now += 301
    await memory.extend([hundred("user", 9)])  # cold: the fold runs later, as a task
    await memory.flush()
    assert len(recorder.calls) == 1
    assert memory.stats().buffer_tokens == 900


def test_without_caching_a_long_pause_changes_nothing(recorder: Any) -> None:
    clock = Clock()
    memory = RollingMemory.cached(2000, recorder, provider="none", clock=clock)
    exchange(memory, clock, 9, think=3600)
    assert recorder.calls == []
    assert memory.stats().buffer_tokens == 1800


def test_a_fold_keeps_the_last_user_turn_and_what_answers_it(recorder: Any) -> None:
    clock = Clock()
    memory = RollingMemory.cached(1000, recorder, clock=clock)
    memory.target_tokens = 1  # as deep as it goes
    exchange(memory, clock, 5)
    memory.extend([hundred("user", 5)])  # 1,100 tokens: the previous exchange stays with it
    assert [m.content.split()[0] for m in memory.buffer] == ["user4", "assistant4", "user5"]
    call = Message("assistant", "", tool_calls=[ToolCall("c1", "f", "{}")])
    memory.extend([call, Message("tool", " ".join(["r"] * 750), tool_call_id="c1")])  # mid-turn, over
    assert [m.role for m in memory.buffer] == ["user", "assistant", "tool"]  # the turn in progress stays
    assert memory.buffer[0].content.startswith("user5 ")
    assert len(recorder.calls) == 2


def test_max_tokens_wins_over_the_floor(recorder: Any) -> None:
    memory = RollingMemory.cached(1000, recorder)
    memory.add_user_message(" ".join(["q"] * 300))
    call = Message("assistant", "", tool_calls=[ToolCall("c1", "f", "{}")])
    memory.extend([call, Message("tool", " ".join(["r"] * 900), tool_call_id="c1")])
    assert [m.role for m in memory.buffer] == ["assistant", "tool"]  # the user turn went: over budget
    assert len(recorder.calls) == 1


BAD_CACHE_SETTINGS = [
    ({"provider": "anthropic-9h"}, ValueError, "provider must be one of ['anthropic', "),
    ({"provider": 3}, TypeError, "provider: expected a CacheProfile, a name or None, got int"),
    ({"clock": 3}, TypeError, "clock: expected a callable"),
    ({"prefix_tokens": -1}, ValueError, "prefix_tokens must be >= 0, got -1"),
    ({"prefix_tokens": 1.5}, TypeError, "prefix_tokens: expected int, got float"),
]
"""Bad ``provider``/``clock``/``prefix_tokens`` and the error each raises, wherever they are taken
(``RollingMemory.cached`` here, every integration in ``tests/integrations/test_defaults.py``)."""


@pytest.mark.parametrize(("kwargs", "error", "message"), BAD_CACHE_SETTINGS)
def test_cached_checks_its_arguments(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}"):
        RollingMemory.cached(2000, **kwargs)


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ((-1, 300.0, 0.1, 1.25), ValueError, "min_tokens must be >= 0, got -1"),
        ((1024, "5m", 0.1, 1.25), TypeError, "ttl: expected a number, got str"),
        ((1024, 300.0, float("nan"), 1.25), ValueError, "read must be a finite number >= 0, got nan"),
        ((1024, 300.0, 0.1, True), TypeError, "write: expected a number, got bool"),
    ],
)
def test_a_cache_profile_checks_its_fields(
    fields: tuple[Any, ...], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        CacheProfile(*fields)


def test_the_named_profiles_say_which_cache() -> None:
    assert PROVIDERS["anthropic-1h"].ttl == 3600
    assert PROVIDERS["anthropic-4096"].min_tokens == 4096
    assert [name for name, profile in PROVIDERS.items() if not profile.caches] == ["none"]
    assert not CacheProfile(1024, 300.0, 1.0, 1.0).caches  # a cached token costing as much: no caching


def test_the_window_is_a_validated_property() -> None:
    memory = WindowMemory(3)
    memory.max_messages = 2
    for word in "abc":
        memory.add_user_message(word)
    assert [m.content for m in memory.buffer] == ["b", "c"]
    with pytest.raises(ValueError, match=r"^max_messages must be > 0, got 0$"):
        memory.max_messages = 0


def test_a_coroutine_hook_on_a_sync_class_gets_advice_about_that_class() -> None:
    async def hook(messages: Sequence[Message]) -> None:
        return None

    with pytest.raises(TypeError, match=r"^on_evict is a coroutine function: WindowMemory calls it"):
        WindowMemory(3, on_evict=hook)
    with pytest.raises(TypeError, match=r"use AsyncRollingMemory for async callables$"):
        RollingMemory(3, on_evict=hook)
    with pytest.raises(TypeError, match=r"use AsyncMemory for async callables$"):
        Memory(TokenBudget(3), on_evict=hook)


def test_reprs_show_settings_and_sizes_without_calling_back() -> None:
    calls: list[str] = []

    def counter(text: str) -> int:
        calls.append(text)
        return len(text.split())

    memory = RollingMemory(10, lambda summary, evicted: "s" * 3, counter, target_tokens=5)
    for _ in range(5):
        memory.add_user_message("a b c")
    counted = len(calls)
    expected = "<RollingMemory max_tokens=10 target_tokens=5: 2 messages, summary of 3 chars, 1 fold>"
    assert repr(memory) == expected
    assert len(calls) == counted  # repr asks no callback
    assert repr(memory.policy) == "TokenBudget(max_tokens=10, target_tokens=5)"
    assert repr(WindowMemory(3)) == "<WindowMemory max_messages=3: 0 messages, summary of 0 chars, 0 folds>"
    assert repr(BufferMemory()) == "<BufferMemory: 0 messages, summary of 0 chars, 0 folds>"
    assert repr(AsyncRollingMemory(100)).startswith("<AsyncRollingMemory max_tokens=100 target_tokens=100: ")
    assert repr(KeepAll()) == "KeepAll()"
    memory.clear()
    memory.add_user_message("one")
    assert repr(memory).endswith(": 1 message, summary of 0 chars, 1 fold>")


def test_unit_spans_is_the_rule_the_memories_evict_by() -> None:
    call = Message("assistant", "", tool_calls=[ToolCall("c1", "f", "{}"), ToolCall("c2", "f", "{}")])
    late = Message("assistant", "", tool_calls=[ToolCall("c3", "f", "{}")])
    buffer = [
        Message("user", "q"),
        call,
        Message("tool", "r1", tool_call_id="c1"),
        Message("user", "between"),
        Message("tool", "r2", tool_call_id="c2"),  # joins everything from its caller
        Message("tool", "orphan", tool_call_id="gone"),
        late,
        Message("assistant", "a"),
        Message("tool", "r3", tool_call_id="c3"),
    ]
    assert unit_spans(buffer) == [(0, 1), (1, 5), (5, 6), (6, 9)]
    assert unit_spans([]) == []
    # A memory folding down to nothing but the newest unit takes exactly the spans before it.
    memory = RollingMemory(1, lambda summary, evicted: "s", lambda text: 1)
    memory.buffer = buffer[:-1]
    memory.extend(buffer[-1:])
    assert memory.buffer == buffer[6:]
    with pytest.raises(TypeError, match=r"buffer\[1\]: expected Message, got str"):
        unit_spans([Message("user", "q"), "nope"])  # type: ignore[list-item]

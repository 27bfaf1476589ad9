"""Eviction policies: a seventh memory class made of one new policy, and the built-in policies."""

from __future__ import annotations

import re
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
from rollmem.policies import BufferView, KeepAll, Plan, Policy, TokenBudget, unit_spans

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


def test_cached_is_rolling_memory_with_the_cached_target(recorder: Any) -> None:
    memory = RollingMemory.cached(2000, recorder, len, on_evict=lambda evicted: None)
    assert type(memory) is RollingMemory
    assert (memory.max_tokens, memory.target_tokens) == (2000, 765)
    assert RollingMemory().target_tokens == 2000  # the constructor's default stays max_tokens
    small = RollingMemory.cached(10, recorder)
    for word in "abcdefghijk":
        small.add_user_message(word)
    assert [m.content for m in small.buffer] == list("fghijk")  # folded down to 6, not 10
    assert [[m.content for m in folded] for _, folded in recorder.calls] == [list("abcde")]


async def test_async_cached_is_async_rolling_memory_with_the_cached_target(recorder: Any) -> None:
    memory = AsyncRollingMemory.cached(4000, recorder, background=True)
    assert type(memory) is AsyncRollingMemory
    assert (memory.max_tokens, memory.target_tokens, memory.background) == (4000, 479, True)


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

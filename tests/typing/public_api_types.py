"""Static checks of the public API's types, run by mypy (``tests/typing`` is in pyproject's mypy
``files``); never executed, and not collected by pytest (the name does not start with ``test_``).

``assert_type`` fails the mypy run when an inferred type drifts; a ``# type: ignore[code]`` line
fails it (``warn_unused_ignores``) when a call that must be refused is accepted.
"""

from __future__ import annotations

from collections.abc import Sequence

from typing_extensions import assert_type

from rollmem import (
    AsyncRollingMemory,
    AsyncSummaryMemory,
    BufferMemory,
    MemoryStats,
    Message,
    RollingMemory,
    SummaryMemory,
    TokenCounter,
    WindowMemory,
)
from rollmem.changes import Change, Cleared
from rollmem.counters import chars, words
from rollmem.memory import AsyncMemory, Memory
from rollmem.policies import Policy, TokenBudget
from rollmem.sessions import AsyncSessions, Sessions
from rollmem.stores import MemoryStore


def summarize(summary: str, messages: Sequence[Message]) -> str:
    return summary


async def asummarize(summary: str, messages: Sequence[Message]) -> str:
    return summary


def check_sync_memories() -> None:
    memory = RollingMemory(max_tokens=100, summarize_fn=summarize, token_counter=chars())
    assert_type(memory.add_user_message("hi"), Message)
    assert_type(memory.add_message("user", "hi", pinned=True), Message)
    assert_type(memory.fold(keep_last=2), int)
    assert_type(memory.extend([Message("user", "x")]), None)
    assert_type(memory.get_messages(), list[Message])
    assert_type(memory.buffer, list[Message])
    assert_type(memory.summary, str)
    assert_type(memory.stats(), MemoryStats)
    assert_type(memory.policy, Policy)
    assert_type(memory.max_tokens, int)
    assert_type(memory.target_tokens, int)
    assert_type(WindowMemory(3).max_messages, int)
    memory.max_tokens = 50
    with memory.record() as changes:
        memory.add_user_message("x")
    assert_type(changes, list[Change])
    assert_type(memory.stop_recording(), tuple[Change, ...])
    assert_type(RollingMemory().replay(changes), None)
    assert_type(memory.restore(memory.to_dict(), costs=memory.costs()), None)
    assert_type(memory.costs(), list[int])
    assert_type(memory.token_counter, "TokenCounter | None")
    memory.on_evict = None
    memory.max_tokens = "50"  # type: ignore[assignment]
    assert_type(RollingMemory.from_dict(memory.to_dict(), max_tokens=100), RollingMemory)
    assert_type(WindowMemory.from_dict(memory.to_dict(), max_messages=3), WindowMemory)
    assert_type(BufferMemory().add_user_message("x"), Message)
    assert_type(SummaryMemory(summarize).fold(), int)
    assert_type(Memory(TokenBudget(10)).add_user_message("x"), Message)
    RollingMemory(summarize_fn=asummarize)  # type: ignore[arg-type]
    RollingMemory(max_tokens="100")  # type: ignore[arg-type]
    BufferMemory().fold()  # type: ignore[attr-defined]


async def check_async_memories() -> None:
    memory = AsyncRollingMemory(max_tokens=100, summarize_fn=asummarize, background=True)
    assert_type(await memory.add_user_message("hi"), Message)
    assert_type(await memory.fold(), int)
    assert_type(await memory.flush(), None)
    assert_type(AsyncRollingMemory.from_dict(memory.to_dict()), AsyncRollingMemory)
    assert_type(await AsyncSummaryMemory(summarize).add_user_message("x"), Message)
    assert_type(await AsyncMemory(TokenBudget(10), asummarize).add_user_message("x"), Message)
    assert_type(await memory.replay([Cleared()]), None)


def check_sessions(store: MemoryStore) -> None:
    sessions = Sessions(store, RollingMemory)
    assert_type(sessions, Sessions[RollingMemory])
    with sessions.open("s") as memory:
        assert_type(memory, RollingMemory)
        assert_type(memory.add_user_message("hi"), Message)
    assert_type(sessions.get("s"), "RollingMemory | None")
    assert_type(sessions.update("s", lambda memory: len(memory.buffer)), int)
    windows = Sessions(store, lambda: WindowMemory(5))
    assert_type(windows, Sessions[WindowMemory])


async def check_async_sessions(store: MemoryStore) -> None:
    sessions = AsyncSessions(store, AsyncRollingMemory)
    assert_type(sessions, AsyncSessions[AsyncRollingMemory])
    async with sessions.open("s") as memory:
        assert_type(await memory.add_user_message("hi"), Message)


def check_counters() -> None:
    counter: TokenCounter = words
    assert_type(counter("a b"), int)
    assert_type(chars(3.5), TokenCounter)

"""Hostile callbacks: a summarizer or hook that changes, keeps or re-uses what it is given, or calls
back into the memory, never corrupts it, never hangs it.

Public API only. The no-loss model is the one of ``tests/test_properties.py``: every message
added is, at all times, in the buffer, or in exactly one committed eviction, or removed by a
``clear()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Optional

from hypothesis import given, settings
from hypothesis import strategies as st

from rollmem import AsyncRollingMemory, RollingMemory, WindowMemory
from rollmem.message import Message, ToolCall

TIMEOUT = 10.0

# -- callbacks that abuse the list they are given ------------------------------------------------

ABUSES = ("clear", "del_head", "append", "reverse", "keep", "none")


def abuse(messages: Any, how: str, kept: list[Any]) -> None:
    """Do to ``messages`` what a careless batching callback does."""
    if how == "clear":
        messages.clear()
    elif how == "del_head":
        del messages[:1]
    elif how == "append":
        messages.append(Message("user", "junk"))
    elif how == "reverse":
        messages.reverse()
    elif how == "keep":
        kept.append(messages)  # changed later, after the fold returned
    elif how != "none":
        raise AssertionError(how)


class Model:
    """Tracks where every message is; the callbacks abuse their argument after recording it."""

    def __init__(self, summarizer_abuse: str, hook_abuse: str) -> None:
        self.summarizer_abuse = summarizer_abuse
        self.hook_abuse = hook_abuse
        self.kept: list[Any] = []
        self.attempts: list[list[Message]] = []
        self.committed: list[Message] = []
        self.removed: list[Message] = []
        self.added: list[Message] = []

    def summarize(self, summary: str, messages: Sequence[Message]) -> str:
        batch = list(messages)
        self.attempts.append(batch)
        abuse(messages, self.summarizer_abuse, self.kept)
        return summary + "".join(f"[{m.id}]" for m in batch)

    def on_evict(self, messages: Sequence[Message]) -> None:
        batch = list(messages)
        assert batch == self.attempts[-1], "on_evict got something else than the summarizer"
        self.committed.extend(batch)
        abuse(messages, self.hook_abuse, self.kept)

    def spoil_kept(self) -> None:
        for messages in self.kept:
            messages.clear()
        self.kept.clear()

    def check(self, memory: Any) -> None:
        buffer = list(memory.buffer)
        placed = sorted(str(m.id) for m in [*buffer, *self.committed, *self.removed])
        assert placed == sorted(str(m.id) for m in self.added), "a message was lost or duplicated"
        assert memory.summary == "".join(f"[{m.id}]" for m in self.committed)
        stats = memory.stats()
        assert stats.messages == len(buffer)
        assert stats.buffer_tokens == sum(len(m.token_text()) for m in buffer)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(["user", "assistant", "tool"]), st.integers(0, 6)),
        st.tuples(st.just("call"), st.integers(0, 3)),
        st.tuples(st.just("result"), st.integers(0, 3)),
        st.tuples(st.just("fold"), st.integers(0, 3)),
        st.tuples(st.just("clear")),
        st.tuples(st.just("spoil")),
    ),
    max_size=25,
)


def _message(model: Model, op: tuple[Any, ...], calls: list[str]) -> Optional[Message]:
    number = len(model.added)
    kind = op[0]
    if kind == "add":
        return Message(op[1], "x" * op[2], id=f"m{number}")
    if kind == "call":
        calls.append(f"c{number}")
        return Message("assistant", "y" * op[1], id=f"m{number}", tool_calls=(ToolCall(f"c{number}", "f"),))
    if kind == "result":
        answers = calls[-1] if calls else "orphan"
        return Message("tool", "z" * op[1], id=f"m{number}", tool_call_id=answers)
    return None


@settings(max_examples=150, derandomize=True, deadline=None)
@given(OPS, st.sampled_from(ABUSES), st.sampled_from(ABUSES), st.integers(1, 10))
def test_sync_callbacks_that_mutate_their_argument_lose_nothing(
    ops: list[tuple[Any, ...]], summarizer_abuse: str, hook_abuse: str, max_tokens: int
) -> None:
    model = Model(summarizer_abuse, hook_abuse)
    memory = RollingMemory(max_tokens, model.summarize, len, on_evict=model.on_evict)
    calls: list[str] = []
    for op in ops:
        message = _message(model, op, calls)
        if message is not None:
            model.added.append(message)
            memory.extend([message])
        elif op[0] == "fold":
            memory.fold(op[1])
        elif op[0] == "clear":
            model.committed, model.removed = [], [*model.committed, *model.removed, *memory.buffer]
            memory.clear()
        else:
            model.spoil_kept()
        model.check(memory)


@settings(max_examples=100, derandomize=True, deadline=None)
@given(OPS, st.sampled_from(ABUSES), st.sampled_from(ABUSES), st.integers(1, 10), st.booleans())
def test_async_callbacks_that_mutate_their_argument_lose_nothing(
    ops: list[tuple[Any, ...]], summarizer_abuse: str, hook_abuse: str, max_tokens: int, background: bool
) -> None:
    async def main() -> None:
        model = Model(summarizer_abuse, hook_abuse)

        async def summarize(summary: str, messages: Sequence[Message]) -> str:
            await asyncio.sleep(0)
            return model.summarize(summary, messages)

        memory = AsyncRollingMemory(
            max_tokens, summarize, len, on_evict=model.on_evict, background=background
        )
        calls: list[str] = []
        for op in ops:
            message = _message(model, op, calls)
            if message is not None:
                model.added.append(message)
                await memory.extend([message])
            elif op[0] == "fold":
                await memory.fold(op[1])
            elif op[0] == "clear":
                await memory.flush()
                model.committed, model.removed = [], [*model.committed, *model.removed, *memory.buffer]
                memory.clear()
            else:
                model.spoil_kept()
            await memory.flush()
            model.check(memory)

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_the_issue_example_a_summarizer_that_clears_its_batch() -> None:
    evicted: list[list[str]] = []
    memory = RollingMemory(
        max_tokens=6,
        summarize_fn=lambda s, ev: (ev.clear(), s + ".")[1],
        on_evict=lambda ms: evicted.append([m.content for m in ms]),
    )
    memory.add_user_message("weather in seoul")
    memory.add_assistant_message("", tool_calls=[ToolCall("c1", "get_weather", "{}")])
    memory.add_tool_message("sunny", tool_call_id="c1")
    memory.add_user_message("and tomorrow please")
    memory.add_tool_message("late", tool_call_id="c1")
    assert evicted == [["weather in seoul", "", "sunny"]]
    assert memory.summary == "."
    assert [m.content for m in memory.buffer] == ["and tomorrow please", "late"]
    assert memory.stats().buffer_tokens == 5  # "late" counts its call id too
    memory.add_user_message("one two three")
    assert memory.stats().buffer_tokens <= 6  # the budget still holds


def test_a_hook_that_clears_its_batch_changes_nothing_else() -> None:
    memory = WindowMemory(2, on_evict=lambda ms: ms.clear())  # type: ignore[attr-defined]
    for text in "abcde":
        memory.add_user_message(text)
    assert [m.content for m in memory.buffer] == ["d", "e"]
    assert memory.stats().messages_dropped == 3

"""Hostile callbacks: a summarizer or hook that changes, keeps or re-uses what it is given, or calls
back into the memory, never corrupts it, never hangs it.

Public API only. The no-loss model is the one of ``tests/test_properties.py``: every message
added is, at all times, in the buffer, or in exactly one committed eviction, or removed by a
``clear()``.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Sequence
from typing import Any, Callable, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmem import AsyncRollingMemory, AsyncSummaryMemory, RollingMemory, SummaryMemory, WindowMemory
from rollmem.memory import Memory
from rollmem.message import Message, ToolCall
from rollmem.policies import KeepAll

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


# -- re-entry: every callback calls every method; it works or raises RuntimeError at once ----------


def pin_if_there(memory: Any, message_id: str) -> None:
    if any(m.id == message_id for m in memory.buffer):
        memory.pin(message_id)


def refused(reenter: Reenter, error: RuntimeError) -> bool:
    """Whether ``error`` is the memory refusing the re-entry (the only acceptable failure)."""
    return reenter.outcome is error or "called back" in str(error)


SYNC_CALLS: dict[str, Callable[[Any], Any]] = {
    "add": lambda m: m.add_user_message("re entered", id="re"),
    "extend": lambda m: m.extend([Message("user", "re extended")]),
    "fold": lambda m: m.fold(0) if hasattr(m, "fold") else None,
    "clear": lambda m: m.clear(),
    "pin": lambda m: pin_if_there(m, "first"),
    "stats": lambda m: m.stats(),
    "get_messages": lambda m: m.get_messages(),
    "to_dict": lambda m: m.to_dict(),
    "set_summary": lambda m: setattr(m, "summary", "assigned"),
    "set_buffer": lambda m: setattr(m, "buffer", list(m.buffer)[1:]),
}


class Reenter:
    """A summarizer, hook and counter that each call ``method`` once, the first time they run."""

    def __init__(self, where: str, method: str, run: Callable[[Any], Any]) -> None:
        self.where = where
        self.method = method
        self.run = run
        self.memory: Any = None
        self.fired = False
        self.outcome: Optional[BaseException] = None
        self.result: Any = None

    def fire(self, where: str) -> Any:
        if where != self.where or self.fired or self.memory is None:
            return None
        self.fired = True
        try:
            self.result = self.run(self.memory)
        except RuntimeError as error:  # the only acceptable refusal
            self.outcome = error
        return self.result

    def summarize(self, summary: str, messages: Sequence[Message]) -> str:
        self.fire("summarizer")
        return summary + "".join(f"[{m.content}]" for m in messages)

    def on_evict(self, messages: Sequence[Message]) -> None:
        self.fire("hook")

    def count(self, text: str) -> int:
        self.fire("counter")
        return len(text.split())


def check_consistent(memory: Any) -> None:
    stats = memory.stats()
    assert stats.messages == len(memory.buffer)
    if stats.buffer_tokens is not None:
        assert stats.buffer_tokens == sum(len(m.token_text().split()) for m in memory.buffer)


def sync_memories(r: Reenter) -> list[Any]:
    return [
        RollingMemory(4, r.summarize, r.count, on_evict=r.on_evict),
        SummaryMemory(r.summarize, on_evict=r.on_evict),
    ]


def run_with_timeout(body: Callable[[], None]) -> None:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            body()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(TIMEOUT)
    assert not thread.is_alive(), "re-entry hung"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("method", sorted(SYNC_CALLS))
@pytest.mark.parametrize("where", ["summarizer", "hook", "counter"])
@pytest.mark.parametrize("kind", [0, 1])
def test_sync_reentry_works_or_raises_runtime_error(where: str, method: str, kind: int) -> None:
    reenter = Reenter(where, method, SYNC_CALLS[method])
    memory = sync_memories(reenter)[kind]

    def body() -> None:
        memory.add_user_message("first message", id="first")
        reenter.memory = memory
        try:
            for text in ("two words", "three more words", "and four more words"):
                memory.add_user_message(text)
        except RuntimeError as error:
            if not refused(reenter, error):
                raise
        check_consistent(memory)
        reenter.memory = None
        memory.add_user_message("after")  # still usable
        check_consistent(memory)
        if isinstance(memory, RollingMemory):
            assert memory.stats().buffer_tokens <= 4 or len(memory.buffer) == 1

    run_with_timeout(body)
    if where != "counter":  # a counter only runs while measuring: it may have nothing to measure
        assert reenter.fired


ASYNC_CALLS: dict[str, Callable[[Any], Any]] = {
    **{name: call for name, call in SYNC_CALLS.items() if name not in ("add", "extend", "fold")},
    "add": lambda m: m.add_user_message("re entered", id="re"),
    "extend": lambda m: m.extend([Message("user", "re extended")]),
    "fold": lambda m: m.fold(0),
    "flush": lambda m: m.flush(),
}


class AsyncReenter(Reenter):
    async def afire(self, where: str) -> None:
        outcome = self.fire(where)
        if asyncio.iscoroutine(outcome):
            try:
                await outcome
            except RuntimeError as error:
                self.outcome = error

    async def asummarize(self, summary: str, messages: Sequence[Message]) -> str:
        await self.afire("summarizer")
        return summary + "".join(f"[{m.content}]" for m in messages)

    async def aon_evict(self, messages: Sequence[Message]) -> None:
        await self.afire("hook")

    def count(self, text: str) -> int:
        outcome = self.fire("counter")
        if asyncio.iscoroutine(outcome):
            outcome.close()  # a sync counter cannot await: calling the coroutine function is all it can do
        return len(text.split())


@pytest.mark.parametrize("method", sorted(ASYNC_CALLS))
@pytest.mark.parametrize("where", ["summarizer", "hook", "counter"])
@pytest.mark.parametrize("kind", ["rolling", "rolling-background", "summary"])
def test_async_reentry_works_or_raises_runtime_error(where: str, method: str, kind: str) -> None:
    reenter = AsyncReenter(where, method, ASYNC_CALLS[method])

    async def main() -> None:
        if kind == "summary":
            memory: Any = AsyncSummaryMemory(reenter.asummarize, on_evict=reenter.aon_evict)
        else:
            memory = AsyncRollingMemory(
                4,
                reenter.asummarize,
                reenter.count,
                on_evict=reenter.aon_evict,
                background=kind == "rolling-background",
            )
        await memory.add_user_message("first message", id="first")
        reenter.memory = memory
        try:
            for text in ("two words", "three more words", "and four more words"):
                await memory.add_user_message(text)
            await memory.flush()
        except RuntimeError as error:
            if not refused(reenter, error):
                raise
        check_consistent(memory)
        reenter.memory = None
        await memory.add_user_message("after")
        await memory.flush()
        check_consistent(memory)
        if kind != "summary":
            assert memory.stats().buffer_tokens <= 4 or len(memory.buffer) == 1

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    if where != "counter":
        assert reenter.fired


def test_the_issue_example_an_async_hook_that_folds_returns() -> None:
    async def main() -> list[str]:
        memory: Any = None

        async def hook(messages: Sequence[Message]) -> None:
            await memory.fold(keep_last=1)

        memory = AsyncRollingMemory(max_tokens=3, summarize_fn=lambda s, ev: s + "x", on_evict=hook)
        await memory.add_user_message("a b c")
        await memory.add_user_message("d e f")
        return [m.content for m in memory.buffer]

    assert asyncio.run(asyncio.wait_for(main(), TIMEOUT)) == ["d e f"]


def test_flush_from_a_hook_raises_at_once() -> None:
    async def main() -> None:
        memory: Any = None
        seen: list[BaseException] = []

        async def hook(messages: Sequence[Message]) -> None:
            try:
                await memory.flush()
            except RuntimeError as error:
                seen.append(error)

        memory = AsyncRollingMemory(max_tokens=1, on_evict=hook, background=True)
        await memory.add_user_message("a")
        await memory.add_user_message("b")
        await memory.flush()
        assert len(seen) == 1
        assert "wait for itself" in str(seen[0])

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_a_counter_that_adds_raises_runtime_error_and_adds_nothing() -> None:
    memory: Any = None

    def counter(text: str) -> int:
        memory.add_user_message("from the counter")
        return 1

    memory = RollingMemory(10, token_counter=counter)
    with pytest.raises(RuntimeError, match="token_counter called back into the memory"):
        memory.add_user_message("hello")
    assert memory.buffer == []


# -- a counter whose result no store can keep (issue 28 item 5) ------------------------------------

HUGE = 2**64
RULE = "expected a non-negative int below 2**63"


def exactly(text: str) -> str:
    return f"^{re.escape(text)}$"


def _huge_for(word: str) -> Callable[[str], int]:
    """A counter that returns 2**64 for a text containing ``word``, else its length."""
    return lambda text: HUGE if word in text else len(text)


@pytest.mark.parametrize("cost", [2**63, HUGE, 10**30])
def test_a_cost_of_2_63_or_more_is_refused_naming_the_counter(cost: int) -> None:
    memory = RollingMemory(100, token_counter=lambda text: cost if "big" in text else 1)
    memory.add_user_message("a")
    before = memory.to_dict()
    expected = exactly(f"token_counter returned {cost} for the new message; {RULE}")
    with memory.record() as changes, pytest.raises(ValueError, match=expected):
        memory.add_user_message("big")
    assert (memory.to_dict(), changes, memory.costs()) == (before, [], [1])


def test_the_largest_storable_cost_is_accepted() -> None:
    memory = RollingMemory(2**63 - 1, token_counter=lambda text: 2**63 - 1)
    memory.add_user_message("a")
    assert memory.costs() == [2**63 - 1]


def test_extend_with_a_huge_cost_appends_nothing() -> None:
    memory = RollingMemory(100, token_counter=_huge_for("huge"))
    with pytest.raises(ValueError, match=exactly(f"token_counter returned {HUGE} for messages[1]; {RULE}")):
        memory.extend([Message("user", "a"), Message("user", "huge")])
    assert memory.buffer == []


def test_a_huge_cost_found_when_recounting_an_assigned_buffer_names_its_position() -> None:
    memory = RollingMemory(100, token_counter=_huge_for("huge"))
    memory.buffer = [Message("user", "a"), Message("user", "huge")]
    with pytest.raises(ValueError, match=exactly(f"token_counter returned {HUGE} for buffer[1]; {RULE}")):
        memory.add_user_message("b")
    assert [m.content for m in memory.buffer] == ["a", "huge"]


def test_a_policy_cost_of_2_63_names_the_policy() -> None:
    class Heavy(KeepAll):
        def cost(self, message: Message) -> int:
            return 2**63

    memory = Memory(Heavy())
    with pytest.raises(ValueError, match=exactly(f"Heavy.cost returned {2**63} for the new message; {RULE}")):
        memory.add_user_message("x")
    assert memory.buffer == []


def test_async_memory_refuses_a_huge_cost() -> None:
    async def main() -> None:
        memory = AsyncRollingMemory(100, token_counter=_huge_for("huge"))
        with pytest.raises(
            ValueError, match=exactly(f"token_counter returned {HUGE} for the new message; {RULE}")
        ):
            await memory.add_user_message("huge")
        assert memory.buffer == []

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


@pytest.mark.parametrize(("costs", "bad"), [([1, HUGE], 1), ([2**63, 1], 0)])
def test_restored_costs_of_2_63_or_more_are_refused(costs: list[int], bad: int) -> None:
    memory = RollingMemory(100, token_counter=len)
    memory.add_user_message("kept")
    before = memory.to_dict()
    state = {"version": 2, "summary": "", "buffer": [{"role": "user", "content": "x"}] * len(costs)}
    with pytest.raises(ValueError, match=exactly(f"costs[{bad}] must be < 2**63, got {costs[bad]}")):
        memory.restore(state, costs=costs)
    assert (memory.to_dict(), memory.costs()) == (before, [4])


def test_extending_with_nothing_calls_no_counter() -> None:
    calls: list[str] = []
    memory = RollingMemory(100, token_counter=lambda text: calls.append(text) or 1)
    memory.buffer = [Message("user", "a")]  # counted at the next add
    with memory.record() as changes:
        memory.extend([])
    assert (calls, changes) == ([], [])

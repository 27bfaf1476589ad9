"""Helpers shared by the session tests and their worker processes.

Run as a script, this module is one writer of the multi-process test::

    python _support.py BACKEND LOCATION NAMESPACE SESSION_ID WORKER COUNT GO_FILE

It prints ``ready``, waits until GO_FILE exists, adds COUNT messages ``p{WORKER}-{i}`` to the
session, one ``open`` block each, then prints ``{"retries": n}``. With ``contend`` first
(``python _support.py contend BACKEND LOCATION NAMESPACE WORKER TURNS BUDGET GO_FILE``) it is one
writer of the contention test instead (:func:`contend`) and prints its :class:`Outcome` as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from rollmem.errors import ConflictError
from rollmem.memory import RollingMemory
from rollmem.message import Message
from rollmem.sessions import Sessions
from rollmem.stores import Head, LogEntry, LogWrite, StoredLog

__all__ = [
    "CONTENDED",
    "Outcome",
    "contend",
    "contending_sessions",
    "fold_ids",
    "head_of",
    "join_first_words",
    "make_store",
    "put_messages",
    "stored_log",
    "turn_text",
    "worker",
]


def fold_ids(summary: str, messages: Sequence[Message]) -> str:
    """A summarizer whose summary lists the content of every message it folded, in order."""
    return " ".join([summary, *(m.content for m in messages)]).strip()


def stored_log(store: Any, session_id: str) -> Optional[StoredLog]:
    """What the store holds for a session, in the log protocol's terms."""
    return store.load(session_id)


def head_of(store: Any, session_id: str) -> Head:
    loaded = stored_log(store, session_id)
    assert loaded is not None
    return loaded.head


def put_messages(store: Any, session_id: str, messages: Sequence[str], summary: str = "") -> None:
    """Create a session holding these message JSON texts, verbatim."""
    entries = tuple(LogEntry(text, -1) for text in messages)
    store.write(session_id, LogWrite("", entries, summary=summary, create=True))


def make_store(name: str, location: str, namespace: str) -> Any:
    """A store of backend ``name`` on ``location``, private to ``namespace``."""
    if name == "sqlite":
        from rollmem.stores import SQLiteStore

        return SQLiteStore(location)
    if name in ("redis", "redis-cluster"):
        from rollmem.stores import RedisStore

        return RedisStore(location, prefix=namespace + ":", cluster=name == "redis-cluster")
    if name in ("postgres", "pgbouncer"):
        from rollmem.stores import PostgresStore

        return PostgresStore(location, table=namespace)
    raise ValueError(f"no shared store {name!r}")


# The multi-process test: a tight budget so that most adds fold, and retries without limit
# (a lost compare-and-set is the thing under test, not an error).
WORKER_MAX_TOKENS = 8


def worker(
    backend: str, location: str, namespace: str, session_id: str, index: int, count: int, go: Path
) -> None:
    store = make_store(backend, location, namespace)
    sessions = Sessions(store, lambda: RollingMemory(WORKER_MAX_TOKENS, fold_ids), max_retries=1_000_000)
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.005)
    for number in range(count):
        with sessions.open(session_id) as memory:
            memory.add_user_message(f"p{index}-{number}")
    store.close()
    print(json.dumps({"retries": sessions.retries}), flush=True)


# -- the contention test: many writers, one session, turns that fold ------------------------------

CONTENDED = "shared"


def join_first_words(summary: str, messages: Sequence[Message]) -> str:
    """A summarizer that keeps the first word of each folded message: the summary records
    exactly which messages a committed fold took, in order."""
    return " ".join([summary, *(m.content.split()[0] for m in messages)]).strip()


def turn_text(index: int, turn: int) -> str:
    """The one 4-word message writer ``index`` adds in ``turn``; its first word names it."""
    return f"w{index}-{turn} one two three"


@dataclass
class Outcome:
    """What one writer saw: turns refused (with their errors) and the evictions its hook got."""

    refused: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)


def contending_sessions(store: Any, budget: int, outcome: Outcome) -> Sessions[RollingMemory]:
    """The factory of the issue: ``RollingMemory(max_tokens=budget, summarize_fn=join_first_words)``,
    with a hook that records each eviction it is given."""

    def record(messages: Sequence[Message]) -> None:
        outcome.evicted.extend(m.content.split()[0] for m in messages)

    return Sessions(store, lambda: RollingMemory(budget, join_first_words, on_evict=record))


def contend(sessions: Sessions[RollingMemory], index: int, turns: int, outcome: Outcome) -> None:
    """``turns`` turns of writer ``index``, each: open, add one message, close."""
    for turn in range(turns):
        try:
            with sessions.open(CONTENDED) as memory:
                memory.add_user_message(turn_text(index, turn))
        except ConflictError as exc:
            outcome.refused.append(str(exc))


def run_writers(argument_lists: Sequence[Sequence[str]], go: Path, timeout: float) -> list[Any]:
    """Run this module as one writer process per argument list, start them together (each prints
    ``ready``, then ``go`` is created) and return the JSON each one printed last. Every writer must
    exit with 0 within ``timeout`` seconds; none is left running."""
    workers = [
        subprocess.Popen(
            [sys.executable, __file__, *arguments], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for arguments in argument_lists
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            assert worker.stdout.readline() == "ready\n", worker.communicate()[1]
        go.touch()  # all writers start together
        outputs = [worker.communicate(timeout=timeout) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    for worker, (_out, err) in zip(workers, outputs):
        assert worker.returncode == 0, err
    return [json.loads(out) for out, _ in outputs]


def _contend_main(args: Sequence[str]) -> None:
    backend, location, namespace, index, turns, budget, go = args
    store = make_store(backend, location, namespace)
    outcome = Outcome()
    sessions = contending_sessions(store, int(budget), outcome)
    print("ready", flush=True)
    while not Path(go).exists():
        time.sleep(0.005)
    contend(sessions, int(index), int(turns), outcome)
    store.close()
    print(json.dumps(asdict(outcome)), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "contend":
        _contend_main(sys.argv[2:])
    else:
        _, backend, location, namespace, session_id, index, count, go = sys.argv
        worker(backend, location, namespace, session_id, int(index), int(count), Path(go))

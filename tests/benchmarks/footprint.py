"""Bytes a buffered message costs beyond its text: what a server pays per live session.

Run ``python tests/benchmarks/footprint.py [--quick]`` (never collected by pytest). The messages are
the first 100 of the synthetic conversation (``workload.py``: user and assistant turns, tool calls
and their results), taken apart beforehand into their strings, so that every string (content, role,
call ids, names, arguments) exists before measuring and only what rollmem allocates is counted:
the ``Message`` and ``ToolCall`` objects, their tuples, the costs and the memory's bookkeeping.
``tracemalloc`` reports the bytes still allocated after a ``gc.collect()``, minus those before.
Three cases, each divided by the number of messages it leaves in the buffer:

- **added**: a fresh ``RollingMemory`` (default counter, a budget nothing reaches), each message
  added with ``add_message``; the figure issue 21 compares with 0.6.0's 20 KiB per 100 messages.
- **long-running**: the same, into a memory that first took and folded away 20,000 messages
  (2,000 with ``--quick``), so positions are past the small integers Python caches.
- **loaded**: ``restore()`` of the 100 messages' ``to_dict()`` form with their known costs, as a
  session cache does after a load (the dicts exist before measuring).

Also shown, for the *added* case: how much of it the message objects alone take. Deterministic (no
timing), the same figures on every run of one Python version. Target, judged for every case (exit 1
when it fails): at most 205 bytes per message, i.e. 0.6.0's 20 KiB per 100 messages.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import workload  # noqa: E402

from rollmem import Message, RollingMemory, ToolCall  # noqa: E402

MESSAGES = 100
TARGET = 205  # bytes per message beyond its text: rollmem 0.6.0's 20 KiB per 100 messages
BUDGET = 10**9  # nothing is evicted while measuring

Fields = tuple[str, str, Optional[list[tuple[str, str, str]]], Optional[str]]


class Counter:
    """The bytes allocated and still held inside ``with counter.measure():``."""

    bytes = 0

    @contextmanager
    def measure(self) -> Iterator[None]:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        yield
        gc.collect()
        self.bytes = tracemalloc.get_traced_memory()[0] - before


def taken_apart(messages: Sequence[Message]) -> list[Fields]:
    """Each message as its strings: role, content, calls as (id, name, arguments), call id."""
    return [
        (
            m.role,
            m.content,
            [(c.id, c.name, c.arguments) for c in m.tool_calls] if m.tool_calls else None,
            m.tool_call_id,
        )
        for m in messages
    ]


def add_all(memory: RollingMemory, fields: Sequence[Fields]) -> None:
    """Build and add each message, its tool calls included."""
    for role, content, calls, call_id in fields:
        tool_calls = [ToolCall(*call) for call in calls] if calls else ()
        memory.add_message(role, content, tool_calls=tool_calls, tool_call_id=call_id)


def added(fields: Sequence[Fields], folded_before: int) -> tuple[int, int]:
    """Bytes per message for adding ``fields`` to a memory that folded ``folded_before`` messages."""
    memory = RollingMemory(BUDGET, lambda summary, evicted: "The conversation so far.")
    if folded_before:
        old = taken_apart(workload.conversation(folded_before, seed=7))
        add_all(memory, old)
        memory.fold()
        del old
    memory.add_message("user", "warm-up")  # first-use allocations are not per message
    memory.fold()
    counter = Counter()
    with counter.measure():
        add_all(memory, fields)
    assert len(memory.buffer) == len(fields)
    return counter.bytes, len(fields)


def loaded(messages: Sequence[Message]) -> tuple[int, int]:
    """Bytes per message for ``restore()`` of the messages' dict form with known costs."""
    source = RollingMemory(BUDGET)
    source.extend(messages)
    state, costs = source.to_dict(), source.costs()
    memory = RollingMemory(BUDGET)
    memory.restore({**state, "buffer": []})  # first-use allocations are not per message
    counter = Counter()
    with counter.measure():
        memory.restore(state, costs=costs)
    assert memory.buffer == list(messages)
    return counter.bytes, len(messages)


def messages_alone(fields: Sequence[Fields]) -> int:
    """Bytes the message objects alone take (their list's slots not counted)."""
    kept: list[Any] = [None] * len(fields)
    counter = Counter()
    with counter.measure():
        for index, (role, content, calls, call_id) in enumerate(fields):
            tool_calls = tuple(ToolCall(*call) for call in calls) if calls else ()
            kept[index] = Message(role, content, tool_calls=tool_calls, tool_call_id=call_id)
    return counter.bytes


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fold 2,000 messages before, not 20,000 (CI)")
    folded = 2_000 if parser.parse_args(argv).quick else 20_000
    messages = workload.conversation(MESSAGES)
    fields = taken_apart(messages)
    tracemalloc.start()
    try:
        cases = {
            "added": added(fields, 0),
            f"long-running ({folded:,} folded before)": added(fields, folded),
            "loaded (restore with costs)": loaded(messages),
        }
        alone = messages_alone(fields)
    finally:
        tracemalloc.stop()
    print(f"Python {sys.version.split()[0]}, {MESSAGES} messages of the synthetic conversation")
    print(f"{'case':<36} {'bytes':>8} {'bytes/message':>14}")
    worst = 0.0
    for name, (total, count) in cases.items():
        per = total / count
        worst = max(worst, per)
        print(f"{name:<36} {total:>8,} {per:>14.0f}")
    total, count = cases["added"]
    bookkeeping = (total - alone) / count
    print(f"of which message objects: {alone / count:.0f} bytes/message; bookkeeping: {bookkeeping:.0f}")
    verdict = "PASS" if worst <= TARGET else "FAIL"
    print(f"{verdict}  bytes per buffered message beyond its text <= {TARGET} in every case: {worst:.0f}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())

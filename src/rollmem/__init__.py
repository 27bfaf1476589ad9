"""rollmem: bounded conversation memory for LLM apps, a running summary plus recent turns verbatim."""

from __future__ import annotations

from .memory import (
    AsyncRollingMemory,
    AsyncSummarizeFn,
    AsyncSummaryMemory,
    BufferMemory,
    MemoryStats,
    RollingMemory,
    SummarizeFn,
    SummaryMemory,
    TokenCounter,
    WindowMemory,
)
from .message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
from .policies import cached_target
from .recall import RecallHit, RecallIndex

__version__ = "0.7.0"
"""The release, defined here only: the build (hatch) and ``rollmem --version`` read it."""

__all__ = [
    "ASSISTANT",
    "SYSTEM",
    "TOOL",
    "USER",
    "AsyncRollingMemory",
    "AsyncSummarizeFn",
    "AsyncSummaryMemory",
    "BufferMemory",
    "MemoryStats",
    "Message",
    "RecallHit",
    "RecallIndex",
    "RollingMemory",
    "SummarizeFn",
    "SummaryMemory",
    "TokenCounter",
    "ToolCall",
    "WindowMemory",
    "__version__",
    "cached_target",
]

"""rollmem: bounded conversation memory for LLM apps, a running summary plus recent turns verbatim."""

from __future__ import annotations

from .message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall

__version__ = "0.1.0"

__all__ = [
    "ASSISTANT",
    "SYSTEM",
    "TOOL",
    "USER",
    "Message",
    "ToolCall",
    "__version__",
]

"""A rolling summary for LlamaIndex's ``Memory``: :class:`RollingSummaryBlock`.

Needs the ``llama-index`` extra (Python 3.10+). Importing this module does not import LlamaIndex:
the first access to ``RollingSummaryBlock`` does (once), raising
:class:`~rollmem.errors.MissingExtraError` when it is missing. ``ChatMessage`` objects become rollmem
messages as the docs page says (``chatbot``/``model`` are ``assistant``; tool calls from blocks and
``additional_kwargs``; media as ``[image]``-style placeholders; thinking and cache points left out).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Callable, Optional, cast

from .. import AsyncSummaryMemory, MemoryStats, Message, ToolCall
from .. import _validate as v
from .._extras import import_extra
from ..counters import words
from ..summarizers import newest_suffix

__all__ = ["RollingSummaryBlock"]

if TYPE_CHECKING:
    RollingSummaryBlock: Any  # built by __getattr__ on first access

logger = logging.getLogger("rollmem")

PENDING_HEADING = "Earlier turns not yet in the summary:"
"""The line above the pending messages in the block's text (see ``RollingSummaryBlock``)."""


def _import(module: str) -> Any:
    return import_extra(module, package="llama-index-core", extra="llama-index", feature=__name__)


def _arguments(value: object) -> str:
    if not isinstance(value, Mapping):
        return "" if value is None else str(value)
    try:  # compact JSON, non-ASCII kept: as the adapters write tool-call arguments
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _plain(value: object) -> object:
    dump = getattr(value, "model_dump", None)
    return dump() if callable(dump) else value


def _kwargs_call(raw: object) -> ToolCall:
    """One ``additional_kwargs["tool_calls"]`` entry: OpenAI-style, Anthropic-style, or anything."""
    data = _plain(raw)
    if not isinstance(data, Mapping):
        return ToolCall("", "", str(data))
    function = _plain(data.get("function"))
    if isinstance(function, Mapping):
        name, arguments = function.get("name"), function.get("arguments")
    else:
        name = data.get("name", data.get("tool_name"))
        keys = ("input", "arguments", "tool_kwargs", "args")
        arguments = next((data[key] for key in keys if key in data), None)
    call_id = next((data[key] for key in ("id", "tool_id", "tool_call_id") if data.get(key)), "")
    return ToolCall(_text(call_id), _text(name), _arguments(arguments))


def _convert(message: Any) -> Message:
    role = str(getattr(message.role, "value", message.role))
    texts, calls = list[str](), list[ToolCall]()
    for block in message.blocks:
        kind = getattr(block, "block_type", type(block).__name__)
        if kind == "text":
            texts.append(block.text)
        elif kind == "tool_call":
            calls.append(ToolCall(block.tool_call_id or "", block.tool_name, _arguments(block.tool_kwargs)))
        elif kind == "document" and getattr(block, "title", None):
            texts.append(f"[document: {block.title}]")
        elif kind not in ("thinking", "cache"):
            texts.append(f"[{kind}]")
    extra = message.additional_kwargs or {}
    seen = {call.id for call in calls if call.id}
    raw_calls = extra.get("tool_calls")
    if isinstance(raw_calls, Iterable) and not isinstance(raw_calls, (str, bytes, Mapping)):
        calls += [call for call in map(_kwargs_call, raw_calls) if not (call.id and call.id in seen)]
    call_id, name = extra.get("tool_call_id"), extra.get("name")
    return Message(
        "assistant" if role in ("chatbot", "model") else role,
        "\n".join(texts),
        tool_calls=calls,
        tool_call_id=call_id if isinstance(call_id, str) else None,
        metadata={"name": name} if isinstance(name, str) else {},  # the key the adapters carry
    )


def _report(block: Any, error: Exception) -> None:
    """A failed fold to the block's ``on_error``, or a warning on the ``rollmem`` logger."""
    what = "the summarizer failed (%r); %d messages stay pending and are retried with the next flush"
    if block.on_error is not None:
        block.on_error(error)
    else:
        logger.warning("RollingSummaryBlock %r: " + what, block.name, error, len(block.pending))


_block_lock = threading.Lock()
_block_class: Optional[type] = None


def __dir__() -> list[str]:
    """The module's names, the class built on first access included."""
    return sorted({*globals(), *__all__})


def __getattr__(name: str) -> Any:
    """``RollingSummaryBlock`` is built (importing LlamaIndex) on first access."""
    if name == "RollingSummaryBlock":
        global _block_class
        with _block_lock:
            if _block_class is None:
                _block_class = _build_block_class()
        return _block_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _build_block_class() -> type:
    memory_module = _import("llama_index.core.memory.memory")  # where 0.12 and 0.14 both define it
    pydantic = _import("llama_index.core.bridge.pydantic")
    chat_message: type = _import("llama_index.core.base.llms.types").ChatMessage
    Field, PrivateAttr = pydantic.Field, pydantic.PrivateAttr
    base: Any = memory_module.BaseMemoryBlock[str]

    class RollingSummaryBlock(base):  # type: ignore[misc]  # base is Any: see module docstring
        """A LlamaIndex memory block (``BaseMemoryBlock[str]``) holding a rolling summary, for
        ``Memory.from_defaults(memory_blocks=[...])``: each flush of the short-term memory folds
        by one ``summarize_fn(summary, evicted)`` call (sync or async; rollmem messages). When it
        fails, the error goes to ``on_error(error)`` (default: a warning on the ``"rollmem"``
        logger) and the messages stay *pending* (retried with the next flush, shown meanwhile
        under :data:`PENDING_HEADING`). Asked to shrink, the text keeps its newest lines that fit
        (by ``token_counter``). Save with :meth:`to_dict`, restore with :meth:`from_dict`."""

        name: str = Field(default="summary", description="The name of the memory block.")
        summarize_fn: Any = Field(exclude=True, description="summarize_fn(summary, evicted), sync or async.")
        token_counter: Any = Field(default=None, exclude=True, description="Counts tokens when truncating.")
        on_error: Any = Field(default=None, exclude=True, description="Called with a summarizer error.")
        _memory: Any = PrivateAttr(default=None)

        def model_post_init(self, context: Any) -> None:
            super().model_post_init(context)
            v.check_callable("token_counter", self.token_counter, optional=True)
            v.check_callable("on_error", self.on_error, optional=True)
            self._memory = AsyncSummaryMemory(self.summarize_fn)  # checks summarize_fn

        @classmethod
        def from_dict(
            cls, data: Mapping[str, Any], *, summarize_fn: Any, **fields: Any
        ) -> RollingSummaryBlock:
            """A block restored from :meth:`to_dict` output (``fields``: ``name``, ``token_counter``,
            ``priority``...); bad data raises :class:`~rollmem.errors.InvalidStateError`."""
            block = cls(summarize_fn=summarize_fn, **fields)
            block._memory = AsyncSummaryMemory.from_dict(data, summarize_fn=summarize_fn)
            return block

        def to_dict(self) -> dict[str, Any]:
            """``{"version": 2, "summary": ..., "buffer": [pending messages]}``, JSON-ready."""
            return dict(self._memory.to_dict())

        @property
        def summary(self) -> str:
            """The running summary (``""`` before the first fold)."""
            return str(self._memory.summary)

        @property
        def pending(self) -> list[Message]:
            """Flushed messages whose fold failed, oldest first: retried with the next flush."""
            return list(self._memory.buffer)

        def stats(self) -> MemoryStats:
            """Folds, summarizer calls, failed folds and messages summarized so far."""
            return cast(MemoryStats, self._memory.stats())

        async def afold(self) -> None:
            """Fold the pending messages now; a summarizer error propagates (they stay pending)."""
            await self._memory.fold()

        async def _aget(self, messages: Optional[list[Any]] = None, **block_kwargs: Any) -> str:
            summary, pending = self._memory.summary, self._memory.buffer
            lines = "\n".join([PENDING_HEADING, *(str(message) for message in pending)]) if pending else ""
            return "\n\n".join(part for part in (summary, lines) if part)

        async def _aput(self, messages: list[Any]) -> None:
            for index, message in enumerate(messages):
                if not isinstance(message, chat_message):
                    raise v.type_error(f"messages[{index}]", "ChatMessage", message)
            if not messages:
                return
            try:
                await self._memory.extend([_convert(message) for message in messages])
            except Exception as error:  # the batch stays in the buffer: retried with the next flush
                _report(self, error)

        async def atruncate(self, content: str, tokens_to_truncate: int) -> Optional[str]:
            """The newest part of ``content`` that is ``tokens_to_truncate`` shorter (measured with
            ``token_counter``), or ``None`` when nothing fits. The summary itself is unchanged."""
            counter: Callable[[str], int] = self.token_counter or words
            keep = counter(content) - tokens_to_truncate
            return (newest_suffix(content, keep, counter) or None) if keep > 0 else None

    RollingSummaryBlock.__qualname__ = "RollingSummaryBlock"
    RollingSummaryBlock.__module__ = __name__
    return RollingSummaryBlock

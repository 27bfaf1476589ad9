"""A rolling summary for LlamaIndex's ``Memory``: :class:`RollingSummaryBlock`.

Needs the ``llama-index`` extra (``pip install "rollmem[llama-index]"``, package
``llama-index-core``, Python 3.10+). Importing this module does not import LlamaIndex: the first
access to ``RollingSummaryBlock`` does, and raises :class:`~rollmem.errors.MissingExtraError`
when it is not installed.

LlamaIndex's ``Memory`` keeps recent messages in a short-term queue; when the queue is over
``token_limit * chat_history_token_ratio`` it flushes the oldest messages to its memory blocks
(``block.aput(messages, from_short_term_memory=True)``). ``RollingSummaryBlock`` folds them into
a running summary with your ``summarize_fn(summary, evicted) -> str`` (sync or async; the same
function every rollmem memory takes), and ``memory.get()`` shows that summary in the memory
message (``<memory><summary>...</summary></memory>``).

Converting LlamaIndex ``ChatMessage`` to rollmem :class:`~rollmem.Message` (what the summarizer
receives): the role's value (``chatbot`` and ``model`` become ``assistant``); the text blocks
joined with ``"\\n"``; ``ToolCallBlock`` blocks, and OpenAI-style ``additional_kwargs["tool_calls"]``
(dicts or SDK objects; Anthropic-style ``name``/``input`` too), become ``tool_calls`` (arguments as
compact JSON); ``additional_kwargs["tool_call_id"]`` becomes ``tool_call_id`` and
``additional_kwargs["name"]`` ``metadata["name"]``. Image, audio, video and document blocks are
written as a ``[image]``-style placeholder (a text summarizer cannot read them); thinking blocks and
cache points are left out. Other ``additional_kwargs`` are not carried.

Typing: LlamaIndex is loaded with :func:`importlib.import_module`, so type checkers never analyse
it (this package's mypy runs with ``python_version = 3.9``, which LlamaIndex does not support).
``RollingSummaryBlock`` is a class built on first access by the module ``__getattr__`` (once).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Callable, Optional

from .. import AsyncSummaryMemory, MemoryStats, Message, ToolCall
from .. import _validate as v
from .._extras import import_extra
from ..memory import words
from ..summarizers import newest_suffix

__all__ = ["RollingSummaryBlock"]

if TYPE_CHECKING:
    RollingSummaryBlock: Any  # built by __getattr__ on first access

logger = logging.getLogger("rollmem")

PENDING_HEADING = "Earlier turns not yet in the summary:"
"""The line above the pending messages in the block's text (see ``RollingSummaryBlock``)."""

_ASSISTANT_ALIASES = frozenset({"chatbot", "model"})  # Cohere's and Gemini's names for the assistant
_SILENT_BLOCKS = frozenset({"thinking", "cache"})


def _import(module: str) -> Any:
    return import_extra(
        module, package="llama-index-core", extra="llama-index", feature="rollmem.integrations.llama_index"
    )


# -- ChatMessage -> Message --------------------------------------------------------------------


def _arguments(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        try:  # compact JSON, non-ASCII kept: as the adapters write tool-call arguments
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError):
            pass
    return str(value)


def _plain(value: object) -> object:
    dump = getattr(value, "model_dump", None)
    return dump() if callable(dump) else value


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


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
        arguments = next(
            (data[key] for key in ("input", "arguments", "tool_kwargs", "args") if key in data), None
        )
    call_id = next((data[key] for key in ("id", "tool_id", "tool_call_id") if data.get(key)), "")
    return ToolCall(_text(call_id), _text(name), _arguments(arguments))


def _convert(message: Any) -> Message:
    role = str(getattr(message.role, "value", message.role))
    if role in _ASSISTANT_ALIASES:
        role = "assistant"
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in message.blocks:
        kind = getattr(block, "block_type", type(block).__name__)
        if kind == "text":
            texts.append(block.text)
        elif kind == "tool_call":
            calls.append(ToolCall(block.tool_call_id or "", block.tool_name, _arguments(block.tool_kwargs)))
        elif kind == "document" and getattr(block, "title", None):
            texts.append(f"[document: {block.title}]")
        elif kind not in _SILENT_BLOCKS:
            texts.append(f"[{kind}]")
    extra = message.additional_kwargs or {}
    seen = {call.id for call in calls if call.id}
    raw_calls = extra.get("tool_calls")
    if isinstance(raw_calls, Iterable) and not isinstance(raw_calls, (str, bytes, Mapping)):
        for raw in raw_calls:
            call = _kwargs_call(raw)
            if not (call.id and call.id in seen):  # already given as a ToolCallBlock
                calls.append(call)
    call_id, name = extra.get("tool_call_id"), extra.get("name")
    return Message(
        role,
        "\n".join(texts),
        tool_calls=calls,
        tool_call_id=call_id if isinstance(call_id, str) else None,
        metadata={"name": name} if isinstance(name, str) else {},  # the key the adapters carry
    )


# -- the block -----------------------------------------------------------------------------------


_block_lock = threading.Lock()
_block_class: Optional[type] = None


def __dir__() -> list[str]:
    """The module's names, the class built on first access included (``dir()``, documentation tools)."""
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


def _block_text(memory: AsyncSummaryMemory) -> str:
    """What a block shows: the summary, then the pending messages under :data:`PENDING_HEADING`."""
    summary = memory.summary
    pending = memory.buffer
    if not pending:
        return summary
    lines = [PENDING_HEADING, *(str(message) for message in pending)]
    return "\n\n".join(part for part in (summary, "\n".join(lines)) if part)


def _converted(messages: list[Any], chat_message: type) -> list[Message]:
    """LlamaIndex ``ChatMessage`` objects as rollmem messages; anything else raises naming it."""
    batch = []
    for index, message in enumerate(messages):
        if not isinstance(message, chat_message):
            raise v.type_error(f"messages[{index}]", "ChatMessage", message)
        batch.append(_convert(message))
    return batch


def _report(block: Any, error: Exception) -> None:
    """A failed fold to the block's ``on_error``, or a warning on the ``rollmem`` logger."""
    if block.on_error is not None:
        block.on_error(error)
        return
    logger.warning(
        "RollingSummaryBlock %r: the summarizer failed (%r); %d messages stay pending and are "
        "retried with the next flush",
        block.name,
        error,
        len(block.pending),
    )


def _truncated(content: str, tokens_to_truncate: int, counter: Callable[[str], int]) -> Optional[str]:
    """The newest part of ``content`` that is ``tokens_to_truncate`` shorter, or ``None``."""
    keep = counter(content) - tokens_to_truncate
    if keep <= 0:
        return None
    return newest_suffix(content, keep, counter) or None


def _build_block_class() -> type:
    memory_module = _import("llama_index.core.memory.memory")  # where 0.12 and 0.14 both define it
    pydantic = _import("llama_index.core.bridge.pydantic")
    chat_message: type = _import("llama_index.core.base.llms.types").ChatMessage
    Field, PrivateAttr = pydantic.Field, pydantic.PrivateAttr
    base: Any = memory_module.BaseMemoryBlock[str]

    class RollingSummaryBlock(base):  # type: ignore[misc]  # base is Any: see module docstring
        """A LlamaIndex memory block (``BaseMemoryBlock[str]``) holding a rolling summary.

        Pass it to ``Memory.from_defaults(memory_blocks=[...])``. The messages the short-term
        memory flushes are folded into the summary by one ``summarize_fn(summary, evicted)``
        call per flush (sync or coroutine function; ``evicted`` are rollmem
        :class:`~rollmem.Message` objects, converted as the module docstring says). Each call gets
        the previous summary and only messages never summarized before. The block's text (what
        ``memory.get()`` shows under ``name``) is the summary.

        Nothing is lost when the summarizer fails: the error goes to ``on_error(error)`` (default:
        a warning on the ``"rollmem"`` logger) instead of into ``memory.put()``, and the flushed
        messages stay *pending* in the block. They are retried together with the next flush (one
        call for all of them), and meanwhile the block's text shows them verbatim below the summary,
        under :data:`PENDING_HEADING`, so the model still sees them. :meth:`afold` retries at once.

        ``priority`` is LlamaIndex's: 0 (the default) means never truncated. With a higher
        priority, LlamaIndex may ask the block to shrink its text by ``tokens_to_truncate``; the
        block then keeps the newest lines (whole sentences) that fit, measured with
        ``token_counter`` (default :func:`rollmem.counters.words`; pass one counting like the
        ``Memory``'s ``tokenizer_fn``). Truncation shortens what is shown, never the summary.

        LlamaIndex keeps blocks in memory only (its chat store holds messages, not blocks): save
        the block with :meth:`to_dict` (rollmem's state format: ``summary`` plus the pending
        messages as ``buffer``) and restore it with :meth:`from_dict`. Folds are serialized; one
        block serves one ``Memory`` (one conversation).
        """

        name: str = Field(default="summary", description="The name of the memory block.")
        summarize_fn: Any = Field(
            exclude=True, description="summarize_fn(summary, evicted) -> str, sync or async."
        )
        token_counter: Any = Field(
            default=None, exclude=True, description="Counts tokens when truncating; default words."
        )
        on_error: Any = Field(
            default=None, exclude=True, description="Called with a summarizer error; default: log it."
        )
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
            ``priority``...). Nothing is folded until the next flush; bad data raises
            :class:`~rollmem.errors.InvalidStateError` naming the field."""
            block = cls(summarize_fn=summarize_fn, **fields)
            block._memory = AsyncSummaryMemory.from_dict(data, summarize_fn=summarize_fn)
            return block

        def to_dict(self) -> dict[str, Any]:
            """``{"version": 2, "summary": ..., "buffer": [pending messages]}``, JSON-ready."""
            state: dict[str, Any] = self._memory.to_dict()
            return state

        @property
        def summary(self) -> str:
            """The running summary (``""`` before the first fold)."""
            summary: str = self._memory.summary
            return summary

        @property
        def pending(self) -> list[Message]:
            """Flushed messages whose fold failed, oldest first: retried with the next flush."""
            return list(self._memory.buffer)

        def stats(self) -> MemoryStats:
            """Folds, summarizer calls, failed folds and messages summarized so far."""
            stats: MemoryStats = self._memory.stats()
            return stats

        async def afold(self) -> None:
            """Fold the pending messages now; unlike a flush, a summarizer error propagates (the
            messages stay pending)."""
            await self._memory.fold()

        async def _aget(self, messages: Optional[list[Any]] = None, **block_kwargs: Any) -> str:
            return _block_text(self._memory)

        async def _aput(self, messages: list[Any]) -> None:
            batch = _converted(messages, chat_message)
            if not batch:
                return
            try:
                await self._memory.extend(batch)
            except Exception as error:  # the batch stays in the buffer: retried with the next flush
                _report(self, error)

        async def atruncate(self, content: str, tokens_to_truncate: int) -> Optional[str]:
            """The newest part of ``content`` that is ``tokens_to_truncate`` shorter (measured with
            ``token_counter``), or ``None`` when nothing fits. The summary itself is unchanged."""
            return _truncated(content, tokens_to_truncate, self.token_counter or words)

    RollingSummaryBlock.__qualname__ = "RollingSummaryBlock"
    RollingSummaryBlock.__module__ = __name__
    return RollingSummaryBlock

"""A rolling summary for pydantic-ai agents: a history processor, :func:`rolling_history`, for
``ProcessHistory`` (2.x) or ``history_processors`` (1.x). Needs the ``pydantic-ai`` extra (Python
3.10+; checked with ``pydantic-ai-slim`` 2.68, 2.0.0, 1.107.10, 1.0.0): building a processor
imports it, raising :class:`~rollmem.errors.MissingExtraError` when it is missing."""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import hashlib
import importlib
import json
from collections.abc import Awaitable, Sequence
from itertools import takewhile
from typing import Any, Callable, Optional, Union, cast

from .. import _validate as v
from .._extras import import_extra
from ..adapters import CONTINUATION_TEXT, CONTINUATION_TEXT_PLAIN
from ..memory import AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
from ..sessions import AsyncSessions
from ..stores import AsyncLogStore, LogStore, MemoryStore
from ._engine import DEFAULT_MAX_TOKENS, Configured, Lives, Provider, new_memory, stamp, stamp_clock, unit_of
from ._state import take_units

__all__ = ["STATE_PREFIX", "RollingHistory", "find_summary", "rolling_history"]

STATE_PREFIX = "pydantic-ai:"
"""Session ids of the conversation states in the store are this prefix plus the conversation key."""

_MARKER = "rollmem"  # key of our summary part's metadata: {"rollmem": {"summary": True, "key": ...}}
_SYSTEM_MARKER = "rollmem.summary:"  # SystemPromptPart.dynamic_ref prefix where CompactionPart is absent
_SUMMARY_TIMESTAMP = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)  # that part's timestamp
_OPENING_TEXTS = (CONTINUATION_TEXT, CONTINUATION_TEXT_PLAIN)
_CURRENT: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("rollmem_pydantic_ai_natives")


def _bind_run_context() -> dict[str, Any]:
    """``RunContext`` as ``__call__``'s ``ctx`` annotation, so pydantic-ai passes the run context
    (2.x reads the class's ``__call__``, early 1.x the object's annotations)."""
    annotations = RollingHistory.__call__.__annotations__
    if isinstance(annotations.get("ctx"), str):  # setting it twice at once sets the same
        annotations["ctx"] = importlib.import_module("pydantic_ai").RunContext
    return {"ctx": annotations["ctx"], "messages": list, "return": list}


def _quiet(kind: object) -> bool:
    """Whether a request part has no text of its own (instructions, deltas: they travel uncounted)."""
    return isinstance(kind, str) and (kind.startswith("instruction") or kind.endswith("-delta"))


def _user_text(content: Any) -> str:
    return content if isinstance(content, str) else "\n".join(map(_item_text, content))


def _item_text(item: Any) -> str:
    """A user prompt item's text, else a placeholder (``[kind: url]``)."""
    text, url, kind = getattr(item, "content", item), getattr(item, "url", None), getattr(item, "kind", None)
    if isinstance(text, str):
        return text
    kind = kind or type(item).__name__
    return f"[{kind}: {url}]" if isinstance(url, str) else f"[{kind}]"


def _tool_result_text(part: Any) -> str:
    method = getattr(part, "model_response_str", None) or getattr(part, "model_response", None)
    return str(method() if callable(method) else part.content)


def _request_message(pai: Any, part: Any, standing: bool) -> Optional[Message]:
    """One request part as a rollmem message (``None``: no text of its own); ``standing``: part of
    the run's standing system prompt."""
    kind = getattr(part, "part_kind", None)
    if kind == "system-prompt":
        return Message(SYSTEM, part.content, pinned=standing)
    if kind == "user-prompt":
        return Message(USER, _user_text(part.content))
    tool_name = getattr(part, "tool_name", None)
    if kind == "retry-feedback" or (kind == "retry-prompt" and tool_name is None):  # answering no call
        return Message(USER, _tool_result_text(part))
    if isinstance(part, pai.ToolReturnPart) or kind in ("tool-return", "retry-prompt"):
        metadata: dict[str, Any] = {"name": tool_name} if isinstance(tool_name, str) else {}
        if kind == "retry-prompt" or getattr(part, "outcome", "success") != "success":
            metadata["is_error"] = True
        return Message(TOOL, _tool_result_text(part), tool_call_id=part.tool_call_id, metadata=metadata)
    if kind == "compaction":  # another capability's summary
        return Message(SYSTEM, part.content or "")
    content = getattr(part, "content", None)
    return Message(USER, content) if not _quiet(kind) and isinstance(content, str) else None


def _response_message(pai: Any, response: Any) -> Message:
    calls = [p for p in response.parts if isinstance(p, pai.ToolCallPart)]
    texts = [p.content for p in response.parts if getattr(p, "part_kind", None) == "text"]
    calls = [ToolCall(c.tool_call_id, c.tool_name, c.args_as_json_str()) for c in calls]
    return Message(ASSISTANT, "\n".join(texts), tool_calls=calls)


def _messages(pai: Any, message: Any, standing: bool = False) -> list[Message]:
    if message.kind == "response":
        return [_response_message(pai, message)]
    converted = (_request_message(pai, part, standing) for part in message.parts)
    return [m for m in converted if m is not None]


def _summary_key(part: Any) -> Optional[tuple[str, Optional[str]]]:
    """``(summary text, recorded key)`` when ``part`` is a summary this module wrote, else ``None``."""
    kind = getattr(part, "part_kind", None)
    if kind == "compaction":
        meta = getattr(part, "metadata", None)
        mark = meta.get(_MARKER) if isinstance(meta, dict) else None
        if isinstance(mark, dict) and mark.get("summary") is True:
            key = mark.get("key")
            return part.content or "", key if isinstance(key, str) else None
    elif kind == "system-prompt":
        ref = getattr(part, "dynamic_ref", None)
        if isinstance(ref, str) and ref.startswith(_SYSTEM_MARKER):
            return part.content, ref[len(_SYSTEM_MARKER) :] or None
    return None


def _is_ours(part: Any) -> bool:
    opening = getattr(part, "part_kind", None) == "user-prompt" and getattr(part, "content", None)
    return opening in _OPENING_TEXTS or _summary_key(part) is not None


def find_summary(messages: Sequence[Any]) -> Optional[str]:
    """The text of the rollmem summary in a pydantic-ai history (what the processor wrote, wherever
    it sits; the last one if there are several), or ``None`` when the history carries none."""
    found = [_summary_key(part) for message in messages for part in getattr(message, "parts", ())]
    return next((key[0] for key in reversed(found) if key), None)


class _Native:
    """A history message without our parts, with its unit (``id``: a fingerprint of its content
    and timestamps, so a history re-created from JSON is recognised)."""

    __slots__ = ("message", "source", "unit")

    def __init__(self, pai: Any, message: Any, parts: list[Any], source: int, standing: bool) -> None:
        if len(parts) != len(message.parts):
            message = dataclasses.replace(message, parts=parts)
        self.message, self.source = message, source
        converted = _messages(pai, message, standing) or [Message(SYSTEM, "")]
        stamped = [message] if message.kind == "response" else message.parts
        when = [str(getattr(x, "timestamp", None)) for x in stamped]
        text = json.dumps([message.kind, when, [m.to_dict() for m in converted]], sort_keys=True, default=str)
        fingerprint = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        self.unit = unit_of(converted, id=fingerprint, pinned=standing)


class _Read:
    """A history (or its new messages, from ``offset``) as natives (the standing system prompt one
    of its own), our parts (summaries, opening turns) removed."""

    def __init__(self, pai: Any, messages: Sequence[Any], offset: int = 0) -> None:
        self.messages, self.natives = messages, list[_Native]()
        self.summaries: list[str] = []
        self.key: Optional[str] = None
        self.ours = 0
        for index, message in enumerate(messages, offset):
            kind = getattr(message, "kind", None)
            if kind not in ("request", "response"):
                raise v.type_error(f"messages[{index}]", "ModelRequest or ModelResponse", message)
            found = [key for part in message.parts for key in [_summary_key(part)] if key]
            self.summaries += [text for text, _ in found]
            self.key = self.key or next((key for _, key in found if key), None)
            kept = [part for part in message.parts if kind == "response" or not _is_ours(part)]
            self.ours += len(message.parts) - len(kept)
            opening = takewhile(lambda p: p.part_kind == "system-prompt", kept if index == 0 else ())
            standing = len(list(opening))
            for parts, pinned in ((kept[:standing], True), (kept[standing:], False)):
                if parts:
                    self.natives.append(_Native(pai, message, parts, index, pinned))

    def origin(self) -> Optional[str]:
        """The fingerprint of the conversation's opening message (its first unpinned one)."""
        return next((n.unit.id for n in self.natives if not n.unit.pinned), None)


class _Last:
    """A conversation's last call: the history passed, the one returned, the natives kept."""

    __slots__ = ("kept", "output", "passed", "summary")

    def __init__(self, passed: list[Any], output: list[Any], kept: list[_Native], summary: str) -> None:
        self.passed, self.output, self.kept, self.summary = passed, output, kept, summary

    def known(self, messages: list[Any]) -> Optional[int]:
        """How many leading ``messages`` are the history passed or returned last time."""
        for known in (self.output, self.passed):
            size = len(known)
            if size and len(messages) >= size and messages[0] is known[0] and messages[:size] == known:
                return size
        return None


class RollingHistory(Configured):
    """A pydantic-ai history processor (built by :func:`rolling_history`): ``await processor(ctx,
    messages)`` returns the history the model should receive. Conversations are told apart by
    ``ctx.conversation_id``, else by the key in our summary part, else by their opening message."""

    def __init__(self, store: Union[LogStore, AsyncLogStore, None] = None, **settings: Any) -> None:
        self._setup(**{**settings, "clock": settings.get("clock") or stamp_clock})
        self._pai = import_extra(
            "pydantic_ai.messages", package="pydantic-ai-slim", extra="pydantic-ai", feature=__name__
        )
        self.__annotations__ = _bind_run_context()
        self._store = store = MemoryStore() if store is None else store
        self._sessions: AsyncSessions[Any] = AsyncSessions(store, self._memory, max_retries=10)
        self._tracks: Lives[_Last] = Lives(64)  # by conversation key
        self._firsts: Lives[str] = Lives(128)  # id() of a remembered history's first message -> its key

    @property
    def store(self) -> Union[LogStore, AsyncLogStore]:
        """Where the per-conversation state is kept."""
        return self._store

    def _memory(self) -> Any:
        return new_memory(self, self._resolve, asynchronous=True)

    def _resolve(self, evicted: Sequence[Message]) -> list[Message]:
        natives = _CURRENT.get()
        return [m for u in evicted for m in _messages(self._pai, natives[str(u.id)].message, u.pinned)]

    async def __call__(self, ctx: Any, messages: list[Any]) -> list[Any]:
        """The history for the next model request: the summary, then the newest messages in budget."""
        if not isinstance(messages, list):
            raise v.type_error("messages", "a list of ModelMessage", messages)
        newest = messages[-1] if messages else None
        stamps = [getattr(x, "timestamp", None) for x in (newest, *getattr(newest, "parts", ()))]
        stamp(max((s.timestamp() for s in stamps if isinstance(s, datetime.datetime)), default=None))
        conversation_id = getattr(ctx, "conversation_id", None)
        ctx_key = conversation_id if isinstance(conversation_id, str) and conversation_id else None
        key = ctx_key or (self._firsts.take(id(messages[0])) if messages else None)
        last = None if key is None else self._tracks.take(key)
        known = None if last is None else last.known(messages)
        if key is not None and known is not None:  # only the new messages are read, counted and added
            read = _Read(self._pai, messages[known:], known)
            output = None if read.ours or read.summaries else await self._update(key, read, last, messages)
            if output is not None:
                return output
        read = _Read(self._pai, messages)
        key = ctx_key or read.key or read.origin()
        return messages if key is None else cast("list[Any]", await self._update(key, read, None, messages))

    async def _update(
        self, key: str, read: _Read, last: Optional[_Last], messages: list[Any]
    ) -> Optional[list[Any]]:
        """Add ``read`` (the new messages after ``last``'s, else the whole history) to the stored
        conversation; ``None`` when another writer moved the state ``last`` continues."""
        natives = [*(last.kept if last else ()), *read.natives]
        _CURRENT.set({n.unit.id: n for n in natives if n.unit.id})
        expect = last and (last.summary, len(last.kept), last.kept[-1].unit.id if last.kept else None)

        def step(memory: Any) -> Awaitable[Optional[tuple[str, list[int], bool]]]:
            return take_units(memory, [n.unit for n in natives], read.summaries, expect)

        outcome = await self._sessions.update(STATE_PREFIX + key, cast(Any, step))
        if outcome is None:
            return None
        summary, kept, changed = outcome[0], [natives[i] for i in outcome[1]], outcome[2]
        new = messages[len(messages) - len(read.messages) :]
        if changed:
            output = self._render(self._pai, kept, summary, key)
        else:
            output = last.output + new if last else _user_first(self._pai, messages)
        passed = [*last.passed, *new] if last else list(messages)
        self._tracks.put(key, _Last(passed, output, kept, summary))
        for history in (passed, output):
            if history:
                self._firsts.put(id(history[0]), key)
        return output

    def _render(self, pai: Any, kept: list[_Native], summary: str, key: str) -> list[Any]:
        """The history of ``kept`` (the first request merged back), the summary, a user turn first."""
        history = [native.message for native in kept]
        if len(kept) > 1 and kept[0].source == kept[1].source == 0 and kept[0].unit.pinned:
            history[:2] = [dataclasses.replace(history[0], parts=[*history[0].parts, *history[1].parts])]
        if summary:
            _insert_summary(pai, history, _summary_part(pai, summary, key))
        return _user_first(pai, history)


def _summary_part(pai: Any, summary: str, key: str) -> Any:
    """A ``CompactionPart`` with metadata (2.x), else a ``SystemPromptPart`` at a fixed timestamp
    (the same summary is the same part on every call)."""
    compaction = getattr(pai, "CompactionPart", None)
    if compaction is not None and "metadata" in {field.name for field in dataclasses.fields(compaction)}:
        return compaction(summary, metadata={_MARKER: {"summary": True, "key": key}})
    return pai.SystemPromptPart(summary, timestamp=_SUMMARY_TIMESTAMP, dynamic_ref=_SYSTEM_MARKER + key)


def _insert_summary(pai: Any, history: list[Any], part: Any) -> None:
    """The summary part first, after the standing system prompt parts (pydantic-ai recognises them
    by that position)."""
    first: Any = history[0] if history else None
    parts = list(first.parts) if getattr(first, "kind", None) == "request" else []
    count = len(list(takewhile(lambda p: getattr(p, "part_kind", None) == "system-prompt", parts)))
    if count:
        history[0] = dataclasses.replace(first, parts=[*parts[:count], part, *parts[count:]])
    else:
        history.insert(0, pai.ModelRequest(parts=[part]))


def _user_first(pai: Any, history: list[Any]) -> list[Any]:
    """``history`` opening with a user turn (:func:`rollmem.adapters.user_first`): a response before
    any gets a ``CONTINUATION_TEXT`` part before it (``_PLAIN`` with no summary), stamped as the
    response, so it is the same on every call."""
    summary = False
    for index, message in enumerate(history):
        if getattr(message, "kind", None) == "response":
            text = CONTINUATION_TEXT if summary or index else CONTINUATION_TEXT_PLAIN
            part = pai.UserPromptPart(text, timestamp=message.timestamp)
            if index:
                previous = history[index - 1]
                history = list(history)
                history[index - 1] = dataclasses.replace(previous, parts=[*previous.parts, part])
                return history
            return [pai.ModelRequest(parts=[part]), *history]
        for part in message.parts:
            kind = getattr(part, "part_kind", None)
            if kind not in ("system-prompt", "compaction") and not _quiet(kind):
                return history
            summary = summary or _summary_key(part) is not None
    return history


def rolling_history(
    max_tokens: int = DEFAULT_MAX_TOKENS,
    summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
    token_counter: Optional[TokenCounter] = None,
    *,
    target_tokens: Optional[int] = None,
    provider: Provider = None,
    clock: Optional[Callable[[], float]] = None,
    prefix_tokens: int = 0,
    store: Union[LogStore, AsyncLogStore, None] = None,
) -> RollingHistory:
    """A pydantic-ai history processor: the running summary, then the newest messages within ``max_tokens``,
    folding as :meth:`rollmem.AsyncRollingMemory.cached` does (told ``provider``, ``clock`` (default: the
    newest message's ``timestamp``), ``prefix_tokens``; an explicit ``target_tokens`` folds plainly down to
    it). ``summarize_fn(summary, evicted)`` (sync or async) receives rollmem messages (none: evicted ones are
    dropped); ``token_counter`` counts a text (default: words); ``store`` keeps each conversation's state
    (default: an in-process :class:`~rollmem.stores.MemoryStore`)."""
    return RollingHistory(**locals())  # every argument above, by name

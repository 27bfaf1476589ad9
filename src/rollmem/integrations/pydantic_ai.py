"""A rolling summary for pydantic-ai agents: a history processor, :func:`rolling_history`.

Needs the ``pydantic-ai`` extra (``pip install "rollmem[pydantic-ai]"``, Python 3.10+; checked with
``pydantic-ai-slim`` 2.68, 2.0.0, 1.107.10, 1.0.0); building a processor imports it, and raises
:class:`~rollmem.errors.MissingExtraError` when it is missing. Pass it to ``ProcessHistory``
(pydantic-ai 2.x) or ``history_processors`` (1.x).
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import hashlib
import importlib
import json
import threading
from collections.abc import Awaitable, Sequence
from typing import Any, Optional, Union, cast

from .. import _validate as v
from .._extras import import_extra
from ..adapters import CONTINUATION_TEXT, CONTINUATION_TEXT_PLAIN
from ..changes import Dropped, Folded
from ..memory import AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
from ..sessions import AsyncSessions
from ..stores import AsyncLogStore, AsyncStore, LogStore, MemoryStore, Store
from ._engine import DEFAULT_MAX_TOKENS, Configured, Lives, new_memory, unit_of

__all__ = ["STATE_PREFIX", "RollingHistory", "find_summary", "rolling_history"]

STATE_PREFIX = "pydantic-ai:"
"""Session ids of the conversation states in the store are this prefix plus the conversation key."""

_MARKER = "rollmem"  # key of our summary part's metadata: {"rollmem": {"summary": True, "key": ...}}
_SYSTEM_MARKER = "rollmem.summary:"  # SystemPromptPart.dynamic_ref prefix where CompactionPart is absent
_SUMMARY_TIMESTAMP = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)  # that part's timestamp
_OPENING_TEXTS = (CONTINUATION_TEXT, CONTINUATION_TEXT_PLAIN)
# Request parts with no text of their own: they travel with their message, uncounted.
_QUIET_REQUEST_PARTS = frozenset(
    {"instruction", "instruction-delta", "instruction-baseline", "instruction-digest"}
)
_QUIET_REQUEST_PARTS |= {"tool-availability-delta", "capability-load-delta", "model-settings-delta"}
_NOT_A_TURN = frozenset({"system-prompt", "compaction", *_QUIET_REQUEST_PARTS})
_CURRENT: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("rollmem_pydantic_ai_natives")


def _import() -> Any:
    return import_extra(
        "pydantic_ai.messages",
        package="pydantic-ai-slim",
        extra="pydantic-ai",
        feature="rollmem.integrations.pydantic_ai",
    )


_bind_lock = threading.Lock()


def _bind_run_context() -> dict[str, Any]:
    """Annotate ``RollingHistory.__call__``'s first parameter with the real ``RunContext`` (which
    pydantic-ai resolves at run time to pass the run context; this module cannot import it at
    module level): 2.x reads the class's ``__call__``, early 1.x the object's annotations."""
    annotations = RollingHistory.__call__.__annotations__
    with _bind_lock:
        if isinstance(annotations.get("ctx"), str):
            annotations["ctx"] = importlib.import_module("pydantic_ai").RunContext
    return {"ctx": annotations["ctx"], "messages": list, "return": list}


# -- converting a history --------------------------------------------------------------------------


def _user_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for item in content:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(getattr(item, "content", None), str):  # TextContent
            texts.append(item.content)
        else:
            kind = getattr(item, "kind", None) or type(item).__name__
            url = getattr(item, "url", None)
            texts.append(f"[{kind}: {url}]" if isinstance(url, str) else f"[{kind}]")
    return "\n".join(texts)


def _tool_result_text(part: Any) -> str:
    for name in ("model_response_str", "model_response"):
        method = getattr(part, name, None)
        if callable(method):
            return str(method())
    return str(part.content)


def _request_message(pai: Any, part: Any, standing: bool) -> Optional[Message]:
    """The rollmem message for one request part; ``None`` for a part with no text of its own.
    ``standing``: the part opens the history's first request (the run's standing system prompt)."""
    kind = getattr(part, "part_kind", None)
    if kind == "system-prompt":
        return Message(SYSTEM, part.content, pinned=standing)
    if kind == "user-prompt":
        return Message(USER, _user_text(part.content))
    if isinstance(part, pai.ToolReturnPart) or kind in ("tool-return", "retry-prompt"):
        tool_name = getattr(part, "tool_name", None)
        if kind == "retry-prompt" and tool_name is None:  # a retry that answers no call
            return Message(USER, _tool_result_text(part))
        metadata: dict[str, Any] = {"name": tool_name} if isinstance(tool_name, str) else {}
        if kind == "retry-prompt" or getattr(part, "outcome", "success") != "success":
            metadata["is_error"] = True
        return Message(TOOL, _tool_result_text(part), tool_call_id=part.tool_call_id, metadata=metadata)
    if kind == "retry-feedback":
        return Message(USER, _tool_result_text(part))
    if kind == "compaction":  # another capability's summary
        return Message(SYSTEM, part.content or "")
    content = getattr(part, "content", None)
    return Message(USER, content) if kind not in _QUIET_REQUEST_PARTS and isinstance(content, str) else None


def _response_message(pai: Any, response: Any) -> Message:
    texts = [part.content for part in response.parts if getattr(part, "part_kind", None) == "text"]
    calls = [
        ToolCall(part.tool_call_id, part.tool_name, part.args_as_json_str())
        for part in response.parts
        if isinstance(part, pai.ToolCallPart)
    ]
    return Message(ASSISTANT, "\n".join(texts), tool_calls=calls)


def _messages(pai: Any, message: Any, standing: bool = False) -> list[Message]:
    """One history message as rollmem messages (a request: one per part with text of its own)."""
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
    opening = (
        getattr(part, "part_kind", None) == "user-prompt" and getattr(part, "content", None) in _OPENING_TEXTS
    )
    return opening or _summary_key(part) is not None


def find_summary(messages: Sequence[Any]) -> Optional[str]:
    """The text of the rollmem summary in a pydantic-ai history (what the processor wrote, wherever
    it sits; the last one if there are several), or ``None`` when the history carries none."""
    found = None
    for message in messages:
        for part in getattr(message, "parts", ()):
            summary = _summary_key(part)
            if summary is not None:
                found = summary[0]
    return found


class _Native:
    """One message of the history without this module's parts (the first request's standing
    system prompt is one of its own), with its unit: ``id`` is a fingerprint of its content and
    timestamps, so a history re-created from JSON is recognised."""

    __slots__ = ("message", "source", "unit")

    def __init__(self, pai: Any, message: Any, source: int, standing: bool) -> None:
        self.message, self.source = message, source
        converted = _messages(pai, message, standing) or [Message(SYSTEM, "")]
        stamped = [message] if message.kind == "response" else message.parts
        when = [str(getattr(x, "timestamp", None)) for x in stamped]
        text = json.dumps([message.kind, when, [m.to_dict() for m in converted]], sort_keys=True, default=str)
        fingerprint = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        self.unit = unit_of(converted, id=fingerprint, pinned=standing)


class _Read:
    """A history (or its new messages, from ``offset``) taken apart into natives, our own parts
    (summaries, opening turns) removed."""

    def __init__(self, pai: Any, messages: Sequence[Any], offset: int = 0) -> None:
        self.natives: list[_Native] = []
        self.summaries: list[str] = []
        self.key: Optional[str] = None
        self.ours = 0
        for index, message in enumerate(messages, offset):
            kind = getattr(message, "kind", None)
            if kind not in ("request", "response"):
                raise TypeError(
                    f"messages[{index}]: expected ModelRequest or ModelResponse, got {v.type_name(message)}"
                )
            parts = list(message.parts)
            for part in parts:
                found = _summary_key(part)
                if found is not None:
                    self.summaries.append(found[0])
                    self.key = self.key or found[1]
            kept = [part for part in parts if kind == "response" or not _is_ours(part)]
            self.ours += len(parts) - len(kept)
            if len(kept) != len(parts):
                message = dataclasses.replace(message, parts=kept)
            standing = 0
            while index == 0 and standing < len(kept) and kept[standing].part_kind == "system-prompt":
                standing += 1
            if standing:
                self.natives.append(
                    _Native(pai, dataclasses.replace(message, parts=kept[:standing]), 0, True)
                )
                message = dataclasses.replace(message, parts=kept[standing:])
            if message.parts:
                self.natives.append(_Native(pai, message, index, False))

    def origin(self) -> Optional[str]:
        """The fingerprint of the conversation's opening message (its first non-pinned one)."""
        return next((n.unit.id for n in self.natives if not n.unit.pinned), None)


class _Track:
    """What a call left for the next one of its conversation: the history it was passed, the one
    it returned, and the natives the memory kept, in buffer order."""

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
    messages)`` (``ctx``: the ``RunContext`` or ``None``) returns the history the model should
    receive. It serves many conversations, keyed by ``RunContext.conversation_id``, else by the key
    in our summary part, else by the conversation's opening message."""

    def __init__(
        self,
        max_tokens: int,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]],
        token_counter: Optional[TokenCounter],
        target_tokens: Optional[int],
        store: Union[LogStore, AsyncLogStore, Store, AsyncStore, None],
    ) -> None:
        self._configure(max_tokens, summarize_fn, token_counter, target_tokens)
        self._pai = _import()
        self.__annotations__ = _bind_run_context()
        self._store: Union[LogStore, AsyncLogStore, Store, AsyncStore] = (
            MemoryStore() if store is None else store
        )
        self._sessions: AsyncSessions[Any] = AsyncSessions(self._store, self._memory, max_retries=10)
        self._tracks: Lives[_Track] = Lives(64)  # by conversation key
        self._firsts: Lives[str] = Lives(128)  # id() of a remembered history's first message -> its key

    @property
    def store(self) -> Union[LogStore, AsyncLogStore, Store, AsyncStore]:
        """Where the per-conversation state is kept."""
        return self._store

    def _memory(self) -> Any:
        return new_memory(self, self._resolve, asynchronous=True)

    def _resolve(self, evicted: Sequence[Message]) -> list[Message]:
        """The evicted units' messages as the history holds them now (an edit included)."""
        natives = _CURRENT.get()
        return [m for u in evicted for m in _messages(self._pai, natives[str(u.id)].message, u.pinned)]

    async def __call__(self, ctx: Any, messages: list[Any]) -> list[Any]:
        """The history for the next model request: the summary, then the newest messages in budget."""
        if not isinstance(messages, list):
            raise TypeError(f"messages: expected a list of ModelMessage, got {v.type_name(messages)}")
        pai = self._pai
        conversation_id = getattr(ctx, "conversation_id", None)
        ctx_key = conversation_id if isinstance(conversation_id, str) and conversation_id else None
        key = ctx_key or (self._firsts.take(id(messages[0])) if messages else None)
        track = None if key is None else self._tracks.take(key)
        known = None if track is None else track.known(messages)
        if track is not None and known is not None:
            output = await self._continue(pai, cast(str, key), track, messages, known)
            if output is not None:
                return output
        read = _Read(pai, messages)
        key = ctx_key or read.key or read.origin()
        if key is None:  # no message to keep or fold: nothing to do
            return messages
        _CURRENT.set({n.unit.id: n for n in read.natives if n.unit.id})

        def step(memory: Any) -> Awaitable[tuple[str, list[Optional[str]], bool]]:
            return _walk(memory, read)

        summary, ids, changed = await self._sessions.update(STATE_PREFIX + key, cast(Any, step))
        by_id = {n.unit.id: n for n in read.natives}
        kept = [by_id[i] for i in ids if i in by_id]
        if not changed and read.summaries == ([summary] if summary else []):
            output = _user_first(pai, messages)
        else:
            output = self._render(pai, kept, summary, key)
        self._remember(key, _Track(list(messages), output, kept, summary))
        return output

    def _remember(self, key: str, track: _Track) -> None:
        self._tracks.put(key, track)
        for history in (track.passed, track.output):
            if history:
                self._firsts.put(id(history[0]), key)

    async def _continue(
        self, pai: Any, key: str, track: _Track, messages: list[Any], known: int
    ) -> Optional[list[Any]]:
        """A history continuing ``track``'s: only the messages after the ``known`` ones are read,
        counted and added. ``None`` when a full walk must decide (our parts among the new ones, or
        another writer moved the stored state)."""
        new = messages[known:]
        read = _Read(pai, new, known)
        if read.ours or read.summaries:
            return None
        natives = [*track.kept, *read.natives]
        _CURRENT.set({n.unit.id: n for n in natives if n.unit.id})
        size, last = len(track.kept), track.kept[-1].unit.id if track.kept else None

        async def step(memory: Any) -> Optional[tuple[str, int]]:
            buffer = memory.buffer
            if memory.summary != track.summary or len(buffer) != size or (buffer and buffer[-1].id != last):
                return None
            await memory.extend([n.unit for n in read.natives])
            return memory.summary, len(memory.buffer)

        outcome = await self._sessions.update(STATE_PREFIX + key, cast(Any, step))
        if outcome is None:
            return None
        summary, left = outcome
        if left == len(natives):
            kept, output = natives, track.output + new
        else:  # folds take the oldest units but the pinned ones (the standing system prompt)
            pinned = 1 if natives and natives[0].unit.pinned else 0
            kept = natives[:pinned] + natives[pinned + len(natives) - left :]
            output = self._render(pai, kept, summary, key)
        self._remember(key, _Track([*track.passed, *new], output, kept, summary))
        return output

    def _render(self, pai: Any, kept: list[_Native], summary: str, key: str) -> list[Any]:
        """The history of ``kept`` (the first request's parts merged back), the summary after its
        standing system prompt, a user turn first."""
        history = [native.message for native in kept]
        if len(kept) > 1 and kept[0].source == kept[1].source == 0 and kept[0].unit.pinned:
            history[:2] = [dataclasses.replace(history[0], parts=[*history[0].parts, *history[1].parts])]
        if summary:
            _insert_summary(pai, history, self._summary_part(pai, summary, key))
        return _user_first(pai, history)

    @staticmethod
    def _summary_part(pai: Any, summary: str, key: str) -> Any:
        compaction = getattr(pai, "CompactionPart", None)
        # A request-side summary (a CompactionPart with metadata) arrived in pydantic-ai 2.x.
        if compaction is not None and "metadata" in {field.name for field in dataclasses.fields(compaction)}:
            return compaction(summary, metadata={_MARKER: {"summary": True, "key": key}})
        # A fixed timestamp: the same summary is the same part on every call.
        return pai.SystemPromptPart(summary, timestamp=_SUMMARY_TIMESTAMP, dynamic_ref=_SYSTEM_MARKER + key)


async def _walk(memory: Any, read: _Read) -> tuple[str, list[Optional[str]], bool]:
    """One call on the conversation's memory (re-run on the latest state when another call saved
    first): the unfolded natives are the pinned ones and those from the first one stored on
    (folds take the oldest), an unknown one among them being new or an edit; an edit of the
    oldest stored ones stands right before the first one found. Returns the summary, the buffer's
    ids, and whether anything but the memory's own buffer was passed."""
    if not memory.buffer and not memory.summary and read.summaries:
        memory.summary = read.summaries[-1]  # a restart without a store: continue our summary
    stored = {m.id: m for m in memory.buffer}
    natives, present = read.natives, {n.unit.id for n in read.natives}
    unpinned = [m.id for m in memory.buffer if not m.pinned]
    missing = next((i for i, ident in enumerate(unpinned) if ident in present), len(unpinned))  # edited ones
    start = next(
        (i for i, n in enumerate(natives) if n.unit.id in stored and not n.unit.pinned), len(natives)
    )
    start = 0 if not unpinned else start
    while (
        missing and start and natives[start - 1].unit.id not in stored and not natives[start - 1].unit.pinned
    ):
        start, missing = start - 1, missing - 1
    units = [stored.get(n.unit.id, n.unit) for i, n in enumerate(natives) if n.unit.pinned or i >= start]
    size = len(memory.buffer)
    with memory.record() as changes:
        if [m.id for m in units[:size]] == [m.id for m in memory.buffer]:
            await memory.extend(units[size:])
        else:  # edited, inserted or dropped messages: the buffer in history order (new ones counted)
            memory.buffer = units[:-1]
            await memory.extend(units[-1:])
    folded = any(isinstance(change, (Folded, Dropped)) for change in changes)
    return memory.summary, [m.id for m in memory.buffer], folded or len(units) != len(natives)


def _insert_summary(pai: Any, history: list[Any], part: Any) -> None:
    """Put the summary part first, after the system prompt parts the first request opens with (the
    run's standing system prompt, which pydantic-ai recognises by that position)."""
    first: Any = history[0] if history else None
    parts = list(first.parts) if getattr(first, "kind", None) == "request" else []
    count = next(
        (i for i, p in enumerate(parts) if getattr(p, "part_kind", None) != "system-prompt"), len(parts)
    )
    if count:
        history[0] = dataclasses.replace(first, parts=[*parts[:count], part, *parts[count:]])
    else:
        history.insert(0, pai.ModelRequest(parts=[part]))


def _user_first(pai: Any, history: list[Any]) -> list[Any]:
    """``history`` whose first turn is the user's (the rule of :func:`rollmem.adapters.user_first`):
    when a response comes before any user turn, a ``UserPromptPart`` ``CONTINUATION_TEXT``
    (``CONTINUATION_TEXT_PLAIN`` with no summary) is appended to the request of system parts before
    it, or opens the history; its timestamp is the response's, so it is the same on every call."""
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
            if getattr(part, "part_kind", None) not in _NOT_A_TURN:
                return history
            summary = summary or _summary_key(part) is not None
    return history


def rolling_history(
    max_tokens: int = DEFAULT_MAX_TOKENS,
    summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
    token_counter: Optional[TokenCounter] = None,
    *,
    target_tokens: Optional[int] = None,
    store: Union[LogStore, AsyncLogStore, Store, AsyncStore, None] = None,
) -> RollingHistory:
    """A pydantic-ai history processor: the running summary, then the newest messages within
    ``max_tokens`` (evicting down to ``target_tokens``, default :func:`rollmem.cached_target`
    ``(max_tokens)``).

    ``summarize_fn(summary, evicted)`` (sync or a coroutine function) receives rollmem messages;
    without one, evicted messages are dropped. ``token_counter`` counts a text (default: words).
    ``store`` keeps the per-conversation state (default: a new in-process
    :class:`~rollmem.stores.MemoryStore`). Bad arguments raise ``TypeError``/``ValueError`` at once.
    """
    return RollingHistory(max_tokens, summarize_fn, token_counter, target_tokens, store)

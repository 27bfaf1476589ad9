"""A rolling summary for pydantic-ai agents: a history processor backed by rollmem's budget rules.

Needs the ``pydantic-ai`` extra (``pip install "rollmem[pydantic-ai]"``: ``pydantic-ai-slim`` 2.x,
which needs Python 3.10+, and 3.11+ from its later 2.x releases). Checked with pydantic-ai-slim
2.68 (the test suite), and by hand with 2.0.0, 1.107.10 and 1.0.0. Importing this module does not
import ``pydantic_ai``; building a processor does, and raises
:class:`~rollmem.errors.MissingExtraError` when it is not installed.

Use::

    processor = rolling_history(max_tokens=2000, summarize_fn=summarize)
    agent = Agent(model, capabilities=[ProcessHistory(processor)])   # pydantic-ai 2.x
    agent = Agent(model, history_processors=[processor])              # pydantic-ai 1.x

    result = agent.run_sync("hi")
    result = agent.run_sync("more", message_history=result.all_messages())  # every run

What the model receives, before every model request: the system prompt parts the history opens
with, then the running summary, then the newest messages whose tokens fit ``max_tokens``. The
summary is a ``CompactionPart`` in a ``ModelRequest`` (marked in its ``metadata``); where
``CompactionPart`` cannot sit in a request (before pydantic-ai 2.x added request-side summaries) it
is a ``SystemPromptPart`` marked by its ``dynamic_ref``. The rules are
:class:`~rollmem.AsyncRollingMemory`'s, run on the history converted to rollmem messages: over
``max_tokens`` the oldest whole units go down to ``target_tokens``; a ``ToolCallPart`` and the
``ToolReturnPart`` (or ``RetryPromptPart``) answering it are one unit, never split; the kept part
does not start with a model response or a tool result; the newest unit always stays; the system
prompt parts the history opens with (the run's standing system prompt) are pinned: never evicted,
never summarized. The summary's own tokens are not part of the budget, as in the core.

Conversion for ``summarize_fn`` and the token counter: a ``ModelResponse`` is one ``assistant``
message (its text parts joined with ``"\\n"``, its function ``ToolCallPart`` s as
:class:`~rollmem.ToolCall` s with JSON ``arguments``); in a ``ModelRequest`` a ``UserPromptPart``
is a ``user`` message (non-text content appears as ``[kind: url]``), a ``ToolReturnPart`` or tool
``RetryPromptPart`` a ``tool`` message with ``tool_call_id`` (``metadata`` ``name`` and, for an
error outcome, ``is_error``), a retry that answers no call a ``user`` message, a
``SystemPromptPart`` a ``system`` message (pinned when standing), another capability's
``CompactionPart`` a ``system`` message. Parts without text of their own (thinking, instruction and
tool deltas, files in a response) travel with the message next to them and are neither counted
nor shown to the summarizer. A request may be split between its parts; a response never is.

State, per conversation: the summary and the fingerprints of the newest 256 parts folded into it
(a hash of the part's converted form, its kind and timestamp, so a history passed again after
being serialized or re-created is recognised). Folds always take the oldest parts, so every part
of a passed history up to the newest one whose fingerprint is known was folded already: those
parts are dropped, never summarized again, and the state stays small however long the
conversation. The summarizer receives the previous summary and only parts never folded before.
Our own summary part is recognised wherever it sits (pydantic-ai 2.x writes the processed history
back, and may merge that part into the request of a user prompt) and removed before the history
is measured. The state lives in ``store`` (any rollmem store: a log store such as
:class:`~rollmem.stores.SQLiteStore`, or a whole-state :class:`~rollmem.stores.Store` or
:class:`~rollmem.stores.AsyncStore`; a new in-process :class:`~rollmem.stores.MemoryStore` by
default) under the session id :data:`STATE_PREFIX` ``+ conversation key``, as the JSON text
of the session head's summary (a log store holds no entries for it), saved with a
compare-and-set (a lost race is recomputed from the winner's state, up to 10 times, then
:class:`~rollmem.errors.ConflictError`).

The conversation key is ``RunContext.conversation_id`` (pydantic-ai sets it on every run since
late 1.x and carries it on the messages). Without one, it is the key recorded in our summary part
when the history carries one, else the fingerprint of the history's first non-pinned part, the
conversation's opening message. So a history passed whole or passed processed continues the same
state, while two conversations started separately never share one. When there is no stored state
but the history carries our summary part (a restart without a store), that part's text is taken as
the summary.

A summarizer that raises fails the run with its error and changes nothing; the history the app
holds is untouched. Nothing is summarized twice, except that a fold whose save lost a race is
recomputed (the losing summary is discarded).

Typing: ``pydantic_ai`` is loaded with :func:`importlib.import_module` (it cannot be parsed under
this package's mypy ``python_version = 3.9``), so its objects are typed ``Any`` here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import threading
from collections.abc import Sequence
from typing import Any, Optional, Union

from .. import _validate as v
from .._extras import import_extra
from ..adapters._common import carried_metadata
from ..errors import ConflictError, InvalidStateError
from ..memory import AsyncRollingMemory, AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
from ..policies import cached_target
from ..sessions import _async_log
from ..stores import AsyncLogStore, AsyncStore, LogStore, LogWrite, MemoryStore, Store

__all__ = ["STATE_PREFIX", "RollingHistory", "find_summary", "rolling_history"]

STATE_PREFIX = "pydantic-ai:"
"""Session ids of the conversation states in the store are this prefix plus the conversation key."""

_MARKER = "rollmem"  # key of our summary part's metadata: {"rollmem": {"summary": True, "key": ...}}
_SYSTEM_MARKER = "rollmem.summary:"  # SystemPromptPart.dynamic_ref prefix where CompactionPart is absent
_STATE_VERSION = 1
_MAX_RETRIES = 10
_REMEMBERED = 256  # fingerprints of the newest folded parts kept in the state
# Request parts with no text of their own: they travel with the part next to them.
_QUIET_REQUEST_PARTS = frozenset(
    (
        "instruction",
        "instruction-delta",
        "instruction-baseline",
        "instruction-digest",
        "tool-availability-delta",
        "capability-load-delta",
        "model-settings-delta",
    )
)


def _import() -> Any:
    return import_extra(
        "pydantic_ai.messages",
        package="pydantic-ai-slim",
        extra="pydantic-ai",
        feature="rollmem.integrations.pydantic_ai",
    )


_bind_lock = threading.Lock()


def _bind_run_context() -> dict[str, Any]:
    """Annotate ``RollingHistory.__call__``'s first parameter with the real ``RunContext``, and
    return those annotations.

    pydantic-ai passes the run context to a history processor whose first parameter is annotated
    ``RunContext`` (it resolves the annotation at run time), which this module cannot import at
    module level. pydantic-ai 2.x reads the annotations of the class's ``__call__``, early 1.x
    releases those of the processor object itself.
    """
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
        error = kind == "retry-prompt" or getattr(part, "outcome", "success") != "success"
        return Message(
            TOOL,
            _tool_result_text(part),
            tool_call_id=part.tool_call_id,
            metadata=carried_metadata(name=tool_name if isinstance(tool_name, str) else None, error=error),
        )
    if kind == "retry-feedback":
        return Message(USER, _tool_result_text(part))
    if kind == "compaction":  # another capability's summary
        return Message(SYSTEM, part.content or "")
    if kind in _QUIET_REQUEST_PARTS:
        return None
    content = getattr(part, "content", None)
    return Message(USER, content) if isinstance(content, str) else None


def _response_message(pai: Any, response: Any) -> Message:
    texts = [part.content for part in response.parts if getattr(part, "part_kind", None) == "text"]
    calls = [
        ToolCall(part.tool_call_id, part.tool_name, part.args_as_json_str())
        for part in response.parts
        if isinstance(part, pai.ToolCallPart)
    ]
    return Message(ASSISTANT, "\n".join(texts), tool_calls=calls)


def _fingerprint(kind: str, stamp: Any, message: Message) -> str:
    when = stamp.isoformat() if hasattr(stamp, "isoformat") else None
    text = json.dumps([kind, when, message.to_dict()], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


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


class _View:
    """A history taken apart: our summary parts removed, every other part owned by one group.

    A group is one rollmem message (a whole response, or one content part of a request) plus the
    quiet parts that travel with it.
    """

    def __init__(self, pai: Any, messages: Sequence[Any]) -> None:
        self.summaries: list[str] = []
        self.marker_key: Optional[str] = None
        self.messages: list[Any] = []  # the history without our summary parts
        self.owners: list[list[int]] = []  # per message, per part: the index of its group
        self.groups: list[Message] = []
        self.prints: list[str] = []
        self._opening = True  # still reading the system prompt parts the first request opens with
        for index, message in enumerate(messages):
            kind = getattr(message, "kind", None)
            if kind == "response":
                self._add_response(pai, message)
            elif kind == "request":
                self._add_request(pai, message)
            else:
                raise TypeError(
                    f"messages[{index}]: expected ModelRequest or ModelResponse, got {v.type_name(message)}"
                )
        self._place_quiet_parts()

    def _new_group(self, message: Message, kind: str, stamp: Any) -> int:
        self.groups.append(message)
        self.prints.append(_fingerprint(kind, stamp, message))
        return len(self.groups) - 1

    def _add_response(self, pai: Any, response: Any) -> None:
        self._opening = False
        group = self._new_group(_response_message(pai, response), "response", response.timestamp)
        self.messages.append(response)
        self.owners.append([group] * len(response.parts))

    def _add_request(self, pai: Any, request: Any) -> None:
        parts = []
        owners: list[int] = []
        for part in request.parts:
            found = _summary_key(part)
            if found is not None:
                self.summaries.append(found[0])
                self.marker_key = self.marker_key or found[1]
                continue
            self._opening = self._opening and getattr(part, "part_kind", None) == "system-prompt"
            converted = _request_message(pai, part, self._opening)
            parts.append(part)
            stamp = getattr(part, "timestamp", None) or request.timestamp
            owners.append(-1 if converted is None else self._new_group(converted, "request", stamp))
        self._opening = False
        if not parts:
            return
        if len(parts) != len(request.parts):
            request = dataclasses.replace(request, parts=parts)
        self.messages.append(request)
        self.owners.append(owners)

    def _place_quiet_parts(self) -> None:
        """A quiet part goes with the next group of its request, else the previous one, else the
        nearest group before its message, else the first group after it."""
        previous = -1
        unplaced: list[tuple[int, int]] = []
        for position, owners in enumerate(self.owners):
            following = -1
            for index in range(len(owners) - 1, -1, -1):
                if owners[index] >= 0:
                    following = owners[index]
                elif following >= 0:
                    owners[index] = following
            for index, owner in enumerate(owners):
                if owner >= 0:
                    previous = owner
                elif previous >= 0:
                    owners[index] = previous
                else:
                    unplaced.append((position, index))
        for position, index in unplaced:
            self.owners[position][index] = 0 if self.groups else -1

    def unfolded(self, folded: Sequence[str]) -> list[int]:
        """The groups not folded yet. Folds take the oldest non-pinned groups, so every non-pinned
        group up to the newest one found in ``folded`` was folded, whether remembered or not."""
        known = set(folded)
        groups, prints = self.groups, self.prints
        cut = next(
            (i for i in range(len(groups) - 1, -1, -1) if not groups[i].pinned and prints[i] in known), -1
        )
        return [i for i in range(len(groups)) if groups[i].pinned or (i > cut and prints[i] not in known)]

    def origin_key(self) -> Optional[str]:
        """The fingerprint of the first non-pinned group: the conversation's opening message."""
        for message, fingerprint in zip(self.groups, self.prints):
            if not message.pinned:
                return fingerprint
        return None

    def rebuild(self, keep: set[int]) -> list[Any]:
        """The history holding only the parts of the groups in ``keep``, original objects where whole."""
        result = []
        for message, owners in zip(self.messages, self.owners):
            parts = [part for part, owner in zip(message.parts, owners) if owner in keep]
            if len(parts) == len(message.parts):
                result.append(message)
            elif parts:
                result.append(dataclasses.replace(message, parts=parts))
        return result


# -- stored state ----------------------------------------------------------------------------------


def _parse_state(session_id: str, text: str) -> tuple[str, list[str]]:
    try:
        data = json.loads(text)
        data = v.expect_mapping(data, "")
        version = v.get_int(data, "version", "")
        if version != _STATE_VERSION:
            raise InvalidStateError(
                "version", f"unsupported state version {version}; this rollmem reads version {_STATE_VERSION}"
            )
        summary = v.get_str(data, "summary", "")
        folded = v.get_list(data, "folded", "")
        for index, item in enumerate(folded):
            if not isinstance(item, str):
                raise InvalidStateError(v.join("folded", index), f"expected str, got {v.type_name(item)}")
    except ValueError as exc:
        if isinstance(exc, InvalidStateError):
            error = type(exc)(exc.path, exc.problem)
        else:
            error = InvalidStateError("", f"stored state is not valid JSON: {exc}")
        error.args = (f"session {session_id!r}: {error}",)
        raise error from exc
    return summary, folded


def _dump_state(summary: str, folded: list[str]) -> str:
    data = {"version": _STATE_VERSION, "summary": summary, "folded": folded}
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _insert_summary(pai: Any, history: list[Any], part: Any) -> None:
    """Put the summary part first, after the system prompt parts the first request opens with (the
    run's standing system prompt, which pydantic-ai recognises by that position)."""
    first: Any = history[0] if history else None
    if getattr(first, "kind", None) == "request":
        parts = list(first.parts)
        count = 0
        while count < len(parts) and getattr(parts[count], "part_kind", None) == "system-prompt":
            count += 1
        if count:
            parts.insert(count, part)
            history[0] = dataclasses.replace(first, parts=parts)
            return
    history.insert(0, pai.ModelRequest(parts=[part]))


# -- the processor ---------------------------------------------------------------------------------


class RollingHistory:
    """A pydantic-ai history processor keeping a rolling summary plus the newest messages.

    Build it with :func:`rolling_history`; pass it to ``ProcessHistory`` (pydantic-ai 2.x) or
    ``history_processors`` (1.x). Calling it (``await processor(ctx, messages)``; ``ctx`` is the
    ``RunContext``, or ``None`` for a history of no known conversation) returns the history the
    model should receive; the module docstring states the rules. One processor may
    serve many agents and conversations at once.
    """

    def __init__(
        self,
        max_tokens: int,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]],
        token_counter: Optional[TokenCounter],
        target_tokens: Optional[int],
        store: Union[LogStore, AsyncLogStore, Store, AsyncStore, None],
    ) -> None:
        _import()
        self.__annotations__ = _bind_run_context()
        target = cached_target(max_tokens) if target_tokens is None else target_tokens
        self._settings = (max_tokens, summarize_fn, token_counter, target)
        self._memory()  # checks every argument now
        if store is None:
            store = MemoryStore()
        self._log = _async_log(store)
        self._store: Union[LogStore, AsyncLogStore, Store, AsyncStore] = store

    @property
    def store(self) -> Union[LogStore, AsyncLogStore, Store, AsyncStore]:
        """Where the per-conversation state is kept."""
        return self._store

    def _memory(self, evicted: Optional[list[Message]] = None) -> AsyncRollingMemory:
        max_tokens, summarize_fn, token_counter, target_tokens = self._settings
        return AsyncRollingMemory(
            max_tokens,
            summarize_fn,
            token_counter,
            target_tokens=target_tokens,
            on_evict=None if evicted is None else evicted.extend,
        )

    async def __call__(self, ctx: Any, messages: list[Any]) -> list[Any]:
        """The history for the next model request: the summary, then the newest messages in budget."""
        pai = _import()
        if not isinstance(messages, list):
            raise TypeError(f"messages: expected a list of ModelMessage, got {v.type_name(messages)}")
        view = _View(pai, messages)
        conversation_id = getattr(ctx, "conversation_id", None)
        key = conversation_id if isinstance(conversation_id, str) and conversation_id else None
        key = key or view.marker_key or view.origin_key()
        if key is None:  # no message to keep or fold: nothing to do
            return messages
        for attempt in range(_MAX_RETRIES + 1):
            try:
                return await self._process(pai, view, key, messages)
            except ConflictError:
                if attempt == _MAX_RETRIES:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _process(self, pai: Any, view: _View, key: str, messages: list[Any]) -> list[Any]:
        session_id = STATE_PREFIX + key
        stored = await self._log.aload(session_id)
        folded: list[str] = []
        if stored is None:
            summary = view.summaries[-1] if view.summaries else ""
        else:
            summary, folded = _parse_state(session_id, stored.head.summary)
        live = view.unfolded(folded)
        evicted: list[Message] = []
        memory = self._memory(evicted)
        memory.summary = summary
        await memory.extend([view.groups[index] for index in live])
        if evicted:
            gone = {id(message) for message in evicted}
            folded = (folded + [view.prints[i] for i in live if id(view.groups[i]) in gone])[-_REMEMBERED:]
            state = _dump_state(memory.summary, folded)
            if stored is None:
                write = LogWrite("", summary=state, create=True)
            else:  # a compare-and-set on the head that was loaded
                head = stored.head
                write = LogWrite(
                    head.incarnation,
                    expected_revision=head.revision,
                    expected_tail=head.tail,
                    summary=state,
                    replace=True,
                )
            await self._log.awrite(session_id, write)
        unchanged = (
            not evicted
            and len(live) == len(view.groups)
            and view.summaries == ([memory.summary] if memory.summary else [])
        )
        if unchanged:
            return messages
        kept = {id(message) for message in memory.buffer}
        history = view.rebuild({index for index in live if id(view.groups[index]) in kept})
        if memory.summary:
            _insert_summary(pai, history, self._summary_part(pai, memory.summary, key))
        return history

    @staticmethod
    def _summary_part(pai: Any, summary: str, key: str) -> Any:
        compaction = getattr(pai, "CompactionPart", None)
        # A request-side summary (a CompactionPart with metadata) arrived in pydantic-ai 2.x; 2.0
        # has CompactionPart for provider responses only.
        if compaction is not None and "metadata" in {field.name for field in dataclasses.fields(compaction)}:
            return compaction(summary, metadata={_MARKER: {"summary": True, "key": key}})
        return pai.SystemPromptPart(summary, dynamic_ref=_SYSTEM_MARKER + key)


def rolling_history(
    max_tokens: int = 2000,
    summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
    token_counter: Optional[TokenCounter] = None,
    *,
    target_tokens: Optional[int] = None,
    store: Union[LogStore, AsyncLogStore, Store, AsyncStore, None] = None,
) -> RollingHistory:
    """A pydantic-ai history processor: the running summary, then the newest messages within
    ``max_tokens`` (evicting down to ``target_tokens``, default ``max_tokens``).

    ``summarize_fn(summary, evicted)`` may be sync or a coroutine function and receives rollmem
    :class:`~rollmem.Message` objects; without one, evicted messages are dropped. ``token_counter``
    counts a text (default: whitespace-separated words). ``store`` keeps the per-conversation
    state (default: a new in-process :class:`~rollmem.stores.MemoryStore`). Bad arguments raise
    ``TypeError``/``ValueError`` at once; a missing pydantic-ai raises
    :class:`~rollmem.errors.MissingExtraError`. Rules and state: see the module docstring.
    """
    return RollingHistory(max_tokens, summarize_fn, token_counter, target_tokens, store)

"""Strands Agents: a rolling memory as the agent's ``ConversationManager``.

Needs the ``strands`` extra on Python 3.10+ (``pip install "rollmem[strands]"``: ``strands-agents``).
Importing this module imports Strands, and raises :class:`~rollmem.errors.MissingExtraError` (an
``ImportError``) when it is missing; ``import rollmem`` never imports it.

:class:`RollingConversationManager` keeps ``agent.messages`` as a summary turn plus the newest
messages verbatim within a token budget: whole units (an assistant ``toolUse`` message with the user
message holding its ``toolResult`` blocks) leave oldest first, folded by one
``summarize_fn(summary, evicted)`` call, and the newest unit always stays.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

from .. import _validate as v
from .._extras import import_extra
from ..adapters import CONTINUATION_TEXT
from ..errors import InvalidStateError
from ..memory import AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import ASSISTANT, TOOL, USER, Message, ToolCall
from ._engine import (
    DEFAULT_MAX_TOKENS,
    Configured,
    Keys,
    Spec,
    State,
    Track,
    is_async,
    locate,
    read_state,
    unit_of,
)

_FEATURE = __name__ if sys.version_info >= (3, 10) else f"{__name__} (Python 3.10+)"

# Checked against strands-agents where it is installed (the ignores are for where it is not).
if TYPE_CHECKING:
    from strands.agent.conversation_manager import ConversationManager  # type: ignore[import-not-found, unused-ignore]
    from strands.hooks import BeforeModelCallEvent, HookRegistry  # type: ignore[import-not-found, unused-ignore]
    from strands.types.exceptions import (  # type: ignore[import-not-found, unused-ignore]
        ContextWindowOverflowException,
    )
else:
    _conversation = import_extra(
        "strands.agent.conversation_manager", package="strands-agents", extra="strands", feature=_FEATURE
    )
    ConversationManager = _conversation.ConversationManager
    _hooks = import_extra("strands.hooks", package="strands-agents", extra="strands", feature=_FEATURE)
    BeforeModelCallEvent = _hooks.BeforeModelCallEvent
    HookRegistry = _hooks.HookRegistry
    _exceptions = import_extra(
        "strands.types.exceptions", package="strands-agents", extra="strands", feature=_FEATURE
    )
    ContextWindowOverflowException = _exceptions.ContextWindowOverflowException

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TARGET_TOKENS",
    "STATE_KEY",
    "SUMMARY_HEADER",
    "TRUNCATION_NOTE",
    "RollingConversationManager",
    "cached_prefix",
    "to_rollmem",
]

DEFAULT_TARGET_TOKENS: Optional[int] = None
"""The default fold target: ``None`` folds down to :func:`rollmem.cached_target` ``(max_tokens)``."""

SUMMARY_HEADER = "Summary of the earlier conversation:\n"
"""The first line of the summary text block that opens ``agent.messages`` once there is a summary."""

TRUNCATION_NOTE = "[rollmem: tool result truncated from {before} to {after} tokens to fit the context window]"
"""The note that ends a tool result :meth:`RollingConversationManager.reduce_context` truncated."""
STATE_KEY = "rollmem"
"""The key of rollmem's part of :meth:`RollingConversationManager.get_state`."""

_MARK = "rollmem"  # metadata.custom[_MARK] of the turn this manager puts first
_MIN_TRUNCATE = 16  # a tool result of at most this many tokens is not truncated


def cached_prefix(summary: str, evicted: list[Message]) -> list[Message]:
    """``summary_as`` for :func:`rollmem.summarizers.cached_summarizer`: the summary where the
    manager puts it, as the first text of the first user turn (``SUMMARY_HEADER + summary``, then
    the first evicted message's text when that message is a user turn, joined by a newline as
    :func:`to_rollmem` reads a turn of several texts; else a user turn of its own), then the other
    evicted messages, so the summarizer's request opens as the agent's last request did."""
    if not summary:
        return list(evicted)
    text = SUMMARY_HEADER + summary
    first = evicted[0] if evicted else None
    if first is not None and first.role == USER and first.tool_call_id is None:
        return [Message(USER, f"{text}\n{first.content}" if first.content else text), *evicted[1:]]
    return [Message(USER, text), *evicted]


# -- converting Strands messages --------------------------------------------------------------


def _block_text(block: Mapping[str, Any]) -> str:
    """The text of one content block (or tool-result content item); non-text media as a marker."""
    if "text" in block:
        return str(block["text"])
    if "json" in block:
        return json.dumps(block["json"], ensure_ascii=False)
    for kind, inner in (("reasoningContent", "reasoningText"), ("guardContent", "text")):
        value = block.get(kind)
        if isinstance(value, Mapping):
            found = value.get(inner)
            return str(found.get("text", "")) if isinstance(found, Mapping) else ""
    cited = block.get("citationsContent")
    if isinstance(cited, Mapping):
        return "\n".join(str(c.get("text", "")) for c in cited.get("content", []) if isinstance(c, Mapping))
    if "cachePoint" in block:
        return ""
    for kind in ("image", "document", "video"):
        media = block.get(kind)
        if isinstance(media, Mapping):
            details = ", ".join(
                str(x) for x in (media.get("format"), media.get("name")) if isinstance(x, str)
            )
            return f"[{kind}: {details}]" if details else f"[{kind}]"
    return "[" + ", ".join(sorted(str(key) for key in block)) + "]"


def _join(texts: Sequence[str]) -> str:
    return "\n".join(text for text in texts if text)


def _tool_result(block: Mapping[str, Any], path: str) -> Message:
    where = v.join(path, "toolResult")
    result = v.expect_mapping(block["toolResult"], where)
    items = v.get_list(result, "content", where, default=[])
    texts = [
        _block_text(v.expect_mapping(item, v.join(v.join(where, "content"), i)))
        for i, item in enumerate(items)
    ]
    metadata = {"is_error": True} if result.get("status") == "error" else {}
    return Message(TOOL, _join(texts), tool_call_id=v.get_str(result, "toolUseId", where), metadata=metadata)


def _tool_call(block: Mapping[str, Any], path: str) -> ToolCall:
    where = v.join(path, "toolUse")
    use = v.expect_mapping(block["toolUse"], where)
    arguments = use.get("input", {})
    text = (
        arguments
        if isinstance(arguments, str)
        else json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    )
    return ToolCall(v.get_str(use, "toolUseId", where), v.get_str(use, "name", where), text)


def _tracking_id(message: Mapping[str, Any]) -> Optional[str]:
    ident = message.get("tracking_id")
    return ident if isinstance(ident, str) and ident else None


def _convert(message: object, path: str) -> list[Message]:
    data = v.expect_mapping(message, path)
    role = v.get_str(data, "role", path)
    ident = _tracking_id(data)
    texts: list[str] = []
    calls: list[ToolCall] = []
    results: list[Message] = []
    for index, block in enumerate(v.get_list(data, "content", path)):
        where = v.join(v.join(path, "content"), index)
        block = v.expect_mapping(block, where)
        if "toolUse" in block:
            calls.append(_tool_call(block, where))
        elif "toolResult" in block:
            results.append(_tool_result(block, where))
        else:
            texts.append(_block_text(block))
    for found, allowed, what in ((calls, ASSISTANT, "toolUse"), (results, USER, "toolResult")):
        if found and role != allowed:
            owner = (
                "only assistant messages call tools"
                if what == "toolUse"
                else "only user messages carry results"
            )
            raise InvalidStateError(v.join(path, "content"), f"{what} in a {role!r} message; {owner}")
    if results:
        text = _join(texts)
        return [*results, Message(USER, text, id=ident)] if text else results
    return [Message(role, _join(texts), id=ident, tool_calls=calls)]


def to_rollmem(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Strands messages as rollmem :class:`~rollmem.Message` objects, as ``summarize_fn`` receives them.

    An assistant message becomes one assistant message (its text, each ``toolUse`` a
    :class:`~rollmem.ToolCall` with the input as JSON); a user message with ``toolResult`` blocks
    becomes one tool message per result (``tool_call_id`` = ``toolUseId``, ``metadata["is_error"]``
    for an error status), followed by a user message with its other text if any; any other message
    one message of its role. ``id`` is the message's ``tracking_id``. Text is taken from text, json,
    reasoning, citation and guard blocks; images, documents and videos become a marker such as
    ``[image: png]`` (their bytes are not passed on). Bad messages raise ``ValueError``/
    ``TypeError`` naming ``messages[i]`` and the field.
    """
    result: list[Message] = []
    for index, message in enumerate(messages):
        result.extend(_convert(message, v.join("messages", index)))
    return result


def _unit_message(message: Mapping[str, Any], path: str) -> Message:
    """The one rollmem message standing for a Strands message in the memory's buffer (its id the
    tracking id): results are one tool message answering the first call, so they join its unit."""
    return unit_of(_convert(message, path), id=_tracking_id(message))


class _Messages(Spec[Any]):
    def units(self, natives: Sequence[Any], track: Track[Any]) -> list[Message]:
        return [_unit_message(message, v.join("agent.messages", i)) for i, message in enumerate(natives)]

    def messages(self, natives: Sequence[Any]) -> list[Message]:
        return to_rollmem(natives)

    def key(self, native: Any) -> str:
        return _tracking_id(native) or ""


_SPEC = _Messages()


def _is_user_turn(message: Mapping[str, Any]) -> bool:
    """A user message that is not tool results: a request may open with it."""
    return message.get("role") == USER and not any(
        isinstance(block, Mapping) and "toolResult" in block for block in message.get("content", ())
    )


def _text_turn(text: str, kind: str) -> dict[str, Any]:
    """A user turn of this manager's own: ``metadata.custom["rollmem"]`` says which."""
    return {
        "role": USER,
        "content": [{"text": text}],
        "tracking_id": str(uuid.uuid4()),
        "metadata": {"custom": {_MARK: kind}},
    }


class RollingConversationManager(Configured, ConversationManager):  # type: ignore[misc, unused-ignore]
    """A Strands ``ConversationManager``: ``agent.messages`` holds a summary turn, then the newest
    messages verbatim within ``max_tokens`` by ``token_counter``.

    ``RollingConversationManager(max_tokens=2000, summarize_fn=None, token_counter=None, *,
    target_tokens=None)``: the budget, summarizer (a plain function, or a coroutine function) and
    counter of :class:`~rollmem.RollingMemory`, checked the same way; ``target_tokens`` defaults to
    :func:`rollmem.cached_target` ``(max_tokens)``. Before every model call (a
    ``BeforeModelCallEvent`` hook) and after every invocation (:meth:`apply_management`) the
    messages added since the last look are counted once each, and over budget the oldest whole
    units are folded into the summary by one ``summarize_fn(summary, evicted)`` call (``evicted``
    converted by :func:`to_rollmem`). A coroutine ``summarize_fn`` runs in the hook, on Strands'
    own event loop; :meth:`apply_management` then only takes the new messages in.

    The first message of ``agent.messages`` is always a user turn: once there is a summary, its
    text (``SUMMARY_HEADER + summary``) is the first text block of the first user turn (the first
    kept message when it is the user's, else a turn of its own; ``CONTINUATION_TEXT`` without a
    summary). :meth:`reduce_context` folds older units first, then truncates the largest tool
    result of the newest unit, then raises ``ContextWindowOverflowException``. :meth:`get_state`
    holds the summary and the costs of what the last fold kept. If ``summarize_fn`` raises, the
    error propagates from the agent call and nothing is folded or lost.
    """

    def __init__(
        self,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        *,
        target_tokens: Optional[int] = DEFAULT_TARGET_TOKENS,
    ) -> None:
        self._configure(max_tokens, summarize_fn, token_counter, target_tokens)
        super().__init__()
        self._async = is_async(summarize_fn)
        self._restart("")

    def _restart(self, summary: str, stored: Optional[State] = None) -> None:
        self._track: Track[Any] = Track(self, _SPEC, asynchronous=self._async)
        self._track.memory.restore({"version": 2, "summary": summary, "buffer": []})
        self._stored = stored  # a restored state, taken with the restored messages
        self._state: dict[str, Any] = self._track.state(Keys([], _SPEC.key))
        self._head: Optional[dict[str, Any]] = None  # the user turn this manager put first
        self._merged = False  # whether the head stands for the first kept message
        self._dirty = True  # the head must be rendered again
        self._copies: dict[int, dict[str, Any]] = {}  # id(message) -> its truncated copy shown
        self._truncated: dict[str, tuple[int, int]] = {}  # tool-use id -> (tokens, tokens shown)
        self._reduce = False  # a fold reduce_context asked for, made by the async hook

    @property
    def memory(self) -> Any:
        """The memory behind the manager: ``summary``, ``buffer`` (one message per Strands
        message), ``stats()``. Change the conversation through ``agent.messages``, not here."""
        return self._track.memory

    @property
    def summary(self) -> str:
        """The running summary (``""`` until the first fold)."""
        return str(self._track.memory.summary)

    # -- the framework's interface ------------------------------------------------------------

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Strands' hooks, plus a ``BeforeModelCallEvent`` hook that manages before each model call."""
        super().register_hooks(registry, **kwargs)
        hook = self._before_model_call_async if self._async else self._before_model_call
        registry.add_callback(BeforeModelCallEvent, hook)

    def _before_model_call(self, event: BeforeModelCallEvent) -> None:
        self.apply_management(event.agent)

    async def _before_model_call_async(self, event: BeforeModelCallEvent) -> None:
        agent = event.agent
        history, new = self._sync(agent)
        self._folded(await self._track.aadd(history, new))
        if self._reduce:
            self._reduce = False
            memory = self._track.memory
            self._folded_count(await memory.fold(self._keep_half()) or await memory.fold(1))
        if self._dirty:
            self._render(agent)

    def apply_management(self, agent: Any, **kwargs: Any) -> None:
        """Count the messages added since the last call, fold what is over budget (with a
        coroutine ``summarize_fn``: at the next model call), and keep the first turn the user's."""
        history, new = self._sync(agent)
        if not self._async:
            self._folded(self._track.add(history, new))
        if self._dirty:
            self._render(agent)

    def reduce_context(self, agent: Any, e: Optional[Exception] = None, **kwargs: Any) -> None:
        """Reduce ``agent.messages`` after a context-window overflow (``e``) or when asked: fold
        the older units until the newest messages hold at most half the tokens, else every unit
        but the newest; when none is older, truncate the largest tool result of the newest unit
        to half its tokens, ending it with :data:`TRUNCATION_NOTE`. With a coroutine
        ``summarize_fn`` the fold is made before the retried model call. When nothing can be
        reduced: raises ``ContextWindowOverflowException`` from ``e``, or returns unchanged."""
        self.apply_management(agent)
        older = len(self._track.units) > len(self._newest_unit())
        if older and self._async:
            self._reduce = True
            return
        memory = self._track.memory
        reduced = older and self._folded_count(memory.fold(self._keep_half()) or memory.fold(1))
        reduced = reduced or self._truncate_largest()
        if self._dirty:
            self._render(agent)
        if not reduced and e is not None:
            raise ContextWindowOverflowException(
                "rollmem: nothing left to fold or truncate; the newest message alone overflows the context"
            ) from e

    def get_state(self) -> dict[str, Any]:
        """Strands' state plus :data:`STATE_KEY`: rollmem's state (summary, counter identity, the
        costs of the messages the last fold kept), JSON-ready; it changes only at a fold."""
        state: dict[str, Any] = super().get_state()
        state[STATE_KEY] = self._state
        return state

    def restore_from_session(self, state: dict[str, Any]) -> Optional[list[Any]]:
        """Take a :meth:`get_state` output back (a session manager calls it when an agent is
        restored); returns the summary turn to put before the restored messages, or ``None``.
        Stored costs are used when the token counter has the identity they were measured with.
        Bad state raises :class:`~rollmem.errors.InvalidStateError` naming the field, and nothing
        changes."""
        name = state.get("__name__")
        if name != type(self).__name__:
            raise InvalidStateError("__name__", f"expected {type(self).__name__!r}, got {name!r}")
        v.check_int("removed_message_count", v.get_int(state, "removed_message_count", ""), 0)
        stored = read_state(v.get_mapping(state, STATE_KEY, ""), STATE_KEY)
        super().restore_from_session(state)
        self._restart(stored.summary, stored)
        self._state = dict(state[STATE_KEY])
        if not stored.summary:
            return None
        self._head = _text_turn(SUMMARY_HEADER + stored.summary, "summary")
        return [self._head]

    # -- keeping up with agent.messages ---------------------------------------------------------

    def _sync(self, agent: Any) -> tuple[list[Any], list[int]]:
        """The conversation as the track knows it (the original of a truncated copy, the first
        kept message for a head that stands for it), and the positions to add."""
        messages: list[Any] = agent.messages
        head, track = self._head, self._track
        start = 1 if head is not None and messages and messages[0] is head else 0
        history = messages[start:]
        if self._copies:
            originals = {id(copy): native for native, copy in self._copy_pairs()}
            history = [originals.get(id(m), m) for m in history]
        if self._merged and start:
            history.insert(0, track.natives[0])
        if head is not None and not start:  # the list was replaced: the head is gone
            self._merged, self._dirty = False, True
        if self._stored is not None:
            stored, self._stored = self._stored, None
            found, how = locate(stored, Keys(history, _SPEC.key))
            trusted = found == 0 and how == "exact"
            return history, track.restore(history, stored, 0, [], trusted)
        if track.follows(history):
            return history, track.new(history)
        costs = dict(zip(map(id, track.natives), track.memory.costs()))
        known = 0
        while known < len(history) and id(history[known]) in costs:
            known += 1
        stored = State(track.memory.summary)
        stored.costs, stored.counter = [costs[id(m)] for m in history[:known]], self._identity
        self._restart(stored.summary)
        self._dirty = True
        return history, self._track.restore(history, stored, 0, [], True)

    def _copy_pairs(self) -> list[tuple[Any, Any]]:
        return [
            (native, self._copies[id(native)]) for native in self._track.natives if id(native) in self._copies
        ]

    def _folded(self, folded: list[tuple[int, Any]]) -> None:
        self._folded_count(len(folded))

    def _folded_count(self, count: int) -> bool:
        """Bookkeeping after ``count`` messages were folded (by an add or ``fold()``): they leave
        ``agent.messages`` at the next render, so the kept ones are its messages from the start."""
        if not count:
            return False
        track = self._track
        if self._copies:
            alive = {id(native) for native in track.natives}
            self._copies = {key: copy for key, copy in self._copies.items() if key in alive}
        self.removed_message_count += count
        track.count, track.index, track.kept = len(track.natives), list(range(len(track.natives))), 0
        self._state = track.state(Keys(track.natives, _SPEC.key))
        self._dirty = True
        return True

    def _render(self, agent: Any) -> None:
        """Rewrite ``agent.messages`` as the head turn (if any) and the kept messages."""
        summary = self.summary
        natives = self._track.natives
        shown = [self._copies.get(id(n), n) for n in natives] if self._copies else list(natives)
        head: Optional[dict[str, Any]] = None
        merged = False
        if shown and _is_user_turn(shown[0]):
            if summary:
                first = shown[0]
                custom = {**first.get("metadata", {}).get("custom", {}), _MARK: "summary"}
                head = {**first, "content": [{"text": SUMMARY_HEADER + summary}, *first["content"]]}
                head["metadata"] = {**first.get("metadata", {}), "custom": custom}
                merged = True
        elif summary:
            head = _text_turn(SUMMARY_HEADER + summary, "summary")
        elif shown:
            head = _text_turn(CONTINUATION_TEXT, "continuation")
        self._head, self._merged, self._dirty = head, merged, False
        agent.messages[:] = ([] if head is None else [head]) + shown[1 if merged else 0 :]

    # -- overflow -------------------------------------------------------------------------------

    def _newest_unit(self) -> list[Message]:
        """The units of the newest unit (its assistant call message and results), as buffered."""
        units = self._track.units
        first = len(units) - 1
        while first > 0 and units[first].tool_call_id is not None:
            first -= 1
        return units[first:]

    def _keep_half(self) -> int:
        """How many newest messages hold at most half the buffer's tokens (at least 1)."""
        costs = self._track.memory.costs()
        half = sum(costs) // 2
        kept = total = 0
        while kept < len(costs) and total + costs[-1 - kept] <= half:
            total += costs[-1 - kept]
            kept += 1
        return max(kept, 1)

    def _truncate_largest(self) -> bool:
        """Truncate the largest tool result still over :data:`_MIN_TRUNCATE` tokens to half."""
        counter = self._count
        best: Optional[tuple[int, Any, int, str, str]] = None
        for native in self._track.natives:
            for position, block in enumerate(native.get("content", ())):
                if not (isinstance(block, Mapping) and "toolResult" in block):
                    continue
                result = block["toolResult"]
                call_id = str(result.get("toolUseId"))
                text = _join([_block_text(item) for item in result.get("content", [])])
                if call_id not in self._truncated:
                    tokens = counter(text)
                    self._truncated[call_id] = (tokens, tokens)
                shown = self._truncated[call_id][1]
                if shown > _MIN_TRUNCATE and (best is None or shown > best[0]):
                    best = (shown, native, position, call_id, text)
        if best is None:
            return False
        shown, native, position, call_id, text = best
        tokens = self._truncated[call_id][0]
        allowed = shown // 2
        self._truncated[call_id] = (tokens, allowed)
        note = TRUNCATION_NOTE.format(before=tokens, after=allowed)
        result = {
            key: value for key, value in native["content"][position]["toolResult"].items() if key != "content"
        }
        result["content"] = [{"text": _prefix(text, tokens, allowed, counter) + "\n" + note}]
        current = self._copies.get(id(native), native)
        content = list(current["content"])
        content[position] = {"toolResult": result}
        self._copies[id(native)] = {**current, "content": content}
        self._dirty = True
        return True


def _prefix(text: str, tokens: int, allowed: int, counter: Any) -> str:
    """A prefix of ``text`` (``tokens`` long) of at most about ``allowed`` tokens, cut at a space."""
    end = len(text) * allowed // max(tokens, 1)
    prefix = text[:end]
    for _ in range(3):
        prefix = text[:end]
        counted = counter(prefix)
        if counted <= allowed:
            break
        end = end * allowed // counted
    space = prefix.rfind(" ")
    return prefix[:space] if space > 0 else prefix

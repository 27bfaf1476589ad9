"""Strands Agents: a rolling memory as the agent's ``ConversationManager``.

Needs the ``strands`` extra on Python 3.10+ (``pip install "rollmem[strands]"``: ``strands-agents``).
Importing this module imports Strands, and raises :class:`~rollmem.errors.MissingExtraError` (an
``ImportError``) when it is missing; ``import rollmem`` never imports it.

:class:`RollingConversationManager` keeps ``agent.messages`` as a summary turn plus the newest
messages verbatim within a token budget, with the rules of :class:`~rollmem.RollingMemory` (it
drives one): whole units (an assistant ``toolUse`` message with the user message holding its
``toolResult`` blocks, parallel calls included) leave oldest first, folded by one
``summarize_fn(summary, evicted)`` call, and the newest unit always stays.
"""

from __future__ import annotations

import json
import operator
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from .. import _validate as v
from .._extras import import_extra
from ..adapters import CONTINUATION_TEXT
from ..counters import counter_identity, words
from ..errors import InvalidStateError, StateTypeError
from ..memory import RollingMemory, SummarizeFn, TokenCounter
from ..message import ASSISTANT, TOOL, USER, Message, ToolCall
from ..policies import cached_target

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

# -- the defaults, in one place ---------------------------------------------------------------

DEFAULT_MAX_TOKENS = 2000
"""The default budget of the verbatim messages: the one of
:class:`~rollmem.integrations.langchain.RollingMemoryMiddleware` and :class:`~rollmem.RollingMemory`."""
DEFAULT_TARGET_TOKENS: Optional[int] = None
"""The default fold target: ``None`` folds down to :func:`rollmem.cached_target` ``(max_tokens)``,
as the LangChain middleware does (deep, rare folds: the cheapest with provider prompt caching)."""

SUMMARY_HEADER = "Summary of the earlier conversation:\n"
"""The first line of the summary text block that opens ``agent.messages`` once there is a summary."""


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


TRUNCATION_NOTE = "[rollmem: tool result truncated from {before} to {after} tokens to fit the context window]"
"""The note that ends a tool result :meth:`RollingConversationManager.reduce_context` truncated."""
STATE_KEY = "rollmem"
"""The key of rollmem's part of :meth:`RollingConversationManager.get_state`."""

_STATE_VERSION = 1
_MARK = "rollmem"  # metadata.custom[_MARK] of the turn this manager puts first
_MIN_TRUNCATE = 16  # a tool result of at most this many tokens is not truncated


# -- converting Strands messages --------------------------------------------------------------


def _marker(kind: str, block: Mapping[str, Any]) -> str:
    fmt = block.get("format")
    name = block.get("name")
    details = ", ".join(str(x) for x in (fmt, name) if isinstance(x, str))
    return f"[{kind}: {details}]" if details else f"[{kind}]"


def _block_text(block: Mapping[str, Any]) -> str:
    """The text of one content block (or tool-result content item); non-text media as a marker."""
    if "text" in block:
        return str(block["text"])
    if "json" in block:
        return json.dumps(block["json"], ensure_ascii=False)
    reasoning = block.get("reasoningContent")
    if isinstance(reasoning, Mapping):
        text = reasoning.get("reasoningText")
        return str(text.get("text", "")) if isinstance(text, Mapping) else ""
    cited = block.get("citationsContent")
    if isinstance(cited, Mapping):
        return "\n".join(str(c.get("text", "")) for c in cited.get("content", []) if isinstance(c, Mapping))
    guard = block.get("guardContent")
    if isinstance(guard, Mapping):
        inner = guard.get("text")
        return str(inner.get("text", "")) if isinstance(inner, Mapping) else ""
    if "cachePoint" in block:
        return ""
    for kind in ("image", "document", "video"):
        media = block.get(kind)
        if isinstance(media, Mapping):
            return _marker(kind, media)
    return "[" + ", ".join(sorted(str(key) for key in block)) + "]"


def _join(texts: Sequence[str]) -> str:
    return "\n".join(text for text in texts if text)


def _tool_result(block: Mapping[str, Any], path: str) -> Message:
    result = v.expect_mapping(block["toolResult"], v.join(path, "toolResult"))
    call_id = v.get_str(result, "toolUseId", v.join(path, "toolResult"))
    items = v.get_list(result, "content", v.join(path, "toolResult"), default=[])
    texts = [
        _block_text(v.expect_mapping(item, v.join(v.join(path, "toolResult.content"), i)))
        for i, item in enumerate(items)
    ]
    metadata = {"is_error": True} if result.get("status") == "error" else {}
    return Message(TOOL, _join(texts), tool_call_id=call_id, metadata=metadata)


def _tool_call(block: Mapping[str, Any], path: str) -> ToolCall:
    use = v.expect_mapping(block["toolUse"], v.join(path, "toolUse"))
    where = v.join(path, "toolUse")
    arguments = use.get("input", {})
    text = (
        arguments
        if isinstance(arguments, str)
        else json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    )
    return ToolCall(v.get_str(use, "toolUseId", where), v.get_str(use, "name", where), text)


def _convert(message: object, path: str) -> list[Message]:
    data = v.expect_mapping(message, path)
    role = v.get_str(data, "role", path)
    blocks = v.get_list(data, "content", path)
    ident = data.get("tracking_id")
    ident = ident if isinstance(ident, str) and ident else None
    texts: list[str] = []
    calls: list[ToolCall] = []
    results: list[Message] = []
    for index, block in enumerate(blocks):
        where = v.join(v.join(path, "content"), index)
        block = v.expect_mapping(block, where)
        if "toolUse" in block:
            calls.append(_tool_call(block, where))
        elif "toolResult" in block:
            results.append(_tool_result(block, where))
        else:
            texts.append(_block_text(block))
    if calls and role != ASSISTANT:
        raise InvalidStateError(
            v.join(path, "content"), f"toolUse in a {role!r} message; only assistant messages call tools"
        )
    if results and role != USER:
        raise InvalidStateError(
            v.join(path, "content"), f"toolResult in a {role!r} message; only user messages carry results"
        )
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
    """The one rollmem message standing for a Strands message in the memory's buffer (so the
    core's unit rule applies): a message with tool results is a tool message answering its first
    call id, which joins it to the assistant message holding all the calls it answers."""
    parts = _convert(message, path)
    first = parts[0]
    if first.role != TOOL:
        return first
    return Message(
        TOOL,
        _join([part.content for part in parts]),
        id=_tracking_id(message),
        tool_call_id=first.tool_call_id,
        metadata=first.metadata,
    )


def _is_user_turn(message: Mapping[str, Any]) -> bool:
    """A user message that is not tool results: a request may open with it."""
    return message.get("role") == USER and not any(
        isinstance(block, Mapping) and "toolResult" in block for block in message.get("content", ())
    )


def _tracking_id(message: Mapping[str, Any]) -> Optional[str]:
    ident = message.get("tracking_id")
    return ident if isinstance(ident, str) and ident else None


def _cost_key(message: Mapping[str, Any]) -> Optional[str]:
    """What a stored cost is kept under: the tracking id and the number of content blocks (a
    message that gained blocks under the same id is counted again)."""
    ident = _tracking_id(message)
    if ident is None:
        return None
    content = message.get("content")
    return f"{ident}#{len(content) if isinstance(content, list) else 0}"


def _text_turn(text: str, kind: str) -> dict[str, Any]:
    """A user turn of this manager's own: ``metadata.custom["rollmem"]`` says which (stripped
    before model calls, like the tracking id)."""
    return {
        "role": USER,
        "content": [{"text": text}],
        "tracking_id": str(uuid.uuid4()),
        "metadata": {"custom": {_MARK: kind}},
    }


class RollingConversationManager(ConversationManager):  # type: ignore[misc, unused-ignore]
    """A Strands ``ConversationManager``: ``agent.messages`` holds a summary turn, then the newest
    messages verbatim within ``max_tokens`` by ``token_counter``.

    ``RollingConversationManager(max_tokens, summarize_fn, token_counter, target_tokens=...)``
    takes the arguments of :class:`~rollmem.RollingMemory` and applies its rules: before every
    model call (a ``BeforeModelCallEvent`` hook) and after every invocation
    (:meth:`apply_management`), the messages added since the last look are counted once each, and
    when the buffer is over ``max_tokens`` its oldest whole units go (down to ``target_tokens``,
    default :func:`rollmem.cached_target` ``(max_tokens)``),
    folded into the summary by one ``summarize_fn(summary, evicted)`` call, ``evicted`` being
    rollmem messages converted by :func:`to_rollmem`, each message exactly once. Without
    ``summarize_fn`` they are dropped. A unit is an assistant message with ``toolUse`` blocks and
    the user message holding their ``toolResult`` blocks (parallel calls too), so no request ever
    splits a tool pair; the newest unit always stays, and the cut moves on to a user turn when one
    follows.

    The first message of ``agent.messages`` is always a user turn (Bedrock and Anthropic refuse
    anything else), as :func:`rollmem.adapters.for_provider` renders requests: once there is a
    summary, its text (``SUMMARY_HEADER + summary``) is the first text block of the first user
    turn, in the user's first kept message when the kept messages open with one, or else in a
    user turn of its own before them (``CONTINUATION_TEXT`` when there is no summary). That turn
    changes only when a fold does, so a cached prompt prefix stays valid between folds.

    :meth:`reduce_context` (a context-window overflow) folds older units first, then truncates
    the largest tool result of the newest unit; when nothing is left to reduce it raises
    Strands' ``ContextWindowOverflowException``. :meth:`get_state` holds the summary and
    the cost of each kept message (``removed_message_count`` the folded ones), so an agent
    restored by a session manager folds nothing again and counts nothing again.

    If ``summarize_fn`` raises, the error propagates from the agent call, nothing is folded and
    nothing is lost; the next call folds again. ``summarize_fn`` is a plain function (Strands
    calls conversation managers synchronously).
    """

    def __init__(
        self,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        summarize_fn: Optional[SummarizeFn] = None,
        token_counter: Optional[TokenCounter] = None,
        *,
        target_tokens: Optional[int] = DEFAULT_TARGET_TOKENS,
    ) -> None:
        RollingMemory(max_tokens, summarize_fn, token_counter, target_tokens=target_tokens)  # checks them
        super().__init__()
        self.summarize_fn = summarize_fn
        self._memory = RollingMemory(
            max_tokens,
            None if summarize_fn is None else self._summarize,
            token_counter,
            target_tokens=cached_target(max_tokens) if target_tokens is None else target_tokens,
            on_evict=self._evicted,
        )
        self._view: list[Any] = []  # the Strands messages of the memory's buffer, as added
        self._shown: list[Any] = []  # the same as shown in agent.messages (a truncated copy, say)
        self._head: Optional[dict[str, Any]] = None  # the user turn this manager put first
        self._merged = False  # whether the head stands for _shown[0] too
        self._dirty = False  # the head must be rendered again
        self._known: dict[str, int] = {}  # stored costs by _cost_key, used once after a restore
        self._truncated: dict[str, tuple[int, int]] = {}  # tool-use id -> (tokens, tokens shown)

    # -- reads --------------------------------------------------------------------------------

    @property
    def memory(self) -> RollingMemory:
        """The memory behind the manager: ``summary``, ``buffer`` (one message per Strands
        message), ``stats()``. Change the conversation through ``agent.messages``, not here."""
        return self._memory

    @property
    def summary(self) -> str:
        """The running summary (``""`` until the first fold)."""
        return self._memory.summary

    # -- the framework's interface ------------------------------------------------------------

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Strands' hooks, plus a ``BeforeModelCallEvent`` hook that manages before each model call."""
        super().register_hooks(registry, **kwargs)
        registry.add_callback(BeforeModelCallEvent, self._before_model_call)

    def _before_model_call(self, event: BeforeModelCallEvent) -> None:
        self.apply_management(event.agent)

    def apply_management(self, agent: Any, **kwargs: Any) -> None:
        """Count the messages added since the last call, fold what is over budget, and keep the
        first turn the user's (see the class docs)."""
        self._sync(agent)
        if self._dirty:
            self._render(agent)

    def reduce_context(self, agent: Any, e: Optional[Exception] = None, **kwargs: Any) -> None:
        """Reduce ``agent.messages`` after a context-window overflow (``e``) or when asked (``e``
        is ``None``): fold the older units until the newest messages hold at most half the
        buffer's tokens (always every unit but the newest one when that unit holds more), else
        truncate the largest tool result of the newest unit to half its tokens, ending it with
        :data:`TRUNCATION_NOTE` (the summarizer still receives the full result when it folds).
        When nothing can be reduced: raises ``ContextWindowOverflowException`` from ``e``, or
        returns without a change when ``e`` is ``None``."""
        self._sync(agent)
        reduced = self._fold_half() or self._truncate_largest()
        if reduced or self._dirty:
            self._render(agent)
        if not reduced and e is not None:
            raise ContextWindowOverflowException(
                "rollmem: nothing left to fold or truncate; the newest message alone overflows the context"
            ) from e

    def get_state(self) -> dict[str, Any]:
        """Strands' state plus :data:`STATE_KEY`: ``{"version": 1, "summary": ..., "counter":
        identity of the token counter or None, "costs": [[tracking id, blocks, cost], ...]}``
        for the kept messages. JSON-ready."""
        state: dict[str, Any] = super().get_state()
        costs = self._memory.costs()
        state[STATE_KEY] = {
            "version": _STATE_VERSION,
            "summary": self._memory.summary,
            "counter": counter_identity(self._memory.token_counter or words),
            "costs": [
                [_tracking_id(message), len(message.get("content", ())), cost]
                for message, cost in zip(self._view, costs)
                if _tracking_id(message) is not None
            ],
        }
        return state

    def restore_from_session(self, state: dict[str, Any]) -> Optional[list[Any]]:
        """Take a :meth:`get_state` output back (a session manager calls it when an agent is
        restored); returns the summary turn to put before the restored messages, or ``None``.
        Stored costs are used when the token counter has the identity they were measured with
        (:func:`rollmem.counters.counter_identity`). Bad state raises
        :class:`~rollmem.errors.InvalidStateError` naming the field, and nothing changes."""
        name = state.get("__name__")
        if name != type(self).__name__:
            raise InvalidStateError("__name__", f"expected {type(self).__name__!r}, got {name!r}")
        v.check_int("removed_message_count", v.get_int(state, "removed_message_count", ""), 0)
        data = v.expect_mapping(v.get_mapping(state, STATE_KEY, ""), STATE_KEY)
        version = v.get_int(data, "version", STATE_KEY)
        if version != _STATE_VERSION:
            raise InvalidStateError(
                v.join(STATE_KEY, "version"),
                f"unsupported state version {version}; this rollmem reads version 1",
            )
        summary = v.check_text(v.get_str(data, "summary", STATE_KEY), v.join(STATE_KEY, "summary"))
        counter = data.get("counter")
        known = _read_costs(v.get_list(data, "costs", STATE_KEY), v.join(STATE_KEY, "costs"))
        super().restore_from_session(state)
        self._memory.restore({"version": 2, "summary": summary, "buffer": []})
        trusted = counter is not None and counter == counter_identity(self._memory.token_counter or words)
        self._known = known if trusted else {}
        self._view, self._shown, self._truncated = [], [], {}
        self._head = _text_turn(SUMMARY_HEADER + summary, "summary") if summary else None
        self._merged = False
        self._dirty = True
        return None if self._head is None else [self._head]

    # -- keeping up with agent.messages ---------------------------------------------------------

    def _sync(self, agent: Any) -> None:
        messages: list[Any] = agent.messages
        head = self._head
        start = 1 if head is not None and messages and messages[0] is head else 0
        if head is not None and start == 0:  # the list was replaced: the head is gone
            self._head, self._merged, self._dirty = None, False, True
        skip = 1 if self._merged else 0
        shown = self._shown
        known = len(shown) - skip
        # The same objects where they were (compared at C speed: a model call stays O(new messages)
        # in Python work; the list slices are O(buffer) copies, well below a conversion).
        if len(messages) - start >= known and all(
            map(operator.is_, messages[start : start + known], shown[skip : skip + known])
        ):
            self._add(messages[start + known :], start + known)
            return
        # Something other than the agent changed the kept messages: take them as they are now.
        if not self._known:
            self._known = self._current_costs()
        self._memory.restore({"version": 2, "summary": self._memory.summary, "buffer": []})
        self._view, self._shown, self._truncated = [], [], {}
        region = messages[start:]
        if self._merged:
            region = [*shown[:1], *region]
        self._dirty = True
        self._add(region, start - skip)

    def _current_costs(self) -> dict[str, int]:
        costs = self._memory.costs()
        result: dict[str, int] = {}
        for message, cost in zip(self._view, costs):
            key = _cost_key(message)
            if key is not None:
                result[key] = cost
        return result

    def _add(self, new: Sequence[Any], first: int) -> None:
        """Append ``new`` (at ``agent.messages[first]`` on) to the memory, which folds what is over
        budget; messages with a stored cost (after a restore) are not counted again."""
        if not new:
            return
        converted = [
            _unit_message(message, v.join("agent.messages", first + i)) for i, message in enumerate(new)
        ]
        memory = self._memory
        known = self._known
        stored = 0
        if known and not memory.buffer:
            while stored < len(new) and _cost_key(new[stored]) in known:
                stored += 1
            costs = [known[str(_cost_key(message))] for message in new[:stored]]
            memory.restore(
                {"version": 2, "summary": memory.summary, "buffer": converted[:stored]}, costs=costs
            )
            self._view.extend(new[:stored])
            self._shown.extend(new[:stored])
        self._known = {}
        rest = new[stored:]
        if not rest:
            return
        before = len(memory.buffer)
        self._view.extend(rest)
        self._shown.extend(rest)
        try:
            memory.extend(converted[stored:])
        except BaseException:
            if len(memory.buffer) == before:  # not appended (a counter error): forget them again
                del self._view[before:]
                del self._shown[before:]
            raise

    def _summarize(self, summary: str, evicted: Sequence[Message]) -> str:
        assert self.summarize_fn is not None
        return self.summarize_fn(summary, to_rollmem(self._view[: len(evicted)]))

    def _evicted(self, evicted: Sequence[Message]) -> None:
        count = len(evicted)
        for message in self._view[:count]:
            for block in message.get("content", ()):
                if isinstance(block, Mapping) and "toolResult" in block:
                    self._truncated.pop(str(block["toolResult"].get("toolUseId")), None)
        del self._view[:count]
        del self._shown[:count]
        self.removed_message_count += count
        self._dirty = True

    def _render(self, agent: Any) -> None:
        """Rewrite ``agent.messages`` as the head turn (if any) and the kept messages."""
        summary = self._memory.summary
        shown = self._shown
        head: Optional[dict[str, Any]] = None
        merged = False
        if shown and _is_user_turn(shown[0]):
            if summary:
                first = shown[0]
                head = {**first, "content": [{"text": SUMMARY_HEADER + summary}, *first["content"]]}
                head["metadata"] = {
                    **first.get("metadata", {}),
                    "custom": {**first.get("metadata", {}).get("custom", {}), _MARK: "summary"},
                }
                merged = True
        elif summary:
            head = _text_turn(SUMMARY_HEADER + summary, "summary")
        elif shown:
            head = _text_turn(CONTINUATION_TEXT, "continuation")
        self._head, self._merged, self._dirty = head, merged, False
        agent.messages[:] = ([] if head is None else [head]) + shown[1 if merged else 0 :]

    # -- overflow -------------------------------------------------------------------------------

    def _fold_half(self) -> bool:
        """Fold the oldest units so the newest messages hold at most half the tokens."""
        memory = self._memory
        costs = memory.costs()
        if len(costs) < 2:
            return False
        half = sum(costs) // 2
        kept = total = 0
        while kept < len(costs) and total + costs[-1 - kept] <= half:
            total += costs[-1 - kept]
            kept += 1
        return memory.fold(max(kept, 1)) > 0

    def _truncate_largest(self) -> bool:
        """Truncate the largest tool result still over :data:`_MIN_TRUNCATE` tokens to half."""
        counter = self._memory.token_counter or words
        best: Optional[tuple[int, int, int, str, str]] = None
        for index, message in enumerate(self._view):
            for position, block in enumerate(message.get("content", ())):
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
                    best = (shown, index, position, call_id, text)
        if best is None:
            return False
        shown, index, position, call_id, text = best
        tokens = self._truncated[call_id][0]
        allowed = shown // 2
        self._truncated[call_id] = (tokens, allowed)
        note = TRUNCATION_NOTE.format(before=tokens, after=allowed)
        original = self._view[index]["content"][position]["toolResult"]
        result = {key: value for key, value in original.items() if key != "content"}
        result["content"] = [{"text": _prefix(text, tokens, allowed, counter) + "\n" + note}]
        current = self._shown[index]
        content = list(current["content"])
        content[position] = {"toolResult": result}
        self._shown[index] = {**current, "content": content}
        self._dirty = True
        return True


def _prefix(text: str, tokens: int, allowed: int, counter: TokenCounter) -> str:
    """A prefix of ``text`` (``tokens`` long) of at most about ``allowed`` tokens, cut at a space."""
    end = len(text) * allowed // max(tokens, 1)
    for _ in range(3):
        prefix = text[:end]
        counted = counter(prefix)
        if counted <= allowed:
            break
        end = end * allowed // counted
    space = prefix.rfind(" ")
    return prefix[:space] if space > 0 else prefix


def _read_costs(items: list[Any], path: str) -> dict[str, int]:
    """Stored ``[tracking id, blocks, cost]`` entries as costs by :func:`_cost_key`."""
    known: dict[str, int] = {}
    for index, item in enumerate(items):
        where = v.join(path, index)
        entry = v.expect_list(item, where)
        if len(entry) != 3:
            raise InvalidStateError(where, f"expected [tracking_id, blocks, cost], got {len(entry)} items")
        ident, blocks, cost = entry
        if not isinstance(ident, str) or not ident:
            raise StateTypeError(v.join(where, 0), f"expected a tracking id (a non-empty str), got {ident!r}")
        for place, number in ((1, blocks), (2, cost)):
            if not v.is_int(number) or number < 0:
                raise StateTypeError(v.join(where, place), f"expected an int >= 0, got {number!r}")
        known[f"{ident}#{blocks}"] = cost
    return known

"""Strands Agents: a rolling memory as the agent's ``ConversationManager``. Needs the ``strands``
extra (Python 3.10+): importing this module imports Strands, else raises ``MissingExtraError``."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Mapping, Sequence
from itertools import accumulate
from typing import Any, Optional, Union

from .. import _validate as v
from .._extras import import_extra
from ..adapters import CONTINUATION_TEXT
from ..errors import InvalidStateError
from ..memory import AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import ASSISTANT, TOOL, USER, Message, ToolCall
from ._engine import DEFAULT_MAX_TOKENS, Clock, Configured, Provider, is_async, unit_of
from ._state import Keys, State, locate, read_state
from ._track import Spec, Track

_FEATURE = __name__ if sys.version_info >= (3, 10) else f"{__name__} (Python 3.10+)"

_conversation, _hooks, _errors = (
    import_extra(name, package="strands-agents", extra="strands", feature=_FEATURE)
    for name in ("strands.agent.conversation_manager", "strands.hooks", "strands.types.exceptions")
)
_ConversationManager: Any = _conversation.ConversationManager

__all__ = ["DEFAULT_MAX_TOKENS", "STATE_KEY", "SUMMARY_HEADER", "TRUNCATION_NOTE"]
__all__ += ["RollingConversationManager", "cached_prefix", "to_rollmem"]

SUMMARY_HEADER = "Summary of the earlier conversation:\n"
"""The first line of the summary text block that opens ``agent.messages`` once there is a summary."""
TRUNCATION_NOTE = "[rollmem: tool result truncated from {before} to {after} tokens to fit the context window]"
"""The note that ends a tool result :meth:`RollingConversationManager.reduce_context` truncated."""
STATE_KEY = "rollmem"
"""The key of rollmem's part of :meth:`RollingConversationManager.get_state`."""

_MARK = "rollmem"  # metadata.custom[_MARK] of the turn this manager puts first
_MIN_TRUNCATE = 16  # a tool result of at most this many tokens is not truncated


def cached_prefix(summary: str, evicted: list[Message]) -> list[Message]:
    """``summary_as`` for :func:`rollmem.summarizers.cached_summarizer`: the summary as the manager
    puts it (opening the first user turn), then the evicted messages: the request the agent sent."""
    text, first = SUMMARY_HEADER + summary, evicted[0] if evicted else None
    if not summary or first is None or first.role != USER or first.tool_call_id is not None:
        return [Message(USER, text), *evicted] if summary else list(evicted)
    return [Message(USER, f"{text}\n{first.content}" if first.content else text), *evicted[1:]]


def _block_text(block: Mapping[str, Any]) -> str:
    """The text of one content block (or tool-result content item); non-text media as a marker."""
    if "text" in block:
        return str(block["text"])
    if "json" in block:
        return json.dumps(block["json"], ensure_ascii=False)
    for kind, inner in (("reasoningContent", "reasoningText"), ("guardContent", "text")):
        if isinstance(block.get(kind), Mapping):
            found = block[kind].get(inner)
            return str(found.get("text", "")) if isinstance(found, Mapping) else ""
    cited = block.get("citationsContent")
    if isinstance(cited, Mapping):
        return "\n".join(str(c.get("text", "")) for c in cited.get("content", []) if isinstance(c, Mapping))
    if "cachePoint" in block:
        return ""
    for kind in ("image", "document", "video"):
        media = block.get(kind)
        if isinstance(media, Mapping):
            details = ", ".join(x for x in (media.get("format"), media.get("name")) if isinstance(x, str))
            return f"[{kind}: {details}]" if details else f"[{kind}]"
    return "[" + ", ".join(sorted(str(key) for key in block)) + "]"


def _join(texts: Sequence[str]) -> str:
    return "\n".join(text for text in texts if text)


def _tracking_id(message: Mapping[str, Any]) -> Optional[str]:
    ident = message.get("tracking_id")
    return ident or None if isinstance(ident, str) else None


def _convert(message: object, path: str) -> list[Message]:
    data = v.expect_mapping(message, path)
    role = v.get_str(data, "role", path)
    texts, calls, results = list[str](), list[ToolCall](), list[Message]()
    for index, block in enumerate(v.get_list(data, "content", path)):
        block = v.expect_mapping(block, where := v.join(v.join(path, "content"), index))
        if "toolUse" in block:
            where = v.join(where, "toolUse")
            use, arguments = v.expect_mapping(block["toolUse"], where), block["toolUse"].get("input", {})
            text = arguments if isinstance(arguments, str) else json.dumps(arguments, separators=(",", ":"))
            calls.append(ToolCall(v.get_str(use, "toolUseId", where), v.get_str(use, "name", where), text))
        elif "toolResult" in block:
            where = v.join(where, "toolResult")
            result = v.expect_mapping(block["toolResult"], where)
            items = enumerate(v.get_list(result, "content", where, default=[]))
            text = _join([_block_text(v.expect_mapping(x, f"{where}.content[{i}]")) for i, x in items])
            meta = {"is_error": True} if result.get("status") == "error" else {}
            call_id = v.get_str(result, "toolUseId", where)
            results.append(Message(TOOL, text, tool_call_id=call_id, metadata=meta))
        else:
            texts.append(_block_text(block))
    wrong = "toolUse" if calls and role != ASSISTANT else "toolResult" if results and role != USER else None
    if wrong:
        only = "assistant messages call tools" if wrong == "toolUse" else "user messages carry results"
        raise InvalidStateError(v.join(path, "content"), f"{wrong} in a {role!r} message; only {only}")
    if results:
        return [*results, Message(USER, _join(texts), id=_tracking_id(data))] if _join(texts) else results
    return [Message(role, _join(texts), id=_tracking_id(data), tool_calls=calls)]


def to_rollmem(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Strands messages as rollmem messages, as ``summarize_fn`` receives them: ``toolUse`` s as tool
    calls, one tool message per ``toolResult`` (then the user's other text), ``id`` the
    ``tracking_id``, media as markers (``[image: png]``). Bad messages raise naming ``messages[i]``."""
    return [m for index, message in enumerate(messages) for m in _convert(message, v.join("messages", index))]


class _Messages(Spec[Any]):
    def units(self, natives: Sequence[Any], track: Track[Any]) -> list[Message]:
        at = "agent.messages"
        return [unit_of(_convert(n, f"{at}[{i}]"), id=_tracking_id(n)) for i, n in enumerate(natives)]

    def messages(self, natives: Sequence[Any]) -> list[Message]:
        return to_rollmem(natives)

    def key(self, native: Any) -> str:
        return _tracking_id(native) or ""


_SPEC = _Messages()


def _is_user_turn(message: Mapping[str, Any]) -> bool:
    """A user message that is not tool results: a request may open with it."""
    results = (isinstance(block, Mapping) and "toolResult" in block for block in message.get("content", ()))
    return message.get("role") == USER and not any(results)


def _text_turn(text: str, kind: str) -> dict[str, Any]:
    """A user turn of this manager's own: ``metadata.custom["rollmem"]`` says which."""
    custom = {"custom": {_MARK: kind}}
    return {"role": USER, "content": [{"text": text}], "tracking_id": str(uuid.uuid4()), "metadata": custom}


class RollingConversationManager(Configured, _ConversationManager):  # type: ignore[misc]
    """A Strands ``ConversationManager``: ``agent.messages`` holds a summary turn, then the newest messages
    verbatim within ``max_tokens``; the oldest whole units (a ``toolUse`` message with its results) fold by
    one ``summarize_fn(summary, evicted)`` call (sync, or a coroutine function run on Strands' loop) before
    every model call. The settings are :meth:`~rollmem.RollingMemory.cached`'s (an explicit ``target_tokens``
    folds plainly down to it). A failing summarizer propagates."""

    def __init__(
        self,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        *,
        target_tokens: Optional[int] = None,
        provider: Provider = None,
        clock: Optional[Clock] = None,
        prefix_tokens: int = 0,
    ) -> None:
        self._setup(max_tokens, summarize_fn, token_counter, target_tokens, provider, clock, prefix_tokens)
        super().__init__()
        self._async = is_async(summarize_fn)
        self._restart("")

    def _restart(self, summary: str, stored: Optional[State] = None) -> None:
        self._track: Track[Any] = Track(self, _SPEC, asynchronous=self._async)
        self._track.memory.summary = summary
        self._stored = stored
        self._state: dict[str, Any] = self._track.state(Keys([], _SPEC.key))
        self._head: Optional[dict[str, Any]] = None  # the user turn this manager put first
        self._merged, self._dirty = False, True  # the head stands for the first kept one; to render
        self._copies: dict[int, dict[str, Any]] = {}  # id(message) -> its truncated copy shown
        self._truncated: dict[str, tuple[int, int]] = {}  # tool-use id -> (tokens, tokens shown)
        self._reduce = False  # a fold reduce_context asked for, made by the async hook

    @property
    def memory(self) -> Any:
        """The memory behind the manager (one message per Strands message), for ``stats()``."""
        return self._track.memory

    @property
    def summary(self) -> str:
        """The running summary (``""`` until the first fold)."""
        return str(self._track.memory.summary)

    def register_hooks(self, registry: Any, **kwargs: Any) -> None:
        """Strands' hooks, plus a ``BeforeModelCallEvent`` hook that manages before each model call."""
        super().register_hooks(registry, **kwargs)
        sync: Any = lambda event: self.apply_management(event.agent)  # noqa: E731
        registry.add_callback(_hooks.BeforeModelCallEvent, self._before_async if self._async else sync)

    async def _before_async(self, event: Any) -> None:
        history, new = self._sync(event.agent)
        self._folded(len(await self._track.aadd(history, new)))
        if self._reduce:
            self._reduce, memory = False, self._track.memory
            self._folded(await memory.fold(self._keep_half()) or await memory.fold(1))
        self._render(event.agent)

    def apply_management(self, agent: Any, **kwargs: Any) -> None:
        """Take in the new messages, fold what is over budget (a coroutine: at the next model call)."""
        history, new = self._sync(agent)
        if not self._async:
            self._folded(len(self._track.add(history, new)))
        self._render(agent)

    def reduce_context(self, agent: Any, e: Optional[Exception] = None, **kwargs: Any) -> None:
        """After a context-window overflow (``e``): fold older units (down to half the tokens, else
        all but the newest unit), else truncate the newest unit's largest tool result to half (see
        :data:`TRUNCATION_NOTE`), else raise ``ContextWindowOverflowException`` from ``e``."""
        self.apply_management(agent)
        newest = max((i for i, unit in enumerate(self._track.units) if unit.tool_call_id is None), default=0)
        if newest and self._async:
            self._reduce = True
            return
        memory = self._track.memory
        reduced = newest > 0 and self._folded(memory.fold(self._keep_half()) or memory.fold(1))
        reduced = reduced or self._truncate_largest()
        self._render(agent)
        if not reduced and e is not None:
            message = "nothing left to fold or truncate; the newest message alone overflows the context"
            raise _errors.ContextWindowOverflowException(f"rollmem: {message}") from e

    def get_state(self) -> dict[str, Any]:
        """Strands' state plus rollmem's under :data:`STATE_KEY` (it changes only at a fold)."""
        return {**super().get_state(), STATE_KEY: self._state}

    def restore_from_session(self, state: dict[str, Any]) -> Optional[list[Any]]:
        """Take a :meth:`get_state` output back; returns the summary turn to put before the restored
        messages (or ``None``). Bad state raises :class:`~rollmem.errors.InvalidStateError`."""
        name = state.get("__name__")
        if name != type(self).__name__:
            raise InvalidStateError("__name__", f"expected {type(self).__name__!r}, got {name!r}")
        v.check_int("removed_message_count", v.get_int(state, "removed_message_count", ""), 0)
        stored = read_state(v.get_mapping(state, STATE_KEY, ""), STATE_KEY)
        super().restore_from_session(state)
        self._restart(stored.summary, stored)
        self._state = dict(state[STATE_KEY])
        self._head = _text_turn(SUMMARY_HEADER + stored.summary, "summary") if stored.summary else None
        return None if self._head is None else [self._head]

    def _sync(self, agent: Any) -> tuple[list[Any], list[int]]:
        """The history as the track knows it (no head, no truncated copies) and the positions to add."""
        messages: list[Any] = agent.messages
        head, track = self._head, self._track
        start = 1 if head is not None and messages and messages[0] is head else 0
        history = messages[start:]
        if self._copies:
            originals = {id(self._copies[id(n)]): n for n in track.natives if id(n) in self._copies}
            history = [originals.get(id(m), m) for m in history]
        if self._merged and start:
            history.insert(0, track.natives[0])
        if head is not None and not start:  # the list was replaced: the head is gone
            self._merged, self._dirty = False, True
        if self._stored is not None:  # a restored state, taken with the restored messages
            stored, self._stored = self._stored, None
            found, _, how = locate(stored, Keys(history, _SPEC.key))
            trusted = found == 0 and how == "exact"
        elif track.follows(history):
            return history, track.new(history)
        else:  # another list: the costs of the messages still there are kept
            costs = dict(zip(map(id, track.natives), track.memory.costs()))
            known = next((i for i, m in enumerate(history) if id(m) not in costs), len(history))
            stored, trusted = State(track.memory.summary), True
            stored.costs, stored.counter = [costs[id(m)] for m in history[:known]], self._identity
            self._restart(stored.summary)
        return history, self._track.restore(history, stored, 0, [], trusted)

    def _folded(self, count: int) -> bool:
        """After ``count`` messages folded: they leave ``agent.messages`` at the next render."""
        if not count:
            return False
        track = self._track
        alive = {id(native) for native in track.natives}
        self._copies = {key: copy for key, copy in self._copies.items() if key in alive}
        self.removed_message_count += count
        track.count, track.index, track.kept = len(track.natives), list(range(len(track.natives))), 0
        self._state = track.state(Keys(track.natives, _SPEC.key))
        self._dirty = True
        return True

    def _render(self, agent: Any) -> None:
        """Rewrite ``agent.messages`` (when needed) as the head turn, if any, and the kept messages."""
        if not self._dirty:
            return
        summary, natives = self.summary, self._track.natives
        shown = [self._copies.get(id(n), n) for n in natives] if self._copies else list(natives)
        opens = bool(shown) and _is_user_turn(shown[0])
        merged = opens and bool(summary)
        head = None if opens or not (summary or shown) else _text_turn(SUMMARY_HEADER + summary, "summary")
        if not summary and head is not None:
            head = _text_turn(CONTINUATION_TEXT, "continuation")
        if merged:
            first, metadata = shown[0], shown[0].get("metadata", {})
            head = {**first, "content": [{"text": SUMMARY_HEADER + summary}, *first["content"]]}
            head["metadata"] = {**metadata, "custom": {**metadata.get("custom", {}), _MARK: "summary"}}
        self._head, self._merged, self._dirty = head, merged, False
        agent.messages[:] = ([] if head is None else [head]) + shown[1 if merged else 0 :]

    def _keep_half(self) -> int:
        """How many newest messages hold at most half the buffer's tokens (at least 1)."""
        half = sum(costs := self._track.memory.costs()) // 2
        return max(sum(1 for total in accumulate(reversed(costs)) if total <= half), 1)

    def _truncate_largest(self) -> bool:
        """Truncate the largest tool result still over :data:`_MIN_TRUNCATE` tokens to half."""
        # (tokens shown, native, block position, call id, text) of each result
        found: list[tuple[int, Any, int, str, str]] = [(0, None, 0, "", "")]
        for native in self._track.natives:
            for position, block in enumerate(native.get("content", ())):
                result = block.get("toolResult") if isinstance(block, Mapping) else None
                if isinstance(result, Mapping):
                    call_id = str(result.get("toolUseId"))
                    text = _join([_block_text(item) for item in result.get("content", [])])
                    if call_id not in self._truncated:
                        self._truncated[call_id] = (self._count(text),) * 2
                    found.append((self._truncated[call_id][1], native, position, call_id, text))
        shown, native, position, call_id, text = max(found, key=lambda candidate: candidate[0])
        if shown <= _MIN_TRUNCATE:
            return False
        tokens, allowed = self._truncated[call_id][0], shown // 2
        self._truncated[call_id] = (tokens, allowed)
        result = {k: x for k, x in native["content"][position]["toolResult"].items() if k != "content"}
        note = TRUNCATION_NOTE.format(before=tokens, after=allowed)
        result["content"] = [{"text": _prefix(text, tokens, allowed, self._count) + "\n" + note}]
        current = self._copies.get(id(native), native)
        content = [{"toolResult": result} if i == position else b for i, b in enumerate(current["content"])]
        self._copies[id(native)] = {**current, "content": content}
        self._dirty = True
        return True


def _prefix(text: str, tokens: int, allowed: int, counter: Any) -> str:
    """A prefix of ``text`` (``tokens`` long) of at most about ``allowed`` tokens, cut at a space."""
    end = len(text) * allowed // max(tokens, 1)
    for _ in range(3):  # a few proportional steps
        counted = counter(text[:end])
        if counted <= allowed:
            break
        end = end * allowed // counted
    prefix = text[:end]
    return prefix[: prefix.rfind(" ")] if prefix.rfind(" ") > 0 else prefix

"""Microsoft Agent Framework: a rolling summary as a ``CompactionStrategy``. Needs the
``agent-framework`` extra (Python 3.10+; checked with ``agent-framework-core`` 1.23): building a
:class:`RollingCompaction` imports it (else ``MissingExtraError``). One object goes in two places::

    rolling = RollingCompaction(max_tokens=2000, summarize_fn=summarize)
    agent = Agent(
        client, tools=[...], compaction_strategy=rolling, context_providers=[rolling]
    )
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import warnings
from collections.abc import Mapping, Sequence
from itertools import takewhile
from operator import attrgetter
from typing import Any, Optional, Union

from .. import _validate as v
from .._extras import import_extra
from ..adapters import CONTINUATION_TEXT
from ..errors import InvalidStateError
from ..memory import AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
from ._engine import DEFAULT_MAX_TOKENS, Clock, Configured, Provider, opening_turn, unit_of
from ._state import Keys, locate, read_state
from ._track import Spec, Track

__all__ = ["DEFAULT_MAX_TOKENS", "DEFAULT_SOURCE_ID", "SUMMARY_MARKER", "RollingCompaction"]

DEFAULT_SOURCE_ID = "rollmem"
"""The context-provider ``source_id`` when none is given: the key of the state in ``session.state``."""

SUMMARY_MARKER = "rollmem"
"""The ``additional_properties`` key marking the messages this strategy inserts (the summary
and the continuation turn). They are rebuilt on every call and never stored as history."""

_ROLE = attrgetter("role")
_EXCLUDED = "_excluded"  # agent_framework.EXCLUDED_KEY: messages the framework leaves out of a request


def _import() -> Any:
    feature = f"{__name__}.RollingCompaction"
    return import_extra(
        "agent_framework", package="agent-framework-core", extra="agent-framework", feature=feature
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _convert(message: Any) -> list[Message]:
    """One Agent Framework message as rollmem messages: itself (text, calls, ``[type]`` markers;
    reasoning unshown) and one ``tool`` message per ``function_result``."""
    texts, calls, results = list[str](), list[ToolCall](), list[Message]()
    for content in message.contents:
        kind = content.type
        if kind == "text":
            texts.append(content.text or "")
        elif kind == "function_call":
            arguments = "" if content.arguments is None else _text(content.arguments)
            calls.append(ToolCall(content.call_id or "", content.name or "", arguments))
        elif kind == "function_result":
            error: dict[str, Any] = {"is_error": True} if content.exception else {}
            results.append(Message(TOOL, _text(content.result), tool_call_id=content.call_id, metadata=error))
        elif kind != "text_reasoning":
            texts.append(f"[{kind}]")
    role = str(message.role)
    if not results or texts or calls:
        head_role = ASSISTANT if calls else (USER if role == TOOL else role)
        meta: dict[str, Any] = {"name": message.author_name} if isinstance(message.author_name, str) else {}
        results.insert(0, Message(head_role, "\n".join(texts), tool_calls=calls, metadata=meta))
    return results


def _fingerprint(message: Any) -> str:
    """A message's identity that survives copies and serialization: its role and contents (the
    framework sets ``author_name`` and ids after the fact; they are left out)."""
    left_out = ("additional_properties", "raw_representation")
    contents = [
        {k: x for k, x in c.to_dict(exclude_none=True).items() if k not in left_out} for c in message.contents
    ]
    text = json.dumps([str(message.role), contents], ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class _Messages(Spec[Any]):
    def units(self, natives: Sequence[Any], track: Track[Any]) -> list[Message]:
        return [unit_of(_convert(message)) for message in natives]

    def messages(self, natives: Sequence[Any]) -> list[Message]:
        return [m for message in natives for m in _convert(message)]

    def key(self, native: Any) -> str:
        return _fingerprint(native)

    def same(self, old: Any, new: Any) -> bool:
        return _fingerprint(old) == _fingerprint(new)


_SPEC = _Messages()


def _is_ours(message: Any) -> bool:
    return bool(message.additional_properties.get(SUMMARY_MARKER))


class _Binding:
    """A run's working copy of its session's state, and the binding of the run around it."""

    def __init__(self, working: dict[str, Any], key: Any, outer: Optional[_Binding]) -> None:
        self.working, self.key, self.outer, self.called = working, key, outer, False


class RollingCompaction(Configured):
    """An Agent Framework ``CompactionStrategy`` (and context provider): before every model call the oldest
    units fold into a summary (the settings are :meth:`~rollmem.AsyncRollingMemory.cached`'s; an explicit
    ``target_tokens`` folds plainly down to it); the request is the leading system messages, the summary (see
    :data:`SUMMARY_MARKER`), a user turn where needed, and the kept messages (folded ones stay, marked
    excluded). The state is kept in ``session.state[source_id]``; half a wiring warns."""

    after_run_once_per_turn = False
    """Read by the agent: the state is committed after every run."""

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
        source_id: str = DEFAULT_SOURCE_ID,
    ) -> None:
        self._setup(max_tokens, summarize_fn, token_counter, target_tokens, provider, clock, prefix_tokens)
        self.source_id = v.check_str("source_id", source_id, allow_empty=False)
        _import()
        self._own: dict[str, Any] = {}
        self._warned = False
        self._bound = contextvars.ContextVar[Optional[_Binding]](f"rollmem_af_{id(self)}", default=None)

    @property
    def _where(self) -> str:
        return f"session.state[{self.source_id!r}]"

    async def before_run(self, *, agent: Any, session: Any, context: Any, state: dict[str, Any]) -> None:
        """Bind this run to the session's state (a working copy, committed by :meth:`after_run`)."""
        read_state(state or None, self._where)
        key = getattr(session, "session_id", None) or id(session)
        self._bound.set(_Binding(dict(state), key, self._bound.get()))

    async def after_run(self, *, agent: Any, session: Any, context: Any, state: dict[str, Any]) -> None:
        """Commit the run's folds to the session's state (a nested run gives the outer one its
        binding back). Warns when no model call of the run went through this strategy."""
        binding = self._bound.get()
        if binding is None:
            return
        if not binding.called and agent is not None:
            message = "is in context_providers= but was not called as the compaction strategy: nothing folds"
            warnings.warn(f"RollingCompaction {message}. Pass it as compaction_strategy= too.", stacklevel=2)
        state.clear()
        state.update(binding.working)
        self._bound.set(binding.outer)

    def state(self, session: Any = None) -> dict[str, Any]:
        """A copy of the state (empty before the first fold) of ``session``, else this object's own:
        ``summary``, ``folded`` (messages before the unfolded ones), ``costs``, bookkeeping."""
        data = self._own if session is None else session.state.get(self.source_id) or {}
        read_state(data or None, "state" if session is None else self._where)
        return json.loads(json.dumps(data))  # type: ignore[no-any-return]

    def summary(self, session: Any = None) -> str:
        """The running summary of ``session`` (else of this object's own conversation)."""
        return str(self.state(session).get("summary", ""))

    async def __call__(self, messages: list[Any]) -> bool:
        """Fold what the budget says, rebuild ``messages`` in place; returns whether the request changed."""
        if not isinstance(messages, list):
            raise TypeError(f"messages: expected a list of Message, got {v.type_name(messages)}")
        binding = self._bound.get()
        if binding is None and not self._warned:
            self._warned = True
            note = "its state lives in this object, for one conversation, and is not saved with the session"
            message = f"was called as the compaction strategy without being in context_providers=: {note}"
            warnings.warn(f"RollingCompaction {message}. Pass it in context_providers= too.", stacklevel=2)
        if binding is not None:
            binding.called = True
        data, key = (self._own, "own") if binding is None else (binding.working, binding.key)
        # the system messages the list opens with: the summary goes after them
        standing = len(list(takewhile(lambda m: m.role == SYSTEM and not _is_ours(m), messages)))
        previous = {}
        while standing < len(messages) and _is_ours(messages[standing]):
            mine = messages.pop(standing)
            previous[mine.additional_properties[SUMMARY_MARKER]] = mine
        conversation = messages[standing:]
        track = self._lives.take(key)
        plain = track is not None and track.context == "plain"  # no system message after the standing ones
        if not plain or SYSTEM in map(_ROLE, conversation[track.count :]):  # type: ignore[union-attr]
            plain = SYSTEM not in map(_ROLE, conversation)
            conversation = conversation if plain else [m for m in conversation if m.role != SYSTEM]
        fresh = track is None or track.written != (data or None) or not track.follows(conversation)
        if fresh:
            track = Track(self, _SPEC, asynchronous=True)
            new = self._restore(track, conversation, data, "state" if binding is None else self._where)
        else:
            new = track.new(conversation)  # type: ignore[union-attr]
        assert track is not None
        track.context = "plain" if plain else None
        try:
            folded = await track.aadd(conversation, new)
        finally:
            self._lives.put(key, track)
        if folded:
            data.clear()
            data.update(track.state(Keys(conversation, _fingerprint)))
            track.written = dict(data)
        changed = _mark(conversation[: track.start] if fresh else [m for _, m in folded], track)
        inserted = [_ours(previous, "summary", SYSTEM, track.memory.summary)] if track.memory.summary else []
        if opening_turn(track.units[0] if track.units else None):
            inserted.append(_ours(previous, "continuation", USER, CONTINUATION_TEXT))
        messages[standing:standing] = inserted
        kinds = [m.additional_properties[SUMMARY_MARKER] for m in inserted]
        return changed or bool(folded) or kinds != list(previous)

    def _restore(
        self, track: Track[Any], conversation: list[Any], data: Mapping[str, Any], where: str
    ) -> list[int]:
        state = read_state(data or None, where)
        start, pinned, how = locate(state, Keys(conversation, _fingerprint))
        if start is None:
            gone = "the messages hold neither the last message folded into the summary nor the first one kept"
            why = "another conversation's state, or a history provider that did not load the history"
            raise InvalidStateError(
                v.join(where, "first"), f"{gone}: {why} (context_providers=[the strategy])"
            )
        track.written = dict(data) or None
        return track.restore(conversation, state, start, pinned, how in ("exact", "first"))


def _mark(messages: Sequence[Any], track: Track[Any]) -> bool:
    """Mark ``messages`` excluded but those still in the buffer; returns whether a mark changed."""
    keep = {id(native) for native in track.natives}
    changed = False
    for message in messages:
        properties = message.additional_properties
        excluded = id(message) not in keep
        changed = changed or bool(properties.get(_EXCLUDED, False)) != excluded
        properties[_EXCLUDED] = excluded
        if excluded:
            properties["_exclude_reason"] = "rollmem_summarized"
    return changed


def _ours(previous: Mapping[str, Any], kind: str, role: str, text: str) -> Any:
    """The message this strategy inserts: ``previous[kind]`` when it says the same, else a new one."""
    message = previous.get(kind)
    if message is not None and message.role == role and message.text == text:
        return message
    properties = {SUMMARY_MARKER: kind, _EXCLUDED: False}
    return _import().Message(role, [text], message_id=f"rollmem-{kind}", additional_properties=properties)

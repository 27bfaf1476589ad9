"""Google ADK agents: a rolling memory as a plugin, :class:`RollingMemoryPlugin`.

Needs the ``google-adk`` extra (``pip install "rollmem[google-adk]"``, Python 3.10+; checked with
google-adk 2.0.0 and 2.13.0). Importing this module imports ``google.adk`` and ``google.genai``,
and raises :class:`~rollmem.errors.MissingExtraError` (an ``ImportError``) when they are missing.

:class:`RollingMemoryPlugin` changes what the model sees, not what the session stores: in its
``before_model_callback`` it folds the oldest unfolded contents of the request into a running
summary with :class:`~rollmem.AsyncRollingMemory`'s rules, and the model receives the agent's
instruction with the summary appended, then the newest contents verbatim (the request's own
``types.Content`` objects). The session's events are never changed, so ADK's own machinery
(tool confirmation, long-running tool resume, rewind, other plugins) keeps working as without it.
The summary, the fold position and the token cost of each unfolded message are session state
under :data:`STATE_PREFIX` ``+ agent name``, so any session service persists them.

Typing: ADK is loaded with :func:`importlib.import_module` (this package's mypy runs at
``python_version = 3.9``, which ADK does not support), so its objects are typed ``Any`` here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Callable, Optional, Union

from .. import _validate as v
from .._extras import import_extra
from ..adapters import CONTINUATION_TEXT, user_first
from ..counters import counter_identity
from ..errors import InvalidStateError, StateTypeError
from ..memory import AsyncRollingMemory, AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import ASSISTANT, TOOL, USER, Message, ToolCall
from ..policies import cached_target

__all__ = ["DEFAULT_MAX_TOKENS", "STATE_PREFIX", "RollingMemoryPlugin", "summary_instruction"]

logger = logging.getLogger("rollmem")


def _import(module: str) -> Any:
    return import_extra(module, package="google-adk", extra="google-adk", feature=__name__)


_plugins = _import("google.adk.plugins.base_plugin")
_types = _import("google.genai.types")
_BasePlugin: Any = _plugins.BasePlugin

DEFAULT_MAX_TOKENS = 2000
"""The default ``max_tokens``: the same budget as the LangChain middleware's default."""

STATE_PREFIX = "rollmem:"
"""Session-state keys of the plugin are this prefix plus the agent's name (one memory per agent
of a multi-agent app). ADK keeps owner-prefixed keys (``owner:key``) out of ``state_schema``
validation."""

_STATE_VERSION = 1
_REMEMBERED = 256  # fingerprints of the newest folded contents kept in the state


def summary_instruction(summary: str) -> str:
    """The default text appended to the system instruction for a non-empty summary."""
    return f"Summary of the earlier conversation:\n{summary}"


# -- converting contents ----------------------------------------------------------------------


def _fingerprint(content: Any) -> str:
    """A stable name for one request content: a hash of its JSON form."""
    text = content.model_dump_json(exclude_none=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def _plain_text(part: Any) -> Optional[str]:
    """The text a part other than a function call or response adds; ``None`` when none."""
    if getattr(part, "thought", None):
        return None  # thoughts travel with their content and are not counted
    if part.text is not None:
        return str(part.text)
    code = part.executable_code
    if code is not None:
        return str(code.code or "")
    result = part.code_execution_result
    if result is not None:
        return str(result.output or "")
    data = part.inline_data
    if data is not None:
        return f"[{data.mime_type or 'inline data'}]"
    file = part.file_data
    if file is not None:
        return f"[{file.mime_type or 'file'}: {file.file_uri}]"
    return None


def _json(value: Any, compact: bool = False) -> str:
    """``value`` as JSON text, non-ASCII kept; what JSON cannot carry is written with ``str``."""
    separators = (",", ":") if compact else None
    return json.dumps(value, ensure_ascii=False, separators=separators, default=str)


def _response_text(response: Any) -> str:
    payload = response.response
    return "" if payload is None else _json(payload)


class _Converter:
    """Turns request contents into rollmem messages, pairing function responses with calls.

    The request usually carries no call ids (ADK strips the ones it generated): a call without
    an id gets ``<fingerprint of its content>.<n>``, and a response without one answers the
    oldest open call of the same name (else the oldest open call), as Gemini pairs them.
    """

    def __init__(self) -> None:
        self.open: list[tuple[str, str]] = []  # (name, id) of the calls not answered yet
        self.answered: set[str] = set()
        self.given: dict[str, int] = {}  # how often each made-up call id was given so far

    def model(self, content: Any, fp: str) -> list[Message]:
        texts: list[str] = []
        calls: list[ToolCall] = []
        for n, part in enumerate(content.parts or ()):
            call = part.function_call
            if call is not None:
                call_id = call.id
                if not call_id:  # the same content again later gets ids of its own
                    call_id = f"{fp}.{n}"
                    repeat = self.given.get(call_id, 0)
                    self.given[call_id] = repeat + 1
                    call_id = f"{call_id}.{repeat}" if repeat else call_id
                name = call.name or ""
                arguments = _json(call.args or {}, compact=True)
                calls.append(ToolCall(call_id, name, arguments))
                self.open.append((name, call_id))
                continue
            text = _plain_text(part)
            if text is not None:
                texts.append(text)
        return [Message(ASSISTANT, "\n".join(texts), tool_calls=calls)]

    def _answer(self, name: str, call_id: Optional[str], fallback: str) -> str:
        for index, (open_name, open_id) in enumerate(self.open):
            if (open_id == call_id) if call_id else (open_name == name):
                del self.open[index]
                self.answered.add(open_id)
                return open_id
        if call_id:
            return call_id
        if self.open:
            open_id = self.open.pop(0)[1]
            self.answered.add(open_id)
            return open_id
        return fallback

    def user(self, content: Any, fp: str) -> list[Message]:
        messages: list[Message] = []
        texts: list[str] = []
        for n, part in enumerate(content.parts or ()):
            response = part.function_response
            if response is not None:
                name = response.name or ""
                call_id = self._answer(name, response.id, f"{fp}.{n}")
                meta: dict[str, Any] = {"name": name} if name else {}
                messages.append(Message(TOOL, _response_text(response), tool_call_id=call_id, metadata=meta))
                continue
            text = _plain_text(part)
            if text is not None:
                texts.append(text)
        if texts or not messages:
            messages.append(Message(USER, "\n".join(texts)))
        return messages

    def convert(self, content: Any, fp: str) -> list[Message]:
        if content.role == "model":
            return self.model(content, fp)
        return self.user(content, fp)

    def pin_pending(self, messages: list[Message]) -> list[Message]:
        """``messages`` with each assistant message that has an unanswered call pinned."""
        if not self.open:
            return messages
        pending = {call_id for _, call_id in self.open}
        return [
            replace(m, pinned=True) if any(c.id in pending for c in m.tool_calls) else m for m in messages
        ]


# -- the state ------------------------------------------------------------------------------------


class _State:
    """The plugin's session state for one agent (a JSON-ready dict in the session)."""

    __slots__ = ("anchor", "costs", "counter", "folded", "kept", "start", "summary")

    def __init__(
        self,
        summary: str = "",
        start: int = 0,
        anchor: Optional[str] = None,
        kept: Optional[list[tuple[int, str]]] = None,
        costs: Optional[dict[str, list[int]]] = None,
        counter: Optional[str] = None,
        folded: Optional[list[str]] = None,
    ) -> None:
        self.summary = summary
        self.start = start  # contents[:start] are folded, except the kept ones
        self.anchor = anchor  # fingerprint of contents[start - 1]
        self.kept = kept or []  # (index, fingerprint) of contents before start still in view
        self.costs = costs or {}  # fingerprint -> cost of each of its messages
        self.counter = counter  # the counter identity the costs were measured with
        self.folded = folded or []  # fingerprints of the newest folded contents, oldest first

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "summary": self.summary,
            "start": self.start,
            "anchor": self.anchor,
            "kept": [[index, fp] for index, fp in self.kept],
            "costs": {fp: list(costs) for fp, costs in self.costs.items()},
            "counter": self.counter,
            "folded": list(self.folded),
        }

    @classmethod
    def from_dict(cls, data: object, path: str) -> _State:
        if data is None:
            return cls()
        data = v.expect_mapping(data, path)
        version = v.get_int(data, "version", path)
        if version != _STATE_VERSION:
            raise InvalidStateError(
                v.join(path, "version"), f"unsupported state version {version}; this rollmem reads version 1"
            )
        kept: list[tuple[int, str]] = []
        for index, item in enumerate(v.get_list(data, "kept", path)):
            where = v.join(v.join(path, "kept"), index)
            if not (
                isinstance(item, list) and len(item) == 2 and isinstance(item[1], str) and v.is_int(item[0])
            ):
                raise StateTypeError(where, f"expected [int, str], got {item!r}")
            kept.append((item[0], item[1]))
        costs: dict[str, list[int]] = {}
        for fp, values in v.get_mapping(data, "costs", path).items():
            where = v.join(v.join(path, "costs"), fp)
            if not isinstance(values, list):
                raise StateTypeError(where, f"expected a list of int, got {v.type_name(values)}")
            for index, cost in enumerate(values):
                if not v.is_int(cost) or cost < 0:
                    raise StateTypeError(v.join(where, index), f"expected an int >= 0, got {cost!r}")
            costs[fp] = values
        folded = v.get_list(data, "folded", path)
        for index, fp in enumerate(folded):
            if not isinstance(fp, str):
                raise StateTypeError(v.join(v.join(path, "folded"), index), f"expected str, got {fp!r}")
        return cls(
            summary=v.get_str(data, "summary", path),
            start=v.get_int(data, "start", path),
            anchor=v.get_optional_str(data, "anchor", path),
            kept=kept,
            costs=costs,
            counter=v.get_optional_str(data, "counter", path),
            folded=folded,
        )


def _find(fingerprints: Callable[[int], str], fp: str, near: int, stop: int) -> Optional[int]:
    """The index in ``range(stop)`` nearest to ``near`` whose fingerprint is ``fp``."""
    if 0 <= near < stop and fingerprints(near) == fp:
        return near
    best: Optional[int] = None
    for index in range(stop):
        if fingerprints(index) == fp and (best is None or abs(index - near) < abs(best - near)):
            best = index
    return best


class _Prints:
    """Fingerprints of a request's contents, computed on demand and once each."""

    def __init__(self, contents: Sequence[Any]) -> None:
        self.contents = contents
        self.cache: dict[int, str] = {}

    def __call__(self, index: int) -> str:
        fp = self.cache.get(index)
        if fp is None:
            fp = self.cache[index] = _fingerprint(self.contents[index])
        return fp


def _view_start(state: _State, prints: _Prints, count: int) -> tuple[int, list[int], bool]:
    """Where the unfolded tail of the request starts, and the unfolded contents before it.

    Normally the last folded content is where the state says, and the rest follows it. When it
    is not (ADK presents history differently for one request: a late response to a long-running
    call drops the turns after the call; a rewind; an edited session), every content whose
    fingerprint is not among the newest folded ones is taken as unfolded. The last value tells
    whether the fold position was found (else the state keeps the one it has).
    """
    if state.anchor is None:
        return 0, [], True
    if 0 < state.start <= count and prints(state.start - 1) == state.anchor:
        kept: list[int] = []
        for index, fp in state.kept:
            found = _find(prints, fp, index, state.start)
            if found is not None and found not in kept:
                kept.append(found)
        return state.start, sorted(kept), True
    logger.info("rollmem: the request's history moved since the last fold; matching folded contents")
    folded = set(state.folded)
    found = _find(prints, state.anchor, state.start - 1, count) is not None
    return count, [index for index in range(count) if prints(index) not in folded], found


class RollingMemoryPlugin(_BasePlugin):  # type: ignore[misc]
    """An ADK plugin: each model request gets a running summary plus the newest contents.

    Before each model call (``before_model_callback``) the request's contents, as ADK built them
    from the session for the calling agent, are converted to rollmem messages: a ``model``
    content is one ``assistant`` message (its text parts joined with ``"\\n"``, its function
    calls as :class:`~rollmem.ToolCall`\\ s with JSON arguments); in a ``user`` content each
    function response is a ``tool`` message (the response as JSON) and the other parts one
    ``user`` message; code, inline data and files appear as text or a ``[mime/type]``
    placeholder, thoughts are not counted. The unfolded ones go through an
    :class:`~rollmem.AsyncRollingMemory` with ``max_tokens``, ``target_tokens``,
    ``summarize_fn`` (sync or a coroutine function) and ``token_counter``: whole units (a model
    content with its function calls and the responses, parallel calls included, are one unit),
    oldest first, down to ``target_tokens`` (default :func:`rollmem.cached_target` ``(max_tokens)``)
    once over ``max_tokens``, the newest unit always kept, the cut aligned so the kept part does
    not open with a reply, each message summarized exactly once. A model content whose function
    call has no response in the request yet (a long-running tool still pending) is pinned: never
    folded while pending.

    The request then holds: the system instruction with ``summary_text(summary)`` appended (when
    the summary is not empty), a user turn :data:`rollmem.adapters.CONTINUATION_TEXT` when the
    first kept content is not the user's (Gemini and Anthropic refuse a conversation opening with
    a model turn) and where folding left two model turns side by side, then the kept contents
    verbatim, in the request's order. The session's events are untouched.

    State: ``callback_context.state[STATE_PREFIX + agent_name]`` holds the summary, the fold
    position (fingerprints of contents, so contents ADK moves, such as a late tool response
    placed after its call, are found again) and each unfolded message's token cost. It is
    written with the model response event, so a session service persists it; a new runner,
    plugin and process on the same session continue without summarizing anything again.
    Costs are reused only with the same counter: one that declares a
    :func:`rollmem.counters.counter_identity` (the default counter does), or the same counter
    object in this process; otherwise the unfolded messages are counted once more. When a
    request shows the history reshaped (ADK's view for a late tool response, a rewind, an
    edited session), contents are matched against the fingerprints of the newest 256 folded
    ones: a content identical to one of those is taken as folded.

    Failures: if ``summarize_fn`` raises, ADK's plugin manager raises a ``RuntimeError`` from it
    out of ``run_async``; the state is unchanged and the next run folds again. The state rides
    on the model response event: if the model call itself fails, that fold is not saved and the
    next run summarizes those messages again. A sync ``summarize_fn`` runs on the event loop;
    give a coroutine function for a network call. Arguments are checked as
    :class:`~rollmem.AsyncRollingMemory` checks them.
    """

    def __init__(
        self,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        *,
        target_tokens: Optional[int] = None,
        summary_text: Optional[Callable[[str], str]] = None,
        name: str = "rollmem",
    ) -> None:
        AsyncRollingMemory(max_tokens, summarize_fn, token_counter, target_tokens=target_tokens)
        v.check_callable("summary_text", summary_text, optional=True)
        v.check_str("name", name, allow_empty=False)
        super().__init__(name=name)
        self.max_tokens = max_tokens
        self.target_tokens = cached_target(max_tokens) if target_tokens is None else target_tokens
        self.summarize_fn = summarize_fn
        self.token_counter = token_counter
        self.summary_text: Callable[[str], str] = (
            summary_instruction if summary_text is None else summary_text
        )
        identity = counter_identity(token_counter) if token_counter is not None else "words"
        self._counter = identity if identity is not None else f"process:{uuid.uuid4().hex}"

    def state_key(self, agent_name: str) -> str:
        """The session-state key of an agent's memory: :data:`STATE_PREFIX` ``+ agent_name``."""
        return STATE_PREFIX + agent_name

    async def before_model_callback(self, *, callback_context: Any, llm_request: Any) -> Optional[Any]:
        """Fold what the budget says, save the state, and rewrite ``llm_request``; returns
        ``None`` (the model is called)."""
        contents: list[Any] = list(llm_request.contents or ())
        if not contents:
            return None
        key = self.state_key(callback_context.agent_name)
        state = _State.from_dict(callback_context.state.get(key), key)
        view, new_state = await self._fold(contents, state)
        if new_state.to_dict() != state.to_dict():
            callback_context.state[key] = new_state.to_dict()
        llm_request.contents = view
        if new_state.summary:
            llm_request.append_instructions([self.summary_text(new_state.summary)])
        return None

    async def _fold(self, contents: list[Any], state: _State) -> tuple[list[Any], _State]:
        prints = _Prints(contents)
        start, kept, found = _view_start(state, prints, len(contents))
        window = [*kept, *range(start, len(contents))]
        converter = _Converter()
        per_content = [converter.convert(contents[i], prints(i)) for i in window]
        flat = converter.pin_pending([m for messages in per_content for m in messages])
        owner = [position for position, messages in enumerate(per_content) for _ in messages]

        trusted = state.costs if state.counter == self._counter else {}
        known: list[int] = []
        for position, index in enumerate(window):
            costs = trusted.get(prints(index))
            if costs is None or len(costs) != len(per_content[position]):
                break
            known.extend(costs)
        known = known[: len(flat) - 1]  # the newest message is added, so the fold runs

        memory = AsyncRollingMemory(
            self.max_tokens, self.summarize_fn, self.token_counter, target_tokens=self.target_tokens
        )
        memory.restore({"version": 2, "summary": state.summary, "buffer": flat[: len(known)]}, costs=known)
        await memory.extend(flat[len(known) :])

        cost_of = {id(m): c for m, c in zip(memory.buffer, memory.costs())}
        staying = [False] * len(window)
        for message, position in zip(flat, owner):
            if id(message) in cost_of:
                staying[position] = True
        view, new = self._finish(
            contents, prints, window, staying, flat, owner, cost_of, memory.summary, state
        )
        if not found:  # a request showing part of the history: the fold position stays
            merged = {**state.costs, **new.costs} if state.counter == new.counter else new.costs
            new = _State(new.summary, state.start, state.anchor, state.kept, merged, new.counter, new.folded)
        return view, new

    def _finish(
        self,
        contents: list[Any],
        prints: _Prints,
        window: list[int],
        staying: list[bool],
        flat: list[Message],
        owner: list[int],
        cost_of: Mapping[int, int],
        summary: str,
        previous: _State,
    ) -> tuple[list[Any], _State]:
        first = len(window)  # the kept contiguous tail of the request starts at window[first]
        start = len(contents)
        while first > 0 and staying[first - 1] and window[first - 1] == start - 1:
            first -= 1
            start -= 1
        kept = [(index, prints(index)) for p, index in enumerate(window[:first]) if staying[p]]
        values: list[list[Optional[int]]] = [[] for _ in window]
        for message, position in zip(flat, owner):
            values[position].append(cost_of.get(id(message)))
        costs: dict[str, list[int]] = {}
        for p, index in enumerate(window):
            if staying[p] and None not in values[p]:
                costs[prints(index)] = [c for c in values[p] if c is not None]
        anchor = prints(start - 1) if start > 0 else None
        gone = [prints(index) for p, index in enumerate(window) if not staying[p]]
        folded = [*previous.folded, *gone][-_REMEMBERED:] if gone else previous.folded
        state = _State(summary, start, anchor, kept, costs, self._counter, folded)
        opening = [next(m for m, o in zip(flat, owner) if staying[o])]
        shown = [index for p, index in enumerate(window) if staying[p]]
        return _render(contents, shown, user_first(opening) is not opening), state


def _continuation() -> Any:
    return _types.Content(role="user", parts=[_types.Part(text=CONTINUATION_TEXT)])


def _render(contents: Sequence[Any], shown: list[int], opens_with_reply: bool) -> list[Any]:
    """The contents at ``shown``, a user turn :data:`CONTINUATION_TEXT` first when the first
    is not the user's, and one where folding left two model turns side by side (a pending call
    kept ahead of a tool chain): Gemini takes a function call turn only after a user turn."""
    view = [_continuation()] if opens_with_reply else []
    previous: Optional[int] = None
    for index in shown:
        content = contents[index]
        if (
            previous is not None
            and index != previous + 1
            and content.role == "model"
            and contents[previous].role == "model"
        ):
            view.append(_continuation())
        view.append(content)
        previous = index
    return view

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
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Callable, Optional, Union

from .. import _validate as v
from .._extras import import_extra
from ..adapters import CONTINUATION_TEXT, user_first
from ..changes import Dropped, Folded
from ..counters import counter_identity
from ..errors import InvalidStateError, StateTypeError
from ..memory import AsyncRollingMemory, AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
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
            "costs": dict(self.costs),  # the cost lists are never changed in place
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

    Cost: the plugin keeps each session's memory between model calls (the newest 256 session and
    agent pairs); a request that is the previous one plus contents at the end (the state as the
    plugin wrote it, the last content seen, the one before the fold position and the pinned ones
    where they were) has only its new contents converted, fingerprinted and counted. Anything else
    rebuilds the memory from the state once.

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
        self._cache: OrderedDict[tuple[str, ...], _Live] = OrderedDict()  # by session and agent
        self._lock = threading.Lock()

    def cached_prefix(self, summary: str, evicted: list[Message]) -> list[Message]:
        """``summary_as`` for :func:`rollmem.summarizers.cached_summarizer`: the summary as this
        plugin appends it to the system instruction (``summary_text(summary)``, a system message
        after your system prompt), then the evicted messages, so the summarizer's request opens
        as the agent's last request did."""
        return [Message(SYSTEM, self.summary_text(summary)), *evicted] if summary else list(evicted)

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
        data = _read(callback_context.state, key)
        session = getattr(callback_context, "session", None)
        where = None if session is None else (session.app_name, session.user_id, session.id, key)
        view, new_state, written = await self._fold(contents, data, key, where)
        if written != data:
            callback_context.state[key] = written
        llm_request.contents = view
        if new_state.summary:
            llm_request.append_instructions([self.summary_text(new_state.summary)])
        return None

    async def _fold(
        self, contents: list[Any], data: object, key: str, where: Optional[tuple[str, ...]]
    ) -> tuple[list[Any], _State, dict[str, Any]]:
        """Fold with the live memory of the last call when the request only added contents at
        the end (the new ones are converted and counted), else with one rebuilt from the state;
        returns the request's contents, the new state and its JSON form."""
        live = None if where is None else self._take(where)
        if live is None or not live.current(contents, data):
            state = _State.from_dict(data, key)
            live, new, found = self._rebuild(contents, state)
        else:
            new, found = list(range(live.count, len(contents))), True
        fresh = [_Entry(index, _fingerprint(contents[index])) for index in new]
        state = await live.advance(contents, fresh, self._counter)
        if not found:  # a request showing part of the history: the fold position stays
            old = live.previous
            merged = {**old.costs, **state.costs} if old.counter == state.counter else state.costs
            state = _State(
                state.summary, old.start, old.anchor, old.kept, merged, state.counter, state.folded
            )
        written = live.remember(state, len(contents))
        if found and where is not None:
            self._keep(where, live)
        return live.render(contents), state, written

    def _rebuild(self, contents: list[Any], state: _State) -> tuple[_Live, list[int], bool]:
        """A live memory from the state: the unfolded contents with a stored cost restored (not
        counted again), and the rest of them to add."""
        prints = _Prints(contents)
        start, kept, found = _view_start(state, prints, len(contents))
        window = [*kept, *range(start, len(contents))]
        memory = AsyncRollingMemory(
            self.max_tokens, self.summarize_fn, self.token_counter, target_tokens=self.target_tokens
        )
        live = _Live(memory, state)
        trusted = state.costs if state.counter == self._counter else {}
        entries: list[_Entry] = []
        known: list[int] = []
        for index in window[:-1]:  # the newest content is added, so the fold runs
            entry = _Entry(index, prints(index))
            entry.messages = live.converter.convert(contents[index], entry.fp)
            costs = trusted.get(entry.fp)
            if costs is None or len(costs) != len(entry.messages):
                break
            entries.append(entry)
            known.extend(costs)
        live.converter = _Converter()  # converted again below, with their answers, in order
        messages = live.convert(contents, entries)
        memory.restore({"version": 2, "summary": state.summary, "buffer": messages}, costs=known)
        live.costs = {entry.fp: trusted[entry.fp] for entry in entries}
        live.add(entries)
        live.tail = len(kept)  # entries[tail:] will be the contiguous tail
        return live, window[len(entries) :], found

    def _take(self, where: tuple[str, ...]) -> Optional[_Live]:
        with self._lock:
            return self._cache.pop(where, None)

    def _keep(self, where: tuple[str, ...], live: _Live) -> None:
        with self._lock:
            self._cache[where] = live
            while len(self._cache) > _LIVE_SESSIONS:
                self._cache.popitem(last=False)


_LIVE_SESSIONS = 256  # live memories kept between model calls, most recently used last


class _Entry:
    """One unfolded content of the request: its index, fingerprint, messages and how many of
    them are still in the memory's buffer."""

    __slots__ = ("alive", "fp", "index", "messages")

    def __init__(self, index: int, fp: str) -> None:
        self.index = index
        self.fp = fp
        self.messages: list[Message] = []
        self.alive = 0


class _Live:
    """A memory kept between model calls of one session and agent, with the unfolded contents
    of its buffer (``entries``, in request order: the kept ones, then the contiguous tail from
    ``entries[tail]`` on), so a call converts, fingerprints and counts only the new contents."""

    def __init__(self, memory: AsyncRollingMemory, previous: _State) -> None:
        self.memory = memory
        self.converter = _Converter()
        self.entries: list[_Entry] = []
        self.tail = 0
        self.owner: dict[int, _Entry] = {}  # id() of each buffered message -> its entry
        self.pinned: dict[str, Message] = {}  # open call id -> the pinned message holding it
        self.costs: dict[str, list[int]] = {}  # fingerprint -> costs of the entries wholly buffered
        self.previous = previous  # the state this call started from, then the one it wrote
        self.data: Optional[dict[str, Any]] = None  # what was written to the session state
        self.count = 0  # len(contents) of the last call
        self.last: Optional[str] = None  # the fingerprint of its last content

    def current(self, contents: list[Any], data: object) -> bool:
        """Whether ``contents`` are the last call's plus new ones at the end, and the session
        state the one the last call wrote (a cheap check: the last content seen, the content
        before the fold position and each kept one where they were)."""
        count = self.count
        if data is None or data != self.data or not 0 < count <= len(contents):
            return False
        if _fingerprint(contents[count - 1]) != self.last:
            return False
        state = self.previous
        if state.anchor is not None and _fingerprint(contents[state.start - 1]) != state.anchor:
            return False
        return all(index < count and _fingerprint(contents[index]) == fp for index, fp in state.kept)

    def convert(self, contents: Sequence[Any], entries: list[_Entry]) -> list[Message]:
        """Convert ``entries`` in order (pairing responses with open calls); pending calls pinned,
        the ones they answer no longer pinned."""
        converter = self.converter
        flat: list[Message] = []
        for entry in entries:
            entry.messages = converter.convert(contents[entry.index], entry.fp)
            flat.extend(entry.messages)
        for call_id in [c for c in self.pinned if c in converter.answered]:
            self._unpin(self.pinned.pop(call_id))
        converter.answered.clear()
        pending = {call_id for _, call_id in converter.open}
        for entry in entries:
            for position, message in enumerate(entry.messages):
                ids = [c.id for c in message.tool_calls if c.id in pending]
                if ids:
                    message = replace(message, id=f"rollmem-call:{ids[0]}", pinned=True)
                    entry.messages[position] = message
                    self.pinned.update(dict.fromkeys(ids, message))
        return [m for entry in entries for m in entry.messages] if pending else flat

    def _unpin(self, message: Message) -> None:
        """Unpin ``message`` in the buffer once none of its calls is pending any more."""
        if message.id is None or any(c.id in self.pinned for c in message.tool_calls):
            return
        entry = self.owner.pop(id(message), None)
        if entry is None:
            return  # pragma: no cover - a pinned message is never folded
        self.memory.unpin(message.id)
        for item in self.memory.buffer:
            if item.id == message.id:
                self.owner[id(item)] = entry
                entry.messages = [item if m is message else m for m in entry.messages]

    def add(self, entries: list[_Entry]) -> None:
        for entry in entries:
            entry.alive = len(entry.messages)
            for message in entry.messages:
                self.owner[id(message)] = entry
        self.entries.extend(entries)

    async def advance(self, contents: list[Any], fresh: list[_Entry], counter: str) -> _State:
        """Add the ``fresh`` contents (counted once each), fold what the budget says; the state."""
        memory = self.memory
        messages = self.convert(contents, fresh)
        with memory.record() as changes:
            await memory.extend(messages)
        self.add(fresh)
        evicted = [m for change in changes if isinstance(change, (Folded, Dropped)) for m in change.messages]
        dead = self._evict(evicted)
        stored = self.costs
        for entry in dead:
            stored.pop(entry.fp, None)
        newest = len(messages)
        cost_of = dict(zip(map(id, memory.buffer[-newest:]), memory.costs()[-newest:])) if newest else {}
        for entry in fresh:
            costs = [cost_of.get(id(m)) for m in entry.messages]
            if None not in costs:
                stored[entry.fp] = [c for c in costs if c is not None]
        return self._state(contents, dead, counter)

    def _evict(self, evicted: list[Message]) -> list[_Entry]:
        """Take the evicted messages off their entries; returns the entries left with none
        (they leave ``entries``). Evictions take the leading messages but pinned units, so only
        the entries up to the last one touched are looked at."""
        if not evicted:
            return []
        reach = 0
        touched: list[_Entry] = []
        for message in evicted:
            entry = self.owner.pop(id(message))
            entry.alive -= 1
            touched.append(entry)
        last = max(touched, key=lambda e: e.index)
        entries = self.entries
        while entries[reach] is not last:
            reach += 1
        reach += 1
        head = entries[:reach]
        for entry in touched:  # a content partly folded: its costs are no longer all in the buffer
            self.costs.pop(entry.fp, None)
        dead = [entry for entry in head if not entry.alive]
        before_tail = sum(1 for entry in head[: self.tail] if not entry.alive)
        # the entries after the ones looked at are contiguous: the tail starts there or earlier
        self.tail = max(self.tail - before_tail, reach - len(dead))
        entries[:reach] = [entry for entry in head if entry.alive]
        return dead

    def _state(self, contents: list[Any], dead: list[_Entry], counter: str) -> _State:
        entries = self.entries
        tail = min(self.tail, len(entries) - 1)  # entries[tail:] are contiguous, ending with the last
        while tail > 0 and entries[tail - 1].index == entries[tail].index - 1:
            tail -= 1  # a kept content the tail reached
        self.tail = tail
        start = entries[tail].index
        previous = self.previous
        if start == 0:
            anchor = None
        elif start == previous.start and previous.anchor is not None:
            anchor = previous.anchor
        else:
            anchor = _fingerprint(contents[start - 1])
        kept = [(entry.index, entry.fp) for entry in entries[:tail]]
        gone = [entry.fp for entry in dead]
        folded = [*previous.folded, *gone][-_REMEMBERED:] if gone else previous.folded
        return _State(self.memory.summary, start, anchor, kept, dict(self.costs), counter, folded)

    def remember(self, state: _State, count: int) -> dict[str, Any]:
        """Keep ``state`` as the one written; returns its JSON form (to write)."""
        self.previous = state
        self.data = state.to_dict()
        self.count = count
        self.last = self.entries[-1].fp
        return self.data

    def render(self, contents: Sequence[Any]) -> list[Any]:
        """The request's contents: the kept ones, then the tail (see :func:`_render`)."""
        entries = self.entries
        opening = entries[0].messages[:1]
        opens_with_reply = user_first(opening) is not opening
        shown = [entry.index for entry in entries[: self.tail]]
        view = _render(contents, shown, opens_with_reply)
        if self.tail < len(entries):
            start = entries[self.tail].index
            if (
                shown
                and start != shown[-1] + 1
                and contents[start].role == "model"
                and contents[shown[-1]].role == "model"
            ):
                view.append(_continuation())
            view.extend(contents[start:])
        return view


def _read(state: Any, key: str) -> Any:
    """``state[key]`` without ADK's read snapshot: reading a dict through ``state.get`` makes
    ADK deep-copy it (to see writes into it later), which would cost O(buffer) on every call."""
    to_dict = getattr(state, "to_dict", None)
    return state.get(key) if to_dict is None else to_dict().get(key)


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

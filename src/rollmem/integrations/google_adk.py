"""Google ADK agents: a rolling memory as a plugin, :class:`RollingMemoryPlugin`. Needs the
``google-adk`` extra (Python 3.10+; checked with google-adk 2.0.0 and 2.13.0): importing this
module imports it (else :class:`~rollmem.errors.MissingExtraError`); its objects are typed ``Any``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

from .. import _validate as v
from .._extras import import_extra
from ..adapters import CONTINUATION_TEXT
from ..memory import AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
from ._engine import DEFAULT_MAX_TOKENS, Clock, Configured, Provider, stamp, stamp_clock, unit_of
from ._state import Keys, locate, read_state
from ._track import Spec, Track

__all__ = ["DEFAULT_MAX_TOKENS", "STATE_PREFIX", "RollingMemoryPlugin", "summary_instruction"]


_EXTRA: Any = {"package": "google-adk", "extra": "google-adk", "feature": __name__}
_BasePlugin: Any = import_extra("google.adk.plugins.base_plugin", **_EXTRA).BasePlugin
_types = import_extra("google.genai.types", **_EXTRA)

STATE_PREFIX = "rollmem:"
"""Session-state keys of the plugin are this prefix plus the agent's name (one memory per agent)."""

_KEYS_KEPT = 4096  # fingerprints a live track keeps (of the newest contents, and of calls)


def summary_instruction(summary: str) -> str:
    """The default text appended to the system instruction for a non-empty summary."""
    return f"Summary of the earlier conversation:\n{summary}"


def _fingerprint(content: Any) -> str:
    """A stable name for one request content: a hash of its JSON form."""
    return hashlib.sha256(content.model_dump_json(exclude_none=True).encode("utf-8")).hexdigest()[:16]


_PART_FIELDS = ("executable_code", "code_execution_result", "inline_data", "file_data")


def _plain_text(part: Any) -> Optional[str]:
    """The text a part other than a function call or response adds; ``None`` when none."""
    if getattr(part, "thought", None):
        return None  # thoughts travel with their content and are not counted
    code, result, data, file = (getattr(part, name) for name in _PART_FIELDS)
    if part.text is not None or code is not None or result is not None:
        return str(part.text if part.text is not None else (code.code if code else result.output) or "")
    if data is not None:
        return f"[{data.mime_type or 'inline data'}]"
    return None if file is None else f"[{file.mime_type or 'file'}: {file.file_uri}]"


def _json(value: Any, compact: bool = False) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":") if compact else None, default=str)


class _Converter:
    """Turns request contents into rollmem messages, pairing function responses with calls. The
    request carries no call ids ADK generated: a call gets a made-up one, and a response without
    an id answers the oldest open call of its name (else the oldest), as Gemini pairs them."""

    def __init__(self) -> None:
        self.open: list[tuple[str, str]] = []  # (name, id) of the calls not answered yet
        self.made = 0

    def _made(self, kind: str) -> str:
        self.made += 1
        return f"rollmem-{kind}-{self.made}"

    def _answer(self, name: str, call_id: Optional[str]) -> str:
        for index, (open_name, open_id) in enumerate(self.open):
            if (open_id == call_id) if call_id else (open_name == name):
                return self.open.pop(index)[1]
        if not call_id and self.open:
            return self.open.pop(0)[1]
        return call_id or self._made("result")  # its call was folded

    def convert(self, content: Any, tag: str = "") -> list[Message]:
        """One content as rollmem messages (``tag`` is not used)."""
        texts, calls, results = list[str](), list[ToolCall](), list[Message]()
        for part in content.parts or ():
            call, response = part.function_call, part.function_response
            if call is not None:
                call_id = call.id or self._made("call")
                calls.append(ToolCall(call_id, call.name or "", _json(call.args or {}, compact=True)))
                self.open.append((call.name or "", call_id))
            elif response is not None:
                name = response.name or ""
                body = "" if response.response is None else _json(response.response)
                meta, call_id = {"name": name} if name else {}, self._answer(name, response.id)
                results.append(Message(TOOL, body, tool_call_id=call_id, metadata=meta))
            elif _plain_text(part) is not None:
                texts.append(str(_plain_text(part)))
        if content.role == "model":
            return [Message(ASSISTANT, "\n".join(texts), tool_calls=calls)]
        return [*results, Message(USER, "\n".join(texts))] if texts or not results else results


class _Contents(Spec[Any]):
    recent = 32

    def units(self, natives: Sequence[Any], track: Track[Any]) -> list[Message]:
        return [unit_of(track.context.converter.convert(content)) for content in natives]

    def messages(self, natives: Sequence[Any]) -> list[Message]:
        converter = _Converter()
        return [m for content in natives for m in converter.convert(content)]

    def key(self, native: Any) -> str:
        return _fingerprint(native)

    def current(self, track: Track[Any], slot: int) -> Any:
        contents, position = track.context.contents, track.index[slot]
        return contents[position] if contents and position < len(contents) else track.natives[slot]


_SPEC = _Contents()


class _Context:
    """A track's ADK side: the converter, fingerprints by position, the request during a call."""

    def __init__(self, contents: Sequence[Any]) -> None:
        self.converter = _Converter()
        self.keys = Keys(contents, _fingerprint)
        self.contents: Optional[list[Any]] = None


def _is_response(content: Any) -> bool:
    return content.role != "model" and any(part.function_response for part in content.parts or ())


def _calls(content: Any) -> bool:
    return content.role == "model" and any(part.function_call for part in content.parts or ())


class RollingMemoryPlugin(Configured, _BasePlugin):  # type: ignore[misc]
    """An ADK plugin: each model request gets a running summary plus the newest contents within ``max_tokens``
    (the settings are :meth:`~rollmem.AsyncRollingMemory.cached`'s; an explicit ``target_tokens`` folds
    plainly down to it). Before each model call it folds the oldest units of the request's contents; the model
    gets the instruction with ``summary_text(summary)`` appended, then the kept contents (a user turn first
    where Gemini needs one; a pending call kept, a response posted back shown with its call). The session's
    events are never changed; the session state (:meth:`state_key`) changes only at a fold. The default
    ``clock`` is the newest session event's ``timestamp``."""

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
        summary_text: Optional[Callable[[str], str]] = None,
        name: str = "rollmem",
    ) -> None:
        clock = clock or stamp_clock  # the session's events are stamped
        self._setup(max_tokens, summarize_fn, token_counter, target_tokens, provider, clock, prefix_tokens)
        v.check_callable("summary_text", summary_text, optional=True)
        super().__init__(name=v.check_str("name", name, allow_empty=False))
        self.summary_text: Callable[[str], str] = summary_text or summary_instruction

    def cached_prefix(self, summary: str, evicted: list[Message]) -> list[Message]:
        """``summary_as`` for :func:`rollmem.summarizers.cached_summarizer`: the summary as this
        plugin sends it (a system message ``summary_text(summary)``), then the evicted messages."""
        return [Message(SYSTEM, self.summary_text(summary)), *evicted] if summary else list(evicted)

    def state_key(self, agent_name: str) -> str:
        """The session-state key of an agent's memory: :data:`STATE_PREFIX` ``+ agent_name``."""
        return STATE_PREFIX + agent_name

    async def before_model_callback(self, *, callback_context: Any, llm_request: Any) -> Optional[Any]:
        """Fold what the budget says, save the state when a fold changed it, and rewrite
        ``llm_request``; returns ``None`` (the model is called)."""
        contents: list[Any] = llm_request.contents
        if not contents:
            return None
        key = self.state_key(callback_context.agent_name)
        data = _read(callback_context.state, key)
        session = getattr(callback_context, "session", None)
        where = (key,) if session is None else (session.app_name, session.user_id, session.id, key)
        stamp(session.events[-1].timestamp if session is not None and session.events else None)
        track = self._lives.take(where)
        try:
            if track is not None and track.written == data and _follows(track, contents):
                new = track.new(contents)
            elif track is not None and track.written == data and _resumes(track, contents):
                if track.written is not None:  # the fold position moved with what was inserted
                    callback_context.state[key] = track.written = _moved(track)
                return self._render(llm_request, track, contents)
            else:
                track, new = self._rebuild(contents, data, key, track)
            track.context.contents = contents
            folded = await track.aadd(contents, new)
        finally:
            if track is not None:
                self._lives.put(where, track)
        if folded:
            callback_context.state[key] = track.written = track.state(track.context.keys)
        _seen(track, contents, new)
        return self._render(llm_request, track, contents)

    def _render(self, llm_request: Any, track: Track[Any], contents: list[Any]) -> Optional[Any]:
        track.context.keys.history = ()
        _render(track, contents)
        if track.memory.summary:
            llm_request.append_instructions([self.summary_text(track.memory.summary)])
        return None

    def _rebuild(
        self, contents: list[Any], data: Any, key: str, old: Optional[Track[Any]]
    ) -> tuple[Track[Any], list[int]]:
        """A track from the state: the tail (else from the fold position), the pinned contents with
        their responses, and those a live track held (by fingerprint)."""
        state = read_state(data, key)
        track: Track[Any] = Track(self, _SPEC, asynchronous=True)
        track.context = _Context(contents)
        keys = track.context.keys
        start, found, how = locate(state, keys, min(state.folded, len(contents) - 1))
        start = int(start or 0)
        held = old.natives[: old.kept] if old else ()  # found by fingerprint; -1: not there
        pinned = {*found, *(keys.find(_fingerprint(native), start) for native in held)} - {-1}
        pinned.update(i + 1 for i in list(pinned) if i + 1 < start and _is_response(contents[i + 1]))
        track.written = data
        return track, track.restore(contents, state, start, sorted(pinned), how in ("exact", "first"))


def _follows(track: Track[Any], contents: list[Any]) -> bool:
    """Whether ``contents`` are the last call's plus new ones at the end: the newest content seen
    is where it was (ADK hands over fresh copies each time: checked by fingerprint, not touched)."""
    count, keys = track.count, track.context.keys
    if not track.natives or count > len(contents) or _fingerprint(contents[count - 1]) != keys(count - 1):
        return False
    keys.history = contents
    return True


def _seen(track: Track[Any], contents: list[Any], new: Sequence[int]) -> None:
    """Keep the fingerprints the next calls check (the newest content's, the new calls'), and let
    go of the request (touching each content would cost O(buffer) per call)."""
    keys: Keys = track.context.keys
    keys.history = contents
    for position in [*(p for p in new if _calls(contents[p])), len(contents) - 1]:
        keys(position)
    if len(keys.cache) > _KEYS_KEPT:
        keys.cache = dict(sorted(keys.cache.items())[-_KEYS_KEPT // 2 :])
    track.context.contents = None


def _resumes(track: Track[Any], contents: list[Any]) -> bool:
    """ADK's request for a response posted back to an earlier call (a long-running tool, a
    confirmation): the history up to the call, then the response. The track takes the response
    where the next requests have it (after the call, or in place of its first response)."""
    size, keys = len(contents), track.context.keys
    call, response = size - 2, contents[-1]
    if call < 0 or size > track.count or not _is_response(response) or not _calls(contents[call]):
        return False
    before = keys(call - 1) if call else None  # checked when known: the history up to the call
    if before is not None and _fingerprint(contents[call - 1]) != before:
        return False
    if _fingerprint(contents[call]) != keys(call):  # the call was left out of the requests
        keys.insert(call, contents[call:])
        track.insert(call, contents[call:], 2)
    elif any(unit.pinned and unit.tool_calls for unit, i in zip(track.units, track.index) if i == call):
        keys.insert(call + 1, [response])  # the call was waiting: the response comes after it
        track.insert(call + 1, [response], 1)
    elif call + 1 in track.index:
        track.replace(call + 1, response)
    else:  # the call's first response was folded: this one takes its place
        track.insert(call + 1, [response], 0)
    keys.cache[call], keys.cache[call + 1] = _fingerprint(contents[call]), _fingerprint(response)
    return True


def _moved(track: Track[Any]) -> dict[str, Any]:
    """The state after a response came back: positions as they are now (costs counted again)."""
    keys: Keys = track.context.keys
    pinned = [[i, keys(i)] for i in track.index[: track.kept] if keys(i) is not None]
    return {**track.written, "folded": track.start, "pinned": pinned, "costs": []}


def _render(track: Track[Any], contents: list[Any]) -> None:
    """Rewrite the request's contents in place: the pinned ones (a response with its call), then
    the tail; a user turn first, and between two model turns (as Gemini needs)."""
    size, start = len(contents), track.start
    shown = [i for i in track.index[: track.kept] if i < size] + ([start] if start < size else [])
    for position in list(shown):
        call = position - 1
        if call >= 0 and call not in shown and _is_response(contents[position]) and _calls(contents[call]):
            shown.append(call)
    head: list[Any] = []
    previous: Optional[int] = None
    for index in sorted(shown):
        content = contents[index]
        if content.role == "model" and (
            previous is None or (index != previous + 1 and contents[previous].role == "model")
        ):
            head.append(_types.Content(role="user", parts=[_types.Part(text=CONTINUATION_TEXT)]))
        head.append(content)
        previous = index
    contents[: min(start + 1, size)] = head  # the tail moves up without being touched


def _read(state: Any, key: str) -> Any:
    """``state[key]`` without ADK's read snapshot (``state.get`` deep-copies a dict value)."""
    to_dict = getattr(state, "to_dict", None)
    return state.get(key) if to_dict is None else to_dict().get(key)

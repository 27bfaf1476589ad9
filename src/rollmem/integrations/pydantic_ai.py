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
never summarized. The summary's own tokens are not part of the budget, as in the core. When a
response would still come first (one run's tool chain longer than the budget), a
``UserPromptPart`` ``CONTINUATION_TEXT`` opens the conversation, as every rollmem renderer does
(:func:`rollmem.adapters.user_first`; it is recognised and removed when the history comes back).

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

State, per conversation: a rollmem session (:class:`~rollmem.sessions.AsyncSessions`) holding the
summary and the unfolded messages with their token costs (and the counter's identity), each
message's id being the fingerprint of its part (a hash of the part's converted form, its kind and
timestamp, so a history passed again after being serialized or re-created is recognised). A passed
history is matched against it: parts whose fingerprint is stored were counted already, the parts
after the newest stored one are new (counted once, then folded by the policy), and the parts before
it that are not stored were folded (folds always take the oldest parts), so they are dropped, never
summarized again. So a model request counts only the new parts, also after a restart, and the state
is bounded by the budget however long the conversation. Conversions and fingerprints are also kept
per history object in the processor, so a history passed again as the same objects is not converted
again. And the processor remembers, per conversation (the newest 64), the history its last call was
passed and the one it returned: a history that starts with either (one list comparison, plus the
parts of its last messages) is taken apart, counted and rebuilt only from the messages after it,
when the stored state is still the one that call left; anything else (another writer, an edited
history, our own parts among the new messages, or a remembered history grown to twice what was last
walked) walks the whole history as above. So a model call costs O(new messages), plus that C-speed
comparison and list copies. The summarizer receives the previous summary and only parts never
folded before (without those ids). Our own summary part is recognised wherever it sits (pydantic-ai
2.x writes the processed history back, and may merge that part into the request of a user prompt)
and removed before the history is measured. The state lives in ``store`` (any rollmem store: a log
store such as :class:`~rollmem.stores.SQLiteStore`; a new in-process :class:`~rollmem.stores.MemoryStore` by
default) under the session id :data:`STATE_PREFIX` ``+ conversation key``, written with
:meth:`AsyncSessions.update` (a lost race re-runs on the winner's state, up to 10 times, then
:class:`~rollmem.errors.ConflictError`). A state written by rollmem 0.6 (a JSON document as the
session's summary) is read and continued.

The conversation key is ``RunContext.conversation_id`` (pydantic-ai sets it on every run since
late 1.x and carries it on the messages). Without one, it is the key recorded in our summary part
when the history carries one, else the fingerprint of the history's first non-pinned part, the
conversation's opening message. So a history passed whole or passed processed continues the same
state, while two conversations started separately never share one. When there is no stored state
but the history carries our summary part (a restart without a store), that part's text is taken as
the summary.

A summarizer that raises fails the run with its error and changes nothing; the history the app
holds is untouched. Nothing is summarized twice, except that a fold whose save lost a race is
recomputed (the losing summary is discarded). A history that no longer holds some stored
unfolded parts (the app edited or cut it) drops them from the state.

Typing: ``pydantic_ai`` is loaded with :func:`importlib.import_module` (it cannot be parsed under
this package's mypy ``python_version = 3.9``), so its objects are typed ``Any`` here.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib
import inspect
import json
import threading
from collections.abc import Awaitable, Sequence
from dataclasses import replace
from typing import Any, Callable, Optional, Union, cast

from .. import _validate as v
from .._extras import import_extra
from ..adapters import CONTINUATION_TEXT, CONTINUATION_TEXT_PLAIN
from ..changes import Dropped, Folded
from ..errors import InvalidStateError
from ..memory import AsyncRollingMemory, AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
from ..policies import cached_target
from ..sessions import AsyncSessions
from ..stores import AsyncLogStore, LogStore, MemoryStore

__all__ = ["STATE_PREFIX", "RollingHistory", "find_summary", "rolling_history"]

STATE_PREFIX = "pydantic-ai:"
"""Session ids of the conversation states in the store are this prefix plus the conversation key."""

_MARKER = "rollmem"  # key of our summary part's metadata: {"rollmem": {"summary": True, "key": ...}}
_SYSTEM_MARKER = "rollmem.summary:"  # SystemPromptPart.dynamic_ref prefix where CompactionPart is absent
_SUMMARY_TIMESTAMP = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)  # that part's timestamp
_STATE_VERSION = 1
_MAX_RETRIES = 10
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
        metadata: dict[str, Any] = {}  # the keys the adapters carry: "name", "is_error"
        if isinstance(tool_name, str):
            metadata["name"] = tool_name
        if error:
            metadata["is_error"] = True
        return Message(TOOL, _tool_result_text(part), tool_call_id=part.tool_call_id, metadata=metadata)
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


class _Converted:
    """Converted messages and fingerprints by history object (a part, or a whole response), so a
    history passed again converts only what is new. Holds the objects it keys by ``id``; bounded."""

    _LIMIT = 100_000

    def __init__(self) -> None:
        self._entries: dict[tuple[int, bool], tuple[Any, Optional[tuple[Message, str]]]] = {}
        self._lock = threading.Lock()

    def get(
        self,
        item: Any,
        standing: bool,
        convert: Callable[..., Optional[Message]],
        args: tuple[Any, ...],
        request: Any = None,
    ) -> Optional[tuple[Message, str]]:
        """``(message, fingerprint)`` of ``item`` (``None``: a part with no text of its own)."""
        key = (id(item), standing)
        entry = self._entries.get(key)
        if entry is not None and entry[0] is item:
            return entry[1]
        message = convert(*args)
        if message is None:
            found = None
        elif request is None:  # a response
            found = (message, _fingerprint("response", item.timestamp, message))
        else:
            stamp = getattr(item, "timestamp", None) or request.timestamp
            found = (message, _fingerprint("request", stamp, message))
        with self._lock:
            if len(self._entries) >= self._LIMIT:
                self._entries.clear()
            self._entries[key] = (item, found)
        return found


class _View:
    """A history taken apart: our summary parts removed, every other part owned by one group.

    A group is one rollmem message (a whole response, or one content part of a request) plus the
    quiet parts that travel with it.
    """

    def __init__(self, pai: Any, messages: Sequence[Any], cache: _Converted) -> None:
        self._cache = cache
        self.summaries: list[str] = []
        self.marker_key: Optional[str] = None
        self.messages: list[Any] = []  # the history without our summary parts
        self.owners: list[list[int]] = []  # per message, per part: the index of its group
        self.groups: list[Message] = []
        self.prints: list[str] = []
        self.group_message: list[int] = []  # per group: the index of its message in ``messages``
        self.skipped = 0  # our own parts (summaries, opening user turns) taken out
        self._opening = True  # still reading the system prompt parts the first request opens with
        self.extend(pai, messages, 0)

    def extend(self, pai: Any, messages: Sequence[Any], offset: int) -> bool:
        """Take apart ``messages`` (at ``offset`` in the passed history) after the ones already
        here. Returns whether they held none of our own parts and every quiet part found a group."""
        start, groups, skipped = len(self.messages), len(self.groups), self.skipped
        for index, message in enumerate(messages):
            kind = getattr(message, "kind", None)
            if kind == "response":
                self._add_response(pai, message)
            elif kind == "request":
                self._add_request(pai, message)
            else:
                raise TypeError(
                    f"messages[{offset + index}]: expected ModelRequest or ModelResponse, "
                    f"got {v.type_name(message)}"
                )
        placed = self._place_quiet_parts(start, groups - 1)
        return placed and self.skipped == skipped

    def _new_group(self, converted: tuple[Message, str]) -> int:
        self.groups.append(converted[0])
        self.prints.append(converted[1])
        self.group_message.append(len(self.messages))  # the index its message will have
        return len(self.groups) - 1

    def _add_response(self, pai: Any, response: Any) -> None:
        self._opening = False
        converted = self._cache.get(response, False, _response_message, (pai, response))
        assert converted is not None  # a response is always one message
        group = self._new_group(converted)
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
                self.skipped += 1
                continue
            if _is_opening_part(part):  # ours, written back by pydantic-ai: added again when needed
                self.skipped += 1
                continue
            self._opening = opening = self._opening and getattr(part, "part_kind", None) == "system-prompt"
            converted = self._cache.get(part, opening, _request_message, (pai, part, opening), request)
            parts.append(part)
            owners.append(-1 if converted is None else self._new_group(converted))
        self._opening = False
        if not parts:
            return
        if len(parts) != len(request.parts):
            request = dataclasses.replace(request, parts=parts)
        self.messages.append(request)
        self.owners.append(owners)

    def _place_quiet_parts(self, start: int, previous: int) -> bool:
        """A quiet part of the messages from ``start`` on goes with the next group of its request,
        else the previous one (``previous``: the last group before them), else the nearest group
        before its message, else the first group after it. Returns whether none needed the last
        rule (which a later group would change)."""
        unplaced: list[tuple[int, int]] = []
        for position in range(start, len(self.owners)):
            owners = self.owners[position]
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
        return not unplaced

    def unfolded(self, folded: Sequence[str]) -> list[int]:
        """The groups not folded yet. Folds take the oldest non-pinned groups, so every non-pinned
        group up to the newest one found in ``folded`` was folded, whether remembered or not."""
        known = set(folded)
        groups, prints = self.groups, self.prints
        cut = next(
            (i for i in range(len(groups) - 1, -1, -1) if not groups[i].pinned and prints[i] in known), -1
        )
        return [i for i in range(len(groups)) if groups[i].pinned or (i > cut and prints[i] not in known)]

    def live(self, buffered: set[str]) -> tuple[list[int], list[int]]:
        """``(known, new)``: the groups whose fingerprint is in ``buffered`` (the stored buffer),
        and the groups to add: every group after the newest known one (all of them when none is
        known). The other groups before it were folded (folds take the oldest groups)."""
        prints = self.prints
        last = next((i for i in range(len(prints) - 1, -1, -1) if prints[i] in buffered), -1)
        known = [i for i in range(last + 1) if prints[i] in buffered]
        return known, list(range(last + 1, len(prints)))

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

    def rebuild_from(self, pinned: int, first: int) -> list[Any]:
        """:meth:`rebuild` keeping the groups before ``pinned`` and from ``first`` on, in time
        independent of the history's length: the messages after the one holding group ``first``
        hold only later groups (owners never decrease past the first group)."""
        start = self.group_message[first]
        result = []
        if pinned and start:
            result.extend(self._kept_parts(0, lambda owner: 0 <= owner < pinned))
        result.extend(self._kept_parts(start, lambda owner: owner >= first or 0 <= owner < pinned))
        result.extend(self.messages[start + 1 :])
        return result

    def _kept_parts(self, position: int, keep: Callable[[int], bool]) -> list[Any]:
        """Message ``position`` holding only the parts whose owner ``keep`` accepts (none: ``[]``)."""
        message = self.messages[position]
        parts = [part for part, owner in zip(message.parts, self.owners[position]) if keep(owner)]
        if len(parts) == len(message.parts):
            return [message]
        return [dataclasses.replace(message, parts=parts)] if parts else []


# -- the previous call, per conversation -----------------------------------------------------------


class _Track:
    """What a call left for the next one of its conversation: the history it was passed (extended
    by later calls: the *virtual* history), its view, the history it returned, and the memory's
    buffer it left, which is the view's pinned groups then its groups from ``first`` on. A next
    call passed either history plus new messages takes apart and counts only those."""

    _TAIL = 4  # the last messages whose parts lists are compared (pydantic-ai appends parts there)

    def __init__(
        self,
        key: str,
        ctx_key: Optional[str],
        view: _View,
        history: list[Any],
        output: list[Any],
        walked: int,
    ) -> None:
        self.key, self.ctx_key, self.view = key, ctx_key, view
        self.history, self.output, self.walked = history, output, walked
        self.pinned = next((i for i, group in enumerate(view.groups) if not group.pinned), len(view.groups))
        self.first = self.pinned
        self.summary = ""
        self.size = 0  # len(memory.buffer) after the call
        self.last: Optional[str] = None  # the id of the buffer's last message
        self.parts = (self._tail(history), self._tail(output))

    @classmethod
    def _tail(cls, history: Sequence[Any]) -> list[Any]:
        return [message.parts for message in history[-cls._TAIL :]]

    def settle(self, summary: str, size: int, last: Optional[str], output: list[Any]) -> None:
        """Record the call's outcome: the summary, the buffer, the history returned."""
        self.summary, self.size, self.last, self.output = summary, size, last, list(output)
        self.parts = (self._tail(self.history), self._tail(output))

    def known(self, messages: list[Any]) -> Optional[int]:
        """How many leading ``messages`` are the history this track was passed or returned (one
        list comparison: identical objects compare at C speed; ``None``: neither is a prefix)."""
        for known, parts in zip((self.output, self.history), self.parts):
            size = len(known)
            if (
                size
                and len(messages) >= size
                and messages[0] is known[0]
                and messages[:size] == known
                and self._tail(messages[:size]) == parts
            ):
                return size
        return None


class _Tracks:
    """A small thread-safe LRU of tracks; a call takes its conversation's track out while it runs."""

    _SIZE = 64

    def __init__(self) -> None:
        self._tracks: dict[str, _Track] = {}
        self._lock = threading.Lock()

    def take(self, messages: list[Any], ctx_key: Optional[str]) -> Optional[tuple[_Track, int]]:
        """The track ``messages`` continue, taken out, and how many of them it knows already."""
        if not messages:
            return None
        with self._lock:
            if ctx_key is not None:
                candidates = [self._tracks[ctx_key]] if ctx_key in self._tracks else []
            else:
                candidates = list(self._tracks.values())
            for track in candidates:
                if track.ctx_key != ctx_key or (
                    messages[0] is not track.history[0] and messages[0] is not track.output[0]
                ):
                    continue
                known = track.known(messages)
                if known is not None:
                    del self._tracks[track.key]
                    return track, known
        return None

    def put(self, track: _Track) -> None:
        with self._lock:
            self._tracks.pop(track.key, None)
            self._tracks[track.key] = track
            while len(self._tracks) > self._SIZE:
                del self._tracks[next(iter(self._tracks))]


# -- stored state ----------------------------------------------------------------------------------


def _legacy_state(session_id: str, text: str) -> tuple[str, list[str]]:
    """A state written by rollmem before 0.7 (a JSON document as the session's summary, no
    messages): ``(summary, fingerprints of the newest folded parts)``."""
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


def _is_legacy(memory: AsyncRollingMemory) -> bool:
    return not memory.buffer and memory.summary.startswith('{"version":')


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


_OPENING_TEXTS = (CONTINUATION_TEXT, CONTINUATION_TEXT_PLAIN)
# Request parts that are no turn of the conversation: the opening user turn goes after them.
_NOT_A_TURN = frozenset({"system-prompt", "compaction", *_QUIET_REQUEST_PARTS})


def _is_opening_part(part: Any) -> bool:
    """Whether ``part`` is the user turn :func:`_user_first` inserts."""
    return (
        getattr(part, "part_kind", None) == "user-prompt" and getattr(part, "content", None) in _OPENING_TEXTS
    )


def _user_first(pai: Any, history: list[Any]) -> list[Any]:
    """``history`` whose first turn is the user's, as every provider wants it (the rule of
    :func:`rollmem.adapters.user_first`): when a response comes before any user turn, a
    ``UserPromptPart`` ``CONTINUATION_TEXT`` (``CONTINUATION_TEXT_PLAIN`` with no summary) is
    appended to the request of system parts before it, or opens the history. Its timestamp is the
    response's, so the history is the same on every call until the next fold."""
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
        store: Union[LogStore, AsyncLogStore, None],
    ) -> None:
        _import()
        self.__annotations__ = _bind_run_context()
        target = cached_target(max_tokens) if target_tokens is None else target_tokens
        self._settings = (max_tokens, summarize_fn, token_counter, target)
        self._memory()  # checks every argument now
        if store is None:
            store = MemoryStore()
        self._store: Union[LogStore, AsyncLogStore] = store
        self._sessions = AsyncSessions(store, self._memory, max_retries=_MAX_RETRIES)
        self._converted = _Converted()
        self._tracks = _Tracks()

    @property
    def store(self) -> Union[LogStore, AsyncLogStore]:
        """Where the per-conversation state is kept."""
        return self._store

    def _memory(self) -> AsyncRollingMemory:
        max_tokens, summarize_fn, token_counter, target_tokens = self._settings
        return AsyncRollingMemory(
            max_tokens, _without_ids(summarize_fn), token_counter, target_tokens=target_tokens
        )

    async def __call__(self, ctx: Any, messages: list[Any]) -> list[Any]:
        """The history for the next model request: the summary, then the newest messages in budget."""
        pai = _import()
        if not isinstance(messages, list):
            raise TypeError(f"messages: expected a list of ModelMessage, got {v.type_name(messages)}")
        conversation_id = getattr(ctx, "conversation_id", None)
        ctx_key = conversation_id if isinstance(conversation_id, str) and conversation_id else None
        taken = self._tracks.take(messages, ctx_key)
        if taken is not None:
            output = await self._continue(pai, taken[0], messages, taken[1])
            if output is not None:
                return output
        view = _View(pai, messages, self._converted)
        key = ctx_key or view.marker_key or view.origin_key()
        if key is None:  # no message to keep or fold: nothing to do
            return messages
        session_id = STATE_PREFIX + key

        def step(memory: AsyncRollingMemory) -> Awaitable[tuple[str, list[Optional[str]], bool]]:
            return _step(session_id, memory, view)

        result = await self._sessions.update(session_id, cast(Any, step))
        summary, ids, changed = cast("tuple[str, list[Optional[str]], bool]", result)
        output = self._output(pai, view, messages, summary, set(ids), changed, key)
        track = _Track(key, ctx_key, view, list(messages), output, len(view.messages))
        if _settle_track(track, summary, ids, output):
            self._tracks.put(track)
        return output

    def _output(
        self,
        pai: Any,
        view: _View,
        messages: list[Any],
        summary: str,
        kept: set[Optional[str]],
        changed: bool,
        key: str,
    ) -> list[Any]:
        if not changed and view.summaries == ([summary] if summary else []):
            return _user_first(pai, messages)
        history = view.rebuild(
            {index for index, fingerprint in enumerate(view.prints) if fingerprint in kept}
        )
        if summary:
            _insert_summary(pai, history, self._summary_part(pai, summary, key))
        return _user_first(pai, history)

    async def _continue(
        self, pai: Any, track: _Track, messages: list[Any], known: int
    ) -> Optional[list[Any]]:
        """The call on a history continuing ``track``'s: only the messages after the ``known``
        ones are taken apart and counted. ``None`` when the full walk must decide instead (the
        new messages hold our own parts, the stored state is not the one the track left, or the
        virtual history grew to twice what was last walked, so walks stay amortised O(1))."""
        view = track.view
        new = messages[known:]
        groups = len(view.groups)
        if len(view.messages) + len(new) > 2 * track.walked + 64:
            return None
        if not view.extend(pai, new, known):
            return None
        track.history = track.history + new
        session_id, pinned = STATE_PREFIX + track.key, track.pinned

        def step(memory: AsyncRollingMemory) -> Awaitable[Any]:
            return _continue_step(memory, track, groups)

        outcome = await self._sessions.update(session_id, cast(Any, step))
        if outcome is None:
            return None
        summary, size, last, ids = cast("tuple[str, int, Optional[str], Optional[list[Any]]]", outcome)
        first = track.first + track.size + len(view.groups) - groups - size  # folds take the oldest
        if ids is not None or first >= len(view.groups):  # not a run of the newest groups: as a walk does
            kept = set(ids if ids is not None else view.prints[:pinned])
            return self._output(pai, view, track.history, summary, kept, True, track.key)
        if first == track.first and summary == track.summary:
            output = track.output + new
        else:
            output = view.rebuild_from(pinned, first)
            if summary:
                _insert_summary(pai, output, self._summary_part(pai, summary, track.key))
            output = _user_first(pai, output)
        track.first = first
        track.settle(summary, size, last, output)
        self._tracks.put(track)
        return output

    @staticmethod
    def _summary_part(pai: Any, summary: str, key: str) -> Any:
        compaction = getattr(pai, "CompactionPart", None)
        # A request-side summary (a CompactionPart with metadata) arrived in pydantic-ai 2.x; 2.0
        # has CompactionPart for provider responses only.
        if compaction is not None and "metadata" in {field.name for field in dataclasses.fields(compaction)}:
            return compaction(summary, metadata={_MARKER: {"summary": True, "key": key}})
        # A fixed timestamp: the same summary is the same part on every call (nothing in a
        # request depends on when it was built).
        return pai.SystemPromptPart(summary, timestamp=_SUMMARY_TIMESTAMP, dynamic_ref=_SYSTEM_MARKER + key)


async def _step(
    session_id: str, memory: AsyncRollingMemory, view: _View
) -> tuple[str, list[Optional[str]], bool]:
    """One processor call on the conversation's memory (re-run on the latest state when another
    call saved first): returns the summary, the ids of the buffer (fingerprints), and whether
    anything but the memory's own buffer was passed (a fold, or groups not shown in full)."""
    if _is_legacy(memory):  # a pre-0.7 state: fold position by folded fingerprints
        summary, folded = _legacy_state(session_id, memory.summary)
        memory.summary = summary
        known: list[int] = []
        new = view.unfolded(folded)
    else:
        if not memory.buffer and not memory.summary and view.summaries:
            memory.summary = view.summaries[-1]  # a restart without a store: continue our summary
        buffered = {message.id for message in memory.buffer if message.id is not None}
        known, new = view.live(buffered)
        if len(known) != len(memory.buffer):  # stored messages the history no longer holds
            present = {view.prints[index] for index in known}
            memory.buffer = [message for message in memory.buffer if message.id in present]
    groups = view.groups
    with memory.record() as changes:
        await memory.extend([replace(groups[index], id=view.prints[index]) for index in new])
    ids = [message.id for message in memory.buffer]
    folded_any = any(isinstance(change, (Folded, Dropped)) for change in changes)
    return memory.summary, ids, folded_any or len(known) + len(new) != len(groups)


def _settle_track(track: _Track, summary: str, ids: list[Optional[str]], output: list[Any]) -> bool:
    """Record a full walk's outcome in ``track``; ``False`` when the buffer is not the view's
    pinned groups then a run of its newest groups (the next call walks in full again)."""
    view, pinned = track.view, track.pinned
    first = len(view.prints) - (len(ids) - pinned)
    if (
        not output
        or first < pinned
        or ids[:pinned] != view.prints[:pinned]
        or ids[pinned:] != view.prints[first:]
    ):
        return False
    track.first = first
    track.settle(summary, len(ids), ids[-1] if ids else None, output)
    return True


async def _continue_step(
    memory: AsyncRollingMemory, track: _Track, groups: int
) -> Optional[tuple[str, int, Optional[str], Optional[list[Optional[str]]]]]:
    """Add the view's groups from ``groups`` on to the memory the track left: the summary, the
    buffer's size and last id, and its ids when it is not the pinned groups then the newest ones
    (``None`` otherwise). ``None`` (nothing changed) when the memory is not the one the track left
    (another writer moved it)."""
    buffer = memory.buffer
    view, pinned, first = track.view, track.pinned, track.first
    expected = buffer[pinned].id == view.prints[first] if len(buffer) > pinned else first == groups
    if (
        _is_legacy(memory)
        or memory.summary != track.summary
        or len(buffer) != track.size
        or (buffer[-1].id if buffer else None) != track.last
        or not expected
    ):
        return None
    await memory.extend([replace(view.groups[i], id=view.prints[i]) for i in range(groups, len(view.groups))])
    buffer = memory.buffer
    size, last = len(buffer), buffer[-1].id if buffer else None
    first = first + track.size + len(view.groups) - groups - size
    prints = view.prints
    if last == (prints[-1] if prints else None) and (buffer[pinned].id if size > pinned else None) == (
        prints[first] if first < len(prints) else None
    ):
        return memory.summary, size, last, None
    return memory.summary, size, last, [message.id for message in buffer]  # unexpected: as a walk does


def _without_ids(
    summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]],
) -> Optional[Union[SummarizeFn, AsyncSummarizeFn]]:
    """``summarize_fn`` receiving the messages without the fingerprints kept as their ids."""
    if summarize_fn is None or not callable(summarize_fn):
        return summarize_fn
    if inspect.iscoroutinefunction(summarize_fn):
        async_fn = cast("AsyncSummarizeFn", summarize_fn)

        async def asummarize(summary: str, evicted: Sequence[Message]) -> str:
            return await async_fn(summary, [replace(message, id=None) for message in evicted])

        return asummarize
    sync_fn = cast("SummarizeFn", summarize_fn)

    def summarize(summary: str, evicted: Sequence[Message]) -> str:
        return sync_fn(summary, [replace(message, id=None) for message in evicted])

    return summarize


def rolling_history(
    max_tokens: int = 2000,
    summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
    token_counter: Optional[TokenCounter] = None,
    *,
    target_tokens: Optional[int] = None,
    store: Union[LogStore, AsyncLogStore, None] = None,
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

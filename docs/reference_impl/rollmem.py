"""rollmem in one file: a running summary plus the recent turns verbatim, in a budget.

The reference implementation of ``rollmem.RollingMemory``, standard library only (Python
3.9+), for those who would rather own one file than add a dependency. Its saved state
(``to_dict``) is rollmem's, version 2: a state written by either loads in the other.
rollmem's tests run the library's memory contract against this file, and compare it
with the library on thousands of random conversations.

Each message is counted once, when it is added. When an add puts the buffer over
``max_tokens`` tokens:

1. The oldest *units* leave, whole, until at most ``target_tokens`` remain (default
   ``max_tokens``; a lower target folds deeper and less often). A unit is a message
   with tool calls and everything up to the last result answering one of them (no
   provider takes a result without its call); any other message is a unit alone.
   Pinned units stay. The newest unit always stays.
2. The cut moves forward until the kept buffer opens with a turn a conversation can
   open with, not a reply whose question is gone: up to the first unpinned unit that
   does not start with an assistant or tool message, if there is one.
3. What leaves is folded into the summary by one ``summarize_fn(summary, messages)``
   call (dropped when there is none). If the call raises, nothing changes (the new
   message stays, over budget) and the error propagates: the next add tries again.

Left out (the library has them): async memories and background folds, thread safety,
``fold()``, ``on_evict``, ``stats()``, ``restore()``, the change records, sessions and
stores, provider adapters, framework integrations, counters with an identity, tracing,
and the library's checks of every argument and field.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

__all__ = ["Message", "RollingMemory", "ToolCall", "unit_spans", "words"]

STATE_VERSION = 2  # the saved-state format written here; versions 1 and 2 are read


def _typed(value: Any, kinds: tuple[type, ...], where: str) -> Any:
    """``value`` when it is one of ``kinds``, else a TypeError naming ``where``."""
    if isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool)):
        return value
    expected = " or ".join(kind.__name__ for kind in kinds)
    raise TypeError(f"{where}: expected {expected}, got {type(value).__name__}")


@dataclass(frozen=True)
class ToolCall:
    """A function call a message requests; a later message answers its ``id``."""

    id: str
    name: str
    arguments: str = ""  # the arguments as JSON text, as the model wrote them


@dataclass(frozen=True)
class Message:
    """One conversation turn (any role string). A pinned message is never evicted.

    ``metadata`` is yours: copied in, compared and saved, not hashed; do not mutate it.
    """

    role: str
    content: str
    id: Optional[str] = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: Optional[str] = None  # the id of the tool call this message answers
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)
    pinned: bool = False

    def __post_init__(self) -> None:
        _typed(self.role, (str,), "role")
        _typed(self.content, (str,), "content")
        _typed(self.pinned, (bool,), "pinned")
        # A frozen dataclass sets its own fields through object.__setattr__.
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        object.__setattr__(self, "metadata", copy.deepcopy(dict(self.metadata or {})))

    def __str__(self) -> str:
        text = f"{self.role}: {self.content}"
        if self.tool_calls:
            calls = ", ".join(f"{c.name}({c.arguments})" for c in self.tool_calls)
            text += f" [tool calls: {calls}]"
        return text

    def token_text(self) -> str:
        """What a token counter measures: the content, each call as ``name(arguments)``
        and the id of the call answered, one per line."""
        if not self.tool_calls and self.tool_call_id is None:
            return self.content
        parts = [self.content] if self.content else []
        parts.extend(f"{call.name}({call.arguments})" for call in self.tool_calls)
        if self.tool_call_id is not None:
            parts.append(self.tool_call_id)
        return "\n".join(parts)

    def is_reply(self) -> bool:
        """Whether this answers something (an assistant or tool turn, a tool result):
        a conversation cannot open with it."""
        return self.role in ("assistant", "tool") or self.tool_call_id is not None

    def to_dict(self) -> dict[str, Any]:
        """``role`` and ``content``, plus each other field that is not its default."""
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.id is not None:
            data["id"] = self.id
        if self.tool_calls:
            data["tool_calls"] = [dataclasses.asdict(call) for call in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.metadata:
            data["metadata"] = copy.deepcopy(dict(self.metadata))
        if self.pinned:
            data["pinned"] = True
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "message") -> Message:
        """Read ``to_dict()`` output; errors name the field (``buffer[2].role``)."""
        _typed(data, (Mapping,), path)

        def get(key: str, kinds: tuple[type, ...], default: Any = None) -> Any:
            return _typed(data.get(key, default), kinds, f"{path}.{key}")

        calls = []
        for index, call in enumerate(get("tool_calls", (list,), [])):
            where = f"{path}.tool_calls[{index}]"
            _typed(call, (Mapping,), where)
            calls.append(
                ToolCall(
                    _typed(call.get("id"), (str,), f"{where}.id"),
                    _typed(call.get("name"), (str,), f"{where}.name"),
                    _typed(call.get("arguments", ""), (str,), f"{where}.arguments"),
                )
            )
        optional = (str, type(None))
        return cls(
            get("role", (str,)),
            get("content", (str,)),
            get("id", optional),
            tuple(calls),
            get("tool_call_id", optional),
            get("metadata", (Mapping,), {}),
            get("pinned", (bool,), False),
        )


def words(text: str) -> int:
    """The default token counter: whitespace-separated words (use your tokenizer's)."""
    return len(text.split())


def unit_spans(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """The units of ``messages`` as ``(start, stop)`` spans, oldest first, gapless.

    A tool result joins the unit of the first message here that made its call, with
    everything in between; any other message starts a unit of its own.
    """
    starts: list[int] = []
    first_caller: dict[str, int] = {}  # tool call id -> position of its first caller
    for position, message in enumerate(messages):
        caller = None
        if message.tool_call_id is not None:
            caller = first_caller.get(message.tool_call_id)
        if caller is None:
            starts.append(position)
        while caller is not None and starts[-1] > caller:
            starts.pop()  # merge the units after the caller's into it
        for call in message.tool_calls:
            first_caller.setdefault(call.id, position)
    return list(zip(starts, [*starts[1:], len(messages)]))


class RollingMemory:
    """A running summary plus the most recent turns verbatim, within ``max_tokens``.

    ``summarize_fn(summary, messages) -> str`` folds what leaves into the summary
    (without one, what leaves is dropped); ``token_counter(text) -> int`` counts
    tokens (default: words). Not thread-safe: one thread at a time per memory.
    """

    def __init__(
        self,
        max_tokens: int = 2000,
        summarize_fn: Optional[Callable[[str, Sequence[Message]], str]] = None,
        token_counter: Optional[Callable[[str], int]] = None,
        *,
        target_tokens: Optional[int] = None,
    ) -> None:
        target = max_tokens if target_tokens is None else target_tokens
        _typed(max_tokens, (int,), "max_tokens")
        if not 0 < _typed(target, (int,), "target_tokens") <= max_tokens:
            raise ValueError("expected 0 < target_tokens <= max_tokens")
        self.max_tokens = max_tokens
        self.target_tokens = target  # a fold goes down to min(target, max) tokens
        self.summarize_fn = summarize_fn
        self.token_counter = token_counter or words
        self.summary = ""
        self._buffer: list[Message] = []
        self._costs: list[int] = []  # the tokens of each buffered message

    @property
    def buffer(self) -> list[Message]:
        """The recent messages, oldest first: a copy (assign a list to replace them)."""
        return list(self._buffer)

    @buffer.setter
    def buffer(self, messages: Iterable[Message]) -> None:
        messages = self._checked(messages)
        self._costs = [self._count(message) for message in messages]
        self._buffer = messages

    # -- adding ---------------------------------------------------------------------

    def add_message(self, role: str, content: str, **fields: Any) -> Message:
        """Append a message, then fold if the buffer is over budget; returns it.
        ``fields``: ``id``, ``tool_calls``, ``tool_call_id``, ``metadata``, ``pinned``.
        """
        message = Message(role, content, **fields)
        self.extend([message])
        return message

    def add_user_message(self, content: str, **fields: Any) -> Message:
        return self.add_message("user", content, **fields)

    def add_assistant_message(self, content: str, **fields: Any) -> Message:
        return self.add_message("assistant", content, **fields)

    def add_system_message(self, content: str, **fields: Any) -> Message:
        return self.add_message("system", content, **fields)

    def add_tool_message(self, content: str, **fields: Any) -> Message:
        """The result of a tool call: pass its ``tool_call_id``."""
        return self.add_message("tool", content, **fields)

    def extend(self, messages: Iterable[Message]) -> None:
        """Add messages (all or none), then fold once: one summarizer call or none."""
        batch = self._checked(messages)
        if batch:
            costs = [self._count(message) for message in batch]  # may raise: no change
            self._buffer.extend(batch)
            self._costs.extend(costs)
            self._fold()

    def _checked(self, messages: Iterable[Message]) -> list[Message]:
        batch = list(messages)
        for index, message in enumerate(batch):
            _typed(message, (Message,), f"messages[{index}]")
        return batch

    def _count(self, message: Message) -> int:
        tokens = self.token_counter(message.token_text())
        if _typed(tokens, (int,), "token_counter's result") < 0:
            raise ValueError(f"token_counter returned {tokens}; expected >= 0")
        return tokens

    # -- folding --------------------------------------------------------------------

    def _plan(self) -> list[int]:
        """The positions of the messages to evict now, oldest first (maybe none)."""
        total = sum(self._costs)
        if total <= self.max_tokens:
            return []
        goal = min(self.target_tokens, self.max_tokens)
        units = unit_spans(self._buffer)
        pinned = [any(m.pinned for m in self._buffer[a:b]) for a, b in units]
        # 1. Whole units, oldest first, until at most `goal` tokens remain. Pinned
        #    units stay where they are; the newest unit (the turn just added) stays.
        cut = 0  # the cut is units[:cut]; its unpinned units leave
        for index, (start, stop) in enumerate(units[:-1]):
            if total <= goal:
                break
            if not pinned[index]:
                total -= sum(self._costs[start:stop])
                cut = index + 1
        if cut == 0:
            return []
        # 2. A valid first turn: move the cut up to the first unpinned unit that does
        #    not open with a reply (the newest unit, maybe); with none, it stands.
        for index in range(cut, len(units)):
            if not pinned[index] and not self._buffer[units[index][0]].is_reply():
                cut = index
                break
        return [p for i in range(cut) if not pinned[i] for p in range(*units[i])]

    def _fold(self) -> None:
        """Fold what the plan evicts into the summary, in one call; if it raises,
        nothing changes."""
        leaving = self._plan()
        if not leaving:
            return
        summary = self.summary
        if self.summarize_fn is not None:
            evicted = [self._buffer[p] for p in leaving]
            summary = _typed(self.summarize_fn(summary, evicted), (str,), "summary")
        # Commit. The pinned messages of the cut stay, in order, before the rest.
        gone = set(leaving)
        kept = [p for p in range(len(self._buffer)) if p not in gone]
        self._buffer = [self._buffer[p] for p in kept]
        self._costs = [self._costs[p] for p in kept]
        self.summary = summary

    # -- reading and editing --------------------------------------------------------

    def get_messages(self) -> list[Message]:
        """The buffer, after ``Message("system", summary)`` when there is a summary."""
        return ([Message("system", self.summary)] if self.summary else []) + self.buffer

    def get_context(self) -> str:
        """``get_messages()`` as text, one ``role: content`` line per message."""
        return "\n".join(str(message) for message in self.get_messages())

    def pin(self, message_id: str) -> None:
        """Pin the buffered messages with this ``id``: they will never be evicted."""
        self._set_pinned(message_id, True)

    def unpin(self, message_id: str) -> None:
        """Let the buffered messages with this ``id`` be evicted again."""
        self._set_pinned(message_id, False)

    def _set_pinned(self, message_id: str, pinned: bool) -> None:
        found = [p for p, m in enumerate(self._buffer) if m.id == message_id]
        if not found:
            raise KeyError(f"no message with id {message_id!r} in the buffer")
        for p in found:
            self._buffer[p] = dataclasses.replace(self._buffer[p], pinned=pinned)

    def clear(self) -> None:
        """Empty the summary and the buffer."""
        self.summary, self._buffer, self._costs = "", [], []

    # -- saved state ----------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """``{"version": 2, "summary": ..., "buffer": [message dicts]}``, JSON-ready."""
        buffer = [message.to_dict() for message in self._buffer]
        return {"version": STATE_VERSION, "summary": self.summary, "buffer": buffer}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **options: Any) -> RollingMemory:
        """A memory built as ``cls(**options)`` holding the saved state ``data`` as it
        is (no fold before the next add). Bad state raises an error naming the field."""
        _typed(data, (Mapping,), "state")
        if data.get("version") not in (1, 2):
            raise ValueError(f"unsupported state version {data.get('version')!r}")
        items = _typed(data.get("buffer"), (list,), "buffer")
        messages = [Message.from_dict(d, f"buffer[{i}]") for i, d in enumerate(items)]
        memory = cls(**options)
        memory.summary = _typed(data.get("summary"), (str,), "summary")
        memory.buffer = messages
        return memory

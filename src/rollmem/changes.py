"""The change record of a memory: every change, as a small frozen value, in the order it happened.

A memory reports what happens to it through :meth:`~rollmem.memory.RollingMemory.record`::

    with memory.record() as changes:
        memory.add_user_message("hi")
    # changes == [Appended(messages=(Message("user", "hi"),), costs=(1,))] (and a Folded/Dropped
    # if the add made the policy evict)

The record is enough to mirror a memory anywhere (a database, a UI, an audit log): :func:`apply`
plays it onto another memory (or :func:`replay` onto a plain ``(summary, buffer)`` pair) and
gets the same summary and buffer, without calling a summarizer. :mod:`rollmem.sessions` uses it
to write only what a turn added.

==================  =================================================================
record              what happened
==================  =================================================================
``Appended``        messages were added at the end of the buffer (with their costs)
``Folded``          messages left the buffer into the summary, which is now ``summary``
``Dropped``         messages left the buffer without a summarizer (the summary is unchanged)
``Cleared``         summary and buffer were emptied
``Pinned``          the buffer messages with this id were pinned
``Unpinned``        ... unpinned
``SummaryAssigned`` ``memory.summary = ...``
``BufferAssigned``  ``memory.buffer = ...``
==================  =================================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from dataclasses import replace as _replace
from typing import Any, Optional, Union

from .message import Message

__all__ = [
    "Appended",
    "BufferAssigned",
    "Change",
    "Cleared",
    "Dropped",
    "Folded",
    "Pinned",
    "SummaryAssigned",
    "Unpinned",
    "apply",
    "replay",
]


@dataclass(frozen=True)
class Appended:
    """``messages`` were added at the end of the buffer, in this order."""

    messages: tuple[Message, ...]
    costs: tuple[int, ...]
    """The cost of each message by the memory's rule (its token counter), as counted when added."""


@dataclass(frozen=True)
class Folded:
    """A fold committed: the messages at ``positions`` left the buffer and ``summary`` is the new
    summary. ``positions`` are buffer indices before the fold, ascending; they are the leading
    messages of the buffer except pinned units, which stay (moved in front of the rest)."""

    summary: str
    positions: tuple[int, ...]
    messages: tuple[Message, ...]
    """The messages that left, in buffer order (what ``on_evict`` receives)."""
    keep_last: Optional[int] = None
    """Set when ``fold(keep_last)`` asked for this fold; ``None`` when the policy did."""

    @property
    def count(self) -> int:
        """How many messages left the buffer."""
        return len(self.positions)


@dataclass(frozen=True)
class Dropped:
    """An eviction without a summarizer: the messages at ``positions`` left the buffer, the summary
    is unchanged. Fields as in :class:`Folded`."""

    positions: tuple[int, ...]
    messages: tuple[Message, ...]
    keep_last: Optional[int] = None

    @property
    def count(self) -> int:
        """How many messages left the buffer."""
        return len(self.positions)


@dataclass(frozen=True)
class Cleared:
    """``clear()``: summary and buffer were emptied."""


@dataclass(frozen=True)
class Pinned:
    """``pin(message_id)``: every buffer message with this id is now pinned."""

    message_id: str


@dataclass(frozen=True)
class Unpinned:
    """``unpin(message_id)``: every buffer message with this id is no longer pinned."""

    message_id: str


@dataclass(frozen=True)
class SummaryAssigned:
    """``memory.summary = summary``."""

    summary: str


@dataclass(frozen=True)
class BufferAssigned:
    """``memory.buffer = messages``. (Edits made in place on the ``buffer`` list are not recorded.)"""

    messages: tuple[Message, ...]


Change = Union[Appended, Folded, Dropped, Cleared, Pinned, Unpinned, SummaryAssigned, BufferAssigned]
"""Any record of :mod:`rollmem.changes`."""


def _without(buffer: list[Message], positions: Sequence[int]) -> list[Message]:
    if list(positions) == list(range(len(positions))):
        return buffer[len(positions) :]
    gone = set(positions)
    return [message for index, message in enumerate(buffer) if index not in gone]


def _pinned(buffer: list[Message], message_id: str, pinned: bool) -> list[Message]:
    return [
        _replace(message, pinned=pinned) if message.id == message_id and message.pinned != pinned else message
        for message in buffer
    ]


def replay(summary: str, buffer: Iterable[Message], changes: Iterable[Change]) -> tuple[str, list[Message]]:
    """The ``(summary, buffer)`` that ``changes`` make of ``(summary, buffer)``: a pure function.

    Raises ``ValueError`` naming the change when a fold or drop names positions the buffer does not
    have (the record belongs to another state), ``TypeError`` for something that is not a change.
    """
    messages = list(buffer)
    for index, change in enumerate(changes):
        if isinstance(change, Appended):
            messages.extend(change.messages)
        elif isinstance(change, (Folded, Dropped)):
            if change.positions and change.positions[-1] >= len(messages):
                raise ValueError(
                    f"changes[{index}]: {type(change).__name__} removes position {change.positions[-1]} "
                    f"from a buffer of {len(messages)} messages"
                )
            messages = _without(messages, change.positions)
            if isinstance(change, Folded):
                summary = change.summary
        elif isinstance(change, Cleared):
            summary, messages = "", []
        elif isinstance(change, (Pinned, Unpinned)):
            messages = _pinned(messages, change.message_id, isinstance(change, Pinned))
        elif isinstance(change, SummaryAssigned):
            summary = change.summary
        elif isinstance(change, BufferAssigned):
            messages = list(change.messages)
        else:
            raise TypeError(f"changes[{index}]: expected a rollmem change, got {type(change).__name__}")
    return summary, messages


def apply(memory: Any, changes: Iterable[Change]) -> None:
    """Mirror ``changes`` onto ``memory`` (any rollmem memory, sync or async): afterwards its summary
    and buffer are what the recorded memory's were. No summarizer call, no eviction; only messages
    the target has not counted yet are counted. The target records the result as one
    :class:`BufferAssigned` (and a :class:`SummaryAssigned` when the summary changed) if it is
    recording. Nothing changes on error."""
    summary, messages = replay(memory.summary, memory.buffer, changes)
    memory.buffer = messages  # first: counting the new messages is what may fail
    if summary != memory.summary:
        memory.summary = summary

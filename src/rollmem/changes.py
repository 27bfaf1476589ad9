"""The change record of a memory: every change, as a small frozen value, in the order it happened.

A memory reports what happens to it through :meth:`~rollmem.memory.RollingMemory.record`:

    with memory.record() as changes:
        memory.add_user_message("hi")
    # changes == [Appended(messages=(Message("user", "hi"),), costs=(1,))],
    # then a Folded or Dropped if the add made the policy evict
    other.replay(changes)  # await other.replay(changes) for an async memory

The record is enough to mirror a memory anywhere (a database, a UI, an audit log): a fold names
the buffer positions that left and the new summary, an append the messages and their costs.
:meth:`~rollmem.memory.RollingMemory.replay` applies the *intent* of each change to another
memory through its public methods: appended messages are added (the target's own policy then
evicts, as it would have), an automatic fold or drop is left to that policy, an explicit
``fold(keep_last)`` is redone, a pin whose message is gone is skipped. :mod:`rollmem.sessions`
writes only what a turn added from it, and replays a block that lost a write to another writer.

| record | what happened |
|---|---|
| ``Appended`` | messages were added at the end of the buffer (with their costs) |
| ``Folded`` | messages left the buffer into the summary, which is now ``summary`` |
| ``Dropped`` | messages left the buffer without a summarizer (the summary is unchanged) |
| ``Cleared`` | summary and buffer were emptied |
| ``Pinned`` | the buffer messages with this id were pinned |
| ``Unpinned`` | ... unpinned |
| ``SummaryAssigned`` | ``memory.summary = ...`` |
| ``BufferAssigned`` | ``memory.buffer = ...`` |
| ``Restored`` | ``memory.restore(data)``: summary and buffer replaced |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from .message import Message

__all__ = [
    "Appended",
    "BufferAssigned",
    "Change",
    "Cleared",
    "Dropped",
    "Folded",
    "Pinned",
    "Restored",
    "SummaryAssigned",
    "Unpinned",
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


@dataclass(frozen=True)
class Restored:
    """``memory.restore(data)``: summary and buffer were replaced by a saved state."""

    summary: str
    messages: tuple[Message, ...]


Change = Union[
    Appended, Folded, Dropped, Cleared, Pinned, Unpinned, SummaryAssigned, BufferAssigned, Restored
]
"""Any record of :mod:`rollmem.changes`."""

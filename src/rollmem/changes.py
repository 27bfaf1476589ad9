"""Typed records of what changed in a memory, to mirror a memory elsewhere or replay a block of work.

Every change a memory makes is one frozen value: :class:`Appended` (an add or an ``extend``),
:class:`Folded` (evicted messages summarized), :class:`Dropped` (evicted without a summarizer),
:class:`Cleared`, :class:`Pinned` (a pin or unpin), :class:`SummaryAssigned`,
:class:`BufferAssigned` and :class:`Restored`. Record them for a block of work and apply them to
another memory::

    with memory.record() as changes:
        memory.add_user_message("hi")
    other.replay(changes)          # await other.replay(changes) for an async memory

:meth:`replay` applies the *intent* of each change through the memory's public methods: appended
messages are added (the target's own policy then evicts, as it would have), an automatic fold or
drop is left to that policy, an explicit ``fold(keep_last)`` is redone, a pin whose message is gone
is skipped. This is how :mod:`rollmem.sessions` replays a block that lost a save to another writer.
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
]


@dataclass(frozen=True)
class Appended:
    """Messages appended at the end of the buffer: one add, or one ``extend`` batch."""

    messages: tuple[Message, ...]


@dataclass(frozen=True)
class Folded:
    """Messages left the buffer and were summarized: ``summary`` is the new summary, ``removed``
    how many messages left (the oldest non-pinned units). ``keep_last`` is set when the fold was
    asked for with ``fold(keep_last)``, ``None`` when the policy evicted."""

    summary: str
    removed: int
    keep_last: Optional[int] = None


@dataclass(frozen=True)
class Dropped:
    """Messages left the buffer without a summarizer (the summary is unchanged); ``removed`` and
    ``keep_last`` as in :class:`Folded`."""

    removed: int
    keep_last: Optional[int] = None


@dataclass(frozen=True)
class Cleared:
    """Summary and buffer were emptied (``clear()``)."""


@dataclass(frozen=True)
class Pinned:
    """The messages with ``message_id`` were pinned (``pinned=True``) or unpinned."""

    message_id: str
    pinned: bool


@dataclass(frozen=True)
class SummaryAssigned:
    """``memory.summary`` was assigned."""

    summary: str


@dataclass(frozen=True)
class BufferAssigned:
    """``memory.buffer`` was assigned."""

    messages: tuple[Message, ...]


@dataclass(frozen=True)
class Restored:
    """A saved state was restored (``restore()``): summary and buffer replaced."""

    summary: str
    messages: tuple[Message, ...]


Change = Union[Appended, Folded, Dropped, Cleared, Pinned, SummaryAssigned, BufferAssigned, Restored]
"""Any one of the change records."""

_CHANGE_TYPES = (Appended, Folded, Dropped, Cleared, Pinned, SummaryAssigned, BufferAssigned, Restored)

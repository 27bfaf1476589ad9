"""The write planner of :mod:`rollmem.sessions`: a block's change record -> one store write.

Pure: no store, no locks, no I/O. From what a block loaded (:class:`Loaded`) and what the memory
recorded (:mod:`rollmem.changes`), :func:`plan_write` picks the smallest
:class:`~rollmem.stores.LogWrite` that stores what the memory now holds: :func:`plan_append`
(only adds: no compare-and-set), :func:`plan_fold` (evictions: the new summary, the removed
sequence numbers, compare-and-set on the revision, and on the tail when the fold reached the
block's own messages; an add-only turn's fold carries a *fallback* append of what it added) or
:func:`plan_rewrite` (clear, pins, assignments, a changed counter, an in-place edit of
``buffer``: the whole state). :func:`explains` tells whether the record accounts for what the
memory holds; :func:`rebase_fold` re-aims a lost fold at the latest head when its cut is still
valid there. :func:`stored_summary` / :func:`read_summary` let a summary hold NUL on every store.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Protocol, cast

from .changes import (
    Appended,
    BufferAssigned,
    Change,
    Cleared,
    Dropped,
    Folded,
    Pinned,
    Restored,
    SummaryAssigned,
    Unpinned,
)
from .message import Message
from .stores import Head, LogEntry, LogWrite

__all__ = [
    "Loaded",
    "Plan",
    "PlannedMemory",
    "added_only",
    "entry",
    "explains",
    "plan_append",
    "plan_fold",
    "plan_rewrite",
    "plan_write",
    "read_summary",
    "rebase_fold",
    "stored_summary",
]

RARE = (Cleared, Pinned, Unpinned, SummaryAssigned, BufferAssigned, Restored)
ASSIGNMENTS = (SummaryAssigned, BufferAssigned, Restored)  # what a redo would have to overwrite

# -- the summary as stored: NUL escaped, losslessly ------------------------------------------------

_ESCAPED = "\ufdd0"
"""Starts a summary stored as a JSON string. U+FDD0 is a Unicode noncharacter (never interchanged
text): a summary practically never starts with it, so almost every summary is stored as itself."""


def stored_summary(summary: str) -> str:
    """``summary`` as a store keeps it: itself, or (when it holds NUL, which PostgreSQL text and
    the log protocol cannot, or starts with the escape mark) the mark plus its JSON string."""
    if "\x00" not in summary and not summary.startswith(_ESCAPED):
        return summary
    return _ESCAPED + json.dumps(summary, ensure_ascii=False)


def read_summary(stored: str) -> str:
    """The summary :func:`stored_summary` stored as ``stored`` (anything else as it is)."""
    if stored.startswith(_ESCAPED):
        try:
            value = json.loads(stored[len(_ESCAPED) :])
        except ValueError:
            return stored
        if isinstance(value, str):
            return value
    return stored


# -- what a block loaded ------------------------------------------------------------------------------


@dataclass
class Loaded:
    """The stored head a block started from and the sequence number of each buffer message."""

    head: Optional[Head]
    seqs: list[int]
    messages: tuple[Message, ...]  # the buffer as loaded, the same objects

    @property
    def summary(self) -> str:
        """The summary as loaded (the stored text read back)."""
        return "" if self.head is None else read_summary(self.head.summary)


@dataclass
class Plan:
    """One write and what the sessions need to know about it."""

    change: Optional[LogWrite]
    """``None``: nothing to write."""
    seqs_before_new: list[int]
    """The loaded sequence numbers still in the buffer."""
    redoable: bool
    """Whether a lost write may be redone on the latest state."""
    fallback: Optional[LogWrite] = None
    """For a fold of an add-only turn: the append of everything the block added."""
    removed: tuple[int, ...] = ()
    """For a fold: the loaded sequence numbers it removes."""
    removed_new: bool = False
    """For a fold: whether it removes messages the block added."""


class PlannedMemory(Protocol):
    """What the planner reads of a memory (every rollmem memory class qualifies)."""

    @property
    def summary(self) -> str: ...

    @property
    def buffer(self) -> list[Message]: ...

    def costs(self) -> list[int]: ...


def entry(session_id: str, message: Message, cost: int) -> LogEntry:
    """The log entry of ``message``; ``TypeError`` naming the session if it is not JSON-ready."""
    try:
        text = json.dumps(message.to_dict(), ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"session {session_id!r}: state cannot be saved as JSON: {exc}") from exc
    return LogEntry(text, cost)


def added_only(changes: Sequence[Change]) -> bool:
    """Whether the block only added messages (the memory's own evictions aside)."""
    return any(isinstance(change, Appended) for change in changes) and all(
        isinstance(change, Appended) or (isinstance(change, (Folded, Dropped)) and change.keep_last is None)
        for change in changes
    )


# -- replaying a record on the loaded buffer ----------------------------------------------------------


@dataclass
class _Replayed:
    """The loaded buffer after the record: ``(seq, message, cost)`` per message (``seq`` -1:
    added by the block, ``cost`` -1: loaded)."""

    slots: list[tuple[int, Message, int]]
    summary: Optional[str] = None  # None: unchanged
    removed: tuple[int, ...] = ()
    removed_new: bool = False
    evicted: bool = False
    cleared: bool = False


def _evict(state: _Replayed, change: Any) -> bool:
    if not change.positions:  # fold() that found nothing
        return True
    if change.positions[-1] >= len(state.slots):
        return False
    state.evicted = True
    seqs = [state.slots[position][0] for position in change.positions]
    state.removed += tuple(seq for seq in seqs if seq >= 0)
    state.removed_new = state.removed_new or min(seqs) < 0
    gone = set(change.positions)
    state.slots = [slot for index, slot in enumerate(state.slots) if index not in gone]
    if isinstance(change, Folded):
        state.summary = change.summary
    return True


def _pin(state: _Replayed, message_id: str, pinned: bool) -> None:
    state.slots = [
        (seq, replace(m, pinned=pinned) if m.id == message_id and m.pinned != pinned else m, cost)
        for seq, m, cost in state.slots
    ]


def _apply(state: _Replayed, change: Change) -> bool:
    """Apply one change to ``state``; ``False`` when it cannot be (an assignment, or positions
    the buffer does not have)."""
    if isinstance(change, Appended):
        state.slots.extend((-1, m, c) for m, c in zip(change.messages, change.costs))
    elif isinstance(change, (Folded, Dropped)):
        return _evict(state, change)
    elif isinstance(change, Cleared):
        state.slots, state.summary, state.cleared = [], "", True
    elif isinstance(change, (Pinned, Unpinned)):
        _pin(state, change.message_id, isinstance(change, Pinned))
    else:
        return False
    return True


def _replay(loaded: Loaded, changes: Sequence[Change]) -> Optional[_Replayed]:
    state = _Replayed([(seq, m, -1) for seq, m in zip(loaded.seqs, loaded.messages)])
    for change in changes:
        if not _apply(state, change):
            return None
    return state


def _same(slots: Sequence[tuple[int, Message, int]], buffer: Sequence[Message]) -> bool:
    return len(slots) == len(buffer) and all(s[1] is m or s[1] == m for s, m in zip(slots, buffer))


def explains(loaded: Loaded, changes: Sequence[Change], summary: str, buffer: Sequence[Message]) -> bool:
    """Whether applying ``changes`` to what was loaded gives ``summary`` and ``buffer``: ``False``
    after an assignment or an edit made in place on ``buffer`` (which the record does not hold)."""
    state = _replay(loaded, changes)
    if state is None:
        return False
    expected = loaded.summary if state.summary is None else state.summary
    return expected == summary and _same(state.slots, buffer)


# -- the three kinds of write ------------------------------------------------------------------------


def plan_append(
    session_id: str, memory: PlannedMemory, loaded: Loaded, changes: Sequence[Change], ttl: Optional[float]
) -> Optional[Plan]:
    """The append of a block that only added messages (``None``: the memory holds something else)."""
    head = loaded.head
    assert head is not None
    appended = cast("Sequence[Appended]", changes)
    added = [m for change in appended for m in change.messages]
    costs = [c for change in appended for c in change.costs]
    buffer = memory.buffer
    count = len(loaded.messages)
    if (
        len(buffer) != count + len(added)
        or not all(map(operator.is_, buffer, loaded.messages))
        or not all(map(operator.is_, buffer[count:], added))
        or memory.summary != loaded.summary
    ):
        return None
    new = tuple(entry(session_id, m, c) for m, c in zip(added, costs))
    append = LogWrite(head.incarnation, new, counter=head.counter, ttl=ttl) if new else None
    return Plan(append, loaded.seqs, True)


def plan_fold(
    session_id: str, memory: PlannedMemory, loaded: Loaded, changes: Sequence[Change], ttl: Optional[float]
) -> Optional[Plan]:
    """The fold (or append, when nothing left) of a block that added and evicted (``None``: the
    record does not account for what the memory holds)."""
    head = loaded.head
    assert head is not None
    state = _replay(loaded, changes)
    if state is None or not _same(state.slots, memory.buffer):
        return None
    if memory.summary != (loaded.summary if state.summary is None else state.summary):
        return None
    alive = [seq for seq, _, _ in state.slots if seq >= 0]
    new = tuple(entry(session_id, m, c) for seq, m, c in state.slots if seq < 0)
    if not state.evicted:
        append = LogWrite(head.incarnation, new, counter=head.counter, ttl=ttl) if new else None
        return Plan(append, alive, True)
    cut = max(state.removed) + 1 if state.removed else 0
    fold = LogWrite(
        head.incarnation,
        new,
        expected_revision=head.revision,
        expected_tail=head.tail if state.removed_new else None,
        summary=None if state.summary is None else stored_summary(state.summary),
        cut=cut,
        keep=tuple(seq for seq in alive if seq < cut),
        counter=head.counter,
        ttl=ttl,
    )
    fallback = None
    if added_only(changes):
        added = tuple(
            entry(session_id, m, c)
            for change in changes
            if isinstance(change, Appended)
            for m, c in zip(change.messages, change.costs)
        )
        fallback = LogWrite(head.incarnation, added, counter=head.counter, ttl=ttl)
    return Plan(fold, alive, True, fallback, state.removed, state.removed_new)


def plan_rewrite(
    session_id: str,
    memory: PlannedMemory,
    loaded: Loaded,
    identity: Optional[str],
    ttl: Optional[float],
    redoable: bool,
) -> Plan:
    """The whole state of the memory: a create when nothing was loaded, else a rewrite."""
    head = loaded.head
    entries = tuple(entry(session_id, m, c) for m, c in zip(memory.buffer, memory.costs()))
    summary = stored_summary(memory.summary)
    if head is None:
        write = LogWrite("", entries, summary=summary, counter=identity, create=True, ttl=ttl)
    else:
        write = LogWrite(
            head.incarnation,
            entries,
            expected_revision=head.revision,
            expected_tail=head.tail,
            summary=summary,
            replace=True,
            counter=identity,
            ttl=ttl,
        )
    return Plan(write, [], redoable)


def plan_write(
    session_id: str,
    memory: PlannedMemory,
    loaded: Loaded,
    changes: Sequence[Change],
    identity: Optional[str],
    ttl: Optional[float],
) -> Plan:
    """The smallest write that stores what ``memory`` now holds. ``identity`` is the memory's
    counter identity; a plan is redoable unless the block assigned, restored or edited in place."""
    head = loaded.head
    buffer = memory.buffer
    if (
        head is not None
        and memory.summary == loaded.summary
        and len(buffer) == len(loaded.messages)
        and all(map(operator.is_, buffer, loaded.messages))
    ):
        return Plan(None, loaded.seqs, True)  # what the block did left nothing changed
    if head is not None and head.counter == identity and not any(isinstance(c, RARE) for c in changes):
        kind: Callable[..., Optional[Plan]]
        kind = plan_append if all(type(c) is Appended for c in changes) else plan_fold
        plan = kind(session_id, memory, loaded, changes, ttl)
        if plan is not None:
            return plan
        return plan_rewrite(session_id, memory, loaded, identity, ttl, False)  # edited in place
    redoable = not any(isinstance(c, ASSIGNMENTS) for c in changes) and explains(
        loaded, changes, memory.summary, buffer
    )
    return plan_rewrite(session_id, memory, loaded, identity, ttl, redoable)


def rebase_fold(plan: Plan, loaded: Loaded, latest: Head, seqs: Sequence[int]) -> Optional[LogWrite]:
    """The lost fold of ``plan`` aimed at the ``latest`` head (with these live sequence numbers),
    when its cut is still valid there: same incarnation, summary and counter, and every entry it
    removes still live (so only appends, or folds that took other entries, came between).
    Entries others appended meanwhile stay after the summary: their turns ran concurrently with
    this block, so ordering this block's messages first is one valid order of the two. ``None``
    when the cut is no longer valid."""
    fold, head = plan.change, loaded.head
    if fold is None or head is None or fold.expected_revision is None:
        return None
    if (latest.incarnation, latest.summary, latest.counter) != (head.incarnation, head.summary, head.counter):
        return None
    if not set(seqs).issuperset(plan.removed):
        return None
    removed = set(plan.removed)
    keep = tuple(seq for seq in seqs if seq < fold.cut and seq not in removed)
    tail = latest.tail if plan.removed_new else None
    return replace(fold, expected_revision=latest.revision, expected_tail=tail, keep=keep)

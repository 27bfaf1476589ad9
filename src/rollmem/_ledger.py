"""The pure bookkeeping of a buffer: costs, unit spans and eviction plans.

A *unit* is the smallest run of messages that may leave the buffer: a message with tool calls
and everything up to the last result answering one of them, or any other message alone.
Units, running totals and the index of eviction anchors are kept incrementally, so an append
is O(1) amortized and a plan or commit costs O(units it evicts or steps over). A buffer taken
whole (a load, a resync) gets its units at the first plan that needs them: until then it costs
two list copies and a sum.

Positions are *absolute*: the message at list index ``i`` has absolute index ``offset + i``.
Eviction removes units from the front (pinned units stay, moved up in front of the rest), so
the absolute indices of everything after the cut never change.

Lean by design (a server keeps thousands of buffers): per message, one slot in three lists
(the buffer, the ledger's copy of it, the costs); per unit, one machine integer (its start:
units are contiguous, so a unit ends where the next begins) and one byte (whether it holds a
pinned message); a unit's cost is summed from its messages' when a plan needs it.

No locks, no callbacks, no asyncio: the memory classes drive this.
"""

from __future__ import annotations

import operator
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import Any, Callable, Optional

from .message import Message

__all__ = ["COST_LIMIT", "Ledger", "Plan", "TrackedList", "check_message", "checked_messages"]

COST_LIMIT = 2**63
"""Every message cost is an ``int`` in ``range(COST_LIMIT)``: a store keeps it as a signed 64-bit
integer (the memory refuses a counter's result, or a restored cost, outside it)."""

_REPLY_ROLES = frozenset(("assistant", "tool"))


class TrackedList(list):  # type: ignore[type-arg]
    """A ``list`` that counts the changes made to it through its own methods.

    The ledger edits it through ``list``'s unbound methods, which do not count; anything else
    (a caller mutating ``memory.buffer`` in place) bumps ``changes`` and makes the ledger resync.
    What such a change would put in the list is checked first: anything but a ``Message``
    raises ``TypeError`` naming its position, and the list is left as it was.

    Sorting and reversing, which add nothing, are counted too.
    """

    changes = 0

    def append(self, message: Any) -> None:
        check_message(message, len(self))
        self.changes += 1
        list.append(self, message)

    def insert(self, index: Any, message: Any) -> None:
        size = len(self)
        position = operator.index(index)
        check_message(message, min(max(position + size if position < 0 else position, 0), size))
        self.changes += 1
        list.insert(self, index, message)

    def extend(self, messages: Iterable[Any]) -> None:
        taken = checked_messages(messages, len(self))
        self.changes += 1
        list.extend(self, taken)

    def __iadd__(self, messages: Iterable[Any]) -> TrackedList:  # type: ignore[misc]
        self.extend(messages)
        return self

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(key, slice):
            start, _, step = key.indices(len(self))
            value = checked_messages(value, start, step)
        else:
            position = operator.index(key)
            check_message(value, position + len(self) if position < 0 else position)
        self.changes += 1
        list.__setitem__(self, key, value)


def check_message(message: object, index: int) -> None:
    """Raise ``TypeError`` naming ``buffer[index]`` unless ``message`` is a ``Message``."""
    if not isinstance(message, Message):
        raise TypeError(f"buffer[{index}]: expected Message, got {type(message).__name__}")


def checked_messages(messages: Iterable[Any], first: int = 0, step: int = 1) -> list[Any]:
    """``messages`` as a list, each checked (:func:`check_message`) as landing at ``first``,
    ``first + step``..."""
    taken = list(messages)
    for number, message in enumerate(taken):
        check_message(message, first + number * step)
    return taken


def _counting(name: str) -> Callable[..., Any]:
    method = getattr(list, name)

    def mutate(self: TrackedList, *args: Any, **kwargs: Any) -> Any:
        self.changes += 1
        return method(self, *args, **kwargs)

    mutate.__name__ = name
    return mutate


for _name in ("__delitem__", "__imul__", "pop", "remove", "clear", "sort", "reverse"):
    setattr(TrackedList, _name, _counting(_name))


class Plan:
    """Which leading units to cut; the non-pinned ones among them leave the buffer: ``messages``,
    at the buffer positions ``taken`` (``None``: the first ``len(messages)``)."""

    __slots__ = ("cost", "epoch", "messages", "taken", "units")

    def __init__(
        self, units: int, messages: list[Message], cost: int, epoch: int, taken: Optional[list[int]] = None
    ) -> None:
        self.units = units
        self.messages = messages
        self.cost = cost
        self.epoch = epoch
        self.taken = taken

    @property
    def positions(self) -> Sequence[int]:
        """The buffer positions (when planned) of the messages that leave."""
        return range(len(self.messages)) if self.taken is None else self.taken


Measure = Callable[[Message, int], int]
"""Counts the message found at a buffer position (used when resyncing)."""


class Ledger:
    """Costs, units and eviction plans for one buffer (the :class:`TrackedList` in ``items``)."""

    def __init__(self) -> None:
        self.items = TrackedList()
        self._seen = 0  # items.changes when the ledger last matched items
        self._stale = False  # items was replaced wholesale
        self._shadow: list[Message] = []  # what the ledger believes items holds
        self._costs: list[int] = []
        self._starts = array("q")  # absolute index of each unit's head message, ascending
        self._flags = bytearray()  # per unit: 1 if it holds a pinned message
        self._anchors = array("q")  # starts of non-pinned units whose head is not a reply
        self._calls: dict[str, list[int]] = {}  # tool call id -> absolute indices of its callers
        self._offset = 0
        self._guard = -1  # absolute stop of the plan in flight (-1: none)
        self._pending = 0  # messages taken but not yet in units, anchors and calls (see _expand)
        self._pinned = 0
        self.total = 0
        self.epoch = 0  # bumped by every change but an append

    # -- keeping up with the buffer ---------------------------------------------------------

    @property
    def in_flight(self) -> bool:
        """Whether a plan was made and is neither committed nor aborted yet."""
        return self._guard >= 0

    @property
    def pinned(self) -> int:
        """The number of pinned messages."""
        self._expand()
        return self._pinned

    @property
    def dirty(self) -> bool:
        """Whether ``items`` changed behind the ledger's back."""
        return self._stale or self.items.changes != self._seen

    def replace(self, messages: Iterable[Message]) -> None:
        """Take a new list as the buffer; it is checked and counted at the next :meth:`sync`."""
        self.items = TrackedList(messages)
        self._stale = True

    def load(self, messages: list[Message], costs: list[int]) -> None:
        """Take ``messages`` (all ``Message``) with their known costs as the whole buffer."""
        self.items = TrackedList(messages)
        self._rebuild(messages, costs)

    def sync(self, measure: Measure) -> None:
        """Catch up with changes made to ``items`` directly, counting only messages not seen before.

        On error (a non-message in the list, a failing counter) the ledger is left as it was.
        """
        if not self.dirty:
            return
        known = {id(message): cost for message, cost in zip(self._shadow, self._costs)}
        items = self.items
        costs = []
        for index, message in enumerate(items):
            check_message(message, index)
            cost = known.get(id(message))
            costs.append(measure(message, index) if cost is None else cost)
        self._rebuild(list(items), costs)

    def _rebuild(self, messages: list[Message], costs: list[int]) -> None:
        self.items.changes = self._seen = 0
        self._stale = False
        self._starts = array("q")
        self._flags = bytearray()
        self._anchors = array("q")
        self._calls.clear()
        self._offset = 0
        self._guard = -1
        self._pinned = 0
        self.epoch += 1
        # Units, anchors and calls wait until a plan needs them (_expand): a turn that loads a
        # session from a store, reads it and appends pays per stored message only these copies.
        self._shadow = list(messages)
        self._costs = list(costs)
        self._pending = len(messages)
        self.total = sum(costs)

    def _expand(self) -> None:
        """Put the pending messages into units, anchors and calls."""
        if self._pending:
            messages, costs = self._shadow, self._costs
            self._shadow, self._costs = [], []
            self._pending = self.total = 0
            for message, cost in zip(messages, costs):
                self._push(message, cost)

    def spans(self) -> list[tuple[int, int]]:
        """The units as ``(start, stop)`` list positions, oldest first."""
        self._expand()
        offset = self._offset
        return [(start - offset, self._stop(unit) - offset) for unit, start in enumerate(self._starts)]

    def costs(self) -> list[int]:
        """The cost of each message, aligned with ``items`` when the ledger is not :attr:`dirty`."""
        return list(self._costs)

    def clear(self) -> None:
        """Forget everything (the buffer list is emptied in place)."""
        list.clear(self.items)
        self._rebuild([], [])

    def append(self, message: Message, cost: int) -> None:
        """Add one counted message at the end of the buffer."""
        list.append(self.items, message)
        self._push(message, cost)

    def set_at(self, position: int, message: Message) -> None:
        """Swap the message at ``position`` for one with the same token text (a pin change)."""
        list.__setitem__(self.items, position, message)
        shadow = self._shadow
        shadow[position] = message
        self._rebuild(list(shadow), list(self._costs))

    def _push(self, message: Message, cost: int) -> None:
        if self._pending:  # still lazy: stay so
            self._shadow.append(message)
            self._costs.append(cost)
            self.total += cost
            self._pending += 1
            return
        shadow = self._shadow
        index = self._offset + len(shadow)
        shadow.append(message)
        self._costs.append(cost)
        self.total += cost
        pinned = 1 if message.pinned else 0
        self._pinned += pinned
        starts = self._starts
        flags = self._flags
        call_id = message.tool_call_id
        callers = None if call_id is None else self._calls.get(call_id)
        if callers:
            # A result: one unit from its earliest caller's unit to here, everything between merged.
            first = callers[0]
            while starts[-1] > first:
                starts.pop()
                pinned |= flags.pop()
            if pinned:
                flags[-1] = 1
            start = starts[-1]
            anchors = self._anchors
            while anchors and anchors[-1] > start:
                anchors.pop()
            if flags[-1] and anchors and anchors[-1] == start:
                anchors.pop()
            if start < self._guard:
                self.epoch += 1  # reached into the region a plan in flight will cut
        else:
            starts.append(index)
            flags.append(pinned)
            if not pinned and call_id is None and message.role not in _REPLY_ROLES:
                self._anchors.append(index)
        if message.tool_calls:
            calls = self._calls
            for call in message.tool_calls:
                calls.setdefault(call.id, []).append(index)

    # -- planning ---------------------------------------------------------------------------

    def plan_budget(self, limit: int, goal: int) -> Optional[Plan]:
        """When the total is over ``limit``: cut whole non-pinned units, oldest first, until the
        total is at most ``goal``, never the newest unit; then align the cut so the first kept
        non-pinned unit does not start with a reply, if such a unit exists up to the newest."""
        if self.total <= limit:
            return None
        self._expand()
        starts, flags, costs, offset = self._starts, self._flags, self._costs, self._offset
        remaining = self.total
        count = 0
        for seen in range(len(starts) - 1):  # never the newest unit
            if remaining <= goal:
                break
            if not flags[seen]:
                head, stop = starts[seen] - offset, starts[seen + 1] - offset
                remaining -= costs[head] if stop - head == 1 else sum(costs[head:stop])
                count = seen + 1
        if count == 0:
            return None
        anchors = self._anchors
        first = bisect_left(anchors, starts[count])  # the first anchor at or after the cut
        if first < len(anchors):
            anchor = anchors[first]
            while starts[count] < anchor:
                count += 1
        return self._plan(count)

    def plan_keep_last(self, keep_last: int) -> Optional[Plan]:
        """Cut every non-pinned unit before the one holding the ``keep_last``-th newest message."""
        self._expand()
        end = self._offset + len(self._shadow)
        boundary = end - max(keep_last, 0)
        starts = self._starts
        # The units that end at or before the boundary: all, or those followed by a unit that
        # starts there or before.
        count = len(starts) if boundary >= end else max(bisect_right(starts, boundary) - 1, 0)
        return self._plan(count)

    def _stop(self, unit: int) -> int:
        """The absolute index one past the last message of the ``unit``-th unit."""
        starts = self._starts
        return starts[unit + 1] if unit + 1 < len(starts) else self._offset + len(self._shadow)

    def _plan(self, count: int) -> Optional[Plan]:
        if count == 0:
            return None
        stop = self._stop(count - 1)
        offset = self._offset
        head = stop - offset
        taken: Optional[list[int]] = None
        if not self._pinned:  # the common case: the cut is a plain prefix
            messages = self._shadow[:head]
            cost = sum(self._costs[:head])
        else:
            shadow, costs, starts, flags = self._shadow, self._costs, self._starts, self._flags
            messages, taken = [], []
            cost = 0
            for position in range(count):
                if not flags[position]:
                    first, last = starts[position] - offset, self._stop(position) - offset
                    messages.extend(shadow[first:last])
                    taken.extend(range(first, last))
                    cost += sum(costs[first:last])
            if not messages:
                return None
        self._guard = stop
        return Plan(count, messages, cost, self.epoch, taken)

    def abort(self, plan: Plan) -> None:
        """Forget a plan that will not be committed."""
        self._guard = -1

    def commit(self, plan: Plan) -> bool:
        """Remove the planned messages; ``False`` (and no change) if the buffer changed since the
        plan in a way other than appends that leave the planned units alone."""
        self._guard = -1
        if plan.epoch != self.epoch or self.dirty:
            return False
        starts, flags, count = self._starts, self._flags, plan.units
        offset = self._offset
        stop = self._stop(count - 1)
        head = stop - offset
        shadow = self._shadow
        cut_messages = plan.messages if not self._pinned or not self._calls else shadow[:head]
        if not self._pinned:  # the common case: the cut is a plain prefix
            del starts[:count]
            del flags[:count]
            moved: dict[int, int] = {}
            new_offset = stop
            del self._costs[:head]
            del shadow[:head]
            list.__delitem__(self.items, slice(0, head))
        else:
            kept = [(starts[unit], self._stop(unit)) for unit in range(count) if flags[unit]]
            new_offset = stop - sum(last - first for first, last in kept)
            positions: list[int] = []
            new_starts = array("q")
            for first, last in kept:  # the pinned units move up, in order, to end at the cut
                new_starts.append(new_offset + len(positions))
                positions.extend(range(first - offset, last - offset))
            starts[:count] = new_starts
            flags[:count] = bytes([1]) * len(kept)
            moved = {offset + p: new_offset + i for i, p in enumerate(positions)}
            kept_messages = [shadow[p] for p in positions]
            self._costs[:head] = [self._costs[p] for p in positions]
            shadow[:head] = kept_messages
            list.__setitem__(self.items, slice(0, head), kept_messages)
        if self._calls:
            self._renumber_calls(cut_messages, stop, moved)
        anchors = self._anchors
        del anchors[: bisect_left(anchors, stop)]
        self._offset = new_offset
        self.total -= plan.cost
        self.epoch += 1
        return True

    def _renumber_calls(self, cut: list[Message], stop: int, moved: dict[int, int]) -> None:
        """Drop the callers that left (absolute index below ``stop``) and renumber the pinned ones
        that ``moved``."""
        for call_id in {call.id for message in cut for call in message.tool_calls}:
            callers = self._calls[call_id]
            kept = [moved[index] for index in callers if index in moved]
            kept.extend(index for index in callers if index >= stop)
            if kept:
                self._calls[call_id] = kept
            else:
                del self._calls[call_id]

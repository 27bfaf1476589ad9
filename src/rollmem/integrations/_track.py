"""One conversation's live track (private to :mod:`rollmem.integrations`): each native (a framework's
message object) has one unit in the buffer, converted and counted once; a replaced native is compared,
its unit replaced if changed; what folds is converted afresh; calls without results stay pinned."""

from __future__ import annotations

import operator
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, ClassVar, Generic, TypeVar

from .._flow import Flow, arun, run
from ..counters import trusted_costs
from ..message import ASSISTANT, Message
from ._engine import Configured, new_memory
from ._state import Keys, State

N = TypeVar("N")


class Spec(Generic[N]):
    """What an integration tells the engine about its framework's natives."""

    recent: ClassVar[int] = 1
    """How many keys of folded natives the state keeps (a history cut short is matched on them)."""

    def units(self, natives: Sequence[N], track: Track[N]) -> list[Message]:
        """One unit message per native, in order (``track.context``: the conversion's own state)."""
        raise NotImplementedError

    def messages(self, natives: Sequence[N]) -> list[Message]:
        """``natives`` converted for the summarizer, afresh."""
        raise NotImplementedError

    def key(self, native: N) -> str:
        """What identifies a native in the state (an id, or a fingerprint of its content)."""
        raise NotImplementedError

    def same(self, old: N, new: N) -> bool:
        """Whether ``new``, another object at the place of ``old``, says the same."""
        return bool(old == new)

    def current(self, track: Track[N], slot: int) -> N:
        """``track.natives[slot]`` as the framework holds it now (to summarize)."""
        return track.natives[slot]


class Track(Generic[N]):
    """One conversation's live memory: ``memory.buffer[i]`` is the unit of ``natives[i]``, seen at
    ``index[i]`` of the framework's history; the first ``kept`` are pinned natives before the
    contiguous tail. ``context`` is the integration's own per-conversation state."""

    def __init__(self, owner: Configured, spec: Spec[N], asynchronous: bool) -> None:
        self.owner, self.spec = owner, spec
        self.natives, self.units, self.index = list[N](), list[Message](), list[int]()
        self.kept = self.count = 0  # count: the history's length when last seen
        self.written: Any = None  # the state this track last gave the framework
        self.context: Any = None
        self.folded: list[tuple[int, N]] = []  # (position, native) of what the last add folded
        self.pending: dict[str, str] = {}  # open call id -> id of the pinned unit holding it
        self.memory: Any = new_memory(owner, self._resolve, self._evicted, asynchronous=asynchronous)

    @property
    def start(self) -> int:
        """Where the contiguous tail starts in the history."""
        return self.index[self.kept] if self.kept < len(self.index) else self.count

    def _slots(self, evicted: Sequence[Message]) -> list[int]:
        """Where the evicted units are (the leading ones but pinned units, which stay in front)."""
        slots: list[int] = []
        for slot, unit in enumerate(self.units):
            if len(slots) == len(evicted):
                break
            if unit is evicted[len(slots)]:
                slots.append(slot)
        return slots

    def _resolve(self, evicted: Sequence[Message]) -> list[Message]:
        return self.spec.messages([self.spec.current(self, slot) for slot in self._slots(evicted)])

    def _evicted(self, evicted: Sequence[Message]) -> None:
        """The memory's ``on_evict``: the evicted units leave ``units``, ``natives`` and ``index``."""
        slots = self._slots(evicted)
        cut = slots[-1] + 1 if slots else 0
        stays = sorted(set(range(cut)).difference(slots))
        self.folded += [(self.index[slot], self.natives[slot]) for slot in slots]
        lists: tuple[list[Any], ...] = (self.units, self.natives, self.index)
        for items in lists:
            items[:cut] = [items[i] for i in stays]
        self.kept = len(stays) + max(self.kept - cut, 0)

    def _pin_pending(self, units: list[Message]) -> list[Message]:
        """Pin the new units whose calls get no result here, unpin the ones answered now."""
        answered = {unit.tool_call_id for unit in units if unit.tool_call_id is not None}
        done = {self.pending.pop(call_id) for call_id in answered & self.pending.keys()}
        for pin in done:
            self.memory.unpin(pin)
            self.units = list(self.memory.buffer)
            self.pending = {call: other for call, other in self.pending.items() if other != pin}
        for position, unit in enumerate(units):
            ids = [call.id for call in unit.tool_calls]
            if ids and unit.role == ASSISTANT and not answered.intersection(ids):
                pin = unit.id or f"rollmem-pending:{ids[0]}"
                units[position] = replace(unit, id=pin, pinned=True)
                self.pending.update(dict.fromkeys(ids, pin))
        return units

    def _add_flow(self, history: Sequence[N], positions: Sequence[int]) -> Flow[list[Message], Any]:
        self.folded, self.count = [], len(history)
        if not positions:
            return self.folded
        natives = [history[i] for i in positions]
        units = self._pin_pending(self.spec.units(natives, self))
        size = len(self.units)
        self.natives += natives
        self.units += units
        self.index += positions
        try:
            yield units
        except BaseException:
            buffer = self.memory.buffer
            if not buffer or buffer[-1] is not units[-1]:  # not appended (a counter error)
                del self.natives[size:], self.units[size:], self.index[size:]
            raise
        return self.folded

    def add(self, history: Sequence[N], positions: Sequence[int]) -> list[tuple[int, N]]:
        """Add the natives at ``positions`` of ``history`` and fold what the budget says; returns
        the ``(position, native)`` pairs folded (a sync memory)."""
        return run(self._add_flow(history, positions), self.memory.extend)

    async def aadd(self, history: Sequence[N], positions: Sequence[int]) -> list[tuple[int, N]]:
        """:meth:`add` with an async memory."""
        return await arun(self._add_flow(history, positions), self.memory.extend)

    def new(self, history: Sequence[N]) -> list[int]:
        """The positions of ``history`` after the ones seen."""
        return list(range(self.count, len(history)))

    def forget(self, positions: Iterable[int]) -> None:
        """The (folded) natives at ``positions`` were removed from the history."""
        gone = sorted(positions)
        self.index = [i - bisect_right(gone, i) for i in self.index]
        self.count -= len(gone)

    def insert(self, position: int, natives: Sequence[N], shift: int) -> None:
        """``natives`` appeared at ``position`` (a response posted back to an earlier call), those
        from there on moving up by ``shift``: they join the buffer in history order (counted,
        and the budget applied, at the next add)."""
        units = self._pin_pending(self.spec.units(natives, self))
        slot = bisect_right(self.index, position - 1)
        self.kept += len(natives) if slot <= self.kept else 0
        self.index[slot:] = [i + shift for i in self.index[slot:]]
        self.count += shift
        self.natives[slot:slot] = natives
        self.units[slot:slot] = units
        self.index[slot:slot] = range(position, position + len(natives))
        self.memory.buffer[slot:slot] = units

    def replace(self, position: int, native: N) -> None:
        """The unfolded native at ``position`` is now ``native`` (an edit): its unit is replaced
        (counted at the next add)."""
        slot = self.index.index(position)
        unit, old = self.spec.units([native], self)[0], self.units[slot]
        self.natives[slot] = native
        self.units[slot] = self.memory.buffer[slot] = replace(unit, id=old.id, pinned=old.pinned)

    def follows(self, history: Sequence[N]) -> bool:
        """Whether ``history`` holds the natives seen last time where they were, plus new ones at
        the end. Each is the same object, or another one saying the same (taken instead), or an
        edit (its unit replaced)."""
        natives, count = self.natives, self.count
        if not natives or count > len(history):
            return not natives and count == 0
        last = history[count - 1]
        if last is not natives[-1] and not self.spec.same(natives[-1], last):
            return False
        if all(map(operator.is_, history[self.start : count], natives[self.kept :])) and all(
            history[self.index[i]] is natives[i] for i in range(self.kept)
        ):
            return True
        current = [history[i] for i in self.index]
        for slot, old in enumerate(natives):
            if current[slot] is not old and not self.spec.same(old, current[slot]):
                self.replace(self.index[slot], current[slot])
        self.natives = current
        return True

    def restore(
        self, history: Sequence[N], state: State, start: int, pinned: list[int], trusted: bool
    ) -> list[int]:
        """Take ``state`` for a history whose tail starts at ``start`` (``pinned``: the positions of
        the pinned natives before it). With ``trusted`` positions, the natives with stored costs
        measured by this counter go into the memory uncounted; returns the positions to :meth:`add`."""
        positions = [*pinned, *range(start, len(history))]
        costs = (trusted and trusted_costs(self.owner._identity, state.counter, state.costs)) or []
        known = len(costs) if len(costs) <= len(positions) and len(pinned) == len(state.pinned) else 0
        natives = [history[i] for i in positions[:known]]
        units = self._pin_pending(self.spec.units(natives, self))
        self.memory.restore({"version": 2, "summary": state.summary, "buffer": units}, costs=costs[:known])
        self.natives, self.units, self.index = natives, list(self.memory.buffer), positions[:known]
        self.kept = min(len(pinned), known)
        self.count = positions[known] if known < len(positions) else len(history)
        return positions[known:]

    def state(self, keys: Keys) -> dict[str, Any]:
        """The state to keep in the framework (after a fold): JSON-ready, versioned."""
        start = self.start
        return {
            "version": 1,
            "summary": self.memory.summary,
            "folded": start,
            "recent": [keys(i) for i in range(max(start - self.spec.recent, 0), start)],
            "first": keys(start),
            "pinned": [[self.index[i], keys(self.index[i])] for i in range(self.kept)],
            "counter": self.owner._identity,
            "costs": self.memory.costs(),
        }

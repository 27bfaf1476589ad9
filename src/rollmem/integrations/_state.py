"""The state an integration keeps in its framework (private): one versioned format, written at
folds only (``Track.state``), not growing with the buffer; :func:`locate` finds the tail it
describes in a history; :func:`take_units` matches a history against a buffer kept in a store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional

from .. import _validate as v
from ..changes import Dropped, Folded
from ..errors import InvalidStateError, StateTypeError
from ..message import Message


class State:
    """A state read back (see :func:`read_state`)."""

    __slots__ = ("costs", "counter", "first", "folded", "pinned", "recent", "summary")

    def __init__(self, summary: str = "") -> None:
        self.summary, self.folded = summary, 0
        self.recent: list[str] = []  # keys of the natives just before the tail, oldest first
        self.first: Optional[str] = None  # key of the tail's first native
        self.pinned: list[tuple[int, str]] = []  # (position, key) of unfolded natives before the tail
        self.counter: Optional[str] = None  # the identity of the counter that measured costs
        self.costs: list[int] = []  # one per unfolded native, pinned ones first


def _items(data: Any, name: str, path: str, ok: Callable[[Any], bool], expected: str) -> list[Any]:
    items = v.get_list(data, name, path, default=[])
    for index, item in enumerate(items):
        if not ok(item):
            raise StateTypeError(v.join(v.join(path, name), index), f"expected {expected}, got {item!r}")
    return items


def read_state(data: object, path: str) -> State:
    """A state written by ``Track.state`` (``None``: a new one); errors name ``path.field``."""
    if data is None:
        return State()
    data = v.expect_mapping(data, path)
    version = v.get_int(data, "version", path)
    if version != 1:
        raise InvalidStateError(
            v.join(path, "version"), f"unsupported state version {version}; this rollmem reads version 1"
        )
    state = State(v.check_text(v.get_str(data, "summary", path), v.join(path, "summary")))
    state.folded = v.check_int(v.join(path, "folded"), data.get("folded", 0), 0)
    state.recent = _items(data, "recent", path, lambda key: isinstance(key, str), "str")
    state.first = v.get_optional_str(data, "first", path)
    state.counter = v.get_optional_str(data, "counter", path)
    pair = lambda x: isinstance(x, list) and len(x) == 2 and v.is_int(x[0]) and isinstance(x[1], str)  # noqa: E731
    state.pinned = [(position, key) for position, key in _items(data, "pinned", path, pair, "[int, str]")]
    state.costs = _items(data, "costs", path, lambda cost: v.is_int(cost) and cost >= 0, "an int >= 0")
    return state


class Keys:
    """The keys of a history's natives, computed on demand and once each (by position)."""

    def __init__(self, history: Sequence[Any], key: Callable[[Any], str]) -> None:
        self.history, self.key, self.cache = history, key, dict[int, str]()

    def __call__(self, index: int) -> Optional[str]:
        found = self.cache.get(index)
        if found is None and 0 <= index < len(self.history):
            found = self.cache[index] = self.key(self.history[index])
        return found

    def find(self, key: Optional[str], stop: int) -> int:
        """The last position before ``stop`` holding ``key``; -1."""
        for index in range(min(stop, len(self.history)) - 1, -1, -1) if key is not None else ():
            if self(index) == key:
                return index
        return -1

    def insert(self, position: int, natives: Sequence[Any]) -> None:
        """``natives`` were inserted at ``position``: the keys after it move up."""
        self.cache = {i + len(natives) if i >= position else i: key for i, key in self.cache.items()}
        self.history = [*self.history[:position], *natives, *self.history[position:]]


def locate(state: State, keys: Keys, fallback: Optional[int] = None) -> tuple[Optional[int], list[int], str]:
    """Where the unfolded tail starts, the pinned natives before it, and how it was found:
    ``"exact"`` (where the state says), ``"first"`` (its first native elsewhere), ``"anchor"``
    (after the last folded native), ``"prefix"`` (after the newest recent one still in place: a
    history cut), or ``fallback`` and ``"lost"``."""
    at, recent, size = state.folded, state.recent, len(keys.history)
    start: Optional[int]
    if not recent and state.first is None:
        start, how = min(at, size), "exact"
    elif keys(at) == state.first if state.first is not None else keys(at - 1) == recent[-1]:
        start, how = at, "exact"
    elif keys.find(state.first, size) >= 0:
        start, how = keys.find(state.first, size), "first"
    elif keys.find(recent[-1] if recent else None, size) >= 0:
        start, how = keys.find(recent[-1], size) + 1, "anchor"
    else:  # the newest of the recent natives still where it was
        base = at - len(recent)
        found = (i + 1 for i in range(min(size, at) - 1, max(base, 0) - 1, -1) if keys(i) == recent[i - base])
        start = next(found, None)
        start, how = (fallback, "lost") if start is None else (start, "prefix")
    pinned: list[int] = []
    for position, key in state.pinned:  # where the state says, else the last one with that key
        index = position if position < (start or 0) and keys(position) == key else keys.find(key, start or 0)
        if index >= 0 and index not in pinned:
            pinned.append(index)
    return start, sorted(pinned), how


async def take_units(
    memory: Any, units: list[Message], summaries: list[str], expect: Any
) -> Optional[tuple[str, list[int], bool]]:
    """Take a history's ``units`` (ids: content fingerprints) into a stored async ``memory``. With
    ``expect`` (the summary, size and last id of the buffer they continue; ``None`` when it moved)
    the new ones are added; else the unfolded ones are the pinned ones and those from the first
    stored one on, unknown ones among them new or edited. Returns the summary, the positions kept,
    and whether the history to send changed (a fold, units left out, another summary)."""
    buffer, size = memory.buffer, len(memory.buffer)
    if expect is not None:
        if (memory.summary, size, buffer[-1].id if buffer else None) != expect:
            return None
        chosen, taken = list(range(len(units))), [*buffer, *units[size:]]
    else:
        if not buffer and not memory.summary and summaries:
            memory.summary = summaries[-1]
        stored, present = {m.id: m for m in buffer}, {u.id for u in units}
        unpinned = [m.id for m in buffer if not m.pinned]
        missing = next((i for i, ident in enumerate(unpinned) if ident in present), len(unpinned))  # edits
        start = next((i for i, u in enumerate(units) if u.id in stored and not u.pinned), len(units))
        start = start if unpinned else 0
        while missing and start and units[start - 1].id not in stored and not units[start - 1].pinned:
            start, missing = start - 1, missing - 1
        chosen = [i for i, u in enumerate(units) if u.pinned or i >= start]
        taken = [stored.get(units[i].id, units[i]) for i in chosen]
    with memory.record() as changes:
        if expect is not None or [m.id for m in taken[:size]] == [m.id for m in buffer]:
            await memory.extend(taken[size:])
        else:  # edited, inserted or dropped units: the buffer in history order (new ones counted)
            memory.buffer = taken[:-1]
            await memory.extend(taken[-1:])
    pins, rest = [i for i in chosen if units[i].pinned], [i for i in chosen if not units[i].pinned]
    kept = sorted(pins + rest[len(rest) - len(memory.buffer) + len(pins) :])  # folds take the oldest
    folded = any(isinstance(change, (Folded, Dropped)) for change in changes)
    other = expect is None and summaries != ([memory.summary] if memory.summary else [])
    return memory.summary, kept, folded or other or len(chosen) != len(units)

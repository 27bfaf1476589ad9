"""Units, the budget cut, alignment, the newest-unit rule, target and pins, on hand-made buffers.

Each message's cost is the integer its content starts with; its id is its name. Cases are chosen so
that a wrong reading of the rules (spans not merged, span ending at the first result, no alignment,
pinned units not transparent...) gives a different result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import pytest

from rollmem import RollingMemory, SummaryMemory, WindowMemory
from rollmem.message import Message, ToolCall


def msg(
    name: str,
    cost: int = 1,
    role: str = "user",
    *,
    calls: Sequence[str] = (),
    answers: Optional[str] = None,
    pinned: bool = False,
) -> Message:
    """A message named ``name`` costing ``cost`` tokens (under :func:`cost`)."""
    return Message(
        role,
        f"{cost} {name}",
        id=name,
        tool_calls=tuple(ToolCall(c, "f") for c in calls),
        tool_call_id=answers,
        pinned=pinned,
    )


def cost(text: str) -> int:
    return int(text.split()[0])


def u(name: str, c: int = 1, **kw: Any) -> Message:
    return msg(name, c, "user", **kw)


def a(name: str, c: int = 1, **kw: Any) -> Message:
    return msg(name, c, "assistant", **kw)


def t(name: str, c: int = 1, answers: str = "c1", **kw: Any) -> Message:
    return msg(name, c, "tool", answers=answers, **kw)


def state(buffer: Sequence[Message], summary: str = "") -> dict[str, Any]:
    return {"version": 2, "summary": summary, "buffer": [m.to_dict() for m in buffer]}


def ids(messages: Sequence[Message]) -> list[str]:
    return [str(m.id) for m in messages]


class Folds:
    """A summarizer recording the batches it folded."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def __call__(self, summary: str, messages: Sequence[Message]) -> str:
        self.batches.append(ids(messages))
        return summary + "".join(f"<{m.id}>" for m in messages)


def add(mem: Any, m: Message) -> None:
    mem.add_message(
        m.role, m.content, id=m.id, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, pinned=m.pinned
    )


CASES = [
    # id, loaded buffer, added message, max_tokens, target_tokens, evicted, kept
    (
        "within budget: untouched even when led by a response",
        [a("a1"), u("u1")],
        u("u2"),
        10,
        None,
        [],
        ["a1", "u1", "u2"],
    ),
    ("oldest unit goes", [u("u0", 4), u("u1", 4)], u("u2", 4), 10, None, ["u0"], ["u1", "u2"]),
    (
        "stops at or under the budget",
        [u("u0", 3), u("u1", 3), u("u2", 3)],
        u("u3", 5),
        8,
        None,
        ["u0", "u1"],
        ["u2", "u3"],
    ),
    (
        "a call unit takes unrelated messages up to its result",
        [a("a1", calls=["c1"]), u("u2"), t("t1", answers="c1"), u("u3")],
        u("u4"),
        4,
        None,
        ["a1", "u2", "t1"],
        ["u3", "u4"],
    ),
    (
        "a call unit reaches its last result",
        [a("a1", calls=["c1", "c2"]), t("t1", answers="c1"), u("u3"), t("t2", answers="c2"), u("u5")],
        u("u6"),
        5,
        None,
        ["a1", "t1", "u3", "t2"],
        ["u5", "u6"],
    ),
    (
        "overlapping spans merge",
        [
            a("a1", calls=["c1"]),
            a("a2", calls=["c2"]),
            t("t1", answers="c1"),
            u("u3"),
            t("t2", answers="c2"),
            u("u5"),
        ],
        u("u6"),
        6,
        None,
        ["a1", "a2", "t1", "u3", "t2"],
        ["u5", "u6"],
    ),
    (
        "a call without result is a unit of one",
        [a("a1", 2, calls=["c1"]), u("u2", 2)],
        u("u3", 2),
        5,
        None,
        ["a1"],
        ["u2", "u3"],
    ),
    (
        "an orphan result is a response-like unit of one",
        [u("u0", 2), t("t9", answers="zz"), u("u1", 2)],
        u("u2"),
        5,
        None,
        ["u0", "t9"],
        ["u1", "u2"],
    ),
    (
        "alignment extends over responses, results and call units",
        [u("u0", 5), a("a1"), t("t9", answers="zz"), a("a2", calls=["c1"]), t("t1", answers="c1"), u("u2")],
        a("a3"),
        10,
        None,
        ["u0", "a1", "t9", "a2", "t1"],
        ["u2", "a3"],
    ),
    (
        "any message with a tool_call_id is response-like",
        [u("u0", 3), u("r1", answers="zz"), u("u2")],
        u("u3"),
        5,
        None,
        ["u0", "r1"],
        ["u2", "u3"],
    ),
    (
        "system is not response-like",
        [u("u0", 3), msg("s1", 1, "system"), a("a2")],
        u("u3"),
        5,
        None,
        ["u0"],
        ["s1", "a2", "u3"],
    ),
    (
        "custom roles are not response-like",
        [u("u0", 3), msg("n1", 1, "narrator"), a("a2")],
        u("u3"),
        5,
        None,
        ["u0"],
        ["n1", "a2", "u3"],
    ),
    (
        "every candidate head response-like: the cost cut stands",
        [u("u0", 3), a("a1"), a("a2")],
        a("a3"),
        5,
        None,
        ["u0"],
        ["a1", "a2", "a3"],
    ),
    (
        "alignment may reach the newest unit",
        [u("u0", 3), a("a1"), a("a2")],
        u("u3"),
        5,
        None,
        ["u0", "a1", "a2"],
        ["u3"],
    ),
    (
        "the newest unit stays alone over budget",
        [u("u0"), u("u1")],
        u("u2", 10),
        5,
        None,
        ["u0", "u1"],
        ["u2"],
    ),
    (
        "the newest unit includes the call its result answers",
        [u("u0"), a("a1", 10, calls=["c1"])],
        t("t1", answers="c1"),
        5,
        None,
        ["u0"],
        ["a1", "t1"],
    ),
    # target_tokens
    (
        "target: evict down to the target",
        [u("u0", 3), u("u1", 3), u("u2", 3)],
        u("u3", 3),
        10,
        5,
        ["u0", "u1", "u2"],
        ["u3"],
    ),
    (
        "target: nothing while within max",
        [u("u0", 3), u("u1", 3), u("u2", 3)],
        u("u3"),
        10,
        5,
        [],
        ["u0", "u1", "u2", "u3"],
    ),
    (
        "target equal to max is the default",
        [u("u0", 4), u("u1", 4)],
        u("u2", 4),
        10,
        10,
        ["u0"],
        ["u1", "u2"],
    ),
    (
        "target: alignment after the cut",
        [u("u0", 4), a("a1", 4), a("a2"), u("u3")],
        u("u4"),
        10,
        7,
        ["u0", "a1", "a2"],
        ["u3", "u4"],
    ),
    # pins
    (
        "pinned messages stay in place",
        [u("p0", 3, pinned=True), u("u1", 3), a("a2", 3)],
        u("u3", 3),
        10,
        None,
        ["u1", "a2"],
        ["p0", "u3"],
    ),
    (
        "pinned units are transparent to alignment",
        [u("u0", 3), a("p1", 3, pinned=True), a("a2", 3), u("u3", 3)],
        u("u4"),
        12,
        None,
        ["u0", "a2"],
        ["p1", "u3", "u4"],
    ),
    (
        "the cut walks around pinned units",
        [u("u0", 2), u("p1", 2, pinned=True), u("u2", 2), u("u3", 2)],
        u("u4", 2),
        6,
        None,
        ["u0", "u2"],
        ["p1", "u3", "u4"],
    ),
    (
        "pinned alone over budget: all else but the newest unit goes",
        [u("p0", 5, pinned=True), u("p1", 5, pinned=True), u("u2"), u("u3")],
        u("u4"),
        6,
        None,
        ["u2", "u3"],
        ["p0", "p1", "u4"],
    ),
    (
        "a unit holding a pinned message is pinned whole",
        [a("a1", 2, calls=["c1"]), t("t1", 2, answers="c1", pinned=True), u("u2", 2)],
        u("u3", 2),
        6,
        None,
        ["u2"],
        ["a1", "t1", "u3"],
    ),
]


@pytest.mark.parametrize("summarize", [True, False], ids=["summarized", "dropped"])
@pytest.mark.parametrize(
    ("buffer", "new", "max_tokens", "target", "evicted", "kept"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_eviction_after_an_add(
    buffer: list[Message],
    new: Message,
    max_tokens: int,
    target: Optional[int],
    evicted: list[str],
    kept: list[str],
    summarize: bool,
) -> None:
    folds = Folds()
    gone: list[list[str]] = []
    mem = RollingMemory.from_dict(
        state(buffer, "S"),
        max_tokens=max_tokens,
        target_tokens=target,
        summarize_fn=folds if summarize else None,
        token_counter=cost,
        on_evict=lambda ms: gone.append(ids(ms)),
    )
    add(mem, new)
    assert ids(mem.buffer) == kept
    assert gone == ([evicted] if evicted else [])
    assert folds.batches == (gone if summarize else [])
    assert mem.summary == "S" + ("".join(f"<{name}>" for name in evicted) if summarize else "")
    assert [m.pinned for m in mem.buffer] == [m.pinned for m in [*buffer, new] if m.id in kept]


WINDOW_CASES = [
    ("oldest goes", [u("u0"), u("u1"), u("u2")], u("u3"), 3, ["u0"], ["u1", "u2", "u3"]),
    ("alignment", [u("u0"), a("a1"), u("u2")], u("u3"), 3, ["u0", "a1"], ["u2", "u3"]),
    (
        "units",
        [a("a1", calls=["c1"]), t("t1", answers="c1"), u("u2")],
        u("u3"),
        3,
        ["a1", "t1"],
        ["u2", "u3"],
    ),
    ("newest unit stays", [u("u0"), a("a1", calls=["c1"])], t("t1", answers="c1"), 1, ["u0"], ["a1", "t1"]),
    ("pins", [u("p0", pinned=True), u("u1"), u("u2")], u("u3"), 3, ["u1"], ["p0", "u2", "u3"]),
    ("all responses: cut stands", [u("u0"), a("a1"), a("a2")], a("a3"), 3, ["u0"], ["a1", "a2", "a3"]),
]


@pytest.mark.parametrize(
    ("buffer", "new", "max_messages", "evicted", "kept"),
    [case[1:] for case in WINDOW_CASES],
    ids=[case[0] for case in WINDOW_CASES],
)
def test_window_eviction_counts_messages(
    buffer: list[Message], new: Message, max_messages: int, evicted: list[str], kept: list[str]
) -> None:
    gone: list[list[str]] = []
    mem = WindowMemory.from_dict(
        state(buffer), max_messages=max_messages, on_evict=lambda ms: gone.append(ids(ms))
    )
    assert ids(mem.buffer) == ids(buffer)
    add(mem, new)
    assert ids(mem.buffer) == kept
    assert gone == [evicted]


FOLD_CASES = [
    # id, buffer, keep_last, folded, kept
    (
        "keep_last=0 folds all non-pinned, newest included",
        [u("u0"), a("a1"), u("p2", pinned=True), u("u3")],
        0,
        ["u0", "a1", "u3"],
        ["p2"],
    ),
    (
        "rounded out to the unit of the k-th newest message",
        [u("u0"), a("a1", calls=["c1"]), u("u2"), t("t1", answers="c1"), u("u4")],
        2,
        ["u0"],
        ["a1", "u2", "t1", "u4"],
    ),
    ("no alignment", [u("u0"), u("u1"), a("a2"), a("a3")], 2, ["u0", "u1"], ["a2", "a3"]),
    ("pinned stay", [u("u0"), u("p1", pinned=True), a("a2"), u("u3")], 1, ["u0", "a2"], ["p1", "u3"]),
    ("keep_last covering the buffer folds nothing", [u("u0"), u("u1")], 2, [], ["u0", "u1"]),
    ("keep_last beyond the buffer folds nothing", [u("u0"), u("u1")], 9, [], ["u0", "u1"]),
    (
        "a unit straddling the boundary is kept",
        [a("a1", calls=["c1"]), u("u1"), t("t1", answers="c1"), u("u2")],
        3,
        [],
        ["a1", "u1", "t1", "u2"],
    ),
    ("all pinned folds nothing", [u("p0", pinned=True), u("p1", pinned=True)], 0, [], ["p0", "p1"]),
    ("empty buffer folds nothing", [], 0, [], []),
]


@pytest.mark.parametrize(
    ("buffer", "keep_last", "folded", "kept"),
    [case[1:] for case in FOLD_CASES],
    ids=[case[0] for case in FOLD_CASES],
)
@pytest.mark.parametrize("cls", [RollingMemory, SummaryMemory])
def test_fold(cls: Any, buffer: list[Message], keep_last: int, folded: list[str], kept: list[str]) -> None:
    folds = Folds()
    if cls is RollingMemory:
        mem = cls.from_dict(state(buffer), summarize_fn=folds, token_counter=cost)
    else:
        mem = cls.from_dict(state(buffer), summarize_fn=folds)
    assert mem.fold(keep_last=keep_last) == len(folded)
    assert ids(mem.buffer) == kept
    assert folds.batches == ([folded] if folded else [])
    assert mem.summary == "".join(f"<{name}>" for name in folded)


def test_fold_without_summarizer_drops_and_counts() -> None:
    gone: list[list[str]] = []
    mem = RollingMemory.from_dict(
        state([u("u0"), u("u1"), u("u2")], "S"), on_evict=lambda ms: gone.append(ids(ms))
    )
    assert mem.fold(1) == 2
    assert ids(mem.buffer) == ["u2"]
    assert gone == [["u0", "u1"]]
    assert mem.summary == "S"


def test_fold_positional_default_is_zero() -> None:
    folds = Folds()
    mem = RollingMemory.from_dict(state([u("u0"), u("u1")]), summarize_fn=folds, token_counter=cost)
    assert mem.fold() == 2
    assert mem.buffer == []


@pytest.mark.parametrize(
    ("bad", "error"), [(-1, ValueError), ("1", TypeError), (True, TypeError), (1.0, TypeError)]
)
def test_fold_rejects_bad_keep_last(bad: Any, error: type[Exception]) -> None:
    folds = Folds()
    mem = RollingMemory.from_dict(state([u("u0"), u("u1")]), summarize_fn=folds, token_counter=cost)
    with pytest.raises(error, match="keep_last"):
        mem.fold(bad)
    assert ids(mem.buffer) == ["u0", "u1"]
    assert folds.batches == []


def test_fold_failure_changes_nothing(failing_summarizer: Any) -> None:
    mem = RollingMemory.from_dict(
        state([u("u0"), u("u1")], "S"), summarize_fn=failing_summarizer, token_counter=cost
    )
    with pytest.raises(RuntimeError, match="summarizer down"):
        mem.fold()
    assert ids(mem.buffer) == ["u0", "u1"]
    assert mem.summary == "S"
    assert len(failing_summarizer.calls) == 1


def test_eviction_happens_once_per_add_after_loading_over_budget() -> None:
    """Loading never prunes; the next add applies the budget to the whole buffer."""
    folds = Folds()
    buffer = [u(f"u{i}", 3) for i in range(5)]
    mem = RollingMemory.from_dict(state(buffer), max_tokens=4, summarize_fn=folds, token_counter=cost)
    assert ids(mem.buffer) == ids(buffer)
    add(mem, u("u5"))
    assert folds.batches == [["u0", "u1", "u2", "u3"]]
    assert ids(mem.buffer) == ["u4", "u5"]

"""The sessions write planner, from change records alone: no store, no sessions."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Optional

import pytest

from rollmem._write_plan import (
    Loaded,
    Plan,
    explains,
    plan_write,
    read_summary,
    rebase_fold,
    stored_summary,
)
from rollmem.changes import Appended, Change, Cleared, Dropped, Folded, Pinned, SummaryAssigned
from rollmem.message import Message
from rollmem.stores import Head

A, B, C, D = (Message("user", text, id=text) for text in "abcd")
HEAD = Head("inc", 3, "S", 5, "words")


@dataclass
class Held:
    """What a memory holds after the block (the planner reads only this)."""

    summary: str
    buffer: list[Message]
    cost_list: list[int] = field(default_factory=list)

    def costs(self) -> list[int]:
        return self.cost_list or [1] * len(self.buffer)


def loaded(*messages: Message, head: Optional[Head] = HEAD) -> Loaded:
    return Loaded(head, [3, 4][: len(messages)] if head is not None else [], tuple(messages))


def plan(held: Held, before: Loaded, *changes: Change, identity: Optional[str] = "words") -> Plan:
    return plan_write("s", held, before, changes, identity, None)


def texts(plan: Plan) -> list[str]:
    assert plan.change is not None
    return [json.loads(entry.message)["content"] for entry in plan.change.entries]


def test_nothing_changed_writes_nothing() -> None:
    before = loaded(A, B)
    assert plan(Held("S", [A, B]), before).change is None


def test_an_add_only_turn_is_an_append() -> None:
    result = plan(Held("S", [A, B, C]), loaded(A, B), Appended((C,), (2,)))
    assert result.change is not None
    assert result.change.is_append
    assert (texts(result), [e.cost for e in result.change.entries]) == (["c"], [2])
    assert (result.change.incarnation, result.change.counter) == ("inc", "words")
    assert (result.seqs_before_new, len(result.change.entries), result.redoable, result.fallback) == (
        [3, 4],
        1,
        True,
        None,
    )


def test_a_fold_of_loaded_messages_compares_the_revision_and_falls_back_to_an_append() -> None:
    changes = (Appended((C,), (1,)), Folded("S a", (0,), (A,)))
    result = plan(Held("S a", [B, C]), loaded(A, B), *changes)
    fold = result.change
    assert fold is not None
    assert (fold.expected_revision, fold.expected_tail, fold.cut, fold.keep, fold.summary) == (
        3,
        None,
        4,
        (),
        "S a",
    )
    assert texts(result) == ["c"]
    assert result.removed == (3,)
    assert not result.removed_new
    assert result.fallback is not None
    assert result.fallback.is_append
    assert [json.loads(e.message)["content"] for e in result.fallback.entries] == ["c"]


def test_a_fold_that_reached_the_new_messages_also_compares_the_tail() -> None:
    changes = (Appended((C, D), (1, 1)), Folded("S a b c", (0, 1, 2), (A, B, C)))
    result = plan(Held("S a b c", [D]), loaded(A, B), *changes)
    assert result.change is not None
    assert (result.change.expected_tail, result.change.cut, result.removed_new) == (5, 5, True)
    assert texts(result) == ["d"]
    assert result.fallback is not None  # the append of c and d
    assert [json.loads(e.message)["content"] for e in result.fallback.entries] == ["c", "d"]


def test_a_pinned_message_below_the_cut_is_kept() -> None:
    pinned = replace(A, pinned=True)
    changes = (Appended((C,), (1,)), Folded("S b", (1,), (B,)))
    result = plan(Held("S b", [pinned, C]), loaded(pinned, B), *changes)
    assert result.change is not None
    assert (result.change.cut, result.change.keep) == (5, (3,))


def test_an_explicit_fold_has_no_fallback() -> None:
    changes = (Appended((C,), (1,)), Folded("S a", (0,), (A,), keep_last=2))
    result = plan(Held("S a", [B, C]), loaded(A, B), *changes)
    assert result.change is not None
    assert result.fallback is None


def test_a_drop_leaves_the_summary() -> None:
    result = plan(Held("S", [B, C]), loaded(A, B), Appended((C,), (1,)), Dropped((0,), (A,)))
    assert result.change is not None
    assert result.change.summary is None
    assert result.fallback is not None


@pytest.mark.parametrize(
    ("held", "changes"),
    [
        (Held("S", [A, D, C]), (Appended((C,), (1,)),)),  # buffer[1] = d
        (Held("S", [B, C]), (Appended((C,), (1,)),)),  # del buffer[0]
        (Held("S", [A, B, C, D]), (Appended((C,), (1,)),)),  # buffer.append(d)
        (Held("S a", [B, D]), (Appended((C,), (1,)), Folded("S a", (0,), (A,)))),
    ],
)
def test_an_edit_in_place_is_a_rewrite_never_redone(held: Held, changes: tuple[Change, ...]) -> None:
    result = plan(held, loaded(A, B), *changes)
    assert result.change is not None
    assert result.change.replace
    assert (result.change.expected_revision, result.change.expected_tail) == (3, 5)
    assert not result.redoable


def test_a_create_is_redoable_only_when_the_record_explains_the_buffer() -> None:
    empty = loaded(head=None)
    made = plan(Held("", [A]), empty, Appended((A,), (1,)))
    assert made.change is not None
    assert made.change.create
    assert made.redoable
    edited = plan(Held("", [A]), empty)  # memory.buffer.append(...) on a new session
    assert edited.change is not None
    assert edited.change.create
    assert not edited.redoable


def test_another_counter_rewrites_and_redoes_only_what_the_record_explains() -> None:
    before = loaded(A, B)
    recounted = plan(Held("S", [A, B, C]), before, Appended((C,), (1,)), identity="chars")
    assert recounted.change is not None
    assert recounted.change.replace
    assert recounted.redoable
    assert recounted.change.counter == "chars"
    redacted = plan(Held("S", [B]), before, identity="chars")  # del memory.buffer[0]
    assert redacted.change is not None
    assert redacted.change.replace
    assert not redacted.redoable


def test_rare_changes_rewrite_and_stay_redoable() -> None:
    before = loaded(A, B)
    cleared = plan(Held("", [C]), before, Cleared(), Appended((C,), (1,)))
    assert cleared.change is not None
    assert cleared.change.replace
    assert cleared.redoable
    pinned = plan(Held("S", [replace(A, pinned=True), B]), before, Pinned("a"))
    assert pinned.change is not None
    assert pinned.redoable
    assigned = plan(Held("T", [A, B]), before, SummaryAssigned("T"))
    assert assigned.change is not None
    assert not assigned.redoable


def test_explains() -> None:
    before = loaded(A, B)
    assert explains(before, [Appended((C,), (1,))], "S", [A, B, C])
    assert not explains(before, [Appended((C,), (1,))], "S", [A, C])
    assert not explains(before, [Folded("x", (5,), (A,))], "x", [])  # positions it does not have
    assert not explains(before, [SummaryAssigned("S")], "S", [A, B])


def _fold_plan() -> tuple[Plan, Loaded]:
    before = loaded(A, B)
    changes = (Appended((C,), (1,)), Folded("S a", (0,), (A,)))
    return plan(Held("S a", [B, C]), before, *changes), before


def test_a_lost_fold_is_rebased_when_its_cut_is_still_valid() -> None:
    result, before = _fold_plan()
    latest = Head("inc", 4, "S", 7, "words")
    rebased = rebase_fold(result, before, latest, [3, 4, 5, 6])
    assert rebased is not None
    assert result.change is not None
    assert (rebased.expected_revision, rebased.cut, rebased.keep) == (4, 4, ())
    assert (rebased.summary, rebased.entries) == (result.change.summary, result.change.entries)


@pytest.mark.parametrize(
    ("latest", "seqs"),
    [
        (Head("inc", 4, "S x", 7, "words"), [4, 5, 6]),  # another writer folded: new summary
        (Head("inc", 4, "S", 7, "words"), [4, 5, 6]),  # the entry it removes is gone
        (Head("new", 1, "S", 7, "words"), [3, 4]),  # deleted and recreated
        (Head("inc", 4, "S", 7, "chars"), [3, 4]),  # rewritten by another counter
    ],
)
def test_a_lost_fold_whose_cut_is_gone_is_not_rebased(latest: Head, seqs: list[int]) -> None:
    result, before = _fold_plan()
    assert rebase_fold(result, before, latest, seqs) is None


def test_a_rebased_fold_of_new_messages_compares_the_latest_tail() -> None:
    before = loaded(A, B)
    changes = (Appended((C, D), (1, 1)), Folded("S a b c", (0, 1, 2), (A, B, C)))
    result = plan(Held("S a b c", [D]), before, *changes)
    rebased = rebase_fold(result, before, Head("inc", 3, "S", 8, "words"), [3, 4, 5, 6, 7])
    assert rebased is not None
    assert (rebased.expected_revision, rebased.expected_tail) == (3, 8)


@pytest.mark.parametrize(
    "summary", ["", "plain", "a\x00b", "\x00", "\ufdd0", "\ufdd0json", '\ufdd0"x"', "é中😀\n\x00\ufdd0"]
)
def test_stored_summaries_round_trip_and_never_hold_nul(summary: str) -> None:
    stored = stored_summary(summary)
    assert "\x00" not in stored
    assert read_summary(stored) == summary
    if "\x00" not in summary and not summary.startswith("\ufdd0"):
        assert stored == summary  # what earlier releases stored reads back unchanged


def test_summaries_stored_before_the_rule_read_as_they_are() -> None:
    for legacy in ["\ufdd0not json", "\ufdd0[1]", "\ufdd0"]:
        assert read_summary(legacy) == legacy

"""The memory controls: target_tokens, pins, on_evict, stats, fold, extend and background folding."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional

import pytest

from rollmem import (
    AsyncRollingMemory,
    AsyncSummaryMemory,
    BufferMemory,
    MemoryStats,
    RollingMemory,
    SummaryMemory,
    WindowMemory,
)
from rollmem.message import Message, ToolCall


def contents(mem: Any) -> list[str]:
    return [m.content for m in mem.buffer]


def short_summary(summary: str, messages: Sequence[Message]) -> str:
    """The number of messages folded so far, refusing pinned ones."""
    assert not any(m.pinned for m in messages), "a pinned message reached the summarizer"
    return str(int(summary or "0") + len(messages))


# --- target_tokens -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [RollingMemory, AsyncRollingMemory])
@pytest.mark.parametrize(
    ("target", "error"),
    [
        (0, ValueError),
        (-1, ValueError),
        (101, ValueError),
        ("50", TypeError),
        (True, TypeError),
        (50.0, TypeError),
    ],
)
def test_target_tokens_is_checked(cls: Any, target: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="target_tokens"):
        cls(max_tokens=100, target_tokens=target)
    with pytest.raises(error, match="target_tokens"):
        cls.from_dict({"version": 2, "summary": "", "buffer": []}, max_tokens=100, target_tokens=target)


def test_target_tokens_defaults_to_max_tokens() -> None:
    assert RollingMemory(max_tokens=100).target_tokens == 100
    assert RollingMemory(max_tokens=100, target_tokens=100).target_tokens == 100
    assert AsyncRollingMemory(max_tokens=100, target_tokens=1).target_tokens == 1
    assert RollingMemory(max_tokens=100).stats().target_tokens == 100
    assert RollingMemory(max_tokens=100, target_tokens=40).stats().target_tokens == 40


def test_target_evicts_down_to_the_target(char_counter: Callable[[str], int], recorder: Any) -> None:
    mem = RollingMemory(max_tokens=10, target_tokens=4, summarize_fn=recorder, token_counter=char_counter)
    for c in "abcdefghij":
        mem.add_user_message(c)
    assert recorder.calls == []
    mem.add_user_message("k")  # 11 > 10: down to 4
    assert contents(mem) == ["h", "i", "j", "k"]
    assert mem.summary == "a|b|c|d|e|f|g"
    for c in "lmnopq":
        mem.add_user_message(c)
    assert len(recorder.calls) == 1
    mem.add_user_message("r")
    assert len(recorder.calls) == 2
    assert contents(mem) == ["o", "p", "q", "r"]
    assert mem.summary == "a|b|c|d|e|f|g|h|i|j|k|l|m|n"


def synthetic_conversation(turns: int) -> Iterator[tuple[str, str]]:
    """Deterministic turns of realistic lengths: short user questions, longer assistant answers."""
    rng = random.Random(2024)
    for i in range(turns):
        if i % 2 == 0:
            yield "user", " ".join(["word"] * rng.randint(5, 60))
        else:
            yield "assistant", " ".join(["word"] * rng.randint(20, 250))


def summarizer_calls(target: Optional[int]) -> int:
    mem = RollingMemory(max_tokens=2000, target_tokens=target, summarize_fn=short_summary)
    for role, text in synthetic_conversation(1000):
        mem.add_message(role, text)
    assert int(mem.summary) + len(mem.buffer) == 1000
    return mem.stats().summarizer_calls


def test_half_target_cuts_summarizer_calls_at_least_four_times() -> None:
    default = summarizer_calls(None)
    half = summarizer_calls(1000)
    assert default > 300, default  # alignment folds a user turn with its answer: ~1 call per 2 turns
    assert default >= 4 * half, (default, half)


# --- pins ----------------------------------------------------------------------------------------------


def test_every_add_helper_takes_pinned() -> None:
    mem = RollingMemory()
    mem.add_user_message("u", pinned=True)
    mem.add_assistant_message("a", pinned=True)
    mem.add_system_message("s", pinned=True)
    mem.add_tool_message("t", tool_call_id="c", pinned=True)
    mem.add_message("x", "x", pinned=True)
    mem.add_user_message("free")
    assert [m.pinned for m in mem.buffer] == [True, True, True, True, True, False]
    assert mem.stats().pinned == 5


def test_pin_and_unpin_by_id(char_counter: Callable[[str], int], recorder: Any) -> None:
    mem = RollingMemory(max_tokens=4, summarize_fn=recorder, token_counter=char_counter)
    mem.add_user_message("a", id="x")
    mem.add_user_message("b", id="y")
    mem.add_user_message("c", id="x")
    mem.pin("x")
    assert [m.pinned for m in mem.buffer] == [True, False, True]
    assert mem.to_dict()["buffer"][0] == {"role": "user", "content": "a", "id": "x", "pinned": True}
    mem.add_user_message("d")
    mem.add_user_message("e")  # 5 > 4: only "b" may go
    assert contents(mem) == ["a", "c", "d", "e"]
    mem.unpin("x")
    assert mem.to_dict()["buffer"][0] == {"role": "user", "content": "a", "id": "x"}
    mem.add_user_message("f")
    assert contents(mem) == ["c", "d", "e", "f"]
    assert mem.summary == "b|a"


@pytest.mark.parametrize(
    "make",
    [
        lambda: RollingMemory(),
        lambda: AsyncRollingMemory(),
        lambda: BufferMemory(),
        lambda: WindowMemory(5),
        lambda: SummaryMemory(lambda s, m: s),
        lambda: AsyncSummaryMemory(lambda s, m: s),
    ],
)
def test_pin_of_an_unknown_id_raises_key_error(make: Callable[[], Any]) -> None:
    mem = make()
    mem.buffer = [Message("user", "a", id="known")]
    with pytest.raises(KeyError, match="unknown"):
        mem.pin("unknown")
    with pytest.raises(KeyError, match="unknown"):
        mem.unpin("unknown")
    mem.pin("known")
    assert mem.buffer == [Message("user", "a", id="known", pinned=True)]
    mem.unpin("known")
    assert mem.buffer == [Message("user", "a", id="known")]


def test_pinned_messages_survive_ten_thousand_adds(char_counter: Callable[[str], int]) -> None:
    mem = RollingMemory(max_tokens=60, summarize_fn=short_summary, token_counter=char_counter)
    mem.add_system_message("you are terse", pinned=True)
    for i in range(10_000):
        if i == 5000:
            mem.add_user_message("remember: teal", pinned=True)
        elif i % 2:
            mem.add_assistant_message(f"answer {i}")
        else:
            mem.add_user_message(f"question {i}")
    pinned = [m.content for m in mem.buffer if m.pinned]
    assert pinned == ["you are terse", "remember: teal"]
    assert mem.buffer[0].content == "you are terse"
    assert int(mem.summary) + len(mem.buffer) == 10_001


def test_pinned_alone_over_budget_keeps_only_pins_and_newest(
    char_counter: Callable[[str], int], recorder: Any
) -> None:
    mem = RollingMemory(max_tokens=5, summarize_fn=recorder, token_counter=char_counter)
    mem.add_system_message("pinned!", pinned=True)
    mem.add_user_message("a")
    mem.add_user_message("b")
    assert contents(mem) == ["pinned!", "b"]
    assert mem.stats().buffer_tokens == 8
    assert mem.summary == "a"


def test_window_and_summary_memories_never_drop_pins(recorder: Any) -> None:
    window = WindowMemory(1)
    window.add_user_message("p", pinned=True)
    window.add_user_message("a")
    window.add_user_message("b")
    assert contents(window) == ["p", "b"]
    summary = SummaryMemory(recorder)
    summary.add_user_message("p", pinned=True)
    summary.add_user_message("a")
    assert contents(summary) == ["p"]
    assert summary.summary == "a"
    assert summary.fold() == 0


# --- on_evict -------------------------------------------------------------------------------------------


def test_on_evict_sees_the_committed_state(char_counter: Callable[[str], int], recorder: Any) -> None:
    seen: list[tuple[list[str], str, list[str]]] = []
    mem: RollingMemory

    def on_evict(messages: Sequence[Message]) -> None:
        seen.append(([m.content for m in messages], mem.summary, contents(mem)))

    mem = RollingMemory(max_tokens=2, summarize_fn=recorder, token_counter=char_counter, on_evict=on_evict)
    mem.add_user_message("a")
    mem.add_user_message("b")
    assert seen == []
    mem.add_user_message("c")
    assert seen == [(["a"], "a", ["b", "c"])]
    assert mem.fold(keep_last=1) == 1
    assert seen[-1] == (["b"], "a|b", ["c"])
    mem.clear()
    assert len(seen) == 2


def test_on_evict_is_not_called_for_a_failed_fold(
    char_counter: Callable[[str], int], failing_summarizer: Any
) -> None:
    seen: list[Sequence[Message]] = []
    mem = RollingMemory(
        max_tokens=1, summarize_fn=failing_summarizer, token_counter=char_counter, on_evict=seen.append
    )
    mem.add_user_message("a")
    with pytest.raises(RuntimeError, match="summarizer down"):
        mem.add_user_message("b")
    with pytest.raises(RuntimeError, match="summarizer down"):
        mem.fold()
    assert seen == []


def test_on_evict_error_propagates_without_undoing_the_fold(
    char_counter: Callable[[str], int], recorder: Any
) -> None:
    def on_evict(messages: Sequence[Message]) -> None:
        raise LookupError("archive offline")

    mem = RollingMemory(max_tokens=1, summarize_fn=recorder, token_counter=char_counter, on_evict=on_evict)
    mem.add_user_message("a")
    with pytest.raises(LookupError, match="archive offline"):
        mem.add_user_message("b")
    assert (mem.summary, contents(mem)) == ("a", ["b"])
    assert mem.stats().folds == 1
    with pytest.raises(LookupError):
        mem.add_user_message("c")
    assert (mem.summary, contents(mem)) == ("a|b", ["c"])


def test_on_evict_runs_for_dropped_messages_and_summary_memory(recorder: Any) -> None:
    dropped: list[list[str]] = []
    mem = RollingMemory(max_tokens=1, on_evict=lambda ms: dropped.append([m.content for m in ms]))
    mem.add_user_message("a")
    mem.add_user_message("b")
    assert dropped == [["a"]]
    folded: list[list[str]] = []
    summary = SummaryMemory(recorder, on_evict=lambda ms: folded.append([m.content for m in ms]))
    summary.add_user_message("x")
    summary.add_user_message("y")
    assert folded == [["x"], ["y"]]


async def test_async_on_evict_error_keeps_the_fold(
    char_counter: Callable[[str], int], async_recorder: Any
) -> None:
    async def on_evict(messages: Sequence[Message]) -> None:
        raise LookupError("archive offline")

    mem = AsyncRollingMemory(
        max_tokens=1, summarize_fn=async_recorder.summarize, token_counter=char_counter, on_evict=on_evict
    )
    await mem.add_user_message("a")
    with pytest.raises(LookupError, match="archive offline"):
        await mem.add_user_message("b")
    assert (mem.summary, contents(mem)) == ("a", ["b"])


def test_on_evict_must_be_callable() -> None:
    with pytest.raises(TypeError, match="on_evict"):
        RollingMemory(on_evict="nope")  # type: ignore[arg-type]


# --- stats and fold --------------------------------------------------------------------------------------


def test_memory_stats_is_a_frozen_value() -> None:
    assert [f.name for f in dataclasses.fields(MemoryStats)] == [
        "messages",
        "pinned",
        "buffer_tokens",
        "summary_tokens",
        "max_tokens",
        "target_tokens",
        "folds",
        "summarizer_calls",
        "failed_folds",
        "messages_summarized",
        "messages_dropped",
    ]
    stats = RollingMemory().stats()
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.folds = 3  # type: ignore[misc]


def test_stats_track_everything_since_construction(char_counter: Callable[[str], int], recorder: Any) -> None:
    mem = RollingMemory(max_tokens=4, target_tokens=2, summarize_fn=recorder, token_counter=char_counter)
    assert mem.stats() == MemoryStats(0, 0, 0, 0, 4, 2, 0, 0, 0, 0, 0)
    mem.add_system_message("S", pinned=True)
    for c in "abcd":
        mem.add_user_message(c)  # "d" makes 5 > 4: a, b, c go (down to 2: S + d)
    assert contents(mem) == ["S", "d"]
    recorder.fail = True
    with pytest.raises(RuntimeError):
        mem.fold()
    recorder.fail = False
    assert mem.fold() == 1
    assert contents(mem) == ["S"]
    assert mem.summary == "a|b|c|d"
    assert mem.stats().to_dict() == {
        "messages": 1,
        "pinned": 1,
        "buffer_tokens": 1,
        "summary_tokens": 7,
        "max_tokens": 4,
        "target_tokens": 2,
        "folds": 2,
        "summarizer_calls": 3,
        "failed_folds": 1,
        "messages_summarized": 4,
        "messages_dropped": 0,
    }
    mem.clear()
    after = mem.stats()
    assert (
        after.messages,
        after.buffer_tokens,
        after.summary_tokens,
        after.folds,
        after.messages_summarized,
    ) == (
        0,
        0,
        0,
        2,
        4,
    )


def test_stats_exact_scenario(char_counter: Callable[[str], int], recorder: Any) -> None:
    mem = RollingMemory(max_tokens=6, target_tokens=3, summarize_fn=recorder, token_counter=char_counter)
    mem.add_user_message("aa")
    mem.add_user_message("bb")
    mem.add_user_message("cc")
    assert recorder.calls == []
    mem.add_user_message("d")  # 7 > 6: down to 3 -> aa, bb go
    assert contents(mem) == ["cc", "d"]
    assert mem.stats() == MemoryStats(
        messages=2,
        pinned=0,
        buffer_tokens=3,
        summary_tokens=5,
        max_tokens=6,
        target_tokens=3,
        folds=1,
        summarizer_calls=1,
        failed_folds=0,
        messages_summarized=2,
        messages_dropped=0,
    )


def test_stats_count_dropped_messages_and_non_str_failures(char_counter: Callable[[str], int]) -> None:
    mem = RollingMemory(max_tokens=1, token_counter=char_counter)
    for c in "abc":
        mem.add_user_message(c)
    stats = mem.stats()
    assert (stats.folds, stats.messages_dropped, stats.summarizer_calls, stats.messages_summarized) == (
        2,
        2,
        0,
        0,
    )
    bad = RollingMemory(max_tokens=1, summarize_fn=lambda s, m: 1, token_counter=char_counter)  # type: ignore[arg-type,return-value]
    bad.add_user_message("a")
    with pytest.raises(TypeError):
        bad.add_user_message("b")
    stats = bad.stats()
    assert (stats.folds, stats.summarizer_calls, stats.failed_folds, stats.messages_summarized) == (
        0,
        1,
        1,
        0,
    )


def test_summary_tokens_are_cached_until_the_summary_changes(recorder: Any) -> None:
    counted: list[str] = []

    def counter(text: str) -> int:
        counted.append(text)
        return len(text)

    mem = RollingMemory(max_tokens=1, summarize_fn=recorder, token_counter=counter)
    mem.add_user_message("a")
    mem.add_user_message("b")
    counted.clear()
    assert mem.stats().summary_tokens == 1
    assert mem.stats().summary_tokens == 1
    assert counted.count("a") == 1
    mem.summary = "longer"
    assert mem.stats().summary_tokens == 6
    assert mem.stats().summary_tokens == 6
    assert counted == ["a", "longer"]


def test_fold_counts_and_hook(char_counter: Callable[[str], int], recorder: Any) -> None:
    seen: list[int] = []
    mem = RollingMemory(
        summarize_fn=recorder, token_counter=char_counter, on_evict=lambda ms: seen.append(len(ms))
    )
    for c in "abcde":
        mem.add_user_message(c)
    assert mem.fold(keep_last=2) == 3
    assert mem.fold(keep_last=2) == 0
    assert mem.fold() == 2
    assert seen == [3, 2]
    assert mem.summary == "a|b|c|d|e"
    assert len(recorder.calls) == 2


# --- extend ----------------------------------------------------------------------------------------------


def test_extend_loads_a_long_history_with_one_summarizer_call(recorder: Any) -> None:
    history = [
        Message("user" if i % 2 == 0 else "assistant", f"turn {i} " + "w " * (i % 7)) for i in range(500)
    ]
    mem = RollingMemory(max_tokens=200, summarize_fn=recorder)
    assert mem.extend(history) is None
    assert len(recorder.calls) == 1
    assert list(recorder.calls[0][1]) + mem.buffer == history
    assert mem.stats().buffer_tokens <= 200


def test_extend_accepts_any_iterable_and_keeps_fields(char_counter: Callable[[str], int]) -> None:
    mem = RollingMemory(token_counter=char_counter)
    messages = [
        Message("user", "a", pinned=True, id="1"),
        Message("assistant", "", tool_calls=(ToolCall("c", "f"),)),
    ]
    mem.extend(m for m in messages)
    assert mem.buffer == messages
    mem.extend([])
    mem.extend(iter(()))
    assert mem.buffer == messages


def test_extend_rejects_the_whole_batch(recorder: Any) -> None:
    mem = RollingMemory(max_tokens=2, summarize_fn=recorder)
    mem.add_user_message("kept")
    with pytest.raises(TypeError, match=r"messages\[2\]"):
        mem.extend([Message("user", "a"), Message("user", "b"), ("user", "c"), Message("user", "d")])  # type: ignore[list-item]
    assert contents(mem) == ["kept"]
    assert recorder.calls == []


def test_extend_counts_every_message_before_appending_any() -> None:
    counted: list[str] = []

    def counter(text: str) -> int:
        counted.append(text)
        if text == "bad":
            raise ArithmeticError("cannot count")
        return 1

    mem = RollingMemory(token_counter=counter)
    with pytest.raises(ArithmeticError, match="cannot count"):
        mem.extend([Message("user", "a"), Message("user", "b"), Message("user", "bad"), Message("user", "c")])
    assert mem.buffer == []
    assert counted == ["a", "b", "bad"]


def test_extend_failure_leaves_the_appended_state(char_counter: Callable[[str], int], recorder: Any) -> None:
    mem = RollingMemory(max_tokens=2, summarize_fn=recorder, token_counter=char_counter)
    recorder.fail = True
    with pytest.raises(RuntimeError, match="summarizer down"):
        mem.extend([Message("user", c) for c in "abc"])
    assert contents(mem) == ["a", "b", "c"]
    assert recorder.calls == [("", (Message("user", "a"),))]


# --- background folding ------------------------------------------------------------------------------


async def test_background_add_returns_before_the_fold(
    char_counter: Callable[[str], int], make_async_gate: Callable[[], Any]
) -> None:
    gated = make_async_gate()
    mem = AsyncRollingMemory(
        max_tokens=2, summarize_fn=gated.summarize, token_counter=char_counter, background=True
    )
    await mem.add_user_message("a")
    await mem.add_user_message("b")
    await asyncio.wait_for(mem.add_user_message("c"), timeout=5)
    await asyncio.wait_for(gated.entered.wait(), timeout=5)
    assert mem.get_messages() == [Message("user", "a"), Message("user", "b"), Message("user", "c")]
    await mem.add_user_message("d")
    assert contents(mem) == ["a", "b", "c", "d"]
    gated.release.set()
    await mem.flush()
    assert gated.max_active == 1
    assert mem.summary + "|" + "|".join(contents(mem)) == "a|b|c|d"
    assert mem.stats().buffer_tokens <= 2
    assert gated.texts[0] == ("", ["a"])


async def test_background_clear_wins(
    char_counter: Callable[[str], int], make_async_gate: Callable[[], Any]
) -> None:
    gated = make_async_gate()
    mem = AsyncRollingMemory(
        max_tokens=1, summarize_fn=gated.summarize, token_counter=char_counter, background=True
    )
    await mem.add_user_message("a")
    await mem.add_user_message("b")
    await asyncio.wait_for(gated.entered.wait(), timeout=5)
    mem.clear()
    gated.release.set()
    await mem.flush()
    assert (mem.summary, mem.buffer) == ("", [])


async def test_flush_without_folds_returns() -> None:
    mem = AsyncRollingMemory(background=True)
    await mem.flush()
    await mem.add_user_message("a")
    await mem.flush()
    assert contents(mem) == ["a"]


async def test_foreground_add_waits_for_the_fold(
    char_counter: Callable[[str], int], make_async_gate: Callable[[], Any]
) -> None:
    gated = make_async_gate()
    mem = AsyncRollingMemory(max_tokens=1, summarize_fn=gated.summarize, token_counter=char_counter)
    await mem.add_user_message("a")
    task = asyncio.ensure_future(mem.add_user_message("b"))
    await asyncio.wait_for(gated.entered.wait(), timeout=5)
    assert not task.done()
    gated.release.set()
    await task
    assert (mem.summary, contents(mem)) == ("a", ["b"])


@pytest.mark.parametrize("action", ["clear", "pin", "assign"])
async def test_background_adds_after_a_discarded_fold_are_still_folded(
    action: str, make_async_gate: Callable[[], Any]
) -> None:
    """A clear/pin/assignment discards the fold in flight; the adds that follow it still get folded."""
    gated = make_async_gate()
    mem = AsyncRollingMemory(max_tokens=1, summarize_fn=gated.summarize, token_counter=len, background=True)
    await mem.add_user_message("a", id="a")
    await mem.add_user_message("b", id="b")
    await asyncio.wait_for(gated.entered.wait(), timeout=5)
    if action == "clear":
        mem.clear()
    elif action == "pin":
        mem.pin("b")
    else:
        mem.buffer = list(mem.buffer)
    await mem.add_user_message("c")
    await mem.add_user_message("d")
    gated.release.set()
    await mem.flush()
    unpinned = [m.content for m in mem.buffer if not m.pinned]
    assert unpinned == ["d"]

"""RollingMemory: construction, adds, reads, failures, bad input, token counting, direct mutation."""

from __future__ import annotations

import gc
import inspect
from collections.abc import Sequence
from typing import Any, Callable

import pytest

from rollmem import RollingMemory
from rollmem.changes import (
    Appended,
    BufferAssigned,
    Cleared,
    Dropped,
    Folded,
    Pinned,
    Restored,
    SummaryAssigned,
    Unpinned,
)
from rollmem.message import Message, ToolCall


def contents(mem: Any) -> list[str]:
    return [m.content for m in mem.buffer]


def counting(counter: Callable[[str], int]) -> tuple[Callable[[str], int], list[str]]:
    """``counter`` plus the list of texts it was called with."""
    seen: list[str] = []

    def count(text: str) -> int:
        seen.append(text)
        return counter(text)

    return count, seen


def short_summary(summary: str, messages: Sequence[Message]) -> str:
    """A summarizer whose summary stays short: the number of messages folded so far."""
    return str(int(summary or "0") + len(messages))


# --- construction ---------------------------------------------------------------------------------


def test_defaults() -> None:
    mem = RollingMemory()
    assert mem.max_tokens == 2000
    assert mem.summary == ""
    assert mem.buffer == []
    assert mem.get_messages() == []
    assert mem.get_context() == ""


def test_positional_arguments(char_counter: Callable[[str], int], recorder: Any) -> None:
    mem = RollingMemory(5, recorder, char_counter)
    mem.add_user_message("abc")
    mem.add_user_message("defg")
    assert contents(mem) == ["defg"]
    assert mem.summary == "abc"


@pytest.mark.parametrize("bad", ["100", 1.5, None, True, False])
def test_max_tokens_must_be_an_int(bad: object) -> None:
    with pytest.raises(TypeError, match="max_tokens"):
        RollingMemory(max_tokens=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1])
def test_max_tokens_must_be_positive(bad: int) -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        RollingMemory(max_tokens=bad)


def test_max_tokens_is_checked_by_from_dict_too() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        RollingMemory.from_dict({"version": 2, "summary": "", "buffer": []}, max_tokens=0)


async def _async_summarize(summary: str, messages: Sequence[Message]) -> str:
    return summary


def test_coroutine_summarizer_is_refused_naming_the_async_class() -> None:
    with pytest.raises(TypeError, match="AsyncRollingMemory"):
        RollingMemory(summarize_fn=_async_summarize)
    with pytest.raises(TypeError, match="AsyncRollingMemory"):
        RollingMemory.from_dict({"version": 2, "summary": "", "buffer": []}, summarize_fn=_async_summarize)


@pytest.mark.parametrize("name", ["summarize_fn", "token_counter"])
def test_non_callables_are_refused(name: str) -> None:
    with pytest.raises(TypeError, match=name):
        RollingMemory(**{name: "not callable"})  # type: ignore[arg-type]


# --- adding -----------------------------------------------------------------------------------------


def test_add_message_returns_the_appended_message() -> None:
    mem = RollingMemory()
    m = mem.add_message("user", "hi", id="m1", metadata={"lang": "en"}, pinned=True)
    assert m == Message("user", "hi", id="m1", metadata={"lang": "en"}, pinned=True)
    assert mem.buffer == [m]
    assert mem.buffer[0] is m


def test_add_helpers_set_roles_and_fields() -> None:
    mem = RollingMemory()
    call = ToolCall("c1", "search", '{"q": "teal"}')
    u = mem.add_user_message("question", id="u", metadata={"a": 1})
    a = mem.add_assistant_message("", tool_calls=[call], id="a")
    t = mem.add_tool_message("result", tool_call_id="c1", id="t")
    s = mem.add_system_message("be brief", pinned=True)
    assert mem.buffer == [
        Message("user", "question", id="u", metadata={"a": 1}),
        Message("assistant", "", id="a", tool_calls=(call,)),
        Message("tool", "result", id="t", tool_call_id="c1"),
        Message("system", "be brief", pinned=True),
    ]
    assert [u, a, t, s] == mem.buffer
    assert type(a.tool_calls) is tuple


def test_add_message_passes_every_field() -> None:
    mem = RollingMemory()
    call = ToolCall("c1", "f")
    m = mem.add_message("narrator", "x", id="n", tool_calls=(call,), tool_call_id="c0", metadata={"k": "v"})
    assert m == Message("narrator", "x", id="n", tool_calls=(call,), tool_call_id="c0", metadata={"k": "v"})


def test_default_counter_counts_words() -> None:
    mem = RollingMemory(max_tokens=5)
    mem.add_user_message("one two three")
    mem.add_user_message("four  five\nsix")
    assert contents(mem) == ["four  five\nsix"]
    assert mem.summary == ""
    assert mem.stats().buffer_tokens == 3


def test_without_summarizer_evicted_turns_are_dropped(char_counter: Callable[[str], int]) -> None:
    mem = RollingMemory(max_tokens=4, token_counter=char_counter)
    mem.summary = "kept"
    mem.add_user_message("abc")
    mem.add_user_message("de")
    assert contents(mem) == ["de"]
    assert mem.summary == "kept"


def test_eviction_folds_once_with_the_current_summary(
    char_counter: Callable[[str], int], recorder: Any
) -> None:
    mem = RollingMemory(max_tokens=10, summarize_fn=recorder, token_counter=char_counter)
    mem.summary = "old"
    mem.add_user_message("aaaa")
    mem.add_assistant_message("bbbb")
    mem.add_user_message("cc")
    assert recorder.calls == []
    mem.add_assistant_message("d")
    assert recorder.calls == [("old", (Message("user", "aaaa"), Message("assistant", "bbbb")))]
    assert mem.summary == "old|aaaa|bbbb"
    assert contents(mem) == ["cc", "d"]


def test_newest_unit_stays_even_alone_over_budget(char_counter: Callable[[str], int], recorder: Any) -> None:
    mem = RollingMemory(max_tokens=5, summarize_fn=recorder, token_counter=char_counter)
    mem.add_user_message("abc")
    mem.add_user_message("0123456789")
    assert contents(mem) == ["0123456789"]
    assert mem.summary == "abc"
    mem.add_user_message("x")
    assert contents(mem) == ["x"]
    assert mem.summary == "abc|0123456789"


# --- reads --------------------------------------------------------------------------------------------


def test_get_messages_and_context() -> None:
    mem = RollingMemory()
    mem.add_user_message("hello")
    mem.add_assistant_message("", tool_calls=[ToolCall("c", "now")])
    assert mem.get_messages() == mem.buffer
    assert mem.get_context() == "user: hello\nassistant:  [tool calls: now()]"
    mem.summary = "they met"
    assert mem.get_messages() == [Message("system", "they met"), *mem.buffer]
    assert mem.get_context() == "system: they met\nuser: hello\nassistant:  [tool calls: now()]"


def test_clear_empties_summary_and_buffer(recorder: Any) -> None:
    mem = RollingMemory(max_tokens=3, summarize_fn=recorder)
    for word in ["a b", "c d", "e f"]:
        mem.add_user_message(word)
    assert mem.summary != ""
    mem.clear()
    assert (mem.summary, mem.buffer, mem.get_messages(), mem.get_context()) == ("", [], [], "")
    mem.add_user_message("g h")
    assert contents(mem) == ["g h"]


# --- summarizer failures ------------------------------------------------------------------------------


def test_failing_summarizer_loses_nothing(char_counter: Callable[[str], int], recorder: Any) -> None:
    mem = RollingMemory(max_tokens=6, summarize_fn=recorder, token_counter=char_counter)
    mem.add_user_message("aaa")
    mem.add_user_message("bbb")
    recorder.fail = True
    with pytest.raises(RuntimeError, match="summarizer down"):
        mem.add_user_message("ccc")
    assert contents(mem) == ["aaa", "bbb", "ccc"]
    assert mem.summary == ""
    recorder.fail = False
    mem.add_user_message("ddd")
    assert mem.summary == "aaa|bbb"
    assert contents(mem) == ["ccc", "ddd"]
    assert [batch for _, batch in recorder.calls] == [
        (Message("user", "aaa"),),
        (Message("user", "aaa"), Message("user", "bbb")),
    ]


@pytest.mark.parametrize("result", [None, 42, b"bytes", ["a"]])
def test_summarizer_returning_non_str_changes_nothing(
    char_counter: Callable[[str], int], result: object
) -> None:
    mem = RollingMemory(max_tokens=4, summarize_fn=lambda s, m: result, token_counter=char_counter)  # type: ignore[arg-type,return-value]
    mem.summary = "s"
    mem.add_user_message("abc")
    with pytest.raises(TypeError, match="str"):
        mem.add_user_message("de")
    assert mem.summary == "s"
    assert contents(mem) == ["abc", "de"]


class _ReturnsCoroutine:
    """A plain callable that returns a coroutine (what an ``async __call__`` does)."""

    def __init__(self) -> None:
        self.returned: list[Any] = []

    async def _summarize(self, summary: str, messages: Sequence[Message]) -> str:
        return "never"

    def __call__(self, summary: str, messages: Sequence[Message]) -> Any:
        coro = self._summarize(summary, messages)
        self.returned.append(coro)
        return coro


class _AsyncCall:
    async def __call__(self, summary: str, messages: Sequence[Message]) -> str:
        return "never"


def test_awaitable_result_is_refused_and_the_coroutine_closed(char_counter: Callable[[str], int]) -> None:
    summarize = _ReturnsCoroutine()
    mem = RollingMemory(max_tokens=4, summarize_fn=summarize, token_counter=char_counter)
    mem.add_user_message("abc")
    with pytest.raises(TypeError, match="AsyncRollingMemory"):
        mem.add_user_message("de")
    assert contents(mem) == ["abc", "de"]
    assert mem.summary == ""
    assert len(summarize.returned) == 1
    assert inspect.getcoroutinestate(summarize.returned[0]) == inspect.CORO_CLOSED


def test_async_call_object_fails_the_fold_without_warnings(char_counter: Callable[[str], int]) -> None:
    mem = RollingMemory(max_tokens=4, summarize_fn=_AsyncCall(), token_counter=char_counter)
    mem.add_user_message("abc")
    with pytest.raises(TypeError, match="AsyncRollingMemory"):
        mem.add_user_message("de")
    gc.collect()  # an unclosed coroutine would warn "never awaited" here (warnings are errors)
    assert contents(mem) == ["abc", "de"]


# --- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "content", "name"),
    [(1, "x", "role"), (None, "x", "role"), ("user", 5, "content"), ("user", None, "content")],
)
def test_non_str_role_or_content_is_refused(role: Any, content: Any, name: str) -> None:
    mem = RollingMemory()
    mem.add_user_message("kept")
    with pytest.raises(TypeError, match=name):
        mem.add_message(role, content)
    assert contents(mem) == ["kept"]


def test_non_str_content_in_helpers_is_refused() -> None:
    mem = RollingMemory()
    with pytest.raises(TypeError, match="content"):
        mem.add_user_message(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="metadata"):
        mem.add_user_message("x", metadata=["not", "a", "mapping"])  # type: ignore[arg-type]
    assert mem.buffer == []


@pytest.mark.parametrize(
    ("result", "error"),
    [("3", TypeError), (2.0, TypeError), (True, TypeError), (None, TypeError), (-1, ValueError)],
)
def test_bad_token_counts_are_refused(result: object, error: type[Exception]) -> None:
    texts: list[str] = []

    def counter(text: str) -> Any:
        texts.append(text)
        return 1 if text == "good" else result

    mem = RollingMemory(max_tokens=10, token_counter=counter)
    mem.add_user_message("good")
    with pytest.raises(error, match="token_counter"):
        mem.add_user_message("bad")
    assert contents(mem) == ["good"]
    assert texts == ["good", "bad"]
    mem.add_user_message("good")
    assert contents(mem) == ["good", "good"]


def test_counter_exception_propagates_and_keeps_nothing() -> None:
    class Boom(Exception):
        pass

    def counter(text: str) -> int:
        if text == "bad":
            raise Boom("no tokenizer")
        return 1

    mem = RollingMemory(max_tokens=10, token_counter=counter)
    mem.add_user_message("good")
    with pytest.raises(Boom, match="no tokenizer"):
        mem.add_user_message("bad")
    assert contents(mem) == ["good"]
    assert mem.stats().buffer_tokens == 1


def test_zero_token_messages_are_fine() -> None:
    mem = RollingMemory(max_tokens=1, token_counter=lambda text: 0)
    for i in range(5):
        mem.add_user_message(str(i))
    assert contents(mem) == ["0", "1", "2", "3", "4"]


# --- counting: one call per message, and direct mutation -------------------------------------------------


def test_one_counter_call_per_message_over_ten_thousand_adds() -> None:
    count, seen = counting(lambda text: len(text.split()))
    mem = RollingMemory(max_tokens=300, summarize_fn=short_summary, token_counter=count)
    expected: list[str] = []
    for i in range(10_000):
        words = " ".join(["w"] * (i % 17 + 1))
        if i % 50 == 1:
            m = mem.add_assistant_message(f"call {i}", tool_calls=[ToolCall(f"c{i}", "f", words)])
        elif i % 50 == 2:
            m = mem.add_tool_message(words, tool_call_id=f"c{i - 1}")
        elif i % 2:
            m = mem.add_assistant_message(words)
        else:
            m = mem.add_user_message(words)
        expected.append(m.token_text())
    assert len(seen) == 10_000
    assert seen == expected
    assert int(mem.summary) + len(mem.buffer) == 10_000


def test_from_dict_counts_each_loaded_message_once() -> None:
    count, seen = counting(len)
    buffer = [{"role": "user", "content": c} for c in ["a", "bb", "ccc"]]
    mem = RollingMemory.from_dict({"version": 2, "summary": "", "buffer": buffer}, token_counter=count)
    mem.add_user_message("dddd")
    mem.add_user_message("e")
    assert sorted(seen) == ["a", "bb", "ccc", "dddd", "e"]
    assert mem.stats().buffer_tokens == 11
    assert len(seen) == 5


def test_assigning_the_buffer_recounts_only_new_messages(recorder: Any) -> None:
    count, seen = counting(len)
    mem = RollingMemory(max_tokens=30, summarize_fn=recorder, token_counter=count)
    a = mem.add_user_message("a" * 10)
    mem.add_user_message("b" * 10)
    seen.clear()
    x = Message("user", "x" * 25)
    mem.buffer = [a, x]
    mem.add_user_message("y" * 5)  # 10 + 25 + 5 = 40 > 30: a goes
    assert sorted(seen) == ["x" * 25, "y" * 5]
    assert recorder.calls == [("", (a,))]
    assert contents(mem) == ["x" * 25, "y" * 5]
    mem.add_user_message("z")  # 31 > 30: x goes
    assert contents(mem) == ["y" * 5, "z"]
    assert mem.summary == "a" * 10 + "|" + "x" * 25
    assert sorted(seen) == ["x" * 25, "y" * 5, "z"]
    assert mem.stats().buffer_tokens == 6


def test_mutating_the_buffer_in_place_is_detected(recorder: Any) -> None:
    count, seen = counting(len)
    mem = RollingMemory(max_tokens=20, summarize_fn=recorder, token_counter=count)
    for c in "abc":
        mem.add_user_message(c * 5)
    seen.clear()
    mem.buffer.append(Message("user", "d" * 4))
    mem.buffer[0] = Message("user", "A" * 3)
    del mem.buffer[1]  # drops "bbbbb"
    assert contents(mem) == ["AAA", "ccccc", "dddd"]
    mem.add_user_message("e" * 8)  # 3 + 5 + 4 + 8 = 20: fits
    assert recorder.calls == []
    mem.add_user_message("f")  # 21 > 20: AAA goes
    assert recorder.calls == [("", (Message("user", "AAA"),))]
    assert contents(mem) == ["ccccc", "dddd", "e" * 8, "f"]
    assert sorted(seen) == ["AAA", "dddd", "e" * 8, "f"]
    assert mem.stats().buffer_tokens == 18


def test_assigning_the_summary(char_counter: Callable[[str], int], recorder: Any) -> None:
    mem = RollingMemory(max_tokens=3, summarize_fn=recorder, token_counter=char_counter)
    mem.add_user_message("ab")
    mem.summary = "given"
    assert mem.stats().summary_tokens == 5
    mem.add_user_message("cd")
    assert recorder.calls == [("given", (Message("user", "ab"),))]
    assert mem.summary == "given|ab"
    assert mem.stats().summary_tokens == 8


def test_assigning_a_non_str_summary_is_refused() -> None:
    mem = RollingMemory()
    mem.summary = "s"
    with pytest.raises(TypeError, match="summary"):
        mem.summary = 3  # type: ignore[assignment]
    assert mem.summary == "s"


def test_a_buffer_holding_a_non_message_is_refused() -> None:
    """Found at assignment or, at the latest, by the next add, which then keeps nothing."""
    mem = RollingMemory()
    m = mem.add_user_message("kept")
    with pytest.raises(TypeError, match=r"buffer\[1\]"):  # noqa: PT012
        mem.buffer = [m, "not a message"]  # type: ignore[list-item]
        mem.add_user_message("refused")
    assert mem.buffer in ([m], [m, "not a message"])
    mem.buffer = [m]
    mem.add_user_message("next")
    assert contents(mem) == ["kept", "next"]


# --- the change record (rollmem.changes, used by rollmem.sessions) ------------------------------------------


def test_record_holds_every_change_in_order(char_counter: Callable[[str], int], recorder: Any) -> None:
    mem = RollingMemory(max_tokens=100, summarize_fn=recorder, token_counter=char_counter)
    assert not mem.recording
    before = mem.add_user_message("before")
    with mem.record() as changes:
        assert mem.recording
        u = mem.add_user_message("hi", id="u1")
        batch = (Message("assistant", "yo", id="a1"), Message("user", "more"))
        mem.extend(batch)
        mem.pin("u1")
        mem.unpin("u1")
        assert mem.fold(keep_last=1) == 3
        mem.summary = "S"
        mem.buffer = [Message("user", "fresh")]
        mem.clear()
        mem.restore({"version": 2, "summary": "R", "buffer": []})
    assert not mem.recording
    assert changes == [
        Appended((u,), (2,)),
        Appended(batch, (2, 4)),
        Pinned("u1"),
        Unpinned("u1"),
        Folded("before|hi|yo", (0, 1, 2), (before, u, batch[0]), keep_last=1),
        SummaryAssigned("S"),
        BufferAssigned((Message("user", "fresh"),)),
        Cleared(),
        Restored("R", ()),
    ]
    assert mem.stop_recording() == ()


def test_recording_is_one_at_a_time_and_replay_takes_records_only() -> None:
    mem = RollingMemory(max_tokens=100)
    mem.start_recording()
    with pytest.raises(RuntimeError, match="already recording"):
        mem.start_recording()
    mem.add_user_message("x")
    assert mem.stop_recording() == (Appended((Message("user", "x"),), (1,)),)
    with pytest.raises(TypeError, match=r"^changes\[1\]: expected a rollmem\.changes record, got tuple$"):
        mem.replay([Cleared(), ("clear",)])  # type: ignore[list-item]
    assert [m.content for m in mem.buffer] == ["x"]


def test_an_automatic_drop_is_recorded_and_left_to_the_target_policy() -> None:
    source = RollingMemory(max_tokens=2)
    with source.record() as changes:
        for word in "abc":
            source.add_user_message(word)
    assert changes[-1] == Dropped((0,), (Message("user", "a"),))
    target = RollingMemory(max_tokens=2)
    target.replay(changes)
    assert target.to_dict() == source.to_dict()


def test_replay_reapplies_entries_through_the_public_methods(char_counter: Callable[[str], int]) -> None:
    source = RollingMemory(
        max_tokens=6, summarize_fn=lambda s, m: s + "*" * len(m), token_counter=char_counter
    )
    with source.record() as changes:
        source.add_user_message("aaa", id="a")
        source.pin("a")
        source.extend([Message("user", "bb"), Message("assistant", "cc")])
        source.add_user_message("dd")
        source.fold(keep_last=1)
    target = RollingMemory(
        max_tokens=6, summarize_fn=lambda s, m: s + "*" * len(m), token_counter=char_counter
    )
    target.replay(changes)
    assert target.to_dict() == source.to_dict()
    assert target.buffer == [Message("user", "aaa", id="a", pinned=True), Message("user", "dd")]
    assert target.summary == "**"


def test_pin_and_unpin_recount_nothing() -> None:
    count, seen = counting(len)
    mem = RollingMemory(token_counter=count)
    mem.add_user_message("a", id="a")
    mem.add_user_message("b")
    mem.pin("a")
    mem.unpin("a")
    mem.pin("a")
    mem.add_user_message("c")
    assert seen == ["a", "b", "c"]
    assert mem.stats().buffer_tokens == 3

"""Every fold is an OpenTelemetry span when the application traces, and costs nothing otherwise.

Driven with the real SDK through the ``traced`` fixture of ``conftest.py`` (a global tracer
provider, as an application sets one, and an ``InMemorySpanExporter``; skips without
``opentelemetry-sdk``), unset after each test so no other test runs traced.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import rollmem
from rollmem import AsyncRollingMemory, RollingMemory, WindowMemory
from rollmem.message import Message
from rollmem.sessions import Sessions
from rollmem.stores import MemoryStore

SOURCE = str(Path(rollmem.__file__).resolve().parents[1])


def fold(summary: str, messages: Sequence[Message]) -> str:
    return summary + "".join(m.content[0] for m in messages)


def test_importing_rollmem_or_folding_loads_no_opentelemetry() -> None:
    code = (
        "import sys, rollmem\n"
        "m = rollmem.RollingMemory(3, lambda s, ms: s + 'x', len)\n"
        "for text in ('aa', 'bb', 'cc'): m.add_user_message(text)\n"
        "assert m.stats().folds == 2, m.stats()\n"
        "print(sorted(n for n in sys.modules if n.startswith('opentelemetry')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        env={"PYTHONPATH": SOURCE},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"


def test_a_fold_is_a_child_of_the_application_span_with_integer_attributes(traced: Any) -> None:
    memory = RollingMemory(6, fold, len)
    with traced.tracer.start_as_current_span("turn") as turn, memory.record() as changes:
        for text in ("aaa", "bbb", "cc"):
            memory.add_user_message(text)
    [span] = traced.spans("rollmem.fold")
    assert span.parent.span_id == turn.get_span_context().span_id
    assert span.context.trace_id == turn.get_span_context().trace_id
    assert dict(span.attributes) == {
        "rollmem.memory": "RollingMemory",
        "rollmem.fold.messages": 1,
        "rollmem.fold.tokens_before": 8,
        "rollmem.fold.tokens_after": 5,
        "rollmem.fold.summary_tokens": 1,
    }
    assert span.status.is_ok
    assert [type(change).__name__ for change in changes][-1] == "Folded"
    assert memory.stats().summary_tokens == 1


def test_the_summarizer_and_the_hook_run_inside_the_fold_span(traced: Any) -> None:
    def summarize(summary: str, messages: Sequence[Message]) -> str:
        with traced.tracer.start_as_current_span("llm"):
            return fold(summary, messages)

    def on_evict(messages: Sequence[Message]) -> None:
        with traced.tracer.start_as_current_span("hook"):
            pass

    memory = RollingMemory(2, summarize, len, on_evict=on_evict)
    for text in ("a", "b", "c"):
        memory.add_user_message(text)
    [span] = traced.spans("rollmem.fold")
    assert span.parent is None  # no application span: the fold is a root
    for child in (*traced.spans("llm"), *traced.spans("hook")):
        assert child.parent.span_id == span.context.span_id


def test_a_failing_summarizer_is_recorded_on_the_fold_span(traced: Any) -> None:
    def summarize(summary: str, messages: Sequence[Message]) -> str:
        raise ConnectionError("the LLM is down")

    memory = RollingMemory(1, summarize, len)
    memory.add_user_message("a")
    before = memory.to_dict()
    with traced.tracer.start_as_current_span("turn"), pytest.raises(ConnectionError):
        memory.add_user_message("b")
    [span] = traced.spans("rollmem.fold")
    from opentelemetry.trace import StatusCode

    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ConnectionError: the LLM is down"
    [event] = span.events
    assert (event.name, event.attributes["exception.type"]) == ("exception", "ConnectionError")
    assert "rollmem.fold.messages" not in span.attributes
    assert memory.to_dict()["buffer"] == [*before["buffer"], {"role": "user", "content": "b"}]
    assert memory.stats().failed_folds == 1


def test_a_bad_summary_is_recorded_as_the_error_it_raises(traced: Any) -> None:
    memory = RollingMemory(1, lambda summary, messages: 42, len)  # type: ignore[arg-type,return-value]
    memory.add_user_message("a")
    with pytest.raises(TypeError, match="summarize_fn returned int; expected str"):
        memory.add_user_message("b")
    [span] = traced.spans("rollmem.fold")
    assert span.status.description == "TypeError: summarize_fn returned int; expected str"


def test_an_async_background_fold_is_a_child_of_the_span_that_added(traced: Any) -> None:
    async def summarize(summary: str, messages: Sequence[Message]) -> str:
        await asyncio.sleep(0)
        with traced.tracer.start_as_current_span("llm"):
            return fold(summary, messages)

    async def main() -> None:
        memory = AsyncRollingMemory(2, summarize, len, background=True)
        with traced.tracer.start_as_current_span("turn") as turn:
            for text in ("a", "b", "c"):
                await memory.add_user_message(text)
        await memory.flush()
        [span] = traced.spans("rollmem.fold")
        assert span.parent.span_id == turn.get_span_context().span_id
        assert span.attributes["rollmem.memory"] == "AsyncRollingMemory"
        assert span.attributes["rollmem.fold.messages"] == 1
        [llm] = traced.spans("llm")
        assert llm.parent.span_id == span.context.span_id
        assert memory.summary == "a"

    asyncio.run(main())


def test_a_fold_inside_sessions_is_a_span(traced: Any) -> None:
    sessions = Sessions(MemoryStore(), lambda: RollingMemory(4, fold, len))
    with traced.tracer.start_as_current_span("request") as request:
        for text in ("aa", "bb", "cc"):
            with sessions.open("user-1") as memory:
                memory.add_user_message(text)
    [span] = traced.spans("rollmem.fold")
    assert span.parent.span_id == request.get_span_context().span_id
    assert span.attributes["rollmem.fold.messages"] == 1
    with sessions.open("user-1") as memory:
        assert memory.summary == "a"


def test_a_memory_that_counts_no_tokens_reports_the_messages_only(traced: Any) -> None:
    memory = WindowMemory(2)
    for text in ("a", "b", "c"):
        memory.add_user_message(text)
    [span] = traced.spans("rollmem.fold")
    assert dict(span.attributes) == {"rollmem.memory": "WindowMemory", "rollmem.fold.messages": 1}


def test_a_counter_failing_on_the_new_summary_is_recorded_and_the_fold_stands(traced: Any) -> None:
    def counter(text: str) -> int:
        if text == "SUMMARY":
            raise RuntimeError("the counter broke")
        return 1

    memory = RollingMemory(2, lambda summary, messages: "SUMMARY", counter)
    for text in ("a", "b", "c"):
        memory.add_user_message(text)
    assert memory.summary == "SUMMARY"
    [span] = traced.spans("rollmem.fold")
    assert span.status.is_ok
    assert span.attributes["rollmem.fold.messages"] == 1
    assert "rollmem.fold.summary_tokens" not in span.attributes
    assert [event.attributes["exception.type"] for event in span.events] == ["RuntimeError"]


def test_tracing_measures_each_new_summary_once_and_nothing_else(traced: Any) -> None:
    calls: list[str] = []

    def counter(text: str) -> int:
        calls.append(text)
        return len(text)

    memory = RollingMemory(4, fold, counter)
    for text in ("aa", "bb", "cc", "dd"):
        memory.add_user_message(text)
    assert memory.stats().summary_tokens == 2  # "ab", measured when its fold was traced
    assert len(traced.spans("rollmem.fold")) == memory.stats().folds == 2
    assert calls == ["aa", "bb", "cc", "a", "dd", "ab"]


@pytest.mark.parametrize("traced", [False], indirect=True)
def test_without_a_provider_a_fold_is_not_traced(traced: Any) -> None:
    calls: list[str] = []
    memory = RollingMemory(2, fold, lambda text: calls.append(text) or 1)
    for text in ("a", "b", "c"):
        memory.add_user_message(text)
    assert calls == ["a", "b", "c"]  # no summary measured for a span
    assert memory.stats().folds == 1
    assert "opentelemetry.trace" in sys.modules
    assert traced.exporter.get_finished_spans() == ()

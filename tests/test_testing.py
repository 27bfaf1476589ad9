"""The test helpers for applications in :mod:`rollmem.testing`: fakes, in-memory sessions and the
assertions, each shown to pass on what is right and to fail, saying why, on what is wrong."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from rollmem import AsyncRollingMemory, Message, RollingMemory, ToolCall
from rollmem.adapters import from_anthropic, from_openai, to_anthropic, to_openai, to_openai_responses
from rollmem.counters import counter_identity
from rollmem.sessions import AsyncSessions, Sessions
from rollmem.stores import MemoryStore
from rollmem.testing import (
    FakeLLM,
    RecordingCounter,
    RecordingSummarizer,
    SummarizerDown,
    assert_anthropic_accepts,
    assert_nothing_lost,
    assert_openai_accepts,
    assert_responses_accepts,
    assert_summarized_once,
    async_memory_sessions,
    memory_sessions,
)

CALL = ToolCall("c1", "weather", '{"city": "Oslo"}')

# -- RecordingSummarizer -----------------------------------------------------------------------


def test_the_summarizer_appends_one_line_per_message_and_records_the_calls() -> None:
    summarize = RecordingSummarizer()
    first = [Message("user", "hi"), Message("assistant", "hello")]
    assert summarize("", first) == "user: hi\nassistant: hello"
    assert summarize("earlier", [Message("user", "bye")]) == "earlier\nuser: bye"
    assert summarize.calls == [("", first), ("earlier", [Message("user", "bye")])]
    assert summarize.folded == [*first, Message("user", "bye")]


def test_the_summarizer_fails_on_demand_and_folded_keeps_only_successes() -> None:
    summarize = RecordingSummarizer()
    memory = RollingMemory(2, summarize)
    memory.add_user_message("one")
    memory.add_assistant_message("two")
    summarize.fail = True
    with pytest.raises(SummarizerDown, match=r"RecordingSummarizer\.fail is set"):
        memory.add_user_message("three")
    assert (summarize.failures, len(summarize.calls), summarize.folded) == (1, 1, [])
    summarize.fail = False
    memory.add_user_message("four")
    assert [m.content for m in summarize.folded] == ["one", "two"]
    assert memory.summary == "user: one\nassistant: two"


def test_the_summarizer_serves_an_async_memory() -> None:
    summarize = RecordingSummarizer()

    async def run() -> AsyncRollingMemory:
        memory = AsyncRollingMemory(2, summarize.asummarize, background=True)
        for word in ["one", "two", "three"]:
            await memory.add_user_message(word)
        await memory.flush()
        return memory

    memory = asyncio.run(run())
    assert memory.summary == "user: one"
    assert [m.content for m in memory.buffer] == ["two", "three"]


# -- RecordingCounter and memory_sessions -------------------------------------------------------


def test_the_counter_counts_words_with_an_identity_sessions_trust() -> None:
    counter = RecordingCounter()
    assert counter("three little words") == 3
    assert (counter.calls, counter.texts) == (1, ["three little words"])
    assert counter_identity(counter) == "rollmem.testing.words"
    store = MemoryStore()
    Sessions(store, lambda: RollingMemory(100, token_counter=counter)).update(
        "s", lambda memory: memory.add_user_message("stored once")
    )
    counter.texts.clear()
    # Another process (a new Sessions, nothing cached) loads the stored costs instead of counting.
    with Sessions(store, lambda: RollingMemory(100, token_counter=counter)).open("s") as memory:
        memory.add_user_message("new")
    assert counter.texts == ["new"]


def test_memory_sessions_keep_state_between_opens() -> None:
    sessions = memory_sessions(lambda: RollingMemory(100), ttl=60)
    assert isinstance(sessions, Sessions)
    assert isinstance(sessions.store, MemoryStore)
    assert sessions.ttl == 60
    with sessions.open("s") as memory:
        memory.add_user_message("hi")
    with sessions.open("s") as memory:
        assert [m.content for m in memory.buffer] == ["hi"]


def test_async_memory_sessions_keep_state_between_opens() -> None:
    sessions = async_memory_sessions(lambda: AsyncRollingMemory(100))
    assert isinstance(sessions, AsyncSessions)

    async def run() -> list[str]:
        async with sessions.open("s") as memory:
            await memory.add_user_message("hi")
        async with sessions.open("s") as memory:
            return [m.content for m in memory.buffer]

    assert asyncio.run(run()) == ["hi"]


# -- FakeLLM -------------------------------------------------------------------------------------


def test_the_fake_llm_echoes_the_last_user_text_in_each_format() -> None:
    llm = FakeLLM()
    messages = [Message("system", "be brief"), Message("user", "first"), Message("assistant", "ok")]
    messages.append(Message("user", "second"))
    assert llm.openai(to_openai(messages)) == {"role": "assistant", "content": "echo: second"}
    answer = llm.anthropic(*to_anthropic(messages, cache=True))
    assert from_anthropic("", [answer]) == [Message("assistant", "echo: second")]
    assert llm.requests == [to_openai(messages), to_anthropic(messages, cache=True)]


def test_the_fake_llm_answers_from_its_script_then_refuses() -> None:
    llm = FakeLLM(["hello", Message("assistant", "", tool_calls=(CALL,))])
    request = to_openai([Message("user", "hi")])
    assert from_openai([llm.openai(request)]) == [Message("assistant", "hello")]
    assert from_openai([llm.openai(request)]) == [Message("assistant", "", tool_calls=(CALL,))]
    with pytest.raises(AssertionError, match="no scripted reply left for request 3"):
        llm.openai(request)


def test_the_fake_llm_renders_a_tool_call_for_anthropic() -> None:
    llm = FakeLLM([Message("assistant", "checking", tool_calls=(CALL,))])
    answer = llm.anthropic(*to_anthropic([Message("user", "weather?")]))
    assert from_anthropic("", [answer]) == [
        Message("assistant", "checking", tool_calls=(ToolCall("c1", "weather", '{"city":"Oslo"}'),))
    ]


def test_the_fake_llm_refuses_a_request_the_provider_would_refuse() -> None:
    llm = FakeLLM()
    orphan = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c9", "content": "18C"}]
    with pytest.raises(AssertionError, match=r"messages\[0\]: tool calls \[\] answered by \['c9'\]"):
        llm.openai(orphan)
    with pytest.raises(AssertionError, match="turns"):
        llm.anthropic("", [{"role": "assistant", "content": "I start"}])
    assert llm.requests == []


# -- the assertions about a memory ---------------------------------------------------------------


def test_nothing_lost_passes_on_a_memory_that_folded() -> None:
    summarize = RecordingSummarizer()
    memory = RollingMemory(3, summarize)
    added = [memory.add_user_message(word) for word in ["a", "b", "a", "c", "d", "e"]]
    assert len(summarize.calls) == 3
    assert_nothing_lost(added, memory, summarize)  # the two equal "a" are counted as two


def test_nothing_lost_names_a_lost_and_a_duplicated_message() -> None:
    summarize = RecordingSummarizer()
    memory = RollingMemory(10, summarize)
    kept = memory.add_user_message("kept")
    summarize("", [kept])  # given to the summarizer, yet still in the buffer
    with pytest.raises(AssertionError, match=r"'user: kept': added 1 time\(s\), found 2 time\(s\)"):
        assert_nothing_lost([kept], memory, summarize)
    with pytest.raises(AssertionError, match=r"'user: gone': added 1 time\(s\), found 0 time\(s\)"):
        assert_nothing_lost([Message("user", "gone")], memory, summarize)


def test_summarized_once_names_a_message_folded_twice() -> None:
    summarize = RecordingSummarizer()
    twice = Message("user", "twice", id="t")
    summarize("", [twice, Message("user", "once")])
    assert_summarized_once(summarize)
    summarize("s", [twice])
    with pytest.raises(AssertionError, match=r"summarized more than once: \['user: twice'\]"):
        assert_summarized_once(summarize)


# -- the provider rules --------------------------------------------------------------------------

TRICKY = [
    Message("system", "summary"),
    Message("assistant", "", tool_calls=(CALL, ToolCall("c2", "f"))),
    Message("tool", "18C", tool_call_id="c1"),
    Message("user", "meanwhile"),
    Message("tool", "late", tool_call_id="c2"),
    Message("tool", "orphan", tool_call_id="zz"),
    Message("assistant", "", tool_calls=(ToolCall("c3", "f"),)),
]


def test_the_adapters_requests_pass_the_provider_rules() -> None:
    assert_openai_accepts(to_openai(TRICKY))
    assert_anthropic_accepts(*to_anthropic(TRICKY))
    assert_anthropic_accepts(*to_anthropic(TRICKY, cache=True))
    assert_responses_accepts(to_openai_responses(TRICKY))


@pytest.mark.parametrize(
    ("request_", "problem"),
    [
        (
            [{"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}],
            r"tool calls \['c1'\] answered by \[\]",
        ),
        ([{"role": "tool", "tool_call_id": "c1", "content": ""}], r"messages\[0\]: a tool message opens"),
        (
            [
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
                {"role": "tool", "tool_call_id": "c2", "content": ""},
            ],
            r"tool calls \['c1'\] answered by \['c2'\]",
        ),
        (
            [{"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}] * 2}],
            "tool call ids repeated",
        ),
    ],
)
def test_the_openai_rule_refuses(request_: list[dict[str, Any]], problem: str) -> None:
    with pytest.raises(AssertionError, match=problem):
        assert_openai_accepts(request_)


USE = {"type": "tool_use", "id": "u1", "name": "f", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "u1", "content": "ok"}


@pytest.mark.parametrize(
    ("system", "turns", "problem"),
    [
        ("", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "turns"),
        ("", [{"role": "user", "content": [{"type": "text", "text": ""}]}], "an empty text block"),
        ("", [{"role": "user", "content": " \n"}], "an empty text block"),  # whitespace is rejected too
        ([{"type": "text", "text": "\n"}], [{"role": "user", "content": "q"}], "system: an empty"),
        (
            "",
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [USE]},
                {"role": "user", "content": [{**RESULT, "content": " "}]},
            ],
            "an empty text block or tool_result",
        ),
        (
            "",
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": [USE, USE]}],
            "ids repeated",
        ),
        (
            "",
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": [USE]}],
            r"tool_use \['u1'\] without",
        ),
        (
            "",
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [USE]},
                {"role": "user", "content": [{"type": "text", "text": "x"}, RESULT]},
            ],
            "text before a tool_result",
        ),
        (
            [{"type": "text", "text": "s", "cache_control": {}}] * 5,
            [{"role": "user", "content": "q"}],
            "5 cache breakpoints",
        ),
    ],
)
def test_the_anthropic_rule_refuses(system: Any, turns: list[dict[str, Any]], problem: str) -> None:
    with pytest.raises(AssertionError, match=problem):
        assert_anthropic_accepts(system, turns)


@pytest.mark.parametrize(
    ("items", "problem"),
    [
        ([{"type": "function_call_output", "call_id": "c1", "output": ""}], "no function_call for 'c1'"),
        (
            [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": ""}],
            r"without output: \['c1'\]",
        ),
        ([{"role": "assistant", "content": "hi"}], "the first item is not the user's"),
        (
            [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": ""}] * 2,
            "a second call 'c1'",
        ),
    ],
)
def test_the_responses_rule_refuses(items: list[dict[str, Any]], problem: str) -> None:
    with pytest.raises(AssertionError, match=problem):
        assert_responses_accepts(items)


def test_the_application_helpers_import_no_test_framework() -> None:
    """``rollmem._app_testing`` (what ``rollmem.testing`` re-exports for applications) needs
    the standard library only."""
    code = (
        "import sys, rollmem._app_testing\n"
        "print(sorted(n for n in ('pytest', '_pytest', 'hypothesis', 'sqlite3') if n in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (result.stdout.strip(), result.stderr) == ("[]", "")

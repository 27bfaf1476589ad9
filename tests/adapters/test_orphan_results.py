"""Every buffer a memory can hold becomes a request the provider accepts: unpaired tool calls and
results (a result arriving after its call was evicted, a user message between a call and its
result, a call still waiting) are sent as text, nothing dropped. The LangChain adapter converts
faithfully (it builds framework objects, not a request): an unpaired result stays a ToolMessage."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provider_rules import (
    assert_anthropic_accepts,
    assert_gemini_accepts,
    assert_openai_accepts,
    assert_responses_accepts,
    blocks_of,
)
from rollmem import Message, RollingMemory, ToolCall
from rollmem.adapters import to_anthropic, to_openai, to_openai_responses

try:
    import langchain_core.messages
except ImportError:  # pragma: no cover - the langchain extra is installed in CI
    langchain_core = None


def assert_accepted(messages: list[Message]) -> None:
    """The request of every adapter, for every provider (what langchain-core sends is checked as
    Chat Completions messages)."""
    request = to_openai(messages)
    assert_openai_accepts(request)
    assert_gemini_accepts(request)
    assert_anthropic_accepts(*to_anthropic(messages))
    assert_anthropic_accepts(*to_anthropic(messages, cache=True))
    assert_responses_accepts(to_openai_responses(messages))
    if langchain_core is not None:
        from rollmem.adapters.langchain import to_langchain

        chat = langchain_core.messages.convert_to_openai_messages(to_langchain(messages))
        assert_openai_accepts(chat)
        assert_gemini_accepts(chat)


def texts(messages: list[Message]) -> str:
    return "\n".join(str(message) for message in messages)


# -- the buffers of the issue ----------------------------------------------------------------------


def test_a_result_whose_call_was_evicted() -> None:
    memory = RollingMemory(max_tokens=8)
    memory.add_user_message("weather?")
    memory.add_assistant_message("", tool_calls=[ToolCall("c1", "get_weather", '{"city":"Seoul"}')])
    memory.add_user_message("one two three four five six seven")
    memory.add_tool_message("18C", tool_call_id="c1")
    assert [str(m) for m in memory.buffer] == ["tool: 18C"]
    buffer = memory.get_messages()
    assert_accepted(buffer)
    assert to_openai(buffer) == [{"role": "user", "content": "[result of tool call c1] 18C"}]
    assert to_anthropic(buffer) == ("", [{"role": "user", "content": "[result of tool call c1] 18C"}])


def test_a_user_message_between_a_call_and_its_result() -> None:
    call = ToolCall("c1", "get_weather", "{}")
    messages = [
        Message("user", "weather in seoul"),
        Message("assistant", "Checking.", tool_calls=(call,)),
        Message("user", "and tomorrow please"),
        Message("tool", "sunny", tool_call_id="c1", metadata={"is_error": True}),
    ]
    assert_accepted(messages)
    assert to_openai(messages) == [
        {"role": "user", "content": "weather in seoul"},
        {"role": "assistant", "content": "Checking.\n[tool call c1: get_weather({}), no result]"},
        {"role": "user", "content": "and tomorrow please"},
        {"role": "user", "content": "[error from tool call c1] sunny"},
    ]
    _, turns = to_anthropic(messages)
    assert turns[-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "and tomorrow please"},
            {"type": "text", "text": "[error from tool call c1] sunny"},
        ],
    }


def test_a_call_still_waiting_for_its_result() -> None:
    messages = [Message("user", "hi"), Message("assistant", "", tool_calls=(ToolCall("c1", "f", '{"a":1}'),))]
    assert_accepted(messages)
    assert to_openai(messages)[-1] == {
        "role": "assistant",
        "content": '[tool call c1: f({"a":1}), no result]',
    }


def test_paired_calls_and_results_are_sent_as_they_are() -> None:
    calls = (ToolCall("c1", "f", "{}"), ToolCall("c2", "g", "{}"))
    messages = [
        Message("user", "q"),
        Message("assistant", "", tool_calls=calls),
        Message("system", "between (lifted into Anthropic's system)"),
        Message("tool", "r2", tool_call_id="c2"),
        Message("tool", "r1", tool_call_id="c1"),
        Message("user", "thanks"),
    ]
    assert_anthropic_accepts(*to_anthropic(messages))
    _, turns = to_anthropic(messages)
    assert [block["type"] for block in blocks_of(turns[2])] == ["tool_result", "tool_result", "text"]
    without_system = [m for m in messages if m.role != "system"]
    assert_openai_accepts(to_openai(without_system))
    assert [item["role"] for item in to_openai(without_system)] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
    ]


def test_a_second_result_for_one_call_is_sent_as_text() -> None:
    messages = [
        Message("user", "q"),
        Message("assistant", "", tool_calls=(ToolCall("c1", "f", "{}"),)),
        Message("tool", "first", tool_call_id="c1"),
        Message("tool", "again", tool_call_id="c1"),
    ]
    assert_accepted(messages)
    assert to_openai(messages)[-1] == {"role": "user", "content": "[result of tool call c1] again"}


def test_langchain_sends_an_unpaired_result_as_text_too() -> None:
    pytest.importorskip("langchain_core")
    from rollmem.adapters.langchain import from_langchain, to_langchain

    messages = [Message("user", "q"), Message("tool", "18C", tool_call_id="c1")]
    converted = to_langchain(messages)
    assert type(converted[1]).__name__ == "HumanMessage"
    assert from_langchain(converted) == [
        Message("user", "q"),
        Message("user", "[result of tool call c1] 18C"),
    ]


# -- any buffer a memory can hold ------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.integers(0, 5)),
        st.tuples(st.just("assistant"), st.integers(0, 5)),
        st.tuples(st.just("call"), st.integers(1, 3)),
        st.tuples(st.just("result"), st.integers(0, 4)),
        st.tuples(st.just("system"), st.integers(1, 3)),
    ),
    max_size=20,
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(OPS, st.integers(1, 12), st.booleans())
def test_every_buffer_a_memory_holds_makes_an_accepted_request(
    ops: list[tuple[str, int]], max_tokens: int, summarize: bool
) -> None:
    memory = RollingMemory(max_tokens, (lambda s, ms: s + "+") if summarize else None)
    calls: list[str] = []
    for number, (kind, size) in enumerate(ops):
        words = " ".join(["w"] * size)
        if kind == "call":
            ids = [f"c{number}.{i}" for i in range(size)]
            calls.extend(ids)
            memory.add_assistant_message("", tool_calls=[ToolCall(i, "f", "{}") for i in ids])
        elif kind == "result":
            memory.add_tool_message(words, tool_call_id=calls.pop(0) if calls else "gone")
        else:
            memory.add_message(kind, words)
        messages = memory.get_messages()
        assert_accepted(messages)
        sent = texts(messages)
        openai_text = "\n".join(str(item["content"]) for item in to_openai(messages))
        for message in messages:  # nothing dropped: every content still goes out
            assert message.content in openai_text or message.content in sent

"""Every buffer a memory can hold becomes a request the provider accepts: unpaired tool calls and
results (a result arriving after its call was evicted, a user message between a call and its
result, a call still waiting) are sent as text, nothing dropped. The LangChain adapter converts
faithfully (it builds framework objects, not a request): an unpaired result stays a ToolMessage."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _optional import has, need
from provider_rules import (
    assert_anthropic_accepts,
    assert_gemini_accepts,
    assert_openai_accepts,
    assert_responses_accepts,
    blocks_of,
)
from rollmem import Message, RollingMemory, ToolCall
from rollmem.adapters import to_anthropic, to_openai, to_openai_responses


def assert_accepted(messages: list[Message]) -> None:
    """The request of every adapter, for every provider (what langchain-core sends is checked as
    Chat Completions messages)."""
    request = to_openai(messages)
    assert_openai_accepts(request)
    assert_gemini_accepts(request)
    assert_anthropic_accepts(*to_anthropic(messages))
    assert_anthropic_accepts(*to_anthropic(messages, cache=True))
    assert_responses_accepts(to_openai_responses(messages))
    if has("langchain"):
        from rollmem.adapters.langchain import to_langchain

        convert = need("langchain", "langchain_core.messages").convert_to_openai_messages
        chat = convert(to_langchain(messages))
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


@pytest.mark.extra("langchain")
def test_langchain_sends_an_unpaired_result_as_text_too() -> None:
    from rollmem.adapters.langchain import from_langchain, to_langchain

    messages = [Message("user", "q"), Message("tool", "18C", tool_call_id="c1")]
    converted = to_langchain(messages)
    assert type(converted[1]).__name__ == "HumanMessage"
    assert from_langchain(converted) == [
        Message("user", "q"),
        Message("user", "[result of tool call c1] 18C"),
    ]


# -- stray and repeated results (issue 28): never between a call and its results -------------------


def call(*ids: str) -> Message:
    return Message("assistant", "", tool_calls=tuple(ToolCall(i, "f", "{}") for i in ids))


def result(call_id: str, content: str) -> Message:
    return Message("tool", content, tool_call_id=call_id)


def test_a_late_result_of_an_earlier_call_comes_after_the_run() -> None:
    messages = [Message("user", "q"), call("c1"), call("c2"), result("c1", "r1"), result("c2", "r2")]
    assert_accepted(messages)
    assert to_openai(messages) == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "[tool call c1: f({}), no result]"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "r2", "tool_call_id": "c2"},
        {"role": "user", "content": "[result of tool call c1] r1"},
    ]
    # Anthropic merges the two assistant messages into one turn: both calls are answered there.
    assert to_anthropic(messages) == (
        "",
        [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "c1", "name": "f", "input": {}},
                    {"type": "tool_use", "id": "c2", "name": "f", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "r1"},
                    {"type": "tool_result", "tool_use_id": "c2", "content": "r2"},
                ],
            },
        ],
    )
    # The Responses API pairs by id: nothing to repair.
    assert [item.get("type", "message") for item in to_openai_responses(messages)] == [
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]


def test_a_second_delivery_of_a_result_is_sent_once_and_kept_in_memory() -> None:
    memory = RollingMemory(max_tokens=1000)
    memory.extend(
        [Message("user", "q"), call("a", "b"), result("a", "ra"), result("a", "ra"), result("b", "rb")]
    )
    messages = memory.get_messages()
    assert_accepted(messages)
    assert [m["role"] for m in to_openai(messages)] == ["user", "assistant", "tool", "tool"]
    assert [block["type"] for block in blocks_of(to_anthropic(messages)[1][-1])] == ["tool_result"] * 2
    assert [item.get("type") for item in to_openai_responses(messages)][-2:] == ["function_call_output"] * 2
    assert len(memory.buffer) == 5  # the request leaves the repeat out; the memory keeps it


def test_a_second_result_with_other_content_is_a_note_after_the_run() -> None:
    messages = [
        Message("user", "q"),
        call("a", "b"),
        result("a", "ra"),
        result("a", "retried"),
        result("b", "rb"),
    ]
    assert_accepted(messages)
    assert to_openai(messages)[2:] == [
        {"role": "tool", "content": "ra", "tool_call_id": "a"},
        {"role": "tool", "content": "rb", "tool_call_id": "b"},
        {"role": "user", "content": "[result of tool call a] retried"},
    ]
    assert blocks_of(to_anthropic(messages)[1][-1]) == [
        {"type": "tool_result", "tool_use_id": "a", "content": "ra"},
        {"type": "tool_result", "tool_use_id": "b", "content": "rb"},
        {"type": "text", "text": "[result of tool call a] retried"},
    ]
    assert to_openai_responses(messages)[-1] == {"role": "user", "content": "[result of tool call a] retried"}


@pytest.mark.extra("langchain")
def test_langchain_sends_the_note_after_the_run_too() -> None:
    from rollmem.adapters.langchain import to_langchain

    messages = [Message("user", "q"), call("c1"), call("c2"), result("c1", "r1"), result("c2", "r2")]
    assert [type(m).__name__ for m in to_langchain(messages)] == [
        "HumanMessage",
        "AIMessage",
        "AIMessage",
        "ToolMessage",
        "HumanMessage",
    ]


def test_a_call_id_twice_in_one_message_is_one_call() -> None:
    messages = [Message("user", "q"), call("a", "a"), result("a", "r")]
    assert_accepted(messages)
    assert to_openai(messages)[1]["content"] == "[tool call a: f({}), no result]"
    assert [c["id"] for c in to_openai(messages)[1]["tool_calls"]] == ["a"]


IDS = st.sampled_from(["a", "b", "c"])
BUFFERS = st.lists(
    st.one_of(
        st.builds(Message, st.sampled_from(["user", "system"]), st.sampled_from(["hi", "", " "])),
        st.builds(
            lambda text, ids: Message(
                "assistant", text, tool_calls=tuple(ToolCall(i, "f", "{}") for i in ids)
            ),
            st.sampled_from(["", "ok", "\n"]),
            st.lists(IDS, max_size=3),
        ),
        st.builds(
            lambda call_id, text, error: Message(
                "tool", text, tool_call_id=call_id, metadata={"is_error": error}
            ),
            IDS,
            st.sampled_from(["r", "s", " "]),
            st.booleans(),
        ),
    ),
    max_size=12,
)


def sent_results(request: list[dict[str, Any]]) -> tuple[set[tuple[str, str]], list[str]]:
    """The (call id, content) of every result a Chat Completions request sends, and its notes."""
    results = {(item["tool_call_id"], item["content"]) for item in request if item["role"] == "tool"}
    notes = [
        item["content"]
        for item in request
        if item["role"] == "user" and item["content"].startswith(("[result of", "[error from"))
    ]
    for note in notes:
        call_id, _, content = note.split(" ", 4)[-1].partition("] ")
        results.add((call_id, content))
    return results, notes


@settings(max_examples=400, derandomize=True, deadline=None)
@given(BUFFERS)
def test_stray_and_repeated_results_never_split_a_call_from_its_results(messages: list[Message]) -> None:
    """Any buffer with late, stray and repeated results and repeated call ids: every renderer's
    request is accepted; every call and every distinct result goes out, no note twice."""
    assert_accepted(messages)
    request = to_openai(messages)
    results, notes = sent_results(request)
    assert results == {(m.tool_call_id, m.content) for m in messages if m.role == "tool"}
    assert len(notes) == len(set(notes))
    calls = sum(len(item.get("tool_calls", [])) for item in request)
    texts = sum(
        str(item["content"]).count("), no result]") for item in request if item["role"] == "assistant"
    )
    assert calls + texts == sum(len(m.tool_calls) for m in messages)


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

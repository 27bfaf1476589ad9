"""Every buffer a memory can hold becomes a request the provider accepts: unpaired tool calls and
results (a result arriving after its call was evicted, a user message between a call and its
result, a call still waiting) are sent as text, nothing dropped. The LangChain adapter converts
faithfully (it builds framework objects, not a request): an unpaired result stays a ToolMessage."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmem import Message, RollingMemory, ToolCall
from rollmem.adapters import to_anthropic, to_openai

# -- what the providers accept, as they document it ------------------------------------------------


def assert_openai_accepts(request: list[dict[str, Any]]) -> None:
    """Each assistant message with ``tool_calls`` is followed directly by one ``tool`` message per
    call; every ``tool`` message answers a call of the assistant message before its run."""
    index = 0
    while index < len(request):
        item = request[index]
        assert item["role"] != "tool", f"request[{index}]: a tool message without its call right before it"
        index += 1
        calls = [call["id"] for call in item.get("tool_calls", [])]
        answered = []
        while index < len(request) and request[index]["role"] == "tool":
            answered.append(request[index]["tool_call_id"])
            index += 1
        assert sorted(answered) == sorted(calls), f"calls {calls} answered by {answered}"


def blocks_of(turn: dict[str, Any]) -> list[dict[str, Any]]:
    content = turn["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def assert_anthropic_accepts(system: str, turns: list[dict[str, Any]]) -> None:
    """Turns alternate from a user turn; every ``tool_use`` is answered by a ``tool_result`` in the
    next (user) turn, where the results come before any text; every result answers such a use."""
    assert isinstance(system, str)
    roles = [turn["role"] for turn in turns]
    assert roles == ["user", "assistant"] * (len(turns) // 2) + ["user"] * (len(turns) % 2)
    uses: list[str] = []
    for turn in turns:
        blocks = blocks_of(turn)
        assert blocks
        for block in blocks:
            assert block["type"] != "text" or block["text"]
        if turn["role"] == "assistant":
            assert not uses
            uses = [block["id"] for block in blocks if block["type"] == "tool_use"]
            continue
        kinds = [block["type"] for block in blocks]
        results = [block["tool_use_id"] for block in blocks if block["type"] == "tool_result"]
        assert kinds[: len(results)] == ["tool_result"] * len(results), "text before a tool_result"
        assert sorted(results) == sorted(uses), f"uses {uses} answered by {results}"
        uses = []
    assert not uses, "a tool_use without a tool_result after it"


def assert_accepted(messages: list[Message]) -> None:
    assert_openai_accepts(to_openai(messages))
    assert_anthropic_accepts(*to_anthropic(messages))


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

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from adapter_strategies import TEXT
from hypothesis import given
from hypothesis import strategies as st

from rollmem import Message, ToolCall
from rollmem.adapters import from_openai, to_openai

# A Chat Completions request in the published shape: a tool-calling exchange.
PAYLOAD: list[dict[str, Any]] = [
    {"role": "developer", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What's the weather like in Paris today?", "name": "alice"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_12345xyz",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"location":"Paris, France"}'},
            },
            {
                "id": "call_67890abc",
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"timezone": "Europe/Paris"}'},
            },
        ],
    },
    {"role": "tool", "content": "18°C and sunny", "tool_call_id": "call_12345xyz"},
    {"role": "tool", "content": "14:05", "tool_call_id": "call_67890abc"},
    {"role": "assistant", "content": "It is 18°C and sunny in Paris at 14:05."},
]

MESSAGES = [
    Message("developer", "You are a helpful assistant."),
    Message("user", "What's the weather like in Paris today?", metadata={"name": "alice"}),
    Message(
        "assistant",
        "",
        tool_calls=(
            ToolCall("call_12345xyz", "get_weather", '{"location":"Paris, France"}'),
            ToolCall("call_67890abc", "get_time", '{"timezone": "Europe/Paris"}'),
        ),
    ),
    Message("tool", "18°C and sunny", tool_call_id="call_12345xyz"),
    Message("tool", "14:05", tool_call_id="call_67890abc"),
    Message("assistant", "It is 18°C and sunny in Paris at 14:05."),
]


def test_to_openai_writes_the_published_request_shape() -> None:
    assert to_openai(MESSAGES) == PAYLOAD
    assert [list(item) for item in to_openai(MESSAGES)][1:4] == [
        ["role", "content", "name"],
        ["role", "content", "tool_calls"],
        ["role", "content", "tool_call_id"],
    ]


def test_from_openai_reads_the_published_request_shape() -> None:
    assert from_openai(PAYLOAD) == MESSAGES


def test_from_openai_reads_a_response_message_dump() -> None:
    # ChatCompletionMessage.model_dump(): every optional field present, most of them null.
    dumped = {
        "content": None,
        "refusal": None,
        "role": "assistant",
        "annotations": [],
        "audio": None,
        "function_call": None,
        "tool_calls": [
            {
                "id": "call_abc",
                "function": {"arguments": '{"q":"rollmem"}', "name": "search"},
                "type": "function",
            }
        ],
    }
    plain = {**dumped, "content": "Hello!", "tool_calls": None}
    assert from_openai([dumped, plain]) == [
        Message("assistant", "", tool_calls=(ToolCall("call_abc", "search", '{"q":"rollmem"}'),)),
        Message("assistant", "Hello!"),
    ]


def test_a_refusal_becomes_the_content_when_there_is_none() -> None:
    item = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    assert from_openai([item]) == [Message("assistant", "I can't help with that.")]


def test_text_parts_are_joined_with_newlines() -> None:
    item = {
        "role": "user",
        "content": [{"type": "text", "text": "First part."}, {"type": "text", "text": "Second part."}],
    }
    assert from_openai([item]) == [Message("user", "First part.\nSecond part.")]


def test_empty_content_is_null_only_beside_tool_calls() -> None:
    call = ToolCall("c1", "f", "{}")
    result = Message("tool", "r", tool_call_id="c1")
    opening = Message("user", "q")
    assert to_openai(
        [opening, Message("assistant", ""), Message("assistant", "", tool_calls=(call,)), result]
    )[1:3] == [
        {"role": "assistant", "content": ""},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
    ]
    with_text = to_openai([opening, Message("assistant", "Let me look.", tool_calls=(call,)), result])
    assert with_text[1]["content"] == "Let me look."


def test_fields_the_format_cannot_carry_are_not_sent() -> None:
    message = Message("user", "hi", id="m1", metadata={"name": "bob", "lang": "en"}, pinned=True)
    assert to_openai([message]) == [{"role": "user", "content": "hi", "name": "bob"}]
    assert to_openai([Message("user", "hi", metadata={"name": 7})]) == [{"role": "user", "content": "hi"}]


def test_missing_content_reads_as_empty_and_unknown_keys_are_ignored() -> None:
    assert from_openai([{"role": "assistant", "extra": 1}]) == [Message("assistant", "")]
    call = {"id": "c", "function": {"name": "f"}}  # "type" and "arguments" default
    assert from_openai([{"role": "assistant", "tool_calls": [call]}]) == [
        Message("assistant", "", tool_calls=(ToolCall("c", "f", ""),))
    ]


def test_accepts_any_iterable_and_returns_new_lists() -> None:
    assert to_openai(iter(MESSAGES)) == PAYLOAD
    assert from_openai(item for item in PAYLOAD) == MESSAGES
    assert to_openai([]) == []
    assert from_openai(()) == []


@pytest.mark.parametrize(
    ("items", "error", "message"),
    [
        (
            [*PAYLOAD[:3], {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": 5}}]}],
            TypeError,
            "items[3].tool_calls[0].function.name: expected str, got int",
        ),
        ({"role": "user"}, TypeError, "items: expected an iterable of mappings, got dict"),
        ("user", TypeError, "items: expected an iterable of mappings, got str"),
        ([["role", "user"]], TypeError, "items[0]: expected a mapping, got list"),
        ([{"content": "hi"}], ValueError, "items[0].role: missing required key"),
        ([{"role": 1}], TypeError, "items[0].role: expected str, got int"),
        (
            [{"role": "user", "content": 3}],
            TypeError,
            "items[0].content: expected str, a list of text parts or null, got int",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}],
                }
            ],
            ValueError,
            "items[0].content[1].type: unsupported part type 'image_url'; only text parts are supported",
        ),
        (
            [{"role": "user", "content": [{"type": "text"}]}],
            ValueError,
            "items[0].content[0].text: missing required key",
        ),
        (
            [{"role": "user", "content": ["hi"]}],
            TypeError,
            "items[0].content[0]: expected a mapping, got str",
        ),
        ([{"role": "user", "name": 1}], TypeError, "items[0].name: expected str or null, got int"),
        (
            [{"role": "assistant", "tool_calls": {}}],
            TypeError,
            "items[0].tool_calls: expected a list, got dict",
        ),
        (
            [{"role": "assistant", "tool_calls": ["c"]}],
            TypeError,
            "items[0].tool_calls[0]: expected a mapping, got str",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]}],
            ValueError,
            "items[0].tool_calls[0].type: expected 'function', got 'custom'",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c"}]}],
            ValueError,
            "items[0].tool_calls[0].function: missing required key",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}],
            ValueError,
            "items[0].tool_calls[0].id: missing required key",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}]}],
            TypeError,
            "items[0].tool_calls[0].function.arguments: expected str, got dict",
        ),
        (
            [{"role": "user", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}],
            ValueError,
            "items[0].tool_calls: only assistant messages carry tool calls in the OpenAI format",
        ),
        (
            [{"role": "assistant", "tool_call_id": "c"}],
            ValueError,
            "items[0].tool_call_id: only tool messages carry a tool_call_id in the OpenAI format",
        ),
        (
            [{"role": "tool", "tool_call_id": 5}],
            TypeError,
            "items[0].tool_call_id: expected str or null, got int",
        ),
    ],
)
def test_from_openai_errors_name_the_item_and_field(items: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        from_openai(items)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("messages", "error", "message"),
    [
        (
            [Message("user", "a"), {"role": "user", "content": "b"}],
            TypeError,
            "messages[1]: expected Message, got dict",
        ),
        (Message("user", "a"), TypeError, "messages: expected an iterable of Message, got Message"),
        (
            [Message("user", "a", tool_calls=(ToolCall("c", "f"),))],
            ValueError,
            "messages[0].tool_calls: only assistant messages carry tool calls in the OpenAI format",
        ),
        (
            [Message("user", "a"), Message("assistant", "b", tool_call_id="c")],
            ValueError,
            "messages[1].tool_call_id: only tool messages carry a tool_call_id in the OpenAI format",
        ),
    ],
)
def test_to_openai_errors_name_the_message(messages: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        to_openai(messages)
    assert str(caught.value) == message


# Every message shape the OpenAI format carries: any role and content, tool calls on assistant
# messages (any arguments string), tool_call_id (or none) on tool messages, a participant name.
_text = TEXT
_names = st.one_of(st.just({}), st.builds(lambda name: {"name": name}, _text))
_calls = st.lists(st.builds(ToolCall, _text, _text, _text), max_size=3).map(tuple)


@st.composite
def _openai_messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["user", "assistant", "system", "tool", "developer", "function"]))
    return Message(
        role,
        draw(_text),
        tool_calls=draw(_calls) if role == "assistant" else (),
        tool_call_id=draw(st.none() | _text) if role == "tool" else None,
        metadata=draw(_names),
    )


_unique_calls = st.lists(st.builds(ToolCall, _text, _text, _text), max_size=3, unique_by=lambda c: c.id).map(
    tuple
)


@st.composite
def _paired_conversation(draw: st.DrawFn) -> list[Message]:
    """Messages whose tool calls are each answered right after their assistant message (an unpaired
    call or result is sent as text: see test_orphan_results), opening with a user message (else a
    user turn is inserted: see test_provider_rule)."""
    messages: list[Message] = [Message("user", draw(_text))]
    for _ in range(draw(st.integers(0, 8))):
        message = draw(_openai_messages())
        if message.role == "tool":
            message = replace(message, tool_call_id=None)
        if message.role == "assistant":
            message = replace(message, tool_calls=draw(_unique_calls))
        messages.append(message)
        messages.extend(
            Message("tool", draw(_text), tool_call_id=call.id, metadata=draw(_names))
            for call in message.tool_calls
        )
    return messages


@given(_paired_conversation())
def test_round_trip_through_json(messages: list[Message]) -> None:
    wire = json.dumps(to_openai(messages))
    assert from_openai(json.loads(wire)) == messages


@given(st.lists(_openai_messages(), max_size=8))
def test_to_openai_round_trips_its_own_output(messages: list[Message]) -> None:
    payload = to_openai(messages)
    assert to_openai(from_openai(payload)) == payload

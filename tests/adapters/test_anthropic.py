from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from adapter_strategies import NONEMPTY, TEXT, compact_objects
from hypothesis import given
from hypothesis import strategies as st

from rollmem import Message, RollingMemory, ToolCall
from rollmem.adapters import CONTINUATION_TEXT_PLAIN as CONTINUATION_PLAIN
from rollmem.adapters import from_anthropic, to_anthropic, user_first
from rollmem.adapters._common import pair_in_turns
from rollmem.adapters.anthropic import CONTINUATION

# A Messages API request in the published shape: a tool-use exchange.
SYSTEM = "You are a weather assistant."
PAYLOAD: list[dict[str, Any]] = [
    {"role": "user", "content": "What's the weather like in San Francisco?"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
            {
                "type": "tool_use",
                "id": "toolu_01A09q90qw90lq917835lq9",
                "name": "get_weather",
                "input": {"location": "San Francisco, CA", "unit": "celsius"},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "15 degrees"}
        ],
    },
    {"role": "assistant", "content": "It's 15 degrees and foggy in San Francisco."},
]

MESSAGES = [
    Message("system", SYSTEM),
    Message("user", "What's the weather like in San Francisco?"),
    Message(
        "assistant",
        "I'll check the current weather in San Francisco for you.",
        tool_calls=(
            ToolCall(
                "toolu_01A09q90qw90lq917835lq9",
                "get_weather",
                '{"location":"San Francisco, CA","unit":"celsius"}',
            ),
        ),
    ),
    Message("tool", "15 degrees", tool_call_id="toolu_01A09q90qw90lq917835lq9"),
    Message("assistant", "It's 15 degrees and foggy in San Francisco."),
]


def test_to_anthropic_writes_the_published_request_shape() -> None:
    assert to_anthropic(MESSAGES) == (SYSTEM, PAYLOAD)


def test_from_anthropic_reads_the_published_request_shape() -> None:
    assert from_anthropic(SYSTEM, PAYLOAD) == MESSAGES


def test_a_rolled_memory_becomes_a_request_the_api_accepts() -> None:
    # After folds, get_messages() starts with the summary and the buffer may start with a reply.
    memory = RollingMemory.from_dict(
        {
            "version": 2,
            "summary": "The user is planning a trip to Lisbon.",
            "buffer": [
                {"role": "system", "content": "Be brief."},
                {"role": "assistant", "content": "Lisbon is lovely in May."},
                {"role": "assistant", "content": "Shall I look up flights?"},
                {"role": "user", "content": "Yes, from Berlin."},
                {"role": "user", "content": ""},
                {"role": "user", "content": "Cheapest first."},
            ],
        }
    )
    assert to_anthropic(memory.get_messages()) == (
        "The user is planning a trip to Lisbon.\n\nBe brief.",
        [
            {"role": "user", "content": "(The conversation continues from the summary above.)"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Lisbon is lovely in May."},
                    {"type": "text", "text": "Shall I look up flights?"},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Yes, from Berlin."},
                    {"type": "text", "text": "Cheapest first."},
                ],
            },
        ],
    )


def test_the_continuation_turn_text_can_be_chosen() -> None:
    system, turns = to_anthropic([Message("assistant", "Hello again.")], continuation="(resumed)")
    assert (system, turns) == (
        "",
        [{"role": "user", "content": "(resumed)"}, {"role": "assistant", "content": "Hello again."}],
    )
    assert CONTINUATION == "(The conversation continues from the summary above.)"


def test_parallel_tool_results_share_one_user_turn_with_the_next_text() -> None:
    messages = [
        Message("user", "Weather and time in Paris?"),
        Message(
            "assistant",
            "",
            tool_calls=(ToolCall("t1", "weather", ""), ToolCall("t2", "time", '{"tz":"CET"}')),
        ),
        Message("tool", "18C", tool_call_id="t1"),
        Message("tool", "", tool_call_id="t2", metadata={"is_error": True}),
        Message("user", "Take your time."),
    ]
    assert to_anthropic(messages)[1][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "weather", "input": {}},
                {"type": "tool_use", "id": "t2", "name": "time", "input": {"tz": "CET"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "18C"},
                {"type": "tool_result", "tool_use_id": "t2", "is_error": True},  # no blank content
                {"type": "text", "text": "Take your time."},
            ],
        },
    ]


def test_fields_the_format_cannot_carry_are_not_sent() -> None:
    message = Message("user", "hi", id="m1", metadata={"name": "bob", "is_error": True}, pinned=True)
    assert to_anthropic([message]) == ("", [{"role": "user", "content": "hi"}])
    assert to_anthropic([]) == ("", [])
    assert to_anthropic([Message("system", "only rules"), Message("system", "")]) == ("only rules", [])


def test_from_anthropic_splits_blocks_into_messages() -> None:
    turns = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t0", "name": "f", "input": {}},
                {"type": "text", "text": "c"},
                {"type": "tool_use", "id": "t1", "name": "g", "input": {"k": [1, "é"]}},
                {"type": "tool_use", "id": "t2", "name": "h", "input": {"x": None}},
                {"type": "text", "text": "d"},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t0"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}],
                },
                {"type": "tool_result", "tool_use_id": "t2", "content": "z", "is_error": True},
            ],
        },
    ]
    assert from_anthropic(None, turns) == [
        Message("user", "a"),
        Message("user", "b"),
        Message("assistant", "", tool_calls=(ToolCall("t0", "f", "{}"),)),
        Message(
            "assistant",
            "c",
            tool_calls=(ToolCall("t1", "g", '{"k":[1,"é"]}'), ToolCall("t2", "h", '{"x":null}')),
        ),
        Message("assistant", "d"),
        Message("tool", "", tool_call_id="t0"),
        Message("tool", "x\ny", tool_call_id="t1"),
        Message("tool", "z", tool_call_id="t2", metadata={"is_error": True}),
    ]


def test_system_may_be_text_blocks() -> None:
    system = [
        {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Summary: none yet."},
    ]
    assert from_anthropic(system, []) == [Message("system", "You are terse.\n\nSummary: none yet.")]
    assert from_anthropic("", [{"role": "user", "content": "hi"}]) == [Message("user", "hi")]


@pytest.mark.parametrize(
    ("messages", "error", "message"),
    [
        (
            [
                Message("user", "q"),
                Message("assistant", "", tool_calls=(ToolCall("t", "f", "{oops"),)),
                Message("tool", "r", tool_call_id="t"),
            ],
            ValueError,
            "messages[1].tool_calls[0].arguments: expected a JSON object, got invalid JSON "
            "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
        ),
        (
            [
                Message("assistant", "", tool_calls=(ToolCall("t", "f", "{}"), ToolCall("u", "g", "[1, 2]"))),
                Message("tool", "r", tool_call_id="t"),
                Message("tool", "r", tool_call_id="u"),
            ],
            ValueError,
            "messages[0].tool_calls[1].arguments: expected a JSON object, got a JSON array",
        ),
        (
            [
                Message("assistant", "", tool_calls=(ToolCall("t", "f", "null"),)),
                Message("tool", "r", tool_call_id="t"),
            ],
            ValueError,
            "messages[0].tool_calls[0].arguments: expected a JSON object, got a JSON null",
        ),
        (
            [
                Message("assistant", "", tool_calls=(ToolCall("t", "f", '"x"'),)),
                Message("tool", "r", tool_call_id="t"),
            ],
            ValueError,
            "messages[0].tool_calls[0].arguments: expected a JSON object, got a JSON string",
        ),
        (
            [Message("tool", "18C")],
            ValueError,
            "messages[0].tool_call_id: a tool result needs the id of the tool call it answers",
        ),
        (
            [Message("developer", "be nice")],
            ValueError,
            "messages[0].role: expected 'user', 'assistant', 'system' or 'tool', got 'developer'",
        ),
        (
            [Message("system", "s", tool_calls=(ToolCall("t", "f"),))],
            ValueError,
            "messages[0].tool_calls: only assistant messages carry tool calls in the Anthropic format",
        ),
        (
            [Message("user", "s", tool_call_id="t")],
            ValueError,
            "messages[0].tool_call_id: only tool messages carry a tool_call_id in the Anthropic format",
        ),
        ([Message("user", "q"), "hi"], TypeError, "messages[1]: expected Message, got str"),
        ("hi", TypeError, "messages: expected an iterable of Message, got str"),
    ],
)
def test_to_anthropic_errors_name_the_message(messages: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        to_anthropic(messages)
    assert str(caught.value) == message


def _tool_use(**fields: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": "t", "name": "f", "input": {}, **fields}


@pytest.mark.parametrize(
    ("system", "turns", "error", "message"),
    [
        (
            None,
            [{"role": "system", "content": "x"}],
            ValueError,
            "messages[0].role: expected 'user' or 'assistant', got 'system'",
        ),
        (None, [{"content": "x"}], ValueError, "messages[0].role: missing required key"),
        (
            None,
            [{"role": "user"}],
            TypeError,
            "messages[0].content: expected str or a list of blocks, got None",
        ),
        (
            None,
            [{"role": "user", "content": {"type": "text"}}],
            TypeError,
            "messages[0].content: expected str or a list of blocks, got dict",
        ),
        (
            None,
            [
                {"role": "user", "content": "q"},
                {"role": "user", "content": [{"type": "image", "source": {}}]},
            ],
            ValueError,
            "messages[1].content[0].type: unsupported block type 'image' in a user turn",
        ),
        (
            None,
            [{"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}]}],
            ValueError,
            "messages[0].content[0].type: unsupported block type 'thinking' in an assistant turn",
        ),
        (
            None,
            [{"role": "user", "content": [_tool_use()]}],
            ValueError,
            "messages[0].content[0].type: unsupported block type 'tool_use' in a user turn",
        ),
        (
            None,
            [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}],
            ValueError,
            "messages[0].content[0].type: unsupported block type 'tool_result' in an assistant turn",
        ),
        (
            None,
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "text", "text": "a"}, _tool_use(input="{}")]},
            ],
            TypeError,
            "messages[1].content[1].input: expected a mapping, got str",
        ),
        (
            None,
            [{"role": "assistant", "content": [_tool_use(name=None)]}],
            TypeError,
            "messages[0].content[0].name: expected str, got None",
        ),
        (
            None,
            [{"role": "assistant", "content": [_tool_use(input={"when": object()})]}],
            TypeError,
            "messages[0].content[0].input: not JSON-serializable: "
            "Object of type object is not JSON serializable",
        ),
        (
            None,
            [{"role": "user", "content": [{"type": "tool_result"}]}],
            ValueError,
            "messages[0].content[0].tool_use_id: missing required key",
        ),
        (
            None,
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}],
                }
            ],
            ValueError,
            "messages[0].content[0].content[0].type: "
            "unsupported part type 'image'; only text parts are supported",
        ),
        (
            None,
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": 3}]}],
            TypeError,
            "messages[0].content[0].content: expected str or a list of text blocks, got int",
        ),
        (
            None,
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]}],
            TypeError,
            "messages[0].content[0].is_error: expected bool, got str",
        ),
        (
            None,
            [{"role": "user", "content": ["hi"]}],
            TypeError,
            "messages[0].content[0]: expected a mapping, got str",
        ),
        (
            None,
            {"role": "user", "content": "hi"},
            TypeError,
            "messages: expected an iterable of mappings, got dict",
        ),
        (5, [], TypeError, "system: expected str, a list of text blocks or None, got int"),
        (
            [{"type": "image"}],
            [],
            ValueError,
            "system[0].type: unsupported part type 'image'; only text parts are supported",
        ),
    ],
)
def test_from_anthropic_errors_name_the_field(
    system: Any, turns: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        from_anthropic(system, turns)
    assert str(caught.value) == message


# Round trips. Arguments are compact JSON objects (what from_anthropic writes); a whitespace-only
# text is not sent (the API rejects it), so exact round trips hold for texts that are not blank.
_text = TEXT.filter(lambda text: not text or text.strip())
_nonempty = NONEMPTY.filter(str.strip)
_calls = st.lists(
    st.builds(ToolCall, _nonempty, _nonempty, compact_objects()), max_size=3, unique_by=lambda call: call.id
).map(tuple)


@st.composite
def _canonical(draw: st.DrawFn) -> list[Message]:
    """A conversation in the shape the Anthropic format carries exactly (see the module docstring)."""
    messages = [Message("system", draw(_nonempty))] if draw(st.booleans()) else []
    previous = None
    for _ in range(draw(st.integers(0, 8))):
        role = draw(st.sampled_from(["user"] if previous is None else ["user", "assistant"]))
        if role == "user":
            messages.append(Message("user", draw(_nonempty)))
        else:  # an assistant message, then one result per call (unpaired ones are sent as text)
            calls = draw(_calls)
            text = draw(_nonempty if previous == "assistant" or not calls else _text)
            messages.append(Message("assistant", text, tool_calls=calls))
            for call in calls:
                error = draw(st.booleans())
                messages.append(
                    Message(
                        "tool",
                        draw(_text),
                        tool_call_id=call.id,
                        metadata={"is_error": True} if error else {},
                    )
                )
            role = "tool" if calls else role
        previous = role
    return messages


@given(_canonical())
def test_round_trip_is_exact_for_what_the_format_carries(messages: list[Message]) -> None:
    system, turns = to_anthropic(messages)
    wire = json.loads(json.dumps({"system": system, "messages": turns}))
    assert from_anthropic(wire["system"], wire["messages"]) == messages


# Any conversation: system turns anywhere, empty texts, a reply first, same-role runs.
_any_message = st.one_of(
    st.builds(Message, st.sampled_from(["user", "system"]), _text),
    st.builds(lambda text, calls: Message("assistant", text, tool_calls=calls), _text, _calls),
    st.builds(lambda text, id: Message("tool", text, tool_call_id=id), _text, _nonempty),
)


@given(st.lists(_any_message, max_size=10))
def test_every_request_alternates_and_starts_with_a_user_turn(messages: list[Message]) -> None:
    system, turns = to_anthropic(messages)
    # what is sent: unpaired calls/results as text, a user turn first
    messages = user_first(pair_in_turns(messages, skip_system=True, turns=True))
    assert system == "\n\n".join(m.content for m in messages if m.role == "system" and m.content.strip())
    assert [turn["role"] for turn in turns] == ["user", "assistant"] * (len(turns) // 2) + ["user"] * (
        len(turns) % 2
    )
    for turn in turns:
        content = turn["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        assert blocks
        for block in blocks:
            assert block["type"] in {"text", "tool_use", "tool_result"}
            assert block["type"] != "text" or block["text"].strip()
            assert block["type"] != "tool_result" or turn["role"] == "user"
    # Nothing but blank texts and system turns (moved to `system`) goes missing.
    messages = [replace(m, content=m.content if m.content.strip() else "") for m in messages]
    kept = [m for m in messages if m.role != "system" and (m.content or m.tool_calls or m.role == "tool")]
    back = from_anthropic(system, turns)
    back = back[1 if system else 0 :]
    if kept and kept[0].role == "assistant":  # a user turn with no text came first
        assert back.pop(0) == Message("user", CONTINUATION if system else CONTINUATION_PLAIN)
    assert [(m.role, m.content, m.tool_call_id) for m in back if m.content or m.role != "assistant"] == [
        (m.role, m.content, m.tool_call_id) for m in kept if m.content or m.role != "assistant"
    ]
    assert [call for m in back for call in m.tool_calls] == [call for m in kept for call in m.tool_calls]


# -- prompt caching ----------------------------------------------------------------------------------

EPHEMERAL = {"type": "ephemeral"}


def test_cache_places_breakpoints_after_system_prompt_summary_and_conversation() -> None:
    messages = [
        Message("system", "You are a weather bot."),
        Message("system", "Summary: Paris trip."),
        Message("user", "Weather?"),
        Message("assistant", "", tool_calls=(ToolCall("t1", "get_weather", '{"city":"Paris"}'),)),
        Message("tool", "18C", tool_call_id="t1"),
    ]
    system, turns = to_anthropic(messages, cache=True)
    assert system == [
        {"type": "text", "text": "You are a weather bot.", "cache_control": EPHEMERAL},
        {"type": "text", "text": "Summary: Paris trip.", "cache_control": EPHEMERAL},
    ]
    assert turns == [
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "18C", "cache_control": EPHEMERAL}
            ],
        },
    ]
    # without cache: byte for byte what it was
    plain = to_anthropic(messages)
    assert plain == to_anthropic(messages, cache=False)
    assert "cache_control" not in json.dumps(plain)
    assert plain[0] == "You are a weather bot.\n\nSummary: Paris trip."


def test_cache_one_system_message_no_system_and_the_ttl() -> None:
    system, turns = to_anthropic([Message("system", "S"), Message("user", "hi")], cache=True, cache_ttl="1h")
    one_hour = {"type": "ephemeral", "ttl": "1h"}
    assert system == [{"type": "text", "text": "S", "cache_control": one_hour}]
    assert turns == [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": one_hour}]}]
    assert to_anthropic([Message("user", "hi")], cache=True)[0] == ""
    assert to_anthropic([], cache=True) == ("", [])
    assert to_anthropic([Message("system", "S")], cache=True) == (
        [{"type": "text", "text": "S", "cache_control": EPHEMERAL}],
        [],
    )


@pytest.mark.parametrize("blank", [" ", "\n", " \t\n "])
def test_no_whitespace_only_block_is_sent(blank: str) -> None:
    """The Messages API rejects a text block (system included) that is whitespace only: such a
    text is left out, and a cache breakpoint goes on the last block that is sent."""
    messages = [
        Message("system", blank),  # a blank system prompt: no system block
        Message("system", "Summary: Paris."),
        Message("user", "Weather?"),
        Message("assistant", blank, tool_calls=(ToolCall("t1", "get_weather", "{}"),)),
        Message("tool", blank, tool_call_id="t1"),
        Message("assistant", "Sunny."),
        Message("user", blank),  # the newest message is blank: the breakpoint stays on "Sunny."
    ]
    system, turns = to_anthropic(messages)
    assert system == "Summary: Paris."
    assert turns == [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
        {"role": "assistant", "content": "Sunny."},
    ]
    system, turns = to_anthropic(messages, cache=True)
    assert system == [{"type": "text", "text": "Summary: Paris.", "cache_control": EPHEMERAL}]
    assert turns[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Sunny.", "cache_control": EPHEMERAL}],
    }
    assert to_anthropic([Message("system", blank), Message("user", blank)], cache=True) == ("", [])
    assert to_anthropic([Message("user", blank), Message("assistant", "Hi.")]) == (
        "",
        [{"role": "user", "content": CONTINUATION_PLAIN}, {"role": "assistant", "content": "Hi."}],
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cache_ttl": "1h"}, "cache_ttl must be None, or '5m' or '1h' with cache=True; got '1h'"),
        (
            {"cache": True, "cache_ttl": "2h"},
            "cache_ttl must be None, or '5m' or '1h' with cache=True; got '2h'",
        ),
        ({"cache": 1}, "cache: expected bool, got int"),
        ({"continuation": ""}, "continuation must contain non-whitespace text"),
        ({"continuation": " \n"}, "continuation must contain non-whitespace text"),
    ],
)
def test_cache_arguments_are_checked(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises((TypeError, ValueError)) as caught:
        to_anthropic([Message("user", "hi")], **kwargs)
    assert str(caught.value) == message


@given(st.lists(_any_message, max_size=10), st.sampled_from([None, "5m", "1h"]))
def test_cache_adds_at_most_four_breakpoints_and_nothing_else(messages: list[Message], ttl: Any) -> None:
    system, turns = to_anthropic(messages, cache=True, cache_ttl=ttl)
    plain_system, plain_turns = to_anthropic(messages)
    control = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    blocks = [*(system or []), *(block for turn in turns for block in turn["content"])]
    marked = [block for block in blocks if "cache_control" in block]
    assert all(block["cache_control"] == control for block in marked)
    assert len(marked) <= 4
    if turns:  # the conversation's last block is a breakpoint
        assert "cache_control" in turns[-1]["content"][-1]
    if system:
        assert "cache_control" in system[0]
        assert "cache_control" in system[-1]
        assert all(block["type"] == "text" for block in system)
    # stripped of the breakpoints, the same request
    stripped = [{k: v for k, v in block.items() if k != "cache_control"} for block in (system or [])]
    assert "\n\n".join(block["text"] for block in stripped) == plain_system
    for turn, plain in zip(turns, plain_turns):
        content = [{k: v for k, v in block.items() if k != "cache_control"} for block in turn["content"]]
        assert blocks_equal(content, plain["content"])
    assert len(turns) == len(plain_turns)


def blocks_equal(blocks: list[dict[str, Any]], plain: Any) -> bool:
    return blocks == ([{"type": "text", "text": plain}] if isinstance(plain, str) else plain)


def test_text_between_tool_uses_round_trips_as_one_turn() -> None:
    """Claude may write text between the tool_use blocks of one turn; from_anthropic reads that as
    two assistant messages, and to_anthropic answers both calls in the one turn again."""
    turns = [
        {"role": "user", "content": "Paris and Rome?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
                {"type": "text", "text": "And Rome:"},
                {"type": "tool_use", "id": "t2", "name": "weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "18C"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "24C"},
            ],
        },
    ]
    messages = from_anthropic("", turns)
    assert [(m.role, m.content, len(m.tool_calls)) for m in messages] == [
        ("user", "Paris and Rome?", 0),
        ("assistant", "", 1),
        ("assistant", "And Rome:", 1),
        ("tool", "18C", 0),
        ("tool", "24C", 0),
    ]
    assert to_anthropic(messages) == ("", turns)

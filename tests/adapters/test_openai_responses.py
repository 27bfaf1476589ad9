"""from_openai_responses / to_openai_responses: lossless both ways, units, exact error paths."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from adapter_strategies import JSON, NONEMPTY, TEXT
from hypothesis import given
from hypothesis import strategies as st

from _optional import need
from rollmem import AsyncRollingMemory, Message, RollingMemory, ToolCall
from rollmem.adapters import CONTINUATION_TEXT_PLAIN, from_openai_responses, to_openai_responses
from rollmem.adapters.openai import RESPONSES_ITEMS

ITEMS: list[dict[str, Any]] = [
    {"role": "developer", "content": "Be brief."},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Look:"},
            {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"},
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Need the weather."}],
        "encrypted_content": "gAAA",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "c1",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
        "status": "completed",
    },
    {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "get_time", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "14:05"}]},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "Sunny, 14:05.", "annotations": []},
            {"type": "refusal", "refusal": "no more"},
        ],
    },
    {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    {
        "type": "computer_call",
        "id": "cu_1",
        "call_id": "c3",
        "action": {"type": "screenshot"},
        "pending_safety_checks": [],
        "status": "completed",
    },
    {
        "type": "computer_call_output",
        "call_id": "c3",
        "output": {"type": "computer_screenshot", "image_url": "data:"},
    },
    {"type": "reasoning", "id": "rs_2", "summary": []},
]


def test_messages_carry_the_text_and_the_calls() -> None:
    messages = from_openai_responses(ITEMS)
    assert [message.metadata[RESPONSES_ITEMS] for message in messages] == [
        ITEMS[0:1],
        ITEMS[1:2],
        ITEMS[2:4],
        ITEMS[4:5],
        *[[item] for item in ITEMS[5:11]],
        ITEMS[11:12],
    ]
    plain = [
        Message(m.role, m.content, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id) for m in messages
    ]
    web = json.dumps(ITEMS[8], separators=(",", ":"))
    computer = json.dumps(ITEMS[9], separators=(",", ":"))
    computer_output = json.dumps(ITEMS[10], separators=(",", ":"))
    assert plain == [
        Message("developer", "Be brief."),
        Message("user", "Look:\n[input_image]"),
        Message(
            "assistant", "Need the weather.", tool_calls=(ToolCall("c1", "get_weather", '{"city":"Paris"}'),)
        ),
        Message("assistant", "", tool_calls=(ToolCall("c2", "get_time", "{}"),)),
        Message("tool", "sunny", tool_call_id="c1"),
        Message("tool", "14:05", tool_call_id="c2"),
        Message("assistant", "Sunny, 14:05.\nno more"),
        Message("assistant", web),
        Message("assistant", computer, tool_calls=(ToolCall("c3", "computer_call"),)),
        Message("tool", computer_output, tool_call_id="c3"),
        Message("assistant", ""),
    ]
    assert to_openai_responses(messages) == ITEMS


def test_the_items_are_copies() -> None:
    items = json.loads(json.dumps(ITEMS))
    messages = from_openai_responses(items)
    items[1]["content"][0]["text"] = "changed"
    out = to_openai_responses(messages)
    assert out == ITEMS
    out[1]["content"][0]["text"] = "changed"
    assert to_openai_responses(messages) == ITEMS


def test_a_memory_keeps_calls_outputs_and_reasoning_in_one_unit() -> None:
    memory = RollingMemory(max_tokens=6, token_counter=lambda text: len(text.split()))
    memory.extend(from_openai_responses(ITEMS[:8]))
    # the reasoning, both calls and both outputs left or stayed together (the request then opens
    # with the user turn the provider rule inserts)
    opening = {"role": "user", "content": CONTINUATION_TEXT_PLAIN}
    assert to_openai_responses(memory.buffer) in ([opening, *ITEMS[2:8]], [opening, *ITEMS[7:8]])


def test_sdk_models_are_dumped() -> None:
    responses = need("openai", "openai.types.responses")
    call = responses.ResponseFunctionToolCall(type="function_call", call_id="c1", name="f", arguments="{}")
    output = {"type": "function_call_output", "call_id": "c1", "output": "x"}
    (message, result) = from_openai_responses([call, output])
    assert message.tool_calls == (ToolCall("c1", "f", "{}"),)
    assert to_openai_responses([Message("user", "q"), message, result]) == [
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
    ]


def test_other_messages_are_written_from_their_fields() -> None:
    messages = [
        Message("system", "the summary"),
        Message("user", "q"),
        Message("assistant", "checking", tool_calls=(ToolCall("c1", "f", "{}"), ToolCall("c2", "g", ""))),
        Message("assistant", "", tool_calls=(ToolCall("c3", "h", "{}"),)),
        Message("tool", "out", tool_call_id="c1"),
        Message("tool", "out2", tool_call_id="c2"),
        Message("tool", "out3", tool_call_id="c3"),
        Message("assistant", ""),
    ]
    items = [
        {"role": "system", "content": "the summary"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "checking"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": ""},
        {"type": "function_call", "call_id": "c3", "name": "h", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "out"},
        {"type": "function_call_output", "call_id": "c2", "output": "out2"},
        {"type": "function_call_output", "call_id": "c3", "output": "out3"},
        {"role": "assistant", "content": ""},
    ]
    assert to_openai_responses(messages) == items


# -- round trips: every item kind ---------------------------------------------------------------

IDS = st.text(alphabet="abc_0123456789", min_size=1, max_size=6)
PARTS = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "input_text", "text": t}, TEXT),
        st.builds(lambda t: {"type": "output_text", "text": t, "annotations": []}, TEXT),
        st.builds(lambda t: {"type": "refusal", "refusal": t}, TEXT),
        st.builds(lambda u: {"type": "input_image", "image_url": u, "detail": "auto"}, TEXT),
    ),
    max_size=3,
)
MESSAGE = st.builds(
    lambda role, content, typed: {**({"type": "message"} if typed else {}), "role": role, "content": content},
    st.sampled_from(["user", "assistant", "system", "developer"]),
    TEXT | PARTS,
    st.booleans(),
)
CALL = st.builds(
    lambda cid, name, args, extra: {
        "type": "function_call",
        "call_id": cid,
        "name": name,
        "arguments": args,
        **extra,
    },
    IDS,
    NONEMPTY,
    TEXT,
    st.dictionaries(st.sampled_from(["id", "status"]), TEXT, max_size=2),
)
OUTPUT = st.builds(
    lambda cid, out: {"type": "function_call_output", "call_id": cid, "output": out}, IDS, TEXT | PARTS
)
REASONING = st.builds(
    lambda rid, texts: {
        "type": "reasoning",
        "id": rid,
        "summary": [{"type": "summary_text", "text": t} for t in texts],
    },
    IDS,
    st.lists(TEXT, max_size=2),
)
OTHER = st.builds(
    lambda kind, fields: {"type": kind, **fields},
    st.sampled_from(["web_search_call", "item_reference", "custom_tool_call", "custom_tool_call_output"]),
    st.dictionaries(st.sampled_from(["id", "call_id", "status", "input"]), JSON, max_size=3),
)
ITEM = st.one_of(MESSAGE, CALL, OUTPUT, REASONING, OTHER)
UNPAIRED_OTHER = st.builds(
    lambda kind, fields: {"type": kind, **fields},
    st.sampled_from(["web_search_call", "item_reference"]),
    st.dictionaries(st.sampled_from(["id", "status", "input"]), JSON, max_size=3),
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Items a request can carry as they are: a user message first (after system/developer ones),
    every call answered by an output after it, every output after its call."""
    items: list[dict[str, Any]] = [draw(MESSAGE.filter(lambda item: item["role"] != "assistant"))]
    if items[-1]["role"] != "user":
        items.append({"role": "user", "content": draw(TEXT)})
    for group in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["message", "reasoning", "other", "calls", "custom"]))
        if kind == "message":
            items.append(draw(MESSAGE))
        elif kind == "reasoning":
            items.append(draw(REASONING))
        elif kind == "other":
            items.append(draw(UNPAIRED_OTHER))
        elif kind == "custom":
            cid = f"k{group}"
            items.append(
                {"type": "custom_tool_call", "call_id": cid, "name": draw(TEXT), "input": draw(TEXT)}
            )
            items.append({"type": "custom_tool_call_output", "call_id": cid, "output": draw(TEXT)})
        else:
            calls = [{**draw(CALL), "call_id": f"c{group}.{n}"} for n in range(draw(st.integers(1, 3)))]
            outputs = [{**draw(OUTPUT), "call_id": call["call_id"]} for call in calls]
            items.extend(calls + draw(st.permutations(outputs)))
    return items


@given(conversations())
def test_items_round_trip_exactly(items: list[dict[str, Any]]) -> None:
    messages = from_openai_responses(items)
    out = to_openai_responses(messages)
    assert out == items
    assert [list(item) for item in out] == [list(item) for item in items]
    assert from_openai_responses(out) == messages
    # and through a memory's saved state (JSON)
    state = json.loads(json.dumps({"version": 2, "summary": "", "buffer": [m.to_dict() for m in messages]}))
    assert to_openai_responses(RollingMemory.from_dict(state).buffer) == items


@given(st.lists(ITEM, max_size=12))
def test_one_message_per_item_except_reasoning_which_joins_its_follower(items: list[dict[str, Any]]) -> None:
    messages = from_openai_responses(items)
    kinds = [item.get("type") for item in items]
    non_reasoning = sum(kind != "reasoning" for kind in kinds)
    trailing = bool(kinds) and kinds[-1] == "reasoning"
    assert len(messages) == non_reasoning + trailing


def test_an_async_memory_accepts_them() -> None:
    import asyncio

    memory = AsyncRollingMemory(max_tokens=100)
    asyncio.run(memory.extend(from_openai_responses(ITEMS)))
    assert to_openai_responses(memory.buffer) == ITEMS


# -- malformed items ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "error", "message"),
    [
        (3, TypeError, "items[1]: expected a mapping or a model with model_dump, got int"),
        ({"content": "x"}, ValueError, "items[1].type: missing required key (only a message may omit it)"),
        ({"type": 4}, TypeError, "items[1].type: expected str, got int"),
        ({"role": 1, "content": "x"}, TypeError, "items[1].role: expected str, got int"),
        ({"type": "message", "content": "x"}, ValueError, "items[1].role: missing required key"),
        ({"role": "user"}, ValueError, "items[1].content: missing required key"),
        (
            {"role": "user", "content": None},
            TypeError,
            "items[1].content: expected str or a list of parts, got None",
        ),
        (
            {"role": "user", "content": [{"text": "x"}]},
            ValueError,
            "items[1].content[0].type: missing required key",
        ),
        ({"role": "user", "content": ["x"]}, TypeError, "items[1].content[0]: expected a mapping, got str"),
        (
            {"role": "user", "content": [{"type": "input_text"}]},
            ValueError,
            "items[1].content[0].text: missing required key",
        ),
        (
            {"type": "function_call", "name": "f", "arguments": ""},
            ValueError,
            "items[1].call_id: missing required key",
        ),
        (
            {"type": "function_call", "call_id": 3, "name": "f", "arguments": ""},
            TypeError,
            "items[1].call_id: expected str, got int",
        ),
        (
            {"type": "function_call", "call_id": "c", "name": None, "arguments": ""},
            TypeError,
            "items[1].name: expected str, got None",
        ),
        (
            {"type": "function_call", "call_id": "c", "name": "f"},
            ValueError,
            "items[1].arguments: missing required key",
        ),
        (
            {"type": "function_call_output", "output": "x"},
            ValueError,
            "items[1].call_id: missing required key",
        ),
        (
            {"type": "function_call_output", "call_id": "c"},
            ValueError,
            "items[1].output: missing required key",
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": 5},
            TypeError,
            "items[1].output: expected str or a list of parts, got int",
        ),
        ({"type": "reasoning", "summary": "x"}, TypeError, "items[1].summary: expected a list, got str"),
        (
            {"type": "reasoning", "summary": [{"type": "summary_text"}]},
            ValueError,
            "items[1].summary[0].text: missing required key",
        ),
        (
            {"type": "web_search_call", "blob": b"x"},
            TypeError,
            "items[1]: not JSON-serializable: Object of type bytes is not JSON serializable",
        ),
        ({1: "x"}, TypeError, "items[1]: expected str keys, got int"),
    ],
)
def test_malformed_items_name_their_path(item: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}$") as info:
        from_openai_responses([{"role": "user", "content": "ok"}, item])
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("items", ["text", {"role": "user"}, 5, None])
def test_items_must_be_an_iterable_of_items(items: Any) -> None:
    with pytest.raises(TypeError, match=r"^items: expected an iterable of items, got \w+$"):
        from_openai_responses(items)


@pytest.mark.parametrize(
    ("messages", "error", "message"),
    [
        (
            [Message("user", "x", tool_calls=(ToolCall("c", "f"),))],
            ValueError,
            "messages[0].tool_calls: only assistant messages carry tool calls in the OpenAI Responses format",
        ),
        (
            [Message("user", "x", tool_call_id="c")],
            ValueError,
            "messages[0].tool_call_id: only tool messages carry a tool_call_id"
            " in the OpenAI Responses format",
        ),
        (
            [Message("user", "x", metadata={RESPONSES_ITEMS: "no"})],
            TypeError,
            "messages[0].metadata.responses_items: expected a list, got str",
        ),
        (
            [Message("user", "x", metadata={RESPONSES_ITEMS: [1]})],
            TypeError,
            "messages[0].metadata.responses_items[0]: expected a mapping, got int",
        ),
        (["x"], TypeError, "messages[0]: expected Message, got str"),
    ],
)
def test_to_openai_responses_rejects_what_it_cannot_write(
    messages: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        to_openai_responses(messages)

"""Issue 18: between two folds, the request every adapter renders is a pure extension of the
previous one (the summary's place and text fixed, nothing time-dependent, ids stable), so a
provider's prompt cache keeps hitting. A property over random conversations, through a real
memory, with every request checked against the providers' rules too."""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _optional import skip_unless
from provider_rules import (
    assert_anthropic_accepts,
    assert_gemini_accepts,
    assert_openai_accepts,
    assert_responses_accepts,
)
from rollmem import Message, RollingMemory, ToolCall
from rollmem.adapters import to_anthropic, to_openai, to_openai_responses

SYSTEM_PROMPT = Message("system", "You are a weather bot.")

# One op is what happens between two model requests: a question, a tool step (an assistant message
# with 1-3 parallel calls and their results), an answer, a result whose call is long gone, or a
# call that never gets its result (the user spoke first).
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.integers(1, 6)),
        st.tuples(st.just("tools"), st.integers(1, 3)),
        st.tuples(st.just("answer"), st.integers(0, 6)),
        st.tuples(st.just("late"), st.integers(1, 3)),
        st.tuples(st.just("abandoned"), st.integers(1, 2)),
    ),
    min_size=1,
    max_size=25,
)


def words(text: str) -> int:
    return len(text.split())


def summarize(summary: str, evicted: list[Message]) -> str:
    return (summary + " | " if summary else "") + f"{len(evicted)} messages"


def apply(memory: RollingMemory, number: int, kind: str, size: int) -> None:
    text = " ".join(f"w{number}" for _ in range(size))
    if kind == "user":
        memory.add_user_message(text)
    elif kind == "answer":
        memory.add_assistant_message(text)
    elif kind == "late":
        memory.add_tool_message(text, tool_call_id=f"gone{number}")
    elif kind == "abandoned":
        memory.add_assistant_message("", tool_calls=[ToolCall(f"a{number}", "f", "{}")])
        memory.add_user_message(text)
    else:
        calls = [ToolCall(f"c{number}.{n}", "lookup", json.dumps({"q": n})) for n in range(size)]
        memory.extend(
            [
                Message("assistant", text, tool_calls=tuple(calls)),
                *(Message("tool", f"r{number}.{n}", tool_call_id=call.id) for n, call in enumerate(calls)),
            ]
        )


def flat_anthropic(request: tuple[Any, list[dict[str, Any]]]) -> tuple[str, list[Any]]:
    """(system, [(role, block)]), breakpoints removed: what a cached prefix is made of."""
    system, turns = request

    def bare(block: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in block.items() if key != "cache_control"}

    if isinstance(system, list):
        system = json.dumps([bare(block) for block in system])
    blocks = []
    for turn in turns:
        content = turn["content"]
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            blocks.append((turn["role"], bare(block)))
    return system, blocks


def anthropic_extends(before: Any, after: Any) -> bool:
    (system, blocks), (system2, blocks2) = flat_anthropic(before), flat_anthropic(after)
    return system == system2 and blocks2[: len(blocks)] == blocks


def list_extends(before: list[Any], after: list[Any]) -> bool:
    return after[: len(before)] == before


def langchain_request(messages: list[Message]) -> list[Any]:
    from rollmem.adapters.langchain import to_langchain

    return [message.model_dump() for message in to_langchain(messages)]


RENDERERS: dict[
    str, tuple[Callable[[list[Message]], Any], Callable[[Any, Any], bool], Callable[[Any], None]]
] = {
    "openai": (to_openai, list_extends, lambda r: (assert_openai_accepts(r), assert_gemini_accepts(r))),
    "responses": (to_openai_responses, list_extends, assert_responses_accepts),
    "anthropic": (to_anthropic, anthropic_extends, lambda r: assert_anthropic_accepts(*r)),
    "anthropic-cached": (
        lambda m: to_anthropic(m, cache=True),
        anthropic_extends,
        lambda r: assert_anthropic_accepts(*r),
    ),
    "langchain": (langchain_request, list_extends, lambda r: None),
}


@pytest.mark.parametrize("name", sorted(RENDERERS))
@settings(max_examples=150, derandomize=True, deadline=None)
@given(ops=OPS, max_tokens=st.integers(4, 40), half=st.booleans())
def test_between_folds_each_request_extends_the_previous(
    name: str, ops: list[tuple[str, int]], max_tokens: int, half: bool
) -> None:
    if name == "langchain":
        skip_unless("langchain")
    render, extends, accepts = RENDERERS[name]
    memory = RollingMemory(
        max_tokens, summarize, words, target_tokens=max(1, max_tokens // 2) if half else None
    )
    previous: Any = None
    folds = 0
    for number, (kind, size) in enumerate(ops):
        apply(memory, number, kind, size)
        request = render([SYSTEM_PROMPT, *memory.get_messages()])
        accepts(request)
        assert render([SYSTEM_PROMPT, *memory.get_messages()]) == request  # nothing time-dependent
        if previous is not None and memory.stats().folds == folds:
            assert extends(previous, request), f"{name}: op {number} ({kind}) rewrote the prefix"
        previous, folds = request, memory.stats().folds


def test_a_fold_is_what_moves_the_prefix() -> None:
    memory = RollingMemory(6, summarize, words)
    memory.add_user_message("one two three")
    first = to_openai(memory.get_messages())
    memory.add_assistant_message("four five six seven")
    assert memory.stats().folds == 1
    assert not list_extends(first, to_openai(memory.get_messages()))

"""What the providers accept, as they document it: checkers shared by the adapter and integration
tests (imported as a plain module: pytest puts this folder, conftest.py's, on sys.path)."""

from __future__ import annotations

from typing import Any, Union

SYSTEM_ROLES = ("system", "developer")


def assert_openai_accepts(request: list[dict[str, Any]]) -> None:
    """Each assistant message with ``tool_calls`` is followed directly by one ``tool`` message per
    call; every ``tool`` message answers a call of the assistant message before its run."""
    index = 0
    while index < len(request):
        item = request[index]
        assert item["role"] != "tool", f"request[{index}]: a tool message without its call right before it"
        index += 1
        calls = [call["id"] for call in item.get("tool_calls", [])]
        assert len(set(calls)) == len(calls), f"request[{index - 1}]: tool call ids repeated: {calls}"
        answered = []
        while index < len(request) and request[index]["role"] == "tool":
            answered.append(request[index]["tool_call_id"])
            index += 1
        assert sorted(answered) == sorted(calls), f"calls {calls} answered by {answered}"


def assert_gemini_accepts(request: list[dict[str, Any]]) -> None:
    """Gemini's rule on a Chat Completions request (consecutive messages of one role are one turn):
    the first turn after the system messages is the user's, and a turn with a function call comes
    right after a user turn or a function response."""
    turns: list[tuple[str, bool]] = []  # (role, has a call)
    for item in request:
        if item["role"] in SYSTEM_ROLES:
            continue
        calls = bool(item.get("tool_calls"))
        if turns and turns[-1][0] == item["role"]:
            turns[-1] = (item["role"], turns[-1][1] or calls)
        else:
            turns.append((item["role"], calls))
    if turns:
        assert turns[0][0] == "user", f"the first turn is {turns[0][0]!r}"
    for previous, (role, calls) in zip(turns, turns[1:]):
        if role == "assistant" and calls:
            assert previous[0] in ("user", "tool"), "a function call after a model turn"


def blocks_of(turn: dict[str, Any]) -> list[dict[str, Any]]:
    content = turn["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def assert_anthropic_accepts(system: Union[str, list[dict[str, Any]]], turns: list[dict[str, Any]]) -> None:
    """``messages[0]`` is a user turn and turns alternate; every ``tool_use`` is answered by a
    ``tool_result`` in the next (user) turn, where the results come before any text; every result
    answers such a use; no text block (``system`` included) and no ``tool_result`` content is
    whitespace only ("text content blocks must contain non-whitespace text"); at most 4 cache
    breakpoints."""
    assert isinstance(system, (str, list))
    for block in system if isinstance(system, list) else [{"type": "text", "text": system or "x"}]:
        assert block["type"] == "text"
        assert block["text"].strip(), f"a blank system block {block}"
    roles = [turn["role"] for turn in turns]
    assert roles == ["user", "assistant"] * (len(turns) // 2) + ["user"] * (len(turns) % 2)
    uses: list[str] = []
    breakpoints = sum("cache_control" in block for block in system) if isinstance(system, list) else 0
    for turn in turns:
        blocks = blocks_of(turn)
        assert blocks
        breakpoints += sum("cache_control" in block for block in blocks)
        for block in blocks:
            assert block["type"] != "text" or block["text"].strip(), f"a blank text block {block}"
            assert block["type"] != "tool_result" or block.get("content", "x").strip(), (
                f"blank content {block}"
            )
        if turn["role"] == "assistant":
            assert not uses
            uses = [block["id"] for block in blocks if block["type"] == "tool_use"]
            assert len(set(uses)) == len(uses), f"tool_use ids repeated in one turn: {uses}"
            continue
        kinds = [block["type"] for block in blocks]
        results = [block["tool_use_id"] for block in blocks if block["type"] == "tool_result"]
        assert kinds[: len(results)] == ["tool_result"] * len(results), "text before a tool_result"
        assert sorted(results) == sorted(uses), f"uses {uses} answered by {results}"
        uses = []
    assert not uses, "a tool_use without a tool_result after it"
    assert breakpoints <= 4


def assert_responses_accepts(items: list[dict[str, Any]]) -> None:
    """Every ``function_call_output`` answers a ``function_call`` before it, every call is answered,
    and the first message after the system/developer ones is the user's."""
    waiting: set[str] = set()
    for item in items:
        kind = item.get("type", "message")
        if kind == "function_call":
            assert item["call_id"] not in waiting, f"two calls waiting with id {item['call_id']}"
            waiting.add(item["call_id"])
        elif kind == "function_call_output":
            assert item["call_id"] in waiting, f"no tool call found for output {item['call_id']}"
            waiting.discard(item["call_id"])
    assert not waiting, f"calls without output: {waiting}"
    first = next((item for item in items if item.get("role") not in SYSTEM_ROLES), None)
    if first is not None:
        assert first.get("role") == "user", f"the first item is {first}"

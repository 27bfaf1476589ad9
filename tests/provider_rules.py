"""What the providers accept, as they document it: checkers shared by the adapter and integration
tests (imported as a plain module: pytest puts this folder, conftest.py's, on sys.path).

The OpenAI, Anthropic and Responses rules are public, in :mod:`rollmem.testing` (applications
check their own requests with them); Gemini's rule on a Chat Completions request is kept here.
"""

from __future__ import annotations

from typing import Any

from rollmem.testing import assert_anthropic_accepts, assert_openai_accepts, assert_responses_accepts

__all__ = [
    "assert_anthropic_accepts",
    "assert_gemini_accepts",
    "assert_openai_accepts",
    "assert_responses_accepts",
    "blocks_of",
]

SYSTEM_ROLES = ("system", "developer")


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
    """An Anthropic turn's content as a list of blocks (a plain string is one text block)."""
    content = turn["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content

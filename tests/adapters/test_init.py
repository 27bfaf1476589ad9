from __future__ import annotations

import subprocess
import sys

import pytest

import rollmem.adapters
import rollmem.adapters.langchain


def test_adapters_public_names() -> None:
    assert rollmem.adapters.__all__ == [
        "CONTINUATION_TEXT",
        "CONTINUATION_TEXT_PLAIN",
        "for_provider",
        "from_anthropic",
        "from_openai",
        "from_openai_responses",
        "pair_tool_results",
        "to_anthropic",
        "to_openai",
        "to_openai_responses",
        "user_first",
    ]
    for name in rollmem.adapters.__all__:
        assert isinstance(getattr(rollmem.adapters, name), str) or callable(getattr(rollmem.adapters, name))


def test_user_first_opens_with_a_user_turn_only_where_needed() -> None:
    from rollmem.message import Message, ToolCall

    call = Message("assistant", "", tool_calls=(ToolCall("c1", "f", "{}"),))
    result = Message("tool", "18C", tool_call_id="c1")
    opened = rollmem.adapters.user_first([Message("system", "s"), call, result])
    assert [m.role for m in opened] == ["system", "user", "assistant", "tool"]
    assert opened[1].content == rollmem.adapters.CONTINUATION_TEXT
    already = [Message("system", "s"), Message("user", "hi"), call]
    assert rollmem.adapters.user_first(already) is already
    assert rollmem.adapters.user_first([Message("system", "s")]) == [Message("system", "s")]
    # an orphan result becomes the user's text, which then opens the request
    assert [m.role for m in rollmem.adapters.for_provider([Message("system", "s"), result])] == [
        "system",
        "user",
    ]


def test_langchain_module_public_names() -> None:
    assert rollmem.adapters.langchain.__all__ == [
        "RollingChatMessageHistory",
        "from_langchain",
        "to_langchain",
    ]
    with pytest.raises(
        AttributeError, match=r"^module 'rollmem\.adapters\.langchain' has no attribute 'nope'$"
    ):
        rollmem.adapters.langchain.nope  # noqa: B018


def test_importing_the_adapters_does_not_import_langchain_core() -> None:
    code = (
        "import sys, rollmem, rollmem.adapters, rollmem.adapters.langchain\n"
        "from rollmem.adapters import from_anthropic, from_openai, to_anthropic, to_openai\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('langchain_core', 'pydantic')))\n"
        "print('rollmem.adapters.langchain' in sys.modules, 'rollmem.adapters' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["[]", "True True"]


def test_import_rollmem_does_not_import_the_adapters() -> None:
    code = "import sys, rollmem\nprint(sorted(m for m in sys.modules if m.startswith('rollmem.adapters')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"

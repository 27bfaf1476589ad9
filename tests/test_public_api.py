"""The public surface of ``rollmem``: exactly these names, and no optional dependency imported."""

from __future__ import annotations

import collections.abc
import subprocess
import sys
import typing

import rollmem
import rollmem.memory
import rollmem.message
import rollmem.recall

PUBLIC = [
    "ASSISTANT",
    "AsyncRollingMemory",
    "AsyncSummarizeFn",
    "AsyncSummaryMemory",
    "BufferMemory",
    "MemoryStats",
    "Message",
    "RecallHit",
    "RecallIndex",
    "RollingMemory",
    "SYSTEM",
    "SummarizeFn",
    "SummaryMemory",
    "TOOL",
    "TokenCounter",
    "ToolCall",
    "USER",
    "WindowMemory",
    "__version__",
]


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(rollmem.__all__) == sorted(PUBLIC)
    assert len(rollmem.__all__) == len(set(rollmem.__all__))
    for name in PUBLIC:
        assert hasattr(rollmem, name), name


def test_names_are_re_exports_from_their_stable_modules() -> None:
    for name in ["RollingMemory", "AsyncRollingMemory", "BufferMemory", "WindowMemory", "SummaryMemory"]:
        assert getattr(rollmem, name) is getattr(rollmem.memory, name)
    assert rollmem.AsyncSummaryMemory is rollmem.memory.AsyncSummaryMemory
    assert rollmem.MemoryStats is rollmem.memory.MemoryStats
    assert rollmem.Message is rollmem.message.Message
    assert rollmem.ToolCall is rollmem.message.ToolCall
    assert rollmem.RecallIndex is rollmem.recall.RecallIndex
    assert (rollmem.USER, rollmem.ASSISTANT, rollmem.SYSTEM, rollmem.TOOL) == (
        "user",
        "assistant",
        "system",
        "tool",
    )


def test_version_is_a_release_string() -> None:
    parts = rollmem.__version__.split(".")
    assert len(parts) == 3
    assert all(part.isdigit() for part in parts)


def test_type_aliases() -> None:
    assert typing.get_args(rollmem.TokenCounter) == ([str], int)
    params, result = typing.get_args(rollmem.SummarizeFn)
    assert result is str
    assert params[0] is str
    assert typing.get_origin(params[1]) is collections.abc.Sequence
    assert typing.get_args(params[1]) == (rollmem.Message,)
    async_params, async_result = typing.get_args(rollmem.AsyncSummarizeFn)
    assert async_params == params
    assert typing.get_origin(async_result) is collections.abc.Awaitable
    assert typing.get_args(async_result) == (str,)


def test_import_pulls_in_no_optional_dependency() -> None:
    code = (
        "import sys, rollmem, rollmem.memory, rollmem.message, rollmem.recall, rollmem.errors\n"
        "heavy = ['redis', 'psycopg', 'psycopg_pool', 'tiktoken', 'langchain_core', 'sqlite3', '_sqlite3']\n"
        "print(','.join(sorted(n for n in heavy if n in sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
    assert result.stderr == ""

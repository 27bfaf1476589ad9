"""The public surface of ``rollmem``: exactly these names, and no optional dependency imported."""

from __future__ import annotations

import ast
import collections.abc
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

import rollmem
import rollmem._types
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
    "cached_target",
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


def _public_modules() -> list[types.ModuleType]:
    """Every module of rollmem whose path has no ``_`` part, importable here (optional ones skip)."""
    modules = []
    for info in pkgutil.walk_packages(rollmem.__path__, "rollmem."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:  # an optional framework is missing: MissingExtraError is an ImportError
            continue
    return [rollmem, *modules]


@pytest.mark.parametrize("module", _public_modules(), ids=lambda module: module.__name__)
def test_all_is_consistent_with_the_module(module: types.ModuleType) -> None:
    """Every name in ``__all__`` exists and is documented; every public class or function the
    module defines is in ``__all__``."""
    exported = module.__all__
    assert len(exported) == len(set(exported)), module.__name__
    for name in exported:
        try:
            value = getattr(module, name)
        except ImportError:  # a name built lazily from an optional package that is missing here
            continue
        if inspect.isclass(value) or inspect.isfunction(value):
            assert (value.__doc__ or "").strip(), f"{module.__name__}.{name} has no docstring"
    defined = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module.__name__
    ]
    assert sorted(set(defined) - set(exported)) == [], module.__name__


def _imported_modules(module: types.ModuleType) -> set[str]:
    """The modules ``module``'s source imports, relative ones resolved to ``rollmem.*``."""
    tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
    package = module.__name__.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            name = ".".join(part for part in (base, node.module or "") if part)
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("name", ["counters", "summarizers", "sessions", "policies", "changes", "_types"])
def test_the_helpers_do_not_import_the_engine(name: str) -> None:
    """Counters, summarizers, sessions and policies take the type aliases from ``_types``."""
    module = importlib.import_module(f"rollmem.{name}")
    assert "rollmem.memory" not in _imported_modules(module)


def test_sessions_use_only_the_public_api_of_a_memory() -> None:
    """No ``_journal`` (nor any private memory attribute) in sessions or stores."""
    source = Path(rollmem.__file__).parent
    for path in [source / "sessions.py", *sorted((source / "stores").glob("*.py"))]:
        text = path.read_text(encoding="utf-8")
        assert "_journal" not in text, path.name
        assert re.search(r"\bmemory\._[a-z]", text) is None, path.name


def test_the_int_check_is_written_once() -> None:
    """``isinstance(x, bool) or not isinstance(x, int)`` lives in ``_validate`` only."""
    idiom = re.compile(r"isinstance\([^)]*,\s*bool\)\s*or\s+not\s+isinstance")
    source = Path(rollmem.__file__).parent
    offenders = [
        str(path.relative_to(source))
        for path in sorted(source.rglob("*.py"))
        if path.name != "_validate.py" and idiom.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_the_memory_module_keeps_its_re_exports() -> None:
    import rollmem.counters
    import rollmem.policies

    assert rollmem.memory.words is rollmem.counters.words
    for name in ("SummarizeFn", "AsyncSummarizeFn", "TokenCounter", "EvictHook"):
        assert getattr(rollmem.memory, name) is getattr(rollmem._types, name)
    assert rollmem.memory.Memory.__mro__[1].__name__ == "_SyncMemory"
    assert issubclass(rollmem.policies.TokenBudget, rollmem.policies.Policy)

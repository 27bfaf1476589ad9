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
from typing import Optional

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


# -- no module reaches another package's private module or name -----------------------------------

SOURCE = Path(rollmem.__file__).parent


def _is_package(parts: list[str]) -> bool:
    return SOURCE.parent.joinpath(*parts).is_dir()


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _reaches_out(package: list[str], target: list[str], name: Optional[str]) -> bool:
    """Whether code in ``package`` importing ``target`` (+ ``name``) reaches a private part it may
    not use. A private module or subpackage is shared infrastructure of the package holding it
    (subpackages included); a private name in a module is for that module's own package only."""
    for index, part in enumerate(target[1:], start=1):
        if _private(part):
            return package[:index] != target[:index]
    if name is None or not _private(name):
        return False
    if _is_package(target):  # ``from rollmem.stores import _whole``: a private submodule
        return package[: len(target)] != target
    return package != target[:-1]


def _private_reaches(module: str, source: str) -> list[str]:
    """Each import in ``source`` (the code of rollmem module ``module``) that reaches a private
    module or name of another package."""
    parts = module.split(".")
    package = parts if _is_package(parts) else parts[:-1]
    reaches: list[tuple[list[str], Optional[str]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            reaches.extend((alias.name.split("."), None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = base + (node.module.split(".") if node.module else [])
            reaches.extend((target, alias.name) for alias in node.names)
    return [
        f"{module}: {'.'.join(target)}{'' if name is None else ' import ' + name}"
        for target, name in reaches
        if target[0] == "rollmem" and _reaches_out(package, target, name)
    ]


@pytest.mark.parametrize(
    ("module", "source", "offends"),
    [
        ("rollmem.sessions", "from .stores._whole import WholeStateLog", True),
        ("rollmem.sessions", "from .stores import _whole", True),
        ("rollmem.sessions", "import rollmem.stores._protocol", True),
        ("rollmem.adapters.openai", "from ..message import Message, _thaw", True),
        ("rollmem.stores.redis", "from ..sessions import _SessionMemory", True),
        ("rollmem.stores.redis", "from ._whole import decode", False),
        ("rollmem.stores.redis", "from .. import _validate as v", False),
        ("rollmem.stores", "from ._protocol import Head", False),
        ("rollmem.stores.sqlite", "from rollmem._extras import import_extra", False),
        ("rollmem.sessions", "from .message import _messages_from_json", False),
        ("rollmem.stores.memory", "from ..message import _messages_from_json", True),
        ("rollmem.sessions", "from .stores.rules import new_head as _new_head", False),
        ("rollmem.cli", "import json, rollmem.stores", False),
    ],
)
def test_the_private_import_check_finds_what_it_should(module: str, source: str, offends: bool) -> None:
    assert bool(_private_reaches(module, source)) is offends


def test_no_module_imports_another_packages_private_name() -> None:
    """A private module or name is used only inside the package that holds it (and its
    subpackages): what another package needs is published under a public name."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.extend(_private_reaches(module, path.read_text(encoding="utf-8")))
    assert found == [], "publish these under a public name (or move them):\n" + "\n".join(found)


def test_import_pulls_in_no_test_framework() -> None:
    """``rollmem.testing`` is the only module that needs pytest."""
    code = (
        "import sys, rollmem, rollmem.stores, rollmem.stores.rules, rollmem.sessions\n"
        "print(','.join(sorted(n for n in ('pytest', '_pytest', 'hypothesis') if n in sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (result.stdout.strip(), result.stderr) == ("", "")


@pytest.mark.parametrize("missing", ["pytest"])
def test_the_test_kit_names_its_extra_when_a_package_is_missing(missing: str) -> None:
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "from rollmem.errors import MissingExtraError\n"
        "try:\n    import rollmem.testing\n"
        "except MissingExtraError as error:\n    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (
        result.stdout.strip()
        == f'rollmem.testing needs the {missing!r} package: pip install "rollmem[testing]"'
    )


def test_the_test_kit_needs_no_hypothesis() -> None:
    """The standard library and pytest are enough for ``rollmem.testing`` (issue 29)."""
    code = "import sys; sys.modules['hypothesis'] = None\nimport rollmem.testing\nprint('ok')\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "ok"


TESTING_FOR_APPLICATIONS = [
    "FakeLLM",
    "RecordingCounter",
    "RecordingSummarizer",
    "SummarizerDown",
    "assert_anthropic_accepts",
    "assert_nothing_lost",
    "assert_openai_accepts",
    "assert_responses_accepts",
    "assert_summarized_once",
    "async_memory_sessions",
    "memory_sessions",
]


def test_the_test_kit_offers_the_application_helpers() -> None:
    """``rollmem.testing`` re-exports exactly the helpers of ``rollmem._app_testing``."""
    import rollmem._app_testing
    import rollmem.testing

    assert sorted(rollmem._app_testing.__all__) == TESTING_FOR_APPLICATIONS
    for name in TESTING_FOR_APPLICATIONS:
        assert name in rollmem.testing.__all__
        assert getattr(rollmem.testing, name) is getattr(rollmem._app_testing, name)

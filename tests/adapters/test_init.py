from __future__ import annotations

import subprocess
import sys

import pytest

import rollmem.adapters
import rollmem.adapters.langchain


def test_adapters_public_names() -> None:
    assert rollmem.adapters.__all__ == [
        "from_anthropic",
        "from_openai",
        "from_openai_responses",
        "to_anthropic",
        "to_openai",
        "to_openai_responses",
    ]
    for name in rollmem.adapters.__all__:
        assert callable(getattr(rollmem.adapters, name))


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

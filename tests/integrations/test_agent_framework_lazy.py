"""The Agent Framework integration imports the framework only when a strategy is built (runs without it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rollmem.errors import MissingExtraError
from rollmem.integrations import agent_framework


def test_importing_rollmem_and_the_module_imports_no_framework() -> None:
    code = (
        "import sys, rollmem, rollmem.integrations, rollmem.integrations.agent_framework\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('agent_framework', 'pydantic')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["[]"]


def test_public_names() -> None:
    assert agent_framework.__all__ == [
        "DEFAULT_MAX_TOKENS",
        "DEFAULT_SOURCE_ID",
        "SUMMARY_MARKER",
        "RollingCompaction",
    ]


def test_a_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "agent_framework", None)
    with pytest.raises(MissingExtraError) as info:
        agent_framework.RollingCompaction()
    assert str(info.value) == (
        "rollmem.integrations.agent_framework.RollingCompaction needs the 'agent-framework-core' package: "
        'pip install "rollmem[agent-framework]"'
    )
    assert isinstance(info.value, ImportError)
    assert info.value.extra == "agent-framework"

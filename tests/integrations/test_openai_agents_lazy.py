"""The OpenAI Agents integration imports the SDK only when a session is built (runs without it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rollmem.errors import MissingExtraError
from rollmem.integrations import openai_agents


def test_importing_rollmem_and_the_module_imports_no_framework() -> None:
    code = (
        "import sys, rollmem, rollmem.integrations, rollmem.integrations.openai_agents\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('agents', 'openai', 'pydantic')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["[]"]


def test_public_names() -> None:
    assert openai_agents.__all__ == ["SUMMARY_HEADER", "RollingSession"]


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "agents", None)
    monkeypatch.setitem(sys.modules, "agents.memory", None)
    with pytest.raises(MissingExtraError) as info:
        openai_agents.RollingSession("s")
    assert str(info.value) == (
        "rollmem.integrations.openai_agents.RollingSession needs the 'openai-agents' package: "
        'pip install "rollmem[openai-agents]"'
    )
    assert isinstance(info.value, ImportError)
    assert info.value.extra == "openai-agents"

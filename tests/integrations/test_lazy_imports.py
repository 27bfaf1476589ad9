"""Every framework integration loads its framework lazily, checked in a fresh interpreter (so it runs
with or without the frameworks installed): ``import rollmem`` and its integrations and adapters
packages load no framework (nor the integration module, where it imports its framework only on
use), and a missing framework raises :class:`~rollmem.errors.MissingExtraError`, an ``ImportError``
naming the extra to install, at import or at first use."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Integration:
    module: str
    """The module under ``rollmem.integrations``."""
    frameworks: tuple[str, ...]
    """Packages (and their submodules) that importing rollmem, and the module when ``use`` is set,
    must not load."""
    use: str
    """What needs the framework once the module is imported as ``integration`` (empty: importing
    the module does)."""
    package: str
    extra: str
    feature: str
    """What the error says needs the package (on Python 3.9, the module adds "(Python 3.10+)" where
    its extra installs nothing there)."""


PY39 = "" if sys.version_info >= (3, 10) else " (Python 3.10+)"
INTEGRATIONS = [
    Integration(
        "agent_framework",
        ("agent_framework", "pydantic"),
        "integration.RollingCompaction()",
        "agent-framework-core",
        "agent-framework",
        "rollmem.integrations.agent_framework.RollingCompaction",
    ),
    Integration(
        "google_adk",
        ("google.adk", "google.genai"),
        "",
        "google-adk",
        "google-adk",
        "rollmem.integrations.google_adk",
    ),
    Integration(
        "langchain",
        ("langchain", "langchain_core", "langgraph"),
        "",
        "langchain",
        "langchain",
        "rollmem.integrations.langchain" + PY39,
    ),
    Integration(
        "llama_index",
        ("llama_index", "pydantic"),
        "integration.RollingSummaryBlock",
        "llama-index-core",
        "llama-index",
        "rollmem.integrations.llama_index",
    ),
    Integration(
        "openai_agents",
        ("agents", "openai", "pydantic"),
        'integration.RollingSession("s")',
        "openai-agents",
        "openai-agents",
        "rollmem.integrations.openai_agents.RollingSession",
    ),
    Integration(
        "pydantic_ai",
        ("pydantic_ai", "pydantic"),
        "integration.rolling_history()",
        "pydantic-ai-slim",
        "pydantic-ai",
        "rollmem.integrations.pydantic_ai",
    ),
    Integration(
        "strands", ("strands",), "", "strands-agents", "strands", "rollmem.integrations.strands" + PY39
    ),
]


def _run(code: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (result.returncode, result.stderr) == (0, "")
    return result.stdout.splitlines()


@pytest.mark.parametrize("integration", INTEGRATIONS, ids=lambda integration: integration.module)
def test_importing_rollmem_loads_no_framework(integration: Integration) -> None:
    imported = "rollmem, rollmem.integrations, rollmem.adapters"
    if integration.use:
        imported += f", rollmem.integrations.{integration.module}"
    code = (
        f"import sys, {imported}\n"
        f"frameworks = {integration.frameworks!r}\n"
        "print(sorted(n for n in sys.modules if any(n == f or n.startswith(f + '.') for f in frameworks)))\n"
    )
    assert _run(code) == ["[]"]


@pytest.mark.parametrize("integration", INTEGRATIONS, ids=lambda integration: integration.module)
def test_a_missing_framework_names_the_extra(integration: Integration) -> None:
    code = (
        "import sys\n"
        f"sys.modules[{integration.frameworks[0]!r}] = None  # as if not installed\n"
        "from rollmem.errors import MissingExtraError\n"
        "try:\n"
        f"    import rollmem.integrations.{integration.module} as integration\n"
        f"    {integration.use or 'pass'}\n"
        "except MissingExtraError as error:\n"
        "    print(isinstance(error, ImportError), error.extra, error.name)\n"
        "    print(error)\n"
    )
    assert _run(code) == [
        f"True {integration.extra} {integration.package}",
        f"{integration.feature} needs the {integration.package!r} package: "
        f'pip install "rollmem[{integration.extra}]"',
    ]

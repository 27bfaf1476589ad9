"""Every ```python block of the README runs, in a fresh namespace, in a scratch directory.

A block whose first line is ``# needs: NAME`` runs only where NAME is available: an importable
optional package, or a test server (``redis``/``postgres``: the ROLLMEM_TEST_* variables).
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
SERVERS = {"redis": "ROLLMEM_TEST_REDIS_URL", "postgres": "ROLLMEM_TEST_POSTGRES_DSN"}


def _blocks() -> list[tuple[int, str]]:
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, match.start()) + 1, match.group(1)) for match in BLOCK.finditer(text)]


def _missing(code: str) -> str | None:
    first = code.splitlines()[0] if code else ""
    if not first.startswith("# needs:"):
        return None
    for need in first.split(":", 1)[1].split(","):
        need = need.strip()
        if need in SERVERS:
            if not os.environ.get(SERVERS[need]):
                if os.environ.get("ROLLMEM_REQUIRE_SERVICES") == "1":
                    pytest.fail(f"{SERVERS[need]} is not set but ROLLMEM_REQUIRE_SERVICES=1")
                return f"no {need} server (source .ci/services to start one)"
        elif not _importable(need):
            return f"{need} is not installed"
    return None


def _importable(name: str) -> bool:
    """Whether module ``name`` can be imported; ``find_spec`` of a dotted name raises when a
    parent package is missing."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def test_readme_has_examples() -> None:
    assert len(_blocks()) >= 10


@pytest.mark.parametrize(
    ("line", "code"), _blocks(), ids=lambda value: f"line{value}" if isinstance(value, int) else ""
)
def test_readme_block_runs(line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reason = _missing(code)
    if reason:
        pytest.skip(reason)
    monkeypatch.chdir(tmp_path)
    for name, variable in SERVERS.items():
        monkeypatch.setenv(f"ROLLMEM_{name.upper()}", os.environ.get(variable, ""))
    exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "__readme__"})


def test_a_block_needing_a_submodule_of_a_missing_package_is_skipped() -> None:
    assert _missing("# needs: no_such_package.submodule\nprint()") == (
        "no_such_package.submodule is not installed"
    )

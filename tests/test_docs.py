"""The documentation: every example runs, and the API reference covers the whole public surface.

Every ```python block of ``README.md`` and of ``docs/**/*.md`` runs, in a fresh namespace, in a
scratch directory. A block whose first line is ``# needs: NAME[, NAME...]`` runs only where each
NAME is available: an importable module, or a test server named in ``SERVERS`` (its address is
exported to the block as ``ROLLMEM_<NAME>``, e.g. ``ROLLMEM_REDIS``). Without a server the block
skips, unless ``ROLLMEM_REQUIRE_SERVICES=1``.

The reference checks read the source with ``ast`` (no optional package is imported) and, where
mkdocs is installed (the ``docs`` extra), build the site and read its object inventory.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = DOCS / "pages"
REFERENCE = [PAGES / "reference.md", *sorted((PAGES / "reference").glob("*.md"))]
PACKAGE = ROOT / "src" / "rollmem"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
DIRECTIVE = re.compile(r"^::: *([\w.]+) *$", re.MULTILINE)
# server name in "# needs:" -> (the variable the test run is given, the one exported to the block)
SERVERS = {
    "redis": ("ROLLMEM_TEST_REDIS_URL", "ROLLMEM_REDIS"),
    "postgres": ("ROLLMEM_TEST_POSTGRES_DSN", "ROLLMEM_POSTGRES"),
    "redis_cluster": ("ROLLMEM_TEST_REDIS_CLUSTER_URL", "ROLLMEM_REDIS_CLUSTER"),
    "pgbouncer": ("ROLLMEM_TEST_PGBOUNCER_DSN", "ROLLMEM_PGBOUNCER"),
}


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(PAGES.rglob("*.md"))]


def _blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in _documents():
        text = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((f"{path.relative_to(ROOT).as_posix()}:{line}", match.group(1)))
    return blocks


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a dotted name whose parent package is missing raises
        return False


def _missing(code: str) -> str | None:
    first = code.splitlines()[0] if code else ""
    if not first.startswith("# needs:"):
        return None
    for need in first.split(":", 1)[1].split(","):
        need = need.strip()
        if need in SERVERS:
            variable = SERVERS[need][0]
            if not os.environ.get(variable):
                if os.environ.get("ROLLMEM_REQUIRE_SERVICES") == "1":
                    pytest.fail(f"{variable} is not set but ROLLMEM_REQUIRE_SERVICES=1")
                return f"no {need} server ({variable} is not set)"
        elif not _importable(need):
            return f"{need} is not installed"
    return None


def test_needs_of_a_missing_dotted_module_skips() -> None:
    assert _missing("# needs: rollmem_no_such_package.sub\nprint()") == (
        "rollmem_no_such_package.sub is not installed"
    )
    assert _missing("# needs: json.decoder\nprint()") is None
    assert _missing("print()") is None


def test_every_python_example_is_a_python_block() -> None:
    """A block tagged ``py``, ``python3`` or ``pycon`` would silently escape the run above."""
    for path in _documents():
        text = path.read_text(encoding="utf-8")
        tags = re.findall(r"^```(py|python3|pycon|ipython)\s*$", text, re.MULTILINE)
        assert not tags, f"{path.relative_to(ROOT)}: tag Python examples ```python so they run ({tags})"


def test_docs_have_examples() -> None:
    names = {where.split(":")[0] for where, _ in _blocks()}
    assert "README.md" in names
    assert len(_blocks()) >= 25


@pytest.mark.parametrize(("where", "code"), _blocks(), ids=[where for where, _ in _blocks()])
def test_python_block_runs(where: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reason = _missing(code)
    if reason:
        pytest.skip(reason)
    monkeypatch.chdir(tmp_path)
    for given, exported in SERVERS.values():
        monkeypatch.setenv(exported, os.environ.get(given, ""))
    exec(compile(code, where, "exec"), {"__name__": "__docs__"})


# -- the API reference ---------------------------------------------------------------------------


def _public_modules() -> dict[str, list[str]]:
    """Every public module of the package (no part starts with ``_``) and its ``__all__``, from source."""
    modules: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if any(part.startswith("_") for part in parts):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names: list[str] = []
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
            ):
                names = list(ast.literal_eval(node.value))
        modules[".".join(parts)] = names
    return modules


def test_every_public_module_is_in_the_reference() -> None:
    listed = [name for page in REFERENCE for name in DIRECTIVE.findall(page.read_text(encoding="utf-8"))]
    missing = sorted(set(_public_modules()) - set(listed))
    assert not missing, (
        f"add a '::: NAME' line to docs/pages/reference.md or reference/*.md for each of {missing}"
    )
    assert len(listed) == len(set(listed))


def _inventory(site: Path) -> set[str]:
    """The object names in a built site's ``objects.inv`` (Sphinx inventory version 2)."""
    data = (site / "objects.inv").read_bytes()
    header = data.split(b"\n", 4)
    assert header[0] == b"# Sphinx inventory version 2"
    body = zlib.decompress(header[4]).decode("utf-8")
    return {line.split(" ", 1)[0] for line in body.splitlines() if line.strip()}


def _unrendered(inventory: set[str]) -> list[str]:
    missing = []
    for module, names in _public_modules().items():
        for name in names:
            # A name a package loads lazily is documented where it is defined, in a submodule.
            defined_below = any(
                entry.startswith(module + ".") and entry.endswith("." + name) for entry in inventory
            )
            if f"{module}.{name}" not in inventory and not defined_below:
                missing.append(f"{module}.{name}")
    return missing


def test_built_reference_documents_every_public_name(tmp_path: Path) -> None:
    for needed in ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python"):
        if not _importable(needed):
            pytest.skip(f'{needed} is not installed: pip install -e ".[docs]"')
    site = tmp_path / "site"
    command = ["mkdocs", "build", "--strict", "-f", str(DOCS / "mkdocs.yml"), "-d", str(site)]
    build = subprocess.run(
        [sys.executable, "-m", *command],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    missing = _unrendered(_inventory(site))
    assert not missing, f"public names absent from the API reference: {missing}"

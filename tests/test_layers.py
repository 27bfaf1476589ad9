"""The layering drawn on the architecture page is the layering of the code.

``docs/pages/architecture.md`` has a table (under "The parts") that puts every module of
``src/rollmem`` in one part and says which parts it may import. This test reads that table and
the imports of every module, so the page cannot drift from the code and the code cannot grow an
import that runs back up.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import rollmem

SOURCE = Path(rollmem.__file__).parent
PAGE = Path(__file__).resolve().parents[1] / "docs" / "pages" / "architecture.md"
BACKENDS = {"stores.memory", "stores.sqlite", "stores.redis", "stores.postgres"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "rollmem"


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(SOURCE.rglob("*.py"))}


def _imports(name: str, path: Path, modules: set[str]) -> set[str]:
    """The rollmem modules ``name`` imports (``from . import x`` resolved to the module ``x``
    when it is one), by their names relative to the package."""
    package = [] if name == "rollmem" else name.split(".")[: None if path.name == "__init__.py" else -1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names if alias.name.startswith("rollmem")]
            targets = [t.partition(".")[2] or "rollmem" for t in targets]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("rollmem"):
                module = node.module.partition(".")[2]  # type: ignore[union-attr]
            else:
                continue
            children = [f"{module}.{alias.name}" if module else alias.name for alias in node.names]
            targets = [child for child in children if child in modules]
            if module or len(targets) < len(children):  # names from the package itself
                targets.append(module or "rollmem")
        found.update(t for t in targets if t in modules and t != name)
    return found


def _page_parts() -> tuple[dict[str, str], dict[str, set[str]]]:
    """module -> part, and part -> the parts it may import, from the page's table."""
    lines = PAGE.read_text(encoding="utf-8").split("## The parts", 1)[1].splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("| part |"))
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2 :]))
    part_of: dict[str, str] = {}
    may: dict[str, set[str]] = {}
    for row in rows:
        part, modules, allowed = (cell.strip() for cell in row.strip("|").split("|"))
        for module in re.findall(r"`([^`]+)`", modules):
            assert module not in part_of, f"{module} is in two parts"
            part_of[module] = part
        may[part] = {part, *(p.strip() for p in allowed.split(",") if p.strip() and p.strip() != "-")}
    return part_of, may


def test_every_module_is_on_the_page_once() -> None:
    part_of, _ = _page_parts()
    assert sorted(part_of) == sorted(_modules())


def test_no_import_crosses_the_drawn_lines() -> None:
    part_of, may = _page_parts()
    modules = _modules()
    crossings = [
        f"{name} ({part_of[name]}) imports {target} ({part_of[target]})"
        for name, path in modules.items()
        for target in sorted(_imports(name, path, set(modules)))
        if part_of[target] not in may[part_of[name]]
    ]
    assert crossings == []


def test_backends_never_import_each_other() -> None:
    modules = _modules()
    found = [
        f"{name} imports {target}"
        for name in sorted(BACKENDS)
        for target in sorted(_imports(name, modules[name], set(modules)) & BACKENDS)
    ]
    assert found == []

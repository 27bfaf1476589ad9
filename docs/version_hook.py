"""An MkDocs hook: the site's name shows the version, read from ``rollmem.__version__`` (its one home)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

INIT = Path(__file__).resolve().parent.parent / "src" / "rollmem" / "__init__.py"


def version() -> str:
    """``__version__`` from the package source, read without importing it."""
    for node in ast.parse(INIT.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            if isinstance(value, str):
                return value
    raise RuntimeError(f"no __version__ string in {INIT}")


def on_config(config: Any) -> Any:
    config["site_name"] = f"rollmem {version()}"
    return config

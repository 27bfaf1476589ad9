"""The single-file reference implementation, ``docs/reference_impl/rollmem.py``, imported as the
module ``rollmem`` without replacing the library: :data:`reference` is that module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REFERENCE_FILE = Path(__file__).resolve().parents[2] / "docs" / "reference_impl" / "rollmem.py"


def load_reference() -> ModuleType:
    """Execute the reference file as a new module named ``rollmem``. ``sys.modules["rollmem"]``
    is the new module while it runs (dataclasses look their module up there), then the library
    again."""
    spec = importlib.util.spec_from_file_location("rollmem", REFERENCE_FILE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    library = sys.modules.get("rollmem")
    sys.modules["rollmem"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        if library is None:
            del sys.modules["rollmem"]
        else:
            sys.modules["rollmem"] = library
    return module


reference = load_reference()

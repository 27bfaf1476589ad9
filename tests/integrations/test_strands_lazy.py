"""The Strands integration's imports (run with or without strands-agents installed)."""

from __future__ import annotations

import subprocess
import sys


def test_importing_rollmem_imports_no_strands() -> None:
    code = (
        "import sys, rollmem, rollmem.integrations, rollmem.adapters\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'strands'))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["[]"]


def test_a_missing_strands_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['strands'] = None\n"
        "from rollmem.errors import MissingExtraError\n"
        "try:\n"
        "    import rollmem.integrations.strands\n"
        "except MissingExtraError as error:\n"
        "    print(isinstance(error, ImportError), error.extra)\n"
        "    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    feature = "rollmem.integrations.strands" + ("" if sys.version_info >= (3, 10) else " (Python 3.10+)")
    assert result.stdout.splitlines() == [
        "True strands",
        f"{feature} needs the 'strands-agents' package: pip install \"rollmem[strands]\"",
    ]

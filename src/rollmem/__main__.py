"""``python -m rollmem``: the command line (:func:`rollmem.cli.main`)."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":  # importing the module (documentation tools do) runs nothing
    raise SystemExit(main())

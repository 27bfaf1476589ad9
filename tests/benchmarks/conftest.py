"""The benchmarks are run as ``python tests/benchmarks/run.py``, never collected by pytest."""

from __future__ import annotations

collect_ignore_glob = ["*"]

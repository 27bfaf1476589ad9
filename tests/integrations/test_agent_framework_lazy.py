"""The Agent Framework integration's public names, without it (lazy import: test_lazy_imports.py)."""

from __future__ import annotations

from rollmem.integrations import agent_framework


def test_public_names() -> None:
    assert agent_framework.__all__ == [
        "DEFAULT_MAX_TOKENS",
        "DEFAULT_SOURCE_ID",
        "SUMMARY_MARKER",
        "RollingCompaction",
    ]

"""The OpenAI Agents integration's public names, without the SDK (its lazy import: test_lazy_imports.py)."""

from __future__ import annotations

from rollmem.integrations import openai_agents


def test_public_names() -> None:
    assert openai_agents.__all__ == ["SUMMARY_HEADER", "RollingSession", "cached_prefix"]

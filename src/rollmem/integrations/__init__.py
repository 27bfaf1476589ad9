"""A rollmem memory behind each framework's own plug-in interface, one module per framework.

- :mod:`rollmem.integrations.langchain`: LangChain v1 agents (``create_agent`` middleware).
- :mod:`rollmem.integrations.openai_agents`: the OpenAI Agents SDK.
- :mod:`rollmem.integrations.pydantic_ai`: Pydantic AI.
- :mod:`rollmem.integrations.llama_index`: LlamaIndex.

Each needs its framework (an extra of the same name) and raises
:class:`~rollmem.errors.MissingExtraError`, an ``ImportError`` naming the ``pip install`` to run,
without it. Importing this package imports no framework.
"""

from __future__ import annotations

__all__: list[str] = []

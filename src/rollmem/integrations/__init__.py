"""Framework integrations: one module per framework, each an optional extra.

- :mod:`rollmem.integrations.langchain`: ``RollingMemoryMiddleware`` for LangChain v1 agents.
- :mod:`rollmem.integrations.openai_agents`: ``RollingSession`` for the OpenAI Agents SDK.
- :mod:`rollmem.integrations.pydantic_ai`: ``rolling_history`` for pydantic-ai agents.
- :mod:`rollmem.integrations.llama_index`: ``RollingSummaryBlock`` for LlamaIndex memory.
- :mod:`rollmem.integrations.strands`: ``RollingConversationManager`` for Strands Agents.
- :mod:`rollmem.integrations.agent_framework`: ``RollingCompaction`` for Microsoft Agent Framework agents.
- :mod:`rollmem.integrations.google_adk`: ``RollingMemoryPlugin`` for Google ADK agents.

Importing this package imports no framework.
"""

__all__: list[str] = []

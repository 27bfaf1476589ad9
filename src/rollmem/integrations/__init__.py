"""Framework integrations, one module per framework, each an optional extra (its page in the docs):
``langchain``, ``openai_agents``, ``pydantic_ai``, ``llama_index``, ``strands``, ``agent_framework``,
``google_adk``. They share one private engine (``_engine``). Importing this package imports no
framework."""

__all__: list[str] = []

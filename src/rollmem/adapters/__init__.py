"""Plain-dict conversions between rollmem messages and provider request formats (no SDK imported).

``to_openai``/``from_openai``: OpenAI Chat Completions messages. ``to_openai_responses``/
``from_openai_responses``: OpenAI Responses API input items (lossless: the items are kept).
``to_anthropic``/``from_anthropic``: the Anthropic Messages API ``system`` and ``messages``.
``for_provider`` (with its parts ``pair_tool_results`` and ``user_first``): the rule every
renderer applies (these adapters and every integration's request), so that any buffer becomes a
request every provider accepts: tool calls and results paired or sent as text, and a user turn
first (:data:`CONTINUATION_TEXT` inserted when the buffer opens with another turn). LangChain objects
are in :mod:`rollmem.adapters.langchain` (extra ``langchain``), which this package does not import.

Every adapter: tool calls belong to assistant messages and ``tool_call_id`` to tool messages (other
combinations raise ``ValueError``); rollmem fields a format cannot carry (``pinned``, most
metadata) are not sent; errors name the bad item and field (``items[3].tool_calls[0].function.name:
expected str, got int``) and are ``ValueError``/``TypeError`` subclasses from :mod:`rollmem.errors`.
"""

from __future__ import annotations

from ._common import CONTINUATION_TEXT, CONTINUATION_TEXT_PLAIN, for_provider, pair_tool_results, user_first
from .anthropic import from_anthropic, to_anthropic
from .openai import from_openai, from_openai_responses, to_openai, to_openai_responses

__all__ = [
    "CONTINUATION_TEXT",
    "CONTINUATION_TEXT_PLAIN",
    "for_provider",
    "from_anthropic",
    "from_openai",
    "from_openai_responses",
    "pair_tool_results",
    "to_anthropic",
    "to_openai",
    "to_openai_responses",
    "user_first",
]

"""Provider prompt-caching prices, as data: what one input token costs, relative to the plain input price.

Every figure is a multiple of the model's base input price per token ("input-token equivalents"), so
the benchmark's totals read as "tokens billed at the full input price". The figures are the public
pricing pages as of early 2026 (ASSUMPTION: they were read from these pages then and may have changed
since; re-check before quoting a dollar figure):

- Anthropic, https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching and
  https://www.anthropic.com/pricing : a 5-minute cache write costs 1.25x the base input price, a
  1-hour cache write 2x, a cache read (hit) 0.1x; the lifetime is refreshed each time the prefix is
  read. Output is 5x input on the Claude Sonnet / Opus models ($3 / $15 per MTok for Sonnet).
- OpenAI, https://platform.openai.com/docs/guides/prompt-caching and https://openai.com/api/pricing :
  automatic prefix caching, no write premium; cached input is 0.1x on the GPT-5 family ($1.25 input,
  $0.125 cached per MTok; older models 0.25x-0.5x); prefixes stay cached for 5-10 minutes of
  inactivity (up to an hour off-peak): 5 minutes assumed. Output 8x input ($10 per MTok).
- Google Gemini, https://ai.google.dev/gemini-api/docs/caching and
  https://ai.google.dev/gemini-api/docs/pricing : implicit caching on the Gemini 2.5 and later models,
  no write premium, cached tokens at 0.1x the input price ($0.125 vs $1.25 per MTok on 2.5 Pro,
  prompts up to 200k). The implicit cache's lifetime is not published: 5 minutes assumed. Output 8x.

Simplifications, the same for every memory, by whole messages: with automatic prefix caching
(``any_prefix``: OpenAI, Gemini) a request's longest prefix shared with a request sent within the
cache lifetime is a hit; on Anthropic a request writes an entry at each ``cache_control``
breakpoint (after the system prompt, after the summary, at its end) and a hit is the longest entry
that is a whole prefix of it (the 20-block lookback is not modelled); the rest is a write. Minimum
cacheable lengths (1,024 tokens on most models) are met by the 1,200-token system prompt and
ignored. A text summarization prompt is billed as plain input (1x); a summarization request of
messages (``rollmem.summarizers.cached_summary_request``) goes through the cache like any request.
Summaries are billed at the output price.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pricing:
    """One provider's prices in input-token equivalents, and how long a cached prefix lives."""

    name: str
    write: float  # a prompt token that is not a cache hit (Anthropic: the cache write premium)
    read: float  # a prompt token read from the cache
    output: float  # a completion token (the summarizer's summaries)
    lifetime_s: float  # a cached prefix expires this long after it was last written or read
    source: str
    any_prefix: bool = True  # automatic caching reads any cached prefix; False: only at breakpoints


PRICES: dict[str, Pricing] = {
    p.name: p
    for p in (
        Pricing(
            "anthropic-5m", 1.25, 0.10, 5.0, 300, "docs.anthropic.com prompt caching, 5-minute TTL", False
        ),
        Pricing(
            "anthropic-1h", 2.00, 0.10, 5.0, 3600, "docs.anthropic.com prompt caching, 1-hour TTL", False
        ),
        Pricing("openai", 1.00, 0.10, 8.0, 300, "openai.com/api/pricing, GPT-5 cached input"),
        Pricing("gemini", 1.00, 0.10, 8.0, 300, "ai.google.dev pricing, Gemini 2.5 implicit caching"),
    )
}
DEFAULT_PROVIDER = "anthropic-5m"

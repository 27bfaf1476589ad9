"""How providers bill a conversation's requests: named billing profiles, and a faithful prompt cache.

Every figure is a multiple of the model's base input price per token ("input-token
equivalents"), so the benchmark's totals read as "tokens billed at the full input price". The
figures were read from the providers' public documentation in 2026 (ASSUMPTION: they change;
re-check before quoting a dollar figure). Sources, per rule:

- **Anthropic** (https://platform.claude.com/docs/en/build-with-claude/prompt-caching,
  https://www.anthropic.com/pricing): a 5-minute cache write costs 1.25x the base input price, a
  1-hour write 2x, a cache read 0.1x; output 5x on Sonnet 4.5/4.6 ($3 / $15 per MTok), Opus
  4.5/4.6 ($5 / $25) and Haiku 4.5 ($1 / $5). An entry is written at each ``cache_control``
  breakpoint (at most 4 per request) whose prefix reaches the model's minimum cacheable length:
  1,024 tokens on Sonnet 4.5/4.6, 4,096 on Opus 4.5/4.6 and Haiku 4.5 (a shorter prefix is
  processed without caching, at 1x). A breakpoint reads the longest entry ending at a block
  boundary at most 20 content blocks before it (the "lookback"); the tokens from there to the
  last breakpoint that writes are billed as a cache write, anything after the last breakpoint as
  plain input (1x). Each use refreshes an entry's lifetime at no cost.
- **OpenAI** (https://platform.openai.com/docs/guides/prompt-caching,
  https://openai.com/api/pricing): automatic prefix caching of prompts of 1,024 tokens or more,
  hits in increments of 128 tokens (1,024, 1,152, 1,280, ...), no write premium on these models;
  cached input 0.1x on GPT-5 ($1.25 / $0.125, output $10: 8x), 0.25x on GPT-4.1 ($2 / $0.50,
  output $8: 4x), 0.5x on GPT-4o ($2.50 / $1.25, output $10: 4x). Prefixes stay cached "5 to 10
  minutes of inactivity, up to an hour off-peak": 5 minutes here, refreshed by each hit.
- **Google Gemini** (https://ai.google.dev/gemini-api/docs/caching,
  https://ai.google.dev/gemini-api/docs/pricing): implicit caching on Gemini 2.5 models, no write
  premium; minimum 1,024 tokens on 2.5 Flash (what the API enforces; the caching page has said
  1,024 and 2,048) and 2,048 on 2.5 Pro (4,096 on earlier versions of the page); cached input
  0.1x on the current pricing page (0.25x when implicit caching launched in May 2025); output
  8.33x on Flash ($0.30 / $2.50), 8x on Pro ($1.25 / $10). The implicit cache's lifetime is not
  published: 5 minutes here, refreshed by each hit.
- **No caching**: every token at 1x, output 5x (a model without prompt caching, or caching off).

Not documented anywhere we found, so assumed: the lifetime of OpenAI's and Gemini's automatic
caches (5 minutes, refreshed on use), whether Gemini's implicit hits have a granularity (none
here), and how Anthropic counts the lookback's blocks for a system prompt sent as one text block
with the tools (one block here). Matching is by whole messages: a request shares a prefix with a
cached one up to the first message that differs (the fake summaries differ only in their last
words, which a token-level cache would partly match; real summaries differ throughout).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

Block = tuple[str, str, int]
"""One message of a request: ``(role, token text, content blocks)``; the unit of prefix matching.
Content blocks are what Anthropic's lookback counts: one per message, plus one per tool call."""


@dataclass(frozen=True)
class Profile:
    """One model's billing, in input-token equivalents, and its prompt cache's rules."""

    name: str
    label: str
    write: float  # a cache write (Anthropic: the premium; automatic caching: 1.0)
    read: float  # a cache hit
    output: float  # a completion token
    ttl_s: float  # an entry expires this long after it was last written or read
    min_tokens: int  # the shortest cacheable prefix (0: no caching at all)
    breakpoints: bool  # Anthropic: entries only at cache_control breakpoints, read with a lookback
    step: int = 1  # hits in increments of this many tokens past min_tokens (OpenAI: 128)
    lookback: int = 20  # content blocks a breakpoint looks back for an entry (Anthropic)
    source: str = ""

    @property
    def caches(self) -> bool:
        return self.min_tokens > 0


_ANTHROPIC = "platform.claude.com prompt caching; anthropic.com/pricing"
_OPENAI = "platform.openai.com prompt caching; openai.com/api/pricing"
_GEMINI = "ai.google.dev caching and pricing"
PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "anthropic-5m",
            "Anthropic Sonnet 4.5/4.6, 5-minute cache",
            1.25,
            0.1,
            5,
            300,
            1024,
            True,
            source=_ANTHROPIC,
        ),
        Profile(
            "anthropic-1h",
            "Anthropic Sonnet 4.5/4.6, 1-hour cache",
            2.0,
            0.1,
            5,
            3600,
            1024,
            True,
            source=_ANTHROPIC,
        ),
        Profile(
            "anthropic-4096",
            "Anthropic Opus 4.5/4.6, Haiku 4.5, 5-minute cache",
            1.25,
            0.1,
            5,
            300,
            4096,
            True,
            source=_ANTHROPIC,
        ),
        Profile("gpt-5", "OpenAI GPT-5", 1.0, 0.1, 8, 300, 1024, False, 128, source=_OPENAI),
        Profile("gpt-4.1", "OpenAI GPT-4.1", 1.0, 0.25, 4, 300, 1024, False, 128, source=_OPENAI),
        Profile("gpt-4o", "OpenAI GPT-4o", 1.0, 0.5, 4, 300, 1024, False, 128, source=_OPENAI),
        Profile(
            "gemini-flash",
            "Gemini 2.5 Flash, implicit caching",
            1.0,
            0.1,
            8.33,
            300,
            1024,
            False,
            source=_GEMINI,
        ),
        Profile(
            "gemini-pro", "Gemini 2.5 Pro, implicit caching", 1.0, 0.1, 8, 300, 2048, False, source=_GEMINI
        ),
        Profile(
            "none", "no prompt caching", 1.0, 1.0, 5, 0, 0, False, source="every token at the input price"
        ),
    )
}
DEFAULT_PROFILE = "anthropic-5m"


def breakpoints(blocks: Sequence[Block]) -> list[int]:
    """Where ``to_anthropic(..., cache=True)`` puts ``cache_control``, as message counts: after
    the system prompt, after the last system message when there are two or more at the start
    (the summary: the adapter moves every system message into ``system``, one block each), and
    on the last block of the last turn."""
    marks = [1]
    systems = 1
    while systems < len(blocks) and blocks[systems][0] == "system":
        systems += 1
    if systems > 1:
        marks.append(systems)
    if len(blocks) > marks[-1]:
        marks.append(len(blocks))
    return marks


class Cache:
    """One conversation's prompt cache under a profile: ``bill(now, blocks, sizes)`` prices one
    request and updates the cache. Prefixes are keyed by a hash chain over their messages."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.entries: dict[int, float] = {}  # prefix hash -> expiry second
        self.swept = 0.0

    def bill(self, now: float, blocks: Sequence[Block], sizes: Sequence[int]) -> tuple[float, int]:
        """``(billed input-token equivalents, tokens read from the cache)`` for one request."""
        p = self.profile
        total = sum(sizes)
        if not p.caches:
            return float(total), 0
        if now - self.swept > p.ttl_s:  # forget what expired (a hit checks the expiry anyway)
            self.entries = {k: e for k, e in self.entries.items() if e >= now}
            self.swept = now
        hashes = [0]
        tokens = [0]
        for block, size in zip(blocks, sizes):
            hashes.append(hash((hashes[-1], block[0], block[1])))
            tokens.append(tokens[-1] + size)
        if p.breakpoints:
            return self._breakpoints(now, blocks, hashes, tokens)
        return self._automatic(now, hashes, tokens)

    def _live(self, key: int, now: float) -> bool:
        expiry = self.entries.get(key)
        return expiry is not None and expiry >= now

    def _automatic(self, now: float, hashes: list[int], tokens: list[int]) -> tuple[float, int]:
        p = self.profile
        n = len(hashes) - 1
        shared = 0
        while shared < n and self._live(hashes[shared + 1], now):
            shared += 1
        hit = tokens[shared]
        if hit < p.min_tokens:
            hit = 0
        elif p.step > 1:
            hit -= (hit - p.min_tokens) % p.step
        expiry = now + p.ttl_s
        if tokens[n] >= p.min_tokens:  # the request is cached: every prefix of it, refreshed
            for key in hashes[1:]:
                self.entries[key] = expiry
        return hit * p.read + (tokens[n] - hit) * p.write, hit

    def _breakpoints(
        self, now: float, blocks: Sequence[Block], hashes: list[int], tokens: list[int]
    ) -> tuple[float, int]:
        p = self.profile
        marks = breakpoints(blocks)
        content = [0]  # content blocks before each message boundary
        for block in blocks:
            content.append(content[-1] + block[2])
        best = 0
        for mark in marks:
            j = mark
            while j > best and content[mark] - content[j] < p.lookback:
                if self._live(hashes[j], now):
                    best = j
                    break
                j -= 1
        written = max((m for m in marks if tokens[m] >= p.min_tokens), default=0)
        expiry = now + p.ttl_s
        if best:
            self.entries[hashes[best]] = expiry  # a read refreshes the entry
        for mark in marks:
            if tokens[mark] >= p.min_tokens:
                self.entries[hashes[mark]] = expiry
        hit = tokens[best]
        write = max(0, tokens[written] - hit)
        plain = tokens[-1] - max(hit, tokens[written])
        return hit * p.read + write * p.write + plain, hit


def profile(name: Optional[str]) -> Profile:
    return PROFILES[name or DEFAULT_PROFILE]

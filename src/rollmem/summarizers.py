"""Ready-made ``summarize_fn`` factories: around your LLM call, without an LLM, and with a fallback.

- :func:`prompt_summarizer` / :func:`async_prompt_summarizer` turn any ``complete(prompt) -> str``
  (your LLM call) into a ``summarize_fn``, optionally bounded to ``max_summary_tokens``;
- :func:`cached_summarizer` / :func:`async_cached_summarizer` turn ``complete(messages) -> str`` into
  a ``summarize_fn`` whose request (:func:`cached_summary_request`) shares the conversation's cached
  prompt prefix, the cheapest way to summarize with provider prompt caching;
- :func:`extractive_summarizer` needs no LLM: it keeps the first sentence of each folded turn;
- :func:`with_fallback` / :func:`async_with_fallback` call a second summarizer when the first fails,
  so an LLM outage degrades the summary instead of raising into the chat.
"""

from __future__ import annotations

import logging
import re
import string
from collections.abc import Awaitable, Generator, Sequence
from dataclasses import dataclass
from typing import Callable, Optional, Union

from . import _validate as v
from ._flow import arun, resolved, run
from ._types import AsyncSummarizeFn, SummarizeFn, TokenCounter
from .counters import words
from .message import SYSTEM, USER, Message

__all__ = [
    "CACHED_INSTRUCTION",
    "DEFAULT_TEMPLATE",
    "SHORTEN_TEMPLATE",
    "SummaryAs",
    "async_cached_summarizer",
    "async_prompt_summarizer",
    "async_with_fallback",
    "cached_summarizer",
    "cached_summary_request",
    "extractive_summarizer",
    "newest_suffix",
    "prompt_summarizer",
    "with_fallback",
]

logger = logging.getLogger("rollmem")

DEFAULT_TEMPLATE = """\
You keep the running summary of a conversation between a user and an AI assistant.

Current summary (empty when the conversation has just started):
{summary}

New turns to add to it, oldest first:
{conversation}

Write the updated summary of the whole conversation so far: the current summary plus the new turns.
It replaces the current summary, so it must be self-contained. Keep every name, number, date, amount,
decision and open question. Reply with the summary only."""
"""The default prompt of :func:`prompt_summarizer`; ``{summary}`` and ``{conversation}`` are filled in."""

SHORTEN_TEMPLATE = """\
The summary below is {length} tokens long, but the limit is {limit} tokens. Rewrite it to at most \
{percent}% of its current length. Keep names, numbers, dates, amounts, decisions and open questions; \
drop detail first. Reply with the shortened summary only.

{summary}"""
"""The prompt sent once when a summary exceeds ``max_summary_tokens`` (filled in by rollmem)."""

_FIELDS = ("summary", "conversation")

# The end of a sentence: terminal punctuation (plus closing quotes/brackets) before a space or the
# end of the text, or a line break. A naive rule on purpose: deterministic and language-agnostic.
_SENTENCE_END = re.compile(r"""[.!?\u2026]+["')\]\u201d\u2019]*(?=\s|$)|\n""")
_WORD = re.compile(r"\S+")


# ---------------------------------------------------------------------------------------------
# Bounding a text to a token budget


def _last_fitting(
    bounds: Sequence[int], piece: Callable[[int], str], limit: int, counter: TokenCounter
) -> Optional[str]:
    """The last non-empty ``piece(bound)`` that fits, by binary search (pieces grow along ``bounds``)."""
    best: Optional[str] = None
    low, high = 0, len(bounds)
    while low < high:
        middle = (low + high) // 2
        candidate = piece(bounds[middle])
        if candidate and counter(candidate) <= limit:
            best, low = candidate, middle + 1
        else:
            high = middle
    return best


def _bound(text: str, limit: int, counter: TokenCounter) -> str:
    """``text`` if it fits in ``limit`` tokens, else its longest prefix that fits, cut at a sentence
    boundary, else at a word boundary, else at a character; ``""`` when not even that fits."""
    text = text.strip()
    if counter(text) <= limit:
        return text
    for ends in (
        [match.end() for match in _SENTENCE_END.finditer(text)],
        [match.end() for match in _WORD.finditer(text)],
        range(1, len(text)),
    ):
        piece = _last_fitting(ends, lambda end: text[:end].rstrip(), limit, counter)
        if piece is not None:
            return piece
    return ""


def _newest_suffix(text: str, limit: int, counter: TokenCounter) -> str:
    """The longest tail of ``text`` that fits, starting at a sentence or line start, by binary search;
    when even the last sentence does not fit, that sentence cut to fit by :func:`_bound`."""
    text = text.strip()
    if counter(text) <= limit:
        return text
    starts = [match.end() for match in _SENTENCE_END.finditer(text) if match.end() < len(text)]
    best = _last_fitting(starts[::-1], lambda start: text[start:].strip(), limit, counter)
    if best is not None:
        return best
    return _bound(text[starts[-1] :] if starts else text, limit, counter)


def newest_suffix(text: str, limit: int, token_counter: Optional[TokenCounter] = None) -> str:
    """The longest tail of ``text`` (stripped) within ``limit`` tokens by ``token_counter`` (default
    :func:`rollmem.counters.words`), starting at a sentence or line start; when even the last
    sentence does not fit, that sentence cut to fit (``""`` when nothing does). The rule the
    summarizers use to bound a summary, for code that shortens text the same way (the LlamaIndex
    block's truncation)."""
    v.check_str("text", text)
    v.check_int("limit", limit, 0)
    return _newest_suffix(text, limit, _check_counter(token_counter))


# ---------------------------------------------------------------------------------------------
# Configuration checks shared by the factories


def _check_limit(max_summary_tokens: int) -> int:
    return v.check_positive_int("max_summary_tokens", max_summary_tokens)


def _check_counter(token_counter: Optional[TokenCounter]) -> TokenCounter:
    if token_counter is None:
        return words
    v.check_callable("token_counter", token_counter)
    return token_counter


def _check_callable(name: str, value: object, *, coroutine_hint: Optional[str]) -> None:
    v.check_callable(name, value)
    if coroutine_hint is not None:
        v.check_not_coroutine(name, value, f"use {coroutine_hint}")


def _check_template(template: str) -> str:
    v.check_str("template", template)
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as error:
        raise ValueError(f"template: not a valid str.format string: {error}") from None
    others = sorted({name for name in fields if name not in _FIELDS})
    if others:
        shown = ", ".join("{" + name + "}" for name in others)
        raise ValueError(
            f"template: unknown placeholder(s) {shown}; only {{summary}} and {{conversation}} are "
            "filled in (write a literal brace as {{ or }})"
        )
    for name in _FIELDS:
        if name not in fields:
            raise ValueError(f"template: missing the {{{name}}} placeholder")
    try:
        template.format(summary="", conversation="")
    except (ValueError, TypeError) as error:
        raise ValueError(f"template: cannot be formatted: {error}") from None
    return template


def _render(messages: Sequence[Message]) -> str:
    return "\n".join(str(message) for message in messages)


def _completion(value: object) -> str:
    if v.unawaited(value) or not isinstance(value, str):
        raise TypeError(f"complete() must return str, got {type(value).__name__}")
    return value.strip()


# ---------------------------------------------------------------------------------------------
# prompt_summarizer: one flow (yields each prompt, receives its completion), run by rollmem._flow


@dataclass(frozen=True)
class _Prompting:
    template: str
    limit: Optional[int]
    counter: TokenCounter

    def flow(self, summary: str, messages: Sequence[Message]) -> Generator[str, object, str]:
        """Yields each prompt, receives its completion, returns the new summary."""
        result = _new_summary((yield self.template.format(summary=summary, conversation=_render(messages))))
        if self.limit is None:
            return result
        length = self.counter(result)
        if length <= self.limit:
            return result
        percent = max(1, self.limit * 100 // length)
        shorter = _completion(
            (yield SHORTEN_TEMPLATE.format(length=length, limit=self.limit, percent=percent, summary=result))
        )
        return _bound(shorter or result, self.limit, self.counter)


def _check_room(limit: int, counter: TokenCounter) -> None:
    """Refuse a limit the counter's fixed cost (``overhead``) leaves no room in: every summary
    would come out ``""``, wiping what was there."""
    smallest = counter("a")
    if smallest > limit:
        raise ValueError(
            f"max_summary_tokens: {limit} leaves no room for any text; token_counter counts "
            f"{smallest} tokens for the one-character text 'a' (its per-message overhead?)"
        )


def _prompting(
    template: str, max_summary_tokens: Optional[int], token_counter: Optional[TokenCounter]
) -> _Prompting:
    limit = None if max_summary_tokens is None else _check_limit(max_summary_tokens)
    counter = _check_counter(token_counter)
    if limit is not None:
        _check_room(limit, counter)
    return _Prompting(_check_template(template), limit, counter)


def prompt_summarizer(
    complete: Callable[[str], str],
    *,
    template: str = DEFAULT_TEMPLATE,
    max_summary_tokens: Optional[int] = None,
    token_counter: Optional[TokenCounter] = None,
) -> SummarizeFn:
    """A ``summarize_fn`` that asks ``complete(prompt) -> str`` (your LLM call) for the new summary.

    ``template`` is a ``str.format`` string with exactly the placeholders ``{summary}`` (the existing
    summary, empty on the first fold) and ``{conversation}`` (the folded turns, one ``role: content``
    line each, tool calls included); anything else is a ``ValueError`` here, not at the first fold.

    The completion is stripped; an empty one raises ``ValueError`` and a non-``str`` one ``TypeError``,
    so the memory keeps its state. With ``max_summary_tokens``, the summary is measured with
    ``token_counter`` (default :func:`rollmem.counters.words`); if it is over, ``complete`` is asked once
    to shorten it (:data:`SHORTEN_TEMPLATE`), and if still over, it is cut at the last sentence
    boundary that fits, else the last word boundary, else a character: the result always fits.
    Exceptions raised by ``complete`` propagate.
    """
    _check_callable("complete", complete, coroutine_hint="async_prompt_summarizer")
    prompting = _prompting(template, max_summary_tokens, token_counter)

    def summarize(summary: str, messages: Sequence[Message]) -> str:
        return run(prompting.flow(summary, messages), complete)

    return summarize


def async_prompt_summarizer(
    acomplete: Callable[[str], Awaitable[str]],
    *,
    template: str = DEFAULT_TEMPLATE,
    max_summary_tokens: Optional[int] = None,
    token_counter: Optional[TokenCounter] = None,
) -> AsyncSummarizeFn:
    """The coroutine twin of :func:`prompt_summarizer`, around ``await acomplete(prompt) -> str``.

    Same template rules, checks and bound.
    """
    _check_callable("acomplete", acomplete, coroutine_hint=None)
    prompting = _prompting(template, max_summary_tokens, token_counter)

    async def summarize(summary: str, messages: Sequence[Message]) -> str:
        return await arun(prompting.flow(summary, messages), acomplete)

    return summarize


# ---------------------------------------------------------------------------------------------
# cached_summarizer: a summarization request that shares the conversation's cached prefix

CACHED_INSTRUCTION = """\
Stop the conversation here: the turns above are leaving the context. Write the updated summary of \
the conversation so far: the summary in the system message above, if there is one, plus the turns \
above. It replaces that summary, so it must be self-contained. Keep every name, number, date, \
amount, decision and open question. Reply with the summary only."""
"""The user message :func:`cached_summary_request` puts after the evicted messages."""


def _check_messages(name: str, messages: object) -> list[Message]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise v.type_error(name, "a sequence of Message", messages)
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise v.type_error(f"{name}[{index}]", "Message", message)
    return list(messages)


SummaryAs = Callable[[str, list[Message]], Sequence[Message]]
"""``summary_as(summary, evicted)``: the summary and the evicted messages as your requests render
them, after the system prompt (e.g. :func:`rollmem.integrations.openai_agents.cached_prefix`)."""


def _summary_first(summary: str, evicted: list[Message]) -> list[Message]:
    """The summary as a system message before the evicted messages, as ``get_messages`` renders it."""
    return [Message(SYSTEM, summary), *evicted] if summary else evicted


def cached_summary_request(
    summary: str,
    evicted: Sequence[Message],
    *,
    system: Optional[str] = None,
    instruction: str = CACHED_INSTRUCTION,
    summary_as: Optional[SummaryAs] = None,
) -> list[Message]:
    """The messages of a summarization request that shares the conversation's cached prompt prefix:
    ``Message("system", system)`` when ``system`` is given (your conversation's system prompt),
    ``Message("system", summary)`` when ``summary`` is not empty (where
    :meth:`~rollmem.RollingMemory.get_messages` and the integrations put it), the ``evicted``
    messages as they are, then ``Message("user", instruction)``. An integration that renders the
    summary elsewhere in its requests (a header, the system instruction, the first user turn)
    exports its ``summary_as``: ``summary_as(summary, evicted)`` then replaces the summary
    message and the evicted messages (its result is checked to be a sequence of ``Message``).

    A fold evicts the oldest messages of the buffer, so the request before the fold began with
    exactly these messages: rendered the same way as the conversation's requests (the same adapter,
    the same system prompt), all but the instruction is read from the provider's prompt cache
    (about 0.1x the input price) instead of being billed in full. Builds a list only; rollmem never
    calls a model. Bad arguments raise ``TypeError`` / ``ValueError`` naming them.
    """
    v.check_str("summary", summary)
    messages = _check_messages("evicted", evicted)
    if system is not None:
        v.check_str("system", system, allow_empty=False)
    v.check_str("instruction", instruction, allow_empty=False)
    if summary_as is not None:
        v.check_callable("summary_as", summary_as)
    body = (summary_as or _summary_first)(summary, messages)
    head = [Message(SYSTEM, system)] if system is not None else []
    return [*head, *_check_messages("summary_as(summary, evicted)", body), Message(USER, instruction)]


def _cached_request(
    system: Optional[str], instruction: str, summary_as: Optional[SummaryAs]
) -> Callable[[str, Sequence[Message]], list[Message]]:
    v.check_callable("summary_as", summary_as, optional=True)
    cached_summary_request("", [], system=system, instruction=instruction)  # checks them now

    def build(summary: str, messages: Sequence[Message]) -> list[Message]:
        return cached_summary_request(
            summary, messages, system=system, instruction=instruction, summary_as=summary_as
        )

    return build


def _new_summary(value: object) -> str:
    result = _completion(value)
    if not result:
        raise ValueError("complete() returned an empty summary")
    return result


def cached_summarizer(
    complete: Callable[[list[Message]], str],
    *,
    system: Optional[str] = None,
    instruction: str = CACHED_INSTRUCTION,
    summary_as: Optional[SummaryAs] = None,
) -> SummarizeFn:
    """A ``summarize_fn`` that sends ``complete(messages) -> str`` (your LLM call, rendering the
    messages as it renders the conversation's requests) :func:`cached_summary_request`
    ``(summary, evicted, system=system, instruction=instruction, summary_as=summary_as)``: the
    recommended summarizer with provider prompt caching, as the request shares the cached prefix
    of the conversation's last request (see the Billed cost page of the docs).

    The completion is stripped; an empty one raises ``ValueError`` and a non-``str`` one
    ``TypeError``, so the memory keeps its state. Exceptions raised by ``complete`` propagate. For
    a coroutine function use :func:`async_cached_summarizer`.
    """
    _check_callable("complete", complete, coroutine_hint="async_cached_summarizer")
    build = _cached_request(system, instruction, summary_as)

    def summarize(summary: str, messages: Sequence[Message]) -> str:
        return _new_summary(complete(build(summary, messages)))

    return summarize


def async_cached_summarizer(
    acomplete: Callable[[list[Message]], Awaitable[str]],
    *,
    system: Optional[str] = None,
    instruction: str = CACHED_INSTRUCTION,
    summary_as: Optional[SummaryAs] = None,
) -> AsyncSummarizeFn:
    """The coroutine twin of :func:`cached_summarizer`, around ``await acomplete(messages) -> str``."""
    _check_callable("acomplete", acomplete, coroutine_hint=None)
    build = _cached_request(system, instruction, summary_as)

    async def summarize(summary: str, messages: Sequence[Message]) -> str:
        return _new_summary(await acomplete(build(summary, messages)))

    return summarize


# ---------------------------------------------------------------------------------------------
# extractive_summarizer


def _first_sentence(text: str) -> str:
    text = text.strip()
    match = _SENTENCE_END.search(text)
    if match is not None:
        text = text[: match.end()]
    return " ".join(text.split())


def _extract(message: Message) -> Optional[str]:
    sentence = _first_sentence(message.content)
    if message.tool_calls:
        calls = ", ".join(f"{call.name}({' '.join(call.arguments.split())})" for call in message.tool_calls)
        sentence = f"{sentence} [tool calls: {calls}]" if sentence else f"[tool calls: {calls}]"
    return f"{message.role}: {sentence}" if sentence else None


def extractive_summarizer(
    max_summary_tokens: int = 256, token_counter: Optional[TokenCounter] = None
) -> SummarizeFn:
    """A ``summarize_fn`` that needs no LLM: deterministic, fast, offline.

    Each folded turn adds one line, ``role: first sentence`` (tool calls appended as
    ``[tool calls: name(arguments)]``; turns with nothing to say add nothing), below the existing
    summary. While the result is over ``max_summary_tokens`` (measured with ``token_counter``, default
    :func:`rollmem.counters.words`), the oldest sentences are dropped; if even the newest line does not
    fit alone, it is cut at a word boundary. The result always fits. Meant for demos, tests and as the
    fallback of an LLM summarizer.
    """
    limit = _check_limit(max_summary_tokens)
    counter = _check_counter(token_counter)
    _check_room(limit, counter)

    def summarize(summary: str, messages: Sequence[Message]) -> str:
        lines = [summary.strip()] if summary.strip() else []
        lines.extend(line for line in map(_extract, messages) if line is not None)
        return _newest_suffix("\n".join(lines), limit, counter)

    return summarize


# ---------------------------------------------------------------------------------------------
# with_fallback


def _reporter(on_error: Optional[Callable[[Exception], object]]) -> Callable[[Exception], object]:
    if on_error is None:

        def log(error: Exception) -> None:
            logger.warning("summarizer failed, using the fallback: %r", error)
            logger.debug("the summarizer's error", exc_info=error)

        return log
    v.check_callable("on_error", on_error)
    return on_error


def _summary(value: object) -> str:
    if v.unawaited(value) or not isinstance(value, str):
        raise TypeError(f"the primary summarizer returned {type(value).__name__}, expected str")
    return value


def with_fallback(
    primary: SummarizeFn,
    fallback: SummarizeFn,
    *,
    on_error: Optional[Callable[[Exception], object]] = None,
) -> SummarizeFn:
    """A ``summarize_fn`` that calls ``primary``, and when it raises an ``Exception`` (or returns a
    non-``str``), reports the error to ``on_error(error)`` and returns ``fallback(summary, messages)``.

    ``on_error`` defaults to a one-line warning on the ``"rollmem"`` logger (the traceback goes
    to its debug level). Errors raised by ``fallback`` or
    ``on_error`` propagate (the memory then keeps its state). For coroutine functions use
    :func:`async_with_fallback`.
    """
    _check_callable("primary", primary, coroutine_hint="async_with_fallback")
    _check_callable("fallback", fallback, coroutine_hint="async_with_fallback")
    report = _reporter(on_error)

    def summarize(summary: str, messages: Sequence[Message]) -> str:
        try:
            return _summary(primary(summary, messages))
        except Exception as error:
            report(error)
        return fallback(summary, messages)

    return summarize


def async_with_fallback(
    primary: Union[SummarizeFn, AsyncSummarizeFn],
    fallback: Union[SummarizeFn, AsyncSummarizeFn],
    *,
    on_error: Optional[Callable[[Exception], object]] = None,
) -> AsyncSummarizeFn:
    """The coroutine twin of :func:`with_fallback`; ``primary`` and ``fallback`` may each be sync or
    async (e.g. an async LLM summarizer with :func:`extractive_summarizer` as the fallback).

    ``on_error`` is called synchronously.
    """
    _check_callable("primary", primary, coroutine_hint=None)
    _check_callable("fallback", fallback, coroutine_hint=None)
    report = _reporter(on_error)

    async def summarize(summary: str, messages: Sequence[Message]) -> str:
        try:
            return _summary(await resolved(primary(summary, messages)))
        except Exception as error:
            report(error)
        result: str = await resolved(fallback(summary, messages))
        return result

    return summarize

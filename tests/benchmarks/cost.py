"""What each memory costs to run: billed input tokens under provider prompt caching (issues 18, 27).

Run ``python tests/benchmarks/cost.py [--quick] [--jobs 2] [--profiles ...] [--clocks ...]`` from a
clone with ``pip install -e ".[bench]"``. Deterministic: no timing, the same numbers on every
machine (``--quick`` runs shorter conversations, one budget and a few profiles, for CI).

**What is replayed.** The workload (:mod:`cost_workload`) is a long tool-calling support
conversation with a 1,186-token system prompt, timed by one of three clocks (the user's think
time: ``current``, or exponential with a mean of 2 or 10 minutes). Each model call (one before
every assistant message) sends the system prompt, then what the memory gives the model. Every
memory gets the same token counter (BPE, ``cl100k_base``), the same budget and the same fake
summarizer (a canned ~120-token summary numbered by call, so two summaries never share a cache
entry); each library sends it its own summarization prompt. A run records what a memory sends
(its *trace*: every model call and summarizer request with its second), once per memory, budget
and clock; rollmem's recommended configuration is run once per billing profile too, since it is
told the provider. Each trace is then billed under every profile.

**How it is billed** (:mod:`pricing`): named profiles (Anthropic Sonnet with 5-minute and 1-hour
caches, Opus/Haiku with the 4,096-token minimum, OpenAI GPT-5/GPT-4.1/GPT-4o, Gemini 2.5 Flash and
Pro, no caching), each with its minimum cacheable length, cache steps, lifetime (refreshed on use)
and, for Anthropic, the ``cache_control`` breakpoints ``rollmem.adapters.to_anthropic(...,
cache=True)`` places, read back with the 20-block lookback. ``cached_summarizer``'s request is a
request like any other (the same adapter, the same breakpoints); a text summarization prompt is
plain input; summaries are billed at the output price. Totals are input-token equivalents (tokens
at the base input price), without and with the main model's output (every assistant message).

**The peers**, driven for real: LangChain v1 ``SummarizationMiddleware`` at its documented
settings (keep the last 20 messages) and tuned to the recommended configuration's fold depth
(``keep=("tokens", target_tokens)``), both ``trigger=("tokens", budget)``, through ``before_model``
with LangGraph's ``add_messages``; LlamaIndex ``ChatSummaryMemoryBuffer``; langchain-classic
``ConversationSummaryBufferMemory``; keep-last-N (``trim_messages``) on every call, and with
hysteresis (trim to the same depth when over the budget: the lossy reference); no memory.
rollmem's integrations are driven through their own hooks at their defaults (see the docs page).

**Columns**: billed (input + summarizer), its ratio to the cheapest summarizing peer at the docs'
settings, the same with the main model's output, cache hits, summarizer calls, mean context
(conversation tokens per request, summary included), the smallest context after the first fold,
and the verbatim tokens of the first request after each fold (mean, 10th percentile, minimum).

**Goal** (issue 27), at 500 and 2,000 turns, every budget, profile and clock: the recommended
configuration, and every integration at its defaults, bills at most 0.9x the cheapest summarizing
peer at the docs' settings and at most 1.0x ``SummarizationMiddleware`` tuned to its depth, with at
least 0.9x that peer's mean context, at least half its mean verbatim tokens after a fold (never
without the last user turn), and at least half its smallest context after the first fold; where the
provider cannot cache the requests (no caching, or the whole request under its minimum), at most
1.0x at 0.9x the context.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Optional

import counters
from cost_workload import CLOCKS, SYSTEM_PROMPT, timed_turns
from frameworks import unused_strands_model
from peers import CANNED_SUMMARY, FakeSummarizer, LangChainPeer, _langchain_llm, _llama_llm
from pricing import DEFAULT_PROFILE, PROFILES, Block, Cache, Profile

from rollmem import ASSISTANT, SYSTEM, TOOL, USER, RollingMemory, cached_target
from rollmem.message import Message
from rollmem.policies import CacheProfile
from rollmem.summarizers import cached_summarizer, prompt_summarizer

FULL_HORIZONS = (500, 2000)
FULL_BUDGETS = (1000, 2000, 4000, 8000)
FULL_CLOCKS = tuple(CLOCKS)
QUICK_HORIZONS = (100, 300)
QUICK_BUDGETS = (2000,)
QUICK_CLOCKS = ("current", "exp10")
QUICK_PROFILES = ("anthropic-5m", "gpt-5", "none")
GOAL_HORIZONS = (500, 2000)
GOAL_COST = 0.9  # x the cheapest summarizing peer at the docs' settings
GOAL_TUNED = 1.0  # x SummarizationMiddleware tuned to the same depth
GOAL_CONTEXT = 0.9  # x that peer's mean context
GOAL_VERBATIM = 0.5  # x that peer's mean verbatim tokens after a fold, and its smallest context
SUMMARY_TEXT = " ".join([CANNED_SUMMARY] * 3)  # ~120 tokens, a realistic running summary

Counter = Callable[[str], int]
Event = tuple[Any, ...]


# -- what a memory sends: its trace ---------------------------------------------------------------


def _block(message: Message) -> Block:
    """A message as the unit of prefix matching, with its Anthropic content blocks (text, one
    per tool call)."""
    calls = len(message.tool_calls)
    return (message.role, message.token_text(), max(1, calls + (1 if message.content or not calls else 0)))


class Summarizer(FakeSummarizer):
    """The fake summarizer: records each summarization into ``events`` and returns the canned
    summary, numbered by call. ``record(prompt)``: a text prompt (``("text", tokens)``);
    ``record_request(now, messages)``: a request of messages (``cached_summarizer``'s,
    ``("summ", second, blocks)``), billed through the cache like a model call. Each summary adds
    ``("out", tokens)``."""

    def __init__(self, measure: Counter, events: list[Event]) -> None:
        super().__init__(measure)
        self.events = events
        self.last = ""

    def _summary(self) -> str:
        assert self.measure is not None
        self.last = f"{SUMMARY_TEXT} (summary {self.calls})"
        self.events.append(("out", self.measure(self.last)))
        return self.last

    def record(self, prompt: str) -> str:
        assert self.measure is not None
        self.calls += 1
        self.events.append(("text", self.measure(prompt)))
        return self._summary()

    def record_request(self, now: float, messages: Sequence[Message]) -> str:
        self.calls += 1
        blocks = tuple(_block(m) for m in messages)
        assert blocks[0][:2] == ("system", SYSTEM_PROMPT), "the request must open with the system prompt"
        self.events.append(("summ", now, blocks))
        return self._summary()


class Driver:
    """One memory: ``add`` each message as it happens, ``request`` before each model call."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer) -> None:
        self.budget = budget
        self.count = count
        self.summarizer = summarizer
        self.now = 0.0  # the clock of the call being driven (a summarizer request is sent then)

    def add(self, message: Message, now: float) -> None:
        raise NotImplementedError

    def request(self, now: float) -> list[Block]:
        """The messages the model gets after the system prompt (the summary first, if any)."""
        raise NotImplementedError

    def folds(self) -> int:
        """How many times the context was cut so far (summarizer calls, or trims)."""
        return self.summarizer.calls

    summary_as: Any = None
    """``cached_summarizer``'s ``summary_as`` for this memory: ``None`` where the requests carry
    the summary as a system message (``get_messages`` and most integrations), else a method
    calling the integration's public ``cached_prefix`` (its requests put the summary elsewhere)."""


def _summarize_fn(driver: Driver, shared: bool) -> Any:
    """rollmem's summarizer: ``cached_summarizer`` (its request shares the conversation's cached
    prefix, sent at the driver's clock) or the text ``prompt_summarizer``."""
    if not shared:
        return prompt_summarizer(driver.summarizer.record)
    summary_as = None if driver.summary_as is None else (lambda s, e: driver.summary_as(s, e))
    return cached_summarizer(
        lambda messages: driver.summarizer.record_request(driver.now, messages),
        system=SYSTEM_PROMPT,
        summary_as=summary_as,
    )


class Rollmem(Driver):
    """``RollingMemory`` (``shared``: with ``cached_summarizer``, else ``prompt_summarizer``);
    ``target`` picks the configuration."""

    def __init__(
        self, budget: int, count: Counter, summarizer: Summarizer, target: Optional[int], shared: bool = False
    ) -> None:
        super().__init__(budget, count, summarizer)
        self.memory = RollingMemory(budget, _summarize_fn(self, shared), count, target_tokens=target)

    def add(self, message: Message, now: float) -> None:
        self.now = now
        self.memory.extend([message])

    def request(self, now: float) -> list[Block]:
        return [_block(m) for m in self.memory.get_messages()]


class Recommended(Rollmem):
    """The recommended configuration: ``RollingMemory.cached(budget, cached_summarizer(...),
    provider=..., clock=..., prefix_tokens=...)``, told the billing profile's cache rules, the
    conversation's clock (the second each message is added) and the system prompt's size."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer, profile: Profile) -> None:
        Driver.__init__(self, budget, count, summarizer)
        self.memory = RollingMemory.cached(
            budget, _summarize_fn(self, True), count, **told_cache(self, profile)
        )


class Batched(Recommended):
    """The recommended configuration fed as the integrations that hook the model call are fed: the
    messages since the last call in one ``extend`` before it (at most one fold per call, the whole
    batch in view), instead of each message as it happens."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer, profile: Profile) -> None:
        super().__init__(budget, count, summarizer, profile)
        self.pending: list[Message] = []

    def add(self, message: Message, now: float) -> None:
        self.now = now
        self.pending.append(message)

    def request(self, now: float) -> list[Block]:
        self.now = now
        batch, self.pending = self.pending, []
        self.memory.extend(batch)
        return super().request(now)


def told_cache(driver: Driver, profile: Profile, prefix: bool = True) -> dict[str, Any]:
    """What a row at the recommended settings is told: the profile's cache rules, the
    conversation's clock (the second of the call being driven) and the system prompt's size
    (``prefix``; not where the prompt is in the conversation the memory counts)."""
    return {
        "provider": core_profile(profile),
        "clock": lambda: driver.now,
        "prefix_tokens": driver.count(SYSTEM_PROMPT) if prefix else 0,
    }


def core_profile(profile: Profile) -> CacheProfile:
    """What ``rollmem.policies.CacheAwareBudget`` is told of a billing profile."""
    if not profile.caches:
        return CacheProfile(0, 0.0, 1.0, 1.0)
    return CacheProfile(profile.min_tokens, profile.ttl_s, profile.read, profile.write)


@functools.cache
def recommended_target(budget: int, profile: Profile) -> int:
    """The recommended configuration's warm fold depth (``target_tokens``) at ``budget``."""
    prefix = _counter("bpe")(SYSTEM_PROMPT)
    return int(
        RollingMemory.cached(budget, provider=core_profile(profile), prefix_tokens=prefix).target_tokens
    )


def _lc_convert(messages: Sequence[Message]) -> list[Any]:
    return LangChainPeer.convert(None, messages)  # type: ignore[arg-type]


def _lc_counter(count: Counter) -> Callable[[Sequence[Any]], int]:
    """A LangChain ``token_counter``: the shared counter on each message's rollmem token text."""
    from rollmem.adapters.langchain import from_langchain

    seen: dict[int, tuple[Any, int]] = {}  # id -> (message kept alive, tokens)

    def tokens(message: Any) -> int:
        hit = seen.get(id(message))
        if hit is None or hit[0] is not message:
            hit = seen[id(message)] = (message, count(from_langchain([message])[0].token_text()))
        return hit[1]

    def count_messages(messages: Sequence[Any]) -> int:
        return sum(tokens(m) for m in messages)

    return count_messages


def _lc_blocks(messages: Sequence[Any]) -> list[Block]:
    from rollmem.adapters.langchain import from_langchain

    return [_block(m) for m in from_langchain(messages)]


class _LangGraphState(Driver):
    """A driver holding LangGraph-style agent state (``state["messages"]`` and middleware keys)."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer) -> None:
        super().__init__(budget, count, summarizer)
        self.state: dict[str, Any] = {"messages": []}
        self.added = 0

    def add(self, message: Message, now: float) -> None:
        (native,) = _lc_convert([message])
        self.added += 1
        native.id = f"m{self.added}"  # unique: add_messages replaces a message with the same id
        self.state["messages"] = [*self.state["messages"], native]

    def _apply(self, update: Optional[dict[str, Any]]) -> None:
        from langgraph.graph.message import add_messages

        for key, value in (update or {}).items():
            if key == "messages":
                self.state["messages"] = add_messages(self.state["messages"], value)
            else:
                self.state[key] = value


def _summary_chat_model(summarizer: Summarizer) -> Any:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, get_buffer_string
    from langchain_core.outputs import ChatGeneration, ChatResult

    class FakeSummaryChatModel(BaseChatModel):
        """Offline chat model: the prompt goes to the fake summarizer, its summary comes back."""

        summarizer: Any

        @property
        def _llm_type(self) -> str:
            return "rollmem-bench-fake-chat"

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
            text = self.summarizer.record(get_buffer_string(messages))
            return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])

    return FakeSummaryChatModel(summarizer=summarizer)


class LangChainSummarization(_LangGraphState):
    """LangChain v1 ``SummarizationMiddleware``, ``trigger`` at the budget: its documented
    settings (keep the last 20 messages), or with ``keep`` tokens (``keep=("tokens", keep)``)."""

    def __init__(
        self, budget: int, count: Counter, summarizer: Summarizer, keep: Optional[int] = None
    ) -> None:
        from langchain.agents.middleware import SummarizationMiddleware

        super().__init__(budget, count, summarizer)
        extra: dict[str, Any] = {} if keep is None else {"keep": ("tokens", keep)}
        self.middleware = SummarizationMiddleware(
            _summary_chat_model(summarizer),
            trigger=("tokens", budget),
            token_counter=_lc_counter(count),
            **extra,
        )

    def request(self, now: float) -> list[Block]:
        self._apply(self.middleware.before_model(self.state, None))  # type: ignore[arg-type]
        return _lc_blocks(self.state["messages"])


class RollmemMiddleware(_LangGraphState):
    """rollmem's ``RollingMemoryMiddleware`` at its defaults (the budget, summarizer, counter, and
    the cache settings the recommended configuration is told)."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer, profile: Profile) -> None:
        from rollmem.integrations.langchain import RollingMemoryMiddleware

        super().__init__(budget, count, summarizer)
        cache = told_cache(self, profile)
        self.middleware = RollingMemoryMiddleware(budget, _summarize_fn(self, True), count, **cache)
        self.model = _summary_chat_model(summarizer)

    def request(self, now: float) -> list[Block]:
        from langchain.agents.middleware import ModelRequest

        self.now = now
        self._apply(self.middleware.before_model(self.state, None))  # type: ignore[arg-type]
        request = ModelRequest(model=self.model, messages=list(self.state["messages"]), state=self.state)
        seen: list[Any] = []
        self.middleware.wrap_model_call(request, lambda r: seen.append(r.messages))  # type: ignore[arg-type,func-returns-value]
        return _lc_blocks(seen[0])


class ClassicSummaryBuffer(Driver):
    """langchain-classic ``ConversationSummaryBufferMemory`` (``max_token_limit`` = the budget)."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer) -> None:
        super().__init__(budget, count, summarizer)
        self.peer = LangChainPeer(budget, count, summarizer)
        self.peer.memory.llm = _langchain_llm(count, summarizer)

    def add(self, message: Message, now: float) -> None:
        self.peer.add(_lc_convert([message])[0])

    def request(self, now: float) -> list[Block]:
        return _lc_blocks(self.peer.memory.load_memory_variables({})["history"])


class LlamaIndexSummaryBuffer(Driver):
    """LlamaIndex ``ChatSummaryMemoryBuffer`` (``token_limit`` = the budget), ``get()`` per call."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer) -> None:
        from llama_index.core.memory import ChatSummaryMemoryBuffer

        super().__init__(budget, count, summarizer)
        self.originals: dict[str, Message] = {}

        def tokenize(text: str) -> range:  # only len() of the result is used
            return range(count(text))

        self.memory = ChatSummaryMemoryBuffer.from_defaults(
            llm=_llama_llm(summarizer), token_limit=budget, tokenizer_fn=tokenize
        )

    def add(self, message: Message, now: float) -> None:
        from peers import LlamaIndexPeer

        (native,) = LlamaIndexPeer.convert(None, [message])  # type: ignore[arg-type]
        self.originals[native.content] = message
        self.memory.put(native)

    def request(self, now: float) -> list[Block]:
        out: list[Block] = []
        for native in self.memory.get():
            original = self.originals.get(native.content)
            out.append(_block(original) if original is not None else ("system", str(native.content), 1))
        return out


class KeepLast(Driver):
    """Keep-last-N: langchain-core ``trim_messages``, the newest messages within the budget on
    every call; with ``target``, hysteresis (the lossy reference): over the budget, trim to
    ``target`` tokens, then send everything since until the budget is exceeded again."""

    def __init__(
        self, budget: int, count: Counter, summarizer: Summarizer, target: Optional[int] = None
    ) -> None:
        super().__init__(budget, count, summarizer)
        self.messages: list[Any] = []
        self.counter = _lc_counter(count)
        self.target = target
        self.trims = 0

    def add(self, message: Message, now: float) -> None:
        self.messages.extend(_lc_convert([message]))

    def folds(self) -> int:
        return self.trims

    def _trim(self, limit: int) -> list[Any]:
        from langchain_core.messages import trim_messages

        tail, total = len(self.messages), 0  # trim only a tail holding more than the limit
        while tail > 0 and total <= limit:
            tail -= 1
            total += self.counter(self.messages[tail : tail + 1])
        return list(
            trim_messages(
                self.messages[max(0, tail - 1) :],
                max_tokens=limit,
                token_counter=self.counter,
                strategy="last",
                start_on="human",
            )
        )

    def request(self, now: float) -> list[Block]:
        if self.target is None:
            return _lc_blocks(self._trim(self.budget))
        if self.counter(self.messages) > self.budget:
            self.messages = self._trim(self.target)
            self.trims += 1
        return _lc_blocks(self.messages)


class NoMemory(Driver):
    """The whole history, every time."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer) -> None:
        super().__init__(budget, count, summarizer)
        self.blocks: list[Block] = []

    def add(self, message: Message, now: float) -> None:
        self.blocks.append(_block(message))

    def request(self, now: float) -> list[Block]:
        return list(self.blocks)


# -- rollmem's other integrations, each at its defaults, driven through its own hook ----------------


class _Integration(Driver):
    """An integration driven with its framework's own message objects: ``push`` adds one message
    (tool results that follow one another arrive as one batch, as the frameworks group parallel
    results), ``render`` runs the integration's hook before a model call and returns the request
    as rollmem messages (converted the way the integration converts them), system prompt excluded.
    Each block is ``(role, token_text)``, so requests are billed and sized as the other rows'."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer, profile: Profile) -> None:
        super().__init__(budget, count, summarizer)
        self.summarize = _summarize_fn(self, True)
        self.cache = told_cache(self, profile)  # as the recommended configuration is told
        self.names: dict[str, str] = {}  # tool call id -> tool name (results need it)
        self.tools: list[Message] = []  # tool results not pushed yet
        self.loop = asyncio.new_event_loop()

    def run(self, awaitable: Any) -> Any:
        return self.loop.run_until_complete(awaitable)

    def add(self, message: Message, now: float) -> None:
        self.now = now
        if message.role == TOOL:
            self.tools.append(message)
            return
        self._flush()
        for call in message.tool_calls:
            self.names[call.id] = call.name
        self.push([message])

    def _flush(self) -> None:
        if self.tools:
            tools, self.tools = self.tools, []
            self.push(tools)

    def request(self, now: float) -> list[Block]:
        self.now = now
        self._flush()
        return [_block(m) for m in self.render()]

    def push(self, messages: list[Message]) -> None:
        raise NotImplementedError

    def render(self) -> list[Message]:
        raise NotImplementedError


def _without_system_prompt(messages: list[Message]) -> list[Message]:
    assert messages, "the request must open with the system prompt"
    assert messages[0].content == SYSTEM_PROMPT, "the request must open with the system prompt"
    return messages[1:]


class AgentsSession(_Integration):
    """The Agents SDK ``RollingSession`` at its defaults: each item is added as the SDK saves it
    (``add_items`` after each step), and a model call sends ``get_items()`` (Responses items)."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer, profile: Profile) -> None:
        from rollmem.integrations.openai_agents import RollingSession

        super().__init__(budget, count, summarizer, profile)
        self.session = RollingSession(
            "bench", max_tokens=budget, summarize_fn=self.summarize, token_counter=count, **self.cache
        )

    def push(self, messages: list[Message]) -> None:
        first = messages[0]
        items: list[dict[str, Any]] = []
        if first.role == TOOL:  # the items the SDK saves, as a model run produces them
            items = [
                {"type": "function_call_output", "call_id": m.tool_call_id, "output": m.content}
                for m in messages
            ]
        elif first.role == ASSISTANT:
            if first.content:
                text = {"type": "output_text", "text": first.content, "annotations": []}
                items.append(
                    {"type": "message", "role": "assistant", "content": [text], "status": "completed"}
                )
            items += [
                {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
                for c in first.tool_calls
            ]
        else:
            items.append({"role": "user", "content": first.content})
        self.run(self.session.add_items(items))

    def summary_as(self, summary: str, evicted: list[Message]) -> list[Message]:
        from rollmem.integrations.openai_agents import cached_prefix

        return cached_prefix(summary, evicted)

    def render(self) -> list[Message]:
        from rollmem.adapters import from_openai_responses

        return from_openai_responses(self.run(self.session.get_items()))


class PydanticAIHistory(_Integration):
    """The pydantic-ai processor ``rolling_history`` at its defaults, handed the whole history an
    app keeps (``result.all_messages()``) before each model call; the request is the processed
    list. The system prompt is the agent's ``instructions`` (sent apart from the history), or with
    ``in_history`` its ``system_prompt``: a ``SystemPromptPart`` opening the first request, which
    the processor pins and counts against ``max_tokens``."""

    def __init__(
        self, budget: int, count: Counter, summarizer: Summarizer, profile: Profile, in_history: bool = False
    ) -> None:
        import pydantic_ai.messages as pai

        from rollmem.integrations.pydantic_ai import rolling_history

        super().__init__(budget, count, summarizer, profile)
        self.pai = pai
        self.in_history = in_history
        if in_history:  # the system prompt is in the history the processor counts, not before it
            self.cache["prefix_tokens"] = 0
        self.processor = rolling_history(budget, self.summarize, count, **self.cache)
        self.history: list[Any] = []

    def push(self, messages: list[Message]) -> None:
        pai = self.pai
        first = messages[0]
        if first.role == ASSISTANT:
            parts: list[Any] = [pai.TextPart(first.content)] if first.content else []
            parts += [pai.ToolCallPart(c.name, c.arguments, c.id) for c in first.tool_calls]
            self.history.append(pai.ModelResponse(parts=parts))
        elif first.role == TOOL:
            parts = [
                pai.ToolReturnPart(self.names[m.tool_call_id or ""], m.content, m.tool_call_id)
                for m in messages
            ]
            self.history.append(pai.ModelRequest(parts=parts))
        else:
            opening = [] if self.history or not self.in_history else [pai.SystemPromptPart(SYSTEM_PROMPT)]
            self.history.append(pai.ModelRequest(parts=[*opening, pai.UserPromptPart(first.content)]))

    def render(self) -> list[Message]:
        from rollmem.integrations import pydantic_ai as integration

        out: list[Message] = []
        for n, message in enumerate(self.run(self.processor(None, list(self.history)))):
            if message.kind == "response":
                out.append(integration._response_message(self.pai, message))
                continue
            for k, part in enumerate(message.parts):
                converted = integration._request_message(self.pai, part, n == 0 and k == 0)
                if converted is not None:
                    out.append(converted)
        return _without_system_prompt(out) if self.in_history else out


class AdkPlugin(_Integration):
    """Google ADK ``RollingMemoryPlugin`` at its defaults: ``before_model_callback`` with ADK's
    ``CallbackContext`` on an in-memory session and an ``LlmRequest`` of copies of every content
    (the system prompt as the agent's instruction); the request is the rewritten contents after
    the system instruction (the summary it appends is a block of its own after the prompt)."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer, profile: Profile) -> None:
        from google.adk.agents import LlmAgent
        from google.adk.agents.invocation_context import InvocationContext
        from google.adk.sessions import InMemorySessionService, Session
        from google.genai import types

        from rollmem.integrations.google_adk import RollingMemoryPlugin

        super().__init__(budget, count, summarizer, profile)
        self.types = types
        self.plugin = RollingMemoryPlugin(budget, self.summarize, count, **self.cache)
        agent = LlmAgent(name="bench", model="gemini-2.5-flash")  # never called
        session = Session(id="bench", app_name="bench", user_id="bench")
        self.context = InvocationContext(
            session_service=InMemorySessionService(), invocation_id="bench", agent=agent, session=session
        )
        self.history: list[Any] = []

    def push(self, messages: list[Message]) -> None:
        types = self.types
        first = messages[0]
        if first.role == ASSISTANT:
            parts = [types.Part(text=first.content)] if first.content else []
            parts += [
                types.Part(
                    function_call=types.FunctionCall(id=c.id, name=c.name, args=json.loads(c.arguments))
                )
                for c in first.tool_calls
            ]
            self.history.append(types.Content(role="model", parts=parts))
        elif first.role == TOOL:
            parts = [
                types.Part(
                    function_response=types.FunctionResponse(
                        id=m.tool_call_id,
                        name=self.names[m.tool_call_id or ""],
                        response={"result": m.content},
                    )
                )
                for m in messages
            ]
            self.history.append(types.Content(role="user", parts=parts))
        else:
            self.history.append(types.Content(role="user", parts=[types.Part(text=first.content)]))

    def summary_as(self, summary: str, evicted: list[Message]) -> list[Message]:
        return self.plugin.cached_prefix(summary, evicted)

    def render(self) -> list[Message]:
        from google.adk.agents.callback_context import CallbackContext
        from google.adk.models.llm_request import LlmRequest

        from rollmem.integrations.google_adk import _Converter

        config = self.types.GenerateContentConfig(system_instruction=SYSTEM_PROMPT)
        request = LlmRequest(contents=[c.model_copy() for c in self.history], config=config)
        self.run(
            self.plugin.before_model_callback(
                callback_context=CallbackContext(self.context), llm_request=request
            )
        )
        instruction = str(request.config.system_instruction)
        assert instruction.startswith(SYSTEM_PROMPT), "the instruction must open with the system prompt"
        rest = instruction[len(SYSTEM_PROMPT) :].strip("\n")
        out = [Message(SYSTEM, rest)] if rest else []
        converter = _Converter()
        for n, content in enumerate(request.contents):
            out.extend(converter.convert(content, f"c{n}"))
        return out


class MafCompaction(_Integration):
    """Agent Framework ``RollingCompaction`` at its defaults, called as the compaction strategy on
    a fresh list of the whole history's ``Message`` objects (what a history provider loading
    everything hands over); the request is the messages not marked excluded."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer, profile: Profile) -> None:
        import agent_framework as af

        from rollmem.integrations.agent_framework import RollingCompaction

        super().__init__(budget, count, summarizer, profile)
        self.af = af
        self.strategy = RollingCompaction(budget, self.summarize, count, **self.cache)
        self.history: list[Any] = []

    def push(self, messages: list[Message]) -> None:
        af = self.af
        first = messages[0]
        if first.role == ASSISTANT:
            contents: list[Any] = [af.Content.from_text(first.content)] if first.content else []
            contents += [
                af.Content.from_function_call(call_id=c.id, name=c.name, arguments=json.loads(c.arguments))
                for c in first.tool_calls
            ]
            self.history.append(af.Message("assistant", contents))
        elif first.role == TOOL:
            results = [
                af.Content.from_function_result(call_id=m.tool_call_id, result=m.content) for m in messages
            ]
            self.history.append(af.Message("tool", results))
        else:
            self.history.append(af.Message("user", [first.content]))

    def render(self) -> list[Message]:
        from rollmem.integrations.agent_framework import _convert

        messages = list(self.history)
        self.run(self.strategy(messages))
        excluded = self.af.EXCLUDED_KEY
        return [
            m
            for native in messages
            if not native.additional_properties.get(excluded)
            for m in _convert(native)
        ]


class StrandsManager(_Integration):
    """Strands ``RollingConversationManager`` at its defaults on a real ``Agent`` (its model is
    never called): ``apply_management(agent)`` before each model call (what its
    ``BeforeModelCallEvent`` hook does); the request is ``agent.messages`` after it."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer, profile: Profile) -> None:
        from strands import Agent

        from rollmem.integrations.strands import RollingConversationManager

        super().__init__(budget, count, summarizer, profile)
        self.manager = RollingConversationManager(budget, self.summarize, count, **self.cache)
        self.agent = Agent(
            model=unused_strands_model(),
            system_prompt=SYSTEM_PROMPT,
            callback_handler=None,
            conversation_manager=self.manager,
        )

    def push(self, messages: list[Message]) -> None:
        first = messages[0]
        if first.role == ASSISTANT:
            content: list[Any] = [{"text": first.content}] if first.content else []
            content += [
                {"toolUse": {"toolUseId": c.id, "name": c.name, "input": json.loads(c.arguments)}}
                for c in first.tool_calls
            ]
            self.agent.messages.append({"role": "assistant", "content": content})
        elif first.role == TOOL:
            results = [
                {
                    "toolResult": {
                        "toolUseId": m.tool_call_id,
                        "status": "success",
                        "content": [{"text": m.content}],
                    }
                }
                for m in messages
            ]
            self.agent.messages.append({"role": "user", "content": results})
        else:
            self.agent.messages.append({"role": "user", "content": [{"text": first.content}]})

    def summary_as(self, summary: str, evicted: list[Message]) -> list[Message]:
        from rollmem.integrations.strands import cached_prefix

        return cached_prefix(summary, evicted)

    def render(self) -> list[Message]:
        from rollmem.integrations.strands import to_rollmem

        self.manager.apply_management(self.agent)
        return to_rollmem(self.agent.messages)


# -- the rows --------------------------------------------------------------------------------------

Factory = Callable[[int, Counter, Summarizer, Profile], Driver]


def _target(percent: int, shared: bool = False) -> Factory:
    return lambda b, c, s, p: Rollmem(b, c, s, max(1, b * percent // 100), shared)


MEMORIES: dict[str, tuple[str, Factory]] = {
    "recommended": (
        "rollmem RollingMemory.cached(provider, clock) + cached_summarizer (recommended)",
        lambda b, c, s, p: Recommended(b, c, s, p),
    ),
    "recommended_batched": (
        "the recommended configuration, fed each call's new messages at once (as hooks are)",
        lambda b, c, s, p: Batched(b, c, s, p),
    ),
    "cached_target": (
        "rollmem target_tokens=cached_target (0.7.0-dev) + cached_summarizer",
        lambda b, c, s, p: Rollmem(b, c, s, cached_target(b), True),
    ),
    "middleware": (
        "rollmem RollingMemoryMiddleware, defaults + cached_summarizer",
        lambda b, c, s, p: RollmemMiddleware(b, c, s, p),
    ),
    "agents_session": (
        "rollmem RollingSession (Agents SDK), defaults + cached_summarizer",
        lambda b, c, s, p: AgentsSession(b, c, s, p),
    ),
    "pydantic_ai": (
        "rollmem rolling_history (pydantic-ai), defaults + cached_summarizer",
        lambda b, c, s, p: PydanticAIHistory(b, c, s, p),
    ),
    "pydantic_ai_system": (
        "rollmem rolling_history (pydantic-ai, system_prompt in the history), defaults + cached_summarizer",
        lambda b, c, s, p: PydanticAIHistory(b, c, s, p, in_history=True),
    ),
    "google_adk": (
        "rollmem RollingMemoryPlugin (Google ADK), defaults + cached_summarizer",
        lambda b, c, s, p: AdkPlugin(b, c, s, p),
    ),
    "agent_framework": (
        "rollmem RollingCompaction (Agent Framework), defaults + cached_summarizer",
        lambda b, c, s, p: MafCompaction(b, c, s, p),
    ),
    "strands": (
        "rollmem RollingConversationManager (Strands), defaults + cached_summarizer",
        lambda b, c, s, p: StrandsManager(b, c, s, p),
    ),
    "defaults": ("rollmem RollingMemory() defaults", lambda b, c, s, p: Rollmem(b, c, s, None)),
    **{
        f"target{pct}": (f"rollmem target_tokens {pct}% + cached_summarizer", _target(pct, True))
        for pct in (10, 25, 50, 75)
    },
    "lc_summarization": (
        "LangChain v1 SummarizationMiddleware (docs' settings)",
        lambda b, c, s, p: LangChainSummarization(b, c, s),
    ),
    "lc_tuned": (
        "LangChain v1 SummarizationMiddleware, keep=('tokens', same depth)",
        lambda b, c, s, p: LangChainSummarization(b, c, s, keep=recommended_target(b, p)),
    ),
    "llamaindex": ("LlamaIndex ChatSummaryMemoryBuffer", lambda b, c, s, p: LlamaIndexSummaryBuffer(b, c, s)),
    "lc_classic": (
        "langchain-classic ConversationSummaryBufferMemory",
        lambda b, c, s, p: ClassicSummaryBuffer(b, c, s),
    ),
    "keep_last": ("keep-last-N (trim_messages), lossy", lambda b, c, s, p: KeepLast(b, c, s)),
    "keep_last_hyst": (
        "keep-last-N with hysteresis to the same depth, lossy",
        lambda b, c, s, p: KeepLast(b, c, s, recommended_target(b, p)),
    ),
    "none": ("no memory (full history)", lambda b, c, s, p: NoMemory(b, c, s)),
}
DOCS_PEERS = ("lc_summarization", "llamaindex", "lc_classic")  # summarizing peers at the docs' settings
PEERS = (*DOCS_PEERS, "lc_tuned", "keep_last", "keep_last_hyst", "none")
INTEGRATIONS = ("middleware", "agents_session", "pydantic_ai", "google_adk", "agent_framework", "strands")
# told the profile as the recommended row
TOLD = ("recommended", "recommended_batched", *INTEGRATIONS, "pydantic_ai_system")
PER_PROFILE = (*TOLD, "lc_tuned", "keep_last_hyst")  # their requests depend on the profile
GOAL_ROWS = ("recommended", *INTEGRATIONS)
"""The rows held to the goal: the recommended configuration and every integration at its defaults
(told the profile, the clock and the system prompt's size as the recommended row is; phase 2 of
issue 27)."""
FULL_MEMORIES = ("recommended", "cached_target", *INTEGRATIONS, "defaults", *PEERS)
QUICK_MEMORIES = ("recommended", "cached_target", "middleware", *DOCS_PEERS, "lc_tuned", "keep_last_hyst")
FRAMEWORKS = {  # integration row -> (module it needs, rollmem extra)
    "agents_session": ("agents", "openai-agents"),
    "pydantic_ai": ("pydantic_ai", "pydantic-ai"),
    "pydantic_ai_system": ("pydantic_ai", "pydantic-ai"),
    "google_adk": ("google.adk", "google-adk"),
    "agent_framework": ("agent_framework", "agent-framework"),
    "strands": ("strands", "strands"),
}


# -- a run: the trace, and what does not depend on prices -------------------------------------------


class Stats:
    """The profile-independent figures of one trace, snapshotted at each horizon."""

    def __init__(self, count: Counter) -> None:
        self.count = count
        self.requests = 0
        self.context_sum = 0
        self.largest = 0
        self.after_fold_min: Optional[int] = None
        self.verbatim: list[int] = []  # the first request after each fold
        self.floor_misses = 0  # first requests after a fold without the newest user message

    def request(
        self, blocks: Sequence[Block], first_after_fold: bool, folded: bool, summary: str, user: Any
    ) -> None:
        count = self.count
        sizes = [count(text) for _, text, _ in blocks[1:]]
        context = sum(sizes)
        self.requests += 1
        self.context_sum += context
        self.largest = max(self.largest, context + count(blocks[0][1]))
        if folded:
            low = self.after_fold_min
            self.after_fold_min = context if low is None else min(low, context)
        if first_after_fold:
            marked = 0
            for (_, text, _), size in zip(blocks[1:], sizes):
                if SUMMARY_TEXT in text:  # a summary block (or a turn carrying the summary)
                    marked += size if len(text) < 1.5 * len(summary) else count(summary)
            self.verbatim.append(context - marked)
            self.floor_misses += user is not None and user not in blocks

    def snapshot(self, calls: int) -> dict[str, Any]:
        verbatim = sorted(self.verbatim)
        return {
            "requests": self.requests,
            "mean_context": self.context_sum / max(1, self.requests),
            "min_after_fold": self.after_fold_min or 0,
            "largest_request": self.largest,
            "summarizer_calls": calls,
            "folds": len(verbatim),
            "verbatim_mean": statistics.mean(verbatim) if verbatim else 0.0,
            "verbatim_p10": verbatim[len(verbatim) // 10] if verbatim else 0,
            "verbatim_min": verbatim[0] if verbatim else 0,
            "floor_misses": self.floor_misses,
        }


def run_trace(
    key: str,
    budget: int,
    turns: Sequence[Sequence[tuple[float, Message]]],
    horizons: Sequence[int],
    count: Counter,
    profile: Profile,
) -> tuple[list[Event], dict[int, dict[str, Any]]]:
    """Feed ``turns`` to one memory: its events (``("call", second, blocks)``, summarizer events,
    ``("turn", n)``) and its profile-independent figures at each horizon."""
    events: list[Event] = []
    summarizer = Summarizer(count, events)
    driver = MEMORIES[key][1](budget, count, summarizer, profile)
    system: Block = ("system", SYSTEM_PROMPT, 1)
    stats = Stats(count)
    seen_folds = 0
    last_user: Optional[Block] = None
    out: dict[int, dict[str, Any]] = {}
    for turn_no, turn in enumerate(turns, 1):
        for now, message in turn:
            if message.role == ASSISTANT:
                blocks = (system, *driver.request(now))
                folds = driver.folds()
                events.append(("call", now, blocks))
                stats.request(blocks, folds != seen_folds, folds > 0, summarizer.last, last_user)
                seen_folds = folds
            driver.add(message, now)
            if message.role == USER:
                last_user = _block(message)
        events.append(("turn", turn_no))
        if turn_no in horizons:
            out[turn_no] = stats.snapshot(summarizer.calls)
    return events, out


def bill(
    events: Sequence[Event], profile: Profile, count: Counter, horizons: Sequence[int], curve: bool = False
) -> dict[int, dict[str, Any]]:
    """Bill a trace under ``profile``: per horizon, the billed input-token equivalents of the
    model calls, of summarization (requests, text prompts and summaries) and the cache hits."""
    cache = Cache(profile)
    calls = summarizing = 0.0
    prompt = hits = 0
    cumulative: list[float] = []
    out: dict[int, dict[str, Any]] = {}
    for event in events:
        kind = event[0]
        if kind in ("call", "summ"):
            blocks = event[2]
            sizes = [count(text) for _, text, _ in blocks]
            billed, hit = cache.bill(event[1], blocks, sizes)
            if kind == "call":
                calls += billed
                prompt += sum(sizes)
                hits += hit
            else:
                summarizing += billed
        elif kind == "text":
            summarizing += event[1]
        elif kind == "out":
            summarizing += event[1] * profile.output
        else:  # a turn ends
            if curve:
                cumulative.append(calls + summarizing)
            if event[1] in horizons:
                out[event[1]] = {
                    "billed": calls + summarizing,
                    "summarizing": summarizing,
                    "cache_hit": hits / max(1, prompt),
                }
    if curve:
        out[max(horizons)]["cumulative"] = cumulative
    return out


def output_tokens(
    turns: Sequence[Sequence[tuple[float, Message]]], count: Counter, horizons: Sequence[int]
) -> dict[int, int]:
    """The main model's output up to each horizon: every assistant message's tokens."""
    total, out = 0, {}
    for turn_no, turn in enumerate(turns, 1):
        total += sum(count(m.token_text()) for _, m in turn if m.role == ASSISTANT)
        if turn_no in horizons:
            out[turn_no] = total
    return out


# -- jobs: one trace each, billed under every profile it is compared under --------------------------

Job = tuple[str, int, str, Optional[str], tuple[str, ...]]
"""(row, budget, clock, profile the row is told (``None``: it is told none), profiles to bill under)."""


def _counter(name: str) -> Counter:
    """The shared counter, memoized (the same text is counted once)."""
    cache: dict[str, int] = {}
    base = counters.make(name)

    def count(text: str) -> int:
        n = cache.get(text)
        if n is None:
            n = cache[text] = base(text)
        return n

    return count


def run_job(job: Job, horizons: Sequence[int], counter: str, curve: Optional[str]) -> dict[str, Any]:
    """One trace (in a worker process: it builds its own workload and counter), billed under
    the job's profiles."""
    key, budget, clock, told, under = job
    count = _counter(counter)
    turns = timed_turns(horizons[-1], clock=clock)
    events, stats = run_trace(key, budget, turns, horizons, count, PROFILES[told or DEFAULT_PROFILE])
    bills = {name: bill(events, PROFILES[name], count, horizons, curve == name) for name in under}
    return {"stats": stats, "bills": bills}


def told(key: str, budget: int, profile: Profile) -> object:
    """What a row told a profile does with it: profiles with the same answer share one trace.
    ``CacheAwareBudget`` decides from the minimum, the lifetime and whether a cached token is
    cheaper (not from the read and write prices), the rows tuned to its depth from that depth."""
    if key in TOLD:
        core = core_profile(profile)
        return (core.min_tokens, core.ttl, core.caches)
    return recommended_target(budget, profile)


def plan_jobs(
    keys: Sequence[str], budgets: Sequence[int], clocks: Sequence[str], profiles: Sequence[str]
) -> list[Job]:
    """One job per trace: rows told nothing run once and are billed under every profile; the
    rows told a profile once per distinct use of it (:func:`told`), billed under those profiles."""
    jobs: list[Job] = []
    for clock, budget, key in itertools.product(clocks, budgets, keys):
        if key not in PER_PROFILE:
            jobs.append((key, budget, clock, None, tuple(profiles)))
            continue
        groups: dict[object, list[str]] = {}
        for name in profiles:
            groups.setdefault(told(key, budget, PROFILES[name]), []).append(name)
        jobs.extend((key, budget, clock, names[0], tuple(names)) for names in groups.values())
    return jobs


def _installed(keys: Sequence[str]) -> list[str]:
    """``keys`` without the integration rows whose framework is not installed (said on stderr):
    the default runs need only the ``bench`` extra; a row asked for by name fails instead."""
    import importlib.util

    out = []
    for key in keys:
        module, extra = FRAMEWORKS.get(key, (None, None))
        if module is not None and importlib.util.find_spec(module.split(".")[0]) is None:
            print(f"skipped {key}: install rollmem[{extra}] to measure it", file=sys.stderr)
            continue
        out.append(key)
    return out


# -- the report -------------------------------------------------------------------------------------

Results = dict[tuple[str, int, str, str], dict[int, dict[str, Any]]]
"""(row, budget, clock, profile) -> horizon -> figures (stats and bill merged)."""


def collect(raw: dict[Job, dict[str, Any]]) -> Results:
    results: Results = {}
    for (key, budget, clock, _, _), run in raw.items():
        for name, bills in run["bills"].items():
            results[(key, budget, clock, name)] = {h: {**run["stats"][h], **bills[h]} for h in bills}
    return results


def uncacheable(profile: Profile, budget: int, system_tokens: int) -> bool:
    """Whether no request of this budget can be cached: no caching, or under the minimum."""
    return not profile.caches or profile.read >= 1.0 or system_tokens + budget + 200 < profile.min_tokens


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def goal_cell(
    results: Results,
    row: str,
    budget: int,
    clock: str,
    name: str,
    horizon: int,
    system_tokens: int,
    extra: dict[int, int],
) -> Optional[dict[str, Any]]:
    """The goal's figures for one row in one cell, or ``None`` when a figure is missing."""
    docs = [
        (results[(p, budget, clock, name)][horizon], p)
        for p in DOCS_PEERS
        if (p, budget, clock, name) in results
    ]
    mine = results.get((row, budget, clock, name), {}).get(horizon)
    tuned = results.get(("lc_tuned", budget, clock, name), {}).get(horizon)
    if not docs or mine is None:
        return None
    peer, peer_key = min(docs, key=lambda x: x[0]["billed"])
    output = extra[horizon] * PROFILES[name].output
    cell = {
        "peer": peer_key,
        "cost": _ratio(mine["billed"], peer["billed"]),
        "cost_output": _ratio(mine["billed"] + output, peer["billed"] + output),
        "tuned": _ratio(mine["billed"], tuned["billed"]) if tuned else None,
        "context": _ratio(mine["mean_context"], peer["mean_context"]),
        "verbatim": _ratio(mine["verbatim_mean"], peer["verbatim_mean"]),
        "smallest": _ratio(mine["min_after_fold"], peer["min_after_fold"]),
        "floor_misses": mine["floor_misses"],
        "uncacheable": uncacheable(PROFILES[name], budget, system_tokens),
    }
    if cell["uncacheable"]:
        failed = [
            k
            for k, ok in (("cost", cell["cost"] <= GOAL_TUNED), ("context", cell["context"] >= GOAL_CONTEXT))
            if not ok
        ]
    else:
        checks = (
            ("cost", cell["cost"] <= GOAL_COST),
            ("tuned", cell["tuned"] is None or cell["tuned"] <= GOAL_TUNED),
            ("context", cell["context"] >= GOAL_CONTEXT),
            ("verbatim", cell["verbatim"] >= GOAL_VERBATIM),
            ("smallest", cell["smallest"] >= GOAL_VERBATIM),
        )
        failed = [k for k, ok in checks if not ok]
    if cell["floor_misses"]:
        failed.append("floor")
    cell["failed"] = failed
    return cell


def _line(cell: dict[str, Any], row: str, name: str, clock: str, horizon: int, budget: int) -> str:
    """One cell's PASS/FAIL line."""
    tuned = "-" if cell["tuned"] is None else f"{cell['tuned']:.2f}x"
    goal = f"<= {GOAL_TUNED}x, uncacheable" if cell["uncacheable"] else f"<= {GOAL_COST}x"
    failed = f"; failed: {', '.join(cell['failed'])}" if cell["failed"] else ""
    return (
        f"{'FAIL' if cell['failed'] else 'PASS'} {name:>14} {clock:>7} {horizon:>5} turns, "
        f"budget {budget:>5}: {row} bills {cell['cost']:.2f}x {cell['peer']} ({goal}; "
        f"{cell['cost_output']:.2f}x with output), {tuned} the tuned middleware, context "
        f"{cell['context']:.2f}x, verbatim after a fold {cell['verbatim']:.2f}x, smallest context "
        f"{cell['smallest']:.2f}x{failed}"
    )


def goal_lines(
    results: Results,
    rows: Sequence[str],
    grid: tuple[Sequence[int], Sequence[str], Sequence[str], Sequence[int]],
    system_tokens: int,
    extra: dict[int, int],
) -> tuple[list[str], list[str], bool]:
    """The PASS/FAIL line of every cell, a goal table per horizon (profile x clock rows, budget
    columns: cost vs the docs peer / vs the tuned middleware) and whether all passed."""
    budgets, clocks, profiles, horizons = grid
    lines: list[str] = []
    cells: dict[tuple[str, str, int, int], str] = {}
    for name, clock, budget, horizon, row in itertools.product(profiles, clocks, budgets, horizons, rows):
        cell = goal_cell(results, row, budget, clock, name, horizon, system_tokens, extra)
        if cell is None:
            continue
        lines.append(_line(cell, row, name, clock, horizon, budget))
        if row == rows[0]:
            tuned = "-" if cell["tuned"] is None else f"{cell['tuned']:.2f}"
            shown = f"{cell['cost']:.2f} / {tuned}" + (" FAIL" if cell["failed"] else "")
            cells[(name, clock, budget, horizon)] = shown
    tables: list[str] = []
    for horizon in horizons:
        tables += ["", f"{horizon:,} turns:", ""]
        tables.append("| profile | clock | " + " | ".join(f"{b:,}" for b in budgets) + " |")
        tables.append("|---|---|" + "--:|" * len(budgets))
        for name, clock in itertools.product(profiles, clocks):
            shown = [cells.get((name, clock, budget, horizon), "-") for budget in budgets]
            tables.append(f"| {name} | {clock} | " + " | ".join(shown) + " |")
    return lines, tables, not any(line.startswith("FAIL") for line in lines)


def table(
    results: Results,
    keys: Sequence[str],
    budget: int,
    clock: str,
    name: str,
    horizon: int,
    extra: dict[int, int],
) -> str:
    head = (
        "| memory | billed | vs peer | with output | cache hit | summarizer calls | mean context "
        "| smallest after a fold | verbatim after a fold (mean / p10 / min) |\n"
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
    )
    docs = [
        results[(p, budget, clock, name)][horizon]["billed"]
        for p in DOCS_PEERS
        if (p, budget, clock, name) in results
    ]
    floor = min(docs) if docs else 1.0
    output = extra[horizon] * PROFILES[name].output
    rows = [head]
    for key in keys:
        r = results.get((key, budget, clock, name), {}).get(horizon)
        if r is None:
            continue
        rows.append(
            f"| {MEMORIES[key][0]} | {r['billed'] / 1e6:.3f}M | {r['billed'] / floor:.2f}x | "
            f"{(r['billed'] + output) / (floor + output):.2f}x | {r['cache_hit']:.0%} | "
            f"{r['summarizer_calls']} | "
            f"{r['mean_context']:.0f} | {r['min_after_fold']} | "
            f"{r['verbatim_mean']:.0f} / {r['verbatim_p10']} / {r['verbatim_min']} |"
        )
    return "\n".join(rows)


def plot(
    results: Results, keys: Sequence[str], budget: int, clock: str, name: str, horizon: int, path: str
) -> None:
    """Cumulative billed tokens against turns, one line per memory (matplotlib, the bench extra);
    the integration rows are left out (their lines lie near the recommended configuration's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    colors = plt.get_cmap("tab20").colors
    shown = [k for k in keys if "cumulative" in results.get((k, budget, clock, name), {}).get(horizon, {})]
    for n, key in enumerate(k for k in shown if k not in INTEGRATIONS):
        series = results[(key, budget, clock, name)][horizon]["cumulative"]
        ax.plot(
            range(1, len(series) + 1),
            [v / 1e6 for v in series],
            "--" if key in PEERS else "-",
            color=colors[(2 * n) % 20 + (n // 10) % 2],
            linewidth=2.4 if key in GOAL_ROWS else 1.3,
            label=MEMORIES[key][0],
        )
    ax.set_yscale("log")
    ax.set_xlabel("turns")
    ax.set_ylabel("cumulative billed input-token equivalents (millions, log scale)")
    ax.set_title(f"Billed cost per memory, budget {budget} tokens, {PROFILES[name].label}, {clock} clock")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="short conversations, one budget, a few profiles (CI)"
    )
    parser.add_argument("--profiles", nargs="*", choices=sorted(PROFILES), help="default: by mode")
    parser.add_argument("--clocks", nargs="*", choices=sorted(CLOCKS), help="default: by mode")
    parser.add_argument("--counter", choices=("bpe", "words"), default="bpe")
    parser.add_argument("--budgets", type=int, nargs="*", help="token budgets (default: by mode)")
    parser.add_argument("--horizons", type=int, nargs="*", help="turn counts (default: by mode)")
    parser.add_argument("--memories", nargs="*", choices=sorted(MEMORIES), help="default: by mode")
    parser.add_argument(
        "--tables",
        nargs="*",
        default=None,
        metavar="PROFILE/CLOCK",
        help="detailed tables for these profile/clock pairs ('all'; default: first profile, current clock)",
    )
    parser.add_argument(
        "--plot", help="write the cumulative-cost PNG here (budget 2000, first profile, current clock)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (the same figures, sooner)")
    args = parser.parse_args(argv)
    budgets = args.budgets or (QUICK_BUDGETS if args.quick else FULL_BUDGETS)
    horizons = sorted(args.horizons or (QUICK_HORIZONS if args.quick else FULL_HORIZONS))
    clocks = args.clocks or (QUICK_CLOCKS if args.quick else FULL_CLOCKS)
    profiles = args.profiles or (QUICK_PROFILES if args.quick else tuple(PROFILES))
    keys = args.memories or _installed(QUICK_MEMORIES if args.quick else FULL_MEMORIES)
    plot_at = (
        2000 if 2000 in budgets else budgets[0],
        "current" if "current" in clocks else clocks[0],
        profiles[0],
    )
    started = time.perf_counter()
    jobs = plan_jobs(keys, budgets, clocks, profiles)
    raw: dict[Job, dict[str, Any]] = {}

    def curve(job: Job) -> Optional[str]:
        return profiles[0] if args.plot and (job[1], job[2]) == plot_at[:2] else None

    if args.jobs > 1:  # the same numbers, from worker processes (deterministic: no timing)
        with ProcessPoolExecutor(args.jobs) as pool:
            futures = {job: pool.submit(run_job, job, horizons, args.counter, curve(job)) for job in jobs}
            raw = {job: future.result() for job, future in futures.items()}
    else:
        raw = {job: run_job(job, horizons, args.counter, curve(job)) for job in jobs}
    results = collect(raw)
    count = _counter(args.counter)
    system_tokens = count(SYSTEM_PROMPT)
    extra = output_tokens(timed_turns(horizons[-1]), count, horizons)
    print(
        f"rollmem cost benchmark: {len(profiles)} profiles, clocks {', '.join(clocks)}, "
        f"{args.counter} counter, system prompt {system_tokens} tokens"
    )
    wanted = args.tables if args.tables is not None else [f"{profiles[0]}/current"]
    for name, clock, horizon, budget in itertools.product(profiles, clocks, horizons, budgets):
        if "all" in wanted or f"{name}/{clock}" in wanted:
            label = f"{PROFILES[name].label}, {clock} clock"
            print(f"\n#### {label}: {horizon} turns, budget {budget} tokens\n")
            print(table(results, keys, budget, clock, name, horizon, extra))
    rows = [k for k in GOAL_ROWS if k in keys]
    goal_horizons = [h for h in horizons if h in GOAL_HORIZONS] or horizons[-1:]
    axes = (budgets, clocks, profiles, goal_horizons)
    lines, grid, ok = goal_lines(results, rows, axes, system_tokens, extra)
    print("\n#### The goal: the recommended configuration's bill / the cheapest docs peer's")
    print("/ the tuned middleware's (FAIL: a figure misses the goal, see the lines below)")
    print("\n".join(grid))
    print()
    print("\n".join(lines))
    if args.plot:
        budget, clock, name = plot_at
        plot(results, keys, budget, clock, name, horizons[-1], args.plot)
        print(f"\nplot written to {args.plot}")
    if args.json:
        slim = {
            "/".join(map(str, k)): {
                h: {f: x for f, x in r.items() if f != "cumulative"} for h, r in v.items()
            }
            for k, v in results.items()
        }
        print(json.dumps(slim, indent=1))
    print(f"\n{'goal met' if ok else 'goal NOT met'} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

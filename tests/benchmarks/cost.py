"""What each memory costs to run: billed input tokens under provider prompt caching (issue 18).

Run ``python tests/benchmarks/cost.py [--quick] [--provider anthropic-5m] [--plot PATH] [--json]``
from a clone with ``pip install -e ".[bench]"``. Deterministic: no timing, the same numbers on every
machine (``--quick`` runs shorter horizons and fewer budgets, for CI).

The workload (:mod:`cost_workload`) is a long tool-calling support conversation with a 1,186-token
system prompt; each model call (one before every assistant message) sends the system prompt, then
what the memory gives the model. Every memory gets the same token counter (BPE, ``cl100k_base``),
the same budget and the same fake summarizer (a canned ~150-token summary numbered by call, so two
summaries never share a cache entry); each library sends it its own summarization prompt.

Billing (:mod:`pricing`, :class:`PrefixCache`): the cached part of a request (any shared prefix
with automatic caching; on Anthropic the longest entry written at a ``cache_control`` breakpoint)
is billed at the cache-read price, the rest at the write price; a text summarization prompt is
billed as plain input, a ``cached_summarizer`` request through the cache; each summary at the
output price. Reported per memory, budget and
horizon: billed input-token equivalents, cache-hit fraction (of the requests' prompt tokens),
summarizer calls, mean and minimum conversation tokens per request (everything after the system
prompt, the summary included; the minimum counts only requests once the full history exceeds the
budget) and the largest request.

The peers are driven for real: LangChain v1 ``SummarizationMiddleware`` (its documented settings:
keep the last 20 messages, its default prompt and trimming; ``trigger=("tokens", budget)``; its
``before_model`` hook runs before every model call and its state update is applied with LangGraph's
``add_messages`` reducer), LlamaIndex ``ChatSummaryMemoryBuffer`` (``get()`` before each call),
langchain-classic ``ConversationSummaryBufferMemory`` (``prune()`` after each message), keep-last-N
(langchain-core ``trim_messages``: the newest messages within the budget, starting on a user turn)
and no memory (the whole history). rollmem's ``RollingMemoryMiddleware`` is driven the same way as
``SummarizationMiddleware`` (``before_model``, then ``wrap_model_call`` captures what it sends).
rollmem's other integrations, each at its defaults with the same ``cached_summarizer``, are driven
through their own hook with their framework's message objects (the request converted back to
rollmem messages the way the integration converts them): the Agents SDK ``RollingSession``
(``add_items`` per item, ``get_items()`` per call), the pydantic-ai processor (the whole history,
the system prompt as the agent's ``instructions``), the Google ADK plugin
(``before_model_callback``; its summary, appended to the system instruction, is a block after the
system prompt), the Agent Framework ``RollingCompaction`` (the messages not marked excluded) and
the Strands ``RollingConversationManager`` (``agent.messages`` after ``apply_management``). A
default run skips the rows whose framework is not installed.

Goal lines (issue 18): at 500 and 2,000 turns and every budget, rollmem's recommended configuration
(``RollingMemory.cached`` with ``cached_summarizer``) and ``RollingMemoryMiddleware`` at its defaults
(with the same summarizer), and every other integration at its defaults, bill at most 0.9x the
cheapest peer while keeping at least 0.9x that peer's mean conversation tokens per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import counters
from cost_workload import SYSTEM_PROMPT, timed_turns
from frameworks import unused_strands_model
from peers import CANNED_SUMMARY, FakeSummarizer, LangChainPeer, _langchain_llm, _llama_llm
from pricing import DEFAULT_PROVIDER, PRICES, Pricing

from rollmem import ASSISTANT, SYSTEM, TOOL, RollingMemory
from rollmem.message import Message
from rollmem.summarizers import cached_summarizer, prompt_summarizer

FULL_HORIZONS = (100, 500, 2000)
FULL_BUDGETS = (1000, 2000, 4000, 8000)
QUICK_HORIZONS = (100, 300)
QUICK_BUDGETS = (2000,)
GOAL_HORIZONS = (500, 2000)
GOAL_COST = 0.9
GOAL_CONTEXT = 0.9
SUMMARY_TEXT = " ".join([CANNED_SUMMARY] * 3)  # ~150 tokens, a realistic running summary

Counter = Callable[[str], int]
Block = tuple[str, str]  # (role, text): one message of a request, the unit of prefix matching


# -- what is billed -------------------------------------------------------------------------------


class Summarizer(FakeSummarizer):
    """The fake summarizer: records each prompt; returns the canned summary, numbered by call.

    ``record(prompt)`` bills a text prompt as plain input (1x per token); ``record_request(now,
    messages)`` bills a request of messages (``rollmem.summarizers.cached_summary_request``) like
    any request: its longest prefix of whole messages cached at ``now`` at the read price, the rest
    at the write price. ``tokens`` is the billed total, in input-token equivalents."""

    def __init__(
        self, measure: Counter, cache: Optional[PrefixCache] = None, pricing: Optional[Pricing] = None
    ):
        super().__init__(measure)
        self.cache = cache
        self.pricing = pricing
        self.hit_tokens = 0

    def record(self, prompt: str) -> str:
        super().record(prompt)
        return f"{SUMMARY_TEXT} (summary {self.calls})"

    def record_request(self, now: float, messages: Sequence[Message]) -> str:
        assert self.cache is not None
        assert self.pricing is not None
        assert self.measure is not None
        self.calls += 1
        blocks = tuple(_block(m) for m in messages)
        assert blocks[0] == ("system", SYSTEM_PROMPT), "the request must open with the system prompt"
        costs = [self.measure(text) for _, text in blocks]
        # Anthropic: breakpoints after the system prompt and the summary only (nothing reads this
        # request again): what follows them is plain input, billed 1x, and cached only if an
        # earlier request wrote exactly that prefix. Automatic caching: the rest is a write.
        marks = breakpoints(blocks, end=False)
        hits = self.cache.hit(now, blocks, marks)
        hit = sum(costs[:hits])
        covered = sum(costs) if self.cache.any_prefix else sum(costs[: max(marks)])
        self.hit_tokens += hit
        self.tokens += (  # type: ignore[assignment]
            hit * self.pricing.read
            + max(0, covered - hit) * self.pricing.write
            + (sum(costs) - max(hit, covered))
        )
        return f"{SUMMARY_TEXT} (summary {self.calls})"


class PrefixCache:
    """Prompt caching as providers bill it, by whole messages.

    ``any_prefix`` (OpenAI, Gemini: automatic prefix caching): the longest prefix a request shares
    with any request sent within the lifetime is a hit. Otherwise (Anthropic: explicit
    ``cache_control`` breakpoints) an entry exists only for the prefix ending at a breakpoint of an
    earlier request, and a hit is the longest such entry that is a whole prefix of the request; a
    request writes an entry at each of its breakpoints (``marks``: prefix lengths, in messages)."""

    def __init__(self, lifetime_s: float, any_prefix: bool = True, keep: int = 24) -> None:
        self.lifetime_s = lifetime_s
        self.any_prefix = any_prefix
        self.keep = keep
        self.entries: dict[tuple[Block, ...], float] = {}  # prefix -> expiry second, oldest first

    def _put(self, key: tuple[Block, ...], now: float) -> None:
        self.entries.pop(key, None)
        self.entries[key] = now + self.lifetime_s

    def hit(self, now: float, blocks: tuple[Block, ...], marks: Sequence[int] = ()) -> int:
        """How many leading blocks of ``blocks`` are cached at ``now``; caches ``blocks`` (with
        ``any_prefix``) or its prefixes of ``marks`` blocks (default: the whole request)."""
        live = {k: e for k, e in self.entries.items() if e >= now}
        best, best_key = 0, None
        for cached in live:
            n = len(cached)
            if n <= len(blocks) and blocks[:n] == cached:
                shared = n
            elif not self.any_prefix:
                continue
            else:
                shared = 0
                for a, b in zip(cached, blocks):
                    if a != b:
                        break
                    shared += 1
            if shared > best:
                best, best_key = shared, cached
        self.entries = live
        if best_key is not None:
            self._put(best_key, now)  # a read refreshes the entry's lifetime
        for mark in (len(blocks),) if self.any_prefix or not marks else marks:
            if mark > 0:
                self._put(blocks[:mark], now)
        while len(self.entries) > self.keep:
            del self.entries[next(iter(self.entries))]
        return best


def breakpoints(blocks: Sequence[Block], end: bool = True) -> list[int]:
    """Where ``to_anthropic(..., cache=True)`` puts ``cache_control``: after the system prompt,
    after the summary (a system message next), and (``end``) at the end of the request."""
    marks = [1]
    if len(blocks) > 1 and blocks[1][0] == "system":
        marks.append(2)
    if end:
        marks.append(len(blocks))
    return marks


@dataclass
class Totals:
    """Running totals of one memory; ``snapshot`` freezes them at a horizon."""

    billed: float = 0.0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    requests: int = 0
    context_sum: int = 0
    context_min: Optional[int] = None
    largest: int = 0
    cumulative: list[float] = field(default_factory=list)  # billed after each turn

    def snapshot(self, summarizer: Summarizer, summary_output: int, pricing: Pricing) -> dict[str, Any]:
        billed = self.billed + summarizer.tokens + summary_output * pricing.output
        return {
            "billed": round(billed),
            "cache_hit": self.hit_tokens / max(1, self.prompt_tokens),
            "summarizer_calls": summarizer.calls,
            "summarizer_tokens": summarizer.tokens,
            "mean_context": self.context_sum / max(1, self.requests),
            "min_context": self.context_min or 0,
            "largest_request": self.largest,
            "requests": self.requests,
        }


# -- the memories ---------------------------------------------------------------------------------


class Driver:
    """One memory: ``add`` each message as it happens, ``request`` before each model call."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer) -> None:
        self.budget = budget
        self.count = count
        self.summarizer = summarizer
        self.now = 0.0  # the clock of the call being driven (a summarizer request is billed then)

    def add(self, message: Message, now: float) -> None:
        raise NotImplementedError

    def request(self, now: float) -> list[Block]:
        """The messages the model gets after the system prompt (the summary first, if any)."""
        raise NotImplementedError

    summary_as: Any = None
    """``cached_summarizer``'s ``summary_as`` for this memory: ``None`` where the requests carry
    the summary as a system message (``get_messages`` and most integrations), else a method
    calling the integration's public ``cached_prefix`` (its requests put the summary elsewhere)."""


def _block(message: Message) -> Block:
    return (message.role, message.token_text())


def _summarize_fn(driver: Driver, shared: bool) -> Any:
    """rollmem's summarizer: ``cached_summarizer`` (its request shares the conversation's cached
    prefix, billed through the cache at the driver's clock) or the text ``prompt_summarizer``."""
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


class RollmemCached(Rollmem):
    """The recommended configuration: ``RollingMemory.cached(budget, summarize_fn, ...)``."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer, shared: bool = True) -> None:
        Driver.__init__(self, budget, count, summarizer)
        self.memory = RollingMemory.cached(budget, _summarize_fn(self, shared), count)


class RollmemIdleFold(Rollmem):
    """Issue 18 item 5, measured here only: ``target_tokens`` = ``target`` x the budget, and after
    an idle pause longer than the cache lifetime (the cache is cold anyway) a buffer over
    ``cold`` x the budget folds down to it before the request is sent."""

    def __init__(
        self,
        budget: int,
        count: Counter,
        summarizer: Summarizer,
        lifetime_s: float,
        target: float,
        cold: float,
    ) -> None:
        super().__init__(budget, count, summarizer, max(1, int(budget * target)))
        self.lifetime_s = lifetime_s
        self.low = max(1, int(budget * cold))
        self.last = 0.0

    def add(self, message: Message, now: float) -> None:
        self.now = now
        cold = now - self.last > self.lifetime_s
        self.last = now
        memory = self.memory
        if cold and (memory.stats().buffer_tokens or 0) > self.low:
            memory.max_tokens = self.low  # the next add folds down to min(target, low)
            try:
                memory.extend([message])
            finally:
                memory.max_tokens = self.budget
        else:
            memory.extend([message])


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
    """LangChain v1 ``SummarizationMiddleware``, documented settings, ``trigger`` at the budget."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer) -> None:
        from langchain.agents.middleware import SummarizationMiddleware

        super().__init__(budget, count, summarizer)
        self.middleware = SummarizationMiddleware(
            _summary_chat_model(summarizer), trigger=("tokens", budget), token_counter=_lc_counter(count)
        )

    def request(self, now: float) -> list[Block]:
        self._apply(self.middleware.before_model(self.state, None))  # type: ignore[arg-type]
        return _lc_blocks(self.state["messages"])


class RollmemMiddleware(_LangGraphState):
    """rollmem's ``RollingMemoryMiddleware`` at its defaults (only the budget, summarizer, counter)."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer, shared: bool = True) -> None:
        from rollmem.integrations.langchain import RollingMemoryMiddleware

        super().__init__(budget, count, summarizer)
        self.middleware = RollingMemoryMiddleware(budget, _summarize_fn(self, shared), count)
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
            out.append(_block(original) if original is not None else ("system", str(native.content)))
        return out


class KeepLast(Driver):
    """Keep-last-N: langchain-core ``trim_messages``, the newest messages within the budget."""

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer) -> None:
        super().__init__(budget, count, summarizer)
        self.messages: list[Any] = []
        self.counter = _lc_counter(count)

    def add(self, message: Message, now: float) -> None:
        self.messages.extend(_lc_convert([message]))

    def request(self, now: float) -> list[Block]:
        from langchain_core.messages import trim_messages

        tail, total = len(self.messages), 0  # trim only a tail holding more than the budget
        while tail > 0 and total <= self.budget:
            tail -= 1
            total += self.counter(self.messages[tail : tail + 1])
        kept = trim_messages(
            self.messages[max(0, tail - 1) :],
            max_tokens=self.budget,
            token_counter=self.counter,
            strategy="last",
            start_on="human",
        )
        return _lc_blocks(kept)


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

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer) -> None:
        super().__init__(budget, count, summarizer)
        self.summarize = _summarize_fn(self, True)
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

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer) -> None:
        from rollmem.integrations.openai_agents import RollingSession

        super().__init__(budget, count, summarizer)
        self.session = RollingSession(
            "bench", max_tokens=budget, summarize_fn=self.summarize, token_counter=count
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

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer, in_history: bool = False) -> None:
        import pydantic_ai.messages as pai

        from rollmem.integrations.pydantic_ai import rolling_history

        super().__init__(budget, count, summarizer)
        self.pai = pai
        self.in_history = in_history
        self.processor = rolling_history(budget, self.summarize, count)
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

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer) -> None:
        from google.adk.agents import LlmAgent
        from google.adk.agents.invocation_context import InvocationContext
        from google.adk.sessions import InMemorySessionService, Session
        from google.genai import types

        from rollmem.integrations.google_adk import RollingMemoryPlugin

        super().__init__(budget, count, summarizer)
        self.types = types
        self.plugin = RollingMemoryPlugin(budget, self.summarize, count)
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

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer) -> None:
        import agent_framework as af

        from rollmem.integrations.agent_framework import RollingCompaction

        super().__init__(budget, count, summarizer)
        self.af = af
        self.strategy = RollingCompaction(budget, self.summarize, count)
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

    def __init__(self, budget: int, count: Counter, summarizer: Summarizer) -> None:
        from strands import Agent

        from rollmem.integrations.strands import RollingConversationManager

        super().__init__(budget, count, summarizer)
        self.manager = RollingConversationManager(budget, self.summarize, count)
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


# -- the run --------------------------------------------------------------------------------------

Factory = Callable[[int, Counter, Summarizer, Pricing], Driver]


def _target(percent: int, shared: bool = False) -> Factory:
    return lambda b, c, s, p: Rollmem(b, c, s, max(1, b * percent // 100), shared)


MEMORIES: dict[str, tuple[str, Factory]] = {
    "cached": (
        "rollmem RollingMemory.cached + cached_summarizer (recommended)",
        lambda b, c, s, p: RollmemCached(b, c, s),
    ),
    "middleware": (
        "rollmem RollingMemoryMiddleware, defaults + cached_summarizer",
        lambda b, c, s, p: RollmemMiddleware(b, c, s),
    ),
    "agents_session": (
        "rollmem RollingSession (Agents SDK), defaults + cached_summarizer",
        lambda b, c, s, p: AgentsSession(b, c, s),
    ),
    "pydantic_ai": (
        "rollmem rolling_history (pydantic-ai), defaults + cached_summarizer",
        lambda b, c, s, p: PydanticAIHistory(b, c, s),
    ),
    "pydantic_ai_system": (
        "rollmem rolling_history (pydantic-ai, system_prompt in the history), defaults + cached_summarizer",
        lambda b, c, s, p: PydanticAIHistory(b, c, s, in_history=True),
    ),
    "google_adk": (
        "rollmem RollingMemoryPlugin (Google ADK), defaults + cached_summarizer",
        lambda b, c, s, p: AdkPlugin(b, c, s),
    ),
    "agent_framework": (
        "rollmem RollingCompaction (Agent Framework), defaults + cached_summarizer",
        lambda b, c, s, p: MafCompaction(b, c, s),
    ),
    "strands": (
        "rollmem RollingConversationManager (Strands), defaults + cached_summarizer",
        lambda b, c, s, p: StrandsManager(b, c, s),
    ),
    "cached_text": (
        "rollmem RollingMemory.cached + prompt_summarizer",
        lambda b, c, s, p: RollmemCached(b, c, s, shared=False),
    ),
    "middleware_text": (
        "rollmem RollingMemoryMiddleware, defaults + prompt_summarizer",
        lambda b, c, s, p: RollmemMiddleware(b, c, s, shared=False),
    ),
    "defaults": ("rollmem RollingMemory() defaults", lambda b, c, s, p: Rollmem(b, c, s, None)),
    "target90": ("rollmem target_tokens 90%", _target(90)),
    "target80": ("rollmem target_tokens 80%", _target(80)),
    "target75": ("rollmem target_tokens 75%", _target(75)),
    "target50": ("rollmem target_tokens 50%", _target(50)),
    "target40": ("rollmem target_tokens 40%", _target(40)),
    "target33": ("rollmem target_tokens 33%", _target(33)),
    "target25": ("rollmem target_tokens 25%", _target(25)),
    "target15": ("rollmem target_tokens 15%", _target(15)),
    "target10": ("rollmem target_tokens 10%", _target(10)),
    "target2": ("rollmem target_tokens 2%", _target(2)),
    **{
        f"shared{pct}": (f"rollmem target_tokens {pct}% + cached_summarizer", _target(pct, True))
        for pct in (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 25, 33, 40, 50, 62, 75)
    },
    "cold25": (
        "rollmem target 50% + fold to 25% when cold",
        lambda b, c, s, p: RollmemIdleFold(b, c, s, p.lifetime_s, 0.5, 0.25),
    ),
    "cold30": (
        "rollmem target 50% + fold to 30% when cold",
        lambda b, c, s, p: RollmemIdleFold(b, c, s, p.lifetime_s, 0.5, 0.30),
    ),
    "lc_summarization": (
        "LangChain v1 SummarizationMiddleware",
        lambda b, c, s, p: LangChainSummarization(b, c, s),
    ),
    "llamaindex": ("LlamaIndex ChatSummaryMemoryBuffer", lambda b, c, s, p: LlamaIndexSummaryBuffer(b, c, s)),
    "lc_classic": (
        "langchain-classic ConversationSummaryBufferMemory",
        lambda b, c, s, p: ClassicSummaryBuffer(b, c, s),
    ),
    "keep_last": ("keep-last-N (trim_messages)", lambda b, c, s, p: KeepLast(b, c, s)),
    "none": ("no memory (full history)", lambda b, c, s, p: NoMemory(b, c, s)),
}
PEERS = ("lc_summarization", "llamaindex", "lc_classic", "keep_last", "none")
INTEGRATIONS = ("agents_session", "pydantic_ai", "google_adk", "agent_framework", "strands")
CANDIDATES = ("cached", "middleware", *INTEGRATIONS)
FULL_MEMORIES = (
    "cached",
    "middleware",
    *INTEGRATIONS,
    "cached_text",
    "middleware_text",
    "defaults",
    "target50",
    "target25",
    "target10",
    "cold25",
    "cold30",
    "lc_summarization",
    "llamaindex",
    "lc_classic",
    "keep_last",
    "none",
)
QUICK_MEMORIES = (
    "cached",
    "middleware",
    "agents_session",
    "defaults",
    "lc_summarization",
    "llamaindex",
    "lc_classic",
    "keep_last",
    "none",
)


def run_one(
    key: str,
    budget: int,
    turns: Sequence[Sequence[tuple[float, Message]]],
    horizons: Sequence[int],
    count: Counter,
    pricing: Pricing,
) -> dict[int, dict[str, Any]]:
    """Feed ``turns`` to one memory; its figures at each horizon (a number of turns)."""
    cache = PrefixCache(pricing.lifetime_s, pricing.any_prefix)
    summarizer = Summarizer(count, cache, pricing)
    driver = MEMORIES[key][1](budget, count, summarizer, pricing)
    system: Block = ("system", SYSTEM_PROMPT)
    system_tokens = count(SYSTEM_PROMPT)
    totals = Totals()
    history_tokens = 0
    calls_seen = 0
    summary_output = 0
    out: dict[int, dict[str, Any]] = {}
    for turn_no, turn in enumerate(turns, 1):
        for now, message in turn:
            if message.role == ASSISTANT:
                blocks = (system, *driver.request(now))
                costs = [system_tokens] + [count(text) for _, text in blocks[1:]]
                hit = sum(costs[: cache.hit(now, blocks, breakpoints(blocks))])
                size = sum(costs)
                totals.billed += hit * pricing.read + (size - hit) * pricing.write
                totals.prompt_tokens += size
                totals.hit_tokens += hit
                totals.requests += 1
                context = size - system_tokens
                totals.context_sum += context
                if history_tokens > budget:
                    m = totals.context_min
                    totals.context_min = context if m is None else min(m, context)
                totals.largest = max(totals.largest, size)
            driver.add(message, now)
            history_tokens += count(message.token_text())
        if summarizer.calls != calls_seen:
            summary_output += (summarizer.calls - calls_seen) * count(f"{SUMMARY_TEXT} (summary 1)")
            calls_seen = summarizer.calls
        totals.cumulative.append(totals.billed + summarizer.tokens + summary_output * pricing.output)
        if turn_no in horizons:
            out[turn_no] = totals.snapshot(summarizer, summary_output, pricing)
            out[turn_no]["cumulative"] = list(totals.cumulative)
    return out


def _goal_lines(
    results: dict[tuple[str, int], dict[int, dict[str, Any]]], budgets: Sequence[int], horizons: Sequence[int]
) -> tuple[list[str], bool]:
    lines: list[str] = []
    ok = any(cand in CANDIDATES for cand, _ in results)
    for horizon in horizons:
        for budget in budgets:
            peers = [(results[(p, budget)][horizon], p) for p in PEERS if (p, budget) in results]
            if not peers:
                continue
            cheapest, name = min(peers, key=lambda x: x[0]["billed"])
            for cand in CANDIDATES:
                if (cand, budget) not in results:
                    continue
                mine = results[(cand, budget)][horizon]
                cost = mine["billed"] / cheapest["billed"]
                ctx = mine["mean_context"] / max(1e-9, cheapest["mean_context"])
                good = cost <= GOAL_COST and ctx >= GOAL_CONTEXT
                ok = ok and good
                lines.append(
                    f"{'PASS' if good else 'FAIL'} {horizon:>5} turns, budget {budget:>5}: "
                    f"{MEMORIES[cand][0]} bills {cost:.2f}x the cheapest peer ({MEMORIES[name][0]}; "
                    f"goal <= {GOAL_COST}x) with {ctx:.2f}x its mean context (goal >= {GOAL_CONTEXT}x)"
                )
    return lines, ok


def _table(
    results: dict[tuple[str, int], dict[int, dict[str, Any]]], keys: Sequence[str], budget: int, horizon: int
) -> str:
    head = (
        "| memory | billed | vs cheapest peer | cache hit | summarizer calls | mean context "
        "| min context | largest request |\n|---|--:|--:|--:|--:|--:|--:|--:|"
    )
    peers = [results[(p, budget)][horizon]["billed"] for p in PEERS if (p, budget) in results]
    floor = min(peers) if peers else 1
    rows = [head]
    for key in keys:
        if (key, budget) not in results:
            continue
        r = results[(key, budget)][horizon]
        rows.append(
            f"| {MEMORIES[key][0]} | {r['billed'] / 1e6:.3f}M | {r['billed'] / floor:.2f}x | "
            f"{r['cache_hit']:.0%} | {r['summarizer_calls']} | {r['mean_context']:.0f} | "
            f"{r['min_context']} | {r['largest_request']} |"
        )
    return "\n".join(rows)


def plot(
    results: dict[tuple[str, int], dict[int, dict[str, Any]]],
    keys: Sequence[str],
    budget: int,
    horizon: int,
    path: str,
    provider: str,
) -> None:
    """Cumulative billed tokens against turns, one line per memory (matplotlib, the bench extra);
    the integration rows other than the middleware are left out (their lines lie on the
    recommended configuration's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    colors = plt.get_cmap("tab20").colors
    for n, key in enumerate(k for k in keys if (k, budget) in results and k not in FRAMEWORKS):
        series = results[(key, budget)][horizon]["cumulative"]
        style = "--" if key in PEERS else "-"  # peers dashed, rollmem solid
        width = 2.4 if key in CANDIDATES else 1.3
        ax.plot(
            range(1, len(series) + 1),
            [v / 1e6 for v in series],
            style,
            color=colors[(2 * n) % 20 + (n // 10) % 2],
            linewidth=width,
            label=MEMORIES[key][0],
        )
    ax.set_yscale("log")
    ax.set_xlabel("turns")
    ax.set_ylabel("cumulative billed input-token equivalents (millions, log scale)")
    ax.set_title(f"Billed cost per memory, budget {budget} tokens, {provider} prices")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


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


def _run_job(
    key: str, budget: int, horizons: Sequence[int], counter: str, provider: str
) -> dict[int, dict[str, Any]]:
    """``run_one`` in a worker process: builds its own workload and counter."""
    return run_one(key, budget, timed_turns(horizons[-1]), horizons, _counter(counter), PRICES[provider])


FRAMEWORKS = {  # integration row -> (module it needs, rollmem extra)
    "agents_session": ("agents", "openai-agents"),
    "pydantic_ai": ("pydantic_ai", "pydantic-ai"),
    "pydantic_ai_system": ("pydantic_ai", "pydantic-ai"),
    "google_adk": ("google.adk", "google-adk"),
    "agent_framework": ("agent_framework", "agent-framework"),
    "strands": ("strands", "strands"),
}


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


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short horizons and one budget (CI)")
    parser.add_argument("--provider", choices=sorted(PRICES), default=DEFAULT_PROVIDER)
    parser.add_argument("--counter", choices=("bpe", "words"), default="bpe")
    parser.add_argument("--budgets", type=int, nargs="*", help="token budgets (default: by mode)")
    parser.add_argument("--horizons", type=int, nargs="*", help="turn counts (default: by mode)")
    parser.add_argument("--memories", nargs="*", choices=sorted(MEMORIES), help="default: by mode")
    parser.add_argument("--plot", help="write the cumulative-cost PNG here (budget 2000, longest horizon)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (the same figures, sooner)")
    args = parser.parse_args(argv)
    budgets = args.budgets or (QUICK_BUDGETS if args.quick else FULL_BUDGETS)
    horizons = sorted(args.horizons or (QUICK_HORIZONS if args.quick else FULL_HORIZONS))
    keys = args.memories or _installed(QUICK_MEMORIES if args.quick else FULL_MEMORIES)
    pricing = PRICES[args.provider]
    count = _counter(args.counter)
    started = time.perf_counter()
    jobs = [(key, budget) for budget in budgets for key in keys]
    results: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    if args.jobs > 1:  # the same numbers, from worker processes (deterministic: no timing)
        with ProcessPoolExecutor(args.jobs) as pool:
            futures = {
                job: pool.submit(_run_job, *job, horizons, args.counter, args.provider) for job in jobs
            }
            results = {job: future.result() for job, future in futures.items()}
    else:
        turns = timed_turns(horizons[-1])
        for key, budget in jobs:
            results[(key, budget)] = run_one(key, budget, turns, horizons, count, pricing)
    print(
        f"rollmem cost benchmark: {args.provider} prices ({pricing.source}: write {pricing.write}x, "
        f"read {pricing.read}x, output {pricing.output}x, cache lifetime {pricing.lifetime_s:.0f} s), "
        f"{args.counter} counter, system prompt {count(SYSTEM_PROMPT)} tokens"
    )
    for horizon in horizons:
        for budget in budgets:
            print(f"\n### {horizon} turns, budget {budget} tokens\n")
            print(_table(results, keys, budget, horizon))
    goal_horizons = [h for h in horizons if h in GOAL_HORIZONS] or horizons[-1:]
    lines, ok = _goal_lines(results, budgets, goal_horizons)
    print()
    print("\n".join(lines))
    if args.plot:
        plot_budget = 2000 if 2000 in budgets else budgets[0]
        plot(results, keys, plot_budget, horizons[-1], args.plot, args.provider)
        print(f"\nplot written to {args.plot}")
    if args.json:
        slim = {
            f"{key}/{budget}": {h: {k: v for k, v in r.items() if k != "cumulative"} for h, r in runs.items()}
            for (key, budget), runs in results.items()
        }
        print(json.dumps(slim, indent=1))
    print(f"\n{'goal met' if ok else 'goal NOT met'} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

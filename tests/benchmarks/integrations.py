"""Per model call cost of the framework integrations, at 50, 200 and 800 buffered messages.

Run ``PYTHONPATH=src python tests/benchmarks/integrations.py [--quick]`` (not collected by pytest).

One *model call* is what the framework does around each request, with two messages added since
the previous one (an answer and a question):

- ``langchain``: ``RollingMemoryMiddleware.before_model(state, runtime)`` on a LangGraph-shaped
  state (real ``langchain_core`` messages with ids; the returned update applied to it);
- ``pydantic-ai``: ``await processor(ctx, history)`` of ``rolling_history`` on the whole history
  an app keeps (``message_history=result.all_messages()``);
- ``openai-agents``: ``RollingSession.add_items(...)`` (timed) after ``get_items()`` (not timed:
  it returns every buffered item, as the SDK's session protocol asks, so it is O(buffer) by
  contract).
- ``google-adk``: ``RollingMemoryPlugin.before_model_callback`` with ADK's ``CallbackContext`` on
  an in-memory session and an ``LlmRequest`` of fresh copies of every content (ADK builds one per
  request: not timed);
- ``agent-framework``: ``await RollingCompaction(...)(messages)`` on a fresh list of the whole
  history's messages (what a history provider loading everything hands over);
- ``strands``: ``RollingConversationManager.apply_management(agent)`` on a real ``Agent``.

The budget holds about N messages (8 words each, ``words`` counter with an identity, wrapped to
count its calls), ``target_tokens`` equal to the budget, so once full every call folds: the worst
case. Each integration is filled untimed to N messages, then calls are timed one by one
(``perf_counter_ns``, garbage collector off); the median is reported, with counter calls per call.

Targets (issues 20, 26): counter calls per call the same at 800 as at 50 (only the new messages are
counted); time per call at 800 at most 3x the time at 50, for every integration. The pydantic-ai
processor is handed the whole history, but recognises the history of its previous call (passed or
returned) with one list comparison and takes apart only the messages after it.
``--quick`` takes fewer calls and exits 1 only on a counter-call FAIL (deterministic); the full run
exits 1 on any FAIL.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from counters import Counting, words
from frameworks import answering_strands_model, unused_strands_model

SIZES = (50, 200, 800)
WORDS_PER_MESSAGE = 8
TIME_RATIO = 3.0
HOOK_RATIO = 2.5  # issue 26: ADK, Agent Framework and Strands with a session manager


def text(n: int) -> str:
    """Eight words, the first unique (ADK and Agent Framework recognise contents by what they say)."""
    return " ".join([f"m{n}", *(f"w{(n + i) % 97}" for i in range(1, WORDS_PER_MESSAGE))])


def summarize(summary: str, evicted: Any) -> str:
    return (summary + f" +{len(evicted)}")[-200:]


def counter() -> Counting:
    counting = Counting(words)
    counting.rollmem_identity = "bench-words"  # type: ignore[attr-defined]
    return counting


class Run:
    """Drives one integration: ``fill(n)`` untimed, then ``call()`` per model call."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.counter = counter()
        self.budget = size * WORDS_PER_MESSAGE
        self.n = 0

    def next_text(self) -> str:
        self.n += 1
        return text(self.n)


class LangChainRun(Run):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        from langchain_core.messages import AIMessage, HumanMessage

        from rollmem.integrations.langchain import CURSOR_KEY, SUMMARY_KEY, RollingMemoryMiddleware

        self.human, self.ai = HumanMessage, AIMessage
        self.keys = (CURSOR_KEY, SUMMARY_KEY)
        self.middleware = RollingMemoryMiddleware(self.budget, summarize, self.counter)
        self.state: dict[str, Any] = {"messages": []}
        for i in range(size):
            self.add(i % 2 == 1)
        self.step()

    def add(self, answer: bool) -> None:
        kind = self.ai if answer else self.human
        self.state["messages"].append(kind(content=self.next_text(), id=str(uuid.uuid4())))

    def step(self) -> None:
        update = self.middleware.before_model(self.state, None)  # type: ignore[arg-type]
        if update is not None:
            for key in self.keys:
                self.state[key] = update[key]

    def call(self) -> int:
        self.add(True)
        self.add(False)
        start = time.perf_counter_ns()
        self.step()
        return time.perf_counter_ns() - start


class PydanticAIRun(Run):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        from rollmem.integrations.pydantic_ai import rolling_history

        self.request = lambda t: ModelRequest(parts=[UserPromptPart(t)])
        self.response = lambda t: ModelResponse(parts=[TextPart(t)])
        self.processor = rolling_history(self.budget, summarize, self.counter)
        self.history: list[Any] = []
        for i in range(size):
            self.add(i % 2 == 1)

    def add(self, answer: bool) -> None:
        self.history.append((self.response if answer else self.request)(self.next_text()))

    async def start(self) -> None:
        await self.processor(None, self.history)

    async def acall(self) -> int:
        self.add(True)
        self.add(False)
        start = time.perf_counter_ns()
        await self.processor(None, self.history)
        return time.perf_counter_ns() - start


class AgentsRun(Run):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        from rollmem.integrations.openai_agents import RollingSession

        self.session = RollingSession(
            "bench", max_tokens=self.budget, summarize_fn=summarize, token_counter=self.counter
        )

    def items(self, count: int) -> list[dict[str, Any]]:
        roles = ("assistant", "user")
        return [{"role": roles[(self.n + i) % 2], "content": self.next_text()} for i in range(count)]

    async def start(self) -> None:
        await self.session.add_items(self.items(self.size))

    async def acall(self) -> int:
        await self.session.get_items()  # returns every item: O(buffer) by the SDK's protocol, not timed
        new = self.items(2)
        start = time.perf_counter_ns()
        await self.session.add_items(new)
        return time.perf_counter_ns() - start


class AdkRun(Run):
    """The plugin's ``before_model_callback`` with ADK's own ``CallbackContext`` on an in-memory
    session and an ``LlmRequest`` holding a fresh shallow copy of every content, as ADK builds one
    per request (the copies are not timed); the state the callback writes lands in the session."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        from google.adk.agents import LlmAgent
        from google.adk.agents.callback_context import CallbackContext
        from google.adk.agents.invocation_context import InvocationContext
        from google.adk.models.llm_request import LlmRequest
        from google.adk.sessions import InMemorySessionService, Session
        from google.genai import types

        from rollmem.integrations.google_adk import RollingMemoryPlugin

        self.types, self.request_type, self.context_type = types, LlmRequest, CallbackContext
        self.plugin = RollingMemoryPlugin(self.budget, summarize, self.counter, target_tokens=self.budget)
        agent = LlmAgent(name="bench", model="gemini-2.5-flash")  # never called
        session = Session(id="bench", app_name="bench", user_id="bench")
        self.context = InvocationContext(
            session_service=InMemorySessionService(), invocation_id="bench", agent=agent, session=session
        )
        self.history: list[Any] = []
        for i in range(size):
            self.add(i % 2 == 1)

    def add(self, answer: bool) -> None:
        part = self.types.Part(text=self.next_text())
        self.history.append(self.types.Content(role="model" if answer else "user", parts=[part]))

    async def step(self) -> int:
        request = self.request_type(contents=[content.model_copy() for content in self.history])
        context = self.context_type(self.context)
        start = time.perf_counter_ns()
        await self.plugin.before_model_callback(callback_context=context, llm_request=request)
        return time.perf_counter_ns() - start

    async def start(self) -> None:
        await self.step()

    async def acall(self) -> int:
        self.add(True)
        self.add(False)
        return await self.step()


class AgentFrameworkRun(Run):
    """``await RollingCompaction(...)(messages)`` on a fresh list of the whole history's
    ``agent_framework.Message`` objects (what a history provider loading everything hands over)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        import agent_framework as af

        from rollmem.integrations.agent_framework import RollingCompaction

        self.message = af.Message
        self.strategy = RollingCompaction(self.budget, summarize, self.counter, target_tokens=self.budget)
        self.history: list[Any] = []
        for i in range(size):
            self.add(i % 2 == 1)

    def add(self, answer: bool) -> None:
        self.history.append(self.message("assistant" if answer else "user", [self.next_text()]))

    async def start(self) -> None:
        import warnings

        warnings.simplefilter("ignore", UserWarning)  # called as a strategy alone: one conversation
        await self.strategy(list(self.history))

    async def acall(self) -> int:
        self.add(True)
        self.add(False)
        messages = list(self.history)
        start = time.perf_counter_ns()
        await self.strategy(messages)
        return time.perf_counter_ns() - start


class StrandsRun(Run):
    """``RollingConversationManager.apply_management(agent)`` on a real Strands ``Agent`` (with a
    model that is never called), two messages appended to ``agent.messages`` per call."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        from strands import Agent

        from rollmem.integrations.strands import RollingConversationManager

        self.manager = RollingConversationManager(
            self.budget, summarize, self.counter, target_tokens=self.budget
        )
        self.agent = Agent(
            model=unused_strands_model(), callback_handler=None, conversation_manager=self.manager
        )
        for i in range(size):
            self.add(i % 2 == 1)
        self.manager.apply_management(self.agent)

    def add(self, answer: bool) -> None:
        role = "assistant" if answer else "user"
        self.agent.messages.append({"role": role, "content": [{"text": self.next_text()}]})

    def call(self) -> int:
        self.add(True)
        self.add(False)
        start = time.perf_counter_ns()
        self.manager.apply_management(self.agent)
        return time.perf_counter_ns() - start


class StrandsSessionRun(Run):
    """A real Strands ``Agent`` with a ``FileSessionManager`` (which calls ``get_state()`` on every
    message it saves) and a scripted model answering each prompt: one model call per agent call,
    two messages added. Timed: everything the agent spends in the manager (its hook, its
    ``apply_management``, ``get_state``) during that call."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        import tempfile

        from strands import Agent
        from strands.session.file_session_manager import FileSessionManager

        from rollmem.integrations.strands import RollingConversationManager

        spent = self.spent = [0]

        def timed(method: Any) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter_ns()
                try:
                    return method(*args, **kwargs)
                finally:
                    spent[0] += time.perf_counter_ns() - start

            return call

        class Timed(RollingConversationManager):
            get_state = timed(RollingConversationManager.get_state)
            apply_management = timed(RollingConversationManager.apply_management)

        self.directory = tempfile.TemporaryDirectory()
        self.manager = Timed(self.budget, summarize, self.counter, target_tokens=self.budget)
        session = FileSessionManager(session_id="bench", storage_dir=self.directory.name)
        self.agent = Agent(
            model=answering_strands_model(),
            callback_handler=None,
            conversation_manager=self.manager,
            session_manager=session,
        )
        for _ in range(size // 2):
            self.agent(self.next_text())

    def call(self) -> int:
        self.spent[0] = 0
        self.agent(self.next_text())
        return self.spent[0]


def measure_sync(run: Any, calls: int) -> tuple[float, float]:
    before = run.counter.calls
    times = [run.call() for _ in range(calls)]
    return (run.counter.calls - before) / calls, statistics.median(times) / 1000


def measure_async(run: Any, calls: int) -> tuple[float, float]:
    async def main() -> tuple[float, float]:
        await run.start()
        before = run.counter.calls
        times = [await run.acall() for _ in range(calls)]
        return (run.counter.calls - before) / calls, statistics.median(times) / 1000

    return asyncio.run(main())


def bench(
    name: str,
    make: Callable[[int], Any],
    measure: Callable[[Any, int], Any],
    calls: int,
    ratio: float = TIME_RATIO,
) -> list[str]:
    """Rows for one integration; returns the failures."""
    results = {}
    for size in SIZES:
        gc.collect()
        gc.disable()
        try:
            results[size] = measure(make(size), calls)
        finally:
            gc.enable()
        per_call, micros = results[size]
        print(f"  {name:<14} {size:>4} messages: {per_call:5.2f} counter calls/call, {micros:9.1f} us/call")
    failures = []
    low, high = results[SIZES[0]], results[SIZES[-1]]
    calls_ok = high[0] <= low[0] + 1e-9
    times = high[1] / low[1] if low[1] else float("inf")
    verdict = "PASS" if times <= ratio else "FAIL"
    print(
        f"  {name:<14} counter calls flat: {'PASS' if calls_ok else 'FAIL'}; "
        f"time {SIZES[-1]}/{SIZES[0]} = {times:.2f}x (target <= {ratio}x): {verdict}"
    )
    if not calls_ok:
        failures.append(f"{name}: counter calls")
    if times > ratio:
        failures.append(f"{name}: time")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls; fail on counter calls only")
    args = parser.parse_args()
    calls = 30 if args.quick else 300
    print(f"integrations: {calls} model calls per size, 2 new messages per call")
    failures: list[str] = []
    failures += bench("langchain", LangChainRun, measure_sync, calls)
    failures += bench("pydantic-ai", PydanticAIRun, measure_async, calls)
    failures += bench("openai-agents", AgentsRun, measure_async, calls)
    failures += bench("google-adk", AdkRun, measure_async, calls, HOOK_RATIO)
    failures += bench("agent-framework", AgentFrameworkRun, measure_async, calls, HOOK_RATIO)
    failures += bench("strands", StrandsRun, measure_sync, calls)
    failures += bench("strands+fsm", StrandsSessionRun, measure_sync, calls, HOOK_RATIO)
    deterministic = [f for f in failures if f.endswith("counter calls")]
    fatal = deterministic if args.quick else failures
    print("integrations:", "FAIL " + ", ".join(failures) if failures else "PASS")
    return 1 if fatal else 0


if __name__ == "__main__":
    sys.exit(main())

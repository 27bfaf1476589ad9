"""Every integration's default fold is the cache-aware one, chosen in one place (issue 27): each
takes ``provider``, ``clock`` and ``prefix_tokens``, checks them when it is built, and every
memory it builds (for a new conversation, or rebuilt from saved state) folds with
:class:`~rollmem.policies.CacheAwareBudget`; an explicit ``target_tokens`` keeps the plain fold."""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Awaitable
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest
from tests._optional import need
from tests.memory.test_policies import BAD_CACHE_SETTINGS

from rollmem import AsyncRollingMemory, Message, RollingMemory
from rollmem.integrations._engine import new_memory, stamp_clock
from rollmem.policies import PROVIDERS, CacheAwareBudget, CacheProfile, TokenBudget

Build = Callable[..., Any]


def _builder(extra: str, framework: str, module: str, make: Callable[[Any], Build]) -> Any:
    def build(**settings: Any) -> Any:
        need(extra, framework)  # skips where the extra (or, by its markers, the framework) is not
        return make(importlib.import_module(f"rollmem.integrations.{module}"))(**settings)

    build.stamped = module in STAMPED  # type: ignore[attr-defined]
    return pytest.param(build, id=module)


STAMPED = ("pydantic_ai", "google_adk")  # their frameworks stamp messages: that is the default clock


INTEGRATIONS = [
    _builder("langchain", "langchain.agents", "langchain", lambda m: m.RollingMemoryMiddleware),
    _builder("openai-agents", "agents", "openai_agents", lambda m: lambda **kw: m.RollingSession("s", **kw)),
    _builder("pydantic-ai", "pydantic_ai", "pydantic_ai", lambda m: m.rolling_history),
    _builder("strands", "strands", "strands", lambda m: m.RollingConversationManager),
    _builder("agent-framework", "agent_framework", "agent_framework", lambda m: m.RollingCompaction),
    _builder("google-adk", "google.adk", "google_adk", lambda m: m.RollingMemoryPlugin),
]


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def hundred(role: str, n: int) -> Message:
    """A message of 100 tokens (the default counter counts words)."""
    return Message(role, " ".join([f"{role}{n}"] * 100))


@pytest.mark.parametrize("build", INTEGRATIONS)
def test_the_default_fold_is_the_cache_aware_one(build: Build) -> None:
    for memory in (new_memory(build(), asynchronous=True), new_memory(build(), asynchronous=False)):
        policy = memory.policy
        assert type(policy) is CacheAwareBudget
        clock = stamp_clock if build.stamped else time.monotonic  # type: ignore[attr-defined]
        assert (policy.provider, policy.clock) == (PROVIDERS["anthropic"], clock)
        assert policy.prefix_tokens == 0
        # a cacheable request needs 1,024 tokens: the floor, above VERBATIM_FLOOR's 750 at 2,000
        assert (memory.max_tokens, memory.target_tokens) == (2000, 1024)
    assert type(new_memory(build(), asynchronous=True)) is AsyncRollingMemory
    plain = new_memory(build(max_tokens=1000, target_tokens=300, provider="openai"), asynchronous=False)
    assert type(plain) is RollingMemory
    assert type(plain.policy) is TokenBudget  # an explicit target: the plain fold, as before
    assert (plain.max_tokens, plain.target_tokens) == (1000, 300)


@pytest.mark.parametrize("build", INTEGRATIONS)
async def test_provider_and_clock_decide_the_fold(build: Build, recorder: Any) -> None:
    clock, profile = Clock(), CacheProfile(min_tokens=1024, ttl=300.0, read=0.1, write=1.25)
    owner = build(max_tokens=2000, summarize_fn=recorder, provider=profile, clock=clock, prefix_tokens=1200)
    memory = new_memory(owner, asynchronous=True)
    assert memory.policy.provider is profile
    assert memory.target_tokens == 750  # the verbatim floor once the system prompt makes requests cacheable
    for n in range(9):  # 1,800 tokens, the cache warm
        clock.now += 30
        await memory.extend([hundred("user", n), hundred("assistant", n)])
    assert recorder.calls == []
    clock.now += 301  # idle longer than the cache lives: folding now costs only the summarizer call
    await memory.extend([hundred("user", 9)])
    assert len(recorder.calls) == 1
    assert memory.stats().buffer_tokens == 900  # down to the floor plus 1/8 of the budget, on a user turn


@pytest.mark.parametrize("build", INTEGRATIONS)
@pytest.mark.parametrize(("settings", "error", "message"), BAD_CACHE_SETTINGS)
def test_bad_settings_raise_when_built(
    build: Build, settings: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}"):
        build(**settings)
    with pytest.raises(error, match=f"^{re.escape(message)}"):  # even where an explicit target is set
        build(target_tokens=100, **settings)


# -- through the frameworks: the clock each integration is given decides when it folds -----------

PROFILE = CacheProfile(min_tokens=1024, ttl=300.0, read=0.1, write=1.25)
COLD = {"max_tokens": 2000, "provider": PROFILE, "prefix_tokens": 1200}  # floor 750, cold over 1,600


def text(role: str, n: int) -> str:
    return hundred(role, n).content


@pytest.mark.extra("openai-agents")
async def test_a_session_folds_early_on_a_cold_cache(recorder: Any) -> None:
    from rollmem.integrations.openai_agents import RollingSession

    clock = Clock()
    session = RollingSession("s", summarize_fn=recorder, clock=clock, **COLD)
    for n in range(9):  # 1,800 tokens, the cache warm: no fold
        clock.now += 30
        await session.add_items([{"role": "user", "content": text("user", n)}])
        await session.add_items([{"role": "assistant", "content": text("assistant", n)}])
    assert recorder.calls == []
    clock.now += 301  # the cache went cold: the next request is a full write anyway
    await session.add_items([{"role": "user", "content": text("user", 9)}])
    assert len(recorder.calls) == 1
    memory = await session.get_memory()
    assert memory.stats().buffer_tokens == 900
    assert memory.buffer[0].content == text("user", 5)


@pytest.mark.extra("strands")
def test_a_conversation_manager_folds_early_on_a_cold_cache(recorder: Any) -> None:
    from strands import Agent
    from tests.integrations.test_strands import ScriptedModel

    from rollmem.integrations.strands import RollingConversationManager

    clock = Clock()
    manager = RollingConversationManager(summarize_fn=recorder, clock=clock, **COLD)
    agent = Agent(model=ScriptedModel(), callback_handler=None, conversation_manager=manager)

    def say(role: str, n: int) -> None:
        agent.messages.append({"role": role, "content": [{"text": text(role, n)}]})
        manager.apply_management(agent)  # what its hook does before each model call

    for n in range(9):
        clock.now += 30
        say("user", n)
        say("assistant", n)
    assert recorder.calls == []
    clock.now += 301
    say("user", 9)
    assert len(recorder.calls) == 1
    assert manager.memory.stats().buffer_tokens == 900


# -- where the framework stamps its messages, their timestamps are the default clock ---------------

START = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)  # long ago: the process clock plays no part
Say = Callable[[str, int, float], Awaitable[Any]]


async def converse(say: Say, recorder: Any, idle: int) -> Any:
    """Nine exchanges (1,800 tokens), a question every 30 seconds answered 5 seconds later, then a
    question ``idle`` seconds after the last answer; ``say(role, n, seconds after START)`` adds a
    message (and, for a user's, runs the integration before the model call). Returns the last."""
    for n in range(9):
        await say("user", n, 30 * n)
        await say("assistant", n, 30 * n + 5)
    assert recorder.calls == []
    return await say("user", 9, 30 * 8 + 5 + idle)


@pytest.mark.parametrize(("idle", "folds"), [(200, 0), (400, 1)])
async def test_pydantic_ai_tells_a_cold_cache_by_the_messages_timestamps(
    recorder: Any, idle: int, folds: int
) -> None:
    need("pydantic-ai", "pydantic_ai")
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    from rollmem.integrations.pydantic_ai import rolling_history

    processor = rolling_history(summarize_fn=recorder, **COLD)  # no clock given
    history: list[Any] = []

    async def say(role: str, n: int, seconds: float) -> Any:
        at = START + timedelta(seconds=seconds)
        if role == "assistant":
            history.append(ModelResponse(parts=[TextPart(text(role, n))], timestamp=at))
            return None
        history.append(ModelRequest(parts=[UserPromptPart(text(role, n), timestamp=at)]))
        return await processor(None, history)  # before the model call, as pydantic-ai calls it

    sent = await converse(say, recorder, idle)
    assert len(recorder.calls) == folds  # 205 s: still warm; 405 s: cold, and 1,900 tokens is over 4/5
    assert len(sent) == (len(history) if not folds else 10)  # the summary, then 9 messages (900 tokens)


@pytest.mark.parametrize(("idle", "folds"), [(200, 0), (400, 1)])
async def test_google_adk_tells_a_cold_cache_by_the_session_events_timestamps(
    recorder: Any, idle: int, folds: int
) -> None:
    need("google-adk", "google.adk")
    from google.adk.agents import LlmAgent
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.events import Event
    from google.adk.models.llm_request import LlmRequest
    from google.adk.sessions import InMemorySessionService, Session
    from google.genai import types

    from rollmem.integrations.google_adk import RollingMemoryPlugin

    plugin = RollingMemoryPlugin(summarize_fn=recorder, **COLD)  # no clock given
    session = Session(id="s", app_name="app", user_id="u")
    agent = LlmAgent(name="agent", model="gemini-2.5-flash")  # never called
    context = InvocationContext(
        session_service=InMemorySessionService(), invocation_id="i", agent=agent, session=session
    )

    async def say(role: str, n: int, seconds: float) -> Any:
        content = types.Content(
            role="model" if role == "assistant" else role, parts=[types.Part(text=text(role, n))]
        )
        session.events.append(Event(author=role, content=content, timestamp=START.timestamp() + seconds))
        if role == "assistant":
            return None
        request = LlmRequest(contents=[event.content.model_copy() for event in session.events])
        await plugin.before_model_callback(callback_context=CallbackContext(context), llm_request=request)
        return request

    request = await converse(say, recorder, idle)
    assert len(recorder.calls) == folds
    assert len(request.contents) == (19 if not folds else 9)  # the newest 900 tokens after a fold

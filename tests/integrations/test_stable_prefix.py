"""Issue 18 and 20 on the integrations' requests, driven for real offline: between two folds the
request each integration renders (the LangChain middleware's model request, ``RollingSession``'s
items, the pydantic-ai processor's history, the LlamaIndex block and memory) is a pure extension
of the previous one, and every request opens with a user turn and pairs its tool calls. Random
tool-calling conversations, one per seed."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from tests._optional import need, skip_unless

from provider_rules import (
    assert_gemini_accepts,
    assert_openai_accepts,
    assert_responses_accepts,
)
from rollmem import Message

SEEDS = range(6)


class Summarizer:
    """Every call gives a new summary, so a fold always shows in the request."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, summary: str, evicted: list[Message]) -> str:
        self.calls += 1
        return f"{summary} [{self.calls}: {len(evicted)} messages]".strip()


def words(text: str) -> int:
    return len(text.split())


def extends(before: list[Any], after: list[Any]) -> bool:
    return after[: len(before)] == before


# -- LangChain: RollingMemoryMiddleware in create_agent -------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_langchain_middleware_requests(seed: int) -> None:
    need("langchain", "langchain.agents")  # LangChain v1: Python 3.10+
    from langchain_core.messages import HumanMessage, SystemMessage, convert_to_openai_messages

    from rollmem.integrations.langchain import RollingMemoryMiddleware

    from .test_langchain_middleware import Chat

    rng = random.Random(seed)
    summarizer = Summarizer()
    middleware = RollingMemoryMiddleware(
        max_tokens=rng.choice([25, 50, 100]), summarize_fn=summarizer, token_counter=words
    )
    chat = Chat(middleware, thread=f"t{seed}")
    for turn in range(12):
        chat.turn(turn, calls=rng.choice([0, 1, 2, 4]), answer_words=rng.randint(0, 8))
    previous: list[Any] = []
    previous_summary = None
    for received in chat.model.received:
        assert isinstance(received[0], SystemMessage)
        rest = [m for m in received[1:] if not isinstance(m, SystemMessage)]
        assert isinstance(rest[0], HumanMessage), "the first turn is the user's"
        request = convert_to_openai_messages(received)
        assert_openai_accepts(request)
        assert_gemini_accepts(request)
        summary = received[1].content if isinstance(received[1], SystemMessage) else ""
        dumped = [m.model_dump() for m in received]
        if summary == previous_summary:
            assert extends(previous, dumped)
        previous, previous_summary = dumped, summary
    assert summarizer.calls


def test_langchain_middleware_opens_a_long_tool_chain_with_a_user_turn() -> None:
    need("langchain", "langchain.agents")  # LangChain v1: Python 3.10+
    from langchain_core.messages import AIMessage, HumanMessage

    from rollmem.adapters import CONTINUATION_TEXT
    from rollmem.integrations.langchain import RollingMemoryMiddleware

    from .test_langchain_middleware import Chat

    chat = Chat(RollingMemoryMiddleware(max_tokens=20, summarize_fn=Summarizer(), token_counter=words))
    chat.turn(0, calls=8)
    chat.turn(1, calls=8)
    opened = [
        request[2:4]
        for request in chat.model.received
        if len(request) > 3
        and isinstance(request[2], HumanMessage)
        and request[2].content == CONTINUATION_TEXT
    ]
    assert opened
    assert all(isinstance(pair[1], AIMessage) for pair in opened)


# -- OpenAI Agents SDK: RollingSession.get_items --------------------------------------------------


def agent_turn(rng: random.Random, turn: int) -> list[list[dict[str, Any]]]:
    """The batches one Runner turn adds: the question, then each tool step (parallel calls, then
    their outputs), then the answer. A request is made after each batch."""
    batches: list[list[dict[str, Any]]] = [
        [{"role": "user", "content": f"q{turn} " + "w " * rng.randint(0, 6)}]
    ]
    for step in range(rng.choice([0, 1, 2, 5])):
        ids = [f"c{turn}.{step}.{n}" for n in range(rng.randint(1, 3))]
        calls = [{"type": "function_call", "call_id": i, "name": "lookup", "arguments": "{}"} for i in ids]
        outputs = [
            {"type": "function_call_output", "call_id": i, "output": "r " * rng.randint(1, 4)} for i in ids
        ]
        batches.append(calls + outputs)
    batches.append([{"role": "assistant", "content": f"a{turn} " + "w " * rng.randint(0, 6)}])
    return batches


@pytest.mark.parametrize("seed", SEEDS)
def test_rolling_session_items(seed: int) -> None:
    skip_unless("openai-agents")
    from rollmem.integrations.openai_agents import RollingSession

    rng = random.Random(seed)
    session = RollingSession(
        "s", max_tokens=rng.choice([12, 25, 50]), summarize_fn=Summarizer(), token_counter=words
    )

    async def run() -> None:
        previous: list[dict[str, Any]] = []
        folds = 0
        for turn in range(12):
            for batch in agent_turn(rng, turn):
                await session.add_items(batch)
                items = await session.get_items()
                assert_responses_accepts(items)
                assert await session.get_items() == items
                now = (await session.get_memory()).stats().folds
                if now == folds:
                    assert extends(previous, items)
                previous, folds = items, now
        assert folds

    asyncio.run(run())


# -- pydantic-ai: the processor's history, as the model receives it --------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_pydantic_ai_histories(seed: int) -> None:
    skip_unless("pydantic-ai")
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from rollmem.integrations.pydantic_ai import rolling_history

    rng = random.Random(seed)
    summarizer = Summarizer()
    seen: list[tuple[int, Any]] = []
    plan: list[int] = []  # tool steps left in the current run

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        seen.append((summarizer.calls, ModelMessagesTypeAdapter.dump_python(messages, mode="json")))
        if plan and plan[0] > 0:
            plan[0] -= 1
            ids = [f"c{len(seen)}.{n}" for n in range(rng.randint(1, 2))]
            return ModelResponse(parts=[ToolCallPart("lookup", {"q": i}, tool_call_id=i) for i in ids])
        return ModelResponse(parts=[TextPart("done " + "w " * rng.randint(0, 5))])

    processor = rolling_history(rng.choice([10, 20, 40]), summarizer, words)
    agent = Agent(FunctionModel(model), system_prompt="Be brief.", capabilities=[ProcessHistory(processor)])

    @agent.tool_plain
    def lookup(q: str) -> str:
        return "r " * (1 + len(q) % 3)

    history = None
    for turn in range(10):
        plan[:] = [rng.choice([0, 1, 3, 6])]
        result = agent.run_sync(f"q{turn} " + "w " * rng.randint(0, 5), message_history=history)
        history = result.all_messages()
    previous: list[Any] = []
    previous_calls = -1
    for calls, messages in seen:
        kinds = [
            part["part_kind"]
            for message in messages
            for part in message["parts"]
            if message["kind"] == "request"
        ][:0]
        del kinds
        first_turn = next(
            (
                (message["kind"], part["part_kind"])
                for message in messages
                for part in (
                    message["parts"] if message["kind"] == "request" else [{"part_kind": "response"}]
                )
                if part["part_kind"] not in ("system-prompt", "compaction")
            ),
            None,
        )
        assert first_turn == ("request", "user-prompt"), first_turn
        if calls == previous_calls:
            assert extends(previous, messages)
        previous, previous_calls = messages, calls
    assert summarizer.calls


# -- LlamaIndex: the block's text and the memory's messages ---------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_llama_index_memory(seed: int) -> None:
    skip_unless("llama-index")
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.memory import Memory

    from rollmem.integrations.llama_index import RollingSummaryBlock

    rng = random.Random(seed)
    summarizer = Summarizer()
    block = RollingSummaryBlock(summarize_fn=summarizer)
    loop = asyncio.new_event_loop()
    try:
        memory = Memory.from_defaults(
            session_id=f"s{seed}",
            memory_blocks=[block],
            tokenizer_fn=str.split,
            token_limit=rng.choice([40, 80]),
            chat_history_token_ratio=0.5,
            token_flush_size=10,
        )
        previous: list[Any] = []
        folds = 0
        for turn in range(15):
            for role in ("user", "assistant"):
                text = f"{role[0]}{turn} " + "w " * rng.randint(0, 8)
                loop.run_until_complete(memory.aput(ChatMessage(role=role, content=text)))
                messages = [m.model_dump() for m in loop.run_until_complete(memory.aget())]
                assert loop.run_until_complete(memory.aget()) is not None
                if summarizer.calls == folds:
                    assert extends(previous, messages)
                previous, folds = messages, summarizer.calls
        assert summarizer.calls
        engine = getattr(memory.sql_store, "_async_engine", None)
        if engine is not None:
            loop.run_until_complete(engine.dispose())
    finally:
        loop.close()

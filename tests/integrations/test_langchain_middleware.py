"""RollingMemoryMiddleware driven through a real ``create_agent`` graph, offline.

The model is langchain-core's ``GenericFakeChatModel`` answering from a script (tool calls, then an
answer) and recording what it receives; the tool is a real ``@tool``; state goes through a real
``InMemorySaver``. An outer spy middleware records the request the agent built, so a test can
check the model got the very message objects of the state.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from tests._optional import need

need("langchain", "langchain.agents")
need("langchain", "langgraph.checkpoint.memory")

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import AgentMiddleware, SummarizationMiddleware  # noqa: E402
from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph.message import REMOVE_ALL_MESSAGES  # noqa: E402
from pydantic import Field  # noqa: E402
from tests.conftest import CountingWords as CountingCounter  # noqa: E402

from rollmem import Message, RollingMemory  # noqa: E402
from rollmem.adapters import CONTINUATION_TEXT, CONTINUATION_TEXT_PLAIN  # noqa: E402
from rollmem.adapters.langchain import from_langchain  # noqa: E402
from rollmem.errors import InvalidStateError  # noqa: E402
from rollmem.integrations.langchain import (  # noqa: E402
    CURSOR_KEY,
    SUMMARY_KEY,
    RollingMemoryMiddleware,
    langchain_summarizer,
)

SYSTEM_PROMPT = "You are a terse weather assistant."
DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "pages" / "integrations" / "langchain.md"
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
]


# SummarizationMiddleware(summarizer=...) is new in langchain 1.5.
HAS_SUMMARIZER_PARAMETER = "summarizer" in inspect.signature(SummarizationMiddleware.__init__).parameters
needs_summarizer_parameter = pytest.mark.skipif(
    not HAS_SUMMARIZER_PARAMETER, reason="this langchain's SummarizationMiddleware takes no summarizer"
)


def words(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed + i) % len(WORDS)] for i in range(n))


@tool
def lookup(city: str) -> str:
    """The weather report for a city."""
    return f"report for {city}: " + words(3 + len(city) % 5, len(city))


class ScriptedModel(GenericFakeChatModel):
    """Answers with the next scripted message; records the messages of every call."""

    received: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.received.append(list(messages))
        return super()._generate(messages, *args, **kwargs)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


class Spy(AgentMiddleware):
    """The outermost middleware: records the messages of each request before any other sees it."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[list[BaseMessage]] = []

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        self.requests.append(list(request.messages))
        return handler(request)

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        self.requests.append(list(request.messages))
        return await handler(request)


class Chat:
    """One agent thread: ``turn(i, calls)`` sends a question; the model makes ``calls`` tool-call
    steps (the odd ones with two parallel calls), then answers."""

    def __init__(
        self,
        middleware: Any,
        *,
        checkpointer: Optional[InMemorySaver] = None,
        thread: str = "thread-1",
    ) -> None:
        self.script: deque[AIMessage] = deque()
        self.model = ScriptedModel(messages=iter(self.script.popleft, None))
        self.spy = Spy()
        self.checkpointer = checkpointer if checkpointer is not None else InMemorySaver()
        self.agent = create_agent(
            self.model,
            [lookup],
            system_prompt=SYSTEM_PROMPT,
            middleware=[self.spy, middleware],
            checkpointer=self.checkpointer,
        )
        self.config: Any = {"configurable": {"thread_id": thread}}

    def _plan(self, i: int, calls: int, answer_words: int) -> HumanMessage:
        for step in range(calls):
            cities = [f"city{i}x{step}", f"town{i}y{step}"][: 1 + step % 2]
            tool_calls = [
                {"name": "lookup", "args": {"city": city}, "id": f"call-{i}-{step}-{n}"}
                for n, city in enumerate(cities)
            ]
            self.script.append(AIMessage(content=words(step % 3, i), tool_calls=tool_calls))
        self.script.append(AIMessage(content=f"answer {i}: " + words(answer_words, i)))
        return HumanMessage(content=f"question {i}: " + words(2 + i % 7, i))

    def turn(self, i: int, calls: int = 1, answer_words: int = 6) -> dict[str, Any]:
        question = self._plan(i, calls, answer_words)
        result: dict[str, Any] = self.agent.invoke({"messages": [question]}, self.config)
        return result

    async def aturn(self, i: int, calls: int = 1, answer_words: int = 6) -> dict[str, Any]:
        question = self._plan(i, calls, answer_words)
        result: dict[str, Any] = await self.agent.ainvoke({"messages": [question]}, self.config)
        return result

    def state(self) -> dict[str, Any]:
        values: dict[str, Any] = self.agent.get_state(self.config).values
        return values


def cost(messages: Sequence[BaseMessage], counter: Callable[[str], int]) -> int:
    return sum(counter(m.token_text()) for m in from_langchain(messages))


def units(buffer: Sequence[BaseMessage]) -> list[list[BaseMessage]]:
    """Agent-shaped units: a message, plus the tool results that follow it."""
    result: list[list[BaseMessage]] = []
    for message in buffer:
        if isinstance(message, ToolMessage) and result:
            result[-1].append(message)
        else:
            result.append([message])
    return result


def is_reply(message: BaseMessage) -> bool:
    return isinstance(message, (AIMessage, ToolMessage))


def split_view(received: list[BaseMessage]) -> tuple[str, list[BaseMessage]]:
    """(summary, buffer) of what the model got, after checking the system prompt comes first."""
    assert isinstance(received[0], SystemMessage)
    assert received[0].content == SYSTEM_PROMPT
    rest = received[1:]
    summary = ""
    if rest and isinstance(rest[0], SystemMessage):
        summary, rest = str(rest[0].content), rest[1:]
    # the provider rule: the first turn is the user's, an opening turn inserted when needed
    assert not rest or isinstance(rest[0], HumanMessage)
    opening = CONTINUATION_TEXT if summary else CONTINUATION_TEXT_PLAIN
    if (
        len(rest) > 1
        and isinstance(rest[0], HumanMessage)
        and rest[0].id is None
        and rest[0].content == opening
    ):
        assert not isinstance(rest[1], HumanMessage)
        rest = rest[1:]
    return summary, rest


def check_view(
    received: list[BaseMessage],
    max_tokens: int,
    counter: Callable[[str], int],
    pinned: Callable[[BaseMessage], bool] = lambda m: False,
    folded: bool = False,
) -> tuple[str, list[BaseMessage]]:
    """The invariants of one model call (``folded``: a fold ran just before it); returns
    (summary, buffer)."""
    summary, buffer = split_view(received)
    assert not any(isinstance(m, SystemMessage) for m in buffer)
    # Units whole: every result has its call before it, every call its results.
    issued: set[str] = set()
    for message in buffer:
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in issued, "orphan ToolMessage"
        if isinstance(message, AIMessage):
            issued.update(call["id"] for call in message.tool_calls if call["id"])
    assert issued <= {m.tool_call_id for m in buffer if isinstance(m, ToolMessage)}
    # Within budget, unless all that stays is the newest unit (and pinned units).
    groups = units(buffer)
    if cost(buffer, counter) > max_tokens:
        assert all(any(pinned(m) for m in group) for group in groups[:-1])
    # Alignment, right after a cut (a buffer within budget is never touched, so later questions
    # do not move it): a reply opens the buffer only when every unit head up to the newest is one.
    free = [group for group in groups if not any(pinned(m) for m in group)]
    if folded and free and is_reply(free[0][0]):
        assert all(is_reply(group[0]) for group in free)
    return summary, buffer


def ids(messages: Sequence[Any]) -> list[Any]:
    return [m.id for m in messages]


# -- construction -------------------------------------------------------------------------------


def test_arguments_are_checked_as_rolling_memory_checks_them() -> None:
    with pytest.raises(ValueError, match="max_tokens must be > 0, got 0"):
        RollingMemoryMiddleware(0)
    with pytest.raises(TypeError, match="max_tokens: expected int, got str"):
        RollingMemoryMiddleware("10")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"target_tokens must be <= max_tokens \(10\), got 11"):
        RollingMemoryMiddleware(10, target_tokens=11)
    with pytest.raises(TypeError, match="summarize_fn: expected a callable or None, got str"):
        RollingMemoryMiddleware(10, "summarize")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="token_counter: expected a callable or None, got int"):
        RollingMemoryMiddleware(10, None, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pin: expected a callable or None, got str"):
        RollingMemoryMiddleware(10, pin="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="summary_message: expected a callable or None, got int"):
        RollingMemoryMiddleware(10, summary_message=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="prune_folded: expected bool, got int"):
        RollingMemoryMiddleware(10, prune_folded=1)  # type: ignore[arg-type]


def test_the_default_fold_is_the_cache_aware_one() -> None:
    assert RollingMemoryMiddleware().target_tokens is None  # the cache-aware fold (test_defaults.py)
    assert RollingMemoryMiddleware(4000, target_tokens=4000).target_tokens == 4000


# -- what the model sees ------------------------------------------------------------------------


def test_model_gets_system_prompt_then_summary_then_newest_originals(
    recorder: Any, word_counter: Any
) -> None:
    chat = Chat(RollingMemoryMiddleware(40, recorder, word_counter))
    for i in range(8):
        chat.turn(i, calls=1 + i % 2)
    state = chat.state()
    assert recorder.calls, "the budget was exceeded, so something folded"
    by_id = {m.id: m for m in state["messages"]}
    summaries = [""] + [r for r in recorder.results if r is not None]
    for received, request in zip(chat.model.received, chat.spy.requests):
        summary, buffer = check_view(received, 40, word_counter)
        assert summary in summaries
        # The originals: the very objects of the request the agent built, and the stored messages.
        request_objects = {id(m) for m in request}
        assert all(id(m) in request_objects for m in buffer)
        assert all(by_id[m.id] == m for m in buffer)
        # The newest messages: the buffer is a tail of the state (no pins here).
        assert ids(buffer) == ids(request[len(request) - len(buffer) :])
    assert summary == state[SUMMARY_KEY] == recorder.results[-1]
    # One summarizer call per fold, each before a model call: every new summary was seen once.
    shown = {split_view(received)[0] for received in chat.model.received} - {""}
    assert len(recorder.calls) == len(shown) == len(set(recorder.results))
    assert len(chat.model.received) == len(chat.spy.requests) == 8 + sum(1 + i % 2 for i in range(8))


def test_state_keeps_the_full_history_by_default(recorder: Any, word_counter: Any) -> None:
    chat = Chat(RollingMemoryMiddleware(40, recorder, word_counter))
    for i in range(6):
        result = chat.turn(i)
    state = chat.state()
    assert len(state["messages"]) == 6 * 4  # question, tool call, tool result, answer
    assert result[SUMMARY_KEY] == state[SUMMARY_KEY]
    assert CURSOR_KEY not in result  # private: not in the agent's output
    # Every message that left the model's view went to the summarizer once, in order.
    _, buffer = split_view(chat.model.received[-1])
    folded = [m.id for m in recorder.folded]
    assert folded == [m.id for m in state["messages"] if m.id not in set(ids(buffer))][: len(folded)]
    assert len(folded) == len(set(folded))


def test_no_summarizer_drops_what_leaves_the_view(word_counter: Any) -> None:
    chat = Chat(RollingMemoryMiddleware(30, token_counter=word_counter))
    for i in range(6):
        chat.turn(i)
    for received in chat.model.received:
        summary, _ = check_view(received, 30, word_counter)
        assert summary == ""
    assert chat.state()[SUMMARY_KEY] == ""
    assert len(chat.state()["messages"]) == 24


def test_summary_message_can_be_another_message(recorder: Any, word_counter: Any) -> None:
    middleware = RollingMemoryMiddleware(
        30, recorder, word_counter, summary_message=lambda s: HumanMessage(content=f"Earlier: {s}")
    )
    chat = Chat(middleware)
    for i in range(5):
        chat.turn(i)
    last = chat.model.received[-1]
    assert isinstance(last[1], HumanMessage)
    assert last[1].content == f"Earlier: {recorder.results[-1]}"


def test_summary_message_must_return_a_message(recorder: Any, word_counter: Any) -> None:
    chat = Chat(RollingMemoryMiddleware(30, recorder, word_counter, summary_message=lambda s: s))
    chat.turn(0)
    long_question = HumanMessage(content="question 1: " + words(40, 1))  # over budget alone: a fold
    with pytest.raises(TypeError, match="summary_message returned str; expected a BaseMessage"):
        chat.agent.invoke({"messages": [long_question]}, chat.config)


def test_newest_unit_stays_even_over_budget(recorder: Any, word_counter: Any) -> None:
    chat = Chat(RollingMemoryMiddleware(10, recorder, word_counter))
    chat.turn(0, calls=0, answer_words=30)
    chat.turn(1, calls=2)
    for received in chat.model.received:
        check_view(received, 10, word_counter)
    # The last call: a tool-call unit over 10 words alone, kept whole; the question before it folded.
    _, buffer = split_view(chat.model.received[-1])
    assert [type(m).__name__ for m in buffer] == ["AIMessage", "ToolMessage", "ToolMessage"]
    assert cost(buffer, word_counter) > 10


def test_a_reply_opens_the_view_only_when_every_unit_up_to_the_newest_is_one(
    recorder: Any, word_counter: Any
) -> None:
    """The core's alignment rule, unchanged: inside one long agent turn whose question must go,
    the cost-based cut stands (the question is in the summary)."""
    chat = Chat(RollingMemoryMiddleware(25, recorder, word_counter))
    chat.turn(0, calls=5)
    views = [check_view(received, 25, word_counter, folded=True)[1] for received in chat.model.received[1:]]
    assert isinstance(views[-1][0], AIMessage)
    assert views[-1][0].tool_calls
    assert recorder.folded[0].content.startswith("question 0")


# -- the same rules as RollingMemory --------------------------------------------------------------


def run_against_reference(
    chat: Chat,
    turns: Callable[[Chat, int], None],
    count: int,
    reference: RollingMemory,
    recorder: Any,
    max_tokens: int,
    counter: Callable[[str], int],
    pin: Callable[[BaseMessage], bool] = lambda m: False,
) -> None:
    """Run ``count`` turns; after each, replay the new messages of every model call into a plain
    RollingMemory and require the model saw exactly its summary and buffer."""
    fed = 0
    seen = 0
    for i in range(count):
        turns(chat, i)
        for received, request in zip(chat.model.received[seen:], chat.spy.requests[seen:]):
            new = [replace(m, pinned=pin(o)) for m, o in zip(from_langchain(request[fed:]), request[fed:])]
            folds = reference.stats().folds
            reference.extend(new)
            fed = len(request)
            folded = reference.stats().folds > folds
            summary, buffer = check_view(received, max_tokens, counter, pin, folded)
            assert summary == reference.summary
            assert ids(buffer) == ids(reference.buffer)
        seen = len(chat.model.received)
    folded = [m.id for m in recorder.folded]
    assert len(folded) == len(set(folded)), "a message was summarized twice"


def test_200_turn_agent_conversation_stays_in_budget_and_summarizes_each_message_once(
    make_recorder: Any, word_counter: Any
) -> None:
    """The acceptance check: 200 turns with tool calls, over budget many times."""
    recorder = make_recorder()
    reference_recorder = make_recorder()
    chat = Chat(RollingMemoryMiddleware(60, recorder, word_counter, target_tokens=35))
    reference = RollingMemory(60, reference_recorder, word_counter, target_tokens=35)

    def turn(chat: Chat, i: int) -> None:
        chat.turn(i, calls=i % 3, answer_words=3 + i % 11)

    run_against_reference(chat, turn, 200, reference, recorder, 60, word_counter)
    assert len(recorder.calls) > 50
    assert recorder.texts == reference_recorder.texts
    # Every message that left the view was summarized exactly once, in order, and nothing else was.
    request = chat.spy.requests[-1]
    _, buffer = split_view(chat.model.received[-1])
    assert [m.id for m in recorder.folded] == ids(request[: len(request) - len(buffer)])


def test_pinned_messages_stay_in_view_and_are_never_summarized(make_recorder: Any, word_counter: Any) -> None:
    def pin(message: BaseMessage) -> bool:
        return isinstance(message.content, str) and message.content.startswith(
            ("question 3:", "question 11:")
        )

    recorder = make_recorder()
    chat = Chat(RollingMemoryMiddleware(70, recorder, word_counter, target_tokens=50, pin=pin))
    reference = RollingMemory(70, make_recorder(), word_counter, target_tokens=50)

    def turn(chat: Chat, i: int) -> None:
        chat.turn(i, calls=i % 2)

    run_against_reference(chat, turn, 30, reference, recorder, 70, word_counter, pin)
    _, buffer = split_view(chat.model.received[-1])
    pinned = [m.content for m in buffer if pin(m)]
    assert [text.split(":")[0] for text in pinned] == ["question 3", "question 11"]
    assert not any(pin(m) for m in chat.state()["messages"] if m.id in {f.id for f in recorder.folded})
    assert len(chat.state()[CURSOR_KEY]["pinned"]) == 2


# -- state and checkpoints ------------------------------------------------------------------------


def test_prune_folded_bounds_the_state_and_changes_nothing_the_model_sees(
    make_recorder: Any, word_counter: Any
) -> None:
    full_recorder, pruned_recorder = make_recorder(), make_recorder()
    full = Chat(RollingMemoryMiddleware(50, full_recorder, word_counter))
    pruned = Chat(RollingMemoryMiddleware(50, pruned_recorder, word_counter, prune_folded=True))
    sizes = []
    for i in range(40):
        full.turn(i, calls=i % 3)
        pruned.turn(i, calls=i % 3)
        state = pruned.state()
        sizes.append(len(state["messages"]))
        _, buffer = split_view(pruned.model.received[-1])
        # The state holds the model's buffer plus what came after the last model call (the answer).
        assert ids(state["messages"][: len(buffer)]) == ids(buffer)
    assert [[(type(m), m.content) for m in r] for r in full.model.received] == [
        [(type(m), m.content) for m in r] for r in pruned.model.received
    ]
    assert full_recorder.texts == pruned_recorder.texts
    assert max(sizes) < 20 < len(full.state()["messages"])


def test_a_new_agent_on_the_same_checkpointer_continues_without_summarizing_again(
    make_recorder: Any, word_counter: Any
) -> None:
    saver = InMemorySaver()
    first_recorder, second_recorder = make_recorder(), make_recorder()
    first = Chat(RollingMemoryMiddleware(40, first_recorder, word_counter), checkpointer=saver)
    for i in range(6):
        first.turn(i)
    summary = first.state()[SUMMARY_KEY]
    assert summary == first_recorder.results[-1]

    second = Chat(RollingMemoryMiddleware(40, second_recorder, word_counter), checkpointer=saver)
    second.turn(6)
    received = second.model.received[0]
    assert split_view(received)[0] == summary  # the persisted summary, before any new fold
    for i in range(7, 12):
        second.turn(i)
    assert second_recorder.calls[0][0] == summary
    first_ids = {m.id for m in first_recorder.folded}
    assert not first_ids & {m.id for m in second_recorder.folded}
    request = second.spy.requests[-1]
    _, buffer = split_view(second.model.received[-1])
    everything = [m.id for m in first_recorder.folded] + [m.id for m in second_recorder.folded]
    assert everything == ids(request[: len(request) - len(buffer)])


def collect(chat: Chat, seen: dict[str, str]) -> None:
    """Add the state's messages not in ``seen`` (id -> token text), in order."""
    messages = chat.state()["messages"]
    for message, converted in zip(messages, from_langchain(messages)):
        seen.setdefault(message.id, converted.token_text())


@pytest.mark.parametrize("prune", [False, True])
def test_each_message_is_counted_once_per_thread_across_restarts(make_recorder: Any, prune: bool) -> None:
    """A model call counts only the messages added since the last one; after a restart, only
    those added since the last fold (the cursor keeps the costs of what a fold kept, with the
    counter's identity)."""
    saver = InMemorySaver()
    counter = CountingCounter()
    recorder = make_recorder()
    first = Chat(
        RollingMemoryMiddleware(50, recorder, counter, target_tokens=30, prune_folded=prune),
        checkpointer=saver,
    )
    everything: dict[str, str] = {}
    for i in range(20):
        first.turn(i, calls=i % 3)
        collect(first, everything)
    assert len(recorder.calls) > 5
    # Each message once, in order; the last answer not yet (no model call came after it).
    assert counter.texts == list(everything.values())[:-1]
    assert first.state()[CURSOR_KEY]["counter"] == "test-words"

    second_counter = CountingCounter()
    second = Chat(
        RollingMemoryMiddleware(50, make_recorder(), second_counter, target_tokens=30, prune_folded=prune),
        checkpointer=saver,
    )
    cursor = second.state()[CURSOR_KEY]
    messages = second.state()["messages"][:-1]  # the last answer: counted at the next model call
    since_fold = [m.token_text() for m in from_langchain(messages[cursor["folded"] + len(cursor["costs"]) :])]
    counted = len(everything) - 1
    for i in range(20, 24):
        second.turn(i, calls=i % 3)
        collect(second, everything)
    assert since_fold  # the messages added since the last fold, counted once more
    assert second_counter.texts == since_fold + list(everything.values())[counted:-1]


def test_a_counter_without_identity_recounts_only_after_a_restart(make_recorder: Any) -> None:
    texts: list[str] = []

    def counter(text: str) -> int:
        texts.append(text)
        return len(text.split())

    saver = InMemorySaver()
    chat = Chat(RollingMemoryMiddleware(50, make_recorder(), counter, target_tokens=30), checkpointer=saver)
    everything: dict[str, str] = {}
    for i in range(10):
        chat.turn(i, calls=i % 3)
        collect(chat, everything)
    assert texts == list(everything.values())[:-1]  # the live memory: each message once
    assert chat.state()[CURSOR_KEY]["counter"].startswith("process:")  # this object's, in this process
    texts.clear()
    before = chat.state()["messages"]
    start = ids(before).index(chat.state()[CURSOR_KEY]["first"])
    restarted = Chat(
        RollingMemoryMiddleware(50, make_recorder(), counter, target_tokens=30), checkpointer=saver
    )
    restarted.turn(10)
    # Unknown counter: the stored costs are not trusted, the buffer is counted once more.
    buffer = restarted.state()["messages"][start : len(before) + 1]
    assert texts[: len(buffer)] == [m.token_text() for m in from_langchain(buffer)]


def test_removing_the_first_unfolded_message_re_anchors_and_says_so(
    make_recorder: Any, word_counter: Any, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = make_recorder()
    chat = Chat(RollingMemoryMiddleware(40, recorder, word_counter))
    for i in range(6):
        chat.turn(i)
    start = chat.state()[CURSOR_KEY]["first"]
    _, buffer = split_view(chat.model.received[-1])
    assert buffer[0].id == start
    folded_before = [m.id for m in recorder.folded]
    summary_before, calls_before = chat.state()[SUMMARY_KEY], len(recorder.calls)
    chat.agent.update_state(chat.config, {"messages": [RemoveMessage(id=start)]})
    with caplog.at_level(logging.WARNING, logger="rollmem"):
        chat.turn(6)
    assert f"the first unfolded message {start!r} is no longer in the state" in caplog.text
    assert "re-anchored" in caplog.text
    summary, view = split_view(chat.model.received[-1])
    assert start not in ids(view)
    assert not set(ids(view)) & set(folded_before)  # nothing folded comes back
    if len(recorder.calls) > calls_before:  # the next fold starts from the kept summary
        assert recorder.calls[calls_before][0] == summary_before
    else:
        assert summary == summary_before
    for i in range(7, 12):
        chat.turn(i)
    folded = [m.id for m in recorder.folded]
    assert len(folded) == len(set(folded)), "a message was summarized twice"
    assert start not in folded


def test_removing_every_message_starts_over_keeping_the_summary(
    recorder: Any, word_counter: Any, caplog: pytest.LogCaptureFixture
) -> None:
    chat = Chat(RollingMemoryMiddleware(40, recorder, word_counter))
    for i in range(6):
        chat.turn(i)
    summary = chat.state()[SUMMARY_KEY]
    assert summary
    chat.agent.update_state(chat.config, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)]})
    with caplog.at_level(logging.WARNING, logger="rollmem"):
        chat.turn(6)
    assert "starting over from the messages in the state, keeping the summary" in caplog.text
    shown, view = split_view(chat.model.received[-2])
    assert shown == summary
    assert [m.content for m in view] == [chat.state()["messages"][0].content]
    for i in range(7, 12):
        chat.turn(i)
    folded = [m.id for m in recorder.folded]
    assert len(folded) == len(set(folded))


def test_summarizer_failure_leaves_the_rolling_state_and_the_next_run_retries(
    recorder: Any, word_counter: Any
) -> None:
    chat = Chat(RollingMemoryMiddleware(40, recorder, word_counter))
    for i in range(4):
        chat.turn(i)
    before = chat.state()
    folds = len(recorder.results)
    recorder.fail = True
    long_question = HumanMessage(content="question 4: " + words(30, 4))  # over budget alone
    with pytest.raises(RuntimeError, match="summarizer down"):
        chat.agent.invoke({"messages": [long_question]}, chat.config)
    after = chat.state()
    assert after[SUMMARY_KEY] == before[SUMMARY_KEY]
    assert after[CURSOR_KEY] == before[CURSOR_KEY]
    assert ids(after["messages"][:-1]) == ids(before["messages"])  # only the new question was added
    failed_batch = recorder.calls[-1][1]

    recorder.fail = False
    chat.turn(5)
    retry_summary, retry_batch = recorder.calls[folds + 1]
    assert retry_summary == before[SUMMARY_KEY]
    assert [m.id for m in retry_batch[: len(failed_batch)]] == [m.id for m in failed_batch]
    folded = [m.id for m in recorder.folded]
    assert len(folded) == len(set(folded))
    for received in chat.model.received:
        check_view(received, 40, word_counter)


def test_sync_invoke_with_a_coroutine_summarizer_raises(async_recorder: Any, word_counter: Any) -> None:
    chat = Chat(RollingMemoryMiddleware(40, async_recorder.summarize, word_counter))
    with pytest.raises(TypeError, match="summarize_fn is a coroutine function: run the agent with ainvoke"):
        chat.turn(0)


def test_ainvoke_with_an_async_summarizer(make_async_recorder: Any, word_counter: Any) -> None:
    recorder = make_async_recorder()
    chat = Chat(RollingMemoryMiddleware(45, recorder.summarize, word_counter, target_tokens=30))
    reference = RollingMemory(45, make_async_recorder(), word_counter, target_tokens=30)

    async def main() -> None:
        for i in range(25):
            await chat.aturn(i, calls=i % 3)

    asyncio.run(main())
    assert len(recorder.calls) > 5
    fed = 0
    for received, request in zip(chat.model.received, chat.spy.requests):
        summary, buffer = check_view(received, 45, word_counter)
        reference.extend(from_langchain(request[fed:]))
        fed = len(request)
        assert (summary, ids(buffer)) == (reference.summary, ids(reference.buffer))
    folded = [m.id for m in recorder.folded]
    assert len(folded) == len(set(folded))


def test_unconvertible_content_raises_naming_the_state_position(recorder: Any, word_counter: Any) -> None:
    chat = Chat(RollingMemoryMiddleware(40, recorder, word_counter))
    chat.turn(0)
    image = HumanMessage(content=[{"type": "image", "url": "https://example.invalid/cat.png"}])
    with pytest.raises(InvalidStateError, match=r"^messages\[4\]\.content\[0\]\.type: unsupported part type"):
        chat.agent.invoke({"messages": [image]}, chat.config)


@pytest.mark.parametrize(
    ("cursor", "error"),
    [
        (
            {"version": 1, "summary": "", "costs": ["3"]},
            r"^rollmem_cursor\.costs\[0\]: expected an int >= 0, got '3'",
        ),
        (
            {"version": 1, "summary": "", "costs": [-1]},
            r"^rollmem_cursor\.costs\[0\]: expected an int >= 0, got -1",
        ),
        ({"version": 1, "summary": "", "first": 7}, r"^rollmem_cursor\.first: expected str or null, got int"),
        (
            {"version": 1, "summary": "", "pinned": [3]},
            r"^rollmem_cursor\.pinned\[0\]: expected \[int, str\], got 3",
        ),
        ({"version": 2, "summary": ""}, r"^rollmem_cursor\.version: unsupported state version 2"),
        ("start", r"^rollmem_cursor: expected a mapping, got str"),
    ],
)
def test_a_damaged_cursor_raises_naming_the_field(
    cursor: Any, error: str, recorder: Any, word_counter: Any
) -> None:
    chat = Chat(RollingMemoryMiddleware(40, recorder, word_counter))
    chat.turn(0)
    chat.agent.update_state(chat.config, {CURSOR_KEY: cursor})
    with pytest.raises(InvalidStateError, match=error):
        chat.turn(1)


def test_a_message_replaced_by_id_is_summarized_as_it_is_now(make_recorder: Any, word_counter: Any) -> None:
    """An app redacts a message of the thread (``update_state`` replacing it by id) two turns
    before it folds: the summarizer, the saved summary and every later request see the redacted
    text, never the old one; no turn is lost."""
    recorder = make_recorder()
    chat = Chat(RollingMemoryMiddleware(60, recorder, word_counter, target_tokens=30))
    card = HumanMessage(content="question 0: my card is 4111 1111 1111 1111", id="card-turn")
    chat._plan(0, 0, 6)
    chat.agent.invoke({"messages": [card]}, chat.config)
    chat.turn(1, calls=0)
    assert not recorder.calls
    redacted = HumanMessage(content="question 0: my card is [redacted]", id="card-turn")
    chat.agent.update_state(chat.config, {"messages": [redacted]})
    for i in range(2, 8):
        chat.turn(i, calls=0)
    folded = list(recorder.folded)
    assert "question 0: my card is [redacted]" in [m.content for m in folded]
    assert all("4111" not in m.content for m in folded)
    assert "4111" not in chat.state()[SUMMARY_KEY]
    assert all("4111" not in str(m.content) for received in chat.model.received[3:] for m in received)
    assert [m.id for m in folded] == ids(chat.state()["messages"][: len(folded)])  # in order, none lost


class FoldRuns(BaseCallbackHandler):
    """A LangChain callback handler recording the ``rollmem.fold`` runs."""

    def __init__(self) -> None:
        self.started: list[dict[str, Any]] = []
        self.ended: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self.parents: list[Any] = []
        self.runs: set[Any] = set()

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        if kwargs.get("name") == "rollmem.fold":
            self.runs.add(kwargs["run_id"])
            self.started.append(dict(inputs))
            self.parents.append(kwargs.get("parent_run_id"))

    def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
        if kwargs["run_id"] in self.runs:
            self.ended.append(dict(outputs))

    def on_chain_error(self, error: BaseException, **kwargs: Any) -> None:
        if kwargs["run_id"] in self.runs:
            self.errors.append(error)


# Before Python 3.11 asyncio tasks take no context, so LangGraph cannot hand an async node the
# run's callbacks (LangChain documents passing config by hand there): no fold run to record.
AINVOKE_CALLBACKS = pytest.param(
    True,
    id="ainvoke",
    marks=pytest.mark.skipif(
        sys.version_info < (3, 11),
        reason="LangGraph propagates callbacks to async nodes from Python 3.11",
    ),
)


@pytest.mark.parametrize("asynchronous", [pytest.param(False, id="invoke"), AINVOKE_CALLBACKS])
def test_each_fold_is_a_run_in_langchains_callbacks(
    make_recorder: Any, word_counter: Any, asynchronous: bool
) -> None:
    runs = FoldRuns()
    recorder = make_recorder()
    chat = Chat(RollingMemoryMiddleware(40, recorder, word_counter))
    chat.config = {**chat.config, "callbacks": [runs]}
    for i in range(6):
        if asynchronous:
            asyncio.run(chat.aturn(i, calls=0))
        else:
            chat.turn(i, calls=0)
    assert len(runs.started) == len(runs.ended) == len(recorder.calls) > 0
    assert all(parent is not None for parent in runs.parents)  # inside the agent's run
    for started, ended, (_, evicted), summary in zip(
        runs.started, runs.ended, recorder.calls, recorder.results
    ):
        assert started["rollmem.fold.messages"] == len(evicted)
        assert started["rollmem.fold.tokens_before"] > started["rollmem.fold.tokens_after"] >= 0
        assert started["rollmem.fold.tokens_before"] - started["rollmem.fold.tokens_after"] == sum(
            word_counter(m.token_text()) for m in evicted
        )
        assert ended["rollmem.fold.summary_tokens"] == word_counter(summary or "")
        assert all(isinstance(value, int) for value in {**started, **ended}.values())
    recorder.fail = True
    with pytest.raises(RuntimeError, match="summarizer down"):
        chat.turn(6, calls=0, answer_words=40)
    assert len(runs.errors) == 1


# -- LangChain's own SummarizationMiddleware ----------------------------------------------------


@needs_summarizer_parameter
def test_langchain_summarizer_splits_the_summary_message_back(recorder: Any) -> None:
    chat = Chat(
        SummarizationMiddleware(
            GenericFakeChatModel(messages=iter(())),
            trigger=("messages", 8),
            keep=("messages", 3),
            summarizer=langchain_summarizer(recorder),
            trim_tokens_to_summarize=None,
        )
    )
    for i in range(10):
        chat.turn(i)
    assert len(recorder.calls) >= 3
    assert recorder.calls[0][0] == ""
    for (summary, _), previous in zip(recorder.calls[1:], recorder.results):
        assert summary == previous  # the previous summary, without LangChain's prefix
    folded = [m.id for m in recorder.folded]
    assert len(folded) == len(set(folded))
    assert all(isinstance(m, Message) and m.id for m in recorder.folded)
    assert not any(m.content.startswith("Here is a summary") for m in recorder.folded)
    # Every message LangChain removed from the state reached the summarizer once, in order.
    kept = {m.id for m in chat.state()["messages"]}
    asked = [m.id for request in chat.spy.requests for m in request]
    removed = list(dict.fromkeys(i for i in asked if i not in kept and i not in _summary_ids(chat)))
    assert folded == removed


def _summary_ids(chat: Chat) -> set[Any]:
    return {
        m.id
        for request in chat.spy.requests
        for m in request
        if m.additional_kwargs.get("lc_source") == "summarization"
    }


@needs_summarizer_parameter
def test_langchain_summarizer_async(make_async_recorder: Any) -> None:
    recorder = make_async_recorder()
    summarizer = langchain_summarizer(recorder.summarize)
    assert asyncio.iscoroutinefunction(summarizer)
    chat = Chat(
        SummarizationMiddleware(
            GenericFakeChatModel(messages=iter(())),
            trigger=("messages", 8),
            keep=("messages", 3),
            summarizer=summarizer,
            trim_tokens_to_summarize=None,
        )
    )

    async def main() -> None:
        for i in range(6):
            await chat.aturn(i)

    asyncio.run(main())
    assert len(recorder.calls) >= 2
    assert recorder.calls[1][0] == recorder.results[0]


def test_langchain_summarizer_rejects_a_non_callable() -> None:
    with pytest.raises(TypeError, match="summarize_fn: expected a callable, got None"):
        langchain_summarizer(None)  # type: ignore[arg-type]


# -- the documentation page -----------------------------------------------------------------------


def test_docs_page_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = DOCS_PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert blocks
    assert blocks[0].splitlines()[0] == "# needs: langchain"
    monkeypatch.chdir(tmp_path)
    for number, code in enumerate(blocks):
        if "SummarizationMiddleware(" in code and not HAS_SUMMARIZER_PARAMETER:
            continue
        exec(compile(code, f"{DOCS_PAGE.name}:block{number}", "exec"), {"__name__": "__docs__"})

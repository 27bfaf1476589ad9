"""RollingCompaction driven by a real Agent Framework agent, offline, with a scripted chat client
(a subclass of the framework's BaseChatClient with its function-invocation layer: the framework
runs the tools, the history provider and the compaction)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any, Optional

import pytest
from tests._optional import need

af = need("agent-framework", "agent_framework")

from agent_framework import (  # noqa: E402
    Agent,
    AgentSession,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    ContextProvider,
    FunctionInvocationLayer,
    InMemoryHistoryProvider,
    Message,
    tool,
)
from tests.conftest import CountingWords  # noqa: E402

from rollmem.adapters import CONTINUATION_TEXT  # noqa: E402
from rollmem.errors import InvalidStateError  # noqa: E402
from rollmem.integrations import agent_framework as agent_framework_module  # noqa: E402
from rollmem.integrations.agent_framework import (  # noqa: E402
    DEFAULT_MAX_TOKENS,
    SUMMARY_MARKER,
    RollingCompaction,
)
from rollmem.message import Message as RMessage  # noqa: E402


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny and {len(city) + 10} degrees in {city}"


@tool
def local_time(city: str) -> str:
    """The local time in a city."""
    return f"{len(city) % 12 + 1} o'clock in {city}"


CITIES = ["Paris", "Oslo", "Lima", "Kyoto", "Quito", "Perth", "Cairo"]


class ScriptedClient(FunctionInvocationLayer, ChatMiddlewareLayer, BaseChatClient):  # type: ignore[misc]
    """Answers a user turn with tool calls (two in parallel every third turn) for ``rounds`` tool
    rounds, then with a text reply; records every request it is sent."""

    def __init__(self, rounds: int = 1, tag: str = "a") -> None:
        super().__init__()
        self.rounds = rounds
        self.tag = tag  # in call ids and answers: unique across the clients of one conversation
        self.requests: list[list[Message]] = []
        self._done = 0
        self._calls = 0

    def _call(self, name: str, city: str) -> Content:
        self._calls += 1
        call_id = f"call-{self.tag}{len(self.requests)}-{self._calls}"
        return Content.from_function_call(call_id=call_id, name=name, arguments={"city": city})

    async def _answer(self, messages: Sequence[Message]) -> ChatResponse:
        self.requests.append(list(messages))
        n = len(self.requests)
        city = CITIES[n % len(CITIES)]
        last = messages[-1]
        if last.role == "user":
            self._done = 0
        elif last.role == "tool":
            self._done += 1
        if self._done >= self.rounds:
            return ChatResponse(
                messages=[Message("assistant", [f"answer {self.tag}{n}: all sunny in {city}"])]
            )
        calls = [self._call("weather", city)]
        if n % 3 == 0:
            calls.append(self._call("local_time", city))
        return ChatResponse(messages=[Message("assistant", calls)])

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> Any:
        if not stream:
            return self._answer(messages)

        async def updates() -> AsyncIterator[ChatResponseUpdate]:
            response = await self._answer(messages)
            for message in response.messages:
                yield ChatResponseUpdate(role=message.role, contents=message.contents)

        return self._build_response_stream(updates())


class Reminder(ContextProvider):  # type: ignore[misc]
    """Adds a system message to every run (not stored in the history), as memory providers do."""

    def __init__(self) -> None:
        super().__init__("reminder")
        self.runs = 0

    async def before_run(self, *, agent: Any, session: Any, context: Any, state: Any) -> None:
        self.runs += 1
        context.extend_messages(self, [Message("system", [f"Reminder {self.runs}: be kind."])])


def keys(message: Any) -> list[str]:
    """One key per rollmem message an Agent Framework message becomes (the module's conversion):
    the message (its text, its calls), then one per function result."""
    head: list[str] = []
    results: list[str] = []
    for content in message.contents:
        if content.type == "text":
            head.append(content.text)
        elif content.type == "function_call":
            head.append(f"call {content.call_id}")
        elif content.type == "function_result":
            results.append(f"result {content.call_id}")
    return ([" ".join(head)] if head or not results else []) + results


def key(message: RMessage) -> str:
    if message.tool_call_id is not None:
        return f"result {message.tool_call_id}"
    return " ".join([message.content] * bool(message.content) + [f"call {c.id}" for c in message.tool_calls])


def history(session: AgentSession) -> list[Message]:
    return list(session.state["in_memory"]["messages"])


def is_ours(message: Message) -> bool:
    return bool(message.additional_properties.get(SUMMARY_MARKER))


def check_request(request: Sequence[Message], summary: Optional[str] = None) -> None:
    """A request opens (after system messages) with a user turn, and every function call is
    answered by results in the messages right after it, every result by a call right before."""
    turns = [message for message in request if message.role != "system"]
    assert turns[0].role == "user"
    open_calls: set[str] = set()
    for message in request:
        calls = {c.call_id for c in message.contents if c.type == "function_call"}
        results = [c.call_id for c in message.contents if c.type == "function_result"]
        if message.role == "tool":
            assert set(results) <= open_calls, f"a result without its call: {results}"
            open_calls -= set(results)
            continue
        assert not open_calls, f"calls without results: {open_calls}"
        open_calls = calls
    assert not open_calls
    if summary is not None:
        marked = [m for m in request if is_ours(m) and m.role == "system"]
        assert [m.text for m in marked] == [summary]


def make_agent(rolling: RollingCompaction, client: ScriptedClient, *more: ContextProvider) -> Agent:
    return Agent(
        client,
        instructions="Answer briefly.",
        tools=[weather, local_time],
        compaction_strategy=rolling,
        context_providers=[rolling, *more],
    )


def restart(session: AgentSession) -> AgentSession:
    """The session as another process reads it back: through JSON."""
    return AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))


@pytest.mark.parametrize("skip_excluded", [False, True], ids=["whole-history", "skip-excluded"])
async def test_a_long_tool_calling_conversation_across_restarts(recorder: Any, skip_excluded: bool) -> None:
    """24 runs of one to six tool rounds (parallel calls every third request), half of them
    streamed, a restart every 6 runs; with a history provider that loads the whole history, or
    one that leaves out the messages marked excluded."""
    counter = CountingWords()
    settings: dict[str, Any] = {"max_tokens": 40, "summarize_fn": recorder, "token_counter": counter}
    rolling = RollingCompaction(**settings)
    client = ScriptedClient(rounds=2)
    agent = make_agent(rolling, client, InMemoryHistoryProvider(skip_excluded=skip_excluded), Reminder())
    session = agent.create_session()
    requests: list[list[Message]] = []
    for turn in range(24):
        if turn and turn % 6 == 0:  # a new process: new strategy, client and agent, the session from JSON
            requests += client.requests
            session = restart(session)
            rolling = RollingCompaction(**settings)
            client = ScriptedClient(rounds=2 + turn % 5, tag=f"r{turn}-")
            agent = make_agent(
                rolling, client, InMemoryHistoryProvider(skip_excluded=skip_excluded), Reminder()
            )
        question = f"question {turn}: what about {CITIES[turn % len(CITIES)]} today?"
        if turn % 2:
            await agent.run(question, session=session, stream=True).get_final_response()
        else:
            await agent.run(question, session=session)
        check_request(client.requests[-1], rolling.summary(session) or None)
    requests += client.requests

    for request in requests:
        check_request(request)
        reminders = [m.text for m in request if m.role == "system" and not is_ours(m)]
        assert [text.split(":")[0].split()[0] for text in reminders] == ["Reminder"]  # kept, never folded
    assert any(c.type == "function_call" for r in requests for m in r for c in m.contents)
    assert any(len([c for c in m.contents if c.type == "function_call"]) == 2 for r in requests for m in r)
    assert any(m.text == CONTINUATION_TEXT for r in requests for m in r)  # a long tool chain was cut

    stored = [k for message in history(session) for k in keys(message)]
    folded = [key(m) for m in recorder.folded]
    assert len(recorder.calls) > 5
    assert len(set(folded)) == len(folded)  # every message reached the summarizer once ...
    assert folded == stored[: len(folded)]  # ... oldest first, none skipped
    state = rolling.state(session)
    loaded = [m for m in history(session) if not (skip_excluded and m.additional_properties.get("_excluded"))]
    assert 0 < len(state["costs"]) <= len(loaded) - state["folded"]  # the costs of what the last fold kept
    assert rolling.summary(session) == recorder.results[-1]
    # Each message counted once per process (one counter call per Agent Framework message; a
    # restart counts once more only what came after the last fold), the last reply not yet.
    assert len(history(session)) - 1 <= counter.calls < len(history(session)) + 4 * 12


async def test_the_summary_is_in_every_later_request_and_survives_a_restart(recorder: Any) -> None:
    rolling = RollingCompaction(30, recorder)
    client = ScriptedClient()
    agent = make_agent(rolling, client)
    session = agent.create_session()
    for turn in range(4):
        await agent.run(f"question {turn} about the weather in town", session=session)
    summary = rolling.summary(session)
    assert summary == recorder.results[-1]
    assert summary.startswith("question 0 about the weather in town")

    session = restart(session)
    again = RollingCompaction(30, recorder)
    client = ScriptedClient()
    await make_agent(again, client).run("question 4", session=session)
    first = client.requests[0]
    assert first[0].role == "system"
    assert first[0].text.startswith(summary)
    assert again.summary(session).startswith(summary)


async def test_a_failing_summarizer_propagates_and_changes_nothing(recorder: Any) -> None:
    rolling = RollingCompaction(30, recorder)
    agent = make_agent(rolling, ScriptedClient())
    session = agent.create_session()
    await agent.run("question 0 about the weather in town", session=session)
    before = rolling.state(session)
    recorder.fail = True
    with pytest.raises(RuntimeError, match="summarizer down"):
        await agent.run("question 1 about the weather in town", session=session)
    assert rolling.state(session) == before

    recorder.fail = False
    await agent.run("question 2 about the weather in town", session=session)
    folded = [key(m) for m in recorder.folded]
    stored = [k for message in history(session) for k in keys(message)]
    assert len(set(folded)) == len(folded)
    assert folded == stored[: len(folded)]


async def test_without_the_provider_it_warns_keeps_the_state_in_the_object_and_refuses_another_conversation(
    recorder: Any,
) -> None:
    rolling = RollingCompaction(30, recorder)
    agent = Agent(ScriptedClient(), tools=[weather, local_time], compaction_strategy=rolling)
    session = agent.create_session()
    with pytest.warns(
        UserWarning, match=r"without being in context_providers=: .* Pass it in context_provid"
    ):
        await agent.run("question 0 about the weather in town", session=session)
    for turn in range(1, 3):  # once per object
        await agent.run(f"question {turn} about the weather in town", session=session)
    assert rolling.summary() == recorder.results[-1]
    assert rolling.state()["folded"] > 0
    with pytest.raises(InvalidStateError, match=r"^state\.first: the messages hold neither the last"):
        await agent.run("another conversation", session=agent.create_session())


async def test_only_as_a_context_provider_it_warns_that_nothing_folds(recorder: Any) -> None:
    rolling = RollingCompaction(10, recorder)
    agent = Agent(ScriptedClient(), tools=[weather, local_time], context_providers=[rolling])
    with pytest.warns(
        UserWarning,
        match=r"not called as the compaction strategy: nothing folds\. Pass .* as compaction_strategy=",
    ):
        await agent.run("question 0 about the weather in town", session=agent.create_session())


async def test_a_model_call_converts_and_counts_only_the_new_messages(
    recorder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run converts (and counts) only the messages added since the previous model call, however
    long the session: the memory of the last call is reused across model calls and runs of the
    session, so a call does O(new messages) work, not O(buffer)."""
    converted = [0]
    units = agent_framework_module._SPEC.units

    def counted(natives: Any, track: Any) -> list[RMessage]:
        converted[0] += len(natives)
        return units(natives, track)

    monkeypatch.setattr(agent_framework_module._SPEC, "units", counted)
    counter = CountingWords()
    rolling = RollingCompaction(120, recorder, counter)
    client = ScriptedClient(rounds=2)
    agent = make_agent(rolling, client, InMemoryHistoryProvider())
    session = agent.create_session()
    per_run: list[tuple[int, int]] = []
    for turn in range(40):
        stored_before = len(history(session)) if turn else 0
        converted[0], counted_before = 0, counter.calls
        await agent.run(f"question {turn}: what about {CITIES[turn % len(CITIES)]} today?", session=session)
        per_run.append((converted[0], len(history(session)) - stored_before))
        assert counter.calls - counted_before == converted[0]  # one counter call per message
    assert recorder.folded
    assert len(history(session)) > 100
    # Each run converts the messages added since the previous run's last model call: the previous
    # answer, the question and the tool rounds (the run's own answer comes after its last call).
    assert all(count == added for count, added in per_run[1:])


async def test_the_strategy_called_directly_keeps_units_whole(recorder: Any) -> None:
    rolling = RollingCompaction(12, recorder)
    call = Content.from_function_call(call_id="c1", name="weather", arguments={"city": "Paris"})
    call2 = Content.from_function_call(call_id="c2", name="weather", arguments={"city": "Rome"})
    messages = [
        Message("system", ["Be brief."]),
        Message("user", ["what is the weather in Paris and Rome?"]),
        Message("assistant", [call, call2]),
        Message(
            "tool",
            [
                Content.from_function_result(call_id="c1", result="sunny in Paris"),
                Content.from_function_result(call_id="c2", result="rainy in Rome"),
            ],
        ),
        Message("assistant", ["Paris is sunny, Rome rainy, and that is all for now."]),
    ]
    with pytest.warns(UserWarning, match="without being in context_providers="):
        assert await rolling(messages) is True
    included = [m for m in messages if not m.additional_properties.get("_excluded")]
    assert [m.role for m in included] == ["system", "system", "user", "assistant"]
    assert included[1].text == recorder.results[-1]
    assert included[2].text == CONTINUATION_TEXT
    assert [key(m) for m in recorder.folded] == [
        "what is the weather in Paris and Rome?",
        "call c1 call c2",
        "result c1",
        "result c2",
    ]
    assert await rolling(messages) is False  # the same list again: nothing new
    assert len(recorder.calls) == 1


def test_arguments_are_checked() -> None:
    assert RollingCompaction().max_tokens == DEFAULT_MAX_TOKENS
    assert RollingCompaction().target_tokens is None  # the cache-aware fold (test_defaults.py)
    assert RollingCompaction(target_tokens=DEFAULT_MAX_TOKENS).target_tokens == DEFAULT_MAX_TOKENS
    with pytest.raises(ValueError, match="max_tokens"):
        RollingCompaction(0)
    with pytest.raises(TypeError, match="summarize_fn"):
        RollingCompaction(10, "not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="source_id"):
        RollingCompaction(source_id="")


async def test_a_bad_stored_state_names_the_field() -> None:
    rolling = RollingCompaction(30)
    agent = make_agent(rolling, ScriptedClient())
    session = agent.create_session()
    session.state["rollmem"] = {"version": 1, "summary": 3, "folded": 0, "costs": [], "known": 0}
    with pytest.raises(
        InvalidStateError, match=r"^session\.state\['rollmem'\]\.summary: expected str, got int"
    ):
        await agent.run("hi", session=session)


async def test_a_nested_run_gives_the_outer_run_its_state_back(recorder: Any) -> None:
    """An agent used as a tool runs inside another run: each run folds into its own session."""
    rolling = RollingCompaction(8, recorder)
    outer, inner = AgentSession(), AgentSession()

    def conversation(name: str) -> list[Message]:
        return [Message("user", [f"{name} one two three four"]), Message("user", [f"{name} five six seven"])]

    async def bind(session: AgentSession) -> None:
        await rolling.before_run(
            agent=None, session=session, context=None, state=session.state.setdefault("rollmem", {})
        )

    async def unbind(session: AgentSession) -> None:
        await rolling.after_run(agent=None, session=session, context=None, state=session.state["rollmem"])

    await bind(outer)
    await bind(inner)
    await rolling(conversation("inner"))
    await unbind(inner)
    await rolling(conversation("outer"))
    await unbind(outer)
    assert rolling.summary(inner) == "inner one two three four"
    assert rolling.summary(outer) == "outer one two three four"
    assert rolling.summary() == ""  # nothing went to the object's own state


@pytest.mark.parametrize("how", ["in place", "replaced"])
async def test_an_edit_of_the_stored_history_reaches_the_summarizer_not_the_old_text(
    recorder: Any, how: str
) -> None:
    """The app redacts a card number in the session's history two turns before it folds: the
    summarizer, the saved summary and later requests see the redacted text; no message is lost."""
    rolling = RollingCompaction(80, recorder, CountingWords())
    client = ScriptedClient()
    agent = make_agent(rolling, client)
    session = agent.create_session()
    await agent.run("my card is 4111 1111 1111 1111, what about Paris?", session=session)
    await agent.run("question 1: what about Oslo today?", session=session)
    assert not recorder.calls
    before = len(client.requests)
    stored = session.state["in_memory"]["messages"]
    index = next(i for i, m in enumerate(stored) if "4111" in m.text)
    redacted = "my card is [redacted], what about Paris?"
    if how == "in place":
        stored[index].contents[0].text = redacted
    else:
        stored[index] = Message("user", [redacted])
    for turn in range(2, 10):
        await agent.run(f"question {turn}: what about {CITIES[turn % len(CITIES)]} today?", session=session)
    folded = [key(m) for m in recorder.folded]
    assert redacted in folded
    assert not any("4111" in k for k in folded)
    assert "4111" not in rolling.summary(session)
    assert not any("4111" in (m.text or "") for request in client.requests[before:] for m in request)
    stored_keys = [k for message in history(session) for k in keys(message)]
    assert folded == stored_keys[: len(folded)]  # in order, none lost

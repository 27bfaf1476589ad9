"""RollingMemoryPlugin driven through a real ADK ``Runner``, offline.

The model is a ``BaseLlm`` subclass (ADK's own extension point for models) that answers from a
script and records every request it receives; the tool is a plain function ADK wraps; sessions
live in ADK's ``SqliteSessionService`` on a file, and a "restart" builds a new service, agent,
plugin and runner on that file, so only what the session stored carries over.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import warnings
from collections import deque
from collections.abc import AsyncGenerator, Iterator, Sequence
from pathlib import Path
from typing import Any, Optional

import pytest
from tests._optional import need

need("google-adk", "google.adk")

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.apps import App  # noqa: E402
from google.adk.events import Event  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions.sqlite_session_service import SqliteSessionService  # noqa: E402
from google.genai import types  # noqa: E402
from tests.conftest import AsyncRecordingSummarizer, RecordingSummarizer, SummarizerDown  # noqa: E402
from tests.conftest import CountingWords as CountingCounter  # noqa: E402

from rollmem import Message  # noqa: E402
from rollmem.adapters import CONTINUATION_TEXT  # noqa: E402
from rollmem.errors import InvalidStateError  # noqa: E402
from rollmem.integrations import google_adk  # noqa: E402
from rollmem.integrations.google_adk import STATE_PREFIX, RollingMemoryPlugin, summary_instruction  # noqa: E402

# ADK 2.0 announces its experimental features once per process (2.13 no longer does).
pytestmark = pytest.mark.filterwarnings(r"ignore:\[EXPERIMENTAL\] feature:UserWarning")


@pytest.fixture(autouse=True)
def _adk_sqlite_leaks() -> Iterator[None]:
    """google-adk's ``SqliteSessionService`` checks its schema inside ``with sqlite3.connect(...)``,
    which commits but never closes (Python 3.13 warns when such a connection is collected). Its
    connections are collected here, where that warning is expected, so none fires in a later test."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "unclosed database", ResourceWarning)
        yield
        gc.collect()


APP = "weather"
USER = "user-1"
INSTRUCTION = "You are a terse weather assistant."
STATE_KEY = STATE_PREFIX + "forecaster"


def lookup(city: str) -> str:
    """The weather report for a city."""
    return f"report for {city}: dry and mild"


class ScriptedModel(BaseLlm):
    """Answers with the next scripted content; records every request it receives."""

    model: str = "scripted"
    script: Any = None
    received: Any = None

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.received.append(llm_request.model_copy(deep=True))
        yield LlmResponse(content=self.script.popleft())


def call(*cities: str) -> types.Content:
    parts = [types.Part(function_call=types.FunctionCall(name="lookup", args={"city": c})) for c in cities]
    return types.Content(role="model", parts=parts)


def text(role: str, value: str) -> types.Content:
    return types.Content(role=role, parts=[types.Part(text=value)])


class Chat:
    """One ADK session on a SQLite file; ``restart()`` rebuilds everything but the file."""

    def __init__(self, path: Path, plugin_factory: Any) -> None:
        self.path = path
        self.plugin_factory = plugin_factory
        self.script: deque[types.Content] = deque()
        self.received: list[LlmRequest] = []
        self.session_id: Optional[str] = None
        self.restarts = 0
        self._build()

    def _build(self) -> None:
        self.service = SqliteSessionService(str(self.path))
        self.plugin = self.plugin_factory()
        model = ScriptedModel(script=self.script, received=self.received)
        agent = LlmAgent(name="forecaster", model=model, instruction=INSTRUCTION, tools=[lookup])
        self.runner = Runner(
            app=App(name=APP, root_agent=agent, plugins=[self.plugin]), session_service=self.service
        )

    async def start(self, state: Optional[dict[str, Any]] = None) -> None:
        session = await self.service.create_session(app_name=APP, user_id=USER, state=state)
        self.session_id = session.id

    def restart(self) -> None:
        self.restarts += 1
        self._build()

    async def send(self, question: str, steps: Sequence[Sequence[str]] = (), answer: str = "ok") -> None:
        for cities in steps:
            self.script.append(call(*cities))
        self.script.append(text("model", answer))
        assert self.session_id is not None
        async for _ in self.runner.run_async(
            user_id=USER, session_id=self.session_id, new_message=text("user", question)
        ):
            pass

    async def session(self) -> Any:
        return await self.service.get_session(app_name=APP, user_id=USER, session_id=self.session_id)


def plan(turn: int) -> tuple[str, list[list[str]], str]:
    """Turn ``turn``: a question, ``turn % 4`` tool steps (every second one two parallel calls),
    an answer; every text is unique so the tests can follow each message."""
    steps = [[f"c{turn}s{s}a", f"c{turn}s{s}b"][: 1 + s % 2] for s in range(turn % 4)]
    question = f"question {turn}: how is the weather on day {turn} of the trip"
    return question, steps, f"answer {turn}: it stays dry and mild all day {turn}"


def key(message: Message) -> str:
    """What identifies a converted message in these tests (the texts are unique)."""
    if message.tool_calls:
        return "call:" + ",".join(c.arguments for c in message.tool_calls)
    return f"{message.role}:{message.content}"


def content_keys(content: types.Content) -> list[str]:
    """The keys of the messages one content converts to (see :func:`key`)."""
    parts = content.parts or []
    calls = [p.function_call for p in parts if p.function_call]
    if content.role == "model":
        if calls:
            return ["call:" + ",".join(json.dumps(c.args, separators=(",", ":")) for c in calls)]
        return ["assistant:" + "\n".join(p.text or "" for p in parts)]
    responses = [p.function_response for p in parts if p.function_response]
    if responses:
        return ["tool:" + json.dumps(r.response) for r in responses]
    return ["user:" + "\n".join(p.text or "" for p in parts)]


def check_request(request: LlmRequest, pending: frozenset[str] = frozenset()) -> list[types.Content]:
    """The request opens with a user turn and pairs every call (but those of the tools named in
    ``pending``, which may wait for their response); returns the contents after the continuation
    turn, if any."""
    contents = list(request.contents)
    first = contents[0]
    assert first.role == "user"
    assert not any(p.function_response for p in first.parts or [])
    for index, content in enumerate(contents):
        parts = content.parts or []
        calls = [p.function_call.name for p in parts if p.function_call]
        responses = [p.function_response.name for p in parts if p.function_response]
        if calls and index + 1 < len(contents) and not pending & set(calls):
            nxt = [p.function_response.name for p in contents[index + 1].parts or [] if p.function_response]
            assert sorted(nxt) == sorted(calls), f"contents[{index}]: calls without their responses"
        if calls:  # Gemini: a call turn follows a user or response turn
            assert index > 0
            assert contents[index - 1].role == "user"
        if responses:
            before = [p.function_call.name for p in contents[index - 1].parts or [] if p.function_call]
            assert sorted(before) == sorted(responses), f"contents[{index}]: a response without its call"
    return [
        c for c in contents if not (c.role == "user" and c.parts and c.parts[0].text == CONTINUATION_TEXT)
    ]


def assert_counted(texts: list[str], everything: list[str], restarts: int) -> None:
    """Each content counted once (a content with parallel responses is one count), once more at
    most after a restart: the state holds the costs of what the last fold kept, not newer ones."""
    assert max(texts.count(text) for text in texts) <= 2
    once = len(set(texts))
    assert len(everything) // 2 < once < len(everything)
    assert len(texts) - once <= restarts * 12


async def run_conversation(chat: Chat, turns: int, restart_every: int) -> list[str]:
    """Runs ``turns`` turns, restarting every ``restart_every``; returns the keys of every message
    of the conversation in order."""
    await chat.start()
    everything: list[str] = []
    for turn in range(turns):
        if turn and turn % restart_every == 0:
            chat.restart()
        question, steps, answer = plan(turn)
        await chat.send(question, steps, answer)
        everything.append(f"user:{question}")
        for cities in steps:
            everything.append("call:" + ",".join(f'{{"city":"{c}"}}' for c in cities))
            everything.extend(f'tool:{{"result": "report for {c}: dry and mild"}}' for c in cities)
        everything.append(f"assistant:{answer}")
    return everything


async def test_a_long_conversation_with_restarts_folds_each_message_once(tmp_path: Path) -> None:
    summarizer = RecordingSummarizer()
    counter = CountingCounter()
    chat = Chat(tmp_path / "sessions.db", lambda: RollingMemoryPlugin(60, summarizer, counter))
    everything = await run_conversation(chat, turns=24, restart_every=5)
    assert chat.restarts == 4

    # Every message reached the summarizer exactly once, oldest first.
    folded = [key(m) for m in summarizer.folded]
    assert folded == everything[: len(folded)]
    assert len(summarizer.calls) >= 5
    # ... and each model request shows the rest verbatim: nothing lost, nothing shown twice.
    last = check_request(chat.received[-1])
    shown = [k for content in last for k in content_keys(content)]
    assert folded + shown == everything[:-1]  # the final answer came after the last request

    # Every request: a user turn first, no tool pair split, within the budget but for the newest unit.
    for request in chat.received:
        check_request(request)

    # The summary is in the system instruction; the session keeps every event.
    session = await chat.session()
    summary = session.state[STATE_KEY]["summary"]
    assert summary == summarizer.results[-1]
    assert chat.received[-1].config.system_instruction.endswith(summary_instruction(summary))
    questions = [e for e in session.events if e.author == "user" and e.content.parts[0].text]
    assert len(questions) == 24

    # The counter saw each content once per process (one call per content); a restart counts once
    # more only the contents added since the last fold.
    assert_counted(counter.texts, everything, restarts=4)


async def run_process(db: str, log: str, first: int, turns: int) -> None:
    """One process of :func:`test_real_process_restarts`: ``turns`` turns from turn ``first`` on
    session ``trip``, appending each folded message's key and each counted text to ``log``."""

    def write(kind: str, value: str) -> None:
        with open(log, "a", encoding="utf-8") as out:
            out.write(json.dumps([kind, value]) + "\n")

    class LoggedCounter(CountingCounter):
        def __call__(self, text: str) -> int:
            write("counted", text)
            return super().__call__(text)

    def summarize(summary: str, evicted: Sequence[Message]) -> str:
        for message in evicted:
            write("folded", key(message))
        return summary + "|" + "|".join(key(m) for m in evicted)

    chat = Chat(Path(db), lambda: RollingMemoryPlugin(60, summarize, LoggedCounter()))
    if first == 0:
        await chat.service.create_session(app_name=APP, user_id=USER, session_id="trip")
    chat.session_id = "trip"
    for turn in range(first, first + turns):
        await chat.send(*plan(turn))


def test_real_process_restarts(tmp_path: Path) -> None:
    """Three processes in a row on one SQLite session: what folds and what is counted, once."""
    db, log = str(tmp_path / "sessions.db"), str(tmp_path / "log.jsonl")
    root = str(Path(__file__).resolve().parents[2])
    for first in (0, 6, 12):
        code = (
            "import asyncio, sys\n"
            f"sys.path[:0] = [{root!r}]\n"
            "from tests.integrations.test_google_adk import run_process\n"
            f"asyncio.run(run_process({db!r}, {log!r}, {first}, 6))\n"
        )
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    entries = [json.loads(line) for line in Path(log).read_text(encoding="utf-8").splitlines()]
    folded = [value for kind, value in entries if kind == "folded"]
    counted = [value for kind, value in entries if kind == "counted"]
    everything: list[str] = []
    for turn in range(18):
        question, steps, answer = plan(turn)
        everything.append(f"user:{question}")
        for cities in steps:
            everything.append(
                "call:" + ",".join(json.dumps({"city": c}, separators=(",", ":")) for c in cities)
            )
            everything.extend("tool:" + json.dumps({"result": lookup(c)}) for c in cities)
        everything.append(f"assistant:{answer}")
    assert len(folded) > len(everything) // 2
    assert folded == everything[: len(folded)]
    assert_counted(counted, everything, restarts=2)


async def test_a_model_call_converts_and_counts_only_the_new_contents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per model call, the contents fingerprinted and the counter calls stay the same whether the
    session holds 20 or 60 turns (folds start around turn 17): a call does O(new contents) work,
    not O(buffer)."""
    prints: list[int] = []
    fingerprint = google_adk._fingerprint

    def counted(content: types.Content) -> str:
        prints[-1] += 1
        return fingerprint(content)

    monkeypatch.setattr(google_adk, "_fingerprint", counted)
    counter = CountingCounter()
    plugin = lambda: RollingMemoryPlugin(120, RecordingSummarizer(), counter, target_tokens=75)  # noqa: E731
    chat = Chat(tmp_path / "sessions.db", plugin)
    await chat.start()
    per_call: list[tuple[int, int]] = []
    for turn in range(60):
        prints.append(0)
        counted_before = len(counter.texts)
        await chat.send(f"question {turn} about the trip", (), f"answer {turn}")
        per_call.append((prints[-1], len(counter.texts) - counted_before))
    assert len(chat.received[-1].contents) > 20  # the buffer holds many turns
    early, late = per_call[20:30], per_call[50:60]
    assert {calls for _, calls in late} == {calls for _, calls in early} == {2}
    # one fingerprint per model call (the newest content), and at a fold those of the contents it
    # folds (the state names the newest folded ones): the same early and late
    assert {n for n, _ in late} == {n for n, _ in early} == {2, 9}


async def test_an_async_summarizer_and_the_words_default(tmp_path: Path) -> None:
    summarizer = AsyncRecordingSummarizer()
    chat = Chat(tmp_path / "sessions.db", lambda: RollingMemoryPlugin(50, summarizer.summarize))
    everything = await run_conversation(chat, turns=10, restart_every=3)
    folded = [key(m) for m in summarizer.folded]
    assert folded
    assert folded == everything[: len(folded)]
    last = check_request(chat.received[-1])
    assert folded + [k for c in last for k in content_keys(c)] == everything[:-1]


async def test_a_tool_chain_over_the_budget_opens_with_a_user_turn(tmp_path: Path) -> None:
    summarizer = RecordingSummarizer()
    chat = Chat(tmp_path / "sessions.db", lambda: RollingMemoryPlugin(12, summarizer, CountingCounter()))
    await chat.start()
    await chat.send("plan the whole week please", [[f"day{n}"] for n in range(6)], "done")
    openings = [request.contents[0].parts[0].text for request in chat.received]
    assert CONTINUATION_TEXT in openings  # the question itself was folded mid-chain
    for request in chat.received:
        rest = check_request(request)
        if request.contents[0].parts[0].text == CONTINUATION_TEXT:
            assert rest[0].role == "model"
            assert rest[0].parts[0].function_call is not None


async def test_a_failing_summarizer_changes_nothing_and_the_next_run_folds(tmp_path: Path) -> None:
    summarizer = RecordingSummarizer()
    chat = Chat(tmp_path / "sessions.db", lambda: RollingMemoryPlugin(30, summarizer, CountingCounter()))
    await chat.start()
    for turn in range(2):
        await chat.send(*plan(turn))
    state_before = (await chat.session()).state.get(STATE_KEY)
    summarizer.fail = True
    question, steps, answer = plan(2)
    with pytest.raises(RuntimeError) as info:
        await chat.send(question, steps, answer)
    assert isinstance(info.value.__cause__, SummarizerDown)
    assert (await chat.session()).state.get(STATE_KEY) == state_before
    summarizer.fail = False
    chat.script.clear()
    await chat.send(*plan(3))
    failed = [key(m) for m in summarizer.calls[0][1]]
    assert [key(m) for m in summarizer.folded][: len(failed)] == failed  # the same messages, once
    assert len(summarizer.folded) == len({key(m) for m in summarizer.folded})


@pytest.mark.parametrize("long_running", [True, False], ids=["long-running", "orphaned"])
async def test_a_late_response_to_a_pending_call_is_shown_not_lost(
    tmp_path: Path, long_running: bool
) -> None:
    """A call ADK marks long-running stays in every request while it waits (the plugin pins it:
    never folded while pending); one not marked so ADK leaves out. When the response is posted
    back turns later, ADK shows the call with the response after it, before the fold position:
    the plugin shows the pair (and folds it later), it does not take it for folded."""
    summarizer = RecordingSummarizer()
    chat = Chat(tmp_path / "sessions.db", lambda: RollingMemoryPlugin(40, summarizer, CountingCounter()))
    await chat.start()
    session = await chat.session()
    approval = types.FunctionCall(id="adk-approve-1", name="approve", args={"trip": "Oslo"})
    await chat.service.append_event(session, Event(author="user", content=text("user", "book the trip")))
    await chat.service.append_event(
        session,
        Event(
            author="forecaster",
            content=types.Content(role="model", parts=[types.Part(function_call=approval)]),
            long_running_tool_ids={"adk-approve-1"} if long_running else None,
        ),
    )
    for turn in range(6):
        await chat.send(*plan(turn))
    assert summarizer.folded
    folded_before = [key(m) for m in summarizer.folded]
    assert 'call:{"trip":"Oslo"}' not in folded_before
    for request in chat.received:
        shown = [k for c in check_request(request, frozenset({"approve"})) for k in content_keys(c)]
        if long_running:  # a plain unanswered call: ADK 2.13 leaves it out, 2.0 sends it (pinned)
            assert 'call:{"trip":"Oslo"}' in shown

    response = types.FunctionResponse(id="adk-approve-1", name="approve", response={"result": "approved"})
    chat.script.append(text("model", "booked"))
    async for _ in chat.runner.run_async(
        user_id=USER,
        session_id=chat.session_id,
        new_message=types.Content(role="user", parts=[types.Part(function_response=response)]),
    ):
        pass
    shown = [k for c in check_request(chat.received[-1]) for k in content_keys(c)]
    folded = [key(m) for m in summarizer.folded]
    assert 'call:{"trip":"Oslo"}' in shown + folded
    assert 'tool:{"result": "approved"}' in shown + folded
    assert len(folded) == len(set(folded))

    # The next turn sees the whole history again: each message folded once or shown, none lost.
    await chat.send(*plan(6))
    shown = [k for c in check_request(chat.received[-1]) for k in content_keys(c)]
    folded = [key(m) for m in summarizer.folded]
    assert len(folded) == len(set(folded))
    assert not set(folded) & set(shown)
    expected = {
        "user:book the trip",
        'call:{"trip":"Oslo"}',
        'tool:{"result": "approved"}',
        "assistant:booked",
    }
    expected |= {f"user:{plan(turn)[0]}" for turn in range(7)}
    assert expected <= set(folded) | set(shown)


async def test_each_agent_of_a_multi_agent_app_has_its_own_memory(tmp_path: Path) -> None:
    """The root agent transfers to a sub-agent: each folds its own request under its own key."""
    summarizer = RecordingSummarizer()
    script: deque[types.Content] = deque()
    received: list[LlmRequest] = []
    packer = LlmAgent(
        name="packer",
        model=ScriptedModel(script=script, received=received),
        instruction="Pack bags.",
        tools=[lookup],
    )
    root = LlmAgent(
        name="forecaster",
        model=ScriptedModel(script=script, received=received),
        instruction="Route to the packer.",
        sub_agents=[packer],
    )
    service = SqliteSessionService(str(tmp_path / "sessions.db"))
    app = App(name=APP, root_agent=root, plugins=[RollingMemoryPlugin(30, summarizer)])
    runner = Runner(app=app, session_service=service)
    session = await service.create_session(app_name=APP, user_id=USER)
    transfer = types.FunctionCall(name="transfer_to_agent", args={"agent_name": "packer"})
    script.append(types.Content(role="model", parts=[types.Part(function_call=transfer)]))
    for turn in range(6):
        script.extend([call(f"city{turn}"), text("model", f"packed for day {turn} with some words")])
        question = text("user", f"pack for day {turn} please now")
        async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=question):
            pass
    assert not script
    state = (await service.get_session(app_name=APP, user_id=USER, session_id=session.id)).state
    assert state[STATE_PREFIX + "packer"]["summary"]
    assert STATE_PREFIX + "forecaster" not in state  # one short request: nothing folded, nothing written
    for request in received:
        check_request(request)
    folded = [key(m) for m in summarizer.folded]
    assert len(folded) == len(set(folded))


async def test_bad_state_is_reported_by_key(tmp_path: Path) -> None:
    chat = Chat(tmp_path / "sessions.db", lambda: RollingMemoryPlugin(30))
    await chat.start(state={STATE_KEY: {"version": 7}})
    with pytest.raises(RuntimeError) as info:
        await chat.send("hello")
    error = info.value.__cause__
    assert isinstance(error, InvalidStateError)
    assert error.path == f"{STATE_KEY}.version"


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        RollingMemoryPlugin(0)
    with pytest.raises(TypeError, match="summary_text"):
        RollingMemoryPlugin(10, summary_text="no")  # type: ignore[arg-type]
    assert RollingMemoryPlugin().max_tokens == 2000
    assert RollingMemoryPlugin().target_tokens is None  # the cache-aware fold (test_defaults.py)
    assert RollingMemoryPlugin(2000, target_tokens=2000).target_tokens == 2000
    assert RollingMemoryPlugin().name == "rollmem"


def test_cached_prefix_puts_the_summary_text_after_the_system_prompt() -> None:
    plugin = RollingMemoryPlugin(50, RecordingSummarizer(), summary_text=lambda summary: f"Before: {summary}")
    evicted = [Message("user", "hi"), Message("assistant", "hello")]
    assert plugin.cached_prefix("", evicted) == evicted
    assert plugin.cached_prefix("s", evicted) == [Message("system", "Before: s"), *evicted]
    default = RollingMemoryPlugin(50, RecordingSummarizer())
    assert default.cached_prefix("s", evicted)[0] == Message("system", summary_instruction("s"))


# -- issue 26: responses posted back, edits, state writes --------------------------------------------


def approve_trip(trip: str) -> dict[str, str]:
    """Ask a human to approve the trip (long-running: returns a pending ticket)."""
    return {"status": "pending", "ticket": f"T-{trip}"}


def book_trip(trip: str) -> str:
    """Book the trip (asks for confirmation first)."""
    return f"booked {trip}"


class ToolChat(Chat):
    """A chat whose agent has a long-running tool and a tool that requires confirmation, on an
    in-memory session service (so a test can edit the stored events)."""

    def _build(self) -> None:
        from google.adk.sessions import InMemorySessionService
        from google.adk.tools import FunctionTool, LongRunningFunctionTool

        self.service = InMemorySessionService()  # type: ignore[assignment]
        self.plugin = self.plugin_factory()
        model = ScriptedModel(script=self.script, received=self.received)
        tools = [
            LongRunningFunctionTool(approve_trip),
            FunctionTool(book_trip, require_confirmation=True),
            lookup,
        ]
        agent = LlmAgent(name="forecaster", model=model, instruction=INSTRUCTION, tools=tools)
        self.runner = Runner(
            app=App(name=APP, root_agent=agent, plugins=[self.plugin]), session_service=self.service
        )

    async def post(self, response: types.FunctionResponse, answer: str) -> None:
        self.script.append(text("model", answer))
        message = types.Content(role="user", parts=[types.Part(function_response=response)])
        async for _ in self.runner.run_async(user_id=USER, session_id=self.session_id, new_message=message):
            pass

    async def call_id(self, name: str) -> str:
        session = await self.session()
        return next(c.id for e in session.events for c in e.get_function_calls() if c.name == name)


def tool_call(name: str, **args: str) -> types.Content:
    return types.Content(
        role="model", parts=[types.Part(function_call=types.FunctionCall(name=name, args=args))]
    )


@pytest.mark.parametrize("tool", ["long-running", "confirmation"])
async def test_a_response_posted_back_after_its_call_folded_comes_with_its_call(tool: str) -> None:
    """The call waits while six turns fold it away, then the client posts the final response: the
    request that carries it shows the call right before it (never a response without its call),
    and the response is summarized once later, like any other message."""
    summarizer = RecordingSummarizer()
    chat = ToolChat(Path("unused"), lambda: RollingMemoryPlugin(40, summarizer, CountingCounter()))
    await chat.start()
    name = "approve_trip" if tool == "long-running" else "book_trip"
    chat.script.append(tool_call(name, trip="Oslo"))
    if tool == "long-running":  # a confirmation ends the run until the client answers
        chat.script.append(text("model", "waiting for you"))
    async for _ in chat.runner.run_async(
        user_id=USER, session_id=chat.session_id, new_message=text("user", "book the trip to Oslo")
    ):
        pass
    for turn in range(6):
        await chat.send(*plan(turn))
    folded = [key(m) for m in summarizer.folded]
    assert 'call:{"trip":"Oslo"}' in folded  # the call (and its first response) folded meanwhile
    if tool == "long-running":
        response = types.FunctionResponse(
            id=await chat.call_id("approve_trip"), name="approve_trip", response={"status": "approved"}
        )
        final = 'tool:{"status": "approved"}'
    else:
        response = types.FunctionResponse(
            id=await chat.call_id("adk_request_confirmation"),
            name="adk_request_confirmation",
            response={"confirmed": True},
        )
        final = 'tool:{"result": "booked Oslo"}'
    await chat.post(response, "done: the trip is on")
    for request in chat.received:
        check_request(request)
    shown = [k for c in check_request(chat.received[-1]) for k in content_keys(c)]
    assert shown[-2:] == ['call:{"trip":"Oslo"}', final]
    for turn in range(6, 12):
        await chat.send(*plan(turn))
    for request in chat.received:
        check_request(request)
    folded = [key(m) for m in summarizer.folded]
    assert folded.count(final) == 1  # summarized once, not lost
    assert len([k for k in folded if k.startswith("user:")]) == len(
        {k for k in folded if k.startswith("user:")}
    )


@pytest.mark.parametrize("how", ["in place", "replaced"])
async def test_an_edit_of_the_stored_history_reaches_the_summarizer_not_the_old_text(how: str) -> None:
    """The app redacts a card number in a stored event two turns before it folds: the summarizer,
    the saved summary and later requests see the redacted text only; no turn is lost."""
    summarizer = RecordingSummarizer()
    chat = ToolChat(Path("unused"), lambda: RollingMemoryPlugin(60, summarizer, CountingCounter()))
    await chat.start()
    await chat.send("my card is 4111 1111 1111 1111, book a trip", (), "noted")
    await chat.send(*plan(1))
    assert not summarizer.calls
    stored = chat.service.sessions[APP][USER][chat.session_id]  # type: ignore[attr-defined]
    event = next(e for e in stored.events if e.content and "4111" in (e.content.parts[0].text or ""))
    redacted = "my card is [redacted], book a trip"
    if how == "in place":
        event.content.parts[0].text = redacted
    else:
        stored.events[stored.events.index(event)] = event.model_copy(
            update={"content": text("user", redacted)}
        )
    for turn in range(2, 12):
        await chat.send(*plan(turn))
    folded = [key(m) for m in summarizer.folded]
    assert f"user:{redacted}" in folded
    assert not any("4111" in k for k in folded)
    assert not any("4111" in str(r.config.system_instruction) for r in chat.received)
    assert not any("4111" in k for r in chat.received[3:] for c in r.contents for k in content_keys(c))


async def test_the_state_is_written_only_at_folds_and_stays_small(tmp_path: Path) -> None:
    summarizer = RecordingSummarizer()
    chat = Chat(tmp_path / "sessions.db", lambda: RollingMemoryPlugin(60, summarizer, CountingCounter()))
    await run_conversation(chat, turns=40, restart_every=100)
    session = await chat.session()
    writes = [e.actions.state_delta[STATE_KEY] for e in session.events if STATE_KEY in e.actions.state_delta]
    assert len(writes) == len(summarizer.calls) > 5  # one write per fold, none in between
    sizes = [len(json.dumps(state)) - len(state["summary"]) for state in writes]
    assert max(sizes) < 1500  # not the buffer: positions, keys of the newest folded contents, costs kept

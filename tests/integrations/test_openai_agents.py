"""RollingSession driven by the real Agents SDK Runner, offline, with a scripted Model subclass."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

import pytest
from tests._optional import need

agents = need("openai-agents", "agents")

from agents import Agent, RunConfig, Runner, Usage, function_tool  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary  # noqa: E402
from tests.conftest import CountingWords  # noqa: E402

from rollmem import Message  # noqa: E402
from rollmem.adapters import CONTINUATION_TEXT_PLAIN  # noqa: E402
from rollmem.adapters.openai import from_openai_responses, to_openai_responses  # noqa: E402
from rollmem.integrations.openai_agents import SUMMARY_HEADER, RollingSession, cached_prefix  # noqa: E402
from rollmem.stores import MemoryStore, SQLiteStore  # noqa: E402
from rollmem.summarizers import cached_summarizer  # noqa: E402

RUN_CONFIG = RunConfig(tracing_disabled=True)


def words(text: str) -> int:
    return len(text.split())


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny and {len(city) + 10} degrees in {city}"


@function_tool
def get_time(city: str) -> str:
    """The local time in a city."""
    return f"{len(city) % 12 + 1} o'clock in {city}"


class ScriptedModel(Model):
    """Answers each user turn with reasoning and one or two tool calls, then a text reply once the
    outputs are in; records the input of every call."""

    def __init__(self) -> None:
        self.inputs: list[list[dict[str, Any]]] = []
        self.first_inputs: list[list[dict[str, Any]]] = []  # the input of each run's first call

    async def get_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        items = [dict(item) for item in input]
        self.inputs.append(items)
        n = len(self.inputs)
        last = items[-1]
        if last.get("type") == "function_call_output":
            outputs = [item["output"] for item in items if item.get("type") == "function_call_output"]
            text = f"reply {n}: {outputs[-1]}"
            output: list[Any] = [
                ResponseOutputMessage(
                    id=f"msg_{n}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
                )
            ]
        else:
            self.first_inputs.append(items)
            city = str(last.get("content", "")).split()[-1]
            output = [
                ResponseReasoningItem(
                    id=f"rs_{n}", type="reasoning", summary=[Summary(type="summary_text", text=f"plan {n}")]
                ),
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{n}",
                    call_id=f"call_{n}",
                    name="get_weather",
                    arguments=json.dumps({"city": city}),
                ),
            ]
            if n % 3 == 0:  # parallel calls now and then
                output.append(
                    ResponseFunctionToolCall(
                        type="function_call",
                        id=f"fc_{n}b",
                        call_id=f"call_{n}b",
                        name="get_time",
                        arguments=json.dumps({"city": city}),
                    )
                )
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Recorder:
    """A summarize_fn (sync or async) that records its calls and chains the summaries."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Message, ...]]] = []
        self.last = ""

    def __call__(self, summary: str, evicted: Sequence[Message]) -> str:
        assert all(isinstance(message, Message) for message in evicted)
        self.calls.append((summary, tuple(evicted)))
        self.last = f"{summary} +{len(evicted)}".strip()
        return self.last

    async def asummarize(self, summary: str, evicted: Sequence[Message]) -> str:
        await asyncio.sleep(0)
        return self(summary, evicted)

    @property
    def evicted(self) -> list[Message]:
        return [message for _, messages in self.calls for message in messages]


class RecordingSession(RollingSession):
    """Also keeps a copy of every item the Runner adds (to prove nothing is lost or repeated)."""

    added: list[dict[str, Any]]

    async def add_items(self, items: Any) -> None:
        items = list(items)
        self.__dict__.setdefault("added", []).extend(json.loads(json.dumps(items)))
        await super().add_items(items)


def agent_for(model: ScriptedModel) -> Any:
    return Agent(
        name="weather", instructions="Answer about the weather.", model=model, tools=[get_weather, get_time]
    )


async def run_turns(session: RollingSession, model: ScriptedModel, turns: range, check: Any = None) -> None:
    agent = agent_for(model)
    for turn in turns:
        result = await Runner.run(
            agent, f"turn {turn}: weather in city{turn}", session=session, run_config=RUN_CONFIG
        )
        assert result.final_output.startswith("reply ")
        if check is not None:
            await check(turn)


def history_of(first_input: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session part of a run's first model input: all but the new user message."""
    return first_input[:-1]


def assert_well_formed(items: list[dict[str, Any]]) -> None:
    """Units whole: every output follows its call, every call has its output, reasoning is
    followed by a non-reasoning item; a summary item only first."""
    calls = {item["call_id"] for item in items if item.get("type") == "function_call"}
    outputs = {item["call_id"] for item in items if item.get("type") == "function_call_output"}
    assert outputs == calls
    seen: set[str] = set()
    for index, item in enumerate(items):
        if item.get("type") == "function_call":
            seen.add(item["call_id"])
        if item.get("type") == "function_call_output":
            assert item["call_id"] in seen, f"orphan output at {index}"
        if item.get("type") == "reasoning":
            assert items[index + 1].get("type") != "reasoning"
        if index and isinstance(item.get("content"), str):
            assert not item["content"].startswith(SUMMARY_HEADER)


def buffer_tokens(items: list[dict[str, Any]]) -> int:
    body = [item for item in items if not str(item.get("content", "")).startswith(SUMMARY_HEADER)]
    return sum(words(message.token_text()) for message in from_openai_responses(body))


# -- the protocol ---------------------------------------------------------------------------------


def test_is_an_agents_session() -> None:
    session = RollingSession("s")
    assert isinstance(session, agents.memory.Session)
    assert session.session_id == "s"
    assert session.session_settings is None
    assert session.store is None


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"session_id": 3}, TypeError, "session_id: expected str, got int"),
        ({"session_id": ""}, ValueError, "session_id must not be empty"),
        ({"session_id": "s", "max_tokens": 0}, ValueError, "max_tokens must be > 0, got 0"),
        (
            {"session_id": "s", "store": object()},
            TypeError,
            "store: expected a rollmem AsyncLogStore or LogStore",
        ),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}"):
        RollingSession(**kwargs)


# -- the acceptance run: 200 turns with tool calls ------------------------------------------------


@pytest.mark.parametrize("async_summarizer", [False, True])
def test_two_hundred_turns_stay_within_budget_and_summarize_each_message_once(async_summarizer: bool) -> None:
    recorder = Recorder()
    summarize = recorder.asummarize if async_summarizer else recorder
    session = RecordingSession(
        "long", max_tokens=60, target_tokens=40, summarize_fn=summarize, token_counter=words
    )
    model = ScriptedModel()
    summary_before_run = [""]

    async def check(turn: int) -> None:
        history = history_of(model.first_inputs[-1])
        assert buffer_tokens(history) <= 60
        assert_well_formed(history)
        if summary_before_run[0]:  # the model got the summary as it was when the run started
            assert history[0] == {"role": "system", "content": SUMMARY_HEADER + summary_before_run[0]}
        else:
            assert history[:1] != [] or turn == 0
        summary_before_run[0] = recorder.last

    asyncio.run(run_turns(session, model, range(200), check))

    assert len(model.first_inputs) == 200
    assert len(recorder.calls) > 20  # over budget many times
    # each call gets the previous summary
    previous = ""
    for summary, _ in recorder.calls:
        assert summary == previous
        previous = f"{summary} +{len(_)}".strip()
    # every item the Runner added was summarized exactly once or is still buffered, in order
    items = asyncio.run(session.get_items())
    assert items[0] == {"role": "system", "content": SUMMARY_HEADER + recorder.last}
    assert to_openai_responses(recorder.evicted) + items[1:] == session.added
    # the model saw the summary, and what each run's model saw was what the session held
    assert any(inp[0].get("role") == "system" for inp in model.first_inputs)
    for inp in model.inputs:  # every model call of every run: no orphan output, units whole
        assert_well_formed(inp)


def test_each_run_reads_the_session_once_and_sees_the_summary_first() -> None:
    recorder = Recorder()
    session = RollingSession("s", max_tokens=25, summarize_fn=recorder, token_counter=words)
    model = ScriptedModel()
    asyncio.run(run_turns(session, model, range(6)))
    stored = asyncio.run(session.get_items())
    # the last run's first model input is the session as it was then, plus the new user message
    assert model.first_inputs[-1][-1] == {"content": "turn 5: weather in city5", "role": "user"}
    assert stored[0] == {"role": "system", "content": SUMMARY_HEADER + recorder.last}
    memory = asyncio.run(session.get_memory())
    assert memory.summary == recorder.last
    assert 0 < (memory.stats().buffer_tokens or 0) <= 25


# -- stores: restarts and other processes continue the same session -------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        yield MemoryStore()
    else:
        sqlite = SQLiteStore(tmp_path / "sessions.db")
        yield sqlite
        sqlite.close()


def test_a_new_session_on_the_same_store_continues_without_resummarizing(store: Any) -> None:
    first = Recorder()
    session = RecordingSession("user-1", max_tokens=50, summarize_fn=first, token_counter=words, store=store)
    model = ScriptedModel()
    asyncio.run(run_turns(session, model, range(15)))
    assert first.calls
    before = asyncio.run(session.get_items())

    second = Recorder()
    restarted = RecordingSession(
        "user-1", max_tokens=50, summarize_fn=second, token_counter=words, store=store
    )
    assert restarted.store is store
    assert asyncio.run(restarted.get_items()) == before  # loading summarizes nothing
    assert second.calls == []
    restarted.added = []
    asyncio.run(run_turns(restarted, model, range(15, 30)))
    assert second.calls
    assert second.calls[0][0] == first.last  # continues the same summary
    evicted_items = to_openai_responses(first.evicted) + to_openai_responses(second.evicted)
    all_added = session.added + restarted.added
    items = asyncio.run(restarted.get_items())
    assert items[0]["content"] == SUMMARY_HEADER + second.last
    assert evicted_items + items[1:] == all_added
    # the first object sees what the second saved
    assert asyncio.run(session.get_items()) == items


def test_two_sessions_on_one_store_interleave_without_losing_items(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "shared.db")
    recorder = Recorder()
    a = RecordingSession("shared", max_tokens=40, summarize_fn=recorder, token_counter=words, store=store)
    b = RecordingSession("shared", max_tokens=40, summarize_fn=recorder, token_counter=words, store=store)
    model = ScriptedModel()

    async def both() -> None:
        for turn in range(10):
            await run_turns(a if turn % 2 else b, model, range(turn, turn + 1))

    asyncio.run(both())
    items = asyncio.run(a.get_items())
    assert items == asyncio.run(b.get_items())
    assert buffer_tokens(items) <= 40
    assert_well_formed(items)
    store.close()


# -- items: exactly as added, limits, pop, clear ----------------------------------------------------

EXCHANGE: list[dict[str, Any]] = [
    {"role": "user", "content": "weather in Paris?"},
    {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "call the tool"}]},
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "c1",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
    },
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}],
    },
]


def test_items_come_back_exactly_as_added_and_are_copies() -> None:
    session = RollingSession("s")
    items = json.loads(json.dumps(EXCHANGE))
    asyncio.run(session.add_items(items))
    items[0]["content"] = "changed after adding"
    got = asyncio.run(session.get_items())
    assert got == EXCHANGE
    assert [list(item) for item in got] == [list(item) for item in EXCHANGE]
    got[0]["content"] = "changed after reading"
    assert asyncio.run(session.get_items()) == EXCHANGE


def test_sdk_models_are_stored_as_their_dicts() -> None:
    session = RollingSession("s")
    call = ResponseFunctionToolCall(type="function_call", call_id="c1", name="f", arguments="{}")
    output = {"type": "function_call_output", "call_id": "c1", "output": "x"}
    asyncio.run(session.add_items([{"role": "user", "content": "q"}, call, output]))
    got = asyncio.run(session.get_items())
    assert got[1] == {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}


def test_the_default_fold_keeps_the_verbatim_floor() -> None:
    """Over ``max_tokens`` the session folds down to the cache-aware floor: 85% of a budget this
    small (8 of 10; no request this small is cacheable)."""
    session = RollingSession("s", max_tokens=10, summarize_fn=Recorder(), token_counter=words)
    for word in "abcdefghijk":
        asyncio.run(session.add_items([{"role": "user", "content": word}]))
    items = asyncio.run(session.get_items())
    assert items[0]["role"] == "system"
    assert [item["content"] for item in items[1:]] == list("defghijk")


def test_limit_returns_the_newest_whole_units() -> None:
    session = RollingSession(
        "s", max_tokens=12, summarize_fn=Recorder(), token_counter=words, target_tokens=12
    )
    asyncio.run(session.add_items([{"role": "user", "content": "one two three four five six"}]))
    asyncio.run(session.add_items(EXCHANGE))
    items = asyncio.run(session.get_items())
    assert items[0]["role"] == "system"
    assert items[1:] == EXCHANGE
    get = lambda limit: asyncio.run(session.get_items(limit))  # noqa: E731
    opening = {"role": "user", "content": CONTINUATION_TEXT_PLAIN}  # counts: a request opens with it
    assert get(1) == []
    assert get(2) == [opening, *EXCHANGE[-1:]]
    assert get(4) == [opening, *EXCHANGE[-1:]]  # reasoning + call + output are one unit of three
    assert get(5) == EXCHANGE
    assert get(6) == items
    assert get(100) == items
    assert get(0) == []
    with pytest.raises(ValueError, match=r"^limit must be >= 0, got -1$"):
        get(-1)
    with pytest.raises(TypeError, match=r"^limit: expected int, got str$"):
        get("2")


def test_bad_items_raise_with_their_path_and_add_nothing() -> None:
    session = RollingSession("s")
    asyncio.run(session.add_items(EXCHANGE[:1]))
    bad = [*EXCHANGE[1:3], {"type": "function_call_output", "call_id": 7, "output": "x"}]
    with pytest.raises(ValueError, match=r"^items\[2\]\.call_id: expected str, got int$"):
        asyncio.run(session.add_items(bad))
    with pytest.raises(
        TypeError, match=r"^items\[0\]: expected a mapping or a model with model_dump, got int$"
    ):
        asyncio.run(session.add_items([3]))
    with pytest.raises(TypeError, match=r"^items: expected an iterable of items, got dict$"):
        asyncio.run(session.add_items(EXCHANGE[0]))
    assert asyncio.run(session.get_items()) == EXCHANGE[:1]


def test_a_summary_item_handed_back_is_not_stored_again() -> None:
    recorder = Recorder()
    session = RollingSession("s", max_tokens=8, summarize_fn=recorder, token_counter=words)
    asyncio.run(session.add_items(EXCHANGE))
    items = asyncio.run(session.get_items())
    assert items[0] == {"role": "system", "content": SUMMARY_HEADER + recorder.last}
    asyncio.run(session.add_items([*items, {"role": "user", "content": "again"}]))
    again = asyncio.run(session.get_items())
    assert [item for item in again if item.get("role") == "system"] == [again[0]]
    assert again[-1] == {"role": "user", "content": "again"}


def test_reasoning_left_at_the_end_joins_the_next_item() -> None:
    session = RollingSession("s", max_tokens=6, summarize_fn=Recorder(), token_counter=words)
    asyncio.run(session.add_items(EXCHANGE[:2]))  # the user turn, then reasoning alone
    asyncio.run(session.add_items(EXCHANGE[2:4]))
    memory = asyncio.run(session.get_memory())
    assert [len(message.metadata["responses_items"]) for message in memory.buffer][-2:] == [2, 1]
    assert asyncio.run(session.get_items())[-3:] == EXCHANGE[1:4]


def test_pop_item_removes_exactly_the_newest_item() -> None:
    session = RollingSession("s")
    assert asyncio.run(session.pop_item()) is None
    asyncio.run(session.add_items(EXCHANGE))
    assert asyncio.run(session.pop_item()) == EXCHANGE[4]
    assert asyncio.run(session.pop_item()) == EXCHANGE[3]  # the call stays, waiting for an output
    waiting = 'call the tool\n[tool call c1: get_weather({"city":"Paris"}), no result]'
    assert asyncio.run(session.get_items()) == [EXCHANGE[0], {"role": "assistant", "content": waiting}]
    asyncio.run(session.add_items(EXCHANGE[3:4]))  # an output added later pairs with it again
    assert asyncio.run(session.get_items()) == EXCHANGE[:4]
    asyncio.run(session.pop_item())
    assert asyncio.run(session.pop_item()) == EXCHANGE[2]  # the reasoning stays
    assert asyncio.run(session.get_items()) == EXCHANGE[:2]
    assert asyncio.run(session.pop_item()) == EXCHANGE[1]
    assert asyncio.run(session.pop_item()) == EXCHANGE[0]
    assert asyncio.run(session.pop_item()) is None


def test_clear_session_forgets_summary_and_items(store: Any) -> None:
    session = RollingSession("s", max_tokens=8, summarize_fn=Recorder(), token_counter=words, store=store)
    asyncio.run(session.add_items(EXCHANGE))
    assert asyncio.run(session.get_items())[0]["role"] == "system"
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    assert asyncio.run(RollingSession("s", store=store).get_items()) == []


def test_a_failing_summarizer_keeps_the_items_and_raises(store: Any) -> None:
    def fail(summary: str, evicted: Sequence[Message]) -> str:
        raise RuntimeError("summarizer down")

    session = RollingSession("s", max_tokens=8, summarize_fn=fail, token_counter=words, store=store)
    with pytest.raises(RuntimeError, match=r"^summarizer down$"):
        asyncio.run(session.add_items(EXCHANGE))
    assert asyncio.run(session.get_items()) == EXCHANGE
    assert asyncio.run(RollingSession("s", store=store).get_items()) == EXCHANGE


# -- the documentation page ---------------------------------------------------------------------

PAGE = Path(__file__).resolve().parents[2] / "docs" / "pages" / "integrations" / "openai-agents.md"


def test_the_docs_page_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for index, code in enumerate(blocks):
        exec(compile(code, f"{PAGE.name}:block{index}", "exec"), {"__name__": "__docs__"})


def test_session_settings_limit_reaches_the_model_as_whole_units() -> None:
    from agents.memory import SessionSettings

    session = RollingSession("s", max_tokens=1000, token_counter=words)
    model = ScriptedModel()
    config = RunConfig(tracing_disabled=True, session_settings=SessionSettings(limit=4))
    agent = agent_for(model)

    async def run() -> None:
        for turn in range(5):
            await Runner.run(agent, f"turn {turn}: weather in city{turn}", session=session, run_config=config)

    asyncio.run(run())
    for first in model.first_inputs[1:]:
        history = history_of(first)
        assert 0 < len(history) <= 4
        assert_well_formed(history)


def key(message: Message) -> str:
    if message.tool_calls:
        return message.tool_calls[0].id
    if message.tool_call_id is not None:
        return f"{message.tool_call_id}-out"
    return message.content


def until_overlap(race_round: Callable[[str], int], rounds: int = 5) -> None:
    """Run ``race_round`` on a fresh session id until its writers overlapped (it returns the
    saves retried); each round checks its own invariants. Scheduling decides whether two writers
    overlap in one round, so a round may miss; every round missing means they never race."""
    for n in range(rounds):
        if race_round(f"race-{n}") > 0:
            return
    pytest.fail(f"the writers never overlapped in {rounds} rounds")


def test_writers_racing_on_one_store_lose_and_repeat_nothing(tmp_path: Path) -> None:
    """Two session objects (two processes, as far as the store can tell) add at the same time:
    saves conflict and are replayed; every item ends in the summary or the buffer, once."""
    store = SQLiteStore(tmp_path / "race.db")

    def race_round(session_id: str) -> int:
        async def summarize(summary: str, evicted: Sequence[Message]) -> str:
            await asyncio.sleep(0)
            return " ".join([summary, *(key(message) for message in evicted)]).strip()

        sessions = [
            # Each conflict means the other writer committed, and each writes 25 times: 26 retries
            # can never run out, whatever the scheduling.
            RollingSession(  # target_tokens = max_tokens: a fold on most writes, so the writers overlap
                session_id,
                max_tokens=30,
                target_tokens=30,
                summarize_fn=summarize,
                token_counter=words,
                store=store,
                max_retries=26,
            )
            for _ in range(2)
        ]

        async def writer(index: int) -> None:
            for n in range(25):
                name = f"w{index}-{n}"
                await sessions[index].add_items(
                    [
                        {"role": "user", "content": name},
                        {"type": "function_call", "call_id": f"{name}-c", "name": "f", "arguments": "{}"},
                        {"type": "function_call_output", "call_id": f"{name}-c", "output": "done and dusted"},
                    ]
                )

        async def race() -> None:
            await asyncio.gather(writer(0), writer(1))

        asyncio.run(race())
        retries = sum(session._sessions.retries for session in sessions if session._sessions is not None)
        memory = asyncio.run(sessions[0].get_memory())
        keys = memory.summary.split() + [key(message) for message in memory.buffer]
        expected = [
            f"w{i}-{n}{suffix}" for i in range(2) for n in range(25) for suffix in ("", "-c", "-c-out")
        ]
        assert sorted(keys) == sorted(expected)
        assert_well_formed(asyncio.run(sessions[1].get_items())[1:])
        return retries

    until_overlap(race_round)
    store.close()


def test_an_output_whose_call_was_folded_is_sent_as_text() -> None:
    # issue 20: the Responses API rejects a function_call_output without its function_call
    session = RollingSession("o", max_tokens=12, summarize_fn=Recorder(), token_counter=words)
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    asyncio.run(session.add_items([{"role": "user", "content": "look it up"}, call]))
    asyncio.run(session.add_items([{"role": "user", "content": " ".join(["word"] * 12)}]))
    asyncio.run(session.add_items([{"type": "function_call_output", "call_id": "c1", "output": "18C"}]))
    items = asyncio.run(session.get_items())
    assert items[0]["role"] == "system"
    assert items[1:] == [{"role": "user", "content": "[result of tool call c1] 18C"}]
    memory = asyncio.run(session.get_memory())
    assert [message.tool_call_id for message in memory.buffer] == ["c1"]  # stored as it came
    for limit in range(3):
        assert not [item for item in asyncio.run(session.get_items(limit)) if "call_id" in item]


def test_pop_item_racing_add_items_re_runs_instead_of_raising(tmp_path: Path) -> None:
    """A pop rewrites the buffer: when another writer saved first it runs again on the latest state
    (before, it raised ConflictError at once). Every item is popped or kept, once."""
    store = SQLiteStore(tmp_path / "pop.db")

    def race_round(session_id: str) -> int:
        sessions = [
            RollingSession(session_id, max_tokens=10_000, store=store, max_retries=60) for _ in range(2)
        ]
        popped: list[Any] = []

        async def adder() -> None:
            for n in range(30):
                await sessions[0].add_items([{"role": "user", "content": f"a{n}"}])

        async def popper() -> None:
            for n in range(30):
                await sessions[1].add_items([{"role": "user", "content": f"b{n}"}])
                popped.append(await sessions[1].pop_item())

        async def race() -> None:
            await asyncio.gather(adder(), popper())

        asyncio.run(race())
        retries = sum(session._sessions.retries for session in sessions if session._sessions is not None)
        left = [item["content"] for item in asyncio.run(sessions[0].get_items())]
        gone = [item["content"] for item in popped if item is not None]
        assert len(gone) == 30
        assert sorted(left + gone) == sorted([f"a{n}" for n in range(30)] + [f"b{n}" for n in range(30)])
        return retries

    until_overlap(race_round)
    store.close()


def test_reasoning_re_join_racing_other_writers_re_runs(tmp_path: Path) -> None:
    """Reasoning waiting at the end joins the next item (a buffer rewrite): under a concurrent
    writer it re-runs on the latest state; nothing is lost or doubled."""
    store = SQLiteStore(tmp_path / "reasoning.db")

    def race_round(session_id: str) -> int:
        sessions = [
            RollingSession(session_id, max_tokens=10_000, store=store, max_retries=60) for _ in range(2)
        ]

        async def writer(index: int) -> None:
            for n in range(20):
                name = f"w{index}-{n}"
                reasoning = {"id": f"rs_{name}", "type": "reasoning", "summary": []}
                await sessions[index].add_items([{"role": "user", "content": name}, reasoning])
                await sessions[index].add_items([{"role": "assistant", "content": f"{name} reply"}])

        async def race() -> None:
            await asyncio.gather(writer(0), writer(1))

        asyncio.run(race())
        retries = sum(session._sessions.retries for session in sessions if session._sessions is not None)
        items = asyncio.run(sessions[0].get_items())
        names = [item.get("content") or item["id"] for item in items]
        expected = [
            f"{p}w{i}-{n}{s}"
            for i in range(2)
            for n in range(20)
            for p, s in (("", ""), ("rs_", ""), ("", " reply"))
        ]
        assert sorted(names) == sorted(expected)
        return retries

    until_overlap(race_round)
    store.close()


@pytest.mark.parametrize("on_store", [False, True])
def test_evicted_items_reach_on_evict_and_the_archive_once(tmp_path: Path, on_store: bool) -> None:
    archive = agents.SQLiteSession("archive")
    seen: list[list[dict[str, Any]]] = []

    async def hook(items: list[dict[str, Any]]) -> None:
        seen.append(items)

    store = SQLiteStore(tmp_path / "evict.db") if on_store else None
    session = RollingSession(
        "s",
        max_tokens=12,
        summarize_fn=Recorder(),
        token_counter=words,
        store=store,
        on_evict=hook,
        archive=archive,
    )
    added: list[dict[str, Any]] = []
    for n in range(12):
        batch = [{"role": "user", "content": f"question {n} about the weather"}]
        if n % 3 == 0:
            batch += EXCHANGE[2:4]
            batch = [dict(item, call_id=f"c{n}") if "call_id" in item else item for item in batch]
        asyncio.run(session.add_items(batch))
        added += batch
    archived = asyncio.run(archive.get_items())
    kept = asyncio.run(session.get_items())
    assert kept[0]["content"].startswith(SUMMARY_HEADER)
    assert [item for batch in seen for item in batch] == archived
    assert archived + kept[1:] == added  # every item is archived or kept, once, in order
    archive.close()
    if store is not None:
        store.close()


def test_on_evict_and_archive_are_checked() -> None:
    with pytest.raises(TypeError, match="on_evict: expected a callable or None, got int"):
        RollingSession("s", on_evict=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"archive: expected a session with add_items"):
        RollingSession("s", archive=object())


def test_each_item_is_counted_once_also_across_restarts(store: Any) -> None:
    """The Runner reads and adds items every turn; each message is counted once, and a new session
    object on the same store (a restart) counts only what it adds."""
    counter = CountingWords()
    session = RecordingSession(
        "user-1", max_tokens=50, summarize_fn=Recorder(), token_counter=counter, store=store
    )
    model = ScriptedModel()
    asyncio.run(run_turns(session, model, range(10)))
    added = [m.token_text() for m in from_openai_responses(session.added)]
    assert counter.texts == added
    restarted = RecordingSession(
        "user-1", max_tokens=50, summarize_fn=Recorder(), token_counter=counter, store=store
    )
    restarted.added = []
    asyncio.run(run_turns(restarted, model, range(10, 20)))
    assert counter.texts == added + [m.token_text() for m in from_openai_responses(restarted.added)]


def test_cached_prefix_opens_the_summarizer_request_as_the_last_request() -> None:
    """With ``summary_as=cached_prefix`` the summarizer's request, rendered as the session renders
    its requests, starts with the request sent just before the fold (so a prompt cache serves it)."""
    sent: list[list[Message]] = []

    def complete(messages: list[Message]) -> str:
        sent.append(messages)
        return f"summary {len(sent)}"

    summarize = cached_summarizer(complete, summary_as=cached_prefix)
    session = RollingSession("c", max_tokens=12, target_tokens=4, summarize_fn=summarize, token_counter=words)
    checked = 0
    for n in range(12):
        before = asyncio.run(session.get_items())
        folds = len(sent)
        asyncio.run(session.add_items([{"role": "user", "content": f"question {n} about the trip"}]))
        if len(sent) > folds:
            request = to_openai_responses(sent[-1][:-1])  # without the instruction
            assert before[: len(request)] == request
            checked += 1
    assert checked >= 3
    assert sent[-1][0].content.startswith(SUMMARY_HEADER)


class Spans:
    """An Agents SDK tracing processor keeping every span in memory."""

    def __init__(self) -> None:
        self.ended: list[Any] = []
        self.traces: list[Any] = []

    def on_trace_start(self, trace: Any) -> None:
        self.traces.append(trace)

    def on_trace_end(self, trace: Any) -> None:
        pass

    def on_span_start(self, span: Any) -> None:
        pass

    def on_span_end(self, span: Any) -> None:
        self.ended.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass

    def folds(self) -> list[Any]:
        return [s for s in self.ended if getattr(s.span_data, "name", None) == "rollmem.fold"]


@pytest.fixture
def spans() -> Any:
    from agents.tracing import set_trace_processors
    from agents.tracing.processors import default_processor

    recorder = Spans()
    set_trace_processors([recorder])
    yield recorder
    set_trace_processors([default_processor()])


def test_each_fold_is_a_span_in_the_sdks_trace(spans: Spans) -> None:
    """With tracing on, each fold is a ``rollmem.fold`` custom span of the run's trace, with
    integer attributes; a failing summarizer's span records the error."""
    counter = CountingWords()
    recorder = Recorder()
    session = RollingSession("traced", max_tokens=40, summarize_fn=recorder, token_counter=counter)
    agent = agent_for(ScriptedModel())

    async def run(turns: range) -> None:
        for turn in turns:
            await Runner.run(agent, f"turn {turn}: weather in city{turn}", session=session)

    asyncio.run(run(range(6)))
    folds = spans.folds()
    assert len(folds) == len(recorder.calls) > 0
    traces = {trace.trace_id for trace in spans.traces}
    results = [summary for summary, _ in recorder.calls[1:]] + [recorder.last]
    for span, (_, evicted), result in zip(folds, recorder.calls, results):
        data = span.span_data.data
        assert span.trace_id in traces
        assert span.parent_id is not None  # inside the run's spans
        assert data["rollmem.fold.messages"] == len(evicted)
        assert data["rollmem.fold.tokens_before"] - data["rollmem.fold.tokens_after"] == sum(
            counter_words(m.token_text()) for m in evicted
        )
        assert data["rollmem.fold.summary_tokens"] == counter_words(result)
        assert all(isinstance(value, int) for value in data.values())
        assert span.error is None

    def broken(summary: str, evicted: Sequence[Message]) -> str:
        raise RuntimeError("summarizer down")

    failing = RollingSession("broken", max_tokens=10, summarize_fn=broken, token_counter=counter)
    with pytest.raises(RuntimeError, match="summarizer down"):
        asyncio.run(Runner.run(agent, "turn 0: a long question about the weather today", session=failing))
    [failed] = spans.folds()[len(folds) :]
    assert failed.error == {"message": "summarizer down", "data": {"type": "RuntimeError"}}


def counter_words(text: str) -> int:
    return len(text.split())

"""RollingConversationManager driven by a real Strands Agent, offline, with a scripted Model subclass."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Optional

import pytest
from tests._optional import need

strands = need("strands", "strands")

from strands import Agent, tool  # noqa: E402
from strands.hooks import MessageAddedEvent  # noqa: E402
from strands.models.model import Model  # noqa: E402
from strands.session.file_session_manager import FileSessionManager  # noqa: E402
from strands.types.exceptions import ContextWindowOverflowException, EventLoopException  # noqa: E402
from tests.conftest import CountingWords as Counter  # noqa: E402

from rollmem import Message  # noqa: E402
from rollmem.adapters import CONTINUATION_TEXT  # noqa: E402
from rollmem.errors import InvalidStateError  # noqa: E402
from rollmem.integrations import strands as strands_module  # noqa: E402
from rollmem.integrations.strands import (  # noqa: E402
    DEFAULT_MAX_TOKENS,
    STATE_KEY,
    SUMMARY_HEADER,
    RollingConversationManager,
    to_rollmem,
)
from rollmem.policies import CacheAwareBudget  # noqa: E402


class Recorder:
    """A summarize_fn that records what it receives and chains the summaries."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[Message]]] = []
        self.fail = False

    def __call__(self, summary: str, evicted: Sequence[Message]) -> str:
        if self.fail:
            raise RuntimeError("summarizer down")
        assert all(isinstance(message, Message) for message in evicted)
        self.calls.append((summary, list(evicted)))
        return f"{summary} +{len(evicted)}".strip()

    @property
    def evicted(self) -> list[Message]:
        return [message for _, messages in self.calls for message in messages]


@tool
def lookup(topic: str) -> str:
    """Facts about a topic."""
    return f"{topic} is a topic with some facts about it"


@tool
def big_report(topic: str) -> str:
    """A long report."""
    return " ".join(f"{topic}-fact-{i}" for i in range(300))


class ScriptedModel(Model):
    """Answers each user turn with rounds of tool calls (parallel ones on every third turn, a long
    chain on every fifth), then a text reply; records every request. With ``limit``, a request of
    more words than that raises Strands' ContextWindowOverflowException, as a provider would."""

    def __init__(self, tool_name: str = "lookup", limit: Optional[int] = None) -> None:
        self.requests: list[list[dict[str, Any]]] = []
        self.tool_name = tool_name
        self.limit = limit
        self.turn = 0
        self.round = 0

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    async def structured_output(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError
        yield  # pragma: no cover

    async def stream(
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> Any:
        if self.limit is not None and words_of(messages) > self.limit:
            raise ContextWindowOverflowException("scripted: input too long")
        self.requests.append(messages)
        last = messages[-1]
        if not any("toolResult" in block for block in last["content"]):
            self.turn += 1
            self.round = 0
        self.round += 1
        rounds = 4 if self.turn % 5 == 0 else 1
        yield {"messageStart": {"role": "assistant"}}
        if self.round > rounds:
            yield {"contentBlockDelta": {"delta": {"text": f"answer to turn {self.turn}"}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
            return
        calls = 3 if self.turn % 3 == 0 else 1
        for index in range(calls):
            call_id = f"t{self.turn}r{self.round}c{index}"
            yield {
                "contentBlockStart": {"start": {"toolUse": {"toolUseId": call_id, "name": self.tool_name}}}
            }
            yield {
                "contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps({"topic": f"x{self.turn}"})}}}
            }
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}


def words_of(messages: Sequence[dict[str, Any]]) -> int:
    return sum(len(json.dumps(message["content"]).split()) for message in messages)


def make_agent(manager: RollingConversationManager, model: ScriptedModel, **options: Any) -> Agent:
    return Agent(
        model=model,
        tools=[lookup, big_report],
        callback_handler=None,
        conversation_manager=manager,
        **options,
    )


def record_added(agent: Agent) -> list[dict[str, Any]]:
    added: list[dict[str, Any]] = []
    agent.hooks.add_callback(MessageAddedEvent, lambda event: added.append(event.message))
    return added


def check_request(messages: Sequence[dict[str, Any]], *, alternate: bool = True) -> None:
    """A request every provider accepts: opens with a user turn, roles alternate, every toolResult
    answers a toolUse of the message just before, and every toolUse is answered just after."""
    first = messages[0]
    assert first["role"] == "user"
    assert not any("toolResult" in block for block in first["content"])
    if alternate:
        assert all(a["role"] != b["role"] for a, b in zip(messages, messages[1:]))
    for index, message in enumerate(messages):
        uses = {block["toolUse"]["toolUseId"] for block in message["content"] if "toolUse" in block}
        results = {block["toolResult"]["toolUseId"] for block in message["content"] if "toolResult" in block}
        if results:
            before = messages[index - 1]["content"]
            assert results == {block["toolUse"]["toolUseId"] for block in before if "toolUse" in block}
        if uses:
            after = messages[index + 1]["content"]
            assert uses == {block["toolResult"]["toolUseId"] for block in after if "toolResult" in block}


def check_exactly_once(
    added: Sequence[dict[str, Any]], recorder: Recorder, manager: RollingConversationManager
) -> None:
    """Every added message reached the summarizer exactly once, in order, or is still kept."""
    kept = len(manager.memory.buffer)
    assert [message.id for message in manager.memory.buffer] == [
        m["tracking_id"] for m in added[len(added) - kept :]
    ]
    assert recorder.evicted == to_rollmem(added[: len(added) - kept])
    assert manager.removed_message_count == len(added) - kept


def test_a_long_tool_calling_conversation() -> None:
    counter = Counter()
    recorder = Recorder()
    manager = RollingConversationManager(60, recorder, counter)
    model = ScriptedModel()
    agent = make_agent(manager, model)
    added = record_added(agent)
    for turn in range(1, 31):
        result = agent(f"question {turn} about x{turn}")
        assert str(result).strip() == f"answer to turn {turn}"
        assert sum(manager.memory.costs()) <= 60  # the kept messages are within the budget

    assert len(recorder.calls) > 10
    check_exactly_once(added, recorder, manager)
    assert counter.calls == len(added)  # each message counted once, the summary never
    for request in model.requests:
        check_request(request)
    # the summary opens the requests once there is one: in a user turn of its own when a long tool
    # chain left the kept messages opening with the assistant, else in the kept first user turn
    summary_turns = [r for r in model.requests if r[0]["content"][0]["text"].startswith(SUMMARY_HEADER)]
    assert len(summary_turns) > len(model.requests) // 2
    alone = [r for r in summary_turns if len(r[0]["content"]) == 1]
    merged = [r for r in summary_turns if len(r[0]["content"]) == 2]
    assert alone
    assert merged
    assert all(r[1]["role"] == "assistant" for r in alone)
    # between two folds a request extends the one before it: a cached prompt prefix stays valid
    steady = [
        (a, b) for a, b in zip(model.requests, model.requests[1:]) if a[0]["content"][0] == b[0]["content"][0]
    ]
    assert len(steady) > 20
    assert all(after[: len(before)] == before for before, after in steady)
    assert [calls for calls in (r[1]["content"] for r in alone) if any("toolUse" in b for b in calls)]
    # what the model saw last: the summary turn, then the kept messages as the agent added them
    assert agent.messages[0]["content"][0]["text"] == SUMMARY_HEADER + manager.summary
    stored = [m for m in added if m["tracking_id"] in {message.id for message in manager.memory.buffer}]
    tail = agent.messages[1:]
    assert tail == stored[len(stored) - len(tail) :]


def test_a_model_call_converts_and_counts_only_the_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each model call converts (and counts) only the messages added since the previous one,
    however long the conversation: O(new messages) work per call, not O(buffer)."""
    converted = [0]
    units = strands_module._SPEC.units

    def counted(natives: Any, track: Any) -> list[Message]:
        converted[0] += len(natives)
        return units(natives, track)

    monkeypatch.setattr(strands_module._SPEC, "units", counted)
    counter = Counter()
    manager = RollingConversationManager(150, Recorder(), counter)
    model = ScriptedModel()
    agent = make_agent(manager, model)
    seen = 0  # messages of the conversation counted so far
    per_call: list[tuple[int, int, int]] = []
    for turn in range(40):
        before = (len(model.requests), converted[0], counter.calls)
        agent(f"question {turn} about x{turn}")
        calls = len(model.requests) - before[0]
        per_call.append((calls, converted[0] - before[1], counter.calls - before[2]))
        seen = manager.removed_message_count + len(manager.memory.buffer)
    assert manager.removed_message_count > 100
    # Over a turn, the messages converted and counted are the turn's own (the question, each tool
    # round's call and results, the answer), the same early and late.
    for calls, count, counted_calls in per_call:
        assert count == counted_calls == 2 * calls
    assert seen == sum(count for _, count, _ in per_call)


def test_parallel_results_stay_with_their_calls_for_the_summarizer() -> None:
    recorder = Recorder()
    manager = RollingConversationManager(30, recorder)
    model = ScriptedModel()
    agent = make_agent(manager, model)
    for turn in range(1, 7):
        agent(f"question {turn}")
    # turn 3 ran three parallel calls: one assistant message with three calls, then three results
    evicted = recorder.evicted
    index = next(i for i, m in enumerate(evicted) if len(m.tool_calls) == 3)
    calls = evicted[index].tool_calls
    assert [m.role for m in evicted[index + 1 : index + 4]] == ["tool"] * 3
    assert [m.tool_call_id for m in evicted[index + 1 : index + 4]] == [call.id for call in calls]
    assert calls[0].name == "lookup"
    assert json.loads(calls[0].arguments) == {"topic": "x3"}
    assert evicted[index + 1].content == "x3 is a topic with some facts about it"


def test_restarts_with_a_file_session_manager(tmp_path: Path) -> None:
    counter = Counter()
    recorder = Recorder()
    added: list[dict[str, Any]] = []
    model = ScriptedModel()
    managers = []
    for run in range(3):  # three processes, one after the other, on the same session
        manager = RollingConversationManager(60, recorder, counter)
        managers.append(manager)
        session = FileSessionManager(session_id="chat-1", storage_dir=str(tmp_path))
        agent = make_agent(manager, model, session_manager=session)
        if run:
            assert agent.messages[0]["content"][0]["text"] == SUMMARY_HEADER + recorder.calls[-1][0] + (
                f" +{len(recorder.calls[-1][1])}"
            )
            assert manager.summary == managers[run - 1].summary
            assert manager.removed_message_count == managers[run - 1].removed_message_count
            assert type(manager.memory.policy) is CacheAwareBudget  # the state holds no setting
        calls_before = counter.calls
        restored = len(manager.memory.buffer) + len(agent.messages) - (1 if run else 0)
        new = record_added(agent)
        for turn in range(1, 9):
            agent(f"run {run} question {turn}")
        added.extend(new)
        # what this run added was counted once; of the restored messages, only those added since
        # the last fold of the run before (the state holds the costs of what a fold kept)
        assert 0 <= counter.calls - calls_before - len(new) <= restored
    check_exactly_once(added, recorder, managers[-1])
    assert len(added) <= counter.calls < len(added) + 3 * 12
    for request in model.requests:
        check_request(request)


def test_a_restored_manager_with_another_counter_counts_again(tmp_path: Path) -> None:
    recorder = Recorder()
    first = RollingConversationManager(60, recorder, Counter())
    agent = make_agent(
        first, ScriptedModel(), session_manager=FileSessionManager("s", storage_dir=str(tmp_path))
    )
    for turn in range(6):
        agent(f"question {turn}")
    kept = len(first.memory.buffer)

    calls: list[str] = []

    def counting(text: str) -> int:
        calls.append(text)
        return len(text.split())

    second = RollingConversationManager(60, recorder, counting)
    restored = make_agent(
        second, ScriptedModel(), session_manager=FileSessionManager("s", storage_dir=str(tmp_path))
    )
    assert second.summary == first.summary
    second.apply_management(restored)
    assert len(calls) == kept  # a counter without an identity: the stored costs are not trusted
    assert second.memory.costs() == first.memory.costs()


def test_public_names() -> None:
    from rollmem.integrations import strands as module

    assert module.__all__ == [
        "DEFAULT_MAX_TOKENS",
        "STATE_KEY",
        "SUMMARY_HEADER",
        "TRUNCATION_NOTE",
        "RollingConversationManager",
        "cached_prefix",
        "to_rollmem",
    ]


def test_the_defaults() -> None:
    manager = RollingConversationManager()
    assert DEFAULT_MAX_TOKENS == 2000
    assert manager.memory.max_tokens == DEFAULT_MAX_TOKENS
    assert type(manager.memory.policy) is CacheAwareBudget  # the cache-aware fold (test_defaults.py)
    assert manager.memory.target_tokens == 1024  # what a cacheable request needs, above the floor
    assert manager.summarize_fn is None


def test_arguments_are_checked_as_rolling_memory_checks_them() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        RollingConversationManager(0)
    with pytest.raises(TypeError, match="summarize_fn"):
        RollingConversationManager(10, "not callable")  # type: ignore[arg-type]


def test_without_a_summarizer_old_units_are_dropped_and_a_user_turn_still_opens() -> None:
    manager = RollingConversationManager(40)
    model = ScriptedModel()
    agent = make_agent(manager, model)
    for turn in range(1, 11):
        agent(f"question {turn}")
    assert manager.summary == ""
    assert manager.removed_message_count > 0
    for request in model.requests:
        check_request(request)
    opened = [r for r in model.requests if r[0]["content"] == [{"text": CONTINUATION_TEXT}]]
    assert opened  # turn 5's long chain: the kept messages opened with the assistant


def test_a_failing_summarizer_loses_nothing_and_the_next_call_folds() -> None:
    recorder = Recorder()
    manager = RollingConversationManager(60, recorder)
    model = ScriptedModel()
    agent = make_agent(manager, model)
    added = record_added(agent)
    for turn in range(1, 5):
        agent(f"question {turn}")
    folded = manager.removed_message_count
    summary = manager.summary
    recorder.fail = True
    errors: list[Exception] = []
    for turn in range(5, 10):  # the first run that folds fails
        try:
            agent(f"question {turn}")
        except EventLoopException as error:  # Strands wraps what a hook raises
            errors.append(error)
            break
    assert [str(error.__cause__) for error in errors] == ["summarizer down"]
    assert manager.summary == summary
    assert manager.removed_message_count == folded
    recorder.fail = False
    agent("question 10")
    assert manager.removed_message_count > folded
    check_exactly_once(added, recorder, manager)
    for request in model.requests:  # the failed run left its prompt: two user turns in a row
        check_request(request, alternate=False)


def test_overflow_folds_then_truncates_the_largest_result_of_the_newest_unit() -> None:
    recorder = Recorder()
    manager = RollingConversationManager(5000, recorder)
    model = ScriptedModel("big_report", limit=400)
    agent = make_agent(manager, model)
    added = record_added(agent)
    for turn in range(1, 5):  # turn 3 calls big_report three times at once
        assert str(agent(f"question {turn}")).strip() == f"answer to turn {turn}"
    for request in model.requests:
        check_request(request)
        assert words_of(request) <= 400
    notes = [r for r in model.requests if "[rollmem: tool result truncated from" in json.dumps(r)]
    assert notes
    check_exactly_once(added, recorder, manager)
    # the summarizer received every result whole, never a truncated one
    results = [m for m in recorder.evicted if m.role == "tool"]
    assert results
    assert all(m.content.endswith("-fact-299") for m in results)


def message(role: str, *blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "content": list(blocks)}


def use(call_id: str, name: str = "lookup") -> dict[str, Any]:
    return {"toolUse": {"toolUseId": call_id, "name": name, "input": {"topic": call_id}}}


def result(call_id: str, text: str, status: str = "success") -> dict[str, Any]:
    return {"toolResult": {"toolUseId": call_id, "status": status, "content": [{"text": text}]}}


def test_reduce_context_truncates_the_large_result_not_the_small_one() -> None:
    big = " ".join(f"w{i}" for i in range(200))
    recorder = Recorder()
    manager = RollingConversationManager(5000, recorder)
    agent = make_agent(manager, ScriptedModel())
    agent.messages = [
        message("user", {"text": "first question"}),
        message("assistant", use("a")),
        message("user", result("a", "small old result")),
        message("assistant", {"text": "first answer"}),
        message("user", {"text": "second question"}),
        message("assistant", use("b"), use("c", "big_report")),
        message("user", result("b", "small new result"), result("c", big)),
    ]
    overflow = ContextWindowOverflowException("too long")
    manager.reduce_context(agent, e=overflow)  # folds the older units first
    assert [m.content for m in recorder.evicted][:1] == ["first question"]
    assert "small old result" in [m.content for m in recorder.evicted]
    while len(manager.memory.buffer) > 2:
        manager.reduce_context(agent, e=overflow)
    manager.reduce_context(agent, e=overflow)  # only the newest unit is left: its largest result is cut
    results = agent.messages[-1]["content"]
    assert results[0] == result("b", "small new result")
    text = results[1]["toolResult"]["content"][0]["text"]
    assert text.startswith("w0 w1 ")
    assert len(text.split()) <= 100 + 14
    assert text.endswith("[rollmem: tool result truncated from 200 to 100 tokens to fit the context window]")
    assert results[1]["toolResult"]["status"] == "success"
    assert agent.messages[0]["role"] == "user"
    check_request(agent.messages)
    errors: list[Exception] = []
    for _ in range(20):  # keeps halving the largest result, then says it cannot reduce further
        try:
            manager.reduce_context(agent, e=overflow)
        except ContextWindowOverflowException as error:
            errors.append(error)
            break
    assert len(errors) == 1
    assert errors[0].__cause__ is overflow
    before = [dict(m) for m in agent.messages]
    manager.reduce_context(agent)  # asked without an overflow: returns, changing nothing
    assert agent.messages == before


def test_a_single_oversized_user_message_raises_the_frameworks_overflow_error() -> None:
    model = ScriptedModel(limit=50)
    agent = make_agent(RollingConversationManager(10, Recorder()), model)
    with pytest.raises(ContextWindowOverflowException):
        agent(" ".join(["word"] * 80))


def test_to_rollmem() -> None:
    messages = [
        message("user", {"text": "look"}, {"image": {"format": "png", "source": {"bytes": b"\x89"}}}),
        message(
            "assistant",
            {"reasoningContent": {"reasoningText": {"text": "think", "signature": "s"}}},
            {"text": "calling"},
            use("a"),
        ),
        message(
            "user",
            {"toolResult": {"toolUseId": "a", "status": "error", "content": [{"json": {"ok": False}}]}},
            {"text": "and more"},
        ),
    ]
    messages[0]["tracking_id"] = "t0"
    converted = to_rollmem(messages)
    assert [str(m) for m in converted] == [
        "user: look\n[image: png]",
        'assistant: think\ncalling [tool calls: lookup({"topic":"a"})]',
        'tool: {"ok": false}',
        "user: and more",
    ]
    assert converted[0].id == "t0"
    assert converted[2].tool_call_id == "a"
    assert converted[2].metadata["is_error"] is True
    with pytest.raises(ValueError, match=r"messages\[1\]\.content: toolUse in a 'user' message"):
        to_rollmem([message("user", {"text": "x"}), message("user", use("a"))])
    with pytest.raises(TypeError, match=r"messages\[0\]\.content"):
        to_rollmem([{"role": "user", "content": "text"}])


def test_bad_state_is_refused_and_nothing_changes() -> None:
    manager = RollingConversationManager(60, Recorder())
    good = manager.get_state()
    assert good[STATE_KEY] == {
        "version": 1,
        "summary": "",
        "folded": 0,
        "recent": [],
        "first": None,
        "pinned": [],
        "counter": "words",
        "costs": [],
    }
    bad = {**good, STATE_KEY: {**good[STATE_KEY], "version": 7}}
    with pytest.raises(InvalidStateError, match=r"rollmem\.version: unsupported state version 7"):
        manager.restore_from_session(bad)
    bad = {**good, STATE_KEY: {**good[STATE_KEY], "summary": "s", "costs": [3, -1]}}
    with pytest.raises(InvalidStateError, match=r"rollmem\.costs\[1\]: expected an int >= 0, got -1"):
        manager.restore_from_session(bad)
    with pytest.raises(
        InvalidStateError, match="__name__: expected 'RollingConversationManager', got 'Sliding"
    ):
        manager.restore_from_session(
            {"__name__": "SlidingWindowConversationManager", "removed_message_count": 3}
        )
    assert manager.summary == ""
    assert manager.removed_message_count == 0
    head = manager.restore_from_session({**good, STATE_KEY: {**good[STATE_KEY], "summary": "s"}})
    assert head is not None
    assert [(m["role"], m["content"]) for m in head] == [("user", [{"text": SUMMARY_HEADER + "s"}])]
    assert manager.summary == "s"


def test_a_replaced_message_list_starts_over_keeping_the_summary() -> None:
    recorder = Recorder()
    manager = RollingConversationManager(40, recorder)
    model = ScriptedModel()
    agent = make_agent(manager, model)
    for turn in range(1, 5):
        agent(f"question {turn}")
    summary = manager.summary
    assert summary
    agent.messages = []
    agent("question 5")
    assert model.requests[-2][0]["content"][0]["text"] == SUMMARY_HEADER + summary
    for request in model.requests:
        check_request(request)


def test_cached_prefix_puts_the_summary_in_the_first_user_turn() -> None:
    from rollmem.integrations.strands import SUMMARY_HEADER, cached_prefix

    user, reply = Message("user", "hi"), Message("assistant", "hello")
    assert cached_prefix("", [user, reply]) == [user, reply]
    assert cached_prefix("s", [user, reply]) == [Message("user", f"{SUMMARY_HEADER}s\nhi"), reply]
    result = Message("tool", "18C", tool_call_id="c1")
    assert cached_prefix("s", [reply, result]) == [Message("user", f"{SUMMARY_HEADER}s"), reply, result]


def test_overflow_folds_every_older_unit_before_truncating_the_newest_result() -> None:
    """An overflow on a request whose newest unit is a huge tool result: the older units (earlier
    turns, then the turn's own question, sent behind the summary turn) are folded first, even
    when the newest messages already hold under half the tokens; the newest result is truncated
    only once nothing older is left (strands #981)."""
    big = " ".join(f"w{i}" for i in range(150))
    recorder = Recorder()
    manager = RollingConversationManager(5000, recorder)
    agent = make_agent(manager, ScriptedModel())
    agent.messages = [
        message("user", {"text": " ".join(["older"] * 170)}),
        message("assistant", {"text": "first answer"}),
        message("user", {"text": "second question"}),
        message("assistant", use("b", "big_report")),
        message("user", result("b", big)),
    ]
    overflow = ContextWindowOverflowException("too long")
    manager.reduce_context(agent, e=overflow)  # down to half: the oldest turn
    assert [m.content for m in recorder.evicted] == [" ".join(["older"] * 170)]
    assert "truncated" not in json.dumps(agent.messages)
    manager.reduce_context(agent, e=overflow)  # then everything older than the newest unit
    assert [m.content for m in recorder.evicted][1:] == ["first answer", "second question"]
    assert "truncated" not in json.dumps(agent.messages)
    assert agent.messages[0]["content"] == [{"text": SUMMARY_HEADER + manager.summary}]
    manager.reduce_context(agent, e=overflow)  # nothing older: the result is cut
    assert "[rollmem: tool result truncated from 150 to 75 tokens" in json.dumps(agent.messages[-1])
    check_request(agent.messages)


class AsyncRecorder(Recorder):
    """A coroutine summarize_fn, awaiting on the loop it runs on."""

    def __init__(self) -> None:
        super().__init__()
        self.loops: set[int] = set()

    async def __call__(self, summary: str, evicted: Sequence[Message]) -> str:  # type: ignore[override]
        import asyncio

        self.loops.add(id(asyncio.get_running_loop()))
        await asyncio.sleep(0)
        return super().__call__(summary, evicted)


def test_a_coroutine_summarizer_runs_on_the_agents_loop() -> None:
    """A coroutine summarize_fn folds in the BeforeModelCallEvent hook, awaited on Strands' own
    loop, whether the agent is called synchronously or awaited inside a running loop."""
    import asyncio

    recorder = AsyncRecorder()
    manager = RollingConversationManager(60, recorder)
    model = ScriptedModel()
    agent = make_agent(manager, model)
    added = record_added(agent)
    for turn in range(1, 9):
        agent(f"question {turn} about x{turn}")

    async def more() -> None:
        for turn in range(9, 13):
            await agent.invoke_async(f"question {turn} about x{turn}")

    asyncio.run(more())
    assert len(recorder.calls) > 3
    assert recorder.loops
    folded = manager.removed_message_count
    assert folded > 10
    assert recorder.evicted == to_rollmem(added[:folded])  # each message once, in order
    # the rest is kept (the newest answer is taken in at the next call)
    assert [m.id for m in manager.memory.buffer] == [m["tracking_id"] for m in added[folded:-1]]
    for request in model.requests:
        check_request(request)
        assert words_of(request) < 60 * 4


def test_a_coroutine_summarizer_folds_an_overflow_before_the_retried_call() -> None:
    recorder = AsyncRecorder()
    manager = RollingConversationManager(5000, recorder)
    model = ScriptedModel("big_report", limit=400)
    agent = make_agent(manager, model)
    for turn in range(1, 5):
        assert str(agent(f"question {turn}")).strip() == f"answer to turn {turn}"
    assert recorder.calls
    for request in model.requests:
        check_request(request)
        assert words_of(request) <= 400

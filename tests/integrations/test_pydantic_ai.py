"""rollmem.integrations.pydantic_ai: a history processor driven through real pydantic-ai agents.

The agents run offline on pydantic-ai's ``FunctionModel``: each user prompt gets a response with a
tool call to a real tool, then a text answer, and the model function records what it received.
"""

from __future__ import annotations

import asyncio
import importlib
import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from tests._optional import need

need("pydantic-ai", "pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.capabilities import ProcessHistory  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    CompactionPart,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_core import to_jsonable_python  # noqa: E402
from tests.conftest import CountingWords  # noqa: E402

from rollmem import Message, RollingMemory, ToolCall  # noqa: E402
from rollmem.adapters import CONTINUATION_TEXT, CONTINUATION_TEXT_PLAIN  # noqa: E402
from rollmem.errors import InvalidStateError  # noqa: E402
from rollmem.integrations.pydantic_ai import STATE_PREFIX, RollingHistory, find_summary, rolling_history  # noqa: E402
from rollmem.sessions import Sessions  # noqa: E402
from rollmem.stores import LogEntry, LogWrite, MemoryStore, SQLiteStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS_PAGE = ROOT / "docs" / "pages" / "integrations" / "pydantic-ai.md"


def one(text: str) -> int:
    """Every message costs one token: budgets count messages."""
    return 1


def words(text: str) -> int:
    return len(text.split())


def is_summary(part: Any) -> bool:
    """A summary part rollmem wrote: a marked ``CompactionPart`` (or, on pydantic-ai versions
    without request-side compaction, a marked ``SystemPromptPart``)."""
    if isinstance(part, CompactionPart):
        meta = getattr(part, "metadata", None)
        return isinstance(meta, dict) and "rollmem" in meta
    return isinstance(part, SystemPromptPart) and (part.dynamic_ref or "").startswith("rollmem.summary:")


def summaries(messages: Sequence[ModelMessage]) -> list[str]:
    return [part.content for message in messages for part in message.parts if is_summary(part)]


def as_rollmem(messages: Sequence[ModelMessage]) -> list[Message]:
    """What the model received, as rollmem messages (the documented conversion), summary and
    rollmem's opening user turn (the provider rule's, when the kept part opens otherwise) left out."""
    result = []
    for message in messages:
        if isinstance(message, ModelResponse):
            text = "\n".join(part.content for part in message.parts if isinstance(part, TextPart))
            calls = [
                ToolCall(part.tool_call_id, part.tool_name, part.args_as_json_str())
                for part in message.parts
                if isinstance(part, ToolCallPart)
            ]
            result.append(Message("assistant", text, tool_calls=calls))
            continue
        for part in message.parts:
            if is_summary(part):
                continue
            if isinstance(part, SystemPromptPart):
                result.append(Message("system", part.content))
            elif isinstance(part, UserPromptPart):
                assert isinstance(part.content, str)
                if part.content not in (CONTINUATION_TEXT, CONTINUATION_TEXT_PLAIN):
                    result.append(Message("user", part.content))
            elif isinstance(part, ToolReturnPart):
                result.append(Message("tool", part.model_response_str(), tool_call_id=part.tool_call_id))
            else:
                raise AssertionError(f"unexpected part {part!r}")
    return result


def assert_no_orphans(messages: Sequence[ModelMessage]) -> None:
    """Every tool result follows its call, and every call before the last request has its result."""
    called: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                called.add(part.tool_call_id)
            elif isinstance(part, ToolReturnPart):
                assert part.tool_call_id in called, f"orphan tool result {part.tool_call_id}"
                answered.add(part.tool_call_id)
    assert called == answered, f"calls without results: {sorted(called - answered)}"


class Chat:
    """One conversation with an agent whose history goes through ``processor``.

    Turn ``n`` sends ``u{n} ...``; the model answers ``a{n} calls`` with a call ``c{n}`` to the
    ``lookup`` tool (result ``r-q{n}``), then ``a{n} done``. ``seen`` holds what the model received
    at every request, ``summary_seen`` the summarizer's latest result at that moment.
    """

    def __init__(
        self,
        processor: RollingHistory,
        *,
        summary_now: Callable[[], Optional[str]] = lambda: None,
        system_prompt: Optional[str] = "Be brief.",
        roundtrip: bool = False,
        history: Optional[list[ModelMessage]] = None,
        first_turn: int = 0,
        use_async: bool = False,
    ) -> None:
        self.use_async = use_async
        self.seen: list[list[ModelMessage]] = []
        self.summary_seen: list[Optional[str]] = []
        self.turn = first_turn
        self.history = history
        self.roundtrip = roundtrip
        self._summary_now = summary_now

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self.seen.append(list(messages))
            self.summary_seen.append(self._summary_now())
            n = self.turn
            if any(isinstance(part, UserPromptPart) for part in messages[-1].parts):
                return ModelResponse(
                    parts=[
                        TextPart(f"a{n} calls"),
                        ToolCallPart("lookup", {"q": f"q{n}"}, tool_call_id=f"c{n}"),
                    ]
                )
            return ModelResponse(parts=[TextPart(f"a{n} done")])

        kwargs: dict[str, Any] = {"capabilities": [ProcessHistory(processor)]}
        if system_prompt is not None:
            kwargs["system_prompt"] = system_prompt
        self.agent = Agent(FunctionModel(model), **kwargs)

        @self.agent.tool_plain
        def lookup(q: str) -> str:
            return f"r-{q}"

    def say(self, extra_words: int = 0) -> None:
        n = self.turn
        prompt = " ".join([f"u{n}"] + ["w"] * extra_words)
        if self.use_async:
            result = asyncio.run(self.agent.run(prompt, message_history=self.history))
        else:
            result = self.agent.run_sync(prompt, message_history=self.history)
        history = result.all_messages()
        if self.roundtrip:  # the app stores the history as JSON between runs
            history = ModelMessagesTypeAdapter.validate_python(to_jsonable_python(history))
        self.history = history
        self.turn += 1


def stored_memory(store: Any, session_id: str) -> RollingMemory:
    """The conversation state as the store holds it: a rollmem session (summary and unfolded
    messages, with their costs)."""
    memory = Sessions(store, lambda: RollingMemory(10_000)).get(session_id)
    assert memory is not None
    return memory


def conversation(turns: range) -> list[str]:
    """Every message of turns ``turns``, in order, up to the last turn's tool result."""
    contents = []
    for n in turns:
        contents += [f"u{n}", f"a{n} calls", f"r-q{n}", f"a{n} done"]
    return contents[:-1]


def check_turns(chat: Chat, max_tokens: int, counter: Callable[[str], int]) -> None:
    for received, summary in zip(chat.seen, chat.summary_seen):
        assert_no_orphans(received)
        found = summaries(received)
        assert found == ([summary] if summary else [])
        if summary:  # first: after the standing system prompt, before every message
            first = received[0].parts
            index = next(i for i, part in enumerate(first) if is_summary(part))
            assert all(isinstance(part, SystemPromptPart) for part in first[:index])
        view = [m for m in as_rollmem(received) if m.role != "system"]
        assert view
        assert view[0].role == "user"
        assert sum(counter(m.token_text()) for m in view) <= max_tokens


def label(message: Message) -> str:
    """The content without the filler words of a user prompt: ``u3 w w`` is ``u3``."""
    return message.content.split(" w")[0]


def check_exactly_once(rec: Any, chat: Chat, turns: range) -> None:
    folded = [label(m) for m in rec.folded]
    assert len(folded) == len(set(folded))
    assert all(m.role != "system" for m in rec.folded)  # neither the system prompt nor a summary
    last = [label(m) for m in as_rollmem(chat.seen[-1]) if m.role != "system"]
    assert folded + last == conversation(turns)
    for index in range(1, len(rec.calls)):  # each call continues the previous summary
        assert rec.calls[index][0] == rec.results[index - 1]


# -- the acceptance check ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_200_turns_within_budget_no_orphans_each_message_summarized_once(
    kind: str, recorder: Any, async_recorder: Any
) -> None:
    rec = recorder if kind == "sync" else async_recorder
    summarize = rec if kind == "sync" else rec.summarize
    processor = rolling_history(10, summarize, one, target_tokens=6)
    chat = Chat(
        processor, summary_now=lambda: rec.results[-1] if rec.results else None, use_async=kind == "async"
    )
    for _ in range(200):
        chat.say()
    assert len(chat.seen) == 400
    check_turns(chat, 10, one)
    check_exactly_once(rec, chat, range(200))
    assert 50 < len(rec.calls) < 200  # target_tokens: several turns per fold
    assert rec.failures == 0
    [session_id] = processor.store.ids()  # type: ignore[union-attr]
    stored = stored_memory(processor.store, session_id)
    assert stored.summary == rec.results[-1]
    assert len(stored.buffer) <= 10  # bounded: the unfolded messages only (one token each here)


@pytest.mark.parametrize(
    ("system_prompt", "roundtrip"), [("Be brief.", False), (None, False), ("Be brief.", True)]
)
def test_word_budget_with_and_without_system_prompt_and_json_history(
    system_prompt: Optional[str], roundtrip: bool, recorder: Any
) -> None:
    processor = rolling_history(40, recorder, words, target_tokens=25)
    chat = Chat(
        processor,
        summary_now=lambda: recorder.results[-1] if recorder.results else None,
        system_prompt=system_prompt,
        roundtrip=roundtrip,
    )
    for n in range(30):
        chat.say(extra_words=n % 5)
    check_turns(chat, 40, words)
    check_exactly_once(recorder, chat, range(30))
    if system_prompt is not None:  # pinned: never folded, always sent first
        for received in chat.seen:
            assert isinstance(received[0].parts[0], SystemPromptPart)
            assert received[0].parts[0].content == system_prompt


def test_history_under_budget_passes_through_untouched(recorder: Any) -> None:
    processor = rolling_history(1000, recorder)
    chat = Chat(processor)
    for _ in range(3):
        chat.say()
    assert recorder.calls == []
    assert summaries(chat.history or []) == []
    assert len(chat.seen[-1]) == 11  # 2 earlier turns of 4 messages, then prompt, call, result


def test_the_written_back_history_starts_with_the_summary(recorder: Any) -> None:
    processor = rolling_history(6, recorder, one)
    chat = Chat(processor, system_prompt=None)
    for _ in range(4):
        chat.say()
    history = chat.history or []
    assert summaries(history) == [recorder.results[-1]]
    assert find_summary(history) == recorder.results[-1]
    assert find_summary(build_turn(0)) is None
    assert is_summary(history[0].parts[0])


def test_without_a_summarizer_evicted_messages_are_dropped() -> None:
    processor = rolling_history(6, None, one, target_tokens=6)  # a target under one turn would
    chat = Chat(processor)  # leave a view opening with the assistant (the alignment rule's exception)
    for _ in range(10):
        chat.say()
    check_turns(chat, 6, one)
    assert all(summaries(received) == [] for received in chat.seen)


# -- state: stores, restarts, conversations ------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_new_processor_on_the_same_store_continues(
    backend: str, tmp_path: Path, make_recorder: Callable[[], Any]
) -> None:
    store: Any = MemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "state.db")
    first, second = make_recorder(), make_recorder()
    chat = Chat(
        rolling_history(8, first, one, store=store),
        summary_now=lambda: first.results[-1] if first.results else None,
    )
    for _ in range(10):
        chat.say()
    [session_id] = store.ids(STATE_PREFIX)
    stored_summary = first.results[-1]

    # A restarted app: a new processor and agent on the same store, the history the app kept.
    later = Chat(
        rolling_history(8, second, one, store=store),
        summary_now=lambda: second.results[-1] if second.results else stored_summary,
        history=chat.history,
        first_turn=10,
    )
    for _ in range(10):
        later.say()
    assert second.calls[0][0] == stored_summary
    check_turns(later, 8, one)
    folded = [m.content for m in first.folded] + [m.content for m in second.folded]
    last = [m.content for m in as_rollmem(later.seen[-1]) if m.role != "system"]
    assert folded + last == conversation(range(20))
    assert store.ids(STATE_PREFIX) == [session_id]
    if backend == "sqlite":
        store.close()


def test_without_stored_state_the_summary_part_in_the_history_is_continued(
    make_recorder: Callable[[], Any],
) -> None:
    first, second = make_recorder(), make_recorder()
    chat = Chat(
        rolling_history(8, first, one), summary_now=lambda: first.results[-1] if first.results else None
    )
    for _ in range(10):
        chat.say()
    later = Chat(  # new processor, new in-process store: only the history carries the summary
        rolling_history(8, second, one),
        summary_now=lambda: second.results[-1] if second.results else first.results[-1],
        history=chat.history,
        first_turn=10,
    )
    for _ in range(5):
        later.say()
    assert second.calls[0][0] == first.results[-1]
    folded = [m.content for m in first.folded] + [m.content for m in second.folded]
    assert len(folded) == len(set(folded))
    check_turns(later, 8, one)


def test_conversations_are_kept_apart(make_recorder: Callable[[], Any]) -> None:
    rec = make_recorder()
    store = MemoryStore()
    processor = rolling_history(6, rec, one, store=store)
    chats = [Chat(processor, summary_now=lambda: None) for _ in range(2)]
    for _ in range(6):
        for chat in chats:
            chat.say()
    assert len(store.ids(STATE_PREFIX)) == 2
    for chat in chats:
        for received in chat.seen:
            assert_no_orphans(received)
        # each conversation's summary holds its own messages only: the turn numbers repeat
        summary = summaries(chat.seen[-1])[0]
        assert summary.count("u0") == 1


def test_a_failing_summarizer_fails_the_run_and_loses_nothing(recorder: Any) -> None:
    processor = rolling_history(6, recorder, one)
    chat = Chat(processor, summary_now=lambda: recorder.results[-1] if recorder.results else None)
    chat.say()
    chat.say()
    recorder.fail = True
    before = chat.history
    with pytest.raises(Exception, match="summarizer down"):
        chat.say()
    assert chat.history is before
    recorder.fail = False
    for _ in range(5):
        chat.say()
    folded = [m.content for m in recorder.folded]
    assert len(folded) == len(set(folded))
    last = [m.content for m in as_rollmem(chat.seen[-1]) if m.role != "system"]
    assert folded + last == conversation(range(7))  # turn 2 failed, then ran again


# -- the processor called directly, as pydantic-ai 1.x does -----------------------------------------


START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def build_turn(n: int, conversation: int = 0) -> list[ModelMessage]:
    """Turn ``n`` of a hand-built history; ``conversation`` shifts the timestamps."""
    stamp = START + timedelta(days=conversation, minutes=n)
    second = timedelta(seconds=1)
    call = ToolCallPart("lookup", {"q": f"q{n}"}, tool_call_id=f"c{n}")
    return [
        ModelRequest(parts=[UserPromptPart(f"u{n}", timestamp=stamp)], timestamp=stamp),
        ModelResponse(parts=[TextPart(f"a{n} calls"), call], timestamp=stamp + second),
        ModelRequest(
            parts=[ToolReturnPart("lookup", f"r-q{n}", tool_call_id=f"c{n}", timestamp=stamp + 2 * second)],
            timestamp=stamp + 2 * second,
        ),
        ModelResponse(parts=[TextPart(f"a{n} done")], timestamp=stamp + 3 * second),
    ]


@pytest.mark.parametrize("write_back", [False, True])
def test_without_conversation_id_whole_or_processed_history(write_back: bool, recorder: Any) -> None:
    """No ``RunContext.conversation_id``: the app passes its whole history each time, or the
    processed one; either way each message is summarized once, also beyond the 256 folded parts
    whose fingerprints the state keeps."""
    processor = rolling_history(6, recorder, one)
    history: list[ModelMessage] = []
    for n in range(100):
        history = history + build_turn(n)
        output = asyncio.run(processor(None, history))
        assert_no_orphans(output)
        assert len(list(as_rollmem(output))) <= 6
        if write_back:
            history = output
    folded = [m.content for m in recorder.folded]
    assert len(folded) == len(set(folded))
    kept = [m.content for m in as_rollmem(output)]
    assert folded + kept == [*conversation(range(100)), "a99 done"]


def test_histories_without_conversation_id_do_not_share_state(recorder: Any) -> None:
    processor = rolling_history(4, recorder, one, target_tokens=4)
    first = build_turn(0) + build_turn(1)
    second = build_turn(0, conversation=1) + build_turn(1, conversation=1)  # same text, other timestamps
    asyncio.run(processor(None, first))
    asyncio.run(processor(None, second))
    assert [batch for _, batch in recorder.texts] == [["u0", "a0 calls", "r-q0", "a0 done"]] * 2


def test_a_summary_merged_into_the_first_user_request_is_recognised(recorder: Any) -> None:
    processor = rolling_history(4, recorder, one)
    output = asyncio.run(processor(None, build_turn(0) + build_turn(1)))
    assert is_summary(output[0].parts[0])
    merged = [ModelRequest(parts=[*output[0].parts, *output[1].parts]), *output[2:]]
    again = asyncio.run(processor(None, merged))
    assert again is merged  # recognised, nothing new to fold: passed through
    assert len(recorder.calls) == 1


def test_two_runs_racing_on_one_conversation_commit_one_fold(async_recorder: Any) -> None:
    """Both fold the same messages; the second save loses the compare-and-set, reloads, finds them
    folded, and keeps the winner's summary."""
    store = MemoryStore()
    processor = rolling_history(4, async_recorder.summarize, one, target_tokens=4, store=store)

    class Ctx:
        conversation_id = "race"

    history = build_turn(0) + build_turn(1)

    async def race() -> list[list[ModelMessage]]:
        return list(await asyncio.gather(processor(Ctx(), history), processor(Ctx(), history)))

    first, second = asyncio.run(race())
    assert [batch for _, batch in async_recorder.texts] == [["u0", "a0 calls", "r-q0", "a0 done"]] * 2
    stored = stored_memory(store, STATE_PREFIX + "race").summary
    assert stored == "u0|a0 calls|r-q0|a0 done"
    assert find_summary(first) == find_summary(second) == stored
    assert as_rollmem(first) == as_rollmem(second)


def test_bad_stored_state_is_reported_with_the_session(recorder: Any) -> None:
    store = MemoryStore()
    processor = rolling_history(4, recorder, one, store=store)

    class Ctx:
        conversation_id = "conv-1"

    store.write(
        STATE_PREFIX + "conv-1",
        LogWrite("", (LogEntry('{"role": "user", "content": 3}', 1),), summary="", create=True),
    )
    with pytest.raises(
        InvalidStateError, match=r"session 'pydantic-ai:conv-1': buffer\[0\]\.content: expected str, got int"
    ):
        asyncio.run(processor(Ctx(), build_turn(0) + build_turn(1)))


def test_only_the_standing_system_prompt_is_pinned(recorder: Any) -> None:
    """System prompt parts that open the history stay; one sent later in the conversation is an
    ordinary message: it is summarized when its turn leaves."""
    processor = rolling_history(6, recorder, one)
    history: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart("standing")]), *build_turn(0)]
    history.append(ModelRequest(parts=[SystemPromptPart("later"), UserPromptPart("u1")]))
    for n in range(1, 4):
        history = asyncio.run(processor(None, [*history, *build_turn(n)[1:]]))
        history.append(ModelRequest(parts=[UserPromptPart(f"u{n + 1}")]))
    assert history[0].parts[0] == SystemPromptPart("standing", timestamp=history[0].parts[0].timestamp)
    folded = [(m.role, m.content, m.pinned) for m in recorder.folded]
    assert ("system", "later", False) in folded
    assert all(content != "standing" for _, content, _ in folded)


def test_the_summarizer_gets_converted_messages(recorder: Any) -> None:
    processor = rolling_history(2, recorder, one)
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(["look:", ImageUrl("https://example.com/cat.png")])]),
        ModelResponse(parts=[ThinkingPart("hmm"), TextPart("a cat"), ToolCallPart("save", {"x": 1}, "k1")]),
        ModelRequest(parts=[ToolReturnPart("save", {"ok": True}, "k1")]),
        ModelResponse(parts=[TextPart("saved")]),
        ModelRequest(parts=[UserPromptPart("next")]),
    ]
    output = asyncio.run(processor(None, history))
    [(summary, batch)] = recorder.calls
    assert summary == ""
    assert [m.to_dict() for m in batch] == [
        {"role": "user", "content": "look:\n[image-url: https://example.com/cat.png]"},
        {
            "role": "assistant",
            "content": "a cat",
            "tool_calls": [{"id": "k1", "name": "save", "arguments": '{"x":1}'}],
        },
        {"role": "tool", "content": '{"ok":true}', "tool_call_id": "k1", "metadata": {"name": "save"}},
        {"role": "assistant", "content": "saved"},
    ]
    assert output[1:] == history[-1:]


def test_a_history_that_is_not_model_messages_is_refused(recorder: Any) -> None:
    processor = rolling_history(2, recorder, one)
    with pytest.raises(TypeError, match=r"messages\[1\]: expected ModelRequest or ModelResponse, got dict"):
        asyncio.run(processor(None, [*build_turn(0)[:1], {"kind": "request"}]))


# -- construction, imports ---------------------------------------------------------------------------


def test_bad_arguments_raise_at_once() -> None:
    with pytest.raises(ValueError, match="max_tokens must be > 0"):
        rolling_history(0)
    with pytest.raises(ValueError, match="target_tokens must be <= max_tokens"):
        rolling_history(10, target_tokens=20)
    with pytest.raises(TypeError, match="summarize_fn: expected a callable"):
        rolling_history(10, "nope")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store: expected a rollmem AsyncLogStore or LogStore, got dict"):
        rolling_history(10, store={})  # type: ignore[arg-type]


# -- the documentation page ----------------------------------------------------------------------------


def _doc_blocks() -> list[tuple[int, str]]:
    text = DOCS_PAGE.read_text(encoding="utf-8")
    pattern = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
    return [(text.count("\n", 0, match.start()) + 1, match.group(1)) for match in pattern.finditer(text)]


def test_docs_page_has_a_runnable_example() -> None:
    blocks = _doc_blocks()
    assert blocks
    assert blocks[0][1].startswith("# needs: pydantic_ai\n")


@pytest.mark.parametrize(
    ("line", "code"), _doc_blocks(), ids=lambda value: f"line{value}" if isinstance(value, int) else ""
)
def test_docs_page_block_runs(line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    needs = re.match(r"# needs: ([\w.]+)\n", code)
    if needs:  # e.g. pydantic_ai.conversation: pydantic-ai 2.68, which Python 3.10 does not get
        pytest.importorskip(needs.group(1))
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{DOCS_PAGE.name}:{line}", "exec"), {"__name__": "__docs__"})


@pytest.mark.parametrize("roundtrip", [False, True])
def test_each_message_is_counted_once_per_conversation_across_restarts(
    roundtrip: bool, tmp_path: Path, make_recorder: Callable[[], Any]
) -> None:
    """A request counts only the parts new to the conversation, also with a new processor on the
    same store and a history serialized between runs: the costs live in the store."""
    store = SQLiteStore(tmp_path / "counted.db")
    counter = CountingWords()
    chat = Chat(rolling_history(12, make_recorder(), counter, store=store), roundtrip=roundtrip)
    for _ in range(12):
        chat.say()
    later_counter = CountingWords()
    later = Chat(
        rolling_history(12, make_recorder(), later_counter, store=store),
        roundtrip=roundtrip,
        history=chat.history,
        first_turn=12,
    )
    for _ in range(12):
        later.say()
    counted = [text.split("\n")[0] for text in counter.texts + later_counter.texts]  # without the calls
    # The standing system prompt, then every message once, in order (the last answer never reaches
    # a model request).
    assert counted == ["Be brief.", *conversation(range(24))]
    store.close()


class CountingParts:
    """Counts the request parts the processor takes apart, by wrapping the module's own
    ``_summary_key`` (called once per request part it reads), and the texts counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from rollmem.integrations import pydantic_ai

        self.parts = 0
        self.counted = 0
        original = pydantic_ai._summary_key

        def summary_key(part: Any) -> Any:
            self.parts += 1
            return original(part)

        monkeypatch.setattr(pydantic_ai, "_summary_key", summary_key)

    def counter(self, text: str) -> int:
        self.counted += 1
        return 1

    def take(self) -> tuple[int, int]:
        """``(parts read, texts counted)`` since the last call."""
        result = (self.parts, self.counted)
        self.parts = self.counted = 0
        return result


class WritesStore(MemoryStore):
    """A :class:`MemoryStore` recording, per write, the entries it appends and whether it replaces
    the whole log."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[int, bool]] = []

    async def awrite(self, session_id: str, change: LogWrite) -> Any:
        self.writes.append((len(change.entries), change.replace))
        return await super().awrite(session_id, change)


@pytest.mark.parametrize("write_back", [False, True])
def test_a_model_call_reads_and_counts_only_the_new_messages(
    write_back: bool, monkeypatch: pytest.MonkeyPatch, recorder: Any
) -> None:
    """The work per call (request parts read, texts counted, entries written to the store) is the
    same with 10 and with 300 buffered turns, whether the app passes its whole history or the
    history returned."""
    counting = CountingParts(monkeypatch)
    work = {}
    for turns in (10, 300):
        store = WritesStore()
        processor = rolling_history(4 * turns, recorder, counting.counter, store=store)
        history: list[ModelMessage] = [m for n in range(turns) for m in build_turn(n)]
        output = asyncio.run(processor(None, history))
        per_call = set()
        for n in range(turns, turns + 6):
            history = (output if write_back else history) + build_turn(n)
            counting.take()
            del store.writes[:]
            output = asyncio.run(processor(None, history))
            per_call.add((*counting.take(), *store.writes))
            assert_no_orphans(output)
        work[turns] = per_call
    assert work[10] == work[300]
    # One turn: its 4 messages counted, and appended (with the fold's cut): no rewrite.
    assert {(counted, written) for _, counted, written in work[300]} == {(4, (4, False))}


def test_agent_runs_read_only_the_new_messages(monkeypatch: pytest.MonkeyPatch, recorder: Any) -> None:
    """Driven by a real agent (which writes the processed history back), a run reads no more
    request parts with 100 buffered turns than with 5 (where a rare full walk is cheap), and
    counts only its own messages."""
    counting = CountingParts(monkeypatch)
    work = {}
    for turns in (5, 100):
        chat = Chat(rolling_history(4 * turns, recorder, counting.counter))
        for _ in range(turns + 3):
            chat.say()
        per_run = set()
        for _ in range(3):
            counting.take()
            chat.say()
            per_run.add(counting.take())
        work[turns] = per_run
    assert max(work[100]) <= max(work[5])
    assert {counted for _, counted in work[5] | work[100]} == {4}


def test_continuing_a_history_returns_what_a_full_walk_returns(make_recorder: Callable[[], Any]) -> None:
    """A processor passed its previous history plus new messages returns the same history as one
    passed a fresh copy each time (which reads all of it), through folds, tool pairs, a system
    prompt and quiet parts."""
    continued, walked = rolling_history(7, make_recorder(), words), rolling_history(7, make_recorder(), words)
    history: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("hi")])]
    for n in range(40):
        history = history + build_turn(n)
        if n % 5 == 0:
            history.append(ModelResponse(parts=[ThinkingPart("hmm"), TextPart(f"note {n} " * (n % 3))]))
        copy = ModelMessagesTypeAdapter.validate_python(to_jsonable_python(history))
        output = asyncio.run(continued(None, history))
        assert to_jsonable_python(output) == to_jsonable_python(asyncio.run(walked(None, copy)))
        if n % 2:
            history = output  # the processed history, as pydantic-ai writes it back


def test_another_writer_or_parts_added_afterwards_fall_back_to_a_full_walk(
    make_recorder: Callable[[], Any],
) -> None:
    """Two processors on one store take turns on one history, and parts are added to its last
    request after a call (as pydantic-ai does): each message is still summarized once, and each
    returns what a full walk returns."""
    # pydantic-ai before 2.6x (Python 3.10 resolves 2.54) adds no part afterwards: two writers only
    added = getattr(importlib.import_module("pydantic_ai.messages"), "ModelSettingsDeltaPart", None)
    recorder = make_recorder()
    store = MemoryStore()
    first, second = (
        rolling_history(6, recorder, one, store=store),
        rolling_history(6, recorder, one, store=store),
    )
    walked = rolling_history(6, make_recorder(), one)
    history: list[ModelMessage] = []
    for n in range(30):
        history = history + build_turn(n)
        copy = ModelMessagesTypeAdapter.validate_python(to_jsonable_python(history))
        processor = first if n % 4 < 2 else second
        output = asyncio.run(processor(None, history))
        assert to_jsonable_python(output) == to_jsonable_python(asyncio.run(walked(None, copy)))
        if n % 3 == 0 and added is not None:
            last = history[-1] if isinstance(history[-1], ModelRequest) else history[-2]
            last.parts = [*last.parts, added(settings={"thinking": "low"}, top_level=True)]
    folded = [m.content for m in recorder.folded]
    assert len(folded) == len(set(folded))
    assert folded + [m.content for m in as_rollmem(output)] == [*conversation(range(30)), "a29 done"]


@pytest.mark.parametrize("how", ["in place", "replaced"])
def test_an_edited_message_is_summarized_as_it_is_now_and_no_turn_is_lost(how: str, recorder: Any) -> None:
    """The app redacts a user turn of its history two turns before it folds (editing the part in
    place, or replacing the message by a new one): the summarizer and every later request see the
    redacted text; no turn vanishes."""
    chat = Chat(rolling_history(12, recorder, one, target_tokens=8))
    chat.say(extra_words=0)
    chat.say()
    history = chat.history or []
    index = next(
        i for i, m in enumerate(history) if any(getattr(p, "content", None) == "u0" for p in m.parts)
    )
    message = history[index]
    position = next(i for i, p in enumerate(message.parts) if getattr(p, "content", None) == "u0")
    part = message.parts[position]
    if how == "in place":
        part.content = "u0 [redacted]"
    else:
        parts = list(message.parts)
        parts[position] = UserPromptPart("u0 [redacted]", timestamp=part.timestamp + timedelta(seconds=1))
        history[index] = ModelRequest(parts=parts, timestamp=message.timestamp)
    assert not recorder.calls
    for _ in range(4):
        chat.say()
    folded = [m.content for m in recorder.folded]
    assert "u0 [redacted]" in folded
    assert "u0" not in folded
    assert all("u0" not in (summary or "").split("|") for summary in recorder.results)
    last = [m.content for m in as_rollmem(chat.seen[-1]) if m.role != "system"]
    expected = conversation(range(6))
    expected[0] = "u0 [redacted]"
    assert folded + last == expected  # each message once, in order: none lost

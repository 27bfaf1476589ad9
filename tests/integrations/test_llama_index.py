"""RollingSummaryBlock driven by a real LlamaIndex ``Memory`` (in-memory SQLite chat store, a
whitespace tokenizer so nothing is downloaded), plus the docs page's examples."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests._optional import need

from rollmem import Message, ToolCall

# The tests of the module alone run everywhere (its lazy import: test_lazy_imports.py); the rest
# needs llama-index-core.
needs_llama_index = pytest.mark.extra("llama-index")

PAGE = Path(__file__).resolve().parents[2] / "docs" / "pages" / "integrations" / "llama-index.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_unknown_attribute_is_an_attribute_error() -> None:
    import rollmem.integrations.llama_index as integration

    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        integration.Nope  # noqa: B018


# -- driving a real Memory ----------------------------------------------------------------------


def _words(text: str) -> list[str]:
    return text.split()


class Harness:
    """One event loop for a test (LlamaIndex's sync API runs on the thread's current loop), and
    ``Memory`` objects whose SQLite connections are closed when the test ends."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.memories: list[Any] = []

    def run(self, awaitable: Any) -> Any:
        return self.loop.run_until_complete(awaitable)

    def memory(self, block: Any, **settings: Any) -> Any:
        from llama_index.core.memory import Memory

        options: dict[str, Any] = {"token_limit": 60, "chat_history_token_ratio": 0.5, "token_flush_size": 12}
        options.update(settings)
        memory = Memory.from_defaults(memory_blocks=[block], tokenizer_fn=_words, **options)
        self.memories.append(memory)
        return memory

    def close(self) -> None:
        for memory in self.memories:
            engine = getattr(memory.sql_store, "_async_engine", None)
            if engine is not None:
                self.run(engine.dispose())
        self.run(self.loop.shutdown_asyncgens())
        self.loop.close()


@pytest.fixture
def li() -> Iterator[Harness]:
    harness = Harness()
    asyncio.set_event_loop(harness.loop)
    try:
        yield harness
    finally:
        harness.close()
        asyncio.set_event_loop(None)


def _turn(index: int) -> Any:
    from llama_index.core.llms import ChatMessage

    role = "user" if index % 2 == 0 else "assistant"
    return ChatMessage(role=role, content=f"turn {index} says four words")


def _archived(memory: Any) -> list[str]:
    from llama_index.core.storage.chat_store.sql import MessageStatus

    return [message.content for message in memory.get_all(status=MessageStatus.ARCHIVED)]


def _memory_text(memory: Any) -> str:
    first = memory.get()[0]
    assert first.role.value == "system"
    return str(first.content)


@needs_llama_index
def test_flushed_messages_are_summarized_exactly_once_in_order(li: Harness, recorder: Any) -> None:
    from rollmem.integrations.llama_index import RollingSummaryBlock

    block = RollingSummaryBlock(summarize_fn=recorder)
    memory = li.memory(block)
    for index in range(40):
        memory.put(_turn(index))
    archived = _archived(memory)
    assert len(recorder.calls) >= 8  # many flushes
    assert [m.content for m in recorder.folded] == archived  # each flushed message once, in order
    assert archived == [f"turn {i} says four words" for i in range(len(archived))]
    for (summary, _), previous in zip(recorder.calls, ["", *recorder.results]):
        assert summary == previous  # every call continues the previous summary
    assert block.summary == "|".join(archived)
    assert block.pending == []
    text = _memory_text(memory)
    assert text == f"<memory>\n<summary>\n{block.summary}\n</summary>\n</memory>"
    assert [str(m.content) for m in memory.get()[1:]] == [
        f"turn {i} says four words" for i in range(len(archived), 40)
    ]
    stats = block.stats()
    assert (stats.folds, stats.summarizer_calls, stats.failed_folds) == (len(recorder.calls),) * 2 + (0,)
    assert stats.messages_summarized == len(archived)


@needs_llama_index
def test_an_async_summarizer_through_the_async_api(li: Harness, async_recorder: Any) -> None:
    from rollmem.integrations.llama_index import RollingSummaryBlock

    block = RollingSummaryBlock(name="history", summarize_fn=async_recorder.summarize)
    memory = li.memory(block)

    async def chat() -> list[Any]:
        for index in range(30):
            await memory.aput(_turn(index))
        messages: list[Any] = await memory.aget()
        return messages

    messages = li.run(chat())
    archived = _archived(memory)
    assert len(async_recorder.calls) >= 5
    assert [m.content for m in async_recorder.folded] == archived
    assert str(messages[0].content) == f"<memory>\n<history>\n{'|'.join(archived)}\n</history>\n</memory>"


@needs_llama_index
def test_before_any_flush_the_block_adds_nothing(li: Harness, recorder: Any) -> None:
    from rollmem.integrations.llama_index import RollingSummaryBlock

    memory = li.memory(RollingSummaryBlock(summarize_fn=recorder))
    memory.put(_turn(0))
    assert [str(m) for m in memory.get()] == ["user: turn 0 says four words"]
    assert recorder.calls == []


@needs_llama_index
def test_a_failing_summarizer_keeps_the_messages_pending_and_retries_them(
    li: Harness, recorder: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from rollmem.integrations.llama_index import PENDING_HEADING, RollingSummaryBlock

    block = RollingSummaryBlock(summarize_fn=recorder)
    memory = li.memory(block)
    put = 0
    while len(recorder.calls) < 2:  # one successful fold first
        memory.put(_turn(put))
        put += 1
    recorder.fail = True
    with caplog.at_level(logging.WARNING, logger="rollmem"):
        while len(recorder.calls) < 4:  # two failed flushes: put() itself never raises
            memory.put(_turn(put))
            put += 1
    assert recorder.failures == 2
    failed_first, failed_second = recorder.calls[2][1], recorder.calls[3][1]
    assert failed_second[: len(failed_first)] == failed_first  # the retry carries the earlier batch
    pending = block.pending
    assert pending == list(failed_second)
    assert block.summary == recorder.results[1]
    text = _memory_text(memory)
    lines = "\n".join(f"{m.role}: {m.content}" for m in pending)
    assert (
        text == f"<memory>\n<summary>\n{block.summary}\n\n{PENDING_HEADING}\n{lines}\n</summary>\n</memory>"
    )
    assert [r.getMessage() for r in caplog.records][-1] == (
        f"RollingSummaryBlock 'summary': the summarizer failed (SummarizerDown('summarizer down')); "
        f"{len(pending)} messages stay pending and are retried with the next flush"
    )

    recorder.fail = False
    while len(recorder.calls) < 5:
        memory.put(_turn(put))
        put += 1
    assert block.pending == []
    archived = _archived(memory)
    assert [m.content for m in recorder.folded] == archived  # nothing lost, nothing twice
    assert block.summary == "|".join(archived)
    assert block.stats().failed_folds == 2


@needs_llama_index
def test_on_error_receives_the_error_and_afold_retries_at_once(li: Harness, recorder: Any) -> None:
    from rollmem.integrations.llama_index import RollingSummaryBlock

    errors: list[Exception] = []
    recorder.fail = True
    block = RollingSummaryBlock(summarize_fn=recorder, on_error=errors.append)
    first, second = _turn(0), _turn(1)
    li.run(block.aput([first, second], from_short_term_memory=True))
    assert [type(e).__name__ for e in errors] == ["SummarizerDown"]
    assert [m.content for m in block.pending] == [first.content, second.content]
    with pytest.raises(RuntimeError, match="summarizer down"):
        li.run(block.afold())
    assert len(block.pending) == 2
    recorder.fail = False
    li.run(block.afold())
    assert block.pending == []
    assert block.summary == f"{first.content}|{second.content}"
    assert len(errors) == 1  # afold raises instead of reporting


@needs_llama_index
def test_state_round_trips_into_a_new_memory(li: Harness, recorder: Any) -> None:
    from rollmem.integrations.llama_index import RollingSummaryBlock

    block = RollingSummaryBlock(summarize_fn=recorder)
    memory = li.memory(block)
    for index in range(20):
        memory.put(_turn(index))
    recorder.fail = True
    li.run(block.aput([_turn(99)]))
    saved = json.loads(json.dumps(block.to_dict()))
    assert saved == {
        "version": 2,
        "summary": block.summary,
        "buffer": [{"role": "assistant", "content": "turn 99 says four words"}],
    }
    recorder.fail = False
    restored = RollingSummaryBlock.from_dict(saved, summarize_fn=recorder, priority=0)
    assert (restored.summary, restored.pending) == (block.summary, block.pending)
    again = li.memory(restored)
    again.put(_turn(100))
    assert block.summary in _memory_text(again)
    li.run(restored.afold())
    assert restored.summary == f"{block.summary}|turn 99 says four words"


@needs_llama_index
def test_bad_state_and_bad_arguments_raise_at_once(li: Harness, recorder: Any) -> None:
    from rollmem.errors import InvalidStateError
    from rollmem.integrations.llama_index import RollingSummaryBlock

    with pytest.raises(InvalidStateError, match=r"^buffer\[0\]\.content: expected str, got int$"):
        RollingSummaryBlock.from_dict(
            {"version": 2, "summary": "", "buffer": [{"role": "user", "content": 1}]}, summarize_fn=recorder
        )
    with pytest.raises(TypeError, match="summarize_fn"):
        RollingSummaryBlock(summarize_fn=42)
    with pytest.raises(TypeError, match=r"^token_counter: expected a callable or None, got int$"):
        RollingSummaryBlock(summarize_fn=recorder, token_counter=3)
    with pytest.raises(TypeError, match=r"^on_error: expected a callable or None, got str$"):
        RollingSummaryBlock(summarize_fn=recorder, on_error="log")
    block = RollingSummaryBlock(summarize_fn=recorder)
    with pytest.raises(TypeError, match=r"^messages\[1\]: expected ChatMessage, got str$"):
        li.run(block.aput([_turn(0), "hello"]))
    assert block.pending == []
    assert recorder.calls == []


@needs_llama_index
def test_chat_messages_are_converted_to_rollmem_messages(li: Harness, recorder: Any) -> None:
    from llama_index.core.base.llms.types import ImageBlock, TextBlock
    from llama_index.core.llms import ChatMessage

    from rollmem.integrations.llama_index import RollingSummaryBlock

    openai_call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "weather", "arguments": '{"c":1}'},
    }
    messages = [
        ChatMessage(role="system", content="Be brief.", additional_kwargs={"session_id": "s1"}),
        ChatMessage(
            role="user",
            blocks=[TextBlock(text="What is this?"), ImageBlock(url="https://example.com/a.png")],
            additional_kwargs={"name": "ana"},
        ),
        ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [openai_call]}),
        ChatMessage(role="tool", content='{"t":18}', additional_kwargs={"tool_call_id": "call_1"}),
        ChatMessage(
            role="assistant",
            content="Checking.",
            additional_kwargs={"tool_calls": [{"id": "toolu_3", "name": "clock", "input": {"tz": "KST"}}]},
        ),
        ChatMessage(role="model", content="It is sunny."),
    ]
    block = RollingSummaryBlock(summarize_fn=recorder)
    li.run(block.aput(messages, from_short_term_memory=True))
    ((_, folded),) = recorder.calls
    assert list(folded) == [
        Message("system", "Be brief."),
        Message("user", "What is this?\n[image]", metadata={"name": "ana"}),
        Message("assistant", "", tool_calls=[ToolCall("call_1", "weather", '{"c":1}')]),
        Message("tool", '{"t":18}', tool_call_id="call_1"),
        Message("assistant", "Checking.", tool_calls=[ToolCall("toolu_3", "clock", '{"tz":"KST"}')]),
        Message("assistant", "It is sunny."),
    ]


@needs_llama_index
def test_tool_call_blocks_are_converted_and_thinking_is_left_out(li: Harness, recorder: Any) -> None:
    types = need("llama-index", "llama_index.core.base.llms.types")
    if not hasattr(types, "ToolCallBlock"):
        pytest.skip("this llama-index-core has no ToolCallBlock")
    from rollmem.integrations.llama_index import RollingSummaryBlock

    message = types.ChatMessage(
        role="assistant",
        blocks=[
            types.ThinkingBlock(content="hmm"),
            types.TextBlock(text="Checking."),
            types.ToolCallBlock(tool_call_id="call_2", tool_name="search", tool_kwargs={"q": "Seoul"}),
        ],
        # the same call repeated in the OpenAI form: kept once
        additional_kwargs={
            "tool_calls": [{"id": "call_2", "function": {"name": "search", "arguments": "{}"}}]
        },
    )
    block = RollingSummaryBlock(summarize_fn=recorder)
    li.run(block.aput([message]))
    ((_, folded),) = recorder.calls
    assert list(folded) == [
        Message("assistant", "Checking.", tool_calls=[ToolCall("call_2", "search", '{"q":"Seoul"}')])
    ]


@needs_llama_index
def test_truncation_keeps_the_newest_lines_and_never_changes_the_summary(li: Harness, recorder: Any) -> None:
    from rollmem.integrations.llama_index import RollingSummaryBlock

    block = RollingSummaryBlock(
        summarize_fn=recorder, priority=1, token_counter=lambda text: len(text.split())
    )
    text = "Ana plans Seoul. Six nights in May. Budget 3000 USD."
    assert li.run(block.atruncate(text, 3)) == "Six nights in May. Budget 3000 USD."
    assert li.run(block.atruncate(text, 4)) == "Budget 3000 USD."
    assert li.run(block.atruncate(text, 8)) == "Budget 3000"
    assert li.run(block.atruncate(text, 10)) is None

    # driven by Memory: a tight limit makes it truncate the block's text, not the summary
    memory = li.memory(block, token_limit=40, chat_history_token_ratio=0.9, token_flush_size=8)
    for index in range(30):
        memory.put(_turn(index))
    shown = _memory_text(memory)
    assert block.summary not in shown
    assert "|".join(_archived(memory)) == block.summary


# -- the documentation page --------------------------------------------------------------------


def _page_blocks() -> list[tuple[int, str]]:
    text = PAGE.read_text(encoding="utf-8")
    return [(text.count("\n", 0, match.start()) + 1, match.group(1)) for match in BLOCK.finditer(text)]


def test_the_page_has_runnable_examples() -> None:
    blocks = _page_blocks()
    assert blocks
    assert all(code.startswith("# needs: llama_index\n") for _, code in blocks)


@needs_llama_index
@pytest.mark.parametrize(
    ("line", "code"), _page_blocks(), ids=lambda value: f"line{value}" if isinstance(value, int) else ""
)
def test_the_page_block_runs(
    li: Harness, line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_index.core.memory import Memory

    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    try:
        exec(compile(code, f"llama-index.md:{line}", "exec"), namespace)
    finally:
        li.memories.extend(value for value in namespace.values() if isinstance(value, Memory))

from __future__ import annotations

import asyncio
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

import pytest
from adapter_strategies import TEXT, compact_objects
from hypothesis import given
from hypothesis import strategies as st

from _optional import need, skip_unless
from rollmem import AsyncRollingMemory, BufferMemory, Message, RollingMemory, ToolCall
from rollmem.adapters import for_provider
from rollmem.adapters.langchain import from_langchain, to_langchain

# The missing-extra tests run everywhere; the rest needs the langchain extra.
_RWMH_DEPRECATED = pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)


def test_missing_langchain_core_raises_missing_extra_error_on_use() -> None:
    result = _run(
        """
        import sys
        sys.modules["langchain_core"] = None  # as if not installed
        import rollmem.adapters.langchain as adapter
        from rollmem import Message
        from rollmem.errors import MissingExtraError
        attempts = [
            lambda: adapter.to_langchain([Message("user", "hi")]),
            lambda: adapter.from_langchain([]),
            lambda: adapter.RollingChatMessageHistory,
        ]
        for attempt in attempts:
            try:
                attempt()
            except MissingExtraError as exc:
                print(isinstance(exc, ImportError), exc)
        try:
            from rollmem.adapters.langchain import RollingChatMessageHistory
        except MissingExtraError as exc:
            print(exc.name, exc.extra)
        """
    )
    message = (
        "rollmem.adapters.langchain needs the 'langchain-core' package: pip install \"rollmem[langchain]\""
    )
    assert result.stderr == ""
    assert result.stdout.splitlines() == [f"True {message}"] * 3 + ["langchain-core langchain"]


@pytest.mark.extra("langchain")
def test_a_broken_dependency_of_langchain_core_is_not_reported_as_a_missing_extra() -> None:
    result = _run(
        """
        import sys
        sys.modules["pydantic"] = None  # langchain-core installed, its dependency broken
        from rollmem.adapters.langchain import to_langchain
        from rollmem.errors import MissingExtraError
        try:
            to_langchain([])
        except ImportError as exc:
            print(isinstance(exc, MissingExtraError), "pydantic" in str(exc))
        """
    )
    assert result.stdout.strip() == "False True"


@pytest.fixture
def lc() -> Any:
    return need("langchain", "langchain_core.messages")


def _conversation(lc: Any) -> tuple[list[Message], list[Any]]:
    messages = [
        Message("system", "You are a weather bot."),
        Message("user", "Weather in Paris?", id="u1", metadata={"name": "alice"}),
        Message(
            "assistant",
            "",
            id="a1",
            tool_calls=(
                ToolCall("call_1", "get_weather", '{"city":"Paris","days":[1,2]}'),
                ToolCall("call_2", "oops", "{bad"),
            ),
        ),
        Message("tool", "18C", tool_call_id="call_1"),
        Message("tool", "no such tool", tool_call_id="call_2", metadata={"is_error": True}),
        Message("assistant", "It is 18C in Paris."),
        Message("developer", "Answer in French from now on."),
        Message("tool", "orphan result"),
    ]
    objects = [
        lc.SystemMessage("You are a weather bot."),
        lc.HumanMessage("Weather in Paris?", id="u1", name="alice"),
        lc.AIMessage(
            "",
            id="a1",
            tool_calls=[{"name": "get_weather", "args": {"city": "Paris", "days": [1, 2]}, "id": "call_1"}],
            invalid_tool_calls=[{"name": "oops", "args": "{bad", "id": "call_2", "error": None}],
        ),
        lc.ToolMessage("18C", tool_call_id="call_1"),
        lc.ToolMessage("no such tool", tool_call_id="call_2", status="error"),
        lc.AIMessage("It is 18C in Paris."),
        lc.ChatMessage(role="developer", content="Answer in French from now on."),
        lc.ChatMessage(role="tool", content="orphan result"),
    ]
    return messages, objects


def test_to_langchain_builds_the_message_objects(lc: Any) -> None:
    messages, objects = _conversation(lc)
    converted = to_langchain(messages)
    assert converted == objects
    assert [type(m).__name__ for m in converted] == [type(m).__name__ for m in objects]


def test_from_langchain_reads_the_message_objects(lc: Any) -> None:
    messages, objects = _conversation(lc)
    assert from_langchain(objects) == messages


def test_content_blocks_keep_their_text(lc: Any) -> None:
    # An Anthropic-style AIMessage repeats its tool calls as content blocks; they are in tool_calls.
    reply = lc.AIMessage(
        content=[
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}},
        ],
        tool_calls=[{"name": "f", "args": {"x": 1}, "id": "t1"}],
    )
    question = lc.HumanMessage(content=["part one", {"type": "text", "text": "part two"}])
    chunk = lc.AIMessageChunk(content="streamed", id="c1")
    assert from_langchain([question, reply, chunk]) == [
        Message("user", "part one\npart two"),
        Message("assistant", "Checking.", tool_calls=(ToolCall("t1", "f", '{"x":1}'),)),
        Message("assistant", "streamed", id="c1"),
    ]


def test_missing_call_ids_and_names_become_empty_strings(lc: Any) -> None:
    reply = lc.AIMessage(
        "",
        tool_calls=[{"name": "f", "args": {}, "id": None}],
        invalid_tool_calls=[{"name": None, "args": None, "id": None, "error": "bad"}],
    )
    assert from_langchain([reply]) == [
        Message("assistant", "", tool_calls=(ToolCall("", "f", "{}"), ToolCall("", "", "")))
    ]


def test_empty_arguments_are_an_empty_object(lc: Any) -> None:
    _, reply, _ = to_langchain(
        [
            Message("user", "q"),
            Message("assistant", "", tool_calls=(ToolCall("c", "f"),)),
            Message("tool", "r", tool_call_id="c"),
        ]
    )
    assert reply.tool_calls == [{"name": "f", "args": {}, "id": "c", "type": "tool_call"}]


def test_fields_langchain_cannot_carry_are_not_sent(lc: Any) -> None:
    message = Message("user", "hi", metadata={"lang": "en", "name": 3, "is_error": True}, pinned=True)
    assert to_langchain([message]) == [lc.HumanMessage("hi")]


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda lc: "hi", TypeError, "messages: expected an iterable of BaseMessage, got str"),
        (
            lambda lc: lc.HumanMessage("hi"),
            TypeError,
            "messages: expected an iterable of BaseMessage, got HumanMessage",
        ),
        (
            lambda lc: [lc.HumanMessage("hi"), {"role": "user"}],
            TypeError,
            "messages[1]: expected BaseMessage, got dict",
        ),
        (
            lambda lc: [lc.FunctionMessage(name="f", content="x")],
            ValueError,
            "messages[0]: unsupported message type FunctionMessage; "
            "expected HumanMessage, AIMessage, SystemMessage, ToolMessage or ChatMessage",
        ),
        (
            lambda lc: [lc.HumanMessage(content=[{"type": "image", "url": "https://example.com/a.png"}])],
            ValueError,
            "messages[0].content[0].type: unsupported part type 'image'; only text parts are supported",
        ),
        (
            lambda lc: [
                lc.HumanMessage("q"),
                lc.AIMessage(content=[{"type": "reasoning", "reasoning": "hm"}]),
            ],
            ValueError,
            "messages[1].content[0].type: unsupported part type 'reasoning'; only text parts are supported",
        ),
    ],
)
def test_from_langchain_errors_name_the_message(
    lc: Any, make: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        from_langchain(make(lc))
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("messages", "error", "message"),
    [
        ([Message("user", "hi"), "hi"], TypeError, "messages[1]: expected Message, got str"),
        (
            [Message("system", "s", tool_calls=(ToolCall("c", "f"),))],
            ValueError,
            "messages[0].tool_calls: only assistant messages carry tool calls in the LangChain format",
        ),
        (
            [Message("user", "s", tool_call_id="c")],
            ValueError,
            "messages[0].tool_call_id: only tool messages carry a tool_call_id in the LangChain format",
        ),
    ],
)
def test_to_langchain_errors_name_the_message(
    lc: Any, messages: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        to_langchain(messages)
    assert str(caught.value) == message


# Round trips over the shapes LangChain carries (see the module docstring).
_text = TEXT
_objects = compact_objects(min_size=1)
_not_objects = st.sampled_from(["{bad", "[1]", "null", '"s"', "1", "{'a': 1}"])
_names = st.one_of(st.just({}), st.builds(lambda name: {"name": name}, _text))


@st.composite
def _langchain_messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["user", "assistant", "system", "tool", "developer"]))
    meta = dict(draw(_names))
    calls: tuple[ToolCall, ...] = ()
    call_id = None
    if role == "assistant":
        good = draw(st.lists(st.builds(ToolCall, _text, _text, _objects), max_size=2))
        bad = draw(st.lists(st.builds(ToolCall, _text, _text, _not_objects), max_size=2))
        calls = (*good, *bad)
    if role == "tool":
        call_id = draw(st.none() | _text)
        if call_id is not None and draw(st.booleans()):
            meta["is_error"] = True
    return Message(
        role, draw(_text), id=draw(st.none() | _text), tool_calls=calls, tool_call_id=call_id, metadata=meta
    )


@pytest.mark.extra("langchain")
@given(st.lists(_langchain_messages(), max_size=6))
def test_round_trip_is_exact_for_what_langchain_carries(messages: list[Message]) -> None:
    # what is sent follows the provider rule (unpaired calls and results as text, a user turn first)
    assert from_langchain(to_langchain(messages)) == for_provider(messages)


# -- RollingChatMessageHistory ---------------------------------------------------------------------


def _history_class() -> Any:
    skip_unless("langchain")
    from rollmem.adapters.langchain import RollingChatMessageHistory

    return RollingChatMessageHistory


def _summarize(summary: str, messages: Sequence[Message]) -> str:
    return " | ".join(([summary] if summary else []) + [m.content for m in messages])


def test_history_is_a_langchain_chat_history_built_once(lc: Any) -> None:
    from langchain_core.chat_history import BaseChatMessageHistory

    import rollmem.adapters.langchain as adapter

    cls = _history_class()
    assert adapter.RollingChatMessageHistory is cls
    assert issubclass(cls, BaseChatMessageHistory)
    assert (cls.__module__, cls.__qualname__) == ("rollmem.adapters.langchain", "RollingChatMessageHistory")
    assert pickle.loads(pickle.dumps(cls)) is cls
    assert "rollmem memory" in (cls.__doc__ or "")


def test_history_reads_the_memory_with_its_summary_first(lc: Any) -> None:
    memory = BufferMemory.from_dict(
        {"version": 2, "summary": "Alice likes tea.", "buffer": [{"role": "user", "content": "hi"}]}
    )
    history = _history_class()(memory)
    assert history.messages == [lc.SystemMessage("Alice likes tea."), lc.HumanMessage("hi")]
    assert asyncio.run(history.aget_messages()) == history.messages
    assert str(history) == "System: Alice likes tea.\nHuman: hi"


def test_add_messages_extends_the_memory_once(lc: Any) -> None:
    calls: list[list[str]] = []

    def summarize(summary: str, messages: Sequence[Message]) -> str:
        calls.append([m.content for m in messages])
        return _summarize(summary, messages)

    memory = RollingMemory(max_tokens=4, summarize_fn=summarize)
    history = _history_class()(memory)
    history.add_messages(
        [lc.HumanMessage("one two"), lc.AIMessage("three four"), lc.HumanMessage("five six")]
    )
    assert calls == [["one two", "three four"]]
    assert memory.get_messages() == [Message("system", "one two | three four"), Message("user", "five six")]
    history.add_user_message("seven")
    history.add_ai_message("eight")
    assert [m.content for m in memory.buffer] == ["five six", "seven", "eight"]
    history.clear()
    assert memory.get_messages() == []
    assert history.messages == []


def test_a_message_that_cannot_be_converted_adds_nothing(lc: Any) -> None:
    memory = RollingMemory()
    history = _history_class()(memory)
    with pytest.raises(
        ValueError, match=r"^messages\[1\]\.content\[0\]\.type: unsupported part type 'image'"
    ):
        history.add_messages(
            [lc.HumanMessage("fine"), lc.HumanMessage(content=[{"type": "image", "url": "u"}])]
        )
    assert memory.buffer == []


def test_async_history_methods_work_on_a_sync_memory(lc: Any) -> None:
    memory = RollingMemory()
    history = _history_class()(memory)

    async def main() -> None:
        await history.aadd_messages([lc.HumanMessage("hi"), lc.AIMessage("hello")])
        assert [m.content for m in await history.aget_messages()] == ["hi", "hello"]
        await history.aclear()

    asyncio.run(main())
    assert memory.buffer == []


def test_an_async_memory_needs_the_async_api(lc: Any) -> None:
    async def summarize(summary: str, messages: Sequence[Message]) -> str:
        return _summarize(summary, messages)

    memory = AsyncRollingMemory(max_tokens=3, summarize_fn=summarize)
    history = _history_class()(memory)
    with pytest.raises(TypeError, match=r"^this history holds an async memory: use LangChain's async API"):
        history.add_messages([lc.HumanMessage("hi")])
    assert memory.buffer == []

    async def main() -> None:
        await history.aadd_messages([lc.HumanMessage("a b"), lc.AIMessage("c d")])

    asyncio.run(main())
    assert memory.get_messages() == [Message("system", "a b"), Message("assistant", "c d")]
    asyncio.run(history.aclear())
    assert memory.get_messages() == []


def _prompt() -> Any:
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

    return ChatPromptTemplate.from_messages(
        [("system", "Be brief."), MessagesPlaceholder("history"), ("human", "{question}")]
    )


@_RWMH_DEPRECATED
def test_runnable_with_message_history_runs_on_a_rolling_memory(lc: Any) -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.runnables import RunnableLambda
    from langchain_core.runnables.history import RunnableWithMessageHistory

    history_cls = _history_class()
    memories = {"s1": RollingMemory(max_tokens=9, summarize_fn=_summarize)}
    model_inputs: list[list[Any]] = []

    def record(prompt_value: Any) -> Any:
        model_inputs.append(prompt_value.to_messages())
        return prompt_value

    model = FakeListChatModel(responses=["Hi Ann.", "Tea, then.", "Noted, Ann."])
    chain = RunnableWithMessageHistory(
        _prompt() | RunnableLambda(record) | model,
        lambda session_id: history_cls(memories[session_id]),
        input_messages_key="question",
        history_messages_key="history",
    )
    config = {"configurable": {"session_id": "s1"}}
    answers = [
        chain.invoke({"question": question}, config=config).content
        for question in ["I am Ann.", "I like tea.", "Remember me?"]
    ]
    assert answers == ["Hi Ann.", "Tea, then.", "Noted, Ann."]
    memory = memories["s1"]
    assert memory.summary == "I am Ann. | Hi Ann."
    assert [(m.role, m.content) for m in memory.buffer] == [
        ("user", "I like tea."),
        ("assistant", "Tea, then."),
        ("user", "Remember me?"),
        ("assistant", "Noted, Ann."),
    ]
    # The third call saw the summary (as a system turn) and the recent turns verbatim.
    assert [(type(m).__name__, m.content) for m in model_inputs[2]] == [
        ("SystemMessage", "Be brief."),
        ("SystemMessage", "I am Ann. | Hi Ann."),
        ("HumanMessage", "I like tea."),
        ("AIMessage", "Tea, then."),
        ("HumanMessage", "Remember me?"),
    ]


@_RWMH_DEPRECATED
def test_runnable_with_message_history_async_keeps_tool_calls(lc: Any) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.runnables.history import RunnableWithMessageHistory

    history_cls = _history_class()
    memory = AsyncRollingMemory(max_tokens=1000)
    reply = lc.AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Oslo"}, "id": "call_9"}])
    model = GenericFakeChatModel(messages=iter([reply, lc.AIMessage("Cold.")]))
    chain = RunnableWithMessageHistory(
        _prompt() | model,
        lambda session_id: history_cls(memory),
        input_messages_key="question",
        history_messages_key="history",
    )
    config = {"configurable": {"session_id": "any"}}

    async def main() -> None:
        await chain.ainvoke({"question": "Weather in Oslo?"}, config=config)
        await chain.ainvoke({"question": "So?"}, config=config)

    asyncio.run(main())
    assert [(m.role, m.content, m.tool_calls) for m in memory.buffer] == [
        ("user", "Weather in Oslo?", ()),
        ("assistant", "", (ToolCall("call_9", "get_weather", '{"city":"Oslo"}'),)),
        ("user", "So?", ()),
        ("assistant", "Cold.", ()),
    ]

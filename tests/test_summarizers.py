from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Sequence
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmem import AsyncRollingMemory, RollingMemory
from rollmem.adapters import to_openai
from rollmem.counters import chars, words
from rollmem.message import Message, ToolCall
from rollmem.summarizers import (
    CACHED_INSTRUCTION,
    DEFAULT_TEMPLATE,
    SHORTEN_TEMPLATE,
    async_cached_summarizer,
    async_prompt_summarizer,
    async_with_fallback,
    cached_summarizer,
    cached_summary_request,
    extractive_summarizer,
    prompt_summarizer,
    with_fallback,
)

TURNS = [
    Message("user", "I want to visit Seoul in May. My budget is 3000 USD."),
    Message("assistant", "", tool_calls=(ToolCall("c1", "get_weather", '{"city": "Seoul"}'),)),
    Message("tool", '{"temp_c": 18}', tool_call_id="c1"),
    Message("assistant", "Seoul is 18 C in May! A good time to go."),
]


class Completions:
    """A scripted LLM: answers each prompt with the next reply, records the prompts."""

    def __init__(self, *replies: object) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> Any:
        self.prompts.append(prompt)
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def acall(self, prompt: str) -> Any:
        await asyncio.sleep(0)
        return self(prompt)


Summarize = Callable[[str, Sequence[Message]], str]


def sync_form(llm: Completions, **kwargs: Any) -> Summarize:
    return prompt_summarizer(llm, **kwargs)


def async_form(llm: Completions, **kwargs: Any) -> Summarize:
    summarize = async_prompt_summarizer(llm.acall, **kwargs)

    def run(summary: str, messages: Sequence[Message]) -> str:
        return asyncio.run(summarize(summary, messages))  # type: ignore[arg-type]

    return run


forms = pytest.mark.parametrize("form", [sync_form, async_form], ids=["sync", "async"])


# --- templates ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("Summary: {summary}", "template: missing the {conversation} placeholder"),
        ("Turns: {conversation}", "template: missing the {summary} placeholder"),
        ("no fields at all", "template: missing the {summary} placeholder"),
        ("{summary} {conversation} {user}", r"template: unknown placeholder\(s\) \{user\}"),
        ("{summary} {conversation} {}", r"template: unknown placeholder\(s\) \{\}"),
        ("{summary.upper} {conversation}", r"template: unknown placeholder\(s\) \{summary.upper\}"),
        ("{summary} {conversation} {", "template: not a valid str.format string"),
        ("{summary:d} {conversation}", "template: cannot be formatted"),
    ],
)
@pytest.mark.parametrize("factory", [prompt_summarizer, async_prompt_summarizer])
def test_bad_templates_fail_at_construction(template: str, message: str, factory: Any) -> None:
    llm = Completions()
    with pytest.raises(ValueError, match=message):
        factory(llm, template=template)
    assert llm.prompts == []


def test_template_must_be_a_string() -> None:
    with pytest.raises(TypeError, match="template: expected str, got bytes"):
        prompt_summarizer(Completions(), template=b"{summary} {conversation}")  # type: ignore[arg-type]


@forms
def test_default_prompt_names_the_summary_and_renders_turns_with_tool_calls(form: Any) -> None:
    llm = Completions("  The user plans Seoul in May, 3000 USD.\n")
    summarize = form(llm)
    assert summarize("Earlier: hello.", TURNS) == "The user plans Seoul in May, 3000 USD."
    (prompt,) = llm.prompts
    conversation = "\n".join(str(message) for message in TURNS)
    assert prompt == DEFAULT_TEMPLATE.format(summary="Earlier: hello.", conversation=conversation)
    assert "Earlier: hello." in prompt
    assert 'assistant:  [tool calls: get_weather({"city": "Seoul"})]' in prompt
    assert "user: I want to visit Seoul in May. My budget is 3000 USD." in prompt
    for kept in ("name", "number", "decision", "open question", "self-contained"):
        assert kept in prompt


@forms
def test_custom_template_with_literal_braces(form: Any) -> None:
    llm = Completions("ok")
    form(llm, template='JSON {{"old": "{summary}"}}\n{conversation}')("S", TURNS[:1])
    assert llm.prompts == ['JSON {"old": "S"}\nuser: I want to visit Seoul in May. My budget is 3000 USD.']


@forms
def test_user_text_with_braces_is_not_formatted(form: Any) -> None:
    llm = Completions("ok")
    form(llm)("{conversation}", [Message("user", "{summary} {0} {x.y}")])
    assert "{conversation}" in llm.prompts[0]
    assert "user: {summary} {0} {x.y}" in llm.prompts[0]


# --- completion checks -------------------------------------------------------------------------


@forms
@pytest.mark.parametrize("reply", ["", "   \n "])
def test_empty_completion_is_an_error(form: Any, reply: str) -> None:
    with pytest.raises(ValueError, match="complete\\(\\) returned an empty summary"):
        form(Completions(reply))("S", TURNS)


@forms
def test_non_string_completion_is_a_type_error(form: Any) -> None:
    with pytest.raises(TypeError, match="complete\\(\\) must return str, got NoneType"):
        form(Completions(None))("S", TURNS)


@forms
def test_errors_of_complete_propagate(form: Any) -> None:
    with pytest.raises(ConnectionError, match="LLM down"):
        form(Completions(ConnectionError("LLM down")))("S", TURNS)


def test_factory_argument_checks() -> None:
    with pytest.raises(TypeError, match="complete: expected a callable, got str"):
        prompt_summarizer("gpt-4o")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="complete is a coroutine function: use async_prompt_summarizer"):
        prompt_summarizer(Completions().acall)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_summary_tokens must be > 0, got 0"):
        prompt_summarizer(Completions(), max_summary_tokens=0)
    with pytest.raises(TypeError, match="max_summary_tokens: expected int, got bool"):
        async_prompt_summarizer(Completions().acall, max_summary_tokens=True)
    with pytest.raises(TypeError, match="token_counter: expected a callable, got int"):
        prompt_summarizer(Completions(), token_counter=4)  # type: ignore[arg-type]


# --- the bound ---------------------------------------------------------------------------------


@forms
def test_summary_within_the_bound_costs_one_call(form: Any) -> None:
    llm = Completions("one two three four")
    assert form(llm, max_summary_tokens=4)("", TURNS) == "one two three four"
    assert len(llm.prompts) == 1


@forms
def test_over_the_bound_the_model_is_asked_once_to_shorten(form: Any) -> None:
    long = "Seoul in May. Budget 3000 USD. Hotel in Myeongdong. Flight on May 3."  # 13 words
    llm = Completions(long, "Seoul, May, 3000 USD.")
    assert form(llm, max_summary_tokens=5)("", TURNS) == "Seoul, May, 3000 USD."
    assert llm.prompts[1] == SHORTEN_TEMPLATE.format(length=13, limit=5, percent=38, summary=long)
    assert "13 tokens long, but the limit is 5 tokens" in llm.prompts[1]


@forms
def test_still_over_after_shortening_it_is_cut_at_the_last_sentence_that_fits(form: Any) -> None:
    long = "Seoul in May. Budget 3000 USD! Hotel in Myeongdong? Flight on May 3."
    llm = Completions(long, long)
    assert form(llm, max_summary_tokens=8)("", TURNS) == "Seoul in May. Budget 3000 USD!"
    assert len(llm.prompts) == 2


@forms
def test_a_first_sentence_too_long_is_cut_at_a_word_boundary(form: Any) -> None:
    long = "The user wants to visit Seoul and Busan in May with a budget of 3000 USD. Hotels next."
    llm = Completions(long, long)
    assert form(llm, max_summary_tokens=6)("", TURNS) == "The user wants to visit Seoul"


@forms
def test_a_single_word_too_long_is_cut_at_a_character(form: Any) -> None:
    llm = Completions("x" * 100, "y" * 50)
    assert form(llm, max_summary_tokens=3, token_counter=chars(4))("", TURNS) == "y" * 12


@forms
def test_an_empty_shortening_falls_back_to_cutting_the_first_summary(form: Any) -> None:
    llm = Completions("First. Second. Third.", "  ")
    assert form(llm, max_summary_tokens=2)("", TURNS) == "First. Second."


@forms
def test_line_breaks_are_boundaries_too(form: Any) -> None:
    text = "- Seoul in May\n- budget 3000 USD\n- hotel booked"
    assert (
        form(Completions(text, text), max_summary_tokens=9)("", TURNS) == "- Seoul in May\n- budget 3000 USD"
    )


def test_cutting_a_huge_summary_counts_logarithmically() -> None:
    calls = 0

    def counting(text: str) -> int:
        nonlocal calls
        calls += 1
        return len(text.split())

    huge = " ".join(f"Sentence number {i} is here." for i in range(20_000))  # 100,000 words
    summarize = prompt_summarizer(Completions(huge, huge), max_summary_tokens=1_000, token_counter=counting)
    result = summarize("", TURNS)
    assert result.endswith("Sentence number 199 is here.")
    assert len(result.split()) == 1_000
    assert calls <= 2 + 20  # the two measures, then a binary search over 20,000 boundaries


sentences = st.lists(
    st.text(alphabet=st.sampled_from("ab  .!?\n"), min_size=1, max_size=40), min_size=1, max_size=12
).map("".join)


@given(
    text=sentences, limit=st.integers(1, 30), shortened=st.booleans(), per_token=st.sampled_from([None, 1, 3])
)
@settings(max_examples=300)
def test_the_summary_is_always_bounded(text: str, limit: int, shortened: bool, per_token: Any) -> None:
    counter = words if per_token is None else chars(per_token)
    reply = text if text.strip() else "x"
    llm = Completions(reply, reply if shortened else "")
    result = prompt_summarizer(llm, max_summary_tokens=limit, token_counter=counter)("", TURNS)
    assert counter(result) <= limit
    assert reply.strip().startswith(result)
    if counter(reply.strip()) <= limit:
        assert result == reply.strip()
    else:
        assert result  # something is always kept: at worst a prefix of the first word


# --- extractive --------------------------------------------------------------------------------


def test_extractive_keeps_the_first_sentence_of_each_turn() -> None:
    summarize = extractive_summarizer()
    assert summarize("", TURNS) == (
        "user: I want to visit Seoul in May.\n"
        'assistant: [tool calls: get_weather({"city": "Seoul"})]\n'
        'tool: {"temp_c": 18}\n'
        "assistant: Seoul is 18 C in May!"
    )


def test_extractive_appends_to_the_existing_summary_and_skips_empty_turns() -> None:
    summarize = extractive_summarizer()
    turns = [
        Message("user", "  Book the KTX\n to Busan.  Then a hotel."),
        Message("assistant", "   "),
        Message("assistant", "Done. [ok]", tool_calls=(ToolCall("c2", "book", '{\n  "train": "KTX"\n}'),)),
    ]
    assert summarize("Earlier summary.", turns) == (
        'Earlier summary.\nuser: Book the KTX\nassistant: Done. [tool calls: book({ "train": "KTX" })]'
    )


def test_extractive_drops_the_oldest_sentences_first() -> None:
    summarize = extractive_summarizer(max_summary_tokens=12)
    old = "Trip to Korea. Budget 3000 USD."  # 6 words, two sentences
    result = summarize(old, [Message("user", "Add Jeju for two days."), Message("assistant", "Sure.")])
    # 6 + 6 + 2 = 14 > 12: the oldest sentence goes, "Budget 3000 USD." stays
    assert result == "Budget 3000 USD.\nuser: Add Jeju for two days.\nassistant: Sure."


def test_extractive_cuts_the_newest_line_when_it_alone_is_too_long() -> None:
    summarize = extractive_summarizer(max_summary_tokens=4)
    result = summarize("Old.", [Message("user", "one two three four five six seven")])
    assert result == "user: one two three"


def test_extractive_is_deterministic_and_counts_with_the_given_counter() -> None:
    summarize = extractive_summarizer(max_summary_tokens=10, token_counter=chars(4))
    first = summarize("", TURNS)
    assert first == summarize("", TURNS) == "assistant: Seoul is 18 C in May!"  # 33 chars: 9 tokens
    assert chars(4)(first) <= 10


def test_extractive_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="max_summary_tokens must be > 0, got 0"):
        extractive_summarizer(0)
    with pytest.raises(TypeError, match="max_summary_tokens: expected int, got None"):
        extractive_summarizer(None)  # type: ignore[arg-type]


messages = st.lists(
    st.builds(
        Message,
        role=st.sampled_from(["user", "assistant", "tool", "system"]),
        content=st.text(alphabet=st.sampled_from("abc .!\n"), max_size=60),
    ),
    max_size=8,
)


@given(summary=sentences, turns=messages, limit=st.integers(1, 40), per_token=st.sampled_from([None, 2]))
@settings(max_examples=300)
def test_extractive_is_always_bounded_and_keeps_the_newest(
    summary: str, turns: list[Message], limit: int, per_token: Any
) -> None:
    counter = words if per_token is None else chars(per_token)
    result = extractive_summarizer(limit, counter)(summary, turns)
    assert counter(result) <= limit
    full = extractive_summarizer(10_000, counter)(summary, turns)
    assert result == result.strip()
    if counter(full) <= limit:
        assert result == full
        return
    assert result in full
    newest = full.splitlines()[-1].strip() if full else ""
    if counter(newest) <= limit:
        assert full.endswith(result)
        assert result.endswith(newest)


# --- with_fallback -----------------------------------------------------------------------------


class Recorder:
    def __init__(self, result: object = "fallback summary") -> None:
        self.result = result
        self.calls: list[tuple[str, list[Message]]] = []

    def __call__(self, summary: str, messages: Sequence[Message]) -> Any:
        self.calls.append((summary, list(messages)))
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result

    async def acall(self, summary: str, messages: Sequence[Message]) -> Any:
        await asyncio.sleep(0)
        return self(summary, messages)


def run_sync(primary: Recorder, fallback: Recorder, **kwargs: Any) -> str:
    return with_fallback(primary, fallback, **kwargs)("S", TURNS)


def run_async(primary: Recorder, fallback: Recorder, **kwargs: Any) -> str:
    summarize = async_with_fallback(primary.acall, fallback, **kwargs)  # async primary, sync fallback
    return asyncio.run(summarize("S", TURNS))  # type: ignore[arg-type]


def run_async_both(primary: Recorder, fallback: Recorder, **kwargs: Any) -> str:
    summarize = async_with_fallback(primary.acall, fallback.acall, **kwargs)
    return asyncio.run(summarize("S", TURNS))  # type: ignore[arg-type]


runners = pytest.mark.parametrize(
    "run", [run_sync, run_async, run_async_both], ids=["sync", "async", "async2"]
)


@runners
def test_primary_success_never_calls_the_fallback(run: Any) -> None:
    primary, fallback, errors = Recorder("primary summary"), Recorder(), []
    assert run(primary, fallback, on_error=errors.append) == "primary summary"
    assert primary.calls == [("S", TURNS)]
    assert fallback.calls == []
    assert errors == []


@runners
def test_primary_failure_calls_the_fallback_with_the_same_arguments(run: Any) -> None:
    outage = ConnectionError("LLM down")
    primary, fallback, errors = Recorder(outage), Recorder(), []
    assert run(primary, fallback, on_error=errors.append) == "fallback summary"
    assert fallback.calls == [("S", TURNS)]
    assert errors == [outage]


@runners
def test_a_non_string_from_the_primary_is_an_error(run: Any) -> None:
    errors: list[Exception] = []
    assert run(Recorder(42), Recorder(), on_error=errors.append) == "fallback summary"
    assert [str(error) for error in errors] == ["the primary summarizer returned int, expected str"]
    assert isinstance(errors[0], TypeError)


@runners
def test_default_report_is_a_warning_on_the_rollmem_logger(
    run: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rollmem"):
        assert run(Recorder(TimeoutError("slow LLM")), Recorder()) == "fallback summary"
    (record,) = caplog.records
    assert record.name == "rollmem"
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "summarizer failed, using the fallback: TimeoutError('slow LLM')"
    assert record.exc_info is None
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="rollmem"):
        run(Recorder(TimeoutError("slow LLM")), Recorder())
    warning, debug = caplog.records
    assert warning.levelno == logging.WARNING
    assert debug.levelno == logging.DEBUG
    assert debug.exc_info is not None
    assert isinstance(debug.exc_info[1], TimeoutError)


@runners
def test_a_failing_fallback_propagates(run: Any) -> None:
    errors: list[Exception] = []
    with pytest.raises(RuntimeError, match="fallback broke"):
        run(Recorder(ValueError("primary")), Recorder(RuntimeError("fallback broke")), on_error=errors.append)
    assert [str(error) for error in errors] == ["primary"]


@runners
def test_base_exceptions_are_not_swallowed(run: Any) -> None:
    fallback = Recorder()
    with pytest.raises(KeyboardInterrupt):
        run(Recorder(KeyboardInterrupt()), fallback)
    assert fallback.calls == []


def test_sync_form_refuses_coroutine_functions() -> None:
    recorder = Recorder()
    with pytest.raises(TypeError, match="primary is a coroutine function: use async_with_fallback"):
        with_fallback(recorder.acall, recorder)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="fallback is a coroutine function: use async_with_fallback"):
        with_fallback(recorder, recorder.acall)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_error: expected a callable, got str"):
        with_fallback(recorder, recorder, on_error="log")  # type: ignore[arg-type]


def test_llm_outage_degrades_to_the_extractive_summary() -> None:
    llm = Completions(ConnectionError("LLM down"))
    summarize = with_fallback(prompt_summarizer(llm), extractive_summarizer(), on_error=lambda error: None)
    assert summarize("", TURNS[:1]) == "user: I want to visit Seoul in May."


def test_async_llm_outage_degrades_to_the_extractive_summary() -> None:
    llm = Completions(ConnectionError("LLM down"))
    primary: Callable[[str, Sequence[Message]], Awaitable[str]] = async_prompt_summarizer(llm.acall)
    summarize = async_with_fallback(primary, extractive_summarizer(), on_error=lambda error: None)
    assert asyncio.run(summarize("", TURNS[:1])) == "user: I want to visit Seoul in May."  # type: ignore[arg-type]


def test_rendered_prompt_has_no_unfilled_placeholders() -> None:
    llm = Completions("ok")
    prompt_summarizer(llm)("", TURNS)
    assert not re.search(r"\{(summary|conversation)\}", llm.prompts[0])


# --- with a real memory ----------------------------------------------------------------------------


def test_a_memory_folds_through_the_fallback_when_the_llm_is_down() -> None:
    errors: list[Exception] = []
    llm = Completions(ConnectionError("LLM down"), "The user plans Seoul in May.")
    summarize = with_fallback(prompt_summarizer(llm), extractive_summarizer(), on_error=errors.append)
    memory = RollingMemory(max_tokens=12, summarize_fn=summarize)
    memory.add_user_message("I want to visit Seoul in May. Budget 3000.")  # 9 words
    memory.add_assistant_message("Great choice for spring.")  # 4: 13 > 12, the first message folds
    assert memory.summary == "user: I want to visit Seoul in May."
    assert [str(error) for error in errors] == ["LLM down"]
    memory.add_user_message("Also Busan, maybe Jeju, for two weeks in all.")  # 9 words: the LLM is back
    assert memory.summary == "The user plans Seoul in May."
    assert memory.stats().failed_folds == 0


def test_an_empty_completion_leaves_the_memory_as_it_was() -> None:
    memory = RollingMemory(max_tokens=5, summarize_fn=prompt_summarizer(Completions("")))
    memory.add_user_message("one two three")
    with pytest.raises(ValueError, match="empty summary"):
        memory.add_user_message("four five six")
    assert memory.summary == ""
    assert [m.content for m in memory.buffer] == ["one two three", "four five six"]
    assert memory.stats().failed_folds == 1


def test_async_memory_with_the_async_summarizer() -> None:
    llm = Completions("Seoul in May, then Busan.")

    async def scenario() -> AsyncRollingMemory:
        memory = AsyncRollingMemory(max_tokens=6, summarize_fn=async_prompt_summarizer(llm.acall))
        await memory.add_user_message("Seoul in May please.")
        await memory.add_assistant_message("Then Busan by KTX?")
        return memory

    memory = asyncio.run(scenario())
    assert memory.summary == "Seoul in May, then Busan."
    assert "user: Seoul in May please." in llm.prompts[0]


# --- cached_summarizer: a request sharing the conversation's cached prefix ----------------------

SYSTEM_PROMPT = "You are a travel agent. Answer briefly."


class MessageCompletions:
    """A scripted LLM taking a list of messages: answers with the next reply, records the requests."""

    def __init__(self, *replies: object) -> None:
        self.replies = list(replies)
        self.requests: list[list[Message]] = []

    def __call__(self, messages: list[Message]) -> Any:
        self.requests.append(messages)
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def acall(self, messages: list[Message]) -> Any:
        await asyncio.sleep(0)
        return self(messages)


def test_cached_summary_request_lays_out_system_summary_evicted_then_the_instruction() -> None:
    request = cached_summary_request("They plan a trip.", TURNS[:3], system=SYSTEM_PROMPT)
    assert request == [
        Message("system", SYSTEM_PROMPT),
        Message("system", "They plan a trip."),
        *TURNS[:3],
        Message("user", CACHED_INSTRUCTION),
    ]
    # No system prompt and no summary yet: only the evicted messages and the instruction.
    assert cached_summary_request("", TURNS[:1], instruction="Summarize.") == [
        TURNS[0],
        Message("user", "Summarize."),
    ]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"summary": 1}, TypeError, "summary: expected str, got int"),
        ({"evicted": "hello"}, TypeError, "evicted: expected a sequence of Message, got str"),
        ({"evicted": [TURNS[0], {"role": "user"}]}, TypeError, r"evicted\[1\]: expected Message, got dict"),
        ({"system": ""}, ValueError, "system must not be empty"),
        ({"instruction": ""}, ValueError, "instruction must not be empty"),
    ],
)
def test_cached_summary_request_checks_its_arguments(
    kwargs: dict[str, Any], error: type, message: str
) -> None:
    arguments: dict[str, Any] = {"summary": "", "evicted": TURNS, **kwargs}
    with pytest.raises(error, match=message):
        cached_summary_request(arguments.pop("summary"), arguments.pop("evicted"), **arguments)


def _run_cached(asynchronous: bool, llm: MessageCompletions) -> tuple[str, list[list[Message]]]:
    """Drive a memory through TURNS four times; before each add, the request the app would send.
    Returns the final summary and, per summarizer call, the last request sent before it."""
    sent: list[list[Message]] = []
    last_before_fold: list[list[Message]] = []

    def complete(messages: list[Message]) -> Any:
        last_before_fold.append(sent[-1])
        return llm(messages)

    async def acomplete(messages: list[Message]) -> Any:
        await asyncio.sleep(0)
        return complete(messages)

    if asynchronous:
        amemory = AsyncRollingMemory(
            40, async_cached_summarizer(acomplete, system=SYSTEM_PROMPT), chars(), target_tokens=10
        )

        async def drive() -> None:
            for message in TURNS * 4:
                sent.append([Message("system", SYSTEM_PROMPT), *amemory.get_messages()])
                await amemory.extend([message])

        asyncio.run(drive())
        return amemory.summary, last_before_fold
    memory = RollingMemory(40, cached_summarizer(complete, system=SYSTEM_PROMPT), chars(), target_tokens=10)
    for message in TURNS * 4:
        sent.append([Message("system", SYSTEM_PROMPT), *memory.get_messages()])
        memory.extend([message])
    return memory.summary, last_before_fold


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_summarization_request_extends_a_prefix_of_the_last_request_sent(asynchronous: bool) -> None:
    replies = [f"summary {n}" for n in range(1, 9)]
    llm = MessageCompletions(*replies)
    summary, last_sent = _run_cached(asynchronous, llm)
    assert len(llm.requests) >= 2, "the memory folded, with a summary the second time"
    assert llm.requests[1][1] == Message("system", "summary 1")
    for request, last in zip(llm.requests, last_sent):
        *shared, instruction = request
        assert instruction == Message("user", CACHED_INSTRUCTION)
        assert len(shared) > 1
        assert shared[0] == Message("system", SYSTEM_PROMPT)
        # The last request sent before the fold began with exactly these messages, so a provider's
        # prompt cache serves them (as rendered by the adapters).
        assert to_openai(last)[: len(shared)] == to_openai(shared)
    assert summary == replies[len(llm.requests) - 1]


@pytest.mark.parametrize("form", ["sync", "async"])
@pytest.mark.parametrize(
    ("reply", "error", "message"), [("  ", ValueError, "empty summary"), (7, TypeError, "str")]
)
def test_a_bad_completion_leaves_the_memory_as_it_was(
    form: str, reply: object, error: type, message: str
) -> None:
    llm = MessageCompletions(reply)
    if form == "sync":
        memory = RollingMemory(5, cached_summarizer(llm))
        memory.add_user_message("one two three")
        with pytest.raises(error, match=message):
            memory.add_user_message("four five six")
    else:
        memory = AsyncRollingMemory(5, async_cached_summarizer(llm.acall))  # type: ignore[assignment]
        asyncio.run(memory.add_user_message("one two three"))  # type: ignore[arg-type]
        with pytest.raises(error, match=message):
            asyncio.run(memory.add_user_message("four five six"))  # type: ignore[arg-type]
    assert memory.summary == ""
    assert [m.content for m in memory.buffer] == ["one two three", "four five six"]
    assert memory.stats().failed_folds == 1


def test_cached_summarizer_checks_its_arguments_at_construction() -> None:
    with pytest.raises(TypeError, match="complete"):
        cached_summarizer("no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="async_cached_summarizer"):
        cached_summarizer(MessageCompletions().acall)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="system must not be empty"):
        cached_summarizer(MessageCompletions(), system="")
    with pytest.raises(ValueError, match="instruction must not be empty"):
        async_cached_summarizer(MessageCompletions().acall, instruction="")


def test_cached_summary_request_puts_summary_as_in_place_of_the_summary_and_evicted() -> None:
    evicted = [Message("user", "hi"), Message("assistant", "hello")]
    seen: list[object] = []

    def summary_as(summary: str, messages: list[Message]) -> list[Message]:
        seen.append(messages)
        messages.clear()  # the callback's own list: the caller's is untouched
        return [Message("system", "Earlier: " + summary), *evicted]

    request = cached_summary_request("s", evicted, system="sys", summary_as=summary_as)
    assert [(m.role, m.content) for m in request] == [
        ("system", "sys"),
        ("system", "Earlier: s"),
        ("user", "hi"),
        ("assistant", "hello"),
        ("user", CACHED_INSTRUCTION),
    ]
    assert seen == [[]]
    assert len(evicted) == 2
    with pytest.raises(TypeError, match=r"^summary_as\(summary, evicted\)\[0\]: expected Message, got str$"):
        cached_summary_request("s", evicted, summary_as=lambda summary, messages: ["text"])  # type: ignore[list-item,return-value]
    with pytest.raises(TypeError, match=r"^summary_as: expected a callable or None, got int$"):
        cached_summarizer(lambda messages: "x", summary_as=3)  # type: ignore[arg-type]


def test_cached_summarizer_sends_what_summary_as_renders() -> None:
    sent: list[list[Message]] = []

    def complete(messages: list[Message]) -> str:
        sent.append(messages)
        return "new"

    def header(summary: str, messages: list[Message]) -> list[Message]:
        return [Message("system", "H:" + summary), *messages] if summary else messages

    summarize = cached_summarizer(complete, system="sys", summary_as=header)
    assert summarize("old", [Message("user", "a")]) == "new"
    assert [m.content for m in sent[0]] == ["sys", "H:old", "a", CACHED_INSTRUCTION]

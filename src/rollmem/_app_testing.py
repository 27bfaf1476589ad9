"""The application half of :mod:`rollmem.testing`: fakes and assertions for a chatbot's unit tests.

Standard library only (and rollmem's public API): a :class:`RecordingSummarizer`, a
:class:`FakeLLM` that takes the requests :mod:`rollmem.adapters` render, a
:class:`RecordingCounter`, in-memory sessions and the assertions about them. The assertions raise
``AssertionError`` themselves (they also work under ``python -O``), with a message that says what
is wrong.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Callable, TypeVar, Union

from .message import ASSISTANT, USER, Message
from .sessions import AsyncSessions, Sessions
from .stores import MemoryStore

if TYPE_CHECKING:
    from .sessions import _SessionMemory

__all__ = [
    "FakeLLM",
    "RecordingCounter",
    "RecordingSummarizer",
    "SummarizerDown",
    "assert_anthropic_accepts",
    "assert_nothing_lost",
    "assert_openai_accepts",
    "assert_responses_accepts",
    "assert_summarized_once",
    "async_memory_sessions",
    "memory_sessions",
]

M = TypeVar("M", bound="_SessionMemory")
_SYSTEM_ROLES = ("system", "developer")


def _check(condition: object, problem: str) -> None:
    if not condition:
        raise AssertionError(problem)


# -- fakes -------------------------------------------------------------------------------------


class SummarizerDown(RuntimeError):
    """What a :class:`RecordingSummarizer` raises while its ``fail`` is set."""


class RecordingSummarizer:
    """A fake ``summarize_fn``: deterministic, records what it was given, fails on demand.

    The new summary is the old one followed by one line per folded message, ``str(message)``
    (``"user: hi"``). Pass the object itself to a sync memory and :meth:`asummarize` to an async
    one. ``calls`` holds ``(summary, messages)`` of every call in order, failed ones included;
    :attr:`folded` the messages of the calls that succeeded. Set ``fail = True`` to make calls
    raise :class:`SummarizerDown` (counted in ``failures``) until it is set back. Thread-safe.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[Message]]] = []
        self.fail = False
        self.failures = 0
        self._succeeded: list[bool] = []
        self._lock = threading.Lock()

    def __call__(self, summary: str, messages: Sequence[Message]) -> str:
        batch = list(messages)
        with self._lock:
            self.calls.append((summary, batch))
            self._succeeded.append(not self.fail)
            if self.fail:
                self.failures += 1
                raise SummarizerDown("summarizer down (RecordingSummarizer.fail is set)")
        return "\n".join([summary, *map(str, batch)] if summary else map(str, batch))

    async def asummarize(self, summary: str, messages: Sequence[Message]) -> str:
        """The coroutine form, for async memories: yields to the event loop once, then answers
        as a call does."""
        await asyncio.sleep(0)
        return self(summary, messages)

    @property
    def folded(self) -> list[Message]:
        """The messages of the successful calls, in the order they were folded."""
        with self._lock:
            return [m for (_, batch), ok in zip(self.calls, self._succeeded) if ok for m in batch]


class RecordingCounter:
    """A deterministic token counter: one token per whitespace-separated word, as
    :func:`rollmem.counters.words`, with its own stable identity (so sessions trust the costs
    they stored with it). Records every text it counted: ``texts``, and ``calls`` their number."""

    rollmem_identity = "rollmem.testing.words"

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, text: str) -> int:
        self.texts.append(text)
        return len(text.split())

    @property
    def calls(self) -> int:
        """How many texts were counted."""
        return len(self.texts)


class FakeLLM:
    """A fake chat model: takes a request as :mod:`rollmem.adapters` render it, checks that the
    provider would accept it, records it, and answers from a script or by echoing.

    ``replies`` are the answers in order: a ``str``, or a :class:`~rollmem.Message` (an assistant
    reply with ``tool_calls``). Without replies it echoes: ``"echo: <the last user text>"``. A
    request after the last scripted reply, or one the provider would refuse, raises
    ``AssertionError``. ``requests`` holds every request taken (for Anthropic, ``(system,
    messages)``).
    """

    def __init__(self, replies: Iterable[Union[str, Message]] = ()) -> None:
        self._script = [Message(ASSISTANT, r) if isinstance(r, str) else r for r in replies]
        self._scripted = bool(self._script)
        self.requests: list[Any] = []

    def _reply(self, last_user_text: str) -> Message:
        if not self._scripted:
            return Message(ASSISTANT, f"echo: {last_user_text}")
        _check(self._script, f"FakeLLM: no scripted reply left for request {len(self.requests)}")
        return self._script.pop(0)

    def openai(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """Answer a Chat Completions request (``to_openai(...)``) with the response's message,
        as ``response.choices[0].message.model_dump()`` gives it (read it with ``from_openai``)."""
        assert_openai_accepts(messages)
        self.requests.append(messages)
        users = [item.get("content") for item in messages if item["role"] == USER]
        last = users[-1] if users else ""
        if not isinstance(last, str):  # content parts
            last = "\n".join(part.get("text", "") for part in last or ())
        reply = self._reply(last)
        answer: dict[str, Any] = {"role": ASSISTANT, "content": reply.content or None}
        if reply.tool_calls:
            answer["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in reply.tool_calls
            ]
        return answer

    def anthropic(
        self, system: Union[str, list[dict[str, Any]]], messages: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Answer a Messages API request (``to_anthropic(...)``) with the response, ``{"role":
        "assistant", "content": [blocks]}`` (read it with ``from_anthropic("", [response])``)."""
        assert_anthropic_accepts(system, messages)
        self.requests.append((system, messages))
        texts = [
            block["text"]
            for block in _blocks(messages[-1] if messages else {"content": ""})
            if block["type"] == "text"
        ]
        reply = self._reply("\n".join(texts))
        blocks = [{"type": "text", "text": reply.content}] if reply.content else []
        blocks.extend(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments or "{}")}
            for c in reply.tool_calls
        )
        return {"role": ASSISTANT, "content": blocks}


def memory_sessions(factory: Callable[[], M], **options: Any) -> Sessions[M]:
    """``Sessions(MemoryStore(), factory, **options)``: sessions kept in this process's memory."""
    return Sessions(MemoryStore(), factory, **options)


def async_memory_sessions(factory: Callable[[], M], **options: Any) -> AsyncSessions[M]:
    """``AsyncSessions(MemoryStore(), factory, **options)``: :func:`memory_sessions` for async code."""
    return AsyncSessions(MemoryStore(), factory, **options)


# -- assertions about a memory -----------------------------------------------------------------


def assert_nothing_lost(added: Iterable[Message], memory: Any, summarizer: RecordingSummarizer) -> None:
    """Each message of ``added`` is, exactly once, in ``memory.buffer`` or among the messages
    ``summarizer`` folded (its successful calls): none lost, none kept and folded, none folded
    twice. Messages compare by value; ``added`` may repeat one as often as it was added."""
    expected = Counter(added)
    found = Counter(memory.buffer) + Counter(summarizer.folded)
    problems = [
        f"{str(message)!r}: added {count} time(s), found {found[message]} time(s)"
        for message, count in expected.items()
        if found[message] != count
    ]
    _check(not problems, "messages lost or duplicated (in the buffer plus folded):\n" + "\n".join(problems))


def assert_summarized_once(summarizer: RecordingSummarizer) -> None:
    """No message was given to two successful calls of ``summarizer``. Messages equal in every
    field count as one: give repeated texts an ``id`` (or use :func:`assert_nothing_lost`)."""
    twice = [str(message) for message, count in Counter(summarizer.folded).items() if count > 1]
    _check(not twice, f"messages summarized more than once: {twice}")


# -- what the providers accept -----------------------------------------------------------------


def assert_openai_accepts(messages: list[dict[str, Any]]) -> None:
    """A Chat Completions ``messages`` list OpenAI accepts: each assistant message with
    ``tool_calls`` (their ids distinct) is followed directly by one ``tool`` message per call, and
    every ``tool`` message answers a call of the assistant message before its run."""
    index = 0
    while index < len(messages):
        start = index
        _check(messages[start]["role"] != "tool", f"messages[{start}]: a tool message opens the request")
        calls = [call["id"] for call in messages[start].get("tool_calls") or ()]
        _check(len(set(calls)) == len(calls), f"messages[{start}]: tool call ids repeated: {calls}")
        index += 1
        answered = []
        while index < len(messages) and messages[index]["role"] == "tool":
            answered.append(messages[index]["tool_call_id"])
            index += 1
        _check(
            sorted(answered) == sorted(calls), f"messages[{start}]: tool calls {calls} answered by {answered}"
        )


def _blocks(turn: dict[str, Any]) -> list[dict[str, Any]]:
    content = turn["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def assert_anthropic_accepts(
    system: Union[str, list[dict[str, Any]]], messages: list[dict[str, Any]]
) -> None:
    """A Messages API request Anthropic accepts: ``messages`` open with a user turn and roles
    alternate; no text (``system`` included) and no ``tool_result`` content is empty or
    whitespace only; every ``tool_use`` (ids distinct) is answered by a ``tool_result`` in the
    next turn, before any text there, and every result answers such a use; at most 4 cache
    breakpoints (``system`` included)."""
    _check(isinstance(system, (str, list)), f"system: expected str or list, got {type(system).__name__}")
    texts = [b["text"] for b in system] if isinstance(system, list) else [system] if system else []
    _check(all(text.strip() for text in texts), "system: an empty or whitespace-only text block")
    roles = [turn["role"] for turn in messages]
    _check(roles == [USER, ASSISTANT] * (len(roles) // 2) + [USER] * (len(roles) % 2), f"turns {roles}")
    breakpoints = sum("cache_control" in block for block in system) if isinstance(system, list) else 0
    uses: list[str] = []
    for index, turn in enumerate(messages):
        blocks = _blocks(turn)
        _check(blocks, f"messages[{index}]: an empty turn")
        breakpoints += sum("cache_control" in block for block in blocks)
        blank = [b for b in blocks if not str(b.get("text", b.get("content", "x"))).strip()]
        _check(not blank, f"messages[{index}]: an empty text block or tool_result (blank counts): {blank}")
        if turn["role"] == ASSISTANT:
            uses = [block["id"] for block in blocks if block["type"] == "tool_use"]
            _check(len(set(uses)) == len(uses), f"messages[{index}]: tool_use ids repeated: {uses}")
            continue
        kinds = [block["type"] for block in blocks]
        results = [block["tool_use_id"] for block in blocks if block["type"] == "tool_result"]
        _check(
            kinds[: len(results)] == ["tool_result"] * len(results),
            f"messages[{index}]: text before a tool_result",
        )
        _check(sorted(results) == sorted(uses), f"messages[{index}]: tool_use {uses} answered by {results}")
        uses = []
    _check(not uses, f"tool_use {uses} without a tool_result after it")
    _check(breakpoints <= 4, f"{breakpoints} cache breakpoints; at most 4 are allowed")


def assert_responses_accepts(items: list[dict[str, Any]]) -> None:
    """OpenAI Responses API ``input`` items OpenAI accepts: every ``function_call_output``
    answers an earlier ``function_call``, every call is answered, and the first message after
    the system/developer ones is the user's."""
    waiting: set[str] = set()
    for index, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "function_call":
            _check(item["call_id"] not in waiting, f"items[{index}]: a second call {item['call_id']!r}")
            waiting.add(item["call_id"])
        elif kind == "function_call_output":
            _check(item["call_id"] in waiting, f"items[{index}]: no function_call for {item['call_id']!r}")
            waiting.discard(item["call_id"])
    _check(not waiting, f"function calls without output: {sorted(waiting)}")
    first = next((item for item in items if item.get("role") not in _SYSTEM_ROLES), None)
    _check(first is None or first.get("role") == USER, f"the first item is not the user's: {first}")

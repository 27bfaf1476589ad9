"""LangChain v1 agents: a rolling memory as ``create_agent`` middleware.

Needs the ``langchain`` extra on Python 3.10+ (``pip install "rollmem[langchain]"``: ``langchain``,
``langgraph``, ``langchain-core``). Importing this module imports them, and raises
:class:`~rollmem.errors.MissingExtraError` (an ``ImportError``) when one is missing. Projects on
older ``langchain-core`` without agents keep
:class:`rollmem.adapters.langchain.RollingChatMessageHistory`.

:class:`RollingMemoryMiddleware` changes what the model sees, not what the graph stores: before
each model call it folds the oldest unfolded messages into a running summary with the same rules
as :class:`~rollmem.RollingMemory` (it drives one), and the model receives the system prompt, the
summary, then the newest messages verbatim. The summary and the fold position live in the agent
state (:data:`SUMMARY_KEY`, :data:`CURSOR_KEY`), so any checkpointer persists them.

:func:`langchain_summarizer` adapts a rollmem ``summarize_fn`` to LangChain's own
``SummarizationMiddleware(summarizer=...)``.
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Optional, Union, cast

from .. import _validate as v
from .._extras import missing_extra
from ..adapters import for_provider
from ..adapters.langchain import from_langchain
from ..changes import Change, Dropped, Folded
from ..counters import counter_identity, words
from ..errors import InvalidStateError, StateTypeError
from ..memory import AsyncRollingMemory, AsyncSummarizeFn, RollingMemory, SummarizeFn, TokenCounter
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
from ..policies import cached_target

_PACKAGES = {"langchain": "langchain", "langchain_core": "langchain-core", "langgraph": "langgraph"}

try:
    from langchain.agents.middleware.types import (
        AgentMiddleware,
        AgentState,
        ModelCallResult,
        ModelRequest,
        ModelResponse,
        OmitFromInput,
        PrivateStateAttr,
    )
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        HumanMessage,
        RemoveMessage,
        SystemMessage,
        ToolMessage,
    )
    from langgraph.runtime import Runtime
    from typing_extensions import Annotated, NotRequired, TypeAlias
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a subprocess without the packages
    # The extra installs langchain and langgraph on Python 3.10+ only: say so where that matters.
    _feature = __name__ if sys.version_info >= (3, 10) else f"{__name__} (Python 3.10+)"
    _missing = missing_extra(exc, _PACKAGES, extra="langchain", feature=_feature)
    if _missing is None:
        raise
    raise _missing from exc

if TYPE_CHECKING and sys.version_info >= (3, 10):
    _Request: TypeAlias = ModelRequest[Any]
    _Runtime: TypeAlias = Runtime[Any]
    _AnyMessage: TypeAlias = AnyMessage
else:
    # At run time nothing is subscripted (langchain 1.0's ModelRequest is not generic).
    # mypy runs at python_version 3.9 and takes this branch too: there it cannot evaluate langgraph's
    # ContextT (bound ``StateLike | None``) nor langchain-core's ``AnyMessage`` (a run-time ``|``
    # union), so ModelRequest and Runtime take no type arguments and messages are BaseMessage.
    # The aliases are explicit so that they stay aliases (of Any) where the extra is missing.
    _Request: TypeAlias = ModelRequest
    _Runtime: TypeAlias = Runtime
    _AnyMessage: TypeAlias = BaseMessage

__all__ = [
    "CURSOR_KEY",
    "SUMMARY_KEY",
    "RollingMemoryMiddleware",
    "RollingMemoryState",
    "langchain_summarizer",
]

SUMMARY_KEY = "rollmem_summary"
"""The agent-state key of the running summary (``""`` until the first fold)."""
CURSOR_KEY = "rollmem_cursor"
"""The agent-state key of the fold position and the stored costs: ``{"start": id, "kept": [ids],
"seen": id, "after": id, "counter": identity, "costs": [ints]}``. The memory's buffer is the
messages from the one whose id is ``start`` (``None``: the first message, before any fold) to the
end, preceded by the older messages whose ids are in ``kept`` (pinned units); every other message
before ``start`` is folded. ``costs`` are the token costs of the buffer up to ``seen`` (the newest
message counted), trusted when ``counter`` equals the identity of the middleware's counter
(:func:`rollmem.counters.counter_identity`); ``after`` is the message just before ``start``, where
the cursor re-anchors when ``start`` was removed from the state. Absent until the first model call;
a cursor of rollmem 0.6 (``start`` and ``kept`` only) is read, its buffer counted once more."""

logger = logging.getLogger("rollmem")

#: The prefix of the summary message LangChain's ``SummarizationMiddleware`` writes.
_LC_SUMMARY_PREFIX = "Here is a summary of the conversation to date:\n\n"


class RollingMemoryState(AgentState[Any]):  # type: ignore[misc, unused-ignore]  # see [tool.mypy]
    """The agent state with :class:`RollingMemoryMiddleware`'s fields."""

    rollmem_summary: NotRequired[Annotated[str, OmitFromInput]]  # type: ignore[valid-type, unused-ignore]
    rollmem_cursor: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]  # type: ignore[valid-type, unused-ignore]


def _state_summary(state: Mapping[str, Any]) -> str:
    return v.get_str(state, SUMMARY_KEY, "", default="")


class _Cursor:
    """:data:`CURSOR_KEY` read and checked."""

    __slots__ = ("after", "costs", "counter", "kept", "seen", "start")

    def __init__(self, state: Mapping[str, Any]) -> None:
        raw = state.get(CURSOR_KEY)
        self.start: Optional[str] = None
        self.kept: list[str] = []
        self.seen: Optional[str] = None
        self.after: Optional[str] = None
        self.counter: Optional[str] = None
        self.costs: Optional[list[int]] = None
        if raw is None:
            return
        cursor = v.expect_mapping(raw, CURSOR_KEY)
        self.start = v.get_optional_str(cursor, "start", CURSOR_KEY)
        self.kept = v.get_list(cursor, "kept", CURSOR_KEY)
        for index, item in enumerate(self.kept):
            if not isinstance(item, str):
                raise StateTypeError(
                    v.join(v.join(CURSOR_KEY, "kept"), index), f"expected str, got {v.type_name(item)}"
                )
        # Written since 0.7.0; a cursor without them is read as before (every message recounted once).
        self.seen = v.get_optional_str(cursor, "seen", CURSOR_KEY)
        self.after = v.get_optional_str(cursor, "after", CURSOR_KEY)
        self.counter = v.get_optional_str(cursor, "counter", CURSOR_KEY)
        if cursor.get("costs") is not None:
            costs = v.get_list(cursor, "costs", CURSOR_KEY)
            for index, cost in enumerate(costs):
                if not v.is_int(cost) or cost < 0:
                    raise StateTypeError(
                        v.join(v.join(CURSOR_KEY, "costs"), index),
                        f"expected an int >= 0, got {cost!r}"
                        if v.is_int(cost)
                        else f"expected int, got {v.type_name(cost)}",
                    )
            self.costs = costs


def _find(messages: Sequence[BaseMessage], message_id: Optional[str]) -> int:
    """The position of the message with this id, searched from the end (it is near the end); -1."""
    if message_id is None:
        return -1
    position = len(messages) - 1
    while position >= 0 and messages[position].id != message_id:
        position -= 1
    return position


def _tail_start(messages: Sequence[BaseMessage], cursor: _Cursor) -> tuple[int, Optional[str]]:
    """Where the contiguous part of the buffer starts in ``messages``, and a note when the cursor's
    start was gone (removed by ``RemoveMessage`` or ``REMOVE_ALL_MESSAGES``) and had to be re-found."""
    if cursor.start is None:
        return 0, None
    position = _find(messages, cursor.start)
    if position >= 0:
        return position, None
    anchor = _find(messages, cursor.after)
    if anchor >= 0:
        return anchor + 1, (
            f"the first unfolded message {cursor.start!r} is no longer in the state; the fold position "
            f"is re-anchored after {cursor.after!r}, the message before it"
        )
    return 0, (
        f"the first unfolded message {cursor.start!r} is no longer in the state, nor the message "
        "before it; starting over from the messages in the state, keeping the summary"
    )


class _Live:
    """A memory kept between model calls of one thread, with where its buffer sits in the state."""

    __slots__ = ("kept", "length", "memory", "started")

    def __init__(self, memory: Union[RollingMemory, AsyncRollingMemory], kept: int, started: bool) -> None:
        self.memory = memory
        self.kept = kept  # buffer[:kept] are pinned messages before the contiguous tail
        self.started = started  # a fold happened: the cursor has a start
        self.length = 0  # len(state["messages"]) the buffer's newest message ends


_LIVE_THREADS = 256  # memories kept between model calls, most recently used first


def _buffer_indices(messages: Sequence[BaseMessage], cursor: _Cursor) -> tuple[list[int], int, Optional[str]]:
    """The positions of the memory's buffer in ``messages`` (see :data:`CURSOR_KEY`), how many of
    them are kept before the contiguous tail, and the note of :func:`_tail_start`."""
    position, note = _tail_start(messages, cursor)
    head: list[int] = []
    if cursor.kept:
        wanted = set(cursor.kept)
        head = [index for index in range(position) if messages[index].id in wanted]
    return [*head, *range(position, len(messages))], len(head), note


def _message_id(messages: Sequence[BaseMessage], index: int) -> str:
    message_id = messages[index].id
    if not isinstance(message_id, str):
        raise InvalidStateError(
            v.join(v.join("messages", index), "id"),
            f"expected str, got {v.type_name(message_id)}; the agent state gives every message an id",
        )
    return message_id


class RollingMemoryMiddleware(AgentMiddleware[RollingMemoryState]):  # type: ignore[misc, unused-ignore]
    """``create_agent`` middleware: the model sees a running summary plus the newest messages.

    Before each model call the model receives the agent's system prompt (untouched, not
    counted), then ``summary_message(summary)`` when the summary is non-empty, then the newest
    messages verbatim (the state's own message objects) within ``max_tokens`` by
    ``token_counter``. Older messages are folded into the summary by one
    ``summarize_fn(summary, evicted)`` call, ``evicted`` being rollmem
    :class:`~rollmem.Message` objects converted with :func:`rollmem.adapters.langchain.from_langchain`,
    each message exactly once; without ``summarize_fn`` they are dropped from the model's view.
    The rules are :class:`~rollmem.RollingMemory`'s (a memory runs the fold): whole units (an
    ``AIMessage`` with ``tool_calls`` and its ``ToolMessage``s), oldest first, down to
    ``target_tokens`` once over ``max_tokens``, the newest unit always kept, the cut extended so the
    messages after the summary do not open with a reply (unless every unit up to the newest is
    one), pinned units (``pin(message)`` true) never folded.

    The summary and the fold position are agent state (:data:`SUMMARY_KEY`, :data:`CURSOR_KEY`),
    persisted by any checkpointer: a new agent with this middleware on the same checkpointer and
    thread continues without summarizing anything again. Each message is counted once per thread:
    a model call counts only the messages added since the previous one (the thread's memory is
    kept between calls, for the 256 most recent threads), and the costs are stored in the cursor
    with the counter's identity, so a new agent counts again only with an unnamed counter.

    When the message where the unfolded part starts was removed from the state (``RemoveMessage``,
    ``REMOVE_ALL_MESSAGES``), the next call re-anchors the fold position after the message before
    it, or, when that one is gone too, starts over from the messages in the state keeping the
    summary; either way it logs a warning on the ``"rollmem"`` logger. ``state["messages"]`` keeps the full
    history unless ``prune_folded`` is true: then each fold also removes the folded messages from
    the state (``RemoveMessage``), so the checkpoint stays bounded too.

    If ``summarize_fn`` raises, the error propagates from ``invoke``/``ainvoke`` and the
    summary and fold position are unchanged (the input messages of that run stay in the state,
    as LangGraph keeps them); the next run folds again. ``summarize_fn`` may be a coroutine
    function: the agent must then run with ``ainvoke``/``astream`` (sync ``invoke`` raises
    ``TypeError``). Arguments are checked as :class:`~rollmem.RollingMemory` checks them.

    Messages with content rollmem cannot convert (images and other non-text blocks) raise
    ``ValueError`` naming ``messages[i]``: nothing is folded silently.
    """

    state_schema = RollingMemoryState

    def __init__(
        self,
        max_tokens: int = 2000,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        *,
        target_tokens: Optional[int] = None,
        pin: Optional[Callable[[BaseMessage], bool]] = None,
        prune_folded: bool = False,
        summary_message: Optional[Callable[[str], _AnyMessage]] = None,
    ) -> None:
        super().__init__()
        # The async memory accepts both kinds of summarizer: it checks the shared arguments.
        AsyncRollingMemory(max_tokens, summarize_fn, token_counter, target_tokens=target_tokens)
        v.check_callable("pin", pin, optional=True)
        v.check_callable("summary_message", summary_message, optional=True)
        v.check_bool("prune_folded", prune_folded)
        self.max_tokens = max_tokens
        self.target_tokens = cached_target(max_tokens) if target_tokens is None else target_tokens
        self.summarize_fn = summarize_fn
        self.token_counter = token_counter
        self.pin = pin
        self.prune_folded = prune_folded
        self._summary_message = summary_message
        self._cache: OrderedDict[str, _Live] = OrderedDict()  # by the id of the newest counted message
        self._cache_lock = threading.Lock()  # threads of one agent may run model calls at once

    # -- what the model sees ------------------------------------------------------------------

    def summary_message(self, summary: str) -> _AnyMessage:
        """The message that carries a non-empty summary: ``summary_message(summary)`` when given,
        else ``SystemMessage(summary)``."""
        if self._summary_message is None:
            return SystemMessage(content=summary)
        message = self._summary_message(summary)
        if not isinstance(message, BaseMessage):
            raise TypeError(f"summary_message returned {v.type_name(message)}; expected a BaseMessage")
        return message

    def model_messages(self, request: _Request) -> list[_AnyMessage]:
        """The messages the model receives after the system prompt: the summary message, then the
        buffer (the original objects of ``request.messages``), as every provider accepts them
        (:func:`~rollmem.adapters.for_provider`: a ``HumanMessage`` ``CONTINUATION_TEXT`` first
        when the buffer opens with another turn, unpaired tool calls and results as text)."""
        state = cast("Mapping[str, Any]", request.state)
        messages = request.messages
        view: list[_AnyMessage] = [messages[index] for index in _buffer_indices(messages, _Cursor(state))[0]]
        summary = _state_summary(state)
        if summary:
            view.insert(0, self.summary_message(summary))
        return _for_provider(view)

    def wrap_model_call(
        self,
        request: _Request,
        handler: Callable[[_Request], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        """Call the model with :meth:`model_messages`."""
        return handler(request.override(messages=self.model_messages(request)))

    async def awrap_model_call(
        self,
        request: _Request,
        handler: Callable[[_Request], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        """:meth:`wrap_model_call` for ``ainvoke``."""
        return await handler(request.override(messages=self.model_messages(request)))

    # -- folding ------------------------------------------------------------------------------

    def before_model(self, state: RollingMemoryState, runtime: _Runtime) -> Optional[dict[str, Any]]:
        """Count the messages added since the last model call, fold what the budget says with a
        :class:`~rollmem.RollingMemory`; returns the state update (summary, fold position with the
        stored costs, removals when pruning), or ``None`` when no message was added."""
        if inspect.iscoroutinefunction(self.summarize_fn):
            raise TypeError(
                "summarize_fn is a coroutine function: run the agent with ainvoke/astream, "
                "or give RollingMemoryMiddleware a sync summarize_fn"
            )
        step = self._begin(cast("Mapping[str, Any]", state), RollingMemory)
        if step is None:
            return None
        live, new, messages = step
        memory = cast("RollingMemory", live.memory)
        with memory.record() as changes:
            memory.extend(new)
        return self._finish(live, changes, messages)

    async def abefore_model(self, state: RollingMemoryState, runtime: _Runtime) -> Optional[dict[str, Any]]:
        """:meth:`before_model` with an :class:`~rollmem.AsyncRollingMemory` (``summarize_fn``
        may be a coroutine function)."""
        step = self._begin(cast("Mapping[str, Any]", state), AsyncRollingMemory)
        if step is None:
            return None
        live, new, messages = step
        memory = cast("AsyncRollingMemory", live.memory)
        with memory.record() as changes:
            await memory.extend(new)
        return self._finish(live, changes, messages)

    def _new_memory(self, kind: type) -> Union[RollingMemory, AsyncRollingMemory]:
        summarize_fn = self.summarize_fn
        if kind is RollingMemory:
            summarize_fn = cast("Optional[SummarizeFn]", summarize_fn)
        memory: Union[RollingMemory, AsyncRollingMemory] = kind(
            self.max_tokens, summarize_fn, self.token_counter, target_tokens=self.target_tokens
        )
        return memory

    def _identity(self) -> Optional[str]:
        return counter_identity(words if self.token_counter is None else self.token_counter)

    def _convert(self, messages: Sequence[BaseMessage], indices: list[int]) -> list[Message]:
        for index in indices:
            _message_id(messages, index)
        try:
            converted = from_langchain([messages[index] for index in indices])
        except InvalidStateError as error:  # name the position in the state, not in the buffer
            raise _at_state_index(error, indices) from error
        pin = self.pin
        if pin is not None:
            converted = [
                replace(message, pinned=True) if pin(messages[index]) else message
                for message, index in zip(converted, indices)
            ]
        return converted

    def _begin(
        self, state: Mapping[str, Any], kind: type
    ) -> Optional[tuple[_Live, list[Message], Sequence[BaseMessage]]]:
        """The thread's memory (kept from the last call, else rebuilt from the state with the stored
        costs) and the messages added since, converted; ``None`` when none was added."""
        messages: Sequence[BaseMessage] = state["messages"]
        cursor = _Cursor(state)
        summary = _state_summary(state)
        live = None
        if cursor.seen is not None:
            with self._cache_lock:
                live = self._cache.pop(cursor.seen, None)
        if live is not None and self._current(live, kind, messages, cursor, summary):
            new = list(range(live.length, len(messages)))
        else:
            live, new = self._rebuild(messages, cursor, summary, kind)
        if not new:
            if cursor.seen is not None and live.length == len(messages):
                self._keep(cursor.seen, live)  # nothing added: the next call finds it again
            return None
        return live, self._convert(messages, new), messages

    def _current(
        self, live: _Live, kind: type, messages: Sequence[BaseMessage], cursor: _Cursor, summary: str
    ) -> bool:
        """Whether the state is the one ``live`` was left at, plus messages added at the end."""
        memory = live.memory
        length = live.length
        if type(memory) is not kind or memory.summary != summary or not 0 < length <= len(messages):
            return False
        if messages[length - 1].id != cursor.seen:
            return False
        buffer = memory.buffer
        start = buffer[live.kept].id if live.started else None
        return start == cursor.start and [m.id for m in buffer[: live.kept]] == cursor.kept

    def _rebuild(
        self, messages: Sequence[BaseMessage], cursor: _Cursor, summary: str, kind: type
    ) -> tuple[_Live, list[int]]:
        """A memory holding the buffer the cursor names up to its newest counted message, with the
        stored costs (when they hold: the same counter, nothing removed since), and the positions
        of the buffered messages still to add (all of them when the costs do not hold)."""
        indices, head, note = _buffer_indices(messages, cursor)
        if note is not None:
            logger.warning("RollingMemoryMiddleware: %s", note)
        seen = -1 if note is not None else _find(messages, cursor.seen)
        known = [index for index in indices if index <= seen]
        costs = cursor.costs
        if (
            costs is None
            or cursor.counter is None
            or cursor.counter != self._identity()
            or len(costs) != len(known)
        ):
            known, costs = [], []
        memory = self._new_memory(kind)
        memory.restore(
            {"version": 2, "summary": summary, "buffer": self._convert(messages, known)}, costs=costs
        )
        live = _Live(memory, head, cursor.start is not None or note is not None)
        live.length = seen + 1
        return live, indices[len(known) :]

    def _finish(
        self, live: _Live, changes: Sequence[Change], messages: Sequence[BaseMessage]
    ) -> dict[str, Any]:
        memory = live.memory
        folded: list[str] = []
        for change in changes:
            if isinstance(change, (Folded, Dropped)):
                last = change.positions[-1]
                live.kept = last + 1 - len(change.positions)
                live.started = True
                folded.extend(cast(str, message.id) for message in change.messages)
        buffer = memory.buffer
        kept = buffer[: live.kept]
        length = len(messages)
        start_at = length - (len(buffer) - live.kept)  # where the contiguous tail starts in the state
        if self.prune_folded:
            after = kept[-1].id if kept else None
            length -= len(folded)
        else:
            after = messages[start_at - 1].id if start_at > 0 else None
        live.length = length
        seen = cast(str, buffer[-1].id)
        update: dict[str, Any] = {
            SUMMARY_KEY: memory.summary,
            CURSOR_KEY: {
                "start": buffer[live.kept].id if live.started else None,
                "kept": [message.id for message in kept],
                "seen": seen,
                "after": after if live.started else None,
                "counter": self._identity(),
                "costs": memory.costs(),
            },
        }
        if folded and self.prune_folded:
            update["messages"] = [RemoveMessage(id=message_id) for message_id in folded]
        self._keep(seen, live)
        return update

    def _keep(self, seen: str, live: _Live) -> None:
        cache = self._cache
        with self._cache_lock:
            cache[seen] = live
            cache.move_to_end(seen)
            while len(cache) > _LIVE_THREADS:
                cache.popitem(last=False)


def _outline(message: BaseMessage, position: int) -> Message:
    """What :func:`~rollmem.adapters.for_provider` reads of a LangChain message (its id: its position)."""
    text = str(message.text)
    if isinstance(message, AIMessage):
        calls = [*message.tool_calls, *message.invalid_tool_calls]
        return Message(
            ASSISTANT,
            text,
            id=str(position),
            tool_calls=tuple(
                ToolCall(str(call.get("id") or ""), str(call.get("name") or ""), _arguments(call.get("args")))
                for call in calls
            ),
        )
    if isinstance(message, ToolMessage):
        error = {"is_error": True} if message.status == "error" else {}
        return Message(TOOL, text, id=str(position), tool_call_id=message.tool_call_id, metadata=error)
    role = (
        SYSTEM
        if isinstance(message, SystemMessage)
        else USER
        if isinstance(message, HumanMessage)
        else "other"
    )
    return Message(role, text, id=str(position))


def _arguments(args: object) -> str:
    return args if isinstance(args, str) else json.dumps(args, separators=(",", ":"), ensure_ascii=False)


def _for_provider(view: list[_AnyMessage]) -> list[_AnyMessage]:
    """``view`` under the provider rule, the original objects wherever the rule keeps a message."""
    outline = [_outline(message, position) for position, message in enumerate(view)]
    fixed = for_provider(outline)
    if fixed is outline:
        return view
    originals = {id(message): view[position] for position, message in enumerate(outline)}
    result: list[_AnyMessage] = []
    for message in fixed:
        original = originals.get(id(message))
        if original is not None:
            result.append(original)
        elif message.id is None:  # the opening user turn
            result.append(HumanMessage(content=message.content))
        elif message.role == USER:  # a tool result sent as text
            result.append(HumanMessage(content=message.content, id=view[int(message.id)].id))
        else:  # an assistant message whose unanswered calls are sent as text
            source = cast("AIMessage", view[int(message.id)])
            kept = {call.id for call in message.tool_calls}
            update = {
                "content": message.content,
                "tool_calls": [call for call in source.tool_calls if call.get("id") in kept],
                "invalid_tool_calls": [call for call in source.invalid_tool_calls if call.get("id") in kept],
            }
            result.append(source.model_copy(update=update))
    return result


def _at_state_index(error: InvalidStateError, indices: list[int]) -> InvalidStateError:
    """``error`` with its ``messages[k]`` (a buffer position) renamed to the position in the state."""
    path = error.path
    if path.startswith("messages["):
        close = path.index("]")
        position = int(path[len("messages[") : close])
        path = f"messages[{indices[position]}]{path[close + 1 :]}"
    return type(error)(path, error.problem)


# -- LangChain's own SummarizationMiddleware ------------------------------------------------------


def _split_summary(messages: Sequence[BaseMessage]) -> tuple[str, list[Message]]:
    summaries = [
        index
        for index, message in enumerate(messages)
        if isinstance(message, HumanMessage) and message.additional_kwargs.get("lc_source") == "summarization"
    ]
    if len(summaries) > 1:
        raise InvalidStateError(
            v.join("messages", summaries[1]), "a second summary message; expected at most one"
        )
    summary = ""
    rest = list(messages)
    if summaries:
        text = from_langchain([rest.pop(summaries[0])])[0].content
        summary = text[len(_LC_SUMMARY_PREFIX) :] if text.startswith(_LC_SUMMARY_PREFIX) else text
    return summary, from_langchain(rest)


def langchain_summarizer(
    summarize_fn: Union[SummarizeFn, AsyncSummarizeFn],
) -> Union[Callable[[list[_AnyMessage]], str], Callable[[list[_AnyMessage]], Awaitable[str]]]:
    """A ``summarizer`` for LangChain's ``SummarizationMiddleware`` that calls a rollmem
    ``summarize_fn(summary, evicted)``.

    ``SummarizationMiddleware`` hands its summarizer one message list: its previous summary (a
    ``HumanMessage`` it marked ``additional_kwargs["lc_source"] == "summarization"``, text
    ``"Here is a summary of the conversation to date:\\n\\n" + summary``) followed by the messages
    it evicts. This splits that list back: ``summary`` is the previous summary's text without the
    prefix (``""`` the first time), ``evicted`` the other messages converted with
    :func:`rollmem.adapters.langchain.from_langchain`. A coroutine ``summarize_fn`` gives a
    coroutine function (the agent then runs with ``ainvoke``).

    ``SummarizationMiddleware`` takes a ``summarizer`` from langchain 1.5 on. Pass
    ``trim_tokens_to_summarize=None`` to it: otherwise it trims the
    list to its newest 4000 tokens first, and the trimmed messages (the previous summary among
    them) never reach ``summarize_fn``. Unlike :class:`RollingMemoryMiddleware` it rewrites
    ``state["messages"]`` (the summary message replaces what it folds) and applies its own
    ``trigger``/``keep`` rules and token counter.
    """
    if not callable(summarize_fn):
        raise TypeError(f"summarize_fn: expected a callable, got {v.type_name(summarize_fn)}")
    if inspect.iscoroutinefunction(summarize_fn):
        async_fn = cast("AsyncSummarizeFn", summarize_fn)

        async def asummarize(messages: list[_AnyMessage]) -> str:
            summary, evicted = _split_summary(messages)
            return await async_fn(summary, evicted)

        return asummarize

    sync_fn = cast("SummarizeFn", summarize_fn)

    def summarize(messages: list[_AnyMessage]) -> str:
        summary, evicted = _split_summary(messages)
        return sync_fn(summary, evicted)

    return summarize

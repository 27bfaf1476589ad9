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
import sys
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Optional, Union, cast

from .. import _validate as v
from ..adapters.langchain import from_langchain
from ..errors import InvalidStateError, MissingExtraError, StateTypeError
from ..memory import AsyncRollingMemory, AsyncSummarizeFn, RollingMemory, SummarizeFn, TokenCounter
from ..message import Message
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
    from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage, RemoveMessage, SystemMessage
    from langgraph.runtime import Runtime
    from typing_extensions import Annotated, NotRequired
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a subprocess without the packages
    _package = _PACKAGES.get((exc.name or "").split(".")[0])
    if _package is None:
        raise
    # The extra installs langchain and langgraph on Python 3.10+ only: say so where that matters.
    _feature = __name__ if sys.version_info >= (3, 10) else f"{__name__} (Python 3.10+)"
    raise MissingExtraError(_package, "langchain", _feature) from exc

if TYPE_CHECKING and sys.version_info >= (3, 10):
    _Request = ModelRequest[Any]
    _Runtime = Runtime[Any]
    _AnyMessage = AnyMessage
else:
    # At run time nothing is subscripted (langchain 1.0's ModelRequest is not generic).
    # mypy runs at python_version 3.9 and takes this branch too: there it cannot evaluate langgraph's
    # ContextT (bound ``StateLike | None``) nor langchain-core's ``AnyMessage`` (a run-time ``|``
    # union), so ModelRequest and Runtime take no type arguments and messages are BaseMessage.
    _Request = ModelRequest
    _Runtime = Runtime
    _AnyMessage = BaseMessage

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
"""The agent-state key of the fold position: ``{"start": id, "kept": [ids]}``. The memory's buffer
is the messages from the one whose id is ``start`` to the end, preceded by the older messages
whose ids are in ``kept`` (pinned units); every other message before ``start`` is folded.
Absent until the first fold."""

#: The prefix of the summary message LangChain's ``SummarizationMiddleware`` writes.
_LC_SUMMARY_PREFIX = "Here is a summary of the conversation to date:\n\n"


class RollingMemoryState(AgentState[Any]):
    """The agent state with :class:`RollingMemoryMiddleware`'s fields."""

    rollmem_summary: NotRequired[Annotated[str, OmitFromInput]]
    rollmem_cursor: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]


class _Fold:
    """One before-model step: the unfolded messages, as the originals and as rollmem messages."""

    __slots__ = ("converted", "indices", "messages", "summary")

    def __init__(
        self, messages: Sequence[BaseMessage], indices: list[int], converted: list[Message], summary: str
    ):
        self.messages = messages
        self.indices = indices  # positions in messages of the buffer, oldest first
        self.converted = converted
        self.summary = summary


def _state_summary(state: Mapping[str, Any]) -> str:
    return v.get_str(state, SUMMARY_KEY, "", default="")


def _buffer_indices(messages: Sequence[BaseMessage], state: Mapping[str, Any]) -> list[int]:
    """The positions of the memory's buffer in ``messages`` (see :data:`CURSOR_KEY`)."""
    cursor = state.get(CURSOR_KEY)
    if cursor is None:
        return list(range(len(messages)))
    cursor = v.expect_mapping(cursor, CURSOR_KEY)
    start = v.get_optional_str(cursor, "start", CURSOR_KEY)
    kept = v.get_list(cursor, "kept", CURSOR_KEY)
    for index, item in enumerate(kept):
        if not isinstance(item, str):
            raise StateTypeError(
                v.join(v.join(CURSOR_KEY, "kept"), index), f"expected str, got {v.type_name(item)}"
            )
    if start is None:
        return list(range(len(messages)))
    position = len(messages) - 1
    while position >= 0 and messages[position].id != start:  # the start is near the end
        position -= 1
    if position < 0:
        raise InvalidStateError(
            v.join(CURSOR_KEY, "start"),
            f"no message with id {start!r} in messages: the first unfolded message was removed from "
            "the state by something other than this middleware",
        )
    head: list[int] = []
    if kept:
        wanted = set(kept)
        head = [index for index in range(position) if messages[index].id in wanted]
    return [*head, *range(position, len(messages))]


def _message_id(messages: Sequence[BaseMessage], index: int) -> str:
    message_id = messages[index].id
    if not isinstance(message_id, str):
        raise InvalidStateError(
            v.join(v.join("messages", index), "id"),
            f"expected str, got {v.type_name(message_id)}; the agent state gives every message an id",
        )
    return message_id


def _check_callable(name: str, value: object) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{name}: expected a callable or None, got {v.type_name(value)}")


class RollingMemoryMiddleware(AgentMiddleware[RollingMemoryState]):
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
    thread continues without summarizing anything again. ``state["messages"]`` keeps the full
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
        _check_callable("pin", pin)
        _check_callable("summary_message", summary_message)
        if not isinstance(prune_folded, bool):
            raise TypeError(f"prune_folded: expected bool, got {v.type_name(prune_folded)}")
        self.max_tokens = max_tokens
        self.target_tokens = cached_target(max_tokens) if target_tokens is None else target_tokens
        self.summarize_fn = summarize_fn
        self.token_counter = token_counter
        self.pin = pin
        self.prune_folded = prune_folded
        self._summary_message = summary_message

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
        buffer (the original objects of ``request.messages``)."""
        state = cast("Mapping[str, Any]", request.state)
        messages = request.messages
        view: list[_AnyMessage] = [messages[index] for index in _buffer_indices(messages, state)]
        summary = _state_summary(state)
        if summary:
            view.insert(0, self.summary_message(summary))
        return view

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
        """Fold what the budget says with a :class:`~rollmem.RollingMemory`; returns the state
        update (summary, fold position, removals when pruning), or ``None`` when nothing folds."""
        if inspect.iscoroutinefunction(self.summarize_fn):
            raise TypeError(
                "summarize_fn is a coroutine function: run the agent with ainvoke/astream, "
                "or give RollingMemoryMiddleware a sync summarize_fn"
            )
        fold = self._begin(state)
        if fold is None:
            return None
        memory = RollingMemory(
            self.max_tokens,
            cast("Optional[SummarizeFn]", self.summarize_fn),
            self.token_counter,
            target_tokens=self.target_tokens,
        )
        memory.summary = fold.summary
        memory.buffer = fold.converted[:-1]
        memory.extend(fold.converted[-1:])
        return self._finish(fold, memory.summary, memory.buffer)

    async def abefore_model(self, state: RollingMemoryState, runtime: _Runtime) -> Optional[dict[str, Any]]:
        """:meth:`before_model` with an :class:`~rollmem.AsyncRollingMemory` (``summarize_fn``
        may be a coroutine function)."""
        fold = self._begin(state)
        if fold is None:
            return None
        memory = AsyncRollingMemory(
            self.max_tokens, self.summarize_fn, self.token_counter, target_tokens=self.target_tokens
        )
        memory.summary = fold.summary
        memory.buffer = fold.converted[:-1]
        await memory.extend(fold.converted[-1:])
        return self._finish(fold, memory.summary, memory.buffer)

    def _begin(self, state: RollingMemoryState) -> Optional[_Fold]:
        values = cast("Mapping[str, Any]", state)
        messages: Sequence[BaseMessage] = values["messages"]
        indices = _buffer_indices(messages, values)
        if len(indices) < 2:
            return None  # the newest unit always stays: nothing can fold
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
        return _Fold(messages, indices, converted, _state_summary(values))

    def _finish(self, fold: _Fold, summary: str, buffer: Sequence[Message]) -> Optional[dict[str, Any]]:
        staying = {id(message) for message in buffer}
        remaining: list[int] = []
        folded: list[int] = []
        for message, index in zip(fold.converted, fold.indices):
            (remaining if id(message) in staying else folded).append(index)
        if not folded:
            return None
        messages = fold.messages
        first = len(remaining) - 1  # the buffer ends with the newest message: find its contiguous tail
        while first > 0 and remaining[first - 1] == remaining[first] - 1:
            first -= 1
        update: dict[str, Any] = {
            SUMMARY_KEY: summary,
            CURSOR_KEY: {
                "start": _message_id(messages, remaining[first]),
                "kept": [_message_id(messages, index) for index in remaining[:first]],
            },
        }
        if self.prune_folded:
            update["messages"] = [RemoveMessage(id=_message_id(messages, index)) for index in folded]
        return update


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

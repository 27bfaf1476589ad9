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
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, Union, cast

from .. import _validate as v
from .._extras import missing_extra
from ..adapters import for_provider
from ..adapters.langchain import from_langchain
from ..errors import InvalidStateError
from ..memory import AsyncRollingMemory, AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
from ._engine import (
    DEFAULT_MAX_TOKENS,
    Configured,
    Finish,
    Keys,
    Spec,
    Tracer,
    Track,
    is_async,
    locate,
    read_state,
)

_T = TypeVar("_T")

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
    from langchain_core.runnables.config import ensure_config, get_callback_manager_for_config
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
"""The agent-state key of the rest of rollmem's state (private): where the unfolded messages start
(the ids of the messages around that position, and of the pinned ones before it) and the costs of
the messages the last fold kept, with the counter's identity. Written only when a fold changes it."""

logger = logging.getLogger("rollmem")

#: The prefix of the summary message LangChain's ``SummarizationMiddleware`` writes.
_LC_SUMMARY_PREFIX = "Here is a summary of the conversation to date:\n\n"


class RollingMemoryState(AgentState[Any]):  # type: ignore[misc, unused-ignore]  # see [tool.mypy]
    """The agent state with :class:`RollingMemoryMiddleware`'s fields."""

    rollmem_summary: NotRequired[Annotated[str, OmitFromInput]]  # type: ignore[valid-type, unused-ignore]
    rollmem_cursor: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]  # type: ignore[valid-type, unused-ignore]


def _message_id(message: BaseMessage) -> str:
    return message.id if isinstance(message.id, str) else ""


class _Messages(Spec[BaseMessage]):
    def __init__(self, pin: Optional[Callable[[BaseMessage], bool]]) -> None:
        self.pin = pin

    def units(self, natives: Sequence[BaseMessage], track: Track[BaseMessage]) -> list[Message]:
        converted = self.messages(natives)
        pin = self.pin
        if pin is not None:
            converted = [replace(m, pinned=True) if pin(n) else m for m, n in zip(converted, natives)]
        return converted

    def messages(self, natives: Sequence[BaseMessage]) -> list[Message]:
        for index, native in enumerate(natives):
            if not isinstance(native.id, str):
                raise InvalidStateError(
                    v.join(v.join("messages", index), "id"),
                    f"expected str, got {v.type_name(native.id)}; the agent state gives every message an id",
                )
        return from_langchain(natives)

    def key(self, native: BaseMessage) -> str:
        return _message_id(native)


class RollingMemoryMiddleware(Configured, AgentMiddleware[RollingMemoryState]):  # type: ignore[misc, unused-ignore]
    """``create_agent`` middleware: the model sees a running summary plus the newest messages.

    ``RollingMemoryMiddleware(max_tokens=2000, summarize_fn=None, token_counter=None, *,
    target_tokens=None, pin=None, prune_folded=False, summary_message=None)``. Before each model
    call the model receives the agent's system prompt (untouched, not counted), then
    ``summary_message(summary)`` when the summary is non-empty, then the newest messages verbatim
    (the state's own message objects) within ``max_tokens``. Older messages are folded into the
    summary by one ``summarize_fn(summary, evicted)`` call (``evicted``: rollmem messages converted
    with :func:`rollmem.adapters.langchain.from_langchain`), each message exactly once, with
    :class:`~rollmem.RollingMemory`'s rules; messages for which ``pin(message)`` is true are never
    folded. The summary and the fold position are agent state (:data:`SUMMARY_KEY`,
    :data:`CURSOR_KEY`), written only at a fold, persisted by any checkpointer. ``prune_folded``
    also removes folded messages from ``state["messages"]``. A coroutine ``summarize_fn`` needs
    ``ainvoke``/``astream`` (sync ``invoke`` raises ``TypeError``). If ``summarize_fn`` raises, the
    error propagates and the summary and fold position are unchanged. Each fold is a run
    (``rollmem.fold``) in LangChain's callbacks, so it shows in LangSmith.
    """

    state_schema = RollingMemoryState

    def __init__(
        self,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        *,
        target_tokens: Optional[int] = None,
        pin: Optional[Callable[[BaseMessage], bool]] = None,
        prune_folded: bool = False,
        summary_message: Optional[Callable[[str], _AnyMessage]] = None,
    ) -> None:
        super().__init__()
        self._configure(max_tokens, summarize_fn, token_counter, target_tokens)
        v.check_callable("pin", pin, optional=True)
        v.check_callable("summary_message", summary_message, optional=True)
        v.check_bool("prune_folded", prune_folded)
        self.pin = pin
        self.prune_folded = prune_folded
        self._summary_message = summary_message
        self._spec = _Messages(pin)

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
        start, pinned, _ = locate(read_state(state.get(CURSOR_KEY), CURSOR_KEY), Keys(messages, _message_id))
        view: list[_AnyMessage] = [messages[i] for i in pinned] + list(messages[start or 0 :])
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
        """Count the messages added since the last model call, fold what the budget says; returns
        the state update (summary, cursor, removals when pruning) after a fold, else ``None``."""
        if is_async(self.summarize_fn):
            raise TypeError(
                "summarize_fn is a coroutine function: run the agent with ainvoke/astream, "
                "or give RollingMemoryMiddleware a sync summarize_fn"
            )
        messages, track, new = self._begin(cast("Mapping[str, Any]", state), False)
        try:
            folded = _renamed(track.add, messages, new)
        finally:
            self._keep(messages, track)
        return self._finish(messages, track, folded)

    async def abefore_model(self, state: RollingMemoryState, runtime: _Runtime) -> Optional[dict[str, Any]]:
        """:meth:`before_model` with an async memory (``summarize_fn`` may be a coroutine function)."""
        messages, track, new = self._begin(cast("Mapping[str, Any]", state), True)
        try:
            folded = await _arenamed(track.aadd, messages, new)
        finally:
            self._keep(messages, track)
        return self._finish(messages, track, folded)

    def _begin(
        self, state: Mapping[str, Any], asynchronous: bool
    ) -> tuple[Sequence[BaseMessage], Track[BaseMessage], list[int]]:
        """The thread's track (the live one when the state is the one it left, else rebuilt from
        the state) and the positions of the messages to add."""
        messages: Sequence[BaseMessage] = state["messages"]
        cursor = state.get(CURSOR_KEY)
        track = self._lives.take(_message_id(messages[0])) if messages else None
        if (
            track is not None
            and track.written == cursor
            and track.memory.summary == _state_summary(state)
            and isinstance(track.memory, AsyncRollingMemory) == asynchronous
            and track.follows(messages)
        ):
            return messages, track, track.new(messages)
        stored = read_state(cursor, CURSOR_KEY)
        stored.summary = _state_summary(state)
        start, pinned, how = locate(stored, Keys(messages, _message_id))
        if how == "anchor":
            logger.warning(
                "RollingMemoryMiddleware: the first unfolded message %r is no longer in the state; the fold "
                "position is re-anchored after %r, the message before it",
                stored.first,
                stored.recent[-1],
            )
        elif start is None:
            logger.warning(
                "RollingMemoryMiddleware: the first unfolded message %r is no longer in the state, nor the "
                "message before it; starting over from the messages in the state, keeping the summary",
                stored.first,
            )
        track = Track(self, self._spec, asynchronous)
        track.written = cursor
        new = track.restore(messages, stored, start or 0, pinned, how in ("exact", "first"))
        return messages, track, new

    def _keep(self, messages: Sequence[BaseMessage], track: Track[BaseMessage]) -> None:
        if messages:
            self._lives.put(_message_id(messages[0]), track)

    def _finish(
        self,
        messages: Sequence[BaseMessage],
        track: Track[BaseMessage],
        folded: list[tuple[int, BaseMessage]],
    ) -> Optional[dict[str, Any]]:
        if not folded:
            return None
        cursor = track.state(Keys(messages, _message_id))
        update: dict[str, Any] = {SUMMARY_KEY: track.memory.summary, CURSOR_KEY: cursor}
        if self.prune_folded:
            update["messages"] = [RemoveMessage(id=_message_id(native)) for _, native in folded]
            track.forget(position for position, _ in folded)
            kept = Keys(
                [messages[i] for i in sorted(set(range(len(messages))) - {p for p, _ in folded})], _message_id
            )
            cursor = track.state(kept)
            update[CURSOR_KEY] = cursor
            self._lives.take(_message_id(messages[0]))
            if kept.history:
                self._lives.put(_message_id(kept.history[0]), track)
        track.written = cursor
        return update

    def _fold_tracer(self) -> Optional[Tracer]:
        """A fold as a run of LangChain's callbacks (``rollmem.fold``), when the run has handlers."""
        manager = get_callback_manager_for_config(ensure_config())
        if not manager.handlers:
            return None

        def start(attributes: dict[str, int]) -> Finish:
            run = manager.on_chain_start({"name": "rollmem.fold"}, dict(attributes), name="rollmem.fold")

            def finish(more: dict[str, int], error: Optional[BaseException]) -> None:
                if error is not None:
                    run.on_chain_error(error)
                else:
                    run.on_chain_end({**attributes, **more})

            return finish

        return start


def _state_summary(state: Mapping[str, Any]) -> str:
    return v.get_str(state, SUMMARY_KEY, "", default="")


def _renamed(add: Callable[..., _T], messages: Sequence[BaseMessage], new: list[int]) -> _T:
    """``add(messages, new)``, an error naming ``messages[k]`` of the new ones renamed to its
    position in the state."""
    try:
        return add(messages, new)
    except InvalidStateError as error:
        raise _at_state_index(error, new) from error


async def _arenamed(add: Callable[..., Awaitable[_T]], messages: Sequence[BaseMessage], new: list[int]) -> _T:
    try:
        return await add(messages, new)
    except InvalidStateError as error:
        raise _at_state_index(error, new) from error


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

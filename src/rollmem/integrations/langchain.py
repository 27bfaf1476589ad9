"""LangChain v1 agents: a rolling memory as ``create_agent`` middleware. Needs the ``langchain`` extra
(Python 3.10+: ``langchain``, ``langgraph``, ``langchain-core``): importing this module imports them,
else raises :class:`~rollmem.errors.MissingExtraError` (older ``langchain-core`` projects keep
:class:`rollmem.adapters.langchain.RollingChatMessageHistory`). :class:`RollingMemoryMiddleware`
changes what the model sees, not what the graph stores; :func:`langchain_summarizer` adapts a
rollmem ``summarize_fn`` to LangChain's own ``SummarizationMiddleware(summarizer=...)``."""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Callable, Optional, Union, cast

from .. import _validate as v
from .._extras import missing_extra
from ..adapters import for_provider
from ..adapters.langchain import from_langchain
from ..errors import InvalidStateError
from ..memory import AsyncRollingMemory, AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import USER, Message
from ._engine import DEFAULT_MAX_TOKENS, Clock, Configured, Finish, Provider, Tracer, is_async
from ._state import Keys, locate, read_state
from ._track import Spec, Track

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
    from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage, SystemMessage
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

# Nothing subscripted: langchain 1.0's ModelRequest is not generic, and mypy (at Python 3.9) cannot
# evaluate langgraph's ContextT nor langchain-core's AnyMessage (a run-time ``|`` union). Explicit
# aliases stay aliases (of Any) where the extra is missing.
_Request: TypeAlias = ModelRequest
_Runtime: TypeAlias = Runtime
_AnyMessage: TypeAlias = BaseMessage

__all__ = ["CURSOR_KEY", "SUMMARY_KEY", "RollingMemoryMiddleware", "RollingMemoryState"]
__all__ += ["langchain_summarizer"]

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
        ms, pin = self.messages(natives), self.pin
        return ms if pin is None else [replace(m, pinned=True) if pin(n) else m for m, n in zip(ms, natives)]

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

    The settings are :meth:`~rollmem.RollingMemory.cached`'s (an explicit ``target_tokens`` folds plainly down
    to it). The model receives the system prompt, ``summary_message(summary)``, then the newest messages
    verbatim (the state's own objects); older ones fold by one ``summarize_fn(summary, evicted)`` call
    (``evicted`` converted with :func:`rollmem.adapters.langchain.from_langchain`); ``pin(message)`` keeps one
    for good. The summary and fold position are agent state (:data:`SUMMARY_KEY`, :data:`CURSOR_KEY`), written
    only at a fold; ``prune_folded`` also removes folded messages from the state. A coroutine ``summarize_fn``
    needs ``ainvoke``. Each fold is a ``rollmem.fold`` run in LangChain's callbacks."""

    state_schema = RollingMemoryState

    def __init__(
        self,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        *,
        target_tokens: Optional[int] = None,
        provider: Provider = None,
        clock: Optional[Clock] = None,
        prefix_tokens: int = 0,
        pin: Optional[Callable[[BaseMessage], bool]] = None,
        prune_folded: bool = False,
        summary_message: Optional[Callable[[str], _AnyMessage]] = None,
    ) -> None:
        super().__init__()
        self._setup(max_tokens, summarize_fn, token_counter, target_tokens, provider, clock, prefix_tokens)
        v.check_callable("pin", pin, optional=True)
        v.check_callable("summary_message", summary_message, optional=True)
        self.pin, self.prune_folded = pin, v.check_bool("prune_folded", prune_folded)
        self._summary_message, self._spec = summary_message, _Messages(pin)

    def summary_message(self, summary: str) -> _AnyMessage:
        """The message that carries a non-empty summary: ``summary_message(summary)`` when given,
        else ``SystemMessage(summary)``."""
        make = self._summary_message or (lambda text: SystemMessage(content=text))
        message = make(summary)
        if not isinstance(message, BaseMessage):
            raise TypeError(f"summary_message returned {v.type_name(message)}; expected a BaseMessage")
        return message

    def model_messages(self, request: _Request) -> list[_AnyMessage]:
        """The messages the model receives after the system prompt: the summary message, then the
        buffer (the original objects of ``request.messages``), as every provider accepts them
        (:func:`~rollmem.adapters.for_provider`)."""
        state = cast("Mapping[str, Any]", request.state)
        messages = request.messages
        start, pinned, _ = locate(read_state(state.get(CURSOR_KEY), CURSOR_KEY), Keys(messages, _message_id))
        summary = v.get_str(state, SUMMARY_KEY, "", default="")
        head = [self.summary_message(summary)] if summary else []
        return _for_provider([*head, *(messages[i] for i in pinned), *messages[start or 0 :]])

    def wrap_model_call(
        self, request: _Request, handler: Callable[[_Request], ModelResponse[Any]]
    ) -> ModelCallResult[Any]:
        """Call the model with :meth:`model_messages`."""
        return handler(request.override(messages=self.model_messages(request)))

    async def awrap_model_call(
        self, request: _Request, handler: Callable[[_Request], Awaitable[ModelResponse[Any]]]
    ) -> ModelCallResult[Any]:
        """:meth:`wrap_model_call` for ``ainvoke``."""
        return await handler(request.override(messages=self.model_messages(request)))

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
            folded = track.add(messages, new)
        finally:
            self._lives.put(_message_id(messages[0]), track)
        return self._finish(messages, track, folded)

    async def abefore_model(self, state: RollingMemoryState, runtime: _Runtime) -> Optional[dict[str, Any]]:
        """:meth:`before_model` with an async memory (``summarize_fn`` may be a coroutine function)."""
        messages, track, new = self._begin(cast("Mapping[str, Any]", state), True)
        try:
            folded = await track.aadd(messages, new)
        finally:
            self._lives.put(_message_id(messages[0]), track)
        return self._finish(messages, track, folded)

    def _begin(
        self, state: Mapping[str, Any], asynchronous: bool
    ) -> tuple[Any, Track[BaseMessage], list[int]]:
        """The thread's track (the live one when the state is the one it left, else one rebuilt
        from the state) and the positions of the messages to add, checked."""
        messages: Sequence[BaseMessage] = state["messages"]
        cursor, summary = state.get(CURSOR_KEY), v.get_str(state, SUMMARY_KEY, "", default="")
        track = self._lives.take(_message_id(messages[0]))
        if not (
            track is not None
            and (track.written, track.memory.summary) == (cursor, summary)
            and isinstance(track.memory, AsyncRollingMemory) == asynchronous
            and track.follows(messages)
        ):
            stored = read_state(cursor, CURSOR_KEY)
            stored.summary = summary
            start, pinned, how = locate(stored, Keys(messages, _message_id))
            gone = f"the first unfolded message {stored.first!r} is no longer in the state"
            if how == "anchor":
                after = stored.recent[-1]
                logger.warning(
                    "%s; the fold position is re-anchored after %r, the message before it", gone, after
                )
            elif start is None:
                gone += ", nor the message before it; starting over from the messages in the state"
                logger.warning("%s, keeping the summary", gone)
            track = Track(self, self._spec, asynchronous)
            track.written = cursor
            track.restore(messages, stored, start or 0, pinned, how in ("exact", "first"))
        new = track.new(messages)
        try:  # checked here, so an error names its position in the state
            self._spec.messages([messages[i] for i in new])
        except InvalidStateError as error:
            self._lives.put(_message_id(messages[0]), track)
            raise _at_state_index(error, new) from error
        return messages, track, new

    def _finish(
        self, messages: Any, track: Track[BaseMessage], folded: list[tuple[int, Any]]
    ) -> Optional[dict[str, Any]]:
        if not folded:
            return None
        track.written = track.state(Keys(messages, _message_id))
        update: dict[str, Any] = {SUMMARY_KEY: track.memory.summary, CURSOR_KEY: track.written}
        if self.prune_folded:  # the next call finds the fold position in what is left
            gone = {position for position, _ in folded}
            track.forget(gone)
            kept = [message for i, message in enumerate(messages) if i not in gone]
            update[CURSOR_KEY] = track.written = track.state(Keys(kept, _message_id))
            update["messages"] = [RemoveMessage(id=_message_id(native)) for _, native in folded]
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


def _for_provider(view: list[_AnyMessage]) -> list[_AnyMessage]:
    """``view`` under the provider rule, the original objects wherever the rule keeps a message."""
    outline = [replace(m, id=str(position)) for position, m in enumerate(from_langchain(view))]
    fixed = for_provider(outline)
    if fixed is outline:
        return view
    result: list[_AnyMessage] = []
    for message in fixed:
        source = None if message.id is None else view[int(message.id)]
        if source is None:  # the opening user turn
            result.append(HumanMessage(content=message.content))
        elif message is outline[int(str(message.id))]:
            result.append(source)
        elif message.role == USER:  # a tool result sent as text
            result.append(HumanMessage(content=message.content, id=source.id))
        else:  # an assistant message whose unanswered calls are sent as text
            kept = {call.id for call in message.tool_calls}
            calls = {name: [c for c in getattr(source, name) if c.get("id") in kept] for name in _CALLS}
            result.append(source.model_copy(update={"content": message.content, **calls}))
    return result


_CALLS = ("tool_calls", "invalid_tool_calls")


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
    marked = [i for i, m in enumerate(messages) if m.additional_kwargs.get("lc_source") == "summarization"]
    marked = [i for i in marked if isinstance(messages[i], HumanMessage)]
    if len(marked) > 1:
        raise InvalidStateError(
            v.join("messages", marked[1]), "a second summary message; expected at most one"
        )
    rest = list(messages)
    text = from_langchain([rest.pop(marked[0])])[0].content if marked else ""
    return text.removeprefix(_LC_SUMMARY_PREFIX), from_langchain(rest)


def langchain_summarizer(
    summarize_fn: Union[SummarizeFn, AsyncSummarizeFn],
) -> Union[Callable[[list[_AnyMessage]], str], Callable[[list[_AnyMessage]], Awaitable[str]]]:
    """A ``summarizer`` for LangChain's ``SummarizationMiddleware`` (langchain 1.5+) calling a
    rollmem ``summarize_fn(summary, evicted)``: the previous summary's text (LangChain's marked
    message, without its prefix) and the other messages converted with
    :func:`rollmem.adapters.langchain.from_langchain`. Pass ``trim_tokens_to_summarize=None`` to
    the middleware, or what it trims never reaches ``summarize_fn``."""
    if not callable(summarize_fn):
        raise v.type_error("summarize_fn", "a callable", summarize_fn)
    fn: Any = summarize_fn

    def summarize(messages: list[_AnyMessage]) -> Any:
        return fn(*_split_summary(messages))

    if not inspect.iscoroutinefunction(fn):
        return cast("Callable[[list[_AnyMessage]], str]", summarize)

    async def asummarize(messages: list[_AnyMessage]) -> str:
        return await summarize(messages)  # type: ignore[no-any-return]

    return asummarize

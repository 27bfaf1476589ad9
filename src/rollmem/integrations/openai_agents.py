"""A rolling-summary session for the OpenAI Agents SDK: ``Runner.run(agent, input, session=...)``.

Needs the ``openai-agents`` extra (``pip install "rollmem[openai-agents]"``). Importing this module
imports nothing from the SDK: :class:`RollingSession` implements the SDK's ``Session`` protocol
structurally (``isinstance(session, agents.memory.Session)`` holds) and only checks, when built,
that the SDK is installed (:class:`~rollmem.errors.MissingExtraError` otherwise).

How it works: the session is an :class:`~rollmem.AsyncRollingMemory` whose messages are the
items converted by :func:`~rollmem.adapters.openai.from_openai_responses`, which keeps each
original item in the message's metadata. So budget, target, units (a ``function_call`` with its
``function_call_output``, reasoning with the item after it), alignment and the
newest-unit-stays rule are exactly the core's, ``summarize_fn`` receives rollmem
:class:`~rollmem.Message` objects like everywhere else, and the items come back unchanged.

The summary item: when there is a summary, :meth:`RollingSession.get_items` starts with
``{"role": "system", "content": SUMMARY_HEADER + summary}``. If that item is ever handed back to
:meth:`RollingSession.add_items` (a ``session_input_callback`` that returns the history, say), it
is recognised by its header and not stored again; so is the user item ``CONTINUATION_TEXT`` that
opens the items when the buffer starts with another turn. The items follow the rule every rollmem
renderer follows (:func:`~rollmem.adapters.for_provider`, see the adapters page), so any buffer
gives a request the provider accepts.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Callable, Optional, TypeVar, Union

from .. import _validate as v
from .._extras import import_extra
from ..adapters import CONTINUATION_TEXT, CONTINUATION_TEXT_PLAIN
from ..adapters.openai import RESPONSES_ITEMS, from_openai_responses, responses_items, to_openai_responses
from ..memory import AsyncRollingMemory, AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import SYSTEM, Message
from ..policies import unit_spans
from ..sessions import AsyncSessions
from ..stores import AsyncLogStore, AsyncStore, LogStore, Store
from ._engine import DEFAULT_MAX_TOKENS, Configured, Finish, Tracer, new_memory, summarizer

__all__ = ["SUMMARY_HEADER", "RollingSession", "cached_prefix"]

_T = TypeVar("_T")

SUMMARY_HEADER = "Summary of the earlier conversation:\n"


def cached_prefix(summary: str, evicted: list[Message]) -> list[Message]:
    """``summary_as`` for :func:`rollmem.summarizers.cached_summarizer`: the summary as
    :meth:`RollingSession.get_items` renders it (a system item ``SUMMARY_HEADER + summary``), then
    the evicted messages, so the summarizer's request opens as the session's last request did."""
    return [Message(SYSTEM, SUMMARY_HEADER + summary), *evicted] if summary else list(evicted)


"""The first line of the summary item's content: how the model, and the session, recognise it."""

_SUMMARY_ROLES = ("system", "developer")


def _require_agents() -> None:
    import_extra(
        "agents.memory",
        package="openai-agents",
        extra="openai-agents",
        feature="rollmem.integrations.openai_agents.RollingSession",
    )


def _is_summary_item(item: object) -> bool:
    """Whether ``item`` is a summary item as :meth:`RollingSession.get_items` writes it."""
    if not isinstance(item, Mapping) or set(item) - {"role", "content", "type"}:
        return False
    content = item.get("content")
    return (
        item.get("type", "message") == "message"
        and item.get("role") in _SUMMARY_ROLES
        and isinstance(content, str)
        and content.startswith(SUMMARY_HEADER)
    )


def _is_continuation_item(item: object) -> bool:
    """Whether ``item`` is the user turn :meth:`RollingSession.get_items` opens with when the
    buffer starts with another's turn (:func:`~rollmem.adapters.user_first`)."""
    return (
        isinstance(item, Mapping)
        and not set(item) - {"role", "content", "type"}
        and item.get("type", "message") == "message"
        and item.get("role") == "user"
        and item.get("content") in (CONTINUATION_TEXT, CONTINUATION_TEXT_PLAIN)
    )


def _is_lone_reasoning(message: Message) -> bool:
    """Whether ``message`` holds only reasoning items: they still wait for the item they precede."""
    items = message.metadata.get(RESPONSES_ITEMS)
    return (
        isinstance(items, list)
        and bool(items)
        and all(isinstance(item, Mapping) and item.get("type") == "reasoning" for item in items)
    )


def _units(messages: Sequence[Message]) -> list[list[Message]]:
    """The buffer cut into the core's units (:func:`rollmem.policies.unit_spans`)."""
    return [list(messages[start:stop]) for start, stop in unit_spans(messages)]


async def _add(memory: AsyncRollingMemory, messages: list[Message], batch: list[Any]) -> Optional[Exception]:
    """Append ``messages`` (converted from ``batch``); returns the summarizer's error, if any (the
    items are in and saved all the same)."""
    buffer = memory.buffer
    if buffer and _is_lone_reasoning(buffer[-1]):  # waiting reasoning joins the first new item
        messages = from_openai_responses(responses_items(buffer[-1:]) + batch)
        memory.buffer = buffer[:-1]
    try:
        await memory.extend(messages)
    except Exception as exc:  # the items are in; save them, then raise
        return exc
    return None


async def _pop(memory: AsyncRollingMemory) -> Optional[dict[str, Any]]:
    buffer = memory.buffer
    if not buffer:
        return None
    items = responses_items(buffer[-1:])
    popped = items.pop()
    memory.buffer = buffer[:-1] + from_openai_responses(items)
    return popped


def _check_limit(limit: object) -> Optional[int]:
    if limit is None:
        return None
    return v.check_int("limit", limit, 0)


class RollingSession(Configured):
    """An Agents SDK session that keeps a running summary plus the recent items verbatim.

    ``RollingSession(session_id, max_tokens=..., summarize_fn=..., token_counter=...,
    target_tokens=..., store=..., max_retries=...)``: the budget, summarizer (``summarize(summary, evicted) ->
    str``, sync or async, ``evicted`` being rollmem messages) and counter are those of
    :class:`~rollmem.AsyncRollingMemory`. Without ``store`` the session lives in this object;
    with any rollmem store (:mod:`rollmem.stores`, sync or async) it is kept there through
    :class:`~rollmem.sessions.AsyncSessions`, so it survives restarts and is shared by processes
    (each call loads, applies and saves with a compare-and-set, replaying on a conflict, at
    most ``max_retries`` times before :class:`~rollmem.errors.ConflictError`).

    ``add_items`` appends whole batches (all or nothing) and folds the oldest units into the
    summary when over ``max_tokens``; each message is summarized once. If the summarizer
    raises, the items stay (over budget, saved) and the error propagates, as in the core.
    ``add_items`` and ``pop_item`` on a store are re-runnable writes
    (:meth:`~rollmem.sessions.AsyncSessions.update`): when another writer saved first they run
    again on the latest state (the summarizer may then be called again), and raise
    ``ConflictError`` only after ``max_retries`` lost writes.

    What leaves the buffer is not lost unless you let it: ``on_evict(items)`` (sync or async) is
    called with the evicted items, as they were added, once per committed eviction (with a store:
    after the write); ``archive``, any SDK session (``agents.SQLiteSession("user-1-archive")``
    say), receives them through its ``add_items`` first, so it keeps every item this session
    folded or dropped. An error of either propagates from ``add_items`` after the items are saved.
    """

    session_settings: Optional[Any] = None
    """The SDK's ``SessionSettings`` (e.g. a default ``limit`` for :meth:`get_items`), or ``None``."""

    def __init__(
        self,
        session_id: str,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        target_tokens: Optional[int] = None,
        store: Optional[Union[LogStore, AsyncLogStore, Store, AsyncStore]] = None,
        max_retries: int = 10,
        on_evict: Optional[Callable[[list[dict[str, Any]]], Any]] = None,
        archive: Optional[Any] = None,
    ) -> None:
        _require_agents()
        v.check_session_id(session_id)
        self._configure(max_tokens, summarize_fn, token_counter, target_tokens)
        v.check_callable("on_evict", on_evict, optional=True)
        if archive is not None and not callable(getattr(archive, "add_items", None)):
            raise v.type_error("archive", "a session with add_items (e.g. agents.SQLiteSession)", archive)
        self.on_evict = on_evict
        self.archive = archive
        self.session_id = session_id
        self.session_settings = None
        self._memory: Optional[AsyncRollingMemory] = None
        self._sessions: Optional[AsyncSessions[AsyncRollingMemory]] = None
        if store is None:
            self._memory = self._factory()
        else:
            self._sessions = AsyncSessions(store, self._factory, max_retries=max_retries)

    def _factory(self) -> AsyncRollingMemory:
        made: list[AsyncRollingMemory] = []
        memory: AsyncRollingMemory = new_memory(
            self, summarizer(self, list, lambda: made[0]), self._evicted, asynchronous=True
        )
        made.append(memory)
        return memory

    def _fold_tracer(self) -> Optional[Tracer]:
        """A fold as a custom span (``rollmem.fold``) in the Agents SDK's current trace."""
        tracing = importlib.import_module("agents.tracing")
        if isinstance(
            tracing.get_current_trace(),
            (type(None), importlib.import_module("agents.tracing.traces").NoOpTrace),
        ):
            return None

        def start(attributes: dict[str, int]) -> Finish:
            span = tracing.custom_span("rollmem.fold", data=dict(attributes))
            span.start(mark_as_current=True)

            def finish(more: dict[str, int], error: Optional[BaseException]) -> None:
                span.span_data.data.update(more)
                if error is not None:
                    span.set_error({"message": str(error), "data": {"type": type(error).__name__}})
                span.finish(reset_current=True)

            return finish

        return start

    async def _evicted(self, messages: Sequence[Message]) -> None:
        """The memory's ``on_evict``: the evicted items to ``on_evict`` and ``archive``."""
        if self.on_evict is None and self.archive is None:
            return
        items = responses_items(list(messages))  # as they were: nothing re-shaped for a request
        if self.archive is not None:
            await self.archive.add_items(items)
        if self.on_evict is not None:
            outcome = self.on_evict(items)
            if inspect.isawaitable(outcome):
                await outcome

    @property
    def store(self) -> Optional[Union[LogStore, AsyncLogStore, Store, AsyncStore]]:
        """Where the session is kept (``None``: in this object)."""
        return None if self._sessions is None else self._sessions.store

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[AsyncRollingMemory]:
        if self._sessions is None:
            assert self._memory is not None
            yield self._memory
        else:
            async with self._sessions.open(self.session_id) as memory:
                yield memory

    async def _update(self, fn: Callable[[AsyncRollingMemory], Awaitable[_T]]) -> _T:
        """``fn(memory)``; with a store through :meth:`AsyncSessions.update` (re-run on the latest
        state when another writer saved first, up to ``max_retries`` times)."""
        if self._sessions is None:
            assert self._memory is not None
            return await fn(self._memory)
        return await self._sessions.update(self.session_id, fn)

    async def get_memory(self) -> AsyncRollingMemory:
        """The memory behind the session: the live one, or a snapshot of the stored one (changes
        to a snapshot are not saved). For ``summary``, ``buffer`` and ``stats()``."""
        if self._sessions is None:
            assert self._memory is not None
            return self._memory
        snapshot = await self._sessions.get(self.session_id)
        return self._factory() if snapshot is None else snapshot

    async def get_items(self, limit: Optional[int] = None) -> list[dict[str, Any]]:
        """The summary item (when there is a summary), then the buffered items as they were added,
        as :func:`~rollmem.adapters.to_openai_responses` renders them for a request: a
        ``function_call_output`` whose ``function_call`` was folded is sent as a user message
        ``[result of tool call ID] OUTPUT`` (the API rejects it otherwise), and a user item
        ``CONTINUATION_TEXT`` comes first when the buffer opens with another turn.

        With ``limit``: the newest items, at most ``limit`` of them, never splitting a unit (so
        possibly fewer); the summary item comes only when everything after it fits too.
        """
        limit = _check_limit(limit)
        async with self._open() as memory:
            summary = memory.summary
            buffer = list(memory.buffer)
        head = [Message(SYSTEM, SUMMARY_HEADER + summary)] if summary else []
        units = _units(buffer)

        def render(count: int, with_summary: bool) -> list[dict[str, Any]]:
            newest = [message for unit in units[len(units) - count :] for message in unit]
            return to_openai_responses((head if with_summary else []) + newest)

        items = render(len(units), True)
        if limit is None or len(items) <= limit:
            return items
        low, high = 0, len(units)  # the rendered size grows with the number of units kept
        while low < high:
            middle = (low + high + 1) // 2
            if len(render(middle, False)) <= limit:
                low = middle
            else:
                high = middle - 1
        return render(low, False) if low else []

    async def add_items(self, items: Iterable[Any]) -> None:
        """Append the items (dicts, or SDK models, dumped), then fold what is over budget.

        Bad items raise ``ValueError``/``TypeError`` naming ``items[i]`` and the field, and nothing
        is added. A summary item or opening user item this session wrote is skipped. Reasoning
        items left waiting at the end of the buffer join the first item of the next batch in one
        unit.
        """
        if isinstance(items, Iterable) and not isinstance(items, (list, str, bytes, Mapping)):
            items = list(items)
        messages = from_openai_responses(items)  # checks every item, with its path, first
        batch = list(items)
        if any(_is_summary_item(item) or _is_continuation_item(item) for item in batch):
            batch = [item for item in batch if not (_is_summary_item(item) or _is_continuation_item(item))]
            messages = from_openai_responses(batch)
        if not messages:
            return

        def add(memory: AsyncRollingMemory) -> Awaitable[Optional[Exception]]:
            return _add(memory, messages, batch)

        error = await self._update(add)
        if error is not None:
            raise error

    async def pop_item(self) -> Optional[dict[str, Any]]:
        """Remove and return the newest item; ``None`` when no item is buffered (a summary stays).

        Exactly that item goes, as with the SDK's own sessions (which pop to rewind what they
        added): popping a ``function_call_output`` leaves its ``function_call`` (an output added
        later pairs with it again), popping the item after reasoning leaves the reasoning waiting.
        """
        return await self._update(_pop)

    async def clear_session(self) -> None:
        """Forget the summary and every item."""
        async with self._open() as memory:
            memory.clear()

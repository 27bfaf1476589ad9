"""A rolling-summary session for the OpenAI Agents SDK: ``Runner.run(agent, input, session=...)``.

Needs the ``openai-agents`` extra (building a session checks it: :class:`~rollmem.errors.MissingExtraError`).
:class:`RollingSession` implements the SDK's ``Session`` protocol structurally. Its memory's messages
are the items converted by :func:`~rollmem.adapters.openai.from_openai_responses` (which keeps each
original item): units and budget are the core's, and the items come back unchanged."""

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
from ..stores import AsyncLogStore, LogStore
from ._engine import DEFAULT_MAX_TOKENS, Clock, Configured, Finish, Provider, Tracer, new_memory

__all__ = ["SUMMARY_HEADER", "RollingSession", "cached_prefix"]

_T = TypeVar("_T")

SUMMARY_HEADER = "Summary of the earlier conversation:\n"
"""The first line of the summary item's content: how the model, and the session, recognise it."""


def cached_prefix(summary: str, evicted: list[Message]) -> list[Message]:
    """``summary_as`` for :func:`rollmem.summarizers.cached_summarizer`: the summary as
    :meth:`RollingSession.get_items` renders it (a system item ``SUMMARY_HEADER + summary``), then
    the evicted messages, so the summarizer's request opens as the session's last request did."""
    return [Message(SYSTEM, SUMMARY_HEADER + summary), *evicted] if summary else list(evicted)


def _is_ours(item: object) -> bool:
    """Whether ``item`` is the summary item or the opening user item :meth:`get_items` writes."""
    if not isinstance(item, Mapping) or set(item) - {"role", "content", "type"}:
        return False
    content, role = item.get("content"), item.get("role")
    summary = role in ("system", "developer") and str(content).startswith(SUMMARY_HEADER)
    opening = role == "user" and content in (CONTINUATION_TEXT, CONTINUATION_TEXT_PLAIN)
    return item.get("type", "message") == "message" and (summary or opening)


async def _add(memory: AsyncRollingMemory, messages: list[Message], batch: list[Any]) -> Optional[Exception]:
    """Append ``messages`` (converted from ``batch``); returns the summarizer's error, if any (the
    items are in and saved all the same). Reasoning left waiting at the end joins the first item."""
    buffer = memory.buffer
    waiting = buffer[-1].metadata.get(RESPONSES_ITEMS) if buffer else None
    if waiting and all(isinstance(item, Mapping) and item.get("type") == "reasoning" for item in waiting):
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
    popped = (items := responses_items(buffer[-1:])).pop()
    memory.buffer = buffer[:-1] + from_openai_responses(items)
    return popped


class RollingSession(Configured):
    """An Agents SDK session that keeps a running summary plus the recent items verbatim.

    The settings are :meth:`~rollmem.AsyncRollingMemory.cached`'s (an explicit ``target_tokens`` folds plainly
    down to it). Without ``store`` the session lives in this object; with one it is kept there through
    :class:`~rollmem.sessions.AsyncSessions` (writes re-run when another writer saved first, up to
    ``max_retries``). If the summarizer raises, the items stay (saved) and the error propagates.
    ``on_evict(items)`` (sync or async) and ``archive`` (any SDK session) receive what leaves the buffer. Each
    fold is a ``rollmem.fold`` span in the SDK's current trace."""

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
        provider: Provider = None,
        clock: Optional[Clock] = None,
        prefix_tokens: int = 0,
        store: Optional[Union[LogStore, AsyncLogStore]] = None,
        max_retries: int = 10,
        on_evict: Optional[Callable[[list[dict[str, Any]]], Any]] = None,
        archive: Optional[Any] = None,
    ) -> None:
        feature = f"{__name__}.RollingSession"
        import_extra("agents.memory", package="openai-agents", extra="openai-agents", feature=feature)
        v.check_session_id(session_id)
        self._setup(max_tokens, summarize_fn, token_counter, target_tokens, provider, clock, prefix_tokens)
        v.check_callable("on_evict", on_evict, optional=True)
        if archive is not None and not callable(getattr(archive, "add_items", None)):
            raise v.type_error("archive", "a session with add_items (e.g. agents.SQLiteSession)", archive)
        self.on_evict, self.archive, self.session_id = on_evict, archive, session_id
        self._memory = self._factory() if store is None else None
        self._sessions = (
            None if store is None else AsyncSessions(store, self._factory, max_retries=max_retries)
        )

    def _factory(self) -> AsyncRollingMemory:
        return new_memory(self, list, self._evicted, asynchronous=True)  # type: ignore[no-any-return]

    def _fold_tracer(self) -> Optional[Tracer]:
        """A fold as a custom span (``rollmem.fold``) in the Agents SDK's current trace."""
        tracing = importlib.import_module("agents.tracing")
        no_trace = importlib.import_module("agents.tracing.traces").NoOpTrace
        if isinstance(tracing.get_current_trace(), (type(None), no_trace)):
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
        """The memory's ``on_evict``: the evicted items, as added, to ``on_evict`` and ``archive``."""
        if self.on_evict is None and self.archive is None:
            return
        items = responses_items(list(messages))
        if self.archive is not None:
            await self.archive.add_items(items)
        outcome = None if self.on_evict is None else self.on_evict(items)
        if inspect.isawaitable(outcome):
            await outcome

    @property
    def store(self) -> Optional[Union[LogStore, AsyncLogStore]]:
        """Where the session is kept (``None``: in this object)."""
        return None if self._sessions is None else self._sessions.store

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[AsyncRollingMemory]:
        if self._sessions is None:
            yield self._memory  # type: ignore[misc]
        else:
            async with self._sessions.open(self.session_id) as memory:
                yield memory

    async def _update(self, fn: Callable[[AsyncRollingMemory], Awaitable[_T]]) -> _T:
        """``fn(memory)``; with a store through :meth:`AsyncSessions.update` (re-run on conflict)."""
        if self._sessions is None:
            return await fn(self._memory)  # type: ignore[arg-type]
        return await self._sessions.update(self.session_id, fn)

    async def get_memory(self) -> AsyncRollingMemory:
        """The memory behind the session: the live one, or a snapshot of the stored one (changes
        to a snapshot are not saved). For ``summary``, ``buffer`` and ``stats()``."""
        if self._sessions is None:
            return self._memory  # type: ignore[return-value]
        snapshot = await self._sessions.get(self.session_id)
        return self._factory() if snapshot is None else snapshot

    async def get_items(self, limit: Optional[int] = None) -> list[dict[str, Any]]:
        """The summary item (when there is a summary), then the buffered items as
        :func:`~rollmem.adapters.to_openai_responses` renders them for a request. With ``limit``:
        the newest items, at most ``limit``, never splitting a unit; the summary item only when
        everything after it fits too."""
        limit = None if limit is None else v.check_int("limit", limit, 0)
        async with self._open() as memory:
            summary, buffer = memory.summary, list(memory.buffer)
        head = [Message(SYSTEM, SUMMARY_HEADER + summary)] if summary else []
        units = [buffer[start:stop] for start, stop in unit_spans(buffer)]

        def render(count: int, with_summary: bool) -> list[dict[str, Any]]:
            newest = [message for unit in units[len(units) - count :] for message in unit]
            return to_openai_responses((head if with_summary else []) + newest)

        items = render(len(units), True)
        if limit is None or len(items) <= limit:
            return items
        low, high = 0, len(units)  # the rendered size grows with the number of units kept
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if len(render(middle, False)) <= limit else (low, middle - 1)
        return render(low, False) if low else []

    async def add_items(self, items: Iterable[Any]) -> None:
        """Append the items (dicts, or SDK models), then fold what is over budget. Bad items raise
        naming ``items[i]`` and nothing is added; the summary and opening items this session wrote
        are skipped; reasoning left waiting at the end joins the next batch's first item."""
        if isinstance(items, Iterable) and not isinstance(items, (list, str, bytes, Mapping)):
            items = list(items)
        messages = from_openai_responses(items)  # checks every item, with its path, first
        batch = list(items)
        if any(map(_is_ours, batch)):
            batch = [item for item in batch if not _is_ours(item)]
            messages = from_openai_responses(batch)
        error = await self._update(lambda memory: _add(memory, messages, batch)) if messages else None
        if error is not None:
            raise error

    async def pop_item(self) -> Optional[dict[str, Any]]:
        """Remove and return the newest item (exactly that one, as the SDK's own sessions do);
        ``None`` when none is buffered (a summary stays)."""
        return await self._update(_pop)

    async def clear_session(self) -> None:
        """Forget the summary and every item."""
        async with self._open() as memory:
            memory.clear()

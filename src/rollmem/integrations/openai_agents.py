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
is recognised by its header and not stored again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Callable, Optional, Union

from .. import _validate as v
from .._extras import import_extra
from ..adapters.openai import RESPONSES_ITEMS, from_openai_responses, to_openai_responses
from ..memory import AsyncRollingMemory, AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import SYSTEM, Message
from ..policies import cached_target
from ..sessions import AsyncSessions
from ..stores import AsyncLogStore, AsyncStore, LogStore, Store

__all__ = ["SUMMARY_HEADER", "RollingSession"]

SUMMARY_HEADER = "Summary of the earlier conversation:\n"
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


def _is_lone_reasoning(message: Message) -> bool:
    """Whether ``message`` holds only reasoning items: they still wait for the item they precede."""
    items = message.metadata.get(RESPONSES_ITEMS)
    return (
        isinstance(items, list)
        and bool(items)
        and all(isinstance(item, Mapping) and item.get("type") == "reasoning" for item in items)
    )


def _units(messages: Sequence[Message]) -> list[list[Message]]:
    """The buffer cut into the core's units: a result joins everything from its earliest caller."""
    units: list[list[Message]] = []
    callers: dict[str, int] = {}  # call id -> index of the unit holding its earliest caller
    for message in messages:
        first = None if message.tool_call_id is None else callers.get(message.tool_call_id)
        if first is None:
            units.append([message])
        else:
            merged = [m for unit in units[first:] for m in unit]
            merged.append(message)
            del units[first:]
            units.append(merged)
            for call_id, index in callers.items():
                if index > first:
                    callers[call_id] = first
        for call in message.tool_calls:
            callers.setdefault(call.id, len(units) - 1)
    return units


def _check_limit(limit: object) -> Optional[int]:
    if limit is None:
        return None
    return v.check_int("limit", limit, 0)


class RollingSession:
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
    """

    session_settings: Optional[Any] = None
    """The SDK's ``SessionSettings`` (e.g. a default ``limit`` for :meth:`get_items`), or ``None``."""

    def __init__(
        self,
        session_id: str,
        *,
        max_tokens: int = 2000,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        target_tokens: Optional[int] = None,
        store: Optional[Union[LogStore, AsyncLogStore, Store, AsyncStore]] = None,
        max_retries: int = 10,
    ) -> None:
        _require_agents()
        if not isinstance(session_id, str):
            raise TypeError(f"session_id: expected str, got {type(session_id).__name__}")
        if not session_id:
            raise ValueError("session_id must not be empty")

        def factory() -> AsyncRollingMemory:
            target = cached_target(max_tokens) if target_tokens is None else target_tokens
            return AsyncRollingMemory(max_tokens, summarize_fn, token_counter, target_tokens=target)

        memory = factory()  # checks the arguments now
        self.session_id = session_id
        self.session_settings = None
        self._factory: Callable[[], AsyncRollingMemory] = factory
        self._memory: Optional[AsyncRollingMemory] = None
        self._sessions: Optional[AsyncSessions[AsyncRollingMemory]] = None
        if store is None:
            self._memory = memory
        else:
            self._sessions = AsyncSessions(store, factory, max_retries=max_retries)

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

    async def get_memory(self) -> AsyncRollingMemory:
        """The memory behind the session: the live one, or a snapshot of the stored one (changes
        to a snapshot are not saved). For ``summary``, ``buffer`` and ``stats()``."""
        if self._sessions is None:
            assert self._memory is not None
            return self._memory
        snapshot = await self._sessions.get(self.session_id)
        return self._factory() if snapshot is None else snapshot

    async def get_items(self, limit: Optional[int] = None) -> list[dict[str, Any]]:
        """The summary item (when there is a summary), then the buffered items as they were added.

        With ``limit``: the newest items, at most ``limit`` of them, never splitting a unit (so
        possibly fewer); the summary item comes only when everything after it fits too.
        """
        limit = _check_limit(limit)
        async with self._open() as memory:
            summary = memory.summary
            buffer = list(memory.buffer)
        groups = [to_openai_responses(unit) for unit in _units(buffer)]
        if summary:
            groups.insert(0, [{"role": SYSTEM, "content": SUMMARY_HEADER + summary}])
        if limit is not None:
            kept = 0
            count = 0
            for group in reversed(groups):
                if count + len(group) > limit:
                    break
                count += len(group)
                kept += 1
            groups = groups[len(groups) - kept :]
        return [item for group in groups for item in group]

    async def add_items(self, items: Iterable[Any]) -> None:
        """Append the items (dicts, or SDK models, dumped), then fold what is over budget.

        Bad items raise ``ValueError``/``TypeError`` naming ``items[i]`` and the field, and nothing
        is added. A summary item this session wrote is skipped. Reasoning items left waiting at
        the end of the buffer join the first item of the next batch in one unit.
        """
        if isinstance(items, Iterable) and not isinstance(items, (list, str, bytes, Mapping)):
            items = list(items)
        messages = from_openai_responses(items)  # checks every item, with its path, first
        batch = list(items)
        if any(_is_summary_item(item) for item in batch):
            batch = [item for item in batch if not _is_summary_item(item)]
            messages = from_openai_responses(batch)
        if not messages:
            return
        error: Optional[Exception] = None
        async with self._open() as memory:
            buffer = memory.buffer
            if buffer and _is_lone_reasoning(buffer[-1]):
                messages = from_openai_responses(to_openai_responses(buffer[-1:]) + batch)
                memory.buffer = buffer[:-1]
            try:
                await memory.extend(messages)
            except Exception as exc:  # the items are in; save them, then raise
                error = exc
        if error is not None:
            raise error

    async def pop_item(self) -> Optional[dict[str, Any]]:
        """Remove and return the newest item; ``None`` when no item is buffered (a summary stays).

        Exactly that item goes, as with the SDK's own sessions (which pop to rewind what they
        added): popping a ``function_call_output`` leaves its ``function_call`` (an output added
        later pairs with it again), popping the item after reasoning leaves the reasoning waiting.
        """
        async with self._open() as memory:
            buffer = memory.buffer
            if not buffer:
                return None
            items = to_openai_responses(buffer[-1:])
            popped = items.pop()
            memory.buffer = buffer[:-1] + from_openai_responses(items)
        return popped

    async def clear_session(self) -> None:
        """Forget the summary and every item."""
        async with self._open() as memory:
            memory.clear()

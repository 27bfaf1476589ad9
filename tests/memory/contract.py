"""The contract every memory class keeps, written once and run against each class, sync and async.

Use it as :mod:`tests.stores.contract` is used for stores: subclass :class:`MemoryContract` and
define ``memory_class`` and ``options(summarize_fn, on_evict)``, the keyword arguments that build
a small memory (a budget of about three one-word messages) that passes ``summarize_fn`` and
``on_evict`` through when the class takes them::

    class TestWindowMemory(MemoryContract):
        memory_class = WindowMemory

        def options(self, summarize_fn, on_evict):
            return {"max_messages": 3, "on_evict": on_evict}

Each test calls the memory through :meth:`MemoryContract.call`, which awaits what a coroutine
method returns (one ``asyncio.run`` per call: a memory is usable from successive event loops), so
the same test body checks a sync class and its async twin.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Sequence
from typing import Any, Callable, ClassVar, Optional

import pytest

from rollmem import Message
from rollmem.changes import Appended
from rollmem.errors import InvalidStateError, StateTypeError
from rollmem.sessions import AsyncSessions, Sessions
from rollmem.stores import MemoryStore

__all__ = ["MemoryContract"]

WORDS = [f"w{i}" for i in range(12)]


async def _await(awaitable: Any) -> Any:
    return await awaitable


class MemoryContract:
    """The behaviour shared by every memory class: nothing lost, bad input refused with the state
    unchanged, state round trips, pins, the policy's bound after each add, sessions."""

    memory_class: ClassVar[type[Any]]

    def options(self, summarize_fn: Optional[Callable[..., Any]], on_evict: Any) -> dict[str, Any]:
        raise NotImplementedError

    # -- helpers ---------------------------------------------------------------------------------

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.memory_class.add_message)

    @property
    def summarizes(self) -> bool:
        """Whether the class takes a ``summarize_fn``."""
        return "summarize_fn" in inspect.signature(self.memory_class).parameters

    @property
    def evicts(self) -> bool:
        return "on_evict" in inspect.signature(self.memory_class).parameters

    def call(self, memory: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        """``memory.method(*args, **kwargs)``, awaited when it returns an awaitable."""
        result = getattr(memory, method)(*args, **kwargs)
        if inspect.isawaitable(result):
            return asyncio.run(_await(result))
        return result

    def summarize_fn(self, summarizer: Any) -> Callable[..., Any]:
        """The recorder's coroutine form for an async class, the recorder itself for a sync one."""
        return summarizer.summarize if self.is_async else summarizer.__call__

    def make(self, summarizer: Any, on_evict: Any = None) -> Any:
        """A memory folding into the recorder ``summarizer`` (when the class summarizes)."""
        return self.memory_class(**self.options(self.summarize_fn(summarizer), on_evict))

    @pytest.fixture
    def summarizer(self, async_recorder: Any) -> Any:
        """A recorder for either kind of class (``summarize`` is its coroutine form)."""
        return async_recorder

    # -- the contract ----------------------------------------------------------------------------

    def test_a_new_memory_is_empty(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        assert memory.summary == ""
        assert memory.buffer == []
        assert memory.get_messages() == []
        assert memory.get_context() == ""
        assert memory.to_dict() == {"version": 2, "summary": "", "buffer": []}
        stats = memory.stats()
        assert (stats.messages, stats.pinned, stats.folds) == (0, 0, 0)

    def test_an_add_returns_the_message_it_appended_or_evicted(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        message = self.call(memory, "add_user_message", "hello", id="1", metadata={"k": 1})
        assert message == Message("user", "hello", id="1", metadata={"k": 1})
        assert memory.buffer[-1:] == [message] or summarizer.folded == [message]

    def test_nothing_is_lost(self, summarizer: Any) -> None:
        """Every added message is in the buffer, or was folded or handed to ``on_evict``, once."""
        evicted: list[Message] = []
        memory = self.make(summarizer, on_evict=evicted.extend)
        added = [self.call(memory, "add_user_message", word) for word in WORDS]
        assert memory.stats().messages == len(memory.buffer)
        gone = summarizer.folded if self.summarizes else evicted
        if self.summarizes and self.evicts:
            assert evicted == summarizer.folded
        assert gone + memory.buffer == added
        assert memory.stats().folds == len(summarizer.calls) or not self.summarizes

    def test_the_policy_holds_after_every_add(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        for word in WORDS:
            self.call(memory, "add_user_message", word)
            assert not memory.policy.over(memory._ledger), memory.buffer

    def test_a_failed_summarizer_changes_nothing(self, summarizer: Any) -> None:
        if not self.summarizes:
            pytest.skip("the class takes no summarize_fn")
        memory = self.make(summarizer)
        summarizer.fail = True
        failures = 0
        for word in WORDS:
            before = memory.to_dict()
            try:
                self.call(memory, "add_user_message", word)
            except RuntimeError:
                failures += 1
                assert memory.summary == before["summary"]
                assert [m.content for m in memory.buffer] == [
                    *(item["content"] for item in before["buffer"]),
                    word,
                ]
        assert failures > 0
        assert memory.stats().failed_folds == failures
        summarizer.fail = False
        self.call(memory, "add_user_message", "again")
        assert summarizer.folded + memory.buffer == [Message("user", w) for w in [*WORDS, "again"]]

    def test_bad_input_is_refused_and_changes_nothing(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        self.call(memory, "add_user_message", "kept")
        before = memory.to_dict()
        with pytest.raises(TypeError, match="role"):
            self.call(memory, "add_message", None, "x")
        with pytest.raises(TypeError, match=r"^pinned: expected bool, got int$"):
            self.call(memory, "add_user_message", "x", pinned=1)
        with pytest.raises(TypeError, match=r"^messages\[1\]: expected Message, got str$"):
            self.call(memory, "extend", [Message("user", "y"), "z"])
        with pytest.raises(TypeError, match=r"^summary: expected str, got int$"):
            memory.summary = 7
        assert memory.to_dict() == before

    def test_extend_is_all_or_nothing_with_at_most_one_summarizer_call(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        batch = [Message("user", word) for word in WORDS]
        assert self.call(memory, "extend", batch) is None
        assert len(summarizer.calls) <= 1
        assert summarizer.folded + memory.buffer == batch or not self.summarizes

    def test_state_round_trips_through_from_dict(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        memory.summary = "earlier"
        for word in WORDS[:5]:
            self.call(memory, "add_user_message", word)
        state = json.loads(json.dumps(memory.to_dict()))
        calls = len(summarizer.calls)
        copy = self.memory_class.from_dict(state, **self.options(self.summarize_fn(summarizer), None))
        assert type(copy) is self.memory_class
        assert copy.to_dict() == state
        assert copy.get_messages() == memory.get_messages()
        assert len(summarizer.calls) == calls  # a load never summarizes

    def test_restore_replaces_the_state_verbatim_or_changes_nothing(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        self.call(memory, "add_user_message", "old")
        big = {"version": 2, "summary": "s", "buffer": [{"role": "user", "content": w} for w in WORDS]}
        calls = len(summarizer.calls)
        memory.restore(big)
        assert memory.to_dict() == big  # verbatim: no eviction until the next add
        assert len(summarizer.calls) == calls
        with pytest.raises(StateTypeError, match=r"^buffer\[0\]\.content: expected str, got int$"):
            memory.restore({"version": 2, "summary": "", "buffer": [{"role": "user", "content": 1}]})
        with pytest.raises(InvalidStateError, match="unsupported state version 9"):
            memory.restore({"version": 9, "summary": "", "buffer": []})
        assert memory.to_dict() == big

    def test_recorded_changes_replay_to_the_same_state(self, summarizer: Any) -> None:
        source = self.make(summarizer)
        self.call(source, "add_user_message", "first", id="first")
        options = self.options(self.summarize_fn(summarizer), None)
        target = self.memory_class.from_dict(source.to_dict(), **options)
        with source.record() as changes:
            self.call(source, "add_system_message", "rules", id="rules", pinned=True)
            for word in WORDS[:5]:
                self.call(source, "add_user_message", word)
            self.call(source, "extend", [Message("user", w) for w in WORDS[5:8]])
            source.unpin("rules")
            source.summary = source.summary + "!"
            self.call(source, "add_user_message", "last")
        assert not source.recording
        assert isinstance(changes[0], Appended)
        self.call(target, "replay", changes)
        assert target.to_dict() == source.to_dict()

    def test_clear_empties_summary_and_buffer(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        memory.summary = "s"
        self.call(memory, "add_user_message", "a")
        memory.clear()
        assert (memory.summary, memory.buffer) == ("", [])

    def test_a_pinned_message_never_leaves(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        self.call(memory, "add_system_message", "rules", id="rules", pinned=True)
        for word in WORDS:
            self.call(memory, "add_user_message", word)
        assert Message("system", "rules", id="rules", pinned=True) in memory.buffer
        assert memory.stats().pinned == 1
        memory.unpin("rules")
        assert memory.stats().pinned == 0
        with pytest.raises(KeyError, match="nope"):
            memory.pin("nope")

    def test_get_messages_puts_the_summary_first(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        memory.buffer = [Message("user", "a")]
        memory.summary = "before"
        assert memory.get_messages() == [Message("system", "before"), Message("user", "a")]
        assert memory.get_context() == "system: before\nuser: a"

    def test_a_session_keeps_the_state(self, summarizer: Any) -> None:
        store = MemoryStore()

        def factory() -> Any:
            return self.make(summarizer)

        async def async_round() -> Any:
            sessions = AsyncSessions(store, factory)
            for word in WORDS[:6]:
                async with sessions.open("s") as memory:
                    await memory.add_user_message(word)
            return await sessions.get("s")

        if self.is_async:
            loaded = asyncio.run(async_round())
        else:
            sessions = Sessions(store, factory)
            for word in WORDS[:6]:
                with sessions.open("s") as memory:
                    memory.add_user_message(word)
            loaded = sessions.get("s")
        assert type(loaded) is self.memory_class
        kept = len(loaded.buffer)
        assert [m.content for m in loaded.buffer] == WORDS[6 - kept : 6]
        if self.summarizes:
            assert [m.content for m in summarizer.folded] == WORDS[: 6 - kept]

    def test_a_sync_class_refuses_coroutine_callables(self) -> None:
        if self.is_async:
            pytest.skip("async classes take coroutine functions")

        async def hook(messages: Sequence[Message]) -> None:
            return None

        def plain(summary: str, messages: Sequence[Message]) -> str:
            return summary

        for name in ("summarize_fn", "on_evict"):
            options = self.options(plain, None)
            if name not in options:
                continue
            options[name] = hook
            with pytest.raises(TypeError, match=f"^{name} is a coroutine function: "):
                self.memory_class(**options)

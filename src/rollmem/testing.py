"""Test helpers: fakes and assertions for your application's tests, and the store conformance suite.

For an application: :class:`RecordingSummarizer` (a deterministic ``summarize_fn`` that records
what it folded and fails on demand), :class:`FakeLLM` (answers the requests
:mod:`rollmem.adapters` render, from a script or by echoing, checking each is one the provider
accepts), :class:`RecordingCounter` (a word counter with an identity), :func:`memory_sessions`
(sessions in memory), :func:`assert_nothing_lost`, :func:`assert_summarized_once` and the
provider rules :func:`assert_openai_accepts`, :func:`assert_anthropic_accepts` and
:func:`assert_responses_accepts`. See the "Testing your app" page.

For a store, the conformance suite: the contract every bundled store passes.

Needs ``pip install "rollmem[testing]"`` (pytest and hypothesis); importing this module without
them raises :class:`~rollmem.errors.MissingExtraError` naming the extra. ``import rollmem`` never
imports it.

Subclass :class:`LogStoreContract` (sync ``load``/``write``/... methods) and/or
:class:`AsyncLogStoreContract` (``a``-methods, each test is one ``asyncio.run``) for a log store,
:class:`StoreContract` / :class:`AsyncStoreContract` for a whole-state store, in a test module
pytest collects, and define ``make_store(self)``, returning a new, empty store for each test::

    from rollmem.stores import MemoryStore
    from rollmem.testing import AsyncLogStoreContract, LogStoreContract

    class TestMyStore(LogStoreContract):
        def make_store(self) -> MemoryStore:
            return MemoryStore()

Each scenario is written once, as a generator that yields call and pause steps
and receives their results (or has their exception thrown in); the classes only drive it, with
blocking or awaited calls. Server backends get :func:`service_url` (skip, or fail under
``ROLLMEM_REQUIRE_SERVICES=1``) and :func:`compare_and_set_in_processes`; :func:`create`,
:func:`append`, :func:`entry` and :func:`texts` build and read log writes in your own tests, and
:class:`DictStore` is a minimal third-party-style whole-state store.
"""

from __future__ import annotations

from . import _extras

for _module, _package in (("pytest", "pytest"), ("hypothesis", "hypothesis")):
    _extras.import_extra(_module, package=_package, extra="testing", feature="rollmem.testing")

import asyncio  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402
import queue  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Generator, Iterator  # noqa: E402
from typing import Any, Callable, ClassVar, NamedTuple, Optional, TypeVar, Union  # noqa: E402

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# For applications' tests (standard library only): see rollmem._app_testing.
from ._app_testing import (  # noqa: E402
    FakeLLM,
    RecordingCounter,
    RecordingSummarizer,
    SummarizerDown,
    assert_anthropic_accepts,
    assert_nothing_lost,
    assert_openai_accepts,
    assert_responses_accepts,
    assert_summarized_once,
    async_memory_sessions,
    memory_sessions,
)
from .errors import ConflictError  # noqa: E402
from .stores import Head, LogEntry, LogWrite, StoredLog, StoredSession  # noqa: E402
from .stores.rules import apply_write, check_prefix, check_save, check_session_id, conflict  # noqa: E402

__all__ = [
    "AsyncLogStoreContract",
    "AsyncStoreContract",
    "DictStore",
    "FakeLLM",
    "LogStoreContract",
    "RecordingCounter",
    "RecordingSummarizer",
    "StoreContract",
    "SummarizerDown",
    "append",
    "assert_anthropic_accepts",
    "assert_nothing_lost",
    "assert_openai_accepts",
    "assert_responses_accepts",
    "assert_summarized_once",
    "async_memory_sessions",
    "compare_and_set_in_processes",
    "compare_and_set_loop",
    "create",
    "entry",
    "memory_sessions",
    "service_url",
    "texts",
]


_F = TypeVar("_F", bound=Callable[..., Any])


def _fixture(function: _F) -> _F:
    """``pytest.fixture``, typed (mypy reads pytest's internals as untyped)."""
    fixture: Callable[[_F], _F] = pytest.fixture
    return fixture(function)


class _Call(NamedTuple):
    method: str
    args: tuple[Any, ...]


class _Pause(NamedTuple):
    seconds: float


Step = Union[_Call, _Pause]
Scenario = Generator[Step, Any, None]


def _call(method: str, *args: Any) -> _Call:
    """A step calling ``store.method(*args)`` (or ``await store.amethod(*args)``)."""
    return _Call(method, args)


def _pause(seconds: float) -> _Pause:
    """A step sleeping ``seconds`` (``time.sleep`` or ``asyncio.sleep``)."""
    return _Pause(seconds)


def _next_step(steps: Scenario, result: Any, error: Optional[Exception]) -> Optional[Step]:
    try:
        return steps.send(result) if error is None else steps.throw(error)
    except StopIteration:
        return None


def _drive(store: Any, steps: Scenario) -> None:
    """Run a scenario with the store's blocking methods."""
    step = _next_step(steps, None, None)
    while step is not None:
        result, error = None, None
        if isinstance(step, _Pause):
            time.sleep(step.seconds)
        else:
            try:
                result = getattr(store, step.method)(*step.args)
            except Exception as exc:
                error = exc
        step = _next_step(steps, result, error)


async def _adrive(store: Any, steps: Scenario) -> None:
    """Run a scenario with the store's ``a``-methods, then ``aclose`` the store."""
    try:
        step = _next_step(steps, None, None)
        while step is not None:
            result, error = None, None
            if isinstance(step, _Pause):
                await asyncio.sleep(step.seconds)
            else:
                try:
                    result = await getattr(store, "a" + step.method)(*step.args)
                except Exception as exc:
                    error = exc
            step = _next_step(steps, result, error)
    finally:
        await store.aclose()


def _scenario(method: Callable[[Any], Scenario]) -> Callable[[Any, Any], None]:
    """Turn a scenario method into a test method that takes the ``store`` fixture."""

    def test(self: _Contract, store: Any) -> None:
        self.run(store, method(self))

    test.__name__ = method.__name__
    test.__qualname__ = method.__qualname__
    test.__doc__ = method.__doc__
    return test


STATE = json.dumps({"version": 2, "summary": "", "buffer": [{"role": "user", "content": "hi"}]})

ODD_TEXTS = [
    "",
    "not json {",
    '{"version": 999}',
    'héllo wörld 🌍 \n\t "quoted" \\ back\\slash \u2028 ; DROP TABLE x; --',
    "x" * 300_000,
]

ODD_IDS = ["alice", "with space", "quote'\"", "semi;colon", "colon:a:b", "star*?[x]", "ünï🌍", "x" * 500]


# A fixed alphabet spares Hypothesis building its Unicode tables (too_slow on a fresh checkout).
_ALPHABET = 'ab Z09_\n\t"\\{}[]:,é中😀'
_KEYS = st.sampled_from(["a", "a/b", "b", "ab"])
_OPERATION = st.one_of(
    st.tuples(
        st.just("save"),
        _KEYS,
        st.text(alphabet=_ALPHABET, max_size=20),
        st.sampled_from([0, 0, 0, -1, 1, 2]),
    ),
    st.tuples(st.sampled_from(["delete", "load"]), _KEYS),
    st.tuples(st.just("ids"), st.sampled_from(["", "a", "a/"])),
)


class _Blocking:
    """Runs a contract's scenarios through the blocking methods; the store is closed after each
    test."""

    def make_store(self) -> Any:
        raise NotImplementedError

    @_fixture
    def store(self) -> Iterator[Any]:
        store = self.make_store()
        try:
            yield store
        finally:
            store.close()

    def run(self, store: Any, steps: Scenario) -> None:
        _drive(store, steps)


class _Awaiting:
    """Runs a contract's scenarios through the ``a``-methods, each in one ``asyncio.run`` (the
    scenario ends with ``aclose()``)."""

    def make_store(self) -> Any:
        raise NotImplementedError

    @_fixture
    def store(self) -> Any:
        return self.make_store()

    def run(self, store: Any, steps: Scenario) -> None:
        asyncio.run(_adrive(store, steps))


class _Contract:
    """The scenarios; subclasses supply ``make_store`` and how a scenario runs."""

    ttl: ClassVar[float] = 0.2
    """The short ttl used by the expiry scenarios; they sleep twice as long."""
    expires_natively: ClassVar[bool] = False
    """True for stores whose expired sessions vanish by themselves (``purge_expired`` finds none)."""

    def make_store(self) -> Any:
        raise NotImplementedError

    def run(self, store: Any, steps: Scenario) -> None:
        raise NotImplementedError

    @_scenario
    def test_round_trip_and_revisions(self) -> Scenario:
        assert (yield _call("load", "s1")) is None
        assert (yield _call("save", "s1", STATE, 0)) == 1
        assert (yield _call("load", "s1")) == StoredSession(STATE, 1)
        assert (yield _call("save", "s1", "second", 1)) == 2
        assert (yield _call("save", "s1", "third", 2)) == 3
        assert (yield _call("load", "s1")) == StoredSession("third", 3)
        assert (yield _call("save", "s2", "other", 0)) == 1, "revisions are per session"
        assert (yield _call("load", "s1")) == StoredSession("third", 3)

    @_scenario
    def test_stored_text_comes_back_verbatim(self) -> Scenario:
        """Bad or odd data is kept and returned as text: parsing is the sessions layer's job."""
        for index, text in enumerate(ODD_TEXTS):
            assert (yield _call("save", f"t{index}", text, 0)) == 1
        for index, text in enumerate(ODD_TEXTS):
            assert (yield _call("load", f"t{index}")) == StoredSession(text, 1)

    @_scenario
    def test_odd_session_ids(self) -> Scenario:
        for session_id in ODD_IDS:
            assert (yield _call("save", session_id, session_id, 0)) == 1
        for session_id in ODD_IDS:
            assert (yield _call("load", session_id)) == StoredSession(session_id, 1)
        assert (yield _call("ids")) == sorted(ODD_IDS)

    @_scenario
    def test_stale_revision_conflicts_and_writes_nothing(self) -> Scenario:
        yield _call("save", "s", "one", 0)
        yield _call("save", "s", "two", 1)
        for stale in (1, 3, 99):
            with pytest.raises(ConflictError, match="'s'"):
                yield _call("save", "s", "lost", stale, 60)
        assert (yield _call("load", "s")) == StoredSession("two", 2)
        assert (yield _call("save", "s", "three", 2)) == 3

    @_scenario
    def test_create_when_exists_conflicts_and_writes_nothing(self) -> Scenario:
        yield _call("save", "s", "first", 0)
        with pytest.raises(ConflictError, match="new session"):
            yield _call("save", "s", "second", 0)
        assert (yield _call("load", "s")) == StoredSession("first", 1)

    @_scenario
    def test_update_when_absent_conflicts_and_writes_nothing(self) -> Scenario:
        with pytest.raises(ConflictError, match="'ghost'"):
            yield _call("save", "ghost", "boo", 1)
        assert (yield _call("load", "ghost")) is None
        assert (yield _call("ids")) == []

    @_scenario
    def test_delete(self) -> Scenario:
        assert (yield _call("delete", "s")) is False
        yield _call("save", "s", "one", 0)
        yield _call("save", "s", "two", 1)
        yield _call("save", "keep", "kept", 0)
        assert (yield _call("delete", "s")) is True
        assert (yield _call("load", "s")) is None
        assert (yield _call("delete", "s")) is False
        with pytest.raises(ConflictError):
            yield _call("save", "s", "stale", 2)
        assert (yield _call("save", "s", "again", 0)) == 1, "a deleted session starts over"
        assert (yield _call("load", "keep")) == StoredSession("kept", 1)

    @_scenario
    def test_ids_sorted_by_prefix(self) -> Scenario:
        assert (yield _call("ids")) == []
        for session_id in ["b", "a", "c/2", "c/1", "ca", "gone"]:
            yield _call("save", session_id, "x", 0)
        yield _call("delete", "gone")
        assert (yield _call("ids")) == ["a", "b", "c/1", "c/2", "ca"]
        assert (yield _call("ids", "")) == ["a", "b", "c/1", "c/2", "ca"]
        assert (yield _call("ids", "c")) == ["c/1", "c/2", "ca"]
        assert (yield _call("ids", "c/")) == ["c/1", "c/2"]
        assert (yield _call("ids", "c/1")) == ["c/1"]
        assert (yield _call("ids", "zzz")) == []

    @_scenario
    def test_ids_prefix_is_literal_and_case_sensitive(self) -> Scenario:
        """No LIKE, glob or regex meaning leaks into the prefix."""
        names = ["a%b", "a_b", "a*b", "a?b", "a[b]", "a\\b", "a.b", "A_b", "axb", "ab"]
        for session_id in names:
            yield _call("save", session_id, "x", 0)
        for prefix in ["a%", "a_", "a*", "a?", "a[", "a\\", "a.", "A"]:
            assert (yield _call("ids", prefix)) == [n for n in names if n.startswith(prefix)], prefix
        assert (yield _call("ids", "a")) == sorted(n for n in names if n.startswith("a"))

    @_scenario
    def test_ttl_expiry(self) -> Scenario:
        yield _call("save", "short", "s", 0, self.ttl)
        yield _call("save", "long", "l", 0, 60)
        yield _call("save", "forever", "f", 0)
        yield _call("save", "made-permanent", "p", 0, self.ttl)
        yield _call("save", "made-permanent", "p2", 1)
        yield _call("save", "renewed", "r", 0, self.ttl)
        yield _call("save", "renewed", "r2", 1, 60)
        yield _call("save", "deleted-late", "d", 0, self.ttl)
        yield _call("save", "conflicted", "c", 0)
        with pytest.raises(ConflictError):
            yield _call("save", "conflicted", "lost", 0, self.ttl)
        assert (yield _call("load", "short")) == StoredSession("s", 1)
        assert "short" in (yield _call("ids"))
        yield _pause(self.ttl * 2)
        assert (yield _call("load", "short")) is None
        assert (yield _call("ids")) == ["conflicted", "forever", "long", "made-permanent", "renewed"]
        assert (yield _call("load", "made-permanent")) == StoredSession("p2", 2)
        assert (yield _call("load", "renewed")) == StoredSession("r2", 2)
        assert (yield _call("load", "conflicted")) == StoredSession("c", 1), "a lost save set no ttl"
        assert (yield _call("delete", "deleted-late")) is False, "an expired session is not live"
        with pytest.raises(ConflictError, match=r"absent or expired|another writer"):
            yield _call("save", "short", "late", 1)
        assert (yield _call("save", "short", "new", 0)) == 1, "an expired session starts over"
        assert (yield _call("load", "short")) == StoredSession("new", 1)

    @_scenario
    def test_purge_expired(self) -> Scenario:
        yield _call("save", "a", "x", 0, self.ttl)
        yield _call("save", "b", "x", 0, self.ttl)
        yield _call("save", "c", "x", 0)
        yield _call("save", "d", "x", 0, 60)
        assert (yield _call("purge_expired")) == 0
        yield _pause(self.ttl * 2)
        assert (yield _call("purge_expired")) == (0 if self.expires_natively else 2)
        assert (yield _call("purge_expired")) == 0
        assert (yield _call("ids")) == ["c", "d"]
        assert (yield _call("load", "c")) == StoredSession("x", 1)

    @_scenario
    def test_bad_arguments_raise_and_write_nothing(self) -> Scenario:
        bad_saves: list[tuple[type[Exception], str, tuple[Any, ...]]] = [
            (TypeError, "session_id: expected str, got int", (7, "x", 0)),
            (ValueError, "session_id must not be empty", ("", "x", 0)),
            (ValueError, "session_id must not contain NUL", ("a\x00b", "x", 0)),
            (ValueError, "session_id must be valid Unicode", ("\ud800", "x", 0)),
            (TypeError, "state: expected str, got bytes", ("s", b"x", 0)),
            (ValueError, "state must not contain NUL", ("s", "a\x00", 0)),
            (TypeError, "expected_revision: expected int, got bool", ("s", "x", False)),
            (TypeError, "expected_revision: expected int, got float", ("s", "x", 0.0)),
            (ValueError, "expected_revision must be >= 0, got -1", ("s", "x", -1)),
            (TypeError, "ttl: expected a number of seconds or None, got str", ("s", "x", 0, "5")),
            (TypeError, "ttl: expected a number of seconds or None, got bool", ("s", "x", 0, True)),
            (ValueError, "ttl must be a finite number > 0, got 0", ("s", "x", 0, 0)),
            (ValueError, "ttl must be a finite number > 0", ("s", "x", 0, -1.5)),
            (ValueError, "ttl must be a finite number > 0", ("s", "x", 0, float("nan"))),
            (ValueError, "ttl must be a finite number > 0", ("s", "x", 0, float("inf"))),
            (ValueError, "ttl must be a finite number > 0", ("s", "x", 0, 10**400)),
        ]
        for error, message, args in bad_saves:
            with pytest.raises(error, match=re.escape(message)):
                yield _call("save", *args)
        for method in ("load", "delete"):
            with pytest.raises(TypeError, match="session_id: expected str, got None"):
                yield _call(method, None)
        with pytest.raises(TypeError, match="prefix: expected str, got bytes"):
            yield _call("ids", b"s")
        assert (yield _call("ids")) == []


class StoreContract(_Blocking, _Contract):
    """The contract through the blocking methods, plus threads racing on one session."""

    def test_threads_never_lose_an_update(self, store: Any) -> None:
        threads, saves = 6, 25
        won: list[list[int]] = [[] for _ in range(threads)]
        errors: list[BaseException] = []

        def work(index: int) -> None:
            try:
                won[index] = compare_and_set_loop(store, "race", saves)
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert errors == []
        _assert_every_increment_won_once(store.load("race"), won, threads * saves)

    @settings(
        max_examples=20,
        deadline=None,
        # one store per test is right here; each subclass runs the same test on its own store
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
    )
    @given(operations=st.lists(_OPERATION, max_size=20))
    def test_random_operations_match_a_model(self, store: Any, operations: list[tuple[Any, ...]]) -> None:
        """Any sequence of saves (right or wrong revision), deletes, loads and ids agrees with a dict."""
        namespace = f"{uuid.uuid4().hex}/"
        model: dict[str, StoredSession] = {}
        for operation, key, *rest in operations:
            session_id = namespace + key
            current = model.get(session_id)
            if operation == "save":
                state, offset = rest
                live = 0 if current is None else current.revision
                expected = max(0, live + offset)
                if expected == live:
                    assert store.save(session_id, state, expected) == live + 1
                    model[session_id] = StoredSession(state, live + 1)
                else:
                    with pytest.raises(ConflictError):
                        store.save(session_id, state, expected)
            elif operation == "delete":
                assert store.delete(session_id) is (model.pop(session_id, None) is not None)
            elif operation == "load":
                assert store.load(session_id) == current
            else:
                assert store.ids(session_id) == sorted(i for i in model if i.startswith(session_id))


class AsyncStoreContract(_Awaiting, _Contract):
    """The contract through the ``a``-methods: each test is one ``asyncio.run`` that ends with
    ``aclose()``; plus tasks racing on one session."""

    def test_tasks_never_lose_an_update(self, store: Any) -> None:
        tasks, saves = 6, 25

        async def main() -> tuple[list[list[int]], Optional[StoredSession]]:
            try:
                won = await asyncio.gather(
                    *(_acompare_and_set_loop(store, "race", saves) for _ in range(tasks))
                )
                return list(won), await store.aload("race")
            finally:
                await store.aclose()

        won, final = asyncio.run(main())
        _assert_every_increment_won_once(final, won, tasks * saves)


# Helpers for concurrency tests (threads, tasks, processes) against any store.


def _next_count(current: Optional[StoredSession]) -> tuple[str, int]:
    count = 0 if current is None else json.loads(current.state)["count"]
    return json.dumps({"count": count + 1}), 0 if current is None else current.revision


def compare_and_set_loop(store: Any, session_id: str, saves: int) -> list[int]:
    """Increment a counter in the session ``saves`` times with load + compare-and-set,
    retrying on ``ConflictError``; return the revisions this caller's saves created. A short
    sleep between load and save lets other writers in, so even a fast store sees conflicts."""
    won: list[int] = []
    while len(won) < saves:
        state, revision = _next_count(store.load(session_id))
        time.sleep(0.0005)
        try:
            won.append(store.save(session_id, state, revision))
        except ConflictError:
            continue
    return won


async def _acompare_and_set_loop(store: Any, session_id: str, saves: int) -> list[int]:
    """Async twin of :func:`compare_and_set_loop`."""
    won: list[int] = []
    while len(won) < saves:
        state, revision = _next_count(await store.aload(session_id))
        await asyncio.sleep(0)
        try:
            won.append(await store.asave(session_id, state, revision))
        except ConflictError:
            continue
    return won


def _assert_every_increment_won_once(
    final: Optional[StoredSession], won: list[list[int]], total: int
) -> None:
    """No update lost or duplicated: the counter and the revision both reached ``total``, and
    each revision 1..total was created by exactly one save."""
    assert final is not None
    assert final.revision == total
    assert json.loads(final.state) == {"count": total}
    assert sorted(r for revisions in won for r in revisions) == list(range(1, total + 1))


def _process_worker(
    make_store: Callable[[], Any], session_id: str, saves: int, start: Any, results: Any
) -> None:
    store = make_store()
    try:
        start.wait()
        results.put(compare_and_set_loop(store, session_id, saves))
    finally:
        store.close()


def compare_and_set_in_processes(
    make_store: Callable[[], Any], session_id: str, processes: int, saves: int
) -> list[list[int]]:
    """Run :func:`compare_and_set_loop` in ``processes`` spawned processes that start together,
    each building its own store with the picklable ``make_store``; return each one's revisions."""
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(processes), context.Queue()
    workers = [
        context.Process(target=_process_worker, args=(make_store, session_id, saves, start, results))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    won: list[list[int]] = []
    deadline = time.monotonic() + 120
    while len(won) < processes:
        try:
            won.append(results.get(timeout=0.2))
        except queue.Empty:
            failed = [worker.exitcode for worker in workers if worker.exitcode not in (None, 0)]
            assert not failed, f"worker processes failed with exit codes {failed}"
            assert time.monotonic() < deadline, "worker processes timed out"
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    return won


def service_url(variable: str, how_to_start: str) -> str:
    """The server address in ``variable``; without it the test skips saying ``how_to_start``,
    or fails when ``ROLLMEM_REQUIRE_SERVICES=1``."""
    value = os.environ.get(variable, "")
    if not value:
        message = f"{variable} is not set: {how_to_start}"
        if os.environ.get("ROLLMEM_REQUIRE_SERVICES") == "1":
            pytest.fail(f"ROLLMEM_REQUIRE_SERVICES=1 but {message}")
        pytest.skip(message)
    return value


# -- the log protocol ---------------------------------------------------------------------------------


def entry(text: str, cost: int = 1) -> LogEntry:
    """A log entry holding a small message whose content is ``text``."""
    return LogEntry(json.dumps({"role": "user", "content": text}), cost)


def texts(stored: Optional[StoredLog]) -> list[str]:
    """The ``content`` of each entry of a loaded log (built by :func:`entry`); fails on ``None``."""
    assert stored is not None
    return [json.loads(e.message)["content"] for e in stored.entries]


def create(
    *contents: str, summary: str = "", counter: Optional[str] = "c", ttl: Optional[float] = None
) -> LogWrite:
    """A write creating a session with one :func:`entry` per text."""
    return LogWrite(
        "", tuple(entry(c) for c in contents), summary=summary, counter=counter, create=True, ttl=ttl
    )


def append(head: Head, *contents: str, ttl: Optional[float] = None) -> LogWrite:
    """A write appending one :func:`entry` per text to the session loaded with ``head``."""
    return LogWrite(head.incarnation, tuple(entry(c) for c in contents), counter=head.counter, ttl=ttl)


class _LogContract:
    """The log-protocol scenarios; subclasses supply ``make_store`` and how a scenario runs."""

    ttl: ClassVar[float] = 0.2
    expires_natively: ClassVar[bool] = False
    delta_loads: ClassVar[bool] = True
    """False for stores that always return every entry (``since`` ignored)."""

    def make_store(self) -> Any:
        raise NotImplementedError

    def run(self, store: Any, steps: Scenario) -> None:
        raise NotImplementedError

    @_scenario
    def test_create_append_load(self) -> Scenario:
        assert (yield _call("load", "s")) is None
        head = yield _call("write", "s", create("a", "b", summary="S"))
        assert (head.revision, head.tail, head.summary, head.counter) == (1, 2, "S", "c")
        other = yield _call("write", "t", create("x"))
        assert other.incarnation != head.incarnation, "incarnations are never reused"
        stored = yield _call("load", "s")
        assert stored.head == head
        assert not stored.delta
        assert texts(stored) == ["a", "b"]
        assert [(e.seq, e.cost) for e in stored.entries] == [(0, 1), (1, 1)]
        after = yield _call("write", "s", append(head, "c"))
        assert (after.revision, after.tail, after.summary) == (1, 3, "S"), "an append bumps no revision"
        assert texts((yield _call("load", "s"))) == ["a", "b", "c"]

    @_scenario
    def test_appends_never_conflict_with_each_other(self) -> Scenario:
        head = yield _call("write", "s", create("a"))
        for text in ("b", "c", "d"):  # every writer loaded the same head
            yield _call("write", "s", append(head, text))
        stored = yield _call("load", "s")
        assert texts(stored) == ["a", "b", "c", "d"]
        assert [e.seq for e in stored.entries] == [0, 1, 2, 3]

    @_scenario
    def test_fold_is_a_compare_and_set_that_keeps_later_appends(self) -> Scenario:
        head = yield _call("write", "s", create("a", "b", "c"))
        yield _call("write", "s", append(head, "d"))  # after the folder loaded
        fold = LogWrite(
            head.incarnation, (entry("e"),), expected_revision=1, summary="a b", cut=2, counter="c"
        )
        folded = yield _call("write", "s", fold)
        assert (folded.revision, folded.summary, folded.tail) == (2, "a b", 5)
        stored = yield _call("load", "s")
        assert texts(stored) == ["c", "d", "e"]
        with pytest.raises(ConflictError, match="revision"):
            yield _call("write", "s", fold)  # the loser of two racing folds
        assert (yield _call("load", "s")) == stored, "a lost write changes nothing"

    @_scenario
    def test_fold_keeps_pinned_entries_below_the_cut(self) -> Scenario:
        head = yield _call("write", "s", create("p", "a", "b", "c"))
        fold = LogWrite(head.incarnation, expected_revision=1, summary="a b", cut=3, keep=(0,), counter="c")
        yield _call("write", "s", fold)
        assert texts((yield _call("load", "s"))) == ["p", "c"]

    @_scenario
    def test_expected_tail_refuses_when_someone_appended(self) -> Scenario:
        head = yield _call("write", "s", create("a"))
        yield _call("write", "s", append(head, "b"))
        for write in (
            LogWrite(head.incarnation, expected_revision=1, expected_tail=1, summary="x", cut=1, counter="c"),
            LogWrite(
                head.incarnation,
                (entry("z"),),
                expected_revision=1,
                expected_tail=1,
                replace=True,
                counter="c",
            ),
        ):
            with pytest.raises(ConflictError, match="appended"):
                yield _call("write", "s", write)
        rewrite = LogWrite(
            head.incarnation, (entry("z"),), expected_revision=1, expected_tail=2, replace=True
        )
        after = yield _call("write", "s", rewrite)
        assert (after.revision, after.tail, after.counter) == (2, 3, None), "sequence numbers never repeat"
        stored = yield _call("load", "s")
        assert texts(stored) == ["z"]
        assert stored.entries[0].seq == 2

    @_scenario
    def test_a_deleted_session_ends_its_incarnation(self) -> Scenario:
        head = yield _call("write", "s", create("old"))
        assert (yield _call("delete", "s")) is True
        assert (yield _call("delete", "s")) is False
        with pytest.raises(ConflictError, match="deleted, expired or recreated"):
            yield _call("write", "s", append(head, "late"))
        again = yield _call("write", "s", create("new"))
        assert again.revision == 1
        assert again.incarnation != head.incarnation
        for stale in (append(head, "late"), LogWrite(head.incarnation, expected_revision=1, summary="x")):
            with pytest.raises(ConflictError, match="deleted, expired or recreated"):
                yield _call("write", "s", stale)
        assert texts((yield _call("load", "s"))) == ["new"]

    @_scenario
    def test_create_when_live_and_counter_changes_conflict(self) -> Scenario:
        head = yield _call("write", "s", create("a"))
        with pytest.raises(ConflictError, match="created it first"):
            yield _call("write", "s", create("b"))
        with pytest.raises(ConflictError, match="counter"):
            yield _call("write", "s", LogWrite(head.incarnation, (entry("b"),), counter="other"))
        assert texts((yield _call("load", "s"))) == ["a"]

    @_scenario
    def test_load_since_a_head(self) -> Scenario:
        head = yield _call("write", "s", create("a", "b"))
        same = yield _call("load", "s", head)
        yield _call("write", "s", append(head, "c"))
        later = yield _call("load", "s", head)
        if self.delta_loads:
            assert (same.delta, same.entries) == (True, ())
            assert (later.delta, texts(later), later.entries[0].seq) == (True, ["c"], 2)
        else:
            assert texts(later) == ["a", "b", "c"]
        yield _call(
            "write", "s", LogWrite(head.incarnation, expected_revision=1, summary="a", cut=1, counter="c")
        )
        folded = yield _call("load", "s", head)
        assert (folded.delta, texts(folded)) == (False, ["b", "c"]), "after a fold, everything"

    @_scenario
    def test_odd_texts_and_ids_round_trip(self) -> Scenario:
        odd = 'héllo 🌍 \n\t "q" \\ \u2028 ; DROP TABLE x; --'
        for session_id in ODD_IDS:
            yield _call("write", session_id, create(odd, summary=odd))
        for session_id in ODD_IDS:
            stored = yield _call("load", session_id)
            assert (texts(stored), stored.head.summary) == ([odd], odd)
        assert (yield _call("ids")) == sorted(ODD_IDS)

    @_scenario
    def test_long_session_ids(self) -> Scenario:
        """Ids of any length are kept whole: 3,004 characters that do not compress (beyond what a
        PostgreSQL index row holds), a 20,000-character one, ids that share a long prefix."""
        noise = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(60))
        long_ids = [noise[:3004], "é" * 20_000, noise[:3004] + "-b", noise[:3000]]
        for number, session_id in enumerate(long_ids):
            head = yield _call("write", session_id, create(f"m{number}", summary=f"s{number}"))
            head = yield _call("write", session_id, append(head, "later"))
            fold = LogWrite(
                head.incarnation, (entry("new"),), expected_revision=1, summary="folded", cut=1, counter="c"
            )
            yield _call("write", session_id, fold)
        for session_id in long_ids:
            stored = yield _call("load", session_id)
            assert (texts(stored), stored.head.summary) == (["later", "new"], "folded")
        assert (yield _call("ids")) == sorted(long_ids)
        assert (yield _call("ids", noise[:3000])) == sorted([long_ids[0], long_ids[2], long_ids[3]])
        assert (yield _call("ids", noise[:3003] + "-")) == []
        assert (yield _call("delete", long_ids[0])) is True
        assert (yield _call("load", long_ids[0])) is None
        assert (yield _call("load", long_ids[2])) is not None
        assert (yield _call("ids", noise[:3004])) == [long_ids[2]]
        again = yield _call("write", long_ids[0], create("again"))
        assert again.revision == 1
        assert texts((yield _call("load", long_ids[0]))) == ["again"]

    @_scenario
    def test_ids_by_literal_prefix(self) -> Scenario:
        names = ["a%b", "a_b", "a*b", "a[b]", "A_b", "ab", "c/1", "gone"]
        for session_id in names:
            yield _call("write", session_id, create("x"))
        yield _call("delete", "gone")
        for prefix in ["", "a%", "a_", "a*", "a[", "A", "c/", "zzz"]:
            expected = sorted(n for n in names if n.startswith(prefix) and n != "gone")
            assert (yield _call("ids", prefix)) == expected, prefix

    @_scenario
    def test_ttl_and_purge(self) -> Scenario:
        short = yield _call("write", "short", create("s", ttl=self.ttl))
        yield _call("write", "renewed", create("r", ttl=self.ttl))
        renewed = (yield _call("load", "renewed")).head
        yield _call("write", "renewed", append(renewed, "r2", ttl=60))
        yield _call("write", "forever", create("f"))
        yield _pause(self.ttl * 2)
        assert (yield _call("load", "short")) is None
        assert (yield _call("ids")) == ["forever", "renewed"]
        with pytest.raises(ConflictError):
            yield _call("write", "short", append(short, "late"))
        assert (yield _call("purge_expired")) == (0 if self.expires_natively else 1), (
            "the late write made nothing"
        )
        again = yield _call("write", "short", create("new"))
        assert again.incarnation != short.incarnation
        assert texts((yield _call("load", "short"))) == ["new"]

    @_scenario
    def test_purge_expired(self) -> Scenario:
        yield _call("write", "a", create("x", ttl=self.ttl))
        yield _call("write", "b", create("x", ttl=self.ttl))
        yield _call("write", "c", create("x"))
        assert (yield _call("purge_expired")) == 0
        yield _pause(self.ttl * 2)
        assert (yield _call("purge_expired")) == (0 if self.expires_natively else 2)
        assert (yield _call("ids")) == ["c"]

    @_scenario
    def test_bad_arguments_raise_and_write_nothing(self) -> Scenario:
        bad: list[tuple[type[Exception], str, tuple[Any, ...]]] = [
            (TypeError, "session_id: expected str, got int", (7, create("x"))),
            (ValueError, "session_id must not be empty", ("", create("x"))),
            (TypeError, "change: expected a LogWrite, got str", ("s", "x")),
            (
                TypeError,
                "change.entries[0]: expected a LogEntry, got str",
                ("s", LogWrite("", ("x",), create=True)),  # type: ignore[arg-type]
            ),
            (
                ValueError,
                "change.entries[0].message must not contain NUL",
                ("s", LogWrite("", (LogEntry("\x00", 1),), create=True)),
            ),
            (
                ValueError,
                "change.entries[0].cost must be >= -1, got -2",
                ("s", LogWrite("", (LogEntry("{}", -2),), create=True)),
            ),
            (
                TypeError,
                "change.expected_revision: expected int, got bool",
                ("s", LogWrite("i", expected_revision=True)),
            ),
            (
                ValueError,
                "a rewrite (replace=True) needs expected_revision and expected_tail",
                ("s", LogWrite("i", replace=True)),
            ),
            (
                ValueError,
                "ttl must be a finite number > 0, got 0",
                ("s", LogWrite("", create=True, ttl=0)),
            ),
        ]
        for error, message, args in bad:
            with pytest.raises(error, match=re.escape(message)):
                yield _call("write", *args)
        with pytest.raises(TypeError, match="since: expected a Head or None, got int"):
            yield _call("load", "s", 3)
        assert (yield _call("ids")) == []


_LOG_OPERATION = st.one_of(
    st.tuples(st.just("create"), _KEYS, st.integers(0, 3)),
    st.tuples(st.just("append"), _KEYS, st.integers(0, 3), st.booleans()),
    st.tuples(
        st.just("fold"),
        _KEYS,
        st.integers(0, 2),
        st.integers(0, 4),
        st.sampled_from([0, 0, 1]),
        st.booleans(),
    ),
    st.tuples(st.just("rewrite"), _KEYS, st.integers(0, 2), st.sampled_from([0, 0, 1])),
    st.tuples(st.sampled_from(["delete", "load"]), _KEYS),
)


def _parsed(entries: Any) -> list[tuple[int, int, Any]]:
    return [(e.seq, e.cost, json.loads(e.message)) for e in entries]


def _model_write(
    model: dict[str, tuple[Head, list[LogEntry]]], store: Any, session_id: str, change: LogWrite
) -> None:
    """Apply ``change`` to the store and to the model (through the reference semantics): both
    succeed alike or both conflict, and agree on the head (but for a new incarnation's name)."""
    current = model.get(session_id)
    try:
        head, entries = apply_write(
            session_id,
            None if current is None else current[0],
            [] if current is None else current[1],
            change,
            "?",
        )
    except ConflictError:
        with pytest.raises(ConflictError):
            store.write(session_id, change)
        return
    written = store.write(session_id, change)
    if change.create:
        head = Head(written.incarnation, head.revision, head.summary, head.tail, head.counter)
    assert written == head
    model[session_id] = (head, entries)


class LogStoreContract(_Blocking, _LogContract):
    """The log contract through the blocking methods, plus threads racing on one session."""

    def test_with_block_closes_the_store(self) -> None:
        """``with store:`` gives the store and closes it at the end; closing again is harmless."""
        with self.make_store() as store:
            store.write("s", create("a"))
            assert texts(store.load("s")) == ["a"]
        store.close()

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
    )
    @given(operations=st.lists(_LOG_OPERATION, max_size=25))
    def test_random_writes_match_the_reference_semantics(
        self, store: Any, operations: list[tuple[Any, ...]]
    ) -> None:
        """Any sequence of creates, appends, folds and rewrites (right or stale expectations),
        deletes and loads agrees with ``apply_write`` on a dict."""
        namespace = f"{uuid.uuid4().hex}/"
        model: dict[str, tuple[Head, list[LogEntry]]] = {}
        for number, (operation, key, *rest) in enumerate(operations, 1):
            session_id = namespace + key
            current = model.get(session_id)
            head = current[0] if current is not None else Head("gone", 1, "", 0, "c")
            new = tuple(entry(f"m{number}-{i}") for i in range(rest[0] if rest else 0))
            if operation == "create":
                _model_write(
                    model, store, session_id, LogWrite("", new, summary="", counter="c", create=True)
                )
            elif operation == "append":
                counter = head.counter if rest[1] else "other"
                _model_write(model, store, session_id, LogWrite(head.incarnation, new, counter=counter))
            elif operation == "fold":
                _, cut, stale, keep_first = rest
                live = [] if current is None else [e.seq for e in current[1]]
                cut_seq = live[min(cut, len(live) - 1)] if live else 0
                keep = tuple(live[:1]) if keep_first else ()
                change = LogWrite(
                    head.incarnation,
                    new[:1],
                    expected_revision=head.revision + stale,
                    summary=f"s{number}",
                    cut=cut_seq,
                    keep=keep,
                    counter="c",
                )
                _model_write(model, store, session_id, change)
            elif operation == "rewrite":
                change = LogWrite(
                    head.incarnation,
                    new,
                    expected_revision=head.revision,
                    expected_tail=head.tail + rest[1],
                    summary=f"r{number}",
                    replace=True,
                    counter=None if number % 2 else "c",
                )
                _model_write(model, store, session_id, change)
            elif operation == "delete":
                assert store.delete(session_id) is (model.pop(session_id, None) is not None)
            else:
                stored = store.load(session_id)
                if current is None:
                    assert stored is None
                else:
                    assert stored is not None
                    assert stored.head == current[0]
                    assert _parsed(stored.entries) == _parsed(current[1]), (
                        "equal JSON (a store may reformat it)"
                    )
        assert store.ids(namespace) == sorted(model)

    def test_threads_appending_and_folding_lose_and_duplicate_nothing(self, store: Any) -> None:
        """Appenders never retry; folders (compare-and-set) retry until they win; every message
        ends folded exactly once or still in the log."""
        head = store.write("s", create())
        appenders, folders, count = 4, 2, 25
        folded: list[list[str]] = []
        retries: list[int] = []
        errors: list[BaseException] = []

        def appender(index: int) -> None:
            try:
                for number in range(count):
                    store.write("s", append(head, f"w{index}-{number}"))
            except BaseException as exc:
                errors.append(exc)

        def folder() -> None:
            try:
                lost = 0
                for _ in range(count // 5):
                    while True:
                        stored = store.load("s")
                        cut = stored.entries[len(stored.entries) // 2].seq if stored.entries else 0
                        gone = [e for e in stored.entries if e.seq < cut]
                        fold = LogWrite(
                            head.incarnation, expected_revision=stored.head.revision, cut=cut, counter="c"
                        )
                        try:
                            store.write("s", fold)
                        except ConflictError:
                            lost += 1
                            continue
                        folded.append([json.loads(e.message)["content"] for e in gone])
                        break
                retries.append(lost)
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=appender, args=(i,)) for i in range(appenders)]
        workers += [threading.Thread(target=folder) for _ in range(folders)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert errors == []
        seen = [text for batch in folded for text in batch] + texts(store.load("s"))
        assert sorted(seen) == sorted(f"w{i}-{n}" for i in range(appenders) for n in range(count))


class AsyncLogStoreContract(_Awaiting, _LogContract):
    """The log contract through the ``a``-methods, each test one ``asyncio.run`` ending with ``aclose()``."""

    def test_async_with_block_closes_the_store(self) -> None:
        """``async with store:`` gives the store and closes it with ``aclose()``; again is harmless."""

        async def main() -> list[str]:
            async with self.make_store() as store:
                await store.awrite("s", create("a"))
                found = texts(await store.aload("s"))
            await store.aclose()
            return found

        assert asyncio.run(main()) == ["a"]

    def test_tasks_appending_never_conflict(self, store: Any) -> None:
        async def main() -> Optional[StoredLog]:
            try:
                head = await store.awrite("s", create())

                async def appender(index: int) -> None:
                    for number in range(10):
                        await store.awrite("s", append(head, f"t{index}-{number}"))
                        await asyncio.sleep(0)

                await asyncio.gather(*(appender(i) for i in range(6)))
                loaded: Optional[StoredLog] = await store.aload("s")
                return loaded
            finally:
                await store.aclose()

        stored = asyncio.run(main())
        assert sorted(texts(stored)) == sorted(f"t{i}-{n}" for i in range(6) for n in range(10))
        assert stored is not None
        assert [e.seq for e in stored.entries] == list(range(60))


class DictStore:
    """A whole-state store as a third party writes it against the original protocol (load/save
    with compare-and-set, expiry), kept in a dict: sessions reach it through the generic adapter."""

    def __init__(self) -> None:
        self.sessions: dict[str, StoredSession] = {}
        self.expiry: dict[str, float] = {}
        self.saves = 0

    def _expire(self) -> int:
        gone = [i for i, at in self.expiry.items() if at <= time.monotonic()]
        for session_id in gone:
            del self.sessions[session_id], self.expiry[session_id]
        return len(gone)

    def load(self, session_id: str) -> Optional[StoredSession]:
        check_session_id(session_id)
        self._expire()
        return self.sessions.get(session_id)

    def save(self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None) -> int:
        check_save(session_id, state, expected_revision, ttl)
        current = self.load(session_id)
        live = 0 if current is None else current.revision
        if live != expected_revision:
            raise conflict(session_id, expected_revision, live)
        self.saves += 1
        self.sessions[session_id] = StoredSession(state, expected_revision + 1)
        self.expiry.pop(session_id, None)
        if ttl is not None:
            self.expiry[session_id] = time.monotonic() + ttl
        return expected_revision + 1

    def delete(self, session_id: str) -> bool:
        check_session_id(session_id)
        self._expire()
        self.expiry.pop(session_id, None)
        return self.sessions.pop(session_id, None) is not None

    def ids(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        self._expire()
        return sorted(i for i in self.sessions if i.startswith(prefix))

    def purge_expired(self) -> int:
        return 0  # expires by itself, as Redis does

    def close(self) -> None:
        pass

"""Test helpers: fakes and assertions for your application's tests, and the store conformance suite.

For an application: :class:`RecordingSummarizer` (a deterministic ``summarize_fn`` that records
what it folded and fails on demand), :class:`FakeLLM` (answers the requests
:mod:`rollmem.adapters` render, from a script or by echoing, checking each is one the provider
accepts), :class:`RecordingCounter` (a word counter with an identity), :func:`memory_sessions`
(sessions in memory), :func:`assert_nothing_lost`, :func:`assert_summarized_once` and the
provider rules :func:`assert_openai_accepts`, :func:`assert_anthropic_accepts` and
:func:`assert_responses_accepts`. See the "Testing your app" page.

For a store, the conformance suite: the contract every bundled store passes.

Needs ``pip install "rollmem[testing]"`` (pytest); importing this module without it raises
:class:`~rollmem.errors.MissingExtraError` naming the extra. ``import rollmem`` never imports it.

Subclass :class:`LogStoreContract` (sync ``load``/``write``/... methods) and/or
:class:`AsyncLogStoreContract` (``a``-methods, each test is one ``asyncio.run``) in a test module
pytest collects, and define ``make_store(self)``, returning a new, empty store for each test::

    from rollmem.stores import MemoryStore
    from rollmem.testing import AsyncLogStoreContract, LogStoreContract

    class TestMyStore(LogStoreContract):
        def make_store(self) -> MemoryStore:
            return MemoryStore()

Each scenario is written once and runs with blocking calls or awaited ones. Server backends get
:func:`service_url` (skip, or fail under ``ROLLMEM_REQUIRE_SERVICES=1``); :func:`create`,
:func:`append`, :func:`entry` and :func:`texts` build and read log writes in your own tests.
"""

from __future__ import annotations

from . import _extras

_extras.import_extra("pytest", package="pytest", extra="testing", feature="rollmem.testing")

import asyncio  # noqa: E402
import functools  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Generator, Iterator  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from typing import Any, Callable, ClassVar, NamedTuple, Optional, TypeVar, Union  # noqa: E402

import pytest  # noqa: E402

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
from ._flow import arun, run  # noqa: E402
from .errors import ConflictError, StoreUnavailableError  # noqa: E402
from .stores import Head, LogEntry, LogWrite, StoredLog  # noqa: E402
from .stores.rules import apply_write  # noqa: E402

__all__ = [
    "AsyncLogStoreContract",
    "FakeLLM",
    "LogStoreContract",
    "RecordingCounter",
    "RecordingSummarizer",
    "SummarizerDown",
    "append",
    "assert_anthropic_accepts",
    "assert_nothing_lost",
    "assert_openai_accepts",
    "assert_responses_accepts",
    "assert_summarized_once",
    "async_memory_sessions",
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


def _seeded(function: _F) -> _F:
    """Run a test once per seed 0..24 (``pytest.mark.parametrize``, typed)."""
    parametrize: Callable[[_F], _F] = pytest.mark.parametrize("seed", range(25))
    return parametrize(function)


class _Call(NamedTuple):
    method: str
    args: tuple[Any, ...]


class _Pause(NamedTuple):
    """A step sleeping ``seconds`` (``time.sleep`` or ``asyncio.sleep``)."""

    seconds: float


Step = Union[_Call, _Pause]
Scenario = Generator[Step, Any, None]


def _call(method: str, *args: Any) -> _Call:
    """A step calling ``store.method(*args)`` (or ``await store.amethod(*args)``)."""
    return _Call(method, args)


def _perform(store: Any, step: Step) -> Any:
    """Perform a step with the store's blocking methods."""
    if isinstance(step, _Pause):
        return time.sleep(step.seconds)
    return getattr(store, step.method)(*step.args)


async def _aperform(store: Any, step: Step) -> Any:
    """Perform a step with the store's ``a``-methods."""
    if isinstance(step, _Pause):
        return await asyncio.sleep(step.seconds)
    return await getattr(store, "a" + step.method)(*step.args)


async def _arun_then_close(store: Any, steps: Scenario) -> None:
    try:
        await arun(steps, functools.partial(_aperform, store))
    finally:
        await store.aclose()


def _scenario(method: Callable[[Any], Scenario]) -> Callable[[Any, Any], None]:
    """Turn a scenario method into a test method that takes the ``store`` fixture."""

    def test(self: _LogContract, store: Any) -> None:
        self.run(store, method(self))

    test.__name__ = method.__name__
    test.__qualname__ = method.__qualname__
    test.__doc__ = method.__doc__
    return test


ODD_IDS = ["alice", "with space", "quote'\"", "semi;colon", "colon:a:b", "star*?[x]", "ünï🌍", "x" * 500]


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
    def test_every_cost_a_memory_accepts_round_trips(self) -> Scenario:
        """0 to 2**63 - 1, a signed 64-bit column's range (larger costs are refused above)."""
        costs = (0, -1, 2**63 - 1)
        yield _call("write", "s", LogWrite("", tuple(entry("m", cost) for cost in costs), create=True))
        assert [e.cost for e in (yield _call("load", "s")).entries] == list(costs)

    @_scenario
    def test_a_closed_store_refuses_every_call(self) -> Scenario:
        """After ``close()`` (``aclose()``) every call raises ``StoreUnavailableError``, ``... is
        closed``, and opens nothing again; closing twice is harmless."""
        head = yield _call("write", "s", create("a"))
        yield _call("close")
        yield _call("close")
        for step in (
            _call("load", "s"),
            _call("write", "s", append(head, "b")),
            _call("delete", "s"),
            _call("ids"),
            _call("purge_expired"),
        ):
            with pytest.raises(StoreUnavailableError, match=r" is closed$"):
                yield step

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
        yield _Pause(self.ttl * 2)
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
        yield _Pause(self.ttl * 2)
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
                ValueError,
                "change.entries[0].cost must be < 2**63, got 9223372036854775808",
                ("s", LogWrite("", (LogEntry("{}", 2**63),), create=True)),
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


def _random_write(rng: random.Random, kind: str, number: int, current: Any) -> LogWrite:
    """A write of ``kind`` (create, append, fold or rewrite; right or stale expectations) drawn
    from ``rng`` for the session ``current`` holds in the model (``None``: none)."""
    head = current[0] if current is not None else Head("gone", 1, "", 0, "c")
    new = tuple(
        entry(f"m{number}-{i}") for i in range(rng.randint(0, 2 if kind in ("fold", "rewrite") else 3))
    )
    if kind == "create":
        return LogWrite("", new, summary="", counter="c", create=True)
    if kind == "append":
        return LogWrite(head.incarnation, new, counter=head.counter if rng.random() < 0.5 else "other")
    if kind == "fold":
        cut, stale, keep_first = rng.randint(0, 4), rng.choice([0, 0, 1]), rng.random() < 0.5
        live = [] if current is None else [e.seq for e in current[1]]
        cut_seq = live[min(cut, len(live) - 1)] if live else 0
        return LogWrite(
            head.incarnation,
            new[:1],
            expected_revision=head.revision + stale,
            summary=f"s{number}",
            cut=cut_seq,
            keep=tuple(live[:1]) if keep_first else (),
            counter="c",
        )
    return LogWrite(
        head.incarnation,
        new,
        expected_revision=head.revision,
        expected_tail=head.tail + rng.choice([0, 0, 1]),
        summary=f"r{number}",
        replace=True,
        counter=None if number % 2 else "c",
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


class LogStoreContract(_LogContract):
    """The log contract through the blocking methods (the store closed after each test), plus
    threads racing on one session."""

    @_fixture
    def store(self) -> Iterator[Any]:
        store = self.make_store()
        try:
            yield store
        finally:
            store.close()

    def run(self, store: Any, steps: Scenario) -> None:
        run(steps, functools.partial(_perform, store))

    def test_with_block_closes_the_store(self) -> None:
        """``with store:`` gives the store and closes it at the end; closing again is harmless."""
        with self.make_store() as store:
            store.write("s", create("a"))
            assert texts(store.load("s")) == ["a"]
        store.close()

    @_seeded
    def test_random_writes_match_the_reference_semantics(self, store: Any, seed: int) -> None:
        """Up to 25 creates, appends, folds and rewrites (right or stale expectations), deletes and
        loads on four session keys agree with ``apply_write`` on a dict (25 fixed seeds)."""
        rng = random.Random(seed)
        namespace = f"{uuid.uuid4().hex}/"
        model: dict[str, tuple[Head, list[LogEntry]]] = {}
        for number in range(1, rng.randint(0, 25) + 1):
            kind, key = (
                rng.choice(["create", "append", "fold", "rewrite", "delete", "load"]),
                rng.choice("ab"),
            )
            session_id = namespace + rng.choice([key, f"{key}/b", "ab"])
            current = model.get(session_id)
            if kind == "delete":
                assert store.delete(session_id) is (model.pop(session_id, None) is not None)
            elif kind == "load":
                stored = store.load(session_id)
                assert (stored is None) is (current is None)
                if stored is not None and current is not None:
                    assert stored.head == current[0]
                    assert _parsed(stored.entries) == _parsed(current[1]), (
                        "equal JSON (a store may reformat it)"
                    )
            else:
                _model_write(model, store, session_id, _random_write(rng, kind, number, current))
        assert store.ids(namespace) == sorted(model)

    def test_threads_appending_and_folding_lose_and_duplicate_nothing(self, store: Any) -> None:
        """Appenders never retry; folders (compare-and-set) retry until they win; every message
        ends folded exactly once or still in the log."""
        head = store.write("s", create())
        appenders, folders, count = 4, 2, 25
        folded: list[list[str]] = []

        def appender(index: int) -> None:
            for number in range(count):
                store.write("s", append(head, f"w{index}-{number}"))

        def folder() -> None:
            for _ in range(count // 5):
                while True:
                    stored = store.load("s")
                    cut = stored.entries[len(stored.entries) // 2].seq if stored.entries else 0
                    fold = LogWrite(
                        head.incarnation, expected_revision=stored.head.revision, cut=cut, counter="c"
                    )
                    try:
                        store.write("s", fold)
                    except ConflictError:
                        continue
                    folded.append([json.loads(e.message)["content"] for e in stored.entries if e.seq < cut])
                    break

        with ThreadPoolExecutor(appenders + folders) as pool:
            work = [pool.submit(appender, i) for i in range(appenders)]
            work += [pool.submit(folder) for _ in range(folders)]
        for done in work:
            done.result()  # raises what the thread raised
        seen = [text for batch in folded for text in batch] + texts(store.load("s"))
        assert sorted(seen) == sorted(f"w{i}-{n}" for i in range(appenders) for n in range(count))


class AsyncLogStoreContract(_LogContract):
    """The log contract through the ``a``-methods, each test one ``asyncio.run`` ending with ``aclose()``."""

    @_fixture
    def store(self) -> Any:
        return self.make_store()

    def run(self, store: Any, steps: Scenario) -> None:
        asyncio.run(_arun_then_close(store, steps))

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

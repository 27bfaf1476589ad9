"""Shared test fixtures: token counters and summarizers that record what they were given.

Every fixture returns a fresh object. The summarizers build a deterministic summary that
accumulates the folded messages, so a test can prove each message was folded exactly once::

    rec = RecordingSummarizer()
    rec("", [Message("user", "a"), Message("user", "b")])  # -> "a|b"
    rec("a|b", [Message("user", "c")])                      # -> "a|b|c"

Fixtures: ``char_counter`` (``len(text)``), ``word_counter`` (``len(text.split())``),
``recorder`` / ``make_recorder`` (sync), ``async_recorder`` / ``make_async_recorder``
(pass ``rec.summarize`` to the async classes), ``failing_summarizer``, and ``make_gate`` /
``make_async_gate`` (summarizers that block until released, to act while a fold is in flight).
``traced``: an application that traces with OpenTelemetry (a global tracer provider and an
in-memory exporter, unset after the test; skips without ``opentelemetry-sdk``).
``async def test_...`` functions run in a fresh event loop (``asyncio.run``), through the
:func:`pytest_pyfunc_call` hook below: no plugin needed.
Hypothesis state machines cannot take fixtures: build them inside a test that receives
``make_recorder`` / ``make_async_recorder`` (factories returning new recorders).
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional

import pytest
from hypothesis import HealthCheck, settings

from rollmem.message import Message

# The store conformance suite lives in src (a public test kit): pytest rewrites its asserts too.
pytest.register_assert_rewrite("rollmem.testing")

# CI machines are shared and slow at times: a property test fails on a wrong answer, never on time.
settings.register_profile("rollmem", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rollmem")

SEPARATOR = "|"


#: Words in a skip reason that mean "a test server is missing": ``source .ci/services`` starts them.
SERVER_WORDS = ("server", "ROLLMEM_TEST_")


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason[len("Skipped: ") :] if reason.startswith("Skipped: ") else reason


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Skipped tests summarized once, by reason (one line per family, not one per test), with how to
    enable the server families."""
    skipped = [
        r
        for r in terminalreporter.stats.get("skipped", [])
        if isinstance(r, (pytest.TestReport, pytest.CollectReport))
    ]
    if not skipped:
        return
    families: dict[str, int] = {}
    for report in skipped:
        reason = _skip_reason(report)
        families[reason] = families.get(reason, 0) + 1
    terminalreporter.section(f"{len(skipped)} skipped, in {len(families)} families")
    for reason, count in sorted(families.items(), key=lambda item: (-item[1], item[0])):
        terminalreporter.write_line(f"{count:>5}  {reason}")
    if any(word in reason for reason in families for word in SERVER_WORDS):
        terminalreporter.write_line(
            "To run the server tests: `source .ci/services` (installs and starts Redis, Redis Cluster, "
            "PostgreSQL and PgBouncer on loopback), then `pytest` again."
        )
    terminalreporter.write_line('Optional packages: pip install -e ".[dev,EXTRA]" (see pyproject.toml).')


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "extra(name): the test needs the packages of pyproject.toml's extra NAME (tests/_optional.py)",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.extra(name)``: skip unless the extra is installed (``tests/_optional.py``)."""
    from _optional import check_marks  # here: processes the tests start import this file as tests.conftest

    check_marks(item)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Optional[bool]:
    """Run ``async def`` test functions with ``asyncio.run`` (one fresh loop per test)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**arguments))
    return True


class SummarizerDown(RuntimeError):
    """What the failing summarizers raise."""


def fold_text(summary: str, messages: Sequence[Message]) -> str:
    """The summary the recorders return: ``summary`` then each message's content, ``|``-separated."""
    parts = [summary] if summary else []
    parts.extend(m.content for m in messages)
    return SEPARATOR.join(parts)


class RecordingSummarizer:
    """A ``summarize_fn`` that records every call and returns :func:`fold_text`.

    - ``calls``: ``(summary, messages)`` of every call, in call order, recorded when the call starts.
    - ``results``: per call, what it returned (``None`` while running, and for a failed call).
    - ``finished`` / ``failures``: how many calls returned or raised so far.
    - ``folded``: the messages of the successful calls, concatenated.
    - set ``fail = True`` to make calls raise :class:`SummarizerDown` (still recorded).
    - ``delay`` seconds are slept inside each call (for thread tests).
    """

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[tuple[str, tuple[Message, ...]]] = []
        self.results: list[str | None] = []
        self.finished = 0
        self.failures = 0
        self.fail = False
        self.delay = delay
        self._lock = threading.Lock()

    def _start(self, summary: str, messages: Sequence[Message]) -> int:
        with self._lock:
            self.calls.append((summary, tuple(messages)))
            self.results.append(None)
            return len(self.calls) - 1

    def _finish(self, index: int) -> str:
        with self._lock:
            self.finished += 1
            if self.fail:
                self.failures += 1
                raise SummarizerDown("summarizer down")
            summary, batch = self.calls[index]
            result = fold_text(summary, batch)
            self.results[index] = result
            return result

    def __call__(self, summary: str, messages: Sequence[Message]) -> str:
        index = self._start(summary, messages)
        if self.delay:
            time.sleep(self.delay)
        return self._finish(index)

    @property
    def in_flight(self) -> int:
        return len(self.calls) - self.finished

    @property
    def texts(self) -> list[tuple[str, list[str]]]:
        """``calls`` with each message replaced by its content: ``[("", ["a", "b"]), ...]``."""
        return [(summary, [m.content for m in batch]) for summary, batch in self.calls]

    @property
    def folded(self) -> list[Message]:
        return [
            m for (_, batch), result in zip(self.calls, self.results) if result is not None for m in batch
        ]


class AsyncRecordingSummarizer(RecordingSummarizer):
    """The coroutine twin: pass ``rec.summarize`` (a coroutine function) to the async classes.

    ``summarize`` yields to the loop ``yields`` times (and sleeps ``delay``) between start and finish.
    """

    def __init__(self, delay: float = 0.0, yields: int = 1) -> None:
        super().__init__(delay)
        self.yields = yields

    async def summarize(self, summary: str, messages: Sequence[Message]) -> str:
        index = self._start(summary, messages)
        for _ in range(self.yields):
            await asyncio.sleep(0)
        if self.delay:
            await asyncio.sleep(self.delay)
        return self._finish(index)


GATE_TIMEOUT = 10.0


class GatedSummarizer(RecordingSummarizer):
    """A recorder whose calls block until ``release`` is set, so a test can act while a fold is
    in flight; ``entered`` is set when a call starts. Raises ``TimeoutError`` if never released."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, summary: str, messages: Sequence[Message]) -> str:
        index = self._start(summary, messages)
        self.entered.set()
        if not self.release.wait(GATE_TIMEOUT):
            raise TimeoutError("the gate was never released")
        return self._finish(index)


class AsyncGatedSummarizer(RecordingSummarizer):
    """The coroutine twin of :class:`GatedSummarizer` (pass ``gate.summarize``). Build it inside the
    running loop. Also counts ``cancelled`` calls and the most calls running at once (``max_active``)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = 0
        self.active = 0
        self.max_active = 0

    async def summarize(self, summary: str, messages: Sequence[Message]) -> str:
        index = self._start(summary, messages)
        self.entered.set()
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            self.finished += 1
            raise
        finally:
            self.active -= 1
        return self._finish(index)


def char_count(text: str) -> int:
    return len(text)


def word_count(text: str) -> int:
    return len(text.split())


class CountingWords:
    """:func:`word_count` with a stable identity (``rollmem_identity``, so stored costs are trusted
    after a restart) that records each text it counts: ``texts`` in order, ``calls`` their number."""

    rollmem_identity = "test-words"

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, text: str) -> int:
        self.texts.append(text)
        return word_count(text)

    @property
    def calls(self) -> int:
        return len(self.texts)


@pytest.fixture
def char_counter() -> Callable[[str], int]:
    """A token counter where one character is one token."""
    return char_count


@pytest.fixture
def word_counter() -> Callable[[str], int]:
    """A token counter where one whitespace-separated word is one token (rollmem's default rule)."""
    return word_count


@pytest.fixture
def recorder() -> RecordingSummarizer:
    """A fresh :class:`RecordingSummarizer`."""
    return RecordingSummarizer()


@pytest.fixture
def make_recorder() -> Callable[..., RecordingSummarizer]:
    """A factory: ``make_recorder(delay=0.0)`` returns a new :class:`RecordingSummarizer`."""
    return RecordingSummarizer


@pytest.fixture
def async_recorder() -> AsyncRecordingSummarizer:
    """A fresh :class:`AsyncRecordingSummarizer`; pass ``async_recorder.summarize``."""
    return AsyncRecordingSummarizer()


@pytest.fixture
def make_async_recorder() -> Callable[..., AsyncRecordingSummarizer]:
    """A factory: ``make_async_recorder(delay=0.0, yields=1)``."""
    return AsyncRecordingSummarizer


@pytest.fixture
def make_gate() -> Callable[[], GatedSummarizer]:
    """A factory of :class:`GatedSummarizer` (a summarizer that blocks until released)."""
    return GatedSummarizer


@pytest.fixture
def make_async_gate() -> Callable[[], AsyncGatedSummarizer]:
    """A factory of :class:`AsyncGatedSummarizer`; call it inside the running event loop."""
    return AsyncGatedSummarizer


@pytest.fixture
def failing_summarizer() -> RecordingSummarizer:
    """A :class:`RecordingSummarizer` with ``fail = True``: every call raises :class:`SummarizerDown`."""
    rec = RecordingSummarizer()
    rec.fail = True
    return rec


@pytest.fixture(autouse=True)
def _close_leftover_event_loop() -> Iterator[None]:
    """Some frameworks' sync entry points (pydantic-ai's ``Agent.run_sync``) leave an open event
    loop set on the thread: close it after each test, so no ResourceWarning fires in a later one."""
    yield
    policy = asyncio.get_event_loop_policy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            loop = policy.get_event_loop()
    except RuntimeError:  # none set
        return
    if not loop.is_running():
        loop.close()
        policy.set_event_loop(None)


class Traced:
    """An application that traces with OpenTelemetry: its tracer provider, set globally (unless
    ``install=False``: OpenTelemetry imported, no provider set), an in-memory exporter and a
    tracer of its own. Skips the test without ``opentelemetry-sdk``."""

    def __init__(self, install: bool = True) -> None:
        sdk = pytest.importorskip("opentelemetry.sdk.trace")
        from opentelemetry import trace
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter = InMemorySpanExporter()
        self.provider = sdk.TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("app")
        if install:
            trace.set_tracer_provider(self.provider)
            assert trace.get_tracer_provider() is self.provider

    def spans(self, name: str) -> list[Any]:
        """The finished spans called ``name``, in the order they ended."""
        return [span for span in self.exporter.get_finished_spans() if span.name == name]


@pytest.fixture
def traced(request: pytest.FixtureRequest) -> Iterator[Traced]:
    """:class:`Traced` for one test (``@pytest.mark.parametrize("traced", [False], indirect=True)``
    for no provider); the provider is unset after it (see :func:`_unset_tracer_provider`)."""
    tracing = Traced(install=getattr(request, "param", True))
    yield tracing
    tracing.provider.shutdown()


@pytest.fixture(autouse=True)
def _unset_tracer_provider() -> Iterator[None]:
    """A test (or a docs example) that sets OpenTelemetry's global tracer provider sets it for
    itself only: every fold is a span while one is set. The reset is what OpenTelemetry's own test
    utilities do."""
    yield
    trace = sys.modules.get("opentelemetry.trace")
    if trace is not None and getattr(trace, "_TRACER_PROVIDER", None) is not None:
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, trace.Once()

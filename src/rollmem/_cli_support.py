"""What ``rollmem replay`` needs besides the memory: ``--summarizer SPEC`` loading and the progress bar.

- :func:`load_summarizer` turns ``MODULE:FUNCTION`` (your own ``summarize_fn``, sync or async) or
  ``openai:MODEL`` (:func:`~rollmem.summarizers.prompt_summarizer` around the ``openai`` package's
  chat completions) into a sync ``summarize_fn``; a spec that cannot be loaded raises
  :class:`SpecError`, and a failing call raises :class:`SummarizerFailed`, each with a one-line
  message;
- :class:`ProgressBar` redraws one ``\\r`` line on a terminal.

Standard library only; ``openai`` is imported when ``openai:MODEL`` is loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import os
import sys
from collections.abc import Awaitable, Iterator, Sequence
from typing import Any, Callable, Optional, TextIO, TypeVar

from . import _validate as v
from ._extras import import_extra
from .errors import InvalidStateError, MissingExtraError
from .memory import SummarizeFn, TokenCounter
from .message import Message
from .summarizers import prompt_summarizer

__all__ = ["ProgressBar", "SpecError", "SummarizerFailed", "load_summarizer"]

SPEC_FORMS = "none, extractive, MODULE:FUNCTION or openai:MODEL"
OPENAI_DEFAULT_KEY = "unused"
"""The API key sent when ``OPENAI_API_KEY`` is not set: local servers (Ollama, vLLM, llama.cpp) ignore it."""

_T = TypeVar("_T")


class SpecError(Exception):
    """A ``--summarizer`` spec that cannot be loaded; the message is one line."""


class SummarizerFailed(Exception):
    """A loaded summarizer raised or returned a non-``str``; the message is one line."""


def _reason(error: BaseException) -> str:
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def _dotted(text: str) -> bool:
    return all(part.isidentifier() for part in text.split("."))


@contextlib.contextmanager
def load_summarizer(spec: str, token_counter: TokenCounter, max_summary_tokens: int) -> Iterator[SummarizeFn]:
    """A sync ``summarize_fn`` for ``MODULE:FUNCTION`` or ``openai:MODEL``, valid inside the ``with``.

    ``MODULE`` is imported with the current directory first on ``sys.path`` (``PYTHONPATH`` is
    honoured by Python itself); ``FUNCTION`` may be a dotted attribute path. Coroutine functions
    (and callables returning awaitables) run on one event loop kept for the whole ``with``, so an
    async client created by your module keeps working between calls. ``openai:MODEL`` asks
    ``OpenAI().chat.completions.create(model=MODEL, ...)`` through
    :func:`~rollmem.summarizers.prompt_summarizer` (bounded to ``max_summary_tokens`` measured
    with ``token_counter``); the client reads ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``
    (default :data:`OPENAI_DEFAULT_KEY`). Raises :class:`SpecError`.
    """
    head, colon, tail = spec.partition(":")
    if colon and head == "openai":
        if not tail.strip():
            raise SpecError(f"--summarizer {spec}: the model name is missing (openai:MODEL)")
        with _openai_complete(spec, tail) as complete:
            yield _guarded(
                prompt_summarizer(
                    complete, max_summary_tokens=max_summary_tokens, token_counter=token_counter
                )
            )
        return
    if not (colon and head and tail and _dotted(head) and _dotted(tail)):
        raise SpecError(f"--summarizer {spec!r}: expected {SPEC_FORMS}")
    function = _import_function(spec, head, tail)
    loop = asyncio.new_event_loop()
    try:
        yield _guarded(function, loop)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def _import_function(spec: str, module_name: str, path: str) -> Callable[..., Any]:
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # not found, or the user's module raised while being imported
        missing = (error.name or "") if isinstance(error, ModuleNotFoundError) else ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise SpecError(
                f"--summarizer {spec}: no module named {missing!r} in the current directory or on PYTHONPATH"
            ) from None
        raise SpecError(f"--summarizer {spec}: importing {module_name} failed: {_reason(error)}") from None
    value: Any = module
    for part in path.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise SpecError(f"--summarizer {spec}: {module_name} has no attribute {path!r}") from None
    if not callable(value):
        raise SpecError(f"--summarizer {spec}: {path} is not callable (it is a {type(value).__name__})")
    return value  # type: ignore[no-any-return]


def _guarded(function: Callable[..., Any], loop: Optional[asyncio.AbstractEventLoop] = None) -> SummarizeFn:
    """``function`` as a sync ``summarize_fn`` whose failures are :class:`SummarizerFailed`; an
    awaitable it returns runs on ``loop``."""

    async def wait(awaitable: Awaitable[Any]) -> Any:
        return await awaitable

    def summarize(summary: str, messages: Sequence[Message]) -> str:
        try:
            result = function(summary, messages)
            if inspect.isawaitable(result):
                if loop is None:
                    raise TypeError("returned an awaitable")
                result = loop.run_until_complete(wait(result))
        except (Exception, SystemExit) as error:  # SystemExit too: it must not end the replay silently
            raise SummarizerFailed(f"the summarizer failed: {_reason(error)}") from error
        if not isinstance(result, str):
            raise SummarizerFailed(f"the summarizer returned {type(result).__name__}, expected str")
        try:
            return v.check_text(result, "summary")
        except InvalidStateError as error:
            raise SummarizerFailed(f"the summarizer returned a summary that is {error.problem}") from None

    return summarize


@contextlib.contextmanager
def _openai_complete(spec: str, model: str) -> Iterator[Callable[[str], str]]:
    try:
        feature = "--summarizer openai:MODEL"
        openai: Any = import_extra("openai", package="openai", extra="openai", feature=feature)
    except MissingExtraError as missing:
        raise SpecError(str(missing)) from None
    try:
        client = openai.OpenAI(api_key=os.environ.get("OPENAI_API_KEY") or OPENAI_DEFAULT_KEY)
    except Exception as error:  # e.g. a malformed OPENAI_BASE_URL
        raise SpecError(f"--summarizer {spec}: cannot create the OpenAI client: {_reason(error)}") from None

    def complete(prompt: str) -> str:
        response = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}])
        content = response.choices[0].message.content
        return content if isinstance(content, str) else ""

    try:
        yield complete
    finally:
        client.close()


class ProgressBar:
    """``replaying [#####.....] 12/40 messages, 2 folds`` redrawn in place (``\\r``) on ``stream``, a
    terminal; :meth:`close` erases it so the report starts on a clean line."""

    WIDTH = 30

    def __init__(self, stream: TextIO, total: int) -> None:
        self.stream = stream
        self.total = total
        self.done = 0
        self.folds = 0
        self._drawn = False

    def step(self, done: int, folds: int) -> None:
        """Redraw after ``done`` messages and ``folds`` folds."""
        self.done, self.folds = done, folds
        self._draw("")

    def around(self, summarize: SummarizeFn) -> SummarizeFn:
        """``summarize``, showing ``summarizing N messages...`` while it runs."""

        def summarizing(summary: str, messages: Sequence[Message]) -> str:
            self._draw(f", summarizing {v.plural(len(messages), 'message')}...")
            return summarize(summary, messages)

        return summarizing

    def _draw(self, note: str) -> None:
        total = self.total
        filled = self.WIDTH * self.done // total if total else self.WIDTH
        bar = "#" * filled + "." * (self.WIDTH - filled)
        done = f"{self.done}/{v.plural(total, 'message')}"
        self.stream.write(f"\rreplaying [{bar}] {done}, {v.plural(self.folds, 'fold')}{note}\x1b[K")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Erase the line (when anything was drawn)."""
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

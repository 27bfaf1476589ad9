"""The pre-log layouts, quarantined: reading them, and moving a session out of them.

Before 0.7 every store kept one JSON document per session, the memory's ``to_dict()``
(``version``, ``summary``, ``buffer``), sometimes with a ``"log"`` object written by
:class:`~rollmem.stores.WholeStateLog` (incarnation, revision, tail, counter, each entry's
sequence number and cost). The bundled log stores still read such documents where older
releases left them (SQLite's and PostgreSQL's version-1 table, Redis's ``{id}:state`` hash and
``prefix + id`` hash) until the session is written or migrated (``rollmem migrate STORE_URL``).
This module holds everything about them that is not storage: how a document reads
(:func:`read_state`, errors naming the field path), the incarnation a document without a log
reads as (:data:`LEGACY_INCARNATION`) and the one rule for a write that stores a session whole
(:func:`write_whole`: a create, a rewrite, or the first write to a session still in an old
layout). The read-through is removed in 1.0.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Optional

from .. import _validate as v
from ..errors import InvalidStateError
from ._protocol import Head, LogEntry, LogWrite
from .rules import apply_write, shown

__all__ = ["LEGACY_INCARNATION", "described", "read_state", "write_whole"]

LEGACY_INCARNATION = "legacy"
"""The incarnation of a session read from a document without a ``"log"`` (its costs unknown)."""


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _ints(values: list[Any], path: str) -> list[int]:
    for index, value in enumerate(values):
        if not v.is_int(value):
            raise InvalidStateError(v.join(path, index), f"expected int, got {v.type_name(value)}")
    return values


def _read(data: object) -> tuple[Head, list[LogEntry]]:
    document = v.expect_mapping(data, "")
    summary = v.get_str(document, "summary", "")
    buffer = v.get_list(document, "buffer", "")
    texts = [_dump(item) for item in buffer]
    if document.get("log") is None:
        head = Head(LEGACY_INCARNATION, 1, summary, len(texts), None)
        return head, [LogEntry(text, -1, seq) for seq, text in enumerate(texts)]
    log = v.get_mapping(document, "log", "")
    numbers = {}
    for name in ("seqs", "costs"):
        numbers[name] = _ints(v.get_list(log, name, "log"), f"log.{name}")
        if len(numbers[name]) != len(texts):
            problem = f"expected {len(texts)} numbers, one per buffer item, got {len(numbers[name])}"
            raise InvalidStateError(f"log.{name}", problem)
    head = Head(
        v.get_str(log, "incarnation", "log"),
        v.get_int(log, "revision", "log"),
        summary,
        v.get_int(log, "tail", "log"),
        v.get_optional_str(log, "counter", "log"),
    )
    entries = [LogEntry(*fields) for fields in zip(texts, numbers["costs"], numbers["seqs"])]
    return head, entries


def read_state(session_id: str, text: str) -> tuple[Head, list[LogEntry]]:
    """The head and entries of a session kept as one JSON document (with or without a
    ``"log"``); else :class:`~rollmem.errors.InvalidStateError` whose ``path`` names the bad
    field and whose message names the session."""
    try:
        return _read(json.loads(text))
    except InvalidStateError as exc:
        error = exc
    except (ValueError, RecursionError) as exc:
        error = InvalidStateError(
            "", f"not JSON ({exc})" if isinstance(exc, ValueError) else "nested too deeply"
        )
    wrapped = InvalidStateError(error.path, error.problem)
    wrapped.args = (f"session {shown(session_id)}: stored state cannot be read as a session log: {error}",)
    raise wrapped from error


def described(error: InvalidStateError) -> str:
    """The field path and problem of a :func:`read_state` error, without the session."""
    return f"{error.path}: {error.problem}" if error.path else error.problem


def write_whole(
    session_id: str, head: Optional[Head], entries: list[LogEntry], change: LogWrite
) -> tuple[Head, list[LogEntry]]:
    """The new head and every entry to store when ``change`` stores the session whole: a create
    or rewrite (``entries`` are dropped), or any write to a session still in an old layout, read
    as ``head`` and ``entries`` (those :func:`~rollmem.stores.rules.apply_write` keeps stay,
    with their sequence numbers and costs). Raises the write's ``ConflictError``."""
    return apply_write(session_id, head, entries, change, uuid.uuid4().hex)

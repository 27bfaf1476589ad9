"""Keyword recall over messages that left the buffer.

``RecallIndex.add`` fits ``on_evict``: ``RollingMemory(..., on_evict=index.add)`` archives every
evicted message, and ``index.recall("teal", "korea")`` finds them again.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import _validate as v
from .errors import InvalidStateError
from .message import Message, message_from_dict

__all__ = ["RecallHit", "RecallIndex"]

_WORD = re.compile(r"\w+")
_VERSION = 1


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


@dataclass(frozen=True)
class RecallHit:
    """An archived message and the keywords it matched, in the order they were asked for."""

    message: Message
    keywords: tuple[str, ...]


class RecallIndex:
    """An archive of evicted messages with an inverted index of their words.

    A keyword matches a message that contains it as a whole word, case-insensitively (a keyword
    of several words matches when all of them are present). Lookups cost what the matches cost,
    not what the archive holds. Thread-safe.
    """

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._postings: dict[str, list[int]] = {}
        self._lock = threading.Lock()

    def add(self, messages: Sequence[Message]) -> None:
        """Archive messages (oldest first); usable as a memory's ``on_evict``."""
        batch = list(messages)
        for index, message in enumerate(batch):
            if not isinstance(message, Message):
                raise v.type_error(f"messages[{index}]", "Message", message)
        with self._lock:
            for message in batch:
                self._index(message)

    def _index(self, message: Message) -> None:
        position = len(self._messages)
        self._messages.append(message)
        for word in set(_words(message.token_text())):
            self._postings.setdefault(word, []).append(position)

    def recall(self, *keywords: str) -> list[RecallHit]:
        """The archived messages matching any keyword, oldest first, each with what it matched."""
        wanted: list[tuple[str, list[str]]] = []
        for keyword in keywords:
            if not isinstance(keyword, str):
                raise v.type_error("keyword", "str", keyword)
            parts = _words(keyword)
            if parts:
                wanted.append((keyword, parts))
        with self._lock:
            matched: dict[int, list[str]] = {}
            for keyword, parts in wanted:
                lists = [self._postings.get(part, ()) for part in parts]
                shortest = min(lists, key=len)
                others = [set(found) for found in lists if found is not shortest]
                for position in shortest:
                    if all(position in other for other in others):
                        found_for = matched.setdefault(position, [])
                        if keyword not in found_for:
                            found_for.append(keyword)
            return [RecallHit(self._messages[p], tuple(matched[p])) for p in sorted(matched)]

    @property
    def messages(self) -> list[Message]:
        """Everything archived, oldest first (a copy)."""
        with self._lock:
            return list(self._messages)

    def __len__(self) -> int:
        return len(self._messages)

    def to_dict(self) -> dict[str, Any]:
        """``{"version": 1, "messages": [message dicts]}``."""
        with self._lock:
            return {"version": _VERSION, "messages": [m.to_dict() for m in self._messages]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecallIndex:
        """Rebuild an index from :meth:`to_dict` output; errors name the bad field."""
        data = v.expect_mapping(data, "")
        version = v.get_int(data, "version", "")
        if version != _VERSION:
            raise InvalidStateError("version", f"unsupported recall index version {version}")
        items = v.get_list(data, "messages", "")
        messages = [message_from_dict(item, f"messages[{i}]") for i, item in enumerate(items)]
        index = cls()
        for message in messages:
            index._index(message)
        return index

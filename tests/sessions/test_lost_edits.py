"""Nothing silently dropped: an in-place edit whose write loses raises ``ConflictError`` and
writes nothing, on the create and rewrite paths too; NUL in summaries and messages round-trips
on every store (the one rule: a summary holding NUL is stored escaped, see ``_write_plan``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from rollmem.counters import chars, words
from rollmem.errors import ConflictError
from rollmem.memory import AsyncRollingMemory, BufferMemory, RollingMemory
from rollmem.message import Message
from rollmem.sessions import AsyncSessions, Sessions
from rollmem.summarizers import extractive_summarizer

from ._support import stored_log
from .conftest import Backend


def contents(memory: object) -> list[str]:
    return [message.content for message in memory.buffer]  # type: ignore[attr-defined]


def test_an_in_place_append_to_a_new_session_that_loses_raises(backend: Backend) -> None:
    first = Sessions(backend.store(), lambda: RollingMemory(800))
    second = Sessions(backend.store(), lambda: RollingMemory(800))

    def note() -> None:
        with first.open("room-1") as memory:
            memory.buffer.append(Message("system", "moderation note"))
            with second.open("room-1") as other:
                other.add_user_message("hi all")

    with pytest.raises(ConflictError, match="edited buffer in place"):
        note()
    assert contents(second.get("room-1")) == ["hi all"]
    first.update("room-1", lambda memory: memory.buffer.append(Message("system", "moderation note")))
    assert contents(second.get("room-1")) == ["hi all", "moderation note"]


def test_a_redaction_over_costs_of_another_counter_that_loses_raises(backend: Backend) -> None:
    by_chars = Sessions(backend.store(), lambda: RollingMemory(800, token_counter=chars()))
    by_words = Sessions(backend.store(), lambda: RollingMemory(800, token_counter=words))
    with by_chars.open("s") as memory:
        memory.add_user_message("password is hunter2")

    def redact() -> None:
        with by_words.open("s") as memory:
            del memory.buffer[0]
            with by_chars.open("s") as other:
                other.add_user_message("ok")

    with pytest.raises(ConflictError, match="edited buffer in place"):
        redact()
    assert contents(by_chars.get("s")) == ["password is hunter2", "ok"]  # nothing written
    by_words.update("s", lambda memory: memory.buffer.pop(0))
    assert contents(by_chars.get("s")) == ["ok"]


def test_an_in_place_edit_that_wins_is_saved(backend: Backend) -> None:
    by_chars = Sessions(backend.store(), lambda: RollingMemory(800, token_counter=chars()))
    by_words = Sessions(backend.store(), lambda: RollingMemory(800, token_counter=words))
    with by_chars.open("s") as memory:
        memory.add_user_message("password is hunter2")
        memory.add_user_message("ok")
    with by_words.open("s") as memory:
        del memory.buffer[0]
    with by_words.open("t") as memory:
        memory.buffer.append(Message("system", "note"))
    assert contents(by_chars.get("s")) == ["ok"]
    assert contents(by_chars.get("t")) == ["note"]


def join_contents(summary: str, messages: Sequence[Message]) -> str:
    return "|".join([summary, *(m.content for m in messages)])


def test_nul_in_summaries_and_messages_round_trips(backend: Backend) -> None:
    sessions = Sessions(backend.store(), lambda: RollingMemory(5, join_contents, token_counter=chars(1)))
    texts = ["a\x00b", "\x00", "c\x00", "\ufdd0d", "e", "f\x00"]
    for text in texts:  # each turn loads what the last one saved, then folds again
        with sessions.open("s") as memory:
            memory.add_user_message(text)
    stored = sessions.get("s")
    assert stored is not None
    assert "\x00" in stored.summary
    assert stored.summary.split("|")[1:] + contents(stored) == texts
    log = stored_log(backend.store(), "s")
    assert log is not None
    assert "\x00" not in log.head.summary  # stored escaped, never raw


def test_nul_from_the_extractive_summarizer_never_bricks_a_session(backend: Backend) -> None:
    summarize = extractive_summarizer()
    sessions = Sessions(backend.store(), lambda: RollingMemory(8, summarize, token_counter=chars(1)))
    for text in ["zero\x00one", "two three", "four", "five six"]:
        with sessions.open("s") as memory:
            memory.add_user_message(text)
    memory = sessions.get("s")
    assert memory is not None
    assert "\x00" in memory.summary
    assert contents(memory)[-1] == "five six"


def test_a_summary_with_nul_round_trips_through_async_sessions(backend: Backend) -> None:
    async def main() -> None:
        sessions = AsyncSessions(
            backend.store(), lambda: AsyncRollingMemory(3, join_contents, token_counter=chars(1))
        )
        for text in ["a\x00", "b", "c"]:
            async with sessions.open("s") as memory:
                await memory.add_user_message(text)
        stored = await AsyncSessions(backend.store(), BufferMemory).get("s")
        assert stored is not None
        assert stored.summary == "|a\x00"

    backend.run(main)

"""rollmem.recall.RecallIndex: an archive of evicted messages searchable by keyword."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rollmem import RollingMemory
from rollmem.errors import InvalidStateError, StateTypeError
from rollmem.message import Message
from rollmem.recall import RecallHit, RecallIndex


def test_usable_as_on_evict() -> None:
    index = RecallIndex()
    mem = RollingMemory(max_tokens=3, on_evict=index.add)
    mem.add_user_message("my favourite colour is teal")
    mem.add_assistant_message("noted")
    mem.add_user_message("I lived in Korea")
    mem.add_assistant_message("ok")
    teal, korea = Message("user", "my favourite colour is teal"), Message("user", "I lived in Korea")
    assert index.messages == [teal, Message("assistant", "noted"), korea]
    assert mem.buffer == [Message("assistant", "ok")]
    assert index.recall("teal", "korea") == [RecallHit(teal, ("teal",)), RecallHit(korea, ("korea",))]


def test_whole_words_case_insensitive_oldest_first() -> None:
    index = RecallIndex()
    index.add(
        [
            Message("user", "TEAL, obviously."),
            Message("user", "to steal teals"),
            Message("assistant", "Seoul is in South Korea; teal is a colour"),
            Message("user", "nothing here"),
        ]
    )
    hits = index.recall("teal", "Korea")
    assert [h.message.content for h in hits] == [
        "TEAL, obviously.",
        "Seoul is in South Korea; teal is a colour",
    ]
    assert hits[0].keywords == ("teal",)
    assert hits[1].keywords == ("teal", "Korea")
    assert index.recall("steal")[0].message.content == "to steal teals"
    assert index.recall("colours") == []
    assert index.recall() == []


def test_messages_lists_the_archive_in_order_and_is_a_copy() -> None:
    index = RecallIndex()
    index.add([Message("user", "a")])
    index.add([Message("user", "b"), Message("user", "c")])
    listed = index.messages
    assert [m.content for m in listed] == ["a", "b", "c"]
    listed.clear()
    assert len(index.messages) == 3


def test_add_validates_the_whole_batch_first() -> None:
    index = RecallIndex()
    with pytest.raises(TypeError, match=r"messages\[1\]"):
        index.add([Message("user", "a"), "b"])  # type: ignore[list-item]
    assert index.messages == []


def test_recall_rejects_non_str_keywords() -> None:
    with pytest.raises(TypeError, match="keyword"):
        RecallIndex().recall(3)  # type: ignore[arg-type]


def test_round_trip_rebuilds_the_index() -> None:
    index = RecallIndex()
    index.add(
        [Message("user", "teal walls", id="1", pinned=False), Message("tool", "korea", tool_call_id="c")]
    )
    data = json.loads(json.dumps(index.to_dict()))
    loaded = RecallIndex.from_dict(data)
    assert loaded.messages == index.messages
    assert loaded.recall("korea") == index.recall("korea") == [RecallHit(index.messages[1], ("korea",))]
    assert loaded.recall("WALLS")[0].message.id == "1"


@pytest.mark.parametrize(
    ("data", "error", "text"),
    [
        ([], StateTypeError, "expected a mapping, got list"),
        ({"messages": []}, InvalidStateError, "version: missing required key"),
        (
            {"version": 1, "messages": [{"role": "user"}]},
            InvalidStateError,
            "messages[0].content: missing required key",
        ),
        ({"version": 1, "messages": "x"}, StateTypeError, "messages: expected a list, got str"),
    ],
)
def test_from_dict_errors_name_the_field(data: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error) as info:
        RecallIndex.from_dict(data)
    assert str(info.value) == text


def test_from_dict_rejects_other_versions() -> None:
    with pytest.raises(InvalidStateError) as info:
        RecallIndex.from_dict({"version": 99, "messages": []})
    assert info.value.path == "version"
    assert "99" in str(info.value)


class _Watched(Message):
    """A message that counts how often its text is read after ``reads`` is switched on."""

    reads: list[int] = []  # noqa: RUF012

    def __getattribute__(self, name: str) -> Any:
        if name in ("content", "token_text", "tool_calls", "__str__") and _Watched.reads:
            _Watched.reads[0] += 1
        return super().__getattribute__(name)


def test_lookup_does_not_scan_the_archive() -> None:
    index = RecallIndex()
    index.add([_Watched("user", f"filler message number {i}") for i in range(5000)])
    index.add([_Watched("user", "the rare word zanzibar")])
    _Watched.reads.append(0)
    try:
        hits = index.recall("zanzibar")
        reads = _Watched.reads[0]
    finally:
        _Watched.reads.clear()
    assert [h.message.content for h in hits] == ["the rare word zanzibar"]
    assert reads <= 5, reads

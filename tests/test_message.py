from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from typing import Any

import pytest

import rollmem.message as message_module
from rollmem.errors import InvalidStateError, StateTypeError
from rollmem.message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall, message_from_dict


def test_role_constants() -> None:
    assert (USER, ASSISTANT, SYSTEM, TOOL) == ("user", "assistant", "system", "tool")
    assert sorted(message_module.__all__) == [
        "ASSISTANT",
        "Message",
        "SYSTEM",
        "TOOL",
        "ToolCall",
        "USER",
        "message_from_dict",
    ]


# --- ToolCall ---------------------------------------------------------------------------------


def test_tool_call_defaults_and_dict() -> None:
    call = ToolCall("c1", "search")
    assert call.arguments == ""
    assert call.to_dict() == {"id": "c1", "name": "search", "arguments": ""}
    assert ToolCall.from_dict({"id": "c1", "name": "search"}) == call
    full = ToolCall("c2", "f", '{"q": 1}')
    assert ToolCall.from_dict(full.to_dict()) == full


def test_tool_call_is_frozen_and_hashable() -> None:
    call = ToolCall("c1", "f", "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.name = "g"  # type: ignore[misc]
    assert hash(call) == hash(ToolCall("c1", "f", "x"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "f"}, "id: missing required key"),
        ({"id": 1, "name": "f"}, "id: expected str, got int"),
        ({"id": "c", "name": "f", "arguments": {}}, "arguments: expected str, got dict"),
        ([], "expected a mapping, got list"),
    ],
)
def test_tool_call_from_dict_errors(data: Any, message: str) -> None:
    with pytest.raises(InvalidStateError) as info:
        ToolCall.from_dict(data)
    assert str(info.value) == message


def test_tool_call_rejects_non_str_fields() -> None:
    with pytest.raises(TypeError, match="name"):
        ToolCall("c", 3)  # type: ignore[arg-type]


# --- Message values -----------------------------------------------------------------------------


def test_message_defaults() -> None:
    m = Message("user", "hi")
    assert (m.role, m.content, m.id, m.tool_calls, m.tool_call_id, dict(m.metadata), m.pinned) == (
        "user",
        "hi",
        None,
        (),
        None,
        {},
        False,
    )


def test_any_role_is_accepted() -> None:
    assert Message("narrator", "once upon a time").role == "narrator"


def test_tool_calls_list_is_stored_as_tuple() -> None:
    calls = [ToolCall("c1", "f"), ToolCall("c2", "g")]
    m = Message("assistant", "", tool_calls=calls)  # type: ignore[arg-type]
    assert m.tool_calls == (ToolCall("c1", "f"), ToolCall("c2", "g"))
    assert type(m.tool_calls) is tuple
    calls.append(ToolCall("c3", "h"))
    assert len(m.tool_calls) == 2


def test_message_is_frozen() -> None:
    m = Message("user", "hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.content = "bye"  # type: ignore[misc]


# A list [full message, plain message] pickled (protocol 2) by rollmem 0.7.0.dev before the slots,
# when a message kept its fields in an instance dict (the plain one only role and content).
_DICT_ERA_PICKLE = (
    b"\x80\x02]q\x00(crollmem.message\nMessage\nq\x01)\x81q\x02}q\x03(X\x04\x00\x00\x00roleq\x04X\t"
    b"\x00\x00\x00assistantq\x05X\x07\x00\x00\x00contentq\x06X\x01\x00\x00\x00xq\x07X\x02\x00\x00\x00idq"
    b"\x08X\x01\x00\x00\x001q\tX\n\x00\x00\x00tool_callsq\ncrollmem.message\nToolCall\nq\x0b)\x81q\x0c}q"
    b"\r(h\x08X\x01\x00\x00\x00cq\x0eX\x04\x00\x00\x00nameq\x0fX\x01\x00\x00\x00fq\x10X\t\x00\x00\x00"
    b"argumentsq\x11X\x01\x00\x00\x00aq\x12ub\x85q\x13X\x0c\x00\x00\x00tool_call_idq\x14X\x01\x00\x00\x00"
    b"tq\x15X\x08\x00\x00\x00metadataq\x16crollmem.message\n_FrozenDict\nq\x17}q\x18X\x01\x00\x00\x00kq"
    b"\x19crollmem.message\n_FrozenList\nq\x1a]q\x1bK\x01a\x85q\x1cRq\x1ds\x85q\x1eRq\x1fX\x06\x00\x00\x00"
    b'pinnedq \x88ubh\x01)\x81q!}q"(h\x04X\x04\x00\x00\x00userq#h\x06X\x02\x00\x00\x00hiq$ube.'
)


def test_messages_keep_no_instance_dict() -> None:
    """Value types with slots: a buffered message costs its fields, not a dict (see the footprint
    benchmark); nothing can be added to one, and no field can be set or deleted."""
    m = Message("user", "hi")
    call = ToolCall("c", "f")
    for value in (m, call):
        assert not hasattr(value, "__dict__")
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'extra'"):
            value.extra = 1  # type: ignore[union-attr]
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'id'"):
            del value.id  # type: ignore[union-attr]
    assert [f.name for f in dataclasses.fields(Message)] == [
        "role",
        "content",
        "id",
        "tool_calls",
        "tool_call_id",
        "metadata",
        "pinned",
    ]
    assert dataclasses.replace(m, pinned=True) == Message("user", "hi", pinned=True)


def test_pickles_made_before_the_slots_still_load() -> None:
    full, plain = pickle.loads(_DICT_ERA_PICKLE)
    assert full == Message(
        "assistant",
        "x",
        id="1",
        tool_calls=(ToolCall("c", "f", "a"),),
        tool_call_id="t",
        metadata={"k": [1]},
        pinned=True,
    )
    assert plain == Message("user", "hi")
    assert (plain.id, plain.tool_calls, plain.metadata, plain.pinned) == (None, (), {}, False)
    assert plain.metadata is message_module.NO_METADATA


class Tagged(Message):
    """A subclass without slots: it has an instance dict for what it adds."""


def test_subclasses_keep_what_they_add() -> None:
    tagged = Tagged("user", "hi")
    tagged.note = "kept"  # type: ignore[attr-defined]
    assert (tagged.note, tagged) == ("kept", Tagged("user", "hi"))  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        tagged.content = "bye"  # type: ignore[misc]
    copies: list[Any] = [pickle.loads(pickle.dumps(tagged)), copy.deepcopy(tagged)]
    for copied in copies:
        assert (type(copied), copied, copied.note) == (Tagged, tagged, "kept")


def test_metadata_is_in_equality_not_in_hash() -> None:
    a = Message("user", "hi", metadata={"lang": "en"})
    b = Message("user", "hi", metadata={"lang": "fr"})
    assert a != b
    assert hash(a) == hash(b) == hash(Message("user", "hi"))
    assert a == Message("user", "hi", metadata={"lang": "en"})
    assert len({a, b, Message("user", "hi", metadata={"lang": "en"})}) == 2


def test_metadata_is_copied_and_read_only() -> None:
    source = {"k": [1]}
    m = Message("user", "x", metadata=source)
    source["other"] = [2]
    assert dict(m.metadata) == {"k": [1]}
    with pytest.raises(TypeError):
        m.metadata["k"] = 2  # type: ignore[index]
    assert dict(m.metadata) == {"k": [1]}


def test_messages_pickle_copy_and_json() -> None:
    m = Message(
        "assistant", "x", id="1", tool_calls=(ToolCall("c", "f", "a"),), metadata={"k": 1}, pinned=True
    )
    assert pickle.loads(pickle.dumps(m)) == m
    assert copy.deepcopy(m) == m
    assert json.loads(json.dumps(m.to_dict())) == m.to_dict()


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"role": 1, "content": "x"}, "role"),
        ({"role": "user", "content": None}, "content"),
        ({"role": "user", "content": "x", "id": 3}, "id"),
        ({"role": "user", "content": "x", "tool_call_id": 3}, "tool_call_id"),
        ({"role": "user", "content": "x", "pinned": 1}, "pinned"),
        ({"role": "user", "content": "x", "tool_calls": "abc"}, "tool_calls"),
        ({"role": "user", "content": "x", "tool_calls": [{"id": "c"}]}, "tool_calls[0]"),
        ({"role": "user", "content": "x", "metadata": [("a", 1)]}, "metadata"),
    ],
)
def test_message_rejects_wrong_types(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(TypeError) as info:
        Message(**kwargs)
    assert str(info.value).startswith(name + ":")


# --- str / token_text -----------------------------------------------------------------------------


def test_str() -> None:
    assert str(Message("user", "hello")) == "user: hello"
    m = Message(
        "assistant", "let me look", tool_calls=(ToolCall("1", "search", '"teal"'), ToolCall("2", "now"))
    )
    assert str(m) == 'assistant: let me look [tool calls: search("teal"), now()]'
    assert str(Message("tool", "42", tool_call_id="1")) == "tool: 42"


def test_token_text() -> None:
    assert Message("user", "plain text").token_text() == "plain text"
    assert Message("user", "").token_text() == ""
    calls = (ToolCall("c1", "search", "q=1"), ToolCall("c2", "now"))
    assert Message("assistant", "hmm", tool_calls=calls).token_text() == "hmm\nsearch(q=1)\nnow()"
    assert Message("assistant", "", tool_calls=calls).token_text() == "search(q=1)\nnow()"
    assert Message("tool", "42", tool_call_id="c1").token_text() == "42\nc1"
    assert Message("tool", "", tool_call_id="c1").token_text() == "c1"


# --- dict form -------------------------------------------------------------------------------------


def test_plain_to_dict_has_only_role_and_content() -> None:
    assert Message("user", "hi").to_dict() == {"role": "user", "content": "hi"}
    assert Message("user", "hi", metadata={}).to_dict() == {"role": "user", "content": "hi"}


def test_full_to_dict() -> None:
    m = Message(
        "assistant",
        "x",
        id="m1",
        tool_calls=(ToolCall("c1", "f", "{}"),),
        tool_call_id="c0",
        metadata={"k": [1, 2]},
        pinned=True,
    )
    assert m.to_dict() == {
        "role": "assistant",
        "content": "x",
        "id": "m1",
        "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}],
        "tool_call_id": "c0",
        "metadata": {"k": [1, 2]},
        "pinned": True,
    }
    assert Message.from_dict(m.to_dict()) == m
    assert Message.from_dict(m.to_dict()).pinned is True


def test_from_dict_fills_defaults_and_ignores_unknown_keys() -> None:
    m = Message.from_dict({"role": "user", "content": "hi", "extra": 1})
    assert m == Message("user", "hi")
    assert m.pinned is False
    assert Message.from_dict(
        {"role": "tool", "content": "", "tool_calls": [{"id": "a", "name": "f"}]}
    ).tool_calls == (ToolCall("a", "f", ""),)
    assert Message.from_dict({"role": "user", "content": "x", "id": None}).id is None


@pytest.mark.parametrize(
    ("data", "message", "path", "is_type_error"),
    [
        ("text", "expected a mapping, got str", "", True),
        ({"content": "x"}, "role: missing required key", "role", False),
        ({"role": "user"}, "content: missing required key", "content", False),
        ({"role": 1, "content": "x"}, "role: expected str, got int", "role", True),
        ({"role": "u", "content": "x", "id": 1}, "id: expected str or null, got int", "id", True),
        ({"role": "u", "content": "x", "pinned": "yes"}, "pinned: expected bool, got str", "pinned", True),
        (
            {"role": "u", "content": "x", "tool_calls": {}},
            "tool_calls: expected a list, got dict",
            "tool_calls",
            True,
        ),
        (
            {"role": "u", "content": "x", "tool_calls": [{"id": "a", "name": "f"}, {"id": 0, "name": "g"}]},
            "tool_calls[1].id: expected str, got int",
            "tool_calls[1].id",
            True,
        ),
        (
            {"role": "u", "content": "x", "metadata": []},
            "metadata: expected a mapping, got list",
            "metadata",
            True,
        ),
        (
            {"role": "u", "content": "x", "metadata": {1: "a"}},
            "metadata: expected str keys, got int",
            "metadata",
            True,
        ),
    ],
)
def test_from_dict_errors_name_the_field(data: Any, message: str, path: str, is_type_error: bool) -> None:
    with pytest.raises(InvalidStateError) as info:
        Message.from_dict(data)
    assert str(info.value) == message
    assert info.value.path == path
    assert isinstance(info.value, StateTypeError) is is_type_error
    assert isinstance(info.value, ValueError)


def test_message_from_dict_prefixes_the_path() -> None:
    with pytest.raises(StateTypeError) as info:
        message_from_dict({"role": "u", "content": "x", "tool_calls": [{"id": 7, "name": "f"}]}, "buffer[3]")
    assert str(info.value) == "buffer[3].tool_calls[0].id: expected str, got int"
    assert info.value.path == "buffer[3].tool_calls[0].id"


@pytest.mark.parametrize(
    "item",
    [
        {"role": "user", "content": "hello"},
        {"content": "", "role": "assistant"},
        {"role": "tool", "content": "x", "id": "7"},
        {"role": "user", "content": "caf\u00e9"},
        Message("user", "already a message", pinned=True),
    ],
    ids=["plain", "key-order", "with-id", "non-ascii", "message"],
)
def test_stored_messages_read_alike_on_the_fast_path_and_the_full_one(item: Any) -> None:
    """Loads read the common ``{"role", "content"}`` shape without the constructor's checks:
    what they build equals, hashes, prints, copies and pickles as the constructor's message."""
    (loaded,) = message_module._messages_from_dicts([item], "buffer")
    built = item if isinstance(item, Message) else message_from_dict(item, "")
    assert type(loaded) is Message
    assert (loaded, hash(loaded), repr(loaded), loaded.to_dict()) == (
        built,
        hash(built),
        repr(built),
        built.to_dict(),
    )
    assert pickle.loads(pickle.dumps(loaded)) == copy.copy(loaded) == built
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.content = "changed"  # type: ignore[misc]


def test_stored_messages_name_the_bad_one() -> None:
    texts = ['{"role":"user","content":"a"}', '{"role":"user","content":"\\ud800"}', "{"]
    with pytest.raises(InvalidStateError) as info:
        message_module._messages_from_json(texts[:2], "buffer", 5)
    assert info.value.path == "buffer[6].content"
    with pytest.raises(InvalidStateError, match=r"^buffer\[7\]: stored message is not valid JSON"):
        message_module._messages_from_json(texts[::2], "buffer", 6)
    with pytest.raises(StateTypeError, match=r"^buffer\[1\]: expected a mapping, got list"):
        message_module._messages_from_json(['{"role":"u","content":""}', "[]"], "buffer")
    assert message_module._messages_from_json(texts[:1], "buffer") == [Message("user", "a")]

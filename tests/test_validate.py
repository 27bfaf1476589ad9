from __future__ import annotations

import re
from typing import Callable

import pytest

from rollmem import _validate as v
from rollmem.errors import InvalidStateError, StateTypeError


def exactly(message: str) -> str:
    """A ``match=`` pattern for exactly ``message``."""
    return "^" + re.escape(message) + "$"


@pytest.mark.parametrize(
    ("path", "key", "expected"),
    [
        ("buffer", 3, "buffer[3]"),
        ("buffer[3]", "id", "buffer[3].id"),
        ("", "summary", "summary"),
        ("", 0, "[0]"),
    ],
)
def test_join(path: str, key: str | int, expected: str) -> None:
    assert v.join(path, key) == expected


@pytest.mark.parametrize(
    ("value", "name"), [(None, "None"), (1, "int"), (True, "bool"), ([], "list"), ("", "str")]
)
def test_type_name(value: object, name: str) -> None:
    assert v.type_name(value) == name


def test_expect_mapping() -> None:
    data = {"a": 1}
    assert v.expect_mapping(data, "x") is data
    with pytest.raises(StateTypeError, match=exactly("x[0]: expected a mapping, got list")) as info:
        v.expect_mapping([], "x[0]")
    assert info.value.path == "x[0]"


def test_expect_list_accepts_lists_and_tuples() -> None:
    assert v.expect_list((1, 2), "p") == [1, 2]
    with pytest.raises(StateTypeError, match=exactly("p: expected a list, got dict")):
        v.expect_list({}, "p")


def test_get_str() -> None:
    assert v.get_str({"k": "s"}, "k", "root") == "s"
    assert v.get_str({}, "k", "root", "dflt") == "dflt"
    with pytest.raises(InvalidStateError, match=exactly("root.k: missing required key")) as info:
        v.get_str({}, "k", "root")
    assert info.type is InvalidStateError
    assert info.value.path == "root.k"
    with pytest.raises(StateTypeError, match=exactly("buffer[3].role: expected str, got int")):
        v.get_str({"role": 1}, "role", "buffer[3]")


def test_get_optional_str() -> None:
    assert v.get_optional_str({}, "id", "") is None
    assert v.get_optional_str({"id": None}, "id", "") is None
    assert v.get_optional_str({"id": "x"}, "id", "") == "x"
    with pytest.raises(StateTypeError, match=exactly("id: expected str or null, got int")):
        v.get_optional_str({"id": 5}, "id", "")


def test_get_int_rejects_bool() -> None:
    assert v.get_int({"version": 2}, "version", "") == 2
    assert v.get_int({}, "version", "", 7) == 7
    with pytest.raises(StateTypeError, match=exactly("version: expected int, got bool")):
        v.get_int({"version": True}, "version", "")
    with pytest.raises(StateTypeError, match=exactly("version: expected int, got str")):
        v.get_int({"version": "2"}, "version", "")
    with pytest.raises(InvalidStateError, match=exactly("version: missing required key")):
        v.get_int({}, "version", "")


def test_get_bool() -> None:
    assert v.get_bool({"p": False}, "p", "") is False
    assert v.get_bool({}, "p", "", True) is True
    with pytest.raises(StateTypeError, match=exactly("m.p: expected bool, got int")):
        v.get_bool({"p": 1}, "p", "m")


def test_get_list_and_mapping() -> None:
    assert v.get_list({"b": [1]}, "b", "") == [1]
    assert v.get_list({}, "b", "", ()) == []
    assert v.get_mapping({"m": {"a": 1}}, "m", "x") == {"a": 1}
    with pytest.raises(StateTypeError, match=exactly("buffer: expected a list, got str")):
        v.get_list({"buffer": "abc"}, "buffer", "")
    with pytest.raises(StateTypeError, match=exactly("x.m: expected a mapping, got int")):
        v.get_mapping({"m": 3}, "m", "x")


@pytest.mark.parametrize("getter", [v.get_list, v.get_mapping])
def test_container_getters_report_missing_keys(getter: Callable[..., object]) -> None:
    with pytest.raises(InvalidStateError, match=exactly("a.b: missing required key")):
        getter({}, "b", "a")

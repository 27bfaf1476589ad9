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


# --- argument checks: one wording everywhere ------------------------------------------------------


@pytest.mark.parametrize(
    ("check", "error", "message"),
    [
        (lambda: v.check_int("n", "3"), TypeError, "n: expected int, got str"),
        (lambda: v.check_int("n", True), TypeError, "n: expected int, got bool"),
        (lambda: v.check_int("n", None), TypeError, "n: expected int, got None"),
        (lambda: v.check_int("n", -1, 0), ValueError, "n must be >= 0, got -1"),
        (lambda: v.check_positive_int("n", 0), ValueError, "n must be > 0, got 0"),
        (lambda: v.check_positive_number("t", "1"), TypeError, "t: expected a number, got str"),
        (lambda: v.check_positive_number("t", False), TypeError, "t: expected a number, got bool"),
        (lambda: v.check_positive_number("t", 0), ValueError, "t must be a finite number > 0, got 0"),
        (
            lambda: v.check_positive_number("t", float("nan")),
            ValueError,
            "t must be a finite number > 0, got nan",
        ),
        (lambda: v.check_positive_number("t", 10**400), ValueError, "t must be a finite number > 0, got "),
        (lambda: v.check_ttl(True), TypeError, "ttl: expected a number of seconds or None, got bool"),
        (lambda: v.check_ttl(float("inf")), ValueError, "ttl must be a finite number > 0, got inf"),
        (lambda: v.check_ttl(-1.5), ValueError, "ttl must be a finite number > 0, got -1.5"),
        (lambda: v.check_str("s", b"x"), TypeError, "s: expected str, got bytes"),
        (lambda: v.check_str("s", "", allow_empty=False), ValueError, "s must not be empty"),
        (lambda: v.check_bool("b", 1), TypeError, "b: expected bool, got int"),
        (lambda: v.check_callable("f", 3), TypeError, "f: expected a callable, got int"),
        (
            lambda: v.check_callable("f", 3, optional=True),
            TypeError,
            "f: expected a callable or None, got int",
        ),
    ],
)
def test_argument_checks_word_errors_one_way(
    check: Callable[[], object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        check()
    assert str(info.value).startswith(message)
    assert type(info.value) is error


def test_argument_checks_return_what_they_accept() -> None:
    assert v.check_int("n", 0, 0) == 0
    assert v.check_positive_int("n", 3) == 3
    assert v.check_positive_number("t", 0.5) == 0.5
    assert v.check_ttl(None) is None
    assert v.check_ttl(60) == 60
    assert v.check_str("s", "") == ""
    assert v.check_bool("b", False) is False
    v.check_callable("f", None, optional=True)
    assert [v.is_int(x) for x in (3, True, 3.0)] == [True, False, False]
    assert [v.is_number(x) for x in (2.5, 3, False, "1")] == [True, True, False, False]


def test_every_ttl_is_checked_alike() -> None:
    """Sessions refuse at construction what a store would refuse at the first save."""
    from rollmem import BufferMemory
    from rollmem.sessions import Sessions
    from rollmem.stores import LogWrite, MemoryStore

    store = MemoryStore()
    for ttl in (float("inf"), float("nan"), 0, -1):
        with pytest.raises(ValueError, match=r"^ttl must be a finite number > 0, got ") as session_error:
            Sessions(store, BufferMemory, ttl=ttl)
        with pytest.raises(ValueError, match=r"^ttl must be a finite number > 0, got ") as store_error:
            store.write("s", LogWrite("", create=True, ttl=ttl))
        assert str(session_error.value) == str(store_error.value)


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("postgresql://user:S3cr3t@host/db", "postgresql://user:****@host/db"),
        (
            "redis://:S3cr3t@host:notaport/0: Port could not be cast to integer",
            "redis://:****@host:notaport/0: Port could not be cast to integer",
        ),
        (  # malformed: libpq's message quotes the whole URI
            'missing "=" after "postgresql://u:S3cr3t@[::1/db" in connection info string',
            'missing "=" after "postgresql://u:****@[::1/db" in connection info string',
        ),
        ("postgresql://u:S%40cr%2Ft@host/db", "postgresql://u:****@host/db"),  # percent-encoded
        ("postgres://u:S3@cr/3t@host/db: bad", "postgres://u:****@host/db: bad"),  # raw @ and /
        (
            "rediss://u:p@h/0 and 'unix://:q@/tmp/redis.sock'",
            "rediss://u:****@h/0 and 'unix://:****@/tmp/redis.sock'",
        ),
        ("host=h password=S3cr3t dbname=db", "host=h password=**** dbname=db"),
        ("host=h password = 'S3 cr\\'3t' dbname=db", "host=h password = **** dbname=db"),
        ("PASSWORD=x sslpassword=y", "PASSWORD=**** sslpassword=****"),
        ("postgresql://host/db?user=u&password=S3cr3t", "postgresql://host/db?user=u&password=****"),
    ],
)
def test_redact_url_masks_every_password(text: str, redacted: str) -> None:
    assert v.redact_url(text) == redacted
    assert v.redact_url(redacted) == redacted


@pytest.mark.parametrize(
    "text",
    [
        "redis://host:6379/0",
        "sqlite:///tmp/chat.db",
        "redis://u:@host/0",  # no password
        "user@example.com wrote x:y@z",  # not URLs
        "postgresql://host/db: table must be a name",
    ],
)
def test_redact_url_leaves_texts_without_a_password_alone(text: str) -> None:
    assert v.redact_url(text) == text

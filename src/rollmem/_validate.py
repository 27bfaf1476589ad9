"""The one home of argument checks and of typed getters for untrusted mappings.

Every module checks its arguments here, so all of rollmem words its errors one way:

- a wrong type is a ``TypeError``: ``"max_tokens: expected int, got str"``;
- a wrong value is a ``ValueError``: ``"max_tokens must be > 0, got -1"``.

The getters read saved state and build the path of the bad field into the error
(``buffer[3].tool_calls[0].id: expected str, got int``), raising
:class:`~rollmem.errors.InvalidStateError` / :class:`~rollmem.errors.StateTypeError`.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Mapping
from typing import Any, Optional

from .errors import InvalidStateError, StateTypeError

_MISSING: Any = object()


def type_name(value: object) -> str:
    """The name used for ``value``'s type in error messages."""
    if value is None:
        return "None"
    return type(value).__name__


def is_int(value: object) -> bool:
    """Whether ``value`` is an ``int`` and not a ``bool`` (the one place this idiom is written)."""
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


def is_number(value: object) -> bool:
    """Whether ``value`` is an ``int`` or a ``float``, and not a ``bool``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def type_error(name: str, expected: str, value: object) -> TypeError:
    """``TypeError("name: expected <expected>, got <type>")``."""
    return TypeError(f"{name}: expected {expected}, got {type_name(value)}")


def value_error(name: str, rule: str, value: object) -> ValueError:
    """``ValueError("name must be <rule>, got <value>")``."""
    return ValueError(f"{name} must be {rule}, got {value!r}")


def check_int(name: str, value: object, minimum: Optional[int] = None) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) of at least ``minimum``."""
    if not is_int(value):
        raise type_error(name, "int", value)
    assert isinstance(value, int)
    if minimum is not None and value < minimum:
        raise value_error(name, "> 0" if minimum == 1 else f">= {minimum}", value)
    return value


def check_positive_int(name: str, value: object) -> int:
    """``value`` if it is an ``int`` > 0 (a budget, a window, a limit)."""
    return check_int(name, value, 1)


def check_positive_number(name: str, value: object) -> float:
    """``value`` if it is a finite ``int`` or ``float`` > 0 (not a ``bool``, NaN or infinity)."""
    if not is_number(value):
        raise type_error(name, "a number", value)
    assert isinstance(value, (int, float))
    try:
        finite = 0 < float(value) < math.inf
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite:
        raise value_error(name, "a finite number > 0", value)
    return value


def check_ttl(value: object, name: str = "ttl") -> Optional[float]:
    """A time to live in seconds: ``None`` (never expires) or a finite number > 0."""
    if value is None:
        return None
    if not is_number(value):
        raise type_error(name, "a number of seconds or None", value)
    return check_positive_number(name, value)


def check_str(name: str, value: object, *, allow_empty: bool = True) -> str:
    """``value`` if it is a ``str`` (a non-empty one unless ``allow_empty``)."""
    if not isinstance(value, str):
        raise type_error(name, "str", value)
    if not allow_empty and not value:
        raise ValueError(f"{name} must not be empty")
    return value


def check_storable(name: str, value: object, *, allow_empty: bool = True) -> str:
    """``value`` if it is a ``str`` every store can keep: no NUL character and no lone surrogate
    (``"name must not contain NUL characters"``, ``"name must be valid Unicode (lone surrogate
    at index 3)"``, both ``ValueError``)."""
    text = check_str(name, value, allow_empty=allow_empty)
    if "\x00" in text:
        raise ValueError(f"{name} must not contain NUL characters")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            problem = f"lone surrogate at index {error.start}"
            raise ValueError(f"{name} must be valid Unicode ({problem})") from None
    return text


def check_session_id(value: object, name: str = "session_id") -> str:
    """The one session id rule, used by sessions, every store and the integrations: ``value``
    if it is a non-empty ``str`` without NUL characters or lone surrogates; else ``TypeError``
    / ``ValueError`` in the wording of :func:`check_storable`. Any length is accepted."""
    return check_storable(name, value, allow_empty=False)


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a ``bool``."""
    if not isinstance(value, bool):
        raise type_error(name, "bool", value)
    return value


def check_callable(name: str, value: object, *, optional: bool = False) -> None:
    """Raise unless ``value`` is callable (or ``None`` when ``optional``)."""
    if value is None and optional:
        return
    if not callable(value):
        raise type_error(name, "a callable or None" if optional else "a callable", value)


def check_not_coroutine(name: str, value: object, advice: str) -> None:
    """Raise ``TypeError("name is a coroutine function: <advice>")`` for an ``async def``."""
    if inspect.iscoroutinefunction(value):
        raise TypeError(f"{name} is a coroutine function: {advice}")


def unawaited(value: object) -> bool:
    """Whether ``value`` is an awaitable that will not be awaited; a coroutine is closed first, so
    that it never warns that it was never awaited."""
    if not inspect.isawaitable(value):
        return False
    close = getattr(value, "close", None)
    if callable(close):
        close()
    return True


def join(path: str, key: str | int) -> str:
    """``join("buffer", 3)`` is ``"buffer[3]"``; ``join("buffer[3]", "id")`` is ``"buffer[3].id"``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def expect_mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise StateTypeError(path, f"expected a mapping, got {type_name(value)}")
    return value


def expect_list(value: object, path: str) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise StateTypeError(path, f"expected a list, got {type_name(value)}")
    return list(value)


def _get(data: Mapping[str, Any], key: str, path: str, default: Any) -> Any:
    if key in data:
        return data[key]
    if default is _MISSING:
        raise InvalidStateError(join(path, key), "missing required key")
    return default


def get_str(data: Mapping[str, Any], key: str, path: str, default: Any = _MISSING) -> str:
    value = _get(data, key, path, default)
    if not isinstance(value, str):
        raise StateTypeError(join(path, key), f"expected str, got {type_name(value)}")
    return value


def get_optional_str(data: Mapping[str, Any], key: str, path: str) -> Optional[str]:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise StateTypeError(join(path, key), f"expected str or null, got {type_name(value)}")
    return value


def get_int(data: Mapping[str, Any], key: str, path: str, default: Any = _MISSING) -> int:
    value = _get(data, key, path, default)
    if is_int(value):
        return value  # type: ignore[no-any-return]
    raise StateTypeError(join(path, key), f"expected int, got {type_name(value)}")


def get_bool(data: Mapping[str, Any], key: str, path: str, default: Any = _MISSING) -> bool:
    value = _get(data, key, path, default)
    if not isinstance(value, bool):
        raise StateTypeError(join(path, key), f"expected bool, got {type_name(value)}")
    return value


def get_list(data: Mapping[str, Any], key: str, path: str, default: Any = _MISSING) -> list[Any]:
    return expect_list(_get(data, key, path, default), join(path, key))


def get_mapping(data: Mapping[str, Any], key: str, path: str, default: Any = _MISSING) -> Mapping[str, Any]:
    return expect_mapping(_get(data, key, path, default), join(path, key))


def check_text(value: str, path: str) -> str:
    """``value`` when it is valid Unicode text; a lone surrogate (half of a UTF-16 pair, e.g. from
    a string cut by UTF-16 length) raises :class:`InvalidStateError` (a ``ValueError``) naming
    ``path`` and the index. O(1) for ASCII text."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidStateError(path, f"not valid Unicode (lone surrogate at index {error.start})") from None
    return value


def nest(path: str, error: InvalidStateError) -> InvalidStateError:
    """``error`` with its path put under ``path`` (``"content"`` under ``"buffer[3]"`` is
    ``"buffer[3].content"``), unless it already names a field there."""
    inner = error.path
    if not path or inner == path or inner.startswith((path + ".", path + "[")):
        return error
    return type(error)(f"{path}.{inner}" if inner else path, error.problem)


def thaw(value: Any) -> Any:
    """A plain, independent copy of a frozen metadata value (dicts and lists): changing it
    changes no message."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thaw(item) for item in value]
    return value


def plural(count: int, noun: str) -> str:
    """``1 message``, ``2 messages``: a count with its noun, plural where it is not one."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


# A URL's password runs from ``scheme://user:`` to the last ``@`` before whitespace (a raw ``@``
# or ``/`` in it is covered: a rare text may lose more than the password, never show it); a
# ``password=`` keyword (conninfo, ``sslpassword``, a URL query) to its closing quote or whitespace.
_URL_PASSWORD = re.compile(r"(?<![\w+.-])([A-Za-z][\w+.-]*://[^\s:/?#@]*:)\S+(?=@)")
_KEYWORD_PASSWORD = re.compile(r"(?i)(\b\w*password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|\S+)")


def redact_url(text: str) -> str:
    """``text`` with the password of every URL in it, and every conninfo ``password=`` value,
    replaced by ``****``: ``postgresql://user:****@host/db``, ``redis://:****@host:6379/0``,
    ``host=h password=**** dbname=db``. Malformed URLs and percent-encoded passwords too. The rule
    every message, log line and exception of rollmem goes through before it may show a URL."""
    return _KEYWORD_PASSWORD.sub(r"\1****", _URL_PASSWORD.sub(r"\1****", text))

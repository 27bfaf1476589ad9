"""Typed getters for untrusted mappings: each error names the path of the bad field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from .errors import InvalidStateError, StateTypeError

_MISSING: Any = object()


def type_name(value: object) -> str:
    """The name used for ``value``'s type in error messages."""
    if value is None:
        return "None"
    return type(value).__name__


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
    if isinstance(value, int) and not isinstance(value, bool):
        return value
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

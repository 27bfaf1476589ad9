"""Messages: the frozen values a memory holds, and their dict form."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, FrozenInstanceError, dataclass, field, fields
from typing import Any, NoReturn, Optional, TypeVar

from . import _validate as v
from .errors import InvalidStateError, StateTypeError

__all__ = ["ASSISTANT", "SYSTEM", "TOOL", "USER", "Message", "ToolCall", "message_from_dict"]

USER = "user"
ASSISTANT = "assistant"
SYSTEM = "system"
TOOL = "tool"

STATE_VERSION = 2
"""The version of the saved-state format a memory's ``to_dict()`` writes (``rollmem.memory``
and ``rollmem.sessions`` both read it from here)."""


def _refuse(*args: object, **kwargs: object) -> NoReturn:
    raise TypeError("Message.metadata is read-only; build a new Message instead")


class _FrozenDict(dict):  # type: ignore[type-arg]
    """A dict that refuses changes: keeps a frozen message frozen, yet pickles and JSON-encodes."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (_FrozenDict, (dict(self),))


class _FrozenList(list):  # type: ignore[type-arg]
    """A list that refuses changes: what a list inside a message's metadata becomes."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (_FrozenList, (list(self),))


def _freeze(value: Any, path: str) -> Any:
    """A read-only copy of a metadata value, all the way down; text is checked as it goes."""
    if isinstance(value, str):
        return v.check_text(value, path)
    if isinstance(value, Mapping):
        frozen = {}
        for key, item in value.items():
            if isinstance(key, str):
                v.check_text(key, path)
            frozen[key] = _freeze(item, f"{path}.{key}")
        return _FrozenDict(frozen)
    if isinstance(value, (list, tuple)):
        items = [_freeze(item, f"{path}[{index}]") for index, item in enumerate(value)]
        return _FrozenList(items) if isinstance(value, list) else tuple(items)
    if isinstance(value, (set, frozenset)):
        return frozenset(_freeze(item, path) for item in value)
    return value


NO_METADATA: Mapping[str, Any] = _FrozenDict()
"""The shared empty ``Message.metadata``."""


_type_error = v.type_error

_T = TypeVar("_T")


def _slotted(cls: type[_T]) -> type[_T]:
    """A frozen dataclass rebuilt with ``__slots__`` for its fields, as ``slots=True`` does from
    Python 3.10 on: no per-instance dict (a plain message takes 88 bytes instead of about 330).

    Still frozen (assigning or deleting any field raises ``FrozenInstanceError``), and picklable
    and copyable: the state is the tuple of field values (a dict when a subclass added attributes),
    set back past the frozen ``__setattr__``; the dict state of pickles made before the slots is
    read too.
    """
    names = tuple(item.name for item in fields(cls))  # type: ignore[arg-type]
    defaults = {
        item.name: item.default if item.default_factory is MISSING else item.default_factory()
        for item in fields(cls)  # type: ignore[arg-type]
        if item.default is not MISSING or item.default_factory is not MISSING
    }
    body = {key: value for key, value in cls.__dict__.items() if key not in names}
    body.pop("__dict__", None)
    body.pop("__weakref__", None)
    body["__slots__"] = names

    def __setattr__(self: Any, name: str, value: object) -> None:
        if type(self) is slotted or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(slotted, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is slotted or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(slotted, self).__delattr__(name)

    def __getstate__(self: Any) -> Any:
        values = tuple([getter(self) for getter in getters])
        extra = getattr(self, "__dict__", None)  # what a subclass without slots added
        return {**dict(zip(names, values)), **extra} if extra else values

    def __setstate__(self: Any, state: Any) -> None:
        if isinstance(state, dict):  # a subclass's, or pickled before the slots: an instance dict
            state = {**defaults, **state}
            for name in state.keys() - names:
                self.__dict__[name] = state[name]
            state = [state[name] for name in names]
        for setter, value in zip(setters, state):
            setter(self, value)

    body.update(
        __setattr__=__setattr__, __delattr__=__delattr__, __getstate__=__getstate__, __setstate__=__setstate__
    )
    slotted: Any = type(cls.__name__, cls.__bases__, body)
    for function in (__setattr__, __delattr__, __getstate__, __setstate__):
        function.__qualname__ = f"{cls.__qualname__}.{function.__name__}"
    getters = [slotted.__dict__[name].__get__ for name in names]
    setters = [slotted.__dict__[name].__set__ for name in names]
    return slotted  # type: ignore[no-any-return]


@_slotted
@dataclass(frozen=True)
class ToolCall:
    """A function call requested by a message; a later message answers it with ``tool_call_id``."""

    id: str
    name: str
    arguments: str = ""

    def __post_init__(self) -> None:
        for name in ("id", "name", "arguments"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise _type_error(f"ToolCall.{name}", "str", value)
            if not value.isascii():
                v.check_text(value, f"ToolCall.{name}")

    def to_dict(self) -> dict[str, str]:
        """``{"id": ..., "name": ..., "arguments": ...}``: always all three keys."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        """Read :meth:`to_dict` output; ``arguments`` may be missing. Errors name the bad field."""
        return _tool_call_from_dict(data, "")


@_slotted
@dataclass(frozen=True, init=False)
class Message:
    """One conversation turn. Any role string is accepted.

    ``metadata`` takes part in equality but not in the hash, so messages stay hashable.
    A pinned message is never evicted, summarized or dropped by a memory.
    """

    role: str
    content: str
    id: Optional[str] = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: Optional[str] = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: NO_METADATA, hash=False)
    pinned: bool = False

    def __init__(
        self,
        role: str,
        content: str,
        id: Optional[str] = None,
        tool_calls: Iterable[ToolCall] = (),
        tool_call_id: Optional[str] = None,
        metadata: Mapping[str, Any] = NO_METADATA,
        pinned: bool = False,
    ) -> None:
        # Written by hand (not generated) because messages are built on every add: the slots are
        # set through their descriptors instead of a frozen __setattr__ per field.
        if type(role) is not str and not isinstance(role, str):
            raise _type_error("role", "str", role)
        if type(content) is not str and not isinstance(content, str):
            raise _type_error("content", "str", content)
        if id is not None and not isinstance(id, str):
            raise _type_error("id", "str or None", id)
        if tool_call_id is not None and not isinstance(tool_call_id, str):
            raise _type_error("tool_call_id", "str or None", tool_call_id)
        if pinned is not False and pinned is not True:
            raise _type_error("pinned", "bool", pinned)
        if not content.isascii():  # text must be valid Unicode: it is stored, sent and saved as UTF-8
            v.check_text(content, "content")
        if not role.isascii():
            v.check_text(role, "role")
        if id is not None and not id.isascii():
            v.check_text(id, "id")
        if tool_call_id is not None and not tool_call_id.isascii():
            v.check_text(tool_call_id, "tool_call_id")
        if type(tool_calls) is not tuple or tool_calls:
            tool_calls = _tool_calls(tool_calls)
        if metadata is not NO_METADATA:
            metadata = _metadata(metadata)
        _set_role(self, role)
        _set_content(self, content)
        _set_id(self, id)
        _set_tool_calls(self, tool_calls)
        _set_tool_call_id(self, tool_call_id)
        _set_metadata(self, metadata)
        _set_pinned(self, pinned)

    def __str__(self) -> str:
        text = f"{self.role}: {self.content}"
        if self.tool_calls:
            calls = ", ".join(f"{call.name}({call.arguments})" for call in self.tool_calls)
            text += f" [tool calls: {calls}]"
        return text

    def token_text(self) -> str:
        """The text a token counter measures: content, each call as ``name(arguments)``, the call id."""
        if not self.tool_calls and self.tool_call_id is None:
            return self.content
        parts = [self.content] if self.content else []
        parts.extend(f"{call.name}({call.arguments})" for call in self.tool_calls)
        if self.tool_call_id is not None:
            parts.append(self.tool_call_id)
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """``role`` and ``content``, plus every other field that differs from its default."""
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.id is not None:
            data["id"] = self.id
        if self.tool_calls:
            data["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.metadata:
            data["metadata"] = v.thaw(self.metadata)  # a plain copy: changing it changes no message
        if self.pinned:
            data["pinned"] = True
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """Read :meth:`to_dict` output: absent optional keys take their defaults, unknown keys are
        ignored, and a bad field raises :class:`~rollmem.errors.InvalidStateError` naming it."""
        return message_from_dict(data, "")


def _tool_calls(calls: object) -> tuple[ToolCall, ...]:
    if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Iterable):
        raise _type_error("tool_calls", "a sequence of ToolCall", calls)
    result = tuple(calls)
    for index, call in enumerate(result):
        if not isinstance(call, ToolCall):
            raise _type_error(f"tool_calls[{index}]", "ToolCall", call)
    return result


def _metadata(meta: object) -> Mapping[str, Any]:
    if not isinstance(meta, Mapping):
        raise _type_error("metadata", "a mapping", meta)
    if not meta:
        return NO_METADATA
    for key in meta:
        if not isinstance(key, str):
            raise _type_error("metadata key", "str", key)
    try:
        frozen: Mapping[str, Any] = _freeze(meta, "metadata")
    except RecursionError:
        raise InvalidStateError("metadata", "nested too deeply") from None
    return frozen


def _tool_call_from_dict(data: object, path: str) -> ToolCall:
    data = v.expect_mapping(data, path)
    return ToolCall(
        v.check_text(v.get_str(data, "id", path), v.join(path, "id")),
        v.check_text(v.get_str(data, "name", path), v.join(path, "name")),
        v.check_text(v.get_str(data, "arguments", path, ""), v.join(path, "arguments")),
    )


# The slot setters of Message's fields, in field order: they bypass the frozen __setattr__.
_set_role, _set_content, _set_id, _set_tool_calls, _set_tool_call_id, _set_metadata, _set_pinned = (
    Message.__dict__[name].__set__
    for name in Message.__slots__  # type: ignore[attr-defined]
)


class _Draft:
    """A mutable twin of ``Message``'s layout: the fast path fills one, then makes it a
    ``Message`` by assigning ``__class__`` (allowed between classes whose slots match), which
    is cheaper than setting seven frozen slots through their descriptors."""

    __slots__ = ("content", "id", "metadata", "pinned", "role", "tool_call_id", "tool_calls")
    role: str
    content: str
    id: Optional[str]
    tool_calls: tuple[ToolCall, ...]
    tool_call_id: Optional[str]
    metadata: Mapping[str, Any]
    pinned: bool


assert sorted(_Draft.__slots__) == sorted(Message.__slots__)  # type: ignore[attr-defined]


def _messages_from_dicts(items: Iterable[object], path: str, first: int = 0) -> list[Message]:
    """:func:`message_from_dict` for each item, found at ``path[first]``, ``path[first + 1]``...;
    a ``Message`` item is taken as it is. The common shape ``{"role": ..., "content": ...}`` in
    ASCII, which cannot fail the constructor's checks, is built without them."""
    messages: list[Message] = []
    append = messages.append
    new = object.__new__
    for index, item in enumerate(items, first):
        if type(item) is dict and len(item) == 2:
            role, content = item.get("role"), item.get("content")
            if type(role) is str and type(content) is str and role.isascii() and content.isascii():
                message = new(_Draft)
                message.role = role
                message.content = content
                message.id = None
                message.tool_calls = ()
                message.tool_call_id = None
                message.metadata = NO_METADATA
                message.pinned = False
                message.__class__ = Message  # type: ignore[assignment]
                append(message)  # type: ignore[arg-type]
                continue
        append(item if isinstance(item, Message) else message_from_dict(item, v.join(path, index)))
    return messages


def _messages_from_json(texts: Sequence[str], path: str, first: int = 0) -> list[Message]:
    """The messages stored as the JSON texts of their ``to_dict()``, found at ``path[first]``...;
    text that is not JSON or not a message raises :class:`~rollmem.errors.InvalidStateError`
    naming the item."""
    return _messages_from_dicts(_parse_json(texts, path, first), path, first)


def _parse_json(texts: Sequence[str], path: str, first: int) -> list[Any]:
    """``json.loads`` of each text (one call for all when they are all good); an error names
    the item at ``path[first + position]``."""
    try:
        items: list[Any] = json.loads("[" + ",".join(texts) + "]")
        if len(items) == len(texts):
            return items
    except (ValueError, RecursionError):
        pass
    items = []
    for index, text in enumerate(texts, first):  # one by one, to name the bad one
        try:
            items.append(json.loads(text))
        except RecursionError as exc:
            raise InvalidStateError(v.join(path, index), "stored message is nested too deeply") from exc
        except ValueError as exc:
            problem = f"stored message is not valid JSON: {exc}"
            raise InvalidStateError(v.join(path, index), problem) from exc
    return items


def message_from_dict(data: object, path: str) -> Message:
    """:meth:`Message.from_dict` for a message found at ``path`` inside larger state."""
    data = v.expect_mapping(data, path)
    calls_path = v.join(path, "tool_calls")
    calls = tuple(
        _tool_call_from_dict(item, v.join(calls_path, index))
        for index, item in enumerate(v.get_list(data, "tool_calls", path, ()))
    )
    meta = v.get_mapping(data, "metadata", path, NO_METADATA)
    for key in meta:
        if not isinstance(key, str):
            raise StateTypeError(v.join(path, "metadata"), f"expected str keys, got {v.type_name(key)}")
    fields: dict[str, Any] = {
        "role": v.get_str(data, "role", path),
        "content": v.get_str(data, "content", path),
        "id": v.get_optional_str(data, "id", path),
        "tool_calls": calls,
        "tool_call_id": v.get_optional_str(data, "tool_call_id", path),
        "metadata": meta,
        "pinned": v.get_bool(data, "pinned", path, False),
    }
    try:
        return Message(**fields)
    except InvalidStateError as error:  # text that is not valid Unicode, metadata nested too deeply
        raise v.nest(path, error) from None

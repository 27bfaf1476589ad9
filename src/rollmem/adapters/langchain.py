"""rollmem messages <-> ``langchain_core`` message objects, and a LangChain chat history on a memory.

Needs the ``langchain`` extra (``pip install "rollmem[langchain]"``, package ``langchain-core``).
Importing this module does not import ``langchain_core``: :func:`to_langchain`,
:func:`from_langchain` and the first access to ``RollingChatMessageHistory`` do, and raise
:class:`~rollmem.errors.MissingExtraError` when it is not installed.

The mapping, both ways: ``user`` <-> ``HumanMessage``, ``assistant`` <-> ``AIMessage``,
``system`` <-> ``SystemMessage``, ``tool`` with a ``tool_call_id`` <-> ``ToolMessage``
(``metadata["is_error"] is True`` <-> ``status="error"``), any other role (and a tool message
without ``tool_call_id``) <-> ``ChatMessage(role=...)``. ``id`` <-> ``id``; ``metadata["name"]``
<-> ``name``. A tool call whose ``arguments`` are a JSON object (``""`` counts as ``{}``) becomes a
``tool_calls`` entry with ``args`` parsed; other ``arguments`` travel unchanged as an
``invalid_tool_calls`` entry. Back, ``args`` becomes compact JSON (``json.dumps(args,
separators=(",", ":"), ensure_ascii=False)``) and a missing call id or name becomes ``""``.
Content lists keep their text parts, joined with ``"\\n"``; tool-call blocks in an ``AIMessage``
(their calls are in ``tool_calls``) are skipped, any other block (images, reasoning) raises
``ValueError``. Not carried: ``pinned``, metadata other than ``name``/``is_error``,
``additional_kwargs``, ``response_metadata``, ``usage_metadata``, ``artifact``.

``from_langchain(to_langchain(messages)) == messages`` holds exactly when the messages already
follow the provider rule (:func:`~rollmem.adapters.for_provider`: tool calls and results paired,
the first non-system message the user's), ``pinned`` is false,
metadata is empty or ``{"name": str}`` (plus ``"is_error": True`` on a tool message with a
``tool_call_id``), tool calls are on assistant messages only and ``tool_call_id`` on tool
messages only (anything else raises ``ValueError``), and tool-call ``arguments`` are compact JSON
objects or not JSON objects at all, the latter after the former within a message.

Typing: ``langchain_core`` is loaded with :func:`importlib.import_module`, so type checkers never
analyse it (this package's mypy runs with ``python_version = 3.9``, which ``langchain_core`` and
pydantic cannot be parsed under, and must pass without the extra). Its objects are therefore
typed ``Any`` here, and ``RollingChatMessageHistory`` is a class built on first access by the
module ``__getattr__`` (once; it pickles by this module path).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Optional

from .. import _validate as v
from .._extras import import_extra
from ..errors import InvalidStateError, StateTypeError
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
from ._common import (
    carried_metadata,
    check_messages,
    dump_arguments,
    for_provider,
    is_error,
    name_of,
    text_of_parts,
    try_load_arguments,
    within,
)

__all__ = ["RollingChatMessageHistory", "from_langchain", "to_langchain"]

if TYPE_CHECKING:
    RollingChatMessageHistory: Any  # built by __getattr__ on first access

_FORMAT = "LangChain"
# Content blocks that repeat what ``AIMessage.tool_calls`` already holds (provider-specific forms).
_TOOL_CALL_BLOCKS = frozenset({"tool_use", "tool_call", "function_call"})


def _import(module: str) -> Any:
    return import_extra(
        module, package="langchain-core", extra="langchain", feature="rollmem.adapters.langchain"
    )


def to_langchain(messages: Iterable[Message]) -> list[Any]:
    """``langchain_core`` message objects for ``messages``, in order (mapping: module docstring).

    What a model is sent, so the list follows :func:`~rollmem.adapters.for_provider` like every
    renderer: an unpaired tool result becomes a ``HumanMessage`` ``[result of tool call ID]
    CONTENT``, an unpaired call a text line of its ``AIMessage``, and a ``HumanMessage``
    ``CONTINUATION_TEXT`` (no id) opens the list when its first non-system message is not the
    user's. Raises ``TypeError`` for an item that is not a :class:`~rollmem.Message`, and
    ``ValueError`` naming ``messages[i]`` for tool calls off an assistant message or a
    ``tool_call_id`` off a tool message.
    """
    lc = _import("langchain_core.messages")
    return [_to_message(lc, message) for message in for_provider(check_messages(messages, _FORMAT))]


def _to_message(lc: Any, message: Message) -> Any:
    fields: dict[str, Any] = {"content": message.content, "id": message.id, "name": name_of(message)}
    role = message.role
    if role == USER:
        return lc.HumanMessage(**fields)
    if role == SYSTEM:
        return lc.SystemMessage(**fields)
    if role == ASSISTANT:
        calls, invalid = [], []
        for call in message.tool_calls:
            args = try_load_arguments(call.arguments)
            if args is None:
                invalid.append({"name": call.name, "args": call.arguments, "id": call.id, "error": None})
            else:
                calls.append({"name": call.name, "args": args, "id": call.id})
        return lc.AIMessage(**fields, tool_calls=calls, invalid_tool_calls=invalid)
    if role == TOOL and message.tool_call_id is not None:
        status = "error" if is_error(message) else "success"
        return lc.ToolMessage(**fields, tool_call_id=message.tool_call_id, status=status)
    return lc.ChatMessage(**fields, role=role)


def from_langchain(messages: Iterable[Any]) -> list[Message]:
    """rollmem messages for ``langchain_core`` messages (chunks included), in order.

    Other message classes (``FunctionMessage``, ``RemoveMessage``) and non-text content blocks
    raise ``ValueError``, non-messages ``TypeError``; errors name ``messages[i]`` and the field.
    """
    lc = _import("langchain_core.messages")
    if isinstance(messages, (str, bytes, lc.BaseMessage)) or not isinstance(messages, Iterable):
        raise StateTypeError("messages", f"expected an iterable of BaseMessage, got {v.type_name(messages)}")
    return [
        within(path, _from_message, lc, message, path)
        for path, message in ((v.join("messages", index), message) for index, message in enumerate(messages))
    ]


def _role(lc: Any, message: object, path: str) -> str:
    for cls, role in ((lc.AIMessage, ASSISTANT), (lc.HumanMessage, USER), (lc.SystemMessage, SYSTEM)):
        if isinstance(message, cls):
            return role
    if isinstance(message, lc.ToolMessage):
        return TOOL
    if isinstance(message, lc.ChatMessage):
        return str(message.role)
    if isinstance(message, lc.BaseMessage):
        raise InvalidStateError(
            path,
            f"unsupported message type {type(message).__name__}; expected HumanMessage, AIMessage, "
            "SystemMessage, ToolMessage or ChatMessage",
        )
    raise StateTypeError(path, f"expected BaseMessage, got {v.type_name(message)}")


def _from_message(lc: Any, message: Any, path: str) -> Message:
    role = _role(lc, message, path)
    content = message.content
    if not isinstance(content, str):
        skip = _TOOL_CALL_BLOCKS if role == ASSISTANT else ()
        content = text_of_parts(content, v.join(path, "content"), skip=skip, allow_str=True)
    is_tool = isinstance(message, lc.ToolMessage)
    return Message(
        role,
        content,
        id=message.id,
        tool_calls=_tool_calls(message, path) if isinstance(message, lc.AIMessage) else (),
        tool_call_id=message.tool_call_id if is_tool else None,
        metadata=carried_metadata(name=message.name, error=is_tool and message.status == "error"),
    )


def _tool_calls(message: Any, path: str) -> tuple[ToolCall, ...]:
    calls: list[ToolCall] = []
    calls_path = v.join(path, "tool_calls")
    for index, call in enumerate(message.tool_calls):
        call_path = v.join(calls_path, index)
        args = v.get_mapping(call, "args", call_path)
        calls.append(
            ToolCall(
                v.get_optional_str(call, "id", call_path) or "",
                v.get_str(call, "name", call_path),
                dump_arguments(args, v.join(call_path, "args")),
            )
        )
    invalid_path = v.join(path, "invalid_tool_calls")
    for index, bad in enumerate(message.invalid_tool_calls):
        call_path = v.join(invalid_path, index)
        calls.append(
            ToolCall(
                v.get_optional_str(bad, "id", call_path) or "",
                v.get_optional_str(bad, "name", call_path) or "",
                v.get_optional_str(bad, "args", call_path) or "",
            )
        )
    return tuple(calls)


_history_lock = threading.Lock()
_history_class: Optional[type] = None


def __dir__() -> list[str]:
    """The module's names, the class built on first access included (``dir()``, documentation tools)."""
    return sorted({*globals(), *__all__})


def __getattr__(name: str) -> Any:
    """``RollingChatMessageHistory`` is built (importing ``langchain_core``) on first access."""
    if name == "RollingChatMessageHistory":
        global _history_class
        with _history_lock:
            if _history_class is None:
                _history_class = _build_history_class()
        return _history_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _build_history_class() -> type:
    base: Any = _import("langchain_core.chat_history").BaseChatMessageHistory

    class RollingChatMessageHistory(base):  # type: ignore[misc]  # base is Any: see module docstring
        """A LangChain chat history (``BaseChatMessageHistory``) backed by a rollmem memory.

        Takes any rollmem memory, sync or async. ``messages`` is
        ``to_langchain(memory.get_messages())``, the summary turn first; ``add_messages`` converts
        with ``from_langchain``, then calls ``memory.extend`` once (all or nothing; budgets and
        folds apply); ``clear`` clears the memory. With an async memory use LangChain's async API
        (``ainvoke``, ``aadd_messages``): the sync ``add_messages`` raises ``TypeError``.
        """

        def __init__(self, memory: Any) -> None:
            super().__init__()
            self.memory = memory
            self._is_async = inspect.iscoroutinefunction(memory.extend)

        @property
        def messages(self) -> list[Any]:
            """The memory's ``get_messages()`` (summary turn first), as LangChain messages."""
            return to_langchain(self.memory.get_messages())

        async def aget_messages(self) -> list[Any]:
            """:attr:`messages`; reading a memory never waits."""
            return self.messages

        def add_messages(self, messages: Sequence[Any]) -> None:
            """Convert, then ``memory.extend(...)``: all or nothing, at most one fold."""
            if self._is_async:
                raise TypeError(
                    "this history holds an async memory: use LangChain's async API (ainvoke, aadd_messages)"
                )
            self.memory.extend(from_langchain(messages))

        async def aadd_messages(self, messages: Sequence[Any]) -> None:
            """``await memory.extend(...)`` with an async memory; a sync one runs in an executor."""
            if self._is_async:
                await self.memory.extend(from_langchain(messages))
            else:
                await super().aadd_messages(messages)

        def clear(self) -> None:
            """``memory.clear()``: summary and buffer."""
            self.memory.clear()

        async def aclear(self) -> None:
            """``memory.clear()`` (never waits)."""
            self.memory.clear()

    RollingChatMessageHistory.__qualname__ = "RollingChatMessageHistory"
    RollingChatMessageHistory.__module__ = __name__
    return RollingChatMessageHistory

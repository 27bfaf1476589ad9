"""rollmem messages <-> OpenAI Chat Completions ``messages`` (plain dicts; the SDK is not imported).

The mapping, both ways:

- ``role`` and ``content`` as they are; any role passes (``"developer"`` included).
- An assistant message with tool calls and empty content is sent with ``"content": None``, as
  OpenAI itself writes it; ``None`` (or a missing ``content``) reads back as ``""``.
- ``Message.tool_calls`` <-> ``tool_calls``: ``{"id", "type": "function", "function": {"name",
  "arguments"}}``; ``arguments`` is the JSON string, unchanged.
- ``Message.tool_call_id`` <-> ``tool_call_id`` (tool results).
- ``metadata["name"]`` (a str) <-> the optional participant ``name``.
- Unpaired tool calls and results (the API rejects them): :func:`to_openai` sends a result as a
  ``tool`` message only when it directly follows the assistant message with its call (after other
  results of that message), and a call as a ``tool_calls`` entry only when it has such a result.
  Otherwise, as a memory can hold them (a result arriving after its call was evicted, a user
  message between a call and its result, a call still waiting), the result is sent as a user
  message ``[result of tool call ID] CONTENT`` and the call as a line ``[tool call ID:
  NAME(ARGUMENTS), no result]`` appended to its assistant message's content: nothing is dropped.

OpenAI messages cannot carry rollmem's ``id``, ``pinned`` or other metadata keys: they are not
sent. So ``from_openai(to_openai(messages)) == messages`` holds exactly for messages whose ``id``
is ``None``, ``pinned`` is false and ``metadata`` is empty or ``{"name": str}``, whose tool calls
and results pair up as above; tool calls on a
message whose role is not ``assistant``, or a ``tool_call_id`` on one that is not ``tool``, are
rejected with ``ValueError`` (no provider accepts them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .. import _validate as v
from ..errors import InvalidStateError, StateTypeError
from ..message import Message, ToolCall
from ._common import (
    carried_metadata,
    check_fields,
    check_mappings,
    check_messages,
    name_of,
    pair_tool_results,
    text_of_parts,
    within,
)

__all__ = ["from_openai", "to_openai"]

_FORMAT = "OpenAI"


def to_openai(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """The ``messages`` of a Chat Completions request, one dict per message, in order.

    Raises ``TypeError`` for an item that is not a :class:`~rollmem.Message`, and ``ValueError``
    for tool calls off an assistant message or a ``tool_call_id`` off a tool message; the
    error names ``messages[i]``.
    """
    result: list[dict[str, Any]] = []
    for message in pair_tool_results(check_messages(messages, _FORMAT)):
        content = None if message.tool_calls and not message.content else message.content
        item: dict[str, Any] = {"role": message.role, "content": content}
        name = name_of(message)
        if name is not None:
            item["name"] = name
        if message.tool_calls:
            item["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ]
        if message.tool_call_id is not None:
            item["tool_call_id"] = message.tool_call_id
        result.append(item)
    return result


def from_openai(items: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Read Chat Completions messages (request messages, or a response's ``message.model_dump()``).

    ``content`` may be a str, ``None``/missing (then an assistant ``refusal`` str, if any, becomes
    the content, else ``""``), or a list of ``{"type": "text", "text": ...}`` parts, joined with
    ``"\\n"``; other part types (images, audio) raise ``ValueError``. Unknown keys are ignored.
    Errors are ``ValueError``/``TypeError`` naming the field, e.g.
    ``items[3].tool_calls[0].function.name: expected str, got int``.
    """
    return [
        within(path, _from_item, item, path)
        for path, item in (
            (v.join("items", index), item) for index, item in enumerate(check_mappings(items, "items"))
        )
    ]


def _from_item(item: Mapping[str, Any], path: str) -> Message:
    role = v.get_str(item, "role", path)
    raw_calls = item.get("tool_calls")
    calls_path = v.join(path, "tool_calls")
    calls = () if raw_calls is None else v.expect_list(raw_calls, calls_path)
    tool_call_id = v.get_optional_str(item, "tool_call_id", path)
    check_fields(role, bool(calls), tool_call_id is not None, path, _FORMAT)
    return Message(
        role,
        _content(item, path),
        tool_calls=tuple(_tool_call(call, v.join(calls_path, index)) for index, call in enumerate(calls)),
        tool_call_id=tool_call_id,
        metadata=carried_metadata(name=v.get_optional_str(item, "name", path)),
    )


def _content(item: Mapping[str, Any], path: str) -> str:
    content = item.get("content")
    if content is None:
        return v.get_optional_str(item, "refusal", path) or ""
    if isinstance(content, str):
        return content
    content_path = v.join(path, "content")
    if isinstance(content, (list, tuple)):
        return text_of_parts(content, content_path)
    raise StateTypeError(
        content_path, f"expected str, a list of text parts or null, got {v.type_name(content)}"
    )


def _tool_call(data: object, path: str) -> ToolCall:
    call = v.expect_mapping(data, path)
    kind = v.get_str(call, "type", path, "function")
    if kind != "function":
        raise InvalidStateError(v.join(path, "type"), f"expected 'function', got {kind!r}")
    function_path = v.join(path, "function")
    function = v.get_mapping(call, "function", path)
    return ToolCall(
        v.get_str(call, "id", path),
        v.get_str(function, "name", function_path),
        v.get_str(function, "arguments", function_path, ""),
    )

"""rollmem messages <-> OpenAI Chat Completions ``messages`` and Responses API input items (plain
dicts; the SDK is not imported). The Responses pair, :func:`from_openai_responses` and
:func:`to_openai_responses`, is described on those functions; the rest of this docstring is about
Chat Completions.

The mapping, both ways:

- ``role`` and ``content`` as they are; any role passes (``"developer"`` included).
- An assistant message with tool calls and empty content is sent with ``"content": None``, as
  OpenAI itself writes it; ``None`` (or a missing ``content``) reads back as ``""``.
- ``Message.tool_calls`` <-> ``tool_calls``: ``{"id", "type": "function", "function": {"name",
  "arguments"}}``; ``arguments`` is the JSON string, unchanged.
- ``Message.tool_call_id`` <-> ``tool_call_id`` (tool results).
- ``metadata["name"]`` (a str) <-> the optional participant ``name``.
- A request opens with a user turn: when the first non-system message is not the user's (a
  buffer that starts with an assistant tool call), a user message ``CONTINUATION_TEXT`` is
  inserted before it (:func:`~rollmem.adapters.user_first`; Gemini's and Anthropic's rule, which
  OpenAI-compatible gateways to them enforce).
- Unpaired tool calls and results (the API rejects them): :func:`to_openai` sends a result as a
  ``tool`` message only when it directly follows the assistant message with its call (after other
  results of that message), and a call as a ``tool_calls`` entry only when it has such a result.
  Otherwise, as a memory can hold them (a result arriving after its call was evicted, a user
  message between a call and its result, a call still waiting), the result is sent as a user
  message ``[result of tool call ID] CONTENT`` (after the run of results it fell among; a
  repeated delivery once) and the call as a line ``[tool call ID: NAME(ARGUMENTS), no result]``
  appended to its assistant message's content: nothing is dropped.

OpenAI messages cannot carry rollmem's ``id``, ``pinned`` or other metadata keys: they are not
sent. So ``from_openai(to_openai(messages)) == messages`` holds exactly for messages whose ``id``
is ``None``, ``pinned`` is false and ``metadata`` is empty or ``{"name": str}``, whose tool calls
and results pair up as above and whose first non-system message is the user's; tool calls on a
message whose role is not ``assistant``, or a ``tool_call_id`` on one that is not ``tool``, are
rejected with ``ValueError`` (no provider accepts them).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from .. import _validate as v
from ..errors import InvalidStateError, StateTypeError
from ..message import ASSISTANT, TOOL, Message, ToolCall
from ._common import (
    carried_metadata,
    check_fields,
    check_mappings,
    check_messages,
    dump_arguments,
    for_provider,
    name_of,
    pair_in_turns,
    reject_scalar,
    text_of_parts,
    user_first,
    within,
)

__all__ = ["from_openai", "from_openai_responses", "responses_items", "to_openai", "to_openai_responses"]

_FORMAT = "OpenAI"


def to_openai(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """The ``messages`` of a Chat Completions request, one dict per message, in order.

    Raises ``TypeError`` for an item that is not a :class:`~rollmem.Message`, and ``ValueError``
    for tool calls off an assistant message or a ``tool_call_id`` off a tool message; the
    error names ``messages[i]``. The request follows :func:`~rollmem.adapters.for_provider`:
    unpaired calls and results as text, and a user turn first.
    """
    result: list[dict[str, Any]] = []
    for message in for_provider(check_messages(messages, _FORMAT)):
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


# -- the Responses API: input items <-> messages --------------------------------------------------

RESPONSES_ITEMS = "responses_items"
"""The ``Message.metadata`` key under which :func:`from_openai_responses` keeps the original items."""

_RESPONSES_FORMAT = "OpenAI Responses"
# Content parts whose ``text`` is their text; other parts (images, files, audio) read as ``[type]``.
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})


def from_openai_responses(items: Iterable[Any]) -> list[Message]:
    """Read Responses API input items (dicts, or SDK models with ``model_dump``) as messages.

    Each message keeps a copy of its items under ``metadata["responses_items"]``, so
    :func:`to_openai_responses` gives back equal dicts with the same keys. The mapping:

    - a message item (``{"role": ..., "content": ...}``, ``"type": "message"`` optional): that role;
      ``content`` a str, or a list of parts whose text (``input_text``/``output_text``/``refusal``)
      is joined with ``"\\n"``; any other part (an image, a file) reads as ``[input_image]``.
    - ``function_call``: an ``assistant`` message with one :class:`ToolCall` (``call_id``, ``name``,
      ``arguments``); ``function_call_output``: a ``tool`` message, ``tool_call_id`` its
      ``call_id``, content its ``output`` (a str, or parts as above). Memories pair them into one
      unit by call id, as they pair Chat Completions tool calls.
    - ``reasoning`` items form one message with the item that follows them (their summary text
      first in ``content``, then that item's; its role, calls and call id), so they are kept or
      evicted together; trailing reasoning items form an ``assistant`` message of their own.
    - any other item type: an ``assistant`` message whose content is the item as compact JSON;
      a ``*_call`` / ``*_call_output`` item with a str ``call_id`` (``computer_call``,
      ``custom_tool_call``, ...) carries it as a tool call / ``tool_call_id``, so it pairs too.

    Raises ``ValueError`` (``TypeError`` too for a wrong type) naming the bad field, e.g.
    ``items[3].call_id: expected str, got int``.
    """
    reject_scalar(items, "items", "an iterable of items")
    messages: list[Message] = []
    reasoning: list[tuple[dict[str, Any], str]] = []
    for index, raw in enumerate(items):
        path = v.join("items", index)
        item = _item_dict(raw, path)
        kind = _item_kind(item, path)
        if kind == "reasoning":
            reasoning.append((item, _reasoning_text(item, path)))
            continue
        messages.append(_grouped(reasoning, (item, _item_message(item, kind, path))))
        reasoning = []
    if reasoning:
        messages.append(_grouped(reasoning, None))
    return messages


def to_openai_responses(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Responses API input items for ``messages``, in order.

    A message read by :func:`from_openai_responses` gives back (copies of) its original items.
    Any other message is written from its fields: tool calls as ``function_call`` items (after a
    message item for non-empty content), a ``tool_call_id`` as a ``function_call_output``, the
    rest as ``{"role": ..., "content": ...}``; tool calls off an assistant message and a
    ``tool_call_id`` off a tool message raise ``ValueError`` naming ``messages[i]``.

    The request is one the API accepts from any buffer: a result whose call is not before it (the
    call was folded) is sent as a user message ``[result of tool call ID] CONTENT``, a call with no
    result after it as a line ``[tool call ID: NAME(ARGUMENTS), no result]`` in an assistant
    message (written from the fields, its original items not sent), and a user message
    ``CONTINUATION_TEXT`` opens the request when its first turn is another's
    (:func:`~rollmem.adapters.user_first`). Nothing is dropped.
    """
    checked = _checked_for_responses(messages)
    originals = {id(message) for message in checked}
    result: list[dict[str, Any]] = []
    for message in user_first(pair_in_turns(checked, skip_system=False, turns=False, by_id=True)):
        result.extend(_items(message) if id(message) in originals else _fields_items(message))
    return result


def responses_items(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """The Responses items of ``messages`` one by one, as they are: what :func:`to_openai_responses`
    writes without the provider rule (no call or result turned into text, no user turn added).
    For storing and reading items back, not for a request. Raises as :func:`to_openai_responses`."""
    return [item for message in _checked_for_responses(messages) for item in _items(message)]


def _checked_for_responses(messages: Iterable[Message]) -> list[Message]:
    checked = check_messages(messages)
    for index, message in enumerate(checked):
        path = v.join("messages", index)
        kept = message.metadata.get(RESPONSES_ITEMS)
        if kept is not None:
            kept_path = v.join(v.join(path, "metadata"), RESPONSES_ITEMS)
            for position, item in enumerate(v.expect_list(kept, kept_path)):
                v.expect_mapping(item, v.join(kept_path, position))
            continue
        check_fields(
            message.role, bool(message.tool_calls), message.tool_call_id is not None, path, _RESPONSES_FORMAT
        )
    return checked


def _items(message: Message) -> list[dict[str, Any]]:
    """(Copies of) the items a message keeps, else its items written from its fields."""
    kept = message.metadata.get(RESPONSES_ITEMS)
    if kept is None:
        return _fields_items(message)
    return [v.thaw(dict(item)) for item in kept]


def _fields_items(message: Message) -> list[dict[str, Any]]:
    """The items of a message written from its fields."""
    if message.tool_call_id is not None:
        return [{"type": "function_call_output", "call_id": message.tool_call_id, "output": message.content}]
    items: list[dict[str, Any]] = []
    if message.content or not message.tool_calls:
        items.append({"role": message.role, "content": message.content})
    items.extend(
        {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.arguments}
        for call in message.tool_calls
    )
    return items


def _item_dict(raw: object, path: str) -> dict[str, Any]:
    """A deep copy of the item as a dict; an SDK model is dumped (``exclude_unset``, JSON mode)."""
    if not isinstance(raw, Mapping):
        dump = getattr(raw, "model_dump", None)
        if not callable(dump):
            raise StateTypeError(
                path, f"expected a mapping or a model with model_dump, got {v.type_name(raw)}"
            )
        raw = v.expect_mapping(dump(exclude_unset=True, mode="json"), path)
    item = copy.deepcopy(dict(raw))
    for key in item:
        if not isinstance(key, str):
            raise StateTypeError(path, f"expected str keys, got {v.type_name(key)}")
    return item


def _item_kind(item: Mapping[str, Any], path: str) -> str:
    if "type" in item:
        return v.get_str(item, "type", path)
    if "role" in item:
        return "message"
    raise InvalidStateError(v.join(path, "type"), "missing required key (only a message may omit it)")


def _required(item: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in item:
        raise InvalidStateError(v.join(path, key), "missing required key")
    return item[key]


def _parts_text(value: object, path: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, (list, tuple)):
        raise StateTypeError(path, f"expected str or a list of parts, got {v.type_name(value)}")
    texts: list[str] = []
    for index, part in enumerate(value):
        part_path = v.join(path, index)
        part = v.expect_mapping(part, part_path)
        kind = v.get_str(part, "type", part_path)
        if kind in _TEXT_PARTS:
            texts.append(v.get_str(part, "text", part_path))
        elif kind == "refusal":
            texts.append(v.get_str(part, "refusal", part_path))
        else:
            texts.append(f"[{kind}]")
    return "\n".join(texts)


def _reasoning_text(item: Mapping[str, Any], path: str) -> str:
    summary_path = v.join(path, "summary")
    texts = []
    for index, part in enumerate(v.get_list(item, "summary", path, ())):
        part_path = v.join(summary_path, index)
        texts.append(v.get_str(v.expect_mapping(part, part_path), "text", part_path))
    return "\n".join(texts)


def _item_message(item: Mapping[str, Any], kind: str, path: str) -> Message:
    if kind == "message":
        role = v.get_str(item, "role", path)
        return Message(role, _parts_text(_required(item, "content", path), v.join(path, "content")))
    if kind == "function_call":
        call = ToolCall(
            v.get_str(item, "call_id", path),
            v.get_str(item, "name", path),
            v.get_str(item, "arguments", path),
        )
        return Message(ASSISTANT, "", tool_calls=(call,))
    if kind == "function_call_output":
        call_id = v.get_str(item, "call_id", path)
        output = _parts_text(_required(item, "output", path), v.join(path, "output"))
        return Message(TOOL, output, tool_call_id=call_id)
    text = dump_arguments(item, path)
    other_id = item.get("call_id")
    if isinstance(other_id, str) and kind.endswith("_call_output"):
        return Message(TOOL, text, tool_call_id=other_id)
    if isinstance(other_id, str) and kind.endswith("_call"):
        return Message(ASSISTANT, text, tool_calls=(ToolCall(other_id, kind),))
    return Message(ASSISTANT, text)


def _grouped(
    reasoning: list[tuple[dict[str, Any], str]], follower: Optional[tuple[dict[str, Any], Message]]
) -> Message:
    """One message for the reasoning items and the item that follows them (``None``: none follows)."""
    items = [entry[0] for entry in reasoning]
    texts = [entry[1] for entry in reasoning if entry[1]]
    if follower is None:
        return Message(ASSISTANT, "\n".join(texts), metadata={RESPONSES_ITEMS: items})
    item, message = follower
    if message.content:
        texts.append(message.content)
    items.append(item)
    return Message(
        message.role,
        "\n".join(texts),
        tool_calls=message.tool_calls,
        tool_call_id=message.tool_call_id,
        metadata={RESPONSES_ITEMS: items},
    )

"""rollmem messages <-> the Anthropic Messages API ``system`` + ``messages`` (plain dicts, no SDK).

:func:`to_anthropic` builds a request the API accepts:

- every ``system`` message (the summary turn of ``get_messages()`` included) goes, in order, into
  the top-level ``system`` string, joined with a blank line (``""`` when there is none: then
  leave ``system`` out of the request);
- user text becomes a ``text`` block; empty text makes no block (the API rejects empty text);
- assistant text plus one ``{"type": "tool_use", "id", "name", "input"}`` block per tool call,
  ``input`` being the call's ``arguments`` parsed as a JSON object (``""`` is ``{}``);
- a tool message becomes a ``{"type": "tool_result", "tool_use_id", "content"}`` block (plus
  ``"is_error": True`` when ``metadata["is_error"] is True``) in a user turn;
- consecutive turns of the same role are merged into one turn (a turn that is a single text block
  is sent as a plain string, otherwise as a list of blocks), so roles alternate;
- unpaired tool calls and results (the API rejects them) are sent as text: a result is a
  ``tool_result`` only when it directly follows the assistant message with its call (after other
  results of that message; system messages between do not count), and a call is a ``tool_use``
  only when it has such a result. Otherwise the result becomes a user text ``[result of tool call
  ID] CONTENT`` and the call a line ``[tool call ID: NAME(ARGUMENTS), no result]`` appended to
  its assistant message's text: nothing is dropped, and a user turn never has text before its
  ``tool_result`` blocks;
- when the first turn would be an assistant turn (a buffer that starts mid-conversation), a user
  turn :data:`CONTINUATION` is inserted before it, because the API requires a user turn first.

:func:`from_anthropic` reads ``system`` and ``messages`` back: a non-empty ``system`` becomes one
leading system message; each user ``text`` block a user message; each ``tool_result`` block a
tool message; in an assistant turn, each ``text`` block starts an assistant message and the
``tool_use`` blocks after it become its tool calls (``arguments`` = compact JSON of ``input``).

Exact round trips, ``from_anthropic(*to_anthropic(messages)) == messages``, hold when: at most one
system message, first, non-empty; the first other message is a user message; roles are only
user/assistant/system/tool; every user or assistant message has non-empty content or tool calls;
an assistant message with empty content does not directly follow an assistant message; every
tool message has a ``tool_call_id`` and every call and result pair up as above; tool-call
``arguments`` are compact JSON objects (``json.dumps(obj, separators=(",", ":"),
ensure_ascii=False)``); ``id`` is ``None``, ``pinned`` false, and ``metadata`` empty except
``{"is_error": True}`` on tool messages. Anything else the format cannot carry is merged as
above, or raises ``ValueError`` naming the message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Optional, Union

from .. import _validate as v
from ..errors import InvalidStateError, StateTypeError
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
from ._common import (
    carried_metadata,
    check_mappings,
    check_messages,
    dump_arguments,
    is_error,
    load_arguments,
    pair_tool_results,
    text_of_parts,
    within,
)

__all__ = ["CONTINUATION", "from_anthropic", "to_anthropic"]

#: The user turn :func:`to_anthropic` puts first when the conversation starts with the assistant.
CONTINUATION = "(conversation continues)"

_FORMAT = "Anthropic"
_Block = dict[str, Any]
_TURN_NAMES = {USER: "a user turn", ASSISTANT: "an assistant turn"}


def to_anthropic(
    messages: Iterable[Message], *, continuation: str = CONTINUATION
) -> tuple[str, list[dict[str, Any]]]:
    """``(system, messages)`` for a Messages API request: see the module docstring for the mapping.

    ``continuation`` is the text of the user turn inserted when the first turn is the assistant's.
    Raises ``TypeError`` for an item that is not a :class:`~rollmem.Message`; ``ValueError`` (naming
    ``messages[i]`` and the field) for a role other than user/assistant/system/tool, tool calls
    off an assistant message, a ``tool_call_id`` off a tool message, a tool message without
    ``tool_call_id``, or tool-call ``arguments`` that are not a JSON object.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(pair_tool_results(check_messages(messages, _FORMAT), skip_system=True)):
        path = v.join("messages", index)
        if message.role == SYSTEM:
            if message.content:
                system.append(message.content)
            continue
        role, blocks = _blocks(message, path)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if turns and turns[0]["role"] == ASSISTANT:
        turns.insert(0, {"role": USER, "content": [_text(continuation)]})
    for turn in turns:
        content = turn["content"]
        if len(content) == 1 and content[0]["type"] == "text":
            turn["content"] = content[0]["text"]
    return "\n\n".join(system), turns


def _text(text: str) -> _Block:
    return {"type": "text", "text": text}


def _blocks(message: Message, path: str) -> tuple[str, list[_Block]]:
    role = message.role
    if role == TOOL:
        if message.tool_call_id is None:
            raise InvalidStateError(
                v.join(path, "tool_call_id"), "a tool result needs the id of the tool call it answers"
            )
        block: _Block = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": message.content,
        }
        if is_error(message):
            block["is_error"] = True
        return USER, [block]
    if role not in (USER, ASSISTANT):
        raise InvalidStateError(
            v.join(path, "role"), f"expected 'user', 'assistant', 'system' or 'tool', got {role!r}"
        )
    blocks = [_text(message.content)] if message.content else []
    calls_path = v.join(path, "tool_calls")
    for index, call in enumerate(message.tool_calls):
        call_path = v.join(calls_path, index)
        arguments = load_arguments(call.arguments, v.join(call_path, "arguments"))
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
    return role, blocks


def from_anthropic(
    system: Union[str, Iterable[Mapping[str, Any]], None], messages: Iterable[Mapping[str, Any]]
) -> list[Message]:
    """Read a Messages API ``system`` and ``messages`` back into rollmem messages, in order.

    ``system`` may be a str, a list of ``text`` blocks (joined with a blank line), ``""`` or
    ``None``. ``content`` may be a str or a list of blocks; ``text``, ``tool_use`` (assistant
    turns) and ``tool_result`` (user turns; its ``content`` a str or ``text`` blocks joined with
    ``"\\n"``) are read, any other block (images, thinking) raises ``ValueError``: convert SDK
    objects with ``.model_dump()`` and drop what rollmem should not keep first. Errors name the
    field, e.g. ``messages[2].content[1].input: expected a mapping, got str``.
    """
    result: list[Message] = []
    text = _system_text(system)
    if text:
        result.append(Message(SYSTEM, text))
    for index, turn in enumerate(check_mappings(messages, "messages")):
        path = v.join("messages", index)
        within(path, _read_turn, turn, path, result)
    return result


def _system_text(system: object) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    if isinstance(system, (list, tuple)):
        return text_of_parts(system, "system", sep="\n\n")
    raise StateTypeError("system", f"expected str, a list of text blocks or None, got {v.type_name(system)}")


def _read_turn(turn: Mapping[str, Any], path: str, out: list[Message]) -> None:
    role = v.get_str(turn, "role", path)
    if role not in (USER, ASSISTANT):
        raise InvalidStateError(v.join(path, "role"), f"expected 'user' or 'assistant', got {role!r}")
    content = turn.get("content")
    content_path = v.join(path, "content")
    if isinstance(content, str):
        out.append(Message(role, content))
        return
    if not isinstance(content, (list, tuple)):
        raise StateTypeError(content_path, f"expected str or a list of blocks, got {v.type_name(content)}")
    pending: Optional[tuple[str, list[ToolCall]]] = None  # an assistant message still collecting calls
    for index, raw in enumerate(content):
        block_path = v.join(content_path, index)
        block = v.expect_mapping(raw, block_path)
        kind = v.get_str(block, "type", block_path)
        if kind == "text":
            text = v.get_str(block, "text", block_path)
            if role == USER:
                out.append(Message(USER, text))
                continue
            _flush(pending, out)
            pending = (text, [])
        elif kind == "tool_use" and role == ASSISTANT:
            if pending is None:
                pending = ("", [])
            pending[1].append(_tool_call(block, block_path))
        elif kind == "tool_result" and role == USER:
            out.append(_tool_result(block, block_path))
        else:
            raise InvalidStateError(
                v.join(block_path, "type"), f"unsupported block type {kind!r} in {_TURN_NAMES[role]}"
            )
    _flush(pending, out)


def _flush(pending: Optional[tuple[str, list[ToolCall]]], out: list[Message]) -> None:
    if pending is not None:
        out.append(Message(ASSISTANT, pending[0], tool_calls=tuple(pending[1])))


def _tool_call(block: Mapping[str, Any], path: str) -> ToolCall:
    arguments = v.get_mapping(block, "input", path)
    return ToolCall(
        v.get_str(block, "id", path),
        v.get_str(block, "name", path),
        dump_arguments(arguments, v.join(path, "input")),
    )


def _tool_result(block: Mapping[str, Any], path: str) -> Message:
    content = block.get("content", "")
    if isinstance(content, (list, tuple)):
        content = text_of_parts(content, v.join(path, "content"))
    elif not isinstance(content, str):
        raise StateTypeError(
            v.join(path, "content"), f"expected str or a list of text blocks, got {v.type_name(content)}"
        )
    return Message(
        TOOL,
        content,
        tool_call_id=v.get_str(block, "tool_use_id", path),
        metadata=carried_metadata(error=v.get_bool(block, "is_error", path, False)),
    )

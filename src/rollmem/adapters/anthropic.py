"""rollmem messages <-> the Anthropic Messages API ``system`` + ``messages`` (plain dicts, no SDK).

:func:`to_anthropic` builds a request the API accepts:

- every ``system`` message (the summary turn of ``get_messages()`` included) goes, in order, into
  the top-level ``system`` string, joined with a blank line (``""`` when there is none: then
  leave ``system`` out of the request);
- user text becomes a ``text`` block; empty or whitespace-only text makes no block, nor system
  text, nor ``tool_result`` content (the API rejects whitespace-only text);
- assistant text plus one ``{"type": "tool_use", "id", "name", "input"}`` block per tool call,
  ``input`` being the call's ``arguments`` parsed as a JSON object (``""`` is ``{}``);
- a tool message becomes a ``{"type": "tool_result", "tool_use_id", "content"}`` block (plus
  ``"is_error": True`` when ``metadata["is_error"] is True``) in a user turn;
- consecutive turns of the same role are merged into one turn (a turn that is a single text block
  is sent as a plain string, otherwise as a list of blocks), so roles alternate;
- unpaired tool calls and results (the API rejects them) are sent as text: a result is a
  ``tool_result`` only when it directly follows the assistant turn with its call (after other
  results of that turn; system messages between do not count), and a call is a ``tool_use`` only
  when it has such a result. Otherwise the result becomes a user text ``[result of tool call ID]
  CONTENT``, after the run of results it fell among, and the call a line ``[tool call ID:
  NAME(ARGUMENTS), no result]`` appended to its assistant message's text: nothing is dropped (a
  repeated delivery is sent once), and a user turn never has text before its ``tool_result`` blocks;
- when the first turn would be an assistant turn (a buffer that starts mid-conversation), a user
  turn is inserted before it, because the API requires a user turn first: its text is
  ``continuation`` when given, else :data:`~rollmem.adapters.CONTINUATION_TEXT` (a system message,
  the summary, comes first) or :data:`~rollmem.adapters.CONTINUATION_TEXT_PLAIN` (none does), as
  :func:`~rollmem.adapters.user_first` writes it for every renderer.

With ``cache=True`` (prompt caching), the request carries ``cache_control`` breakpoints, at most
three of Anthropic's four: ``system`` is a list of text blocks, one per system message, with a
breakpoint on the first (the system prompt, which stays cached across folds) and on the last (the
summary, cached until the next fold); and one on the last block of the last turn (the
conversation so far, read back by the next request), always on blocks that are sent. The
breakpoint is ``{"type": "ephemeral"}``, plus ``"ttl": cache_ttl`` when given (``"5m"`` or
``"1h"``). With ``cache=False`` (the default) no ``cache_control`` is written and ``system`` is a
str.

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
from typing import Any, Literal, Optional, Union, overload

from .. import _validate as v
from ..errors import InvalidStateError, StateTypeError
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
from ._common import CONTINUATION_TEXT as _CONTINUATION_TEXT
from ._common import CONTINUATION_TEXT_PLAIN as _CONTINUATION_TEXT_PLAIN
from ._common import (
    carried_metadata,
    check_mappings,
    check_messages,
    dump_arguments,
    is_error,
    load_arguments,
    pair_in_turns,
    text_of_parts,
    user_first,
    within,
)

__all__ = ["CONTINUATION", "from_anthropic", "to_anthropic"]

#: The text of the user turn :func:`to_anthropic` puts first when the conversation starts with the
#: assistant after a system message: the same as :data:`rollmem.adapters.CONTINUATION_TEXT`
#: (before 0.7.0 it was ``"(conversation continues)"``).
CONTINUATION = _CONTINUATION_TEXT
_CACHE_TTLS = ("5m", "1h")

_FORMAT = "Anthropic"
_Block = dict[str, Any]
_TURN_NAMES = {USER: "a user turn", ASSISTANT: "an assistant turn"}


@overload
def to_anthropic(
    messages: Iterable[Message],
    *,
    continuation: Optional[str] = None,
    cache: Literal[False] = False,
    cache_ttl: None = None,
) -> tuple[str, list[dict[str, Any]]]: ...


@overload
def to_anthropic(
    messages: Iterable[Message],
    *,
    continuation: Optional[str] = None,
    cache: bool,
    cache_ttl: Optional[str] = None,
) -> tuple[Union[str, list[dict[str, Any]]], list[dict[str, Any]]]: ...


def to_anthropic(
    messages: Iterable[Message],
    *,
    continuation: Optional[str] = None,
    cache: bool = False,
    cache_ttl: Optional[str] = None,
) -> tuple[Union[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """``(system, messages)`` for a Messages API request: see the module docstring for the mapping.

    ``continuation`` is the text of the user turn inserted when the first turn is the assistant's
    (default: the rule's text, see :func:`~rollmem.adapters.user_first`). ``cache=True`` adds
    ``cache_control`` breakpoints and makes ``system`` a list of text blocks (``""`` when there is
    no system message); ``cache_ttl`` (``"5m"`` or ``"1h"``, with ``cache=True`` only) sets their
    lifetime. Raises ``TypeError`` for an item that is not a :class:`~rollmem.Message`;
    ``ValueError`` (naming ``messages[i]`` and the field) for a role other than
    user/assistant/system/tool, tool calls off an assistant message, a ``tool_call_id`` off a tool
    message, a tool message without ``tool_call_id``, or tool-call ``arguments`` that are not a
    JSON object; ``ValueError`` for a ``cache_ttl`` other than those or an empty ``continuation``.
    """
    if continuation is not None and not v.check_str("continuation", continuation).strip():
        raise ValueError("continuation must contain non-whitespace text")
    v.check_bool("cache", cache)
    if cache_ttl is not None and (not cache or cache_ttl not in _CACHE_TTLS):
        raise ValueError(f"cache_ttl must be None, or '5m' or '1h' with cache=True; got {cache_ttl!r}")
    checked = check_messages(messages, _FORMAT)
    converted = {  # errors name the caller's positions
        id(message): _blocks(message, v.join("messages", index))
        for index, message in enumerate(checked)
        if message.role != SYSTEM
    }
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in user_first(pair_in_turns(checked, skip_system=True, turns=True), text=continuation):
        if message.role == SYSTEM:
            if message.content.strip():
                system.append(message.content)
            continue
        found = converted.get(id(message))
        role, blocks = _blocks(message, "messages") if found is None else found
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if turns and turns[0]["role"] == ASSISTANT:  # the buffer opens with a user turn with no text
        text = continuation or (_CONTINUATION_TEXT if system else _CONTINUATION_TEXT_PLAIN)
        turns.insert(0, {"role": USER, "content": [_text(text)]})
    if cache:
        return _cached(system, turns, cache_ttl)
    for turn in turns:
        content = turn["content"]
        if len(content) == 1 and content[0]["type"] == "text":
            turn["content"] = content[0]["text"]
    return "\n\n".join(system), turns


def _cached(
    system: list[str], turns: list[dict[str, Any]], ttl: Optional[str]
) -> tuple[Union[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """The request with ``cache_control`` breakpoints (see the module docstring); turns keep lists."""
    control: dict[str, str] = {"type": "ephemeral"}
    if ttl is not None:
        control["ttl"] = ttl
    blocks: list[dict[str, Any]] = [_text(text) for text in system]
    if blocks:
        blocks[0]["cache_control"] = dict(control)
        blocks[-1]["cache_control"] = dict(control)
    if turns:
        turns[-1]["content"][-1]["cache_control"] = dict(control)
    return (blocks or ""), turns


def _text(text: str) -> _Block:
    return {"type": "text", "text": text}


def _blocks(message: Message, path: str) -> tuple[str, list[_Block]]:
    role = message.role
    if role == TOOL:
        if message.tool_call_id is None:
            raise InvalidStateError(
                v.join(path, "tool_call_id"), "a tool result needs the id of the tool call it answers"
            )
        block: _Block = {"type": "tool_result", "tool_use_id": message.tool_call_id}
        if message.content.strip():
            block["content"] = message.content
        if is_error(message):
            block["is_error"] = True
        return USER, [block]
    if role not in (USER, ASSISTANT):
        raise InvalidStateError(
            v.join(path, "role"), f"expected 'user', 'assistant', 'system' or 'tool', got {role!r}"
        )
    blocks = [_text(message.content)] if message.content.strip() else []
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

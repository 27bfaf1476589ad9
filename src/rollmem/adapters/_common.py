"""What the provider adapters share: argument checks, text parts, tool-call JSON, carried metadata."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from typing import Any, Callable, Optional, TypeVar

from .. import _validate as v
from ..errors import InvalidStateError, StateTypeError
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall

_T = TypeVar("_T")


def within(path: str, read: Callable[..., _T], *args: Any) -> _T:
    """``read(*args)`` for the item at ``path``: an error a :class:`Message` constructor raises
    (text that is not valid Unicode) is reported under ``path`` (``items[3].content``)."""
    try:
        return read(*args)
    except InvalidStateError as error:
        raise v.nest(path, error) from None


#: The metadata keys an adapter may carry: OpenAI/LangChain ``name``, Anthropic/LangChain tool errors.
NAME = "name"
IS_ERROR = "is_error"


def reject_scalar(value: object, path: str, expected: str) -> None:
    if isinstance(value, (str, bytes, Mapping, Message)) or not isinstance(value, Iterable):
        raise StateTypeError(path, f"expected {expected}, got {v.type_name(value)}")


def check_messages(messages: Iterable[Message], fmt: Optional[str] = None) -> list[Message]:
    """``messages`` as a list of :class:`Message`, errors naming ``messages[i]``. With ``fmt``,
    also rejects what no provider format carries: tool calls off an assistant message, a
    ``tool_call_id`` off a tool message."""
    reject_scalar(messages, "messages", "an iterable of Message")
    result = list(messages)
    for index, message in enumerate(result):
        path = v.join("messages", index)
        if not isinstance(message, Message):
            raise StateTypeError(path, f"expected Message, got {v.type_name(message)}")
        if fmt is not None:
            check_fields(message.role, bool(message.tool_calls), message.tool_call_id is not None, path, fmt)
    return result


def check_fields(role: str, has_calls: bool, has_call_id: bool, path: str, fmt: str) -> None:
    """Tool calls belong to assistant messages, ``tool_call_id`` to tool messages, in every format."""
    if has_calls and role != ASSISTANT:
        raise InvalidStateError(
            v.join(path, "tool_calls"), f"only assistant messages carry tool calls in the {fmt} format"
        )
    if has_call_id and role != TOOL:
        raise InvalidStateError(
            v.join(path, "tool_call_id"), f"only tool messages carry a tool_call_id in the {fmt} format"
        )


def check_mappings(items: Iterable[Mapping[str, Any]], path: str) -> list[Mapping[str, Any]]:
    """``items`` as a list of mappings, errors naming ``path[i]``."""
    reject_scalar(items, path, "an iterable of mappings")
    return [v.expect_mapping(item, v.join(path, index)) for index, item in enumerate(items)]


def text_of_parts(
    parts: Iterable[Any], path: str, *, skip: Collection[str] = (), allow_str: bool = False, sep: str = "\n"
) -> str:
    """The text of a list of ``{"type": "text", "text": ...}`` parts, joined with ``sep``.

    Part types in ``skip`` are passed over; any other type raises (nothing is dropped silently).
    With ``allow_str``, a bare string is a text part too (LangChain content lists).
    """
    texts: list[str] = []
    for index, part in enumerate(parts):
        part_path = v.join(path, index)
        if allow_str and isinstance(part, str):
            texts.append(part)
            continue
        part = v.expect_mapping(part, part_path)
        kind = v.get_str(part, "type", part_path)
        if kind == "text":
            texts.append(v.get_str(part, "text", part_path))
        elif kind not in skip:
            raise InvalidStateError(
                v.join(part_path, "type"), f"unsupported part type {kind!r}; only text parts are supported"
            )
    return sep.join(texts)


def name_of(message: Message) -> Optional[str]:
    """The participant name a message carries in ``metadata["name"]``, when it is a str."""
    name = message.metadata.get(NAME)
    return name if isinstance(name, str) else None


def is_error(message: Message) -> bool:
    """Whether a tool message is marked ``metadata["is_error"] = True``."""
    return message.metadata.get(IS_ERROR) is True


def carried_metadata(name: Optional[str] = None, error: bool = False) -> dict[str, Any]:
    """The metadata a converted message gets back from the fields a format carries."""
    meta: dict[str, Any] = {}
    if name is not None:
        meta[NAME] = name
    if error:
        meta[IS_ERROR] = True
    return meta


def dump_arguments(value: Mapping[str, Any], path: str) -> str:
    """A tool-call input as compact JSON (``{"a":1}``, non-ASCII kept), key order preserved."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise StateTypeError(path, f"not JSON-serializable: {exc}") from exc


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def load_arguments(arguments: str, path: str) -> dict[str, Any]:
    """A tool call's ``arguments`` as a JSON object; ``""`` is ``{}``. Anything else raises."""
    if not arguments:
        return {}
    try:
        value = json.loads(arguments)
    except ValueError as exc:
        raise InvalidStateError(path, f"expected a JSON object, got invalid JSON ({exc})") from exc
    if not isinstance(value, dict):
        kind = "null" if value is None else _JSON_KINDS[type(value)]
        raise InvalidStateError(path, f"expected a JSON object, got a JSON {kind}")
    return value


def try_load_arguments(arguments: str) -> Optional[dict[str, Any]]:
    """:func:`load_arguments`, or ``None`` when ``arguments`` is not a JSON object."""
    try:
        return load_arguments(arguments, "")
    except InvalidStateError:
        return None


def orphan_result_text(message: Message) -> str:
    """The user text an unpaired tool result is sent as: ``[result of tool call c1] 18C``."""
    kind = "error from" if is_error(message) else "result of"
    return f"[{kind} tool call {message.tool_call_id}] {message.content}"


def unpaired_call_text(call: ToolCall) -> str:
    """The assistant text an unanswered tool call is sent as: ``[tool call c1: f({}), no result]``."""
    return f"[tool call {call.id}: {call.name}({call.arguments}), no result]"


def pair_tool_results(messages: list[Message], *, skip_system: bool = False) -> list[Message]:
    """``messages`` as every provider accepts them: a tool result stays a result only when it
    directly follows the assistant message with its call (after other results of that message;
    with ``skip_system``, system messages in between do not count); each call stays a call only
    when it has such a result. An unpaired call becomes text appended to its assistant message
    (:func:`unpaired_call_text`), an unpaired result a user message (:func:`orphan_result_text`),
    moved after the results it fell among, so it never splits a call from its results; a result
    that repeats one already sent (same call id, content and error flag) is sent once. Nothing
    else is left out. Returns the list itself when all pair up."""
    return pair_in_turns(messages, skip_system=skip_system, turns=False)


def pair_in_turns(
    messages: list[Message], *, skip_system: bool, turns: bool, by_id: bool = False
) -> list[Message]:
    """:func:`pair_tool_results`; with ``turns`` (Anthropic, where consecutive messages of one
    role are one turn), the calls of consecutive assistant messages are answered together; with
    ``by_id`` (the OpenAI Responses API's looser rule), a result pairs with any earlier call of
    its id not answered yet, whatever items come between."""
    paired: set[int] = set()  # indexes of the tool messages that stay results
    answered: set[tuple[int, str]] = set()  # (index of the assistant message, call id)
    open_calls: dict[str, int] = {}  # call id -> index of its assistant message, in the current run
    previous = ""
    for index, message in enumerate(messages):
        if message.role == TOOL and message.tool_call_id is not None:
            caller = open_calls.pop(message.tool_call_id, None)  # a second result for a call is unpaired
            if caller is not None:
                paired.add(index)
                answered.add((caller, message.tool_call_id))
            previous = TOOL
            continue
        if skip_system and message.role == SYSTEM:
            continue
        if not (by_id or (turns and message.role == previous == ASSISTANT)):
            open_calls = {}
        for call in message.tool_calls if message.role == ASSISTANT else ():
            open_calls.setdefault(call.id, index)
        previous = message.role
    return _repair(messages, paired, answered, skip_system)


def _repair(
    messages: list[Message], paired: set[int], answered: set[tuple[int, str]], skip_system: bool
) -> list[Message]:
    """``messages`` with the results not in ``paired`` and the calls not in ``answered`` as text,
    that text of results put after the run of results (and, with ``skip_system``, system
    messages) it is in, and a repeated unpaired result left out."""
    calls = sum(len(m.tool_calls) for m in messages if m.role == ASSISTANT)
    results = sum(1 for m in messages if m.role == TOOL and m.tool_call_id is not None)
    if len(paired) == results and len(answered) == calls:
        return messages
    repaired: list[Message] = []
    deferred: list[Message] = []  # unpaired results as text, sent when their run of results ends
    sent: set[tuple[str, str, bool]] = set()  # (call id, content, error) of each result sent
    for index, message in enumerate(messages):
        if message.role == TOOL and message.tool_call_id is not None:
            key = (message.tool_call_id, message.content, is_error(message))
            if index in paired:
                repaired.append(message)
            elif key not in sent:
                deferred.append(Message(USER, orphan_result_text(message), id=message.id))
            sent.add(key)
            continue
        if not (skip_system and message.role == SYSTEM):
            repaired += deferred
            deferred = []
        if message.role == ASSISTANT and message.tool_calls:
            kept: dict[str, ToolCall] = {}  # a call id twice in one message: the first stays a call
            unpaired: list[ToolCall] = []
            for call in message.tool_calls:
                if (index, call.id) in answered and call.id not in kept:
                    kept[call.id] = call
                else:
                    unpaired.append(call)
            if not unpaired:
                repaired.append(message)
                continue
            texts = [message.content] if message.content else []
            texts.extend(unpaired_call_text(call) for call in unpaired)
            repaired.append(replace(message, content="\n".join(texts), tool_calls=tuple(kept.values())))
        else:
            repaired.append(message)
    return repaired + deferred


#: The text of the user turn :func:`user_first` opens a request with when its first turn is not
#: the user's (Anthropic and Gemini refuse a conversation that opens with an assistant turn) and
#: a system message (the summary) comes before it.
CONTINUATION_TEXT = "(The conversation continues from the summary above.)"
#: The same turn's text when no system message comes before the first turn (no summary to refer to).
CONTINUATION_TEXT_PLAIN = "(The conversation continues.)"

#: The roles :func:`user_first` passes over: they are not turns of the conversation.
SYSTEM_ROLES = frozenset({SYSTEM, "developer"})


def user_first(messages: list[Message], *, text: Optional[str] = None) -> list[Message]:
    """``messages`` with a user turn inserted before the first non-system message (``system`` and
    ``developer`` are passed over) when that message is not the user's. Its text is ``text``, by
    default :data:`CONTINUATION_TEXT` when a system message (the summary) comes first, else
    :data:`CONTINUATION_TEXT_PLAIN`. The inserted turn depends only on what comes before the first
    buffered message, so it is stable between folds (a cached prefix stays valid). Returns the
    list itself when it already opens with a user turn (or has no turn at all)."""
    for index, message in enumerate(messages):
        if message.role in SYSTEM_ROLES:
            continue
        if message.role == USER:
            return messages
        if text is None:
            text = CONTINUATION_TEXT if index else CONTINUATION_TEXT_PLAIN
        return [*messages[:index], Message(USER, text), *messages[index:]]
    return messages


def for_provider(messages: list[Message], *, skip_system: bool = False) -> list[Message]:
    """``messages`` as every provider accepts them: tool results paired with their calls
    (:func:`pair_tool_results`) and the first non-system turn the user's (:func:`user_first`).
    Nothing is dropped; between two folds the result of a grown buffer extends the previous one
    (once no call of the shorter buffer is still waiting for its result)."""
    return user_first(pair_tool_results(messages, skip_system=skip_system))

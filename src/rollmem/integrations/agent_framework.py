"""Microsoft Agent Framework: a rolling summary as a ``CompactionStrategy``.

Needs the ``agent-framework`` extra on Python 3.10+ (``pip install "rollmem[agent-framework]"``:
``agent-framework-core``). Importing this module does not import ``agent_framework``; building a
:class:`RollingCompaction` does, and raises :class:`~rollmem.errors.MissingExtraError` (an
``ImportError``) when it is missing.

Use one object in two places::

    rolling = RollingCompaction(max_tokens=2000, summarize_fn=summarize)
    agent = Agent(client, tools=[...], compaction_strategy=rolling, context_providers=[rolling])

As the compaction strategy, before every model call (the tool loop's included), it folds the
oldest messages into a running summary with the rules of :class:`~rollmem.AsyncRollingMemory`
(it drives one): over ``max_tokens`` by ``token_counter``, the oldest whole units go down to
``target_tokens``; a unit is an assistant message with ``function_call`` s together with the
messages holding their ``function_result`` s (parallel calls included), so no request splits a
call from its result; the newest unit always stays; the kept part opens with a user turn when it
can. What leaves goes to one ``summarize_fn(summary, evicted)`` call, each message exactly once.
System messages (those a context provider adds for a run, say) are not part of the conversation:
never counted, never folded, left where they are. The request is then: the system messages the
list opens with, the summary as a system message (marked, see :data:`SUMMARY_MARKER`), a user turn
:data:`rollmem.adapters.CONTINUATION_TEXT` when the kept messages would not open with the user's
(the rule of :func:`rollmem.adapters.for_provider`), then the kept messages verbatim. Folded
messages stay in the list, marked excluded, as the framework's own strategies leave them.

As a context provider it keeps that state (summary, fold position, token costs) per session in
``session.state[source_id]`` (JSON values), so whatever persists the session (``session.to_dict()``
/ ``AgentSession.from_dict``) persists the summary too: a new process continues without
summarizing or counting anything again. A run's folds are committed to the session when the run
ends, after the history provider stored its messages; a run that fails commits nothing, like the
history. The fold position is found again by fingerprints (role and contents) of the last folded
and the first kept message, so the history provider may load the whole history or leave out the
messages marked excluded (``skip_excluded=True``). Without ``context_providers=[rolling]`` the
state lives in the object, for one conversation. Checked with ``agent-framework-core`` 1.23.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import threading
import uuid
from collections import OrderedDict, deque
from collections.abc import Mapping
from typing import Any, Optional, Union

from .. import _validate as v
from .._extras import import_extra
from ..adapters import CONTINUATION_TEXT
from ..counters import counter_identity
from ..errors import InvalidStateError
from ..memory import AsyncRollingMemory, AsyncSummarizeFn, SummarizeFn, TokenCounter
from ..message import ASSISTANT, SYSTEM, TOOL, USER, Message, ToolCall
from ..policies import cached_target

__all__ = ["DEFAULT_MAX_TOKENS", "DEFAULT_SOURCE_ID", "SUMMARY_MARKER", "RollingCompaction"]

# The defaults, in one place: those of rollmem.integrations.langchain.RollingMemoryMiddleware
# until the core publishes its cheapest configuration.
DEFAULT_MAX_TOKENS = 2000
"""``max_tokens`` when none is given (the LangChain middleware's default)."""
DEFAULT_SOURCE_ID = "rollmem"
"""The context-provider ``source_id`` when none is given: the key of the state in ``session.state``."""

SUMMARY_MARKER = "rollmem"
"""The ``additional_properties`` key marking the messages this strategy inserts (the summary
and the continuation turn). They are rebuilt on every call and never stored as history."""

_STATE_VERSION = 1
_EXCLUDED = "_excluded"  # agent_framework.EXCLUDED_KEY: messages the framework leaves out of a request
_EXCLUDE_REASON = "_exclude_reason"
_REASON = "rollmem_summarized"


def _import() -> Any:
    return import_extra(
        "agent_framework",
        package="agent-framework-core",
        extra="agent-framework",
        feature="rollmem.integrations.agent_framework.RollingCompaction",
    )


# -- conversion ------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:  # pragma: no cover - a circular structure
        return str(value)


def _arguments(value: Any) -> str:
    if value is None:
        return ""
    return _text(value)


def _convert(message: Any) -> list[Message]:
    """One Agent Framework message as rollmem messages: the message itself (its text, its
    ``function_call`` s as tool calls, ``[type]`` for content without text of its own) and one
    ``tool`` message per ``function_result``. Reasoning content travels unshown."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    results: list[Message] = []
    for content in message.contents:
        kind = content.type
        if kind == "text":
            texts.append(content.text or "")
        elif kind == "function_call":
            calls.append(ToolCall(content.call_id or "", content.name or "", _arguments(content.arguments)))
        elif kind == "function_result":
            error: dict[str, Any] = {"is_error": True} if content.exception else {}
            results.append(Message(TOOL, _text(content.result), tool_call_id=content.call_id, metadata=error))
        elif kind != "text_reasoning":
            texts.append(f"[{kind}]")
    role = message.role if isinstance(message.role, str) else str(message.role)
    if not results or texts or calls:
        head_role = ASSISTANT if calls else (USER if role == TOOL else role)
        meta: dict[str, Any] = {"name": message.author_name} if isinstance(message.author_name, str) else {}
        results.insert(0, Message(head_role, "\n".join(texts), tool_calls=calls, metadata=meta))
    return results


def _fingerprint(message: Any) -> str:
    """A message's identity that survives copies and serialization: its role and contents (the
    framework sets ``author_name`` and ids after the fact; they are left out)."""
    contents = []
    for content in message.contents:
        data = content.to_dict(exclude_none=True)
        data.pop("additional_properties", None)
        data.pop("raw_representation", None)
        contents.append(data)
    payload = [str(message.role), contents]
    text = json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _is_ours(message: Any) -> bool:
    return bool(message.additional_properties.get(SUMMARY_MARKER))


# -- state -----------------------------------------------------------------------------------------


def _new_state() -> dict[str, Any]:
    return {
        "version": _STATE_VERSION,
        "summary": "",
        "folded": 0,
        "anchor": None,
        "next": None,
        "costs": [],
        "known": 0,
    }


def _checked_state(state: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The state read back from a session, every field checked (errors name ``where.field``)."""
    if not state:
        return _new_state()
    version = v.get_int(state, "version", where)
    if version != _STATE_VERSION:
        raise InvalidStateError(
            v.join(where, "version"),
            f"unsupported state version {version}; this rollmem reads version {_STATE_VERSION}",
        )
    costs = v.get_list(state, "costs", where)
    for index, cost in enumerate(costs):
        if not v.is_int(cost) or cost < 0:
            raise InvalidStateError(v.join(v.join(where, "costs"), index), f"expected int >= 0, got {cost!r}")
    return {
        "version": version,
        "summary": v.get_str(state, "summary", where),
        "folded": v.check_int(v.join(where, "folded"), state.get("folded"), 0),
        "anchor": v.get_optional_str(state, "anchor", where),
        "next": v.get_optional_str(state, "next", where),
        "costs": list(costs),
        "known": v.check_int(v.join(where, "known"), state.get("known"), 0),
        "counter": v.get_optional_str(state, "counter", where),
        "writer": v.get_optional_str(state, "writer", where),
        "live": v.get_optional_str(state, "live", where),
    }


class _Plan:
    """One call's view of the list: the conversation (every message but the system ones, which
    instructions and context providers add for a run and which stay where they are) and how
    much of it is already folded."""

    __slots__ = ("aligned", "conversation", "standing", "start")

    def __init__(self, messages: list[Any], state: Mapping[str, Any], where: str) -> None:
        standing = 0  # the system messages the list opens with: the summary goes after them
        while standing < len(messages) and messages[standing].role == SYSTEM:
            standing += 1
        self.standing = standing
        self.conversation = [message for message in messages if message.role != SYSTEM]
        self.aligned = True  # whether conversation[start] is the message the stored costs start with
        self.start = self._locate(state, where)

    def _locate(self, state: Mapping[str, Any], where: str) -> int:
        """Where the unfolded messages start: after the last folded message (``anchor``), at
        the first kept one (``next``). Checked where the state expects them, else searched (a
        history provider may leave folded messages out, ``skip_excluded=True``)."""
        folded, last, first = state["folded"], state["anchor"], state["next"]
        conversation = self.conversation
        if last is None:
            return 0
        prints: dict[int, str] = {}

        def at(index: int) -> Optional[str]:
            if not 0 <= index < len(conversation):
                return None
            if index not in prints:
                prints[index] = _fingerprint(conversation[index])
            return prints[index]

        if at(folded - 1) == last and at(folded) == first:
            return int(folded)
        found = [index for index in range(len(conversation)) if at(index) == first]
        if not found:  # the first kept message is gone: start after the last folded one
            self.aligned = False
            found = [index + 1 for index in range(len(conversation)) if at(index) == last]
        if not found:
            raise InvalidStateError(
                v.join(where, "anchor"),
                "the messages hold neither the last message folded into the summary nor the first "
                "one kept: this state belongs to another conversation, or the history provider "
                "did not load the history (give each session its own state: "
                "context_providers=[the RollingCompaction])",
            )
        return min(found, key=lambda index: (at(index - 1) != last, abs(index - folded)))


class _Live:
    """A memory kept between calls of one conversation: its buffer holds the converted messages
    of ``conversation[start:start + len(sizes)]`` (``sizes``: how many each converted to); the
    last of them is ``last``. ``evicted`` collects what a fold takes out."""

    __slots__ = ("evicted", "key", "last", "memory", "sizes", "token")

    def __init__(self, memory: AsyncRollingMemory, evicted: list[Message]) -> None:
        self.memory = memory
        self.evicted = evicted
        self.sizes: deque[int] = deque()
        self.last: Any = None
        self.token = uuid.uuid4().hex  # names it in the state ("live"): one per conversation
        self.key: tuple[Any, ...] = ()  # the state it left


_LIVE_CONVERSATIONS = 256  # live memories kept between calls, most recently used last


def _live_key(state: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a live memory checks the state against (its costs are compared apart)."""
    return (
        state["summary"],
        state["folded"],
        state["anchor"],
        state["next"],
        state["known"],
        state["writer"],
    )


class _Binding:
    """A run's working copy of its session's state, and the binding of the run around it."""

    __slots__ = ("outer", "working")

    def __init__(self, working: dict[str, Any], outer: Optional[_Binding]) -> None:
        self.working = working
        self.outer = outer


# -- the strategy ----------------------------------------------------------------------------------


class RollingCompaction:
    """An Agent Framework ``CompactionStrategy`` (and context provider) keeping a running summary
    plus the newest messages within ``max_tokens``.

    ``RollingCompaction(max_tokens=2000, summarize_fn=None, token_counter=None, *,
    target_tokens=None, source_id="rollmem")``: the budget, summarizer (``summarize_fn(summary,
    evicted) -> str``, sync or a coroutine function, ``evicted`` being rollmem
    :class:`~rollmem.Message` objects) and counter are :class:`~rollmem.AsyncRollingMemory`'s,
    checked the same way; ``target_tokens`` defaults to :func:`rollmem.cached_target`
    ``(max_tokens)``. Without ``summarize_fn`` folded messages just leave the requests.
    Pass the object as the agent's ``compaction_strategy`` and in its ``context_providers`` (the
    module docstring states the rules and where the state lives).

    Each message is counted once: its cost is kept in the state with the counter's identity
    (:func:`rollmem.counters.counter_identity`); after a restart the stored costs are used when
    the identity matches, else the kept messages are counted again once. If ``summarize_fn``
    raises, the error propagates out of the run and the summary and fold position stay as
    they were. A state from another conversation, or a history that no longer holds the last
    folded message, raises :class:`~rollmem.errors.InvalidStateError` rather than summarizing
    or dropping anything twice.

    Between calls the memory is kept (the newest 256 conversations, named by the state's
    ``live`` token), so a call converts and counts only the messages added since the last one;
    a state it does not match rebuilds it once.
    """

    after_run_once_per_turn = False
    """Read by the agent: the state is committed after every run."""

    def __init__(
        self,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        summarize_fn: Optional[Union[SummarizeFn, AsyncSummarizeFn]] = None,
        token_counter: Optional[TokenCounter] = None,
        *,
        target_tokens: Optional[int] = None,
        source_id: str = DEFAULT_SOURCE_ID,
    ) -> None:
        memory = AsyncRollingMemory(max_tokens, summarize_fn, token_counter, target_tokens=target_tokens)
        self.source_id = v.check_str("source_id", source_id, allow_empty=False)
        _import()
        self.max_tokens = max_tokens
        self.target_tokens = cached_target(max_tokens) if target_tokens is None else target_tokens
        self.summarize_fn = summarize_fn
        self.token_counter = token_counter
        self._counter_identity = counter_identity(memory.token_counter)
        self._writer = uuid.uuid4().hex  # costs this object wrote are trusted whatever the counter
        self._own: dict[str, Any] = _new_state()
        self._lives: OrderedDict[str, _Live] = OrderedDict()  # by the state's "live" token
        self._lives_lock = threading.Lock()
        self._bound: contextvars.ContextVar[Optional[_Binding]] = contextvars.ContextVar(
            f"rollmem_compaction_{self._writer}", default=None
        )

    # -- the context provider: the state per session ---------------------------------------------

    async def before_run(self, *, agent: Any, session: Any, context: Any, state: dict[str, Any]) -> None:
        """Bind this run to the session's state (a working copy, committed by :meth:`after_run`)."""
        working = _checked_state(state, f"session.state[{self.source_id!r}]")
        self._bound.set(_Binding(working, self._bound.get()))

    async def after_run(self, *, agent: Any, session: Any, context: Any, state: dict[str, Any]) -> None:
        """Commit the run's folds to the session's state; a run nested in another (an agent used
        as a tool) gives the outer run its binding back."""
        binding = self._bound.get()
        if binding is not None:
            state.clear()
            state.update(binding.working)
            self._bound.set(binding.outer)

    def state(self, session: Any = None) -> dict[str, Any]:
        """A copy of the state: of ``session`` (an ``AgentSession``), else this object's own.
        Keys: ``summary``, ``folded`` (conversation messages folded), ``costs`` (of the kept
        messages measured so far, ``known`` of them), and bookkeeping."""
        if session is None:
            return {**self._own, "costs": list(self._own["costs"])}
        return _checked_state(session.state.get(self.source_id, {}), f"session.state[{self.source_id!r}]")

    def summary(self, session: Any = None) -> str:
        """The running summary of ``session`` (else of this object's own conversation)."""
        return str(self.state(session)["summary"])

    # -- the compaction strategy -----------------------------------------------------------------

    async def __call__(self, messages: list[Any]) -> bool:
        """Fold what the budget says and rebuild ``messages`` in place (see the module docstring).
        Returns whether the request changed."""
        if not isinstance(messages, list):
            raise TypeError(f"messages: expected a list of Message, got {v.type_name(messages)}")
        bound = self._bound.get()
        state = self._own if bound is None else bound.working
        where = "state" if bound is None else f"session.state[{self.source_id!r}]"
        before = list(messages)
        previous = {
            message.additional_properties[SUMMARY_MARKER]: message for message in before if _is_ours(message)
        }
        messages[:] = [message for message in messages if not _is_ours(message)]
        plan = _Plan(messages, state, where)
        await self._fold(plan, state)
        flags_changed = self._render(messages, plan, state, previous)
        moved = len(before) != len(messages) or any(a is not b for a, b in zip(before, messages))
        return flags_changed or moved

    def _memory(self, evicted: list[Message]) -> AsyncRollingMemory:
        return AsyncRollingMemory(
            self.max_tokens,
            self.summarize_fn,
            self.token_counter,
            target_tokens=self.target_tokens,
            on_evict=evicted.extend,
        )

    def _known(self, plan: _Plan, state: Mapping[str, Any]) -> int:
        """How many of the unfolded messages have trusted costs in the state."""
        trusted = state.get("writer") == self._writer or (
            self._counter_identity is not None and state.get("counter") == self._counter_identity
        )
        if not trusted or not plan.aligned:
            return 0
        return min(int(state["known"]), len(plan.conversation) - plan.start)

    async def _fold(self, plan: _Plan, state: dict[str, Any]) -> None:
        """Run the unfolded messages through a rollmem memory: new ones are counted, the stored
        costs of the others are reused; commit the fold (if any) to ``state``. The memory of the
        last call is reused when the state is the one it left and its messages are still there
        (only the new messages are converted); else one is rebuilt from the state."""
        live = self._take(plan, state)
        if live is None:
            live = self._rebuild(plan, state)
        unfolded = plan.conversation[plan.start :]
        new = unfolded[len(live.sizes) :]
        converted: list[Message] = []
        for message in new:
            parts = _convert(message)
            converted.extend(parts)
            live.sizes.append(len(parts))
        memory = live.memory
        try:
            await memory.extend(converted)
        except BaseException:
            # Nothing folded: the summary and fold position stay; the costs measured are kept.
            state.update(costs=memory.costs(), known=len(unfolded), counter=self._counter_identity)
            state.update(folded=plan.start, writer=self._writer)
            raise
        finally:
            live.last = unfolded[-1] if unfolded else None
        folded, left = 0, len(live.evicted)
        live.evicted.clear()
        sizes = live.sizes
        while sizes and sizes[0] <= left:
            left -= sizes.popleft()
            folded += 1
        if folded:
            state.update(summary=memory.summary, anchor=_fingerprint(unfolded[folded - 1]))
            state.update(next=_fingerprint(unfolded[folded]) if folded < len(unfolded) else None)
        kept_costs = memory.costs() if not left else []  # a fold that ended inside a message:
        state.update(  # its rest is counted again next time
            folded=plan.start + folded,
            costs=kept_costs,
            known=len(unfolded) - folded if kept_costs else 0,
            counter=self._counter_identity,
            writer=self._writer,
        )
        plan.start += folded
        if not left:
            self._keep(state, live)

    def _take(self, plan: _Plan, state: Mapping[str, Any]) -> Optional[_Live]:
        """The live memory the last call left with ``state``, if the conversation still holds its
        messages where they were (the last one checked: the same object)."""
        token = state.get("live")
        if token is None or not plan.aligned or state.get("writer") != self._writer:
            return None
        with self._lives_lock:
            live = self._lives.pop(token, None)
        if live is None or live.key != _live_key(state) or state["costs"] != live.memory.costs():
            return None
        seen = plan.start + len(live.sizes)
        conversation = plan.conversation
        if not live.sizes or seen > len(conversation):
            return None
        last = conversation[seen - 1]  # the same object, or one saying the same (reloaded)
        return live if last is live.last or _fingerprint(last) == _fingerprint(live.last) else None

    def _rebuild(self, plan: _Plan, state: Mapping[str, Any]) -> _Live:
        """A memory holding the unfolded messages that have trusted stored costs (not counted again)."""
        unfolded = plan.conversation[plan.start :]
        known = self._known(plan, state)
        converted: list[Message] = []
        evicted: list[Message] = []
        live = _Live(self._memory(evicted), evicted)
        for message in unfolded[:known]:
            parts = _convert(message)
            converted.extend(parts)
            live.sizes.append(len(parts))
        costs: list[int] = state["costs"]
        if len(costs) != len(converted):
            converted, costs = [], []
            live.sizes.clear()
        live.memory.restore({"version": 2, "summary": state["summary"], "buffer": converted}, costs=costs)
        return live

    def _keep(self, state: dict[str, Any], live: _Live) -> None:
        state["live"] = live.token
        live.key = _live_key(state)
        with self._lives_lock:
            self._lives[live.token] = live
            while len(self._lives) > _LIVE_CONVERSATIONS:
                self._lives.popitem(last=False)

    def _render(
        self, messages: list[Any], plan: _Plan, state: Mapping[str, Any], previous: dict[str, Any]
    ) -> bool:
        """Mark folded messages excluded, insert the summary (and a user turn when the kept
        messages would not open with one; the same objects as last time when their text is the
        same); returns whether any exclusion mark changed."""
        changed = False
        for index, message in enumerate(plan.conversation):
            properties = message.additional_properties
            folded = index < plan.start
            changed = changed or bool(properties.get(_EXCLUDED, False)) != folded
            properties[_EXCLUDED] = folded
            if folded:
                properties[_EXCLUDE_REASON] = _REASON
        kept = plan.conversation[plan.start :]
        inserted = []
        if state["summary"]:
            inserted.append(_ours(previous, "summary", SYSTEM, state["summary"]))
        if kept and kept[0].role != USER:
            inserted.append(_ours(previous, "continuation", USER, CONTINUATION_TEXT))
        messages[plan.standing : plan.standing] = inserted  # before every message of the conversation
        return changed


def _ours(previous: Mapping[str, Any], kind: str, role: str, text: str) -> Any:
    """The message this strategy inserts: ``previous[kind]`` when it says the same, else a new one."""
    message = previous.get(kind)
    if message is not None and message.role == role and message.text == text:
        return message
    af = _import()
    properties = {SUMMARY_MARKER: kind, _EXCLUDED: False}
    return af.Message(role, [text], message_id=f"rollmem-{kind}", additional_properties=properties)

"""Sessions in Redis or Redis Cluster: :class:`RedisStore` (extra ``redis``, redis-py 5 or later).

The module holds three ideas, in this order: the layout (the Lua scripts, the keys, the
arguments a script takes and how its replies read: pure functions); the clients (made from a
URL or given, the guards around each call, closing); and the store, whose every operation is a
flow yielding the Redis calls it needs, performed by the clients.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import re
import threading
import uuid
from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from itertools import repeat
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, TypeVar, Union

from .. import _validate as v
from .._extras import import_extra
from .._flow import arun, run
from .._validate import redact_url
from ..errors import ConflictError, InvalidStateError, StoreUnavailableError
from . import rules
from ._protocol import Head, LogEntry, LogWrite, StoredLog
from ._server import FlowStore, LoopBound

if TYPE_CHECKING:
    import redis
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster
    from redis.commands.core import AsyncScript, Script

    SyncClient = Union[redis.Redis, redis.cluster.RedisCluster]
    AsyncClient = Union[redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster]

__all__ = ["RedisStore"]

# -- the layout: scripts, keys, arguments, replies ---------------------------------------------

# Every script gets KEYS = the head hash and the log list (one hash slot). Its ARGV are named
# once, in order, by a field tuple: _script_args builds them from it and the script reads them
# as Lua locals of the same names (the header _named writes, with LAYOUT); the entries, if any,
# follow from ARGV[FIRST_ENTRY] on. Absent fields are "".

_LOAD_FIELDS = ("since_incarnation", "since_revision", "since_tail")
_WRITE_FIELDS = (
    "token",  # the writer's token (see _WRITERS)
    "ttl_ms",  # "" for none
    "create",  # '1' for a create
    "incarnation",  # the one the writer loaded (a new one for a create)
    "expected_revision",
    "expected_tail",
    "has_summary",  # '1' when summary is set
    "summary",
    "cut",
    "keep_seqs",  # comma separated
    "replace",
    "has_counter",  # '1' when counter is set
    "counter",
    "append_only",
)


def _named(source: str, fields: tuple[str, ...]) -> str:
    """``source`` after a header binding each of ``fields`` to its ARGV as a Lua local, with
    ``FIRST_ENTRY`` replaced by the index of the first argument after them."""
    header = "".join(f"local {name} = ARGV[{index}]\n" for index, name in enumerate(fields, 1))
    header += f"local LAYOUT = '{rules.LAYOUT_VERSION}'\n"
    return header + source.replace("FIRST_ENTRY", str(len(fields) + 1))


def _script_args(fields: tuple[str, ...], values: dict[str, str], entries: Sequence[str] = ()) -> list[str]:
    """The ARGV of a script: ``values`` in the order of ``fields`` ("" where absent), then ``entries``."""
    unknown = set(values) - set(fields)
    if unknown:
        raise KeyError(f"not script fields: {sorted(unknown)}")
    return [values.get(name, "") for name in fields] + list(entries)


# _LOAD_SCRIPT, ARGV: _LOAD_FIELDS (a since head, "" when none).
# Returns {'h', incarnation, revision, summary, tail, has counter, counter, delta, entries...},
# {'v', layout} (a head of another layout version) or {'n'}.
_LOAD_SCRIPT = _named(
    """
local h = redis.call('HMGET', KEYS[1], 'incarnation', 'revision', 'summary', 'tail', 'counter', 'layout')
if h[6] and h[6] ~= LAYOUT then
  return {'v', h[6]}
end
if h[1] then
  local entries
  local delta = 0
  if since_incarnation ~= '' and since_incarnation == h[1] and since_revision == h[2] then
    local n = tonumber(h[4]) - tonumber(since_tail)
    if n == 0 then
      entries = {}
      delta = 1
    elseif n > 0 then
      entries = redis.call('LRANGE', KEYS[2], -n, -1)
      delta = 1
    end
  end
  if not entries then
    entries = redis.call('LRANGE', KEYS[2], 0, -1)
  end
  local reply = {'h', h[1], h[2], h[3] or '', h[4], h[5] and 1 or 0, h[5] or '', delta}
  for i = 1, #entries do
    reply[#reply + 1] = entries[i]
  end
  return reply
end
return {'n'}
""",
    _LOAD_FIELDS,
)

# _WRITE_SCRIPT, ARGV: _WRITE_FIELDS, then the entries as cost, message pairs.
# Returns {'ok', incarnation, revision, summary, tail, has counter, counter},
# {'c', <same head fields>} (a conflict), {'c'} (no live session) or {'v', layout} (a head of
# another layout version).
# A create starts from an empty head (revision 0, tail 0) and goes on as any other write. A write
# resent by the client (its reply was lost) finds its token among the last _WRITERS writers'
# tokens kept in the head, and succeeds again without being applied twice.
# Removing "below cut, except keep" is the rule of rules.apply_write, here in Lua.
_WRITERS = 8
_WRITE_SCRIPT = _named(
    """
local function head_reply(tag)
  local h = redis.call('HMGET', KEYS[1], 'incarnation', 'revision', 'summary', 'tail', 'counter')
  return {tag, h[1], h[2], h[3] or '', h[4], h[5] and 1 or 0, h[5] or ''}
end
local function expire()
  for i = 1, 2 do
    if ttl_ms == '' then
      redis.call('PERSIST', KEYS[i])
    else
      redis.call('PEXPIRE', KEYS[i], ttl_ms)
    end
  end
end
local function number(value, field)
  local n = tonumber(value)
  if n == nil then
    return redis.error_reply('rollmem: the ' .. field .. ' field of ' .. KEYS[1] .. ' is not a number')
  end
  return n
end
local h = redis.call('HMGET', KEYS[1], 'incarnation', 'revision', 'tail', 'counter', 'writers', 'layout')
if h[6] and h[6] ~= LAYOUT then
  return {'v', h[6]}
end
local append = append_only == '1'
local writers, revision, tail = '', 0, 0
if not h[1] then
  if create ~= '1' then
    return {'c'}
  end
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'incarnation', incarnation, 'summary', summary)
else
  writers = h[5] or ''
  if string.find(' ' .. writers .. ' ', ' ' .. token .. ' ', 1, true) then
    return head_reply('ok')
  end
  if create == '1' or h[1] ~= incarnation then
    return head_reply('c')
  end
  revision = number(h[2], 'revision')
  if type(revision) == 'table' then return revision end
  tail = number(h[3], 'tail')
  if type(tail) == 'table' then return tail end
  if expected_revision ~= '' and revision ~= tonumber(expected_revision) then
    return head_reply('c')
  end
  if expected_tail ~= '' and tail ~= tonumber(expected_tail) then
    return head_reply('c')
  end
  if append and ((has_counter == '1') ~= (h[4] ~= false) or (h[4] and h[4] ~= counter)) then
    return head_reply('c')
  end
  if replace == '1' then
    redis.call('DEL', KEYS[2])
  elseif cut ~= '0' then
    local below = tonumber(cut)
    local keep = {}
    for seq in string.gmatch(keep_seqs, '%d+') do
      keep[seq] = true
    end
    local kept = {}
    while true do
      local first = redis.call('LINDEX', KEYS[2], 0)
      if not first then break end
      local seq = string.match(first, '^(%d+)\t')
      if not seq or tonumber(seq) >= below then break end
      redis.call('LPOP', KEYS[2])
      if keep[seq] then
        kept[#kept + 1] = first
      end
    end
    for i = #kept, 1, -1 do
      redis.call('LPUSH', KEYS[2], kept[i])
    end
  end
end
for i = FIRST_ENTRY, #ARGV, 2 do
  redis.call('RPUSH', KEYS[2], tail .. '\t' .. ARGV[i] .. '\t' .. ARGV[i + 1])
  tail = tail + 1
end
local recent = {token}
for other in string.gmatch(writers, '%S+') do
  if #recent == _WRITERS then break end
  recent[#recent + 1] = other
end
redis.call('HSET', KEYS[1], 'tail', tail, 'writers', table.concat(recent, ' '), 'layout', LAYOUT)
if has_summary == '1' then
  redis.call('HSET', KEYS[1], 'summary', summary)
end
if not append then
  redis.call('HSET', KEYS[1], 'revision', revision + 1)
  if has_counter == '1' then
    redis.call('HSET', KEYS[1], 'counter', counter)
  else
    redis.call('HDEL', KEYS[1], 'counter')
  end
end
expire()
return head_reply('ok')
""".replace("_WRITERS", str(_WRITERS)),
    _WRITE_FIELDS,
)

_MAX_TTL_MS = 10**13  # ~317 years: longer ttls mean "practically never" and would overflow Redis
_GLOB_SPECIAL = frozenset("*?[]\\")
_CONNECT_TIMEOUT = 5.0
_SOCKET_TIMEOUT = 10.0
_ID_ESCAPES = {"%": "%25", "{": "%7B", "}": "%7D"}
_ID_ESCAPED = re.compile("[%{}]")
_ID_UNESCAPED = re.compile("%(25|7B|7D)")
# What follows the prefix in a session's head key: the group is the encoded session id.
_HEAD = re.compile(r"\{([^{}]+)\}:head\Z")


def _text(value: Union[bytes, str]) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _numbers(parts: Sequence[str]) -> bool:
    """Whether a log item's sequence number and cost read as numbers (>= 0 and >= -1)."""
    return parts[0].isdecimal() and (parts[1].isdecimal() or parts[1] == "-1")


def _glob_literal(text: str) -> str:
    return "".join("\\" + char if char in _GLOB_SPECIAL else char for char in text)


def _ttl_ms(ttl: Optional[float]) -> str:
    return "" if ttl is None else str(min(_MAX_TTL_MS, max(1, math.ceil(ttl * 1000))))


def _flag(value: bool) -> str:
    return "1" if value else ""


def _optional(number: Optional[int]) -> str:
    return "" if number is None else str(number)


def _encode_id(session_id: str) -> str:
    """The session id inside the hash tag: ``%``, ``{`` and ``}`` percent-encoded, so the tag
    never holds a brace and the encoding keeps prefixes (``a`` starts ``ab`` in both forms)."""
    return _ID_ESCAPED.sub(lambda match: _ID_ESCAPES[match.group()], session_id)


def _decode_id(encoded: str) -> str:
    return _ID_UNESCAPED.sub(lambda match: chr(int(match.group(1), 16)), encoded)


def _load_args(since: Optional[Head]) -> list[str]:
    values = () if since is None else (since.incarnation, str(since.revision), str(since.tail))
    return _script_args(_LOAD_FIELDS, dict(zip(_LOAD_FIELDS, values)))


def _write_args(change: LogWrite, token: str) -> list[str]:
    values = {
        "token": token,
        "ttl_ms": _ttl_ms(change.ttl),
        "create": _flag(change.create),
        "incarnation": uuid.uuid4().hex if change.create else change.incarnation,
        "expected_revision": _optional(change.expected_revision),
        "expected_tail": _optional(change.expected_tail),
        "has_summary": _flag(change.summary is not None),
        "summary": change.summary or "",
        "cut": str(change.cut),
        "keep_seqs": ",".join(str(seq) for seq in change.keep),
        "replace": _flag(change.replace),
        "has_counter": _flag(change.counter is not None),
        "counter": change.counter or "",
        "append_only": _flag(change.is_append),
    }
    entries = [part for entry in change.entries for part in (str(entry.cost), entry.message)]
    return _script_args(_WRITE_FIELDS, values, entries)


def _string(session_id: str, value: Union[bytes, str], what: str) -> str:
    try:
        return _text(value)
    except UnicodeDecodeError as exc:
        problem = f"stored {what} is not valid UTF-8 ({exc.reason} at byte {exc.start})"
        raise InvalidStateError("", f"session {rules.shown(session_id)}: {problem}") from None


def _malformed(session_id: str, what: str) -> StoreUnavailableError:
    return StoreUnavailableError(
        f"Redis holds a malformed entry for session {rules.shown(session_id)}: {what}"
    )


def _head(session_id: str, fields: list[Any]) -> Head:
    incarnation, revision, summary, tail, has_counter, counter = fields
    try:
        return Head(
            _string(session_id, incarnation, "incarnation"),
            int(revision),
            _string(session_id, summary, "summary"),
            int(tail),
            _string(session_id, counter, "counter") if int(has_counter) else None,
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InvalidStateError):
            raise
        raise _malformed(session_id, f"head fields {fields!r:.80}") from None


def _entries(session_id: str, raws: list[Any]) -> tuple[LogEntry, ...]:
    """The log items as entries. A load reads every one, so the common case is one decode for
    all and a split each, columns converted at C speed; anything odd is read item by item, to
    name it."""
    texts: list[str] = []
    if raws and all(type(raw) is bytes for raw in raws):
        with suppress(UnicodeDecodeError):
            texts = b"\n".join(raws).decode("utf-8").split("\n")
    if len(texts) == len(raws):  # no item held a newline (a message's JSON never does)
        parts = [text.split("\t", 2) for text in texts]
        with suppress(IndexError):  # an item of fewer than three parts
            seqs = [part[0] for part in parts]
            costs = [part[1] for part in parts]
            messages = [part[2] for part in parts]
            # the rule of _numbers, a column at a time (a cost of -1 is rare)
            if all(map(str.isdecimal, seqs)) and (
                all(map(str.isdecimal, costs)) or all(map(_numbers, zip(seqs, costs)))
            ):
                numbers = zip(messages, map(int, costs), map(int, seqs))
                return tuple(map(tuple.__new__, repeat(LogEntry), numbers))
    return tuple(_entry(session_id, raw) for raw in raws)


def _entry(session_id: str, raw: Union[bytes, str]) -> LogEntry:
    text = _string(session_id, raw, "message")
    parts = text.split("\t", 2)
    if len(parts) != 3 or not _numbers(parts):
        raise _malformed(session_id, f"log entry {text!r:.60}")
    return LogEntry(parts[2], int(parts[1]), int(parts[0]))


def _check_layout(store: object, layout: Optional[Union[bytes, str]]) -> None:
    """Refuse a head of another layout version (``None``: the field is absent)."""
    if layout is not None:
        text = _text(layout)
        rules.check_layout(store, int(text) if text.isdecimal() else text)


def _loaded(store: object, session_id: str, reply: list[Any]) -> Optional[StoredLog]:
    """What a load script's reply holds."""
    kind = _text(reply[0])
    if kind == "n":
        return None
    if kind == "v":
        _check_layout(store, reply[1])
    head = _head(session_id, reply[1:7])
    return StoredLog(head, _entries(session_id, reply[8:]), bool(int(reply[7])))


def _snapshot(store: object, session_id: str, results: list[Any]) -> Optional[StoredLog]:
    """A whole session from the replies of a :class:`_ReadAll`: the head's fields, the log items."""
    fields, items = results
    incarnation, revision, summary, tail, counter, layout = fields
    _check_layout(store, layout)
    if incarnation is None:
        return None
    head = _head(
        session_id, [incarnation, revision, summary or b"", tail, counter is not None, counter or b""]
    )
    return StoredLog(head, _entries(session_id, items))


def _written(store: object, session_id: str, change: LogWrite, reply: list[Any]) -> Head:
    """The new head of a write that went through; raises the ``ConflictError`` of a lost write."""
    kind = _text(reply[0])
    if kind == "ok":
        return _head(session_id, reply[1:7])
    if kind == "v":
        _check_layout(store, reply[1])
    live = None if len(reply) == 1 else _head(session_id, reply[1:7])
    error = rules.write_conflict(session_id, live, change)
    if error is None:  # e.g. a create lost against a session whose head is identical
        error = ConflictError(f"session {rules.shown(session_id)}: another writer wrote first")
    raise error


# -- the Redis calls a flow yields -------------------------------------------------------------

_SCRIPTS = (_LOAD_SCRIPT, _WRITE_SCRIPT)


class _Script(NamedTuple):
    """Run ``_SCRIPTS[which]`` (0: load, 1: write) with ``keys`` and ``args``; reply: its reply."""

    which: int
    keys: list[str]
    args: list[str]


class _ReadAll(NamedTuple):
    """A whole load's reads in one MULTI/EXEC (it sends the log items as they are, where a script
    would copy each into Lua and back); reply: the head's fields and the log items."""

    keys: list[str]


class _Delete(NamedTuple):
    """``DEL keys``; reply: how many went."""

    keys: list[str]


class _Scan(NamedTuple):
    """SCAN for ``pattern`` to the end (in a cluster: on every primary); reply: the keys, as a set of str."""

    pattern: str


_Command = Union[_Script, _ReadAll, _Delete, _Scan]
T = TypeVar("T")
# A store operation: yields the Redis calls it needs, receives their replies, returns its result.
Flow = Generator[_Command, Any, T]


def _send(client: Any, scripts: Any, command: _Command, *, whole: bool = False) -> Any:
    """Send ``command`` on ``client``: its reply (a blocking client), an awaitable of it (an
    asyncio client), or for a scan an iterator (async iterator) of keys. ``whole``: send a
    script itself (``EVAL``), when its node lost the cached one (a restart, a failover) and the
    driver's reload went to the primaries it knew."""
    if isinstance(command, _Script):
        if whole:
            return client.eval(_SCRIPTS[command.which], len(command.keys), *command.keys, *command.args)
        return scripts[command.which](keys=command.keys, args=command.args)
    if isinstance(command, _ReadAll):
        pipeline = client.pipeline(transaction=True)
        pipeline.hmget(command.keys[0], "incarnation", "revision", "summary", "tail", "counter", "layout")
        pipeline.lrange(command.keys[1], 0, -1)
        return pipeline.execute()
    if isinstance(command, _Scan):
        return client.scan_iter(match=command.pattern, count=1000)
    return client.delete(*command.keys)


# -- the clients -----------------------------------------------------------------------------------


def _register(client: Any) -> Any:
    return (client.register_script(_LOAD_SCRIPT), client.register_script(_WRITE_SCRIPT))


_REDIS_MODULES = (
    "redis",
    "redis.asyncio",
    "redis.asyncio.cluster",
    "redis.asyncio.retry",
    "redis.backoff",
    "redis.cluster",
    "redis.retry",
)


def _import_redis() -> ModuleType:
    for name in _REDIS_MODULES[1:]:
        import_extra(name, package="redis", extra="redis", feature="RedisStore")
    return import_extra("redis", package="redis", extra="redis", feature="RedisStore")


def _raised_in(error: BaseException, package: ModuleType) -> bool:
    """Whether ``error`` was raised by code of ``package`` (its innermost frame is there)."""
    tb = error.__traceback__
    if tb is None or not package.__file__:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename.startswith(os.path.dirname(package.__file__) + os.sep)


class _AsyncSide:
    """An asyncio client with its scripts, and for a cluster client the operations in flight
    (redis-py's async cluster raises on a full node pool and then drops sockets other tasks use)
    and its one first ``initialize`` (first used by many tasks at once, it closes connections
    that other tasks are using)."""

    def __init__(self, client: AsyncClient, gate: Optional[int], cluster: bool) -> None:
        self.client = client
        self.scripts: tuple[AsyncScript, AsyncScript] = _register(client)
        self.gate = None if gate is None else asyncio.Semaphore(gate)
        self.init = asyncio.Lock()
        self.ready = not cluster


async def _close_side(side: _AsyncSide) -> None:
    await side.client.aclose()


class _Clients:
    """The clients one :class:`RedisStore` talks through: made from its URL on first use (or
    given), the guards around every call (an operation slot in a cluster, driver errors as
    ``StoreUnavailableError``), how a command is performed on each side, and closing. The
    asyncio client it makes is bound to the loop that made it (:class:`._server.LoopBound`)."""

    def __init__(
        self,
        name: str,
        url_or_client: Union[str, SyncClient, AsyncClient],
        cluster: bool,
        max_connections: int,
        pool_timeout: float,
    ) -> None:
        driver = _import_redis()
        self._name = name
        self._max_connections = max_connections
        self._pool_timeout = pool_timeout
        self._gate: Optional[threading.BoundedSemaphore] = None  # a cluster client's operations in flight
        self._lock = threading.Lock()
        self.url: Optional[str] = None
        self.cluster = cluster
        self.closed = False
        self._sync: Optional[tuple[SyncClient, tuple[Script, Script]]] = None
        self._given_async: Optional[AsyncClient] = None
        self._async: Optional[Union[_AsyncSide, LoopBound[_AsyncSide]]] = None
        if isinstance(url_or_client, str):
            try:
                driver.connection.parse_url(url_or_client)  # a bad URL fails here, not on first use
            except ValueError as exc:
                raise ValueError(f"url_or_client is not a valid Redis URL: {redact_url(str(exc))}") from None
            self.url = url_or_client
        elif isinstance(url_or_client, (driver.asyncio.Redis, driver.asyncio.cluster.RedisCluster)):
            self.cluster = isinstance(url_or_client, driver.asyncio.cluster.RedisCluster)
            self._given_async = url_or_client
        elif isinstance(url_or_client, (driver.Redis, driver.cluster.RedisCluster)):
            self.cluster = isinstance(url_or_client, driver.cluster.RedisCluster)
            self._sync = (url_or_client, _register(url_or_client))
        else:
            raise TypeError(
                "url_or_client must be a Redis URL, a redis.Redis, a redis.asyncio.Redis or a "
                f"RedisCluster of either, got {type(url_or_client).__name__}"
            )

    # -- making them -----------------------------------------------------------------------------

    def _make(self, package: ModuleType) -> Any:
        """A client of ``package`` (``redis`` or ``redis.asyncio``) from the URL: a cluster
        client, or a client owning a blocking pool of ``max_connections``. Two quick retries of a
        dropped connection; a resent write is safe (see _WRITE_SCRIPT)."""
        backoff = _import_redis().backoff.ExponentialBackoff(cap=0.5, base=0.05)
        options = {
            "socket_connect_timeout": _CONNECT_TIMEOUT,
            "socket_timeout": _SOCKET_TIMEOUT,
            "retry": package.retry.Retry(backoff, 2),
            "max_connections": self._max_connections,
        }
        if self.cluster:
            return package.cluster.RedisCluster.from_url(self.url, **options)
        return package.Redis.from_pool(
            package.BlockingConnectionPool.from_url(self.url, timeout=self._pool_timeout, **options)
        )

    def check_open(self) -> None:
        """Raise the closed-store error once :meth:`close` or :meth:`aclose` was called."""
        if self.closed:
            raise rules.closed(self._name)

    def sync(self) -> tuple[SyncClient, tuple[Script, Script]]:
        """The blocking client and its scripts (made on first use)."""
        with self._lock:
            self.check_open()
            if self._sync is None:
                if self.url is None:
                    raise TypeError(
                        "this RedisStore was given a redis.asyncio client: use the a-methods "
                        "(aload, awrite, ...)"
                    )
                client = self._make(_import_redis())
                if self.cluster:
                    self._gate = threading.BoundedSemaphore(self._max_connections)
                self._sync = (client, _register(client))
            return self._sync

    async def asynchronous(self) -> _AsyncSide:
        """The asyncio client, its scripts and guards (made on first use, on the running loop)."""
        side, made = self._async_side()
        if made:
            await asyncio.sleep(0)  # its LoopBound's watcher starts
        if not side.ready:
            async with side.init:
                if not side.ready:
                    await side.client.initialize()
                    side.ready = True
        return side

    def _async_side(self) -> tuple[_AsyncSide, bool]:
        loop = asyncio.get_running_loop()
        with self._lock:
            self.check_open()
            current = self._async
            if isinstance(current, _AsyncSide):
                return current, False
            if self._given_async is not None:
                self._async = _AsyncSide(self._given_async, None, self.cluster)
                return self._async, False
            if self.url is None:
                raise TypeError("this RedisStore was given a blocking redis client: use load, write, ...")
            if current is None or current.closed:  # none yet, or its loop has ended
                gate = self._max_connections if self.cluster else None
                self._async = LoopBound(
                    _AsyncSide(self._make(_import_redis().asyncio), gate, self.cluster), _close_side
                )
                return self._async.resource, True
            if current.loop is not loop:
                raise RuntimeError(
                    "this RedisStore's asyncio client belongs to another event loop, which has not "
                    "ended: use the store's async methods from one event loop at a time"
                )
            return current.resource, False

    # -- the guards around each call -------------------------------------------------------------

    @contextmanager
    def errors(self, action: str, session_id: Optional[str] = None) -> Iterator[None]:
        """Driver errors (and faults raised inside redis-py) as ``StoreUnavailableError``."""
        driver = _import_redis()
        try:
            yield
        except (
            driver.exceptions.RedisError,
            driver.exceptions.RedisClusterException,  # not a RedisError: "no node reachable"
            OSError,
            asyncio.TimeoutError,
        ) as exc:
            raise self._unavailable(action, session_id, str(exc)) from exc
        except (AttributeError, TypeError) as exc:
            if not _raised_in(exc, driver):
                raise
            raise self._unavailable(action, session_id, f"a fault inside redis-py: {exc!r}") from exc

    def _unavailable(self, action: str, session_id: Optional[str], problem: str) -> StoreUnavailableError:
        target = "" if session_id is None else f" of session {rules.shown(session_id)}"
        if problem == "No connection available.":
            problem = (
                f"no free connection: all {self._max_connections} of the store's connections stayed "
                f"busy for {self._pool_timeout:g} s"
            )
        return StoreUnavailableError(f"Redis {action}{target} failed: {redact_url(problem)}")

    @contextmanager
    def _slot(self, action: str, session_id: Optional[str]) -> Iterator[None]:
        """Hold one of a cluster client's ``max_connections`` operation slots (else nothing)."""
        gate = self._gate
        if gate is None:
            yield
            return
        if not gate.acquire(timeout=self._pool_timeout):
            raise self._unavailable(action, session_id, "No connection available.")
        try:
            yield
        finally:
            gate.release()

    @asynccontextmanager
    async def _aslot(
        self, gate: Optional[asyncio.Semaphore], action: str, session_id: Optional[str]
    ) -> AsyncIterator[None]:
        """Async twin of :meth:`_slot`."""
        if gate is None:
            yield
            return
        try:
            await asyncio.wait_for(gate.acquire(), self._pool_timeout)
        except asyncio.TimeoutError:
            raise self._unavailable(action, session_id, "No connection available.") from None
        try:
            yield
        finally:
            gate.release()

    # -- performing a flow's commands ------------------------------------------------------------

    def perform(self, action: str, session_id: Optional[str], command: _Command) -> Any:
        """Send ``command`` on the blocking client (made here, a cluster's first contact
        included), in an operation slot, driver errors as ``StoreUnavailableError`` naming
        ``action`` and the session."""
        with self.errors(action, session_id):
            client, scripts = self.sync()
            with self._slot(action, session_id):
                try:
                    reply = _send(client, scripts, command)
                except _import_redis().exceptions.NoScriptError:
                    reply = _send(client, scripts, command, whole=True)
                return {_text(key) for key in reply} if isinstance(command, _Scan) else reply

    async def aperform(self, action: str, session_id: Optional[str], command: _Command) -> Any:
        """Async twin of :meth:`perform`, on the asyncio client."""
        with self.errors(action, session_id):
            side = await self.asynchronous()
            async with self._aslot(side.gate, action, session_id):
                try:
                    reply = _send(side.client, side.scripts, command)
                    if isinstance(command, _Scan):
                        return {_text(key) async for key in reply}
                    return await reply
                except _import_redis().exceptions.NoScriptError:
                    return await _send(side.client, side.scripts, command, whole=True)

    # -- closing -----------------------------------------------------------------------------------

    def take(self) -> tuple[Optional[Callable[[], None]], Optional[LoopBound[_AsyncSide]]]:
        """Mark the clients closed and take those made from the URL (not those given): how to
        close the blocking one, and the asyncio one."""
        with self._lock:
            self.closed = True
            made, bound = self._sync, self._async
            self._sync = self._async = None
        if self.url is None:
            return None, None
        close = None if made is None else functools.partial(_close_sync, made[0])
        return close, (bound if isinstance(bound, LoopBound) else None)


def _close_sync(client: SyncClient) -> None:
    if isinstance(client, _import_redis().cluster.RedisCluster):
        client.disconnect_connection_pools()  # RedisCluster.close() leaves its nodes' sockets open
    client.close()


# -- the store ---------------------------------------------------------------------------------------


class RedisStore(FlowStore):
    """A session store in Redis or Redis Cluster, shared by every process that reaches it.

    ``url_or_client`` is a ``redis://`` (``rediss://``, ``unix://``) URL, a ``redis.Redis`` or
    ``redis.cluster.RedisCluster`` for the blocking methods, or a ``redis.asyncio.Redis`` or
    ``redis.asyncio.cluster.RedisCluster`` for the ``a``-methods. From a URL the store makes
    the clients it needs on first use (5 s connect timeout unless the URL sets one, two
    retries of a dropped connection); with ``cluster=True``, cluster clients that start from
    the node in the URL (for a list of nodes, pass your own ``RedisCluster(startup_nodes=...)``).
    They use at most ``max_connections`` connections (per node, in a cluster); an operation
    that finds them all busy waits up to ``pool_timeout`` seconds, then raises
    ``StoreUnavailableError``. :meth:`close` or :meth:`aclose` closes both clients the store
    made (a client you pass stays yours) and the store: every later call raises
    ``StoreUnavailableError``. The asyncio client belongs to the event loop that first used it
    and closes when that loop ends (``asyncio.run``); meanwhile another loop gets ``RuntimeError``.

    A log store (:class:`~rollmem.stores.LogStore`): each session is a hash at
    ``<prefix>{<id>}:head`` (incarnation, revision, summary, tail, counter identity, layout
    version) and a list at ``<prefix>{<id>}:log`` of entries (sequence number, cost and message
    JSON, tab-separated), ``<id>`` being the session id with ``%``, ``{`` and ``}``
    percent-encoded. ``load`` is one round trip (with ``since``, only what was appended after
    that head); ``write`` is one atomic script, so a failover or a resharding makes it fail or
    succeed, never half-write, and a write the driver resends after a lost reply finds its token
    among the last 8 kept in the head and is not applied twice. The braces are a Redis Cluster
    hash tag: a session's keys share one slot; ``ids`` scans every primary. The tag holds no
    brace, so no key of one prefix is a key of another (``"app:"`` never sees the sessions of
    ``"app:tenant2:"``); a prefix must not contain the empty tag ``{}``. ``ttl`` is native key
    expiry, so :meth:`purge_expired` has nothing to do. Stored text that is not UTF-8 raises
    :class:`~rollmem.errors.InvalidStateError` naming the session; driver errors (and faults
    inside redis-py) raise :class:`~rollmem.errors.StoreUnavailableError` naming the session,
    from the driver's exception, a URL's password shown as ``****``.
    """

    def __init__(
        self,
        url_or_client: Union[str, SyncClient, AsyncClient],
        *,
        prefix: str = "rollmem:",
        cluster: bool = False,
        max_connections: int = 50,
        pool_timeout: float = 20.0,
    ):
        rules.check_prefix(prefix)
        if not prefix:
            raise ValueError("prefix must not be empty: it keeps rollmem's keys apart from the others")
        brace = prefix.find("{")
        if brace >= 0 and prefix.startswith("}", brace + 1):
            raise ValueError(
                "prefix must not contain the empty hash tag '{}': Redis Cluster would hash each key "
                f"whole and spread one session over several slots, got {prefix!r}"
            )
        v.check_bool("cluster", cluster)
        self._prefix = prefix
        self._clients = _Clients(
            repr(self),
            url_or_client,
            cluster,
            v.check_positive_int("max_connections", max_connections),
            float(v.check_positive_number("pool_timeout", pool_timeout)),
        )

    def __repr__(self) -> str:
        return f"<RedisStore prefix={self._prefix!r}>"

    @property
    def prefix(self) -> str:
        """The text in front of every session's keys."""
        return self._prefix

    def _tagged(self, session_id: str, part: str) -> str:
        return f"{self._prefix}{{{_encode_id(session_id)}}}:{part}"

    def _key(self, session_id: str) -> str:
        """The session's head hash."""
        return self._tagged(session_id, "head")

    def _keys(self, session_id: str) -> list[str]:
        """The head hash and the log list, in one hash slot."""
        return [self._tagged(session_id, "head"), self._tagged(session_id, "log")]

    # -- each operation once, yielding its Redis calls -------------------------------------------

    def _load_flow(self, session_id: str, since: Optional[Head]) -> Flow[Optional[StoredLog]]:
        keys = self._keys(session_id)
        if since is None and not self._clients.cluster:
            return _snapshot(self, session_id, (yield _ReadAll(keys)))
        return _loaded(self, session_id, (yield _Script(0, keys, _load_args(since))))

    def _write_flow(self, session_id: str, change: LogWrite) -> Flow[Head]:
        reply = yield _Script(1, self._keys(session_id), _write_args(change, uuid.uuid4().hex))
        return _written(self, session_id, change, reply)

    def _delete_flow(self, session_id: str) -> Flow[bool]:
        return bool((yield _Delete(self._keys(session_id))))

    def _ids_flow(self, prefix: str) -> Flow[list[str]]:
        keys = yield _Scan(_glob_literal(f"{self._prefix}{{{_encode_id(prefix)}") + "*")
        ids = [_decode_id(m.group(1)) for m in map(_HEAD.match, keys, repeat(len(self._prefix))) if m]
        return sorted(session_id for session_id in ids if session_id.startswith(prefix))

    def _run(self, action: str, session_id: Optional[str], flow: Flow[T]) -> T:
        return run(flow, functools.partial(self._clients.perform, action, session_id))

    async def _arun(self, action: str, session_id: Optional[str], flow: Flow[T]) -> T:
        return await arun(flow, functools.partial(self._clients.aperform, action, session_id))

    def purge_expired(self) -> int:
        """Return 0: Redis removes expired sessions by itself."""
        self._clients.check_open()
        return 0

    async def apurge_expired(self) -> int:
        """Async twin of :meth:`purge_expired`."""
        return self.purge_expired()

    def _take(self) -> tuple[Optional[Callable[[], None]], Optional[LoopBound[_AsyncSide]]]:
        return self._clients.take()

"""Sessions in Redis or Redis Cluster: :class:`RedisStore` (extra ``redis``, redis-py 5 or later).

Each session is one hash at ``<prefix>{<encoded session id>}:state`` holding ``state``,
``revision`` and the token of the save that wrote it; a ``ttl`` is Redis's own key expiry.
The compare-and-set save is one Lua script, so it is atomic on the server. The braces are
a Redis Cluster hash tag: every key of one session (today the head, later its message log
at ``...:log``) lives in one hash slot, so each script stays legal in a cluster.
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, Optional, Union, cast

from .._validate import type_name
from ..errors import InvalidStateError, MissingExtraError, StoreUnavailableError
from ._common import check_prefix, check_save, check_session_id, conflict, shown
from ._protocol import StoredSession

if TYPE_CHECKING:
    import redis
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster
    from redis.commands.core import AsyncScript, Script

    SyncClient = Union[redis.Redis, redis.cluster.RedisCluster]
    AsyncClient = Union[redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster]

__all__ = ["RedisStore"]

# KEYS[1]: the session hash. KEYS[2] (optional): the session's hash under the key name of
# the earlier layout (prefix + session id), read while KEYS[1] is absent and deleted by every save, so
# the first save migrates the session. ARGV: state, expected revision, ttl in ms ("" for
# none), writer token. Returns {1, new revision} or {0, live revision}. A save that
# client-side retries send twice (its reply was lost) finds its own token at expected + 1
# and succeeds again, writing nothing.
_SAVE_SCRIPT = """
local source = KEYS[1]
local live = redis.call('HGET', source, 'revision')
if not live and KEYS[2] then
  source = KEYS[2]
  live = redis.call('HGET', source, 'revision')
end
local current = 0
if live then
  current = tonumber(live)
  if current == nil then
    return redis.error_reply('rollmem: the revision field of ' .. source .. ' is not a number')
  end
end
local expected = tonumber(ARGV[2])
if current == expected + 1 and redis.call('HGET', source, 'writer') == ARGV[4] then
  return {1, current}
end
if current ~= expected then
  return {0, current}
end
local revision = current + 1
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'writer', ARGV[4], 'revision', revision)
if ARGV[3] == '' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
if KEYS[2] then
  redis.call('DEL', KEYS[2])
end
return {1, revision}
"""

_FIELDS = ("state", "revision")
_MAX_TTL_MS = 10**13  # ~317 years: longer ttls mean "practically never" and would overflow Redis
_GLOB_SPECIAL = frozenset("*?[]\\")
_CONNECT_TIMEOUT = 5.0
_SOCKET_TIMEOUT = 10.0
_ID_ESCAPES = {"%": "%25", "{": "%7B", "}": "%7D"}
_ID_ESCAPED = re.compile("[%{}]")
_ID_UNESCAPED = re.compile("%(25|7B|7D)")
# The end of every key of the tagged layout, whatever its prefix: "{<encoded id>}:<part>".
_TAGGED_TAIL = re.compile(r"\{[^{}]+\}:[a-z]+\Z")
_STATE_SUFFIX = ":state"
# What follows the prefix in a session's head key: the group is the encoded session id.
_HEAD = re.compile(r"\{([^{}]+)\}" + _STATE_SUFFIX + r"\Z")


def _import_redis() -> ModuleType:
    try:
        import redis
        import redis.asyncio
        import redis.asyncio.cluster
        import redis.asyncio.retry
        import redis.backoff
        import redis.cluster
        import redis.retry
    except ImportError as exc:
        raise MissingExtraError("redis", "redis", "RedisStore") from exc
    return redis


def _text(value: Union[bytes, str]) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _glob_literal(text: str) -> str:
    return "".join("\\" + char if char in _GLOB_SPECIAL else char for char in text)


def _ttl_ms(ttl: Optional[float]) -> str:
    return "" if ttl is None else str(min(_MAX_TTL_MS, max(1, math.ceil(ttl * 1000))))


def _encode_id(session_id: str) -> str:
    """The session id inside the hash tag: ``%``, ``{`` and ``}`` percent-encoded, so the tag
    never holds a brace and the encoding keeps prefixes (``a`` starts ``ab`` in both forms)."""
    return _ID_ESCAPED.sub(lambda match: _ID_ESCAPES[match.group()], session_id)


def _decode_id(encoded: str) -> str:
    return _ID_UNESCAPED.sub(lambda match: chr(int(match.group(1), 16)), encoded)


class RedisStore:
    """A session store in Redis or Redis Cluster, shared by every process that reaches it.

    ``url_or_client`` is a ``redis://`` (``rediss://``, ``unix://``) URL, a ``redis.Redis`` or
    ``redis.cluster.RedisCluster`` for the blocking methods, or a ``redis.asyncio.Redis`` or
    ``redis.asyncio.cluster.RedisCluster`` for the ``a``-methods. From a URL the store makes
    the clients it needs on first use (5 s connect timeout unless the URL sets one, two
    retries of a dropped connection): with ``cluster=True`` they are cluster clients that
    start from the node in the URL and find the others; for a list of nodes, pass your own
    ``RedisCluster(startup_nodes=[ClusterNode(host, port), ...])``. :meth:`close` /
    :meth:`aclose` close the clients the store made; a client you pass stays yours to close.
    The asyncio client a store makes belongs to the event loop that first used it: ``await
    store.aclose()`` there before using the store from another loop.

    Each session is a hash at ``<prefix>{<id>}:state``, where ``<id>`` is the session id with
    ``%``, ``{`` and ``}`` percent-encoded (``%25``, ``%7B``, ``%7D``). The braces are a Redis
    Cluster hash tag: all keys of a session share one slot, so each save stays one atomic
    script on one node, in a cluster too; ``ids`` scans every primary. The tag cannot hold a
    brace, so no key of one prefix is a key of another (``prefix="app:"`` never sees the
    sessions of ``prefix="app:tenant2:"``). A prefix must not contain the empty tag ``{}``
    (it would hash each key whole, spreading a session over slots); other braces in it are
    allowed, and a tag in the prefix puts all its sessions in one slot.

    Sessions saved under the earlier key layout, whose hash sat at ``prefix + session id``, still load:
    with a ``redis.Redis`` (not a cluster: that layout could not be written to one) and
    ``legacy_keys=True`` (the default) a session missing from the new layout is read from its
    old key, and its next save moves it, deleting the old key in the same atomic script;
    ``delete`` removes both, ``ids`` lists both. An old key is as ambiguous as it was before
    (``app:tenant2:x`` is session ``tenant2:x`` of ``app:`` too) until that first save, and
    old-layout writers must be stopped before new ones start; pass ``legacy_keys=False`` once
    your sessions are saved under the new names to ignore old keys. Old keys whose names end
    like a new key (``{...}:state``) are never read as old sessions.

    ``ttl`` is native key expiry, so :meth:`purge_expired` has nothing to do. A save is one
    atomic server-side script that compares the revision and writes: a failover or a
    resharding during a save makes it fail with an error or succeed, never half-write.
    Driver errors (connection refused, timeouts, cluster down, server errors) raise
    :class:`~rollmem.errors.StoreUnavailableError` from the driver's exception.
    """

    def __init__(
        self,
        url_or_client: Union[str, SyncClient, AsyncClient],
        *,
        prefix: str = "rollmem:",
        cluster: bool = False,
        legacy_keys: bool = True,
    ):
        driver = _import_redis()
        check_prefix(prefix)
        if not prefix:
            raise ValueError("prefix must not be empty: it keeps rollmem's keys apart from the others")
        brace = prefix.find("{")
        if brace >= 0 and prefix.startswith("}", brace + 1):
            raise ValueError(
                "prefix must not contain the empty hash tag '{}': Redis Cluster would hash each key "
                f"whole and spread one session over several slots, got {prefix!r}"
            )
        for name, flag in (("cluster", cluster), ("legacy_keys", legacy_keys)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {type_name(flag)}")
        self._prefix = prefix
        self._lock = threading.Lock()
        self._url: Optional[str] = None
        self._cluster = cluster
        self._sync: Optional[tuple[SyncClient, Script]] = None
        self._async: Optional[tuple[AsyncClient, AsyncScript]] = None
        self._async_loop: Optional[asyncio.AbstractEventLoop] = None
        if isinstance(url_or_client, str):
            driver.connection.parse_url(url_or_client)  # a bad URL fails here, not on first use
            self._url = url_or_client
        elif isinstance(url_or_client, (driver.asyncio.Redis, driver.asyncio.cluster.RedisCluster)):
            self._cluster = isinstance(url_or_client, driver.asyncio.cluster.RedisCluster)
            self._async = (url_or_client, url_or_client.register_script(_SAVE_SCRIPT))
        elif isinstance(url_or_client, (driver.Redis, driver.cluster.RedisCluster)):
            self._cluster = isinstance(url_or_client, driver.cluster.RedisCluster)
            self._sync = (url_or_client, url_or_client.register_script(_SAVE_SCRIPT))
        else:
            raise TypeError(
                "url_or_client must be a Redis URL, a redis.Redis, a redis.asyncio.Redis or a "
                f"RedisCluster of either, got {type(url_or_client).__name__}"
            )
        self._legacy = legacy_keys and not self._cluster

    def __repr__(self) -> str:
        return f"<RedisStore prefix={self._prefix!r}>"

    @property
    def prefix(self) -> str:
        """The text in front of every session's keys."""
        return self._prefix

    # -- clients ------------------------------------------------------------------------------

    @staticmethod
    def _client_options(driver: ModuleType, retry_class: Any) -> dict[str, Any]:
        # Two quick retries of a dropped connection; a resent save is safe (see _SAVE_SCRIPT).
        retry = retry_class(driver.backoff.ExponentialBackoff(cap=0.5, base=0.05), 2)
        return {"socket_connect_timeout": _CONNECT_TIMEOUT, "socket_timeout": _SOCKET_TIMEOUT, "retry": retry}

    def _sync_client(self) -> tuple[SyncClient, Script]:
        if self._sync is not None:
            return self._sync
        if self._url is None:
            raise TypeError(
                "this RedisStore was given a redis.asyncio client: use the a-methods (aload, asave, ...)"
            )
        driver = _import_redis()
        with self._lock:
            if self._sync is None:
                kind = driver.cluster.RedisCluster if self._cluster else driver.Redis
                client = kind.from_url(self._url, **self._client_options(driver, driver.retry.Retry))
                self._sync = (client, client.register_script(_SAVE_SCRIPT))
            return self._sync

    def _async_client(self) -> tuple[AsyncClient, AsyncScript]:
        loop = asyncio.get_running_loop()
        if self._url is None:
            if self._async is None:
                raise TypeError("this RedisStore was given a blocking redis client: use load, save, ...")
            return self._async
        driver = _import_redis()
        with self._lock:
            if self._async is None:
                kind = driver.asyncio.cluster.RedisCluster if self._cluster else driver.asyncio.Redis
                client = kind.from_url(self._url, **self._client_options(driver, driver.asyncio.retry.Retry))
                self._async = (client, client.register_script(_SAVE_SCRIPT))
                self._async_loop = loop
            elif self._async_loop is not loop:
                raise RuntimeError(
                    "this RedisStore's asyncio client belongs to another event loop: "
                    "await store.aclose() on that loop before using the store on a new one"
                )
            return self._async

    @contextmanager
    def _errors(self, action: str, session_id: Optional[str] = None) -> Iterator[None]:
        driver = _import_redis()
        try:
            yield
        except (
            driver.exceptions.RedisError,
            driver.exceptions.RedisClusterException,  # not a RedisError: "no node reachable"
            OSError,
            asyncio.TimeoutError,
        ) as exc:
            target = "" if session_id is None else f" of session {shown(session_id)}"
            raise StoreUnavailableError(f"Redis {action}{target} failed: {exc}") from exc

    # -- shared steps ----------------------------------------------------------------------------

    def _key(self, session_id: str) -> str:
        return f"{self._prefix}{{{_encode_id(session_id)}}}{_STATE_SUFFIX}"

    def _legacy_key(self, session_id: str) -> Optional[str]:
        """The earlier-layout key of the session, when this store reads those and the name cannot be a
        key of the tagged layout."""
        key = self._prefix + session_id
        return key if self._legacy and not _TAGGED_TAIL.search(key) else None

    def _keys(self, session_id: str) -> list[str]:
        """The session's key, then its earlier-layout key if that is read."""
        check_session_id(session_id)
        legacy = self._legacy_key(session_id)
        return [self._key(session_id)] + ([legacy] if legacy is not None else [])

    def _save_call(
        self, session_id: str, state: str, expected_revision: int, ttl: Optional[float]
    ) -> dict[str, Any]:
        check_save(session_id, state, expected_revision, ttl)
        args = [state, str(expected_revision), _ttl_ms(ttl), uuid.uuid4().hex]
        return {"keys": self._keys(session_id), "args": args}

    @staticmethod
    def _saved(session_id: str, expected_revision: int, reply: Any) -> int:
        won, revision = int(reply[0]), int(reply[1])
        if not won:
            raise conflict(session_id, expected_revision, revision)
        return revision

    def _loaded(self, keys: list[str], session_id: str, replies: list[Any]) -> Optional[StoredSession]:
        """The session from the first of its keys that holds it (HMGET replies, one per key)."""
        for key, (state, revision) in zip(keys, replies):
            if state is None and revision is None:
                continue
            if state is None or revision is None or not _text(revision).isdigit():
                raise StoreUnavailableError(
                    f"Redis holds a malformed entry for session {shown(session_id)} at key "
                    f"{shown(key)}: state={state!r:.40}, revision={revision!r:.40}"
                )
            try:
                text = _text(state)
            except UnicodeDecodeError as exc:
                problem = f"stored state is not valid UTF-8 ({exc.reason} at byte {exc.start})"
                raise InvalidStateError("", f"session {shown(session_id)}: {problem}") from None
            return StoredSession(text, int(revision))
        return None

    def _ids_pattern(self, prefix: str) -> str:
        check_prefix(prefix)
        if self._legacy:  # both layouts: every key under the store's prefix
            return _glob_literal(self._prefix) + "*"
        return _glob_literal(f"{self._prefix}{{{_encode_id(prefix)}") + "*"

    def _ids(self, keys: set[str], prefix: str) -> list[str]:
        found: set[str] = set()
        for key in keys:
            rest = key[len(self._prefix) :]
            head = _HEAD.match(rest)
            if head:
                found.add(_decode_id(head.group(1)))
            elif self._legacy and rest and not _TAGGED_TAIL.search(key):
                found.add(rest)
        return sorted(session_id for session_id in found if session_id.startswith(prefix))

    # -- blocking methods ------------------------------------------------------------------------

    def load(self, session_id: str) -> Optional[StoredSession]:
        """The live session, or ``None`` when it is absent or expired."""
        keys = self._keys(session_id)
        client, _ = self._sync_client()
        with self._errors("load", session_id):
            if len(keys) == 1:
                replies = [client.hmget(keys[0], _FIELDS)]
            else:  # both names in one MULTI: a save moving the session cannot fall between
                pipe = cast("redis.Redis", client).pipeline(transaction=True)
                for key in keys:
                    pipe.hmget(key, _FIELDS)
                replies = pipe.execute()
        return self._loaded(keys, session_id, replies)

    def save(self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None) -> int:
        """Store ``state`` if the live revision is ``expected_revision`` (0: no live session) and
        return the new revision; else raise ``ConflictError`` and change nothing. ``ttl``
        (seconds) becomes the key's expiry; without it the key never expires."""
        call = self._save_call(session_id, state, expected_revision, ttl)
        client, script = self._sync_client()
        with self._errors("save", session_id):
            try:
                reply = script(**call)
            except _import_redis().exceptions.NoScriptError:
                # The script's node lost its cache (restart, failover) and the driver's reload
                # went to the primaries it knew: send the script itself.
                reply = client.eval(_SAVE_SCRIPT, len(call["keys"]), *call["keys"], *call["args"])
        return self._saved(session_id, expected_revision, reply)

    def delete(self, session_id: str) -> bool:
        """Remove the session; ``True`` if a live one was there."""
        keys = self._keys(session_id)
        client, _ = self._sync_client()
        with self._errors("delete", session_id):
            return bool(client.delete(*keys))

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted (in a cluster: of
        every primary)."""
        pattern = self._ids_pattern(prefix)
        client, _ = self._sync_client()
        with self._errors("listing"):
            keys = {_text(key) for key in client.scan_iter(match=pattern, count=1000)}
        return self._ids(keys, prefix)

    def purge_expired(self) -> int:
        """Return 0: Redis removes expired sessions by itself."""
        return 0

    def close(self) -> None:
        """Close the blocking client this store made from its URL (not a client it was given)."""
        if self._url is None:
            return
        with self._lock:
            made, self._sync = self._sync, None
        if made is not None:
            client = made[0]
            if isinstance(client, _import_redis().cluster.RedisCluster):
                client.disconnect_connection_pools()  # RedisCluster.close() leaves its nodes' sockets open
            client.close()

    # -- async methods ---------------------------------------------------------------------------

    async def aload(self, session_id: str) -> Optional[StoredSession]:
        """Async twin of :meth:`load`."""
        keys = self._keys(session_id)
        client, _ = self._async_client()
        with self._errors("load", session_id):
            if len(keys) == 1:
                replies = [await client.hmget(keys[0], _FIELDS)]
            else:
                pipe = cast("redis.asyncio.Redis", client).pipeline(transaction=True)
                for key in keys:
                    pipe.hmget(key, _FIELDS)
                replies = await pipe.execute()
        return self._loaded(keys, session_id, replies)

    async def asave(
        self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None
    ) -> int:
        """Async twin of :meth:`save`."""
        call = self._save_call(session_id, state, expected_revision, ttl)
        client, script = self._async_client()
        with self._errors("save", session_id):
            try:
                reply = await script(**call)
            except _import_redis().exceptions.NoScriptError:  # see save()
                reply = await client.eval(_SAVE_SCRIPT, len(call["keys"]), *call["keys"], *call["args"])
        return self._saved(session_id, expected_revision, reply)

    async def adelete(self, session_id: str) -> bool:
        """Async twin of :meth:`delete`."""
        keys = self._keys(session_id)
        client, _ = self._async_client()
        with self._errors("delete", session_id):
            return bool(await client.delete(*keys))

    async def aids(self, prefix: str = "") -> list[str]:
        """Async twin of :meth:`ids`."""
        pattern = self._ids_pattern(prefix)
        client, _ = self._async_client()
        with self._errors("listing"):
            keys = {_text(key) async for key in client.scan_iter(match=pattern, count=1000)}
        return self._ids(keys, prefix)

    async def apurge_expired(self) -> int:
        """Async twin of :meth:`purge_expired`."""
        return 0

    async def aclose(self) -> None:
        """Close the clients this store made from its URL (not a client it was given)."""
        if self._url is None:
            return
        with self._lock:
            made, self._async, self._async_loop = self._async, None, None
        if made is not None:
            await made[0].aclose()
        self.close()

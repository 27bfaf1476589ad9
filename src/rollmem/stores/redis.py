"""Sessions in Redis: :class:`RedisStore` (extra ``redis``, redis-py 5 or later).

Each session is one hash at ``{prefix}{session_id}`` holding ``state``, ``revision`` and the
token of the save that wrote it; a ``ttl`` is Redis's own key expiry. The compare-and-set
save is one Lua script, so it is atomic on the server.
"""

from __future__ import annotations

import asyncio
import math
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, Optional, Union

from ..errors import InvalidStateError, MissingExtraError, StoreUnavailableError
from ._common import check_prefix, check_save, check_session_id, conflict, shown
from ._protocol import StoredSession

if TYPE_CHECKING:
    import redis
    import redis.asyncio
    from redis.commands.core import AsyncScript, Script

__all__ = ["RedisStore"]

# KEYS[1]: the session hash. ARGV: state, expected revision, ttl in ms ("" for none), writer token.
# Returns {1, new revision} or {0, live revision}. A save that client-side retries send twice
# (its reply was lost) finds its own token at expected + 1 and succeeds again, writing nothing.
_SAVE_SCRIPT = """
local live = redis.call('HGET', KEYS[1], 'revision')
local current = 0
if live then
  current = tonumber(live)
  if current == nil then
    return redis.error_reply('rollmem: the revision field of ' .. KEYS[1] .. ' is not a number')
  end
end
local expected = tonumber(ARGV[2])
if current == expected + 1 and redis.call('HGET', KEYS[1], 'writer') == ARGV[4] then
  return {1, current}
end
if current ~= expected then
  return {0, current}
end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'writer', ARGV[4])
local revision = redis.call('HINCRBY', KEYS[1], 'revision', 1)
if ARGV[3] == '' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {1, revision}
"""

_FIELDS = ("state", "revision")
_MAX_TTL_MS = 10**13  # ~317 years: longer ttls mean "practically never" and would overflow Redis
_GLOB_SPECIAL = frozenset("*?[]\\")
_CONNECT_TIMEOUT = 5.0
_SOCKET_TIMEOUT = 10.0


def _import_redis() -> ModuleType:
    try:
        import redis
        import redis.asyncio
        import redis.asyncio.retry
        import redis.backoff
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


class RedisStore:
    """A session store in Redis, shared by every process that reaches the server.

    ``url_or_client`` is a ``redis://`` (``rediss://``, ``unix://``) URL, a ``redis.Redis`` for
    the blocking methods or a ``redis.asyncio.Redis`` for the ``a``-methods. From a URL the
    store makes the clients it needs on first use (5 s connect timeout unless the URL sets
    one, two retries of a dropped connection) and :meth:`close` / :meth:`aclose` close them;
    a client you pass stays yours to close. The asyncio client a store makes belongs to the
    event loop that first used it: ``await store.aclose()`` there before using the store
    from another loop.

    Sessions are hashes under ``prefix`` + session id; ``ttl`` is native key expiry, so
    :meth:`purge_expired` has nothing to do. A save is one atomic server-side script that
    compares the revision and writes. Driver errors (connection refused, timeouts, server
    errors) raise :class:`~rollmem.errors.StoreUnavailableError` from the driver's exception.
    """

    def __init__(
        self, url_or_client: Union[str, redis.Redis, redis.asyncio.Redis], *, prefix: str = "rollmem:"
    ):
        driver = _import_redis()
        check_prefix(prefix)
        if not prefix:
            raise ValueError("prefix must not be empty: it keeps rollmem's keys apart from the others")
        self._prefix = prefix
        self._lock = threading.Lock()
        self._url: Optional[str] = None
        self._sync: Optional[tuple[redis.Redis, Script]] = None
        self._async: Optional[tuple[redis.asyncio.Redis, AsyncScript]] = None
        self._async_loop: Optional[asyncio.AbstractEventLoop] = None
        if isinstance(url_or_client, str):
            driver.connection.parse_url(url_or_client)  # a bad URL fails here, not on first use
            self._url = url_or_client
        elif isinstance(url_or_client, driver.asyncio.Redis):
            self._async = (url_or_client, url_or_client.register_script(_SAVE_SCRIPT))
        elif isinstance(url_or_client, driver.Redis):
            self._sync = (url_or_client, url_or_client.register_script(_SAVE_SCRIPT))
        else:
            raise TypeError(
                "url_or_client must be a Redis URL, a redis.Redis or a redis.asyncio.Redis, "
                f"got {type(url_or_client).__name__}"
            )

    def __repr__(self) -> str:
        return f"<RedisStore prefix={self._prefix!r}>"

    @property
    def prefix(self) -> str:
        """The text in front of every session id in the Redis key."""
        return self._prefix

    # -- clients ------------------------------------------------------------------------------

    @staticmethod
    def _client_options(driver: ModuleType, retry_class: Any) -> dict[str, Any]:
        # Two quick retries of a dropped connection; a resent save is safe (see _SAVE_SCRIPT).
        retry = retry_class(driver.backoff.ExponentialBackoff(cap=0.5, base=0.05), 2)
        return {"socket_connect_timeout": _CONNECT_TIMEOUT, "socket_timeout": _SOCKET_TIMEOUT, "retry": retry}

    def _sync_client(self) -> tuple[redis.Redis, Script]:
        if self._sync is not None:
            return self._sync
        if self._url is None:
            raise TypeError(
                "this RedisStore was given a redis.asyncio client: use the a-methods (aload, asave, ...)"
            )
        driver = _import_redis()
        with self._lock:
            if self._sync is None:
                client = driver.Redis.from_url(self._url, **self._client_options(driver, driver.retry.Retry))
                self._sync = (client, client.register_script(_SAVE_SCRIPT))
            return self._sync

    def _async_client(self) -> tuple[redis.asyncio.Redis, AsyncScript]:
        loop = asyncio.get_running_loop()
        if self._url is None:
            if self._async is None:
                raise TypeError("this RedisStore was given a blocking redis client: use load, save, ...")
            return self._async
        driver = _import_redis()
        with self._lock:
            if self._async is None:
                client = driver.asyncio.Redis.from_url(
                    self._url, **self._client_options(driver, driver.asyncio.retry.Retry)
                )
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
        except (driver.exceptions.RedisError, OSError, asyncio.TimeoutError) as exc:
            target = "" if session_id is None else f" of session {shown(session_id)}"
            raise StoreUnavailableError(f"Redis {action}{target} failed: {exc}") from exc

    # -- shared steps ----------------------------------------------------------------------------

    def _key(self, session_id: str) -> str:
        return self._prefix + check_session_id(session_id)

    def _save_call(
        self, session_id: str, state: str, expected_revision: int, ttl: Optional[float]
    ) -> dict[str, Any]:
        check_save(session_id, state, expected_revision, ttl)
        args = [state, str(expected_revision), _ttl_ms(ttl), uuid.uuid4().hex]
        return {"keys": [self._prefix + session_id], "args": args}

    @staticmethod
    def _saved(session_id: str, expected_revision: int, reply: Any) -> int:
        won, revision = int(reply[0]), int(reply[1])
        if not won:
            raise conflict(session_id, expected_revision, revision)
        return revision

    def _loaded(self, session_id: str, reply: Any) -> Optional[StoredSession]:
        state, revision = reply
        if state is None and revision is None:
            return None
        if state is None or revision is None or not _text(revision).isdigit():
            raise StoreUnavailableError(
                f"Redis holds a malformed entry for session {shown(session_id)} at key "
                f"{shown(self._prefix + session_id)}: state={state!r:.40}, revision={revision!r:.40}"
            )
        try:
            text = _text(state)
        except UnicodeDecodeError as exc:
            problem = f"stored state is not valid UTF-8 ({exc.reason} at byte {exc.start})"
            raise InvalidStateError("", f"session {shown(session_id)}: {problem}") from None
        return StoredSession(text, int(revision))

    def _ids_pattern(self, prefix: str) -> str:
        return _glob_literal(self._prefix + check_prefix(prefix)) + "*"

    def _ids(self, keys: set[str]) -> list[str]:
        return sorted(key[len(self._prefix) :] for key in keys)

    # -- blocking methods ------------------------------------------------------------------------

    def load(self, session_id: str) -> Optional[StoredSession]:
        """The live session, or ``None`` when it is absent or expired."""
        key = self._key(session_id)
        client, _ = self._sync_client()
        with self._errors("load", session_id):
            reply = client.hmget(key, _FIELDS)
        return self._loaded(session_id, reply)

    def save(self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None) -> int:
        """Store ``state`` if the live revision is ``expected_revision`` (0: no live session) and
        return the new revision; else raise ``ConflictError`` and change nothing. ``ttl``
        (seconds) becomes the key's expiry; without it the key never expires."""
        call = self._save_call(session_id, state, expected_revision, ttl)
        _, script = self._sync_client()
        with self._errors("save", session_id):
            reply = script(**call)
        return self._saved(session_id, expected_revision, reply)

    def delete(self, session_id: str) -> bool:
        """Remove the session; ``True`` if a live one was there."""
        key = self._key(session_id)
        client, _ = self._sync_client()
        with self._errors("delete", session_id):
            return bool(client.delete(key))

    def ids(self, prefix: str = "") -> list[str]:
        """The ids of the live sessions that start with ``prefix``, sorted."""
        pattern = self._ids_pattern(prefix)
        client, _ = self._sync_client()
        with self._errors("listing"):
            keys = {_text(key) for key in client.scan_iter(match=pattern, count=1000)}
        return self._ids(keys)

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
            made[0].close()

    # -- async methods ---------------------------------------------------------------------------

    async def aload(self, session_id: str) -> Optional[StoredSession]:
        """Async twin of :meth:`load`."""
        key = self._key(session_id)
        client, _ = self._async_client()
        with self._errors("load", session_id):
            reply = await client.hmget(key, _FIELDS)
        return self._loaded(session_id, reply)

    async def asave(
        self, session_id: str, state: str, expected_revision: int, ttl: Optional[float] = None
    ) -> int:
        """Async twin of :meth:`save`."""
        call = self._save_call(session_id, state, expected_revision, ttl)
        _, script = self._async_client()
        with self._errors("save", session_id):
            reply = await script(**call)
        return self._saved(session_id, expected_revision, reply)

    async def adelete(self, session_id: str) -> bool:
        """Async twin of :meth:`delete`."""
        key = self._key(session_id)
        client, _ = self._async_client()
        with self._errors("delete", session_id):
            return bool(await client.delete(key))

    async def aids(self, prefix: str = "") -> list[str]:
        """Async twin of :meth:`ids`."""
        pattern = self._ids_pattern(prefix)
        client, _ = self._async_client()
        with self._errors("listing"):
            keys = {_text(key) async for key in client.scan_iter(match=pattern, count=1000)}
        return self._ids(keys)

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

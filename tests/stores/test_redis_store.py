"""RedisStore against a real Redis on loopback (``source .ci/services``)."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rollmem.errors import ConflictError, StoreUnavailableError
from rollmem.stores import StoredSession

from .contract import (
    AsyncStoreContract,
    StoreContract,
)
from .servers import ServerStoreChecks, drop_redis_keys, redis_ctl, redis_url, unique_name

redis = pytest.importorskip("redis", reason='the Redis tests need pip install "rollmem[redis]"')
redis_asyncio = pytest.importorskip("redis.asyncio")

from rollmem.stores.redis import RedisStore  # noqa: E402


@pytest.fixture
def url() -> str:
    return redis_url()


@pytest.fixture
def prefix(url: str) -> Iterator[str]:
    prefix = unique_name("rollmem-test") + ":"
    yield prefix
    drop_redis_keys(url, prefix)


@pytest.fixture
def client(url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(url)
    yield client
    client.close()


class _Isolated:
    """Each contract test gets its own key prefix, whose keys are deleted afterwards."""

    expires_natively = True

    @pytest.fixture(autouse=True)
    def _isolate(self, url: str, prefix: str) -> None:
        self.url, self.prefix = url, prefix

    def store_factory(self) -> Callable[[], RedisStore]:
        return functools.partial(RedisStore, self.url, prefix=self.prefix)

    def make_store(self) -> RedisStore:
        return self.store_factory()()


class TestRedisStore(_Isolated, StoreContract):
    pass


class TestRedisStoreServer(_Isolated, ServerStoreChecks):
    store_name = "RedisStore"
    extra = "redis"
    driver_modules = ("redis",)
    dead_address = "redis://127.0.0.1:1"
    control = staticmethod(redis_ctl)
    driver_error = staticmethod(lambda: redis.exceptions.ConnectionError)


class TestRedisStoreAsync(_Isolated, AsyncStoreContract):
    pass


class TestRedisStoreGivenDecodingClient(_Isolated, StoreContract):
    """A client of the caller's, answering str instead of bytes."""

    @pytest.fixture(autouse=True)
    def _given(self, url: str) -> Iterator[None]:
        self.client = redis.Redis.from_url(url, decode_responses=True)
        yield
        self.client.close()

    def make_store(self) -> RedisStore:
        return RedisStore(self.client, prefix=self.prefix)


def test_layout_is_one_hash_per_session(url: str, prefix: str, client: redis.Redis) -> None:
    store = RedisStore(url, prefix=prefix)
    try:
        store.save("alice", "state-1", 0)
        store.save("alice", "state-2", 1)
    finally:
        store.close()
    key = f"{prefix}alice"
    assert client.type(key) == b"hash"
    assert client.hmget(key, ["state", "revision"]) == [b"state-2", b"2"]
    assert client.keys(prefix.replace("*", "\\*") + "*") == [key.encode()]


def test_ttl_is_native_expiry_set_and_cleared(url: str, prefix: str, client: redis.Redis) -> None:
    store = RedisStore(url, prefix=prefix)
    try:
        store.save("s", "x", 0, 30)
        assert 29_000 < client.pttl(f"{prefix}s") <= 30_000
        store.save("s", "x", 1, 0.5)
        assert 0 < client.pttl(f"{prefix}s") <= 500
        store.save("s", "x", 2)
        assert client.pttl(f"{prefix}s") == -1, "a save without ttl makes the session permanent"
        store.save("t", "x", 0, 1e300)
        assert client.pttl(f"{prefix}t") > 300 * 365 * 86_400_000, "a huge ttl means practically never"
    finally:
        store.close()


def test_prefixes_keep_stores_apart_and_glob_characters_are_literal(url: str, prefix: str) -> None:
    tricky = prefix + "a*[b]?\\:"
    other = prefix + "aX[b]?\\:"
    store, neighbour = RedisStore(url, prefix=tricky), RedisStore(url, prefix=other)
    try:
        store.save("s", "mine", 0)
        neighbour.save("s", "theirs", 0)
        neighbour.save("t", "theirs", 0)
        assert store.ids() == ["s"]
        assert neighbour.ids() == ["s", "t"]
        assert store.load("s") == StoredSession("mine", 1)
        assert store.load("t") is None
        assert store.prefix == tricky
    finally:
        store.close()
        neighbour.close()


def test_default_prefix(url: str, client: redis.Redis) -> None:
    session_id = unique_name("default-prefix")
    store = RedisStore(url)
    try:
        store.save(session_id, "x", 0)
        assert client.hget(f"rollmem:{session_id}", "state") == b"x"
        assert store.delete(session_id) is True
    finally:
        store.close()


@pytest.mark.parametrize(
    ("prefix", "error", "message"),
    [
        ("", ValueError, "prefix must not be empty"),
        (b"x:", TypeError, "prefix: expected str, got bytes"),
        ("a\x00", ValueError, "prefix must not contain NUL"),
    ],
)
def test_bad_prefix(url: str, prefix: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        RedisStore(url, prefix=prefix)


def test_bad_url_or_client() -> None:
    with pytest.raises(ValueError, match="redis://"):
        RedisStore("http://localhost:6379")
    expected = "must be a Redis URL, a redis.Redis or a redis.asyncio.Redis, got int"
    with pytest.raises(TypeError, match=re.escape(expected)):
        RedisStore(6379)  # type: ignore[arg-type]


def test_a_save_resent_by_a_client_retry_succeeds_once(url: str, prefix: str, client: redis.Redis) -> None:
    """redis-py retries a command whose reply was lost; the script must not call that a conflict."""
    store = RedisStore(url, prefix=prefix)
    try:
        resent = store._save_call("s", "mine", 0, None)
        _, script = store._sync_client()
        assert list(script(**resent)) == [1, 1]
        assert list(script(**resent)) == [1, 1], "the same save, sent again, is still a success"
        assert store.load("s") == StoredSession("mine", 1)
        with pytest.raises(ConflictError, match="at revision 1"):
            store.save("s", "other writer", 0)
    finally:
        store.close()


def test_malformed_entries_raise_and_leave_others_readable(
    url: str, prefix: str, client: redis.Redis
) -> None:
    store = RedisStore(url, prefix=prefix)
    try:
        store.save("good", "x", 0)
        client.hset(f"{prefix}bad", mapping={"state": "x", "revision": "many"})
        client.set(f"{prefix}string", "not a hash")
        with pytest.raises(StoreUnavailableError, match="malformed entry for session 'bad'"):
            store.load("bad")
        with pytest.raises(StoreUnavailableError, match="save of session 'bad' failed: rollmem: the rev"):
            store.save("bad", "y", 0)
        with pytest.raises(StoreUnavailableError, match="load of session 'string' failed: WRONGTYPE"):
            store.load("string")
        assert store.load("good") == StoredSession("x", 1)
    finally:
        store.close()


def test_given_clients_serve_one_side_and_stay_open(url: str, prefix: str, client: redis.Redis) -> None:
    store = RedisStore(client, prefix=prefix)
    store.save("s", "x", 0)
    connection_id = client.client_id()
    store.close()
    assert client.client_id() == connection_id, "close() left the caller's connection alone"
    with pytest.raises(TypeError, match="given a blocking redis client: use load, save"):
        asyncio.run(store.aload("s"))

    async def main() -> None:
        given = redis_asyncio.Redis.from_url(url)
        try:
            async_store = RedisStore(given, prefix=prefix)
            assert await async_store.aload("s") == StoredSession("x", 1)
            assert await async_store.asave("s", "y", 1) == 2
            before = await given.client_id()
            await async_store.aclose()
            assert await given.client_id() == before
            with pytest.raises(TypeError, match=r"given a redis\.asyncio client: use the a-methods"):
                async_store.load("s")
        finally:
            await given.aclose()

    asyncio.run(main())

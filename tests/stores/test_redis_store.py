"""RedisStore against a real Redis and a real Redis Cluster on loopback (``source .ci/services``)."""

from __future__ import annotations

import asyncio
import functools
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Optional

import pytest

from rollmem.errors import ConflictError, StoreUnavailableError
from rollmem.stores import StoredSession

from .contract import AsyncLogStoreContract, LogStoreContract, append, create, texts
from .servers import (
    ServerStoreChecks,
    close_redis,
    drop_redis_keys,
    redis_cluster_ctl,
    redis_cluster_nodes,
    redis_cluster_url,
    redis_ctl,
    redis_url,
    stopped,
    unique_name,
)

redis = pytest.importorskip("redis", reason='the Redis tests need pip install "rollmem[redis]"')
redis_asyncio = pytest.importorskip("redis.asyncio")
redis_cluster = pytest.importorskip("redis.cluster")
redis_asyncio_cluster = pytest.importorskip("redis.asyncio.cluster")

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


class TestRedisStore(_Isolated, LogStoreContract):
    pass


class TestRedisStoreServer(_Isolated, ServerStoreChecks):
    store_name = "RedisStore"
    extra = "redis"
    driver_modules = ("redis",)
    dead_address = "redis://127.0.0.1:1"
    control = staticmethod(redis_ctl)
    driver_error = staticmethod(lambda: redis.exceptions.ConnectionError)


class TestRedisStoreAsync(_Isolated, AsyncLogStoreContract):
    pass


class _ClusterIsolated:
    """Each contract test gets its own key prefix in the test cluster, deleted afterwards."""

    expires_natively = True

    @pytest.fixture(autouse=True)
    def _isolate(self) -> Iterator[None]:
        self.url, self.prefix = redis_cluster_url(), unique_name("rollmem-test") + ":"
        yield
        drop_redis_keys(self.url, self.prefix, cluster=True)

    def store_factory(self) -> Callable[[], RedisStore]:
        return functools.partial(RedisStore, self.url, prefix=self.prefix, cluster=True)

    def make_store(self) -> RedisStore:
        return self.store_factory()()


class TestRedisClusterStore(_ClusterIsolated, LogStoreContract):
    pass


class TestRedisClusterStoreAsync(_ClusterIsolated, AsyncLogStoreContract):
    pass


class TestRedisClusterStoreServer(_ClusterIsolated, ServerStoreChecks):
    """The whole cluster stopped mid-run; one node stopped: see test_cluster_primary_stopped_*."""

    store_name = "RedisStore"
    extra = "redis"
    driver_modules = ("redis",)
    dead_address = "redis://127.0.0.1:1"
    control = staticmethod(redis_cluster_ctl)
    driver_error = staticmethod(lambda: redis.exceptions.RedisClusterException)


class TestRedisClusterStoreGivenClient(_ClusterIsolated, LogStoreContract):
    """A RedisCluster of the caller's, made from the list of nodes, answering str."""

    @pytest.fixture(autouse=True)
    def _given(self) -> Iterator[None]:
        nodes = [redis_cluster.ClusterNode(host, port) for host, port in redis_cluster_nodes()]
        self.client = redis_cluster.RedisCluster(startup_nodes=nodes, decode_responses=True)
        yield
        close_redis(self.client)

    def make_store(self) -> RedisStore:
        return RedisStore(self.client, prefix=self.prefix)


class TestRedisStoreGivenDecodingClient(_Isolated, LogStoreContract):
    """A client of the caller's, answering str instead of bytes."""

    @pytest.fixture(autouse=True)
    def _given(self, url: str) -> Iterator[None]:
        self.client = redis.Redis.from_url(url, decode_responses=True)
        yield
        self.client.close()

    def make_store(self) -> RedisStore:
        return RedisStore(self.client, prefix=self.prefix)


def test_layout_is_one_tagged_hash_per_session(url: str, prefix: str, client: redis.Redis) -> None:
    store = RedisStore(url, prefix=prefix)
    try:
        store.save("alice", "state-1", 0)
        store.save("alice", "state-2", 1)
        store.save("50% {odd}", "x", 0)
    finally:
        store.close()
    key = f"{prefix}{{alice}}:state"
    assert client.type(key) == b"hash"
    assert client.hmget(key, ["state", "revision"]) == [b"state-2", b"2"]
    odd = f"{prefix}{{50%25 %7Bodd%7D}}:state"
    assert sorted(client.keys(prefix.replace("*", "\\*") + "*")) == sorted([key.encode(), odd.encode()])
    # The head and the future message log of a session share one hash slot.
    assert redis.crc.key_slot(key.encode()) == redis.crc.key_slot(f"{prefix}{{alice}}:log".encode())
    assert redis.crc.key_slot(key.encode()) == redis.crc.key_slot(b"{alice}")


ODD_IDS_FOR_TAGS = ["x", "{y}", "%7B", "a}b", "{", "}", "}:state", "%", "x}:state", ":state"]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("app:", "app:tenant2:"),
        ("app:tenant2", "app:tenant2:"),
        ("app:", "app:{"),
        ("a:", "a:}"),
        ("a{", "a{{"),
    ],
)
def test_no_prefix_reaches_the_sessions_of_another(url: str, prefix: str, first: str, second: str) -> None:
    """Issue: RedisStore(prefix="app:") listed and loaded the sessions of prefix="app:tenant2:"."""
    for mine, theirs in [(first, second), (second, first)]:
        store, other = RedisStore(url, prefix=prefix + mine), RedisStore(url, prefix=prefix + theirs)
        try:
            for session_id in ODD_IDS_FOR_TAGS:
                other.save(session_id, "theirs", 0)
            assert store.ids() == []
            tail = theirs[len(mine) :] if theirs.startswith(mine) else ""
            for session_id in ODD_IDS_FOR_TAGS:
                for guess in {tail + session_id, f"{tail}{{{session_id}}}:state", session_id}:
                    assert store.load(guess) is None, guess
                    assert store.delete(guess) is False, guess
            assert other.ids() == sorted(ODD_IDS_FOR_TAGS)
            for session_id in other.ids():
                assert other.delete(session_id) is True
        finally:
            store.close()
            other.close()


def test_ids_by_prefix_with_encoded_characters(url: str, prefix: str) -> None:
    store = RedisStore(url, prefix=prefix, legacy_keys=False)
    try:
        names = ["{a", "{a}", "%7Ba", "%", "%2", "}", "a"]
        for session_id in names:
            store.save(session_id, "x", 0)
        for start in ["{", "{a", "%", "%7", "}", "a", ""]:
            assert store.ids(start) == sorted(n for n in names if n.startswith(start)), start
    finally:
        store.close()


def _save_as_0_1(client: redis.Redis, key: str, state: str, revision: int) -> None:
    """What the earlier layout wrote: one hash at prefix + session id."""
    client.hset(key, mapping={"state": state, "revision": revision, "writer": "0.1-writer"})


def test_sessions_of_0_1_load_and_move_on_their_next_save(url: str, prefix: str, client: redis.Redis) -> None:
    _save_as_0_1(client, f"{prefix}old", "from 0.1", 3)
    _save_as_0_1(client, f"{prefix}gone", "from 0.1", 1)
    client.pexpire(f"{prefix}old", 60_000)
    store = RedisStore(url, prefix=prefix)
    try:
        assert store.load("old") == StoredSession("from 0.1", 3)
        assert store.ids() == ["gone", "old"]
        with pytest.raises(ConflictError, match="at revision 3"):
            store.save("old", "stale", 2)
        with pytest.raises(ConflictError, match="at revision 3"):
            store.save("old", "as new", 0)
        assert client.exists(f"{prefix}old") == 1, "a lost save moves nothing"
        assert store.save("old", "moved", 3, 30) == 4
        assert client.exists(f"{prefix}old") == 0, "the old key went in the same script"
        assert client.hmget(f"{prefix}{{old}}:state", ["state", "revision"]) == [b"moved", b"4"]
        assert 0 < client.pttl(f"{prefix}{{old}}:state") <= 30_000
        assert store.load("old") == StoredSession("moved", 4)
        assert store.delete("gone") is True
        assert client.exists(f"{prefix}gone") == 0
        assert store.ids() == ["old"]
        assert asyncio.run(_aload_then_close(RedisStore(url, prefix=prefix), "old")) == StoredSession(
            "moved", 4
        )
    finally:
        store.close()


async def _aload_then_close(store: RedisStore, session_id: str) -> Optional[StoredSession]:
    try:
        return await store.aload(session_id)
    finally:
        await store.aclose()


def test_a_session_in_both_layouts_reads_the_new_one(url: str, prefix: str, client: redis.Redis) -> None:
    store = RedisStore(url, prefix=prefix)
    try:
        store.save("s", "new", 0)
        _save_as_0_1(client, f"{prefix}s", "old", 7)
        assert store.load("s") == StoredSession("new", 1)
        assert store.ids() == ["s"]
        assert store.save("s", "newer", 1) == 2
        assert client.exists(f"{prefix}s") == 0, "a save removes a leftover old key"
        _save_as_0_1(client, f"{prefix}s", "old", 7)
        assert store.delete("s") is True
        assert client.exists(f"{prefix}s", f"{prefix}{{s}}:state") == 0
    finally:
        store.close()


def test_legacy_keys_false_ignores_0_1_keys(url: str, prefix: str, client: redis.Redis) -> None:
    _save_as_0_1(client, f"{prefix}old", "from 0.1", 3)
    store = RedisStore(url, prefix=prefix, legacy_keys=False)
    try:
        assert store.load("old") is None
        assert store.ids() == []
        assert store.save("old", "fresh", 0) == 1
        assert store.delete("old") is True
        assert client.hget(f"{prefix}old", "state") == b"from 0.1", "left alone"
    finally:
        store.close()


def test_a_0_1_name_that_looks_tagged_is_never_read(url: str, prefix: str, client: redis.Redis) -> None:
    _save_as_0_1(client, f"{prefix}t2:{{x}}:state", "someone else's", 1)
    store = RedisStore(url, prefix=prefix)
    try:
        assert store.load("t2:{x}:state") is None
        assert store.ids() == []
    finally:
        store.close()


def test_ttl_is_native_expiry_set_and_cleared(url: str, prefix: str, client: redis.Redis) -> None:
    store = RedisStore(url, prefix=prefix)
    key = f"{prefix}{{s}}:state"
    try:
        store.save("s", "x", 0, 30)
        assert 29_000 < client.pttl(key) <= 30_000
        store.save("s", "x", 1, 0.5)
        assert 0 < client.pttl(key) <= 500
        store.save("s", "x", 2)
        assert client.pttl(key) == -1, "a save without ttl makes the session permanent"
        store.save("t", "x", 0, 1e300)
        assert client.pttl(f"{prefix}{{t}}:state") > 300 * 365 * 86_400_000, (
            "a huge ttl means practically never"
        )
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
        assert client.hget(f"rollmem:{{{session_id}}}:state", "state") == b"x"
        assert store.delete(session_id) is True
    finally:
        store.close()


@pytest.mark.parametrize(
    ("prefix", "error", "message"),
    [
        ("", ValueError, "prefix must not be empty"),
        (b"x:", TypeError, "prefix: expected str, got bytes"),
        ("a\x00", ValueError, "prefix must not contain NUL"),
        ("app{}:", ValueError, "prefix must not contain the empty hash tag '{}'"),
        ("a}{}", ValueError, "prefix must not contain the empty hash tag '{}'"),
    ],
)
def test_bad_prefix(url: str, prefix: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        RedisStore(url, prefix=prefix)


@pytest.mark.parametrize("prefix", ["app{tenant}:", "a{", "a}", "a{b}{}"])
def test_prefixes_with_other_braces_work(url: str, prefix: str) -> None:
    store = RedisStore(url, prefix=unique_name("rollmem-test") + prefix)
    try:
        store.save("s", "x", 0)
        assert store.ids() == ["s"]
        assert store.delete("s") is True
    finally:
        store.close()


def test_flags_must_be_bools(url: str) -> None:
    with pytest.raises(TypeError, match="cluster must be a bool, got int"):
        RedisStore(url, cluster=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="legacy_keys must be a bool, got str"):
        RedisStore(url, legacy_keys="no")  # type: ignore[arg-type]


def test_bad_url_or_client() -> None:
    with pytest.raises(ValueError, match="redis://"):
        RedisStore("http://localhost:6379")
    expected = (
        "must be a Redis URL, a redis.Redis, a redis.asyncio.Redis or a RedisCluster of either, got int"
    )
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
        client.hset(f"{prefix}{{bad}}:state", mapping={"state": "x", "revision": "many"})
        client.set(f"{prefix}{{string}}:state", "not a hash")
        with pytest.raises(StoreUnavailableError, match="malformed entry for session 'bad'"):
            store.load("bad")
        with pytest.raises(StoreUnavailableError, match="save of session 'bad' failed: rollmem: the rev"):
            store.save("bad", "y", 0)
        with pytest.raises(StoreUnavailableError, match=r"load of session 'string' failed: .*WRONGTYPE"):
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


# -- Redis Cluster -------------------------------------------------------------------------------


@pytest.fixture
def cluster_prefix() -> Iterator[str]:
    url = redis_cluster_url()
    prefix = unique_name("rollmem-test") + ":"
    yield prefix
    drop_redis_keys(url, prefix, cluster=True)


def test_cluster_keys_of_a_session_share_a_slot_and_sessions_spread(cluster_prefix: str) -> None:
    store = RedisStore(redis_cluster_url(), prefix=cluster_prefix, cluster=True)
    client = redis_cluster.RedisCluster.from_url(redis_cluster_url())
    try:
        nodes = set()
        for index in range(30):
            store.save(f"s{index}", "x", 0)
            key = store._key(f"s{index}")
            assert client.keyslot(key) == client.keyslot(key.replace(":state", ":log"))
            nodes.add(client.get_node_from_key(key).name)
        assert len(nodes) == 3, "the sessions are spread over the three primaries"
        assert store.ids() == sorted(f"s{index}" for index in range(30)), "ids() scans every primary"
    finally:
        store.close()
        close_redis(client)


def test_cluster_ignores_0_1_keys(cluster_prefix: str) -> None:
    client = redis_cluster.RedisCluster.from_url(redis_cluster_url())
    store = RedisStore(client, prefix=cluster_prefix)
    try:
        _save_as_0_1(client, f"{cluster_prefix}old", "from 0.1", 3)  # type: ignore[arg-type]
        assert store.load("old") is None
        assert store.ids() == []
        assert store.save("old", "new", 0) == 1
    finally:
        close_redis(client)


def test_given_async_cluster_client(cluster_prefix: str) -> None:
    async def main() -> None:
        nodes = [redis_asyncio_cluster.ClusterNode(host, port) for host, port in redis_cluster_nodes()]
        given = redis_asyncio_cluster.RedisCluster(startup_nodes=nodes)
        try:
            store = RedisStore(given, prefix=cluster_prefix)
            for index in range(10):
                assert await store.asave(f"s{index}", "x", 0) == 1
            assert await store.aids() == sorted(f"s{index}" for index in range(10))
            assert await store.aload("s3") == StoredSession("x", 1)
            assert await store.adelete("s3") is True
            await store.aclose()
            assert await given.ping(), "aclose() left the caller's client open"
            with pytest.raises(TypeError, match=r"given a redis\.asyncio client: use the a-methods"):
                store.load("s1")
        finally:
            await given.aclose()

    asyncio.run(main())


def test_cluster_primary_stopped_mid_run(cluster_prefix: str) -> None:
    """One primary goes down while writers save their own sessions: its sessions fail with
    StoreUnavailableError until its replica takes over, the others keep working throughout,
    and no save is half-written (each session's revision equals its counter). Each writer has
    its own store, as app workers do (redis-py 7.0's RedisCluster, the last for Python 3.9,
    breaks when threads share it through a topology change)."""
    url = redis_cluster_url()
    store = RedisStore(url, prefix=cluster_prefix, cluster=True)
    client = redis_cluster.RedisCluster.from_url(url)
    by_node: dict[int, list[str]] = {}
    for index in range(60):
        session_id = f"w{index}"
        by_node.setdefault(client.get_node_from_key(store._key(session_id)).port, []).append(session_id)
    close_redis(client)
    assert len(by_node) == 3
    writers = [ids[0] for ids in by_node.values()] + [ids[1] for ids in by_node.values()]
    victim_port, victim_ids = next(iter(by_node.items()))
    victims = [session_id for session_id in writers if session_id in victim_ids]
    won = dict.fromkeys(writers, 0)
    failed = dict.fromkeys(writers, 0)
    won_while_down = dict.fromkeys(writers, 0)
    unexpected: list[BaseException] = []
    down = threading.Event()
    done = threading.Event()

    def write(session_id: str) -> None:
        own = RedisStore(url, prefix=cluster_prefix, cluster=True)
        while not done.is_set():
            try:
                current = own.load(session_id)
                count = 0 if current is None else int(current.state)
                own.save(session_id, str(count + 1), 0 if current is None else current.revision)
                won[session_id] += 1
                if down.is_set():
                    won_while_down[session_id] += 1
            except StoreUnavailableError:
                failed[session_id] += 1
                time.sleep(0.02)
            except BaseException as exc:
                unexpected.append(exc)
                break
        own.close()

    threads = [threading.Thread(target=write, args=(session_id,)) for session_id in writers]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.3)
        with stopped(redis_cluster_ctl(), str(victim_port)):
            down.set()
            deadline = time.monotonic() + 30
            before = dict(won)
            while time.monotonic() < deadline and any(won[v] <= before[v] + 3 for v in victims):
                time.sleep(0.05)  # until the replica took over and the victims' saves go through
            down.clear()
        time.sleep(0.3)
    finally:
        done.set()
        for thread in threads:
            thread.join()
    try:
        assert unexpected == []
        others = [session_id for session_id in writers if session_id not in victims]
        assert all(won_while_down[session_id] > 0 for session_id in others), won_while_down
        assert all(won[v] > before[v] + 3 for v in victims), "the replica took over"
        for session_id in writers:
            final = store.load(session_id)
            assert final is not None
            assert int(final.state) == final.revision, "every save wrote its state and its revision"
            # A save that raised may or may not have happened: the counter lies in between.
            assert won[session_id] <= final.revision <= won[session_id] + failed[session_id]
    finally:
        store.close()

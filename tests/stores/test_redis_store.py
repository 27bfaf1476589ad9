"""RedisStore against a real Redis and a real Redis Cluster on loopback (``source .ci/services``)."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Optional

import pytest
from tests._optional import need

from rollmem.errors import InvalidStateError, StoreUnavailableError
from rollmem.stores import Head, LogWrite
from rollmem.testing import AsyncLogStoreContract, LogStoreContract, append, create, texts

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

redis = need("redis", "redis")
redis_asyncio = need("redis", "redis.asyncio")
redis_cluster = need("redis", "redis.cluster")
redis_asyncio_cluster = need("redis", "redis.asyncio.cluster")

from rollmem.stores.redis import RedisStore, _write_args  # noqa: E402


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


def _put(store: RedisStore, session_id: str, *contents: str, ttl: Optional[float] = None) -> Head:
    """Create the session holding ``contents`` (a test shortcut)."""
    return store.write(session_id, create(*contents, ttl=ttl))


def _append_worker(
    make_store: Callable[[], RedisStore], session_id: str, name: str, count: int, start: Any
) -> None:
    store = make_store()
    try:
        start.wait()
        for number in range(count):
            stored = store.load(session_id)
            assert stored is not None
            store.write(session_id, append(stored.head, f"{name}-{number}"))
    finally:
        store.close()


class _LogServerChecks(ServerStoreChecks):
    """The server checks, for a RedisStore (a subclass sets ``control`` and ``driver_error``)."""

    store_name = "RedisStore"
    extra = "redis"
    driver_modules = ("redis",)
    dead_address = "redis://127.0.0.1:1"

    def test_processes_never_lose_an_update(self) -> None:
        make_store = self.store_factory()
        store = make_store()
        try:
            _put(store, "race")
            context = multiprocessing.get_context("spawn")
            start = context.Barrier(6)
            workers = [
                context.Process(target=_append_worker, args=(make_store, "race", f"p{i}", 20, start))
                for i in range(6)
            ]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(timeout=120)
                assert worker.exitcode == 0
            stored = store.load("race")
            assert stored is not None
            assert stored.head.tail == 120
            assert sorted(texts(stored)) == sorted(f"p{i}-{n}" for i in range(6) for n in range(20))
            assert [e.seq for e in stored.entries] == list(range(120))
        finally:
            store.close()


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


class TestRedisStoreServer(_Isolated, _LogServerChecks):
    control = staticmethod(redis_ctl)
    driver_error = staticmethod(lambda: redis.exceptions.ConnectionError)

    def server_connections(self) -> int:
        counter = redis.Redis.from_url(self.url)
        try:
            return int(counter.info("clients")["connected_clients"])
        finally:
            counter.close()


class TestRedisStoreAsync(_Isolated, AsyncLogStoreContract):
    pass


class _ClusterIsolated(_Isolated):
    """Each contract test gets its own key prefix in the test cluster, deleted afterwards."""

    @pytest.fixture(autouse=True)
    def _isolate(self) -> Iterator[None]:
        self.url, self.prefix = redis_cluster_url(), unique_name("rollmem-test") + ":"
        yield
        drop_redis_keys(self.url, self.prefix, cluster=True)

    def store_factory(self) -> Callable[[], RedisStore]:
        return functools.partial(RedisStore, self.url, prefix=self.prefix, cluster=True)


class TestRedisClusterStore(_ClusterIsolated, LogStoreContract):
    pass


class TestRedisClusterStoreAsync(_ClusterIsolated, AsyncLogStoreContract):
    pass


class TestRedisClusterStoreServer(_ClusterIsolated, _LogServerChecks):
    """The whole cluster stopped mid-run; one node stopped: see test_cluster_primary_stopped_*."""

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


def test_layout_is_a_tagged_head_and_log_per_session(url: str, prefix: str, client: redis.Redis) -> None:
    store = RedisStore(url, prefix=prefix)
    try:
        head = _put(store, "alice", "a")
        store.write("alice", append(head, "b"))
        _put(store, "50% {odd}", "x")
    finally:
        store.close()
    key, log = f"{prefix}{{alice}}:head", f"{prefix}{{alice}}:log"
    assert client.type(key) == b"hash"
    assert client.type(log) == b"list"
    assert client.hmget(key, ["revision", "tail", "summary", "counter", "layout"]) == [
        b"1",
        b"2",
        b"",
        b"c",
        b"2",
    ]
    assert [item.split(b"\t", 2)[:2] for item in client.lrange(log, 0, -1)] == [[b"0", b"1"], [b"1", b"1"]]
    odd = f"{prefix}{{50%25 %7Bodd%7D}}"
    expected = [key, log, odd + ":head", odd + ":log"]
    assert sorted(client.keys(prefix.replace("*", "\\*") + "*")) == sorted(k.encode() for k in expected)
    assert (
        redis.crc.key_slot(key.encode()) == redis.crc.key_slot(log.encode()) == redis.crc.key_slot(b"{alice}")
    )


ODD_IDS_FOR_TAGS = ["x", "{y}", "%7B", "a}b", "{", "}", "}:state", "%", "x}:head", ":head"]


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
                _put(other, session_id, "theirs")
            assert store.ids() == []
            tail = theirs[len(mine) :] if theirs.startswith(mine) else ""
            for session_id in ODD_IDS_FOR_TAGS:
                guesses = {tail + session_id, f"{tail}{{{session_id}}}:head", f"{tail}{{{session_id}}}:log"}
                for guess in guesses | {session_id}:
                    assert store.load(guess) is None, guess
                    assert store.delete(guess) is False, guess
            assert other.ids() == sorted(ODD_IDS_FOR_TAGS)
            for session_id in other.ids():
                assert other.delete(session_id) is True
        finally:
            store.close()
            other.close()


def test_ids_by_prefix_with_encoded_characters(url: str, prefix: str) -> None:
    store = RedisStore(url, prefix=prefix)
    try:
        names = ["{a", "{a}", "%7Ba", "%", "%2", "}", "a"]
        for session_id in names:
            _put(store, session_id, "x")
        for start in ["{", "{a", "%", "%7", "}", "a", ""]:
            assert store.ids(start) == sorted(n for n in names if n.startswith(start)), start
    finally:
        store.close()


def test_a_head_of_another_layout_version_is_refused(url: str, prefix: str, client: redis.Redis) -> None:
    store = RedisStore(url, prefix=prefix)
    key = f"{prefix}{{s}}:head"
    try:
        head = _put(store, "s", "x")
        assert client.hget(key, "layout") == b"2"
        client.hset(key, "layout", "3")
        calls = [
            lambda: store.load("s"),
            lambda: store.load("s", head),
            lambda: store.write("s", append(head, "y")),
        ]
        for call in calls:
            with pytest.raises(
                StoreUnavailableError,
                match="holds rollmem layout version 3; this rollmem reads version 2: upgrade rollmem",
            ):
                call()
        assert client.llen(f"{prefix}{{s}}:log") == 1, "nothing written"
        client.hset(key, "layout", "two")
        with pytest.raises(
            StoreUnavailableError, match=r"layout version 'two'; this rollmem reads version 2$"
        ):
            store.load("s")
    finally:
        store.close()


def test_ttl_is_native_expiry_on_every_key_set_and_cleared(
    url: str, prefix: str, client: redis.Redis
) -> None:
    store = RedisStore(url, prefix=prefix)
    keys = [f"{prefix}{{s}}:head", f"{prefix}{{s}}:log"]
    try:
        head = _put(store, "s", "x", ttl=30)
        assert all(29_000 < client.pttl(key) <= 30_000 for key in keys)
        store.write("s", append(head, "y", ttl=0.5))
        assert all(0 < client.pttl(key) <= 500 for key in keys)
        store.write("s", append(head, "z"))
        assert [client.pttl(key) for key in keys] == [-1, -1], "a write without ttl makes it permanent"
        _put(store, "t", "x", ttl=1e300)
        assert client.pttl(f"{prefix}{{t}}:head") > 300 * 365 * 86_400_000, (
            "a huge ttl means practically never"
        )
    finally:
        store.close()


def test_load_since_returns_only_the_new_entries(url: str, prefix: str) -> None:
    store = RedisStore(url, prefix=prefix)
    try:
        head = _put(store, "s", "a", "b")
        store.write("s", append(head, "c"))
        delta = store.load("s", since=head)
        assert delta is not None
        assert delta.delta
        assert texts(delta) == ["c"]
        assert [e.seq for e in delta.entries] == [2]
        same = store.load("s", since=delta.head)
        assert same is not None
        assert same.delta
        assert same.entries == ()
        store.write("s", LogWrite(head.incarnation, expected_revision=1, cut=1, summary="A", counter="c"))
        full = store.load("s", since=delta.head)
        assert full is not None
        assert not full.delta
        assert texts(full) == ["b", "c"]
    finally:
        store.close()


def test_prefixes_keep_stores_apart_and_glob_characters_are_literal(url: str, prefix: str) -> None:
    tricky = prefix + "a*[b]?\\:"
    other = prefix + "aX[b]?\\:"
    store, neighbour = RedisStore(url, prefix=tricky), RedisStore(url, prefix=other)
    try:
        _put(store, "s", "mine")
        _put(neighbour, "s", "theirs")
        _put(neighbour, "t", "theirs")
        assert store.ids() == ["s"]
        assert neighbour.ids() == ["s", "t"]
        assert texts(store.load("s")) == ["mine"]
        assert store.load("t") is None
        assert store.prefix == tricky
    finally:
        store.close()
        neighbour.close()


def test_default_prefix(url: str, client: redis.Redis) -> None:
    session_id = unique_name("default-prefix")
    store = RedisStore(url)
    try:
        _put(store, session_id, "x")
        assert client.hget(f"rollmem:{{{session_id}}}:head", "tail") == b"1"
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
        _put(store, "s", "x")
        assert store.ids() == ["s"]
        assert store.delete("s") is True
    finally:
        store.close()


def test_flags_must_be_bools(url: str) -> None:
    with pytest.raises(TypeError, match="cluster: expected bool, got int"):
        RedisStore(url, cluster=1)  # type: ignore[arg-type]


def test_bad_url_or_client() -> None:
    with pytest.raises(ValueError, match="redis://"):
        RedisStore("http://localhost:6379")
    expected = (
        "must be a Redis URL, a redis.Redis, a redis.asyncio.Redis or a RedisCluster of either, got int"
    )
    with pytest.raises(TypeError, match=re.escape(expected)):
        RedisStore(6379)  # type: ignore[arg-type]


def test_a_write_resent_by_a_client_retry_succeeds_once(url: str, prefix: str) -> None:
    """redis-py retries a command whose reply was lost; the script must not apply it twice."""
    store = RedisStore(url, prefix=prefix)
    try:
        head = _put(store, "s", "a")
        _client, scripts = store._clients.sync()
        keys, args = store._keys("s"), _write_args(append(head, "b"), "token-1")
        first, again = scripts[1](keys=keys, args=args), scripts[1](keys=keys, args=args)
        assert first == again
        assert first[0] == b"ok"
        assert texts(store.load("s")) == ["a", "b"], "the same write, sent again, is applied once"
    finally:
        store.close()


def test_a_write_resent_after_other_writes_is_still_applied_once(url: str, prefix: str) -> None:
    """The head keeps the last 8 writers' tokens: a resend that finds its own among them (other
    writes came in between) succeeds without writing again."""
    store = RedisStore(url, prefix=prefix)
    try:
        head = _put(store, "s", "a")
        _client, scripts = store._clients.sync()
        keys = store._keys("s")
        mine = _write_args(append(head, "b"), "token-mine")
        scripts[1](keys=keys, args=mine)
        for i in range(7):
            store.write("s", append(head, f"other {i}"))
        reply = scripts[1](keys=keys, args=mine)
        assert reply[0] == b"ok"
        assert texts(store.load("s")).count("b") == 1, "resent after 7 other writes: applied once"
    finally:
        store.close()


@pytest.mark.parametrize("item", [b"+1\t1\t{}", b"0\t-5\t{}", b"0\t1_0\t{}", b"\xc2\xb2\t1\t{}", b"0\t1"])
def test_a_log_item_with_odd_numbers_is_malformed_however_it_is_read(
    url: str, prefix: str, client: redis.Redis, item: bytes
) -> None:
    """The bulk read of a load applies the same rule as the item-by-item one: a sequence number
    of decimal digits, a cost of decimal digits or -1, three parts."""
    store = RedisStore(url, prefix=prefix)
    try:
        client.hset(f"{prefix}{{odd}}:head", mapping={"incarnation": "i", "revision": "1", "tail": "2"})
        client.rpush(f"{prefix}{{odd}}:log", b"0\t1\t{}", item)
        with pytest.raises(StoreUnavailableError, match="malformed entry for session 'odd': log entry"):
            store.load("odd")
    finally:
        store.close()


def test_malformed_entries_raise_and_leave_others_readable(
    url: str, prefix: str, client: redis.Redis
) -> None:
    store = RedisStore(url, prefix=prefix)
    try:
        head = _put(store, "good", "x")
        client.hset(f"{prefix}{{bad}}:head", mapping={"incarnation": "i", "revision": "many", "tail": "0"})
        client.set(f"{prefix}{{string}}:head", "not a hash")
        client.hset(f"{prefix}{{entry}}:head", mapping={"incarnation": "i", "revision": "1", "tail": "1"})
        client.rpush(f"{prefix}{{entry}}:log", "no tabs here")
        client.hset(f"{prefix}{{bin}}:head", mapping={"incarnation": "i", "revision": "1", "tail": "1"})
        client.rpush(f"{prefix}{{bin}}:log", b"0\t1\t\xff")
        with pytest.raises(StoreUnavailableError, match="malformed entry for session 'bad'"):
            store.load("bad")
        with pytest.raises(StoreUnavailableError, match="write of session 'bad' failed: rollmem: the rev"):
            store.write("bad", LogWrite("i", counter=None))
        with pytest.raises(StoreUnavailableError, match=r"load of session 'string' failed: .*WRONGTYPE"):
            store.load("string")
        with pytest.raises(StoreUnavailableError, match="malformed entry for session 'entry'"):
            store.load("entry")
        with pytest.raises(InvalidStateError, match="session 'bin': stored message is not valid UTF-8"):
            store.load("bin")
        store.write("good", append(head, "y"))
        assert texts(store.load("good")) == ["x", "y"]
    finally:
        store.close()


def test_given_clients_serve_one_side_and_stay_open(url: str, prefix: str, client: redis.Redis) -> None:
    store = RedisStore(client, prefix=prefix)
    head = _put(store, "s", "x")
    with pytest.raises(TypeError, match="given a blocking redis client: use load, write"):
        asyncio.run(store.aload("s"))
    connection_id = client.client_id()
    store.close()
    assert client.client_id() == connection_id, "close() left the caller's connection alone"
    with pytest.raises(StoreUnavailableError, match=r" is closed$"):
        store.load("s")

    async def main() -> None:
        given = redis_asyncio.Redis.from_url(url)
        try:
            async_store = RedisStore(given, prefix=prefix)
            assert texts(await async_store.aload("s")) == ["x"]
            await async_store.awrite("s", append(head, "y"))
            with pytest.raises(TypeError, match=r"given a redis\.asyncio client: use the a-methods"):
                async_store.load("s")
            before = await given.client_id()
            await async_store.aclose()
            assert await given.client_id() == before
            assert texts(await RedisStore(given, prefix=prefix).aload("s")) == ["x", "y"]
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
            _put(store, f"s{index}", "x")
            keys = store._keys(f"s{index}")
            assert len(keys) == 2
            assert len({client.keyslot(key) for key in keys}) == 1
            nodes.add(client.get_node_from_key(keys[0]).name)
        assert len(nodes) == 3, "the sessions are spread over the three primaries"
        assert store.ids() == sorted(f"s{index}" for index in range(30)), "ids() scans every primary"
    finally:
        store.close()
        close_redis(client)


def test_given_async_cluster_client(cluster_prefix: str) -> None:
    async def main() -> None:
        nodes = [redis_asyncio_cluster.ClusterNode(host, port) for host, port in redis_cluster_nodes()]
        given = redis_asyncio_cluster.RedisCluster(startup_nodes=nodes)
        try:
            store = RedisStore(given, prefix=cluster_prefix)
            for index in range(10):
                assert (await store.awrite(f"s{index}", create("x"))).revision == 1
            assert await store.aids() == sorted(f"s{index}" for index in range(10))
            assert texts(await store.aload("s3")) == ["x"]
            assert await store.adelete("s3") is True
            with pytest.raises(TypeError, match=r"given a redis\.asyncio client: use the a-methods"):
                store.load("s1")
            await store.aclose()
            assert await given.ping(), "aclose() left the caller's client open"
        finally:
            await given.aclose()

    asyncio.run(main())


def test_cluster_primary_stopped_mid_run(cluster_prefix: str) -> None:
    """One primary goes down while writers append to (and fold) their own sessions: its
    sessions fail with StoreUnavailableError until its replica takes over, the others keep
    working throughout, and no write is half-written (each head's tail matches its log and a
    fold's summary matches its revision). Each writer has its own store, as app workers do
    (redis-py 7.0's RedisCluster, the last for Python 3.9, breaks when threads share it
    through a topology change)."""
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
    for session_id in writers:
        _put(store, session_id)
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
                assert current is not None
                head = current.head
                if len(current.entries) >= 4:  # fold all but the last: the summary counts revisions
                    cut = current.entries[-1].seq
                    summary = str(head.revision + 1)
                    own.write(
                        session_id,
                        LogWrite(
                            head.incarnation,
                            expected_revision=head.revision,
                            summary=summary,
                            cut=cut,
                            counter="c",
                        ),
                    )
                else:
                    own.write(session_id, append(head, str(won[session_id])))
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
                time.sleep(0.05)  # until the replica took over and the victims' writes go through
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
            head = final.head
            assert [e.seq for e in final.entries] == list(range(head.tail - len(final.entries), head.tail))
            assert head.summary == ("" if head.revision == 1 else str(head.revision))
            # A write that raised may or may not have happened: the count lies in between.
            assert won[session_id] <= head.tail + head.revision - 1 <= won[session_id] + failed[session_id]
    finally:
        store.close()


def test_the_script_arguments_are_named_once() -> None:
    """Each script reads its arguments through the locals its field tuple binds, never by number."""
    from rollmem.stores import redis as module

    for fields, script in (
        (module._LOAD_FIELDS, module._LOAD_SCRIPT),
        (module._WRITE_FIELDS, module._WRITE_SCRIPT),
    ):
        lines = script.splitlines()
        assert lines[: len(fields)] == [f"local {name} = ARGV[{i}]" for i, name in enumerate(fields, 1)]
        body = "\n".join(lines[len(fields) :])
        assert [name for name in fields if not re.search(rf"\b{name}\b", body)] == [], "every field is read"
        assert re.findall(r"ARGV\[\d", body) == [], "only the entries are read by index"
    with pytest.raises(KeyError, match="not script fields"):
        module._script_args(module._LOAD_FIELDS, {"since": "x"})


@pytest.mark.parametrize("where", ["nothing listens", "a plain Redis"])
def test_an_unreachable_cluster_is_unavailable_naming_the_session(url: str, where: str) -> None:
    """Every node down, or a URL that is no cluster: the first contact (made on first use, on
    either side) fails as StoreUnavailableError naming the session, never a raw driver error."""
    store = RedisStore("redis://127.0.0.1:1/0" if where == "nothing listens" else url, cluster=True)
    try:
        with pytest.raises(StoreUnavailableError, match=r"^Redis load of session 's' failed: ") as caught:
            store.load("s")
        assert isinstance(caught.value.__cause__, redis.exceptions.RedisClusterException)
        with pytest.raises(StoreUnavailableError, match=r"^Redis write of session 's' failed: "):
            asyncio.run(store.awrite("s", create("x")))
    finally:
        store.close()

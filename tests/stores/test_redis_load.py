"""RedisStore under load: the clients it makes from a URL wait for a connection (bounded, with a
timeout) instead of failing, and a Redis Cluster holds many concurrent async users; every driver
error comes out as ``StoreUnavailableError`` naming the session."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests._optional import need

from rollmem.errors import StoreUnavailableError
from rollmem.memory import RollingMemory
from rollmem.sessions import AsyncSessions, Sessions

from .servers import drop_redis_keys, redis_cluster_url, redis_url, unique_name

need("redis", "redis")

from rollmem.stores.redis import RedisStore  # noqa: E402


def first_words(summary: str, evicted: Any) -> str:
    return " ".join([summary, *(m.content.split()[0] for m in evicted)]).strip()


def folding_memory() -> RollingMemory:
    return RollingMemory(max_tokens=40, summarize_fn=first_words)


@pytest.fixture(params=["redis", "redis-cluster"])
def where(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, bool]]:
    cluster = request.param == "redis-cluster"
    url = redis_cluster_url() if cluster else redis_url()
    prefix = unique_name("rollmem-load") + ":"
    yield url, prefix, cluster
    drop_redis_keys(url, prefix, cluster=cluster)


def _seen(memory: Any) -> list[str]:
    """Every message a session holds, folded or not (the summary keeps each one's first word)."""
    return memory.summary.split() + [m.content.split()[0] for m in memory.buffer]


def test_250_concurrent_async_opens_all_land(where: tuple[str, str, bool]) -> None:
    """250 tasks at once on 25 sessions, each turn folding: none refused for want of a
    connection (redis-py's default pool raised "Too many connections" past 100), none lost."""
    url, prefix, cluster = where

    async def main() -> list[list[str]]:
        async with RedisStore(url, prefix=prefix, cluster=cluster) as store:
            sessions = AsyncSessions(store, folding_memory, max_retries=1000)

            async def turn(user: int) -> None:
                async with sessions.open(f"room-{user % 25}") as memory:
                    memory.add_user_message(f"u{user} says hello there")

            await asyncio.gather(*(turn(user) for user in range(250)))
            rooms = [await sessions.get(f"room-{room}") for room in range(25)]
            return [_seen(memory) for memory in rooms]

    rooms = asyncio.run(main())
    for room, seen in enumerate(rooms):
        assert sorted(seen) == sorted(f"u{user}" for user in range(room, 250, 25))


def test_150_async_users_on_a_fresh_cluster_store_see_no_error() -> None:
    """The cluster path under ~150 concurrent async users from the first call on: redis-py's
    async cluster client, first used by many tasks at once, broke with a raw AttributeError."""
    url, prefix = redis_cluster_url(), unique_name("rollmem-load") + ":"

    async def main() -> list[str]:
        async with RedisStore(url, prefix=prefix, cluster=True) as store:
            sessions = AsyncSessions(store, folding_memory, max_retries=1000)

            async def user(number: int) -> None:
                for turn in range(3):
                    async with sessions.open(f"user-{number % 50}") as memory:
                        memory.add_user_message(f"u{number}.{turn} hi there")

            await asyncio.gather(*(user(number) for number in range(150)))
            seen: list[str] = []
            for number in range(50):
                memory = await sessions.get(f"user-{number}")
                assert memory is not None
                seen += _seen(memory)
            return seen

    try:
        seen = asyncio.run(main())
    finally:
        drop_redis_keys(url, prefix, cluster=True)
    assert sorted(seen) == sorted(f"u{n}.{t}" for n in range(150) for t in range(3))


def test_250_threads_share_one_store(where: tuple[str, str, bool]) -> None:
    url, prefix, cluster = where
    errors: list[BaseException] = []
    barrier = threading.Barrier(250)
    with RedisStore(url, prefix=prefix, cluster=cluster, max_connections=20) as store:
        sessions = Sessions(store, folding_memory, max_retries=1000)

        def turn(user: int) -> None:
            try:
                barrier.wait()
                with sessions.open(f"room-{user % 25}") as memory:
                    memory.add_user_message(f"u{user} says hello there")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=turn, args=(user,)) for user in range(250)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        for room in range(25):
            memory = sessions.get(f"room-{room}")
            assert memory is not None
            assert sorted(_seen(memory)) == sorted(f"u{user}" for user in range(room, 250, 25))


# -- a pool that stays full: a bounded wait, then an error naming the session ------------------------


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on loopback whose server never answers: the kernel completes the connections into
    the listen backlog and nobody accepts them (a hung server). Closing it resets them."""
    server = socket.create_server(("127.0.0.1", 0), backlog=16)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def test_a_full_pool_waits_then_names_the_session(silent_port: int) -> None:
    async def main() -> str:
        store = RedisStore(f"redis://127.0.0.1:{silent_port}/0", max_connections=1, pool_timeout=0.3)
        first = asyncio.ensure_future(store.aload("first"))  # takes the only connection, hangs
        await asyncio.sleep(0.1)
        try:
            with pytest.raises(StoreUnavailableError) as raised:
                await store.aload("second")
            return str(raised.value)
        finally:
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            await store.aclose()

    message = asyncio.run(main())
    assert message == (
        "Redis load of session 'second' failed: no free connection: all 1 of the store's "
        "connections stayed busy for 0.3 s"
    )


def test_a_full_pool_of_blocking_calls_waits_then_names_the_session() -> None:
    server = socket.create_server(("127.0.0.1", 0), backlog=16)
    store = RedisStore(f"redis://127.0.0.1:{server.getsockname()[1]}/0", max_connections=1, pool_timeout=0.3)
    failures: list[BaseException] = []

    def first() -> None:
        try:
            store.load("first")
        except StoreUnavailableError as exc:
            failures.append(exc)

    hung = threading.Thread(target=first)
    try:
        hung.start()  # takes the only connection and waits for an answer
        time.sleep(0.1)
        with pytest.raises(StoreUnavailableError, match=r"^Redis load of session 'second' failed: no free"):
            store.load("second")
    finally:
        server.close()  # resets the hung connection: the first call fails at once
        hung.join()
        store.close()
    assert [type(error) for error in failures] == [StoreUnavailableError]


@pytest.mark.parametrize(("name", "value"), [("max_connections", 0), ("pool_timeout", -1)])
def test_pool_settings_are_checked(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"^{name} must be"):
        RedisStore("redis://127.0.0.1:1/0", **{name: value})

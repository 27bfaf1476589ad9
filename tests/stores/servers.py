"""The real Redis, Redis Cluster, PostgreSQL and PgBouncer servers the store tests use, from
``source .ci/services``.

Addresses and control scripts come from the environment; without them a test skips with a
message saying how to start the servers, or fails under ``ROLLMEM_REQUIRE_SERVICES=1``.
Every test works under its own key prefix or table, removed afterwards.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, ClassVar, Optional

import pytest

from rollmem.errors import StoreUnavailableError
from rollmem.stores import AsyncLogStore, LogStore
from rollmem.testing import append, create, service_url, texts

__all__ = [
    "ServerStoreChecks",
    "close_redis",
    "drop_redis_keys",
    "drop_table",
    "pgbouncer_ctl",
    "pgbouncer_dsn",
    "postgres_ctl",
    "postgres_dsn",
    "redis_cluster_ctl",
    "redis_cluster_nodes",
    "redis_cluster_url",
    "redis_ctl",
    "redis_url",
    "stopped",
    "unique_name",
]

HOW_TO_START = (
    "start Redis, Redis Cluster, PostgreSQL and PgBouncer on loopback with `source .ci/services` "
    "(Debian, as root)"
)


def redis_url() -> str:
    """``ROLLMEM_TEST_REDIS_URL`` (skip or fail without it)."""
    return service_url("ROLLMEM_TEST_REDIS_URL", HOW_TO_START)


def postgres_dsn() -> str:
    """``ROLLMEM_TEST_POSTGRES_DSN`` (skip or fail without it)."""
    return service_url("ROLLMEM_TEST_POSTGRES_DSN", HOW_TO_START)


def redis_ctl() -> str:
    """The script that stops and starts the test Redis (``ROLLMEM_TEST_REDIS_CTL``)."""
    return service_url("ROLLMEM_TEST_REDIS_CTL", HOW_TO_START)


def postgres_ctl() -> str:
    """The script that stops and starts the test PostgreSQL (``ROLLMEM_TEST_POSTGRES_CTL``)."""
    return service_url("ROLLMEM_TEST_POSTGRES_CTL", HOW_TO_START)


def redis_cluster_url() -> str:
    """``ROLLMEM_TEST_REDIS_CLUSTER_URL``: one node of the test Redis Cluster (skip or fail without it)."""
    return service_url("ROLLMEM_TEST_REDIS_CLUSTER_URL", HOW_TO_START)


def redis_cluster_nodes() -> list[tuple[str, int]]:
    """``ROLLMEM_TEST_REDIS_CLUSTER_NODES`` (``host:port,...``) as (host, port) pairs."""
    nodes = service_url("ROLLMEM_TEST_REDIS_CLUSTER_NODES", HOW_TO_START)
    return [(host, int(port)) for host, port in (node.rsplit(":", 1) for node in nodes.split(","))]


def redis_cluster_ctl() -> str:
    """The script that stops and starts the cluster or one node (``ROLLMEM_TEST_REDIS_CLUSTER_CTL``)."""
    return service_url("ROLLMEM_TEST_REDIS_CLUSTER_CTL", HOW_TO_START)


def pgbouncer_dsn() -> str:
    """``ROLLMEM_TEST_PGBOUNCER_DSN``: PostgreSQL through PgBouncer's transaction pooling."""
    return service_url("ROLLMEM_TEST_PGBOUNCER_DSN", HOW_TO_START)


def pgbouncer_ctl() -> str:
    """The script that stops and starts the test PgBouncer (``ROLLMEM_TEST_PGBOUNCER_CTL``)."""
    return service_url("ROLLMEM_TEST_PGBOUNCER_CTL", HOW_TO_START)


def unique_name(stem: str) -> str:
    """``stem`` plus a random suffix: one key prefix or table per test."""
    return f"{stem}_{uuid.uuid4().hex[:12]}"


def _control(script: str, action: str, *args: str) -> None:
    subprocess.run(["bash", script, action, *args], check=True, timeout=120, capture_output=True)


@contextmanager
def stopped(script: str, *args: str) -> Iterator[None]:
    """Stop a server with its control ``script`` for the block, and start it again after
    (``args``, such as a cluster node's port, go to both calls)."""
    _control(script, "stop", *args)
    try:
        yield
    finally:
        _control(script, "start", *args)


def drop_redis_keys(url: str, prefix: str, *, cluster: bool = False) -> int:
    """Delete every key that starts with ``prefix`` (taken literally), on every primary of a
    cluster; return how many went."""
    import redis
    import redis.cluster

    from rollmem.stores.redis import _glob_literal

    client: Any = redis.cluster.RedisCluster.from_url(url) if cluster else redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=_glob_literal(prefix) + "*", count=1000))
        return sum(int(client.delete(key)) for key in keys)  # one by one: keys of many slots
    finally:
        close_redis(client)


def close_redis(client: Any) -> None:
    """Close a ``redis.Redis`` or ``RedisCluster`` with its sockets (``RedisCluster.close()``
    alone leaves its nodes' connections open until garbage collection)."""
    import redis.cluster

    if isinstance(client, redis.cluster.RedisCluster):
        client.disconnect_connection_pools()
    client.close()


def drop_table(dsn: str, table: str) -> None:
    """``DROP TABLE IF EXISTS`` ``table`` (a plain or schema-qualified name) and the tables
    ``PostgresStore`` derives from it (``_heads``, ``_log``, ``_meta``)."""
    import psycopg
    from psycopg import sql

    from rollmem.stores.postgres import _derived

    *schema, name = table.split(".")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for suffix in ("", "_heads", "_log", "_meta"):
            derived = sql.Identifier(*schema, _derived(name, suffix) if suffix else name)
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(derived))


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


class ServerStoreChecks:
    """Tests every server store runs besides the contract: lifecycle, outages, lazy driver.

    A subclass supplies ``store_factory`` (stores in the test's own namespace), the class
    attributes below, and ``outage_store`` when failing fast needs other settings.
    """

    store_name: ClassVar[str]
    """``RedisStore`` or ``PostgresStore``, as imported from ``rollmem.stores``."""
    extra: ClassVar[str]
    driver_modules: ClassVar[tuple[str, ...]]
    dead_address: ClassVar[str]
    """An address the store accepts; used only where the driver is missing."""
    control: ClassVar[Callable[[], str]]
    driver_error: ClassVar[Callable[[], type[BaseException]]]
    """The driver's exception a lost connection raises (the ``__cause__`` to expect)."""

    def store_factory(self) -> Callable[[], Any]:
        """A picklable callable making a new store in the test's namespace."""
        raise NotImplementedError

    def outage_store(self) -> Any:
        return self.store_factory()()

    def test_implements_both_protocols(self) -> None:
        store = self.store_factory()()
        assert isinstance(store, LogStore)
        assert isinstance(store, AsyncLogStore)

    def server_connections(self) -> Optional[int]:
        """How many connections the server has now (``None``: not countable here)."""
        return None

    def _settled(self, connections: Optional[int]) -> None:
        """The server is back to ``connections`` (it may see a closed socket a moment later)."""
        deadline = time.monotonic() + 5
        while connections is not None and self.server_connections() != connections:
            assert time.monotonic() < deadline, f"{self.server_connections()} connections, not {connections}"
            time.sleep(0.05)

    def test_a_plain_with_closes_both_sides_and_then_refuses(self) -> None:
        """A store used through both APIs and closed by a plain ``with`` (inside the event loop
        or after it ended) leaves no client, pool or socket open, and refuses every call."""
        before = self.server_connections()
        with self.store_factory()() as store:
            asyncio.run(store.awrite("s", create("x")))
            assert texts(store.load("s")) == ["x"]
        with pytest.raises(StoreUnavailableError, match=r" is closed$"):
            asyncio.run(store.aload("s"))

        async def inside_the_loop() -> None:
            with self.store_factory()() as other:
                assert texts(await other.aload("s")) == ["x"]
                assert texts(other.load("s")) == ["x"]
            await asyncio.sleep(0.2)  # the async side closes as soon as the loop runs

        asyncio.run(inside_the_loop())
        gc.collect()  # an unclosed socket or connection would warn now: an error under pytest
        self._settled(before)

    def test_async_side_belongs_to_one_living_event_loop(self) -> None:
        """Another loop is refused while the first one lives; once it ends (its async side closed
        with it), another loop may use the store."""
        store = self.store_factory()()
        first = asyncio.new_event_loop()
        try:
            head = first.run_until_complete(store.awrite("s", create("x")))
            with pytest.raises(RuntimeError, match="belongs to another event loop, which has not ended"):
                asyncio.run(store.aload("s"))
        finally:
            store.close()  # the first loop is idle: its async side is closed on it, now
            first.close()
        store = self.store_factory()()
        try:
            assert asyncio.run(store.aload("s")).head == head
            assert asyncio.run(store.aload("s")).head == head, "the first loop ended: a new one may"
        finally:
            store.close()

    def test_server_down_raises_unavailable_then_work_resumes(self) -> None:
        script, cause = type(self).control(), type(self).driver_error()
        store = self.outage_store()
        try:
            head = store.write("s", create("one"))
            head = store.write("s", append(head, "two"))
            with stopped(script):
                calls = {
                    "write": ("s", append(head, "lost")),
                    "load": ("s",),
                    "delete": ("s",),
                    "listing": (),
                }
                for action, args in calls.items():
                    method = getattr(store, "ids" if action == "listing" else action)
                    with pytest.raises(StoreUnavailableError, match=f" {action} .*failed") as caught:
                        method(*args)
                    assert isinstance(caught.value.__cause__, cause)
            stored = store.load("s")
            assert (stored.head, texts(stored)) == (head, ["one", "two"]), "nothing written while down"
            assert store.write("s", append(head, "three")).tail == 3
        finally:
            store.close()

    def test_server_down_raises_unavailable_then_work_resumes_async(self) -> None:
        script, cause = type(self).control(), type(self).driver_error()
        store = self.outage_store()

        async def main() -> None:
            try:
                head = await store.awrite("s", create("one"))
                with stopped(script):
                    with pytest.raises(StoreUnavailableError, match="write of session 's' failed") as caught:
                        await store.awrite("s", append(head, "lost"))
                    assert isinstance(caught.value.__cause__, cause)
                    with pytest.raises(StoreUnavailableError, match="listing failed"):
                        await store.aids()
                assert texts(await store.aload("s")) == ["one"]
                assert (await store.awrite("s", append(head, "two"))).tail == 2
            finally:
                await store.aclose()

        asyncio.run(main())

    def test_importing_the_store_loads_no_driver(self) -> None:
        out = _python(
            f"import sys; from rollmem.stores import {self.store_name}\n"
            f"print(sorted(m for m in {self.driver_modules!r} if m in sys.modules))"
        )
        assert out.strip() == "[]"

    def test_missing_driver_names_the_extra(self) -> None:
        for module in self.driver_modules:
            code = (
                f"import sys; sys.modules[{module!r}] = None\n"
                f"from rollmem.stores import {self.store_name}\n"
                "from rollmem.errors import MissingExtraError\n"
                f"try:\n    {self.store_name}({self.dead_address!r})\n"
                "except MissingExtraError as exc:\n    print(exc)\n"
            )
            expected = f'{self.store_name} needs the {module!r} package: pip install "rollmem[{self.extra}]"'
            assert _python(code).strip() == expected

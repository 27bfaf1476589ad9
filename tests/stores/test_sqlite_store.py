from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rollmem.errors import ConflictError, StoreUnavailableError
from rollmem.stores import AsyncStore, SQLiteStore, Store, StoredSession
from rollmem.stores.sqlite import SCHEMA_VERSION

from .contract import (
    AsyncStoreContract,
    StoreContract,
    assert_every_increment_won_once,
    compare_and_set_in_processes,
)


class _FileStore:
    @pytest.fixture(autouse=True)
    def _directory(self, tmp_path: Path) -> None:
        self.directory = tmp_path

    def make_store(self) -> SQLiteStore:
        return SQLiteStore(self.directory / "sessions.db")


class TestSQLiteFileStore(_FileStore, StoreContract):
    pass


class TestSQLiteFileStoreAsync(_FileStore, AsyncStoreContract):
    pass


class TestSQLiteInMemoryStore(StoreContract):
    def make_store(self) -> SQLiteStore:
        return SQLiteStore()


class TestSQLiteInMemoryStoreAsync(AsyncStoreContract):
    def make_store(self) -> SQLiteStore:
        return SQLiteStore(":memory:")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "chat.db"


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def test_implements_both_protocols() -> None:
    store = SQLiteStore()
    assert isinstance(store, Store)
    assert isinstance(store, AsyncStore)
    assert repr(store) == "SQLiteStore(':memory:')"


def test_file_database_is_in_wal_mode_with_schema_version(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    assert not db_path.exists(), "nothing is touched before the first use"
    store.save("s", "x", 0)
    store.close()
    with _raw(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT value FROM rollmem_meta WHERE key = 'schema_version'").fetchall() == [
            (SCHEMA_VERSION,)
        ]
        assert conn.execute("SELECT session_id, state, revision FROM rollmem_sessions").fetchall() == [
            ("s", "x", 1)
        ]


def test_sessions_survive_reopening(db_path: Path) -> None:
    first = SQLiteStore(db_path)
    first.save("s", "x", 0, 60)
    first.close()
    second = SQLiteStore(str(db_path))
    assert second.load("s") == StoredSession("x", 1)
    assert second.save("s", "y", 1) == 2
    second.close()


def test_two_stores_on_one_file_see_each_other(db_path: Path) -> None:
    first, second = SQLiteStore(db_path), SQLiteStore(db_path)
    first.save("s", "from first", 0)
    assert second.load("s") == StoredSession("from first", 1)
    with pytest.raises(ConflictError):
        second.save("s", "stale", 0)
    second.save("s", "from second", 1)
    assert first.load("s") == StoredSession("from second", 2)
    first.close()
    second.close()


def test_newer_schema_is_refused_untouched(db_path: Path) -> None:
    SQLiteStore(db_path).save("s", "x", 0)
    with _raw(db_path) as conn:
        conn.execute("UPDATE rollmem_meta SET value = 2 WHERE key = 'schema_version'")
    store = SQLiteStore(db_path)
    with pytest.raises(
        StoreUnavailableError, match="schema version 2; this rollmem reads version 1 only: upgrade"
    ):
        store.load("s")
    with pytest.raises(StoreUnavailableError, match="schema version 2"):
        store.save("t", "y", 0)
    with _raw(db_path) as conn:
        assert conn.execute("SELECT session_id FROM rollmem_sessions").fetchall() == [("s",)]


def test_in_memory_database_is_shared_by_threads() -> None:
    store = SQLiteStore(":memory:")
    thread = threading.Thread(target=store.save, args=("s", "from a thread", 0))
    thread.start()
    thread.join()
    assert store.load("s") == StoredSession("from a thread", 1)
    store.close()


def test_closed_store_raises(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    store.save("s", "x", 0)
    store.close()
    store.close()
    for call in (lambda: store.load("s"), lambda: store.save("s", "y", 1), store.ids, store.purge_expired):
        with pytest.raises(StoreUnavailableError, match="is closed"):
            call()


def test_a_directory_is_unavailable(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path)
    with pytest.raises(StoreUnavailableError, match="unable to open") as caught:
        store.load("s")
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)


def test_a_file_that_is_not_a_database_is_unavailable(db_path: Path) -> None:
    db_path.write_bytes(b"this is not an sqlite database, just some text " * 100)
    with pytest.raises(StoreUnavailableError, match="not a database") as caught:
        SQLiteStore(db_path).save("s", "x", 0)
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)


def test_a_failing_write_rolls_back_and_the_store_keeps_working(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    store.save("s", "one", 0)
    with _raw(db_path) as conn:
        conn.execute(
            "CREATE TRIGGER refuse BEFORE UPDATE ON rollmem_sessions WHEN NEW.state = 'boom' "
            "BEGIN SELECT RAISE(ABORT, 'refused by trigger'); END"
        )
    with pytest.raises(StoreUnavailableError, match="refused by trigger") as caught:
        store.save("s", "boom", 1)
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    assert store.load("s") == StoredSession("one", 1)
    assert store.save("s", "two", 1) == 2
    store.close()


def test_a_corrupt_row_is_reported_not_skipped(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    store.save("bad", "x", 0)
    store.save("good", "y", 0)
    with _raw(db_path) as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("UPDATE rollmem_sessions SET revision = 'abc' WHERE session_id = 'bad'")
    with pytest.raises(StoreUnavailableError, match="row of session 'bad' is corrupt"):
        store.load("bad")
    assert store.load("good") == StoredSession("y", 1)
    assert store.ids() == ["bad", "good"]
    store.close()


def test_a_locked_database_times_out_as_unavailable(db_path: Path) -> None:
    store = SQLiteStore(db_path, timeout=0.1)
    store.save("s", "x", 0)
    with _raw(db_path) as conn:
        conn.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailableError, match="locked") as caught:
            store.save("s", "y", 1)
        assert store.load("s") == StoredSession("x", 1), "readers never wait in WAL mode"
        conn.execute("ROLLBACK")
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert store.save("s", "y", 1) == 2
    store.close()


def test_async_calls_do_not_block_the_event_loop(db_path: Path) -> None:
    """While a save waits for another writer's lock, other tasks keep running."""
    store = SQLiteStore(db_path, timeout=10)
    store.save("s", "x", 0)
    blocker = _raw(db_path)
    blocker.execute("BEGIN IMMEDIATE")

    async def main() -> tuple[int, int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.ensure_future(tick())
        saving = asyncio.ensure_future(store.asave("s", "y", 1))
        await asyncio.sleep(0.3)
        ticks_while_blocked = ticks
        assert not saving.done()
        blocker.execute("ROLLBACK")
        revision = await saving
        ticker.cancel()
        await store.aclose()
        return ticks_while_blocked, revision

    ticks_while_blocked, revision = asyncio.run(main())
    blocker.close()
    assert ticks_while_blocked >= 10
    assert revision == 2


def test_processes_never_lose_an_update(db_path: Path) -> None:
    processes, saves = 4, 25
    won = compare_and_set_in_processes(functools.partial(SQLiteStore, str(db_path)), "race", processes, saves)
    store = SQLiteStore(db_path)
    assert_every_increment_won_once(store.load("race"), won, processes * saves)
    store.close()


_WRITER = """
import json, sys
from rollmem.stores import SQLiteStore
store = SQLiteStore(sys.argv[1])
revision = 0
while True:
    state = json.dumps({"count": revision + 1, "pad": "x" * 200_000})
    revision = store.save("s", state, revision)
    print(revision, flush=True)
"""


def test_a_writer_killed_mid_stream_leaves_the_last_commit(db_path: Path) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(db_path)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    printed = 0
    deadline = time.monotonic() + 60
    while printed < 30 and time.monotonic() < deadline:
        line = writer.stdout.readline()
        assert line, "the writer died on its own"
        printed = int(line)
    os.kill(writer.pid, signal.SIGKILL)
    rest = writer.stdout.read().split()
    writer.wait()
    writer.stdout.close()
    assert writer.returncode == -signal.SIGKILL
    last_printed = int(rest[-1]) if rest else printed
    assert last_printed >= 30

    with _raw(db_path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    store = SQLiteStore(db_path)
    loaded = store.load("s")
    assert loaded is not None
    assert loaded.revision in (last_printed, last_printed + 1), "committed but not yet printed at most"
    assert json.loads(loaded.state)["count"] == loaded.revision
    assert store.save("s", "after the crash", loaded.revision) == loaded.revision + 1
    store.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"path": b"x.db"}, TypeError, "path must be a str or an os.PathLike of str, got bytes"),
        ({"timeout": "1"}, TypeError, "timeout: expected a number of seconds, got str"),
        ({"timeout": True}, TypeError, "timeout: expected a number of seconds, got bool"),
        ({"timeout": -1}, ValueError, "timeout must be between 0 and 2000000 seconds, got -1"),
        ({"timeout": 3e6}, ValueError, "timeout must be between 0 and 2000000 seconds, got 3000000.0"),
        ({"timeout": float("nan")}, ValueError, "timeout must be between 0 and 2000000 seconds, got nan"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        SQLiteStore(**kwargs)  # type: ignore[arg-type]

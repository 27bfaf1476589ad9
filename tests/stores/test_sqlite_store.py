from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rollmem.errors import ConflictError, StoreUnavailableError
from rollmem.stores import AsyncLogStore, LogStore, LogWrite, SQLiteStore
from rollmem.stores.rules import LAYOUT_VERSION
from rollmem.testing import AsyncLogStoreContract, LogStoreContract, append, create, entry, texts


class _FileStore:
    @pytest.fixture(autouse=True)
    def _directory(self, tmp_path: Path) -> None:
        self.directory = tmp_path

    def make_store(self) -> SQLiteStore:
        return SQLiteStore(self.directory / "sessions.db")


class TestSQLiteFileStore(_FileStore, LogStoreContract):
    pass


class TestSQLiteFileStoreAsync(_FileStore, AsyncLogStoreContract):
    pass


class TestSQLiteInMemoryStore(LogStoreContract):
    def make_store(self) -> SQLiteStore:
        return SQLiteStore()


class TestSQLiteInMemoryStoreAsync(AsyncLogStoreContract):
    def make_store(self) -> SQLiteStore:
        return SQLiteStore(":memory:")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "chat.db"


def _raw(path: Path) -> contextlib.closing[sqlite3.Connection]:
    """A plain connection that a ``with`` block closes (sqlite3's own ``with`` only commits)."""
    return contextlib.closing(sqlite3.connect(path, isolation_level=None))


def test_implements_both_log_protocols() -> None:
    store = SQLiteStore()
    assert isinstance(store, LogStore)
    assert isinstance(store, AsyncLogStore)
    assert repr(store) == "SQLiteStore(':memory:')"


def test_file_database_is_in_wal_mode_with_a_head_and_a_log(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    assert not db_path.exists(), "nothing is touched before the first use"
    head = store.write("s", create("a", "b"))
    store.write("s", append(head, "c"))
    store.close()
    with _raw(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT value FROM rollmem_meta WHERE key = 'schema_version'").fetchall() == [
            (LAYOUT_VERSION,)
        ]
        assert conn.execute("SELECT session_id, revision, tail, counter FROM rollmem_heads").fetchall() == [
            ("s", 1, 3, "c")
        ]
        assert conn.execute("SELECT seq, message, cost FROM rollmem_log ORDER BY seq").fetchall() == [
            (0, '{"role": "user", "content": "a"}', 1),
            (1, '{"role": "user", "content": "b"}', 1),
            (2, '{"role": "user", "content": "c"}', 1),
        ]


def test_two_stores_on_one_file_see_each_other(db_path: Path) -> None:
    first, second = SQLiteStore(db_path), SQLiteStore(db_path)
    head = first.write("s", create("from first"))
    assert texts(second.load("s")) == ["from first"]
    with pytest.raises(ConflictError):
        second.write("s", create("stale"))
    second.write("s", append(head, "from second"))
    assert texts(first.load("s")) == ["from first", "from second"]
    first.close()
    second.close()


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (3, "version 3; this rollmem reads version 2: upgrade rollmem"),
        (1, "version 1; this rollmem reads version 2"),
    ],
)
def test_another_layout_version_is_refused_untouched(db_path: Path, version: int, message: str) -> None:
    SQLiteStore(db_path).write("s", create("x"))
    with _raw(db_path) as conn:
        conn.execute("UPDATE rollmem_meta SET value = ? WHERE key = 'schema_version'", (version,))
    store = SQLiteStore(db_path)
    with pytest.raises(StoreUnavailableError, match=f"holds rollmem layout {message}$"):
        store.load("s")
    with pytest.raises(StoreUnavailableError, match=f"layout version {version}"):
        store.write("t", create("y"))
    with _raw(db_path) as conn:
        assert conn.execute("SELECT session_id FROM rollmem_heads").fetchall() == [("s",)]


def test_in_memory_database_is_shared_by_threads() -> None:
    store = SQLiteStore(":memory:")
    thread = threading.Thread(target=store.write, args=("s", create("from a thread")))
    thread.start()
    thread.join()
    assert texts(store.load("s")) == ["from a thread"]
    store.close()


def test_a_new_database_and_its_wal_files_are_the_owners_only(db_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = SQLiteStore(db_path)
        head = store.write("s", create("x"))
        other = SQLiteStore(db_path)  # a second connection keeps the -wal and -shm files there
        other.write("s", append(head, "y"))
        files = [db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")]
        assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in files} == {
            path.name: 0o600 for path in files
        }
        other.close()
        store.close()
    finally:
        os.umask(old)


def test_an_existing_database_keeps_its_mode(db_path: Path) -> None:
    with _raw(db_path):
        pass
    db_path.chmod(0o640)
    with SQLiteStore(db_path) as store:
        store.write("s", create("x"))
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o640


def test_a_directory_is_unavailable(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path)
    with pytest.raises(StoreUnavailableError, match="unable to open") as caught:
        store.load("s")
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)


def test_a_file_that_is_not_a_database_is_unavailable(db_path: Path) -> None:
    db_path.write_bytes(b"this is not an sqlite database, just some text " * 100)
    with pytest.raises(StoreUnavailableError, match="not a database") as caught:
        SQLiteStore(db_path).write("s", create("x"))
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)


def test_a_failing_write_rolls_back_and_the_store_keeps_working(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    head = store.write("s", create("one"))
    with _raw(db_path) as conn:
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON rollmem_log WHEN NEW.message LIKE '%boom%' "
            "BEGIN SELECT RAISE(ABORT, 'refused by trigger'); END"
        )
    fold = LogWrite(
        head.incarnation, (entry("two"), entry("boom")), expected_revision=1, summary="x", cut=1, counter="c"
    )
    with pytest.raises(StoreUnavailableError, match="refused by trigger") as caught:
        store.write("s", fold)
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    stored = store.load("s")
    assert stored is not None
    assert (stored.head, texts(stored)) == (head, ["one"]), "the head and the deleted row are back"
    store.write("s", append(head, "two"))
    assert texts(store.load("s")) == ["one", "two"]
    store.close()


def test_a_corrupt_row_is_reported_not_skipped(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    store.write("bad", create("x"))
    store.write("good", create("y"))
    with _raw(db_path) as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("UPDATE rollmem_heads SET tail = 'abc' WHERE session_id = 'bad'")
    with pytest.raises(StoreUnavailableError, match="rows of session 'bad' are corrupt"):
        store.load("bad")
    assert texts(store.load("good")) == ["y"]
    assert store.ids() == ["bad", "good"]
    store.close()


@pytest.mark.parametrize(
    "corruption",
    ["\"message\" = x'00'", "\"cost\" = 'abc'", '"cost" = 1.5'],
    ids=["message-blob", "cost-text", "cost-real"],
)
def test_a_corrupt_entry_is_reported_not_skipped(db_path: Path, corruption: str) -> None:
    store = SQLiteStore(db_path)
    store.write("bad", create("x"))
    store.write("bad", append(store.load("bad").head, "y"))  # type: ignore[union-attr]
    with _raw(db_path) as conn:
        conn.execute(f"UPDATE rollmem_log SET {corruption} WHERE session_id = 'bad' AND seq = 1")
    with pytest.raises(StoreUnavailableError, match=r"rows of session 'bad' are corrupt \(entry 1\)"):
        store.load("bad")
    store.close()


def test_a_locked_database_times_out_as_unavailable(db_path: Path) -> None:
    store = SQLiteStore(db_path, timeout=0.1)
    head = store.write("s", create("x"))
    with _raw(db_path) as conn:
        conn.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailableError, match="locked") as caught:
            store.write("s", append(head, "y"))
        assert texts(store.load("s")) == ["x"], "readers never wait in WAL mode"
        conn.execute("ROLLBACK")
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert store.write("s", append(head, "y")).tail == 2
    store.close()


def test_async_calls_do_not_block_the_event_loop(db_path: Path) -> None:
    """While a write waits for another writer's lock, other tasks keep running."""
    store = SQLiteStore(db_path, timeout=10)
    head = store.write("s", create("x"))
    blocker = sqlite3.connect(db_path, isolation_level=None)  # closed at the end
    blocker.execute("BEGIN IMMEDIATE")

    async def main() -> tuple[int, int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.ensure_future(tick())
        writing = asyncio.ensure_future(store.awrite("s", append(head, "y")))
        await asyncio.sleep(0.3)
        ticks_while_blocked = ticks
        assert not writing.done()
        blocker.execute("ROLLBACK")
        written = await writing
        ticker.cancel()
        await store.aclose()
        return ticks_while_blocked, written.tail

    ticks_while_blocked, tail = asyncio.run(main())
    blocker.close()
    assert ticks_while_blocked >= 10
    assert tail == 2


_APPENDER = """
import sys
from rollmem.stores import SQLiteStore
from rollmem.testing import append
store = SQLiteStore(sys.argv[1])
head = store.load("s").head
for number in range(int(sys.argv[3])):
    store.write("s", append(head, f"{sys.argv[2]}-{number}"))
store.close()
"""


def test_processes_appending_lose_nothing(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    store.write("s", create())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path])}
    workers = [
        subprocess.Popen([sys.executable, "-c", _APPENDER, str(db_path), f"p{n}", "25"], env=env)
        for n in range(4)
    ]
    assert [worker.wait(timeout=120) for worker in workers] == [0, 0, 0, 0]
    stored = store.load("s")
    assert sorted(texts(stored)) == sorted(f"p{n}-{i}" for n in range(4) for i in range(25))
    assert [e.seq for e in stored.entries] == list(range(100))
    store.close()


_WRITER = """
from rollmem.stores import SQLiteStore
from rollmem.testing import append, create
import sys
store = SQLiteStore(sys.argv[1])
head = store.write("s", create())
count = 0
while True:
    head = store.write("s", append(head, "x" * 20_000 + str(count)))
    count += 1
    print(head.tail, flush=True)
"""


def test_a_writer_killed_mid_stream_leaves_the_last_commit(db_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path])}
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(db_path)], stdout=subprocess.PIPE, text=True, env=env
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
    assert loaded.head.tail in (last_printed, last_printed + 1), "committed but not yet printed at most"
    assert len(loaded.entries) == loaded.head.tail, "the head and the log agree"
    assert texts(loaded)[-1] == "x" * 20_000 + str(loaded.head.tail - 1)
    assert store.write("s", append(loaded.head, "after the crash")).tail == loaded.head.tail + 1
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


def test_json_of_entries_is_kept_verbatim(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    text = json.dumps({"role": "user", "content": "héllo 🌍"}, ensure_ascii=False)
    store.write("s", LogWrite("", (entry("a"),), create=True))
    head = store.load("s").head
    store.write("s", LogWrite(head.incarnation, (entry("a").__class__(text, 3),), counter=None))
    assert [e.message for e in store.load("s").entries][-1] == text
    store.close()

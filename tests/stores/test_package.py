from __future__ import annotations

import subprocess
import sys

import pytest

import rollmem.stores


def test_public_names() -> None:
    assert rollmem.stores.__all__ == [
        "AsyncLogStore",
        "Head",
        "LogEntry",
        "LogStore",
        "LogWrite",
        "MemoryStore",
        "PostgresStore",
        "RedisStore",
        "SQLiteStore",
        "StoredLog",
    ]
    assert set(rollmem.stores.__all__) <= set(dir(rollmem.stores))


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("statement", ["import rollmem", "import rollmem.stores"])
def test_importing_loads_no_driver(statement: str) -> None:
    loaded = _modules_after(statement)
    assert loaded.isdisjoint({"sqlite3", "_sqlite3", "redis", "psycopg", "psycopg_pool"})
    assert "rollmem.stores.sqlite" not in loaded


def test_importing_rollmem_loads_no_store() -> None:
    assert not any(name.startswith("rollmem.stores") for name in _modules_after("import rollmem"))


def test_unknown_attribute() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchStore'"):
        _ = rollmem.stores.NoSuchStore  # type: ignore[attr-defined]

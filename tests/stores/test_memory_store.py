from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rollmem.stores import AsyncLogStore, LogStore, MemoryStore
from rollmem.testing import AsyncLogStoreContract, LogStoreContract, create


class TestMemoryStore(LogStoreContract):
    def make_store(self) -> MemoryStore:
        return MemoryStore()


class TestMemoryStoreAsync(AsyncLogStoreContract):
    def make_store(self) -> MemoryStore:
        return MemoryStore()


def test_implements_both_log_protocols() -> None:
    store = MemoryStore()
    assert isinstance(store, LogStore)
    assert isinstance(store, AsyncLogStore)


def test_stores_are_independent() -> None:
    first, second = MemoryStore(), MemoryStore()
    first.write("s", create("x"))
    assert second.load("s") is None
    assert second.ids() == []


def test_close_drops_the_sessions() -> None:
    store = MemoryStore()
    store.write("s", create("x"))
    store.close()
    assert repr(store) == "<MemoryStore with 0 sessions>"


def _docs_store_tests() -> type:
    """The test class of the third-party store example in docs/pages/stores.md, run here."""
    page = Path(__file__).parents[2] / "docs" / "pages" / "stores.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
    (code,) = [block for block in blocks if "class KeyValueLogStore" in block]
    namespace: dict[str, Any] = {"__name__": "docs_stores"}
    exec(compile(code, str(page), "exec"), namespace)
    tests: type = namespace["TestKeyValueLogStore"]
    return tests


TestDocsKeyValueLogStore = _docs_store_tests()

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rollmem.stores import AsyncLogStore, AsyncStore, LogStore, MemoryStore, Store, WholeStateLog
from rollmem.testing import AsyncLogStoreContract, DictStore, LogStoreContract, StoreContract, create


class TestMemoryStore(LogStoreContract):
    def make_store(self) -> MemoryStore:
        return MemoryStore()


class TestMemoryStoreAsync(AsyncLogStoreContract):
    def make_store(self) -> MemoryStore:
        return MemoryStore()


class TestWholeStateAdapter(LogStoreContract):
    """A third-party whole-state store, through the generic adapter: the same log contract."""

    expires_natively = True
    delta_loads = False

    def make_store(self) -> WholeStateLog:
        return WholeStateLog(DictStore())


class TestDictStore(StoreContract):
    """The whole-state contract itself, on the third-party store the adapter tests use."""

    expires_natively = True

    def make_store(self) -> DictStore:
        return DictStore()


def test_implements_both_log_protocols_and_not_the_whole_state_one() -> None:
    store = MemoryStore()
    assert isinstance(store, LogStore)
    assert isinstance(store, AsyncLogStore)
    assert not isinstance(store, Store)
    assert not isinstance(store, AsyncStore)


def test_stores_are_independent() -> None:
    first, second = MemoryStore(), MemoryStore()
    first.write("s", create("x"))
    assert second.load("s") is None
    assert second.ids() == []


def test_close_keeps_sessions_readable() -> None:
    store = MemoryStore()
    store.write("s", create("x"))
    store.close()
    assert store.ids() == ["s"]


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

from __future__ import annotations

from rollmem.stores import AsyncStore, MemoryStore, Store

from .contract import AsyncStoreContract, StoreContract


class TestMemoryStore(StoreContract):
    def make_store(self) -> MemoryStore:
        return MemoryStore()


class TestMemoryStoreAsync(AsyncStoreContract):
    def make_store(self) -> MemoryStore:
        return MemoryStore()


def test_implements_both_protocols() -> None:
    store = MemoryStore()
    assert isinstance(store, Store)
    assert isinstance(store, AsyncStore)


def test_stores_are_independent() -> None:
    first, second = MemoryStore(), MemoryStore()
    first.save("s", "x", 0)
    assert second.load("s") is None
    assert second.ids() == []


def test_close_keeps_sessions_readable() -> None:
    store = MemoryStore()
    store.save("s", "x", 0)
    store.close()
    assert store.ids() == ["s"]

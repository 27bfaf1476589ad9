from __future__ import annotations

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

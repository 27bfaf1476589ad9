"""The memory contract (:mod:`.contract`) run against every rollmem memory class (an async class
runs with the options of its sync twin) and against the single-file reference implementation."""

from __future__ import annotations

from typing import Any, Callable, Optional

from rollmem import (
    AsyncRollingMemory,
    AsyncSummaryMemory,
    BufferMemory,
    RollingMemory,
    SummaryMemory,
    WindowMemory,
)

from .contract import BudgetContract, MemoryContract
from .reference import reference

Summarize = Optional[Callable[..., Any]]


class TestRollingMemory(BudgetContract, MemoryContract):
    memory_class = RollingMemory


class TestRollingMemoryWithTarget(MemoryContract):
    memory_class = RollingMemory

    def options(self, summarize_fn: Summarize, on_evict: Any) -> dict[str, Any]:
        return {"max_tokens": 4, "target_tokens": 2, "summarize_fn": summarize_fn, "on_evict": on_evict}


class TestAsyncRollingMemory(TestRollingMemory):
    memory_class = AsyncRollingMemory


class TestReferenceRollingMemory(BudgetContract):
    """``docs/reference_impl/rollmem.py``: the core and budget contracts."""

    module = reference
    memory_class = reference.RollingMemory


class TestBufferMemory(MemoryContract):
    memory_class = BufferMemory

    def options(self, summarize_fn: Summarize, on_evict: Any) -> dict[str, Any]:
        return {}


class TestWindowMemory(MemoryContract):
    memory_class = WindowMemory

    def options(self, summarize_fn: Summarize, on_evict: Any) -> dict[str, Any]:
        return {"max_messages": 3, "on_evict": on_evict}


class TestSummaryMemory(MemoryContract):
    memory_class = SummaryMemory

    def options(self, summarize_fn: Summarize, on_evict: Any) -> dict[str, Any]:
        return {"summarize_fn": summarize_fn, "on_evict": on_evict}


class TestAsyncSummaryMemory(TestSummaryMemory):
    memory_class = AsyncSummaryMemory

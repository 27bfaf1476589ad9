"""Where :mod:`rollmem.sessions` keeps conversation state: one small protocol, several backends.

==================  =====================================  ==========================================
store               needs                                  use it for
==================  =====================================  ==========================================
``MemoryStore``     nothing                                tests, scripts, one process
``SQLiteStore``     the standard library                   one machine: threads and processes
``RedisStore``      ``pip install "rollmem[redis]"``       many machines, native expiry
``PostgresStore``   ``pip install "rollmem[postgres]"``    many machines, the database you run
==================  =====================================  ==========================================

``SQLiteStore``, ``RedisStore`` and ``PostgresStore`` are imported on first access, so
importing this package loads neither ``sqlite3`` nor a server driver. Any object with the
methods of :class:`LogStore` (or :class:`AsyncLogStore`) works as a store.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._protocol import AsyncLogStore, Head, LogEntry, LogStore, LogWrite, StoredLog
from .memory import MemoryStore

if TYPE_CHECKING:
    from .sqlite import SQLiteStore

__all__ = [
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

_LAZY = {"SQLiteStore": ".sqlite", "RedisStore": ".redis", "PostgresStore": ".postgres"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

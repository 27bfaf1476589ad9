"""Old private home of :mod:`rollmem.stores.rules`, kept as a re-export; import from there."""

from __future__ import annotations

from .rules import (
    Closing,
    apply_write,
    check_load,
    check_prefix,
    check_save,
    check_session_id,
    check_write,
    conflict,
    is_expired,
    new_head,
    shown,
    write_conflict,
)

__all__ = [
    "Closing",
    "apply_write",
    "check_load",
    "check_prefix",
    "check_save",
    "check_session_id",
    "check_write",
    "conflict",
    "is_expired",
    "new_head",
    "shown",
    "write_conflict",
]

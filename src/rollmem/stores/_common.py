"""Argument checks and messages shared by every store, so all backends accept and reject alike."""

from __future__ import annotations

from typing import Optional

from .. import _validate as v
from ..errors import ConflictError

__all__ = ["check_prefix", "check_save", "check_session_id", "conflict", "is_expired", "shown"]


def _check_text(value: object, name: str, *, allow_empty: bool) -> str:
    v.check_str(name, value, allow_empty=allow_empty)
    assert isinstance(value, str)
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} must be valid Unicode (it holds a lone surrogate)") from None
    return value


def check_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a non-empty str without NUL characters or lone surrogates."""
    return _check_text(session_id, "session_id", allow_empty=False)


def check_prefix(prefix: object) -> str:
    """Return ``prefix`` if it is a str (possibly empty) a session id could start with."""
    return _check_text(prefix, "prefix", allow_empty=True)


def check_save(session_id: object, state: object, expected_revision: object, ttl: object) -> None:
    """Raise ``TypeError``/``ValueError`` naming the bad argument of a ``save`` call."""
    check_session_id(session_id)
    _check_text(state, "state", allow_empty=True)
    v.check_int("expected_revision", expected_revision, 0)
    v.check_ttl(ttl)


def is_expired(expires_at: Optional[float], now: float) -> bool:
    """Whether a session with this expiry time (``None``: never) is gone at ``now``."""
    return expires_at is not None and expires_at <= now


def conflict(session_id: str, expected_revision: int, live_revision: Optional[int]) -> ConflictError:
    """The error for a compare-and-set save that lost; ``live_revision`` is ``None`` when unknown."""
    wanted = "as a new session" if expected_revision == 0 else f"against revision {expected_revision}"
    if live_revision is None:
        found = "another writer saved first"
    elif live_revision == 0:
        found = "the session is absent or expired"
    else:
        found = f"the store is at revision {live_revision}"
    return ConflictError(f"session {shown(session_id)}: saved {wanted} but {found}")


def shown(session_id: str, limit: int = 100) -> str:
    """``repr(session_id)`` for an error message, cut after ``limit`` characters: an error never
    repeats a huge id whole."""
    if len(session_id) <= limit:
        return repr(session_id)
    return f"{session_id[:limit]!r}... ({len(session_id)} characters)"

"""Importing an optional package: the one place that turns its absence into MissingExtraError."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingExtraError


def import_extra(module: str, *, package: str, extra: str, feature: str) -> ModuleType:
    """Import ``module``; if its top-level package is missing, raise :class:`MissingExtraError`
    naming ``pip install "rollmem[extra]"``. Any other missing module (a broken install of the
    package itself) propagates unchanged."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != module.split(".")[0]:
            raise
        raise MissingExtraError(package, extra, feature) from exc

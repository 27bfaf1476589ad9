"""Importing an optional package: the one place that turns its absence into MissingExtraError."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Optional

from .errors import MissingExtraError


def import_extra(module: str, *, package: str, extra: str, feature: str) -> ModuleType:
    """Import ``module``; if its top-level package is missing, raise :class:`MissingExtraError`
    naming ``pip install "rollmem[extra]"``. Any other missing module (a broken install of the
    package itself) propagates unchanged."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = missing_extra(exc, {module.split(".")[0]: package}, extra=extra, feature=feature)
        if missing is None:
            raise
        raise missing from exc


def missing_extra(
    exc: ModuleNotFoundError, packages: Mapping[str, str], *, extra: str, feature: str
) -> Optional[MissingExtraError]:
    """The :class:`MissingExtraError` to raise for ``exc`` when the top-level module it could not
    find is one of ``packages`` (module name -> distribution name), else ``None`` (a broken
    install: let ``exc`` propagate). For a module-level ``from ... import`` of several packages."""
    package = packages.get((exc.name or "").split(".")[0])
    return None if package is None else MissingExtraError(package, extra, feature)

"""The one way a test says that it needs an optional package: by the extra of ``pyproject.toml``
that installs it, so that ``pip install -e ".[dev]"`` then ``pytest`` is green and no test can
depend on a package that no extra it declares provides.

- ``need("redis", "redis.asyncio")``: the module, imported, in a test or at the top of a test
  module (then the whole module skips). It skips when a package of the extra is not installed;
  it fails (not skips) when the extra is not in ``pyproject.toml``, or when the module does not
  come from the extra's packages or their dependencies (a test that declares one extra and uses
  another's package), or cannot be imported although the extra is installed.
- ``@pytest.mark.extra("langchain")`` (registered in ``conftest.py``; on a test, a class, or a
  module as ``pytestmark``): the same skip, for a test that does not import the package itself
  (it drives rollmem code that does).
- ``has("langchain")``: whether the extra is installed, for a check a test adds only where it is.

An extra whose packages all carry a ``python_version`` marker this Python does not meet is not
available here: its tests skip. ``ROLLMEM_REQUIRE_EXTRAS=tiktoken,redis,...`` (what a CI run
installed) makes a listed extra that is missing fail instead of skip.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest's own dependency before 3.11
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
REQUIRE = "ROLLMEM_REQUIRE_EXTRAS"


@functools.cache
def declared() -> dict[str, tuple[Requirement, ...]]:
    """The extras of ``pyproject.toml``: name -> its requirements."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    return {
        name: tuple(Requirement(text) for text in texts)
        for name, texts in project["optional-dependencies"].items()
    }


def _here(requirement: Requirement, extras: frozenset[str] = frozenset()) -> bool:
    """Whether ``requirement`` applies on this Python (asked with ``extras``)."""
    marker = requirement.marker
    return marker is None or any(marker.evaluate({"extra": extra}) for extra in {"", *extras})


def _requirements(extra: str) -> tuple[Requirement, ...]:
    found = declared().get(extra)
    if found is None:
        pytest.fail(f"no extra {extra!r} in pyproject.toml (extras: {', '.join(declared())})", pytrace=False)
    return tuple(requirement for requirement in found if _here(requirement))


@functools.cache
def _distribution(name: str) -> Optional[metadata.Distribution]:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def missing(extra: str) -> Optional[str]:
    """Why the extra is not usable here, or ``None`` when every package of it is installed."""
    requirements = _requirements(extra)
    if not requirements:
        return f"the {extra!r} extra has no package for Python {sys.version_info[0]}.{sys.version_info[1]}"
    missing = [r.name for r in requirements if _distribution(r.name) is None]
    if not missing:
        return None
    reason = f'needs the {extra!r} extra: pip install -e ".[dev,{extra}]"'
    if extra in os.environ.get(REQUIRE, "").split(","):
        pytest.fail(f"{reason} ({REQUIRE} lists it; missing: {', '.join(missing)})", pytrace=False)
    return reason


def has(extra: str) -> bool:
    """Whether every package of ``extra`` (that this Python can install) is installed."""
    return missing(extra) is None


@functools.cache
def _provided(extra: str) -> frozenset[str]:
    """The installed distributions the extra brings: its packages and their dependencies."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(r.name, frozenset(r.extras)) for r in _requirements(extra)]
    while todo:
        name, extras = todo.pop()
        dist = _distribution(name)
        if dist is None or (canonicalize_name(name), extras) in seen:
            continue
        seen.add((canonicalize_name(name), extras))
        for text in dist.requires or ():
            requirement = Requirement(text)
            if _here(requirement, extras):
                todo.append((requirement.name, frozenset(requirement.extras)))
    return frozenset(name for name, _ in seen)


@functools.cache
def _files(name: str) -> frozenset[str]:
    dist = _distribution(name)
    assert dist is not None
    return frozenset(os.path.abspath(dist.locate_file(path)) for path in dist.files or ())


def not_here(extra: str, module: str) -> Optional[str]:
    """Why ``module`` is missing when the extra installs its package only where this Python is
    not (a ``python_version`` marker), else ``None``."""
    top = canonicalize_name(module.partition(".")[0])
    for requirement in declared()[extra]:
        if canonicalize_name(requirement.name) == top and not _here(requirement):
            return f"the {extra!r} extra installs {requirement.name} only where {requirement.marker}"
    return None


def need(extra: str, module: str) -> Any:
    """``module`` imported, for a test that needs ``extra``: skip when the extra is not installed;
    fail when ``module`` is not a module of the extra's packages (see the module docstring)."""
    reason = missing(extra)
    if reason is not None:
        raise pytest.skip.Exception(reason, allow_module_level=True)
    try:
        imported = importlib.import_module(module)
    except ImportError as error:
        elsewhere = not_here(extra, module)
        if elsewhere is not None:  # e.g. langchain, which the extra installs on Python 3.10+ only
            raise pytest.skip.Exception(elsewhere, allow_module_level=True) from None
        pytest.fail(f"{module} cannot be imported though the {extra!r} extra is installed: {error}")
    path = os.path.abspath(getattr(imported, "__file__", None) or "")
    if not any(path in _files(name) for name in _provided(extra)):
        pytest.fail(
            f"{module} does not come from the {extra!r} extra (pyproject.toml) nor its dependencies: "
            "declare the extra that installs it",
            pytrace=False,
        )
    return imported


def check_marks(item: pytest.Item) -> None:
    """What ``@pytest.mark.extra(name)`` does before the test runs (``conftest.py``)."""
    for mark in item.iter_markers("extra"):
        skip_unless(*mark.args)


def skip_unless(extra: str) -> None:
    """Skip (or, with ``ROLLMEM_REQUIRE_EXTRAS=1``, fail) unless ``extra`` is installed: what
    ``@pytest.mark.extra(extra)`` does."""
    reason = missing(extra)
    if reason is not None:
        pytest.skip(reason)

"""The exceptions rollmem raises, in one small tree:

    RollmemError
     ├── InvalidStateError (ValueError)   unreadable state; .path names the field
     │    └── StateTypeError (TypeError)  ...because a field has the wrong type
     ├── ConflictError                    a compare-and-set save lost to other writers
     ├── StoreUnavailableError            a store failed or is unreachable (wraps the
     │                                    driver's error)
     └── MissingExtraError (ImportError)  a helper needs a package: names its extra

Bad arguments to a constructor or an ``add_*`` method raise the plain built-in
``TypeError``/``ValueError`` with a message naming the argument.
"""

from __future__ import annotations

__all__ = [
    "ConflictError",
    "InvalidStateError",
    "MissingExtraError",
    "RollmemError",
    "StateTypeError",
    "StoreUnavailableError",
]


class RollmemError(Exception):
    """Base class of every exception defined by rollmem."""


class InvalidStateError(RollmemError, ValueError):
    """Data that does not follow the state format; ``path`` names the bad field (``""`` for the root)."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)


class StateTypeError(InvalidStateError, TypeError):
    """A field of the state has the wrong type."""


class ConflictError(RollmemError):
    """A session could not be saved because other writers kept saving first."""


class StoreUnavailableError(RollmemError):
    """A store could not be reached or failed; the driver's exception is the ``__cause__``."""


class MissingExtraError(RollmemError, ImportError):
    """An optional helper was used without the package it needs."""

    def __init__(self, package: str, extra: str, feature: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f'{feature} needs the {package!r} package: pip install "rollmem[{extra}]"',
            name=package,
        )

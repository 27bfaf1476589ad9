"""A griffe extension for the API reference: classes a module builds on first access are documented
with their members.

A class built by a module ``__getattr__`` (on a base imported from a framework on first access)
has no body the source reader can see: the module only annotates its name. Where the framework is
installed, this extension imports the module, builds the class and documents it as inspected, so
the reference shows every method it offers. Without the framework the name keeps its docstring.
"""

from __future__ import annotations

import importlib
from typing import Any

import griffe


def _lazy_names(module: griffe.Module) -> list[str]:
    """The ``__all__`` names of ``module`` that are not a class in its source, when it has a
    module ``__getattr__`` that builds them."""
    if "__getattr__" not in module.members:
        return []
    exported = [name for name in module.exports or () if isinstance(name, str)]
    return [name for name in exported if name in module.members and not module.members[name].is_class]


class LazyClasses(griffe.Extension):
    """Replace each lazily built class of a loaded package by its inspected twin."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for module in [pkg, *_submodules(pkg)]:
            names = _lazy_names(module)
            if not names:
                continue
            try:
                runtime = importlib.import_module(module.path)
                for name in names:
                    getattr(runtime, name)  # builds the class (imports its framework)
            except ImportError:
                continue  # the framework is not installed: keep what the source says
            inspected = griffe.inspect(module.path)
            for name in names:
                member = inspected.members.get(name)
                if member is not None and member.is_class:
                    module.set_member(name, member)


def _submodules(module: griffe.Module) -> list[griffe.Module]:
    found: list[griffe.Module] = []
    for member in module.modules.values():
        found.append(member)
        found.extend(_submodules(member))
    return found

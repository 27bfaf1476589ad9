"""A griffe extension for the API reference: it shows the public surface, each name once.

- **One place per object.** A name a public module re-exports (``rollmem.RollingMemory``, defined
  in ``rollmem.memory``) is documented once: where it is defined when that module is public, else
  under the shortest public module that exports it. Every other module that exports it lists it
  with a link ("Also exported here") instead of a second copy, so a search finds each object once.
- **No private name as a value.** An attribute whose value names a private object is shown as
  what it is: a private constant by its literal value; a descriptor (a private class with
  ``__get__``) as a property of the type its ``__get__`` returns for an instance, documented by
  the ``doc`` argument it was built with (as ``property(doc=...)`` is); anything else by its
  annotation alone. An attribute that copies a property (``max_tokens = RollingMemory.max_tokens``)
  is shown as that property, and ``self.limit = limit`` in ``__init__``
  by the parameter's annotation.
"""

from __future__ import annotations

import ast
from typing import Any

import griffe


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _public(path: str) -> bool:
    return not any(_private(part) for part in path.split("."))


def _modules(module: griffe.Module) -> list[griffe.Module]:
    found = [module]
    for member in module.modules.values():
        if not member.is_alias:
            found.extend(_modules(member))
    return found


def _objects(obj: griffe.Object) -> list[griffe.Object]:
    """``obj`` and every object defined in it (modules, classes and their members), no alias."""
    found = [obj]
    for member in obj.members.values():
        if isinstance(member, griffe.Object):
            found.extend(_objects(member))
    return found


# -- one place per object ----------------------------------------------------------------------


def _target(alias: griffe.Alias) -> griffe.Object | None:
    try:
        return alias.final_target
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None  # defined outside the loaded package: keep the module's own rendering


def _exported(module: griffe.Object) -> list[str]:
    return [name for name in module.exports or () if isinstance(name, str)]


def _home(target: griffe.Object, exporters: list[str]) -> str:
    """Where an object is documented: its definition in a public module, else the shortest
    public module path that exports it."""
    if _public(target.module.path):
        return target.path
    return min(exporters, key=lambda path: (path.count("."), path))


def _document_once(pkg: griffe.Module) -> None:
    modules = [module for module in _modules(pkg) if _public(module.path)]
    exporters: dict[str, list[str]] = {}  # target path -> public paths that export it
    aliases: list[tuple[griffe.Module, str, griffe.Object]] = []
    for module in modules:
        for name in _exported(module):
            member = module.members.get(name)
            target = _target(member) if isinstance(member, griffe.Alias) else None
            if target is not None:
                exporters.setdefault(target.path, []).append(f"{module.path}.{name}")
                aliases.append((module, name, target))
    moved: dict[str, list[str]] = {}  # module path -> links to where its re-exports are
    for module, name, target in aliases:
        home = _home(target, exporters[target.path])
        if home != f"{module.path}.{name}":
            module.exports = [e for e in module.exports or () if e != name]  # no second copy
            moved.setdefault(module.path, []).append(f"[`{name}`][{home}]")
    for module in modules:
        if module.path in moved:
            note = "Also exported here, documented where they live: " + ", ".join(moved[module.path]) + "."
            text = module.docstring.value + "\n\n" + note if module.docstring else note
            module.docstring = griffe.Docstring(text, parent=module)


# -- no private name as a value ----------------------------------------------------------------


def _names(expr: object) -> list[griffe.ExprName]:
    if not isinstance(expr, griffe.Expr):
        return []
    return [part for part in expr.iterate(flat=True) if isinstance(part, griffe.ExprName)]


def _resolve(name: griffe.ExprName, where: griffe.Object) -> object:
    """The object a name of an expression in ``where`` refers to, or ``None``."""
    try:
        return where.modules_collection[name.canonical_path]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _instance_type(descriptor: griffe.Class) -> griffe.Expr | str | None:
    """What ``descriptor.__get__`` returns when read from an instance (the overload whose
    ``instance`` parameter is not ``None``)."""
    get = descriptor.members.get("__get__")
    if not isinstance(get, griffe.Function):
        return None
    for overload in get.overloads or [get]:
        params = list(overload.parameters)
        if len(params) > 1 and str(params[1].annotation) != "None":
            return overload.returns
    return None


def _doc_argument(descriptor: griffe.Class, call: griffe.ExprCall) -> str | None:
    """The literal string given to the descriptor's ``doc`` parameter, if any."""
    init = descriptor.members.get("__init__")
    positional = [p.name for p in init.parameters][1:] if isinstance(init, griffe.Function) else []
    for position, argument in enumerate(call.arguments):
        if isinstance(argument, griffe.ExprKeyword):
            name, value = argument.name, argument.value
        else:
            name, value = positional[position] if position < len(positional) else "", argument
        if name == "doc" and isinstance(value, str):
            text = ast.literal_eval(value)
            return text if isinstance(text, str) else None
    return None


def _as_descriptor(attribute: griffe.Attribute, descriptor: griffe.Class, call: griffe.ExprCall) -> None:
    attribute.annotation = attribute.annotation or _instance_type(descriptor)
    doc = _doc_argument(descriptor, call)
    if attribute.docstring is None and doc:
        attribute.docstring = griffe.Docstring(doc, parent=attribute)
    attribute.labels = {"property", *(["writable"] if "__set__" in descriptor.members else [])}


def _show_public_value(attribute: griffe.Attribute) -> None:
    value = attribute.value
    private = [name for name in _names(value) if _private(name.name)]
    if not private:
        return
    resolved = _resolve(private[0], attribute)
    attribute.value = None
    if isinstance(resolved, griffe.Attribute) and value == private[0] and not _names(resolved.value):
        attribute.value = resolved.value  # a private constant: its literal value
    called = isinstance(value, griffe.ExprCall) and value.function == private[0]
    if called and isinstance(resolved, griffe.Class) and "__get__" in resolved.members:
        _as_descriptor(attribute, resolved, value)  # type: ignore[arg-type]


def _show_copy(attribute: griffe.Attribute) -> None:
    """``max_tokens = RollingMemory.max_tokens`` in a class body is that property again, and
    ``self.limit = limit`` in ``__init__`` is shown with the parameter's annotation, no value."""
    value = attribute.value
    if not isinstance(value, (griffe.ExprName, griffe.ExprAttribute)):
        return
    names = _names(value)
    source = _resolve(names[-1], attribute) if names else None
    init = attribute.parent.members.get("__init__") if attribute.parent is not None else None
    if isinstance(source, griffe.Attribute) and "property" in source.labels:
        attribute.value = None
        attribute.annotation = source.annotation
        attribute.docstring = attribute.docstring or source.docstring
        attribute.labels = set(source.labels)
    elif "instance-attribute" in attribute.labels and isinstance(init, griffe.Function):
        given = init.parameters[str(value)] if str(value) in init.parameters else None  # noqa: SIM401
        if given is not None:
            attribute.value = None
            attribute.annotation = attribute.annotation or given.annotation


def _show_public_values(pkg: griffe.Module) -> None:
    attributes = [obj for obj in _objects(pkg) if isinstance(obj, griffe.Attribute) and _public(obj.path)]
    for attribute in attributes:
        _show_public_value(attribute)
    for attribute in attributes:  # after the properties they may copy are settled
        _show_copy(attribute)


def _drop_dunders(pkg: griffe.Module) -> None:
    """A class's ``__repr__`` or ``__init_subclass__`` is Python's machinery, not its API, and so
    is a module's ``__all__``: with ``filters: public`` mkdocstrings shows what griffe calls
    public, which counts them, so they leave the tree (a class keeps ``__init__`` and ``__new__``
    for its signature; a module keeps what it exports, ``__version__``)."""
    for obj in _objects(pkg):
        keep = {"__init__", "__new__"} if obj.is_class else set(_exported(obj)) if obj.is_module else None
        if keep is None:
            continue
        for name in [n for n in obj.members if n.startswith("__") and n.endswith("__") and n not in keep]:
            obj.del_member(name)


class PublicSurface(griffe.Extension):
    """Apply both rules once the package is loaded (after ``lazy_classes`` built its classes)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _show_public_values(pkg)
        _document_once(pkg)
        _drop_dunders(pkg)

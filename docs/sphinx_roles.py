"""A griffe extension for the API reference: Sphinx cross-reference roles become code spans.

rollmem's docstrings name other objects the Sphinx way (``:class:`RollingMemory```,
``:meth:`~rollmem.memory.RollingMemory.fold```); Markdown shows them as `RollingMemory` and `fold`.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def _code(match: re.Match[str]) -> str:
    target = match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"


class SphinxRoles(griffe.Extension):
    """Rewrite the roles of every docstring once it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code, obj.docstring.value)

"""An MkDocs hook: the heading of a class member in the API reference names its class.

mkdocstrings titles a method by its name alone (``to_dict``), so a search for ``to_dict`` found a
row of identical hits. Each member heading whose parent on the page is a class gets the class's
name before its own (``RollingMemory.to_dict``), in a span styled like the rest of the heading; the
table of contents keeps the short name. The search index reads the heading, so each hit names its
class too. ``tests/test_docs.py`` checks it in the built site and in the browser.
"""

from __future__ import annotations

import re
from typing import Any

_HEADING = re.compile(r'<h[1-6] id="(?P<id>[^"]+)" class="doc doc-heading">(?P<body>.*?)</h[1-6]>', re.DOTALL)
_CLASS = 'class="doc-symbol doc-symbol-heading doc-symbol-class"'
_NAME = '<span class="doc doc-object-name'


def qualify(html: str) -> str:
    """``html`` with the class name added to each heading of a class member."""
    classes = {m["id"] for m in _HEADING.finditer(html) if _CLASS in m["body"]}

    def owner(match: re.Match[str]) -> str:
        parent, _, _ = match["id"].rpartition(".")
        if parent not in classes or _NAME not in match[0]:
            return match[0]
        prefix = f'<span class="doc doc-object-owner">{parent.rsplit(".", 1)[-1]}.</span>'
        return match[0].replace(_NAME, prefix + _NAME, 1)

    return _HEADING.sub(owner, html)


def on_page_content(html: str, **kwargs: Any) -> str:
    return qualify(html)

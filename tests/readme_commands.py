"""The README's set-up and test commands, as ``.ci/run`` runs them first: ``python
tests/readme_commands.py [README.md]`` prints them as one shell script (standard library only).

The README marks each fenced block to run with an HTML comment on the line before its opening
fence (blank lines between are allowed; the comment does not show on GitHub or the package
index)::

    <!-- ci: set-up -->
    ```sh
    python3 -m venv .venv && . .venv/bin/activate
    pip install -e .
    ```

    <!-- ci: test -->
    ```sh
    pip install -e ".[dev]"
    pytest
    ```

The script is every ``set-up`` block, then every ``test`` block, each in README order; a leading
``$ `` prompt is dropped. A README whose marks name another kind, or that has no set-up or no test
block, is an error (exit status 2): the CI must never run less than the README says.

The README is also the package's long description, the text of its page on the package index:
:func:`index_problems` lists what would be wrong there (``.ci/run`` checks the built wheel's
description with it, a unit test ``README.md``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

KINDS = ("set-up", "test")
MARK = re.compile(r"^<!--\s*ci:\s*(\S+)\s*-->\s*$")
FENCE = re.compile(r"^(`{3,}|~{3,})\s*(\S*)")


class ReadmeError(ValueError):
    """The README does not say what to run."""


def blocks(text: str) -> list[tuple[str, str, list[str]]]:
    """Every fenced block: ``(the mark before it or "", its language, its lines)``."""
    found: list[tuple[str, str, list[str]]] = []
    lines = text.splitlines()
    mark = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        marked = MARK.match(line.strip())
        fence = FENCE.match(line)
        if marked:
            mark = marked.group(1)
        elif fence:
            body: list[str] = []
            while index < len(lines) and not lines[index].startswith(fence.group(1)):
                body.append(lines[index])
                index += 1
            index += 1
            found.append((mark, fence.group(2), body))
            mark = ""
        elif line.strip():
            mark = ""  # a mark belongs to the block right after it
    return found


def commands(text: str) -> dict[str, list[str]]:
    """The commands of each kind (``set-up``, ``test``), in README order."""
    found = blocks(text)
    unknown = sorted({mark for mark, _, _ in found if mark} - set(KINDS))
    if unknown:
        raise ReadmeError(f"unknown ci mark(s) {', '.join(unknown)}; expected {' or '.join(KINDS)}")
    result: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for mark, _, body in found:
        if mark:
            result[mark] += [line[2:] if line.startswith("$ ") else line for line in body if line.strip()]
    for kind in KINDS:
        if not result[kind]:
            raise ReadmeError(f"the README has no {kind} block (mark one with <!-- ci: {kind} -->)")
    return result


def script(text: str) -> str:
    """The shell script ``.ci/run`` runs: the set-up commands, then the test commands."""
    found = commands(text)
    return "\n".join(line for kind in KINDS for line in found[kind]) + "\n"


#: The largest long description, in bytes: the README's budget (8 KiB).
INDEX_LIMIT = 8 * 1024
#: Words that are true of a clone but wrong on the index page of a release.
INDEX_WRONG = ("not yet released", "from a clone")
LINK = re.compile(
    r"\]\(\s*<?([^)\s>]*)"  # [text](target) and ![alt](target)
    r"|^\s*\[[^\]]+\]:\s*<?(\S*?)>?(?:\s|$)"  # [label]: target
    r"""|\b(?:href|src)\s*=\s*["']([^"']*)""",  # HTML
    re.MULTILINE,
)


def index_problems(text: str) -> list[str]:
    """What would be wrong with ``text`` as the long description on the package index: over
    :data:`INDEX_LIMIT` bytes, wording of :data:`INDEX_WRONG` (any case), a relative link (it
    breaks there: only ``https://``, ``http://``, ``mailto:`` and ``#anchor`` links work)."""
    problems = []
    size = len(text.encode("utf-8"))
    if size > INDEX_LIMIT:
        problems.append(f"{size} bytes, over the {INDEX_LIMIT} the long description may have")
    folded = " ".join(text.lower().split())
    problems += [f"says {words!r}" for words in INDEX_WRONG if words in folded]
    for match in LINK.finditer(text):
        target = next(group for group in match.groups() if group is not None)
        if not target.startswith(("https://", "http://", "mailto:", "#")):
            problems.append(f"a relative link {target!r}")
    return problems


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else "README.md")
    try:
        sys.stdout.write(script(path.read_text(encoding="utf-8")))
    except (OSError, ReadmeError) as error:
        print(f"{path}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

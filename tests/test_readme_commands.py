"""What ``.ci/run`` runs first: the README's own set-up and test commands (tests/readme_commands.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from readme_commands import INDEX_LIMIT, ReadmeError, commands, index_problems, script

ROOT = Path(__file__).resolve().parent.parent
TOOL = Path(__file__).resolve().parent / "readme_commands.py"

MARKED = """# project

Some text.

```python
print("not a command")
```

<!-- ci: set-up -->

```sh
$ python3 -m venv .venv && . .venv/bin/activate
pip install -e .
```

```sh
echo "an unmarked block is not run"
```

<!-- ci:test -->
~~~bash
pip install -e ".[dev]"

pytest
~~~

<!-- ci: set-up -->
```sh
python -m project demo
```
"""


def test_the_readme_says_how_to_set_up_and_test() -> None:
    found = commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert any(line.startswith("python3 -m venv ") for line in found["set-up"])
    assert "pip install -e ." in found["set-up"]
    assert found["test"][-2:] == ['pip install -e ".[dev]"', "pytest"]


def test_marked_blocks_run_set_up_first_then_test_in_readme_order() -> None:
    assert script(MARKED) == (
        "python3 -m venv .venv && . .venv/bin/activate\n"
        "pip install -e .\n"
        "python -m project demo\n"
        'pip install -e ".[dev]"\n'
        "pytest\n"
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<!-- ci: setup -->\n```sh\nx\n```\n", "unknown ci mark(s) setup; expected set-up or test"),
        (  # a mark belongs to the block right after it
            "<!-- ci: set-up -->\nSome words.\n```sh\nx\n```\n<!-- ci: test -->\n```sh\npytest\n```\n",
            "the README has no set-up block (mark one with <!-- ci: set-up -->)",
        ),
        (
            "<!-- ci: set-up -->\n```sh\nx\n```\n",
            "the README has no test block (mark one with <!-- ci: test -->)",
        ),
        ("No commands at all.\n", "the README has no set-up block (mark one with <!-- ci: set-up -->)"),
    ],
)
def test_a_readme_that_does_not_say_what_to_run_is_an_error(text: str, error: str) -> None:
    with pytest.raises(ReadmeError) as caught:
        commands(text)
    assert str(caught.value) == error


def test_unmarked_shell_blocks_are_not_commands() -> None:
    text = "```sh\nsetup\n```\n```sh\ntest\n```\n"
    with pytest.raises(ReadmeError, match="no set-up block"):
        commands(text)


def test_the_readme_reads_right_on_the_package_index() -> None:
    """The rules ``.ci/run`` applies to the built wheel's long description, on its source."""
    assert index_problems((ROOT / "README.md").read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "x" * (INDEX_LIMIT + 1),
            f"{INDEX_LIMIT + 1} bytes, over the {INDEX_LIMIT} the long description may have",
        ),
        (
            "é" * (INDEX_LIMIT // 2 + 1),
            f"{INDEX_LIMIT + 2} bytes, over the {INDEX_LIMIT} the long description may have",
        ),
        ("This is rollmem 0.7.0,\nnot yet\nreleased.", "says 'not yet released'"),
        ("From a clone of the repository: pip install -e .", "says 'from a clone'"),
        ("See [the docs](docs/pages/index.md).", "a relative link 'docs/pages/index.md'"),
        ("![logo](img/logo.png)", "a relative link 'img/logo.png'"),
        ("[docs]: ../docs/\n", "a relative link '../docs/'"),
        ('<a href="CONTRIBUTING.md">how</a>', "a relative link 'CONTRIBUTING.md'"),
        ("[x](<docs/a b.md>)", "a relative link 'docs/a'"),
    ],
)
def test_what_is_wrong_on_the_package_index(text: str, problem: str) -> None:
    assert index_problems(text) == [problem]


def test_absolute_links_and_anchors_are_right_on_the_package_index() -> None:
    text = (
        "[site](https://rollmem.github.io/rollmem/latest/) [top](#install) [mail](mailto:a@b.c)\n"
        '[ref]: http://example.com/x\n<img src="https://img.shields.io/badge/x">\n'
        "In a clone of the repository, `pip install -e .` (released as 0.7.0).\n"
    )
    assert index_problems(text) == []


def test_the_script_prints_the_commands_or_one_error_line(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(MARKED, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, str(TOOL), str(readme)], capture_output=True, text=True, check=False
    )
    assert (run.returncode, run.stdout, run.stderr) == (0, script(MARKED), "")
    readme.write_text("nothing\n", encoding="utf-8")
    run = subprocess.run(
        [sys.executable, str(TOOL), str(readme)], capture_output=True, text=True, check=False
    )
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == f"{readme}: the README has no set-up block (mark one with <!-- ci: set-up -->)\n"

"""What ``.ci/run`` runs first: the README's own set-up and test commands (tests/readme_commands.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from readme_commands import ReadmeError, commands, script

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


def test_an_unmarked_readme_runs_its_first_two_shell_blocks() -> None:
    text = "```python\nx = 1\n```\n```sh\nsetup\n```\n```sh\ntest\n```\n```sh\nlater\n```\n"
    assert script(text) == "setup\ntest\n"


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

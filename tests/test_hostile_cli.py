"""The command line's promise on hostile input: a malformed input exits 2 with one line on stderr that
says what and where; never a traceback. Run as a real subprocess, bytes in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

DEEP = 100_000


def run(
    *args: str, stdin: bytes = b"", env: Optional[dict[str, str]] = None
) -> subprocess.CompletedProcess[bytes]:
    base = {key: value for key, value in os.environ.items() if not key.startswith(("LC_", "PYTHONIO"))}
    base.setdefault("PYTHONIOENCODING", "utf-8")
    return subprocess.run(
        [sys.executable, "-m", "rollmem", *args],
        input=stdin,
        capture_output=True,
        env={**base, **(env or {})},
        timeout=120,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[bytes], *fragments: str) -> None:
    err = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 2, err
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err


def test_inspect_deeply_nested_json(tmp_path: Path) -> None:
    state = tmp_path / "deep.json"
    state.write_text("[" * DEEP + "]" * DEEP, encoding="utf-8")
    assert_one_line_error(run("inspect", str(state)), "deep.json: not valid JSON: nested too deeply")


def test_inspect_deeply_nested_metadata(tmp_path: Path) -> None:
    state = tmp_path / "deep.json"
    meta = '{"a":' * 50_000 + "{}" + "}" * 50_000
    state.write_text(
        '{"version":2,"summary":"","buffer":[{"role":"user","content":"x","metadata":' + meta + "}]}",
        encoding="utf-8",
    )
    assert_one_line_error(run("inspect", str(state)), "deep.json")


def test_replay_a_deeply_nested_line() -> None:
    line = '{"role": "user", "content": "hi"}\n' + "[" * DEEP + "]" * DEEP + "\n"
    assert_one_line_error(
        run("replay", "-", stdin=line.encode()), "<stdin>:2: not valid JSON: nested too deeply"
    )


@pytest.mark.parametrize("save", [False, True])
def test_replay_a_lone_surrogate(save: bool, tmp_path: Path) -> None:
    transcript = b'{"role":"user","content":"ok"}\n{"role":"user","content":"\\ud800"}\n'
    args = ["replay", "-"] + (["--save", str(tmp_path / "s.json")] if save else [])
    assert_one_line_error(
        run(*args, stdin=transcript), "<stdin>:2: content: not valid Unicode (lone surrogate at index 0)"
    )
    assert not (tmp_path / "s.json").exists()


def test_inspect_a_lone_surrogate(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    state.write_text('{"version":2,"summary":"\\udfff","buffer":[]}', encoding="utf-8")
    assert_one_line_error(run("inspect", str(state)), "s.json: summary: not valid Unicode")


@pytest.mark.parametrize("locale", [{}, {"LC_ALL": "C", "PYTHONIOENCODING": ""}])
def test_replay_invalid_utf8_on_stdin(locale: dict[str, str]) -> None:
    assert_one_line_error(
        run("replay", "-", stdin=b'{"role":"user","content":"caf\xe9"}\n', env=locale),
        "cannot read -",
        "utf-8",
    )


def test_invalid_utf8_in_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"version":2,"summary":"\xff","buffer":[]}')
    assert_one_line_error(run("inspect", str(bad)), "cannot read")
    assert_one_line_error(run("replay", str(bad)), "cannot read")


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (b'{"role":"user","content":NaN}', "<stdin>:1: content: expected str"),
        (b'{"role":"user","content":"a\x00b"}', "<stdin>:1: not valid JSON"),
        (b"\x00", "<stdin>:1: not valid JSON"),
        (b'"just a string"', "<stdin>:1: expected a mapping, got str"),
    ],
)
def test_replay_other_malformed_lines(line: bytes, fragment: str) -> None:
    assert_one_line_error(run("replay", "-", stdin=line + b"\n"), fragment)


def test_replay_valid_odd_text_works(tmp_path: Path) -> None:
    text = "nul \u0000 emoji 😀 " + "x" * 10_000_000
    line = json.dumps({"role": "user", "content": text}).encode()
    result = run("replay", "-", "--json", "--save", str(tmp_path / "s.json"), stdin=line + b"\n")
    assert result.returncode == 0, result.stderr
    saved = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    assert saved["buffer"][0]["content"] == text
    inspected = run("inspect", str(tmp_path / "s.json"), "--json")
    assert inspected.returncode == 0, inspected.stderr


def test_output_the_terminal_cannot_encode_is_one_line(tmp_path: Path) -> None:
    transcript = json.dumps({"role": "user", "content": "café"}).encode() + b"\n"
    result = run("replay", "-", stdin=transcript, env={"PYTHONIOENCODING": "ascii"})
    assert_one_line_error(result, "cannot write the output as ascii")

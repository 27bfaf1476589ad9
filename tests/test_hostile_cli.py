"""The command line's promise on hostile input: a malformed input exits 2 with one line on stderr that
says what and where; never a traceback. Run as a real subprocess, bytes in."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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


# --- issue 19.6: JSON Lines split on "\n" only; a hostile summarizer; huge integers; Ctrl-C ---------


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c"])
def test_replay_keeps_line_separators_inside_strings(separator: str) -> None:
    """``str.splitlines`` splits on these; JSON strings may hold them raw, so only ``\\n`` ends a line."""
    content = f"before{separator}after"
    line = json.dumps({"role": "user", "content": content}, ensure_ascii=False).encode("utf-8")
    result = run("replay", "-", "--json", stdin=line + b"\r\n" + line + b"\n")
    assert result.returncode == 0, result.stderr
    context = json.loads(result.stdout)["context"]
    assert [message["content"] for message in context] == [content, content]


def _summarizer_module(tmp_path: Path, body: str) -> dict[str, str]:
    (tmp_path / "hostile_sum.py").write_text(body, encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return {"PYTHONPATH": path}


FOLDING = b"".join(b'{"role":"user","content":"one two three four five"}\n' for _ in range(4))


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("def summarize(summary, messages):\n    return 'x\\ud800'\n", "not valid Unicode (lone surrogate"),
        ("def summarize(summary, messages):\n    raise SystemExit(3)\n", "SystemExit: 3"),
        ("def summarize(summary, messages):\n    raise SystemExit\n", "SystemExit"),
        ("def summarize(summary, messages):\n    raise KeyError('k')\n", "KeyError: 'k'"),
    ],
)
def test_a_hostile_summarizer_exits_1_with_one_line(tmp_path: Path, body: str, fragment: str) -> None:
    env = _summarizer_module(tmp_path, body)
    result = run(
        "replay", "-", "--max-tokens", "8", "--summarizer", "hostile_sum:summarize", stdin=FOLDING, env=env
    )
    err = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 1, err
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    assert err.startswith("rollmem replay: message 2 of 4: the summarizer ")
    assert fragment in err
    assert result.stdout == b""


HUGE = "9" * 5000


def test_replay_a_huge_integer_is_bad_input() -> None:
    line = '{"role":"user","content":"ok","metadata":{"n":' + HUGE + "}}"
    assert_one_line_error(
        run("replay", "-", stdin=b'{"role":"user","content":"a"}\n' + line.encode()),
        "<stdin>:2: a number has more digits than Python reads",
    )


def test_inspect_a_huge_integer_is_bad_input(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    state.write_text('{"version":2,"summary":"","buffer":[],"n":' + HUGE + "}", encoding="utf-8")
    assert_one_line_error(run("inspect", str(state)), "s.json: a number has more digits than Python reads")


def test_ctrl_c_during_replay_exits_130_with_one_line(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    body = (
        "import pathlib, time\n"
        "def summarize(summary, messages):\n"
        f"    pathlib.Path({str(marker)!r}).touch()\n"
        "    time.sleep(60)\n"
        "    return 'never'\n"
    )
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", **_summarizer_module(tmp_path, body)}
    transcript = tmp_path / "chat.jsonl"
    transcript.write_bytes(FOLDING)
    # `python -m rollmem` as a terminal starts it: a run started with SIGINT ignored (a background
    # job) passes that on, and Python then installs no KeyboardInterrupt handler of its own.
    default_sigint = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)"
    command = [
        sys.executable,
        "-c",
        f"{default_sigint}; import runpy; runpy.run_module('rollmem', run_name='__main__')",
    ]
    command += ["replay", str(transcript), "--max-tokens", "8", "--summarizer", "hostile_sum:summarize"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as process:
        deadline = time.monotonic() + 60
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert out == b""
    assert err.decode() == "rollmem replay: interrupted\n"

"""``rollmem replay --summarizer SPEC`` (your own function, or ``openai:MODEL`` against a fake
OpenAI-compatible server on loopback) and the progress bar (a pseudo-terminal vs. pipes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from _optional import need
from rollmem import Message
from rollmem.cli import main
from rollmem.summarizers import DEFAULT_TEMPLATE

SRC = Path(__file__).resolve().parent.parent / "src"

# 8 turns of 5 words each: with --max-tokens 12 (words), the memory folds several times.
TRANSCRIPT = [
    {"role": "user" if index % 2 == 0 else "assistant", "content": f"turn {index} has five words"}
    for index in range(8)
]

RECORDING_MODULE = '''
import asyncio
import json
import os

LOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.jsonl")


def _record(summary, messages, **extra):
    call = {"summary": summary, "messages": [m.to_dict() for m in messages], **extra}
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps(call) + "\\n")
    return (summary + " / " if summary else "") + "; ".join(m.content for m in messages)


def summarize(summary, messages):
    return _record(summary, messages)


async def asummarize(summary, messages):
    await asyncio.sleep(0)
    return _record(summary, messages, loop=id(asyncio.get_running_loop()))


class Summarizers:
    class Nested:
        @staticmethod
        def summarize(summary, messages):
            return _record(summary, messages)


class AwaitableResult:
    """A callable object whose call returns an awaitable."""

    def __call__(self, summary, messages):
        return asummarize(summary, messages)


awaitable_result = AwaitableResult()


def broken(summary, messages):
    raise RuntimeError("LLM down\\nsecond line")


def not_a_string(summary, messages):
    return 42


def leaky(summary, messages):
    raise ConnectionError("cannot reach postgresql://app:S3cr3t@db/chat")


NOT_CALLABLE = 3
'''


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), extra.get("PYTHONPATH", "")) if p)
    return env


def _rollmem(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollmem", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(**env),
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "mysum.py").write_text(RECORDING_MODULE, encoding="utf-8")
    (tmp_path / "chat.jsonl").write_text(
        "".join(json.dumps(item) + "\n" for item in TRANSCRIPT), encoding="utf-8"
    )
    return tmp_path


def _calls(folder: Path) -> list[dict[str, Any]]:
    log = folder / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def _check_chain(calls: list[dict[str, Any]], document: dict[str, Any], spec: str) -> None:
    """Each call continues the previous summary with messages never summarized before, in order."""
    assert len(calls) >= 2
    summary = ""
    folded: list[dict[str, Any]] = []
    for call in calls:
        assert call["summary"] == summary
        folded.extend(call["messages"])
        summary = (summary + " / " if summary else "") + "; ".join(m["content"] for m in call["messages"])
    assert folded == TRANSCRIPT[: len(folded)]
    assert document["context"][0] == {"role": "system", "content": summary}
    assert document["context"][1:] == TRANSCRIPT[len(folded) :]
    assert document["stats"]["summarizer_calls"] == document["stats"]["folds"] == len(calls)
    assert document["stats"]["messages_summarized"] == len(folded)
    assert document["replay"]["summarizer"] == spec


@pytest.mark.parametrize(
    "spec",
    ["mysum:summarize", "mysum:asummarize", "mysum:Summarizers.Nested.summarize", "mysum:awaitable_result"],
)
def test_replay_with_your_own_summarizer(workdir: Path, spec: str) -> None:
    result = _rollmem(
        "replay", "chat.jsonl", "--max-tokens", "12", "--summarizer", spec, "--json", cwd=workdir
    )
    assert (result.returncode, result.stderr) == (0, "")
    calls = _calls(workdir)
    _check_chain(calls, json.loads(result.stdout), spec)
    loops = {call.get("loop") for call in calls}
    assert len(loops) == 1  # async summarizers share one event loop for the whole replay


def test_the_module_is_found_on_pythonpath(workdir: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    result = _rollmem(
        "replay",
        str(workdir / "chat.jsonl"),
        "--max-tokens",
        "12",
        "--summarizer",
        "mysum:summarize",
        cwd=elsewhere,
        PYTHONPATH=str(workdir),
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert "summarizer                 mysum:summarize" in result.stdout
    assert len(_calls(workdir)) >= 2


def test_in_process_the_current_directory_is_searched(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(workdir)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(workdir))])
    monkeypatch.delitem(sys.modules, "mysum", raising=False)
    status = main(["replay", "chat.jsonl", "--max-tokens", "12", "--summarizer", "mysum:summarize", "--json"])
    out, err = capsys.readouterr()
    assert (status, err) == (0, "")
    _check_chain(_calls(workdir), json.loads(out), "mysum:summarize")
    sys.modules.pop("mysum", None)


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("gpt", "--summarizer 'gpt': expected none, extractive, MODULE:FUNCTION or openai:MODEL"),
        ("mysum:", "--summarizer 'mysum:': expected none, extractive, MODULE:FUNCTION or openai:MODEL"),
        (
            ":summarize",
            "--summarizer ':summarize': expected none, extractive, MODULE:FUNCTION or openai:MODEL",
        ),
        ("my sum:f", "--summarizer 'my sum:f': expected none, extractive, MODULE:FUNCTION or openai:MODEL"),
        (
            "mysum:summarize:x",
            "--summarizer 'mysum:summarize:x': expected none, extractive, MODULE:FUNCTION or openai:MODEL",
        ),
        (
            "nosuch:f",
            "--summarizer nosuch:f: no module named 'nosuch' in the current directory or on PYTHONPATH",
        ),
        (
            "nosuch.sub:f",
            "--summarizer nosuch.sub:f: no module named 'nosuch' in the current directory or on PYTHONPATH",
        ),
        ("boom:f", "--summarizer boom:f: importing boom failed: ValueError: bad config"),
        (
            "needs:f",
            "--summarizer needs:f: importing needs failed: ModuleNotFoundError: No module named "
            "'not_installed_anywhere'",
        ),
        ("syntax:f", "--summarizer syntax:f: importing syntax failed: SyntaxError: "),
        ("mysum:nope", "--summarizer mysum:nope: mysum has no attribute 'nope'"),
        (
            "mysum:Summarizers.nope",
            "--summarizer mysum:Summarizers.nope: mysum has no attribute 'Summarizers.nope'",
        ),
        ("mysum:NOT_CALLABLE", "--summarizer mysum:NOT_CALLABLE: NOT_CALLABLE is not callable (it is a int)"),
        ("openai:", "--summarizer openai:: the model name is missing (openai:MODEL)"),
    ],
)
def test_a_spec_that_cannot_be_loaded_exits_2_with_one_line(workdir: Path, spec: str, error: str) -> None:
    (workdir / "boom.py").write_text("raise ValueError('bad config\\nmore')\n", encoding="utf-8")
    (workdir / "needs.py").write_text("import not_installed_anywhere\n", encoding="utf-8")
    (workdir / "syntax.py").write_text("def f(:\n", encoding="utf-8")
    result = _rollmem("replay", "chat.jsonl", "--summarizer", spec, cwd=workdir)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"rollmem replay: {error}")
    assert result.stderr.count("\n") == 1
    assert _calls(workdir) == []


def test_no_error_line_shows_a_url_password(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(workdir)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(workdir))])
    (workdir / "dsn.py").write_text(
        "raise OSError('no route to redis://:S3cr3t@cache:6379/0')\n", encoding="utf-8"
    )
    status = main(["replay", "chat.jsonl", "--summarizer", "dsn:f"])
    assert (status, capsys.readouterr().err) == (
        2,
        "rollmem replay: --summarizer dsn:f: importing dsn failed: OSError: no route to redis://:****@cache:6379/0\n",
    )
    status = main(["replay", "postgresql://app:S3cr3t@db/chat"])
    assert (status, capsys.readouterr().err) == (
        2,
        "rollmem replay: cannot read postgresql://app:****@db/chat: [Errno 2] No such file or directory: "
        "'postgresql://app:****@db/chat'\n",
    )
    assert main(["demo", "postgresql://app:S3cr3t@db/chat"]) == 2
    assert capsys.readouterr().err.endswith("error: unrecognized arguments: postgresql://app:****@db/chat\n")


def test_openai_without_the_extra_exits_2_naming_it(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # as if not installed
    status = main(["replay", str(workdir / "chat.jsonl"), "--summarizer", "openai:llama3"])
    out, err = capsys.readouterr()
    assert (status, out) == (2, "")
    assert err == (
        "rollmem replay: --summarizer openai:MODEL needs the 'openai' package: "
        'pip install "rollmem[openai]"\n'
    )


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("mysum:broken", "the summarizer failed: RuntimeError: LLM down"),
        ("mysum:not_a_string", "the summarizer returned int, expected str"),
        ("mysum:leaky", "the summarizer failed: ConnectionError: cannot reach postgresql://app:****@db/chat"),
    ],
)
def test_a_failing_summarizer_exits_1_with_one_line(workdir: Path, spec: str, error: str) -> None:
    result = _rollmem("replay", "chat.jsonl", "--max-tokens", "12", "--summarizer", spec, cwd=workdir)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"rollmem replay: message 3 of 8: {error}\n"


def test_the_default_and_none_stay_as_they_were(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    documents = {}
    for spec in ("extractive", "none"):
        argv = ["replay", str(workdir / "chat.jsonl"), "--max-tokens", "12", "--json"]
        status = main([*argv, "--summarizer", spec] if spec != "extractive" else argv)
        out, err = capsys.readouterr()
        assert (status, err) == (0, "")
        documents[spec] = json.loads(out)
    assert documents["extractive"]["replay"]["summarizer"] == "extractive"
    assert documents["extractive"]["context"][0]["content"].startswith("user: turn 0 has five words")
    assert documents["none"]["stats"]["summarizer_calls"] == 0
    assert documents["none"]["stats"]["messages_dropped"] > 0


# -- openai:MODEL against a fake OpenAI-compatible server --------------------------------------


class FakeOpenAI(ThreadingHTTPServer):
    """Answers ``POST /v1/chat/completions`` with ``SUMMARY <n>``; records every request."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: FakeOpenAI

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.requests.append(
                {"path": self.path, "authorization": self.headers.get("Authorization"), "body": body}
            )
            number = len(self.server.requests)
        if self.path != "/v1/chat/completions":
            self._reply(404, {"error": {"message": "not found"}})
            return
        self._reply(
            200,
            {
                "id": f"chatcmpl-{number}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": f"  SUMMARY {number}\n"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
            },
        )

    def _reply(self, status: int, document: dict[str, Any]) -> None:
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_openai_model_uses_chat_completions_at_the_base_url(
    workdir: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    need("openai", "openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = _rollmem(
        *("replay", "chat.jsonl", "--max-tokens", "12", "--summarizer", "openai:tiny-model", "--json"),
        cwd=workdir,
        OPENAI_BASE_URL=fake_openai.base_url,
    )
    assert (result.returncode, result.stderr) == (0, "")
    document = json.loads(result.stdout)
    requests = fake_openai.requests
    assert len(requests) == document["stats"]["summarizer_calls"] >= 2
    # what each request asked: the ready prompt with the previous summary and only new messages
    summary, folded = "", 0
    for number, request in enumerate(requests, 1):
        assert request["path"] == "/v1/chat/completions"
        assert request["authorization"] == "Bearer unused"  # OPENAI_API_KEY unset: a placeholder
        body = request["body"]
        assert body["model"] == "tiny-model"
        (message,) = body["messages"]
        assert message["role"] == "user"
        conversation = message["content"].split("New turns to add to it, oldest first:\n")[1].split("\n\n")[0]
        count = len(conversation.splitlines())
        expected = [str(Message.from_dict(item)) for item in TRANSCRIPT[folded : folded + count]]
        assert message["content"] == DEFAULT_TEMPLATE.format(
            summary=summary, conversation="\n".join(expected)
        )
        summary, folded = f"SUMMARY {number}", folded + count
    assert document["context"][0] == {"role": "system", "content": summary}  # the completion, stripped
    assert document["context"][1:] == TRANSCRIPT[folded:]
    assert document["replay"]["summarizer"] == "openai:tiny-model"


# -- the progress bar ----------------------------------------------------------------------------


def _in_a_terminal(args: list[str], cwd: Path) -> tuple[int, str, str]:
    """Run rollmem with stderr on a pseudo-terminal (stdout a pipe); returns status, stdout, stderr."""
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "rollmem", *args],
            cwd=cwd,
            env=_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
        )
    finally:
        os.close(slave)
    received = bytearray()
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the terminal's last writer has gone
            break
        if not chunk:
            break
        received += chunk
    os.close(master)
    out, _ = process.communicate(timeout=60)
    return process.returncode, out.decode("utf-8"), received.decode("utf-8")


def test_a_progress_bar_is_drawn_on_a_terminal(workdir: Path) -> None:
    status, out, err = _in_a_terminal(
        ["replay", "chat.jsonl", "--max-tokens", "12", "--summarizer", "mysum:summarize"], workdir
    )
    assert status == 0
    assert "== final context: the summary, then the recent turns ==" in out
    frames = err.split("\r")
    assert frames[0] == ""
    assert "replaying [##############################] 8/8 messages, " in err
    assert (
        "replaying [#######.......................] 2/8 messages, 0 folds, summarizing 2 messages...\x1b[K"
        in err
    )
    assert err.endswith("\r\x1b[K")  # erased at the end
    drawn = [frame for frame in frames if frame.startswith("replaying [")]
    assert [frame.split("] ")[1].split("/")[0] for frame in drawn if "summarizing" not in frame] == [
        str(n) for n in range(1, 9)
    ]
    assert len(_calls(workdir)) == sum("summarizing" in frame for frame in drawn)


def test_no_progress_bar_with_json_on_a_terminal(workdir: Path) -> None:
    status, out, err = _in_a_terminal(["replay", "chat.jsonl", "--max-tokens", "12", "--json"], workdir)
    assert (status, err) == (0, "")
    assert json.loads(out)["replay"]["messages_replayed"] == 8


def test_no_progress_bar_when_stderr_is_a_pipe(workdir: Path) -> None:
    result = _rollmem(
        "replay", "chat.jsonl", "--max-tokens", "12", "--summarizer", "mysum:summarize", cwd=workdir
    )
    assert (result.returncode, result.stderr) == (0, "")


def test_the_bar_is_erased_before_a_failure_is_reported(workdir: Path) -> None:
    status, out, err = _in_a_terminal(
        ["replay", "chat.jsonl", "--max-tokens", "12", "--summarizer", "mysum:broken"], workdir
    )
    assert (status, out) == (1, "")
    assert err.endswith(
        "\r\x1b[Krollmem replay: message 3 of 8: the summarizer failed: RuntimeError: LLM down\r\n"
    )


def test_help_describes_the_summarizer_forms() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rollmem", "replay", "--help"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "--summarizer SPEC" in text
    assert "MODULE:FUNCTION" in text
    assert "openai:MODEL" in text


def test_the_command_line_imports_openai_only_for_openai_specs() -> None:
    code = "import sys, rollmem.cli\nprint('openai' in sys.modules)\n"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "False\n"

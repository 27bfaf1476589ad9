"""The pre-log layouts' one reader and one whole-write rule (``rollmem.stores._legacy``)."""

from __future__ import annotations

import json

import pytest

from rollmem.errors import ConflictError, InvalidStateError
from rollmem.stores import Head, LogEntry, LogWrite
from rollmem.stores._legacy import LEGACY_INCARNATION, read_state, write_whole

_LOG = {"incarnation": "inc", "revision": 4, "tail": 7, "counter": "words", "seqs": [5, 6], "costs": [2, 3]}


def _document(**log: object) -> str:
    buffer = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    return json.dumps({"version": 2, "summary": "S", "buffer": buffer, "log": {**_LOG, **log}})


def test_a_document_without_a_log_reads_as_the_legacy_incarnation() -> None:
    head, entries = read_state("s", '{"version":1,"summary":"S","buffer":[{"role":"user","content":"x"}]}')
    assert head == Head(LEGACY_INCARNATION, 1, "S", 1, None)
    assert entries == [LogEntry('{"role":"user","content":"x"}', -1, 0)]


def test_a_document_with_a_log_keeps_its_head_numbers_and_costs() -> None:
    head, entries = read_state("s", _document())
    assert head == Head("inc", 4, "S", 7, "words")
    assert [(e.seq, e.cost) for e in entries] == [(5, 2), (6, 3)]


@pytest.mark.parametrize(
    ("state", "path", "problem"),
    [
        ("not json", "", "not JSON (Expecting value: line 1 column 1 (char 0))"),
        ("[]", "", "expected a mapping, got list"),
        ('{"summary": "", "buffer": {}}', "buffer", "expected a list, got dict"),
        ('{"buffer": []}', "summary", "missing required key"),
        (_document(seqs=[5, "6"]), "log.seqs[1]", "expected int, got str"),
        (_document(costs=[2]), "log.costs", "expected 2 numbers, one per buffer item, got 1"),
        (_document(revision=True), "log.revision", "expected int, got bool"),
        (_document(counter=3), "log.counter", "expected str or null, got int"),
    ],
)
def test_a_bad_document_names_the_session_and_the_field(state: str, path: str, problem: str) -> None:
    with pytest.raises(InvalidStateError) as caught:
        read_state("alice", state)
    assert (caught.value.path, caught.value.problem) == (path, problem)
    where = f"{path}: " if path else ""
    assert (
        str(caught.value)
        == f"session 'alice': stored state cannot be read as a session log: {where}{problem}"
    )


def test_a_write_to_an_old_session_keeps_what_the_fold_rule_keeps() -> None:
    head, entries = read_state("s", _document())
    fold = LogWrite("inc", (LogEntry('"c"', 1),), expected_revision=4, summary="T", cut=6, counter="words")
    updated, whole = write_whole("s", head, entries, fold)
    assert updated == Head("inc", 5, "T", 8, "words")
    assert [(e.seq, e.cost) for e in whole] == [(6, 3), (7, 1)]
    with pytest.raises(ConflictError):
        write_whole("s", head, entries, LogWrite("other"))

"""Eight processes append to one session at once: every message ends in the buffer or was
folded into the summary exactly once, however many compare-and-set saves were lost."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from rollmem.memory import BufferMemory, RollingMemory
from rollmem.sessions import Sessions

from . import _support
from .conftest import Backend

PROCESSES = 8
ADDS = 200


def test_processes_appending_to_one_session_lose_and_duplicate_nothing(
    shared_backend: Backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = shared_backend
    go = tmp_path / "go"
    arguments = [backend.name, backend.location, backend.namespace, "shared"]
    writers = [[*arguments, str(index), str(ADDS), str(go)] for index in range(PROCESSES)]
    outputs = _support.run_writers(writers, go, timeout=300)
    retries = sum(output["retries"] for output in outputs)
    assert retries > 0  # the writers did overlap: lost compare-and-sets were written again

    # A fold that lost landed its turn's messages as an append: one more turn folds what is left.
    last = Sessions(backend.store(), lambda: RollingMemory(_support.WORKER_MAX_TOKENS, _support.fold_ids))
    with last.open("shared") as memory:
        memory.add_user_message("last")
    stored = Sessions(backend.store(), BufferMemory).get("shared")
    assert stored is not None
    folded = stored.summary.split()
    kept = [message.content for message in stored.buffer]
    expected = {f"p{worker}-{number}" for worker in range(PROCESSES) for number in range(ADDS)}
    seen = Counter(folded + kept)
    assert set(seen) == expected | {"last"}
    assert [name for name, times in seen.items() if times > 1] == []
    assert len(kept) <= _support.WORKER_MAX_TOKENS
    for worker in range(PROCESSES):  # each writer's messages keep their order
        mine = [name for name in folded + kept if name.startswith(f"p{worker}-")]
        assert mine == [f"p{worker}-{number}" for number in range(ADDS)]
    with capsys.disabled():
        print(f"\n[{backend.name}] {PROCESSES} processes x {ADDS} adds: {retries} retries", end="")

"""The single-file reference implementation (``docs/reference_impl/rollmem.py``) against the
library: the same operations give the same summaries, buffers, summarizer calls and errors
(a Hypothesis state machine); saved states cross between them both ways; the file needs only
the standard library, is importable as ``rollmem`` and stays within its size; its docs page
shows it whole.

The core and budget contracts run against it in :mod:`.test_contract`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Sequence
from typing import Any, Callable, Optional

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import rollmem

from .reference import REFERENCE_FILE, reference

DIFFERENTIAL_SETTINGS = settings(
    max_examples=100,
    stateful_step_count=35,
    deadline=None,
    derandomize=True,  # the same examples on every run: a failure is reproducible, never flaky
)
ROLES = ["user", "assistant", "system", "tool", "narrator"]
ERRORS = (RuntimeError, TypeError, ValueError, KeyError)


def cost(text: str) -> int:
    """A message's tokens are the integer its content starts with (``-1`` is refused)."""
    found = re.match(r"-?\d+", text)
    return int(found.group()) if found else 0


def outcome(run: Callable[[], Any]) -> Optional[type]:
    """The type of the error ``run()`` raises, or ``None``."""
    try:
        run()
    except ERRORS as error:
        return type(error)
    return None


class Summarizer:
    """The same deterministic ``summarize_fn`` for both: records each call, fails on demand."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[dict[str, Any]]]] = []
        self.fail = False

    def __call__(self, summary: str, messages: Sequence[Any]) -> str:
        self.calls.append((summary, [m.to_dict() for m in messages]))
        if self.fail:
            raise RuntimeError("summarizer down")
        return summary + "[" + ",".join(m.content for m in messages) + "]"


class SameBehaviour(RuleBasedStateMachine):
    """One library memory and one reference memory, driven with the same operations."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.calls: list[str] = []  # tool call ids made so far
        self.options: dict[str, Any] = {}  # what builds both memories
        self.summarizers = (Summarizer(), Summarizer())
        self.memories: tuple[Any, Any] = (None, None)

    @initialize(
        max_tokens=st.integers(1, 12),
        target_tokens=st.one_of(st.none(), st.integers(1, 12)),
        summarize=st.booleans(),
    )
    def build(self, max_tokens: int, target_tokens: Optional[int], summarize: bool) -> None:
        target = None if target_tokens is None else min(target_tokens, max_tokens)
        self.options = {"max_tokens": max_tokens, "token_counter": cost, "target_tokens": target}
        self.summarize = summarize
        self.memories = (self.build_one(rollmem, {}), self.build_one(reference, {}))

    def build_one(self, module: Any, state: dict[str, Any]) -> Any:
        """``module``'s memory with the options, holding ``state`` (a saved state or nothing)."""
        summarizer = self.summarizers[module is reference] if self.summarize else None
        if not state:
            return module.RollingMemory(summarize_fn=summarizer, **self.options)
        return module.RollingMemory.from_dict(
            json.loads(json.dumps(state)), summarize_fn=summarizer, **self.options
        )

    def both(self, operation: Callable[[Any, Any], Any]) -> None:
        """Run ``operation(memory, module)`` on each; they fail alike or succeed alike."""
        results = [
            outcome(lambda: operation(memory, module))  # noqa: B023 - called at once
            for memory, module in zip(self.memories, (rollmem, reference))
        ]
        assert results[0] == results[1], results

    def fields(self, tokens: int, data: Any) -> dict[str, Any]:
        """An add's keyword arguments: an id, maybe a pin, metadata, calls or a call's result."""
        self.count += 1
        fields: dict[str, Any] = {
            "id": f"m{self.count % 7}",
            "pinned": tokens % 4 == 0 and data.draw(st.booleans()),
        }
        if data.draw(st.integers(0, 5)) == 0:
            fields["metadata"] = {"n": [self.count], "k": {"x": None}}
        return fields

    @rule(role=st.sampled_from(ROLES), tokens=st.integers(-1, 6), data=st.data())
    def add(self, role: str, tokens: int, data: Any) -> None:
        fields = self.fields(tokens, data)
        kind = data.draw(st.sampled_from(["plain", "plain", "calls", "result"]))
        names: list[str] = []
        if kind == "calls":
            names = [f"c{self.count}.{i}" for i in range(data.draw(st.integers(1, 2)))]
            self.calls.extend(names)
        answers = data.draw(st.sampled_from([*self.calls[-4:], "elsewhere"])) if kind == "result" else None
        content = f"{tokens} m{self.count}"

        def add(memory: Any, module: Any) -> None:
            calls = [module.ToolCall(name, "f", '{"a": 1}') for name in names]
            memory.add_message(role, content, tool_calls=calls, tool_call_id=answers, **fields)

        self.both(add)

    @rule(tokens=st.lists(st.integers(0, 4), max_size=4), bad=st.booleans())
    def extend(self, tokens: list[int], bad: bool) -> None:
        self.count += 1
        roles = ["user", "assistant"]

        def extend(memory: Any, module: Any) -> None:
            batch: list[Any] = [
                module.Message(roles[i % 2], f"{t} e{self.count}.{i}") for i, t in enumerate(tokens)
            ]
            memory.extend([*batch, "not a message"] if bad else batch)

        self.both(extend)

    @rule(data=st.data(), pin=st.booleans())
    def pin_or_unpin(self, data: Any, pin: bool) -> None:
        present = [m.id for m in self.memories[0].buffer if m.id is not None]
        target = data.draw(st.sampled_from([*present, "absent"]))
        self.both(lambda memory, module: (memory.pin if pin else memory.unpin)(target))

    @rule()
    def toggle_summarizer_failure(self) -> None:
        for summarizer in self.summarizers:
            summarizer.fail = not summarizer.fail

    @rule(max_tokens=st.integers(1, 12), data=st.data())
    def change_the_budget(self, max_tokens: int, data: Any) -> None:
        target = data.draw(st.one_of(st.none(), st.integers(1, max_tokens)))
        for memory in self.memories:
            memory.max_tokens = max_tokens  # a target left above it acts as max_tokens
            if target is not None:
                memory.target_tokens = target

    @rule(data=st.data())
    def assign(self, data: Any) -> None:
        keep = data.draw(st.integers(0, len(self.memories[0].buffer)))
        summary = data.draw(st.sampled_from(["", "told"]))
        for memory in self.memories:
            memory.buffer = memory.buffer[:keep]
            memory.summary = summary

    @rule()
    def clear(self) -> None:
        self.both(lambda memory, module: memory.clear())

    @rule()
    def exchange_saved_states(self) -> None:
        """Each continues from the other's saved state, sent through JSON."""
        library, ref = self.memories
        self.options.update(max_tokens=library.max_tokens, target_tokens=library.target_tokens)
        self.memories = (self.build_one(rollmem, ref.to_dict()), self.build_one(reference, library.to_dict()))

    @precondition(lambda self: self.memories[0] is not None)
    @invariant()
    def the_same_state(self) -> None:
        library, ref = self.memories
        assert library.to_dict() == ref.to_dict()
        assert [m.to_dict() for m in library.get_messages()] == [m.to_dict() for m in ref.get_messages()]
        assert library.get_context() == ref.get_context()
        assert self.summarizers[0].calls == self.summarizers[1].calls


def test_the_reference_behaves_as_the_library() -> None:
    run_state_machine_as_test(SameBehaviour, settings=DIFFERENTIAL_SETTINGS)


# -- saved states, both ways ---------------------------------------------------------------------

TEXT = st.text(alphabet='ab Z09_\n"\\{}é中😀', max_size=6)


@st.composite
def states(draw: Any) -> dict[str, Any]:
    """Saved states with every field a message can carry."""
    buffer = []
    for index in range(draw(st.integers(0, 5))):
        item: dict[str, Any] = {"role": draw(st.sampled_from(ROLES)), "content": draw(TEXT)}
        if draw(st.booleans()):
            item["id"] = f"m{index}"
        if draw(st.booleans()):
            item["tool_calls"] = [{"id": f"c{index}", "name": draw(TEXT), "arguments": draw(TEXT)}]
        if draw(st.booleans()):
            item["tool_call_id"] = draw(TEXT)
        if draw(st.booleans()):
            item["metadata"] = {
                draw(TEXT): draw(st.one_of(st.none(), st.integers(), TEXT, st.lists(TEXT, max_size=2)))
            }
        if draw(st.booleans()):
            item["pinned"] = True
        buffer.append(item)
    return {"version": 2, "summary": draw(TEXT), "buffer": buffer}


@settings(max_examples=100, deadline=None, derandomize=True)
@given(states())
def test_saved_states_cross_both_ways_unchanged(state: dict[str, Any]) -> None:
    """A state either writes loads in the other and comes back as it was."""
    through_reference = reference.RollingMemory.from_dict(json.loads(json.dumps(state))).to_dict()
    assert through_reference == state
    back = rollmem.RollingMemory.from_dict(json.loads(json.dumps(through_reference))).to_dict()
    assert back == state
    assert reference.RollingMemory.from_dict({**state, "version": 1}).to_dict() == state


# -- the file itself -------------------------------------------------------------------------------

WORDS = ["one", "two", "three", "four", "five", "six"]
SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import rollmem
assert rollmem.__file__ == sys.argv[2], rollmem.__file__
assert not [name for name in sys.modules if name.split(".")[0] in ("hypothesis", "pytest")]
memory = rollmem.RollingMemory(4, lambda summary, messages: summary + str(len(messages)))
for word in "one two three four five six".split():
    memory.add_user_message(word)
    memory.add_assistant_message(word.upper())
print(json.dumps(memory.to_dict()))
"""


def test_the_file_is_importable_as_rollmem_with_the_standard_library_only() -> None:
    """In a Python that sees no site-packages (``-I -S``): the library is not there to help."""
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", SCRIPT, str(REFERENCE_FILE.parent), str(REFERENCE_FILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    library = rollmem.RollingMemory(4, lambda summary, messages: summary + str(len(messages)))
    for word in WORDS:
        library.add_user_message(word)
        library.add_assistant_message(word.upper())
    assert json.loads(result.stdout) == library.to_dict()


def test_the_file_stays_small_and_narrow() -> None:
    lines = REFERENCE_FILE.read_text(encoding="utf-8").splitlines()
    assert len([line for line in lines if line.strip()]) <= 300
    assert [line for line in lines if len(line) > 88] == []  # shown whole on a docs page


def test_its_docs_page_includes_the_file_itself() -> None:
    """The page shows the file through a snippet include, so the two cannot drift apart."""
    page = REFERENCE_FILE.parents[1] / "pages" / "reference-implementation.md"
    assert '--8<-- "reference_impl/rollmem.py"' in page.read_text(encoding="utf-8")

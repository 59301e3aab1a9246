"""The benchmark gate: each op's fast path against its own reference and against its floor, as
ratios measured in one run, compared with the baseline stored in `benchmarks/gate_baseline.json`.

    python benchmarks/gate.py check       measure (pytest-benchmark, benchmarks/bench_gate.py),
                                          then compare with the stored baseline; exit 1 on a
                                          slowdown beyond a case's threshold (`make bench-gate`)
    python benchmarks/gate.py baseline    measure and store the result as the new baseline
                                          (`make bench-baseline`; on a quiet machine)
    python benchmarks/gate.py compare RUN compare a stored run (pytest-benchmark JSON) instead
    python benchmarks/gate.py noise RUN.. the spread of every ratio over stored runs (the noise
                                          table of docs/performance.md)

Arguments after `--` go to pytest (`-k varlen` measures a selection; `-p MODULE` loads a plugin,
e.g. a planted slow twin). Exit status: 0 every case within its threshold, 1 a case slower
than its threshold allows (or missing from the run, or without a baseline), 2 a usage error
(no baseline file, a baseline measured with another clock).

What is compared (docs/performance.md, "The benchmark gate"): for every case, the best (min)
time of the op's fast path over the rounds divided by the best time of what it is measured
against (the reference on the same inputs, or the floor of its input form from
`batchproof.perf.workloads`), each timed in the same rounds, interleaved, in one process, by
pytest-benchmark's timer: the process's CPU time (`time.process_time`) unless asked otherwise.
A case fails when its ratio grew by more than its threshold (2x unless the measured noise asked
for another) against the baseline's. Absolute times are never compared: they differ between
machines and between a loaded and an idle one.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "gate_baseline.json"
LATEST = HERE.parent / ".benchmarks" / "gate-latest.json"  # the last `check`'s run (ignored by git)
BENCH_FILE = HERE / "bench_gate.py"
TIMER = "time.process_time"
THRESHOLD = 2.0
WARMUP_ROUNDS = 1


# --------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    """One gated ratio: `target`'s best time over `rounds` / each of `against`'s, all made by
    `variants()` (a workload of `batchproof.perf.workloads` at the case's size)."""

    id: str
    op: str
    size: str
    variants: Callable[[], dict[str, Callable[[], object]]]
    target: str
    against: tuple[str, ...]
    rounds: int
    threshold: float = THRESHOLD


@functools.cache
def _workload(factory: str, batch: int) -> dict[str, Callable[[], object]]:
    """The variants of a `batchproof.perf.workloads` workload (built once per size)."""
    from batchproof.perf import workloads

    return dict(getattr(workloads, factory)(batch=batch).variants)


@functools.cache
def _cp_shard(batch: int) -> dict[str, Callable[[], object]]:
    """cp.shard's workload plus its reference on the same padded row (the workload itself
    carries the impl and the write floor only)."""
    from batchproof.perf import workloads
    from batchproof.reference import cp as reference

    size = workloads.CP_BENCH_SIZE
    padded, _ = workloads.device_cp_row(batch, "cpu", prompt_max=500, response_max=2000,
                                        seed=0, cp_size=size)
    return {**_workload("cp_shard_workload", batch),
            "reference": lambda: reference.shard(padded, cp_size=size)}


def balance_lengths(n: int, seed: int = 0) -> list[int]:
    """Sequence lengths as in benchmarks/bench_balance.py: prompt 50-500 + response 50-2000."""
    rng = random.Random(seed)
    return [rng.randint(50, 500) + rng.randint(50, 2000) for _ in range(n)]


@functools.cache
def _balance(function: str, n: int, parts: int) -> dict[str, Callable[[], object]]:
    """`balance.<function>` on n lengths, k = `parts` (karmarkar_karp) or a budget of total /
    `parts` tokens (micro_batches); impl and reference (balance has no floor: no bytes to
    write)."""
    import batchproof.impl.balance as impl
    import batchproof.reference.balance as reference

    lengths = balance_lengths(n)
    arg = parts if function == "karmarkar_karp" else -(-sum(lengths) // parts)
    return {"impl": lambda: getattr(impl, function)(lengths, arg),
            "reference": lambda: getattr(reference, function)(lengths, arg)}


def _of(factory: str, batch: int) -> Callable[[], dict[str, Callable[[], object]]]:
    return functools.partial(_workload, factory, batch)


REFERENCE_ROUNDS, FLOOR_ROUNDS = 7, 15

CASES: tuple[Case, ...] = (
    Case("rl_batch/reference", "rl_batch.build_rl_batch", "B=16", _of("rl_batch_workload", 16),
         "impl (lists)", ("reference",), REFERENCE_ROUNDS),
    Case("rl_batch/lists", "rl_batch.build_rl_batch", "B=1024", _of("rl_batch_workload", 1024),
         "impl (lists)", ("floor (lists)",), FLOOR_ROUNDS),
    Case("rl_batch/jagged", "rl_batch.build_rl_batch", "B=1024", _of("rl_batch_workload", 1024),
         "impl (jagged)", ("floor (output write)",), FLOOR_ROUNDS),
    Case("varlen/reference", "varlen.pack_varlen", "B=64", _of("pack_varlen_workload", 64),
         "impl (lists)", ("reference",), REFERENCE_ROUNDS),
    Case("varlen/lists", "varlen.pack_varlen", "B=1024", _of("pack_varlen_workload", 1024),
         "impl (lists)", ("floor (lists)",), FLOOR_ROUNDS),
    Case("varlen/jagged", "varlen.pack_varlen", "B=1024", _of("pack_varlen_workload", 1024),
         "impl (jagged)", ("floor (output write)",), FLOOR_ROUNDS),
    Case("nesting/reference", "nesting.nest_by_mask+unnest_by_mask", "B=8",
         _of("nesting_workload", 8), "impl nest+unnest", ("reference",), REFERENCE_ROUNDS),
    Case("nesting/dense", "nesting.nest_by_mask+unnest_by_mask", "B=32",
         _of("nesting_workload", 32), "impl nest+unnest", ("floor (copy dense batch)",),
         # 3x: its impl and its floor allocate through torch (not impl/_pages.py), and since the
         # gate stopped tuning glibc each round is on fresh or reused pages by turns: 1.6, 4.5
         # and 6.5 in three runs of 2026-12-02 (docs/performance.md, "The noise, and the limit")
         FLOOR_ROUNDS, threshold=3.0),
    Case("sft.collate_sft/reference", "sft.collate_sft", "N=256", _of("collate_sft_workload", 256),
         "impl (lists)", ("reference",), REFERENCE_ROUNDS),
    Case("sft.collate_sft/lists", "sft.collate_sft", "N=1024", _of("collate_sft_workload", 1024),
         "impl (lists)", ("floor (lists)",), FLOOR_ROUNDS),
    Case("sft.collate_sft/jagged", "sft.collate_sft", "N=1024", _of("collate_sft_workload", 1024),
         "impl (jagged)", ("floor (output write)",), FLOOR_ROUNDS),
    Case("sft.pack_sft/reference", "sft.pack_sft", "N=96", _of("pack_sft_workload", 96),
         "impl (lists)", ("reference",), REFERENCE_ROUNDS),
    Case("sft.pack_sft/lists", "sft.pack_sft", "N=1024", _of("pack_sft_workload", 1024),
         "impl (lists)", ("floor (lists)",), FLOOR_ROUNDS),
    Case("sft.pack_sft/jagged", "sft.pack_sft", "N=1024", _of("pack_sft_workload", 1024),
         "impl (jagged)", ("floor (output write)",), FLOOR_ROUNDS),
    Case("cp.shard/reference", "cp.shard", "8 sequences", functools.partial(_cp_shard, 8),
         "impl (tensors)", ("reference",), REFERENCE_ROUNDS),
    Case("cp.shard/tensors", "cp.shard", "1024 sequences", functools.partial(_cp_shard, 1024),
         "impl (tensors)", ("floor (output write)",), FLOOR_ROUNDS),
    Case("balance.karmarkar_karp/reference", "balance.karmarkar_karp", "n=1024, k=16",
         functools.partial(_balance, "karmarkar_karp", 1024, 16), "impl", ("reference",),
         REFERENCE_ROUNDS),
    Case("balance.micro_batches/reference", "balance.micro_batches", "n=1024, 16 budgets",
         functools.partial(_balance, "micro_batches", 1024, 16), "impl", ("reference",),
         REFERENCE_ROUNDS),
)


def record(case: Case, target_times: list[float], against_times: dict[str, list[float]],
           timer: str) -> dict:
    """What a gate benchmark stores in pytest-benchmark's `extra_info`: the times of every
    round (warm-up rounds dropped) and the ratio the gate compares, best / best."""
    best = min(target_times)
    return {
        "gate_case": case.id, "op": case.op, "size": case.size, "timer": timer,
        "target": case.target, "rounds": len(target_times),
        "seconds": {case.target: target_times, **against_times},
        "ratios": {name: best / min(times) for name, times in against_times.items()},
    }


# --------------------------------------------------------------------------- the comparison


class Outcome(str, Enum):
    """One ratio of one case against the baseline."""

    OK = "ok"
    FASTER = "faster"  # better than the baseline by more than the threshold: regenerate it
    SLOWER = "SLOWER"  # grew by more than the threshold: the gate fails
    MISSING = "MISSING"  # in the baseline, not measured by a full run: the gate fails
    NO_BASELINE = "NO BASELINE"  # measured, not in the baseline: the gate fails

    def __str__(self) -> str:
        return self.value


FAILING = (Outcome.SLOWER, Outcome.MISSING, Outcome.NO_BASELINE)


@dataclass(frozen=True)
class Row:
    case: str
    against: str
    baseline: float | None
    current: float | None
    threshold: float
    outcome: Outcome

    @property
    def change(self) -> float | None:
        """current / baseline: above 1, the fast path lost ground against what it is timed
        against."""
        if self.baseline is None or self.current is None:
            return None
        return self.current / self.baseline


class GateError(Exception):
    """A usage error (exit 2): no baseline, runs that cannot be compared."""


def load_run(path: Path, what: str = "run") -> tuple[str, dict[str, dict[str, float]]]:
    """(the timer, {case id: {against: ratio}}) of a pytest-benchmark JSON file of the gate."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        hint = " (`make bench-baseline` stores it)" if what == "baseline" else ""
        raise GateError(f"no {what} at {path}{hint}") from None
    except json.JSONDecodeError as error:
        raise GateError(f"{path} is not JSON: {error}") from None
    infos = [b.get("extra_info", {}) for b in data.get("benchmarks", [])]
    gated = [info for info in infos if "gate_case" in info]
    timers = {info["timer"] for info in gated}
    if len(timers) > 1:
        raise GateError(f"{path} mixes timers: {sorted(timers)}")
    return (timers.pop() if timers else TIMER,
            {info["gate_case"]: info["ratios"] for info in gated})


def compare(current: dict[str, dict[str, float]], baseline: dict[str, dict[str, float]],
            thresholds: dict[str, float], *, selection: bool = False) -> list[Row]:
    """One row per ratio of the baseline and of the current run. A ratio that grew by more
    than its case's threshold (default `THRESHOLD`) is SLOWER; a baseline case a full run
    (`selection` False) did not measure is MISSING; a measured one the baseline lacks is
    NO_BASELINE."""
    rows = []
    for case in sorted(set(current) | set(baseline)):
        threshold = thresholds.get(case, THRESHOLD)
        ours, theirs = current.get(case), baseline.get(case)
        if ours is None and selection:
            continue
        for against in sorted(set(ours or {}) | set(theirs or {})):
            now = None if ours is None else ours.get(against)
            then = None if theirs is None else theirs.get(against)
            rows.append(Row(case, against, then, now, threshold, _outcome(now, then, threshold)))
    return rows


def _outcome(now: float | None, then: float | None, threshold: float) -> Outcome:
    if now is None:
        return Outcome.MISSING
    if then is None:
        return Outcome.NO_BASELINE
    if now > then * threshold:
        return Outcome.SLOWER
    if now * threshold < then:
        return Outcome.FASTER
    return Outcome.OK


def render(rows: list[Row]) -> str:
    """The comparison as a plain table (a CI log's)."""
    lines = [f"{'case':36s} {'against':26s} {'baseline':>10s} {'now':>10s} {'change':>8s} "
             f"{'limit':>6s}  outcome"]
    for row in rows:
        change = "" if row.change is None else f"{row.change:.2f}x"
        lines.append(f"{row.case:36s} {row.against:26s} {_ratio(row.baseline):>10s} "
                     f"{_ratio(row.current):>10s} {change:>8s} {row.threshold:>5.1f}x  "
                     f"{row.outcome}")
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def verdict(rows: list[Row]) -> tuple[int, str]:
    """(exit status, the closing line)."""
    failing = [row for row in rows if row.outcome in FAILING]
    if not rows:
        return 1, "benchmark gate: nothing was measured"
    if failing:
        names = ", ".join(sorted({f"{row.case} ({row.outcome})" for row in failing}))
        return 1, f"benchmark gate FAILED: {names}"
    faster = sorted({row.case for row in rows if row.outcome is Outcome.FASTER})
    note = f"; faster than the baseline: {', '.join(faster)} (`make bench-baseline` to " \
           "lock it in)" if faster else ""
    return 0, f"benchmark gate passed: {len(rows)} ratios within their thresholds{note}"


def thresholds() -> dict[str, float]:
    return {case.id: case.threshold for case in CASES}


def spread(runs: list[dict[str, dict[str, float]]]) -> list[tuple[str, str, list[float]]]:
    """(case, against, its ratio in each run that measured it) over several runs."""
    keys = sorted({(case, against) for run in runs for case, ratios in run.items()
                   for against in ratios})
    return [(case, against, [run[case][against] for run in runs
                             if against in run.get(case, {})]) for case, against in keys]


def render_spread(runs: list[dict[str, dict[str, float]]]) -> str:
    """min / median / max of every ratio and max / min: the noise a threshold must clear."""
    lines = [f"{len(runs)} runs", f"{'case':36s} {'against':26s} {'min':>9s} {'median':>9s} "
             f"{'max':>9s} {'max/min':>8s} {'limit':>6s}"]
    limits = thresholds()
    for case, against, values in spread(runs):
        ordered = sorted(values)
        lines.append(f"{case:36s} {against:26s} {ordered[0]:9.4g} "
                     f"{ordered[len(ordered) // 2]:9.4g} {ordered[-1]:9.4g} "
                     f"{ordered[-1] / ordered[0]:7.2f}x {limits.get(case, THRESHOLD):5.1f}x")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the command


def measure(json_path: Path, pytest_args: list[str]) -> int:
    """Run benchmarks/bench_gate.py under pytest-benchmark (serially, in this process),
    writing its JSON to `json_path`; pytest's exit status."""
    import pytest

    # the gate measures serially: started from an xdist worker (a test of the suite), the
    # worker's variables would make pytest-benchmark switch itself off
    for name in [name for name in os.environ if name.startswith("PYTEST_XDIST_")]:
        del os.environ[name]
    json_path.parent.mkdir(parents=True, exist_ok=True)
    args = [str(BENCH_FILE), "-q", "-p", "no:xdist", "-p", "no:randomly", "-p", "no:cacheprovider",
            f"--benchmark-timer={TIMER}", f"--benchmark-json={json_path}",
            "--benchmark-columns=min,median,rounds", "--benchmark-sort=name", *pytest_args]
    return int(pytest.main(args))


def check_run(run: Path, baseline: Path, selection: bool) -> int:
    """Compare a stored run with the baseline, print the table and the verdict; exit status."""
    now_timer, now = load_run(run)
    then_timer, then = load_run(baseline, "baseline")
    if now_timer != then_timer:
        raise GateError(f"the baseline ({baseline}) was measured with {then_timer}, this run "
                        f"with {now_timer}: ratios of different clocks are not compared")
    rows = compare(now, then, thresholds(), selection=selection)
    status, line = verdict(rows)
    print(render(rows))
    print(line)
    return status


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, pytest_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) \
        if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="benchmarks/gate.py", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("check", "baseline", "compare", "noise"))
    parser.add_argument("runs", nargs="*", type=Path,
                        help="compare: the stored run; noise: the stored runs")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--json", type=Path, default=LATEST, help="check: where the run goes")
    args = parser.parse_args(ours)
    selection = "-k" in pytest_args or any(a.startswith("-k") for a in pytest_args)
    try:
        if args.command == "compare":
            if len(args.runs) != 1:
                parser.error("compare takes one stored run")
            return check_run(args.runs[0], args.baseline, selection=False)
        if args.command == "noise":
            if not args.runs:
                parser.error("noise takes the stored runs")
            print(render_spread([load_run(run)[1] for run in args.runs]))
            return 0
        target = args.baseline if args.command == "baseline" else args.json
        if args.command == "baseline" and selection:
            parser.error("a baseline measures every case: no -k")
        status = measure(target, pytest_args)
        if status != 0:
            print(f"benchmark gate: the measuring run failed (pytest exit {status})")
            return 2 if status in (2, 3, 4) else 1
        if args.command == "baseline":
            print(f"benchmark gate: baseline stored in {target}")
            return 0
        return check_run(target, args.baseline, selection)
    except GateError as error:
        print(f"benchmark gate: {error}")
        return 2


if __name__ == "__main__":
    sys.exit(main())

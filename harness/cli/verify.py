"""`batchproof verify`: every check of the selected records on an implementation, on every
placement this machine can run (`batchproof.placements`).

Exit status (`exit_code`: `batchproof.statuses.exit_status`, the policy `check` shares, over
every check of every record and placement, in any order): 0 every check passed, 1 a check
diverged, 2 a usage error, 3 nothing ran, or a check is batchproof's own failure (it wins over
1). Each failure prints a `replay:` line that runs it alone (`tests/test_replay.py` runs it in a
fresh process). `--strict` is `check`'s (a known divergence not reproduced fails): verify's
checks — impl/, a package, a function of the contract — have no known divergence, so it changes
nothing here; `--impl module:function` goes through `check` with it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from rich.table import Table

from batchproof import shared_database
from batchproof.cli.common import (
    DIVERGENCE,
    HARNESS,
    OK,
    PROG,
    TargetError,
    UsageError,
    _load_profile,
    _need_cuda,
    _one_thread_unless_asked,
    _progress,
    console,
    reproduce_of,
    run_settings,
    say,
    select_checks,
    select_records,
)
from batchproof.statuses import Verdict, exit_status
from batchproof.warning_tally import SeenWarning, TalliedCall, summary_lines


@dataclass
class CheckResult:
    op: str
    function: str
    check: str
    status: Verdict
    examples: int
    seconds: float
    device: str
    error: str = ""
    notes: list[str] = field(default_factory=list)
    placement: str = ""  # kernel, cpu, generic (the CPU's code paths), any (one path), cuda
    minimal: str = ""
    replay: str = ""
    # another implementation's warnings during the check (`verify --impl PACKAGE`), tallied
    warnings: list[SeenWarning] = field(default_factory=list)
    warnings_not_kept: int = 0
    # a `paths:PLACEMENT` check: each path the placement stands for -> times it ran (0: never),
    # and every other path that ran -> times (batchproof.placements.counts)
    paths: dict[str, int] = field(default_factory=dict)
    other_paths: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == Verdict.PASS

def resolve_candidate(info, impl: str):
    """The function under test for one record: None for the built-in impl (late-bound, so the
    bug zoo's patches are honoured), or a package mirroring `impl/` (a module:function goes
    through `batchproof check`: `_one_function`)."""
    if impl == "impl":
        return None
    from batchproof.adapters import current_folder_importable

    package = "batchproof.reference" if impl == "reference" else impl
    current_folder_importable()
    try:
        module = importlib.import_module(f"{package}.{info.op}")
    except Exception as err:  # noqa: BLE001
        raise TargetError(f"--impl {impl}: cannot import {package}.{info.op}: "
                          f"{type(err).__name__}: {err}") from err
    if not callable(getattr(module, info.function, None)):
        raise TargetError(f"--impl {impl}: {package}.{info.op} has no function {info.function}")
    # its warnings are counted per check, as `check` counts a framework's (warning_tally)
    return TalliedCall(lambda *a, **k: getattr(module, info.function)(*a, **k))

def verify(args: argparse.Namespace) -> int:
    if ":" in args.impl:
        return _one_function(args)
    measure = _start_coverage() if args.coverage else None
    from batchproof import placements

    if args.device == "cuda":
        _need_cuda()
    profile = _load_profile(args.profile)
    _one_thread_unless_asked()
    infos, left_out = select_records(args.op)
    if args.reproduce and not args.check:
        raise UsageError("--reproduce replays one failure: give its --op and --check too")
    where = _placements(args)
    wanted = _select_checks(infos, args, where)
    if args.device != "cpu":
        infos = [i for i in infos if args.device in i.devices]
    candidates = {i.name: resolve_candidate(i, args.impl) for i in infos}
    chosen = run_settings(args.max_examples)
    reproduce = reproduce_of(args.reproduce)
    counting = not args.check and args.impl == "impl"  # each placement's paths, from its checks
    results: list[CheckResult] = []
    started, wall = time.perf_counter(), time.time()
    with _progress() as progress:
        for op in dict.fromkeys(i.op for i in infos):
            records = [i for i in infos if i.op == op]
            task = progress.add_task(op, total=sum(_runs(wanted[i.name], where)
                                                    for i in records))
            for info in records:
                distinct = where
                for placement in where:
                    runs = [c for c in wanted[info.name] if _runs_on(c, placement, where)]
                    if placement not in distinct:  # would run the code already checked; a
                        paths = [c for c in runs if c.startswith("paths:")]  # paths: check
                        progress.advance(task, len(runs) - len(paths))  # named counts its own
                        runs = paths
                        if not runs:
                            continue
                    asked, before, group = placements.asked(), placements.ran(), []
                    for check in runs:
                        progress.update(task, description=f"{op}: {info.function} {check}"
                                        + (f" [{placement}]" if len(where) > 1 else ""))
                        group.append(_verify_one(args, info, check, candidates[info.name],
                                                 placement, chosen, reproduce))
                        progress.advance(task)
                    if len(where) > 1 and placement == where[0] and group:  # (nothing ran:
                        distinct = placements.distinct(where, asked)  # no sign of one path)
                        if distinct == where[:1]:  # the op's code never asked: one path
                            for r in group:
                                r.placement = "any"
                    if counting and info.paths and group:
                        group.append(_paths_result(args, info, placement, group,
                                                   placements.since(before)))
                    results += group
            progress.update(task, description=op)
    _print_summary(results, profile, args, time.perf_counter() - started, left_out)
    for line in shared_database.failures_since(wall):  # a Redis outage mid-run, if any
        say(line)
    covered = _finish_coverage(measure) if measure is not None else None
    code = exit_code(results)
    if args.json:
        verdict = {OK: "pass", DIVERGENCE: "divergence", HARNESS: "error"}[code]
        document = {"profile": profile, "device": args.device, "impl": args.impl,
                    "passed": code == OK, "verdict": verdict, "exit_status": code,
                    "not_run": {i.name: i.missing() for i in left_out},
                    "checks": [_as_json(r) for r in results]}
        if covered is not None:
            from batchproof.cli import branch_coverage

            document["coverage"] = branch_coverage.as_json(covered)
        with open(args.json, "w") as handle:
            json.dump(document, handle, indent=2)
        say(f"report written to {args.json}")
    return code

def _one_function(args: argparse.Namespace) -> int:
    """`verify --impl module:function --op RECORD`: one function of a record's contract, checked
    as `batchproof check --impl module:function` checks it (one path: the same engine, report,
    replay line and exit status). Placements and coverage are about batchproof's own impl/."""
    from batchproof.cli.check import check

    if args.placement != "all":
        raise UsageError(f"--placement {args.placement}: only batchproof's own impl on the CPU "
                         "has placements")
    if args.coverage:
        raise UsageError("--coverage measures batchproof's own impl/ and reference/: not with "
                         f"--impl {args.impl}")
    infos, _ = select_records(args.op)
    if len(infos) != 1:
        raise UsageError(f"--impl {args.impl} needs --op naming exactly one record "
                         f"(got {len(infos)}: {[i.name for i in infos]})")
    return check(argparse.Namespace(**vars(args), adapter=None))


def _start_coverage():
    from batchproof.cli import branch_coverage

    if not branch_coverage.available():
        raise UsageError(branch_coverage.MISSING)
    try:
        return branch_coverage.start()
    except RuntimeError as err:  # an in-process caller that imported impl/ already
        raise UsageError(f"--coverage: {err}") from None

def _finish_coverage(measure):
    """Stop measuring; print per file the branches taken and those never taken."""
    from batchproof.cli import branch_coverage

    files = branch_coverage.finish(measure)
    table = Table(title="branch coverage of this run (coverage.py, branch mode; the kernels run "
                        "as Python while measured)")
    for column in ("file", "statements", "branches", "taken", "%", "branches not taken"):
        table.add_column(column, justify="left" if column in ("file", "branches not taken")
                         else "right")
    for f in files:
        table.add_row(f.name, str(f.statements), str(f.branches), str(f.taken),
                      f"{f.percent:.1f}", ", ".join(f.missing_branches))
    console.print(table)
    for top in ("impl", "reference"):
        taken, branches = branch_coverage.totals(files, top)
        if branches:
            say(f"{top}/: {taken}/{branches} branches taken ({100.0 * taken / branches:.1f}%)")
    return files

def _placements(args: argparse.Namespace) -> list[str]:
    """The placements to verify, the default one first: every one this machine runs for the
    built-in impl (`--placement all`), or the one named; another implementation has one."""
    from batchproof import placements

    available = placements.available(args.device)
    if args.impl != "impl" or args.device != "cpu":
        if args.placement not in ("all", available[0]):
            raise UsageError(f"--placement {args.placement}: only batchproof's own impl on the "
                             "CPU has placements")
        return available[:1]
    if args.placement == "all":
        return available
    if args.placement not in available:
        raise UsageError(f"--placement {args.placement}: not available here "
                         f"(available: {', '.join(available)}; kernel needs numba: "
                         "pip install 'batchproof[kernels]')")
    return [args.placement]

def _select_checks(infos, args: argparse.Namespace, where: Sequence[str]) -> dict[str, list[str]]:
    """record name -> the checks to run: `select_checks`, plus the `paths:PLACEMENT` checks
    `--check` names (batchproof's own impl/, a placement this run checks)."""
    named = args.check or []
    paths = [c for c in named if c.startswith("paths:")]
    if not paths:
        return select_checks(infos, named)
    if args.impl != "impl":
        raise UsageError(f"--check {paths[0]}: only batchproof's own impl/ counts the paths it "
                         "takes")
    known = {c for i in infos for c in i.path_checks()}
    for check in paths:
        if check not in known:
            raise UsageError(f"unknown check {check!r}: the records named declare no paths "
                             "(`batchproof list checks`)")
        if check.removeprefix("paths:") not in where:
            raise UsageError(f"--check {check}: placement {check.removeprefix('paths:')} does "
                             f"not run here (this run: {', '.join(where)})")
    rest = [c for c in named if c not in paths]
    wanted = select_checks(infos, rest) if rest else {i.name: [] for i in infos}
    return {i.name: wanted[i.name] + [c for c in i.path_checks() if c in paths] for i in infos}


def _runs(checks: Sequence[str], where: Sequence[str]) -> int:
    """How many check runs a record's checks make over the placements."""
    return sum(_runs_on(c, p, where) for p in where for c in checks)


def _runs_on(check: str, placement: str, where: Sequence[str]) -> bool:
    """Whether `check` runs on `placement`: every check on the first placement, those that
    compare with the reference on every other (`_every_placement`); `paths:P` on P alone."""
    if check.startswith("paths:"):
        return check == f"paths:{placement}"
    return placement == where[0] or _every_placement(check)

def _every_placement(check: str) -> bool:
    """The checks run again on each placement beyond the default: those comparing the candidate
    with the reference (equivalence on every input form, error parity, the pins). A property
    of an output equal to the reference's holds on it already."""
    return check in ("equivalence", "errors") or check.startswith("pin:")

def _verify_one(args, info, check: str, candidate, placement: str, chosen,
                reproduce) -> CheckResult:
    from batchproof import placements, report
    from batchproof.checks import CheckStats, run_check

    stats = CheckStats()
    t0 = time.perf_counter()
    result = CheckResult(info.op, info.function, check, Verdict.PASS, 0, 0.0, args.device,
                         placement=placement)
    before = placements.ran()
    try:
        with placements.placed(placement):
            run_check(info, check, candidate, settings=chosen, device=args.device,
                      stats=stats, seed=args.seed, reproduce=reproduce)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        failure = report.describe(exc, stats, info.function)
        failure.blob = failure.blob or args.reproduce or ""  # a replayed one
        result.status = Verdict.FAIL if failure.kind == "divergence" else Verdict.ERROR
        result.error, result.notes = failure.message, failure.notes
        result.minimal = failure.minimal
        words = _verify_words(args, info.name)
        if placement in placements.PLACEMENTS:
            words += ["--placement", placement]
        result.replay = report.command(words + report.replay_words(check, failure))
    result.examples, result.seconds = stats.examples, time.perf_counter() - t0
    if isinstance(candidate, TalliedCall):
        taken = candidate.take()
        result.warnings, result.warnings_not_kept = taken.seen, taken.more
    if check.startswith("paths:"):
        result.paths, result.other_paths = placements.counts(
            info, check.removeprefix("paths:"), placements.since(before))
    if result.passed:
        result.notes = list(stats.notes)  # e.g. a replay that passes now
    if result.passed and result.examples == 0:  # nothing ran: never a pass
        result.status = Verdict.ERROR
        result.error = "no example ran: the strategy drew none (batchproof's own failure)"
    return result

def _paths_result(args, info, placement: str, group: list[CheckResult],
                  counted) -> CheckResult:
    """The `paths:PLACEMENT` check of one placement's row, from what its checks (`group`) ran:
    FAIL when a path it stands for never ran, or one of a kind it may not run did
    (`placements.faults`); no examples of its own (it counts over the group's)."""
    from batchproof import placements, report

    check = f"paths:{placement}"
    result = CheckResult(info.op, info.function, check, Verdict.PASS, 0, 0.0, args.device,
                         placement=group[0].placement)
    result.paths, result.other_paths = placements.counts(info, placement, counted)
    examples = sum(r.examples for r in group)
    problems = placements.faults(info, placement, counted)
    if not examples:
        result.status = Verdict.ERROR
        result.error = "no example ran: no path was counted (batchproof's own failure)"
    elif problems:
        result.status = Verdict.FAIL
        result.error = (f"PathNotTaken: {'; '.join(problems)} ({examples} examples of "
                        f"{len(group)} checks)")
    if not result.passed:
        words = _verify_words(args, info.name)
        if placement in placements.PLACEMENTS:
            words += ["--placement", placement]
        result.replay = report.command(words + ["--check", check])
    return result


def _as_json(result: CheckResult) -> dict:
    """One check of the JSON report; the path counts only on a `paths:` check."""
    document = asdict(result) | {"passed": result.passed}
    if not result.check.startswith("paths:"):
        del document["paths"], document["other_paths"]
    return document


def exit_code(results: Sequence[CheckResult]) -> int:
    """The one exit policy (`batchproof.statuses.exit_status`) over the checks run."""
    return exit_status(r.status for r in results)

def _verify_words(args: argparse.Namespace, record: str) -> list[str]:
    words = [PROG, "verify", "--impl", args.impl, "--op", record]
    if args.device != "cpu":
        words += ["--device", args.device]
    if args.profile:
        words += ["--profile", args.profile]
    return words

_COLOUR = {Verdict.PASS: "green", Verdict.FAIL: "red", Verdict.ERROR: "red"}

def _badge(status: str, count: int = 0) -> str:
    label = status.upper() + (f" ({count})" if count else "")
    return f"[{_COLOUR[status]}]{label}[/{_COLOUR[status]}]"

def _print_summary(results, profile, args, seconds, left_out) -> None:
    table = Table(title=f"batchproof verify — impl={args.impl}, profile={profile}, "
                        f"device={args.device}")
    for column in ("op", "function", "placement", "checks", "examples", "result", "time"):
        table.add_column(column, justify="right" if column in ("checks", "examples", "time")
                         else "left")
    keys = list(dict.fromkeys((r.op, r.function, r.placement) for r in results))
    for op, function, placement in keys:
        rows = [r for r in results if (r.op, r.function, r.placement) == (op, function, placement)]
        bad = [r for r in rows if not r.passed]
        statuses = sorted({r.status for r in bad}, key=list(_COLOUR).index)
        verdict = " ".join(_badge(s, sum(r.status == s for r in bad)) for s in statuses) \
            if bad else _badge(Verdict.PASS)
        table.add_row(op, function, placement, str(len(rows)), str(sum(r.examples for r in rows)),
                      verdict, f"{sum(r.seconds for r in rows):.1f}s")
    console.print(table)
    _print_placement_legend({r.placement for r in results},
                            any(r.check.startswith("paths:") for r in results))
    for r in (r for r in results if not r.passed):
        where = f" on {r.placement}" if r.placement not in ("", "any", args.device) else ""
        console.rule(f"{r.op}.{r.function} — {r.check}{where} ({r.status})", style="red")
        for line in [r.error, *r.notes]:
            say(line)
        if r.minimal:
            say(f"minimal case: {r.minimal}")
        if r.replay:
            say(f"replay: {r.replay}")
    for r in (r for r in results if r.passed and r.notes):
        say(f"{r.op}.{r.function} — {r.check}: {'; '.join(r.notes)}")
    for line in summary_lines([(f"{r.op}.{r.function} {r.check}", r.warnings,
                                r.warnings_not_kept) for r in results]):
        say(line)
    for info in left_out:
        say(f"not run: {info.name} needs {', '.join(info.missing())}")
    passed = sum(r.passed for r in results)
    colour = "green" if passed == len(results) else "red"
    counts = {s: sum(r.status == s for r in results)
              for s in (Verdict.FAIL, Verdict.ERROR)}
    extra = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    console.print(f"[{colour}]{passed}/{len(results)} checks passed[/{colour}]"
                  f"{f' ({extra})' if extra else ''} in {seconds:.1f}s"
                  + (f"; {len(left_out)} record(s) not run" if left_out else ""))

def _print_placement_legend(shown: set[str], paths: bool) -> None:
    from batchproof.placements import PLACEMENTS

    named = [f"{name} = {what}" for name, what in PLACEMENTS.items() if name in shown]
    if named:
        say("placements: " + "; ".join(named) + (
            "; any = the op has one code path (it never asks where it runs)"
            if "any" in shown else "") + ". Equivalence, errors and pins run on each; "
            "properties on the first." + (
                " A record that declares its kernels and fast paths has one more check per "
                "row, paths:PLACEMENT: each of them ran, and nothing the placement may not run."
                if paths else ""))

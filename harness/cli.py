"""The `batchproof` command line (`harness` is the same program under its old name).

    batchproof verify [--op NAME ...] [--check NAME ...] [--profile dev|ci|nightly|mutation]
                      [--impl impl|reference|PACKAGE|module:function] [--device cpu|cuda]
                      [--max-examples N] [--seed N] [--reproduce BLOB] [--json FILE]
    batchproof check --impl skyrl|verl|module:function [--op NAME] [--adapter NAME]
                     [--check NAME ...] [--profile P] [--max-examples N] [--seed N]
                     [--reproduce BLOB] [--json FILE]
    batchproof show --op NAME
    batchproof list [ops|records|checks|adapters|profiles]
    batchproof mutate --zoo [--op NAME ...] [--seeds N] [--search-only] [--jobs N]
                      [--without CHECK ...] [--json FILE]
    batchproof mutate --mutmut [--op NAME ...] [--since GIT_REV]   (in a clone of the repository)
    batchproof bench [--op NAME ...] [--device cpu|cuda] [--quick] [--json FILE]
    batchproof fuzz [--op NAME ...] [--check NAME ...] [-n WORKERS] [--profile nightly|dev]
                    [--dashboard | --dashboard-only] [--port N]   (HypoFuzz: docs/fuzzing.md)

Exit status: 0 every check passed (mutate: every planted bug or mutant was killed); 1 a divergence
was found (mutate: one survived); 2 a usage error; 3 the target could not be imported, or
batchproof itself failed (a registry error, a check that could not run an example).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from batchproof.ops import OP_MODULES

console = Console(width=None if Console().is_terminal else 140)

OK, DIVERGENCE, USAGE, HARNESS = 0, 1, 2, 3
PROG = "batchproof"


class UsageError(Exception):
    """A mistake in the command line: one line on stderr, exit status 2."""


class TargetError(Exception):
    """The function under test cannot be imported: one line on stderr, exit status 3."""


@dataclass
class CheckResult:
    op: str
    function: str
    check: str
    status: str  # pass | fail | error | not tested
    examples: int
    seconds: float
    device: str
    error: str = ""
    notes: list[str] = field(default_factory=list)
    placement: str = ""  # kernel, cpu, generic (the CPU's code paths), any (one path), cuda
    minimal: str = ""
    replay: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


def say(text: str = "", **kwargs: Any) -> None:
    """Print text as it is: no rich markup (`[frameworks]` stays), no hard-wrapped lines."""
    console.print(text, markup=False, highlight=False, soft_wrap=True, **kwargs)


# --------------------------------------------------------------------------- verify


def import_target(target: str) -> Any:
    """`module:function` (or `module:Class.attr`), importing from the current folder as
    `python -m` does; a `TargetError` says why it cannot be had."""
    from batchproof.adapters import FrameworkMissing, load_target

    try:
        return load_target(target)
    except ValueError:
        raise UsageError(f"--impl {target!r}: expected module:function") from None
    except FrameworkMissing as err:
        raise TargetError(f"--impl {target}: {err}") from None


def resolve_candidate(info, impl: str):
    """The function under test for one record: None for the built-in impl (late-bound, so the
    bug zoo's patches are honoured), a package mirroring `impl/`, or module:function."""
    if ":" in impl:
        target = import_target(impl)
        return lambda *a, **k: target(*a, **k)
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
    return lambda *a, **k: getattr(module, info.function)(*a, **k)


def select_records(ops: Sequence[str] | None):
    """The records `--op` names (all by default), and those left out because an optional module
    is missing; naming such a record itself is an error (exit 3)."""
    from batchproof import registry

    try:
        infos = registry.select(ops)
    except ValueError as err:
        raise UsageError(f"{err} (see `batchproof list records`)") from None
    runnable = [i for i in infos if not i.missing()]
    left_out = [i for i in infos if i.missing()]
    named = [i for i in left_out if ops and i.name in ops]
    if named:
        raise TargetError(f"{named[0].name} needs {', '.join(named[0].missing())}")
    return runnable, left_out


def select_checks(infos, checks: Sequence[str] | None) -> dict[str, list[str]]:
    """record name -> the checks to run (`--check` names, or all)."""
    if not checks:
        return {i.name: i.check_names() for i in infos}
    known = {c for i in infos for c in i.check_names()}
    unknown = [c for c in checks if c not in known]
    if unknown:
        from batchproof.registry import did_you_mean

        raise UsageError(f"unknown check {unknown[0]!r}{did_you_mean(unknown[0], known)} "
                         "(`batchproof list checks`)")
    return {i.name: [c for c in i.check_names() if c in checks] for i in infos}


def run_settings(max_examples: int | None):
    """The loaded profile, one failure per check (the minimal one), no explain phase,
    `--max-examples` applied."""
    from hypothesis import settings

    if max_examples is not None and max_examples < 1:
        raise UsageError(f"--max-examples must be at least 1, got {max_examples}")
    from batchproof.report import without_explain

    return settings(settings(), report_multiple_bugs=False,
                    phases=without_explain(settings().phases),
                    **({"max_examples": max_examples} if max_examples else {}))


def reproduce_of(blob: str | None) -> tuple[str, str] | None:
    """(Hypothesis version, blob) for `run_check`; a blob Hypothesis cannot decode is a usage
    error."""
    import hypothesis

    from batchproof.report import check_blob

    if not blob:
        return None
    try:
        check_blob(blob)
    except ValueError as err:
        raise UsageError(str(err)) from None
    return (hypothesis.__version__, blob)


def verify(args: argparse.Namespace) -> int:
    measure = _start_coverage() if args.coverage else None
    from batchproof import placements

    if args.device == "cuda":
        _need_cuda()
    profile = _load_profile(args.profile)
    _one_thread_unless_asked()
    infos, left_out = select_records(args.op)
    if ":" in args.impl and len(infos) != 1:
        raise UsageError(f"--impl {args.impl} needs --op naming exactly one record "
                         f"(got {len(infos)}: {[i.name for i in infos]})")
    if args.reproduce and not args.check:
        raise UsageError("--reproduce replays one failure: give its --op and --check too")
    wanted = select_checks(infos, args.check)
    if args.device != "cpu":
        infos = [i for i in infos if args.device in i.devices]
    candidates = {i.name: resolve_candidate(i, args.impl) for i in infos}
    chosen = run_settings(args.max_examples)
    reproduce = reproduce_of(args.reproduce)
    where = _placements(args)
    results: list[CheckResult] = []
    started = time.perf_counter()
    with _progress() as progress:
        for op in dict.fromkeys(i.op for i in infos):
            records = [i for i in infos if i.op == op]
            task = progress.add_task(op, total=sum(_runs(wanted[i.name], where)
                                                    for i in records))
            for info in records:
                distinct = where
                for placement in where:
                    if placement not in distinct:  # would run the code already checked
                        progress.advance(task, sum(map(_every_placement, wanted[info.name])))
                        continue
                    asked = placements.asked()
                    for check in wanted[info.name]:
                        if placement != where[0] and not _every_placement(check):
                            continue
                        progress.update(task, description=f"{op}: {info.function} {check}"
                                        + (f" [{placement}]" if len(where) > 1 else ""))
                        results.append(_verify_one(args, info, check, candidates[info.name],
                                                   placement, chosen, reproduce))
                        progress.advance(task)
                    if len(where) > 1 and placement == where[0]:
                        distinct = placements.distinct(where, asked)
                        if distinct == where[:1]:  # the op's code never asked: one path
                            for r in results[-len(wanted[info.name]):]:
                                r.placement = "any"
            progress.update(task, description=op)
    _print_summary(results, profile, args, time.perf_counter() - started, left_out)
    covered = _finish_coverage(measure) if measure is not None else None
    code = exit_code(results)
    if args.json:
        verdict = {OK: "pass", DIVERGENCE: "divergence", HARNESS: "error"}[code]
        document = {"profile": profile, "device": args.device, "impl": args.impl,
                    "passed": code == OK, "verdict": verdict, "exit_status": code,
                    "not_run": {i.name: i.missing() for i in left_out},
                    "checks": [asdict(r) | {"passed": r.passed} for r in results]}
        if covered is not None:
            from batchproof import branch_coverage

            document["coverage"] = branch_coverage.as_json(covered)
        with open(args.json, "w") as handle:
            json.dump(document, handle, indent=2)
        say(f"report written to {args.json}")
    return code


def _start_coverage():
    from batchproof import branch_coverage

    if not branch_coverage.available():
        raise UsageError(branch_coverage.MISSING)
    try:
        return branch_coverage.start()
    except RuntimeError as err:  # an in-process caller that imported impl/ already
        raise UsageError(f"--coverage: {err}") from None


def _finish_coverage(measure):
    """Stop measuring; print per file the branches taken and those never taken."""
    from batchproof import branch_coverage

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


def _runs(checks: Sequence[str], where: Sequence[str]) -> int:
    """How many check runs a record's checks make over the placements."""
    return len(checks) + (len(where) - 1) * sum(map(_every_placement, checks))


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
    result = CheckResult(info.op, info.function, check, "pass", 0, 0.0, args.device,
                         placement=placement)
    try:
        with placements.placed(placement):
            run_check(info, check, candidate, settings=chosen, device=args.device,
                      stats=stats, seed=args.seed, reproduce=reproduce)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        failure = report.describe(exc, stats, info.function)
        failure.blob = failure.blob or args.reproduce or ""  # a replayed one
        result.status = "fail" if failure.kind == "divergence" else "error"
        result.error, result.notes = failure.message, failure.notes
        result.minimal = failure.minimal
        words = _verify_words(args, info.name)
        if placement in placements.PLACEMENTS:
            words += ["--placement", placement]
        result.replay = report.command(words + report.replay_words(check, failure))
    result.examples, result.seconds = stats.examples, time.perf_counter() - t0
    if result.passed:
        result.notes = list(stats.notes)  # e.g. a replay that passes now
    if result.passed and result.examples == 0:
        result.status = "not tested"
    return result


def exit_code(results: Sequence[CheckResult]) -> int:
    """3 when batchproof could not do its job (an error, a check with no example, nothing run),
    else 1 when a check failed, else 0."""
    if not results or any(r.status in ("error", "not tested") for r in results):
        return HARNESS
    return DIVERGENCE if any(r.status == "fail" for r in results) else OK


def _verify_words(args: argparse.Namespace, record: str) -> list[str]:
    words = [PROG, "verify", "--impl", args.impl, "--op", record]
    if args.device != "cpu":
        words += ["--device", args.device]
    if args.profile:
        words += ["--profile", args.profile]
    return words


def _need_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device here")


def _load_profile(name: str | None) -> str:
    from batchproof import profiles

    try:
        return profiles.load(name)
    except ValueError as err:
        raise UsageError(str(err)) from None


def _one_thread_unless_asked() -> None:
    """The checks run many tiny tensor ops: intra-op threads only contend (OMP_NUM_THREADS wins)."""
    import torch

    if not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(1)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False)


_COLOUR = {"pass": "green", "fail": "red", "error": "red", "not tested": "yellow"}


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
            if bad else _badge("pass")
        table.add_row(op, function, placement, str(len(rows)), str(sum(r.examples for r in rows)),
                      verdict, f"{sum(r.seconds for r in rows):.1f}s")
    console.print(table)
    _print_placement_legend({r.placement for r in results})
    for r in (r for r in results if not r.passed):
        where = f" on {r.placement}" if r.placement not in ("", "any", args.device) else ""
        console.rule(f"{r.op}.{r.function} — {r.check}{where} ({r.status})", style="red")
        for line in [r.error, *r.notes]:
            say(line)
        if r.status == "not tested":
            say("the check ran no example: it did not pass")
        if r.minimal:
            say(f"minimal case: {r.minimal}")
        if r.replay:
            say(f"replay: {r.replay}")
    for r in (r for r in results if r.passed and r.notes):
        say(f"{r.op}.{r.function} — {r.check}: {'; '.join(r.notes)}")
    for info in left_out:
        say(f"not run: {info.name} needs {', '.join(info.missing())}")
    passed = sum(r.passed for r in results)
    colour = "green" if passed == len(results) else "red"
    counts = {s: sum(r.status == s for r in results) for s in ("fail", "error", "not tested")}
    extra = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    console.print(f"[{colour}]{passed}/{len(results)} checks passed[/{colour}]"
                  f"{f' ({extra})' if extra else ''} in {seconds:.1f}s"
                  + (f"; {len(left_out)} record(s) not run" if left_out else ""))


def _print_placement_legend(shown: set[str]) -> None:
    from batchproof.placements import PLACEMENTS

    named = [f"{name} = {what}" for name, what in PLACEMENTS.items() if name in shown]
    if named:
        say("placements: " + "; ".join(named) + (
            "; any = the op has one code path (it never asks where it runs)"
            if "any" in shown else "") + ". Equivalence, errors and pins run on each; "
            "properties on the first.")


# --------------------------------------------------------------------------- show


def show(args: argparse.Namespace) -> int:
    from batchproof import registry

    try:
        selected = registry.select(args.op)
    except ValueError as err:
        raise UsageError(f"{err} (see `batchproof list records`)") from None
    infos = [i for i in selected if i.example is not None]
    if not infos:
        raise UsageError(f"no record of {args.op} has an example to show")
    for info in infos:
        if info.missing():
            say(f"{info.name}: not shown, needs {', '.join(info.missing())}")
            continue
        console.rule(f"{info.name} — {info.doc}")
        say(f"input: {info.example.short(200)}")
        output = info.example.call(info.reference)
        if info.show is not None:
            for line in info.show(info.example, output):
                say(line)
            continue
        if info.picture is not None:
            for family, rows in info.picture(output).items():
                say(f"{family}:")
                for i, row in enumerate(rows):
                    say(f"  row {i}  {row}")
            say("  (. pad, p prompt, r response)")
        console.print(output)
        _print_tensors(output)
    return OK


def _print_tensors(output: Any) -> None:
    from tensordict import TensorDictBase

    if not isinstance(output, TensorDictBase):
        say(repr(output))
        return
    for key in output.keys():
        value = output.get_non_tensor(key) if output.is_non_tensor(key) else output.get(key)
        text = value.tolist() if hasattr(value, "tolist") and not getattr(
            value, "is_nested", False) else value
        say(f"{key} = {text}")


# --------------------------------------------------------------------------- list

LISTS = ("ops", "records", "checks", "adapters", "profiles", "placements", "regimes")


def list_things(args: argparse.Namespace) -> int:
    # `regimes` draws each strategy's budget: only when asked for by name
    wanted = [args.what] if args.what else [w for w in LISTS if w != "regimes"]
    for what in wanted:
        {"ops": _list_ops, "records": _list_records, "checks": _list_checks,
         "adapters": _list_adapters, "profiles": _list_profiles,
         "placements": _list_placements, "regimes": _list_regimes}[what]()
    return OK


def _list_regimes() -> None:
    from batchproof import regimes
    from batchproof.profiles import PROFILES

    budget = PROFILES["ci"].max_examples
    table = Table(title=f"regimes: what each strategy promises to draw, and in how many of the "
                        f"ci profile's {budget} examples it does (batchproof.regimes)")
    for column in ("record", "regime", "examples"):
        table.add_column(column, justify="right" if column == "examples" else "left")
    for record in regimes.records():
        for name, hits in regimes.coverage(record, examples=budget).items():
            table.add_row(record, name, str(hits) if hits else f"[red]{hits}[/red]")
    console.print(table)


def _list_ops() -> None:
    from batchproof import registry

    table = Table(title="ops (`--op NAME` takes an op or one record, op.function)")
    for column in ("op", "records"):
        table.add_column(column)
    for op in OP_MODULES:
        table.add_row(op, ", ".join(i.function for i in registry.all_ops() if i.op == op))
    console.print(table)


def _list_records() -> None:
    from batchproof import registry

    table = Table(title="records (one per contract function)")
    for column in ("record", "checks", "input forms", "devices", "what it lays out"):
        table.add_column(column, justify="right" if column == "checks" else "left")
    for info in registry.all_ops():
        doc = info.doc + (f" [needs {', '.join(info.missing())}]" if info.missing() else "")
        table.add_row(info.name, str(len(info.check_names())), ", ".join(info.forms),
                      ", ".join(info.devices), doc)
    console.print(table, markup=False)


def _list_checks() -> None:
    from batchproof import registry

    table = Table(title="checks (`--check NAME`)")
    for column in ("record", "checks"):
        table.add_column(column)
    for info in registry.all_ops():
        table.add_row(info.name, " ".join(info.check_names()))
    console.print(table)


def _list_adapters() -> None:
    from batchproof import adapters

    table = Table(title="adapters (`batchproof check --impl FRAMEWORK`; entry-point group "
                        f"{adapters.ENTRY_POINTS!r})")
    for column in ("adapter", "framework", "record", "target", "fits", "installed"):
        table.add_column(column)
    for a in adapters.all_adapters():
        installed = a.version()
        fits = "yes" if installed in ("-", "not installed") or a.fits(installed) else "no"
        table.add_row(a.name, a.framework, a.record, a.target, a.versions or "any",
                      f"{installed} ({fits})" if installed not in ("-", "not installed")
                      else installed)
    console.print(table)
    for problem in adapters.LOAD_PROBLEMS:
        say(problem)


def _list_placements() -> None:
    from batchproof import placements

    available = placements.available()
    table = Table(title="placements (`verify --placement NAME`; default: every one available)")
    for column in ("placement", "what runs", "here"):
        table.add_column(column)
    for name, what in placements.PLACEMENTS.items():
        extra = "triton" if name == "triton" else "kernels"
        here = "default" if name == available[0] else "yes" if name in available else \
            f"no: pip install 'batchproof[{extra}]'"
        table.add_row(name, what, here)
    console.print(table)


def _list_profiles() -> None:
    from batchproof import profiles

    table = Table(title=f"Hypothesis profiles (`--profile NAME`; default now: "
                        f"{profiles.default_profile()})")
    for column in ("profile", "examples", "derandomized", "database", "shrinks"):
        table.add_column(column)
    for name, chosen in profiles.PROFILES.items():
        shrinks = "no" if "shrink" not in {p.name for p in chosen.phases} else "yes"
        table.add_row(name, str(chosen.max_examples), "yes" if chosen.derandomize else "no",
                      "none" if chosen.database is None else "local .hypothesis/", shrinks)
    console.print(table)


# --------------------------------------------------------------------------- mutate


def mutate(args: argparse.Namespace) -> int:
    if args.seeds is not None and not args.zoo:
        raise UsageError("--seeds goes with --zoo (the detection rate of each zoo entry)")
    if args.impl:
        return mutate_target(args)
    if not (args.zoo or args.mutmut):
        raise UsageError("give --zoo, --mutmut, or --impl MODULE:FUNCTION with --op RECORD")
    if args.mutmut:
        from batchproof import mutmut_driver

        try:
            return mutmut_driver.main(ops=args.op, since=args.since, min_mutants=args.min_mutants,
                                      json_path=args.json, markdown_path=args.markdown,
                                      harness=args.harness)
        except ValueError as err:
            raise UsageError(str(err)) from None
    from batchproof.mutate import kill_matrix
    from batchproof.zoo import all_entries

    entries = [e for e in all_entries() if not args.op or e.op in args.op or e.record in args.op]
    if not entries:
        raise UsageError(f"no zoo entries for --op {args.op}; ops: {list(OP_MODULES)}")
    if args.seeds is not None:
        return zoo_detection(args, entries)
    started = time.perf_counter()
    with _progress() as progress:
        task = progress.add_task("bug zoo", total=len(entries))
        results = kill_matrix(entries, profile=args.profile, jobs=args.jobs,
                              disabled=args.without, search_only=args.search_only,
                              progress=lambda r: progress.advance(task))
    table = Table(title=f"bug zoo kill matrix — profile={args.profile}")
    for column in ("entry", "op.function", "result", "killed by (* = declared killer)", "time"):
        table.add_column(column)
    entries_by_name = {e.name: e for e in entries}
    bad = 0
    for r in results:
        entry = entries_by_name[r.entry]
        killers = [k.split("/", 1)[1] if k.startswith(entry.record + "/") else k
                   for k, hit in r.killed_by.items() if hit]
        declared = {k.split("/", 1)[1] if k.startswith(entry.record + "/") else k
                    for k in r.declared}
        marked = ", ".join(f"{k}*" if k in declared else k for k in killers)
        if not r.killed:
            verdict = "[red]SURVIVED[/red]"
        elif r.missed_killers:
            verdict = f"[yellow]killed, missed {len(r.missed_killers)} declared[/yellow]"
        else:
            verdict = "[green]KILLED[/green]"
        bad += (not r.killed) or bool(r.missed_killers)
        table.add_row(r.entry, entry.record, verdict, marked or "-", f"{r.seconds:.1f}s")
    console.print(table)
    killed = sum(r.killed for r in results)
    console.print(f"{killed}/{len(results)} entries killed "
                  f"({100 * killed / len(results):.0f}%), {len(results) - bad} with every "
                  f"declared killer, in {time.perf_counter() - started:.1f}s")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([asdict(r) for r in results], handle, indent=2)
    if args.markdown:
        _write_matrix_markdown(args.markdown, results, entries_by_name, args.profile)
    return OK if bad == 0 else DIVERGENCE


def zoo_detection(args: argparse.Namespace, entries) -> int:
    """`mutate --zoo --seeds N`: the chance that one `dev` run kills each entry."""
    from batchproof.mutate import DETECTION_PROFILE, DETECTION_TARGET, detection, weakest

    if args.seeds < 1:
        raise UsageError(f"--seeds must be at least 1, got {args.seeds}")
    started = time.perf_counter()
    with _progress() as progress:
        task = progress.add_task("bug zoo x seeds", total=len(entries) * args.seeds)
        results = detection(entries, seeds=args.seeds, jobs=args.jobs, disabled=args.without,
                            search_only=args.search_only,
                            progress=lambda r: progress.advance(task))
    table = Table(title=f"bug zoo detection — {args.seeds} seeds of profile={DETECTION_PROFILE}"
                        f"{', without the pins' if args.search_only else ''}: "
                        "the fraction of runs that kill each entry")
    for column in ("entry", "killed", "weakest declared killer", "declared killers",
                   "other checks, in runs the declared missed"):
        table.add_column(column)
    low = []
    for found in results:
        weak = weakest(found)
        rate = f"{found.killed}/{found.seeds}"
        if found.rate < DETECTION_TARGET:
            low.append(found)
            rate = f"[red]{rate}[/red]"
        table.add_row(found.entry, rate,
                      f"{_short(weak[0], found)} {weak[1]:.2f}" if weak else "-",
                      *_detection_killers(found))
    console.print(table)
    console.print(f"{len(results) - len(low)}/{len(results)} entries killed in >= "
                  f"{DETECTION_TARGET:.0%} of {args.seeds} seeded runs, in "
                  f"{time.perf_counter() - started:.1f}s" +
                  (f"; below: {', '.join(f.entry for f in low)}" if low else ""))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([asdict(f) for f in results], handle, indent=2)
    if args.markdown:
        _write_detection_markdown(args.markdown, results, args.seeds, args.search_only)
    return OK if not low else DIVERGENCE


def _short(key: str, found) -> str:
    """`equivalence` for the entry's own record, `rl_batch.response_values/errors` otherwise."""
    from batchproof.zoo import get

    record = get(found.entry).record
    return key.split("/", 1)[1] if key.startswith(record + "/") else key


def _detection_killers(found) -> tuple[str, str]:
    """The declared killers with the fraction of runs each killed in, sorted by it; the other
    checks that killed, with their count of runs (only runs the declared killers all missed)."""
    declared = sorted(found.declared, key=lambda k: (-found.check_rate(k), k))
    return (", ".join(f"{_short(k, found)} {found.check_rate(k):.2f}" for k in declared) or "-",
            ", ".join(f"{_short(k, found)} {n}" for k, n in found.rescuers().items()) or "-")


def _write_detection_markdown(path, results, seeds: int, search_only: bool = False) -> None:
    from batchproof.mutate import DETECTION_PROFILE, weakest

    how = f"`{DETECTION_PROFILE}`{', no pins' if search_only else ''}"
    lines = [f"| entry | runs that kill it (of {seeds}, {how}) | weakest declared "
             "killer | declared killers: fraction of runs | other checks: runs, of those the "
             "declared missed |", "|---|---|---|---|---|"]
    for found in results:
        weak = weakest(found)
        declared, others = _detection_killers(found)
        lines.append(f"| `{found.entry}` | {found.killed}/{seeds} | "
                     f"{f'{_short(weak[0], found)} {weak[1]:.2f}' if weak else '-'} | "
                     f"{declared} | {others} |")
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")


def mutate_target(args: argparse.Namespace) -> int:
    """`batchproof mutate --impl module:function --op RECORD [scope options]`."""
    from batchproof import mutate_target as target
    from batchproof.adapters import FrameworkMissing, load_adapter_file
    from batchproof.adapters.scope import Scope

    if args.zoo or args.mutmut:
        raise UsageError("--impl runs mutmut over your module: not with --zoo or --mutmut")
    if ":" not in args.impl or not args.op or len(args.op) != 1:
        raise UsageError("--impl needs MODULE:FUNCTION and --op naming one record")
    if importlib.util.find_spec("mutmut") is None:
        raise TargetError("mutate --impl needs mutmut (pip install 'batchproof[mutation]')")
    from batchproof import registry

    try:
        info = registry.get(args.op[0])
        scope = Scope.from_args(args)
        for path in scope.adapter_files:
            load_adapter_file(path)
        scope.validate([info.name])
        mutation = target.Target(args.impl, info.name, args.adapter, scope, args.max_examples)
        mutation.adapter_for()  # validates --adapter and the scope's outputs
        return target.main(mutation)
    except ValueError as err:
        raise UsageError(str(err)) from None
    except (ImportError, FrameworkMissing) as err:
        raise TargetError(f"--impl {args.impl}: {err}") from None


def _write_matrix_markdown(path, results, entries_by_name, profile) -> None:
    """The kill matrix as a Markdown table (for docs/mutation.md)."""
    lines = [f"| entry | replaces | bug | killed by (profile `{profile}`; **declared**) |",
             "|---|---|---|---|"]
    for r in results:
        entry = entries_by_name[r.entry]
        killers = []
        for key, hit in r.killed_by.items():
            if hit:
                short = key.split("/", 1)[1] if key.startswith(entry.record + "/") else key
                killers.append(f"**{short}**" if key in r.declared else short)
        kind = " (oracle)" if entry.oracle else ""
        bug = entry.bug.replace("|", "\\|")
        lines.append(f"| `{r.entry}` | `{entry.record}`{kind} | {bug} | "
                     f"{', '.join(killers) or 'SURVIVED'} |")
    killed = sum(r.killed for r in results)
    lines.append("")
    lines.append(f"{killed}/{len(results)} entries killed.")
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- bench and check


def bench(args: argparse.Namespace) -> int:
    from batchproof import bench as bench_module

    if args.device == "cuda":
        _need_cuda()
    try:
        return bench_module.main(ops=args.op, device=args.device, json_path=args.json,
                                 quick=args.quick, pages=args.pages, scale=args.scale)
    except ValueError as err:
        raise UsageError(str(err)) from None


def check(args: argparse.Namespace) -> int:
    from batchproof.adapters import runner

    _load_profile(args.profile)
    if args.max_examples is not None and args.max_examples < 1:
        raise UsageError(f"--max-examples must be at least 1, got {args.max_examples}")
    if args.reproduce and not args.check:
        raise UsageError("--reproduce replays one failure: give its --op and --check too")
    return runner.main(args)


# --------------------------------------------------------------------------- fuzz


FUZZ_MISSING = "batchproof fuzz needs HypoFuzz: pip install 'batchproof[fuzz]'"
# `hypothesis fuzz`, with the ops' logged warnings unshown (checked, as in `verify`; HypoFuzz's
# worker processes inherit the handler)
HYPOFUZZ_MAIN = ("import logging; logging.getLogger().addHandler(logging.NullHandler()); "
                 "from hypothesis.extra.cli import main; main(prog_name='hypothesis')")


def fuzz(args: argparse.Namespace) -> int:
    """HypoFuzz over the registry's searched checks on impl/ (`batchproof.fuzz_targets`), on
    `-n` processes, until stopped. Its pytest collection has the package folder as rootdir, so
    that a test's node id, which HypoFuzz keys its examples by, gives the Hypothesis database key
    `run_check` uses: what it finds replays in `verify` (docs/fuzzing.md). Stopped (Ctrl-C,
    SIGTERM), it prints per check what HypoFuzz did and exits 130; else HypoFuzz's status (it
    ends by itself only when every test has failed, with 1)."""
    import subprocess

    from batchproof import checks

    if importlib.util.find_spec("hypofuzz") is None:
        raise UsageError(FUZZ_MISSING)
    profile = args.profile or "nightly"
    if profile in ("ci", "mutation"):
        raise UsageError(f"--profile {profile} is derandomized, without a database: HypoFuzz "
                         "fuzzes none of its tests (nightly or dev)")
    _load_profile(profile)  # an unknown name, a malformed shared database: one line
    _read_shared_database_once()
    workers = args.workers if args.workers is not None else _cores()
    if workers < 1:
        raise UsageError(f"-n must be at least 1, got {workers}")
    infos, _ = select_records(args.op)  # records missing an optional module are left out
    wanted = select_checks(infos, args.check)
    pairs = [(i, c) for i in infos for c in wanted[i.name] if checks.searched(c)]
    if not pairs:
        raise UsageError("no searched check selected: a pin is one example, nothing to fuzz "
                         "(`batchproof verify` runs it)")
    tests = [f"{fuzz_module()}::test_{checks.check_test_name(i, c)}" for i, c in pairs]
    dashboard = (["--dashboard-only"] if args.dashboard_only else ["--dashboard"]
                 if args.dashboard else ["--no-dashboard"])
    if args.dashboard or args.dashboard_only:
        dashboard += ["--port", str(args.port)]
    pytest_args = fuzz_pytest_args(profile, tests if args.op or args.check else None)
    doing = "dashboard only" if args.dashboard_only else \
        f"HypoFuzz on {workers} process{'es' * (workers > 1)}"
    say(f"{PROG} fuzz: {doing}, {len(tests)} checks, profile {profile}; until stopped (Ctrl-C)")
    command = [sys.executable, "-c", HYPOFUZZ_MAIN, "fuzz", "-n", str(workers), *dashboard,
               "--", *pytest_args]
    started = time.time()
    # `timeout` and CI stop it with SIGTERM (sent to the whole process group): HypoFuzz's
    # processes end, and this one prints what they did
    previous = signal.signal(signal.SIGTERM, _interrupt)
    child = subprocess.Popen(command)
    try:
        code = child.wait()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: HypoFuzz's processes have it too
        code = 130
        try:
            child.wait(timeout=30)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            child.kill()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not args.dashboard_only:
        _fuzz_summary(pairs, started)
    return 128 - code if code < 0 else code  # killed by a signal: the shell's status


def _read_shared_database_once() -> None:
    """A `github:` shared database downloads its artifact here, once (Hypothesis keeps it a day
    under .hypothesis/github-artifacts/): HypoFuzz's processes then read this copy, rather than
    each downloading its own at the same moment and deleting the others' (it keeps one zip)."""
    from hypothesis import settings

    if settings().database is not None:
        list(settings().database.fetch(b"batchproof fuzz: read the shared database once"))


def fuzz_module():
    """The path of `batchproof.fuzz_targets`' file (not imported)."""
    from pathlib import Path

    from batchproof import checks

    return Path(checks.__file__).parent / checks.FUZZ_MODULE


def fuzz_pytest_args(profile: str, tests: Sequence[str] | None = None) -> list[str]:
    """pytest's arguments for HypoFuzz's collection: the package folder as rootdir (node ids
    `fuzz_targets.py::test_…`, which key the examples as `run_check` does), no ini file (not
    the addopts of a project batchproof is installed in), batchproof's plugin and `profile`,
    and `tests` (node ids; default: every test of the module)."""
    module = fuzz_module()
    return [f"--rootdir={module.parent}", "-c", os.devnull, "-p", "batchproof.plugin", "-p",
            "no:cacheprovider", f"--hypothesis-profile={profile}", *(tests or [str(module)])]


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _fuzz_summary(pairs, since: float) -> None:
    """Per check, what HypoFuzz did since `since` (the reports it keeps in the example
    database: test cases run by all processes, behaviours seen) and the failing examples saved
    for it (shrunk; `verify` replays them)."""
    try:
        from hypofuzz.database import HypofuzzDatabase
        from hypofuzz.database.models import FailureState
        from hypothesis import settings
        from hypothesis.internal.reflection import function_digest

        from batchproof.checks import given_test

        db = HypofuzzDatabase(settings().database)
        rows = []
        for info, check in pairs:
            key = function_digest(given_test(info, check).hypothesis.inner_test)
            latest: dict[str, Any] = {}  # worker -> its last report (counts are cumulative)
            for report in db.reports.fetch(key):
                last = latest.get(report.worker_uuid)
                if report.timestamp >= since and (last is None
                                                  or report.elapsed_time >= last.elapsed_time):
                    latest[report.worker_uuid] = report
            cases = sum(sum(r.status_counts.values()) for r in latest.values())
            behaviours = max((r.behaviors for r in latest.values()), default=0)
            failing = len(list(db.failures(state=FailureState.SHRUNK).fetch(key)))
            rows.append((info, check, cases, behaviours, failing))
    except Exception as err:  # noqa: BLE001 - a summary, not the result
        say(f"{PROG} fuzz: no summary ({type(err).__name__}: {err})")
        return
    table = Table(title=f"HypoFuzz, {time.time() - since:.0f} s", title_justify="left")
    for column in ("record", "check", "test cases", "behaviours", "failing examples saved"):
        table.add_column(column, justify="left" if column in ("record", "check") else "right")
    for info, check, cases, behaviours, failing in rows:
        table.add_row(info.name, check, str(cases), str(behaviours),
                      f"[red]{failing}[/red]" if failing else "0")
    console.print(table)
    failed = sorted({info.name for info, _, _, _, failing in rows if failing})
    if failed:
        say(f"failing examples are saved for {', '.join(failed)}: `{PROG} verify --profile "
            "nightly` replays them first")


def _cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


# --------------------------------------------------------------------------- main


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (`UsageError`), not the usage text and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def version_text() -> str:
    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return (f"{PROG} {of('batchproof')} (Python {sys.version.split()[0]}; torch {of('torch')}, "
            f"hypothesis {of('hypothesis')}, tensordict {of('tensordict')}; extras: "
            f"kernels: numba {of('numba')}, models: transformers {of('transformers')}, "
            f"mutation: mutmut {of('mutmut')})")


OP_HELP = (f"an op ({', '.join(OP_MODULES)}) or one of its records, op.function "
           "(`batchproof list records`); repeatable")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("verify", help="run every check of every op on an implementation")
    p.add_argument("--op", action="append", metavar="NAME", help=OP_HELP)
    p.add_argument("--check", action="append", metavar="NAME",
                   help="run only this check (equivalence, errors, property:NAME, pin:NAME; "
                        "`batchproof list checks`); repeatable")
    _search_options(p)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--placement", default="all",
                   choices=["all", "kernel", "cpu", "generic", "triton"],
                   help="which of impl/'s code paths to check on the CPU (default all: the "
                        "compiled kernels, the CPU fast paths, the device-generic code CUDA "
                        "runs, and its Triton kernels under Triton's interpreter when triton is "
                        "installed; each against the reference; `batchproof list placements`)")
    p.add_argument("--coverage", action="store_true",
                   help="measure branch coverage of impl/ and reference/ over the run "
                        "(coverage.py; needs batchproof[coverage]; docs/coverage.md)")
    p.add_argument("--impl", default="impl", help="impl (default: batchproof's own), reference, "
                   "a package mirroring impl/ (PACKAGE.rl_batch.build_rl_batch, ...), or "
                   "module:function with --op naming one record; the current folder is "
                   "importable")
    p.add_argument("--json", metavar="FILE", help="write a JSON report to this file")

    p = sub.add_parser("check", help="fuzz a third-party implementation through an adapter")
    p.add_argument("--impl", help="a framework (`batchproof list adapters`) or "
                   "module:function (the current folder is importable); optional with "
                   "--adapter, which names its own function")
    p.add_argument("--op", action="append", metavar="NAME", help=OP_HELP)
    p.add_argument("--adapter", help="adapter name (`batchproof list adapters`), also for a "
                   "module:function target that it maps")
    p.add_argument("--check", action="append", metavar="NAME",
                   help="run only this check; repeatable")
    _scope_options(p)
    _search_options(p)
    p.add_argument("--json", metavar="FILE")

    p = sub.add_parser("show", help="draw the layout of a small example")
    p.add_argument("--op", action="append", required=True, metavar="NAME", help=OP_HELP)

    p = sub.add_parser("list", help="ops, records, checks, adapters, profiles")
    p.add_argument("what", nargs="?", choices=LISTS)

    p = sub.add_parser("mutate", help="mutation testing: bug zoo, mutmut over impl/, or mutmut "
                                      "over your function's module (--impl)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--zoo", action="store_true", help="run the bug zoo's kill matrix")
    mode.add_argument("--mutmut", action="store_true",
                      help="run mutmut 3 over impl/ (in a clone of the repository)")
    p.add_argument("--impl", metavar="MODULE:FUNCTION",
                   help="run mutmut over the module holding your function, with batchproof's "
                        "checks of --op RECORD as the tests; lists the surviving mutants")
    p.add_argument("--adapter", help="--impl: an adapter mapping your function")
    _scope_options(p)
    p.add_argument("--check", action="append", metavar="NAME",
                   help="--impl: the checks that kill mutants (default: all)")
    p.add_argument("--max-examples", type=int, default=20, metavar="N",
                   help="--impl: examples per check for each mutant (default 20)")
    p.add_argument("--op", action="append", metavar="NAME", help=OP_HELP)
    p.add_argument("--profile", default="mutation")
    p.add_argument("--seeds", type=int, metavar="N",
                   help="--zoo: run each entry under seeds 0..N-1 of the dev profile and report "
                        "the fraction of runs that kill it (target: 0.95)")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: cores)")
    p.add_argument("--without", action="append", default=[],
                   help="disable a check (record/check), to see what it alone kills")
    p.add_argument("--search-only", action="store_true",
                   help="--zoo: without the pins (pin: checks and the @examples of each search): "
                        "what the random search alone kills, as on a bug no pin was written for")
    p.add_argument("--since", help="mutmut: only functions changed since this git revision")
    p.add_argument("--harness", action="append", default=[], metavar="MODULE",
                   help="mutmut: mutate this harness module (compare, report, adapters/__init__, "
                        "adapters/scope, regimes, blocks) instead of impl/, its own tests as the "
                        "killers; repeatable")
    p.add_argument("--markdown", help="also write the result as Markdown (zoo: the kill matrix; "
                                      "mutmut: the score per file and every equivalent with its "
                                      "reason)")
    p.add_argument("--min-mutants", type=int, default=20,
                   help="mutmut: fail if fewer mutants are generated (misconfiguration guard)")
    p.add_argument("--json")

    p = sub.add_parser("bench", help="reference vs impl vs the floor, as ratios in one run")
    p.add_argument("--op", action="append", metavar="NAME", help=OP_HELP)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--json")
    p.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    p.add_argument("--scale", default="default", choices=["default", "h100"],
                   help="h100: trainer scale from jagged device tensors (B = 8192, prompts up to "
                        "2048, responses up to 14336 tokens; rl_batch and varlen), impl vs its "
                        "torch path vs the write floor (docs/performance.md)")
    p.add_argument("--pages", default="warm", choices=["warm", "system"],
                   help="warm (default): glibc keeps freed memory, so outputs land on pages "
                        "already mapped, as in a long-running trainer; system: glibc's own "
                        "thresholds (large outputs may get fresh pages and page faults)")
    p = sub.add_parser("fuzz", help="HypoFuzz over every searched check, on every core, until "
                                    "stopped (needs batchproof[fuzz])")
    p.add_argument("--op", action="append", metavar="NAME", help=OP_HELP)
    p.add_argument("--check", action="append", metavar="NAME",
                   help="fuzz only this check (equivalence, errors, property:NAME); repeatable")
    p.add_argument("-n", "--workers", type=int, metavar="N",
                   help="fuzzing processes (default: every core)")
    p.add_argument("--profile", default=None, help="Hypothesis profile whose database is used: "
                   "nightly (default) or dev")
    p.add_argument("--dashboard", action="store_true",
                   help="serve HypoFuzz's live dashboard on localhost")
    p.add_argument("--dashboard-only", action="store_true",
                   help="serve the dashboard of what the database holds (e.g. the nightly "
                        "runs', with BATCHPROOF_SHARED_DATABASE), without fuzzing")
    p.add_argument("--port", type=int, default=9999, help="the dashboard's port (default 9999)")
    return parser


def _scope_options(p: argparse.ArgumentParser) -> None:
    """The options that scope a check to what a function does (`batchproof.adapters.scope`):
    the same for `check` and `mutate --impl`."""
    p.add_argument("--skip", action="append", default=[], metavar="CHECK",
                   help="do not run this check (reported as skipped); `errors` skips every "
                        "bad-input check; repeatable")
    p.add_argument("--forms", action="append", metavar="FORM",
                   help="an input form the function accepts (lists, tensors, jagged, ...: "
                        "`batchproof list records`); repeatable; default: every form")
    p.add_argument("--not-provided", action="append", default=[], metavar="KEY",
                   help="an output the function does not produce (not compared); repeatable")
    p.add_argument("--output-name", action="append", default=[], metavar="THEIRS=CONTRACT",
                   help="an output of the function under another name than the contract's "
                        "(a dict of outputs becomes a TensorDict); repeatable")
    p.add_argument("--layout", help="the only layout the function builds (records with a "
                   "layout argument, e.g. --layout left for rl_batch.build_rl_batch)")
    p.add_argument("--adapter-file", action="append", default=[], metavar="PATH.py",
                   help="a Python file that registers adapters (batchproof.register_adapter); "
                        "then --adapter NAME or --impl FRAMEWORK picks one; repeatable")


def _search_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default=None, help="Hypothesis profile: dev, ci, nightly, "
                   "mutation (default: ci if $CI is set, else dev)")
    p.add_argument("--max-examples", type=int, metavar="N",
                   help="examples per check (default: the profile's)")
    p.add_argument("--seed", type=int, metavar="N", help="seed Hypothesis' random search")
    p.add_argument("--reproduce", metavar="BLOB",
                   help="replay one failure: the blob a failure report's replay line gives")


COMMANDS = {"verify": verify, "check": check, "show": show, "list": list_things,
            "mutate": mutate, "bench": bench, "fuzz": fuzz}


def main(argv: list[str] | None = None) -> int:
    logging.getLogger().addHandler(logging.NullHandler())  # ops' warnings are checked, not shown
    # tensordict calls torch.fx.is_fx_tracing(), which logs a one-time deprecation warning
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UsageError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return USAGE
    except TargetError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return HARNESS
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - batchproof's own failure: one line, exit 3
        if os.environ.get("BATCHPROOF_DEBUG"):
            raise
        print(f"{PROG}: internal error: {type(err).__name__}: {err} (set BATCHPROOF_DEBUG=1 "
              "for the traceback)", file=sys.stderr)
        return HARNESS


if __name__ == "__main__":
    sys.exit(main())

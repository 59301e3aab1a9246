"""The `harness` command line: verify, show, mutate, bench, check.

    harness verify [--op NAME ...] [--profile ci|nightly|dev|mutation] [--device cpu|cuda]
                   [--impl impl|reference|PACKAGE|module:function] [--json FILE]
    harness show --op NAME
    harness mutate --zoo [--op NAME ...] [--jobs N] [--without CHECK ...] [--json FILE]
    harness mutate --mutmut [--op NAME ...] [--since GIT_REV]
    harness bench [--op NAME ...] [--device cpu|cuda] [--json FILE] [--pages warm|system]
    harness check --impl skyrl|verl|module:function --op NAME
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(width=None if Console().is_terminal else 140)


@dataclass
class CheckResult:
    op: str
    function: str
    check: str
    passed: bool
    examples: int
    seconds: float
    device: str
    error: str = ""
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- verify


def resolve_candidate(info, impl: str):
    """The function under test for one record: a package mirroring `impl/`, or module:function."""
    if ":" in impl:
        module, _, function = impl.partition(":")
        target = getattr(importlib.import_module(module), function)
        return lambda *a, **k: target(*a, **k)
    if impl == "impl":
        return None  # the record's own late-bound impl
    return lambda *a, **k: info.candidate_from(impl)(*a, **k)


def verify(ops, profile, device, impl, json_path) -> int:
    from hypothesis import settings

    from harness import profiles, registry
    from harness.checks import CheckStats, run_check

    _one_thread_unless_asked()
    profile = profiles.load(profile)
    infos = registry.select(ops)
    if ":" in impl and len(infos) != 1:
        console.print("[red]--impl module:function needs --op naming exactly one record "
                      f"(got {len(infos)}: {[i.name for i in infos]})[/red]")
        return 2
    results: list[CheckResult] = []
    started = time.perf_counter()
    with _progress() as progress:
        for op in dict.fromkeys(i.op for i in infos):
            records = [i for i in infos if i.op == op]
            task = progress.add_task(op, total=sum(len(i.check_names()) for i in records))
            for info in records:
                if device != "cpu" and device not in info.devices:
                    progress.advance(task, len(info.check_names()))
                    continue
                candidate = resolve_candidate(info, impl)
                for check in info.check_names():
                    progress.update(task, description=f"{op}: {info.function} {check}")
                    stats = CheckStats()
                    t0 = time.perf_counter()
                    try:
                        run_check(info, check, candidate, settings=settings(), device=device,
                                  stats=stats)
                        passed, error, notes = True, "", []
                    except Exception as exc:  # noqa: BLE001 - reported, not raised
                        passed, error = False, f"{type(exc).__name__}: {exc}"
                        notes = list(getattr(exc, "__notes__", []))
                    results.append(CheckResult(op, info.function, check, passed, stats.examples,
                                               time.perf_counter() - t0, device, error, notes))
                    progress.advance(task)
            progress.update(task, description=op)
    _print_summary(results, profile, device, impl, time.perf_counter() - started)
    if json_path:
        report = {"profile": profile, "device": device, "impl": impl,
                  "passed": all(r.passed for r in results),
                  "checks": [asdict(r) for r in results]}
        with open(json_path, "w") as handle:
            json.dump(report, handle, indent=2)
        console.print(f"report written to {json_path}")
    return 0 if results and all(r.passed for r in results) else 1


def _one_thread_unless_asked() -> None:
    """The checks run many tiny tensor ops: intra-op threads only contend (OMP_NUM_THREADS wins)."""
    import os

    import torch

    if not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(1)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False)


def _print_summary(results, profile, device, impl, seconds) -> None:
    table = Table(title=f"harness verify — impl={impl}, profile={profile}, device={device}")
    for column in ("op", "function", "checks", "examples", "device", "result", "time"):
        table.add_column(column, justify="right" if column in ("checks", "examples", "time")
                         else "left")
    keys = list(dict.fromkeys((r.op, r.function) for r in results))
    for op, function in keys:
        rows = [r for r in results if (r.op, r.function) == (op, function)]
        failed = [r for r in rows if not r.passed]
        verdict = "[green]PASS[/green]" if not failed else f"[red]FAIL ({len(failed)})[/red]"
        table.add_row(op, function, str(len(rows)), str(sum(r.examples for r in rows)),
                      device, verdict, f"{sum(r.seconds for r in rows):.1f}s")
    console.print(table)
    for r in (r for r in results if not r.passed):
        console.rule(f"[red]{r.op}.{r.function} — {r.check}")
        console.print(r.error, markup=False, highlight=False)
        for note in r.notes:
            console.print(note, markup=False, highlight=False)
    passed = sum(r.passed for r in results)
    colour = "green" if passed == len(results) else "red"
    console.print(f"[{colour}]{passed}/{len(results)} checks passed[/{colour}] in {seconds:.1f}s")


# --------------------------------------------------------------------------- show


def show(ops) -> int:
    from harness import registry

    infos = [i for i in registry.select(ops) if i.example is not None]
    if not infos:
        console.print(f"[red]no record of {ops} has an example to show[/red]")
        return 2
    for info in infos:
        console.rule(f"{info.name} — {info.doc}")
        console.print(f"input: {info.example.short(200)}", markup=False, highlight=False)
        output = info.example.call(info.reference)
        if info.show is not None:
            for line in info.show(info.example, output):
                console.print(line, markup=False, highlight=False)
            continue
        if info.picture is not None:
            for family, rows in info.picture(output).items():
                console.print(f"{family}:")
                for i, row in enumerate(rows):
                    console.print(f"  row {i}  {row}", markup=False, highlight=False)
            console.print("  (. pad, p prompt, r response)")
        console.print(output)
        _print_tensors(output)
    return 0


def _print_tensors(output: Any) -> None:
    from tensordict import TensorDictBase

    if not isinstance(output, TensorDictBase):
        console.print(repr(output), markup=False, highlight=False)
        return
    for key in output.keys():
        value = output.get_non_tensor(key) if output.is_non_tensor(key) else output.get(key)
        text = value.tolist() if hasattr(value, "tolist") and not getattr(
            value, "is_nested", False) else value
        console.print(f"{key} = {text}", markup=False, highlight=False)


# --------------------------------------------------------------------------- mutate


def mutate(args) -> int:
    if args.mutmut:
        from harness import mutmut_driver

        return mutmut_driver.main(ops=args.op, since=args.since, min_mutants=args.min_mutants,
                                  json_path=args.json, markdown_path=args.markdown)
    from harness.mutate import kill_matrix
    from harness.zoo import all_entries

    entries = [e for e in all_entries() if not args.op or e.op in args.op]
    if not entries:
        console.print(f"[red]no zoo entries for {args.op}[/red]")
        return 2
    started = time.perf_counter()
    with _progress() as progress:
        task = progress.add_task("bug zoo", total=len(entries))
        results = kill_matrix(entries, profile=args.profile, jobs=args.jobs,
                              disabled=args.without,
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
    return 0 if bad == 0 else 1


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


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("verify", help="run every check of every op on an implementation")
    p.add_argument("--op", action="append", help="op module or record (repeatable)")
    p.add_argument("--profile", default=None, help="Hypothesis profile (default: ci if $CI "
                   "else dev)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--impl", default="impl", help="impl (default), reference, a package "
                   "mirroring impl/, or module:function")
    p.add_argument("--json", help="write a JSON report to this file")

    p = sub.add_parser("show", help="draw the layout of a small example")
    p.add_argument("--op", action="append", required=True)

    p = sub.add_parser("mutate", help="mutation testing: bug zoo or mutmut")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--zoo", action="store_true", help="run the bug zoo's kill matrix")
    mode.add_argument("--mutmut", action="store_true", help="run mutmut 3 over impl/")
    p.add_argument("--op", action="append")
    p.add_argument("--profile", default="mutation")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: cores)")
    p.add_argument("--without", action="append", default=[],
                   help="disable a check (record/check), to see what it alone kills")
    p.add_argument("--since", help="mutmut: only functions changed since this git revision")
    p.add_argument("--markdown", help="also write the result as Markdown (zoo: the kill matrix; "
                                      "mutmut: the score per file and every equivalent with its "
                                      "reason)")
    p.add_argument("--min-mutants", type=int, default=20,
                   help="mutmut: fail if fewer mutants are generated (misconfiguration guard)")
    p.add_argument("--json")

    p = sub.add_parser("bench", help="reference vs impl vs the floor, as ratios in one run")
    p.add_argument("--op", action="append")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--json")
    p.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    p.add_argument("--pages", default="warm", choices=["warm", "system"],
                   help="warm (default): glibc keeps freed memory, so outputs land on pages "
                        "already mapped, as in a long-running trainer; system: glibc's own "
                        "thresholds (large outputs may get fresh pages and page faults)")

    p = sub.add_parser("check", help="fuzz a third-party implementation through an adapter")
    p.add_argument("--impl", required=True)
    p.add_argument("--op", action="append")
    p.add_argument("--adapter", help="adapter name for a module:function target")
    p.add_argument("--profile", default=None)
    p.add_argument("--json")
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.getLogger().addHandler(logging.NullHandler())  # ops' warnings are checked, not shown
    args = build_parser().parse_args(argv)
    if args.command == "verify":
        return verify(args.op, args.profile, args.device, args.impl, args.json)
    if args.command == "show":
        return show(args.op)
    if args.command == "mutate":
        return mutate(args)
    if args.command == "bench":
        from harness import bench

        return bench.main(ops=args.op, device=args.device, json_path=args.json, quick=args.quick,
                          pages=args.pages)
    if args.command == "check":
        from harness import adapters

        return adapters.main(impl=args.impl, ops=args.op, adapter=args.adapter,
                             profile=args.profile, json_path=args.json)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""`batchproof mutate`: the bug zoo's kill matrix and detection rates, mutmut over impl/ or a
harness module, and mutmut over your own function (`--impl`)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import time
from dataclasses import asdict

from rich.table import Table

from batchproof.cli.common import (
    DIVERGENCE,
    OK,
    TargetError,
    UsageError,
    _progress,
    console,
)
from batchproof.ops import OP_MODULES


def mutate(args: argparse.Namespace) -> int:
    if args.seeds is not None and not args.zoo:
        raise UsageError("--seeds goes with --zoo (the detection rate of each zoo entry)")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    if args.impl:
        return mutate_target(args)
    if not (args.zoo or args.mutmut):
        raise UsageError("give --zoo, --mutmut, or --impl MODULE:FUNCTION with --op RECORD")
    if args.mutmut:
        from batchproof.mutation import mutmut_driver

        try:
            return mutmut_driver.main(ops=args.op, since=args.since, min_mutants=args.min_mutants,
                                      json_path=args.json, markdown_path=args.markdown,
                                      harness=args.harness,
                                      max_children=args.jobs or mutmut_driver.MAX_CHILDREN)
        except ValueError as err:
            raise UsageError(str(err)) from None
    from batchproof.mutation.kill_matrix import kill_matrix
    from batchproof.mutation.zoo import all_entries

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
    from batchproof.mutation.kill_matrix import DETECTION_PROFILE, DETECTION_TARGET, detection, weakest

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
    from batchproof.mutation.zoo import get

    record = get(found.entry).record
    return key.split("/", 1)[1] if key.startswith(record + "/") else key

def _detection_killers(found) -> tuple[str, str]:
    """The declared killers with the fraction of runs each killed in, sorted by it; the other
    checks that killed, with their count of runs (only runs the declared killers all missed)."""
    declared = sorted(found.declared, key=lambda k: (-found.check_rate(k), k))
    return (", ".join(f"{_short(k, found)} {found.check_rate(k):.2f}" for k in declared) or "-",
            ", ".join(f"{_short(k, found)} {n}" for k, n in found.rescuers().items()) or "-")

def _write_detection_markdown(path, results, seeds: int, search_only: bool = False) -> None:
    from batchproof.mutation.kill_matrix import DETECTION_PROFILE, weakest

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
    from batchproof.adapters import FrameworkMissing, load_adapter_file
    from batchproof.adapters.scope import Scope
    from batchproof.mutation import target

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
        return target.main(mutation, max_children=args.jobs or target.driver.MAX_CHILDREN)
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
        kind += f" (its `{entry.target}`)" if entry.target else ""
        bug = entry.bug.replace("|", "\\|")
        lines.append(f"| `{r.entry}` | `{entry.record}`{kind} | {bug} | "
                     f"{', '.join(killers) or 'SURVIVED'} |")
    killed = sum(r.killed for r in results)
    lines.append("")
    lines.append(f"{killed}/{len(results)} entries killed.")
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")

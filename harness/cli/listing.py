"""`batchproof list` and `batchproof show`: what is registered, and a small example of a layout."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from batchproof.cli.common import (
    LISTS,
    OK,
    UsageError,
    console,
    say,
)
from batchproof.ops import OP_MODULES


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

    budget = regimes.default_examples()
    table = Table(title=f"regimes: what each strategy promises to draw, and in how many of "
                        f"{budget} examples (four ci budgets) it does (batchproof.regimes; "
                        f"fewer than {regimes.MIN_HITS} fails tests/test_regimes.py)")
    for column in ("record", "regime", "examples"):
        table.add_column(column, justify="right" if column == "examples" else "left")
    for record in regimes.records():
        for name, hits in regimes.coverage(record, examples=budget).items():
            low = hits < regimes.MIN_HITS
            table.add_row(record, name, f"[red]{hits}[/red]" if low else str(hits))
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
    for column in ("record", "checks", "paths checks (`verify`, batchproof's own impl/)"):
        table.add_column(column)
    for info in registry.all_ops():
        table.add_row(info.name, " ".join(info.check_names()), " ".join(info.path_checks()))
    console.print(table)

def _list_adapters() -> None:
    from batchproof import adapters

    table = Table(title="adapters (`batchproof check --impl FRAMEWORK`; entry-point group "
                        f"{adapters.ENTRY_POINTS!r})")
    for column in ("adapter", "framework", "record", "target", "fits", "installed"):
        table.add_column(column)
    for a in adapters.all_adapters():
        installed = a.version()
        if installed not in ("-", "not installed"):  # the framework is here: does it fit?
            installed += f" ({'yes' if a.fits(installed) else 'no'})"
        table.add_row(a.name, a.framework, a.record, a.target, a.versions or "any", installed)
    console.print(table)
    for problem in adapters.LOAD_PROBLEMS:
        say(problem)

def _list_placements() -> None:
    from batchproof import placements
    from batchproof.registry import PLACEMENT_KINDS

    available = placements.available()
    table = Table(title="placements (`verify --placement NAME`; default: every one available)")
    for column in ("placement", "what runs", "paths it may run", "here"):
        table.add_column(column)
    for name, what in placements.PLACEMENTS.items():
        extra = "triton" if name == "triton" else "kernels"
        here = "default" if name == available[0] else "yes" if name in available else \
            f"no: pip install 'batchproof[{extra}]'"
        table.add_row(name, what, ", ".join(PLACEMENT_KINDS[name]) or "none", here)
    console.print(table, markup=False)  # `batchproof[kernels]` is no markup

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

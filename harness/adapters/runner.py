"""`harness check`: run a record's checks on an adapter, separating known divergences from new ones.

    for each check of the record (minus the adapter's `skip`):
        inputs outside `adapter.supports`           -> not run (counted as unsupported)
        inputs a known divergence `applies` to      -> set aside, counted, re-run once to confirm
        every other input                           -> the ordinary check (shrunk on failure)

A failing check is a *new* divergence: only those make the exit status non-zero. A known divergence
whose inputs were met but never diverged is reported as `not reproduced` (fixed upstream? then
remove it from the adapter).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis.errors import Unsatisfiable
from rich.console import Console
from rich.table import Table
from tensordict import TensorDictBase

from harness import profiles, registry
from harness.adapters import (
    Adapter,
    FrameworkMissing,
    all_adapters,
    frameworks,
    get_adapter,
    identity_adapter,
)
from harness.checks import CheckStats, check_equivalence, check_error_parity, run_check
from harness.registry import BadCase, Candidate, Case, OpInfo

console = Console()


@dataclass
class KnownTally:
    """How often each known divergence's condition held, and how often it really diverged."""

    hits: Counter = field(default_factory=Counter)
    confirmed: Counter = field(default_factory=Counter)
    unsupported: int = 0
    example: dict[str, str] = field(default_factory=dict)  # the smallest input seen, per name

    def record(self, name: str, case: Case | BadCase, diverged: bool) -> None:
        self.hits[name] += 1
        self.confirmed[name] += diverged
        text = repr(case) if len(repr(case)) <= 400 else repr(case)[:385] + "...(truncated)"
        if diverged and (name not in self.example or len(text) < len(self.example[name])):
            self.example[name] = text


@dataclass
class CheckOutcome:
    adapter: str
    record: str
    check: str
    status: str  # pass | new | known | skipped
    examples: int = 0
    seconds: float = 0.0
    detail: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class AdapterReport:
    adapter: str
    record: str
    target: str
    version: str
    outcomes: list[CheckOutcome]
    known: list[dict[str, Any]]
    unsupported: int

    @property
    def new(self) -> list[CheckOutcome]:
        return [o for o in self.outcomes if o.status == "new"]


# --------------------------------------------------------------------------- the adapted record


def adapted_record(adapter: Adapter, candidate: Candidate, tally: KnownTally) -> OpInfo:
    """The adapter's record: its domain, forms and outputs, with known-divergence inputs set
    aside (counted and confirmed in `tally`)."""
    info = registry.get(adapter.record)
    forms = dict(info.forms) if adapter.forms is None else {
        name: form for name, form in info.forms.items() if name in adapter.forms}
    compare = _compare_provided(info.compare, adapter.not_provided)
    properties = [p for p in info.properties if f"property:{p.name}" not in adapter.skip]
    plain = dataclasses.replace(info, forms=forms, compare=compare, properties=properties,
                                targets=None)

    def keep(case: Case | BadCase) -> bool:
        kind = "errors" if isinstance(case, BadCase) else "valid"
        inputs = case.case if isinstance(case, BadCase) else case
        if not adapter.supports(inputs):
            tally.unsupported += 1
            return False
        for known in adapter.known:
            if known.concerns(kind) and known.applies(inputs):
                tally.record(known.name, case, _diverges(plain, case, candidate))
                return False
        return True

    valid = (adapter.valid if adapter.valid is not None else info.valid).filter(keep)
    invalid_base = adapter.invalid if adapter.invalid is not None else info.invalid
    invalid = invalid_base.filter(keep) if invalid_base is not None else None
    pins = [pin for pin in info.pins if f"pin:{pin.name}" not in adapter.skip and keep(pin.case)]
    return dataclasses.replace(plain, valid=valid, invalid=invalid, pins=pins,
                               targets=info.targets)


def _compare_provided(compare, not_provided: tuple[str, ...]):
    if not not_provided:
        return compare

    def compare_provided(expected, actual, **kwargs):
        if isinstance(expected, TensorDictBase):
            expected = expected.exclude(*not_provided)
        compare(expected, actual, **kwargs)

    return compare_provided


def _diverges(info: OpInfo, case: Case | BadCase, candidate: Candidate) -> bool:
    """Re-run a set-aside input: does the adapter really differ from the contract on it?"""
    try:
        if isinstance(case, BadCase):
            check_error_parity(info, case, candidate)
        else:
            check_equivalence(info, case, candidate)
    except Exception:  # noqa: BLE001 - any failure confirms the divergence
        return True
    return False


# --------------------------------------------------------------------------- running the checks


def check_adapter(adapter: Adapter, candidate: Candidate | None = None,
                  checks: list[str] | None = None,
                  max_examples: int | None = None,
                  report_multiple_bugs: bool = True,
                  replay_database: bool = True,
                  derandomize: bool = False) -> AdapterReport:
    """Run the record's checks (or the named ones) on the adapter; never raises on divergence.

    Hypothesis runs under the loaded profile (`max_examples` overrides its example count).
    `replay_database=False` starts from fresh examples instead of replaying the failures saved
    in Hypothesis' example database (what a test of the shrunk example needs); `derandomize`
    makes the search the same on every run (a test that asserts what it finds needs that)."""
    candidate = candidate if candidate is not None else adapter.candidate()
    tally = KnownTally()
    info = adapted_record(adapter, candidate, tally)
    base = registry.get(adapter.record)
    wanted = checks or base.check_names()
    unknown = set(wanted) - set(base.check_names())
    if unknown:
        raise ValueError(f"{base.name} has no check {sorted(unknown)}")
    outcomes: list[CheckOutcome] = []
    run_names = set(info.check_names())
    search = dataclasses.replace(info, pins=[])
    quiet = settings(suppress_health_check=[*settings().suppress_health_check,
                                            HealthCheck.filter_too_much, HealthCheck.too_slow],
                     max_examples=max_examples or settings().max_examples,
                     report_multiple_bugs=report_multiple_bugs, derandomize=derandomize,
                     **({} if replay_database else {"database": None}))
    for check in wanted:
        outcome = CheckOutcome(adapter.name, adapter.record, check, "pass")
        if check in adapter.skip:
            outcome.status, outcome.detail = "skipped", adapter.skip[check]
        elif check not in run_names:  # a pin set aside by `keep`
            outcome.status, outcome.detail = _set_aside_pin(adapter, base, check)
        else:
            stats = CheckStats()
            started = time.perf_counter()
            try:
                # pins run as their own checks; the searches start without them so that a
                # failure is Hypothesis' shrunk example, not a replay of a pin
                record = info if check.startswith("pin:") else search
                run_check(record, check, candidate, settings=quiet, stats=stats)
            except Unsatisfiable:
                outcome.status = "known"
                outcome.detail = "every generated input met a known divergence"
            except Exception as exc:  # noqa: BLE001 - a new divergence, reported
                outcome.status = "new"
                outcome.detail, outcome.notes = _describe(exc)
            outcome.examples, outcome.seconds = stats.examples, time.perf_counter() - started
        outcomes.append(outcome)
    known = [{"name": k.name, "kind": k.kind, "hits": tally.hits[k.name],
              "confirmed": tally.confirmed[k.name], "example": tally.example.get(k.name, ""),
              "doc": k.doc, "upstream": k.upstream} for k in adapter.known]
    return AdapterReport(adapter.name, adapter.record, adapter.target, adapter.version(),
                         outcomes, known, tally.unsupported)


def _set_aside_pin(adapter: Adapter, info: OpInfo, check: str) -> tuple[str, str]:
    pin = next(p for p in info.pins if f"pin:{p.name}" == check)
    kind = "errors" if isinstance(pin.case, BadCase) else "valid"
    inputs = pin.case.case if isinstance(pin.case, BadCase) else pin.case
    if not adapter.supports(inputs):
        return "skipped", "input outside the adapter's domain"
    names = [k.name for k in adapter.known if k.concerns(kind) and k.applies(inputs)]
    return "known", ", ".join(names)


def _describe(exc: BaseException) -> tuple[str, list[str]]:
    """The failure text and notes, flattening Hypothesis' multiple-failure groups."""
    group = getattr(exc, "exceptions", None)  # an ExceptionGroup (builtin from Python 3.11)
    if isinstance(group, tuple) and group:
        notes: list[str] = []
        for i, sub in enumerate(group, 1):
            sub_text, sub_notes = _describe(sub)
            notes += [f"--- failure {i}: {sub_text}", *sub_notes]
        return f"{len(group)} distinct failures: " + _describe(group[0])[0], notes
    return f"{type(exc).__name__}: {exc}", [str(n) for n in getattr(exc, "__notes__", [])]


# --------------------------------------------------------------------------- selection and CLI


def select_adapters(impl: str, ops: list[str] | None, adapter: str | None) -> list[Adapter]:
    """The adapters `harness check --impl IMPL [--op ...] [--adapter A]` names."""
    if ":" in impl:
        if adapter:
            return [get_adapter(adapter).retarget(impl)]
        infos = registry.select(ops)
        if len(infos) != 1:
            raise ValueError("--impl module:function without --adapter needs --op naming exactly "
                             f"one record (got {[i.name for i in infos]})")
        return [identity_adapter(infos[0].name, impl)]
    if impl not in frameworks():
        raise ValueError(f"unknown --impl {impl!r}: use one of {frameworks()} or module:function")
    chosen = [a for a in all_adapters() if a.framework == impl]
    if adapter:
        chosen = [a for a in chosen if a.name == adapter]
    if ops:
        chosen = [a for a in chosen if a.name in ops or a.record in ops
                  or a.record.split(".")[0] in ops]
    if not chosen:
        names = [a.name for a in all_adapters() if a.framework == impl]
        raise ValueError(f"no {impl} adapter for --op {ops} --adapter {adapter}; known: {names}")
    return chosen


def main(impl: str, ops: list[str] | None, adapter: str | None, profile: str | None,
         json_path: str | None) -> int:
    profile = profiles.load(profile)
    try:
        adapters = select_adapters(impl, ops, adapter)
    except ValueError as err:
        console.print(f"[red]{err}[/red]", highlight=False)
        return 2
    reports = []
    for chosen in adapters:
        try:
            candidate = chosen.candidate()
        except FrameworkMissing as err:
            console.print(f"[red]{chosen.name}: {err}[/red]", highlight=False)
            return 2
        with console.status(f"checking {chosen.name} ({chosen.target})"):
            reports.append(check_adapter(chosen, candidate))
        print_report(reports[-1], profile)
    if json_path:
        with open(json_path, "w") as handle:
            json.dump({"profile": profile, "impl": impl, "reports": [asdict(r) for r in reports]},
                      handle, indent=2)
        console.print(f"report written to {json_path}")
    new = sum(len(r.new) for r in reports)
    colour = "red" if new else "green"
    console.print(f"[{colour}]{new} new divergence(s)[/{colour}] in {len(reports)} adapter(s); "
                  f"known divergences are listed above")
    return 1 if new else 0


_STYLE = {"pass": "[green]PASS[/green]", "new": "[red]NEW DIVERGENCE[/red]",
          "known": "[yellow]known[/yellow]", "skipped": "[dim]skipped[/dim]"}


def print_report(report: AdapterReport, profile: str) -> None:
    console.rule(f"{report.adapter}: {report.target} ({report.version}) vs {report.record}")
    table = Table(title=f"checks — profile={profile}")
    for column in ("check", "result", "examples", "time", "detail"):
        table.add_column(column, justify="right" if column in ("examples", "time") else "left")
    for o in report.outcomes:
        detail = o.detail if o.status != "new" else o.detail.splitlines()[0][:80]
        table.add_row(o.check, _STYLE[o.status], str(o.examples), f"{o.seconds:.1f}s", detail)
    console.print(table)
    if report.known:
        known = Table(title="known divergences (inputs set aside so the search goes on)")
        for column in ("divergence", "kind", "inputs met", "confirmed"):
            known.add_column(column, justify="right" if column in ("inputs met", "confirmed")
                             else "left")
        for k in report.known:
            confirmed = str(k["confirmed"]) if k["confirmed"] or not k["hits"] else \
                "[yellow]0 (not reproduced: fixed upstream?)[/yellow]"
            known.add_row(k["name"], k["kind"], str(k["hits"]), confirmed)
        console.print(known)
        for k in report.known:
            console.print(f"  {k['name']}: {k['doc']}", markup=False, highlight=False)
            if k["example"]:
                console.print(f"    smallest input seen: {k['example']}", markup=False,
                              highlight=False)
    if report.unsupported:
        console.print(f"{report.unsupported} generated inputs were outside the adapter's domain "
                      "(not run)")
    for o in report.new:
        console.rule(f"[red]new divergence: {o.adapter} — {o.check}")
        console.print(o.detail, markup=False, highlight=False)
        for note in o.notes:
            console.print(note, markup=False, highlight=False)

"""`batchproof check`: run a record's checks on an adapter, separating known divergences from new
ones.

    for each check of the record (minus the adapter's `skip`):
        inputs outside `adapter.supports`           -> not run (counted as unsupported)
        inputs a known divergence `applies` to      -> set aside, counted, re-run once to confirm
        every other input                           -> the ordinary check (shrunk on failure)

A failing check is a *new* divergence (exit status 1). A check that ran no example against the
target is `not tested`, never a pass; a failure of batchproof itself is an `error` (both exit
status 3). A known divergence whose inputs were met but never diverged is reported as
`not reproduced` (fixed upstream? then remove it from the adapter).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from hypothesis import HealthCheck, settings
from hypothesis.errors import Unsatisfiable
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from tensordict import TensorDictBase

from batchproof import profiles, registry
from batchproof.adapters import (
    Adapter,
    FrameworkMissing,
    KnownDivergence,
    Shown,
    all_adapters,
    frameworks,
    get_adapter,
    identity_adapter,
    load_adapter_file,
)
from batchproof.checks import (
    CheckStats,
    HarnessError,
    check_equivalence,
    check_error_parity,
    run_check,
)
from batchproof.compare import Mismatch
from batchproof.registry import BadCase, Candidate, Case, OpInfo
from batchproof.report import Failure, command, describe, without_explain

console = Console(width=None if Console().is_terminal else 140)


@dataclass
class KnownTally:
    """Per known divergence: how many generated inputs its predicate matched, on how many the
    target diverged from the contract, and on how many it diverged the way the divergence
    describes (the rest diverged otherwise: new divergences hiding behind a known one)."""

    matched: Counter = field(default_factory=Counter)
    diverged: Counter = field(default_factory=Counter)
    confirmed: Counter = field(default_factory=Counter)
    unsupported: int = 0
    example: dict[str, str] = field(default_factory=dict)  # smallest confirming input
    otherwise: dict[str, str] = field(default_factory=dict)  # smallest other divergence

    def record(self, known: KnownDivergence, case: Case | BadCase, shown: Shown) -> None:
        name = known.name
        self.matched[name] += 1
        if shown.what == "agreed":
            return
        self.diverged[name] += 1
        text = _short(case)
        if known.describes(shown):
            self.confirmed[name] += 1
            if name not in self.example or len(text) < len(self.example[name]):
                self.example[name] = text
        else:
            text = f"{text} -> {_first_line(str(shown))}"
            if name not in self.otherwise or len(text) < len(self.otherwise[name]):
                self.otherwise[name] = text

    def entry(self, known: KnownDivergence) -> dict[str, Any]:
        """The report's line for one known divergence (see `known_status`)."""
        name = known.name
        counts = {"matched": self.matched[name], "diverged": self.diverged[name],
                  "confirmed": self.confirmed[name]}
        return {"name": name, "kind": known.kind, **counts,
                "status": known_status(**counts), "too_broad": counts["diverged"] < counts[
                    "matched"], "example": self.example.get(name, ""),
                "otherwise": self.otherwise.get(name, ""), "doc": known.doc,
                "upstream": known.upstream}


def known_status(matched: int, diverged: int, confirmed: int) -> str:
    """`not met` (no input matched), `not reproduced` (matched, and the target agreed every
    time), `diverged otherwise` (it diverged another way than described: a new divergence),
    else `confirmed`."""
    if matched == 0:
        return "not met"
    if diverged == 0:
        return "not reproduced"
    if confirmed < diverged:
        return "diverged otherwise"
    return "confirmed"


def _short(case: Case | BadCase) -> str:
    text = repr(case)
    return text if len(text) <= 400 else text[:385] + "...(truncated)"


def _first_line(text: str) -> str:
    return (text.splitlines() or [""])[0][:200]


@dataclass
class CheckOutcome:
    adapter: str
    record: str
    check: str
    status: str  # pass | new | known | skipped | not tested | error
    examples: int = 0
    seconds: float = 0.0
    detail: str = ""
    notes: list[str] = field(default_factory=list)
    minimal: str = ""  # a failure's minimal input, as a call of the contract function
    blob: str = ""  # Hypothesis' reproduction blob of a generated failure

    def lines(self, replay: str = "") -> list[str]:
        """The failure as a person reads it (`batchproof.report`)."""
        return Failure("", self.detail, self.minimal, self.blob, self.notes).lines(replay)


@dataclass
class AdapterReport:
    adapter: str
    record: str
    target: str
    version: str
    outcomes: list[CheckOutcome]
    known: list[dict[str, Any]]
    unsupported: int
    misfit: str = ""  # why the adapter does not fit this version of the framework
    forms: list[str] = field(default_factory=list)  # the input forms the target was given
    not_provided: list[str] = field(default_factory=list)  # outputs not compared

    @property
    def new(self) -> list[CheckOutcome]:
        return [o for o in self.outcomes if o.status == "new"]

    @property
    def unexplained(self) -> list[dict[str, Any]]:
        """Known divergences whose inputs made the target diverge another way than described."""
        return [k for k in self.known if k["status"] == "diverged otherwise"]

    @property
    def errors(self) -> list[CheckOutcome]:
        """Checks batchproof could not carry out: an error of its own, or the whole adapter not
        run because it does not fit the framework's version."""
        return [o for o in self.outcomes if o.status in ("error", "not run")]

    @property
    def untested(self) -> list[CheckOutcome]:
        """Checks that ran no input against the target (never a pass)."""
        return [o for o in self.outcomes if o.status == "not tested"]


# --------------------------------------------------------------------------- the adapted record


def adapted_record(adapter: Adapter, candidate: Candidate, tally: KnownTally) -> OpInfo:
    """The adapter's record: its domain, forms and outputs, with known-divergence inputs set
    aside (counted and confirmed in `tally`)."""
    info = registry.get(adapter.record)
    forms = dict(info.forms) if adapter.forms is None else {
        name: form for name, form in info.forms.items() if name in adapter.forms}
    compare = _compare_provided(info.compare, adapter.not_provided)
    properties = [p for p in info.properties if f"property:{p.name}" not in adapter.skip]
    first = next(iter(info.forms))  # the list form, which properties and pins draw
    as_called = None if first in forms else next(iter(forms.values()))
    plain = dataclasses.replace(info, forms=forms, compare=compare, properties=properties,
                                targets=None, as_called=as_called)

    def keep(case: Case | BadCase) -> bool:
        kind = "errors" if isinstance(case, BadCase) else "valid"
        inputs = case.case if isinstance(case, BadCase) else case
        if not adapter.supports(inputs):
            tally.unsupported += 1
            return False
        matching = [k for k in adapter.known if k.concerns(kind) and k.applies(inputs)]
        if not matching:
            return True
        shown = observe(plain, case, candidate)  # counted for the divergence that explains it
        tally.record(next((k for k in matching if k.describes(shown)), matching[0]), case, shown)
        return False

    valid = (adapter.valid if adapter.valid is not None else info.valid).filter(keep)
    invalid_base = adapter.invalid if adapter.invalid is not None else info.invalid
    invalid = invalid_base.filter(keep) if invalid_base is not None else None
    pins = [pin for pin in info.pins if f"pin:{pin.name}" not in adapter.skip and keep(pin.case)]
    return dataclasses.replace(plain, valid=valid, invalid=invalid, pins=pins,
                               targets=info.targets)


def _admits(adapter: Adapter):
    """Whether an input is one the search may report: in the adapter's domain and set aside by
    no known divergence (what `keep` lets through, without counting)."""
    def admits(case: Case | BadCase) -> bool:
        kind = "errors" if isinstance(case, BadCase) else "valid"
        inputs = case.case if isinstance(case, BadCase) else case
        return adapter.supports(inputs) and not any(
            k.concerns(kind) and k.applies(inputs) for k in adapter.known)

    return admits


def _compare_provided(compare, not_provided: tuple[str, ...]):
    """The record's comparator, blind to the outputs the target does not provide (on both
    sides: a target that does produce one is not faulted for it)."""
    if not not_provided:
        return compare

    def compare_provided(expected, actual, **kwargs):
        if isinstance(expected, TensorDictBase):
            expected = expected.exclude(*not_provided)
        if isinstance(actual, TensorDictBase):
            actual = actual.exclude(*not_provided)
        compare(expected, actual, **kwargs)

    return compare_provided


def completed(candidate: Candidate, reference: Candidate, not_provided: tuple[str, ...]):
    """The target, its output completed with the oracle's values of the keys it does not
    provide, so that properties and pins that read them see the contract's: what is checked is
    how the keys the target does provide relate to them. (On bad input the oracle raises and
    nothing is completed: the target's own result or exception stands.)"""
    if not not_provided:
        return candidate

    def with_contract_outputs(*args, **kwargs):
        out = candidate(*args, **kwargs)
        if not isinstance(out, TensorDictBase):
            return out
        missing = [k for k in not_provided if k not in out.keys()]
        if not missing:
            return out
        previous = logging.root.manager.disable
        logging.disable(logging.CRITICAL)  # the oracle's warnings are not the target's
        try:
            expected = reference(*args, **kwargs)
        except Exception:  # noqa: BLE001 - bad input: nothing to complete
            return out
        finally:
            logging.disable(previous)
        if not isinstance(expected, TensorDictBase) or expected.batch_size != out.batch_size:
            return out  # another shape of batch: the comparison reports it, not a completion
        out = out.clone(recurse=False)
        for key in missing:
            if key not in expected.keys():
                continue
            if expected.is_non_tensor(key):
                out.set_non_tensor(key, expected.get_non_tensor(key))
            else:
                out.set(key, expected.get(key).to(out.device) if out.device else expected.get(key))
        return out

    return with_contract_outputs


def observe(info: OpInfo, case: Case | BadCase, candidate: Candidate) -> Shown:
    """What the target does on one input, against the contract (`Shown`)."""
    if isinstance(case, BadCase):
        try:
            check_error_parity(info, case, candidate)
        except HarnessError:
            raise
        except Mismatch as err:
            cause = err.__cause__
            if cause is None:
                return Shown("accepted", text=_first_line(str(err)))
            return Shown("raised", type(cause), text=_first_line(str(cause)))
        return Shown("agreed")
    try:
        check_equivalence(info, case, candidate)
    except HarnessError:
        raise
    except Mismatch as err:
        return Shown("differs", field=err.field, text=_first_line(str(err)))
    except Exception as err:  # noqa: BLE001 - the exception that escaped the target
        return Shown("raised", type(err), text=_first_line(str(err)))
    return Shown("agreed")


# --------------------------------------------------------------------------- running the checks


def check_adapter(adapter: Adapter, candidate: Candidate | None = None,
                  checks: list[str] | None = None,
                  max_examples: int | None = None,
                  report_multiple_bugs: bool = True,
                  replay_database: bool = True,
                  derandomize: bool = False,
                  seed: int | None = None,
                  reproduce: tuple[str, str] | None = None,
                  base_settings: settings | None = None) -> AdapterReport:
    """Run the record's checks (or the named ones) on the adapter; never raises on divergence.

    Hypothesis runs under `base_settings` (default: the loaded profile; `max_examples` overrides
    its example count). `replay_database=False` starts from fresh examples instead of replaying
    the failures saved in Hypothesis' example database (what a test of the shrunk example
    needs); `derandomize` makes the search the same on every run (a test that asserts what it
    finds needs that); `seed` and `reproduce` are `run_check`'s."""
    candidate = candidate if candidate is not None else adapter.candidate()
    base = registry.get(adapter.record)
    wanted = checks or base.check_names()
    unknown = set(wanted) - set(base.check_names())
    if unknown:
        raise ValueError(f"{base.name} has no check {sorted(unknown)}")
    candidate = completed(candidate, base.reference, adapter.not_provided)
    misfit = fit_problem(adapter, candidate)
    if misfit:  # one line for the whole adapter, not one divergence per check
        return AdapterReport(adapter.name, adapter.record, adapter.target, adapter.version(),
                             [CheckOutcome(adapter.name, adapter.record, c, "not run")
                              for c in wanted], [], 0, misfit=misfit)
    tally = KnownTally()
    info = adapted_record(adapter, candidate, tally)
    plain = dataclasses.replace(info, valid=base.valid, invalid=base.invalid, pins=base.pins)
    outcomes: list[CheckOutcome] = []
    run_names = set(info.check_names())
    search = dataclasses.replace(info, pins=[])
    start = base_settings if base_settings is not None else settings()
    quiet = settings(start,
                     suppress_health_check=[*start.suppress_health_check,
                                            HealthCheck.filter_too_much, HealthCheck.too_slow],
                     max_examples=max_examples or start.max_examples,
                     report_multiple_bugs=report_multiple_bugs,
                     derandomize=derandomize or start.derandomize,
                     deadline=None,  # tensor code has first-call warm-ups
                     print_blob=True,  # the replay line needs the failure's blob
                     phases=without_explain(start.phases),
                     **({} if replay_database else {"database": None}))
    for check in wanted:
        outcome = CheckOutcome(adapter.name, adapter.record, check, "pass")
        if check in adapter.skip:
            outcome.status, outcome.detail = "skipped", adapter.skip[check]
        elif check not in run_names:  # a pin set aside by `keep`
            outcome.status, outcome.detail = _set_aside_pin(adapter, base, check, candidate,
                                                            plain)
        else:
            stats = CheckStats()
            started = time.perf_counter()
            try:
                # pins run as their own checks; the searches start without them so that a
                # failure is Hypothesis' shrunk example, not a replay of a pin
                record = info if check.startswith("pin:") else search
                run_check(record, check, candidate, settings=quiet, stats=stats, seed=seed,
                          reproduce=reproduce, admits=_admits(adapter))
            except Unsatisfiable:
                outcome.status = "not tested"
                outcome.detail = "every generated input met a known divergence or was outside " \
                                 "the adapter's domain"
            except Exception as exc:  # noqa: BLE001 - a new divergence, reported
                failure = describe(exc, stats, base.function)
                outcome.status = "new" if failure.kind == "divergence" else "error"
                outcome.detail, outcome.notes = failure.message, failure.notes
                # a replayed failure prints no blob of its own: keep the one replayed
                outcome.minimal = failure.minimal
                outcome.blob = failure.blob or (reproduce[1] if reproduce else "")
            outcome.examples, outcome.seconds = stats.examples, time.perf_counter() - started
            if outcome.status == "pass" and stats.notes:
                outcome.detail = "; ".join(stats.notes)  # e.g. a replay that passes now
            if outcome.status == "pass" and outcome.examples == 0:
                outcome.status = "not tested"
                outcome.detail = "no example reached the target"
        outcomes.append(outcome)
    known = [tally.entry(k) for k in adapter.known]
    return AdapterReport(adapter.name, adapter.record, adapter.target, adapter.version(),
                         outcomes, known, tally.unsupported, forms=list(info.forms),
                         not_provided=list(adapter.not_provided))


def _set_aside_pin(adapter: Adapter, info: OpInfo, check: str, candidate: Candidate,
                   plain: OpInfo) -> tuple[str, str]:
    """A pin whose input is outside the adapter's domain (skipped) or matched by a known
    divergence: `known` when the target diverged the way that divergence says, `new` when it
    diverged another way, `pass` when it agreed with the contract."""
    pin = next(p for p in info.pins if f"pin:{p.name}" == check)
    kind = "errors" if isinstance(pin.case, BadCase) else "valid"
    inputs = pin.case.case if isinstance(pin.case, BadCase) else pin.case
    if not adapter.supports(inputs):
        return "skipped", "input outside the adapter's domain"
    matching = [k for k in adapter.known if k.concerns(kind) and k.applies(inputs)]
    shown = observe(plain, pin.case, candidate)
    if shown.what == "agreed":
        return "pass", f"matched {matching[0].name}, but the target agreed with the contract"
    explained = [k.name for k in matching if k.describes(shown)]
    if explained:
        return "known", ", ".join(explained)
    return "new", f"matched {matching[0].name}, but the target {shown}"


def fit_problem(adapter: Adapter, candidate: Candidate) -> str:
    """Why the adapter does not fit the installed framework, or "": the record's example and
    valid pins the adapter supports are run once, and a call that fails on its signature
    (an unexpected or missing argument, a different number of returned values) says so."""
    info = registry.get(adapter.record)
    probes = [p.case for p in info.pins if isinstance(p.case, Case)]
    probes += [info.example] if info.example is not None else []
    for case in probes:
        if not adapter.supports(case) or any(k.concerns("valid") and k.applies(case)
                                             for k in adapter.known):
            continue
        try:
            case.call(candidate)
        except (TypeError, ValueError) as err:
            if _SIGNATURE.search(str(err)):
                return f"{type(err).__name__}: {_first_line(str(err))}"
        except Exception:  # noqa: BLE001 - another failure: the checks report it
            pass
        return ""
    return ""


_SIGNATURE = re.compile(
    r"unexpected keyword argument|missing \d+ required (positional|keyword)|"
    r"takes \d+ positional arguments? but \d+ (were|was) given|got multiple values for argument|"
    r"too many values to unpack|not enough values to unpack|required keyword-only argument")


# --------------------------------------------------------------------------- selection and CLI


def select_adapters(impl: str | None, ops: list[str] | None, adapter: str | None
                    ) -> list[Adapter]:
    """The adapters `batchproof check [--impl IMPL] [--op ...] [--adapter A]` names: for a
    framework, those that fit its installed version."""
    if impl is None:  # --adapter alone: that adapter, on the function it names
        if not adapter:
            raise ValueError("give --impl (a framework or module:function) or --adapter")
        return [get_adapter(adapter)]
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
    return fitting(chosen)


def fitting(adapters: list[Adapter]) -> list[Adapter]:
    """Those of a framework's adapters made for its installed version (all, when it is not
    installed: loading then says so)."""
    installed = adapters[0].version()
    if installed in ("-", "not installed"):
        return adapters
    fit = [a for a in adapters if a.fits(installed)]
    if not fit:
        made = ", ".join(f"{a.name} ({a.versions or 'any'})" for a in adapters)
        raise ValueError(f"no adapter fits {adapters[0].distribution} {installed}; "
                         f"adapters: {made}")
    return fit


def main(args) -> int:
    """`batchproof check` (see `batchproof.cli`): 0 no new divergence, 1 a new one, 2 a usage
    error, 3 the target could not be imported or a check could not be carried out."""
    from batchproof.cli import HARNESS, UsageError, reproduce_of, run_settings

    profile = profiles.load(args.profile)
    try:
        for path in args.adapter_file:
            load_adapter_file(path)
        adapters = [scoped(a, forms=args.forms, not_provided=args.not_provided, skip=args.skip,
                           layout=args.layout, output_names=args.output_name)
                    for a in select_adapters(args.impl, args.op, args.adapter)]
    except ValueError as err:
        raise UsageError(str(err)) from None
    except FrameworkMissing as err:
        print(f"batchproof: error: {err}", file=sys.stderr)
        return HARNESS
    for chosen in adapters:
        unknown = set(args.check or ()) - set(registry.get(chosen.record).check_names())
        if unknown:
            raise UsageError(f"{chosen.record} has no check {sorted(unknown)[0]!r} "
                             "(see `batchproof list checks`)")
    reproduce = reproduce_of(args.reproduce)
    reports = []
    for chosen in adapters:
        try:
            candidate = chosen.candidate()
        except FrameworkMissing as err:  # reported as not run; the other adapters still run
            print(f"batchproof: error: {chosen.name}: {err}", file=sys.stderr)
            reports.append(AdapterReport(chosen.name, chosen.record, chosen.target,
                                         chosen.version(), [], [], 0,
                                         misfit=f"cannot be imported: {err}"))
            continue
        with console.status(f"checking {chosen.name} ({chosen.target})"):
            reports.append(check_adapter(chosen, candidate, checks=args.check,
                                         report_multiple_bugs=False, seed=args.seed,
                                         reproduce=reproduce,
                                         base_settings=run_settings(args.max_examples)))
        custom = args.impl is not None and ":" in args.impl
        print_report(reports[-1], profile, replay=replayer(
            args.impl, chosen.record, adapter=args.adapter or (None if custom else chosen.name),
            profile=args.profile, forms=args.forms, not_provided=args.not_provided,
            skip=args.skip, layout=args.layout, output_names=args.output_name,
            adapter_files=args.adapter_file))
    code = exit_code(reports)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"profile": profile, "impl": args.impl, "exit_status": code,
                       "reports": [asdict(r) for r in reports]}, handle, indent=2)
        console.print(f"report written to {args.json}", markup=False, highlight=False)
    new = sum(len(r.new) + len(r.unexplained) for r in reports)
    errors = sum(len(r.errors) for r in reports)
    colour = "red" if new or errors else "green"
    known = sum(len(r.known) for r in reports)
    untested = sum(len(r.untested) for r in reports)
    console.print(f"[{colour}]{new} new divergence(s)[/{colour}]"
                  + (f", [red]{errors} check(s) not carried out[/red]" if errors else "")
                  + (f", [yellow]{untested} check(s) NOT TESTED (no input reached the "
                     "target)[/yellow]" if untested else "")
                  + f" in {len(reports)} target(s)"
                  + (f"; {known} known divergence(s) listed above" if known else ""))
    return code


def scoped(adapter: Adapter, *, forms=None, not_provided=(), skip=(), layout=None,
           output_names=()) -> Adapter:
    """The adapter narrowed to a function that takes only `forms` (and only the `layout` given,
    for a record with a `layout` argument), does not produce the `not_provided` outputs, names
    its outputs as `output_names` says ("theirs=contract"), and is not to be run through the
    `skip` checks (or {check: why}); skipping `errors` skips every bad-input check: the
    bad-input pins too."""
    info = registry.get(adapter.record)
    if forms:
        unknown = [f for f in forms if f not in info.forms]
        if unknown:
            raise ValueError(f"{info.name} has no input form {unknown[0]!r}; its forms: "
                             f"{list(info.forms)}")
    unknown = [c for c in skip if c not in info.check_names()]
    if unknown:
        raise ValueError(f"{info.name} has no check {unknown[0]!r} (see `batchproof list "
                         "checks`)")
    renames = _renames(output_names)
    named = [*(not_provided or ()), *renames.values()]
    outputs = output_keys(info) if named else set()
    unknown = [k for k in named if outputs and k not in outputs]
    if unknown:
        raise ValueError(f"{info.name} has no output {unknown[0]!r}; its outputs: "
                         f"{', '.join(sorted(outputs))}")
    why = dict(skip) if isinstance(skip, Mapping) else {c: "skipped by the caller" for c in skip}
    if "errors" in why:  # the bad-input checks: the errors search and every bad-input pin
        why |= {f"pin:{pin.name}": f"a bad-input pin ({why['errors']})" for pin in info.pins
                if isinstance(pin.case, BadCase) and f"pin:{pin.name}" not in why}
    changes: dict[str, Any] = {}
    if forms:
        changes["forms"] = tuple(forms)
    if layout is not None:
        changes["supports"] = _with_layout(info, adapter.supports, layout)
    if renames:
        changes["wrap"] = _renamed(adapter.wrap, renames)
    return dataclasses.replace(
        adapter, skip={**adapter.skip, **why},
        not_provided=tuple(dict.fromkeys([*adapter.not_provided, *(not_provided or ())])),
        **changes)


def _with_layout(info: OpInfo, supports, layout: str):
    """`supports`, restricted to calls in `layout` (the contract's default when not passed)."""
    import inspect

    parameter = inspect.signature(info.reference).parameters.get("layout")
    if parameter is None:
        raise ValueError(f"{info.name} has no layout argument (--layout)")
    default = parameter.default

    def in_layout(case: Case) -> bool:
        return case.kwargs.get("layout", default) == layout and supports(case)

    return in_layout


def _renames(output_names) -> dict[str, str]:
    """["theirs=contract", ...] -> {"theirs": "contract"}."""
    renames = {}
    for pair in output_names or ():
        theirs, sep, contract = pair.partition("=")
        if not sep or not theirs or not contract:
            raise ValueError(f"--output-name {pair!r}: expected THEIRS=CONTRACT")
        renames[theirs] = contract
    return renames


def _renamed(wrap, renames: dict[str, str]):
    """The adapter's wrap, with the target's outputs renamed to the contract's keys; a dict of
    outputs becomes a TensorDict (batch size: the first tensor's first dimension; Python scalars
    become non-tensor entries)."""

    def renaming_wrap(function):
        candidate = wrap(function)

        def named(*args, **kwargs):
            out = candidate(*args, **kwargs)
            if isinstance(out, Mapping) and not isinstance(out, TensorDictBase):
                return as_tensordict({renames.get(k, k): v for k, v in out.items()})
            if isinstance(out, TensorDictBase):
                for theirs, contract in renames.items():
                    if theirs in out.keys():
                        out.rename_key_(theirs, contract)
            return out

        return named

    return renaming_wrap


def as_tensordict(values: Mapping[str, Any]):
    """A dict of outputs as the contract's TensorDict: tensors as entries (batch size from the
    first one), everything else as non-tensor entries."""
    from tensordict import TensorDict

    tensors = {k: v for k, v in values.items() if isinstance(v, torch.Tensor)}
    batch = [next(iter(tensors.values())).shape[0]] if tensors else []
    td = TensorDict(tensors, batch_size=batch)
    for key, value in values.items():
        if key not in tensors:
            td.set_non_tensor(key, value)
    return td


def output_keys(info: OpInfo, draws: int = 40) -> set[str]:
    """The output keys the oracle produces on the record's valid pins and on `draws`
    derandomized valid inputs (empty when its outputs are not TensorDicts)."""
    from hypothesis import Phase, given

    keys: set[str] = set()

    def collect(case: Case) -> None:
        try:
            out = case.call(info.reference)
        except Exception:  # noqa: BLE001 - e.g. a model record without its extra
            return
        if isinstance(out, TensorDictBase):
            keys.update(out.keys())

    for pin in info.pins:
        if isinstance(pin.case, Case):
            collect(pin.case)
    search = settings(max_examples=draws, derandomize=True, database=None, deadline=None,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    search(given(info.valid)(collect))()
    return keys


def exit_code(reports: list[AdapterReport]) -> int:
    """3 when a check could not be carried out or an adapter could not run, else 1 when a new
    divergence was found, else 0.
    A NOT TESTED check changes no exit status of `batchproof check` (a framework function may
    have no input left to test once its known divergences are set aside); the report and the
    summary line say it was not tested. `batchproof.check` fails on it."""
    if not reports or any(r.errors or r.misfit for r in reports):
        return 3
    return 1 if any(r.new or r.unexplained for r in reports) else 0


def replayer(impl: str | None, record: str, *, adapter: str | None = None,
             profile: str | None = None, forms=None, not_provided=(), skip=(), layout=None,
             output_names=(), adapter_files=()):
    """outcome -> the `batchproof check` command line that replays its failure alone."""
    words = ["batchproof", "check"]
    for path in adapter_files or ():
        words += ["--adapter-file", path]
    words += ["--impl", impl] if impl else []
    words += ["--adapter", adapter] if adapter else ["--op", record]
    for flag, values in (("--forms", forms or ()), ("--not-provided", not_provided or ()),
                         ("--skip", skip or ()), ("--output-name", output_names or ()),
                         ("--layout", [layout] if layout else ())):
        for value in values:
            words += [flag, value]
    if profile:
        words += ["--profile", profile]

    def replay(outcome: CheckOutcome) -> str:
        extra = ["--check", outcome.check] + (["--reproduce", outcome.blob] if outcome.blob
                                              else [])
        return command(words + extra)

    return replay


_STYLE = {"pass": "[green]PASS[/green]", "new": "[red]NEW DIVERGENCE[/red]",
          "known": "[yellow]known[/yellow]", "skipped": "[dim]skipped[/dim]",
          "not tested": "[yellow]NOT TESTED[/yellow]", "error": "[red]ERROR[/red]",
          "not run": "[red]NOT RUN[/red]"}
_KNOWN_STYLE = {"confirmed": "confirmed", "not met": "[yellow]not met (no input matched: not "
                "tested)[/yellow]", "not reproduced": "[yellow]not reproduced (matched, the "
                "target agreed every time: fixed upstream?)[/yellow]",
                "diverged otherwise": "[red]DIVERGED OTHERWISE (new)[/red]"}


def print_report(report: AdapterReport, profile: str, replay=None, console: Console = console
                 ) -> None:
    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    version = f" ({report.version})" if report.version != "-" else ""
    console.rule(f"{report.target}{version} vs {report.record}")
    if report.misfit:
        say(f"the adapter {report.adapter} does not fit {report.target}{version}: "
            f"{report.misfit}. No check was run; an adapter for this version is needed "
            "(`batchproof list adapters`).")
        return
    skipped = [o.check for o in report.outcomes if o.status == "skipped"]
    say(f"scope: input forms {', '.join(report.forms)}"
        + (f"; outputs not compared: {', '.join(report.not_provided)}"
           if report.not_provided else "")
        + (f"; skipped: {', '.join(skipped)}" if skipped else ""))
    table = Table(title=f"checks — profile={profile}; examples = inputs run against the target")
    for column in ("check", "result", "examples", "time", "detail"):
        table.add_column(column, justify="right" if column in ("examples", "time") else "left")
    for o in report.outcomes:
        detail = o.detail if o.status not in ("new", "error") else textwrap.shorten(
            o.detail.splitlines()[0], 80, placeholder=" ...")
        table.add_row(o.check, _STYLE[o.status], str(o.examples), f"{o.seconds:.1f}s",
                      escape(detail))
    console.print(table)
    if report.known:
        known = Table(title="known divergences (their inputs set aside so the search goes on; "
                            "confirmed = diverged the way described)")
        for column in ("divergence", "kind", "matched", "diverged", "confirmed", "status"):
            known.add_column(column, justify="right" if column in (
                "matched", "diverged", "confirmed") else "left")
        for k in report.known:
            status = _KNOWN_STYLE[k["status"]] + (" [yellow](too broad: matched more than "
                                                  "diverged)[/yellow]" if k["too_broad"]
                                                  and k["diverged"] else "")
            known.add_row(k["name"], k["kind"], str(k["matched"]), str(k["diverged"]),
                          str(k["confirmed"]), status)
        console.print(known)
        for k in report.known:
            say(f"  {k['name']}: {k['doc']}")
            if k["example"]:
                say(f"    smallest input confirming it: {k['example']}")
            if k["otherwise"]:
                say(f"    NEW: diverged another way than described, smallest: {k['otherwise']}")
    if report.unsupported:
        say(f"{report.unsupported} generated inputs were outside the adapter's domain (not run)")
    for o in report.outcomes:
        if o.status not in ("new", "error"):
            continue
        label = "new divergence" if o.status == "new" else "error (batchproof's own)"
        console.rule(f"[red]{label}: {o.adapter} — {o.check}")
        for line in o.lines(replay(o) if replay else ""):
            say(line)

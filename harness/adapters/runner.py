"""`batchproof check`: run a record's checks on an adapter, separating known divergences from new
ones.

    for each check of the record (minus the adapter's `skip`):
        inputs outside `adapter.supports`           -> not run (counted as unsupported)
        inputs a known divergence `applies` to      -> set aside, counted, re-run once to confirm
        every other input                           -> the ordinary check (shrunk on failure)

A failing check is a *new* divergence (exit status 1). A check whose every drawn input was set
aside (outside the domain, or a known divergence) is `not tested`: never a pass, and no change to
the exit status. A failure of batchproof itself is an `error` (exit status 3), and so is a check
that ran no example with nothing set aside (`batchproof.statuses.exit_status`: the one policy of
`verify` and `check`). A known divergence whose inputs were met but never diverged is reported as
`not reproduced` (fixed upstream, or the adapter changed: then remove it from the adapter) in its
row and counted in the summary line; `--strict` (what the framework matrix runs) makes it exit
status 1, an adapter that can no longer see its own divergence being news about the target. A
known divergence no input matched (`not met`) is untested, reported, and never fails a run.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
import textwrap
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis.errors import Unsatisfiable
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from tensordict import TensorDictBase

from batchproof import blocks, registry, terminal
from batchproof.adapters import (
    Adapter,
    AdapterError,
    Call,
    FrameworkMissing,
    KnownDivergence,
    Shown,
    all_adapters,
    frameworks,
    get_adapter,
    identity_adapter,
    within_its_signature,
)
from batchproof.adapters.scope import Scope
from batchproof.checks import (
    CheckStats,
    HarnessError,
    check_equivalence,
    check_error_parity,
    run_check,
)
from batchproof.compare import Mismatch
from batchproof.registry import BadCase, Candidate, Case, OpInfo, Pin
from batchproof.report import Failure, command, describe, without_explain
from batchproof.statuses import KnownStatus, Outcome, exit_status
from batchproof.warning_tally import SeenWarning, TalliedCall, WarningTally, summary_lines

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
    pin_errors: dict[str, BaseException] = field(default_factory=dict)  # pin -> ours, raised
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
        return KnownStatus.NOT_MET
    if diverged == 0:
        return KnownStatus.NOT_REPRODUCED
    if confirmed < diverged:
        return KnownStatus.DIVERGED_OTHERWISE
    return KnownStatus.CONFIRMED


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
    status: Outcome
    examples: int = 0
    seconds: float = 0.0
    detail: str = ""
    notes: list[str] = field(default_factory=list)
    minimal: str = ""  # a failure's minimal input, as a call of the contract function
    blob: str = ""  # Hypothesis' reproduction blob of a generated failure
    # for a new divergence, the scope option it traces to (`traces_to`): ("skip", "errors"),
    # ("layout", "left"), ("forms", "lists"), ("not_provided", "position_ids"); () for none
    traces: tuple[str, ...] = ()
    # the target's warnings during the check, each distinct one once with its count
    # (`batchproof.warning_tally`); `warnings_not_kept`: occurrences past the distinct ones kept
    warnings: list[SeenWarning] = field(default_factory=list)
    warnings_not_kept: int = 0

    def take_warnings(self, tally: WarningTally) -> None:
        self.warnings, self.warnings_not_kept = tally.seen, tally.more

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
    compared: list[str] | None = None  # the only outputs compared (None: all but not_provided)
    framework: str = ""  # the adapter's framework ("custom": a function of the contract)
    scope: Scope = field(default_factory=Scope)  # what the check was scoped to

    @property
    def new(self) -> list[CheckOutcome]:
        return [o for o in self.outcomes if o.status == Outcome.NEW]

    @property
    def unexplained(self) -> list[dict[str, Any]]:
        """Known divergences whose inputs made the target diverge another way than described."""
        return [k for k in self.known if k["status"] == KnownStatus.DIVERGED_OTHERWISE]

    @property
    def not_reproduced(self) -> list[dict[str, Any]]:
        """Known divergences whose inputs were matched and on which the target agreed with the
        contract every time: it no longer shows the divergence the adapter declares."""
        return [k for k in self.known if k["status"] == KnownStatus.NOT_REPRODUCED]

    @property
    def errors(self) -> list[CheckOutcome]:
        """Checks batchproof could not carry out: an error of its own, or the whole adapter not
        run because it does not fit the framework's version."""
        return [o for o in self.outcomes if o.status in (Outcome.ERROR, Outcome.NOT_RUN)]

    @property
    def untested(self) -> list[CheckOutcome]:
        """Checks that ran no input against the target (never a pass)."""
        return [o for o in self.outcomes if o.status == Outcome.NOT_TESTED]


# --------------------------------------------------------------------------- the adapted record


def _invalid_for(adapter: Adapter, info: OpInfo):
    """The record's invalid inputs for this adapter: all of them (one defect or two) for a
    function of the contract (`--impl module:function`, `batchproof.check`), which owes the
    reference's first error; one defect per call for a framework's function, whose order of
    checks is its own (docs/frameworks.md, "Invalid inputs")."""
    if adapter.framework == "custom" or info.invalid is None:
        return info.invalid
    return blocks.one_defect(info.invalid)


def adapter_view(adapter: Adapter) -> OpInfo:
    """The record as the adapter meets it: its input forms, its compared outputs, its
    properties (strategies and pins the record's)."""
    info = registry.get(adapter.record)
    forms = dict(info.forms) if adapter.forms is None else {
        name: form for name, form in info.forms.items() if name in adapter.forms}
    compare = _compare_provided(info.compare, adapter.not_provided, adapter.compared)
    properties = [p for p in info.properties if f"property:{p.name}" not in adapter.skip]
    first = next(iter(info.forms))  # the list form, which properties and pins draw
    as_called = None if first in forms else next(iter(forms.values()))
    return dataclasses.replace(info, forms=forms, compare=compare, properties=properties,
                               targets=None, as_called=as_called)


def adapted_record(adapter: Adapter, candidate: Candidate, tally: KnownTally) -> OpInfo:
    """The adapter's record: its domain, forms and outputs, with known-divergence inputs set
    aside (counted and confirmed in `tally`)."""
    info = registry.get(adapter.record)
    plain = adapter_view(adapter)

    def keep(case: Case | BadCase) -> bool:
        call = adapter.call_of(case)
        if not adapter.in_domain(call):
            tally.unsupported += 1
            return False
        matching = adapter.matching(call)
        if not matching:
            return True
        shown = observe(plain, case, candidate)  # counted for the divergence that explains it
        tally.record(next((k for k in matching if k.describes(shown)), matching[0]), case, shown)
        return False

    valid = (adapter.valid if adapter.valid is not None else info.valid).filter(keep)
    invalid_base = adapter.invalid if adapter.invalid is not None else _invalid_for(adapter, info)
    invalid = invalid_base.filter(keep) if invalid_base is not None else None
    pins = []
    for pin in info.pins:
        if f"pin:{pin.name}" in adapter.skip or _forms_not_taken(pin, plain):
            continue
        try:
            if keep(pin.case):
                pins.append(pin)
        except HarnessError as err:  # that pin's check reports it; the others run
            tally.pin_errors[f"pin:{pin.name}"] = err
    return dataclasses.replace(plain, valid=valid, invalid=invalid, pins=pins,
                               targets=info.targets)


def _admits(adapter: Adapter):
    """Whether an input is one the search may report: in the adapter's domain and set aside by
    no known divergence (what `keep` lets through, without counting)."""
    def admits(case: Case | BadCase) -> bool:
        call = adapter.call_of(case)
        return adapter.in_domain(call) and not adapter.matching(call)

    return admits


def _in_scope(adapter: Adapter):
    """Whether a call a property makes of the target (a metamorphic property calls it again,
    with other arguments) is one the adapter's domain admits."""
    return lambda case: adapter.in_domain(adapter.call_of(case))


def _compare_provided(compare, not_provided: tuple[str, ...],
                      compared: tuple[str, ...] | None = None):
    """The record's comparator, blind to the outputs the target does not provide (on both
    sides: a target that does produce one is not faulted for it): `not_provided`, and every
    output but `compared` when that is given."""
    if not not_provided and compared is None:
        return compare

    def provided(td):
        if not isinstance(td, TensorDictBase):
            return td
        td = td.exclude(*not_provided)
        return td if compared is None else td.exclude(
            *[key for key in td.keys() if key not in compared])

    def compare_provided(expected, actual, **kwargs):
        compare(provided(expected), provided(actual), **kwargs)

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
                  base_settings: settings | None = None,
                  device: str = "cpu") -> AdapterReport:
    """Run the record's checks (or the named ones) on the adapter; never raises on divergence.

    Hypothesis runs under `base_settings` (default: the loaded profile; `max_examples` overrides
    its example count). `replay_database=False` starts from fresh examples instead of replaying
    the failures saved in Hypothesis' example database (what a test of the shrunk example
    needs); `derandomize` makes the search the same on every run (a test that asserts what it
    finds needs that); `seed`, `reproduce` and `device` (where the checked inputs are made) are
    `run_check`'s. The inputs set aside for a known divergence are confirmed on the CPU."""
    candidate = candidate if candidate is not None else adapter.candidate()
    adapter = within_its_signature(adapter, candidate)  # no routes for a function without them
    base = registry.get(adapter.record)
    wanted = checks or base.check_names()
    unknown = set(wanted) - set(base.check_names())
    if unknown:
        raise ValueError(f"{base.name} has no check {sorted(unknown)}")
    if device not in base.devices:
        raise ValueError(f"{base.name} is checked on {list(base.devices)}, not on {device}")
    # every call of the target counts its warnings, handed to each check's outcome in turn
    candidate = TalliedCall(completed(candidate, base.reference, adapter.not_provided))
    misfit = fit_problem(adapter, candidate)
    if misfit:  # one line for the whole adapter, not one divergence per check
        not_run = [CheckOutcome(adapter.name, adapter.record, c, Outcome.NOT_RUN)
                   for c in wanted]
        not_run[0].take_warnings(candidate.take())  # the probe's
        return AdapterReport(adapter.name, adapter.record, adapter.target, adapter.version(),
                             not_run, [], 0, misfit=misfit,
                             framework=adapter.framework, scope=adapter.scope)
    tally = KnownTally()
    info = adapted_record(adapter, candidate, tally)
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
        outcome = CheckOutcome(adapter.name, adapter.record, check, Outcome.PASS)
        if check in adapter.skip:
            outcome.status, outcome.detail = Outcome.SKIPPED, adapter.skip[check]
        elif check in tally.pin_errors:  # a predicate or the wrapper failed on the pin
            outcome.status, outcome.detail = Outcome.ERROR, _error_text(tally.pin_errors[check])
        elif check not in run_names:  # a pin set aside by `keep`
            try:
                outcome.status, outcome.detail = _set_aside_pin(adapter, base, check,
                                                                candidate, info)
            except HarnessError as err:
                outcome.status, outcome.detail = Outcome.ERROR, _error_text(err)
        else:
            stats = CheckStats()
            started = time.perf_counter()
            try:
                # pins run as their own checks; the searches start without them so that a
                # failure is Hypothesis' shrunk example, not a replay of a pin
                record = info if check.startswith("pin:") else search
                run_check(record, check, candidate, settings=quiet, stats=stats, seed=seed,
                          reproduce=reproduce, admits=_admits(adapter),
                          in_scope=_in_scope(adapter), device=device)
            except Unsatisfiable:
                outcome.status = Outcome.NOT_TESTED
                outcome.detail = "every generated input met a known divergence or was outside " \
                                 "the adapter's domain"
            except Exception as exc:  # noqa: BLE001 - a new divergence, reported
                failure = describe(exc, stats, base.function)
                outcome.status = Outcome.NEW if failure.kind == "divergence" else Outcome.ERROR
                outcome.detail, outcome.notes = failure.message, failure.notes
                if outcome.status == Outcome.NEW:
                    outcome.traces = traces_to(base, check, stats.failing, "\n".join(
                        [failure.message, *failure.notes]))
                # a replayed failure prints no blob of its own: keep the one replayed
                outcome.minimal = failure.minimal
                outcome.blob = failure.blob or (reproduce[1] if reproduce else "")
            outcome.examples, outcome.seconds = stats.examples, time.perf_counter() - started
            if outcome.status == Outcome.PASS and stats.notes:
                outcome.detail = "; ".join(stats.notes)  # e.g. a replay that passes now
            if outcome.status == Outcome.PASS and outcome.examples == 0:  # nothing set aside
                outcome.status = Outcome.ERROR
                outcome.detail = "no example reached the target, and none was set aside: " \
                                 "batchproof's own failure"
        outcome.take_warnings(candidate.take())  # the first check's: the probe's too
        outcomes.append(outcome)
    known = [tally.entry(k) for k in adapter.known]
    return AdapterReport(adapter.name, adapter.record, adapter.target, adapter.version(),
                         outcomes, known, tally.unsupported, forms=list(info.forms),
                         not_provided=list(adapter.not_provided), framework=adapter.framework,
                         compared=None if adapter.compared is None else list(adapter.compared),
                         scope=adapter.scope)


_FORM = re.compile(r"on the '([^']+)' input form")
_MISSING = re.compile(r"keys differ: missing \[([^\]]*)\], unexpected \[\]")


def traces_to(info: OpInfo, check: str, failing: Case | BadCase | None,
              detail: str) -> tuple[str, ...]:
    """The scope option a new divergence traces to, when it traces to one: a bad-input check
    (`("skip", "errors")`: the function does not validate as the contract does), a call in
    another layout than the contract's default (`("layout", default)`), an input form other
    than the lists (`("forms", first form)`), outputs it does not produce
    (`("not_provided", key, ...)`); else ()."""
    pin = next((p for p in info.pins if f"pin:{p.name}" == check), None)
    if check == "errors" or (pin is not None and isinstance(pin.case, BadCase)):
        return ("skip", "errors")
    default = _layout_default(info)
    # the property that failed: the check's, or the one a pin names in its failure
    props = [p for p in info.properties if check == f"property:{p.name}"
             or (pin is not None and re.search(rf"\bproperty {re.escape(p.name)}\b", detail))]
    case = pin.case if pin is not None else failing
    if default is not None and (
            any("layout" in p.varies for p in props)
            or (isinstance(case, Case) and Call.of(case, info.reference).arg("layout",
                                                                             default) != default)):
        return ("layout", default)
    form = _FORM.search(detail)
    first = next(iter(info.forms))
    if form and form.group(1) != first:
        return ("forms", first)
    missing = _MISSING.search(detail)
    if missing and missing.group(1):
        return ("not_provided", *[k.strip(" '\"") for k in missing.group(1).split(",")])
    return ()


def _layout_default(info: OpInfo) -> str | None:
    import inspect

    parameter = inspect.signature(info.reference).parameters.get("layout")
    return None if parameter is None else parameter.default


def scope_hint(reports: list[AdapterReport], impl: str | None, *,
               adapter: str | None = None, profile: str | None = None) -> str:
    """When every new divergence of a function that follows a contract (`--impl
    module:function`, `batchproof.check`) traces to an option it may not support
    (`traces_to`), which flags leave those out, and the command with them; else ""."""
    hints: dict[tuple[str, ...], int] = {}
    for report in reports:
        if report.framework != "custom":
            continue  # a framework adapter's divergences are documented, not scoped away
        for outcome in report.new:
            if not outcome.traces:
                return ""
            hints[outcome.traces] = hints.get(outcome.traces, 0) + 1
    if not hints:
        return ""
    said = {"skip": "does not raise the contract's exception on bad input (if it is not meant "
                    "to validate: --skip errors)",
            "layout": "is called in another layout than {0!r} (if it builds only that one: "
                      "--layout {0})",
            "forms": "is given another input form than {0!r} (if it takes only that one: "
                     "--forms {0})",
            "not_provided": "does not produce {0} (if it is not meant to: --not-provided "
                            "KEY)"}
    lines = ["Every new divergence above traces to an option the function may not support:"]
    scope = reports[0].scope
    for traces, count in hints.items():
        option, *values = traces
        lines.append(f"  {count} check(s): it " + said[option].format(", ".join(values)))
        scope = scope.widened(**{
            "skip": ["errors"] if option == "skip" else (),
            "not_provided": values if option == "not_provided" else (),
            **({"layout": values[0]} if option == "layout" else {}),
            **({"forms": (values[0],)} if option == "forms" else {})})
    report = reports[0]
    chosen = Adapter(report.adapter, "custom", report.record, report.target, wrap=lambda f: f)
    words = command_words(impl, chosen, adapter=adapter, profile=profile, scope=scope)
    lines.append("To check what it does support: " + command(["batchproof", "check", *words]))
    return "\n".join(lines)


def _forms_not_taken(pin: Pin, view: OpInfo) -> list[str]:
    """The input forms `pin`'s case is written in that the target is not given (`view.forms`,
    the adapter's): a pin of tensor rows is not for a target that takes lists only."""
    return [form for form in pin.forms if form not in view.forms]


def _error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def _set_aside_pin(adapter: Adapter, info: OpInfo, check: str, candidate: Candidate,
                   plain: OpInfo) -> tuple[str, str]:
    """A pin whose input is outside the adapter's domain (skipped) or matched by a known
    divergence: `known` when the target diverged the way that divergence says, `new` when it
    diverged another way, `pass` when it agreed with the contract. `info` has the record's pins;
    `plain` is the record as the adapter meets it (its forms and comparator: `observe`)."""
    pin = next(p for p in info.pins if f"pin:{p.name}" == check)
    if missing := _forms_not_taken(pin, plain):
        return Outcome.SKIPPED, f"input in forms the target is not given ({', '.join(missing)})"
    call = adapter.call_of(pin.case)
    if not adapter.in_domain(call):
        return Outcome.SKIPPED, "input outside the adapter's domain"
    matching = adapter.matching(call)
    shown = observe(plain, pin.case, candidate)
    if shown.what == "agreed":
        return Outcome.PASS, f"matched {matching[0].name}, but the target agreed with the contract"
    explained = [k.name for k in matching if k.describes(shown)]
    if explained:
        return Outcome.KNOWN, ", ".join(explained)
    return Outcome.NEW, f"matched {matching[0].name}, but the target {shown}"


def fit_problem(adapter: Adapter, candidate: Candidate) -> str:
    """Why the adapter does not fit the installed framework, or "": the record's example and
    valid pins the adapter supports are run once, and a call that fails on its signature
    (an unexpected or missing argument, a different number of returned values) says so."""
    info = registry.get(adapter.record)
    probes = [p.case for p in info.pins if isinstance(p.case, Case)]
    probes += [info.example] if info.example is not None else []
    for case in probes:
        try:  # a predicate or the wrapper that fails here: the checks report it
            call = adapter.call_of(case)
            if not adapter.in_domain(call) or adapter.matching(call):
                continue
            case.call(candidate)
        except Exception as err:  # noqa: BLE001 - a signature's failure, or the checks report it
            # the target's, or the wrapper's own (unpacking another number of outputs)
            cause = err.__cause__ if isinstance(err, AdapterError) else err
            if isinstance(cause, (TypeError, ValueError)) and _SIGNATURE.search(str(cause)):
                return f"{type(cause).__name__}: {_first_line(str(cause))}"
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
    chosen = fitting(chosen)
    return chosen if adapter else with_their_needs(chosen)


def with_their_needs(adapters: list[Adapter]) -> list[Adapter]:
    """Those whose `needs` are installed; each one left out is named on stderr (not run, not a
    failure: the framework runs without that optional dependency too). All left out is a
    usage error."""
    kept = []
    for chosen in adapters:
        missing = chosen.missing_needs()
        if missing:
            print(f"batchproof: note: {chosen.name} not run: it needs {', '.join(missing)}, "
                  f"not installed beside {chosen.distribution} (docs/frameworks.md)",
                  file=sys.stderr)
        else:
            kept.append(chosen)
    if not kept:
        raise ValueError(f"every selected adapter needs what is not installed: "
                         f"{sorted({n for a in adapters for n in a.missing_needs()})}")
    return kept


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


def run_adapter(chosen: Adapter, scope: Scope, **options: Any) -> AdapterReport:
    """One adapter's report; batchproof's own failure while checking it (the import of the
    framework, or any exception of batchproof's) is reported for that adapter, and the others
    still run."""
    def failed(why: str, misfit: str = "") -> AdapterReport:
        wanted = [c for c in (scope.checks or registry.get(chosen.record).check_names())
                  if c in registry.get(chosen.record).check_names()]
        outcomes = [] if misfit else [CheckOutcome(chosen.name, chosen.record, c, Outcome.ERROR,
                                                   detail=why) for c in wanted]
        return AdapterReport(chosen.name, chosen.record, chosen.target, chosen.version(),
                             outcomes, [], 0, misfit=misfit, framework=chosen.framework,
                             scope=chosen.scope)

    try:
        candidate = chosen.candidate()
    except FrameworkMissing as err:  # reported as not run; the other adapters still run
        print(f"batchproof: error: {chosen.name}: {err}", file=sys.stderr)
        return failed(str(err), misfit=f"cannot be imported: {err}")
    checks = [c for c in scope.checks or () if c in registry.get(chosen.record).check_names()]
    try:
        with terminal.status(console, f"checking {chosen.name} ({chosen.target})"):
            return check_adapter(chosen, candidate, checks=checks or None,
                                 report_multiple_bugs=False, **options)
    except Exception as err:  # noqa: BLE001 - batchproof's own failure, reported as such
        return failed(f"batchproof failed while checking this adapter: "
                      f"{type(err).__name__}: {err}")


def summary_counts(reports: list[AdapterReport]) -> dict[str, int]:
    """What the summary line counts (and `check --json` writes as "summary"): new divergences
    (a known divergence that diverged otherwise is one), checks not carried out, checks NOT
    TESTED, known divergences listed, and of those the ones not reproduced, over `targets`
    reports."""
    return {"new": sum(len(r.new) + len(r.unexplained) for r in reports),
            "errors": sum(len(r.errors) for r in reports),
            "not_tested": sum(len(r.untested) for r in reports),
            "known": sum(len(r.known) for r in reports),
            "not_reproduced": sum(len(r.not_reproduced) for r in reports),
            "targets": len(reports)}


def print_summary(reports: list[AdapterReport], strict: bool = False) -> None:
    """The closing line: what the exit status is made of. A known divergence not reproduced is
    counted there (and named on the next line), in red under `strict` (exit 1)."""
    counts = summary_counts(reports)
    new, errors, stale = counts["new"], counts["errors"], counts["not_reproduced"]
    colour = "red" if new or errors or (strict and stale) else "green"
    stale_colour = "red" if strict else "yellow"
    console.print(f"[{colour}]{new} new divergence(s)[/{colour}]"
                  + (f", [red]{errors} check(s) not carried out (batchproof's own failure: "
                     "exit 3)[/red]" if errors else "")
                  + (f", [yellow]{counts['not_tested']} check(s) NOT TESTED (no input reached "
                     "the target)[/yellow]" if counts["not_tested"] else "")
                  + f" in {counts['targets']} target(s)"
                  + (f"; {counts['known']} known divergence(s) listed above" if counts["known"]
                     else "")
                  + (f", [{stale_colour}]{stale} NOT REPRODUCED"
                     + (" (--strict: exit 1)" if strict else "") + f"[/{stale_colour}]"
                     if stale else ""))
    if stale:
        names = ", ".join(f"{r.adapter}: {k['name']}" for r in reports for k in r.not_reproduced)
        console.print(f"not reproduced (its inputs were matched and the target agreed with the "
                      f"contract every time: fixed upstream, or the adapter changed?): {names}"
                      + ("" if strict else "; `--strict` fails on it"),
                      markup=False, highlight=False, soft_wrap=True)


def exit_code(reports: list[AdapterReport], strict: bool = False) -> int:
    """The one exit policy (`batchproof.statuses.exit_status`) over every check of every report;
    an adapter that does not fit counts as batchproof's failure, a known divergence that
    diverged another way as a divergence, and under `strict` (`check --strict`) so does a known
    divergence not reproduced (its inputs matched, the target agreed every time). A known
    divergence not met (no input matched) changes nothing: it was not tested, and says so."""
    return exit_status([o.status for r in reports for o in r.outcomes],
                       ours=any(r.misfit for r in reports),
                       diverged=any(r.unexplained or (strict and r.not_reproduced)
                                    for r in reports))


def replayer(impl: str | None, chosen: Adapter, *, adapter: str | None = None,
             profile: str | None = None, scope: Scope | None = None, device: str = "cpu"):
    """outcome -> the `batchproof check` command line that replays its failure alone, in the
    scope the adapter was narrowed to (`chosen.scope`, or `scope`)."""
    words = ["batchproof", "check", *command_words(impl, chosen, adapter=adapter,
                                                   profile=profile, scope=scope, device=device)]

    def replay(outcome: CheckOutcome) -> str:
        extra = ["--check", outcome.check] + (["--reproduce", outcome.blob] if outcome.blob
                                              else [])
        return command(words + extra)

    return replay


def command_words(impl: str | None, chosen: Adapter, *, adapter: str | None = None,
                  profile: str | None = None, scope: Scope | None = None,
                  device: str = "cpu") -> list[str]:
    """`batchproof check`'s arguments that check `chosen` again, in its scope."""
    scope = scope if scope is not None else chosen.scope
    flags = scope.words()
    files = flags[:2 * len(scope.adapter_files)]
    words = [*files, *(["--impl", impl] if impl else [])]
    words += ["--adapter", adapter] if adapter else ["--op", chosen.record]
    words += flags[len(files):]
    words += ["--device", device] if device != "cpu" else []
    return words + (["--profile", profile] if profile else [])


def print_warnings(report: AdapterReport, say) -> None:
    """The target's warnings, per check: each distinct one on one line with its count and
    first location (`--json` has them as fields)."""
    for line in summary_lines([(o.check, o.warnings, o.warnings_not_kept)
                               for o in report.outcomes]):
        say(line)


_STYLE = {Outcome.PASS: "[green]PASS[/green]", Outcome.NEW: "[red]NEW DIVERGENCE[/red]",
          Outcome.KNOWN: "[yellow]known[/yellow]", Outcome.SKIPPED: "[dim]skipped[/dim]",
          Outcome.NOT_TESTED: "[yellow]NOT TESTED[/yellow]", Outcome.ERROR: "[red]ERROR[/red]",
          Outcome.NOT_RUN: "[red]NOT RUN[/red]"}
_KNOWN_STYLE = {KnownStatus.CONFIRMED: "confirmed",
                KnownStatus.NOT_MET: "[yellow]not met (no input matched: not "
                "tested)[/yellow]", KnownStatus.NOT_REPRODUCED: "[yellow]not reproduced (matched, the "
                "target agreed every time: fixed upstream?)[/yellow]",
                KnownStatus.DIVERGED_OTHERWISE: "[red]DIVERGED OTHERWISE (new)[/red]"}


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
    skipped = [o.check for o in report.outcomes if o.status == Outcome.SKIPPED]
    say(f"scope: input forms {', '.join(report.forms)}"
        + (f"; outputs not compared: {', '.join(report.not_provided)}"
           if report.not_provided else "")
        + (f"; outputs compared: {', '.join(report.compared)} only"
           if report.compared is not None else "")
        + (f"; skipped: {', '.join(skipped)}" if skipped else ""))
    table = Table(title=f"checks — profile={profile}; examples = inputs run against the target")
    for column in ("check", "result", "examples", "time", "detail"):
        table.add_column(column, justify="right" if column in ("examples", "time") else "left")
    for o in report.outcomes:
        detail = o.detail if o.status not in (Outcome.NEW, Outcome.ERROR) else textwrap.shorten(
            next(iter(o.detail.splitlines()), ""), 80, placeholder=" ...")
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
    print_warnings(report, say)
    for o in report.outcomes:
        if o.status not in (Outcome.NEW, Outcome.ERROR):
            continue
        label = "new divergence" if o.status == Outcome.NEW else "error (batchproof's own)"
        console.rule(f"[red]{label}: {o.adapter} — {o.check}")
        for line in o.lines(replay(o) if replay else ""):
            say(line)

"""The adapter check runner (`batchproof.adapters.runner`): a known divergence's tally and
status, the adapted record (domain, forms, outputs compared), what a target did on one input,
the report's outcomes, the selection of adapters, the summary line and the printed report
(docs/frameworks.md, docs/checking.md).

Fast and in-process: stand-in adapters of `balance.karmarkar_karp` checked on a few examples,
and reports built by hand. The killers of `batchproof mutate --mutmut --harness
adapters/runner` (with `tests/test_verdict.py`, the exit policy over many reports).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from types import SimpleNamespace

import hypothesis
import pytest
import torch
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.database import InMemoryExampleDatabase
from rich.console import Console
from tensordict import TensorDict

from batchproof import registry
from batchproof.adapters import (
    Adapter,
    AdapterError,
    FrameworkMissing,
    KnownDivergence,
    Shown,
    identity_adapter,
    runner,
)
from batchproof.adapters.runner import AdapterReport, CheckOutcome, KnownTally
from batchproof.adapters.scope import Scope
from batchproof.checks import HarnessError
from batchproof.compare import Mismatch
from batchproof.ops.balance import bad_partition_cases
from batchproof.reference.balance import karmarkar_karp
from batchproof.registry import BadCase, Case, Pin
from batchproof.report import Failure
from batchproof.statuses import KnownStatus, Outcome
from batchproof.warning_tally import SeenWarning, WarningTally

RECORD = "balance.karmarkar_karp"
REFERENCE = "batchproof.reference.balance:karmarkar_karp"
FEW = {"max_examples": 5, "derandomize": True, "replay_database": False}


def _verl_like(values, k, *, equal_size=False):
    """The contract, except that k > n is refused with `assert`."""
    assert len(values) >= k, "number of items < k_partitions"
    return karmarkar_karp(values, k, equal_size=equal_size)


def _key_error(values, k, *, equal_size=False):
    """Diverges on k > n, but with KeyError."""
    if isinstance(k, int) and k > len(values):
        raise KeyError(k)
    return karmarkar_karp(values, k, equal_size=equal_size)


def _off_by_one(values, k, *, equal_size=False):
    """A new divergence on every valid input: one partition too many."""
    return karmarkar_karp(values, k, equal_size=equal_size) + [[]]


def _k_over_n(call) -> bool:
    values, k = call.args[:2]
    return isinstance(values, list) and isinstance(k, int) and k > len(values)


K_OVER_N = KnownDivergence("k_over_n", _k_over_n, kind="errors", raises=AssertionError,
                           doc="k > n raises AssertionError")
STAND_IN = Adapter(name="stand_in.kk", framework="stand_in", record=RECORD, target=REFERENCE,
                   wrap=lambda fn: fn, forms=("lists",), known=(K_OVER_N,),
                   invalid=bad_partition_cases())


def _statuses(report: AdapterReport) -> dict[str, str]:
    return {o.check: o.status for o in report.outcomes}


# --------------------------------------------------------------------------- known divergences


@pytest.mark.parametrize(("counts", "status"), [
    ((0, 0, 0), KnownStatus.NOT_MET),
    ((1, 0, 0), KnownStatus.NOT_REPRODUCED),
    ((5, 0, 0), KnownStatus.NOT_REPRODUCED),
    ((5, 2, 1), KnownStatus.DIVERGED_OTHERWISE),
    ((5, 2, 0), KnownStatus.DIVERGED_OTHERWISE),
    ((5, 2, 2), KnownStatus.CONFIRMED),
    ((1, 1, 1), KnownStatus.CONFIRMED),
])
def test_known_status(counts, status) -> None:
    assert runner.known_status(*counts) == status


def _long_case(length: int) -> Case:
    """A case whose repr is exactly `length` characters."""
    base = len(repr(Case(("",))))
    return Case(("x" * (length - base),))


def test_a_case_is_shown_whole_up_to_400_characters_then_cut() -> None:
    assert runner._short(_long_case(400)) == repr(_long_case(400))
    cut = runner._short(_long_case(401))
    assert cut == repr(_long_case(401))[:385] + "...(truncated)"


def test_first_line() -> None:
    assert runner._first_line("one\ntwo") == "one"
    assert runner._first_line("") == ""
    assert runner._first_line("y" * 250) == "y" * 200


def test_the_tally_counts_matched_diverged_and_confirmed() -> None:
    tally = KnownTally()
    raised = Shown("raised", AssertionError, text="no")
    tally.record(K_OVER_N, Case(([1], 3)), Shown("agreed"))
    tally.record(K_OVER_N, Case(([1, 2], 3)), raised)
    tally.record(K_OVER_N, Case(([1], 3)), raised)
    tally.record(K_OVER_N, Case(([2], 3)), raised)  # as short: the first smallest stays
    tally.record(K_OVER_N, Case(([1, 2, 3], 9)), Shown("raised", KeyError, text="9\nmore"))
    tally.record(K_OVER_N, Case(([1], 9)), Shown("raised", KeyError, text="8"))
    tally.record(K_OVER_N, Case(([2], 9)), Shown("raised", KeyError, text="7"))
    assert tally.entry(K_OVER_N) == {
        "name": "k_over_n", "kind": "errors", "matched": 7, "diverged": 6, "confirmed": 3,
        "status": KnownStatus.DIVERGED_OTHERWISE, "too_broad": True,
        "example": repr(Case(([1], 3))),
        "otherwise": f"{Case(([1], 9))!r} -> raised KeyError: 8",
        "doc": "k > n raises AssertionError", "upstream": ""}


def test_an_entry_of_a_divergence_never_met() -> None:
    known = dataclasses.replace(K_OVER_N, upstream="https://example.org/issue")
    entry = KnownTally().entry(known)
    assert entry == {"name": "k_over_n", "kind": "errors", "matched": 0, "diverged": 0,
                     "confirmed": 0, "status": KnownStatus.NOT_MET, "too_broad": False,
                     "example": "", "otherwise": "", "doc": "k > n raises AssertionError",
                     "upstream": "https://example.org/issue"}


def test_the_longer_example_is_replaced_by_a_shorter_one() -> None:
    tally = KnownTally()
    tally.record(K_OVER_N, Case(([1, 2], 3)), Shown("raised", AssertionError))
    tally.record(K_OVER_N, Case(([1], 3)), Shown("raised", AssertionError))
    tally.record(K_OVER_N, Case(([1, 2], 9)), Shown("accepted"))
    tally.record(K_OVER_N, Case(([1], 9)), Shown("accepted"))
    entry = tally.entry(K_OVER_N)
    assert entry["example"] == repr(Case(([1], 3)))
    assert entry["otherwise"] == f"{Case(([1], 9))!r} -> accepted the bad input"
    assert not entry["too_broad"]


# --------------------------------------------------------------------------- the report


def _outcome(status: Outcome, check: str = "c") -> CheckOutcome:
    return CheckOutcome("a", RECORD, check, status)


def _known(status: KnownStatus, name: str = "k") -> dict:
    return {"name": name, "kind": "errors", "matched": 1, "diverged": 1, "confirmed": 1,
            "status": status, "too_broad": False, "example": "", "otherwise": "", "doc": "d",
            "upstream": ""}


def _report(outcomes=(), known=(), adapter="a", version="-", unsupported=0,
            **changes) -> AdapterReport:
    return AdapterReport(adapter, RECORD, "m:f", version, list(outcomes), list(known),
                         unsupported, **changes)


def test_the_reports_groups() -> None:
    outcomes = [_outcome(s, f"c{i}") for i, s in enumerate(Outcome)]
    known = [_known(s, f"k{i}") for i, s in enumerate(KnownStatus)]
    report = _report(outcomes, known)
    by_status = {o.status: o for o in outcomes}
    assert report.new == [by_status[Outcome.NEW]]
    assert report.errors == [by_status[Outcome.ERROR], by_status[Outcome.NOT_RUN]]
    assert report.untested == [by_status[Outcome.NOT_TESTED]]
    assert [k["status"] for k in report.unexplained] == [KnownStatus.DIVERGED_OTHERWISE]
    assert [k["status"] for k in report.not_reproduced] == [KnownStatus.NOT_REPRODUCED]


def test_an_outcomes_lines_are_its_failure() -> None:
    outcome = CheckOutcome("a", RECORD, "errors", Outcome.NEW, detail="it raised",
                           minimal="karmarkar_karp([0], 2)", blob="AAA", notes=["a note"])
    assert outcome.lines("batchproof check x") == Failure(
        "divergence", "it raised", "karmarkar_karp([0], 2)", "AAA", ["a note"]).lines(
        "batchproof check x")
    assert outcome.lines() == ["it raised", "a note", "minimal case: karmarkar_karp([0], 2)"]


def test_an_outcome_takes_the_tallys_warnings() -> None:
    tally = WarningTally(limit=1)
    for message in ("w", "other", "other"):
        tally.show(message, UserWarning, "f.py", 1)
    outcome = _outcome(Outcome.PASS)
    outcome.take_warnings(tally)
    assert [(w.message, w.count) for w in outcome.warnings] == [("w", 1)]
    assert outcome.warnings_not_kept == 2


# --------------------------------------------------------------------------- the adapted record


def test_a_custom_function_is_given_every_invalid_input_a_framework_one_defect() -> None:
    info = registry.get("trainer.required_multiple")
    custom = identity_adapter(info.name, "m:f")
    framework = dataclasses.replace(custom, framework="stand_in")
    assert runner._invalid_for(custom, info) is info.invalid
    one = runner._invalid_for(framework, info)
    assert one is not info.invalid and one is not None
    empty = dataclasses.replace(info, invalid=None)
    assert runner._invalid_for(framework, empty) is None
    assert runner._invalid_for(custom, empty) is None


def test_the_adapters_view_of_the_record() -> None:
    info = registry.get(RECORD)
    skip = dataclasses.replace(STAND_IN, skip={"property:partition": "not its contract"})
    view = runner.adapter_view(skip)
    assert list(view.forms) == ["lists"]
    assert [p.name for p in view.properties] == [p.name for p in info.properties
                                                if p.name != "partition"]
    assert view.targets is None and view.as_called is None
    assert view.pins == info.pins and view.valid is info.valid
    every = runner.adapter_view(dataclasses.replace(STAND_IN, forms=None))
    assert list(every.forms) == list(info.forms) and every.as_called is None
    second = list(info.forms)[1]
    other = runner.adapter_view(dataclasses.replace(STAND_IN, forms=(second,)))
    assert list(other.forms) == [second] and other.as_called is info.forms[second]
    assert view.compare is info.compare  # every output compared


def test_the_adapted_record_sets_inputs_aside() -> None:
    info = registry.get(RECORD)
    tally = KnownTally()
    adapted = runner.adapted_record(STAND_IN, _verl_like, tally)
    names = [p.name for p in adapted.pins]
    assert "k_greater_than_n" not in names  # matched: set aside, confirmed
    assert names == [p.name for p in info.pins if p.name != "k_greater_than_n"]
    assert tally.matched["k_over_n"] == tally.confirmed["k_over_n"] == 1
    assert adapted.targets == info.targets and adapted.invalid is not None
    skipped = dataclasses.replace(STAND_IN, skip={"pin:zeros_and_ties": "no"},
                                  supports=lambda call: len(call.args[0]) != 6)
    tally = KnownTally()
    names = [p.name for p in runner.adapted_record(skipped, _verl_like, tally).pins]
    assert "zeros_and_ties" not in names and "spec_example_100_and_ones_equal" not in names
    assert tally.unsupported == 1  # the six-value pin that is not skipped


def test_a_predicate_that_raises_on_a_pin_is_that_pins_error() -> None:
    def raising(call):
        if call.args[0] == [3, 1]:
            raise RuntimeError("boom")
        return False

    broken = dataclasses.replace(STAND_IN, known=(dataclasses.replace(K_OVER_N,
                                                                      applies=raising),))
    tally = KnownTally()
    runner.adapted_record(broken, _verl_like, tally)
    assert list(tally.pin_errors) == ["pin:k_greater_than_n"]
    report = runner.check_adapter(broken, _verl_like, checks=["pin:k_greater_than_n",
                                                              "pin:zeros_and_ties"], **FEW)
    first, second = report.outcomes
    assert first.status == Outcome.ERROR and first.detail.startswith("PredicateError: ")
    assert "boom" in first.detail and second.status == Outcome.PASS


def test_the_adapters_own_strategies_replace_the_records() -> None:
    seen = []

    def supports(call):
        seen.append(call.args)
        return True

    own = dataclasses.replace(STAND_IN, supports=supports, valid=st.just(Case(([7, 7], 2))),
                              invalid=st.just(BadCase(Case(([7], 5)), ValueError, "k > n")))
    report = runner.check_adapter(own, _verl_like, checks=["equivalence"], **FEW)
    assert ([7, 7], 2) in seen and ([7], 5) not in seen
    assert _statuses(report) == {"equivalence": Outcome.PASS}
    report = runner.check_adapter(own, _verl_like, checks=["errors"], **FEW)
    assert ([7], 5) in seen  # set aside as the known divergence
    assert _statuses(report) == {"errors": Outcome.NOT_TESTED}
    assert report.known[0]["matched"] > 0 and report.known[0]["confirmed"] > 0


def test_admits_and_in_scope() -> None:
    narrow = dataclasses.replace(STAND_IN, supports=lambda call: call.args[1] != 1)
    admits, in_scope = runner._admits(narrow), runner._in_scope(narrow)
    assert admits(Case(([1, 2], 2))) and in_scope(Case(([1, 2], 2)))
    assert not admits(Case(([1, 2], 1))) and not in_scope(Case(([1, 2], 1)))
    assert not admits(BadCase(Case(([1], 3)), ValueError, "k > n"))  # a known divergence's
    assert in_scope(BadCase(Case(([1], 3)), ValueError, "k > n"))


# --------------------------------------------------------------------------- outputs compared


def _td(**values) -> TensorDict:
    return TensorDict({k: torch.tensor(v) for k, v in values.items()}, batch_size=[])


def _seen_by(compare_of):
    seen = []
    compare = compare_of(lambda e, a, **kw: seen.append((sorted(e.keys()), sorted(a.keys()),
                                                         kw)))
    return seen, compare


def test_the_comparator_is_blind_to_outputs_not_provided() -> None:
    plain = object()
    assert runner._compare_provided(plain, ()) is plain
    seen, compare = _seen_by(lambda c: runner._compare_provided(c, ("b",)))
    compare(_td(a=1, b=2, c=3), _td(a=1, c=3), allow_device=True)
    assert seen == [(["a", "c"], ["a", "c"], {"allow_device": True})]
    seen, compare = _seen_by(lambda c: runner._compare_provided(c, (), ("a",)))
    compare(_td(a=1, b=2, c=3), _td(a=1, b=2))
    assert seen == [(["a"], ["a"], {})]
    seen, compare = _seen_by(lambda c: runner._compare_provided(c, ("c",), ("a", "c")))
    compare(_td(a=1, b=2, c=3), _td(a=1, c=3))
    assert seen == [(["a"], ["a"], {})]
    got = []
    compare = runner._compare_provided(lambda e, a: got.append((e, a)), ("b",))
    compare([1], (2,))
    assert got == [([1], (2,))]


def _reference(*args, **kwargs):
    logging.getLogger("batchproof.test").warning("the oracle's warning")
    if kwargs.get("bad"):
        raise ValueError("bad")
    if kwargs.get("other"):
        return TensorDict({"a": torch.zeros(3)}, batch_size=[3])
    if kwargs.get("plain"):
        return [1]
    td = _td(a=1, b=2, c=3)
    td.set_non_tensor("n", "text")
    return td


def test_outputs_not_provided_are_completed_with_the_contracts() -> None:
    def candidate(*args, **kwargs):
        return kwargs.get("out", _td(a=9))

    assert runner.completed(candidate, _reference, ()) is candidate
    target = runner.completed(candidate, _reference, ("b", "n", "z"))
    out = target()
    assert sorted(out.keys()) == ["a", "b", "n"]
    assert out["a"].item() == 9 and out["b"].item() == 2 and out.get_non_tensor("n") == "text"
    full = _td(a=9, b=8)
    assert runner.completed(candidate, _reference, ("b",))(out=full) is full  # none missing
    assert target(out=[4]) == [4]  # not a TensorDict
    own = _td(a=9)
    assert target(out=own, bad=True) is own  # bad input: the oracle raised
    assert target(out=own, other=True) is own  # another batch shape
    assert target(out=own, plain=True) is own
    assert "b" not in own.keys()  # completed on a copy


def test_the_oracles_warnings_are_not_logged_and_logging_is_restored(caplog) -> None:
    target = runner.completed(lambda **kwargs: _td(a=9), _reference, ("b",))
    logging.disable(logging.DEBUG)
    try:
        target()
        assert logging.root.manager.disable == logging.DEBUG
    finally:
        logging.disable(logging.NOTSET)
    with caplog.at_level(logging.WARNING):
        target()
        target(bad=True)
    assert logging.root.manager.disable == logging.NOTSET
    assert "the oracle's warning" not in caplog.text


# --------------------------------------------------------------------------- one input observed


VIEW = runner.adapter_view(STAND_IN)


def test_what_the_target_did_on_bad_input() -> None:
    bad = BadCase(Case(([1], 3)), ValueError, "k > n")
    assert runner.observe(VIEW, bad, karmarkar_karp) == Shown("agreed")
    shown = runner.observe(VIEW, bad, _verl_like)
    assert shown == Shown("raised", AssertionError, text="number of items < k_partitions")
    accepted = runner.observe(VIEW, bad, lambda values, k, **kw: [[0]] * k)
    assert accepted.what == "accepted" and accepted.exception is None
    assert accepted.text and "\n" not in accepted.text


def test_what_the_target_did_on_valid_input() -> None:
    case = Case(([1, 2, 3], 2))
    assert runner.observe(VIEW, case, karmarkar_karp) == Shown("agreed")
    raised = runner.observe(VIEW, case, _key_error_always)
    assert raised == Shown("raised", KeyError, text="'always'")
    differs = runner.observe(VIEW, case, _off_by_one)
    assert differs.what == "differs" and differs.field == "" and differs.text
    assert "\n" not in differs.text


def _key_error_always(values, k, *, equal_size=False):
    raise KeyError("always")


def test_batchproofs_own_failure_while_observing_is_raised() -> None:
    def ours(*args, **kwargs):
        raise HarnessError("ours")

    with pytest.raises(HarnessError, match="ours"):
        runner.observe(VIEW, Case(([1, 2], 2)), ours)
    with pytest.raises(HarnessError, match="ours"):
        runner.observe(VIEW, BadCase(Case(([1], 3)), ValueError, "k > n"), ours)


def test_a_mismatch_with_a_cause_on_bad_input_is_what_was_raised(monkeypatch) -> None:
    def parity(info, case, candidate):
        raise Mismatch("first\nsecond") from TypeError("the cause\nmore")

    monkeypatch.setattr(runner, "check_error_parity", parity)
    shown = runner.observe(VIEW, BadCase(Case(([1], 3)), ValueError, "k > n"), karmarkar_karp)
    assert shown == Shown("raised", TypeError, text="the cause")
    monkeypatch.setattr(runner, "check_error_parity", _mismatch_alone)
    shown = runner.observe(VIEW, BadCase(Case(([1], 3)), ValueError, "k > n"), karmarkar_karp)
    assert shown == Shown("accepted", text="first")


def _mismatch_alone(info, case, candidate):
    raise Mismatch("first\nsecond")


def test_a_mismatch_on_valid_input_names_its_field(monkeypatch) -> None:
    def equivalence(info, case, candidate):
        raise Mismatch("loss_mask differs\nrows", path=".loss_mask[0]")

    monkeypatch.setattr(runner, "check_equivalence", equivalence)
    shown = runner.observe(VIEW, Case(([1, 2], 2)), karmarkar_karp)
    assert shown == Shown("differs", field="loss_mask", text="loss_mask differs")


# --------------------------------------------------------------------------- check_adapter


def test_a_known_divergence_is_set_aside_and_the_rest_checked() -> None:
    report = runner.check_adapter(STAND_IN, _verl_like, checks=["errors", "pin:k_greater_than_n",
                                                                "equivalence"], **FEW)
    assert _statuses(report) == {"errors": Outcome.PASS, "pin:k_greater_than_n": Outcome.KNOWN,
                                 "equivalence": Outcome.PASS}
    errors, pin, equivalence = report.outcomes
    assert errors.examples == 5 and equivalence.examples == 5 and pin.examples == 0
    assert pin.detail == "k_over_n" and errors.detail == ""
    assert all(o.seconds > 0 for o in (errors, equivalence)) and pin.seconds == 0
    assert all(o.adapter == "stand_in.kk" and o.record == RECORD for o in report.outcomes)
    (known,) = report.known
    assert known["status"] == KnownStatus.CONFIRMED and known["matched"] > 1
    assert (report.adapter, report.record, report.target) == ("stand_in.kk", RECORD, REFERENCE)
    assert report.forms == ["lists"] and report.not_provided == [] and report.compared is None
    assert report.framework == "stand_in" and report.scope == Scope() and report.misfit == ""
    assert report.unsupported == 0 and report.version == "-"


def test_every_check_runs_by_default_in_the_records_order() -> None:
    report = runner.check_adapter(STAND_IN, _verl_like, **FEW)
    assert [o.check for o in report.outcomes] == registry.get(RECORD).check_names()
    assert {o.status for o in report.outcomes} == {Outcome.PASS, Outcome.KNOWN}


def test_the_checks_asked_for_must_be_the_records() -> None:
    with pytest.raises(ValueError, match=r"^balance.karmarkar_karp has no check \['nope'\]$"):
        runner.check_adapter(STAND_IN, _verl_like, checks=["errors", "nope"])
    with pytest.raises(ValueError, match=r"^balance.karmarkar_karp is checked on \['cpu'\], "
                                         r"not on cuda$"):
        runner.check_adapter(STAND_IN, _verl_like, device="cuda")


def test_a_new_divergence_is_reported_shrunk_with_its_blob() -> None:
    report = runner.check_adapter(STAND_IN.without("k_over_n"), _verl_like,
                                  checks=["errors", "pin:k_greater_than_n"], max_examples=20,
                                  replay_database=False)
    errors, pin = report.outcomes
    assert errors.status == Outcome.NEW == pin.status
    assert errors.minimal.startswith("karmarkar_karp([0], 2) must raise ValueError"), errors
    assert errors.blob and "AssertionError" in errors.detail and errors.examples > 0
    assert errors.traces == ("skip", "errors") == pin.traces
    assert pin.blob == ""  # a pin is replayed by name


def test_a_replayed_failure_keeps_its_blob() -> None:
    bare = STAND_IN.without("k_over_n")
    first = runner.check_adapter(bare, _verl_like, checks=["errors"], max_examples=20,
                                 replay_database=False).outcomes[0]
    again = runner.check_adapter(bare, _verl_like, checks=["errors"],
                                 reproduce=(hypothesis.__version__, first.blob)).outcomes[0]
    assert again.status == Outcome.NEW and again.blob == first.blob
    assert again.minimal == first.minimal


def test_an_input_outside_the_domain_is_not_run() -> None:
    nothing = dataclasses.replace(STAND_IN, supports=lambda call: False)
    report = runner.check_adapter(nothing, _verl_like,
                                  checks=["equivalence", "pin:spec_example_10_1_1"], **FEW)
    equivalence, pin = report.outcomes
    assert equivalence.status == Outcome.NOT_TESTED and equivalence.examples == 0
    assert equivalence.detail == ("every generated input met a known divergence or was outside "
                                  "the adapter's domain")
    assert pin.status == Outcome.SKIPPED and pin.detail == "input outside the adapter's domain"
    assert report.unsupported > 5


def test_a_skipped_check_says_why() -> None:
    skip = dataclasses.replace(STAND_IN, skip={"errors": "it does not validate"})
    report = runner.check_adapter(skip, _verl_like, checks=["errors"], **FEW)
    assert _statuses(report) == {"errors": Outcome.SKIPPED}
    assert report.outcomes[0].detail == "it does not validate"
    assert report.outcomes[0].examples == 0


def test_a_check_that_ran_nothing_and_set_nothing_aside_is_batchproofs_failure(
        monkeypatch) -> None:
    monkeypatch.setattr(runner, "run_check", lambda *args, **kwargs: None)
    report = runner.check_adapter(STAND_IN, _verl_like, checks=["equivalence"], **FEW)
    (outcome,) = report.outcomes
    assert outcome.status == Outcome.ERROR and outcome.detail == (
        "no example reached the target, and none was set aside: batchproof's own failure")


def test_a_passing_checks_notes_are_its_detail(monkeypatch) -> None:
    def run_check(info, check, candidate, *, stats, **kwargs):
        stats.examples += 2
        stats.notes += ["replayed: passes now", "again"]

    monkeypatch.setattr(runner, "run_check", run_check)
    (outcome,) = runner.check_adapter(STAND_IN, _verl_like, checks=["equivalence"],
                                      **FEW).outcomes
    assert (outcome.status, outcome.examples) == (Outcome.PASS, 2)
    assert outcome.detail == "replayed: passes now; again"


def test_what_the_search_is_given(monkeypatch) -> None:
    seen = {}

    def run_check(info, check, candidate, **kwargs):
        seen[check] = (info, kwargs)
        kwargs["stats"].examples += 1

    monkeypatch.setattr(runner, "run_check", run_check)
    narrow = dataclasses.replace(STAND_IN, supports=lambda call: call.args[1] != 1)
    database = InMemoryExampleDatabase()
    base = settings(max_examples=11, derandomize=False, database=database, deadline=1000,
                    suppress_health_check=[HealthCheck.differing_executors], print_blob=False,
                    phases=list(Phase))
    runner.check_adapter(narrow, _verl_like, checks=["equivalence", "pin:spec_example_1_to_8"],
                         max_examples=7, report_multiple_bugs=False, seed=3,
                         reproduce=("equivalence", "AAAA"), base_settings=base)
    search, kwargs = seen["equivalence"]
    assert search.pins == [] and seen["pin:spec_example_1_to_8"][0].pins  # pins run alone
    quiet = kwargs["settings"]
    assert quiet.max_examples == 7 and quiet.deadline is None and quiet.print_blob
    assert not quiet.report_multiple_bugs and not quiet.derandomize
    assert quiet.database is database
    assert {HealthCheck.filter_too_much, HealthCheck.too_slow,
            HealthCheck.differing_executors} <= set(quiet.suppress_health_check)
    assert Phase.explicit in quiet.phases and Phase.explain not in quiet.phases
    assert (kwargs["seed"], kwargs["reproduce"], kwargs["device"]) == (3, ("equivalence",
                                                                          "AAAA"), "cpu")
    assert kwargs["admits"](Case(([1, 2], 2))) and not kwargs["admits"](Case(([1, 2], 1)))
    assert not kwargs["in_scope"](Case(([1, 2], 1)))
    assert Phase.shrink in quiet.phases and Phase.generate in quiet.phases
    runner.check_adapter(narrow, _verl_like, checks=["equivalence"], replay_database=False,
                         base_settings=base)
    quiet = seen["equivalence"][1]["settings"]
    assert quiet.database is None and quiet.report_multiple_bugs
    assert quiet.max_examples == 11 and not quiet.derandomize
    runner.check_adapter(narrow, _verl_like, checks=["equivalence"], derandomize=True,
                         base_settings=base)
    assert seen["equivalence"][1]["settings"].derandomize
    runner.check_adapter(narrow, _verl_like, checks=["equivalence"],
                         base_settings=settings(base, derandomize=True))
    assert seen["equivalence"][1]["settings"].derandomize


def test_the_loaded_profile_is_the_default_search(monkeypatch) -> None:
    seen = []

    def run_check(info, check, candidate, **kwargs):
        seen.append(kwargs["settings"])
        kwargs["stats"].examples += 1

    monkeypatch.setattr(runner, "run_check", run_check)
    runner.check_adapter(STAND_IN, _verl_like, checks=["equivalence"])
    assert seen[0].max_examples == settings().max_examples


def test_batchproofs_own_failure_in_a_check_is_an_error() -> None:
    def strategy_fails(call):
        if call.args[1] == 1:
            raise RuntimeError("the predicate broke")
        return True

    broken = dataclasses.replace(STAND_IN, supports=strategy_fails)
    report = runner.check_adapter(broken, _verl_like, checks=["equivalence"], **FEW)
    (outcome,) = report.outcomes
    assert outcome.status == Outcome.ERROR and "the predicate broke" in outcome.detail
    assert outcome.traces == ()


def test_a_set_aside_pin_is_known_new_or_a_pass() -> None:
    info = registry.get(RECORD)
    plain = runner.adapter_view(STAND_IN)
    pin = "pin:k_greater_than_n"
    assert runner._set_aside_pin(STAND_IN, info, pin, _verl_like, plain) == (Outcome.KNOWN,
                                                                            "k_over_n")
    assert runner._set_aside_pin(STAND_IN, info, pin, karmarkar_karp, plain) == (
        Outcome.PASS, "matched k_over_n, but the target agreed with the contract")
    status, detail = runner._set_aside_pin(STAND_IN, info, pin, _key_error, plain)
    assert (status, detail) == (Outcome.NEW, "matched k_over_n, but the target raised KeyError: "
                                             "3")
    twice = dataclasses.replace(STAND_IN, known=(
        K_OVER_N, dataclasses.replace(K_OVER_N, name="also", raises=(AssertionError, KeyError)),
        dataclasses.replace(K_OVER_N, name="other", raises=TypeError)))
    assert runner._set_aside_pin(twice, info, pin, _verl_like, plain) == (Outcome.KNOWN,
                                                                          "k_over_n, also")
    status, detail = runner._set_aside_pin(twice, info, pin, _key_error, plain)
    assert (status, detail) == (Outcome.KNOWN, "also")
    outside = dataclasses.replace(STAND_IN, supports=lambda call: False)
    assert runner._set_aside_pin(outside, info, pin, _verl_like, plain) == (
        Outcome.SKIPPED, "input outside the adapter's domain")


def test_a_pin_in_forms_the_target_is_not_given_is_skipped() -> None:
    info = registry.get(RECORD)
    tensor_pin = Pin("t", Case(([1, 2], 2)), "why", forms=("tensor", "lists"))
    info = dataclasses.replace(info, pins=[tensor_pin])
    plain = runner.adapter_view(STAND_IN)
    assert runner._forms_not_taken(tensor_pin, plain) == ["tensor"]
    assert runner._forms_not_taken(Pin("l", Case(([1], 1)), "why"), plain) == []
    assert runner._set_aside_pin(STAND_IN, info, "pin:t", _verl_like, plain) == (
        Outcome.SKIPPED, "input in forms the target is not given (tensor)")


def test_a_pin_the_target_takes_no_form_of_is_skipped_in_the_report(monkeypatch) -> None:
    info = registry.get(RECORD)
    tensor_pin = Pin("t", Case(([1, 2], 2)), "why", forms=("tensor",))
    with_pin = dataclasses.replace(info, pins=[*info.pins, tensor_pin])
    monkeypatch.setattr(runner, "registry", SimpleNamespace(get=lambda name: with_pin))
    report = runner.check_adapter(STAND_IN, _verl_like, checks=["pin:t", "pin:zeros_and_ties"],
                                  **FEW)
    assert [(o.status, o.detail) for o in report.outcomes] == [
        (Outcome.SKIPPED, "input in forms the target is not given (tensor)"),
        (Outcome.PASS, "")]
    every = dataclasses.replace(STAND_IN, forms=None)
    report = runner.check_adapter(every, _verl_like, checks=["pin:t"], **FEW)
    assert _statuses(report) == {"pin:t": Outcome.PASS}


def test_a_harness_error_on_a_set_aside_pin_is_an_error(monkeypatch) -> None:
    def broken(*args):
        raise HarnessError("the probe broke")

    monkeypatch.setattr(runner, "_set_aside_pin", broken)
    report = runner.check_adapter(STAND_IN, _verl_like, checks=["pin:k_greater_than_n"], **FEW)
    assert _statuses(report) == {"pin:k_greater_than_n": Outcome.ERROR}
    assert report.outcomes[0].detail == "HarnessError: the probe broke"


def _warning_verl(values, k, *, equal_size=False):
    import warnings

    warnings.warn(f"called with k={k}", UserWarning, stacklevel=1)
    return _verl_like(values, k, equal_size=equal_size)


def test_each_check_has_its_own_warnings() -> None:
    report = runner.check_adapter(STAND_IN, _warning_verl, checks=["pin:spec_example_10_1_1",
                                                                   "pin:zeros_and_ties"], **FEW)
    first, second = report.outcomes
    # the first check's include the probe's (k=2 of the record's example, its pins)
    assert sum(w.count for w in first.warnings) > sum(w.count for w in second.warnings) > 0
    assert {w.message for w in second.warnings} == {"called with k=3"}


def test_a_signature_misfit_is_one_line_for_the_adapter() -> None:
    def positional_only(values, k, **kwargs):
        import warnings

        warnings.warn("probed", UserWarning, stacklevel=1)
        if kwargs:
            raise TypeError(f"{positional_only.__qualname__}() got an unexpected keyword "
                            "argument 'equal_size'")
        return karmarkar_karp(values, k)

    report = runner.check_adapter(STAND_IN, positional_only, checks=["errors", "equivalence"],
                                  **FEW)
    assert report.misfit == (f"TypeError: {positional_only.__qualname__}() got an unexpected "
                             "keyword argument 'equal_size'")
    assert _statuses(report) == {"errors": Outcome.NOT_RUN, "equivalence": Outcome.NOT_RUN}
    assert report.outcomes[0].warnings and not report.outcomes[1].warnings
    assert report.known == [] and report.unsupported == 0
    assert (report.adapter, report.target, report.framework) == ("stand_in.kk", REFERENCE,
                                                                 "stand_in")


# --------------------------------------------------------------------------- fit


@pytest.mark.parametrize("message", [
    "f() got an unexpected keyword argument 'x'",
    "f() missing 1 required positional argument: 'k'",
    "f() missing 2 required keyword arguments: 'a' and 'b'",
    "f() takes 1 positional argument but 2 were given",
    "f() takes 2 positional arguments but 3 were given",
    "f() takes 0 positional arguments but 1 was given",
    "f() got multiple values for argument 'k'",
    "too many values to unpack (expected 2)",
    "not enough values to unpack (expected 3, got 2)",
    "f() missing 1 required keyword-only argument: 'pad'",
])
def test_a_call_that_fails_on_its_signature_is_a_misfit(message) -> None:
    def target(values, k, *, equal_size=False):
        raise TypeError(message + "\nmore")

    assert runner.fit_problem(STAND_IN, target) == f"TypeError: {message}"

    def wrapper_unpacks(values, k, *, equal_size=False):
        raise AdapterError("the wrapper failed") from ValueError(message)

    assert runner.fit_problem(STAND_IN, wrapper_unpacks) == f"ValueError: {message}"


def test_other_failures_are_no_misfit() -> None:
    def key_error(values, k, *, equal_size=False):
        raise KeyError("got an unexpected keyword argument")

    def other_type_error(values, k, *, equal_size=False):
        raise TypeError("unsupported operand")

    def adapter_alone(values, k, *, equal_size=False):
        raise AdapterError("too many values to unpack")

    assert runner.fit_problem(STAND_IN, _verl_like) == ""
    assert runner.fit_problem(STAND_IN, key_error) == ""
    assert runner.fit_problem(STAND_IN, other_type_error) == ""
    assert runner.fit_problem(STAND_IN, adapter_alone) == ""


def test_probes_outside_the_domain_or_known_are_not_run() -> None:
    calls = []

    def target(values, k, *, equal_size=False):
        calls.append((values, k))
        raise TypeError("f() got an unexpected keyword argument 'equal_size'")

    outside = dataclasses.replace(STAND_IN, supports=lambda call: False)
    assert runner.fit_problem(outside, target) == "" and calls == []
    every = dataclasses.replace(STAND_IN, known=(dataclasses.replace(
        K_OVER_N, kind="valid", raises=TypeError, applies=lambda call: True),))
    assert runner.fit_problem(every, target) == "" and calls == []
    # the probes are the valid pins, then the record's example
    only_example = dataclasses.replace(STAND_IN, supports=lambda call: call.args[0] == list(
        range(1, 9)) and not call.kwargs)
    assert runner.fit_problem(only_example, target) != ""
    assert calls == [(list(range(1, 9)), 2)]


def test_a_predicate_failing_on_a_probe_is_left_to_the_checks() -> None:
    def raising(call):
        raise RuntimeError("boom")

    broken = dataclasses.replace(STAND_IN, supports=raising)
    assert runner.fit_problem(broken, _verl_like) == ""


# --------------------------------------------------------------------------- traces


def _layout_reference(values, k, *, layout="zigzag"):
    return values


def _info(pins=(), properties=(), reference=_layout_reference, forms=("lists", "tensor")):
    return SimpleNamespace(pins=list(pins), properties=list(properties), reference=reference,
                           forms=dict.fromkeys(forms))


def _property(name, varies=()):
    return SimpleNamespace(name=name, varies=varies)


def test_a_bad_input_check_traces_to_skip_errors() -> None:
    bad = Pin("bad", BadCase(Case(([1], 3)), ValueError, "k > n"), "why")
    info = _info(pins=[bad])
    assert runner.traces_to(info, "errors", None, "") == ("skip", "errors")
    assert runner.traces_to(info, "pin:bad", None, "") == ("skip", "errors")


def test_another_layout_traces_to_the_default_layout() -> None:
    info = _info(properties=[_property("layouts", ("layout",)), _property("plain")],
                 pins=[Pin("other", Case(([1], 1), {"layout": "chunked"}), "why"),
                       Pin("same", Case(([1], 1), {"layout": "zigzag"}), "why"),
                       Pin("named", Case(([1], 1)), "why")])
    assert runner.traces_to(info, "property:layouts", None, "") == ("layout", "zigzag")
    assert runner.traces_to(info, "property:plain", None, "") == ()
    assert runner.traces_to(info, "equivalence", Case(([1], 1), {"layout": "chunked"}),
                            "") == ("layout", "zigzag")
    assert runner.traces_to(info, "equivalence", Case(([1], 1), {"layout": "zigzag"}), "") == ()
    assert runner.traces_to(info, "equivalence", Case(([1], 1)), "") == ()
    assert runner.traces_to(info, "pin:other", None, "") == ("layout", "zigzag")
    assert runner.traces_to(info, "pin:same", None, "") == ()
    # a pin's failure that names a property varying the layout
    assert runner.traces_to(info, "pin:named", None, "the property layouts failed") == (
        "layout", "zigzag")
    assert runner.traces_to(info, "pin:named", None, "the property layoutsx failed") == ()
    assert runner.traces_to(info, "pin:named", None, "the property plain failed") == ()
    no_layout = _info(properties=[_property("layouts", ("layout",))],
                      reference=lambda values, k: values)
    assert runner.traces_to(no_layout, "property:layouts", None, "") == ()
    assert runner._layout_default(no_layout) is None
    assert runner._layout_default(info) == "zigzag"


def test_another_input_form_traces_to_the_first_form() -> None:
    info = _info()
    assert runner.traces_to(info, "equivalence", None, "failed on the 'tensor' input form") == (
        "forms", "lists")
    assert runner.traces_to(info, "equivalence", None, "failed on the 'lists' input form") == ()
    assert runner.traces_to(info, "equivalence", None, "failed") == ()


def test_missing_outputs_trace_to_not_provided() -> None:
    info = _info()
    detail = "keys differ: missing ['a', \"b\"], unexpected []"
    assert runner.traces_to(info, "equivalence", None, detail) == ("not_provided", "a", "b")
    assert runner.traces_to(info, "equivalence", None,
                            "keys differ: missing [], unexpected []") == ()
    assert runner.traces_to(info, "equivalence", None,
                            "keys differ: missing ['a'], unexpected ['c']") == ()


def _custom_report(traces=(("skip", "errors"),), framework="custom", **changes):
    outcomes = [dataclasses.replace(_outcome(Outcome.NEW, f"c{i}"), traces=t)
                for i, t in enumerate(traces)]
    return _report(outcomes, framework=framework, **changes)


def test_a_hint_when_every_new_divergence_traces_to_an_option() -> None:
    report = _custom_report(traces=[("skip", "errors"), ("skip", "errors"),
                                    ("layout", "zigzag"), ("forms", "lists"),
                                    ("not_provided", "a", "b")])
    hint = runner.scope_hint([report], "m:f", profile="dev")
    assert hint.splitlines() == [
        "Every new divergence above traces to an option the function may not support:",
        "  2 check(s): it does not raise the contract's exception on bad input (if it is not "
        "meant to validate: --skip errors)",
        "  1 check(s): it is called in another layout than 'zigzag' (if it builds only that "
        "one: --layout zigzag)",
        "  1 check(s): it is given another input form than 'lists' (if it takes only that one: "
        "--forms lists)",
        "  1 check(s): it does not produce a, b (if it is not meant to: --not-provided KEY)",
        "To check what it does support: batchproof check --impl m:f --op balance.karmarkar_karp "
        "--forms lists --not-provided a --not-provided b --skip errors --layout zigzag "
        "--profile dev"]


def test_a_hint_starts_from_the_reports_scope_and_names_the_adapter() -> None:
    report = _custom_report(traces=[("skip", "errors")],
                            scope=Scope(adapter_files=("ad.py",), not_provided=("z",)))
    hint = runner.scope_hint([report], "m:f", adapter="mine")
    assert hint.splitlines()[-1] == ("To check what it does support: batchproof check "
                                     "--adapter-file ad.py --impl m:f --adapter mine "
                                     "--not-provided z --skip errors")


def test_no_hint_when_a_divergence_traces_to_nothing_or_for_a_framework() -> None:
    assert runner.scope_hint([_custom_report(traces=[("skip", "errors"), ()])], "m:f") == ""
    assert runner.scope_hint([_custom_report(traces=[(), ("skip", "errors")])], "m:f") == ""
    assert runner.scope_hint([_custom_report(framework="verl")], "m:f") == ""
    assert runner.scope_hint([_report([_outcome(Outcome.PASS)], framework="custom")],
                             "m:f") == ""
    framework_first = [_custom_report(framework="verl", traces=[()]), _custom_report()]
    assert runner.scope_hint(framework_first, "m:f").startswith("Every new divergence")


# --------------------------------------------------------------------------- selection


def _adapter(name, framework="fw", record=RECORD, **changes) -> Adapter:
    return Adapter(name=name, framework=framework, record=record, target=REFERENCE,
                   wrap=lambda fn: fn, **changes)


@pytest.fixture
def adapters_of(monkeypatch):
    """The adapters `select_adapters` sees (batchproof's registry untouched)."""
    def use(*chosen):
        monkeypatch.setattr(runner, "all_adapters", lambda: list(chosen))
        monkeypatch.setattr(runner, "frameworks",
                            lambda: sorted({a.framework for a in chosen}))
        monkeypatch.setattr(runner, "get_adapter",
                            lambda name: next(a for a in chosen if a.name == name))

    return use


def test_select_by_adapter_alone_or_retargeted(adapters_of) -> None:
    one = _adapter("fw.one")
    adapters_of(one, _adapter("fw.two"))
    assert runner.select_adapters(None, None, "fw.one") == [one]
    (retargeted,) = runner.select_adapters("m:g", None, "fw.one")
    assert (retargeted.name, retargeted.target) == ("fw.one", "m:g")
    with pytest.raises(ValueError, match=r"^give --impl \(a framework or module:function\) or "
                                         r"--adapter$"):
        runner.select_adapters(None, None, None)


def test_select_a_module_function_by_its_one_record(adapters_of) -> None:
    adapters_of(_adapter("fw.one"))
    (chosen,) = runner.select_adapters("m:g", [RECORD], None)
    assert (chosen.record, chosen.target, chosen.framework) == (RECORD, "m:g", "custom")
    with pytest.raises(ValueError, match=r"^--impl module:function without --adapter needs --op "
                                         r"naming exactly one record \(got \[.*\]\)$"):
        runner.select_adapters("m:g", ["balance"], None)


def test_select_a_frameworks_adapters(adapters_of) -> None:
    one, two = _adapter("fw.one"), _adapter("fw.two", record="trainer.required_multiple")
    other = _adapter("other.one", framework="other")
    adapters_of(one, two, other)
    assert runner.select_adapters("fw", None, None) == [one, two]
    assert runner.select_adapters("fw", None, "fw.two") == [two]
    assert runner.select_adapters("fw", ["fw.two"], None) == [two]
    assert runner.select_adapters("fw", [RECORD], None) == [one]
    assert runner.select_adapters("fw", ["trainer"], None) == [two]
    with pytest.raises(ValueError, match=r"^unknown --impl 'nope': use one of \['fw', 'other'\] "
                                         r"or module:function$"):
        runner.select_adapters("nope", None, None)
    with pytest.raises(ValueError, match=r"^no fw adapter for --op \['sft'\] --adapter None; "
                                         r"known: \['fw.one', 'fw.two'\]$"):
        runner.select_adapters("fw", ["sft"], None)
    with pytest.raises(ValueError, match="no fw adapter for --op None --adapter other.one"):
        runner.select_adapters("fw", None, "other.one")


def test_select_leaves_out_adapters_whose_needs_are_missing(adapters_of, capsys) -> None:
    needy = _adapter("fw.needy", needs=("no-such-distribution-x",), distribution="hypothesis")
    plain = _adapter("fw.plain")
    adapters_of(needy, plain)
    assert runner.select_adapters("fw", None, None) == [plain]
    assert capsys.readouterr().err == (
        "batchproof: note: fw.needy not run: it needs no-such-distribution-x, not installed "
        "beside hypothesis (docs/frameworks.md)\n")
    assert runner.select_adapters("fw", None, "fw.needy") == [needy]  # named: its error


def test_every_adapter_needing_what_is_missing_is_a_usage_error(capsys) -> None:
    a = _adapter("fw.a", needs=("no-such-b", "no-such-a"))
    b = _adapter("fw.b", needs=("no-such-a",))
    with pytest.raises(ValueError, match=r"^every selected adapter needs what is not installed: "
                                         r"\['no-such-a', 'no-such-b'\]$"):
        runner.with_their_needs([a, b])
    assert runner.with_their_needs([_adapter("fw.c", needs=("hypothesis",))])[0].name == "fw.c"
    assert capsys.readouterr().err.count("\n") == 2


def test_a_frameworks_installed_version_picks_its_adapters(adapters_of) -> None:
    fits = _adapter("fw.new", distribution="hypothesis", versions=">=1")
    old = _adapter("fw.old", distribution="hypothesis", versions="<1")
    assert runner.fitting([old, fits]) == [fits]
    assert runner.fitting([fits, _adapter("fw.any", distribution="hypothesis")])[1].name == \
        "fw.any"
    missing = [_adapter("fw.x", distribution="no-such-distribution-x", versions="<0")]
    assert runner.fitting(missing) == missing
    assert runner.fitting([_adapter("fw.y", versions="<0")])[0].name == "fw.y"  # no dist: "-"
    from importlib.metadata import version

    with pytest.raises(ValueError, match=rf"^no adapter fits hypothesis {version('hypothesis')}; "
                                         r"adapters: fw.old \(<1\), fw.older \(<0\)$"):
        runner.fitting([old, _adapter("fw.older", distribution="hypothesis", versions="<0")])
    adapters_of(old, fits)
    assert runner.select_adapters("fw", None, None) == [fits]


# --------------------------------------------------------------------------- run_adapter


def test_run_adapter_checks_the_scoped_checks(monkeypatch) -> None:
    seen = []

    def check_adapter(chosen, candidate, **options):
        seen.append((chosen, candidate, options))
        return "the report"

    monkeypatch.setattr(runner, "check_adapter", check_adapter)
    chosen = _adapter("fw.one")
    scope = Scope(checks=("errors", "property:nope", "equivalence"))
    assert runner.run_adapter(chosen, scope, max_examples=3) == "the report"
    (_, candidate, options), = seen
    assert candidate([3, 1], 2) == karmarkar_karp([3, 1], 2)
    assert options == {"checks": ["errors", "equivalence"], "report_multiple_bugs": False,
                       "max_examples": 3}
    runner.run_adapter(chosen, Scope())
    assert seen[-1][2]["checks"] is None
    runner.run_adapter(chosen, Scope(checks=("property:nope",)))
    assert seen[-1][2]["checks"] is None


def test_batchproofs_failure_while_checking_is_that_adapters_error(monkeypatch) -> None:
    def check_adapter(chosen, candidate, **options):
        raise RuntimeError("broke")

    monkeypatch.setattr(runner, "check_adapter", check_adapter)
    chosen = dataclasses.replace(_adapter("fw.one"), scope=Scope(layout="x"))
    report = runner.run_adapter(chosen, Scope(checks=("errors", "nope", "equivalence")))
    detail = "batchproof failed while checking this adapter: RuntimeError: broke"
    assert [(o.check, o.status, o.detail) for o in report.outcomes] == [
        ("errors", Outcome.ERROR, detail), ("equivalence", Outcome.ERROR, detail)]
    assert all((o.adapter, o.record) == ("fw.one", RECORD) for o in report.outcomes)
    assert (report.adapter, report.record, report.target, report.version) == (
        "fw.one", RECORD, REFERENCE, "-")
    assert report.known == [] and report.unsupported == 0 and report.misfit == ""
    assert report.framework == "fw" and report.scope == Scope(layout="x")
    every = runner.run_adapter(chosen, Scope())
    assert [o.check for o in every.outcomes] == registry.get(RECORD).check_names()


def test_a_framework_that_cannot_be_imported_is_not_run(capsys) -> None:
    chosen = _adapter("fw.gone", distribution="no-such-distribution-x")
    chosen = dataclasses.replace(chosen, target="no_such_module_x:f")
    report = runner.run_adapter(chosen, Scope(checks=("errors",)))
    err = capsys.readouterr().err
    assert err.startswith("batchproof: error: fw.gone: ") and err.count("\n") == 1
    why = err[len("batchproof: error: fw.gone: "):-1]
    assert report.misfit == f"cannot be imported: {why}" and report.outcomes == []
    assert report.version == "not installed"
    assert isinstance(_raised(chosen), FrameworkMissing)


def _raised(chosen: Adapter) -> BaseException:
    try:
        chosen.candidate()
    except BaseException as err:  # noqa: BLE001 - what is looked at
        return err
    raise AssertionError("it imported")


# --------------------------------------------------------------------------- summary


def _reports():
    return [_report([_outcome(Outcome.NEW), _outcome(Outcome.ERROR), _outcome(Outcome.PASS)],
                    [_known(KnownStatus.DIVERGED_OTHERWISE), _known(KnownStatus.CONFIRMED)]),
            _report([_outcome(Outcome.NOT_RUN), _outcome(Outcome.NOT_TESTED),
                     _outcome(Outcome.NOT_TESTED), _outcome(Outcome.NEW)],
                    [_known(KnownStatus.NOT_REPRODUCED, "stale")], adapter="b"),
            _report()]


def test_the_summary_counts() -> None:
    assert runner.summary_counts(_reports()) == {"new": 3, "errors": 2, "not_tested": 2,
                                                 "known": 3, "not_reproduced": 1, "targets": 3}
    assert runner.summary_counts([]) == {"new": 0, "errors": 0, "not_tested": 0, "known": 0,
                                         "not_reproduced": 0, "targets": 0}


class _Printed(list):
    """A stand-in console: what was printed, markup and all."""

    def print(self, text, **kwargs):
        self.append((text, kwargs))


@pytest.fixture
def printed(monkeypatch) -> _Printed:
    out = _Printed()
    monkeypatch.setattr(runner, "console", out)
    return out


def test_the_summary_line_of_a_failing_run(printed) -> None:
    runner.print_summary(_reports())
    (line, _), (names, options) = printed
    assert line == (
        "[red]3 new divergence(s)[/red], [red]2 check(s) not carried out (batchproof's own "
        "failure: exit 3)[/red], [yellow]2 check(s) NOT TESTED (no input reached the "
        "target)[/yellow] in 3 target(s); 3 known divergence(s) listed above, "
        "[yellow]1 NOT REPRODUCED[/yellow]")
    assert names == ("not reproduced (its inputs were matched and the target agreed with the "
                     "contract every time: fixed upstream, or the adapter changed?): b: stale; "
                     "`--strict` fails on it")
    assert options == {"markup": False, "highlight": False, "soft_wrap": True}


def test_the_summary_line_under_strict(printed) -> None:
    report = _report([_outcome(Outcome.PASS)], [_known(KnownStatus.NOT_REPRODUCED, "stale"),
                                                _known(KnownStatus.NOT_REPRODUCED, "old")])
    runner.print_summary([report], strict=True)
    (line, _), (names, _) = printed
    assert line == ("[red]0 new divergence(s)[/red] in 1 target(s); 2 known divergence(s) listed "
                    "above, [red]2 NOT REPRODUCED (--strict: exit 1)[/red]")
    assert names.endswith("fixed upstream, or the adapter changed?): a: stale, a: old")


@pytest.mark.parametrize(("outcomes", "colour"), [
    ([Outcome.PASS], "green"), ([Outcome.NEW], "red"), ([Outcome.ERROR], "red")])
def test_the_summary_line_is_green_only_without_failures(printed, outcomes, colour) -> None:
    runner.print_summary([_report([_outcome(s) for s in outcomes])])
    (line, _), = printed
    new = int(Outcome.NEW in outcomes)
    assert line.startswith(f"[{colour}]{new} new divergence(s)[/{colour}]")
    assert line.endswith(" in 1 target(s)")
    runner.print_summary([_report([_outcome(Outcome.PASS)], [_known(KnownStatus.CONFIRMED)])],
                         strict=True)
    assert printed[-1][0] == ("[green]0 new divergence(s)[/green] in 1 target(s); 1 known "
                              "divergence(s) listed above")


# --------------------------------------------------------------------------- replay lines


def test_the_replay_line_of_a_failure() -> None:
    chosen = dataclasses.replace(_adapter("fw.one"), scope=Scope(skip={"errors": "x"}))
    replay = runner.replayer("fw", chosen, profile="ci")
    new = dataclasses.replace(_outcome(Outcome.NEW, "equivalence"), blob="AAAA")
    assert replay(new) == ("batchproof check --impl fw --op balance.karmarkar_karp --skip errors "
                           "--profile ci --check equivalence --reproduce AAAA")
    assert replay(_outcome(Outcome.NEW, "pin:p")) == (
        "batchproof check --impl fw --op balance.karmarkar_karp --skip errors --profile ci "
        "--check pin:p")


def test_the_words_that_check_an_adapter_again() -> None:
    scope = Scope(adapter_files=("a.py", "b.py"), forms=("lists",), layout="zigzag")
    chosen = dataclasses.replace(_adapter("fw.one"), scope=scope)
    assert runner.command_words(None, chosen, adapter="fw.one", device="cuda") == [
        "--adapter-file", "a.py", "--adapter-file", "b.py", "--adapter", "fw.one",
        "--forms", "lists", "--layout", "zigzag", "--device", "cuda"]
    assert runner.command_words("m:f", chosen, scope=Scope(not_provided=("x",))) == [
        "--impl", "m:f", "--op", RECORD, "--not-provided", "x"]
    assert runner.command_words("fw", _adapter("fw.one"), profile="dev") == [
        "--impl", "fw", "--op", RECORD, "--profile", "dev"]
    replay = runner.replayer(None, chosen, adapter="fw.one", scope=Scope(), device="cuda")
    assert replay(_outcome(Outcome.NEW)) == ("batchproof check --adapter fw.one --device cuda "
                                             "--check c")


# --------------------------------------------------------------------------- the printed report


def _printed_report(report: AdapterReport, replay=None) -> str:
    console = Console(record=True, width=250, color_system=None)
    runner.print_report(report, "dev", replay=replay, console=console)
    return console.export_text()


def test_the_report_of_an_adapter_that_does_not_fit() -> None:
    report = _report([_outcome(Outcome.NOT_RUN)], misfit="TypeError: unexpected keyword",
                     version="1.2")
    text = _printed_report(report)
    assert "m:f (1.2) vs balance.karmarkar_karp" in text
    assert ("the adapter a does not fit m:f (1.2): TypeError: unexpected keyword. No check was "
            "run; an adapter for this version is needed (`batchproof list adapters`).") in text
    assert "checks — profile" not in text


def test_the_report_table_and_failures() -> None:
    outcomes = [CheckOutcome("a", RECORD, f"c{i}", s, examples=i, seconds=0.25,
                             detail=f"{s} said [b]\nsecond line")
                for i, s in enumerate(Outcome)]
    outcomes[0].warnings = [SeenWarning("UserWarning", "careful", "f.py:3", 2)]
    report = _report(outcomes, forms=["lists", "tensor"], not_provided=["x", "y"],
                     compared=["a"], unsupported=4)
    text = _printed_report(report, replay=lambda o: f"replay {o.check}")
    lines = text.splitlines()
    assert lines[0].strip("─ ") == "m:f vs balance.karmarkar_karp"  # version "-": none
    assert ("scope: input forms lists, tensor; outputs not compared: x, y; outputs compared: a "
            "only; skipped: c" + str(list(Outcome).index(Outcome.SKIPPED))) in text
    assert "checks — profile=dev; examples = inputs run against the target" in text
    words = {Outcome.PASS: "PASS", Outcome.NEW: "NEW DIVERGENCE", Outcome.KNOWN: "known",
             Outcome.SKIPPED: "skipped", Outcome.NOT_TESTED: "NOT TESTED",
             Outcome.ERROR: "ERROR", Outcome.NOT_RUN: "NOT RUN"}
    for i, status in enumerate(Outcome):
        at = next(n for n, line in enumerate(lines) if line.startswith(f"│ c{i} "))
        cells = [c.strip() for c in lines[at].strip("│").split("│")]
        assert cells == [f"c{i}", words[status], str(i), "0.2s", f"{status} said [b]"], cells
        folded = status in (Outcome.NEW, Outcome.ERROR)  # its first line only
        assert lines[at + 1].strip("│ ").endswith("second line") != folded
    assert "4 generated inputs were outside the adapter's domain (not run)" in text
    assert "warnings raised by the target: 2" in text and "c0: " in text
    new = Outcome.NEW
    assert f"new divergence: a — c{list(Outcome).index(new)}" in text
    assert f"error (batchproof's own): a — c{list(Outcome).index(Outcome.ERROR)}" in text
    assert f"replay c{list(Outcome).index(new)}" in text
    assert text.count("replay c") == 2 and "second line" in text


def test_a_long_failure_detail_is_shortened_in_the_table() -> None:
    long = " ".join(["word"] * 40)
    report = _report([CheckOutcome("a", RECORD, "c", Outcome.NEW, detail=long)])
    row = next(line for line in _printed_report(report).splitlines() if line.startswith("│ c "))
    cell = row.strip("│").split("│")[-1].strip()
    assert cell.endswith(" ...") and len(cell) <= 80 and cell.startswith("word word")


def test_the_report_without_scope_options_or_known() -> None:
    text = _printed_report(_report([_outcome(Outcome.PASS)], forms=["lists"], version="2.0"))
    assert "m:f (2.0) vs balance.karmarkar_karp" in text
    scope = next(line for line in text.splitlines() if line.startswith("scope:"))
    assert scope == "scope: input forms lists"
    assert "known divergences" not in text and "outside the adapter's domain" not in text
    assert "warnings raised" not in text and "new divergence:" not in text


def test_the_known_divergences_table() -> None:
    known = [_known(s, f"k{i}") for i, s in enumerate(KnownStatus)]
    known[0].update(too_broad=True, diverged=2, matched=3, confirmed=2, example="Case(1)",
                    otherwise="Case(2) -> raised KeyError", doc="the first")
    broad_never = dict(_known(KnownStatus.NOT_MET, "kb"), too_broad=True, diverged=0)
    report = _report([_outcome(Outcome.PASS)], [*known, broad_never])
    text = _printed_report(report)
    assert ("known divergences (their inputs set aside so the search goes on; confirmed = "
            "diverged the way described)") in text
    said = {KnownStatus.CONFIRMED: "confirmed",
            KnownStatus.NOT_MET: "not met (no input matched: not tested)",
            KnownStatus.NOT_REPRODUCED: "not reproduced (matched, the target agreed every "
                                        "time: fixed upstream?)",
            KnownStatus.DIVERGED_OTHERWISE: "DIVERGED OTHERWISE (new)"}
    lines = text.splitlines()
    for i, k in enumerate(known):
        row = next(line for line in lines if line.startswith(f"│ k{i} "))
        cells = [c.strip() for c in row.strip("│").split("│")]
        broad = " (too broad: matched more than diverged)" if i == 0 else ""
        assert cells == [f"k{i}", "errors", str(k["matched"]), str(k["diverged"]),
                         str(k["confirmed"]), said[k["status"]] + broad], row
    row = next(line for line in lines if line.startswith("│ kb "))
    assert row.strip("│").split("│")[-1].strip() == said[KnownStatus.NOT_MET]
    assert "  k0: the first" in lines and "  k1: d" in lines
    assert "    smallest input confirming it: Case(1)" in lines
    assert "    NEW: diverged another way than described, smallest: Case(2) -> raised KeyError" \
        in lines
    assert text.count("smallest input confirming it") == 1 and text.count("NEW: diverged") == 1


def test_the_warnings_of_each_check() -> None:
    said = []
    first = dataclasses.replace(_outcome(Outcome.PASS, "c1"), warnings_not_kept=3,
                                warnings=[SeenWarning("UserWarning", "w", "f.py:1", 2)])
    runner.print_warnings(_report([first, _outcome(Outcome.PASS, "c2")]), said.append)
    assert said[0].startswith("warnings raised by the target: 5,")
    assert said[1].startswith("  c1: ") and said[2].startswith("  c1: 3 more")
    assert len(said) == 3


# --------------------------------------------------------------------------- what survivors asked


def _header(text: str, first: str) -> list[str]:
    row = next(line for line in text.splitlines() if line.startswith(f"┃ {first} "))
    return [c.strip() for c in row.strip("┃").split("┃")]


def _raw_cells(text: str, first: str) -> list[str]:
    row = next(line for line in text.splitlines() if line.startswith(f"│ {first} "))
    return row[1:-1].split("│")


def test_the_tables_columns_and_their_alignment() -> None:
    outcomes = [CheckOutcome("a", RECORD, "c", Outcome.PASS, examples=1, seconds=0.25,
                             detail="x"),
                CheckOutcome("a", RECORD, "a_longer_check", Outcome.NOT_TESTED, examples=12345,
                             seconds=12345.0, detail="a longer detail")]
    known = dict(_known(KnownStatus.CONFIRMED, "k"), kind="e")
    wide = dict(_known(KnownStatus.NOT_MET, "a_longer_divergence"), kind="errors and more",
                matched=123456789, diverged=123456789, confirmed=123456789)
    text = _printed_report(_report(outcomes, [known, wide]))
    assert _header(text, "check") == ["check", "result", "examples", "time", "detail"]
    assert _header(text, "divergence") == ["divergence", "kind", "matched", "diverged",
                                           "confirmed", "status"]
    check, result, examples, time, detail = _raw_cells(text, "c")
    assert check.startswith(" c ") and result.startswith(" PASS ") and detail.startswith(" x ")
    assert examples.endswith(" 1 ") and examples.strip() == "1"
    assert time.endswith(" 0.2s ") and time.strip() == "0.2s"
    name, kind, matched, diverged, confirmed, status = _raw_cells(text, "k")
    assert name.startswith(" k ") and kind.startswith(" e ") and status.startswith(" confirmed")
    assert all(cell.endswith(" 1 ") and cell.strip() == "1"
               for cell in (matched, diverged, confirmed))


def test_the_reports_own_lines_are_plain_text_never_wrapped() -> None:
    import io

    doc = "a [bold]known[/bold] divergence, 12 'quoted' " + "long " * 60
    report = _report([_outcome(Outcome.PASS)], [dict(_known(KnownStatus.CONFIRMED), doc=doc)],
                     unsupported=4, forms=["lists"])
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="standard", width=100)
    runner.print_report(report, "dev", console=console)
    lines = out.getvalue().splitlines()
    assert f"  k: {doc}" in lines  # markup kept as written, one line whatever its length
    assert "4 generated inputs were outside the adapter's domain (not run)" in lines  # no colour


def test_a_failures_lines_have_no_replay_without_a_replayer() -> None:
    report = _report([CheckOutcome("a", RECORD, "c", Outcome.NEW, detail="it differs",
                                   minimal="f(1)")])
    text = _printed_report(report)
    assert "minimal case: f(1)" in text and "replay:" not in text


def test_a_failures_detail_is_shortened_to_80_characters() -> None:
    report = _report([CheckOutcome("a", RECORD, "c", Outcome.NEW, detail="a" * 75 + " b c d")])
    cell = _raw_cells(_printed_report(report), "c")[-1].strip()
    assert cell == "a" * 75 + " ..."


def test_a_layout_passed_by_position_traces_to_the_default() -> None:
    def positional(values, k, layout="zigzag"):
        return values

    info = _info(reference=positional)
    assert runner.traces_to(info, "equivalence", Case(([1], 1, "chunked")), "") == (
        "layout", "zigzag")
    assert runner.traces_to(info, "equivalence", Case(([1], 1, "zigzag")), "") == ()


def test_a_missing_key_is_named_as_it_is_spelled() -> None:
    detail = "keys differ: missing ['X_ids'], unexpected []"
    assert runner.traces_to(_info(), "equivalence", None, detail) == ("not_provided", "X_ids")


def test_a_hint_of_one_option_adds_only_that_one() -> None:
    hint = runner.scope_hint([_custom_report(traces=[("layout", "zigzag")])], "m:f")
    assert hint.splitlines()[-1] == ("To check what it does support: batchproof check --impl m:f "
                                     "--op balance.karmarkar_karp --layout zigzag")
    hint = runner.scope_hint([_custom_report(traces=[("not_provided", "a")])], "m:f")
    assert hint.splitlines()[-1].endswith("--op balance.karmarkar_karp --not-provided a")


def test_the_note_names_every_missing_need(capsys) -> None:
    needy = _adapter("fw.needy", needs=("no-such-a", "no-such-b"), distribution="hypothesis")
    assert runner.with_their_needs([needy, _adapter("fw.plain")])[0].name == "fw.plain"
    assert "it needs no-such-a, no-such-b, not installed" in capsys.readouterr().err


def test_one_adapter_that_does_not_fit() -> None:
    from importlib.metadata import version

    with pytest.raises(ValueError, match=rf"^no adapter fits hypothesis {version('hypothesis')}; "
                                         r"adapters: fw.old \(<1\)$"):
        runner.fitting([_adapter("fw.old", distribution="hypothesis", versions="<1")])


def test_the_spinner_names_the_adapter_and_its_target(monkeypatch) -> None:
    said = []

    def status(console, text):
        said.append(text)
        return contextlib.nullcontext()

    monkeypatch.setattr(runner.terminal, "status", status)
    monkeypatch.setattr(runner, "check_adapter", lambda *args, **kwargs: "the report")
    assert runner.run_adapter(_adapter("fw.one"), Scope()) == "the report"
    assert said == [f"checking fw.one ({REFERENCE})"]


def test_a_pin_in_two_forms_not_given_names_both() -> None:
    pin = Pin("t", Case(([1, 2], 2)), "why", forms=("x", "y"))
    info = dataclasses.replace(registry.get(RECORD), pins=[pin])
    plain = runner.adapter_view(STAND_IN)
    assert runner._set_aside_pin(STAND_IN, info, "pin:t", _verl_like, plain) == (
        Outcome.SKIPPED, "input in forms the target is not given (x, y)")


def test_the_adapter_is_narrowed_to_the_candidates_signature(monkeypatch) -> None:
    seen = []

    def within(adapter, candidate):
        seen.append((adapter, candidate))
        return dataclasses.replace(adapter, supports=lambda call: False)

    monkeypatch.setattr(runner, "within_its_signature", within)
    report = runner.check_adapter(STAND_IN, _verl_like, checks=["equivalence"], **FEW)
    assert seen == [(STAND_IN, _verl_like)]
    assert _statuses(report) == {"equivalence": Outcome.NOT_TESTED}  # the narrowed domain


def test_the_target_is_completed_with_the_records_reference(monkeypatch) -> None:
    seen = []

    def completed(candidate, reference, not_provided):
        seen.append((candidate, reference, not_provided))
        return candidate

    monkeypatch.setattr(runner, "completed", completed)
    partial = dataclasses.replace(STAND_IN, not_provided=("x",))
    runner.check_adapter(partial, _verl_like, checks=["pin:zeros_and_ties"], **FEW)
    assert seen == [(_verl_like, registry.get(RECORD).reference, ("x",))]


def test_without_a_candidate_the_adapters_own_is_checked() -> None:
    report = runner.check_adapter(STAND_IN, checks=["pin:zeros_and_ties", "pin:k_greater_than_n"],
                                  **FEW)
    assert _statuses(report) == {"pin:zeros_and_ties": Outcome.PASS,
                                 "pin:k_greater_than_n": Outcome.PASS}  # the reference agrees


def test_a_misfits_report_names_the_adapter() -> None:
    def no_keywords(values, k, **kwargs):
        if kwargs:
            raise TypeError("f() got an unexpected keyword argument 'equal_size'")
        return karmarkar_karp(values, k)

    narrowed = dataclasses.replace(STAND_IN, scope=Scope(layout="x"))
    report = runner.check_adapter(narrowed, no_keywords, checks=["errors"], **FEW)
    assert report.misfit and report.record == RECORD and report.version == "-"
    assert report.scope == Scope(layout="x") and report.forms == []
    assert [(o.adapter, o.record, o.check) for o in report.outcomes] == [
        ("stand_in.kk", RECORD, "errors")]


@pytest.fixture
def record_with(monkeypatch):
    """The runner sees the record with `changes` (batchproof's registry untouched)."""
    def use(**changes):
        changed = dataclasses.replace(registry.get(RECORD), **changes)
        monkeypatch.setattr(runner, "registry", SimpleNamespace(get=lambda name: changed))
        return changed

    return use


def test_the_adapted_record_keeps_the_records_targets_and_its_missing_invalid(record_with) -> None:
    def targets(case):
        return {"n": float(len(case.args[0]))}

    record_with(targets=targets, invalid=None)
    adapted = runner.adapted_record(dataclasses.replace(STAND_IN, invalid=None), _verl_like,
                                    KnownTally())
    assert adapted.targets is targets and adapted.invalid is None


def test_a_skipped_pin_leaves_the_pins_after_it() -> None:
    info = registry.get(RECORD)
    first = info.pins[0].name
    skip = dataclasses.replace(STAND_IN, skip={f"pin:{first}": "no"})
    names = [p.name for p in runner.adapted_record(skip, _verl_like, KnownTally()).pins]
    assert names == [p.name for p in info.pins if p.name not in (first, "k_greater_than_n")]


def test_without_its_own_invalid_inputs_the_adapter_is_given_the_records() -> None:
    report = runner.check_adapter(dataclasses.replace(STAND_IN, invalid=None), _verl_like,
                                  checks=["errors"], **FEW)
    (known,) = report.known
    assert known["matched"] > 0 and known["example"].startswith("BadCase(Case(")


def test_a_new_divergences_traces_are_of_its_failing_input_and_whole_message(
        monkeypatch) -> None:
    failing = Case(([9, 9], 2))
    traced = []

    def run_check(info, check, candidate, *, stats, **kwargs):
        stats.examples += 3
        stats.failing = failing
        stats.notes.append("a note of the search")
        err = AssertionError("it differs")
        err.add_note("a note of the failure")
        raise err

    def traces_to(info, check, case, detail):
        traced.append((info, check, case, detail))
        return ("forms", "lists")

    monkeypatch.setattr(runner, "run_check", run_check)
    monkeypatch.setattr(runner, "traces_to", traces_to)
    (outcome,) = runner.check_adapter(STAND_IN, _verl_like, checks=["equivalence"],
                                      **FEW).outcomes
    assert outcome.status == Outcome.NEW and outcome.traces == ("forms", "lists")
    assert "it differs" in outcome.detail and "a note of the search" not in outcome.detail
    ((info, check, case, detail),) = traced
    assert info is registry.get(RECORD) and check == "equivalence" and case is failing
    assert outcome.notes == ["a note of the failure"]
    assert detail == f"{outcome.detail}\na note of the failure"
    assert outcome.examples == 3 and 0 <= outcome.seconds < 60


def test_the_report_says_the_outputs_compared_and_the_scope() -> None:
    scoped = dataclasses.replace(STAND_IN, not_provided=("x",), compared=("y", "z"),
                                 scope=Scope(layout="left"))
    report = runner.check_adapter(scoped, _verl_like, checks=["pin:zeros_and_ties"], **FEW)
    assert report.not_provided == ["x"] and report.compared == ["y", "z"]
    assert report.scope == Scope(layout="left")


def test_the_adapters_comparator_is_blind_to_what_it_does_not_provide(record_with) -> None:
    seen = []

    def compare(expected, actual, **kwargs):
        seen.append((sorted(expected.keys()), sorted(actual.keys())))

    def targets(case):
        return {}

    record_with(compare=compare, targets=targets)
    view = runner.adapter_view(dataclasses.replace(STAND_IN, not_provided=("b",)))
    view.compare(_td(a=1, b=2, c=3), _td(a=1, b=2, c=3))
    view = runner.adapter_view(dataclasses.replace(STAND_IN, compared=("a",)))
    view.compare(_td(a=1, b=2, c=3), _td(a=1, b=2, c=3))
    assert seen == [(["a", "c"], ["a", "c"]), (["a"], ["a"])]
    assert view.targets is None  # the record's `hypothesis.target` calls are the search's own


def _by_position(width, *, out=None, device=None):
    td = TensorDict({"a": torch.zeros(width)}, batch_size=[width], device=device)
    return td if out is None else out


def _oracle_by_position(width, **kwargs):
    return TensorDict({"a": torch.zeros(width), "b": torch.arange(width)}, batch_size=[width])


def test_completion_passes_the_arguments_on_and_keeps_the_targets_tensors() -> None:
    target = runner.completed(_by_position, _oracle_by_position, ("z", "b"))
    out = target(3)
    assert out["b"].tolist() == [0, 1, 2] and out.batch_size == torch.Size([3])
    own = _by_position(3)
    completed = target(3, out=own)
    assert completed["a"] is own["a"]  # the target's own tensor, not a copy
    on_cpu = target(2, device="cpu")
    assert on_cpu["b"].tolist() == [0, 1] and on_cpu["b"].device == torch.device("cpu")


def test_the_records_example_is_probed_too(record_with) -> None:
    def target(values, k, *, equal_size=False):
        raise TypeError("f() got an unexpected keyword argument 'equal_size'")

    record_with(pins=[], example=Case(([5, 6, 7], 2)))
    assert runner.fit_problem(STAND_IN, target) == ("TypeError: f() got an unexpected keyword "
                                                    "argument 'equal_size'")
    record_with(pins=[], example=None)
    assert runner.fit_problem(STAND_IN, target) == ""


def test_the_scope_line_lists_every_output_and_skipped_check() -> None:
    outcomes = [_outcome(Outcome.SKIPPED, "errors"), _outcome(Outcome.PASS, "equivalence"),
                _outcome(Outcome.SKIPPED, "pin:p")]
    report = _report(outcomes, forms=["lists"], compared=["a", "b"])
    scope = next(line for line in _printed_report(report).splitlines()
                 if line.startswith("scope:"))
    assert scope == "scope: input forms lists; outputs compared: a, b only; skipped: errors, pin:p"


@pytest.mark.parametrize("status", [Outcome.NEW, Outcome.ERROR])
def test_a_failure_with_an_empty_detail_is_still_reported(status: Outcome) -> None:
    """A NEW or ERROR outcome whose detail is empty gets an empty cell, not an IndexError."""
    report = _report([CheckOutcome("a", RECORD, "c", status, detail="", minimal="f(1)")])
    text = _printed_report(report)
    assert "minimal case: f(1)" in text and _raw_cells(text, "c")[-1].strip() == ""

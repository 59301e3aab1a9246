"""`batchproof.checks` on its own: the check runner's counting and its verdicts, on one cheap record.

A check that ran no example must not pass, and the counts a report shows are what ran: so
`CheckStats.examples` must count each example the candidate was run on (pins included) and nothing
else, `stats.failing` must be the case as it was before the candidate could change it, and each
way a candidate can fail (a wrong output, an accepted bad input, another exception type or
message, a mutated input) must raise. These are the killers of `batchproof mutate --mutmut
--harness checks`: small searches (a few examples each) on `balance.karmarkar_karp`.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings
from hypothesis import errors as hypothesis_errors

from batchproof import checks, registry
from batchproof.checks import CheckStats, HarnessError, OutsideScope
from batchproof.compare import Mismatch
from batchproof.reference.balance import karmarkar_karp
from batchproof.registry import BadCase, Case

INFO = registry.get("balance.karmarkar_karp")
FEW = settings(max_examples=6, derandomize=True, database=None, deadline=None,
               phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))


def _counting(function=karmarkar_karp):
    calls: list[tuple] = []

    def candidate(*args, **kwargs):
        calls.append(args)
        return function(*args, **kwargs)

    return candidate, calls


# --------------------------------------------------------------------------- counting


def test_a_pin_is_one_example() -> None:
    stats = checks.run_check(INFO, "pin:spec_example_1_to_8", karmarkar_karp)
    assert stats.examples == 1 and stats.failing is None and stats.notes == []
    again = checks.run_check(INFO, "pin:spec_example_10_1_1", karmarkar_karp, stats=stats)
    assert again is stats and stats.examples == 2  # counts add up in a given stats


def test_a_failing_pin_counts_and_names_its_case() -> None:
    pin = next(p for p in INFO.pins if p.name == "spec_example_1_to_8")
    stats = CheckStats()
    with pytest.raises(Mismatch) as raised:
        checks.run_check(INFO, "pin:spec_example_1_to_8", lambda *a, **k: [[0]], stats=stats)
    assert str(raised.value).startswith("pin 'spec_example_1_to_8' failed (")
    assert stats.examples == 1 and stats.failing is pin.case


def test_the_errors_check_counts_each_example_the_candidate_ran() -> None:
    candidate, calls = _counting()
    stats = checks.run_check(INFO, "errors", candidate, settings=FEW)
    bad_pins = [p for p in INFO.pins if isinstance(p.case, BadCase)]
    assert stats.examples == len(calls) > len(bad_pins)  # the pins, then the drawn ones
    assert stats.examples <= 6 + len(bad_pins) and stats.failing is None


def test_the_equivalence_check_counts_each_example_once_for_all_its_forms() -> None:
    candidate, calls = _counting()
    stats = checks.run_check(INFO, "equivalence", candidate, settings=FEW)
    assert stats.examples > 0 and len(calls) == 2 * stats.examples  # lists and tensor forms


def test_a_property_check_counts_its_examples() -> None:
    candidate, calls = _counting()
    stats = checks.run_check(INFO, "property:partition", candidate, settings=FEW)
    assert stats.examples > 0 and len(calls) == stats.examples


def test_a_failing_search_keeps_the_case_as_it_was_before_the_call() -> None:
    def mutating(values, k, **kwargs):
        out = karmarkar_karp(values, k, **kwargs)
        if isinstance(values, list):
            values.append(99)  # changes its input after computing
        return out

    stats = CheckStats()
    with pytest.raises(Mismatch, match="input was mutated by the call"):
        checks.run_check(INFO, "equivalence", mutating, settings=FEW, stats=stats)
    assert stats.examples >= 1
    assert 99 not in stats.failing.args[0]  # the call as it was made


def test_the_minimal_case_leaves_out_a_keyword_it_fails_without() -> None:
    def wrong(values, k, *, equal_size=False):  # wrong whatever equal_size says
        return [list(range(len(values)))] + [[] for _ in range(k - 1)]

    stats = CheckStats()
    with pytest.raises(Mismatch) as raised:
        checks.run_check(INFO, "pin:spec_example_1_to_8_equal", wrong, stats=stats)
    assert stats.failing.kwargs == {"equal_size": True}  # pins keep their case as written
    stats = CheckStats()
    strict = settings(FEW, phases=[Phase.generate])
    with pytest.raises(Mismatch) as raised:
        checks.run_check(INFO, "equivalence", wrong, settings=strict, stats=stats)
    assert "equal_size" not in stats.failing.kwargs
    notes = getattr(raised.value, "__notes__", [])
    dropped = [n for n in notes if n.startswith("the minimal case leaves out")]
    assert all(n == "the minimal case leaves out equal_size: it fails the same way without it "
                    "(a replay runs the case as drawn)" for n in dropped)


# --------------------------------------------------------------------------- names


def test_searched_checks_and_their_test_names() -> None:
    assert checks.searched("equivalence") and checks.searched("errors")
    assert checks.searched("property:partition")
    assert not checks.searched("pin:x") and not checks.searched("properties")
    assert checks.check_test_name(INFO, "property:partition") == (
        "balance__karmarkar_karp__property__partition")
    assert checks.fuzz_node_id(INFO, "errors") == (
        "fuzz_targets.py::test_balance__karmarkar_karp__errors")


def test_given_test_is_for_searched_checks_only() -> None:
    with pytest.raises(ValueError) as raised:
        checks.given_test(INFO, "pin:spec_example_1_to_8")
    assert str(raised.value) == ("'pin:spec_example_1_to_8' of balance.karmarkar_karp is not a "
                                 "searched check (a pin is one example: run_check runs it)")
    stats = CheckStats()
    test = checks.given_test(INFO, "errors", karmarkar_karp, stats=stats)
    assert test.__name__ == "balance__karmarkar_karp__errors"
    FEW(test)()
    assert stats.examples > 0


def test_unknown_checks_pins_and_properties_are_usage_errors() -> None:
    with pytest.raises(ValueError, match=r"^unknown check 'nope' for balance\.karmarkar_karp; "):
        checks.run_check(INFO, "nope", karmarkar_karp)
    with pytest.raises(ValueError) as raised:
        checks.run_check(INFO, "pin:nope", karmarkar_karp)
    assert str(raised.value) == "balance.karmarkar_karp has no pin 'nope'"
    with pytest.raises(ValueError) as raised:
        checks.run_check(INFO, "property:nope", karmarkar_karp)
    assert str(raised.value) == "balance.karmarkar_karp has no property 'nope'"


# --------------------------------------------------------------------------- error parity


BAD = BadCase(Case(([1, 2], 3), {}), ValueError, "k > n")


def test_error_parity_passes_on_the_same_exception() -> None:
    checks.check_error_parity(INFO, BAD, karmarkar_karp, messages=True)


def test_error_parity_catches_each_way_a_candidate_can_differ() -> None:
    def accepts(values, k, **kw):
        return [[0]]

    with pytest.raises(Mismatch) as raised:
        checks.check_error_parity(INFO, BAD, accepts)
    assert str(raised.value) == (
        "balance.karmarkar_karp: the candidate accepted bad input (k > n); the reference raised "
        "ValueError: k=3 is larger than the number of values (2)")

    def other_type(values, k, **kw):
        raise TypeError("no")

    with pytest.raises(Mismatch) as raised:
        checks.check_error_parity(INFO, BAD, other_type)
    assert str(raised.value) == (
        "balance.karmarkar_karp: exception types differ on bad input (k > n): reference raised "
        "ValueError: k=3 is larger than the number of values (2); candidate raised "
        "TypeError: no")

    class Narrower(ValueError):
        pass

    def subclass(values, k, **kw):
        raise Narrower("k=3 is larger than the number of values (2)")

    checks.check_error_parity(INFO, BAD, subclass)  # another candidate owes the type only
    with pytest.raises(Mismatch, match="exception types differ"):
        checks.check_error_parity(INFO, BAD, subclass, messages=True)  # impl owes the very type

    def other_message(values, k, **kw):
        raise ValueError("too many parts")

    checks.check_error_parity(INFO, BAD, other_message)
    with pytest.raises(Mismatch) as raised:
        checks.check_error_parity(INFO, BAD, other_message, messages=True)
    assert str(raised.value) == (
        "balance.karmarkar_karp: error messages differ on bad input (k > n):\n"
        "  reference: ValueError: k=3 is larger than the number of values (2)\n"
        "  candidate: ValueError: too many parts")


def test_a_bad_case_the_reference_accepts_is_batchproofs_error() -> None:
    wrong = BadCase(Case(([1, 2], 1), {}), ValueError, "not bad at all")
    with pytest.raises(HarnessError, match=r"^registry error: the reference raised None, not "
                                           r"ValueError, for BadCase"):
        checks.check_error_parity(INFO, wrong, karmarkar_karp)
    other = BadCase(BAD.case, KeyError, "wrong type declared")
    with pytest.raises(HarnessError, match="the reference raised ValueError"):
        checks.check_error_parity(INFO, other, karmarkar_karp)


def test_as_on_cpu_renames_the_run_device_only() -> None:
    assert checks._as_on_cpu("x is on cuda:0", "cpu") == "x is on cuda:0"
    assert checks._as_on_cpu("x is on cuda:0 and cuda", "cuda") == "x is on cpu and cpu"
    assert checks._as_on_cpu("x is on meta, not cudax", "meta") == "x is on cpu, not cudax"


# --------------------------------------------------------------------------- pieces


def test_scoped_refuses_calls_outside_the_scope() -> None:
    assert checks._scoped(len, None) is len
    scoped = checks._scoped(lambda *a: "ran", lambda case: case.args[0] < 3)
    assert scoped(2) == "ran"
    with pytest.raises(OutsideScope) as raised:
        scoped(5)
    assert str(raised.value) == ("the property calls the function with Case(5), outside the "
                                 "scope it is checked on")


def test_same_failure_and_headline() -> None:
    first = Mismatch("loss_mask: values differ: first mismatch at [0]", path="loss_mask")
    assert checks._headline(first) == "loss_mask: values differ"
    same = Mismatch("loss_mask: values differ: first mismatch at [3]\nrow 3", path="loss_mask")
    assert checks._same_failure(first, same)
    assert not checks._same_failure(first, Mismatch("loss_mask: shape differs: x",
                                                    path="loss_mask"))
    assert not checks._same_failure(first, Mismatch("ids: values differ: y", path="ids"))
    assert not checks._same_failure(first, HarnessError("ours"))
    assert not checks._same_failure(ValueError("a"), TypeError("a"))
    assert checks._same_failure(ValueError("a"), ValueError("b"))


def test_optional_parameters() -> None:
    def f(a, b=1, *, c, d=None):
        return a

    assert checks._optional_parameters(f) == {"b", "d"}
    assert checks._optional_parameters(5) == set()


def test_copies_are_deep_and_keep_types() -> None:
    from tensordict import TensorDict

    rows = [[1, 2], (3,)]
    tensor = torch.tensor([-0.0, 1.0])
    td = TensorDict({"x": torch.tensor([-0.0])}, batch_size=[1], device="cpu")
    case = Case((rows, tensor), {"m": {"k": [4]}, "td": td, "n": 5}, "lbl")
    copied = checks._copy(case)
    assert copied.label == "lbl" and copied.args[0] == rows and type(copied.args[0][1]) is tuple
    assert copied.args[0] is not rows and copied.args[0][0] is not rows[0]
    assert copied.args[1] is not tensor and torch.equal(copied.args[1], tensor)
    assert copied.kwargs["m"] == {"k": [4]} and copied.kwargs["m"]["k"] is not case.kwargs["m"]["k"]
    assert copied.kwargs["td"]["x"].signbit().item()  # -0.0 kept through a device TensorDict
    assert copied.kwargs["td"] is not td
    bad = checks._copy(BadCase(case, ValueError, "why"))
    assert bad.raises is ValueError and bad.why == "why" and bad.case.args[0] is not rows
    assert checks._on_cpu((torch.zeros(1), [torch.ones(1)], 3))[2] == 3


def test_the_references_failure_on_a_valid_case_is_batchproofs() -> None:
    with pytest.raises(HarnessError) as raised:
        checks._oracle(INFO, Case(([1], 5), {}))
    assert str(raised.value).startswith(
        "registry error: the reference balance.karmarkar_karp raised ValueError: k=5 is larger "
        "than the number of values (1) on an input its strategy calls valid: Case(")


def test_a_comparator_that_fails_is_batchproofs_error() -> None:
    import dataclasses

    def broken(*args, **kwargs):
        raise KeyError("no such field")

    info = dataclasses.replace(INFO, compare=broken)
    with pytest.raises(HarnessError) as raised:
        checks.check_equivalence(info, Case(([3, 1, 2], 2), {}), karmarkar_karp)
    assert str(raised.value) == (
        "balance.karmarkar_karp's comparator failed on the candidate's output (the 'lists' "
        "input form): KeyError: 'no such field'")


def test_a_candidate_that_changes_a_pin_is_reported_and_leaves_the_pin_as_written() -> None:
    """Bug found by this file: the pin's case was handed to the candidate itself, so a candidate
    that appends to its input changed the registry's pin for the rest of the process, and the
    replay of its failure then called batchproof's reference on the changed (invalid) pin: a
    `HarnessError` (exit 3) instead of the candidate's mutation."""
    pin = next(p for p in INFO.pins if p.name == "spec_example_1_to_8_equal")
    written = repr(pin.case)

    def appending(values, k, **kwargs):
        out = karmarkar_karp(values, k, **kwargs)
        if isinstance(values, list):
            values.append(99)
        return out

    with pytest.raises(Mismatch, match="input was mutated by the call"):
        checks.run_check(INFO, "pin:spec_example_1_to_8_equal", appending)
    assert repr(pin.case) == written
    with pytest.raises(Mismatch, match="input was mutated by the call"):
        checks.run_check(INFO, "equivalence", appending, settings=FEW)
    assert repr(pin.case) == written


# --------------------------------------------------------------------------- the impl default


def test_without_a_candidate_the_records_impl_is_checked_with_messages(monkeypatch) -> None:
    """No candidate: the record's impl/ function, looked up when called (a patched module is
    honoured), owes the reference's very messages (another candidate owes only the type)."""
    import batchproof.impl.balance

    def worded(values, k, **kwargs):
        if isinstance(k, int) and isinstance(values, list) and k > len(values):
            raise ValueError("k too large")
        return karmarkar_karp(values, k, **kwargs)

    monkeypatch.setattr(batchproof.impl.balance, "karmarkar_karp", worded)
    info = INFO
    with pytest.raises(Mismatch, match="error messages differ"):
        checks.run_check(info, "pin:k_greater_than_n")
    checks.run_check(info, "pin:k_greater_than_n", worded)  # a candidate: the type is enough
    with pytest.raises(Mismatch, match="error messages differ"):
        checks.run_check(info, "errors", settings=FEW)
    checks.run_check(info, "errors", worded, settings=FEW)
    checks.run_check(info, "equivalence", settings=FEW)
    checks.run_check(info, "property:partition", settings=FEW)


# --------------------------------------------------------------------------- seed and replay


def _drawn(seed: int | None) -> list:
    seen: list = []

    def candidate(values, k, **kwargs):
        seen.append((repr(values), k, kwargs))
        return karmarkar_karp(values, k, **kwargs)

    random = settings(max_examples=5, database=None, deadline=None, phases=[Phase.generate],
                      suppress_health_check=list(HealthCheck))
    checks.run_check(INFO, "errors", candidate, settings=random, seed=seed)
    return seen


def test_a_seed_fixes_the_search() -> None:
    assert _drawn(1) == _drawn(1)
    assert _drawn(1) != _drawn(2)


def test_a_failures_blob_replays_it_and_a_fixed_one_says_so() -> None:
    from batchproof.report import _BLOB

    def accepts(values, k, **kwargs):
        return [[0]]

    blobbed = settings(FEW, phases=[Phase.generate, Phase.shrink], print_blob=True)
    stats = CheckStats()
    with pytest.raises(Mismatch) as raised:
        checks.run_check(INFO, "errors", accepts, settings=blobbed, stats=stats)
    version, blob = next(m.groups() for n in raised.value.__notes__ for m in [_BLOB.search(n)]
                         if m)
    failing = stats.failing
    for given in (blob, blob.encode()):
        again = CheckStats()
        with pytest.raises(Mismatch):
            checks.run_check(INFO, "errors", accepts, stats=again, reproduce=(version, given))
        assert repr(again.failing) == repr(failing) and again.examples == 1
    fixed = checks.run_check(INFO, "errors", karmarkar_karp, reproduce=(version, blob))
    assert fixed.notes == ["the replayed failure no longer reproduces: it passes now"]
    assert fixed.examples == 1


def test_the_database_key_is_the_checks_own() -> None:
    errors = checks.given_test(INFO, "errors")._hypothesis_internal_database_key
    assert errors == checks.given_test(INFO, "errors")._hypothesis_internal_database_key
    assert errors != checks.given_test(INFO, "equivalence")._hypothesis_internal_database_key
    assert isinstance(errors, bytes)


def test_a_kept_keyword_is_one_the_adapters_domain_admits() -> None:
    def wrong(values, k, *, equal_size=False):
        return [list(range(len(values)))] + [[] for _ in range(k - 1)]

    stats = CheckStats()
    keeping = settings(FEW, phases=[Phase.generate])
    with pytest.raises(Mismatch):
        checks.run_check(INFO, "equivalence", wrong, settings=keeping, stats=stats,
                         admits=lambda case: "equal_size" in case.kwargs)
    assert "equal_size" in stats.failing.kwargs


# --------------------------------------------------------------------------- small pieces


def test_headline_is_the_first_lines_first_two_fields() -> None:
    assert checks._headline(Mismatch("ids: values differ: at [0]: x: y\nrow 0: p: q")) == (
        "ids: values differ")
    assert checks._headline(Mismatch("ids: shape\nrow 1: p=1\n(. pad)")) == "ids: shape"


def test_scoped_passes_keywords_and_cuts_the_case() -> None:
    scoped = checks._scoped(lambda *a, **k: (a, k), lambda case: "no" not in case.kwargs)
    assert scoped(1, x=2) == ((1,), {"x": 2})
    long = list(range(300))
    with pytest.raises(OutsideScope) as raised:
        scoped(long, no=1)
    assert str(raised.value) == (f"the property calls the function with "
                                 f"{Case((long,), {'no': 1}).short(200)}, outside the scope it "
                                 "is checked on")
    assert Case((long,), {"no": 1}).short(200) != Case((long,), {"no": 1}).short(201)


def test_clone_deep_copies_what_it_does_not_know() -> None:
    import types

    inner = types.SimpleNamespace(rows=[[1]])
    copied = checks._clone(inner)
    assert copied.rows == [[1]] and copied.rows is not inner.rows


# --------------------------------------------------------------------------- properties on pins


def _with(properties=(), pins=()):
    """balance.karmarkar_karp with stand-in properties and pins."""
    import dataclasses

    return dataclasses.replace(INFO, properties=tuple(properties), pins=tuple(pins))


def _property(check, metamorphic=False):
    from batchproof.registry import Property

    return Property(check.__name__, check, metamorphic=metamorphic)


def test_a_pin_runs_every_property_and_its_expectation_on_the_call_as_made() -> None:
    from batchproof.registry import Pin

    seen: list = []

    def looks(case, output):
        seen.append(("looks", case.args, output))

    def calls_again(case, output, candidate):
        seen.append(("again", candidate(case.args[0][::-1], case.args[1])))

    def expects(case, output):
        seen.append(("expect", case.args, output))

    pin = Pin("p", Case(([3, 1, 2], 2), {}), "why", expect=expects)
    bare = Pin("bare", Case(([1, 1], 2), {}), "no expectation")
    info = _with([_property(looks), _property(calls_again, metamorphic=True)], [pin, bare])
    stats = checks.run_check(info, "pin:p", karmarkar_karp)
    output = karmarkar_karp([3, 1, 2], 2)
    assert seen == [("looks", ([3, 1, 2], 2), output),
                    ("again", karmarkar_karp([2, 1, 3], 2)),
                    ("expect", ([3, 1, 2], 2), output)]
    assert stats.examples == 1 and stats.notes == []
    seen.clear()
    checks.run_check(info, "pin:bare", karmarkar_karp)  # no expectation to call
    assert [s[0] for s in seen] == ["looks", "again"]


def test_a_pins_property_outside_the_scope_is_left_out_and_said_so() -> None:
    from batchproof.registry import Pin

    def calls_again(case, output, candidate):
        candidate(case.args[0], 1)

    info = _with([_property(calls_again, metamorphic=True)],
                 [Pin("p", Case(([3, 1, 2], 2), {}), "why")])
    stats = checks.run_check(info, "pin:p", karmarkar_karp,
                             in_scope=lambda case: case.args[1] == 2)
    assert stats.notes == ["property calls_again not checked on this pin: it calls the function "
                           "outside the scope"]
    quiet = checks.run_check(info, "pin:p", karmarkar_karp, in_scope=lambda case: False)
    assert len(quiet.notes) == 1
    checks.check_pin(info, "p", karmarkar_karp, in_scope=lambda case: False)  # no notes: fine


def test_a_pins_failing_property_names_the_pin_and_the_property() -> None:
    from batchproof.registry import Pin

    def fails(case, output):
        raise AssertionError("parts unbalanced")

    def crashes(case, output):
        raise KeyError("k")

    def ours(case, output):
        raise HarnessError("a broken property")

    pin = Pin("p", Case(([3, 1, 2], 2), {}), "the why")
    with pytest.raises(Mismatch) as raised:
        checks.run_check(_with([_property(fails)], [pin]), "pin:p", karmarkar_karp)
    # the pin is named once (it was twice: "pin 'p' failed (the why):\npin 'p' failed ...")
    assert str(raised.value) == "pin 'p' failed (the why):\nproperty fails:\nparts unbalanced"
    with pytest.raises(KeyError) as raised:
        checks.run_check(_with([_property(crashes)], [pin]), "pin:p", karmarkar_karp)
    assert raised.value.__notes__ == ["raised while checking the property crashes on pin 'p'"]
    with pytest.raises(HarnessError, match="^a broken property$"):
        checks.run_check(_with([_property(ours)], [pin]), "pin:p", karmarkar_karp)


def test_a_property_search_calls_the_candidate_again_within_the_scope() -> None:
    calls: list = []

    def calls_again(case, output, candidate):
        calls.append(candidate(case.args[0], case.args[1]))

    info = _with([_property(calls_again, metamorphic=True)])
    stats = checks.run_check(info, "property:calls_again", karmarkar_karp, settings=FEW)
    assert stats.examples == len(calls) > 0
    calls.clear()
    with pytest.raises(hypothesis_errors.Unsatisfiable):  # every input is outside the scope
        checks.run_check(info, "property:calls_again", karmarkar_karp,
                         settings=settings(FEW, phases=[Phase.generate]),
                         in_scope=lambda case: False)
    assert calls == []


def test_a_search_with_every_input_outside_the_scope_warns_nothing() -> None:
    """Unsatisfiable, and no Hypothesis warning: the property, tried again on the last input
    after the search (`_drop_irrelevant_kwargs`), raises `OutsideScope` there instead of calling
    `reject()` outside a test (deprecated)."""
    import warnings

    def calls_again(case, output, candidate):
        candidate(case.args[0], case.args[1])

    info = _with([_property(calls_again, metamorphic=True)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(hypothesis_errors.Unsatisfiable):
            checks.run_check(info, "property:calls_again", karmarkar_karp,
                             settings=settings(FEW, phases=[Phase.generate]),
                             in_scope=lambda case: False)
    assert [str(w.message) for w in caught
            if issubclass(w.category, hypothesis_errors.HypothesisWarning)] == []


def test_the_errors_check_of_a_record_without_invalid_inputs_is_a_usage_error() -> None:
    import dataclasses

    with pytest.raises(ValueError) as raised:
        checks.run_check(dataclasses.replace(INFO, invalid=None), "errors", karmarkar_karp)
    assert str(raised.value) == "balance.karmarkar_karp declares no invalid inputs"


def test_a_device_run_needs_the_records_device_support() -> None:
    with pytest.raises(ValueError) as raised:
        checks._call_on(INFO, Case(([1], 1), {}), karmarkar_karp, "meta")
    assert str(raised.value) == "balance.karmarkar_karp does not declare device support"
    moved: list = []

    def to_device(case, device):
        moved.append((case.args, device))
        return case

    import dataclasses

    info = dataclasses.replace(INFO, to_device=to_device)
    assert checks._call_on(info, Case(([3, 1], 1), {}), karmarkar_karp, "meta") == [[0, 1]]
    assert moved == [(([3, 1], 1), "meta")]


def test_a_bad_input_moves_to_the_device_with_its_defect_and_device_argument() -> None:
    tensor = torch.tensor([1.0, 2.0])
    bad = Case(([tensor, [1, 2]], 3), {"equal_size": tensor})
    moved = checks.bad_input_on(INFO, bad, "meta")  # karmarkar_karp takes no device
    assert moved.args[0][0].is_meta and moved.args[0][1] == [1, 2] and moved.args[1] == 3
    assert moved.kwargs["equal_size"].is_meta and "device" not in moved.kwargs
    rl = registry.get("rl_batch.build_rl_batch")  # it takes one: device= is passed too
    case = Case(([[1]], [[2]]), {"pad_token_id": 0})
    assert checks.bad_input_on(rl, case, "meta").kwargs == {"pad_token_id": 0, "device": "meta"}
    assert checks.bad_input_on(rl, case, "meta").args == ([[1]], [[2]])

    class Unreadable:  # only what bad_input_on reads: an impl whose signature cannot be read
        impl = 5
    assert "device" not in checks.bad_input_on(Unreadable, case, "meta").kwargs


# --------------------------------------------------------------------------- what equivalence passes on


def test_equivalence_hands_the_comparator_the_record_and_the_call() -> None:
    import dataclasses

    from batchproof.compare import assert_identical

    seen: list[dict] = []

    def comparing(expected, actual, **kwargs):
        seen.append({"expected": expected, **kwargs})
        assert_identical(expected, actual)

    def halved(case):  # a lossy form: the reference is asked again on it
        return dataclasses.replace(case, args=([v // 2 for v in case.args[0]], case.args[1]))

    picture = object()
    info = dataclasses.replace(
        INFO, compare=comparing, forms={"lists": lambda case: case, "halved": halved},
        lossy_forms=("halved",), picture=picture,
        describe_row=lambda case, row: f"row {row} of {len(case.args[0])} values",
        targets=lambda case: {"values": len(case.args[0])})
    case = Case(([8, 6, 4], 2), {})
    checks.check_equivalence(info, case, karmarkar_karp)
    lists, lossy = seen
    assert lists["expected"] == karmarkar_karp([8, 6, 4], 2)
    assert lossy["expected"] == karmarkar_karp([4, 3, 2], 2)
    for kwargs, form in ((lists, "lists"), (lossy, "halved")):
        assert kwargs["allow_device"] is False and kwargs["picture"] is picture
        assert kwargs["describe_row"](1) == "row 1 of 3 values"  # of the drawn case
        assert kwargs["compared"] == f"the reference vs the candidate on the {form!r} input form"
        assert kwargs["case"] is case
    assert checks._row_describer(INFO, case) is None  # a record without describe_row
    stats = checks.run_check(info, "equivalence", karmarkar_karp, settings=FEW)  # with targets
    assert stats.examples > 0


def test_an_input_form_that_fails_is_batchproofs_error() -> None:
    import dataclasses

    def broken(case):
        raise IndexError("no such row")

    info = dataclasses.replace(INFO, forms={"broken": broken})
    case = Case(([1], 1), {})
    with pytest.raises(HarnessError) as raised:
        checks.check_equivalence(info, case, karmarkar_karp)
    assert str(raised.value) == (f"registry error: balance.karmarkar_karp's input form 'broken' "
                                 f"failed on {case.short()}: IndexError: no such row")


def test_as_called_applies_the_records_form_to_the_call() -> None:
    import dataclasses

    assert checks.as_called(INFO, len) is len
    info = dataclasses.replace(INFO, as_called=lambda case: Case(
        (torch.tensor(case.args[0]), *case.args[1:]), {**case.kwargs, "seen": True}))
    called = checks.as_called(info, lambda *a, **k: (a, k))
    args, kwargs = called([1, 2], 2, equal_size=False)
    assert torch.equal(args[0], torch.tensor([1, 2])) and args[1] == 2
    assert kwargs == {"equal_size": False, "seen": True}


def test_check_pin_owes_messages_only_when_asked(monkeypatch) -> None:
    def worded(values, k, **kwargs):
        raise ValueError("k too large")

    checks.check_pin(INFO, "k_greater_than_n", worded)  # the type is enough by default
    with pytest.raises(Mismatch, match="error messages differ"):
        checks.check_pin(INFO, "k_greater_than_n", worded, messages=True)


def test_given_test_checks_the_candidate_it_is_given() -> None:
    def wrong(values, k, **kwargs):
        return [[0]]

    FEW(checks.given_test(INFO, "equivalence"))()  # the impl, a stats of its own
    with pytest.raises(Mismatch):
        FEW(checks.given_test(INFO, "equivalence", wrong))()


def test_a_replay_prints_nothing_of_hypothesis_own(capsys) -> None:
    from batchproof.report import _BLOB

    def accepts(values, k, **kwargs):
        return [[0]]

    blobbed = settings(FEW, phases=[Phase.generate], print_blob=True)
    with pytest.raises(Mismatch) as raised:
        checks.run_check(INFO, "errors", accepts, settings=blobbed)
    version, blob = next(m.groups() for n in raised.value.__notes__ for m in [_BLOB.search(n)]
                         if m)
    capsys.readouterr()
    with pytest.raises(Mismatch):
        checks.run_check(INFO, "errors", accepts, reproduce=(version, blob))
    assert capsys.readouterr().out == ""


# --------------------------------------------------------------------------- the minimal case


def _two_optional(values, k, *, equal_size=False, extra=None):
    return karmarkar_karp(values, k, equal_size=equal_size)


def test_dropping_keywords_keeps_a_bad_case_bad_and_says_which() -> None:
    class Info:  # what _drop_irrelevant_kwargs reads: the reference's optional parameters
        reference = staticmethod(_two_optional)

    info = Info

    def body(bad):  # fails the same way on every bad case it is handed whole
        assert isinstance(bad, BadCase) and isinstance(bad.case, Case)
        assert bad.raises is ValueError and bad.why == "k > n"
        assert bad.case.args == ([1, 2], 3)
        raise Mismatch("balance.karmarkar_karp: the candidate accepted bad input (k > n)")

    bad = BadCase(Case(([1, 2], 3), {"equal_size": False, "extra": 1}), ValueError, "k > n")
    with pytest.raises(Mismatch) as raised:
        body(bad)
    stats = CheckStats(failing=bad)
    note = checks._drop_irrelevant_kwargs(info, body, raised.value, stats, None)
    assert note == ("the minimal case leaves out equal_size, extra: it fails the same way without "
                    "them (a replay runs the case as drawn)")
    assert repr(stats.failing) == repr(BadCase(Case(([1, 2], 3), {}), ValueError, "k > n"))
    # one left out: "it"; a keyword the domain needs is kept, and the next one still tried
    extra_first = BadCase(Case(([1, 2], 3), {"extra": 1, "equal_size": False}), ValueError,
                          "k > n")
    stats = CheckStats(failing=extra_first)
    note = checks._drop_irrelevant_kwargs(info, body, raised.value, stats,
                                          lambda bad: "extra" in bad.case.kwargs)
    assert note == ("the minimal case leaves out equal_size: it fails the same way without it "
                    "(a replay runs the case as drawn)")
    assert stats.failing.case.kwargs == {"extra": 1}
    # nothing to leave out: no note, the case as it was
    stats = CheckStats(failing=BadCase(Case(([1, 2], 3), {}), ValueError, "k > n"))
    assert checks._drop_irrelevant_kwargs(info, body, raised.value, stats, None) == ""


def test_a_strategy_that_raises_is_reported_as_it_raised() -> None:
    import dataclasses

    from hypothesis import strategies as st

    def broken(draw_value):
        raise ZeroDivisionError("in the strategy")

    info = dataclasses.replace(INFO, valid=st.integers().map(broken), pins=())
    stats = CheckStats()
    with pytest.raises(ZeroDivisionError):
        checks.run_check(info, "equivalence", karmarkar_karp, settings=FEW, stats=stats)
    assert stats.failing is None and stats.examples == 0


def test_a_verbose_replay_is_still_quiet(capsys) -> None:
    from hypothesis import Verbosity

    from batchproof.report import _BLOB

    def accepts(values, k, **kwargs):
        return [[0]]

    verbose = settings(FEW, phases=[Phase.generate], print_blob=True,
                       verbosity=Verbosity.normal)
    with pytest.raises(Mismatch) as raised:
        checks.run_check(INFO, "errors", accepts, settings=verbose)
    version, blob = next(m.groups() for n in raised.value.__notes__ for m in [_BLOB.search(n)]
                         if m)
    capsys.readouterr()
    with pytest.raises(Mismatch):
        checks.run_check(INFO, "errors", accepts, settings=verbose, reproduce=(version, blob))
    assert capsys.readouterr().out == ""


def test_each_target_keeps_its_label() -> None:
    import dataclasses

    info = dataclasses.replace(INFO, targets=lambda case: {"values": len(case.args[0]),
                                                           "parts": case.args[1]})
    assert checks.run_check(info, "equivalence", karmarkar_karp, settings=FEW).examples > 0

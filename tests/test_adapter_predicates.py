"""Every adapter's predicates, on every input its check can meet — without the frameworks.

An adapter's `supports` and its known divergences' `applies` decide, for each input of the
record, whether the framework is run on it. They are asked about valid and invalid inputs alike
(an int where rows are expected, a meta tensor, a str), and a predicate that raises stops the
check as batchproof's own failure (`PredicateError`, exit status 3). Predicates need no
framework, so they are checked here on every push: on every pin of the record and on drawn
inputs of the strategies the adapter's check draws from (the adapter's own, or the record's).

The mechanism itself is tested on stand-ins: a raising predicate, a raising wrapper and a
raising strategy are each batchproof's failure (`error`, exit 3), never the target's divergence.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from batchproof import adapters, registry
from batchproof.adapters import Adapter, Call, KnownDivergence, PredicateError
from batchproof.adapters.runner import check_adapter, exit_code
from batchproof.ops.balance import bad_partition_cases
from batchproof.reference.balance import karmarkar_karp
from batchproof.registry import BadCase, Case

DRAWS = 150  # per adapter and strategy: a few hundred inputs each, with the pins


def _names() -> list[str]:
    return sorted(a.name for a in adapters.all_adapters())


def _ask_all(adapter: Adapter, case: Case | BadCase) -> None:
    call = adapter.call_of(case)
    adapter.in_domain(call)
    # every known divergence, whatever its kind: `matching` asks only those of the input's
    # kind, but a predicate must hold on any input of the record
    for known in adapter.known:
        try:
            known.applies(call)
        except Exception as err:
            raise PredicateError(f"{adapter.name}: known divergence {known.name!r} raised "
                                 f"{type(err).__name__}: {err} on {call.short(300)}") from err


def _strategies(adapter: Adapter) -> list[st.SearchStrategy]:
    info = registry.get(adapter.record)
    # the adapter's own strategies where it has them (`is None`: a strategy's truth value is
    # not its presence, and Hypothesis warns when asked for it)
    found = [info.valid if adapter.valid is None else adapter.valid,
             info.invalid if adapter.invalid is None else adapter.invalid,
             info.valid, info.invalid]
    unique: list[st.SearchStrategy] = []
    for strategy in found:
        if strategy is not None and all(strategy is not s for s in unique):
            unique.append(strategy)
    return unique


@pytest.mark.parametrize("name", _names())
def test_every_predicate_holds_on_every_input(name: str) -> None:
    adapter = adapters.get_adapter(name)
    info = registry.get(adapter.record)
    for pin in info.pins:
        _ask_all(adapter, pin.case)
    search = settings(max_examples=DRAWS, derandomize=True, database=None, deadline=None,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    for strategy in _strategies(adapter):
        search(given(strategy)(lambda case: _ask_all(adapter, case)))()


def test_every_adapter_is_asked() -> None:
    """The parametrization above covers every adapter batchproof ships (one per framework
    function), not a silently empty list."""
    frameworks = {a.framework for a in adapters.all_adapters()}
    assert {"skyrl", "verl", "transformers", "trl", "openrlhf"} <= frameworks
    assert len(_names()) >= 20


# --------------------------------------------------------------------------- the Call


def test_call_reads_arguments_by_name_and_never_raises() -> None:
    from batchproof.reference.rl_batch import build_rl_batch

    bad = BadCase(Case((5, [[3]]), {"pad_token_id": 0}), TypeError, "prompts an int")
    call = Call.of(bad, build_rl_batch)
    assert not call.valid and call.bad is bad
    assert call.arg("prompts") == 5 and call.arg("responses") == [[3]]
    assert call.arg("layout") == "left"  # the contract's default
    assert call.rows("prompts") is None and call.lengths("prompts") is None
    assert call.rows("responses") == [[3]] and call.lengths("responses") == [1]
    assert Call.values(5) is None
    import torch

    assert Call.values(torch.ones(2, device="meta")) is None
    assert Call.values(torch.tensor([1, 2])) == [1, 2]
    assert Call.of(Case(([[1], 7], [[2], [3]]), {}), build_rl_batch).lengths("prompts") is None


# --------------------------------------------------------------------------- our failures


# The karmarkar_karp stand-ins check k > n first: with a second defect on the values that
# precedence diverges on its own (issue 32's two-defect inputs), which is not what these tests
# are about, so they draw one defect per input.
ONE_DEFECT = bad_partition_cases()


def _verl_like(values, k, *, equal_size=False):
    assert len(values) >= k, "number of items < k_partitions"
    return karmarkar_karp(values, k, equal_size=equal_size)


def _raises_on_long_values(call) -> bool:
    values = call.arg("values")
    return len(values) > 3  # an int `values` (a bad input) makes this raise


STAND_IN = Adapter(
    name="stand_in.predicates", framework="stand_in", record="balance.karmarkar_karp",
    target="tests.test_adapter_predicates:_verl_like", wrap=lambda fn: fn, forms=("lists",),
    known=(KnownDivergence("long", _raises_on_long_values, kind="errors",
                           raises=AssertionError, doc="a planted predicate that raises"),),
    invalid=ONE_DEFECT)


def _raises_on_every_input(call) -> bool:
    raise TypeError(f"a planted predicate that raises on every input ({call.arg('k')!r})")


def test_a_raising_predicate_is_batchproofs_failure_not_a_divergence() -> None:
    """The predicate raises on the first bad input it is asked about, and the target raises
    the contract's errors (the reference): nothing but the predicate can decide the outcome,
    whatever the search draws first (with `_verl_like`, which diverges on k > n by an assert, the
    outcome hung on whether such an input came before one that made the predicate raise: the
    order of the suite decided it)."""
    raising = dataclasses.replace(STAND_IN, known=(KnownDivergence(
        "long", _raises_on_every_input, kind="errors", raises=AssertionError,
        doc="a planted predicate that raises"),))
    report = check_adapter(raising, karmarkar_karp, checks=["errors", "equivalence"],
                           max_examples=40, derandomize=True, replay_database=False)
    statuses = {o.check: o.status for o in report.outcomes}
    assert statuses["errors"] == "error", report.outcomes
    assert statuses["equivalence"] == "pass"  # valid inputs never ask an errors predicate
    (errors,) = [o for o in report.outcomes if o.check == "errors"]
    assert "PredicateError" in errors.detail and "stand_in.predicates" in errors.detail
    assert "known divergence 'long'" in errors.detail
    assert not report.new and exit_code([report]) == 3


def test_a_raising_predicate_on_a_pin_errors_that_pin_only() -> None:
    info = registry.get("balance.karmarkar_karp")
    bad_pins = [p.name for p in info.pins if isinstance(p.case, BadCase)]
    planted = dataclasses.replace(STAND_IN, known=(KnownDivergence(
        "tensor_values", lambda call: call.arg("values").dim() > 1, kind="errors",
        raises=AssertionError, doc="raises where values is not a tensor (a list)"),))
    report = check_adapter(planted, _verl_like, checks=[f"pin:{n}" for n in bad_pins])
    statuses = {o.check: o.status for o in report.outcomes}
    assert "error" in statuses.values() and "new" not in statuses.values(), statuses
    assert exit_code([report]) == 3


def test_a_wrapper_that_raises_on_its_own_is_batchproofs_failure() -> None:
    def wrap(function):
        def contract(values, k, *, equal_size=False):
            if isinstance(k, float):
                raise TypeError("the wrapper cannot map a float k")  # before the target
            return function(values, k, equal_size=equal_size)
        return contract

    planted = dataclasses.replace(STAND_IN, known=(), wrap=wrap)
    report = check_adapter(planted, planted.guarded(karmarkar_karp), checks=["errors"],
                           max_examples=60, derandomize=True, replay_database=False)
    (errors,) = report.outcomes
    assert errors.status == "error" and "AdapterError" in errors.detail, errors
    assert "before calling it" in errors.detail and exit_code([report]) == 3


def test_a_framework_exception_passes_through_the_guard() -> None:
    """An exception raised inside the framework's function is its own: a divergence."""
    def wrap(function):
        return lambda values, k, *, equal_size=False: function(values, k, equal_size=equal_size)

    planted = dataclasses.replace(STAND_IN, known=(), wrap=wrap)
    report = check_adapter(planted, planted.guarded(_verl_like),
                           checks=["errors", "pin:k_greater_than_n"], max_examples=40,
                           derandomize=True, replay_database=False)
    assert {o.status for o in report.outcomes} == {"new"}
    assert all("AssertionError" in o.detail for o in report.outcomes)


def test_a_strategy_that_raises_is_batchproofs_failure() -> None:
    def broken(case: Case) -> Case:
        raise KeyError("a strategy bug")

    info = registry.get("balance.karmarkar_karp")
    planted = dataclasses.replace(STAND_IN, known=(), valid=info.valid.map(broken))
    report = check_adapter(planted, karmarkar_karp, checks=["equivalence"], max_examples=10,
                           derandomize=True, replay_database=False)
    (outcome,) = report.outcomes
    assert outcome.status == "error" and "while drawing an input" in outcome.detail, outcome
    assert exit_code([report]) == 3


# --------------------------------------------------------------------------- specificity
#
# A known divergence confirms only what it says (`raises=`, `accepts=`, `fields=`). For each way
# one can show, a target that diverges that way on the set-aside inputs confirms it, and a target
# that diverges another way on the same inputs is reported: `diverged otherwise`, exit 1.


def _k_over_n(call) -> bool:
    values, k = call.arg("values"), call.arg("k")
    return isinstance(values, list) and isinstance(k, (int, float)) \
        and not isinstance(k, bool) and k > len(values)


def _accepting(values, k, *, equal_size=False):
    if isinstance(k, (int, float)) and isinstance(values, list) and k > len(values):
        k = int(k)
        return [[i] for i in range(len(values))] + [[] for _ in range(k - len(values))]
    return karmarkar_karp(values, k, equal_size=equal_size)


def _key_error(values, k, *, equal_size=False):
    if isinstance(k, (int, float)) and isinstance(values, list) and k > len(values):
        raise KeyError(k)
    return karmarkar_karp(values, k, equal_size=equal_size)


def _with_rewards(call) -> bool:
    return call.valid and call.arg("rewards") is not None


def _shifting(key: str):
    from batchproof.reference.rl_batch import build_rl_batch

    def collate(*args, **kwargs):
        out = build_rl_batch(*args, **kwargs)
        if kwargs.get("rewards") is not None and out[key].numel():
            out[key] = out[key] + 1
        return out

    return collate


SHOWS = {
    # how it shows: (record, known divergence, a target showing it, one diverging otherwise)
    "raises": ("balance.karmarkar_karp",
               KnownDivergence("k_over_n", _k_over_n, kind="errors", raises=AssertionError,
                               doc="k > n raises AssertionError"), _verl_like, _key_error),
    "accepts": ("balance.karmarkar_karp",
                KnownDivergence("k_over_n", _k_over_n, kind="errors", accepts=True,
                                doc="k > n is accepted"), _accepting, _key_error),
    "fields": ("rl_batch.build_rl_batch",
               KnownDivergence("rewards_shifted", _with_rewards, kind="valid",
                               fields=("rewards",), doc="rewards are shifted by one"),
               _shifting("rewards"), _shifting("loss_mask")),
}


@pytest.mark.parametrize("how", sorted(SHOWS))
def test_a_known_divergence_confirms_only_what_it_says(how: str) -> None:
    record, known, showing, otherwise = SHOWS[how]
    adapter = Adapter(name=f"stand_in.{how}", framework="stand_in", record=record,
                      target="m:f", wrap=lambda fn: fn, forms=("lists",), known=(known,),
                      invalid=ONE_DEFECT if record == "balance.karmarkar_karp" else None)
    checks = ["errors"] if known.kind == "errors" else ["equivalence"]
    run = dict(checks=checks, max_examples=40, derandomize=True, replay_database=False)
    confirmed = check_adapter(adapter, showing, **run)
    (entry,) = confirmed.known
    assert entry["status"] == "confirmed" and entry["confirmed"] > 0, entry
    assert exit_code([confirmed]) == 0
    other = check_adapter(adapter, otherwise, **run)
    (entry,) = other.known
    assert entry["status"] == "diverged otherwise" and entry["otherwise"], entry
    assert other.unexplained and exit_code([other]) == 1

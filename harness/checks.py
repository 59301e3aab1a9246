"""The generic checks, instantiated from a registry record (see `batchproof.registry`).

Every runner — the pytest suite, `batchproof verify`, `batchproof mutate --zoo`, `batchproof check`,
`batchproof.check()` — calls `run_check(info, check_name, candidate)`, which builds a Hypothesis
test for that check on the fly and runs it under the active profile (or the settings it is given).
Pinned historical cases are attached as `@example`s. `batchproof fuzz` hands HypoFuzz the same
tests (`given_test`, exposed by `batchproof.fuzz_targets`), under the same database keys.

What a failure means: a `HarnessError` is batchproof's own fault (the oracle rejected an input its
strategy calls valid, or raised another exception than its registry record declares); any other
exception is a divergence of the candidate (a `Mismatch`, a property's `AssertionError`, or an
exception that escaped the candidate).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import re
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import torch
from hypothesis import example, given, target
from hypothesis.control import currently_in_test_context
from hypothesis.errors import DidNotReproduce
from hypothesis.internal.reflection import function_digest
from tensordict import TensorDictBase

from batchproof.compare import Mismatch, assert_identical
from batchproof.profiles import draws_independent_of_loaded_modules
from batchproof.registry import BadCase, Candidate, Case, OpInfo, Pin, tensors_on


class HarnessError(AssertionError):
    """batchproof itself is wrong (a registry record, a strategy, the oracle), not the candidate.

    An `AssertionError`, so the bug zoo counts it as a failed check like any other (a planted
    oracle bug shows up this way); the CLI reports it apart, with exit status 3."""


class OutsideScope(Exception):
    """A property called the candidate again (a metamorphic property) with arguments outside the
    scope it is checked on (an adapter's domain, `--layout`): the property cannot be checked on
    that input, which is then not counted (Hypothesis draws another)."""


@dataclass
class CheckStats:
    """What one check did: how many examples it ran (pins included) and, when it failed, the last
    input that failed — after Hypothesis' shrinking, the minimal one."""

    examples: int = 0
    notes: list[str] = field(default_factory=list)
    failing: Case | BadCase | None = None


def run_check(
    info: OpInfo,
    check: str,
    candidate: Candidate | None = None,
    *,
    settings: hypothesis.settings | None = None,
    device: str = "cpu",
    stats: CheckStats | None = None,
    seed: int | None = None,
    reproduce: tuple[str, bytes | str] | None = None,
    admits: Callable[[Case | BadCase], bool] | None = None,
    in_scope: Callable[[Case], bool] | None = None,
) -> CheckStats:
    """Run one named check of `info` against `candidate` (default: the record's `impl/` function).

    Raises the check's failure (an `AssertionError` subclass, or the exception that escaped the
    candidate) after Hypothesis has shrunk it; the shrunk case and the reproduction blob are in the
    exception's `__notes__`, the shrunk case also in `stats.failing`. `seed` fixes Hypothesis'
    random search (`hypothesis.seed`); `reproduce` = (Hypothesis version, blob) replays one
    failure (`hypothesis.reproduce_failure`). After a failure, the minimal case drops the optional
    keyword arguments it still fails without (the same way); `admits` says which inputs such a
    smaller case may be (an adapter's domain, less its known divergences; default: any).
    `in_scope` says which calls a metamorphic property may make of the candidate (an adapter's
    domain; default: any): an input on which it would make another is not counted (a pin's
    property is left out for that pin, and said so in `stats.notes`).

    `paths:PLACEMENT` (batchproof's own `impl/` only) runs the record's checks that compare with
    the reference under that placement and fails when the code it stands for did not run
    (`check_paths`).
    """
    stats = stats if stats is not None else CheckStats()
    if check.startswith("paths:"):
        return _run_paths(info, check, candidate, settings, device, stats, seed, reproduce)
    if check.startswith("pin:"):
        pin = _pin(info, check.removeprefix("pin:"))
        call = candidate if candidate is not None else _late_bound_impl(info)
        stats.examples += 1
        try:
            check_pin(info, pin.name, call, device, messages=candidate is None,
                      in_scope=in_scope, notes=stats.notes)
        except BaseException:
            stats.failing = pin.case
            raise
        return stats
    body, strategy, pins = _search(info, check, candidate, device, in_scope)
    test = _given_test(info, check, body, strategy, pins, stats)
    _run_given(info, test, body, settings=settings, stats=stats, seed=seed,
               reproduce=reproduce, admits=admits)
    return stats


def _run_paths(info: OpInfo, check: str, candidate, settings, device: str, stats: CheckStats,
               seed, reproduce) -> CheckStats:
    if check not in info.path_checks():
        raise ValueError(f"unknown check {check!r} for {info.name}; known: "
                         f"{info.check_names() + info.path_checks()}")
    if candidate is not None or reproduce is not None:
        raise ValueError(f"{check}: the paths batchproof's own impl/ takes, counted over its "
                         "checks (no other function, no replayed blob)")
    return check_paths(info, check.removeprefix("paths:"), settings=settings, device=device,
                       stats=stats, seed=seed)


def check_paths(info: OpInfo, placement: str, *, settings: hypothesis.settings | None = None,
                device: str = "cpu", stats: CheckStats | None = None,
                seed: int | None = None) -> CheckStats:
    """The `paths:PLACEMENT` check of `info` on its own: under `placement`, the checks that
    compare `impl/` with the reference (its pins, unless `settings` leave out Hypothesis'
    explicit phase; equivalence; errors) run as `verify` runs them there, and the paths they
    took are compared with the record's declaration (`placements.faults`). Raises
    `placements.PathNotTaken`, or the failure of one of those checks; returns the `CheckStats`
    of all of them (examples summed)."""
    from batchproof import placements
    from batchproof.registry import PLACEMENT_KINDS

    if placement not in PLACEMENT_KINDS or (placement == "cuda") != (device == "cuda"):
        raise ValueError(f"paths:{placement} cannot run on device {device!r} (the CPU runs "
                         "kernel, cpu, generic and triton; CUDA runs cuda)")
    stats = stats if stats is not None else CheckStats()
    pins = settings is None or hypothesis.Phase.explicit in settings.phases
    names = [c for c in info.check_names() if c.startswith("pin:") and pins]
    names += [c for c in ("equivalence", "errors") if c in info.check_names()]
    before = placements.ran()
    with placements.placed(placement):
        for name in names:
            run_check(info, name, settings=settings, device=device, stats=stats, seed=seed)
    problems = placements.faults(info, placement, placements.since(before))
    if problems:
        raise placements.PathNotTaken(f"{'; '.join(problems)} ({stats.examples} examples of "
                                      f"{len(names)} checks)")
    return stats


def searched(check: str) -> bool:
    """Whether `check` draws its examples (equivalence, errors, property:NAME), as opposed to a
    pin, one fixed example."""
    return check in ("equivalence", "errors") or check.startswith("property:")


# `batchproof.fuzz_targets` exposes each searched check as this pytest test, which `batchproof
# fuzz` collects with the package folder as pytest's rootdir: HypoFuzz keys a test's examples by
# its pytest node id, `fuzz_targets.py::test_NAME`, so run_check keys the same test the same way
FUZZ_MODULE = "fuzz_targets.py"


def check_test_name(info: OpInfo, check: str) -> str:
    """The name of a check's Hypothesis test: OP__FUNCTION__CHECK (`:` spelled `__`)."""
    return f"{info.op}__{info.function}__{check.replace(':', '__')}"


def fuzz_node_id(info: OpInfo, check: str) -> str:
    """The pytest node id of the check's test in `batchproof.fuzz_targets` (rootdir: the package
    folder); it tells the check's Hypothesis database key apart from every other check's."""
    return f"{FUZZ_MODULE}::test_{check_test_name(info, check)}"


def given_test(info: OpInfo, check: str, candidate: Candidate | None = None, *,
               device: str = "cpu", stats: CheckStats | None = None) -> Callable[[], None]:
    """The Hypothesis test that `run_check` runs for a searched check (`searched`): pins
    attached as `@example`s, no settings of its own (the loaded profile's apply), and the same
    Hypothesis database key as `run_check`'s, so that examples saved by one (by HypoFuzz through
    `batchproof.fuzz_targets`) replay in the other (`batchproof verify`, the pytest suite)."""
    if not searched(check):
        raise ValueError(f"{check!r} of {info.name} is not a searched check (a pin is one "
                         "example: run_check runs it)")
    body, strategy, pins = _search(info, check, candidate, device)
    return _given_test(info, check, body, strategy, pins,
                       stats if stats is not None else CheckStats())


def _search(info: OpInfo, check: str, candidate: Candidate | None, device: str,
            in_scope: Callable[[Case], bool] | None = None):
    """(body, strategy, pins) of a searched check: `body(case)` checks one drawn case."""
    messages = candidate is None  # impl/ raises the reference's own messages
    call = candidate if candidate is not None else _late_bound_impl(info)
    if check == "equivalence":
        body = lambda case: check_equivalence(info, case, call, device)
        return body, info.valid, _valid_pins(info)
    if check == "errors":
        if info.invalid is None:
            raise ValueError(f"{info.name} declares no invalid inputs")
        body = lambda bad: check_error_parity(info, bad, call, device, messages)
        return body, info.invalid, _bad_pins(info)
    if check.startswith("property:"):
        prop = _property(info, check.removeprefix("property:"))
        formed = as_called(info, call)
        again = _scoped(formed, in_scope)

        def body(case: Case) -> None:
            output = _on_cpu(_call_on(info, case, formed, device))
            try:
                prop.verify(case, output, again)
            except OutsideScope:
                if not currently_in_test_context():  # a failure's case tried again, after
                    raise                            # the search (`_drop_irrelevant_kwargs`)
                hypothesis.reject()

        return body, info.valid, _valid_pins(info)
    raise ValueError(f"unknown check {check!r} for {info.name}; known: {info.check_names()}")


def _scoped(candidate: Candidate, in_scope: Callable[[Case], bool] | None) -> Candidate:
    """The candidate as a metamorphic property calls it again: `OutsideScope` instead of a call
    outside `in_scope`."""
    if in_scope is None:
        return candidate

    def scoped(*args: Any, **kwargs: Any) -> Any:
        case = Case(args, kwargs)
        if not in_scope(case):
            raise OutsideScope(f"the property calls the function with {case.short(200)}, "
                               "outside the scope it is checked on")
        return candidate(*args, **kwargs)

    return scoped


def _late_bound_impl(info: OpInfo) -> Candidate:
    """Look the impl function up at call time, so a patched module (bug zoo) is honoured."""
    return lambda *args, **kwargs: info.impl(*args, **kwargs)


def _pins_on_a_copy(body: Callable[[Case], None], pins) -> Callable[[Case], None]:
    """`body` run on a copy of a pinned case: a pin is one object for every run of the process,
    which a candidate that changes its input would otherwise change for the next run (the replay
    of its failure, later checks) into another input, or an invalid one. A drawn case is a new
    object each time Hypothesis draws it, and is run as drawn: a copy would lose how its tensors
    share storage (views of a padded buffer), which some records measure."""
    pinned = {id(pin) for pin in pins}
    return lambda case: body(_copy(case) if id(case) in pinned else case)


def _given_test(info, check, body, strategy, pins, stats):
    body = _pins_on_a_copy(body, pins)

    # Hypothesis seeds a derandomized run (`ci`, `mutation`) from this function's source: an
    # edit of its text draws other inputs in every such run (the zoo's killers at the ci
    # budget, the regime counts); change what it calls instead
    def test(case):
        stats.examples += 1
        before = _copy(case)  # the candidate may change its input: keep the call as it was made
        try:
            body(case)
        except BaseException:
            stats.failing = before  # Hypothesis replays the minimal failing case last
            raise

    test.__name__ = check_test_name(info, check)
    test.__qualname__ = test.__name__
    # hashed with the source of `test`: the seed of a derandomized run (`ci`, `mutation`),
    # distinct per record and check
    test._hypothesis_internal_add_digest = test.__name__.encode()
    wrapped = given(case=strategy)(test)
    for pin in pins:
        wrapped = example(case=pin)(wrapped)
    wrapped._hypothesis_internal_database_key = _database_key(test, fuzz_node_id(info, check))
    return wrapped


def _database_key(test: Callable[..., Any], node_id: str) -> bytes:
    """The Hypothesis database key of `test` as HypoFuzz computes it: Hypothesis' digest of the
    test, with its pytest node id hashed in place of its name (HypoFuzz sets the one to the
    other before it digests). Hypothesis reads a test's key from this attribute, when set; the
    name stays the seed of derandomized runs, so their examples are those they always were."""
    named = test._hypothesis_internal_add_digest
    test._hypothesis_internal_add_digest = node_id.encode()
    try:
        return function_digest(test)
    finally:
        test._hypothesis_internal_add_digest = named


def _run_given(info, wrapped, body, *, settings, stats, seed, reproduce, admits) -> None:
    if reproduce is not None:  # Hypothesis prints a replayed case itself; reports show a call
        settings = hypothesis.settings(settings or hypothesis.settings(),
                                       verbosity=hypothesis.Verbosity.quiet)
    if settings is not None:
        wrapped = settings(wrapped)
    if seed is not None:
        wrapped = hypothesis.seed(seed)(wrapped)
    if reproduce is not None:
        version, blob = reproduce
        wrapped = hypothesis.reproduce_failure(
            version, blob.encode() if isinstance(blob, str) else blob)(wrapped)
    fixed = seed is not None or (settings or hypothesis.settings()).derandomize
    try:
        with draws_independent_of_loaded_modules() if fixed else nullcontext():
            wrapped()
    except DidNotReproduce:  # a replayed failure that passes now: fixed
        stats.notes.append("the replayed failure no longer reproduces: it passes now")
    except Exception as failure:
        # (several distinct failures come as one group: those keep their cases as drawn)
        if stats.failing is not None and not isinstance(failure, HarnessError) \
                and not hasattr(failure, "exceptions"):
            note = _drop_irrelevant_kwargs(info, body, failure, stats, admits)
            if note:
                failure.add_note(note)
        raise


def _drop_irrelevant_kwargs(info: OpInfo, body, failure: Exception, stats: CheckStats,
                            admits) -> str:
    """Leave out of `stats.failing` each optional keyword argument (one with a default in the
    reference's signature) without which the check still fails the same way: the same exception
    type, on the same output field. Hypothesis shrinks values, not the presence of a keyword."""
    failing = stats.failing
    case = failing.case if isinstance(failing, BadCase) else failing
    dropped = []
    for name in [k for k in case.kwargs if k in _optional_parameters(info.reference)]:
        trial = dataclasses.replace(case, kwargs={k: v for k, v in case.kwargs.items()
                                                  if k != name})
        candidate = (BadCase(trial, failing.raises, failing.why)
                     if isinstance(failing, BadCase) else trial)
        if admits is not None and not admits(candidate):
            continue
        try:
            body(_copy(candidate))
        except Exception as again:  # noqa: BLE001 - compared with the original failure
            if _same_failure(failure, again):
                case, failing, dropped = trial, candidate, [*dropped, name]
    if not dropped:
        return ""
    stats.failing = failing
    return (f"the minimal case leaves out {', '.join(dropped)}: it fails the same way without "
            f"{'them' if len(dropped) > 1 else 'it'} (a replay runs the case as drawn)")


def _optional_parameters(function: Callable[..., Any]) -> set[str]:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in parameters if p.default is not inspect.Parameter.empty}


def _same_failure(first: BaseException, again: BaseException) -> bool:
    if isinstance(again, HarnessError) or type(again) is not type(first):
        return False
    if isinstance(first, Mismatch):
        return first.field == again.field and _headline(first) == _headline(again)
    return True


def _headline(mismatch: Mismatch) -> str:
    """What kind of mismatch, without its values: 'loss_mask: values differ'."""
    return ":".join(str(mismatch).split("\n", 1)[0].split(":", 2)[:2])


def check_equivalence(info: OpInfo, case: Case, candidate: Candidate, device: str = "cpu") -> None:
    """reference(case) == candidate(form(case)) for every input form (reference(form(case)) for
    a lossy form: one that narrows the values' dtype); inputs left untouched."""
    expected = _oracle(info, case)
    for form_name, form in info.forms.items():
        try:
            formed = form(case)
        except Exception as err:
            raise HarnessError(f"registry error: {info.name}'s input form {form_name!r} failed "
                               f"on {case.short()}: {type(err).__name__}: {err}") from err
        before = _snapshot(formed)
        actual = _call_on(info, formed, candidate, device)
        try:
            info.compare(
                _oracle(info, formed) if form_name in info.lossy_forms else expected,
                actual,
                allow_device=device != "cpu",
                picture=info.picture,
                describe_row=_row_describer(info, case),
                compared=f"the reference vs the candidate on the {form_name!r} input form",
                case=case,
            )
        except AssertionError:  # a Mismatch: the candidate's; a HarnessError: ours
            raise
        except Exception as err:  # the comparator itself failed: batchproof's fault
            raise HarnessError(f"{info.name}'s comparator failed on the candidate's output "
                               f"(the {form_name!r} input form): {type(err).__name__}: "
                               f"{err}") from err
        try:
            assert_identical(before, (formed.args, dict(formed.kwargs)))
        except Mismatch as err:
            raise Mismatch(f"the {form_name!r} input was mutated by the call:\n{err}") from None
    if info.targets is not None and currently_in_test_context():
        for label, value in info.targets(case).items():
            target(float(value), label=label)


def check_error_parity(
    info: OpInfo, bad: BadCase, candidate: Candidate, device: str = "cpu", messages: bool = False
) -> None:
    """Both implementations raise `bad.raises`, and the same exception type; with `messages`,
    the same message too (what `impl/` promises: it raises the reference's messages, which name
    the argument and the row; another candidate owes only the type)."""
    ref_exc = _raised(bad.case, info.reference)
    if ref_exc is None or not isinstance(ref_exc, bad.raises):
        raise HarnessError(
            f"registry error: the reference raised {ref_exc!r}, not {bad.raises.__name__}, "
            f"for {bad!r}"
        )
    case = bad_input_on(info, bad.case, device) if device != "cpu" else bad.case
    cand_exc = _raised(case, candidate)
    if cand_exc is None:
        raise Mismatch(
            f"{info.name}: the candidate accepted bad input ({bad.why}); the reference raised "
            f"{type(ref_exc).__name__}: {ref_exc}"
        )
    # impl/ raises the reference's very exception; another candidate owes its type (a subclass
    # of it counts: `except ValueError` catches pyarrow's ArrowInvalid too)
    if (type(cand_exc) is not type(ref_exc) if messages
            else not isinstance(cand_exc, type(ref_exc))):
        raise Mismatch(
            f"{info.name}: exception types differ on bad input ({bad.why}): reference raised "
            f"{type(ref_exc).__name__}: {ref_exc}; candidate raised "
            f"{type(cand_exc).__name__}: {cand_exc}"
        ) from cand_exc
    if messages and _as_on_cpu(str(cand_exc), device) != str(ref_exc):
        raise Mismatch(
            f"{info.name}: error messages differ on bad input ({bad.why}):\n"
            f"  reference: {type(ref_exc).__name__}: {ref_exc}\n"
            f"  candidate: {type(cand_exc).__name__}: {cand_exc}"
        ) from cand_exc


def bad_input_on(info: OpInfo, case: Case, device: str) -> Case:
    """A bad input on `device` with its defect intact (`registry.tensors_on`: tensors moved,
    nothing converted; a record's own `to_device` may turn lists into tensors, and a string of
    digits or a float tensor of token ids would then become valid input)."""
    try:
        takes_device = "device" in inspect.signature(info.impl).parameters
    except (TypeError, ValueError):
        takes_device = False
    return tensors_on(case, device, device_kwarg=takes_device)


def _as_on_cpu(message: str, device: str) -> str:
    """A candidate's error message on a device run, with the device it ran on spelled `cpu`:
    the reference saw the same input on the CPU (`x is on meta but attention_mask is on
    cuda:0` is the reference's `... is on cpu`)."""
    if device == "cpu":
        return message
    return re.sub(rf"\b{re.escape(torch.device(device).type)}(:\d+)?\b", "cpu", message)


def check_pin(info: OpInfo, name: str, candidate: Candidate, device: str = "cpu",
              messages: bool = False, in_scope: Callable[[Case], bool] | None = None,
              notes: list[str] | None = None) -> None:
    """The pinned case: error parity, or equivalence + every property + its literal expectation.
    A metamorphic property that would call the candidate outside `in_scope` is left out for this
    pin (said in `notes`)."""
    pin = _pin(info, name)
    case = _copy(pin.case)  # the registry's pin stays as written, whatever the candidate does
    if isinstance(case, BadCase):
        check_error_parity(info, case, candidate, device, messages)
        return
    try:
        check_equivalence(info, case, candidate, device)
        formed = as_called(info, candidate)
        output = _on_cpu(_call_on(info, case, formed, device))
        again = _scoped(formed, in_scope)
        for prop in info.properties:
            try:
                prop.verify(case, output, again)
            except OutsideScope:
                if notes is not None:
                    notes.append(f"property {prop.name} not checked on this pin: it calls the "
                                 "function outside the scope")
            except HarnessError:
                raise
            except AssertionError as err:  # the handler below names the pin (once)
                raise AssertionError(f"property {prop.name}:\n{err}") from None
            except Exception as err:
                err.add_note(f"raised while checking the property {prop.name} on pin {name!r}")
                raise
        if pin.expect is not None:
            pin.expect(case, output)
    except HarnessError:
        raise
    except AssertionError as err:
        raise Mismatch(f"pin {name!r} failed ({pin.why}):\n{err}") from None


def as_called(info: OpInfo, candidate: Candidate) -> Candidate:
    """The candidate as properties call it: with the record's `as_called` form applied to the
    (list-form) arguments first, for a candidate that does not take lists."""
    if info.as_called is None:
        return candidate
    return lambda *args, **kwargs: info.as_called(Case(args, kwargs)).call(candidate)


def _pin(info: OpInfo, name: str) -> Pin:
    pin = next((p for p in info.pins if p.name == name), None)
    if pin is None:
        raise ValueError(f"{info.name} has no pin {name!r}")
    return pin


def _oracle(info: OpInfo, case: Case) -> Any:
    """The reference's output on a valid case; its failure is batchproof's, not the candidate's."""
    try:
        return case.call(info.reference)
    except Exception as err:
        raise HarnessError(f"registry error: the reference {info.name} raised "
                           f"{type(err).__name__}: {err} on an input its strategy calls valid: "
                           f"{case.short()}") from err


def _call_on(info: OpInfo, case: Case, candidate: Candidate, device: str) -> Any:
    if device != "cpu":
        if info.to_device is None:
            raise ValueError(f"{info.name} does not declare device support")
        case = info.to_device(case, device)
    return case.call(candidate)


def _raised(case: Case, fn: Callable[..., Any]) -> BaseException | None:
    try:
        case.call(fn)
    except HarnessError:  # batchproof's own failure (an adapter's wrapper): not a result
        raise
    except Exception as exc:  # noqa: BLE001 - the exception is the result
        return exc
    return None


def _property(info: OpInfo, name: str):
    for prop in info.properties:
        if prop.name == name:
            return prop
    raise ValueError(f"{info.name} has no property {name!r}")


def _valid_pins(info: OpInfo) -> list[Case]:
    return [p.case for p in info.pins if isinstance(p.case, Case)]


def _bad_pins(info: OpInfo) -> list[BadCase]:
    return [p.case for p in info.pins if isinstance(p.case, BadCase)]


def _row_describer(info: OpInfo, case: Case):
    if info.describe_row is None:
        return None
    return lambda row: info.describe_row(case, row)


def _copy(case: Case | BadCase) -> Case | BadCase:
    """A copy of a drawn case whose tensors and lists a call cannot change."""
    if isinstance(case, BadCase):
        return BadCase(_copy(case.case), case.raises, case.why)
    args, kwargs = _snapshot(case)
    return dataclasses.replace(case, args=args, kwargs=kwargs)


def _snapshot(case: Case) -> Any:
    return (_clone(case.args), _clone(dict(case.kwargs)))


def _clone(value: Any) -> Any:
    if isinstance(value, TensorDictBase) and value.device is not None:
        # tensordict's clone() of a TensorDict with a device loses the sign of zero (-0.0
        # comes back +0.0, tensordict 0.15.3): a snapshot would see a mutation that is not
        # there, or miss one that flips a sign; clone each tensor instead
        return value.apply(torch.clone)
    if isinstance(value, (torch.Tensor, TensorDictBase)):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return copy.deepcopy(value)


def _on_cpu(value: Any) -> Any:
    if isinstance(value, (torch.Tensor, TensorDictBase)):
        return value.cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    return value

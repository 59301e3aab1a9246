"""`batchproof.adapters` on its own: the pieces that decide whether a difference is a known one.

A known divergence that matches too much hides a new divergence on a set-aside input, so its
matching (`KnownDivergence.concerns` / `describes`, `Adapter.matching`), the `Call` its predicates
read, and the guards that tell batchproof's faults from the framework's (`PredicateError`,
`AdapterError`) are asserted here exactly, in milliseconds, without a framework or a check run:
these are the killers of `batchproof mutate --mutmut --harness adapters/__init__`.
"""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest
import torch

from batchproof import adapters, calls
from batchproof.adapters import (
    Adapter,
    AdapterError,
    Call,
    FrameworkMissing,
    KnownDivergence,
    PredicateError,
    Shown,
)
from batchproof.checks import HarnessError
from batchproof.models import ModelCase, ModelSpec
from batchproof.reference.balance import karmarkar_karp
from batchproof.reference.rl_batch import build_rl_batch
from batchproof.registry import BadCase, Case


def _known(**how) -> KnownDivergence:
    return KnownDivergence("k", lambda call: True, doc="d", **how)


# --------------------------------------------------------------------------- KnownDivergence


def test_a_known_divergence_is_of_one_of_three_kinds_and_says_how_it_shows() -> None:
    for kind in ("valid", "errors", "both"):
        assert _known(kind=kind, accepts=True).kind == kind
    assert _known(accepts=True).kind == "both"  # the default
    with pytest.raises(ValueError) as raised:
        _known(kind="either", accepts=True)
    assert str(raised.value) == "KnownDivergence.kind must be valid/errors/both, got 'either'"
    with pytest.raises(ValueError) as raised:
        KnownDivergence("silent", lambda call: True, doc="d")
    assert str(raised.value) == (
        "KnownDivergence 'silent': say how it shows (raises=, accepts=True or fields=), so that "
        "a confirmation means something")
    for how in ({"raises": ValueError}, {"accepts": True}, {"fields": "ids"}):
        _known(**how)  # any one of the three is enough


def test_a_single_exception_type_or_field_becomes_a_tuple() -> None:
    assert _known(raises=ValueError).raises == (ValueError,)
    assert _known(raises=(ValueError, KeyError)).raises == (ValueError, KeyError)
    assert _known(fields="loss_mask").fields == ("loss_mask",)
    assert _known(fields=("a", "b")).fields == ("a", "b")
    assert _known(accepts=True).raises == () and _known(accepts=True).fields == ()
    assert _known(raises=ValueError).accepts is False and _known(raises=ValueError).upstream == ""


def test_concerns_reads_the_kind() -> None:
    assert _known(kind="valid", accepts=True).concerns("valid")
    assert not _known(kind="valid", accepts=True).concerns("errors")
    assert _known(kind="errors", accepts=True).concerns("errors")
    assert not _known(kind="errors", accepts=True).concerns("valid")
    assert _known(kind="both", accepts=True).concerns("valid")
    assert _known(kind="both", accepts=True).concerns("errors")


def test_describes_confirms_only_the_way_it_was_said_to_show() -> None:
    """Each way a known divergence can show, against each other way the target can diverge: only
    the one it names confirms it; anything else is a new divergence."""
    raised = Shown("raised", ValueError, text="t")
    raised_sub = Shown("raised", UnicodeError)  # a subclass of ValueError
    raised_other = Shown("raised", KeyError)
    accepted = Shown("accepted")
    differs = Shown("differs", field="loss_mask")
    differs_other = Shown("differs", field="ids")
    differs_whole = Shown("differs", field="")
    agreed = Shown("agreed")

    by_raise = _known(raises=ValueError)
    assert by_raise.describes(raised) and by_raise.describes(raised_sub)
    assert not by_raise.describes(raised_other)
    for shown in (accepted, differs, differs_whole, agreed):
        assert not by_raise.describes(shown), shown

    by_accept = _known(accepts=True)
    assert by_accept.describes(accepted)
    for shown in (raised, raised_other, differs, differs_whole, agreed):
        assert not by_accept.describes(shown), shown

    by_field = _known(fields="loss_mask")
    assert by_field.describes(differs)
    for shown in (differs_other, differs_whole, raised, accepted, agreed):
        assert not by_field.describes(shown), shown
    assert _known(fields="").describes(differs_whole)  # a one-tensor output
    assert not _known(fields="").describes(differs)

    # what a target did that no divergence can describe
    assert not _known(raises=ValueError, accepts=True, fields="ids").describes(Shown("other"))
    assert _known(raises=(KeyError, ValueError)).describes(raised)


def test_shown_reads_as_what_the_target_did() -> None:
    assert str(Shown("raised", ValueError, text="bad row")) == "raised ValueError: bad row"
    assert str(Shown("differs", field="ids", text="values differ")) == (
        "output ids differs: values differ")
    assert str(Shown("differs", text="x")) == "output ? differs: x"
    assert str(Shown("accepted")) == "accepted the bad input"
    assert str(Shown("agreed")) == "agreed with the contract"
    assert Shown("agreed").exception is None and Shown("agreed").field == ""
    assert Shown("agreed").text == ""


# --------------------------------------------------------------------------- matching


def _stand_in(**changes) -> Adapter:
    base = Adapter(name="stand_in.triage", framework="stand_in", record="balance.karmarkar_karp",
                   target="tests.test_adapter_triage:_target", wrap=lambda fn: fn)
    return dataclasses.replace(base, **changes)


def _target(values, k, *, equal_size=False):
    return karmarkar_karp(values, k, equal_size=equal_size)


VALID = Case(([3, 1, 2], 2), {})
INVALID = BadCase(Case(([3, 1], 5), {}), ValueError, "k > n")


def test_matching_asks_only_the_divergences_of_the_inputs_kind() -> None:
    asked: list[str] = []

    def asks(name, answer):
        def applies(call):
            asked.append(name)
            return answer
        return applies

    adapter = _stand_in(known=(
        KnownDivergence("on_valid", asks("on_valid", True), doc="d", kind="valid",
                        fields=""),
        KnownDivergence("on_errors", asks("on_errors", True), doc="d", kind="errors",
                        accepts=True),
        KnownDivergence("both_no", asks("both_no", False), doc="d", accepts=True),
        KnownDivergence("both_yes", asks("both_yes", 1), doc="d", accepts=True),
    ))
    valid, invalid = adapter.call_of(VALID), adapter.call_of(INVALID)
    assert [k.name for k in adapter.matching(valid)] == ["on_valid", "both_yes"]
    assert asked == ["on_valid", "both_no", "both_yes"]
    asked.clear()
    assert [k.name for k in adapter.matching(invalid)] == ["on_errors", "both_yes"]
    assert asked == ["on_errors", "both_no", "both_yes"]
    assert adapter.in_domain(valid) is True  # `supports` defaults to every input
    assert adapters._always(VALID) is True
    picky = _stand_in(supports=lambda call: len(call.arg("values")) > 5)
    assert picky.in_domain(valid) is False


def test_a_raising_predicate_is_a_predicate_error_naming_adapter_predicate_and_input() -> None:
    adapter = _stand_in(known=(KnownDivergence("long", lambda call: call.arg("values") > 3,
                                               doc="d", accepts=True),))
    with pytest.raises(PredicateError) as raised:
        adapter.matching(adapter.call_of(INVALID))
    call = adapter.call_of(INVALID)
    assert str(raised.value) == (
        f"adapter stand_in.triage: known divergence 'long' raised TypeError: "
        f"'>' not supported between instances of 'list' and 'int' on {call.short(200)} "
        "(an invalid input). A fault of the adapter (batchproof's), not of "
        "tests.test_adapter_triage:_target: its predicates must accept every input of the "
        "record, valid or invalid (docs/frameworks.md, 'Writing an adapter')")
    assert isinstance(raised.value.__cause__, TypeError)
    assert isinstance(raised.value, HarnessError)
    picky = _stand_in(supports=lambda call: call.arg("k") > "3")
    long_case = Case((list(range(300)), 2), {})  # its description is cut at 200 characters
    call = picky.call_of(long_case)
    with pytest.raises(PredicateError) as raised:
        picky.in_domain(call)
    assert str(raised.value) == (
        "adapter stand_in.triage: supports raised TypeError: '>' not supported between "
        f"instances of 'int' and 'str' on {call.short(200)}. A fault of the adapter "
        "(batchproof's), not of tests.test_adapter_triage:_target: its predicates must accept "
        "every input of the record, valid or invalid (docs/frameworks.md, 'Writing an "
        "adapter')")
    assert call.short(200) != call.short(201)


# --------------------------------------------------------------------------- the Call


def test_call_of_a_case_a_bad_case_and_a_model_case() -> None:
    call = Call.of(Case(([[1]], [[2]]), {"pad_token_id": 0}, "lbl"), build_rl_batch)
    assert call.valid and call.bad is None and call.label == "lbl"
    assert call.parameters[:2] == ("prompts", "responses")
    assert call.defaults["layout"] == "left"
    assert Call.of(call) is call  # already a Call
    bad = BadCase(Case((5,), {"k": 1}, "b"), TypeError)
    bad_call = Call.of(bad, karmarkar_karp)
    assert bad_call.bad is bad and not bad_call.valid
    assert bad_call.args == (5,) and bad_call.kwargs == {"k": 1} and bad_call.label == "b"
    spec = ModelSpec("llama", "sdpa")
    model_call = Call.of(ModelCase((1, 2), {"x": 3}, "m", model=spec))
    assert model_call.args == (spec, 1, 2) and model_call.kwargs == {"x": 3}
    assert Call.of(Case((1,), {})).parameters == () and Call.of(Case((1,), {})).defaults == {}


def test_call_arg_by_keyword_position_default_or_fallback() -> None:
    call = Call.of(Case(([1, 2], 3), {"equal_size": True}), karmarkar_karp)
    assert call.arg("values") == [1, 2] and call.arg("k") == 3
    assert call.arg("equal_size") is True
    short = Call.of(Case(([1, 2],), {}), karmarkar_karp)
    assert short.arg("k") is None and short.arg("k", "none given") == "none given"
    assert short.arg("equal_size") is False  # the contract's default
    assert short.arg("nowhere", 7) == 7
    keyword = Call.of(Case((), {"values": [4]}), karmarkar_karp)
    assert keyword.arg("values") == [4]


def test_call_rows_and_lengths_never_raise() -> None:
    call = Call.of(Case(([[1, 2], (3,)], torch.tensor([[1, 2], [3, 4], [5, 6]]), 5,
                         [[1], 2], torch.tensor(3)), {}))
    call = dataclasses.replace(call, parameters=("a", "b", "c", "d", "e"))
    assert call.rows("a") == [[1, 2], (3,)] and call.lengths("a") == [2, 1]
    assert len(call.rows("b")) == 3 and call.lengths("b") == [2, 2, 2]
    assert call.rows("c") is None and call.lengths("c") is None
    assert call.lengths("d") is None  # a row without a length
    assert call.rows("e") is None  # a 0-d tensor has no rows
    assert adapters.rows((1, 2)) == [1, 2] and adapters.rows("ab") is None
    nested = torch.nested.nested_tensor([torch.zeros(1), torch.zeros(2)], layout=torch.jagged)
    assert adapters.rows(nested) is None
    assert adapters.rows(torch.zeros(0)) == []


def test_values_reads_a_row_or_says_none() -> None:
    assert adapters.values(torch.tensor([1, 2])) == [1, 2]
    assert adapters.values(torch.ones(2, device="meta")) is None
    assert adapters.values(torch.tensor(4)) is None
    nested = torch.nested.nested_tensor([torch.zeros(1), torch.zeros(2)], layout=torch.jagged)
    assert adapters.values(nested) is None
    assert adapters.values((1, 2)) == [1, 2] and adapters.values([3]) == [3]
    assert adapters.values("ab") is None and adapters.values(5) is None
    assert Call.values([1]) == [1]


def test_signature_names_positional_parameters_and_every_default() -> None:
    def f(a, b=2, /, c=3, *args, d, e=5, **kw):
        return a

    assert calls._signature(f) == (("a", "b", "c"), {"b": 2, "c": 3, "e": 5})
    assert calls._signature(None) == ((), {})
    assert calls._signature(5) == ((), {})  # not a callable: no signature
    assert calls._signature(dict.fromkeys)[0] == ("iterable", "value")


# --------------------------------------------------------------------------- the adapter


def test_fits_reads_the_version_specifier() -> None:
    assert _stand_in().fits("anything")
    ranged = _stand_in(versions=">=0.4,<0.5")
    assert ranged.fits("0.4.1") and not ranged.fits("0.5.0") and not ranged.fits("0.3")
    assert not ranged.fits("not a version")


def test_without_and_retarget() -> None:
    adapter = _stand_in(known=(_known(accepts=True),
                               KnownDivergence("j", lambda c: True, doc="d", accepts=True)),
                        distribution="numpy")
    assert [k.name for k in adapter.without("k").known] == ["j"]
    assert adapter.without().known == adapter.known
    with pytest.raises(ValueError) as raised:
        adapter.without("k", "nope", "also")
    assert str(raised.value) == "stand_in.triage has no known divergence ['also', 'nope']"
    moved = adapter.retarget("m:f")
    assert moved.target == "m:f" and moved.distribution is None and moved.name == adapter.name


def test_version_and_distribution_version() -> None:
    assert adapters.distribution_version(None) == "-"
    assert adapters.distribution_version("no-such-distribution-xyz") == "not installed"
    assert adapters.distribution_version("torch") == torch.__version__.split("+")[0] or \
        adapters.distribution_version("torch").startswith(torch.__version__.split("+")[0])
    assert _stand_in().version() == "-"
    assert _stand_in(distribution="no-such-distribution-xyz").version() == "not installed"


def test_load_imports_inside_the_adapters_import_step() -> None:
    entered: list[str] = []

    class Step:
        def __enter__(self):
            entered.append("in")

        def __exit__(self, *exc):
            entered.append("out")

    adapter = _stand_in(target="batchproof.reference.balance:karmarkar_karp",
                        importing=Step, wrap=lambda fn: lambda *a, **k: ("wrapped", fn(*a, **k)))
    assert adapter.load() is karmarkar_karp and entered == ["in", "out"]
    assert adapter.candidate()([3, 1, 2], 2) == ("wrapped", karmarkar_karp([3, 1, 2], 2))
    assert entered == ["in", "out", "in", "out"]
    with _stand_in().import_step() as step:  # no import step: nothing to do
        assert step is None
    with pytest.raises(FrameworkMissing, match="is not callable"):
        _stand_in(target="batchproof.adapters:FRAMEWORK_MODULES").load()
    missing = _stand_in(target="no_such_module_xyz:f", distribution="no-such-dist")
    with pytest.raises(FrameworkMissing, match=r"\(is no-such-dist installed\? "):
        missing.load()


def test_identity_adapter() -> None:
    adapter = adapters.identity_adapter("balance.karmarkar_karp", "m:f")
    assert adapter.name == "m:f as balance.karmarkar_karp" and adapter.framework == "custom"
    assert adapter.record == "balance.karmarkar_karp" and adapter.target == "m:f"
    assert adapter.forms is None and adapter.wrap(len) is len


# --------------------------------------------------------------------------- guarded


def _framework_module():
    """A stand-in framework package `fakefw` whose function raises from its own code."""
    module = types.ModuleType("fakefw.core")
    exec(  # noqa: S102 - a module whose frames are named fakefw.core
        "def fails(*a, **k):\n    raise KeyError('inside the framework')\n"
        "class Runner:\n    def __call__(self, *a, **k):\n"
        "        raise IndexError('in a class the wrapper made')\n",
        module.__dict__)
    return module


def test_guarded_passes_the_frameworks_exceptions_on() -> None:
    def fails(*a, **k):
        raise ValueError("the framework's")

    adapter = _stand_in(wrap=lambda fn: lambda *a, **k: fn(*a, **k))
    with pytest.raises(ValueError, match="the framework's"):
        adapter.guarded(fails)(1)

    def reraising_wrap(fn):  # the adapter turns the framework's error into another type
        def wrapped(*a, **k):
            try:
                return fn(*a, **k)
            except ValueError as err:
                raise TypeError("mapped") from err
        return wrapped

    with pytest.raises(TypeError, match="mapped"):
        _stand_in(wrap=reraising_wrap).guarded(fails)(1)
    assert _stand_in(wrap=lambda fn: fn).guarded(lambda x: x + 1)(1) == 2
    # keyword arguments reach the wrapper and the framework's function
    keywords = _stand_in(wrap=lambda fn: lambda *a, **k: fn(*a, **k))
    assert keywords.guarded(lambda x, *, y: x + y)(1, y=2) == 3


def test_guarded_calls_the_wrappers_own_errors_batchproofs() -> None:
    def before(fn):
        def wrapped(*a, **k):
            raise KeyError("no such argument")
        return wrapped

    with pytest.raises(AdapterError) as raised:
        _stand_in(wrap=before).guarded(lambda *a: 0)(1)
    assert str(raised.value) == (
        "adapter stand_in.triage: its wrapper raised KeyError: 'no such argument' before "
        "calling it, not tests.test_adapter_triage:_target. A fault of the adapter "
        "(batchproof's): it must pass every input it is given on to the framework's function")
    assert isinstance(raised.value.__cause__, KeyError)

    def after(fn):
        def wrapped(*a, **k):
            return fn(*a, **k)["missing"]
        return wrapped

    guarded = _stand_in(wrap=after).guarded(lambda *a: {})
    with pytest.raises(AdapterError, match="KeyError: 'missing' while mapping what it returned"):
        guarded(1)
    # the state is cleared between calls: a call that fails before calling says so again
    calls = iter([True, False])

    def sometimes(fn):
        def wrapped(*a, **k):
            if next(calls):
                return fn(*a, **k)["missing"]
            raise KeyError("early")
        return wrapped

    guarded = _stand_in(wrap=sometimes).guarded(lambda *a: {})
    with pytest.raises(AdapterError, match="while mapping"):
        guarded(1)
    with pytest.raises(AdapterError, match="before calling it"):
        guarded(1)

    def ours(fn):
        def wrapped(*a, **k):
            raise HarnessError("batchproof's own")
        return wrapped

    with pytest.raises(HarnessError) as raised:
        _stand_in(wrap=ours).guarded(lambda *a: 0)(1)
    assert type(raised.value) is HarnessError


def test_an_exception_from_the_frameworks_package_is_the_frameworks(monkeypatch) -> None:
    module = _framework_module()
    monkeypatch.setitem(sys.modules, "fakefw.core", module)
    adapter = _stand_in(target="fakefw.core:fails")

    def runner_wrap(fn):  # calls a framework class of its own, not the target
        return lambda *a, **k: module.Runner()(*a, **k)

    with pytest.raises(IndexError, match="in a class the wrapper made"):
        dataclasses.replace(adapter, wrap=runner_wrap).guarded(module.fails)(1)
    # the same from a package whose name only starts like the framework's: the wrapper's fault
    other = _stand_in(target="fakef.core:fails", wrap=runner_wrap)
    with pytest.raises(AdapterError):
        other.guarded(module.fails)(1)
    # any module of the framework's top-level package counts, whatever module the target is in
    for target in ("fakefw.elsewhere:fails", "fakefw:fails"):
        elsewhere = _stand_in(target=target, wrap=runner_wrap)
        with pytest.raises(IndexError):
            elsewhere.guarded(module.fails)(1)


def test_raised_by_follows_causes_and_contexts_and_stops_on_a_cycle() -> None:
    root = ValueError("root")
    caused = TypeError("caused")
    caused.__cause__ = root
    context = KeyError("context")
    context.__context__ = caused
    assert adapters._raised_by(root, root)
    assert adapters._raised_by(context, root)
    assert not adapters._raised_by(context, ValueError("another"))
    assert not adapters._raised_by(context, None)
    cycle_a, cycle_b = ValueError("a"), ValueError("b")
    cycle_a.__context__, cycle_b.__context__ = cycle_b, cycle_a
    assert not adapters._raised_by(cycle_a, root)  # returns instead of looping


def test_raised_in_reads_the_traceback_and_its_causes(monkeypatch) -> None:
    module = _framework_module()
    try:
        module.fails()
    except KeyError as err:
        inside = err
    assert adapters._raised_in(inside, "fakefw")
    assert not adapters._raised_in(inside, "fake")
    assert not adapters._raised_in(inside, "fakefw.co")
    outer = RuntimeError("outer")
    outer.__cause__ = inside
    assert adapters._raised_in(outer, "fakefw")
    assert not adapters._raised_in(RuntimeError("no traceback"), "fakefw")
    exact = types.ModuleType("fakefw")
    exec("def fails():\n    raise KeyError('top')\n", exact.__dict__)  # noqa: S102
    try:
        exact.fails()
    except KeyError as err:
        top = err
    assert adapters._raised_in(top, "fakefw")
    cycle_a, cycle_b = ValueError("a"), ValueError("b")
    cycle_a.__context__, cycle_b.__context__ = cycle_b, cycle_a
    assert not adapters._raised_in(cycle_a, "fakefw")
    nameless: dict = {}  # code run with globals that have no __name__: no package's
    exec("def fails():\n    raise KeyError('nameless')\n", nameless)  # noqa: S102
    try:
        nameless["fails"]()
    except KeyError as err:
        anonymous = err
    assert not adapters._raised_in(anonymous, "fakefw")


# --------------------------------------------------------------------------- loading


def test_load_target_imports_the_function_or_says_why_not() -> None:
    assert adapters.load_target("batchproof.reference.balance:karmarkar_karp") is karmarkar_karp
    assert adapters.load_target("batchproof.adapters:Call.of") == Call.of
    for bad in ("no_colon", ":f", "m:"):
        with pytest.raises(ValueError) as raised:
            adapters.load_target(bad)
        assert str(raised.value) == f"target must be module:function, got {bad!r}"
    with pytest.raises(FrameworkMissing) as raised:
        adapters.load_target("no_such_module_xyz:f", "no-such-dist")
    assert str(raised.value) == (
        "cannot import no_such_module_xyz: ModuleNotFoundError: No module named "
        "'no_such_module_xyz' (is no-such-dist installed? docs/frameworks.md says how to install "
        "it beside batchproof)")
    with pytest.raises(FrameworkMissing) as raised:
        adapters.load_target("no_such_module_xyz:f")
    assert str(raised.value).endswith("No module named 'no_such_module_xyz'")
    with pytest.raises(FrameworkMissing) as raised:
        adapters.load_target("batchproof.adapters:Call.nothing")
    assert str(raised.value) == "batchproof.adapters has no attribute 'Call.nothing'"
    assert raised.value.__suppress_context__
    with pytest.raises(FrameworkMissing) as raised:  # the module is before the first colon
        adapters.load_target("batchproof.adapters:Call:of")
    assert str(raised.value) == "batchproof.adapters has no attribute 'Call:of'"
    with pytest.raises(FrameworkMissing) as raised:
        adapters.load_target("batchproof.adapters:FRAMEWORK_MODULES")
    assert str(raised.value) == "batchproof.adapters:FRAMEWORK_MODULES is not callable"


def test_current_folder_importable(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["/elsewhere"])
    adapters.current_folder_importable()
    assert sys.path == [str(tmp_path), "/elsewhere"]
    adapters.current_folder_importable()  # once only
    assert sys.path == [str(tmp_path), "/elsewhere"]
    monkeypatch.setattr(sys, "path", ["", "/elsewhere"])  # "" is the current folder already
    adapters.current_folder_importable()
    assert sys.path == ["", "/elsewhere"]


def test_register_objects_and_adapter_files(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(adapters, "_ADAPTERS", {})
    one, two = _stand_in(name="one"), _stand_in(name="two")
    adapters.register_objects(one)
    assert adapters._ADAPTERS == {"one": one}
    adapters.register_objects([one, two])  # the same object again: registered once
    adapters.register_objects((two,))
    adapters.register_objects(None)
    assert adapters._ADAPTERS == {"one": one, "two": two}
    with pytest.raises(ValueError) as raised:
        adapters.register_objects([_stand_in(name="one")])  # another adapter, the same name
    assert str(raised.value) == "adapter 'one' registered twice"

    helper = tmp_path / "helper_mod_triage.py"
    helper.write_text("NAME = 'from_file'\n")
    file = tmp_path / "my_adapters.py"
    file.write_text(
        "import dataclasses\nfrom helper_mod_triage import NAME\n"
        "from tests.test_adapter_triage import _stand_in\n"
        "ADAPTERS = [_stand_in(name=NAME)]\n")
    shadow = tmp_path / "shadow"  # a module of the same name earlier on sys.path: the file's
    shadow.mkdir()                 # neighbour wins
    (shadow / "helper_mod_triage.py").write_text("NAME = 'from_the_shadow'\n")
    monkeypatch.syspath_prepend(str(shadow))
    monkeypatch.delitem(sys.modules, "helper_mod_triage", raising=False)
    added = adapters.load_adapter_file(str(file))
    assert [a.name for a in added] == ["from_file"]
    monkeypatch.delitem(sys.modules, "helper_mod_triage", raising=False)
    assert str(tmp_path) not in sys.path  # importable only while it loads
    with pytest.raises(ValueError) as raised:
        adapters.load_adapter_file(str(tmp_path / "missing.py"))
    assert str(raised.value) == f"--adapter-file {tmp_path / 'missing.py'}: no such file"
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    with pytest.raises(ValueError) as raised:
        adapters.load_adapter_file(str(empty))
    assert str(raised.value) == (
        f"--adapter-file {empty} registers no adapter (call batchproof.register_adapter(...) "
        "or define ADAPTERS)")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(FrameworkMissing) as raised:
        adapters.load_adapter_file(str(broken))
    assert str(raised.value) == f"--adapter-file {broken} failed: RuntimeError: boom"
    assert str(tmp_path) not in sys.path


def test_origin_says_what_a_fresh_process_needs_to_find_an_adapter(monkeypatch,
                                                                     tmp_path) -> None:
    """A replay line must find the adapter again (issue 39): "" for batchproof's own and an
    entry point's, the file for an adapter file (a `register_adapter` call or `ADAPTERS`) and for
    a module that registers it when imported, None for a call inside a function."""
    monkeypatch.setattr(adapters, "_ADAPTERS", {})
    monkeypatch.setattr(adapters, "_ORIGINS", {})
    monkeypatch.setattr(adapters, "_LOADING", None)
    monkeypatch.setattr(adapters, "FRAMEWORK_MODULES", ())
    monkeypatch.setattr(adapters, "_load_entry_points",
                        lambda: adapters.register_adapter(_stand_in(name="plugged")))
    adapters.all_adapters()
    assert adapters.origin("plugged") == "" and adapters._LOADING is None
    adapters.register_objects(_stand_in(name="ours"))  # called from batchproof's own module
    assert adapters.origin("ours") == ""
    adapters.register_adapter(_stand_in(name="in_a_function"))
    assert adapters.origin("in_a_function") is None and adapters.origin("unknown") is None
    calls = tmp_path / "calls_register.py"
    calls.write_text("import batchproof\nfrom tests.test_adapter_triage import _stand_in\n"
                     "batchproof.register_adapter(_stand_in(name='called'))\n")
    listed = tmp_path / "lists_them.py"
    listed.write_text("from tests.test_adapter_triage import _stand_in\n"
                      "ADAPTERS = [_stand_in(name='listed')]\n")
    for file, name in ((calls, "called"), (listed, "listed")):
        adapters.load_adapter_file(str(file))
        assert adapters.origin(name) == str(file.resolve()) and adapters._LOADING is None
    imported = tmp_path / "imported_adapters_triage.py"  # a module a test imports
    imported.write_text(calls.read_text().replace("'called'", "'imported'"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "imported_adapters_triage", raising=False)
    __import__("imported_adapters_triage")
    monkeypatch.delitem(sys.modules, "imported_adapters_triage", raising=False)
    assert adapters.origin("imported") == str(imported)
    broken = tmp_path / "broken_origin.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(FrameworkMissing):
        adapters.load_adapter_file(str(broken))
    assert adapters._LOADING is None  # a file that failed leaves nothing registering


def test_get_adapter_and_frameworks(monkeypatch) -> None:
    monkeypatch.setattr(adapters, "_ADAPTERS", {})
    monkeypatch.setattr(adapters, "FRAMEWORK_MODULES", ())
    monkeypatch.setattr(adapters, "_load_entry_points", lambda: None)
    first = adapters.register_adapter(_stand_in(name="fw_a.one", framework="fw_a"))
    adapters.register_adapter(_stand_in(name="fw_b.one", framework="fw_b"))
    adapters.register_adapter(_stand_in(name="fw_a.two", framework="fw_a"))
    assert adapters.get_adapter("fw_a.one") is first
    assert adapters.frameworks() == ["fw_a", "fw_b"]
    assert [a.name for a in adapters.all_adapters()] == ["fw_a.one", "fw_b.one", "fw_a.two"]
    with pytest.raises(ValueError) as raised:
        adapters.get_adapter("fw_a.onr")
    assert str(raised.value).startswith("unknown adapter 'fw_a.onr'")
    assert "fw_a.one" in str(raised.value)
    assert str(raised.value).endswith(" (`batchproof list adapters`)")


def test_all_adapters_imports_the_framework_modules_that_are_there(monkeypatch, tmp_path) -> None:
    (tmp_path / "fake_fw_triage.py").write_text(
        "from batchproof.adapters import register_adapter\n"
        "from tests.test_adapter_triage import _stand_in\n"
        "register_adapter(_stand_in(name='fake_fw_triage.one'))\n")
    monkeypatch.setattr(adapters, "__path__", [*adapters.__path__, str(tmp_path)])
    monkeypatch.setattr(adapters, "FRAMEWORK_MODULES", ("absent_fw_triage", "fake_fw_triage"))
    monkeypatch.setattr(adapters, "_ADAPTERS", {})
    monkeypatch.setattr(adapters, "_load_entry_points", lambda: None)
    monkeypatch.delitem(sys.modules, "batchproof.adapters.fake_fw_triage", raising=False)
    assert [a.name for a in adapters.all_adapters()] == ["fake_fw_triage.one"]
    monkeypatch.delitem(sys.modules, "batchproof.adapters.fake_fw_triage")


class _Entry:
    def __init__(self, name, value, loaded):
        self.name, self.value, self._loaded = name, value, loaded
        self.loads = 0

    def load(self):
        self.loads += 1
        if isinstance(self._loaded, Exception):
            raise self._loaded
        return self._loaded


def test_entry_points_are_loaded_once_and_a_broken_one_is_reported(monkeypatch) -> None:
    plugged = _stand_in(name="plugged.one")
    good = _Entry("plugged", "plugged_mod:ADAPTERS", [plugged])
    broken = _Entry("broken", "no_such_mod", ImportError("no module named no_such_mod"))
    groups: list[str] = []

    def entry_points(*, group):
        groups.append(group)
        return [good, broken]

    monkeypatch.setattr(adapters.importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(adapters, "_ADAPTERS", {})
    monkeypatch.setattr(adapters, "_LOADED_ENTRY_POINTS", set())
    monkeypatch.setattr(adapters, "LOAD_PROBLEMS", [])
    adapters._load_entry_points()
    adapters._load_entry_points()  # the second time: nothing is loaded again
    assert groups == ["batchproof.adapters", "batchproof.adapters"]
    assert adapters._ADAPTERS == {"plugged.one": plugged}
    assert good.loads == 1 and broken.loads == 1
    assert adapters._LOADED_ENTRY_POINTS == {"plugged=plugged_mod:ADAPTERS",
                                             "broken=no_such_mod"}
    later = _Entry("later", "later_mod:ADAPTERS", [_stand_in(name="later.one")])
    monkeypatch.setattr(adapters.importlib.metadata, "entry_points",
                        lambda *, group: [good, broken, later])  # installed since
    adapters._load_entry_points()
    assert later.loads == 1 and good.loads == 1 and "later.one" in adapters._ADAPTERS
    assert adapters.LOAD_PROBLEMS == [
        "adapter entry point broken (no_such_mod) failed to load: ImportError: no module "
        "named no_such_mod"]


def test_a_framework_draws_one_defect_per_call_a_function_of_the_contract_two() -> None:
    """Which of two simultaneous defects is reported first is owed by an implementation of the
    contract (`--impl module:function`, `batchproof.check`), not by a framework's function
    (docs/frameworks.md, "Invalid inputs")."""
    from hypothesis import HealthCheck, Phase, given, settings

    from batchproof import registry
    from batchproof.adapters import identity_adapter
    from batchproof.adapters.runner import _invalid_for

    info = registry.get("sft.ffd_bins")
    framework = Adapter(name="stand_in.ffd", framework="stand_in", record=info.name,
                        target="m:f", wrap=lambda fn: fn)
    assert _invalid_for(identity_adapter(info.name, "m:f"), info) is info.invalid

    def defects(strategy) -> list[int]:
        found: list[int] = []
        settings(max_examples=60, derandomize=True, database=None, phases=[Phase.generate],
                 suppress_health_check=list(HealthCheck))(
            given(strategy)(lambda bad: found.append(1 + bad.why.count(", and "))))()
        return found

    assert max(defects(info.invalid)) == 2
    assert set(defects(_invalid_for(framework, info))) == {1}

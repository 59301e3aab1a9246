"""`batchproof.adapters.scope`, option by option, in this process and without running a check:
`Scope.of`/`from_args` take every shape the module docstring names, `validate` refuses what no
record has, `narrow` restricts an adapter as documented (forms, skips and the bad-input pins,
not-provided outputs, the layout's domain and the properties that vary it, renamed outputs),
and `words`/`keywords`/`widened` give the scope back. These tests are the killers of
`batchproof mutate --mutmut --harness adapters/scope` (tests/test_scope.py runs checks)."""

from __future__ import annotations

import dataclasses
import inspect
import time
from types import SimpleNamespace

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from tensordict import TensorDict

from batchproof import registry
from batchproof.adapters import identity_adapter, scope
from batchproof.adapters.scope import Scope
from batchproof.calls import Call
from batchproof.registry import BadCase, Case

RL = "rl_batch.build_rl_batch"
KK = "balance.karmarkar_karp"
RL_OUTPUTS = {"input_ids", "attention_mask", "loss_mask", "position_ids"}


@pytest.fixture
def outputs(monkeypatch) -> list:
    """`output_keys` as a stand-in (drawing the oracle's outputs takes seconds): RL_OUTPUTS."""
    asked = []
    monkeypatch.setattr(scope, "output_keys", lambda info: asked.append(info.name)
                        or set(RL_OUTPUTS))
    return asked


def adapter(record: str = RL, **changes):
    """An identity adapter of `record`, with `changes`."""
    return dataclasses.replace(identity_adapter(record, "mine:f"), **changes)


# --------------------------------------------------------------------------- building one


def test_of_takes_lists_or_tuples_names_or_reasons_pairs_or_a_mapping() -> None:
    given = Scope.of(forms=["lists", "tensors"], skip=["errors", "pin:x"],
                     not_provided=["a", "b", "a"], layout="left", output_names=["x=y"],
                     adapter_files=["f.py"], checks=["equivalence"])
    assert given == Scope(forms=("lists", "tensors"),
                          skip={"errors": "skipped by the caller",
                                "pin:x": "skipped by the caller"},
                          not_provided=("a", "b"), layout="left", output_names=("x=y",),
                          adapter_files=("f.py",), checks=("equivalence",))
    reasons = Scope.of(skip={"errors": "mine raises KeyError"}, output_names={"x": "y", "z": "w"})
    assert reasons.skip == {"errors": "mine raises KeyError"}
    assert reasons.output_names == ("x=y", "z=w")
    assert isinstance(given.forms, tuple) and isinstance(given.checks, tuple)


def test_of_without_options_is_the_empty_scope() -> None:
    assert Scope.of() == Scope()
    assert Scope.of(forms=[], checks=[], not_provided=None, output_names=None,
                    adapter_files=None, skip=None) == Scope()
    assert Scope().forms is None and Scope().checks is None and Scope().layout is None


def test_of_refuses_a_malformed_output_name() -> None:
    for pair in ("x", "=y", "x="):
        with pytest.raises(ValueError) as error:
            Scope.of(output_names=[pair])
        assert str(error.value) == f"--output-name {pair!r}: expected THEIRS=CONTRACT"
    assert scope.renames(["a=b=c", "d=e"]) == {"a": "b=c", "d": "e"}
    assert scope.renames(None) == {} and scope.renames(()) == {}


def test_from_args_reads_the_command_line_s_names() -> None:
    args = SimpleNamespace(forms=["lists"], skip=["errors"], not_provided=["loss_mask"],
                           layout="left", output_name=["mask=attention_mask"],
                           adapter_file=["adapters.py"], check=["equivalence"])
    assert Scope.from_args(args) == Scope(
        forms=("lists",), skip={"errors": "skipped by the caller"}, not_provided=("loss_mask",),
        layout="left", output_names=("mask=attention_mask",), adapter_files=("adapters.py",),
        checks=("equivalence",))


def test_from_args_without_the_options_is_the_empty_scope() -> None:
    assert Scope.from_args(SimpleNamespace()) == Scope()
    assert Scope.from_args(SimpleNamespace(forms=None, skip=None, not_provided=None,
                                           layout=None, output_name=None, adapter_file=None,
                                           check=None)) == Scope()


# --------------------------------------------------------------------------- validate


def test_validate_accepts_what_one_of_the_records_has() -> None:
    Scope.of(skip=["errors"], checks=["property:partition"], forms=["tensor"]).validate([KK])
    Scope.of(skip=["property:partition"], forms=["jagged"]).validate([KK, RL, KK])


def test_validate_refuses_a_check_no_record_has() -> None:
    with pytest.raises(ValueError) as error:
        Scope.of(skip=["property:nope"]).validate([KK])
    assert str(error.value) == (f"{KK} has no check 'property:nope' (see `batchproof list "
                                "checks`)")
    with pytest.raises(ValueError) as error:
        Scope.of(checks=["property:nope"]).validate([KK, RL])
    assert str(error.value) == (f"none of {[KK, RL]} has no check 'property:nope' (see "
                                "`batchproof list checks`)")
    with pytest.raises(ValueError, match="no check 'pin:x'"):
        Scope.of(checks=["equivalence", "pin:x"]).validate([KK, KK])


def test_validate_refuses_a_form_no_record_has() -> None:
    with pytest.raises(ValueError) as error:
        Scope.of(forms=["lists", "jagged"]).validate([KK])
    assert str(error.value) == (f"{KK} has no input form 'jagged'; its forms: "
                                f"{list(registry.get(KK).forms)}")


# --------------------------------------------------------------------------- narrow


def test_narrow_keeps_the_forms_the_record_has(outputs) -> None:
    narrowed = Scope.of(forms=["jagged", "tensor", "lists"]).narrow(adapter())
    assert narrowed.forms == ("jagged", "lists")
    assert narrowed.scope == Scope.of(forms=["jagged", "tensor", "lists"])
    assert Scope().narrow(adapter(forms=("lists",))).forms == ("lists",)
    assert outputs == []  # no output named: the oracle is not asked


def test_narrow_refuses_forms_the_record_has_none_of() -> None:
    with pytest.raises(ValueError) as error:
        Scope.of(forms=["jagged", "nested"]).narrow(adapter(KK))
    assert str(error.value) == (f"{KK} has none of the input forms ['jagged', 'nested']; its "
                                f"forms: {list(registry.get(KK).forms)}")


def test_narrow_skips_the_record_s_checks_and_every_bad_input_pin(outputs) -> None:
    info = registry.get(RL)
    bad_pins = [f"pin:{p.name}" for p in info.pins if isinstance(p.case, BadCase)]
    good_pins = [f"pin:{p.name}" for p in info.pins if not isinstance(p.case, BadCase)]
    assert bad_pins and good_pins
    given = {"errors": "mine does not validate", "property:nope": "x", bad_pins[0]: "own"}
    narrowed = Scope.of(skip=given).narrow(adapter(skip={"property:positions": "theirs"}))
    assert narrowed.skip["errors"] == "mine does not validate"
    assert narrowed.skip[bad_pins[0]] == "own"  # a reason given keeps
    assert all(narrowed.skip[p] == "a bad-input pin (mine does not validate)"
               for p in bad_pins[1:])
    assert narrowed.skip["property:positions"] == "theirs"  # the adapter's own skips stay
    assert "property:nope" not in narrowed.skip  # not the record's
    assert not set(good_pins) & set(narrowed.skip)
    only = Scope.of(skip=[good_pins[0]]).narrow(adapter())
    assert set(only.skip) == {good_pins[0]}


def test_narrow_adds_the_outputs_not_provided(outputs) -> None:
    narrowed = Scope.of(not_provided=["loss_mask", "position_ids"]).narrow(
        adapter(not_provided=("position_ids", "attention_mask")))
    assert narrowed.not_provided == ("position_ids", "attention_mask", "loss_mask")
    assert outputs == [RL]


def test_narrow_refuses_an_output_the_oracle_does_not_make(outputs) -> None:
    with pytest.raises(ValueError) as error:
        Scope.of(not_provided=["loss_mask", "nope"]).narrow(adapter())
    assert str(error.value) == (f"{RL} has no output 'nope'; its outputs: "
                                f"{', '.join(sorted(RL_OUTPUTS))}")
    with pytest.raises(ValueError, match="no output 'masks'"):
        Scope.of(output_names=["mask=masks"]).narrow(adapter())


def test_narrow_names_any_output_of_a_record_without_tensordicts(monkeypatch) -> None:
    monkeypatch.setattr(scope, "output_keys", lambda info: set())
    assert Scope.of(not_provided=["anything"]).narrow(adapter(KK)).not_provided == ("anything",)


def test_narrow_to_a_layout_restricts_the_domain_and_skips_what_varies_it(outputs) -> None:
    calls = []

    def supports(call) -> bool:
        calls.append(call)
        return call.arg("prompts") != "refused"

    narrowed = Scope.of(layout="two_segment").narrow(adapter(supports=supports))
    contract = registry.get(RL).reference

    def domain(*args, **kwargs) -> bool:
        return narrowed.supports(Call.of(Case(args, kwargs), contract))

    assert domain([[1]], [[2]], layout="two_segment", pad_token_id=0)
    assert not domain([[1]], [[2]], layout="left", pad_token_id=0)
    assert not domain([[1]], [[2]], pad_token_id=0)  # the contract's default: left
    assert not domain("refused", [[2]], layout="two_segment", pad_token_id=0)
    assert len(calls) == 2  # asked only in the layout
    assert narrowed.skip["property:layouts_agree"] == (
        "calls the function with another layout (outside --layout two_segment)")
    assert [c for c in narrowed.skip if c.startswith("property:")] == ["property:layouts_agree"]
    left = Scope.of(layout="left").narrow(adapter())
    assert left.supports(Call.of(Case(([[1]], [[2]]), {"pad_token_id": 0}), contract))
    # a call that does not know the contract: its default layout is still the contract's
    assert left.supports(Call(([[1]], [[2]]), {"pad_token_id": 0}))
    assert not narrowed.supports(Call(([[1]], [[2]]), {"pad_token_id": 0}))
    kept = Scope.of(layout="left", skip={"property:layouts_agree": "mine"}).narrow(adapter())
    assert kept.skip["property:layouts_agree"] == "mine"


def test_no_layout_leaves_the_domain_alone(outputs) -> None:
    original = adapter()
    assert Scope().narrow(original).supports is original.supports
    assert Scope().narrow(original).wrap is original.wrap
    assert "property:layouts_agree" not in Scope().narrow(original).skip


def test_a_layout_for_a_record_without_one_is_refused() -> None:
    with pytest.raises(ValueError) as error:
        Scope.of(layout="left").narrow(adapter(KK))
    assert str(error.value) == f"{KK} has no layout argument (--layout)"


def test_narrow_renames_the_outputs(outputs) -> None:
    def target(*args, **kwargs):
        return {"mask": torch.ones(2, 3), "ids": torch.zeros(2, 3), "width": 3}

    narrowed = Scope.of(output_names=["mask=attention_mask"]).narrow(
        adapter(wrap=lambda fn: fn))
    out = narrowed.wrap(target)()
    assert set(out.keys()) == {"attention_mask", "ids", "width"}
    assert out.batch_size == torch.Size([2])
    assert out.get_non_tensor("width") == 3


def test_a_renamed_tensordict_output_is_renamed_in_place() -> None:
    td = TensorDict({"mask": torch.ones(2), "ids": torch.zeros(2)}, batch_size=[2])
    wrap = scope.renamed(lambda fn: fn, {"mask": "attention_mask", "absent": "x"})
    out = wrap(lambda: td)()
    assert out is td and set(out.keys()) == {"attention_mask", "ids"}
    assert scope.renamed(lambda fn: fn, {"a": "b"})(lambda: [1])() == [1]


def test_renamed_wraps_the_adapter_s_wrap_and_keeps_its_signature() -> None:
    def inner(prompts, responses, *, pad_token_id):
        return {"a": pad_token_id}

    def wrap(fn):
        def wrapped(prompts, responses, *, pad_token_id):
            return fn(prompts, responses, pad_token_id=pad_token_id + 1)
        return wrapped

    named = scope.renamed(wrap, {"a": "b"})(inner)
    assert list(inspect.signature(named).parameters) == ["prompts", "responses", "pad_token_id"]
    assert named([[1]], [[2]], pad_token_id=4).get_non_tensor("b") == 5


def test_as_tensordict() -> None:
    td = scope.as_tensordict({"n": 7, "x": torch.zeros(3, 2), "y": torch.ones(3)})
    assert td.batch_size == torch.Size([3]) and td.get_non_tensor("n") == 7
    assert torch.equal(td["y"], torch.ones(3))
    scalars = scope.as_tensordict({"n": 7, "s": "text"})
    assert scalars.batch_size == torch.Size([]) and scalars.get_non_tensor("s") == "text"


def test_output_keys_are_the_oracle_s_on_pins_and_draws() -> None:
    assert scope.output_keys(registry.get(RL), draws=3) >= RL_OUTPUTS
    assert scope.output_keys(registry.get(KK), draws=3) == set()


@pytest.fixture
def profile():
    """`settings.load_profile` for the test; the profile it found is loaded back after."""
    current = settings._current_profile
    yield settings.load_profile
    settings.load_profile(current)


def drawing(valid) -> tuple[SimpleNamespace, list]:
    """A record without pins whose oracle records what it is called with."""
    seen = []
    return SimpleNamespace(pins=[], valid=valid, reference=lambda *args: seen.append(args)), seen


WIDE = st.lists(st.integers(0, 10**9), min_size=1, max_size=3).map(lambda v: Case((v,)))


def test_output_keys_draw_40_derandomized_inputs_under_any_profile(profile) -> None:
    profile("default")  # Hypothesis' own: randomized, 100 examples
    record, seen = drawing(WIDE)
    scope.output_keys(record)
    first, seen[:] = list(seen), []
    scope.output_keys(record)
    assert len(first) == 40 and seen == first
    scope.output_keys(record, draws=3)
    assert len(seen) == 43


def test_output_keys_run_no_health_check(profile) -> None:
    profile("default")
    # about one draw in a hundred passes the filter: Hypothesis' health check would refuse it
    rare = st.integers(10**6, 10**9).filter(lambda n: n % 97 == 0).map(lambda n: Case((n,)))
    record, seen = drawing(rare)
    assert scope.output_keys(record, draws=10) == set() and len(seen) == 10


def test_output_keys_have_no_deadline(profile) -> None:
    profile("default")  # a deadline of 200 ms
    slow = SimpleNamespace(pins=[], valid=WIDE, reference=lambda *args: time.sleep(0.25))
    assert scope.output_keys(slow, draws=2) == set()


def test_output_keys_read_the_valid_pins_and_pass_over_what_raises() -> None:
    seen = []

    def reference(*args, **kwargs):
        seen.append(args)
        if args == ("raise",):
            raise RuntimeError("no extra")
        return TensorDict({args[0]: torch.zeros(1)}, batch_size=[1])

    pins = [SimpleNamespace(name="a", case=Case(("from_pin",))),
            SimpleNamespace(name="b", case=Case(("raise",))),
            SimpleNamespace(name="c", case=BadCase(Case(("bad",)), ValueError))]
    fake = SimpleNamespace(pins=pins, reference=reference,
                           valid=st.just(Case(("drawn",))))
    assert scope.output_keys(fake, draws=2) == {"from_pin", "drawn"}
    assert ("bad",) not in seen


# --------------------------------------------------------------------------- giving it back


def test_words_give_the_flags_back_adapter_files_first() -> None:
    given = Scope.of(adapter_files=["a.py", "b.py"], forms=["lists", "jagged"],
                     not_provided=["loss_mask"], skip=["errors", "pin:x"],
                     output_names=["m=attention_mask"], layout="left", checks=["equivalence"])
    assert given.words() == ["--adapter-file", "a.py", "--adapter-file", "b.py",
                             "--forms", "lists", "--forms", "jagged",
                             "--not-provided", "loss_mask", "--skip", "errors", "--skip", "pin:x",
                             "--output-name", "m=attention_mask", "--layout", "left"]
    assert Scope().words() == []
    flags = {w for w in given.words() if w.startswith("--") and w != "--adapter-file"}
    assert flags == set(scope.SCOPE_FLAGS)


def test_keywords_give_the_scope_back_as_check_s_keywords() -> None:
    given = Scope.of(forms=["lists"], skip={"errors": "why"}, not_provided=["loss_mask"],
                     layout="left", output_names=["m=attention_mask"], checks=["equivalence"])
    assert given.keywords() == {"forms": ["lists"], "skip": ["errors"],
                                "not_provided": ["loss_mask"], "layout": "left",
                                "output_names": {"m": "attention_mask"},
                                "checks": ["equivalence"]}
    assert Scope().keywords() == {"forms": None, "skip": [], "not_provided": [],
                                  "layout": None, "output_names": None, "checks": None}
    assert Scope.of(**given.keywords()) == dataclasses.replace(given, skip={
        "errors": "skipped by the caller"})


def test_widened_grows_skip_and_not_provided_and_replaces_the_rest() -> None:
    given = Scope.of(skip={"errors": "why"}, not_provided=["a"], layout="left",
                     forms=["lists"])
    wider = given.widened(skip=["pin:x", "errors"], not_provided=["b", "a"],
                          layout="two_segment", forms=("jagged",))
    assert wider.skip == {"errors": "skipped by the caller", "pin:x": "skipped by the caller"}
    assert wider.not_provided == ("a", "b")
    assert wider.layout == "two_segment" and wider.forms == ("jagged",)
    assert given.widened() == given
    assert given.widened(layout=None).layout is None
    assert given.skip == {"errors": "why"}  # the original unchanged

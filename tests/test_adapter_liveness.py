"""Adapter liveness (`batchproof.adapters.liveness`): every output field an adapter compares must
be able to fail.

For every adapter, each leaf of the framework's own return value is corrupted before the
adapter's conversion, and every compared field must then differ and be named by a new divergence
of the `equivalence` check. On a stand-in of each framework (`tests/liveness_stand_ins.py`, on
every push: the conversion code is the adapter's) and on the installed framework itself (the
framework matrix runs `test_liveness_on_the_installed_framework` in every release's venv).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys

import pytest
import torch
from liveness_stand_ins import StandIn, stand_ins
from tensordict import TensorDict

from batchproof import adapters
from batchproof.adapters import FrameworkMissing
from batchproof.adapters.liveness import (
    Corruption,
    Leaf,
    LivenessError,
    Tap,
    check_liveness,
    corrupt,
    tapped,
)

STAND_INS = stand_ins()
# adapters without a stand-in, and why their liveness still runs on every push
WITHOUT_STAND_IN = {
    "transformers.": "transformers comes with batchproof[models] (the dev and CI environments): "
                     "test_liveness_on_the_installed_framework runs the real one",
}
# model forwards: fewer inputs (each is a forward of a tiny model on both sides)
FEW = {"transformers.packed_forward": 2, "transformers.padding_free_forward": 2}


def _framework_adapters() -> list[str]:
    return sorted(a.name for a in adapters.all_adapters() if a.framework != "custom")


def _liveness(adapter, function=None):
    draws = FEW.get(adapter.name)
    options = {} if draws is None else {"draws": draws, "pins": draws}
    return check_liveness(adapter, function, **options)


def test_every_adapter_has_a_stand_in_or_says_why() -> None:
    missing = [name for name in _framework_adapters() if name not in STAND_INS
               and not any(name.startswith(prefix) for prefix in WITHOUT_STAND_IN)]
    assert not missing, f"adapters without a liveness stand-in: {missing}"


@pytest.mark.parametrize("name", sorted(STAND_INS))
def test_every_compared_field_can_fail_on_a_stand_in(name: str) -> None:
    stand_in = STAND_INS[name]
    with stand_in.installed():
        result = _liveness(adapters.get_adapter(name), stand_in.function)
    assert result.live, "\n".join(result.lines())
    assert result.inputs >= 1 and result.leaves


def _installed(adapter) -> bool:
    """Whether the adapter's framework (a version it fits, with what it needs) is installed."""
    version = adapter.version()
    return (version not in ("-", "not installed") and adapter.fits(version)
            and not adapter.missing_needs())


@pytest.mark.parametrize("name", _framework_adapters())
def test_liveness_on_the_installed_framework(name: str) -> None:
    adapter = adapters.get_adapter(name)
    matrix = os.environ.get("BATCHPROOF_MATRIX_IMPL")  # set by .ci/frameworks.py
    if matrix and adapter.framework != matrix:
        pytest.skip(f"the framework matrix runs {adapter.framework}'s adapters in its own venv")
    if not _installed(adapter):
        needs = f" with {', '.join(adapter.needs)}" if adapter.needs else ""
        pytest.skip(f"{adapter.distribution}{adapter.versions}{needs} is not installed")
    try:
        function = adapter.load()
    except FrameworkMissing as err:
        pytest.skip(str(err))
    result = _liveness(adapter, function)
    assert result.live, "\n".join(result.lines())


# --------------------------------------------------------------------------- planted faults


def _planted_twin(name: str, key: str):
    """The adapter `name`, its conversion planted with a fault: `key` filled from the contract's
    reference output (the inputs), not from the framework's."""
    from batchproof import registry

    adapter = adapters.get_adapter(name)
    reference = registry.get(adapter.record).reference

    def wrap(function):
        converted = adapter.wrap(function)

        def planted(*args, **kwargs):
            out = converted(*args, **kwargs)
            out[key] = reference(*args, **kwargs)[key]
            return out

        return planted

    return dataclasses.replace(adapter, wrap=wrap)


@pytest.mark.parametrize("name, key", [("skyrl.rl_batch_0_4", "attention_mask"),
                                       ("trl.grpo_pad", "loss_mask"),
                                       ("skyrl.pack_sft_v0_4", "sub_seq_lengths"),
                                       ("verl.router_replay_data", "routed_experts")])
def test_a_field_filled_from_the_inputs_is_dead(name: str, key: str) -> None:
    stand_in = STAND_INS[name]
    with stand_in.installed():
        result = check_liveness(_planted_twin(name, key), stand_in.function)
    assert not result.live and result.dead == [key], "\n".join(result.lines())
    assert f"'{key}': DEAD" in "\n".join(result.lines())


def test_an_output_no_check_looks_at_is_not_live() -> None:
    """An adapter whose equivalence is skipped must have some other check see a corruption;
    a planted twin that hands back the contract's micro-batches whatever verl returned
    has none."""
    from batchproof.reference.balance import micro_batches

    adapter = adapters.get_adapter("verl.micro_batches")
    twin = dataclasses.replace(adapter, wrap=lambda function: (
        lambda *args, **kwargs: (adapter.wrap(function)(*args, **kwargs),
                                 micro_batches(*args, **kwargs))[1]))
    stand_in = STAND_INS["verl.micro_batches"]
    result = check_liveness(twin, stand_in.function)
    assert not result.fields and not result.seen_by and not result.live
    assert "never looked at" in "\n".join(result.lines())
    live = check_liveness(adapter, stand_in.function)
    assert live.live and live.seen_by, "\n".join(live.lines())


def test_a_check_that_passes_everything_leaves_fields_unconfirmed(monkeypatch) -> None:
    """The sweep sees the field differ; a check that cannot fail (planted: `check_adapter`
    passing whatever it is given) does not name it: UNCONFIRMED, not live."""
    from batchproof.adapters import runner
    from batchproof.statuses import Outcome

    def passes(adapter, candidate, checks, **options):
        outcome = runner.CheckOutcome(adapter.name, adapter.record, checks[0], Outcome.PASS,
                                      examples=1)
        return runner.AdapterReport(adapter.name, adapter.record, adapter.target, "-",
                                    [outcome], [], 0)

    monkeypatch.setattr(runner, "check_adapter", passes)
    result = check_liveness(adapters.get_adapter("verl.karmarkar_karp"),
                            STAND_INS["verl.karmarkar_karp"].function)
    assert not result.live and not result.dead and list(result.unconfirmed) == [""]
    assert "the output: UNCONFIRMED" in "\n".join(result.lines())


def test_no_input_reaching_the_framework_is_batchproofs_error() -> None:
    adapter = dataclasses.replace(adapters.get_adapter("verl.karmarkar_karp"),
                                  supports=lambda call: False)
    with pytest.raises(LivenessError, match="no valid input reached"):
        check_liveness(adapter, STAND_INS["verl.karmarkar_karp"].function)


# --------------------------------------------------------------------------- the tap


class _Collator:
    """A framework object: called, it returns a batch read by key with a metadata dict."""

    def __init__(self, width: int) -> None:
        self.width = width

    def __call__(self, rows: int):
        from liveness_stand_ins import TrainingBatch

        return TrainingBatch({"sequences": torch.ones(rows, self.width, dtype=torch.int64)},
                             {"response_length": self.width})


def test_the_tap_names_every_leaf_by_how_the_adapter_took_it() -> None:
    tap = Tap()
    make = tapped(_Collator, tap)
    batch = make(3)(2)
    assert batch["sequences"].shape == (2, 3) and batch.metadata["response_length"] == 3
    assert {str(Leaf(path, kind)): kind for path, kind in tap.leaves.items()} == {
        "return()['sequences']": "tensor", "return().metadata['response_length']": "number"}


def test_a_corruption_reaches_the_adapter_at_its_path_only() -> None:
    leaf = Leaf(("()", "['sequences']"), "tensor")
    tap = Tap(Corruption(leaf, "plus_one"))
    batch = tapped(_Collator, tap)(3)(2)
    assert torch.equal(batch["sequences"], torch.full((2, 3), 2))
    assert batch.metadata["response_length"] == 3 and tap.changed == 1
    td = TensorDict({"a": torch.zeros(1, 2), "b": torch.zeros(1)}, batch_size=[1])
    out = Tap(Corruption(Leaf(("['a']",), "tensor"), "rows_reversed")).flow(td, ())
    assert out is td  # one row cannot be reversed: the original is handed on
    tap = Tap(Corruption(Leaf(("[1]",), "tensor"), "zeroed"))
    pair = (torch.ones(2), torch.ones(2))
    out = tap.flow(pair, ())
    assert out[0] is pair[0] and torch.equal(out[1], torch.zeros(2)) and torch.equal(
        pair[1], torch.ones(2))  # the framework's own value is left as it was


@pytest.mark.parametrize("value, how, expected", [
    ([[0, 1], [2]], "plus_one", [[1, 2], [3]]),
    ([[0, 1], [2]], "rows_reversed", [[2], [0, 1]]),
    ([[0, 1], [2]], "last_dropped", [[0, 1]]),
    (True, "plus_one", False),
    (3, "zeroed", 0),
])
def test_corruptions(value, how, expected) -> None:
    assert corrupt(value, how) == expected


def test_tensor_corruptions_keep_dtype_and_flip_bools() -> None:
    mask = torch.tensor([[True, False]])
    assert torch.equal(corrupt(mask, "plus_one"), torch.tensor([[False, True]]))
    ids = torch.tensor([[1, 2], [3, 4]])
    assert corrupt(ids, "plus_one").dtype == torch.int64
    assert torch.equal(corrupt(ids, "rows_reversed"), torch.tensor([[3, 4], [1, 2]]))
    assert corrupt(ids, "last_dropped").shape == (2, 1)
    jagged = torch.nested.nested_tensor_from_jagged(torch.arange(3), offsets=torch.tensor([0, 1, 3]))
    assert torch.equal(corrupt(jagged, "plus_one").values(), torch.arange(1, 4))


def test_stand_in_patches_are_put_back() -> None:
    from batchproof.adapters import megatron

    saved = megatron.default_group
    had = importlib.util.find_spec("datasets") is not None
    before = sys.modules.get("datasets")
    with STAND_INS["trl.bfd_bins"].installed(), STAND_INS["megatron.cp_rank_bshd"].installed():
        assert megatron.default_group is not saved
    assert megatron.default_group is saved and sys.modules.get("datasets") is before
    assert isinstance(STAND_INS["trl.bfd_bins"], StandIn) and (had or before is None)


# --------------------------------------------------------------------------- the command line

PLANTED_FILE = '''
from batchproof import Adapter, register_adapter
from batchproof.reference.balance import karmarkar_karp


def hands_back_the_contracts(function):
    """A planted fault: the framework is called, its partitions dropped."""
    def partitions(values, k, *, equal_size=False):
        function(seqlen_list=values, k_partitions=k, equal_size=equal_size)
        return karmarkar_karp(values, k, equal_size=equal_size)
    return partitions


register_adapter(Adapter(
    name="planted.karmarkar_karp", framework="planted", record="balance.karmarkar_karp",
    target="liveness_stand_ins:verl_partitions", wrap=hands_back_the_contracts))
'''


def test_cli_liveness(tmp_path, monkeypatch, capsys, cli_state) -> None:
    from batchproof.cli import main

    # batchproof's adapter modules imported before the copy: one imported into the copy would
    # register there only, vanish with it, and leave every later test of the process without it
    adapters.all_adapters()
    monkeypatch.setattr(adapters, "_ADAPTERS", dict(adapters._ADAPTERS))
    code = main(["check", "--impl", "liveness_stand_ins:verl_partitions",
                 "--adapter", "verl.karmarkar_karp", "--liveness"])
    out = capsys.readouterr().out
    assert code == 0 and "the output: live" in out and "1 adapter(s) live" in out, out
    (tmp_path / "planted.py").write_text(PLANTED_FILE)
    code = main(["check", "--adapter-file", str(tmp_path / "planted.py"),
                 "--adapter", "planted.karmarkar_karp", "--liveness"])
    out = capsys.readouterr().out
    assert code == 3 and "the output: DEAD" in out, out
    assert "1 with a dead or unconfirmed field (planted.karmarkar_karp)" in out
    assert main(["check", "--adapter", "verl.karmarkar_karp", "--liveness",
                 "--check", "equivalence"]) == 2

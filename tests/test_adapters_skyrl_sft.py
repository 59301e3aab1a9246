"""SkyRL's SFT collators against the `sft` records (adapters in batchproof.adapters.skyrl_sft).

The adapters for the installed skyrl (0.3.0 or 0.4.0) run when it is installed beside batchproof
(docs/frameworks-skyrl-sft.md) and skip cleanly otherwise; the import patch itself and the
adapter module's import are tested either way.
"""

from __future__ import annotations

import sys
import typing

import pytest

from batchproof import adapters
from batchproof.adapters import FrameworkMissing, skyrl_sft
from batchproof.adapters.runner import check_adapter, fitting
from batchproof.reference import sft as oracle

NAMES = {"skyrl.collate_sft", "skyrl.default_collator", "skyrl.pack_sft", "skyrl.ffd_bins",
         "skyrl.collate_sft_v0_4", "skyrl.default_collator_v0_4", "skyrl.pack_sft_v0_4"}


def test_module_imports_without_skyrl_and_registers_its_adapters() -> None:
    mine = {a.name: a for a in adapters.all_adapters() if a.name in NAMES}
    assert set(mine) == NAMES
    for adapter in mine.values():
        assert adapter.framework == "skyrl" and adapter.distribution == "skyrl"
        assert adapter.versions, adapter.name
        assert adapter.importing is skyrl_sft.typed_dict_for_pydantic
    assert mine["skyrl.pack_sft"].fits("0.3.0") and not mine["skyrl.pack_sft"].fits("0.4.0")
    assert mine["skyrl.pack_sft_v0_4"].fits("0.4.0") and mine["skyrl.ffd_bins"].fits("0.4.0")


def test_typed_dict_is_patched_only_inside_the_block() -> None:
    import typing_extensions

    original = typing.TypedDict
    with skyrl_sft.typed_dict_for_pydantic():
        inside = typing.TypedDict
    assert typing.TypedDict is original
    if sys.version_info < (3, 12):
        assert inside is typing_extensions.TypedDict
    else:
        assert inside is original
    with pytest.raises(RuntimeError), skyrl_sft.typed_dict_for_pydantic():
        raise RuntimeError("restored on the way out too")
    assert typing.TypedDict is original


def test_a_missing_module_is_framework_missing() -> None:
    with pytest.raises(FrameworkMissing, match="no_such_skyrl_module"):
        skyrl_sft.import_skyrl("no_such_skyrl_module")


# --------------------------------------------------------------------------- with skyrl


@pytest.fixture(scope="module")
def installed() -> str:
    pytest.importorskip("skyrl")
    try:
        for module in (skyrl_sft.SFT_TRAINER, skyrl_sft.COLLATORS, skyrl_sft.BIN_PACKING):
            skyrl_sft.import_skyrl(module)
    except FrameworkMissing as err:
        pytest.skip(str(err))
    return adapters.distribution_version("skyrl")


def _mine(installed: str) -> list[adapters.Adapter]:
    return fitting([a for a in adapters.all_adapters() if a.name in NAMES])


def _run(adapter, checks=None, examples: int = 40):
    return check_adapter(adapter, checks=checks, max_examples=examples, replay_database=False,
                         derandomize=True, report_multiple_bugs=checks is None)


def test_typed_dict_restored_after_importing_skyrl(installed: str) -> None:
    import typing_extensions

    assert typing.TypedDict is not typing_extensions.TypedDict or sys.version_info >= (3, 12)


@pytest.mark.parametrize("kind", ["collate", "default", "pack", "ffd"])
def test_adapter_has_known_divergences_only(installed: str, kind: str) -> None:
    wanted = {"collate": "skyrl.collate_sft", "default": "skyrl.default_collator",
              "pack": "skyrl.pack_sft", "ffd": "skyrl.ffd_bins"}[kind]
    (adapter,) = [a for a in _mine(installed) if a.name.startswith(wanted)
                  and (a.name == wanted or a.name == f"{wanted}_v0_4")]
    # 20 examples, the size of the framework matrix's `batchproof check` of the same adapters
    report = _run(adapter, examples=20)
    assert not report.new, [(o.check, o.detail, o.minimal) for o in report.new]
    assert not report.unexplained, report.unexplained
    assert not report.errors, [(o.check, o.detail) for o in report.errors]
    assert any(k["confirmed"] for k in report.known)


def test_align_rules_are_skyrls(installed: str) -> None:
    """The adapters' models of SkyRL's alignment are SkyRL's: 0.3.0's
    `get_packed_seq_align_size` (one rule, `skyrl_03_align`, which is the contract's per-tensor
    rule except when 4 | tp), and 0.4.0's for each recipe (`skyrl_04_align`)."""
    utils = skyrl_sft.import_skyrl(
        "skyrl.backends.skyrl_train.distributed.megatron.packing_utils")
    for tp in range(1, 9):
        for cp in range(1, 9):
            for fp8 in (False, True):
                if installed.startswith("0.3."):
                    theirs = utils.get_packed_seq_align_size(tp, cp, fp8_enabled=fp8)
                    assert theirs == skyrl_sft.skyrl_03_align(tp, cp, fp8), (tp, cp, fp8)
                    same = tp % 4 != 0 or not fp8
                    assert (theirs == oracle.align_size(tp, cp, fp8=fp8)) == same, (tp, cp)
                    continue
                for recipe in ("tensorwise", "blockwise", "mxfp8"):
                    theirs = utils.get_packed_seq_align_size(tp, cp, fp8_enabled=fp8,
                                                             fp8_recipe=recipe)
                    assert theirs == skyrl_sft.skyrl_04_align(tp, cp, fp8, recipe), (
                        tp, cp, fp8, recipe)
                    if recipe != "tensorwise" or tp == 1 or not fp8:
                        assert theirs == oracle.align_size(tp, cp, fp8=fp8,
                                                           fp8_recipe=recipe), (tp, cp, recipe)


def test_without_min_bins_zero_the_ffd_check_fails_shrunk(installed: str) -> None:
    (adapter,) = [a for a in _mine(installed) if a.name == "skyrl.ffd_bins"]
    report = _run(adapter.without("min_bins_zero_accepted"), ["errors"])
    (errors,) = report.new
    assert "min_bins < 1" in errors.detail, errors.detail
    assert errors.minimal.startswith("ffd_bins([1], 1, min_bins=0) must raise ValueError"), \
        errors.minimal


def test_without_the_int64_loss_mask_collate_fails_on_a_weight(installed: str) -> None:
    (adapter,) = [a for a in _mine(installed) if a.record == "sft.collate_sft"
                  and a.name.startswith("skyrl.collate_sft")]
    report = _run(adapter.without("loss_mask_int64"), ["equivalence"])
    (equivalence,) = report.new
    # shrunk to one-token examples, one of them with the loss weight 0.5: SkyRL's int64 loss
    # mask holds 0 there
    assert equivalence.minimal.startswith("collate_sft([{'input_ids': [0], 'num_actions': 1"), \
        equivalence.minimal
    assert "'loss_mask': [0.5], 'attention_mask': [1]}" in equivalence.minimal
    assert "loss_mask" in equivalence.detail, equivalence.detail


def test_without_the_truncated_total_pack_fails_on_a_weight(installed: str) -> None:
    (adapter,) = [a for a in _mine(installed) if a.record == "sft.pack_sft"]
    report = _run(adapter.without("loss_total_truncated"), ["equivalence"])
    (equivalence,) = report.new
    assert "loss_mask" in equivalence.detail, equivalence.detail
    assert equivalence.minimal.startswith("pack_sft([{"), equivalence.minimal


def test_fp8_with_tp_shows_the_blockwise_alignment(installed: str) -> None:
    """0.4.0 pads FP8 sub-sequences to lcm(layout, 128*tp*cp) when tp > 1; 0.3.0 (the
    contract) to lcm(layout, 16*cp)."""
    collators = skyrl_sft.import_skyrl(skyrl_sft.COLLATORS)
    pack = skyrl_sft.packed_adapter(collators.PackedDataCollator)
    examples = [{"input_ids": [5, 6, 7], "num_actions": 2, "loss_mask": [1, 1]}]
    out = pack(examples, pad_token_id=0, capacity=3, tp_size=2, fp8=True)
    want = 256 if installed.startswith("0.4.") else 16  # 0.4: lcm(2, 128*2); 0.3: lcm(2, 16)
    assert out["input_ids"].shape == (1, want)


# --------------------------------------------------------------------------- the record's newer pins
#
# Pins the SFT records gained after the adapters were last run (tensors on two devices, loss
# masks that are a str or complex, TensorDict batches): what each adapter makes of them.


def _pin(record: str, name: str):
    from batchproof import registry

    return next(p.case for p in registry.get(record).pins if p.name == name)


def test_predicates_read_batches_and_meta_tensors() -> None:
    """A TensorDict batch is read as the rows SkyRL iterates; a meta tensor's values are never
    read (no SkyRL needed)."""
    from batchproof.registry import Case

    batch = _pin("sft.pack_sft", "batch_attention_value_two").case
    rows = skyrl_sft._examples(batch)
    assert [row["input_ids"].tolist() for row in rows] == [[1, 2, 3], [4, 5]]
    assert [row["num_actions"] for row in rows] == [2, 1]
    assert skyrl_sft.packed_attention_ignored(batch)
    meta = _pin("sft.pack_sft", "tensors_on_two_devices").case
    assert skyrl_sft._values(skyrl_sft._mappings(meta)[0], "loss_mask") == []
    assert skyrl_sft.on_several_devices(meta)
    assert not skyrl_sft.on_several_devices(Case(([dict(skyrl_sft._mappings(meta)[0],
                                                         loss_mask=[1.0])],), {}))
    unbatched = _pin("sft.pack_sft", "batch_without_batch_dimension").case
    assert skyrl_sft.unbatched_tensordict(unbatched) and skyrl_sft._examples(unbatched) is None
    assert not skyrl_sft.unbatched_tensordict(batch)
    text = _pin("sft.pack_sft", "loss_mask_a_string").case
    assert skyrl_sft.packed_loss_values_unchecked(text)
    assert skyrl_sft.packed_loss_values_unchecked_04(text)


def test_0_3_collate_domain_is_lists() -> None:
    """skyrl 0.3.0's collate adapters leave out tensor fields and TensorDict batches (no SkyRL
    needed; `test_0_3_collate_takes_no_tensors` shows why)."""
    for name in ("skyrl.collate_sft", "skyrl.default_collator"):
        adapter = adapters.get_adapter(name)
        normalize = name == "skyrl.default_collator"
        for pin in ("tensors_on_two_devices", "tensor_attention_value_two", "ids_float_tensor",
                    "batch_attention_value_two", "batch_without_batch_dimension"):
            case = _pin("sft.collate_sft", pin).case.replace(normalize=normalize)
            assert not adapter.in_domain(adapter.call_of(case)), (name, pin)
        case = _pin("sft.collate_sft", "attention_value_two").case.replace(normalize=normalize)
        assert adapter.in_domain(adapter.call_of(case)), name


def test_0_4_packer_is_not_given_bfloat16() -> None:
    adapter = adapters.get_adapter("skyrl.pack_sft_v0_4")
    from batchproof.ops import sft as ops

    assert set(adapter.forms) == set(ops.FORMS) - {ops.NARROW_FORM}
    assert adapters.get_adapter("skyrl.pack_sft").forms is None  # 0.3.0 takes every form


# what each adapter's check makes of the newer pins: (status, the divergences it names)
PACK_PINS = {
    "tensors_on_two_devices": ("known", "devices_unchecked"),
    "batch_without_batch_dimension": ("known", "unbatched_tensordict_type_error"),
    "complex_loss_mask": ("known", "loss_values_unchecked"),
    "loss_mask_a_string": ("known", "loss_values_unchecked"),
    "tensor_attention_value_two": ("known", "attention_mask_ignored"),
    "batch_attention_longer": ("known", "attention_mask_ignored"),
    "batch_attention_value_two": ("known", "attention_mask_ignored"),
}
COLLATE_PINS_03 = {name: ("skipped", "input outside the adapter's domain") for name in (
    "tensors_on_two_devices", "tensor_attention_value_two", "batch_loss_mask_longer",
    "batch_without_batch_dimension", "batch_attention_longer", "batch_attention_value_two")}
COLLATE_PINS_04 = {
    "tensors_on_two_devices": ("known", "attention_mask_required"),
    "ids_float_tensor": ("known", "attention_mask_required"),
    "batch_loss_mask_longer": ("known", "attention_mask_required"),
    "batch_without_batch_dimension": ("known", "unbatched_tensordict_type_error"),
    "batch_attention_value_two": ("known", "attention_values_unchecked"),
}


def _pin_outcomes(adapter, pins) -> dict:
    report = check_adapter(adapter, checks=[f"pin:{name}" for name in pins],
                           replay_database=False, derandomize=True)
    return {o.check.removeprefix("pin:"): (o.status, o.detail) for o in report.outcomes}


@pytest.mark.parametrize("record", ["sft.collate_sft", "sft.pack_sft"])
def test_newer_pins_are_known_divergences(installed: str, record: str) -> None:
    (adapter,) = [a for a in _mine(installed) if a.record == record
                  and not a.name.startswith("skyrl.default_collator")]
    if record == "sft.pack_sft":
        want = PACK_PINS
    else:
        want = COLLATE_PINS_03 if installed.startswith("0.3.") else COLLATE_PINS_04
    assert _pin_outcomes(adapter, want) == want


def test_without_devices_unchecked_the_meta_pin_fails(installed: str) -> None:
    (adapter,) = [a for a in _mine(installed) if a.record == "sft.pack_sft"]
    (new,) = check_adapter(adapter.without("devices_unchecked"),
                           checks=["pin:tensors_on_two_devices"]).new
    shows = ("RuntimeError: Tensor.item() cannot be called on meta tensors"
             if installed.startswith("0.3.") else
             "TypeError: can't convert meta device type tensor to numpy")
    assert shows in new.detail, new.detail


def test_without_unbatched_tensordict_the_pin_fails(installed: str) -> None:
    (adapter,) = [a for a in _mine(installed) if a.record == "sft.pack_sft"]
    (new,) = check_adapter(adapter.without("unbatched_tensordict_type_error"),
                           checks=["pin:batch_without_batch_dimension"]).new
    assert "TypeError: iteration over a 0-d tensordict" in new.detail, new.detail


def test_0_3_collate_takes_no_tensors(installed: str) -> None:
    """Why 0.3.0's collate domain is lists: a valid int64 ids tensor raises TypeError."""
    if not installed.startswith("0.3."):
        pytest.skip("0.4.0 fills NumPy buffers: it takes tensors")
    import torch

    trainer = skyrl_sft.import_skyrl(skyrl_sft.SFT_TRAINER)
    example = {"input_ids": torch.tensor([1, 2]), "num_actions": 1, "loss_mask": [1],
               "attention_mask": [1, 1]}
    with pytest.raises(TypeError, match="can only concatenate list"):
        trainer.collate_sft_batch([example], skyrl_sft._tokenizer(0))


def test_0_4_packer_reproductions(installed: str) -> None:
    """docs/frameworks-skyrl-sft.md's 0.4.0 rows found 2026-11-26, run as written."""
    if not installed.startswith("0.4."):
        pytest.skip("skyrl 0.4.0's packer")
    import torch

    collators = skyrl_sft.import_skyrl(skyrl_sft.COLLATORS)
    pack = skyrl_sft.packed_adapter(collators.PackedDataCollator, takes_recipe=True)
    one = {"input_ids": [1, 2, 3], "num_actions": 2, "loss_mask": [1, 1]}
    with pytest.raises(TypeError, match="Got unsupported ScalarType BFloat16"):
        pack([dict(one, loss_mask=torch.tensor([1.0, 1.0], dtype=torch.bfloat16))],
             pad_token_id=0, capacity=8)
    assert pack([one], pad_token_id=0, capacity=8, fp8_recipe=None)["input_ids"].shape == (1, 3)
    assert pack([one], pad_token_id=0, capacity=8, fp8=True,
                fp8_recipe=None)["input_ids"].shape == (1, 16)
    with pytest.raises(ValueError, match='fp8_recipe is still "auto"'):
        pack([one], pad_token_id=0, capacity=8, fp8=True, fp8_recipe="auto")
    text = pack([dict(one, loss_mask="10")], pad_token_id=0, capacity=8)["loss_mask"]
    assert text.tolist() == [[0.5, 0.5]]  # 10.0 on both response tokens, / the total 20

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


def _run(adapter, checks=None):
    return check_adapter(adapter, checks=checks, max_examples=40, replay_database=False,
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
    report = _run(adapter)
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

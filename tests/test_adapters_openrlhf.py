"""OpenRLHF adapters (`batchproof.adapters.openrlhf`; docs/frameworks-openrlhf.md).

Run where openrlhf 0.11.2 is installed (with flash-attn for the varlen adapters; a CPU-only
flash-attn build is enough, see the docs); skipped cleanly otherwise. Removing a known divergence
must make the check fail with that divergence's shrunk example.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from batchproof import adapters, registry
from batchproof.adapters.runner import check_adapter

UNPAD = "openrlhf.unpad_and_slice_tensor"
REPAD = "openrlhf.gather_and_pad_tensor"
BALANCED = "openrlhf.balanced_partitions"


def _run(name: str, checks: list[str] | None = None, without: tuple[str, ...] = ()):
    adapter = adapters.get_adapter(name)
    if without:
        adapter = adapter.without(*without)
    checks = checks or registry.get(adapter.record).check_names()
    return check_adapter(adapter, checks=checks, max_examples=40, replay_database=False,
                         derandomize=True)


@pytest.fixture
def seqlen_balancing():
    return pytest.importorskip("openrlhf.utils.seqlen_balancing")


@pytest.fixture
def ring():
    """openrlhf.models.ring_attn_utils, imported as the adapters import it."""
    pytest.importorskip("openrlhf")
    from batchproof.adapters.openrlhf import RING, import_without_cuda_extension

    try:
        return import_without_cuda_extension(RING)
    except ImportError as err:  # flash-attn, deepspeed, peft ... not installed
        pytest.skip(f"cannot import {RING}: {err}")


def test_module_registers_without_importing_openrlhf() -> None:
    code = ("import sys, batchproof.adapters.openrlhf as m; "
            "assert 'openrlhf' not in sys.modules and 'flash_attn' not in sys.modules; "
            "print(m.UNPAD.name, m.REPAD.name, m.BALANCED_PARTITIONS.name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == [UNPAD, REPAD, BALANCED]


def test_cuda_extension_stand_in_is_removed_again(ring) -> None:
    from batchproof.adapters.openrlhf import CUDA_EXTENSION

    stand_in = sys.modules.get(CUDA_EXTENSION)
    assert stand_in is None or getattr(stand_in, "__file__", None), "stand-in left behind"
    assert callable(ring.unpad_and_slice_tensor) and callable(ring.gather_and_pad_tensor)


# --------------------------------------------------------------------------- every check


@pytest.mark.parametrize("name, confirmed", [
    (UNPAD, ("empty_row_has_no_segment", "mask_values_unchecked")),
    (REPAD, ("feature_dims_get_an_extra_axis", "duplicate_indices_accepted")),
])
def test_ring_attn_utils_have_known_divergences_only(ring, name, confirmed) -> None:
    report = _run(name)
    assert not report.new, [(o.check, o.detail, o.minimal) for o in report.new]
    assert not report.unexplained, report.unexplained
    assert not report.errors, [(o.check, o.detail) for o in report.errors]
    statuses = {o.check: o.status for o in report.outcomes}
    assert statuses["equivalence"] == statuses["errors"] == "pass", statuses
    known = {k["name"]: k for k in report.known}
    for divergence in confirmed:
        assert known[divergence]["status"] == "confirmed", known[divergence]


def test_balanced_partitions_has_known_divergences_only(seqlen_balancing) -> None:
    report = _run(BALANCED)
    assert not report.new, [(o.check, o.detail, o.minimal) for o in report.new]
    assert not report.unexplained, report.unexplained
    assert all(o.status == "pass" for o in report.outcomes), report.outcomes
    known = {k["name"]: k for k in report.known}
    assert known["k_checked_by_assert"]["status"] == "confirmed"


# --------------------------------------------------------------------------- without a known one


def test_unpad_without_empty_row_divergence_fails_shrunk(ring) -> None:
    report = _run(UNPAD, ["equivalence"], without=("empty_row_has_no_segment",))
    (equivalence,) = report.new
    # cu_seqlens (output [2]) of one empty row: the contract's [0, 0], OpenRLHF's segments [0]
    assert equivalence.detail.startswith("Mismatch: [2]: shape differs: expected (2,), got (1,)"
                                         ), equivalence.detail
    # shrunk to one empty row (x's dtype is whatever the strategy shrinks to)
    assert equivalence.minimal.startswith("unpad(tensor([], size=(1, 0)"), equivalence.minimal


def test_repad_without_feature_dims_divergence_fails_shrunk(ring) -> None:
    report = _run(REPAD, ["equivalence"], without=("feature_dims_get_an_extra_axis",))
    (equivalence,) = report.new
    assert re.search(r"shape differs: expected \((\d+), (\d+), (\d+)\), got \(\1, \2, 1, \3\)",
                     equivalence.detail), equivalence.detail
    assert equivalence.minimal.startswith("repad(tensor([], size=(0, "), equivalence.minimal


def test_unpad_without_mask_value_divergence_fails_shrunk(ring) -> None:
    report = _run(UNPAD, ["errors"], without=("mask_values_unchecked",))
    (errors,) = report.new
    assert "accepted bad input (mask value 2)" in errors.detail, errors.detail


def test_unpad_without_mask_type_divergence_fails_on_the_list_mask(ring) -> None:
    report = _run(UNPAD, ["errors", "pin:attention_mask_list"], without=("mask_type_unchecked",))
    assert {o.check for o in report.new} == {"errors", "pin:attention_mask_list"}, report.new
    for outcome in report.new:
        assert "(attention_mask is a list)" in outcome.detail, outcome.detail
        assert "candidate raised AttributeError: 'list' object has no attribute 'sum'" \
            in outcome.detail, outcome.detail


def test_unpad_without_devices_divergence_fails_on_the_meta_pin(ring) -> None:
    report = _run(UNPAD, ["pin:devices_differ"], without=("devices_unchecked",))
    (pin,) = report.new
    assert "accepted bad input (x on another device than the mask" in pin.detail, pin.detail


def test_repad_without_indices_type_divergence_fails_shrunk(ring) -> None:
    report = _run(REPAD, ["errors", "pin:indices_list"], without=("indices_type_unchecked",))
    new = {o.check: o for o in report.new}
    assert set(new) == {"errors", "pin:indices_list"}, report.new
    assert "candidate raised AttributeError: 'list' object has no attribute 'ndim'" \
        in new["errors"].detail, new["errors"].detail
    # shrunk: an empty list of indices
    assert re.match(r"repad\(tensor\(\[.*\), \[\], \d+, \d+\) must raise TypeError",
                    new["errors"].minimal), new["errors"].minimal


def test_balanced_without_values_tensor_divergence_fails_shrunk(seqlen_balancing) -> None:
    report = _run(BALANCED, ["errors"], without=("values_tensor_unchecked",))
    (errors,) = report.new
    assert errors.minimal.startswith("balanced_partitions(tensor([[1.],"), errors.minimal
    assert "must raise ValueError: values tensor torch.float32 (2, 1)" in errors.minimal, errors


def test_balanced_without_k_divergence_fails_shrunk(seqlen_balancing) -> None:
    report = _run(BALANCED, ["errors"], without=("k_checked_by_assert",))
    (errors,) = report.new
    assert errors.minimal.startswith("balanced_partitions([0], 2) must raise ValueError"), errors


# --------------------------------------------------------------------------- what the divergences hide


def test_empty_rows_differ_only_by_the_repeated_boundary(ring) -> None:
    """Where `empty_row_has_no_segment` applies, values, indices and max_seqlen are the
    contract's, and cu_seqlens is the contract's without its repeated boundaries."""
    from batchproof.adapters.openrlhf import has_empty_row, token_row_cases, unpad_adapter
    from batchproof.reference.varlen import unpad

    target = unpad_adapter(ring.unpad_and_slice_tensor)
    adapter = adapters.get_adapter(UNPAD)

    @settings(max_examples=40, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.filter_too_much])
    @given(token_row_cases().filter(lambda case: has_empty_row(adapter.call_of(case))))
    def check(case) -> None:
        values, indices, cu_seqlens, max_seqlen = target(*case.args)
        want = unpad(*case.args)
        assert torch.equal(values, want[0]) and torch.equal(indices, want[1])
        assert max_seqlen == want[3]
        assert cu_seqlens.tolist() == torch.unique_consecutive(want[2]).tolist()

    check()


def test_feature_dims_come_back_with_one_extra_axis(ring) -> None:
    """`feature_dims_get_an_extra_axis`: the values are right, behind an axis of size 1."""
    from batchproof.reference.varlen import repad

    indices = torch.tensor([0, 1, 4])
    logits = torch.randn(3, 7)
    out = ring.gather_and_pad_tensor(logits[None], None, 0, indices, 2, 3)
    assert out.shape == (2, 3, 1, 7)
    assert torch.equal(out.squeeze(2), repad(logits, indices, 2, 3))
    # 1-D per-token values (log-probs) are fine
    logprobs = torch.randn(3)
    assert torch.equal(ring.gather_and_pad_tensor(logprobs[None], None, 0, indices, 2, 3),
                       repad(logprobs, indices, 2, 3))


def test_mask_value_two_at_a_row_start_joins_the_previous_segment(ring) -> None:
    """`mask_values_unchecked`: no position id 0 for row 1, so its tokens attend to row 0's."""
    from batchproof.adapters.openrlhf import packed_segments

    _, position_ids, _, _, indices = ring.unpad_and_slice_tensor(
        torch.tensor([[5, 6], [7, 8]]), torch.tensor([[1, 1], [2, 1]]), None)
    assert position_ids.tolist() == [[0, 1, 1, 2]] and indices.tolist() == [0, 1, 2, 3]
    cu_seqlens, max_seqlen = packed_segments(position_ids)
    assert cu_seqlens.tolist() == [0, 4] and max_seqlen == 4

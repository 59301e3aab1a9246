"""`cp` beyond the registry's checks: the sharded pipeline through real collectives (gloo
process groups on the CPU, world size = cp), the Triton paths really taken, packers' rows fed in,
error messages that name the argument and the sequence, and the harness snapshot of a TensorDict
that has a device.

The registry's checks (equivalence, errors, properties, pins of every `cp` record) run from
tests/test_registry.py; the bug zoo's from tests/test_zoo.py.
"""

from __future__ import annotations

import pickle

import cp_ranks
import hypothesis
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from batchproof import placements, registry
from batchproof.checks import _snapshot, run_check
from batchproof.compare import assert_identical
from batchproof.impl import cp as impl
from batchproof.impl import sft as sft_impl
from batchproof.impl import varlen as varlen_impl
from batchproof.mutation.zoo import get, planted
from batchproof.ops.cp import packed_rows
from batchproof.reference import cp as reference
from batchproof.registry import Case

# ------------------------------------------------------------------ through real collectives


def _drawn_rows(cp_size: int, count: int) -> list[tuple[list[int], list[int], str]]:
    """`count` packed rows drawn by the record's strategy for this cp (derandomized), each with
    a layout, plus the historical cases of the pins."""
    drawn = []

    @hypothesis.settings(max_examples=count, derandomize=True, database=None, deadline=None,
                         phases=[hypothesis.Phase.generate],
                         suppress_health_check=list(hypothesis.HealthCheck))
    @given(row=packed_rows(cp_size), layout=st.sampled_from(["zigzag", "contiguous"]))
    def draw(row, layout):
        drawn.append((*row, layout))

    draw()
    fixed = [([1, 2, 3, 4, 5, 6, 7], [0, 7]), ([1, 2, 3, 4, 5], [0, 5]),
             ([5, 6, 7], [0, 1, 1, 3]), (list(range(9)), list(range(10)))]
    return drawn + [(ids, cu, layout) for ids, cu in fixed for layout in ("zigzag",
                                                                         "contiguous")]


def _single_process(ids: list[int], cu: list[int]) -> torch.Tensor:
    """The per-token outputs computed on the whole unpadded row, (1, T, 2)."""
    tokens = torch.tensor(ids, dtype=torch.int64)
    positions = torch.tensor([w for a, b in zip(cu, cu[1:]) for w in range(b - a)],
                             dtype=torch.int64)
    labels = reference.shift_labels(ids, cu)["labels"][0]
    return cp_ranks.per_token(tokens, positions, labels).reshape(1, len(ids), 2)


PLANTED = ("cp.unshard_contiguous_as_zigzag", "cp.labels_sliced_contiguously")


def _through_collectives(world: int, runs, tmp_path, backend: str = "gloo"):
    """For each (zoo entry or None, cases) run: (expected, what the ranks gave back) per case.
    One spawn of `world` ranks runs them all."""
    import torch.multiprocessing as mp

    rendezvous, out_path = str(tmp_path / f"rendezvous-{world}"), str(tmp_path / f"out-{world}")
    mp.start_processes(cp_ranks.rank_main, args=(world, rendezvous, runs, out_path, backend),
                       nprocs=world, start_method="spawn", join=True)
    with open(out_path, "rb") as handle:
        gathered = pickle.load(handle)
    return [[(_single_process(ids, cu), torch.tensor(values, dtype=torch.float32).reshape(
        1, len(ids), 2)) for (ids, cu, _), values in zip(cases, run)]
        for (_, cases), run in zip(runs, gathered)]


def _gloo() -> None:
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available here")


@pytest.mark.parametrize("world", [2, 4])
def test_sharded_pipeline_through_real_collectives_equals_one_process(world, tmp_path) -> None:
    """world = cp processes on the CPU (gloo), spawned once: each pads the row, shards its own
    rank's share, computes per-token outputs from its tokens, positions and labels, all-gathers
    and unshards; the result equals the single-process outputs on the unpadded row bit for bit.
    With world 2 the same cases run again with each of two zoo entries planted in every rank
    (unshard reading contiguous as zigzag; labels not travelling with their tokens): some case
    must then come back wrong — the property can fail."""
    _gloo()
    cases = _drawn_rows(world, 16)
    runs = [(None, cases)] + ([(entry, cases) for entry in PLANTED] if world == 2 else [])
    results = _through_collectives(world, runs, tmp_path)
    for index, (expected, actual) in enumerate(results[0]):
        assert_identical(expected, actual, compared=f"case {index}: {cases[index]}")
    for (entry, _), run in zip(runs[1:], results[1:]):
        assert any(not torch.equal(expected, actual) for expected, actual in run), (
            f"{entry} went through the collectives unnoticed")


@pytest.mark.gpu
def test_sharded_pipeline_over_nccl(tmp_path) -> None:  # pragma: no cover - needs 2 GPUs
    """The same pipeline with one CUDA device per rank and NCCL (cp = 2, or 4 where there are
    four devices): each rank pads, shards and computes on its device, all-gathers over NCCL and
    unshards there; the result equals the single-process CPU outputs bit for bit; with world 2
    the planted entries must come back wrong. Never run yet: no session has had two GPUs
    (docs/cp.md, "Not done")."""
    import torch.distributed as dist

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    if not dist.is_nccl_available():
        pytest.skip("torch.distributed has no NCCL backend here")
    world = 4 if torch.cuda.device_count() >= 4 else 2
    cases = _drawn_rows(world, 16)
    runs = [(None, cases)] + ([(entry, cases) for entry in PLANTED] if world == 2 else [])
    results = _through_collectives(world, runs, tmp_path, backend="nccl")
    for index, (expected, actual) in enumerate(results[0]):
        assert_identical(expected, actual, compared=f"case {index}: {cases[index]}")
    for (entry, _), run in zip(runs[1:], results[1:]):
        assert any(not torch.equal(expected, actual) for expected, actual in run), (
            f"{entry} went through NCCL unnoticed")


# ------------------------------------------------------------------ placements and packers


@pytest.mark.parametrize("record", ["cp.shard", "cp.unshard", "cp.shard_bshd"])
def test_the_triton_placement_runs_the_kernels(record, monkeypatch) -> None:
    """Under the `triton` placement the torch index paths are never called (they are made to
    fail), and every non-property check still passes: the kernels ran, interpreted."""
    if "triton" not in placements.available():
        pytest.skip("triton is not installed")

    def torch_path(*args, **kwargs):
        raise AssertionError("the torch path ran under the triton placement")

    monkeypatch.setattr(impl, "_slots", torch_path if record == "cp.shard" else impl._slots)
    monkeypatch.setattr(impl, "_unshard_index", torch_path)
    gathered = []
    real_gather = impl._gather

    def counting_gather(values, index):
        from batchproof.impl import kernels
        gathered.append(kernels.triton_applies(values.device))
        return real_gather(values, index)

    monkeypatch.setattr(impl, "_gather", counting_gather)
    info = registry.get(record)
    settings = hypothesis.settings(max_examples=10, deadline=None, database=None,
                                   derandomize=True)
    with placements.placed("triton"):
        for check in info.check_names():
            if not check.startswith("property:"):
                run_check(info, check, settings=settings)
    assert gathered and all(gathered)


def test_a_pack_varlen_row_goes_in_as_it_is() -> None:
    packed = varlen_impl.pack_varlen([[1, 2, 3], [4]], [[5, 6], [7, 8, 9]], pad_to_multiple=4)
    out = impl.pad_for_cp(packed["input_ids"], packed["cu_seqlens"], cp_size=2)
    assert_identical(reference.pad_for_cp(packed["input_ids"], packed["cu_seqlens"], cp_size=2),
                     out)
    # samples of 5 and 4 tokens, the tail pad of 3 a sequence of its own: spans 8, 4, 4
    assert out["cu_seqlens"].tolist() == [0, 5, 9, 12]
    assert out["cu_seqlens_padded"].tolist() == [0, 8, 12, 16]


def _routes_through_cp(packed, cp_size: int, layout: str) -> tuple:
    """pack_varlen's routes and mask padded for CP, sharded, and all-gathered back by unshard
    (impl/ throughout): the real row's (routes, router padding mask)."""
    padded = impl.pad_for_cp(packed["input_ids"], packed["cu_seqlens"], cp_size=cp_size,
                             routed_experts=packed["routed_experts"],
                             router_padding_mask=packed["router_padding_mask"])
    shards = impl.shard(padded, cp_size=cp_size, layout=layout)
    return tuple(impl.unshard(shards[key], padded["cu_seqlens"], padded["cu_seqlens_padded"],
                              layout=layout) for key in ("routed_experts", "router_padding_mask"))


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_packed_routes_go_through_cp_and_come_back(layout) -> None:
    """pack_varlen's routes (uint8, one sample captured short) through pad_for_cp, shard and
    unshard come back on their own tokens, in uint8, the mask with them; with every rank given
    its mirror rank's routes (cp.routes_of_mirror_rank planted) they do not."""
    routes = [np.array([[[3, 1]], [[2, 5]], [[6, 4]]], dtype=np.uint8),
              np.array([[[7, 0]], [[1, 3]]], dtype=np.uint8),
              np.array([[[5, 2]], [[0, 7]], [[4, 6]], [[3, 5]]], dtype=np.uint8)]
    packed = varlen_impl.pack_varlen([[11, 12], [13], [14, 15, 16]], [[17], [18, 19], [20]],
                                     pad_to_multiple=4, routed_experts=routes)
    back, mask = _routes_through_cp(packed, 2, layout)
    assert back.dtype == torch.uint8
    assert torch.equal(back, packed["routed_experts"])
    assert torch.equal(mask, packed["router_padding_mask"])
    with planted(get("cp.routes_of_mirror_rank")):
        mirrored, _ = _routes_through_cp(packed, 2, layout)
    assert not torch.equal(mirrored, packed["routed_experts"])


def test_a_pack_sft_row_goes_in_by_its_sub_sequences() -> None:
    examples = [{"input_ids": [1, 2, 3], "attention_mask": [1, 1, 1], "num_actions": 2,
                 "loss_mask": [1, 1]},
                {"input_ids": [4, 5], "attention_mask": [1, 1], "num_actions": 1,
                 "loss_mask": [1]}]
    packed = sft_impl.pack_sft(examples, pad_token_id=0, capacity=16)
    row = 0
    lengths = packed["sub_seq_lengths"][row]
    lengths = lengths[lengths > 0].tolist() if isinstance(lengths, torch.Tensor) else lengths
    ids, cu, offset = [], [0], 0
    for length in lengths:
        ids += packed["input_ids"][row, offset:offset + length].tolist()
        cu.append(cu[-1] + length)
        offset += length
    out = impl.pad_for_cp(ids, cu, cp_size=2)
    assert_identical(reference.pad_for_cp(ids, cu, cp_size=2), out)
    assert out["cu_seqlens"].tolist() == cu


# ------------------------------------------------------------------ messages


@pytest.mark.parametrize("call, message", [
    (lambda fn: fn([1, 2, 3], [0, 2, 1, 3], cp_size=2),
     "cu_seqlens[2] = 1 is below cu_seqlens[1] = 2: sequence 1 would have a negative length"),
    (lambda fn: fn([1, 2.5], [0, 2], cp_size=2), "input_ids[1] must be an int, got float"),
    (lambda fn: fn([1, 2], [0, 2], cp_size=True), "cp_size must be an int, got bool"),
])
def test_messages_name_the_argument_and_the_sequence(call, message) -> None:
    for fn in (reference.pad_for_cp, impl.pad_for_cp):
        with pytest.raises((ValueError, TypeError)) as raised:
            call(fn)
        assert str(raised.value) == message


def test_shard_names_the_sequence_whose_span_does_not_split() -> None:
    padded = reference.pad_for_cp([1, 2, 3, 4, 5], [0, 2, 5], cp_size=2)
    for fn in (reference.shard, impl.shard):
        with pytest.raises(ValueError, match="sequence 0 spans 4 positions in cu_seqlens_padded, "
                                             "not a multiple of 2·cp_size = 8"):
            fn(padded, cp_size=4)


def test_device_tensors_are_validated_on_the_device_with_the_same_messages() -> None:
    """Tensor boundaries take the verdict path (one read), lists the host path: one message."""
    for cu in ([0, 3, 2], torch.tensor([0, 3, 2]), torch.tensor([0, 3, 2], dtype=torch.int32)):
        with pytest.raises(ValueError) as raised:
            impl.shift_labels(torch.tensor([1, 2]), cu)
        assert "cu_seqlens[2] = 2 is below cu_seqlens[1] = 3" in str(raised.value)


# ------------------------------------------------------------------ the harness snapshot


def test_a_snapshot_keeps_the_sign_of_zero_of_a_tensordict_with_a_device() -> None:
    """checks._snapshot (what the mutation check compares with) of pad_for_cp's output, which
    has a device: tensordict 0.15.3's clone() turns -0.0 into +0.0 there."""
    padded = reference.pad_for_cp([1, 2, 3], [0, 3], cp_size=2)
    padded["values"] = torch.tensor([[-0.0, 0.0, -0.0, 1.0]])
    (copied,), _ = _snapshot(Case((padded,)))
    assert copied["values"].view(torch.int32).tolist() == \
        padded["values"].view(torch.int32).tolist()
    assert copied["values"].data_ptr() != padded["values"].data_ptr()


def test_inputs_are_left_alone() -> None:
    ids, cu = torch.tensor([1, 2, 3, 4, 5]), torch.tensor([0, 2, 5])
    mask = torch.tensor([1.0, -0.0, 1.0, 0.5, 1.0])
    before = (ids.clone(), cu.clone(), mask.clone())
    impl.pad_for_cp(ids, cu, cp_size=3, loss_mask=mask)
    for was, now in zip(before, (ids, cu, mask)):
        assert_identical(was, now)


def test_workers_use_the_module_the_zoo_patches() -> None:
    """The collective test plants a zoo entry by name inside each spawned rank: the entries it
    names exist and replace the functions the ranks call."""
    for name in ("cp.unshard_contiguous_as_zigzag", "cp.labels_sliced_contiguously"):
        entry = get(name)
        with planted(entry):
            assert getattr(impl, entry.function) is entry.replacement


@pytest.mark.parametrize("record", ["cp.shard", "cp.unshard", "cp.shard_bshd"])
def test_the_kernels_across_several_programs_per_sequence(record, monkeypatch) -> None:
    """Under the `triton` placement with 4-element blocks (32 by default, more than most drawn
    sequences), a sequence's positions span several programs: equivalence still holds."""
    if "triton" not in placements.available():
        pytest.skip("triton is not installed")
    from batchproof.impl import kernels

    monkeypatch.setattr(kernels, "INTERPRETED_BLOCK", 4)
    settings = hypothesis.settings(max_examples=25, deadline=None, database=None,
                                   derandomize=True)
    with placements.placed("triton"):
        run_check(registry.get(record), "equivalence", settings=settings)


# --------------------------------------------------------------------------- two defects


def _options_last(input_ids, cu_seqlens, **kwargs):
    """pad_for_cp validating the packed row and its loss mask (with cp_size 1 and the default
    ids) before cp_size, pad_token_id and ignore_index (the reference checks those first)."""
    from batchproof.reference import cp as ref

    ref.pad_for_cp(input_ids, cu_seqlens, cp_size=1, loss_mask=kwargs.get("loss_mask"))
    return ref.pad_for_cp(input_ids, cu_seqlens, **kwargs)


def _routes_before_loss_mask(input_ids, cu_seqlens, **kwargs):
    """pad_for_cp checking routed_experts (type, dtype, shape) before the loss mask (the
    reference checks the loss mask first)."""
    from batchproof.reference import _routes
    from batchproof.reference import cp as ref

    routes = kwargs.get("routed_experts")
    if routes is not None and isinstance(input_ids, list):
        _routes.check_token_routes(routes, len(input_ids), row_form=True)
    return ref.pad_for_cp(input_ids, cu_seqlens, **kwargs)


def _ignore_index_last(input_ids, cu_seqlens, **kwargs):
    """shift_labels validating every other argument (the default ignore_index) before
    ignore_index (the reference checks it first)."""
    from batchproof.reference import cp as ref

    ref.shift_labels(input_ids, cu_seqlens,
                     **{k: v for k, v in kwargs.items() if k != "ignore_index"})
    return ref.shift_labels(input_ids, cu_seqlens, **kwargs)


def _row_before_options(padded, **kwargs):
    """shard validating the padded row (sharded for cp 1) before cp_size, layout and
    cp_rank (the reference checks those first)."""
    from batchproof.reference import cp as ref

    ref.shard(padded, cp_size=1)
    return ref.shard(padded, **kwargs)


def _batch_before_options(batch, **kwargs):
    """shard_bshd validating the batch (sharded for cp 1) before cp_size, layout and cp_rank
    (the reference checks those first)."""
    from batchproof.reference import cp as ref

    ref.shard_bshd(batch, cp_size=1)
    return ref.shard_bshd(batch, **kwargs)


def _count_first_layout_last(outputs, cu_seqlens, cu_seqlens_padded, **kwargs):
    """unshard checking the outputs' token count against cu_seqlens_padded before the
    boundaries, and the layout after everything else (the reference: layout, outputs,
    boundaries, count)."""
    from batchproof.reference import cp as ref

    parts = ref._rank_outputs(outputs)
    if len(parts) * parts[0].shape[0] != int(cu_seqlens_padded[-1]):
        raise ValueError("outputs do not hold cu_seqlens_padded[-1] tokens")
    ref.unshard(outputs, cu_seqlens, cu_seqlens_padded)
    return ref.unshard(outputs, cu_seqlens, cu_seqlens_padded, **kwargs)


@pytest.mark.parametrize("name, bad, candidate", [
    ("cp.pad_for_cp", "bad_pad_cases", _options_last),
    ("cp.pad_for_cp", "bad_pad_cases", _routes_before_loss_mask),
    ("cp.unshard", "bad_unshard_cases", _count_first_layout_last),
    ("cp.shard", "bad_shard_cases", _row_before_options),
    ("cp.shift_labels", "bad_shift_cases", _ignore_index_last),
    ("cp.shard_bshd", "bad_bshd_cases", _batch_before_options),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) and "." in v else "")
def test_invalid_inputs_with_two_defects_follow_the_references_first_error(
        name, bad, candidate) -> None:
    """pad_for_cp's, shift_labels', shard's, shard_bshd's and unshard's invalid inputs include
    two defects on different arguments (issue 32): a validation order other than the
    reference's passes every one-defect input and fails. (flatten_micro_batch has one argument,
    `rows`: one defect.)"""
    from two_defects import assert_first_error_decides

    from batchproof.ops import cp as records

    assert_first_error_decides(name, getattr(records, bad)(), candidate)

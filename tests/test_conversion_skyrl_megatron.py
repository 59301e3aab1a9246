"""The conversion code of `batchproof.adapters.skyrl_megatron` on stand-ins of SkyRL's functions
(issue 39: the killers of `mutate --mutmut --harness adapters/skyrl_megatron`).

SkyRL is not installed here: each test hands the adapter's wrap a small fake of the function it
adapts and asserts what the conversion promises (docs/cp.md, "Adapters"): the framework is
handed the contract's input, every compared field comes from the framework's own answer, and the
domains are exactly the calls the module docstring names.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch
from liveness_stand_ins import skyrl_rank_and_local, skyrl_tokens_on_rank
from tensordict import TensorDict

from batchproof.adapters import Call
from batchproof.adapters.skyrl_megatron import (
    CP_PACKED_INDICES,
    CP_RANK_BSHD,
    MODEL_UTILS,
    bshd_adapter,
    indices_adapter,
    local_slots,
)
from batchproof.reference import cp as contract
from batchproof.registry import BadCase, Case


def _row() -> TensorDict:
    """A padded row of two sequences (3 and 7 real tokens, padded to 4 and 8: zigzag, cp 2)."""
    return TensorDict({
        "input_ids": torch.arange(100, 112, dtype=torch.int64).reshape(1, 12),
        "loss_mask": torch.linspace(0.0, 1.0, 12).reshape(1, 12),
        "cu_seqlens": torch.tensor([0, 3, 10], dtype=torch.int32),
        "cu_seqlens_padded": torch.tensor([0, 4, 12], dtype=torch.int32),
    }, batch_size=[])


class Helpers:
    """SkyRL's `_packed_sequence_indices`, recording what it is handed; it answers sentinels the
    map must be handed on, in SkyRL's order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.sentinels = (object(), object(), object())

    def __call__(self, cu_seqlens_padded, total, device) -> tuple:
        self.calls.append((cu_seqlens_padded, total, device))
        return (cu_seqlens_padded.long(), "unused", *self.sentinels)


@pytest.fixture
def helpers(monkeypatch) -> Helpers:
    """The fake helper module in sys.modules, where the adapter imports it from."""
    fake = Helpers()
    module = types.ModuleType(MODEL_UTILS)
    module._packed_sequence_indices = fake
    monkeypatch.setitem(sys.modules, MODEL_UTILS, module)
    return fake


def _keep(calls: list):
    """The stand-in map, recording its arguments."""
    def rank_and_local(cu_long, seq_indices, seq_offsets, seq_lens, cp_size):
        calls.append((seq_indices, seq_offsets, seq_lens, cp_size))
        return skyrl_rank_and_local(cu_long, seq_indices, seq_offsets, seq_lens, cp_size)
    return rank_and_local


# --------------------------------------------------------------------------- local_slots


def test_local_slots_scatter_each_position_into_its_slot() -> None:
    rank_of = torch.tensor([0, 1, 1, 0, 1, 0])
    local = torch.tensor([2, 0, 2, 0, 1, 1])
    assert local_slots(rank_of, local, 0, 3).tolist() == [3, 5, 0]
    assert local_slots(rank_of, local, 1, 3).tolist() == [1, 4, 2]
    assert local_slots(rank_of, local, 0, 3).dtype == torch.int64


def test_a_slot_given_no_position_is_minus_one() -> None:
    rank_of, local = torch.tensor([0, 1, 0]), torch.tensor([1, 0, 3])
    assert local_slots(rank_of, local, 0, 4).tolist() == [-1, 0, -1, 2]
    assert local_slots(rank_of, local, 1, 4).tolist() == [1, -1, -1, -1]


@pytest.mark.parametrize("bad", [-1, 2, 5])
def test_a_slot_outside_the_rank_marks_the_whole_row(bad: int) -> None:
    rank_of, local = torch.tensor([0, 0, 1]), torch.tensor([0, bad, 1])
    assert local_slots(rank_of, local, 0, 2).tolist() == [-2, -2]
    assert local_slots(rank_of, local, 1, 2).tolist() == [-1, 2]  # the other rank is unhurt


def test_the_last_slot_is_inside() -> None:
    assert local_slots(torch.tensor([0, 0]), torch.tensor([1, 0]), 0, 2).tolist() == [1, 0]


# --------------------------------------------------------------------------- cp.shard


@pytest.mark.parametrize("cp_size", [1, 2])
def test_the_map_scattered_is_the_contracts_shard(helpers: Helpers, cp_size: int) -> None:
    calls: list = []
    out = indices_adapter(_keep(calls))(_row(), cp_size=cp_size)
    want = contract.shard(_row(), cp_size=cp_size)
    assert out.batch_size == torch.Size([cp_size])
    assert set(out.keys()) == {"input_ids", "loss_mask", "padded_index"}
    for key in out.keys():
        assert torch.equal(out[key], want[key]), key
    (cu, total, device), = helpers.calls
    assert torch.equal(cu, _row()["cu_seqlens_padded"]) and total == 12
    assert device == torch.device("cpu")
    assert calls == [(*helpers.sentinels, cp_size)]


@pytest.mark.parametrize("rank", [0, 1])
def test_one_rank_asked_is_that_ranks_share(helpers: Helpers, rank: int) -> None:
    out = indices_adapter(skyrl_rank_and_local)(_row(), cp_size=2, cp_rank=rank)
    want = contract.shard(_row(), cp_size=2, cp_rank=rank)
    assert out.batch_size == torch.Size([1])
    for key in ("padded_index", "input_ids", "loss_mask"):
        assert torch.equal(out[key], want[key]), key


def test_the_fields_follow_the_frameworks_map(helpers: Helpers) -> None:
    """A map with two positions swapped moves padded_index and every field with it."""
    def swapped(*args):
        rank_of, local = skyrl_rank_and_local(*args)
        local = local.clone()
        local[[0, 3]] = local[[3, 0]]  # both rank 0's
        return rank_of, local

    out = indices_adapter(swapped)(_row(), cp_size=2)
    want = contract.shard(_row(), cp_size=2)
    index = out["padded_index"]
    assert not torch.equal(index, want["padded_index"])
    assert torch.equal(out["input_ids"], _row()["input_ids"][0][index])
    assert torch.equal(out["loss_mask"], _row()["loss_mask"][0][index])


def test_a_position_with_no_slot_reads_as_minus_one(helpers: Helpers) -> None:
    def loses_position_5(*args):
        rank_of, local = skyrl_rank_and_local(*args)
        rank_of = rank_of.clone()
        rank_of[5] = 9
        return rank_of, local

    out = indices_adapter(loses_position_5)(_row(), cp_size=2)
    want = contract.shard(_row(), cp_size=2)["padded_index"]
    assert torch.equal(out["padded_index"], torch.where(want == 5, -1, want))
    assert (out["padded_index"] == -1).sum() == 1


def test_a_slot_beyond_the_rank_marks_its_row(helpers: Helpers) -> None:
    def overflows(*args):
        rank_of, local = skyrl_rank_and_local(*args)
        local = local.clone()
        local[0] = 6  # each rank has 12 / 2 slots
        return rank_of, local

    out = indices_adapter(overflows)(_row(), cp_size=2)
    want = contract.shard(_row(), cp_size=2)["padded_index"]
    owner = int((want == 0).nonzero()[0, 0])
    assert out["padded_index"][owner].tolist() == [-2] * 6
    assert torch.equal(out["padded_index"][1 - owner], want[1 - owner])


# --------------------------------------------------------------------------- domains


def _call(case: Case | BadCase, function=contract.shard) -> Call:
    return Call.of(case, function)


def test_the_map_supports_valid_zigzag_rows_only() -> None:
    supports = CP_PACKED_INDICES.supports
    assert supports(_call(Case((_row(),), {"cp_size": 2})))
    assert supports(_call(Case((_row(),), {"cp_size": 2, "layout": "zigzag"})))
    assert supports(_call(Case((dict(_row().items()),), {"cp_size": 2})))
    assert not supports(_call(Case((_row(),), {"cp_size": 2, "layout": "contiguous"})))
    assert not supports(_call(Case((_row()["input_ids"],), {"cp_size": 2})))
    assert not supports(_call(BadCase(Case((_row(),), {"cp_size": 2}), ValueError)))
    routed = _row()
    routed["routed_experts"] = torch.zeros(1, 12, 2, dtype=torch.int64)
    assert not supports(_call(Case((routed,), {"cp_size": 2})))


def test_the_bshd_function_supports_valid_zigzag_calls_only() -> None:
    batch = TensorDict({"x": torch.zeros(1, 4)}, batch_size=[1])
    supports = CP_RANK_BSHD.supports

    def call(case):
        return _call(case, contract.shard_bshd)

    assert supports(call(Case((batch,), {"cp_size": 2})))
    assert supports(call(Case((batch,), {"cp_size": 2, "layout": "zigzag"})))
    assert not supports(call(Case((batch,), {"cp_size": 2, "layout": "contiguous"})))
    assert not supports(call(BadCase(Case((batch,), {"cp_size": 2}), ValueError)))


# --------------------------------------------------------------------------- cp.shard_bshd


def _bshd() -> TensorDict:
    return TensorDict({"input_ids": torch.arange(24).reshape(3, 8),
                       "mask": torch.arange(48, dtype=torch.float32).reshape(3, 8, 2)},
                      batch_size=[3])


@pytest.mark.parametrize("cp_size", [1, 2])
def test_every_field_is_the_frameworks_slice(cp_size: int) -> None:
    calls: list = []

    def tokens_on_rank(x, cp_rank, cp_size, seq_dim):
        calls.append((cp_rank, cp_size, seq_dim))
        return skyrl_tokens_on_rank(x, cp_rank, cp_size, seq_dim=seq_dim)

    out = bshd_adapter(tokens_on_rank)(_bshd(), cp_size=cp_size)
    want = contract.shard_bshd(_bshd(), cp_size=cp_size)
    assert out.batch_size == torch.Size([cp_size, 3])
    assert set(out.keys()) == {"input_ids", "mask"}
    for key in out.keys():
        assert torch.equal(out[key], want[key]), key
    assert sorted(calls) == sorted([(r, cp_size, 1) for r in range(cp_size)] * 2)


def test_the_bshd_fields_are_what_the_framework_returned() -> None:
    out = bshd_adapter(lambda x, rank, size, seq_dim: x[:, :2] + 1000 * rank)(
        _bshd(), cp_size=2, cp_rank=1)
    assert out.batch_size == torch.Size([1, 3])
    assert torch.equal(out["input_ids"][0], _bshd()["input_ids"][:, :2] + 1000)


def test_a_dict_batch_reads_its_rows_from_the_fields() -> None:
    batch = {"input_ids": torch.arange(16).reshape(2, 8), "note": "not a tensor"}
    out = bshd_adapter(skyrl_tokens_on_rank)(batch, cp_size=2)
    assert out.batch_size == torch.Size([2, 2])
    assert set(out.keys()) == {"input_ids"}
    want = contract.shard_bshd(TensorDict({"input_ids": batch["input_ids"]}, batch_size=[2]),
                               cp_size=2)
    assert torch.equal(out["input_ids"], want["input_ids"])


def test_a_tensordict_batch_keeps_its_rows_without_fields() -> None:
    out = bshd_adapter(skyrl_tokens_on_rank)(TensorDict({}, batch_size=[3]), cp_size=2)
    assert out.batch_size == torch.Size([2, 3]) and not list(out.keys())


def test_an_empty_dict_batch_has_no_rows() -> None:
    out = bshd_adapter(skyrl_tokens_on_rank)({}, cp_size=2)
    assert out.batch_size == torch.Size([2, 0]) and not list(out.keys())


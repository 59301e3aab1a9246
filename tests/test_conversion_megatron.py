"""The conversion code of `batchproof.adapters.megatron` on stand-ins of Megatron-core's
`get_batch_on_this_cp_rank` (issue 39: the killers of `mutate --mutmut --harness
adapters/megatron`).

Megatron is not installed here: the adapter's wrap is handed a small fake that reads the group
as Megatron does (`size()`, `rank()`) and replaces the dict's entries with the rank's slices.
Asserted: what the module docstring promises — a group answering each asked rank and `cp_size`,
a shallow copy of the batch per rank, the ranks' slices stacked exactly as Megatron returned
them (anything else handed back as it is), and the domain and known-divergence predicates
matching exactly the calls their docs name.
"""

from __future__ import annotations

import os

import pytest
import torch
from liveness_stand_ins import megatron_batch_on_rank
from tensordict import TensorDict

from batchproof.adapters import Call, megatron
from batchproof.adapters.megatron import (
    RankOfGroup,
    _stacked,
    attention_mask_field,
    bshd_adapter,
    bshd_domain,
    empty_batch,
    padded_row,
    per_token_fields,
    unchecked,
)
from batchproof.reference import cp as contract
from batchproof.registry import BadCase, Case


@pytest.fixture
def groups(monkeypatch) -> list:
    """`default_group` replaced by a recorder (no process group in the test process)."""
    made: list = []
    monkeypatch.setattr(megatron, "default_group", lambda: made.append(True))
    return made


def _batch() -> dict:
    return {"input_ids": torch.arange(24).reshape(3, 8),
            "weights": torch.arange(48, dtype=torch.float32).reshape(3, 8, 2)}


# --------------------------------------------------------------------------- the group


def test_the_group_answers_its_size_and_rank() -> None:
    group = RankOfGroup(4, 3)
    assert (group.size(), group.rank()) == (4, 3)


class Dist:
    """torch.distributed as default_group reads it: initialized or not, and what it is asked."""

    def __init__(self, initialized: bool) -> None:
        self.initialized, self.inits = initialized, []

    def is_initialized(self) -> bool:
        return self.initialized

    def init_process_group(self, backend, **kwargs) -> None:
        self.inits.append((backend, kwargs))


@pytest.mark.parametrize("initialized", [False, True])
def test_the_default_group_is_one_gloo_process_once(monkeypatch, initialized: bool) -> None:
    import torch.distributed as dist

    fake = Dist(initialized)
    monkeypatch.setattr(dist, "is_initialized", fake.is_initialized)
    monkeypatch.setattr(dist, "init_process_group", fake.init_process_group)
    megatron.default_group()
    if initialized:
        assert fake.inits == []
        return
    (backend, kwargs), = fake.inits
    assert backend == "gloo" and (kwargs["rank"], kwargs["world_size"]) == (0, 1)
    method = kwargs["init_method"]
    assert method.startswith("file://")
    store = method[len("file://"):]
    assert os.path.isdir(os.path.dirname(store)) and not os.path.exists(store)
    os.rmdir(os.path.dirname(store))


# --------------------------------------------------------------------------- the candidate


@pytest.mark.parametrize("cp_size", [1, 2])
def test_every_field_is_megatrons_slice_of_each_rank(groups: list, cp_size: int) -> None:
    seen: list = []

    def get_batch(batch, cp_group):
        seen.append((cp_group.size(), cp_group.rank(), sorted(batch)))
        return megatron_batch_on_rank(batch, cp_group)

    given = _batch()
    out = bshd_adapter(get_batch)(given, cp_size=cp_size)
    want = contract.shard_bshd(TensorDict(_batch(), batch_size=[3]), cp_size=cp_size)
    assert groups and out.batch_size == torch.Size([cp_size, 3])
    assert set(out.keys()) == {"input_ids", "weights"}
    for key in out.keys():
        assert torch.equal(out[key], want[key]), key
    assert seen == [(cp_size, r, ["input_ids", "weights"]) for r in range(cp_size)]
    assert all(torch.equal(given[k], _batch()[k]) for k in given)  # the caller's dict intact


def test_one_rank_asked_is_that_ranks_share(groups: list) -> None:
    out = bshd_adapter(megatron_batch_on_rank)(_batch(), cp_size=2, cp_rank=1)
    want = contract.shard_bshd(TensorDict(_batch(), batch_size=[3]), cp_size=2, cp_rank=1)
    assert out.batch_size == torch.Size([1, 3])
    assert torch.equal(out["weights"], want["weights"])


def test_a_tensordict_batch_is_handed_as_a_dict(groups: list) -> None:
    kinds: list = []

    def get_batch(batch, cp_group):
        kinds.append(type(batch))
        return megatron_batch_on_rank(batch, cp_group)

    bshd_adapter(get_batch)(TensorDict(_batch(), batch_size=[3]), cp_size=2)
    assert kinds == [dict, dict]


def test_a_batch_without_items_is_handed_as_it_is(groups: list) -> None:
    given, handed = torch.zeros(2, 4), []
    out = bshd_adapter(lambda batch, cp_group: handed.append(batch) or batch)(given, cp_size=1)
    assert handed[0] is given and out is given


def test_the_fields_are_what_megatron_returned(groups: list) -> None:
    def get_batch(batch, cp_group):
        return {key: value[:, :2] + 100 * cp_group.rank() for key, value in batch.items()}

    out = bshd_adapter(get_batch)(_batch(), cp_size=2)
    assert torch.equal(out["input_ids"][1], _batch()["input_ids"][:, :2] + 100)


# --------------------------------------------------------------------------- _stacked


def _share(rows: int = 3, width: int = 4) -> dict:
    return {"a": torch.zeros(rows, width), "b": torch.ones(rows, width, 2)}


def test_shares_stack_into_ranks_by_rows() -> None:
    out = _stacked([_share(), _share()])
    assert isinstance(out, TensorDict) and out.batch_size == torch.Size([2, 3])
    assert out["b"].shape == (2, 3, 4, 2)


def test_a_none_entry_is_left_out() -> None:
    out = _stacked([{**_share(), "c": None}])
    assert set(out.keys()) == {"a", "b"} and out.batch_size == torch.Size([1, 3])


def test_no_fields_are_no_rows() -> None:
    out = _stacked([{}, {}])
    assert isinstance(out, TensorDict) and out.batch_size == torch.Size([2, 0])


@pytest.mark.parametrize("shares", [
    [torch.zeros(3, 4)],  # not a dict
    [_share(), torch.zeros(3, 4)],  # one of them not a dict
    [{"a": [1, 2]}],  # not a tensor
    [{"a": torch.zeros(4)}],  # one dimension
    [_share(), {"a": torch.zeros(3, 4), "b": torch.ones(3, 2, 2)}],  # another shape on a rank
    [{"a": torch.zeros(3, 4), "b": torch.zeros(2, 4)}],  # fields of different rows
], ids=["tensor", "one-tensor", "list", "1-d", "shapes", "rows"])
def test_anything_else_is_handed_back_as_megatron_returned_it(shares: list) -> None:
    out = _stacked(shares)
    assert out is (shares[0] if len(shares) == 1 else shares)


def test_no_shares_are_handed_back() -> None:
    shares: list = []
    assert _stacked(shares) is shares


# --------------------------------------------------------------------------- predicates


def _call(batch, valid: bool = True, **kwargs) -> Call:
    case = Case((batch,), kwargs)
    return Call.of(case if valid else BadCase(case, ValueError), contract.shard_bshd)


def test_the_padded_row_is_a_mapping_argument_only() -> None:
    row = TensorDict({"input_ids": torch.zeros(1, 4)}, batch_size=[])
    assert padded_row(Call.of(Case((row,), {}), contract.shard)) is row
    as_dict = {"input_ids": torch.zeros(1, 4)}
    assert padded_row(Call.of(Case((as_dict,), {}), contract.shard)) is as_dict
    assert padded_row(Call.of(Case((torch.zeros(1, 4),), {}), contract.shard)) is None


def test_per_token_fields_leave_out_the_boundaries_and_the_uncompared() -> None:
    row = {"input_ids": torch.zeros(1, 4), "cu_seqlens": torch.zeros(2),
           "cu_seqlens_padded": torch.zeros(2), "rank": torch.zeros(1), "note": "x",
           "loss_mask": torch.zeros(1, 4)}
    assert per_token_fields(row, ("rank",)) == ["input_ids", "loss_mask"]


@pytest.mark.parametrize("kwargs, supported", [
    ({"cp_size": 1}, True), ({"cp_size": 2}, True), ({"cp_size": 2, "layout": "zigzag"}, True),
    ({"cp_size": 2, "cp_rank": 0}, True), ({"cp_size": 2, "cp_rank": 1}, True),
    ({"cp_size": 2, "cp_rank": 2}, False), ({"cp_size": 2, "cp_rank": -1}, False),
    ({"cp_size": 2, "cp_rank": True}, False), ({"cp_size": 2, "cp_rank": 1.0}, False),
    ({"cp_size": 0}, False), ({"cp_size": True}, False), ({"cp_size": 2.0}, False),
    ({"cp_size": 2, "layout": "contiguous"}, False),
])
def test_the_domain_is_zigzag_with_a_groups_size_and_rank(kwargs: dict, supported: bool) -> None:
    assert bshd_domain(_call(_batch(), **kwargs)) is supported


def test_an_empty_batch_split_over_ranks() -> None:
    empty = {"input_ids": torch.zeros(0, 8)}
    assert empty_batch(_call(empty, cp_size=2))
    assert empty_batch(_call(TensorDict(empty, batch_size=[0]), cp_size=2))
    assert not empty_batch(_call(empty, cp_size=1))  # cp = 1: the batch untouched
    assert not empty_batch(_call(empty, valid=False, cp_size=2))
    assert not empty_batch(_call(_batch(), cp_size=2))
    assert not empty_batch(_call({"input_ids": torch.zeros(0)}, cp_size=2))  # one dimension
    assert not empty_batch(_call(empty, cp_size=2.0))
    assert not empty_batch(_call([torch.zeros(0, 8)], cp_size=2))  # not a dict


def test_a_non_tensor_entry_is_no_field() -> None:
    batch = TensorDict({"input_ids": torch.zeros(0, 8)}, batch_size=[0])
    batch.set_non_tensor("attention_mask", "text")
    assert not attention_mask_field(_call(batch, cp_size=2))
    assert empty_batch(_call(batch, cp_size=2))
    assert not attention_mask_field(_call({"attention_mask": "text"}, cp_size=2))


def test_the_fields_after_a_non_tensor_entry_are_read() -> None:
    batch = TensorDict({}, batch_size=[3])
    batch.set_non_tensor("note", "text")
    batch["attention_mask"] = torch.ones(3, 8)
    assert list(batch.keys())[0] == "note"
    assert attention_mask_field(_call(batch, cp_size=2))


def test_an_attention_mask_split_over_ranks() -> None:
    batch = {**_batch(), "attention_mask": torch.ones(3, 8)}
    assert attention_mask_field(_call(batch, cp_size=2))
    assert not attention_mask_field(_call(batch, cp_size=1))
    assert not attention_mask_field(_call(batch, valid=False, cp_size=2))
    assert not attention_mask_field(_call(_batch(), cp_size=2))


def test_unchecked_is_every_invalid_batch() -> None:
    assert unchecked(_call(_batch(), valid=False, cp_size=2))
    assert not unchecked(_call(_batch(), cp_size=2))


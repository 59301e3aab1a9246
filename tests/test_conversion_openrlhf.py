"""The conversion code of `batchproof.adapters.openrlhf` on stand-ins of OpenRLHF's functions
(issue 39: the killers of `mutate --mutmut --harness adapters/openrlhf`).

OpenRLHF is not installed here: the adapters' wraps are handed the liveness stand-ins
(`tests/liveness_stand_ins.py`) or small recording fakes, and asserted on what the module
promises: OpenRLHF is handed the contract's input (no ring attention), every output is read off
OpenRLHF's own return value (the segments from its packed position ids), the flash-attn import
shim leaves `sys.modules` as it was, and each domain and known-divergence predicate holds on
exactly the inputs its doc names.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
import types

import pytest
import torch
from hypothesis import given, settings
from liveness_stand_ins import (
    openrlhf_balanced,
    openrlhf_gather_and_pad_tensor,
    openrlhf_unpad_and_slice_tensor,
)

from batchproof.adapters import Call, openrlhf
from batchproof.adapters.openrlhf import (
    CUDA_EXTENSION,
    _first_feature,
    _tensor,
    bad_seqlen,
    devices_differ,
    empty_batch,
    equal_size_not_divisible,
    float_k_over_n,
    float_mask,
    has_empty_row,
    has_feature_dims,
    indices_malformed,
    indices_not_a_tensor,
    indices_repeat,
    k_is_bool,
    k_out_of_range,
    mask_not_2d,
    mask_not_a_tensor,
    mask_not_binary,
    negative_size,
    one_value_many_indices,
    packed_segments,
    partitions_adapter,
    repad_adapter,
    repad_empty_batch,
    shapes_differ,
    token_row_cases,
    token_rows,
    unpad_adapter,
    values_not_a_tensor,
    values_tensor_not_real_1d,
    x_not_2d,
)
from batchproof.reference import balance, varlen
from batchproof.registry import Case

MASK = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1]])

# --------------------------------------------------------------------------- importing


@pytest.fixture
def no_extension(monkeypatch) -> None:
    """flash-attn's CUDA extension not installed (whatever this machine has)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == CUDA_EXTENSION else real(name, *a))
    monkeypatch.delitem(sys.modules, CUDA_EXTENSION, raising=False)


def test_the_stand_in_is_there_while_open_and_gone_after(monkeypatch, no_extension) -> None:
    kept = types.ModuleType("flash_attn.kept")
    monkeypatch.setitem(sys.modules, "flash_attn.kept", kept)  # imported before: kept
    for name in ("flash_attn", "flash_attn.bert_padding", "flash_attnx", "other_module"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with openrlhf.cuda_extension_stand_in():
        assert isinstance(sys.modules[CUDA_EXTENSION], types.ModuleType)
        for name in ("flash_attn", "flash_attn.bert_padding", "flash_attnx", "other_module"):
            sys.modules[name] = types.ModuleType(name)
    assert CUDA_EXTENSION not in sys.modules
    assert "flash_attn" not in sys.modules and "flash_attn.bert_padding" not in sys.modules
    assert sys.modules["flash_attn.kept"] is kept
    assert "flash_attnx" in sys.modules and "other_module" in sys.modules  # not flash-attn's
    for name in ("flash_attnx", "other_module"):
        monkeypatch.delitem(sys.modules, name)


def test_the_stand_in_is_removed_after_an_exception(no_extension) -> None:
    with pytest.raises(KeyError), openrlhf.cuda_extension_stand_in():
        sys.modules[CUDA_EXTENSION] = None  # removed even when something replaced it
        raise KeyError
    assert CUDA_EXTENSION not in sys.modules


def test_nothing_stands_in_where_the_extension_is_installed(monkeypatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.delitem(sys.modules, CUDA_EXTENSION, raising=False)
    with openrlhf.cuda_extension_stand_in():
        assert CUDA_EXTENSION not in sys.modules


def test_the_module_is_imported_with_the_stand_in(monkeypatch, no_extension) -> None:
    seen = []

    def import_module(name):
        seen.append((name, CUDA_EXTENSION in sys.modules))
        return "the module"

    monkeypatch.setattr(importlib, "import_module", import_module)
    assert openrlhf.import_without_cuda_extension("some.module") == "the module"
    assert seen == [("some.module", True)] and CUDA_EXTENSION not in sys.modules


# --------------------------------------------------------------------------- unpad


def test_a_segment_starts_at_every_position_id_0() -> None:
    cu, longest = packed_segments(torch.tensor([[0, 1, 2, 0, 1, 0]]))
    assert cu.tolist() == [0, 3, 5, 6] and cu.dtype == torch.int32 and longest == 3
    cu, longest = packed_segments(torch.tensor([[0, 1, 2]]))
    assert cu.tolist() == [0, 3] and longest == 3
    cu, longest = packed_segments(torch.tensor([[0, 0, 1, 2, 3]]))
    assert cu.tolist() == [0, 1, 5] and longest == 4


def test_an_empty_packed_row_has_no_segment() -> None:
    cu, longest = packed_segments(torch.zeros(1, 0, dtype=torch.int64))
    assert cu.tolist() == [0] and longest == 0


def test_unpad_reads_openrlhfs_packed_row_indices_and_positions() -> None:
    seen = []

    def unpad_and_slice(x, mask, group):
        seen.append((x, mask, group))
        return openrlhf_unpad_and_slice_tensor(x, mask, group)

    x = torch.arange(9).reshape(3, 3)
    values, indices, cu, longest = unpad_adapter(unpad_and_slice)(x, MASK)
    want = varlen.unpad(x, MASK)
    assert torch.equal(values, want[0]) and torch.equal(indices, want[1])
    assert cu.tolist() == [0, 2, 5] and longest == 3  # the empty row adds no segment
    (given_x, given_mask, group), = seen
    assert given_x is x and given_mask is MASK and group is None


def test_unpad_returns_what_openrlhf_returned() -> None:
    def unpad_and_slice(x, mask, group):
        return (torch.tensor([[7, 8, 9]]), torch.tensor([[0, 1, 0]]), "labels", 0,
                torch.tensor([4, 5, 6]))

    values, indices, cu, longest = unpad_adapter(unpad_and_slice)(None, None)
    assert values.tolist() == [7, 8, 9] and indices.tolist() == [4, 5, 6]
    assert cu.tolist() == [0, 2, 3] and longest == 2


def test_the_first_feature() -> None:
    x = torch.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5).transpose(0, 1)
    assert torch.equal(_first_feature(x, False), x[..., 0, 0])
    kept = _first_feature(x, True)
    assert kept.shape == (3, 2, 1) and torch.equal(kept[..., 0], x[..., 0, 0])
    assert kept.is_contiguous() and _first_feature(x, False).is_contiguous()
    assert torch.equal(_first_feature(MASK, False), MASK)


def test_only_a_tensor_with_data_is_a_tensor() -> None:
    assert _tensor(MASK) is MASK
    assert _tensor(torch.zeros(2, device="meta")) is None
    nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)], layout=torch.jagged)
    assert _tensor(nested) is None and _tensor([1, 2]) is None


def _unpad_call(x, mask) -> Call:
    return Call.of(Case((x, mask)), varlen.unpad)


def test_token_rows_are_the_domain() -> None:
    assert token_rows(_unpad_call(MASK, MASK))
    assert token_rows(_unpad_call(MASK[..., None, None], MASK))
    assert not token_rows(_unpad_call(torch.zeros(3, 3, 2), MASK))
    assert not token_rows(_unpad_call(torch.zeros(3, 3, 1, 2), MASK))
    assert token_rows(_unpad_call([[1, 2]], MASK))


@settings(max_examples=25, deadline=None)
@given(case=token_row_cases())
def test_every_drawn_case_is_token_rows(case: Case) -> None:
    x, mask = case.args
    assert token_rows(_unpad_call(x, mask)) and x.dim() in (2, 3)
    assert x.shape[:2] == mask.shape


def test_an_empty_row() -> None:
    assert has_empty_row(_unpad_call(MASK, MASK))
    assert has_empty_row(_unpad_call(MASK, MASK.bool()))
    assert not has_empty_row(_unpad_call(MASK, MASK[[0, 2]]))
    assert not has_empty_row(_unpad_call(MASK, MASK.float()))  # float masks: the errors' case
    assert not has_empty_row(_unpad_call(MASK, MASK[1]))  # 1-D
    assert not has_empty_row(_unpad_call(MASK, torch.zeros(0, 3, dtype=torch.int64)))
    assert not has_empty_row(_unpad_call(MASK, MASK.tolist()))
    assert has_empty_row(_unpad_call(MASK, torch.tensor([[1, 1], [2, 0], [0, 0]])))
    assert not has_empty_row(_unpad_call(MASK, torch.tensor([[0, 2], [1, -1]])))
    assert has_empty_row(_unpad_call(MASK, torch.tensor([[0, 0]])))  # one row
    assert has_empty_row(_unpad_call(MASK, torch.zeros(2, 0, dtype=torch.int64)))  # S = 0


def test_an_empty_batch() -> None:
    empty = torch.zeros(0, 3, dtype=torch.int64)
    assert empty_batch(_unpad_call(empty, empty))
    assert not empty_batch(_unpad_call(empty.tolist(), empty))
    assert not empty_batch(_unpad_call(empty, empty.tolist()))
    assert not empty_batch(_unpad_call(MASK, MASK))
    assert not empty_batch(_unpad_call(empty, torch.zeros(0, dtype=torch.int64)))


def test_a_mask_not_binary() -> None:
    assert mask_not_binary(_unpad_call(MASK, torch.tensor([[1, 2]])))
    assert mask_not_binary(_unpad_call(MASK, torch.tensor([[-1, 0]])))
    assert not mask_not_binary(_unpad_call(MASK, MASK))
    assert not mask_not_binary(_unpad_call(MASK, torch.tensor([[1.0, 2.0]])))
    assert not mask_not_binary(_unpad_call(MASK, [[1, 2]]))


def test_mask_types_and_shapes() -> None:
    assert float_mask(_unpad_call(MASK, MASK.float()))
    assert not float_mask(_unpad_call(MASK, MASK)) and not float_mask(_unpad_call(MASK, [1.0]))
    assert mask_not_2d(_unpad_call(MASK, MASK[0])) and mask_not_2d(_unpad_call(MASK, MASK[None]))
    assert not mask_not_2d(_unpad_call(MASK, MASK)) and not mask_not_2d(_unpad_call(MASK, [1]))
    assert mask_not_a_tensor(_unpad_call(MASK, MASK.tolist()))
    assert not mask_not_a_tensor(_unpad_call(MASK, MASK))
    assert not mask_not_a_tensor(_unpad_call(MASK[0], MASK.tolist()))
    assert not mask_not_a_tensor(_unpad_call(MASK.tolist(), MASK.tolist()))


def test_shapes_that_differ() -> None:
    assert shapes_differ(_unpad_call(torch.zeros(4, 3), MASK))
    assert shapes_differ(_unpad_call(torch.zeros(3, 4), MASK))
    assert shapes_differ(_unpad_call(torch.zeros(2, 3), MASK[:1]))
    assert not shapes_differ(_unpad_call(torch.zeros(3, 3), MASK))
    assert not shapes_differ(_unpad_call(torch.zeros(3, 3, 1), MASK))
    assert not shapes_differ(_unpad_call(torch.zeros(3, 3), MASK[0]))
    assert not shapes_differ(_unpad_call(torch.zeros(3, 3), torch.zeros(0, 3)))
    assert not shapes_differ(_unpad_call([[0] * 4] * 3, MASK))
    assert not shapes_differ(_unpad_call(torch.zeros(4, 3), MASK.tolist()))


def test_x_of_one_dimension() -> None:
    assert x_not_2d(_unpad_call(torch.zeros(3), MASK))
    assert x_not_2d(_unpad_call(torch.tensor(1), MASK))
    assert not x_not_2d(_unpad_call(MASK, MASK)) and not x_not_2d(_unpad_call([1], MASK))


def test_devices_that_differ() -> None:
    meta = torch.zeros(3, 3, device="meta")
    assert devices_differ(_unpad_call(meta, MASK))
    assert devices_differ(_unpad_call(meta[..., None], MASK))
    assert not devices_differ(_unpad_call(MASK, MASK))
    assert not devices_differ(_unpad_call(meta[0], MASK))
    assert not devices_differ(_unpad_call(meta, MASK[0]))
    assert not devices_differ(_unpad_call(meta, MASK.tolist()))
    assert not devices_differ(_unpad_call([[0]], MASK))


# --------------------------------------------------------------------------- repad


def test_repad_hands_openrlhf_a_packed_row_without_ring_attention() -> None:
    seen = []

    def gather_and_pad(tensor, group, pad_len, indices, batch, seqlen):
        seen.append((tensor, group, pad_len, indices, batch, seqlen))
        return openrlhf_gather_and_pad_tensor(tensor, group, pad_len, indices, batch, seqlen)

    values, indices = torch.tensor([5.0, 6.0, 7.0]), torch.tensor([0, 4, 5])
    out = repad_adapter(gather_and_pad)(values, indices, 2, 3)
    assert torch.equal(out, varlen.repad(values, indices, 2, 3))
    (row, group, pad_len, given, batch, seqlen), = seen
    assert torch.equal(row, values[None]) and (group, pad_len) == (None, 0)
    assert given is indices and (batch, seqlen) == (2, 3)


def test_values_not_a_tensor_are_handed_in_a_list() -> None:
    seen = []
    repad_adapter(lambda row, *rest: seen.append(row))([1.0, 2.0], None, 1, 2)
    assert seen == [[[1.0, 2.0]]]


def _repad_call(values, indices=None, batch=2, seqlen=3) -> Call:
    return Call.of(Case((values, indices, batch, seqlen)), varlen.repad)


VALUES, INDICES = torch.tensor([5.0, 6.0, 7.0]), torch.tensor([0, 4, 5])


def test_feature_dims() -> None:
    assert has_feature_dims(_repad_call(torch.zeros(3, 2)))
    assert has_feature_dims(_repad_call(torch.zeros(3, 1, 1)))
    assert not has_feature_dims(_repad_call(torch.zeros(3, 1)))
    assert not has_feature_dims(_repad_call(VALUES))
    assert not has_feature_dims(_repad_call([[1.0, 2.0]]))


def test_a_repad_of_no_rows() -> None:
    assert repad_empty_batch(_repad_call(VALUES, INDICES, 0))
    assert not repad_empty_batch(_repad_call(VALUES, INDICES, 1))
    assert not repad_empty_batch(_repad_call(VALUES, INDICES, False))
    assert not repad_empty_batch(_repad_call(VALUES.tolist(), INDICES, 0))


def test_repeated_indices() -> None:
    assert indices_repeat(_repad_call(VALUES, torch.tensor([0, 4, 4])))
    assert not indices_repeat(_repad_call(VALUES, INDICES))
    assert not indices_repeat(_repad_call(VALUES, torch.tensor([0, 6, 6])))  # out of range
    assert not indices_repeat(_repad_call(VALUES, torch.tensor([-1, -1, 0])))
    assert indices_repeat(_repad_call(VALUES, torch.tensor([5, 5, 0])))  # the last position
    assert not indices_repeat(_repad_call(VALUES, torch.tensor([0, 4, 4]), 2.0))
    assert not indices_repeat(_repad_call(VALUES, torch.tensor([0, 4, 4]), 2, 3.0))
    assert not indices_repeat(_repad_call(VALUES, torch.tensor([0, 4, 4, 4])))  # one too many
    assert not indices_repeat(_repad_call(VALUES, torch.tensor([[0, 4, 4]])))  # 2-D
    assert not indices_repeat(_repad_call(VALUES, torch.tensor([0.0, 4.0, 4.0])))
    assert not indices_repeat(_repad_call(VALUES, torch.tensor([True, False, False])))
    assert not indices_repeat(_repad_call(VALUES, [0, 4, 4]))
    assert not indices_repeat(_repad_call(torch.tensor(5.0), torch.tensor([0])))
    assert not indices_repeat(_repad_call(VALUES.tolist(), torch.tensor([0, 4, 4])))
    assert not indices_repeat(_repad_call(VALUES, torch.tensor([0, 4, 4], device="meta")))


def test_one_value_for_many_indices() -> None:
    assert one_value_many_indices(_repad_call(VALUES[:1], INDICES))
    assert one_value_many_indices(_repad_call(VALUES[:1], INDICES[:2]))
    assert not one_value_many_indices(_repad_call(VALUES[:1], INDICES[:1]))
    assert not one_value_many_indices(_repad_call(VALUES[:2], INDICES))
    assert not one_value_many_indices(_repad_call(VALUES[:1], INDICES[None]))
    assert not one_value_many_indices(_repad_call(VALUES[:1], INDICES.float()))
    assert not one_value_many_indices(_repad_call(torch.tensor(5.0), INDICES))
    assert not one_value_many_indices(_repad_call([5.0], INDICES))
    assert not one_value_many_indices(_repad_call(VALUES[:1], INDICES.tolist()))


def test_malformed_indices() -> None:
    assert not indices_malformed(_repad_call(VALUES, INDICES))
    assert indices_malformed(_repad_call(VALUES, torch.tensor([0, 4, 6])))  # batch * seqlen
    assert indices_malformed(_repad_call(VALUES, torch.tensor([-1, 4, 5])))
    assert not indices_malformed(_repad_call(VALUES, torch.tensor([0, 4, 6]), 2, 2.5))
    assert not indices_malformed(_repad_call(VALUES, torch.tensor([0, 4, 6]), 2.5, 3))
    assert indices_malformed(_repad_call(VALUES, INDICES.float()))
    assert indices_malformed(_repad_call(VALUES, INDICES[None]))
    assert indices_malformed(_repad_call(VALUES, INDICES[:2]))
    assert not indices_malformed(_repad_call(VALUES[:1], INDICES))  # the broadcast's case
    assert not indices_malformed(_repad_call(VALUES, INDICES.tolist()))
    assert not indices_malformed(_repad_call(VALUES.tolist(), INDICES))


def test_negative_sizes() -> None:
    assert negative_size(_repad_call(VALUES, INDICES, -1, 3))
    assert negative_size(_repad_call(VALUES, INDICES, 2, -1))
    assert not negative_size(_repad_call(VALUES, INDICES, 0, 0))
    assert not negative_size(_repad_call(VALUES, INDICES, -1.0, 3))
    assert not negative_size(_repad_call(VALUES, INDICES, 2, -1.0))
    assert not negative_size(_repad_call(VALUES.tolist(), INDICES, -1, 3))


def test_arguments_not_tensors() -> None:
    assert values_not_a_tensor(_repad_call(VALUES.tolist(), INDICES))
    assert not values_not_a_tensor(_repad_call(VALUES, INDICES))
    assert indices_not_a_tensor(_repad_call(VALUES, INDICES.tolist()))
    assert not indices_not_a_tensor(_repad_call(VALUES, INDICES))
    assert not indices_not_a_tensor(_repad_call(torch.tensor(5.0), [0]))
    assert not indices_not_a_tensor(_repad_call(VALUES.tolist(), [0]))


# --------------------------------------------------------------------------- balance


def test_partitions_hand_openrlhf_the_contracts_arguments_by_name() -> None:
    seen = []

    def partitions(**kwargs):
        seen.append(kwargs)
        return openrlhf_balanced(**kwargs)

    values = [5, 1, 4, 2]
    assert partitions_adapter(partitions)(values, 2) == balance.balanced_partitions(values, 2)
    partitions_adapter(partitions)(values, 2, equal_size=True)
    assert seen == [{"seqlen_list": values, "k_partitions": 2, "equal_size": False},
                    {"seqlen_list": values, "k_partitions": 2, "equal_size": True}]


def _balance_call(values, k=2, **kwargs) -> Call:
    return Call.of(Case((values, k), kwargs), balance.balanced_partitions)


def test_k_out_of_range() -> None:
    assert k_out_of_range(_balance_call([1, 2], 3))
    assert k_out_of_range(_balance_call([1, 2], 0))
    assert not k_out_of_range(_balance_call([1, 2], 2))
    assert not k_out_of_range(_balance_call([1, 2], 1))
    assert not k_out_of_range(_balance_call([1, 2], True))
    assert k_out_of_range(_balance_call(torch.tensor([1, 2]), 3))
    assert k_out_of_range(_balance_call((1, 2), 3))
    assert not k_out_of_range(_balance_call(torch.tensor([[1, 2]]), 3))  # not 1-D
    assert not k_out_of_range(_balance_call(5, 3))


def test_a_float_k_over_n() -> None:
    assert float_k_over_n(_balance_call([1, 2], 2.5))
    assert not float_k_over_n(_balance_call([1, 2], 2.0))
    assert not float_k_over_n(_balance_call([1, 2], 3))
    assert not float_k_over_n(_balance_call([1, 2], math.inf))
    assert not float_k_over_n(_balance_call(torch.zeros(2, 2), 5.0))


def test_a_bool_k() -> None:
    assert k_is_bool(_balance_call([1, 2], True)) and not k_is_bool(_balance_call([1, 2], 1))


def test_equal_size_not_divisible() -> None:
    assert equal_size_not_divisible(_balance_call([1, 2, 3], 2, equal_size=True))
    assert not equal_size_not_divisible(_balance_call([1, 2, 3], 2))
    assert not equal_size_not_divisible(_balance_call([1, 2, 3, 4], 2, equal_size=True))
    assert not equal_size_not_divisible(_balance_call([1, 2, 3], 3, equal_size=True))
    assert not equal_size_not_divisible(_balance_call([1, 2, 3], 4, equal_size=True))
    assert not equal_size_not_divisible(_balance_call([1, 2, 3], 0, equal_size=True))
    assert equal_size_not_divisible(_balance_call([1, 2, 3], 2, equal_size=1))
    assert not equal_size_not_divisible(_balance_call([1, 2, 3], 2.0, equal_size=True))
    assert not equal_size_not_divisible(_balance_call(None, 2, equal_size=True))
    assert equal_size_not_divisible(_balance_call([1, 2, 3, 4, 5], 2, equal_size=True))


@pytest.mark.parametrize("values, bad", [
    ([1, 2], False), ([0, 2.5], False), ([-1, 2], True), ([1, math.nan], True),
    ([math.inf], True), ([True, 2], True), (torch.tensor([1, -2]), True),
    (torch.tensor([1, 2]), False), (None, False), (["a"], False), ([-0.5], True),
])
def test_bad_seqlens(values, bad: bool) -> None:
    assert bad_seqlen(_balance_call(values)) is bad


def test_a_values_tensor_not_real_1d() -> None:
    assert values_tensor_not_real_1d(_balance_call(torch.zeros(2, 1)))
    assert values_tensor_not_real_1d(_balance_call(torch.zeros(1, dtype=torch.complex64)))
    assert not values_tensor_not_real_1d(_balance_call(torch.zeros(2)))
    assert not values_tensor_not_real_1d(_balance_call(torch.zeros(0, 2)))
    assert not values_tensor_not_real_1d(_balance_call(torch.tensor(1.0)))
    assert not values_tensor_not_real_1d(_balance_call([[1, 2]]))
    assert not values_tensor_not_real_1d(_balance_call(torch.zeros(2, 2, device="meta")))

"""The conversion code of `batchproof.adapters.verl` on stand-ins of verl's functions (issue 39:
the killers of `mutate --mutmut --harness adapters/verl`).

verl is not installed here: the adapters' wraps are handed the liveness stand-ins
(`tests/liveness_stand_ins.py`) or small recording fakes, and asserted on what the module
promises: verl is handed the contract's input in its own form (a padded attention-mask batch,
keyword arguments by verl's names, a copy of the batch it converts in place), every compared
field is verl's own, and the domain and known-divergence predicates hold on exactly the inputs
their docs name.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from liveness_stand_ins import (
    verl_balanced,
    verl_left_right_2_no_padding,
    verl_position_ids,
    verl_rearrange_micro_batches,
)
from tensordict import TensorDict

from batchproof.adapters import Call, verl
from batchproof.adapters.verl import (
    bad_value,
    equal_size_not_divisible,
    expressible_as_mask,
    float_k_over_n,
    k_is_bool,
    k_out_of_range,
    micro_batches_adapter,
    micro_budget_not_int,
    micro_checked_by_assert,
    micro_unchecked,
    no_padding_adapter,
    padded_batch,
    partitions_adapter,
    position_ids_adapter,
    valid_input,
    values_tensor_not_real_1d,
)
from batchproof.reference import balance, nesting
from batchproof.reference.rl_batch import build_rl_batch
from batchproof.registry import BadCase, Case

# --------------------------------------------------------------------------- partitions


def test_partitions_hand_verl_the_contracts_arguments_by_its_names() -> None:
    seen = []

    def partitions(**kwargs):
        seen.append(kwargs)
        return verl_balanced(**kwargs)

    values = [5, 1, 4, 2]
    assert partitions_adapter(partitions)(values, 2) == balance.balanced_partitions(values, 2)
    partitions_adapter(partitions)(values, 2, equal_size=True)
    assert seen == [{"seqlen_list": values, "k_partitions": 2, "equal_size": False},
                    {"seqlen_list": values, "k_partitions": 2, "equal_size": True}]


def _balance(values, k=2, **kwargs) -> Call:
    return Call.of(Case((values, k), kwargs), balance.balanced_partitions)


def test_k_out_of_range() -> None:
    assert k_out_of_range(_balance([1, 2], 3)) and k_out_of_range(_balance([1, 2], 0))
    assert not k_out_of_range(_balance([1, 2], 2)) and not k_out_of_range(_balance([1, 2], 1))
    assert not k_out_of_range(_balance([1, 2], True)) and not k_out_of_range(_balance(5, 3))
    assert k_out_of_range(_balance(torch.tensor([1, 2]), 3))
    assert not k_out_of_range(_balance(torch.tensor([[1, 2]]), 3))
    assert not k_out_of_range(_balance([1, 2], 3.0))


def test_equal_size_not_divisible() -> None:
    assert equal_size_not_divisible(_balance([1, 2, 3], 2, equal_size=True))
    assert not equal_size_not_divisible(_balance([1, 2, 3], 2))
    assert not equal_size_not_divisible(_balance([1, 2, 3, 4], 2, equal_size=True))
    assert not equal_size_not_divisible(_balance([1, 2, 3], 0, equal_size=True))
    assert equal_size_not_divisible(_balance([1, 2, 3], 4, equal_size=True))
    assert not equal_size_not_divisible(_balance(None, 2, equal_size=True))
    assert not equal_size_not_divisible(_balance([1, 2, 3], 2.0, equal_size=True))
    assert equal_size_not_divisible(_balance([1, 2, 3], 2, equal_size=1))


@pytest.mark.parametrize("values, bad", [
    ([1, 2], False), ([0, 2.5], False), ([-1, 2], True), ([1, math.nan], True),
    ([math.inf], True), ([True, 2], True), (torch.tensor([1, -2]), True),
    (torch.tensor([True]), True), (None, False), (["a"], False), ([-0.5], True),
])
def test_bad_values(values, bad: bool) -> None:
    assert bad_value(_balance(values)) is bad


def test_a_values_tensor_not_real_1d() -> None:
    assert values_tensor_not_real_1d(_balance(torch.zeros(2, 1)))
    assert values_tensor_not_real_1d(_balance(torch.zeros(1, dtype=torch.complex64)))
    assert not values_tensor_not_real_1d(_balance(torch.zeros(2)))
    assert not values_tensor_not_real_1d(_balance(torch.zeros(0, 2)))
    assert not values_tensor_not_real_1d(_balance(torch.tensor(1.0)))
    assert not values_tensor_not_real_1d(_balance([[1, 2]]))
    assert not values_tensor_not_real_1d(_balance(torch.zeros(2, 2, device="meta")))
    nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)], layout=torch.jagged)
    assert not values_tensor_not_real_1d(_balance(nested))


def test_k_kinds() -> None:
    assert k_is_bool(_balance([1], True)) and not k_is_bool(_balance([1], 1))
    assert float_k_over_n(_balance([1, 2], 2.5)) and not float_k_over_n(_balance([1, 2], 2.0))
    assert not float_k_over_n(_balance([1, 2], 3)) and not float_k_over_n(_balance([1], math.inf))
    assert not float_k_over_n(_balance(torch.zeros(2, 2), 5.0))


# --------------------------------------------------------------------------- micro-batches


def test_the_padded_batch_holds_each_length_as_real_tokens() -> None:
    td = padded_batch(torch.tensor([2, 0, 3]))
    assert td["attention_mask"].tolist() == [[1, 1, 0], [0, 0, 0], [1, 1, 1]]
    assert td["input_ids"].tolist() == [[0] * 3] * 3
    assert td["attention_mask"].dtype == td["input_ids"].dtype == torch.int64
    assert td.batch_size == torch.Size([3])


def test_micro_batches_are_verls_index_lists() -> None:
    seen = []

    def rearrange(batch, max_token_len, **kwargs):
        seen.append((batch["attention_mask"].sum(1).tolist(), max_token_len, kwargs))
        return verl_rearrange_micro_batches(batch, max_token_len, **kwargs)

    lengths = [3, 1, 2, 2]
    out = micro_batches_adapter(rearrange)(lengths, 5, min_count=2, count_multiple=2,
                                           group_size=2)
    assert out == balance.micro_batches(lengths, 5, min_count=2, count_multiple=2, group_size=2)
    assert seen == [(lengths, 5, {"num_batches_divided_by": 2, "min_num_micro_batch": 2,
                                  "force_group_size": 2})]
    micro_batches_adapter(rearrange)(lengths, 5)
    assert seen[1][2] == {"num_batches_divided_by": None, "min_num_micro_batch": None,
                          "force_group_size": 1}


def test_micro_batches_return_what_verl_returned() -> None:
    out = micro_batches_adapter(lambda batch, budget, **kwargs: ("batches", [[9]]))([1], 1)
    assert out == [[9]]


def _micro(lengths, max_tokens=4, **kwargs) -> Call:
    return Call.of(Case((lengths, max_tokens), kwargs), balance.micro_batches)


def test_verl_takes_a_mask_of_int_lengths() -> None:
    assert expressible_as_mask(_micro([1, 2])) and expressible_as_mask(_micro((1,)))
    assert expressible_as_mask(_micro(torch.tensor([1, 2])))
    assert not expressible_as_mask(_micro([])) and not expressible_as_mask(_micro([1, 2.0]))
    assert not expressible_as_mask(_micro([True])) and not expressible_as_mask(_micro(3))
    assert not expressible_as_mask(_micro(torch.tensor([[1, 2]])))


def test_micro_batches_checked_by_assert() -> None:
    assert micro_checked_by_assert(_micro([1, 5], 4)) and not micro_checked_by_assert(
        _micro([1, 4], 4))
    assert not micro_checked_by_assert(_micro([1, 5], 4.0))
    assert micro_checked_by_assert(_micro([1, 2, 3], 4, group_size=2))
    assert not micro_checked_by_assert(_micro([1, 2], 4, group_size=2))
    assert not micro_checked_by_assert(_micro([1, 2, 3], 4, group_size=0))
    assert not micro_checked_by_assert(_micro([1, 2, 3], 4, group_size=2.0))
    assert not micro_checked_by_assert(_micro([1.5, 9.0], 4))
    assert not micro_checked_by_assert(_micro([], 0))


def test_micro_batches_unchecked() -> None:
    assert micro_unchecked(_micro([1, 0])) and not micro_unchecked(_micro([1, 2]))
    assert not micro_unchecked(_micro([1, 0.0]))
    assert micro_unchecked(_micro([1], min_count=0)) and micro_unchecked(_micro([1], min_count=0.0))
    assert not micro_unchecked(_micro([1], min_count=1))
    assert not micro_unchecked(_micro([1], min_count="0"))
    assert micro_unchecked(_micro([1], 0)) and not micro_unchecked(_micro([1], 1))
    assert not micro_unchecked(_micro([1], 0.0))


def test_a_budget_not_an_int() -> None:
    assert micro_budget_not_int(_micro([1], 4.0)) and micro_budget_not_int(_micro([1], True))
    assert not micro_budget_not_int(_micro([1], 4))


# --------------------------------------------------------------------------- position ids


def test_position_ids_are_verls_of_the_references_mask() -> None:
    seen = []

    def positions(mask):
        seen.append(mask)
        return verl_position_ids(mask) + 100

    args = ([[1, 2], [3]], [[4], [5, 6]])
    out = position_ids_adapter(positions)(*args, pad_token_id=0, layout="left")
    want = build_rl_batch(*args, pad_token_id=0, layout="left")
    assert torch.equal(seen[0], want["attention_mask"])
    assert torch.equal(out["position_ids"], verl_position_ids(want["attention_mask"]) + 100)
    assert torch.equal(out["input_ids"], want["input_ids"])


def test_the_position_ids_domain_is_the_valid_inputs() -> None:
    case = Case(([[1]], [[2]]), {"pad_token_id": 0})
    assert valid_input(Call.of(case, build_rl_batch))
    assert not valid_input(Call.of(BadCase(case, ValueError), build_rl_batch))


# --------------------------------------------------------------------------- left_right_2_no_padding


def _dense() -> TensorDict:
    return build_rl_batch([[1, 2], [3]], [[4], [5, 6]], pad_token_id=0, layout="two_segment")


def test_the_nested_batch_is_the_contracts_with_verls_nested_fields() -> None:
    handed = []

    def no_padding(data):
        handed.append(data)
        return verl_left_right_2_no_padding(data)

    given = _dense()
    out = no_padding_adapter(no_padding)(given, pad_token_id=0)
    want = nesting.nest_by_mask(_dense(), pad_token_id=0)
    assert handed[0] is not given  # verl converts its input in place: a copy
    assert torch.equal(given["input_ids"], _dense()["input_ids"])
    for key in ("input_ids", "position_ids"):
        assert torch.equal(out[key].values(), want[key].values()), key
        assert out[key].offsets().dtype == torch.int64
    assert set(out.keys()) == set(want.keys())


def test_verls_nested_fields_are_its_own() -> None:
    def no_padding(data):
        out = verl_left_right_2_no_padding(data)
        out["input_ids"] = torch.nested.nested_tensor_from_jagged(
            out["input_ids"].values() + 7, offsets=out["input_ids"].offsets().int())
        return out

    out = no_padding_adapter(no_padding)(_dense(), pad_token_id=0)
    want = nesting.nest_by_mask(_dense(), pad_token_id=0)
    assert torch.equal(out["input_ids"].values(), want["input_ids"].values() + 7)
    assert out["input_ids"].offsets().dtype == torch.int64
    assert torch.equal(out["loss_mask"].values(), want["loss_mask"].values())  # the contract's


def test_an_input_the_contract_rejects_returns_verls_output() -> None:
    out = no_padding_adapter(lambda data: "verl's output")(_dense(), pad_token_id=0,
                                                          strict="yes")
    assert out == "verl's output"


def test_int64_offsets_are_kept() -> None:
    nested = torch.nested.nested_tensor_from_jagged(torch.arange(3), offsets=torch.tensor([0, 1, 3]))
    assert verl._int64_offsets(nested) is nested
    assert verl._int64_offsets(torch.zeros(2)) is not None
    int32 = torch.nested.nested_tensor_from_jagged(torch.arange(3),
                                                   offsets=torch.tensor([0, 1, 3]).int())
    long = verl._int64_offsets(int32)
    assert long.offsets().tolist() == [0, 1, 3] and long.offsets().dtype == torch.int64
    assert torch.equal(long.values(), torch.arange(3))


def _nest(td, **kwargs) -> Call:
    return Call.of(Case((td,), kwargs), nesting.nest_by_mask)


@pytest.mark.parametrize("kwargs, valid", [
    ({}, True), ({"pad_token_id": 3}, True), ({"pad_token_id": True}, False),
    ({"pad_token_id": 1.0}, False), ({"strict": True}, True), ({"strict": 1}, False),
    ({"ignore_dense": ["a"]}, True), ({"ignore_dense": ("a",)}, True),
    ({"ignore_dense": {"a"}}, True), ({"ignore_dense": frozenset()}, True),
    ({"ignore_dense": "a"}, False), ({"ignore_dense": [1]}, False),
    ({"rules": 5}, False),
])
def test_the_contracts_own_keywords(kwargs: dict, valid: bool) -> None:
    assert verl.contract_keywords_valid(_nest(_dense(), **kwargs)) is valid


def test_verl_can_nest_a_dense_batch_of_its_four_keys() -> None:
    assert verl.verl_can_nest(_nest(_dense()))
    assert not verl.verl_can_nest(_nest(_dense().exclude("response_mask")))
    assert not verl.verl_can_nest(_nest(_dense(), strict=1))
    assert not verl.verl_can_nest(_nest(_dense(), rules={"input_ids": "attention_mask"}))
    assert verl.verl_can_nest(_nest(_dense(), rules={}))
    assert verl.verl_can_nest(_nest(torch.zeros(2)))  # invalid: verl must reject it too
    assert verl.verl_can_nest(_nest(nesting.nest_by_mask(_dense(), pad_token_id=0)))


def test_dense_mask_predicates() -> None:
    two = _dense()
    two["attention_mask"][0, 0] = 2
    assert verl.mask_not_binary(_nest(two)) and not verl.mask_not_binary(_nest(_dense()))
    assert not verl.mask_not_binary(_nest(nesting.nest_by_mask(_dense(), pad_token_id=0)))
    flat = TensorDict({"input_ids": torch.zeros(2, 3), "attention_mask": torch.ones(2),
                       "response_mask": torch.ones(2, 1), "position_ids": torch.zeros(2, 3)},
                      batch_size=[2])
    assert verl.attention_mask_1d(_nest(flat))
    assert not verl.attention_mask_1d(_nest(flat.exclude("position_ids")))
    assert not verl.attention_mask_1d(_nest(_dense()))
    assert verl.not_a_dense_batch(_nest(torch.zeros(2)))
    assert verl.not_a_dense_batch(_nest(nesting.nest_by_mask(_dense(), pad_token_id=0)))
    assert not verl.not_a_dense_batch(_nest(_dense()))


def test_a_dense_tensor() -> None:
    td = _dense()
    assert verl._dense_tensor(td, "attention_mask") is td.get("attention_mask")
    assert verl._dense_tensor(td, "layout") is None and verl._dense_tensor(td, "nope") is None
    assert verl._dense_tensor(torch.zeros(2), "x") is None
    td["meta"] = torch.zeros(2, 1, device="meta")
    assert verl._dense_tensor(td, "meta") is None


def _multi_axis(lengths, symmetric: bool = False) -> TensorDict:
    width = max(lengths)
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    channels = 2
    positions = torch.arange(channels * width).reshape(1, channels, width).repeat(len(lengths),
                                                                                  1, 1)
    if symmetric:
        positions = torch.tensor([[[0, 1], [1, 0]]] * len(lengths))
    return TensorDict({"input_ids": torch.zeros_like(mask), "attention_mask": mask,
                       "response_mask": mask, "position_ids": positions}, batch_size=[len(lengths)])


def test_multi_axis_position_rows() -> None:
    assert verl.multi_axis_unequal_rows(_nest(_multi_axis([1, 2])))
    assert not verl.multi_axis_unequal_rows(_nest(_multi_axis([2, 2])))
    assert not verl.multi_axis_unequal_rows(_nest(_dense()))
    assert verl.multi_axis_equal_rows(_nest(_multi_axis([3, 3])))
    assert verl.multi_axis_equal_rows(_nest(_multi_axis([2, 2])))  # n == C, not symmetric
    assert not verl.multi_axis_equal_rows(_nest(_multi_axis([2, 2], symmetric=True)))
    assert not verl.multi_axis_equal_rows(_nest(_multi_axis([1, 2])))
    assert not verl.multi_axis_equal_rows(_nest(_dense()))


# --------------------------------------------------------------------------- no_padding_2_padding


def test_a_dense_batch_is_handed_to_verl_as_it_is() -> None:
    seen = []
    out = verl.padding_adapter(lambda output, data: seen.append((output, data)) or "verl")(
        _dense(), "the output")
    assert out == "verl" and seen[0][0] == "the output"
    assert "max_response_len" not in seen[0][1].keys()


def test_a_nested_batch_hands_verl_its_max_response_len_on_a_copy() -> None:
    nested, seen = nesting.nest_by_mask(_dense(), pad_token_id=0), []
    verl.padding_adapter(lambda output, data: seen.append(data))(nested, torch.zeros(5))
    (data,) = seen
    assert data is not nested and "max_response_len" not in nested.keys()
    assert data.get_non_tensor("max_response_len") == nesting.stash_of(nested)[
        "max_response_length"]


def test_a_sub_tensordict_is_no_dense_tensor() -> None:
    td = _dense()
    td["sub"] = TensorDict({"x": torch.zeros(2, 1)}, batch_size=[2])
    assert verl._dense_tensor(td, "sub") is None


def test_a_transposed_jagged_tensor_keeps_its_ragged_dimension() -> None:
    values = torch.arange(12).reshape(6, 2)
    int32 = torch.nested.nested_tensor_from_jagged(values, offsets=torch.tensor([0, 2, 6]).int(),
                                                   jagged_dim=2)
    long = verl._int64_offsets(int32)
    assert long._ragged_idx == 2 and long.offsets().dtype == torch.int64  # noqa: SLF001


def _nested_with_dense_mask(mask: torch.Tensor) -> TensorDict:
    """A nested batch (made by nest_by_mask) holding, against its form, a dense attention_mask."""
    nested = nesting.nest_by_mask(_dense(), pad_token_id=0)
    nested["attention_mask"] = mask
    return nested


def test_a_nested_batchs_masks_are_not_read_as_dense() -> None:
    two = _nested_with_dense_mask(torch.full((2, 4), 2))
    assert not verl.mask_not_binary(_nest(two))
    flat = _nested_with_dense_mask(torch.ones(2))
    for key in ("input_ids", "response_mask", "position_ids"):
        assert key in flat.keys()
    assert not verl.attention_mask_1d(_nest(flat))
    positioned = _nested_with_dense_mask(torch.ones(2, 4))
    positioned["position_ids"] = torch.zeros(2, 2, 4)
    assert verl._multi_axis_row_lengths(_nest(positioned)) is None
    strided = _strided(3, 3)
    floats = _nested_with_dense_mask(torch.ones(2, 4))
    assert verl.strided_output(_extract(floats, strided))  # its dense float mask not read
    dense_prompts = nesting.nest_by_mask(_verl_batch(), pad_token_id=0)
    dense_prompts["prompts"] = _verl_batch()["prompts"]
    assert not verl.no_attention_mask(_extract(dense_prompts, torch.zeros(6)))


def test_multi_axis_needs_both_the_mask_and_the_positions() -> None:
    td = _multi_axis([1, 2])
    assert verl._multi_axis_row_lengths(_nest(td.exclude("position_ids"))) is None
    assert verl._multi_axis_row_lengths(_nest(td.exclude("attention_mask"))) is None
    assert verl._multi_axis_row_lengths(_nest(td)) == [1, 2]


def test_multi_axis_equal_rows_at_their_bounds() -> None:
    assert verl.multi_axis_equal_rows(_nest(_multi_axis([3])))  # one row
    wide = _multi_axis([2, 2])  # n == C == 2, but positions 3 wide against a mask of 2
    wide["position_ids"] = torch.zeros(2, 2, 3, dtype=torch.int64)
    assert verl.multi_axis_equal_rows(_nest(wide))
    symmetric = [[0, 1, 5], [1, 0, 5]]
    mask = torch.tensor([[1, 1, 0]] * 3)
    td = TensorDict({"input_ids": torch.zeros_like(mask), "attention_mask": mask,
                     "response_mask": mask,
                     "position_ids": torch.tensor([symmetric] * 3)}, batch_size=[3])
    assert not verl.multi_axis_equal_rows(_nest(td))  # n == C, S == 3: symmetric blocks
    td["position_ids"][2, 0, 1] = 7  # the third row's block (B = 3 > C = 2) not symmetric
    assert verl.multi_axis_equal_rows(_nest(td))


def test_a_non_batch_is_handed_to_verl_as_it_is() -> None:
    given = ["not a batch"]
    assert no_padding_adapter(lambda data: data)(given) is given


def test_verl_cannot_nest_a_field_a_rule_reroutes() -> None:
    assert not verl.verl_can_nest(_nest(_dense(), rules={"input_ids": ("response_mask", 0)}))
    assert verl.verl_can_nest(_nest(_dense(), rules={"loss_mask": ("response_mask", 0)}))


# --------------------------------------------------------------------------- extract predicates


def _verl_batch(**fields) -> TensorDict:
    """A verl batch: prompts (2 and 1 real tokens, left-padded to 3), responses (1 and 2,
    right-padded to 2), their attention mask."""
    td = TensorDict({
        "prompts": torch.tensor([[0, 1, 2], [0, 0, 3]]),
        "responses": torch.tensor([[4, 0], [5, 6]]),
        "input_ids": torch.tensor([[0, 1, 2, 4, 0], [0, 0, 3, 5, 6]]),
        "attention_mask": torch.tensor([[0, 1, 1, 1, 0], [0, 0, 1, 1, 1]]),
        "response_mask": torch.tensor([[1, 0], [1, 1]]),
        "position_ids": torch.tensor([[0, 0, 1, 2, 2], [0, 0, 0, 1, 2]])}, batch_size=[2])
    for key, value in fields.items():
        td[key] = value
    return td


def _extract(td, output=None) -> Call:
    args = (td,) if output is None else (td, output)
    return Call.of(Case(args), nesting.extract_response)


def test_the_segment_lengths_of_dense_and_nested_batches() -> None:
    assert verl._segment_lengths(_verl_batch()) == ([2, 1], [1, 2], 2, 2)
    nested = nesting.nest_by_mask(_verl_batch(), pad_token_id=0)
    assert verl._segment_lengths(nested) == ([2, 1], [1, 2], 2, 2)
    assert verl._segment_lengths(_verl_batch().exclude("attention_mask")) is None
    assert verl._segment_lengths(torch.zeros(2)) is None
    assert verl._segment_lengths(_verl_batch(attention_mask=torch.ones(2))) is None
    halves = _verl_batch(attention_mask=torch.tensor([[0, 1, 1, 0.5, 0], [0, 0, 1, 1, 1]]))
    prompts, responses, _, _ = verl._segment_lengths(halves)
    assert (prompts, responses) == ([2, 1], [0, 2]) and isinstance(responses[0], int)
    bools = _verl_batch()
    bools["attention_mask"] = bools["attention_mask"].bool()
    assert verl._segment_lengths(bools) == ([2, 1], [1, 2], 2, 2)


def test_verl_extracts_from_batches_with_prompts_and_responses() -> None:
    assert verl.verl_can_extract(_extract(_verl_batch(), torch.zeros(6)))
    assert verl.verl_can_extract(_extract(nesting.nest_by_mask(_verl_batch(), pad_token_id=0)))
    assert not verl.verl_can_extract(_extract(_verl_batch().exclude("responses")))
    assert not verl.verl_can_extract(_extract(_verl_batch().exclude("prompts")))
    assert not verl.verl_can_extract(_extract(torch.zeros(2)))
    assert verl.verl_can_extract(_extract(_verl_batch().exclude("attention_mask")))
    wider = _verl_batch()
    wider.set_non_tensor("max_response_length", 3)  # R = 3 against 2 response columns
    assert not verl.verl_can_extract(_extract(wider))
    narrower = _verl_batch()
    narrower.set_non_tensor("max_response_length", 1)  # dense: a response of 2 beyond R = 1
    assert not verl.verl_can_extract(_extract(narrower))
    only = TensorDict({"prompts": torch.zeros(2, 3), "responses": torch.zeros(2, 2)},
                      batch_size=[2])
    assert verl.verl_can_extract(_extract(only))  # the contract rejects it: verl must too


def test_a_nested_response_beyond_r() -> None:
    nested = nesting.nest_by_mask(_verl_batch(), pad_token_id=0)
    nesting.stash_of(nested)["max_response_length"] = 1  # a response of 2 against R = 1
    assert verl.verl_can_extract(_extract(nested))
    assert verl.response_beyond_max_response_len(_extract(nested))
    assert not verl.response_beyond_max_response_len(_extract(nesting.nest_by_mask(
        _verl_batch(), pad_token_id=0)))
    assert not verl.response_beyond_max_response_len(_extract(_verl_batch()))


def test_an_empty_prompt() -> None:
    empty = _verl_batch(attention_mask=torch.tensor([[0, 0, 0, 1, 0], [0, 0, 1, 1, 1]]))
    assert verl.empty_prompt(_extract(empty)) and not verl.empty_prompt(_extract(_verl_batch()))
    assert not verl.empty_prompt(_extract(torch.zeros(2)))


def test_a_float_attention_mask() -> None:
    floats = _verl_batch()
    floats["attention_mask"] = floats["attention_mask"].float()
    assert verl.float_attention_mask(_extract(floats))
    assert not verl.float_attention_mask(_extract(_verl_batch()))
    assert verl.float_attention_mask(_extract(nesting.nest_by_mask(floats, pad_token_id=0)))
    assert not verl.float_attention_mask(_extract(nesting.nest_by_mask(_verl_batch(),
                                                                       pad_token_id=0)))
    broken = nesting.nest_by_mask(_verl_batch(), pad_token_id=0)
    del nesting.stash_of(broken)["masks"]["attention_mask"]
    assert not verl.float_attention_mask(_extract(broken))
    odd = nesting.nest_by_mask(_verl_batch(), pad_token_id=0)
    nesting.stash_of(odd)["masks"]["attention_mask"]["dtype"] = "float32"
    assert not verl.float_attention_mask(_extract(odd))
    assert not verl.float_attention_mask(_extract(_verl_batch().exclude("attention_mask")))


def test_no_attention_mask() -> None:
    bare = _verl_batch().exclude("attention_mask")
    assert verl.no_attention_mask(_extract(bare, torch.zeros(6)))
    assert not verl.no_attention_mask(_extract(bare, [0.0] * 6))
    assert not verl.no_attention_mask(_extract(_verl_batch(), torch.zeros(6)))
    assert not verl.no_attention_mask(_extract(bare.exclude("prompts"), torch.zeros(6)))
    assert not verl.no_attention_mask(_extract(torch.zeros(2), torch.zeros(6)))
    nested = nesting.nest_by_mask(_verl_batch(), pad_token_id=0)
    assert not verl.no_attention_mask(_extract(nested, torch.zeros(6)))


def test_the_output_argument() -> None:
    assert verl.output_not_a_tensor(_extract(_verl_batch(), [0.0]))
    assert not verl.output_not_a_tensor(_extract(_verl_batch(), torch.zeros(6)))
    assert not verl.output_not_a_tensor(_extract(_verl_batch()))  # no output given
    assert verl._output(_extract(_verl_batch(), "out")) == "out"


def _strided(*lengths: int) -> torch.Tensor:
    """A strided (not jagged) nested tensor, without torch's prototype warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.nested.nested_tensor([torch.zeros(n) for n in lengths])


def test_a_strided_nested_output() -> None:
    strided = _strided(3, 3)
    jagged = torch.nested.nested_tensor([torch.zeros(3), torch.zeros(3)], layout=torch.jagged)
    assert verl.strided_output(_extract(_verl_batch(), strided))
    assert not verl.strided_output(_extract(_verl_batch(), jagged))
    assert not verl.strided_output(_extract(_verl_batch(), torch.zeros(6)))
    floats = _verl_batch()
    floats["attention_mask"] = floats["attention_mask"].float()
    assert not verl.strided_output(_extract(floats, strided))
    nested = nesting.nest_by_mask(_verl_batch(), pad_token_id=0)
    assert verl.strided_output(_extract(nested, strided))


def test_output_rows_that_differ_from_the_batch() -> None:
    batch = _verl_batch()  # 3 and 3 real tokens
    assert not verl.output_rows_mismatch(_extract(batch, torch.zeros(6)))
    assert verl.output_rows_mismatch(_extract(batch, torch.zeros(5)))
    assert verl.output_rows_mismatch(_extract(batch, torch.tensor(1.0)))
    assert not verl.output_rows_mismatch(_extract(batch, torch.zeros(6, device="meta")))
    assert not verl.output_rows_mismatch(_extract(batch, [0.0] * 5))
    assert not verl.output_rows_mismatch(_extract(torch.zeros(2), torch.zeros(5)))
    same = torch.nested.nested_tensor([torch.zeros(3), torch.zeros(3)], layout=torch.jagged)
    other = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(4)], layout=torch.jagged)
    assert not verl.output_rows_mismatch(_extract(batch, same))
    assert verl.output_rows_mismatch(_extract(batch, other))
    strided = _strided(2, 4)
    assert not verl.output_rows_mismatch(_extract(batch, strided))
    uneven = _verl_batch(attention_mask=torch.tensor([[0, 1, 1, 1, 1], [0, 0, 1, 1, 0]]))
    assert verl.output_rows_mismatch(_extract(uneven, same))  # 4 and 2 real tokens
    assert not verl.output_rows_mismatch(_extract(uneven, torch.zeros(6)))


def _bad_nest(td, **kwargs) -> Call:
    return Call.of(BadCase(Case((td,), kwargs), ValueError), nesting.nest_by_mask)


def test_a_defect_in_a_field_verl_never_reads() -> None:
    unread = _dense()
    unread["prompts"] = torch.zeros(2, 7, 3)  # a field verl neither reads nor nests
    assert verl.defect_in_unread_fields(_bad_nest(unread, pad_token_id=0))
    assert not verl.defect_in_unread_fields(_nest(unread, pad_token_id=0))  # valid: no defect
    read = _dense()
    read["attention_mask"][0, 0] = 2
    assert not verl.defect_in_unread_fields(_bad_nest(read, pad_token_id=0))
    assert not verl.defect_in_unread_fields(_bad_nest(unread.exclude("response_mask"),
                                                      pad_token_id=0))
    assert not verl.defect_in_unread_fields(_bad_nest(torch.zeros(2)))
    nested = nesting.nest_by_mask(_dense(), pad_token_id=0)
    assert not verl.defect_in_unread_fields(_bad_nest(nested))


def test_a_nested_batch_of_no_rows_and_r_0() -> None:
    empty = nesting.nest_by_mask(_verl_batch()[:0], pad_token_id=0)
    nesting.stash_of(empty)["max_response_length"] = 0  # R = 0 against 2 response columns
    assert not verl.verl_can_extract(_extract(empty))
    assert not verl.response_beyond_max_response_len(_extract(empty))


def test_a_nested_batchs_defect_is_not_in_unread_fields() -> None:
    nested = _nested_with_dense_mask(torch.ones(2, 4, dtype=torch.int64))
    assert all(key in nested.keys() for key in verl.VERL_REQUIRED)
    assert not verl.defect_in_unread_fields(_bad_nest(nested))

"""Each regime predicate of `batchproof.regimes` against the inputs at its edges: the regime's
name (and the docstrings) say what it holds on, and here an input just inside and one just
outside it are told apart. `coverage`, `uncovered` and `default_examples` are checked on tiny
stand-in strategies. All in this process and fast: these tests are the killers of
`batchproof mutate --mutmut --harness regimes` (tests/test_regimes.py measures the real rates)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from tensordict import NonTensorData, TensorDict

from batchproof import regimes, registry
from batchproof.calls import Call
from batchproof.profiles import PROFILES
from batchproof.registry import Case

RL = "rl_batch.build_rl_batch"
VARLEN = "varlen.pack_varlen"


@pytest.fixture(autouse=True)
def fresh_regimes(monkeypatch) -> None:
    """Each test builds the regimes afresh (`regimes.regimes` caches them in `REGIMES`): what a
    test sees is what the builders make now, not what an earlier test left."""
    monkeypatch.setattr(regimes, "REGIMES", {})


def call(record: str, *args, **kwargs) -> Call:
    """The call as the record's predicates see it (its reference names the arguments)."""
    return Call.of(Case(args, kwargs), registry.get(record).reference)


def holds(record: str, regime: str, *args, **kwargs) -> bool:
    return regimes.regimes(record)[regime](call(record, *args, **kwargs))


def rows(lengths: list[int], token: int = 5) -> list[list[int]]:
    return [[token] * n for n in lengths]


def rl(regime: str, prompts: list[int], responses: list[int], **kwargs) -> bool:
    """An rl_batch input with rows of these lengths (pad id 0, tokens 5)."""
    kwargs.setdefault("pad_token_id", 0)
    return holds(RL, regime, rows(prompts), rows(responses), **kwargs)


# --------------------------------------------------------------------------- the length shapes


def test_anti_correlated_needs_three_rows_and_two_tokens_either_way() -> None:
    assert rl("anti_correlated", [1, 2, 3], [3, 2, 1])
    assert rl("anti_correlated", [0, 9, 2], [4, 0, 2])  # only the first and last rows matter
    assert not rl("anti_correlated", [1, 3], [3, 1])  # two rows
    assert not rl("anti_correlated", [1, 1, 2], [3, 2, 1])  # prompts grow by one
    assert not rl("anti_correlated", [1, 2, 3], [2, 2, 1])  # responses shrink by one
    assert not rl("anti_correlated", [1, 2, 3], [1, 2, 3])  # correlated
    assert not rl("anti_correlated", [3, 2, 1], [1, 2, 3])


def test_all_equal_is_two_or_more_identical_non_empty_rows() -> None:
    assert rl("all_equal", [2, 2], [3, 3])
    assert rl("all_equal", [0, 0, 0], [1, 1, 1])
    assert not rl("all_equal", [2], [3])
    assert not rl("all_equal", [0, 0], [0, 0])
    assert not rl("all_equal", [2, 2], [3, 4])
    assert not rl("all_equal", [2, 1], [3, 3])


def test_every_prompt_empty_and_every_response_empty() -> None:
    assert rl("every_prompt_empty", [0, 0], [2, 0])
    assert not rl("every_prompt_empty", [0, 0], [0, 0])  # nothing at all
    assert not rl("every_prompt_empty", [0, 1], [2, 2])
    assert not rl("every_prompt_empty", [], [])
    assert rl("every_response_empty", [2, 0], [0, 0])
    assert not rl("every_response_empty", [0, 0], [0, 0])
    assert not rl("every_response_empty", [2, 2], [0, 1])
    assert not rl("every_response_empty", [], [])


def test_an_empty_row_among_others() -> None:
    assert rl("empty_row_among_others", [0, 1], [0, 0])
    assert rl("empty_row_among_others", [0, 0], [0, 1])
    assert not rl("empty_row_among_others", [0], [0])
    assert not rl("empty_row_among_others", [0, 0], [0, 0])
    assert not rl("empty_row_among_others", [1, 0], [0, 1])  # no row empty on both sides
    assert rl("empty_row_among_others", [0, 1], [0, 1])


def test_single_sample() -> None:
    assert rl("single_sample", [2], [1])
    assert rl("single_sample", [0], [0])
    assert not rl("single_sample", [2, 2], [1, 1])
    assert not rl("single_sample", [], [])


def test_one_long_row_is_twice_every_other_and_eight_tokens() -> None:
    assert rl("one_long_row", [4, 2, 1], [4, 2, 0])  # 8 against 4 and 1
    assert rl("one_long_row", [0, 0, 0], [1, 20, 3])  # the long row anywhere
    assert not rl("one_long_row", [4, 3, 1], [4, 2, 0])  # 8 against 5
    assert not rl("one_long_row", [4, 2, 1], [3, 1, 0])  # 7 tokens
    assert not rl("one_long_row", [4, 2], [4, 2])  # two rows


def test_pad_id_among_tokens_reads_prompts_and_responses() -> None:
    assert holds(RL, "pad_id_among_tokens", [[5, 7]], [[5]], pad_token_id=7)
    assert holds(RL, "pad_id_among_tokens", [[5]], [[7, 5]], pad_token_id=7)
    assert holds(RL, "pad_id_among_tokens", [torch.tensor([5, 7])], [torch.tensor([5])],
                 pad_token_id=7)
    assert not holds(RL, "pad_id_among_tokens", [[5, 6]], [[5]], pad_token_id=7)
    assert not holds(RL, "pad_id_among_tokens", [[5]], [[5]], pad_token_id=5.5)
    # rows that are not rows (an int, a scalar tensor) hold no token, and raise nothing
    assert not holds(RL, "pad_id_among_tokens", [7, torch.tensor(7)], [[5]], pad_token_id=7)
    assert not holds(RL, "pad_id_among_tokens", 7, 7, pad_token_id=7)


def test_a_float_equal_to_the_pad_id_is_no_token() -> None:
    assert not holds(RL, "pad_id_among_tokens", [[5, 7.0]], [[5]], pad_token_id=7)
    assert holds(RL, "pad_id_among_tokens", [[5, 7.0, 7]], [[5]], pad_token_id=7)


def test_length_regimes_read_the_arguments_they_are_named() -> None:
    found = regimes.length_regimes("a", "b", pad="p", without=("single_sample", "all_equal"))
    assert "single_sample" not in found and "all_equal" not in found
    assert "pad_id_among_tokens" in found and "one_long_row" in found
    given = Call((), {"a": rows([0, 0]), "b": rows([2, 1]), "p": 3,
                      "prompts": rows([1, 1]), "responses": rows([0, 0])})
    assert found["every_prompt_empty"](given)
    assert not found["every_response_empty"](given)
    assert found["pad_id_among_tokens"](Call((), {"a": [[3]], "b": [[1]], "p": 3}))
    assert not found["pad_id_among_tokens"](Call((), {"a": [[1]], "b": [[1]], "p": 3,
                                                        "prompts": [[3]]}))
    without_pad = regimes.length_regimes(pad=None)
    assert "pad_id_among_tokens" not in without_pad
    assert set(without_pad) | {"pad_id_among_tokens"} == set(found) | {"single_sample",
                                                                        "all_equal"}


def test_the_default_length_regimes_read_prompts_and_responses() -> None:
    found = regimes.length_regimes()
    given = Call((), {"prompts": rows([0, 0]), "responses": rows([1, 0]), "pad_token_id": 5})
    assert found["every_prompt_empty"](given) and found["pad_id_among_tokens"](given)


# --------------------------------------------------------------------------- rl_batch


@pytest.mark.parametrize("rewards, kind", [
    ([1.0, 2.0], "rewards_scalar"), (torch.tensor([1.0, 2.0]), "rewards_per_token"),
    ([[1.0], [2.0, 3.0]], "rewards_per_token"),
    ([torch.tensor([1.0]), torch.tensor([2.0, 3.0])], "rewards_per_token"),
    ([1.0, [2.0, 3.0]], "rewards_mixed"), ([torch.tensor([1.0]), 2.0], "rewards_mixed"),
])
def test_each_rewards_shape_is_one_regime(rewards, kind) -> None:
    kinds = ("rewards_scalar", "rewards_per_token", "rewards_mixed")
    drawn = {k for k in kinds if rl(k, [1, 1], [2, 3], rewards=rewards)}
    assert drawn == {kind}


@pytest.mark.parametrize("rewards", [None, [], 3.0, torch.tensor(1.0)])
def test_no_rewards_rows_is_no_rewards_regime(rewards) -> None:
    for kind in ("rewards_scalar", "rewards_per_token", "rewards_mixed"):
        assert not rl(kind, [1], [2], rewards=rewards)


def test_loss_mask_weights_are_values_other_than_0_and_1() -> None:
    assert rl("loss_mask_weights", [1, 1], [2, 1], loss_masks=[[1, 0], [0.5]])
    assert rl("loss_mask_weights", [1], [2], loss_masks=[torch.tensor([2.0, 1.0])])
    assert rl("loss_mask_weights", [1], [2], loss_masks=[[-1, 1]])
    assert not rl("loss_mask_weights", [1, 1], [2, 1], loss_masks=[[1, 0], [1]])
    assert not rl("loss_mask_weights", [1], [2], loss_masks=[[1.0, 0.0]])
    assert not rl("loss_mask_weights", [1], [2], loss_masks=None)
    assert not rl("loss_mask_weights", [1], [2], loss_masks=[3])  # a row that is no row


def test_layout_and_logprobs() -> None:
    assert rl("two_segment", [1], [1], layout="two_segment")
    assert not rl("two_segment", [1], [1], layout="left")
    assert not rl("two_segment", [1], [1])
    assert rl("logprobs", [1], [1], logprobs=[[0.0]])
    assert rl("logprobs", [1], [1], logprobs=[])
    assert not rl("logprobs", [1], [1])


def test_max_seq_len_against_the_widest_row() -> None:
    # rows of 3 and 5 tokens: the width is 5
    assert rl("max_seq_len_below_width", [1, 2], [2, 3], max_seq_len=4)
    assert not rl("max_seq_len_below_width", [1, 2], [2, 3], max_seq_len=5)
    assert not rl("max_seq_len_below_width", [1, 2], [2, 3], max_seq_len=None)
    assert not rl("max_seq_len_below_width", [], [], max_seq_len=0)
    assert not rl("max_seq_len_below_width", [], [])
    assert rl("max_seq_len_equal_to_width", [1, 2], [2, 3], max_seq_len=5)
    assert rl("max_seq_len_equal_to_width", [3, 2], [2, 0], max_seq_len=5)
    assert not rl("max_seq_len_equal_to_width", [1, 2], [2, 3], max_seq_len=4)
    assert not rl("max_seq_len_equal_to_width", [1, 2], [2, 3], max_seq_len=6)
    assert not rl("max_seq_len_equal_to_width", [0], [0], max_seq_len=0)
    assert rl("max_seq_len_equal_to_width", [1], [0], max_seq_len=1)
    assert not rl("max_seq_len_equal_to_width", [], [], max_seq_len=0)


# --------------------------------------------------------------------------- router replay


def routes(*tokens: int, dtype=torch.int64) -> list[torch.Tensor]:
    return [torch.zeros(n, 2, dtype=dtype) for n in tokens]


def test_routes_partly_captured_is_a_sample_with_fewer_routes_than_tokens() -> None:
    # samples of 3 and 4 tokens
    assert rl("routes_partly_captured", [1, 2], [2, 2], routed_experts=routes(3, 3))
    assert rl("routes_partly_captured", [1, 2], [2, 2], routed_experts=tuple(routes(2, 4)))
    assert rl("routes_partly_captured", [1, 2], [2, 2],
              routed_experts=[None, torch.zeros(1, 2)])
    nested = torch.nested.nested_tensor(routes(3, 3))
    assert rl("routes_partly_captured", [1, 2], [2, 2], routed_experts=nested)
    assert not rl("routes_partly_captured", [1, 2], [2, 2], routed_experts=routes(3, 4))
    assert not rl("routes_partly_captured", [1, 2], [2, 2],
                  routed_experts=torch.nested.nested_tensor(routes(3, 4)))
    assert not rl("routes_partly_captured", [1, 2], [2, 2], routed_experts=[None, None])
    assert not rl("routes_partly_captured", [1, 2], [2, 2], routed_experts=None)
    assert not rl("routes_partly_captured", [1, 2], [2, 2], routed_experts=torch.zeros(7, 2))


def test_routes_given_uint8_and_sample_support() -> None:
    assert rl("routed_experts", [1], [1], routed_experts=routes(2))
    assert rl("routed_experts", [1], [1], routed_experts=[])
    assert not rl("routed_experts", [1], [1])
    assert rl("routes_uint8", [1], [1], routed_experts=routes(2, dtype=torch.uint8))
    assert rl("routes_uint8", [1], [1], routed_experts=[np.zeros((2, 2), dtype=np.uint8)])
    assert rl("routes_uint8", [1], [1],
              routed_experts=torch.nested.nested_tensor(routes(2, 1, dtype=torch.uint8)))
    assert not rl("routes_uint8", [1], [1], routed_experts=routes(2))
    assert rl("routes_uint8", [1], [1], routed_experts=routes(2) + routes(1, dtype=torch.uint8))
    assert not rl("routes_uint8", [1], [1], routed_experts=[np.zeros((2, 2), dtype=np.int16)])
    assert not rl("routes_uint8", [1], [1], routed_experts=[[1, 2]])
    assert not rl("routes_uint8", [1], [1], routed_experts=[])
    assert not rl("routes_uint8", [1], [1])
    assert rl("sample_support", [1], [1], sample_support=[1.0])
    assert not rl("sample_support", [1], [1])


def test_replay_regimes_count_tokens_with_the_function_given() -> None:
    found = regimes.replay_regimes(lambda c: [10, 10])
    given = Call((), {"routed_experts": routes(3, 4)})
    assert found["routes_partly_captured"](given)
    assert not regimes.replay_regimes(lambda c: [3, 4])["routes_partly_captured"](given)
    assert not regimes.replay_regimes(lambda c: [1, 1])["routes_partly_captured"](given)
    assert set(found) == {"routed_experts", "routes_partly_captured", "routes_uint8",
                          "sample_support"}


# --------------------------------------------------------------------------- pack_varlen


def varlen(regime: str, prompts: list[int], responses: list[int], **kwargs) -> bool:
    return holds(VARLEN, regime, rows(prompts), rows(responses), **kwargs)


def test_the_tail_pad_against_the_longest_sample() -> None:
    # samples of 2 and 3 tokens: 5 in all, the longest 3
    assert varlen("tail_pad_short", [1, 1], [1, 2], pad_to_multiple=8)  # tail 3
    assert varlen("tail_pad_short", [1, 1], [1, 2], pad_to_multiple=6)  # tail 1
    assert not varlen("tail_pad_short", [1, 1], [1, 2], pad_to_multiple=9)  # tail 4
    assert not varlen("tail_pad_short", [1, 1], [3, 0], pad_to_multiple=9)  # tail 4, longest 4
    assert not varlen("tail_pad_short", [1, 1], [1, 2], pad_to_multiple=5)  # no tail
    assert not varlen("tail_pad_short", [1, 1], [1, 2])  # the default multiple, 1
    assert not varlen("tail_pad_short", [1, 1], [1, 2], pad_to_multiple=None)
    # samples of 1 token: a tail of 2 is longer than every sample, one of 1 is not
    assert not varlen("tail_pad_short", [1, 1], [0, 0], pad_to_multiple=4)
    assert varlen("tail_pad_short", [1, 1], [0, 0], pad_to_multiple=3)
    assert varlen("tail_pad_longer_than_every_sample", [1, 1], [0, 0], pad_to_multiple=4)
    assert not varlen("tail_pad_longer_than_every_sample", [1, 1], [0, 0], pad_to_multiple=3)
    assert not varlen("tail_pad_longer_than_every_sample", [1, 1], [0, 0], pad_to_multiple=2)
    assert not varlen("tail_pad_longer_than_every_sample", [1, 1], [0, 0],
                      pad_to_multiple=None)
    assert not varlen("tail_pad_longer_than_every_sample", [], [], pad_to_multiple=3)
    assert not varlen("tail_pad_short", [], [], pad_to_multiple=3)


def test_pack_varlen_s_own_regimes() -> None:
    assert varlen("pad_to_multiple_absent", [1], [1])
    assert not varlen("pad_to_multiple_absent", [1], [1], pad_to_multiple=1)
    assert not varlen("pad_to_multiple_absent", [1], [1], pad_to_multiple=None)
    assert varlen("pad_token_id_nonzero", [1], [1], pad_token_id=3)
    assert varlen("pad_token_id_nonzero", [1], [1], pad_token_id=-1)
    assert not varlen("pad_token_id_nonzero", [1], [1], pad_token_id=0)
    assert not varlen("pad_token_id_nonzero", [1], [1])
    assert not varlen("pad_token_id_nonzero", [1], [1], pad_token_id=None)
    assert varlen("empty_response", [1, 1], [2, 0])
    assert not varlen("empty_response", [1, 1], [2, 1])
    assert not varlen("empty_response", [], [])


def test_pack_varlen_draws_no_empty_prompt_regime() -> None:
    found = regimes.regimes(VARLEN)
    assert "every_prompt_empty" not in found
    assert {"every_response_empty", "anti_correlated", "routes_uint8",
            "pad_id_among_tokens"} <= set(found)
    # the replay regimes count each sample's prompt and response tokens
    assert varlen("routes_partly_captured", [1, 2], [2, 2], routed_experts=routes(3, 3))
    assert not varlen("routes_partly_captured", [1, 2], [2, 2], routed_experts=routes(3, 4))


def test_rl_batch_s_replay_regimes_count_prompt_and_response_tokens() -> None:
    assert "every_prompt_empty" in regimes.regimes(RL)
    assert not rl("routes_partly_captured", [2], [1], routed_experts=routes(3))
    assert rl("routes_partly_captured", [2], [2], routed_experts=routes(3))


# --------------------------------------------------------------------------- sft


def examples(*masks: list[float], extra=()) -> list:
    return [{"input_ids": [1] * len(m), "loss_mask": m} for m in masks] + list(extra)


def sft(regime: str, *masks: list[float], normalize=True, extra=()) -> bool:
    return holds("sft.collate_sft", regime, examples(*masks, extra=extra), pad_token_id=0,
                 normalize=normalize)


def test_normalize_is_normalize_true() -> None:
    assert sft("normalize", [1.0])
    assert not sft("normalize", [1.0], normalize=False)
    assert not sft("normalize", [1.0], normalize=1)
    assert not holds("sft.collate_sft", "normalize", examples([1.0]), pad_token_id=0)


def test_a_loss_mask_total_odd_past_2_24() -> None:
    assert sft("total_odd_past_2_24", [2.0**24, 1.0])
    assert sft("total_odd_past_2_24", [2.0**24], [3.0])  # the total over every example
    assert sft("total_odd_past_2_24", [2.0**24, 1.0], extra=["not an example"])
    assert not sft("total_odd_past_2_24", [2.0**24, 2.0])  # even
    assert not sft("total_odd_past_2_24", [2.0**24 - 1])  # odd, not past
    assert not sft("total_odd_past_2_24", [2.0**24 - 2, 1.0])
    assert not sft("total_odd_past_2_24", [2.0**24, 1.0], normalize=False)
    assert not sft("total_odd_past_2_24", [2.0**24, 1.0, math.nan])
    assert not sft("total_odd_past_2_24")


def test_a_total_beyond_float32() -> None:
    big = float(torch.finfo(torch.float32).max)
    assert sft("total_beyond_float32", [big, big / 2**20])
    assert not sft("total_beyond_float32", [big])
    assert not sft("total_beyond_float32", [big, big], normalize=False)
    assert not sft("total_beyond_float32", [big, math.inf])


def test_cancellation_is_a_value_of_2_53_or_more() -> None:
    assert sft("cancellation_2_53", [2.0**53, -(2.0**53)])
    assert sft("cancellation_2_53", [1.0], [-(2.0**53)])
    assert not sft("cancellation_2_53", [2.0**53 - 1, 1.0])
    assert not sft("cancellation_2_53", [2.0**53], normalize=False)
    assert not sft("cancellation_2_53", [2.0**53, math.inf])
    assert not sft("cancellation_2_53")


def test_plus_and_minus_infinity() -> None:
    assert sft("plus_and_minus_inf", [math.inf, 1.0], [-math.inf])
    assert not sft("plus_and_minus_inf", [math.inf, 1.0])
    assert not sft("plus_and_minus_inf", [-math.inf, 1.0])
    assert not sft("plus_and_minus_inf", [math.inf, -math.inf], normalize=False)


def test_a_loss_mask_tensor_is_read_by_its_values() -> None:
    given = [{"input_ids": [1, 1], "loss_mask": torch.tensor([2.0**53, 0.0],
                                                             dtype=torch.float64)}]
    assert holds("sft.collate_sft", "cancellation_2_53", given, pad_token_id=0, normalize=True)


def pack(regime: str, lengths: list[int], **kwargs) -> bool:
    kwargs.setdefault("capacity", 64)
    given = [{"input_ids": [1] * n, "loss_mask": [1] * n} for n in lengths]
    return holds("sft.pack_sft", regime, given, pad_token_id=0, **kwargs)


def test_pack_sft_s_parallel_sizes() -> None:
    for regime, size in (("dp_above_1", "dp_size"), ("tp_above_1", "tp_size"),
                         ("cp_above_1", "cp_size")):
        assert pack(regime, [4], **{size: 2})
        assert not pack(regime, [4], **{size: 1})
        assert not pack(regime, [4], **{size: None})
        assert not pack(regime, [4])
        others = {"dp_size", "tp_size", "cp_size"} - {size}
        assert not pack(regime, [4], **dict.fromkeys(others, 4))
    assert pack("fp8", [4], fp8=True)
    assert not pack("fp8", [4], fp8=False)
    assert not pack("fp8", [4])


def test_every_slot_filled_is_every_example_a_multiple_of_the_alignment() -> None:
    # tp 2: align 2; cp 2: align 4; fp8 tensorwise: 16, blockwise 16, mxfp8 32
    assert pack("every_slot_filled", [2, 4], tp_size=2)
    assert not pack("every_slot_filled", [2, 3], tp_size=2)
    assert pack("every_slot_filled", [4, 8], cp_size=2)
    assert not pack("every_slot_filled", [2, 4], cp_size=2)
    assert pack("every_slot_filled", [16], fp8=True)
    assert pack("every_slot_filled", [32], fp8=True, fp8_recipe="mxfp8")
    assert not pack("every_slot_filled", [16], fp8=True, fp8_recipe="mxfp8")
    assert not pack("every_slot_filled", [3, 5])  # align 1: no slot to fill
    assert not pack("every_slot_filled", [], tp_size=2)
    assert not pack("every_slot_filled", [4], tp_size=None, cp_size=None)
    assert not pack("every_slot_filled", [4], dp_size=4)  # dp does not align


def test_capacity_exact_is_the_longest_example() -> None:
    assert pack("capacity_exact", [3, 5], capacity=5)
    assert not pack("capacity_exact", [3, 5], capacity=6)
    assert not pack("capacity_exact", [3, 5], capacity=3)
    for capacity in (-2, -1, 0, 1, None):  # no example: no longest one to equal
        assert not pack("capacity_exact", [], capacity=capacity)
    assert holds("sft.pack_sft", "capacity_exact", [{"input_ids": [1, 1]}, "x"],
                 pad_token_id=0, capacity=2)


# --------------------------------------------------------------------------- balance


def mb(regime: str, lengths, max_tokens, **kwargs) -> bool:
    return holds("balance.micro_batches", regime, lengths, max_tokens, **kwargs)


def test_budget_is_the_largest_group() -> None:
    assert mb("budget_is_the_largest_group", [3, 5, 2], 5)
    assert not mb("budget_is_the_largest_group", [3, 5, 2], 6)
    assert not mb("budget_is_the_largest_group", [], 0)
    # groups of two: sums 8 and 2
    assert mb("budget_is_the_largest_group", [3, 5, 2], 8, group_size=2)
    assert not mb("budget_is_the_largest_group", [3, 5, 2], 5, group_size=2)
    assert mb("budget_is_the_largest_group", torch.tensor([3, 5, 2]), 5)
    assert mb("budget_is_the_largest_group", [3, 5, 2], 5, group_size=None)  # one per group


def test_a_budget_just_above_total_over_count() -> None:
    # total 12 over counts 2 to 4: a budget from the largest row (3) up to 12/2 + 2
    for budget in (3, 4, 8):
        assert mb("budget_just_above_total_over_count", [3, 3, 3, 3], budget)
    assert not mb("budget_just_above_total_over_count", [3, 3, 3, 3], 9)
    assert not mb("budget_just_above_total_over_count", [3, 3, 3, 3], 2)  # below a row
    # total 13: 13/2 rounds up to 7, so 9 is just above
    assert mb("budget_just_above_total_over_count", [3, 3, 3, 4], 9)
    assert not mb("budget_just_above_total_over_count", [3, 3, 3, 4], 10)
    # groups of two: sums 6 and 7
    assert not mb("budget_just_above_total_over_count", [3, 3, 3, 4], 6, group_size=2)
    assert mb("budget_just_above_total_over_count", [3, 3, 3, 4], 7, group_size=2)
    assert mb("budget_just_above_total_over_count", [3, 3, 3, 4], 9, group_size=2)
    assert not mb("budget_just_above_total_over_count", [3, 3, 3, 4], 10, group_size=2)
    assert not mb("budget_just_above_total_over_count", [3, 3, 3, 3], 8.0)
    assert not mb("budget_just_above_total_over_count", [], 1)


def test_micro_batches_options() -> None:
    assert mb("min_count", [1], 1, min_count=0)
    assert not mb("min_count", [1], 1)
    assert mb("count_multiple", [1], 1, count_multiple=2)
    assert not mb("count_multiple", [1], 1)
    assert mb("groups", [1, 1], 1, group_size=2)
    assert not mb("groups", [1, 1], 1, group_size=1)
    assert not mb("groups", [1, 1], 1, group_size=None)
    assert not mb("groups", [1, 1], 1)


def kk(regime: str, values, k, **kwargs) -> bool:
    return holds("balance.karmarkar_karp", regime, values, k, **kwargs)


def test_karmarkar_karp_s_regimes() -> None:
    assert kk("equal_size", [1, 2], 2, equal_size=True)
    assert not kk("equal_size", [1, 2], 2, equal_size=1)
    assert not kk("equal_size", [1, 2], 2)
    assert kk("k_equals_n", [1, 2, 3], 3)
    assert not kk("k_equals_n", [1, 2, 3], 2)
    assert not kk("k_equals_n", [1], 1)  # one value in one part: no partition
    assert kk("k_equals_n", [1, 2], 2)
    assert kk("k_is_1", [1, 2], 1)
    assert not kk("k_is_1", [1, 2], 2)
    assert kk("ties", [1, 2, 1], 2)
    assert kk("ties", [1, 1.0], 2)
    assert kk("ties", torch.tensor([2, 2]), 2)
    assert not kk("ties", [1, 2, 3], 2)
    assert not kk("ties", [], 2)


# --------------------------------------------------------------------------- trainer, cp


def td(rows_: int, **fields) -> TensorDict:
    out = TensorDict({"input_ids": torch.zeros(rows_, 3, dtype=torch.int64)},
                     batch_size=[rows_])
    for key, value in fields.items():
        out.set(key, NonTensorData(value, batch_size=[rows_]))
    return out


def ptm(regime: str, given, multiple, **kwargs) -> bool:
    return holds("trainer.pad_to_multiple", regime, given, multiple, eos_token_id=2, **kwargs)


def test_pads_rows_or_no_padding_needed() -> None:
    assert ptm("pads_rows", td(3), 2) and not ptm("no_padding_needed", td(3), 2)
    assert ptm("no_padding_needed", td(4), 2) and not ptm("pads_rows", td(4), 2)
    assert ptm("no_padding_needed", td(3), 1)
    for multiple in (0, -2, None, 2.0):
        assert not ptm("pads_rows", td(3), multiple)
        assert not ptm("no_padding_needed", td(3), multiple)
    # no rows to read: 0 rows, which need no padding
    assert ptm("no_padding_needed", "not a TensorDict", 2)
    assert ptm("no_padding_needed", TensorDict({}, batch_size=[]), 2)
    assert not ptm("pads_rows", "not a TensorDict", 2)


def test_two_segment_from_the_keyword_or_the_td() -> None:
    assert ptm("two_segment", td(2), 2, layout="two_segment")
    assert ptm("two_segment", td(2, layout="two_segment"), 2)
    assert not ptm("two_segment", td(2, layout="two_segment"), 2, layout="left")
    assert not ptm("two_segment", td(2, layout="left"), 2)
    assert not ptm("two_segment", td(2), 2)
    assert not ptm("two_segment", "not a TensorDict", 2)


def test_an_odd_min_length_given() -> None:
    assert ptm("odd_min_length", td(2), 2, min_length=3)
    assert not ptm("odd_min_length", td(2), 2, min_length=4)
    assert not ptm("odd_min_length", td(2), 2, min_length=3.0)
    assert not ptm("odd_min_length", td(2), 2)


def rm(regime: str, dp_size, **kwargs) -> bool:
    return holds("trainer.required_multiple", regime, dp_size, **kwargs)


def test_required_multiple_s_regimes() -> None:
    assert rm("critic_only", 1, actor_updates=False, mini_batch_size=2)
    assert not rm("critic_only", 1, actor_updates=False)
    assert not rm("critic_only", 1, actor_updates=0, mini_batch_size=2)
    assert not rm("critic_only", 1, mini_batch_size=2)
    assert rm("actor_with_samples", 1, mini_batch_size=2, n=2)
    assert rm("actor_with_samples", 1, mini_batch_size=2, n=5, actor_updates=True)
    assert not rm("actor_with_samples", 1, mini_batch_size=2, n=2, actor_updates=False)
    assert not rm("actor_with_samples", 1, mini_batch_size=2, n=1)
    assert not rm("actor_with_samples", 1, mini_batch_size=2, n=None)
    assert not rm("actor_with_samples", 1, mini_batch_size=2)
    assert not rm("actor_with_samples", 1, n=2)
    assert rm("dp_above_1", 2)
    assert not rm("dp_above_1", 1)
    assert not rm("dp_above_1", 2.0)


def cp(regime: str, **kwargs) -> bool:
    return holds("cp.pad_for_cp", regime, torch.zeros(4, dtype=torch.int64),
                 torch.tensor([0, 4]), cp_size=2, **kwargs)


def test_pad_for_cp_s_routes() -> None:
    assert cp("routed_experts", routed_experts=torch.zeros(4, 2, dtype=torch.int64))
    assert not cp("routed_experts", routed_experts=[[0, 1]] * 4)
    assert not cp("routed_experts")
    assert cp("routes_uint8", routed_experts=torch.zeros(4, 2, dtype=torch.uint8))
    assert not cp("routes_uint8", routed_experts=torch.zeros(4, 2, dtype=torch.int64))
    assert not cp("routes_uint8")
    assert cp("router_padding_mask", router_padding_mask=torch.ones(4, dtype=torch.bool))
    assert not cp("router_padding_mask", router_padding_mask=[True] * 4)
    assert not cp("router_padding_mask")


# --------------------------------------------------------------------------- the table


def test_every_record_has_its_regimes_and_others_none() -> None:
    assert regimes.records() == list(regimes._BUILDERS)
    assert "sft.ffd_bins" not in regimes.records()
    assert regimes.regimes("sft.ffd_bins") == {}
    assert regimes.regimes("no.such_record") == {}
    for record in regimes.records():
        found = regimes.regimes(record)
        assert found and all(callable(r) for r in found.values())
        assert regimes.regimes(record) is found  # built once
    assert set(regimes.regimes("cp.pad_for_cp")) == {"routed_experts", "router_padding_mask",
                                                     "routes_uint8"}


def test_coverage_draws_four_ci_budgets() -> None:
    assert regimes.default_examples() == 4 * PROFILES["ci"].max_examples


def one_sample(n: int) -> Case:
    """An rl_batch input of one sample with an n-token prompt (n >= 1)."""
    return Case(([[5] * n], [[5]]), {"pad_token_id": 0})


def test_coverage_counts_each_draw_that_reaches_each_regime() -> None:
    singles = st.integers(1, 10**6).map(one_sample)
    counts = regimes.coverage(RL, examples=7, strategy=singles)
    assert set(counts) == set(regimes.regimes(RL))
    assert counts["single_sample"] == 7
    assert counts["all_equal"] == 0 and counts["every_prompt_empty"] == 0
    assert counts["pad_id_among_tokens"] == 0


def test_coverage_draws_the_default_budget_derandomized() -> None:
    drawn = st.integers(1, 10**6).map(one_sample)
    counts = regimes.coverage(RL, strategy=drawn)
    assert counts["single_sample"] == regimes.default_examples()
    mixed = st.integers(0, 3).flatmap(lambda zeros: st.lists(
        st.integers(0, 3), min_size=1, max_size=4)).map(
        lambda lengths: Case((rows(lengths), rows(lengths)), {"pad_token_id": 0}))
    first = regimes.coverage(RL, examples=40, strategy=mixed)
    assert 0 < first["single_sample"] < 40
    assert regimes.coverage(RL, examples=40, strategy=mixed) == first


def test_coverage_draws_the_record_s_own_strategy_by_default() -> None:
    counts = regimes.coverage("balance.karmarkar_karp", examples=12)
    assert set(counts) == set(regimes.regimes("balance.karmarkar_karp"))
    assert sum(counts.values()) > 0


@pytest.fixture
def profile():
    """`settings.load_profile` for the test; the profile it found is loaded back after."""
    current = settings._current_profile
    yield settings.load_profile
    settings.load_profile(current)


def spied(monkeypatch, regime=lambda call: False) -> list:
    """rl_batch's regimes replaced by one that records every input it is asked about."""
    seen = []
    monkeypatch.setitem(regimes.REGIMES, RL, {"spy": lambda c: seen.append(c.args) or regime(c)})
    return seen


WIDE = st.lists(st.integers(0, 10**9), min_size=1, max_size=3).map(
    lambda tokens: Case(([tokens], [[5]]), {"pad_token_id": 0}))


def test_coverage_is_derandomized_under_any_profile(profile, monkeypatch) -> None:
    profile("default")  # Hypothesis' own: randomized
    seen = spied(monkeypatch)
    regimes.coverage(RL, examples=10, strategy=WIDE)
    first, seen[:] = list(seen), []
    regimes.coverage(RL, examples=10, strategy=WIDE)
    assert len(first) == 10 and seen == first


def test_coverage_has_no_deadline_under_any_profile(profile, monkeypatch) -> None:
    profile("default")  # a deadline of 200 ms
    spied(monkeypatch, lambda call: time.sleep(0.25) or True)
    assert regimes.coverage(RL, examples=2, strategy=WIDE) == {"spy": 2}


def test_coverage_runs_no_health_check(profile, monkeypatch) -> None:
    profile("default")
    spied(monkeypatch)
    # about one draw in a hundred passes the filter: Hypothesis' health check would refuse it
    rare = st.integers(10**6, 10**9).filter(lambda n: n % 97 == 0).map(
        lambda n: Case(([[n]], [[5]]), {"pad_token_id": 0}))
    assert regimes.coverage(RL, examples=4, strategy=rare) == {"spy": 0}


def test_uncovered_is_the_regimes_drawn_fewer_than_min_hits(monkeypatch) -> None:
    seen = {}

    def stand_in(record, **options):
        seen.update(record=record, **options)
        return {"never": 0, "once": regimes.MIN_HITS - 1, "enough": regimes.MIN_HITS,
                "often": 99}

    monkeypatch.setattr(regimes, "coverage", stand_in)
    assert regimes.uncovered(RL, examples=3) == ["never", "once"]
    assert seen == {"record": RL, "examples": 3}

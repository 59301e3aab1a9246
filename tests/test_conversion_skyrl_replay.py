"""`skyrl.rl_batch_replay_0_4`'s conversion (harness/adapters/skyrl_replay.py) without SkyRL:
the packed routes and support laid out as the contract's left layout, the entries handed over
as NumPy, the predicates of its known divergences, and the inputs it draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from batchproof.adapters import Call, skyrl_replay
from batchproof.adapters.skyrl_replay import (
    as_numpy,
    bad_skyrl_replay_cases,
    routes_laid_out,
    skyrl_replay_cases,
    support_laid_out,
)
from batchproof.reference.rl_batch import build_rl_batch
from batchproof.registry import BadCase, Case


class Packed:
    """SkyRL's PackedTensor as the adapter reads it."""

    def __init__(self, rows: list[list], dtype: torch.dtype, trailing: tuple[int, ...]) -> None:
        self.values = torch.tensor([r for seg in rows for r in seg], dtype=dtype).reshape(
            -1, *trailing)
        lengths = [0] + [len(seg) for seg in rows]
        self.cu_seqlens = torch.tensor(np.cumsum(lengths), dtype=torch.int32)


def test_routes_go_on_the_last_columns_and_pads_get_the_dummy() -> None:
    """Segment i right-aligned in row i; the columns before it hold 0 .. K-1, in its dtype."""
    packed = Packed([[[[3, 4]]], [[[5, 6]], [[7, 8]]]], torch.int16, (1, 2))
    attention = torch.tensor([[0, 0, 1], [0, 1, 1]])
    out = routes_laid_out(packed, attention)
    assert out.dtype == torch.int16 and tuple(out.shape) == (2, 3, 1, 2)
    assert out[:, :, 0].tolist() == [[[0, 1], [0, 1], [3, 4]], [[0, 1], [5, 6], [7, 8]]]


def test_support_goes_on_the_last_response_columns_and_minus_one_elsewhere() -> None:
    packed = Packed([[], [[9, -1]], [[1, 2], [3, -1]]], torch.int32, (2,))
    out = support_laid_out(packed, torch.zeros(3, 2))
    assert out.dtype == torch.int32
    assert out.tolist() == [[[-1, -1], [-1, -1]], [[-1, -1], [9, -1]], [[1, 2], [3, -1]]]


def test_torch_entries_are_handed_over_as_numpy_and_the_rest_as_given() -> None:
    entries = [torch.zeros((1, 1, 1), dtype=torch.int16), np.ones((1, 1, 1), np.uint8), None]
    out = as_numpy(entries)
    assert isinstance(out[0], np.ndarray) and out[0].dtype == np.int16
    assert out[1] is entries[1] and out[2] is None
    dense = torch.zeros((1, 1, 1, 1))
    assert as_numpy(dense) is dense and as_numpy(None) is None


def _call(**kwargs) -> Call:
    return Call.of(Case(([[1]], [[2]]), {"pad_token_id": 0, **kwargs}), build_rl_batch)


def _bad_call(why: str = "routed_experts[0] is bad", **kwargs) -> Call:
    return Call.of(BadCase(Case(([[1]], [[2]]), {"pad_token_id": 0, **kwargs}), ValueError, why),
                   build_rl_batch)


def test_each_predicate_matches_its_input() -> None:
    """Each predicate on the smallest input of its divergence, and not on a clean one."""
    clean = dict(routed_experts=[np.zeros((2, 1, 1), np.uint8)],
                 sample_support=[np.full((1, 1), -1, np.int32)])
    cases = {
        "has_int64_routes": dict(routed_experts=[np.zeros((1, 1, 1), np.int64)]),
        "has_uncaptured_sample": dict(routed_experts=[np.zeros((0, 1, 1), np.uint8)]),
        "has_support_not_int32": dict(sample_support=[torch.full((1, 1), -1, dtype=torch.int16)]),
        "has_none_entry": dict(sample_support=[None]),
        "has_mixed_route_dtypes": dict(routed_experts=[np.zeros((1, 1, 1), np.uint8),
                                                       np.zeros((1, 1, 1), np.int16)]),
        "has_negative_route": dict(routed_experts=[np.full((1, 1, 1), -1, np.int16)]),
        "has_bad_support_id": dict(sample_support=[np.array([[-2]], np.int32)]),
    }
    for name, kwargs in cases.items():
        predicate = getattr(skyrl_replay, name)
        assert predicate(_bad_call(**kwargs)), name
        assert not predicate(_bad_call(**clean)), name
    refused = _bad_call(routed_experts=[np.zeros((1, 1, 1), np.float32)])
    assert skyrl_replay.has_route_dtype_refused(refused)
    assert not skyrl_replay.has_route_dtype_refused(_bad_call(  # another argument's defect
        "rewards[0] has the wrong length", routed_experts=[np.zeros((1, 1, 1), np.float32)]))
    assert not skyrl_replay.has_route_dtype_refused(_call(routed_experts=[
        np.zeros((1, 1, 1), np.int64)]))  # a valid int64 input is int64_routes_refused's
    after = _bad_call(sample_support=[np.array([[-1, 4]], np.int32)])
    assert skyrl_replay.has_bad_support_id(after)
    assert not skyrl_replay.has_bad_support_id(_bad_call(sample_support=[
        np.array([[4, -1]], np.int32)]))
    assert not skyrl_replay.has_mixed_route_dtypes(_bad_call(routed_experts=[
        np.zeros((1, 1, 1), np.uint8), np.zeros((1, 1, 1), np.int64)]))  # refused by value


def test_the_replaying_left_layout_is_the_domain() -> None:
    routes = [np.zeros((1, 1, 1), np.uint8)]
    assert skyrl_replay.left_layout_replaying(_call(routed_experts=routes))
    assert not skyrl_replay.left_layout_replaying(_call())
    assert not skyrl_replay.left_layout_replaying(_call(routed_experts=routes,
                                                        layout="two_segment"))


QUICK = settings(max_examples=25, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow])


@QUICK
@given(case=skyrl_replay_cases())
def test_the_valid_inputs_are_what_skyrl_takes(case: Case) -> None:
    prompts, responses = case.args
    assert all(len(p) + len(r) > 0 for p, r in zip(prompts, responses))
    for entry in case.kwargs["routed_experts"]:
        assert isinstance(entry, np.ndarray) and entry.dtype in skyrl_replay.ROUTE_DTYPES
        assert entry.shape[0] >= 1
    for entry in case.kwargs.get("sample_support") or []:
        assert isinstance(entry, np.ndarray) and entry.dtype == np.int32
    rewards = case.kwargs.get("rewards")
    assert rewards is None or all(isinstance(r, list) for r in rewards)
    build_rl_batch(*case.args, **case.kwargs)  # valid for the contract


@QUICK
@given(bad=bad_skyrl_replay_cases())
def test_the_invalid_inputs_raise_the_contracts_error(bad: BadCase) -> None:
    with pytest.raises(bad.raises):
        build_rl_batch(*bad.case.args, **bad.case.kwargs)

"""`pipeline` tests beyond the generic registry checks (tests/test_registry.py, tests/test_zoo.py):
the example's literal ledger shape, the trace's stages, and `batchproof show`'s drawing."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from batchproof import registry
from batchproof.checks import run_check
from batchproof.compare import assert_identical
from batchproof.impl import pipeline as impl
from batchproof.models import ModelSpec
from batchproof.mutation import zoo
from batchproof.mutation.zoo import planted
from batchproof.ops.pipeline import (
    BASE,
    EXAMPLE,
    MODEL,
    ROUTES,
    assert_same_step,
    model_dtype,
    step_case,
)
from batchproof.reference import pipeline as reference
from batchproof.reference.nesting import DenseFieldError
from batchproof.reference.pipeline import LEDGER_KEYS, REPLAY_LEDGER_KEYS


def test_example_ledger() -> None:
    """10 response tokens (9 real + 1 of the padding row), padding row 5, rank and micro-batch
    of every entry equal in both chains."""
    expected = EXAMPLE.call(reference.rl_step)
    actual = EXAMPLE.call(impl.rl_step)
    assert expected.batch_size[0] == 10
    assert actual["sample"][actual["is_padding"]].tolist() == [5]
    assert torch.equal(expected["rank"], actual["rank"])
    assert torch.equal(expected["micro_batch"], actual["micro_batch"])


def test_trace_stages() -> None:
    trace = EXAMPLE.call(impl.trace_rl_step)
    assert list(trace) == ["left", "two_segment", "padded", "ranks", "dispatch",
                           "micro_batches", "ledger"]
    assert trace["left"].get_non_tensor("layout") == "left"
    assert trace["two_segment"].get_non_tensor("layout") == "two_segment"
    assert trace["padded"].batch_size[0] == 6
    assert sorted(r for rows in trace["ranks"] for r in rows) == list(range(6))


def test_reference_trace_matches() -> None:
    ref = EXAMPLE.call(reference.trace_rl_step)
    ours = EXAMPLE.call(impl.trace_rl_step)
    assert ref["ranks"] == ours["ranks"]
    assert ref["micro_batches"] == ours["micro_batches"]


def test_no_padding_without_multiple() -> None:
    out = step_case(*BASE, dp_size=1, max_tokens=20).call(impl.rl_step)
    assert not bool(out["is_padding"].any())


def test_show_draws_every_stage() -> None:
    info = registry.get("pipeline.rl_step")
    lines = info.show(info.example, info.example.call(info.reference))
    text = "\n".join(lines)
    for stage in ("layout='left'", "two-segment", "pad_to_multiple", "balanced_partitions",
                  "rank 0", "ledger"):
        assert stage in text


# --------------------------------------------------------------------------- mutation kills


def _with_forward_widths(call: Callable[[torch.nn.Module], Any]) -> tuple[Any, list[int]]:
    """`call(model)` on the shared tiny model, and the width of every packed row it forwarded."""
    model = MODEL.build()
    widths: list[int] = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: widths.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    try:
        return call(model), widths
    finally:
        hook.remove()


def _packed_widths(trace: dict, sp_size: int) -> list[int]:
    """One forward per micro-batch (of `trace`): its scored rows' tokens (rows with a response),
    padded to a multiple of sp_size; a micro-batch without a response token is not forwarded."""
    padded = trace["padded"]
    attention = padded["attention_mask"]
    tokens = attention.sum(1).tolist()
    answered = attention[:, -padded.get_non_tensor("max_response_length"):].sum(1).tolist()
    totals = [sum(tokens[s] for s in batch if answered[s])
              for rank in trace["micro_batches"] for batch in rank]
    return [-(-total // sp_size) * sp_size for total in totals if total]


def test_one_packed_forward_per_micro_batch() -> None:
    """Each micro-batch is one packed forward within max_tokens (not re-split by varlen's own
    default budget), padded to a multiple of sp_size: rows 0-3 hold 22 tokens, padded to 24."""
    trace, widths = _with_forward_widths(
        lambda model: impl.trace_rl_step(model, *BASE, max_tokens=30, sp_size=3))
    assert trace["micro_batches"] == [[[0, 1, 2, 3, 4]]]
    assert widths == _packed_widths(trace, 3) == [24]


def test_defaults_match_reference() -> None:
    """rl_step and trace_rl_step called with only max_tokens (and mini_batch_size, so that a
    padding row is added) use the reference's defaults: dp_size=1, sp_size=1 (forwards of the
    micro-batches' exact token counts), pad_token_id=0, eos_token_id=1."""
    args = dict(max_tokens=12, mini_batch_size=3)
    expected = reference.trace_rl_step(MODEL.build(), *BASE, **args)
    trace, trace_widths = _with_forward_widths(
        lambda model: impl.trace_rl_step(model, *BASE, **args))
    ledger, ledger_widths = _with_forward_widths(lambda model: impl.rl_step(model, *BASE, **args))
    for key in ("left", "two_segment", "padded"):
        assert_identical(expected[key], trace[key])
    assert trace["ranks"] == expected["ranks"]
    assert trace_widths == ledger_widths == _packed_widths(expected, 1) == [5, 11, 8]
    assert_same_step(expected["ledger"], trace["ledger"])
    assert_same_step(expected["ledger"], ledger)


@pytest.mark.parametrize("bad", [dict(pad_token_id=None), dict(eos_token_id=None),
                                 dict(sp_size=0), dict(mini_batch_size=2.5)])
def test_config_checked_like_reference(bad: dict) -> None:
    """rl_step hands every config argument on: an invalid one raises the reference's error."""
    case = step_case(*BASE, max_tokens=20, **bad)
    with pytest.raises((TypeError, ValueError)) as expected:
        case.call(reference.rl_step)
    with pytest.raises(expected.type) as actual:
        case.call(impl.rl_step)
    assert str(actual.value) == str(expected.value)


def test_boolean_scores_read_as_float32() -> None:
    """Pass/fail (bool) scores give the float32 advantages of the scores 1.0 and 0.0."""
    prompts, responses, masks, traj_ids, _ = BASE
    config = dict(dp_size=1, mini_batch_size=None, max_tokens=20, sp_size=1, pad_token_id=0,
                  eos_token_id=1)
    steps = [impl.Step(None, prompts, responses, masks, traj_ids, scores, **config)
             for scores in ([True, False], [1.0, 0.0])]
    (_, bools), (_, floats) = (impl.layout_and_advantages(step) for step in steps)
    assert_identical(floats, bools)
    assert bools["advantages"].dtype == torch.float32


def test_stages_receive_the_chain_values() -> None:
    """Swapped stages (`STAGES.replace`, as the bug zoo does) get the chain's values: scale the
    padded batch, weight_mask each rank's chunk and its response lengths; the ledger's weight
    is float32 whatever dtype the stages return (float64 here)."""
    seen: dict[str, list] = {"scale": [], "weight_mask": []}

    def scale(step: impl.Step, padded: TensorDict) -> torch.Tensor:
        seen["scale"].append(padded)
        return torch.tensor(0.125, dtype=torch.float64)

    def weight_mask(chunk: TensorDict, fields: TensorDict, response_lengths: torch.Tensor):
        seen["weight_mask"].append((chunk, response_lengths))
        return impl.weight_mask(chunk, fields, response_lengths).double()

    stages = impl.STAGES.replace(scale=scale, weight_mask=weight_mask)
    assert (stages.scale, stages.weight_mask, stages.pad) == (scale, weight_mask, impl.pad)
    trace = EXAMPLE.call(functools.partial(impl.run_step, stages))
    assert len(seen["scale"]) == 1 and seen["scale"][0] is trace["padded"]
    assert len(seen["weight_mask"]) == len(trace["dispatch"]) == 2
    for chunk, (got, lengths) in zip(trace["dispatch"], seen["weight_mask"]):
        assert got is chunk
        assert torch.equal(lengths, chunk["responses"].offsets().diff())
    ledger, masks = trace["ledger"], BASE[2]
    assert ledger["weight"].dtype == torch.float32
    assert ledger["weight"].tolist() == [
        masks[s][j] * 0.125 if s < len(masks) else 0.0
        for s, j in zip(ledger["sample"].tolist(), ledger["position"].tolist())]


def test_no_rank_gives_empty_ledger() -> None:
    """Stages that dispatch to no rank leave an empty ledger with the reference's columns and
    dtypes, loss 0.0 and the real row count."""
    expected = EXAMPLE.call(reference.rl_step)
    empty = impl.STAGES.replace(rank_bounds=lambda ranks: [])
    ledger = EXAMPLE.call(functools.partial(impl.run_step, empty))["ledger"]
    assert ledger.batch_size == torch.Size([0])
    assert {k: ledger[k].dtype for k in LEDGER_KEYS} == {k: expected[k].dtype for k in LEDGER_KEYS}
    assert ledger.get_non_tensor("loss") == 0.0
    assert ledger.get_non_tensor("real_rows") == 5


def test_dispatch_refuses_dense_fields() -> None:
    """Dispatch nests strictly: a dense sequence field without a nesting rule is an error, not
    a warning (nothing dense reaches the ranks)."""

    def pad_with_dense_field(step: impl.Step, batch: TensorDict) -> TensorDict:
        padded = impl.pad(step, batch).clone()
        padded["dense_extra"] = torch.zeros(padded["input_ids"].shape)
        return padded

    stages = impl.STAGES.replace(pad=pad_with_dense_field)
    with pytest.raises(DenseFieldError, match="dense_extra"):
        EXAMPLE.call(functools.partial(impl.run_step, stages))


def test_dispatch_marks_padding_as_bool() -> None:
    """Without padding rows, the dispatched chunks still carry a bool is_padding (all False)."""
    trace = step_case(*BASE, dp_size=1, max_tokens=20).call(impl.trace_rl_step)
    assert "is_padding" not in trace["padded"].keys()
    for chunk in trace["dispatch"]:
        assert chunk["is_padding"].dtype == torch.bool
        assert not bool(chunk["is_padding"].any())


# --------------------------------------------------------------------------- router replay


def replayed(dtype: torch.dtype = torch.int16, **kwargs):
    support = [torch.arange(2 * len(r), dtype=torch.int32).reshape(-1, 2) for r in BASE[1]]
    return step_case(*BASE, routed_experts=[r.to(dtype) for r in ROUTES],
                     sample_support=support, **{"dp_size": 2, "mini_batch_size": 3,
                                                "max_tokens": 9, **kwargs})


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32, torch.int64])
def test_ledger_replay_columns_keep_their_dtype_in_both_chains(dtype: torch.dtype) -> None:
    """The example with routes and support: both chains give each entry the same route, mask
    and support, in the given dtypes; row 3's last response token (uncaptured, the last
    sampled token) and the padding row 5 hold the dummy route, masked."""
    case = replayed(dtype)
    expected, actual = case.call(reference.rl_step), case.call(impl.rl_step)
    for key in REPLAY_LEDGER_KEYS:
        assert expected[key].dtype == actual[key].dtype
        assert torch.equal(expected[key], actual[key]), key
    assert actual["routed_experts"].dtype == dtype
    assert actual["sample_support"].dtype == torch.int32
    entries = list(zip(actual["sample"].tolist(), actual["position"].tolist()))
    masked = {e for e, m in zip(entries, actual["router_padding_mask"].tolist()) if m}
    assert masked == {(0, 1), (1, 3), (2, 0), (3, 1), (5, 0)}
    row3 = entries.index((3, 0))
    assert actual["routed_experts"][row3].tolist() == [[5, 6], [6, 7]]  # token 5 of row 3


def test_ledger_without_replay_has_no_replay_column() -> None:
    assert not set(REPLAY_LEDGER_KEYS) & set(EXAMPLE.call(impl.rl_step).keys())
    assert not set(REPLAY_LEDGER_KEYS) & set(EXAMPLE.call(reference.rl_step).keys())


def test_empty_ledger_keeps_replay_shapes() -> None:
    """No rank dispatched: the replay columns are still there, (0, layers, topk) and (0, top_k)
    in their dtypes."""
    empty = impl.STAGES.replace(rank_bounds=lambda ranks: [])
    ledger = replayed(torch.uint8).call(functools.partial(impl.run_step, empty))["ledger"]
    assert ledger["routed_experts"].shape == (0, 2, 2)
    assert ledger["routed_experts"].dtype == torch.uint8
    assert ledger["sample_support"].shape == (0, 2)


@pytest.mark.parametrize("bad, error, match", [
    (dict(routed_experts=ROUTES[:-1]), ValueError, "routed_experts"),
    (dict(routed_experts=[*ROUTES[:2], torch.zeros(9, 2, 2, dtype=torch.int16), *ROUTES[3:]]),
     ValueError, r"routed_experts\[2\]"),
    (dict(routed_experts=[r.float() for r in ROUTES]), TypeError, "routed_experts"),
])
def test_bad_routes_raise_the_same_error_in_both_chains(bad, error, match) -> None:
    case = step_case(*BASE, max_tokens=20, **bad)
    for chain in (reference.rl_step, impl.rl_step):
        with pytest.raises(error, match=match):
            case.call(chain)


def test_to_canonical_docstring_example() -> None:
    """W = 3, R = 4: `. a b` → `a b . .` and `c d e` → `c d e .`, +0.0 off the response."""
    logprobs = torch.tensor([[0.0, -1.0, -2.0], [-3.0, -4.0, -5.0]])
    values, valid = impl.to_canonical(logprobs, torch.tensor([2, 3]), 4)
    assert_identical(torch.tensor([[-1.0, -2.0, 0.0, 0.0], [-3.0, -4.0, -5.0, 0.0]]), values)
    assert valid.tolist() == [[True, True, False, False], [True, True, True, False]]


# --------------------------------------------------------------------------- CUDA, bfloat16


def bf16_record(device: str = "cuda"):
    """pipeline.rl_step with every drawn and pinned step's model in bfloat16 on `device`: on
    CUDA, the reference's dense per-sample forwards against the impl's packed ones, compared
    with the bfloat16 logprob tolerance (`ops.pipeline.model_dtype`)."""
    info = registry.get("pipeline.rl_step")

    def moved(case):
        spec = case.model
        return dataclasses.replace(case, model=ModelSpec(spec.arch, spec.attn, "bfloat16",
                                                         device))

    pins = [dataclasses.replace(pin, case=moved(pin.case)) for pin in info.pins]
    return dataclasses.replace(info, valid=info.valid.map(moved), pins=pins)


@pytest.mark.gpu
@pytest.mark.parametrize("check", registry.get("pipeline.rl_step").check_names())
def test_rl_step_in_bfloat16_on_cuda(check: str) -> None:
    run_check(bf16_record("cuda"), check, device="cuda")


def test_bf16_record_keeps_every_check_and_moves_only_the_model() -> None:
    """The CUDA bfloat16 variant has the record's checks, and its cases differ only in the
    model (so the test above is the record's property in bfloat16, not another one)."""
    info, variant = registry.get("pipeline.rl_step"), bf16_record("cuda")
    assert variant.check_names() == info.check_names()
    for pin, moved in zip(info.pins, variant.pins):
        assert moved.case.args == pin.case.args and moved.case.kwargs == pin.case.kwargs
        assert moved.case.model == ModelSpec(pin.case.model.arch, pin.case.model.attn,
                                             "bfloat16", "cuda")
    assert model_dtype(variant.pins[0].case) == torch.bfloat16
    assert model_dtype(info.pins[0].case) == torch.float32


@pytest.mark.parametrize("entry, check", [
    ("pipeline_padding_rows_in_loss", "pin:padding_rows"),
    ("pipeline_local_width", "pin:local_width"),
])
def test_bf16_record_still_catches_planted_bugs(entry: str, check: str) -> None:
    """The bfloat16 tolerance is wide (2e-2 per logprob): the bfloat16 variant, here on the
    CPU, still fails on planted bugs of the zoo (so the CUDA test above can fail)."""
    with planted(zoo.get(entry)), pytest.raises(AssertionError):
        run_check(bf16_record("cpu"), check)

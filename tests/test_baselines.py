"""The benchmark baselines (`harness.baselines`) produce the ops' outputs bit for bit: a baseline
that computed something else would make `harness bench`'s comparison meaningless."""

from __future__ import annotations

import pytest
import torch

from batchproof import blocks as hs
from batchproof.impl import rl_batch, sft
from batchproof.perf import baselines
from batchproof.perf.workloads import SFT_PACK_CONFIG, rl_batch_inputs, sft_inputs, sft_jagged


def _assert_same(expected, actual: dict) -> None:
    for key, value in actual.items():
        assert value.dtype == expected[key].dtype, key
        assert torch.equal(value.view(torch.int32) if value.dtype == torch.float32 else value,
                           expected[key].view(torch.int32) if value.dtype == torch.float32
                           else expected[key]), key


@pytest.mark.parametrize("form", ["lists", "jagged"])
@pytest.mark.parametrize("seed", [0, 1])
def test_numpy_rows_rl_batch_equals_the_op(form: str, seed: int) -> None:
    prompts, responses, per_token = rl_batch_inputs(48, seed, prompt=(0, 30), response=(0, 40))
    expected = rl_batch.build_rl_batch(prompts, responses, pad_token_id=3, **per_token)
    if form == "jagged":
        prompts, responses = hs.jagged(prompts, torch.int64), hs.jagged(responses, torch.int64)
        per_token = {k: hs.jagged(v, torch.float32) for k, v in per_token.items()}
    actual = baselines.numpy_rows_rl_batch(prompts, responses, pad_token_id=3, **per_token)
    assert set(actual) == {k for k in expected.keys() if not expected.is_non_tensor(k)}
    _assert_same(expected, actual)


@pytest.mark.parametrize("form", ["lists", "tensors", "jagged"])
def test_numpy_rows_pack_sft_equals_the_op(form: str) -> None:
    examples = sft_inputs(40, seed=2, length=(1, 300), as_tensors=form != "lists")
    if form == "jagged":
        examples = sft_jagged(examples)
    config = SFT_PACK_CONFIG | {"capacity": 1024}
    expected = sft.pack_sft(examples, pad_token_id=5, **config)
    actual = baselines.numpy_rows_pack_sft(examples, pad_token_id=5, **config)
    _assert_same(expected, actual)

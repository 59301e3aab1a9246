"""`trainer` beyond the generic registry checks: identity when no padding is needed, a real
masked loss over a padded batch, the no-response-columns case, error messages, and CUDA."""

from __future__ import annotations

import pytest
import torch

import impl.trainer as impl
import reference.trainer as ref
from harness.compare import assert_identical
from reference.rl_batch import build_rl_batch

MODULES = pytest.mark.parametrize("module", [ref, impl], ids=["reference", "impl"])


def _batch(**kwargs):
    return build_rl_batch([[1, 2, 3], [4], [5, 6]], [[7, 8], [9, 10, 11], [12]], pad_token_id=0,
                          rewards=[[0.5, -1.0], [1.0, 2.0, -3.0], [4.0]], **kwargs)


@MODULES
def test_no_padding_needed_returns_the_input(module) -> None:
    td = _batch()
    assert module.pad_to_multiple(td, 3, eos_token_id=2) is td
    assert "is_padding" not in td.keys()
    assert module.real_rows(td) is td


@MODULES
@pytest.mark.parametrize("layout", ["left", "two_segment"])
def test_padding_rows_add_nothing_to_a_masked_loss(module, layout) -> None:
    """A token-level policy-gradient loss summed over the padded batch equals the loss over the
    real rows: every padding term is exactly 0 (not -0.0, not a tiny number)."""
    td = _batch(layout=layout)
    td.set("advantages", torch.tensor([[-0.0, -2.5, 1.0], [3.0, -1.0, 0.25], [-7.0, 1.0, 2.0]]))
    padded = module.pad_to_multiple(td, 8, eos_token_id=2, min_length=4)
    loss = -(padded["advantages"] * padded["rewards"] * padded["loss_mask"])
    padding_terms = loss[padded["is_padding"]]
    assert torch.equal(padding_terms.abs().sum(), torch.tensor(0.0))
    real = module.real_rows(padded)
    assert_identical(td, real.exclude("is_padding"))
    assert loss.sum() == -(td["advantages"] * td["rewards"] * td["loss_mask"]).sum()


@MODULES
def test_batch_without_response_columns_pads_with_prompt_tokens(module) -> None:
    td = build_rl_batch([[1, 2], [3]], [[], []], pad_token_id=0)
    out = module.pad_to_multiple(td, 3, eos_token_id=5)
    assert out["input_ids"][-1].tolist() == [5, 5]
    assert out["response_mask"].shape == (3, 0)


@MODULES
@pytest.mark.parametrize("call, error, words", [
    (lambda m, td: m.pad_to_multiple(td, 0, eos_token_id=2), ValueError, ["multiple"]),
    (lambda m, td: m.pad_to_multiple(td.exclude("layout"), 2, eos_token_id=2), ValueError,
     ["layout"]),
    (lambda m, td: m.pad_to_multiple(td, 2, eos_token_id=2, min_length=9), ValueError,
     ["min_length=9", "wider"]),
    (lambda m, td: m.pad_to_multiple(_with_uids(td), 2, eos_token_id=2), ValueError, ["uids"]),
    (lambda m, td: m.broadcast_stepwise_advantages([1.0], [0, 1, 0], td["response_mask"]),
     ValueError, ["traj_ids[1]=1"]),
    (lambda m, td: m.required_multiple(2, mini_batch_size=0), ValueError, ["mini_batch_size"]),
])
def test_bad_input_names_the_culprit(module, call, error, words) -> None:
    with pytest.raises(error) as info:
        call(module, _batch())
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def _with_uids(td):
    td.set_non_tensor("uids", ["a", "b", "c"])
    return td


@MODULES
def test_required_multiple_spec_example(module) -> None:
    assert module.required_multiple(2, mini_batch_size=15, n=8) == 120


@pytest.mark.gpu
def test_pad_and_broadcast_on_cuda() -> None:
    td = _batch().to("cuda")
    out = impl.pad_to_multiple(td, 4, eos_token_id=2)
    assert_identical(ref.pad_to_multiple(td, 4, eos_token_id=2), out)
    assert out["is_padding"].device.type == "cuda"
    adv = impl.broadcast_stepwise_advantages(torch.tensor([1.0, -2.0], device="cuda"),
                                             torch.tensor([0, 1, 1], device="cuda"),
                                             td["response_mask"])
    assert adv.device.type == "cuda"
    assert adv.cpu().tolist() == [[0.0, 1.0, 1.0], [-2.0, -2.0, -2.0], [0.0, 0.0, -2.0]]

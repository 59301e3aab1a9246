"""`nesting` behaviour the generic registry checks do not cover: the rules table against the
spec, the coverage warning, the payload of a verl-shaped batch, the `show` drawing, CUDA.

The equivalence, error-parity, property and pin checks of every `nesting` record run in
tests/test_registry.py; the bug zoo in tests/test_zoo.py.
"""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest
import torch

import impl.nesting as impl
import reference.nesting as reference
from harness.compare import assert_identical
from harness.ops import nesting as ops

pytestmark = pytest.mark.filterwarnings("error::UserWarning")


def _spec_table() -> dict:
    return {name: (mask, reference.PAD_TOKEN_ID if pad == ops.PAD else pad)
            for name, (mask, pad) in ops.SPEC_RULES.items()}


def test_default_rules_are_the_spec_table() -> None:
    assert dict(reference.DEFAULT_RULES) == _spec_table()
    assert impl.DEFAULT_RULES is reference.DEFAULT_RULES


def test_pad_token_sentinel_survives_copy_and_pickle() -> None:
    sentinel = reference.PAD_TOKEN_ID
    assert copy.deepcopy(sentinel) is sentinel
    assert pickle.loads(pickle.dumps(sentinel)) is sentinel
    assert repr(sentinel) == "PAD_TOKEN_ID"


@pytest.mark.parametrize("module", [reference, impl], ids=["reference", "impl"])
def test_dense_field_is_reported(module) -> None:
    td = ops.example_batch()
    td[ops.EXTRA_DENSE] = torch.zeros(td["input_ids"].shape)
    with pytest.warns(UserWarning, match=rf"{ops.EXTRA_DENSE} \(3, 8\) torch.float32 96 bytes"):
        module.nest_by_mask(td, pad_token_id=0)
    with pytest.raises(module.DenseFieldError, match=ops.EXTRA_DENSE):
        module.nest_by_mask(td, pad_token_id=0, strict=True)
    assert issubclass(module.DenseFieldError, RuntimeError)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module.nest_by_mask(td, pad_token_id=0, strict=True, ignore_dense=[ops.EXTRA_DENSE])


@pytest.mark.parametrize("module", [reference, impl], ids=["reference", "impl"])
def test_rule_none_keeps_a_field_dense_and_masks_win(module) -> None:
    td = ops.example_batch()
    nested = module.nest_by_mask(td, pad_token_id=0, rules={"loss_mask": None},
                                 ignore_dense=["loss_mask"])
    assert not nested["loss_mask"].is_nested
    # verl's registration: responses by response_mask, which then is a mask, not a field
    verl = module.nest_by_mask(td, pad_token_id=0, rules={"responses": ("response_mask", 0)})
    assert "response_mask" not in verl.keys() and "response_mask_offsets" in verl.keys()
    assert verl["responses"][0].tolist() == [13, 15, 16]  # the tool token 14 is dropped
    assert_identical(module.unnest_by_mask(verl)["response_mask"], td["response_mask"])


def test_chunks_unnest_and_concatenate_back() -> None:
    nested = impl.nest_by_mask(ops.chunk_width_batch(), pad_token_id=0)
    pieces = [impl.unnest_by_mask(c) for c in impl.chunk_nested(nested, 3)]
    whole = impl.unnest_by_mask(nested)
    for key in ("input_ids", "responses", "attention_mask", "loss_mask"):
        assert_identical(whole[key], torch.cat([p[key] for p in pieces]))
    widths = {impl.pad_to_response_width(c, "responses")["responses"].shape[1]
              for c in impl.chunk_nested(nested, 3)}
    assert widths == {12}


def test_verl_shaped_batch_reaches_the_ceiling() -> None:
    """32 rows at verl's widths (P = 2048, R = 14336) and ~8% fill."""
    generator = torch.Generator().manual_seed(0)
    prompts, responses = ops.verl_like_lengths(32, 2048, 14336, 0.08, generator)
    dense = ops.synthetic_verl_batch(prompts, responses, max_prompt=2048, max_response=14336,
                                     generator=generator)
    nested = impl.nest_by_mask(dense, pad_token_id=0, strict=True)
    report = impl.payload_report(dense, nested)
    assert report.efficiency >= 0.99, report
    assert report.compression > 9 and report.wire_bytes_nested < report.wire_bytes_dense / 9
    assert_identical(impl.unnest_by_mask(nested), ops.masked_input(
        ops.Case((dense,), {"pad_token_id": 0})))


def test_show_draws_dense_and_nested_rows() -> None:
    lines = ops.draw(ops.example_batch())
    assert lines[0].startswith("dense batch: B=3, P=3, R=4, S=8")
    assert "row 0  .pp|rtrr." in lines[1]
    assert any("attention runs (start, length) [(1, 6)]" in line for line in lines)
    assert ops.picture(ops.example_batch())["response"][0] == "rtrr."


@pytest.mark.gpu
def test_impl_on_cuda_matches_cpu() -> None:
    generator = torch.Generator().manual_seed(1)
    prompts, responses = ops.verl_like_lengths(16, 256, 2048, 0.1, generator)
    dense = ops.synthetic_verl_batch(prompts, responses, max_prompt=256, max_response=2048,
                                     generator=generator)
    cpu = impl.nest_by_mask(dense, pad_token_id=0)
    cuda = impl.nest_by_mask(dense.to("cuda"), pad_token_id=0)
    assert_identical(cpu, cuda, allow_device=True)
    assert_identical(impl.unnest_by_mask(cpu), impl.unnest_by_mask(cuda), allow_device=True)
    output = torch.randn(int(dense["attention_mask"].sum()), generator=generator)
    assert_identical(impl.extract_response(cpu, output),
                     impl.extract_response(cuda, output.cuda()), allow_device=True)

"""`varlen` tests beyond the generic registry checks (tests/test_registry.py, tests/test_zoo.py):

- unpad / repad against flash-attn's bert_padding semantics (a transcription, and the real
  package when it is installed next to a GPU);
- the negative controls: each faulty packed forward must fail the logprob comparator with
  |Δ| > 10x the tolerance, on every architecture x attention implementation;
- the transformers feature check (RuntimeError, never a contaminated forward), micro-batching,
  gradients, the tiny models, and the CUDA / bf16 variants (gpu marker).

`python tests/test_varlen.py` prints the measured |Δ| table recorded in docs/equivalence.md.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from tensordict import TensorDict

from batchproof import blocks as hs
from batchproof import placements, registry
from batchproof.compare import LOGPROB_TOLERANCE, Mismatch, assert_identical, assert_logprobs_close
from batchproof.impl import _cpu, kernels
from batchproof.impl import varlen as impl
from batchproof.impl._cpu import small_int_rows
from batchproof.impl.kernels import varlen as varlen_kernel
from batchproof.models import ModelCase, ModelSpec, cuda_specs, specs, tiny_model
from batchproof.mutation.zoo import varlen as zoo
from batchproof.ops.varlen import (
    CROSS_SAMPLE,
    assert_response_logprobs_close,
    masked_tensors,
    pack_cases,
    response_mask,
)
from batchproof.reference import varlen as reference
from batchproof.registry import Case

CPU_SPECS = specs()
FP32_TOL = LOGPROB_TOLERANCE[torch.float32][0]
PROMPTS, RESPONSES = CROSS_SAMPLE.args

# --------------------------------------------------------------------------- flash-attn semantics


def flash_unpad_input(hidden_states, attention_mask):
    """flash_attn.bert_padding.unpad_input (v2.x), einops `rearrange` written as reshape and
    index_first_axis as indexing (it gathers the same rows)."""
    seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = seqlens_in_batch.max().item()
    cu_seqlens = torch.nn.functional.pad(
        torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return flat[indices], indices, cu_seqlens, max_seqlen_in_batch, seqlens_in_batch


def flash_pad_input(hidden_states, indices, batch, seqlen):
    """flash_attn.bert_padding.pad_input (v2.x): index_put_first_axis into zeros, then reshape."""
    output = torch.zeros((batch * seqlen, *hidden_states.shape[1:]), device=hidden_states.device,
                         dtype=hidden_states.dtype)
    output[indices] = hidden_states
    return output.reshape(batch, seqlen, *hidden_states.shape[1:])


def _assert_same_as_flash(module, x, mask, unpad_input, pad_input) -> None:
    values, indices, cu_seqlens, max_seqlen = module.unpad(x, mask)
    f_values, f_indices, f_cu, f_max, _ = unpad_input(x, mask)
    assert torch.equal(values, f_values) and values.dtype == f_values.dtype
    assert torch.equal(indices, f_indices) and indices.dtype == f_indices.dtype == torch.int64
    assert torch.equal(cu_seqlens, f_cu) and cu_seqlens.dtype == f_cu.dtype == torch.int32
    assert max_seqlen == f_max and type(max_seqlen) is type(f_max) is int
    padded = module.repad(values, indices, x.shape[0], x.shape[1])
    assert torch.equal(padded, pad_input(f_values, f_indices, x.shape[0], x.shape[1]))


# flash-attn's index_first_axis needs (B, S, D...) with at least one feature dim, and
# unpad_input's .max() a non-empty batch
FLASH_INPUTS = masked_tensors().filter(lambda xm: xm[0].dim() >= 3 and xm[0].shape[0] > 0)


@pytest.mark.parametrize("module", [reference, impl], ids=["reference", "impl"])
@given(xm=FLASH_INPUTS)
def test_unpad_repad_match_flash_attn_semantics(module, xm) -> None:
    x, mask = xm
    _assert_same_as_flash(module, x, mask, flash_unpad_input, flash_pad_input)


def test_unpad_non_contiguous_mask_worked_example() -> None:
    x = torch.arange(8.0).reshape(2, 4, 1)
    mask = torch.tensor([[1, 0, 1, 1], [0, 1, 1, 0]])
    for module in (reference, impl):
        values, indices, cu_seqlens, max_seqlen = module.unpad(x, mask)
        assert values.reshape(-1).tolist() == [0.0, 2.0, 3.0, 5.0, 6.0]
        assert indices.tolist() == [0, 2, 3, 5, 6] and cu_seqlens.tolist() == [0, 3, 5]
        assert max_seqlen == 3
        assert module.repad(values, indices, 2, 4).reshape(2, 4).tolist() == [
            [0.0, 0.0, 2.0, 3.0], [0.0, 5.0, 6.0, 0.0]]


@pytest.mark.gpu
def test_unpad_repad_match_installed_flash_attn() -> None:
    bert_padding = pytest.importorskip("flash_attn.bert_padding")

    @given(xm=FLASH_INPUTS)
    def check(xm) -> None:
        x, mask = (t.cuda() for t in xm)
        _assert_same_as_flash(impl, x.float(), mask, lambda *a: bert_padding.unpad_input(*a)[:5],
                              bert_padding.pad_input)

    check()


# --------------------------------------------------------------------------- negative controls


def control_delta(spec: ModelSpec, forward, prompts=PROMPTS, responses=RESPONSES) -> float:
    """max |Δ| under the response mask between the dense oracle and a faulty packed forward."""
    model = spec.build()
    expected = reference.response_logprobs(model, prompts, responses)
    actual = zoo.logprobs_with_forward(forward)(model, prompts, responses)
    mask = response_mask(ModelCase((prompts, responses), model=spec))
    return float((expected - actual).abs()[mask].max())


@pytest.mark.parametrize("spec", CPU_SPECS, ids=str)
@pytest.mark.parametrize("control", sorted(zoo.NEGATIVE_CONTROLS))
def test_negative_control_fails_the_comparator(spec: ModelSpec, control: str) -> None:
    model = spec.build()
    case = ModelCase((PROMPTS, RESPONSES), model=spec)
    expected = reference.response_logprobs(model, PROMPTS, RESPONSES)
    actual = zoo.logprobs_with_forward(zoo.NEGATIVE_CONTROLS[control])(model, PROMPTS, RESPONSES)
    if control == "bool_4d_mask" and spec.attn == "sdpa":  # sdpa reads a bool mask correctly
        assert assert_response_logprobs_close(expected, actual, case=case)["max_abs"] <= FP32_TOL
        return
    with pytest.raises(Mismatch, match="beyond the torch.float32 tolerance"):
        assert_response_logprobs_close(expected, actual, case=case)
    delta = float((expected - actual).abs()[response_mask(case)].max())
    assert delta > 10 * FP32_TOL, f"{control} on {spec}: |Δ| {delta:.3g} within 10x tolerance"


def test_empty_prompt_control_reads_the_previous_sample() -> None:
    """p == 0 < r: the oracle rejects it; the faulty impl scores the first response token with the
    previous sample's last logit, so that token's value changes with the previous sample."""
    model = tiny_model("llama", "sdpa")
    target = ([], [11, 12, 13])
    faulty = zoo._swapped(impl.response_logprobs, _samples=zoo._samples_accepting_empty_prompts)
    with pytest.raises(ValueError, match="sample 1 has an empty prompt"):
        reference.response_logprobs(model, [[5, 17, 33], target[0]], [[7], target[1]])
    with pytest.raises(ValueError, match="sample 1 has an empty prompt"):
        impl.response_logprobs(model, [[5, 17, 33], target[0]], [[7], target[1]])
    delta = empty_prompt_delta(faulty, model, target)
    assert delta > 10 * FP32_TOL, f"|Δ| {delta:.3g}"


def empty_prompt_delta(faulty, model, target) -> float:
    """|Δ| of the p == 0 sample's first token between two different previous samples."""
    first = faulty(model, [[5, 17, 33], target[0]], [[7], target[1]])
    second = faulty(model, [[90, 4], target[0]], [[61, 62], target[1]])
    return float((first[1, -3] - second[1, -3]).abs())


# --------------------------------------------------------------------------- feature check


def test_missing_packed_detection_raises(monkeypatch) -> None:
    from transformers import masking_utils

    model = tiny_model("llama", "sdpa")
    expected = reference.response_logprobs(model, PROMPTS, RESPONSES)
    monkeypatch.delattr(masking_utils, "find_packed_sequence_indices")
    with pytest.raises(RuntimeError, match="find_packed_sequence_indices"):
        impl.response_logprobs(model, PROMPTS, RESPONSES)
    # the explicit block-diagonal mask needs no detection (a 4-D mask skips it), and is exact
    actual = impl.response_logprobs(model, PROMPTS, RESPONSES, packing="mask")
    assert_logprobs_close(expected, actual, response_mask(CROSS_SAMPLE), torch.float32)


def test_detection_that_does_not_split_raises(monkeypatch) -> None:
    from transformers import masking_utils

    monkeypatch.setattr(masking_utils, "find_packed_sequence_indices", lambda position_ids: None)
    with pytest.raises(RuntimeError, match="does not split a packed row"):
        impl.response_logprobs(tiny_model("qwen2", "eager"), PROMPTS, RESPONSES)


def test_attention_without_packed_mask_raises(monkeypatch) -> None:
    from transformers import masking_utils

    monkeypatch.setattr(masking_utils, "ALL_MASK_ATTENTION_FUNCTIONS", {"eager": None})
    with pytest.raises(RuntimeError, match="no packed-sequence mask for attn_implementation"):
        impl.response_logprobs(tiny_model("llama", "sdpa"), PROMPTS, RESPONSES)


def test_mask_packing_needs_eager_or_sdpa(monkeypatch) -> None:
    """packing='mask' passes a 4-D additive mask, which only eager and sdpa take: another
    attention implementation is a RuntimeError before any forward (docs/coverage.md: the
    registry's checks cannot reach it, the reference has no packed forward)."""
    model = tiny_model("llama", "eager")
    monkeypatch.setattr(model.config, "_attn_implementation", "flash_attention_2")
    with pytest.raises(RuntimeError, match="packing='mask' needs attn_implementation"):
        impl.response_logprobs(model, PROMPTS, RESPONSES, packing="mask")


@pytest.mark.parametrize("spec", CPU_SPECS, ids=str)
def test_explicit_mask_packing_matches_dense(spec: ModelSpec) -> None:
    model = spec.build()
    expected = reference.response_logprobs(model, PROMPTS, RESPONSES)
    actual = impl.response_logprobs(model, PROMPTS, RESPONSES, packing="mask",
                                    max_tokens_per_batch=9, pad_to_multiple=4)
    assert_logprobs_close(expected, actual, response_mask(CROSS_SAMPLE), torch.float32)


# --------------------------------------------------------------------------- micro-batches


def test_micro_batches_respect_the_budget(monkeypatch) -> None:
    rows = []
    forward = impl._forward_position_ids

    def recording(model, input_ids, position_ids, keep):
        rows.append((input_ids.shape[1], position_ids[0].tolist()))
        return forward(model, input_ids, position_ids, keep)

    monkeypatch.setattr(impl, "_forward_position_ids", recording)
    model = tiny_model("qwen3", "sdpa")
    expected = reference.response_logprobs(model, PROMPTS, RESPONSES)
    actual = impl.response_logprobs(model, PROMPTS, RESPONSES, max_tokens_per_batch=12,
                                    pad_to_multiple=4)
    assert_logprobs_close(expected, actual, response_mask(CROSS_SAMPLE), torch.float32)
    # samples of 7, 5, 6 tokens: [7, 5] = 12 fits, then [6] padded to 8 (its own pad segment)
    assert rows == [(12, [0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4]),
                    (8, [0, 1, 2, 3, 4, 5, 0, 1])]


def test_samples_without_response_are_not_forwarded(monkeypatch) -> None:
    sizes = []
    forward = impl._forward_position_ids
    monkeypatch.setattr(impl, "_forward_position_ids",
                        lambda m, ids, pos, keep: sizes.append(ids.shape[1]) or
                        forward(m, ids, pos, keep))
    out = impl.response_logprobs(tiny_model("llama", "eager"), [[1, 2, 3], [4, 5]], [[], [6]])
    assert sizes == [3] and out[0].tolist() == [0.0] and out[1, 0] < 0
    sizes.clear()
    out = impl.response_logprobs(tiny_model("llama", "eager"), [[1]], [[]])
    assert sizes == [] and tuple(out.shape) == (1, 0) and out.dtype == torch.float32


@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=12), budget=st.integers(9, 30))
def test_micro_batch_ranges_are_greedy_and_within_budget(lengths, budget) -> None:
    ends = [sum(lengths[:i + 1]) for i in range(len(lengths))]
    ranges = impl._micro_batches(ends, budget)
    assert [r[0] for r in ranges] == [0] + [r[1] for r in ranges[:-1]]
    assert ranges[-1][1] == len(lengths)
    for first, last in ranges:
        assert sum(lengths[first:last]) <= budget
        assert last == len(lengths) or sum(lengths[first:last + 1]) > budget  # greedy


# --------------------------------------------------------------------------- gradients


def test_no_grad_by_default_and_gradients_on_request() -> None:
    fresh = tiny_model.__wrapped__("llama", "sdpa").requires_grad_(True)
    assert impl.response_logprobs(fresh, PROMPTS, RESPONSES).requires_grad is False
    grads = []
    for module in (reference, impl):
        fresh.zero_grad()
        module.response_logprobs(fresh, PROMPTS, RESPONSES, with_grad=True).sum().backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in fresh.parameters()]))
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-6)


# --------------------------------------------------------------------------- tiny models


def test_tiny_models_leave_the_global_rng_alone_and_are_deterministic() -> None:
    before = torch.random.get_rng_state()
    first = tiny_model.__wrapped__("qwen3", "eager")
    second = tiny_model.__wrapped__("qwen3", "eager")
    assert torch.equal(torch.random.get_rng_state(), before)
    for a, b in zip(first.state_dict().values(), second.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("spec", CPU_SPECS, ids=str)
def test_tiny_model_shapes(spec: ModelSpec) -> None:
    model = spec.build()
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    assert model.config.vocab_size == 128 and model.config._attn_implementation == spec.attn
    assert next(model.parameters()).dtype == torch.float32 and not model.training
    assert spec.build() is model  # cached per process


def test_model_case_passes_the_model_first() -> None:
    case = ModelCase(([[1]], [[2]]), {"pad_to_multiple": 4}, model=ModelSpec("qwen2", "sdpa"))
    seen = case.call(lambda model, p, r, **kw: (model.config.model_type, p, r, kw))
    assert seen == ("qwen2", [[1]], [[2]], {"pad_to_multiple": 4})
    assert isinstance(case.replace([[3]], [[4]]), ModelCase)
    assert case.on("cuda").model.device == "cuda"


# --------------------------------------------------------------------------- comparator


def test_comparator_uses_the_case_mask_and_dtype() -> None:
    expected = torch.tensor([[0.0, -1.0], [-2.0, -3.0]])
    case = ModelCase(([[1], [2]], [[3], [4, 5]]), model=ModelSpec("llama", "sdpa"))
    assert assert_response_logprobs_close(expected, expected + 5e-6 * (expected != 0),
                                          case=case)["max_abs"] < 1e-5
    with pytest.raises(Mismatch, match="not exactly 0 off the mask"):
        assert_response_logprobs_close(expected, expected + 5e-6 * (expected == 0), case=case)
    with pytest.raises(Mismatch, match=r"row 1:  xr"):
        assert_response_logprobs_close(expected, expected - torch.tensor([[0, 0], [0.1, 0]]))
    bf16 = ModelCase(case.args, model=ModelSpec("llama", "sdpa", "bfloat16"))
    assert assert_response_logprobs_close(expected, expected + 1e-3 * (expected != 0), case=bf16)


def test_errors_name_the_sample() -> None:
    model = tiny_model("llama", "sdpa")
    for module in (reference, impl):
        with pytest.raises(ValueError, match=r"prompts\[1\] holds token id 128"):
            module.response_logprobs(model, [[1], [2, 128]], [[3], [4]])
        with pytest.raises(ValueError, match="sample 1 has 3 tokens, more than"):
            module.response_logprobs(model, [[1], [2, 3]], [[3], [4]], max_tokens_per_batch=2)
        with pytest.raises(ValueError, match="sample 2 has an empty prompt"):
            module.pack_varlen([[1], [], []], [[], [], [5]])


# --------------------------------------------------------------------------- CUDA and bf16


@pytest.mark.gpu
@pytest.mark.parametrize("spec", specs(("cuda",), ("float32", "bfloat16")), ids=str)
def test_cuda_packed_matches_dense(spec: ModelSpec) -> None:
    model = spec.build()
    generator = torch.Generator().manual_seed(0)
    lengths = [(int(p), int(r)) for p, r in torch.randint(1, 64, (16, 2), generator=generator)]
    prompts = [torch.randint(0, 128, (p,), generator=generator).tolist() for p, _ in lengths]
    responses = [torch.randint(0, 128, (r,), generator=generator).tolist() for _, r in lengths]
    expected = reference.response_logprobs(model, prompts, responses)
    actual = impl.response_logprobs(model, prompts, responses, max_tokens_per_batch=512)
    assert actual.device.type == "cuda"
    case = ModelCase((prompts, responses), model=spec)
    assert_response_logprobs_close(expected, actual, case=case)


@pytest.mark.gpu
@pytest.mark.parametrize("spec", specs(("cuda",), ("float32", "bfloat16")), ids=str)
def test_cuda_negative_controls_detected(spec: ModelSpec) -> None:
    model = spec.build()
    case = ModelCase((PROMPTS, RESPONSES), model=spec)
    expected = reference.response_logprobs(model, PROMPTS, RESPONSES)
    for name, forward in sorted(zoo.NEGATIVE_CONTROLS.items()):
        if name == "bool_4d_mask" and spec.attn == "sdpa":
            continue  # sdpa reads a bool mask correctly: not a bug there
        actual = zoo.logprobs_with_forward(forward)(model, PROMPTS, RESPONSES)
        with pytest.raises(Mismatch):
            assert_response_logprobs_close(expected, actual, case=case)


@pytest.mark.gpu
def test_cuda_pack_varlen_works_on_the_device() -> None:
    info = registry.get("varlen.pack_varlen")
    packed = impl.pack_varlen(*info.example.args, device="cuda", pad_to_multiple=4)
    assert all(packed[k].device.type == "cuda" for k in packed.keys()
               if not packed.is_non_tensor(k))
    assert cuda_specs()


# --------------------------------------------------------------------------- the measured table


def measure() -> list[tuple[str, str, float]]:
    """(model, control, max |Δ|) for every control on every CPU model (docs/equivalence.md)."""
    rows = []
    for spec in CPU_SPECS:
        model = spec.build()
        expected = reference.response_logprobs(model, PROMPTS, RESPONSES)
        clean = impl.response_logprobs(model, PROMPTS, RESPONSES)
        rows.append((str(spec), "none (impl)", float((expected - clean).abs().max())))
        for name, forward in sorted(zoo.NEGATIVE_CONTROLS.items()):
            rows.append((str(spec), name, control_delta(spec, forward)))
    faulty = zoo._swapped(impl.response_logprobs, _samples=zoo._samples_accepting_empty_prompts)
    for spec in CPU_SPECS:
        delta = empty_prompt_delta(faulty, spec.build(), ([], [11, 12, 13]))
        rows.append((str(spec), "empty_prompt (p == 0)", delta))
    return rows


if __name__ == "__main__":
    torch.set_num_threads(1)
    for model_name, control, delta in measure():
        print(f"| {model_name} | {control} | {delta:.3g} | {delta / FP32_TOL:,.0f}x |")


def _fail(*args, **kwargs):
    raise AssertionError("this path must not run here")


@given(case=pack_cases())
def test_pack_varlen_list_fast_path_runs_and_is_exact(case: Case) -> None:
    """Plain int lists on the CPU: `_write_lists` packs the tokens in place (the general
    flattening is never reached) and the result equals the reference."""
    expected = reference.pack_varlen(*case.args, **case.kwargs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(impl, "_samples", _fail)
        actual = impl.pack_varlen(*case.args, **case.kwargs)
    assert_identical(expected, actual)


def test_pack_varlen_list_fast_path_declines_what_it_cannot_write() -> None:
    cpu = torch.device("cpu")
    assert impl._write_lists([[1]], [[2]], 1, 0, torch.device("meta")) is None
    assert impl._write_lists([torch.tensor([1])], [[2]], 1, 0, cpu) is None
    assert impl._write_lists([[1], [2]], [[2]], 1, 0, cpu) is None
    assert impl._write_lists([], [], 1, 0, cpu) is None
    assert impl._write_lists([[True]], [[2]], 1, 0, cpu) is None
    assert impl._write_lists([[1.0]], [[2]], 1, 0, cpu) is None
    assert impl._write_lists([[]], [[2]], 1, 0, cpu) is None  # unscorable: the reference raises
    assert impl._write_lists([[2**63]], [[2]], 1, 0, cpu) is None
    samples, input_ids = impl._write_lists([(1, 2)], ([3],), 4, 9, cpu)
    assert input_ids.tolist() == [1, 2, 3, 9]
    assert samples.host_prompt_lengths.tolist() == [2]


PLACEMENTS = ("kernel", "cpu_row_copies", "generic", "triton")


_MISSING = {name for name, module in (("kernel", "numba"), ("triton", "triton"))
            if importlib.util.find_spec(module) is None}  # placements this machine cannot run


def _place_with(patch: pytest.MonkeyPatch, placement: str) -> None:
    """Run pack_varlen's compiled CPU kernel, its torch CPU row copies, the device-generic
    scatter or the Triton kernel (what CUDA runs; Triton under its interpreter); a path other
    than the chosen one fails."""
    if placement == "kernel" and kernels.numba is None:
        pytest.skip("numba is not installed: the kernel cannot run")
    if placement == "triton" and importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed: pip install 'batchproof[triton]'")
    patch.setattr(kernels, "ENABLED", placement == "kernel")
    patch.setattr(_cpu, "FAST_PATHS", placement in ("kernel", "cpu_row_copies"))
    patch.setattr(kernels, "TRITON_ON_CPU", placement == "triton")
    if placement in ("kernel", "triton"):
        patch.setattr(impl, "_place_tokens", _fail)
        patch.setattr(impl, "_ramps", _fail)
    if placement != "kernel":
        patch.setattr(varlen_kernel, "write_samples", _fail)
        if placement == "generic":
            patch.setattr(impl, "_copy_rows", _fail)


@pytest.mark.parametrize("placement", PLACEMENTS)
@given(case=pack_cases())
def test_pack_varlen_placements_equal_the_reference(case: Case, placement: str) -> None:
    """Jagged inputs: each placement equals the reference."""
    expected = reference.pack_varlen(*case.args, **case.kwargs)
    prompts, responses = (hs.jagged(rows, torch.int64) for rows in case.args)
    with pytest.MonkeyPatch.context() as patch:
        _place_with(patch, placement)
        actual = impl.pack_varlen(prompts, responses, **case.kwargs)
    assert_identical(expected, actual)


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "torch"])
@given(case=pack_cases())
def test_pack_varlen_lists_equal_the_reference_with_and_without_the_kernel(case: Case,
                                                                            kernel: bool) -> None:
    """Lists: tokens packed in place, the other outputs by the kernel or by torch."""
    expected = reference.pack_varlen(*case.args, **case.kwargs)
    with pytest.MonkeyPatch.context() as patch:
        if kernel and kernels.numba is None:
            pytest.skip("numba is not installed: the kernel cannot run")
        patch.setattr(kernels, "ENABLED", kernel)
        if kernel:
            patch.setattr(impl, "_ramps", _fail)
        else:
            patch.setattr(varlen_kernel, "write_samples", _fail)
        actual = impl.pack_varlen(*case.args, **case.kwargs)
    assert_identical(expected, actual)


# --------------------------------------------------------------------------- mutation kills


def _outcome(call: Callable[[Any], Any]) -> tuple[str, str]:
    """(exception type, message) that `call(module)` raises, for reference and impl alike."""
    outcomes = []
    for module in (reference, impl):
        with pytest.raises(Exception) as info:  # noqa: PT011 - compared below, type and text
            call(module)
        outcomes.append((type(info.value).__name__, str(info.value)))
    assert outcomes[0] == outcomes[1]
    return outcomes[1]


def _jagged(values: torch.Tensor, offsets: list[int], lengths: list[int] | None = None):
    return torch.nested.nested_tensor_from_jagged(
        values, torch.tensor(offsets), lengths=None if lengths is None else torch.tensor(lengths))


def test_invalid_token_inputs_raise_the_reference_errors() -> None:
    """pack_varlen: every rejected input raises the reference's exception type and message."""
    empty_floats = _jagged(torch.zeros(0), [0])
    calls = {
        "not a sequence": lambda m: m.pack_varlen(5, [[1]]),
        "a string": lambda m: m.pack_varlen("ab", [[1], [2]]),
        "bytes responses": lambda m: m.pack_varlen([[1], [2]], b"ab"),
        "a generator": lambda m: m.pack_varlen((row for row in [[1]]), [[1]]),
        "a bool token": lambda m: m.pack_varlen([[True]], [[1]]),
        "a float response": lambda m: m.pack_varlen([[1]], [[1.5]]),
        "a float response row": lambda m: m.pack_varlen([[1]], [torch.tensor([1.5])]),
        "a bool tensor row": lambda m: m.pack_varlen([torch.tensor([True])], [[1]]),
        "a non-sequence response row": lambda m: m.pack_varlen([[1]], [3]),
        "3-D jagged rows": lambda m: m.pack_varlen(_jagged(torch.ones(2, 3, dtype=torch.long),
                                                           [0, 2]), [[1]]),
        "no jagged float rows": lambda m: m.pack_varlen(empty_floats, []),
        "bad pad_token_id": lambda m: m.pack_varlen([[1]], [[2]], pad_token_id=1.0),
    }
    messages = {name: _outcome(call) for name, call in calls.items()}
    assert messages["not a sequence"] == (
        "TypeError", "prompts must be a sequence of token sequences, got int")
    assert messages["a float response row"][1].startswith("responses[0] must hold integer")


def test_jagged_float_rows_are_rejected() -> None:
    """A jagged tensor of floats is a TypeError naming the argument and the dtype."""
    for rows in (_jagged(torch.tensor([1.0]), [0, 1]), _jagged(torch.tensor([1.0, 2.0]), [0, 1, 2])):
        with pytest.raises(TypeError, match=r"^prompts(\[0\])? must hold integer token ids, "
                                            r"got torch.float32$"):
            impl.pack_varlen(rows, [[1]] * rows.size(0))


def test_jagged_float_rows_raise_the_reference_message() -> None:
    """Same message as the reference for a jagged tensor of floats."""
    _outcome(lambda m: m.pack_varlen(_jagged(torch.tensor([1.0]), [0, 1]), [[1]]))


def test_token_id_beyond_int64_raises_the_reference_error() -> None:
    """A token id that does not fit int64 raises the reference's exception."""
    _outcome(lambda m: m.pack_varlen([[2**63]], [[1]]))


def test_contiguous_jagged_rows_are_not_unbound(monkeypatch) -> None:
    """A contiguous 2-D jagged tensor is flattened from its values (no per-row tensors) and packs
    exactly like the reference, int32 values and int32 offsets included."""
    prompts = torch.nested.nested_tensor_from_jagged(
        torch.tensor([1, 2, 3], dtype=torch.int32), torch.tensor([0, 2, 3], dtype=torch.int32))
    responses = _jagged(torch.tensor([4, 5, 6]), [0, 1, 3])
    expected = reference.pack_varlen(prompts, responses, pad_to_multiple=4, pad_token_id=7)
    monkeypatch.setattr(impl, "_row_tensor", _fail)
    monkeypatch.setattr(impl, "_rows", _fail)
    for placement in [p for p in PLACEMENTS if p not in _MISSING]:
        with pytest.MonkeyPatch.context() as patch:
            _place_with(patch, placement)
            actual = impl.pack_varlen(prompts, responses, pad_to_multiple=4, pad_token_id=7)
        assert_identical(expected, actual)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")  # strided
def test_nested_rows_that_are_not_contiguous_jagged_equal_the_reference() -> None:
    """Strided nested tensors, jagged tensors with holes and mixed-dtype tensor rows go through the
    per-row path and pack like the reference."""
    cases = [
        (torch.nested.nested_tensor([torch.tensor([1, 2]), torch.tensor([3])]), [[1], [2]]),
        (_jagged(torch.tensor([1, 2, 3, 4]), [0, 2, 4], lengths=[1, 2]), [[1], [2]]),
        ([torch.tensor([1], dtype=torch.uint32), torch.tensor([2])], [[3], [4]]),
        ([torch.tensor([2**24 + 1]), []], [[1], []]),
        ([[np.int64(2**40)]], [[]]),
    ]
    for prompts, responses in cases:
        expected = reference.pack_varlen(prompts, responses, pad_to_multiple=3, pad_token_id=5)
        for placement in ("kernel", "cpu_row_copies"):  # per-row path: no generic scatter
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(kernels, "ENABLED", placement == "kernel")
                actual = impl.pack_varlen(prompts, responses, pad_to_multiple=3, pad_token_id=5)
            assert_identical(expected, actual)
            assert actual.device == expected.device == torch.device("cpu")


def test_tensor_rows_fill_the_whole_tail_with_the_pad_token() -> None:
    """CPU row copies: every position after the last response token is `pad_token_id`."""
    prompts, responses = [torch.tensor([1])], [torch.tensor([2, 3])]
    expected = reference.pack_varlen(prompts, responses, pad_to_multiple=8, pad_token_id=123456789)
    actual = impl.pack_varlen(prompts, responses, pad_to_multiple=8, pad_token_id=123456789)
    assert_identical(expected, actual)


def test_cpu_tensor_rows_use_row_copies(monkeypatch) -> None:
    """On the CPU without the kernel, the packed row is written by `_copy_rows` (one memcpy per
    row), not scattered."""
    monkeypatch.setattr(kernels, "ENABLED", False)
    calls = []
    copy_rows = impl._copy_rows
    monkeypatch.setattr(impl, "_copy_rows", lambda ids, s: calls.append(1) or copy_rows(ids, s))
    prompts, responses = [torch.tensor([1, 2])], [torch.tensor([3])]
    assert_identical(reference.pack_varlen(prompts, responses),
                     impl.pack_varlen(prompts, responses))
    assert calls == [1]


def test_pack_varlen_mixed_list_and_tuple_rows_take_the_fast_path(monkeypatch) -> None:
    """Rows that are lists and tuples mixed are still plain rows: `_write_lists` packs them."""
    args = ([[1], (2, 3)], [(4,), [5]])
    expected = reference.pack_varlen(*args, pad_to_multiple=4)
    monkeypatch.setattr(impl, "_samples", _fail)
    actual = impl.pack_varlen(*args, pad_to_multiple=4)
    assert_identical(expected, actual)
    assert actual.device == torch.device("cpu") and actual.batch_size == torch.Size([])


def test_pack_varlen_honours_a_non_cpu_device() -> None:
    """device="meta": every output tensor is created there (shapes and dtypes as the reference),
    for list rows and tensor rows, with and without a tail pad."""
    for prompts, responses in (([[1, 2], [3]], [[4], []]), ([torch.tensor([1, 2])], [[3]])):
        for multiple in (1, 4):
            expected = reference.pack_varlen(prompts, responses, pad_to_multiple=multiple,
                                             device="meta")
            actual = impl.pack_varlen(prompts, responses, pad_to_multiple=multiple, device="meta")
            assert actual.device == torch.device("meta")
            assert sorted(actual.keys()) == sorted(expected.keys())
            for key in expected.keys():
                if expected.is_non_tensor(key):
                    assert actual[key] == expected[key]
                    continue
                assert actual[key].device.type == "meta", key
                assert (actual[key].shape, actual[key].dtype) == (expected[key].shape,
                                                                  expected[key].dtype), key


def test_cu_seqlens_are_exact_beyond_float32_precision() -> None:
    """cu_seqlens are computed in integers: a boundary of 2**24 + 1 is kept exactly."""
    big = 2**24 + 1
    assert impl._cu_seqlens(torch.tensor([big]), 1, big, 0).tolist() == [0, big]
    assert impl._cu_seqlens(torch.tensor([big, 0]), 1, big + 1, 1).tolist() == [0, big, big + 1]


def test_block_causal_mask_has_the_model_dtype() -> None:
    """The additive mask is built in the model's dtype (0 allowed, the dtype's minimum blocked)."""
    for dtype in (torch.float64, torch.bfloat16):
        mask = impl._block_causal_mask(torch.tensor([0, 1, 0]), dtype)
        low = torch.finfo(dtype).min
        assert mask.dtype == dtype and mask.shape == (1, 1, 3, 3)
        assert mask[0, 0].tolist() == [[0, low, low], [0, 0, low], [low, low, 0]]


# --------------------------------------------------------------------------- unpad / repad errors


def test_unpad_repad_invalid_inputs_raise_the_reference_errors() -> None:
    """unpad / repad: each rejected input raises the reference's exception type and message."""
    values, index = torch.ones(2), torch.tensor([0, 1])
    calls = [
        lambda m: m.unpad(torch.ones(1, 1), [[1]]),
        lambda m: m.unpad(torch.ones(1, 1, device="meta"), torch.ones(1, 1, dtype=torch.long)),
        lambda m: m.repad(values, [0, 1], 1, 2),
        lambda m: m.repad(values, torch.tensor([True, False]), 1, 2),
        lambda m: m.repad(values, index, 1.0, 2),
        lambda m: m.repad(values, index, 2, 1.0),
        lambda m: m.repad(torch.tensor(1.0), torch.tensor([0]), 1, 1),
        lambda m: m.repad(torch.ones(1), torch.tensor([5]), 1, 2),
        lambda m: m.repad(torch.ones(1), torch.tensor([-1]), 1, 2),
    ]
    for call in calls:
        _outcome(call)


def test_repad_reads_uint8_indices_as_positions() -> None:
    """uint8 indices are flat positions (as in the reference), never a byte mask."""
    values, indices = torch.tensor([1.0, 2.0]), torch.tensor([1, 0], dtype=torch.uint8)
    expected = reference.repad(values, indices, 1, 2)
    assert_identical(expected, impl.repad(values, indices, 1, 2))


# --------------------------------------------------------------------------- unpack errors


def _packed_by_hand(response_lengths: list[int], predict_index: list[int], width: int):
    return TensorDict({"input_ids": torch.zeros(width, dtype=torch.int64),
                       "predict_index": torch.tensor(predict_index, dtype=torch.int64),
                       "response_lengths": torch.tensor(response_lengths, dtype=torch.int64)},
                      batch_size=[])


def test_unpack_response_logprobs_edge_inputs_equal_the_reference() -> None:
    """1-D input_ids, an empty batch, and every rejected `packed` raise or return as the
    reference does."""
    packed = _packed_by_hand([1, 2], [0, 2, 3], 5)
    for flat in (torch.tensor([-1.0, -2.0, -3.0]), torch.arange(5.0)):
        assert_identical(reference.unpack_response_logprobs(flat, packed),
                         impl.unpack_response_logprobs(flat, packed))
    empty = _packed_by_hand([], [], 0)
    expected = reference.unpack_response_logprobs(torch.zeros(0), empty)
    assert_identical(expected, impl.unpack_response_logprobs(torch.zeros(0), empty))
    for call in (lambda m: m.unpack_response_logprobs(torch.zeros(3), {"a": 1}),
                 lambda m: m.unpack_response_logprobs(torch.zeros(3),
                                                      _packed_by_hand([1, 1], [0], 5))):
        _outcome(call)


# --------------------------------------------------------------------------- response_logprobs


def test_response_logprobs_vocab_errors_name_the_row() -> None:
    """An out-of-vocabulary token is reported in the row that holds it, at a row boundary too."""
    model = tiny_model("llama", "eager")
    assert _outcome(lambda m: m.response_logprobs(model, [[1], [2]], [[3], [128]])) == (
        "ValueError", "responses[1] holds token id 128, outside the model's vocabulary [0, 128)")
    _outcome(lambda m: m.response_logprobs(model, [[1], [2]], [[-1], [3]]))
    _outcome(lambda m: m.response_logprobs(model, [[1], [300]], [[3], [4]]))


def test_response_logprobs_without_responses_is_float32_under_a_float64_default() -> None:
    """No response anywhere: zeros (B, 0) in float32, whatever the default dtype."""
    model = tiny_model("llama", "eager")
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = impl.response_logprobs(model, [[1], [2]], [[], []])
        values = impl.unpack_response_logprobs(torch.tensor([-1.0]), impl.pack_varlen([[1]], [[2]]))
    finally:
        torch.set_default_dtype(previous)
    assert out.dtype == torch.float32 and tuple(out.shape) == (2, 0)
    assert values.dtype == torch.float32 and values.tolist() == [[-1.0]]


class _ConfigWithoutAttention(torch.nn.Module):
    """An nn.Module with a config that names no attention implementation."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(8, 2)
        self.config = types.SimpleNamespace()

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.embed


UPGRADE = ("the installed transformers {}: a packed forward would let samples attend to each "
           "other. Install transformers >= 4.53.1, or pass packing='mask' to build the "
           "block-diagonal mask explicitly.")


def test_feature_check_messages(monkeypatch) -> None:
    """Each failed feature check raises RuntimeError with its full message, before any forward."""
    import transformers
    from transformers import masking_utils

    model = tiny_model("llama", "eager")

    def message(target=model, **kwargs) -> str:
        with pytest.raises(RuntimeError) as info:
            impl.response_logprobs(target, [[1]], [[2]], **kwargs)
        return str(info.value)

    assert message(_ConfigWithoutAttention(), packing="mask") == (
        "packing='mask' needs attn_implementation 'eager' or 'sdpa'; the model uses None "
        "(use packing='position_ids')")
    with monkeypatch.context() as patch:
        patch.delattr(masking_utils, "ALL_MASK_ATTENTION_FUNCTIONS")
        assert message() == ("transformers builds no packed-sequence mask for attn_implementation "
                             "'eager': the samples of a packed row would attend to each other "
                             "(supported: [])")
    for probe in ([[0, 1, 2, 3, 2]], [[1, 1, 2, 3, 3]]):  # each breaks exactly one comparison
        with monkeypatch.context() as patch:
            patch.setattr(masking_utils, "find_packed_sequence_indices",
                          lambda position_ids, probe=probe: torch.tensor(probe))
            assert message() == UPGRADE.format(
                "does not split a packed row at restarting position_ids")
    with monkeypatch.context() as patch:
        patch.delattr(masking_utils, "find_packed_sequence_indices")
        assert message() == UPGRADE.format("lacks find_packed_sequence_indices")
    with monkeypatch.context() as patch:
        patch.delattr(transformers, "masking_utils")
        patch.setitem(sys.modules, "transformers.masking_utils", None)
        assert message() == UPGRADE.format("has no transformers.masking_utils")


def test_micro_batches_default_budget_and_padding(monkeypatch) -> None:
    """Default budget: twice the longest sample; an explicit budget is used as given; each
    micro-batch is padded to `pad_to_multiple` from its own start (samples of 5 tokens)."""
    rows = []
    forward = impl._forward_position_ids

    def recording(model, input_ids, position_ids, keep):
        rows.append(input_ids.shape[1])
        return forward(model, input_ids, position_ids, keep)

    monkeypatch.setattr(impl, "_forward_position_ids", recording)
    model = tiny_model("llama", "eager")
    prompts, responses = [[1, 2, 3], [4, 5, 6], [7, 8]], [[9, 10], [11, 12], [13, 14, 15]]
    expected = reference.response_logprobs(model, prompts, responses)
    for budget, sizes in ((None, [12, 6]), (5, [6, 6, 6])):
        rows.clear()
        actual = impl.response_logprobs(model, prompts, responses, pad_to_multiple=3,
                                        max_tokens_per_batch=budget)
        assert_logprobs_close(expected, actual, expected != 0, torch.float32)
        assert rows == sizes


def test_mask_packing_shares_a_row_between_samples() -> None:
    """packing="mask" with several samples in one row (restarting positions under the explicit
    mask) and a sample without response, on the device-generic token scatter."""
    model = tiny_model("llama", "eager")
    prompts, responses = [[1, 2, 3], [4, 5], [6, 7, 8]], [[9, 10], [], [11]]
    expected = reference.response_logprobs(model, prompts, responses)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "ENABLED", False)
        patch.setattr(_cpu, "FAST_PATHS", False)
        actual = impl.response_logprobs(model, prompts, responses, packing="mask")
    assert_logprobs_close(expected, actual, expected != 0, torch.float32)


def test_more_scored_tokens_than_vocabulary_entries() -> None:
    """Chunked log-softmax covers every scored token, also when there are more than V of them."""
    model = tiny_model("llama", "eager")
    prompts, responses = [[1, 2]], [[(7 * k) % 128 for k in range(140)]]
    expected = reference.response_logprobs(model, prompts, responses)
    actual = impl.response_logprobs(model, prompts, responses, chunk_size=64)
    assert_logprobs_close(expected, actual, expected != 0, torch.float32)


def test_all_samples_scored_reuses_the_samples() -> None:
    """When every sample has a response, no sample is filtered (the same flat tokens are packed)."""
    samples = impl._samples([[1], [2]], [[3], [4]], torch.device("cpu"))
    assert impl._with_responses(samples) is samples


class _Recorder(torch.nn.Module):
    """Delegates to a causal LM and records the keyword arguments of every forward."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner, self.config, self.calls = inner, inner.config, []

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.inner.get_input_embeddings()

    def forward(self, **kwargs):
        self.calls.append(kwargs)
        return self.inner(**kwargs)


def test_packed_forwards_pass_restarting_positions_and_no_cache() -> None:
    """Each packed forward gets restarting `position_ids` and `use_cache=False`; "position_ids"
    packing passes `attention_mask=None`, "mask" packing the block-diagonal additive mask."""
    model = _Recorder(tiny_model("llama", "eager"))
    prompts, responses = [[1, 2, 3], [4, 5]], [[9, 10], [11]]
    for packing in ("position_ids", "mask"):
        model.calls.clear()
        impl.response_logprobs(model, prompts, responses, packing=packing, pad_to_multiple=4)
        (call,) = model.calls
        assert call["position_ids"].tolist() == [[0, 1, 2, 3, 4, 0, 1, 2]]
        assert call["use_cache"] is False
        if packing == "position_ids":
            assert "attention_mask" in call and call["attention_mask"] is None
        else:
            assert torch.equal(call["attention_mask"],
                               impl._block_causal_mask(call["position_ids"][0], torch.float32))


def test_pad_token_id_beyond_int64_raises_the_reference_error_on_the_generic_path(monkeypatch) -> None:
    """pad_token_id beyond int64 on the scatter path raises the reference's exception."""
    monkeypatch.setattr(kernels, "ENABLED", False)
    monkeypatch.setattr(_cpu, "FAST_PATHS", False)
    _outcome(lambda m: m.pack_varlen([torch.tensor([1])], [[2]], pad_to_multiple=4,
                                     pad_token_id=2**63))


_ANY_VALUE = st.one_of(
    st.integers(-2**31, 2**31 - 1), st.integers(-2**31, 2**31 - 1), st.integers(),
    st.booleans(), st.floats(), st.builds(np.int64, st.integers(-5, 5)),
    st.lists(st.integers(0, 3), max_size=2), st.none(), st.text(max_size=2))


@given(rows=st.lists(st.one_of(st.lists(_ANY_VALUE, max_size=6),
                               st.lists(st.integers(-2**31, 2**31 - 1), max_size=6),
                               st.lists(st.integers(-2**31, 2**31 - 1), max_size=6).map(tuple)),
                     min_size=1, max_size=5))  # one or more rows (pack_varlen has a sample)
@example(rows=[[[]]])  # 5 bytes like an int unit: a nested empty list ('[' + count 0)
@example(rows=[[1, "abc"], [2]])  # 5 bytes too: a 3-character string ('z' + length + 3)
@example(rows=[[2**31], [True, 1.5]])
def test_small_int_rows_reads_exactly_the_plain_int32_rows(rows: list) -> None:
    """`small_int_rows` (the marshal reader of pack_varlen's list path) gives the concatenated
    values when every value is a plain int within int32, and None for anything else (a bool, a
    float, a numpy int, a bigger int, a nested list...): never a wrong value."""
    values = [v for row in rows for v in row]
    plain = all(type(v) is int and -2**31 <= v < 2**31 for v in values)
    actual = small_int_rows(rows)
    if not plain:
        assert actual is None
    else:
        assert actual is not None and actual.dtype == np.int32
        assert actual.tolist() == values


def test_pad_ids_beyond_int64_are_a_value_error_naming_the_argument() -> None:
    """Even without a tail pad (the reference used to accept 2**63 then, the impl to raise)."""
    for pad in (2**63, -2**63 - 1):
        for module in (reference, impl):
            with pytest.raises(ValueError, match="pad_token_id must fit int64"):
                module.pack_varlen([[1, 2]], [[3]], pad_to_multiple=3, pad_token_id=pad)
    prompts, responses = (hs.jagged(r, torch.int64) for r in ([[1, 2]], [[3]]))
    for pad in (2**63 - 1, -2**63):  # the bounds are valid: the kernel writes the tail pad
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(impl, "_place_tokens", _fail)
            actual = impl.pack_varlen(prompts, responses, pad_to_multiple=4, pad_token_id=pad)
        assert_identical(reference.pack_varlen([[1, 2]], [[3]], pad_to_multiple=4,
                                               pad_token_id=pad), actual)


@given(rows=st.lists(st.tuples(st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=4),
                               st.lists(st.integers(-2**63, 2**63 - 1), max_size=4)),
                     min_size=1, max_size=4),
       multiple=st.integers(1, 5))
@example(rows=[([2**31], [2**40, -2**63]), ([1], [2**63 - 1])], multiple=4)
def test_pack_varlen_list_path_with_ids_beyond_int32(rows: list, multiple: int) -> None:
    """Lists with ids beyond int32 (which `small_int_rows` hands back) take the struct path:
    packed in place, never the general path."""
    prompts, responses = [list(p) for p, _ in rows], [list(r) for _, r in rows]
    expected = reference.pack_varlen(prompts, responses, pad_to_multiple=multiple)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(impl, "_samples", _fail)
        actual = impl.pack_varlen(prompts, responses, pad_to_multiple=multiple)
    assert_identical(expected, actual)


def test_small_int_lists_are_read_by_marshal_not_packed() -> None:
    """Lists of int32-range ids never reach the struct path (no byte view of the output)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(impl, "byte_view", _fail)
        actual = impl.pack_varlen([[1, 2], [3]], [[4], []], pad_to_multiple=4)
    assert_identical(reference.pack_varlen([[1, 2], [3]], [[4], []], pad_to_multiple=4), actual)


_BAD_REPADS = {
    "negative batch only": (torch.zeros(0), torch.zeros(0, dtype=torch.int64), -1, 4),
    "index equal to B * S": (torch.zeros(2), torch.tensor([1, 4]), 1, 4),
    "a repeat of zero": (torch.zeros(3), torch.tensor([2, 0, 0]), 1, 4),
    "a repeat after a larger one": (torch.zeros(4), torch.tensor([3, 1, 2, 1]), 1, 4),
    "a repeat of the largest": (torch.zeros(3), torch.tensor([3, 1, 3]), 1, 4),
}


@pytest.mark.parametrize("placement", ["cpu", "generic"])
@pytest.mark.parametrize("case", _BAD_REPADS.values(), ids=_BAD_REPADS.keys())
def test_repad_rejects_what_the_reference_rejects_with_its_message(case, placement) -> None:
    """Each check of repad's indices names the entry the reference names (its first bad one)."""
    with pytest.raises(ValueError) as expected:
        reference.repad(*case)
    with placements.placed(placement), pytest.raises(ValueError) as actual:
        impl.repad(*case)
    assert str(actual.value) == str(expected.value)


@pytest.mark.parametrize("responses_jagged", [True, False])
def test_pack_varlen_with_one_argument_jagged_and_the_other_rows(responses_jagged) -> None:
    """Prompts as rows and responses jagged (or the other way round): the host lengths of the
    rows and the one read of the jagged lengths end up on the right side."""
    prompts = [torch.tensor([5, 6]), torch.tensor([7]), torch.tensor([8, 9, 10])]
    responses = [torch.tensor([1]), torch.tensor([2, 3, 4]), torch.tensor([5, 6])]
    jagged = torch.nested.nested_tensor(responses if responses_jagged else prompts,
                                        layout=torch.jagged)
    args = (prompts, jagged) if responses_jagged else (jagged, responses)
    for placement in ("cpu", "generic"):
        with placements.placed(placement):
            assert_identical(impl.pack_varlen(*args), reference.pack_varlen(prompts, responses))


# --------------------------------------------------------------------------- two defects


def _pack_samples_first(prompts, responses, **kwargs):
    """pack_varlen validating the samples before pad_token_id, pad_to_multiple and
    position_ids_start (the reference checks them first)."""
    from batchproof.reference import varlen as ref

    ref._samples(prompts, responses)
    return ref.pack_varlen(prompts, responses, **kwargs)


def _support_before_routes(prompts, responses, **kwargs):
    """pack_varlen checking sample_support's structure before routed_experts' (the reference
    checks the routes first)."""
    from batchproof.reference import _routes
    from batchproof.reference import varlen as ref

    rows = ref._samples(prompts, responses)
    _routes.check_sample_support(kwargs.get("sample_support"), [len(r) for r in rows[1]])
    return ref.pack_varlen(prompts, responses, **kwargs)


def _router_mask_first(routed_experts, indices, batch, seqlen, **kwargs):
    """repad_routes checking router_padding_mask before the routes and the indices."""
    from batchproof.reference import _routes
    from batchproof.reference import varlen as ref

    mask = kwargs.get("router_padding_mask")
    if mask is not None and isinstance(routed_experts, torch.Tensor) and routed_experts.dim():
        _routes.check_router_padding_mask(mask, routed_experts.shape[0])
    return ref.repad_routes(routed_experts, indices, batch, seqlen, **kwargs)


def _start_first(position_ids, **kwargs):
    """packed_segments checking position_ids_start before the positions' type."""
    from batchproof.reference import varlen as ref

    ref._check_start(kwargs.get("position_ids_start", 0))
    return ref.packed_segments(position_ids, **kwargs)


def _width_first(flat_logprobs, packed, *, width=None):
    """unpack_response_logprobs checking the types of width and flat_logprobs before the
    packed batch."""
    from batchproof.reference import varlen as ref

    if width is not None:
        ref._check_int(width, "width")
    if not isinstance(flat_logprobs, torch.Tensor) or not flat_logprobs.is_floating_point():
        raise TypeError("flat_logprobs must be a float tensor")
    return ref.unpack_response_logprobs(flat_logprobs, packed, width=width)


def _mask_first(x, attention_mask):
    """unpad checking the mask's type and rank before x."""
    from batchproof.reference import varlen as ref

    if not isinstance(attention_mask, torch.Tensor) or attention_mask.is_floating_point():
        raise TypeError("attention_mask must be an integer tensor")
    if attention_mask.dim() != 2:
        raise ValueError("attention_mask must be 2-D")
    return ref.unpad(x, attention_mask)


def _indices_first(values, indices, batch, seqlen):
    """repad validating indices (type, dtype, rank, repeats) before values, batch and seqlen."""
    from batchproof.reference import varlen as ref

    if not isinstance(indices, torch.Tensor):
        raise TypeError("indices must be a tensor")
    if indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool:
        raise TypeError("indices must hold integers")
    if indices.dim() != 1 or len(set(indices.tolist())) < len(indices):
        raise ValueError("indices must be 1-D, without repeats")
    return ref.repad(values, indices, batch, seqlen)


def _samples_first(model, prompts, responses, **kwargs):
    """response_logprobs checking the samples (counts, empty prompts, token ids, the budget)
    before its options."""
    from batchproof.reference import varlen as ref

    vocab = ref._check_model(model)
    rows = ref._samples(prompts, responses)
    ref._check_vocab(rows[0], "prompts", vocab)
    ref._check_vocab(rows[1], "responses", vocab)
    budget = kwargs.get("max_tokens_per_batch")
    if isinstance(budget, int):
        ref._check_budget(*rows, budget)
    return ref.response_logprobs(model, prompts, responses, **kwargs)


@pytest.mark.parametrize("name, bad, candidate", [
    ("varlen.pack_varlen", "bad_pack_cases", _pack_samples_first),
    ("varlen.packed_segments", "bad_segment_cases", _start_first),
    ("varlen.unpack_response_logprobs", "bad_unpack_cases", _width_first),
    ("varlen.unpad", "bad_unpad_cases", _mask_first),
    ("varlen.repad", "bad_repad_cases", _indices_first),
    ("varlen.pack_varlen", "bad_pack_cases", _support_before_routes),
    ("varlen.repad_routes", "bad_repad_route_cases", _router_mask_first),
    ("varlen.response_logprobs", "bad_logprob_cases", _samples_first),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) and "." in v else "")
def test_invalid_inputs_with_two_defects_follow_the_references_first_error(
        name, bad, candidate) -> None:
    """Each record's invalid inputs include two defects on different arguments (issue 32): a
    validation order other than the reference's passes every one-defect input and fails."""
    from two_defects import assert_first_error_decides

    from batchproof.ops import varlen as records

    assert_first_error_decides(name, getattr(records, bad)(), candidate)


# --------------------------------------------------------------------------- router replay


def _padded_routes_round_trip(repad_routes) -> tuple[torch.Tensor, torch.Tensor]:
    """A left-padded (2, 4) batch's routes (uint8, one real token uncaptured) through `unpad`
    (like any x) and back through `repad_routes`."""
    routes = torch.tensor([[[[9, 9]], [[3, 1]], [[2, 5]], [[4, 0]]],
                           [[[9, 9]], [[9, 9]], [[6, 2]], [[1, 7]]]], dtype=torch.uint8)
    attention = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 1]])
    uncaptured = torch.tensor([[False, False, False, True], [False, False, False, False]])
    values, indices, _, _ = impl.unpad(routes, attention)
    flags, _, _, _ = impl.unpad(uncaptured, attention)
    out = repad_routes(values, indices, 2, 4, router_padding_mask=flags)
    return out["routed_experts"], out["router_padding_mask"]


def test_routes_unpad_like_any_x_and_repad_with_the_dummy_route() -> None:
    """unpad takes routes (B, S, layers, topk) like any x (dtype kept); repad_routes puts them
    back with the dummy route [0, 1] at the pads and at the uncaptured token, never zeros or
    the pads' old values; with the zero-filling zoo entry the pads come back [0, 0]."""
    routes, mask = _padded_routes_round_trip(impl.repad_routes)
    assert routes.dtype == torch.uint8
    assert routes[..., 0, :].tolist() == [[[0, 1], [3, 1], [2, 5], [0, 1]],
                                          [[0, 1], [0, 1], [6, 2], [1, 7]]]
    assert mask.tolist() == [[True, False, False, True], [True, True, False, False]]
    zeros, _ = _padded_routes_round_trip(zoo._repad_routes_with_zeros)
    assert zeros[0, 0, 0].tolist() == [0, 0]

"""Packed boundaries wherever a model reads them (issue 28), beyond the registry's checks:

- the hybrid and recurrent families of `batchproof.models`: impl's `packing="auto"` scores them one
  sample per row, refuses to pack them (`position_ids` / `mask`: RuntimeError, no reference twin),
  and its structural test of "layers that carry state" agrees with `Family.packs`; packed anyway
  (the zoo's `recurrent_state_across_samples`), each leaks beyond the tolerance — the negative
  control of docs/equivalence.md's table;
- the gradient comparison (`ops.varlen.prop_gradients`): its tolerance holds on clean runs and a
  detached normaliser fails it;

`python tests/test_varlen_boundaries.py` prints docs/equivalence.md's packed-vs-per-sample table.
"""

from __future__ import annotations

import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from batchproof.compare import LOGPROB_TOLERANCE, Mismatch
from batchproof.impl import varlen as impl
from batchproof.models import (
    ARCHITECTURES,
    FAMILIES,
    HYBRID_ARCHITECTURES,
    ModelCase,
    ModelSpec,
    hybrid_specs,
    specs,
    tiny_model,
    trainable_model,
)
from batchproof.mutation.zoo import varlen as zoo
from batchproof.ops.varlen import (
    HYBRID_PROMPTS,
    HYBRID_RESPONSES,
    assert_gradients_close,
    assert_response_logprobs_close,
    model_gradients,
    response_mask,
    unique_tokens,
)
from batchproof.reference import varlen as reference

pytest.importorskip("transformers")

FP32_TOL = LOGPROB_TOLERANCE[torch.float32][0]
ALL_SPECS = specs(architectures=tuple(FAMILIES))
HYBRIDS = hybrid_specs()
PROMPTS, RESPONSES = HYBRID_PROMPTS, HYBRID_RESPONSES


def test_every_family_is_available_and_tiny() -> None:
    """transformers 5.23 and 5.24 (the framework matrix) have every family; each is small."""
    assert {s.arch for s in ALL_SPECS} == set(FAMILIES)
    for spec in ALL_SPECS:
        model = spec.build()
        assert model.config.vocab_size == 128 and model.config.hidden_size == 64
        assert sum(p.numel() for p in model.parameters()) < 300_000, spec
        assert model.config._attn_implementation == spec.attn and not model.training


@pytest.mark.parametrize("spec", ALL_SPECS, ids=str)
def test_state_carrying_layers_agree_with_the_family_table(spec: ModelSpec) -> None:
    """impl decides by the model's modules, the registry by `Family.packs`: they must agree."""
    model = spec.build()
    assert bool(impl._state_carrying_layers(model)) == (not spec.packs)
    only_convolutions = spec.arch == "lfm2"  # LFM2: a short convolution and attention
    assert bool(impl._recurrent_layers(model)) == (not spec.packs and not only_convolutions)


@pytest.mark.parametrize("spec", HYBRIDS, ids=str)
@pytest.mark.parametrize("packing", ["position_ids", "mask"])
def test_packing_a_hybrid_model_is_refused(spec: ModelSpec, packing: str) -> None:
    model = spec.build()
    reference.response_logprobs(model, PROMPTS, RESPONSES, packing=packing)  # no twin there
    with pytest.raises(RuntimeError, match="carry state along the sequence outside attention"):
        impl.response_logprobs(model, PROMPTS, RESPONSES, packing=packing)


@pytest.mark.parametrize("spec", [ModelSpec("llama", "sdpa"), ModelSpec("mamba2", "eager"),
                                  ModelSpec("lfm2", "eager")], ids=str)
def test_auto_packs_attention_models_and_gives_hybrids_a_row_each(spec, monkeypatch) -> None:
    used = []
    for name in ("_packed_logprobs", "_row_logprobs"):
        original = getattr(impl, name)
        monkeypatch.setattr(impl, name, lambda *a, _o=original, _n=name, **k:
                            used.append(_n) or _o(*a, **k))
    impl.response_logprobs(spec.build(), PROMPTS, RESPONSES)
    assert used == (["_packed_logprobs"] if spec.packs else ["_row_logprobs"])


@pytest.mark.parametrize("spec", ALL_SPECS, ids=str)
def test_rows_match_the_per_sample_forwards(spec: ModelSpec) -> None:
    model = spec.build()
    case = ModelCase((PROMPTS, RESPONSES), model=spec)
    expected = reference.response_logprobs(model, PROMPTS, RESPONSES)
    for kwargs in ({}, {"max_tokens_per_batch": 8, "pad_to_multiple": 4}):
        actual = impl.response_logprobs(model, PROMPTS, RESPONSES, packing="rows", **kwargs)
        assert_response_logprobs_close(expected, actual, case=case)


def test_rows_micro_batches_respect_the_budget(monkeypatch) -> None:
    shapes = []
    forward = impl._forward_rows
    monkeypatch.setattr(impl, "_forward_rows", lambda model, ids, *rest:
                        shapes.append(tuple(ids.shape)) or forward(model, ids, *rest))
    model = tiny_model("mamba2", "eager")
    # samples of 7, 4, 6 tokens, budget 12: [7] (2 x 7 > 12), then [4, 6] (2 x 6), padded to 8
    impl.response_logprobs(model, PROMPTS, RESPONSES, max_tokens_per_batch=12, pad_to_multiple=8)
    assert shapes == [(1, 8), (2, 8)]


@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=12), budget=st.integers(9, 30))
def test_row_batches_are_greedy_and_within_budget(lengths, budget) -> None:
    ranges = impl._row_batches(lengths, budget)
    assert [r[0] for r in ranges] == [0] + [r[1] for r in ranges[:-1]]
    assert ranges[-1][1] == len(lengths)
    for first, last in ranges:
        assert (last - first) * max(lengths[first:last]) <= budget
        if last < len(lengths):  # greedy: the next sample would not have fitted
            assert (last + 1 - first) * max(lengths[first:last + 1]) > budget


def packed_anyway_delta(spec: ModelSpec, prompts=PROMPTS, responses=RESPONSES) -> float:
    """max |Δ| under the response mask when the hybrid model is packed like an attention model
    (the zoo's `recurrent_state_across_samples`) against the per-sample forwards."""
    model = spec.build()
    expected = reference.response_logprobs(model, prompts, responses)
    leaking = zoo.ENTRIES[[e.name for e in zoo.ENTRIES].index(
        "varlen.recurrent_state_across_samples")].replacement
    actual = leaking(model, prompts, responses)
    mask = response_mask(ModelCase((prompts, responses), model=spec))
    return float((expected - actual).abs()[mask].max())


@pytest.mark.parametrize("spec", HYBRIDS, ids=str)
def test_packing_a_hybrid_model_leaks_beyond_the_tolerance(spec: ModelSpec) -> None:
    """The negative control: transformers' PyTorch path carries state across the boundary. The
    first sample is untouched; the second differs by more than 10x the float32 tolerance."""
    delta = packed_anyway_delta(spec)
    assert delta > 10 * FP32_TOL, f"{spec}: |Δ| {delta:.3g}"
    first = packed_anyway_delta(spec, PROMPTS[:1], RESPONSES[:1])
    assert first <= FP32_TOL, f"{spec}: the first sample alone differs by {first:.3g}"


# --------------------------------------------------------------------------- gradients


def test_unique_tokens_keep_the_lengths_and_never_repeat() -> None:
    prompts, responses = unique_tokens([[1, 1], [1]], [[1], []])
    assert [len(p) for p in prompts] == [2, 1] and [len(r) for r in responses] == [1, 0]
    flat = [t for row in prompts + responses for t in row]
    assert len(set(flat)) == len(flat) and all(0 <= t < 128 for t in flat)
    assert unique_tokens([[1] * 100], [[2] * 29]) is None  # more tokens than the vocabulary


@pytest.mark.parametrize("spec", [ModelSpec("qwen3", "sdpa"), ModelSpec("bamba", "eager")],
                         ids=str)
def test_gradients_agree_and_a_detached_normaliser_does_not(spec: ModelSpec) -> None:
    model = trainable_model(spec)
    prompts, responses = unique_tokens(PROMPTS, RESPONSES)
    expected = model_gradients(reference.response_logprobs, model, prompts, responses, {})
    actual = model_gradients(impl.response_logprobs, model, prompts, responses,
                             {"max_tokens_per_batch": 8})
    worst = assert_gradients_close(expected, actual, torch.float32)
    assert worst["of_tolerance"] < 1, worst
    faulty = zoo._swapped(impl.response_logprobs, _token_logprobs=zoo._detached_normaliser)
    values = faulty(spec.build(), prompts, responses)  # the values are right...
    assert_response_logprobs_close(reference.response_logprobs(spec.build(), prompts, responses),
                                   values, case=ModelCase((prompts, responses), model=spec))
    wrong = model_gradients(faulty, model, prompts, responses, {})
    with pytest.raises(Mismatch, match="gradient of"):  # ... the gradients are not
        assert_gradients_close(expected, wrong, torch.float32)


def test_gradient_mismatch_names_the_input_embedding() -> None:
    expected = {"embed.weight": torch.zeros(4, 2), "w": torch.ones(3)}
    actual = {"embed.weight": torch.zeros(4, 2), "w": torch.ones(3)}
    actual["embed.weight"][2, 1] = 0.5
    with pytest.raises(Mismatch, match=r"the input embedding of responses\[0\]\[1\]"):
        assert_gradients_close(expected, actual, torch.float32, embedding="embed.weight",
                               tokens={2: "responses[0][1]"})
    actual["embed.weight"][2, 1] = 0.0
    actual["w"] = torch.ones(3) + 2e-5  # 2e-5 > 1e-5 x max(1, 1)
    with pytest.raises(Mismatch, match="gradient of w"):
        assert_gradients_close(expected, actual, torch.float32)


def test_the_trainable_copy_has_the_cached_weights() -> None:
    spec = ModelSpec("lfm2", "sdpa")
    trainable, cached = trainable_model(spec), spec.build()
    assert trainable is not cached and trainable is trainable_model(spec)
    assert all(p.requires_grad for p in trainable.parameters())
    assert not any(p.requires_grad for p in cached.parameters())
    for a, b in zip(trainable.state_dict().values(), cached.state_dict().values()):
        assert torch.equal(a, b)


def test_architecture_lists() -> None:
    assert set(ARCHITECTURES) | set(HYBRID_ARCHITECTURES) == set(FAMILIES)
    assert all(FAMILIES[a].packs for a in ARCHITECTURES)
    assert not any(FAMILIES[a].packs for a in HYBRID_ARCHITECTURES)
    with pytest.raises(ValueError, match="built with attention"):
        tiny_model("mamba2", "sdpa")
    with pytest.raises(ValueError, match="unknown architecture"):
        tiny_model("gpt2", "eager")


# --------------------------------------------------------------------------- the table


def table_batch(seed: int = 0, samples: int = 8):
    """docs/equivalence.md's batch: `samples` samples, prompt and response lengths uniform in
    1..8, tokens uniform in the vocabulary, from a seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (samples, 2), generator=generator).tolist()
    prompts = [torch.randint(0, 128, (p,), generator=generator).tolist() for p, _ in lengths]
    responses = [torch.randint(0, 128, (r,), generator=generator).tolist() for _, r in lengths]
    return prompts, responses


def measure_row(spec: ModelSpec, path: str, prompts, responses) -> dict[str, float]:
    """max / mean |Δ| of the logprobs (under the response mask) and of every parameter gradient
    of their sum, `path` against the per-sample dense forwards, on `spec`'s model."""
    from transformers.data.data_collator import DataCollatorWithFlattening

    from batchproof.adapters.huggingface import packed_forward_adapter

    function = {"impl": impl.response_logprobs,
                "transformers packed": packed_forward_adapter(DataCollatorWithFlattening)}[path]
    model = trainable_model(spec)
    mask = response_mask(ModelCase((prompts, responses), model=spec))
    with torch.no_grad():
        expected = reference.response_logprobs(model, prompts, responses)
        actual = function(model, prompts, responses)
    delta = (expected - actual).abs()[mask].double()
    grads_expected = model_gradients(reference.response_logprobs, model, prompts, responses, {})
    grads_actual = model_gradients(function, model, prompts, responses, {})
    grad_delta = torch.cat([(grads_expected[n] - grads_actual[n]).abs().reshape(-1)
                            for n in grads_expected]).double()
    scaled = max(float((grads_expected[n] - grads_actual[n]).abs().max())
                 / max(1.0, float(grads_expected[n].abs().max())) for n in grads_expected)
    return {"max": float(delta.max()), "mean": float(delta.mean()),
            "grad_max": float(grad_delta.max()), "grad_mean": float(grad_delta.mean()),
            "grad_scaled": scaled}


def print_table(dtypes=("float32", "bfloat16")) -> None:
    import transformers

    torch.set_num_threads(1)
    prompts, responses = table_batch()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, CPU")
    print("| family | attention | dtype | path | logprobs max / mean \\|Δ\\| | "
          "gradients max / mean \\|Δ\\| | max \\|Δg\\| / max(1, max \\|g\\|) |")
    print("|---|---|---|---|---|---|---|")
    for dtype in dtypes:
        for spec in specs(("cpu",), (dtype,), tuple(FAMILIES)):
            for path in ("impl", "transformers packed"):
                try:
                    row = measure_row(spec, path, prompts, responses)
                except Exception as err:  # noqa: BLE001 - the table says what failed
                    print(f"| {spec.arch} | {spec.attn} | {dtype} | {path} | "
                          f"{type(err).__name__}: {str(err)[:60]} | | |")
                    continue
                print(f"| {spec.arch} | {spec.attn} | {dtype} | {path} | {row['max']:.3g} / "
                      f"{row['mean']:.3g} | {row['grad_max']:.3g} / {row['grad_mean']:.3g} | "
                      f"{row['grad_scaled']:.3g} |")


if __name__ == "__main__":
    if sys.argv[1:] == ["--table"]:
        print_table()
    else:
        sys.exit(pytest.main([__file__]))

"""pytest-benchmark for `varlen`: packing (B=1024, prompts 50–500, responses 50–2000 tokens),
unpad/repad, and packed `response_logprobs` vs a dense padded forward at a fill ratio of ~50%.

Run serially (never under xdist), one intra-op thread so the ratios mean something on a shared
machine:

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest benchmarks/bench_varlen.py -p no:xdist \
        --benchmark-group-by=group --benchmark-columns=min,median,rounds

Each logprob benchmark stores tokens/s (real prompt + response tokens per second) in
`extra_info`; docs/varlen.md records one run.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from batchproof import blocks as hs
from batchproof.compare import assert_logprobs_close
from batchproof.impl import varlen as impl
from batchproof.models import tiny_model
from batchproof.perf.workloads import flatten_floor, rl_batch_inputs, write_floor
from batchproof.reference import varlen as reference

# --------------------------------------------------------------------------- pack_varlen

PROMPTS, RESPONSES, _ = rl_batch_inputs(batch=1024, seed=0)
J_PROMPTS = hs.jagged(PROMPTS, torch.int64)
J_RESPONSES = hs.jagged(RESPONSES, torch.int64)
TOKENS = sum(len(p) + len(r) for p, r in zip(PROMPTS, RESPONSES))
RESPONSE_TOKENS = sum(len(r) for r in RESPONSES)
PACK_OUTPUTS = [((1, TOKENS), torch.int64)] * 2 + [((RESPONSE_TOKENS,), torch.int64)] * 3


def _pack_list_floor():
    flatten_floor(PROMPTS, RESPONSES, dtypes=[np.int64, np.int64])
    write_floor(PACK_OUTPUTS)


PACK_VARIANTS = {
    "reference": lambda: reference.pack_varlen(PROMPTS, RESPONSES, pad_to_multiple=128),
    "impl (lists)": lambda: impl.pack_varlen(PROMPTS, RESPONSES, pad_to_multiple=128),
    "floor (lists)": _pack_list_floor,
    "impl (jagged)": lambda: impl.pack_varlen(J_PROMPTS, J_RESPONSES, pad_to_multiple=128),
    "floor (output write)": lambda: write_floor(PACK_OUTPUTS),
}


@pytest.mark.parametrize("variant", list(PACK_VARIANTS))
def test_pack_varlen(benchmark, variant):
    benchmark.group = f"varlen.pack_varlen (B=1024, {TOKENS / 1e6:.2f} M tokens)"
    rounds = 1 if variant == "reference" else 5
    benchmark.pedantic(PACK_VARIANTS[variant], rounds=rounds, iterations=1, warmup_rounds=1)


# --------------------------------------------------------------------------- unpad / repad

_GEN = torch.Generator().manual_seed(0)
X = torch.randn((32, 1024, 64), generator=_GEN)
MASK = torch.rand((32, 1024), generator=_GEN) < 0.5  # non-contiguous, ~50% kept
UNPADDED = impl.unpad(X, MASK)

UNPAD_VARIANTS = {
    "unpad reference": lambda: reference.unpad(X, MASK),
    "unpad impl": lambda: impl.unpad(X, MASK),
    "repad reference": lambda: reference.repad(UNPADDED[0], UNPADDED[1], 32, 1024),
    "repad impl": lambda: impl.repad(UNPADDED[0], UNPADDED[1], 32, 1024),
    "floor (output write)": lambda: write_floor([(tuple(UNPADDED[0].shape), torch.float32)]),
}


@pytest.mark.parametrize("variant", list(UNPAD_VARIANTS))
def test_unpad_repad(benchmark, variant):
    benchmark.group = "varlen.unpad/repad (32 x 1024 x 64 float32, 50% mask with holes)"
    rounds = 1 if "reference" in variant else 5
    benchmark.pedantic(UNPAD_VARIANTS[variant], rounds=rounds, iterations=1, warmup_rounds=1)


# --------------------------------------------------------------------------- logprobs


def logprob_inputs(batch: int = 16, longest: int = 512, seed: int = 0, vocab: int = 128):
    """Samples whose lengths are uniform in [8, longest] (fill ratio ~50% when padded to the
    longest), split 1:3 into prompt and response."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, longest + 1, batch)
    lengths[0] = longest
    prompts = [rng.integers(0, vocab, max(1, n // 4)).tolist() for n in lengths]
    responses = [rng.integers(0, vocab, n - max(1, n // 4)).tolist() for n in lengths]
    return prompts, responses


def dense_padded_logprobs(model, prompts, responses) -> torch.Tensor:
    """The dense replay being replaced: one left-padded (B, max(p + r)) forward with an attention
    mask, logits sliced [:, -R-1:-1], float32 log-softmax. (B, R) right-aligned like the rest."""
    width = max(len(p) + len(r) for p, r in zip(prompts, responses))
    r_width = max(len(r) for r in responses)
    ids = torch.zeros((len(prompts), width), dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        row = p + r
        ids[i, width - len(row):] = torch.tensor(row)
        mask[i, width - len(row):] = 1
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                       use_cache=False, logits_to_keep=r_width + 1).logits[:, :-1]
        logprobs = torch.log_softmax(logits.float(), -1)
        out = logprobs.gather(-1, ids[:, width - r_width:, None]).squeeze(-1)
    response_cols = torch.arange(r_width)[None] >= r_width - torch.tensor(
        [len(r) for r in responses])[:, None]
    return torch.where(response_cols, out, torch.zeros(()))


LOGPROB_PROMPTS, LOGPROB_RESPONSES = logprob_inputs()
LOGPROB_TOKENS = sum(len(p) + len(r) for p, r in zip(LOGPROB_PROMPTS, LOGPROB_RESPONSES))
PADDED_TOKENS = len(LOGPROB_PROMPTS) * max(
    len(p) + len(r) for p, r in zip(LOGPROB_PROMPTS, LOGPROB_RESPONSES))
FILL = LOGPROB_TOKENS / PADDED_TOKENS

LOGPROB_VARIANTS = {
    "dense padded": lambda m: dense_padded_logprobs(m, LOGPROB_PROMPTS, LOGPROB_RESPONSES),
    "packed, default budget (2 x longest = 1024)": lambda m: impl.response_logprobs(
        m, LOGPROB_PROMPTS, LOGPROB_RESPONSES),
    "packed, budget 2048": lambda m: impl.response_logprobs(
        m, LOGPROB_PROMPTS, LOGPROB_RESPONSES, max_tokens_per_batch=2048),
    "packed, one row": lambda m: impl.response_logprobs(
        m, LOGPROB_PROMPTS, LOGPROB_RESPONSES, max_tokens_per_batch=LOGPROB_TOKENS),
}


def small_llama(attn: str = "sdpa") -> torch.nn.Module:
    """A wider model whose linear layers dominate (hidden 256, MLP 1024, 2 layers, vocab 512),
    closer to real models than the 64-wide test models, where attention and overhead dominate."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(hidden_size=256, intermediate_size=1024, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, vocab_size=512,
                         max_position_embeddings=1024)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    return model.requires_grad_(False).eval()


MODELS = {
    "tiny llama-sdpa (hidden 64)": lambda: tiny_model("llama", "sdpa"),
    "tiny llama-eager (hidden 64)": lambda: tiny_model("llama", "eager"),
    "small llama-sdpa (hidden 256)": small_llama,
}
_BUILT: dict[str, torch.nn.Module] = {}


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("variant", list(LOGPROB_VARIANTS))
def test_response_logprobs(benchmark, variant, model_name):
    model = _BUILT.setdefault(model_name, MODELS[model_name]())
    expected = impl.response_logprobs(model, LOGPROB_PROMPTS, LOGPROB_RESPONSES)
    got = LOGPROB_VARIANTS[variant](model)
    assert_logprobs_close(expected, got, expected != 0, torch.float32)  # same numbers, first
    benchmark.group = (f"varlen.response_logprobs, {model_name}, B=16, {LOGPROB_TOKENS} tokens, "
                       f"fill {FILL:.0%}")
    benchmark.pedantic(LOGPROB_VARIANTS[variant], args=(model,), rounds=3, iterations=1,
                       warmup_rounds=1)
    benchmark.extra_info["tokens_per_s"] = LOGPROB_TOKENS / benchmark.stats.stats.min
    benchmark.extra_info["fill"] = FILL

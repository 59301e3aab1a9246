"""pytest-benchmark for `pipeline.rl_step`: one RL step of 256 trajectories (step-wise, 1–3 turns,
anti-correlated prompt/response lengths, tool tokens) on the tiny float32 Llama (eager), dp 4,
mini-batch 8, a 1024-token micro-batch budget (and 256 for the impl): the impl chain (impl ops,
packed forwards, nested dispatch) vs the reference chain (reference ops, one dense forward per sample).

Run serially (never under xdist), one intra-op thread so the ratio means something on a shared
machine:

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest benchmarks/bench_pipeline.py -p no:xdist \
        --benchmark-columns=min,median,rounds

docs/pipeline.md records one run.
"""

from __future__ import annotations

import random

import pytest

from batchproof.compare import assert_logprobs_close
from batchproof.impl import pipeline as impl
from batchproof.models import tiny_model
from batchproof.reference import pipeline as reference

CONFIG = dict(dp_size=4, mini_batch_size=8, max_tokens=1024, sp_size=2, pad_token_id=0,
              eos_token_id=1)


def rollouts(trajectories: int = 256, seed: int = 0):
    """Step rows of `trajectories` multi-turn trajectories (4 per prompt), rows interleaved."""
    rng = random.Random(seed)
    rows, scores = [], []
    for t in range(trajectories):
        if t % 4 == 0:
            first = [rng.randrange(2, 128) for _ in range(rng.randint(8, 32))]
        prompt, longest = list(first), rng.randint(16, 64)
        for _ in range(rng.randint(1, 3)):
            length = rng.randint(0, longest)
            longest = length
            response = [rng.randrange(2, 128) for _ in range(length)]
            mask = [0 if rng.random() < 0.2 else 1 for _ in range(length)]
            rows.append((t, prompt, response, mask))
            prompt = prompt + response + [rng.randrange(2, 128) for _ in range(rng.randint(0, 8))]
        scores.append(rng.choice([0.0, 1.0, -1.0, 0.5]))
    rng.shuffle(rows)
    traj_ids, prompts, responses, masks = (list(c) for c in zip(*rows))
    return prompts, responses, masks, traj_ids, scores


MODEL = tiny_model("llama", "eager")
ARGS = rollouts()
VARIANTS = {
    "reference chain": (reference.rl_step, CONFIG),
    "impl chain": (impl.rl_step, CONFIG),
    "impl chain, budget 256": (impl.rl_step, {**CONFIG, "max_tokens": 256}),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_rl_step(benchmark, name):
    benchmark.group = "pipeline.rl_step (256 trajectories)"
    benchmark.extra_info["rows"] = len(ARGS[0])
    benchmark.extra_info["tokens"] = sum(len(p) + len(r) for p, r in zip(ARGS[0], ARGS[1]))
    function, config = VARIANTS[name]
    out = benchmark.pedantic(function, args=(MODEL, *ARGS), kwargs=config, rounds=3,
                             iterations=1, warmup_rounds=1)
    assert out.batch_size[0] == sum(len(r) for r in ARGS[1]) + int(out["is_padding"].sum())


def test_chains_agree():
    expected = reference.rl_step(MODEL, *ARGS, **CONFIG)
    actual = impl.rl_step(MODEL, *ARGS, **CONFIG)
    assert_logprobs_close(expected["logprob"], actual["logprob"],
                          expected["logprob"] == expected["logprob"], expected["logprob"].dtype)

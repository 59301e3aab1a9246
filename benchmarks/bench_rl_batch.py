"""pytest-benchmark for `build_rl_batch` at B=1024, prompts 50–500, responses 50–2000 tokens.

Run serially (never under xdist): `.venv/bin/python -m pytest benchmarks/bench_rl_batch.py -p no:xdist`
Compare within one run with `--benchmark-group-by=group`; `harness bench --op rl_batch` prints the
same variants as ratios to the floor.
"""

import pytest

from batchproof.perf.workloads import rl_batch_workload

WORKLOAD = rl_batch_workload()


@pytest.mark.parametrize("variant", list(WORKLOAD.variants))
def test_build_rl_batch(benchmark, variant):
    benchmark.group = "rl_batch.build_rl_batch"
    fn = WORKLOAD.variants[variant]
    if variant == "reference":
        benchmark.pedantic(fn, rounds=1, iterations=1)
    else:
        benchmark.pedantic(fn, rounds=7, iterations=1, warmup_rounds=1)

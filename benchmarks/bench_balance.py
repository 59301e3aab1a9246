"""pytest-benchmark for `balance`: `karmarkar_karp` and `micro_batches` at n = 8192 sequence
lengths (prompt 50–500 + response 50–2000 tokens), k = 64 partitions / about 64 micro-batches;
reference vs impl, measured in one run. Plus the quality number that matters for micro-batches:
their count against the lower bound ceil(total / max_tokens), averaged over random batches.

Run serially (never under xdist):
    .venv/bin/python -m pytest benchmarks/bench_balance.py -p no:xdist --benchmark-group-by=group
or, for a plain summary table (timings and the count gap):
    .venv/bin/python benchmarks/bench_balance.py
"""

from __future__ import annotations

import random
import statistics
import time

import pytest

import batchproof.impl.balance as impl
import batchproof.reference.balance as ref

N, K = 8192, 64


def sequence_lengths(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(50, 500) + rng.randint(50, 2000) for _ in range(n)]


def budget_for(lengths: list[int], count: int) -> int:
    """The budget whose lower bound ceil(total / budget) is `count`."""
    return -(-sum(lengths) // count)


LENGTHS = sequence_lengths(N, seed=0)
BUDGET = budget_for(LENGTHS, K)
MODULES = {"reference": ref, "impl": impl}


def _rounds(variant: str) -> dict:
    if variant == "reference":
        return {"rounds": 1, "iterations": 1}
    return {"rounds": 5, "iterations": 1, "warmup_rounds": 1}


@pytest.mark.parametrize("variant", list(MODULES))
def test_karmarkar_karp(benchmark, variant: str) -> None:
    benchmark.group = f"balance.karmarkar_karp n={N} k={K}"
    fn = MODULES[variant].karmarkar_karp
    result = benchmark.pedantic(fn, args=(LENGTHS, K), **_rounds(variant))
    assert len(result) == K


@pytest.mark.parametrize("variant", list(MODULES))
def test_micro_batches(benchmark, variant: str) -> None:
    benchmark.group = f"balance.micro_batches n={N} max_tokens={BUDGET}"
    fn = MODULES[variant].micro_batches
    result = benchmark.pedantic(fn, args=(LENGTHS, BUDGET), **_rounds(variant))
    benchmark.extra_info["micro_batches"] = len(result)
    benchmark.extra_info["lower_bound"] = -(-sum(LENGTHS) // BUDGET)


def count_gap(batches: int = 50, n: int = 1024, seed: int = 1) -> dict[str, float]:
    """Micro-batch count minus ceil(total / max_tokens) over random batches and budgets."""
    rng = random.Random(seed)
    gaps, tight = [], 0
    for _ in range(batches):
        lengths = sequence_lengths(n, rng.randrange(2**32))
        budget = max(max(lengths), budget_for(lengths, rng.choice([4, 8, 16, 32, 64])))
        gap = len(impl.micro_batches(lengths, budget)) - -(-sum(lengths) // budget)
        gaps.append(gap)
        tight += gap == 0
    return {"mean_gap": statistics.mean(gaps), "max_gap": max(gaps), "at_bound": tight / batches}


def test_micro_batch_count_gap(benchmark) -> None:
    benchmark.group = "balance.micro_batches count gap"
    stats = benchmark.pedantic(count_gap, rounds=1, iterations=1)
    benchmark.extra_info.update(stats)


def _best_of(fn, *args, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    print(f"n = {N} lengths, k = {K}, micro-batch budget {BUDGET} tokens "
          f"(lower bound {-(-sum(LENGTHS) // BUDGET)} micro-batches)")
    for name, args in (("karmarkar_karp", (LENGTHS, K)), ("micro_batches", (LENGTHS, BUDGET))):
        t_ref = _best_of(getattr(ref, name), *args, rounds=1)
        t_impl = _best_of(getattr(impl, name), *args, rounds=5)
        print(f"{name:16s} reference {t_ref * 1e3:9.1f} ms   impl {t_impl * 1e3:8.1f} ms   "
              f"speed-up {t_ref / t_impl:6.1f}x")
    count = len(impl.micro_batches(LENGTHS, BUDGET))
    print(f"micro_batches count at n={N}: {count}")
    print("count gap over 50 random batches of 1024:", count_gap())


if __name__ == "__main__":
    main()

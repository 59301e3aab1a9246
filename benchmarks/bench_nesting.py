"""pytest-benchmark for `nesting`: nest_by_mask + unnest_by_mask on a batch shaped like verl's run
(512 samples, max prompt 2048, max response 14336, ~8% of the tokens real), impl vs reference vs
the floors, plus the payload report of that batch.

Run serially (never under xdist):
    .venv/bin/python -m pytest benchmarks/bench_nesting.py -p no:xdist --benchmark-group-by=group
or, for the table of ratios and the payload numbers quoted in docs/nesting.md:
    .venv/bin/python benchmarks/bench_nesting.py [--rounds 5] [--device cuda]

The reference runs on the first 64 samples only (it loops in Python); its time is compared per
sample. Floors, measured in the same run:
    copy real bytes    clone every jagged values tensor of the nested batch once (the bytes that
                       are really there)
    copy dense batch   clone the dense batch once (what unnesting must write, and the size of the
                       masks nesting must read)
"""

from __future__ import annotations

import argparse
import functools
import time

import pytest

from batchproof.perf.workloads import (
    BENCH_BATCH,
    BENCH_MAX_PROMPT,
    BENCH_MAX_RESPONSE,
    REFERENCE_ROWS,
    Workload,
    nesting_workload,
    verl_batch,
)

BATCH, MAX_PROMPT, MAX_RESPONSE = BENCH_BATCH, BENCH_MAX_PROMPT, BENCH_MAX_RESPONSE

@functools.cache
def _workload() -> Workload:
    return nesting_workload()


@pytest.mark.parametrize("variant", ["reference", "impl nest", "impl unnest",
                                     "impl nest+unnest", "floor (copy real bytes)",
                                     "floor (copy dense batch)"])
def test_nest_unnest(benchmark, variant):
    benchmark.group = "nesting.nest+unnest (verl-shaped, 8% fill)"
    fn = _workload().variants[variant]
    if variant == "reference":
        benchmark.pedantic(fn, rounds=1, iterations=1)
    else:
        benchmark.pedantic(fn, rounds=5, iterations=1, warmup_rounds=1)


# --------------------------------------------------------------------------- the report


def payload_numbers(device: str = "cpu") -> dict:
    from batchproof.impl import nesting as impl

    dense = verl_batch(device=device)
    nested = impl.nest_by_mask(dense, pad_token_id=0, strict=True)
    report = impl.payload_report(dense, nested)
    fill = float(dense["attention_mask"].float().mean())
    return {"fill": fill, "report": report}


def best_times(workload: Workload, rounds: int) -> dict[str, float]:
    best = {}
    for name, fn in workload.variants.items():
        times = []
        for _ in range(1 if name == "reference" else rounds + 1):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        best[name] = min(times[1:] if len(times) > 1 else times)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    numbers = payload_numbers(args.device)
    report = numbers["report"]
    print(f"payload, B={BATCH} P={MAX_PROMPT} R={MAX_RESPONSE}, fill {numbers['fill']:.1%}:")
    for name in ("dense_bytes", "nested_bytes", "ceiling_bytes", "wire_bytes_dense",
                 "wire_bytes_nested"):
        print(f"  {name:18s} {getattr(report, name) / 1e6:10.2f} MB")
    print(f"  compression {report.compression:.2f}x, ceiling {report.ceiling:.2f}x, "
          f"efficiency {report.efficiency:.4f}, wire compression {report.wire_compression:.2f}x")
    workload = nesting_workload(device=args.device)
    best = best_times(workload, args.rounds)
    floor_real, floor_dense = best["floor (copy real bytes)"], best["floor (copy dense batch)"]
    per_sample_ref = best["reference"] / REFERENCE_ROWS
    print(f"\ntimes ({workload.size}, device {args.device}, best of {args.rounds}):")
    for name, seconds in best.items():
        print(f"  {name:26s} {seconds * 1e3:10.1f} ms   {seconds / floor_real:7.2f}x real copy   "
              f"{seconds / floor_dense:6.2f}x dense copy")
    impl_per_sample = best["impl nest+unnest"] / BATCH
    print(f"  reference per sample {per_sample_ref * 1e3:.2f} ms, impl per sample "
          f"{impl_per_sample * 1e3:.3f} ms: impl {per_sample_ref / impl_per_sample:.0f}x faster")


if __name__ == "__main__":
    main()

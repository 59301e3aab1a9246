"""pytest-benchmark for `collate_sft` and `pack_sft`: 1024 SFT examples of 50–2000 tokens.

Run serially (never under xdist), one intra-op thread (the machine's cores are shared):

    .venv/bin/python -m pytest benchmarks/bench_sft.py -p no:xdist --benchmark-group-by=group

or `python benchmarks/bench_sft.py` for the ratio table (every variant timed in one process,
interleaved round by round, best of 7; the reference once). pack_sft runs with dp=8, tp=2,
cp=2 (a = 8) and capacity 16384. The workloads live in `harness/workloads.py` (also used by
`batchproof bench --op sft`).
"""

from __future__ import annotations

import pytest
import torch

from batchproof.perf.workloads import Workload, collate_sft_workload, pack_sft_workload

WORKLOADS = {"collate_sft": collate_sft_workload, "pack_sft": pack_sft_workload}
_BUILT: dict[str, Workload] = {}


def _workload(name: str) -> Workload:
    if name not in _BUILT:
        _BUILT[name] = WORKLOADS[name]()
    return _BUILT[name]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("variant", ["reference", "impl (lists)", "floor (lists)",
                                     "impl (tensors)", "floor (output write)"])
@pytest.mark.parametrize("function", list(WORKLOADS))
def test_sft(benchmark, function, variant):
    benchmark.group = f"sft.{function}"
    fn = _workload(function).variants[variant]
    if variant == "reference":
        benchmark.pedantic(fn, rounds=1, iterations=1)
    else:
        benchmark.pedantic(fn, rounds=7, iterations=1, warmup_rounds=1)


def main(rounds: int = 7) -> None:
    """The ratio table, every variant timed in one process (as `batchproof bench` does)."""
    from batchproof.perf.bench import medians, ratios, time_variants

    torch.set_num_threads(1)
    for name in WORKLOADS:
        workload = _workload(name)
        best = medians(time_variants(workload, rounds, "cpu"))  # the median of the rounds
        print(f"\nsft.{name} — {workload.size}, {workload.output_bytes / 1e6:.0f} MB of outputs")
        for variant, text in ratios(best).items():
            print(f"  {variant:22s} {best[variant] * 1e3:9.1f} ms   {text}")
        impl, reference = best["impl (lists)"], best["reference"]
        print(f"  impl (lists) vs reference: {reference / impl:.1f}x faster; "
              f"vs floor (lists): {impl / best['floor (lists)']:.2f}x")


if __name__ == "__main__":
    main()

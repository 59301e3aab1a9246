"""The benchmark gate's measurements (benchmarks/gate.py compares them with the stored baseline).

Each case times one op's fast path with pytest-benchmark (`benchmark.pedantic`, one warm-up
round); the `setup` of every round first times what the case is measured against (the
reference, or the floor of the input form) with the same timer, so every round interleaves them
in this one process. The ratios (best / best) go into `extra_info`, where `gate.py` reads them.

Run it through the gate (serially, never under xdist; one torch and one Numba thread):

    .venv/bin/python benchmarks/gate.py check        # = make bench-gate
"""

from __future__ import annotations

import gate
import pytest
import torch
from pytest_benchmark.utils import load_timer


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """One intra-op thread for torch and Numba: CPU time then counts one thread's work."""
    from batchproof.impl import kernels

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    if kernels.available():
        kernels.use_threads()
    yield
    torch.set_num_threads(saved)
    if kernels.available():
        kernels.use_threads()


@pytest.mark.parametrize("case", gate.CASES, ids=[case.id for case in gate.CASES])
def test_gate(benchmark, request, case: gate.Case) -> None:
    timer = request.config.getoption("benchmark_timer")  # what pytest-benchmark times with
    clock = load_timer(timer).target
    variants = case.variants()
    against: dict[str, list[float]] = {name: [] for name in case.against}

    def time_against() -> None:
        for name in case.against:
            start = clock()
            variants[name]()
            against[name].append(clock() - start)

    benchmark.group = "benchmark gate"
    benchmark.pedantic(variants[case.target], setup=time_against, rounds=case.rounds,
                       warmup_rounds=gate.WARMUP_ROUNDS)
    if not benchmark.enabled:  # --benchmark-disable (or xdist): one call each, nothing stored
        return
    measured = {name: times[gate.WARMUP_ROUNDS:] for name, times in against.items()}
    benchmark.extra_info.update(gate.record(case, list(benchmark.stats.stats.data), measured,
                                            str(timer)))

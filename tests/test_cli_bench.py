"""`batchproof bench` (`batchproof.cli.bench`): the options reach `batchproof.perf.bench.main`
as they were given, `--device cuda` without a GPU and the benchmark's own refusals are one-line
usage errors. The benchmark itself is a stand-in here (tests/test_bench.py measures); these
tests are the killers of `batchproof mutate --mutmut --harness cli/bench`."""

from __future__ import annotations

import pytest
import torch

from batchproof.cli import main
from batchproof.perf import bench as bench_module


@pytest.fixture
def benchmark_calls(monkeypatch):
    calls = []
    monkeypatch.setattr(bench_module, "main", lambda **kwargs: calls.append(kwargs) or 0)
    return calls


def test_the_options_reach_the_benchmark(benchmark_calls, tmp_path) -> None:
    report = str(tmp_path / "bench.json")
    assert main(["bench", "--op", "rl_batch", "--op", "varlen", "--json", report, "--quick",
                 "--pages", "warm", "--batch", "8", "--batch", "16", "--processes", "3",
                 "--clock", "cpu"]) == 0
    assert benchmark_calls == [dict(ops=["rl_batch", "varlen"], device="cpu", json_path=report,
                                    quick=True, pages="warm", scale="default",
                                    per_core_mode=False, batches=[8, 16], processes=3,
                                    conditions=None, clock="cpu")]
    assert main(["bench", "--per-core", "--condition", "quiet-1", "--condition", "busy"]) == 0
    assert benchmark_calls[-1]["conditions"] == ["quiet-1", "busy"]


def test_the_defaults_reach_the_benchmark(benchmark_calls) -> None:
    assert main(["bench", "--per-core"]) == 0
    assert benchmark_calls == [dict(ops=None, device="cpu", json_path=None, quick=False,
                                    pages="system", scale="default", per_core_mode=True,
                                    batches=None, processes=None, conditions=None,
                                    clock="wall")]


def test_the_benchmarks_status_is_the_commands(monkeypatch) -> None:
    monkeypatch.setattr(bench_module, "main", lambda **kwargs: 2)
    assert main(["bench"]) == 2


def test_cuda_without_a_gpu_is_a_usage_error(benchmark_calls, monkeypatch, capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "--device", "cuda"]) == 2
    assert capsys.readouterr().err == "batchproof: error: --device cuda: no CUDA device here\n"
    assert benchmark_calls == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert main(["bench", "--device", "cuda", "--scale", "h100"]) == 0
    assert [(c["device"], c["scale"]) for c in benchmark_calls] == [("cuda", "h100")]


def test_a_refusal_of_the_benchmark_is_a_one_line_usage_error(capsys) -> None:
    assert main(["bench", "--per-core", "--scale", "h100"]) == 2
    assert capsys.readouterr().err == (
        "batchproof: error: --per-core times the CPU lists forms: it takes neither --device "
        "cuda nor --scale h100\n")

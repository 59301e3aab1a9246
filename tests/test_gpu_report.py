"""Smoke test of benchmarks/gpu_report.py on the CPU at its quick size (eager and sdpa only:
flex_attention compiles its kernels first, tens of seconds on a cold machine)."""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
import types
from pathlib import Path

import pytest
import torch

from batchproof.compare import LOGPROB_TOLERANCE
from batchproof.models import ARCHITECTURES

CPU = torch.device("cpu")
ATTNS = ("eager", "sdpa")
DTYPES = ("float32", "bfloat16")


@pytest.fixture(scope="module")
def report():
    """benchmarks/gpu_report.py as a module (registered while the tests run: its dataclasses
    look their module up in sys.modules)."""
    name = "batchproof_gpu_report_under_test"
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_report.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]


@pytest.fixture(scope="module")
def delta_rows(report) -> list[dict]:
    return report.delta_rows(CPU, quick=True, attns=ATTNS)


def test_delta_table_has_one_row_per_arch_attn_dtype(report, delta_rows) -> None:
    keys = [(r["arch"], r["attn"], r["dtype"]) for r in delta_rows]
    assert keys == list(itertools.product(ARCHITECTURES, ATTNS, DTYPES))
    table = report.delta_markdown(delta_rows, quick=True).splitlines()
    assert len([line for line in table if line.startswith("| ") and "---" not in line]) == 1 + 12
    assert not any("failed" in line for line in table)


def test_delta_rows_are_within_the_comparator_tolerance(delta_rows) -> None:
    for r in delta_rows:
        assert r["error"] is None, r
        assert r["within"] is True and r["verdict"] == "yes", r
        assert r["tokens"] > 0 and 0.0 <= r["mean_abs"] <= r["max_abs"], r
        assert r["tol_max"] == LOGPROB_TOLERANCE[getattr(torch, r["dtype"])][0]
        if r["dtype"] == "float32":
            assert r["max_abs"] < 1e-4, r


def test_delta_row_measures_a_difference(report, monkeypatch) -> None:
    """A packed path that is off by 1% is measured as such and marked beyond the tolerance."""
    real = report.impl.response_logprobs
    monkeypatch.setattr(report, "impl", types.SimpleNamespace(
        response_logprobs=lambda *a, **k: real(*a, **k) * 1.01))
    prompts, responses = report.draw_samples(4, 1, 15)
    row = report.delta_row("llama", "sdpa", "float32", CPU, prompts, responses, 64)
    assert row["error"] is None and row["within"] is False and row["verdict"].startswith("NO")
    assert row["max_abs"] > 1e-3


def test_a_failing_row_is_reported_and_the_others_go_on(report) -> None:
    rows = report.delta_rows(CPU, quick=True, archs=("llama",), attns=("no_such_attn", "sdpa"),
                             dtypes=("float32",))
    assert [r["attn"] for r in rows] == ["no_such_attn", "sdpa"]
    assert rows[0]["error"].startswith("ValueError: unknown attention implementation")
    assert rows[1]["error"] is None and rows[1]["max_abs"] < 1e-4
    assert "| failed: ValueError: unknown attention" in report.delta_markdown(rows, quick=True)


def test_throughput_table_on_the_cpu(report) -> None:
    setup, rows, notes = report.throughput_rows(CPU, quick=True, attns=ATTNS)
    assert (setup.batch, setup.segment) == (4, 16)
    assert [(r["attn"], r["path"]) for r in rows] == [
        (a, p) for a in ATTNS for p in ("dense padded", "packed")]
    for r in rows:
        assert r["error"] is None, r
        assert r["tokens_per_s"] > 0 and math.isclose(r["tokens_per_s"],
                                                      r["real_tokens"] / r["median_s"])
        assert len(r["times"]) == setup.runs
    dense, packed = rows[0], rows[1]
    assert 0.0 < dense["padding_fraction"] < 1.0
    assert packed["micro_batches"] >= 1 and packed["max_abs_vs_dense"] < 1e-4
    assert math.isclose(packed["vs_dense"], dense["median_s"] / packed["median_s"])
    assert set(notes) == {"sdpa backends, dense padded", "sdpa backends, packed"}
    assert all(v["MATH"] == "ok" for v in notes.values())
    table = report.throughput_markdown(setup, rows, notes)
    assert table.count("| dense padded |") == 2 and table.count("| packed |") == 2


def test_the_gpu_session_runs_every_test_file_with_a_gpu_test() -> None:
    """`benchmarks/gpu_session.sh`'s pytest stage names its files: a file with a `gpu`-marked
    test that it leaves out would never run on a lent GPU (test_host_reads.py and test_cp.py
    were left out until 2026-11-27)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    script = (root / "benchmarks" / "gpu_session.sh").read_text()
    stage = script[script.index("if has pytest; then"):script.index("if has verify; then")]
    named = set(re.findall(r"tests/(test_\w+\.py)", stage))
    marker = re.compile(r"^\s*@pytest\.mark\.gpu\b|^pytestmark = .*pytest\.mark\.gpu", re.M)
    with_gpu = {path.name for path in (root / "tests").glob("test_*.py")
                if marker.search(path.read_text())}
    assert with_gpu <= named, sorted(with_gpu - named)

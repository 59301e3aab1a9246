"""The benchmark gate (benchmarks/gate.py): its comparison of ratios with the stored baseline, and
one real run that must fail on a planted slow fast path (docs/performance.md, "The benchmark
gate").

The comparison tests use made-up ratios (no timing). The planted run times for real, but its
planted twin (varlen's `pack_varlen` replaced by the reference's: the same outputs, a path
~25x slower) moves the gated ratio far beyond the 2x threshold and any noise measured on these
machines; it asserts only that the gate fails, never a time."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GATE_FILE = ROOT / "benchmarks" / "gate.py"


@pytest.fixture(scope="module")
def gate():
    """benchmarks/gate.py as a module (registered while the tests run: its dataclasses look
    their module up in sys.modules)."""
    name = "batchproof_gate_under_test"
    spec = importlib.util.spec_from_file_location(name, GATE_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]


BASELINE = {"op/reference": {"reference": 0.01}, "op/lists": {"floor (lists)": 0.9}}


def outcomes(rows) -> dict[tuple[str, str], str]:
    return {(row.case, row.against): str(row.outcome) for row in rows}


def test_ratios_within_their_threshold_pass(gate) -> None:
    current = {"op/reference": {"reference": 0.019}, "op/lists": {"floor (lists)": 0.4}}
    rows = gate.compare(current, BASELINE, {"op/reference": 2.0, "op/lists": 2.0})
    assert set(outcomes(rows).values()) == {"ok", "faster"}
    assert outcomes(rows)[("op/lists", "floor (lists)")] == "faster"
    assert gate.verdict(rows)[0] == 0


def test_a_ratio_grown_beyond_its_threshold_fails_naming_the_case(gate) -> None:
    current = {"op/reference": {"reference": 0.021}, "op/lists": {"floor (lists)": 0.9}}
    rows = gate.compare(current, BASELINE, {"op/reference": 2.0, "op/lists": 2.0})
    assert outcomes(rows) == {("op/reference", "reference"): "SLOWER",
                              ("op/lists", "floor (lists)"): "ok"}
    status, line = gate.verdict(rows)
    assert status == 1 and "op/reference (SLOWER)" in line and "op/lists" not in line


def test_each_case_has_its_own_threshold(gate) -> None:
    current = {"op/reference": {"reference": 0.025}, "op/lists": {"floor (lists)": 2.0}}
    rows = gate.compare(current, BASELINE, {"op/reference": 3.0, "op/lists": 2.0})
    assert outcomes(rows) == {("op/reference", "reference"): "ok",
                              ("op/lists", "floor (lists)"): "SLOWER"}


def test_a_case_a_full_run_did_not_measure_fails(gate) -> None:
    rows = gate.compare({"op/lists": {"floor (lists)": 0.9}}, BASELINE, {})
    assert outcomes(rows)[("op/reference", "reference")] == "MISSING"
    assert gate.verdict(rows)[0] == 1


def test_a_selection_compares_only_what_it_measured(gate) -> None:
    rows = gate.compare({"op/lists": {"floor (lists)": 0.9}}, BASELINE, {}, selection=True)
    assert outcomes(rows) == {("op/lists", "floor (lists)"): "ok"}
    assert gate.verdict(rows)[0] == 0


def test_a_case_without_a_baseline_fails(gate) -> None:
    current = {**BASELINE, "op/new": {"floor (lists)": 1.0}}
    rows = gate.compare(current, BASELINE, {})
    assert outcomes(rows)[("op/new", "floor (lists)")] == "NO BASELINE"
    assert gate.verdict(rows)[0] == 1


def test_an_empty_run_fails(gate) -> None:
    assert gate.verdict(gate.compare({}, {}, {}))[0] == 1


def test_a_ratio_is_best_over_best_of_the_same_rounds(gate) -> None:
    case = gate.Case("op/lists", "op", "B=1", dict, "impl", ("floor", "reference"), rounds=3)
    info = gate.record(case, [3.0, 1.0, 2.0], {"floor": [4.0, 2.0, 5.0],
                                                "reference": [50.0, 40.0, 90.0]}, "t.clock")
    assert info["ratios"] == {"floor": 0.5, "reference": 0.025}
    assert info["gate_case"] == "op/lists" and info["timer"] == "t.clock"
    assert info["seconds"]["impl"] == [3.0, 1.0, 2.0]


def _run_file(path: Path, timer: str, ratios: dict[str, dict[str, float]]) -> Path:
    """A pytest-benchmark JSON file as bench_gate.py writes it (only the fields gate.py reads)."""
    benchmarks = [{"extra_info": {"gate_case": case, "timer": timer, "ratios": value}}
                  for case, value in ratios.items()]
    path.write_text(json.dumps({"benchmarks": benchmarks}))
    return path


def test_runs_timed_with_different_clocks_are_not_compared(gate, tmp_path, capsys) -> None:
    run = _run_file(tmp_path / "run.json", "time.perf_counter", BASELINE)
    baseline = _run_file(tmp_path / "baseline.json", "time.process_time", BASELINE)
    assert gate.main(["compare", str(run), "--baseline", str(baseline)]) == 2
    assert "time.perf_counter" in capsys.readouterr().out


def test_compare_reads_stored_runs(gate, tmp_path, capsys) -> None:
    slower = {**BASELINE, "op/lists": {"floor (lists)": 2.0}}
    run = _run_file(tmp_path / "run.json", "time.process_time", slower)
    baseline = _run_file(tmp_path / "baseline.json", "time.process_time", BASELINE)
    assert gate.main(["compare", str(run), "--baseline", str(baseline)]) == 1
    assert "benchmark gate FAILED: op/lists (SLOWER)" in capsys.readouterr().out
    assert gate.main(["compare", str(baseline), "--baseline", str(baseline)]) == 0


def test_a_missing_baseline_is_a_usage_error(gate, tmp_path, capsys) -> None:
    run = _run_file(tmp_path / "run.json", "time.process_time", BASELINE)
    assert gate.main(["compare", str(run), "--baseline", str(tmp_path / "none.json")]) == 2
    assert "make bench-baseline" in capsys.readouterr().out


def test_the_stored_baseline_holds_every_case_of_the_gate(gate) -> None:
    """A case added without regenerating the baseline (or one dropped) shows here before CI."""
    timer, stored = gate.load_run(gate.BASELINE)
    assert timer == gate.TIMER
    assert {case: set(ratios) for case, ratios in stored.items()} == \
        {case.id: set(case.against) for case in gate.CASES}


PLANTED = '''"""Planted twin: varlen's fast path replaced by a slow path with the same outputs (the
reference's pack_varlen), as a fast path that silently stops being taken would be."""
from batchproof.impl import varlen
from batchproof.reference import varlen as reference

varlen.pack_varlen = reference.pack_varlen
print("planted: batchproof.impl.varlen.pack_varlen is the reference's")
'''


@pytest.mark.slow
def test_the_gate_fails_on_a_planted_slow_fast_path(tmp_path) -> None:
    """The gate's own command, measuring varlen against its reference with the planted twin
    loaded as a pytest plugin, fails and names the case."""
    (tmp_path / "planted_slow_varlen.py").write_text(PLANTED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    run = subprocess.run(
        [sys.executable, str(GATE_FILE), "check", "--json", str(tmp_path / "run.json"), "--",
         "-k", "varlen and reference", "-p", "planted_slow_varlen", "-s"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    out = run.stdout + run.stderr
    assert "planted: batchproof.impl.varlen.pack_varlen is the reference's" in out, out
    assert run.returncode == 1, out
    assert "benchmark gate FAILED: varlen/reference (SLOWER)" in out, out

"""`batchproof verify --coverage`: coverage.py in branch mode over impl/ and reference/, per file
the branches taken and those never taken (docs/coverage.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from batchproof.cli import branch_coverage, main


def test_a_run_reports_the_branches_of_the_code_it_reached(tmp_path) -> None:
    pytest.importorskip("coverage")
    report = tmp_path / "report.json"
    run = subprocess.run(
        [sys.executable, "-m", "batchproof", "verify", "--coverage", "--op", "trainer.real_rows",
         "--max-examples", "5", "--json", str(report)],
        capture_output=True, text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "branches taken" in run.stdout
    coverage = json.loads(report.read_text())["coverage"]
    trainer = coverage["files"]["impl/trainer.py"]
    assert 0 < trainer["taken"] < trainer["branches"]  # real_rows reached, other functions not
    assert coverage["files"]["reference/trainer.py"]["taken"] > 0
    untouched = coverage["files"]["impl/nesting.py"]  # imported (registered), never called
    assert untouched["taken"] < untouched["branches"]
    assert all("->" in b for b in trainer["missing_branches"])
    assert coverage["impl"]["branches"] == sum(f["branches"] for name, f in
                                               coverage["files"].items()
                                               if name.startswith("impl/"))


def test_without_coverage_py_it_is_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setattr(branch_coverage, "available", lambda: False)
    assert main(["verify", "--coverage", "--op", "trainer.real_rows"]) == 2
    assert capsys.readouterr().err.strip().endswith("pip install 'batchproof[coverage]'")


def test_names_are_the_repository_paths() -> None:
    assert branch_coverage._repository_name("/x/site-packages/batchproof/impl/kernels/sft.py") \
        == "impl/kernels/sft.py"
    assert branch_coverage._repository_name("/work/main/reference/sft.py") == "reference/sft.py"

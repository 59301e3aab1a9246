"""`batchproof verify --coverage`: coverage.py in branch mode over impl/ and reference/, per file
the branches taken and those never taken (docs/coverage.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

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


# ----------------------------------------------------------- the module's parts, in-process
# (the killers of `batchproof mutate --mutmut --harness cli/branch_coverage`: coverage.py is a
# stand-in, so nothing here measures this process)

def _entry(statements: int, branches: int, taken: int, missing_lines=(), missing=()) -> dict:
    return {"summary": {"num_statements": statements, "num_branches": branches,
                        "covered_branches": taken},
            "missing_lines": list(missing_lines), "missing_branches": [list(m) for m in missing]}


def test_a_files_percent_of_branches_taken() -> None:
    assert branch_coverage.FileCoverage("impl/a.py", 10, [], 8, 6).percent == 75.0
    assert branch_coverage.FileCoverage("impl/a.py", 10, [], 3, 1).percent == pytest.approx(
        100 / 3)
    assert branch_coverage.FileCoverage("impl/a.py", 10, [], 0, 0).percent == 100.0


def test_available_is_whether_coverage_py_is_installed(monkeypatch) -> None:
    import importlib.util

    asked = []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: asked.append(name))
    assert branch_coverage.available() is False
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: asked.append(name) or object())
    assert branch_coverage.available() is True
    assert asked == ["coverage", "coverage"]


class _Coverage:
    """coverage.Coverage as `start` and `finish` use it; `finish` reads `data` as its report."""

    made: list = []

    def __init__(self, **kwargs) -> None:
        self.kwargs, self.calls, self.data = kwargs, [], {}
        _Coverage.made.append(self)

    def start(self) -> None:
        self.calls.append("start")

    def stop(self) -> None:
        self.calls.append("stop")

    def json_report(self, outfile: str, show_contexts: bool) -> None:
        self.calls.append(("json_report", show_contexts))
        with open(outfile, "w") as handle:
            json.dump(self.data, handle)


def _stand_in_coverage(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "coverage", types.SimpleNamespace(Coverage=_Coverage))
    monkeypatch.setattr(_Coverage, "made", [])


def test_start_measures_branches_of_impl_and_reference_with_the_kernels_as_python(
        monkeypatch) -> None:
    _stand_in_coverage(monkeypatch)
    monkeypatch.delenv("NUMBA_DISABLE_JIT", raising=False)
    monkeypatch.setattr(branch_coverage, "PACKAGES", ("no_such_package_a", "no_such_package_b"))
    measure = branch_coverage.start()
    assert _Coverage.made == [measure] and measure.calls == ["start"]
    assert measure.kwargs == dict(branch=True, source_pkgs=["no_such_package_a",
                                                            "no_such_package_b"],
                                  data_file=None, config_file=False)
    assert os.environ["NUMBA_DISABLE_JIT"] == "1"


@pytest.mark.parametrize("packages", [("batchproof.impl", "no_such_package_b"),
                                      ("no_such_package_a", "batchproof.reference")])
def test_start_refuses_once_impl_or_reference_is_imported(packages, monkeypatch) -> None:
    import batchproof.impl  # noqa: F401 - imported, as any in-process caller has them
    import batchproof.reference  # noqa: F401

    _stand_in_coverage(monkeypatch)
    monkeypatch.setattr(branch_coverage, "PACKAGES", packages)
    with pytest.raises(RuntimeError) as refused:
        branch_coverage.start()
    assert str(refused.value) == ("start coverage before batchproof.impl / reference are "
                                  "imported")
    assert _Coverage.made == []


def test_finish_stops_and_reads_each_file_impl_first() -> None:
    measure = _Coverage()
    measure.data = {"files": {
        "/x/batchproof/reference/trainer.py": _entry(20, 4, 4),
        "/x/batchproof/impl/trainer.py": _entry(30, 6, 5, [7, 9], [(12, 13)]),
        "/x/batchproof/impl/kernels/sft.py": _entry(10, 2, 1, [3], [(4, -1)]),
        "/x/batchproof/impl/balance.py": _entry(5, 0, 0)}}
    files = branch_coverage.finish(measure)
    assert measure.calls == ["stop", ("json_report", False)]
    assert files == [
        branch_coverage.FileCoverage("impl/balance.py", 5, [], 0, 0, []),
        branch_coverage.FileCoverage("impl/kernels/sft.py", 10, [3], 2, 1, ["4->exit"]),
        branch_coverage.FileCoverage("impl/trainer.py", 30, [7, 9], 6, 5, ["12->13"]),
        branch_coverage.FileCoverage("reference/trainer.py", 20, [], 4, 4, [])]


def test_a_path_is_named_from_its_last_impl_or_reference_folder() -> None:
    name = branch_coverage._repository_name
    assert name("/src/impl/site-packages/batchproof/impl/trainer.py") == "impl/trainer.py"
    assert name("/src/reference/x/batchproof/reference/cp.py") == "reference/cp.py"
    assert name("/src/reference/batchproof/impl/cp.py") == "impl/cp.py"
    assert name("/elsewhere/module.py") == "/elsewhere/module.py"


def _files() -> list:
    return [branch_coverage.FileCoverage("impl/a.py", 10, [1], 8, 6, ["3->4"]),
            branch_coverage.FileCoverage("impl/kernels/b.py", 4, [], 4, 1, []),
            branch_coverage.FileCoverage("implementation/c.py", 4, [], 100, 100, []),
            branch_coverage.FileCoverage("reference/a.py", 7, [], 3, 3, [])]


def test_totals_add_the_files_under_one_folder() -> None:
    assert branch_coverage.totals(_files(), "impl") == (7, 12)
    assert branch_coverage.totals(_files(), "reference") == (3, 3)
    assert branch_coverage.totals(_files(), "tests") == (0, 0)


def test_the_json_report_totals_each_folder_and_lists_each_file() -> None:
    document = branch_coverage.as_json(_files()[:2])
    assert document == {
        "impl": {"branches": 12, "taken": 7, "percent": 58.33},
        "reference": {"branches": 0, "taken": 0, "percent": 100.0},
        "files": {"impl/a.py": {"statements": 10, "branches": 8, "taken": 6,
                                "missing_branches": ["3->4"], "missing_lines": [1]},
                  "impl/kernels/b.py": {"statements": 4, "branches": 4, "taken": 1,
                                        "missing_branches": [], "missing_lines": []}}}

"""`batchproof mutate --impl module:function`: mutmut over *your* module, batchproof's checks as
the tests — "is my packing change pinned down?" before a framework merges it.

    your folder/                     ──copy──▶  $TMP/batchproof-mutmut-*/
      mypkg/collate.py  (the module)              mypkg/...            (mutated: mypkg/collate.py)
      my_adapter.py     (--adapter-file)          my_adapter.py
                                                  tests/test_batchproof_contract.py
                                                      batchproof.check(fn, RECORD, <options>)
    $TMP/...$ mutmut run   ──▶  every mutant of the module: killed, survived, or not reached

Each mutant runs `batchproof.check` of the record on the function (with the same scoping options
as `batchproof check`: adapter, forms, layout, skip, not provided, output names), under a
derandomized search of `--max-examples` examples per check without shrinking. A mutant is
killed when a check fails. Mutants of functions the checks never call are listed as not reached,
not counted. Exit status: 0 every reached mutant killed, 1 a mutant survived (each is printed
with its diff), 3 nothing could be mutated or mutmut failed.
"""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from batchproof import mutmut_driver as driver
from batchproof.adapters import current_folder_importable

TEST_FILE = "tests/test_batchproof_contract.py"


@dataclass
class Scope:
    """What `batchproof.check` is told about the function (the `batchproof check` options)."""

    record: str
    adapter: str | None = None
    adapter_files: list[str] = field(default_factory=list)
    forms: list[str] | None = None
    layout: str | None = None
    skip: list[str] = field(default_factory=list)
    not_provided: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    checks: list[str] | None = None
    max_examples: int = 20


def locate(target: str) -> tuple[str, str, Path, Path]:
    """(module, function, source root, the module's path relative to it) of `module:function`."""
    module_name, _, function = target.partition(":")
    current_folder_importable()
    module = importlib.import_module(module_name)
    if not callable(getattr(module, function.split(".")[0], None)):
        raise ValueError(f"{module_name} has no function {function!r}")
    file = Path(module.__file__).resolve()
    depth = module_name.count(".") + (1 if file.name == "__init__.py" else 0)
    root = file.parents[depth]
    return module_name, function, root, file.relative_to(root)


def test_source(module: str, function: str, scope: Scope) -> str:
    """The one test every mutant runs: `batchproof.check` with the scope's options."""
    imports = "".join(f"import {Path(p).stem}  # noqa: F401 - registers its adapters\n"
                      for p in scope.adapter_files)
    options = {"adapter": scope.adapter, "forms": scope.forms, "layout": scope.layout,
               "skip": scope.skip or (), "not_provided": scope.not_provided or (),
               "output_names": dict(p.split("=", 1) for p in scope.output_names) or None,
               "checks": scope.checks}
    arguments = "".join(f"        {k}={v!r},\n" for k, v in options.items())
    head = function.split(".")[0]
    return (
        "import batchproof\n"
        "from hypothesis import Phase, settings\n"
        f"{imports}"
        f"from {module} import {head}\n\n\n"
        "def test_contract():\n"
        f"    batchproof.check(\n        {function}, {scope.record!r},\n{arguments}"
        f"        settings=settings(max_examples={scope.max_examples}, derandomize=True,\n"
        "                          database=None, phases=[Phase.explicit, Phase.generate],\n"
        "                          report_multiple_bugs=False, deadline=None),\n"
        "    )\n")


def prepare(root: Path, relative: Path, module: str, function: str, scope: Scope) -> Path:
    """The throw-away work directory (see the module docstring)."""
    workdir = Path(tempfile.mkdtemp(prefix="batchproof-mutmut-"))
    top = relative.parts[0]
    source = root / top
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
    if source.is_dir():
        shutil.copytree(source, workdir / top, ignore=ignore)
    else:
        shutil.copy2(source, workdir / top)
    for path in scope.adapter_files:
        shutil.copy2(path, workdir / Path(path).name)
    (workdir / "tests").mkdir()
    (workdir / TEST_FILE).write_text(test_source(module, function, scope))
    config = {
        "source_paths": [top if source.is_dir() else str(relative)],
        "only_mutate": [str(relative)],
        "also_copy": [Path(p).name for p in scope.adapter_files],
        "pytest_add_cli_args": ["-p", "no:xdist", "-p", "no:cacheprovider", "-p",
                                "no:benchmark", "-p", "no:randomly"],
        "pytest_add_cli_args_test_selection": [TEST_FILE],
        "use_git_change_detection": False,
        "track_dependencies": False,
    }
    (workdir / "pyproject.toml").write_text(driver.toml_table(config))
    return workdir


def main(target: str, scope: Scope, max_children: int = driver.MAX_CHILDREN,
         keep: bool = False) -> int:
    module, function, root, relative = locate(target)
    print(f"mutating {relative} (module {module}); killers: batchproof.check({function}, "
          f"{scope.record!r}), {scope.max_examples} examples per check")
    workdir = prepare(root, relative, module, function, scope)
    driver._exit_on_sigterm()
    try:
        started = time.perf_counter()
        completed = driver._mutmut(["run", "--max-children", str(max_children)], workdir)
        mutants = driver.read_results(workdir, [str(relative)], [], located=str)
        report = driver.Report(scope=[str(relative)], patterns=[], mutants=mutants,
                               seconds=time.perf_counter() - started)
        if completed.returncode != 0 or not mutants:
            print(f"error: mutmut exited with {completed.returncode} and {len(mutants)} "
                  "mutants", file=sys.stderr)
            return 3
        reached = [m for m in mutants if m.status not in driver.UNTESTED.values()]
        if not reached:
            print("error: the checks reached none of the module's mutated functions",
                  file=sys.stderr)
            return 3
        driver.attach_diffs(report.survivors, workdir)
        report.mutants = reached
        driver.print_report(report, 0)
        unreached = sorted({m.function for m in mutants if m not in reached})
        if unreached:
            print(f"not reached by the checks (their mutants not counted): "
                  f"{', '.join(unreached)}")
        return 1 if report.survivors else 0
    finally:
        if keep:
            print(f"mutmut work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

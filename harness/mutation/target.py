"""`batchproof mutate --impl module:function`: mutmut over *your* module, batchproof's checks as
the tests — "is my packing change pinned down?" before a framework merges it.

    your folder/                     ──copy──▶  $TMP/batchproof-mutmut-*/
      mypkg/collate.py  (the module)              mypkg/...            (mutated: mypkg/collate.py)
      my_adapter.py     (--adapter-file)          my_adapter.py
                                                  tests/test_batchproof_contract.py
                                                      batchproof.check(fn, RECORD, <scope>)
    $TMP/...$ mutmut run   ──▶  every mutant of the module: killed, survived, or not reached

1. The function is imported the way its adapter imports it (`Adapter.importing`: e.g. SkyRL
   0.4.0 on Python 3.11 needs `typing.TypedDict` patched during the import), here and in the
   test every mutant runs.
2. The unmutated function is checked first, in this process, with exactly the checks, scope
   and search every mutant gets. A function that fails them cannot kill anything meaningfully:
   the run stops there with the check's report, its replay lines and its summary
   (`baseline_status`: 1 for a divergence or a check that ran no example, 3 for batchproof's
   own failure), and says which scope options would leave the failing checks out.
3. Each mutant runs `batchproof.check` of the record on the function, with the same scope as
   `batchproof check` (adapter, forms, layout, skip, not provided, output names), under a
   derandomized search of `--max-examples` examples per check without shrinking. A mutant is
   killed when a check fails. Mutants of functions the checks never call are listed as not
   reached, not counted.

Exit status: 0 every reached mutant killed, 1 a mutant survived (each is printed with its diff)
or the function fails its checks before mutation, 3 nothing could be mutated, mutmut failed, or
batchproof failed.
"""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hypothesis import Phase, settings

from batchproof.adapters import Adapter, current_folder_importable, get_adapter, identity_adapter
from batchproof.adapters.scope import Scope
from batchproof.mutation import mutmut_driver as driver

TEST_FILE = "tests/test_batchproof_contract.py"


@dataclass(frozen=True)
class Target:
    """What is mutated and how it is checked: `module:function`, the record, the adapter that
    maps it (None: it follows the contract), the scope, and the examples per check."""

    target: str
    record: str
    adapter: str | None = None
    scope: Scope = Scope()
    max_examples: int = 20

    def adapter_for(self) -> Adapter:
        """The adapter the checks run through, narrowed to the scope (a `ValueError` for an
        unknown adapter or an option the record does not have)."""
        base = (get_adapter(self.adapter).retarget(self.target) if self.adapter
                else identity_adapter(self.record, self.target))
        if base.record != self.record:
            raise ValueError(f"adapter {base.name} is for {base.record}, not {self.record}")
        return self.scope.narrow(base)

    def settings(self) -> settings:
        """The search every mutant runs (and the check before mutation)."""
        return settings(max_examples=self.max_examples, derandomize=True, database=None,
                        phases=[Phase.explicit, Phase.generate], report_multiple_bugs=False,
                        deadline=None)


def locate(target: str, adapter: Adapter) -> tuple[str, str, Path, Path]:
    """(module, function, source root, the module's path relative to it) of `module:function`,
    imported inside the adapter's import step."""
    module_name, _, function = target.partition(":")
    current_folder_importable()
    with adapter.import_step():
        module = importlib.import_module(module_name)
    if not callable(getattr(module, function.split(".")[0], None)):
        raise ValueError(f"{module_name} has no function {function!r}")
    file = Path(module.__file__).resolve()
    depth = module_name.count(".") + (1 if file.name == "__init__.py" else 0)
    root = file.parents[depth]
    return module_name, function, root, file.relative_to(root)


def test_source(module: str, function: str, target: Target) -> str:
    """The one test every mutant runs: `batchproof.check` with the target's scope, the function
    imported inside its adapter's import step."""
    scope = target.scope
    imports = "".join(f"import {Path(p).stem}  # noqa: F401 - registers its adapters\n"
                      for p in scope.adapter_files)
    options = {"adapter": target.adapter, **scope.keywords()}
    arguments = "".join(f"        {k}={v!r},\n" for k, v in options.items())
    head = function.split(".")[0]
    step = (f"get_adapter({target.adapter!r}).import_step()" if target.adapter
            else "contextlib.nullcontext()")
    return (
        "import contextlib\n\n"
        "import batchproof\n"
        "from batchproof.adapters import get_adapter\n"
        "from hypothesis import Phase, settings\n"
        f"{imports}\n"
        f"with {step}:\n"
        f"    from {module} import {head}\n\n\n"
        "def test_contract():\n"
        f"    batchproof.check(\n        {function}, {target.record!r},\n{arguments}"
        f"        settings=settings(max_examples={target.max_examples}, derandomize=True,\n"
        "                          database=None, phases=[Phase.explicit, Phase.generate],\n"
        "                          report_multiple_bugs=False, deadline=None),\n"
        "    )\n")


def prepare(root: Path, relative: Path, module: str, function: str, target: Target) -> Path:
    """The throw-away work directory (see the module docstring)."""
    workdir = Path(tempfile.mkdtemp(prefix="batchproof-mutmut-"))
    top = relative.parts[0]
    source = root / top
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
    if source.is_dir():
        shutil.copytree(source, workdir / top, ignore=ignore)
    else:
        shutil.copy2(source, workdir / top)
    for path in target.scope.adapter_files:
        shutil.copy2(path, workdir / Path(path).name)
    (workdir / "tests").mkdir()
    (workdir / TEST_FILE).write_text(test_source(module, function, target))
    config = {
        "source_paths": [top if source.is_dir() else str(relative)],
        "only_mutate": [str(relative)],
        "also_copy": [Path(p).name for p in target.scope.adapter_files],
        "pytest_add_cli_args": ["-p", "no:xdist", "-p", "no:cacheprovider", "-p",
                                "no:benchmark", "-p", "no:randomly"],
        "pytest_add_cli_args_test_selection": [TEST_FILE],
        "use_git_change_detection": False,
        "track_dependencies": False,
    }
    (workdir / "pyproject.toml").write_text(driver.toml_table(config))
    return workdir


def baseline_status(report) -> int:
    """The exit status of the check before mutation (`runner.exit_code`, the policy of
    `verify` and `check`), except that a check that ran no example (NOT TESTED) is 1 where that
    policy says 0: it kills no mutant, so the run has no baseline."""
    from batchproof.adapters.runner import exit_code

    code = exit_code([report])
    return 1 if report.untested and code == 0 else code


def check_first(target: Target, adapter: Adapter) -> int:
    """The unmutated function's check, in the scope and search each mutant gets: 0 when it
    passes, else the report is printed and the exit status returned (1 or 3)."""
    from batchproof.adapters.runner import (
        check_adapter,
        command_words,
        print_report,
        print_summary,
        replayer,
        scope_hint,
    )

    report = check_adapter(adapter, adapter.candidate(), checks=list(target.scope.checks or ())
                           or None, report_multiple_bugs=False, replay_database=False,
                           base_settings=target.settings())
    code = baseline_status(report)
    if code == 0:
        return 0
    print_report(report, f"mutation search ({target.max_examples} examples per check)",
                 replay=replayer(target.target, adapter, adapter=target.adapter))
    print_summary([report])
    hint = scope_hint([report], target.target, adapter=target.adapter)
    if hint:
        print(hint)
    again = " ".join(["batchproof", "check", *command_words(target.target, adapter,
                                                              adapter=target.adapter)])
    print(f"not mutated: {target.target} fails its checks before any mutation, so no mutant "
          f"could be told from it. Make `{again}` pass first (or scope the checks to what the "
          "function does), then mutate it.", file=sys.stderr)
    return code


def main(target: Target, max_children: int = driver.MAX_CHILDREN, keep: bool = False) -> int:
    adapter = target.adapter_for()
    module, function, root, relative = locate(target.target, adapter)
    code = check_first(target, adapter)
    if code:
        return code
    print(f"mutating {relative} (module {module}); killers: batchproof.check({function}, "
          f"{target.record!r}), {target.max_examples} examples per check")
    workdir = prepare(root, relative, module, function, target)
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

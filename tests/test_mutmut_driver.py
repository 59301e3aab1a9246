"""The mutmut driver's scoping, configuration and scoring (mutmut itself is not run here: a real
run takes minutes; `batchproof mutate --mutmut --op rl_batch` is measured in docs/mutation.md)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import textwrap
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from batchproof.mutation import equivalents
from batchproof.mutation import mutmut_driver as driver
from batchproof.mutation.mutmut_driver import Equivalent, Mutant, Report

SOURCE = textwrap.dedent('''\
    import torch


    def first(x):
        return x + 1


    @staticmethod
    def second(x):
        return x - 1


    class Holder:
        def __init__(self, value):
            self.value = value

        def get(self):
            return self.value
    ''')


def test_functions_touching_maps_lines_to_mangled_names() -> None:
    assert driver.functions_touching(SOURCE, {5}) == ["x_first"]
    assert driver.functions_touching(SOURCE, {8}) == ["x_second"]  # the decorator line counts
    assert driver.functions_touching(SOURCE, {15, 18}) == ["xǁHolderǁ__init__", "xǁHolderǁget"]
    assert driver.functions_touching(SOURCE, {1, 2, 13}) == []
    assert len(driver.functions_touching(SOURCE, None)) == 4


def test_changed_lines_reads_unified_zero_hunks() -> None:
    diff = textwrap.dedent("""\
        diff --git a/impl/x.py b/impl/x.py
        @@ -3 +3 @@ def a():
        @@ -10,2 +10,3 @@ def b():
        @@ -20,4 +21,0 @@ def c():
        """)
    assert driver.changed_lines(diff) == {3, 10, 11, 12, 21, 22}


def test_changed_functions_since_a_revision(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "impl").mkdir()
    (tmp_path / "impl" / "op.py").write_text(SOURCE)
    git("init", "-q")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "0")
    git("add", "impl/op.py")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "1")
    (tmp_path / "impl" / "op.py").write_text(SOURCE.replace("x - 1", "x - 2"))
    (tmp_path / "impl" / "new.py").write_text("def fresh():\n    return 0\n")
    paths = ["impl/op.py", "impl/new.py"]
    changed = driver.changed_functions("HEAD", paths, root=tmp_path)
    assert changed == {"impl/op.py": ["x_second"], "impl/new.py": ["x_fresh"]}
    assert driver.changed_functions("HEAD", ["impl/op.py"], root=tmp_path)["impl/op.py"] == [
        "x_second"]
    assert driver.patterns_for(changed) == ["batchproof.impl.op.x_second__mutmut_*",
                                            "batchproof.impl.new.x_fresh__mutmut_*"]
    git("add", "-A")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "2")
    assert driver.changed_functions("HEAD", paths, root=tmp_path) == {}


def test_op_files_default_to_every_impl_module_and_reject_unknown_ops() -> None:
    every = driver.op_files(None)
    assert "impl/rl_batch.py" in every and "impl/__init__.py" not in every
    assert "impl/kernels/rl_batch.py" in every and "impl/kernels/__init__.py" not in every
    assert driver.op_files(["rl_batch", "rl_batch.build_rl_batch"]) == [
        "impl/rl_batch.py", "impl/kernels/rl_batch.py"]
    assert driver.op_files(["balance"]) == ["impl/balance.py"]  # no kernels
    with pytest.raises(ValueError, match="impl/no_such_op.py"):
        driver.op_files(["no_such_op"])


def test_config_mutates_only_impl_and_runs_the_ops_registry_checks() -> None:
    config = driver.mutmut_config(["impl/rl_batch.py"], ["rl_batch"])
    assert config["source_paths"] == ["batchproof/impl/"]
    assert config["only_mutate"] == ["batchproof/impl/rl_batch.py"]
    selection = config["pytest_add_cli_args_test_selection"]
    assert "tests/test_registry.py" in selection and selection[-2:] == ["-k", "rl_batch"]
    assert "--hypothesis-profile=mutation" in config["pytest_add_cli_args"]
    assert not any(arg.startswith("-n") for arg in config["pytest_add_cli_args"])
    parsed = tomllib.loads(driver.toml_table(config))["tool"]["mutmut"]
    assert parsed == config


def test_workdir_is_a_copy_with_the_config_and_the_repo_is_untouched() -> None:
    before = (driver.REPO / "pyproject.toml").read_text()
    workdir = driver.prepare_workdir(driver.mutmut_config(["impl/rl_batch.py"], ["rl_batch"]))
    try:
        text = (workdir / "pyproject.toml").read_text()
        assert tomllib.loads(text)["tool"]["mutmut"]["only_mutate"] == [
            "batchproof/impl/rl_batch.py"]
        # laid out as the installed namespace, as the tests import it
        assert (workdir / "batchproof" / "impl" / "rl_batch.py").is_file()
        assert (workdir / "batchproof" / "reference" / "rl_batch.py").is_file()
        assert (workdir / "batchproof" / "registry.py").is_file()
        assert not (workdir / "impl").exists() and not (workdir / "harness").exists()
        assert (workdir / "tests" / "test_registry.py").is_file()
        assert driver.REPO not in workdir.parents
    finally:
        import shutil

        shutil.rmtree(workdir)
    assert (driver.REPO / "pyproject.toml").read_text() == before


def test_function_of_and_diff_sides() -> None:
    assert driver.function_of("batchproof.impl.rl_batch.x_build_rl_batch__mutmut_12") == (
        "build_rl_batch")
    assert driver.function_of("batchproof.impl.rl_batch.xǁ_Valuesǁ__init____mutmut_3") == (
        "_Values.__init__")
    diff = "--- a\n+++ b\n-    x = a + b\n+    x = a - b\n"
    assert equivalents.diff_sides(diff) == ("x = a + b", "x = a - b")


def _report(*statuses: str, equivalent: int = 0) -> Report:
    mutants = [Mutant(f"impl.op.x_f__mutmut_{i}", "impl/op.py", "f", s)
               for i, s in enumerate(statuses, 1)]
    for mutant in [m for m in mutants if m.status == "survived"][:equivalent]:
        mutant.equivalent = "same behaviour"
    return Report(scope=["impl/op.py"], patterns=[], mutants=mutants)


def test_verdict_and_score() -> None:
    all_killed = _report(*["killed"] * 20)
    assert all_killed.score == 1.0 and driver.verdict(all_killed, 20, None) == 0
    one_survivor = _report(*["killed"] * 19, "survived")
    assert one_survivor.score == 0.95 and driver.verdict(one_survivor, 20, None) == 1
    documented = _report(*["killed"] * 19, "survived", equivalent=1)
    assert documented.score == 1.0 and driver.verdict(documented, 20, None) == 0
    timeouts_kill = _report(*["killed"] * 19, "timeout")
    assert timeouts_kill.score == 1.0


def test_guard_refuses_vacuous_runs() -> None:
    """Too few mutants, mutants nobody tested, or none at all: not a 100% score but an error."""
    assert driver.verdict(_report(*["killed"] * 5), 20, None) == 3
    assert driver.verdict(_report(*["killed"] * 5), 20, "origin/main") == 0  # a small diff
    untested = _report(*["killed"] * 20, "no tests")
    assert untested.score < 1.0 and driver.verdict(untested, 20, None) == 3
    assert driver.verdict(_report(), 0, "origin/main") == 3


def test_equivalents_are_matched_by_function_and_diff(monkeypatch) -> None:
    monkeypatch.setattr(driver, "equivalents", lambda: (
        Equivalent("impl/op.py", "f", r"a \+ b", r"a - b", "b == 0 always"),
        Equivalent("impl/op.py", "*", r"device=device", r"^(?!.*device)", "CPU"),))
    shown = {
        "impl.op.x_f__mutmut_1": "-    x = a + b\n+    x = a - b\n",
        "impl.op.x_g__mutmut_1": "-    x = a + b\n+    x = a - b\n",  # other function
        "impl.op.x_g__mutmut_2": "-    t = zeros(2, device=device)\n+    t = zeros(2, )\n",
        "impl.op.x_g__mutmut_3": "-    t = zeros(2, device=device)\n"
                                 "+    t = zeros(None, device=device)\n",
    }
    mutants = [Mutant(name, "impl/op.py", driver.function_of(name), "survived") for name in shown]
    monkeypatch.setattr(driver, "_mutmut", lambda args, *a, **k: subprocess.CompletedProcess(
        args, 0, stdout=f"# {args[1]}: survived\n--- a\n+++ b\n{shown[args[1]]}"))
    driver.attach_diffs(mutants, Path("."))
    assert [m.equivalent for m in mutants] == ["b == 0 always", "", "CPU", ""]


def test_every_documented_equivalent_names_a_real_function() -> None:
    """An equivalent entry whose function vanished would silently stop matching; an entry in
    `harness/mutation/equivalents/<op>.py` must be about `impl/<op>.py` or
    `impl/kernels/<op>.py`, and one in `harness/mutation/equivalents/harness.py` about a harness
    module `--harness` mutates."""
    mutated = set(driver.harness_files(list(driver.HARNESS_KILLERS)))
    for module in pkgutil.iter_modules(equivalents.__path__):
        entries = importlib.import_module(f"batchproof.mutation.equivalents.{module.name}").EQUIVALENT
        if module.name == "harness":
            paths = mutated
        else:
            paths = {f"impl/{module.name}.py", f"impl/kernels/{module.name}.py"}
            assert (driver.REPO / f"impl/{module.name}.py").is_file(), module.name
        assert entries and all(known.path in paths for known in entries), module.name
    for known in driver.equivalents():
        source = (driver.REPO / known.path).read_text()
        names = {driver.function_of(f"m.{name}__mutmut_1")
                 for name in driver.functions_touching(source, None)}
        assert known.function == "*" or known.function in names, known


def test_every_harness_module_and_its_killers_exist() -> None:
    """`--harness NAME` mutates `harness/NAME.py` with its killers as the only tests: a renamed
    module or test file would make the run mutate nothing or select no test."""
    for name, killers in driver.HARNESS_KILLERS.items():
        (path,) = driver.harness_files([name])
        assert (driver.REPO / path).is_file(), path
        assert killers and all((driver.REPO / k).is_file() for k in killers), name
        config = driver.mutmut_config([path], None, [name])
        assert config["only_mutate"] == [driver.installed_path(path)]
        assert config["pytest_add_cli_args_test_selection"] == killers


def test_cli_entry_point_parses() -> None:
    args = driver.build_parser().parse_args(["--op", "rl_batch", "--since", "HEAD~1"])
    assert args.op == ["rl_batch"] and args.since == "HEAD~1" and args.min_mutants == 20


def test_markdown_lists_the_score_and_every_equivalent_with_its_reason() -> None:
    report = _report("killed", "killed", "survived", "survived", "no tests", equivalent=1)
    report.mutants[2].diff = "-    x = a | b\n+    x = a ^ b\n"
    report.seconds = 12.0
    text = driver.markdown(report)
    assert "| `impl/op.py` | 5 | 2 | 1 | 1 | 1 | 50.0% of 4 |" in text
    assert "| **all** | **5** | **2** | **1** | **1** | **1** | **50.0% of 4** |" in text
    assert "| `impl/op.py:f` #3 | `x = a \\| b` → `x = a ^ b` | same behaviour |" in text


# --------------------------------------------------------------------------- mutate --impl

THEIRS = textwrap.dedent('''\
    import math


    def required_multiple(dp_size, *, mini_batch_size=None, critic_mini_batch_size=None, n=1,
                          actor_updates=True):
        multiple = dp_size
        if mini_batch_size is not None and actor_updates:
            multiple = math.lcm(multiple, mini_batch_size * n)
        if critic_mini_batch_size is not None:
            multiple = math.lcm(multiple, critic_mini_batch_size * n)
        return multiple


    def helper_nobody_calls(x):
        return x + 1
    ''')


def test_mutate_a_users_function_with_the_contracts_checks(tmp_path, monkeypatch, capfd) -> None:
    """`batchproof mutate --impl`: mutmut over the user's module, `batchproof.check` as the test.
    The contract's checks kill every mutant of this function; the `divisible` property alone
    lets some survive (a multiple of the right one is still divisible), and says which."""
    from batchproof.cli import main

    pytest.importorskip("mutmut")
    (tmp_path / "theirs_multiple.py").write_text(THEIRS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    base = ["mutate", "--impl", "theirs_multiple:required_multiple", "--op",
            "trainer.required_multiple", "--skip", "errors", "--max-examples", "15"]
    assert main(base) == 0
    out = capfd.readouterr().out  # mutmut's own output too (its process writes to the fd)
    assert "kill rate 100.0%" in out and "not reached by the checks" in out
    assert "helper_nobody_calls" in out
    _assert_settled(out)
    assert main([*base, "--check", "property:divisible"]) == 1
    assert "SURVIVED: theirs_multiple.x_required_multiple__mutmut_" in capfd.readouterr().out


def _assert_settled(out: str) -> None:
    """Output to a file, as a log: mutmut's phases once each, none of its spinner's redraws."""
    assert "\r" not in out and not any(frame in out for frame in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"), out
    assert out.count("Running mutation testing") == 1, out


def test_a_function_that_fails_its_checks_is_not_mutated(tmp_path, monkeypatch, capsys) -> None:
    """The unmutated function is checked first, with the scope and search every mutant gets: one
    that already fails is not mutated (no mutant could be told from it); the report and the
    flags that scope it are printed instead of mutmut's collection traceback."""
    from batchproof.cli import main

    pytest.importorskip("mutmut")
    (tmp_path / "theirs_multiple.py").write_text(THEIRS)  # validates nothing: errors fail
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    assert main(["mutate", "--impl", "theirs_multiple:required_multiple", "--op",
                 "trainer.required_multiple", "--max-examples", "10"]) == 1
    captured = capsys.readouterr()
    assert "not mutated: theirs_multiple:required_multiple fails its checks" in captured.err
    assert "--skip errors" in captured.out and "Traceback" not in captured.out + captured.err
    assert "Running mutation testing" not in captured.out


def test_the_contract_test_mutmut_runs_is_the_scoped_check() -> None:
    from batchproof.adapters.scope import Scope
    from batchproof.mutation.target import Target, test_source

    source = test_source("mypkg.collate", "build", Target(
        "mypkg.collate:build", "rl_batch.build_rl_batch", scope=Scope.of(
            forms=["lists"], skip=["errors"], output_names=["sequences=input_ids"],
            adapter_files=["my_adapter.py"])))
    compile(source, "test_batchproof_contract.py", "exec")
    assert "import my_adapter" in source and "from mypkg.collate import build" in source
    assert "output_names={'sequences': 'input_ids'}" in source and "forms=['lists']" in source

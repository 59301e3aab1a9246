"""`batchproof mutate --impl module:function` (`batchproof.mutation.target`): the function located
and imported the way its adapter imports it, the check before mutation, the work directory and
the one test every mutant runs, and the run's exit status (docs/mutation.md).

In-process and fast: a user's module in a temporary folder checked against
`trainer.required_multiple` on a few examples; mutmut itself is a stand-in that writes its
results. The killers of `batchproof mutate --mutmut --harness mutation/target` (with
`tests/test_verdict.py`, whose properties hold `baseline_status` to the exit policy).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import tomllib
from hypothesis import Phase

import batchproof
from batchproof import adapters
from batchproof.adapters import runner
from batchproof.adapters.runner import AdapterReport, CheckOutcome
from batchproof.adapters.scope import Scope
from batchproof.mutation import mutmut_driver as driver
from batchproof.mutation import target
from batchproof.mutation.target import Target
from batchproof.reference.trainer import required_multiple
from batchproof.statuses import Outcome

RECORD = "trainer.required_multiple"
MODULE = "bp_theirs"
THEIRS = textwrap.dedent('''\
    from batchproof.reference.trainer import required_multiple

    CONSTANT = 3


    def multiple(*args, **kwargs):
        return required_multiple(*args, **kwargs)


    def off_by_one(*args, **kwargs):
        return required_multiple(*args, **kwargs) + 1


    def lenient(*args, **kwargs):
        """The contract on valid input; 1 on bad input instead of raising."""
        try:
            return required_multiple(*args, **kwargs)
        except (TypeError, ValueError):
            return 1


    class Holder:
        @staticmethod
        def multiple(*args, **kwargs):
            return required_multiple(*args, **kwargs)
    ''')


@pytest.fixture(autouse=True)
def theirs(cli_state, monkeypatch, tmp_path):
    """The user's module `bp_theirs` and package `bp_pkg` in the current folder."""
    (tmp_path / f"{MODULE}.py").write_text(THEIRS)
    package = tmp_path / "bp_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(THEIRS)
    (package / "sub.py").write_text(THEIRS)
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "sub.cpython-311.pyc").write_bytes(b"")
    (package / "stale.pyc").write_bytes(b"")
    for cache in (".hypothesis", ".pytest_cache"):
        (package / cache).mkdir()
        (package / cache / "kept").write_text("")
    monkeypatch.chdir(tmp_path)
    for name in (MODULE, "bp_pkg", "bp_pkg.sub", "bp_adapter"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield tmp_path
    for name in (MODULE, "bp_pkg", "bp_pkg.sub", "bp_adapter"):
        sys.modules.pop(name, None)


def _framework_adapter() -> adapters.Adapter:
    """A registered framework adapter (read, never changed)."""
    return next(a for a in adapters.all_adapters() if a.framework != "custom")


# --------------------------------------------------------------------------- the target


def test_a_function_of_the_contract_is_checked_through_the_identity_adapter() -> None:
    chosen = Target(f"{MODULE}:multiple", RECORD, scope=Scope.of(skip=["errors"])).adapter_for()
    assert (chosen.record, chosen.target, chosen.framework) == (RECORD, f"{MODULE}:multiple",
                                                                "custom")
    assert "errors" in chosen.skip and chosen.scope == Scope.of(skip=["errors"])
    assert chosen.name == adapters.identity_adapter(RECORD, f"{MODULE}:multiple").name


def test_an_adapter_is_retargeted_at_the_function() -> None:
    known = _framework_adapter()
    chosen = Target("m:f", known.record, adapter=known.name).adapter_for()
    assert (chosen.name, chosen.record, chosen.target) == (known.name, known.record, "m:f")
    assert chosen.distribution is None and chosen.known == known.known
    other = "balance.karmarkar_karp" if known.record != "balance.karmarkar_karp" else RECORD
    with pytest.raises(ValueError, match=rf"^adapter {known.name} is for {known.record}, not "
                                         rf"{other}$"):
        Target("m:f", other, adapter=known.name).adapter_for()


def test_the_search_every_mutant_runs() -> None:
    search = Target("m:f", RECORD, max_examples=7).settings()
    assert search.max_examples == 7 and search.derandomize and search.database is None
    assert tuple(search.phases) == (Phase.explicit, Phase.generate)
    assert not search.report_multiple_bugs and search.deadline is None
    assert Target("m:f", RECORD).max_examples == 20


# --------------------------------------------------------------------------- locate


def test_locate_a_module_a_package_and_a_method(theirs) -> None:
    chosen = Target(f"{MODULE}:multiple", RECORD).adapter_for()
    assert target.locate(f"{MODULE}:multiple", chosen) == (
        MODULE, "multiple", theirs.resolve(), Path(f"{MODULE}.py"))
    assert target.locate("bp_pkg.sub:multiple", chosen) == (
        "bp_pkg.sub", "multiple", theirs.resolve(), Path("bp_pkg/sub.py"))
    assert target.locate("bp_pkg:multiple", chosen) == (
        "bp_pkg", "multiple", theirs.resolve(), Path("bp_pkg/__init__.py"))
    assert target.locate(f"{MODULE}:Holder.multiple", chosen)[1] == "Holder.multiple"


def test_locate_needs_a_function(theirs) -> None:
    chosen = Target(f"{MODULE}:multiple", RECORD).adapter_for()
    with pytest.raises(ValueError, match=rf"^{MODULE} has no function 'nope'$"):
        target.locate(f"{MODULE}:nope", chosen)
    with pytest.raises(ValueError, match=rf"^{MODULE} has no function 'CONSTANT'$"):
        target.locate(f"{MODULE}:CONSTANT", chosen)


def test_locate_imports_inside_the_adapters_import_step(monkeypatch) -> None:
    steps = []

    @contextlib.contextmanager
    def step():
        steps.append("in")
        assert MODULE not in sys.modules
        yield
        steps.append("out")

    chosen = Target(f"{MODULE}:multiple", RECORD).adapter_for()
    chosen = adapters._replace(chosen, importing=step)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    target.locate(f"{MODULE}:multiple", chosen)
    assert steps == ["in", "out"] and MODULE in sys.modules


# --------------------------------------------------------------------------- the contract test


def _run_source(source: str, monkeypatch) -> dict:
    """Execute the test file's source and its test, `batchproof.check` a stand-in."""
    calls = []
    monkeypatch.setattr(batchproof, "check", lambda *args, **kwargs: calls.append(
        (args, kwargs)))
    namespace: dict = {}
    adapters.current_folder_importable()  # as mutmut runs it: in the work directory
    exec(compile(source, target.TEST_FILE, "exec"), namespace)  # noqa: S102 - the file mutmut runs
    namespace["test_contract"]()
    ((args, kwargs),) = calls
    return {"args": args, **kwargs}


def test_the_contract_test_runs_the_scoped_check(monkeypatch) -> None:
    scope = Scope.of(forms=["lists"], skip=["errors"], not_provided=["x"], layout="zigzag",
                     output_names=["a=b"], checks=["equivalence"])
    chosen = Target(f"{MODULE}:Holder.multiple", RECORD, scope=scope, max_examples=4)
    call = _run_source(target.test_source(MODULE, "Holder.multiple", chosen), monkeypatch)
    function, record = call.pop("args")
    assert function(3) == required_multiple(3) and record == RECORD
    search = call.pop("settings")
    assert call == {"adapter": None, **scope.keywords()}
    assert search.max_examples == 4 and search.derandomize and search.database is None
    assert tuple(search.phases) == (Phase.explicit, Phase.generate)
    assert not search.report_multiple_bugs and search.deadline is None


def test_the_contract_test_imports_adapter_files_and_the_adapters_step(monkeypatch,
                                                                       theirs) -> None:
    (theirs / "bp_adapter.py").write_text("LOADED = True\n")
    known = _framework_adapter()
    chosen = Target(f"{MODULE}:multiple", known.record, adapter=known.name,
                    scope=Scope.of(adapter_files=["bp_adapter.py"]))
    source = target.test_source(MODULE, "multiple", chosen)
    steps = []
    monkeypatch.setattr(adapters.Adapter, "import_step",
                        lambda self: contextlib.nullcontext(steps.append(self.name)))
    call = _run_source(source, monkeypatch)
    assert steps == [known.name] and "bp_adapter" in sys.modules
    assert call["adapter"] == known.name and call["args"][1] == known.record


def test_the_contract_test_fails_a_wrong_function(theirs) -> None:
    chosen = Target(f"{MODULE}:off_by_one", RECORD, max_examples=3)
    namespace: dict = {}
    adapters.current_folder_importable()  # as mutmut runs it: in the work directory
    exec(compile(target.test_source(MODULE, "off_by_one", chosen), target.TEST_FILE, "exec"),
         namespace)  # noqa: S102 - the file mutmut runs
    with pytest.raises(batchproof.CheckFailed):
        namespace["test_contract"]()
    right = Target(f"{MODULE}:multiple", RECORD, max_examples=3)
    namespace = {}
    exec(compile(target.test_source(MODULE, "multiple", right), target.TEST_FILE, "exec"),
         namespace)  # noqa: S102 - the file mutmut runs
    namespace["test_contract"]()


# --------------------------------------------------------------------------- the work directory


def _prepared(theirs, name: str, scope: Scope | None = None) -> tuple[Path, Path, Target]:
    scope = scope if scope is not None else Scope()
    chosen = Target(f"{name}:multiple", RECORD, scope=scope, max_examples=5)
    module, function, root, relative = target.locate(chosen.target, chosen.adapter_for())
    workdir = target.prepare(root, relative, module, function, chosen)
    return workdir, relative, chosen


def _config(workdir: Path) -> dict:
    return tomllib.loads((workdir / "pyproject.toml").read_text())["tool"]["mutmut"]


def test_the_work_directory_of_a_package(theirs) -> None:
    (theirs / "bp_adapter.py").write_text("LOADED = True\n")
    workdir, relative, chosen = _prepared(theirs, "bp_pkg.sub",
                                          Scope.of(adapter_files=["bp_adapter.py"]))
    try:
        assert workdir.name.startswith("batchproof-mutmut-") and workdir.parent != theirs
        assert sorted(p.name for p in (workdir / "bp_pkg").iterdir()) == ["__init__.py",
                                                                          "sub.py"]
        assert (workdir / "bp_pkg" / "sub.py").read_text() == THEIRS
        assert (workdir / "bp_adapter.py").read_text() == "LOADED = True\n"
        assert (workdir / target.TEST_FILE).read_text() == target.test_source(
            "bp_pkg.sub", "multiple", chosen)
        config = _config(workdir)
        assert config["source_paths"] == ["bp_pkg"]
        assert config["only_mutate"] == ["bp_pkg/sub.py"] == [str(relative)]
        assert config["also_copy"] == ["bp_adapter.py"]
        assert config["pytest_add_cli_args_test_selection"] == [target.TEST_FILE]
        assert config["use_git_change_detection"] is False
        assert config["track_dependencies"] is False
        plugins = config["pytest_add_cli_args"]
        assert [plugins[i] for i in range(0, len(plugins), 2)] == ["-p"] * (len(plugins) // 2)
        assert {"no:xdist", "no:randomly", "no:cacheprovider", "no:benchmark"} <= set(
            plugins[1::2])
    finally:
        shutil.rmtree(workdir)


def test_the_work_directory_of_a_module(theirs) -> None:
    workdir, _, _ = _prepared(theirs, MODULE)
    try:
        assert sorted(p.name for p in workdir.iterdir()) == [f"{MODULE}.py", "pyproject.toml",
                                                            "tests"]
        assert (workdir / f"{MODULE}.py").read_text() == THEIRS
        assert _config(workdir)["source_paths"] == [f"{MODULE}.py"]
        assert _config(workdir)["also_copy"] == []
        assert sorted(p.name for p in (workdir / "tests").iterdir()) == [
            Path(target.TEST_FILE).name]
    finally:
        shutil.rmtree(workdir)


# --------------------------------------------------------------------------- the check first


def _one(status: Outcome, **changes) -> AdapterReport:
    return AdapterReport("a", RECORD, "m:f", "-", [CheckOutcome("a", RECORD, "c", status,
                                                                detail="HarnessError: ours")],
                         [], 0, **changes)


@pytest.mark.parametrize(("statuses", "code"), [
    ([Outcome.PASS], 0), ([Outcome.NOT_TESTED], 1), ([Outcome.PASS, Outcome.NOT_TESTED], 1),
    ([Outcome.NEW], 1), ([Outcome.NOT_TESTED, Outcome.ERROR], 3), ([Outcome.SKIPPED], 0),
    ([Outcome.KNOWN], 0)])
def test_the_status_before_mutation(statuses, code) -> None:
    report = AdapterReport("a", RECORD, "m:f", "-",
                           [CheckOutcome("a", RECORD, f"c{i}", s) for i, s in enumerate(statuses)],
                           [], 0)
    assert target.baseline_status(report) == code


def test_a_function_that_passes_is_mutated_with_nothing_printed(capsys) -> None:
    chosen = Target(f"{MODULE}:multiple", RECORD, max_examples=3)
    assert target.check_first(chosen, chosen.adapter_for()) == 0
    assert capsys.readouterr() == ("", "")


def test_a_function_that_fails_its_checks_is_not_mutated(capsys) -> None:
    chosen = Target(f"{MODULE}:off_by_one", RECORD, max_examples=3)
    assert target.check_first(chosen, chosen.adapter_for()) == 1
    out, err = capsys.readouterr()
    again = f"batchproof check --impl {MODULE}:off_by_one --op {RECORD}"
    assert err == (f"not mutated: {MODULE}:off_by_one fails its checks before any mutation, so no "
                   f"mutant could be told from it. Make `{again}` pass first (or scope the "
                   "checks to what the function does), then mutate it.\n")
    assert f"{MODULE}:off_by_one vs {RECORD}" in out
    assert "profile=mutation search (3 examples per check)" in out
    assert f"replay: {again} --check equivalence" in out
    assert "new divergence(s)" in out and "in 1 target(s)" in out
    assert "traces to an option" not in out


def test_a_function_that_does_not_validate_is_told_the_scope_that_leaves_it_out(capsys) -> None:
    chosen = Target(f"{MODULE}:lenient", RECORD, max_examples=3)
    assert target.check_first(chosen, chosen.adapter_for()) == 1
    out = capsys.readouterr().out
    assert "Every new divergence above traces to an option the function may not support" in out
    assert (f"To check what it does support: batchproof check --impl {MODULE}:lenient --op "
            f"{RECORD} --skip errors") in out


def test_the_check_first_is_the_targets_search(monkeypatch, capsys) -> None:
    seen = []

    def check_adapter(adapter, candidate, **options):
        seen.append((adapter, candidate, options))
        return _one(Outcome.ERROR)

    monkeypatch.setattr(runner, "check_adapter", check_adapter)
    chosen = Target(f"{MODULE}:multiple", RECORD, max_examples=3,
                    scope=Scope.of(checks=["errors", "equivalence"]))
    adapter = chosen.adapter_for()
    assert target.check_first(chosen, adapter) == 3
    ((checked, candidate, options),) = seen
    assert checked is adapter and candidate(4) == required_multiple(4)
    search = options.pop("base_settings")
    assert options == {"checks": ["errors", "equivalence"], "report_multiple_bugs": False,
                       "replay_database": False}
    assert (search.max_examples, search.derandomize, search.database) == (3, True, None)
    target.check_first(Target(f"{MODULE}:multiple", RECORD), adapter)
    assert seen[-1][2]["checks"] is None
    assert "error (batchproof's own)" in capsys.readouterr().out


def test_a_function_no_input_reached_is_not_mutated(capsys) -> None:
    chosen = Target(f"{MODULE}:multiple", RECORD, max_examples=3)
    nothing = adapters._replace(chosen.adapter_for(), supports=lambda call: False)
    assert target.check_first(chosen, nothing) == 1
    out, err = capsys.readouterr()
    assert "NOT TESTED" in out and err.startswith("not mutated: ")


# --------------------------------------------------------------------------- the run


class _Mutmut:
    """A stand-in for mutmut: `run` writes `codes` (mutant name -> exit code) as its meta
    file, `show` a diff."""

    def __init__(self, codes: dict, returncode: int = 0, relative: str = f"{MODULE}.py"):
        self.codes, self.returncode, self.relative = codes, returncode, relative
        self.calls: list = []
        self.workdir: Path | None = None

    def __call__(self, args, workdir, capture=False):
        self.calls.append(list(args))
        if args[0] == "show":
            assert workdir == self.workdir and capture
            return SimpleNamespace(stdout=f"--- a\n+++ b\n-old {args[1]}\n+new\n", returncode=0)
        self.workdir = workdir
        assert (workdir / target.TEST_FILE).exists() and not capture
        if self.codes:
            meta = workdir / "mutants" / f"{self.relative}.meta"
            meta.parent.mkdir(parents=True, exist_ok=True)
            meta.write_text(json.dumps({"exit_code_by_key": self.codes}))
        return SimpleNamespace(returncode=self.returncode)


@pytest.fixture
def mutmut(monkeypatch):
    """Install a `_Mutmut` with the given codes; the check first passes, SIGTERM untouched."""
    state = SimpleNamespace(sigterm=0, checked=[])

    def install(codes: dict, returncode: int = 0) -> _Mutmut:
        fake = _Mutmut(codes, returncode)
        monkeypatch.setattr(driver, "_mutmut", fake)
        return fake

    def sigterm():
        state.sigterm += 1

    monkeypatch.setattr(driver, "_exit_on_sigterm", sigterm)
    monkeypatch.setattr(target, "check_first", lambda chosen, adapter: state.checked.append(
        (chosen, adapter)) or 0)
    install.state = state
    return install


def _name(function: str, number: int) -> str:
    return f"{MODULE}.x_{function}__mutmut_{number}"


CHOSEN = Target(f"{MODULE}:multiple", RECORD, max_examples=3)


def test_every_reached_mutant_killed_is_0(mutmut, capsys) -> None:
    fake = mutmut({_name("multiple", 1): 1, _name("multiple", 2): 3,
                   _name("lenient", 1): None, _name("off_by_one", 1): 33})
    assert target.main(CHOSEN, max_children=1) == 0
    assert fake.calls == [["run", "--max-children", "1"]]
    assert mutmut.state.sigterm == 1 and mutmut.state.checked[0][0] == CHOSEN
    out = capsys.readouterr().out
    assert (f"mutating {MODULE}.py (module {MODULE}); killers: batchproof.check(multiple, "
            f"'{RECORD}'), 3 examples per check") in out
    assert "2 mutants, 2 killed, 0 survived" in out
    assert "not reached by the checks (their mutants not counted): lenient, off_by_one" in out
    assert not fake.workdir.exists()  # removed


def test_a_survivor_is_1_and_shown(mutmut, capsys) -> None:
    fake = mutmut({_name("multiple", 1): 1, _name("multiple", 2): 0})
    assert target.main(CHOSEN) == 1
    assert fake.calls == [["run", "--max-children", str(driver.MAX_CHILDREN)],
                          ["show", _name("multiple", 2)]]
    out = capsys.readouterr().out
    assert f"SURVIVED: {_name('multiple', 2)}" in out and f"-old {_name('multiple', 2)}" in out
    assert "not reached" not in out


@pytest.mark.parametrize(("codes", "returncode", "message"), [
    ({_name("multiple", 1): 1}, 2, "error: mutmut exited with 2 and 1 mutants\n"),
    ({}, 0, "error: mutmut exited with 0 and 0 mutants\n"),
    ({_name("multiple", 1): None, _name("multiple", 2): 33}, 0,
     "error: the checks reached none of the module's mutated functions\n"),
])
def test_a_run_that_cannot_be_trusted_is_3(mutmut, capsys, codes, returncode, message) -> None:
    fake = mutmut(codes, returncode)
    assert target.main(CHOSEN) == 3
    assert capsys.readouterr().err == message
    assert not fake.workdir.exists()


def test_the_work_directory_is_kept_when_asked(mutmut, capsys) -> None:
    fake = mutmut({_name("multiple", 1): 1})
    assert target.main(CHOSEN, keep=True) == 0
    try:
        assert f"mutmut work directory kept: {fake.workdir}" in capsys.readouterr().out
        assert (fake.workdir / target.TEST_FILE).exists()
    finally:
        shutil.rmtree(fake.workdir)


def test_a_function_that_fails_first_is_not_mutated(monkeypatch) -> None:
    fake = _Mutmut({_name("multiple", 1): 1})
    monkeypatch.setattr(driver, "_mutmut", fake)
    monkeypatch.setattr(target, "check_first", lambda chosen, adapter: 3)
    assert target.main(CHOSEN) == 3 and fake.calls == []


def test_a_target_is_split_at_its_first_colon() -> None:
    chosen = Target(f"{MODULE}:multiple", RECORD).adapter_for()
    with pytest.raises(ValueError, match=rf"^{MODULE} has no function 'multiple:x'$"):
        target.locate(f"{MODULE}:multiple:x", chosen)


def test_every_adapter_file_is_imported(monkeypatch, theirs) -> None:
    (theirs / "bp_adapter.py").write_text("LOADED = True\n")
    (theirs / "bp_adapter_two.py").write_text("LOADED = True\n")
    monkeypatch.delitem(sys.modules, "bp_adapter_two", raising=False)
    chosen = Target(f"{MODULE}:multiple", RECORD,
                    scope=Scope.of(adapter_files=["bp_adapter.py", "bp_adapter_two.py"]))
    try:
        _run_source(target.test_source(MODULE, "multiple", chosen), monkeypatch)
        assert "bp_adapter" in sys.modules and "bp_adapter_two" in sys.modules
    finally:
        sys.modules.pop("bp_adapter_two", None)


def _failing(monkeypatch) -> None:
    """The check before mutation finds a new divergence that traces to `--skip errors`."""
    new = CheckOutcome("a", RECORD, "errors", Outcome.NEW, detail="it accepted", blob="AAAA",
                       traces=("skip", "errors"))
    report = AdapterReport("a", RECORD, "m:f", "-", [new], [], 0, framework="custom")
    monkeypatch.setattr(runner, "check_adapter", lambda *args, **kwargs: report)


def test_the_lines_of_a_failing_check_name_the_adapter(monkeypatch, capsys) -> None:
    _failing(monkeypatch)
    chosen = Target(f"{MODULE}:multiple", RECORD, adapter="fw.named")
    adapter = Target(f"{MODULE}:multiple", RECORD).adapter_for()
    assert target.check_first(chosen, adapter) == 1
    out, err = capsys.readouterr()
    words = f"batchproof check --impl {MODULE}:multiple --adapter fw.named"
    assert f"replay: {words} --check errors --reproduce AAAA" in out
    assert f"To check what it does support: {words} --skip errors" in out
    assert f"Make `{words}` pass first" in err


def test_what_main_hands_on(mutmut, monkeypatch, capsys) -> None:
    fake = mutmut({_name("multiple", 1): 1, _name("multiple", 2): 0})
    ticks = iter([100.0, 142.0])
    monkeypatch.setattr(target, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    written = []

    def prepare(*args):
        workdir = real_prepare(*args)
        written.append((workdir / target.TEST_FILE).read_text())
        return workdir

    real_prepare = target.prepare
    monkeypatch.setattr(target, "prepare", prepare)
    assert target.main(CHOSEN) == 1
    ((chosen, adapter),) = mutmut.state.checked
    assert (adapter.record, adapter.target) == (RECORD, CHOSEN.target)
    assert written == [target.test_source(MODULE, "multiple", CHOSEN)]
    out = capsys.readouterr().out
    assert f"mutmut over {MODULE}.py" in out
    assert "in 42s (guard: at least 0 mutants)" in out
    assert fake.calls[-1] == ["show", _name("multiple", 2)]


def test_a_work_directory_that_cannot_be_removed_is_no_failure(mutmut, monkeypatch) -> None:
    fake = mutmut({_name("multiple", 1): 1})
    removed = []

    def rmtree(path, ignore_errors=False):
        """A removal that fails (a file still open), as `shutil.rmtree` reports it."""
        if not ignore_errors:
            raise OSError(f"cannot remove {path}")
        removed.append(path)

    monkeypatch.setattr(target, "shutil", SimpleNamespace(
        rmtree=rmtree, copytree=shutil.copytree, copy2=shutil.copy2,
        ignore_patterns=shutil.ignore_patterns))
    try:
        assert target.main(CHOSEN) == 0
        assert removed == [fake.workdir]
    finally:
        shutil.rmtree(fake.workdir)


def test_the_search_is_the_same_whatever_profile_is_loaded() -> None:
    from hypothesis import settings
    from hypothesis.database import InMemoryExampleDatabase

    settings.register_profile("bp-test-target-loose", derandomize=False, deadline=200,
                              database=InMemoryExampleDatabase(), phases=list(Phase),
                              report_multiple_bugs=True)
    settings.load_profile("bp-test-target-loose")  # cli_state loads the previous one back
    search = Target("m:f", RECORD, max_examples=7).settings()
    assert search.derandomize and search.database is None and search.deadline is None
    assert tuple(search.phases) == (Phase.explicit, Phase.generate)
    assert not search.report_multiple_bugs

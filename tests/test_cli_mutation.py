"""`batchproof mutate` (`batchproof.cli.mutation`): which mode runs with what (the bug zoo's
kill matrix, its detection rates over seeds, mutmut over impl/ or a harness module, mutmut over
your function's module), the one-line usage errors, and what each mode prints and writes: the
table, the summary line, the JSON and Markdown reports and the exit status. The zoo is two
planted entries and the runs are stand-ins (tests/test_zoo.py and tests/test_mutmut_driver.py
run them for real); these tests are the killers of `batchproof mutate --mutmut --harness
cli/mutation`."""

from __future__ import annotations

import io
import json
import re
from types import SimpleNamespace

import pytest
from rich.console import Console

from batchproof import registry
from batchproof.cli import common, main
from batchproof.cli import mutation as mutation_cli
from batchproof.mutation import kill_matrix, mutmut_driver, target, zoo
from batchproof.mutation.kill_matrix import (
    DETECTION_PROFILE,
    DETECTION_TARGET,
    Detection,
    EntryResult,
)
from batchproof.mutation.zoo import ZooEntry

MULTIPLE, REAL = "trainer.required_multiple", "trainer.real_rows"
ENTRIES = [
    ZooEntry("t.one", "trainer", "required_multiple", "a product | not the lcm",
             ("property:least", "trainer.real_rows/equivalence"), replacement=lambda *a: 0),
    ZooEntry("t.two", "trainer", "real_rows", "rows by count", ("equivalence",),
             replacement=lambda *a: 0, oracle=True, target="_helper"),
    ZooEntry("b.three", "balance", "restore_order", "reversed", ("equivalence",),
             replacement=lambda *a: 0)]


@pytest.fixture(autouse=True)
def _a_small_zoo(monkeypatch):
    monkeypatch.setattr(zoo, "all_entries", lambda: list(ENTRIES))


@pytest.fixture
def screen(monkeypatch):
    """What the command prints (a wide console: no cell wrapped, no colour)."""
    out = io.StringIO()
    wide = Console(file=out, width=3000)
    monkeypatch.setattr(mutation_cli, "console", wide)
    return out


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _rows(out: str) -> list[list[str]]:
    """The table's header and rows, each cell stripped."""
    return [[c.strip() for c in line.replace("┃", "│").split("│")[1:-1]]
            for line in out.splitlines() if line.startswith(("│", "┃"))]


def _title(out: str) -> str:
    return out.splitlines()[0].strip()


# --------------------------------------------------------------------------- usage errors

@pytest.mark.parametrize(("argv", "message"), [
    (["--seeds", "3"], "--seeds goes with --zoo (the detection rate of each zoo entry)"),
    (["--mutmut", "--seeds", "3"], "--seeds goes with --zoo (the detection rate of each zoo "
                                   "entry)"),
    (["--zoo", "--jobs", "0"], "--jobs must be at least 1, got 0"),
    (["--mutmut", "--jobs", "-2"], "--jobs must be at least 1, got -2"),
    ([], "give --zoo, --mutmut, or --impl MODULE:FUNCTION with --op RECORD"),
    (["--zoo", "--op", "nope"], "no zoo entries for --op ['nope']; ops: ['rl_batch', 'sft', "
                                "'nesting', 'varlen', 'balance', 'trainer', 'pipeline', 'cp']"),
    (["--zoo", "--seeds", "0"], "--seeds must be at least 1, got 0"),
    (["--impl", "m:f", "--op", MULTIPLE, "--zoo"], "--impl runs mutmut over your module: not "
                                                   "with --zoo or --mutmut"),
    (["--impl", "m:f", "--op", MULTIPLE, "--mutmut"], "--impl runs mutmut over your module: "
                                                      "not with --zoo or --mutmut"),
    (["--impl", "m", "--op", MULTIPLE], "--impl needs MODULE:FUNCTION and --op naming one "
                                        "record"),
    (["--impl", "m:f"], "--impl needs MODULE:FUNCTION and --op naming one record"),
    (["--impl", "m:f", "--op", MULTIPLE, "--op", REAL], "--impl needs MODULE:FUNCTION and "
                                                        "--op naming one record"),
])
def test_a_usage_mistake_is_one_line_and_exit_2(argv, message, monkeypatch, capsys) -> None:
    for name in ("kill_matrix", "detection"):
        monkeypatch.setattr(kill_matrix, name, lambda *a, **k: pytest.fail("ran"))
    monkeypatch.setattr(mutmut_driver, "main", lambda **k: pytest.fail("ran"))
    monkeypatch.setattr(target, "main", lambda *a, **k: pytest.fail("ran"))
    assert main(["mutate", *argv]) == 2
    assert _one_line(capsys) == f"batchproof: error: {message}\n"


# --------------------------------------------------------------------------- mutmut

def test_mutmut_gets_the_options(monkeypatch, tmp_path) -> None:
    calls = []
    monkeypatch.setattr(mutmut_driver, "main", lambda **kwargs: calls.append(kwargs) or 1)
    assert main(["mutate", "--mutmut", "--op", "sft", "--since", "HEAD~2", "--min-mutants", "5",
                 "--json", "m.json", "--markdown", "m.md", "--jobs", "1"]) == 1
    assert main(["mutate", "--mutmut", "--harness", "compare", "--harness", "cli/parser"]) == 1
    assert calls == [
        dict(ops=["sft"], since="HEAD~2", min_mutants=5, json_path="m.json",
             markdown_path="m.md", harness=[], max_children=1),
        dict(ops=None, since=None, min_mutants=20, json_path=None, markdown_path=None,
             harness=["compare", "cli/parser"], max_children=mutmut_driver.MAX_CHILDREN)]


def test_a_refusal_of_mutmuts_driver_is_a_usage_error(monkeypatch, capsys) -> None:
    def refuse(**kwargs):
        raise ValueError("--harness mutates harness modules: not with --op")

    monkeypatch.setattr(mutmut_driver, "main", refuse)
    assert main(["mutate", "--mutmut", "--harness", "compare", "--op", "sft"]) == 2
    assert _one_line(capsys) == ("batchproof: error: --harness mutates harness modules: not "
                                 "with --op\n")


def test_an_unknown_harness_module_is_a_usage_error_listing_the_known(capsys, monkeypatch,
                                                                     tmp_path) -> None:
    for folder in ("tests", "impl"):  # a clone of the repository, wherever this runs
        (tmp_path / folder).mkdir()
    monkeypatch.setattr(mutmut_driver, "REPO", tmp_path)
    assert main(["mutate", "--mutmut", "--harness", "cli/nope"]) == 2
    assert _one_line(capsys) == (f"batchproof: error: no harness module 'cli/nope' to mutate; "
                                 f"known: {sorted(mutmut_driver.HARNESS_KILLERS)}\n")


# --------------------------------------------------------------------------- the kill matrix

@pytest.fixture
def matrix(monkeypatch):
    """`kill_matrix` as a stand-in: its calls, and the results it returns (`matrix.results`,
    one per entry asked by default: every declared killer killed)."""
    calls = SimpleNamespace(made=[], results=None)

    def run(entries, **kwargs):
        calls.made.append(([e.name for e in entries], kwargs))
        results = calls.results or [
            EntryResult(e.name, e.op, [f"{r}/{c}" for r, c in e.killer_checks()],
                        {f"{r}/{c}": True for r, c in e.killer_checks()}, seconds=1.25)
            for e in entries]
        for r in results:
            kwargs["progress"](r)
        return results

    monkeypatch.setattr(kill_matrix, "kill_matrix", run)
    return calls


def test_the_zoo_runs_the_entries_of_the_ops_named(matrix, screen) -> None:
    assert main(["mutate", "--zoo", "--op", "trainer", "--jobs", "3", "--without",
                 "trainer.real_rows/equivalence", "--search-only", "--profile", "dev"]) == 0
    ((names, kwargs),) = matrix.made
    assert names == ["t.one", "t.two"]
    assert callable(kwargs.pop("progress"))
    assert kwargs == dict(profile="dev", jobs=3, disabled=["trainer.real_rows/equivalence"],
                          search_only=True)
    matrix.made.clear()
    assert main(["mutate", "--zoo", "--op", REAL, "--op", "balance"]) == 0
    ((names, kwargs),) = matrix.made
    assert names == ["t.two", "b.three"]
    assert {k: kwargs[k] for k in ("profile", "jobs", "disabled", "search_only")} == dict(
        profile="mutation", jobs=None, disabled=[], search_only=False)


def test_the_kill_matrix_table_and_its_summary(matrix, screen) -> None:
    matrix.results = [
        EntryResult("t.one", "trainer", [f"{MULTIPLE}/property:least", f"{REAL}/equivalence"],
                    {f"{MULTIPLE}/property:least": True, f"{REAL}/equivalence": False,
                     f"{MULTIPLE}/pin:dp2_mini15_n8": True}, seconds=2.0),
        EntryResult("t.two", "trainer", [f"{REAL}/equivalence"],
                    {f"{REAL}/equivalence": False}, seconds=0.25),
        EntryResult("b.three", "balance", ["balance.restore_order/pin:a/b"],
                    {"balance.restore_order/pin:a/b": True}, seconds=10.04)]
    assert main(["mutate", "--zoo"]) == 1
    out = screen.getvalue()
    assert _title(out) == "bug zoo kill matrix — profile=mutation"
    assert _rows(out) == [
        ["entry", "op.function", "result", "killed by (* = declared killer)", "time"],
        ["t.one", MULTIPLE, "killed, missed 1 declared", "property:least*, pin:dp2_mini15_n8",
         "2.0s"],
        ["t.two", REAL, "SURVIVED", "-", "0.2s"],
        ["b.three", "balance.restore_order", "KILLED", "pin:a/b*", "10.0s"]]  # (a name with /)
    seconds = re.search(r"\n2/3 entries killed \(67%\), 1 with every declared killer, in "
                        r"(\d+\.\d)s\n$", out)
    assert seconds and 0 <= float(seconds[1]) < 600, out


def test_every_entry_killed_by_its_declared_killers_is_exit_0(matrix, screen) -> None:
    assert main(["mutate", "--zoo"]) == 0
    assert re.search(r"\n3/3 entries killed \(100%\), 3 with every declared killer, in ",
                     screen.getvalue())
    assert [row[2] for row in _rows(screen.getvalue())[1:]] == ["KILLED"] * 3


def test_a_killer_of_another_record_keeps_its_record(matrix, screen) -> None:
    assert main(["mutate", "--zoo", "--op", MULTIPLE]) == 0
    assert _rows(screen.getvalue())[1][3] == "property:least*, trainer.real_rows/equivalence*"


def test_the_kill_matrix_colours_its_verdicts(matrix, monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(mutation_cli, "console", Console(file=out, width=3000,
                                                         force_terminal=True,
                                                         color_system="standard"))
    matrix.results = [EntryResult("t.one", "trainer", ["a"], {"a": False, "b": True}),
                      EntryResult("t.two", "trainer", ["a"], {"a": False}),
                      EntryResult("b.three", "balance", ["a"], {"a": True})]
    assert main(["mutate", "--zoo"]) == 1
    text = out.getvalue()
    assert "\x1b[33mkilled, missed 1 declared" in text
    assert "\x1b[31mSURVIVED" in text and "\x1b[32mKILLED" in text


def test_the_kill_matrix_json_and_markdown(matrix, screen, tmp_path) -> None:
    matrix.results = [
        EntryResult("t.one", "trainer", [f"{MULTIPLE}/property:least"],
                    {f"{MULTIPLE}/property:least": True, f"{REAL}/equivalence": True,
                     f"{MULTIPLE}/errors": False}, seconds=2.0),
        EntryResult("t.two", "trainer", [f"{REAL}/equivalence"], {f"{REAL}/equivalence": False}),
        EntryResult("b.three", "balance", ["y"], {"x": True, "balance.restore_order/pin:a/b": True})]
    report, table = tmp_path / "zoo.json", tmp_path / "zoo.md"
    assert main(["mutate", "--zoo", "--json", str(report), "--markdown", str(table),
                 "--profile", "ci"]) == 1
    assert report.read_text() == json.dumps(json.loads(report.read_text()), indent=2)
    assert json.loads(report.read_text()) == [
        {"entry": "t.one", "op": "trainer", "declared": [f"{MULTIPLE}/property:least"],
         "killed_by": {f"{MULTIPLE}/property:least": True, f"{REAL}/equivalence": True,
                       f"{MULTIPLE}/errors": False}, "errors": {}, "seconds": 2.0},
        {"entry": "t.two", "op": "trainer", "declared": [f"{REAL}/equivalence"],
         "killed_by": {f"{REAL}/equivalence": False}, "errors": {}, "seconds": 0.0},
        {"entry": "b.three", "op": "balance", "declared": ["y"],
         "killed_by": {"x": True, "balance.restore_order/pin:a/b": True},
         "errors": {}, "seconds": 0.0}]
    assert table.read_text() == (
        "| entry | replaces | bug | killed by (profile `ci`; **declared**) |\n"
        "|---|---|---|---|\n"
        f"| `t.one` | `{MULTIPLE}` | a product \\| not the lcm | **property:least**, "
        f"{REAL}/equivalence |\n"
        f"| `t.two` | `{REAL}` (oracle) (its `_helper`) | rows by count | SURVIVED |\n"
        "| `b.three` | `balance.restore_order` | reversed | x, pin:a/b |\n"
        "\n"
        "2/3 entries killed.\n")


def test_the_progress_bar_advances_once_per_entry(matrix, monkeypatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setattr(common, "console", Console(file=screen, force_terminal=True, width=120))
    monkeypatch.setattr(mutation_cli, "console", Console(file=io.StringIO(), width=3000))
    assert main(["mutate", "--zoo"]) == 0
    assert "bug zoo" in screen.getvalue()
    assert "3/3" in screen.getvalue().rsplit("bug zoo", 1)[1]


# --------------------------------------------------------------------------- detection

@pytest.fixture
def detecting(monkeypatch):
    calls = SimpleNamespace(made=[], results=None)

    def run(entries, **kwargs):
        calls.made.append(([e.name for e in entries], kwargs))
        for _ in entries:
            kwargs["progress"](None)
        return calls.results

    monkeypatch.setattr(kill_matrix, "detection", run)
    return calls


def _detections() -> list[Detection]:
    return [Detection("t.one", "trainer", [f"{MULTIPLE}/property:least", f"{REAL}/equivalence"],
                      seeds=4, killed=4, by_check={f"{MULTIPLE}/property:least": 4,
                                                  f"{REAL}/equivalence": 2,
                                                  f"{MULTIPLE}/pin:dp2_mini15_n8": 1}),
            Detection("t.two", "trainer", [f"{REAL}/equivalence"], seeds=4, killed=3,
                      by_check={f"{REAL}/equivalence": 3}),
            Detection("b.three", "balance", [], seeds=4, killed=4,
                      by_check={"balance.restore_order/equivalence": 4,
                                "balance.restore_order/pin:a/b": 1})]


def test_detection_runs_each_entry_over_the_seeds(detecting, screen) -> None:
    detecting.results = _detections()[:2]
    assert main(["mutate", "--zoo", "--op", "trainer", "--seeds", "4", "--jobs", "2",
                 "--without", "x/y", "--search-only"]) == 1
    ((names, kwargs),) = detecting.made
    assert names == ["t.one", "t.two"]
    assert callable(kwargs.pop("progress"))
    assert kwargs == dict(seeds=4, jobs=2, disabled=["x/y"], search_only=True)


def test_the_detection_table_and_its_summary(detecting, screen) -> None:
    detecting.results = _detections()
    assert main(["mutate", "--zoo", "--seeds", "4"]) == 1
    out = screen.getvalue()
    assert _title(out) == (f"bug zoo detection — 4 seeds of profile={DETECTION_PROFILE}: the "
                           "fraction of runs that kill each entry")
    assert _rows(out) == [
        ["entry", "killed", "weakest declared killer", "declared killers",
         "other checks, in runs the declared missed"],
        ["t.one", "4/4", f"{REAL}/equivalence 0.50",
         f"property:least 1.00, {REAL}/equivalence 0.50", "pin:dp2_mini15_n8 1"],
        ["t.two", "3/4", "equivalence 0.75", "equivalence 0.75", "-"],
        ["b.three", "4/4", "-", "-", "equivalence 4, pin:a/b 1"]]
    seconds = re.search(rf"\n2/3 entries killed in >= {DETECTION_TARGET:.0%} of 4 seeded runs, "
                        r"in (\d+\.\d)s; below: t\.two\n$", out)
    assert seconds and 0 <= float(seconds[1]) < 600, out


def test_detection_without_the_pins_says_so_and_all_above_is_exit_0(detecting,
                                                                    screen) -> None:
    detecting.results = [_detections()[0], _detections()[2]]
    assert main(["mutate", "--zoo", "--op", MULTIPLE, "--op", "balance", "--seeds", "4",
                 "--search-only"]) == 0
    out = screen.getvalue()
    assert _title(out) == (f"bug zoo detection — 4 seeds of profile={DETECTION_PROFILE}, "
                           "without the pins: the fraction of runs that kill each entry")
    assert re.search(r"\n2/2 entries killed in >= 95% of 4 seeded runs, in \d+\.\ds\n$", out)


def test_a_detection_rate_below_the_target_is_red(detecting, monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(mutation_cli, "console", Console(file=out, width=3000,
                                                         force_terminal=True,
                                                         color_system="standard"))
    at_target = Detection("t.one", "trainer", [], seeds=20, killed=19)
    detecting.results = [at_target, Detection("t.two", "trainer", [], seeds=20, killed=18)]
    assert main(["mutate", "--zoo", "--op", "trainer", "--seeds", "20"]) == 1
    text = out.getvalue()
    assert "\x1b[31m18/20" in text and "\x1b[31m19/20" not in text and "19/20" in text


def test_the_detection_json_and_markdown(detecting, screen, tmp_path) -> None:
    detecting.results = _detections()
    report, table = tmp_path / "detection.json", tmp_path / "detection.md"
    assert main(["mutate", "--zoo", "--seeds", "4", "--json", str(report), "--markdown",
                 str(table)]) == 1
    assert [d["entry"] for d in json.loads(report.read_text())] == ["t.one", "t.two", "b.three"]
    assert json.loads(report.read_text())[1] == {
        "entry": "t.two", "op": "trainer", "declared": [f"{REAL}/equivalence"], "seeds": 4,
        "killed": 3, "by_check": {f"{REAL}/equivalence": 3}, "seconds": 0.0}
    assert table.read_text() == (
        f"| entry | runs that kill it (of 4, `{DETECTION_PROFILE}`) | weakest declared killer "
        "| declared killers: fraction of runs | other checks: runs, of those the declared "
        "missed |\n"
        "|---|---|---|---|---|\n"
        f"| `t.one` | 4/4 | {REAL}/equivalence 0.50 | property:least 1.00, "
        f"{REAL}/equivalence 0.50 | pin:dp2_mini15_n8 1 |\n"
        "| `t.two` | 3/4 | equivalence 0.75 | equivalence 0.75 | - |\n"
        "| `b.three` | 4/4 | - | - | equivalence 4, pin:a/b 1 |\n")
    assert report.read_text() == json.dumps(json.loads(report.read_text()), indent=2)
    assert main(["mutate", "--zoo", "--seeds", "4", "--search-only", "--markdown",
                 str(table)]) == 1
    assert table.read_text().startswith(
        f"| entry | runs that kill it (of 4, `{DETECTION_PROFILE}`, no pins) | ")
    mutation_cli._write_detection_markdown(str(table), _detections()[1:2], 4)
    assert table.read_text().startswith(
        f"| entry | runs that kill it (of 4, `{DETECTION_PROFILE}`) | ")


def test_entries_below_the_target_are_named_and_one_seed_is_enough(detecting,
                                                                   screen) -> None:
    detecting.results = [Detection("t.one", "trainer", [], seeds=1, killed=0),
                         Detection("t.two", "trainer", [], seeds=1, killed=0)]
    assert main(["mutate", "--zoo", "--op", "trainer", "--seeds", "1"]) == 1
    assert "; below: t.one, t.two\n" in screen.getvalue()
    assert detecting.made[0][1]["seeds"] == 1


class _Progress:
    """`_progress()` as a stand-in: its tasks (description, total) and their advances."""

    def __init__(self) -> None:
        self.tasks, self.done = [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def add_task(self, description, total):
        self.tasks.append((description, total))
        self.done.append(0)
        return len(self.tasks) - 1

    def advance(self, task, steps=1) -> None:
        self.done[task] += steps


def test_the_progress_of_the_zoo_and_of_detection(matrix, detecting, screen,
                                                  monkeypatch) -> None:
    bar = _Progress()
    monkeypatch.setattr(mutation_cli, "_progress", lambda: bar)
    assert main(["mutate", "--zoo"]) == 0
    detecting.results = _detections()
    assert main(["mutate", "--zoo", "--seeds", "4"]) == 1
    assert bar.tasks == [("bug zoo", 3), ("bug zoo x seeds", 12)]
    assert bar.done == [3, 3]  # the stand-in reports one run per entry


def test_declared_killers_are_sorted_by_their_rate_then_name() -> None:
    found = Detection("t.one", "trainer", [f"{MULTIPLE}/b", f"{MULTIPLE}/a", f"{REAL}/c"],
                      seeds=10, by_check={f"{MULTIPLE}/b": 9, f"{MULTIPLE}/a": 9,
                                          f"{REAL}/c": 10, f"{REAL}/d": 2})
    assert mutation_cli._detection_killers(found) == (
        f"{REAL}/c 1.00, a 0.90, b 0.90", f"{REAL}/d 2")


# --------------------------------------------------------------------------- --impl

@pytest.fixture
def mutated(monkeypatch):
    calls = []
    monkeypatch.setattr(target, "main", lambda chosen, **kwargs: calls.append(
        (chosen, kwargs)) or 1)
    return calls


def test_impl_mutates_the_module_of_the_function_checked_in_its_scope(mutated,
                                                                     cli_state) -> None:
    assert main(["mutate", "--impl", "batchproof.reference.trainer:required_multiple", "--op",
                 MULTIPLE, "--max-examples", "5", "--skip", "errors", "--jobs", "1"]) == 1
    assert main(["mutate", "--impl", "batchproof.reference.trainer:required_multiple", "--op",
                 MULTIPLE]) == 1
    (chosen, kwargs), (default, default_kwargs) = mutated
    assert (chosen.target, chosen.record, chosen.adapter, chosen.max_examples) == (
        "batchproof.reference.trainer:required_multiple", MULTIPLE, None, 5)
    assert set(chosen.scope.skip) == {"errors"} and kwargs == {"max_children": 1}
    assert default.max_examples == 20 and default.scope.skip == {}
    assert default_kwargs == {"max_children": mutmut_driver.MAX_CHILDREN}


def test_impl_refuses_an_unknown_record_option_or_adapter(mutated, capsys) -> None:
    base = ["mutate", "--impl", "batchproof.reference.trainer:required_multiple"]
    with pytest.raises(ValueError) as registry_says:
        registry.get("trainer.nope")
    assert main([*base, "--op", "trainer.nope"]) == 2
    assert _one_line(capsys) == f"batchproof: error: {registry_says.value}\n"
    assert main([*base, "--op", MULTIPLE, "--skip", "property:nope"]) == 2
    assert "property:nope" in _one_line(capsys)
    assert main([*base, "--op", MULTIPLE, "--adapter", "verl.karmarkar_karp"]) == 2
    assert _one_line(capsys) == (f"batchproof: error: adapter verl.karmarkar_karp is for "
                                 f"balance.karmarkar_karp, not {MULTIPLE}\n")
    assert mutated == []


def test_impl_without_mutmut_or_its_target_is_exit_3(mutated, monkeypatch, capsys) -> None:
    def unimportable(chosen, **kwargs):
        raise ImportError("no module named 'theirs'")

    monkeypatch.setattr(target, "main", unimportable)
    assert main(["mutate", "--impl", "theirs:f", "--op", MULTIPLE]) == 3
    assert _one_line(capsys) == "batchproof: error: --impl theirs:f: no module named 'theirs'\n"
    import importlib.util
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mutmut" else find_spec(name, *a))
    assert main(["mutate", "--impl", "theirs:f", "--op", MULTIPLE]) == 3
    assert _one_line(capsys) == ("batchproof: error: mutate --impl needs mutmut (pip install "
                                 "'batchproof[mutation]')\n")


def test_impl_loads_the_adapter_files_first(mutated, tmp_path, monkeypatch) -> None:
    from batchproof import adapters

    adapters.all_adapters()
    monkeypatch.setattr(adapters, "_ADAPTERS", dict(adapters._ADAPTERS))
    file = tmp_path / "my_adapters.py"
    file.write_text("import batchproof\n\nbatchproof.register_adapter(batchproof.Adapter("
                    f"'mine.multiple', 'mine', {MULTIPLE!r}, 'm:f', wrap=lambda f: f))\n")
    assert main(["mutate", "--impl", "m:f", "--op", MULTIPLE, "--adapter-file", str(file),
                 "--adapter", "mine.multiple"]) == 1
    ((chosen, _),) = mutated
    assert chosen.adapter == "mine.multiple"

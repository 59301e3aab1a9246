"""`batchproof fuzz` (`batchproof.cli.fuzz`) without HypoFuzz running: the command line it
starts HypoFuzz with (workers, dashboard, the pytest collection and its node ids), its usage
errors, how it ends (Ctrl-C or SIGTERM: exit 130 and the summary; a signal: the shell's status)
and the summary it prints from HypoFuzz's reports (a stand-in database). tests/test_fuzz.py
runs HypoFuzz for real; these tests are the killers of `batchproof mutate --mutmut --harness
cli/fuzz`, and take milliseconds."""

from __future__ import annotations

import importlib.util
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import settings
from hypothesis.database import InMemoryExampleDatabase
from rich.console import Console

from batchproof import checks, registry
from batchproof.cli import common, main
from batchproof.cli import fuzz as fuzz_cli

RECORD = "balance.restore_order"  # three searched checks
INFO = registry.get(RECORD)
SEARCHED = [c for c in INFO.check_names() if checks.searched(c)]


@pytest.fixture(autouse=True)
def _hypofuzz_installed(monkeypatch, cli_state):
    monkeypatch.delenv("BATCHPROOF_SHARED_DATABASE", raising=False)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: (
        object() if name == "hypofuzz" else find_spec(name, *args)))


class _Child:
    """subprocess.Popen's stand-in: `wait` returns `code`, or raises `interrupt` first."""

    made: list = []

    def __init__(self, command, code=0, interrupt=None, then=None) -> None:
        self.command, self.code, self.interrupt, self.then = command, code, interrupt, then
        self.waits, self.killed, self.sigterm = [], False, signal.getsignal(signal.SIGTERM)
        _Child.made.append(self)

    def wait(self, timeout=None):
        self.waits.append(timeout)
        if self.interrupt is not None and len(self.waits) == 1:
            raise self.interrupt
        if self.then is not None and len(self.waits) == 2:
            raise self.then
        return self.code

    def kill(self) -> None:
        self.killed = True


@pytest.fixture
def started(monkeypatch):
    """HypoFuzz's process as a stand-in (`started.child`: how it ends) and the summary's calls."""
    state = SimpleNamespace(child={}, summaries=[])
    monkeypatch.setattr(_Child, "made", [])
    monkeypatch.setattr(subprocess, "Popen", lambda command: _Child(command, **state.child))
    monkeypatch.setattr(fuzz_cli, "_fuzz_summary",
                        lambda pairs, since: state.summaries.append((pairs, since)))
    state.made = _Child.made
    return state


def _command(*options: str) -> list[str]:
    return [sys.executable, "-c", fuzz_cli.HYPOFUZZ_MAIN, "fuzz", *options]


def test_fuzz_starts_hypofuzz_on_the_checks_selected(started, capsys) -> None:
    settings.load_profile("ci")
    assert main(["fuzz", "--op", RECORD, "-n", "3"]) == 0
    assert settings._current_profile == "nightly"  # here too: its database is read here
    (child,) = started.made
    tests = [f"{fuzz_cli.fuzz_module()}::test_{checks.check_test_name(INFO, c)}"
             for c in SEARCHED]
    assert child.command == _command("-n", "3", "--no-dashboard", "--",
                                     *fuzz_cli.fuzz_pytest_args("nightly", tests))
    assert child.waits == [None]
    assert capsys.readouterr().out == (f"batchproof fuzz: HypoFuzz on 3 processes, "
                                       f"{len(SEARCHED)} checks, profile nightly; until "
                                       "stopped (Ctrl-C)\n")
    ((pairs, since),) = started.summaries
    assert pairs == [(INFO, c) for c in SEARCHED] and since > 0


def test_fuzz_without_op_or_check_collects_the_whole_module(started, monkeypatch,
                                                            capsys) -> None:
    monkeypatch.setattr(fuzz_cli, "_cores", lambda: 1)
    assert main(["fuzz", "--profile", "dev"]) == 0
    (child,) = started.made
    assert child.command == _command("-n", "1", "--no-dashboard", "--",
                                     *fuzz_cli.fuzz_pytest_args("dev"))
    assert "HypoFuzz on 1 process, " in capsys.readouterr().out
    ((pairs, _),) = started.summaries
    assert len(pairs) == sum(checks.searched(c) for i in registry.all_ops() if not i.missing()
                             for c in i.check_names())


def test_fuzz_of_named_checks_only(started) -> None:
    assert main(["fuzz", "--check", "equivalence", "-n", "2"]) == 0
    (child,) = started.made
    ((pairs, _),) = started.summaries
    assert {c for _, c in pairs} == {"equivalence"}
    assert child.command[-len(pairs):] == [
        f"{fuzz_cli.fuzz_module()}::test_{checks.check_test_name(i, c)}" for i, c in pairs]


@pytest.mark.parametrize(("options", "dashboard", "summary"), [
    (["--dashboard"], ["--dashboard", "--port", "9999"], True),
    (["--dashboard", "--port", "8123"], ["--dashboard", "--port", "8123"], True),
    (["--dashboard-only", "--port", "8124"], ["--dashboard-only", "--port", "8124"], False),
])
def test_the_dashboard(options, dashboard, summary, started, capsys) -> None:
    assert main(["fuzz", "--op", RECORD, "-n", "2", *options]) == 0
    (child,) = started.made
    assert child.command[:len(_command()) + 2 + len(dashboard) + 1] == _command(
        "-n", "2", *dashboard, "--")
    doing = "dashboard only" if "--dashboard-only" in options else "HypoFuzz on 2 processes"
    assert capsys.readouterr().out.startswith(f"batchproof fuzz: {doing}, 3 checks, ")
    assert bool(started.summaries) is summary


def test_stopped_it_exits_130_with_the_summary(started) -> None:
    started.child = {"code": 0, "interrupt": KeyboardInterrupt()}
    assert main(["fuzz", "--op", RECORD, "-n", "1"]) == 130
    (child,) = started.made
    assert child.waits == [None, 30] and not child.killed
    assert len(started.summaries) == 1


@pytest.mark.parametrize("then", [KeyboardInterrupt(), subprocess.TimeoutExpired("x", 30)])
def test_a_child_that_does_not_stop_is_killed(then, started) -> None:
    started.child = {"code": 0, "interrupt": KeyboardInterrupt(), "then": then}
    assert main(["fuzz", "--op", RECORD, "-n", "1"]) == 130
    (child,) = started.made
    assert child.killed and child.waits == [None, 30]


@pytest.mark.parametrize(("code", "status"), [(1, 1), (0, 0), (-15, 143), (-9, 137)])
def test_hypofuzzs_status_is_the_commands(code, status, started) -> None:
    started.child = {"code": code}
    assert main(["fuzz", "--op", RECORD, "-n", "1"]) == status


def test_sigterm_stops_it_as_ctrl_c_does_while_hypofuzz_runs(started) -> None:
    before = signal.getsignal(signal.SIGTERM)
    assert main(["fuzz", "--op", RECORD, "-n", "1"]) == 0
    (child,) = started.made
    assert child.sigterm is fuzz_cli._interrupt  # while it ran
    assert signal.getsignal(signal.SIGTERM) is before  # given back
    with pytest.raises(KeyboardInterrupt):
        fuzz_cli._interrupt(signal.SIGTERM, None)


@pytest.mark.parametrize(("argv", "message"), [
    (["--profile", "ci"], "--profile ci is derandomized, without a database: HypoFuzz fuzzes "
                          "none of its tests (nightly or dev)"),
    (["--profile", "mutation"], "--profile mutation is derandomized, without a database: "
                                "HypoFuzz fuzzes none of its tests (nightly or dev)"),
    (["--profile", "fast"], "unknown Hypothesis profile 'fast'; known: ['ci', 'dev', "
                            "'mutation', 'nightly']"),
    (["-n", "0"], "-n must be at least 1, got 0"),
    (["--workers", "-1"], "-n must be at least 1, got -1"),
    (["--check", "pin:k_greater_than_n", "--op", "balance.karmarkar_karp"],
     "no searched check selected: a pin is one example, nothing to fuzz (`batchproof verify` "
     "runs it)"),
])
def test_fuzz_usage_errors(argv, message, started, capsys) -> None:
    assert main(["fuzz", *argv]) == 2
    assert capsys.readouterr().err == f"batchproof: error: {message}\n"
    assert started.made == []


def test_without_hypofuzz_it_says_what_to_install(monkeypatch, started, capsys) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: (
        None if name == "hypofuzz" else find_spec(name, *args)))
    assert main(["fuzz", "--op", RECORD]) == 2
    assert capsys.readouterr().err == ("batchproof: error: batchproof fuzz needs HypoFuzz: pip "
                                       "install 'batchproof[fuzz]'\n")


def test_a_shared_database_is_read_once_before_hypofuzz_starts(started, monkeypatch) -> None:
    fetched = []

    class Database(InMemoryExampleDatabase):
        def fetch(self, key):
            fetched.append(key)
            return iter(())

    settings.register_profile("test_cli_fuzz", database=Database())
    monkeypatch.setattr(fuzz_cli, "_load_profile",
                        lambda name: settings.load_profile("test_cli_fuzz") or name)
    assert main(["fuzz", "--op", RECORD, "-n", "1"]) == 0
    assert fetched == [b"batchproof fuzz: read the shared database once"]
    settings.register_profile("test_cli_fuzz_none", database=None)
    monkeypatch.setattr(fuzz_cli, "_load_profile",
                        lambda name: settings.load_profile("test_cli_fuzz_none") or name)
    assert main(["fuzz", "--op", RECORD, "-n", "1"]) == 0  # no database: nothing to read


def test_the_fuzz_module_and_its_pytest_arguments() -> None:
    module = fuzz_cli.fuzz_module()
    assert module == Path(checks.__file__).parent / checks.FUZZ_MODULE and module.is_file()
    assert fuzz_cli.fuzz_pytest_args("dev") == [
        f"--rootdir={module.parent}", "-c", os.devnull, "-p", "batchproof.plugin", "-p",
        "no:cacheprovider", "--hypothesis-profile=dev", str(module)]
    assert fuzz_cli.fuzz_pytest_args("nightly", ["a::test_b", "a::test_c"])[-3:] == [
        "--hypothesis-profile=nightly", "a::test_b", "a::test_c"]
    assert fuzz_cli.fuzz_pytest_args("nightly", [])[-1] == str(module)


def test_a_checks_database_key_is_its_fuzz_targets() -> None:
    assert fuzz_cli.fuzz_database_key(INFO, "equivalence") == \
        checks.given_test(INFO, "equivalence")._hypothesis_internal_database_key
    assert fuzz_cli.fuzz_database_key(INFO, "equivalence") != fuzz_cli.fuzz_database_key(
        INFO, SEARCHED[-1])


# --------------------------------------------------------------------------- the summary

def _report(worker: str, timestamp: float, elapsed: float, cases: int = 1, behaviours: int = 1):
    return SimpleNamespace(worker_uuid=worker, timestamp=timestamp, elapsed_time=elapsed,
                           status_counts={"valid": cases, "invalid": 0}, behaviors=behaviours)


def test_the_latest_report_of_each_process_since_the_start() -> None:
    reports = [_report("a", 5.0, 1.0), _report("a", 9.0, 3.0), _report("a", 8.0, 2.0),
               _report("b", 4.0, 9.0), _report("b", 10.0, 2.0), _report("b", 10.0, 2.0, 7),
               _report("c", 1.0, 99.0)]
    latest = fuzz_cli.latest_reports(reports, since=4.0)
    assert latest == [reports[1], reports[3]]
    assert fuzz_cli.latest_reports(reports, since=5.0) == [reports[1], reports[5]]
    assert fuzz_cli.latest_reports([], since=0.0) == []


class _Fetch(SimpleNamespace):
    def fetch(self, key):
        return self.by_key.get(key, self.default)


class _Database:
    """HypofuzzDatabase's stand-in: per key, its reports, shrunk failures and fatal failure."""

    keys: dict = {}
    made: list = []

    def __init__(self, database) -> None:
        self.database = database
        _Database.made.append(self)
        self.reports = _Fetch(by_key={k: v["reports"] for k, v in self.keys.items()},
                              default=[])
        self.fatal_failures = _Fetch(by_key={k: v.get("fatal") for k, v in self.keys.items()},
                                     default=None)

    def failures(self, *, state):
        from hypofuzz.database.models import FailureState

        assert state == FailureState.SHRUNK
        return _Fetch(by_key={k: v.get("failures", []) for k, v in self.keys.items()},
                      default=[])


@pytest.fixture
def database(monkeypatch):
    hypofuzz_database = pytest.importorskip("hypofuzz.database")
    monkeypatch.setattr(hypofuzz_database, "HypofuzzDatabase", _Database)
    monkeypatch.setattr(_Database, "keys", {})
    monkeypatch.setattr(_Database, "made", [])
    settings.register_profile("test_cli_fuzz_db", database=InMemoryExampleDatabase())
    settings.load_profile("test_cli_fuzz_db")
    return _Database.keys


def test_fuzz_counts_what_the_reports_say_ran(database) -> None:
    one, two, three = SEARCHED
    key = {c: fuzz_cli.fuzz_database_key(INFO, c) for c in SEARCHED}
    database[key[one]] = {"reports": [_report("a", 5.0, 1.0, 3, 2), _report("b", 6.0, 1.0, 4, 5),
                                      _report("a", 7.0, 2.0, 10, 4), _report("c", 1.0, 9.0, 99)],
                          "failures": ["f1", "f2"]}
    database[key[two]] = {"reports": [_report("a", 1.0, 1.0, 5)],
                          "fatal": SimpleNamespace(traceback="Traceback:\n  x\nValueError: no\n")}
    database[key[three]] = {"reports": [_report("a", 5.0, 1.0, 0)]}
    counts = fuzz_cli.fuzz_counts([(INFO, c) for c in SEARCHED], since=4.0)
    assert [db.database for db in _Database.made] == [settings().database]  # the profile's
    assert counts == [
        fuzz_cli.FuzzCount(RECORD, one, cases=14, behaviours=5, failing=2),
        fuzz_cli.FuzzCount(RECORD, two, why="HypoFuzz could not run it (ValueError: no)"),
        fuzz_cli.FuzzCount(RECORD, three, why=(
            "HypoFuzz started it but reported no input yet (a process reports every second at "
            "first, then every minute: the inputs since are not counted)"))]


def test_why_a_check_is_not_counted() -> None:
    db = SimpleNamespace(fatal_failures=_Fetch(by_key={b"k": SimpleNamespace(traceback="  \n")},
                                               default=None))
    assert fuzz_cli._why_not_counted(db, b"k", []) == "HypoFuzz could not run it (?)"
    assert fuzz_cli._why_not_counted(db, b"other", []) == (
        "no report of HypoFuzz since the run started (it had not reached this check)")


def test_without_a_database_nothing_is_counted(cli_state) -> None:
    settings.register_profile("test_cli_fuzz_nodb", database=None)
    settings.load_profile("test_cli_fuzz_nodb")
    assert fuzz_cli.fuzz_counts([(INFO, SEARCHED[0])], since=0.0) == [
        fuzz_cli.FuzzCount(RECORD, SEARCHED[0], why="the profile has no example database")]


@pytest.fixture
def screen(monkeypatch):
    out = io.StringIO()
    wide = Console(file=out, width=400)
    monkeypatch.setattr(common, "console", wide)
    monkeypatch.setattr(fuzz_cli, "console", wide)
    return out


def test_the_summary_table_and_why_a_check_was_not_counted(screen) -> None:
    counts = [fuzz_cli.FuzzCount("r.one", "equivalence", cases=120, behaviours=7, failing=2),
              fuzz_cli.FuzzCount("r.one", "errors", why="no report of HypoFuzz"),
              fuzz_cli.FuzzCount("r.two", "property:x", cases=3, behaviours=1),
              fuzz_cli.FuzzCount("r.zero", "equivalence", cases=5, behaviours=None, failing=1)]
    fuzz_cli.print_fuzz_counts(counts, 61.6)
    lines = screen.getvalue().splitlines()
    assert lines[0].rstrip() == "HypoFuzz, 62 s"  # to the left, above the table
    rows = [[c for c in line.replace("┃", "│").split("│")[1:-1]] for line in lines
            if line.startswith(("│", "┃"))]
    assert [[c.strip() for c in row] for row in rows] == [
        ["record", "check", "test cases", "behaviours", "failing examples saved"],
        ["r.one", "equivalence", "120", "7", "2"],
        ["r.one", "errors", "not counted", "not counted", "0"],
        ["r.two", "property:x", "3", "1", "0"],
        ["r.zero", "equivalence", "5", "not counted", "1"]]
    assert rows[3][2].startswith("  ") and rows[3][0].endswith("  ")  # counts to the right,
    assert rows[2][1].endswith("  ") and not rows[2][1].startswith("  ")  # names to the left
    assert lines[-2:] == ["r.one errors: could not count: no report of HypoFuzz",
                          "failing examples are saved for r.one, r.zero: `batchproof verify "
                          "--profile nightly` replays them first"]


def test_nothing_failing_says_nothing_more(screen) -> None:
    fuzz_cli.print_fuzz_counts([fuzz_cli.FuzzCount("r", "c", cases=1, behaviours=1)], 0.4)
    assert screen.getvalue().splitlines()[0].rstrip() == "HypoFuzz, 0 s"
    assert screen.getvalue().endswith("┘\n")


def test_failing_examples_are_red(monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(fuzz_cli, "console", Console(file=out, width=400, force_terminal=True,
                                                     color_system="standard"))
    fuzz_cli.print_fuzz_counts([fuzz_cli.FuzzCount("r", "c", cases=9, behaviours=8, failing=3),
                                fuzz_cli.FuzzCount("s", "c", cases=7, behaviours=6)], 1.0)
    assert "\x1b[31m3" in out.getvalue() and "\x1b[31m0" not in out.getvalue()


def test_the_summary_says_when_it_cannot_count(monkeypatch, screen) -> None:
    def broken(pairs, since):
        raise OSError("the database is gone")

    monkeypatch.setattr(fuzz_cli, "fuzz_counts", broken)
    fuzz_cli._fuzz_summary([(INFO, "equivalence")], since=0.0)
    assert screen.getvalue() == ("batchproof fuzz: could not count what HypoFuzz ran (OSError: "
                                 "the database is gone)\n")


def test_the_summary_counts_since_the_start(monkeypatch, screen) -> None:
    asked = []
    monkeypatch.setattr(fuzz_cli, "fuzz_counts", lambda pairs, since: asked.append(
        (pairs, since)) or [fuzz_cli.FuzzCount("r", "c", cases=1, behaviours=1)])
    monkeypatch.setattr(fuzz_cli.time, "time", lambda: 1000.0)
    fuzz_cli._fuzz_summary(["pair"], since=880.4)
    assert asked == [(["pair"], 880.4)]
    assert screen.getvalue().startswith("HypoFuzz, 120 s ")

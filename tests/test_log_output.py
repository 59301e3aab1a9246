"""Reports a person can read in a log (docs/harness.md, "Output in a log"; docs/frameworks.md,
"The framework's warnings"): a target's warnings are tallied per check, one line each with its
count, never printed once per call and never lost; spinners and bars are drawn only on a
terminal."""

from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from rich.console import Console

from batchproof import cli, terminal, warning_tally
from batchproof.adapters import runner
from batchproof.impl.balance import restore_order

WARNING = "stand-in framework: `legacy_order` is deprecated and will be removed"
CALLS_ENV = "BATCHPROOF_TEST_CALLS_FILE"
CALLS: list[int] = []  # one entry per call of the stand-in, in this process
CHECK = ["check", "--impl", f"{Path(__file__).stem}:warns_on_every_call", "--op",
         "balance.restore_order", "--profile", "ci", "--max-examples", "5"]


def warns_on_every_call(outputs, micro_batches):
    """`restore_order`, warning on every call as a framework does (torch's warnings did, 108
    times in one check of SkyRL 0.4.0's CP adapter): Python shows a warning once per location
    only until the filters change, and here, as in much framework code, a `catch_warnings`
    block changes them on every call. Each call is counted."""
    CALLS.append(1)
    if os.environ.get(CALLS_ENV):
        with open(os.environ[CALLS_ENV], "a") as calls:
            calls.write(".")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
    warnings.warn(WARNING, UserWarning, stacklevel=1)
    return restore_order(outputs, micro_batches)


WARNED_AT = f"{Path(__file__).name}:{warns_on_every_call.__code__.co_firstlineno + 11}"


def _warned(report: dict) -> list[tuple[str, list[dict]]]:
    """(the check as the report's warning lines name it, its warnings) of a `--json` report of
    `check` or of `verify`."""
    if "reports" in report:
        return [(o["check"], o["warnings"]) for o in report["reports"][0]["outcomes"]]
    return [(f"{c['op']}.{c['function']} {c['check']}", c["warnings"]) for c in report["checks"]]


def _assert_each_warning_once(out: str, err: str, report: dict, calls: int) -> None:
    """One line per check for the stand-in's warning, with its count; the counts add up to
    every call made (none lost); not one copy of the warning printed per call."""
    warned = [(check, seen) for check, seen in _warned(report) if seen]
    assert calls > 0 and warned, (out, calls)
    for check, [seen] in warned:
        assert (seen["category"], seen["message"]) == ("UserWarning", WARNING)
        assert seen["location"].endswith(WARNED_AT), seen
        line = f"  {check}: {seen['count']} x UserWarning: {WARNING} (first at "
        assert out.count(line) == 1, out
    assert sum(seen[0]["count"] for _, seen in warned) == calls, (out, calls)
    assert out.count(WARNING) == len(warned), out
    assert WARNING not in err, err


def test_a_check_tallies_the_targets_warnings_once_per_check(tmp_path) -> None:
    """The real command line, its output to files (a log): each check's report line counts
    the stand-in's warnings, and they add up to its calls."""
    calls, report = tmp_path / "calls", tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent), **{CALLS_ENV: str(calls)})
    env.pop("HYPOTHESIS_PROFILE", None)
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        code = subprocess.run([sys.executable, "-m", "batchproof", *CHECK, "--json",
                               str(report)], cwd=tmp_path, env=env, stdout=out,
                              stderr=err).returncode
    out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert code == 0, out + err
    _assert_each_warning_once(out, err, json.loads(report.read_text()), len(calls.read_text()))


@pytest.fixture
def warning_package(tmp_path, monkeypatch):
    """A package mirroring impl/ whose `balance.restore_order` is the stand-in, importable from
    the current folder (`verify --impl warnpkg`)."""
    (tmp_path / "warnpkg").mkdir()
    (tmp_path / "warnpkg" / "__init__.py").write_text("")
    (tmp_path / "warnpkg" / "balance.py").write_text(
        f"from {Path(__file__).stem} import warns_on_every_call as restore_order\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(Path(__file__).parent), *sys.path])
    yield
    for name in [m for m in sys.modules if m == "warnpkg" or m.startswith("warnpkg.")]:
        del sys.modules[name]


DOORS = {"check": CHECK, "verify-package": [
    "verify", "--impl", "warnpkg", "--op", "balance.restore_order", "--profile", "ci",
    "--max-examples", "5"]}


@pytest.mark.parametrize("twin", [None, "drops", "untallied"])
@pytest.mark.parametrize("door", list(DOORS))
def test_warnings_are_tallied_through_each_door_and_the_twins_fail(
        door, twin, warning_package, tmp_path, monkeypatch, capsys, cli_state) -> None:
    """In this process, through `check` and `verify --impl PACKAGE`: the same assertion holds;
    on a tally that drops what it is shown, or that counts nothing (each warning goes to
    Python's own display), it fails."""
    if twin == "drops":  # what it is shown
        monkeypatch.setattr(warning_tally.WarningTally, "show", lambda self, *args, **kw: None)
    elif twin == "untallied":  # each warning to Python's own display
        monkeypatch.setattr(warning_tally, "tallied_warnings", _untallied)
    CALLS.clear()
    report = tmp_path / "report.json"
    with warnings.catch_warnings(record=True):  # what a twin lets through: not the suite's
        assert cli.main([*DOORS[door], "--json", str(report)]) == 0
    captured = capsys.readouterr()
    arguments = (captured.out, captured.err, json.loads(report.read_text()), len(CALLS))
    if twin is None:
        _assert_each_warning_once(*arguments)
    else:
        with pytest.raises(AssertionError):
            _assert_each_warning_once(*arguments)


def _untallied(tally=None):
    import contextlib

    return contextlib.nullcontext(tally)


def test_tallied_warnings_keep_ignore_and_error_filters() -> None:
    """What the user or the framework decided stands: an ignored warning is not counted, an
    error is raised; a `default` one (once per location) is counted at every occurrence."""
    tallied = warning_tally.TalliedCall(lambda: warnings.warn(WARNING, UserWarning, stacklevel=1))
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        for _ in range(3):
            tallied()
        assert [s.count for s in tallied.take().seen] == [3]
        warnings.simplefilter("ignore")
        tallied()
        assert tallied.take().seen == []
        warnings.simplefilter("error")
        with pytest.raises(UserWarning):
            tallied()


def _unguarded_call(self, *args, **kwargs):
    """A planted twin of `TalliedCall.__call__`: a failure to set the counting up escapes as
    the target's own exception."""
    with warning_tally.tallied_warnings(self.tally):
        return self.call(*args, **kwargs)


@pytest.mark.parametrize("twin", [None, "unguarded"])
def test_a_failure_to_count_warnings_is_batchproofs_not_the_targets(
        twin, monkeypatch, capsys, cli_state) -> None:
    """Counting that cannot be set up is batchproof's own failure (exit 3, `ERROR`), never a
    divergence of the target (it once was: every check a NEW DIVERGENCE, exit 1)."""
    def broken(tally=None):
        raise AttributeError("'str' object has no attribute 'pattern'")

    monkeypatch.setattr(warning_tally, "tallied_warnings", broken)
    if twin:
        monkeypatch.setattr(warning_tally.TalliedCall, "__call__", _unguarded_call)
    monkeypatch.setattr(sys, "path", [str(Path(__file__).parent), *sys.path])
    code = cli.main(CHECK)
    out = capsys.readouterr().out
    if twin is None:
        _assert_batchproofs_failure(code, out)
    else:  # every check a NEW DIVERGENCE, exit 1
        with pytest.raises(AssertionError):
            _assert_batchproofs_failure(code, out)


def _assert_batchproofs_failure(code: int, out: str) -> None:
    assert code == cli.HARNESS and "NEW DIVERGENCE" not in out, out
    assert "could not count the target's warnings" in out, out


# --------------------------------------------------------------------------- live display


def _forced_terminal_console() -> tuple[Console, io.StringIO]:
    """A console that rich takes for a terminal (as FORCE_COLOR makes it) on a file."""
    log = io.StringIO()
    return Console(file=log, force_terminal=True, width=140), log


REDRAWS = ("\r", "\x1b[2K", "\x1b[1A", "\x1b[?25l")  # carriage return, erase, up, hide cursor


def _assert_no_redraws(log: str) -> None:
    assert not [code for code in REDRAWS if code in log], repr(log[:2000])


@pytest.mark.parametrize("command", ["check", "verify"])
def test_no_spinner_or_bar_in_a_log_even_when_colours_are_forced(command, monkeypatch,
                                                                   cli_state) -> None:
    """`check`'s spinner and `verify`'s bar, their console on a file that rich takes for a
    terminal (FORCE_COLOR): no frame is drawn. A planted twin that animates anyway draws them."""
    animated = terminal.animated
    for animate in (animated, lambda console: True):
        console, log = _forced_terminal_console()
        monkeypatch.setattr(runner, "console", console)
        for module in ("batchproof.cli.common", "batchproof.cli.verify"):
            monkeypatch.setattr(importlib.import_module(module), "console", console)
        monkeypatch.setattr(terminal, "animated", animate)
        monkeypatch.setattr(sys, "path", [str(Path(__file__).parent), *sys.path])
        words = CHECK if command == "check" else ["verify", "--op", "balance.restore_order",
                                                  "--profile", "ci"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert cli.main(words) == 0
        # the command wrote to this console (check: its summary line; verify: its table)
        assert ("divergence" if command == "check" else "restore_order") in log.getvalue()
        if animate is animated:
            _assert_no_redraws(log.getvalue())
        else:
            with pytest.raises(AssertionError):
                _assert_no_redraws(log.getvalue())


def test_mutmut_spinner_lines_are_settled_to_their_last_frame() -> None:
    """mutmut's own status printer, its output piped: each line once, as last drawn; a planted
    twin that copies the output as it comes keeps every frame."""
    script = ("import time; from mutmut.ui.terminal import status_printer; p = status_printer()\n"
              "for i in range(40):\n    p(f'{i}/39 mutants', force_output=True)\n"
              "print(); p('Running stats', force_output=True); print()")
    pytest.importorskip("mutmut")
    raw = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True).stdout
    settled = b"".join(terminal.settled(raw[i:i + 5] for i in range(0, len(raw), 5)))
    _assert_one_line_each(settled.decode())
    assert settled.decode() == "39/39 mutants\nRunning stats\n"
    with pytest.raises(AssertionError):  # the twin: copied as it comes
        _assert_one_line_each(raw.decode())


def _assert_one_line_each(log: str) -> None:
    _assert_no_redraws(log)
    assert log.count("mutants") == 1 and log.count("Running stats") == 1, log

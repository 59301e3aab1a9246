"""`batchproof check` (`batchproof.cli.check`), the driver: its one-line usage errors and exit
statuses, what it hands the runner for each selected adapter (scope, seed, replayed blob, search
settings, device), the replay line of each report, the JSON report, `--strict`, the scope hint,
and `--liveness`. The checks themselves run for real only on a tiny record
(`trainer.required_multiple`, one example a check); elsewhere `run_adapter` and
`run_liveness` are stand-ins. These tests are the killers of `batchproof mutate --mutmut
--harness cli/check`."""

from __future__ import annotations

import io
import json
import sys
import textwrap

import hypothesis
import pytest
import torch
from hypothesis.core import encode_failure
from rich.console import Console

from batchproof import adapters, profiles, registry
from batchproof.adapters import liveness, runner
from batchproof.adapters.runner import AdapterReport, CheckOutcome
from batchproof.adapters.scope import Scope
from batchproof.cli import check as check_cli
from batchproof.cli import main
from batchproof.cli.parser import build_parser
from batchproof.statuses import KnownStatus, Outcome

RECORD = "trainer.required_multiple"
NAME = f"theirs:multiple as {RECORD}"  # the identity adapter of theirs:multiple
THEIRS = textwrap.dedent('''\
    from batchproof.reference.trainer import required_multiple


    def multiple(*args, **kwargs):
        return required_multiple(*args, **kwargs)


    def off_by_one(*args, **kwargs):
        return required_multiple(*args, **kwargs) + 1
    ''')


@pytest.fixture(autouse=True)
def _isolated(cli_state, monkeypatch, tmp_path):
    """The user's module `theirs` in the current folder; adapters an adapter file registers
    vanish with the test (batchproof's own register first, outside the copy)."""
    (tmp_path / "theirs.py").write_text(THEIRS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "theirs", raising=False)
    adapters.all_adapters()
    monkeypatch.setattr(adapters, "_ADAPTERS", dict(adapters._ADAPTERS))
    monkeypatch.setattr(adapters, "LOAD_PROBLEMS", [])
    yield
    sys.modules.pop("theirs", None)


def _one_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    return captured.err


def _report(name: str, statuses=(Outcome.PASS,), known=(), framework="custom",
            record=RECORD) -> AdapterReport:
    return AdapterReport(name, record, "theirs:multiple", "-",
                         [CheckOutcome(name, record, f"c{i}", s, detail=f"{s}: why")
                          for i, s in enumerate(statuses)],
                         [{"name": f"k{i}", "kind": "raises", "matched": 1,
                           "diverged": int(s != KnownStatus.NOT_REPRODUCED), "confirmed": 0,
                           "status": s, "too_broad": False, "example": "", "otherwise": "",
                           "doc": "a known divergence", "upstream": ""}
                          for i, s in enumerate(known)], 0,
                         framework=framework)


class _Calls(list):
    """The calls of the stand-in `run_adapter`; `reports`: adapter name -> the report it
    returns (a pass by default)."""

    reports: dict


@pytest.fixture
def run_calls(monkeypatch):
    calls = _Calls()
    calls.reports = {}

    def run_adapter(chosen, scope, **options):
        calls.append((chosen, scope, options))
        return calls.reports.get(chosen.name) or _report(chosen.name)

    monkeypatch.setattr(runner, "run_adapter", run_adapter)
    return calls


# --------------------------------------------------------------------------- usage errors

@pytest.mark.parametrize(("argv", "message"), [
    (["--max-examples", "0"], "--max-examples must be at least 1, got 0"),
    (["--max-examples", "-1", "--check", "equivalence"], "--max-examples must be at least 1, "
                                                          "got -1"),
    (["--reproduce", "AAAA"], "--reproduce replays one failure: give its --op and --check too"),
    (["--profile", "fast"], "unknown Hypothesis profile 'fast'; known: ['ci', 'dev', "
                            "'mutation', 'nightly']"),
    (["--check", "equivalence", "--reproduce", "not-a-blob"], None),
    (["--skip", "property:nope"], None),
])
def test_a_usage_mistake_is_one_line_and_exit_2(argv, message, run_calls, capsys) -> None:
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD, *argv]) == 2
    err = _one_line(capsys)
    if message is not None:
        assert err == f"batchproof: error: {message}\n"
    assert run_calls == []


def test_a_scope_mistake_is_the_scopes_message(run_calls, capsys) -> None:
    with pytest.raises(ValueError) as scope_says:
        Scope(skip={"property:nope": ""}).validate([RECORD])
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD, "--skip",
                 "property:nope"]) == 2
    assert _one_line(capsys) == f"batchproof: error: {scope_says.value}\n"


def test_no_target_is_a_usage_error(capsys) -> None:
    assert main(["check"]) == 2
    assert _one_line(capsys) == ("batchproof: error: give --impl (a framework or "
                                 "module:function) or --adapter\n")


def test_cuda_without_a_gpu_is_a_usage_error(monkeypatch, run_calls, capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD, "--device", "cuda"]) == 2
    assert _one_line(capsys) == "batchproof: error: --device cuda: no CUDA device here\n"


def test_an_unimportable_target_is_exit_3_before_any_check(run_calls, capsys) -> None:
    assert main(["check", "--impl", "theirs:missing", "--op", RECORD]) == 3
    assert _one_line(capsys) == ("batchproof: error: --impl theirs:missing: theirs has no "
                                 "attribute 'missing'\n")
    assert run_calls == []


def test_an_adapter_file_that_fails_is_exit_3(tmp_path, run_calls, capsys) -> None:
    broken = tmp_path / "broken_adapters.py"
    broken.write_text("import no_such_module_xyz\n")
    assert main(["check", "--adapter-file", str(broken), "--impl", "theirs:multiple", "--op",
                 RECORD]) == 3
    err = _one_line(capsys)
    assert err.startswith(f"batchproof: error: --adapter-file {broken} failed: "
                          "ModuleNotFoundError: ")
    assert run_calls == []


@pytest.mark.parametrize("extra", [["--check", "equivalence"], ["--json", "x.json"],
                                   ["--check", "equivalence", "--reproduce", "AEEBAQ=="]])
def test_liveness_takes_no_check_reproduce_or_json(extra, monkeypatch, capsys) -> None:
    monkeypatch.setattr(liveness, "run_liveness", lambda *a, **k: pytest.fail("ran"))
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD, "--liveness",
                 *extra]) == 2
    assert _one_line(capsys) == ("batchproof: error: --liveness runs its own equivalence "
                                 "checks: give no --check, --reproduce or --json with it\n")


# --------------------------------------------------------------------------- what runs

def test_liveness_runs_on_the_selected_adapters(monkeypatch, run_calls) -> None:
    calls = []
    monkeypatch.setattr(liveness, "run_liveness",
                        lambda chosen, **kwargs: calls.append((chosen, kwargs)) or 3)
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD, "--liveness"]) == 3
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD, "--liveness",
                 "--max-examples", "4"]) == 3
    assert [([a.name for a in chosen], kwargs) for chosen, kwargs in calls] == [
        ([NAME], {"confirm_examples": liveness.CONFIRM_EXAMPLES}),
        ([NAME], {"confirm_examples": 4})]
    assert run_calls == []


def test_each_adapter_is_run_with_the_scope_seed_blob_settings_and_device(
        monkeypatch, run_calls) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    blob = encode_failure([1]).decode()
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD, "--check",
                 "equivalence", "--seed", "7", "--reproduce", blob, "--max-examples", "3",
                 "--device", "cuda", "--profile", "mutation"]) == 0
    ((chosen, scope, options),) = run_calls
    assert chosen.name == NAME and chosen.target == "theirs:multiple"
    assert scope.checks == ("equivalence",) and chosen.scope.checks == ("equivalence",)
    settings = options.pop("base_settings")
    assert settings.max_examples == 3 and settings.report_multiple_bugs is False
    assert settings.derandomize is True  # the mutation profile's
    assert options == {"seed": 7, "reproduce": (hypothesis.__version__, blob), "device": "cuda"}


def test_the_defaults_handed_to_the_runner(run_calls) -> None:
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD]) == 0
    ((chosen, scope, options),) = run_calls
    assert scope.checks is None
    settings = options.pop("base_settings")
    assert options == {"seed": None, "reproduce": None, "device": "cpu"}
    assert settings.max_examples == hypothesis.settings().max_examples


def test_adapters_without_any_check_asked_are_left_out(monkeypatch, run_calls) -> None:
    """A framework's adapters over several records, `--check` naming one record's check."""
    two = [adapters.identity_adapter(RECORD, "theirs:multiple"),
           adapters.identity_adapter("trainer.real_rows", "theirs:multiple")]
    monkeypatch.setattr(runner, "select_adapters", lambda impl, ops, adapter: two)
    only_multiple = next(c for c in registry.get(RECORD).check_names()
                         if c not in registry.get("trainer.real_rows").check_names())
    assert main(["check", "--impl", "theirs:multiple", "--check", only_multiple]) == 0
    assert [chosen.record for chosen, _, _ in run_calls] == [RECORD]
    run_calls.clear()
    assert main(["check", "--impl", "theirs:multiple", "--check", "equivalence"]) == 0
    assert [chosen.record for chosen, _, _ in run_calls] == [RECORD, "trainer.real_rows"]
    assert all(chosen.scope.checks == ("equivalence",) for chosen, _, _ in run_calls)


def test_torch_runs_one_thread(monkeypatch, run_calls) -> None:
    ran = []
    monkeypatch.setattr(check_cli, "_one_thread_unless_asked", lambda: ran.append(True))
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD]) == 0
    assert ran == [True]


# --------------------------------------------------------------------------- what it says

@pytest.fixture
def printed(monkeypatch):
    """`print_report`'s calls: (report, profile, the replay line of a failing outcome)."""
    calls = []

    def print_report(report, profile, replay=None):
        calls.append((report.adapter, profile, replay(CheckOutcome(
            report.adapter, report.record, "equivalence", Outcome.NEW, blob="AEEBAQ=="))))

    monkeypatch.setattr(runner, "print_report", print_report)
    return calls


def test_the_replay_line_of_a_function_names_it_and_the_record(run_calls, printed) -> None:
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD, "--profile", "ci"]) == 0
    assert printed == [(NAME, "ci", f"batchproof check --impl theirs:multiple --op {RECORD} "
                                      "--profile ci --check equivalence --reproduce AEEBAQ==")]


def test_the_replay_line_of_a_framework_names_each_adapter(monkeypatch, run_calls,
                                                           printed) -> None:
    two = [adapters.Adapter("fw.one", "fw", RECORD, "theirs:multiple", wrap=lambda f: f),
           adapters.Adapter("fw.two", "fw", RECORD, "theirs:off_by_one", wrap=lambda f: f)]
    selected = []
    monkeypatch.setattr(runner, "select_adapters", lambda impl, ops, adapter: selected.append(
        (impl, ops, adapter)) or [a for a in two if adapter in (None, a.name)])
    assert main(["check", "--impl", "fw"]) == 0
    assert printed == [
        ("fw.one", profiles.default_profile(),
         "batchproof check --impl fw --adapter fw.one --check equivalence --reproduce "
         "AEEBAQ=="),
        ("fw.two", profiles.default_profile(),
         "batchproof check --impl fw --adapter fw.two --check equivalence --reproduce "
         "AEEBAQ==")]
    printed.clear()
    assert main(["check", "--impl", "fw", "--adapter", "fw.two", "--op", "trainer"]) == 0
    assert [line for _, _, line in printed] == [
        "batchproof check --impl fw --adapter fw.two --check equivalence --reproduce AEEBAQ=="]
    assert selected == [("fw", None, None), ("fw", ["trainer"], "fw.two")]
    printed.clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert main(["check", "--impl", "fw", "--adapter", "fw.one", "--device", "cuda"]) == 0
    assert [line for _, _, line in printed] == [
        "batchproof check --impl fw --adapter fw.one --device cuda --check equivalence "
        "--reproduce AEEBAQ=="]


def test_the_exit_status_and_the_json_report(run_calls, tmp_path, capsys) -> None:
    run_calls.reports[NAME] = _report(NAME, (Outcome.PASS, Outcome.NEW),
                                        known=(KnownStatus.NOT_REPRODUCED,))
    report = tmp_path / "check.json"
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD, "--json",
                 str(report)]) == 1
    document = json.loads(report.read_text())
    assert report.read_text() == json.dumps(document, indent=2)  # for a person to read
    assert set(document) == {"profile", "impl", "exit_status", "strict", "summary", "reports"}
    assert (document["impl"], document["exit_status"], document["strict"]) == (
        "theirs:multiple", 1, False)
    assert document["profile"] == profiles.default_profile()
    assert document["summary"] == {"new": 1, "errors": 0, "not_tested": 0, "known": 1,
                                   "not_reproduced": 1, "targets": 1}
    (written,) = document["reports"]
    assert written["adapter"] == NAME and [o["status"] for o in written["outcomes"]] == [
        "pass", "new"]
    out = capsys.readouterr().out
    assert f"report written to {report}\n" in out
    assert "1 new divergence(s) in 1 target(s); 1 known divergence(s) listed above, 1 NOT " \
           "REPRODUCED\n" in out


def test_strict_fails_on_a_known_divergence_not_reproduced(run_calls, tmp_path,
                                                           capsys) -> None:
    run_calls.reports[NAME] = _report(NAME, known=(KnownStatus.NOT_REPRODUCED,))
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD]) == 0
    assert "`--strict` fails on it" in capsys.readouterr().out
    report = tmp_path / "strict.json"
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD, "--strict", "--json",
                 str(report)]) == 1
    assert "1 NOT REPRODUCED (--strict: exit 1)" in capsys.readouterr().out
    assert json.loads(report.read_text())["strict"] is True


def test_an_error_of_batchproof_is_exit_3(run_calls) -> None:
    run_calls.reports[NAME] = _report(NAME, (Outcome.NEW, Outcome.ERROR))
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD]) == 3


def test_the_scope_hint_follows_the_summary(monkeypatch, run_calls, capsys) -> None:
    asked = []
    hint = "Every new divergence above traces to [an option]: " + "x" * 200

    def scope_hint(reports, impl, *, adapter=None, profile=None):
        asked.append(([r.adapter for r in reports], impl, adapter, profile))
        return hint

    monkeypatch.setattr(runner, "scope_hint", scope_hint)
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD, "--profile", "ci"]) == 0
    assert capsys.readouterr().out.endswith(f"in 1 target(s)\n{hint}\n")
    assert asked == [([NAME], "theirs:multiple", None, "ci")]
    monkeypatch.setattr(runner, "scope_hint", lambda *a, **k: "")
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD]) == 0
    assert capsys.readouterr().out.endswith("in 1 target(s)\n")
    monkeypatch.setattr(runner, "scope_hint", scope_hint)
    monkeypatch.setattr(runner, "select_adapters", lambda impl, ops, adapter: [
        adapters.identity_adapter(RECORD, "theirs:multiple")])
    assert main(["check", "--impl", "theirs:multiple", "--adapter", "mine.multiple"]) == 0
    assert asked[-1] == ([NAME], "theirs:multiple", "mine.multiple", None)


def test_a_namespace_without_device_liveness_or_strict(run_calls, tmp_path) -> None:
    """The doors that build their own namespace (`verify --impl module:function`) may leave
    these out: then cpu, the checks, not strict."""
    report = tmp_path / "r.json"
    args = build_parser().parse_args(["check", "--impl", "theirs:multiple", "--op", RECORD,
                                      "--json", str(report)])
    for name in ("device", "liveness", "strict"):
        delattr(args, name)
    run_calls.reports[NAME] = _report(NAME, known=(KnownStatus.NOT_REPRODUCED,))
    assert check_cli.check(args) == 0
    ((_, _, options),) = run_calls
    assert options["device"] == "cpu"
    assert json.loads(report.read_text())["strict"] is False


def test_what_check_prints_itself_is_neither_markup_nor_highlighted(run_calls, tmp_path,
                                                                   monkeypatch) -> None:
    """On a terminal: the report's path (a folder named like markup) and the scope hint as
    they are, no colour."""
    out = io.StringIO()
    monkeypatch.setattr(runner, "console", Console(file=out, width=3000, force_terminal=True,
                                                   color_system="standard"))
    hint = "Every new divergence above traces to [bold]an option[/bold]: --skip errors 3"
    monkeypatch.setattr(runner, "scope_hint", lambda *a, **k: hint)
    folder = tmp_path / "[bold]reports"
    folder.mkdir()
    report = folder / "r1.json"
    assert main(["check", "--impl", "theirs:multiple", "--op", RECORD, "--json",
                 str(report)]) == 0
    lines = out.getvalue().splitlines()
    assert f"report written to {report}" in lines and hint in lines


# --------------------------------------------------------------------------- for real

def test_a_function_is_checked_for_real_and_a_divergence_is_exit_1(tmp_path, capsys) -> None:
    base = ["check", "--op", RECORD, "--max-examples", "1", "--profile", "ci"]
    assert main([*base, "--impl", "theirs:multiple"]) == 0
    assert main([*base, "--impl", "theirs:off_by_one", "--check", "equivalence"]) == 1
    out = capsys.readouterr().out
    assert (f"replay: batchproof check --impl theirs:off_by_one --op {RECORD} --profile ci "
            "--check equivalence --reproduce ") in out


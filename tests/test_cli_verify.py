"""`batchproof verify` (`batchproof.cli.verify`): which checks run on which placement (every
check on the first, those that compare with the reference on each other, none on a placement
that runs the code already checked, `paths:PLACEMENT` on its own), one check's result (its
verdict, message, minimal case and replay line, its examples, warnings and paths), the summary
a person reads, the JSON report and the exit status; `--impl` (a package, the reference, one
function), `--placement`, `--check paths:`, `--coverage`, `--device`. `run_check` is a
stand-in where the verdict is the point, and a tiny record runs for real elsewhere. These
tests are the killers of `batchproof mutate --mutmut --harness cli/verify`."""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import textwrap
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from batchproof import checks, placements, registry
from batchproof.cli import branch_coverage, common, main
from batchproof.cli import verify as verify_cli
from batchproof.cli.common import TargetError, UsageError
from batchproof.cli.parser import build_parser
from batchproof.cli.verify import CheckResult
from batchproof.statuses import Verdict
from batchproof.warning_tally import SeenWarning, TalliedCall

MULTIPLE = "trainer.required_multiple"  # one code path: every placement runs the same
ALL = ["kernel", "cpu", "generic", "triton"]


@pytest.fixture(autouse=True)
def _in_process(cli_state, monkeypatch, tmp_path):
    """The CLI runs here; `theirs` is a package mirroring impl/ in the current folder."""
    package = tmp_path / "theirs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "trainer.py").write_text(textwrap.dedent('''\
        import warnings

        from batchproof.reference.trainer import real_rows


        def required_multiple(*args, **kwargs):
            warnings.warn("theirs warns", UserWarning)
            from batchproof.reference.trainer import required_multiple as theirs
            return theirs(*args, **kwargs)
        '''))
    (package / "balance.py").write_text("restore_order = 3\n")
    (tmp_path / "single.py").write_text(
        "from batchproof.reference.trainer import required_multiple as multiple\n")
    monkeypatch.chdir(tmp_path)
    for name in ("theirs", "theirs.trainer", "theirs.balance", "single"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield
    for name in ("theirs", "theirs.trainer", "theirs.balance", "single"):
        sys.modules.pop(name, None)


@pytest.fixture
def screen(monkeypatch):
    """All verify prints, on one wide console (no cell wrapped, no colour)."""
    out = io.StringIO()
    wide = Console(file=out, width=3000)
    monkeypatch.setattr(common, "console", wide)
    monkeypatch.setattr(verify_cli, "console", wide)
    return out


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["verify", *argv])


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _result(check="equivalence", status=Verdict.PASS, examples=1, placement="kernel",
            seconds=0.5, **kwargs) -> CheckResult:
    return CheckResult("trainer", "required_multiple", check, status, examples, seconds, "cpu",
                       placement=placement, **kwargs)


# --------------------------------------------------------------------------- usage errors

@pytest.mark.parametrize(("argv", "message"), [
    (["--op", MULTIPLE, "--reproduce", "AEEBAQ=="], "--reproduce replays one failure: give "
                                                    "its --op and --check too"),
    (["--op", MULTIPLE, "--impl", "reference", "--placement", "cpu"],
     "--placement cpu: only batchproof's own impl on the CPU has placements"),
    (["--op", MULTIPLE, "--impl", "single:multiple", "--placement", "kernel"],
     "--placement kernel: only batchproof's own impl on the CPU has placements"),
    (["--op", MULTIPLE, "--impl", "single:multiple", "--coverage"],
     "--coverage measures batchproof's own impl/ and reference/: not with --impl "
     "single:multiple"),
    (["--op", "trainer", "--impl", "single:multiple"],
     "--impl single:multiple needs --op naming exactly one record (got 4: "
     "['trainer.required_multiple', 'trainer.pad_to_multiple', 'trainer.real_rows', "
     "'trainer.broadcast_stepwise_advantages'])"),
    (["--op", MULTIPLE, "--check", "paths:kernel", "--impl", "reference"],
     "--check paths:kernel: only batchproof's own impl/ counts the paths it takes"),
    (["--op", MULTIPLE, "--check", "paths:kernel"],
     "unknown check 'paths:kernel': the records named declare no paths (`batchproof list "
     "checks`)"),
    (["--op", "rl_batch.build_rl_batch", "--check", "paths:cuda"],
     "--check paths:cuda: placement cuda does not run here (this run: kernel, cpu, generic, "
     "triton)"),
    (["--op", "rl_batch.build_rl_batch", "--check", "paths:kernel", "--placement", "cpu"],
     "--check paths:kernel: placement kernel does not run here (this run: cpu)"),
    (["--op", MULTIPLE, "--max-examples", "0"], "--max-examples must be at least 1, got 0"),
    (["--op", MULTIPLE, "--check", "equivalence", "--reproduce", "nope"], None),
])
def test_a_usage_mistake_is_one_line_and_exit_2(argv, message, monkeypatch, capsys) -> None:
    monkeypatch.setattr(placements, "available", lambda device="cpu": list(ALL))
    monkeypatch.setattr(checks, "run_check", lambda *a, **k: pytest.fail("a check ran"))
    assert main(["verify", *argv]) == 2
    err = _one_line(capsys)
    if message is not None:
        assert err == f"batchproof: error: {message}\n"


def test_a_placement_not_available_here_says_what_is(monkeypatch, capsys) -> None:
    monkeypatch.setattr(placements, "available", lambda device="cpu": ["cpu", "generic"])
    assert main(["verify", "--op", MULTIPLE, "--placement", "kernel"]) == 2
    assert _one_line(capsys) == (
        "batchproof: error: --placement kernel: not available here (available: cpu, generic; "
        "kernel needs numba: pip install 'batchproof[kernels]')\n")


def test_cuda_without_a_gpu_is_a_usage_error(monkeypatch, capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["verify", "--op", MULTIPLE, "--device", "cuda"]) == 2
    assert _one_line(capsys) == "batchproof: error: --device cuda: no CUDA device here\n"


# --------------------------------------------------------------------------- the placements

@pytest.mark.parametrize(("argv", "where"), [
    ([], ALL), (["--placement", "generic"], ["generic"]),
    (["--impl", "reference"], ["kernel"]), (["--impl", "reference", "--placement", "kernel"],
                                            ["kernel"]),
    (["--device", "cuda"], ["cuda"]),
])
def test_the_placements_of_a_run(argv, where, monkeypatch) -> None:
    monkeypatch.setattr(placements, "available",
                        lambda device="cpu": list(ALL) if device == "cpu" else [device])
    assert verify_cli._placements(_args(*argv)) == where


def test_the_placements_another_device_refuses(monkeypatch) -> None:
    monkeypatch.setattr(placements, "available",
                        lambda device="cpu": list(ALL) if device == "cpu" else [device])
    with pytest.raises(UsageError) as refused:
        verify_cli._placements(_args("--device", "cuda", "--placement", "cpu"))
    assert str(refused.value) == ("--placement cpu: only batchproof's own impl on the CPU has "
                                  "placements")


def test_which_checks_run_on_which_placement() -> None:
    where = ["kernel", "cpu", "generic"]
    for check in ("equivalence", "errors", "pin:x"):
        assert verify_cli._every_placement(check)
        assert all(verify_cli._runs_on(check, p, where) for p in where)
    for check in ("property:x", "equivalences", "xpin:y"):
        assert not verify_cli._every_placement(check)
        assert [verify_cli._runs_on(check, p, where) for p in where] == [True, False, False]
    assert [verify_cli._runs_on("paths:cpu", p, where) for p in where] == [False, True, False]
    assert verify_cli._runs(["equivalence", "property:x", "paths:generic", "pin:y"], where) == 8


# --------------------------------------------------------------------------- the checks asked

def test_paths_checks_are_added_to_the_checks_named() -> None:
    infos = registry.select(["rl_batch.build_rl_batch", "balance.restore_order"])
    build, restore = infos
    where = ["kernel", "cpu"]
    assert verify_cli._select_checks(infos, _args(), where) == {
        i.name: i.check_names() for i in infos}
    assert verify_cli._select_checks(infos, _args("--check", "paths:cpu"), where) == {
        build.name: ["paths:cpu"], restore.name: []}
    assert verify_cli._select_checks(infos, _args("--check", "paths:cpu", "--check",
                                                  "equivalence", "--check", "paths:kernel"),
                                     where) == {
        build.name: ["equivalence", "paths:kernel", "paths:cpu"],
        restore.name: ["equivalence"]}
    with pytest.raises(UsageError) as unknown:
        verify_cli._select_checks(infos, _args("--check", "paths:cpu", "--check", "nope"),
                                  where)
    assert str(unknown.value).startswith("unknown check 'nope'")


# --------------------------------------------------------------------------- the run's loop

@pytest.fixture
def ran(monkeypatch):
    """`_verify_one` as a stand-in: (record, check, placement) of each call, a pass of one
    example each; `ran.asks`: whether the op's code asks where it runs (fast paths)."""
    calls = SimpleNamespace(made=[], asks=False, status={}, examples=1)

    def verify_one(args, info, check, candidate, placement, chosen, reproduce):
        calls.made.append((info.name, check, placement))
        if calls.asks:
            placements._cpu.ASKED += 1
        return CheckResult(info.op, info.function, check,
                           calls.status.get((check, placement), Verdict.PASS), calls.examples,
                           0.0, args.device, placement=placement)

    monkeypatch.setattr(verify_cli, "_verify_one", verify_one)
    monkeypatch.setattr(placements, "available",
                        lambda device="cpu": list(ALL) if device == "cpu" else [device])
    monkeypatch.setattr(placements._cpu, "ASKED", placements._cpu.ASKED)
    return calls


def _checks(name: str) -> list[str]:
    return registry.get(name).check_names()


def test_one_code_path_is_checked_once(ran, screen, tmp_path) -> None:
    """An op that never asks where it runs: its checks run on the first placement, shown as
    `any`; the others would run the same code."""
    report = tmp_path / "r.json"
    assert main(["verify", "--op", MULTIPLE, "--json", str(report)]) == 0
    assert ran.made == [(MULTIPLE, c, "kernel") for c in _checks(MULTIPLE)]
    assert {c["placement"] for c in json.loads(report.read_text())["checks"]} == {"any"}


def test_the_fast_paths_asked_every_comparing_check_runs_on_each_placement(ran, screen) -> None:
    ran.asks = True
    assert main(["verify", "--op", MULTIPLE]) == 0
    compare = [c for c in _checks(MULTIPLE) if verify_cli._every_placement(c)]
    assert ran.made == [(MULTIPLE, c, "kernel") for c in _checks(MULTIPLE)] + [
        (MULTIPLE, c, p) for p in ALL[1:] for c in compare]


def test_only_the_triton_kernels_asked(ran, screen, monkeypatch) -> None:
    def verify_one(args, info, check, candidate, placement, chosen, reproduce):
        ran.made.append((check, placement))
        placements.kernels.TRITON_ASKED += 1
        return CheckResult(info.op, info.function, check, Verdict.PASS, 1, 0.0, "cpu",
                           placement=placement)

    monkeypatch.setattr(verify_cli, "_verify_one", verify_one)
    monkeypatch.setattr(placements.kernels, "TRITON_ASKED", placements.kernels.TRITON_ASKED)
    assert main(["verify", "--op", MULTIPLE, "--check", "equivalence"]) == 0
    assert ran.made == [("equivalence", "kernel"), ("equivalence", "triton")]


def test_a_named_paths_check_runs_on_its_placement_alone(ran, screen) -> None:
    assert main(["verify", "--op", "rl_batch.build_rl_batch", "--check", "paths:cpu"]) == 0
    assert ran.made == [("rl_batch.build_rl_batch", "paths:cpu", "cpu")]


def test_a_named_paths_check_runs_beside_checks_of_one_code_path(ran, screen) -> None:
    """The other checks ran one code path (the op never asked where it runs), so the other
    placements' would run the same code again; a `paths:PLACEMENT` check named still runs:
    it counts the paths of its own run (once, it was silently left out)."""
    record = "balance.micro_batches"
    assert main(["verify", "--op", record, "--check", "equivalence", "--check",
                 "paths:generic", "--check", "errors"]) == 0
    assert ran.made == [(record, "equivalence", "kernel"), (record, "errors", "kernel"),
                        (record, "paths:generic", "generic")]


def test_each_placement_of_a_record_with_paths_gets_its_paths_check(ran, screen, monkeypatch,
                                                                    tmp_path) -> None:
    ran.asks = True
    counted = []

    def paths_result(args, info, placement, group, since):
        counted.append((placement, [r.check for r in group]))
        return CheckResult(info.op, info.function, f"paths:{placement}", Verdict.PASS, 0, 0.0,
                           "cpu", placement=placement)

    monkeypatch.setattr(verify_cli, "_paths_result", paths_result)
    record = "balance.micro_batches"
    report = tmp_path / "r.json"
    assert main(["verify", "--op", record, "--json", str(report)]) == 0
    compare = [c for c in _checks(record) if verify_cli._every_placement(c)]
    assert counted == [("kernel", _checks(record))] + [(p, compare) for p in ALL[1:]]
    assert [c["check"] for c in json.loads(report.read_text())["checks"]] == [
        *_checks(record), "paths:kernel"] + [c for p in ALL[1:] for c in (*compare,
                                                                        f"paths:{p}")]
    counted.clear()
    assert main(["verify", "--op", record, "--check", "equivalence"]) == 0  # not counted
    assert counted == []
    assert main(["verify", "--op", record, "--impl", "batchproof.impl"]) == 0  # not impl
    assert counted == []


def test_the_json_report(ran, screen, tmp_path, monkeypatch) -> None:
    ran.status = {("equivalence", "kernel"): Verdict.FAIL}
    info = registry.get("trainer.real_rows")
    monkeypatch.setattr(info, "requires", ("no_such_module_a",))
    report = tmp_path / "r.json"
    assert main(["verify", "--op", "trainer", "--check", "equivalence", "--profile", "ci",
                 "--json", str(report)]) == 1
    document = json.loads(report.read_text())
    assert {k: v for k, v in document.items() if k != "checks"} == {
        "profile": "ci", "device": "cpu", "impl": "impl", "passed": False,
        "verdict": "divergence", "exit_status": 1,
        "not_run": {"trainer.real_rows": info.missing()}}
    first = document["checks"][0]
    assert first == {"op": "trainer", "function": "required_multiple", "check": "equivalence",
                     "status": "fail", "examples": 1, "seconds": 0.0, "device": "cpu",
                     "error": "", "notes": [], "placement": "any", "minimal": "",
                     "replay": "", "warnings": [], "warnings_not_kept": 0, "passed": False}
    assert len(document["checks"]) == 3
    assert screen.getvalue().endswith(f"report written to {report}\n")


@pytest.mark.parametrize(("status", "code", "verdict"), [
    (Verdict.PASS, 0, "pass"), (Verdict.ERROR, 3, "error")])
def test_the_json_verdict(status, code, verdict, ran, screen, tmp_path) -> None:
    ran.status = {("equivalence", "kernel"): status}
    report = tmp_path / "r.json"
    assert main(["verify", "--op", MULTIPLE, "--check", "equivalence", "--json",
                 str(report)]) == code
    document = json.loads(report.read_text())
    assert (document["verdict"], document["exit_status"], document["passed"]) == (
        verdict, code, code == 0)


def test_a_device_runs_the_records_made_for_it(ran, screen, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert main(["verify", "--op", "trainer", "--device", "cuda", "--check",
                 "equivalence"]) == 0
    assert [(r, p) for r, _, p in ran.made] == [
        (i.name, "cuda") for i in registry.select(["trainer"]) if "cuda" in i.devices]
    assert len(ran.made) < len(registry.select(["trainer"]))


def test_torch_runs_one_thread(ran, screen, monkeypatch) -> None:
    threads = []
    monkeypatch.setattr(verify_cli, "_one_thread_unless_asked", lambda: threads.append(1))
    assert main(["verify", "--op", MULTIPLE, "--check", "equivalence"]) == 0
    assert threads == [1]


def test_what_each_check_is_handed(monkeypatch, screen) -> None:
    handed = []
    monkeypatch.setattr(placements, "available", lambda device="cpu": ["cpu", "generic"])

    def verify_one(args, info, check, candidate, placement, chosen, reproduce):
        handed.append((check, candidate, placement, chosen.max_examples, reproduce))
        return CheckResult(info.op, info.function, check, Verdict.PASS, 1, 0.0, "cpu",
                           placement=placement)

    monkeypatch.setattr(verify_cli, "_verify_one", verify_one)
    assert main(["verify", "--op", MULTIPLE, "--check", "equivalence", "--max-examples", "4",
                 "--reproduce", "AEEBAQ=="]) == 0
    import hypothesis
    assert handed == [("equivalence", None, "cpu", 4, (hypothesis.__version__, "AEEBAQ=="))]


# --------------------------------------------------------------------------- one check

@pytest.fixture
def check_runs(monkeypatch):
    """`run_check` as a stand-in: `check_runs.then(stats)` runs it (default: one example)."""
    state = SimpleNamespace(calls=[], then=lambda stats: setattr(stats, "examples", 1))

    def run_check(info, check, candidate, **kwargs):
        state.calls.append((info.name, check, candidate, kwargs, placements._cpu.FAST_PATHS))
        state.then(kwargs["stats"])

    monkeypatch.setattr(checks, "run_check", run_check)
    return state


def _one(check="equivalence", candidate=None, placement="cpu", *argv) -> CheckResult:
    args = _args("--op", MULTIPLE, *argv)
    return verify_cli._verify_one(args, registry.get(MULTIPLE), check, candidate, placement,
                                  "settings", ("6", "BLOB"))


def test_a_check_that_passes(check_runs) -> None:
    def ran(stats):
        stats.examples = 7
        stats.notes.append("the replayed failure no longer reproduces")

    check_runs.then = ran
    result = _one("equivalence", None, "generic", "--seed", "5", "--device", "cpu")
    assert (result.status, result.examples, result.placement, result.device) == (
        Verdict.PASS, 7, "generic", "cpu")
    assert result.notes == ["the replayed failure no longer reproduces"]
    assert result.error == result.replay == result.minimal == ""
    assert result.seconds >= 0
    ((name, check, candidate, kwargs, fast),) = check_runs.calls
    assert (name, check, candidate, fast) == (MULTIPLE, "equivalence", None, False)
    kwargs.pop("stats")
    assert kwargs == {"settings": "settings", "device": "cpu", "seed": 5,
                      "reproduce": ("6", "BLOB")}


def test_a_check_that_ran_no_example_is_batchproofs_failure(check_runs) -> None:
    check_runs.then = lambda stats: None
    result = _one()
    assert result.status == Verdict.ERROR and result.examples == 0
    assert result.error == "no example ran: the strategy drew none (batchproof's own failure)"


def _diverges(stats):
    stats.examples = 3
    stats.failing = registry.Case((2,), {"mini_batch_size": 15})
    error = AssertionError("Mismatch: output 'x' differs")
    error.add_note("You can reproduce this example by temporarily adding "
                   "@reproduce_failure('6.1', b'AXyz') as a decorator on your test case")
    error.add_note("a note of the check")
    raise error


def test_a_divergence_is_a_fail_with_its_replay_line(check_runs) -> None:
    check_runs.then = _diverges
    result = _one("pin:p", None, "generic", "--profile", "ci")
    assert result.status == Verdict.FAIL and result.examples == 3
    assert result.error == "AssertionError: Mismatch: output 'x' differs"
    assert result.notes == ["a note of the check"]
    assert result.minimal == "required_multiple(2, mini_batch_size=15)"
    assert 0 <= result.seconds < 60
    assert result.replay == (f"batchproof verify --impl impl --op {MULTIPLE} --profile ci "
                             "--placement generic --check pin:p --reproduce AXyz")
    any_path = _one("pin:p", None, "any")  # one code path: no placement to name
    assert any_path.replay == (f"batchproof verify --impl impl --op {MULTIPLE} --check pin:p "
                               "--reproduce AXyz")


def test_a_replayed_failure_keeps_its_blob(check_runs) -> None:
    def fails(stats):
        stats.examples = 1
        raise AssertionError("still")

    check_runs.then = fails
    result = _one("equivalence", None, "cpu", "--check", "equivalence", "--reproduce", "AEEBAQ==")
    assert result.replay.endswith("--placement cpu --check equivalence --reproduce AEEBAQ==")
    assert _one("equivalence", None, "cpu").replay.endswith("--check equivalence")


def test_a_failure_of_batchproof_is_an_error(check_runs) -> None:
    def harness(stats):
        raise checks.HarnessError("registry error: the reference rejected a valid input")

    check_runs.then = harness
    result = _one()
    assert result.status == Verdict.ERROR
    assert result.error == "HarnessError: registry error: the reference rejected a valid input"


def test_another_devices_replay_names_it(check_runs) -> None:
    check_runs.then = _diverges
    args = _args("--op", MULTIPLE, "--device", "cuda", "--impl", "theirs")
    result = verify_cli._verify_one(args, registry.get(MULTIPLE), "equivalence", None, "cuda",
                                    "settings", None)
    assert result.replay == (f"batchproof verify --impl theirs --op {MULTIPLE} --device cuda "
                             "--check equivalence --reproduce AXyz")
    assert result.device == "cuda"


def test_a_targets_warnings_are_taken_per_check(check_runs) -> None:
    candidate = TalliedCall(lambda *a: __import__("warnings").warn("w", UserWarning))

    def calls(stats):
        stats.examples = 1
        for _ in range(3):
            candidate()

    check_runs.then = calls
    result = _one("equivalence", candidate)
    assert [(w.category, w.message, w.count) for w in result.warnings] == [
        ("UserWarning", "w", 3)]
    assert result.warnings_not_kept == 0
    assert _one("equivalence", candidate).warnings[0].count == 3  # the next check's own


def test_a_paths_check_counts_the_paths_it_ran(check_runs, monkeypatch) -> None:
    info = registry.get("rl_batch.build_rl_batch")

    def ran(stats):
        stats.examples = 2
        placements._paths.RAN["cpu:rl_batch._write_lists"] += 5
        placements._paths.RAN["numba:other"] += 1

    monkeypatch.setattr(placements._paths, "RAN", Counter(placements._paths.RAN))
    check_runs.then = ran
    result = verify_cli._verify_one(_args("--op", info.name), info, "paths:cpu", None, "cpu",
                                    "settings", None)
    assert result.paths == dict.fromkeys(placements.declared(info, "cpu"), 0) | {
        "cpu:rl_batch._write_lists": 5}
    assert result.other_paths == {"numba:other": 1}
    assert _one().paths == {}


def test_the_paths_check_of_a_placements_checks(monkeypatch) -> None:
    info = registry.get("rl_batch.build_rl_batch")
    args = _args("--op", info.name, "--profile", "dev")
    group = [_result(examples=4, placement="cpu"), _result("errors", examples=3,
                                                           placement="cpu")]
    declared = placements.declared(info, "cpu")
    good = Counter(dict.fromkeys(declared, 2))
    result = verify_cli._paths_result(args, info, "cpu", group, good)
    assert (result.check, result.status, result.examples, result.placement) == (
        "paths:cpu", Verdict.PASS, 0, "cpu")
    assert (result.op, result.function, result.seconds, result.device) == (
        "rl_batch", "build_rl_batch", 0.0, "cpu")  # no time of its own: its checks' is theirs
    assert result.paths == dict(good) and result.other_paths == {} and result.replay == ""
    missing = Counter({declared[0]: 1, "numba:rl_batch.write_rows": 2})
    failed = verify_cli._paths_result(args, info, "cpu", group, missing)
    problems = placements.faults(info, "cpu", missing)
    assert failed.status == Verdict.FAIL and len(problems) == len(declared)
    assert failed.error == f"PathNotTaken: {'; '.join(problems)} (7 examples of 2 checks)"
    assert failed.replay == (f"batchproof verify --impl impl --op {info.name} --profile dev "
                             "--placement cpu --check paths:cpu")
    nothing = verify_cli._paths_result(args, info, "cpu", [_result(examples=0)], good)
    assert nothing.status == Verdict.ERROR and nothing.placement == "kernel"
    assert nothing.error == "no example ran: no path was counted (batchproof's own failure)"
    assert nothing.replay.endswith("--placement cpu --check paths:cpu")
    cuda = verify_cli._paths_result(_args("--op", info.name, "--device", "cuda"), info, "cuda",
                                    group, Counter())
    assert cuda.replay == (f"batchproof verify --impl impl --op {info.name} --device cuda "
                           "--check paths:cuda")


# --------------------------------------------------------------------------- the candidate

def test_the_candidate_of_each_implementation() -> None:
    info = registry.get(MULTIPLE)
    assert verify_cli.resolve_candidate(info, "impl") is None
    reference = verify_cli.resolve_candidate(info, "reference")
    assert isinstance(reference, TalliedCall) and reference(2, mini_batch_size=15, n=8) == 120
    theirs = verify_cli.resolve_candidate(info, "theirs")
    assert theirs(2, mini_batch_size=15, n=8) == 120
    assert [(w.message, w.count) for w in theirs.take().seen] == [("theirs warns", 1)]


def test_a_package_without_the_op_or_its_function_is_exit_3() -> None:
    with pytest.raises(TargetError) as no_op:
        verify_cli.resolve_candidate(registry.get("sft.collate_sft"), "theirs")
    assert str(no_op.value) == ("--impl theirs: cannot import theirs.sft: ModuleNotFoundError: "
                                "No module named 'theirs.sft'")
    with pytest.raises(TargetError) as no_function:
        verify_cli.resolve_candidate(registry.get("trainer.pad_to_multiple"), "theirs")
    assert str(no_function.value) == "--impl theirs: theirs.trainer has no function " \
                                     "pad_to_multiple"
    with pytest.raises(TargetError) as not_callable:
        verify_cli.resolve_candidate(registry.get("balance.restore_order"), "theirs")
    assert str(not_callable.value) == "--impl theirs: theirs.balance has no function " \
                                      "restore_order"


def test_a_package_runs_for_real_with_its_warnings_counted(screen) -> None:
    assert main(["verify", "--impl", "theirs", "--op", MULTIPLE, "--check", "equivalence",
                 "--max-examples", "2", "--profile", "ci"]) == 0
    out = screen.getvalue()
    assert re.search(r"\n  trainer.required_multiple equivalence: \d+ x UserWarning: theirs "
                     r"warns \(first at .*theirs/trainer\.py:\d+\)\n", out), out


def test_one_function_is_checked_as_check_checks_it(monkeypatch) -> None:
    handed = []
    monkeypatch.setattr("batchproof.cli.check.check", lambda args: handed.append(args) or 1)
    assert main(["verify", "--impl", "single:multiple", "--op", MULTIPLE, "--max-examples",
                 "2", "--strict"]) == 1
    (args,) = handed
    assert (args.impl, args.op, args.adapter, args.max_examples, args.strict) == (
        "single:multiple", [MULTIPLE], None, 2, True)


def test_one_function_for_real(screen) -> None:
    assert main(["verify", "--impl", "single:multiple", "--op", MULTIPLE, "--check",
                 "equivalence", "--max-examples", "1"]) == 0


# --------------------------------------------------------------------------- coverage

def test_coverage_needs_coverage_py_and_a_fresh_process(monkeypatch, capsys) -> None:
    monkeypatch.setattr(branch_coverage, "available", lambda: False)
    assert main(["verify", "--coverage", "--op", MULTIPLE]) == 2
    assert _one_line(capsys) == f"batchproof: error: {branch_coverage.MISSING}\n"
    monkeypatch.setattr(branch_coverage, "available", lambda: True)
    assert main(["verify", "--coverage", "--op", MULTIPLE]) == 2  # impl/ imported already
    assert _one_line(capsys) == ("batchproof: error: --coverage: start coverage before "
                                 "batchproof.impl / reference are imported\n")


def test_coverage_is_measured_over_the_run_and_reported(ran, screen, monkeypatch,
                                                        tmp_path) -> None:
    files = [branch_coverage.FileCoverage("impl/trainer.py", 10, [3], 8, 6, ["3->4", "7->exit"]),
             branch_coverage.FileCoverage("reference/trainer.py", 5, [], 2, 1, ["1->2"])]
    events = []
    monkeypatch.setattr(branch_coverage, "start", lambda: events.append("start") or "measure")
    monkeypatch.setattr(branch_coverage, "finish",
                        lambda measure: events.append(("finish", measure)) or files)
    monkeypatch.setattr(branch_coverage, "available", lambda: True)
    report = tmp_path / "r.json"
    assert main(["verify", "--coverage", "--op", MULTIPLE, "--check", "equivalence", "--json",
                 str(report)]) == 0
    assert events == ["start", ("finish", "measure")]
    out = screen.getvalue()
    title = ("branch coverage of this run (coverage.py, branch mode; the kernels run as Python "
             "while measured)")
    assert title in " ".join(out.split())  # (its lines wrapped to the table's width)
    table = out[out.index("┏", out.index("branch coverage of this run")):]
    table = table[:table.index("┘")]
    cells = [line.replace("┃", "│").split("│")[1:-1] for line in table.splitlines()
             if line.startswith(("│", "┃"))]
    assert [[c.strip() for c in row] for row in cells] == [
        ["file", "statements", "branches", "taken", "%", "branches not taken"],
        ["impl/trainer.py", "10", "8", "6", "75.0", "3->4, 7->exit"],
        ["reference/trainer.py", "5", "2", "1", "50.0", "1->2"]]
    impl, reference = cells[1:]
    assert impl[0].endswith("  ") and reference[-1].endswith("  ")  # names to the left,
    assert all(c.startswith("  ") for c in reference[1:4])  # the counts to the right
    assert "\nimpl/: 6/8 branches taken (75.0%)\nreference/: 1/2 branches taken (50.0%)\n" in out
    assert json.loads(report.read_text())["coverage"] == branch_coverage.as_json(files)
    assert report.read_text() == json.dumps(json.loads(report.read_text()), indent=2)


def test_coverage_of_files_without_branches_prints_no_total(ran, screen, monkeypatch) -> None:
    files = [branch_coverage.FileCoverage("impl/trainer.py", 10, [], 0, 0, [])]
    monkeypatch.setattr(branch_coverage, "start", lambda: "measure")
    monkeypatch.setattr(branch_coverage, "finish", lambda measure: files)
    monkeypatch.setattr(branch_coverage, "available", lambda: True)
    assert main(["verify", "--coverage", "--op", MULTIPLE, "--check", "equivalence"]) == 0
    assert "branches taken" not in screen.getvalue()
    numbers = next(line for line in screen.getvalue().splitlines() if "impl/trainer.py" in line)
    cells = numbers.split("│")[1:-1]
    assert cells[0].startswith(" impl") and cells[1].endswith("10 ")  # files left, counts right


# --------------------------------------------------------------------------- what it says

def _rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.replace("┃", "│").split("│")[1:-1]]
            for line in out.splitlines() if line.startswith(("│", "┃"))]


def _summary(results, *argv, seconds=1.25, left_out=()) -> str:
    out = io.StringIO()
    wide = Console(file=out, width=3000)
    verify_cli.console, common.console = wide, wide
    verify_cli._print_summary(results, "ci", _args(*argv), seconds, list(left_out))
    return out.getvalue()


@pytest.fixture
def summary(monkeypatch):
    monkeypatch.setattr(verify_cli, "console", verify_cli.console)
    monkeypatch.setattr(common, "console", common.console)
    return _summary


def test_the_summary_table_one_row_per_record_and_placement(summary) -> None:
    results = [_result(examples=3, placement="kernel", seconds=11.5),
               _result("errors", examples=2, placement="kernel"),
               _result(examples=1, placement="cpu", status=Verdict.FAIL, error="Mismatch: x"),
               _result("pin:p", placement="cpu", status=Verdict.FAIL, error="Mismatch: y"),
               _result("errors", placement="cpu", status=Verdict.ERROR, error="HarnessError: z")]
    out = summary(results, "--impl", "impl")
    assert out.splitlines()[0].strip() == "batchproof verify — impl=impl, profile=ci, device=cpu"
    assert _rows(out)[:3] == [
        ["op", "function", "placement", "checks", "examples", "result", "time"],
        ["trainer", "required_multiple", "kernel", "2", "5", "PASS", "12.0s"],
        ["trainer", "required_multiple", "cpu", "3", "3", "FAIL (2) ERROR (1)", "1.5s"]]
    lines = out.splitlines()
    assert lines[-1] == "2/5 checks passed (2 fail, 1 error) in 1.2s"
    raw = [line.split("│")[1:-1] for line in lines if line.startswith("│")]
    assert all(not c.startswith("  ") for row in raw for c in row[:3] + row[5:6])  # words left
    assert all(c.startswith("  ") for row in raw for c in row[3:5])  # counts right
    assert raw[-1][6] == "  1.5s "


def test_each_failure_is_printed_with_its_case_and_replay_line(summary) -> None:
    failed = _result(placement="generic", status=Verdict.FAIL, error="Mismatch: x",
                     notes=["note one"], minimal="required_multiple(2)", replay="batchproof v")
    errored = _result("pin:p", placement="any", status=Verdict.ERROR, error="HarnessError: z")
    out = summary([failed, errored, _result(placement="cpu", notes=["passed, with a note",
                                                                     "and another"])])
    lines = out.splitlines()
    rule = next(i for i, line in enumerate(lines) if "equivalence on generic (fail)" in line)
    assert lines[rule].startswith("─") and " trainer.required_multiple — equivalence on " \
                                           "generic (fail) " in lines[rule]
    assert lines[rule + 1:rule + 5] == ["Mismatch: x", "note one",
                                        "minimal case: required_multiple(2)",
                                        "replay: batchproof v"]
    assert " trainer.required_multiple — pin:p (error) " in lines[rule + 5]
    assert lines[rule + 6] == "HarnessError: z"
    assert lines[rule + 7] == ("trainer.required_multiple — equivalence: passed, with a note; "
                               "and another")
    assert lines[-1] == "1/3 checks passed (1 fail, 1 error) in 1.2s"


def test_a_failure_on_the_runs_device_names_no_placement(summary) -> None:
    out = summary([_result(placement="cuda", status=Verdict.FAIL, error="x")], "--device",
                  "cuda")
    assert " trainer.required_multiple — equivalence (fail) " in out
    assert "batchproof verify — impl=impl, profile=ci, device=cuda" in out
    assert " — equivalence (fail) " in summary([_result(placement="", status=Verdict.FAIL,
                                                       error="x")])


def test_the_summary_counts_warnings_and_records_not_run(summary, monkeypatch) -> None:
    info = registry.get("trainer.real_rows")
    monkeypatch.setattr(info, "requires", ("no_such_module_a", "no_such_module_b"))
    warned = _result(warnings=[SeenWarning("UserWarning", "w", "f.py:3", 2)],
                     warnings_not_kept=4)
    out = summary([warned], left_out=[info])
    lines = out.splitlines()
    assert lines[-5:] == [
        "warnings raised by the target: 6, each distinct one once per check with its count",
        "  trainer.required_multiple equivalence: 2 x UserWarning: w (first at f.py:3)",
        "  trainer.required_multiple equivalence: 4 more, of other distinct warnings (the "
        "first 1 are listed)",
        f"not run: trainer.real_rows needs {', '.join(info.missing())}",
        "1/1 checks passed in 1.2s; 1 record(s) not run"]


def test_the_summary_colours_its_verdicts(monkeypatch) -> None:
    out = io.StringIO()
    coloured = Console(file=out, width=3000, force_terminal=True, color_system="standard")
    monkeypatch.setattr(verify_cli, "console", coloured)
    monkeypatch.setattr(common, "console", coloured)
    verify_cli._print_summary([_result(placement="cpu", status=Verdict.FAIL, error="x"),
                               _result(placement="kernel")], "ci", _args(), 0.0, [])
    text = out.getvalue()
    assert "\x1b[31mFAIL (1)" in text and "\x1b[32mPASS" in text
    assert re.search(r"\n\x1b\[31m─+ \x1b\[0mtrainer\.required_multiple — equivalence ", text)
    assert re.search(r"\n\x1b\[(1;)?31m[^\n]*checks passed", text)
    out.truncate(0), out.seek(0)
    verify_cli._print_summary([_result()], "ci", _args(), 0.0, [])
    assert re.search(r"\n\x1b\[(1;)?32m[^\n]*checks passed", out.getvalue())
    assert verify_cli._badge(Verdict.ERROR, 2) == "[red]ERROR (2)[/red]"
    assert verify_cli._badge(Verdict.PASS) == "[green]PASS[/green]"


def test_the_placement_legend(summary) -> None:
    several = summary([_result(placement="kernel"), _result(placement="generic")])
    assert (f"placements: kernel = {placements.PLACEMENTS['kernel']}; generic = "
            f"{placements.PLACEMENTS['generic']}. Equivalence, errors and pins run on each; "
            "properties on the first.\n") in several
    one = summary([_result(placement="any"), _result(placement="cpu")])
    assert (f"placements: cpu = {placements.PLACEMENTS['cpu']}; any = the op has one code path "
            "(it never asks where it runs). Equivalence") in one
    paths = summary([_result(placement="cpu"), _result("paths:cpu", placement="cpu")])
    assert paths.split("placements: ", 1)[1].split("\n")[0].endswith(
        "properties on the first. A record that declares its kernels and fast paths has one "
        "more check per row, paths:PLACEMENT: each of them ran, and nothing the placement may "
        "not run.")
    assert "placements:" not in summary([_result(placement="any")])


def test_the_json_of_one_check_has_paths_only_on_a_paths_check() -> None:
    plain = verify_cli._as_json(_result(paths={"a": 1}))
    assert "paths" not in plain and "other_paths" not in plain and plain["passed"] is True
    counted = verify_cli._as_json(_result("paths:cpu", status=Verdict.FAIL, paths={"a": 0},
                                          other_paths={"b": 2}))
    assert (counted["paths"], counted["other_paths"], counted["passed"]) == (
        {"a": 0}, {"b": 2}, False)


def test_a_record_runs_for_real(screen, tmp_path) -> None:
    report = tmp_path / "r.json"
    assert main(["verify", "--op", MULTIPLE, "--max-examples", "1", "--placement", "cpu",
                 "--json", str(report)]) == 0
    document = json.loads(report.read_text())
    assert [c["check"] for c in document["checks"]] == _checks(MULTIPLE)
    assert all(c["passed"] and c["examples"] >= 1 for c in document["checks"])


# --------------------------------------------------------------------------- the loop, closer

class _Progress:
    """`_progress()` as a stand-in: what it was told, in order."""

    def __init__(self) -> None:
        self.calls, self.totals, self.done = [], {}, {}

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.calls.append(("exit",))

    def add_task(self, description, total):
        task = len(self.totals)
        self.totals[task], self.done[task] = total, 0
        self.calls.append(("add", description, total))
        return task

    def advance(self, task, steps=1) -> None:
        self.done[task] += steps

    def update(self, task, description) -> None:
        self.calls.append(("describe", task, description))


@pytest.fixture
def progress(monkeypatch):
    bar = _Progress()
    monkeypatch.setattr(verify_cli, "_progress", lambda: bar)
    return bar


def test_the_progress_bar_counts_every_check_of_every_placement(ran, screen, progress) -> None:
    """One task per op, its total the check runs over the placements (those skipped as one code
    path advance it too), each check named while it runs, the op's name once done."""
    assert main(["verify", "--op", "trainer.real_rows", "--op", "balance.restore_order"]) == 0
    real, restore = _checks("trainer.real_rows"), _checks("balance.restore_order")
    assert progress.calls[0] == ("add", "balance", verify_cli._runs(restore, ALL))
    assert progress.calls[1:1 + len(restore)] == [
        ("describe", 0, f"balance: restore_order {c} [kernel]") for c in restore]
    assert progress.calls[1 + len(restore)] == ("describe", 0, "balance")
    assert progress.calls[2 + len(restore)] == ("add", "trainer", verify_cli._runs(real, ALL))
    assert progress.calls[-2:] == [("describe", 1, "trainer"), ("exit",)]
    assert progress.done == progress.totals and all(progress.totals.values())


def test_two_placements_name_theirs_while_they_run(ran, screen, progress, monkeypatch) -> None:
    monkeypatch.setattr(placements, "available", lambda device="cpu": ["cpu", "generic"])
    ran.asks = True
    assert main(["verify", "--op", MULTIPLE, "--check", "equivalence"]) == 0
    assert [c for c in progress.calls if c[0] == "describe"] == [
        ("describe", 0, "trainer: required_multiple equivalence [cpu]"),
        ("describe", 0, "trainer: required_multiple equivalence [generic]"),
        ("describe", 0, "trainer")]


def test_one_placement_names_none_while_it_runs(ran, screen, progress) -> None:
    assert main(["verify", "--op", MULTIPLE, "--placement", "cpu", "--check", "equivalence"]) == 0
    assert progress.calls == [("add", "trainer", 1),
                              ("describe", 0, "trainer: required_multiple equivalence"),
                              ("describe", 0, "trainer"), ("exit",)]


def test_a_skipped_placement_advances_the_bar_past_the_named_paths_check(ran, screen,
                                                                        progress) -> None:
    assert main(["verify", "--op", "balance.micro_batches", "--check", "equivalence", "--check",
                 "paths:generic"]) == 0
    assert progress.totals == {0: 5} and progress.done == {0: 5}


def test_the_first_placement_alone_decides_whether_the_others_run(ran, screen, monkeypatch,
                                                                  tmp_path) -> None:
    """The op asked where it runs under the first placement only: every placement still runs
    (a later placement's checks never make the others one code path)."""
    def verify_one(args, info, check, candidate, placement, chosen, reproduce):
        ran.made.append((check, placement))
        if placement == "kernel":
            placements._cpu.ASKED += 1
        return CheckResult(info.op, info.function, check, Verdict.PASS, 1, 0.0, "cpu",
                           placement=placement)

    monkeypatch.setattr(verify_cli, "_verify_one", verify_one)
    report = tmp_path / "r.json"
    assert main(["verify", "--op", MULTIPLE, "--check", "equivalence", "--json",
                 str(report)]) == 0
    assert ran.made == [("equivalence", p) for p in ALL]
    assert [c["placement"] for c in json.loads(report.read_text())["checks"]] == ALL


def test_one_placement_asked_for_keeps_its_name(ran, screen, tmp_path) -> None:
    report = tmp_path / "r.json"
    assert main(["verify", "--op", MULTIPLE, "--placement", "generic", "--check", "equivalence",
                 "--json", str(report)]) == 0
    assert [c["placement"] for c in json.loads(report.read_text())["checks"]] == ["generic"]
    assert report.read_text() == json.dumps(json.loads(report.read_text()), indent=2)


def test_the_cpu_runs_every_record_whatever_its_devices(ran, screen, monkeypatch) -> None:
    """`devices` says where else a record runs; the CPU run checks them all."""
    monkeypatch.setattr(registry.get(MULTIPLE), "devices", ("cuda",))
    assert main(["verify", "--op", "trainer", "--check", "equivalence"]) == 0
    assert [r for r, _, _ in ran.made] == [i.name for i in registry.select(["trainer"])]


def test_each_placements_paths_check_counts_the_paths_its_checks_took(ran, screen,
                                                                     monkeypatch,
                                                                     tmp_path) -> None:
    record = "balance.micro_batches"
    info = registry.get(record)
    monkeypatch.setattr(placements._paths, "RAN", Counter(placements._paths.RAN))
    ran.asks = True

    def verify_one(args, info, check, candidate, placement, chosen, reproduce):
        placements._cpu.ASKED += 1
        for path in placements.declared(info, placement):
            placements._paths.RAN[path] += 1
        return CheckResult(info.op, info.function, check, Verdict.PASS, 2, 0.0, args.device,
                           placement=placement)

    monkeypatch.setattr(verify_cli, "_verify_one", verify_one)
    report = tmp_path / "r.json"
    assert main(["verify", "--op", record, "--json", str(report)]) == 0
    counted = {c["check"]: c for c in json.loads(report.read_text())["checks"]
               if c["check"].startswith("paths:")}
    compare = [c for c in _checks(record) if verify_cli._every_placement(c)]
    assert set(counted) == {f"paths:{p}" for p in ALL}
    kernel = placements.declared(info, "kernel")
    assert kernel and counted["paths:kernel"]["paths"] == dict.fromkeys(
        kernel, len(_checks(record)))
    for p in ALL[1:]:
        assert counted[f"paths:{p}"]["paths"] == dict.fromkeys(placements.declared(info, p),
                                                               len(compare))
    assert all(c["device"] == "cpu" and c["status"] == "pass" for c in counted.values())


def test_the_summary_names_the_profile_and_the_runs_time(ran, screen) -> None:
    assert main(["verify", "--op", MULTIPLE, "--check", "equivalence", "--profile",
                 "mutation"]) == 0
    out = screen.getvalue()
    assert "batchproof verify — impl=impl, profile=mutation, device=cpu" in out
    seconds = float(re.search(r"\n1/1 checks passed in (\d+\.\d)s\n", out)[1])
    assert 0 <= seconds < 600

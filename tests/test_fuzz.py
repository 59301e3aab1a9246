"""`batchproof fuzz` and `batchproof.fuzz_targets` (docs/fuzzing.md): HypoFuzz fuzzes the very
Hypothesis tests `run_check` runs, under the same database keys, so that what it saves replays
in `batchproof verify`, the pytest suite and CI."""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from hypothesis import Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.internal.reflection import function_digest

from batchproof import checks, cli, fuzz_targets, plugin, profiles, registry
from batchproof.checks import run_check
from batchproof.impl.rl_batch import build_rl_batch

SEARCHED = [(info, check) for info in registry.all_ops() for check in info.check_names()
            if checks.searched(check)]
HYPOFUZZ = importlib.util.find_spec("hypofuzz") is not None


@pytest.fixture(autouse=True)
def _restore_profile(monkeypatch):
    """`batchproof fuzz` loads its profile in this process before a usage error: give it back."""
    monkeypatch.delenv("BATCHPROOF_SHARED_DATABASE", raising=False)
    profile = settings._current_profile
    yield
    settings.load_profile(profile)


def _env() -> dict[str, str]:
    """A subprocess's environment without this run's profile, shared database or pytest options."""
    drop = ("BATCHPROOF_SHARED_DATABASE", "HYPOTHESIS_PROFILE", "CI", "PYTEST_ADDOPTS")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _key(test) -> bytes:
    """The database key Hypothesis uses for a test that `checks.given_test` built."""
    return test._hypothesis_internal_database_key


def test_one_fuzz_target_per_searched_check(monkeypatch) -> None:
    assert sorted(fuzz_targets.TARGETS.values()) == sorted((i.name, c) for i, c in SEARCHED)
    assert not any(checks.searched(c) for i in registry.all_ops() for c in i.check_names()
                   if c.startswith("pin:"))
    for name, (record, check) in fuzz_targets.TARGETS.items():
        info = registry.get(record)
        node_id = checks.fuzz_node_id(info, check)
        assert node_id == f"{checks.FUZZ_MODULE}::{name}"
        inner = getattr(fuzz_targets, name).hypothesis.inner_test
        # a derandomized run's seed: the name, as before HypoFuzz (the same examples in CI)
        assert inner._hypothesis_internal_add_digest == checks.check_test_name(info, check).encode()
        # HypoFuzz's key: it sets the node id in place of the name, then digests the test
        monkeypatch.setattr(inner, "_hypothesis_internal_add_digest", node_id.encode())
        assert function_digest(inner) == _key(getattr(fuzz_targets, name))


def test_run_check_uses_the_fuzz_targets_database_keys(monkeypatch) -> None:
    used = {}
    monkeypatch.setattr(checks, "_run_given", lambda info, wrapped, body, **_: used.setdefault(
        (info.name, wrapped.hypothesis.inner_test.__name__), _key(wrapped)))
    for info, check in SEARCHED:
        run_check(info, check)
    targets = {fuzz_targets.TARGETS[name]: _key(getattr(fuzz_targets, name))
               for name in fuzz_targets.TARGETS}
    assert {(i.name, c): used[i.name, checks.check_test_name(i, c)] for i, c in SEARCHED} \
        == targets
    assert len(set(targets.values())) == len(targets)  # one key per record and check


def test_fuzz_collects_them_under_those_node_ids() -> None:
    """The collection `batchproof fuzz` hands HypoFuzz (the package folder as rootdir, no ini
    file): every target, under the node id its database key is made of."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "hypothesis",
         *cli.fuzz_pytest_args("nightly")], env=_env(), capture_output=True, text=True,
        check=True, cwd=cli.fuzz_module().parent.parent).stdout
    collected = {line for line in out.splitlines() if "::" in line}
    assert collected == {checks.fuzz_node_id(i, c) for i, c in SEARCHED}


def test_the_plugin_refuses_a_hypofuzz_run_under_other_node_ids(monkeypatch) -> None:
    item = SimpleNamespace(module=fuzz_targets, name="test_x",
                           nodeid="harness/fuzz_targets.py::test_x")
    plugin._fuzz_targets_keyed_as_run_check([item])  # not under HypoFuzz: pytest may run them
    monkeypatch.setitem(sys.modules, "hypofuzz.detection",
                        SimpleNamespace(in_hypofuzz_run=lambda: True))
    with pytest.raises(pytest.UsageError, match="collected as 'fuzz_targets.py::test_x'"):
        plugin._fuzz_targets_keyed_as_run_check([item])
    item.nodeid = "fuzz_targets.py::test_x"
    plugin._fuzz_targets_keyed_as_run_check([item])


def _long_response_bug(prompts, responses, **kwargs):
    """Wrong only when some response has 3 tokens or more: never the first example of a run."""
    batch = build_rl_batch(prompts, responses, **kwargs)
    if any(len(r) >= 3 for r in responses):
        batch["loss_mask"] = batch["loss_mask"].roll(1, dims=1)
    return batch


def test_what_a_fuzz_target_saves_run_check_replays_first(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("batchproof.impl.rl_batch.build_rl_batch", _long_response_bug)
    info = registry.get("rl_batch.build_rl_batch")
    target = fuzz_targets.test_rl_batch__build_rl_batch__equivalence
    night = settings(profiles.PROFILES["nightly"], max_examples=200,
                     phases=[Phase.reuse, Phase.generate, Phase.shrink],
                     database=DirectoryBasedExampleDatabase(tmp_path))
    monkeypatch.setattr(target, "_hypothesis_internal_use_settings", night)
    with pytest.raises(AssertionError):
        target()  # found, shrunk and saved, as HypoFuzz would
    assert any(p.is_file() for p in tmp_path.rglob("*"))

    one_example = dict(max_examples=1, phases=[Phase.reuse, Phase.generate])
    run_check(info, "equivalence", settings=settings(profiles.PROFILES["ci"], **one_example))
    shared = profiles.shared_database(str(tmp_path))
    ci = settings(profiles.with_shared("ci", profiles.PROFILES["ci"], shared), **one_example)
    with pytest.raises(AssertionError):
        run_check(info, "equivalence", settings=ci)


def _without_hypofuzz(monkeypatch, installed: bool) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: (
        (object() if installed else None) if name == "hypofuzz" else find_spec(name, *args)))


def test_fuzz_without_hypofuzz_is_a_one_line_usage_error(monkeypatch, capsys) -> None:
    _without_hypofuzz(monkeypatch, installed=False)
    assert cli.main(["fuzz", "--op", "sft"]) == cli.USAGE
    err = capsys.readouterr().err
    assert err == "batchproof: error: batchproof fuzz needs HypoFuzz: " \
                  "pip install 'batchproof[fuzz]'\n"


@pytest.mark.parametrize("words", [["--profile", "ci"], ["-n", "0"], ["--profile", "nope"],
                                   ["--check", "pin:two_segment_width_inflation"]])
def test_fuzz_usage_errors(monkeypatch, capsys, words) -> None:
    _without_hypofuzz(monkeypatch, installed=True)  # stops before HypoFuzz would start
    assert cli.main(["fuzz", "--op", "rl_batch.build_rl_batch", *words]) == cli.USAGE
    assert capsys.readouterr().err.count("\n") == 1


RESTORE_ORDER = "balance.restore_order"  # a small record: three searched checks


def _reported_by_nodeid(db) -> dict[str, int]:
    """node id -> the test cases HypoFuzz's reports count for it (each process's last report,
    summed), read through the tests HypoFuzz says it started and the node id each report
    names: nothing of batchproof's keys or summary."""
    from hypofuzz.database.database import test_keys_key

    best: dict[tuple[str, str], int] = {}
    for key in db.fetch(test_keys_key):
        for report in db.reports.fetch(key):
            cases = sum(report.status_counts.values())
            slot = (report.nodeid, report.worker_uuid)
            best[slot] = max(best.get(slot, 0), cases)
    totals: dict[str, int] = {}
    for (nodeid, _), cases in best.items():
        totals[nodeid] = totals.get(nodeid, 0) + cases
    return totals


@pytest.fixture(scope="module")
def short_fuzz_run(tmp_path_factory):
    """`batchproof fuzz --op balance.restore_order -n 1` in an empty folder, stopped as
    `timeout` stops it (SIGTERM) once HypoFuzz has reported inputs of every check (50-70 s on
    a 2-core machine shared with other jobs, most of it HypoFuzz starting): (its output, its
    status, its database, the check's test name -> test cases HypoFuzz reported by then)."""
    if not HYPOFUZZ:
        pytest.skip("needs HypoFuzz (pip install 'batchproof[fuzz]')")
    from hypofuzz.database import HypofuzzDatabase

    folder = tmp_path_factory.mktemp("fuzz")
    info = registry.get(RESTORE_ORDER)
    nodeids = [checks.fuzz_node_id(info, c) for c in info.check_names() if checks.searched(c)]
    database = folder / ".hypothesis" / "examples"
    db = HypofuzzDatabase(DirectoryBasedExampleDatabase(database))
    run = subprocess.Popen([sys.executable, "-m", "batchproof", "fuzz", "--op", info.name,
                            "-n", "1"], cwd=folder, env=_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    reported: dict[str, int] = {}
    try:  # until HypoFuzz has reported inputs run on every check
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and run.poll() is None \
                and not all(reported.get(n) for n in nodeids):
            time.sleep(0.5)
            reported = _reported_by_nodeid(db)
    finally:
        os.killpg(run.pid, signal.SIGTERM)  # what `timeout` does
        out, _ = run.communicate(timeout=60)
    return SimpleNamespace(out=out, returncode=run.returncode, db=db, database=database,
                           reported={n.split("::test_")[1]: reported.get(n, 0) for n in nodeids})


def test_a_short_hypofuzz_run_finds_nothing_on_impl(short_fuzz_run) -> None:
    from hypofuzz.database.models import FailureState

    run = short_fuzz_run
    info = registry.get(RESTORE_ORDER)
    keys = {c: _key(checks.given_test(info, c)) for c in info.check_names() if checks.searched(c)}
    assert run.returncode == 130, run.out
    # under run_check's keys
    assert all(list(run.db.reports.fetch(k)) for k in keys.values()), run.out
    assert not any(list(run.db.failures(state=FailureState.SHRUNK).fetch(k))
                   for k in keys.values())
    assert "using 1 process to fuzz 3 tests" in run.out
    for check in keys:
        assert check in run.out  # the summary table
    assert "failing examples are saved" not in run.out


def _summary_rows(out: str) -> dict[str, tuple[str, str]]:
    """check -> (test cases, behaviours) as the summary table prints them."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 5 and cells[0] == RESTORE_ORDER:
            rows[cells[1]] = (cells[2], cells[3])
    return rows


def _assert_counts_what_ran(out: str, reported: dict[str, int]) -> None:
    """Every check's row counts test cases and behaviours, at least the test cases HypoFuzz had
    reported when the run was stopped (its reports only grow)."""
    info = registry.get(RESTORE_ORDER)
    rows = _summary_rows(out)
    assert set(rows) == {c for c in info.check_names() if checks.searched(c)}, out
    for check, (cases, behaviours) in rows.items():
        assert cases.isdigit() and behaviours.isdigit(), out
        assert int(cases) >= reported[checks.check_test_name(info, check)] > 0, out
        assert int(behaviours) > 0, out


def test_fuzz_counts_the_inputs_hypofuzz_ran(short_fuzz_run, monkeypatch, capsys) -> None:
    """The closing table counts what HypoFuzz's reports say ran (it once read another key and
    printed 0 everywhere); planted twins that read that other key, or drop every report, fail
    the same assertion on the same run."""
    run = short_fuzz_run
    _assert_counts_what_ran(run.out, run.reported)

    fuzz = importlib.import_module("batchproof.cli.fuzz")
    info = registry.get(RESTORE_ORDER)
    pairs = [(info, c) for c in info.check_names() if checks.searched(c)]
    settings.register_profile("the short run's", profiles.PROFILES["nightly"],
                              database=DirectoryBasedExampleDatabase(run.database))
    settings.load_profile("the short run's")
    fuzz._fuzz_summary(pairs, since=0.0)
    _assert_counts_what_ran(capsys.readouterr().out, run.reported)  # this summary, in-process

    def inner_digest(info, check):  # the key the summary once read: nothing is kept there
        return function_digest(checks.given_test(info, check).hypothesis.inner_test)

    twins = {"wrong key": ("fuzz_database_key", inner_digest),
             "drops reports": ("latest_reports", lambda reports, since: [])}
    for name, (attribute, twin) in twins.items():
        with monkeypatch.context() as patch:
            patch.setattr(fuzz, attribute, twin)
            fuzz._fuzz_summary(pairs, since=0.0)
        out = capsys.readouterr().out
        assert "could not count" in out, name  # says so, rather than 0
        with pytest.raises(AssertionError):
            _assert_counts_what_ran(out, run.reported)

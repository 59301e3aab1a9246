"""The verdict a user reads: the exit status of a run over many checks and many reports, and a
known divergence that stops reproducing (issue 39).

The exit policy (`batchproof.statuses.exit_status`) is asserted as properties over generated
lists of statuses and reports, through every function that applies it: `runner.exit_code` (what
`batchproof check --impl FRAMEWORK` returns over the several adapters it selects),
`cli.verify.exit_code`, and `mutation.target.baseline_status` (the check `mutate --impl` runs
before mutating). The policy, stated once here as `expected`:

    3  nothing ran, or any check is batchproof's own failure (ERROR, NOT RUN) or any adapter
       does not fit (misfit), whatever else happened
    1  else any new divergence in any report: Outcome.NEW, Verdict.FAIL, a known divergence that
       DIVERGED OTHERWISE, and under `strict` a known divergence NOT REPRODUCED
    0  else; the order of reports, outcomes and known divergences never matters

Each property is run against planted twins too (`TWINS`: an exit code that reads one report,
`all` for `any`, a misfit ignored, ...): each must be refuted, so a property that cannot fail
is seen to. These tests are the killers of `batchproof mutate --mutmut --harness statuses`.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from batchproof import adapters
from batchproof.adapters import runner
from batchproof.adapters.runner import AdapterReport, CheckOutcome
from batchproof.cli import main
from batchproof.cli import verify as verify_cli
from batchproof.mutation import target
from batchproof.statuses import DIVERGED, OURS, KnownStatus, Outcome, Verdict, exit_status

PROPERTY = settings(max_examples=200, derandomize=True, database=None, deadline=None,
                    report_multiple_bugs=False)
REFUTE = settings(PROPERTY, phases=[Phase.explicit, Phase.generate])  # a twin: no shrinking

CLEAN_OUTCOMES = (Outcome.PASS, Outcome.KNOWN, Outcome.SKIPPED, Outcome.NOT_TESTED)
CLEAN_KNOWN = (KnownStatus.CONFIRMED, KnownStatus.NOT_MET)

# mostly clean, so that one rarer status decides the code often enough to be seen (batchproof's
# own failures, which win over everything, are about one outcome in eleven)
outcome_statuses = st.sampled_from([*CLEAN_OUTCOMES * 4, *Outcome])
known_statuses = st.sampled_from([*CLEAN_KNOWN * 2, *KnownStatus])
verdicts = st.sampled_from([Verdict.PASS] * 3 + list(Verdict))


def _report(outcomes: list[Outcome], known: list[KnownStatus], misfit: bool) -> AdapterReport:
    return AdapterReport(
        "stand_in", "trainer.required_multiple", "m:f", "-",
        [CheckOutcome("stand_in", "trainer.required_multiple", f"c{i}", s)
         for i, s in enumerate(outcomes)],
        [{"name": f"k{i}", "status": s} for i, s in enumerate(known)], 0,
        misfit="TypeError: unexpected keyword argument" if misfit else "")


reports_of = st.builds(_report, st.lists(outcome_statuses, max_size=4),
                       st.lists(known_statuses, max_size=3),
                       st.sampled_from((False,) * 7 + (True,)))
report_lists = st.lists(reports_of, max_size=4)


def expected(reports: list[AdapterReport], strict: bool = False) -> int:
    """The policy, written from its statement (module docstring), not from the code."""
    outcomes = [o.status for r in reports for o in r.outcomes]
    known = [k["status"] for r in reports for k in r.known]
    if not outcomes or any(r.misfit for r in reports) \
            or any(s in (Outcome.ERROR, Outcome.NOT_RUN) for s in outcomes):
        return 3
    if Outcome.NEW in outcomes or KnownStatus.DIVERGED_OTHERWISE in known \
            or (strict and KnownStatus.NOT_REPRODUCED in known):
        return 1
    return 0


def _shuffled(data, reports: list[AdapterReport]) -> list[AdapterReport]:
    """The same reports in another order, each with its outcomes and known divergences in
    another order."""
    out = []
    for r in data.draw(st.permutations(reports)):
        outcomes = data.draw(st.permutations(r.outcomes))
        known = data.draw(st.permutations(r.known))
        out.append(AdapterReport(r.adapter, r.record, r.target, r.version, outcomes, known,
                                 r.unsupported, misfit=r.misfit))
    return out


# --------------------------------------------------------------------------- the properties


def policy_over_statuses(policy, config=PROPERTY):
    """`policy(statuses, ours=, diverged=)` follows the exit policy, in any order."""
    @config
    @given(st.lists(st.one_of(outcome_statuses, verdicts), max_size=8),
           st.sampled_from((False, False, True)), st.sampled_from((False, False, True)),
           st.data())
    def holds(statuses, ours, diverged, data) -> None:
        want = 3 if not statuses or ours or any(s in OURS for s in statuses) else (
            1 if diverged or any(s in DIVERGED for s in statuses) else 0)
        assert policy(statuses, ours=ours, diverged=diverged) == want
        again = data.draw(st.permutations(statuses))
        assert policy(again, ours=ours, diverged=diverged) == want

    return holds


def policy_over_reports(exit_code, config=PROPERTY):
    """`exit_code(reports, strict=)` follows the exit policy over every report, in any order
    of reports, outcomes and known divergences."""
    @config
    @given(report_lists, st.booleans(), st.data())
    def holds(reports, strict, data) -> None:
        want = expected(reports, strict)
        assert exit_code(reports, strict=strict) == want
        assert exit_code(_shuffled(data, reports), strict=strict) == want

    return holds


def policy_over_verify_results(exit_code, config=PROPERTY):
    """`verify`'s exit code over its checks' verdicts, in any order."""
    def result(status: Verdict) -> verify_cli.CheckResult:
        return verify_cli.CheckResult("trainer", "required_multiple", "equivalence", status, 1,
                                      0.0, "cpu")

    @config
    @given(st.lists(verdicts.map(result), max_size=8), st.data())
    def holds(results, data) -> None:
        statuses = [r.status for r in results]
        want = 3 if not results or Verdict.ERROR in statuses else (
            1 if Verdict.FAIL in statuses else 0)
        assert exit_code(results) == want
        assert exit_code(data.draw(st.permutations(results))) == want

    return holds


def policy_before_mutation(baseline, config=PROPERTY):
    """`mutate --impl`'s first check: the policy, except that a check that ran no example
    (NOT TESTED) makes an otherwise clean run 1: no mutant could be killed by it."""
    @config
    @given(reports_of, st.data())
    def holds(report, data) -> None:
        want = expected([report])
        if want == 0 and Outcome.NOT_TESTED in [o.status for o in report.outcomes]:
            want = 1
        assert baseline(report) == want
        (again,) = _shuffled(data, [report])
        assert baseline(again) == want

    return holds


def test_exit_status_over_any_statuses() -> None:
    policy_over_statuses(exit_status)()


def test_check_exit_code_over_any_reports() -> None:
    policy_over_reports(runner.exit_code)()


def test_verify_exit_code_over_any_results() -> None:
    policy_over_verify_results(verify_cli.exit_code)()


def test_the_check_before_mutation_over_any_report() -> None:
    policy_before_mutation(target.baseline_status)()


# --------------------------------------------------------------------------- planted twins


def _statuses(reports):
    return [o.status for r in reports for o in r.outcomes]


def _first_report_only(reports, strict=False):
    return runner.exit_code(reports[:1], strict=strict)


def _last_report_only(reports, strict=False):
    return runner.exit_code(reports[-1:], strict=strict)


def _all_instead_of_any(reports, strict=False):
    return exit_status(_statuses(reports), ours=bool(reports) and all(r.misfit for r in reports),
                       diverged=bool(reports) and all(r.unexplained for r in reports))


def _misfit_ignored(reports, strict=False):
    return exit_status(_statuses(reports), diverged=any(r.unexplained for r in reports))


def _diverged_otherwise_ignored(reports, strict=False):
    return exit_status(_statuses(reports), ours=any(r.misfit for r in reports))


def _strict_ignored(reports, strict=False):
    return runner.exit_code(reports)


def _always_strict(reports, strict=False):
    return runner.exit_code(reports, strict=True)


def _divergence_before_ours(reports, strict=False):
    code = runner.exit_code(reports, strict=strict)
    return 1 if code == 3 and any(s == Outcome.NEW for s in _statuses(reports)) else code


def _last_status_only(statuses, *, ours=False, diverged=False):
    return exit_status(list(statuses)[-1:], ours=ours, diverged=diverged)


def _nothing_ran_passes(statuses, *, ours=False, diverged=False):
    statuses = list(statuses)
    return exit_status(statuses, ours=ours, diverged=diverged) if statuses else 0


def _last_result_only(results):
    return verify_cli.exit_code(list(results)[-1:])


def _every_result_failed(results):
    results = list(results)
    if not results or any(r.status == Verdict.ERROR for r in results):
        return 3
    return 1 if all(r.status == Verdict.FAIL for r in results) else 0


def _untested_ignored(report):
    return runner.exit_code([report])


def _untested_over_ours(report):
    return 1 if report.untested else runner.exit_code([report])


TWINS = [
    (policy_over_reports, _first_report_only),
    (policy_over_reports, _last_report_only),
    (policy_over_reports, _all_instead_of_any),
    (policy_over_reports, _misfit_ignored),
    (policy_over_reports, _diverged_otherwise_ignored),
    (policy_over_reports, _strict_ignored),
    (policy_over_reports, _always_strict),
    (policy_over_reports, _divergence_before_ours),
    (policy_over_statuses, _last_status_only),
    (policy_over_statuses, _nothing_ran_passes),
    (policy_over_verify_results, _last_result_only),
    (policy_over_verify_results, _every_result_failed),
    (policy_before_mutation, _untested_ignored),
    (policy_before_mutation, _untested_over_ours),
]


@pytest.mark.parametrize(("prop", "twin"), TWINS, ids=[t.__name__ for _, t in TWINS])
def test_each_property_refutes_a_planted_twin(prop, twin) -> None:
    with pytest.raises(AssertionError):
        prop(twin, config=REFUTE)()


# --------------------------------------------------------------------------- end to end

TARGETS = '''
from batchproof.reference.balance import karmarkar_karp
from batchproof.reference.trainer import required_multiple


def off_by_one(*args, **kwargs):
    return required_multiple(*args, **kwargs) + 1


def asserts_k_at_most_n(values, k, *, equal_size=False):
    assert len(values) >= k, "number of items < k_partitions"
    return karmarkar_karp(values, k, equal_size=equal_size)
'''


def _adapter_file(folder, adapters_source: str) -> str:
    (folder / "standin_targets.py").write_text(TARGETS)
    path = folder / "standin_adapters.py"
    path.write_text("import batchproof\n\n" + textwrap.dedent(adapters_source))
    return str(path)


def _isolated_registry(monkeypatch) -> None:
    """Adapters an adapter file registers vanish with the test. batchproof's own register
    first, outside the copy: imported (once per process) during the test, they would register
    into the copy only and vanish with it (a later `batchproof list` would list none)."""
    adapters.all_adapters()
    monkeypatch.setattr(adapters, "_ADAPTERS", dict(adapters._ADAPTERS))
    monkeypatch.setattr(adapters, "_LOADED_ENTRY_POINTS", set(adapters._LOADED_ENTRY_POINTS))
    monkeypatch.setattr(adapters, "LOAD_PROBLEMS", [])


@pytest.fixture
def standin_folder(tmp_path, monkeypatch, cli_state):
    _isolated_registry(monkeypatch)
    monkeypatch.chdir(tmp_path)
    return tmp_path


MANY = 3


@pytest.mark.parametrize("divergent", [*range(MANY), None])
def test_check_fails_on_one_divergent_adapter_among_many_at_any_position(
        standin_folder, capsys, divergent) -> None:
    """`batchproof check --impl FRAMEWORK` over several adapters of a stand-in framework: the one
    whose target diverges fails the run (exit 1) wherever it comes; none diverging, exit 0."""
    targets = ["standin_targets:off_by_one" if i == divergent else
               "batchproof.reference.trainer:required_multiple" for i in range(MANY)]
    file = _adapter_file(standin_folder, f"""
        ADAPTERS = [batchproof.Adapter(name=f"multi.a{{i}}", framework="multi",
                                       record="trainer.required_multiple", target=target,
                                       wrap=lambda fn: fn)
                    for i, target in enumerate({targets!r})]
        """)
    code = main(["check", "--adapter-file", file, "--impl", "multi", "--check", "equivalence",
                 "--profile", "ci", "--max-examples", "5"])
    out = capsys.readouterr().out
    assert code == (0 if divergent is None else 1), out
    new = 0 if divergent is None else 1
    assert f"{new} new divergence(s) in {MANY} target(s)" in out, out
    if divergent is not None:
        assert f"new divergence: multi.a{divergent} — equivalence" in out, out


# --------------------------------------------------------------------------- not reproduced

STALE = """
    def k_over_n(call):
        values, k = call.arg("values"), call.arg("k")
        return isinstance(values, list) and isinstance(k, int) and k > len(values)


    def stand_in(name, target):
        return batchproof.Adapter(
            name=name, framework="standin", record="balance.karmarkar_karp", target=target,
            wrap=lambda fn: fn,
            known=(batchproof.KnownDivergence(
                "k_over_n_by_assert", k_over_n, kind="errors", raises=AssertionError,
                doc="k > n raises AssertionError, not ValueError", upstream="stand-in"),))


    ADAPTERS = [stand_in("standin.still_asserts", "standin_targets:asserts_k_at_most_n"),
                stand_in("standin.fixed", "batchproof.reference.balance:karmarkar_karp")]
    """


def test_a_known_divergence_that_stops_reproducing_is_counted_and_fails_strict(
        standin_folder, capsys, monkeypatch) -> None:
    """Two stand-in adapters declare the same known divergence; one target still shows it, the
    other was fixed (the contract's function). Plain: exit 0, the summary counts the one not
    reproduced and names it. `--strict`: exit 1. The JSON report says both."""
    file = _adapter_file(standin_folder, STALE)
    base = ["check", "--adapter-file", file, "--impl", "standin", "--check",
            "pin:k_greater_than_n", "--profile", "ci"]
    registered = dict(adapters._ADAPTERS)
    for strict, code in ((False, 0), (True, 1)):
        monkeypatch.setattr(adapters, "_ADAPTERS", dict(registered))  # as a fresh process
        report = standin_folder / f"strict-{strict}.json"
        assert main([*base, *(["--strict"] if strict else []), "--json", str(report)]) == code
        out = capsys.readouterr().out
        assert "0 new divergence(s) in 2 target(s); 2 known divergence(s) listed above, 1 NOT " \
               f"REPRODUCED{' (--strict: exit 1)' if strict else ''}" in out, out
        assert "standin.fixed: k_over_n_by_assert" in out
        assert "standin.still_asserts: k_over_n_by_assert" not in out
        written = json.loads(report.read_text())
        assert written["exit_status"] == code and written["strict"] is strict
        assert written["summary"] == {"new": 0, "errors": 0, "not_tested": 0, "known": 2,
                                      "not_reproduced": 1, "targets": 2}
        statuses = {r["adapter"]: r["known"][0]["status"] for r in written["reports"]}
        assert statuses == {"standin.still_asserts": "confirmed",
                            "standin.fixed": "not reproduced"}


NEVER_MET = """
    ADAPTERS = [batchproof.Adapter(
        name="standin.never_met", framework="standin", record="balance.karmarkar_karp",
        target="batchproof.reference.balance:karmarkar_karp", wrap=lambda fn: fn,
        known=(batchproof.KnownDivergence(
            "values_of_a_million", lambda call: call.arg("values") == [10 ** 6], kind="errors",
            raises=AssertionError, doc="a stand-in no input matches", upstream="stand-in"),))]
    """


def test_a_known_divergence_not_met_never_fails_strict(standin_folder, capsys) -> None:
    """No input matched it: not tested, said so in its row, and exit 0 even under `--strict`
    (the decision of docs/frameworks.md: not met is untested, not news about the target)."""
    file = _adapter_file(standin_folder, NEVER_MET)
    assert main(["check", "--adapter-file", file, "--impl", "standin", "--check",
                 "pin:k_greater_than_n", "--profile", "ci", "--strict"]) == 0
    out = capsys.readouterr().out
    assert "not met (no input matched" in out and "NOT REPRODUCED" not in out, out


def test_the_python_api_fails_a_stale_known_divergence_only_when_strict(standin_folder) -> None:
    import batchproof
    from batchproof.reference.balance import karmarkar_karp

    (_, fixed) = adapters.load_adapter_file(_adapter_file(standin_folder, STALE))
    report = batchproof.check(karmarkar_karp, "balance.karmarkar_karp", adapter=fixed,
                              checks=["pin:k_greater_than_n"])
    assert [k["name"] for k in report.not_reproduced] == ["k_over_n_by_assert"]
    with pytest.raises(batchproof.CheckFailed, match="strict: known divergence.s. not "
                       "reproduced .* k_over_n_by_assert"):
        batchproof.check(karmarkar_karp, "balance.karmarkar_karp", adapter=fixed,
                         checks=["pin:k_greater_than_n"], strict=True)

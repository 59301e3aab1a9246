"""The bug zoo proves the checks can fail: every entry is killed by each of its declared killers,
and every property of every record is the declared killer of at least one entry."""

from __future__ import annotations

import pytest

from batchproof import registry
from batchproof.cli import main
from batchproof.mutation.kill_matrix import check_key, detection, run_entry, weakest
from batchproof.mutation.zoo import all_entries, get

ENTRIES = all_entries()


def _functions_now() -> dict[str, object]:
    """Every function a zoo entry replaces, in `impl/` and `reference/`, as the modules hold it."""
    import importlib

    out = {}
    for entry in ENTRIES:
        for package in ("batchproof.impl", "batchproof.reference"):
            module = importlib.import_module(f"{package}.{entry.op}")
            name = f"{package}.{entry.op}.{entry.replaced}"
            out[name] = getattr(module, entry.replaced, None)
    return out


AS_IMPORTED = _functions_now()


def _process_state() -> str:
    """What of this process' state a check's verdict may depend on, where it differs from a
    fresh process: replaced functions, the placement switches, the loaded profile."""
    import hypothesis

    from batchproof.impl import _cpu, kernels

    changed = [name for name, fn in _functions_now().items() if fn is not AS_IMPORTED[name]]
    return (f"functions not as imported: {changed or 'none'}; placement switches (kernels, "
            f"fast paths, triton on CPU): {kernels.ENABLED, _cpu.FAST_PATHS, kernels.TRITON_ON_CPU}"
            f"; profile {hypothesis.settings._current_profile!r}")


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_declared_killers_kill(entry) -> None:
    result = run_entry(entry, entry.killer_checks(), profile="mutation")
    if not result.missed_killers:
        return
    fresh = _missed_in_a_fresh_process(entry.name)
    assert not fresh, f"{entry.name} survived its declared killers {fresh}"
    # killed in a fresh process, missed in this one: what ran before in this process changed a
    # check's verdict (seen once, 2026-12-02, in a shuffled `make test`: six sft entries'
    # equivalence after other tests on one xdist worker; not reproduced since). Counted as an
    # expected failure, with what missed, so the run says so instead of passing it silently
    pytest.xfail(f"order-dependent verdict: {entry.name}'s {result.missed_killers} missed in "
                 f"this process (errors of the others: {sorted(result.errors)}) and killed in "
                 f"a fresh one; {_process_state()}")


def _missed_in_a_fresh_process(name: str) -> list[str]:
    """The declared killers of entry `name` that miss it in a new Python process."""
    import json
    import subprocess
    import sys

    code = ("import json, sys; from batchproof.mutation.kill_matrix import run_entry; "
            "from batchproof.mutation.zoo import get; e = get(sys.argv[1]); "
            "print(json.dumps(run_entry(e, e.killer_checks(), profile='mutation')"
            ".missed_killers))")
    done = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True,
                          check=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_killers_name_real_checks() -> None:
    for entry in ENTRIES:
        for record, check in entry.killer_checks():
            info = registry.get(record)
            assert check in info.check_names() + info.path_checks(), (
                f"{entry.name}: killer {record}/{check} is not a check of {record}")


DISPATCH = [e for e in ENTRIES if all(c.startswith("paths:") for _, c in e.killer_checks())]


@pytest.mark.parametrize("entry", DISPATCH, ids=[e.name for e in DISPATCH])
def test_a_dispatch_fault_passes_every_equivalence_check(entry) -> None:
    """The dispatch faults give equal outputs: under each placement their killers name, the
    checks that compare with the reference (equivalence, errors, the pins) all pass; only
    the count of the paths that ran sees them."""
    from batchproof import placements

    for record, check in entry.killer_checks():
        info = registry.get(record)
        names = [c for c in info.check_names() if c in ("equivalence", "errors")
                 or c.startswith("pin:")]
        with placements.placed(check.removeprefix("paths:")):
            result = run_entry(entry, [(record, c) for c in names], profile="mutation")
        assert not result.killed, f"{entry.name} under {check}: {result.errors}"


def test_the_kill_matrix_runs_the_paths_checks_an_entry_declares(monkeypatch) -> None:
    """A full row of the matrix runs every check of the op, and the entry's `paths:` killers
    (which are not among them: a paths check reruns a record's checks under one placement)."""
    from batchproof.mutation import kill_matrix

    ran = []
    monkeypatch.setattr(kill_matrix, "run_check",
                        lambda info, check, settings, seed: ran.append((info.name, check)))
    entry = get("rl_batch.numba_kernel_never_dispatched")
    run_entry(entry, profile="mutation")
    assert ("rl_batch.build_rl_batch", "paths:kernel") in ran
    assert not any(c.startswith("paths:") and c != "paths:kernel" for _, c in ran)
    assert ("rl_batch.response_values", "equivalence") in ran


def test_every_property_can_fail() -> None:
    declared = {key for e in ENTRIES for key in (check_key(r, c) for r, c in e.killer_checks())}
    for info in registry.all_ops():
        for prop in info.properties:
            key = check_key(info.name, f"property:{prop.name}")
            assert key in declared, f"no zoo entry shows that {key} can fail"


def test_every_op_has_zoo_entries() -> None:
    ops = {e.op for e in ENTRIES}
    assert set(registry.op_names()) <= ops, f"ops without zoo entries: {set(registry.op_names()) - ops}"


def test_removing_a_property_lets_an_entry_survive(monkeypatch) -> None:
    """Equivalence cannot see a bug in the oracle itself: without the `last_n_entries` property
    in the registry, an oracle with SkyRL's `x[-0:]` bug survives every remaining check."""
    from batchproof.mutation import zoo

    info = registry.get("rl_batch.response_values")
    entry = zoo.get("rl_batch.oracle_x_minus_zero")
    assert run_entry(entry, profile="mutation").killed
    monkeypatch.setattr(info, "properties",
                        [p for p in info.properties if p.name != "last_n_entries"])
    result = run_entry(entry, profile="mutation")
    assert not result.killed, f"still killed by {[k for k, v in result.killed_by.items() if v]}"


def test_detection_counts_the_seeded_runs_that_kill() -> None:
    entry = get("trainer.mini_batch_ignores_n")
    (found,) = detection([entry], seeds=2, jobs=1)
    assert (found.seeds, found.killed) == (2, 2)
    assert found.by_check[check_key("trainer.required_multiple", "pin:dp2_mini15_n8")] == 2
    assert all(0 <= n <= 2 for n in found.by_check.values())
    key, rate = weakest(found)
    assert key in found.declared and rate == found.check_rate(key)
    # with every check of its op disabled nothing can kill it: 0 of 2, and the CLI says so
    every = [check_key(info.name, c) for info in registry.select([entry.op])
             for c in info.check_names()]
    (blind,) = detection([entry], seeds=2, jobs=1, disabled=every)
    assert (blind.killed, blind.rate) == (0, 0.0)


def test_detection_asks_the_other_checks_only_when_the_declared_killers_miss() -> None:
    """A run that a declared killer kills runs nothing else; with the declared killers disabled
    the op's other checks run, and what kills the entry then is reported as a rescuer."""
    entry = get("trainer.mini_batch_ignores_n")
    (found,) = detection([entry], seeds=1, jobs=1)
    assert found.killed == 1 and found.rescuers() == {}
    assert set(found.by_check) == set(found.declared)
    (rescued,) = detection([entry], seeds=1, jobs=1, disabled=found.declared)
    assert rescued.killed == 1 and rescued.rescuers()
    assert not set(rescued.rescuers()) & set(found.declared)


def test_detection_without_the_pins_runs_only_the_search() -> None:
    """--search-only: no `pin:` check runs and no pinned `@example` either; an entry whose
    declared killers are pins is then left to the op's other checks."""
    entry = get("trainer.mini_batch_ignores_n")
    assert any(c.startswith("pin:") for _, c in entry.killer_checks())
    (found,) = detection([entry], seeds=1, jobs=1, search_only=True)
    assert found.declared and not any("/pin:" in k for k in found.declared)
    assert found.by_check and not any("/pin:" in k for k in found.by_check)


def test_search_only_turns_the_explicit_phase_off(monkeypatch) -> None:
    """The pins are also `@example`s in front of each search: --search-only runs the searched
    checks without Hypothesis' explicit phase, and no `pin:` check at all."""
    from hypothesis import Phase

    from batchproof.mutation import kill_matrix

    ran = []
    monkeypatch.setattr(kill_matrix, "run_check",
                        lambda info, check, settings, seed: ran.append((check, settings.phases)))
    entry = get("trainer.mini_batch_ignores_n")
    run_entry(entry, profile="mutation")
    assert any(check.startswith("pin:") for check, _ in ran)
    assert all(Phase.explicit in phases for _, phases in ran)
    ran.clear()
    run_entry(entry, profile="mutation", search_only=True)
    assert ran and not any(check.startswith("pin:") for check, _ in ran)
    assert not any(Phase.explicit in phases for _, phases in ran)


def test_detection_cli_fails_below_the_target(capsys) -> None:
    argv = ["mutate", "--zoo", "--seeds", "1", "--op", "trainer.required_multiple", "--jobs", "1"]
    assert main(argv) == 0
    keys = [f"trainer.required_multiple/{c}"
            for c in registry.get("trainer.required_multiple").check_names()]
    without = [w for k in keys for w in ("--without", k)]
    assert main(argv + without) == 1
    count = sum(e.record == "trainer.required_multiple" for e in ENTRIES)
    assert f"0/{count} entries killed in >= 95% of 1 seeded runs" in capsys.readouterr().out
    assert main(["mutate", "--mutmut", "--seeds", "2"]) == 2

"""`batchproof verify` checks every code path of impl/ that this machine can run — the compiled
kernels, the CPU fast paths, the device-generic code CUDA runs — as separate rows: a bug planted
in one path fails that placement's row and no other."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from batchproof import placements, registry
from batchproof.cli import main
from batchproof.impl import _cpu, kernels
from batchproof.impl import rl_batch as rl_impl
from batchproof.impl.kernels import rl_batch as rl_kernel

pytestmark = pytest.mark.usefixtures("cli_state")  # the CLI runs in this process


def _last_element_off_by_one(function):
    """`function` writing input_ids in place, then one more on the last element."""
    def planted(input_ids, *args, **kwargs):
        out = function(input_ids, *args, **kwargs)
        if input_ids.numel():
            input_ids.view(-1)[-1] += 1
        return out
    return planted


def _statuses(tmp_path, *extra: str) -> dict[str, str]:
    report = tmp_path / "report.json"
    main(["verify", "--op", "rl_batch.build_rl_batch", "--check", "equivalence",
          "--max-examples", "25", "--seed", "0", "--json", str(report), *extra])
    return {r["placement"]: r["status"] for r in json.loads(report.read_text())["checks"]}


def test_a_bug_in_the_code_cuda_runs_fails_the_generic_row_only(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(rl_impl, "_place_tokens_generic",
                        _last_element_off_by_one(rl_impl._place_tokens_generic))
    statuses = _statuses(tmp_path)
    statuses.pop("triton", None)  # (which takes the generic path for scalar rewards)
    assert statuses.pop("generic") == "fail"
    assert set(statuses.values()) == {"pass"} and "cpu" in statuses


def test_a_bug_in_the_cpu_row_copies_fails_the_cpu_row_not_the_generic_one(tmp_path,
                                                                           monkeypatch) -> None:
    """(The kernel placement runs the row copies too where its kernel does not apply.)"""
    monkeypatch.setattr(rl_impl, "_copy_rows_cpu",
                        _last_element_off_by_one(rl_impl._copy_rows_cpu))
    statuses = _statuses(tmp_path)
    assert (statuses["cpu"], statuses["generic"]) == ("fail", "pass")


def test_a_bug_in_the_kernel_fails_the_kernel_row_only(tmp_path, monkeypatch) -> None:
    if "kernel" not in placements.available():
        pytest.skip("numba is not installed: no kernel placement")
    write_rows = rl_kernel.write_rows

    def planted(*args, **kwargs):
        out = write_rows(*args, **kwargs)
        if out["input_ids"].numel():
            out["input_ids"].view(-1)[-1] += 1
        return out

    monkeypatch.setattr(rl_kernel, "write_rows", planted)
    statuses = _statuses(tmp_path)
    assert statuses.pop("kernel") == "fail"
    assert set(statuses.values()) == {"pass"}


def test_one_placement_can_be_named(tmp_path) -> None:
    assert _statuses(tmp_path, "--placement", "generic") == {"generic": "pass"}


def test_an_op_without_placement_branches_is_one_row(tmp_path) -> None:
    report = tmp_path / "report.json"
    assert main(["verify", "--op", "trainer.required_multiple", "--max-examples", "5",
                 "--json", str(report)]) == 0
    rows = json.loads(report.read_text())["checks"]
    assert {r["placement"] for r in rows} == {"any"}
    assert len(rows) == len({r["check"] for r in rows})  # each check ran once


def test_placements_that_cannot_run_are_usage_errors(monkeypatch, capsys) -> None:
    assert main(["verify", "--impl", "reference", "--placement", "generic",
                 "--op", "trainer.required_multiple"]) == 2
    assert "only batchproof's own impl" in capsys.readouterr().err
    monkeypatch.setattr(kernels, "numba", None)
    assert placements.available()[:2] == ["cpu", "generic"]
    assert main(["verify", "--placement", "kernel", "--op", "rl_batch"]) == 2
    assert "batchproof[kernels]" in capsys.readouterr().err


def test_placed_sets_the_switches_and_gives_them_back() -> None:
    before = kernels.ENABLED, _cpu.FAST_PATHS
    with placements.placed("generic"):
        assert (kernels.ENABLED, _cpu.FAST_PATHS, kernels.TRITON_ON_CPU) == (False, False, False)
        assert not _cpu.fast_paths(torch.device("cpu"))
    with placements.placed("triton"):
        assert (kernels.ENABLED, _cpu.FAST_PATHS, kernels.TRITON_ON_CPU) == (False, False, True)
    with placements.placed("cpu"):
        assert (kernels.ENABLED, _cpu.FAST_PATHS) == (False, True)
    with pytest.raises(RuntimeError), placements.placed("kernel"):
        assert (kernels.ENABLED, _cpu.FAST_PATHS) == (True, True)
        raise RuntimeError
    assert (kernels.ENABLED, _cpu.FAST_PATHS) == before


def test_a_bug_in_the_triton_kernels_fails_the_triton_row_only(tmp_path, monkeypatch) -> None:
    """The Triton kernels CUDA runs, checked on the CPU under Triton's interpreter."""
    if "triton" not in placements.available():
        pytest.skip("triton is not installed: no triton placement")
    from batchproof.impl.kernels import triton_rl_batch

    write_rows = triton_rl_batch.write_rows

    def planted(*args, **kwargs):
        out = write_rows(*args, **kwargs)
        if out["position_ids"].numel():
            out["position_ids"].view(-1)[0] += 1
        return out

    monkeypatch.setattr(triton_rl_batch, "write_rows", planted)
    statuses = _statuses(tmp_path)
    assert statuses.pop("triton") == "fail"
    assert set(statuses.values()) == {"pass"}


# --------------------------------------------------------------------------- the paths that ran
# Each placement stands for compiled kernels and fast paths (a record's `paths`); impl/ counts
# the ones it takes (batchproof.impl._paths) and verify fails a placement whose paths did not run.

NEST = registry.get("nesting.nest_by_mask")


def _never_the_numba_kernel(function):
    """`_one_pass_kernel` whose Numba branch is never taken: equal outputs, a slower op."""
    def planted(device, per_token):
        module = function(device, per_token)
        return None if module is rl_kernel else module
    return planted


def _report(tmp_path, *argv: str) -> tuple[int, dict]:
    path = tmp_path / "report.json"
    code = main([*argv, "--json", str(path)])
    return code, json.loads(path.read_text())


def _paths_rows(report: dict) -> dict[str, dict]:
    return {r["check"]: r for r in report["checks"] if r["check"].startswith("paths:")}


def test_a_kernel_that_silently_stops_running_fails_its_placement(tmp_path, monkeypatch,
                                                                  capsys) -> None:
    """Every equivalence check passes (the torch composition gives the same bytes); the kernel
    placement fails, naming the path, with exit status 1 and a replay line that fails again."""
    if "kernel" not in placements.available():
        pytest.skip("numba is not installed: no kernel placement")
    monkeypatch.setattr(rl_impl, "_one_pass_kernel",
                        _never_the_numba_kernel(rl_impl._one_pass_kernel))
    code, report = _report(tmp_path, "verify", "--op", "rl_batch.build_rl_batch",
                           "--placement", "kernel", "--max-examples", "5", "--seed", "0")
    assert code == 1 and report["exit_status"] == 1
    failed = [r for r in report["checks"] if r["status"] != "pass"]
    assert [r["check"] for r in failed] == ["paths:kernel"]
    (row,) = failed
    assert row["status"] == "fail" and row["placement"] == "kernel"
    assert row["paths"]["numba:rl_batch.write_rows"] == 0
    assert all(row["paths"][p] > 0 for p in row["paths"] if p != "numba:rl_batch.write_rows")
    assert "numba:rl_batch.write_rows, which never ran" in row["error"]
    assert "--placement kernel --check paths:kernel" in row["replay"]
    assert "paths:kernel on kernel (fail)" in capsys.readouterr().out
    replay = row["replay"].split()[1:]  # the line a user copies, less the program name
    code, again = _report(tmp_path, *replay, "--max-examples", "5")
    (rerun,) = again["checks"]
    assert (code, rerun["check"], rerun["status"]) == (1, "paths:kernel", "fail")
    assert rerun["paths"]["numba:rl_batch.write_rows"] == 0 and rerun["examples"] > 0


def test_a_fast_path_that_ignores_the_switch_fails_the_generic_placement(tmp_path,
                                                                         monkeypatch) -> None:
    """The generic placement must run the code CUDA runs: a CPU fast path taken there is
    code the placement may not run."""
    monkeypatch.setattr(rl_impl, "fast_paths", lambda device: device.type == "cpu")
    code, report = _report(tmp_path, "verify", "--op", "rl_batch.build_rl_batch",
                           "--placement", "generic", "--max-examples", "5", "--seed", "0")
    row = _paths_rows(report)["paths:generic"]
    assert code == 1 and row["status"] == "fail"
    assert row["other_paths"]["cpu:rl_batch._write_lists"] > 0
    assert "ran cpu:rl_batch._write_lists" in row["error"]
    assert {r["status"] for r in report["checks"] if r is not row} == {"pass"}


def test_every_placement_runs_the_paths_it_declares(tmp_path) -> None:
    """An unplanted run: each placement's row has a passing `paths:` check whose every
    declared path ran; the generic placement ran none (the faults above fail this)."""
    code, report = _report(tmp_path, "verify", "--op", "nesting.nest_by_mask",
                           "--max-examples", "5", "--seed", "0")
    rows = _paths_rows(report)
    assert code == 0
    assert set(rows) == {f"paths:{p}" for p in placements.available()}
    for check, row in rows.items():
        placement = check.removeprefix("paths:")
        assert row["placement"] == placement and row["status"] == "pass"
        assert set(row["paths"]) == set(placements.declared(NEST, placement))
        assert all(n > 0 for n in row["paths"].values())
    assert rows["paths:generic"]["paths"] == rows["paths:generic"]["other_paths"] == {}
    assert rows["paths:kernel"]["paths"]["cpu:nesting._runs_of"] > 0


def test_paths_are_counted_only_for_a_full_run_of_the_builtin_impl(tmp_path, capsys) -> None:
    _, named = _report(tmp_path, "verify", "--op", "nesting.nest_by_mask", "--check",
                       "equivalence", "--max-examples", "2", "--placement", "cpu")
    assert not _paths_rows(named)  # a subset of the checks may not reach every path
    _, other = _report(tmp_path, "verify", "--impl", "reference", "--op",
                       "nesting.nest_by_mask", "--max-examples", "2")
    assert not _paths_rows(other)
    assert main(["verify", "--op", "trainer.required_multiple", "--check", "paths:kernel"]) == 2
    assert "declare no paths" in capsys.readouterr().err
    assert main(["verify", "--op", "nesting.nest_by_mask", "--check", "paths:cuda"]) == 2
    assert "placement cuda does not run here" in capsys.readouterr().err
    assert main(["verify", "--impl", "reference", "--op", "nesting.nest_by_mask",
                 "--check", "paths:kernel"]) == 2


def test_faults_name_each_missing_and_each_foreign_path() -> None:
    info = registry.get("rl_batch.build_rl_batch")
    declared = placements.declared(info, "cpu")
    assert placements.faults(info, "cpu", Counter(dict.fromkeys(declared, 1))) == []
    missing = Counter(dict.fromkeys(declared[1:], 1))
    (problem,) = placements.faults(info, "cpu", missing)
    assert declared[0] in problem and "never ran" in problem
    foreign = Counter(dict.fromkeys(declared, 1)) + Counter({"numba:rl_batch.write_rows": 3})
    (problem,) = placements.faults(info, "cpu", foreign)
    assert "ran numba:rl_batch.write_rows (3 times)" in problem
    # a record that declares nothing claims nothing
    assert placements.faults(registry.get("trainer.real_rows"), "generic", foreign) == []


def test_the_cuda_placement_stands_for_the_triton_kernels_the_cpu_checks() -> None:
    """On the CPU the triton placement runs the very kernels CUDA compiles: every Triton path a
    record declares for CUDA is one its triton placement declares (and runs, in verify); a
    machine where the Triton kernels do not apply on CUDA drops them from the declaration."""
    declaring = [info for info in registry.all_ops() if info.paths.of("cuda")]
    assert declaring
    for info in declaring:
        kernels_on_cuda = set(info.paths.of("cuda", ("triton",)))
        assert kernels_on_cuda <= set(info.paths.of("triton")), info.name
    info = registry.get("rl_batch.build_rl_batch")
    assert "triton:rl_batch._sequence_rows" in placements.declared(info, "cuda") \
        or not kernels._triton_installed()


def test_without_triton_on_cuda_the_cuda_placement_claims_no_kernel(monkeypatch) -> None:
    info = registry.get("rl_batch.build_rl_batch")
    monkeypatch.setattr(kernels, "TRITON", False)
    assert placements.declared(info, "cuda") == ("cuda:_sync.host_put",)


def test_the_pinned_copy_cuda_runs_is_counted() -> None:
    """build_rl_batch's list rows reach a CUDA device through a pinned copy (the path its cuda
    placement declares besides the kernels). Without a GPU the copy itself fails, after the
    count: the counter sits on the branch CUDA takes."""
    before = placements.ran()
    try:
        rl_impl.build_rl_batch([[1, 2]], [[3]], pad_token_id=0, device="cuda")
    except (RuntimeError, AssertionError):  # no CUDA here (torch raises one or the other)
        assert not torch.cuda.is_available()
    assert placements.since(before)["cuda:_sync.host_put"] >= 1


def _counted_names() -> set[str]:
    """Every path name impl/ counts: the literal `took("...")` calls, and each Triton kernel
    (`kernels.triton_launch` counts those by the kernel's function)."""
    import importlib
    import pathlib
    import re

    from batchproof import impl

    root = pathlib.Path(impl.__file__).parent
    names = {m for path in root.rglob("*.py")
             for m in re.findall(r'took\("([^"]+)"\)', path.read_text())}
    for path in root.glob("kernels/triton_*.py"):
        module = importlib.import_module(f"batchproof.impl.kernels.{path.stem}")
        for value in vars(module).values():
            if isinstance(value, tuple) and len(value) == 2 and hasattr(value[1], "fn"):
                names.add(kernels._triton_path(value[1].fn))
    return names


def test_every_declared_path_is_one_impl_counts() -> None:
    """A misspelled declaration would fail its placement on every run; it fails here first."""
    counted = _counted_names()
    assert {"numba:rl_batch.write_rows", "triton:rl_batch._sequence_rows",
            "cuda:_sync.host_put"} <= counted
    for info in registry.all_ops():
        for placement in registry.PLACEMENT_KINDS:
            unknown = set(info.paths.of(placement)) - counted
            assert not unknown, f"{info.name} {placement}: impl/ counts no {unknown}"
    assert "numba:rl_batch.write_row" not in counted  # (the planted twin: one letter off)


def test_a_path_of_a_kind_its_placement_does_not_run_is_refused() -> None:
    with pytest.raises(ValueError, match="Paths.cpu: 'numba:rl_batch.write_rows'"):
        registry.Paths(cpu=("numba:rl_batch.write_rows",))
    with pytest.raises(ValueError, match="Paths.triton"):
        registry.Paths(triton=("cpu:rl_batch._write_lists",))
    assert not registry.Paths() and registry.Paths(triton=("triton:cp._gather_rows",))


def test_the_paths_check_alone_runs_the_reference_checks_under_its_placement(monkeypatch) -> None:
    """`paths:PLACEMENT` (the zoo's killer, a failure's replay): the pins, equivalence and
    errors under that placement; without Hypothesis' explicit phase (--search-only) no pin."""
    from hypothesis import Phase, settings

    from batchproof import checks

    ran = []

    def fake(info, check, **kwargs):
        ran.append((check, _cpu.FAST_PATHS, kernels.ENABLED))
        return kwargs["stats"]

    monkeypatch.setattr(checks, "run_check", fake)
    with pytest.raises(placements.PathNotTaken, match="stands for cpu:nesting._runs_of"):
        checks.check_paths(NEST, "cpu")  # (the fake ran nothing: no path ran)
    names = [check for check, *_ in ran]
    assert names[-2:] == ["equivalence", "errors"]
    assert set(names[:-2]) == {c for c in NEST.check_names() if c.startswith("pin:")}
    assert {(fast, enabled) for _, fast, enabled in ran} == {(True, False)}  # under `cpu`
    ran.clear()
    searched = settings(phases=[Phase.generate])
    with pytest.raises(placements.PathNotTaken):
        checks.check_paths(NEST, "cpu", settings=searched)
    assert [check for check, *_ in ran] == ["equivalence", "errors"]
    with pytest.raises(ValueError, match="paths:cuda cannot run on device 'cpu'"):
        checks.check_paths(NEST, "cuda")


def test_a_cuda_row_fails_on_the_kernels_it_stands_for(monkeypatch) -> None:
    """`verify --device cuda` (one placement, the device's) judges its row like a CPU row: the
    Triton kernels and the pinned copy build_rl_batch declares for CUDA, from the counts of its
    checks; the replay names the device, not a CPU placement. (Only the row's verdict is made
    here: the checks themselves need a GPU.)"""
    import argparse

    from batchproof.cli import verify

    monkeypatch.setattr(kernels, "_triton_installed", lambda: True)  # as on a GPU machine
    args = argparse.Namespace(impl="impl", device="cuda", profile="ci")
    info = registry.get("rl_batch.build_rl_batch")
    group = [verify.CheckResult("rl_batch", "build_rl_batch", "equivalence", "pass", 40, 1.0,
                                "cuda", placement="cuda")]
    counted = Counter({"triton:rl_batch._sequence_rows": 40, "cpu:rl_batch._write_lists": 3})
    row = verify._paths_result(args, info, "cuda", group, counted)
    assert (row.check, row.placement, row.status) == ("paths:cuda", "cuda", "fail")
    assert row.paths == {"triton:rl_batch._sequence_rows": 40,
                         "triton:rl_batch._response_rows": 0, "cuda:_sync.host_put": 0}
    assert row.other_paths == {"cpu:rl_batch._write_lists": 3}  # allowed on CUDA: host data
    assert "_response_rows, which never ran" in row.error and "host_put" in row.error
    assert "--device cuda" in row.replay and "--check paths:cuda" in row.replay
    assert "--placement" not in row.replay
    counted.update({"triton:rl_batch._response_rows": 40, "cuda:_sync.host_put": 40})
    assert verify._paths_result(args, info, "cuda", group, counted).status == "pass"


def test_a_paths_check_named_alone_runs_on_its_placement_only(tmp_path) -> None:
    """`--check paths:cpu` of a record with one code path (ffd_bins never asks where it runs):
    nothing runs on the first placement, which then says nothing about the others; the check
    runs on `cpu`, and only there."""
    code, report = _report(tmp_path, "verify", "--op", "sft.ffd_bins", "--check", "paths:cpu",
                           "--max-examples", "3")
    (row,) = report["checks"]
    assert (code, row["check"], row["placement"], row["status"]) == (0, "paths:cpu", "cpu",
                                                                     "pass")
    assert row["examples"] > 0 and row["other_paths"] == {}  # (no numba with kernels off)

"""`batchproof verify` checks every code path of impl/ that this machine can run — the compiled
kernels, the CPU fast paths, the device-generic code CUDA runs — as separate rows: a bug planted
in one path fails that placement's row and no other."""

from __future__ import annotations

import json

import pytest
import torch

from batchproof import placements
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

"""`batchproof bench`: the ratio table and a quick end-to-end run (no timing is asserted)."""

from __future__ import annotations

import json

import pytest
import torch

from batchproof import placements
from batchproof.perf import bench


def test_ratios_against_the_floor_of_each_input_form_and_the_baseline() -> None:
    best = {"reference": 10.0, "impl (lists)": 0.5, "floor (lists)": 1.0, "impl (jagged)": 0.3,
            "floor (output write)": 0.1, "numpy rows (lists)": 1.0, "numpy rows (jagged)": 0.9,
            "impl (tensors)": 0.2}
    text = bench.ratios(best)
    assert text["floor (lists)"] == text["floor (output write)"] == "1.00x (floor)"
    assert text["reference"] == "10.00x floor (lists); impl (lists) is 20x faster"
    assert text["impl (lists)"] == "0.50x floor (lists); 2.00x faster than numpy rows (lists)"
    assert text["impl (jagged)"] == "3.00x floor (output write); 33% of the write bandwidth; " \
                                    "3.00x faster than numpy rows (jagged)"
    assert text["impl (tensors)"] == "2.00x floor (output write); 50% of the write bandwidth"


def test_ops_with_their_own_floors() -> None:
    text = bench.ratios({"impl": 2.0, "floor (copy)": 1.0})
    assert text == {"impl": "2.00x floor (copy)", "floor (copy)": "1.00x (floor)"}


def test_quick_run_writes_every_variant(tmp_path) -> None:
    path = tmp_path / "bench.json"
    assert bench.main(ops=["rl_batch", "sft.pack_sft"], quick=True, json_path=str(path),
                      pages="system") == 0  # leave this process's allocator alone
    report = json.loads(path.read_text())
    assert set(report) == {"rl_batch", "sft.pack_sft"}
    assert {"reference", "impl (lists)", "floor (lists)", "impl (jagged)",
            "floor (output write)", "numpy rows (lists)", "numpy rows (jagged)"} \
        <= set(report["rl_batch"]["seconds"])
    assert all(seconds > 0 for seconds in report["rl_batch"]["seconds"].values())
    assert report["rl_batch"]["pages"] == "system"


TRAINER_SCALE = {"rl_batch": "impl (jagged)", "varlen": "impl (jagged)",
                 "nesting": "impl (dense)", "nesting.unnest_by_mask": "impl (jagged)",
                 "sft.pack_sft": "impl (jagged)", "cp.shard": "impl (tensors)"}


def test_trainer_scale_from_device_tensors(tmp_path) -> None:
    """`--scale h100` (here `--quick`, on the CPU): every op with a Triton kernel, inputs made
    on the device, the impl against the write floor, and the floor's bandwidth in the report."""
    path = tmp_path / "bench.json"
    assert bench.main(quick=True, json_path=str(path), pages="system", scale="h100") == 0
    report = json.loads(path.read_text())
    assert set(report) == set(bench.DEVICE_WORKLOADS) == set(TRAINER_SCALE)
    for name, impl in TRAINER_SCALE.items():
        assert set(report[name]["seconds"]) == {impl, "floor (output write)"}, name
        assert all(seconds > 0 for seconds in report[name]["seconds"].values()), name
        assert report[name]["write_bandwidth_gbps"] > 0, name
    path.unlink()
    assert bench.main(ops=["nesting"], quick=True, json_path=str(path), pages="system",
                      scale="h100") == 0  # an op selects all of its workloads
    assert set(json.loads(path.read_text())) == {"nesting", "nesting.unnest_by_mask"}
    assert bench.main(ops=["sft.collate_sft"], scale="h100") == 2  # no trainer-scale workload


def _output_bytes(value) -> int:
    """Bytes of the distinct tensors an op returned (a jagged field's values and offsets, tensors
    held as non-tensor entries too)."""
    tensors = []
    for key in value.keys():
        part = value.get_non_tensor(key) if value.is_non_tensor(key) else value.get(key)
        if isinstance(part, torch.Tensor):
            tensors += [part.values(), part.offsets()] if part.is_nested else [part]
    distinct = {t.untyped_storage().data_ptr(): t for t in tensors}
    return sum(t.numel() * t.element_size() for t in distinct.values())


@pytest.mark.parametrize("name", list(TRAINER_SCALE))
def test_trainer_scale_workloads_are_the_op(name: str) -> None:
    """At the quick size: the impl variant returns the reference's output on the workload's
    inputs on every placement this machine has (the Triton kernels CUDA runs, interpreted; the
    torch path `bench` times beside them), and the floor writes as many bytes as it returns."""
    size = bench.QUICK_DEVICE_SIZES.get(name, bench.QUICK_DEVICE_SIZE)
    if name == "sft.pack_sft":  # one row of 10K columns takes Triton's interpreter 30 s
        size = {"batch": 16, "length_max": 128}
    workload = bench.DEVICE_WORKLOADS[name](device="cpu", **size)
    assert workload.check is not None
    for placement in placements.available():
        with placements.placed(placement):
            workload.check()
    assert _output_bytes(workload.variants[TRAINER_SCALE[name]]()) == workload.output_bytes
    floor = workload.variants["floor (output write)"]()
    assert sum(t.numel() * t.element_size() for t in floor) == workload.output_bytes


def test_unknown_workload_is_an_error() -> None:
    assert bench.main(ops=["no_such_op"]) == 2


# --------------------------------------------------------------------------- per core, busy host


def test_threads_are_set_while_open_and_restored() -> None:
    before = torch.get_num_threads()
    with bench.threads(1) as count:
        assert count == torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with bench.threads(None) as count:
        assert count == before


def test_busy_neighbours_spin_while_open_and_are_gone_after() -> None:
    import os

    with bench.busy_neighbours(True) as count:
        assert count == max(1, (os.cpu_count() or 2) - 1)
        children = [p for p in _children() if "getppid() == parent" in p]
        assert len(children) == count, children
    assert not [p for p in _children() if "getppid() == parent" in p]
    with bench.busy_neighbours(False) as count:
        assert count == 0


def _children() -> list[str]:
    """The command lines of this process's children."""
    import os
    from pathlib import Path

    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = next((line.split()[1] for line in status.splitlines()
                     if line.startswith("PPid:")), "")
        if ppid == str(os.getpid()):
            found.append(cmdline)
    return found


def _stand_in_peer(framework: str, target: str):
    from batchproof.adapters import Adapter

    return Adapter(name=f"{framework}.rl_batch", framework=framework,
                   record="rl_batch.build_rl_batch", target=target, wrap=lambda fn: fn,
                   distribution="torch", forms=None)


def shifted_rl_batch(prompts, responses, **kwargs):
    """build_rl_batch with position ids off by one: not the impl's output."""
    from batchproof.impl import rl_batch

    batch = rl_batch.build_rl_batch(prompts, responses, **kwargs)
    batch["position_ids"] = batch["position_ids"] + 1
    return batch


def test_a_peer_is_timed_only_where_it_returns_the_impls_output(monkeypatch) -> None:
    """A framework's function (an installed adapter's candidate) is a peer on a workload only
    where its output is the impl's, bit for bit; otherwise it is named, with why, and not
    timed."""
    from batchproof import adapters
    from batchproof.perf import peers, workloads

    same = _stand_in_peer("same", "batchproof.impl.rl_batch:build_rl_batch")
    other = _stand_in_peer("other", f"{__name__}:shifted_rl_batch")
    monkeypatch.setattr(adapters, "all_adapters", lambda: [same, other])
    workload = workloads.rl_batch_workload(batch=16)
    record, case = workload.lists_call
    found = peers.peers_for(record, case, workload.variants["impl (lists)"]())
    assert [p.name for p in found] == [f"same.rl_batch {torch.__version__} (lists)",
                                       f"other.rl_batch {torch.__version__} (lists)"]
    assert found[0].run is not None and found[0].why == ""
    assert found[1].run is None and "not the impl's output" in found[1].why
    assert "position_ids" in found[1].why
    found[0].run()  # what bench times: the candidate on the workload's call


def test_per_core_runs_every_variant_but_the_reference_in_four_conditions(tmp_path) -> None:
    path = tmp_path / "per_core.json"
    assert bench.main(ops=["rl_batch"], quick=True, json_path=str(path), pages="system",
                      per_core_mode=True) == 0
    report = json.loads(path.read_text())
    (entry,) = report.values()
    conditions = entry["conditions"]
    assert len(conditions) == 4 and [c["spinning"] > 0 for c in conditions.values()] == [
        False, False, True, True]
    assert [c["threads"] == 1 for c in conditions.values()][1::2] == [True, True]
    for condition in conditions.values():
        assert {"impl (lists)", "floor (lists)", "numpy rows (lists)", "impl (jagged)",
                "floor (output write)"} <= set(condition["seconds"])
        assert "reference" not in condition["seconds"]


@pytest.mark.parametrize("kwargs, message", [
    ({"per_core_mode": True, "device": "cuda"}, "--per-core"),
    ({"per_core_mode": True, "scale": "h100"}, "--per-core"),
    ({"batches": [0]}, "--batch must be at least 1"),
    ({"batches": [64], "quick": True}, "--batch sizes"),
])
def test_per_core_and_batch_refuse_what_they_do_not_measure(kwargs, message, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ValueError, match=message):
        bench.main(ops=["rl_batch"], pages="system", **kwargs)


def test_a_spinner_stops_when_its_parent_is_gone() -> None:
    """A bench killed outright (SIGKILL: no `finally`) leaves no spinner behind."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    parent = subprocess.Popen([sys.executable, "-c", (
        "import time\n"
        "from batchproof.perf import bench\n"
        "with bench.busy_neighbours(True):\n"
        "    time.sleep(600)\n")])
    deadline = time.time() + 180  # a fresh process imports torch: minutes on a loaded machine
    spinners = []
    while time.time() < deadline and not spinners:
        time.sleep(0.2)
        spinners = [int(p.name) for p in Path("/proc").iterdir()
                    if p.name.isdigit() and _parent_of(p) == parent.pid]
    assert spinners, "no spinner started"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 60
    while time.time() < deadline and any(_alive(pid) for pid in spinners):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in spinners), spinners


def _parent_of(proc) -> int | None:
    try:
        for line in (proc / "status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its new parent to reap it."""
    from pathlib import Path

    try:
        state = next(line for line in (Path("/proc") / str(pid) / "status").read_text()
                     .splitlines() if line.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return " Z " not in state + " " and "zombie" not in state


# --------------------------------------------------------------------------- a user's processes


def test_timings_are_medians_over_processes_with_their_spread() -> None:
    """Each process's median; the median of those; the spread is the fastest and the slowest
    process (in one process: its fastest and slowest round). A variant timed in the first
    process only (the reference) is over that one."""
    timed = bench.timings([{"impl": [1.0, 5.0, 2.0], "reference": [9.0]},
                           {"impl": [4.0, 3.0, 3.0]},
                           {"impl": [7.0, 8.0, 6.0]}])
    assert timed["impl"].per_process == [2.0, 3.0, 7.0]
    assert (timed["impl"].median, timed["impl"].low, timed["impl"].high) == (3.0, 2.0, 7.0)
    assert timed["reference"].per_process == [9.0] and timed["reference"].median == 9.0
    alone = bench.timings([{"impl": [1.0, 5.0, 2.0]}])["impl"]
    assert (alone.median, alone.low, alone.high) == (2.0, 1.0, 5.0)


def test_a_peers_ratio_is_taken_in_each_process() -> None:
    """What a user's process sees: the peer against the impl in the same process, never the
    median of one against the median of the other."""
    ratios = bench.lists_ratios([
        {"impl (lists)": [1.0, 1.0, 1.0], "peer (lists)": [2.0, 2.0, 2.0], "impl (jagged)": [9.0]},
        {"impl (lists)": [2.0, 2.0, 2.0], "peer (lists)": [2.0, 3.0, 2.0]}])
    assert ratios == {"peer (lists)": [2.0, 1.0]}


def test_the_input_forms_are_held_against_the_fastest() -> None:
    line = bench.forms_line({"impl (lists)": 2.0, "impl (jagged)": 1.0, "floor (lists)": 0.5,
                             "impl torch path (jagged)": 0.1, "impl (tensors)": 45.0})
    assert line == ("input forms against the fastest: (jagged) 1.00x, (lists) 2.00x, "
                    "(tensors) 45.00x")
    assert bench.forms_line({"impl": 1.0, "floor (copy)": 0.5}) is None


def test_each_process_is_fresh_and_reports_its_own_rounds(tmp_path) -> None:
    """`processes=2`: two new processes, each its own median; the reference in the first
    only; the JSON keeps every process's median."""
    path = tmp_path / "bench.json"
    assert bench.main(ops=["rl_batch"], quick=True, processes=2, json_path=str(path)) == 0
    entry = json.loads(path.read_text())["rl_batch"]
    assert entry["processes"] == 2 and entry["pages"] == "system"
    assert len(entry["per_process"]["impl (lists)"]) == 2
    assert len(entry["per_process"]["reference"]) == 1
    low, high = entry["spread"]["impl (lists)"]
    assert low <= entry["seconds"]["impl (lists)"] <= high


def test_a_measuring_process_that_fails_is_batchproofs_error(capsys) -> None:
    spec = bench._spec("no_such_workload", {}, "cpu", 1, True, "default", "system")
    with pytest.raises(RuntimeError, match="measuring process 1 of 1 for no_such_workload "
                                           "exited with 1: .*KeyError"):
        bench.measure_in_fresh_processes(spec, 1)


def test_one_condition_per_core(tmp_path) -> None:
    path = tmp_path / "per_core.json"
    assert bench.main(ops=["rl_batch"], quick=True, json_path=str(path), per_core_mode=True,
                      conditions=["quiet-1"]) == 0
    (entry,) = json.loads(path.read_text()).values()
    (condition,) = entry["conditions"].values()
    assert condition["condition"] == "quiet-1" and condition["threads"] == 1
    assert condition["spinning"] == 0 and entry["processes"] == 1 and entry["clock"] == "wall"


def test_the_cpu_clock_counts_what_the_process_spent(monkeypatch) -> None:
    """`clock="cpu"`: the samples are CPU time (a variant that sleeps costs none of it)."""
    import time

    from batchproof.perf import workloads

    workload = workloads.Workload("op", "f", "tiny", {"sleeps": lambda: time.sleep(0.05)}, 0, 0)
    wall = bench.time_variants(workload, 2, "cpu")["sleeps"]
    cpu = bench.time_variants(workload, 2, "cpu", clock="cpu")["sleeps"]
    assert min(wall) >= 0.05 and max(cpu) < 0.02


@pytest.mark.parametrize("kwargs, message", [
    ({"processes": 0}, "--processes must be at least 1"),
    ({"conditions": ["quiet"]}, "--condition chooses the conditions of --per-core"),
    ({"conditions": ["loud"], "per_core_mode": True}, r"--condition must be one of"),
    ({"clock": "sundial"}, r"--clock must be one of \['wall', 'cpu'\]"),
    ({"clock": "cpu", "device": "cuda"}, "--clock cpu counts the host's CPU time"),
])
def test_processes_and_conditions_are_validated(kwargs, message, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ValueError, match=message):
        bench.main(ops=["rl_batch"], **kwargs)

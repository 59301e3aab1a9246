"""`harness bench`: the ratio table and a quick end-to-end run (no timing is asserted)."""

from __future__ import annotations

import json

from batchproof import bench


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


def test_trainer_scale_from_device_tensors(tmp_path) -> None:
    """`--scale h100` (here `--quick`, on the CPU): jagged inputs made on the device, the impl
    against the write floor, and the floor's bandwidth in the report."""
    path = tmp_path / "bench.json"
    assert bench.main(quick=True, json_path=str(path), pages="system", scale="h100") == 0
    report = json.loads(path.read_text())
    assert set(report) == {"rl_batch", "varlen"}
    assert set(report["rl_batch"]["seconds"]) == {"impl (jagged)", "floor (output write)"}
    assert report["varlen"]["write_bandwidth_gbps"] > 0
    assert bench.main(ops=["sft.pack_sft"], scale="h100") == 2  # no trainer-scale workload


def test_unknown_workload_is_an_error() -> None:
    assert bench.main(ops=["no_such_op"]) == 2

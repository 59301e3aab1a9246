"""impl/'s device paths read the device only through `impl._sync` (issue 19).

On the CPU, `batchproof.perf.host_reads`' model of CUDA's sync points surveys the code CUDA runs (the
`generic` placement, and the Triton kernels interpreted); on CUDA (`gpu` marker) the same
checks run under `torch.cuda.set_sync_debug_mode("error")`. The records that still read
elsewhere are listed, each with what it reads: the test fails when one of them stops reading
(take it off the list) as much as when another starts.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from batchproof import placements, registry
from batchproof.impl import _sync, trainer
from batchproof.perf import host_reads
from batchproof.reference import trainer as trainer_reference

# records that still read outside impl._sync, each with what it reads (none since issue 19)
STILL_READING: dict[str, str] = {}
# its inputs are rollouts on the host by contract (lists): no call is device-resident; the ops
# it chains are surveyed under their own records
NOT_SURVEYED = {"pipeline.rl_step"}
CUDA_RECORDS = [info.name for info in registry.all_ops()
                if "cuda" in info.devices and info.name not in NOT_SURVEYED]
CPU_PLACEMENTS = [name for name in ("generic", "triton") if name in placements.available()]
HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def test_the_lists_name_records() -> None:
    assert set(STILL_READING) <= set(CUDA_RECORDS)
    assert NOT_SURVEYED <= {info.name for info in registry.all_ops()}


@pytest.mark.parametrize("placement", CPU_PLACEMENTS)
@pytest.mark.parametrize("record", CUDA_RECORDS)
def test_device_paths_read_only_where_documented(record: str, placement: str) -> None:
    found = host_reads.survey(registry.get(record), placement=placement, max_examples=25)
    assert found.surveyed > 0, f"{record}: no call had device-resident inputs (nothing surveyed)"
    if record in STILL_READING:
        assert found.undocumented, (
            f"{record} no longer reads outside impl._sync: take it off STILL_READING")
    else:
        assert not found.undocumented, f"{record} reads the device here:\n" + \
            "\n".join(found.lines())


@pytest.mark.gpu
@pytest.mark.parametrize("record", [r for r in CUDA_RECORDS if r not in STILL_READING])
def test_cuda_paths_sync_only_where_documented(record: str) -> None:
    """The issue's test: every check on CUDA with each device-resident call under
    `set_sync_debug_mode("error")` (the documented reads switch it off for their transfer)."""
    found = host_reads.survey(registry.get(record), device="cuda", sync_mode="error",
                              max_examples=25)
    assert found.surveyed > 0
    assert not found.undocumented


# ------------------------------------------------------------------------------ the model itself


@pytest.fixture
def here(monkeypatch):
    """Reads made in this file count (as reads made in impl/ do)."""
    monkeypatch.setattr(host_reads, "ROOTS", host_reads.ROOTS + (HERE,))


def _reads(body) -> list[str]:
    found = host_reads.Survey()
    with host_reads.recording(found, "cpu"):
        body()
    return sorted(read.what for read in found.undocumented)


ON_DEVICE = torch.arange(6)  # an input: device memory, in a CPU survey
NESTED = torch.nested.nested_tensor_from_jagged(torch.arange(5), offsets=torch.tensor([0, 2, 5]))

READS = {
    "int of a tensor": (lambda: int(ON_DEVICE.sum()), "reads a scalar"),
    "bool of a tensor": (lambda: bool(ON_DEVICE.any()), "reads a scalar"),
    "tolist": (lambda: ON_DEVICE.tolist(), "tolist"),
    "nonzero": (lambda: ON_DEVICE.nonzero(), "nonzero"),
    "boolean mask": (lambda: ON_DEVICE[ON_DEVICE > 2], "boolean-mask indexing"),
    "torch.equal": (lambda: torch.equal(ON_DEVICE, ON_DEVICE), "torch.equal"),
    "unique": (lambda: torch.unique(ON_DEVICE), "unique"),
    "repeat_interleave": (lambda: torch.repeat_interleave(ON_DEVICE, ON_DEVICE),
                          "repeat_interleave without output_size"),
    "copy to the host": (lambda: ON_DEVICE.cpu(), "copy to the host"),
    "tensor from host data": (lambda: torch.tensor([0, 1], device=ON_DEVICE.device),
                              "host data copied to the device"),
    "host tensor moved": (lambda: torch.arange(3).to(ON_DEVICE.device),
                          "host tensor copied to the device"),
    "host tensor in a device op": (lambda: ON_DEVICE[:3] + torch.arange(3),
                                   "host tensor used in a device op"),
    # no torch function mode sees these two factories (torch.overrides ignores them)
    "from_numpy moved": (lambda: torch.from_numpy(np.arange(3)).to(ON_DEVICE.device),
                         "host tensor copied to the device"),
    "frombuffer in a device op": (lambda: ON_DEVICE[:2] + torch.frombuffer(
        bytearray(16), dtype=torch.int64), "host tensor used in a device op"),
    "nested rows": (lambda: NESTED.unbind(), "rows of a nested tensor"),
}


@pytest.mark.parametrize("name", READS)
def test_the_model_sees_each_kind_of_read(here, name: str) -> None:
    body, what = READS[name]
    reads = _reads(body)
    assert reads and all(read.startswith(what) for read in reads), reads


NOT_READS = {
    "a documented read": lambda: _sync.host_read(ON_DEVICE.max()),
    "a documented copy in": lambda: _sync.host_put([1, 2], dtype=torch.int64, device="cpu"),
    "host memory read on the host": lambda: torch.arange(3).tolist(),
    "NumPy memory read on the host": lambda: torch.from_numpy(np.arange(3)).tolist(),
    "host memory computed on the host": lambda: int((torch.arange(3) * 2).sum()),
    "a host scalar in a device op": lambda: ON_DEVICE + torch.tensor(2),
    "a factory on the device": lambda: torch.full((3,), 7, device=ON_DEVICE.device),
    "a masked scatter": lambda: torch.zeros(6, device=ON_DEVICE.device).masked_scatter_(
        ON_DEVICE > 2, torch.ones(6, device=ON_DEVICE.device)),
    "a static nonzero": lambda: torch.nonzero_static(ON_DEVICE, size=5),
    "verdicts that pass": lambda: _passing_verdicts(),
    "the caller's code": lambda: _callers_forward(),
}


def _passing_verdicts():
    with _sync.Verdicts() as verdicts:
        verdicts.add(ON_DEVICE.sum() < 0, lambda: ValueError("never"))
        return verdicts.settle(also=ON_DEVICE.max())


def _callers_forward():
    with _sync.callers_code():
        return int(ON_DEVICE.sum())


@pytest.mark.parametrize("name", NOT_READS)
def test_the_model_passes_what_does_not_read(here, name: str) -> None:
    assert _reads(NOT_READS[name]) == []


def test_verdicts_are_read_at_once() -> None:
    before = _sync.READS
    with _sync.Verdicts() as verdicts:
        for _ in range(3):
            verdicts.add(torch.tensor(False), lambda: ValueError("never"))
    assert _sync.READS - before == 1


def test_verdicts_bring_values_along_in_the_same_read() -> None:
    before = _sync.READS
    with _sync.Verdicts() as verdicts:
        verdicts.add(torch.tensor(False), lambda: ValueError("never"))
        assert verdicts.settle(also=torch.tensor([7, 3])) == [7, 3]
    assert _sync.READS - before == 1
    with pytest.raises(ValueError, match="bad"), _sync.Verdicts() as verdicts:
        verdicts.add(torch.tensor(True), lambda: ValueError("bad"))
        verdicts.settle(also=torch.tensor([7]))


def test_verdicts_raise_the_first_bad_one() -> None:
    with pytest.raises(ValueError, match="second"):
        with _sync.Verdicts() as verdicts:
            verdicts.add(torch.tensor(False), lambda: ValueError("first"))
            verdicts.add(torch.tensor(True), lambda: ValueError("second"))
            verdicts.add(torch.tensor(True), lambda: ValueError("third"))


def test_a_host_check_waits_for_the_verdicts_before_it() -> None:
    with pytest.raises(ValueError, match="queued first"):
        with _sync.Verdicts() as verdicts:
            verdicts.add(torch.tensor(True), lambda: ValueError("queued first"))
            raise TypeError("a host check after it")


def test_a_planted_read_fails_a_clean_record(here, monkeypatch) -> None:
    """What test_device_paths_read_only_where_documented would see: real_rows is clean until
    its field check reads the device."""
    info = registry.get("trainer.real_rows")
    assert not host_reads.survey(info, max_examples=15).undocumented

    def check_fields_and_read(td):
        trainer_reference._check_fields(td)
        int(td.get("is_padding").sum())  # the planted read

    monkeypatch.setattr(trainer, "_check_fields", check_fields_and_read)
    found = host_reads.survey(info, max_examples=15)
    assert [read.function for read in found.undocumented] == ["check_fields_and_read"]


def test_a_planted_copy_fails_a_clean_record(monkeypatch) -> None:
    """rl_batch's constants made with torch.tensor(..., device=) (what it did before issue 19's
    survey) are copies from the host."""
    from batchproof.impl import rl_batch

    monkeypatch.setattr(rl_batch, "_pair", lambda low, high, dtype, device: torch.tensor(
        [low, high], dtype=dtype, device=device))
    found = host_reads.survey(registry.get("rl_batch.build_rl_batch"), max_examples=15)
    assert {read.what for read in found.undocumented} == {"host data copied to the device"}

"""Generic tests instantiated from the registry: every check of every record, on `impl/`.

The reference must satisfy every property and pin too (a property the oracle fails is a spec bug),
and every record's `cuda` variant runs under the `gpu` marker.
"""

from __future__ import annotations

import copy

import hypothesis
import pytest

from batchproof import placements, registry
from batchproof.checks import check_equivalence, run_check
from batchproof.impl import kernels
from batchproof.registry import Case

RECORDS = registry.all_ops()
IMPL_CHECKS = [(info.name, check) for info in RECORDS for check in info.check_names()]
REFERENCE_CHECKS = [(name, check) for name, check in IMPL_CHECKS
                    if check.startswith(("property:", "pin:"))]
GPU_CHECKS = [(info.name, check) for info in RECORDS if "cuda" in info.devices
              for check in info.check_names() if not check.startswith("property:")]


# the records with a Triton kernel (impl/kernels/triton_*.py)
TRITON_RECORDS = ("rl_batch.build_rl_batch", "varlen.pack_varlen", "nesting.nest_by_mask",
                  "nesting.unnest_by_mask", "sft.pack_sft", "cp.shard", "cp.shard_bshd",
                  "cp.unshard")
TRITON_CHECKS = [(name, check) for name, check in IMPL_CHECKS if name in TRITON_RECORDS]


def _id(pair: tuple[str, str]) -> str:
    return f"{pair[0]}-{pair[1]}"


@pytest.mark.parametrize("record, check", IMPL_CHECKS, ids=map(_id, IMPL_CHECKS))
def test_impl(record: str, check: str) -> None:
    run_check(registry.get(record), check)


@pytest.mark.parametrize("record, check", TRITON_CHECKS, ids=map(_id, TRITON_CHECKS))
def test_impl_with_the_triton_kernels_interpreted(record: str, check: str) -> None:
    """The Triton kernels CUDA runs, checked on the CPU under Triton's interpreter: every check
    of each record that has one (the `triton` placement of `batchproof verify`), at most 20
    examples each (the interpreter takes tens of milliseconds per call)."""
    if "triton" not in placements.available():
        pytest.skip("triton is not installed: pip install 'batchproof[triton]'")
    current = hypothesis.settings()
    with placements.placed("triton"):
        run_check(registry.get(record), check,
                  settings=hypothesis.settings(current, max_examples=min(current.max_examples,
                                                                          20)))


FLAT_CHECKS = [("rl_batch.build_rl_batch", check) for check in
               registry.get("rl_batch.build_rl_batch").check_names()
               if not check.startswith("property:")]


@pytest.mark.parametrize("record, check", FLAT_CHECKS, ids=map(_id, FLAT_CHECKS))
def test_rl_batch_flat_sequence_kernel_interpreted(record: str, check: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """build_rl_batch's opt-in flat sequence kernel (`kernels.TRITON_FLAT_ROWS`: aligned chunks
    of the flat output, the tail chunk masked), under Triton's interpreter: equivalence, errors
    and every pin, at most 20 examples each."""
    if "triton" not in placements.available():
        pytest.skip("triton is not installed: pip install 'batchproof[triton]'")
    monkeypatch.setattr(kernels, "TRITON_FLAT_ROWS", True)
    current = hypothesis.settings()
    with placements.placed("triton"):
        run_check(registry.get(record), check,
                  settings=hypothesis.settings(current, max_examples=min(current.max_examples,
                                                                          20)))


# each CPU placement a record declares paths for, and `generic` (which must run none)
PATH_PLACEMENTS = [(info.name, placement) for info in RECORDS if info.paths
                   for placement in ("kernel", "cpu", "generic", "triton")
                   if info.paths.of(placement) or placement == "generic"]


@pytest.mark.parametrize("record, placement", PATH_PLACEMENTS, ids=map(_id, PATH_PLACEMENTS))
def test_the_pins_alone_take_the_paths_each_placement_declares(record: str,
                                                               placement: str) -> None:
    """Under the placement, the record's pinned valid inputs alone (each in every input form)
    run every kernel and fast path it declares, and none it may not run: the `paths:` verdict
    of `verify` (whose every run includes the pins) never depends on the draw."""
    if placement not in placements.available():
        pytest.skip(f"placement {placement} is not available here")
    info = registry.get(record)
    before = placements.ran()
    with placements.placed(placement):
        for pin in info.pins:
            if isinstance(pin.case, Case):
                check_equivalence(info, copy.deepcopy(pin.case), info.impl)
    assert placements.faults(info, placement, placements.since(before)) == []


@pytest.mark.parametrize("record, check", REFERENCE_CHECKS, ids=map(_id, REFERENCE_CHECKS))
def test_reference_satisfies(record: str, check: str) -> None:
    info = registry.get(record)
    run_check(info, check, candidate=info.reference)


@pytest.mark.gpu
@pytest.mark.parametrize("record, check", GPU_CHECKS, ids=map(_id, GPU_CHECKS))
def test_impl_on_cuda(record: str, check: str) -> None:
    run_check(registry.get(record), check, device="cuda")


CUDA_PATHS = [(info.name, "paths:cuda") for info in RECORDS
              if "cuda" in info.devices and info.paths.of("cuda")]


@pytest.mark.gpu
@pytest.mark.parametrize("record, check", CUDA_PATHS, ids=map(_id, CUDA_PATHS))
def test_impl_takes_the_paths_cuda_declares(record: str, check: str) -> None:
    """The Triton kernels (and the pinned copies) the `cuda` placement stands for ran."""
    run_check(registry.get(record), check, device="cuda")


def test_every_record_is_complete() -> None:
    """Each record has properties, and each op has at least one pin per historical bug list."""
    for info in RECORDS:
        assert info.properties, f"{info.name} declares no property"
        assert info.reference is not None and info.impl is not None
        names = [p.name for p in info.properties] + [p.name for p in info.pins]
        assert len(names) == len(set(names)), f"{info.name}: duplicate property/pin names"

"""The host side of every device path is independent of the batch size (issue 30): the device
ops an op launches (counted on the CPU with a dispatch mode, on the `generic` placement, which
runs the device path's torch code) and the host reads it makes (`impl._sync`'s counter) are the
same at B = 64 and B = 8192 for each CUDA record's bench workload — no per-sample launch and no
per-row read on the device path. (Triton kernels are launches of their own, counted by
`tests/test_triton_blocks.py`'s grids; this counts the torch ops around them.)"""

from __future__ import annotations

import pytest
from torch.utils._python_dispatch import TorchDispatchMode

from batchproof import placements
from batchproof.impl import _sync
from batchproof.perf import workloads

SMALL = {"prompt_max": 8, "response_max": 8}
# record -> (workload, its impl variant, sizes that keep B = 8192 small on the CPU)
WORKLOADS = {
    "rl_batch.build_rl_batch": (workloads.rl_batch_device_workload, "impl (jagged)", SMALL),
    "varlen.pack_varlen": (workloads.pack_varlen_device_workload, "impl (jagged)", SMALL),
    "nesting.nest_by_mask": (workloads.nest_device_workload, "impl (dense)", SMALL),
    "nesting.unnest_by_mask": (workloads.unnest_device_workload, "impl (jagged)", SMALL),
    "sft.pack_sft": (workloads.pack_sft_device_workload, "impl (jagged)",
                     {"length_min": 1, "length_max": 16}),
    "cp.shard": (workloads.cp_shard_device_workload, "impl (tensors)", SMALL),
}


class _Ops(TorchDispatchMode):
    """Counts the aten ops dispatched inside it (what a CUDA stream would launch)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def launches_and_reads(record: str, batch: int) -> tuple[int, int]:
    make, variant, sizes = WORKLOADS[record]
    call = make(batch=batch, device="cpu", **sizes).variants[variant]
    with placements.placed("generic"):
        call()  # first call: caches, lazy imports
        before = _sync.READS
        with _Ops() as ops:
            call()
        return ops.count, _sync.READS - before


@pytest.mark.parametrize("record", sorted(WORKLOADS))
def test_launches_and_reads_do_not_grow_with_the_batch(record: str) -> None:
    small, large = launches_and_reads(record, 64), launches_and_reads(record, 8192)
    assert small == large, f"{record}: (device ops, host reads) {small} at B=64, {large} at 8192"
    assert small[0] > 0 and small[1] >= 1  # it ran on the device path and read its widths


def test_a_per_row_read_is_found() -> None:
    """A device path that reads once per row (planted) fails the comparison."""
    from batchproof.impl import rl_batch

    original = rl_batch.build_rl_batch

    def per_row(prompts, responses, **kwargs):
        for row in range(len(prompts.offsets()) - 1):
            _sync.host_read(prompts.offsets()[row:row + 1])
        return original(prompts, responses, **kwargs)

    rl_batch.build_rl_batch = per_row
    try:
        small, large = (launches_and_reads("rl_batch.build_rl_batch", b) for b in (64, 8192))
    finally:
        rl_batch.build_rl_batch = original
    assert small[1] + 8192 - 64 == large[1] and small != large

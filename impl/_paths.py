"""Which compiled kernels and fast paths of `impl/` ran: one count per path, by name.

Each kernel and each placement-dependent fast path calls `took(NAME)` where it starts its work
(after its own bail-outs: a fast path that declines an input and hands it to the general code
has not run). A name is `KIND:MODULE.FUNCTION`, the kind one of

    numba    a compiled CPU kernel (impl/kernels/<op>.py)       numba:rl_batch.write_rows
    cpu      a CPU fast path (struct packing, row copies)        cpu:rl_batch._write_lists
    triton   a Triton kernel (impl/kernels/triton_<op>.py),      triton:rl_batch._sequence_rows
             counted per launch by `kernels.triton_launch`
    cuda     a CUDA-only path besides the kernels                cuda:_sync.host_put

`batchproof verify` reads `RAN` before and after a placement's checks: a placement that stands
for a path (the record's declaration, `batchproof.registry.Paths`) fails when the path never ran.
A count costs one dict update per call of an op's path, not per element.
"""

from __future__ import annotations

from collections import Counter

RAN: Counter[str] = Counter()  # path name -> times it ran in this process


def took(path: str) -> None:
    """Count one run of `path`."""
    RAN[path] += 1

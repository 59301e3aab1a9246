"""Compiled CPU kernels for the ops' fast paths (Numba, `parallel=True` over rows).

A kernel writes every byte of its outputs once, row by row, where a composition of torch ops
makes several passes (fill, then scatter, then mask). Each one has a torch fallback in its op's
module, which runs on CUDA, on the CPU when Numba is not installed, and in the tests that pin the
fallback; both are tested against the reference.

`available()` says whether Numba can be used; `threads()` sizes Numba's pool like torch's
intra-op pool, so `torch.set_num_threads` (one per pytest-xdist worker) governs both.
"""

from __future__ import annotations

import torch

try:
    import numba
except ImportError:  # the fallbacks run instead
    numba = None

ENABLED = True  # tests switch it off to run the torch fallbacks on the CPU


def available() -> bool:
    return numba is not None and ENABLED


def use_threads() -> None:
    """Numba's threads: as many as torch's intra-op threads, at most Numba's pool."""
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))

"""Compiled CPU kernels for the ops' fast paths (Numba, `parallel=True` over rows).

A kernel writes every byte of its outputs once, row by row, where a composition of torch ops
makes several passes (fill, then scatter, then mask). Each one has a torch fallback in its op's
module, which runs on CUDA, on the CPU when Numba is not installed, and in the tests that pin the
fallback; both are tested against the reference.

`available()` says whether Numba can be used; `use_threads()` sizes Numba's pool like torch's
intra-op pool, so `torch.set_num_threads` (one per pytest-xdist worker) governs both.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import numpy as np
import torch

from batchproof.impl._paths import took

try:
    import numba
except ImportError:  # the fallbacks run instead
    numba = None
else:
    if not os.environ.get("NUMBA_THREADING_LAYER"):
        # Numba's own thread pool: unlike GNU OpenMP (its default here), it survives fork(), so a
        # process that forks after a kernel ran (DataLoader workers, Ray, mutmut) can run one
        # again. It is not thread-safe, so the kernels keep the GIL while they run.
        numba.config.THREADING_LAYER = "workqueue"

ENABLED = True  # tests switch it off to run the torch fallbacks on the CPU


def compiled(function):
    """`function` compiled by Numba (`njit(cache=True)`, on first call) where Numba is
    installed, else `function` itself; `python(compiled(f))` is `f` either way. As a decorator
    it keeps one source for both (mutmut, which skips decorated functions, leaves it alone)."""
    return function if numba is None else numba.njit(cache=True)(function)


def python(function):
    """The plain Python function behind `compiled(function)`."""
    return getattr(function, "py_func", function)

TRITON = True  # the Triton kernels (impl/kernels/triton_*.py) on CUDA, when triton is installed
TRITON_ON_CPU = False  # and on CPU tensors, under Triton's interpreter (the `triton` placement)
TRITON_ASKED = 0  # how many times triton_applies() was asked (batchproof.placements.distinct)


_launchable: bool | None = None  # whether Numba's threading layer loads (found on first use)


def available() -> bool:
    """Numba is installed, kernels are enabled, and the threading layer starts (a layer asked
    for by NUMBA_THREADING_LAYER that is not installed makes every op take its torch path)."""
    global _launchable
    if numba is None or not ENABLED:
        return False
    if _launchable is None:
        try:
            use_threads()
            _launchable = True
        except (ValueError, RuntimeError, OSError):
            _launchable = False
    return _launchable


def triton_applies(device: torch.device) -> bool:
    """The Triton kernels run here: compiled on CUDA, interpreted on the CPU when asked
    (`TRITON_ON_CPU`, set by `batchproof.placements`' `triton` placement); triton installed."""
    global TRITON_ASKED
    TRITON_ASKED += 1
    wanted = device.type == "cuda" or device.type == "cpu" and TRITON_ON_CPU
    return TRITON and wanted and _triton_installed()


@functools.cache
def _triton_installed() -> bool:
    """Looked up once: an op asks on every call, and a missing module is a search of sys.path."""
    return importlib.util.find_spec("triton") is not None


TRITON_BLOCK = 1024  # columns (elements) per Triton program on CUDA
TRITON_WARPS = 4  # warps per Triton program on CUDA (Triton's default)
# build_rl_batch's sequence kernel over the flat (B * W) output in aligned chunks (16-byte
# stores whatever W) instead of a program per (row, block of columns); off until a GPU run
# shows it faster (docs/performance.md, "GPU")
TRITON_FLAT_ROWS = False
INTERPRETED_BLOCK = 32  # under the interpreter, where each program costs time, not a thread


def triton_block(device: torch.device) -> int:
    return TRITON_BLOCK if device.type == "cuda" else INTERPRETED_BLOCK


def triton_launch(kernel: tuple, device: torch.device, grid: tuple, *args, **meta) -> None:
    """Launch a (compiled, interpreted) kernel pair: compiled on CUDA, under Triton's
    interpreter on CPU tensors (numpy's floating-point warnings silenced there: NaN and inf
    are values the kernels copy and multiply on purpose)."""
    compiled, interpreted = kernel
    took(_triton_path(interpreted.fn))
    if device.type == "cuda":
        compiled[grid](*args, num_warps=TRITON_WARPS, **meta)
        return
    with np.errstate(all="ignore"):
        interpreted[grid](*args, **meta)


@functools.cache
def _triton_path(function) -> str:
    """A kernel's path name (`batchproof.impl._paths`): `triton:rl_batch._sequence_rows` for
    `_sequence_rows` of impl/kernels/triton_rl_batch.py."""
    module = function.__module__.rpartition(".")[2].removeprefix("triton_")
    return f"triton:{module}.{function.__name__}"


def device_offsets(lengths: torch.Tensor) -> torch.Tensor:
    """[0, cumulative lengths...] of an int64 tensor, on its device (no host sync): what the
    Triton kernels index."""
    return torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)])


def offsets(lengths: torch.Tensor) -> np.ndarray:
    """[0, cumulative lengths...] of a CPU int64 tensor, as the NumPy array a kernel indexes."""
    return torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)]).numpy()


def use_threads() -> None:
    """Numba's threads: as many as torch's intra-op threads, at most Numba's pool."""
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))

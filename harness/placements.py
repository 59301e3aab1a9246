"""Placements: the code paths of `impl/` that one machine can run, each checked on its own.

`impl/` picks its code by where the data is. On the CPU it takes fast paths that CUDA never
runs; on CUDA it runs device-generic torch code that a CPU-only machine would otherwise never
check. A placement forces one of them, so `batchproof verify` checks every one against the
reference on any machine:

    kernel    the compiled CPU kernels (Numba) and the CPU fast paths     (needs batchproof[kernels])
    cpu       the CPU fast paths in torch and struct, kernels switched off
    generic   the device-generic torch code that CUDA runs, run on the CPU
    triton    the Triton kernels CUDA runs, under Triton's interpreter     (needs batchproof[triton])

On a CUDA device there is one placement, the device's own (`cuda`): the switches only change
what runs on the CPU. `impl/` consults the switches through `batchproof.impl._cpu.fast_paths`
and `batchproof.impl.kernels.available`; `asked()` counts those questions, so a runner can tell
an op whose code never asked (it has one path: the other placements would run the same code).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from batchproof.impl import _cpu, kernels

PLACEMENTS = {
    "kernel": "the compiled CPU kernels (Numba) and the CPU fast paths",
    "cpu": "the CPU fast paths (torch, struct), kernels off",
    "generic": "the device-generic torch code CUDA runs, on the CPU",
    "triton": "the Triton kernels CUDA runs, under Triton's interpreter on the CPU",
}


def available(device: str = "cpu") -> list[str]:
    """The placements this machine can run on `device`, the default one first: on the CPU
    `kernel` (when Numba is installed), `cpu`, `generic`; on CUDA just `cuda`."""
    if device != "cpu":
        return [device]
    with placed("kernel"):
        kernel = kernels.available()
    with placed("triton"):
        triton = kernels.triton_applies(torch.device("cpu"))
    return (["kernel"] if kernel else []) + ["cpu", "generic"] + (["triton"] if triton else [])


def default(device: str = "cpu") -> str:
    """The placement `impl/` takes on its own (no switch touched)."""
    return available(device)[0]


@contextlib.contextmanager
def placed(name: str) -> Iterator[None]:
    """Run the body under one placement (`kernel`, `cpu`, `generic`, or a device name, which
    changes nothing); the switches are restored after it."""
    if name not in PLACEMENTS:
        yield
        return
    saved = kernels.ENABLED, _cpu.FAST_PATHS, kernels.TRITON_ON_CPU
    kernels.ENABLED = name == "kernel"
    _cpu.FAST_PATHS = name not in ("generic", "triton")
    kernels.TRITON_ON_CPU = name == "triton"
    try:
        yield
    finally:
        kernels.ENABLED, _cpu.FAST_PATHS, kernels.TRITON_ON_CPU = saved


def asked() -> tuple[int, int]:
    """How many times `impl/` has asked whether the CPU fast paths apply, and whether the Triton
    kernels do (ever, in this process): unchanged over a run, the code that ran has no branch
    that depends on them."""
    return _cpu.ASKED, kernels.TRITON_ASKED


def distinct(where: list[str], before: tuple[int, int]) -> list[str]:
    """The placements of `where` that run other code than its first did, given `asked()` as it
    was before that run: all of them if the CPU fast paths were asked about; the first and
    `triton` if only the Triton kernels were; else just the first (one code path)."""
    fast, triton = (now - then for now, then in zip(asked(), before))
    if fast:
        return where
    return where[:1] + (["triton"] if triton and "triton" in where[1:] else [])

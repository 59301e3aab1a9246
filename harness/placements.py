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

A switch only says which code may run. What did run, `impl/` counts (`batchproof.impl._paths`:
each compiled kernel and fast path as it starts); a record declares the paths its function
takes (`OpInfo.paths`), and each placement stands for some of them (`registry.PLACEMENT_KINDS`).
`faults()` compares a placement's counts with its declaration: a declared path that never ran
(the op took slower code, whose outputs can be equal) or a path of a kind the placement may not
run. `verify` counts over each placement's checks; `batchproof.checks.check_paths` runs them
for one placement alone (the `paths:PLACEMENT` check: the bug zoo's killer, the replay of a
failure).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import torch

from batchproof.impl import _cpu, _paths, kernels
from batchproof.registry import PATH_KINDS, PLACEMENT_KINDS, OpInfo

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


class PathNotTaken(AssertionError):
    """A placement's checks did not run the code it stands for: a declared path never ran, or
    a path of a kind it may not run did. A divergence of `impl/`'s dispatch (the op is
    slower, or the placement checked other code than it names), not batchproof's own failure:
    `verify` reports it as FAIL (exit 1)."""


def ran() -> Counter[str]:
    """The paths `impl/` has taken so far in this process (a copy: subtract it later)."""
    return Counter(_paths.RAN)


def since(before: Counter[str]) -> Counter[str]:
    """The paths taken since `before = ran()`, each with its count."""
    return ran() - before


def kinds(placement: str) -> tuple[str, ...]:
    """The kinds of path `placement` runs here: on CUDA the Triton kernels only where they
    apply (triton installed, `kernels.TRITON` on; not asked through `triton_applies`, whose
    count `distinct` reads)."""
    runs = PLACEMENT_KINDS.get(placement, ())
    if placement == "cuda" and not (kernels.TRITON and kernels._triton_installed()):
        runs = tuple(kind for kind in runs if kind != "triton")
    return runs


def declared(info: OpInfo, placement: str) -> tuple[str, ...]:
    """The paths of `info` that `placement` must run."""
    return info.paths.of(placement, kinds(placement))


def faults(info: OpInfo, placement: str, counted: Counter[str]) -> list[str]:
    """What is wrong with the paths `counted` under `placement`, one sentence each: every
    declared path that never ran, every path of a kind the placement may not run. Empty
    when the record declares no paths (nothing is claimed for it)."""
    if not info.paths:
        return []
    problems = [f"placement {placement} stands for {path}, which never ran: impl/ took other "
                "code (a slower op, whose outputs can still be equal)"
                for path in declared(info, placement) if not counted[path]]
    foreign = [kind for kind in PATH_KINDS if kind not in PLACEMENT_KINDS.get(placement, ())]
    problems += [f"placement {placement} ran {path} ({counted[path]} times), a {kind} path it "
                 "may not run: it did not check the code it names"
                 for path in sorted(counted) for kind in foreign
                 if path.startswith(f"{kind}:") and counted[path]]
    return problems


def counts(info: OpInfo, placement: str, counted: Counter[str]) -> tuple[dict, dict]:
    """(each declared path of `placement` -> times it ran, every other path that ran -> times)
    for a report."""
    mine = declared(info, placement)
    return ({path: counted[path] for path in mine},
            {path: n for path, n in sorted(counted.items()) if n and path not in mine})

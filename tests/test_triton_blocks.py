"""The Triton kernels across several programs per row, on the CPU.

Every kernel in `impl/kernels/triton_*.py` gives each program BLOCK columns of a row
(`cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)`). Under Triton's interpreter the
`triton` placement runs with 32-column blocks while the strategies draw rows of about a dozen
tokens: every program along a row is program 0, and a later program's offsets, the grid's extent
along a row and a second block's tail mask never run. Here each kernel runs its record's
equivalence check with 4-column blocks, so rows span several programs (asserted from the
launches), and a fault planted in the later programs' offsets (`program_id(1) * (BLOCK - 1)`:
program 0 is untouched) fails the check — while it passes unseen with the default block.
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap

import pytest
import torch
from hypothesis import Phase, settings
from tensordict import TensorDictBase

from batchproof import placements, registry
from batchproof.checks import run_check
from batchproof.impl import kernels

if "triton" not in placements.available():
    pytest.skip("triton is not installed: no triton placement", allow_module_level=True)

from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

from batchproof.impl.kernels import (  # noqa: E402
    triton_nesting,
    triton_rl_batch,
    triton_sft,
    triton_varlen,
)

SMALL_BLOCK = 4
# kernel -> (module, attribute, a record whose equivalence check reaches it, examples)
KERNELS = {
    "nesting copy_runs": (triton_nesting, "_KERNEL", "nesting.nest_by_mask", 25),
    "nesting copy_runs (unnest)": (triton_nesting, "_KERNEL", "nesting.unnest_by_mask", 25),
    "rl_batch sequence rows": (triton_rl_batch, "_SEQUENCE_ROWS", "rl_batch.build_rl_batch",
                               25),
    "rl_batch response rows": (triton_rl_batch, "_RESPONSE_ROWS", "rl_batch.build_rl_batch",
                               25),
    "sft packed rows": (triton_sft, "_KERNEL", "sft.pack_sft", 12),
    "varlen samples": (triton_varlen, "_KERNEL", "varlen.pack_varlen", 25),
}
ROW_OFFSET = "tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)"


def _equivalence(record: str, examples: int) -> None:
    # drawn inputs only: some pins are thousands of columns wide, thousands of interpreted
    # programs at this block (the `triton` placement runs them with its own block)
    search = settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                      phases=[Phase.generate])
    info = registry.get(record)
    narrow = dataclasses.replace(info, valid=info.valid.filter(_narrow))
    with placements.placed("triton"):
        run_check(narrow, "equivalence", settings=search)


def _narrow(case) -> bool:
    """Batches a few blocks wide, not hundreds: every program is interpreted."""
    return all(t.numel() <= 512 for t in _tensors([*case.args, *case.kwargs.values()]))


def _tensors(values) -> list[torch.Tensor]:
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value.values() if value.is_nested else value)
        elif isinstance(value, TensorDictBase):
            found += _tensors(value.values())
        elif isinstance(value, (list, tuple)):
            found += _tensors(value)
    return found


def _faulty(kernel: tuple) -> tuple:
    """The kernel pair with the later programs' column offsets off by one per program."""
    function = kernel[1].fn
    source = textwrap.dedent(inspect.getsource(function))
    assert ROW_OFFSET in source, f"{function.__name__} no longer computes its columns that way"
    source = source.replace(ROW_OFFSET, "tl.program_id(1) * (BLOCK - 1) + tl.arange(0, BLOCK)")
    namespace = dict(function.__globals__)
    exec(compile(source, f"<planted {function.__name__}>", "exec"), namespace)  # noqa: S102
    planted = namespace[function.__name__]
    return kernel[0], InterpretedFunction(planted)


@pytest.fixture
def small_blocks(monkeypatch):
    """4-column blocks, and the grids every launch used."""
    monkeypatch.setattr(kernels, "INTERPRETED_BLOCK", SMALL_BLOCK)
    grids: list[tuple[str, tuple]] = []
    launch = kernels.triton_launch

    def recording(kernel, device, grid, *args, **meta):
        grids.append((kernel[1].fn.__name__, tuple(grid)))
        return launch(kernel, device, grid, *args, **meta)

    monkeypatch.setattr(kernels, "triton_launch", recording)
    return grids


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_each_kernel_passes_across_several_programs_per_row(name, small_blocks) -> None:
    module, attribute, record, examples = KERNELS[name]
    _equivalence(record, examples)
    function = getattr(module, attribute)[1].fn.__name__
    spans = [grid[1] for kernel, grid in small_blocks if kernel == function and len(grid) > 1]
    assert spans and max(spans) >= 3, f"{function}: no row spanned 3 programs ({spans[:10]})"


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_a_fault_in_a_later_programs_offsets_fails(name, small_blocks, monkeypatch) -> None:
    module, attribute, record, examples = KERNELS[name]
    monkeypatch.setattr(module, attribute, _faulty(getattr(module, attribute)))
    with pytest.raises(AssertionError):
        _equivalence(record, examples)


def test_the_default_interpreted_block_does_not_see_that_fault(monkeypatch) -> None:
    """Why this file exists: with 32-column blocks the planted fault never runs."""
    assert kernels.INTERPRETED_BLOCK >= 16
    monkeypatch.setattr(triton_varlen, "_KERNEL", _faulty(triton_varlen._KERNEL))
    _equivalence("varlen.pack_varlen", 25)

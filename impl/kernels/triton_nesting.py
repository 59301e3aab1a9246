"""nest_by_mask / unnest_by_mask's data movement as one Triton kernel: a segmented copy.

A field of a (B, W, *trailing) dense batch, row-major and contiguous, holds each run of ones of
its mask as one contiguous block of `length * inner` elements (inner = prod(trailing)); its
jagged form holds the same blocks back to back:

    dense   row r: [. . a a a . b b .]       run q: from (r * W + start_q) * inner
    jagged         [a a a b b ...]                 to   first_q * inner (tokens before q)

nest copies dense -> jagged, unnest jagged -> dense (after the pad fill). One program per
(run, block of its elements); any dtype (the pointers carry it). Compiled on CUDA; on CPU
tensors under Triton's interpreter (see `triton_rl_batch`).
"""

import torch

from batchproof.impl import kernels

try:
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # the torch path runs instead
    triton = None



if triton is not None:  # the kernel (its annotations need triton.language)

    def _copy_runs(dst_ptr, src_ptr, dst_start_ptr, src_start_ptr, size_ptr,
                   BLOCK: tl.constexpr):
        q = tl.program_id(0)
        k = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = k < tl.load(size_ptr + q)
        values = tl.load(src_ptr + tl.load(src_start_ptr + q) + k, mask=inside)
        tl.store(dst_ptr + tl.load(dst_start_ptr + q) + k, values, mask=inside)

    _KERNEL = triton.jit(_copy_runs), InterpretedFunction(_copy_runs)


def copy_runs(dst: torch.Tensor, src: torch.Tensor, dst_starts: torch.Tensor,
              src_starts: torch.Tensor, sizes: torch.Tensor, longest: int) -> None:
    """dst.view(-1)[dst_starts[q] + k] = src.view(-1)[src_starts[q] + k] for k < sizes[q], every
    run q (contiguous tensors of one dtype and device; element offsets, int64). `longest`: the
    largest size (the grid's second dimension; known on the host)."""
    if not sizes.numel() or not longest:
        return
    device = dst.device
    block = kernels.triton_block(device)
    kernels.triton_launch(
        _KERNEL, device, (sizes.numel(), triton.cdiv(longest, block)), dst, src,
        dst_starts.contiguous(), src_starts.contiguous(), sizes.contiguous(), BLOCK=block)

"""cp's gathers as Triton kernels: the index of every rank's slot, and the copies by index.

    sequence i of the padded stream: span [a_i, a_i + Lp_i), real tokens [a_i, a_i + l_i)
    zigzag (cp > 1), c_i = Lp_i / (2·cp): position a_i + w is chunk k = w // c_i, offset
    q = w % c_i; its rank is k if k < cp else 2·cp - 1 - k, its local slot
    a_i / cp + (q if k < cp else c_i + q)
    contiguous (and cp = 1), n = Tp / cp: position g is rank g // n, slot g % n

`shard_index`: one program per (sequence, block of its stream positions) writes each position's
`padded_index` and `token_index` into its rank's slot (row rank * n + slot; with one selected
rank, only that rank's positions, into row 0). `unshard_index`: one program per (sequence, block
of its real tokens) writes the flat slot rank * n + slot each real token is read from.
`gather_rows`: dst[e] = src[index[e // inner] * inner + e % inner] over the flat output, one
program per block of elements, any dtype the pointers carry. Compiled on CUDA; on CPU tensors
under Triton's interpreter (the `triton` placement, see `triton_rl_batch`).
"""

import torch

from batchproof.impl import kernels

try:
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # the torch path runs instead
    triton = None


if triton is not None:  # the kernels (their annotations need triton.language)

    def _shard_index(padded_index_ptr, token_index_ptr, cu_ptr, cu_padded_ptr, n, cp, selected,
                     CONTIGUOUS: tl.constexpr, BLOCK: tl.constexpr):
        i = tl.program_id(0)
        w = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        a = tl.load(cu_padded_ptr + i)
        span = tl.load(cu_padded_ptr + i + 1) - a
        start = tl.load(cu_ptr + i)
        length = tl.load(cu_ptr + i + 1) - start
        g = a + w
        if CONTIGUOUS:
            rank = g // n
            slot = g - rank * n
        else:
            chunk = tl.maximum(span // (2 * cp), 1)  # (a sequence of span 0 has no position)
            k = w // chunk
            q = w - k * chunk
            first = k < cp
            rank = tl.where(first, k, 2 * cp - 1 - k)
            slot = a // cp + tl.where(first, q, chunk + q)
        chosen = rank * 0 + selected  # (as a vector: a scalar condition is no store mask)
        keep = (w < span) & ((chosen < 0) | (rank == chosen))
        row = tl.where(chosen < 0, rank, 0)
        at = row * n + slot
        tl.store(padded_index_ptr + at, g, mask=keep)
        tl.store(token_index_ptr + at, tl.where(w < length, start + w, -1), mask=keep)

    def _unshard_index(index_ptr, cu_ptr, cu_padded_ptr, n, cp, CONTIGUOUS: tl.constexpr,
                       BLOCK: tl.constexpr):
        i = tl.program_id(0)
        w = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        a = tl.load(cu_padded_ptr + i)
        span = tl.load(cu_padded_ptr + i + 1) - a
        start = tl.load(cu_ptr + i)
        length = tl.load(cu_ptr + i + 1) - start
        g = a + w
        if CONTIGUOUS:
            rank = g // n
            slot = g - rank * n
        else:
            chunk = tl.maximum(span // (2 * cp), 1)
            k = w // chunk
            q = w - k * chunk
            first = k < cp
            rank = tl.where(first, k, 2 * cp - 1 - k)
            slot = a // cp + tl.where(first, q, chunk + q)
        tl.store(index_ptr + start + w, rank * n + slot, mask=w < length)

    def _gather_rows(dst_ptr, src_ptr, index_ptr, total, inner, BLOCK: tl.constexpr):
        e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = e < total
        row = e // inner
        column = e - row * inner
        source = tl.load(index_ptr + row, mask=inside, other=0)
        values = tl.load(src_ptr + source * inner + column, mask=inside)
        tl.store(dst_ptr + e, values, mask=inside)

    _SHARD = triton.jit(_shard_index), InterpretedFunction(_shard_index)
    _UNSHARD = triton.jit(_unshard_index), InterpretedFunction(_unshard_index)
    _GATHER = triton.jit(_gather_rows), InterpretedFunction(_gather_rows)


def applies(dtype: torch.dtype) -> bool:
    """The gather kernel copies this dtype (Triton has no complex types)."""
    return not dtype.is_complex


def shard_index(cu: torch.Tensor, cu_padded: torch.Tensor, rows: int, n: int, cp: int,
                contiguous: bool, selected: int, longest: int):
    """(padded_index, token_index), each (rows, n) int64 on the boundaries' device: what
    `impl.cp._slots` computes in torch. `longest`: the longest padded span (the grid's second
    dimension, known on the host); `selected`: the one rank to write (row 0), or -1 for all."""
    device = cu.device
    padded_index = torch.empty((rows, n), dtype=torch.int64, device=device)
    token_index = torch.empty((rows, n), dtype=torch.int64, device=device)
    sequences = cu.numel() - 1
    if sequences > 0 and longest > 0:
        block = kernels.triton_block(device)
        kernels.triton_launch(_SHARD, device, (sequences, triton.cdiv(longest, block)),
                              padded_index, token_index, cu.contiguous(), cu_padded.contiguous(),
                              n, cp, selected, CONTIGUOUS=contiguous, BLOCK=block)
    return padded_index, token_index


def unshard_index(cu: torch.Tensor, cu_padded: torch.Tensor, total: int, n: int, cp: int,
                  contiguous: bool, longest: int) -> torch.Tensor:
    """The flat slot (rank * n + local slot) each of the `total` real tokens is read from, int64
    on the boundaries' device. `longest`: the longest real sequence."""
    device = cu.device
    index = torch.empty(total, dtype=torch.int64, device=device)
    sequences = cu.numel() - 1
    if sequences > 0 and longest > 0:
        block = kernels.triton_block(device)
        kernels.triton_launch(_UNSHARD, device, (sequences, triton.cdiv(longest, block)),
                              index, cu.contiguous(), cu_padded.contiguous(), n, cp,
                              CONTIGUOUS=contiguous, BLOCK=block)
    return index


def gather_rows(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """src[index] along the first dimension (any trailing shape), as one flat copy."""
    rows, trailing = index.numel(), tuple(src.shape[1:])
    dst = torch.empty((rows, *trailing), dtype=src.dtype, device=src.device)
    inner = 1
    for size in trailing:
        inner *= size
    total = rows * inner
    if total:
        block = kernels.triton_block(src.device)
        kernels.triton_launch(_GATHER, src.device, (triton.cdiv(total, block),), dst,
                              src.contiguous(), index.contiguous(), total, inner, BLOCK=block)
    return dst

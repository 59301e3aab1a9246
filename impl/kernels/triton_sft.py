"""pack_sft's dense outputs as one Triton kernel: every output byte written once, on the device.

Row r (width W) holds slots k (row_first[r] <= k < row_first[r + 1]) at column offset o_k, each
an example of s_k tokens with t_k kept loss targets:

    input_ids       pad ... | ids_k (s_k)      | pad ...
    attention_mask  0   ... | 1 ... 1          | 0   ...
    position_ids    0   ... | 0 1 ... s_k - 1  | 0   ...
    loss_mask (W-1)   0 ... | 0 .. 0 | kept loss values (t_k) | 0 ...
                                     ^ column o_k + s_k - 1 - t_k

and every loss_mask entry is multiplied by `scale` (float32), the zeros too (a NaN scale makes
them NaN, as the reference's whole-tensor multiply does). One program per (row, block of
columns), looping over the row's slots. The tokens and kept loss values come flat, in slot
order. Compiled on CUDA; on CPU tensors under Triton's interpreter (see `triton_rl_batch`).
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

    def _rows(ids_ptr, attention_ptr, positions_ptr, loss_ptr, ids_flat_ptr, ids_first_ptr,
              loss_flat_ptr, loss_first_ptr, row_first_ptr, offset_ptr, length_ptr, target_ptr,
              scale_ptr, width, pad, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ids = tl.full([BLOCK], pad, tl.int64)
        attention = tl.full([BLOCK], 0, tl.int64)
        positions = tl.full([BLOCK], 0, tl.int64)
        loss = tl.full([BLOCK], 0.0, tl.float32)
        for k in range(tl.load(row_first_ptr + row), tl.load(row_first_ptr + row + 1)):
            o = tl.load(offset_ptr + k)
            s = tl.load(length_ptr + k)
            t = tl.load(target_ptr + k)
            in_slot = (cols >= o) & (cols < o + s)
            token = tl.load(ids_flat_ptr + tl.load(ids_first_ptr + k) + cols - o, mask=in_slot,
                            other=0)
            ids = tl.where(in_slot, token, ids)
            attention = tl.where(in_slot, 1, attention)
            positions = tl.where(in_slot, cols - o, positions)
            kept_from = o + s - 1 - t
            kept = (cols >= kept_from) & (cols < o + s - 1)
            value = tl.load(loss_flat_ptr + tl.load(loss_first_ptr + k) + cols - kept_from,
                            mask=kept, other=0.0)
            loss = tl.where(kept, value, loss)
        at = row * width + cols
        inside = cols < width
        tl.store(ids_ptr + at, ids, mask=inside)
        tl.store(attention_ptr + at, attention, mask=inside)
        tl.store(positions_ptr + at, positions, mask=inside)
        tl.store(loss_ptr + row * (width - 1) + cols, loss * tl.load(scale_ptr),
                 mask=cols < width - 1)

    _KERNEL = triton.jit(_rows), InterpretedFunction(_rows)


def write_rows(ids_flat, loss_flat, scale, row_first, offset, lengths, targets, n_rows: int,
               width: int, pad_token_id: int) -> tuple[torch.Tensor, ...]:
    """input_ids, attention_mask, position_ids (n_rows * width,) and loss_mask
    (n_rows * (width - 1),) on the inputs' device. `ids_flat`: the slots' tokens (int64) and
    `loss_flat` their kept loss values (float32), both in slot order; `scale`: a float32
    0-d tensor; `row_first`: each row's first slot (n_rows + 1); `offset`, `lengths`, `targets`:
    per slot (int64)."""
    device = ids_flat.device
    block = kernels.triton_block(device)
    out = [torch.empty(n_rows * width, dtype=torch.int64, device=device) for _ in range(3)]
    out.append(torch.empty(n_rows * (width - 1), dtype=torch.float32, device=device))
    ids_first, loss_first = (kernels.device_offsets(t)[:-1] for t in (lengths, targets))
    kernels.triton_launch(  # (n_rows >= 1 and width >= 1: every example has a token)
        _KERNEL, device, (n_rows, triton.cdiv(width, block)), *out, ids_flat.contiguous(),
        ids_first, loss_flat.contiguous(), loss_first, row_first.contiguous(),
        offset.contiguous(), lengths.contiguous(), targets.contiguous(), scale.reshape(1), width,
        pad_token_id, BLOCK=block)
    return tuple(out)

"""`pack_sft`'s dense outputs from flat per-example tensors, written in one pass per row.

    row r (width W), slots k of the row at column offset o_k, example i = order[k] of s tokens,
    t_k = min(num_actions_i, s - 1) loss targets:

        input_ids       pad ... | ids_i (s)        | pad ...
        attention_mask  0   ... | 1 ... 1          | 0   ...
        position_ids    0   ... | 0 1 ... s-1      | 0   ...
        loss_mask (W-1)   0 ... | 0 .. 0 | last t_k values of loss_mask_i | 0 ...
                                           ^ column o_k + s - 1 - t_k

Every loss_mask entry is multiplied by `scale` (float32), the zeros too, as the reference
multiplies the whole tensor (a NaN scale makes them NaN there as well).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from impl import kernels

_EXACT_INTS = 2**24  # |v| bound under which a float64 sum of < 2**29 integral values is exact

if kernels.numba is not None:
    from numba import njit, prange

    @njit(cache=True)
    def _loss_total(loss_flat, loss_off, order, targets):
        """(float64 sum of the kept loss values, whether that sum is exact)."""
        total, exact = 0.0, True
        for k in range(order.shape[0]):
            end = loss_off[order[k] + 1]
            for j in range(end - targets[k], end):
                value = np.float64(loss_flat[j])
                total += value
                if exact and not (np.trunc(value) == value and abs(value) <= _EXACT_INTS):
                    exact = False
        return total, exact

    @njit(parallel=True, cache=True)
    def _write_rows(ids_flat, ids_off, loss_flat, loss_off, order, offsets, row_first, targets,
                    pad, scale, ids, attention, positions, loss):
        zero = np.float32(0.0) * scale
        for row in prange(ids.shape[0]):
            ids[row, :] = pad
            attention[row, :] = 0
            positions[row, :] = 0
            loss[row, :] = zero
            for k in range(row_first[row], row_first[row + 1]):
                i, o, t = order[k], offsets[k], targets[k]
                first = ids_off[i]
                s = ids_off[i + 1] - first
                ids[row, o:o + s] = ids_flat[first:first + s]
                attention[row, o:o + s] = 1
                ramp = positions[row, o:o + s]
                for c in range(s):
                    ramp[c] = c
                kept = loss_flat[loss_off[i + 1] - t:loss_off[i + 1]]
                out = loss[row, o + s - 1 - t:o + s - 1]
                for c in range(t):
                    out[c] = kept[c] * scale


def write_rows(input_ids: list[torch.Tensor], loss_masks: list[torch.Tensor], lengths, actions,
               order: list[int], offsets, row_first, targets, n_rows: int, width: int,
               pad_token_id: int) -> tuple[torch.Tensor, ...]:
    """input_ids, attention_mask, position_ids (n_rows, width) and loss_mask (n_rows, width - 1):
    `input_ids` int64 and `loss_masks` float32 CPU tensors, one per example (original order);
    `order`, `offsets`, `targets`: per slot, rows concatenated; `row_first`: each row's first
    slot (n_rows + 1 entries)."""
    ids_flat, loss_flat = torch.cat(input_ids).numpy(), torch.cat(loss_masks).numpy()
    ids_off, loss_off = (kernels.offsets(torch.tensor(n)) for n in (lengths, actions))
    order = np.asarray(order)  # Python ints: int64
    offsets, row_first, targets = (t.numpy() for t in (offsets, row_first, targets))
    total, exact = _loss_total(loss_flat, loss_off, order, targets)
    if not exact:  # non-integral values (or NaN / inf): the exact sum, as the reference's fsum
        total = math.fsum(np.concatenate([loss_flat[loss_off[i + 1] - t:loss_off[i + 1]]
                                          for i, t in zip(order, targets)]).tolist())
    scale = np.float32(1.0 / max(total, 1))
    out = [torch.empty((n_rows, width), dtype=torch.int64) for _ in range(3)]
    out.append(out[0].new_empty((n_rows, width - 1), dtype=torch.float32))
    kernels.use_threads()
    _write_rows(ids_flat, ids_off, loss_flat, loss_off, order, offsets, row_first, targets,
                pad_token_id, scale, *(t.numpy() for t in out))
    return tuple(out)


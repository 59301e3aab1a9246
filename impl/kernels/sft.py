"""`collate_sft`'s and `pack_sft`'s dense outputs from flat tensors, written in one pass per row.

`collate_sft`, row i of s tokens, m = num_actions_i (S = max s, A = max m):

    input_ids       pad ... pad | ids_i (s)
    attention_mask  0   ...   0 | attention_i (s), or 1 ... 1
    loss_mask (A)   0   ...   0 | loss_mask_i (m)    (times `scale` with normalize)

`pack_sft`:

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

import numpy as np
import torch

from batchproof.impl import _pages as pages
from batchproof.impl import kernels
from batchproof.impl._paths import took
from batchproof.reference.sft import exact_sum

_EXACT_INTS = 2**24  # |v| bound under which a float64 sum of < 2**29 integral values is exact

if kernels.numba is not None:
    from numba import njit, prange

    @njit(parallel=True, cache=True)
    def _count_zeros_and_others(values):
        zeros = others = 0
        for j in prange(values.shape[0]):
            zeros += values[j] == 0
            others += (values[j] != 0) & (values[j] != 1)
        return zeros, others

    # reassociated sums: every order gives the exact sum when the values are small integers,
    # and any other sum is discarded for math.fsum
    @njit(parallel=True, cache=True, fastmath={"reassoc"})
    def _loss_total(loss_flat, loss_off, order, targets):
        """(float64 sum of the kept loss values, whether that sum is exact: every value an
        integer of magnitude <= 2**24, which makes it exact in any order)."""
        total, inexact = 0.0, 0
        for k in prange(order.shape[0]):
            end = loss_off[order[k] + 1]
            for j in range(end - targets[k], end):
                value = np.float64(loss_flat[j])
                total += value  # (NaN: != its trunc; inf: too large; both inexact)
                inexact += (np.trunc(value) != value) | (abs(value) > _EXACT_INTS)
        return total, inexact == 0

    @njit(parallel=True, cache=True)
    def _write_collated(ids_flat, ids_off, loss_flat, loss_off, attention_flat, pad, scale,
                        normalize, ids, attention, loss):
        width, response = ids.shape[1], loss.shape[1]
        zero = np.float32(0.0) * scale if normalize else np.float32(0.0)
        for row in prange(ids.shape[0]):
            first, s = ids_off[row], ids_off[row + 1] - ids_off[row]
            ids[row, :width - s] = pad
            ids[row, width - s:] = ids_flat[first:first + s]
            attention[row, :width - s] = 0
            if attention_flat.shape[0]:
                attention[row, width - s:] = attention_flat[first:first + s]
            else:
                attention[row, width - s:] = 1
            first, m = loss_off[row], loss_off[row + 1] - loss_off[row]
            loss[row, :response - m] = zero
            out = loss[row, response - m:]
            for c in range(m):
                out[c] = loss_flat[first + c] * scale if normalize else loss_flat[first + c]

    @njit(parallel=True, cache=True)
    def _write_rows(ids_flat, ids_off, loss_flat, loss_off, order, offsets, row_first, targets,
                    pad, scale, ids, attention, positions, loss):
        zero = np.float32(0.0) * scale
        for row in prange(ids.shape[0]):
            end = loss_end = 0  # columns written so far, of the (W) outputs and of loss_mask
            for k in range(row_first[row], row_first[row + 1]):
                i, o, t = order[k], offsets[k], targets[k]
                first = ids_off[i]
                s = ids_off[i + 1] - first
                ids[row, end:o] = pad  # the gap before the slot (an earlier slot's alignment)
                attention[row, end:o] = 0
                positions[row, end:o] = 0
                ids[row, o:o + s] = ids_flat[first:first + s]
                attention[row, o:o + s] = 1
                ramp = positions[row, o:o + s]
                for c in range(s):
                    ramp[c] = c
                end = o + s
                kept = loss_flat[loss_off[i + 1] - t:loss_off[i + 1]]
                loss[row, loss_end:end - 1 - t] = zero
                out = loss[row, end - 1 - t:end - 1]
                for c in range(t):
                    out[c] = kept[c] * scale
                loss_end = end - 1
            ids[row, end:] = pad
            attention[row, end:] = 0
            positions[row, end:] = 0
            loss[row, loss_end:] = zero


_ALL_ONES = np.zeros(0, dtype=np.int64)  # collate's stand-in for "no attention values": all ones


def zero_one(values: torch.Tensor) -> tuple[bool, bool]:
    """(every value of the 1-D CPU tensor is 0 or 1, every value is 1), by one parallel pass
    (a torch reduction here would wake torch's OpenMP threads, which then spin against the
    kernels' threads on a small machine)."""
    took("numba:sft.zero_one")
    kernels.use_threads()
    zeros, others = _count_zeros_and_others(values.numpy())
    return others == 0, zeros == 0 and others == 0


def collate(input_ids: torch.Tensor, ids_offsets: torch.Tensor, loss_mask: torch.Tensor,
            loss_offsets: torch.Tensor, attention_mask: torch.Tensor | None, pad_token_id: int,
            normalize: bool) -> tuple[torch.Tensor, ...]:
    """input_ids, attention_mask (N, S) and loss_mask (N, A) from flat CPU values: integer ids,
    float32 loss masks (each with its offsets, N + 1 of them) and 0/1 attention masks of any
    real dtype (input_ids' offsets; None: all ones). `scale` is read only with `normalize`."""
    took("numba:sft.collate")
    ids_off, loss_off = ids_offsets.numpy(), loss_offsets.numpy()
    loss_flat = loss_mask.numpy()
    lengths, actions = np.diff(ids_off), np.diff(loss_off)
    scale = np.float32(1.0)
    if normalize:
        everything = np.arange(lengths.shape[0])
        scale = _scale(loss_flat, loss_off, everything, actions)
    n, width, response = lengths.shape[0], int(lengths.max()), int(actions.max())
    ids, attention = (pages.take((n, width), torch.int64) for _ in range(2))
    loss = pages.take((n, response), torch.float32)
    attention_flat = attention_mask.numpy() if attention_mask is not None else _ALL_ONES
    kernels.use_threads()
    _write_collated(input_ids.numpy(), ids_off, loss_flat, loss_off, attention_flat,
                    pad_token_id, scale, normalize, ids.numpy(), attention.numpy(), loss.numpy())
    return ids, attention, loss


def write_rows(input_ids: torch.Tensor, ids_offsets: torch.Tensor, loss_mask: torch.Tensor,
               loss_offsets: torch.Tensor, order: list[int], offsets, row_first, targets,
               n_rows: int, width: int, pad_token_id: int) -> tuple[torch.Tensor, ...]:
    """input_ids, attention_mask, position_ids (n_rows, width) and loss_mask (n_rows, width - 1)
    from flat CPU values: integer ids and float32 loss masks, each with its offsets (examples in
    their original order); `order`, `offsets`, `targets`: per slot, rows concatenated;
    `row_first`: each row's first slot (n_rows + 1 entries)."""
    took("numba:sft.write_rows")
    ids_off, loss_off, loss_flat = ids_offsets.numpy(), loss_offsets.numpy(), loss_mask.numpy()
    order = np.asarray(order)  # Python ints: int64
    offsets, row_first, targets = (t.numpy() for t in (offsets, row_first, targets))
    scale = _scale(loss_flat, loss_off, order, targets)
    out = [pages.take((n_rows, width), torch.int64) for _ in range(3)]
    out.append(pages.take((n_rows, width - 1), torch.float32))
    kernels.use_threads()
    _write_rows(input_ids.numpy(), ids_off, loss_flat, loss_off, order, offsets, row_first,
                targets, pad_token_id, scale, *(t.numpy() for t in out))
    return tuple(out)


def _scale(loss_flat: np.ndarray, loss_off: np.ndarray, order: np.ndarray,
           targets: np.ndarray) -> np.float32:
    """float32(1 / max(total, 1)), total the exact sum of the last targets[k] loss values of
    each example order[k] (float64 when that is exact, else math.fsum, as the reference)."""
    total, exact = _loss_total(loss_flat, loss_off, order, targets)
    if not exact:  # non-integral values (or NaN / inf): the exact sum, as the reference's fsum
        total = exact_sum(np.concatenate([loss_flat[loss_off[i + 1] - t:loss_off[i + 1]]
                                          for i, t in zip(order, targets)]).tolist())
    return np.float32(1.0 / max(total, 1))


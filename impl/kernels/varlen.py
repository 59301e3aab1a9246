"""`pack_varlen`'s per-token outputs, written in one pass per sample.

    sample i at packed offset o_i (prompt p_i, response r_i, n_i = p_i + r_i):
        input_ids[o_i : o_i + n_i]        prompt_i response_i
        position_ids[o_i : o_i + n_i]     0 1 ... n_i - 1
    its response tokens, from flat response index f_i on:
        target_index[f_i + k]   o_i + p_i + k
        predict_index[f_i + k]  o_i + p_i + k - 1
        sample_index[f_i + k]   i
    the tail pad (from `real` to `total`): pad id, positions 0 1 ... (its own segment)
"""

from __future__ import annotations

import torch

from batchproof.impl import _pages as pages
from batchproof.impl import kernels
from batchproof.impl._paths import took

if kernels.numba is not None:
    from numba import njit, prange

    @njit(parallel=True, cache=True)
    def _write_samples(p_flat, r_flat, p_off, r_off, offsets, pad, ids, positions, target,
                       predict, owner, copy_tokens):
        for i in prange(p_off.shape[0] - 1):
            p0, r0, o = p_off[i], r_off[i], offsets[i]
            p, r = p_off[i + 1] - p0, r_off[i + 1] - r0
            if copy_tokens:
                ids[o:o + p] = p_flat[p0:p0 + p]
                ids[o + p:o + p + r] = r_flat[r0:r0 + r]
            ramp = positions[o:o + p + r]
            for c in range(p + r):
                ramp[c] = c
            targets, predicts = target[r0:r0 + r], predict[r0:r0 + r]
            for k in range(r):
                targets[k] = o + p + k
                predicts[k] = o + p + k - 1
            owner[r0:r0 + r] = i
        real = offsets[-1]
        if copy_tokens:
            ids[real:] = pad
        tail = positions[real:]
        for c in range(tail.shape[0]):
            tail[c] = c


def write_samples(p_flat, p_len, r_flat, r_len, total: int, pad_token_id: int,
                  input_ids: torch.Tensor | None = None):
    """input_ids, position_ids (total,) and target_index, predict_index, sample_index (one per
    response token), as CPU int64 tensors. A given `input_ids` already holds the tokens and the
    pad (the list path packs them): only the other outputs are written."""
    took("numba:varlen.write_samples")
    p_off, r_off, offsets = map(kernels.offsets, (p_len, r_len, p_len + r_len))
    copy_tokens = input_ids is None
    ids = pages.take((total,), torch.int64) if copy_tokens else input_ids
    positions = pages.take((total,), torch.int64)
    per_response = [pages.take((int(r_off[-1]),), torch.int64) for _ in range(3)]
    kernels.use_threads()
    _write_samples(p_flat.contiguous().numpy(), r_flat.contiguous().numpy(), p_off, r_off,
                   offsets, pad_token_id, ids.numpy(), positions.numpy(),
                   *(t.numpy() for t in per_response), copy_tokens)
    return ids, positions, *per_response

"""`build_rl_batch`'s outputs from flat tokens and values, written in one pass per row.

    row i of input_ids / attention_mask / position_ids (width T):
        [pad ... pad | prompt_i  response_i | pad ... pad]
         0 ...     0 | 1 ...             1  | 0 ...     0
         0 ...     0 | 0 1 ...       n_i-1  | n_i-1 ... n_i-1   (max(n_i - 1, 0))
                     ^ start_i               ^ start_i + n_i (== T in the left layout)
    row i of response_mask / loss_mask / rewards / rollout_logprobs (width R):
        [0 ... 0 | r_i values (1, or the row's flat values) | 0 ... 0]
                 ^ r_start_i

Float values are copied as their int32 bit patterns (NaN payloads and -0.0 kept).
"""

from __future__ import annotations

import numpy as np
import torch

from batchproof.impl import _pages as pages
from batchproof.impl import kernels
from batchproof.impl._paths import took

COPY, ONES = 1, 2  # value modes (0: the output is not built)
_ONE_BITS = int(np.float32(1.0).view(np.int32))

if kernels.numba is not None:
    from numba import njit, prange

    @njit(parallel=True, cache=True)
    def _write_rows(p_flat, p_off, r_flat, r_off, start, r_start, pad, ids, attention,
                    positions, response_mask, flats, modes, values, counting):
        for i in prange(ids.shape[0]):
            p0, r0 = p_off[i], r_off[i]
            p, r = p_off[i + 1] - p0, r_off[i + 1] - r0
            s, n, a = start[i], p + r, r_start[i]
            e = s + n
            ids_row, attention_row, positions_row = ids[i], attention[i], positions[i]
            ids_row[:s] = pad
            ids_row[s:s + p] = p_flat[p0:p0 + p]
            ids_row[s + p:e] = r_flat[r0:r0 + r]
            ids_row[e:] = pad
            attention_row[:s] = 0
            attention_row[s:e] = 1
            attention_row[e:] = 0
            positions_row[:s] = 0
            positions_row[s:e] = counting[:n]
            positions_row[e:] = max(n - 1, 0)
            mask_row = response_mask[i]
            mask_row[:a] = 0
            mask_row[a:a + r] = 1
            mask_row[a + r:] = 0
            for k in range(modes.shape[0]):
                if modes[k] == 0:
                    continue
                row = values[k][i]
                row[:a] = 0
                if modes[k] == COPY:
                    row[a:a + r] = flats[k][r0:r0 + r]
                else:
                    row[a:a + r] = _ONE_BITS
                row[a + r:] = 0


_NO_VALUES, _NO_ROWS = np.zeros(0, dtype=np.int32), np.zeros((0, 0), dtype=np.int32)


def write_rows(p_flat, p_len, r_flat, r_len, start, r_start, width: int, max_response: int,
               pad_token_id: int, values: dict, ones: str) -> dict[str, torch.Tensor]:
    """All outputs (CPU tensors). `values`: name -> flat float32 values, or None: not built,
    except for the name `ones`, which then gets a 1.0 on each response column (the default
    loss mask)."""
    took("numba:rl_batch.write_rows")
    batch = p_len.numel()
    out = {name: pages.take((batch, width), torch.int64)
           for name in ("input_ids", "attention_mask", "position_ids")}
    out["response_mask"] = pages.take((batch, max_response), torch.int64)
    modes, flats, dense = [], [], []
    for name, flat in values.items():
        if flat is None and name != ones:
            modes.append(0)
            flats.append(_NO_VALUES)
            dense.append(_NO_ROWS)
            continue
        out[name] = pages.take((batch, max_response), torch.float32)
        modes.append(ONES if flat is None else COPY)
        flats.append(_NO_VALUES if flat is None else flat.contiguous().numpy().view(np.int32))
        dense.append(out[name].numpy().view(np.int32))
    kernels.use_threads()
    _write_rows(p_flat.contiguous().numpy(), kernels.offsets(p_len), r_flat.contiguous().numpy(),
                kernels.offsets(r_len),
                start.numpy(), r_start.numpy(), pad_token_id, out["input_ids"].numpy(),
                out["attention_mask"].numpy(), out["position_ids"].numpy(),
                out["response_mask"].numpy(), tuple(flats), np.array(modes), tuple(dense),
                torch.arange(width).numpy())
    return out

"""Strong baselines for `harness bench`: NumPy per-row slice assignment, the style of the common
vectorized collators (allocate the padded arrays once, then one slice assignment per row and
field), written to the same contract as the ops so their outputs can be compared bit for bit.

They are not oracles (the reference is) and not candidates (they validate nothing): they answer
"is the impl at least as fast as the obvious vectorized collator?". From Python lists, NumPy
converts each row while assigning it (the same per-element conversion the floor pays); from
jagged tensors, each assignment is a slice copy of the flat values.

    rl_batch, layout "left", row i (T = max p+r, R = max r):
        input_ids[i]      = [pad]*(T-n_i) + prompt_i + response_i
        attention_mask[i] = [0]*(T-n_i) + [1]*n_i
        position_ids[i]   = [0]*(T-n_i) + [0, 1, ..., n_i-1]
        response_mask[i] / loss_mask[i] / rewards[i] / rollout_logprobs[i]  right-aligned in R
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDictBase


def _rows(rows):
    """Python lists as they are, or a jagged tensor as NumPy views of its rows."""
    if isinstance(rows, torch.Tensor) and rows.is_nested:
        values, offsets = rows.values().numpy(), rows.offsets().tolist()
        return [values[a:b] for a, b in zip(offsets, offsets[1:])]
    return rows


def numpy_rows_rl_batch(prompts, responses, *, pad_token_id: int, rewards, loss_masks,
                        logprobs) -> dict[str, torch.Tensor]:
    """`build_rl_batch(layout="left")` with every per-token argument given as rows."""
    prompts, responses = _rows(prompts), _rows(responses)
    per_token = {"rewards": _rows(rewards), "loss_mask": _rows(loss_masks),
                 "rollout_logprobs": _rows(logprobs)}
    p_len = np.fromiter(map(len, prompts), np.int64, count=len(prompts))
    r_len = np.fromiter(map(len, responses), np.int64, count=len(responses))
    n_len = p_len + r_len
    batch, width, r_width = len(prompts), int(n_len.max()), int(r_len.max())
    input_ids = np.full((batch, width), pad_token_id, dtype=np.int64)
    attention = np.zeros((batch, width), dtype=np.int64)
    positions = np.zeros((batch, width), dtype=np.int64)
    response_mask = np.zeros((batch, r_width), dtype=np.int64)
    values = {key: np.zeros((batch, r_width), dtype=np.float32) for key in per_token}
    counting = np.arange(width, dtype=np.int64)
    for i, (prompt, response) in enumerate(zip(prompts, responses)):
        n, p, r = int(n_len[i]), int(p_len[i]), int(r_len[i])
        first = width - n
        input_ids[i, first:first + p] = prompt
        input_ids[i, first + p:] = response
        attention[i, first:] = 1
        positions[i, first:] = counting[:n]
        response_mask[i, r_width - r:] = 1
        for key, rows in per_token.items():
            values[key][i, r_width - r:] = rows[i]
    out = {"input_ids": input_ids, "attention_mask": attention, "position_ids": positions,
           "response_mask": response_mask} | values
    return {key: torch.from_numpy(array) for key, array in out.items()}


def numpy_rows_pack_sft(examples, *, pad_token_id: int, capacity: int, dp_size: int = 1,
                        tp_size: int = 1, cp_size: int = 1) -> dict[str, torch.Tensor]:
    """`pack_sft`'s dense outputs, placed by the impl's packing plan (FFD bins, shard-major rows,
    aligned offsets), with one slice assignment per example and field."""
    from batchproof.impl import sft

    ids = _rows_of(examples, "input_ids")
    loss_rows = _rows_of(examples, "loss_mask")
    num_actions = (examples["num_actions"].tolist() if isinstance(examples, TensorDictBase)
                   else [int(ex["num_actions"]) for ex in examples])
    lengths = [len(row) for row in ids]
    bins = sft.ffd_bins(lengths, capacity, min_bins=dp_size, bin_multiple=dp_size)
    rows = [bins[k] for shard in range(dp_size) for k in range(shard, len(bins), dp_size)]
    align = sft.align_size(tp_size, cp_size)
    aligned = [(s + align - 1) // align * align for s in lengths]
    width = max(sum(aligned[i] for i in row) for row in rows)
    n_rows = len(rows)
    input_ids = np.full((n_rows, width), pad_token_id, dtype=np.int64)
    attention = np.zeros((n_rows, width), dtype=np.int64)
    positions = np.zeros((n_rows, width), dtype=np.int64)
    loss = np.zeros((n_rows, width - 1), dtype=np.float32)
    counting = np.arange(width, dtype=np.int64)
    for row_index, row in enumerate(rows):
        offset = 0
        for i in row:
            s, actions = lengths[i], num_actions[i]
            input_ids[row_index, offset:offset + s] = ids[i]
            attention[row_index, offset:offset + s] = 1
            positions[row_index, offset:offset + s] = counting[:s]
            # full = [0]*(s - actions) + loss_mask; column offset + p holds full[p + 1]
            targets = min(actions, s - 1)
            if targets:
                end = offset + s - 1
                loss[row_index, end - targets:end] = loss_rows[i][actions - targets:]
            offset += aligned[i]
    total = float(loss.sum(dtype=np.float64))
    loss *= np.float32(1.0 / max(total, 1))
    out = {"input_ids": input_ids, "attention_mask": attention, "position_ids": positions,
           "loss_mask": loss}
    return {key: torch.from_numpy(array) for key, array in out.items()}


def _rows_of(examples, key: str) -> list:
    """One field of every example: lists as they are, tensors as NumPy arrays (a TensorDict
    batch: NumPy views of its jagged field's rows)."""
    if isinstance(examples, TensorDictBase):
        return _rows(examples[key])
    return [ex[key].numpy() if isinstance(ex[key], torch.Tensor) else ex[key] for ex in examples]

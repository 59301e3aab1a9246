"""minirl's rollout collation: prompts + responses -> one left-padded RL training batch.

Vectorized with NumPy: the token rows are concatenated once, and every token's (row, column)
is computed from the lengths, so no per-row Python padding loop runs.

    layout "left" (T = max(p + r), R = max r)       layout "two_segment" (P = max p)
        . . p p p r r      input_ids (B, T)             . p p r r .    input_ids (B, P + R)
        p p p r r r r                                   p p p r r r
              . r r r      per-token tensors (B, R):    r r .          per-token tensors (B, R):
              r r r r      right-aligned                r r r          left-aligned

It follows batchproof's `rl_batch.build_rl_batch` contract (tests/test_collate.py checks it),
except that it does not validate its input: minirl checks rollouts where they are made.
"""

from __future__ import annotations

import itertools
import logging

import numpy as np
import torch
from tensordict import TensorDict

logger = logging.getLogger(__name__)


def collate_rollouts(prompts, responses, *, pad_token_id, rewards=None, loss_masks=None,
                     logprobs=None, layout="left", max_seq_len=None, device=None) -> TensorDict:
    """Lay out B rollouts as one batch (see the module docstring)."""
    p = np.array([len(x) for x in prompts], dtype=np.int64)
    r = np.array([len(x) for x in responses], dtype=np.int64)
    batch, longest = len(p), int(r.max())
    if layout == "left":
        width = int((p + r).max())
        start = width - p - r
        response_start = longest - r  # right-aligned response columns
    else:
        width = int(p.max()) + longest
        start = int(p.max()) - p
        response_start = np.zeros_like(r)  # left-aligned
    if max_seq_len is not None and width > max_seq_len:
        logger.warning("batch width %d exceeds max_seq_len %d (not truncated)", width,
                       max_seq_len)

    lengths = p + r
    rows, within = _spans(lengths)
    columns = start[rows] + within
    rows_of_tokens = (itertools.chain(a, b) for a, b in zip(prompts, responses))
    tokens = np.fromiter(itertools.chain.from_iterable(rows_of_tokens), np.int64,
                         int(lengths.sum()))
    input_ids = np.full((batch, width), pad_token_id, dtype=np.int64)
    input_ids[rows, columns] = tokens
    attention = np.zeros((batch, width), dtype=np.int64)
    attention[rows, columns] = 1
    positions = np.maximum(np.cumsum(attention, axis=1) - 1, 0)

    response_rows, response_within = _spans(r)
    response_columns = response_start[response_rows] + response_within
    response_mask = np.zeros((batch, longest), dtype=np.int64)
    response_mask[response_rows, response_columns] = 1

    def per_token(values) -> np.ndarray:
        out = np.zeros((batch, longest), dtype=np.float32)
        flat = np.fromiter(itertools.chain.from_iterable(values), np.float64,
                           int(r.sum())).astype(np.float32)
        out[response_rows, response_columns] = flat
        return out

    fields = {"input_ids": input_ids, "attention_mask": attention, "position_ids": positions,
              "response_mask": response_mask,
              "loss_mask": response_mask.astype(np.float32) if loss_masks is None
              else per_token(loss_masks)}
    if rewards is not None:
        fields["rewards"] = per_token(_scalars_on_last_token(rewards, r))
    if logprobs is not None:
        fields["rollout_logprobs"] = per_token(logprobs)
    td = TensorDict({k: torch.from_numpy(v) for k, v in fields.items()}, batch_size=[batch],
                    device=device)
    td.set_non_tensor("max_response_length", longest)
    td.set_non_tensor("layout", layout)
    td.set_non_tensor("pad_token_id", pad_token_id)
    return td


def _spans(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every element of rows of these lengths: its row, and its index within the row."""
    rows = np.repeat(np.arange(len(lengths)), lengths)
    firsts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return rows, np.arange(int(lengths.sum())) - firsts


def _scalars_on_last_token(rewards, response_lengths) -> list[list[float]]:
    """A scalar reward is the outcome reward: it sits on the response's last token."""
    rows = []
    for value, length in zip(rewards, response_lengths):
        if isinstance(value, (int, float)):
            rows.append([0.0] * (int(length) - 1) + [value] if length else [])
        else:
            rows.append(value)
    return rows

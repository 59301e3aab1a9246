"""Reference `rl_batch`: prompts + responses → RL training batch (spec: rl_batch.md).

Plain Python loops over lists; tensors are made only at the end. Readable first, never optimized.

layout "left" (T = max(p+r), R = max r):          layout "two_segment" (P = max p):
    . . p p p r r        input_ids  (B, T)             . p p r r .      input_ids (B, P+R)
    . p p p r r r                                      p p p r r r
    p p p r r r r                                          response cols: [P, P+R)
          . r r r        response tensors (B, R),      r r .           response tensors (B, R),
          r r r r        right-aligned                 r r r           left-aligned

Router replay (docs/conventions.md, "Router replay"): a captured route sits on its token's slot
of the sequence tensors, the dummy route 0..topk-1 everywhere else (the router padding mask
True there); sample support sits on the response columns, a row of -1 elsewhere:

    left, c = 4 of 5 tokens captured:   routed_experts       . . a b c d .    (. the dummy route)
                                        router_padding_mask  T T F F F F T
    two_segment, same sample:           routed_experts       . a b c d . .
"""

from __future__ import annotations

import logging
import numbers
import operator

import torch
from tensordict import TensorDict

from batchproof.reference._checks import check_pad_token_id
from batchproof.reference._routes import (
    SUPPORT_PADDING,
    check_route_values,
    check_routes,
    check_sample_support,
    check_support_values,
    dummy_route,
    per_sample,
)

logger = logging.getLogger(__name__)

LAYOUTS = ("left", "two_segment")


def build_rl_batch(
    prompts,
    responses,
    *,
    pad_token_id,
    rewards=None,
    loss_masks=None,
    logprobs=None,
    layout="left",
    max_seq_len=None,
    device=None,
    routed_experts=None,
    sample_support=None,
) -> TensorDict:
    """Lay out B samples as one RL batch (see the module docstring for the two layouts).

    routed_experts: per sample, `[c_i, layers, topk]` routes of its first c_i tokens (router
        replay, docs/conventions.md): laid out as `routed_experts` `(B, T, layers, topk)` in the
        given dtype, route j on the column of the sample's token j, the dummy route
        `0..topk-1` on every other column (pads, uncaptured tokens), and
        `router_padding_mask` `(B, T)` bool, True exactly there.
    sample_support: per sample, `[r_i, top_k]` support rows of its response tokens: laid out as
        `sample_support` `(B, R, top_k)` on the response columns (aligned as `loss_mask`), rows
        of -1 elsewhere.
    """
    check_pad_token_id(pad_token_id)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    device = _output_device(device, prompts, responses)
    prompts = [_token_list(p, "prompts", i) for i, p in enumerate(_rows(prompts, "prompts"))]
    responses = [_token_list(r, "responses", i)
                 for i, r in enumerate(_rows(responses, "responses"))]
    if len(prompts) != len(responses):
        raise ValueError(
            f"prompts and responses must have the same length, got {len(prompts)} prompts "
            f"and {len(responses)} responses")
    if len(prompts) == 0:
        raise ValueError("prompts is empty: a batch needs at least one sample")
    response_lengths = [len(r) for r in responses]
    reward_rows = _per_token_values(rewards, "rewards", response_lengths, allow_scalar=True)
    loss_rows = _per_token_values(loss_masks, "loss_masks", response_lengths)
    logprob_rows = _per_token_values(logprobs, "logprobs", response_lengths)

    batch = len(prompts)
    max_response = max(response_lengths)
    if layout == "left":
        width = max(len(p) + len(r) for p, r in zip(prompts, responses))
    else:
        width = max(len(p) for p in prompts) + max_response
    if max_seq_len is not None and width > max_seq_len:
        logger.warning("batch sequence width %d exceeds max_seq_len %d (not truncated)",
                       width, max_seq_len)

    input_ids, attention, positions, response_mask = [], [], [], []
    for prompt, response in zip(prompts, responses):
        if layout == "left":
            left = width - len(prompt) - len(response)
            right = 0
        else:
            left = width - max_response - len(prompt)
            right = max_response - len(response)
        input_ids.append([pad_token_id] * left + prompt + response + [pad_token_id] * right)
        mask = [0] * left + [1] * (len(prompt) + len(response)) + [0] * right
        attention.append(mask)
        positions.append(_positions(mask))
        response_mask.append(_place([1] * len(response), max_response, layout, 0))

    out = {
        "input_ids": _tensor(input_ids, torch.int64, batch, width),
        "attention_mask": _tensor(attention, torch.int64, batch, width),
        "position_ids": _tensor(positions, torch.int64, batch, width),
        "response_mask": _tensor(response_mask, torch.int64, batch, max_response),
    }
    if loss_rows is None:
        loss_rows = [[float(v) for v in row] for row in response_mask]
    else:
        loss_rows = [_place(row, max_response, layout, 0.0) for row in loss_rows]
    out["loss_mask"] = _tensor(loss_rows, torch.float32, batch, max_response)
    if reward_rows is not None:
        rows = []
        for row, length in zip(reward_rows, response_lengths):
            if isinstance(row, float):  # a scalar reward sits on the last response token
                scalar = row
                row = [0.0] * length
                if length > 0:
                    row[-1] = scalar
            rows.append(_place(row, max_response, layout, 0.0))
        out["rewards"] = _tensor(rows, torch.float32, batch, max_response)
    if logprob_rows is not None:
        rows = [_place(row, max_response, layout, 0.0) for row in logprob_rows]
        out["rollout_logprobs"] = _tensor(rows, torch.float32, batch, max_response)
    # router replay: checked after everything else (an existing bad input raises what it did)
    route_spec, support_spec = _check_replay(
        routed_experts, sample_support, [len(p) + len(r) for p, r in zip(prompts, responses)],
        response_lengths)
    if route_spec is not None:
        out["routed_experts"], out["router_padding_mask"] = _laid_out_routes(
            routed_experts, prompts, responses, width, max_response, layout, route_spec)
    if support_spec is not None:
        out["sample_support"] = _laid_out_support(sample_support, response_lengths,
                                                  max_response, layout, support_spec)

    td = TensorDict({k: v.to(device) for k, v in out.items()}, batch_size=[batch])
    td.set_non_tensor("max_response_length", max_response)
    td.set_non_tensor("layout", layout)
    td.set_non_tensor("pad_token_id", pad_token_id)
    return td


def _check_replay(routed_experts, sample_support, token_counts, response_lengths):
    """The router-replay inputs, in the contract's order: the routes' structure, the support's
    structure, then the routes' values and the support's values (docs/rl_batch.md, Errors)."""
    route_spec = check_routes(routed_experts, token_counts)
    support_spec = check_sample_support(sample_support, response_lengths)
    if route_spec is not None:
        check_route_values(routed_experts)
    if support_spec is not None:
        check_support_values(sample_support)
    return route_spec, support_spec


def _laid_out_routes(routed_experts, prompts, responses, width, max_response, layout, spec):
    """(routes (B, T, layers, topk), router_padding_mask (B, T)): row i's captured route j on
    the column of its token j, the dummy route (mask True) on every other column."""
    dummy = [dummy_route(spec.topk) for _ in range(spec.layers)]
    routes, mask = [], []
    entries = per_sample(routed_experts, "routed_experts", len(prompts))
    for entry, prompt, response in zip(entries, prompts, responses):
        tokens = len(prompt) + len(response)
        if layout == "left":
            left = width - tokens
        else:
            left = width - max_response - len(prompt)
        captured = entry.tolist()
        for column in range(width):
            j = column - left  # the sample's token on this column (a pad when out of range)
            if 0 <= j < len(captured):
                routes.append(captured[j])
                mask.append(False)
            else:
                routes.append(dummy)
                mask.append(True)
    batch = len(prompts)
    return (torch.tensor(routes, dtype=spec.dtype).reshape(batch, width, spec.layers, spec.topk),
            torch.tensor(mask, dtype=torch.bool).reshape(batch, width))


def _laid_out_support(sample_support, response_lengths, max_response, layout, spec):
    """(B, R, top_k): row i's support rows on its response columns (right-aligned in "left",
    left-aligned in "two_segment", as loss_mask), rows of -1 on the other columns."""
    padding = [SUPPORT_PADDING] * spec.top_k
    rows = []
    entries = per_sample(sample_support, "sample_support", len(response_lengths))
    for entry in entries:
        rows += _place(entry.tolist(), max_response, layout, padding)
    batch = len(response_lengths)
    return torch.tensor(rows, dtype=spec.dtype).reshape(batch, max_response, spec.top_k)


def response_values(values, response_mask) -> list[torch.Tensor]:
    """Row i: the last `n_i = response_mask[i].sum()` entries of `values[i]` (left layout)."""
    if values.dim() != 2 or response_mask.dim() != 2:
        raise ValueError("values and response_mask must be 2-D (B, R) tensors")
    if values.shape != response_mask.shape:
        raise ValueError(
            f"values {tuple(values.shape)} and response_mask {tuple(response_mask.shape)} "
            "must have the same shape")
    out = []
    for i in range(values.shape[0]):
        row = values[i].tolist()
        count = int(sum(response_mask[i].tolist()))
        kept = []
        for j in range(len(row) - count, len(row)):  # not row[-count:]: -0 is the whole row
            kept.append(row[j])
        out.append(torch.tensor(kept, dtype=values.dtype, device=values.device))
    return out


def _rows(rows, name, what="a sequence of token sequences"):
    if isinstance(rows, torch.Tensor) and rows.is_nested:
        return list(rows.unbind())
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__"):
        raise TypeError(f"{name} must be {what}, got {type(rows).__name__}")
    return list(rows)


def _token_list(row, name, index):
    if isinstance(row, torch.Tensor):
        if row.dim() != 1:
            raise ValueError(f"{name}[{index}] must be 1-D, got shape {tuple(row.shape)}")
        if row.is_floating_point() or row.dtype == torch.bool:
            raise TypeError(f"{name}[{index}] must hold integer token ids, got {row.dtype}")
        return [int(v) for v in row.tolist()]
    if isinstance(row, (str, bytes)) or not hasattr(row, "__iter__"):
        raise TypeError(f"{name}[{index}] must be a sequence of ints, got {type(row).__name__}")
    out = []
    for value in row:
        try:
            out.append(operator.index(value))  # ints and int-likes; never a truncated float
        except TypeError:
            raise TypeError(f"{name}[{index}] must hold integer token ids, "
                            f"got {type(value).__name__}") from None
    return out


def _per_token_values(values, name, response_lengths, allow_scalar=False):
    """One float list per sample (or one float, for a scalar reward), checked against r_i."""
    if values is None:
        return None
    values = _rows(values, name, "a list with one entry per sample")
    if len(values) != len(response_lengths):
        raise ValueError(f"{name} must have one entry per sample: got {len(values)} entries "
                         f"for {len(response_lengths)} samples")
    rows = []
    for i, (row, length) in enumerate(zip(values, response_lengths)):
        if isinstance(row, torch.Tensor):
            if row.dim() == 0 and allow_scalar:
                rows.append(float(row.detach().float().item()))
                continue
            if row.dim() != 1:
                raise ValueError(f"{name}[{i}] must be a 1-D list of per-token values, "
                                 f"got a tensor of shape {tuple(row.shape)}")
            row = row.detach().float().tolist()
        elif isinstance(row, numbers.Real) and not isinstance(row, bool):
            if not allow_scalar:
                raise ValueError(f"{name}[{i}] must be a list of {length} per-token values, "
                                 "got a scalar")
            rows.append(float(torch.tensor(row, dtype=torch.float32).item()))
            continue
        elif isinstance(row, (str, bytes)) or not hasattr(row, "__len__"):
            raise TypeError(f"{name}[{i}] must be a list of floats, got {type(row).__name__}")
        row = [_float32(v, name, i) for v in row]
        if len(row) != length:
            raise ValueError(f"{name}[{i}] has {len(row)} entries, but response {i} has "
                             f"{length} tokens")
        rows.append(row)
    return rows


def _float32(value, name, index):
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise ValueError(f"{name}[{index}] must be a 1-D list, got a nested tensor entry")
        value = value.item()
    if isinstance(value, (list, tuple)):
        raise ValueError(f"{name}[{index}] must be a 1-D list of per-token values, "
                         "got a nested list")
    if not isinstance(value, numbers.Real):  # a bool is 0.0 / 1.0, as in a bool tensor row
        raise TypeError(f"{name}[{index}] must hold floats, got {type(value).__name__}")
    return float(torch.tensor(float(value), dtype=torch.float32).item())


def _place(row, width, layout, fill):
    """Right-align `row` in `width` columns (left layout) or left-align it (two_segment)."""
    padding = [fill] * (width - len(row))
    return padding + list(row) if layout == "left" else list(row) + padding


def _positions(mask):
    """max(cumsum(mask) - 1, 0): 0 on the left pad, 0, 1, 2, ... on real tokens, repeated after."""
    out, running = [], 0
    for m in mask:
        running += m
        out.append(max(running - 1, 0))
    return out


def _tensor(rows, dtype, batch, width):
    return torch.tensor(rows, dtype=dtype).reshape(batch, width)


def _output_device(device, prompts, responses):
    """`device` if given, else the device of the first tensor input, else the CPU."""
    if device is not None:
        return torch.device(device)
    for rows in (prompts, responses):
        if isinstance(rows, torch.Tensor):
            return rows.device
        for row in rows if hasattr(rows, "__iter__") else ():
            if isinstance(row, torch.Tensor):
                return row.device
    return torch.device("cpu")

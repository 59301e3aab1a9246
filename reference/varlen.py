"""Reference `varlen`: packed variable-length rows, and logprobs from them (spec: varlen.md).

Plain Python loops over lists; tensors are made only at the end. Readable first, never optimized.

One packed row (three samples, the middle one empty, `pad_to_multiple=4`):

    sample        0 0 0 0 0 | 2 2 2 | .         p prompt, r response, . tail pad
    tokens        p p p r r | p r r | .
    position_ids  0 1 2 3 4 | 0 1 2 | 0         restart at 0 per sample; the pad is its own segment
    cu_seqlens    0         5       8   9       empty samples add no boundary
    target_index        3 4     6 7             the response tokens
    predict_index     2 3     5 6               the logits that score them (one to the left)

`packed_segments` reads the segments of packed rows back from their `position_ids` (the boundary
contract every consumer shares: flash-attention's `cu_seqlens`, a mask's blocks, a Mamba `seq_idx`):

    position_ids  0 1 2 0 0 1 | 0 1 0 1 2 3     a segment starts wherever the (text) position is
    seq_idx       0 0 0 1 2 2 | 0 0 1 1 1 1     position_ids_start, and at every row's start
    cu_seqlens    0     3 4     6   8       12  over the flattened rows (int32)

`unpad` / `repad` follow flash-attn's `bert_padding.unpad_input` / `pad_input`:

    attention_mask  1 0 1 1      x rows a b c d      values   a c d    indices  0 2 3
                    0 1 1 0             e f g h               f g               5 6
    cu_seqlens 0 3 5, max_seqlen 3; repad(values, indices, 2, 4) scatters back into zeros.
"""

from __future__ import annotations

import numbers

import torch
from tensordict import TensorDict, TensorDictBase

from batchproof.reference._checks import check_pad_token_id
from batchproof.reference._routes import (
    check_route_values,
    check_router_padding_mask,
    check_routes,
    check_sample_support,
    check_support_values,
    check_token_route_values,
    check_token_routes,
    dummy_route,
    per_sample,
)

PACKING_MODES = ("auto", "position_ids", "mask", "rows")


# --------------------------------------------------------------------------------------------
# pack_varlen
# --------------------------------------------------------------------------------------------


def pack_varlen(
    prompts, responses, *, pad_to_multiple=1, pad_token_id=0, position_ids_start=0, device=None,
    routed_experts=None, sample_support=None,
) -> TensorDict:
    """Concatenate every sample's prompt + response into one row (see the module docstring);
    positions count from `position_ids_start` in every sample and in the tail pad.

    routed_experts: per sample, `[c_k, layers, topk]` routes of its first c_k tokens (router
        replay, docs/conventions.md): packed as `routed_experts` `(1, N, layers, topk)` in the
        given dtype, the dummy route `0..topk-1` at every slot without a captured route (the
        uncaptured tokens, the tail pad), and `router_padding_mask` `(1, N)` True exactly there.
    sample_support: per sample, `[r_k, top_k]` support rows of its response tokens: packed as
        `sample_support` `(sum r, top_k)`, row e the support of the token at `target_index[e]`.
    """
    check_pad_token_id(pad_token_id)
    _check_positive_int(pad_to_multiple, "pad_to_multiple")
    _check_start(position_ids_start)
    device = _output_device(device, prompts, responses)
    prompts, responses = _samples(prompts, responses)

    input_ids, position_ids, cu_seqlens = [], [], [0]
    predict_index, target_index, sample_index = [], [], []
    offset = 0
    for k, (prompt, response) in enumerate(zip(prompts, responses)):
        length = len(prompt) + len(response)
        input_ids += prompt + response
        position_ids += [position_ids_start + i for i in range(length)]
        for j in range(len(response)):
            target_index.append(offset + len(prompt) + j)
            predict_index.append(offset + len(prompt) - 1 + j)
            sample_index.append(k)
        offset += length
        if length > 0:
            cu_seqlens.append(offset)
    total = _round_up(offset, pad_to_multiple)
    pad = total - offset
    input_ids += [pad_token_id] * pad
    position_ids += [position_ids_start + i for i in range(pad)]
    if pad > 0:
        cu_seqlens.append(total)
    max_seqlen = max([len(p) + len(r) for p, r in zip(prompts, responses)] + [pad])

    out = TensorDict(
        {
            "input_ids": torch.tensor([input_ids], dtype=torch.int64).reshape(1, total),
            "position_ids": torch.tensor([position_ids], dtype=torch.int64).reshape(1, total),
            "cu_seqlens": torch.tensor(cu_seqlens, dtype=torch.int32),
            "prompt_lengths": torch.tensor([len(p) for p in prompts], dtype=torch.int64),
            "response_lengths": torch.tensor([len(r) for r in responses], dtype=torch.int64),
            "predict_index": torch.tensor(predict_index, dtype=torch.int64),
            "target_index": torch.tensor(target_index, dtype=torch.int64),
            "sample_index": torch.tensor(sample_index, dtype=torch.int64),
        },
        batch_size=[],
    ).to(device)  # (a token id beyond int64 raises here, before the router-replay checks)
    route_spec, support_spec = _check_replay(routed_experts, sample_support, prompts, responses)
    if route_spec is not None:
        routes, mask = _packed_routes(routed_experts, prompts, responses, total, route_spec)
        out["routed_experts"] = routes.to(device)
        out["router_padding_mask"] = mask.to(device)
    if support_spec is not None:
        out["sample_support"] = _packed_support(sample_support, responses, support_spec).to(device)
    out.set_non_tensor("max_seqlen", max_seqlen)
    return out


def _check_replay(routed_experts, sample_support, prompts, responses):
    """The router-replay inputs, in the contract's order: the routes' structure, the support's
    structure, then the routes' values and the support's values (docs/varlen.md, Errors)."""
    route_spec = check_routes(routed_experts, [len(p) + len(r) for p, r in zip(prompts, responses)])
    support_spec = check_sample_support(sample_support, [len(r) for r in responses])
    if route_spec is not None:
        check_route_values(routed_experts)
    if support_spec is not None:
        check_support_values(sample_support)
    return route_spec, support_spec


def _packed_routes(routed_experts, prompts, responses, total, spec):
    """(routes (1, N, layers, topk), router_padding_mask (1, N)): sample k's captured route j at
    its token j's slot, the dummy route (mask True) at every other slot."""
    dummy = [dummy_route(spec.topk) for _ in range(spec.layers)]
    routes, mask = [], []
    for entry, prompt, response in zip(per_sample(routed_experts, "routed_experts", len(prompts)),
                                       prompts, responses):
        captured = entry.tolist()
        for j in range(len(prompt) + len(response)):
            if j < len(captured):
                routes.append(captured[j])
                mask.append(False)
            else:
                routes.append(dummy)
                mask.append(True)
    while len(routes) < total:  # the tail pad
        routes.append(dummy)
        mask.append(True)
    shape = (1, total, spec.layers, spec.topk)
    return (torch.tensor(routes, dtype=spec.dtype).reshape(shape),
            torch.tensor(mask, dtype=torch.bool).reshape(1, total))


def _packed_support(sample_support, responses, spec) -> torch.Tensor:
    """(sum r, top_k): the support rows of every response token, in target_index order."""
    rows = []
    for entry in per_sample(sample_support, "sample_support", len(responses)):
        rows += entry.tolist()
    return torch.tensor(rows, dtype=spec.dtype).reshape(len(rows), spec.top_k)


# --------------------------------------------------------------------------------------------
# packed_segments: the boundaries of packed rows, from their position_ids
# --------------------------------------------------------------------------------------------


def packed_segments(position_ids, *, position_ids_start=0) -> TensorDict:
    """The segments (packed samples) of every row of `position_ids`, read from the positions.

    position_ids: an integer tensor, (B, L), or (3, B, L) / (4, B, L) mRoPE positions, whose
    first plane is the text axis (mRoPE's temporal positions, or transformers' text row) and the
    only one read. A segment starts at the first column of every row and wherever the text
    position equals `position_ids_start`; it never spans two rows. Within a segment a (B, L)
    row counts up by exactly 1; an mRoPE text axis may stay or jump but never decreases.

    Returns a TensorDict (batch_size []): `cu_seqlens` int32, the start of every segment over
    the flattened rows (row b's column j is b * L + j), then B * L; `seq_idx` int32 (B, L), the
    segment of each token, counted from 0 in every row; `max_seqlen`, the longest segment (a
    Python int, 0 when there is no token).
    """
    rows, shape = _text_rows(position_ids, position_ids_start)
    width = shape[-1]
    cu_seqlens, seq_idx, lengths = [0], [], []
    for b, row in enumerate(rows):
        numbers, segment = [], -1
        for j, position in enumerate(row):
            if j == 0 or position == position_ids_start:  # a new segment
                segment += 1
                if b * width + j > 0:
                    cu_seqlens.append(b * width + j)
                lengths.append(0)
            lengths[-1] += 1
            numbers.append(segment)
        seq_idx.append(numbers)
    if rows and width:
        cu_seqlens.append(len(rows) * width)
    out = TensorDict({
        "cu_seqlens": torch.tensor(cu_seqlens, dtype=torch.int32),
        "seq_idx": torch.tensor(seq_idx, dtype=torch.int32).reshape(shape[-2], width),
    }, batch_size=[]).to(position_ids.device)
    out.set_non_tensor("max_seqlen", max(lengths, default=0))
    return out


def _check_start(position_ids_start) -> None:
    _check_int(position_ids_start, "position_ids_start")
    if position_ids_start < 0:
        raise ValueError(f"position_ids_start must be >= 0, got {position_ids_start}")


def _text_rows(position_ids, start) -> tuple[list[list[int]], tuple[int, ...]]:
    """The text axis of `position_ids` as lists (B rows of L), validated, and its shape."""
    if not isinstance(position_ids, torch.Tensor):
        raise TypeError(f"position_ids must be a tensor, got {type(position_ids).__name__}")
    dtype = position_ids.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise TypeError(f"position_ids must hold integers, got {dtype}")
    _check_start(start)
    shape = tuple(position_ids.shape)
    if len(shape) == 2:
        text, name, mrope = position_ids, "position_ids", False
    elif len(shape) == 3 and shape[0] in (3, 4):
        text, name, mrope = position_ids[0], "position_ids[0]", True
    else:
        raise ValueError(f"position_ids must be (B, L), or (3, B, L) / (4, B, L) mRoPE "
                         f"positions, got shape {shape}")
    rows = text.tolist()
    for b, row in enumerate(rows):
        for j, position in enumerate(row):
            if j == 0:
                if position != start:
                    raise ValueError(f"{name}[{b}] starts at {position}, not at "
                                     f"position_ids_start={start}: a row begins a segment")
            elif position != start and not (position >= row[j - 1] if mrope
                                             else position == row[j - 1] + 1):
                rule = ("never decreases within a segment" if mrope
                        else "counts up by 1 within a segment")
                raise ValueError(f"{name}[{b}] holds {position} after {row[j - 1]} at column "
                                 f"{j}: a packed row restarts at position_ids_start={start} "
                                 f"or {rule}")
    return rows, shape


# --------------------------------------------------------------------------------------------
# unpack_response_logprobs
# --------------------------------------------------------------------------------------------


def unpack_response_logprobs(flat_logprobs, packed, *, width=None) -> torch.Tensor:
    """Per-sample response logprobs, right-aligned in a (B, width) float32 tensor, zeros elsewhere.

    `flat_logprobs` holds one value per `predict_index` entry, or one per packed position ((N,) or
    (1, N)), in which case the values at `predict_index` are taken.
    """
    predict_index, response_lengths, total = _packed_fields(packed)
    values = _flat_values(flat_logprobs, predict_index, total)
    width = _width(width, response_lengths)

    rows, start = [], 0
    for length in response_lengths:
        row = [0.0] * (width - length)
        for j in range(length):
            row.append(values[start + j])
        rows.append(row)
        start += length
    out = torch.tensor(rows, dtype=torch.float32).reshape(len(rows), width)
    return out.to(flat_logprobs.device)


def _packed_fields(packed) -> tuple[list[int], list[int], int]:
    if not isinstance(packed, TensorDictBase):
        raise TypeError(f"packed must be the TensorDict returned by pack_varlen, "
                        f"got {type(packed).__name__}")
    for key in ("input_ids", "predict_index", "response_lengths"):
        if key not in packed.keys():
            raise ValueError(f"packed has no {key!r} entry: pass the output of pack_varlen")
    predict_index = packed["predict_index"].tolist()
    response_lengths = packed["response_lengths"].tolist()
    if len(predict_index) != sum(response_lengths):
        raise ValueError(f"packed is inconsistent: {len(predict_index)} predict_index entries "
                         f"for {sum(response_lengths)} response tokens")
    return predict_index, response_lengths, packed["input_ids"].shape[-1]


def _flat_values(flat_logprobs, predict_index, total) -> list[float]:
    if not isinstance(flat_logprobs, torch.Tensor):
        raise TypeError(f"flat_logprobs must be a tensor, got {type(flat_logprobs).__name__}")
    if not flat_logprobs.is_floating_point():
        raise TypeError(f"flat_logprobs must hold floats, got {flat_logprobs.dtype}")
    shape = tuple(flat_logprobs.shape)
    values = flat_logprobs.detach().float().cpu().reshape(-1).tolist()
    if shape == (len(predict_index),):
        return values
    if shape in ((total,), (1, total)):
        return [values[i] for i in predict_index]
    raise ValueError(f"flat_logprobs must have shape ({len(predict_index)},) (one value per "
                     f"response token) or ({total},) / (1, {total}) (one per packed position), "
                     f"got {shape}")


def _width(width, response_lengths) -> int:
    longest = max(response_lengths, default=0)
    if width is None:
        return longest
    _check_int(width, "width")
    if width < longest:
        raise ValueError(f"width {width} is narrower than the longest response ({longest})")
    return width


# --------------------------------------------------------------------------------------------
# unpad / repad (flash-attn bert_padding semantics)
# --------------------------------------------------------------------------------------------


def unpad(x, attention_mask):
    """(values, indices, cu_seqlens, max_seqlen) of the positions where `attention_mask` is 1.

    indices are row-major flat positions (int64); cu_seqlens is int32 `[0, cumsum(row sums)]`;
    values = `x.reshape(B*S, ...)[indices]`. Masks need not be contiguous.
    """
    mask = _check_unpad_args(x, attention_mask)
    batch, seqlen = len(mask), x.shape[1]
    indices, values, cu_seqlens, row_sums = [], [], [0], []
    for b in range(batch):
        kept = 0
        for s in range(seqlen):
            if mask[b][s] == 1:
                indices.append(b * seqlen + s)
                values.append(x[b, s])
                kept += 1
        row_sums.append(kept)
        cu_seqlens.append(cu_seqlens[-1] + kept)
    if values:
        values = torch.stack(values)
    else:
        values = x.new_zeros((0, *x.shape[2:]))
    return (
        values,
        torch.tensor(indices, dtype=torch.int64, device=x.device),
        torch.tensor(cu_seqlens, dtype=torch.int32, device=x.device),
        max(row_sums, default=0),
    )


def _check_unpad_args(x, attention_mask) -> list[list[int]]:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a tensor, got {type(attention_mask).__name__}")
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise TypeError(f"attention_mask must be bool or integer, got {attention_mask.dtype}")
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be 2-D (batch, seqlen), got shape "
                         f"{tuple(attention_mask.shape)}")
    if x.dim() < 2 or tuple(x.shape[:2]) != tuple(attention_mask.shape):
        raise ValueError(f"x must have shape (batch, seqlen, ...) = "
                         f"{tuple(attention_mask.shape)} + (...), got {tuple(x.shape)}")
    if x.device != attention_mask.device:
        raise ValueError(f"x is on {x.device} but attention_mask is on {attention_mask.device}")
    mask = [[int(v) for v in row] for row in attention_mask.tolist()]
    for b, row in enumerate(mask):
        for v in row:
            if v not in (0, 1):
                raise ValueError(f"attention_mask[{b}] holds {v}: a mask holds only 0 and 1")
    return mask


def repad(values, indices, batch, seqlen) -> torch.Tensor:
    """Scatter `values` (nnz, ...) to the flat `indices` of a zero (batch, seqlen, ...) tensor."""
    index_list = _check_repad_args(values, indices, batch, seqlen)
    rows = [None] * (batch * seqlen)
    for i, flat in enumerate(index_list):
        rows[flat] = values[i]
    zero = values.new_zeros(values.shape[1:])
    rows = [zero if row is None else row for row in rows]
    if rows:
        out = torch.stack(rows)
    else:
        out = values.new_zeros((0, *values.shape[1:]))
    return out.reshape(batch, seqlen, *values.shape[1:])


def _check_repad_args(values, indices, batch, seqlen, name="values") -> list[int]:
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(values).__name__}")
    if not isinstance(indices, torch.Tensor):
        raise TypeError(f"indices must be a tensor, got {type(indices).__name__}")
    if indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool:
        raise TypeError(f"indices must hold integers, got {indices.dtype}")
    _check_int(batch, "batch")
    _check_int(seqlen, "seqlen")
    if batch < 0 or seqlen < 0:
        raise ValueError(f"batch and seqlen must be >= 0, got {batch} and {seqlen}")
    if values.dim() < 1:
        raise ValueError(f"{name} must have a first (token) dimension, got a 0-d tensor")
    if indices.dim() != 1 or indices.shape[0] != values.shape[0]:
        raise ValueError(f"indices must be 1-D with one entry per row of {name} "
                         f"({values.shape[0]}), got shape {tuple(indices.shape)}")
    index_list = indices.tolist()
    seen = set()
    for i, flat in enumerate(index_list):
        if not 0 <= flat < batch * seqlen:
            raise ValueError(f"indices[{i}] = {flat} is outside [0, {batch * seqlen}) "
                             f"(batch {batch} x seqlen {seqlen})")
        if flat in seen:
            raise ValueError(f"indices[{i}] = {flat} repeats an earlier index")
        seen.add(flat)
    return index_list


def repad_routes(routed_experts, indices, batch, seqlen, *, router_padding_mask=None
                 ) -> TensorDict:
    """`repad` for routes: the routes of unpadded tokens (nnz, layers, topk) back at their flat
    `indices` of a (batch, seqlen, layers, topk) layout, the dummy route `0..topk-1` (never
    zeros) at every slot no route lands in. Returns a TensorDict (batch_size [batch, seqlen]):
    `routed_experts` in the given dtype and `router_padding_mask` (bool), True at those slots
    and where the given `router_padding_mask` (nnz,) marks an uncaptured token."""
    index_list = _check_repad_args(routed_experts, indices, batch, seqlen, "routed_experts")
    spec = check_token_routes(routed_experts, len(index_list))
    check_token_route_values(routed_experts)
    given = _unpadded_mask(router_padding_mask, len(index_list))
    dummy = [dummy_route(spec.topk) for _ in range(spec.layers)]
    routes = [dummy] * (batch * seqlen)
    mask = [True] * (batch * seqlen)
    values = routed_experts.tolist()
    for i, flat in enumerate(index_list):
        routes[flat] = dummy if given[i] else values[i]
        mask[flat] = given[i]
    out = TensorDict({
        "routed_experts": torch.tensor(routes, dtype=spec.dtype).reshape(
            batch, seqlen, spec.layers, spec.topk),
        "router_padding_mask": torch.tensor(mask, dtype=torch.bool).reshape(batch, seqlen),
    }, batch_size=[batch, seqlen])
    return out.to(routed_experts.device)


def _unpadded_mask(router_padding_mask, tokens: int) -> list[bool]:
    """The router padding mask of the unpadded tokens (all False when None)."""
    if router_padding_mask is None:
        return [False] * tokens
    check_router_padding_mask(router_padding_mask, tokens)
    return router_padding_mask.tolist()


# --------------------------------------------------------------------------------------------
# response_logprobs: the dense oracle
# --------------------------------------------------------------------------------------------


def response_logprobs(
    model,
    prompts,
    responses,
    *,
    max_tokens_per_batch=None,
    pad_to_multiple=1,
    packing="auto",
    chunk_size=1024,
    with_grad=False,
) -> torch.Tensor:
    """Per-token response logprobs, (B, max r) float32, right-aligned, zeros elsewhere.

    The oracle: each sample alone, one dense forward of `prompt + response`, `log_softmax` in
    float32, response token j scored by the logit at position `p - 1 + j`. The packing keywords
    are validated like `impl/` does and otherwise have no effect here.
    """
    vocab = _check_model(model)
    _check_logprob_options(max_tokens_per_batch, pad_to_multiple, packing, chunk_size, with_grad)
    prompts, responses = _samples(prompts, responses)
    _check_vocab(prompts, "prompts", vocab)
    _check_vocab(responses, "responses", vocab)
    _check_budget(prompts, responses, max_tokens_per_batch)

    device = next(model.parameters()).device
    width = max(len(r) for r in responses)
    rows = []
    with torch.set_grad_enabled(with_grad):
        for prompt, response in zip(prompts, responses):
            scored = []
            if response:
                ids = torch.tensor([prompt + response], dtype=torch.int64, device=device)
                logits = model(input_ids=ids, use_cache=False).logits[0]
                logprobs = torch.log_softmax(logits.float(), dim=-1)
                for j, token in enumerate(response):
                    scored.append(logprobs[len(prompt) - 1 + j, token])
            zero = torch.zeros((), dtype=torch.float32, device=device)
            rows.append([zero] * (width - len(response)) + scored)
        if width == 0:
            return torch.zeros((len(rows), 0), dtype=torch.float32, device=device)
        return torch.stack([torch.stack(row) for row in rows])


def _check_model(model) -> int:
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise TypeError(f"model must be a transformers causal LM (an nn.Module with a config), "
                        f"got {type(model).__name__}")
    return int(model.get_input_embeddings().num_embeddings)


def _check_logprob_options(max_tokens_per_batch, pad_to_multiple, packing, chunk_size, with_grad):
    if max_tokens_per_batch is not None:
        _check_positive_int(max_tokens_per_batch, "max_tokens_per_batch")
    _check_positive_int(pad_to_multiple, "pad_to_multiple")
    if packing not in PACKING_MODES:
        raise ValueError(f"packing must be one of {PACKING_MODES}, got {packing!r}")
    _check_positive_int(chunk_size, "chunk_size")
    if not isinstance(with_grad, bool):
        raise TypeError(f"with_grad must be a bool, got {type(with_grad).__name__}")


def _check_vocab(rows, name, vocab) -> None:
    for k, row in enumerate(rows):
        for token in row:
            if not 0 <= token < vocab:
                raise ValueError(f"{name}[{k}] holds token id {token}, outside the model's "
                                 f"vocabulary [0, {vocab})")


def _check_budget(prompts, responses, max_tokens_per_batch) -> None:
    if max_tokens_per_batch is None:
        return
    for k, (prompt, response) in enumerate(zip(prompts, responses)):
        if len(prompt) + len(response) > max_tokens_per_batch:
            raise ValueError(f"sample {k} has {len(prompt) + len(response)} tokens, more than "
                             f"max_tokens_per_batch={max_tokens_per_batch}")


# --------------------------------------------------------------------------------------------
# input validation shared by pack_varlen and response_logprobs
# --------------------------------------------------------------------------------------------


def _samples(prompts, responses) -> tuple[list[list[int]], list[list[int]]]:
    """Token lists per sample, validated in this order: rows, counts, non-empty, p == 0 < r."""
    prompts = [_token_list(row, "prompts", k) for k, row in enumerate(_rows(prompts, "prompts"))]
    responses = [_token_list(row, "responses", k)
                 for k, row in enumerate(_rows(responses, "responses"))]
    if len(prompts) != len(responses):
        raise ValueError(f"prompts and responses must have the same length, got {len(prompts)} "
                         f"prompts and {len(responses)} responses")
    if not prompts:
        raise ValueError("prompts is empty: a batch needs at least one sample")
    for k, (prompt, response) in enumerate(zip(prompts, responses)):
        if len(prompt) == 0 and len(response) > 0:
            raise ValueError(
                f"sample {k} has an empty prompt and a response of {len(response)} tokens: its "
                "first response token has no logit in its own segment (packed, it would read "
                "the previous sample's last logit)")
    return prompts, responses


def _rows(rows, name) -> list:
    if isinstance(rows, torch.Tensor) and rows.is_nested:
        return list(rows.unbind())
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__"):
        raise TypeError(f"{name} must be a sequence of token sequences, got {type(rows).__name__}")
    return list(rows)


def _token_list(row, name, index) -> list[int]:
    if isinstance(row, torch.Tensor):
        if row.dim() != 1:
            raise ValueError(f"{name}[{index}] must be 1-D, got shape {tuple(row.shape)}")
        if row.is_floating_point() or row.is_complex() or row.dtype == torch.bool:
            raise TypeError(f"{name}[{index}] must hold integer token ids, got {row.dtype}")
        return [int(v) for v in row.tolist()]
    if isinstance(row, (str, bytes)) or not hasattr(row, "__iter__"):
        raise TypeError(f"{name}[{index}] must be a sequence of ints, got {type(row).__name__}")
    out = []
    for value in row:
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise TypeError(f"{name}[{index}] must hold ints, got {type(value).__name__}")
        out.append(int(value))
    return out


def _check_int(value, name) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")


def _check_positive_int(value, name) -> None:
    _check_int(value, name)
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def _round_up(value, multiple) -> int:
    while value % multiple != 0:
        value += 1
    return value


def _output_device(device, prompts, responses) -> torch.device:
    """`device` if given, else the device of the first tensor input, else the CPU."""
    if device is not None:
        return torch.device(device)
    for rows in (prompts, responses):
        if isinstance(rows, torch.Tensor):
            return rows.device
        for row in rows if isinstance(rows, (list, tuple)) else ():
            if isinstance(row, torch.Tensor):
                return row.device
    return torch.device("cpu")

"""Reference `cp`: context parallelism on packed rows (spec: docs/cp.md).

Plain Python loops over lists; tensors are made only at the end. Readable first, never optimized.

    a packed row of lengths 5, 0, 2, cp = 2: every sequence padded to a multiple of 2·cp = 4

    padded stream   a a a a a . . . | b b . .       cu_seqlens [0, 5, 5, 7] (real)
    position_ids    0 1 2 3 4 5 6 7 | 0 1 2 3       cu_seqlens_padded [0, 8, 8, 12]
    zigzag chunks   0 0 1 1 2 2 3 3 | 0 1 2 3       rank r holds chunks r and 2·cp-1-r
    rank 0          a a         . . | b     .
    rank 1              a a a a     |   b .
    contiguous      rank 0 holds stream positions 0..5, rank 1 positions 6..11
"""

from __future__ import annotations

import numbers

import torch
from tensordict import TensorDict, TensorDictBase

from batchproof.reference._checks import check_token_id
from batchproof.reference._routes import (
    check_router_padding_mask,
    check_token_route_values,
    check_token_routes,
    dummy_route,
)

LAYOUTS = ("zigzag", "contiguous")
BOUNDARIES = ("cu_seqlens", "cu_seqlens_padded")


# --------------------------------------------------------------------------------------------
# the argument checks (impl/ imports them: the same messages, in the same order)
# --------------------------------------------------------------------------------------------


def check_cp_size(cp_size) -> None:
    if not isinstance(cp_size, int) or isinstance(cp_size, bool):
        raise TypeError(f"cp_size must be an int, got {type(cp_size).__name__}")
    if cp_size < 1:
        raise ValueError(f"cp_size must be >= 1, got {cp_size}")


def check_layout(layout) -> None:
    if not isinstance(layout, str):
        raise TypeError(f"layout must be a str, got {type(layout).__name__}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def check_cp_rank(cp_rank, cp_size) -> None:
    if cp_rank is None:
        return
    if not isinstance(cp_rank, int) or isinstance(cp_rank, bool):
        raise TypeError(f"cp_rank must be an int or None, got {type(cp_rank).__name__}")
    if not 0 <= cp_rank < cp_size:
        raise ValueError(f"cp_rank must be in [0, {cp_size}) for cp_size {cp_size}, got {cp_rank}")


def multiple(cp_size: int) -> int:
    """What every padded sequence length is a multiple of: 2·cp (two chunks per rank), 1 for
    cp = 1 (nothing is split)."""
    return 2 * cp_size if cp_size > 1 else 1


def check_id_dtype(dtype: torch.dtype, name: str) -> None:
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got {dtype}")


def check_row_shape(shape: tuple, name: str) -> None:
    """A per-token argument given as a tensor: (T,) or one packed row (1, T)."""
    if len(shape) == 1 or (len(shape) == 2 and shape[0] == 1):
        return
    raise ValueError(f"{name} must be 1-D (T,) or one row (1, T), got shape {tuple(shape)}")


def check_boundary_tensor(value: torch.Tensor, name: str) -> None:
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer boundaries, got {value.dtype}")
    if value.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(value.shape)}")


def empty_boundaries_error(name: str) -> ValueError:
    return ValueError(f"{name} is empty: it needs at least its first boundary, 0")


def first_boundary_error(name: str, first: int) -> ValueError:
    return ValueError(f"{name} must start at 0, got {name}[0] = {first}")


def decreasing_error(name: str, i: int, low: int, high: int) -> ValueError:
    return ValueError(f"{name}[{i + 1}] = {low} is below {name}[{i}] = {high}: sequence {i} "
                      "would have a negative length")


def end_error(name: str, last: int, what: str, length: int) -> ValueError:
    return ValueError(f"{name} must end at the length of {what} ({length}), got {name}[-1] = "
                      f"{last}")


def count_error(name: str, count: int, expected: int) -> ValueError:
    return ValueError(f"{name} has {count} entries, cu_seqlens has {expected}: one boundary per "
                      "sequence each")


def overfull_error(name: str, i: int, real: int, padded: int) -> ValueError:
    return ValueError(f"sequence {i} has {real} real tokens but {padded} positions in {name}: "
                      "the padded span must hold the real tokens")


def zigzag_multiple_error(name: str, i: int, padded: int, cp_size: int) -> ValueError:
    return ValueError(f"sequence {i} spans {padded} positions in {name}, not a multiple of "
                      f"2·cp_size = {2 * cp_size}: the zigzag layout cuts every sequence into "
                      f"{2 * cp_size} equal chunks (pad it with pad_for_cp)")


def contiguous_multiple_error(total: int, cp_size: int) -> ValueError:
    return ValueError(f"the padded stream has {total} positions, not a multiple of cp_size = "
                      f"{cp_size}: the contiguous layout cuts it into {cp_size} equal slices")


# --------------------------------------------------------------------------------------------
# reading the arguments into lists
# --------------------------------------------------------------------------------------------


def _token_row(input_ids, name: str) -> list[int]:
    if isinstance(input_ids, torch.Tensor):
        check_id_dtype(input_ids.dtype, name)
        check_row_shape(tuple(input_ids.shape), name)
        return input_ids.reshape(-1).tolist()
    if isinstance(input_ids, (str, bytes)) or not isinstance(input_ids, (list, tuple)):
        raise TypeError(f"{name} must be a list of token ids or a tensor, got "
                        f"{type(input_ids).__name__}")
    row = []
    for k, value in enumerate(input_ids):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name}[{k}] must be an int, got {type(value).__name__}")
        if not -2**63 <= int(value) < 2**63:
            raise ValueError(f"{name}[{k}] = {value} does not fit int64")
        row.append(int(value))
    return row


def _boundary_list(value, name: str) -> list[int]:
    """A boundaries argument as a list of ints: types and shape, then its values (non-empty,
    from 0, non-decreasing)."""
    if isinstance(value, torch.Tensor):
        check_boundary_tensor(value, name)
        cu = value.tolist()
    elif isinstance(value, (list, tuple)):
        cu = []
        for k, entry in enumerate(value):
            if isinstance(entry, bool) or not isinstance(entry, numbers.Integral):
                raise TypeError(f"{name}[{k}] must be an int, got {type(entry).__name__}")
            cu.append(int(entry))
    else:
        raise TypeError(f"{name} must be a list of ints or an integer tensor, got "
                        f"{type(value).__name__}")
    if len(cu) == 0:
        raise empty_boundaries_error(name)
    if cu[0] != 0:
        raise first_boundary_error(name, cu[0])
    for i in range(len(cu) - 1):
        if cu[i + 1] < cu[i]:
            raise decreasing_error(name, i, cu[i + 1], cu[i])
    return cu


def _padded_boundary_list(value, cu: list[int], name: str) -> list[int]:
    """cu_seqlens_padded against the real cu_seqlens: its own checks, then the same count, then
    every padded span at least as long as its sequence."""
    padded = _boundary_list(value, name)
    if len(padded) != len(cu):
        raise count_error(name, len(padded), len(cu))
    for i in range(len(cu) - 1):
        if cu[i + 1] - cu[i] > padded[i + 1] - padded[i]:
            raise overfull_error(name, i, cu[i + 1] - cu[i], padded[i + 1] - padded[i])
    return padded


def _check_end(cu: list[int], name: str, what: str, length: int) -> None:
    if cu[-1] != length:
        raise end_error(name, cu[-1], what, length)


def _weights(loss_mask, name: str, length: int) -> list[float]:
    """The loss mask as floats (all 1.0 when None), of the stream's length."""
    if loss_mask is None:
        return [1.0] * length
    if isinstance(loss_mask, torch.Tensor):
        if loss_mask.is_complex():
            raise TypeError(f"{name} must hold real numbers, got {loss_mask.dtype}")
        check_row_shape(tuple(loss_mask.shape), name)
        values = [float(v) for v in loss_mask.reshape(-1).tolist()]
    elif isinstance(loss_mask, (list, tuple)):
        values = []
        for k, value in enumerate(loss_mask):
            if not isinstance(value, numbers.Real):
                raise TypeError(f"{name}[{k}] must be a number, got {type(value).__name__}")
            values.append(float(value))
    else:
        raise TypeError(f"{name} must be a list of numbers or a tensor, got "
                        f"{type(loss_mask).__name__}")
    if len(values) != length:
        raise ValueError(f"{name} has {len(values)} entries, input_ids has {length}")
    return values


def _output_device(device, *arguments) -> torch.device:
    """`device` if given, else the device of the first tensor argument, else the CPU."""
    if device is not None:
        return torch.device(device)
    for value in arguments:
        if isinstance(value, torch.Tensor):
            return value.device
    return torch.device("cpu")


def _round_up(value: int, step: int) -> int:
    while value % step != 0:
        value += 1
    return value


# --------------------------------------------------------------------------------------------
# shift_labels
# --------------------------------------------------------------------------------------------


def _shifted(tokens, weights, cu, padded, ignore_index) -> tuple[list[int], list[float]]:
    """Next-token labels and their loss weights, sequence by sequence (see shift_labels)."""
    labels = [ignore_index] * len(tokens)
    loss = [0.0] * len(tokens)
    for i in range(len(cu) - 1):
        start, length = padded[i], cu[i + 1] - cu[i]
        for w in range(length - 1):  # the last real token has no next token in its sequence
            labels[start + w] = tokens[start + w + 1]
            loss[start + w] = weights[start + w + 1]
    return labels, loss


def shift_labels(input_ids, cu_seqlens, *, cu_seqlens_padded=None, loss_mask=None,
                 ignore_index=-100, device=None) -> TensorDict:
    """Next-token labels of a packed stream, never across a sequence's real end (docs/cp.md)."""
    check_token_id(ignore_index, "ignore_index")
    device = _output_device(device, input_ids, cu_seqlens, cu_seqlens_padded, loss_mask)
    tokens = _token_row(input_ids, "input_ids")
    cu = _boundary_list(cu_seqlens, "cu_seqlens")
    if cu_seqlens_padded is None:
        _check_end(cu, "cu_seqlens", "input_ids", len(tokens))
        padded = cu
    else:
        padded = _padded_boundary_list(cu_seqlens_padded, cu, "cu_seqlens_padded")
        _check_end(padded, "cu_seqlens_padded", "input_ids", len(tokens))
    weights = _weights(loss_mask, "loss_mask", len(tokens))
    labels, loss = _shifted(tokens, weights, cu, padded, ignore_index)
    return TensorDict({
        "labels": torch.tensor(labels, dtype=torch.int64).reshape(1, len(labels)),
        "loss_mask": torch.tensor(loss, dtype=torch.float32).reshape(1, len(loss)),
    }, batch_size=[]).to(device)


# --------------------------------------------------------------------------------------------
# pad_for_cp
# --------------------------------------------------------------------------------------------


def _row_routes(routed_experts, router_padding_mask, length: int):
    """(routes as nested lists per token, mask as bools, spec) of a row's per-token routes, or
    (None, None, None) without routes: the routes' structure, their values, then the mask."""
    if routed_experts is None:
        if router_padding_mask is not None:
            raise ValueError("router_padding_mask is given without routed_experts: it marks the "
                             "tokens that have no captured route")
        return None, None, None
    spec = check_token_routes(routed_experts, length, row_form=True)
    check_token_route_values(routed_experts)
    routes = routed_experts.detach().cpu().reshape(length, spec.layers, spec.topk).tolist()
    if router_padding_mask is None:
        return routes, [False] * length, spec
    check_router_padding_mask(router_padding_mask, length, row_form=True)
    return routes, router_padding_mask.reshape(-1).tolist(), spec


def pad_for_cp(input_ids, cu_seqlens, *, cp_size, loss_mask=None, pad_token_id=0,
               ignore_index=-100, device=None, routed_experts=None,
               router_padding_mask=None) -> TensorDict:
    """Every sequence of the packed row padded to a multiple of 2·cp (docs/cp.md).

    routed_experts: one route per token of the row, `(T, layers, topk)` or `(1, T, layers,
    topk)`, with `router_padding_mask` `(T,)` / `(1, T)` (True: the token has no captured
    route; default all False): padded as `routed_experts` `(1, Tp, layers, topk)` in the given
    dtype and `router_padding_mask` `(1, Tp)`, the dummy route `0..topk-1` with True at every
    pad and at every token the given mask marks (whose given route is never read)."""
    check_cp_size(cp_size)
    check_token_id(pad_token_id, "pad_token_id")
    check_token_id(ignore_index, "ignore_index")
    device = _output_device(device, input_ids, cu_seqlens, loss_mask, routed_experts)
    tokens = _token_row(input_ids, "input_ids")
    cu = _boundary_list(cu_seqlens, "cu_seqlens")
    _check_end(cu, "cu_seqlens", "input_ids", len(tokens))
    weights = _weights(loss_mask, "loss_mask", len(tokens))
    routes, unrouted, spec = _row_routes(routed_experts, router_padding_mask, len(tokens))

    step = multiple(cp_size)
    ids, positions, padded_weights, padded = [], [], [], [0]
    lengths, padded_lengths = [], []
    padded_routes, padded_mask = [], []
    dummy = None if spec is None else [dummy_route(spec.topk) for _ in range(spec.layers)]
    for i in range(len(cu) - 1):
        start, length = cu[i], cu[i + 1] - cu[i]
        padded_length = _round_up(length, step)
        for w in range(padded_length):
            if w < length:
                ids.append(tokens[start + w])
                padded_weights.append(weights[start + w])
            else:
                ids.append(pad_token_id)
                padded_weights.append(0.0)
            positions.append(w)
            if spec is not None:
                captured = w < length and not unrouted[start + w]
                padded_routes.append(routes[start + w] if captured else dummy)
                padded_mask.append(not captured)
        padded.append(padded[-1] + padded_length)
        lengths.append(length)
        padded_lengths.append(padded_length)
    labels, loss = _shifted(ids, padded_weights, cu, padded, ignore_index)

    total = len(ids)
    out = TensorDict({
        "input_ids": torch.tensor(ids, dtype=torch.int64).reshape(1, total),
        "position_ids": torch.tensor(positions, dtype=torch.int64).reshape(1, total),
        "labels": torch.tensor(labels, dtype=torch.int64).reshape(1, total),
        "loss_mask": torch.tensor(loss, dtype=torch.float32).reshape(1, total),
        "cu_seqlens": torch.tensor(cu, dtype=torch.int32),
        "cu_seqlens_padded": torch.tensor(padded, dtype=torch.int32),
    }, batch_size=[])
    if spec is not None:
        out["routed_experts"] = torch.tensor(padded_routes, dtype=spec.dtype).reshape(
            1, total, spec.layers, spec.topk)
        out["router_padding_mask"] = torch.tensor(padded_mask, dtype=torch.bool).reshape(1, total)
    out = out.to(device)
    out.set_non_tensor("max_seqlen", max(lengths, default=0))
    out.set_non_tensor("max_seqlen_padded", max(padded_lengths, default=0))
    out.set_non_tensor("cp_size", cp_size)
    return out


# --------------------------------------------------------------------------------------------
# shard
# --------------------------------------------------------------------------------------------


def _fields(padded, name: str) -> tuple[list[str], int]:
    """The per-token keys of a padded row (input_ids first) and the stream length Tp; every
    tensor entry other than the boundaries must be (1, Tp, ...)."""
    if not isinstance(padded, (TensorDictBase, dict)):
        raise TypeError(f"{name} must be a TensorDict or a dict of tensors, got "
                        f"{type(padded).__name__}")
    keys = [key for key in padded.keys() if not _is_non_tensor(padded, key)]
    for key in ("input_ids", *BOUNDARIES):
        if key not in keys:
            raise ValueError(f"{name} has no {key!r} entry: pass the output of pad_for_cp")
    ids = padded["input_ids"]
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name}['input_ids'] must be a tensor, got {type(ids).__name__}")
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(f"{name}['input_ids'] must be one row (1, Tp), got shape "
                         f"{tuple(ids.shape)}")
    total = ids.shape[1]
    fields = ["input_ids"]
    for key in keys:
        if key in BOUNDARIES or key == "input_ids":
            continue
        value = padded[key]
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name}[{key!r}] must be a tensor, got {type(value).__name__}")
        if value.dim() < 2 or value.shape[0] != 1 or value.shape[1] != total:
            raise ValueError(f"{name}[{key!r}] must be per-token, (1, {total}, ...) like "
                             f"input_ids, got shape {tuple(value.shape)}")
        fields.append(key)
    return fields, total


def _is_non_tensor(mapping, key) -> bool:
    """A non-tensor entry (ignored); in a dict, any value that is not a tensor, except the
    entries shard needs (input_ids and the boundaries: they must be tensors)."""
    if isinstance(mapping, TensorDictBase):
        return mapping.is_non_tensor(key)
    return not isinstance(mapping[key], torch.Tensor) and key not in ("input_ids", *BOUNDARIES)


def _padded_boundaries(padded, name: str, total: int) -> tuple[list[int], list[int]]:
    for key in BOUNDARIES:
        if not isinstance(padded[key], torch.Tensor):
            raise TypeError(f"{name}[{key!r}] must be an integer tensor, got "
                            f"{type(padded[key]).__name__}")
    cu = _boundary_list(padded["cu_seqlens"], "cu_seqlens")
    cu_padded = _padded_boundary_list(padded["cu_seqlens_padded"], cu, "cu_seqlens_padded")
    _check_end(cu_padded, "cu_seqlens_padded", "input_ids", total)
    return cu, cu_padded


def _check_layout_multiple(cu_padded: list[int], cp_size: int, layout: str) -> None:
    if layout == "zigzag":
        for i in range(len(cu_padded) - 1):
            padded_length = cu_padded[i + 1] - cu_padded[i]
            if padded_length % multiple(cp_size) != 0:
                raise zigzag_multiple_error("cu_seqlens_padded", i, padded_length, cp_size)
    elif cu_padded[-1] % cp_size != 0:
        raise contiguous_multiple_error(cu_padded[-1], cp_size)


def _rank_positions(cu_padded: list[int], cp_size: int, layout: str, rank: int) -> list[int]:
    """The stream positions rank `rank` holds, in its local order (cp = 1: all of them)."""
    if layout == "contiguous" or cp_size == 1:
        n = cu_padded[-1] // cp_size
        return list(range(rank * n, (rank + 1) * n))
    positions = []
    for i in range(len(cu_padded) - 1):
        start = cu_padded[i]
        chunk = (cu_padded[i + 1] - start) // (2 * cp_size)
        for k in (rank, 2 * cp_size - 1 - rank):
            for q in range(chunk):
                positions.append(start + k * chunk + q)
    return positions


def _owner(position: int, cu_padded: list[int]) -> int:
    """The sequence whose padded span holds a stream position (empty sequences hold none)."""
    for i in range(len(cu_padded) - 1):
        if cu_padded[i] <= position < cu_padded[i + 1]:
            return i
    raise AssertionError(f"position {position} is outside the stream")


def _token_of(position: int, cu: list[int], cu_padded: list[int]) -> int:
    """The real row's index of the token at a stream position, -1 for a pad."""
    i = _owner(position, cu_padded)
    w = position - cu_padded[i]
    return cu[i] + w if w < cu[i + 1] - cu[i] else -1


def shard(padded, *, cp_size, layout="zigzag", cp_rank=None) -> TensorDict:
    """Each rank's share of a padded row (docs/cp.md): zigzag or contiguous."""
    check_cp_size(cp_size)
    check_layout(layout)
    check_cp_rank(cp_rank, cp_size)
    fields, total = _fields(padded, "padded")
    cu, cu_padded = _padded_boundaries(padded, "padded", total)
    _check_layout_multiple(cu_padded, cp_size, layout)

    ranks = list(range(cp_size)) if cp_rank is None else [cp_rank]
    device = padded["input_ids"].device
    flat = {key: padded[key].detach().cpu().reshape(total, *padded[key].shape[2:])
            for key in fields}
    rows = {key: [] for key in fields}
    padded_index, token_index, local_cu, local_padded = [], [], [], []
    for rank in ranks:
        positions = _rank_positions(cu_padded, cp_size, layout, rank)
        for key in fields:
            rows[key].append(torch.stack([flat[key][g] for g in positions])
                             if positions else flat[key][:0])
        padded_index.append(positions)
        token_index.append([_token_of(g, cu, cu_padded) for g in positions])
        real_cum, padded_cum = [0], [0]
        for i in range(len(cu) - 1):
            mine = [g for g in positions if cu_padded[i] <= g < cu_padded[i + 1]]
            real = [g for g in mine if _token_of(g, cu, cu_padded) >= 0]
            real_cum.append(real_cum[-1] + len(real))
            padded_cum.append(padded_cum[-1] + len(mine))
        local_cu.append(real_cum)
        local_padded.append(padded_cum)

    count, width = len(ranks), total // cp_size
    out = TensorDict({key: torch.stack(rows[key]) for key in fields}, batch_size=[count])
    out["padded_index"] = torch.tensor(padded_index, dtype=torch.int64).reshape(count, width)
    out["token_index"] = torch.tensor(token_index, dtype=torch.int64).reshape(count, width)
    out["cu_seqlens"] = torch.tensor(local_cu, dtype=torch.int32).reshape(count, len(cu))
    out["cu_seqlens_padded"] = torch.tensor(local_padded, dtype=torch.int32).reshape(count,
                                                                                     len(cu))
    out["rank"] = torch.tensor(ranks, dtype=torch.int64)
    out = out.to(device)
    out.set_non_tensor("cp_size", cp_size)
    out.set_non_tensor("layout", layout)
    return out


# --------------------------------------------------------------------------------------------
# shard_bshd
# --------------------------------------------------------------------------------------------


def _bshd_fields(batch, name: str) -> tuple[list[str], int, int]:
    if not isinstance(batch, (TensorDictBase, dict)):
        raise TypeError(f"{name} must be a TensorDict or a dict of tensors, got "
                        f"{type(batch).__name__}")
    keys = [key for key in batch.keys()
            if not (isinstance(batch, TensorDictBase) and batch.is_non_tensor(key))]
    if not keys:
        raise ValueError(f"{name} has no field to shard")
    rows = columns = None
    for key in keys:
        value = batch[key]
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name}[{key!r}] must be a tensor, got {type(value).__name__}")
        if value.dim() < 2:
            raise ValueError(f"{name}[{key!r}] must be (B, S, ...), got shape "
                             f"{tuple(value.shape)}")
        if rows is None:
            rows, columns = value.shape[0], value.shape[1]
        elif (value.shape[0], value.shape[1]) != (rows, columns):
            raise ValueError(f"{name}[{key!r}] has shape {tuple(value.shape)}, the first field "
                             f"has (B, S) = ({rows}, {columns}): every field is (B, S, ...)")
    return keys, rows, columns


def shard_bshd(batch, *, cp_size, layout="zigzag", cp_rank=None) -> TensorDict:
    """Each rank's columns of a (B, S, ...) batch (docs/cp.md): zigzag or contiguous."""
    check_cp_size(cp_size)
    check_layout(layout)
    check_cp_rank(cp_rank, cp_size)
    keys, rows, columns = _bshd_fields(batch, "batch")
    if layout == "zigzag" and columns % multiple(cp_size) != 0:
        raise ValueError(f"batch has S = {columns} columns, not a multiple of 2·cp_size = "
                         f"{2 * cp_size}: the zigzag layout cuts every row into "
                         f"{2 * cp_size} equal chunks")
    if layout == "contiguous" and columns % cp_size != 0:
        raise ValueError(f"batch has S = {columns} columns, not a multiple of cp_size = "
                         f"{cp_size}: the contiguous layout cuts every row into {cp_size} "
                         "equal slices")
    ranks = list(range(cp_size)) if cp_rank is None else [cp_rank]
    device = batch[keys[0]].device
    stream = [0, columns]  # one "sequence" per row: the zigzag chunks of the whole row
    fields = {}
    chosen = [_rank_positions(stream, cp_size, layout, rank) for rank in ranks]
    for key in keys:
        value = batch[key].detach().cpu()
        per_rank = []
        for cols in chosen:
            per_row = []
            for b in range(rows):
                per_row.append(torch.stack([value[b, c] for c in cols]) if cols
                               else value[b, :0])
            per_rank.append(torch.stack(per_row) if per_row
                            else value[:0, :0].reshape(0, len(cols), *value.shape[2:]))
        fields[key] = torch.stack(per_rank)
    width = columns // cp_size
    fields["column_index"] = torch.tensor([[cols] * rows for cols in chosen],
                                          dtype=torch.int64).reshape(len(ranks), rows, width)
    return TensorDict(fields, batch_size=[len(ranks), rows]).to(device)


# --------------------------------------------------------------------------------------------
# unshard
# --------------------------------------------------------------------------------------------


def _rank_outputs(outputs) -> list[torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        if outputs.dim() < 2:
            raise ValueError(f"outputs must be (cp, n, ...), one row per rank, got shape "
                             f"{tuple(outputs.shape)}")
        parts = list(outputs)
    elif isinstance(outputs, (list, tuple)):
        parts = list(outputs)
        for r, part in enumerate(parts):
            if not isinstance(part, torch.Tensor):
                raise TypeError(f"outputs[{r}] must be a tensor, got {type(part).__name__}")
            if part.dim() < 1:
                raise ValueError(f"outputs[{r}] must be (n, ...), one value per local token, "
                                 "got a 0-d tensor")
    else:
        raise TypeError(f"outputs must be a tensor (cp, n, ...) or a list of cp tensors, got "
                        f"{type(outputs).__name__}")
    if not parts:
        raise ValueError("outputs holds no rank")
    for r, part in enumerate(parts):
        if (part.shape, part.dtype, part.device) != (parts[0].shape, parts[0].dtype,
                                                     parts[0].device):
            raise ValueError(f"outputs[{r}] is {tuple(part.shape)} {part.dtype} on "
                             f"{part.device}, outputs[0] is {tuple(parts[0].shape)} "
                             f"{parts[0].dtype} on {parts[0].device}: every rank holds the "
                             "same number of tokens")
    return parts


def unshard(outputs, cu_seqlens, cu_seqlens_padded, *, layout="zigzag") -> torch.Tensor:
    """Per-rank per-token outputs in the real row's order, pads dropped (docs/cp.md)."""
    check_layout(layout)
    parts = _rank_outputs(outputs)
    cu = _boundary_list(cu_seqlens, "cu_seqlens")
    cu_padded = _padded_boundary_list(cu_seqlens_padded, cu, "cu_seqlens_padded")
    cp_size, width = len(parts), parts[0].shape[0]
    if width * cp_size != cu_padded[-1]:
        raise ValueError(f"outputs hold {cp_size} x {width} = {cp_size * width} tokens, "
                         f"cu_seqlens_padded ends at {cu_padded[-1]}: every rank holds "
                         "cu_seqlens_padded[-1] / cp tokens")
    _check_layout_multiple(cu_padded, cp_size, layout)
    host = [part.detach().cpu() for part in parts]
    placed = {}
    for rank in range(cp_size):
        for j, position in enumerate(_rank_positions(cu_padded, cp_size, layout, rank)):
            token = _token_of(position, cu, cu_padded)
            if token >= 0:
                placed[token] = host[rank][j]
    trailing = tuple(parts[0].shape[1:])
    values = [placed[t] for t in range(cu[-1])]
    out = (torch.stack(values) if values
           else torch.empty((0, *trailing), dtype=parts[0].dtype))
    return out.reshape(1, cu[-1], *trailing).to(parts[0].device)


# --------------------------------------------------------------------------------------------
# flatten_micro_batch
# --------------------------------------------------------------------------------------------


def _row_entries(row, name: str):
    """(per-token keys, boundaries, cp_size or None) of one packed row."""
    if not isinstance(row, (TensorDictBase, dict)):
        raise TypeError(f"{name} must be a TensorDict or a dict, got {type(row).__name__}")
    if "cu_seqlens" not in row.keys():
        raise ValueError(f"{name} has no 'cu_seqlens' entry")
    cp_size = None
    keys = []
    for key in row.keys():
        if key in BOUNDARIES:
            continue
        if isinstance(row, TensorDictBase) and row.is_non_tensor(key) or \
                not isinstance(row, TensorDictBase) and not isinstance(row[key], torch.Tensor):
            if key == "cp_size":
                cp_size = row.get_non_tensor(key) if isinstance(row, TensorDictBase) \
                    else row[key]
            continue
        keys.append(key)
    return keys, cp_size


def flatten_micro_batch(rows) -> TensorDict:
    """Several packed rows as one, boundaries offset (docs/cp.md)."""
    if not isinstance(rows, (list, tuple)):
        raise TypeError(f"rows must be a list of packed rows, got {type(rows).__name__}")
    if not rows:
        raise ValueError("rows is empty: a micro-batch has at least one row")
    with_padded = None
    first_keys, first_specs, cp_sizes = None, {}, []
    pieces, lengths = [], []
    cu_out, padded_out = [0], [0]
    max_real = max_padded = 0
    for k, row in enumerate(rows):
        name = f"rows[{k}]"
        keys, cp_size = _row_entries(row, name)
        has_padded = "cu_seqlens_padded" in row.keys()
        if with_padded is None:
            with_padded = has_padded
        elif has_padded != with_padded:
            raise ValueError(f"{name} {'has' if has_padded else 'has no'} cu_seqlens_padded, "
                             f"rows[0] {'has' if with_padded else 'has none'}: all rows or "
                             "none")
        cu = _boundary_list(row["cu_seqlens"], f"{name}['cu_seqlens']")
        padded = (_padded_boundary_list(row["cu_seqlens_padded"], cu,
                                        f"{name}['cu_seqlens_padded']")
                  if has_padded else cu)
        length = padded[-1]
        if first_keys is None:
            first_keys = keys
        elif sorted(keys) != sorted(first_keys):
            extra = sorted(set(keys) ^ set(first_keys))
            raise ValueError(f"{name} has per-token fields {sorted(keys)}, rows[0] has "
                             f"{sorted(first_keys)} (differ in {extra[0]!r})")
        for key in first_keys:
            value = row[key]
            if value.dim() < 2 or value.shape[0] != 1 or value.shape[1] != length:
                raise ValueError(f"{name}[{key!r}] must be per-token, (1, {length}, ...), got "
                                 f"shape {tuple(value.shape)}")
            spec = (value.dtype, tuple(value.shape[2:]))
            if k == 0:
                first_specs[key] = spec
            elif spec != first_specs[key]:
                raise ValueError(f"{name}[{key!r}] is {spec[0]} with trailing shape {spec[1]}, "
                                 f"rows[0] has {first_specs[key][0]} with {first_specs[key][1]}")
        if cp_size is not None:
            cp_sizes.append((k, cp_size))
        pieces.append({key: row[key] for key in first_keys})
        lengths.append(length)
        real_before, padded_before = cu_out[-1], padded_out[-1]
        for i in range(len(cu) - 1):
            cu_out.append(real_before + cu[i + 1])
            padded_out.append(padded_before + padded[i + 1])
            max_real = max(max_real, cu[i + 1] - cu[i])
            max_padded = max(max_padded, padded[i + 1] - padded[i])
    for k, value in cp_sizes:
        if value != cp_sizes[0][1]:
            raise ValueError(f"rows[{k}] has cp_size {value}, rows[{cp_sizes[0][0]}] has "
                             f"{cp_sizes[0][1]}: one micro-batch, one cp_size")

    first = rows[0][first_keys[0]] if first_keys else rows[0]["cu_seqlens"]
    device = first.device if isinstance(first, torch.Tensor) else torch.device("cpu")
    fields = {}
    for key in first_keys:
        parts = [piece[key].detach().cpu() for piece in pieces]
        tokens = []
        for part in parts:
            for t in range(part.shape[1]):
                tokens.append(part[0, t])
        trailing = tuple(parts[0].shape[2:])
        fields[key] = (torch.stack(tokens).reshape(1, len(tokens), *trailing) if tokens
                       else torch.empty((1, 0, *trailing), dtype=parts[0].dtype))
    fields["cu_seqlens"] = torch.tensor(cu_out, dtype=torch.int32)
    if with_padded:
        fields["cu_seqlens_padded"] = torch.tensor(padded_out, dtype=torch.int32)
    out = TensorDict(fields, batch_size=[]).to(device)
    out.set_non_tensor("max_seqlen", max_real)
    if with_padded:
        out.set_non_tensor("max_seqlen_padded", max_padded)
    if cp_sizes:
        out.set_non_tensor("cp_size", cp_sizes[0][1])
    return out

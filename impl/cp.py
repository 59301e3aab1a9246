"""Optimized `cp`: context parallelism on packed rows (spec: docs/cp.md).

Same public functions and results as `reference.cp`, vectorized and device-generic: every index
is computed on the data's device from the boundaries, and the data moves by gathers — torch's
`index_select`, or on CUDA (and under the `triton` placement, interpreted on the CPU) the Triton
kernels of `impl/kernels/triton_cp.py`. The host reads the device once per call, through
`_sync.Verdicts`: the validation verdicts together with the output widths it needs.

    stream position g of sequence i (span [a_i, a_i + Lp_i), real length l_i), w = g - a_i
    zigzag (cp > 1), c_i = Lp_i / (2·cp), k = w // c_i:
        rank k if k < cp else 2·cp - 1 - k, local slot a_i / cp + (w % c_i if k < cp else
        c_i + w % c_i)
    contiguous (and cp = 1), n = Tp / cp: rank g // n, local slot g % n
    token_index: cu_i + w if w < l_i, else -1 (a pad)
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict

from batchproof.impl import kernels
from batchproof.impl._cpu import small_int_rows
from batchproof.impl._sync import Verdicts, documented, host_put
from batchproof.reference._checks import check_token_id
from batchproof.reference._routes import (
    check_router_padding_mask,
    check_token_route_values,
    check_token_routes,
)
from batchproof.reference.cp import (  # the contract's argument checks, shared with the oracle
    BOUNDARIES,
    _bshd_fields,
    _fields,
    _output_device,
    _rank_outputs,
    _row_entries,
    _token_row,
    _weights,
    check_boundary_tensor,
    check_cp_rank,
    check_cp_size,
    check_id_dtype,
    check_layout,
    check_row_shape,
    contiguous_multiple_error,
    count_error,
    decreasing_error,
    empty_boundaries_error,
    end_error,
    first_boundary_error,
    multiple,
    overfull_error,
    zigzag_multiple_error,
)
from batchproof.reference.cp import _boundary_list as _host_boundary_list

# --------------------------------------------------------------------------------------------
# the arguments, on the device, validated like the reference (host checks now, value checks
# queued as verdicts)
# --------------------------------------------------------------------------------------------


def _tokens(input_ids, name: str, device: torch.device) -> torch.Tensor:
    """The token ids as a flat int64 tensor on `device`."""
    if isinstance(input_ids, torch.Tensor):
        check_id_dtype(input_ids.dtype, name)
        check_row_shape(tuple(input_ids.shape), name)
        return host_put(input_ids, device=device).reshape(-1).to(torch.int64)
    if isinstance(input_ids, list):
        small = small_int_rows([input_ids])  # plain ints within int32, checked in C
        if small is not None:
            return host_put(small.astype(np.int64), device=device)
    row = _token_row(input_ids, name)  # the reference's reader: its errors, its int64 check
    return host_put(np.array(row, dtype=np.int64).reshape(len(row)), device=device)


def _boundaries(value, name: str, device: torch.device, verdicts: Verdicts) -> torch.Tensor:
    """A boundaries argument as int64 on `device`: its types and shape checked now, its values
    (from 0, non-decreasing) queued."""
    if not isinstance(value, torch.Tensor):
        cu = _host_boundary_list(value, name)  # lists are on the host: checked right away
        return host_put(np.array(cu, dtype=np.int64), device=device)
    check_boundary_tensor(value, name)
    if value.shape[0] == 0:
        raise empty_boundaries_error(name)
    cu = host_put(value, device=device).to(torch.int64)
    verdicts.add(cu[0] != 0, lambda: first_boundary_error(name, int(cu[0])))
    verdicts.add((cu[1:] < cu[:-1]).any(), lambda: _decrease(cu, name))
    return cu


def _decrease(cu: torch.Tensor, name: str) -> ValueError:
    """The error for the first decreasing boundary (an error path: reads the device)."""
    i = int(torch.nonzero(cu[1:] < cu[:-1])[0, 0])
    return decreasing_error(name, i, int(cu[i + 1]), int(cu[i]))


def _padded_boundaries(value, cu: torch.Tensor, name: str, device: torch.device,
                       verdicts: Verdicts) -> torch.Tensor:
    padded = _boundaries(value, name, device, verdicts)
    if padded.shape[0] != cu.shape[0]:
        raise count_error(name, padded.shape[0], cu.shape[0])
    over = cu.diff() > padded.diff()
    verdicts.add(over.any(), lambda: _overfull(cu, padded, name))
    return padded


def _overfull(cu: torch.Tensor, padded: torch.Tensor, name: str) -> ValueError:
    i = int(torch.nonzero(cu.diff() > padded.diff())[0, 0])
    return overfull_error(name, i, int(cu[i + 1] - cu[i]), int(padded[i + 1] - padded[i]))


def _ends_at(cu: torch.Tensor, name: str, what: str, length: int, verdicts: Verdicts) -> None:
    verdicts.add(cu[-1] != length, lambda: end_error(name, int(cu[-1]), what, length))


def _loss_weights(loss_mask, name: str, length: int, device: torch.device):
    """The loss mask as float32 on `device`, or None for all ones."""
    if loss_mask is None:
        return None
    if isinstance(loss_mask, torch.Tensor):
        if loss_mask.is_complex():
            raise TypeError(f"{name} must hold real numbers, got {loss_mask.dtype}")
        check_row_shape(tuple(loss_mask.shape), name)
        if loss_mask.numel() != length:
            raise ValueError(f"{name} has {loss_mask.numel()} entries, input_ids has {length}")
        weights = host_put(loss_mask, device=device).reshape(-1)
        if not weights.is_floating_point():  # as the reference: int -> float64 -> float32
            weights = weights.to(torch.float64)
        return weights.to(torch.float32)
    values = _weights(loss_mask, name, length)  # the reference's reader
    return host_put(np.array(values, dtype=np.float64).astype(np.float32).reshape(length),
                    device=device)


def _owners(ends: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The sequence that holds each position, given the sequences' ends (empty sequences,
    whose end is the next one's start, hold none)."""
    return torch.searchsorted(ends, positions, right=True)


# --------------------------------------------------------------------------------------------
# shift_labels and pad_for_cp
# --------------------------------------------------------------------------------------------


def _shift(tokens, weights, cu, padded, length, ignore_index, device):
    """labels and loss_mask (1, length) of a stream: see reference `_shifted`."""
    positions = torch.arange(length, dtype=torch.int64, device=device)
    owner = _owners(padded[1:], positions)
    within = positions - padded[owner]
    has_next = within + 1 < (cu[1:] - cu[:-1])[owner]
    after = torch.where(has_next, positions + 1, positions)  # (only read where has_next)
    labels = torch.where(has_next, tokens[after], torch.full_like(positions, ignore_index))
    if weights is None:
        loss = has_next.to(torch.float32)
    else:
        loss = torch.where(has_next, weights[after], torch.zeros((), device=device))
    return labels.reshape(1, length), loss.reshape(1, length)


def shift_labels(input_ids, cu_seqlens, *, cu_seqlens_padded=None, loss_mask=None,
                 ignore_index=-100, device=None) -> TensorDict:
    """Next-token labels of a packed stream, never across a sequence's real end (docs/cp.md)."""
    check_token_id(ignore_index, "ignore_index")
    device = _output_device(device, input_ids, cu_seqlens, cu_seqlens_padded, loss_mask)
    with Verdicts() as verdicts:
        tokens = _tokens(input_ids, "input_ids", device)
        length = tokens.shape[0]
        cu = _boundaries(cu_seqlens, "cu_seqlens", device, verdicts)
        if cu_seqlens_padded is None:
            _ends_at(cu, "cu_seqlens", "input_ids", length, verdicts)
            padded = cu
        else:
            padded = _padded_boundaries(cu_seqlens_padded, cu, "cu_seqlens_padded", device,
                                        verdicts)
            _ends_at(padded, "cu_seqlens_padded", "input_ids", length, verdicts)
        weights = _loss_weights(loss_mask, "loss_mask", length, device)
        verdicts.settle()
    labels, loss = _shift(tokens, weights, cu, padded, length, ignore_index, device)
    return TensorDict({"labels": labels, "loss_mask": loss}, batch_size=[], device=device)


def _row_routes(routed_experts, router_padding_mask, length: int, device: torch.device,
                verdicts: Verdicts):
    """(routes (T, layers, topk), mask (T,) or None) on `device`, or (None, None) without
    routes: the reference's checks in its order, the routes' values queued as a verdict."""
    if routed_experts is None:
        if router_padding_mask is not None:
            raise ValueError("router_padding_mask is given without routed_experts: it marks the "
                             "tokens that have no captured route")
        return None, None
    spec = check_token_routes(routed_experts, length, row_form=True)
    routes = host_put(routed_experts, device=device).reshape(length, spec.layers, spec.topk)
    verdicts.add((routes < 0).any(), lambda: _negative_route(routed_experts))
    if router_padding_mask is None:
        return routes, None
    check_router_padding_mask(router_padding_mask, length, row_form=True)
    return routes, host_put(router_padding_mask, device=device).reshape(length)


def _negative_route(routed_experts) -> ValueError:
    """The reference's error for a negative expert id (an error path: reads the device)."""
    try:
        check_token_route_values(routed_experts)
    except ValueError as err:
        return err
    raise AssertionError("a negative expert id was found, but not by the reference's check")


def _padded_routes(routes, unrouted, real, source) -> tuple[torch.Tensor, torch.Tensor]:
    """(routes (1, Tp, layers, topk), router_padding_mask (1, Tp)): each real token's route
    at its stream position, the dummy route 0..topk-1 (mask True) at every pad and at every
    token `unrouted` marks."""
    total = real.shape[0]
    captured = real if unrouted is None else real & ~unrouted[source]
    layers, topk = routes.shape[1:]
    dummy = torch.arange(topk, dtype=routes.dtype, device=routes.device).expand(layers, topk)
    taken = routes.index_select(0, source) if total else routes[:0]
    padded = torch.where(captured[:, None, None], taken, dummy)
    return padded.reshape(1, total, layers, topk), (~captured).reshape(1, total)


def pad_for_cp(input_ids, cu_seqlens, *, cp_size, loss_mask=None, pad_token_id=0,
               ignore_index=-100, device=None, routed_experts=None,
               router_padding_mask=None) -> TensorDict:
    """Every sequence of the packed row padded to a multiple of 2·cp (docs/cp.md); with
    `routed_experts` the routes too, the dummy route at every pad (reference.cp.pad_for_cp)."""
    check_cp_size(cp_size)
    check_token_id(pad_token_id, "pad_token_id")
    check_token_id(ignore_index, "ignore_index")
    device = _output_device(device, input_ids, cu_seqlens, loss_mask, routed_experts)
    with Verdicts() as verdicts:
        tokens = _tokens(input_ids, "input_ids", device)
        length = tokens.shape[0]
        cu = _boundaries(cu_seqlens, "cu_seqlens", device, verdicts)
        _ends_at(cu, "cu_seqlens", "input_ids", length, verdicts)
        weights = _loss_weights(loss_mask, "loss_mask", length, device)
        routes, unrouted = _row_routes(routed_experts, router_padding_mask, length, device,
                                       verdicts)
        lengths = cu.diff()
        step = multiple(cp_size)
        spans = (lengths + step - 1) // step * step
        padded = torch.cat([cu.new_zeros(1), torch.cumsum(spans, 0)])
        total, longest, longest_span = verdicts.settle(also=torch.stack([
            padded[-1], _longest(lengths), _longest(spans)]))

    positions = torch.arange(total, dtype=torch.int64, device=device)
    owner = _owners(padded[1:], positions)
    within = positions - padded[owner]
    real = within < lengths[owner]
    source = torch.where(real, cu[owner] + within, 0)  # (only read where real: length > 0)
    ids = torch.where(real, tokens[source], torch.full_like(positions, pad_token_id))
    padded_weights = None
    if weights is not None:
        padded_weights = torch.where(real, weights[source], torch.zeros((), device=device))
    labels, loss = _shift(ids, padded_weights, cu, padded, total, ignore_index, device)
    out = TensorDict({
        "input_ids": ids.reshape(1, total),
        "position_ids": within.reshape(1, total),
        "labels": labels,
        "loss_mask": loss,
        "cu_seqlens": cu.to(torch.int32),
        "cu_seqlens_padded": padded.to(torch.int32),
    }, batch_size=[], device=device)
    if routes is not None:
        out["routed_experts"], out["router_padding_mask"] = _padded_routes(
            routes, unrouted, real, source)
    out.set_non_tensor("max_seqlen", longest)
    out.set_non_tensor("max_seqlen_padded", longest_span)
    out.set_non_tensor("cp_size", cp_size)
    return out


# --------------------------------------------------------------------------------------------
# where every stream position goes: slots of ranks
# --------------------------------------------------------------------------------------------


def _contiguous(cp_size: int, layout: str) -> bool:
    """Whether positions go to ranks as contiguous slices (cp = 1 is both layouts at once)."""
    return layout == "contiguous" or cp_size == 1


def _ramps(lengths: torch.Tensor, shift: torch.Tensor, count: int) -> torch.Tensor:
    """k + shift[run of k] for the `count` items k grouped in runs of `lengths`: a cumsum of ones
    with a jump where each run starts (runs that start at the same item, empty ones, add their
    jumps there, which telescope).

        lengths 2 0 3, shift 0 4 4  ->  0 1 6 7 8
    """
    steps = torch.ones(count + 1, dtype=torch.int64, device=lengths.device)
    jumps = torch.diff(shift, prepend=shift.new_ones(1))  # run 0: from -1 + 1 to shift_0
    steps.index_add_(0, torch.cumsum(lengths, 0) - lengths, jumps)
    return steps[:count].cumsum_(0)


def _runs(lengths: torch.Tensor, starts: torch.Tensor, count: int) -> torch.Tensor:
    """The items of runs of `lengths` items, run j counting up from starts[j]."""
    return _ramps(lengths, starts - (torch.cumsum(lengths, 0) - lengths), count)


def _tokens_of_runs(lengths: torch.Tensor, starts: torch.Tensor, real: torch.Tensor,
                    count: int) -> torch.Tensor:
    """token_index over runs of stream positions: run j holds `real[j]` real tokens counting up
    from starts[j], then pads (-1). Each run is two runs of `_runs`: the pads' counting up from
    -(pads + 1), which stays below 0, then clamped to -1."""
    pads = lengths - real
    both = torch.stack([real, pads], -1).reshape(-1)
    firsts = torch.stack([starts, -pads - 1], -1).reshape(-1)
    return _runs(both, firsts, count).clamp_(min=-1)


def _slots(cu, padded, ranks: torch.Tensor, n: int, cp_size: int, layout: str):
    """(padded_index, token_index), (R, n) int64: for local slot j of each rank in `ranks`,
    the stream position it holds and that position's token (-1 for a pad)."""
    lengths, spans = cu.diff(), padded.diff()
    if _contiguous(cp_size, layout):
        positions = ranks[:, None] * n + torch.arange(n, dtype=torch.int64, device=cu.device)
        tokens = _tokens_of_runs(spans, cu[:-1], lengths, n * cp_size)  # (stream order)
        return positions, tokens.reshape(cp_size, n)[ranks]
    # rank r: chunk r then chunk 2·cp-1-r of every sequence, each a run of c_i positions of
    # which the first clamp(l_i - k·c_i, 0, c_i) are real tokens
    chunk = spans // (2 * cp_size)
    k = torch.stack([ranks, 2 * cp_size - 1 - ranks], 1)[:, None, :]  # (R, 1, 2)
    offset = k * chunk[None, :, None]  # (R, S, 2): where the chunk starts in its sequence
    sizes = chunk[None, :, None].expand(offset.shape)
    count = ranks.shape[0] * n
    positions = _runs(sizes.reshape(-1), (padded[None, :-1, None] + offset).reshape(-1), count)
    real = torch.minimum((lengths[None, :, None] - offset).clamp(min=0), sizes)
    tokens = _tokens_of_runs(sizes.reshape(-1), (cu[None, :-1, None] + offset).reshape(-1),
                             real.reshape(-1), count)
    return positions.reshape(ranks.shape[0], n), tokens.reshape(ranks.shape[0], n)


def _slots_triton(cu, padded, ranks: torch.Tensor, n: int, cp_size: int, layout: str,
                  cp_rank, longest_span: int):
    from batchproof.impl.kernels import triton_cp

    return triton_cp.shard_index(cu, padded, ranks.shape[0], n, cp_size,
                                 _contiguous(cp_size, layout),
                                 -1 if cp_rank is None else cp_rank, longest_span)


def _local_counts(cu, padded, ranks: torch.Tensor, n: int, cp_size: int, layout: str):
    """(real, padded) tokens of each sequence each rank holds, (R, S) int64."""
    lengths, spans = cu.diff()[None, :], padded.diff()[None, :]
    r = ranks[:, None]
    if _contiguous(cp_size, layout):
        low, high = r * n, r * n + n
        start = padded[None, :-1]
        held = (torch.minimum(start + spans, high) - torch.maximum(start, low)).clamp(min=0)
        real = (torch.minimum(start + lengths, high) - torch.maximum(start, low)).clamp(min=0)
        return real, held
    chunk = spans // (2 * cp_size)
    real = (torch.minimum((lengths - r * chunk).clamp(min=0), chunk)
            + torch.minimum((lengths - (2 * cp_size - 1 - r) * chunk).clamp(min=0), chunk))
    return real, (spans // cp_size).expand(ranks.shape[0], -1)


def _cumulative(counts: torch.Tensor) -> torch.Tensor:
    zero = counts.new_zeros((counts.shape[0], 1))
    return torch.cat([zero, torch.cumsum(counts, 1)], 1).to(torch.int32)


def _gather(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """values[index] along the first dimension: the Triton copy where it applies."""
    if kernels.triton_applies(values.device):
        from batchproof.impl.kernels import triton_cp

        if triton_cp.applies(values.dtype):
            return triton_cp.gather_rows(values, index.reshape(-1))
    return values.index_select(0, index.reshape(-1))


def _check_layout_multiple(padded: torch.Tensor, total: int, cp_size: int, layout: str,
                           verdicts: Verdicts) -> None:
    if layout == "zigzag":
        bad = padded.diff() % multiple(cp_size) != 0
        verdicts.add(bad.any(), lambda: _not_a_multiple(padded, cp_size))
    elif total % cp_size != 0:
        raise contiguous_multiple_error(total, cp_size)


def _not_a_multiple(padded: torch.Tensor, cp_size: int) -> ValueError:
    i = int(torch.nonzero(padded.diff() % multiple(cp_size) != 0)[0, 0])
    return zigzag_multiple_error("cu_seqlens_padded", i, int(padded[i + 1] - padded[i]), cp_size)


def _longest(values: torch.Tensor) -> torch.Tensor:
    return values.max() if values.numel() else values.new_zeros(())


# --------------------------------------------------------------------------------------------
# shard
# --------------------------------------------------------------------------------------------


def shard(padded, *, cp_size, layout="zigzag", cp_rank=None) -> TensorDict:
    """Each rank's share of a padded row (docs/cp.md): zigzag or contiguous."""
    check_cp_size(cp_size)
    check_layout(layout)
    check_cp_rank(cp_rank, cp_size)
    fields, total = _fields(padded, "padded")
    device = padded["input_ids"].device
    with Verdicts() as verdicts:
        for key in BOUNDARIES:
            if not isinstance(padded[key], torch.Tensor):
                raise TypeError(f"padded[{key!r}] must be an integer tensor, got "
                                f"{type(padded[key]).__name__}")
        cu = _boundaries(padded["cu_seqlens"], "cu_seqlens", device, verdicts)
        cu_padded = _padded_boundaries(padded["cu_seqlens_padded"], cu, "cu_seqlens_padded",
                                       device, verdicts)
        _ends_at(cu_padded, "cu_seqlens_padded", "input_ids", total, verdicts)
        _check_layout_multiple(cu_padded, total, cp_size, layout, verdicts)
        (longest_span,) = verdicts.settle(also=_longest(cu_padded.diff()))

    n = total // cp_size
    ranks = (torch.arange(cp_size, dtype=torch.int64, device=device) if cp_rank is None
             else torch.full((1,), cp_rank, dtype=torch.int64, device=device))
    if kernels.triton_applies(device):
        positions, tokens = _slots_triton(cu, cu_padded, ranks, n, cp_size, layout, cp_rank,
                                          longest_span)
    else:
        positions, tokens = _slots(cu, cu_padded, ranks, n, cp_size, layout)
    count = ranks.shape[0]
    out = {}
    for key in fields:
        value = padded[key]
        trailing = tuple(value.shape[2:])
        out[key] = _gather(value.reshape(total, *trailing), positions).reshape(count, n,
                                                                              *trailing)
    real, held = _local_counts(cu, cu_padded, ranks, n, cp_size, layout)
    out.update(padded_index=positions, token_index=tokens, cu_seqlens=_cumulative(real),
               cu_seqlens_padded=_cumulative(held), rank=ranks)
    result = TensorDict(out, batch_size=[count], device=device)
    result.set_non_tensor("cp_size", cp_size)
    result.set_non_tensor("layout", layout)
    return result


# --------------------------------------------------------------------------------------------
# shard_bshd
# --------------------------------------------------------------------------------------------


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
    device = batch[keys[0]].device
    ranks = (torch.arange(cp_size, dtype=torch.int64, device=device) if cp_rank is None
             else torch.full((1,), cp_rank, dtype=torch.int64, device=device))
    n = columns // cp_size
    # one sequence per row: the whole row, no pad
    whole = torch.arange(2, dtype=torch.int64, device=device) * columns  # [0, S]
    chosen, _ = _slots(whole, whole, ranks, n, cp_size, layout)  # (R, n) columns
    count = ranks.shape[0]
    out = {}
    for key in keys:
        value = batch[key]
        trailing = tuple(value.shape[2:])
        # the flat (b, column) row of every local (rank, b, j): b * S + chosen[rank, j]
        flat_rows = (torch.arange(rows, dtype=torch.int64, device=device)[None, :, None]
                     * columns + chosen[:, None, :])
        out[key] = _gather(value.reshape(rows * columns, *trailing), flat_rows).reshape(
            count, rows, n, *trailing)
    out["column_index"] = chosen[:, None, :].expand(count, rows, n).contiguous()
    return TensorDict(out, batch_size=[count, rows], device=device)


# --------------------------------------------------------------------------------------------
# unshard
# --------------------------------------------------------------------------------------------


def unshard(outputs, cu_seqlens, cu_seqlens_padded, *, layout="zigzag") -> torch.Tensor:
    """Per-rank per-token outputs in the real row's order, pads dropped (docs/cp.md)."""
    check_layout(layout)
    parts = _rank_outputs(outputs)
    device = parts[0].device
    cp_size, width = len(parts), parts[0].shape[0]
    with Verdicts() as verdicts:
        cu = _boundaries(cu_seqlens, "cu_seqlens", device, verdicts)
        cu_padded = _padded_boundaries(cu_seqlens_padded, cu, "cu_seqlens_padded", device,
                                       verdicts)
        verdicts.add(cu_padded[-1] != width * cp_size, lambda: ValueError(
            f"outputs hold {cp_size} x {width} = {cp_size * width} tokens, cu_seqlens_padded "
            f"ends at {int(cu_padded[-1])}: every rank holds cu_seqlens_padded[-1] / cp "
            "tokens"))
        if layout == "zigzag":
            _check_layout_multiple(cu_padded, width * cp_size, cp_size, layout, verdicts)
        total, longest = verdicts.settle(also=torch.stack([cu[-1], _longest(cu.diff())]))
    # (contiguous: the stream is cp x width positions, a multiple of cp by construction)
    trailing = tuple(parts[0].shape[1:])
    flat = (outputs if isinstance(outputs, torch.Tensor) else torch.stack(parts)).reshape(
        cp_size * width, *trailing)
    if kernels.triton_applies(device):
        from batchproof.impl.kernels import triton_cp

        index = triton_cp.unshard_index(cu, cu_padded, total, width, cp_size,
                                        _contiguous(cp_size, layout), longest)
    else:
        index = _unshard_index(cu, cu_padded, total, width, cp_size, layout)
    return _gather(flat, index).reshape(1, total, *trailing)


def _unshard_index(cu, padded, total: int, n: int, cp_size: int, layout: str) -> torch.Tensor:
    """The flat slot rank * n + local slot each of the `total` real tokens is read from: runs of
    consecutive slots, one per sequence (contiguous: its real tokens sit at stream positions
    t + padded_i - cu_i, and flat slot = stream position) or per zigzag chunk of it."""
    lengths = cu.diff()
    if _contiguous(cp_size, layout):
        return _runs(lengths, padded[:-1], total)
    # chunk k of sequence i holds real tokens k·c_i .. on rank k (k < cp) or 2·cp-1-k, from
    # local slot a_i / cp (first chunk) or a_i / cp + c_i (second)
    chunk = padded.diff() // (2 * cp_size)
    k = torch.arange(2 * cp_size, dtype=torch.int64, device=cu.device)[None, :]
    first = k < cp_size
    rank = torch.where(first, k, 2 * cp_size - 1 - k)
    slot = padded[:-1, None] // cp_size + torch.where(first, 0, chunk[:, None])
    held = (lengths[:, None] - k * chunk[:, None]).clamp(min=0)
    held = torch.minimum(held, chunk[:, None])  # (S, 2·cp): real tokens of each chunk
    return _runs(held.reshape(-1), (rank * n + slot).reshape(-1), total)


# --------------------------------------------------------------------------------------------
# flatten_micro_batch
# --------------------------------------------------------------------------------------------


def flatten_micro_batch(rows) -> TensorDict:
    """Several packed rows as one, boundaries offset (docs/cp.md)."""
    if not isinstance(rows, (list, tuple)):
        raise TypeError(f"rows must be a list of packed rows, got {type(rows).__name__}")
    if not rows:
        raise ValueError("rows is empty: a micro-batch has at least one row")
    first_keys, first_specs, cp_sizes = None, {}, []
    with_padded = None
    reals, streams, fields = [], [], {}
    device = None
    with Verdicts() as verdicts:
        for k, row in enumerate(rows):
            name = f"rows[{k}]"
            keys, cp_size = _row_entries(row, name)
            has_padded = "cu_seqlens_padded" in row.keys()
            if with_padded is None:
                with_padded = has_padded
            elif has_padded != with_padded:
                raise ValueError(f"{name} {'has' if has_padded else 'has no'} "
                                 f"cu_seqlens_padded, rows[0] "
                                 f"{'has' if with_padded else 'has none'}: all rows or none")
            if device is None:
                first = row[keys[0]] if keys else row["cu_seqlens"]
                device = first.device if isinstance(first, torch.Tensor) else torch.device("cpu")
            cu = _boundaries(row["cu_seqlens"], f"{name}['cu_seqlens']", device, verdicts)
            padded = (_padded_boundaries(row["cu_seqlens_padded"], cu,
                                         f"{name}['cu_seqlens_padded']", device, verdicts)
                      if has_padded else cu)
            if first_keys is None:
                first_keys = keys
            elif sorted(keys) != sorted(first_keys):
                extra = sorted(set(keys) ^ set(first_keys))
                raise ValueError(f"{name} has per-token fields {sorted(keys)}, rows[0] has "
                                 f"{sorted(first_keys)} (differ in {extra[0]!r})")
            for key in first_keys:
                value = row[key]
                if value.dim() < 2 or value.shape[0] != 1:
                    with documented():  # the error's message names the length
                        length = int(padded[-1])
                    raise ValueError(f"{name}[{key!r}] must be per-token, (1, {length}, ...), "
                                     f"got shape {tuple(value.shape)}")
                verdicts.add(padded[-1] != value.shape[1], _field_length_error(
                    name, key, padded, tuple(value.shape)))
                spec = (value.dtype, tuple(value.shape[2:]))
                if k == 0:
                    first_specs[key] = spec
                elif spec != first_specs[key]:
                    raise ValueError(f"{name}[{key!r}] is {spec[0]} with trailing shape "
                                     f"{spec[1]}, rows[0] has {first_specs[key][0]} with "
                                     f"{first_specs[key][1]}")
                fields.setdefault(key, []).append(value)
            if cp_size is not None:
                cp_sizes.append((k, cp_size))
            reals.append(cu)
            streams.append(padded)
        for k, value in cp_sizes:
            if value != cp_sizes[0][1]:
                raise ValueError(f"rows[{k}] has cp_size {value}, rows[{cp_sizes[0][0]}] has "
                                 f"{cp_sizes[0][1]}: one micro-batch, one cp_size")
        longest = torch.stack([_longest(cu.diff()) for cu in reals]).max()
        longest_span = torch.stack([_longest(p.diff()) for p in streams]).max()
        max_real, max_padded = verdicts.settle(also=torch.stack([longest, longest_span]))

    out = {key: torch.cat([host_put(v, device=device) for v in values], 1)
           for key, values in fields.items()}
    out["cu_seqlens"] = _joined(reals)
    if with_padded:
        out["cu_seqlens_padded"] = _joined(streams)
    result = TensorDict(out, batch_size=[], device=device)
    result.set_non_tensor("max_seqlen", max_real)
    if with_padded:
        result.set_non_tensor("max_seqlen_padded", max_padded)
    if cp_sizes:
        result.set_non_tensor("cp_size", cp_sizes[0][1])
    return result


def _field_length_error(name: str, key: str, padded: torch.Tensor, shape: tuple):
    return lambda: ValueError(f"{name}[{key!r}] must be per-token, (1, {int(padded[-1])}, ...), "
                              f"got shape {shape}")


def _joined(boundaries: list[torch.Tensor]) -> torch.Tensor:
    """[0] then each row's boundaries after its first, shifted by the rows before it."""
    totals = torch.stack([b[-1] for b in boundaries])
    shifts = torch.cumsum(totals, 0) - totals
    parts = [boundaries[0].new_zeros(1)] + [b[1:] + s for b, s in zip(boundaries, shifts)]
    return torch.cat(parts).to(torch.int32)

"""Optimized `sft` (spec: sft.md): same functions and results as `reference.sft`, bit for bit.

List inputs are read by C loops that also validate every value (see "flattening"); token ids go
straight into the output tensor (one `struct.pack_into` per example at its start) when the
output is on the CPU, else they are flattened once and placed with `masked_scatter_`. Tensor
inputs are concatenated once on their device. The layout is built by whole-tensor operations:

    collate_sft   cells = arange(S) >= S - s_i (one comparison): the attention mask, and where
                  the ids and (A-wide) loss values go
    pack_sft      attention = cumsum(+1 at slot starts, -1 at token ends) over the (rows, W)
                  frame; positions = cumsum with a jump at each slot start; loss targets
                  scattered to column ranges built by one cumsum (`_ranges`)

    frame (rows, W), a = 2   a a a . b b b b c .        start_k = row_k * W + off_k

Only per-example metadata (lengths, bins, offsets: O(N) values) is computed on the host, where
the lengths already are; it reaches the device in one copy. No Python loop runs per token.
"""

from __future__ import annotations

import itertools
import math
import numbers
import operator
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from batchproof.impl import kernels
from batchproof.impl._cpu import byte_view, fast_paths
from batchproof.impl._jagged import without_holes
from batchproof.impl._paths import took
from batchproof.impl._sync import documented, host_put, host_read
from batchproof.impl.kernels import sft as sft_kernel
from batchproof.reference._checks import check_pad_token_id
from batchproof.reference.sft import (  # the contract's argument checks, shared with the oracle
    _as_list,
    _check_bool,
    _check_lengths,
    _check_size,
    _field,
    _int64,
    _real,
    _zero_one,
    batch_rows,
    check_fp8_recipe,
    exact_sum,
)

REQUIRED_KEYS = ("input_ids", "num_actions", "loss_mask")
_EXACT_INTS = 2**24  # |v| bound under which a float64 sum of < 2**29 integral values is exact


@dataclass
class Batch:
    """Examples whose structure is valid; fields as given (lists, tuples or 1-D tensors)."""

    input_ids: list = field(default_factory=list)
    num_actions: list[int] = field(default_factory=list)
    loss_mask: list = field(default_factory=list)
    attention_mask: list = field(default_factory=list)  # None where not given
    lengths: list[int] = field(default_factory=list)
    has_tensors: bool = False
    packed: bool = False
    flat: Flat | None = None  # a jagged batch's fields, as given (already checked)

    @property
    def size(self) -> int:
        return len(self.lengths)


@dataclass
class Flat:
    """A valid batch given as a TensorDict of jagged fields, read without a per-example loop:

        input_ids       values 5 6 7 8 9      offsets 0 3 5      (an integer dtype)
        loss_mask       values 1 0 1          offsets 0 2 3      (float32)
        attention_mask  values 1 1 1 1 1  or None                (checked 0/1; input_ids' offsets)

    (The lengths and num_actions are the `Batch`'s lists.)
    """

    input_ids: torch.Tensor
    ids_offsets: torch.Tensor
    loss_mask: torch.Tensor
    loss_offsets: torch.Tensor
    attention_mask: torch.Tensor | None


def collate_sft(examples, *, pad_token_id, normalize=False, device=None) -> TensorDict:
    """Left-pad N examples to (N, S); loss masks right-aligned in (N, A) (see reference.sft)."""
    check_pad_token_id(pad_token_id)
    _check_bool(normalize, "normalize")
    batch = _parse(examples)
    device = _output_device(device, batch, examples)
    if _kernel_applies(batch, device):  # CPU tensors: one pass per row
        input_ids, attention, loss_mask = sft_kernel.collate(
            *_flat_fields(batch), _attention_values(batch, device), pad_token_id, normalize)
        return _collated(input_ids, attention, loss_mask)
    n, width, response = batch.size, max(batch.lengths), max(batch.num_actions)
    tokens, actions = sum(batch.lengths), sum(batch.num_actions)
    meta = np.array([batch.lengths, batch.num_actions], dtype=np.int64)
    lengths, num_actions = host_put(meta, device=device)  # pinned, not waiting (CUDA)

    # right-aligned cells by one comparison per output; values placed in row-major order
    token_cells = torch.arange(width, device=device) >= (width - lengths)[:, None]
    input_ids = torch.full((n, width), pad_token_id, dtype=torch.int64, device=device)
    if _writable_in_place(batch, input_ids):  # lists onto the CPU: straight into the output
        starts = [i * width + width - s for i, s in enumerate(batch.lengths)]
        _write_ints(batch, batch.input_ids, starts, input_ids)
    else:
        input_ids.masked_scatter_(token_cells, _ids_in_order(batch, tokens, device))
    attention_values = _attention_values(batch, device)
    if attention_values is None:
        attention = token_cells.to(torch.int64)
    else:
        attention = torch.zeros((n, width), dtype=torch.int64, device=device)
        attention.masked_scatter_(token_cells, attention_values)
    del token_cells, attention_values
    loss_values, total = _loss_in_order(batch, actions, device)
    loss_mask = torch.zeros((n, response), dtype=torch.float32, device=device)
    loss_mask.masked_scatter_(torch.arange(response, device=device)
                              >= (response - num_actions)[:, None], loss_values)
    if normalize:
        loss_mask.mul_(_scale(loss_values, total))
    return _collated(input_ids, attention, loss_mask)


def _collated(input_ids: torch.Tensor, attention: torch.Tensor, loss_mask: torch.Tensor):
    td = TensorDict({"input_ids": input_ids, "attention_mask": attention,
                     "loss_mask": loss_mask}, batch_size=[input_ids.shape[0]])
    td.set_non_tensor("response_length", loss_mask.shape[1])
    return td


# the FP8 recipe's token granularity, per TP rank (x tp x cp): see reference.sft.align_size
_FP8_PER_RANK = {"tensorwise": 8, "blockwise": 128, "mxfp8": 32}


def align_size(tp_size=1, cp_size=1, *, fp8=False, fp8_recipe="tensorwise") -> int:
    """tp, or tp * cp * 2 with cp > 1; with fp8 also a multiple of the recipe's granularity
    (per-tensor and tp = 1 block scaling: 16 per CP rank too)."""
    _check_size(tp_size, "tp_size")
    _check_size(cp_size, "cp_size")
    _check_bool(fp8, "fp8")
    check_fp8_recipe(fp8_recipe)
    base = tp_size * cp_size * 2 if cp_size > 1 else tp_size
    if not fp8:
        return base
    if fp8_recipe == "blockwise" and tp_size == 1:
        return math.lcm(base, 16 * cp_size)
    per_rank = _FP8_PER_RANK[fp8_recipe] * tp_size * cp_size
    return math.lcm(base, per_rank, 16 * cp_size) if fp8_recipe == "tensorwise" else \
        math.lcm(base, per_rank)


def ffd_bins(lengths, capacity, *, min_bins=1, bin_multiple=1) -> list[list[int]]:
    """First-fit-decreasing (a segment tree: O(n log n)), then the bin-count adjustment.

    Same bins as the reference's O(n * bins) scan, exactly.
    """
    lengths = _valid_lengths(lengths, capacity, min_bins, bin_multiple)
    bins = _first_fit_decreasing(lengths, capacity)
    target = -(-max(len(bins), min_bins) // bin_multiple) * bin_multiple
    if target == len(bins):
        return bins
    if len(lengths) < target:
        raise ValueError(f"cannot create {target} bins from {len(lengths)} sequences "
                         f"(min_bins={min_bins}, bin_multiple={bin_multiple})")
    donors = sorted(range(len(bins)), key=lambda b: (len(bins[b]), b), reverse=True)
    cursor = 0
    for _ in range(target - len(bins)):
        while len(bins[donors[cursor]]) <= 1:
            cursor += 1
        bins.append([bins[donors[cursor]].pop()])
    return bins


def _valid_lengths(lengths, capacity, min_bins, bin_multiple) -> list[int]:
    """The reference's `_check_lengths`, with a C-speed pass for a list of plain ints in range
    (anything else goes through the reference's checks, which raise its errors)."""
    for value, name in ((capacity, "capacity"), (min_bins, "min_bins"),
                        (bin_multiple, "bin_multiple")):
        _check_size(value, name)
    if (type(lengths) is list and lengths and set(map(type, lengths)) == {int}
            and min(lengths) >= 1 and max(lengths) <= capacity):
        return list(lengths)
    return _check_lengths(lengths, capacity, min_bins, bin_multiple)


def pack_sft(
    examples,
    *,
    pad_token_id,
    capacity,
    dp_size=1,
    tp_size=1,
    pp_size=1,
    cp_size=1,
    fp8=False,
    fp8_recipe="tensorwise",
    device=None,
) -> TensorDict:
    """Shard-major rows of aligned sub-sequences (see reference.sft), built by index arithmetic."""
    check_pad_token_id(pad_token_id)
    _check_size(capacity, "capacity")
    for value, name in ((dp_size, "dp_size"), (tp_size, "tp_size"), (pp_size, "pp_size"),
                        (cp_size, "cp_size")):
        _check_size(value, name)
    _check_bool(fp8, "fp8")
    check_fp8_recipe(fp8_recipe)
    batch = _parse(examples, packed=True)
    _check_attention_all_ones(batch)
    device = _output_device(device, batch, examples)
    kernel = _kernel_applies(batch, device)
    try:
        bins = ffd_bins(batch.lengths, capacity, min_bins=dp_size, bin_multiple=dp_size)
    except ValueError:
        _check_values(batch)  # the reference checks every value before it packs
        raise
    rows = [bins[k] for shard in range(dp_size) for k in range(shard, len(bins), dp_size)]
    plan = _Plan(batch, rows, align_size(tp_size, cp_size, fp8=fp8, fp8_recipe=fp8_recipe),
                 device)
    n_rows, width = len(rows), plan.width

    if kernel:  # CPU tensors: one pass per row
        input_ids, attention, positions, loss_mask = sft_kernel.write_rows(
            *_flat_fields(batch), plan.order, plan.offset, plan.row_offsets, plan.targets,
            n_rows, width, pad_token_id)
    elif kernels.triton_applies(device):  # CUDA: one pass, on the device
        input_ids, attention, positions, loss_mask = _triton_rows(batch, plan, n_rows,
                                                                  pad_token_id)
    else:
        input_ids, attention, positions, loss_mask = _packed_rows(batch, plan, n_rows,
                                                                  pad_token_id)
    td = TensorDict(
        {
            "input_ids": input_ids.view(n_rows, width),
            "attention_mask": attention.view(n_rows, width),
            "position_ids": positions.view(n_rows, width),
            "loss_mask": loss_mask.view(n_rows, width - 1),
            "sub_seq_lengths": torch.nested.nested_tensor_from_jagged(
                plan.lengths.clone(), offsets=plan.row_offsets),
        },
        batch_size=[n_rows],
    )
    td.set_non_tensor("cu_seqlens_padded", plan.cu_seqlens_padded)
    td.set_non_tensor("response_length", width - 1)
    return td


def _kernel_applies(batch: Batch, device: torch.device) -> bool:
    """The compiled CPU kernels take CPU tensors: a jagged batch, or per-example int64 ids and
    float32 loss masks."""
    if not fast_paths(device) or not kernels.available() or not batch.has_tensors:
        return False
    if batch.flat is not None:
        return batch.flat.input_ids.device == device
    int64, float32 = torch.int64, torch.float32
    return (type(batch.input_ids[0]) is torch.Tensor and batch.input_ids[0].device == device
            # (every tensor is on one device: checked once)
            and all(type(t) is torch.Tensor and t.dtype == int64 for t in batch.input_ids)
            and all(type(t) is torch.Tensor and t.dtype == float32 for t in batch.loss_mask))


def _flat_fields(batch: Batch) -> tuple[torch.Tensor, ...]:
    """input_ids, their offsets, loss_mask, its offsets: flat (one cat of the examples')."""
    if batch.flat is not None:
        flat = batch.flat
        return flat.input_ids, flat.ids_offsets, flat.loss_mask, flat.loss_offsets
    ids_offsets, loss_offsets = (torch.from_numpy(kernels.offsets(torch.tensor(lengths)))
                                 for lengths in (batch.lengths, batch.num_actions))
    return torch.cat(batch.input_ids), ids_offsets, torch.cat(batch.loss_mask), loss_offsets


def _ids_in_order(batch: Batch, count: int, device) -> torch.Tensor:
    """collate_sft's token ids, examples in order, as one int64 tensor on `device` (a jagged
    batch's values as they are: no per-example split and concatenation)."""
    if batch.flat is not None:
        return batch.flat.input_ids.to(device, torch.int64)
    return _flat_ints(batch, batch.input_ids, count, device)


def _loss_in_order(batch: Batch, count: int, device) -> tuple[torch.Tensor, float | None]:
    """collate_sft's loss values, examples in order (see `_flat_floats`)."""
    if batch.flat is not None:
        return batch.flat.loss_mask.to(device), None
    return _flat_floats(batch, batch.loss_mask, count, device)


def _packed_rows(batch: Batch, plan: _Plan, n_rows: int, pad_token_id: int):
    """The torch composition (any device): flat (rows * W) input_ids, attention, positions and
    (rows * (W - 1)) loss_mask."""
    width, device = plan.width, plan.start.device
    # no per-token index tensors: the attention mask comes from one cumsum over the frame and
    # places the tokens (masked_scatter); fresh memory costs more here than the extra pass
    attention = _segments_mask(plan.start, plan.lengths, n_rows * width)
    input_ids = torch.full((n_rows * width,), pad_token_id, dtype=torch.int64, device=device)
    if batch.flat is not None:  # a jagged batch: gathered in slot order, no per-example op
        ids, loss_values, total = _slots_of_flat(batch.flat, plan, device)
        input_ids.masked_scatter_(attention.bool(), ids)
    else:
        rows_of_ids = [batch.input_ids[i] for i in plan.order]
        if _writable_in_place(batch, input_ids):  # lists onto the CPU: into the output
            _write_ints(batch, rows_of_ids, plan.start_list, input_ids)
        else:
            input_ids.masked_scatter_(attention.bool(),
                                      _flat_ints(batch, rows_of_ids, plan.tokens, device))
        loss_values, total = _flat_floats(batch, _shifted_masks(batch, plan.order),
                                          plan.n_targets, device)
    positions = _positions(attention, plan.start, plan.lengths)
    # full[p] (p >= 1) predicts from column off + p - 1; the kept values are the last n_targets
    loss_start = plan.row * (width - 1) + plan.offset + plan.lengths - 1 - plan.targets
    loss_mask = torch.zeros(n_rows * (width - 1), dtype=torch.float32, device=device)
    loss_mask.scatter_(0, _ranges(loss_start, plan.targets, plan.n_targets), loss_values)
    loss_mask.mul_(_scale(loss_values, total))
    return input_ids, attention, positions, loss_mask


def _triton_rows(batch: Batch, plan: _Plan, n_rows: int, pad_token_id: int):
    """The Triton kernel (impl/kernels/triton_sft.py): the same outputs as `_packed_rows`, each
    byte written once, from the slots' tokens and kept loss values laid flat on the device."""
    from batchproof.impl.kernels import triton_sft

    device = plan.start.device
    if batch.flat is not None:
        ids_flat, loss_values, total = _slots_of_flat(batch.flat, plan, device)
    else:
        ids_flat = _flat_ints(batch, [batch.input_ids[i] for i in plan.order], plan.tokens,
                              device)
        loss_values, total = _flat_floats(batch, _shifted_masks(batch, plan.order),
                                          plan.n_targets, device)
    return triton_sft.write_rows(ids_flat, loss_values, _scale(loss_values, total),
                                 plan.row_offsets, plan.offset, plan.lengths, plan.targets,
                                 n_rows, plan.width, pad_token_id)


def _slots_of_flat(flat: Flat, plan: _Plan, device) -> tuple[torch.Tensor, torch.Tensor, None]:
    """A jagged batch's token ids and kept loss values (full[1:]: a mask loses its first value
    when num_actions == s) in slot order, gathered from its flat values by index arithmetic:
    a constant number of device ops whatever the number of examples.

        slot k (example i)   ids    flat.input_ids[ids_offset[i] : + s_i]
                             loss   flat.loss_mask[loss_offset[i] + drop_i : + targets_k]
    """
    ids = flat.input_ids.to(device, torch.int64)[
        _ranges(plan.ids_source, plan.lengths, plan.tokens)]
    loss = flat.loss_mask.to(device)[_ranges(plan.loss_source, plan.targets, plan.n_targets)]
    return ids, loss, None


# -- packing plan (per-example metadata, O(N) host work) ----------------------------------------


class _Plan:
    """Where each sub-sequence goes, in row order; tensors on the target device.

    order[k]: example index of slot k; row[k], offset[k]: its row and first column;
    start[k] = row[k] * width + offset[k], its first cell in the flat (rows, width) frame;
    targets[k] = min(num_actions, s - 1): the loss values that survive the shift;
    start_list: `start` as host ints (where the CPU writes each example's ids);
    ids_source[k], loss_source[k]: where slot k's ids and kept loss values start in a jagged
    batch's flat values (the loss skips its first value when num_actions == s).
    """

    def __init__(self, batch: Batch, rows: list[list[int]], align: int, device) -> None:
        self.order = [i for row in rows for i in row]
        counts = np.fromiter(map(len, rows), np.int64, count=len(rows))
        first_slot = np.cumsum(counts) - counts
        lengths = np.asarray(batch.lengths, dtype=np.int64)[self.order]
        actions = np.asarray(batch.num_actions, dtype=np.int64)[self.order]
        aligned = (lengths + align - 1) // align * align
        row = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
        slot_end = np.cumsum(aligned)  # in the THD stream: rows concatenated, tails dropped
        row_begin = slot_end[first_slot] - aligned[first_slot]
        offset = slot_end - aligned - row_begin[row]
        self.width = int(np.add.reduceat(aligned, first_slot).max())
        self.tokens = int(lengths.sum())
        targets = np.minimum(actions, lengths - 1)
        self.n_targets = int(targets.sum())
        every_length = np.asarray(batch.lengths, dtype=np.int64)
        every_action = np.asarray(batch.num_actions, dtype=np.int64)
        ids_source = (np.cumsum(every_length) - every_length)[self.order]
        loss_source = (np.cumsum(every_action) - every_action)[self.order] + (actions == lengths)
        table = np.stack([lengths, row, offset, row * self.width + offset, targets, slot_end,
                          ids_source, loss_source])
        self.start_list = table[3].tolist()
        table = host_put(table, device=device)  # one host-to-device copy, pinned
        self.lengths, self.row, self.offset, self.start, self.targets = table[:5]
        self.ids_source, self.loss_source = table[6], table[7]
        self.cu_seqlens_padded = torch.cat([table.new_zeros(1), table[5]]).to(torch.int32)
        self.row_offsets = host_put(np.cumsum(np.concatenate([[0], counts])), device=device)


def _ranges(starts: torch.Tensor, counts: torch.Tensor, total: int) -> torch.Tensor:
    """The ranges [starts[k], starts[k] + counts[k]) concatenated, by one cumsum of steps:

        starts [4, 0, 9], counts [2, 0, 3]  ->  steps 4 1 | 6 1 1  ->  4 5 | 9 10 11

    every step is 1 except at the first element of range k, which jumps from the end of the
    previous ranges (empty ranges add their jumps at the same place, and they telescope).
    """
    ends = starts + counts
    jumps = starts - torch.cat([starts.new_zeros(1), ends[:-1]])
    steps = torch.ones(total + 1, dtype=torch.int64, device=starts.device)
    steps[0] = 0
    steps.index_add_(0, torch.cumsum(counts, 0) - counts, jumps)
    return steps.cumsum_(0)[:total]  # in place: a fresh large buffer costs more than the sum


def _segments_mask(starts: torch.Tensor, lengths: torch.Tensor, size: int) -> torch.Tensor:
    """int64 1 on [starts[k], starts[k] + lengths[k]), 0 elsewhere: +1 / -1 marks, one cumsum.
    (An end at `size` has nowhere to go: its -1 is dropped, as a 0 added at index 0.)"""
    mask = torch.zeros(size, dtype=torch.int64, device=starts.device)
    ends = starts + lengths
    inside = ends < size
    mask.index_add_(0, starts, torch.ones_like(starts))
    mask.index_add_(0, torch.where(inside, ends, 0), torch.where(inside, -1, 0))
    return mask.cumsum_(0)


def _positions(attention: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor):
    """0..s-1 on every sub-sequence, 0 elsewhere, from the attention mask by one cumsum:

        attention   1 1 1 0 1 1 1 1      (sub-sequences at 0 and 4, s = 3 and 4)
        + jumps     1 1 1 0 -2 1 1 1     (at a sub-sequence's first token: minus the previous s)
        cumsum - 1  0 1 2 2 0 1 2 3  ->  times attention: 0 1 2 0 0 1 2 3
    """
    positions = attention.clone()
    positions.index_add_(0, starts[1:], -lengths[:-1])
    return positions.cumsum_(0).sub_(1).mul_(attention)


def _shifted_masks(batch: Batch, order: list[int]) -> list:
    """Row-order loss masks of full[1:]: a mask loses its first value when num_actions == s
    (that value is still checked, as the reference checks every value)."""
    masks, dropped = [], []
    for i in order:
        mask = batch.loss_mask[i]
        if batch.num_actions[i] == batch.lengths[i]:
            if type(mask) is list or type(mask) is tuple:
                dropped.append(mask[0])
            mask = mask[1:]
        masks.append(mask)
    try:
        struct.pack(f"{len(dropped)}d", *dropped)
    except struct.error:
        _check_values(batch)
        raise
    return masks


# -- flattening --------------------------------------------------------------------------------
# Lists are read by C loops that also validate each value (so the happy path needs no
# separate check): ints with struct.pack_into("q") (exactly the reference's operator.index +
# int64 range), 0/1 masks with bytes() (ints in [0, 256)), other numbers with
# struct.pack_into("d") (exactly float() minus strings; 2**1100 fails as float() does). Any
# failure reruns the reference's value checks, which raise the reference's error.


def _writable_in_place(batch: Batch, out: torch.Tensor) -> bool:
    return not batch.has_tensors and fast_paths(out.device)


def _write_ints(batch: Batch, rows: list, starts: list[int], out: torch.Tensor) -> None:
    """Write row k's ints at element starts[k] of the contiguous CPU int64 tensor `out`."""
    took("cpu:sft._write_ints")
    buffer = byte_view(out)
    try:
        for row, start in zip(rows, starts, strict=True):
            struct.pack_into(f"{len(row)}q", buffer, 8 * start, *row)
    except struct.error:
        _check_values(batch)
        raise


def _flat_ints(batch: Batch, rows: list, count: int, device) -> torch.Tensor:
    """All rows as one int64 tensor on `device`."""
    if not batch.has_tensors:
        return _packed_ints(batch, rows, count).to(device)
    parts = [r if isinstance(r, torch.Tensor) else _packed_ints(batch, [r], len(r))
             for r in rows]
    return torch.cat([p.to(device) for p in parts]).to(torch.int64)  # cat promotes dtypes


def _flat_floats(batch: Batch, rows: list, count: int, device) -> tuple[torch.Tensor, float | None]:
    """All rows as one float32 tensor on `device` (float(v) rounded to float32), and the exact
    sum of those float32 values when it comes for free (None otherwise)."""
    if not batch.has_tensors:
        return _packed_floats(batch, rows, count, device)
    parts = [r.to(device) if isinstance(r, torch.Tensor)
             else _packed_floats(batch, [r], len(r), device)[0] for r in rows]
    if all(p.dtype == torch.float32 for p in parts):
        return torch.cat(parts), None
    # the reference's float(v): every value through a Python float, then rounded to float32
    return torch.cat([p.to(torch.float64) for p in parts]).to(torch.float32), None


def _packed_ints(batch: Batch, rows: list, count: int) -> torch.Tensor:
    return _packed(batch, rows, count, "q", torch.int64)


def _packed_floats(batch: Batch, rows: list, count: int, device) -> tuple[torch.Tensor, float]:
    try:  # 0/1 (or small int) masks: one byte per value, summed exactly
        small = np.frombuffer(b"".join(map(bytes, rows)), dtype=np.uint8, count=count)
        total = float(small.sum(dtype=np.int64))
        return torch.from_numpy(small.astype(np.float32)).to(device), total
    except (TypeError, ValueError):
        pass
    return _packed(batch, rows, count, "d", torch.float64).to(device, torch.float32), None


def _packed(batch: Batch, rows: list, count: int, code: str, dtype: torch.dtype) -> torch.Tensor:
    """The rows written by struct.pack_into, row by row, into one new CPU tensor."""
    out = torch.empty(count, dtype=dtype)
    buffer, offset, size = byte_view(out), 0, out.element_size()  # (count 0: an empty view)
    try:
        for row in rows:
            struct.pack_into(f"{len(row)}{code}", buffer, offset, *row)
            offset += size * len(row)
    except struct.error:
        _check_values(batch)
        raise
    return out


def _attention_values(batch: Batch, device) -> torch.Tensor | None:
    """collate_sft's attention values as int64; None when every given mask is all ones.

    Lists are checked with `list.count` (0/1 by ==, as the reference's check), tensors with
    one comparison over their concatenation; a mask with another value replays the reference.
    A jagged batch's values were checked whole: they are cast, not split.
    """
    if batch.flat is not None:
        values = batch.flat.attention_mask
        return None if values is None else values.to(device, torch.int64)
    masks, rows = batch.attention_mask, []
    if all(m is None or (type(m) in (list, tuple) and m.count(1) == len(m)) for m in masks):
        return None
    for m, s in zip(masks, batch.lengths, strict=True):
        if m is None:
            rows.append(torch.ones(s, dtype=torch.uint8))
        elif isinstance(m, torch.Tensor):
            rows.append(m)
        elif m.count(1) + m.count(0) == len(m):
            rows.append(torch.frombuffer(_zero_one_bytes(m), dtype=torch.uint8)
                        if m else torch.zeros(0, dtype=torch.uint8))
        else:
            _check_values(batch)
    if any(isinstance(m, torch.Tensor) for m in masks):  # given rows, wherever they are
        flat = torch.cat([host_put(r, device=device) for r in rows])
    else:  # every row made here, on the host: one copy to the device
        flat = host_put(torch.cat(rows), device=device)
    if batch.has_tensors and not host_read(((flat == 0) | (flat == 1)).all()):  # a verdict
        with documented():  # the error path: the reference's value pass names the row
            _check_values(batch)
    return flat.to(torch.int64)


def _zero_one_bytes(row) -> bytearray:
    """A 0/1 row (values == 0 or == 1: ints, bools, floats, ...) as bytes, in C."""
    try:
        return bytearray(row)
    except (TypeError, ValueError):
        return bytearray(map(bool, map(operator.eq, row, itertools.repeat(1))))


def _scale(values: torch.Tensor, total: float | None) -> torch.Tensor:
    """float32(1 / max(total, 1)), total the exact sum of the float32 values (math.fsum)."""
    if total is None:
        total = 0.0
        if values.numel():
            integral = ((values.trunc() == values) & (values.abs() <= _EXACT_INTS)).all()
            exact, total = host_read(torch.stack([integral.double(), values.double().sum()]))
            if not exact:  # fractions: their exact sum, on the host (math.fsum)
                total = exact_sum(host_read(values))
    return host_put([1.0 / max(total, 1)], dtype=torch.float32, device=values.device)[0]


# -- validation (same checks, order and messages as reference.sft) ------------------------------


def _parse(examples, *, packed: bool = False) -> Batch:
    """A list of examples (`_parse_examples`), or a TensorDict batch: whole-tensor checks of its
    jagged fields (`_flat_batch`), else its rows one by one, as the reference reads them."""
    if isinstance(examples, TensorDictBase):
        batch = _flat_batch(examples, packed)
        if batch is not None:
            return batch
        with documented():  # its rows, one by one (the forms _flat_batch does not take)
            examples = batch_rows(examples)
    return _parse_examples(examples, packed=packed)


def _flat_batch(examples: TensorDictBase, packed: bool) -> Batch | None:
    """The batch of a TensorDict whose fields are jagged (input_ids, loss_mask, attention_mask
    with input_ids' offsets) plus an (N,) integer num_actions, on one device, when every check
    of the reference passes on the whole tensors (one host sync); None otherwise (then the
    rows are checked one by one, which raises the reference's error)."""
    ids, actions, loss = (examples.get(key, None) for key in REQUIRED_KEYS)
    attention = examples.get("attention_mask", None)
    if not (examples.batch_dims == 1 and _is_jagged(ids, _INTEGER) and _is_jagged(loss, _REAL)
            and (attention is None or _is_jagged(attention, _REAL))
            and type(actions) is torch.Tensor and actions.dim() == 1
            and actions.dtype in _INTEGER):
        return None
    # the parts of a jagged tensor, read directly: its public accessors dispatch (~10 us each)
    ids_values, ids_offsets, loss_values, loss_offsets = (ids._values, ids._offsets,
                                                          loss._values, loss._offsets)
    device = ids_values.device
    if any(t.device != device for t in (loss_values, actions) +
           ((attention._values,) if attention is not None else ())):
        return None
    lengths = ids_offsets.diff()
    if not 0 < lengths.shape[0] == actions.shape[0]:
        return None
    checks = [(loss_offsets.diff() == actions) & (actions >= 1) & (actions <= lengths),
              (ids_offsets[:1] == 0) & (ids_offsets[-1:] == ids_values.shape[0]),
              (loss_offsets[:1] == 0) & (loss_offsets[-1:] == loss_values.shape[0])]
    attention_values = None
    if attention is not None:
        if attention._offsets is not ids_offsets:
            if attention._offsets.shape != ids_offsets.shape:
                return None
            checks.append(attention._offsets == ids_offsets)
        attention_values = attention._values
        if fast_paths(device) and kernels.available():
            zero_one, all_ones = sft_kernel.zero_one(attention_values)
            if not (all_ones or zero_one and not packed):
                return None
            if all_ones:  # as if not given: the kernel writes the ones without reading them
                attention_values = None
        else:
            checks.append(_zero_one_check(attention_values, packed))
    # one read: the verdict of every check, num_actions and the lengths
    read = host_read(torch.cat([torch.cat(checks).all().reshape(1).long(), actions.long(),
                                lengths.long()]))
    if not read[0]:
        return None
    flat = Flat(ids_values, ids_offsets, _as_float32(loss_values), loss_offsets,
                attention_values)
    count = actions.shape[0]
    return Batch(num_actions=read[1:1 + count], lengths=read[1 + count:], has_tensors=True,
                 flat=flat)


def _zero_one_check(values: torch.Tensor, ones_only: bool) -> torch.Tensor:
    """True (a 1-element tensor) iff every value is 0 or 1 (`ones_only`: 1): one reduction
    (min, max) for integers, whose values in [0, 1] are 0 or 1; comparisons for the rest (and
    for no values, which have no min)."""
    if values.dtype in _INTEGER and values.numel():
        low, high = values.aminmax()
        return ((low >= 1 if ones_only else low >= 0) & (high <= 1)).reshape(1)
    ones = values == 1
    return (ones if ones_only else ones | (values == 0)).all().reshape(1)


def _is_jagged(value, dtypes) -> bool:
    """A 2-D jagged tensor (NJT) without holes, of one of `dtypes`."""
    return without_holes(value) and value._values.dtype in dtypes


def _as_float32(values: torch.Tensor) -> torch.Tensor:
    """The reference's float32(float(v)) of each value: through float64 unless float32."""
    return values if values.dtype == torch.float32 else values.double().float()


def _parse_examples(examples, *, packed: bool = False) -> Batch:
    """Check every example's structure (a fast path for the common dict-of-lists example)."""
    if isinstance(examples, (str, bytes, Mapping)) or not isinstance(examples, Sequence):
        raise TypeError(f"examples must be a sequence of mappings, got {type(examples).__name__}")
    if len(examples) == 0:
        raise ValueError("examples is empty: a batch needs at least one example")
    batch = Batch(packed=packed)
    ids_rows, action_counts, loss_rows = batch.input_ids, batch.num_actions, batch.loss_mask
    attention_rows, lengths = batch.attention_mask, batch.lengths
    for i, ex in enumerate(examples):
        if type(ex) is dict:  # fast path: the checks below, for plain lists and tensors
            ids, n, loss = ex.get("input_ids"), ex.get("num_actions"), ex.get("loss_mask")
            attention = ex.get("attention_mask")
            s, m = _plain_length(ids, _INTEGER), _plain_length(loss, _REAL)
            if (s is not None and m is not None and type(n) is int and m == n and 1 <= n <= s
                    and (attention is None or _plain_length(attention, _REAL) == s)):
                ids_rows.append(ids)
                action_counts.append(n)
                loss_rows.append(loss)
                attention_rows.append(attention)
                lengths.append(s)
                if not batch.has_tensors and (type(ids) is torch.Tensor or
                                              type(loss) is torch.Tensor or
                                              type(attention) is torch.Tensor):
                    batch.has_tensors = True
                continue
        _check_structure(ex, i, batch)
    if batch.has_tensors:
        _check_one_device(examples)
    return batch


_INTEGER = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8})
_REAL = _INTEGER | {torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.bool}


def _plain_length(value, dtypes) -> int | None:
    """len() of a list/tuple, or of a 1-D tensor with one of `dtypes`; None otherwise."""
    kind = type(value)
    if kind is list or kind is tuple:
        return len(value)
    if kind is torch.Tensor and value.dtype in dtypes and value.dim() == 1:
        return value.shape[0]
    return None


def _check_structure(ex, i: int, batch: Batch) -> None:
    if not isinstance(ex, Mapping):
        raise TypeError(f"examples[{i}] must be a mapping, got {type(ex).__name__}")
    for key in REQUIRED_KEYS:
        if key not in ex:
            raise ValueError(f"examples[{i}] is missing {key!r}")
    input_ids = _field(ex["input_ids"], i, "input_ids", integer=True)
    num_actions = ex["num_actions"]
    if not isinstance(num_actions, numbers.Integral) or isinstance(num_actions, bool):
        raise TypeError(f"examples[{i}]['num_actions'] must be an int, "
                        f"got {type(num_actions).__name__}")
    loss_mask = _field(ex["loss_mask"], i, "loss_mask", integer=False)
    if len(loss_mask) != num_actions:
        raise ValueError(f"examples[{i}]['loss_mask'] has {len(loss_mask)} entries but "
                         f"num_actions is {num_actions} (a length-1 mask is not broadcast)")
    if num_actions < 1 or num_actions > len(input_ids):
        raise ValueError(f"examples[{i}]['num_actions'] must be in [1, {len(input_ids)}] "
                         f"(the sequence length), got {num_actions}")
    attention = ex.get("attention_mask")
    if attention is not None:
        attention = _field(attention, i, "attention_mask", integer=False)
        if len(attention) != len(input_ids):
            raise ValueError(f"examples[{i}]['attention_mask'] has {len(attention)} entries "
                             f"but input_ids has {len(input_ids)}")
    fields = (input_ids, loss_mask, attention)
    batch.has_tensors |= any(isinstance(f, torch.Tensor) for f in fields)
    batch.input_ids.append(input_ids)
    batch.num_actions.append(int(num_actions))
    batch.loss_mask.append(loss_mask)
    batch.attention_mask.append(attention)
    batch.lengths.append(len(input_ids))


def _check_values(batch: Batch) -> None:
    """The reference's value pass, example by example: raises its first error (slow path)."""
    if batch.flat is not None:
        return  # a jagged batch: its values were checked whole (`_flat_batch`)
    for i in range(batch.size):
        for v in _as_list(batch.input_ids[i]):
            _int64(v, i, "input_ids")
        for v in _as_list(batch.loss_mask[i]):
            _real(v, i, "loss_mask")
        attention = batch.attention_mask[i]
        if attention is not None:
            attention = [_zero_one(v, i, "attention_mask") for v in _as_list(attention)]
            if batch.packed and 0 in attention:
                raise ValueError(f"examples[{i}]['attention_mask'] has zeros: a packed row "
                                 "cannot express interior attention zeros")


def _check_attention_all_ones(batch: Batch) -> None:
    """pack_sft: every given attention mask is all ones (lists: list.count; tensors: one cat)."""
    masks = batch.attention_mask
    ok, tensors = True, []
    for m in masks:  # type() checks: isinstance(x, torch.Tensor) is slow on lists
        if type(m) is list or type(m) is tuple:
            ok = ok and m.count(1) == len(m)
        elif m is not None:
            tensors.append(m)
    if tensors:
        ok = ok and host_read((torch.cat(tensors) == 1).all())  # a verdict
    if not ok:
        with documented():  # the error path: the reference's value pass names the row
            _check_values(batch)


def _check_one_device(examples) -> None:
    devices = {v.device for ex in examples for v in ex.values() if isinstance(v, torch.Tensor)}
    if len(devices) > 1:
        raise ValueError(f"examples hold tensors on several devices: {sorted(map(str, devices))}")


def _output_device(device, batch: Batch, examples) -> torch.device:
    """`device`, else the device of the tensors among the inputs, else the CPU."""
    if device is not None:
        return torch.device(device)
    if batch.flat is not None:
        return batch.flat.input_ids.device
    cpu = torch.device("cpu")
    if isinstance(examples, TensorDictBase):  # (its rows are jagged: not read for this)
        return next((leaf.device for leaf in examples.values(True, True)
                     if isinstance(leaf, torch.Tensor)), cpu)
    if batch.has_tensors:  # the first tensor among the examples' values (has_tensors: one is)
        return next((value.device for ex in examples for value in ex.values()
                     if isinstance(value, torch.Tensor)), cpu)
    return cpu


# -- first-fit decreasing ----------------------------------------------------------------------


def _first_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Visit (length, index) descending; each item goes to the first bin that fits.

    A max segment tree over the bins' remaining capacities answers "first bin, in creation
    order, with remaining >= length" by one descent: tree[1] is the max over all bins,
    tree[size + b] bin b's remaining (0 for bins not opened yet: no length >= 1 stops there).
    First fit never leaves two bins that together hold <= capacity, so it opens fewer than
    2 * total / capacity + 1 bins: the tree is sized by that bound. The walk (`_first_fit`)
    runs compiled by Numba when the kernels are available, as Python on lists otherwise.
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)[::-1]  # ties: larger index 1st
    bound = min(len(lengths), 2 * -(-sum(lengths) // capacity) + 1)
    size = 1 << max(bound - 1, 1).bit_length()
    if kernels.available() and capacity < 2**62:  # compiled, over int64 arrays (8192 lengths:
        array = np.empty(len(order), dtype=np.int64)  # ~2 ms instead of ~13)
        took("numba:sft._first_fit")
        count = _first_fit(np.asarray(lengths, dtype=np.int64), np.asarray(order, dtype=np.int64),
                           capacity, np.zeros(2 * size, dtype=np.int64), array)
        bin_of = array.tolist()
    else:
        bin_of = [0] * len(order)
        count = kernels.python(_first_fit)(lengths, order, capacity, [0] * (2 * size), bin_of)
    bins: list[list[int]] = [[] for _ in range(count)]
    for item, b in zip(order, bin_of):
        bins[b].append(item)
    return bins


@kernels.compiled
def _first_fit(lengths, order, capacity, tree, bin_of):
    """Put item order[k] in the first bin that fits (bin_of[k]), k = 0, 1, ...; the number of
    bins. `tree`: 2 * size zeros (size a power of two >= the bins first fit can open)."""
    size = len(tree) // 2
    bins = 0
    for k in range(len(order)):
        length = lengths[order[k]]
        if tree[1] >= length:  # descend to the leftmost leaf that fits
            node = 2
            while node < size:
                if tree[node] < length:
                    node += 1
                node <<= 1
            if tree[node] < length:
                node += 1
            value = tree[node] - length
        else:  # open a new bin
            node = size + bins
            bins += 1
            value = capacity - length
        bin_of[k] = node - size
        tree[node] = value
        while node > 1:  # refresh the maxima above, stopping where nothing changes
            sibling = tree[node ^ 1]
            node >>= 1
            best = value if value > sibling else sibling
            if tree[node] == best:
                break
            tree[node] = best
            value = best
    return bins

"""Bug-zoo entries for `sft`: the bugs that shipped (or nearly shipped) in SFT collation and
packing — FFD tie order, bin-major rows, the loss shift, the W-1 clamp, CP alignment, SkyRL's
length-1 loss-mask broadcast — plus the classic off-by-ones of packing code.

Most entries wrap the correct `impl` function and damage its output the way the real bug did;
the FFD entries are small variants of the algorithm. Every replacement calls the functions bound
below, before any entry is planted (planting replaces module attributes).
"""

from __future__ import annotations

import itertools
import math
from functools import partial

import torch

from batchproof.impl import sft as _impl
from batchproof.mutation.zoo import ZooEntry
from batchproof.reference import sft as _reference

_collate = _impl.collate_sft
_pack = _impl.pack_sft
_ffd = _impl.ffd_bins
_align = _impl.align_size
_oracle_pack = _reference.pack_sft
_check_bool = _impl._check_bool
_check_pad_token_id = _impl.check_pad_token_id

# --------------------------------------------------------------------------- helpers


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _align_of(kwargs) -> int:
    return _align(kwargs.get("tp_size", 1), kwargs.get("cp_size", 1), fp8=kwargs.get("fp8", False),
                  fp8_recipe=kwargs.get("fp8_recipe", "tensorwise"))


def _sub_lengths(td) -> list[list[int]]:
    nested = td["sub_seq_lengths"]
    offsets, values = nested.offsets().tolist(), nested.values().tolist()
    return [values[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def _slots(td, align: int):
    """(row, offset, s, aligned) of every sub-sequence, in row order."""
    for r, lengths in enumerate(_sub_lengths(td)):
        offset = 0
        for s in lengths:
            yield r, offset, s, _round_up(s, align)
            offset += _round_up(s, align)


def _rows(examples, kwargs) -> list[list[int]]:
    lengths = [len(ex["input_ids"]) for ex in examples]
    dp = kwargs.get("dp_size", 1)
    bins = _ffd(lengths, kwargs["capacity"], min_bins=dp, bin_multiple=dp)
    return [bins[k] for shard in range(dp) for k in range(shard, len(bins), dp)]


def _full(ex) -> list[float]:
    loss = ex["loss_mask"]
    loss = loss.tolist() if isinstance(loss, torch.Tensor) else [float(v) for v in loss]
    return [0.0] * (len(ex["input_ids"]) - ex["num_actions"]) + loss


def _scale(total: float) -> torch.Tensor:
    return torch.tensor(1.0 / max(total, 1), dtype=torch.float32)


# --------------------------------------------------------------------------- ffd_bins variants


def _ffd_variant(lengths, capacity, *, min_bins=1, bin_multiple=1, ties="larger", slack=0,
                 adjust="move", donor="count", take="last", drain=True):
    """The reference algorithm with one knob turned (see the entries below). The adjustment's
    knobs: `donor` orders the bins to split by item count ("count", the contract) or by token
    sum ("tokens"); `take` moves the donor's "last" (the contract) or "first" item; `drain`
    keeps the cursor on one donor until it holds one item (the contract) instead of moving on
    after each new bin."""
    lengths = _impl._check_lengths(lengths, capacity, min_bins, bin_multiple)
    sign = 1 if ties == "larger" else -1
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], sign * i), reverse=True)
    bins, remaining = [], []
    for i in order:
        for b in range(len(bins)):
            if remaining[b] + slack >= lengths[i]:
                bins[b].append(i)
                remaining[b] -= lengths[i]
                break
        else:
            bins.append([i])
            remaining.append(capacity - lengths[i])
    target = -(-max(len(bins), min_bins) // bin_multiple) * bin_multiple
    if adjust == "none" or target == len(bins):
        return bins
    if len(lengths) < target:
        raise ValueError(f"cannot create {target} bins from {len(lengths)} sequences")
    if adjust == "empty":
        return bins + [[] for _ in range(target - len(bins))]
    def weight(b):
        return len(bins[b]) if donor == "count" else sum(lengths[i] for i in bins[b])

    donors = sorted(range(len(bins)), key=lambda b: (weight(b), b), reverse=True)
    if adjust == "copy":  # the donor never shrinks: every new bin repeats its last item
        return bins + [[bins[donors[0]][-1]] for _ in range(target - len(bins))]
    cursor = 0
    for _ in range(target - len(bins)):
        while len(bins[donors[cursor % len(donors)]]) <= 1:
            cursor += 1
        bins.append([bins[donors[cursor % len(donors)]].pop(-1 if take == "last" else 0)])
        if not drain:
            cursor += 1
    return bins


# each the reference algorithm with one knob turned
_ffd_ties_ascending = partial(_ffd_variant, ties="smaller")
_ffd_no_adjustment = partial(_ffd_variant, adjust="none")
_ffd_empty_bins = partial(_ffd_variant, adjust="empty")
_ffd_copies = partial(_ffd_variant, adjust="copy")
_ffd_off_by_one = partial(_ffd_variant, slack=1)
_ffd_split_heaviest = partial(_ffd_variant, donor="tokens")
_ffd_move_first_item = partial(_ffd_variant, take="first")
_ffd_round_robin = partial(_ffd_variant, drain=False)
_ffd_capacity_exclusive = partial(_ffd_variant, slack=-1)


_calls = itertools.count()


def _ffd_hidden_state(lengths, capacity, *, min_bins=1, bin_multiple=1):
    """Tie order flips from call to call (as with iteration over a set or a dict built in a
    different order, or an unstable sort on the GPU): two calls on one input disagree."""
    ties = "larger" if next(_calls) % 2 == 0 else "smaller"
    return _ffd_variant(lengths, capacity, min_bins=min_bins, bin_multiple=bin_multiple,
                        ties=ties)


# --------------------------------------------------------------------------- align_size variants


def _granularity(tp: int, cp: int, recipe: str) -> int:
    """The FP8 recipe's token granularity (docs/sft.md), written once more for the variants."""
    if recipe == "tensorwise":
        return math.lcm(16 * cp, 8 * tp * cp)
    if recipe == "blockwise":
        return 16 * cp if tp == 1 else 128 * tp * cp
    return 32 * tp * cp


def _align_tp_cp(tp_size=1, cp_size=1, *, fp8=False, fp8_recipe="tensorwise"):
    base = tp_size * cp_size if cp_size > 1 else tp_size
    return math.lcm(base, _granularity(tp_size, cp_size, fp8_recipe)) if fp8 else base


def _align_fp8_ignores_cp(tp_size=1, cp_size=1, *, fp8=False, fp8_recipe="tensorwise"):
    base = tp_size * cp_size * 2 if cp_size > 1 else tp_size
    return math.lcm(base, _granularity(tp_size, 1, fp8_recipe)) if fp8 else base


def _align_fp8_product(tp_size=1, cp_size=1, *, fp8=False, fp8_recipe="tensorwise"):
    base = tp_size * cp_size * 2 if cp_size > 1 else tp_size
    return base * _granularity(tp_size, cp_size, fp8_recipe) if fp8 else base


def _align_fp8_ignores_recipe(tp_size=1, cp_size=1, *, fp8=False, fp8_recipe="tensorwise"):
    """Every recipe aligned like per-tensor scaling (the recipe checked, then not used)."""
    _align(tp_size, cp_size, fp8=fp8, fp8_recipe=fp8_recipe)  # the real validation
    return _align(tp_size, cp_size, fp8=fp8)


def _align_skyrl_0_3(tp_size=1, cp_size=1, *, fp8=False, fp8_recipe="tensorwise"):
    """SkyRL 0.3.0's rule, lcm(layout, 16 * cp) for any recipe: per-tensor FP8 with 4 | tp
    leaves a TP rank fewer than 8 tokens; block scaling and MXFP8 get too small a slot."""
    _align(tp_size, cp_size, fp8=fp8, fp8_recipe=fp8_recipe)
    base = tp_size * cp_size * 2 if cp_size > 1 else tp_size
    return math.lcm(base, 16 * cp_size) if fp8 else base


def _align_skyrl_0_4(tp_size=1, cp_size=1, *, fp8=False, fp8_recipe="tensorwise"):
    """SkyRL 0.4.0's rule: every recipe but MXFP8 aligned like block scaling (per-tensor FP8
    with tp > 1 over-padded: 256 columns at tp 2 where 16 suffice)."""
    recipe = "mxfp8" if fp8_recipe == "mxfp8" else "blockwise"
    return _align(tp_size, cp_size, fp8=fp8, fp8_recipe=recipe)


# --------------------------------------------------------------------------- pack_sft variants


def _bin_major(examples, **kwargs):
    """Rows in bin order: a contiguous split hands DP rank 0 bins 0..k, not bins 0, dp, 2dp."""
    td = _pack(examples, **kwargs)
    dp = kwargs.get("dp_size", 1)
    n_rows = td["input_ids"].shape[0]
    shard_major = [k for shard in range(dp) for k in range(shard, n_rows, dp)]
    order = torch.tensor([shard_major.index(k) for k in range(n_rows)])
    return _reordered(td, order, _align_of(kwargs))


def _reordered(td, order: torch.Tensor, align: int):
    for key in ("input_ids", "attention_mask", "position_ids", "loss_mask"):
        td[key] = td[key][order]
    lengths = _sub_lengths(td)
    lengths = [lengths[i] for i in order.tolist()]
    offsets = torch.tensor([0] + list(itertools.accumulate(len(r) for r in lengths)))
    values = torch.tensor([s for row in lengths for s in row], dtype=torch.int64)
    td["sub_seq_lengths"] = torch.nested.nested_tensor_from_jagged(values, offsets=offsets)
    cu = [0] + list(itertools.accumulate(_round_up(s, align) for row in lengths for s in row))
    td.set_non_tensor("cu_seqlens_padded", torch.tensor(cu, dtype=torch.int32))
    return td


def _loss_from(examples, kwargs, td, value_at):
    """Rebuild loss_mask from a W-wide per-token mask: column c holds value_at(full, p) for the
    token p of the sub-sequence at column c (nothing past W - 2); normalized by its own sum."""
    rows, align = _rows(examples, kwargs), _align_of(kwargs)
    loss = torch.zeros_like(td["loss_mask"])
    last = loss.shape[1] - 1
    for r, row in enumerate(rows):
        offset = 0
        for i in row:
            full = _full(examples[i])
            for p in range(len(full)):
                if offset + p <= last:
                    loss[r, offset + p] = value_at(full, p)
            offset += _round_up(len(full), align)
    td["loss_mask"] = loss * _scale(math.fsum(loss.flatten().tolist()))
    return td


def _token_mask(full, p):
    return full[p]


def _loss_unshifted(examples, **kwargs):
    """The W-wide token mask cut with [:, :-1] instead of [:, 1:]: loss_mask[off + p] = full[p]
    (the token's own mask, not its target's), so the last column of a sub-sequence becomes a
    target across the boundary and full[0] is counted."""
    return _loss_from(examples, kwargs, _pack(examples, **kwargs), _token_mask)


def _oracle_loss_unshifted(examples, **kwargs):
    return _loss_from(examples, kwargs, _oracle_pack(examples, **kwargs), _token_mask)


def _w_minus_1_clamp(examples, **kwargs):
    """Each sub-sequence writes s targets (the last one empty) at min(off + p, W - 2): the
    "unreachable" clamp fires when the widest row's last slot ends exactly at W, and the
    empty write lands on column W - 2, erasing that sub-sequence's last real target."""
    td = _pack(examples, **kwargs)
    width = td["input_ids"].shape[1]
    loss = td["loss_mask"].clone()
    for r, offset, s, _ in _slots(td, _align_of(kwargs)):
        if offset + s == width and width >= 2:
            loss[r, width - 2] = 0.0
    td["loss_mask"] = loss
    return td


def _normalized_before_shift(examples, **kwargs):
    """Normalized by the sum of the raw loss masks (full[0] included) instead of the targets."""
    td = _pack(examples, **kwargs)
    right = _scale(math.fsum(v for ex in examples for v in _full(ex)[1:]))
    wrong = _scale(math.fsum(v for ex in examples for v in _full(ex)))
    if right.item() == 0.0:
        return td
    td["loss_mask"] = td["loss_mask"] / right * wrong
    return td


def _attention_over_slot(examples, **kwargs):
    """attention_mask 1 on the whole aligned slot [off, off + roundup(s, a)), padding included."""
    td = _pack(examples, **kwargs)
    attention = td["attention_mask"].clone()
    for r, offset, _, aligned in _slots(td, _align_of(kwargs)):
        attention[r, offset:offset + aligned] = 1
    td["attention_mask"] = attention
    return td


def _right_aligned_in_slot(examples, **kwargs):
    """Alignment padding put before each sub-sequence instead of after it."""
    td = _pack(examples, **kwargs)
    pad = kwargs["pad_token_id"]
    fills = {"input_ids": pad, "attention_mask": 0, "position_ids": 0, "loss_mask": 0.0}
    out = {key: td[key].clone() for key in fills}
    for r, offset, s, aligned in _slots(td, _align_of(kwargs)):
        gap = aligned - s
        if gap == 0:
            continue
        for key, fill in fills.items():
            span = s - 1 if key == "loss_mask" else s
            values = td[key][r, offset:offset + span].clone()
            out[key][r, offset:offset + aligned - (key == "loss_mask")] = fill
            out[key][r, offset + gap:offset + gap + span] = values
    for key, value in out.items():
        td[key] = value
    return td


def _positions_not_restarting(examples, **kwargs):
    """position_ids counted over the whole row (cumsum of attention - 1), not per sub-sequence:
    RoPE sees one long sequence."""
    td = _pack(examples, **kwargs)
    attention = td["attention_mask"]
    td["position_ids"] = (torch.cumsum(attention, dim=1) - 1).clamp(min=0) * attention
    return td


def _cu_seqlens_with_row_tails(examples, **kwargs):
    """cu_seqlens_padded as offsets into the flattened (rows, W) tensor (row tails counted)."""
    td = _pack(examples, **kwargs)
    width = td["input_ids"].shape[1]
    slots = list(_slots(td, _align_of(kwargs)))
    cu = [r * width + offset for r, offset, _, _ in slots]
    r, offset, _, aligned = slots[-1]
    td.set_non_tensor("cu_seqlens_padded",
                      torch.tensor(cu + [r * width + offset + aligned], dtype=torch.int32))
    return td


def _cu_seqlens_int64(examples, **kwargs):
    """cu_seqlens_padded left in int64 (torch.cumsum promotes int32 to int64)."""
    td = _pack(examples, **kwargs)
    td.set_non_tensor("cu_seqlens_padded", td.get_non_tensor("cu_seqlens_padded").to(torch.int64))
    return td


def _pp_in_alignment(examples, **kwargs):
    """Pipeline parallelism folded into the alignment (slots padded to tp * pp)."""
    pp = kwargs.get("pp_size", 1)
    return _pack(examples, **(kwargs | {"tp_size": kwargs.get("tp_size", 1) * pp}))


# --------------------------------------------------------------------------- collate_sft variants


def _broadcast_length1(examples, *, pad_token_id, normalize=False, device=None):
    """SkyRL's quirk: a length-1 loss_mask is broadcast over num_actions."""
    fixed = []
    for ex in examples if isinstance(examples, list) else []:
        if isinstance(ex, dict) and isinstance(ex.get("loss_mask"), list) \
                and len(ex["loss_mask"]) == 1 and isinstance(ex.get("num_actions"), int):
            ex = dict(ex, loss_mask=ex["loss_mask"] * ex["num_actions"])
        fixed.append(ex)
    return _collate(fixed if isinstance(examples, list) else examples,
                    pad_token_id=pad_token_id, normalize=normalize, device=device)


def _right_padded(examples, **kwargs):
    """Pads on the right (the HF default) where the layout is left-padded."""
    td = _collate(examples, **kwargs)
    width = td["input_ids"].shape[1]
    for key in ("input_ids", "attention_mask"):
        rows = [torch.roll(row, -(width - len(ex["input_ids"])))
                for row, ex in zip(td[key], examples, strict=True)]
        td[key] = torch.stack(rows)
    return td


def _loss_left_aligned(examples, **kwargs):
    """Loss masks left-aligned in the response columns (a left-aligned slice on right-aligned
    data, SkyRL #1367's bug class)."""
    td = _collate(examples, **kwargs)
    width = td["loss_mask"].shape[1]
    rows = [torch.roll(row, -(width - ex["num_actions"]))
            for row, ex in zip(td["loss_mask"], examples, strict=True)]
    td["loss_mask"] = torch.stack(rows)
    return td


def _mask_from_tokens(examples, **kwargs):
    """attention_mask = input_ids != pad_token_id: real pad-id tokens dropped, interior zeros
    of the example's own mask ignored."""
    td = _collate(examples, **kwargs)
    td["attention_mask"] = (td["input_ids"] != kwargs["pad_token_id"]).to(torch.int64)
    return td


def _loss_width_s(examples, **kwargs):
    """Loss mask padded to the sequence width S instead of A = max num_actions."""
    td = _collate(examples, **kwargs)
    n, width = td["input_ids"].shape
    loss = td["loss_mask"]
    wide = torch.zeros(n, width, dtype=loss.dtype)
    wide[:, width - loss.shape[1]:] = loss
    out = td.exclude("loss_mask")
    out["loss_mask"] = wide
    out.set_non_tensor("response_length", width)
    return out


def _sequence_mean(examples, *, pad_token_id, normalize=False, device=None):
    """normalize=True divides each row by its own total (a per-sequence mean) instead of the
    batch total."""
    _check_pad_token_id(pad_token_id)  # impl's argument checks, in impl's order
    _check_bool(normalize, "normalize")
    td = _collate(examples, pad_token_id=pad_token_id, normalize=False, device=device)
    if not normalize:
        return td
    totals = td["loss_mask"].double().sum(dim=1).clamp(min=1)
    td["loss_mask"] = td["loss_mask"] * (1.0 / totals).float()[:, None]
    return td


def _normalized_by(total_of):
    """collate_sft whose normalize scale is float32(1 / max(total_of(loss_mask), 1)): the
    magnitude bugs of an inexact total."""
    def collate(examples, *, pad_token_id, normalize=False, device=None):
        _check_pad_token_id(pad_token_id)  # impl's argument checks, in impl's order: only the
        _check_bool(normalize, "normalize")  # total differs, never which inputs are rejected
        td = _collate(examples, pad_token_id=pad_token_id, normalize=False, device=device)
        if normalize:
            loss = td["loss_mask"]
            scale = torch.tensor(1.0 / max(total_of(loss), 1), dtype=torch.float32,
                                 device=loss.device)
            td["loss_mask"] = loss * scale
        return td
    return collate


def _choice(name, function, bug, killers, replacement) -> ZooEntry:
    return ZooEntry(name=f"sft.{name}", op="sft", function=function, bug=f"spec choice: {bug}",
                    killers=killers, replacement=replacement, oracle=True)


ENTRIES = [
    # ffd_bins
    ZooEntry(
        name="sft.ffd_tie_order", op="sft", function="ffd_bins",
        bug="FFD ties broken by the smaller index first (a stable descending sort): other bins "
            "than the documented order, different rows on every rank that assumes the spec",
        reference="sft.md: visit (length, index) descending",
        killers=("equivalence", "pin:spec_tie_order", "property:visit_order",
                 "sft.pack_sft/equivalence", "sft.pack_sft/pin:ffd_tie_order"),
        replacement=_ffd_ties_ascending,
    ),
    ZooEntry(
        name="sft.ffd_no_bin_count_adjustment", op="sft", function="ffd_bins",
        bug="bin count not raised to a multiple of dp_size: some DP ranks get no row",
        killers=("equivalence", "property:bin_count", "sft.pack_sft/property:rows_multiple_of_dp"),
        replacement=_ffd_no_adjustment,
    ),
    ZooEntry(
        name="sft.ffd_empty_padding_bins", op="sft", function="ffd_bins",
        bug="missing bins padded with empty ones instead of splitting the largest bin",
        killers=("equivalence", "property:non_empty"),
        replacement=_ffd_empty_bins,
    ),
    ZooEntry(
        name="sft.ffd_adjustment_copies", op="sft", function="ffd_bins",
        bug="the adjustment copies the donor's last item instead of moving it: an example "
            "trained twice",
        killers=("equivalence", "property:partition", "sft.pack_sft/property:each_example_once"),
        replacement=_ffd_copies,
    ),
    ZooEntry(
        name="sft.ffd_capacity_off_by_one", op="sft", function="ffd_bins",
        bug="fit test `remaining + 1 >= length`: bins one token over capacity",
        killers=("equivalence", "property:within_capacity", "sft.pack_sft/property:within_capacity"),
        replacement=_ffd_off_by_one,
    ),
    ZooEntry(
        name="sft.ffd_hidden_state", op="sft", function="ffd_bins",
        bug="tie order depends on hidden state (set/dict iteration order, an unstable GPU sort): "
            "two calls on the same batch pack differently",
        killers=("sft.pack_sft/property:deterministic", "pin:spec_tie_order"),
        replacement=_ffd_hidden_state,
    ),
    # align_size
    ZooEntry(
        name="sft.align_tp_cp_not_doubled", op="sft", function="align_size",
        bug="CP alignment tp * cp instead of tp * cp * 2: a segment cannot be split into 2*cp "
            "load-balanced chunks",
        killers=("equivalence", "pin:cp_doubles", "property:divisible",
                 "sft.pack_sft/equivalence", "sft.pack_sft/pin:cp_alignment_doubled",
                 "sft.pack_sft/property:width_aligned"),
        replacement=_align_tp_cp,
    ),
    ZooEntry(
        name="sft.oracle_align_tp_cp_not_doubled", op="sft", function="align_size",
        bug="the same CP alignment bug in the oracle: only the spec's examples and the "
            "divisibility property see it",
        killers=("pin:cp_doubles", "property:divisible"),
        replacement=_align_tp_cp,
        oracle=True,
    ),
    ZooEntry(
        name="sft.align_fp8_ignores_cp", op="sft", function="align_size",
        bug="FP8 alignment lcm(base, 16) instead of lcm(base, 16 * cp): CP ranks' slabs not "
            "16-aligned",
        killers=("equivalence", "pin:fp8_cp", "property:divisible"),
        replacement=_align_fp8_ignores_cp,
    ),
    ZooEntry(
        name="sft.align_fp8_ignores_recipe", op="sft", function="align_size",
        bug="the FP8 recipe validated but not used: block scaling and MXFP8 aligned like "
            "per-tensor scaling (too small a slot: Transformer Engine's assertions)",
        killers=("equivalence", "pin:fp8_blockwise_tp", "pin:fp8_mxfp8", "property:divisible"),
        replacement=_align_fp8_ignores_recipe,
    ),
    ZooEntry(
        name="sft.oracle_align_skyrl_0_3_rule", op="sft", function="align_size",
        bug="SkyRL 0.3.0's FP8 rule in the oracle, lcm(layout, 16 * cp) whatever the recipe",
        killers=("pin:fp8_tp", "pin:fp8_blockwise_tp", "pin:fp8_mxfp8", "property:divisible"),
        replacement=_align_skyrl_0_3,
        oracle=True,
    ),
    ZooEntry(
        name="sft.oracle_align_skyrl_0_4_rule", op="sft", function="align_size",
        bug="SkyRL 0.4.0's FP8 rule in the oracle: per-tensor scaling aligned like block "
            "scaling when tp > 1 (over-padding)",
        killers=("pin:fp8_tp", "property:minimal"),
        replacement=_align_skyrl_0_4,
        oracle=True,
    ),
    ZooEntry(
        name="sft.align_fp8_product", op="sft", function="align_size",
        bug="FP8 alignment base * 16 * cp instead of the lcm: over-padding every sub-sequence",
        killers=("equivalence", "pin:fp8_tp", "property:minimal"),
        replacement=_align_fp8_product,
    ),
    # pack_sft
    ZooEntry(
        name="sft.bin_major_rows", op="sft", function="pack_sft",
        bug="rows emitted bin-major: a contiguous DP split gives rank 0 bins 0..k instead of "
            "bins 0, dp, 2dp, ...",
        killers=("equivalence", "pin:shard_major_order", "property:tokens_in_bin_order",
                 "property:round_trip"),
        replacement=_bin_major,
    ),
    ZooEntry(
        name="sft.oracle_bin_major_rows", op="sft", function="pack_sft",
        bug="bin-major rows in the oracle too: only the pin and the bin-order property see it",
        killers=("pin:shard_major_order", "property:tokens_in_bin_order"),
        replacement=_bin_major,
        oracle=True,
    ),
    ZooEntry(
        name="sft.loss_unshifted", op="sft", function="pack_sft",
        bug="loss_mask[off + p] = full[p] instead of full[p + 1]: every target off by one, a "
            "target across each sub-sequence boundary",
        killers=("equivalence", "pin:loss_shift", "property:no_target_across_boundary",
                 "property:round_trip"),
        replacement=_loss_unshifted,
    ),
    ZooEntry(
        name="sft.oracle_loss_unshifted", op="sft", function="pack_sft",
        bug="the unshifted loss mask in the oracle: the pin's literal and the properties see it",
        killers=("pin:loss_shift", "property:no_target_across_boundary", "property:round_trip"),
        replacement=_oracle_loss_unshifted,
        oracle=True,
    ),
    ZooEntry(
        name="sft.w_minus_1_clamp", op="sft", function="pack_sft",
        bug="per-token loss writes clamped to column W - 2 ('unreachable'): the last target of "
            "a sub-sequence that ends exactly at W is erased",
        killers=("equivalence", "pin:last_target_at_width", "property:loss_total",
                 "property:round_trip"),
        replacement=_w_minus_1_clamp,
    ),
    ZooEntry(
        name="sft.normalized_before_shift", op="sft", function="pack_sft",
        bug="normalized by the raw loss-mask total (full[0] included) instead of the targets",
        killers=("equivalence", "pin:loss_shift", "property:loss_total",
                 "property:normalized_weights"),
        replacement=_normalized_before_shift,
    ),
    ZooEntry(
        name="sft.attention_over_aligned_slot", op="sft", function="pack_sft",
        bug="attention_mask covers the whole aligned slot: alignment padding is attended",
        killers=("equivalence", "property:attention_counts"),
        replacement=_attention_over_slot,
    ),
    ZooEntry(
        name="sft.padding_before_subsequence", op="sft", function="pack_sft",
        bug="alignment padding placed before each sub-sequence: unpacking by offsets reads pads",
        killers=("equivalence", "property:round_trip"),
        replacement=_right_aligned_in_slot,
    ),
    ZooEntry(
        name="sft.positions_not_restarting", op="sft", function="pack_sft",
        bug="position_ids run over the whole row instead of restarting per sub-sequence",
        killers=("equivalence", "property:round_trip"),
        replacement=_positions_not_restarting,
    ),
    ZooEntry(
        name="sft.cu_seqlens_with_row_tails", op="sft", function="pack_sft",
        bug="cu_seqlens_padded computed as offsets into the flattened (rows, W) tensor: row "
            "tails counted, every later segment shifted",
        killers=("equivalence", "property:cu_seqlens"),
        replacement=_cu_seqlens_with_row_tails,
    ),
    ZooEntry(
        name="sft.cu_seqlens_int64", op="sft", function="pack_sft",
        bug="cu_seqlens_padded in int64 (torch.cumsum promotes int32): flash-attn rejects it",
        killers=("equivalence", "property:shapes_and_dtypes", "property:cu_seqlens"),
        replacement=_cu_seqlens_int64,
    ),
    ZooEntry(
        name="sft.pp_in_alignment", op="sft", function="pack_sft",
        bug="pipeline parallelism folded into the alignment (slots padded to tp * pp)",
        killers=("property:pp_invariant", "pin:pp_has_no_effect"),
        replacement=_pp_in_alignment,
    ),
    # collate_sft
    ZooEntry(
        name="sft.length1_loss_mask_broadcast", op="sft", function="collate_sft",
        bug="a length-1 loss_mask broadcast over num_actions instead of rejected",
        reference="SkyRL collate_sft_batch",
        killers=("errors", "pin:broadcast_length1_loss_mask"),
        replacement=_broadcast_length1,
    ),
    ZooEntry(
        name="sft.collate_right_padded", op="sft", function="collate_sft",
        bug="right padding where the layout is left-padded",
        killers=("equivalence", "property:left_padded"),
        replacement=_right_padded,
    ),
    ZooEntry(
        name="sft.collate_loss_left_aligned", op="sft", function="collate_sft",
        bug="loss masks left-aligned in the A response columns",
        killers=("equivalence", "property:loss_right_aligned"),
        replacement=_loss_left_aligned,
    ),
    ZooEntry(
        name="sft.collate_mask_from_tokens", op="sft", function="collate_sft",
        bug="attention_mask derived from `input_ids != pad_token_id`",
        killers=("equivalence", "property:left_padded", "pin:pad_id_inside_tokens"),
        replacement=_mask_from_tokens,
    ),
    ZooEntry(
        name="sft.collate_loss_width_s", op="sft", function="collate_sft",
        bug="loss mask padded to the sequence width S instead of A (to_padded_tensor to the "
            "wrong size)",
        killers=("equivalence", "property:shapes_and_dtypes"),
        replacement=_loss_width_s,
    ),
    ZooEntry(
        name="sft.collate_sequence_mean", op="sft", function="collate_sft",
        bug="normalize divides each row by its own total (sequence mean) instead of the batch's "
            "(token mean)",
        killers=("equivalence", "property:normalized_weights", "property:loss_right_aligned",
                 "pin:token_mean_normalization"),
        replacement=_sequence_mean,
    ),
    # spec choices (sft.md, "Spec choices"): the other plausible rule, planted in the reference
    # too, so only the properties and the literal pins can tell it from the contract
    _choice("oracle_ffd_ties_smaller_index", "ffd_bins",
            "FFD visits equal lengths smaller index first instead of larger",
            ("pin:spec_tie_order", "sft.pack_sft/pin:ffd_tie_order"), _ffd_ties_ascending),
    _choice("oracle_ffd_capacity_exclusive", "ffd_bins",
            "an item fits a bin only when it leaves room (remaining > length): no bin is filled "
            "exactly to capacity", ("pin:spec_bin_multiple",), _ffd_capacity_exclusive),
    _choice("oracle_ffd_split_heaviest_bin", "ffd_bins",
            "the adjustment splits the bin holding the most tokens instead of the most items",
            ("pin:split_bin_with_most_items",), _ffd_split_heaviest),
    _choice("oracle_ffd_move_first_item", "ffd_bins",
            "the adjustment moves the donor's first (largest) item instead of its last",
            ("pin:spec_tie_order", "pin:spec_bin_multiple"), _ffd_move_first_item),
    _choice("oracle_ffd_round_robin_split", "ffd_bins",
            "the adjustment takes one item from each bin in turn instead of draining one bin "
            "first", ("pin:drain_one_bin_first",), _ffd_round_robin),
    _choice("oracle_padding_before_subsequence", "pack_sft",
            "alignment padding before each sub-sequence (tokens at the end of their slot) "
            "instead of after it", ("property:round_trip",), _right_aligned_in_slot),
    _choice("oracle_cu_seqlens_with_row_tails", "pack_sft",
            "cu_seqlens_padded as offsets into the flattened (rows, W) tensor instead of the "
            "THD stream without row tails", ("property:cu_seqlens",),
            _cu_seqlens_with_row_tails),
    _choice("oracle_collate_right_padded", "collate_sft",
            "collate_sft pads on the right instead of the left", ("property:left_padded",),
            _right_padded),
    _choice("oracle_collate_loss_left_aligned", "collate_sft",
            "loss masks left-aligned in the A columns instead of right-aligned",
            ("property:loss_right_aligned",), _loss_left_aligned),
    _choice("oracle_collate_loss_width_s", "collate_sft",
            "the loss mask as wide as the sequence (S) instead of A = max num_actions",
            ("property:shapes_and_dtypes",), _loss_width_s),
    _choice("oracle_collate_sequence_mean", "collate_sft",
            "normalize=True divides by each row's own total (sequence mean) instead of the "
            "batch total (token mean)",
            ("property:normalized_weights", "pin:token_mean_normalization"), _sequence_mean),
    # magnitudes: the total normalize divides by, exact on one side of a boundary only
    ZooEntry(
        name="sft.normalize_total_float32", op="sft", function="collate_sft",
        bug="the normalize total accumulated in float32: exact up to 2**24, then it loses the "
            "small values, and a total beyond 3.4e38 is inf (every weight scaled to 0)",
        killers=("equivalence", "pin:total_past_2_24", "pin:total_beyond_float32"),
        replacement=_normalized_by(lambda loss: float(loss.sum())),
    ),
    ZooEntry(
        name="sft.normalize_total_in_order", op="sft", function="collate_sft",
        bug="the normalize total summed in float64 in order instead of exactly: 2**53 + 1 "
            "rounds away the 1",
        killers=("pin:total_needs_fsum",),
        replacement=_normalized_by(lambda loss: sum(loss.double().flatten().tolist())),
    ),
    ZooEntry(
        name="sft.oracle_normalize_total_fsum_raises", op="sft", function="collate_sft",
        bug="the exact total taken with math.fsum alone, in the reference too: +inf and -inf "
            "loss weights (float16 3e38) raise ValueError where IEEE addition gives NaN",
        killers=("pin:opposite_infinities_make_nan",),
        replacement=_normalized_by(lambda loss: math.fsum(loss.flatten().tolist())),
        oracle=True,
    ),
    ZooEntry(
        name="sft.lists_never_written_in_place", op="sft", function="collate_sft",
        target="_writable_in_place",
        bug="dispatch: the CPU's in-place packing of list ids never chosen (its condition "
            "always false): lists take the flatten-and-scatter path (equal outputs, a slower "
            "op)",
        killers=("paths:kernel", "paths:cpu", "sft.pack_sft/paths:cpu"),
        replacement=lambda batch, out: False,
    ),
]


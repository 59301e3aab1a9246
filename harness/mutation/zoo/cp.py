"""Bug-zoo entries for `cp`: the public context-parallel bugs (docs/cp.md), one planted per
property at least.

Most entries run the correct `impl` function with one private step swapped for a faulty one
(`_swapped`) or edit one output of the correct function (`_edited`), so each stays a few lines
long and wrong in exactly one way. `oracle=True` entries plant the same bug in the reference:
the spec itself implemented wrongly, which only the properties and the pins' literal
expectations can see.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from batchproof.impl import cp as _impl
from batchproof.impl.kernels import triton_cp as _triton_cp
from batchproof.mutation.zoo import ZooEntry

# the correct functions, bound before any entry is planted (planting replaces module attributes)
_pad = _impl.pad_for_cp
_shift = _impl.shift_labels
_shard = _impl.shard
_bshd = _impl.shard_bshd
_unshard = _impl.unshard
_flatten = _impl.flatten_micro_batch
_gather_rows = _triton_cp.gather_rows


@contextlib.contextmanager
def _steps_replaced(modules, **steps: Callable) -> Iterator[None]:
    saved = [(module, name, getattr(module, name)) for module in modules for name in steps]
    try:
        for module in modules:
            for name, step in steps.items():
                setattr(module, name, step)
        yield
    finally:
        for module, name, step in saved:
            setattr(module, name, step)


def _swapped(function: Callable, modules=(_impl,), **steps: Callable) -> Callable:
    """`function` (a correct function) run with some private steps of `modules` replaced."""

    def replacement(*args, **kwargs):
        with _steps_replaced(modules, **steps):
            return function(*args, **kwargs)

    return replacement


def _edited(function: Callable, **edits: Callable) -> Callable:
    """The correct function, then `out[key] = edit(out, args, kwargs)` for each edit."""

    def replacement(*args, **kwargs):
        out = function(*args, **kwargs)
        for key, edit in edits.items():
            out[key] = edit(out, args, kwargs)
        return out

    return replacement


def _lists(out):
    return out["cu_seqlens"].tolist(), out["cu_seqlens_padded"].tolist()


# --------------------------------------------------------------------------- pad_for_cp


def _positions_restart_at_pad(out, args, kwargs):
    """The pad of each sequence gets its own positions 0, 1, ... (as a packer's tail pad does)
    instead of continuing its sequence's."""
    cu, padded = _lists(out)
    positions = out["position_ids"].clone()
    for i in range(len(cu) - 1):
        length = cu[i + 1] - cu[i]
        for w in range(length, padded[i + 1] - padded[i]):
            positions[0, padded[i] + w] = w - length
    return positions


def _real_boundaries_are_padded(out, args, kwargs):
    """NeMo-RL #4070: the padded boundaries passed as the real ones."""
    return out["cu_seqlens_padded"].clone()


def _labels_rolled_over_stream(out, args, kwargs):
    """Labels from one roll of the whole padded stream: a sequence's last real token labelled
    with its pad, pads labelled with what follows them."""
    ids = out["input_ids"]
    labels = torch.roll(ids, -1, dims=1)
    if labels.numel():
        labels[0, -1] = kwargs.get("ignore_index", -100)
    return labels


def _padding_absorbed(input_ids, cu_seqlens, **kwargs):
    """NeMo-RL #3182: each sequence's alignment padding counted into its span for the labels:
    its last real token is labelled with a pad, and a pad with the next pad."""
    out = _pad(input_ids, cu_seqlens, **kwargs)
    cu, padded = _lists(out)
    shifted = _impl.shift_labels(out["input_ids"], padded, cu_seqlens_padded=padded,
                                 ignore_index=kwargs.get("ignore_index", -100))
    out["labels"] = shifted["labels"]
    out["loss_mask"] = shifted["loss_mask"]
    return out


# --------------------------------------------------------------------------- shift_labels


def _shift_with_real_boundaries(input_ids, cu_seqlens, *, cu_seqlens_padded=None, **kwargs):
    """Megatron-LM #6205 / #4495: the roll reads the real cu_seqlens as offsets into a stream
    laid out with the padded ones."""
    if cu_seqlens_padded is None:
        return _shift(input_ids, cu_seqlens, **kwargs)
    cu = _plain(cu_seqlens)
    length = len(_plain(input_ids))
    boundaries = cu if cu[-1] == length else cu + [length]
    out = _shift(input_ids, boundaries, **kwargs)
    return out


def _plain(value):
    return value.reshape(-1).tolist() if isinstance(value, torch.Tensor) else list(value)


def _loss_mask_unshifted(out, args, kwargs):
    """The loss mask left aligned with the token, not with the token it predicts."""
    given = kwargs.get("loss_mask")
    loss = out["loss_mask"].clone()
    labels = out["labels"]
    ignore = kwargs.get("ignore_index", -100)
    weights = (torch.ones_like(loss) if given is None
               else torch.as_tensor(_plain(given), dtype=torch.float32).reshape(loss.shape))
    has_label = labels != ignore
    return torch.where(has_label, weights, loss)


def _roll_whole_stream(input_ids, cu_seqlens, **kwargs):
    """verl #6564 / Megatron's packed roll: one roll of the whole stream; only the stream's last
    position is ignored, a sequence's last token is labelled with the next one's first."""
    out = _shift(input_ids, cu_seqlens, **kwargs)
    ids = torch.as_tensor(_plain(input_ids), dtype=torch.int64).reshape(1, -1)
    labels = torch.roll(ids, -1, dims=1)
    if labels.numel():
        labels[0, -1] = kwargs.get("ignore_index", -100)
    out["labels"] = labels
    return out


# --------------------------------------------------------------------------- shard


def _local_from_real(out, args, kwargs):
    """Megatron-LM #2645: local boundaries as cu_seqlens // cp, on lengths that are not
    multiples of it."""
    padded = args[0]
    cp_size = kwargs["cp_size"]
    local = (padded["cu_seqlens"].to(torch.int64) // cp_size).to(torch.int32)
    return local[None, :].expand(out.batch_size[0], -1).clone()


def _slots_first_chunk_twice(cu, padded, ranks, n, cp_size, layout):
    """Rank r's second zigzag chunk is chunk r again: chunk r held twice, chunk 2·cp-1-r by
    nobody."""
    if layout == "contiguous" or cp_size == 1:
        return _correct_slots(cu, padded, ranks, n, cp_size, layout)
    local = torch.arange(n, dtype=torch.int64)
    owner = torch.searchsorted(padded[1:] // cp_size, local, right=True)[None, :].expand(
        ranks.shape[0], n)
    start = padded[owner]
    chunk = (padded[owner + 1] - start) // (2 * cp_size)
    within = local[None, :] - start // cp_size
    within = torch.where(within >= chunk, within - chunk, within)
    positions = start + ranks[:, None] * chunk + within
    offset = positions - padded[owner]
    tokens = torch.where(offset < (cu[owner + 1] - cu[owner]), cu[owner] + offset, -1)
    return positions, tokens


_correct_slots = _impl._slots
_correct_counts = _impl._local_counts


def _labels_sliced_contiguously(padded, *, cp_size, layout="zigzag", cp_rank=None):
    """Every field but input_ids cut into contiguous slices whatever the layout: labels,
    positions and loss masks do not travel with their tokens."""
    out = _shard(padded, cp_size=cp_size, layout=layout, cp_rank=cp_rank)
    total = padded["input_ids"].shape[1]
    n = total // cp_size
    rows = out["rank"].tolist()
    for key in padded.keys():
        if key in ("input_ids", "cu_seqlens", "cu_seqlens_padded") or \
                isinstance(padded, dict) and not isinstance(padded[key], torch.Tensor) or \
                not isinstance(padded, dict) and padded.is_non_tensor(key):
            continue
        value = padded[key][0]
        out[key] = torch.stack([value[r * n:(r + 1) * n] for r in rows])
    return out


def _slots_adjacent_chunks(cu, padded, ranks, n, cp_size, layout):
    """Rank r holds chunks 2r and 2r+1 of every sequence: each sequence cut contiguously, the
    last rank doing the most causal work."""
    if layout == "contiguous" or cp_size == 1:
        return _correct_slots(cu, padded, ranks, n, cp_size, layout)
    local = torch.arange(n, dtype=torch.int64)
    owner = torch.searchsorted(padded[1:] // cp_size, local, right=True)[None, :].expand(
        ranks.shape[0], n)
    start = padded[owner]
    within = local[None, :] - start // cp_size
    span = padded[owner + 1] - start
    positions = start + ranks[:, None] * (span // cp_size) + within
    offset = positions - padded[owner]
    tokens = torch.where(offset < (cu[owner + 1] - cu[owner]), cu[owner] + offset, -1)
    return positions, tokens


def _counts_adjacent_chunks(cu, padded, ranks, n, cp_size, layout):
    if layout == "contiguous" or cp_size == 1:
        return _correct_counts(cu, padded, ranks, n, cp_size, layout)
    lengths, spans = cu.diff()[None, :], padded.diff()[None, :]
    share = spans // cp_size
    real = torch.minimum((lengths - ranks[:, None] * share).clamp(min=0), share)
    return real, share.expand(ranks.shape[0], -1)


def _shard_adjacent_chunks(padded, *, cp_size, layout="zigzag", cp_rank=None):
    with _steps_replaced((_impl,), _slots=_slots_adjacent_chunks,
                         _local_counts=_counts_adjacent_chunks):
        saved, _impl.kernels.TRITON = _impl.kernels.TRITON, False  # (the torch path's slots)
        try:
            return _shard(padded, cp_size=cp_size, layout=layout, cp_rank=cp_rank)
        finally:
            _impl.kernels.TRITON = saved


def _real_counts_floor(out, args, kwargs):
    """TransformerEngine #1930 / #3331: each rank's real tokens of a sequence taken as
    l_i // cp (the cu_seqlens // cp approximation), not counted."""
    padded = args[0]
    lengths = padded["cu_seqlens"].to(torch.int64).diff()
    per_rank = (lengths // kwargs["cp_size"])[None, :].expand(out.batch_size[0], -1)
    zero = per_rank.new_zeros((per_rank.shape[0], 1))
    return torch.cat([zero, torch.cumsum(per_rank, 1)], 1).to(torch.int32)


def _rank_selection_ignored(padded, *, cp_size, layout="zigzag", cp_rank=None):
    """A selected cp_rank served rank 0's share."""
    if cp_rank is None:
        return _shard(padded, cp_size=cp_size, layout=layout)
    return _shard(padded, cp_size=cp_size, layout=layout, cp_rank=0)


# --------------------------------------------------------------------------- shard_bshd


def _bshd_contiguous_for_zigzag(batch, *, cp_size, layout="zigzag", cp_rank=None):
    """Zigzag asked, contiguous served: the BSHD path ignores the load-balanced layout."""
    if layout == "zigzag" and any(value.shape[1] % (2 * cp_size) for value in _tensors(batch)):
        return _bshd(batch, cp_size=cp_size, layout=layout, cp_rank=cp_rank)  # (its error)
    return _bshd(batch, cp_size=cp_size, layout="contiguous", cp_rank=cp_rank)


def _tensors(batch):
    return [v for v in (batch.values() if isinstance(batch, dict) else
                        [batch[k] for k in batch.keys() if not batch.is_non_tensor(k)])
            if isinstance(v, torch.Tensor) and v.dim() >= 2]


def _bshd_every_rank_rank_zero(batch, *, cp_size, layout="zigzag", cp_rank=None):
    """Every rank served rank 0's columns (a rank index that never reaches the slicing)."""
    out = _bshd(batch, cp_size=cp_size, layout=layout, cp_rank=cp_rank)
    if cp_rank is not None:
        return out
    for key in out.keys():
        out[key] = out[key][:1].expand_as(out[key]).clone()
    return out


# --------------------------------------------------------------------------- unshard


def _unshard_always_zigzag(outputs, cu_seqlens, cu_seqlens_padded, *, layout="zigzag"):
    """slime #1871: a contiguous all-gather reassembled with the zigzag reshuffle."""
    try:
        return _unshard(outputs, cu_seqlens, cu_seqlens_padded, layout="zigzag")
    except ValueError:  # (spans that zigzag cannot read: the contiguous answer)
        return _unshard(outputs, cu_seqlens, cu_seqlens_padded, layout=layout)


def _unshard_reads_pads(outputs, cu_seqlens, cu_seqlens_padded, *, layout="zigzag"):
    """The padded stream reassembled, then its first T positions kept: pads read in place of
    the real tokens after them."""
    out = _unshard(outputs, cu_seqlens_padded, cu_seqlens_padded, layout=layout)
    total = int(_plain(cu_seqlens)[-1])
    return out[:, :total].clone()


# --------------------------------------------------------------------------- flatten


def _first_row_boundaries(out, args, kwargs):
    """Megatron-LM #5454: the first row's cu_seqlens used for the whole micro-batch."""
    return torch.as_tensor(_plain(args[0][0]["cu_seqlens"]), dtype=torch.int32)


def _shift_by_previous_row(rows):
    """Each row's boundaries shifted by the previous row's tokens only, not by all before."""
    out = _flatten(rows)
    for key in ("cu_seqlens", "cu_seqlens_padded"):
        if key not in out.keys():
            continue
        parts, previous = [[0]], 0
        for row in rows:
            values = _plain(row[key])
            parts.append([previous + v for v in values[1:]])
            previous = values[-1]
        out[key] = torch.tensor([v for part in parts for v in part], dtype=torch.int32)
    return out


# --------------------------------------------------------------------------- router replay


def _zero_padding_routes(out, args, kwargs):
    """verl #7524's class in the CP padding: every pad (and uncaptured token) given the all-zero
    route, topk times expert 0, instead of the dummy route."""
    mask = out["router_padding_mask"][..., None, None]
    return torch.where(mask, torch.zeros_like(out["routed_experts"]), out["routed_experts"])


def _pad_zero_filled(input_ids, cu_seqlens, **kwargs):
    out = _pad(input_ids, cu_seqlens, **kwargs)
    if "routed_experts" in out.keys():
        out["routed_experts"] = _zero_padding_routes(out, (input_ids, cu_seqlens), kwargs)
    return out


def _widening_gather(src, index):
    """The Triton copy, with narrow integer fields (routes in uint8 / int16 / int32) copied
    into int64: a silent dtype change on the CUDA path only."""
    narrow = (torch.uint8, torch.int16, torch.int32)
    return _gather_rows(src.to(torch.int64) if src.dtype in narrow else src, index)


def _shard_widened_on_triton(padded, **kwargs):
    """shard on the Triton path (interpreted on the CPU, as the `triton` placement runs it:
    batchproof[triton] is installed with the dev extras) with a gather that widens narrow
    integer fields."""
    saved = _impl.kernels.TRITON_ON_CPU, _triton_cp.gather_rows
    _impl.kernels.TRITON_ON_CPU, _triton_cp.gather_rows = True, _widening_gather
    try:
        return _shard(padded, **kwargs)
    finally:
        _impl.kernels.TRITON_ON_CPU, _triton_cp.gather_rows = saved


def _routes_of_mirror_rank(padded, *, cp_size, layout="zigzag", cp_rank=None):
    """Each rank given its mirror rank's (cp - 1 - r) routes and router padding mask, while its
    tokens are its own: a rank index read backwards for the replay fields only."""
    out = _shard(padded, cp_size=cp_size, layout=layout, cp_rank=cp_rank)
    if "routed_experts" not in out.keys():
        return out
    every = _shard(padded, cp_size=cp_size, layout=layout)
    mirror = [cp_size - 1 - r for r in out["rank"].tolist()]
    for key in ("routed_experts", "router_padding_mask"):
        out[key] = every[key][mirror]
    return out


def _entry(name, function, bug, killers, replacement, reference="", oracle=False) -> ZooEntry:
    return ZooEntry(name=f"cp.{name}", op="cp", function=function, bug=bug,
                    killers=tuple(killers), replacement=replacement, reference=reference,
                    oracle=oracle)


def _multiple_of_cp(cp_size):
    return cp_size


def _multiple_always_doubled(cp_size):
    return 2 * cp_size


ENTRIES = [
    # pad_for_cp
    _entry("pad_positions_restart_at_pad", "pad_for_cp",
           "each sequence's pad gets positions 0, 1, ... of its own, not the sequence's next",
           ("equivalence", "property:layout"),
           _edited(_pad, position_ids=_positions_restart_at_pad)),
    _entry("real_boundaries_are_padded", "pad_for_cp",
           "the padded boundaries returned as the real cu_seqlens",
           ("equivalence", "property:boundaries", "pin:nemo_rl_4070_real_boundaries_stay_real"),
           _edited(_pad, cu_seqlens=_real_boundaries_are_padded),
           "NVIDIA-NeMo/RL#4070"),
    _entry("oracle_pad_to_cp_not_2cp", "pad_for_cp",
           "the spec pads each sequence to a multiple of cp: zigzag needs 2·cp equal chunks",
           ("property:boundaries", "pin:worked_example"),
           _swapped(_pad, (_impl,), multiple=_multiple_of_cp),
           "NVIDIA/Megatron-LM#2645, NVIDIA-NeMo/labs-molt#105", oracle=True),
    _entry("oracle_pad_cp1_to_two", "pad_for_cp",
           "the spec pads to 2·cp for cp = 1 too: no longer the identity",
           ("property:cp1_identity", "property:boundaries", "pin:cp1_pads_nothing"),
           _swapped(_pad, (_impl,), multiple=_multiple_always_doubled), oracle=True),
    _entry("labels_rolled_over_stream", "pad_for_cp",
           "labels from one roll of the padded stream: last real tokens labelled with pads",
           ("equivalence", "property:labels_never_from_padding"),
           _edited(_pad, labels=_labels_rolled_over_stream)),
    _entry("padding_absorbed_into_sequence", "pad_for_cp",
           "labels computed over each padded span as if it were real: the pad is trained on",
           ("equivalence", "property:labels_never_from_padding",
            "pin:nemo_rl_3182_padding_not_absorbed"),
           _padding_absorbed, "NVIDIA-NeMo/RL#3182"),
    # shift_labels
    _entry("shift_real_boundaries_on_padded_stream", "shift_labels",
           "the roll uses the real cu_seqlens as offsets into the padded stream",
           ("equivalence", "property:within_sequences", "pin:megatron_6205_4495_padded_roll"),
           _shift_with_real_boundaries, "NVIDIA/Megatron-LM#6205, NVIDIA/Megatron-LM#4495"),
    _entry("shift_loss_mask_unshifted", "shift_labels",
           "the loss mask aligned with the token, not with the one it predicts",
           ("equivalence", "property:loss_mask_follows_labels"),
           _edited(_shift, loss_mask=_loss_mask_unshifted)),
    _entry("shift_roll_whole_stream", "shift_labels",
           "one roll of the whole stream: a sequence's last token labelled with the next one's "
           "first", ("equivalence", "property:within_sequences",
                     "property:sequences_independent", "pin:verl_6564_roll_across_sequences"),
           _roll_whole_stream, "verl-project/verl#6564"),
    # shard
    _entry("local_boundaries_from_real", "shard",
           "local cu_seqlens_padded as cu_seqlens // cp (lengths not multiples of cp)",
           ("equivalence", "property:equal_tokens_per_rank",
            "pin:megatron_2645_local_boundaries_from_padded"),
           _edited(_shard, cu_seqlens_padded=_local_from_real), "NVIDIA/Megatron-LM#2645"),
    _entry("second_chunk_repeats_first", "shard",
           "rank r's second zigzag chunk is chunk r again: tokens duplicated and dropped",
           ("equivalence", "property:nothing_dropped_or_duplicated"),
           _swapped(_shard, (_impl,), _slots=_slots_first_chunk_twice,
                    _slots_triton=lambda cu, padded, ranks, n, cp_size, layout, cp_rank, longest:
                    _slots_first_chunk_twice(cu, padded, ranks, n, cp_size, layout))),
    _entry("labels_sliced_contiguously", "shard",
           "labels, positions and masks cut contiguously while the tokens go zigzag",
           ("equivalence", "property:values_travel_with_tokens"),
           _labels_sliced_contiguously),
    _entry("oracle_zigzag_adjacent_chunks", "shard",
           "the spec gives rank r chunks 2r and 2r+1: every token once, causal work unbalanced",
           ("property:zigzag_balance", "pin:worked_example_zigzag",
            "pin:te_1930_last_valid_token_kept"),
           _shard_adjacent_chunks, oracle=True),
    _entry("real_counts_floor", "shard",
           "each rank's real tokens of a sequence as l // cp, not counted",
           ("equivalence", "property:local_boundaries", "pin:te_3331_tail_padding_real_counts",
            "pin:te_1930_last_valid_token_kept"),
           _edited(_shard, cu_seqlens=_real_counts_floor),
           "NVIDIA/TransformerEngine#1930, NVIDIA/TransformerEngine#3331"),
    _entry("rank_selection_ignored", "shard",
           "a selected cp_rank served rank 0's share",
           ("equivalence", "property:one_rank_is_its_row", "pin:one_rank"),
           _rank_selection_ignored),
    # shard_bshd
    _entry("bshd_contiguous_for_zigzag", "shard_bshd",
           "the BSHD path slices contiguously when zigzag is asked",
           ("equivalence", "property:chunks_per_rank", "pin:megatron_bshd_zigzag"),
           _bshd_contiguous_for_zigzag),
    _entry("bshd_every_rank_rank_zero", "shard_bshd",
           "every rank served rank 0's columns",
           ("equivalence", "property:chunks_per_rank", "property:round_trip"),
           _bshd_every_rank_rank_zero),
    # unshard
    _entry("unshard_contiguous_as_zigzag", "unshard",
           "a contiguous all-gather reassembled with the zigzag reshuffle: token order "
           "scrambled, shapes fine",
           ("equivalence", "property:inverse_of_shard", "pin:slime_1871_contiguous_not_zigzag"),
           _unshard_always_zigzag, "THUDM/slime#1871, modelscope/ms-swift#10071"),
    _entry("unshard_reads_pads", "unshard",
           "the padded stream's first T positions kept: pads read, later real tokens dropped",
           ("equivalence", "property:inverse_of_shard", "property:pads_never_read"),
           _unshard_reads_pads, "verl-project/verl#5981"),
    # router replay
    _entry("zero_filled_padding_routes", "pad_for_cp",
           "the CP padding's routes all zeros (topk times expert 0) instead of the dummy route: "
           "a dropless dispatcher's tokens * topk broken",
           ("equivalence", "property:routes_on_their_tokens", "property:route_count_per_layer",
            "pin:verl_7106_routes_follow_thd_padding"),
           _pad_zero_filled, "verl-project/verl#7524, verl-project/verl#7106"),
    _entry("routes_widened_on_triton", "shard",
           "a silent dtype change on the Triton/CUDA path: uint8 / int16 / int32 routes come "
           "back int64 from the GPU gather (the CPU path keeps them)",
           ("equivalence", "property:equal_tokens_per_rank", "pin:verl_7106_routes_per_rank"),
           _shard_widened_on_triton),
    _entry("routes_of_mirror_rank", "shard",
           "a CP rank given its mirror rank's routes (cp - 1 - r) while its tokens are its own",
           ("equivalence", "property:values_travel_with_tokens", "property:routes_per_rank",
            "pin:verl_7106_routes_per_rank"),
           _routes_of_mirror_rank),
    # flatten_micro_batch
    _entry("flatten_first_row_boundaries", "flatten_micro_batch",
           "the first row's cu_seqlens used for the whole micro-batch",
           ("equivalence", "property:offset_boundaries", "pin:megatron_5454_micro_batch"),
           _edited(_flatten, cu_seqlens=_first_row_boundaries), "NVIDIA/Megatron-LM#5454"),
    _entry("flatten_shift_by_previous_row", "flatten_micro_batch",
           "each row's boundaries shifted by the previous row's tokens only",
           ("equivalence", "property:offset_boundaries", "property:associative"),
           _shift_by_previous_row),
]

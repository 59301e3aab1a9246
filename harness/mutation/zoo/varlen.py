"""Bug-zoo entries for `varlen`: packing index arithmetic, flash-attn unpad/repad semantics, and
the packed forwards that silently let samples attend to each other.

Most entries run the correct `impl` function with one private step swapped for a faulty one
(`_swapped`), so each stays a few lines long and obviously wrong in exactly one way. The packed
forward variants (`NEGATIVE_CONTROLS`) are also the negative controls of tests/test_varlen.py,
which measures their |Δ| against the dense oracle (docs/equivalence.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from tensordict import TensorDict

from batchproof import replay
from batchproof.impl import varlen as _impl
from batchproof.mutation.zoo import ZooEntry
from batchproof.reference import varlen as _reference

# the correct functions, bound before any entry is planted (planting replaces module attributes)
_pack = _impl.pack_varlen
_unpack = _impl.unpack_response_logprobs
_unpad = _impl.unpad
_repad = _impl.repad
_repad_routes = _impl.repad_routes
_logprobs = _impl.response_logprobs
_oracle_unpack = _reference.unpack_response_logprobs
_segments = _impl.packed_segments
_oracle_segments = _reference.packed_segments
_forward = _impl._forward_position_ids


@contextlib.contextmanager
def _steps_replaced(**steps: Callable) -> Iterator[None]:
    saved = {name: getattr(_impl, name) for name in steps}
    try:
        for name, step in steps.items():
            setattr(_impl, name, step)
        yield
    finally:
        for name, step in saved.items():
            setattr(_impl, name, step)


def _swapped(function: Callable, **steps: Callable) -> Callable:
    """`function` (a correct impl function) run with some of impl.varlen's private steps
    replaced."""

    def replacement(*args, **kwargs):
        with _steps_replaced(**steps):
            return function(*args, **kwargs)

    return replacement


# --------------------------------------------------------------------------- packing


def _samples_accepting_empty_prompts(prompts, responses, device):
    """`_samples` without the p == 0 < r check: predict_index off_k - 1 reads the previous
    sample's last position (or, for sample 0, wraps around to the end of the row)."""
    p_tokens, p_lengths, p_host = _impl._flatten(prompts, "prompts", device)
    r_tokens, r_lengths, r_host = _impl._flatten(responses, "responses", device)
    if p_lengths.shape[0] != r_lengths.shape[0] or p_lengths.shape[0] == 0:
        raise ValueError("prompts and responses must have the same, non-zero length")
    p_host, r_host = _impl._host_lengths(p_lengths, p_host, r_lengths, r_host)
    return _impl._Samples(p_tokens, r_tokens, p_lengths, r_lengths, p_host, r_host)


def _edited(**edits: Callable) -> Callable:
    """The correct packer, then `td[key] = edit(td, case arguments)` for each edit."""

    def replacement(prompts, responses, **kwargs):
        td = _pack(prompts, responses, **kwargs)
        for key, edit in edits.items():
            td[key] = edit(td, prompts, responses, kwargs)
        return td

    return replacement


def _boundary_always(td, prompts, responses, kwargs):
    """cu_seqlens always closes with N, even when the tail pad is 0 (a duplicate boundary)."""
    cu = td["cu_seqlens"]
    n = td["input_ids"].shape[1]
    return cu if int(cu[-1]) != n or len(cu) == 1 else torch.cat([cu, cu[-1:]])


def _empty_sample_boundaries(td, prompts, responses, kwargs):
    """Every sample adds a boundary, zero-length samples too (a zero-length segment)."""
    lengths = td["prompt_lengths"] + td["response_lengths"]
    ends = torch.cumsum(lengths, 0).to(torch.int32)
    n = td["input_ids"].shape[1]
    tail = ends.new_full((1,), n) if n > int(ends[-1]) else ends[:0]
    return torch.cat([ends.new_zeros(1), ends, tail])


def _predict_is_target(td, prompts, responses, kwargs):
    """Off by one: each response token 'scored' by its own logit."""
    return td["target_index"].clone()


def _positions_not_restarted(td, prompts, responses, kwargs):
    """position_ids = arange(N): one long sequence; attention detection sees no boundary."""
    n = td["input_ids"].shape[1]
    return torch.arange(n, dtype=torch.int64).reshape(1, n)


def _tail_continues_last_sample(td, prompts, responses, kwargs):
    """The tail pad continues the last sample's positions instead of starting its own segment."""
    positions = td["position_ids"].clone()
    real = int((td["prompt_lengths"] + td["response_lengths"]).sum())
    n = positions.shape[1]
    last = int(positions[0, real - 1]) + 1 if real else 0
    positions[0, real:] = torch.arange(last, last + n - real)
    return positions


def _targets_from_prompt_offsets(td, prompts, responses, kwargs):
    """Sample offsets summed over the prompts only (the responses before it forgotten)."""
    p, r = td["prompt_lengths"], td["response_lengths"]
    offsets = torch.cumsum(p, 0) - p
    owner = td["sample_index"]
    within = torch.arange(owner.shape[0]) - (torch.cumsum(r, 0) - r)[owner]
    return offsets[owner] + p[owner] + within


def _tail_zero_not_pad_token(td, prompts, responses, kwargs):
    ids = td["input_ids"].clone()
    real = int((td["prompt_lengths"] + td["response_lengths"]).sum())
    ids[0, real:] = 0
    return ids


def _cu_seqlens_int64(td, prompts, responses, kwargs):
    return td["cu_seqlens"].to(torch.int64)


def _max_seqlen_of_samples(prompts, responses, **kwargs):
    """max_seqlen over the samples only: a longer tail pad segment not counted."""
    td = _pack(prompts, responses, **kwargs)
    lengths = (td["prompt_lengths"] + td["response_lengths"]).tolist()
    td.set_non_tensor("max_seqlen", max(lengths, default=0))
    return td


def _tail_positions_at_start(td, prompts, responses, kwargs):
    """The tail pad's positions all position_ids_start (a zero-padded tail) instead of counting
    up: every pad token reads as a one-token sample."""
    positions = td["position_ids"].clone()
    real = int((td["prompt_lengths"] + td["response_lengths"]).sum())
    positions[0, real:] = kwargs.get("position_ids_start", 0)
    return positions


def _positions_from_zero(td, prompts, responses, kwargs):
    """position_ids_start ignored: 0-based positions whatever the model counts from."""
    return td["position_ids"] - kwargs.get("position_ids_start", 0)


# --------------------------------------------------------------------------- packed_segments


def _segments_from_starts(text: torch.Tensor, starts: torch.Tensor) -> TensorDict:
    """The contract's outputs from a (B, L) mask of segment starts (no validation)."""
    batch, width = text.shape
    flat = starts.reshape(-1)
    boundaries = torch.nonzero(flat).flatten().to(torch.int32)
    end = torch.tensor([batch * width], dtype=torch.int32) if flat.numel() else boundaries[:0]
    cu = torch.cat([boundaries, end]) if flat.numel() else torch.zeros(1, dtype=torch.int32)
    lengths = cu.diff()
    out = TensorDict({"cu_seqlens": cu, "seq_idx": torch.cumsum(starts, 1, dtype=torch.int32) - 1},
                     batch_size=[])
    out.set_non_tensor("max_seqlen", int(lengths.max()) if lengths.numel() else 0)
    return out


def _validated(position_ids, position_ids_start=0):
    """The text axis (B, L) after the contract's checks (the correct function raises)."""
    _segments(position_ids, position_ids_start=position_ids_start)
    return position_ids if position_ids.dim() == 2 else position_ids[0]


def _segments_strict_decrease(position_ids, *, position_ids_start=0):
    """A boundary only where the position decreases: 0 after 0 (a one-token sample) is missed,
    so the one-token sample joins the next one (ms-swift #9904)."""
    text = _validated(position_ids, position_ids_start)
    starts = torch.zeros_like(text, dtype=torch.bool)
    starts[:, :1] = True
    starts[:, 1:] = text[:, 1:] < text[:, :-1]
    return _segments_from_starts(text, starts)


def _segments_restart_at_zero(position_ids, *, position_ids_start=0):
    """Restarts looked for at position 0 whatever position_ids_start says (transformers
    #47496): rows that count from 2 become one segment each."""
    text = _validated(position_ids, position_ids_start)
    starts = text == 0
    starts[:, :1] = True
    return _segments_from_starts(text, starts)


def _segments_mrope_axis_as_batch(position_ids, *, position_ids_start=0):
    """(3, B, L) read as 3 x B rows of positions: the mRoPE axis taken for a batch axis (verl
    #7137, ms-swift #8468, transformers #44911: cu_seqlens over three times the tokens)."""
    rows = position_ids.reshape(-1, position_ids.shape[-1]) if position_ids.numel() else \
        position_ids.new_zeros((position_ids.shape[:-1].numel(), position_ids.shape[-1]))
    starts = rows == position_ids_start
    starts[:, :1] = True
    return _segments_from_starts(rows, starts)


def _segments_unvalidated(position_ids, *, position_ids_start=0):
    """No check of the positions: a jump, a row that does not begin at the start, anything, is
    read as some segments."""
    text = position_ids if position_ids.dim() == 2 else position_ids[0]
    starts = text == position_ids_start
    starts[:, :1] = True
    return _segments_from_starts(text, starts)


def _segments_coalesced_tail(position_ids, *, position_ids_start=0):
    """A trailing run of two or more one-token segments (positions at the start that end the
    row) read as one padded tail, the rule VeOmni #845 / #918 apply to their own pad: real
    one-token samples that end a row merge."""
    text = _validated(position_ids, position_ids_start)
    starts = text == position_ids_start
    starts[:, :1] = True
    for row in range(text.shape[0]):
        run = 0
        while run < text.shape[1] and bool(starts[row, text.shape[1] - 1 - run]):
            run += 1
        if run >= 2:
            starts[row, text.shape[1] - run + 1:] = False
    return _segments_from_starts(text, starts)


def _segments_step_rule(position_ids, *, position_ids_start=0):
    """transformers' mask-path rule as the contract: a boundary wherever the position does not
    step by +1 (find_packed_sequence_indices). The same on (B, L) rows; on mRoPE's text axis an
    image's plateau and the jump after it become boundaries."""
    text = _validated(position_ids, position_ids_start)
    starts = torch.ones_like(text, dtype=torch.bool)
    starts[:, 1:] = text[:, 1:] != text[:, :-1] + 1
    return _segments_from_starts(text, starts)


# --------------------------------------------------------------------------- unpack


def _left_aligned(flat_logprobs, packed, *, width=None):
    """Values in the first r_k columns: the pad/prompt side of a right-aligned response tensor."""
    out = _unpack(flat_logprobs, packed, width=width)
    lengths = packed["response_lengths"].tolist()
    return torch.stack([torch.roll(row, r) for row, r in zip(out, lengths)]) if lengths else out


def _unpack_cut_to_size(flat_logprobs, packed, *, width=None):
    """A flat tensor of the wrong size silently cut (or read per position) to fit."""
    count = packed["predict_index"].shape[0]
    if flat_logprobs.reshape(-1).shape[0] > count:
        flat_logprobs = flat_logprobs.reshape(-1)[:count]
    return _unpack(flat_logprobs, packed, width=width)


def _read_at_target(unpack):
    """A per-position tensor read at target_index (the token) instead of predict_index."""

    def replacement(flat_logprobs, packed, *, width=None):
        if flat_logprobs.numel() != packed["predict_index"].shape[0]:
            shifted = packed.clone()
            shifted["predict_index"] = packed["target_index"].clone()
            return unpack(flat_logprobs, shifted, width=width)
        return unpack(flat_logprobs, packed, width=width)

    return replacement


# --------------------------------------------------------------------------- unpad / repad


def _unpad_contiguous(x, attention_mask):
    """Indices taken as the first row-sum positions of each row (right-padded rows assumed)."""
    values, indices, cu_seqlens, max_seqlen = _unpad(x, attention_mask)
    seqlen = attention_mask.shape[1]
    sums = attention_mask.to(torch.int64).sum(1)
    owner = torch.repeat_interleave(torch.arange(sums.shape[0]), sums)
    within = torch.arange(owner.shape[0]) - (torch.cumsum(sums, 0) - sums)[owner]
    indices = owner * seqlen + within
    values = x.reshape(-1, *x.shape[2:])[indices]
    return values, indices, cu_seqlens, max_seqlen


def _unpad_cu_seqlens_padded_right(x, attention_mask):
    """cu_seqlens = pad(cumsum, (0, 1)): the 0 lands at the end instead of the front."""
    values, indices, cu_seqlens, max_seqlen = _unpad(x, attention_mask)
    return values, indices, torch.cat([cu_seqlens[1:], cu_seqlens[:1]]), max_seqlen


def _unpad_max_seqlen_tensor(x, attention_mask):
    values, indices, cu_seqlens, max_seqlen = _unpad(x, attention_mask)
    return values, indices, cu_seqlens, torch.tensor(max_seqlen)


def _unpad_without_validation(x, attention_mask):
    """flash-attn's unpad_input as is: any non-zero counts as kept in indices, but a 2 counts
    twice in cu_seqlens."""
    sums = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(sums, 0, dtype=torch.int32), (1, 0))
    max_seqlen = int(sums.max()) if sums.numel() else 0
    return x.reshape(-1, *x.shape[2:])[indices], indices, cu_seqlens, max_seqlen


def _unpad_skips_empty_rows(x, attention_mask):
    """pack_varlen's rule (no boundary for an empty sample) applied to unpad: rows with no
    tokens dropped from cu_seqlens, which then has fewer than B + 1 entries."""
    values, indices, cu_seqlens, max_seqlen = _unpad(x, attention_mask)
    keep = torch.cat([torch.ones(1, dtype=torch.bool), cu_seqlens[1:] != cu_seqlens[:-1]])
    return values, indices, cu_seqlens[keep], max_seqlen


def _repad_without_validation(values, indices, batch, seqlen):
    """flash-attn's pad_input as is: duplicate indices keep one of the values silently."""
    out = values.new_zeros((batch * seqlen, *values.shape[1:]))
    out[indices] = values
    return out.reshape(batch, seqlen, *values.shape[1:])


def _repad_column_major(values, indices, batch, seqlen):
    """The flat buffer reshaped as (seqlen, batch) and transposed: rows and columns swapped."""
    out = _repad(values, indices, batch, seqlen)
    flat = out.reshape(batch * seqlen, *values.shape[1:])
    return flat.reshape(seqlen, batch, *values.shape[1:]).transpose(0, 1).contiguous()


def _repad_sorted_indices(values, indices, batch, seqlen):
    """Values written to the sorted indices, in the given order (sorted indices assumed)."""
    return _repad(values, indices.sort().values, batch, seqlen)


# --------------------------------------------------------------------------- packed forwards


def _forward_with_cache(model, input_ids, position_ids, keep):
    """use_cache left at its default: transformers creates a DynamicCache, and with a cache
    object present it skips packed-sequence detection — every sample attends to the earlier
    ones."""
    return model(input_ids=input_ids, position_ids=position_ids, logits_to_keep=keep).logits[0]


def _forward_ones_mask(model, input_ids, position_ids, keep):
    """An all-ones 2-D attention_mask passed with the packed row: detection only runs when the
    mask is None, so the row is one causal sequence."""
    out = model(input_ids=input_ids, position_ids=position_ids,
                attention_mask=torch.ones_like(input_ids), use_cache=False, logits_to_keep=keep)
    return out.logits[0]


def _forward_positions_not_restarted(model, input_ids, position_ids, keep):
    """position_ids = arange(N): no restart, no detected boundary, wrong rotary phases."""
    positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
    out = model(input_ids=input_ids, position_ids=positions, attention_mask=None,
                use_cache=False, logits_to_keep=keep)
    return out.logits[0]


def _forward_bool_block_mask(model, input_ids, position_ids, keep):
    """The right block-diagonal causal mask as a bool 4-D tensor: sdpa reads it as a mask, but
    eager *adds* it to the scores (+1 / +0), so every query sees every key."""
    allowed = _impl._block_causal_mask(position_ids[0], torch.float32) == 0
    out = model(input_ids=input_ids, position_ids=position_ids, attention_mask=allowed,
                use_cache=False, logits_to_keep=keep)
    return out.logits[0]


def _forward_at_target(model, input_ids, position_ids, keep):
    """Logits taken at target_index: each token scored by the logit after it."""
    return _forward(model, input_ids, position_ids, keep + 1)


# --------------------------------------------------------------------------- router replay


def _sample_slots(td) -> list[tuple[int, int, int]]:
    """(offset, prompt length, response length) of every sample of a packed row."""
    out, offset = [], 0
    for p, r in zip(td["prompt_lengths"].tolist(), td["response_lengths"].tolist()):
        out.append((offset, p, r))
        offset += p + r
    return out


def _dummy_like(routes: torch.Tensor) -> torch.Tensor:
    return torch.arange(routes.shape[-1], dtype=routes.dtype,
                        device=routes.device).expand(routes.shape[-2:])


def _routes_cut_at_prompt(td, prompts, responses, kwargs):
    """Routes dropped by packing: each sample's captured routes kept for its prompt tokens only,
    its response tokens given the dummy route (and the mask) as if nothing were captured."""
    if "routed_experts" not in td.keys():
        return td
    routes, mask = td["routed_experts"].clone(), td["router_padding_mask"].clone()
    for offset, p, r in _sample_slots(td):
        routes[0, offset + p:offset + p + r] = _dummy_like(routes)
        mask[0, offset + p:offset + p + r] = True
    td["routed_experts"], td["router_padding_mask"] = routes, mask
    return td


def _zero_padding_routes(td, prompts, responses, kwargs):
    """verl #7524's class: every slot without a captured route (tail pad, uncaptured tokens)
    given the all-zero route (topk times expert 0) instead of the dummy route."""
    if "routed_experts" in td.keys():
        mask = td["router_padding_mask"][..., None, None]
        td["routed_experts"] = torch.where(mask, torch.zeros_like(td["routed_experts"]),
                                           td["routed_experts"])
    return td


def _routes_shifted_at_boundary(td, prompts, responses, kwargs):
    """Each sample after the first placed from its offset - 1 (an offset counted from the end
    of the previous sample inclusive): its first route lands on the previous sample's last
    token, its last captured token gets the dummy route."""
    if "routed_experts" not in td.keys():
        return td
    entries = [replay.as_tensor(e) for e in replay.entries_of(kwargs["routed_experts"])]
    routes = _dummy_like(td["routed_experts"]).expand(td["routed_experts"].shape).clone()
    mask = torch.ones_like(td["router_padding_mask"])
    for k, ((offset, _, _), entry) in enumerate(zip(_sample_slots(td), entries)):
        start = offset - 1 if k > 0 and offset > 0 else offset
        routes[0, start:start + entry.shape[0]] = entry.to(routes.device)
        mask[0, start:start + entry.shape[0]] = False
    td["routed_experts"], td["router_padding_mask"] = routes, mask
    return td


def _support_in_sorted_order(td, prompts, responses, kwargs):
    """Sample support concatenated longest response first (the order a length-sorting packer
    visits the samples in) while the tokens keep the batch order."""
    if "sample_support" not in td.keys():
        return td
    entries = [replay.as_tensor(e) for e in replay.entries_of(kwargs["sample_support"])]
    order = sorted(range(len(entries)), key=lambda k: -entries[k].shape[0])
    td["sample_support"] = torch.cat([entries[k] for k in order]).to(td["sample_support"].device)
    return td


def _repad_routes_with_zeros(routed_experts, indices, batch, seqlen, **kwargs):
    """Routes repadded as any value is (flash-attn's pad_input): zeros at every slot without a
    route, the mask True there."""
    out = _repad_routes(routed_experts, indices, batch, seqlen, **kwargs)
    mask = out["router_padding_mask"][..., None, None]
    out["routed_experts"] = torch.where(mask, torch.zeros_like(out["routed_experts"]),
                                        out["routed_experts"])
    return out


def _edited_td(edit: Callable) -> Callable:
    """The correct packer, then `edit(td, prompts, responses, kwargs)` on its output."""

    def replacement(prompts, responses, **kwargs):
        return edit(_pack(prompts, responses, **kwargs), prompts, responses, kwargs)

    return replacement


NEGATIVE_CONTROLS: dict[str, Callable] = {
    "use_cache_default": _forward_with_cache,
    "all_ones_2d_mask": _forward_ones_mask,
    "positions_not_restarted": _forward_positions_not_restarted,
    "bool_4d_mask": _forward_bool_block_mask,
}


def logprobs_with_forward(forward: Callable) -> Callable:
    """`response_logprobs` whose packed forward (packing="position_ids") is `forward`."""
    return _swapped(_logprobs, _forward_position_ids=forward)


def _no_layers(model) -> list[str]:
    return []


def _detached_normaliser(logits: torch.Tensor, targets: torch.Tensor, chunk_size: int):
    """log_softmax written as `logits - logsumexp(logits).detach()`: the same values, but the
    gradient loses the softmax term (only the target's logit is pushed up)."""
    scores = logits.float()
    normaliser = torch.logsumexp(scores, dim=-1, keepdim=True).detach()
    return (scores - normaliser).gather(-1, targets[:, None]).squeeze(-1)


def _logprobs_rows_of_kept_samples(model, prompts, responses, **kwargs):
    """Samples without a response skipped, and the scored rows stacked from the top: every row
    after a skipped sample holds the next sample's logprobs."""
    out = _logprobs(model, prompts, responses, **kwargs)
    kept = [k for k, r in enumerate(responses) if len(r) > 0]
    shifted = torch.zeros_like(out)
    shifted[:len(kept)] = out[kept]
    return shifted


def _logprobs_left_aligned(model, prompts, responses, **kwargs):
    out = _logprobs(model, prompts, responses, **kwargs)
    lengths = [len(r) for r in responses]
    return torch.stack([torch.roll(row, r) for row, r in zip(out, lengths)])


# --------------------------------------------------------------------------- entries


def _choice(name, function, bug, killers, replacement) -> ZooEntry:
    return ZooEntry(name=f"varlen.{name}", op="varlen", function=function,
                    bug=f"spec choice: {bug}", killers=killers, replacement=replacement,
                    oracle=True)


_CROSS = ("equivalence", "property:samples_isolated", "pin:cross_sample_attention")
_CROSS_SDPA = (*_CROSS, "pin:cross_sample_attention_sdpa")

ENTRIES = [
    ZooEntry(
        name="varlen.routes_dropped_by_packing",
        op="varlen", function="pack_varlen",
        bug="routes dropped by packing: the response tokens' captured routes replaced by the "
            "dummy route (each sample's routes cut at its prompt), so the trained tokens are "
            "routed afresh instead of replayed",
        killers=("equivalence", "property:routes_on_their_tokens",
                 "pin:skyrl_1909_packed_route_arrays"),
        replacement=_edited_td(_routes_cut_at_prompt),
    ),
    ZooEntry(
        name="varlen.zero_filled_padding_routes",
        op="varlen", function="pack_varlen",
        bug="zero-filled padding routes: the tail pad and the uncaptured tokens sent topk "
            "times to expert 0 (verl #7524, slime #822 / #1052): one distinct expert per slot, "
            "a dropless dispatcher's tokens * topk broken",
        killers=("equivalence", "property:dummy_routes_where_masked",
                 "property:route_count_per_layer", "pin:slime_1052_padding_routes"),
        replacement=_edited_td(_zero_padding_routes),
    ),
    ZooEntry(
        name="varlen.route_shifted_at_sample_boundary",
        op="varlen", function="pack_varlen",
        bug="route shifted by one at a segment boundary: every sample after the first placed "
            "from its offset - 1, its first route on the previous sample's last token",
        killers=("equivalence", "property:routes_on_their_tokens",
                 "pin:routes_across_sample_boundaries"),
        replacement=_edited_td(_routes_shifted_at_boundary),
    ),
    ZooEntry(
        name="varlen.support_in_sorted_order",
        op="varlen", function="pack_varlen",
        bug="sample support concatenated longest response first (a length-sorting packer's "
            "order) while the tokens keep the batch order: support rows on other tokens",
        killers=("equivalence", "property:support_on_response_tokens",
                 "pin:skyrl_packed_support_rows"),
        replacement=_edited_td(_support_in_sorted_order),
    ),
    ZooEntry(
        name="varlen.repad_routes_zero_filled",
        op="varlen", function="repad_routes",
        bug="zero-filled padding routes: routes repadded like any value (zeros at the pads, as "
            "flash-attn's pad_input and verl's build_padding_routed_experts leave them)",
        killers=("equivalence", "property:routes_scatter_back",
                 "property:dummy_routes_where_masked", "property:route_count_per_layer",
                 "pin:dummy_not_zeros"),
        replacement=_repad_routes_with_zeros,
    ),
    ZooEntry(
        name="varlen.empty_prompt_reads_previous_logit",
        op="varlen", function="pack_varlen",
        bug="p == 0 < r accepted: predict_index off_k - 1 is the previous sample's last "
            "position, so its first response token is scored with another sample's logit",
        killers=("errors", "pin:empty_prompt_reads_previous_logit"),
        replacement=_swapped(_pack, _samples=_samples_accepting_empty_prompts),
    ),
    ZooEntry(
        name="varlen.duplicate_tail_boundary",
        op="varlen", function="pack_varlen",
        bug="cu_seqlens closed with N even when the tail pad is 0: a duplicate boundary, a "
            "zero-length segment that breaks flash-attn varlen kernels",
        killers=("property:cu_seqlens", "pin:pad_tail_of_zero", "equivalence"),
        replacement=_edited(cu_seqlens=_boundary_always),
    ),
    ZooEntry(
        name="varlen.empty_sample_boundary",
        op="varlen", function="pack_varlen",
        bug="a zero-length sample adds a cu_seqlens boundary (a zero-length segment)",
        killers=("property:cu_seqlens", "pin:zero_length_middle", "equivalence"),
        replacement=_edited(cu_seqlens=_empty_sample_boundaries),
    ),
    ZooEntry(
        name="varlen.predict_equals_target",
        op="varlen", function="pack_varlen",
        bug="off by one: predict_index == target_index, each token scored by its own logit",
        killers=("property:predict_is_previous_token", "equivalence"),
        replacement=_edited(predict_index=_predict_is_target),
    ),
    ZooEntry(
        name="varlen.pack_positions_not_restarted",
        op="varlen", function="pack_varlen",
        bug="position_ids = arange(N) over the packed row: no restart per sample",
        killers=("property:segments_never_cross", "equivalence"),
        replacement=_edited(position_ids=_positions_not_restarted),
    ),
    ZooEntry(
        name="varlen.tail_pad_continues_last_sample",
        op="varlen", function="pack_varlen",
        bug="the tail pad continues the last sample's positions: padding joins its segment",
        killers=("property:segments_never_cross", "pin:tail_pad_holds_pad_token", "equivalence"),
        replacement=_edited(position_ids=_tail_continues_last_sample),
    ),
    ZooEntry(
        name="varlen.targets_from_prompt_offsets",
        op="varlen", function="pack_varlen",
        bug="sample offsets summed over prompt lengths only: target_index points into the "
            "wrong sample",
        killers=("property:targets_are_responses", "equivalence"),
        replacement=_edited(target_index=_targets_from_prompt_offsets),
    ),
    ZooEntry(
        name="varlen.tail_pad_zero_not_pad_token",
        op="varlen", function="pack_varlen",
        bug="the tail pad filled with 0 instead of pad_token_id",
        killers=("property:layout", "pin:tail_pad_holds_pad_token", "equivalence"),
        replacement=_edited(input_ids=_tail_zero_not_pad_token),
    ),
    ZooEntry(
        name="varlen.cu_seqlens_int64",
        op="varlen", function="pack_varlen",
        bug="cu_seqlens left int64 by cumsum (flash-attn varlen kernels require int32)",
        killers=("property:layout", "equivalence"),
        replacement=_edited(cu_seqlens=_cu_seqlens_int64),
    ),
    ZooEntry(
        name="varlen.tail_pad_positions_at_start",
        op="varlen", function="pack_varlen",
        bug="a zero-padded tail: the tail pad's positions all position_ids_start, so every pad "
            "token reads as its own one-token sample",
        reference="VeOmni #746 (pad_to_length padded position_ids with zeros: cu_seq_lens grew "
                  "with the pad length)",
        killers=("property:segments_are_cu_seqlens", "property:segments_never_cross",
                 "pin:tail_pad_holds_pad_token", "equivalence"),
        replacement=_edited(position_ids=_tail_positions_at_start),
    ),
    ZooEntry(
        name="varlen.positions_ignore_start",
        op="varlen", function="pack_varlen",
        bug="position_ids_start ignored: 0-based positions for a model that counts from 2",
        reference="transformers #47496 / #47525 (DataCollatorWithFlattening, RoBERTa-like models)",
        killers=("pin:positions_start_at_two", "property:segments_never_cross",
                 "property:segments_are_cu_seqlens", "equivalence"),
        replacement=_edited(position_ids=_positions_from_zero),
    ),
    ZooEntry(
        name="varlen.segments_strict_decrease",
        op="varlen", function="packed_segments",
        bug="boundaries only where the position decreases: a one-token sample (0 after 0) is "
            "merged into the next sample",
        reference="ms-swift #9904 (revert_padding_free)",
        killers=("equivalence", "property:segments", "pin:single_token_sample",
                 "pin:consecutive_single_token_samples"),
        replacement=_segments_strict_decrease,
    ),
    ZooEntry(
        name="varlen.segments_restart_at_zero",
        op="varlen", function="packed_segments",
        bug="restarts looked for at position 0, not at position_ids_start: rows counted from 2 "
            "are one segment each",
        reference="transformers #47496 / #47525",
        killers=("equivalence", "property:segments", "pin:restart_at_position_ids_start"),
        replacement=_segments_restart_at_zero,
    ),
    ZooEntry(
        name="varlen.segments_mrope_axis_as_batch",
        op="varlen", function="packed_segments",
        bug="(3, B, L) mRoPE positions read as 3 x B rows: the mRoPE axis taken for a batch axis",
        reference="verl #7137, ms-swift #8468, transformers #44911",
        killers=("equivalence", "property:text_axis_only", "pin:mrope_text_axis",
                 "pin:mrope_two_rows"),
        replacement=_segments_mrope_axis_as_batch,
    ),
    ZooEntry(
        name="varlen.segments_unvalidated",
        op="varlen", function="packed_segments",
        bug="positions no packer writes (a step that is not a restart, a row that does not "
            "begin at the start) read as some segments instead of rejected",
        killers=("errors", "pin:jump_without_restart", "pin:row_not_at_start"),
        replacement=_segments_unvalidated,
    ),
    ZooEntry(
        name="varlen.unpack_cut_to_size",
        op="varlen", function="unpack_response_logprobs",
        bug="a flat tensor of the wrong size cut to fit instead of rejected",
        killers=("errors", "pin:flat_logprobs_size_mismatch"),
        replacement=_unpack_cut_to_size,
    ),
    ZooEntry(
        name="varlen.unpack_left_aligned",
        op="varlen", function="unpack_response_logprobs",
        bug="logprobs written into the first r_k columns of a right-aligned response tensor",
        killers=("property:right_aligned", "equivalence"),
        replacement=_left_aligned,
    ),
    ZooEntry(
        name="varlen.unpack_reads_target_index",
        op="varlen", function="unpack_response_logprobs",
        bug="per-position logprobs read at target_index: each token gets the next token's "
            "logit row",
        killers=("pin:per_position_logits_at_predict_index", "property:right_aligned",
                 "equivalence"),
        replacement=_read_at_target(_unpack),
    ),
    ZooEntry(
        name="varlen.oracle_unpack_reads_target_index",
        op="varlen", function="unpack_response_logprobs",
        bug="the same read in the oracle itself: only the property and the pin see it",
        killers=("pin:per_position_logits_at_predict_index", "property:right_aligned"),
        replacement=_read_at_target(_oracle_unpack),
        oracle=True,
    ),
    ZooEntry(
        name="varlen.unpad_assumes_contiguous_mask",
        op="varlen", function="unpad",
        bug="indices taken as the first row-sum positions of each row: wrong on masks with "
            "holes or left padding (flash-attn uses nonzero over the flat mask)",
        killers=("property:round_trip", "pin:non_contiguous_mask", "equivalence"),
        replacement=_unpad_contiguous,
    ),
    ZooEntry(
        name="varlen.unpad_without_validation",
        op="varlen", function="unpad",
        bug="flash-attn's unpad_input unchecked: a mask value 2 is counted twice in cu_seqlens "
            "but indexed once",
        killers=("errors", "pin:mask_value_two"),
        replacement=_unpad_without_validation,
    ),
    ZooEntry(
        name="varlen.unpad_skips_empty_rows",
        op="varlen", function="unpad",
        bug="empty rows dropped from cu_seqlens (pack_varlen's rule for samples): B + 1 entries "
            "expected by every kernel that indexes cu_seqlens by row",
        killers=("property:cu_seqlens", "pin:all_zero_row", "equivalence"),
        replacement=_unpad_skips_empty_rows,
    ),
    ZooEntry(
        name="varlen.unpad_cu_seqlens_zero_at_end",
        op="varlen", function="unpad",
        bug="F.pad(cumsum, (0, 1)) instead of (1, 0): the leading 0 of cu_seqlens at the end",
        killers=("property:cu_seqlens", "equivalence"),
        replacement=_unpad_cu_seqlens_padded_right,
    ),
    ZooEntry(
        name="varlen.unpad_max_seqlen_tensor",
        op="varlen", function="unpad",
        bug="max_seqlen returned as a 0-d tensor (flash-attn wants a Python int: .item())",
        killers=("property:cu_seqlens", "equivalence"),
        replacement=_unpad_max_seqlen_tensor,
    ),
    ZooEntry(
        name="varlen.repad_without_validation",
        op="varlen", function="repad",
        bug="flash-attn's pad_input unchecked: duplicate indices keep one value silently",
        killers=("errors", "pin:duplicate_indices"),
        replacement=_repad_without_validation,
    ),
    ZooEntry(
        name="varlen.repad_column_major",
        op="varlen", function="repad",
        bug="the flat buffer reshaped (seqlen, batch) and transposed: values in the wrong rows",
        killers=("property:scatter_back", "equivalence"),
        replacement=_repad_column_major,
    ),
    ZooEntry(
        name="varlen.repad_assumes_sorted_indices",
        op="varlen", function="repad",
        bug="values written to the sorted indices: wrong whenever indices come unsorted",
        killers=("property:scatter_back", "pin:unsorted_indices", "equivalence"),
        replacement=_repad_sorted_indices,
    ),
    ZooEntry(
        name="varlen.use_cache_default",
        op="varlen", function="response_logprobs",
        bug="use_cache left at its default: with a cache object transformers skips "
            "packed-sequence detection and the samples attend to each other",
        reference="transformers masking_utils._preprocess_mask_arguments (detection only when "
                  "attention_mask is None and past_key_values is None)",
        killers=_CROSS_SDPA,
        replacement=logprobs_with_forward(_forward_with_cache),
    ),
    ZooEntry(
        name="varlen.all_ones_2d_mask",
        op="varlen", function="response_logprobs",
        bug="an all-ones 2-D attention_mask passed with the packed row: no detection, one causal "
            "sequence across samples",
        killers=_CROSS_SDPA,
        replacement=logprobs_with_forward(_forward_ones_mask),
    ),
    ZooEntry(
        name="varlen.positions_not_restarted",
        op="varlen", function="response_logprobs",
        bug="position_ids not restarted per sample: no boundary detected, wrong rotary phases",
        killers=_CROSS_SDPA,
        replacement=logprobs_with_forward(_forward_positions_not_restarted),
    ),
    ZooEntry(
        name="varlen.bool_4d_mask_eager",
        op="varlen", function="response_logprobs",
        bug="a bool 4-D block mask: read correctly by sdpa, added (+1/+0) to the scores by eager",
        killers=_CROSS,
        replacement=logprobs_with_forward(_forward_bool_block_mask),
    ),
    ZooEntry(
        name="varlen.logprobs_at_target_index",
        op="varlen", function="response_logprobs",
        bug="logits gathered at target_index: each token scored by the logit that predicts the "
            "next one",
        killers=("equivalence", "pin:single_token_prompts"),
        replacement=logprobs_with_forward(_forward_at_target),
    ),
    ZooEntry(
        name="varlen.recurrent_state_across_samples",
        op="varlen", function="response_logprobs",
        bug="a hybrid or recurrent model packed like an attention model: its recurrent kernels "
            "(Mamba2 scans, gated delta nets) and short convolutions run over the packed row "
            "with no boundaries, so each sample starts from the previous sample's state",
        reference="transformers' PyTorch paths ignore cu_seq_lens / seq_idx (Qwen3-Next, "
                  "Qwen3.5, Bamba, Nemotron-H, Mamba2, LFM2); slime #1686, NeMo Automodel "
                  "#2131/#2147, flash-linear-attention #1184",
        killers=("pin:gated_delta_net_boundaries", "pin:qwen3_5_gated_delta_net_boundaries",
                 "pin:bamba_mamba_boundaries", "pin:nemotron_h_mamba_boundaries",
                 "pin:mamba2_boundaries", "pin:short_conv_boundaries"),
        replacement=_swapped(_logprobs, _recurrent_layers=_no_layers,
                             _convolution_layers=_no_layers),
    ),
    ZooEntry(
        name="varlen.short_conv_across_samples",
        op="varlen", function="response_logprobs",
        bug="short convolutions not counted as state: a model whose only layers that carry "
            "state are convolutions (LFM2) is packed, and its convolution, given no seq_idx, "
            "reads the previous sample's last tokens",
        reference="LFM2 in transformers 5.23 / 5.24 (docs/equivalence.md); lmms-engine #167",
        killers=("pin:short_conv_boundaries",),
        replacement=_swapped(_logprobs, _convolution_layers=_no_layers),
    ),
    ZooEntry(
        name="varlen.logprobs_detached_normaliser",
        op="varlen", function="response_logprobs",
        bug="log-softmax as logits - logsumexp(logits).detach(): the values are right, the "
            "gradients are not (the normaliser's share is dropped)",
        killers=("property:gradients",),
        replacement=_swapped(_logprobs, _token_logprobs=_detached_normaliser),
    ),
    ZooEntry(
        name="varlen.logprobs_empty_prompt_reads_previous_logit",
        op="varlen", function="response_logprobs",
        bug="p == 0 < r scored: the first response token gets the previous sample's last logit",
        killers=("errors", "pin:empty_prompt_reads_previous_logit"),
        replacement=_swapped(_logprobs, _samples=_samples_accepting_empty_prompts),
    ),
    ZooEntry(
        name="varlen.logprobs_rows_of_kept_samples",
        op="varlen", function="response_logprobs",
        bug="samples without a response skipped and the scored rows stacked from the top: rows "
            "after an empty response belong to the next sample",
        killers=("equivalence", "pin:empty_responses_and_zero_length_middle"),
        replacement=_logprobs_rows_of_kept_samples,
    ),
    ZooEntry(
        name="varlen.logprobs_left_aligned",
        op="varlen", function="response_logprobs",
        bug="response logprobs left-aligned in the (B, max r) tensor",
        killers=("property:zero_off_response", "equivalence"),
        replacement=_logprobs_left_aligned,
    ),
    # spec choices (varlen.md, "Spec choices"): the other plausible rule, planted in the
    # reference too, so only the properties and the literal pins can tell it from the contract
    _choice("oracle_tail_pad_continues_last_sample", "pack_varlen",
            "the tail pad continues the last sample's positions instead of restarting at 0",
            ("property:segments_never_cross", "pin:tail_pad_holds_pad_token"),
            _edited(position_ids=_tail_continues_last_sample)),
    _choice("oracle_tail_pad_zero", "pack_varlen",
            "the tail pad holds token 0 instead of pad_token_id",
            ("property:layout", "pin:tail_pad_holds_pad_token"),
            _edited(input_ids=_tail_zero_not_pad_token)),
    _choice("oracle_empty_sample_boundary", "pack_varlen",
            "every sample adds a cu_seqlens boundary, a zero-length one too (unpad's rule for "
            "rows)", ("property:cu_seqlens", "pin:zero_length_middle"),
            _edited(cu_seqlens=_empty_sample_boundaries)),
    _choice("oracle_tail_boundary_always", "pack_varlen",
            "cu_seqlens closed with N even when the tail pad is 0",
            ("property:cu_seqlens", "pin:pad_tail_of_zero"),
            _edited(cu_seqlens=_boundary_always)),
    _choice("oracle_max_seqlen_of_samples", "pack_varlen",
            "max_seqlen over the samples only, not a longer tail pad segment",
            ("property:layout", "pin:pad_is_longest_segment"), _max_seqlen_of_samples),
    _choice("oracle_cu_seqlens_int64", "pack_varlen",
            "cu_seqlens in int64 (cumsum's dtype) instead of int32", ("property:layout",),
            _edited(cu_seqlens=_cu_seqlens_int64)),
    _choice("oracle_unpack_left_aligned", "unpack_response_logprobs",
            "unpacked logprobs left-aligned instead of right-aligned like rl_batch's left layout",
            ("property:right_aligned", "pin:empty_response_keeps_zero_row"),
            _left_aligned),
    _choice("oracle_unpad_skips_empty_rows", "unpad",
            "unpad's cu_seqlens without a boundary for an empty row (pack_varlen's rule for "
            "samples) instead of B + 1 entries", ("property:cu_seqlens", "pin:all_zero_row"),
            _unpad_skips_empty_rows),
    _choice("oracle_unpad_max_seqlen_tensor", "unpad",
            "max_seqlen a 0-d tensor instead of a Python int", ("property:cu_seqlens",),
            _unpad_max_seqlen_tensor),
    _choice("oracle_segments_coalesce_tail", "packed_segments",
            "one-token segments that end a row read as one padded tail instead of one-token "
            "samples", ("property:segments", "pin:single_token_samples_at_the_end",
                        "pin:zero_padded_tail"),
            _segments_coalesced_tail),
    _choice("oracle_segments_step_rule", "packed_segments",
            "a boundary wherever the position does not step by +1 (transformers' mask path) "
            "instead of where it restarts at position_ids_start",
            ("property:segments", "pin:mrope_text_axis"), _segments_step_rule),
    _choice("oracle_logprobs_left_aligned", "response_logprobs",
            "response logprobs left-aligned in (B, max r) instead of right-aligned",
            ("property:zero_off_response",), _logprobs_left_aligned),
]

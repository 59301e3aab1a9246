"""Bug-zoo entries for `trainer`: padding a batch to a divisible size, and step-wise advantages.

Each entry wraps the correct `impl` function (so bad input still raises the real errors) and
damages its result the way the real bug did.
"""

from __future__ import annotations

import math

import torch

from batchproof.impl import trainer as _impl
from batchproof.mutation.zoo import ZooEntry
from batchproof.reference import trainer as _reference

# the correct functions, bound before any entry is planted (planting replaces module attributes)
_multiple_ok = _impl.required_multiple
_pad_ok = _impl.pad_to_multiple
_oracle_pad_ok = _reference.pad_to_multiple
_real_ok = _impl.real_rows
_broadcast_ok = _impl.broadcast_stepwise_advantages


# --------------------------------------------------------------------------- required_multiple


def _product_not_lcm(dp_size, *, mini_batch_size=None, critic_mini_batch_size=None, n=1,
                     actor_updates=True):
    _multiple_ok(dp_size, mini_batch_size=mini_batch_size,
                 critic_mini_batch_size=critic_mini_batch_size, n=n, actor_updates=actor_updates)
    out = dp_size
    if critic_mini_batch_size is not None:
        out *= critic_mini_batch_size * n
    if actor_updates and mini_batch_size is not None:
        out *= mini_batch_size * n
    return out


def _mini_ignores_n(dp_size, *, mini_batch_size=None, **kwargs):
    """Mini-batch size taken as a count of trajectories, not prompts: n dropped for the actor."""
    _multiple_ok(dp_size, mini_batch_size=mini_batch_size, **kwargs)
    out = _multiple_ok(dp_size, **kwargs)
    if kwargs.get("actor_updates", True) and mini_batch_size is not None:
        out = math.lcm(out, mini_batch_size)
    return out


def _actor_updates_ignored(dp_size, *, actor_updates=True, **kwargs):
    _multiple_ok(dp_size, actor_updates=actor_updates, **kwargs)
    return _multiple_ok(dp_size, **kwargs)


# --------------------------------------------------------------------------- pad_to_multiple


def _padded(td, multiple, **kwargs):
    """(correct output, number of real rows, number of padding rows)."""
    out = _pad_ok(td, multiple, **kwargs)
    batch = td.batch_size[0]
    return out, batch, out.batch_size[0] - batch


def _replace_padding(out, batch, key, rows) -> None:
    value = out.get(key).clone()
    value[batch:] = rows
    out.set(key, value)


def _duplicate_real_rows(td, multiple, **kwargs):
    """The old way: fill up with copies of real rows (flagged as padding)."""
    out, batch, count = _padded(td, multiple, **kwargs)
    if count == 0:
        return out
    copies = torch.arange(count) % batch
    for key in td.keys():
        if not td.is_non_tensor(key) and key != "is_padding":
            _replace_padding(out, batch, key, td.get(key)[copies.to(td.get(key).device)])
    return out


def _oracle_duplicate_real_rows(td, multiple, **kwargs):
    _oracle_pad_ok(td, multiple, **kwargs)
    return _duplicate_real_rows(td, multiple, **kwargs)


def _multi_axis_positions_zeroed(td, multiple, **kwargs):
    """(B, 3, T) position ids not recognised as positions: the padding row gets zeros."""
    out, batch, count = _padded(td, multiple, **kwargs)
    positions = out.get("position_ids", None)
    if count and positions is not None and positions.dim() == 3:
        _replace_padding(out, batch, "position_ids", 0)
    return out


def _response_mask_from_sequence(td, multiple, **kwargs):
    """Padding rows' response fields cut from a sequence-width template (the attention row):
    the padding sample's tokens become trainable."""
    out, batch, count = _padded(td, multiple, **kwargs)
    if count == 0:
        return out
    width = out.get("response_mask").shape[1]
    template = out.get("attention_mask")[batch:, out.get("attention_mask").shape[1] - width:]
    for key in ("response_mask", "loss_mask"):
        _replace_padding(out, batch, key, template.to(out.get(key).dtype))
    return out


def _is_padding_when_divisible(td, multiple, **kwargs):
    out, batch, count = _padded(td, multiple, **kwargs)
    if count or "is_padding" in td.keys():
        return out
    out = td.clone()
    out.set("is_padding", torch.zeros(batch, dtype=torch.bool, device=td.get("input_ids").device))
    return out


def _padding_routes_zeros(td, multiple, **kwargs):
    """verl 0.9.1's build_padding_routed_experts: the padding rows' routes all zeros (every
    slot sends its token `topk` times to expert 0), and the router mask left False there."""
    out, batch, count = _padded(td, multiple, **kwargs)
    if count == 0 or "routed_experts" not in td.keys():
        return out
    _replace_padding(out, batch, "routed_experts", 0)
    if "router_padding_mask" in td.keys():
        _replace_padding(out, batch, "router_padding_mask", False)
    return out


def _min_length_ignored(td, multiple, **kwargs):
    kwargs.pop("min_length", None)
    return _pad_ok(td, multiple, **kwargs)


def _left_placement_always(td, multiple, **kwargs):
    """The padding sample laid out as in the left layout whatever the batch's layout."""
    _pad_ok(td, multiple, **kwargs)
    original = kwargs.get("layout") or td.get_non_tensor("layout")
    if kwargs.get("layout") is not None:
        kwargs["layout"] = "left"
    elif "layout" in td.keys():
        td = td.clone()
        td.set_non_tensor("layout", "left")
    out = _pad_ok(td, multiple, **kwargs)
    if "layout" in td.keys() and out is not td:
        out.set_non_tensor("layout", "two_segment" if original == "two_segment" else "left")
    return out


def _padding_rows_first(td, multiple, **kwargs):
    """Padding rows prepended: real rows shift, their flags with them."""
    out, batch, count = _padded(td, multiple, **kwargs)
    if count == 0:
        return out
    order = torch.cat([torch.arange(batch, batch + count), torch.arange(batch)])
    return out[order]


def _is_padding_overwritten(td, multiple, **kwargs):
    """An existing is_padding field replaced instead of extended."""
    out, batch, count = _padded(td, multiple, **kwargs)
    if count and "is_padding" in td.keys():
        flags = torch.arange(batch + count, device=out.get("is_padding").device) >= batch
        out.set("is_padding", flags)
    return out


def _float_zero_rows(td, multiple, **kwargs):
    """Padding rows for the other fields made with torch.zeros' default float32: cat promotes
    int64 masks to float32."""
    out, batch, count = _padded(td, multiple, **kwargs)
    if count == 0:
        return out
    for key in td.keys():
        value = td.get(key) if not td.is_non_tensor(key) else None
        if value is None or key in ("input_ids", "attention_mask", "position_ids", "is_padding"):
            continue
        zeros = torch.zeros((count, *value.shape[1:]), device=value.device)
        out.set(key, torch.cat([value, zeros]))
    return out


def _flags_reversed(td, multiple, **kwargs):
    """is_padding marks the first rows instead of the appended ones."""
    out, batch, count = _padded(td, multiple, **kwargs)
    if count and "is_padding" not in td.keys():
        out.set("is_padding", out.get("is_padding").flip(0))
    return out


def _layout_of(td, kwargs):
    if kwargs.get("layout") is not None:
        return kwargs["layout"]
    return td.get_non_tensor("layout") if "layout" in td.keys() else None


def _padding_response_gets_extra(td, multiple, **kwargs):
    """An odd min_length gives the response the extra token (pp = floor, rr = ceil): in a
    two_segment batch the padding sample's tokens sit one column further right."""
    out, batch, count = _padded(td, multiple, **kwargs)
    attention = out.get("attention_mask", None)
    if (count == 0 or attention is None or _layout_of(td, kwargs) != "two_segment"
            or kwargs.get("min_length", 2) % 2 == 0 or bool(attention[batch:, -1].any())):
        return out
    for key in ("input_ids", "attention_mask"):
        _replace_padding(out, batch, key, out.get(key)[batch:].roll(1, dims=1))
    positions = out.get("position_ids", None)
    if positions is not None:
        rows = (out.get("attention_mask")[batch:].cumsum(1) - 1).clamp(min=0)
        if positions.dim() == 3:
            rows = rows.unsqueeze(1).expand(-1, positions.shape[1], -1)
        _replace_padding(out, batch, "position_ids", rows.to(positions.dtype))
    return out


def _padding_rows_fully_masked(td, multiple, **kwargs):
    """Padding rows with no attended token at all (attention 0, pad tokens, positions 0)
    instead of a minimal attended sample of eos tokens."""
    out, batch, count = _padded(td, multiple, **kwargs)
    if count == 0:
        return out
    pad = kwargs.get("pad_token_id")
    if pad is None:
        pad = td.get_non_tensor("pad_token_id")
    for key, fill in (("input_ids", pad), ("attention_mask", 0), ("position_ids", 0)):
        if out.get(key, None) is not None:
            _replace_padding(out, batch, key, fill)
    return out


# --------------------------------------------------------------------------- real_rows


def _real_rows_by_count(td):
    """The first B - (number of padding rows) rows: right only while padding sits at the end."""
    _real_ok(td)
    if "is_padding" not in td.keys():
        return td
    return td[: td.batch_size[0] - int(td.get("is_padding").sum())]


def _real_rows_inverted(td):
    _real_ok(td)
    if "is_padding" not in td.keys():
        return td
    return td[td.get("is_padding")]


# --------------------------------------------------------------------------- broadcast


def _last_step_masked_row(scalars, traj_ids, response_mask):
    """SkyRL before #1507: each trajectory's last step's masked row, copied to every step."""
    adv = _broadcast_ok(scalars, traj_ids, response_mask)
    ids = torch.as_tensor(traj_ids).tolist()
    last = {t: row for row, t in enumerate(ids)}
    return adv[torch.tensor([last[t] for t in ids], dtype=torch.int64, device=adv.device)]


def _product_not_where(scalars, traj_ids, response_mask):
    adv = _broadcast_ok(scalars, traj_ids, response_mask)
    values = torch.as_tensor(scalars, dtype=torch.float32).to(adv.device)
    ids = torch.as_tensor(traj_ids, dtype=torch.int64).to(adv.device)
    return values[ids].unsqueeze(1) * response_mask.to(torch.float32)


def _mask_ignored(scalars, traj_ids, response_mask):
    adv = _broadcast_ok(scalars, traj_ids, response_mask)
    values = torch.as_tensor(scalars, dtype=torch.float32).to(adv.device)
    ids = torch.as_tensor(traj_ids, dtype=torch.int64).to(adv.device)
    return values[ids].unsqueeze(1).expand(adv.shape).clone()


def _entry(name, function, bug, killers, replacement, reference="", oracle=False) -> ZooEntry:
    return ZooEntry(name=f"trainer.{name}", op="trainer", function=function, bug=bug,
                    killers=tuple(killers), replacement=replacement, reference=reference,
                    oracle=oracle)


ENTRIES = [
    _entry("multiple_product_not_lcm", "required_multiple",
           "sizes multiplied instead of their lcm: needless padding (dp 2, mini 15, n 8 → 240)",
           ("property:least", "pin:dp2_mini15_n8", "equivalence"), _product_not_lcm),
    _entry("mini_batch_ignores_n", "required_multiple",
           "the actor's mini-batch size used as trajectories although it counts prompts",
           ("property:divisible", "pin:dp2_mini15_n8"), _mini_ignores_n),
    _entry("actor_updates_ignored", "required_multiple",
           "the actor's mini-batches required on a critic-only step",
           ("property:least", "pin:critic_only_when_actor_frozen"), _actor_updates_ignored),
    _entry("duplicate_real_rows", "pad_to_multiple",
           "padding by duplicating real rows: biases group advantages, gradients and metrics",
           ("property:zero_masked_loss", "property:other_fields_zero",
            "property:padding_sample_valid", "pin:duplicated_real_rows", "equivalence"),
           _duplicate_real_rows, "verl PR #5969"),
    _entry("oracle_duplicate_real_rows", "pad_to_multiple",
           "the duplication in the oracle itself: only properties and pins see it",
           ("property:other_fields_zero", "pin:duplicated_real_rows"),
           _oracle_duplicate_real_rows, "verl PR #5969", oracle=True),
    _entry("multi_axis_positions_zeroed", "pad_to_multiple",
           "(B, 3, T) position ids treated as an ordinary field: padding rows get zeros",
           ("property:padding_sample_valid", "pin:multi_axis_position_ids", "equivalence"),
           _multi_axis_positions_zeroed, "verl PR #5969"),
    _entry("response_mask_from_sequence_template", "pad_to_multiple",
           "response fields of padding rows cut from the sequence-width row: they get trained",
           ("property:zero_masked_loss", "pin:response_mask_other_shape"),
           _response_mask_from_sequence, "verl PR #5969"),
    _entry("is_padding_added_when_divisible", "pad_to_multiple",
           "a copy with an all-False is_padding returned when no padding is needed",
           ("property:batch_size", "equivalence"), _is_padding_when_divisible),
    _entry("padding_routes_zeros", "pad_to_multiple",
           "padding rows' routes filled with zeros and left unmasked: every padding token sent "
           "topk times to expert 0, the dropless dispatcher's tokens * topk broken",
           ("property:padding_rows_replay_nothing", "pin:verl_7524_padding_rows_zero_routes",
            "equivalence"), _padding_routes_zeros, "verl #7524"),
    _entry("min_length_ignored", "pad_to_multiple",
           "min_length ignored: padding rows too short for context-parallel splits",
           ("property:padding_sample_valid", "pin:duplicated_real_rows"), _min_length_ignored),
    _entry("left_placement_always", "pad_to_multiple",
           "the padding sample laid out as in the left layout in a two_segment batch",
           ("property:padding_sample_valid", "pin:two_segment_context_parallel"),
           _left_placement_always),
    _entry("padding_rows_first", "pad_to_multiple",
           "padding rows prepended: every real row moves", ("property:real_rows_unchanged",),
           _padding_rows_first),
    _entry("is_padding_overwritten", "pad_to_multiple",
           "an existing is_padding field replaced instead of extended: old padding counts as real",
           ("property:is_padding_flags", "pin:existing_is_padding_extended"),
           _is_padding_overwritten),
    _entry("float_zero_rows_promote_dtype", "pad_to_multiple",
           "padding rows from torch.zeros' default float32: cat promotes int64 masks",
           ("property:field_shapes", "equivalence"), _float_zero_rows),
    _entry("is_padding_reversed", "pad_to_multiple",
           "is_padding marks the first rows: metrics drop real samples and keep padding",
           ("property:real_rows_roundtrip", "property:is_padding_flags"), _flags_reversed),
    _entry("real_rows_by_count", "real_rows",
           "the first B - #padding rows: wrong once padding rows are shuffled into the batch",
           ("property:keeps_real_rows", "pin:interleaved_padding"), _real_rows_by_count),
    _entry("real_rows_inverted", "real_rows", "the padding rows selected instead of the real ones",
           ("property:keeps_real_rows", "equivalence"), _real_rows_inverted),
    _entry("last_step_masked_row", "broadcast_stepwise_advantages",
           "advantages = last_step_advantages[traj_ids]: earlier steps get the last step's "
           "masked row, 0 on most of their own response tokens",
           ("property:trajectory_scalar", "pin:skyrl_last_step_row", "equivalence"),
           _last_step_masked_row, "SkyRL PR #1507"),
    _entry("product_not_where", "broadcast_stepwise_advantages",
           "scalar * mask: negative scalars leave -0.0 off the mask",
           ("property:support_is_mask", "pin:skyrl_last_step_row"), _product_not_where),
    _entry("mask_ignored", "broadcast_stepwise_advantages",
           "every column receives the scalar, prompt padding included",
           ("property:support_is_mask", "equivalence"), _mask_ignored),
    # spec choices (trainer.md, "Spec choices"): the other plausible rule, planted in the
    # reference too, so only the properties and the literal pins can tell it from the contract
    _entry("oracle_multiple_product_not_lcm", "required_multiple",
           "spec choice: the sizes' product instead of their lcm",
           ("property:least", "pin:dp2_mini15_n8"), _product_not_lcm, oracle=True),
    _entry("oracle_mini_batch_counts_trajectories", "required_multiple",
           "spec choice: mini-batch sizes count trajectories (n not multiplied in) instead of "
           "prompts", ("property:divisible", "pin:dp2_mini15_n8"), _mini_ignores_n, oracle=True),
    _entry("oracle_actor_updates_ignored", "required_multiple",
           "spec choice: the actor's mini-batches required on a critic-only step too",
           ("property:least", "pin:critic_only_when_actor_frozen"), _actor_updates_ignored,
           oracle=True),
    _entry("oracle_padding_rows_first", "pad_to_multiple",
           "spec choice: padding rows prepended instead of appended",
           ("property:real_rows_unchanged",), _padding_rows_first, oracle=True),
    _entry("oracle_padding_response_gets_extra", "pad_to_multiple",
           "spec choice: an odd min_length gives the response the extra token (pp = floor, "
           "rr = ceil) instead of the prompt",
           ("property:padding_sample_valid", "pin:two_segment_odd_min_length"),
           _padding_response_gets_extra, oracle=True),
    _entry("oracle_padding_rows_fully_masked", "pad_to_multiple",
           "spec choice: padding rows without any attended token instead of a minimal "
           "attended sample of eos tokens",
           ("property:padding_sample_valid", "pin:response_mask_other_shape"),
           _padding_rows_fully_masked, oracle=True),
    _entry("oracle_is_padding_overwritten", "pad_to_multiple",
           "spec choice: an existing is_padding replaced (only the new rows flagged) instead of "
           "extended", ("property:is_padding_flags", "pin:existing_is_padding_extended"),
           _is_padding_overwritten, oracle=True),
    _entry("oracle_is_padding_added_when_divisible", "pad_to_multiple",
           "spec choice: a copy with an all-False is_padding when B % multiple == 0 instead of "
           "the input itself", ("property:batch_size",), _is_padding_when_divisible,
           oracle=True),
    _entry("oracle_real_rows_by_count", "real_rows",
           "spec choice: the first B - #padding rows instead of the rows flagged False",
           ("property:keeps_real_rows", "pin:interleaved_padding"), _real_rows_by_count,
           oracle=True),
    _entry("oracle_last_step_masked_row", "broadcast_stepwise_advantages",
           "spec choice: every step gets its trajectory's last step's row instead of the "
           "scalar at its own response columns",
           ("property:trajectory_scalar", "pin:skyrl_last_step_row"), _last_step_masked_row,
           oracle=True),
    _entry("oracle_product_not_where", "broadcast_stepwise_advantages",
           "spec choice: scalar * mask (-0.0 off the mask for a negative scalar) instead of "
           "where(mask, scalar, +0.0)", ("property:support_is_mask",), _product_not_where,
           oracle=True),
]

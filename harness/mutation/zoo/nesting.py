"""Bug-zoo entries for `nesting`: the chain of silent gaps verl's mask nesting (PR #6009) went
through, plus the classic slips of a vectorized rewrite.

Most entries wrap the correct function and damage its result the way the real bug did. `oracle`
entries replace the reference too: they are mistakes in reading the spec (a rules table, a width
rule), which only the properties — written against the spec's own table — can see.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from tensordict import TensorDict

from batchproof.impl import nesting as _impl
from batchproof.impl._sync import Verdicts
from batchproof.mutation.zoo import ZooEntry
from batchproof.reference import nesting as _reference

# the correct functions, bound before any entry is planted (planting replaces module attributes)
_nest = _impl.nest_by_mask
_unnest = _impl.unnest_by_mask
_extract = _impl.extract_response
_pad = _impl.pad_to_response_width
_payload = _impl.payload_report

_VERL_RESPONSE_FIELDS = ("responses", "old_log_probs", "ref_log_prob", "rollout_log_probs",
                         "entropys")


def _quiet_nest(td, rules: dict, **kwargs):
    """Nest with `rules` overriding the caller's, coverage never strict and never reported."""
    kwargs["rules"] = {**(kwargs.get("rules") or {}), **rules}
    kwargs["strict"] = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _nest(td, **kwargs)


# --------------------------------------------------------------------------- nest_by_mask


def _nest_without_shape_check(td, **kwargs):
    """verl before its shape assertion: a field registered against the wrong mask is indexed
    with that mask anyway, and torch's IndexError (not a ValueError naming the field) escapes."""
    try:
        return _nest(td, **kwargs)
    except ValueError as err:
        if "leading dims" not in str(err):
            raise
        rules = _reference.merge_rules(kwargs.get("rules"))
        prompt_width, _ = _reference.batch_widths(td)
        for name, rule in rules.items():
            if rule is None or name not in td.keys():
                continue
            mask = _dense_mask(td, rule[0], prompt_width)
            if mask is not None:
                td.get(name)[mask != 0]  # raises IndexError on the misregistered field
        raise


def _dense_mask(td, name, prompt_width):
    if name in td.keys():
        return td.get(name)
    attention = td.get("attention_mask")
    if name == "prompt_mask":
        return attention[:, :prompt_width]
    if name == "response_attention_mask":
        return attention[:, prompt_width:]
    return None


def _nest_skipping_pad_fields(td, **kwargs):
    """verl: with pad_token_id=None the PAD_TOKEN_ID fields are skipped (left dense), silently."""
    if kwargs.get("pad_token_id") is not None:
        return _nest(td, **kwargs)
    skipped = {name: None for name, (_, pad) in _reference.DEFAULT_RULES.items()
               if pad is _reference.PAD_TOKEN_ID}
    return _quiet_nest(td, skipped, **kwargs)


def _nest_responses_by_response_mask(td, **kwargs):
    """verl's table: responses and the logprob fields nested by response_mask, which drops the
    tool tokens inside multi-turn responses."""
    pads = {name: _reference.DEFAULT_RULES[name][1] for name in _VERL_RESPONSE_FIELDS}
    return _quiet_nest(td, {name: ("response_mask", pad) for name, pad in pads.items()},
                       **kwargs)


def _nest_without_loss_mask(td, **kwargs):
    """verl's registry had no `loss_mask` (an alias of response_mask): it stays dense."""
    return _quiet_nest(td, {"loss_mask": None}, **kwargs)


def _nest_leaving_prompts_responses(td, **kwargs):
    """verl before PR #6009: prompts and responses not registered, shipped dense."""
    return _quiet_nest(td, {"prompts": None, "responses": None}, **kwargs)


def _nest_values_in_padded_storage(td, **kwargs):
    """Compaction inside a padded-size buffer: the jagged values are a view of storage as large
    as the dense field, so the padding still crosses the wire."""
    out = _nest(td, **kwargs)
    stash = out.get_non_tensor(_reference.STASH)
    for name in stash["fields"]:
        njt = out.get(name)
        values = njt.values()
        buffer = torch.empty((max(td.get(name).numel(), values.numel()),), dtype=values.dtype)
        view = buffer[:values.numel()].view(values.shape)
        view.copy_(values)
        out.set(name, torch.nested.nested_tensor_from_jagged(view, offsets=njt.offsets()))
    return out


def _nest_copying_offsets(td, **kwargs):
    """Each field gets its own copy of its mask's offsets: equal values, but separate jagged
    dims (rows no longer line up for torch) and storage counted once per field."""
    out = _nest(td, **kwargs)
    stash = out.get_non_tensor(_reference.STASH)
    for name in stash["fields"]:
        njt = out.get(name)
        out.set(name, torch.nested.nested_tensor_from_jagged(
            njt.values(), offsets=njt.offsets().clone()))
    return out


# --------------------------------------------------------------------------- unnest_by_mask


def _unnest_width_from_chunk(td):
    """verl: each chunk padded its response tensors to its own longest response (301 in one
    chunk, 14336 in another) instead of the batch's R."""
    out = _unnest(td)
    stash = td.get_non_tensor(_reference.STASH)
    lengths = td.get("response_attention_mask_lengths", None) if \
        "response_attention_mask" in stash["masks"] else None
    if lengths is None:
        return out
    longest = max((int(row.sum()) for row in _rows(lengths)), default=0)
    for name, rule in stash["fields"].items():
        if rule["mask"] == "response_attention_mask" and name in out.keys():
            out.set(name, out.get(name)[:, :longest].clone())
    return out


def _unnest_masks_as_int64(td):
    """Masks come back as int64 whatever dtype they had (bool, int32, float32)."""
    out = _unnest(td)
    stash = td.get_non_tensor(_reference.STASH)
    for name in stash["masks"]:
        if name in out.keys():
            out.set(name, out.get(name).to(torch.int64))
    return out


def _unnest_one_run_per_row(td):
    """The RLE scatter assumes one run per row (true for contiguous verl masks) and takes row i's
    run at offsets[i]: for an empty row that is the next row's run."""
    out = _unnest(td)
    stash = td.get_non_tensor(_reference.STASH)
    for name, info in stash["masks"].items():
        if info["derived"] or name not in out.keys():
            continue
        starts, lengths = td.get(f"{name}_offsets"), td.get(f"{name}_lengths")
        offsets = starts.offsets().tolist()
        flat_starts, flat_lengths = starts.values().tolist(), lengths.values().tolist()
        mask = out.get(name).clone()
        for i in range(len(offsets) - 1):
            k = offsets[i]
            if offsets[i + 1] == k and k < len(flat_starts):  # empty row: reads run k anyway
                mask[i, flat_starts[k]:flat_starts[k] + flat_lengths[k]] = 1
        out.set(name, mask)
    return out


def _rows(njt):
    offsets = njt.offsets().tolist()
    return [njt.values()[a:b] for a, b in zip(offsets, offsets[1:])]


# --------------------------------------------------------------------------- chunk_nested


def _chunk_array_split(td, n):
    """Balanced chunk sizes (numpy.array_split) instead of torch.chunk's ceil(B/n) pieces."""
    _reference._check_batch(td, "td")
    if not _reference._is_int(n):
        raise TypeError("n must be an int")
    if n < 1:
        raise ValueError("n must be >= 1")
    bounds = np.cumsum([0] + [len(p) for p in np.array_split(np.arange(td.batch_size[0]), n)])
    return [td[int(a):int(b)] for a, b in zip(bounds, bounds[1:]) if b > a]


# --------------------------------------------------------------------------- extract_response


def _extract_unchecked(td, output, *, orphans_checked=True, long_rows_checked=True):
    """extract_response without one of its two row checks (the flat index p_i - 1 + j then
    reads the previous row's last token for p_i == 0, or a long row is cut at R)."""
    prompt_width, response_width, attention = _impl._attention_runs(td)
    if not isinstance(output, torch.Tensor):
        raise TypeError("output must be a tensor")
    prompt = attention.split_totals(prompt_width, left=True)
    response = attention.split_totals(prompt_width, left=False)
    with Verdicts() as verdicts:
        values, row_starts = _impl._output_values(output, prompt + response, verdicts)
    if long_rows_checked and bool((response > response_width).any()):
        raise ValueError("a response longer than R")
    if orphans_checked and bool(((prompt == 0) & (response > 0)).any()):
        raise ValueError("an empty prompt with a response")
    columns = torch.arange(response_width)
    real = columns < response[:, None]
    source = (row_starts + prompt - 1)[:, None] + columns
    result = torch.zeros((attention.batch, response_width, *values.shape[1:]),
                         dtype=output.dtype)
    result[real] = values[source[real] % max(values.shape[0], 1)]
    return result


def _extract_reading_previous_logit(td, output):
    return _extract_unchecked(td, output, orphans_checked=False)


def _extract_truncating(td, output):
    return _extract_unchecked(td, output, long_rows_checked=False)


def _extract_by_response_mask(td, output):
    """verl: outputs aligned by response_mask, so the columns after a tool token shift left."""
    result = _extract(td, output)
    dense = _unnest(td) if _reference.STASH in td.keys() else td
    trained = dense.get("response_mask") != 0
    shifted = torch.zeros_like(result)
    for i in range(result.shape[0]):
        keep = trained[i, :result.shape[1]]
        picked = result[i, :keep.numel()][keep]
        shifted[i, :picked.shape[0]] = picked
    return shifted


def _extract_token_not_predictor(td, output):
    """result[i, j] = output_row_i[p_i + j]: the output at response token j itself instead of
    at the real token before it (the logit that predicts it)."""
    _extract(td, output)  # the real errors
    dense = _unnest(td) if _reference.STASH in td.keys() else td
    counts = (dense.get("attention_mask") != 0).sum(1).tolist()
    rows = output.unbind() if output.is_nested else torch.split(output, counts)
    shifted = [torch.cat([row[1:], torch.zeros_like(row[:1])]) for row in rows]
    flat = torch.cat(shifted) if shifted else output
    return _extract(td, flat)


def _extract_dense_ignoring_max_response_length(td, output):
    """On a dense batch, R read from the width of `responses`, ignoring the non-tensor
    max_response_length that the nested path uses."""
    if _reference.STASH in td.keys() or "responses" not in td.keys():
        return _extract(td, output)
    return _extract(td.exclude("max_response_length"), output)


# --------------------------------------------------------------------------- pad_to_response_width


def _pad_with_to_padded_tensor(td, *fields):
    """NJT.to_padded_tensor: pads to the values' total length, or to the chunk's longest row."""
    _reference.stash_of(td)
    out = TensorDict({}, batch_size=td.batch_size)
    for name in fields:
        out.set(name, td.get(name).to_padded_tensor(0))
    return out


def _pad_right_aligned(td, *fields):
    """The left layout's habit in the two-segment layout: values right-aligned in R."""
    out = _pad(td, *fields)
    lengths = _rows(td.get("response_attention_mask_lengths"))
    width = out.batch_size and next(iter(out.values()), torch.zeros(0, 0)).shape[1]
    for name in fields:
        value = out.get(name).clone()
        for i, row in enumerate(lengths):
            value[i] = torch.roll(value[i], shifts=width - int(row.sum()), dims=0)
        out.set(name, value)
    return out


# --------------------------------------------------------------------------- payload_report


def _payload_counting_each_tensor(dense_td, nested_td):
    """Bytes summed tensor by tensor: shared offsets counted once per jagged field."""
    report = _payload(dense_td, nested_td)
    total = 0
    for key in nested_td.keys():
        if nested_td.is_non_tensor(key):
            continue
        value = nested_td.get(key)
        parts = (value.values(), value.offsets()) if value.is_nested else (value,)
        total += sum(p.untyped_storage().nbytes() for p in parts)
    ratio = _reference._ratio
    return type(report)(
        dense_bytes=report.dense_bytes, nested_bytes=total, ceiling_bytes=report.ceiling_bytes,
        compression=ratio(report.dense_bytes, total), ceiling=report.ceiling,
        efficiency=ratio(report.ceiling_bytes, total), wire_bytes_dense=report.wire_bytes_dense,
        wire_bytes_nested=report.wire_bytes_nested)


# --------------------------------------------------------------------------- entries

_PR = "verl PR #6009"

ENTRIES = [
    ZooEntry(
        name="nesting.wrong_mask_opaque_error",
        op="nesting", function="nest_by_mask",
        bug="a field registered against the wrong mask reaches torch's boolean indexing: an "
            "IndexError deep inside instead of a ValueError naming field, shape and mask",
        reference=_PR,
        killers=("errors", "pin:wrong_mask_registration"),
        replacement=_nest_without_shape_check,
    ),
    ZooEntry(
        name="nesting.pad_token_silently_skipped",
        op="nesting", function="nest_by_mask",
        bug="pad_token_id=None: the PAD_TOKEN_ID fields are skipped and shipped dense",
        reference=_PR,
        killers=("errors", "pin:pad_token_id_missing"),
        replacement=_nest_skipping_pad_fields,
    ),
    ZooEntry(
        name="nesting.responses_by_response_mask",
        op="nesting", function="nest_by_mask",
        bug="responses and logprob fields nested by response_mask: tool tokens inside "
            "multi-turn responses dropped, response-axis rows no longer line up",
        reference=_PR,
        killers=("property:row_lengths", "property:shared_offsets", "property:round_trip"),
        replacement=_nest_responses_by_response_mask,
        oracle=True,
    ),
    ZooEntry(
        name="nesting.loss_mask_alias_missing",
        op="nesting", function="nest_by_mask",
        bug="the rules table lacks the loss_mask alias: loss_mask stays dense (a warning at most)",
        reference=_PR,
        killers=("property:strict_coverage",),
        replacement=_nest_without_loss_mask,
        oracle=True,
    ),
    ZooEntry(
        name="nesting.prompts_responses_left_dense",
        op="nesting", function="nest_by_mask",
        bug="prompts and responses have no rule and silently stay dense",
        reference=_PR,
        killers=("property:strict_coverage", "nesting.payload_report/property:efficiency"),
        replacement=_nest_leaving_prompts_responses,
        oracle=True,
    ),
    ZooEntry(
        name="nesting.values_hold_padded_storage",
        op="nesting", function="nest_by_mask",
        bug="jagged values are a view of a padded-size buffer: equal values, no payload saved",
        killers=("nesting.payload_report/property:efficiency",),
        replacement=_nest_values_in_padded_storage,
        oracle=True,
    ),
    ZooEntry(
        name="nesting.offsets_copied_per_field",
        op="nesting", function="nest_by_mask",
        bug="each field builds its own offsets: equal values, but no shared jagged dim",
        killers=("property:shared_offsets",),
        replacement=_nest_copying_offsets,
    ),
    ZooEntry(
        name="nesting.unnest_width_from_chunk",
        op="nesting", function="unnest_by_mask",
        bug="response tensors padded to the chunk's longest response, not R (14336 vs 301)",
        reference=_PR,
        killers=("property:chunk_commutes", "property:inverse", "pin:chunk_widths_disagree",
                 "nesting.chunk_nested/property:unnest_commutes"),
        replacement=_unnest_width_from_chunk,
        oracle=True,
    ),
    ZooEntry(
        name="nesting.unnest_masks_as_int64",
        op="nesting", function="unnest_by_mask",
        bug="masks restored as int64 whatever their dtype",
        killers=("property:inverse", "nesting.nest_by_mask/property:round_trip"),
        replacement=_unnest_masks_as_int64,
        oracle=True,
    ),
    ZooEntry(
        name="nesting.rle_empty_row_next_segment",
        op="nesting", function="unnest_by_mask",
        bug="the RLE scatter takes row i's run at offsets[i]: an empty row gets the next row's",
        killers=("equivalence", "pin:empty_row_rle"),
        replacement=_unnest_one_run_per_row,
    ),
    ZooEntry(
        name="nesting.chunk_array_split",
        op="nesting", function="chunk_nested",
        bug="numpy.array_split sizes ([2, 1, 1] for 4 rows in 3) instead of torch.chunk's",
        killers=("equivalence", "property:torch_chunk_sizes", "pin:uneven_chunks"),
        replacement=_chunk_array_split,
    ),
    ZooEntry(
        name="nesting.extract_previous_logit",
        op="nesting", function="extract_response",
        bug="p_i == 0: flat position p_i - 1 reads the previous sample's last logit",
        killers=("errors", "pin:empty_prompt_previous_logit"),
        replacement=_extract_reading_previous_logit,
    ),
    ZooEntry(
        name="nesting.extract_truncates_long_rows",
        op="nesting", function="extract_response",
        bug="a response longer than R is cut at R silently",
        killers=("errors", "pin:response_longer_than_R"),
        replacement=_extract_truncating,
    ),
    ZooEntry(
        name="nesting.extract_by_response_mask",
        op="nesting", function="extract_response",
        bug="outputs aligned by response_mask: after a tool token every column shifts left",
        reference=_PR,
        killers=("property:matches_dense_slice",),
        replacement=_extract_by_response_mask,
        oracle=True,
    ),
    ZooEntry(
        name="nesting.extract_dense_ignores_max_response_length",
        op="nesting", function="extract_response",
        bug="the dense path reads R from responses' width, the nested path from the stash",
        killers=("property:nested_equals_dense",),
        replacement=_extract_dense_ignoring_max_response_length,
        oracle=True,
    ),
    ZooEntry(
        name="nesting.pad_with_to_padded_tensor",
        op="nesting", function="pad_to_response_width",
        bug="NJT.to_padded_tensor pads to the total token count (or the chunk's maximum), not R",
        reference=_PR,
        killers=("property:canonical_width", "pin:to_padded_tensor_total_width"),
        replacement=_pad_with_to_padded_tensor,
        oracle=True,
    ),
    ZooEntry(
        name="nesting.pad_right_aligned",
        op="nesting", function="pad_to_response_width",
        bug="response values right-aligned in R (the left layout's rule) in the two-segment one",
        killers=("property:values_in_place",),
        replacement=_pad_right_aligned,
        oracle=True,
    ),
    ZooEntry(
        name="nesting.payload_counts_offsets_per_tensor",
        op="nesting", function="payload_report",
        bug="bytes summed per tensor: offsets shared by many fields counted many times",
        killers=("property:accounting",),
        replacement=_payload_counting_each_tensor,
        oracle=True,
    ),
    ZooEntry(
        name="nesting.oracle_extract_token_not_predictor",
        op="nesting", function="extract_response",
        bug="spec choice: column j holds the output at response token j itself (flat position "
            "p_i + j) instead of at the token before it (p_i - 1 + j, the logit predicting it)",
        killers=("property:matches_dense_slice", "pin:tool_tokens_alignment"),
        replacement=_extract_token_not_predictor,
        oracle=True,
    ),
    ZooEntry(
        name="nesting.oracle_chunk_array_split",
        op="nesting", function="chunk_nested",
        bug="spec choice: balanced chunk sizes (numpy.array_split: [2, 1, 1] for 4 rows in 3) "
            "instead of torch.chunk's ceil(B/n) pieces ([2, 2])",
        killers=("property:torch_chunk_sizes", "pin:uneven_chunks"),
        replacement=_chunk_array_split,
        oracle=True,
    ),
]

"""Bug-zoo entries for `rl_batch`: each reproduces a bug that shipped in a public framework.

Most entries wrap the correct `impl` function and damage its output the way the real bug did, so
each stays a few lines long and obviously wrong in exactly one way.
"""

from __future__ import annotations

import logging

import torch

from batchproof import replay
from batchproof.impl import _cpu
from batchproof.impl import rl_batch as _impl
from batchproof.mutation.zoo import ZooEntry
from batchproof.reference import rl_batch as _reference

# the correct functions, bound before any entry is planted (planting replaces module attributes)
_build = _impl.build_rl_batch
_oracle_build = _reference.build_rl_batch
_values = _impl.response_values
_one_pass_kernel = _impl._one_pass_kernel


def _left_aligned_slice(values, response_mask):
    _values(values, response_mask)  # the real validation: only the slicing is wrong
    counts = response_mask.sum(dim=1).tolist()
    return [row[:n].clone() for row, n in zip(values.unbind(0), counts)]


def _minus_zero_slice(values, response_mask):
    _values(values, response_mask)  # the real validation: only the slicing is wrong
    counts = response_mask.sum(dim=1).tolist()
    return [row[-n:].clone() for row, n in zip(values.unbind(0), counts)]


def _mask_from_pad(prompts, responses, **kwargs):
    td = _build(prompts, responses, **kwargs)
    td["attention_mask"] = (td["input_ids"] != kwargs["pad_token_id"]).to(torch.int64)
    return td


def _oracle_mask_from_pad(prompts, responses, **kwargs):
    td = _oracle_build(prompts, responses, **kwargs)
    td["attention_mask"] = (td["input_ids"] != kwargs["pad_token_id"]).to(torch.int64)
    return td


def _inflate(prompts, responses, **kwargs):
    """Legacy sizing in the left layout: width max p + max r, extra columns of left pad."""
    td = _oracle_build(prompts, responses, **kwargs)
    width = max(len(p) for p in prompts) + max(len(r) for r in responses)
    extra = width - td["input_ids"].shape[1]
    if td.get_non_tensor("layout") != "left" or extra == 0:
        return td
    for key, fill in (("input_ids", kwargs["pad_token_id"]), ("attention_mask", 0),
                      ("position_ids", 0)):
        value = td[key]
        left = torch.full((value.shape[0], extra), fill, dtype=value.dtype)
        td = td.exclude(key).set(key, torch.cat([left, value], dim=1))
    return td


def _shift_response_columns(prompts, responses, **kwargs):
    """Off by one: per-token values land one column to the left of their token."""
    td = _build(prompts, responses, **kwargs)
    for key in ("loss_mask", "rewards", "rollout_logprobs"):
        if key in td.keys():
            td[key] = torch.roll(td[key], shifts=-1, dims=1)
    return td


def _scalar_reward_two_segment_rule(prompts, responses, **kwargs):
    """A scalar reward written at column r_i - 1 (the two-segment rule) in the left layout."""
    rewards = kwargs.get("rewards")
    if kwargs.get("layout", "left") != "left" or rewards is None:
        return _build(prompts, responses, **kwargs)
    td = _build(prompts, responses, **kwargs)
    width = td["rewards"].shape[1]
    for i, value in enumerate(rewards):
        if not isinstance(value, list) and len(responses[i]) > 0:
            td["rewards"][i, width - 1] = 0.0
            td["rewards"][i, len(responses[i]) - 1] = float(value)
    return td


def _positions_from_one(prompts, responses, **kwargs):
    """cumsum(attention_mask) without the -1: positions start at 1."""
    td = _build(prompts, responses, **kwargs)
    td["position_ids"] = torch.cumsum(td["attention_mask"], dim=1)
    return td


def _int32_attention(prompts, responses, **kwargs):
    """Masks built in int32 (as in a `cumsum`-based rewrite) leak the wrong dtype."""
    td = _build(prompts, responses, **kwargs)
    td["attention_mask"] = td["attention_mask"].to(torch.int32)
    return td


def _truncate_to_max_seq_len(prompts, responses, **kwargs):
    limit = kwargs.get("max_seq_len")
    td = _build(prompts, responses, **kwargs)
    if limit is None or td["input_ids"].shape[1] <= limit or limit == 0:
        return td
    cut = td["input_ids"].shape[1] - limit
    for key in ("input_ids", "attention_mask", "position_ids"):
        td[key][:, :cut] = td[key][:, :cut] * 0
    return td


def _sorted_by_length(prompts, responses, **kwargs):
    """Rows sorted by total length for efficiency, and the order never restored."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]) + len(responses[i]))
    picked = dict(kwargs)
    for name in ("rewards", "loss_masks", "logprobs"):
        if kwargs.get(name) is not None and len(kwargs[name]) == len(prompts):
            picked[name] = [kwargs[name][i] for i in order]
    return _build([prompts[i] for i in order], [responses[i] for i in order],
                               **picked)


def _two_segment_right_aligned_values(prompts, responses, **kwargs):
    """two_segment per-token values right-aligned as in the left layout (mask left-aligned)."""
    td = _build(prompts, responses, **kwargs)
    if td.get_non_tensor("layout") != "two_segment":
        return td
    width = td["response_mask"].shape[1]
    for key in ("loss_mask", "rewards", "rollout_logprobs"):
        if key in td.keys():
            rows = [torch.roll(row, width - len(r)) for row, r in zip(td[key], responses)]
            td[key] = torch.stack(rows) if rows else td[key]
    return td


def _length_mismatch_accepted(prompts, responses, **kwargs):
    """SkyRL's quirk: a per-token list is right-aligned by its own length; mismatches pass."""
    fixed = dict(kwargs)
    for name in ("rewards", "loss_masks", "logprobs"):
        rows = kwargs.get(name)
        if rows is None or len(rows) != len(responses):
            continue
        fixed[name] = [_fit(row, len(resp)) for row, resp in zip(rows, responses)]
    return _build(prompts, responses, **fixed)


def _fit(row, length):
    if not isinstance(row, list) or len(row) == length:
        return row
    return ([0.0] * length + list(row))[-length:] if length else []


def _float_tokens_truncated(prompts, responses, **kwargs):
    """Token ids through int(): 1.5 becomes token 1, a str "3" token 3 (numpy.fromiter with an
    integer dtype truncates the same way)."""
    def ints(rows):
        if isinstance(rows, torch.Tensor) or not isinstance(rows, list):
            return rows
        return [[int(v) if isinstance(v, (float, str)) else v for v in row]
                if isinstance(row, list) else row for row in rows]

    return _build(ints(prompts), ints(responses), **kwargs)


def _none_values_as_nan(prompts, responses, **kwargs):
    """Per-token lists through numpy.fromiter(dtype=float32): None becomes NaN, "0.5" 0.5."""
    import math

    def floats(rows):
        if not isinstance(rows, list):
            return rows
        return [[math.nan if v is None else float(v) if isinstance(v, (str, bytes)) else v
                 for v in row] if isinstance(row, list) else row for row in rows]

    kwargs = {k: floats(v) if k in ("rewards", "loss_masks", "logprobs") else v
              for k, v in kwargs.items()}
    return _build(prompts, responses, **kwargs)


# --------------------------------------------------------------------------- router replay
# Each wraps the correct builder and moves the routes (or the support) the way the public bug
# did; without router-replay inputs the output is untouched.


def _edited(edit):
    """The correct builder, then `edit(td, prompts, responses, kwargs)` on its output."""
    def replacement(prompts, responses, **kwargs):
        td = _build(prompts, responses, **kwargs)
        return edit(td, prompts, responses, kwargs)
    return replacement


def _oracle_edited(edit):
    def replacement(prompts, responses, **kwargs):
        td = _oracle_build(prompts, responses, **kwargs)
        return edit(td, prompts, responses, kwargs)
    return replacement


def _captured(kwargs) -> list[torch.Tensor]:
    return [replay.as_tensor(e) for e in replay.entries_of(kwargs["routed_experts"])]


def _lengths(td) -> tuple[list[int], list[int]]:
    """(p_i, r_i) read from the output's masks: the same in every input form."""
    tokens = td["attention_mask"].sum(1).tolist()
    r_lens = td["response_mask"].sum(1).tolist()
    return [n - r for n, r in zip(tokens, r_lens)], r_lens


def _starts(td) -> list[int]:
    """The column of each row's token 0 (docs/rl_batch.md)."""
    width = td["input_ids"].shape[1]
    p_lens, r_lens = _lengths(td)
    if td.get_non_tensor("layout") == "left":
        return [width - p - r for p, r in zip(p_lens, r_lens)]
    return [max(p_lens) - p for p in p_lens]


def _dummy_like(routes: torch.Tensor) -> torch.Tensor:
    return torch.arange(routes.shape[-1], dtype=routes.dtype,
                        device=routes.device).expand(routes.shape[-2:])


def _placed_from(td, starts: list[int], entries: list[torch.Tensor], skip=lambda i, j: False):
    """routed_experts and router_padding_mask rebuilt with row i's route j at column
    starts[i] + j (dropped past the row's end, or where `skip(i, j)`)."""
    routes = _dummy_like(td["routed_experts"]).expand(td["routed_experts"].shape).clone()
    mask = torch.ones_like(td["router_padding_mask"])
    width = routes.shape[1]
    for i, (start, entry) in enumerate(zip(starts, entries)):
        for j in range(entry.shape[0]):
            if 0 <= start + j < width and not skip(i, j):
                routes[i, start + j] = entry[j].to(routes.device)
                mask[i, start + j] = False
    td["routed_experts"], td["router_padding_mask"] = routes, mask
    return td


def _stale_rows_repeated(td, prompts, responses, kwargs):
    """SGLang #36404's class: every slot after a row's captured routes that holds none (the
    uncaptured tokens, the right pad) keeps a stale real route, the row's last one repeated,
    instead of the dummy route (the mask still True there)."""
    if "routed_experts" not in td.keys():
        return td
    routes, mask = td["routed_experts"].clone(), td["router_padding_mask"]
    for i in range(routes.shape[0]):
        last = None
        for column in range(routes.shape[1]):
            if not mask[i, column]:
                last = routes[i, column].clone()
            elif last is not None:
                routes[i, column] = last
    td["routed_experts"] = routes
    return td


def _zero_padding_routes(td, prompts, responses, kwargs):
    """verl #7524's class: every slot without a captured route given the all-zero route (topk
    times expert 0) instead of the dummy route."""
    if "routed_experts" in td.keys():
        mask = td["router_padding_mask"][..., None, None]
        td["routed_experts"] = torch.where(mask, torch.zeros_like(td["routed_experts"]),
                                           td["routed_experts"])
    return td


def _offset_from_longest_prompt(td, prompts, responses, kwargs):
    """rllm #543's offset in the left layout: row i's routes placed from column
    max p - p_i (the two-segment start) instead of T - p_i - r_i."""
    if "routed_experts" not in td.keys() or td.get_non_tensor("layout") != "left":
        return td
    p_lens = _lengths(td)[0]
    return _placed_from(td, [max(p_lens) - p for p in p_lens], _captured(kwargs))


def _shifted_at_boundary(td, prompts, responses, kwargs):
    """Prompt and response routes placed separately, the response part one column early: the
    first response token's route on the last prompt token, the last captured token left with
    the dummy route."""
    if "routed_experts" not in td.keys():
        return td
    starts, entries, p_lens = _starts(td), _captured(kwargs), _lengths(td)[0]
    td = _placed_from(td, starts, entries, skip=lambda i, j: j >= p_lens[i] > 0)
    routes, mask = td["routed_experts"], td["router_padding_mask"]
    for i, (start, entry, p) in enumerate(zip(starts, entries, p_lens)):
        for j in range(p, entry.shape[0]) if p else ():
            routes[i, start + j - 1] = entry[j].to(routes.device)
            mask[i, start + j - 1] = False
    return td


def _routes_widened(td, prompts, responses, kwargs):
    """A silent dtype change: the laid-out routes in int64 (a dummy buffer made with
    torch.arange's default dtype, the routes copied into it) whatever dtype they came in."""
    if "routed_experts" in td.keys():
        td["routed_experts"] = td["routed_experts"].to(torch.int64)
    return td


def _routes_dropped(td, prompts, responses, kwargs):
    """Routes dropped: the response tokens' captured routes replaced by the dummy route (the
    mask True), as if only the prompt's routes had been carried into the batch."""
    if "routed_experts" not in td.keys():
        return td
    p_lens = _lengths(td)[0]
    return _placed_from(td, _starts(td), _captured(kwargs), skip=lambda i, j: j >= p_lens[i])


def _support_right_aligned(td, prompts, responses, kwargs):
    """two_segment support rows right-aligned (the left layout's rule) while its loss_mask
    and response_mask are left-aligned: support rows on other tokens' columns."""
    if "sample_support" not in td.keys() or td.get_non_tensor("layout") != "two_segment":
        return td
    support = td["sample_support"].clone()
    width = support.shape[1]
    for i, r in enumerate(_lengths(td)[1]):
        support[i] = torch.roll(support[i], width - r, dims=0)
    td["sample_support"] = support
    return td


def _loss_masked_tokens_unreplayed(td, prompts, responses, kwargs):
    """Routes replayed only on trained tokens: a captured response token whose loss mask is 0
    gets the dummy route and the mask."""
    if "routed_experts" not in td.keys() or kwargs.get("loss_masks") is None:
        return td
    (p_lens, r_lens), loss = _lengths(td), td["loss_mask"].tolist()
    first = [len(row) - r if td.get_non_tensor("layout") == "left" else 0
             for row, r in zip(loss, r_lens)]  # the response column of response token 0

    def untrained(i: int, j: int) -> bool:
        return j >= p_lens[i] and loss[i][first[i] + j - p_lens[i]] == 0.0

    return _placed_from(td, _starts(td), _captured(kwargs), skip=untrained)


def _replay(name, bug, killers, edit, reference="") -> ZooEntry:
    return ZooEntry(name=f"rl_batch.{name}", op="rl_batch", function="build_rl_batch",
                    bug=f"router replay: {bug}", killers=killers, replacement=_edited(edit),
                    reference=reference)


# --------------------------------------------------------------------------- spec choices
# The other plausible rule for each choice of rl_batch.md's "Spec choices", planted in the
# reference too (oracle=True): only properties and literal pins can tell it from the contract.


def _is_scalar(value) -> bool:
    return not isinstance(value, (list, tuple)) and not (
        isinstance(value, torch.Tensor) and value.dim() >= 1)


def _left_values_left_aligned(prompts, responses, **kwargs):
    """The left layout's response tensors left-aligned (the two-segment rule): response column
    j holds response token j instead of sitting under sequence column T-R+j."""
    td = _build(prompts, responses, **kwargs)
    width = td["response_mask"].shape[1]
    if td.get_non_tensor("layout") != "left" or width == 0:
        return td
    lengths = td["response_mask"].sum(1).tolist()
    for key in ("response_mask", "loss_mask", "rewards", "rollout_logprobs"):
        if key in td.keys():
            td[key] = torch.stack([torch.roll(row, n - width) for row, n in zip(td[key], lengths)])
    return td


def _left_layout_right_padded(prompts, responses, **kwargs):
    """Each row one right-padded block (tokens from column 0, pad after them), the Hugging Face
    tokenizer default, instead of left-padded."""
    td = _build(prompts, responses, **kwargs)
    if td.get_non_tensor("layout") != "left":
        return td
    width = td["input_ids"].shape[1]
    real = td["attention_mask"].sum(1).tolist()
    for key in ("input_ids", "attention_mask"):
        td[key] = torch.stack([torch.roll(row, n - width) for row, n in zip(td[key], real)])
    td["position_ids"] = (torch.cumsum(td["attention_mask"], 1) - 1).clamp(min=0)
    return td


def _scalar_reward_on_first_token(prompts, responses, **kwargs):
    """A scalar reward written on the row's first response token instead of its last."""
    td = _build(prompts, responses, **kwargs)
    rewards = kwargs.get("rewards")
    if not isinstance(rewards, (list, tuple)):
        return td
    left = td.get_non_tensor("layout") == "left"
    width = td["rewards"].shape[1]
    for i, value in enumerate(rewards):
        r = len(responses[i])
        if r == 0 or not _is_scalar(value):
            continue
        last, first = (width - 1, width - r) if left else (r - 1, 0)
        moved = td["rewards"][i, last].clone()
        td["rewards"][i, last] = 0.0
        td["rewards"][i, first] = moved
    return td


def _scalar_reward_needs_response(prompts, responses, **kwargs):
    """A scalar reward of a row without response tokens rejected instead of dropped."""
    td = _build(prompts, responses, **kwargs)  # the real errors first
    rewards = kwargs.get("rewards")
    if isinstance(rewards, (list, tuple)):
        for i, value in enumerate(rewards):
            if _is_scalar(value) and len(responses[i]) == 0:
                raise ValueError(f"rewards[{i}] is a scalar but responses[{i}] is empty")
    return td


def _pad_positions_one(prompts, responses, **kwargs):
    """Hugging Face's `position_ids.masked_fill_(attention_mask == 0, 1)`: pad columns get
    position 1 instead of max(cumsum - 1, 0)."""
    td = _build(prompts, responses, **kwargs)
    mask = td["attention_mask"]
    td["position_ids"] = torch.where(mask == 1, torch.cumsum(mask, 1) - 1, torch.ones_like(mask))
    return td


def _loss_mask_int64(prompts, responses, **kwargs):
    """Without loss_masks, loss_mask is the response_mask itself (int64), not its float32 copy."""
    td = _build(prompts, responses, **kwargs)
    if kwargs.get("loss_masks") is None:
        td["loss_mask"] = td["response_mask"].clone()
    return td


def _warns_at_max_seq_len(prompts, responses, **kwargs):
    """max_seq_len read as an inclusive limit: T == max_seq_len warns too."""
    td = _build(prompts, responses, **kwargs)
    limit, width = kwargs.get("max_seq_len"), td["input_ids"].shape[1]
    if limit is not None and width == limit:
        logging.getLogger(_impl.__name__).warning(
            "sequence width %d reaches max_seq_len %s", width, limit)
    return td


# dispatch faults: the outputs stay bit-identical (every equivalence check passes), the op takes
# slower code than its placement stands for; only the `paths:` checks see them


def _numba_never_dispatched(device, per_token):
    """The compiled kernel's dispatch condition always false: the torch composition instead."""
    module = _one_pass_kernel(device, per_token)
    return None if module is _impl.rl_batch_kernel else module


def _triton_falls_back(device, per_token):
    """The Triton kernels never chosen: the device-generic torch composition runs on CUDA."""
    module = _one_pass_kernel(device, per_token)
    return module if module is _impl.rl_batch_kernel else None


def _fast_paths_ignore_the_switch(device) -> bool:
    """The CPU fast paths taken on every CPU tensor, whatever the placement asks: the generic
    placement then checks the CPU's code instead of the code CUDA runs."""
    _cpu.fast_paths(device)  # (asked, as before)
    return device.type == "cpu"


def _dispatch(name, bug, killers, target, replacement) -> ZooEntry:
    return ZooEntry(name=f"rl_batch.{name}", op="rl_batch", function="build_rl_batch",
                    bug=f"dispatch: {bug}", killers=killers, replacement=replacement,
                    target=target)


def _choice(name, bug, killers, replacement) -> ZooEntry:
    return ZooEntry(name=f"rl_batch.{name}", op="rl_batch", function="build_rl_batch",
                    bug=f"spec choice: {bug}", killers=killers, replacement=replacement,
                    oracle=True)


ENTRIES = [
    ZooEntry(
        name="rl_batch.left_aligned_slice",
        op="rl_batch", function="response_values",
        bug="`x[:n]` on right-aligned response tensors returns pad columns (SkyRL, before #1367)",
        reference="SkyRL PR #1367",
        killers=("pin:left_aligned_slice", "property:last_n_entries", "equivalence"),
        replacement=_left_aligned_slice,
    ),
    ZooEntry(
        name="rl_batch.x_minus_zero",
        op="rl_batch", function="response_values",
        bug="`x[-n:]` with n == 0 returns the whole row instead of nothing",
        reference="SkyRL PR #1367",
        killers=("pin:x_minus_zero", "property:last_n_entries", "equivalence"),
        replacement=_minus_zero_slice,
    ),
    ZooEntry(
        name="rl_batch.oracle_x_minus_zero",
        op="rl_batch", function="response_values",
        bug="the same `x[-0:]` bug in the oracle itself: only the property and the pin see it",
        reference="SkyRL PR #1367",
        killers=("pin:x_minus_zero", "property:last_n_entries"),
        replacement=_minus_zero_slice,
        oracle=True,
    ),
    ZooEntry(
        name="rl_batch.mask_from_token_not_pad",
        op="rl_batch", function="build_rl_batch",
        bug="attention_mask derived from `input_ids != pad_token_id` drops real pad-id tokens",
        killers=("pin:mask_from_token_not_pad", "property:masks_are_steps", "equivalence"),
        replacement=_mask_from_pad,
    ),
    ZooEntry(
        name="rl_batch.oracle_mask_from_token_not_pad",
        op="rl_batch", function="build_rl_batch",
        bug="the oracle itself derives masks from token values: only properties and pins see it",
        killers=("pin:mask_from_token_not_pad", "property:tokens_preserved",
                 "property:masks_are_steps"),
        replacement=_oracle_mask_from_pad,
        oracle=True,
    ),
    ZooEntry(
        name="rl_batch.oracle_two_segment_width",
        op="rl_batch", function="build_rl_batch",
        bug="left layout sized like the legacy layout (max p + max r): up to 2x padding on "
            "anti-correlated multi-turn lengths",
        reference="SkyRL PR #1285",
        killers=("pin:two_segment_width_inflation", "property:shapes_and_dtypes"),
        replacement=_inflate,
        oracle=True,
    ),
    ZooEntry(
        name="rl_batch.per_token_values_shifted",
        op="rl_batch", function="build_rl_batch",
        bug="off by one: loss mask / rewards / logprobs one column left of their tokens",
        killers=("property:alignment", "equivalence"),
        replacement=_shift_response_columns,
    ),
    ZooEntry(
        name="rl_batch.scalar_reward_column",
        op="rl_batch", function="build_rl_batch",
        bug="scalar reward written at column r_i - 1 (two-segment rule) in the right-aligned "
            "layout: it lands on another token or the pad",
        killers=("pin:scalar_reward_on_last_token", "property:alignment", "equivalence"),
        replacement=_scalar_reward_two_segment_rule,
    ),
    ZooEntry(
        name="rl_batch.positions_from_one",
        op="rl_batch", function="build_rl_batch",
        bug="position_ids = cumsum(attention_mask) without the -1",
        killers=("property:positions", "equivalence"),
        replacement=_positions_from_one,
    ),
    ZooEntry(
        name="rl_batch.int32_attention_mask",
        op="rl_batch", function="build_rl_batch",
        bug="attention_mask in int32: equal values, wrong dtype (torch.equal would not notice)",
        killers=("property:shapes_and_dtypes", "equivalence"),
        replacement=_int32_attention,
    ),
    ZooEntry(
        name="rl_batch.oracle_truncates_to_max_seq_len",
        op="rl_batch", function="build_rl_batch",
        bug="max_seq_len silently blanks the leftmost columns instead of only warning",
        killers=("property:max_seq_len_only_warns", "pin:max_seq_len_never_truncates"),
        replacement=_truncate_to_max_seq_len,
        oracle=True,
    ),
    ZooEntry(
        name="rl_batch.rows_sorted_by_length",
        op="rl_batch", function="build_rl_batch",
        bug="samples sorted by length to cut padding, and the original order never restored",
        killers=("property:permutation", "equivalence"),
        replacement=_sorted_by_length,
    ),
    ZooEntry(
        name="rl_batch.oracle_two_segment_values_right_aligned",
        op="rl_batch", function="build_rl_batch",
        bug="two_segment per-token values right-aligned while its response_mask is left-aligned",
        killers=("property:layouts_agree", "property:alignment"),
        replacement=_two_segment_right_aligned_values,
        oracle=True,
    ),
    ZooEntry(
        name="rl_batch.length_mismatch_accepted",
        op="rl_batch", function="build_rl_batch",
        bug="a per-token list of the wrong length is right-aligned by its own length (SkyRL quirk)",
        killers=("pin:loss_mask_length_mismatch", "errors"),
        replacement=_length_mismatch_accepted,
    ),
    ZooEntry(
        name="rl_batch.float_token_ids_truncated",
        op="rl_batch", function="build_rl_batch",
        bug="float and str token ids truncated to ints instead of rejected (a fast path that "
            "converts with an integer dtype)",
        killers=("pin:float_token_id",),
        replacement=_float_tokens_truncated,
    ),
    ZooEntry(
        name="rl_batch.none_values_as_nan", op="rl_batch", function="build_rl_batch",
        bug="per-token lists converted by numpy.fromiter: None becomes NaN and '0.5' 0.5 "
            "instead of a TypeError (the fix of 2026-11-24 in impl/rl_batch.py)",
        killers=("pin:none_per_token_value",),
        replacement=_none_values_as_nan,
    ),
    _choice("oracle_left_layout_values_left_aligned",
            "response tensors of the left layout left-aligned (column j = response token j) "
            "instead of right-aligned under the last R sequence columns",
            ("property:masks_are_steps", "property:alignment",
             "pin:scalar_reward_on_last_token"), _left_values_left_aligned),
    _choice("oracle_left_layout_right_padded",
            "each row of the left layout one right-padded block (pad after the response) "
            "instead of left-padded", ("property:masks_are_steps", "property:alignment",
                                       "pin:mask_from_token_not_pad"),
            _left_layout_right_padded),
    _choice("oracle_scalar_reward_on_first_token",
            "a scalar reward on the row's first response token instead of its last",
            ("property:alignment", "pin:scalar_reward_on_last_token"),
            _scalar_reward_on_first_token),
    _choice("oracle_scalar_reward_needs_response",
            "a scalar reward of a row with an empty response rejected (ValueError) instead of "
            "dropped", ("pin:empty_response_and_empty_row",), _scalar_reward_needs_response),
    _choice("oracle_pad_positions_one",
            "pad columns at position 1 (Hugging Face's masked_fill) instead of "
            "max(cumsum - 1, 0)", ("property:positions",), _pad_positions_one),
    _choice("oracle_loss_mask_int64",
            "without loss_masks, loss_mask is the int64 response_mask instead of a float32 "
            "copy", ("property:shapes_and_dtypes",), _loss_mask_int64),
    _choice("oracle_warns_at_max_seq_len",
            "max_seq_len an inclusive limit: T == max_seq_len warns too",
            ("property:max_seq_len_only_warns",), _warns_at_max_seq_len),
    ZooEntry(
        name="rl_batch.signaling_nan_kept",
        op="rl_batch", function="build_rl_batch",
        bug="per-token values given as tensors copied bit for bit: a signaling NaN stays "
            "signaling where the reference, reading each value as a Python float, makes it "
            "quiet (batchproof's own impl until 2026-12-01: the jagged and tensor-rows paths)",
        reference="batchproof (issue 39)",
        killers=("pin:signaling_nan_values",),
        replacement=lambda flat: flat,
        target="quieted",
    ),
    _replay("stale_route_rows_repeated",
            "stale rows: every slot after a row's captured routes (the uncaptured tokens, the "
            "right pad) holds the row's last real route repeated instead of the dummy route",
            ("equivalence", "property:dummy_routes_where_masked",
             "pin:sglang_36404_stale_rows_repeated"), _stale_rows_repeated,
            "sgl-project/sglang#36404"),
    _replay("zero_filled_padding_routes",
            "zero-filled padding routes: the pads and the uncaptured tokens sent topk times to "
            "expert 0, a dropless dispatcher's tokens * topk broken",
            ("equivalence", "property:dummy_routes_where_masked",
             "property:route_count_per_layer", "pin:verl_7524_padding_routes_not_zeros"),
            _zero_padding_routes, "verl-project/verl#7524"),
    _replay("routes_offset_from_longest_prompt",
            "routes placed at an offset computed from the longest prompt (max p - p_i, the "
            "two-segment start) in the left layout, whose rows start at T - p_i - r_i",
            ("equivalence", "property:routes_on_their_tokens", "property:layouts_agree",
             "pin:rllm_543_offset_from_longest_prompt"), _offset_from_longest_prompt,
            "rllm-org/rllm#543"),
    _replay("route_shifted_at_prompt_response_boundary",
            "a route shifted by one at the prompt/response boundary: the response part placed "
            "one column early, its first route on the last prompt token",
            ("equivalence", "property:routes_on_their_tokens",
             "pin:routes_across_prompt_response_boundary"), _shifted_at_boundary),
    _replay("routes_widened_to_int64",
            "a silent dtype change: uint8 / int16 / int32 routes laid out in int64",
            ("equivalence", "property:shapes_and_dtypes", "property:routes_on_their_tokens",
             "pin:rllm_543_offset_from_longest_prompt"), _routes_widened),
    _replay("response_routes_dropped",
            "routes dropped: the response tokens' captured routes replaced by the dummy route, "
            "only the prompt's carried into the batch (the trained tokens routed afresh)",
            ("equivalence", "property:routes_on_their_tokens",
             "pin:routes_across_prompt_response_boundary"), _routes_dropped),
    _replay("support_right_aligned_in_two_segment",
            "sample support right-aligned in two_segment while its loss_mask is left-aligned: "
            "support rows on other tokens' columns",
            ("equivalence", "property:support_on_response_slots", "property:layouts_agree",
             "pin:support_follows_loss_mask_columns"), _support_right_aligned),
    ZooEntry(
        name="rl_batch.oracle_loss_masked_tokens_unreplayed", op="rl_batch",
        function="build_rl_batch",
        bug="spec choice: routes replayed on trained tokens only (a captured response token "
            "with loss mask 0 gets the dummy route and the mask) instead of on every captured "
            "token",
        killers=("property:routes_on_their_tokens", "pin:loss_masked_tokens_replayed"),
        replacement=_oracle_edited(_loss_masked_tokens_unreplayed), oracle=True),
    _dispatch("numba_kernel_never_dispatched",
              "the Numba kernel's dispatch condition always false: tensors and jagged rows "
              "take the torch composition (equal outputs, a slower op)", ("paths:kernel",),
              "_one_pass_kernel", _numba_never_dispatched),
    _dispatch("triton_falls_back_to_torch",
              "the Triton kernels never chosen: CUDA runs the torch composition (equal "
              "outputs, a slower op)", ("paths:triton",), "_one_pass_kernel",
              _triton_falls_back),
    _dispatch("fast_paths_ignore_the_placement",
              "the CPU fast paths taken whatever the placement asks: the generic and triton "
              "placements check CPU code, not the code CUDA runs",
              ("paths:generic", "paths:triton"), "fast_paths", _fast_paths_ignore_the_switch),
]

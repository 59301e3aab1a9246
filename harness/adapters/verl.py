"""verl adapters (PyPI distribution `verl`, checked with 0.9.1; see docs/frameworks.md).

    balance.karmarkar_karp        verl.utils.seqlen_balancing.karmarkar_karp(seqlen_list,
                                  k_partitions, equal_size)
    balance.balanced_partitions   verl.utils.seqlen_balancing.get_seqlen_balanced_partitions
    balance.micro_batches         verl.utils.seqlen_balancing.rearrange_micro_batches(batch,
                                  max_token_len, ...): lengths become an attention mask; the
                                  returned index lists are the micro-batches (properties only:
                                  verl balances a quadratic workload, not token sums)
    rl_batch.build_rl_batch       position_ids from verl.utils.model.compute_position_id_with_mask
                                  on the reference's attention_mask (every other key is the
                                  reference's: only the position ids are under test)
    nesting.nest_by_mask          verl.workers.utils.padding.left_right_2_no_padding(data): verl's
                                  nested input_ids / position_ids / routed_experts spliced into
                                  the reference's nested batch (only the fields verl nests are
                                  under test; it converts in place, so it gets a copy)
    nesting.extract_response      verl.workers.utils.padding.no_padding_2_padding(tensor, data):
                                  arguments swapped; a nested batch's R as max_response_len
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from hypothesis import strategies as st
from tensordict import TensorDict, TensorDictBase

from batchproof.adapters import Adapter, Call, KnownDivergence, register_adapter
from batchproof.registry import BadCase, Case

UPSTREAM = "verl/utils/seqlen_balancing.py (verl 0.9.1)"
SEQLEN = "verl.utils.seqlen_balancing"


# --------------------------------------------------------------------------- partitions


def partitions_adapter(verl_function: Callable[..., Any]) -> Callable[..., list[list[int]]]:
    def partitions(values, k, *, equal_size=False):
        return verl_function(seqlen_list=values, k_partitions=k, equal_size=equal_size)

    return partitions


def _values(call: Call) -> list | None:
    """values as a plain list: a list or tuple, or a 1-D tensor's `tolist()`; None otherwise
    (an int, a str, a tensor of another rank or on the meta device)."""
    values = call.arg("values")
    if isinstance(values, torch.Tensor) and values.dim() != 1:
        return None
    return Call.values(values)


def _k(call: Call) -> Any:
    return call.arg("k")


def k_out_of_range(call: Call) -> bool:
    k, values = _k(call), _values(call)
    return (values is not None and isinstance(k, int) and not isinstance(k, bool)
            and not 1 <= k <= len(values))


def equal_size_not_divisible(call: Call) -> bool:
    k = _k(call)
    values = _values(call)
    return (bool(call.arg("equal_size")) and values is not None and isinstance(k, int)
            and k > 0 and len(values) % k != 0)


def bad_value(call: Call) -> bool:
    """A negative, non-finite or bool value, in a list or a 1-D tensor (a bool tensor's values
    are bools)."""
    return any(isinstance(v, bool) or (isinstance(v, (int, float)) and not (
        math.isfinite(v) and v >= 0)) for v in _values(call) or [])


def values_tensor_not_real_1d(call: Call) -> bool:
    """A values tensor with rows that is not 1-D (2-D or more), or 1-D and complex."""
    values = call.arg("values")
    if not isinstance(values, torch.Tensor) or values.is_meta or values.is_nested:
        return False
    return values.dim() >= 1 and values.shape[0] > 0 and (
        values.dim() >= 2 or values.is_complex())


def k_is_bool(call: Call) -> bool:
    return isinstance(_k(call), bool)


def float_k_over_n(call: Call) -> bool:
    """A non-int k (e.g. 2.0) above the number of values: verl's `k <= n` assert fires first."""
    k, values = _k(call), _values(call)
    return (isinstance(k, float) and values is not None and math.isfinite(k)
            and k > len(values))


PARTITION_KNOWN = (
    KnownDivergence(
        "k_unchecked", k_out_of_range, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=(AssertionError, IndexError),
        doc="karmarkar_karp accepts k > n and returns empty partitions; k < 1 fails with "
            "AssertionError, with IndexError (k = 0 on one value) or returns []; "
            "get_seqlen_balanced_partitions rejects k > n with AssertionError. The contract "
            "raises ValueError."),
    KnownDivergence(
        "equal_size_checked_by_assert", equal_size_not_divisible, kind="errors",
        upstream=UPSTREAM,
        raises=AssertionError,
        doc="equal_size with n % k != 0 raises AssertionError (gone under `python -O`, where "
            "the block loop then reads past the sorted list: IndexError), not ValueError."),
    KnownDivergence(
        "values_unchecked", bad_value, kind="errors", upstream=UPSTREAM,
        accepts=True,
        doc="negative, NaN/inf and bool values are accepted, in a list or a 1-D tensor (a bool "
            "tensor too); with negative values or NaN the state order is not total and the "
            "partition depends on heap internals. The contract raises ValueError (TypeError for "
            "bool)."),
    KnownDivergence(
        "values_tensor_unchecked", values_tensor_not_real_1d, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=RuntimeError,
        doc="a values tensor's rank and dtype are not checked: verl iterates it and compares "
            "its elements as tensors. A 2-D tensor of one column (each row a 1-element tensor) "
            "and a complex tensor of one value are accepted; more columns fail with "
            "RuntimeError ('Boolean value of Tensor with more than one value is ambiguous'), "
            "more complex values with NotImplementedError ('lt_cpu' not implemented for "
            "'ComplexFloat', a RuntimeError). The contract raises ValueError (not 1-D) or "
            "TypeError (complex)."),
    KnownDivergence(
        "bool_k_accepted", k_is_bool, kind="errors", upstream=UPSTREAM,
        accepts=True,
        doc="k=True is used as k=1; the contract raises TypeError for a bool k."),
)

# karmarkar_karp with a non-int k raises TypeError deep inside: the contract's type, so no
# divergence; get_seqlen_balanced_partitions asserts k <= n first
BALANCED_KNOWN = PARTITION_KNOWN + (
    KnownDivergence(
        "float_k_over_n_by_assert", float_k_over_n, kind="errors", upstream=UPSTREAM,
        raises=AssertionError,
        doc="a non-int k (e.g. 2.0) greater than the number of values fails the `k <= n` "
            "assert (AssertionError) before any type check; the contract raises TypeError "
            "naming k."),
)

KARMARKAR_KARP = register_adapter(Adapter(
    name="verl.karmarkar_karp",
    framework="verl",
    record="balance.karmarkar_karp",
    target=f"{SEQLEN}:karmarkar_karp",
    wrap=partitions_adapter,
    distribution="verl",
    versions="~=0.9.1",
    doc="largest differencing method with verl's tie-breaking, which the spec mirrors",
    forms=("lists", "tensor"),
    known=PARTITION_KNOWN,
))

BALANCED_PARTITIONS = register_adapter(Adapter(
    name="verl.balanced_partitions",
    framework="verl",
    record="balance.balanced_partitions",
    target=f"{SEQLEN}:get_seqlen_balanced_partitions",
    wrap=partitions_adapter,
    distribution="verl",
    versions="~=0.9.1",
    doc="karmarkar_karp with sorted, non-empty partitions",
    forms=("lists", "tensor"),
    known=BALANCED_KNOWN,
))


# --------------------------------------------------------------------------- micro-batches


def padded_batch(lengths) -> TensorDict:
    """Right-padded rows of `lengths` real tokens, as verl's actor holds them per rank:
    `attention_mask` and all-zero `input_ids`, (B, max(lengths)) int64."""
    lengths = [int(n) for n in lengths]
    width = max(lengths)
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])  # ints: int64
    return TensorDict({"input_ids": torch.zeros_like(mask), "attention_mask": mask},
                      batch_size=[len(lengths)])


def micro_batches_adapter(rearrange: Callable[..., Any]) -> Callable[..., list[list[int]]]:
    """Lengths -> a right-padded attention mask batch; verl's index lists are the micro-batches."""

    def micro_batches(lengths, max_tokens, *, min_count=None, count_multiple=None, group_size=1):
        _, indices = rearrange(padded_batch(lengths), max_tokens, num_batches_divided_by=count_multiple,
                               min_num_micro_batch=min_count, force_group_size=group_size)
        return indices

    return micro_batches


def _lengths(call: Call) -> list:
    """lengths as plain values (a list, a tuple, a 1-D tensor's `tolist()`); [] otherwise."""
    lengths = call.arg("lengths")
    if isinstance(lengths, torch.Tensor) and lengths.dim() != 1:
        return []
    return Call.values(lengths) or []


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def expressible_as_mask(call: Call) -> bool:
    """verl takes an attention mask: at least one sample, integer lengths."""
    lengths = _lengths(call)
    return bool(lengths) and all(_int(n) for n in lengths)


def micro_checked_by_assert(call: Call) -> bool:
    lengths, budget = _lengths(call), call.arg("max_tokens")
    group = call.arg("group_size")
    longest = max((n for n in lengths if _int(n)), default=0)
    return (_int(budget) and budget < longest) or (
        _int(group) and group > 0 and len(lengths) % group != 0)


def micro_unchecked(call: Call) -> bool:
    budget, min_count = call.arg("max_tokens"), call.arg("min_count")
    return (any(_int(n) and n == 0 for n in _lengths(call))
            or (isinstance(min_count, (int, float)) and min_count == 0)
            or (_int(budget) and budget < 1))


def micro_budget_not_int(call: Call) -> bool:
    return isinstance(call.arg("max_tokens"), (float, bool))


MICRO_KNOWN = (
    KnownDivergence(
        "max_token_len_type_unchecked", micro_budget_not_int, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=AssertionError,
        doc="max_token_len is not type-checked: a float (8.0) or a bool (True is 1) is used as a "
            "number — accepted, or AssertionError when it is below the longest sample; the "
            "contract raises TypeError (a str or None fails verl's comparison with TypeError, "
            "as the contract does)."),
    KnownDivergence(
        "micro_batches_checked_by_assert", micro_checked_by_assert, kind="errors",
        upstream=UPSTREAM,
        raises=AssertionError,
        doc="a sample longer than max_token_len, or a batch size not divisible by "
            "force_group_size, raises AssertionError (gone under `python -O`), not ValueError."),
    KnownDivergence(
        "micro_batches_unchecked", micro_unchecked, kind="errors", upstream=UPSTREAM,
        accepts=True,
        doc="a 0-token sample, min_num_micro_batch=0 and max_token_len < 1 are not rejected."),
)

MICRO_BATCHES = register_adapter(Adapter(
    name="verl.micro_batches",
    framework="verl",
    record="balance.micro_batches",
    target=f"{SEQLEN}:rearrange_micro_batches",
    wrap=micro_batches_adapter,
    distribution="verl",
    versions="~=0.9.1",
    doc="dynamic-batch-size micro-batches against the contract's budget, cover, group and count "
        "properties",
    forms=("lists", "tensor"),
    supports=expressible_as_mask,
    known=MICRO_KNOWN,
    skip={"equivalence": "verl balances sum(l^2)-like workloads (calculate_workload), not token "
                         "sums, and reorders micro-batches to put small ones at both ends: only "
                         "the contract's properties apply",
          "property:composition": "a literal expectation of the contract's algorithm (the "
                                  "balanced partition of token sums, in the order it produced "
                                  "them): verl partitions calculate_workload and reorders the "
                                  "micro-batches, as for equivalence",
          "pin:verl_budget_only_count": "a literal expectation of the contract's algorithm",
          "pin:balanced_beats_first_fit": "a literal expectation of the contract's algorithm",
          "pin:groups_with_count_multiple": "a literal expectation of the contract's algorithm"},
))


# --------------------------------------------------------------------------- position ids


def position_ids_adapter(compute_position_id_with_mask: Callable[..., Any]) -> Callable[..., Any]:
    """The reference batch with its position_ids recomputed by verl from the attention mask."""

    def build_rl_batch(*args, **kwargs):
        from batchproof.reference.rl_batch import build_rl_batch as reference

        td = reference(*args, **kwargs)
        td["position_ids"] = compute_position_id_with_mask(td["attention_mask"])
        return td

    return build_rl_batch


def valid_input(call: Call) -> bool:
    """verl's function takes an attention mask, which only the reference can build from the
    contract's lists: an invalid input (a defect in the prompts, responses or per-token lists)
    is rejected by the reference before verl could be given anything, so it is outside the
    domain (the errors check is skipped for the same reason)."""
    return call.valid


POSITION_IDS = register_adapter(Adapter(
    name="verl.position_ids",
    framework="verl",
    record="rl_batch.build_rl_batch",
    target="verl.utils.model:compute_position_id_with_mask",
    wrap=position_ids_adapter,
    distribution="verl",
    versions="~=0.9.1",
    doc="verl's position ids (clip(cumsum(mask) - 1, 0)) against the contract's, both layouts",
    forms=None,
    supports=valid_input,
    compared=("position_ids",),  # every other output is the reference's
    skip={"errors": "only position_ids come from verl; validation is the reference's"},
))


# --------------------------------------------------------------------------- padding utilities
#
# verl.workers.utils.padding (verl 0.9.1) converts verl's two-segment batches (prompts left-padded
# to P, responses right-padded to R, sequence tensors (B, P+R)) to and from jagged tensors:
#
#     left_right_2_no_padding(data)     -> nesting.nest_by_mask, for the fields verl nests
#     no_padding_2_padding(tensor, data) -> nesting.extract_response

PADDING = "verl.workers.utils.padding"
PADDING_UPSTREAM = "verl/workers/utils/padding.py (verl 0.9.1)"
VERL_REQUIRED = ("input_ids", "attention_mask", "response_mask", "position_ids")
VERL_NESTED = ("input_ids", "position_ids", "routed_experts", "teacher_logprobs", "teacher_ids")
"""The fields left_right_2_no_padding nests, all by attention_mask (the contract's rule too)."""


def _is_batch(td: Any) -> bool:
    return isinstance(td, TensorDictBase) and td.batch_dims == 1


def _is_nested_batch(td: Any) -> bool:
    from batchproof.reference.nesting import STASH

    return _is_batch(td) and STASH in td.keys()


def _int64_offsets(value: torch.Tensor) -> torch.Tensor:
    """A jagged tensor on int64 offsets (verl builds input_ids on int32 cu_seqlens)."""
    if not value.is_nested or value.offsets().dtype == torch.int64:
        return value
    return torch.nested.nested_tensor_from_jagged(value.values(), offsets=value.offsets().long(),
                                                  jagged_dim=value._ragged_idx)  # noqa: SLF001


def no_padding_adapter(left_right_2_no_padding: Callable[..., Any]) -> Callable[..., Any]:
    """The reference's nested batch with verl's nested input_ids / position_ids (routed_experts,
    teacher_*) in place of its own; verl runs first, on a copy (it converts `data` in place).

    An input the contract rejects but verl accepts returns verl's own output (so the errors check
    sees the acceptance); an exception from verl propagates as it is."""

    def nest_by_mask(td, **kwargs):
        from batchproof.reference.nesting import DenseFieldError
        from batchproof.reference.nesting import nest_by_mask as reference

        data = td.clone() if isinstance(td, TensorDictBase) else td
        out = left_right_2_no_padding(data)
        try:
            contract = reference(td, **kwargs)
        except (ValueError, TypeError, DenseFieldError):
            return out
        for key in VERL_NESTED:
            if key in td.keys():
                contract.set(key, _int64_offsets(out.get(key)))
        return contract

    return nest_by_mask


def _td(call: Call) -> Any:
    return call.arg("td")


def _dense_tensor(td: Any, key: str) -> torch.Tensor | None:
    """td[key] when td is a batch holding it as a plain tensor with data (not a non-tensor
    entry, a sub-TensorDict, a jagged or a meta tensor), else None."""
    if not _is_batch(td) or key not in td.keys() or td.is_non_tensor(key):
        return None
    value = td.get(key)
    if not isinstance(value, torch.Tensor) or value.is_nested or value.is_meta:
        return None
    return value


def contract_keywords_valid(call: Call) -> bool:
    """The contract's keywords that verl does not have (`pad_token_id`, `rules`, `strict`,
    `ignore_dense`) hold values the contract accepts. An input whose defect is in one of them
    is about an argument verl cannot be given: outside its domain."""
    from batchproof.reference.nesting import merge_rules

    pad, strict, ignore = call.arg("pad_token_id"), call.arg("strict"), call.arg("ignore_dense")
    if pad is not None and not (isinstance(pad, numbers.Integral) and not isinstance(pad, bool)):
        return False
    if not isinstance(strict, bool):
        return False
    if not (isinstance(ignore, (list, tuple, set, frozenset))
            and all(isinstance(name, str) for name in ignore)):
        return False
    try:
        merge_rules(call.arg("rules"))
    except TypeError:
        return False
    return True


def verl_can_nest(call: Call) -> bool:
    """verl's domain: the contract's own keywords valid (`contract_keywords_valid`); a dense
    batch needs the four keys verl asserts (the contract needs neither response_mask nor
    position_ids), and no rule of the case may re-route a field verl nests."""
    if not contract_keywords_valid(call):
        return False
    td, rules = _td(call), call.arg("rules")
    if isinstance(rules, Mapping) and set(rules) & set(VERL_NESTED):
        return False
    if not _is_batch(td) or _is_nested_batch(td):
        return True  # invalid inputs: verl must reject them too
    return all(key in td.keys() for key in VERL_REQUIRED)


def mask_not_binary(call: Call) -> bool:
    td = _td(call)
    mask = None if _is_nested_batch(td) else _dense_tensor(td, "attention_mask")
    return mask is not None and bool(((mask != 0) & (mask != 1)).any())


def attention_mask_1d(call: Call) -> bool:
    """A dense batch (verl's four keys) whose attention_mask is (B,)."""
    td = _td(call)
    mask = None if _is_nested_batch(td) else _dense_tensor(td, "attention_mask")
    return (mask is not None and mask.dim() == 1
            and all(key in td.keys() for key in VERL_REQUIRED))


def defect_in_unread_fields(call: Call) -> bool:
    """An invalid dense batch holding verl's four keys that the contract accepts once reduced to
    the fields verl reads (those four and the ones it nests): its defect is in a field or
    entry verl never reads (prompts, responses, max_response_length, a key named like an
    encoding, a sub-TensorDict, an already jagged field)."""
    from batchproof.reference.nesting import nest_by_mask as reference

    td = _td(call)
    if (call.valid or not _is_batch(td) or _is_nested_batch(td)
            or not all(key in td.keys() for key in VERL_REQUIRED)):
        return False
    read = [key for key in dict.fromkeys(VERL_REQUIRED + VERL_NESTED) if key in td.keys()]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reference(td.select(*read), **call.kwargs)
    except Exception:  # noqa: BLE001 - the reduced batch is rejected too: a defect verl reads
        return False
    return True


def not_a_dense_batch(call: Call) -> bool:
    td = _td(call)
    return not _is_batch(td) or _is_nested_batch(td)


def _multi_axis_row_lengths(call: Call) -> list[int] | None:
    """Real tokens per row of a dense batch with (B, C, S) position_ids, else None."""
    td = _td(call)
    if _is_nested_batch(td):
        return None
    mask, positions = _dense_tensor(td, "attention_mask"), _dense_tensor(td, "position_ids")
    if mask is None or positions is None or mask.dim() != 2 or positions.dim() != 3:
        return None
    return (mask != 0).sum(1).tolist()


def multi_axis_unequal_rows(call: Call) -> bool:
    lengths = _multi_axis_row_lengths(call)
    return lengths is not None and len(set(lengths)) > 1


def multi_axis_equal_rows(call: Call) -> bool:
    """Every row has the same number n of real tokens, unless n equals the channel count C and
    every row's (C, n) block of real positions is symmetric: then verl's channel-ragged
    (B, j, n) layout holds the very values and offsets of the contract's (B, j, C)."""
    lengths = _multi_axis_row_lengths(call)
    if lengths is None or len(set(lengths)) != 1:
        return False
    td = _td(call)
    positions, mask = td.get("position_ids"), td.get("attention_mask") != 0
    if lengths[0] != positions.shape[1] or positions.shape[2] != mask.shape[1]:
        return True
    blocks = [positions[i][:, mask[i]] for i in range(positions.shape[0])]
    return not all(torch.equal(block, block.T) for block in blocks)


@st.composite
def bad_verl_batches(draw) -> BadCase:
    """The contract's invalid inputs that concern verl's arguments (its other invalid inputs are
    about the contract's keywords: pad_token_id, rules, strict, ignore_dense)."""
    from batchproof.ops.nesting import nest_quietly, verl_batches

    td, pad = draw(verl_batches())
    kind = draw(st.sampled_from(["not_binary", "not_td", "nested"]))
    if kind == "not_binary" and td["attention_mask"].shape[1] == 0:
        kind = "nested"
    if kind == "not_binary":
        row = draw(st.integers(0, td.batch_size[0] - 1))
        column = draw(st.integers(0, td["attention_mask"].shape[1] - 1))
        mask = td["attention_mask"].to(torch.int64).clone()
        mask[row, column] = draw(st.sampled_from([2, -1]))
        td["attention_mask"] = mask
        return BadCase(Case((td,), {"pad_token_id": pad}), ValueError, f"mask row {row} not 0/1")
    if kind == "not_td":
        return BadCase(Case((dict(td.items()),), {"pad_token_id": pad}), TypeError, "a dict")
    return BadCase(Case((nest_quietly(td, pad_token_id=pad),), {"pad_token_id": pad}),
                   ValueError, "already nested")


NO_PADDING_KNOWN = (
    KnownDivergence(
        "multi_axis_position_ids_channels_first", multi_axis_unequal_rows, kind="valid",
        upstream=PADDING_UPSTREAM,
        fields=("position_ids",),
        doc="(B, C, S) position_ids (multi-axis RoPE), rows of different lengths: nested row by "
            "row as (C, n_i), a (B, C, j) jagged tensor ragged on dim 2, where the contract "
            "nests them as (B, j, C) ragged on dim 1 like every other field (a layout "
            "convention: the values are right)."),
    KnownDivergence(
        "multi_axis_position_ids_ragged_on_channels", multi_axis_equal_rows, kind="valid",
        upstream=PADDING_UPSTREAM,
        fields=("position_ids",),
        doc="verl bug: (B, C, S) position_ids when every row has the same number n of real "
            "tokens (any batch of one row): torch.nested.as_nested_tensor(layout=torch.jagged) "
            "of equal-shape (C, n) rows makes the *channel* axis ragged: shape (B, j, n), "
            "offsets [0, C, 2C, ...], values (B*C, n) — a layout that depends on the data and "
            "whose offsets are not token offsets."),
    KnownDivergence(
        "mask_values_unchecked", mask_not_binary, kind="errors", upstream=PADDING_UPSTREAM,
        accepts=True, raises=RuntimeError,
        doc="verl bug: an attention_mask holding 2 or -1 is accepted and gives a corrupt "
            "jagged input_ids: unpad_input takes its offsets from mask.sum() but gathers with "
            "nonzero() ([1, 2, 1, 0] -> offsets [0, 4] over 3 values), while position_ids "
            "(mask.bool()) get 3; torch fails only at first use (unbind, to_padded_tensor) with "
            "an unnamed RuntimeError. The contract raises ValueError naming the row."),
    KnownDivergence(
        "unread_fields_unchecked", defect_in_unread_fields, kind="errors",
        upstream=PADDING_UPSTREAM,
        accepts=True,
        doc="contract difference: verl reads input_ids, attention_mask, response_mask and "
            "position_ids (and routed_experts, teacher_*) only, so a batch whose defect lies "
            "elsewhere is accepted: prompts wider than the attention or not 2-D, a "
            "max_response_length that is a tensor, not an int, negative or wider than the "
            "attention, a key named like a mask's encoding (attention_mask_offsets), a "
            "sub-TensorDict, an already jagged field. The contract checks the whole batch "
            "(ValueError / TypeError)."),
    KnownDivergence(
        "attention_mask_1d_fails", attention_mask_1d, kind="errors", upstream=PADDING_UPSTREAM,
        raises=RuntimeError,
        doc="a (B,) attention_mask is not checked: unpad_input's F.pad of the 0-d cumsum fails "
            "with RuntimeError ('Padding length should be less than or equal to two times the "
            "input dimension'); the contract raises ValueError naming the mask's shape."),
    KnownDivergence(
        "input_checked_by_assert", not_a_dense_batch, kind="errors", upstream=PADDING_UPSTREAM,
        raises=AssertionError,
        doc="a non-TensorDict or an already nested batch (no dense attention_mask) fails "
            "verl's `assert` (AssertionError, gone under `python -O`), not ValueError/TypeError."),
)

LEFT_RIGHT_2_NO_PADDING = register_adapter(Adapter(
    name="verl.left_right_2_no_padding",
    framework="verl",
    record="nesting.nest_by_mask",
    target=f"{PADDING}:left_right_2_no_padding",
    wrap=no_padding_adapter,
    distribution="verl",
    versions="~=0.9.1",
    doc="verl's nested input_ids / position_ids / routed_experts (by attention_mask) against the "
        "contract's; every other key is the reference's. verl's int32 cu_seqlens offsets are "
        "re-wrapped on int64 (values and row lengths are verl's)",
    forms=None,
    supports=verl_can_nest,
    compared=VERL_NESTED,  # every other output is the reference's
    invalid=bad_verl_batches(),
    known=NO_PADDING_KNOWN,
    skip={"property:shared_offsets":
          "verl builds input_ids on cu_seqlens and position_ids with as_nested_tensor: two "
          "different ragged dims on every input (docs/frameworks.md)",
          "pin:wrong_mask_registration": "about the contract's rules keyword (verl has none)",
          "pin:pad_token_id_missing": "about the contract's pad_token_id keyword (verl has none)"},
))


# --------------------------------------------------------------------------- no_padding_2_padding


def padding_adapter(no_padding_2_padding: Callable[..., Any]) -> Callable[..., Any]:
    """extract_response(td, output) -> no_padding_2_padding(output, td). A nested batch carries
    R in its stash; it is handed to verl as its non-tensor `max_response_len` (the key verl's own
    left_right_2_no_padding sets), on a shallow copy."""

    def extract_response(td, output):
        from batchproof.reference.nesting import stash_of

        data = td
        if _is_nested_batch(td):
            data = td.copy()
            data.set_non_tensor("max_response_len", stash_of(td)["max_response_length"])
        return no_padding_2_padding(output, data)

    return extract_response


def _segment_lengths(td: Any) -> tuple[list[int], list[int], int, int] | None:
    """(p_i, r_i, the contract's R, the width of the response columns), or None when the
    batch does not give them (not a batch, no attention_mask, no widths)."""
    from batchproof.reference import nesting as ref

    try:
        nested = _is_nested_batch(td)
        dense = ref.unnest_by_mask(td) if nested else td
        if nested:
            stash = ref.stash_of(td)
            prompt_width, response_width = stash["max_prompt_length"], stash["max_response_length"]
        else:
            prompt_width, response_width = ref.batch_widths(dense)
        attention = _dense_tensor(dense, "attention_mask")
        if attention is None or attention.dim() != 2 or None in (prompt_width, response_width):
            return None
        attention = attention.to(torch.int64)
        prompts = attention[:, :prompt_width].sum(1).tolist()
        responses = attention[:, prompt_width:].sum(1).tolist()
        return prompts, responses, response_width, attention.shape[1] - prompt_width
    except Exception:  # noqa: BLE001 - an input the predicates cannot read: none applies
        return None


def _output(call: Call) -> Any:
    return call.arg("output")


def verl_can_extract(call: Call) -> bool:
    """verl reads prompts and responses (dense: R is the width of responses, it never reads a
    non-tensor max_response_length; nested: R is handed over as max_response_len)."""
    td = _td(call)
    if not _is_batch(td) or not {"prompts", "responses"} <= set(td.keys()):
        return False
    lengths = _segment_lengths(td)
    if lengths is None:
        return True  # a batch the contract rejects
    _, responses, response_width, columns = lengths
    if response_width == columns:
        return True
    # the only R != width inputs in the domain: nested, a response longer than R (invalid)
    return _is_nested_batch(td) and max(responses, default=0) > response_width


def empty_prompt(call: Call) -> bool:
    lengths = _segment_lengths(_td(call))
    return lengths is not None and 0 in lengths[0]


def float_attention_mask(call: Call) -> bool:
    """A floating-point attention_mask, in the batch or (nested) in the dense form it stashes
    (the contract's nested_equals_dense property runs verl on both forms)."""
    from batchproof.reference.nesting import stash_of

    td = _td(call)
    if _is_nested_batch(td):
        try:
            dtype = stash_of(td)["masks"]["attention_mask"]["dtype"]
        except Exception:  # noqa: BLE001 - a stash without a readable attention_mask entry
            return False
        return isinstance(dtype, torch.dtype) and dtype.is_floating_point
    mask = _dense_tensor(td, "attention_mask")
    return mask is not None and mask.is_floating_point()


def no_attention_mask(call: Call) -> bool:
    """A dense batch (prompts not jagged) without attention_mask, with a tensor output: verl
    reads `data["attention_mask"]`."""
    td = _td(call)
    return (_is_batch(td) and not _is_nested_batch(td) and "attention_mask" not in td.keys()
            and _dense_tensor(td, "prompts") is not None
            and isinstance(_output(call), torch.Tensor))


def output_not_a_tensor(call: Call) -> bool:
    return len(call.args) > 1 and not isinstance(_output(call), torch.Tensor)


def strided_output(call: Call) -> bool:
    """A strided (not jagged) nested output, except with a dense batch's floating-point
    attention_mask, where verl's slice raises TypeError first (the contract's type)."""
    output, td = _output(call), _td(call)
    mask = None if _is_nested_batch(td) else _dense_tensor(td, "attention_mask")
    return (isinstance(output, torch.Tensor) and output.is_nested
            and output.layout == torch.strided
            and not (mask is not None and mask.is_floating_point()))


def output_rows_mismatch(call: Call) -> bool:
    """The output's token count, or one of its jagged rows, differs from the batch's."""
    output = _output(call)
    if not isinstance(output, torch.Tensor) or output.is_meta:
        return False
    lengths = _segment_lengths(_td(call))
    if lengths is None:
        return False
    totals = [p + r for p, r in zip(lengths[0], lengths[1])]
    if output.is_nested:
        if output.layout != torch.jagged:
            return False
        return output.offsets().diff().tolist() != totals
    return output.dim() < 1 or output.shape[0] != sum(totals)


def response_beyond_max_response_len(call: Call) -> bool:
    td = _td(call)
    lengths = _segment_lengths(td)
    return (lengths is not None and _is_nested_batch(td)
            and max(lengths[1], default=0) > lengths[2])


NO_PADDING_2_PADDING_KNOWN = (
    KnownDivergence(
        "empty_prompt_by_assert", empty_prompt, kind="both", upstream=PADDING_UPSTREAM,
        raises=AssertionError,
        doc="any row with an empty prompt fails `assert not prompt_lens.eq(0).any()` "
            "(AssertionError): also an empty row (p = r = 0), for which the contract returns a "
            "zero row; for p = 0 < r the contract raises ValueError."),
    KnownDivergence(
        "float_attention_mask_fails", float_attention_mask, kind="valid",
        upstream=PADDING_UPSTREAM,
        raises=TypeError,
        doc="a floating-point attention_mask (dense batch, or the dense form of a nested one) "
            "makes prompt_lens float and the slice "
            "`values[seq_offset - resp_len - 1 : ...]` fails with TypeError ('only integer "
            "tensors of a single element can be converted to an index')."),
    KnownDivergence(
        "output_size_checked_by_assert", output_rows_mismatch, kind="errors",
        upstream=PADDING_UPSTREAM,
        raises=AssertionError, accepts=True,
        doc="an output whose token count is not the batch's fails `assert sequence_offsets[-1] "
            "== values.shape[0]` (AssertionError); a jagged output's own row lengths are never "
            "read (only .values()), so rows of the wrong lengths with the right total pass."),
    KnownDivergence(
        "attention_mask_read_by_key", no_attention_mask, kind="errors",
        upstream=PADDING_UPSTREAM,
        raises=KeyError,
        doc="a dense batch without attention_mask fails at `data[\"attention_mask\"]` with "
            "tensordict's KeyError; the contract raises ValueError ('td has no "
            "attention_mask')."),
    KnownDivergence(
        "strided_output_unchecked", strided_output, kind="errors", upstream=PADDING_UPSTREAM,
        accepts=True, raises=AssertionError,
        doc="a strided nested output is not rejected: `tensor.values()` of a strided nested "
            "tensor is its flat buffer, so rows of single values are read as the jagged "
            "output's values (accepted, the same result), and rows with trailing dims (t, F) "
            "give a buffer of F * nnz values that fails `assert sequence_offsets[-1] == "
            "values.shape[0]` (AssertionError). The contract raises TypeError (only jagged or "
            "flat outputs)."),
    KnownDivergence(
        "output_type_unchecked", output_not_a_tensor, kind="errors", upstream=PADDING_UPSTREAM,
        raises=AttributeError,
        doc="an output that is not a tensor fails with AttributeError ('list' object has no "
            "attribute 'is_nested'), not TypeError."),
    KnownDivergence(
        "truncates_beyond_max_response_len", response_beyond_max_response_len, kind="errors",
        upstream=PADDING_UPSTREAM,
        accepts=True,
        doc="nested path: a response longer than max_response_len is truncated silently "
            "(F.pad with a negative pad crops); the contract raises ValueError."),
)

NO_PADDING_2_PADDING = register_adapter(Adapter(
    name="verl.no_padding_2_padding",
    framework="verl",
    record="nesting.extract_response",
    target=f"{PADDING}:no_padding_2_padding",
    wrap=padding_adapter,
    distribution="verl",
    versions="~=0.9.1",
    doc="model output over the real tokens -> (B, R, ...) response tensor, dense and nested "
        "batches, flat and jagged outputs",
    forms=None,
    supports=verl_can_extract,
    known=NO_PADDING_2_PADDING_KNOWN,
))

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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict

from harness.adapters import Adapter, KnownDivergence, register_adapter
from harness.registry import Case

UPSTREAM = "verl/utils/seqlen_balancing.py (verl 0.9.1)"
SEQLEN = "verl.utils.seqlen_balancing"


# --------------------------------------------------------------------------- partitions


def partitions_adapter(verl_function: Callable[..., Any]) -> Callable[..., list[list[int]]]:
    def partitions(values, k, *, equal_size=False):
        return verl_function(seqlen_list=values, k_partitions=k, equal_size=equal_size)

    return partitions


def _values(case: Case) -> list | None:
    values = case.args[0]
    return list(values) if isinstance(values, (list, tuple)) else None


def _k(case: Case) -> Any:
    return case.args[1]


def k_out_of_range(case: Case) -> bool:
    k, values = _k(case), _values(case)
    return (values is not None and isinstance(k, int) and not isinstance(k, bool)
            and not 1 <= k <= len(values))


def equal_size_not_divisible(case: Case) -> bool:
    k = _k(case)
    values = _values(case)
    return (bool(case.kwargs.get("equal_size")) and values is not None and isinstance(k, int)
            and k > 0 and len(values) % k != 0)


def bad_value(case: Case) -> bool:
    """A negative, non-finite or bool value."""
    return any(isinstance(v, bool) or (isinstance(v, (int, float)) and not (
        math.isfinite(v) and v >= 0)) for v in _values(case) or [])


def k_is_bool(case: Case) -> bool:
    return isinstance(_k(case), bool)


def k_not_an_int(case: Case) -> bool:
    return not isinstance(_k(case), int)


PARTITION_KNOWN = (
    KnownDivergence(
        "k_unchecked", k_out_of_range, kind="errors", upstream=UPSTREAM,
        doc="karmarkar_karp accepts k > n and returns empty partitions; k < 1 fails with "
            "AssertionError or returns []; get_seqlen_balanced_partitions rejects k > n with "
            "AssertionError. The contract raises ValueError."),
    KnownDivergence(
        "equal_size_checked_by_assert", equal_size_not_divisible, kind="errors",
        upstream=UPSTREAM,
        doc="equal_size with n % k != 0 raises AssertionError (gone under `python -O`, where "
            "the block loop then reads past the sorted list: IndexError), not ValueError."),
    KnownDivergence(
        "values_unchecked", bad_value, kind="errors", upstream=UPSTREAM,
        doc="negative, NaN/inf and bool values are accepted; with negative values or NaN the "
            "state order is not total and the partition depends on heap internals. The contract "
            "raises ValueError (TypeError for bool)."),
    KnownDivergence(
        "bool_k_accepted", k_is_bool, kind="errors", upstream=UPSTREAM,
        doc="k=True is used as k=1; the contract raises TypeError for a bool k."),
    KnownDivergence(
        "k_type_unchecked", k_not_an_int, kind="errors", upstream=UPSTREAM,
        doc="a non-int k (e.g. 2.0) is not type-checked: get_seqlen_balanced_partitions fails "
            "its assert first when k > n, karmarkar_karp fails deep inside with an unnamed "
            "TypeError; the contract raises TypeError naming k."),
)

KARMARKAR_KARP = register_adapter(Adapter(
    name="verl.karmarkar_karp",
    framework="verl",
    record="balance.karmarkar_karp",
    target=f"{SEQLEN}:karmarkar_karp",
    wrap=partitions_adapter,
    distribution="verl",
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
    doc="karmarkar_karp with sorted, non-empty partitions",
    forms=("lists", "tensor"),
    known=PARTITION_KNOWN,
))


# --------------------------------------------------------------------------- micro-batches


def micro_batches_adapter(rearrange: Callable[..., Any]) -> Callable[..., list[list[int]]]:
    """Lengths -> a right-padded attention mask batch; verl's index lists are the micro-batches."""

    def micro_batches(lengths, max_tokens, *, min_count=None, count_multiple=None, group_size=1):
        lengths = [int(n) for n in lengths]
        width = max(lengths)
        mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths], dtype=torch.int64)
        batch = TensorDict({"input_ids": torch.zeros_like(mask), "attention_mask": mask},
                           batch_size=[len(lengths)])
        _, indices = rearrange(batch, max_tokens, num_batches_divided_by=count_multiple,
                               min_num_micro_batch=min_count, force_group_size=group_size)
        return indices

    return micro_batches


def _lengths(case: Case) -> list:
    lengths = case.args[0]
    return list(lengths) if isinstance(lengths, (list, tuple, torch.Tensor)) else []


def expressible_as_mask(case: Case) -> bool:
    """verl takes an attention mask: at least one sample, integer lengths."""
    lengths = _lengths(case)
    return bool(lengths) and all(isinstance(n, int) and not isinstance(n, bool) for n in lengths)


def micro_checked_by_assert(case: Case) -> bool:
    lengths, budget = _lengths(case), case.args[1]
    group = case.kwargs.get("group_size", 1)
    return (isinstance(budget, int) and budget < max(lengths, default=0)) or (
        isinstance(group, int) and group > 0 and len(lengths) % group != 0)


def micro_unchecked(case: Case) -> bool:
    budget = case.args[1]
    return (0 in _lengths(case) or case.kwargs.get("min_count") == 0
            or (isinstance(budget, int) and budget < 1))


MICRO_KNOWN = (
    KnownDivergence(
        "micro_batches_checked_by_assert", micro_checked_by_assert, kind="errors",
        upstream=UPSTREAM,
        doc="a sample longer than max_token_len, or a batch size not divisible by "
            "force_group_size, raises AssertionError (gone under `python -O`), not ValueError."),
    KnownDivergence(
        "micro_batches_unchecked", micro_unchecked, kind="errors", upstream=UPSTREAM,
        doc="a 0-token sample, min_num_micro_batch=0 and max_token_len < 1 are not rejected."),
)

MICRO_BATCHES = register_adapter(Adapter(
    name="verl.micro_batches",
    framework="verl",
    record="balance.micro_batches",
    target=f"{SEQLEN}:rearrange_micro_batches",
    wrap=micro_batches_adapter,
    distribution="verl",
    doc="dynamic-batch-size micro-batches against the contract's budget, cover, group and count "
        "properties",
    forms=("lists", "tensor"),
    supports=expressible_as_mask,
    known=MICRO_KNOWN,
    skip={"equivalence": "verl balances sum(l^2)-like workloads (calculate_workload), not token "
                         "sums, and reorders micro-batches to put small ones at both ends: only "
                         "the contract's properties apply",
          "pin:verl_budget_only_count": "a literal expectation of the contract's algorithm",
          "pin:balanced_beats_first_fit": "a literal expectation of the contract's algorithm",
          "pin:groups_with_count_multiple": "a literal expectation of the contract's algorithm"},
))


# --------------------------------------------------------------------------- position ids


def position_ids_adapter(compute_position_id_with_mask: Callable[..., Any]) -> Callable[..., Any]:
    """The reference batch with its position_ids recomputed by verl from the attention mask."""

    def build_rl_batch(*args, **kwargs):
        from reference.rl_batch import build_rl_batch as reference

        td = reference(*args, **kwargs)
        td["position_ids"] = compute_position_id_with_mask(td["attention_mask"])
        return td

    return build_rl_batch


POSITION_IDS = register_adapter(Adapter(
    name="verl.position_ids",
    framework="verl",
    record="rl_batch.build_rl_batch",
    target="verl.utils.model:compute_position_id_with_mask",
    wrap=position_ids_adapter,
    distribution="verl",
    doc="verl's position ids (clip(cumsum(mask) - 1, 0)) against the contract's, both layouts",
    forms=None,
    skip={"errors": "only position_ids come from verl; validation is the reference's"},
))

"""Bug-zoo entries for `balance`: partition tie-breaking, token budgets, sequence-parallel padding.

The Karmarkar–Karp variants share one small, readable copy of the algorithm (`_kk`) with one knob
turned each; the other entries wrap the correct `impl` function and damage its result the way
the real bug did.
"""

from __future__ import annotations

import heapq

import torch

from batchproof.impl import balance as _impl
from batchproof.mutation.zoo import ZooEntry
from batchproof.mutation.zoo.sft import _ffd_variant
from batchproof.reference import balance as _reference

# the correct functions, bound before any entry is planted (planting replaces module attributes)
_kk_ok = _impl.karmarkar_karp
_partitions_ok = _impl.balanced_partitions
_micro_ok = _impl.micro_batches
_restore_ok = _impl.restore_order
_sp_ok = _impl.pad_for_sequence_parallel
_ulysses_ok = _impl.ulysses_pad
_oracle_micro_ok = _reference.micro_batches


def _kk(values, k, *, equal_size=False, pair=None, tie=1, count=1):
    """Largest differencing with knobs: `pair(i)` picks B's set for A's i-th set (correct:
    k-1-i), `tie` orders equal values by index (+1 correct, -1 reversed), `count` orders sets of
    equal sums by item count (+1 correct: more items first, -1: fewer items first)."""
    values = list(values.tolist() if isinstance(values, torch.Tensor) else values)
    if k < 1 or k > len(values) or (equal_size and len(values) % k):
        return _kk_ok(values, k, equal_size=equal_size)  # the real errors
    pair = pair or (lambda i: k - 1 - i)
    items = sorted(((v, i) for i, v in enumerate(values)), key=lambda vi: (vi[0], tie * vi[1]))

    def state(sets):
        sets = sorted(sets, key=lambda s: (s[0], count * len(s[1]), s[1]), reverse=True)
        top = sets[0]
        return (-(top[0] - sets[-1][0]), [-top[0], -count * len(top[1])],
                [(-i, -v) for i, v in top[1]], sorted(i for st in sets for i, _ in st[1]), sets)

    if equal_size:
        heap = [state([(v, [(i, v)]) for v, i in items[s:s + k]])
                for s in range(0, len(items), k)]
    else:
        heap = [state([(v, [(i, v)])] + [(0, [])] * (k - 1)) for v, i in items]
    heapq.heapify(heap)
    while len(heap) > 1:
        a, b = heapq.heappop(heap)[-1], heapq.heappop(heap)[-1]
        heapq.heappush(heap, state([(a[i][0] + b[pair(i)][0], a[i][1] + b[pair(i)][1])
                                    for i in range(k)]))
    return [[i for i, _ in s[1]] for s in heap[0][-1]]


def _largest_with_largest(values, k, *, equal_size=False):
    return _kk(values, k, equal_size=equal_size, pair=lambda i: i)


def _ties_reversed(values, k, *, equal_size=False):
    return _kk(values, k, equal_size=equal_size, tie=-1)


def _fewer_items_first(values, k, *, equal_size=False):
    _kk_ok(values, k, equal_size=equal_size)  # the real errors
    return _kk(values, k, equal_size=equal_size, count=-1)


def _oracle_ties_reversed(values, k, *, equal_size=False):
    _kk_ok(values, k, equal_size=equal_size)  # the real errors
    return _ties_reversed(values, k, equal_size=equal_size)


def _drops_largest(values, k, *, equal_size=False):
    """The largest value (last in the sorted items) is never placed."""
    partitions = _kk_ok(values, k, equal_size=equal_size)
    values = list(values.tolist() if isinstance(values, torch.Tensor) else values)
    largest = max(range(len(values)), key=lambda i: (values[i], i))
    return [[i for i in p if i != largest] for p in partitions]


def _ascending_sets(values, k, *, equal_size=False):
    return _kk_ok(values, k, equal_size=equal_size)[::-1]


def _equal_size_ignored(values, k, *, equal_size=False):
    return _kk_ok(values, k)


def _greedy_partition(values, k, *, equal_size=False):
    """verl `greedy_partition`: ascending values, each to the partition with the smallest sum
    (the first one on ties) — every zero lands in partition 0."""
    values = list(values.tolist() if isinstance(values, torch.Tensor) else values)
    if k < 1 or k > len(values) or equal_size:
        return _partitions_ok(values, k, equal_size=equal_size)
    partitions, sums = [[] for _ in range(k)], [0] * k
    for index, value in sorted(enumerate(values), key=lambda iv: iv[1]):
        target = sums.index(min(sums))
        partitions[target].append(index)
        sums[target] += value
    return [sorted(p) for p in partitions]


def _partitions_unsorted(values, k, *, equal_size=False):
    _partitions_ok(values, k, equal_size=equal_size)  # the real errors
    return _kk_ok(values, k, equal_size=equal_size)


def _partitions_by_first_index(values, k, *, equal_size=False):
    """Partitions ordered by their smallest index instead of karmarkar_karp's set order."""
    return sorted(_partitions_ok(values, k, equal_size=equal_size), key=lambda p: p[0])


def _int_list(lengths) -> list[int]:
    """Validated lengths (a list, numpy ints included, or a 1-D tensor) as Python ints."""
    return [int(v) for v in (lengths.tolist() if isinstance(lengths, torch.Tensor) else lengths)]


def _budget_only_chooses_count(lengths, max_tokens, *, min_count=None, count_multiple=None,
                               group_size=1):
    """verl `rearrange_micro_batches`: the budget picks the count, balancing decides the rest."""
    batches = _micro_ok(lengths, max_tokens, min_count=min_count,
                        count_multiple=count_multiple, group_size=group_size)  # the real errors
    lengths = _int_list(lengths)
    sums = [sum(lengths[i:i + group_size]) for i in range(0, len(lengths), group_size)]
    step = count_multiple or 1
    count = -(-max(-(-sum(sums) // max_tokens), min_count or 1) // step) * step
    if count > len(sums):
        return batches
    return [sorted(s for g in p for s in range(g * group_size, (g + 1) * group_size))
            for p in _partitions_ok(sums, count)]


def _oracle_budget_only_chooses_count(lengths, max_tokens, **kwargs):
    _oracle_micro_ok(lengths, max_tokens, **kwargs)  # the real errors
    return _budget_only_chooses_count(lengths, max_tokens, **kwargs)


def _first_fit_only(lengths, max_tokens, *, min_count=None, count_multiple=None, group_size=1):
    """Always the first-fit-decreasing bins: valid, but never the balanced fewest count."""
    from batchproof.impl.sft import ffd_bins

    _micro_ok(lengths, max_tokens, min_count=min_count, count_multiple=count_multiple,
              group_size=group_size)
    lengths = _int_list(lengths)
    sums = [sum(lengths[i:i + group_size]) for i in range(0, len(lengths), group_size)]
    bins = ffd_bins(sums, max_tokens, min_bins=min_count or 1, bin_multiple=count_multiple or 1)
    return [sorted(s for g in b for s in range(g * group_size, (g + 1) * group_size))
            for b in bins]


def _micro(lengths, max_tokens, *, min_count=None, count_multiple=None, group_size=1,
           balance_by="tokens", donor="count", order="contract"):
    """The contract's micro_batches with one rule swapped: `balance_by` "samples" balances the
    group count per micro-batch instead of its tokens, `donor` "tokens" splits the bin holding
    the most tokens (not the most items) when the count must grow, `order` "first_index" sorts
    the micro-batches by their first sample."""
    _micro_ok(lengths, max_tokens, min_count=min_count, count_multiple=count_multiple,
              group_size=group_size)  # the real errors
    lengths = _int_list(lengths)
    sums = [sum(lengths[i:i + group_size]) for i in range(0, len(lengths), group_size)]
    step = count_multiple or 1
    count = -(-max(-(-sum(sums) // max_tokens), min_count or 1) // step) * step
    chosen = fallback = _ffd_variant(sums, max_tokens, min_bins=min_count or 1,
                                     bin_multiple=step, donor=donor)
    while count < len(fallback):
        weights = sums if balance_by == "tokens" else [1] * len(sums)
        partitions = _partitions_ok(weights, count)
        if all(sum(sums[g] for g in p) <= max_tokens for p in partitions):
            chosen = partitions
            break
        count += step
    out = [sorted(s for g in p for s in range(g * group_size, (g + 1) * group_size))
           for p in chosen]
    return sorted(out, key=lambda b: b[0]) if order == "first_index" else out


def _balanced_by_sample_count(lengths, max_tokens, **kwargs):
    return _micro(lengths, max_tokens, balance_by="samples", **kwargs)


def _split_heaviest_bin(lengths, max_tokens, **kwargs):
    return _micro(lengths, max_tokens, donor="tokens", **kwargs)


def _micro_batches_by_first_index(lengths, max_tokens, **kwargs):
    return _micro(lengths, max_tokens, order="first_index", **kwargs)


def _budget_exclusive(lengths, max_tokens, **kwargs):
    """The budget read as an exclusive bound: every micro-batch holds fewer than max_tokens."""
    _micro_ok(lengths, max_tokens, **kwargs)  # the real errors
    return _micro_ok(lengths, max_tokens - 1, **kwargs)


def _groups_split(lengths, max_tokens, *, group_size=1, **kwargs):
    """group_size dropped after validation: samples of one group land in different batches."""
    _micro_ok(lengths, max_tokens, group_size=group_size, **kwargs)
    return _micro_ok(lengths, max_tokens, **kwargs)


def _unsorted_micro_batches(lengths, max_tokens, **kwargs):
    """Micro-batches in the partitioner's insertion order (descending lengths), not ascending."""
    lengths_list = _int_list(lengths)
    return [sorted(b, key=lambda i: (-lengths_list[i], i))
            for b in _micro_ok(lengths, max_tokens, **kwargs)]


def _count_constraints_ignored(lengths, max_tokens, *, min_count=None, count_multiple=None,
                               group_size=1):
    _micro_ok(lengths, max_tokens, min_count=min_count, count_multiple=count_multiple,
              group_size=group_size)
    return _micro_ok(lengths, max_tokens, group_size=group_size)


def _index_by_value(lengths, max_tokens, **kwargs):
    """Samples mapped back through `lengths.index(length)`: tied lengths collapse onto one index."""
    lengths_list = _int_list(lengths)
    return [sorted(lengths_list.index(lengths_list[i]) for i in b)
            for b in _micro_ok(lengths, max_tokens, **kwargs)]


def _restore_forward(outputs, micro_batches):
    """Gathers with the permutation itself instead of its inverse."""
    _restore_ok(outputs, micro_batches)  # the real errors
    rows = torch.cat(list(outputs)) if isinstance(outputs, (list, tuple)) else outputs
    order = [i for b in micro_batches for i in b]
    return rows[torch.tensor(order, dtype=torch.int64, device=rows.device)]


def _sp_minus_remainder(length, sp_size):
    _ulysses_ok(length, sp_size)  # the real errors
    return sp_size - length % sp_size


def _padded_length(length, sp_size):
    """The padded length N + pad instead of the pad count."""
    return length + _ulysses_ok(length, sp_size)


def _with_tail(packed, sp_size, *, pad, positions=None, left=False):
    """A hand-padded row: `pad` zeros, positions as given (default 0..pad-1)."""
    ids, pos = packed.get("input_ids"), packed.get("position_ids")
    tail_ids = torch.zeros((1, pad), dtype=ids.dtype, device=ids.device)
    if positions is None:
        positions = torch.arange(pad, dtype=pos.dtype, device=pos.device).unsqueeze(0)
    out = packed.clone(recurse=False)
    out.set("input_ids", torch.cat([tail_ids, ids] if left else [ids, tail_ids], dim=1))
    out.set("position_ids", torch.cat([positions, pos] if left else [pos, positions], dim=1))
    cu = packed.get("cu_seqlens")
    end = torch.tensor([ids.shape[1] + pad], dtype=cu.dtype, device=cu.device)
    out.set("cu_seqlens", torch.cat([cu, end]))
    out.set_non_tensor("max_seqlen", max(packed.get_non_tensor("max_seqlen"), pad))
    return out


def _pad_positions_continue(packed, sp_size):
    """The pad continues the last sample's positions: flash-attn sees one longer sample."""
    out = _sp_ok(packed, sp_size)
    pad = out.get("input_ids").shape[1] - packed.get("input_ids").shape[1]
    if pad == 0:
        return out
    last = packed.get("position_ids")[:, -1:]
    positions = last + torch.arange(1, pad + 1, device=last.device).unsqueeze(0)
    return _with_tail(packed, sp_size, pad=pad, positions=positions)


def _boundary_without_pad(packed, sp_size):
    """A boundary appended even when pad == 0: a zero-length segment that breaks kernels."""
    out = _sp_ok(packed, sp_size)
    return out if out is not packed else _with_tail(packed, sp_size, pad=0)


def _pad_on_left(packed, sp_size):
    out = _sp_ok(packed, sp_size)
    pad = out.get("input_ids").shape[1] - packed.get("input_ids").shape[1]
    return out if pad == 0 else _with_tail(packed, sp_size, pad=pad, left=True)


def _max_seqlen_stale(packed, sp_size):
    out = _sp_ok(packed, sp_size)
    if out is not packed:
        out.set_non_tensor("max_seqlen", packed.get_non_tensor("max_seqlen"))
    return out


def _pad_a_full_chunk(packed, sp_size):
    """`sp - N % sp` pad tokens: a whole extra chunk when N is already a multiple."""
    out = _sp_ok(packed, sp_size)
    if out is not packed:
        return out
    return _with_tail(packed, sp_size, pad=sp_size)


def _entry(name, function, bug, killers, replacement, reference="", oracle=False) -> ZooEntry:
    return ZooEntry(name=f"balance.{name}", op="balance", function=function, bug=bug,
                    killers=tuple(killers), replacement=replacement, reference=reference,
                    oracle=oracle)


ENTRIES = [
    _entry("kk_largest_with_largest", "karmarkar_karp",
           "merging A's i-th set with B's i-th (largest with largest) instead of B's (k-1-i)-th",
           ("property:spread_bound", "pin:spec_example_1_to_8", "equivalence"),
           _largest_with_largest),
    _entry("kk_ties_reversed", "karmarkar_karp",
           "equal values ordered by descending index: equally good, different lists",
           ("pin:spec_example_100_and_ones_equal", "equivalence"), _ties_reversed,
           "verl seqlen_balancing sorts (value, index) ascending"),
    _entry("kk_drops_largest", "karmarkar_karp",
           "off by one in the item loop: the largest value is never placed",
           ("property:partition", "property:largest_sum_bound", "equivalence"), _drops_largest),
    _entry("kk_ascending_sets", "karmarkar_karp",
           "the final sets returned smallest first", ("property:descending", "equivalence"),
           _ascending_sets),
    _entry("kk_equal_size_ignored", "karmarkar_karp",
           "equal_size accepted and ignored: partitions of unequal sizes",
           ("property:equal_size", "balance.balanced_partitions/property:equal_size"),
           _equal_size_ignored),
    _entry("greedy_partition_empty_on_zeros", "balanced_partitions",
           "greedy argmin-of-sums partitioning: zeros all go to partition 0, others stay empty",
           ("property:partition", "pin:greedy_empty_on_zeros", "equivalence"),
           _greedy_partition, "verl seqlen_balancing.greedy_partition"),
    _entry("partitions_unsorted", "balanced_partitions",
           "partition indices left in insertion order", ("property:sorted_indices",),
           _partitions_unsorted),
    _entry("budget_only_chooses_count", "micro_batches",
           "max_tokens only chooses the count; balanced partitions may exceed it (30 > 29)",
           ("property:budget", "pin:verl_budget_only_count", "equivalence"),
           _budget_only_chooses_count, "verl seqlen_balancing.rearrange_micro_batches"),
    _entry("oracle_budget_only_chooses_count", "micro_batches",
           "the budget bug in the oracle itself: only the property and the pin see it",
           ("property:budget", "pin:verl_budget_only_count"),
           _oracle_budget_only_chooses_count, "verl seqlen_balancing.rearrange_micro_batches",
           oracle=True),
    _entry("first_fit_only", "micro_batches",
           "first-fit-decreasing bins returned without trying balanced partitions first",
           ("pin:balanced_beats_first_fit", "equivalence"), _first_fit_only),
    _entry("groups_split", "micro_batches",
           "group_size validated, then ignored: a prompt's samples land in different batches",
           ("property:groups",), _groups_split),
    _entry("unsorted_micro_batches", "micro_batches",
           "indices inside a micro-batch in descending-length order", ("property:ascending",),
           _unsorted_micro_batches),
    _entry("count_constraints_ignored", "micro_batches",
           "min_count / count_multiple dropped: the count does not divide across ranks",
           ("property:count", "pin:groups_with_count_multiple"), _count_constraints_ignored),
    _entry("index_by_value", "micro_batches",
           "indices recovered with lengths.index(length): equal lengths collapse onto one sample",
           ("property:cover", "equivalence"), _index_by_value),
    _entry("restore_with_permutation", "restore_order",
           "outputs gathered with the permutation instead of its inverse",
           ("property:inverse", "equivalence"), _restore_forward),
    _entry("ulysses_pad_full_chunk", "ulysses_pad",
           "`sp - N % sp`: a whole chunk of pad when N is already a multiple",
           ("property:pad_range", "pin:divisible_length"), _sp_minus_remainder),
    _entry("sp_pad_a_full_chunk", "pad_for_sequence_parallel",
           "`sp - N % sp` pad tokens: N % sp == 0 gets sp more",
           ("property:length_multiple", "pin:divisible_needs_no_pad"), _pad_a_full_chunk),
    _entry("sp_pad_positions_continue", "pad_for_sequence_parallel",
           "pad positions continue the last sample: the pad joins that sample's segment",
           ("property:pad_segment", "equivalence"), _pad_positions_continue),
    _entry("sp_boundary_without_pad", "pad_for_sequence_parallel",
           "a cu_seqlens boundary appended although pad == 0: a zero-length segment",
           ("property:segments", "pin:divisible_needs_no_pad"), _boundary_without_pad),
    _entry("sp_pad_on_left", "pad_for_sequence_parallel",
           "the pad prepended: every chunk boundary and every real position shifts",
           ("property:chunk_roundtrip", "equivalence"), _pad_on_left),
    _entry("sp_max_seqlen_stale", "pad_for_sequence_parallel",
           "max_seqlen not raised for a pad segment longer than every sample",
           ("property:segments", "pin:pad_longer_than_samples"), _max_seqlen_stale),
    # spec choices (balance.md, "Spec choices"): the plausible other rule, planted in the
    # reference too, so only the properties and the literal pins can tell it from the contract
    _entry("oracle_kk_ties_reversed", "karmarkar_karp",
           "spec choice: equal values visited by descending index instead of ascending",
           ("pin:spec_example_100_and_ones_equal",), _oracle_ties_reversed, oracle=True),
    _entry("oracle_kk_fewer_items_first", "karmarkar_karp",
           "spec choice: of two sets with equal sums the one with fewer items ranks first "
           "(an empty set above a zero-valued one)",
           ("property:descending", "pin:zeros_and_ties"), _fewer_items_first, oracle=True),
    _entry("oracle_kk_ascending_sets", "karmarkar_karp",
           "spec choice: the result's sets smallest first instead of descending set order",
           ("property:descending", "pin:spec_example_1_to_8"), _ascending_sets, oracle=True),
    _entry("oracle_partitions_by_first_index", "balanced_partitions",
           "spec choice: partitions ordered by their smallest index instead of karmarkar_karp's "
           "descending set order", ("pin:greedy_empty_on_zeros", "property:descending"),
           _partitions_by_first_index, oracle=True),
    _entry("oracle_balanced_by_sample_count", "micro_batches",
           "spec choice: the balanced attempt evens out the number of samples per micro-batch "
           "instead of their tokens", ("pin:balanced_beats_first_fit", "property:composition"),
           _balanced_by_sample_count, oracle=True),
    _entry("oracle_first_fit_only", "micro_batches",
           "spec choice: first-fit-decreasing bins always, no balanced attempt at the fewest "
           "count", ("pin:balanced_beats_first_fit", "property:composition"), _first_fit_only,
           oracle=True),
    _entry("oracle_split_heaviest_bin", "micro_batches",
           "spec choice: when min_count / count_multiple raise the count, the bin holding the "
           "most tokens is split instead of the one holding the most items",
           ("pin:groups_with_count_multiple",), _split_heaviest_bin, oracle=True),
    _entry("oracle_micro_batches_by_first_index", "micro_batches",
           "spec choice: micro-batches sorted by their first sample instead of the order "
           "balanced_partitions / ffd_bins produced them",
           ("pin:verl_budget_only_count", "pin:balanced_beats_first_fit",
            "property:composition"), _micro_batches_by_first_index, oracle=True),
    _entry("oracle_budget_exclusive", "micro_batches",
           "spec choice: max_tokens as an exclusive bound (< instead of <=): a micro-batch of "
           "exactly max_tokens tokens is not allowed", ("pin:balanced_beats_first_fit",),
           _budget_exclusive, oracle=True),
    _entry("oracle_ulysses_padded_length", "ulysses_pad",
           "spec choice: the padded length N + pad returned instead of the pad count",
           ("property:pad_range", "pin:divisible_length"), _padded_length, oracle=True),
    _entry("oracle_sp_pad_on_left", "pad_for_sequence_parallel",
           "spec choice: the pad prepended instead of appended", ("property:chunk_roundtrip",),
           _pad_on_left, oracle=True),
    _entry("oracle_sp_pad_positions_continue", "pad_for_sequence_parallel",
           "spec choice: pad positions continue the last sample instead of restarting at 0",
           ("property:pad_segment",), _pad_positions_continue, oracle=True),
    _entry("oracle_sp_boundary_without_pad", "pad_for_sequence_parallel",
           "spec choice: the boundary N + pad appended to cu_seqlens even when pad == 0",
           ("property:segments", "pin:divisible_needs_no_pad"), _boundary_without_pad,
           oracle=True),
    _entry("oracle_sp_max_seqlen_stale", "pad_for_sequence_parallel",
           "spec choice: max_seqlen counts the samples only, not a longer pad segment",
           ("property:segments", "pin:pad_longer_than_samples"), _max_seqlen_stale,
           oracle=True),
]

"""Optimized `balance` (spec: balance.md): identical results to `reference/balance.py`.

Karmarkar–Karp keeps the reference's exact order with a cheaper representation:

- Two different sets are never equal in the spec's set order, because their item lists are
  disjoint: once (sum, count) tie, the lexicographic comparison of the item lists is decided by
  their first items' indices. A set is therefore the flat tuple

      (sum, count, first_index, head, tail)        empty set: (0, 0, -1, -1, -1)

  and Python compares it natively in the spec's order.
- Items live in one linked list (`following[index]`), so merging two sets is O(1) (link the tail
  of A's set to the head of B's) instead of copying item lists; indices are read out once at the
  end, in insertion order.
- The priority queue holds `(-spread, -sum0, -count0, -first0, sets)`: unique keys (the first
  index is unique), so the heap never compares the set lists.

Sums use the same Python additions in the same order as the reference, so ties break identically
for ints and floats alike.
"""

from __future__ import annotations

import heapq
import math
import numbers

import torch
from tensordict import TensorDict

from batchproof.impl._sync import documented, host_put
from batchproof.impl.sft import ffd_bins
from batchproof.reference.balance import (  # the contract's argument checks, shared with the oracle
    _check_packed,
    _positive_int,
    _stacked_rows,
)

_EMPTY = (0, 0, -1, -1, -1)


def karmarkar_karp(values, k, *, equal_size=False) -> list[list[int]]:
    """Split indices of `values` into `k` sets with close sums (largest differencing method)."""
    values = _values(values, "values")
    _positive_int(k, "k")
    n = len(values)
    if k > n:
        raise ValueError(f"k={k} is larger than the number of values ({n})")
    if equal_size and n % k != 0:
        raise ValueError(f"equal_size needs len(values) divisible by k, got {n} values and k={k}")

    order = sorted(range(n), key=lambda i: (values[i], i))
    heap = _initial_states(values, order, k, equal_size)
    heapq.heapify(heap)
    following = [-1] * n  # the linked list of items: following[index] = next index in its set
    while len(heap) > 1:
        sets_a = heapq.heappop(heap)[4]
        sets_b = heapq.heappop(heap)[4]
        heapq.heappush(heap, _entry(_merge(sets_a, sets_b, following)))
    return [_read_items(s, following) for s in heap[0][4]]


def _merge(sets_a: list[tuple], sets_b: list[tuple], following: list[int]) -> list[tuple]:
    """A's i-th set with B's (k-1-i)-th, A's items first; sorted descending (set order)."""
    last = len(sets_a) - 1
    merged = []
    for i, a in enumerate(sets_a):
        b = sets_b[last - i]
        if b[1] == 0:
            merged.append(a)
        elif a[1] == 0:
            merged.append((0 + b[0], b[1], b[2], b[3], b[4]))
        else:
            following[a[4]] = b[3]  # link A's tail to B's head: O(1) concatenation
            merged.append((a[0] + b[0], a[1] + b[1], a[2], a[3], b[4]))
    merged.sort(reverse=True)
    return merged


def _initial_states(values, order, k, equal_size) -> list[tuple]:
    states = []
    if equal_size:
        for start in range(0, len(order), k):
            sets = [(0 + values[i], 1, i, i, i) for i in order[start:start + k]]
            sets.sort(reverse=True)
            states.append(_entry(sets))
    else:
        empties = [_EMPTY] * (k - 1)
        for i in order:
            states.append(_entry([(0 + values[i], 1, i, i, i), *empties]))
    return states


def _entry(sets: list[tuple]) -> tuple:
    """The heap key: larger spread first, then the larger `sets[0]` (set order)."""
    top = sets[0]
    return (-(top[0] - sets[-1][0]), -top[0], -top[1], -top[2], sets)


def _read_items(s: tuple, following: list[int]) -> list[int]:
    out = []
    index = s[3]
    for _ in range(s[1]):
        out.append(index)
        index = following[index]
    return out


def balanced_partitions(values, k, *, equal_size=False) -> list[list[int]]:
    """`karmarkar_karp` with each partition's indices sorted ascending; no partition empty.

    (None can be: k <= n is checked, and a merge of two states with m and l non-empty sets has
    min(k, m + l) of them, so the final state of n single items has min(k, n) = k. The
    reference's check of each partition never fires: docs/coverage.md.)
    """
    n = len(_values(values, "values"))
    if isinstance(k, int) and not isinstance(k, bool) and n < k:
        raise ValueError(f"cannot make k={k} partitions from {n} values")
    return [sorted(p) for p in karmarkar_karp(values, k, equal_size=equal_size)]


def micro_batches(
    lengths, max_tokens, *, min_count=None, count_multiple=None, group_size=1
) -> list[list[int]]:
    """Sample indices per micro-batch; every micro-batch holds at most `max_tokens` tokens."""
    lengths = _lengths(lengths)
    _positive_int(max_tokens, "max_tokens")
    _positive_int(group_size, "group_size")
    if min_count is not None:
        _positive_int(min_count, "min_count")
    if count_multiple is not None:
        _positive_int(count_multiple, "count_multiple")
    n = len(lengths)
    if n % group_size != 0:
        raise ValueError(f"len(lengths)={n} is not a multiple of group_size={group_size}")
    if max(lengths) > max_tokens:  # the first length over the budget, as the reference names it
        index = next(i for i, v in enumerate(lengths) if v > max_tokens)
        raise ValueError(f"lengths[{index}]={lengths[index]} exceeds max_tokens={max_tokens}")

    group_sums = _group_sums(lengths, group_size)
    if max(group_sums) > max_tokens:
        group = next(g for g, total in enumerate(group_sums) if total > max_tokens)
        raise ValueError(
            f"group {group} (samples {group * group_size}..{(group + 1) * group_size - 1}) "
            f"holds {group_sums[group]} tokens, more than max_tokens={max_tokens}")

    step = count_multiple or 1
    total = sum(group_sums)
    count = -(-max(-(-total // max_tokens), min_count or 1) // step) * step
    fallback = ffd_bins(group_sums, max_tokens, min_bins=min_count or 1, bin_multiple=step)
    chosen = fallback
    while count < len(fallback):
        partitions = balanced_partitions(group_sums, count)
        if max(sum(group_sums[g] for g in p) for p in partitions) <= max_tokens:
            chosen = partitions
            break
        count += step
    if group_size == 1:
        return [sorted(groups) for groups in chosen]
    return [[g * group_size + s for g in sorted(groups) for s in range(group_size)]
            for groups in chosen]


def _group_sums(lengths: list[int], group_size: int) -> list[int]:
    if group_size == 1:
        return lengths
    return [sum(lengths[i:i + group_size]) for i in range(0, len(lengths), group_size)]


def restore_order(outputs, micro_batches):
    """Undo the micro-batch permutation (one gather with the inverse permutation, on device)."""
    order, count = _flat_order(micro_batches)
    rows = _stacked_rows(outputs, count)
    n = len(order)
    if rows.shape[0] != n:
        raise ValueError(f"outputs has {rows.shape[0]} rows, but micro_batches lists {n} indices")
    device = rows.device if rows.device is not None else torch.device("cpu")
    perm = torch.tensor(order, dtype=torch.int64)  # on the host, where micro_batches is
    if n and (int(perm.min()) < 0 or int(perm.max()) >= n
              or not bool((torch.bincount(perm, minlength=n) == 1).all())):
        raise ValueError("micro_batches must list every index in range(n) exactly once")
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(n, dtype=torch.int64)
    return rows[host_put(inverse, device=device)]


def ulysses_pad(length, sp_size) -> int:
    """Pad tokens that make `length` a multiple of `sp_size`: `(sp - N % sp) % sp`."""
    if not isinstance(length, int) or isinstance(length, bool):
        raise TypeError(f"length must be an int, got {type(length).__name__}")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    _positive_int(sp_size, "sp_size")
    return -length % sp_size


def pad_for_sequence_parallel(packed, sp_size) -> TensorDict:
    """Append one pad segment (token 0, positions 0..pad-1) so N is a multiple of `sp_size`."""
    with documented():  # a validation verdict: cu_seqlens ends at N
        _check_packed(packed)
    _positive_int(sp_size, "sp_size")
    input_ids = packed.get("input_ids")
    positions = packed.get("position_ids")
    length = input_ids.shape[-1]
    pad = -length % sp_size
    if pad == 0:
        return packed
    out = packed.clone(recurse=False)
    tail_ids = torch.zeros((1, pad), dtype=input_ids.dtype, device=input_ids.device)
    tail_pos = torch.arange(pad, dtype=positions.dtype, device=positions.device).unsqueeze(0)
    out.set("input_ids", torch.cat([input_ids, tail_ids], dim=1))
    out.set("position_ids", torch.cat([positions, tail_pos], dim=1))
    if "cu_seqlens" in packed.keys():
        cu = packed.get("cu_seqlens")
        end = torch.full((1,), length + pad, dtype=cu.dtype, device=cu.device)
        out.set("cu_seqlens", torch.cat([cu, end]))
    if "max_seqlen" in packed.keys():
        out.set_non_tensor("max_seqlen", max(packed.get_non_tensor("max_seqlen"), pad))
    return out


# ---------------------------------------------------------------------------------------------
# validation (same checks, same order and exception types as the reference)


def _values(values, name) -> list:
    if isinstance(values, torch.Tensor):
        if values.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(values.shape)}")
        if values.dtype == torch.bool or values.is_complex():
            raise TypeError(f"{name} must hold real numbers, got {values.dtype}")
        if values.is_floating_point():
            bad = ~torch.isfinite(values) | (values < 0)
        else:
            bad = values < 0
        if bool(bad.any()):  # the first bad value, named as the reference names it
            index = int(bad.nonzero()[0, 0])
            value = values[index].item()
            problem = "is not finite" if not math.isfinite(value) else "is negative"
            raise ValueError(f"{name}[{index}]={value} {problem}")
        return values.tolist()
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
    values = list(values)
    if all(type(v) is int for v in values):  # the common case: token counts
        if values and min(values) < 0:
            index = next(i for i, v in enumerate(values) if v < 0)
            raise ValueError(f"{name}[{index}]={values[index]} is negative")
        return values
    out = []
    for index, value in enumerate(values):
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise TypeError(f"{name}[{index}] must be a real number, got {type(value).__name__}")
        value = int(value) if isinstance(value, numbers.Integral) else float(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{name}[{index}]={value} is not finite")
        if value < 0:
            raise ValueError(f"{name}[{index}]={value} is negative")
        out.append(value)
    return out


def _lengths(lengths) -> list[int]:
    if isinstance(lengths, torch.Tensor):
        if lengths.dim() != 1:
            raise ValueError(f"lengths must be 1-D, got shape {tuple(lengths.shape)}")
        if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
            raise TypeError(f"lengths must hold integers, got {lengths.dtype}")
        lengths = lengths.tolist()
    elif isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
        raise TypeError(f"lengths must be a sequence of ints, got {type(lengths).__name__}")
    lengths = list(lengths)
    if not all(type(v) is int for v in lengths):  # the slow path, in the reference's order
        for index, length in enumerate(lengths):
            if not isinstance(length, numbers.Integral) or isinstance(length, bool):
                raise TypeError(f"lengths[{index}] must be an int, got {type(length).__name__}")
            if length < 1:
                raise ValueError(f"lengths[{index}]={length}: every sample needs at least 1 token")
        lengths = [int(v) for v in lengths]
    if not lengths:
        raise ValueError("lengths is empty")
    if min(lengths) < 1:
        index = next(i for i, v in enumerate(lengths) if v < 1)
        raise ValueError(f"lengths[{index}]={lengths[index]}: every sample needs at least 1 token")
    return lengths


def _flat_order(micro_batches) -> tuple[list[int], int]:
    """Every index in micro-batch order, and the number of micro-batches."""
    if isinstance(micro_batches, (str, bytes)) or not hasattr(micro_batches, "__iter__"):
        raise TypeError("micro_batches must be a list of index lists")
    order: list[int] = []
    count = 0
    for j, batch in enumerate(micro_batches):
        count += 1
        if isinstance(batch, (str, bytes)) or not hasattr(batch, "__iter__"):
            raise TypeError(f"micro_batches[{j}] must be a list of ints")
        batch = list(batch)
        if not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in batch):
            bad = next(i for i in batch if isinstance(i, bool) or not isinstance(i, numbers.Integral))
            raise TypeError(f"micro_batches[{j}] must hold ints, got {type(bad).__name__}")
        order += [int(i) for i in batch]
    return order, count



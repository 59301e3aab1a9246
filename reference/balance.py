"""Reference `balance`: balanced partitions, token-budget micro-batches, sequence-parallel padding.

The oracle for `impl/balance.py` (spec: balance.md). Plain Python: classes, lists and `heapq`,
following the spec's description step by step. Readable first, never optimized.

Karmarkar–Karp (largest differencing), k = 2, values [1, 2, 3, 4]:

    states (one per item)      pop the two largest spreads, merge largest set with smallest
    ({4}, {})  spread 4   ─┐
    ({3}, {})  spread 3   ─┴─> ({4}, {3})  spread 1
    ({2}, {})  spread 2   ─┐
    ({1}, {})  spread 1   ─┴─> ({2}, {1})  spread 1
                               ({4}+{1}, {3}+{2}) = ({4,1}, {3,2})  spread 0

Micro-batches: group token sums → the fewest balanced partitions that fit the budget, else the
first-fit-decreasing bins of `sft.ffd_bins`.
"""

from __future__ import annotations

import heapq
import math
import numbers

import torch
from tensordict import TensorDict, TensorDictBase

from batchproof.reference.sft import ffd_bins


class _Set:
    """One partition under construction: a sum and its (index, value) items in insertion order."""

    def __init__(self, items: list[tuple[int, float]] | None = None) -> None:
        self.items = list(items or [])
        self.sum = 0
        for _, value in self.items:
            self.sum = self.sum + value

    def order_key(self) -> tuple:
        """Set order: by sum, then by number of items, then by the item list lexicographically."""
        return (self.sum, len(self.items), self.items)

    def merged_with(self, other: _Set) -> _Set:
        merged = _Set()
        merged.items = self.items + other.items
        merged.sum = self.sum + other.sum
        return merged


class _State:
    """k sets kept sorted descending; in the priority queue, larger spread first."""

    def __init__(self, sets: list[_Set]) -> None:
        self.sets = sorted(sets, key=_Set.order_key, reverse=True)

    @property
    def spread(self) -> float:
        return self.sets[0].sum - self.sets[-1].sum

    def __lt__(self, other: _State) -> bool:
        """`heapq` pops the smallest: here, the state that must come out first."""
        if self.spread != other.spread:
            return self.spread > other.spread
        return self.sets[0].order_key() > other.sets[0].order_key()

    def merge(self, other: _State) -> None:
        """Largest set of self with smallest of other, and so on; then re-sort."""
        k = len(self.sets)
        merged = [self.sets[i].merged_with(other.sets[k - 1 - i]) for i in range(k)]
        self.sets = sorted(merged, key=_Set.order_key, reverse=True)


def karmarkar_karp(values, k, *, equal_size=False) -> list[list[int]]:
    """Split indices of `values` into `k` sets with close sums (largest differencing method).

    Returns the sets in descending set order, each set's indices in insertion order.
    """
    values = _values(values, "values")
    _positive_int(k, "k")
    n = len(values)
    if k > n:
        raise ValueError(f"k={k} is larger than the number of values ({n})")
    if equal_size and n % k != 0:
        raise ValueError(f"equal_size needs len(values) divisible by k, got {n} values and k={k}")

    items = sorted((value, index) for index, value in enumerate(values))
    heap: list[_State] = []
    if equal_size:
        for start in range(0, n, k):
            block = items[start:start + k]
            heapq.heappush(heap, _State([_Set([(index, value)]) for value, index in block]))
    else:
        for value, index in items:
            sets = [_Set([(index, value)])] + [_Set() for _ in range(k - 1)]
            heapq.heappush(heap, _State(sets))

    while len(heap) > 1:
        first = heapq.heappop(heap)
        second = heapq.heappop(heap)
        first.merge(second)
        heapq.heappush(heap, first)

    return [[index for index, _ in s.items] for s in heap[0].sets]


def balanced_partitions(values, k, *, equal_size=False) -> list[list[int]]:
    """`karmarkar_karp` with each partition's indices sorted ascending; no partition empty."""
    n = len(_values(values, "values"))
    if isinstance(k, int) and not isinstance(k, bool) and n < k:
        raise ValueError(f"cannot make k={k} partitions from {n} values")
    partitions = karmarkar_karp(values, k, equal_size=equal_size)
    out = []
    for number, partition in enumerate(partitions):
        if len(partition) == 0:
            raise ValueError(f"partition {number} of k={k} is empty")
        out.append(sorted(partition))
    return out


def micro_batches(
    lengths, max_tokens, *, min_count=None, count_multiple=None, group_size=1
) -> list[list[int]]:
    """Sample indices per micro-batch; every micro-batch holds at most `max_tokens` tokens.

        lengths [14, 2, 9, 17, 16], max_tokens 29:
        2 micro-batches cannot fit (58 tokens, balanced 30 + 28) → FFD bins [[1, 2, 3], [4], [0]]
    """
    lengths = _lengths(lengths)
    _positive_int(max_tokens, "max_tokens")
    _positive_int(group_size, "group_size")
    if min_count is not None:
        _positive_int(min_count, "min_count")
    if count_multiple is not None:
        _positive_int(count_multiple, "count_multiple")
    if len(lengths) % group_size != 0:
        raise ValueError(
            f"len(lengths)={len(lengths)} is not a multiple of group_size={group_size}")
    for index, length in enumerate(lengths):
        if length > max_tokens:
            raise ValueError(
                f"lengths[{index}]={length} exceeds max_tokens={max_tokens}")

    group_sums = []
    for start in range(0, len(lengths), group_size):
        group_sums.append(sum(lengths[start:start + group_size]))
    for group, total in enumerate(group_sums):
        if total > max_tokens:
            raise ValueError(
                f"group {group} (samples {group * group_size}..{(group + 1) * group_size - 1}) "
                f"holds {total} tokens, more than max_tokens={max_tokens}")

    step = count_multiple or 1
    total = sum(group_sums)
    first_count = max(_ceil_div(total, max_tokens), min_count or 1)
    first_count = _ceil_div(first_count, step) * step
    fallback = ffd_bins(group_sums, max_tokens, min_bins=min_count or 1, bin_multiple=step)

    chosen = fallback
    count = first_count
    while count < len(fallback):
        partitions = balanced_partitions(group_sums, count)
        if all(sum(group_sums[g] for g in p) <= max_tokens for p in partitions):
            chosen = partitions
            break
        count += step

    out = []
    for groups in chosen:
        samples = []
        for group in groups:
            samples += range(group * group_size, (group + 1) * group_size)
        out.append(sorted(samples))
    return out


def restore_order(outputs, micro_batches):
    """Undo the micro-batch permutation: row `r` of micro-batch `j` goes back to `micro_batches[j][r]`.

    `outputs`: one tensor (or TensorDict) per micro-batch, or one of all rows in micro-batch order.
    """
    batches = _batches(micro_batches)
    order = []
    for batch in batches:
        for index in batch:
            order.append(index)
    rows = _stacked_rows(outputs, len(batches))
    if len(rows) != len(order):
        raise ValueError(
            f"outputs has {len(rows)} rows, but micro_batches lists {len(order)} indices")
    if sorted(order) != list(range(len(order))):
        raise ValueError("micro_batches must list every index in range(n) exactly once")
    position_of = [0] * len(order)
    for position, index in enumerate(order):
        position_of[index] = position
    return rows[torch.tensor(position_of, dtype=torch.int64, device=rows.device)]


def ulysses_pad(length, sp_size) -> int:
    """Pad tokens that make `length` a multiple of `sp_size`: `(sp - N % sp) % sp`."""
    if not isinstance(length, int) or isinstance(length, bool):
        raise TypeError(f"length must be an int, got {type(length).__name__}")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    _positive_int(sp_size, "sp_size")
    return (sp_size - length % sp_size) % sp_size


def pad_for_sequence_parallel(packed, sp_size) -> TensorDict:
    """Append one pad segment to a packed row so its length is a multiple of `sp_size`.

        input_ids     a a a b b | 0 0 0      (sp_size 4: N = 5 → pad 3)
        position_ids  0 1 2 0 1 | 0 1 2      the pad is its own segment
        cu_seqlens    0 3 5     | 8
    """
    _check_packed(packed)
    _positive_int(sp_size, "sp_size")
    input_ids = packed.get("input_ids")
    length = input_ids.shape[-1]
    pad = ulysses_pad(length, sp_size)
    if pad == 0:
        return packed

    out = packed.clone(recurse=False)
    device = input_ids.device
    ids = input_ids[0].tolist() + [0] * pad
    positions = packed.get("position_ids")[0].tolist() + list(range(pad))
    out.set("input_ids", torch.tensor([ids], dtype=input_ids.dtype, device=device))
    out.set("position_ids", torch.tensor([positions], dtype=packed.get("position_ids").dtype,
                                         device=device))
    if "cu_seqlens" in packed.keys():
        cu = packed.get("cu_seqlens")
        out.set("cu_seqlens", torch.tensor(cu.tolist() + [length + pad], dtype=cu.dtype,
                                           device=cu.device))
    if "max_seqlen" in packed.keys():
        out.set_non_tensor("max_seqlen", max(packed.get_non_tensor("max_seqlen"), pad))
    return out


# ---------------------------------------------------------------------------------------------
# validation helpers


def _positive_int(value, name) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _values(values, name) -> list:
    """Finite, non-negative real numbers as Python numbers (a 1-D tensor gives `tolist()`)."""
    if isinstance(values, torch.Tensor):
        if values.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(values.shape)}")
        if values.dtype == torch.bool or values.is_complex():
            raise TypeError(f"{name} must hold real numbers, got {values.dtype}")
        values = values.tolist()
    elif isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
    out = []
    for index, value in enumerate(values):
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise TypeError(f"{name}[{index}] must be a real number, got {type(value).__name__}")
        if isinstance(value, numbers.Integral):
            value = int(value)
        else:
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"{name}[{index}]={value} is not finite")
        if value < 0:
            raise ValueError(f"{name}[{index}]={value} is negative")
        out.append(value)
    return out


def _lengths(lengths) -> list[int]:
    """Token counts: ints >= 1 (a 1-D integer tensor is accepted)."""
    if isinstance(lengths, torch.Tensor):
        if lengths.dim() != 1:
            raise ValueError(f"lengths must be 1-D, got shape {tuple(lengths.shape)}")
        if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
            raise TypeError(f"lengths must hold integers, got {lengths.dtype}")
        lengths = lengths.tolist()
    elif isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
        raise TypeError(f"lengths must be a sequence of ints, got {type(lengths).__name__}")
    out = []
    for index, length in enumerate(lengths):
        if not isinstance(length, numbers.Integral) or isinstance(length, bool):
            raise TypeError(f"lengths[{index}] must be an int, got {type(length).__name__}")
        if length < 1:
            raise ValueError(f"lengths[{index}]={length}: every sample needs at least 1 token")
        out.append(int(length))
    if not out:
        raise ValueError("lengths is empty")
    return out


def _batches(micro_batches) -> list[list[int]]:
    if isinstance(micro_batches, (str, bytes)) or not hasattr(micro_batches, "__iter__"):
        raise TypeError("micro_batches must be a list of index lists")
    out = []
    for j, batch in enumerate(micro_batches):
        if isinstance(batch, (str, bytes)) or not hasattr(batch, "__iter__"):
            raise TypeError(f"micro_batches[{j}] must be a list of ints")
        row = []
        for index in batch:
            if not isinstance(index, numbers.Integral) or isinstance(index, bool):
                raise TypeError(f"micro_batches[{j}] must hold ints, got {type(index).__name__}")
            row.append(int(index))
        out.append(row)
    return out


def _stacked_rows(outputs, count):
    """One tensor/TensorDict of every row in micro-batch order (concatenated if given per batch)."""
    if isinstance(outputs, (torch.Tensor, TensorDictBase)):
        rows_dims = outputs.dim() if isinstance(outputs, torch.Tensor) else outputs.batch_dims
        if rows_dims < 1:
            raise ValueError("outputs must have a row dimension")
        return outputs
    if isinstance(outputs, (list, tuple)):
        if len(outputs) != count:
            raise ValueError(
                f"outputs has {len(outputs)} entries, but there are {count} micro-batches")
        for j, part in enumerate(outputs):
            if not isinstance(part, (torch.Tensor, TensorDictBase)):
                raise TypeError(f"outputs[{j}] must be a tensor or TensorDict, "
                                f"got {type(part).__name__}")
        if not outputs:
            raise ValueError("outputs is empty")
        return torch.cat(list(outputs), dim=0)
    raise TypeError(f"outputs must be a tensor, a TensorDict or a list of them, "
                    f"got {type(outputs).__name__}")


def _check_packed(packed) -> None:
    """A packed row: `input_ids` and `position_ids` of shape (1, N); no other (1, N) field."""
    if not isinstance(packed, TensorDictBase):
        raise TypeError(f"packed must be a TensorDict, got {type(packed).__name__}")
    for key in ("input_ids", "position_ids"):
        if key not in packed.keys():
            raise ValueError(f"packed has no {key!r}")
        value = packed.get(key)
        if not isinstance(value, torch.Tensor) or value.dim() != 2 or value.shape[0] != 1:
            raise ValueError(f"packed[{key!r}] must be a (1, N) tensor")
    if packed.get("input_ids").shape != packed.get("position_ids").shape:
        raise ValueError("packed input_ids and position_ids must have the same shape")
    length = packed.get("input_ids").shape[-1]
    for key in packed.keys():
        if key in ("input_ids", "position_ids") or packed.is_non_tensor(key):
            continue
        value = packed.get(key)
        if isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape == (1, length):
            raise ValueError(f"packed[{key!r}] is a per-token field pad_for_sequence_parallel "
                             "cannot pad")
    if "cu_seqlens" in packed.keys():
        cu = packed.get("cu_seqlens")
        if cu.dim() != 1 or cu.numel() < 1 or int(cu[-1]) != length:
            raise ValueError(f"packed cu_seqlens must be 1-D and end at N={length}")

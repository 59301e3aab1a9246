"""Reference `sft`: SFT collation, padded (`collate_sft`) and packed (`pack_sft`) (spec: sft.md).

Plain Python loops over lists; tensors are made only at the end. Readable first, never optimized.

collate_sft: left pad to S = max s, loss right-aligned in A = max num_actions columns

    input_ids       .  .  t  t  t  t          (. = pad_token_id)
    attention_mask  0  0  1  1  0  1          (the example's own mask, interior zeros kept)
    loss_mask             .  1  0  1          (A columns, the last num_actions of them)

pack_sft: FFD bins of raw lengths, rows shard-major, every sub-sequence in a slot of
roundup(s, a) columns (here a = 2, sub-sequences a (s=3), b (s=4), c (s=1), W = 10)

    input_ids       a  a  a  .  b  b  b  b  c  .
    position_ids    0  1  2  0  0  1  2  3  0  0
    attention_mask  1  1  1  0  1  1  1  1  1  0
    loss_mask       a1 a2 0  0  b1 b2 b3 0  0      (W-1 columns: column off+p holds full[p+1])
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from tensordict import TensorDict, TensorDictBase

from batchproof.reference._checks import check_pad_token_id

REQUIRED_KEYS = ("input_ids", "num_actions", "loss_mask")


@dataclass
class Example:
    """One validated example, every field a plain Python list."""

    input_ids: list
    num_actions: int
    loss_mask: list
    attention_mask: list | None  # None: not given (all ones)


def collate_sft(examples, *, pad_token_id, normalize=False, device=None) -> TensorDict:
    """Left-pad N examples to one (N, S) batch; loss masks right-aligned in (N, A)."""
    check_pad_token_id(pad_token_id)
    _check_bool(normalize, "normalize")
    examples = batch_rows(examples)
    parsed = _parse_examples(examples)
    device = _output_device(device, examples)
    width = max(len(ex.input_ids) for ex in parsed)
    response = max(ex.num_actions for ex in parsed)

    input_ids, attention, loss = [], [], []
    for ex in parsed:
        pad = width - len(ex.input_ids)
        own_mask = ex.attention_mask if ex.attention_mask is not None else [1] * len(ex.input_ids)
        input_ids.append([pad_token_id] * pad + ex.input_ids)
        attention.append([0] * pad + own_mask)
        loss.append([0.0] * (response - ex.num_actions) + ex.loss_mask)

    batch = len(parsed)
    loss_mask = _tensor(loss, torch.float32, batch, response)
    if normalize:
        loss_mask = _normalized(loss_mask)
    td = TensorDict(
        {
            "input_ids": _tensor(input_ids, torch.int64, batch, width).to(device),
            "attention_mask": _tensor(attention, torch.int64, batch, width).to(device),
            "loss_mask": loss_mask.to(device),
        },
        batch_size=[batch],
    )
    td.set_non_tensor("response_length", response)
    return td


FP8_RECIPES = ("tensorwise", "blockwise", "mxfp8")


def align_size(tp_size=1, cp_size=1, *, fp8=False, fp8_recipe="tensorwise") -> int:
    """Columns every packed sub-sequence is padded to a multiple of.

    layout: tp alone: tp (sequence parallelism shards the sequence dim by tp); with cp > 1:
    tp * cp * 2 (each segment is split into 2*cp load-balanced chunks). With fp8, also a
    multiple of the FP8 recipe's token granularity F (docs/sft.md, "FP8 alignment"):

        tensorwise  per-tensor scaling   lcm(16 * cp, 8 * tp * cp)
        blockwise   1x128 block scaling  16 * cp if tp == 1, else 128 * tp * cp
        mxfp8       MXFP8 (32 blocks)    32 * tp * cp
    """
    _check_size(tp_size, "tp_size")
    _check_size(cp_size, "cp_size")
    _check_bool(fp8, "fp8")
    check_fp8_recipe(fp8_recipe)
    layout = tp_size * cp_size * 2 if cp_size > 1 else tp_size
    if not fp8:
        return layout
    if fp8_recipe == "tensorwise":
        granularity = _lcm(16 * cp_size, 8 * tp_size * cp_size)
    elif fp8_recipe == "blockwise":
        granularity = 16 * cp_size if tp_size == 1 else 128 * tp_size * cp_size
    else:
        granularity = 32 * tp_size * cp_size
    return _lcm(layout, granularity)


def check_fp8_recipe(fp8_recipe) -> None:
    """One of `FP8_RECIPES` (checked whether or not fp8 is on)."""
    if not isinstance(fp8_recipe, str):
        raise TypeError(f"fp8_recipe must be a str, got {type(fp8_recipe).__name__}")
    if fp8_recipe not in FP8_RECIPES:
        raise ValueError(f"fp8_recipe must be one of {FP8_RECIPES}, got {fp8_recipe!r}")


def _lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


def ffd_bins(lengths, capacity, *, min_bins=1, bin_multiple=1) -> list[list[int]]:
    """First-fit-decreasing bins of item indices, then the bin-count adjustment (sft.md).

    [40, 30, 20, 10, 5], capacity 100, bin_multiple 4:
        FFD          [[0, 1, 2, 3], [4]]           (visit order by (length, index) descending)
        adjustment   [[0, 1], [4], [3], [2]]       (new bins take the last item of the largest)
    """
    lengths = _check_lengths(lengths, capacity, min_bins, bin_multiple)

    order = list(range(len(lengths)))
    order.sort(key=lambda i: (lengths[i], i), reverse=True)  # ties: larger index first
    bins: list[list[int]] = []
    remaining: list[int] = []
    for i in order:
        for b in range(len(bins)):  # the first bin, in creation order, that still fits
            if remaining[b] >= lengths[i]:
                bins[b].append(i)
                remaining[b] -= lengths[i]
                break
        else:
            bins.append([i])
            remaining.append(capacity - lengths[i])

    target = max(len(bins), min_bins)
    if target % bin_multiple:
        target += bin_multiple - target % bin_multiple
    if target == len(bins):
        return bins
    if len(lengths) < target:
        raise ValueError(f"cannot create {target} bins from {len(lengths)} sequences "
                         f"(min_bins={min_bins}, bin_multiple={bin_multiple})")

    donors = sorted(range(len(bins)), key=lambda b: (len(bins[b]), b), reverse=True)
    cursor = 0
    for _ in range(target - len(bins)):
        while len(bins[donors[cursor]]) <= 1:
            cursor += 1
        bins.append([bins[donors[cursor]].pop()])
    return bins


def pack_sft(
    examples,
    *,
    pad_token_id,
    capacity,
    dp_size=1,
    tp_size=1,
    pp_size=1,
    cp_size=1,
    fp8=False,
    fp8_recipe="tensorwise",
    device=None,
) -> TensorDict:
    """Pack examples into shard-major rows of aligned sub-sequences (see the module docstring)."""
    check_pad_token_id(pad_token_id)
    _check_size(capacity, "capacity")
    for value, name in ((dp_size, "dp_size"), (tp_size, "tp_size"), (pp_size, "pp_size"),
                        (cp_size, "cp_size")):
        _check_size(value, name)
    _check_bool(fp8, "fp8")
    check_fp8_recipe(fp8_recipe)
    examples = batch_rows(examples)
    parsed = _parse_examples(examples, packed=True)
    device = _output_device(device, examples)

    lengths = [len(ex.input_ids) for ex in parsed]
    bins = ffd_bins(lengths, capacity, min_bins=dp_size, bin_multiple=dp_size)
    rows = [bins[k] for shard in range(dp_size) for k in range(shard, len(bins), dp_size)]
    align = align_size(tp_size, cp_size, fp8=fp8, fp8_recipe=fp8_recipe)
    width = max(sum(_round_up(lengths[i], align) for i in row) for row in rows)

    input_ids, attention, positions, loss, sub_lengths, cu_seqlens = [], [], [], [], [], [0]
    for row in rows:
        ids_row = [pad_token_id] * width
        attention_row = [0] * width
        position_row = [0] * width
        loss_row = [0.0] * (width - 1)
        offset = 0
        for i in row:
            ex = parsed[i]
            s = len(ex.input_ids)
            full = [0.0] * (s - ex.num_actions) + ex.loss_mask
            for p in range(s):
                ids_row[offset + p] = ex.input_ids[p]
                attention_row[offset + p] = 1
                position_row[offset + p] = p
            for p in range(s - 1):  # column off+p predicts token p+1
                loss_row[offset + p] = full[p + 1]
            offset += _round_up(s, align)
            cu_seqlens.append(cu_seqlens[-1] + _round_up(s, align))
        input_ids.append(ids_row)
        attention.append(attention_row)
        positions.append(position_row)
        loss.append(loss_row)
        sub_lengths.append([lengths[i] for i in row])

    batch = len(rows)
    td = TensorDict(
        {
            "input_ids": _tensor(input_ids, torch.int64, batch, width).to(device),
            "attention_mask": _tensor(attention, torch.int64, batch, width).to(device),
            "position_ids": _tensor(positions, torch.int64, batch, width).to(device),
            "loss_mask": _normalized(_tensor(loss, torch.float32, batch, width - 1)).to(device),
            "sub_seq_lengths": _jagged(sub_lengths).to(device),
        },
        batch_size=[batch],
    )
    td.set_non_tensor("cu_seqlens_padded", torch.tensor(cu_seqlens, dtype=torch.int32).to(device))
    td.set_non_tensor("response_length", width - 1)
    return td


# -- validation -------------------------------------------------------------------------------


def batch_rows(examples):
    """A batch given as one TensorDict (batch_size [N]) is the list of its N rows.

        TensorDict(batch_size=[2])        ->  [{"input_ids": [5, 6, 7], "num_actions": 2,
          input_ids    jagged [[5, 6, 7],          "loss_mask": [1, 0]},
                               [8, 9]]         {"input_ids": [8, 9], "num_actions": 1,
          loss_mask    jagged [[1, 0], [1]]        "loss_mask": [1]}]
          num_actions  (2,) [2, 1]

    Row i holds every tensor field's row i (a jagged field's i-th sequence); an integer 0-d
    `num_actions` row becomes an int. The rows are then checked as any examples are. Anything
    that is not a TensorDict is returned as given.
    """
    if not isinstance(examples, TensorDictBase):
        return examples
    if examples.batch_dims != 1:
        raise ValueError("examples given as a TensorDict must have batch_size [N], got "
                         f"{list(examples.batch_size)}")
    rows = []
    for i in range(examples.batch_size[0]):
        row = {}
        for key in examples.keys():
            if not examples.is_non_tensor(key):
                row[key] = examples.get(key)[i]
        actions = row.get("num_actions")
        if (isinstance(actions, torch.Tensor) and actions.dim() == 0
                and not (actions.is_floating_point() or actions.is_complex()
                         or actions.dtype == torch.bool)):
            row["num_actions"] = int(actions)
        rows.append(row)
    return rows


def _parse_examples(examples, *, packed: bool = False) -> list[Example]:
    """Validate every example (sft.md, "Errors"); errors name the example index.

    Order: the structure of every example (in index order), then the devices of tensor
    inputs, then the values of every example (ids and masks; for `pack_sft` also "attention
    all ones"), each pass in index order.
    """
    if isinstance(examples, (str, bytes, Mapping)) or not isinstance(examples, Sequence):
        raise TypeError(f"examples must be a sequence of mappings, got {type(examples).__name__}")
    if len(examples) == 0:
        raise ValueError("examples is empty: a batch needs at least one example")
    for i, ex in enumerate(examples):
        _check_structure(ex, i)
    _check_one_device(examples)
    return [_parse_values(ex, i, packed) for i, ex in enumerate(examples)]


def _check_structure(ex, i: int) -> None:
    if not isinstance(ex, Mapping):
        raise TypeError(f"examples[{i}] must be a mapping, got {type(ex).__name__}")
    for key in REQUIRED_KEYS:
        if key not in ex:
            raise ValueError(f"examples[{i}] is missing {key!r}")
    input_ids = _field(ex["input_ids"], i, "input_ids", integer=True)
    num_actions = ex["num_actions"]
    if not isinstance(num_actions, numbers.Integral) or isinstance(num_actions, bool):
        raise TypeError(f"examples[{i}]['num_actions'] must be an int, "
                        f"got {type(num_actions).__name__}")
    loss_mask = _field(ex["loss_mask"], i, "loss_mask", integer=False)
    if len(loss_mask) != num_actions:
        raise ValueError(f"examples[{i}]['loss_mask'] has {len(loss_mask)} entries but "
                         f"num_actions is {num_actions} (a length-1 mask is not broadcast)")
    if num_actions < 1 or num_actions > len(input_ids):
        raise ValueError(f"examples[{i}]['num_actions'] must be in [1, {len(input_ids)}] "
                         f"(the sequence length), got {num_actions}")
    attention = ex.get("attention_mask")
    if attention is not None:
        attention = _field(attention, i, "attention_mask", integer=False)
        if len(attention) != len(input_ids):
            raise ValueError(f"examples[{i}]['attention_mask'] has {len(attention)} entries "
                             f"but input_ids has {len(input_ids)}")


def _field(value, i: int, key: str, *, integer: bool):
    """A list/tuple, or a 1-D tensor (of an integer dtype for ids; real for masks)."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 1:
            raise ValueError(f"examples[{i}][{key!r}] must be 1-D, got shape {tuple(value.shape)}")
        if integer and (value.is_floating_point() or value.is_complex()
                        or value.dtype == torch.bool):
            raise TypeError(f"examples[{i}][{key!r}] must hold integers, got {value.dtype}")
        if not integer and value.is_complex():
            raise TypeError(f"examples[{i}][{key!r}] must hold real numbers, got {value.dtype}")
        return value
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"examples[{i}][{key!r}] must be a list or a 1-D tensor, "
                        f"got {type(value).__name__}")
    return value


def _parse_values(ex, i: int, packed: bool) -> Example:
    """The example's fields as Python lists of checked values."""
    input_ids = [_int64(v, i, "input_ids") for v in _as_list(ex["input_ids"])]
    loss_mask = [_real(v, i, "loss_mask") for v in _as_list(ex["loss_mask"])]
    attention = ex.get("attention_mask")
    if attention is not None:
        attention = [_zero_one(v, i, "attention_mask") for v in _as_list(attention)]
        if packed and 0 in attention:
            raise ValueError(f"examples[{i}]['attention_mask'] has zeros: a packed row cannot "
                             "express interior attention zeros")
    return Example(input_ids, int(ex["num_actions"]), loss_mask, attention)


def _as_list(value) -> list:
    return value.tolist() if isinstance(value, torch.Tensor) else list(value)


def _int64(value, i: int, key: str) -> int:
    """An int (anything with __index__: int, bool, numpy integer) that fits in int64."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"examples[{i}][{key!r}] must hold ints, "
                        f"got {type(value).__name__}") from None
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"examples[{i}][{key!r}] holds {value}, outside int64")
    return value


def _zero_one(value, i: int, key: str) -> int:
    """A mask value: anything equal to 0 or 1 (ints, bools, floats), as the int 0 or 1."""
    if value == 1:
        return 1
    if value == 0:
        return 0
    raise ValueError(f"examples[{i}][{key!r}] holds {value!r}: a mask holds 0/1 values")


def _real(value, i: int, key: str) -> float:
    """A real number as a Python float (anything float() takes, except strings and bytes)."""
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f"examples[{i}][{key!r}] must hold numbers, got {type(value).__name__}")
    try:
        return float(value)
    except TypeError:
        raise TypeError(f"examples[{i}][{key!r}] must hold numbers, "
                        f"got {type(value).__name__}") from None
    except OverflowError:
        raise ValueError(f"examples[{i}][{key!r}] holds {value}, too large for a float") from None


def _check_lengths(lengths, capacity, min_bins, bin_multiple) -> list[int]:
    _check_size(capacity, "capacity")
    _check_size(min_bins, "min_bins")
    _check_size(bin_multiple, "bin_multiple")
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence):
        raise TypeError(f"lengths must be a sequence of ints, got {type(lengths).__name__}")
    out = []
    for i, length in enumerate(lengths):
        if not isinstance(length, numbers.Integral) or isinstance(length, bool):
            raise TypeError(f"lengths[{i}] must be an int, got {type(length).__name__}")
        if length < 1:
            raise ValueError(f"lengths[{i}] is {length}: every sequence needs at least 1 token")
        if length > capacity:
            raise ValueError(f"lengths[{i}] is {length}, over the capacity {capacity}")
        out.append(int(length))
    return out


def _check_size(value, name: str) -> None:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def _check_bool(value, name: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def _check_one_device(examples) -> None:
    devices = {v.device for ex in examples if isinstance(ex, Mapping)
               for v in ex.values() if isinstance(v, torch.Tensor)}
    if len(devices) > 1:
        raise ValueError(f"examples hold tensors on several devices: {sorted(map(str, devices))}")


# -- output helpers ---------------------------------------------------------------------------


def _output_device(device, examples) -> torch.device:
    """`device`, else the device of the tensors among the inputs, else the CPU."""
    if device is not None:
        return torch.device(device)
    for ex in examples:
        for value in ex.values():  # validated: every example is a mapping
            if isinstance(value, torch.Tensor):
                return value.device
    return torch.device("cpu")


def exact_sum(values: list[float]) -> float:
    """The exact sum (math.fsum), except that +inf and -inf together make NaN, as IEEE
    addition does (math.fsum raises a ValueError there; a loss mask is not range-checked)."""
    if math.inf in values and -math.inf in values:
        return math.nan
    return math.fsum(values)


def _normalized(loss_mask: torch.Tensor) -> torch.Tensor:
    """loss_mask * float32(1 / max(total, 1)), total the exact sum of the float32 entries."""
    total = exact_sum(loss_mask.flatten().tolist())
    scale = torch.tensor(1.0 / max(total, 1), dtype=torch.float32)
    return loss_mask * scale


def _round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


def _tensor(rows, dtype, batch, width) -> torch.Tensor:
    return torch.tensor(rows, dtype=dtype).reshape(batch, width)


def _jagged(rows: list[list[int]]) -> torch.Tensor:
    offsets = [0]
    for row in rows:
        offsets.append(offsets[-1] + len(row))
    values = torch.tensor([v for row in rows for v in row], dtype=torch.int64)
    return torch.nested.nested_tensor_from_jagged(values, offsets=torch.tensor(offsets))

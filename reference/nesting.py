"""Reference `nesting`: compress a padded RL batch into jagged tensors by mask, and back
(spec: nesting.md).

Plain Python loops over lists; tensors are made only at the end. Readable first, never optimized.
The argument checks, the rules table and the plan of what gets nested (`plan_nesting`) carry no
per-token work and are shared with `impl.nesting`.

verl's layout (P = 3, R = 4) and what nesting makes of it (`.` pad, `p` prompt, `r` response,
`t` a real response token with response_mask 0, e.g. tool output in multi-turn):

    input_ids / attention_mask (B, P+R)        nested input_ids: row i = its real tokens
        . p p | r r t r                            p p r r t r
        p p p | r . . .                            p p p r
    responses / response_mask (B, R)           nested responses (by the response attention,
        r r t r      1 1 0 1                       tool tokens kept): r r t r | r
        r . . .      1 0 0 0                   nested response_mask: 1 1 0 1 | 1
    attention_mask → attention_mask_offsets [[1, 3], [0, 3]]   (start column of each run of 1s)
                     attention_mask_lengths [[2, 4], [4]]      (its length) — jagged int64

Everything unnesting needs (mask widths and dtypes, pads, permutations, P, R, the input's key
order) is stashed in the non-tensor entry `_nesting`; `max_prompt_length` and
`max_response_length` are added as non-tensor entries when absent.
"""

from __future__ import annotations

import io
import numbers
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

# --------------------------------------------------------------------------- the contract


class _PadTokenId:
    """The sentinel `PAD_TOKEN_ID`: a rule's pad value taken from the `pad_token_id` argument."""

    def __repr__(self) -> str:
        return "PAD_TOKEN_ID"

    def __reduce__(self) -> str:  # pickles (and deep-copies) to the one module-level instance
        return "PAD_TOKEN_ID"

    def __copy__(self) -> _PadTokenId:
        return self

    def __deepcopy__(self, memo: dict) -> _PadTokenId:
        return self


PAD_TOKEN_ID = _PadTokenId()

ATTENTION_MASK = "attention_mask"
PROMPT_MASK = "prompt_mask"
RESPONSE_ATTENTION_MASK = "response_attention_mask"
# derived when absent: prompt_mask = attention_mask[:, :P], response_attention_mask = [:, P:]
DERIVED_MASKS = (PROMPT_MASK, RESPONSE_ATTENTION_MASK)
STASH = "_nesting"
MULTI_AXIS = "position_ids"  # (B, C, S) is nested as (B, S, C), restored to (B, C, S)

_RESPONSE_FLOATS = ("old_log_probs", "ref_log_prob", "rollout_log_probs", "entropys",
                    "loss_mask", "advantages", "returns", "values", "token_level_scores",
                    "token_level_rewards", "rm_scores", "rollout_is_weights", "rewards",
                    "rollout_logprobs")

DEFAULT_RULES: Mapping[str, tuple[str, Any]] = MappingProxyType({
    "input_ids": (ATTENTION_MASK, PAD_TOKEN_ID),
    "teacher_ids": (ATTENTION_MASK, PAD_TOKEN_ID),
    "position_ids": (ATTENTION_MASK, 0),
    "routed_experts": (ATTENTION_MASK, 0),
    "teacher_logprobs": (ATTENTION_MASK, 0.0),
    "prompts": (PROMPT_MASK, PAD_TOKEN_ID),
    "responses": (RESPONSE_ATTENTION_MASK, PAD_TOKEN_ID),
    "response_mask": (RESPONSE_ATTENTION_MASK, 0),
    **{name: (RESPONSE_ATTENTION_MASK, 0.0) for name in _RESPONSE_FLOATS},
})
"""field → (mask, pad). Every response-axis field shares the response attention (tool tokens
inside multi-turn responses included), so all response-axis jagged tensors have equal rows."""


class DenseFieldError(RuntimeError):
    """`nest_by_mask(..., strict=True)` left a tensor with a sequence axis dense."""


@dataclass(frozen=True)
class PayloadReport:
    """Bytes of a dense batch and of its nested form (see `payload_report`)."""

    dense_bytes: int
    nested_bytes: int
    ceiling_bytes: int
    compression: float
    ceiling: float
    efficiency: float
    wire_bytes_dense: int
    wire_bytes_nested: int

    @property
    def wire_compression(self) -> float:
        return _ratio(self.wire_bytes_dense, self.wire_bytes_nested)


def rle_keys(mask: str) -> tuple[str, str]:
    """The keys of a mask's run-length encoding: (`{mask}_offsets`, `{mask}_lengths`)."""
    return f"{mask}_offsets", f"{mask}_lengths"


# --------------------------------------------------------------------------- the plan (shared)


@dataclass(frozen=True)
class FieldRule:
    mask: str
    pad: Any  # resolved: int, float or bool
    permute: tuple[int, ...] | None = None  # (0, 2, 1) for multi-axis position_ids


@dataclass(frozen=True)
class MaskInfo:
    width: int
    dtype: torch.dtype
    derived: bool


@dataclass(frozen=True)
class NestPlan:
    """What `nest_by_mask` will do; metadata only, no per-token work."""

    fields: dict[str, FieldRule]  # in the input's key order
    masks: dict[str, MaskInfo]  # every mask to encode, in order of first use
    prompt_width: int | None  # P
    response_width: int | None  # R
    added: tuple[str, ...]  # non-tensor keys nesting adds
    order: tuple[str, ...]  # the input's keys
    dense_ok: frozenset[str] = field(default_factory=frozenset)

    def stash(self) -> dict:
        """The non-tensor `_nesting` entry: plain Python values only."""
        return {
            "order": list(self.order),
            "masks": {m: {"width": i.width, "dtype": i.dtype, "derived": i.derived}
                      for m, i in self.masks.items()},
            "fields": {f: {"mask": r.mask, "pad": r.pad,
                           "permute": list(r.permute) if r.permute else None}
                       for f, r in self.fields.items()},
            "max_prompt_length": self.prompt_width,
            "max_response_length": self.response_width,
            "added": list(self.added),
        }


def plan_nesting(td, *, pad_token_id, rules, strict, ignore_dense) -> NestPlan:
    """Check the arguments and decide which field is nested by which mask (no per-token work;
    reference and impl share it, so they raise the same exception for the same bad input)."""
    _check_batch(td, "td")
    if pad_token_id is not None and not _is_int(pad_token_id):
        raise TypeError(f"pad_token_id must be an int or None, got {type(pad_token_id).__name__}")
    merged = merge_rules(rules)
    if not isinstance(strict, bool):
        raise TypeError(f"strict must be a bool, got {type(strict).__name__}")
    dense_ok = _names(ignore_dense, "ignore_dense")
    if STASH in td.keys():
        raise ValueError(f"td is already nested (it holds the non-tensor entry {STASH!r})")
    tensors = _tensor_keys(td)
    batch = td.batch_size[0]
    present = [k for k in tensors if merged.get(k) is not None]
    mask_names = [merged[k][0] for k in present]
    fields = [k for k in present if k not in mask_names]  # a key used as a mask is a mask
    response_width = _response_width(td, tensors)
    prompt_width = _prompt_width(td, tensors, response_width)

    masks: dict[str, MaskInfo] = {}
    for name in fields:
        mask = merged[name][0]
        if mask == name:
            raise ValueError(f"rules: field {name!r} cannot be nested by itself")
        if mask in tensors:
            masks.setdefault(mask, _mask_info(td, mask, batch))
        elif mask in DERIVED_MASKS:
            if ATTENTION_MASK not in tensors:
                raise ValueError(f"field {name!r} needs {mask!r}, which is derived from "
                                 f"{ATTENTION_MASK!r}, but td has no {ATTENTION_MASK!r}")
            attention = masks.setdefault(ATTENTION_MASK, _mask_info(td, ATTENTION_MASK, batch))
            if prompt_width is None:
                raise ValueError(f"field {name!r} needs {mask!r}, derived from {ATTENTION_MASK}"
                                 " split at P; P is unknown: td has no prompts, responses, "
                                 "response_mask or non-tensor max_response_length")
            if prompt_width > attention.width:
                raise ValueError(f"P = {prompt_width} exceeds the width {attention.width} of "
                                 f"{ATTENTION_MASK!r}")
            width = prompt_width if mask == PROMPT_MASK else attention.width - prompt_width
            masks.setdefault(mask, MaskInfo(width, attention.dtype, True))
        else:
            raise ValueError(f"field {name!r} is nested by mask {mask!r}, which td does not hold")

    rules_out = {}
    for name in fields:
        mask, pad = merged[name]
        if pad is PAD_TOKEN_ID:
            if pad_token_id is None:
                raise ValueError(f"field {name!r} is padded with PAD_TOKEN_ID but pad_token_id "
                                 "is None (pass the tokenizer's pad id)")
            pad = pad_token_id
        shape = tuple(td.get(name).shape)
        permute = None
        if name == MULTI_AXIS and len(shape) == 3:
            permute, shape = (0, 2, 1), (shape[0], shape[2], shape[1])
        if shape[:2] != (batch, masks[mask].width):
            raise ValueError(f"field {name!r} has shape {tuple(td.get(name).shape)}, but its "
                             f"mask {mask!r} has shape {(batch, masks[mask].width)}: the leading "
                             "dims of a field must equal its mask's shape")
        rules_out[name] = FieldRule(mask, pad, permute)

    keys = set(td.keys())
    for mask in masks:
        for key in rle_keys(mask):
            if key in keys:
                raise ValueError(f"td already holds {key!r}, the name of {mask!r}'s encoding")
    added = tuple(k for k, v in (("max_prompt_length", prompt_width),
                                 ("max_response_length", response_width))
                  if v is not None and k not in keys)
    return NestPlan(rules_out, masks, prompt_width, response_width, added,
                    tuple(td.keys()), frozenset(dense_ok))


def merge_rules(rules) -> dict[str, tuple[str, Any] | None]:
    """`DEFAULT_RULES` updated by `rules` (field → (mask, pad), or None to drop a default)."""
    merged: dict[str, tuple[str, Any] | None] = dict(DEFAULT_RULES)
    if rules is None:
        return merged
    if not isinstance(rules, Mapping):
        raise TypeError(f"rules must be a mapping field -> (mask, pad), got {type(rules).__name__}")
    for name, rule in rules.items():
        if not isinstance(name, str):
            raise TypeError(f"rules: field names must be str, got {name!r}")
        if rule is None:
            merged[name] = None
            continue
        if not isinstance(rule, (tuple, list)) or len(rule) != 2:
            raise TypeError(f"rules[{name!r}] must be a (mask, pad) pair, got {rule!r}")
        mask, pad = rule
        if not isinstance(mask, str):
            raise TypeError(f"rules[{name!r}]: the mask must be a str, got {mask!r}")
        if pad is not PAD_TOKEN_ID and not isinstance(pad, (bool, numbers.Integral, float)):
            raise TypeError(f"rules[{name!r}]: the pad must be a number or PAD_TOKEN_ID, "
                            f"got {pad!r}")
        merged[name] = (mask, pad)
    return merged


def check_coverage(out: TensorDictBase, plan: NestPlan, strict: bool) -> None:
    """Report every tensor with a sequence axis (ndim >= 2) still dense after nesting."""
    dense = []
    for key in out.keys():
        if out.is_non_tensor(key) or key in plan.dense_ok:
            continue
        value = out.get(key)
        if not value.is_nested and value.dim() >= 2:
            dense.append(f"{key} {tuple(value.shape)} {value.dtype} "
                         f"{value.numel() * value.element_size()} bytes")
    if not dense:
        return
    text = ("nest_by_mask left these tensors dense (give them a rule, or list them in "
            "ignore_dense): " + "; ".join(dense))
    if strict:
        raise DenseFieldError(text)
    warnings.warn(text, UserWarning, stacklevel=3)


def batch_widths(td, tensors=None) -> tuple[int | None, int | None]:
    """(P, R) of a dense batch: R = non-tensor max_response_length, else the width of
    responses, else of response_mask; P = the width of prompts, else S - R."""
    tensors = _tensor_keys(td) if tensors is None else tensors
    response_width = _response_width(td, tensors)
    return _prompt_width(td, tensors, response_width), response_width


def stash_of(td, name: str = "td") -> dict:
    """The `_nesting` entry of a nested batch, or ValueError."""
    _check_batch(td, name)
    if STASH not in td.keys() or not td.is_non_tensor(STASH):
        raise ValueError(f"{name} is not a nested batch: it has no non-tensor entry {STASH!r} "
                         "(make it with nest_by_mask)")
    return td.get_non_tensor(STASH)


def _check_batch(td, name: str) -> None:
    if not isinstance(td, TensorDictBase):
        raise TypeError(f"{name} must be a TensorDict, got {type(td).__name__}")
    if td.batch_dims != 1:
        raise ValueError(f"{name} must have one batch dimension, got batch_size "
                         f"{list(td.batch_size)}")


def _tensor_keys(td) -> list[str]:
    """The tensor entries (TypeError on a sub-TensorDict or an already jagged tensor)."""
    out = []
    for key in td.keys():
        if td.is_non_tensor(key):
            continue
        value = td.get(key)
        if isinstance(value, TensorDictBase):
            raise TypeError(f"td[{key!r}] is a nested TensorDict; nesting handles flat batches")
        if value.is_nested:
            raise TypeError(f"td[{key!r}] is already a jagged tensor")
        out.append(key)
    return out


def _response_width(td, tensors) -> int | None:
    if "max_response_length" in td.keys():
        if not td.is_non_tensor("max_response_length"):
            raise TypeError("td['max_response_length'] must be a non-tensor int")
        value = td.get_non_tensor("max_response_length")
        if not _is_int(value):
            raise TypeError(f"td['max_response_length'] must be an int, got {value!r}")
        if value < 0:
            raise ValueError(f"td['max_response_length'] must be >= 0, got {value}")
        return int(value)
    for key in ("responses", "response_mask"):
        if key in tensors:
            return _width(td, key)
    return None


def _prompt_width(td, tensors, response_width) -> int | None:
    if "prompts" in tensors:
        return _width(td, "prompts")
    if ATTENTION_MASK in tensors and response_width is not None:
        total = _width(td, ATTENTION_MASK)
        if response_width > total:
            raise ValueError(f"R = {response_width} exceeds the width {total} of "
                             f"{ATTENTION_MASK!r}")
        return total - response_width
    return None


def _width(td, key: str) -> int:
    value = td.get(key)
    if value.dim() < 2:
        raise ValueError(f"td[{key!r}] must be at least 2-D (B, width), got shape "
                         f"{tuple(value.shape)}")
    return int(value.shape[1])


def _mask_info(td, name: str, batch: int) -> MaskInfo:
    mask = td.get(name)
    if mask.dim() != 2 or mask.shape[0] != batch:
        raise ValueError(f"mask {name!r} must have shape (B, width) = ({batch}, ...), got "
                         f"{tuple(mask.shape)}")
    return MaskInfo(int(mask.shape[1]), mask.dtype, False)


def _names(values, name: str) -> set[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a collection of field names, got {values!r}")
    out = set()
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"{name} must hold str field names, got {value!r}")
        out.add(value)
    return out


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _ratio(a: int, b: int) -> float:
    if b == 0:
        return 1.0 if a == 0 else float("inf")
    return a / b


# --------------------------------------------------------------------------- nest_by_mask


def nest_by_mask(td, *, pad_token_id=None, rules=None, strict=False, ignore_dense=()):
    """A new TensorDict: each ruled field as a jagged tensor of its real positions (row i =
    `field[i][mask[i] == 1]`, column order), each mask as its run-length encoding."""
    plan = plan_nesting(td, pad_token_id=pad_token_id, rules=rules, strict=strict,
                        ignore_dense=ignore_dense)
    mask_rows = _mask_rows(td, plan)
    runs = {name: [_runs(row) for row in rows] for name, rows in mask_rows.items()}
    devices = {name: _mask_device(td, name, info) for name, info in plan.masks.items()}
    token_offsets = {name: _offsets([sum(row) for row in rows], devices[name])
                     for name, rows in mask_rows.items()}

    out = TensorDict({}, batch_size=td.batch_size, device=td.device)
    for key in td.keys():
        if key in plan.fields:
            rule = plan.fields[key]
            out.set(key, _nest_field(td.get(key), rule, mask_rows[rule.mask],
                                     token_offsets[rule.mask]))
        elif key in plan.masks:
            _set_runs(out, key, runs[key], devices[key])
        else:
            out.set(key, td.get(key))
    for name, info in plan.masks.items():
        if info.derived:
            _set_runs(out, name, runs[name], devices[name])
    if "max_prompt_length" in plan.added:
        out.set_non_tensor("max_prompt_length", plan.prompt_width)
    if "max_response_length" in plan.added:
        out.set_non_tensor("max_response_length", plan.response_width)
    out.set_non_tensor(STASH, plan.stash())
    check_coverage(out, plan, strict)
    return out


def _mask_device(td, name: str, info: MaskInfo) -> torch.device:
    """Where a mask's encoding lives: the mask's device (a derived mask: attention_mask's)."""
    return td.get(ATTENTION_MASK if info.derived else name).device


def _mask_rows(td, plan: NestPlan) -> dict[str, list[list[int]]]:
    """Each mask as 0/1 int lists (derived masks: a split of attention_mask at P)."""
    rows: dict[str, list[list[int]]] = {}
    for name, info in plan.masks.items():
        if info.derived:
            continue
        rows[name] = []
        for i, row in enumerate(td.get(name).tolist()):
            for value in row:
                if value not in (0, 1):  # True/False and 0.0/1.0 compare equal to 1/0
                    raise ValueError(f"mask {name!r} row {i} holds {value!r}: masks must be 0/1")
            rows[name].append([int(v) for v in row])
    for name, info in plan.masks.items():
        if info.derived:
            split = plan.prompt_width
            attention = rows[ATTENTION_MASK]
            rows[name] = [r[:split] if name == PROMPT_MASK else r[split:] for r in attention]
    return rows


def _runs(row: list[int]) -> list[tuple[int, int]]:
    """(start column, length) of every run of ones, left to right."""
    out: list[tuple[int, int]] = []
    for j, value in enumerate(row):
        if value == 1 and (j == 0 or row[j - 1] == 0):
            out.append((j, 1))
        elif value == 1:
            start, length = out[-1]
            out[-1] = (start, length + 1)
    return out


def _offsets(lengths: list[int], device) -> torch.Tensor:
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int64, device=device)


def _nest_field(value: torch.Tensor, rule: FieldRule, mask_rows, offsets) -> torch.Tensor:
    if rule.permute is not None:
        value = value.permute(*rule.permute)
    trailing = tuple(value.shape[2:])
    kept = []
    for row, mask in zip(value.tolist(), mask_rows):
        for element, m in zip(row, mask):
            if m == 1:
                kept.append(element)
    flat = torch.tensor(kept, dtype=value.dtype).reshape((len(kept), *trailing))
    return torch.nested.nested_tensor_from_jagged(flat.to(offsets.device), offsets=offsets)


def _set_runs(out, mask: str, runs, device) -> None:
    starts = [start for row in runs for start, _ in row]
    lengths = [length for row in runs for _, length in row]
    offsets = _offsets([len(row) for row in runs], device)
    starts_key, lengths_key = rle_keys(mask)
    out.set(starts_key, torch.nested.nested_tensor_from_jagged(
        torch.tensor(starts, dtype=torch.int64, device=device), offsets=offsets))
    out.set(lengths_key, torch.nested.nested_tensor_from_jagged(
        torch.tensor(lengths, dtype=torch.int64, device=device), offsets=offsets))


# --------------------------------------------------------------------------- unnest_by_mask


def unnest_by_mask(td):
    """The exact inverse of `nest_by_mask`, on a whole nested batch or any contiguous chunk of it:
    fields dense again (pad at mask-0 positions), masks back with their dtype and full width."""
    stash = stash_of(td)
    masks = {name: _unpack_mask(td, name, info) for name, info in stash["masks"].items()}
    added = set(stash["added"])
    dropped = set(added) | {STASH} | {k for m in stash["masks"] for k in rle_keys(m)}
    out = TensorDict({}, batch_size=td.batch_size, device=td.device)
    for key in stash["order"]:
        if key in stash["fields"]:
            if key in td.keys():  # a field removed after nesting stays removed
                out.set(key, _unnest_field(td, key, stash["fields"][key], masks))
        elif key in stash["masks"]:
            rows, info = masks[key]
            out.set(key, torch.tensor(rows, dtype=info["dtype"], device=_device_of(td, key))
                    .reshape(len(rows), info["width"]))
        elif key in td.keys():
            out.set(key, td.get(key))
    for key in td.keys():  # entries added to the nested batch after nesting
        if key not in out.keys() and key not in dropped and key not in stash["fields"]:
            out.set(key, td.get(key))
    return out


def _device_of(td, mask: str):
    return td.get(rle_keys(mask)[0]).device


def _unpack_mask(td, name: str, info: dict) -> tuple[list[list[int]], dict]:
    """A mask's 0/1 rows from its run-length encoding (validated against its width)."""
    starts_key, lengths_key = rle_keys(name)
    for key in (starts_key, lengths_key):
        if key not in td.keys() or not _is_jagged(td.get(key)):
            raise ValueError(f"the nested batch's {key!r} must be a contiguous jagged tensor")
    all_starts, all_lengths = _jagged_rows(td.get(starts_key)), _jagged_rows(td.get(lengths_key))
    if len(all_starts) != td.batch_size[0] or len(all_lengths) != td.batch_size[0]:
        raise ValueError(f"{starts_key!r} must have {td.batch_size[0]} rows")
    width = info["width"]
    rows = []
    for i, (starts, lengths) in enumerate(zip(all_starts, all_lengths)):
        if starts.numel() != lengths.numel():
            raise ValueError(f"{starts_key!r} and {lengths_key!r} differ in row {i}")
        row, end = [0] * width, 0
        for start, length in zip(starts.tolist(), lengths.tolist()):
            if start < end or length < 1 or start + length > width:
                raise ValueError(f"{name!r} row {i}: runs overlap or fall outside width "
                                 f"{width}")
            for j in range(start, start + length):
                row[j] = 1
            end = start + length
        rows.append(row)
    return rows, info


def _unnest_field(td, key: str, rule: dict, masks) -> torch.Tensor:
    value = td.get(key)
    if not _is_jagged(value):
        raise ValueError(f"field {key!r} of the nested batch is not a jagged tensor")
    rows, info = masks[rule["mask"]]
    trailing = tuple(value.shape[2:])
    pad_element = _filled(trailing, rule["pad"])
    dense = []
    for i, (mask, real) in enumerate(zip(rows, _jagged_rows(value))):
        if real.shape[0] != sum(mask):
            raise ValueError(f"field {key!r} row {i} holds {real.shape[0]} values, its mask "
                             f"{rule['mask']!r} has {sum(mask)} ones")
        values = real.tolist()
        row, k = [], 0
        for m in mask:
            if m == 1:
                row.append(values[k])
                k += 1
            else:
                row.append(pad_element)
        dense.append(row)
    out = torch.tensor(dense, dtype=value.dtype).reshape((len(rows), info["width"], *trailing))
    if rule["permute"] is not None:
        out = out.permute(*rule["permute"]).contiguous()
    return out.to(value.device)


def _filled(shape: tuple[int, ...], value):
    """A nested list of `shape` holding `value` (just `value` for shape ())."""
    if not shape:
        return value
    return [_filled(shape[1:], value) for _ in range(shape[0])]


def _jagged_rows(value: torch.Tensor) -> list[torch.Tensor]:
    """The rows of a jagged tensor, read from its offsets (and lengths, if it has holes)."""
    offsets = value.offsets().tolist()
    lengths = value.lengths().tolist() if value.lengths() is not None else \
        [b - a for a, b in zip(offsets, offsets[1:])]
    values = value.values()
    return [values[start:start + n] for start, n in zip(offsets, lengths)]


def _is_jagged(value) -> bool:
    """A contiguous jagged tensor (no holes between rows), as nesting makes them."""
    return (isinstance(value, torch.Tensor) and value.is_nested and value.layout == torch.jagged
            and value.lengths() is None)


# --------------------------------------------------------------------------- chunk_nested


def chunk_nested(td, n):
    """`n` contiguous row slices as `torch.chunk` makes them (ceil(B/n) rows each, the last one
    shorter, fewer than n when B is small). Slices of the TensorDict, which keeps every jagged
    tensor's offsets consistent (a jagged tensor cannot be sliced on dim 0 directly)."""
    _check_batch(td, "td")
    if not _is_int(n):
        raise TypeError(f"n must be an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    batch = td.batch_size[0]
    if batch == 0:
        return [td[0:0] for _ in range(n)]
    size = -(-batch // n)
    pieces = []
    start = 0
    while start < batch:
        pieces.append(td[start:min(start + size, batch)])
        start += size
    return pieces


# --------------------------------------------------------------------------- extract_response


def extract_response(td, output):
    """The response-level `(B, R, *trailing)` tensor of a model output over the real tokens.

    Column j of row i is the output at the real token just before response token j (the logit
    that predicts it): row i's real tokens are p_i prompt tokens then r_i response tokens, so
    that is flat position p_i - 1 + j within the row. Zeros beyond r_i.

        real tokens   p p p r r r          output row  o0 o1 o2 o3 o4 o5
        response      r0 r1 r2      →      result row  o2 o3 o4 0 ...  (R columns)
    """
    prompt_width, response_width, attention = _attention_rows(td)
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"output must be a tensor, got {type(output).__name__}")
    if output.is_nested and output.layout != torch.jagged:
        raise TypeError("output must be a jagged (torch.jagged) nested tensor or a flat tensor")
    batch = len(attention)
    totals = [sum(row) for row in attention]
    rows = _output_rows(output, totals)
    trailing = tuple(output.shape[2:] if output.is_nested else output.shape[1:])
    zero = _filled(trailing, 0)
    result = []
    for i, (row, values) in enumerate(zip(attention, rows)):
        p = sum(row[:prompt_width])
        r = sum(row[prompt_width:])
        if r > response_width:
            raise ValueError(f"row {i} has {r} response tokens, more than R = "
                             f"{response_width} (no silent truncation)")
        if p == 0 and r > 0:
            raise ValueError(f"row {i} has an empty prompt and {r} response tokens: no logit "
                             "predicts its first response token")
        out_row = [values[p - 1 + j] for j in range(r)]
        out_row += [zero] * (response_width - r)
        result.append(out_row)
    tensor = torch.tensor(result, dtype=output.dtype)
    return tensor.reshape((batch, response_width, *trailing)).to(output.device)


def _attention_rows(td) -> tuple[int, int, list[list[int]]]:
    """(P, R, attention rows as 0/1 lists) of a dense or nested batch."""
    _check_batch(td, "td")
    if STASH in td.keys():
        stash = stash_of(td)
        prompt_width, response_width = stash["max_prompt_length"], stash["max_response_length"]
        if ATTENTION_MASK not in stash["masks"]:
            raise ValueError(f"the nested batch has no {ATTENTION_MASK!r} encoding")
        rows, _ = _unpack_mask(td, ATTENTION_MASK, stash["masks"][ATTENTION_MASK])
    else:
        tensors = _tensor_keys(td)
        if ATTENTION_MASK not in tensors:
            raise ValueError(f"td has no {ATTENTION_MASK!r}")
        prompt_width, response_width = batch_widths(td, tensors)
        rows = []
        for i, row in enumerate(td.get(ATTENTION_MASK).tolist()):
            if any(v not in (0, 1) for v in row):
                raise ValueError(f"mask {ATTENTION_MASK!r} row {i} is not 0/1")
            rows.append([int(v) for v in row])
    if response_width is None or prompt_width is None:
        raise ValueError("R is unknown: td has no responses, response_mask or non-tensor "
                         "max_response_length")
    return prompt_width, response_width, rows


def _output_rows(output: torch.Tensor, totals: list[int]) -> list[list]:
    """The output as one list of per-token values per row, checked against the row lengths."""
    if output.is_nested:
        if output.dim() < 2 or output._ragged_idx != 1:
            raise ValueError("output must be ragged on dim 1")
        rows = _jagged_rows(output)
        if len(rows) != len(totals):
            raise ValueError(f"output must have {len(totals)} rows ragged on dim 1, got "
                             f"{len(rows)} rows")
        out = []
        for i, (row, n) in enumerate(zip(rows, totals)):
            if row.shape[0] != n:
                raise ValueError(f"output row {i} has {row.shape[0]} tokens, the batch row has "
                                 f"{n} real tokens")
            out.append(row.tolist())
        return out
    if output.dim() < 1 or output.shape[0] != sum(totals):
        raise ValueError(f"a flat output must have shape (nnz, ...) with nnz = {sum(totals)} "
                         f"real tokens, got {tuple(output.shape)}")
    flat = output.tolist()
    out, start = [], 0
    for n in totals:
        out.append(flat[start:start + n])
        start += n
    return out


# --------------------------------------------------------------------------- pad_to_response_width


def pad_to_response_width(td, *fields):
    """Dense `(B, R, *trailing)` response-axis fields of a nested batch (or chunk): values back
    at their original columns, zeros elsewhere, exactly R wide — never the chunk's own maximum,
    never the total token count, never truncated."""
    stash = stash_of(td)
    for name in fields:
        if not isinstance(name, str):
            raise TypeError(f"field names must be str, got {name!r}")
    response_width = stash["max_response_length"]
    if response_width is None:
        raise ValueError("the nested batch has no max_response_length")
    out = TensorDict({}, batch_size=td.batch_size, device=td.device)
    for name in fields:
        rule = stash["fields"].get(name)
        if rule is None or name not in td.keys():
            raise ValueError(f"{name!r} is not a nested field of td")
        if rule["mask"] not in (RESPONSE_ATTENTION_MASK, "response_mask"):
            raise ValueError(f"{name!r} is nested by {rule['mask']!r}, not by the response "
                             "attention: it is not a response-axis field")
        rows, _ = _unpack_mask(td, rule["mask"], stash["masks"][rule["mask"]])
        value = td.get(name)
        trailing = tuple(value.shape[2:])
        zero = _filled(trailing, 0)
        dense = []
        for i, (mask, real) in enumerate(zip(rows, _jagged_rows(value))):
            if real.shape[0] != sum(mask):
                raise ValueError(f"field {name!r} row {i} holds {real.shape[0]} values, its "
                                 f"mask has {sum(mask)} ones")
            values = real.tolist()
            row, k = [zero] * response_width, 0
            for j, m in enumerate(mask):
                if m == 1:
                    if j >= response_width:
                        raise ValueError(f"field {name!r} row {i} has a real token at column "
                                         f"{j}, beyond R = {response_width}")
                    row[j] = values[k]
                    k += 1
            dense.append(row)
        tensor = torch.tensor(dense, dtype=value.dtype)
        out.set(name, tensor.reshape((len(rows), response_width, *trailing)).to(value.device))
    return out


# --------------------------------------------------------------------------- payload_report


def payload_report(dense_td, nested_td) -> PayloadReport:
    """Bytes of a dense batch, of its nested form, and of the real elements alone.

    dense_bytes / nested_bytes: every tensor storage the TensorDict holds (jagged values, offsets
    and run-length encodings included), a storage shared by several tensors counted once.
    ceiling_bytes: per ruled field, ones-in-its-mask × bytes per position; masks 0 (their
    encoding is overhead); any other tensor (per-sample fields) in full.
    efficiency = ceiling_bytes / nested_bytes (= compression / ceiling).
    """
    _check_batch(dense_td, "dense_td")
    stash = stash_of(nested_td, "nested_td")
    dense_bytes = _storage_bytes(dense_td)
    nested_bytes = _storage_bytes(nested_td)
    ceiling_bytes = _ceiling_bytes(dense_td, stash)
    return PayloadReport(
        dense_bytes=dense_bytes,
        nested_bytes=nested_bytes,
        ceiling_bytes=ceiling_bytes,
        compression=_ratio(dense_bytes, nested_bytes),
        ceiling=_ratio(dense_bytes, ceiling_bytes),
        efficiency=_ratio(ceiling_bytes, nested_bytes),
        wire_bytes_dense=_wire_bytes(dense_td),
        wire_bytes_nested=_wire_bytes(nested_td),
    )


def _storage_bytes(td) -> int:
    seen: dict[tuple[str, int], int] = {}
    for key in td.keys():
        if td.is_non_tensor(key):
            continue
        value = td.get(key)
        parts = [value]
        if value.is_nested:
            parts = [value.values(), value.offsets()]
            if value.lengths() is not None:
                parts.append(value.lengths())
        for part in parts:
            storage = part.untyped_storage()
            seen[(str(part.device), storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())


def _ceiling_bytes(td, stash: dict) -> int:
    rules = {name: rule[0] for name, rule in merge_rules(None).items() if rule is not None}
    rules.update({name: rule["mask"] for name, rule in stash["fields"].items()})
    masks = set(stash["masks"]) | set(rules.values())
    prompt_width = stash["max_prompt_length"]
    total = 0
    for key in _tensor_keys(td):
        value = td.get(key)
        if key in masks:
            continue
        mask = _ceiling_mask(td, rules.get(key), prompt_width)
        if (mask is None or value.dim() < 2 or mask.numel() == 0
                or value.numel() % mask.numel() != 0):
            total += value.numel() * value.element_size()
            continue
        per_position = value.numel() // mask.numel() * value.element_size()  # trailing dims
        ones = sum(1 for row in mask.tolist() for v in row if v != 0)
        total += ones * per_position
    return total


def _ceiling_mask(td, mask: str | None, prompt_width: int | None):
    if mask is None:
        return None
    if mask in td.keys() and not td.is_non_tensor(mask):
        return td.get(mask)
    if mask in DERIVED_MASKS and ATTENTION_MASK in td.keys() and prompt_width is not None:
        attention = td.get(ATTENTION_MASK)
        return attention[:, :prompt_width] if mask == PROMPT_MASK else attention[:, prompt_width:]
    return None


def _wire_bytes(td) -> int:
    buffer = io.BytesIO()
    torch.save(td, buffer)
    return len(buffer.getvalue())

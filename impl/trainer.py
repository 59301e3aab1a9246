"""Optimized `trainer` (spec: trainer.md): identical results to `reference/trainer.py`.

`pad_to_multiple` builds the padding sample once per field with torch ops on the field's device
(a 0/1 mask row from two comparisons against `arange(T)`, tokens by `where`, positions by
`cumsum`) and expands it over the padding rows; `real_rows` is one boolean index;
`broadcast_stepwise_advantages` is one gather and one `where` on the mask's device.
"""

from __future__ import annotations

import math
import numbers

import torch
from tensordict import TensorDict, TensorDictBase

from batchproof.impl._sync import Verdicts, host_put, host_read
from batchproof.reference._checks import check_token_id
from batchproof.reference.trainer import (  # the contract's argument checks, shared with the oracle
    _check_fields,
    _device,
    _entry,
    _int,
    _positive_int,
    _response_width,
    check_replay_fields,
)

LAYOUTS = ("left", "two_segment")
SCALAR_TYPES = (type(None), bool, int, float, str)


def required_multiple(
    dp_size, *, mini_batch_size=None, critic_mini_batch_size=None, n=1, actor_updates=True
) -> int:
    """lcm of `dp_size`, `critic_mini_batch_size * n` and (actor updating) `mini_batch_size * n`."""
    _positive_int(dp_size, "dp_size")
    _positive_int(n, "n")
    if mini_batch_size is not None:
        _positive_int(mini_batch_size, "mini_batch_size")
    if critic_mini_batch_size is not None:
        _positive_int(critic_mini_batch_size, "critic_mini_batch_size")
    if not isinstance(actor_updates, bool):
        raise TypeError(f"actor_updates must be a bool, got {type(actor_updates).__name__}")
    sizes = [dp_size]
    if critic_mini_batch_size is not None:
        sizes.append(critic_mini_batch_size * n)
    if actor_updates and mini_batch_size is not None:
        sizes.append(mini_batch_size * n)
    return math.lcm(*sizes)


def pad_to_multiple(
    td, multiple, *, eos_token_id, pad_token_id=None, layout=None, min_length=2
) -> TensorDict:
    """Append synthetic padding rows so the batch size is a multiple of `multiple`."""
    start = _padding_start(td, multiple, eos_token_id, pad_token_id, layout, min_length)
    batch = td.batch_size[0]
    count = -batch % multiple
    if count == 0:
        return td
    pad_token_id = pad_token_id if pad_token_id is not None else td.get_non_tensor("pad_token_id")
    width = td.get("input_ids").shape[1]

    out = TensorDict({}, batch_size=[batch + count], device=td.device)
    for key in td.keys():
        if td.is_non_tensor(key):
            out.set_non_tensor(key, td.get_non_tensor(key))
            continue
        value = td.get(key)
        trailing = tuple(value.shape[1:])
        if key in ("input_ids", "attention_mask", "position_ids"):
            mask = _mask_row(width, start, min_length, value.device)
            row = _token_row(key, mask, eos_token_id, pad_token_id).to(value.dtype)
            extra = row.expand((count,) + trailing)
        elif key == "is_padding":
            extra = torch.ones(count, dtype=value.dtype, device=value.device)
        elif key in _REPLAY_FILL:
            extra = _REPLAY_FILL[key](value, count)
        else:
            extra = torch.zeros((count,) + trailing, dtype=value.dtype, device=value.device)
        out.set(key, torch.cat([value, extra], dim=0))
    if "is_padding" not in td.keys():
        device = _device(td)
        flags = torch.arange(batch + count, device=device) >= batch
        out.set("is_padding", flags)
    return out


def _dummy_routes(value: torch.Tensor, count: int) -> torch.Tensor:
    """(count, T, layers, topk): the dummy route 0 .. topk-1 on every slot."""
    routes = torch.arange(value.shape[-1], dtype=value.dtype, device=value.device)
    return routes.expand((count,) + tuple(value.shape[1:]))


# router replay: a padding row's slots hold the dummy route and are all masked, its support -1
_REPLAY_FILL = {
    "routed_experts": _dummy_routes,
    "router_padding_mask": lambda value, count: torch.ones(
        (count,) + tuple(value.shape[1:]), dtype=torch.bool, device=value.device),
    "sample_support": lambda value, count: torch.full(
        (count,) + tuple(value.shape[1:]), -1, dtype=value.dtype, device=value.device),
}


def _mask_row(width: int, start: int, length: int, device) -> torch.Tensor:
    columns = torch.arange(width, device=device)
    return ((columns >= start) & (columns < start + length)).to(torch.int64)


def _token_row(key: str, mask: torch.Tensor, eos: int, pad: int) -> torch.Tensor:
    if key == "input_ids":
        return torch.where(mask == 1, eos, pad)
    if key == "attention_mask":
        return mask
    return (torch.cumsum(mask, 0) - 1).clamp_(min=0)


def real_rows(td) -> TensorDict:
    """The rows with `is_padding == False` (the batch itself when there is no `is_padding`)."""
    if not isinstance(td, TensorDictBase):
        raise TypeError(f"td must be a TensorDict, got {type(td).__name__}")
    if td.batch_dims != 1:
        raise ValueError(f"td must have one batch dimension, got batch_size {list(td.batch_size)}")
    if "is_padding" not in td.keys():
        return td
    flags = _is_padding(td)
    _check_fields(td)
    keep = ~flags
    kept = torch.nonzero_static(keep, size=host_read(keep.sum())).flatten()  # the output size
    return td[kept]


def broadcast_stepwise_advantages(scalars, traj_ids, response_mask) -> torch.Tensor:
    """`adv[i, j] = scalars[traj_ids[i]]` where `response_mask[i, j] == 1`, else +0.0; float32."""
    with Verdicts() as verdicts:  # the device's verdicts, read once, in the reference's order
        _check_response_mask(response_mask, verdicts)
        device = response_mask.device
        ids = _traj_ids(traj_ids, response_mask.shape[0], device)
        values = _scalars(scalars, device, verdicts)
        bad = (ids < 0) | (ids >= values.shape[0])

        def out_of_range() -> ValueError:
            row = int(bad.nonzero()[0, 0])
            return ValueError(f"traj_ids[{row}]={int(ids[row])} is out of range for "
                              f"{values.shape[0]} trajectory scalars")
        verdicts.add(bad.any(), out_of_range)
    per_row = values[ids].unsqueeze(1)
    return torch.where(response_mask == 1, per_row, 0.0)


# ---------------------------------------------------------------------------------------------
# validation (same checks, same order and exception types as the reference)


def _padding_start(td, multiple, eos_token_id, pad_token_id, layout, min_length) -> int:
    """Validate everything and return the first column of the padding sample's real tokens."""
    if not isinstance(td, TensorDictBase):
        raise TypeError(f"td must be a TensorDict, got {type(td).__name__}")
    if td.batch_dims != 1:
        raise ValueError(f"td must have one batch dimension, got batch_size {list(td.batch_size)}")
    _positive_int(multiple, "multiple")
    check_token_id(eos_token_id, "eos_token_id")
    _int(min_length, "min_length")
    if min_length < 2:
        raise ValueError(f"min_length must be >= 2, got {min_length}")
    layout = _entry(td, "layout", layout)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    check_token_id(_entry(td, "pad_token_id", pad_token_id), "pad_token_id")
    _check_fields(td)

    batch = td.batch_size[0]
    if "input_ids" not in td.keys():
        raise ValueError("td has no 'input_ids' field")
    input_ids = td.get("input_ids")
    if input_ids.dim() != 2:
        raise ValueError(f"td['input_ids'] must be (B, T), got {tuple(input_ids.shape)}")
    width = input_ids.shape[1]
    if "attention_mask" in td.keys() and tuple(td.get("attention_mask").shape) != (batch, width):
        raise ValueError(f"td['attention_mask'] must have the shape of input_ids {(batch, width)}, "
                         f"got {tuple(td.get('attention_mask').shape)}")
    if "position_ids" in td.keys():
        shape = tuple(td.get("position_ids").shape)
        if len(shape) not in (2, 3) or shape[-1] != width:
            raise ValueError(f"td['position_ids'] must be (B, T) or (B, C, T) with T={width}, "
                             f"got {shape}")
    if "is_padding" in td.keys():
        _is_padding(td)

    response_width = _response_width(td)
    if response_width > width:
        raise ValueError(f"response width {response_width} is wider than the sequence ({width})")
    check_replay_fields(td, batch, width, response_width)
    response_tokens = min_length // 2 if response_width > 0 else 0
    prompt_tokens = min_length - response_tokens
    if layout == "left":
        fits = min_length <= width and response_tokens <= response_width
        start = width - min_length
    else:
        prompt_width = width - response_width
        fits = prompt_tokens <= prompt_width and response_tokens <= response_width
        start = prompt_width - prompt_tokens
    if not fits:
        raise ValueError(
            f"min_length={min_length} ({prompt_tokens} prompt + {response_tokens} response "
            f"tokens) is wider than the batch (T={width}, R={response_width}, layout {layout!r})")
    return start


def _is_padding(td) -> torch.Tensor:
    flags = td.get("is_padding")
    if flags.dtype != torch.bool or flags.dim() != 1:
        raise ValueError(f"td['is_padding'] must be a bool (B,) tensor, got {flags.dtype} "
                         f"{tuple(flags.shape)}")
    return flags


def _check_response_mask(response_mask, verdicts: Verdicts) -> None:
    if not isinstance(response_mask, torch.Tensor):
        raise TypeError(f"response_mask must be a tensor, got {type(response_mask).__name__}")
    if response_mask.dim() != 2:
        raise ValueError(f"response_mask must be (B, R), got {tuple(response_mask.shape)}")
    bad = (response_mask != 0) & (response_mask != 1)

    def error() -> ValueError:
        row, column = (int(v) for v in bad.nonzero()[0])
        return ValueError(f"response_mask[{row}] holds {response_mask[row, column].item()}; "
                          "a mask holds 0 and 1 only")
    verdicts.add(bad.any(), error)


def _traj_ids(traj_ids, batch, device) -> torch.Tensor:
    if isinstance(traj_ids, torch.Tensor):
        if traj_ids.dim() != 1:
            raise ValueError(f"traj_ids must be 1-D, got {tuple(traj_ids.shape)}")
        if traj_ids.is_floating_point() or traj_ids.is_complex() or traj_ids.dtype == torch.bool:
            raise TypeError(f"traj_ids must hold integers, got {traj_ids.dtype}")
        ids = traj_ids.to(device=device, dtype=torch.int64)
    elif isinstance(traj_ids, (str, bytes)) or not hasattr(traj_ids, "__iter__"):
        raise TypeError(f"traj_ids must be a sequence of ints, got {type(traj_ids).__name__}")
    else:
        traj_ids = list(traj_ids)
        for i, value in enumerate(traj_ids):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise TypeError(f"traj_ids[{i}] must be an int, got {type(value).__name__}")
        ids = host_put([int(v) for v in traj_ids], dtype=torch.int64, device=device)
    if ids.shape[0] != batch:
        raise ValueError(f"traj_ids has {ids.shape[0]} entries, but response_mask has "
                         f"{batch} rows")
    return ids


def _scalars(scalars, device, verdicts: Verdicts) -> torch.Tensor:
    if isinstance(scalars, torch.Tensor):
        if scalars.dim() != 1:
            raise ValueError(f"scalars must be 1-D, got {tuple(scalars.shape)}")
        if scalars.dtype == torch.bool or scalars.is_complex():
            raise TypeError(f"scalars must hold real numbers, got {scalars.dtype}")
        values = scalars.detach().to(device=device, dtype=torch.float32)
    elif isinstance(scalars, (str, bytes)) or not hasattr(scalars, "__iter__"):
        raise TypeError(f"scalars must be a sequence of floats, got {type(scalars).__name__}")
    else:
        scalars = list(scalars)
        for i, value in enumerate(scalars):
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise TypeError(f"scalars[{i}] must be a real number, got {type(value).__name__}")
        values = host_put([float(v) for v in scalars], dtype=torch.float32, device=device)
    infinite = ~torch.isfinite(values)

    def error() -> ValueError:
        index = int(infinite.nonzero()[0, 0])
        return ValueError(f"scalars[{index}]={values[index].item()} is not finite (in float32)")
    verdicts.add(infinite.any(), error)
    return values



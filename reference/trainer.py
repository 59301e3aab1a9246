"""Reference `trainer`: batch padding to a divisible size, step-wise advantages (spec: trainer.md).

The oracle for `impl/trainer.py`. Plain Python loops over lists; tensors are made at the end.

`pad_to_multiple`, B = 3 real rows, multiple 4, min_length 2 (1 prompt + 1 response token):

    layout "left"                          layout "two_segment" (P = 3, R = 2)
    row 0   . . p p r r     real           row 0   . p p r r      real
    row 1   . p p p r r     real           row 1   p p p r .      real
    row 2   p p p p r r     real           row 2   . . p r r      real
    row 3   . . . . e e     padding        row 3   . . e e .      padding: eos tokens, attended,
            is_padding [F F F T]                   response_mask / loss_mask all 0
"""

from __future__ import annotations

import math
import numbers

import torch
from tensordict import TensorDict, TensorDictBase

from batchproof.reference._checks import check_token_id
from batchproof.reference._routes import ROUTE_DTYPES, SUPPORT_DTYPES, SUPPORT_PADDING, dummy_route

LAYOUTS = ("left", "two_segment")
SCALAR_TYPES = (type(None), bool, int, float, str)
# fields with their own padding-row content; every other tensor field gets zeros of its dtype
TOKEN_FIELDS = ("input_ids", "attention_mask", "position_ids")
# router replay (docs/conventions.md): a padding row has no captured route, so every slot holds
# the dummy route 0 .. topk-1 and is masked, and no response token, so its support is all -1
REPLAY_FIELDS = ("routed_experts", "router_padding_mask", "sample_support")


def required_multiple(
    dp_size, *, mini_batch_size=None, critic_mini_batch_size=None, n=1, actor_updates=True
) -> int:
    """The batch-size multiple that splits into DP shards and actor/critic PPO mini-batches.

        dp 2, mini 15, n 8  →  lcm(2, 15 * 8) = 120
    """
    _positive_int(dp_size, "dp_size")
    _positive_int(n, "n")
    if mini_batch_size is not None:
        _positive_int(mini_batch_size, "mini_batch_size")
    if critic_mini_batch_size is not None:
        _positive_int(critic_mini_batch_size, "critic_mini_batch_size")
    if not isinstance(actor_updates, bool):
        raise TypeError(f"actor_updates must be a bool, got {type(actor_updates).__name__}")
    multiple = dp_size
    if critic_mini_batch_size is not None:
        multiple = math.lcm(multiple, critic_mini_batch_size * n)
    if actor_updates and mini_batch_size is not None:
        multiple = math.lcm(multiple, mini_batch_size * n)
    return multiple


def pad_to_multiple(
    td, multiple, *, eos_token_id, pad_token_id=None, layout=None, min_length=2
) -> TensorDict:
    """Append synthetic padding rows so the batch size is a multiple of `multiple`."""
    spec = _padding_spec(td, multiple, eos_token_id, pad_token_id, layout, min_length)
    batch = td.batch_size[0]
    padded_batch = -(-batch // multiple) * multiple
    if padded_batch == batch:
        return td

    count = padded_batch - batch
    out = TensorDict({}, batch_size=[padded_batch], device=td.device)
    for key in td.keys():
        if td.is_non_tensor(key):
            out.set_non_tensor(key, td.get_non_tensor(key))
            continue
        value = td.get(key)
        if key == "is_padding":
            rows = [True] * count
        else:
            rows = [_padding_row(key, tuple(value.shape[1:]), spec)] * count
        extra = torch.tensor(rows, dtype=value.dtype, device=value.device)
        extra = extra.reshape((count,) + tuple(value.shape[1:]))
        out.set(key, torch.cat([value, extra], dim=0))
    if "is_padding" not in td.keys():
        flags = [False] * batch + [True] * count
        out.set("is_padding", torch.tensor(flags, dtype=torch.bool, device=_device(td)))
    return out


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
    keep = [i for i, padding in enumerate(flags) if not padding]
    index = torch.tensor(keep, dtype=torch.int64)
    out = TensorDict({}, batch_size=[len(keep)], device=td.device)
    for key in td.keys():
        if td.is_non_tensor(key):
            out.set_non_tensor(key, td.get_non_tensor(key))
        else:
            value = td.get(key)
            out.set(key, value[index.to(value.device)])
    return out


def broadcast_stepwise_advantages(scalars, traj_ids, response_mask) -> torch.Tensor:
    """`adv[i, j] = scalars[traj_ids[i]]` where `response_mask[i, j] == 1`, else +0.0; float32.

        traj_ids  [0, 0, 1]         response_mask  . . 1 1       adv   .  .  a  a
        scalars   [a, b]                           . 1 1 .             .  a  a  .
                                                   1 1 1 1             b  b  b  b
    """
    mask = _response_mask(response_mask)
    ids = _traj_ids(traj_ids, len(mask))
    values = _scalars(scalars)
    for i, trajectory in enumerate(ids):
        if trajectory < 0 or trajectory >= len(values):
            raise ValueError(f"traj_ids[{i}]={trajectory} is out of range for "
                             f"{len(values)} trajectory scalars")
    rows = []
    for i, mask_row in enumerate(mask):
        rows.append([values[ids[i]] if m == 1 else 0.0 for m in mask_row])
    width = response_mask.shape[1]
    out = torch.tensor(rows, dtype=torch.float32).reshape(len(mask), width)
    return out.to(response_mask.device)


# ---------------------------------------------------------------------------------------------
# pad_to_multiple: validation and the padding row


class _Spec:
    """What a padding row looks like: widths, token ids, the real-token mask of the row."""

    def __init__(self, width, response_width, eos, pad, mask):
        self.width = width
        self.response_width = response_width
        self.eos = eos
        self.pad = pad
        self.mask = mask  # 1 on the padding sample's real tokens, over the sequence columns


def _padding_spec(td, multiple, eos_token_id, pad_token_id, layout, min_length) -> _Spec:
    """Validate everything (whether or not padding is needed) and describe the padding row."""
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
    pad_token_id = _entry(td, "pad_token_id", pad_token_id)
    check_token_id(pad_token_id, "pad_token_id")
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
    mask = [1 if start <= j < start + min_length else 0 for j in range(width)]
    return _Spec(width, response_width, eos_token_id, pad_token_id, mask)


def _padding_row(key: str, trailing: tuple[int, ...], spec: _Spec):
    """The padding sample's row of field `key`, as nested lists of the field's trailing shape."""
    if key == "input_ids":
        return [spec.eos if m == 1 else spec.pad for m in spec.mask]
    if key == "attention_mask":
        return list(spec.mask)
    if key == "position_ids":
        positions, running = [], 0
        for m in spec.mask:
            running += m
            positions.append(max(running - 1, 0))
        if len(trailing) == 2:  # multi-axis position ids (C, T): the same positions on every axis
            return [list(positions) for _ in range(trailing[0])]
        return positions
    if key == "routed_experts":  # (T, layers, topk): the dummy route on every slot
        return [[dummy_route(trailing[2]) for _ in range(trailing[1])] for _ in range(trailing[0])]
    if key == "router_padding_mask":  # (T,): no slot of a padding row holds a captured route
        return [True] * trailing[0]
    if key == "sample_support":  # (R, top_k): no response token, no support
        return [[SUPPORT_PADDING] * trailing[1] for _ in range(trailing[0])]
    return _zeros(trailing)


def check_replay_fields(td, batch: int, width: int, response_width: int) -> None:
    """The router-replay fields a batch may carry (docs/trainer.md, "Router replay"):
    `routed_experts` (B, T, layers, topk) of a route dtype whose dummy route fits,
    `router_padding_mask` (B, T) bool, `sample_support` (B, R, top_k) of a support dtype.
    TypeError for a dtype, ValueError for a shape, naming the field."""
    expected = {"routed_experts": (4, ROUTE_DTYPES, (batch, width)),
                "router_padding_mask": (2, (torch.bool,), (batch, width)),
                "sample_support": (3, SUPPORT_DTYPES, (batch, response_width))}
    for key, (rank, dtypes, leading) in expected.items():
        if key not in td.keys():
            continue
        value = td.get(key)
        if value.dtype not in dtypes:
            names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
            raise TypeError(f"td[{key!r}] must be {names}, got {value.dtype}")
        shape = tuple(value.shape)
        if len(shape) != rank or shape[:2] != leading or 0 in shape[2:]:
            raise ValueError(f"td[{key!r}] must be {rank}-D with leading {leading} and no empty "
                             f"trailing dimension, got {shape}")
        if key == "routed_experts" and value.dtype == torch.uint8 and shape[3] > 256:
            raise ValueError(f"td['routed_experts'] has topk {shape[3]}: its dummy route "
                             f"0 .. {shape[3] - 1} does not fit uint8")


def _zeros(shape: tuple[int, ...]):
    if not shape:
        return 0
    return [_zeros(shape[1:]) for _ in range(shape[0])]


def _response_width(td) -> int:
    """R: the width of `response_mask`, else the `max_response_length` entry, else 0."""
    if "response_mask" in td.keys():
        mask = td.get("response_mask")
        if mask.dim() != 2:
            raise ValueError(f"td['response_mask'] must be (B, R), got {tuple(mask.shape)}")
        return mask.shape[1]
    if "max_response_length" in td.keys() and td.is_non_tensor("max_response_length"):
        value = td.get_non_tensor("max_response_length")
        _int(value, "max_response_length")
        if value < 0:
            raise ValueError(f"max_response_length must be >= 0, got {value}")
        return value
    return 0


def _check_fields(td) -> None:
    """Only plain tensors and scalar non-tensor entries can be padded (or filtered) faithfully."""
    for key in td.keys():
        if td.is_non_tensor(key):
            value = td.get_non_tensor(key)
            if not isinstance(value, SCALAR_TYPES):
                raise ValueError(
                    f"td[{key!r}] is non-tensor data of type {type(value).__name__}: per-row "
                    "lists cannot be padded faithfully; store them as tensors")
            continue
        value = td.get(key)
        if isinstance(value, TensorDictBase):
            raise ValueError(f"td[{key!r}] is a nested TensorDict, which cannot be padded "
                             "faithfully; flatten it first")
        if not isinstance(value, torch.Tensor) or value.is_nested or value.layout != torch.strided:
            raise ValueError(f"td[{key!r}] is not a dense tensor ({type(value).__name__}); "
                             "it cannot be padded faithfully")


def _is_padding(td) -> list[bool]:
    flags = td.get("is_padding")
    if flags.dtype != torch.bool or flags.dim() != 1:
        raise ValueError(f"td['is_padding'] must be a bool (B,) tensor, got {flags.dtype} "
                         f"{tuple(flags.shape)}")
    return [bool(f) for f in flags.tolist()]


def _entry(td, key, given):
    if given is not None:
        return given
    if key in td.keys() and td.is_non_tensor(key):
        return td.get_non_tensor(key)
    raise ValueError(f"{key} is not given and the batch has no non-tensor {key!r} entry")


def _device(td) -> torch.device:
    if td.device is not None:
        return td.device
    for key in td.keys():
        if not td.is_non_tensor(key):
            return td.get(key).device
    return torch.device("cpu")


# ---------------------------------------------------------------------------------------------
# broadcast_stepwise_advantages: validation


def _response_mask(response_mask) -> list[list[int]]:
    if not isinstance(response_mask, torch.Tensor):
        raise TypeError(f"response_mask must be a tensor, got {type(response_mask).__name__}")
    if response_mask.dim() != 2:
        raise ValueError(f"response_mask must be (B, R), got {tuple(response_mask.shape)}")
    rows = response_mask.tolist()
    for i, row in enumerate(rows):
        for m in row:
            if m not in (0, 1):
                raise ValueError(f"response_mask[{i}] holds {m}; a mask holds 0 and 1 only")
    return [[int(m) for m in row] for row in rows]


def _traj_ids(traj_ids, batch) -> list[int]:
    if isinstance(traj_ids, torch.Tensor):
        if traj_ids.dim() != 1:
            raise ValueError(f"traj_ids must be 1-D, got {tuple(traj_ids.shape)}")
        if traj_ids.is_floating_point() or traj_ids.is_complex() or traj_ids.dtype == torch.bool:
            raise TypeError(f"traj_ids must hold integers, got {traj_ids.dtype}")
        ids = traj_ids.tolist()
    elif isinstance(traj_ids, (str, bytes)) or not hasattr(traj_ids, "__iter__"):
        raise TypeError(f"traj_ids must be a sequence of ints, got {type(traj_ids).__name__}")
    else:
        ids = []
        for i, value in enumerate(traj_ids):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise TypeError(f"traj_ids[{i}] must be an int, got {type(value).__name__}")
            ids.append(int(value))
    if len(ids) != batch:
        raise ValueError(f"traj_ids has {len(ids)} entries, but response_mask has {batch} rows")
    return ids


def _scalars(scalars) -> list[float]:
    """float32 values (as Python floats), each finite after the cast."""
    if isinstance(scalars, torch.Tensor):
        if scalars.dim() != 1:
            raise ValueError(f"scalars must be 1-D, got {tuple(scalars.shape)}")
        if scalars.dtype == torch.bool or scalars.is_complex():
            raise TypeError(f"scalars must hold real numbers, got {scalars.dtype}")
        raw = scalars.detach().to(torch.float32).cpu().tolist()
    elif isinstance(scalars, (str, bytes)) or not hasattr(scalars, "__iter__"):
        raise TypeError(f"scalars must be a sequence of floats, got {type(scalars).__name__}")
    else:
        raw = []
        for i, value in enumerate(scalars):
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise TypeError(f"scalars[{i}] must be a real number, got {type(value).__name__}")
            raw.append(float(value))
    out = []
    for i, value in enumerate(raw):
        value = torch.tensor(value, dtype=torch.float32).item()  # round to float32
        if not math.isfinite(value):
            raise ValueError(f"scalars[{i}]={value} is not finite (in float32)")
        out.append(value)
    return out


def _positive_int(value, name) -> None:
    _int(value, name)
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def _int(value, name) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")

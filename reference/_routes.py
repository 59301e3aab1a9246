"""The router-replay inputs every token-placing op shares: argument checks and the dummy route.

MoE RL replays at training time the expert routes the rollout engine chose (R3, "rollout
routing replay"): per token, per layer, the `topk` expert ids. They are captured for a prefix of
each sample's tokens and must follow every token wherever a layout moves it
([conventions.md](../docs/conventions.md#router-replay-routes-and-sample-support)).

    routed_experts[i]   [c_i, layers, topk] integer array (torch tensor or NumPy array),
                        c_i <= the sample's tokens: the routes of its first c_i tokens
    sample_support[i]   [r_i, top_k] integer array: per response token, the vocabulary ids the
                        sampler could draw, trailing -1 padding (SkyRL's bounded support)

Every slot that holds no captured route (a pad, a token past the captured prefix) gets the
dummy route `0, 1, ..., topk-1`: `topk` distinct experts, so that a dropless dispatcher's
`tokens * topk` invariant holds; the router padding mask is True exactly there. A slot of
`sample_support` that is no response token is a row of -1.

The structural checks (`check_routes`, `check_sample_support`) read shapes and dtypes only, one
sample at a time; the value checks (`check_route_values`, `check_support_values`) read every id.
`impl/` calls the structural checks as they are and may test values its own way, but on bad
values it calls the value checks for the message: both raise the same exception, same words.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

# the dtypes a route may have, kept as given on every output (never widened or narrowed)
ROUTE_DTYPES = (torch.uint8, torch.int16, torch.int32, torch.int64)
# the dtypes a sample-support row may have, kept as given
SUPPORT_DTYPES = (torch.int16, torch.int32, torch.int64)
SUPPORT_PADDING = -1  # a support slot with no vocabulary id; a non-response slot is all of it

_NUMPY_DTYPES = {np.dtype(np.uint8): torch.uint8, np.dtype(np.int8): torch.int8,
                 np.dtype(np.int16): torch.int16, np.dtype(np.int32): torch.int32,
                 np.dtype(np.int64): torch.int64, np.dtype(np.uint16): torch.uint16,
                 np.dtype(np.uint32): torch.uint32, np.dtype(np.uint64): torch.uint64,
                 np.dtype(np.bool_): torch.bool, np.dtype(np.float16): torch.float16,
                 np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}


@dataclass(frozen=True)
class RouteSpec:
    """What every sample's routes share: their dtype and `[layers, topk]`."""

    dtype: torch.dtype
    layers: int
    topk: int


@dataclass(frozen=True)
class SupportSpec:
    """What every sample's support rows share: their dtype and `top_k`."""

    dtype: torch.dtype
    top_k: int


def dummy_route(topk: int) -> list[int]:
    """The route of a slot without a captured one: `topk` distinct experts, 0 .. topk-1."""
    return list(range(topk))


def entry_dtype(entry) -> torch.dtype | None:
    """The torch dtype of a per-sample array (a tensor or a NumPy array), else None."""
    if isinstance(entry, torch.Tensor):
        return entry.dtype
    if isinstance(entry, np.ndarray):
        return _NUMPY_DTYPES.get(entry.dtype)
    return None


def per_sample(values, name: str, samples: int) -> list:
    """`values` as a list of `samples` entries, each an array (checked by the caller); a
    jagged nested tensor is read as its rows."""
    if isinstance(values, torch.Tensor) and values.is_nested:
        values = list(values.unbind())
    if isinstance(values, (torch.Tensor, np.ndarray)) or not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} must be a list with one array per sample, got "
                        f"{type(values).__name__}")
    if len(values) != samples:
        raise ValueError(f"{name} must have one entry per sample: got {len(values)} entries "
                         f"for {samples} samples")
    for i, entry in enumerate(values):
        if entry is None:
            raise ValueError(f"{name}[{i}] is None: give {name} for every sample or for none")
        if entry_dtype(entry) is None:
            raise TypeError(f"{name}[{i}] must be an integer tensor or NumPy array, got "
                            f"{type(entry).__name__}"
                            + (f" of {entry.dtype}" if isinstance(entry, np.ndarray) else ""))
    return list(values)


def check_routes(routed_experts, token_counts: list[int],
                 name: str = "routed_experts") -> RouteSpec | None:
    """The structure of `routed_experts` against each sample's token count (None: no routes).

    Raises, naming the sample: TypeError for a list that is not one, an entry that is no
    integer array of a route dtype, or a dtype that differs from sample 0's (one dtype per
    batch, never widened); ValueError for a wrong number of entries, a None entry, a rank other
    than 3, `[layers, topk]` differing from sample 0's or empty, more routes than tokens, or a
    `topk` whose dummy route `0 .. topk-1` does not fit the dtype.
    """
    if routed_experts is None:
        return None
    entries = per_sample(routed_experts, name, len(token_counts))
    spec = None
    for i, entry in enumerate(entries):
        dtype = entry_dtype(entry)
        if dtype not in ROUTE_DTYPES:
            raise TypeError(f"{name}[{i}] must hold integer expert ids of dtype uint8, int16, "
                            f"int32 or int64, got {dtype}")
        shape = tuple(entry.shape)
        if len(shape) != 3:
            raise ValueError(f"{name}[{i}] must be [captured tokens, layers, topk], got shape "
                             f"{shape}")
        if spec is None:
            if shape[1] < 1 or shape[2] < 1:
                raise ValueError(f"{name}[{i}] must have at least one layer and one expert "
                                 f"per token, got [layers, topk] = {list(shape[1:])}")
            spec = RouteSpec(dtype, shape[1], shape[2])
            _check_dummy_fits(spec, name)
        elif shape[1:] != (spec.layers, spec.topk):
            raise ValueError(f"{name}[{i}] has [layers, topk] = {list(shape[1:])}, sample 0 has "
                             f"{[spec.layers, spec.topk]}")
        if dtype != spec.dtype:
            raise TypeError(f"{name}[{i}] is {dtype}, sample 0 is {spec.dtype}: one dtype per "
                            "batch, kept as given (never widened or narrowed)")
        if shape[0] > token_counts[i]:
            raise ValueError(f"{name}[{i}] has {shape[0]} routes for {token_counts[i]} tokens")
    return spec


def check_route_values(routed_experts, name: str = "routed_experts") -> None:
    """Every expert id non-negative (read one by one; the structure is checked already)."""
    for i, entry in enumerate(per_sample(routed_experts, name, len(routed_experts))):
        for token in _nested(entry):
            for layer in token:
                for expert in layer:
                    if expert < 0:
                        raise ValueError(f"{name}[{i}] holds a negative expert id ({expert})")


def check_sample_support(sample_support, response_lengths: list[int],
                         name: str = "sample_support") -> SupportSpec | None:
    """The structure of `sample_support` against each sample's response length (None: none).

    Raises, naming the sample: TypeError for an entry that is no integer array of a support
    dtype, or a dtype differing from sample 0's; ValueError for a wrong number of entries, a
    None entry, a rank other than 2, `top_k` differing from sample 0's or 0, or a number of
    rows other than the sample's response tokens.
    """
    if sample_support is None:
        return None
    entries = per_sample(sample_support, name, len(response_lengths))
    spec = None
    for i, entry in enumerate(entries):
        dtype = entry_dtype(entry)
        if dtype not in SUPPORT_DTYPES:
            raise TypeError(f"{name}[{i}] must hold vocabulary ids of dtype int16, int32 or "
                            f"int64, got {dtype}")
        shape = tuple(entry.shape)
        if len(shape) != 2:
            raise ValueError(f"{name}[{i}] must be [response tokens, top_k], got shape {shape}")
        if spec is None:
            if shape[1] < 1:
                raise ValueError(f"{name}[{i}] must have top_k >= 1, got shape {shape}")
            spec = SupportSpec(dtype, shape[1])
        elif shape[1] != spec.top_k:
            raise ValueError(f"{name}[{i}] has top_k {shape[1]}, sample 0 has {spec.top_k}")
        if dtype != spec.dtype:
            raise TypeError(f"{name}[{i}] is {dtype}, sample 0 is {spec.dtype}: one dtype per "
                            "batch, kept as given")
        if shape[0] != response_lengths[i]:
            raise ValueError(f"{name}[{i}] has {shape[0]} rows, but response {i} has "
                             f"{response_lengths[i]} tokens")
    return spec


def check_support_values(sample_support, name: str = "sample_support") -> None:
    """Each row: vocabulary ids (>= 0), then only -1 padding (read one by one)."""
    for i, entry in enumerate(per_sample(sample_support, name, len(sample_support))):
        for row in _nested(entry):
            padded = False
            for value in row:
                if value < SUPPORT_PADDING:
                    raise ValueError(f"{name}[{i}] holds {value}: ids are >= 0, padding is -1")
                if value == SUPPORT_PADDING:
                    padded = True
                elif padded:
                    raise ValueError(f"{name}[{i}] has an id after -1 padding: padding is "
                                     "trailing")


def _nested(entry) -> list:
    """A tensor's or NumPy array's values as nested Python lists of ints."""
    return entry.tolist()


def _check_dummy_fits(spec: RouteSpec, name: str) -> None:
    highest = spec.topk - 1
    if highest > torch.iinfo(spec.dtype).max:
        raise ValueError(f"{name}: topk {spec.topk} needs expert ids up to {highest} for the "
                         f"dummy route, which do not fit {spec.dtype}")


# --------------------------------------------------------------------------------------------
# routes already laid out per token (a packed row's, a CP stream's, an unpadded batch's)
# --------------------------------------------------------------------------------------------


def check_token_routes(routes, tokens: int, name: str = "routed_experts", *,
                       row_form: bool = False) -> RouteSpec:
    """The structure of one route per token, `[tokens, layers, topk]` (with `row_form`, one
    packed row `[1, tokens, layers, topk]` too): a tensor of a route dtype whose dummy route
    fits, of exactly `tokens` routes.

    Raises TypeError for a non-tensor or a dtype that is not a route dtype; ValueError for
    another rank, an empty `[layers, topk]`, another number of tokens, or a `topk` whose dummy
    route does not fit the dtype.
    """
    if not isinstance(routes, torch.Tensor):
        raise TypeError(f"{name} must be a tensor [tokens, layers, topk], got "
                        f"{type(routes).__name__}")
    if routes.dtype not in ROUTE_DTYPES:
        raise TypeError(f"{name} must hold integer expert ids of dtype uint8, int16, int32 or "
                        f"int64, got {routes.dtype}")
    shape = tuple(routes.shape)
    if row_form and len(shape) == 4 and shape[0] == 1:
        shape = shape[1:]
    if len(shape) != 3:
        forms = "[tokens, layers, topk] or one row [1, tokens, layers, topk]" if row_form \
            else "[tokens, layers, topk]"
        raise ValueError(f"{name} must be {forms}, got shape {tuple(routes.shape)}")
    if shape[1] < 1 or shape[2] < 1:
        raise ValueError(f"{name} must have at least one layer and one expert per token, got "
                         f"[layers, topk] = {list(shape[1:])}")
    if shape[0] != tokens:
        raise ValueError(f"{name} has {shape[0]} routes for {tokens} tokens: one route per token")
    spec = RouteSpec(routes.dtype, shape[1], shape[2])
    _check_dummy_fits(spec, name)
    return spec


def check_token_route_values(routes: torch.Tensor, name: str = "routed_experts") -> None:
    """Every expert id of a per-token route tensor non-negative (read one by one), naming the
    token of the first negative one."""
    tokens = routes.detach().cpu().reshape(-1, *routes.shape[-2:]).tolist()
    for t, token in enumerate(tokens):
        for layer in token:
            for expert in layer:
                if expert < 0:
                    raise ValueError(f"{name} holds a negative expert id ({expert}) at token {t}")


def check_router_padding_mask(mask, tokens: int, name: str = "router_padding_mask", *,
                              row_form: bool = False) -> None:
    """A router padding mask given per token: a bool tensor `[tokens]` (with `row_form`, or one
    row `[1, tokens]`). TypeError for a non-tensor or another dtype, ValueError for another
    shape."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a bool tensor [tokens], got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor (True: no captured route), got "
                        f"{mask.dtype}")
    shape = tuple(mask.shape)
    if shape == (tokens,) or row_form and shape == (1, tokens):
        return
    want = f"({tokens},)" + (f" or (1, {tokens})" if row_form else "")
    raise ValueError(f"{name} must have shape {want}, one entry per token, got {shape}")

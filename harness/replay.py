"""Router replay in the registry: strategies, input forms and checks of `routed_experts` and
`sample_support` that every token-placing record shares (docs/conventions.md, "Router replay").

(Internal, floor 1 beside `blocks`: the records of `rl_batch`, `trainer` and `pipeline` use it.)

    route_entries([5, 0, 3])     per sample a [c_i, layers, topk] array, c_i in 0 .. n_i, one
                                 dtype (uint8 / int16 / int32 / int64), torch or NumPy (some
                                 read-only), each (token, layer) `topk` distinct expert ids
    support_entries([2, 0, 1])   per sample a [r_i, top_k] array: vocabulary ids, then -1
    route_defect(...), support_defect(...)   one invalid argument each, with its exception
    assert_dummy_where_masked(...), assert_route_count(...)   what the properties assert of
                                 laid-out routes, whatever the layout

Sizes stay tiny (layers <= 3, topk <= 4, experts <= 12) so one example runs in milliseconds;
contents come from a seeded `torch.Generator` (never the global RNG), so a failing example
shrinks toward seed 0 and the smallest structure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

from batchproof.reference import _routes

ROUTE_DTYPES = _routes.ROUTE_DTYPES
SUPPORT_DTYPES = _routes.SUPPORT_DTYPES
REPLAY_KEYS = ("routed_experts", "router_padding_mask", "sample_support")
"""The outputs the router-replay inputs add (in this order), only when given."""
MAX_LAYERS, MAX_TOPK, MAX_EXPERTS = 3, 4, 12
NUMPY = {torch.uint8: np.uint8, torch.int16: np.int16, torch.int32: np.int32,
         torch.int64: np.int64}


def as_tensor(entry: Any) -> torch.Tensor:
    """A per-sample array (torch or NumPy) as a CPU tensor of its own dtype (a copy)."""
    if isinstance(entry, np.ndarray):
        return torch.from_numpy(np.array(entry))
    return entry.detach().to("cpu").clone()


def dummy_slot(layers: int, topk: int, dtype: torch.dtype) -> torch.Tensor:
    """The dummy route of one token slot: `0 .. topk-1` on every layer."""
    return torch.arange(topk, dtype=dtype).expand(layers, topk)


def captured_counts(case_kwargs: dict) -> list[int] | None:
    """c_i of each sample, or None when the call passes no routes."""
    routes = case_kwargs.get("routed_experts")
    if routes is None:
        return None
    return [int(entry.shape[0]) for entry in entries_of(routes)]


def entries_of(values: Any) -> list:
    """The per-sample entries of a list or a jagged tensor."""
    if isinstance(values, torch.Tensor) and values.is_nested:
        return list(values.unbind())
    return list(values)


# --------------------------------------------------------------------------- strategies


@st.composite
def route_entries(draw, token_counts: Sequence[int], *,
                  dtypes: Sequence[torch.dtype] = ROUTE_DTYPES,
                  arrays: Sequence[str] = ("torch", "numpy"), min_captured: int = 0) -> list:
    """Per sample `[c_i, layers, topk]` routes, c_i from 0 to the sample's tokens (all of them,
    all but the last sampled token, none, or any count between), one dtype for the batch, each
    entry a torch tensor or a NumPy array (`arrays`; a NumPy array may be read-only, as decoded
    wire routes are). Every (token, layer) holds `topk` distinct ids out of the drawn expert
    count, as a real router's top-k does. `min_captured`: c_i at least this (or n_i)."""
    dtype = draw(st.sampled_from(dtypes))
    layers = draw(st.integers(1, MAX_LAYERS))
    topk = draw(st.integers(1, MAX_TOPK))
    experts = draw(st.integers(topk, MAX_EXPERTS))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    entries = []
    for n in token_counts:
        low = min(min_captured, n)
        captured = draw(st.sampled_from(sorted({n, max(n - 1, low), low}))
                        | st.integers(low, n))
        scores = torch.rand((captured, layers, experts), generator=generator)
        routes = scores.argsort(dim=-1)[..., :topk].to(dtype)
        entries.append(_as_array(draw, routes, arrays))
    return entries


@st.composite
def support_entries(draw, response_lengths: Sequence[int], *,
                    dtypes: Sequence[torch.dtype] = SUPPORT_DTYPES,
                    arrays: Sequence[str] = ("torch", "numpy")) -> list:
    """Per sample `[r_i, top_k]` support rows: 0 .. top_k vocabulary ids each, then -1."""
    dtype = draw(st.sampled_from(dtypes))
    top_k = draw(st.integers(1, MAX_TOPK))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    entries = []
    for r in response_lengths:
        ids = torch.randint(0, 50, (r, top_k), generator=generator)
        valid = torch.randint(0, top_k + 1, (r, 1), generator=generator)
        rows = torch.where(torch.arange(top_k)[None, :] < valid, ids, -1).to(dtype)
        entries.append(_as_array(draw, rows, arrays))
    return entries


def _as_array(draw, values: torch.Tensor, arrays: Sequence[str]) -> Any:
    if draw(st.sampled_from(arrays)) == "torch":
        return values
    array = values.numpy().copy()
    if draw(st.booleans()):
        array.flags.writeable = False
    return array


# --------------------------------------------------------------------------- input forms


def jagged_entries(entries: list, *, holes: bool = False) -> torch.Tensor:
    """The jagged form of per-sample arrays: one NJT `(B, j, *trailing)`, its dtype the entries'.
    With `holes`, a row of 7s follows each sample's rows, outside it (`lengths` given)."""
    rows = [as_tensor(e) for e in entries]
    trailing = tuple(rows[0].shape[1:])
    filler = [torch.full((1, *trailing), 7, dtype=rows[0].dtype)] if holes else []
    lengths = torch.tensor([r.shape[0] for r in rows], dtype=torch.int64)
    offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths + len(filler), 0)
    flat = torch.cat([part for r in rows for part in [r, *filler]])
    return torch.nested.nested_tensor_from_jagged(flat, offsets=offsets,
                                                  lengths=lengths if holes else None)


def permuted(values: Any, order: Sequence[int]) -> Any:
    """Per-sample entries (a list) in `order`."""
    entries = entries_of(values)
    return [entries[i] for i in order]


# --------------------------------------------------------------------------- checks
# what the records' properties assert about laid-out routes (..., layers, topk), whatever the
# layout: a packed row, a padded batch, a CP rank's stream


def _assert(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def distinct_assignments(routes: torch.Tensor) -> torch.Tensor:
    """Per layer, the distinct (token, expert) assignments of routes (..., layers, topk)."""
    ordered = routes.reshape(-1, *routes.shape[-2:]).sort(dim=-1).values
    distinct = 1 + (ordered[..., 1:] != ordered[..., :-1]).sum(dim=-1)
    return distinct.sum(dim=0)


def assert_dummy_where_masked(routes: torch.Tensor, mask: torch.Tensor, where: str) -> None:
    """Every slot of routes (..., layers, topk) whose mask (...) is True holds the dummy route
    0 .. topk-1 on every layer; `where` names the slots in the message."""
    layers, topk = routes.shape[-2:]
    dummy = dummy_slot(layers, topk, routes.dtype)
    flat, flags = routes.reshape(-1, layers, topk), mask.reshape(-1)
    for slot in flags.nonzero().flatten().tolist():
        _assert(torch.equal(flat[slot], dummy),
                f"{where} {slot}: a masked slot holds {flat[slot].tolist()}, not the dummy route "
                f"{dummy.tolist()} (topk distinct experts, never zeros: verl #7524)")


def assert_route_count(routes: torch.Tensor, entries: list[torch.Tensor], where: str) -> None:
    """A dropless dispatcher's invariant: per layer, the slots of routes (..., layers, topk) send
    slots * topk distinct (token, expert) assignments — fewer only by the repeats the captured
    routes `entries` themselves hold (a real router repeats none; the strategies draw none)."""
    layers, topk = routes.shape[-2:]
    slots = routes.numel() // (layers * topk)
    found = distinct_assignments(routes)
    for layer in range(layers):
        repeats = sum(int(e.shape[0]) * topk - int(distinct_assignments(e)[layer])
                      for e in entries if e.shape[0])
        want = slots * topk - repeats
        _assert(int(found[layer]) == want,
                f"{where}, layer {layer}: {slots} token slots send {int(found[layer])} distinct "
                f"(token, expert) assignments, tokens * topk = {slots * topk} expected"
                + (f" (less {repeats} repeats of the captured routes)" if repeats else ""))



# --------------------------------------------------------------------------- bad inputs

ROUTE_DEFECTS = ("count", "none_entry", "too_long", "rank", "shape", "empty_topk", "float",
                 "bool", "mixed_dtype", "negative", "nested_list", "not_a_list", "uint8_topk")
SUPPORT_DEFECTS = ("count", "none_entry", "rows", "rank", "top_k", "top_k_zero", "below_padding",
                   "after_padding", "float", "uint8")


@st.composite
def route_defect(draw, routes: list, token_counts: Sequence[int]) -> tuple[Any, type, str]:
    """(bad routed_experts, the exception the contract raises, why) from valid `routes`."""
    kind = draw(st.sampled_from(ROUTE_DEFECTS))
    entries = [as_tensor(e) for e in routes]
    bad, raises, why = _route_defect(draw, kind, entries, token_counts)
    return _like(bad, routes), raises, why


def _like(bad: Any, valid: list) -> Any:
    """`bad` in the array kind of the valid entries: NumPy arrays where they were NumPy (a
    framework that takes only NumPy sees its own kind), tensors otherwise."""
    if not isinstance(valid[0], np.ndarray):
        return bad
    if isinstance(bad, torch.Tensor):
        return bad.numpy().copy()
    if isinstance(bad, list):
        return [e.numpy().copy() if isinstance(e, torch.Tensor) else e for e in bad]
    return bad


def _route_defect(draw, kind: str, entries: list, token_counts) -> tuple[Any, type, str]:
    batch, i = len(entries), draw(st.integers(0, len(entries) - 1))
    layers, topk = entries[0].shape[1:]
    dtype = entries[0].dtype
    if kind == "count":
        return entries + [entries[-1]], ValueError, "one entry too many"
    if kind == "none_entry":
        entries[i] = None
        return entries, ValueError, f"routed_experts[{i}] is None"
    if kind == "too_long":
        entries[i] = torch.zeros((token_counts[i] + 1, layers, topk), dtype=dtype)
        return entries, ValueError, f"routed_experts[{i}] has more routes than tokens"
    if kind == "rank":
        entries[i] = entries[i].reshape(entries[i].shape[0], layers * topk)
        return entries, ValueError, f"routed_experts[{i}] is 2-D"
    if kind == "shape" and batch > 1:
        j = draw(st.integers(1, batch - 1))
        entries[j] = torch.zeros((entries[j].shape[0], layers + 1, topk), dtype=dtype)
        return entries, ValueError, f"routed_experts[{j}] has another [layers, topk]"
    if kind in ("shape", "empty_topk"):
        entries[0] = torch.zeros((entries[0].shape[0], layers, 0), dtype=dtype)
        return entries, ValueError, "routed_experts[0] has topk 0"
    if kind in ("float", "bool"):
        entries[i] = entries[i].to(torch.float32 if kind == "float" else torch.bool)
        return entries, TypeError, f"routed_experts[{i}] is {kind}"
    if kind == "mixed_dtype" and batch > 1:
        j = draw(st.integers(1, batch - 1))
        entries[j] = entries[j].to(torch.int64 if dtype != torch.int64 else torch.int32)
        return entries, TypeError, f"routed_experts[{j}] has another dtype than sample 0"
    if kind == "negative" and dtype != torch.uint8 and entries[i].numel():
        entries[i] = entries[i].clone()
        entries[i].view(-1)[draw(st.integers(0, entries[i].numel() - 1))] = -1
        return entries, ValueError, f"routed_experts[{i}] holds a negative id"
    if kind == "nested_list":
        entries[i] = entries[i].tolist()
        return entries, TypeError, f"routed_experts[{i}] is a nested list"
    if kind == "uint8_topk":
        return ([torch.zeros((0, 1, 257), dtype=torch.uint8)] * batch, ValueError,
                "topk 257 does not fit uint8")
    return torch.zeros((batch, 1, 1, 1), dtype=dtype), TypeError, "a dense tensor, not a list"


@st.composite
def support_defect(draw, support: list, response_lengths: Sequence[int]) -> tuple[Any, type,
                                                                                   str]:
    """(bad sample_support, the exception the contract raises, why) from valid `support`."""
    kind = draw(st.sampled_from(SUPPORT_DEFECTS))
    entries = [as_tensor(e) for e in support]
    bad, raises, why = _support_defect(draw, kind, entries, response_lengths)
    return _like(bad, support), raises, why


def _support_defect(draw, kind: str, entries: list, response_lengths) -> tuple[Any, type, str]:
    batch, i = len(entries), draw(st.integers(0, len(entries) - 1))
    top_k, dtype = entries[0].shape[1], entries[0].dtype
    if kind == "count":
        return entries[:-1] if batch > 1 else entries * 2, ValueError, "wrong number of entries"
    if kind == "none_entry":
        entries[i] = None
        return entries, ValueError, f"sample_support[{i}] is None"
    if kind == "rows":
        rows = response_lengths[i] + draw(st.sampled_from([1, -1] if response_lengths[i] else [1]))
        entries[i] = torch.full((rows, top_k), -1, dtype=dtype)
        return entries, ValueError, f"sample_support[{i}] is not one row per response token"
    if kind == "rank":
        entries[i] = entries[i].reshape(-1)
        return entries, ValueError, f"sample_support[{i}] is 1-D"
    if kind == "top_k" and batch > 1:
        j = draw(st.integers(1, batch - 1))
        entries[j] = torch.full((response_lengths[j], top_k + 1), -1, dtype=dtype)
        return entries, ValueError, f"sample_support[{j}] has another top_k"
    if kind in ("top_k", "top_k_zero"):
        entries[0] = torch.zeros((response_lengths[0], 0), dtype=dtype)
        return entries, ValueError, "sample_support[0] has top_k 0"
    if kind in ("below_padding", "after_padding") and entries[i].numel():
        entries[i] = entries[i].clone()
        row = draw(st.integers(0, entries[i].shape[0] - 1))
        if kind == "below_padding" or top_k == 1:
            entries[i][row, 0] = -2
            return entries, ValueError, f"sample_support[{i}] holds -2"
        entries[i][row, :] = 3
        entries[i][row, 0] = -1
        return entries, ValueError, f"sample_support[{i}] has an id after -1"
    if kind == "uint8":
        entries[i] = entries[i].clamp(min=0).to(torch.uint8)
        return entries, TypeError, f"sample_support[{i}] is uint8"
    entries[i] = entries[i].to(torch.float32)
    return entries, TypeError, f"sample_support[{i}] is float"

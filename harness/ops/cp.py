"""Registry records for `cp` (spec: docs/cp.md): `pad_for_cp`, `shift_labels`, `shard`,
`shard_bshd`, `unshard`, `flatten_micro_batch`, all exact (bit for bit).

The strategies draw the regimes the public bugs need: cp in 1..8, sequence lengths just below,
at and just above multiples of 2·cp, single tokens and empty sequences, anti-correlated lengths
(one long sequence, then ever shorter ones), several rows per micro-batch. The properties
re-derive the layouts from docs/cp.md with their own loops (they do not call the oracle), so a
bug planted in the oracle itself (`oracle=True` zoo entries) fails them too.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from tensordict import TensorDict, TensorDictBase

from batchproof import blocks as hs
from batchproof import replay
from batchproof.compare import Mismatch, assert_identical
from batchproof.ops.varlen import (
    assert_dummy_where_masked,
    assert_route_count,
    token_routes,
)
from batchproof.reference import cp as _reference
from batchproof.registry import BadCase, Case, OpInfo, Paths, Pin, Property, register

MAX_CP = 8
MAX_SEQUENCES = 5
MAX_ROWS = 3  # rows of one micro-batch (flatten_micro_batch)


def _assert(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def step_of(cp_size: int) -> int:
    """2·cp for cp > 1, else 1: what every padded length is a multiple of (docs/cp.md)."""
    return 2 * cp_size if cp_size > 1 else 1


# --------------------------------------------------------------------------- strategies


def cp_sizes() -> st.SearchStrategy[int]:
    """cp in 1..8, 2 and 4 (the common sizes) and 1 (the identity) first."""
    return st.one_of(st.sampled_from([2, 4, 1, 3]), st.integers(1, MAX_CP))


LENGTH_REGIMES = ("near_multiple", "anti_correlated", "tiny", "independent")
"""How `sequence_lengths` draws one row's lengths: k·2cp - 1, k·2cp or k·2cp + 1 (the lengths
just below, at and above a multiple, where floor divisions and dropped tails show); one long
sequence followed by ever shorter ones (anti-correlated); only 0 and 1 (empty and single-token
sequences: pad-only chunks, ranks that hold no real token); independent in 0..2·(2cp) + 2."""


def sequence_lengths(cp_size: int, *, min_sequences: int = 0,
                     max_sequences: int = MAX_SEQUENCES) -> st.SearchStrategy[list[int]]:
    step = 2 * cp_size
    count = st.integers(min_sequences, max_sequences)

    def near(n):
        one = st.tuples(st.integers(0, 2), st.sampled_from([-1, 0, 1])).map(
            lambda kd: max(0, kd[0] * step + kd[1]))
        return st.lists(one, min_size=n, max_size=n)

    def anti(n):
        def build(drawn):
            longest, jitter = drawn
            return [max(0, round(longest * (n - k) / n) + jitter[k]) for k in range(n)]
        return st.tuples(st.integers(1, 3 * step + 1),
                         st.lists(st.integers(-1, 1), min_size=n, max_size=n)).map(build)

    def tiny(n):
        return st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n)

    def independent(n):
        return st.lists(st.integers(0, 2 * step + 2), min_size=n, max_size=n)

    regimes = {"near_multiple": near, "anti_correlated": anti, "tiny": tiny,
               "independent": independent}
    return st.sampled_from(LENGTH_REGIMES).flatmap(lambda regime: count.flatmap(regimes[regime]))


def boundaries_of(lengths: list[int]) -> list[int]:
    cu = [0]
    for length in lengths:
        cu.append(cu[-1] + length)
    return cu


@st.composite
def packed_rows(draw, cp_size: int, *, min_sequences: int = 0):
    """(input_ids, cu_seqlens) of one packed row, as lists."""
    lengths = draw(sequence_lengths(cp_size, min_sequences=min_sequences))
    ids = draw(hs.token_rows([sum(lengths)]))[0]
    return ids, boundaries_of(lengths)


def loss_masks(length: int) -> st.SearchStrategy:
    """None, a 0/1 mask, or float weights (float32-exact, signed zeros included)."""
    return st.one_of(st.none(), st.lists(st.sampled_from([0.0, 1.0]), min_size=length,
                                         max_size=length),
                     st.lists(hs.float32s(), min_size=length, max_size=length))


@st.composite
def pad_cases(draw) -> Case:
    cp_size = draw(cp_sizes())
    ids, cu = draw(packed_rows(cp_size))
    kwargs = {"cp_size": cp_size}
    mask = draw(loss_masks(len(ids)))
    if mask is not None:
        kwargs["loss_mask"] = mask
    pad = draw(st.sampled_from([1, 49, 0, None]))  # non-zero first: a pad of 0 hides in ids
    if pad is not None:
        kwargs["pad_token_id"] = pad
    ignore = draw(st.sampled_from([None, -100, 0, 3]))  # 0 and 3 collide with token ids
    if ignore is not None:
        kwargs["ignore_index"] = ignore
    kwargs.update(draw(row_routes(len(ids))))
    return Case((ids, cu), kwargs)


@st.composite
def row_routes(draw, tokens: int) -> dict:
    """Router replay of a packed row, drawn last (in a third of the examples; shrinks to none):
    `routed_experts` (T, layers, topk), one route per token (`ops.varlen.token_routes`), and in
    half of those a `router_padding_mask` (T,) marking some tokens as uncaptured."""
    if draw(st.integers(0, 2)) != 2:
        return {}
    out = {"routed_experts": draw(token_routes(tokens))}
    if draw(st.booleans()):
        out["router_padding_mask"] = torch.rand(tokens, generator=draw(hs.generators())) < 0.3
    return out


def _plain(value):
    """A list of a list or a tensor argument (pins may give tensors)."""
    return value.reshape(-1).tolist() if isinstance(value, torch.Tensor) else list(value)


def _tensor_form(case: Case) -> Case:
    """1-D int64 ids, int32 boundaries, float32 loss mask (as the contract's tensors); routes
    as given ((T, layers, topk) tensors already)."""
    ids, cu = case.args
    kwargs = dict(case.kwargs)
    if kwargs.get("loss_mask") is not None:
        kwargs["loss_mask"] = torch.tensor(_plain(kwargs["loss_mask"]), dtype=torch.float32)
    if kwargs.get("cu_seqlens_padded") is not None:
        kwargs["cu_seqlens_padded"] = torch.tensor(_plain(kwargs["cu_seqlens_padded"]),
                                                   dtype=torch.int32)
    ids, cu = _plain(ids), _plain(cu)
    return Case((torch.tensor(ids, dtype=torch.int64).reshape(len(ids)),
                 torch.tensor(cu, dtype=torch.int32)), kwargs, case.label)


def _row_form(case: Case) -> Case:
    """(1, T) int32 ids and float64 loss mask (what a packer's row gives), int64 boundaries;
    routes (1, T, layers, topk) and their mask (1, T) (what pack_varlen gives)."""
    ids, cu = case.args
    kwargs = dict(case.kwargs)
    for key in ("routed_experts", "router_padding_mask"):
        if isinstance(kwargs.get(key), torch.Tensor):
            kwargs[key] = kwargs[key].unsqueeze(0)
    if kwargs.get("loss_mask") is not None:
        kwargs["loss_mask"] = torch.tensor(_plain(kwargs["loss_mask"]),
                                           dtype=torch.float64).reshape(1, -1)
    if kwargs.get("cu_seqlens_padded") is not None:
        kwargs["cu_seqlens_padded"] = torch.tensor(_plain(kwargs["cu_seqlens_padded"]),
                                                   dtype=torch.int64)
    ids, cu = _plain(ids), _plain(cu)
    return Case((torch.tensor(ids, dtype=torch.int32).reshape(1, len(ids)),
                 torch.tensor(cu, dtype=torch.int64)), kwargs, case.label)


def _row_on(case: Case, device: str) -> Case:
    """The tensor form on `device` (bad inputs that are not int lists stay as they are)."""
    ids, cu = case.args
    if not (_int_list(ids) and _int_list(cu)):
        return case
    formed = _tensor_form(case)
    return formed.replace(*(a.to(device) for a in formed.args),
                          **{k: v.to(device) if isinstance(v, torch.Tensor) else v
                             for k, v in formed.kwargs.items()})


def _int_list(value) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and -2**31 <= v < 2**31 for v in value)


# --------------------------------------------------------------------------- naive layouts
# (the contract spelled out once more, for the properties: never the oracle's code)


def rank_positions(cu_padded: list[int], cp_size: int, layout: str, rank: int) -> list[int]:
    """The stream positions rank `rank` holds, in its local order (docs/cp.md, Vocabulary)."""
    total = cu_padded[-1]
    if layout == "contiguous" or cp_size == 1:
        n = total // cp_size
        return list(range(rank * n, rank * n + n))
    out = []
    for start, end in zip(cu_padded, cu_padded[1:]):
        chunk = (end - start) // (2 * cp_size)
        out += list(range(start + rank * chunk, start + rank * chunk + chunk))
        last = 2 * cp_size - 1 - rank
        out += list(range(start + last * chunk, start + last * chunk + chunk))
    return out


def position_owner(cu_padded: list[int]) -> list[tuple[int, int]]:
    """(sequence, offset in its span) of every stream position."""
    out = []
    for i, (start, end) in enumerate(zip(cu_padded, cu_padded[1:])):
        out += [(i, w) for w in range(end - start)]
    return out


def token_at(cu: list[int], cu_padded: list[int]) -> list[int]:
    """The real row's index of every stream position's token, -1 at pads."""
    out = []
    for (i, w) in position_owner(cu_padded):
        out.append(cu[i] + w if w < cu[i + 1] - cu[i] else -1)
    return out


# --------------------------------------------------------------------------- pad_for_cp


def prop_pad_layout(case: Case, td) -> None:
    """Keys, shapes, dtypes; sequence i's tokens at [cu_seqlens_padded[i], + l_i) and
    pad_token_id after them; position_ids 0..Lp_i-1 over each span; the non-tensor entries."""
    ids, cu = map(_plain, case.args)
    cp_size = case.kwargs["cp_size"]
    pad = case.kwargs.get("pad_token_id", 0)
    step = step_of(cp_size)
    want_ids, want_positions, spans = [], [], []
    for start, end in zip(cu, cu[1:]):
        span = -(-(end - start) // step) * step
        want_ids += ids[start:end] + [pad] * (span - (end - start))
        want_positions += list(range(span))
        spans.append(span)
    total = len(want_ids)
    for key, dtype in (("input_ids", torch.int64), ("position_ids", torch.int64),
                       ("labels", torch.int64), ("loss_mask", torch.float32)):
        _assert(tuple(td[key].shape) == (1, total) and td[key].dtype == dtype,
                f"{key}: {tuple(td[key].shape)} {td[key].dtype}, expected (1, {total}) {dtype}")
    _assert(td["input_ids"][0].tolist() == want_ids,
            f"input_ids {td['input_ids'][0].tolist()} != {want_ids}")
    _assert(td["position_ids"][0].tolist() == want_positions,
            f"position_ids {td['position_ids'][0].tolist()} != {want_positions}")
    lengths = [b - a for a, b in zip(cu, cu[1:])]
    for key, value in (("max_seqlen", max(lengths, default=0)),
                       ("max_seqlen_padded", max(spans, default=0)), ("cp_size", cp_size)):
        got = td.get_non_tensor(key)
        _assert(type(got) is int and got == value, f"{key} {got!r} != {value}")


def prop_pad_boundaries(case: Case, td) -> None:
    """cu_seqlens (int32) are the real boundaries as given; cu_seqlens_padded (int32) run from 0
    with each span the smallest multiple of 2·cp (1 for cp = 1) that holds its sequence."""
    cu = _plain(case.args[1])
    step = step_of(case.kwargs["cp_size"])
    for key in ("cu_seqlens", "cu_seqlens_padded"):
        _assert(td[key].dtype == torch.int32 and td[key].dim() == 1,
                f"{key} is {td[key].dtype} of shape {tuple(td[key].shape)}, not 1-D int32")
    _assert(td["cu_seqlens"].tolist() == cu,
            f"cu_seqlens {td['cu_seqlens'].tolist()} are not the real boundaries {cu} "
            "(padding counted as real tokens)")
    padded = td["cu_seqlens_padded"].tolist()
    _assert(len(padded) == len(cu) and padded[0] == 0,
            f"cu_seqlens_padded {padded}: {len(cu)} entries from 0 expected")
    for i in range(len(cu) - 1):
        length, span = cu[i + 1] - cu[i], padded[i + 1] - padded[i]
        _assert(span % step == 0 and length <= span < length + step,
                f"sequence {i}: {length} real tokens in a span of {span}, expected "
                f"roundup({length}, {step}) = {-(-length // step) * step}")
    _assert(padded[-1] == td["input_ids"].shape[1],
            f"cu_seqlens_padded ends at {padded[-1]}, the stream has {td['input_ids'].shape[1]}")


def _expected_shift(tokens, weights, cu, padded, ignore_index):
    labels, loss = [ignore_index] * len(tokens), [0.0] * len(tokens)
    for i in range(len(cu) - 1):
        for w in range(cu[i + 1] - cu[i] - 1):
            labels[padded[i] + w] = tokens[padded[i] + w + 1]
            loss[padded[i] + w] = weights[padded[i] + w + 1]
    return labels, loss


def _float_bits(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).view(torch.int32)


def prop_pad_labels(case: Case, td) -> None:
    """labels: the next real token of the same sequence, ignore_index at each sequence's last
    real token and at every pad; loss_mask: the next token's weight there, +0.0 elsewhere — no
    label read from a pad, no pad carrying a label (bitwise)."""
    cu = _plain(case.args[1])
    ignore = case.kwargs.get("ignore_index", -100)
    stream = td["input_ids"][0].tolist()
    padded = td["cu_seqlens_padded"].tolist()
    given = case.kwargs.get("loss_mask")
    weights = [0.0] * len(stream)
    for i in range(len(cu) - 1):
        for w in range(cu[i + 1] - cu[i]):
            weights[padded[i] + w] = 1.0 if given is None else float(_plain(given)[cu[i] + w])
    labels, loss = _expected_shift(stream, weights, cu, padded, ignore)
    _assert(td["labels"][0].tolist() == labels,
            f"labels {td['labels'][0].tolist()} != {labels}")
    _assert(torch.equal(td["loss_mask"][0].view(torch.int32), _float_bits(loss)),
            f"loss_mask {td['loss_mask'][0].tolist()} != {loss} (bitwise)")


def prop_pad_cp1_identity(case: Case, td, candidate) -> None:
    """cp = 1 is the identity: the same row with cp_size=1 comes back unpadded, its padded
    boundaries equal to its real ones, positions restarting per sequence."""
    ids, cu = map(_plain, case.args)
    one = Case(case.args, {**case.kwargs, "cp_size": 1}).call(candidate)
    _assert(one["input_ids"][0].tolist() == list(ids),
            f"cp_size=1 changed the row: {one['input_ids'][0].tolist()} != {list(ids)}")
    _assert(one["cu_seqlens_padded"].tolist() == list(cu),
            f"cp_size=1: cu_seqlens_padded {one['cu_seqlens_padded'].tolist()} != {list(cu)}")
    positions = [w for a, b in zip(cu, cu[1:]) for w in range(b - a)]
    _assert(one["position_ids"][0].tolist() == positions,
            f"cp_size=1: position_ids {one['position_ids'][0].tolist()} != {positions}")


def _given_routes(case: Case):
    """(routes (T, layers, topk), uncaptured (T,) bools) of a pad_for_cp call, or None."""
    routes = case.kwargs.get("routed_experts")
    if routes is None:
        return None
    routes = routes.cpu().reshape(-1, *routes.shape[-2:])
    mask = case.kwargs.get("router_padding_mask")
    flags = [False] * routes.shape[0] if mask is None else mask.reshape(-1).tolist()
    return routes, flags


def prop_pad_routes(case: Case, td) -> None:
    """Routes follow their tokens through the padding: routed_experts (1, Tp, layers, topk) in
    the given dtype holds token t's route at its stream position cu_seqlens_padded[i] + w, the
    dummy route 0..topk-1 at every pad and at every token the given router_padding_mask marks;
    router_padding_mask (1, Tp, bool) is True exactly there. Without routes, neither output."""
    given = _given_routes(case)
    if given is None:
        extra = [k for k in ("routed_experts", "router_padding_mask") if k in td.keys()]
        _assert(not extra, f"{extra} in the output without routed_experts")
        return
    routes_in, flags = given
    cu = _plain(case.args[1])
    padded = td["cu_seqlens_padded"].tolist()
    total, (layers, topk) = padded[-1], routes_in.shape[1:]
    routes, mask = td["routed_experts"].cpu(), td["router_padding_mask"].cpu()
    _assert(tuple(routes.shape) == (1, total, layers, topk) and routes.dtype == routes_in.dtype,
            f"routed_experts is {tuple(routes.shape)} {routes.dtype}, expected "
            f"{(1, total, layers, topk)} {routes_in.dtype} (the dtype as given)")
    _assert(tuple(mask.shape) == (1, total) and mask.dtype == torch.bool,
            f"router_padding_mask is {tuple(mask.shape)} {mask.dtype}, expected (1, {total}) bool")
    dummy = replay.dummy_slot(layers, topk, routes.dtype)
    tokens = token_at(cu, padded)
    for g, t in enumerate(tokens):
        captured = t >= 0 and not flags[t]
        want = routes_in[t] if captured else dummy
        _assert(torch.equal(routes[0, g], want) and bool(mask[0, g]) == (not captured),
                f"stream position {g} ({'token ' + str(t) if t >= 0 else 'a pad'}): route "
                f"{routes[0, g].tolist()}, mask {bool(mask[0, g])}; expected {want.tolist()}, "
                f"{not captured}")


def prop_pad_route_count(case: Case, td) -> None:
    """Per layer the padded stream's Tp slots send Tp * topk distinct (token, expert)
    assignments: every pad's dummy route is topk distinct experts (all-zero pads send one)."""
    given = _given_routes(case)
    if given is not None:
        routes_in, flags = given
        captured = routes_in[~torch.tensor(flags, dtype=torch.bool)] if flags else routes_in
        assert_route_count(td["routed_experts"].cpu(), [captured], "the padded stream")


PAD_DEFECTS = ["cp_type", "cp_value", "pad_type", "pad_range", "ignore_type", "ignore_range",
               "ids_not_a_list", "float_token", "bool_token", "float_tensor", "ids_2d",
               "token_range", "cu_empty", "cu_first", "cu_decreasing", "cu_end", "cu_float",
               "cu_tensor_float", "mask_length", "mask_type", "mask_complex",
               "routes_float", "routes_list", "routes_count", "routes_rank", "routes_negative",
               "router_mask_alone", "router_mask_dtype", "router_mask_length"]


@st.composite
def bad_pad_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on a drawn packed row and cp_size (no other keyword argument but the one the
    defect sets), or on a call `valid` draws (its keyword arguments kept)."""
    kind = draw(st.sampled_from(PAD_DEFECTS))  # first: Hypothesis favours the first kinds
    if valid is None:
        cp_size = draw(cp_sizes())
        ids, cu = draw(packed_rows(cp_size, min_sequences=1))
        kwargs = {"cp_size": cp_size}
    else:
        good = draw(valid)
        (ids, cu), kwargs = good.args, dict(good.kwargs)
    args = (ids, cu)
    k = draw(st.integers(0, max(len(ids) - 1, 0)))
    if kind == "cp_type":
        return _bad(args, {**kwargs, "cp_size": draw(st.sampled_from([2.0, "2", True, None]))},
                    TypeError, "cp_size not an int")
    if kind == "cp_value":
        return _bad(args, {**kwargs, "cp_size": draw(st.sampled_from([0, -1]))}, ValueError,
                    "cp < 1")
    if kind in ("pad_type", "ignore_type"):
        name = "pad_token_id" if kind == "pad_type" else "ignore_index"
        return _bad(args, {**kwargs, name: draw(st.sampled_from([0.0, "0", True]))}, TypeError,
                    f"{name} not an int")
    if kind in ("pad_range", "ignore_range"):
        name = "pad_token_id" if kind == "pad_range" else "ignore_index"
        return _bad(args, {**kwargs, name: draw(st.sampled_from([2**63, -2**63 - 1]))},
                    ValueError, f"{name} beyond int64")
    if kind == "ids_not_a_list":
        return _bad((draw(st.sampled_from(["abc", 5, None])), cu), kwargs, TypeError,
                    "input_ids not a list")
    if kind in ("float_token", "bool_token", "token_range"):
        value = {"float_token": 1.5, "bool_token": True, "token_range": 2**63}[kind]
        bad_ids = ids[:k] + [value] + ids[k + 1:] if ids else [value]
        raises = ValueError if kind == "token_range" else TypeError
        return _bad((bad_ids, cu if ids else [0, 1]), kwargs, raises, f"input_ids[{k}]: {kind}")
    if kind == "float_tensor":
        return _bad((torch.tensor(ids, dtype=torch.float32), cu), kwargs, TypeError,
                    "float ids")
    if kind == "ids_2d":
        return _bad((torch.zeros((2, 3), dtype=torch.int64), [0, 6]), kwargs, ValueError,
                    "ids (2, 3)")
    if kind == "cu_empty":
        return _bad((ids, []), kwargs, ValueError, "cu_seqlens empty")
    if kind == "cu_first":
        return _bad((ids, [1] + cu[1:]), kwargs, ValueError, "cu_seqlens[0] != 0")
    if kind == "cu_decreasing":
        return _bad((ids + [1, 2], cu + [cu[-1] + 2, cu[-1] + 1, cu[-1] + 2]), kwargs,
                    ValueError, "decreasing boundary")
    if kind == "cu_end":
        return _bad((ids + [5], cu), kwargs, ValueError, "cu_seqlens[-1] != T")
    if kind == "cu_float":
        return _bad((ids, [float(v) for v in cu]), kwargs, TypeError, "float boundaries")
    if kind == "cu_tensor_float":
        return _bad((ids, torch.tensor(cu, dtype=torch.float64)), kwargs, TypeError,
                    "float boundary tensor")
    if kind == "mask_length":
        return _bad(args, {**kwargs, "loss_mask": [1.0] * (len(ids) + 1)}, ValueError,
                    "loss_mask length")
    if kind == "mask_complex":
        return _bad(args, {**kwargs, "loss_mask": torch.ones(len(ids), dtype=torch.complex64)},
                    TypeError, "complex loss_mask")
    if kind.startswith("route") or kind.startswith("router"):
        return draw(_route_defect(args, kwargs, kind))
    return _bad(args, {**kwargs, "loss_mask": ["1"] * len(ids) or "1"}, TypeError,
                "loss_mask of strings")


@st.composite
def _route_defect(draw, args, kwargs: dict, kind: str) -> BadCase:
    """A pad_for_cp call with a bad `routed_experts` or `router_padding_mask` (built on the
    call's own routes, or on ones drawn valid first)."""
    length = len(args[0]) if isinstance(args[0], list) else 0
    routes = kwargs.get("routed_experts")
    if routes is None:
        routes = draw(token_routes(length))
    kw = {k: v for k, v in kwargs.items() if k not in ("routed_experts", "router_padding_mask")}
    if kind == "routes_float":
        return _bad(args, kw | {"routed_experts": routes.float()}, TypeError, "float routes")
    if kind == "routes_list":
        return _bad(args, kw | {"routed_experts": routes.tolist()}, TypeError, "routes a list")
    if kind == "routes_count":
        more = torch.cat([routes, torch.zeros_like(routes[:1])]) if routes.shape[0] else \
            torch.zeros((1, *routes.shape[1:]), dtype=routes.dtype)
        return _bad(args, kw | {"routed_experts": more}, ValueError, "a route too many")
    if kind == "routes_rank":
        flat = routes.reshape(routes.shape[0], routes.shape[1] * routes.shape[2])
        return _bad(args, kw | {"routed_experts": flat}, ValueError, "routes 2-D")
    if kind == "routes_negative" and routes.dtype != torch.uint8 and routes.numel():
        routes = routes.clone()
        routes.view(-1)[draw(st.integers(0, routes.numel() - 1))] = -1
        return _bad(args, kw | {"routed_experts": routes}, ValueError, "a negative expert id")
    flags = torch.zeros(length, dtype=torch.bool)
    if kind == "router_mask_alone":
        return _bad(args, kw | {"router_padding_mask": flags}, ValueError,
                    "router_padding_mask without routes")
    if kind == "router_mask_dtype":
        return _bad(args, kw | {"routed_experts": routes, "router_padding_mask": flags.long()},
                    TypeError, "an integer router_padding_mask")
    return _bad(args, kw | {"routed_experts": routes,
                            "router_padding_mask": torch.zeros(length + 1, dtype=torch.bool)},
                ValueError, "router_padding_mask of another length")


def _bad(args, kwargs, raises, why) -> BadCase:
    return BadCase(Case(args, kwargs), raises, why)


def pad_picture(td) -> dict[str, list[str]]:
    """The padded stream, one character per position: the sequence's index (mod 10) for a real
    token, `.` for a pad."""
    cu, padded = td["cu_seqlens"].tolist(), td["cu_seqlens_padded"].tolist()
    row = []
    for i in range(len(cu) - 1):
        length, span = cu[i + 1] - cu[i], padded[i + 1] - padded[i]
        row += [str(i % 10)] * length + ["."] * (span - length)
    return {"stream": ["".join(row)]}


def describe_row(case: Case, row: int) -> str:
    return f"packed row of lengths {_lengths_of(case)}"


def _lengths_of(case: Case) -> list[int]:
    cu = case.args[1] if len(case.args) > 1 else []
    if isinstance(cu, torch.Tensor):
        cu = cu.tolist()
    return [b - a for a, b in zip(cu, cu[1:])] if isinstance(cu, list) else []


def _expect(**expected):
    """A pin's literal expectation: each key's tensor (as lists) or non-tensor value."""
    def check(case, out):
        for key, value in expected.items():
            got = (out.get_non_tensor(key) if isinstance(out, TensorDictBase)
                   and out.is_non_tensor(key) else
                   (out[key] if isinstance(out, TensorDictBase) else out).tolist())
            _assert(got == value, f"{key}: {got} != {value} (the literal expectation)")
    return check


EXAMPLE_ROW = ([11, 12, 13, 14, 15, 21, 22], [0, 5, 5, 7])
# a row of sequences 3 and 2 tokens long, one layer, topk 2; the last token has no captured route
THD_ROUTES = torch.tensor([[[5, 6]], [[7, 8]], [[9, 10]], [[11, 12]], [[13, 14]]],
                          dtype=torch.int16)
THD_UNCAPTURED = torch.tensor([False, False, False, False, True])

PAD_PINS = [
    Pin("worked_example", Case(EXAMPLE_ROW, {"cp_size": 2}),
        "docs/cp.md's example: lengths 5, 0, 2 padded to 8, 0, 4",
        _expect(input_ids=[[11, 12, 13, 14, 15, 0, 0, 0, 21, 22, 0, 0]],
                position_ids=[[0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3]],
                labels=[[12, 13, 14, 15, -100, -100, -100, -100, 22, -100, -100, -100]],
                cu_seqlens=[0, 5, 5, 7], cu_seqlens_padded=[0, 8, 8, 12], max_seqlen=5,
                max_seqlen_padded=8)),
    Pin("nemo_rl_4070_real_boundaries_stay_real", Case(([1, 2, 3, 4, 5], [0, 3, 5]),
                                                       {"cp_size": 2}),
        "NeMo-RL #4070: the padded boundaries passed as the real ones (cu_seqlens_q = padded): "
        "cu_seqlens must stay [0, 3, 5], the padded ones are [0, 4, 8]",
        _expect(cu_seqlens=[0, 3, 5], cu_seqlens_padded=[0, 4, 8])),
    Pin("nemo_rl_3182_padding_not_absorbed",
        Case(([1, 2, 3, 4, 5, 6, 7], [0, 4, 7]), {"cp_size": 2, "loss_mask": [1.0] * 7}),
        "NeMo-RL #3182: alignment padding absorbed into the last sequence's span: the last "
        "sequence keeps 3 real tokens (cu_seqlens ends at 7, max_seqlen 4), its pad carries no "
        "label and no loss",
        _expect(cu_seqlens=[0, 4, 7], cu_seqlens_padded=[0, 4, 8], max_seqlen=4,
                labels=[[2, 3, 4, -100, 6, 7, -100, -100]],
                loss_mask=[[1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0]])),
    Pin("cp1_pads_nothing", Case(([1, 2, 3, 4, 5], [0, 3, 5]), {"cp_size": 1}),
        "cp = 1 pads nothing (a multiple of 2·cp would pad to 2)",
        _expect(input_ids=[[1, 2, 3, 4, 5]], cu_seqlens_padded=[0, 3, 5])),
    Pin("empty_and_single_token_sequences", Case(([7, 8, 9], [0, 0, 1, 1, 3]), {"cp_size": 4}),
        "l = 0 pads to 0 (no span), l = 1 to 8 with cp 4; the single token has no label",
        _expect(cu_seqlens_padded=[0, 0, 8, 8, 16],
                labels=[[-100] * 8 + [9] + [-100] * 7])),
    Pin("ids_collide_with_pad_and_ignore",
        Case(([0, 3, 0, 3], [0, 4]), {"cp_size": 3, "pad_token_id": 0, "ignore_index": 3}),
        "token ids equal to pad_token_id and ignore_index are tokens: positions, not values, "
        "say what is a pad"),
    Pin("tensor_inputs_keep_their_device", Case((torch.tensor([1, 2, 3]), torch.tensor([0, 3])),
                                                {"cp_size": 2, "device": "cpu"}),
        "tensor inputs and an explicit device"),
    Pin("verl_7106_routes_follow_thd_padding",
        Case(([1, 2, 3, 4, 5], [0, 3, 5]), {"cp_size": 2, "routed_experts": THD_ROUTES,
                                            "router_padding_mask": THD_UNCAPTURED}),
        "verl #7106 (R2 router replay on THD-packed batches) and #7524 (its padding routes "
        "rebuilt as zeros): each sequence padded to 4, every token's route at its own stream "
        "position, the pads and the uncaptured last token given the dummy route 0, 1",
        _expect(routed_experts=[[[[5, 6]], [[7, 8]], [[9, 10]], [[0, 1]],
                                 [[11, 12]], [[0, 1]], [[0, 1]], [[0, 1]]]],
                router_padding_mask=[[False, False, False, True, False, True, True, True]])),
    *[Pin(name, BadCase(Case(args, kwargs), raises, why), why) for name, args, kwargs, raises, why
      in [("cp_size_zero", EXAMPLE_ROW, {"cp_size": 0}, ValueError, "cp_size 0"),
          ("cp_size_bool", EXAMPLE_ROW, {"cp_size": True}, TypeError, "cp_size True"),
          ("cu_seqlens_decreasing", ([1, 2, 3], [0, 2, 1, 3]), {"cp_size": 2}, ValueError,
           "sequence 1 of negative length"),
          ("cu_seqlens_short_of_the_row", ([1, 2, 3], [0, 2]), {"cp_size": 2}, ValueError,
           "a token outside every sequence")]],
]

PAD_FOR_CP = register(OpInfo(
    op="cp",
    function="pad_for_cp",
    valid=pad_cases(),
    invalid=hs.one_or_two_defects(bad_pad_cases, pad_cases(), _reference.pad_for_cp),
    compare=assert_identical,
    properties=[
        Property.of(prop_pad_layout, name="layout"),
        Property.of(prop_pad_boundaries, name="boundaries"),
        Property.of(prop_pad_labels, name="labels_never_from_padding"),
        Property.of(prop_pad_cp1_identity, name="cp1_identity", metamorphic=True),
        Property.of(prop_pad_routes, name="routes_on_their_tokens"),
        Property.of(prop_pad_route_count, name="route_count_per_layer"),
    ],
    pins=PAD_PINS,
    forms={"lists": lambda c: c, "tensors": _tensor_form, "row tensors": _row_form},
    devices=("cpu", "cuda"),
    to_device=_row_on,
    describe_row=describe_row,
    picture=pad_picture,
    example=Case(EXAMPLE_ROW, {"cp_size": 2}),
    doc="a packed row → every sequence padded to a multiple of 2·cp, both boundaries, labels",
))

# --------------------------------------------------------------------------- shift_labels


@st.composite
def shift_cases(draw) -> Case:
    """A packed stream, unpadded or with any padding per sequence (0..3 pads each), its
    boundaries, optionally a loss mask over the stream."""
    cp_size = draw(cp_sizes())
    ids, cu = draw(packed_rows(cp_size))
    kwargs = {}
    if draw(st.booleans()):
        pads = draw(st.lists(st.integers(0, 3), min_size=len(cu) - 1, max_size=len(cu) - 1))
        stream, padded = [], [0]
        for i, pad in enumerate(pads):
            stream += ids[cu[i]:cu[i + 1]] + draw(hs.token_rows([pad]))[0]
            padded.append(padded[-1] + cu[i + 1] - cu[i] + pad)
        ids = stream
        kwargs["cu_seqlens_padded"] = padded
    mask = draw(loss_masks(len(ids)))
    if mask is not None:
        kwargs["loss_mask"] = mask
    ignore = draw(st.sampled_from([None, -100, 0]))
    if ignore is not None:
        kwargs["ignore_index"] = ignore
    return Case((ids, cu), kwargs)


def _shift_inputs(case: Case):
    ids, cu = map(_plain, case.args)
    padded = case.kwargs.get("cu_seqlens_padded")
    padded = cu if padded is None else _plain(padded)
    given = case.kwargs.get("loss_mask")
    weights = [1.0] * len(ids) if given is None else [float(v) for v in _plain(given)]
    return list(ids), list(cu), list(padded), weights, case.kwargs.get("ignore_index", -100)


def prop_shift_within_sequences(case: Case, td) -> None:
    """(1, N) int64 labels: labels[t] = input_ids[t + 1] where t and t + 1 are real tokens of the
    same sequence; ignore_index everywhere else (a sequence's last real token, every pad)."""
    ids, cu, padded, weights, ignore = _shift_inputs(case)
    _assert(tuple(td["labels"].shape) == (1, len(ids)) and td["labels"].dtype == torch.int64,
            f"labels {tuple(td['labels'].shape)} {td['labels'].dtype}")
    labels, _ = _expected_shift(ids, weights, cu, padded, ignore)
    _assert(td["labels"][0].tolist() == labels,
            f"labels {td['labels'][0].tolist()} != {labels} (never across a real end, never "
            "from a pad)")


def prop_shift_loss_mask(case: Case, td) -> None:
    """(1, N) float32 loss_mask: the next token's weight where the label is a token, +0.0 where
    it is ignore_index (bitwise)."""
    ids, cu, padded, weights, ignore = _shift_inputs(case)
    _assert(tuple(td["loss_mask"].shape) == (1, len(ids))
            and td["loss_mask"].dtype == torch.float32,
            f"loss_mask {tuple(td['loss_mask'].shape)} {td['loss_mask'].dtype}")
    _, loss = _expected_shift(ids, weights, cu, padded, ignore)
    _assert(torch.equal(td["loss_mask"][0].view(torch.int32), _float_bits(loss)),
            f"loss_mask {td['loss_mask'][0].tolist()} != {loss} (bitwise)")


def prop_shift_sequences_independent(case: Case, td, candidate) -> None:
    """Each sequence shifted alone (its span as a one-sequence stream) gives the same labels and
    loss mask as in the packed stream: no sequence's labels depend on its neighbours."""
    ids, cu, padded, weights, ignore = _shift_inputs(case)
    has_padded = case.kwargs.get("cu_seqlens_padded") is not None
    given = case.kwargs.get("loss_mask")
    given = None if given is None else _plain(given)
    for i in range(len(cu) - 1):
        start, end = padded[i], padded[i + 1]
        kwargs = {k: v for k, v in case.kwargs.items() if k in ("ignore_index",)}
        if has_padded:
            kwargs["cu_seqlens_padded"] = [0, end - start]
        if given is not None:
            kwargs["loss_mask"] = list(given[start:end])
        alone = Case((ids[start:end], [0, cu[i + 1] - cu[i]]), kwargs).call(candidate)
        for key in ("labels", "loss_mask"):
            part = td[key][:, start:end]
            _assert(torch.equal(alone[key], part),
                    f"sequence {i} alone: {key} {alone[key].tolist()} != {part.tolist()} in the "
                    "packed stream")


SHIFT_DEFECTS = ["ignore_type", "ignore_range", "ids_not_a_list", "float_token", "cu_first",
                 "cu_decreasing", "cu_end", "padded_count", "padded_first", "padded_decreasing",
                 "padded_overfull", "padded_end", "padded_float", "mask_length"]


@st.composite
def bad_shift_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on a drawn unpadded packed row (no keyword argument but the defect's), or on
    a call `valid` draws (its keyword arguments kept; the padded boundaries it passes, if any,
    are the ones a cu_seqlens_padded defect changes)."""
    kind = draw(st.sampled_from(SHIFT_DEFECTS))
    if valid is None:
        ids, cu = draw(packed_rows(draw(cp_sizes()), min_sequences=1))
        kw: dict = {}
    else:
        good = draw(valid)
        (ids, cu), kw = good.args, dict(good.kwargs)
    args, padded = (ids, cu), list(kw.get("cu_seqlens_padded", cu))
    if kind == "ignore_type":
        return _bad(args, kw | {"ignore_index": draw(st.sampled_from([1.0, "x", False]))},
                    TypeError, "ignore_index not an int")
    if kind == "ignore_range":
        return _bad(args, kw | {"ignore_index": 2**63}, ValueError, "ignore_index beyond int64")
    if kind == "ids_not_a_list":
        return _bad(("1 2 3", cu), kw, TypeError, "input_ids a str")
    if kind == "float_token":
        return _bad((ids + [0.5], cu[:-1] + [cu[-1] + 1]), kw, TypeError, "a float token")
    if kind == "cu_first":
        return _bad((ids, [2] + cu[1:]), kw, ValueError, "cu_seqlens[0] != 0")
    if kind == "cu_decreasing":
        return _bad((ids + [1, 2], cu + [cu[-1] + 2, cu[-1] + 1, cu[-1] + 2]), kw, ValueError,
                    "decreasing cu_seqlens")
    if kind == "cu_end":
        return _bad((ids + [1, 2], cu), kw, ValueError, "cu_seqlens[-1] != N")
    if kind == "padded_count":
        return _bad(args, kw | {"cu_seqlens_padded": padded + [padded[-1]]}, ValueError,
                    "cu_seqlens_padded has one more entry")
    if kind == "padded_first":
        return _bad(args, kw | {"cu_seqlens_padded": [1] + padded[1:]}, ValueError,
                    "cu_seqlens_padded[0] != 0")
    if kind == "padded_decreasing":
        return _bad((ids + [1], cu + [cu[-1] + 1]),
                    kw | {"cu_seqlens_padded": padded + [padded[-1] - 1 if padded[-1] else -1]},
                    ValueError, "decreasing cu_seqlens_padded")
    if kind == "padded_overfull":
        longer = list(cu)
        longer[-1] += 1
        return _bad((ids + [4], longer), kw | {"cu_seqlens_padded": padded[:-1] + [padded[-1]]},
                    ValueError, "a real length above its span")
    if kind == "padded_end":
        return _bad(args, kw | {"cu_seqlens_padded": padded[:-1] + [padded[-1] + 2]}, ValueError,
                    "cu_seqlens_padded[-1] != N")
    if kind == "padded_float":
        return _bad(args, kw | {"cu_seqlens_padded": torch.tensor(padded, dtype=torch.float32)},
                    TypeError, "float cu_seqlens_padded")
    return _bad(args, kw | {"loss_mask": [1.0] * (len(ids) + 2)}, ValueError, "loss_mask length")


PADDED_ROLL = Case(([1, 2, 3, 0, 4, 5, 6, 7, 8, 0, 0, 0], [0, 3, 8]),
                   {"cu_seqlens_padded": [0, 4, 12]})

SHIFT_PINS = [
    Pin("megatron_6205_4495_padded_roll", PADDED_ROLL,
        "Megatron-LM #6205 / #4495: a label roll with the real cu_seqlens over a tensor laid out "
        "with the padded ones: the pad at 3 labelled 4, token 7 losing its label 8",
        _expect(labels=[[2, 3, -100, -100, 5, 6, 7, 8, -100, -100, -100, -100]],
                loss_mask=[[1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]])),
    Pin("verl_6564_roll_across_sequences", Case(([1, 2, 3, 4, 5], [0, 2, 5]), {}),
        "a roll of the whole packed row labels a sequence's last token with the next "
        "sequence's first (verl #6564's rmpad labels)",
        _expect(labels=[[2, -100, 4, 5, -100]])),
    Pin("empty_and_single_token_sequences", Case(([9, 8], [0, 0, 1, 1, 2]), {}),
        "l = 0 and l = 1 carry no label"),
    Pin("padded_count_differs",
        BadCase(Case(([1, 2], [0, 2]), {"cu_seqlens_padded": [0, 2, 2]}), ValueError,
                "one more padded boundary"),
        "real and padded boundaries of different counts are rejected, never zipped short"),
]

SHIFT_LABELS = register(OpInfo(
    op="cp",
    function="shift_labels",
    valid=shift_cases(),
    invalid=hs.one_or_two_defects(bad_shift_cases, shift_cases(), _reference.shift_labels),
    compare=assert_identical,
    properties=[
        Property.of(prop_shift_within_sequences, name="within_sequences"),
        Property.of(prop_shift_loss_mask, name="loss_mask_follows_labels"),
        Property.of(prop_shift_sequences_independent, name="sequences_independent", metamorphic=True),
    ],
    pins=SHIFT_PINS,
    forms={"lists": lambda c: c, "tensors": _tensor_form, "row tensors": _row_form},
    devices=("cpu", "cuda"),
    to_device=_row_on,
    describe_row=describe_row,
    example=PADDED_ROLL,
    doc="next-token labels of a packed stream, per sequence, real and padded boundaries",
))

# --------------------------------------------------------------------------- shard


@st.composite
def padded_rows(draw) -> tuple[TensorDict, int]:
    """(a padded row, cp): pad_for_cp's output (the oracle's), padded for cp or for a multiple
    of it (more padding than needed), sometimes with an alignment-only sequence at the end (what
    a contiguous layout needs) and an extra per-token field of the caller's."""
    cp_size = draw(cp_sizes())
    ids, cu = draw(packed_rows(cp_size))
    padded_for = cp_size * draw(st.sampled_from([1, 1, 2]))
    mask = draw(loss_masks(len(ids)))
    td = _reference.pad_for_cp(ids, cu, cp_size=padded_for, loss_mask=mask, pad_token_id=9)
    if draw(st.booleans()):  # a caller's per-token field: (1, Tp, 2) float32
        total = td["input_ids"].shape[1]
        values = draw(st.lists(hs.float32s(), min_size=2 * total, max_size=2 * total))
        td["old_logprobs"] = torch.tensor(values, dtype=torch.float32).reshape(1, total, 2)
    routes = draw(row_routes(len(ids)))  # drawn last: router replay, padded by the oracle
    if routes:
        padded = _reference.pad_for_cp(ids, cu, cp_size=padded_for, **routes)
        td["routed_experts"] = padded["routed_experts"]
        td["router_padding_mask"] = padded["router_padding_mask"]
    return td, cp_size


@st.composite
def shard_cases(draw) -> Case:
    padded, cp_size = draw(padded_rows())
    kwargs = {"cp_size": cp_size}
    layout = draw(st.sampled_from(["zigzag", "contiguous", None]))
    if layout is not None:
        kwargs["layout"] = layout
    if draw(st.integers(0, 3)) == 0:
        kwargs["cp_rank"] = draw(st.integers(0, cp_size - 1))
    return Case((padded,), kwargs)


def _dict_form(case: Case) -> Case:
    """The padded row as a plain dict of tensors (non-tensor entries as Python values)."""
    td = case.args[0]
    plain = {key: (td.get_non_tensor(key) if td.is_non_tensor(key) else td[key])
             for key in td.keys()}
    return case.replace(plain)


def _padded_on(case: Case, device: str) -> Case:
    td = case.args[0]
    return case.replace(td.to(device)) if isinstance(td, TensorDictBase) else case


def _shard_inputs(case: Case):
    padded = case.args[0]
    cp_size = case.kwargs["cp_size"]
    layout = case.kwargs.get("layout", "zigzag")
    rank = case.kwargs.get("cp_rank")
    ranks = list(range(cp_size)) if rank is None else [rank]
    cu = padded["cu_seqlens"].tolist()
    cu_padded = padded["cu_seqlens_padded"].tolist()
    fields = [k for k in padded.keys() if not padded.is_non_tensor(k)
              and k not in ("cu_seqlens", "cu_seqlens_padded")]
    return padded, cp_size, layout, ranks, cu, cu_padded, fields


def prop_equal_tokens_per_rank(case: Case, out) -> None:
    """Every rank holds n = Tp / cp tokens: each per-token field (R, n, ...), padded_index and
    token_index (R, n) int64, local cu_seqlens_padded (R, S + 1) int32 ending at n (zigzag: each
    sequence's span / cp on every rank), `rank` the ranks, cp_size and layout as given."""
    padded, cp_size, layout, ranks, cu, cu_padded, fields = _shard_inputs(case)
    n = cu_padded[-1] // cp_size
    _assert(list(out.batch_size) == [len(ranks)], f"batch_size {list(out.batch_size)} != "
            f"[{len(ranks)}] (one row per rank)")
    for key in fields:
        want = (len(ranks), n, *padded[key].shape[2:])
        _assert(tuple(out[key].shape) == want and out[key].dtype == padded[key].dtype,
                f"{key}: {tuple(out[key].shape)} {out[key].dtype}, expected {want} "
                f"{padded[key].dtype}")
    for key, dtype, shape in (("padded_index", torch.int64, (len(ranks), n)),
                              ("token_index", torch.int64, (len(ranks), n)),
                              ("cu_seqlens", torch.int32, (len(ranks), len(cu))),
                              ("cu_seqlens_padded", torch.int32, (len(ranks), len(cu))),
                              ("rank", torch.int64, (len(ranks),))):
        _assert(tuple(out[key].shape) == shape and out[key].dtype == dtype,
                f"{key}: {tuple(out[key].shape)} {out[key].dtype}, expected {shape} {dtype}")
    _assert(out["rank"].tolist() == ranks, f"rank {out['rank'].tolist()} != {ranks}")
    for row, local in enumerate(out["cu_seqlens_padded"].tolist()):
        _assert(local[0] == 0 and local[-1] == n,
                f"rank {ranks[row]}: local cu_seqlens_padded {local} must run from 0 to n = {n}")
        if layout == "zigzag":
            spans = [(b - a) // cp_size for a, b in zip(cu_padded, cu_padded[1:])]
            got = [b - a for a, b in zip(local, local[1:])]
            _assert(got == spans, f"rank {ranks[row]}: holds {got} positions of each sequence, "
                    f"zigzag gives every rank span / cp = {spans}")
    _assert(out.get_non_tensor("cp_size") == cp_size and out.get_non_tensor("layout") == layout,
            "cp_size / layout not as given")


def prop_nothing_dropped_or_duplicated(case: Case, out) -> None:
    """Over all ranks, padded_index is every stream position exactly once and token_index every
    real token exactly once (plus -1 for each pad); one rank's slots are distinct."""
    padded, cp_size, layout, ranks, cu, cu_padded, fields = _shard_inputs(case)
    positions = [g for row in out["padded_index"].tolist() for g in row]
    tokens = [t for row in out["token_index"].tolist() for t in row]
    _assert(len(set(positions)) == len(positions) and all(0 <= g < cu_padded[-1]
                                                          for g in positions),
            f"padded_index repeats or leaves the stream: {out['padded_index'].tolist()}")
    real = [t for t in tokens if t != -1]
    _assert(len(set(real)) == len(real), f"a token is held twice: {out['token_index'].tolist()}")
    if len(ranks) == cp_size:
        _assert(sorted(positions) == list(range(cu_padded[-1])),
                "the ranks together do not hold every stream position once")
        _assert(sorted(real) == list(range(cu[-1])),
                f"the ranks together hold real tokens {sorted(real)}, not 0..{cu[-1] - 1} once "
                "each (a token dropped or duplicated)")


def prop_values_travel(case: Case, out) -> None:
    """Every per-token field (input_ids, position_ids, labels, loss_mask, the caller's) holds at
    each local slot the padded row's value at that slot's padded_index, bitwise; token_index is
    that position's token (-1 at a pad)."""
    padded, cp_size, layout, ranks, cu, cu_padded, fields = _shard_inputs(case)
    index = out["padded_index"]
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= cu_padded[-1]):
        raise AssertionError(f"padded_index leaves the stream: {index.tolist()}")
    for key in fields:
        source = padded[key][0]
        want = source[index.reshape(-1)].reshape(out[key].shape)
        try:
            assert_identical(want, out[key])
        except Mismatch as err:
            raise AssertionError(f"{key} did not travel with its tokens: {err}") from None
    tokens = token_at(cu, cu_padded)
    want = [[tokens[g] for g in row] for row in index.tolist()]
    _assert(out["token_index"].tolist() == want,
            f"token_index {out['token_index'].tolist()} != {want}")


def prop_routes_per_rank(case: Case, out) -> None:
    """Router replay per CP rank (a padded row with routed_experts and router_padding_mask):
    on every rank the masked slots — every pad among them — hold the dummy route 0..topk-1,
    and per layer its n slots send n * topk distinct (token, expert) assignments; over all
    ranks every captured route reaches its own token exactly once: the unmasked slots,
    put back by token_index (unshard of the shards), are the row's routes of its captured
    tokens, each once."""
    padded, cp_size, layout, ranks, cu, cu_padded, fields = _shard_inputs(case)
    if "routed_experts" not in fields:
        return
    routes, mask = out["routed_experts"].cpu(), out["router_padding_mask"].cpu()
    tokens = out["token_index"].cpu()
    source, given_mask = padded["routed_experts"].cpu()[0], padded["router_padding_mask"].cpu()[0]
    for row, rank in enumerate(ranks):
        assert_dummy_where_masked(routes[row], mask[row], f"rank {rank}, slot")
        pads = (tokens[row] < 0) & ~mask[row]
        _assert(not bool(pads.any()), f"rank {rank}: pad slots {pads.nonzero().flatten().tolist()} "
                "are not masked")
        # (less the repeats its captured routes hold themselves: a real router's hold none)
        assert_route_count(routes[row], [routes[row][~mask[row]]], f"rank {rank}")
    if len(ranks) < cp_size:
        return
    real = {}
    for row in range(len(ranks)):
        for j in (~mask[row]).nonzero().flatten().tolist():
            t = int(tokens[row, j])
            _assert(t >= 0 and t not in real, f"token {t} holds a captured route twice, or a "
                    f"pad one (rank {ranks[row]}, slot {j})")
            real[t] = routes[row, j]
    positions = token_at(cu, cu_padded)
    want = {t: source[g] for g, t in enumerate(positions) if t >= 0 and not given_mask[g]}
    _assert(sorted(real) == sorted(want), f"the ranks hold captured routes of tokens "
            f"{sorted(real)}, the row has them for {sorted(want)}")
    for t, route in want.items():
        _assert(torch.equal(real[t], route), f"token {t}: the ranks give it route "
                f"{real[t].tolist()}, the row has {route.tolist()}")


def _work(positions: list[int], cu: list[int], cu_padded: list[int]) -> tuple[int, int]:
    """(padded, real) causal work of a rank's positions: w + 1 for each, w its position in its
    sequence's span; the real sum only over real tokens."""
    owner = position_owner(cu_padded)
    padded = real = 0
    for g in positions:
        i, w = owner[g]
        padded += w + 1
        if w < cu[i + 1] - cu[i]:
            real += w + 1
    return padded, real


def prop_zigzag_balance(case: Case, out) -> None:
    """Rank r holds chunks r and 2·cp-1-r of every sequence (zigzag) or [r·n, (r+1)·n)
    (contiguous; all of it for cp = 1). Zigzag: every rank's causal work over the padded stream
    is the same, and over the real tokens any two ranks differ by at most the pads' own work
    (docs/cp.md, Causal work)."""
    padded, cp_size, layout, ranks, cu, cu_padded, fields = _shard_inputs(case)
    rows = out["padded_index"].tolist()
    for row, rank in zip(rows, ranks):
        want = rank_positions(cu_padded, cp_size, layout, rank)
        _assert(row == want, f"rank {rank} holds stream positions {row}, the {layout} layout "
                f"gives it {want}")
    if layout != "zigzag" or len(ranks) != cp_size or cp_size == 1:
        return
    works = [_work(row, cu, cu_padded) for row in rows]
    pads = sum(w + 1 for (i, w) in position_owner(cu_padded) if w >= cu[i + 1] - cu[i])
    _assert(len({p for p, _ in works}) == 1,
            f"zigzag ranks do unequal causal work over the padded stream: {[p for p, _ in works]}")
    real = [r for _, r in works]
    _assert(max(real) - min(real) <= pads,
            f"real causal work per rank {real} differs by {max(real) - min(real)}, more than "
            f"the pads' own work {pads}")


def prop_local_boundaries(case: Case, out) -> None:
    """Per rank, local cu_seqlens (real) and cu_seqlens_padded count the real tokens and the
    stream positions of each sequence it holds; each sequence's slots are contiguous with its
    real tokens first; over all ranks they add up to l_i and to each span."""
    padded, cp_size, layout, ranks, cu, cu_padded, fields = _shard_inputs(case)
    owner = position_owner(cu_padded)
    sequences = len(cu) - 1
    real_total, held_total = [0] * sequences, [0] * sequences
    for row, rank in enumerate(ranks):
        slots = out["padded_index"][row].tolist()
        local_real = out["cu_seqlens"][row].tolist()
        local_held = out["cu_seqlens_padded"][row].tolist()
        for i in range(sequences):
            mine = [j for j, g in enumerate(slots) if owner[g][0] == i]
            reals = [j for j in mine if owner[slots[j]][1] < cu[i + 1] - cu[i]]
            _assert(mine == list(range(local_held[i], local_held[i] + len(mine)))
                    and local_held[i + 1] - local_held[i] == len(mine),
                    f"rank {rank}: sequence {i} holds slots {mine}, local cu_seqlens_padded "
                    f"{local_held}")
            _assert(reals == mine[:len(reals)] and local_real[i + 1] - local_real[i] == len(reals),
                    f"rank {rank}: sequence {i}'s real slots {reals} (of {mine}) are not its "
                    f"first ones or not what local cu_seqlens {local_real} counts")
            real_total[i] += len(reals)
            held_total[i] += len(mine)
    if len(ranks) == cp_size:
        lengths = [b - a for a, b in zip(cu, cu[1:])]
        spans = [b - a for a, b in zip(cu_padded, cu_padded[1:])]
        _assert(real_total == lengths and held_total == spans,
                f"over the ranks: real {real_total} vs lengths {lengths}, held {held_total} vs "
                f"spans {spans}")


def prop_one_rank_is_its_row(case: Case, out, candidate) -> None:
    """shard(cp_rank=r) is row r of shard() (every tensor entry; cp_size, layout)."""
    padded, cp_size, layout, ranks, cu, cu_padded, fields = _shard_inputs(case)
    base = {k: v for k, v in case.kwargs.items() if k != "cp_rank"}
    if case.kwargs.get("cp_rank") is None:
        pairs = [(rank, Case(case.args, {**base, "cp_rank": rank}).call(candidate), rank)
                 for rank in range(cp_size)]
        whole = out
    else:
        rank = case.kwargs["cp_rank"]
        pairs = [(rank, out, rank)]
        whole = Case(case.args, base).call(candidate)
    for rank, one, row in pairs:
        for key in whole.keys():
            if whole.is_non_tensor(key):
                _assert(one.get_non_tensor(key) == whole.get_non_tensor(key), f"{key} differs")
                continue
            try:
                assert_identical(whole[key][row:row + 1], one[key])
            except Mismatch as err:
                raise AssertionError(f"shard(cp_rank={rank})[{key!r}] is not row {rank} of "
                                     f"shard(): {err}") from None


def shard_picture(td) -> dict[str, list[str]]:
    """Each rank's slots: the real row's token index (mod 10) of a real token, `.` for a pad."""
    rows = []
    for rank, tokens in zip(td["rank"].tolist(), td["token_index"].tolist()):
        rows.append(f"rank {rank}: " + "".join("." if t < 0 else str(t % 10) for t in tokens))
    return {"ranks": rows}


def _padded(ids, cu, cp_size, **kwargs):
    return _reference.pad_for_cp(ids, cu, cp_size=cp_size, **kwargs)


SHARD_EXAMPLE = Case((_padded(*EXAMPLE_ROW, 2),), {"cp_size": 2})

SHARD_PINS = [
    Pin("worked_example_zigzag", SHARD_EXAMPLE, "docs/cp.md's example, zigzag",
        _expect(input_ids=[[11, 12, 0, 0, 21, 0], [13, 14, 15, 0, 22, 0]],
                padded_index=[[0, 1, 6, 7, 8, 11], [2, 3, 4, 5, 9, 10]],
                token_index=[[0, 1, -1, -1, 5, -1], [2, 3, 4, -1, 6, -1]],
                cu_seqlens=[[0, 2, 2, 3], [0, 3, 3, 4]],
                cu_seqlens_padded=[[0, 4, 4, 6], [0, 4, 4, 6]])),
    Pin("worked_example_contiguous", Case(SHARD_EXAMPLE.args, {"cp_size": 2,
                                                               "layout": "contiguous"}),
        "docs/cp.md's example, contiguous",
        _expect(padded_index=[[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]],
                cu_seqlens=[[0, 5, 5, 5], [0, 0, 0, 2]],
                cu_seqlens_padded=[[0, 6, 6, 6], [0, 2, 2, 6]])),
    Pin("te_1930_last_valid_token_kept", Case((_padded(list(range(1, 8)), [0, 7], 2),),
                                              {"cp_size": 2}),
        "TransformerEngine #1930: a length of 7 with cp 2 treated as 6 (the last real token "
        "dropped); rank 0 holds chunks 0 and 3 (3 real tokens), rank 1 chunks 1 and 2 (4)",
        _expect(input_ids=[[1, 2, 7, 0], [3, 4, 5, 6]], cu_seqlens=[[0, 3], [0, 4]],
                token_index=[[0, 1, 6, -1], [2, 3, 4, 5]])),
    Pin("te_3331_tail_padding_real_counts", Case((_padded([1, 2, 3, 4, 5], [0, 5], 2),),
                                                 {"cp_size": 2}),
        "TransformerEngine #3331: per-rank real lengths approximated as cu_seqlens // cp "
        "(2 and 2) on a tail-padded sequence; they are 2 and 3",
        _expect(cu_seqlens=[[0, 2], [0, 3]], cu_seqlens_padded=[[0, 4], [0, 4]])),
    Pin("megatron_2645_local_boundaries_from_padded", Case((_padded([1, 2, 3, 4, 5, 6, 7, 8],
                                                                    [0, 3, 8], 2),),
                                                           {"cp_size": 2}),
        "Megatron-LM #2645: local boundaries as cu_seqlens // cp ([0, 1, 4]) on lengths that "
        "are not multiples; they are cu_seqlens_padded // cp = [0, 2, 6]",
        _expect(cu_seqlens_padded=[[0, 2, 6], [0, 2, 6]])),
    Pin("verl_5981_short_sequences", Case((_padded([5, 6, 7], [0, 1, 1, 3], 4),),
                                          {"cp_size": 4}),
        "verl #5981 / #6001: real tokens indexed with padded coordinates fail on sequences far "
        "shorter than their span (1 and 2 tokens in spans of 8): ranks holding only pads still "
        "hold n tokens, with 0 real ones",
        _expect(cu_seqlens=[[0, 1, 1, 2], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]],
                token_index=[[0, -1, 1, -1], [-1, -1, 2, -1], [-1] * 4, [-1] * 4])),
    Pin("verl_6869_no_rank_starved", Case((_padded(list(range(9)), boundaries_of([1] * 9), 4),),
                                          {"cp_size": 4, "layout": "contiguous"}),
        "verl #6869: nine sequences over four ranks split by ceil gave [3, 3, 3, 0]; every rank "
        "holds the same number of tokens (72 / 4 = 18)",
        _expect(cu_seqlens_padded=[[0, 8, 16, 18, 18, 18, 18, 18, 18, 18],
                                   [0, 0, 0, 6, 14, 18, 18, 18, 18, 18],
                                   [0, 0, 0, 0, 0, 4, 12, 18, 18, 18],
                                   [0, 0, 0, 0, 0, 0, 0, 2, 10, 18]])),
    Pin("cp1_is_the_identity", Case((_padded([1, 2, 3], [0, 3], 1),), {"cp_size": 1}),
        "cp = 1: rank 0 holds the stream in order, odd lengths included",
        _expect(input_ids=[[1, 2, 3]], token_index=[[0, 1, 2]])),
    Pin("verl_7106_routes_per_rank",
        Case((_padded([1, 2, 3, 4, 5], [0, 3, 5], 2, routed_experts=THD_ROUTES,
                      router_padding_mask=THD_UNCAPTURED),), {"cp_size": 2}),
        "verl #7106 (R2 replay on THD-packed batches under CP): each rank's routes are its "
        "own tokens' (rank 0: chunks 0 and 3 of each sequence, tokens 0 and 3 and two pads; "
        "rank 1: tokens 1, 2, the uncaptured 4 and a pad), never its mirror rank's, with the "
        "dummy route at every pad",
        _expect(routed_experts=[[[[5, 6]], [[0, 1]], [[11, 12]], [[0, 1]]],
                                [[[7, 8]], [[9, 10]], [[0, 1]], [[0, 1]]]],
                router_padding_mask=[[False, True, False, True], [False, False, True, True]])),
    Pin("one_rank", Case(SHARD_EXAMPLE.args, {"cp_size": 2, "cp_rank": 1}),
        "cp_rank=1: rank 1's row alone", _expect(rank=[1], padded_index=[[2, 3, 4, 5, 9, 10]])),
    *[Pin(name, BadCase(Case(SHARD_EXAMPLE.args, kwargs), raises, why), why)
      for name, kwargs, raises, why in [
          ("cp_size_zero", {"cp_size": 0}, ValueError, "cp_size 0"),
          ("cp_rank_out_of_range", {"cp_size": 2, "cp_rank": 2}, ValueError, "cp_rank == cp"),
          ("cp_rank_a_float", {"cp_size": 2, "cp_rank": 1.0}, TypeError, "cp_rank 1.0"),
          ("unknown_layout", {"cp_size": 2, "layout": "ring"}, ValueError, "layout 'ring'"),
          ("spans_not_multiples_of_2cp", {"cp_size": 4}, ValueError,
           "padded for cp 2, sharded for cp 4: spans of 8 and 4 are not multiples of 8"),
          ("stream_not_a_multiple_of_cp", {"cp_size": 5, "layout": "contiguous"}, ValueError,
           "12 positions over 5 ranks")]],
]

SHARD = register(OpInfo(
    op="cp",
    function="shard",
    valid=shard_cases(),
    invalid=None,  # set below (bad_shard_cases needs padded_rows)
    compare=assert_identical,
    properties=[
        Property.of(prop_equal_tokens_per_rank),
        Property.of(prop_nothing_dropped_or_duplicated),
        Property.of(prop_values_travel, name="values_travel_with_tokens"),
        Property.of(prop_zigzag_balance),
        Property.of(prop_local_boundaries),
        Property.of(prop_one_rank_is_its_row, metamorphic=True),
        Property.of(prop_routes_per_rank),
    ],
    pins=SHARD_PINS,
    forms={"tensordict": lambda c: c, "dict": _dict_form},
    devices=("cpu", "cuda"),
    to_device=_padded_on,
    # CUDA: each rank's slots by one Triton kernel, the fields gathered by another
    paths=Paths(triton=("triton:cp._shard_index", "triton:cp._gather_rows")),
    describe_row=lambda case, row: f"rank {row}",
    picture=shard_picture,
    example=SHARD_EXAMPLE,
    doc="a padded row → each CP rank's tokens (zigzag or contiguous), local boundaries",
))

SHARD_DEFECTS = ["cp_type", "cp_value", "layout_type", "layout_value", "rank_type",
                 "rank_range", "not_a_mapping", "missing_key", "field_shape", "ids_1d",
                 "boundary_float", "boundary_list", "zigzag_multiple", "contiguous_multiple",
                 "padded_end", "overfull"]


@st.composite
def bad_shard_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on a drawn padded row and cp_size (no other keyword argument but the
    defect's), or on a call `valid` draws (its layout and cp_rank kept)."""
    kind = draw(st.sampled_from(SHARD_DEFECTS))
    if valid is None:
        padded, cp_size = draw(padded_rows())
        kwargs = {"cp_size": cp_size}
    else:
        good = draw(valid)
        (padded,), kwargs = good.args, dict(good.kwargs)
        cp_size = kwargs["cp_size"]
    total = padded["input_ids"].shape[1]
    if kind == "cp_type":
        return _bad((padded,), {**kwargs, "cp_size": draw(st.sampled_from([2.0, None, False]))},
                    TypeError, "cp_size not an int")
    if kind == "cp_value":
        return _bad((padded,), {**kwargs, "cp_size": -2}, ValueError, "cp_size < 1")
    if kind == "layout_type":
        return _bad((padded,), {**kwargs, "layout": 0}, TypeError, "layout not a str")
    if kind == "layout_value":
        return _bad((padded,), {**kwargs, "layout": draw(st.sampled_from(["ring", "Zigzag",
                                                                         ""]))},
                    ValueError, "unknown layout")
    if kind == "rank_type":
        return _bad((padded,), {**kwargs, "cp_rank": draw(st.sampled_from([0.0, "0", True]))},
                    TypeError, "cp_rank not an int")
    if kind == "rank_range":
        return _bad((padded,), {**kwargs, "cp_rank": draw(st.sampled_from([cp_size, -1]))},
                    ValueError, "cp_rank outside [0, cp)")
    if kind == "not_a_mapping":
        return _bad(([padded],), kwargs, TypeError, "padded a list")
    if kind == "missing_key":
        key = draw(st.sampled_from(["input_ids", "cu_seqlens", "cu_seqlens_padded"]))
        return _bad((padded.exclude(key),), kwargs, ValueError, f"no {key}")
    if kind == "field_shape":
        broken = padded.clone()
        broken["extra"] = torch.zeros(1, total + 1)
        return _bad((broken,), kwargs, ValueError, "a field of another length")
    if kind == "ids_1d":
        plain = _dict_form(Case((padded,))).args[0]
        plain["input_ids"] = plain["input_ids"].reshape(-1)
        return _bad((plain,), kwargs, ValueError, "input_ids 1-D")
    if kind == "boundary_float":
        broken = padded.clone()
        broken["cu_seqlens"] = broken["cu_seqlens"].float()
        return _bad((broken,), kwargs, TypeError, "float cu_seqlens")
    if kind == "boundary_list":
        plain = _dict_form(Case((padded,))).args[0]
        plain["cu_seqlens_padded"] = plain["cu_seqlens_padded"].tolist()
        return _bad((plain,), kwargs, TypeError, "cu_seqlens_padded a list")
    spans = [b - a for a, b in zip(padded["cu_seqlens_padded"].tolist(),
                                   padded["cu_seqlens_padded"].tolist()[1:])]
    if kind == "zigzag_multiple":
        bigger = next((c for c in range(2, 2 * MAX_CP + 1)
                       if any(s % (2 * c) for s in spans)), None)
        if bigger is not None:
            return _bad((padded,), {**kwargs, "cp_size": bigger}, ValueError,
                        "span not a multiple")
    if kind == "contiguous_multiple" and total > 0:
        other = next(c for c in range(2, total + 2) if total % c)
        return _bad((padded,), {**kwargs, "cp_size": other, "layout": "contiguous"}, ValueError,
                    "Tp not a multiple of cp")
    if kind == "overfull" and len(spans) > 0:
        broken = padded.clone()
        cu = broken["cu_seqlens"].clone()
        cu[-1] = cu[-1] + spans[-1] + 1
        broken["cu_seqlens"] = cu
        return _bad((broken,), kwargs, ValueError, "a real length above its span")
    broken = padded.clone()  # padded_end (and the fallback of the kinds above)
    padded_cu = broken["cu_seqlens_padded"].clone()
    padded_cu[-1] = padded_cu[-1] + 2 * cp_size
    broken["cu_seqlens_padded"] = padded_cu
    return _bad((broken,), kwargs, ValueError, "cu_seqlens_padded[-1] != Tp")


SHARD.invalid = hs.one_or_two_defects(bad_shard_cases, shard_cases(), _reference.shard)

# --------------------------------------------------------------------------- shard_bshd


@st.composite
def bshd_cases(draw) -> Case:
    cp_size = draw(cp_sizes())
    layout = draw(st.sampled_from(["zigzag", "contiguous", None]))
    unit = cp_size if layout == "contiguous" else step_of(cp_size)
    rows, columns = draw(st.integers(0, 3)), unit * draw(st.integers(0, 3))
    gen = draw(hs.generators())
    fields = {"input_ids": torch.randint(0, 50, (rows, columns), generator=gen),
              "loss_mask": torch.rand((rows, columns), generator=gen)}
    if draw(st.booleans()):
        fields["attention_mask"] = torch.rand((rows, columns), generator=gen) < 0.8
    if draw(st.booleans()):
        fields["hidden"] = torch.randn((rows, columns, 2), generator=gen)
    kwargs = {"cp_size": cp_size}
    if layout is not None:
        kwargs["layout"] = layout
    if draw(st.integers(0, 3)) == 0:
        kwargs["cp_rank"] = draw(st.integers(0, cp_size - 1))
    return Case((TensorDict(fields, batch_size=[rows]),), kwargs)


def _bshd_inputs(case: Case):
    batch = case.args[0]
    cp_size = case.kwargs["cp_size"]
    layout = case.kwargs.get("layout", "zigzag")
    rank = case.kwargs.get("cp_rank")
    keys = [k for k in batch.keys() if not (isinstance(batch, TensorDictBase)
                                            and batch.is_non_tensor(k))]
    columns = batch[keys[0]].shape[1]
    return batch, cp_size, layout, ([rank] if rank is not None else list(range(cp_size))), \
        keys, columns


def prop_bshd_chunks(case: Case, out) -> None:
    """column_index (R, B, S / cp) int64: rank r's columns are chunks r and 2·cp-1-r of each row
    (zigzag) or [r·S/cp, (r+1)·S/cp) (contiguous), the same for every row; every field is the
    batch at those columns, in its own dtype."""
    batch, cp_size, layout, ranks, keys, columns = _bshd_inputs(case)
    rows = batch[keys[0]].shape[0]
    n = columns // cp_size
    index = out["column_index"]
    _assert(tuple(index.shape) == (len(ranks), rows, n) and index.dtype == torch.int64,
            f"column_index {tuple(index.shape)} {index.dtype}")
    for row, rank in enumerate(ranks):
        want = rank_positions([0, columns], cp_size, layout, rank)
        for b in range(rows):
            _assert(index[row, b].tolist() == want,
                    f"rank {rank}, row {b}: columns {index[row, b].tolist()} != {want}")
        for key in keys:
            expected = batch[key][:, want] if want else batch[key][:, :0]
            try:
                assert_identical(expected, out[key][row])
            except Mismatch as err:
                raise AssertionError(f"rank {rank}: {key} is not the batch at its columns: "
                                     f"{err}") from None


def prop_bshd_round_trip(case: Case, out) -> None:
    """Over all ranks each column of each row is held exactly once: writing every rank's fields
    back at column_index restores the batch."""
    batch, cp_size, layout, ranks, keys, columns = _bshd_inputs(case)
    if len(ranks) != cp_size:
        return
    for key in keys:
        value = batch[key]
        restored = torch.zeros_like(value)
        seen = torch.zeros(value.shape[:2], dtype=torch.int64)
        for row in range(cp_size):
            for b in range(value.shape[0]):
                cols = out["column_index"][row, b]
                restored[b, cols] = out[key][row, b]
                seen[b, cols] += 1
        _assert(bool((seen == 1).all()), f"{key}: columns held {seen.tolist()} times, not once")
        try:
            assert_identical(value, restored)
        except Mismatch as err:
            raise AssertionError(f"{key} does not come back from the ranks: {err}") from None


BSHD_EXAMPLE = Case((TensorDict({"input_ids": torch.arange(8).reshape(1, 8)}, batch_size=[1]),),
                    {"cp_size": 2})


def _bshd_dict_form(case: Case) -> Case:
    batch = case.args[0]
    return case.replace({key: batch[key] for key in batch.keys()})


BSHD_PINS = [
    Pin("megatron_bshd_zigzag", BSHD_EXAMPLE,
        "Megatron-core get_batch_on_this_cp_rank: S = 8, cp 2: rank 0 columns 0 1 6 7",
        _expect(input_ids=[[[0, 1, 6, 7]], [[2, 3, 4, 5]]])),
    Pin("bshd_contiguous", Case(BSHD_EXAMPLE.args, {"cp_size": 2, "layout": "contiguous"}),
        "contiguous: rank 0 columns 0..3", _expect(input_ids=[[[0, 1, 2, 3]], [[4, 5, 6, 7]]])),
    Pin("bshd_one_rank", Case(BSHD_EXAMPLE.args, {"cp_size": 4, "cp_rank": 3}),
        "cp 4, rank 3: chunks 3 and 4", _expect(input_ids=[[[3, 4]]])),
    Pin("bshd_s_not_a_multiple",
        BadCase(Case((TensorDict({"x": torch.zeros(2, 6)}, batch_size=[2]),), {"cp_size": 2}),
                ValueError, "S = 6, 2·cp = 4"),
        "a sequence dimension that does not split into 2·cp chunks is rejected, never floored"),
]

SHARD_BSHD = register(OpInfo(
    op="cp",
    function="shard_bshd",
    valid=bshd_cases(),
    invalid=None,
    compare=assert_identical,
    properties=[
        Property.of(prop_bshd_chunks, name="chunks_per_rank"),
        Property.of(prop_bshd_round_trip, name="round_trip"),
    ],
    pins=BSHD_PINS,
    forms={"tensordict": lambda c: c, "dict": _bshd_dict_form},
    devices=("cpu", "cuda"),
    paths=Paths(triton=("triton:cp._gather_rows",)),  # CUDA: the columns, one gather
    to_device=lambda case, device: case.replace(case.args[0].to(device))
    if isinstance(case.args[0], TensorDictBase) else case,
    example=BSHD_EXAMPLE,
    doc="(B, S, ...) fields → each CP rank's columns (Megatron's BSHD get_batch_on_this_cp_rank)",
))

BSHD_DEFECTS = ["cp_type", "layout_value", "rank_range", "not_a_mapping", "no_field",
                "not_a_tensor", "one_dimensional", "shape_mismatch", "not_a_multiple"]


@st.composite
def bad_bshd_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on a drawn batch and cp_size (no other keyword argument but the defect's), or
    on a call `valid` draws (its other arguments kept as they are)."""
    kind = draw(st.sampled_from(BSHD_DEFECTS))
    good = draw(valid if valid is not None else bshd_cases())
    batch = good.args[0]
    cp_size = good.kwargs["cp_size"]
    kwargs = dict(good.kwargs) if valid is not None else {"cp_size": cp_size}
    layout = kwargs.get("layout", "zigzag")
    plain = {key: batch[key] for key in batch.keys()}
    rows, columns = batch["input_ids"].shape
    if kind == "cp_type":
        return _bad((batch,), {**kwargs, "cp_size": "2"}, TypeError, "cp_size a str")
    if kind == "layout_value":
        return _bad((batch,), {**kwargs, "layout": "striped"}, ValueError, "unknown layout")
    if kind == "rank_range":
        return _bad((batch,), {**kwargs, "cp_rank": cp_size + 1}, ValueError, "cp_rank > cp")
    if kind == "not_a_mapping":
        return _bad((batch["input_ids"],), kwargs, TypeError, "a tensor, not a mapping")
    if kind == "no_field":
        return _bad(({},), kwargs, ValueError, "no field")
    if kind == "not_a_tensor":
        return _bad(({**plain, "extra": [[1, 2]]},), kwargs, TypeError, "a list field")
    if kind == "one_dimensional":
        return _bad(({**plain, "extra": torch.zeros(rows)},), kwargs, ValueError, "a 1-D field")
    unit = cp_size if layout == "contiguous" else step_of(cp_size)
    if kind == "shape_mismatch" or valid is not None and unit == 1:
        return _bad(({**plain, "extra": torch.zeros(rows, columns + 1)},), kwargs, ValueError,
                    "a field of another S")
    if valid is not None:  # not_a_multiple on the drawn call: one column more than S
        return _bad(({"input_ids": torch.zeros(rows, columns + 1, dtype=torch.int64)},), kwargs,
                    ValueError, "S not a multiple")
    odd = columns + 1
    return _bad(({"input_ids": torch.zeros(rows, odd, dtype=torch.int64)},),
                {"cp_size": 2 if odd % 4 else 3}, ValueError, "S not a multiple")


SHARD_BSHD.invalid = hs.one_or_two_defects(bad_bshd_cases, bshd_cases(), _reference.shard_bshd)

# --------------------------------------------------------------------------- unshard


@st.composite
def unshard_cases(draw) -> Case:
    """Per-rank outputs for a padded row (the oracle's pad_for_cp): float32 (cp, n) or
    (cp, n, 2), int64 (cp, n), or routes (cp, n, layers, topk) of a route dtype (router
    replay: uint8 .. int64, kept); as one tensor or a list of rank tensors; boundaries as lists
    or tensors."""
    cp_size = draw(cp_sizes())
    ids, cu = draw(packed_rows(cp_size))
    padded = _reference.pad_for_cp(ids, cu, cp_size=cp_size)
    cu_padded = padded["cu_seqlens_padded"].tolist()
    n = cu_padded[-1] // cp_size
    kind = draw(st.sampled_from(["float", "hidden", "int", "routes"]))
    gen = draw(hs.generators())
    if kind == "int":
        outputs = torch.randint(-5, 50, (cp_size, n), generator=gen)
    elif kind == "routes":
        routes = draw(token_routes(cp_size * n))
        outputs = routes.reshape(cp_size, n, *routes.shape[1:])
    else:
        outputs = torch.randn((cp_size, n, 2) if kind == "hidden" else (cp_size, n),
                              generator=gen)
    if draw(st.booleans()):
        outputs = list(outputs.clone())
    kwargs = {}
    layout = draw(st.sampled_from(["zigzag", "contiguous", None]))
    if layout is not None:
        kwargs["layout"] = layout
    if draw(st.booleans()):
        return Case((outputs, padded["cu_seqlens"], padded["cu_seqlens_padded"]), kwargs)
    return Case((outputs, cu, cu_padded), kwargs)


def _unshard_inputs(case: Case):
    outputs, cu, cu_padded = case.args
    stacked = outputs if isinstance(outputs, torch.Tensor) else torch.stack(list(outputs))
    cu = cu.tolist() if isinstance(cu, torch.Tensor) else list(cu)
    cu_padded = cu_padded.tolist() if isinstance(cu_padded, torch.Tensor) else list(cu_padded)
    return stacked, cu, cu_padded, case.kwargs.get("layout", "zigzag")


def prop_inverse_of_shard(case: Case, out) -> None:
    """(1, T, ...) in the outputs' dtype: the value at real token t is the one its rank computed
    at the slot the layout gives that token (docs/cp.md, the inverse of shard)."""
    stacked, cu, cu_padded, layout = _unshard_inputs(case)
    cp_size = stacked.shape[0]
    tokens = token_at(cu, cu_padded)
    placed = {}
    for rank in range(cp_size):
        for j, g in enumerate(rank_positions(cu_padded, cp_size, layout, rank)):
            if tokens[g] >= 0:
                placed[tokens[g]] = stacked[rank, j]
    trailing = tuple(stacked.shape[2:])
    want = (torch.stack([placed[t] for t in range(cu[-1])]) if cu[-1]
            else torch.empty((0, *trailing), dtype=stacked.dtype)).reshape(1, cu[-1], *trailing)
    try:
        assert_identical(want, out)
    except Mismatch as err:
        raise AssertionError(f"the real row's order is not restored: {err}") from None


def prop_pads_never_read(case: Case, out, candidate) -> None:
    """What the ranks computed at pads is never read: changing every pad slot's output
    (adding 1) leaves the result unchanged."""
    stacked, cu, cu_padded, layout = _unshard_inputs(case)
    cp_size = stacked.shape[0]
    tokens = token_at(cu, cu_padded)
    changed = stacked.clone()
    for rank in range(cp_size):
        for j, g in enumerate(rank_positions(cu_padded, cp_size, layout, rank)):
            if tokens[g] < 0:
                changed[rank, j] = changed[rank, j] + 1
    outputs = case.args[0]
    again = changed if isinstance(outputs, torch.Tensor) else list(changed)
    result = Case((again, *case.args[1:]), case.kwargs).call(candidate)
    try:
        assert_identical(out, result)
    except Mismatch as err:
        raise AssertionError(f"a pad's output reached the result: {err}") from None


SLIME_GATHER = torch.arange(8.0).reshape(2, 4)

UNSHARD_PINS = [
    Pin("slime_1871_contiguous_not_zigzag",
        Case((SLIME_GATHER, [0, 8], [0, 8]), {"layout": "contiguous"}),
        "slime #1871: a contiguous all-gather reshuffled as if it were zigzag (token order "
        "[0, 1, 4, 5, 6, 7, 2, 3]); contiguous is reassembled in rank order",
        lambda case, out: _assert(out.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7]],
                                  f"{out.tolist()} != [[0, ..., 7]]")),
    Pin("zigzag_reassembly", Case((SLIME_GATHER, [0, 8], [0, 8]), {}),
        "the same gather read as zigzag: rank 0 holds chunks 0 and 3",
        lambda case, out: _assert(out.tolist() == [[0, 1, 4, 5, 6, 7, 2, 3]],
                                  f"{out.tolist()}")),
    Pin("te_1930_round_trip", Case((torch.tensor([[1.0, 2.0, 7.0, -1.0], [3.0, 4.0, 5.0, 6.0]]),
                                    [0, 7], [0, 8]), {}),
        "TransformerEngine #1930: length 7 over cp 2 comes back whole, the pad dropped",
        lambda case, out: _assert(out.tolist() == [[1, 2, 3, 4, 5, 6, 7]], f"{out.tolist()}")),
    Pin("empty_and_pad_only", Case(([torch.zeros(4), torch.ones(4)], [0, 0, 1], [0, 0, 8]),
                                   {}),
        "an empty sequence and a one-token sequence padded to 8, over 2 ranks: one value comes "
        "back, rank 0's first", lambda case, out: _assert(out.tolist() == [[0.0]], f"{out.tolist()}")),
    Pin("rank_shapes_differ",
        BadCase(Case(([torch.zeros(4), torch.zeros(3)], [0, 7], [0, 8]), {}), ValueError,
                "ranks of 4 and 3 tokens"),
        "ranks holding different numbers of tokens are rejected"),
    Pin("outputs_do_not_fill_the_stream",
        BadCase(Case((torch.zeros(2, 3), [0, 7], [0, 8]), {}), ValueError, "6 tokens for 8"),
        "outputs of n · cp != cu_seqlens_padded[-1] are rejected, never truncated"),
]


UNSHARD = register(OpInfo(
    op="cp",
    function="unshard",
    valid=unshard_cases(),
    invalid=None,
    compare=assert_identical,
    properties=[
        Property.of(prop_inverse_of_shard),
        Property.of(prop_pads_never_read, metamorphic=True),
    ],
    pins=UNSHARD_PINS,
    devices=("cpu", "cuda"),
    # CUDA: where each real token is read from, one Triton kernel; the gather, another
    paths=Paths(triton=("triton:cp._unshard_index", "triton:cp._gather_rows")),
    to_device=lambda case, device: case.replace(
        *(a.to(device) if isinstance(a, torch.Tensor) else
          [t.to(device) for t in a] if isinstance(a, list) and a and
          isinstance(a[0], torch.Tensor) else a for a in case.args)),
    example=Case((SLIME_GATHER, [0, 8], [0, 8]), {"layout": "contiguous"}),
    doc="per-rank per-token outputs → the real row's order, pads dropped",
))

UNSHARD_DEFECTS = ["layout_type", "not_tensors", "rank_not_a_tensor", "no_rank", "one_dim",
                   "rank_mismatch", "width", "zigzag_multiple", "cu_float", "overfull"]


@st.composite
def bad_unshard_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on a valid call (`valid`, default `unshard_cases()`); `zigzag_multiple`
    replaces the whole call, and `layout_type` alone drops the other keyword arguments."""
    kind = draw(st.sampled_from(UNSHARD_DEFECTS))
    good = draw(valid if valid is not None else unshard_cases())
    outputs, cu, cu_padded = good.args
    stacked = outputs if isinstance(outputs, torch.Tensor) else torch.stack(list(outputs))
    cu_list = cu.tolist() if isinstance(cu, torch.Tensor) else list(cu)
    padded_list = cu_padded.tolist() if isinstance(cu_padded, torch.Tensor) else list(cu_padded)
    if kind == "layout_type":
        return _bad(good.args, {**(good.kwargs if valid is not None else {}), "layout": None},
                    TypeError, "layout None")
    if kind == "not_tensors":
        return _bad((stacked.tolist(), cu, cu_padded), good.kwargs, TypeError, "nested lists")
    if kind == "rank_not_a_tensor":
        return _bad(([stacked[0], stacked[0].tolist()], cu, cu_padded), good.kwargs, TypeError,
                    "rank 1 a list")
    if kind == "no_rank":
        return _bad(([], cu, cu_padded), good.kwargs, ValueError, "no rank")
    if kind == "one_dim":
        return _bad((stacked.reshape(-1), cu, cu_padded), good.kwargs, ValueError,
                    "outputs 1-D")
    if kind == "rank_mismatch" and stacked.shape[0] > 1:
        parts = list(stacked)
        parts[-1] = torch.cat([parts[-1], parts[-1][:1]]) if parts[-1].shape[0] else \
            torch.zeros((1, *parts[-1].shape[1:]), dtype=parts[-1].dtype)
        return _bad((parts, cu, cu_padded), good.kwargs, ValueError, "ranks differ")
    if kind == "zigzag_multiple":  # spans of 3 and 5 over 2 ranks: not multiples of 4
        return _bad((torch.zeros(2, 4), [0, 3, 7], [0, 3, 8]), {}, ValueError,
                    "spans not multiples of 2·cp")
    if kind == "cu_float":
        return _bad((outputs, [float(v) for v in cu_list], cu_padded), good.kwargs, TypeError,
                    "float cu_seqlens")
    if kind == "overfull" and len(cu_list) > 1:
        longer = list(cu_list)
        longer[-1] += padded_list[-1] - padded_list[-2] + 1
        return _bad((outputs, longer, cu_padded), good.kwargs, ValueError,
                    "a real length above its span")
    return _bad((torch.zeros((stacked.shape[0], stacked.shape[1] + 1)), cu, cu_padded),
                good.kwargs, ValueError, "outputs one token per rank too many")


UNSHARD.invalid = hs.one_or_two_defects(bad_unshard_cases, unshard_cases(), _reference.unshard)

# --------------------------------------------------------------------------- flatten


@st.composite
def micro_batches(draw) -> Case:
    """1..3 packed rows of one micro-batch: pad_for_cp outputs (the oracle's) of one cp, or
    unpadded rows (input_ids and cu_seqlens only); lengths anti-correlated across rows (a row
    of long sequences, then rows of short ones) in one regime."""
    cp_size = draw(cp_sizes())
    count = draw(st.integers(1, MAX_ROWS))
    padded = draw(st.booleans())
    rows = []
    for _ in range(count):
        ids, cu = draw(packed_rows(cp_size))
        if padded:
            rows.append(_reference.pad_for_cp(ids, cu, cp_size=cp_size))
        else:
            rows.append({"input_ids": torch.tensor(ids, dtype=torch.int64).reshape(1, len(ids)),
                         "cu_seqlens": torch.tensor(cu, dtype=torch.int32)})
    return Case((rows,))


def _flatten_rows(case: Case):
    rows = case.args[0]
    out = []
    for row in rows:
        cu = row["cu_seqlens"]
        cu = cu.tolist() if isinstance(cu, torch.Tensor) else list(cu)
        padded = row["cu_seqlens_padded"].tolist() if "cu_seqlens_padded" in row.keys() else None
        out.append((row, cu, padded))
    return out


def prop_offset_boundaries(case: Case, out) -> None:
    """Per-token fields concatenated in row order; cu_seqlens = [0] + each row's cu_seqlens[1:]
    shifted by the real tokens before it, cu_seqlens_padded by the stream lengths before it
    (int32); max_seqlen (max_seqlen_padded) the largest over all rows."""
    rows = _flatten_rows(case)
    real, stream, cu_out, padded_out = 0, 0, [0], [0]
    longest = longest_span = 0
    with_padded = rows[0][2] is not None
    for _row, cu, padded in rows:
        spans = padded if with_padded else cu
        cu_out += [real + v for v in cu[1:]]
        padded_out += [stream + v for v in spans[1:]]
        longest = max([longest] + [b - a for a, b in zip(cu, cu[1:])])
        longest_span = max([longest_span] + [b - a for a, b in zip(spans, spans[1:])])
        real, stream = real + cu[-1], stream + spans[-1]
    _assert(out["cu_seqlens"].dtype == torch.int32 and out["cu_seqlens"].tolist() == cu_out,
            f"cu_seqlens {out['cu_seqlens'].tolist()} ({out['cu_seqlens'].dtype}) != {cu_out}")
    if with_padded:
        _assert(out["cu_seqlens_padded"].tolist() == padded_out,
                f"cu_seqlens_padded {out['cu_seqlens_padded'].tolist()} != {padded_out}")
        _assert(out.get_non_tensor("max_seqlen_padded") == longest_span, "max_seqlen_padded")
    _assert(out.get_non_tensor("max_seqlen") == longest,
            f"max_seqlen {out.get_non_tensor('max_seqlen')} != {longest}")
    first = rows[0][0]
    keys = [k for k in first.keys() if k not in ("cu_seqlens", "cu_seqlens_padded")
            and isinstance(first[k] if not isinstance(first, TensorDictBase)
                           or not first.is_non_tensor(k) else None, torch.Tensor)]
    for key in keys:
        want = torch.cat([row[key] for row, _, _ in rows], 1)
        try:
            assert_identical(want, out[key])
        except Mismatch as err:
            raise AssertionError(f"{key} is not the rows' {key} concatenated: {err}") from None


def prop_flatten_associative(case: Case, out, candidate) -> None:
    """Flattening in two steps (the first k rows, the rest, then the two) gives the same row:
    boundaries shift by everything before them, not by the previous row alone."""
    rows = case.args[0]
    for k in range(1, len(rows)):
        again = candidate([candidate(list(rows[:k])), candidate(list(rows[k:]))])
        for key in out.keys():
            if out.is_non_tensor(key):
                _assert(again.get_non_tensor(key) == out.get_non_tensor(key),
                        f"{key}: {again.get_non_tensor(key)} != {out.get_non_tensor(key)}")
                continue
            try:
                assert_identical(out[key], again[key])
            except Mismatch as err:
                raise AssertionError(f"flattened in two steps at row {k}, {key} differs: "
                                     f"{err}") from None


MICRO_BATCH = Case(([_padded([1, 2, 3, 4, 5], [0, 3, 5], 2), _padded([6, 7], [0, 2], 2)],))

FLATTEN_PINS = [
    Pin("megatron_5454_micro_batch", MICRO_BATCH,
        "Megatron-LM #5454: with micro_batch_size > 1 the first row's cu_seqlens were used for "
        "the whole micro-batch; row 1's boundaries are offset by row 0's tokens",
        _expect(cu_seqlens=[0, 3, 5, 7], cu_seqlens_padded=[0, 4, 8, 12],
                input_ids=[[1, 2, 3, 0, 4, 5, 0, 0, 6, 7, 0, 0]])),
    Pin("flatten_commutes_with_padding",
        Case(([_padded([1, 2, 3], [0, 1, 3], 3), _padded([4, 5, 6, 7], [0, 4], 3)],)),
        "per-sequence padding commutes with flattening",
        lambda case, out: assert_identical(_padded([1, 2, 3, 4, 5, 6, 7], [0, 1, 3, 7], 3),
                                           out)),
    Pin("cp_sizes_differ",
        BadCase(Case(([_padded([1], [0, 1], 2), _padded([1], [0, 1], 4)],)), ValueError,
                "cp 2 and cp 4 in one micro-batch"),
        "rows padded for different cp sizes are not one micro-batch"),
    Pin("padded_boundaries_in_some_rows",
        BadCase(Case(([_padded([1], [0, 1], 2), {"input_ids": torch.tensor([[1]]),
                                                 "cu_seqlens": torch.tensor([0, 1])}],)),
                ValueError, "cu_seqlens_padded in row 0 only"),
        "all rows carry padded boundaries, or none"),
]

FLATTEN = register(OpInfo(
    op="cp",
    function="flatten_micro_batch",
    valid=micro_batches(),
    invalid=None,
    compare=assert_identical,
    properties=[
        Property.of(prop_offset_boundaries),
        Property.of(prop_flatten_associative, name="associative", metamorphic=True),
    ],
    pins=FLATTEN_PINS,
    devices=("cpu", "cuda"),
    to_device=lambda case, device: case.replace(
        [row.to(device) if isinstance(row, TensorDictBase) else
         {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in row.items()}
         for row in case.args[0]]) if isinstance(case.args[0], list) else case,
    example=MICRO_BATCH,
    doc="several packed rows of a micro-batch → one row, boundaries offset",
))

FLATTEN_DEFECTS = ["not_a_list", "empty", "row_type", "no_cu", "padded_mixed", "keys_differ",
                   "dtype_differs", "field_length", "decreasing", "cp_size_differs"]


@st.composite
def bad_micro_batches(draw) -> BadCase:
    kind = draw(st.sampled_from(FLATTEN_DEFECTS))
    rows = list(draw(micro_batches()).args[0])
    k = draw(st.integers(0, len(rows) - 1))
    first = rows[0]
    plain = [{key: (row.get_non_tensor(key) if isinstance(row, TensorDictBase)
                    and row.is_non_tensor(key) else row[key]) for key in row.keys()}
             for row in rows]
    if kind == "not_a_list":
        return _bad((first,), {}, TypeError, "one row, not a list")
    if kind == "empty":
        return _bad(([],), {}, ValueError, "no row")
    if kind == "row_type":
        plain[k] = "row"
        return _bad((plain,), {}, TypeError, f"rows[{k}] a str")
    if kind == "no_cu":
        del plain[k]["cu_seqlens"]
        return _bad((plain,), {}, ValueError, f"rows[{k}] has no cu_seqlens")
    if kind == "padded_mixed" and len(plain) > 1:
        if "cu_seqlens_padded" in plain[-1]:
            del plain[-1]["cu_seqlens_padded"]
        else:
            plain[-1]["cu_seqlens_padded"] = plain[-1]["cu_seqlens"]
        return _bad((plain,), {}, ValueError, "padded boundaries in some rows")
    if kind == "keys_differ" and len(plain) > 1:
        plain[-1]["extra"] = torch.zeros_like(plain[-1]["input_ids"])
        return _bad((plain,), {}, ValueError, "another key")
    if kind == "dtype_differs" and len(plain) > 1:
        plain[-1]["input_ids"] = plain[-1]["input_ids"].to(torch.int32)
        return _bad((plain,), {}, ValueError, "another dtype")
    if kind == "decreasing":
        cu = plain[k]["cu_seqlens"]
        plain[k]["cu_seqlens"] = torch.cat([cu, cu[-1:] - 1, cu[-1:]])
        return _bad((plain,), {}, ValueError, f"rows[{k}] decreasing")
    if kind == "cp_size_differs" and "cp_size" in plain[0]:
        if len(plain) == 1:
            plain.append(dict(plain[0]))
        plain[-1]["cp_size"] = plain[0]["cp_size"] + 1
        return _bad((plain,), {}, ValueError, "cp sizes differ")
    plain[k]["input_ids"] = torch.cat([plain[k]["input_ids"],
                                       torch.zeros((1, 1), dtype=torch.int64)], 1)
    return _bad((plain,), {}, ValueError, f"rows[{k}] input_ids one token too long")


FLATTEN.invalid = bad_micro_batches()

"""verl's Megatron-core CP slicing (verl 0.9.1 with megatron-core 0.16.1; docs/cp.md, "Adapters").

    cp.shard                  verl.models.mcore.util.preprocess_packed_seqs(x, attention_mask):
      (verl.cp_packed_seqs)     a (B, S, ...) batch's real tokens (by mask), each sequence padded
                                with zeros to a multiple of 2·cp·tp, and this CP rank's zigzag
                                chunks r and 2·cp-1-r of every sequence, as one (1, n, ...) row
    cp.shard                  verl.models.mcore.util.preprocess_thd_engine(x, cp_layout=...):
      (verl.cp_thd_engine)      the same from a jagged nested (B, j, ...) batch, zigzag or
                                contiguous (each sequence padded to a multiple of cp·tp, the
                                rank's interval of the padded stream); also returns positions
    cp.shard, routes          verl.utils.megatron.router_replay_utils.set_router_replay_data(
      (verl.router_replay_data) routes, attention_mask, tf_config, model=...): router replay
                                (R2 / R3) — a (B, S, layers, topk) batch of routes packed and
                                CP-sliced by preprocess_packed_seqs, then handed to each MoE
                                layer's Megatron router as its replay target

verl calls them on every per-token field of a micro-batch (input ids, labels, label masks,
multimodal values) with the same boundaries, and `postprocess_packed_seqs` /
`postprocess_thd_engine` all-gather the ranks' outputs and put them back (those need a real
process group: they are checked across real ranks by `tests/test_adapters.py`, not here).

The adapters give verl what a verl rank has: for each per-token field of the contract's padded
row, the real tokens of every sequence as one row of a right-padded (S, max l, ...) batch and the
mask of those real tokens, or as a nested tensor with offsets cu_seqlens. verl reads the CP
rank and size, and the TP size it aligns to, from Megatron's parallel state
(`megatron.core.parallel_state`): the adapter initializes a one-process gloo group (as the
Megatron adapter does) and, for each rank the contract asks for, sets the context-parallel group
to an object answering that rank and `cp_size` and the TP world size to 1; the state is put back
after each call. What it returns, per rank:

    every compared per-token field   verl's output for that field
    token_index                      verl's output for the real tokens' indices + 1, minus 1 (a
                                     field like any other: -1 where verl wrote a pad)
    cu_seqlens_padded                (preprocess_packed_seqs) verl's
                                     `PackedSeqParams.cu_seqlens_q_padded` // cp: where each
                                     sequence starts on a rank (verl's own start_idx)

verl writes zeros at the pads of every field and computes the padding itself, so its inputs are
the contract's padded rows padded as verl pads (every span `roundup(l, 2·cp)` for zigzag,
`roundup(l, cp)` for contiguous, `l` for cp = 1) whose pads hold 0 (`pad_token_id=0`, a
caller's field zero there). `position_ids` and `labels` are not compared: verl's forward
passes neither through these functions the contract's way (labels are shifted on the padded
batch, 0 at pads where the contract has `ignore_index`; the THD engine's positions are the
contract's at real tokens but 0 at some pads: tested apart, docs/cp.md). An invalid padded row
has no verl form (verl takes a batch, not a padded row): the `errors` check does not apply.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from hypothesis import strategies as st
from tensordict import TensorDict

from batchproof import blocks as hs
from batchproof.adapters import (
    Adapter,
    Call,
    KnownDivergence,
    register_adapter,
    without_replay,
)
from batchproof.adapters.megatron import (
    RankOfGroup,
    default_group,
    padded_row,
    per_token_fields,
)
from batchproof.ops import cp as cp_op
from batchproof.ops.varlen import token_routes
from batchproof.reference import cp as _reference
from batchproof.registry import Case

MCORE_UTIL = "verl.models.mcore.util"
UPSTREAM = "verl/models/mcore/util.py, preprocess_packed_seqs (verl 0.9.1)"
NOT_COMPARED = ("position_ids", "labels", "padded_index", "cu_seqlens", "rank", "cp_size",
                "layout")


@contextlib.contextmanager
def megatron_cp_rank(cp_size: int, rank: int) -> Iterator[None]:
    """Megatron's parallel state as rank `rank` of a CP group of `cp_size` sees it (TP 1)."""
    from megatron.core import parallel_state as mpu

    default_group()
    saved = mpu._CONTEXT_PARALLEL_GROUP, mpu._MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE
    mpu._CONTEXT_PARALLEL_GROUP = RankOfGroup(cp_size, rank)
    mpu.set_tensor_model_parallel_world_size(1)
    try:
        yield
    finally:
        mpu._CONTEXT_PARALLEL_GROUP, mpu._MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE = saved


def as_verl_batch(field: torch.Tensor, cu: list[int], cu_padded: list[int]):
    """A (1, Tp, ...) field of the padded row → (S, max l, ...) rows of each sequence's real
    values, right-padded with zeros, and the (S, max l) bool mask of the real ones.

        padded row   a a a . | b .            cu [0, 3, 4]   cu_padded [0, 4, 6]
        batch        a a a                    mask  1 1 1
                     b 0 0                          1 0 0
    """
    lengths = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
    width = max(lengths, default=0)
    batch = field.new_zeros((len(lengths), width, *field.shape[2:]))
    mask = torch.zeros(len(lengths), width, dtype=torch.bool)
    for i, length in enumerate(lengths):
        start = cu_padded[i]
        batch[i, :length] = field[0, start:start + length]
        mask[i, :length] = True
    return batch, mask


def as_nested(field: torch.Tensor, cu: list[int], cu_padded: list[int]) -> torch.Tensor:
    """A (1, Tp, ...) field of the padded row → the jagged nested tensor (S, j, ...) of each
    sequence's real values, offsets `cu` (what verl's THD engine is given)."""
    real = [field[0, cu_padded[i]:cu_padded[i] + cu[i + 1] - cu[i]] for i in range(len(cu) - 1)]
    values = torch.cat(real) if real else field[0, :0]
    return torch.nested.nested_tensor_from_jagged(values, offsets=torch.tensor(cu))


def real_indices(cu: list[int]) -> torch.Tensor:
    """(1, T) int64: each real token's index in the real row, + 1 (0 is what verl writes at a
    pad), laid out as a field of a row without padding (its padded boundaries are `cu`)."""
    return torch.arange(1, cu[-1] + 1).reshape(1, -1)  # ints: int64


Slicer = Callable[[torch.Tensor, list, list], tuple[torch.Tensor, torch.Tensor]]


def packed_seqs_slicer(preprocess: Callable[..., Any], layout: str) -> Slicer:
    """`preprocess_packed_seqs` on one field: (its (n, ...) local share, the padded
    boundaries)."""
    def run(field, cu, cu_padded):
        local, params = preprocess(*as_verl_batch(field, cu, cu_padded))
        return local[0], params.cu_seqlens_q_padded

    return run


def thd_engine_slicer(preprocess: Callable[..., Any], layout: str) -> Slicer:
    """`preprocess_thd_engine(nested, cp_layout=layout)` on one field."""
    def run(field, cu, cu_padded):
        local, params, _ = preprocess(as_nested(field, cu, cu_padded), cp_layout=layout)
        return local[0], params.cu_seqlens_q_padded

    return run


def sharding_with(slicer_of: Callable[..., Slicer], *, local_boundaries: bool):
    """The `wrap` of an adapter to `cp.shard`: verl's slicing of every per-token field and of
    the real indices (token_index), rank by rank; with `local_boundaries`, verl's padded
    boundaries // cp (zigzag: where each sequence starts on a rank) as `cu_seqlens_padded`."""
    def wrap(preprocess: Callable[..., Any]) -> Callable[..., Any]:
        def shard(padded, *, cp_size, layout="zigzag", cp_rank=None):
            slicer = slicer_of(preprocess, layout)
            cu = padded["cu_seqlens"].tolist()
            cu_padded = padded["cu_seqlens_padded"].tolist()
            fields = per_token_fields(padded, NOT_COMPARED)
            ranks = range(cp_size) if cp_rank is None else [cp_rank]
            out: dict[str, list[torch.Tensor]] = {key: [] for key in [*fields, "token_index"]}
            if local_boundaries:
                out["cu_seqlens_padded"] = []
            for rank in ranks:
                with megatron_cp_rank(cp_size, rank):
                    for key in fields:
                        out[key].append(slicer(padded[key], cu, cu_padded)[0])
                    local, boundaries = slicer(real_indices(cu), cu, cu)
                out["token_index"].append(local - 1)
                if local_boundaries:
                    out["cu_seqlens_padded"].append(boundaries // cp_size)
            return TensorDict({key: torch.stack(values) for key, values in out.items()},
                              batch_size=[len(ranks)])

        return shard

    return wrap


shard_adapter = sharding_with(packed_seqs_slicer, local_boundaries=True)
thd_engine_adapter = sharding_with(thd_engine_slicer, local_boundaries=False)


# --------------------------------------------------------------------------- domain


def verl_step(cp_size: int, layout: str) -> int:
    """The multiple verl pads every sequence to (TP 1): 2·cp for zigzag, cp for contiguous (one
    interval per rank), nothing for cp = 1."""
    return cp_op.step_of(cp_size) if layout == "zigzag" else cp_size


def padded_as_verl_pads(layouts: tuple[str, ...]) -> Callable[[Call], bool]:
    """A valid call in one of `layouts` on a padded row padded as verl pads (every span
    roundup(l, verl_step)) with 0 at every pad of every field verl is given."""
    def supports(call: Call) -> bool:
        padded = padded_row(call)
        layout = call.arg("layout")
        if not call.valid or padded is None or layout not in layouts:
            return False
        step = verl_step(call.arg("cp_size"), layout)
        cu = padded["cu_seqlens"].tolist()
        cu_padded = padded["cu_seqlens_padded"].tolist()
        spans = [(cu_padded[i], cu_padded[i + 1], cu[i + 1] - cu[i])
                 for i in range(len(cu) - 1)]
        if any(end - start != -(-length // step) * step for start, end, length in spans):
            return False
        return not any(bool((padded[key][0, start + length:end] != 0).any())
                       for key in per_token_fields(padded, NOT_COMPARED) for start, end, length in spans)

    supports.__name__ = supports.__qualname__ = f"padded_as_verl_pads_{'_'.join(layouts)}"
    return supports


def verl_padded_row(ids: list[int], cu: list[int], step: int) -> TensorDict:
    """A padded row as verl pads it for a multiple `step`: input_ids with 0 at the pads, both
    boundaries (int32), as `pad_for_cp` lays a row out."""
    lengths = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
    spans = [-(-length // step) * step for length in lengths]
    cu_padded = cp_op.boundaries_of(spans)
    input_ids = torch.zeros(1, cu_padded[-1], dtype=torch.int64)
    for i, length in enumerate(lengths):
        input_ids[0, cu_padded[i]:cu_padded[i] + length] = torch.tensor(ids[cu[i]:cu[i + 1]])
    return TensorDict({"input_ids": input_ids,
                       "cu_seqlens": torch.tensor(cu, dtype=torch.int32),
                       "cu_seqlens_padded": torch.tensor(cu_padded, dtype=torch.int32)})


@st.composite
def verl_padded_cases(draw, layouts: tuple[str, ...] = ("zigzag",)) -> Case:
    """The record's shard inputs as a verl rank has them: a row padded as verl pads it with 0
    at the pads (zigzag: pad_for_cp's row with pad 0, loss mask included; contiguous: a
    multiple of cp) and, sometimes, a caller's float field that is 0 at the pads; the layout
    passed or the default, every rank or one."""
    cp_size = draw(cp_op.cp_sizes())
    ids, cu = draw(cp_op.packed_rows(cp_size))
    layout = draw(st.sampled_from(layouts))
    if layout == "zigzag":
        mask = draw(cp_op.loss_masks(len(ids)))
        td = _reference.pad_for_cp(ids, cu, cp_size=cp_size, loss_mask=mask, pad_token_id=0)
    else:
        td = verl_padded_row(ids, cu, verl_step(cp_size, layout))
    if draw(st.booleans()):
        cu_padded = td["cu_seqlens_padded"].tolist()
        values = torch.zeros(1, td["input_ids"].shape[1], 2, dtype=torch.float32)
        for i in range(len(cu) - 1):
            length = cu[i + 1] - cu[i]
            real = draw(st.lists(hs.float32s(), min_size=2 * length, max_size=2 * length))
            values[0, cu_padded[i]:cu_padded[i] + length] = torch.tensor(
                real, dtype=torch.float32).reshape(length, 2)
        td["old_logprobs"] = values
    kwargs: dict[str, Any] = {"cp_size": cp_size}
    if layout != "zigzag" or draw(st.booleans()):
        kwargs["layout"] = layout
    if draw(st.integers(0, 3)) == 0:
        kwargs["cp_rank"] = draw(st.integers(0, cp_size - 1))
    return Case((td,), kwargs)


# --------------------------------------------------------------------------- router replay


@contextlib.contextmanager
def replay_rank(cp_size: int, rank: int) -> Iterator[None]:
    """`megatron_cp_rank`, plus what verl's router-replay hand-over reads on top: a one-rank
    tensor-parallel group (its sequence-parallel scatter is then the identity), Megatron's
    parallel state reported as initialized, and verl's device name `cpu` (verl names `cuda`
    when it finds no accelerator)."""
    from megatron.core import parallel_state as mpu
    from verl.utils.megatron import router_replay_utils

    with megatron_cp_rank(cp_size, rank):
        saved = (mpu._TENSOR_MODEL_PARALLEL_GROUP, mpu._DATA_PARALLEL_GROUP,
                 router_replay_utils.device_name)
        mpu._TENSOR_MODEL_PARALLEL_GROUP = RankOfGroup(1, 0)
        mpu._DATA_PARALLEL_GROUP = mpu._DATA_PARALLEL_GROUP or RankOfGroup(1, 0)
        router_replay_utils.device_name = "cpu"
        try:
            yield
        finally:
            (mpu._TENSOR_MODEL_PARALLEL_GROUP, mpu._DATA_PARALLEL_GROUP,
             router_replay_utils.device_name) = saved


def moe_layers(layers: int) -> torch.nn.Module:
    """A stand-in for a model's decoder: `layers` Megatron `TopKRouter` modules (layer numbers
    1 .. layers), each with verl's `RouterReplay` (what a model built with router replay has),
    without the router's weights (only its replay target is read)."""
    from megatron.core.transformer.moe.router import TopKRouter
    from verl.utils.megatron.router_replay_patch import RouterReplay

    decoder = torch.nn.Module()
    decoder.routers = torch.nn.ModuleList()
    for number in range(1, layers + 1):
        router = TopKRouter.__new__(TopKRouter)
        torch.nn.Module.__init__(router)
        router.layer_number = number
        router.router_replay = RouterReplay()
        decoder.routers.append(router)
    return decoder


def replay_targets(set_router_replay_data: Callable[..., Any]) -> Callable[..., Any]:
    """The `output_of` of `verl.router_replay_data`: verl's hand-over writes each MoE layer's
    replay target into its router (nothing is returned). The function this gives takes verl's
    (routes, attention_mask, tf_config) for `layers` MoE layers, hands them over to
    `moe_layers(layers)` and returns the layers' replay targets, in layer order, as verl left
    them (what Megatron's routers would read)."""
    def targets(batch, mask, config, layers: int) -> list[torch.Tensor]:
        from verl.utils.megatron.router_replay_patch import RouterReplay

        decoder = moe_layers(layers)
        try:
            set_router_replay_data(batch, mask, config, model=decoder)
            return [router.router_replay.target_topk_idx for router in decoder.routers]
        finally:
            for router in decoder.routers:
                RouterReplay.router_instances.remove(router.router_replay)

    return targets


def replay_data_adapter(targets: Callable[..., Any]) -> Callable[..., Any]:
    """The `wrap` of `verl.router_replay_data`: per rank, the padded row's routes of the real
    tokens as verl's (S, max l, layers, topk) batch and attention mask, handed over by verl
    (`replay_targets`); the rank's routes are the layers' replay targets stacked back to
    (n, layers, topk) — Megatron's router takes int64 indices (its score gather), which verl
    converts to at the hand-over: they come back in the routes' dtype."""
    def shard(padded, *, cp_size, layout="zigzag", cp_rank=None):
        cu = padded["cu_seqlens"].tolist()
        cu_padded = padded["cu_seqlens_padded"].tolist()
        routes = padded["routed_experts"]
        batch, mask = as_verl_batch(routes, cu, cu_padded)
        config = types.SimpleNamespace(fp8=None, num_layers=routes.shape[-2], moe_layer_freq=1)
        ranks = range(cp_size) if cp_rank is None else [cp_rank]
        shares = []
        for rank in ranks:
            with replay_rank(cp_size, rank):
                layers = targets(batch, mask, config, routes.shape[-2])
            shares.append(torch.stack(layers, dim=1).to(routes.dtype))
        return TensorDict({"routed_experts": torch.stack(shares)}, batch_size=[len(ranks)])

    return shard


def replayed_as_verl_pads(call: Call) -> bool:
    """A valid zigzag call on a padded row with routes, padded as verl pads (every span
    roundup(l, 2·cp))."""
    padded = padded_row(call)
    if not call.valid or padded is None or call.arg("layout") != "zigzag" \
            or "routed_experts" not in padded.keys():
        return False
    step = verl_step(call.arg("cp_size"), "zigzag")
    cu = padded["cu_seqlens"].tolist()
    cu_padded = padded["cu_seqlens_padded"].tolist()
    return all(cu_padded[i + 1] - cu_padded[i] == -(-(cu[i + 1] - cu[i]) // step) * step
               for i in range(len(cu) - 1))


def a_rank_holds_a_pad(call: Call) -> bool:
    """A valid call whose routes have topk >= 2 (a one-expert dummy route is [0], the zero
    route itself) and whose asked ranks hold a pad."""
    padded = padded_row(call)
    if not call.valid or padded is None or "routed_experts" not in padded.keys() \
            or padded["routed_experts"].shape[-1] < 2:
        return False
    cp_size, rank = call.arg("cp_size"), call.arg("cp_rank")
    cu = padded["cu_seqlens"].tolist()
    cu_padded = padded["cu_seqlens_padded"].tolist()
    tokens = cp_op.token_at(cu, cu_padded)
    ranks = range(cp_size) if rank is None else [rank]
    return any(tokens[g] < 0 for r in ranks
               for g in cp_op.rank_positions(cu_padded, cp_size, "zigzag", r))


@st.composite
def replay_padded_cases(draw) -> Case:
    """The record's shard inputs with routes, as verl's router replay has them: a packed row's
    routes (`ops.varlen.token_routes`, topk 1 to 4) padded by the oracle's `pad_for_cp` for cp
    (pads of verl's size), the tokens with pad 0; every rank or one."""
    cp_size = draw(cp_op.cp_sizes())
    ids, cu = draw(cp_op.packed_rows(cp_size))
    routes = draw(token_routes(len(ids)))
    td = _reference.pad_for_cp(ids, cu, cp_size=cp_size, routed_experts=routes)
    kwargs: dict[str, Any] = {"cp_size": cp_size}
    if draw(st.integers(0, 3)) == 0:
        kwargs["cp_rank"] = draw(st.integers(0, cp_size - 1))
    return Case((td,), kwargs)


REPLAY_UPSTREAM = ("verl/utils/megatron/router_replay_utils.py, set_router_replay_data "
                   "(verl 0.9.1); verl-project/verl#7524")
REPLAY_KNOWN = (
    KnownDivergence(
        "no_sequences_raises", lambda call: no_sequences(call),
        "a row of 0 sequences raises ValueError (preprocess_packed_seqs' `max()` of no padded "
        "length) where the contract gives every rank 0 routes",
        kind="valid", upstream=REPLAY_UPSTREAM, raises=ValueError),
    KnownDivergence(
        "padding_routes_are_zeros", a_rank_holds_a_pad,
        "the CP alignment pads preprocess_packed_seqs adds get the all-zero route: every "
        "padding token sent topk times to expert 0 (one distinct expert, not topk), where the "
        "contract gives the dummy route 0 .. topk-1 (verl #7524, closed unmerged; #7106 "
        "rebuilds them as zeros)",
        kind="valid", upstream=REPLAY_UPSTREAM, fields=("routed_experts",)),
)

ROUTER_REPLAY_DATA = register_adapter(Adapter(
    name="verl.router_replay_data",
    framework="verl",
    record="cp.shard",
    target="verl.utils.megatron.router_replay_utils:set_router_replay_data",
    wrap=replay_data_adapter,
    output_of=replay_targets,
    distribution="verl",
    versions="~=0.9.1",
    needs=("megatron-core",),
    doc="verl's router-replay hand-over to Megatron's routers (R2 / R3: routes packed and "
        "CP-sliced by preprocess_packed_seqs, one replay target per MoE layer) against "
        "shard's routed_experts",
    forms=None,
    supports=replayed_as_verl_pads,
    valid=replay_padded_cases(),
    known=REPLAY_KNOWN,
    not_provided=(*NOT_COMPARED, "input_ids", "loss_mask", "old_logprobs", "token_index",
                  "cu_seqlens_padded", "router_padding_mask"),
    skip={"errors": "verl takes a batch of routes and a mask, not a padded row: an invalid "
                    "padded row has no verl form"},
))


def no_sequences(call: Call) -> bool:
    """A valid row of S = 0 sequences (`cu_seqlens` = [0]): verl's micro-batch of 0 rows."""
    padded = padded_row(call)
    return call.valid and padded is not None and padded["cu_seqlens"].numel() == 1


KNOWN = (
    KnownDivergence(
        "no_sequences_raises", no_sequences,
        "a batch of 0 sequences raises ValueError (the longest padded length is `max()` of an "
        "empty list) where the contract gives every rank 0 tokens",
        kind="valid", upstream=UPSTREAM, raises=ValueError),
)

def contiguous_split(call: Call) -> bool:
    """A valid call with the contiguous layout over cp > 1 ranks."""
    cp_size = call.arg("cp_size")
    return (call.valid and call.arg("layout") == "contiguous" and isinstance(cp_size, int)
            and cp_size > 1)


THD_KNOWN = KNOWN + (
    KnownDivergence(
        "contiguous_needs_cp_partition_mode", contiguous_split,
        "the contiguous layout over cp > 1 ranks raises ValueError after slicing: it needs "
        "PackedSeqParams.cp_partition_mode, which megatron-core 0.16.1 (the last release for "
        "Python 3.11) does not have; verl's contiguous slicing is not reachable there",
        kind="valid", upstream="verl/models/mcore/util.py, preprocess_thd_engine (verl 0.9.1)",
        raises=ValueError),
)

CP_PACKED_SEQS = register_adapter(Adapter(
    name="verl.cp_packed_seqs",
    framework="verl",
    record="cp.shard",
    target=f"{MCORE_UTIL}:preprocess_packed_seqs",
    wrap=shard_adapter,
    distribution="verl",
    versions="~=0.9.1",
    needs=("megatron-core",),
    doc="verl's Megatron-core CP slicing (zigzag, every per-token field, zeros at pads) against "
        "shard; token_index from verl's slicing of the real tokens' indices",
    forms=None,
    supports=without_replay(padded_as_verl_pads(("zigzag",))),  # routes: not adapted
    valid=verl_padded_cases(),
    known=KNOWN,
    not_provided=NOT_COMPARED,
    skip={"errors": "verl takes a batch and a mask, not a padded row: an invalid padded row "
                    "has no verl form (the adapter builds verl's inputs from valid rows)"},
))

THD_ENGINE = register_adapter(Adapter(
    name="verl.cp_thd_engine",
    framework="verl",
    record="cp.shard",
    target=f"{MCORE_UTIL}:preprocess_thd_engine",
    wrap=thd_engine_adapter,
    distribution="verl",
    versions="~=0.9.1",
    needs=("megatron-core",),
    doc="verl's THD engine CP slicing (nested input, zigzag and contiguous, every per-token "
        "field, zeros at pads) against shard; token_index from verl's slicing of the real "
        "tokens' indices",
    forms=None,
    supports=without_replay(padded_as_verl_pads(("zigzag", "contiguous"))),
    valid=verl_padded_cases(("zigzag", "contiguous")),
    known=THD_KNOWN,
    not_provided=(*NOT_COMPARED, "cu_seqlens_padded"),
    skip={"errors": "verl takes a nested batch, not a padded row: an invalid padded row has "
                    "no verl form (the adapter builds verl's inputs from valid rows)"},
))

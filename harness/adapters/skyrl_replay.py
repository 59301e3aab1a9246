"""SkyRL 0.4.0's router replay (`skyrl.rl_batch_replay_0_4`; issue 37, docs/frameworks-skyrl04.md).

SkyRL 0.4.0's batch builder takes the routes vLLM captured and the sample support beside the
tokens, and returns them packed, one segment per sample over its real tokens only (Megatron
reads them as THD, without the pads); `make_router_padding_mask` of the same module gives the
router padding mask of the left-padded batch:

    convert_prompts_responses_to_batch_tensors(pad_token_id, prompts, responses, rewards,
        loss_masks, logprobs, rollout_expert_indices=[c_i x L x K NumPy arrays],
        rollout_sample_support=[r_i x top_k NumPy arrays], max_seq_len)
        -> (..., PackedTensor(values [sum p_i + r_i, L, K], cu_seqlens),
                 PackedTensor(values [sum r_i, top_k], cu_seqlens))
    make_router_padding_mask(attention_mask, captured_route_lengths) -> (B, T) bool

    contract (build_rl_batch, layout="left")   SkyRL
    routed_experts (B, T, L, K)                the routes' segment i on row i's last p_i + r_i
                                               columns (SkyRL's own dummy route on the tokens
                                               past the captured prefix); the left pads, which
                                               SkyRL does not return, hold the contract's
                                               dummy 0 .. K-1 (the adapter's)
    router_padding_mask (B, T)                 make_router_padding_mask(SkyRL's attention_mask,
                                               [c_i])
    sample_support (B, R, top_k)               the support's segment i on row i's last r_i
                                               response columns; -1 rows elsewhere (the
                                               adapter's: SkyRL returns none there)
    routed_experts / sample_support entries    NumPy arrays, as SkyRL takes them (a torch
                                               entry is handed over as `.numpy()`, exact)

What the check finds is declared below (`REPLAY_KNOWN`): SkyRL takes uint8 / int16 / int32
routes and int32 support only, refuses a sample with no captured route, widens mixed route
dtypes instead of refusing them, and reads no id (a negative route or a support id below -1
goes through). The rest of the batch is `skyrl.rl_batch_0_4`'s, with its known divergences.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st
from tensordict import TensorDict

from batchproof import replay
from batchproof.adapters import Adapter, Call, KnownDivergence, register_adapter, replays
from batchproof.adapters.skyrl import (
    NOT_PRODUCED,
    RL_BATCH_0_4_KNOWN,
    import_preprocess,
    left_layout,
    rl_batch_adapter_0_4,
    typed_dict_for_pydantic,
)
from batchproof.ops.rl_batch import _replay_defect, rl_batch_cases
from batchproof.registry import BadCase, Case

# the dtypes SkyRL 0.4.0 takes (skyrl/backends/skyrl_train/utils/routed_experts.py,
# sample_support.py); the contract takes int64 routes and int16 / int64 support too
ROUTE_DTYPES = (np.dtype(np.uint8), np.dtype(np.int16), np.dtype(np.int32))
SUPPORT_DTYPE = np.dtype(np.int32)


# --------------------------------------------------------------------------- the wrapper


def replay_adapter_0_4(convert: Callable[..., Any]) -> Callable[..., TensorDict]:
    """SkyRL 0.4.0's function, with routes and support, behind the `build_rl_batch` signature
    (left layout only); the router padding mask from the same module's
    `make_router_padding_mask`."""
    mask_of = import_preprocess().make_router_padding_mask

    def build_rl_batch(prompts, responses, *, pad_token_id, routed_experts=None,
                       sample_support=None, **rest) -> TensorDict:
        packed: dict[str, Any] = {}

        def with_replay(**kwargs: Any) -> tuple:
            out = convert(**kwargs, rollout_expert_indices=as_numpy(routed_experts),
                          rollout_sample_support=as_numpy(sample_support))
            packed["routes"], packed["support"] = out[6], out[7]
            return out

        td = rl_batch_adapter_0_4(with_replay)(prompts, responses, pad_token_id=pad_token_id,
                                               **rest)
        if routed_experts is not None:
            td["routed_experts"] = routes_laid_out(packed["routes"], td["attention_mask"])
            td["router_padding_mask"] = mask_of(
                td["attention_mask"], [int(entry.shape[0]) for entry in routed_experts])
        if sample_support is not None:
            td["sample_support"] = support_laid_out(packed["support"], td["response_mask"])
        return td

    return build_rl_batch


def as_numpy(entries: Any) -> Any:
    """A list's torch entries as NumPy arrays (exact: every route and support dtype has one);
    anything else as given, for SkyRL to accept or refuse."""
    if not isinstance(entries, list):
        return entries
    return [e.numpy() if isinstance(e, torch.Tensor) and not e.is_nested else e
            for e in entries]


def _segments(packed: Any) -> list[torch.Tensor]:
    """A `PackedTensor`'s per-sample segments, by its own `cu_seqlens`."""
    offsets = [int(o) for o in packed.cu_seqlens]
    return [packed.values[a:b] for a, b in zip(offsets, offsets[1:])]


def routes_laid_out(packed: Any, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, L, K): segment i right-aligned in row i (the left layout's real tokens), the
    contract's dummy route 0 .. K-1 on the columns before it.

        segments  [a b c .] [e f g h]        (. SkyRL's dummy past the captured prefix)
        T = 6     . . a b c .   . . e f g h  (. here: the pads, the adapter's dummy)
    """
    batch, width = attention_mask.shape
    layers, topk = packed.values.shape[1:]
    dummy = torch.arange(topk, dtype=packed.values.dtype)
    out = dummy.expand(batch, width, layers, topk).clone()
    for i, segment in enumerate(_segments(packed)):
        out[i, width - segment.shape[0]:] = segment
    return out


def support_laid_out(packed: Any, response_mask: torch.Tensor) -> torch.Tensor:
    """(B, R, top_k): segment i on row i's last r_i response columns, -1 rows before it."""
    batch, width = response_mask.shape
    out = torch.full((batch, width, packed.values.shape[1]), -1, dtype=packed.values.dtype)
    for i, segment in enumerate(_segments(packed)):
        out[i, width - segment.shape[0]:] = segment
    return out


def left_layout_replaying(call: Call) -> bool:
    """The left layout, with routes or support (the calls without are `skyrl.rl_batch_0_4`'s)."""
    return replays(call) and left_layout(call)


# --------------------------------------------------------------------------- inputs


def _with_a_token(case: Case) -> Case:
    """Every sample with at least one token: a sample of neither prompt nor response gets a
    one-token prompt (prompts only feed input_ids: the per-token arguments are the response's),
    so that every sample can have a captured route."""
    prompts, responses = case.args
    prompts = [list(p) if len(p) + len(r) else [1] for p, r in zip(prompts, responses)]
    return Case((prompts, responses), case.kwargs, case.label)


@st.composite
def skyrl_replay_cases(draw, *, support: bool | None = None) -> Case:
    """A valid left-layout call in what SkyRL 0.4.0 takes: per-token rewards or none (a scalar
    reward per sample is `scalar_reward_rejected`), uint8 / int16 / int32 NumPy routes, at least
    one captured route per sample, int32 NumPy support in about half of them (always with
    `support=True`)."""
    case = _with_a_token(draw(rl_batch_cases(layouts=("left",),
                                             rewards=("none", "per_token"))))
    prompts, responses = case.args
    counts = [len(p) + len(r) for p, r in zip(prompts, responses)]
    kwargs = dict(case.kwargs)
    kwargs["routed_experts"] = draw(replay.route_entries(
        counts, dtypes=(torch.uint8, torch.int16, torch.int32), arrays=("numpy",),
        min_captured=1))
    if support or (support is None and draw(st.booleans())):
        kwargs["sample_support"] = draw(replay.support_entries(
            [len(r) for r in responses], dtypes=(torch.int32,), arrays=("numpy",)))
    return Case(case.args, kwargs, case.label)


@st.composite
def bad_skyrl_replay_cases(draw) -> BadCase:
    """One router-replay defect (`batchproof.replay`'s) on a call SkyRL otherwise takes."""
    name = draw(st.sampled_from(["routed_experts", "sample_support"]))
    good = draw(skyrl_replay_cases(support=name == "sample_support"))
    return draw(_replay_defect(*good.args, dict(good.kwargs), name))


# --------------------------------------------------------------------------- known divergences


def _arrays(call: Call, name: str) -> list:
    """The entries of a list argument that are arrays (torch or NumPy), as NumPy dtypes'
    holders; nothing when the argument is not a list."""
    value = call.arg(name)
    if not isinstance(value, list):
        return []
    return [e for e in value if isinstance(e, np.ndarray)
            or (isinstance(e, torch.Tensor) and not e.is_nested)]


def _dtype(entry: Any) -> np.dtype | None:
    """An array entry's NumPy dtype (None for a torch dtype NumPy has not: bfloat16)."""
    if isinstance(entry, np.ndarray):
        return entry.dtype
    try:
        return torch.empty(0, dtype=entry.dtype).numpy().dtype
    except TypeError:
        return None


def has_int64_routes(call: Call) -> bool:
    return any(_dtype(e) == np.dtype(np.int64) for e in _arrays(call, "routed_experts"))


def has_uncaptured_sample(call: Call) -> bool:
    return any(e.ndim == 3 and e.shape[0] == 0 for e in _arrays(call, "routed_experts"))


def has_support_not_int32(call: Call) -> bool:
    return any(_dtype(e) != SUPPORT_DTYPE for e in _arrays(call, "sample_support"))


def has_none_entry(call: Call) -> bool:
    return any(isinstance(call.arg(name), list) and any(e is None for e in call.arg(name))
               for name in ("routed_experts", "sample_support"))


def has_route_dtype_refused(call: Call) -> bool:
    """A route entry of a dtype SkyRL refuses by value (float, bool, int64), the call's defect
    being the routes' (where another argument's defect comes first, both raise its error)."""
    return (not call.valid and "routed_experts" in call.bad.why
            and any(_dtype(e) not in ROUTE_DTYPES for e in _arrays(call, "routed_experts")))


def has_mixed_route_dtypes(call: Call) -> bool:
    """Route entries of two dtypes SkyRL takes (it collates them in the widest)."""
    dtypes = {_dtype(e) for e in _arrays(call, "routed_experts")}
    return len(dtypes) > 1 and dtypes <= set(ROUTE_DTYPES)


def has_negative_route(call: Call) -> bool:
    return any(bool((_as_np(e) < 0).any()) for e in _arrays(call, "routed_experts")
               if _dtype(e) in ROUTE_DTYPES)


def has_bad_support_id(call: Call) -> bool:
    """A support id below -1, or an id after the -1 padding of its row."""
    for entry in _arrays(call, "sample_support"):
        if _dtype(entry) != SUPPORT_DTYPE or entry.ndim != 2:
            continue
        rows = _as_np(entry)
        padded = np.cumsum(rows == -1, axis=1) > 0
        if (rows < -1).any() or (padded & (rows != -1)).any():
            return True
    return False


def _as_np(entry: Any) -> np.ndarray:
    return entry if isinstance(entry, np.ndarray) else entry.numpy()


UPSTREAM = ("skyrl/train/dataset/preprocess.py: _collate_rollout_expert_indices, "
            "build_sample_support (skyrl 0.4.0)")

REPLAY_KNOWN = (
    KnownDivergence(
        "int64_routes_refused", has_int64_routes, kind="valid", upstream=UPSTREAM,
        raises=ValueError,
        doc="int64 routes raise ValueError ('must use a canonical routed-expert dtype (uint8, "
            "int16, int32)'): SkyRL takes the dtypes its inference server sends. The contract "
            "keeps int64 routes as given."),
    KnownDivergence(
        "uncaptured_sample_refused", has_uncaptured_sample, kind="valid", upstream=UPSTREAM,
        raises=ValueError,
        doc="a sample with no captured route (c_i = 0, e.g. an empty prompt and response, or "
            "a turn vLLM never evaluated) raises ValueError ('has 0 route rows'; for sample 0 "
            "'must contain routes for every trajectory'). The contract gives its tokens the "
            "dummy route and masks them."),
    KnownDivergence(
        "support_int32_only", has_support_not_int32, kind="both", upstream=UPSTREAM,
        raises=ValueError,
        doc="sample support of any dtype but int32 raises ValueError ('must use a canonical "
            "sample-support dtype (int32)'): int16 and int64 support, which the contract keeps "
            "as given, and a float or uint8 one, for which it raises TypeError."),
    KnownDivergence(
        "none_entry_type_error", has_none_entry, kind="errors", upstream=UPSTREAM,
        raises=TypeError,
        doc="a None entry (routes or support given for some samples only) raises TypeError "
            "('entries must be NumPy arrays, got NoneType'); the contract raises ValueError "
            "naming the sample."),
    KnownDivergence(
        "route_dtype_refused_by_value", has_route_dtype_refused, kind="errors",
        upstream=UPSTREAM, raises=ValueError,
        doc="a float or bool route entry, or an int64 one among narrower ones, raises "
            "ValueError (not a canonical dtype); the contract raises TypeError."),
    KnownDivergence(
        "mixed_route_dtypes_widened", has_mixed_route_dtypes, kind="errors", upstream=UPSTREAM,
        accepts=True,
        doc="route entries of two dtypes SkyRL takes (uint8 and int16, say) are collated in "
            "the widest (`max(dtype.itemsize)`), silently; the contract raises TypeError "
            "naming the sample whose dtype differs from sample 0's."),
    KnownDivergence(
        "negative_route_ids_unchecked", has_negative_route, kind="errors", upstream=UPSTREAM,
        accepts=True,
        doc="route ids are not read: a negative expert id (int16 / int32) is replayed as "
            "given. The contract raises ValueError naming the sample."),
    KnownDivergence(
        "support_ids_unchecked", has_bad_support_id, kind="errors", upstream=UPSTREAM,
        accepts=True,
        doc="support ids are not read: an id below -1, or a vocabulary id after a row's -1 "
            "padding, goes through. The contract raises ValueError naming the sample."),
)

RL_BATCH_REPLAY_0_4 = register_adapter(Adapter(
    name="skyrl.rl_batch_replay_0_4",
    framework="skyrl",
    record="rl_batch.build_rl_batch",
    target="skyrl.train.dataset.preprocess:convert_prompts_responses_to_batch_tensors",
    wrap=replay_adapter_0_4,
    distribution="skyrl",
    versions="~=0.4.0",  # the routes and support arguments, and the packed outputs
    importing=typed_dict_for_pydantic,
    doc="SkyRL 0.4.0's routes and sample support (packed, and make_router_padding_mask) "
        "against build_rl_batch(layout='left', routed_experts=, sample_support=)",
    devices=("cpu",),
    dtypes=(torch.int64, torch.float32),
    forms=("lists",),
    supports=left_layout_replaying,
    # what SkyRL takes, and the contract's whole range (int64 routes, uncaptured samples,
    # int16 / int64 support, torch entries), whose divergences are declared
    valid=st.one_of(skyrl_replay_cases(), rl_batch_cases(
        layouts=("left",), routed_experts=True, sample_support=None)),
    invalid=bad_skyrl_replay_cases(),
    known=RL_BATCH_0_4_KNOWN + REPLAY_KNOWN,
    not_provided=NOT_PRODUCED,
    skip={"property:layouts_agree": "SkyRL has no two_segment layout",
          "property:max_seq_len_only_warns": (
              "SkyRL 0.4.0 logs a second warning beside max_seq_len's for int32 routes "
              "('Collating rollout_expert_indices as int32, which doubles this buffer'); the "
              "property is checked without routes by skyrl.rl_batch_0_4")},
))

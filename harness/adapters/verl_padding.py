"""verl 0.9.1's padding rows' routes (`verl.padding_routed_experts`; issue 37, docs/trainer.md).

verl pads a batch whose size does not divide the DP size and mini-batches
(`trainer/ppo/padding_utils.py`, `upsample_batch_to_divisible_size`) with synthetic samples built
by `construct_minimal_padding_template` from a real one; the synthetic sample's router-replay
routes come from

    build_padding_routed_experts(source_routed_experts [T, layers, topk], seq_len) -> [seq_len,
                                 layers, topk] (all zeros, the source's dtype)

The adapter checks that function where `trainer.pad_to_multiple` puts its output: the padding
rows' `routed_experts`. The batch is the contract's (`pad_to_multiple` of the reference) with
the padding rows' routes replaced by verl's for the first real row's; only `routed_experts` is
compared (the rest is the reference's, `compared`), and the errors check is skipped (verl's
function validates nothing the contract does). Whatever `upsample_batch_to_divisible_size` does
around it needs TransferQueue's store and is not reached.

    contract (padding row)           verl 0.9.1
    the dummy route 0 .. topk-1      zeros: every padding token sent topk times to expert 0
    on every slot                    (the dropless dispatcher's tokens * topk broken; verl
                                     #7524) - `padding_routes_are_zeros`, set aside where
                                     topk >= 2; with topk == 1 the two agree (0 is the dummy)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from tensordict import TensorDict

from batchproof.adapters import Adapter, Call, KnownDivergence, register_adapter
from batchproof.ops.trainer import pad_to_multiple_cases, with_replay_fields
from batchproof.reference.trainer import pad_to_multiple
from batchproof.registry import Case

PADDING_UTILS = "verl.trainer.ppo.padding_utils"


def padding_routes_adapter(build: Callable[..., Any]) -> Callable[..., TensorDict]:
    """verl's padding routes on `pad_to_multiple`'s padding rows (the rest the contract's)."""

    def padded(td, multiple, **kwargs) -> TensorDict:
        out = pad_to_multiple(td, multiple, **kwargs)
        batch, total = td.batch_size[0], out.batch_size[0]
        if total == batch or "routed_experts" not in td.keys():
            return out
        source = td["routed_experts"][0]  # the first real sample, as verl's template
        routes = out["routed_experts"].clone()
        for row in range(batch, total):
            routes[row] = build(source, source.shape[0])
        out.set("routed_experts", routes)
        return out

    return padded


def with_routes(call: Call) -> bool:
    """A valid call whose batch carries routes (verl builds padding routes from a sample's)."""
    td = call.arg("td")
    return call.valid and hasattr(td, "keys") and "routed_experts" in td.keys()


def pads_with_topk_above_one(call: Call) -> bool:
    """Padding rows are added and topk >= 2: verl's zeros differ from the dummy 0 .. topk-1."""
    if not with_routes(call):
        return False
    td, multiple = call.arg("td"), call.arg("multiple")
    return td.batch_size[0] % multiple != 0 and td["routed_experts"].shape[-1] >= 2


@st.composite
def routed_pad_cases(draw) -> Case:
    """`pad_to_multiple`'s valid calls, each batch carrying router-replay fields."""
    case = draw(pad_to_multiple_cases())
    td, multiple = case.args
    if "routed_experts" not in td.keys():
        td = draw(with_replay_fields(td))
    return Case((td, multiple), case.kwargs, case.label)


PADDING_ROUTED_EXPERTS = register_adapter(Adapter(
    name="verl.padding_routed_experts",
    framework="verl",
    record="trainer.pad_to_multiple",
    target=f"{PADDING_UTILS}:build_padding_routed_experts",
    wrap=padding_routes_adapter,
    distribution="verl",
    versions="~=0.9.1",
    doc="the routes of verl's synthetic padding samples against pad_to_multiple's padding rows",
    forms=None,
    supports=with_routes,
    valid=routed_pad_cases(),
    compared=("routed_experts",),
    known=(KnownDivergence(
        "padding_routes_are_zeros", pads_with_topk_above_one, kind="valid",
        upstream="verl/trainer/ppo/padding_utils.py: build_padding_routed_experts (verl 0.9.1); "
                 "verl #7524",
        fields=("routed_experts",),
        doc="a synthetic padding sample's routes are all zeros ('Build a zero routed-experts "
            "tensor'): every padding token goes topk times to expert 0, which breaks the "
            "dropless dispatcher's tokens * topk distinct assignments, and nothing masks them. "
            "The contract gives every padding slot the dummy route 0 .. topk-1 (equal to "
            "zeros only when topk == 1)."),),
    skip={"errors": "verl's function builds one padding sample's routes from a real one's and "
                    "validates nothing the contract does (the batch is the reference's)"},
))

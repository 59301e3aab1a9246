"""SkyRL 0.4.0's Megatron CP index arithmetic (with megatron-core 0.16.1; docs/cp.md, "Adapters").

    cp.shard                  skyrl.backends.skyrl_train.distributed.megatron.model_utils.
      (skyrl.cp_packed_indices) _packed_cp_rank_and_local_indices(cu_seqlens_padded,
                                seq_indices, seq_offsets, seq_lens_padded, cp_size): for every
                                position of the padded stream, the CP rank that holds it and
                                its index there (zigzag); the inputs come from SkyRL's own
                                `_packed_sequence_indices(cu_seqlens_padded, total, device)`

SkyRL's Megatron backend uses this map for packed sequences under CP: it scatters the shifted
targets into each rank's local order (`rolled_targets[local_indices[mask]] = ...`) and gathers
the ranks' outputs back into the padded stream (`AllGatherPackedCPTensor`:
`gathered[rank_for_token, local_indices]`). Both are private functions of SkyRL (leading
underscore): they may change without notice, which is what a check is for.

The adapter asks SkyRL's map for the padded row's positions and does what SkyRL's scatter does,
rank by rank: `padded_index[rank, local] = position` for every position whose rank it is (a
position SkyRL gives no slot leaves -1; a local index outside the rank's `n` slots marks that
rank's whole row -2), then takes every per-token field at `padded_index`. Compared:
`padded_index` and every per-token field. Not compared: `token_index` and the local boundaries
(SkyRL computes neither), `rank`. Domain: the valid zigzag calls (SkyRL has no other layout;
cp = 1 is the identity in both). The module imports Megatron's parallel state, so it needs
megatron-core beside SkyRL (`Adapter.needs`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from batchproof.adapters import Adapter, Call, register_adapter, without_replay
from batchproof.adapters.megatron import padded_row, per_token_fields
from batchproof.adapters.skyrl import typed_dict_for_pydantic

MODEL_UTILS = "skyrl.backends.skyrl_train.distributed.megatron.model_utils"
NOT_COMPARED = ("token_index", "cu_seqlens", "cu_seqlens_padded", "rank", "cp_size", "layout")


def local_slots(rank_of: torch.Tensor, local: torch.Tensor, rank: int, n: int) -> torch.Tensor:
    """(n,) int64: the stream position SkyRL's map puts in each of `rank`'s slots (SkyRL's
    scatter), -1 for a slot it fills with none, all -2 when it names a slot outside 0..n-1."""
    mine = rank_of == rank
    slots = local[mine]
    out = torch.full((n,), -1)  # an int fill: int64
    if bool(((slots < 0) | (slots >= n)).any()):
        return out.fill_(-2)
    out[slots] = torch.nonzero(mine).flatten()
    return out


def indices_adapter(rank_and_local: Callable[..., Any]) -> Callable[..., Any]:
    import importlib

    with typed_dict_for_pydantic():
        utils = importlib.import_module(MODEL_UTILS)

    def shard(padded, *, cp_size, layout="zigzag", cp_rank=None):
        cu_padded = padded["cu_seqlens_padded"]
        total = int(cu_padded[-1])
        cu_long, _, seq_indices, seq_offsets, seq_lens = utils._packed_sequence_indices(
            cu_padded, total, torch.device("cpu"))
        rank_of, local = rank_and_local(cu_long, seq_indices, seq_offsets, seq_lens, cp_size)
        ranks = range(cp_size) if cp_rank is None else [cp_rank]
        index = torch.stack([local_slots(rank_of, local, rank, total // cp_size)
                             for rank in ranks])
        fields = {key: padded[key][0][index.clamp(min=0)]
                  for key in per_token_fields(padded, NOT_COMPARED)}
        return TensorDict({**fields, "padded_index": index}, batch_size=[len(ranks)])

    return shard


def zigzag_call(call: Call) -> bool:
    """A valid zigzag call (SkyRL's map is zigzag only)."""
    return call.valid and padded_row(call) is not None and call.arg("layout") == "zigzag"


CP_PACKED_INDICES = register_adapter(Adapter(
    name="skyrl.cp_packed_indices",
    framework="skyrl",
    record="cp.shard",
    target=f"{MODEL_UTILS}:_packed_cp_rank_and_local_indices",
    wrap=indices_adapter,
    distribution="skyrl",
    versions="~=0.4.0",
    needs=("megatron-core",),
    importing=typed_dict_for_pydantic,
    doc="SkyRL's Megatron CP map (stream position -> rank, local slot; zigzag) scattered into "
        "each rank's padded_index, the fields taken there, against shard",
    forms=None,
    supports=without_replay(zigzag_call),  # the map carries no routes (docs/frameworks.md)
    not_provided=NOT_COMPARED,
    skip={"errors": "SkyRL's map takes the boundaries it is given and validates nothing; the "
                    "contract's invalid rows are checked by its callers (not adapted)"},
))


# --------------------------------------------------------------------------- BSHD


def bshd_adapter(tokens_on_rank: Callable[..., Any]) -> Callable[..., Any]:
    """`_get_tokens_on_this_cp_rank(x, cp_rank, cp_size, seq_dim=1)` on every field of the
    batch, rank by rank: (R, B, S / cp, ...) fields."""
    def shard_bshd(batch, *, cp_size, layout="zigzag", cp_rank=None):
        ranks = range(cp_size) if cp_rank is None else [cp_rank]
        keys = [key for key in batch.keys() if isinstance(batch[key], torch.Tensor)]
        fields = {key: torch.stack([tokens_on_rank(batch[key], rank, cp_size, seq_dim=1)
                                    for rank in ranks]) for key in keys}
        rows = batch.batch_size[0] if isinstance(batch, TensorDictBase) else (
            next(iter(fields.values())).shape[1] if fields else 0)
        return TensorDict(fields, batch_size=[len(ranks), rows])

    return shard_bshd


def bshd_zigzag_call(call: Call) -> bool:
    """A valid zigzag call (SkyRL's function is zigzag only)."""
    return call.valid and call.arg("layout") == "zigzag"


CP_RANK_BSHD = register_adapter(Adapter(
    name="skyrl.cp_rank_bshd",
    framework="skyrl",
    record="cp.shard_bshd",
    target=f"{MODEL_UTILS}:_get_tokens_on_this_cp_rank",
    wrap=bshd_adapter,
    distribution="skyrl",
    versions="~=0.4.0",
    needs=("megatron-core",),
    importing=typed_dict_for_pydantic,
    doc="SkyRL's zigzag slice of one (B, S, ...) tensor for a CP rank, on every field, "
        "against shard_bshd",
    forms=None,
    supports=bshd_zigzag_call,
    not_provided=("column_index",),
    skip={"errors": "SkyRL's function takes a tensor, a rank and a size and validates nothing; "
                    "the contract's invalid batches are its callers' to catch"},
))

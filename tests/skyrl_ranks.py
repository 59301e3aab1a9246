"""The body of one CP rank for tests/test_adapters_skyrl04.py's process-group test, in a module
of its own: a spawned rank imports only this (torch, batchproof's oracle, SkyRL's Megatron model
utilities), not the test module with everything it imports.

Every rank has the whole packed row; it pads it for cp (`reference.cp.pad_for_cp`), takes its own
zigzag share (`reference.cp.shard(cp_rank=rank)`: the contract's layout), computes per-token
outputs from its tokens and positions, and gives them to SkyRL's
`allgather_cp_sharded_packed_tensor`, which all-gathers the ranks' shares over the process group
and puts them back in the padded stream's order. Planted: every rank sends the share of its
mirror rank (cp - 1 - r), so the gather reassembles a layout as another. Each rank writes what
came back; the parent compares it with the outputs of the whole padded stream.
"""

from __future__ import annotations

import importlib
import pickle
from datetime import timedelta

import torch

from batchproof.adapters.skyrl import typed_dict_for_pydantic
from batchproof.adapters.skyrl_megatron import MODEL_UTILS
from batchproof.reference import cp as reference


def per_token(ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """A table's value of the token scaled by its position + 1, float32: correctly rounded, the
    same bits wherever it is computed."""
    table = torch.linspace(-3.0, 2.0, 50, dtype=torch.float32)
    return table[ids.clamp(0, 49)] * (positions + 1).to(torch.float32)


def rank_main(rank: int, world: int, rendezvous: str, rows, out_path: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    with typed_dict_for_pydantic():
        utils = importlib.import_module(MODEL_UTILS)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    results = []
    try:
        for planted in (False, True):
            results.append([_gathered(utils, world, rank, ids, cu, planted) for ids, cu in rows])
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(f"{out_path}.{rank}", "wb") as handle:
        pickle.dump(results, handle)


def _gathered(utils, world: int, rank: int, ids: list, cu: list, planted: bool) -> list:
    import torch.distributed as dist

    padded = reference.pad_for_cp(ids, cu, cp_size=world)
    share = reference.shard(padded, cp_size=world, cp_rank=world - 1 - rank if planted else rank)
    local = per_token(share["input_ids"][0], share["position_ids"][0])
    return utils.allgather_cp_sharded_packed_tensor(local, padded["cu_seqlens_padded"],
                                                    dist.group.WORLD).tolist()

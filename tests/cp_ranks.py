"""The body of one CP rank for tests/test_cp.py's collective test, in a module of its own: a
spawned rank imports only this (torch, batchproof.impl.cp, and the cp zoo when a bug is
planted), not the test module with everything it imports.

Each rank pads the row (every rank has it), takes its own share with `shard(cp_rank=rank)`,
computes per-token outputs from its tokens, positions and labels, all-gathers them over the
process group and unshards; rank 0 writes what came back.
"""

from __future__ import annotations

import pickle
from contextlib import nullcontext
from datetime import timedelta

import torch

VOCAB = 50


def per_token(ids: torch.Tensor, positions: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """What a rank computes per token, (N, 2) float32: a table's value of the token scaled by its
    position + 1, and the table's value of its label (0 where ignored). Only correctly rounded
    products and lookups: the same bits wherever and in whatever shape they are computed."""
    table = torch.linspace(-3.0, 2.0, VOCAB, dtype=torch.float32).to(ids.device)
    first = table[ids.clamp(0, VOCAB - 1)] * (positions + 1).to(torch.float32)
    second = torch.where(labels >= 0, table[labels.clamp(0, VOCAB - 1)],
                         torch.zeros((), dtype=torch.float32, device=ids.device))
    return torch.stack([first, second], -1)


def _planted(entry: str | None):
    if not entry:
        return nullcontext()
    from batchproof.mutation.zoo import planted
    from batchproof.mutation.zoo.cp import ENTRIES

    return planted(next(e for e in ENTRIES if e.name == entry))


def rank_main(rank: int, world: int, rendezvous: str, runs, out_path: str,
              backend: str = "gloo") -> None:
    """`runs`: (zoo entry name or None, cases) pairs, run one after the other in the same
    process group (one spawn for all of them: starting ranks is the slow part). With
    `backend="nccl"` rank r works on CUDA device r: the row is padded there, sharded, computed,
    gathered over NCCL and unsharded there."""
    import torch.distributed as dist

    from batchproof.impl import cp

    torch.set_num_threads(1)
    device = None
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    results = []
    try:
        for entry, cases in runs:
            results.append([])
            with _planted(entry):
                for ids, cu, layout in cases:
                    padded = cp.pad_for_cp(ids, cu, cp_size=world, device=device)
                    mine = cp.shard(padded, cp_size=world, layout=layout, cp_rank=rank)
                    values = per_token(mine["input_ids"][0], mine["position_ids"][0],
                                       mine["labels"][0]).contiguous()
                    gathered = [torch.empty_like(values) for _ in range(world)]
                    if values.numel():
                        dist.all_gather(gathered, values)
                    results[-1].append(cp.unshard(gathered, padded["cu_seqlens"],
                                                  padded["cu_seqlens_padded"], layout=layout))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        with open(out_path, "wb") as handle:
            pickle.dump([[r.cpu().tolist() for r in run] for run in results], handle)

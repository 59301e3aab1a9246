"""The body of one data-parallel rank for tests/test_adapters.py's process-group test of verl's
`rearrange_micro_batches`, in a module of its own: a spawned rank imports only this (torch,
tensordict and verl's seqlen_balancing), not the test module with everything it imports.

Each rank builds its own right-padded batch from its own lengths and calls verl with the whole
world as `dp_group`: verl agrees the micro-batch count by all-reduce (MAX of the counts, then
MIN of "every micro-batch fits" while it raises the count). Every rank writes the index lists it
got back; the parent compares them with what one process computes (tests/test_adapters.py).
"""

from __future__ import annotations

import pickle
from datetime import timedelta

import torch
from tensordict import TensorDict


def padded_batch(lengths: list[int]) -> TensorDict:
    """Right-padded rows of `lengths` real tokens (what verl's actor gets per rank)."""
    width = max(lengths)
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths], dtype=torch.int64)
    return TensorDict({"input_ids": torch.zeros_like(mask), "attention_mask": mask},
                      batch_size=[len(lengths)])


def rank_main(rank: int, world: int, rendezvous: str, cases, out_path: str,
              same_micro_num_in_dp: bool = True) -> None:
    """`cases`: (per-rank lengths, max_tokens) pairs; this rank takes `lengths[rank]` of each.
    `same_micro_num_in_dp=False` is the planted fault (each rank keeps its own count)."""
    import torch.distributed as dist
    import verl.utils.seqlen_balancing as seqlen

    # verl 0.9.1 has no CPU platform: without an accelerator its detection falls back to
    # 'nvidia', so the count it all-reduces is put on CUDA and a CPU-only rank fails with "Torch
    # not compiled with CUDA enabled". Here the tensors go where gloo carries them; the
    # algorithm is verl's, unchanged.
    seqlen.get_device_name = lambda: "cpu"
    rearrange_micro_batches = seqlen.rearrange_micro_batches
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    got = []
    try:
        for per_rank, max_tokens in cases:
            _, indices = rearrange_micro_batches(
                padded_batch(per_rank[rank]), max_tokens, dp_group=dist.group.WORLD,
                same_micro_num_in_dp=same_micro_num_in_dp)
            got.append(indices)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(f"{out_path}.{rank}", "wb") as handle:
        pickle.dump(got, handle)

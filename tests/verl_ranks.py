"""The bodies of verl's ranks for tests/test_adapters.py's process-group tests, in a module of
their own: a spawned rank imports only this (torch, tensordict and the verl module under test),
not the test module with everything it imports.

`rank_main` (data parallel): each rank builds its own right-padded batch from its own lengths
and calls `rearrange_micro_batches` with the whole world as `dp_group`: verl agrees the
micro-batch count by all-reduce (MAX of the counts, then MIN of "every micro-batch fits" while it
raises the count). Every rank writes the index lists it got back.

`ulysses_main` (sequence parallel): every rank has the whole packed row; verl pads it to a
multiple of the world (`ulysses_pad_and_slice_inputs`), each rank computes per-token outputs of
its slice, and `gather_outputs_and_unpad` all-gathers them and drops the pad. Rank 0 writes the
gathered outputs. The parent compares both with what one process computes.
"""

from __future__ import annotations

import pickle
from datetime import timedelta

import torch
from tensordict import TensorDict


def per_token(ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """What a rank computes per token, (..., 2) float32: a table's value of the token scaled by
    its position + 1, and the position itself. Correctly rounded products and lookups only: the
    same bits wherever and in whatever shape they are computed."""
    table = torch.linspace(-3.0, 2.0, 50, dtype=torch.float32)
    value = table[ids.clamp(0, 49)] * (positions + 1).to(torch.float32)
    return torch.stack([value, positions.to(torch.float32)], -1)


def ulysses_main(rank: int, world: int, rendezvous: str, rows, out_path: str,
                 slice_positions: bool = True) -> None:
    """`rows`: (input_ids, position_ids) lists of packed rows. `slice_positions=False` is the
    planted fault: verl's `skip_position_ids_rmpad`, every rank reading the first slice's
    positions."""
    import torch.distributed as dist
    from verl.utils import ulysses

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    gathered = []
    try:
        ulysses.set_ulysses_sequence_parallel_group(dist.group.WORLD)
        for ids, positions in rows:
            ids_t, pos_t = torch.tensor([ids]), torch.tensor([positions])
            local_ids, local_pos, pad = ulysses.ulysses_pad_and_slice_inputs(
                ids_t, pos_t, sp_size=world, skip_position_ids_rmpad=not slice_positions)
            local = per_token(local_ids, local_pos[:, :local_ids.shape[1]])
            gathered.append(ulysses.gather_outputs_and_unpad(
                local, gather_dim=1, unpad_dim=1, padding_size=pad).tolist())
        dist.barrier()
    finally:
        ulysses.set_ulysses_sequence_parallel_group(None)
        dist.destroy_process_group()
    if rank == 0:
        with open(out_path, "wb") as handle:
            pickle.dump(gathered, handle)


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

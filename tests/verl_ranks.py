"""The bodies of verl's ranks for tests/test_adapters.py's process-group tests, in a module of
their own: a spawned rank imports only this (torch, batchproof's verl adapter module and the
verl modules under test), not the test module with everything it imports.

One spawn runs every run (starting ranks that import verl is the slow part); each rank writes
what each run gave it. Two kinds of run:

- `micro_batches` (data parallel): each rank builds its own right-padded batch from its own
  lengths and calls `rearrange_micro_batches` with the whole world as `dp_group`: verl agrees the
  micro-batch count by all-reduce (MAX of the counts, then MIN of "every micro-batch fits" while
  it raises the count). Planted: `same_micro_num_in_dp=False` (each rank keeps its own count).
- `ulysses` (sequence parallel): every rank has the whole packed row; verl pads it to a multiple
  of the world (`ulysses_pad_and_slice_inputs`), each rank computes per-token outputs of its
  slice, and `gather_outputs_and_unpad` all-gathers them and drops the pad. Planted: the
  positions left unsliced (verl's `skip_position_ids_rmpad`: every rank reads the first slice's).
- `mcore` (context parallel, Megatron-core's parallel state initialized over the world as one CP
  group): every rank has the whole (B, S) batch and its mask; verl's `preprocess_packed_seqs`
  gives the rank its zigzag chunks of the ids and of the positions, the rank computes per-token
  outputs, and `postprocess_packed_seqs` all-gathers them over the CP group and puts them back in
  the (B, S) layout. Each rank returns that and its own local outputs and padded boundaries;
  then the same through verl's THD engine (`preprocess_thd_engine` on the nested batch, with
  the positions it returns, and `postprocess_thd_engine`, whose gather gives one row per
  sequence).
  Planted: the rank slices as the mirror rank (cp - 1 - r) while the gather puts it at r (a
  layout reassembled as another, slime #1871's class). Runs only where megatron-core is
  installed beside verl.

The parent compares what came back with what one process computes.
"""

from __future__ import annotations

import pickle
from datetime import timedelta

import torch

from batchproof.adapters.verl import padded_batch


def per_token(ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """What a rank computes per token, (..., 2) float32: a table's value of the token scaled by
    its position + 1, and the position itself. Correctly rounded products and lookups only: the
    same bits wherever and in whatever shape they are computed."""
    table = torch.linspace(-3.0, 2.0, 50, dtype=torch.float32)
    value = table[ids.clamp(0, 49)] * (positions + 1).to(torch.float32)
    return torch.stack([value, positions.to(torch.float32)], -1)


def rank_main(rank: int, world: int, rendezvous: str, runs, out_path: str) -> None:
    """`runs`: (kind, planted, payload) triples, run in order in one process group; payload is
    (per-rank lengths, max_tokens) cases for `micro_batches`, (ids, positions) rows for
    `ulysses`."""
    import torch.distributed as dist
    import verl.utils.seqlen_balancing as seqlen
    from verl.utils import ulysses

    # verl 0.9.1 has no CPU platform: without an accelerator its detection falls back to
    # 'nvidia', so the count it all-reduces is put on CUDA and a CPU-only rank fails with "Torch
    # not compiled with CUDA enabled". Here the tensors go where gloo carries them; the
    # algorithm is verl's, unchanged.
    seqlen.get_device_name = lambda: "cpu"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    results = []
    mpu = _megatron_cp_group(world) if any(kind == "mcore" for kind, _, _ in runs) else None
    try:
        ulysses.set_ulysses_sequence_parallel_group(dist.group.WORLD)
        for kind, planted, payload in runs:
            if kind == "micro_batches":
                results.append([seqlen.rearrange_micro_batches(
                    padded_batch(per_rank[rank]), max_tokens, dp_group=dist.group.WORLD,
                    same_micro_num_in_dp=not planted)[1] for per_rank, max_tokens in payload])
            elif kind == "mcore":
                results.append([_mcore(mpu, world, ids, mask, planted) for ids, mask in payload])
            else:
                results.append([_ulysses(ulysses, world, ids, positions, planted)
                                for ids, positions in payload])
        dist.barrier()
    finally:
        ulysses.set_ulysses_sequence_parallel_group(None)
        if mpu is not None:
            mpu.destroy_model_parallel()
        dist.destroy_process_group()
    with open(f"{out_path}.{rank}", "wb") as handle:
        pickle.dump(results, handle)


def _ulysses(ulysses, world: int, ids: list[int], positions: list[int], planted: bool) -> list:
    local_ids, local_pos, pad = ulysses.ulysses_pad_and_slice_inputs(
        torch.tensor([ids]), torch.tensor([positions]), sp_size=world,
        skip_position_ids_rmpad=planted)
    local = per_token(local_ids, local_pos[:, :local_ids.shape[1]])
    return ulysses.gather_outputs_and_unpad(local, gather_dim=1, unpad_dim=1,
                                            padding_size=pad).tolist()


def _megatron_cp_group(world: int):
    """Megatron-core's parallel state with the whole world as one context-parallel group (TP,
    PP and DP of 1), over the gloo default group."""
    from megatron.core import parallel_state as mpu

    mpu.initialize_model_parallel(context_parallel_size=world)
    assert mpu.get_context_parallel_world_size() == world
    return mpu


def positions_in_sequence(mask: torch.Tensor) -> torch.Tensor:
    """(B, S) int64: each real token's position in its sequence (0 where masked out)."""
    return ((mask.cumsum(-1) - 1) * mask).to(torch.int64)


def _mcore(mpu, world: int, ids: list, mask: list, planted: bool) -> tuple:
    from verl.models.mcore import util

    batch, real = torch.tensor(ids), torch.tensor(mask, dtype=torch.bool)
    true_rank = mpu.get_context_parallel_rank
    if planted:
        mpu.get_context_parallel_rank = lambda: world - 1 - true_rank()
    try:
        local_ids, params = util.preprocess_packed_seqs(batch, real)
        local_pos, _ = util.preprocess_packed_seqs(positions_in_sequence(real), real)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), real.sum(-1).cumsum(0)])
        nested = torch.nested.nested_tensor_from_jagged(batch[real], offsets=offsets)
        thd_ids, thd_params, thd_pos = util.preprocess_thd_engine(nested)
    finally:
        mpu.get_context_parallel_rank = true_rank
    local = per_token(local_ids, local_pos)
    whole = util.postprocess_packed_seqs(local, params, real, batch.shape[0], batch.shape[1])
    thd = util.postprocess_thd_engine(per_token(thd_ids, thd_pos), thd_params, nested,
                                      batch.shape[0])
    return (whole.tolist(), local[0].tolist(), params.cu_seqlens_q_padded.tolist(),
            [row.tolist() for row in thd.unbind()])

"""Megatron-core adapter (PyPI distribution `megatron-core`, checked with 0.16.1: the last release
that installs on Python 3.11; 0.17 and later need Python 3.12; docs/cp.md, "Adapters").

    cp.shard_bshd             megatron.core.utils.get_batch_on_this_cp_rank(batch, cp_group):
      (megatron.cp_rank_bshd)   a dict of (B, S, ...) tensors sliced along dimension 1 into
                                2·cp chunks, chunks r and 2·cp-1-r kept (dimension 2 for a key
                                named attention_mask: Megatron's (B, 1, S, S) mask)

Megatron reads the rank and the world size of the context-parallel group it is given
(`get_pg_rank`, `get_pg_size`: `group.rank()`, `group.size()`, once a default process group is
initialized). The adapter initializes a one-process gloo group (once per process, file
rendezvous) and hands Megatron, for each rank the contract asks for, a group object answering
that rank and `cp_size`: what a real CP group of that size answers on that rank. Each rank gets
its own shallow copy of the batch dict, as each rank in Megatron has its own batch: Megatron
replaces the dict's entries with the rank's slices (it returns the dict it was given).

`get_thd_batch_on_this_cp_rank` (the THD form) needs Transformer Engine's
`thd_get_partitioned_indices`, a CUDA extension: it is not adapted (no CPU build).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from batchproof.adapters import Adapter, Call, KnownDivergence, register_adapter

UPSTREAM = "megatron/core/utils.py, get_batch_on_this_cp_rank (megatron-core 0.16.1)"


class RankOfGroup:
    """What Megatron reads of a process group: its size and this process's rank in it."""

    def __init__(self, size: int, rank: int) -> None:
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


def default_group() -> None:
    """A one-process gloo group, so that torch.distributed reports itself initialized (Megatron
    reads a group only then)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    rendezvous = os.path.join(tempfile.mkdtemp(prefix="batchproof-megatron-"), "store")
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=0, world_size=1)


# --------------------------------------------------------------------------- shared by the CP
# adapters of frameworks built on Megatron (verl_mcore, skyrl_megatron)

BOUNDARIES = ("cu_seqlens", "cu_seqlens_padded")


def padded_row(call: Call) -> Any:
    """`cp.shard`'s padded row (a TensorDict or a dict), or None for anything else."""
    padded = call.arg("padded")
    return padded if isinstance(padded, (dict, TensorDictBase)) else None


def per_token_fields(padded: Any, not_compared: tuple[str, ...]) -> list[str]:
    """The padded row's per-token tensor fields: every tensor entry but the two boundaries and
    the outputs an adapter does not compare."""
    return [key for key in padded.keys() if key not in BOUNDARIES + not_compared
            and isinstance(padded[key], torch.Tensor)]


def bshd_adapter(get_batch: Callable[..., Any]) -> Callable[..., Any]:
    def shard_bshd(batch, *, cp_size, layout="zigzag", cp_rank=None):
        default_group()
        ranks = range(cp_size) if cp_rank is None else [cp_rank]
        shares = []
        for rank in ranks:
            mine = dict(batch.items()) if hasattr(batch, "items") else batch
            shares.append(get_batch(mine, cp_group=RankOfGroup(cp_size, rank)))
        return _stacked(shares)

    return shard_bshd


def _stacked(shares: list) -> Any:
    """Each rank's dict of (B, S / cp, ...) slices as one (R, B, S / cp, ...) TensorDict; what
    Megatron returned as it is when it is not that (a bad input it handed back unchanged)."""
    raw = shares[0] if len(shares) == 1 else shares
    if not shares or not all(isinstance(share, dict) for share in shares):
        return raw
    keys = [key for key, value in shares[0].items() if value is not None]
    parts = {key: [share.get(key) for share in shares] for key in keys}
    if not all(isinstance(part, torch.Tensor) and part.dim() >= 2
               and part.shape == values[0].shape for values in parts.values()
               for part in values):
        return raw
    rows = {values[0].shape[0] for values in parts.values()}
    if len(rows) > 1:
        return raw
    fields = {key: torch.stack(values) for key, values in parts.items()}
    return TensorDict(fields, batch_size=[len(shares), rows.pop() if rows else 0])


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def bshd_domain(call: Call) -> bool:
    """Zigzag with a cp_size and rank a CP group can have: Megatron has no layout argument
    (zigzag only), and cp_size / cp_rank are the group's, not arguments it could check."""
    cp_size, rank, layout = call.arg("cp_size"), call.arg("cp_rank"), call.arg("layout")
    return (_int(cp_size) and cp_size >= 1 and layout == "zigzag"
            and (rank is None or _int(rank) and 0 <= rank < cp_size))


def _split(call: Call) -> bool:
    cp_size = call.arg("cp_size")
    return _int(cp_size) and cp_size > 1  # (cp = 1 returns the batch untouched)


def _tensors(call: Call) -> dict[str, torch.Tensor]:
    batch = call.arg("batch")
    if not isinstance(batch, (dict, TensorDictBase)):
        return {}
    out = {}
    for key in batch.keys():
        if isinstance(batch, TensorDictBase) and batch.is_non_tensor(key):
            continue
        value = batch[key]
        if isinstance(value, torch.Tensor):
            out[key] = value
    return out


def empty_batch(call: Call) -> bool:
    """B = 0 rows, split over cp > 1 ranks."""
    return call.valid and _split(call) and any(
        value.dim() >= 2 and value.shape[0] == 0 for value in _tensors(call).values())


def attention_mask_field(call: Call) -> bool:
    """A field named attention_mask, split over cp > 1 ranks."""
    return call.valid and _split(call) and "attention_mask" in _tensors(call)


def unchecked(call: Call) -> bool:
    """Any invalid batch (the domain leaves out invalid cp_size, cp_rank and layout)."""
    return not call.valid


BSHD_KNOWN = (
    KnownDivergence(
        "empty_batch_raises", empty_batch,
        "a batch of B = 0 rows raises RuntimeError where the contract returns (cp, 0, S / cp) "
        "fields: the slice is viewed back as (B, -1), which 0 elements cannot fill",
        kind="valid", upstream=UPSTREAM, raises=RuntimeError),
    KnownDivergence(
        "attention_mask_sliced_on_dimension_2", attention_mask_field,
        "a key named attention_mask is sliced along dimension 2 (Megatron's (B, 1, S, S) mask), "
        "whatever its shape: a (B, S) mask raises IndexError, a (B, S, k) one is cut along k",
        kind="valid", upstream=UPSTREAM, raises=(IndexError, RuntimeError),
        fields=("attention_mask",)),
    KnownDivergence(
        "no_argument_checks", unchecked,
        "nothing is validated: a tensor or a list in place of the dict raises AttributeError, a "
        "field of one dimension IndexError, S not a multiple of 2·cp RuntimeError (a view); an "
        "empty dict, and fields of different S that each split, are accepted",
        kind="errors", upstream=UPSTREAM, raises=(AttributeError, IndexError, RuntimeError),
        accepts=True),
)

CP_RANK_BSHD = register_adapter(Adapter(
    name="megatron.cp_rank_bshd",
    framework="megatron",
    record="cp.shard_bshd",
    target="megatron.core.utils:get_batch_on_this_cp_rank",
    wrap=bshd_adapter,
    distribution="megatron-core",
    versions="~=0.16.1",
    doc="Megatron-core's get_batch_on_this_cp_rank (BSHD, zigzag) against shard_bshd",
    forms=("dict",),
    supports=bshd_domain,
    known=BSHD_KNOWN,
    not_provided=("column_index",),
))

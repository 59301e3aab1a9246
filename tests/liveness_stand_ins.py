"""Stand-ins for the frameworks' functions, for `tests/test_adapter_liveness.py` where a
framework is not installed.

Each stand-in takes what the adapter passes the framework's function and returns the framework's
raw return form (a tuple, a dict, a batch object read by key with a `metadata` dict, a collator
class, a packer, a `PackedSeqParams`-like dataclass), its values made from the contract's
reference output. They are not the frameworks: what is under test is the adapter's conversion of
that return form (`batchproof.adapters.liveness`). A few adapters reach more of the framework
than the function they wrap (a helper module, Megatron's parallel state, `datasets`): `patches`
lists what a stand-in run replaces for them, put back after the run.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict

from batchproof.reference import cp as cp_contract
from batchproof.reference.balance import balanced_partitions, karmarkar_karp, micro_batches
from batchproof.reference.nesting import extract_response, nest_by_mask
from batchproof.reference.rl_batch import build_rl_batch
from batchproof.reference.sft import collate_sft, ffd_bins, pack_sft
from batchproof.reference.varlen import pack_varlen, repad, unpad

IGNORE = -100


# --------------------------------------------------------------------------- SkyRL


def _rl_batch_left(pad_token_id, prompts, responses, rewards, loss_masks, logprobs,
                   max_seq_len) -> TensorDict:
    return build_rl_batch(prompts, responses, pad_token_id=pad_token_id, rewards=rewards,
                          loss_masks=loss_masks, logprobs=logprobs or None, layout="left",
                          max_seq_len=max_seq_len)


def skyrl_convert_0_3(tokenizer, prompts, responses, rewards, loss_masks, logprobs=None,
                      rollout_expert_indices=None, max_seq_len=None) -> tuple:
    """SkyRL 0.3.0's convert_prompts_responses_to_batch_tensors: 7 values."""
    td = _rl_batch_left(tokenizer.pad_token_id, prompts, responses, rewards, loss_masks,
                        logprobs, max_seq_len)
    return (td["input_ids"], td["attention_mask"], td["response_mask"], td["rewards"],
            td["loss_mask"], td.get("rollout_logprobs", None), None)


def skyrl_convert_0_4(pad_token_id, prompts, responses, rewards, loss_masks, logprobs=None,
                      rollout_expert_indices=None, rollout_sample_support=None,
                      max_seq_len=None) -> tuple:
    """SkyRL 0.4.0's: 8 values (the last two None without rollout expert indices)."""
    td = _rl_batch_left(pad_token_id, prompts, responses, rewards, loss_masks, logprobs,
                        max_seq_len)
    return (td["input_ids"], td["attention_mask"], td["response_mask"], td["rewards"],
            td["loss_mask"], td.get("rollout_logprobs", None), None, None)


class PackedTensor:
    """SkyRL 0.4.0's PackedTensor as the adapter reads it: `values` and `cu_seqlens`."""

    def __init__(self, values: torch.Tensor, cu_seqlens: torch.Tensor) -> None:
        self.values = values
        self.cu_seqlens = cu_seqlens


def _packed(rows: list[torch.Tensor]) -> PackedTensor:
    lengths = torch.tensor([0] + [r.shape[0] for r in rows], dtype=torch.int32)
    return PackedTensor(torch.cat(rows), torch.cumsum(lengths, 0, dtype=torch.int32))


def skyrl_convert_replay_0_4(pad_token_id, prompts, responses, rewards, loss_masks,
                             logprobs=None, rollout_expert_indices=None,
                             rollout_sample_support=None, max_seq_len=None) -> tuple:
    """SkyRL 0.4.0's with routes and support: the last two values packed over each sample's
    real tokens (routes) and response tokens (support), from the contract's laid-out ones."""
    td = build_rl_batch(prompts, responses, pad_token_id=pad_token_id, rewards=rewards,
                        loss_masks=loss_masks, logprobs=logprobs or None, layout="left",
                        max_seq_len=max_seq_len, routed_experts=rollout_expert_indices,
                        sample_support=rollout_sample_support)
    real = td["attention_mask"].sum(1).tolist()
    width, span = td["input_ids"].shape[1], td["response_mask"].shape[1]
    routes = support = None
    if rollout_expert_indices is not None:
        routes = _packed([td["routed_experts"][i, width - n:] for i, n in enumerate(real)])
    if rollout_sample_support is not None:
        support = _packed([td["sample_support"][i, span - len(r):]
                           for i, r in enumerate(responses)])
    return (td["input_ids"], td["attention_mask"], td["response_mask"], td["rewards"],
            td["loss_mask"], td.get("rollout_logprobs", None), routes, support)


def skyrl_router_padding_mask(attention_mask, captured_route_lengths) -> torch.Tensor:
    """SkyRL 0.4.0's make_router_padding_mask: True but on each row's captured prefix."""
    width = attention_mask.shape[1]
    starts = width - attention_mask.sum(1)
    columns = torch.arange(width)[None, :]
    captured = torch.tensor(captured_route_lengths)[:, None]
    return ~((columns >= starts[:, None]) & (columns < starts[:, None] + captured))


class TrainingBatch(dict):
    """SkyRL's TrainingInputBatch as the adapters read it: a dict of tensors (a `TensorList`
    too) that checks what is put in it, with a `metadata` dict."""

    def __init__(self, tensors: dict[str, Any], metadata: dict[str, Any]) -> None:
        super().__init__(tensors)
        self.metadata = metadata

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(value, (torch.Tensor, TensorList)):
            raise ValueError(f"Field {key} must be a tensor or TensorList, got {type(value)}")
        super().__setitem__(key, value)


class TensorList:
    """SkyRL's TensorList: one tensor per row, in `tensors`."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        self.tensors = tensors


def _skyrl_batch(td: TensorDict, **extra: Any) -> TrainingBatch:
    return TrainingBatch({"sequences": td["input_ids"], "attention_mask": td["attention_mask"],
                          "loss_mask": td["loss_mask"], **extra},
                         {"response_length": td.get_non_tensor("response_length")})


def skyrl_collate_sft_batch(examples, tokenizer) -> TrainingBatch:
    return _skyrl_batch(collate_sft(examples, pad_token_id=tokenizer.pad_token_id))


class SkyrlDefaultCollator:
    """DefaultCollator(tokenizer, micro_train_batch_size_per_gpu)(examples, batch_size=N)."""

    def __init__(self, tokenizer, micro_train_batch_size_per_gpu=1) -> None:
        self.tokenizer = tokenizer

    def __call__(self, examples, batch_size=None) -> TrainingBatch:
        return _skyrl_batch(collate_sft(examples, pad_token_id=self.tokenizer.pad_token_id,
                                        normalize=True))


class SkyrlPackedDataCollator:
    """PackedDataCollator(tokenizer, capacity, tp, pp, cp, dp, N, 1, fp8[, recipe])(examples,
    batch_size=N)."""

    def __init__(self, tokenizer, max_tokens_per_microbatch, tp_size=1, pp_size=1, cp_size=1,
                 dp_size=1, batch_size=1, micro_train_batch_size_per_gpu=1, fp8_enabled=False,
                 fp8_recipe="tensorwise") -> None:
        self.options = {"pad_token_id": tokenizer.pad_token_id,
                        "capacity": max_tokens_per_microbatch, "tp_size": tp_size,
                        "pp_size": pp_size, "cp_size": cp_size, "dp_size": dp_size,
                        "fp8": fp8_enabled, "fp8_recipe": fp8_recipe}

    def __call__(self, examples, batch_size=None) -> TrainingBatch:
        td = pack_sft(examples, **self.options)
        lengths = TensorList(list(td["sub_seq_lengths"].unbind(0)))
        return _skyrl_batch(td, sub_seq_lengths=lengths)


class SeqPacker:
    def __init__(self, capacity: int, min_bins: int, bin_multiple: int) -> None:
        self.options = {"capacity": capacity, "min_bins": min_bins,
                        "bin_multiple": bin_multiple}

    def pack(self, lengths) -> list[list[int]]:
        return ffd_bins(lengths, **self.options)


def skyrl_make_seq_packer(name, bin_capacity, min_bin_count=1, bin_count_multiple=1
                          ) -> SeqPacker:
    return SeqPacker(bin_capacity, min_bin_count, bin_count_multiple)


def skyrl_tokens_on_rank(x, cp_rank, cp_size, seq_dim=1) -> torch.Tensor:
    """_get_tokens_on_this_cp_rank: one (B, S, ...) tensor's zigzag share of a rank."""
    batch = TensorDict({"x": x}, batch_size=[x.shape[0]])
    return cp_contract.shard_bshd(batch, cp_size=cp_size, cp_rank=cp_rank)["x"][0]


def skyrl_packed_sequence_indices(cu_seqlens_padded, total, device) -> tuple:
    """The helper the adapter calls first (`_packed_sequence_indices`): what the stand-in of
    the map below needs is the boundaries."""
    return cu_seqlens_padded.long(), None, None, None, None


def skyrl_rank_and_local(cu_long, seq_indices, seq_offsets, seq_lens_padded, cp_size) -> tuple:
    """_packed_cp_rank_and_local_indices: for every position of the padded stream, the rank
    holding it and its slot there (zigzag), from the contract's padded_index."""
    total = int(cu_long[-1])
    row = TensorDict({"input_ids": torch.zeros(1, total, dtype=torch.int64),
                      "cu_seqlens": cu_long.to(torch.int32),
                      "cu_seqlens_padded": cu_long.to(torch.int32)}, batch_size=[])
    index = cp_contract.shard(row, cp_size=cp_size)["padded_index"]
    rank_of = torch.full((total,), -1, dtype=torch.int64)
    local = torch.full((total,), -1, dtype=torch.int64)
    for rank in range(index.shape[0]):
        for slot, position in enumerate(index[rank].tolist()):
            if position >= 0:
                rank_of[position], local[position] = rank, slot
    return rank_of, local


# --------------------------------------------------------------------------- Megatron


def megatron_batch_on_rank(batch, cp_group) -> dict:
    """get_batch_on_this_cp_rank: the dict it is given, each entry this rank's columns."""
    rows = next(iter(batch.values())).shape[0]
    share = cp_contract.shard_bshd(TensorDict(dict(batch), batch_size=[rows]),
                                   cp_size=cp_group.size(), cp_rank=cp_group.rank())
    for key in list(batch):
        batch[key] = share[key][0]
    return batch


# --------------------------------------------------------------------------- verl


def verl_partitions(seqlen_list, k_partitions, equal_size) -> list[list[int]]:
    return karmarkar_karp(seqlen_list, k_partitions, equal_size=equal_size)


def verl_balanced(seqlen_list, k_partitions, equal_size) -> list[list[int]]:
    return balanced_partitions(seqlen_list, k_partitions, equal_size=equal_size)


def verl_rearrange_micro_batches(batch, max_token_len, num_batches_divided_by=None,
                                 min_num_micro_batch=None, force_group_size=1) -> tuple:
    """(the micro-batches as TensorDicts, their index lists)."""
    lengths = batch["attention_mask"].sum(1).tolist()
    indices = micro_batches(lengths, max_token_len, min_count=min_num_micro_batch,
                            count_multiple=num_batches_divided_by, group_size=force_group_size)
    return [batch[torch.tensor(part, dtype=torch.long)] for part in indices], indices


def verl_position_ids(mask) -> torch.Tensor:
    """compute_position_id_with_mask: the contract's position ids of a right- or left-padded
    mask (a left-padded batch: the reference's own, built from its rows)."""
    return torch.clip(torch.cumsum(mask, dim=-1) - 1, min=0)


def verl_left_right_2_no_padding(data):
    """left_right_2_no_padding: the batch with the fields verl nests nested (in place)."""
    ids, mask = data["input_ids"], data["attention_mask"]
    pads = ids[mask == 0]
    nested = nest_by_mask(data.copy(), pad_token_id=int(pads[0]) if pads.numel() else 0)
    for key in ("input_ids", "position_ids", "routed_experts", "teacher_logprobs",
                "teacher_ids"):
        if key in data.keys():
            data[key] = nested[key]
    return data


def verl_no_padding_2_padding(tensor, data) -> torch.Tensor:
    if "max_response_len" in data.keys():
        data = data.exclude("max_response_len")
    return extract_response(data, tensor)


_CP_RANK: contextvars.ContextVar[tuple[int, int]] = contextvars.ContextVar("cp_rank")


@contextlib.contextmanager
def stand_in_cp_rank(cp_size: int, rank: int) -> Iterator[None]:
    """In place of the adapter's `megatron_cp_rank`: the stand-ins read the rank from here."""
    token = _CP_RANK.set((cp_size, rank))
    try:
        yield
    finally:
        _CP_RANK.reset(token)


@dataclass
class PackedSeqParams:
    """Megatron's PackedSeqParams, the one field the adapters read."""

    cu_seqlens_q_padded: torch.Tensor


def _share(rows: list[torch.Tensor], layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of sequences padded as verl pads them: (1, n, ...), and the padded
    boundaries."""
    cp_size, rank = _CP_RANK.get()
    step = 2 * cp_size if layout == "zigzag" and cp_size > 1 else cp_size
    lengths = [row.shape[0] for row in rows]
    spans = [-(-n // step) * step for n in lengths]
    cu = torch.tensor([0, *lengths]).cumsum(0).to(torch.int32)
    cu_padded = torch.tensor([0, *spans]).cumsum(0).to(torch.int32)
    trailing = rows[0].shape[1:] if rows else ()
    field = torch.zeros(1, int(cu_padded[-1]), *trailing, dtype=rows[0].dtype)
    for i, row in enumerate(rows):
        field[0, int(cu_padded[i]):int(cu_padded[i]) + row.shape[0]] = row
    padded = TensorDict({"input_ids": torch.zeros(field.shape[:2], dtype=torch.int64),
                         "x": field, "cu_seqlens": cu, "cu_seqlens_padded": cu_padded},
                        batch_size=[])
    share = cp_contract.shard(padded, cp_size=cp_size, layout=layout, cp_rank=rank)
    return share["x"][0].unsqueeze(0), cu_padded


def verl_preprocess_packed_seqs(batch, mask, **kwargs) -> tuple:
    rows = [batch[i][mask[i]] for i in range(batch.shape[0])]
    local, cu_padded = _share(rows, "zigzag")
    return local, PackedSeqParams(cu_padded)


def verl_preprocess_thd_engine(nested, cp_layout="zigzag", **kwargs) -> tuple:
    local, cu_padded = _share(list(nested.unbind(0)), cp_layout)
    return local, PackedSeqParams(cu_padded), None


class RouterReplay:
    """verl's RouterReplay as the adapter uses it: every instance listed in `router_instances`,
    its replay target in `target_topk_idx`."""

    router_instances: list[RouterReplay] = []

    def __init__(self) -> None:
        self.target_topk_idx = None
        RouterReplay.router_instances.append(self)


def stand_in_moe_layers(layers: int) -> torch.nn.Module:
    """In place of the adapter's `moe_layers` (Megatron's routers): `layers` objects with a
    `router_replay`."""
    decoder = torch.nn.Module()
    decoder.routers = [types.SimpleNamespace(layer_number=number, router_replay=RouterReplay())
                       for number in range(1, layers + 1)]
    return decoder


def verl_build_padding_routed_experts(source_routed_experts, seq_len) -> torch.Tensor:
    """build_padding_routed_experts as the contract would have it: the dummy route 0 .. topk-1
    on every one of `seq_len` slots, in the source's dtype (verl 0.9.1 gives zeros)."""
    layers, topk = source_routed_experts.shape[1:]
    dummy = torch.arange(topk, dtype=source_routed_experts.dtype)
    return dummy.expand(seq_len, layers, topk).clone()


def verl_set_router_replay_data(batch, mask, tf_config, model) -> None:
    """set_router_replay_data: this rank's share of the (S, max l, layers, topk) routes of the
    real tokens (padded as verl pads, zeros at the pads), one layer's (n, topk) int64 target
    written into each router's replay; returns nothing."""
    rows = [batch[i][mask[i]] for i in range(batch.shape[0])]
    local, _ = _share(rows, "zigzag")
    for layer, router in enumerate(model.routers):
        router.router_replay.target_topk_idx = local[0][:, layer].to(torch.int64)


# --------------------------------------------------------------------------- TRL


def _samples(examples) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, responses) of TRL's examples: ignored labels first, one sample per
    `seq_lengths` entry."""
    prompts, responses = [], []
    for ex in examples:
        ids, labels = list(ex["input_ids"]), list(ex["labels"])
        bounds = [0]
        for n in ex.get("seq_lengths", [len(ids)]):
            bounds.append(bounds[-1] + n)
        for start, end in zip(bounds, bounds[1:]):
            p = sum(1 for label in labels[start:end] if label == IGNORE)
            prompts.append(ids[start:start + p])
            responses.append(ids[start + p:end])
    return prompts, responses


class TrlLanguageModelingCollator:
    """DataCollatorForLanguageModeling(pad_token_id, padding_free=True, pad_to_multiple_of)
    (examples): one packed row, its labels, positions, segment numbers and boundaries."""

    def __init__(self, pad_token_id=0, padding_free=True, pad_to_multiple_of=None) -> None:
        self.pad_token_id, self.multiple = pad_token_id, pad_to_multiple_of or 1

    def __call__(self, examples) -> dict[str, Any]:
        prompts, responses = _samples(examples)
        td = pack_varlen(prompts, responses, pad_to_multiple=self.multiple,
                         pad_token_id=self.pad_token_id)
        ids = td["input_ids"].reshape(1, -1)
        labels = torch.full_like(ids, IGNORE)
        labels[0, td["target_index"]] = ids[0, td["target_index"]]
        cu = td["cu_seqlens"]
        segment = torch.searchsorted(cu[1:].contiguous(), torch.arange(ids.shape[1],
                                     dtype=cu.dtype), right=True)
        return {"input_ids": ids, "labels": labels,
                "position_ids": td["position_ids"].reshape(1, -1),
                "seq_idx": segment.reshape(1, -1).to(torch.int32),
                "cu_seq_lens_q": cu, "cu_seq_lens_k": cu,
                "max_length_q": td.get_non_tensor("max_seqlen"),
                "max_length_k": td.get_non_tensor("max_seqlen")}


def trl_pad(tensors, padding_value=0, padding_side="right", pad_to_multiple_of=None
            ) -> torch.Tensor:
    """trl.trainer.utils.pad of 1-D rows."""
    width = max((t.shape[0] for t in tensors), default=0)
    out = torch.full((len(tensors), width), padding_value, dtype=tensors[0].dtype)
    for i, t in enumerate(tensors):
        if padding_side == "left":
            out[i, width - t.shape[0]:] = t
        else:
            out[i, :t.shape[0]] = t
    return out


class Dataset:
    """What the TRL BFD adapter uses of `datasets.Dataset`: `from_dict` and `[:]`."""

    def __init__(self, columns: dict[str, list]) -> None:
        self.columns = columns

    @classmethod
    def from_dict(cls, columns: dict[str, list]) -> Dataset:
        return cls(columns)

    def __getitem__(self, key: slice) -> dict[str, list]:
        return {name: values[key] for name, values in self.columns.items()}


def trl_pack_dataset(dataset, seq_length, strategy="bfd") -> Dataset:
    """pack_dataset: each bin one row, its samples' tokens and their `seq_lengths`."""
    samples = dataset.columns["input_ids"]
    bins = ffd_bins([len(s) for s in samples], seq_length)
    return Dataset({"input_ids": [[t for i in b for t in samples[i]] for b in bins],
                    "seq_lengths": [[len(samples[i]) for i in b] for b in bins]})


def _fake_datasets() -> types.ModuleType:
    module = types.ModuleType("datasets")
    module.Dataset = Dataset
    module.is_progress_bar_enabled = lambda: False
    module.disable_progress_bars = module.enable_progress_bars = lambda: None
    return module


# --------------------------------------------------------------------------- OpenRLHF


def openrlhf_unpad_and_slice_tensor(x, attention_mask, ring_attn_group) -> tuple:
    """(sequences (1, nnz, ...), position_ids (1, nnz), labels, pad length, indices)."""
    values, indices, cu_seqlens, _ = unpad(x, attention_mask)
    total = values.shape[0]
    segment = torch.searchsorted(cu_seqlens[1:].contiguous(),
                                 torch.arange(total, dtype=cu_seqlens.dtype), right=True)
    positions = torch.arange(total) - cu_seqlens.long()[segment]
    return values.unsqueeze(0), positions.reshape(1, -1), None, 0, indices


def openrlhf_gather_and_pad_tensor(tensor, ring_attn_group, pad_len, indices, batch, seqlen
                                   ) -> torch.Tensor:
    return repad(tensor[0], indices, batch, seqlen)


def openrlhf_balanced(seqlen_list, k_partitions, equal_size) -> list[list[int]]:
    return balanced_partitions(seqlen_list, k_partitions, equal_size=equal_size)


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class StandIn:
    """A framework function's stand-in, and what else the adapter reaches: (module, attribute,
    value) to set, or (sys.modules key, None, module) to put in place, for the run."""

    function: Callable[..., Any]
    patches: tuple[tuple[Any, str | None, Any], ...] = ()

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for where, name, value in self.patches:
                stack.enter_context(_patched(where, name, value))
            yield


@contextlib.contextmanager
def _patched(where: Any, name: str | None, value: Any) -> Iterator[None]:
    if name is None:  # a module in sys.modules
        saved = sys.modules.get(where)
        sys.modules[where] = value
        try:
            yield
        finally:
            if saved is None:
                sys.modules.pop(where, None)
            else:
                sys.modules[where] = saved
        return
    saved = getattr(where, name)
    setattr(where, name, value)
    try:
        yield
    finally:
        setattr(where, name, saved)


def _module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def stand_ins() -> dict[str, StandIn]:
    """Adapter name -> its stand-in (imports the adapter modules, never a framework)."""
    from batchproof.adapters import megatron, skyrl, skyrl_megatron, verl_mcore

    no_group = (megatron, "default_group", lambda: None)
    cp_rank = (verl_mcore, "megatron_cp_rank", stand_in_cp_rank)
    helpers = (skyrl_megatron.MODEL_UTILS, None, _module(
        skyrl_megatron.MODEL_UTILS, _packed_sequence_indices=skyrl_packed_sequence_indices))
    table = {
        "skyrl.rl_batch": StandIn(skyrl_convert_0_3),
        "skyrl.rl_batch_0_4": StandIn(skyrl_convert_0_4),
        "skyrl.rl_batch_replay_0_4": StandIn(skyrl_convert_replay_0_4, ((skyrl.PREPROCESS, None, _module(
            skyrl.PREPROCESS, make_router_padding_mask=skyrl_router_padding_mask)),)),
        "skyrl.ffd_bins": StandIn(skyrl_make_seq_packer),
        "skyrl.cp_packed_indices": StandIn(skyrl_rank_and_local, (helpers,)),
        "skyrl.cp_rank_bshd": StandIn(skyrl_tokens_on_rank),
        "megatron.cp_rank_bshd": StandIn(megatron_batch_on_rank, (no_group,)),
        "verl.karmarkar_karp": StandIn(verl_partitions),
        "verl.balanced_partitions": StandIn(verl_balanced),
        "verl.micro_batches": StandIn(verl_rearrange_micro_batches),
        "verl.position_ids": StandIn(verl_position_ids),
        "verl.left_right_2_no_padding": StandIn(verl_left_right_2_no_padding),
        "verl.no_padding_2_padding": StandIn(verl_no_padding_2_padding),
        "verl.cp_packed_seqs": StandIn(verl_preprocess_packed_seqs, (no_group, cp_rank)),
        "verl.cp_thd_engine": StandIn(verl_preprocess_thd_engine, (no_group, cp_rank)),
        "verl.padding_routed_experts": StandIn(verl_build_padding_routed_experts),
        "verl.router_replay_data": StandIn(verl_set_router_replay_data, (
            (verl_mcore, "replay_rank", stand_in_cp_rank),
            (verl_mcore, "moe_layers", stand_in_moe_layers),
            ("verl.utils.megatron.router_replay_patch", None,
             _module("verl.utils.megatron.router_replay_patch", RouterReplay=RouterReplay)))),
        "trl.padding_free": StandIn(TrlLanguageModelingCollator),
        "trl.padding_free_packed": StandIn(TrlLanguageModelingCollator),
        "trl.grpo_pad": StandIn(trl_pad),
        "trl.bfd_bins": StandIn(trl_pack_dataset, (("datasets", None, _fake_datasets()),)),
        "openrlhf.unpad_and_slice_tensor": StandIn(openrlhf_unpad_and_slice_tensor),
        "openrlhf.gather_and_pad_tensor": StandIn(openrlhf_gather_and_pad_tensor),
        "openrlhf.balanced_partitions": StandIn(openrlhf_balanced),
    }
    for suffix in ("", "_v0_4"):
        table[f"skyrl.collate_sft{suffix}"] = StandIn(skyrl_collate_sft_batch)
        table[f"skyrl.default_collator{suffix}"] = StandIn(SkyrlDefaultCollator)
        table[f"skyrl.pack_sft{suffix}"] = StandIn(SkyrlPackedDataCollator)
    return table

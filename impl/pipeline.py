"""Optimized `pipeline`: one RL step's data path composed from the `impl` ops, with packed
forwards and nested dispatch (docs/pipeline.md; the oracle is `reference.pipeline`).

    controller   build_rl_batch(left) → build_rl_batch(two_segment) → broadcast advantages
                 → pad_to_multiple → balanced_partitions over whole trajectories
                 → rows in rank-major order → nest_by_mask(strict=True) → one slice per rank
    worker k     pad_to_response_width(advantages, loss_mask)   dense (b, R), canonical R
                 micro_batches(row lengths, max_tokens)
                 response_logprobs(model, ...)                  packed forward per micro-batch
                 (b, W) right-aligned → (b, R) left-aligned      W local, R canonical
                 ledger entries + loss of the micro-batch

The chain is a `Stages` record of small functions so that the bug zoo can swap one stage
(`run_step(stages, ...)`); `rl_step` runs the correct `STAGES`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from tensordict import TensorDict

from batchproof.impl import balance, nesting, rl_batch, trainer, varlen
from batchproof.reference.pipeline import (  # noqa: F401 - the shared contract, re-exported
    LEDGER_KEYS,
    REPLAY_LEDGER_KEYS,
    check_config,
    check_rollouts,
    loss_scale,
    replay_kwargs,
    step_units,
)

DISPATCH_FIELDS = ("loss_mask", "advantages")
REPLAY_RULES = {"router_padding_mask": ("attention_mask", True),
                "sample_support": ("response_attention_mask", -1)}
"""Nesting rules of the replay fields `DEFAULT_RULES` lacks (`routed_experts` it nests by the
attention already): the router mask by the attention, the support by the response attention."""


@dataclass(frozen=True)
class Step:
    """What the stages share: the inputs, the config and the model."""

    model: torch.nn.Module
    prompts: list
    responses: list
    loss_masks: list
    traj_ids: list
    scores: list
    dp_size: int
    mini_batch_size: int | None
    max_tokens: int
    sp_size: int
    pad_token_id: int
    eos_token_id: int
    routed_experts: list | None = None
    sample_support: list | None = None

    def replay(self) -> dict:
        return replay_kwargs(self.routed_experts, self.sample_support)


# --------------------------------------------------------------------------- controller stages


def layout_and_advantages(step: Step) -> tuple[TensorDict, TensorDict]:
    """The rollout batch (left layout), then nesting's two-segment layout with the step-wise
    advantages broadcast onto *its* trained columns (after the layout step, never before)."""
    left = rl_batch.build_rl_batch(step.prompts, step.responses, pad_token_id=step.pad_token_id,
                                   loss_masks=step.loss_masks, layout="left", **step.replay())
    batch = rl_batch.build_rl_batch(step.prompts, step.responses,
                                    pad_token_id=step.pad_token_id, loss_masks=step.loss_masks,
                                    layout="two_segment", **step.replay())
    batch["response_mask"] = (batch["loss_mask"] != 0).to(torch.int64)
    batch["advantages"] = trainer.broadcast_stepwise_advantages(
        torch.tensor(step.scores, dtype=torch.float32), torch.tensor(step.traj_ids),
        batch["response_mask"])
    return left, batch


def pad(step: Step, batch: TensorDict) -> TensorDict:
    multiple = trainer.required_multiple(step.dp_size, mini_batch_size=step.mini_batch_size)
    return trainer.pad_to_multiple(batch, multiple, eos_token_id=step.eos_token_id)


def assign_ranks(step: Step, padded: TensorDict) -> list[list[int]]:
    """Rows per DP rank (ascending): balanced partitions of whole trajectories by token count."""
    units = step_units(step.traj_ids, padded.batch_size[0])
    owner = torch.tensor([u for u, unit in enumerate(units) for _ in unit])
    rows = torch.tensor([r for unit in units for r in unit])
    tokens = padded["attention_mask"].sum(1)
    unit_tokens = torch.zeros(len(units), dtype=torch.int64).index_add_(0, owner, tokens[rows])
    partitions = balance.balanced_partitions(unit_tokens.tolist(), step.dp_size)
    return [sorted(r for u in part for r in units[u]) for part in partitions]


def rank_bounds(ranks: list[list[int]]) -> list[tuple[int, int]]:
    """[start, end) of each rank's rows in the rank-major order."""
    bounds, start = [], 0
    for rows in ranks:
        bounds.append((start, start + len(rows)))
        start += len(rows)
    return bounds


def dispatch(step: Step, padded: TensorDict, ranks: list[list[int]],
             bounds: list[tuple[int, int]]) -> list[TensorDict]:
    """Rank-major rows, nested once (nothing dense left), one contiguous slice per rank."""
    order = torch.tensor([r for rows in ranks for r in rows])
    batch = padded[order]
    if "is_padding" not in batch.keys():
        batch["is_padding"] = torch.zeros(len(order), dtype=torch.bool)
    batch["sample"] = order
    width = batch["input_ids"].shape[1] - batch.get_non_tensor("max_response_length")
    batch["prompts"] = batch["input_ids"][:, :width]
    batch["responses"] = batch["input_ids"][:, width:]
    nested = nesting.nest_by_mask(batch, pad_token_id=step.pad_token_id, strict=True,
                                  rules=REPLAY_RULES)
    return [nested[a:b] for a, b in bounds]


# --------------------------------------------------------------------------- worker stages


def worker_fields(chunk: TensorDict) -> TensorDict:
    """The dense response fields a rank trains on, at the canonical width R."""
    return nesting.pad_to_response_width(chunk, *DISPATCH_FIELDS)


def weight_mask(chunk: TensorDict, fields: TensorDict, response_lengths: torch.Tensor):
    """The per-token loss weight mask: the dispatched loss_mask (0 on tool output)."""
    return fields["loss_mask"]


def to_canonical(logprobs: torch.Tensor, response_lengths: torch.Tensor, width: int):
    """(b, W) right-aligned logprobs of one micro-batch (W its own longest response) →
    (b, R) left-aligned at the canonical width R:

        W = 3, R = 4   . a b   →   a b . .        column j ← column W - r + j
                       c d e       c d e .
    """
    local = logprobs.shape[1]
    columns = torch.arange(width, device=logprobs.device)
    valid = columns[None, :] < response_lengths[:, None]
    if local == 0:
        return torch.zeros(valid.shape, dtype=torch.float32, device=logprobs.device), valid
    source = (local - response_lengths[:, None] + columns[None, :]).clamp(0, local - 1)
    return torch.where(valid, logprobs.gather(1, source), 0.0), valid


def worker(step: Step, rank: int, chunk: TensorDict, scale: torch.Tensor, stages: Stages):
    """Ledger columns and loss of one rank."""
    fields = stages.worker_fields(chunk)
    prompts = chunk["prompts"].unbind()
    responses = chunk["responses"].unbind()
    response_lengths = chunk["responses"].offsets().diff()
    lengths = chunk["prompts"].offsets().diff() + response_lengths
    weights = stages.weight_mask(chunk, fields, response_lengths) * scale
    width = fields["loss_mask"].shape[1]
    columns, loss, micro = [], torch.zeros((), dtype=torch.float32), []
    for number, batch in enumerate(balance.micro_batches(lengths.tolist(), step.max_tokens)):
        index = torch.tensor(batch)
        micro.append(chunk["sample"][index].tolist())
        logprobs = varlen.response_logprobs(
            step.model, [prompts[k] for k in batch], [responses[k] for k in batch],
            max_tokens_per_batch=step.max_tokens, pad_to_multiple=step.sp_size)
        logprobs = logprobs.to(response_lengths.device)  # the ledger is the controller's
        logprob, valid = stages.to_canonical(logprobs, response_lengths[index], width)
        rows, positions = valid.nonzero(as_tuple=True)
        entry = {
            "sample": chunk["sample"][index][rows],
            "position": positions,
            "rank": torch.full_like(positions, rank),
            "micro_batch": torch.full_like(positions, number),
            "is_padding": chunk["is_padding"][index][rows],
            "logprob": logprob[valid],
            "advantage": fields["advantages"][index][valid],
            "weight": weights[index][valid],
            **stages.token_replay(chunk, index[rows], positions),
        }
        loss = loss - (entry["advantage"] * entry["logprob"] * entry["weight"]).sum()
        columns.append(entry)
    return columns, loss, micro


def token_replay(chunk: TensorDict, rows: torch.Tensor, positions: torch.Tensor) -> dict:
    """The replay fields the chunk carries, at response token `positions` of chunk `rows`: in
    each nested row, routes and router mask by the attention (the row's real prompt tokens,
    then its response: token j at prompt length + j), support by the response attention.

        nested routed_experts row k   p p p r r      token j of the response ← p_k + j
    """
    out = {}
    for key in REPLAY_LEDGER_KEYS:
        if key not in chunk.keys():
            continue
        field = chunk[key]
        start = field.offsets()[:-1].to(rows.device)[rows]
        if key != "sample_support":
            start = start + chunk["prompts"].offsets().diff().to(rows.device)[rows]
        out[key] = field.values()[start + positions]
    return out


# --------------------------------------------------------------------------- the chain


@dataclass(frozen=True)
class Stages:
    """The swappable stages of the chain (the bug zoo replaces one at a time)."""

    layout_and_advantages: Callable = layout_and_advantages
    pad: Callable = pad
    assign_ranks: Callable = assign_ranks
    rank_bounds: Callable = rank_bounds
    worker_fields: Callable = worker_fields
    weight_mask: Callable = weight_mask
    to_canonical: Callable = to_canonical
    token_replay: Callable = token_replay
    scale: Callable = lambda step, padded: loss_scale(step.loss_masks)

    def replace(self, **stages: Callable) -> Stages:
        return dataclasses.replace(self, **stages)


STAGES = Stages()


def rl_step(model, prompts, responses, loss_masks, traj_ids, scores, *, dp_size=1,
            mini_batch_size=None, max_tokens, sp_size=1, pad_token_id=0,
            eos_token_id=1, routed_experts=None, sample_support=None) -> TensorDict:
    """The loss ledger of one RL step (see `reference.pipeline.rl_step`)."""
    return trace_rl_step(model, prompts, responses, loss_masks, traj_ids, scores,
                         dp_size=dp_size, mini_batch_size=mini_batch_size,
                         max_tokens=max_tokens, sp_size=sp_size, pad_token_id=pad_token_id,
                         eos_token_id=eos_token_id, routed_experts=routed_experts,
                         sample_support=sample_support)["ledger"]


def trace_rl_step(model, prompts, responses, loss_masks, traj_ids, scores, *, dp_size=1,
                  mini_batch_size=None, max_tokens, sp_size=1, pad_token_id=0,
                  eos_token_id=1, routed_experts=None, sample_support=None) -> dict:
    """`rl_step` with every stage's output: {stage name: value} in chain order."""
    return run_step(STAGES, model, prompts, responses, loss_masks, traj_ids, scores,
                    dp_size=dp_size, mini_batch_size=mini_batch_size, max_tokens=max_tokens,
                    sp_size=sp_size, pad_token_id=pad_token_id, eos_token_id=eos_token_id,
                    routed_experts=routed_experts, sample_support=sample_support)


def run_step(stages: Stages, model, prompts, responses, loss_masks, traj_ids, scores,
             **config) -> dict:
    """The chain with the given stages; returns the trace (see `trace_rl_step`)."""
    check_rollouts(prompts, responses, loss_masks, traj_ids, scores)
    check_config(config["dp_size"], config["mini_batch_size"], config["max_tokens"],
                 config["sp_size"])
    step = Step(model, prompts, responses, loss_masks, traj_ids, scores, **config)
    trace = {}
    trace["left"], trace["two_segment"] = stages.layout_and_advantages(step)
    padded = trace["padded"] = stages.pad(step, trace["two_segment"])
    ranks = trace["ranks"] = stages.assign_ranks(step, padded)
    chunks = dispatch(step, padded, ranks, stages.rank_bounds(ranks))
    trace["dispatch"] = chunks
    scale = stages.scale(step, padded)
    columns, loss, micro = [], torch.zeros((), dtype=torch.float32), []
    for rank, chunk in enumerate(chunks):
        rank_columns, rank_loss, rank_micro = worker(step, rank, chunk, scale, stages)
        columns += rank_columns
        loss = loss + rank_loss
        micro.append(rank_micro)
    trace["micro_batches"] = micro
    trace["ledger"] = _ledger(columns, loss, len(prompts), padded)
    return trace


def _ledger(columns: list[dict], loss: torch.Tensor, real_rows: int,
            padded: TensorDict) -> TensorDict:
    replayed = tuple(key for key in REPLAY_LEDGER_KEYS if key in padded.keys())
    dtypes = [torch.int64] * 4 + [torch.bool] + [torch.float32] * 3 + \
        [padded[key].dtype for key in replayed]
    trailing = [()] * len(LEDGER_KEYS) + [tuple(padded[key].shape[2:]) for key in replayed]
    data = {key: torch.cat([c[key] for c in columns]) if columns else
            torch.zeros((0, *shape), dtype=dtype)
            for key, dtype, shape in zip(LEDGER_KEYS + replayed, dtypes, trailing)}
    data = {key: value.to(dtype) for (key, value), dtype in zip(data.items(), dtypes)}
    out = TensorDict(data, batch_size=[data["sample"].shape[0]])
    out.set_non_tensor("loss", float(loss))
    out.set_non_tensor("real_rows", real_rows)
    return out

"""Bug-zoo entries for `pipeline`: integration bugs *between* ops, each op being right alone.

Each entry runs the impl chain (`impl.pipeline.run_step`) with one stage swapped for the faulty
glue a real trainer shipped; the ops themselves are the correct impl ops.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from batchproof.impl import pipeline as _impl
from batchproof.impl import trainer
from batchproof.mutation.zoo import ZooEntry
from batchproof.reference.pipeline import loss_scale


def _chain(**stages):
    faulty = _impl.STAGES.replace(**stages)

    def rl_step(model, *args, **kwargs):
        return _impl.run_step(faulty, model, *args, **kwargs)["ledger"]

    return rl_step


def _local_width(logprobs, response_lengths, width):
    """The micro-batch's (b, W) right-aligned logprobs right-padded to the canonical R and read
    as if they were right-aligned at R: rows whose micro-batch is narrower than R shift."""
    local = logprobs.shape[1]
    return _impl.to_canonical(F.pad(logprobs, (0, width - local)), response_lengths, width)


def _alias_missing(chunk, fields, response_lengths):
    """The worker looks for its trained-token mask under another name, finds none and falls back
    to the response attention: every real response token is trained, tool output included."""
    columns = torch.arange(fields["loss_mask"].shape[1])
    return (columns[None, :] < response_lengths[:, None]).to(torch.float32)


def _padding_counted(step, batch):
    """Padding rows built with loss_mask 1 on their response token (a copy of a real row's
    masks): they weigh in the loss and in N."""
    padded = _impl.pad(step, batch)
    if "is_padding" not in padded.keys():
        return padded
    padded = padded.clone()
    width = padded.get_non_tensor("max_response_length")
    response = padded["attention_mask"][:, -width:].to(torch.float32)
    flags = padded["is_padding"][:, None]
    padded["loss_mask"] = torch.where(flags, response, padded["loss_mask"])
    return padded


def _scale_with_padding(step, padded):
    masks = padded["loss_mask"].tolist()
    return loss_scale(masks)


def _broadcast_before_layout(step):
    """Advantages broadcast onto the rollout batch's (left layout, right-aligned) columns, then
    carried into the two-segment batch, whose responses are left-aligned."""
    left, batch = _impl.layout_and_advantages(step)
    trained = (left["loss_mask"] != 0).to(torch.int64)
    batch["advantages"] = trainer.broadcast_stepwise_advantages(
        torch.tensor(step.scores, dtype=torch.float32), torch.tensor(step.traj_ids), trained)
    return left, batch


def _rows_balanced(step, padded):
    """Balancing step rows (verl's per-sample balance) instead of whole trajectories."""
    from batchproof.impl import balance

    tokens = padded["attention_mask"].sum(1).tolist()
    return balance.balanced_partitions(tokens, step.dp_size)


def _trajectories_by_response_tokens(step, padded):
    """Whole trajectories balanced by their response tokens (what the loss sees) instead of
    all their tokens (what the forward costs): units stay whole, every token still reaches
    the loss once, only the ranks' loads are another quantity."""
    from batchproof.impl import balance
    from batchproof.reference.pipeline import step_units

    units = step_units(step.traj_ids, padded.batch_size[0])
    tokens = padded["response_mask"].sum(1).tolist()
    loads = [sum(tokens[r] for r in unit) for unit in units]
    partitions = balance.balanced_partitions(loads, step.dp_size)
    return [sorted(r for u in part for r in units[u]) for part in partitions]


def _per_rank_token_mean(chunk, fields, response_lengths):
    """Each rank normalises by its own trained tokens (a per-rank token mean) instead of the
    step's N: the loss then depends on how the trajectories were split across ranks."""
    mask = fields["loss_mask"]
    trained = int((mask[~chunk["is_padding"]] != 0).sum())
    return mask * (torch.tensor(1.0, dtype=torch.float32) / max(trained, 1))


def _unit_scale(step, padded):
    return torch.tensor(1.0, dtype=torch.float32)


def _centred_advantages(step):
    """A baseline: each trajectory's score minus the mean score of the step (GRPO-like
    centring) instead of the score itself."""
    left, batch = _impl.layout_and_advantages(step)
    scores = torch.tensor(step.scores, dtype=torch.float32)
    batch["advantages"] = trainer.broadcast_stepwise_advantages(
        scores - scores.mean(), torch.tensor(step.traj_ids), batch["response_mask"])
    return left, batch


def _overlapping_bounds(ranks):
    """Rank slices [start, end] inclusive: each rank also gets the next rank's first row."""
    total = sum(len(r) for r in ranks)
    return [(a, min(b + 1, total)) for a, b in _impl.rank_bounds(ranks)]


def _routes_read_at(shift_of):
    """`token_replay` with routes and router mask read `shift_of(prompt lengths, rows)` tokens
    away from each response token's own (clamped into the nested values); support as is."""

    def token_replay(chunk, rows, positions):
        out = _impl.token_replay(chunk, rows, positions)
        if "routed_experts" in out:
            lengths = chunk["prompts"].offsets().diff()
            for key in ("routed_experts", "router_padding_mask"):
                field = chunk[key]
                index = (field.offsets()[:-1][rows] + lengths[rows] + positions
                         + shift_of(lengths, rows))
                out[key] = field.values()[index.clamp(0, field.values().shape[0] - 1)]
        return out

    return token_replay


# rllm #543: each response token's route read at the longest prompt of the chunk + j (as if
# every prompt were padded to it) instead of at its own prompt length + j
_routes_from_longest_prompt = _routes_read_at(lambda lengths, rows: (lengths.max() - lengths)[rows])
# each response token given the route of the token before it (the position whose output
# predicts it): one token off from the prompt/response boundary on
_routes_one_early = _routes_read_at(lambda lengths, rows: -1)


ENTRIES = [
    ZooEntry(
        name="pipeline_local_width",
        op="pipeline",
        function="rl_step",
        bug="a micro-batch's right-aligned logprobs read at the canonical width R instead of "
            "their own width W (verl #6009: widths disagreeing after chunking)",
        killers=("equivalence", "property:invariant_to_dp_and_budget", "pin:local_width"),
        replacement=_chain(to_canonical=_local_width),
        reference="verl PR #6009",
    ),
    ZooEntry(
        name="pipeline_mask_alias_missing",
        op="pipeline",
        function="rl_step",
        bug="the worker's loss-mask alias is missing, so it falls back to the response "
            "attention and trains tool tokens",
        killers=("equivalence", "property:values_reach_loss", "pin:tool_tokens_untrained"),
        replacement=_chain(weight_mask=_alias_missing),
        reference="verl PR #6009 (response_mask vs response attention)",
    ),
    ZooEntry(
        name="pipeline_padding_rows_in_loss",
        op="pipeline",
        function="rl_step",
        bug="padding rows carry loss_mask 1 on their response token: they count in the loss "
            "and in the token-mean denominator",
        killers=("equivalence", "property:padding_contributes_zero", "pin:padding_rows"),
        replacement=_chain(pad=_padding_counted, scale=_scale_with_padding),
        reference="verl PR #5969",
    ),
    ZooEntry(
        name="pipeline_broadcast_before_layout",
        op="pipeline",
        function="rl_step",
        bug="step-wise advantages broadcast onto the left layout's columns before the layout "
            "step, then carried into the two-segment batch",
        killers=("equivalence", "property:values_reach_loss", "pin:advantages_after_layout"),
        replacement=_chain(layout_and_advantages=_broadcast_before_layout),
        reference="SkyRL PR #1507 (advantages on the wrong columns)",
    ),
    ZooEntry(
        name="pipeline_split_group",
        op="pipeline",
        function="rl_step",
        bug="DP balancing over step rows instead of whole trajectories splits a trajectory "
            "across ranks",
        killers=("equivalence", "property:groups_intact", "pin:whole_trajectories"),
        replacement=_chain(assign_ranks=_rows_balanced),
    ),
    ZooEntry(
        name="pipeline_overlapping_rank_slices",
        op="pipeline",
        function="rl_step",
        bug="rank slices of the rank-major batch taken with an inclusive end: a row reaches the "
            "loss on two ranks",
        killers=("equivalence", "property:tokens_exactly_once", "pin:rank_slices"),
        replacement=_chain(rank_bounds=_overlapping_bounds),
    ),
    ZooEntry(
        name="pipeline_routes_offset_by_longest_prompt",
        op="pipeline",
        function="rl_step",
        bug="router replay: a response token's route read at the chunk's longest prompt + j "
            "instead of its own prompt length + j",
        killers=("equivalence", "property:routes_reach_their_tokens",
                 "pin:routes_offset_by_longest_prompt"),
        replacement=_chain(token_replay=_routes_from_longest_prompt),
        reference="rllm #543",
    ),
    ZooEntry(
        name="pipeline_routes_one_token_early",
        op="pipeline",
        function="rl_step",
        bug="router replay: each response token given the route of the token before it, one "
            "off at the prompt/response boundary",
        killers=("equivalence", "property:routes_reach_their_tokens",
                 "pin:routes_shifted_by_one"),
        replacement=_chain(token_replay=_routes_one_early),
        reference="SkyRL #1908",
    ),
    # spec choices (pipeline.md, "Spec choices"): the other plausible rule, planted in the
    # reference chain too, so only the properties can tell it from the contract
    ZooEntry(
        name="pipeline_oracle_balance_step_rows",
        op="pipeline",
        function="rl_step",
        bug="spec choice: DP balancing over step rows (verl's per-sample balance) instead of "
            "whole trajectories",
        killers=("property:groups_intact",),
        replacement=_chain(assign_ranks=_rows_balanced),
        oracle=True,
    ),
    ZooEntry(
        name="pipeline_oracle_balance_response_tokens",
        op="pipeline",
        function="rl_step",
        bug="spec choice: whole trajectories balanced by their response tokens instead of all "
            "their tokens (units intact: groups_intact cannot tell)",
        killers=("property:ranks_balance_trajectory_tokens",),
        replacement=_chain(assign_ranks=_trajectories_by_response_tokens),
        oracle=True,
    ),
    ZooEntry(
        name="pipeline_oracle_per_rank_token_mean",
        op="pipeline",
        function="rl_step",
        bug="spec choice: each rank normalises by its own trained tokens instead of the step's "
            "N (computed on the controller)",
        killers=("property:values_reach_loss", "property:invariant_to_dp_and_budget"),
        replacement=_chain(weight_mask=_per_rank_token_mean, scale=_unit_scale),
        oracle=True,
    ),
    ZooEntry(
        name="pipeline_oracle_padding_rows_in_loss",
        op="pipeline",
        function="rl_step",
        bug="spec choice: padding rows trained like a real row (loss_mask 1 on their response "
            "token, counted in N) instead of weighing nothing",
        killers=("property:padding_contributes_zero",),
        replacement=_chain(pad=_padding_counted, scale=_scale_with_padding),
        oracle=True,
    ),
    ZooEntry(
        name="pipeline_oracle_centred_advantages",
        op="pipeline",
        function="rl_step",
        bug="spec choice: advantages centred on the step's mean score instead of the "
            "trajectory's score itself",
        killers=("property:values_reach_loss",),
        replacement=_chain(layout_and_advantages=_centred_advantages),
        oracle=True,
    ),
    ZooEntry(
        name="pipeline_oracle_broadcast_before_layout",
        op="pipeline",
        function="rl_step",
        bug="spec choice: advantages broadcast onto the rollout (left) layout's columns before "
            "the layout step instead of onto the two-segment batch after it",
        killers=("property:values_reach_loss",),
        replacement=_chain(layout_and_advantages=_broadcast_before_layout),
        oracle=True,
    ),
    ZooEntry(
        name="pipeline_oracle_tool_tokens_trained",
        op="pipeline",
        function="rl_step",
        bug="spec choice: the worker's weight mask is the response attention (tool tokens "
            "trained) instead of the dispatched loss_mask",
        killers=("property:values_reach_loss",),
        replacement=_chain(weight_mask=_alias_missing),
        oracle=True,
    ),
]

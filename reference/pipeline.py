"""Reference `pipeline`: the data path of one RL step, composed from the reference ops
(docs/pipeline.md).

Every stage calls the public `reference.<op>` function; the glue between stages is plain Python
loops over lists. The model is run one sample at a time (`reference.varlen.response_logprobs`,
a dense forward per sample), and rows reach the workers as dense row selections (no nesting).

    rollouts (step rows)   build_rl_batch(layout="left")             the rollout batch
         │                 build_rl_batch(layout="two_segment")      the layout step (nesting's)
         │                 broadcast_stepwise_advantages             onto the two-segment columns
         │                 pad_to_multiple(required_multiple(dp, mini_batch_size))
         ▼                 balanced_partitions(trajectory token sums, dp)   whole trajectories
    rank k rows            micro_batches(row lengths, max_tokens)
         │                 response_logprobs(model, prompts, responses)     per micro-batch
         ▼                 right-aligned (b, W) logprobs → the canonical left-aligned (b, R)
    loss ledger            one entry per response token: logprob, advantage, weight
                           loss = -Σ advantage · logprob · weight
                           (router replay: the route, router mask and support the token had)

The output is the *ledger* of what reached the loss, in the order the workers saw it
(rank, micro-batch, row, response position); see `LEDGER_KEYS`.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from batchproof.reference import balance, rl_batch, trainer, varlen

LEDGER_KEYS = ("sample", "position", "rank", "micro_batch", "is_padding", "logprob",
               "advantage", "weight")
"""sample: the step row (input index; padding rows continue after the last real row),
position: the response token's index inside its response, rank / micro_batch: where it reached
the loss, logprob / advantage / weight: the three factors of its loss term (float32)."""
REPLAY_LEDGER_KEYS = ("routed_experts", "router_padding_mask", "sample_support")
"""Router replay (docs/pipeline.md), present only when the step is given routes / support:
routed_experts (N, layers, topk) the route the token was given (its captured route, else the
dummy route), router_padding_mask (N,) bool True where it got the dummy route, sample_support
(N, top_k) its support row; dtypes as given."""


# --------------------------------------------------------------------------- shared checks


def check_rollouts(prompts, responses, loss_masks, traj_ids, scores) -> None:
    """Argument checks shared with `impl.pipeline` (metadata only, no per-token work)."""
    for name, value in (("prompts", prompts), ("responses", responses),
                        ("loss_masks", loss_masks), ("traj_ids", traj_ids), ("scores", scores)):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{name} must be a list, got {type(value).__name__}")
    count = len(prompts)
    if count == 0:
        raise ValueError("prompts: a step needs at least one row")
    for name, value in (("responses", responses), ("loss_masks", loss_masks),
                        ("traj_ids", traj_ids)):
        if len(value) != count:
            raise ValueError(f"{name} has {len(value)} rows, prompts has {count}")
    for i, trajectory in enumerate(traj_ids):
        if not isinstance(trajectory, int) or not 0 <= trajectory < len(scores):
            raise ValueError(f"traj_ids[{i}]={trajectory!r} is not an index into scores")
    missing = sorted(set(range(len(scores))) - set(traj_ids))
    if missing:
        raise ValueError(f"scores: trajectories {missing} have no row")


def check_config(dp_size, mini_batch_size, max_tokens, sp_size) -> None:
    for name, value in (("dp_size", dp_size), ("max_tokens", max_tokens), ("sp_size", sp_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if mini_batch_size is not None and (not isinstance(mini_batch_size, int) or
                                        mini_batch_size < 1):
        raise ValueError(f"mini_batch_size must be a positive int or None, got "
                         f"{mini_batch_size!r}")


def loss_scale(loss_masks) -> torch.Tensor:
    """The token-mean scale: float32 1 / max(number of trained tokens of the real rows, 1).

    A global constant of the step, so the loss does not depend on how rows are split."""
    trained = sum(1 for mask in loss_masks for m in mask if m != 0)
    return torch.tensor(1.0, dtype=torch.float32) / max(trained, 1)


def step_units(traj_ids, padded_rows: int) -> list[list[int]]:
    """The balancing units: the rows of each trajectory (in trajectory order), then each
    padding row alone. A unit is never split across DP ranks."""
    units = [[] for _ in range(max(traj_ids) + 1)]
    for row, trajectory in enumerate(traj_ids):
        units[trajectory].append(row)
    return units + [[row] for row in range(len(traj_ids), padded_rows)]


# --------------------------------------------------------------------------- the chain


def rl_step(model, prompts, responses, loss_masks, traj_ids, scores, *, dp_size=1,
            mini_batch_size=None, max_tokens, sp_size=1, pad_token_id=0,
            eos_token_id=1, routed_experts=None, sample_support=None) -> TensorDict:
    """The loss ledger of one RL step (see the module docstring and `LEDGER_KEYS`).

    prompts / responses / loss_masks: one row per step of a trajectory (loss_masks: 0/1 per
    response token, 0 on tool output). traj_ids: the trajectory of each row. scores: one outcome
    score per trajectory (the advantage of all its trained tokens). max_tokens: the micro-batch
    token budget; sp_size: packed rows are padded to a multiple of it. routed_experts /
    sample_support: router replay, per row as `build_rl_batch` takes them; the ledger then
    holds `REPLAY_LEDGER_KEYS`.
    """
    return trace_rl_step(model, prompts, responses, loss_masks, traj_ids, scores,
                         dp_size=dp_size, mini_batch_size=mini_batch_size,
                         max_tokens=max_tokens, sp_size=sp_size, pad_token_id=pad_token_id,
                         eos_token_id=eos_token_id, routed_experts=routed_experts,
                         sample_support=sample_support)["ledger"]


def trace_rl_step(model, prompts, responses, loss_masks, traj_ids, scores, *, dp_size=1,
                  mini_batch_size=None, max_tokens, sp_size=1, pad_token_id=0,
                  eos_token_id=1, routed_experts=None, sample_support=None) -> dict:
    """`rl_step` with every stage's output: {stage name: value} in chain order."""
    check_rollouts(prompts, responses, loss_masks, traj_ids, scores)
    check_config(dp_size, mini_batch_size, max_tokens, sp_size)
    replay = replay_kwargs(routed_experts, sample_support)
    trace = {}
    trace["left"] = rl_batch.build_rl_batch(prompts, responses, pad_token_id=pad_token_id,
                                            loss_masks=loss_masks, layout="left", **replay)
    batch = rl_batch.build_rl_batch(prompts, responses, pad_token_id=pad_token_id,
                                    loss_masks=loss_masks, layout="two_segment", **replay)
    batch["response_mask"] = _trained_mask(batch["loss_mask"])
    batch["advantages"] = trainer.broadcast_stepwise_advantages(
        torch.tensor(scores, dtype=torch.float32), torch.tensor(traj_ids),
        batch["response_mask"])
    trace["two_segment"] = batch
    multiple = trainer.required_multiple(dp_size, mini_batch_size=mini_batch_size)
    padded = trainer.pad_to_multiple(batch, multiple, eos_token_id=eos_token_id)
    trace["padded"] = padded
    units = step_units(traj_ids, padded.batch_size[0])
    rows = _rows(padded)
    unit_tokens = [sum(len(rows[r][0]) + len(rows[r][1]) for r in unit) for unit in units]
    partitions = balance.balanced_partitions(unit_tokens, dp_size)
    ranks = [sorted(r for u in part for r in units[u]) for part in partitions]
    trace["ranks"] = ranks
    scale = loss_scale(loss_masks)
    ledger, loss, micro = _worker_steps(model, padded, rows, ranks, scale, max_tokens, sp_size)
    trace["micro_batches"] = micro
    trace["ledger"] = _ledger(ledger, loss, len(prompts), padded)
    return trace


def replay_kwargs(routed_experts, sample_support) -> dict:
    """The router-replay arguments given (None ones left out), as `build_rl_batch` takes them."""
    given = {"routed_experts": routed_experts, "sample_support": sample_support}
    return {key: value for key, value in given.items() if value is not None}


def _trained_mask(loss_mask: torch.Tensor) -> torch.Tensor:
    """verl's response_mask: 1 on trained response tokens only (0 on tool output)."""
    rows = [[1 if v != 0 else 0 for v in row] for row in loss_mask.tolist()]
    return torch.tensor(rows, dtype=torch.int64).reshape(loss_mask.shape)


def _rows(padded: TensorDict) -> list[tuple[list[int], list[int]]]:
    """(prompt tokens, response tokens) of each row of a two-segment batch, by its attention."""
    width = padded.get_non_tensor("max_response_length")
    ids, attention = padded["input_ids"].tolist(), padded["attention_mask"].tolist()
    out = []
    for row_ids, row_mask in zip(ids, attention):
        split = len(row_ids) - width
        prompt = [t for t, m in zip(row_ids[:split], row_mask[:split]) if m]
        response = [t for t, m in zip(row_ids[split:], row_mask[split:]) if m]
        out.append((prompt, response))
    return out


def _worker_steps(model, padded, rows, ranks, scale, max_tokens, sp_size):
    """Each rank's micro-batches, forwards and loss terms (dense rows, one sample at a time)."""
    advantages = padded["advantages"].tolist()
    loss_mask = padded["loss_mask"].tolist()
    is_padding = padded["is_padding"].tolist() if "is_padding" in padded.keys() else \
        [False] * len(rows)
    replay_of_token = _replay_of_token(padded)
    entries, loss, micro = [], 0.0, []
    for rank, rank_rows in enumerate(ranks):
        lengths = [len(rows[r][0]) + len(rows[r][1]) for r in rank_rows]
        batches = balance.micro_batches(lengths, max_tokens)
        micro.append([[rank_rows[k] for k in batch] for batch in batches])
        for number, batch in enumerate(batches):
            samples = [rank_rows[k] for k in batch]
            logprobs = varlen.response_logprobs(
                model, [rows[s][0] for s in samples], [rows[s][1] for s in samples],
                max_tokens_per_batch=max_tokens, pad_to_multiple=sp_size).tolist()
            for local, sample in enumerate(samples):
                response_length = len(rows[sample][1])
                width = len(logprobs[local])
                for j in range(response_length):
                    logprob = logprobs[local][width - response_length + j]
                    advantage = advantages[sample][j]
                    weight = loss_mask[sample][j] * float(scale)
                    entries.append((sample, j, rank, number, is_padding[sample], logprob,
                                    advantage, weight,
                                    *replay_of_token(sample, j)))
                    loss -= advantage * logprob * weight
    return entries, loss, micro


def _replay_of_token(padded: TensorDict):
    """(row, response position j) -> the replay values of that token, one per replay field the
    batch carries (in `REPLAY_LEDGER_KEYS` order): its route and router mask at the column
    P + j of the two-segment row (P the prompt width), its support row j."""
    start = padded["input_ids"].shape[1] - padded.get_non_tensor("max_response_length")
    keys = [key for key in REPLAY_LEDGER_KEYS if key in padded.keys()]
    values = {key: padded[key].tolist() for key in keys}

    def of_token(row: int, j: int) -> tuple:
        out = []
        for key in keys:
            column = j if key == "sample_support" else start + j
            out.append(values[key][row][column])
        return tuple(out)

    return of_token


def _ledger(entries, loss: float, real_rows: int, padded: TensorDict) -> TensorDict:
    replayed = [key for key in REPLAY_LEDGER_KEYS if key in padded.keys()]
    keys = LEDGER_KEYS + tuple(replayed)
    columns = list(zip(*entries)) if entries else [()] * len(keys)
    dtypes = [torch.int64] * 4 + [torch.bool] + [torch.float32] * 3 + \
        [padded[key].dtype for key in replayed]
    trailing = [()] * len(LEDGER_KEYS) + [tuple(padded[key].shape[2:]) for key in replayed]
    out = TensorDict({key: torch.tensor(list(col), dtype=dtype).reshape(len(entries), *shape)
                      for key, col, dtype, shape in zip(keys, columns, dtypes, trailing)},
                     batch_size=[len(entries)])
    out.set_non_tensor("loss", float(loss))
    out.set_non_tensor("real_rows", real_rows)
    return out

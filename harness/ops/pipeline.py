"""Registry record for `pipeline.rl_step` (docs/pipeline.md): the whole data path of one RL step,
verified as one property.

The reference chain composes the reference ops with dense per-sample forwards; the impl chain
composes the impl ops with packed forwards and nested dispatch. Both return the loss *ledger*:
one entry per response token that reached the loss (see `reference.pipeline.LEDGER_KEYS`).

Comparison: every ledger column bit for bit except `logprob` (per token within the float32
logprob tolerance) and the total loss (within the tolerance that tolerance implies, plus float32
summation order; see `loss_tolerance`).
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st
from tensordict import TensorDict

from batchproof import blocks as hs
from batchproof import replay
from batchproof.compare import LOGPROB_TOLERANCE, Mismatch, assert_identical, assert_logprobs_close
from batchproof.models import VOCAB, ModelCase, ModelSpec
from batchproof.reference.pipeline import LEDGER_KEYS, REPLAY_LEDGER_KEYS, loss_scale
from batchproof.registry import Case, OpInfo, Paths, Pin, Property, register

MODEL = ModelSpec("llama", "eager")  # cached tiny float32 model; eager is the fastest on CPU
EXACT_KEYS = tuple(k for k in LEDGER_KEYS if k != "logprob")
SCORES = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5]
SUMMATION_RTOL = 1e-5  # float32 sums of <= 200 terms in another order: n * 2**-24 < 1.2e-5

# --------------------------------------------------------------------------- strategies


@st.composite
def trajectory(draw, first_prompt: list[int], *, max_turns: int = 3) -> list[tuple]:
    """The step rows of one multi-turn trajectory: (prompt, response, loss_mask) per turn.

    The prompt of turn k+1 is the prompt of turn k + its response + an observation (tool
    output), so prompts grow while responses shrink (anti-correlated); later responses may be
    empty; loss masks have interior zeros (tool tokens inside a response)."""
    tokens = hs.token_ids(vocab=VOCAB)
    turns = draw(st.integers(1, max_turns))
    prompt, rows = list(first_prompt), []
    longest = draw(st.integers(1, 5))
    for turn in range(turns):
        length = draw(st.integers(0 if turn else 1, longest))
        longest = length
        response = draw(st.lists(tokens, min_size=length, max_size=length))
        mask = draw(hs.mask_rows([length]))[0]
        rows.append((prompt, response, mask))
        observation = draw(st.lists(tokens, max_size=2))
        prompt = prompt + response + observation
    return rows


@st.composite
def rollouts(draw, *, max_prompts: int = 2, max_per_prompt: int = 3):
    """Several trajectories per prompt, rows interleaved as an agent loop returns them."""
    rows, scores = [], []
    for _ in range(draw(st.integers(1, max_prompts))):
        first = draw(st.lists(hs.token_ids(vocab=VOCAB), min_size=1, max_size=3))
        for _ in range(draw(st.integers(1, max_per_prompt))):
            rows += [(len(scores), *turn) for turn in draw(trajectory(first))]
            scores.append(draw(st.one_of(st.sampled_from(SCORES),
                                         st.floats(-4, 4, width=32))))
    rows = draw(st.permutations(rows))
    traj_ids, prompts, responses, masks = (list(col) for col in zip(*rows))
    return prompts, responses, masks, traj_ids, scores


@st.composite
def step_cases(draw) -> ModelCase:
    """Rollouts plus a parallel config: dp size (<= trajectories), mini-batch size, a micro-batch
    token budget from the longest row to twice that, sequence-parallel size."""
    prompts, responses, masks, traj_ids, scores = draw(rollouts())
    longest = max(2, max(len(p) + len(r) for p, r in zip(prompts, responses)))
    kwargs = dict(
        dp_size=draw(st.integers(1, min(3, len(scores)))),
        mini_batch_size=draw(st.one_of(st.none(), st.integers(2, 4))),
        max_tokens=draw(st.integers(longest, 2 * longest)),
        sp_size=draw(st.integers(1, 3)),
        pad_token_id=0,
        eos_token_id=1,
    )
    # router replay, drawn last (each in a third of the examples; shrinks to not passing it)
    if draw(st.integers(0, 2)) == 2:
        kwargs["routed_experts"] = draw(replay.route_entries(
            [len(p) + len(r) for p, r in zip(prompts, responses)]))
    if draw(st.integers(0, 2)) == 2:
        kwargs["sample_support"] = draw(replay.support_entries([len(r) for r in responses]))
    return step_case(prompts, responses, masks, traj_ids, scores, **kwargs)


def step_case(prompts, responses, masks, traj_ids, scores, *, label: str = "", **kwargs):
    config = dict(dp_size=1, mini_batch_size=None, sp_size=1, pad_token_id=0, eos_token_id=1)
    config.update(kwargs)
    return ModelCase((prompts, responses, masks, traj_ids, scores), config, label, MODEL)


# --------------------------------------------------------------------------- comparator


def loss_tolerance(ledger: TensorDict, dtype: torch.dtype = torch.float32) -> float:
    """|Δ loss| allowed between two ledgers of the same tokens: each logprob may move by the
    model dtype's max logprob tolerance (float32 1e-5, bfloat16 2e-2: the varlen spec), and
    float32 sums in another order by SUMMATION_RTOL."""
    a, w, lp = (ledger[k].double() for k in ("advantage", "weight", "logprob"))
    per_logprob = LOGPROB_TOLERANCE[dtype][0]
    return per_logprob * float((a * w).abs().sum()) \
        + SUMMATION_RTOL * float((a * w * lp).abs().sum()) + 1e-12


def model_dtype(case: Case | None) -> torch.dtype:
    """The dtype of the case's model (float32 for a case without one)."""
    return case.model.torch_dtype if isinstance(case, ModelCase) else torch.float32


def assert_same_step(expected, actual, **kwargs) -> None:
    """Ledgers equal: exact columns bit for bit, logprobs per token within the tolerance of
    the model's dtype, total loss within `loss_tolerance`."""
    dtype = model_dtype(kwargs.get("case"))
    assert_identical(_exact(expected), _exact(actual), compared=kwargs.get("compared", ""))
    assert_logprobs_close(expected["logprob"], actual["logprob"],
                          torch.ones_like(expected["logprob"], dtype=torch.bool), dtype)
    _assert_loss_close(expected, actual, dtype)


def _exact(ledger: TensorDict) -> TensorDict:
    """The columns compared bit for bit: every key but `logprob`, the replay keys present."""
    keys = EXACT_KEYS + tuple(k for k in REPLAY_LEDGER_KEYS if k in ledger.keys())
    out = TensorDict({k: ledger[k] for k in keys}, batch_size=ledger.batch_size)
    out.set_non_tensor("real_rows", ledger.get_non_tensor("real_rows"))
    return out


def _assert_loss_close(expected: TensorDict, actual: TensorDict,
                       dtype: torch.dtype = torch.float32) -> None:
    e, a = expected.get_non_tensor("loss"), actual.get_non_tensor("loss")
    tolerance = loss_tolerance(expected, dtype)
    if not abs(e - a) <= tolerance:
        raise Mismatch(f"total loss differs: expected {e!r}, actual {a!r} "
                       f"(|Δ| = {abs(e - a):.3g} > tolerance {tolerance:.3g})")


# --------------------------------------------------------------------------- properties


def _assert(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _real(ledger: TensorDict) -> TensorDict:
    return ledger[~ledger["is_padding"]]


def prop_tokens_exactly_once(case: Case, out: TensorDict) -> None:
    """Every real response token (row i, position j < r_i) reaches the loss exactly once;
    padding entries belong to the padding rows pad_to_multiple must add, nothing else."""
    prompts, responses = case.args[0], case.args[1]
    expected = sorted((i, j) for i, r in enumerate(responses) for j in range(len(r)))
    real = _real(out)
    seen = sorted(zip(real["sample"].tolist(), real["position"].tolist()))
    _assert(seen == expected, f"real tokens reaching the loss: {_diff(expected, seen)}")
    padding = out[out["is_padding"]]
    pairs = list(zip(padding["sample"].tolist(), padding["position"].tolist()))
    _assert(len(set(pairs)) == len(pairs), f"a padding token reached the loss twice: {pairs}")
    _assert(all(s >= len(prompts) for s, _ in pairs), f"padding entries on real rows: {pairs}")


def _diff(expected: list, seen: list) -> str:
    missing = sorted(set(expected) - set(seen))
    extra = sorted({p for p in seen if seen.count(p) > expected.count(p)})
    return f"missing {missing[:8]}, duplicated or unexpected {extra[:8]}"


def prop_values_reach_loss(case: Case, out: TensorDict) -> None:
    """Each real token carries its trajectory's score as advantage and loss_mask / N as weight
    (N = trained tokens of the step) where it is trained, +0.0 for both on tool tokens; logprobs
    are finite and <= 0; the total loss is -Σ advantage · logprob · weight of the ledger."""
    _, _, masks, traj_ids, scores = case.args
    scale = float(loss_scale(masks))
    real = _real(out)
    for s, j, a, w, lp in zip(*(real[k].tolist() for k in
                                ("sample", "position", "advantage", "weight", "logprob"))):
        trained = masks[s][j] != 0
        want_a = float(torch.tensor(scores[traj_ids[s]], dtype=torch.float32)) if trained else 0.0
        want_w = masks[s][j] * scale
        _assert(_bits(a) == _bits(want_a), f"row {s} position {j}: advantage {a!r}, expected "
                f"{want_a!r} (trajectory {traj_ids[s]}, trained={trained})")
        _assert(_bits(w) == _bits(want_w), f"row {s} position {j}: weight {w!r}, expected "
                f"{want_w!r}")
        _assert(math.isfinite(lp) and lp <= 0, f"row {s} position {j}: logprob {lp!r}")
    total = -float((out["advantage"].double() * out["logprob"].double()
                    * out["weight"].double()).sum())
    loss = out.get_non_tensor("loss")
    _assert(abs(total - loss) <= loss_tolerance(out),
            f"loss {loss!r} is not the ledger's sum {total!r}")


def _bits(value: float) -> int:
    return int(torch.tensor(value, dtype=torch.float32).view(torch.int32))


def prop_padding_contributes_zero(case: Case, out: TensorDict) -> None:
    """Padding rows reach the loss with weight +0.0 and advantage +0.0."""
    padding = out[out["is_padding"]]
    for key in ("weight", "advantage"):
        bad = [v for v in padding[key].tolist() if _bits(v) != 0]
        _assert(not bad, f"padding rows carry {key} {bad[:5]}")


def prop_groups_intact(case: Case, out: TensorDict) -> None:
    """All tokens of one trajectory reach the loss on one DP rank (balancing moves whole
    trajectories)."""
    traj_ids = case.args[3]
    real = _real(out)
    ranks: dict[int, set[int]] = {}
    for sample, rank in zip(real["sample"].tolist(), real["rank"].tolist()):
        ranks.setdefault(traj_ids[sample], set()).add(rank)
    split = {t: sorted(r) for t, r in ranks.items() if len(r) > 1}
    _assert(not split, f"trajectories split across ranks: {split}")


PADDING_ROW_TOKENS = 2  # a padding row's real tokens: pad_to_multiple's default min_length


def prop_ranks_balance_trajectory_tokens(case: Case, out: TensorDict) -> None:
    """The DP ranks are the contract's balance, recomputed here from the rollouts alone: the
    balancing units are whole trajectories (every prompt and response token of their rows)
    and each padding row alone (its `PADDING_ROW_TOKENS` tokens), balanced by
    `balance.balanced_partitions(unit token sums, dp_size)`; every entry of the ledger sits
    on its unit's rank. (Whole units alone — `groups_intact` — admit any other load.)"""
    from batchproof.reference import balance, trainer

    prompts, responses, _, traj_ids = case.args[:4]
    dp = case.kwargs.get("dp_size", 1)
    multiple = trainer.required_multiple(dp, mini_batch_size=case.kwargs.get("mini_batch_size"))
    rows = len(prompts)
    padding = -rows % multiple
    loads = [0] * (max(traj_ids) + 1)
    for prompt, response, trajectory in zip(prompts, responses, traj_ids):
        loads[trajectory] += len(prompt) + len(response)
    loads += [PADDING_ROW_TOKENS] * padding
    rank_of = {unit: rank for rank, units in enumerate(balance.balanced_partitions(loads, dp))
               for unit in units}
    for sample, rank in zip(out["sample"].tolist(), out["rank"].tolist()):
        unit = traj_ids[sample] if sample < rows else len(loads) - padding + sample - rows
        _assert(rank == rank_of[unit], f"row {sample} (unit {unit}, load {loads[unit]}) "
                f"trained on rank {rank}; balancing the unit token sums {loads} over {dp} "
                f"ranks puts it on rank {rank_of[unit]}")


def prop_routes_reach_their_tokens(case: Case, out: TensorDict) -> None:
    """Router replay, recomputed from the rollouts alone: the ledger entry of response token j
    of row s holds the route captured for the row's token t = |prompt_s| + j (its dtype as
    given, router mask False) when t < c_s, else the dummy route 0 .. topk-1 on every layer
    with the mask True; padding rows' tokens hold the dummy route, masked; the support of
    row s's token j is its support row j (padding rows: all -1). Without routes / support the
    ledger has no such key."""
    for key, given in (("routed_experts", ("routed_experts", "router_padding_mask")),
                       ("sample_support", ("sample_support",))):
        if case.kwargs.get(key) is None:
            absent = [k for k in given if k in out.keys()]
            _assert(not absent, f"no {key} given, yet the ledger holds {absent}")
    prompts = case.args[0]
    if case.kwargs.get("routed_experts") is not None:
        _assert_ledger_routes(prompts, replay.entries_of(case.kwargs["routed_experts"]), out)
    if case.kwargs.get("sample_support") is not None:
        _assert_ledger_support(replay.entries_of(case.kwargs["sample_support"]), out)


def _assert_ledger_routes(prompts, given, out: TensorDict) -> None:
    entries = [replay.as_tensor(e) for e in given]
    routes, masked = out["routed_experts"].cpu(), out["router_padding_mask"].cpu()
    layers, topk = entries[0].shape[1:]
    _assert(routes.dtype == entries[0].dtype and tuple(routes.shape[1:]) == (layers, topk),
            f"ledger routed_experts is {routes.dtype} {tuple(routes.shape)}, the routes given "
            f"are {entries[0].dtype} [c, {layers}, {topk}]")
    dummy = replay.dummy_slot(layers, topk, routes.dtype)
    for n, (s, j) in enumerate(zip(out["sample"].tolist(), out["position"].tolist())):
        t = len(prompts[s]) + j if s < len(prompts) else None
        captured = t is not None and t < entries[s].shape[0]
        want = entries[s][t] if captured else dummy
        where = (f"row {s} response token {j} (token {t}, {entries[s].shape[0]} captured)"
                 if t is not None else f"padding row {s} token {j}")
        _assert(torch.equal(routes[n], want), f"{where}: the ledger's route "
                f"{routes[n].tolist()}, expected {want.tolist()}")
        _assert(bool(masked[n]) != captured, f"{where}: router_padding_mask "
                f"{bool(masked[n])}, expected {not captured}")


def _assert_ledger_support(given, out: TensorDict) -> None:
    entries = [replay.as_tensor(e) for e in given]
    support = out["sample_support"].cpu()
    _assert(support.dtype == entries[0].dtype, f"ledger sample_support is {support.dtype}, "
            f"the support given is {entries[0].dtype}")
    for n, (s, j) in enumerate(zip(out["sample"].tolist(), out["position"].tolist())):
        want = entries[s][j] if s < len(entries) else torch.full_like(support[n], -1)
        _assert(torch.equal(support[n], want), f"row {s} response token {j}: the ledger's "
                f"support {support[n].tolist()}, expected {want.tolist()}")


def prop_invariant_to_dp_and_budget(case: Case, out: TensorDict, candidate) -> None:
    """Rerun with dp_size=1, no mini-batch padding and one micro-batch: every real token has the
    same advantage and weight (bit for bit) and logprob (the model dtype's tolerance), the total
    loss agrees within `loss_tolerance`."""
    prompts, responses = case.args[0], case.args[1]
    total = sum(len(p) + len(r) for p, r in zip(prompts, responses))
    model = case.model if isinstance(case, ModelCase) else MODEL
    alone = candidate(*((model.build(),) + tuple(case.args)),
                      **{**case.kwargs, "dp_size": 1, "mini_batch_size": None,
                         "max_tokens": max(total, 2)})
    a, b = _by_token(_real(alone)), _by_token(_real(out))
    assert_identical(_exact(a).exclude("rank", "micro_batch"),
                     _exact(b).exclude("rank", "micro_batch"))
    assert_logprobs_close(a["logprob"], b["logprob"], torch.ones_like(a["logprob"],
                                                                      dtype=torch.bool),
                          model_dtype(case))
    _assert_loss_close(alone, out, model_dtype(case))


def _by_token(ledger: TensorDict) -> TensorDict:
    key = ledger["sample"] * 10_000 + ledger["position"]
    return ledger[torch.argsort(key)]


# --------------------------------------------------------------------------- pins and show

# Two trajectories of two and three turns, rows interleaved, a tool token in three responses.
BASE = (
    [[5, 6], [7], [5, 6, 9, 9, 3], [7, 8, 4, 2, 0], [7, 8, 4, 2, 0, 11, 12]],
    [[9, 9], [8, 4, 2, 0], [10], [11, 12], []],
    [[1, 1], [1, 0, 1, 1], [1], [1, 0], []],
    [0, 1, 0, 1, 1],
    [1.0, -0.5],
)
EXAMPLE = step_case(*BASE, dp_size=2, mini_batch_size=3, max_tokens=9, sp_size=2,
                    label="2 trajectories, dp 2, budget 9")


def _pin_routes(prompts, responses, *, layers: int = 2, topk: int = 2,
                dtype: torch.dtype = torch.int16) -> list[torch.Tensor]:
    """Routes of every token but the last sampled one: token t's route on layer l is the
    distinct experts (t + l + k) % 16, k < topk, so a route read one token off differs."""
    out = []
    for prompt, response in zip(prompts, responses):
        captured = max(len(prompt) + len(response) - 1, 0)
        out.append(torch.tensor([[[(t + layer + k) % 16 for k in range(topk)]
                                  for layer in range(layers)] for t in range(captured)],
                                dtype=dtype).reshape(captured, layers, topk))
    return out


ROUTES = _pin_routes(BASE[0], BASE[1])

PINS = [
    Pin("local_width", step_case(*BASE, dp_size=1, max_tokens=7),
        "micro-batches whose longest response is shorter than R: their right-aligned logprobs "
        "must be read at their own width W, then placed at the canonical width R"),
    Pin("tool_tokens_untrained", step_case(*BASE, dp_size=1, max_tokens=20),
        "the loss mask must reach the worker: the response attention (every real response "
        "token) would train the tool tokens"),
    Pin("padding_rows", step_case(*BASE, dp_size=2, mini_batch_size=3, max_tokens=20),
        "5 rows padded to 6: the padding row must weigh nothing, and not count in N"),
    Pin("advantages_after_layout", step_case(*BASE, dp_size=1, max_tokens=20),
        "the broadcast onto the left layout's right-aligned columns misplaces every advantage "
        "of a row shorter than R once the batch is in the two-segment layout"),
    Pin("whole_trajectories", step_case(*BASE, dp_size=2, max_tokens=20),
        "balancing rows instead of trajectories splits trajectory 1 across ranks"),
    Pin("rank_slices", step_case(*BASE, dp_size=2, max_tokens=20),
        "rank slices of the rank-major dispatch batch must not overlap"),
    Pin("routes_offset_by_longest_prompt",
        step_case(*BASE, dp_size=2, mini_batch_size=3, max_tokens=9, routed_experts=ROUTES),
        "rllm #543: a response token's route read at the longest prompt's length + j instead "
        "of its own prompt's: every row with a shorter prompt trains on another token's route"),
    Pin("routes_shifted_by_one",
        step_case(*BASE, dp_size=1, max_tokens=20, routed_experts=ROUTES,
                  sample_support=[torch.arange(2 * len(r), dtype=torch.int32).reshape(-1, 2)
                                  for r in BASE[1]]),
        "SkyRL #1908: the route of the token before (the position that predicts it) given to "
        "each response token, one off at the prompt/response boundary"),
]


def show_step(case: Case, output: TensorDict) -> list[str]:
    """Each stage of the impl chain on `case`, one block per stage."""
    from batchproof.impl.pipeline import trace_rl_step

    trace = case.call(trace_rl_step)
    lines = [f"rollouts: {len(case.args[0])} step rows, trajectories {case.args[3]}, "
             f"scores {case.args[4]}"]
    lines += ["build_rl_batch(layout='left')   (. pad, p prompt, r trained, t tool token)"]
    lines += _rows_picture(case, trace["left"])
    lines += ["two-segment layout + advantages (a: advantage on a trained token)"]
    lines += _rows_picture(case, trace["two_segment"])
    padded = trace["padded"]
    flags = padded["is_padding"].tolist() if "is_padding" in padded.keys() else []
    lines += [f"pad_to_multiple: {padded.batch_size[0]} rows, padding rows "
              f"{[i for i, f in enumerate(flags) if f]}"]
    lines += [f"balanced_partitions (whole trajectories): rank rows {trace['ranks']}"]
    for rank, (chunk, micro) in enumerate(zip(trace["dispatch"], trace["micro_batches"])):
        lines += [f"rank {rank}: nested rows {chunk['sample'].tolist()}, input_ids row lengths "
                  f"{chunk['input_ids'].offsets().diff().tolist()}, micro-batches {micro}"]
    ledger = trace["ledger"]
    loss, reference_loss = ledger.get_non_tensor("loss"), output.get_non_tensor("loss")
    lines += [f"ledger: {ledger.batch_size[0]} tokens reached the loss; "
              f"loss = {loss:.6f} (reference chain {reference_loss:.6f})"]
    for s, j, r, m, lp, a, w in zip(*(ledger[k].tolist() for k in (
            "sample", "position", "rank", "micro_batch", "logprob", "advantage", "weight"))):
        lines.append(f"  row {s:2d} pos {j}  rank {r} mb {m}  logprob {lp:8.4f}  adv {a:5.2f}  "
                     f"weight {w:.4f}")
    return lines


def _rows_picture(case: Case, td: TensorDict) -> list[str]:
    """One line per row of a `build_rl_batch` output, drawn from the rows' lengths."""
    prompts, responses, masks = case.args[0], case.args[1], case.args[2]
    width = td.get_non_tensor("max_response_length")
    left = td.get_non_tensor("layout") == "left"
    big_p = max(len(p) for p in prompts)
    total = td["input_ids"].shape[1]
    advantages = td["advantages"].tolist() if "advantages" in td.keys() else None
    lines = []
    for i, (prompt, response, mask) in enumerate(zip(prompts, responses, masks)):
        marks = ["r" if m else "t" for m in mask]
        if advantages is not None:
            marks = ["a" if c == "r" and advantages[i][j] != 0 else c
                     for j, c in enumerate(marks)]
        if left:
            row = "." * (total - len(prompt) - len(response)) + "p" * len(prompt) + "".join(marks)
            lines.append(f"  row {i}  {row}")
        else:
            row = "." * (big_p - len(prompt)) + "p" * len(prompt) + "|" + "".join(marks)
            lines.append(f"  row {i}  {row}{'.' * (width - len(response))}")
    return lines


# the paths of the ops the step goes through: build_rl_batch from lists, nest_by_mask's runs,
# micro_batches' first fit, the packed micro-batches of response_logprobs
_CPU_PATHS = ("cpu:rl_batch._write_lists", "cpu:rl_batch._window_rows", "cpu:nesting._runs_of")
PATHS = Paths(
    kernel=(*_CPU_PATHS, "numba:sft._first_fit", "numba:varlen.write_samples"),
    cpu=(*_CPU_PATHS, "cpu:varlen._copy_rows"),
    triton=("triton:rl_batch._sequence_rows", "triton:rl_batch._response_rows",
            "triton:nesting._copy_runs", "triton:varlen._samples"),
    # on CUDA the controller stays on the host (its CPU paths, not claimed here); the workers
    # pack their micro-batches on the model's device
    cuda=("triton:varlen._samples",),
)

PIPELINE = register(OpInfo(
    op="pipeline",
    function="rl_step",
    valid=step_cases(),
    compare=assert_same_step,
    properties=[
        Property.of(prop_tokens_exactly_once),
        Property.of(prop_values_reach_loss),
        Property.of(prop_padding_contributes_zero),
        Property.of(prop_groups_intact),
        Property.of(prop_ranks_balance_trajectory_tokens),
        Property.of(prop_routes_reach_their_tokens),
        Property.of(prop_invariant_to_dp_and_budget, metamorphic=True),
    ],
    pins=PINS,
    example=EXAMPLE,
    show=show_step,
    doc="one RL step's data path: rollouts → batch → advantages → padding → DP ranks → "
        "micro-batches → packed logprobs → loss ledger",
    requires=("transformers",),
    devices=("cpu", "cuda"),
    to_device=lambda case, device: case.on(device),  # the model; the rollouts are host lists
    paths=PATHS,
))

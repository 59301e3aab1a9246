"""SkyRL adapters (PyPI distribution `skyrl`, checked with 0.3.0; see docs/frameworks.md).

`convert_prompts_responses_to_batch_tensors(tokenizer, prompts, responses, rewards, loss_masks,
logprobs=None, rollout_expert_indices=None, max_seq_len=None)` builds SkyRL's unified left-padded
batch (its PR #1285) — the contract of `rl_batch.build_rl_batch` with `layout="left"`:

    contract                          SkyRL
    pad_token_id=                     tokenizer.pad_token_id (a stand-in object carries it)
    rewards=None                      rewards is required: zeros are passed, the output dropped
    loss_masks=None                   loss_masks is required: ones are passed (the contract default)
    input_ids, attention_mask         sequences, attention_mask
    response_mask, loss_mask          action_mask, loss_masks
    rewards, rollout_logprobs         rewards, logprobs
    position_ids                      not produced (SkyRL derives them inside the model wrapper)
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
from tensordict import TensorDict

from batchproof.adapters import Adapter, KnownDivergence, register_adapter
from batchproof.ops.rl_batch import bad_rl_batch_cases, rl_batch_cases
from batchproof.reference._checks import check_pad_token_id
from batchproof.registry import BadCase, Case

PER_TOKEN = ("rewards", "loss_masks", "logprobs")


def rl_batch_adapter(convert: Callable[..., Any]) -> Callable[..., TensorDict]:
    """SkyRL's function behind the `build_rl_batch` signature (left layout only)."""

    def build_rl_batch(prompts, responses, *, pad_token_id, rewards=None, loss_masks=None,
                       logprobs=None, layout="left", max_seq_len=None, device=None) -> TensorDict:
        if layout != "left":
            raise NotImplementedError("SkyRL builds the left layout only")
        r_lens = [len(r) for r in responses]
        tokenizer = SimpleNamespace(pad_token_id=pad_token_id)
        sequences, attention, action, out_rewards, out_loss, out_logprobs, _ = convert(
            tokenizer, prompts, responses,
            rewards if rewards is not None else [[0.0] * n for n in r_lens],
            loss_masks if loss_masks is not None else [[1] * n for n in r_lens],
            logprobs=logprobs, max_seq_len=max_seq_len)
        td = TensorDict({"input_ids": sequences, "attention_mask": attention,
                         "response_mask": action, "loss_mask": out_loss},
                        batch_size=[len(prompts)])
        if rewards is not None:
            td["rewards"] = out_rewards
        if logprobs is not None:
            td["rollout_logprobs"] = out_logprobs
        td.set_non_tensor("max_response_length", action.shape[1])
        td.set_non_tensor("layout", "left")
        td.set_non_tensor("pad_token_id", pad_token_id)
        return td

    return build_rl_batch


# --------------------------------------------------------------------------- input conditions


def _rows(value: Any) -> list | None:
    return list(value) if isinstance(value, (list, tuple)) else None


def _response_lengths(case: Case) -> list[int]:
    return [len(r) for r in case.args[1]]


def _is_scalar(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.dim() == 0
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_per_token(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.dim() == 1
    return isinstance(value, (list, tuple)) and all(_is_scalar(v) for v in value)


def has_scalar_reward(case: Case) -> bool:
    rows = _rows(case.kwargs.get("rewards"))
    return rows is not None and any(_is_scalar(v) for v in rows)


def has_length_mismatch(case: Case) -> bool:
    """A per-token row whose length is not its response's length."""
    r_lens = _response_lengths(case)
    for name in PER_TOKEN:
        rows = _rows(case.kwargs.get(name))
        if rows is None:
            continue
        for value, n in zip(rows, r_lens):
            if _is_per_token(value) and len(value) != n:
                return True
    return False


def has_multi_dim_row(case: Case) -> bool:
    """A per-token row that is a nested list or a tensor with more than one dimension."""
    for name in PER_TOKEN:
        for value in _rows(case.kwargs.get(name)) or []:
            if not _is_scalar(value) and not _is_per_token(value):
                return True
    return False


def has_count_mismatch(case: Case) -> bool:
    """An empty batch, or prompts/responses/rewards/loss_masks counts that differ."""
    batch = len(case.args[0])
    counts = [len(case.args[1])] + [len(rows) for name in ("rewards", "loss_masks")
                                    if (rows := _rows(case.kwargs.get(name))) is not None]
    return batch == 0 or any(c != batch for c in counts)


def has_logprobs_count_mismatch(case: Case) -> bool:
    rows = _rows(case.kwargs.get("logprobs"))
    return rows is not None and len(rows) != len(case.args[0])


def all_rows_empty(case: Case) -> bool:
    """Every prompt and every response is empty (the batch has width 0)."""
    return all(len(p) + len(r) == 0 for p, r in zip(*case.args))


def has_non_int_pad(case: Case) -> bool:
    """A pad_token_id the contract rejects (`reference._checks.check_pad_token_id`)."""
    try:
        check_pad_token_id(case.kwargs.get("pad_token_id"))
    except (TypeError, ValueError):
        return True
    return False


def has_non_int_token(case: Case) -> bool:
    """A token id that is not an int (a float, a str, None) in a prompt or response list."""
    rows = [row for side in case.args[:2] if isinstance(side, list) for row in side]
    return any(isinstance(row, list) and any(not isinstance(v, int) for v in row)
               for row in rows)


def left_layout(case: Case) -> bool:
    return case.kwargs.get("layout", "left") == "left" and case.kwargs.get("device") is None


def as_left_layout(bad: BadCase) -> BadCase:
    """The same defect in the left layout (validation does not depend on a valid layout)."""
    if bad.case.kwargs.get("layout") != "two_segment":
        return bad
    kwargs = {k: v for k, v in bad.case.kwargs.items() if k != "layout"}
    return BadCase(Case(bad.case.args, kwargs, bad.case.label), bad.raises, bad.why)


UPSTREAM = "skyrl/train/dataset/preprocess.py (skyrl 0.3.0)"

RL_BATCH_KNOWN = (
    KnownDivergence(
        "scalar_reward_rejected", has_scalar_reward, kind="valid", upstream=UPSTREAM,
        raises=TypeError,
        doc="a scalar reward per sample (Python number or 0-d tensor) raises TypeError "
            "(`len()` of a float); SkyRL expects one per-token list per sample. The contract puts "
            "a scalar on the row's last response token."),
    KnownDivergence(
        "float_ids_when_all_rows_empty", all_rows_empty, kind="valid", upstream=UPSTREAM,
        fields=("input_ids", "attention_mask"),
        doc="when every prompt and response is empty, `torch.tensor(sequences)` of empty lists "
            "gives float32 sequences of shape (B, 0) instead of int64 (found by harness check)."),
    KnownDivergence(
        "per_token_length_unchecked", has_length_mismatch, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=RuntimeError,
        doc="a rewards/loss_masks/logprobs row whose length differs from its response is "
            "right-aligned by its own length (silently wrong columns when shorter, or longer but "
            "<= max response length), or fails with a RuntimeError from the slice assignment; "
            "the contract raises ValueError naming the argument and row."),
    KnownDivergence(
        "counts_checked_by_assert", has_count_mismatch, kind="errors", upstream=UPSTREAM,
        raises=AssertionError,
        doc="count mismatches and the empty batch raise AssertionError from `assert` (gone "
            "under `python -O`), not ValueError."),
    KnownDivergence(
        "logprobs_count_unchecked", has_logprobs_count_mismatch, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=IndexError,
        doc="`logprobs` with more rows than samples raises IndexError; with fewer rows the "
            "missing rows are silently left at 0.0. The contract raises ValueError."),
    KnownDivergence(
        "pad_token_id_unchecked", has_non_int_pad, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=(RuntimeError, OverflowError, ValueError),
        doc="pad_token_id comes from the tokenizer and is not validated: a float or bool is "
            "written into the sequences (a float pad even turns them into float32), a str makes "
            "torch.tensor raise ValueError, and an int beyond int64 fails in torch.tensor (or "
            "passes when no row needs padding) instead of the contract's TypeError / ValueError "
            "naming pad_token_id. (None raises torch's TypeError where a row needs padding: the "
            "contract's type, so those inputs agree and the predicate reads as too broad.)"),
    KnownDivergence(
        "token_ids_unchecked", has_non_int_token, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=(ValueError, RuntimeError),
        doc="token ids are not type-checked: a float id is accepted and turns the sequences "
            "into float32 (`[[1.5]]` gives tensor([[1.5, 2.0]])), a str id fails in torch.tensor "
            "with ValueError ('too many dimensions'), None with RuntimeError ('Could not infer "
            "dtype'); the contract raises TypeError naming the argument and row. Found by the "
            "contract's token-id bad inputs (2026-11-24)."),
    KnownDivergence(
        "multi_dim_row_unchecked", has_multi_dim_row, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=RuntimeError,
        doc="a per-token row given as a nested list or 2-D tensor is broadcast into the row or "
            "fails with RuntimeError; the contract raises ValueError."),
)

RL_BATCH = register_adapter(Adapter(
    name="skyrl.rl_batch",
    framework="skyrl",
    record="rl_batch.build_rl_batch",
    target="skyrl.train.dataset.preprocess:convert_prompts_responses_to_batch_tensors",
    wrap=rl_batch_adapter,
    distribution="skyrl",
    versions="~=0.3.0",  # 0.4.0 changed the signature (pad_token_id first, 8 outputs)
    doc="SkyRL's unified left-pad batch builder against build_rl_batch(layout='left')",
    devices=("cpu",),
    dtypes=(torch.int64, torch.float32),
    forms=("lists",),  # `prompts[i] + responses[i]` concatenates lists; tensors would add
    supports=left_layout,
    valid=rl_batch_cases(layouts=("left",)),
    # bad inputs start from valid ones SkyRL takes: a scalar reward would fail first (TypeError,
    # `scalar_reward_rejected`) and hide the defect under test
    invalid=bad_rl_batch_cases(valid=rl_batch_cases(
        layouts=("left",), rewards=("none", "per_token"))).map(as_left_layout),
    known=RL_BATCH_KNOWN,
    not_provided=("position_ids",),
    skip={
        "property:positions": "SkyRL's function returns no position_ids",
        "property:shapes_and_dtypes": "expects position_ids among the keys; equivalence checks "
                                      "every other shape and dtype",
        "property:layouts_agree": "SkyRL has no two_segment layout",
    },
))

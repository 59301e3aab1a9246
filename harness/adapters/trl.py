"""TRL adapters (PyPI distribution `trl`, checked with 1.16.0; see docs/frameworks-trl.md).

    varlen.pack_varlen        trl.trainer.sft_trainer.DataCollatorForLanguageModeling(
      (trl.padding_free)        pad_token_id=, padding_free=True, pad_to_multiple_of=) on one
                                example per sample, as SFTTrainer builds them with
                                `completion_only_loss`: input_ids = prompt + completion,
                                labels = [-100] * len(prompt) + completion
    varlen.pack_varlen        the same collator on examples packed the way
      (trl.padding_free_packed) `trl.data_utils.pack_dataset(strategy="bfd")` hands them over:
                                several samples per example with their `seq_lengths`
                                (empty samples dropped, as `_pack_bfd` drops them); two
                                consecutive non-empty samples per example, so that positions
                                restart inside an example and across examples
    rl_batch.build_rl_batch   trl.trainer.utils.pad composed as GRPOTrainer
      (trl.grpo_pad)            (`_generate_and_score_completions`) composes it: prompts padded on
                                the left, completions on the right, concatenated; layout
                                "two_segment" only
    sft.ffd_bins              trl.data_utils.pack_dataset(strategy="bfd"): sample i as a sequence
      (trl.bfd_bins)            of lengths[i] tokens i, the packed rows' segments as the bins;
                                properties only (best fit, not first fit)

Outputs of the collator against `pack_varlen`'s keys:

    input_ids, position_ids     input_ids, position_ids
    cu_seqlens, max_seqlen      cu_seq_lens_q (== cu_seq_lens_k), max_length_q
    target_index                the positions where `labels != -100` (TRL's loss targets)
    predict_index               target_index - 1: transformers' causal-LM loss shifts the labels
                                by one over the whole packed row, so label t is scored by logit t-1
    sample_index                seq_idx at the targets (TRL's segment of each token), segment k
                                read as the k-th non-empty sample
    prompt_lengths, ...         not produced (the contract's values are filled in)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict

from batchproof.adapters import Adapter, Call, KnownDivergence, register_adapter, without_replay
from batchproof.adapters.huggingface import flattened_batch
from batchproof.ops.rl_batch import bad_rl_batch_cases, rl_batch_cases
from batchproof.ops.sft import ffd_cases
from batchproof.ops.varlen import bad_pack_cases
from batchproof.reference._checks import check_pad_token_id
from batchproof.reference.rl_batch import build_rl_batch as rl_contract
from batchproof.reference.sft import ffd_bins as ffd_contract
from batchproof.reference.varlen import pack_varlen as pack_contract
from batchproof.registry import Case

SFT_UPSTREAM = "trl/trainer/sft_trainer.py, DataCollatorForLanguageModeling.torch_call (trl 1.16.0)"
PACKED_UPSTREAM = ("trl/trainer/sft_trainer.py, DataCollatorForLanguageModeling."
                   "get_position_ids_from_packed_seq_lengths (trl 1.16.0)")
PAD_UPSTREAM = "trl/trainer/utils.py, pad (trl 1.16.0)"
GRPO_UPSTREAM = ("trl/trainer/grpo_trainer.py, GRPOTrainer._generate_and_score_completions, "
                 "and trl/trainer/utils.py, pad (trl 1.16.0)")
IGNORE = -100  # transformers' ignore index, which TRL writes into `labels`


# --------------------------------------------------------------------------- padding-free collator


def _example(prompt, response) -> dict[str, list]:
    """One tokenized SFT example as SFTTrainer prepares it with `completion_only_loss` (its
    `build_labels`: the completion mask turned into -100 labels)."""
    prompt, response = list(prompt), list(response)
    return {"input_ids": prompt + response, "labels": [IGNORE] * len(prompt) + response}


def _packed_examples(prompts, responses, per_example: int = 2) -> list[dict[str, list]]:
    """Samples as `pack_dataset(strategy="bfd")` hands them to the collator: empty samples
    dropped (`_pack_bfd` filters them), several samples per example with their `seq_lengths`;
    here `per_example` consecutive samples, so the order of the samples is kept."""
    singles = [_example(p, r) for p, r in zip(prompts, responses) if len(p) + len(r) > 0]
    examples = []
    for start in range(0, len(singles), per_example):
        group = singles[start:start + per_example]
        examples.append({"input_ids": [t for ex in group for t in ex["input_ids"]],
                         "labels": [t for ex in group for t in ex["labels"]],
                         "seq_lengths": [len(ex["input_ids"]) for ex in group]})
    return examples


def padding_free_adapter(collator_class: Callable[..., Any], *, packed: bool = False
                         ) -> Callable[..., TensorDict]:
    """TRL's padding-free collator behind the `pack_varlen` signature."""

    def pack_varlen(prompts, responses, *, pad_to_multiple=1, pad_token_id=0, device=None
                    ) -> TensorDict:
        if device is not None:
            raise NotImplementedError("the collator builds CPU tensors; no device argument")
        collator = collator_class(pad_token_id=pad_token_id, padding_free=True,
                                  pad_to_multiple_of=pad_to_multiple)
        examples = (_packed_examples(prompts, responses) if packed
                    else [_example(p, r) for p, r in zip(prompts, responses)])
        out = collator(examples)
        labels = out["labels"][0]
        target = (labels != IGNORE).nonzero().flatten()
        # TRL's k-th segment (seq_idx == k) is the k-th sample that occupies tokens
        samples = [k for k, (p, r) in enumerate(zip(prompts, responses)) if len(p) + len(r) > 0]
        segments = out["seq_idx"][0].long()[target]
        owners = torch.tensor(samples + [-1] * (int(segments.max()) + 1 if segments.numel()
                                                else 0), dtype=torch.int64)
        return flattened_batch(out, target, owners[segments])

    return pack_varlen


def packed_adapter(collator_class: Callable[..., Any]) -> Callable[..., TensorDict]:
    return padding_free_adapter(collator_class, packed=True)


# --------------------------------------------------------------------------- input conditions


def _call(case: Case, contract: Callable[..., Any]) -> Call:
    """The `Call` a predicate is given (the runner's); a plain `Case` (a test's, a strategy
    filter's) read the same way, against `contract`'s signature."""
    return case if isinstance(case, Call) else Call.of(case, contract)


def _token_rows(value: Any) -> list[list] | None:
    """`value` when it is a list of token lists (what a dataset row or GRPO's generation
    gives), else None."""
    if isinstance(value, list) and all(isinstance(row, list) for row in value):
        return value
    return None


def _samples(case: Case) -> tuple[list[list], list[list]] | None:
    """(prompts, responses) when the collator's examples can be made of them: lists of token
    lists, as many prompts as responses; None for anything else (an int, a str or a tensor row,
    counts that differ), which no divergence but the domain is about."""
    call = _call(case, pack_contract)
    prompts, responses = _token_rows(call.arg("prompts")), _token_rows(call.arg("responses"))
    if prompts is None or responses is None or len(prompts) != len(responses):
        return None
    return prompts, responses


def pack_domain(case: Case) -> bool:
    """What the collator's input can express: one token list per sample (a dataset row), as
    many prompts as responses, no device, positions from 0 (it has no `position_ids_start`).
    Other defects of the contract (counts that differ, tensor or str rows) concern the split
    into two arguments, which TRL's examples do not have."""
    call = _call(case, pack_contract)
    start = call.arg("position_ids_start")
    return (_samples(case) is not None and call.arg("device") is None
            and type(start) is int and start == 0)


def _multiple(case: Case) -> Any:
    return _call(case, pack_contract).arg("pad_to_multiple")  # the contract's default: 1


def _pad_length(case: Case) -> int:
    """Tail-pad length of the packed row (0 unless pad_to_multiple is an int >= 1)."""
    multiple = _multiple(case)
    if not isinstance(multiple, int) or isinstance(multiple, bool) or multiple < 1:
        return 0
    return -_total(case) % multiple


def tail_pad_split(case: Case) -> bool:
    """A tail pad of two or more tokens (one pad token is one segment in both)."""
    return _samples(case) is not None and _pad_length(case) >= 2


def has_empty_sample(case: Case) -> bool:
    """A sample with no token (p + r == 0)."""
    samples = _samples(case)
    return samples is not None and any(len(p) + len(r) == 0 for p, r in zip(*samples))


def some_samples_empty(case: Case) -> bool:
    """A sample with no token beside one with tokens."""
    return has_empty_sample(case) and not all_samples_empty(case)


def all_samples_empty(case: Case) -> bool:
    """No token at all (every sample empty): nothing to pack, N = 0 for the contract."""
    samples = _samples(case)
    return (samples is not None and len(samples[0]) > 0
            and all(len(p) + len(r) == 0 for p, r in zip(*samples)))


def bad_pad_token_id(case: Case) -> bool:
    """A pad_token_id the contract rejects, except a str or None (`pad` fills its output with
    `torch.full(..., padding_value)`, which raises TypeError for them: the contract's type)."""
    value = _call(case, pack_contract).arg("pad_token_id")
    try:
        check_pad_token_id(value)
    except (TypeError, ValueError):
        return not (value is None or isinstance(value, str))
    return False


def _total(case: Case) -> int:
    """sum(p + r): the packed row's length before the tail pad (0 without samples)."""
    samples = _samples(case)
    return 0 if samples is None else sum(len(p) + len(r) for p, r in zip(*samples))


def bad_multiple(case: Case) -> bool:
    """pad_to_multiple not an int >= 1 that `pad` does not reject with TypeError: a bool, an
    int < 1, a float the row length is already a multiple of (with any other float, and with a
    str, `pad` raises TypeError: the contract's type)."""
    multiple = _multiple(case)
    if _samples(case) is None:
        return False
    if isinstance(multiple, bool):
        return True
    if isinstance(multiple, int):
        return multiple < 1
    if isinstance(multiple, float):
        return multiple != 0 and _total(case) % multiple == 0
    return False


def empty_batch(case: Case) -> bool:
    samples = _samples(case)
    return samples is not None and len(samples[0]) == 0


def empty_prompt_with_response(case: Case) -> bool:
    samples = _samples(case)
    return samples is not None and any(len(p) == 0 < len(r) for p, r in zip(*samples))


def non_int_token(case: Case) -> bool:
    """A token id that is not an int, or is a bool."""
    samples = _samples(case)
    return samples is not None and any(not isinstance(v, int) or isinstance(v, bool)
                                       for row in samples[0] + samples[1] for v in row)


PAD_TOKEN_KNOWN = KnownDivergence(
    "pad_token_id_unchecked", bad_pad_token_id, kind="errors", upstream=SFT_UPSTREAM,
    accepts=True, raises=(RuntimeError, OverflowError),
    doc="pad_token_id is not validated: `pad` creates its output with `torch.full(shape, "
        "padding_value, dtype=int64)` and writes the rows over it, so a float is accepted and "
        "truncated where a pad cell remains (0.5 -> 0), a bool is written as 0/1, and an int "
        "beyond int64 raises RuntimeError ('value cannot be converted to type int64_t without "
        "overflow') or OverflowError (below -2**63: 'can't convert negative int to "
        "unsigned') whether or not a pad cell remains. (A str or None raises torch's TypeError: "
        "the contract's type.) The contract raises TypeError / ValueError naming "
        "pad_token_id.")

MULTIPLE_KNOWN = KnownDivergence(
    "pad_to_multiple_unchecked", bad_multiple, kind="errors", upstream=PAD_UPSTREAM,
    accepts=True, raises=ZeroDivisionError,
    doc="pad_to_multiple_of is not validated: 0 raises ZeroDivisionError (`%` in `pad`), a "
        "negative value or True is accepted (`n % -1 == 0`, True acts as 1), a float is accepted "
        "when the length is already a multiple (else `torch.full` raises TypeError, the "
        "contract's type). The contract raises ValueError (< 1) / TypeError (not an int).")

EMPTY_BATCH_KNOWN = KnownDivergence(
    "empty_batch_index_error", empty_batch, kind="errors", upstream=SFT_UPSTREAM,
    raises=IndexError,
    doc="no example: `examples[0]` (the `seq_lengths` probe) raises IndexError; the contract "
        "raises ValueError.")

EMPTY_PROMPT_KNOWN = KnownDivergence(
    "empty_prompt_first_token_unscored", empty_prompt_with_response, kind="errors",
    upstream=SFT_UPSTREAM, accepts=True,
    doc="a sample with an empty prompt and a completion is accepted: `labels[position_ids == 0] "
        "= -100` masks its first completion token (no logit of its own segment predicts it), so "
        "that token is silently left out of the loss instead of being scored by the previous "
        "sample's last logit. Safe, but silent; the contract raises ValueError naming the sample "
        "(a contract difference, not a TRL bug).")

TOKEN_KNOWN = KnownDivergence(
    "token_ids_unchecked", non_int_token, kind="errors", upstream=SFT_UPSTREAM,
    accepts=True,
    doc="token ids are not type-checked: `torch.tensor(ids)` takes a float id and the whole "
        "packed row becomes float32 (labels too); a bool id is stored as 0/1 in an int64 row "
        "(a row of bools alone comes back as a bool tensor). The contract raises TypeError "
        "naming the row.")

PACK_KNOWN = (
    KnownDivergence(
        "tail_pad_one_token_segments", tail_pad_split, kind="valid", upstream=SFT_UPSTREAM,
        fields=("cu_seqlens", "position_ids", "max_seqlen"),
        doc="`pad_to_multiple_of` pads `position_ids` with 0, so every tail-pad token starts a "
            "segment of its own: positions [0, 0, 0] and one cu_seqlens boundary per pad token, "
            "and max_length_q never counts the pad (the contract: one segment 0..pad-1). The "
            "pad's labels are -100, so the loss is unchanged; a contract difference (more, "
            "shorter varlen segments), not a TRL bug."),
    KnownDivergence(
        "empty_sample_makes_ids_float", some_samples_empty, kind="valid", upstream=SFT_UPSTREAM,
        fields=("input_ids",),
        doc="`torch.tensor([])` of an empty example is float32 and `torch.cat` promotes the whole "
            "packed row to it: input_ids (and labels) come back float32 (found by batchproof "
            "check). A TRL bug; fix: `torch.tensor(ids, dtype=torch.long)` for input_ids and "
            "labels."),
    KnownDivergence(
        "no_token_at_all", all_samples_empty, kind="valid", upstream=SFT_UPSTREAM,
        raises=RuntimeError,
        doc="every example empty: the row has no token and `int(cu_seq_lens.diff().max())` "
            "raises RuntimeError ('max(): Expected reduction dim to be specified for "
            "input.numel() == 0'); the contract returns an empty row (N = 0, cu_seqlens [0], "
            "max_seqlen 0). A TRL edge case (SFTTrainer drops fully masked examples when it "
            "truncates)."),
    PAD_TOKEN_KNOWN,
    MULTIPLE_KNOWN,
    EMPTY_BATCH_KNOWN,
    EMPTY_PROMPT_KNOWN,
    TOKEN_KNOWN,
)

PACKED_KNOWN = (
    PACK_KNOWN[0],
    KnownDivergence(
        "no_token_at_all", all_samples_empty, kind="valid", upstream=PACKED_UPSTREAM,
        raises=IndexError,
        doc="every sample empty: `pack_dataset` drops empty sequences, so there is no packed "
            "example to collate and the collator's `examples[0]` raises IndexError; the contract "
            "returns an empty row (N = 0, cu_seqlens [0]). Outside what TRL's pipeline produces "
            "(an empty dataset has no batch)."),
    PAD_TOKEN_KNOWN,
    MULTIPLE_KNOWN,
    EMPTY_BATCH_KNOWN,
    EMPTY_PROMPT_KNOWN,
    TOKEN_KNOWN,
)

PACK_SKIP: dict[str, str] = {}


def _starts_from_taken(bad) -> bool:
    """Bad inputs built on a valid input the padding-free collator takes: with an empty sample
    the row turns float32 or (all empty) fails on its own (`empty_sample_makes_ids_float`), which
    would hide the defect under test."""
    return not has_empty_sample(bad.case)


def _starts_from_packable(bad) -> bool:
    """Bad inputs built on a valid input with at least one token (else no packed example)."""
    return not all_samples_empty(bad.case)

PADDING_FREE = register_adapter(Adapter(
    name="trl.padding_free",
    framework="trl",
    record="varlen.pack_varlen",
    target="trl.trainer.sft_trainer:DataCollatorForLanguageModeling",
    wrap=padding_free_adapter,
    distribution="trl",
    versions="~=1.16.0",
    doc="TRL's padding-free SFT collator (one example per sample, completion-only labels) "
        "against pack_varlen",
    devices=("cpu",),
    dtypes=(torch.int64, torch.int32),
    forms=("lists",),  # dataset rows are token lists; the adapter concatenates prompt + response
    supports=without_replay(pack_domain),  # the collator takes no routes
    invalid=bad_pack_cases().filter(_starts_from_taken),
    known=PACK_KNOWN,
    not_provided=("prompt_lengths", "response_lengths"),
    skip=PACK_SKIP,
))

PADDING_FREE_PACKED = register_adapter(Adapter(
    name="trl.padding_free_packed",
    framework="trl",
    record="varlen.pack_varlen",
    target="trl.trainer.sft_trainer:DataCollatorForLanguageModeling",
    wrap=packed_adapter,
    distribution="trl",
    versions="~=1.16.0",
    doc="TRL's padding-free SFT collator on BFD-packed examples (seq_lengths, two samples per "
        "example) against pack_varlen",
    devices=("cpu",),
    dtypes=(torch.int64, torch.int32),
    forms=("lists",),
    supports=without_replay(pack_domain),  # the collator takes no routes
    invalid=bad_pack_cases().filter(_starts_from_packable),
    known=PACKED_KNOWN,
    not_provided=("prompt_lengths", "response_lengths"),
    skip=PACK_SKIP,
))


# --------------------------------------------------------------------------- GRPO's use of pad


def grpo_pad_adapter(pad: Callable[..., Any]) -> Callable[..., TensorDict]:
    """`trl.trainer.utils.pad` composed as GRPOTrainer composes it, behind `build_rl_batch`
    (layout "two_segment"; `loss_masks` play GRPO's `tool_mask`, `logprobs` its
    `sampling_per_token_logps`). Its own steps (`torch.tensor` of each row, `torch.cat`, the
    tool-mask product, the TensorDict) are batchproof's reproduction of GRPO's lines: they must
    not fail, and `grpo_domain` admits only inputs they can carry (`grpo_composable`)."""

    def build_rl_batch(prompts, responses, *, pad_token_id, rewards=None, loss_masks=None,
                       logprobs=None, layout="left", max_seq_len=None, device=None
                       ) -> TensorDict:
        if layout != "two_segment" or rewards is not None or device is not None:
            raise NotImplementedError("GRPO pads prompts left and completions right "
                                      "(two_segment); rewards are per sample, not laid out")
        prompt_ids = [torch.tensor(ids) for ids in prompts]
        prompt_mask = [torch.ones_like(ids, dtype=torch.long) for ids in prompt_ids]
        prompt_ids = pad(prompt_ids, padding_value=pad_token_id, padding_side="left")
        prompt_mask = pad(prompt_mask, padding_value=0, padding_side="left")
        completion_ids = [torch.tensor(ids) for ids in responses]
        completion_mask = [torch.ones_like(ids, dtype=torch.long) for ids in completion_ids]
        completion_ids = pad(completion_ids, padding_value=pad_token_id, padding_side="right")
        completion_mask = pad(completion_mask, padding_value=0, padding_side="right")
        rollout_logprobs = None
        if logprobs is not None:  # GRPO reads a None logprob (vLLM's NaN) as NaN
            rollout_logprobs = pad([torch.tensor(_none_as_nan(row)) for row in logprobs],
                                   padding_value=0.0, padding_side="right")
        loss_mask = completion_mask
        if loss_masks is not None:
            tool_mask = pad([torch.tensor(m) for m in loss_masks], padding_value=1,
                            padding_side="right")
            loss_mask = completion_mask * tool_mask
        td = TensorDict({
            "input_ids": torch.cat([prompt_ids, completion_ids], dim=1),
            "attention_mask": torch.cat([prompt_mask, completion_mask], dim=1),
            "response_mask": completion_mask,
            # GRPO multiplies its int64 0/1 loss mask into float losses; the contract's is float32
            "loss_mask": loss_mask.to(torch.float32),
        }, batch_size=[len(prompts)])
        if rollout_logprobs is not None:
            td["rollout_logprobs"] = rollout_logprobs
        td.set_non_tensor("max_response_length", completion_ids.shape[1])
        return td  # layout and pad_token_id are the caller's: not produced

    return build_rl_batch


def _grpo_sides(case: Case) -> tuple[list[list], list[list]] | None:
    """(prompts, responses) when both are lists of token lists (what GRPO's generation gives),
    else None (an int, a str, a tensor or jagged batch: a bad input only the domain is
    about). Their counts may differ."""
    call = _call(case, rl_contract)
    prompts, responses = _token_rows(call.arg("prompts")), _token_rows(call.arg("responses"))
    return None if prompts is None or responses is None else (prompts, responses)


def grpo_domain(case: Case) -> bool:
    """two_segment, no rewards (GRPO keeps one reward per sample, never laid out per token), no
    device, lists of lists (GRPO's generation returns token lists), and only inputs GRPO's
    composition around `pad` can carry (`grpo_composable`)."""
    call = _call(case, rl_contract)
    return (call.arg("layout") == "two_segment" and call.arg("rewards") is None
            and call.arg("device") is None and grpo_composable(case))


def _none_as_nan(row: Any) -> Any:
    """A logprob row as GRPO hands it to `torch.tensor`: a None entry (vLLM's NaN) read as NaN
    (`_generate_and_score_completions`, trl 1.16.0)."""
    return [float("nan") if x is None else x for x in row]


def _converted(row: Any, *, logprobs: bool = False) -> torch.Tensor | None:
    """The tensor GRPO's `torch.tensor(row)` makes of a row before `pad` (a logprob row through
    `_none_as_nan`), or None where it raises (a None or str id, a non-number entry)."""
    if logprobs:
        if not isinstance(row, (list, tuple)):
            return None
        row = _none_as_nan(row)
    try:
        return torch.tensor(row)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None


def _tool_mask_broadcasts(rows: list[torch.Tensor], batch: int, width: int) -> bool:
    """Whether `completion_mask * tool_mask` (shapes (B, width) and `pad`'s output of the tool
    mask rows) broadcasts to a batch of B rows. Rows `pad` itself raises on (of unequal
    dimensions, or 0-d) are TRL's exception: True (`pad` raises before the product)."""
    dims = {t.dim() for t in rows}
    if not rows or len(dims) != 1 or 0 in dims:
        return True
    padded = (len(rows), *(max(t.shape[d] for t in rows) for d in range(rows[0].dim())))
    try:
        shape = torch.broadcast_shapes((batch, width), padded)
    except (RuntimeError, ValueError):
        return False
    return shape[0] == batch


def grpo_composable(case: Case) -> bool:
    """Inputs GRPO's lines around `pad` can carry to the end. `pad` takes tensors; GRPOTrainer
    turns its generated token lists (and tool masks, logprobs) into tensors with `torch.tensor`,
    concatenates prompts and completions, multiplies the completion mask by the tool mask, and
    builds every list from one generation, so they come in equal numbers. The adapter reproduces
    those lines; where they raise, batchproof's code raises, not TRL's (an AdapterError), so
    these inputs are outside the domain: rows `torch.tensor` cannot convert (a None or str id or
    entry) or token rows that are not 1-D, prompts / completions / tool masks / logprobs in
    different numbers, per-token arguments that are not lists, a tool mask that does not
    broadcast against the completions. Everything else reaches `pad`, and what it raises there
    is TRL's."""
    sides = _grpo_sides(case)
    if sides is None:
        return False
    prompts, responses = sides
    batch = len(prompts)
    if len(responses) != batch:
        return False
    tokens = [_converted(row) for row in prompts + responses]
    if any(t is None or t.dim() != 1 for t in tokens):
        return False
    width = max((len(r) for r in responses), default=0)
    call = _call(case, rl_contract)
    for name in PER_TOKEN:
        value = call.arg(name)
        if value is None:
            continue
        if not isinstance(value, list) or len(value) != batch:
            return False
        rows = [_converted(row, logprobs=name == "logprobs") for row in value]
        if any(t is None for t in rows):
            return False
        if name == "loss_masks" and not _tool_mask_broadcasts(rows, batch, width):
            return False
    return True


def _row_empty(case: Case, row: int) -> bool:
    """The prompt or the response of sample `row` is empty (a batch of at least one sample)."""
    sides = _grpo_sides(case)
    return (sides is not None and all(sides)
            and (len(sides[0][row]) == 0 or len(sides[1][row]) == 0))


def first_row_empty(case: Case) -> bool:
    """prompts[0] or responses[0] is empty: `pad` takes its output dtype from the first row."""
    return _row_empty(case, 0)


PER_TOKEN = ("loss_masks", "logprobs")


def _per_token_rows(case: Case, name: str) -> list | None:
    rows = _call(case, rl_contract).arg(name)
    return list(rows) if isinstance(rows, (list, tuple)) else None


def _nested(row: Any) -> bool:
    if isinstance(row, torch.Tensor):
        return row.dim() > 1
    return isinstance(row, (list, tuple)) and any(isinstance(v, (list, tuple)) for v in row)


def _length(row: Any) -> int | None:
    try:
        return len(row)
    except TypeError:  # an int, a float, a 0-d tensor
        return None


def grpo_length_mismatch(case: Case) -> bool:
    """A loss_masks / logprobs row (a flat one) whose length is not its response's."""
    sides = _grpo_sides(case)
    if sides is None:
        return False
    r_lens = [len(r) for r in sides[1]]
    return any(not _nested(row) and _length(row) is not None and len(row) != n
               for name in PER_TOKEN for row, n in zip(_per_token_rows(case, name) or [], r_lens))


def grpo_none_logprob(case: Case) -> bool:
    """A logprobs row holding None (GRPO reads it as NaN). A None or str anywhere else, and a
    str logprob, are outside the domain: GRPO's `torch.tensor` of the row raises
    (`grpo_composable`)."""
    return _grpo_sides(case) is not None and any(
        isinstance(row, (list, tuple)) and any(v is None for v in row)
        for row in _per_token_rows(case, "logprobs") or [])


def grpo_all_rows_nested(case: Case) -> bool:
    """Every loss_masks (or logprobs) row is a nested list or a tensor of more dimensions, so
    `pad` (which pads dimension 0 and keeps the others) stacks them without complaint; a mix of
    flat and nested rows makes its `np.max` over the shapes raise ValueError (the contract's
    type)."""
    if _grpo_sides(case) is None:
        return False
    for name in PER_TOKEN:
        rows = _per_token_rows(case, name)
        if rows and all(_nested(row) for row in rows):
            return True
    return False


def grpo_float_token(case: Case) -> bool:
    """A float token id (`torch.tensor` makes that side float32). A None or str id is outside
    the domain: GRPO's `torch.tensor` of the row raises (`grpo_composable`)."""
    sides = _grpo_sides(case)
    return sides is not None and any(isinstance(v, float) for row in sides[0] + sides[1]
                                     for v in row)


GRPO_KNOWN = (
    KnownDivergence(
        "first_row_empty_makes_ids_float", first_row_empty, kind="valid", upstream=GRPO_UPSTREAM,
        fields=("input_ids",),
        doc="`pad` builds its output with `dtype=tensors[0].dtype`; an empty first prompt or "
            "completion is `torch.tensor([])`, float32, so that side is padded as float32 and "
            "`torch.cat` makes the whole input_ids float32 (found by batchproof check). Reachable "
            "in GRPO when the first completion of a batch is empty. A TRL bug; fix: "
            "`torch.tensor(ids, dtype=torch.long)` (and/or a `dtype=` argument of `pad`)."),
    dataclasses.replace(PAD_TOKEN_KNOWN, upstream=PAD_UPSTREAM),
    KnownDivergence(
        "token_ids_unchecked", grpo_float_token, kind="errors", upstream=GRPO_UPSTREAM,
        accepts=True,
        doc="token ids are not type-checked: a float id makes that side float32 and is "
            "accepted (`torch.tensor(ids)`, then `pad` keeps the dtype); the contract raises "
            "TypeError naming the row. GRPO's ids come from its own generation, so this is "
            "unvalidated internal data, not a reachable bug. (A None or str id makes GRPO's "
            "own `torch.tensor(ids)` raise before `pad`: outside the adapter's domain.)"),
    KnownDivergence(
        "per_token_length_unchecked", grpo_length_mismatch, kind="errors",
        upstream=GRPO_UPSTREAM, accepts=True,
        doc="a tool mask / logprob row whose length is not its completion's is padded on its own: "
            "a short tool mask is padded with 1, so the completion tokens it does not cover are "
            "silently trained; a long one writes past the completion (hidden by "
            "`completion_mask`); logprob rows shift silently. The contract raises ValueError "
            "naming the row. Internal data in GRPO (its tool loop builds both from the same "
            "tokens). (A tool mask wider than every completion makes GRPO's own "
            "`completion_mask * tool_mask` fail to broadcast: outside the adapter's domain.)"),
    KnownDivergence(
        "none_logprob_read_as_nan", grpo_none_logprob, kind="errors", upstream=GRPO_UPSTREAM,
        accepts=True,
        doc="a None logprob is accepted: GRPO reads it as NaN before `torch.tensor` (vLLM "
            "reports a NaN logprob as None) and leaves the NaN out of its importance-sampling "
            "correction; the contract raises TypeError naming the row. A deliberate TRL choice, "
            "a contract difference."),
    KnownDivergence(
        "multi_dim_row_unchecked", grpo_all_rows_nested, kind="errors", upstream=PAD_UPSTREAM,
        accepts=True,
        doc="`pad` pads any number of dimensions: when every per-token row is nested (a (1, n) "
            "row) they are stacked into a 3-D tensor and broadcast against the 2-D completion "
            "mask without error; the contract raises ValueError."),
)

def last_row_empty(case: Case) -> bool:
    """prompts[-1] or responses[-1] is empty: the row property:permutation (which reverses the
    samples) hands `pad` first, where `first_row_empty_makes_ids_float` turns input_ids float32."""
    return _row_empty(case, -1)


# valid inputs whose last row is not empty: the known `first_row_empty_makes_ids_float`, met
# again inside property:permutation on the reversed batch, would otherwise be reported as a new
# divergence of that property (its input's own first row is not empty, so no predicate matches
# it); an empty first row (one row alone, too) is still drawn and confirms the known
# divergence, and empty rows anywhere else are checked as any row
GRPO_VALID = rl_batch_cases(layouts=("two_segment",), rewards=("none",),
                            max_seq_len=False).filter(
    lambda case: first_row_empty(case) or not last_row_empty(case))

GRPO_PAD = register_adapter(Adapter(
    name="trl.grpo_pad",
    framework="trl",
    record="rl_batch.build_rl_batch",
    target="trl.trainer.utils:pad",
    wrap=grpo_pad_adapter,
    distribution="trl",
    versions="~=1.16.0",
    doc="trl.trainer.utils.pad as GRPOTrainer uses it (prompts left, completions right, "
        "concatenated) against build_rl_batch(layout='two_segment')",
    devices=("cpu",),
    dtypes=(torch.int64, torch.float32),
    forms=("lists",),
    supports=without_replay(grpo_domain),  # `pad` takes no routes
    valid=GRPO_VALID,
    # bad inputs start from valid ones whose first rows are not empty: an empty first row turns
    # input_ids float32 (`first_row_empty_makes_ids_float`) and would hide the defect under test
    invalid=bad_rl_batch_cases(valid=GRPO_VALID).filter(lambda bad: not first_row_empty(bad.case)),
    known=GRPO_KNOWN,
    # position_ids: GRPO derives them in the model; layout and pad_token_id are the caller's
    # own arguments (docs/frameworks.md, "Liveness")
    not_provided=("position_ids", "layout", "pad_token_id"),
    skip={
        "property:positions": "GRPO passes no position_ids (the model derives them)",
        "property:shapes_and_dtypes": "expects position_ids among the keys; equivalence checks "
                                      "every other shape and dtype",
        "property:layouts_agree": "GRPO builds the two_segment layout only",
        "property:max_seq_len_only_warns": "GRPO has no max_seq_len (it caps generation)",
    },
))


# --------------------------------------------------------------------------- BFD packing


def bfd_bins_adapter(pack_dataset: Callable[..., Any]) -> Callable[..., list[list[int]]]:
    """`pack_dataset(strategy="bfd")` behind the `ffd_bins` signature: sample i becomes a
    sequence of `lengths[i]` tokens all equal to i, so each packed row's segments (its
    `seq_lengths`) name the samples of one bin, in the order the row holds them."""

    def ffd_bins(lengths, capacity, *, min_bins=1, bin_multiple=1) -> list[list[int]]:
        if min_bins != 1 or bin_multiple != 1:
            raise NotImplementedError("BFD packing has no bin-count adjustment")
        import datasets

        dataset = datasets.Dataset.from_dict(
            {"input_ids": [[i] * n for i, n in enumerate(lengths)]})
        bars = datasets.is_progress_bar_enabled()
        datasets.disable_progress_bars()
        try:
            packed = pack_dataset(dataset, capacity, strategy="bfd")
            rows = packed[:]
        finally:
            if bars:
                datasets.enable_progress_bars()
        bins = []
        for ids, seq_lengths in zip(rows["input_ids"], rows["seq_lengths"]):
            starts = [sum(seq_lengths[:k]) for k in range(len(seq_lengths))]
            bins.append([ids[s] for s in starts])
        return bins

    return ffd_bins


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bfd_args(case: Case) -> tuple[list[int], int] | None:
    """(lengths, capacity) when a dataset can be made of them: a non-empty list of int lengths
    (sample i a sequence of lengths[i] tokens) and an int capacity (`seq_length`); else None."""
    call = _call(case, ffd_contract)
    lengths, capacity = call.arg("lengths"), call.arg("capacity")
    if (isinstance(lengths, list) and len(lengths) > 0 and all(_is_int(n) for n in lengths)
            and _is_int(capacity)):
        return lengths, capacity
    return None


def bfd_domain(case: Case) -> bool:
    """What a dataset of sequences can express: int lengths (a sequence of n tokens), an int
    capacity (`seq_length`), no bin-count adjustment (BFD has none)."""
    call = _call(case, ffd_contract)
    return (_bfd_args(case) is not None
            and call.arg("min_bins") == 1 and call.arg("bin_multiple") == 1)


def length_over_capacity(case: Case) -> bool:
    found = _bfd_args(case)
    return found is not None and found[1] >= 1 and any(n > found[1] for n in found[0])


def non_positive_length(case: Case) -> bool:
    found = _bfd_args(case)
    return found is not None and found[1] >= 1 and any(n < 1 for n in found[0])


def capacity_zero(case: Case) -> bool:
    """capacity 0 (a negative one fails in pyarrow with ArrowInvalid, a ValueError: the
    contract's type)."""
    found = _bfd_args(case)
    return found is not None and found[1] == 0


BFD_UPSTREAM = "trl/data_utils.py, pack_dataset / _pack_bfd (trl 1.16.0)"

BFD_KNOWN = (
    KnownDivergence(
        "truncates_over_capacity", length_over_capacity, kind="errors", upstream=BFD_UPSTREAM,
        accepts=True,
        doc="a sequence longer than seq_length is cut to seq_length (`pc.list_slice`) and packed "
            "alone: its tail is silently dropped. Documented TRL behaviour of strategy='bfd' "
            "('bfd_split' splits it instead); the contract raises ValueError naming the length. "
            "A contract difference."),
    KnownDivergence(
        "empty_sequences_dropped", non_positive_length, kind="errors", upstream=BFD_UPSTREAM,
        accepts=True, raises=NotImplementedError,
        doc="empty sequences are filtered out before packing (they are in no bin); when every "
            "sequence is empty pyarrow raises ArrowNotImplementedError (a NotImplementedError: "
            "\"Function 'array_take' has no kernel matching input types (list<item: null>, "
            "null)\"). The contract raises ValueError for a length < 1. (A negative length "
            "cannot come from a dataset: the adapter builds it as an empty sequence.)"),
    KnownDivergence(
        "capacity_unchecked", capacity_zero, kind="errors", upstream=BFD_UPSTREAM,
        raises=AssertionError,
        doc="seq_length is not validated: 0 fails the segment tree's `assert 0 < val <= "
            "self.maxval` (AssertionError, gone under `python -O`); the contract raises "
            "ValueError naming capacity. (A negative one fails in `pc.list_slice` with pyarrow's "
            "ArrowInvalid, a subclass of ValueError: the contract's type, which the error check "
            "accepts since issue 27.)"),
)


def _without_adjustment(case: Case) -> Case:
    """The contract's valid call without min_bins / bin_multiple (BFD has no bin-count
    adjustment); its lengths are within capacity either way."""
    return Case(case.args, {}, case.label)


BFD_BINS = register_adapter(Adapter(
    name="trl.bfd_bins",
    framework="trl",
    record="sft.ffd_bins",
    target="trl.data_utils:pack_dataset",
    wrap=bfd_bins_adapter,
    distribution="trl",
    versions="~=1.16.0",
    doc="TRL's best-fit-decreasing packing (pack_dataset strategy='bfd') against the properties "
        "of ffd_bins: every sample in exactly one bin, bins within capacity, no empty bin",
    devices=("cpu",),
    forms=None,
    supports=bfd_domain,
    valid=ffd_cases().map(_without_adjustment),
    known=BFD_KNOWN,
    skip={
        "equivalence": "best fit, not first fit: a sample goes to the bin with the least room "
                       "that fits it, so the bins differ from the contract's first-fit bins; "
                       "only the contract's properties apply",
        "property:visit_order": "BFD visits samples by length descending with ties in index "
                                "order (a stable sort), the contract's FFD with the larger index "
                                "first: a convention, not a fault (equal-length samples swap)",
    },
))

"""Hugging Face transformers adapters (PyPI distribution `transformers`, checked with 5.23.0; see
docs/frameworks-transformers.md).

`DataCollatorWithFlattening` (`transformers.data.data_collator`) is the padding-free collator:
it concatenates a batch of tokenized examples into one row of shape (1, N) with `position_ids`
restarting at 0 per example, replaces the first label of every example by `separator_id` (so
that the last logit of one example never scores the first token of the next), and, on request,
returns flash-attn's boundaries (`cu_seq_lens_q/k`, int32; `max_length_q/k`, Python ints) and
`seq_idx` (the example each token belongs to, int32). It is checked against
`varlen.pack_varlen`:

    contract                          DataCollatorWithFlattening(return_flash_attn_kwargs=True,
                                      return_seq_idx=True, separator_id=-100)
    sample k: prompts[k], responses[k]  feature {"input_ids": prompt + response,
                                      "labels": [-100] * p + response} (the SFT convention:
                                      the prompt is not a target)
    input_ids, position_ids           input_ids, position_ids
    cu_seqlens, max_seqlen            cu_seq_lens_q, max_length_q
    target_index                      the positions where labels != -100
    predict_index                     target_index - 1: transformers' causal-LM loss scores
                                      labels[i + 1] with the logit at i (`ForCausalLMLoss`
                                      shifts the labels left by one)
    sample_index                      seq_idx at target_index
    prompt_lengths, response_lengths  not produced (the collator has no prompt/response split;
                                      they are the adapter's input)
    pad_to_multiple, pad_token_id     no tail padding: only inputs that need no tail pad are in
                                      the domain (then pad_token_id is never written)

transformers is imported only when the adapter is loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict

from batchproof.adapters import Adapter, Call, KnownDivergence, register_adapter, values
from batchproof.ops.varlen import pack_cases
from batchproof.reference.varlen import pack_varlen as _contract
from batchproof.registry import Case

IGNORE = -100  # transformers' ignore_index, and the collator's default separator_id
UPSTREAM = "transformers/data/data_collator.py, DataCollatorWithFlattening (5.23.0, 5.24.0)"


def _as_list(row: Any) -> Any:
    """A row as the collator reads it: a tensor through `.tolist()`, anything else as a list."""
    if hasattr(row, "tolist"):
        return row.tolist()
    return list(row)


def _feature(prompt: Any, response: Any) -> dict[str, Any]:
    """One example: input_ids = prompt + response, labels = ignored prompt + response. Two
    tensors stay tensors (the collator converts them itself); anything else becomes lists the
    way the collator would convert it."""
    if isinstance(prompt, torch.Tensor) and isinstance(response, torch.Tensor):
        ignored = torch.full(prompt.shape, IGNORE, dtype=response.dtype)
        return {"input_ids": torch.cat([prompt, response]),
                "labels": torch.cat([ignored, response])}
    prompt, response = _as_list(prompt), _as_list(response)
    return {"input_ids": prompt + response, "labels": [IGNORE] * len(prompt) + response}


def pack_varlen_adapter(collator_class: Callable[..., Any]) -> Callable[..., TensorDict]:
    """The collator behind the `pack_varlen` signature (no tail pad: see `needs_no_tail_pad`)."""

    def pack_varlen(prompts, responses, *, pad_to_multiple=1, pad_token_id=0, device=None):
        if device is not None:
            raise NotImplementedError("the collator returns CPU tensors (no device argument)")
        collator = collator_class(return_flash_attn_kwargs=True, return_seq_idx=True,
                                  separator_id=IGNORE, return_tensors="pt")
        out = collator([_feature(p, r) for p, r in zip(prompts, responses)])
        labels = out["labels"].reshape(-1)
        target = torch.nonzero(labels != IGNORE).reshape(-1)
        owner = out["seq_idx"].reshape(-1).to(torch.int64)
        if labels.numel() > owner.numel():  # labels longer than the row: owner unknown (-1)
            owner = torch.cat([owner, owner.new_full((labels.numel() - owner.numel(),), -1)])
        return flattened_batch(out, target, owner[target])

    return pack_varlen


def flattened_batch(out: Any, target: torch.Tensor, sample_index: torch.Tensor) -> TensorDict:
    """The contract's packed batch from a flattening collator's output (transformers' keys,
    which TRL's padding-free collator shares): `target` the flat indices of the scored tokens,
    `sample_index` the sample each belongs to."""
    td = TensorDict({
        "input_ids": out["input_ids"],
        "position_ids": out["position_ids"],
        "cu_seqlens": out["cu_seq_lens_q"],
        "predict_index": target - 1,
        "target_index": target,
        "sample_index": sample_index,
    }, batch_size=[])
    td.set_non_tensor("max_seqlen", out["max_length_q"])
    return td


# --------------------------------------------------------------------------- input conditions


def _length(row: Any) -> int | None:
    try:
        return len(row)
    except TypeError:
        return None


def _values(row: Any) -> list:
    """A row's values, flattened ([] when they cannot be read: a meta tensor, a scalar)."""
    if isinstance(row, torch.Tensor) and not row.is_nested and row.dim() > 1:
        row = row.reshape(-1)
    return values(row) or []


def _sides(case: Case) -> tuple[list, list] | None:
    """The rows of prompts and of responses (`Call.rows`), or None when either has none (an
    int, a str, None: a bad input that only the domain is about). Predicates are given a
    `Call`; a plain `Case` (a test's) is read the same way."""
    call = case if isinstance(case, Call) else Call.of(case, _contract)
    prompts, responses = call.rows("prompts"), call.rows("responses")
    return None if prompts is None or responses is None else (prompts, responses)


def _pairs(case: Case) -> list[tuple[Any, Any]]:
    """(prompt, response) of each sample; none when `_sides` has no rows."""
    sides = _sides(case)
    return [] if sides is None else list(zip(*sides))


def needs_no_tail_pad(case: Case) -> bool:
    """The domain: inputs the collator can express. It has no tail padding and no pad token, so
    `pad_to_multiple` must be an int >= 1 that already divides sum(p + r) and `pad_token_id` a
    valid id (it is then never written); prompts and responses come in equal numbers (one
    feature per sample); no device; no response token equal to -100 (transformers' ignore
    index marks the non-targets)."""
    call = case if isinstance(case, Call) else Call.of(case, _contract)
    prompts, responses = call.arg("prompts"), call.arg("responses")
    multiple = call.arg("pad_to_multiple", 1)
    pad = call.arg("pad_token_id", 0)
    if call.arg("device") is not None:
        return False
    if not isinstance(pad, int) or isinstance(pad, bool) or not -2**63 <= pad < 2**63:
        return False
    if not isinstance(multiple, int) or isinstance(multiple, bool) or multiple < 1:
        return False
    if not all(isinstance(side, (list, tuple, torch.Tensor)) for side in (prompts, responses)) \
            or _length(prompts) is None or _length(prompts) != _length(responses):
        return False  # (one feature per sample: sequences of rows)
    lengths = [_length(row) for row in (*prompts, *responses)]
    if any(n is None for n in lengths) or sum(lengths) % multiple != 0:
        return False
    return not any(v == IGNORE for row in responses for v in _values(row)
                   if isinstance(v, int))


def has_empty_sample(case: Case) -> bool:
    """A sample with p + r == 0 (an empty feature)."""
    return any(_length(p) == 0 and _length(r) == 0 for p, r in _pairs(case))


def is_empty_batch(case: Case) -> bool:
    call = case if isinstance(case, Call) else Call.of(case, _contract)
    return _length(call.arg("prompts")) == 0


def has_empty_prompt_with_response(case: Case) -> bool:
    return any(_length(p) == 0 and (_length(r) or 0) > 0 for p, r in _pairs(case))


def _not_int_id(value: Any) -> bool:
    return isinstance(value, (bool, float))


def has_float_or_bool_id(case: Case) -> bool:
    """A float or bool token id in a list row, or a row that is a float or bool tensor."""
    for row in (row for pair in _pairs(case) for row in pair):
        if isinstance(row, torch.Tensor):
            if row.dtype.is_floating_point or row.dtype == torch.bool:
                return True
        elif isinstance(row, (list, tuple)) and any(_not_int_id(v) for v in row):
            return True
    return False


def first_token_is_str(case: Case) -> bool:
    """The packed row starts with a str (a str row contributes its characters): torch infers a
    shape from the first element and raises ValueError ('too many dimensions'); a str later in
    the row raises TypeError, the contract's type."""
    for prompt, response in _pairs(case):
        for row in (prompt, response):
            if not isinstance(row, torch.Tensor) and _length(row):
                return isinstance(row, str) or isinstance(next(iter(row), None), str)
            if isinstance(row, torch.Tensor) and row.numel():
                return False
    return False


def token_ids_unchecked(case: Case) -> bool:
    return has_float_or_bool_id(case) or first_token_is_str(case)


def has_multi_dim_row(case: Case) -> bool:
    """A prompt or response given as a tensor with more than one dimension."""
    return any(isinstance(row, torch.Tensor) and row.dim() > 1
               for pair in _pairs(case) for row in pair)


def without_tail_pad(case: Case) -> Case:
    """A drawn `pack_varlen` input made expressible: a `pad_to_multiple` that would need a tail
    pad is dropped (a mapped strategy: filtering those inputs out would throw away about half
    of the draws)."""
    multiple = case.kwargs.get("pad_to_multiple", 1)
    total = sum(len(row) for row in (*case.args[0], *case.args[1]))
    if total % multiple == 0:
        return case
    return Case(case.args, {k: v for k, v in case.kwargs.items() if k != "pad_to_multiple"},
                case.label)


def has_only_empty_samples(case: Case) -> bool:
    """At least one sample, and every one with p + r == 0."""
    pairs = _pairs(case)
    return len(pairs) > 0 and all(_length(p) == 0 and _length(r) == 0 for p, r in pairs)


def skips_empty_examples() -> bool:
    """transformers >= 5.24: empty examples are skipped (no zero-length segment, no extra
    label) and a batch of only empty examples raises ValueError, as does an empty batch — the
    two 5.23 divergences batchproof found are fixed there (docs/frameworks-transformers.md)."""
    from packaging.version import InvalidVersion, Version

    from batchproof.adapters import distribution_version

    try:
        return Version(distribution_version("transformers")) >= Version("5.24")
    except InvalidVersion:  # not installed: the adapter cannot run anyway
        return False


ONLY_EMPTY_SAMPLES_REJECTED = KnownDivergence(
    "only_empty_samples_rejected", has_only_empty_samples, kind="valid", upstream=UPSTREAM,
    raises=ValueError,
    doc="transformers >= 5.24 raises ValueError ('received a batch where every example is "
        "empty') for a batch whose every sample has p + r == 0; the contract packs it into a "
        "row of no tokens (cu_seqlens [0]). A choice, not a wrong number.")


def has_empty_sample_before_a_response(case: Case) -> bool:
    """An empty sample (p + r == 0) before a sample with response tokens."""
    seen_empty = False
    for p, r in _pairs(case):
        seen_empty = seen_empty or (_length(p) == 0 and _length(r) == 0)
        if seen_empty and _length(r):
            return True
    return False


EMPTY_SAMPLE_RENUMBERS_SEQ_IDX = KnownDivergence(
    "empty_sample_renumbers_seq_idx", has_empty_sample_before_a_response, kind="valid",
    upstream=UPSTREAM, fields=("sample_index",),
    doc="transformers >= 5.24 skips an empty example, and `seq_idx` (return_seq_idx=True) then "
        "numbers the examples that remain: a token of feature 3 after an empty feature 2 "
        "gets seq_idx 2, so seq_idx no longer names the feature it came from (the contract's "
        "sample_index does). Found by batchproof check against 5.24.0.")


PACK_VARLEN_KNOWN_5_23 = (
    KnownDivergence(
        "empty_sample_breaks_boundaries_and_labels", has_empty_sample, kind="valid",
        upstream=UPSTREAM,
        fields=("cu_seqlens", "target_index", "predict_index", "sample_index"),
        doc="an empty example (p + r == 0) adds a second, equal boundary to cu_seq_lens (a "
            "zero-length segment; the contract adds none) and, worse, one separator label: "
            "`labels += [separator_id] + labels[1:]` appends one entry for an example of length "
            "0, so labels is one longer than input_ids per empty example and every later label "
            "sits one position to the right of its token (the causal-LM loss then fails on the "
            "shape mismatch). Found by batchproof check. Suggested fix: skip empty features, "
            "or add the separator only when the example is not empty."),
    KnownDivergence(
        "empty_batch_index_error", is_empty_batch, kind="errors", upstream=UPSTREAM,
        raises=IndexError,
        doc="an empty list of features raises IndexError from `features[0]`; the contract "
            "raises ValueError (empty batch)."),
    KnownDivergence(
        "empty_prompt_drops_first_response_token", has_empty_prompt_with_response,
        kind="errors", upstream=UPSTREAM, accepts=True,
        doc="p == 0 < r is accepted: the separator replaces the example's first label, so the "
            "first response token is silently not a target (no cross-sample logit is read, "
            "but one response token leaves the loss); the contract raises ValueError because "
            "that token has no logit in its own segment."),
    KnownDivergence(
        "token_ids_unchecked", token_ids_unchecked, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=ValueError,
        doc="token ids are not checked: `torch.tensor(..., dtype=torch.int64)` truncates a "
            "float id 1.5 to 1 and turns True into 1 (a float tensor row likewise), and a str "
            "as the first token of the row raises ValueError ('too many dimensions'; a str "
            "later in the row raises TypeError, the contract's type); the contract raises "
            "TypeError naming the argument and row."),
    KnownDivergence(
        "multi_dim_row_unchecked", has_multi_dim_row, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=TypeError,
        doc="a 2-D tensor row becomes a nested list: mixed with integer ids torch.tensor raises "
            "TypeError ('not a sequence'); when every token of the batch is such a list (one "
            "sample, no response) it is accepted and input_ids comes out 3-D. The contract "
            "raises ValueError."),
)
# 5.24 fixed the first two (empty examples skipped, an empty batch a ValueError) and added one
PACK_VARLEN_KNOWN_5_24 = (ONLY_EMPTY_SAMPLES_REJECTED, EMPTY_SAMPLE_RENUMBERS_SEQ_IDX,
                          *PACK_VARLEN_KNOWN_5_23[2:])
PACK_VARLEN_KNOWN = PACK_VARLEN_KNOWN_5_24 if skips_empty_examples() else PACK_VARLEN_KNOWN_5_23

PACK_VARLEN = register_adapter(Adapter(
    name="transformers.flattening_collator",
    framework="transformers",
    record="varlen.pack_varlen",
    target="transformers.data.data_collator:DataCollatorWithFlattening",
    wrap=pack_varlen_adapter,
    distribution="transformers",
    versions="~=5.23",
    doc="padding-free collator (one row, restarting position_ids, cu_seq_lens, labels with "
        "separator) against pack_varlen without tail pad",
    devices=("cpu",),
    dtypes=(torch.int64, torch.int32),
    forms=("lists", "tensors"),
    supports=needs_no_tail_pad,
    valid=pack_cases().map(without_tail_pad),
    known=PACK_VARLEN_KNOWN,
    not_provided=("prompt_lengths", "response_lengths"),
))

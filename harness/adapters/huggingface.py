"""Hugging Face transformers adapters (PyPI distribution `transformers`, checked with 5.23.0 and
5.24.0; see docs/frameworks-transformers.md):

    transformers.flattening_collator        DataCollatorWithFlattening    varlen.pack_varlen
    transformers.fa_kwargs_from_position_ids  the flash-attention path's    varlen.packed_segments
                                            boundaries from position_ids
    transformers.packed_sequence_indices    the mask path's               varlen.packed_segments
    transformers.packed_forward             collator + the model's own    varlen.response_logprobs
                                            PyTorch forward (positions)
    transformers.padding_free_forward       the same, with cu_seq_lens    varlen.response_logprobs
                                            and seq_idx passed on

The known divergences of each are the same in 5.23.0 and 5.24.0, except the collator's empty
examples (`skips_empty_examples`).

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

from batchproof.adapters import (
    Adapter,
    Call,
    KnownDivergence,
    register_adapter,
    values,
    without_replay,
)
from batchproof.ops.varlen import LOGPROB_PINS, pack_cases
from batchproof.reference.varlen import pack_varlen as _contract
from batchproof.reference.varlen import packed_segments as _segments_contract
from batchproof.reference.varlen import response_logprobs as _logprobs_contract
from batchproof.registry import BadCase, Case

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

    def pack_varlen(prompts, responses, *, pad_to_multiple=1, pad_token_id=0,
                    position_ids_start=0, device=None):
        if device is not None:
            raise NotImplementedError("the collator returns CPU tensors (no device argument)")
        collator = collator_class(return_flash_attn_kwargs=True, return_seq_idx=True,
                                  separator_id=IGNORE, return_tensors="pt",
                                  position_ids_start=position_ids_start)
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
def start_unchecked(case: Case) -> bool:
    """`position_ids_start` a bool, a float or a negative int: the collator adds it to every
    position without a check. A str raises TypeError on the addition, the contract's type —
    unless there is no token to add it to (every sample empty): then it is accepted too."""
    call = case if isinstance(case, Call) else Call.of(case, _contract)
    start = call.arg("position_ids_start", 0)
    if isinstance(start, (bool, float)) or (isinstance(start, int) and start < 0):
        return True
    prompts, responses = call.lengths("prompts"), call.lengths("responses")
    if prompts is None or responses is None or isinstance(start, int) or start is None:
        return False
    return sum(prompts) + sum(responses) == 0


START_UNCHECKED = KnownDivergence(
    "position_ids_start_unchecked", start_unchecked, kind="errors", upstream=UPSTREAM,
    accepts=True, raises=ValueError,
    doc="position_ids_start is not checked: True counts as 1, 2.0 writes float positions that "
        "torch.tensor(..., dtype=int64) turns back into ints, -1 writes negative positions "
        "(with every sample empty, 5.24 raises its ValueError for that first, and 5.23 accepts "
        "even a str); the contract "
        "raises TypeError (not an int) or ValueError (< 0). Found by batchproof check (5.23.0 "
        "and 5.24.0).")
PACK_VARLEN_KNOWN_5_23 = (*PACK_VARLEN_KNOWN_5_23, START_UNCHECKED)
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
    supports=without_replay(needs_no_tail_pad),  # the collator takes no routes
    valid=pack_cases().map(without_tail_pad),
    known=PACK_VARLEN_KNOWN,
    not_provided=("prompt_lengths", "response_lengths"),
))


# --------------------------------------------------------------------------- boundary detectors
#
# transformers finds the samples of a packed row from its position_ids twice, by two rules:
# the flash-attention path (`prepare_fa_kwargs_from_position_ids`: a segment starts wherever the
# position equals the smallest position of the whole tensor, read flattened) and the mask path
# (`find_packed_sequence_indices`: a segment starts wherever the position does not step by +1).
# Both are checked against `varlen.packed_segments`. On the contract's inputs — rows of samples
# counting up from position_ids_start — the two rules and the contract agree; where they differ
# (a step that is not a restart, [[0, 1, 2, 3, 1, 2]]: one segment for the flash path, two for the
# mask path) the input is not one any packer writes: the contract rejects it, and both detectors
# accept it (the errors divergences below).

FA_UPSTREAM = ("transformers/modeling_flash_attention_utils.py, "
               "prepare_fa_kwargs_from_position_ids (5.23.0, 5.24.0)")
MASK_UPSTREAM = "transformers/masking_utils.py, find_packed_sequence_indices (5.23.0, 5.24.0)"


def _segments_call(case: Case) -> Call:
    return case if isinstance(case, Call) else Call.of(case, _segments_contract)


def fa_kwargs_adapter(prepare: Callable[..., Any]) -> Callable[..., TensorDict]:
    """`prepare_fa_kwargs_from_position_ids` behind `packed_segments`: its `cu_seq_lens_q` and
    `max_length_q` (a 0-d tensor, read with int()); it has no seq_idx and no start (it takes the
    smallest position for the start)."""

    def packed_segments(position_ids, *, position_ids_start=0):
        (cu_seqlens, _), (longest, _) = prepare(position_ids)
        td = TensorDict({"cu_seqlens": cu_seqlens}, batch_size=[])
        td.set_non_tensor("max_seqlen", int(longest))
        return td

    return packed_segments


def packed_indices_adapter(find: Callable[..., Any]) -> Callable[..., TensorDict]:
    """`find_packed_sequence_indices` behind `packed_segments`: its sequence numbers are the
    seq_idx (None, "one sequence per row", is all zeros); cu_seqlens and max_seqlen are where
    the numbers change, read over the flattened rows (a new row starts a segment). It has no
    start (it splits where the position does not step by +1)."""

    def packed_segments(position_ids, *, position_ids_start=0):
        numbers = find(position_ids)
        if numbers is None:
            numbers = torch.zeros(tuple(position_ids.shape), dtype=torch.int64)
        return _segments_of_numbers(numbers)

    return packed_segments


def _segments_of_numbers(numbers: torch.Tensor) -> TensorDict:
    width = numbers.shape[-1] if numbers.dim() else 1
    rows = numbers.reshape(-1, width) if numbers.numel() else numbers.new_zeros((0, width))
    starts = torch.ones(rows.shape, dtype=torch.bool)
    starts[:, 1:] = rows[:, 1:] != rows[:, :-1]
    flat = starts.reshape(-1)
    cu_seqlens = (torch.cat([flat.nonzero().flatten(), torch.tensor([flat.numel()])])
                  if flat.numel() else torch.zeros(1, dtype=torch.int64)).to(torch.int32)
    td = TensorDict({"cu_seqlens": cu_seqlens, "seq_idx": numbers.to(torch.int32)},
                    batch_size=[])
    td.set_non_tensor("max_seqlen", int(cu_seqlens.diff().max()) if flat.numel() else 0)
    return td


def start_expressible(case: Case) -> bool:
    """The detectors' domain: a position_ids_start that is an int >= 0 (a bool excepted). They
    take no start (they infer it), so a bad one has nothing to reach."""
    start = _segments_call(case).arg("position_ids_start", 0)
    return type(start) is int and start >= 0


def _positions(case: Case) -> Any:
    return _segments_call(case).arg("position_ids")


def is_mrope(case: Case) -> bool:
    """(3 | 4, B, L) positions (any 3-D tensor of the contract's)."""
    positions = _positions(case)
    return isinstance(positions, torch.Tensor) and positions.dim() == 3


def has_no_tokens(case: Case) -> bool:
    """(B, L) positions with B * L == 0."""
    positions = _positions(case)
    return isinstance(positions, torch.Tensor) and positions.dim() == 2 \
        and positions.numel() == 0


def has_no_columns(case: Case) -> bool:
    """(B, 0) positions (rows of no column; B = 0 included)."""
    positions = _positions(case)
    return isinstance(positions, torch.Tensor) and positions.dim() == 2 \
        and positions.shape[1] == 0


def is_bad(case: Case) -> bool:
    return not _segments_call(case).valid


FA_KNOWN = (
    KnownDivergence(
        "mrope_planes_read_as_rows", lambda c: is_mrope(c) and not _empty_3d(c), kind="valid",
        upstream=FA_UPSTREAM, fields=("cu_seqlens", "max_seqlen"),
        doc="given (3, B, L) mRoPE positions it flattens all three planes: cu_seq_lens over "
            "3 x B x L tokens, and boundaries wherever any plane holds the minimum (transformers "
            "#44911 is this reading inside _is_packed_sequence; the models pass the text axis "
            "only, so a caller must too). Found by batchproof check."),
    KnownDivergence(
        "no_tokens_raises", lambda c: has_no_tokens(c) or _empty_3d(c), kind="valid",
        upstream=FA_UPSTREAM, raises=RuntimeError,
        doc="position_ids with no element (B = 0 or L = 0): `position_ids.min()` raises "
            "RuntimeError; the contract gives cu_seqlens [0]. Found by batchproof check."),
    KnownDivergence(
        "positions_unchecked", is_bad, kind="errors", upstream=FA_UPSTREAM, accepts=True,
        raises=(AttributeError, RuntimeError),
        doc="nothing is checked: a step that is not a restart ([[0, 1, 2, 3, 1, 2]] is one "
            "segment), a row that does not begin at the start, float or bool positions (or "
            "RuntimeError from them), 1-D or 4-D shapes are all read as some segments; a list "
            "raises AttributeError (`.reshape`). The contract raises ValueError / TypeError. "
            "Found by batchproof check."),
)


def _empty_3d(case: Case) -> bool:
    positions = _positions(case)
    return isinstance(positions, torch.Tensor) and positions.dim() == 3 \
        and positions.numel() == 0


MASK_KNOWN = (
    KnownDivergence(
        "mrope_planes_misread", is_mrope, kind="valid", upstream=MASK_UPSTREAM,
        raises=(RuntimeError, IndexError), fields=("cu_seqlens", "seq_idx", "max_seqlen"),
        doc="given (3, B, L) mRoPE positions its `position_ids[:, :1]` takes the first row of "
            "every plane: with B = 1 the prepended values widen the rows (numbers of shape "
            "(3, 1, 2L - 1)), with B > 1 torch.diff raises RuntimeError. The models pass the "
            "text axis only. Found by batchproof check."),
    KnownDivergence(
        "no_columns_raises", has_no_columns, kind="valid", upstream=MASK_UPSTREAM,
        raises=IndexError,
        doc="rows of no column, (B, 0): `packed_sequence_mask[:, -1]` raises IndexError; the "
            "contract gives cu_seqlens [0] ((0, L) with L > 0 gives None, read as agreeing). "
            "Found by batchproof check."),
    KnownDivergence(
        "positions_unchecked", lambda c: is_bad(c) and isinstance(_positions(c), torch.Tensor),
        kind="errors", upstream=MASK_UPSTREAM, accepts=True,
        raises=(IndexError, RuntimeError),
        doc="nothing is checked: a step that is not a restart ([[0, 1, 2, 3, 1, 2]] is two "
            "segments here, one in the flash-attention path), a row that does not begin at the "
            "start, float positions, other shapes are read as some segments or fail with "
            "IndexError / RuntimeError (a list raises TypeError, as the contract does). The "
            "contract raises ValueError / TypeError. Found by batchproof check."),
)

DETECTOR_SKIP = {
    "property:text_axis_only": "it calls the detector again with (3, B, L) positions, which "
                               "transformers never hands it (the models pass the text axis); "
                               "its reading of them is the known divergence mrope_planes_*"}

FA_KWARGS = register_adapter(Adapter(
    name="transformers.fa_kwargs_from_position_ids",
    framework="transformers",
    record="varlen.packed_segments",
    target="transformers.modeling_flash_attention_utils:prepare_fa_kwargs_from_position_ids",
    wrap=fa_kwargs_adapter,
    distribution="transformers",
    versions="~=5.23",
    doc="the flash-attention path's boundaries from position_ids (a segment starts at the "
        "smallest position) against packed_segments",
    devices=("cpu",),
    forms=("int64",),
    supports=start_expressible,
    known=FA_KNOWN,
    not_provided=("seq_idx",),
    skip=DETECTOR_SKIP,
))

PACKED_SEQUENCE_INDICES = register_adapter(Adapter(
    name="transformers.packed_sequence_indices",
    framework="transformers",
    record="varlen.packed_segments",
    target="transformers.masking_utils:find_packed_sequence_indices",
    wrap=packed_indices_adapter,
    distribution="transformers",
    versions="~=5.23",
    doc="the mask path's sequence numbers from position_ids (a segment starts where the "
        "position does not step by +1) against packed_segments",
    devices=("cpu",),
    forms=("int64",),
    supports=start_expressible,
    known=MASK_KNOWN,
    skip=DETECTOR_SKIP,
))


# --------------------------------------------------------------------------- packed forwards
#
# What a new user does: DataCollatorWithFlattening packs the samples into one row, and the
# model's own PyTorch path forwards it, (a) with the restarting position_ids only, as
# batchproof's impl and the measurement do, (b) with everything the collator returns for
# padding-free training (cu_seq_lens_q/k, max_length_q/k, seq_idx). Checked against
# `varlen.response_logprobs` (per-sample dense forwards) on every family of batchproof.models.

FORWARD_UPSTREAM = ("transformers' PyTorch paths of the model families (modeling_lfm2, "
                    "modeling_qwen3_next, modeling_qwen3_5, modeling_bamba, modeling_nemotron_h, "
                    "modeling_mamba2; 5.23.0, 5.24.0)")
MODEL_TYPES = {"qwen3_5_text": "qwen3_5"}  # config.model_type -> batchproof.models family


def packed_forward_adapter(collator_class: Callable[..., Any], *,
                           boundaries: bool = False) -> Callable[..., torch.Tensor]:
    """The collator's packed row of every sample with tokens, one forward with
    `use_cache=False` (and, with `boundaries`, the collator's cu_seq_lens / max_length / seq_idx
    passed on), the logprob of every label from the logit before it (what transformers' loss
    reads), right-aligned per sample. The budget, padding, packing and chunk keywords change
    nothing in the contract's output and have no counterpart."""

    def response_logprobs(model, prompts, responses, *, max_tokens_per_batch=None,
                          pad_to_multiple=1, packing="auto", chunk_size=1024, with_grad=False):
        pairs = [(_as_list(p), _as_list(r)) for p, r in zip(prompts, responses)]
        widths = [len(r) for _, r in pairs]
        device = next(model.parameters()).device
        width = max(widths, default=0)
        if width == 0:  # nothing to score: no forward
            return torch.zeros((len(pairs), 0), dtype=torch.float32, device=device)
        collator = collator_class(return_flash_attn_kwargs=boundaries, return_seq_idx=boundaries,
                                  separator_id=IGNORE, return_tensors="pt")
        batch = dict(collator([{"input_ids": p + r, "labels": [IGNORE] * len(p) + r}
                               for p, r in pairs if p or r]))
        labels = batch.pop("labels")[0].to(device)
        inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        with torch.set_grad_enabled(with_grad):
            logits = model(**inputs, use_cache=False).logits[0]
            target = (labels != IGNORE).nonzero().flatten()
            scores = torch.log_softmax(logits[target - 1].float(), dim=-1)
            scores = scores.gather(-1, labels[target, None]).squeeze(-1)
            rows, at = [], 0
            for length in widths:
                pad = torch.zeros(width - length, dtype=torch.float32, device=device)
                rows.append(torch.cat([pad, scores[at:at + length]]))
                at += length
            return torch.stack(rows)

    return response_logprobs


def _forward_call(case: Case) -> Call:
    return case if isinstance(case, Call) else Call.of(case, _logprobs_contract)


def model_family(case: Case) -> str | None:
    """The batchproof.models family of the call's model: a `ModelSpec`'s architecture, or a
    model's config.model_type (a property's call passes the model itself); None otherwise."""
    model = _forward_call(case).arg("model")
    arch = getattr(model, "arch", None)
    if isinstance(arch, str):
        return arch
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    return MODEL_TYPES.get(model_type, model_type) if isinstance(model_type, str) else None


def _lengths_of(case: Case) -> list[tuple[int, int]]:
    call = _forward_call(case)
    prompts, responses = call.lengths("prompts"), call.lengths("responses")
    if prompts is None or responses is None:
        return []
    return list(zip(prompts, responses))


def response_after_a_sample(case: Case) -> bool:
    """A sample with response tokens after a sample with tokens: packed, it follows another
    sample in the row."""
    seen = False
    for p, r in _lengths_of(case):
        if seen and r > 0:
            return True
        seen = seen or p + r > 0
    return False


def has_a_response(case: Case) -> bool:
    return any(r > 0 for _, r in _lengths_of(case))


# families whose layers carry state along the row outside attention (batchproof.models)
HYBRID_DOCS = {
    "lfm2": "LFM2's short convolution (kernel 3)",
    "qwen3_next": "Qwen3-Next's gated delta net and its short convolution",
    "qwen3_5": "Qwen3.5's gated delta net and its short convolution",
    "bamba": "Bamba's Mamba2 mixer (scan and convolution)",
    "nemotron_h": "Nemotron-H's Mamba2 mixer (scan and convolution)",
    "mamba2": "Mamba2's mixers (scan and convolution)",
}


def _leak(arch: str, *, also: str = "") -> KnownDivergence:
    return KnownDivergence(
        f"{arch}_state_crosses_packed_samples",
        lambda c, _a=arch: model_family(c) == _a and response_after_a_sample(c),
        kind="valid", upstream=FORWARD_UPSTREAM, fields=("",),
        doc=f"{HYBRID_DOCS[arch]}: transformers' PyTorch path gives these layers no "
            f"boundaries and runs them over the whole packed row, so every sample after the "
            f"first starts from the previous sample's state and its logprobs differ from its "
            f"own forward (the first sample's agree){also}. Not safe to pack with this path; "
            f"score one sample per row (impl's packing='auto' / 'rows'). Found by batchproof "
            f"check (5.23.0, 5.24.0).")


def _refused(arch: str) -> KnownDivergence:
    return KnownDivergence(
        f"{arch}_packed_boundaries_refused",
        lambda c, _a=arch: model_family(c) == _a and has_a_response(c),
        kind="valid", upstream=FORWARD_UPSTREAM, raises=ValueError,
        doc=f"given the collator's cu_seq_lens / seq_idx, the PyTorch fallback of "
            f"{HYBRID_DOCS[arch]} refuses them: ValueError \"`causal_conv1d_fn` can't keep "
            f"packed sequences apart without `causal_conv1d`\" (a loud error, the right answer "
            f"without the kernels). Found by batchproof check (5.23.0, 5.24.0).")


POSITION_IDS_FORWARD_KNOWN = tuple(_leak(arch) for arch in HYBRID_DOCS)
BOUNDARIES_FORWARD_KNOWN = (
    *(_refused(arch) for arch in HYBRID_DOCS if arch != "mamba2"),
    _leak("mamba2", also=", although the collator's seq_idx is passed to the model: Mamba2's "
                         "PyTorch path drops it without a word"),
)
_NO_CHECKS = ("a model's forward is not the contract's argument checks: the budget, packing, "
              "chunk and vocabulary checks have no counterpart in transformers")
FORWARD_SKIP = {"errors": _NO_CHECKS,
                **{f"pin:{pin.name}": _NO_CHECKS for pin in LOGPROB_PINS
                   if isinstance(pin.case, BadCase)}}

PACKED_FORWARD = register_adapter(Adapter(
    name="transformers.packed_forward",
    framework="transformers",
    record="varlen.response_logprobs",
    target="transformers.data.data_collator:DataCollatorWithFlattening",
    wrap=packed_forward_adapter,
    distribution="transformers",
    versions="~=5.23",
    doc="one packed row (the flattening collator), forwarded with restarting position_ids and "
        "use_cache=False, against per-sample forwards",
    devices=("cpu",),
    forms=("lists",),
    known=POSITION_IDS_FORWARD_KNOWN,
    skip=FORWARD_SKIP,
))

PADDING_FREE_FORWARD = register_adapter(Adapter(
    name="transformers.padding_free_forward",
    framework="transformers",
    record="varlen.response_logprobs",
    target="transformers.data.data_collator:DataCollatorWithFlattening",
    wrap=lambda collator_class: packed_forward_adapter(collator_class, boundaries=True),
    distribution="transformers",
    versions="~=5.23",
    doc="one packed row forwarded with everything the flattening collator returns for "
        "padding-free training (position_ids, cu_seq_lens, max_length, seq_idx)",
    devices=("cpu",),
    forms=("lists",),
    known=BOUNDARIES_FORWARD_KNOWN,
    skip=FORWARD_SKIP,
))

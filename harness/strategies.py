"""Hypothesis strategies for the inputs of LLM post-training batch layout code (public API).

Use them in your own property tests, beside (or instead of) `batchproof.check`::

    from hypothesis import given
    import batchproof.strategies as bps

    @given(bps.rl_batch_inputs(layouts=["left"], rewards=["scalar"]))
    def test_my_collate_keeps_every_token(inputs):
        batch = my_collate(inputs["prompts"], inputs["responses"],
                           pad_token_id=inputs["pad_token_id"], rewards=inputs["rewards"])
        ...

Every function returns a strategy; every option is keyword-only and checked when the strategy is
built (`hypothesis.errors.InvalidArgument`, naming the option). Sizes default to what keeps one
example in the milliseconds; the shapes that broke real collators are always in the mix:
anti-correlated prompt/response lengths (multi-turn steps), empty prompts, empty responses,
empty rows, one very long row, token ids equal to the pad id.

Strategies that draw the inputs of a contract function (`rl_batch_inputs`, `inputs`) draw a
`dict` of its arguments by name: call it as `fn(**inputs)`. The others draw plain data: rows,
configs, TensorDicts. Input forms: `"lists"` (lists of Python ints), `"tensors"` (a list of 1-D
tensors), `"jagged"` (one torch jagged nested tensor).

Nothing here touches torch's global random generator.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from tensordict import TensorDict

from batchproof import blocks
from batchproof.ops.sft import ParallelConfig

__all__ = [
    "ParallelConfig",
    "inputs",
    "packed_varlen_samples",
    "parallel_configs",
    "prompt_response_rows",
    "rl_batch_inputs",
    "sft_examples",
    "verl_batches",
]

FORMS = ("lists", "tensors", "jagged")
LAYOUTS = ("left", "two_segment")
REWARDS = ("none", "per_token", "scalar", "mixed")
LOSS_MASKS = ("binary", "bools", "weights", "floats")
ATTENTION_MASKS = ("absent", "ones", "zeros")
FP8_RECIPES = ("tensorwise", "blockwise", "mxfp8")


# --------------------------------------------------------------------------- rows


def prompt_response_rows(
    *,
    min_rows: int = 1,
    max_rows: int = blocks.MAX_ROWS,
    min_prompt_len: int = 0,
    max_prompt_len: int = blocks.MAX_LEN,
    min_response_len: int = 0,
    max_response_len: int = blocks.MAX_LEN,
    vocab_size: int = blocks.VOCAB,
    form: str = "lists",
) -> st.SearchStrategy[tuple[Any, Any]]:
    """Per-sample prompt and response token rows: `(prompts, responses)`.

    The lengths come in the shapes that break layouts, one per example: independent;
    anti-correlated (turn k of a multi-turn trajectory: the prompt grows by what came before,
    the response shrinks); all equal; every prompt empty; every response empty; empty rows
    mixed in. Token ids are in `[0, vocab_size)`, half of them in `[0, 4)`, so ids equal to the
    usual pad ids (0, 1) sit among the real tokens. Shrinks toward fewer, shorter rows and
    toward id 0.

    `form`: `"lists"` (lists of ints), `"tensors"` (lists of int64 tensors) or `"jagged"` (two
    int64 jagged nested tensors).

    >>> rows = prompt_response_rows(max_rows=3, max_prompt_len=4, max_response_len=4)
    >>> prompts, responses = rows.example()
    >>> len(prompts) == len(responses) <= 3
    True
    """
    _check_range("rows", min_rows, max_rows, low=1)
    _check_range("prompt_len", min_prompt_len, max_prompt_len)
    _check_range("response_len", min_response_len, max_response_len)
    _check_int("vocab_size", vocab_size, low=1)
    _check_choice("form", form, FORMS)
    pairs = blocks.length_pairs(min_rows=min_rows, max_rows=max_rows,
                                min_prompt=min_prompt_len, max_prompt=max_prompt_len,
                                min_response=min_response_len, max_response=max_response_len)

    def rows(lengths: list[tuple[int, int]]):
        return st.tuples(blocks.token_rows([p for p, _ in lengths], vocab=vocab_size),
                         blocks.token_rows([r for _, r in lengths], vocab=vocab_size))

    return pairs.flatmap(rows).map(lambda both: tuple(_token_form(r, form) for r in both))


def _token_form(rows: list[list[int]], form: str) -> Any:
    if form == "tensors":
        return blocks.tensor_rows(rows, torch.int64)
    if form == "jagged":
        return blocks.jagged(rows, torch.int64)
    return rows


# --------------------------------------------------------------------------- rl_batch


def rl_batch_inputs(
    *,
    layouts: Sequence[str] = LAYOUTS,
    form: str = "lists",
    rewards: Sequence[str] = REWARDS,
    loss_masks: bool | None = None,
    logprobs: bool | None = None,
    max_seq_len: bool | None = None,
    pad_token_ids: Sequence[int] = (0, 1, 49),
    min_rows: int = 1,
    max_rows: int = blocks.MAX_ROWS,
    max_prompt_len: int = blocks.MAX_LEN,
    max_response_len: int = blocks.MAX_LEN,
) -> st.SearchStrategy[dict[str, Any]]:
    """Valid arguments of `rl_batch.build_rl_batch` (docs/rl_batch.md), by name.

    Draws `prompts`, `responses` (see `prompt_response_rows`), `pad_token_id` (from
    `pad_token_ids`), and sometimes `layout` (from `layouts`; `"left"` may be left implicit),
    `rewards`, `loss_masks` (0/1 ints or float weights), `logprobs` (float32-exact values:
    -0.0, subnormals, huge magnitudes) and `max_seq_len` (near the tight width, on both sides).

    `rewards`: the kinds to draw from: `"none"` (not passed), `"per_token"` (one list per
    response), `"scalar"` (one float per sample: the outcome reward on the last response
    token), `"mixed"` (both in one batch). `rewards=["none", "per_token"]` turns scalar rewards
    off; `rewards=["scalar"]` always passes them. `loss_masks`, `logprobs`, `max_seq_len`: None
    draws whether to pass each, True always passes it, False never does.

    `form`: the form of the token rows and of the per-token lists (`"tensors"`: float32 tensors
    for the per-token values; `"jagged"`: jagged nested tensors for both).

    >>> from batchproof.impl.rl_batch import build_rl_batch
    >>> inputs = rl_batch_inputs(layouts=["left"], rewards=["scalar"]).example()
    >>> batch = build_rl_batch(**inputs)
    >>> batch["rewards"].shape[0] == len(inputs["prompts"])
    True
    """
    from batchproof.ops.rl_batch import rl_batch_cases
    from batchproof.registry import get

    _check_subset("layouts", layouts, LAYOUTS)
    _check_subset("rewards", rewards, REWARDS)
    _check_choice("form", form, FORMS)
    for name, value in (("loss_masks", loss_masks), ("logprobs", logprobs),
                        ("max_seq_len", max_seq_len)):
        _check_tristate(name, value)
    _check_ints("pad_token_ids", pad_token_ids)
    _check_range("rows", min_rows, max_rows, low=1)
    _check_int("max_prompt_len", max_prompt_len, low=0)
    _check_int("max_response_len", max_response_len, low=0)
    pairs = blocks.length_pairs(min_rows=min_rows, max_rows=max_rows,
                                max_prompt=max_prompt_len, max_response=max_response_len)
    cases = rl_batch_cases(layouts=tuple(layouts), pairs=pairs, pad_token_ids=tuple(pad_token_ids),
                           rewards=tuple(rewards), loss_masks=loss_masks, logprobs=logprobs,
                           max_seq_len=max_seq_len)
    info = get("rl_batch.build_rl_batch")
    return cases.map(lambda case: _arguments(info, info.forms[form](case)))


# --------------------------------------------------------------------------- sft


def sft_examples(
    *,
    min_examples: int = 1,
    max_examples: int = 6,
    max_len: int = blocks.MAX_LEN,
    loss_masks: Sequence[str] = LOSS_MASKS,
    attention_masks: Sequence[str] | None = None,
    packed: bool = False,
    form: str = "lists",
) -> st.SearchStrategy[Any]:
    """SFT examples as `collate_sft` / `pack_sft` take them (docs/sft.md).

    Each example is a dict: `input_ids` (1 to `max_len` tokens, pad-id collisions included),
    `num_actions` (in [1, len]; the whole sequence and one token favoured), `loss_mask`
    (`num_actions` values), and sometimes `attention_mask`. `loss_masks`: the kinds drawn
    (one per batch): `"binary"` (0/1 ints with interior zeros), `"bools"`, `"weights"` (floats
    such as 0.5, 2.0, -0.0, 1e-40), `"floats"` (any float32-exact value). `attention_masks`:
    `"absent"`, `"ones"`, `"zeros"` (0/1 with interior zeros, as ints, bools or floats) per
    example; default all three, or `"absent"` and `"ones"` when `packed` (packing needs every
    token attended).

    `form`: `"lists"` (dicts of lists), `"tensors"` (dicts of tensors: int64 ids and masks,
    float64 loss masks) or `"jagged"` (one TensorDict of jagged fields, float32 loss masks).

    >>> from batchproof.impl.sft import collate_sft
    >>> examples = sft_examples(max_examples=3, loss_masks=["binary"]).example()
    >>> collate_sft(examples, pad_token_id=0)["input_ids"].shape[0] == len(examples)
    True
    """
    from batchproof.ops.sft import ATTENTION_KINDS, LOSS_KINDS
    from batchproof.ops.sft import FORMS as SFT_FORMS
    from batchproof.ops.sft import sft_examples as drawn_examples
    from batchproof.registry import Case

    _check_range("examples", min_examples, max_examples, low=1)
    _check_int("max_len", max_len, low=1)
    _check_subset("loss_masks", loss_masks, LOSS_KINDS)
    if attention_masks is not None:
        _check_subset("attention_masks", attention_masks, ATTENTION_KINDS)
        if packed and "zeros" in attention_masks:
            raise InvalidArgument("attention_masks: 'zeros' cannot be packed (pack_sft needs "
                                  "every token attended); use 'absent' and 'ones'")
    _check_choice("form", form, FORMS)
    drawn = drawn_examples(min_size=min_examples, max_size=max_examples, packed=packed,
                           max_len=max_len, loss_kinds=tuple(loss_masks),
                           attention_kinds=None if attention_masks is None
                           else tuple(attention_masks))
    if form == "lists":
        return drawn
    convert = SFT_FORMS[form]  # the record's own input forms: "tensors", "jagged"
    return drawn.map(lambda examples: convert(Case((examples,))).args[0])


def parallel_configs(
    *, max_dp: int = 4, max_tp: int = 4, max_pp: int = 4, max_cp: int = 4,
    fp8: bool | None = None, fp8_recipes: Sequence[str] = FP8_RECIPES,
) -> st.SearchStrategy[ParallelConfig]:
    """Data/tensor/pipeline/context parallel sizes, the FP8 flag and recipe: a `ParallelConfig`
    (`.dp`, `.tp`, `.pp`, `.cp`, `.fp8`, `.fp8_recipe`; `.kwargs()` gives `pack_sft`'s
    `dp_size=...` keywords).

    Each size is in [1, its maximum]; the configurations that broke packers in practice
    ((2, 1, 1, 2), (1, 2, 1, 2), (2, 1, 2, 1), (4, 1, 1, 4) as dp, tp, pp, cp) are drawn first
    when they fit. `fp8`: None draws it, True or False fixes it. `fp8_recipes`: the recipes
    drawn, of "tensorwise" (per-tensor scaling), "blockwise", "mxfp8" (docs/sft.md).

    >>> config = parallel_configs(max_tp=1, fp8=False).example()
    >>> config.tp, config.fp8
    (1, False)
    """
    for name, value in (("max_dp", max_dp), ("max_tp", max_tp), ("max_pp", max_pp),
                        ("max_cp", max_cp)):
        _check_int(name, value, low=1)
    _check_tristate("fp8", fp8)
    _check_subset("fp8_recipes", fp8_recipes, FP8_RECIPES)
    from batchproof.ops.sft import parallel_configs as drawn_configs

    return drawn_configs(max_dp=max_dp, max_tp=max_tp, max_pp=max_pp, max_cp=max_cp, fp8=fp8,
                         fp8_recipes=tuple(fp8_recipes))


# --------------------------------------------------------------------------- verl, varlen


def verl_batches(
    *,
    min_rows: int = 1,
    max_rows: int = blocks.MAX_ROWS,
    max_prompt_len: int = 6,
    max_response_len: int = 8,
    pad_token_id: int = 0,
    orphans: bool = True,
) -> st.SearchStrategy[TensorDict]:
    """Padded batches in verl's layout (docs/nesting.md), as one `TensorDict` of batch size [B]:

        input_ids, attention_mask, position_ids    (B, P + R); prompts right-aligned in P,
                                                    responses left-aligned in R
        prompts (B, P), responses (B, R), response_mask (B, R: 0 on tool-output tokens inside
        the response), loss_mask, and sometimes float response fields (old_log_probs, ...),
        multi-axis position_ids (B, C, S), routed_experts, bool/int32/float masks, extra
        per-sample and non-tensor entries, `max_response_length` (a non-tensor entry).

    Pad tokens are `pad_token_id`; real tokens are in [0, 9), so some equal it. `orphans=False`
    leaves out rows with an empty prompt and a non-empty response (verl's `extract_response`
    rejects those).

    >>> from batchproof.impl.nesting import nest_by_mask
    >>> batch = verl_batches(pad_token_id=0).example()
    >>> nested = nest_by_mask(batch, pad_token_id=0)
    """
    from batchproof.ops.nesting import verl_batches as drawn_batches

    _check_range("rows", min_rows, max_rows, low=1)
    _check_int("max_prompt_len", max_prompt_len, low=0)
    _check_int("max_response_len", max_response_len, low=0)
    _check_ints("pad_token_id", [pad_token_id])
    pairs = blocks.length_pairs(min_rows=min_rows, max_rows=max_rows,
                                max_prompt=max_prompt_len, max_response=max_response_len)
    return drawn_batches(orphans=orphans, pairs=pairs,
                         pad_token_ids=(pad_token_id,)).map(lambda drawn: drawn[0])


def packed_varlen_samples(
    *,
    min_rows: int = 1,
    max_rows: int = blocks.MAX_ROWS,
    max_len: int = blocks.MAX_LEN,
    pad_to_multiple: Sequence[int] = (1, 2, 3, 4, 8),
    pad_token_id: int = 0,
) -> st.SearchStrategy[TensorDict]:
    """Samples packed into one varlen row, as `varlen.pack_varlen` lays them out (docs/varlen.md):

        input_ids, position_ids   (1, T): every sample's prompt + response, positions
                                  restarting at 0 per sample, a tail pad segment to a multiple
        cu_seqlens                int32 sample boundaries (empty samples add none)
        prompt_lengths, response_lengths, predict_index, target_index, sample_index
        max_seqlen                a non-tensor entry

    Sample lengths come in the shapes of `prompt_response_rows` (empty prompts only with empty
    responses: a response needs a token before it); `pad_to_multiple` is drawn from the given
    values. Built by the oracle, `batchproof.reference.varlen.pack_varlen`.

    >>> packed = packed_varlen_samples(pad_to_multiple=[4]).example()
    >>> packed["input_ids"].shape[1] % 4
    0
    """
    from batchproof.ops.varlen import samples
    from batchproof.reference.varlen import pack_varlen

    _check_range("rows", min_rows, max_rows, low=1)
    _check_int("max_len", max_len, low=0)
    _check_ints("pad_to_multiple", pad_to_multiple, low=1)
    _check_ints("pad_token_id", [pad_token_id])
    drawn = st.tuples(samples(min_rows=min_rows, max_rows=max_rows, max_len=max_len),
                      st.sampled_from(list(pad_to_multiple)))
    return drawn.map(lambda t: pack_varlen(*t[0], pad_to_multiple=t[1],
                                           pad_token_id=pad_token_id))


# --------------------------------------------------------------------------- any record


def inputs(record: str, *, form: str | None = None) -> st.SearchStrategy[dict[str, Any]]:
    """Valid arguments of any contract function, by name: what `batchproof.check` draws for
    `record` (`"rl_batch.build_rl_batch"`, `"varlen.unpad"`, ...; `batchproof list records`).

    `form`: one of the record's input forms (`batchproof list records`); default its first,
    `"lists"` where it has one.

    >>> from batchproof.impl.varlen import pack_varlen
    >>> packed = pack_varlen(**inputs("varlen.pack_varlen", form="jagged").example())
    """
    from batchproof.registry import get

    try:
        info = get(record)
    except ValueError as err:
        raise InvalidArgument(f"record: {err}") from None
    if info.missing():
        raise InvalidArgument(f"record: {record} needs {', '.join(info.missing())}")
    chosen = form if form is not None else next(iter(info.forms))
    _check_choice("form", chosen, tuple(info.forms))
    return info.valid.map(lambda case: _arguments(info, info.forms[chosen](case)))


def _arguments(info, case) -> dict[str, Any]:
    """A case's arguments by the names of the contract function's parameters."""
    bound = inspect.signature(info.reference).bind(*case.args, **dict(case.kwargs))
    return dict(bound.arguments)


# --------------------------------------------------------------------------- argument checks


def _check_int(name: str, value: Any, *, low: int = 0) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{name}={value!r}: expected an int")
    if value < low:
        raise InvalidArgument(f"{name}={value!r}: must be at least {low}")


def _check_range(name: str, low_value: Any, high_value: Any, *, low: int = 0) -> None:
    _check_int(f"min_{name}", low_value, low=low)
    _check_int(f"max_{name}", high_value, low=low)
    if high_value < low_value:
        raise InvalidArgument(f"max_{name}={high_value!r} < min_{name}={low_value!r}")


def _check_ints(name: str, values: Any, *, low: int | None = None) -> None:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise InvalidArgument(f"{name}={values!r}: expected a non-empty sequence of ints")
    for value in values:
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgument(f"{name}: {value!r} is not an int")
        if not -2**63 <= value < 2**63 or (low is not None and value < low):
            bound = f"at least {low}" if low is not None else "an int64"
            raise InvalidArgument(f"{name}: {value!r} must be {bound}")


def _check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise InvalidArgument(f"{name}={value!r}: expected one of {list(choices)}")


def _check_subset(name: str, values: Any, choices: Sequence[str]) -> None:
    if isinstance(values, str) or not isinstance(values, Sequence) or not values:
        raise InvalidArgument(f"{name}={values!r}: expected a non-empty sequence of "
                              f"{list(choices)}")
    for value in values:
        _check_choice(name, value, choices)


def _check_tristate(name: str, value: Any) -> None:
    if value not in (None, True, False):
        raise InvalidArgument(f"{name}={value!r}: expected None (drawn), True or False")

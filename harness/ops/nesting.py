"""Registry records for `nesting` (spec: nesting.md): `nest_by_mask`, `unnest_by_mask`,
`chunk_nested`, `extract_response`, `pad_to_response_width`, `payload_report`.

Inputs are verl-layout batches (`prompts` left-padded to P, `responses` right-padded to R, the
sequence tensors `cat(prompts, responses)`), built from `rl_batch`'s `two_segment` layout and
extended with what breaks nesting: tool tokens (holes) inside `response_mask`, empty prompts and
responses, all-zero trailing (and leading) columns, (B, C, S) multi-axis `position_ids`, fields
with trailing feature dims, per-sample and non-tensor entries, masks of several dtypes.

The properties never trust the implementation's rules table: they use `SPEC_RULES`, a copy of the
spec's table written out here, so a bug in the table itself (a field on the wrong mask, a missing
alias) is caught. Helpers that a property calls (the reference's unnest, nest) are looked up at
call time, so a planted `oracle` zoo entry is seen by them too.
"""

from __future__ import annotations

import functools
import io
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from tensordict import NonTensorStack, TensorDict, TensorDictBase

import batchproof.reference.nesting as ref_nesting
from batchproof import blocks as hs
from batchproof.compare import assert_identical
from batchproof.reference.rl_batch import build_rl_batch
from batchproof.registry import BadCase, Case, OpInfo, Paths, Pin, Property, register

# --------------------------------------------------------------------------- the spec's table

PAD = "PAD_TOKEN_ID"
_RESPONSE_FLOATS = ("old_log_probs", "ref_log_prob", "rollout_log_probs", "entropys",
                    "loss_mask", "advantages", "returns", "values", "token_level_scores",
                    "token_level_rewards", "rm_scores", "rollout_is_weights", "rewards",
                    "rollout_logprobs")
SPEC_RULES: dict[str, tuple[str, Any]] = {
    "input_ids": ("attention_mask", PAD),
    "teacher_ids": ("attention_mask", PAD),
    "position_ids": ("attention_mask", 0),
    "routed_experts": ("attention_mask", 0),
    "teacher_logprobs": ("attention_mask", 0.0),
    "prompts": ("prompt_mask", PAD),
    "responses": ("response_attention_mask", PAD),
    "response_mask": ("response_attention_mask", 0),
    **{name: ("response_attention_mask", 0.0) for name in _RESPONSE_FLOATS},
}
"""nesting.md's default rules, written out independently of `reference.nesting.DEFAULT_RULES`."""

RESPONSE_FLOAT_CHOICES = ("old_log_probs", "advantages", "entropys", "returns", "ref_log_prob")
EXTRA_DENSE = "attention_bias"  # a (B, S) field no rule knows

# --------------------------------------------------------------------------- batch builders


def extend_to_verl(
    base: TensorDict,
    *,
    holes: list[list[int]],
    floats: dict[str, torch.Tensor | list[list[float]]],
    lead: int = 0,
    trail: int = 0,
    channels: int = 0,
    experts: bool = False,
    mask_dtype: torch.dtype = torch.int64,
    max_response_length: str = "keep",
    drop: tuple[str, ...] = (),
    extras: bool = False,
) -> TensorDict:
    """verl's batch from an `rl_batch` two_segment batch (P0 = max p, R0 = max r):

        lead zero columns | prompt (right-aligned in P0) | response (left-aligned in R0) | trail
        P = lead + P0                                       R = R0 + trail

    holes[i]: 0/1 per response token (0 = tool output: real, attended, not trained).
    floats: response-axis float fields, R values per row (junk beyond r_i on purpose).
    max_response_length: "keep" (R0, so an input R smaller than the response width wins),
    "width" (R) or "drop".
    """
    pad = base.get_non_tensor("pad_token_id")
    batch, r0 = base["response_mask"].shape
    width0 = base["input_ids"].shape[1]
    prompt_width = lead + width0 - r0

    def widen(t: torch.Tensor, fill, left: int, right: int) -> torch.Tensor:
        out = torch.full((batch, left + t.shape[1] + right), fill, dtype=t.dtype)
        out[:, left:left + t.shape[1]] = t
        return out

    ids = widen(base["input_ids"], pad, lead, trail)
    attention = widen(base["attention_mask"], 0, lead, trail)
    positions = widen(base["position_ids"], 0, lead, trail)
    response_attention = attention[:, prompt_width:]
    trained = torch.zeros_like(response_attention)
    for i, row in enumerate(holes):
        trained[i, :len(row)] = torch.tensor(row, dtype=torch.int64)
    response_mask = response_attention * trained
    td = TensorDict({
        "input_ids": ids,
        "attention_mask": attention.to(mask_dtype),
        "position_ids": _multi_axis(positions, channels),
        "prompts": ids[:, :prompt_width].clone(),
        "responses": ids[:, prompt_width:].clone(),
        "response_mask": response_mask,
        "loss_mask": response_mask.to(torch.float32),
    }, batch_size=[batch])
    for name, rows in floats.items():
        value = rows if isinstance(rows, torch.Tensor) else torch.tensor(rows, dtype=torch.float32)
        td[name] = value.reshape(batch, r0 + trail)
    if experts:
        td["routed_experts"] = torch.stack([ids % 7, ids % 3], dim=-1)
    if extras:
        td["seq_score"] = torch.arange(batch, dtype=torch.float32) - 0.5
        td["uid"] = NonTensorStack(*[f"uid-{i}" for i in range(batch)])
        td.set_non_tensor("global_step", 3)
    if max_response_length == "keep":
        td.set_non_tensor("max_response_length", r0)
    elif max_response_length == "width":
        td.set_non_tensor("max_response_length", r0 + trail)
    for key in drop:
        del td[key]
    return td


def _multi_axis(positions: torch.Tensor, channels: int) -> torch.Tensor:
    """(B, S) positions, or (B, C, S) multi-axis ones (channel c shifted by c)."""
    if channels == 0:
        return positions
    return torch.stack([positions + c for c in range(channels)], dim=1)


def synthetic_verl_batch(
    prompt_lengths: torch.Tensor,
    response_lengths: torch.Tensor,
    *,
    max_prompt: int,
    max_response: int,
    generator: torch.Generator,
    pad_token_id: int = 0,
    tool_fraction: float = 0.1,
) -> TensorDict:
    """A large verl-layout batch built with vectorized torch (benchmarks, wide strategy cases):
    the default field set with random token ids, 10% tool tokens inside responses, float
    response fields, a per-sample field and non-tensor entries."""
    batch, width = prompt_lengths.numel(), max_prompt + max_response
    columns = torch.arange(width)
    attention = ((columns >= (max_prompt - prompt_lengths)[:, None])
                 & (columns < (max_prompt + response_lengths)[:, None]))
    ids = torch.randint(1, 32000, (batch, width), generator=generator)
    ids.masked_fill_(~attention, pad_token_id)
    response_attention = attention[:, max_prompt:]
    tools = torch.rand(batch, max_response, generator=generator) < tool_fraction
    response_mask = (response_attention & ~tools).long()

    def per_token(scale: float) -> torch.Tensor:
        return torch.randn(batch, max_response, generator=generator) * scale * response_attention

    td = TensorDict({
        "input_ids": ids,
        "attention_mask": attention.long(),
        "position_ids": (attention.long().cumsum(1) - 1).clamp(min=0),
        "prompts": ids[:, :max_prompt].clone(),
        "responses": ids[:, max_prompt:].clone(),
        "response_mask": response_mask,
        "loss_mask": response_mask.float(),
        "old_log_probs": per_token(1.0).abs().neg(),
        "ref_log_prob": per_token(1.0).abs().neg(),
        "advantages": per_token(1.0),
        "token_level_rewards": per_token(0.1),
        "seq_score": torch.randn(batch, generator=generator),
    }, batch_size=[batch])
    td.set_non_tensor("max_response_length", max_response)
    td.set_non_tensor("global_step", 7)
    return td


def verl_like_lengths(
    batch: int, max_prompt: int, max_response: int, fill: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lengths shaped like the verl run (prompts up to max_prompt, heavy-tailed responses, one
    row at max_response) whose real tokens fill about `fill` of the batch."""
    prompts = torch.randint(max(max_prompt // 32, 1), max_prompt + 1, (batch,),
                            generator=generator)
    budget = fill * batch * (max_prompt + max_response) - float(prompts.sum()) - max_response
    mean = max(budget / batch, 1.0)
    draws = -mean * torch.log(torch.rand(batch, generator=generator))
    responses = draws.long().clamp(0, max_response)
    responses[0] = max_response
    return prompts, responses


# --------------------------------------------------------------------------- strategies


@st.composite
def verl_batches(draw, *, orphans: bool = True, wide: bool = False,
                 pairs: st.SearchStrategy[list[tuple[int, int]]] | None = None,
                 pad_token_ids: Sequence[int] = (0, 1, 7)) -> tuple[TensorDict, int]:
    """(verl-layout batch, pad_token_id). `orphans=False`: no row with an empty prompt and a
    non-empty response (extract_response rejects those). `wide`: a few rows of 1,000+ real
    tokens (vectorized builder). `pairs`: the (prompt, response) lengths (default: up to 6 and
    8 tokens)."""
    if wide:
        return draw(_wide_batches())
    pairs = draw(pairs if pairs is not None else hs.length_pairs(max_prompt=6, max_response=8))
    if not orphans:
        pairs = [(max(p, 1) if r else p, r) for p, r in pairs]
    p_lens, r_lens = [p for p, _ in pairs], [r for _, r in pairs]
    pad = draw(st.sampled_from(list(pad_token_ids)))
    generator = draw(hs.generators())  # contents: nesting never looks at values
    prompts, responses = _token_rows(p_lens, generator), _token_rows(r_lens, generator)
    base = build_rl_batch(prompts, responses, pad_token_id=pad, layout="two_segment")
    r0 = max(r_lens)
    lead, trail = draw(st.integers(0, 1)), draw(st.integers(0, 2))
    names = draw(st.lists(st.sampled_from(RESPONSE_FLOAT_CHOICES), max_size=2, unique=True))
    floats = {name: special_floats((len(pairs), r0 + trail), generator).to(draw(hs.float_dtypes()))
              for name in names}
    holes = [(torch.rand(r, generator=generator) > 0.3).long().tolist() for r in r_lens]
    mode = draw(st.sampled_from(["keep", "width", "drop"]))
    drop = draw(st.sampled_from([(), (), ("prompts",), ("responses",)]))
    if drop == ("prompts",) and mode == "keep" and trail:
        mode = "width"  # without prompts, P = S - R needs R to be the response width
    td = extend_to_verl(
        base,
        holes=holes,
        floats=floats,
        lead=lead,
        trail=trail,
        channels=draw(st.sampled_from([0, 0, 2, 3])),
        experts=draw(st.booleans()),
        mask_dtype=draw(st.sampled_from([torch.int64, torch.int64, torch.bool, torch.int32,
                                         torch.float32])),
        max_response_length=mode,
        drop=drop,
        extras=draw(st.booleans()),
    )
    return td, pad


def _token_rows(lengths: list[int], generator: torch.Generator) -> list[list[int]]:
    """Token ids from a small vocabulary, so ids equal to the pad id sit among real tokens."""
    return [torch.randint(0, 9, (n,), generator=generator).tolist() for n in lengths]


def special_floats(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """float32 values, a third of them from hs.SPECIAL_FLOATS (-0.0, subnormals, huge)."""
    values = torch.randn(shape, generator=generator) * 100
    special = torch.tensor(hs.SPECIAL_FLOATS, dtype=torch.float32)
    pick = torch.randint(0, len(hs.SPECIAL_FLOATS), shape, generator=generator)
    use = torch.rand(shape, generator=generator) < 0.33
    return torch.where(use, special[pick], values)


@st.composite
def _wide_batches(draw) -> tuple[TensorDict, int]:
    batch = draw(st.integers(1, 2))
    max_prompt, max_response = 256, draw(st.sampled_from([2048, 2304]))
    generator = draw(hs.generators())
    prompts = torch.randint(1, max_prompt + 1, (batch,), generator=generator)
    responses = torch.randint(1000, max_response + 1, (batch,), generator=generator)
    td = synthetic_verl_batch(prompts, responses, max_prompt=max_prompt,
                              max_response=max_response, generator=generator)
    return td, 0


@st.composite
def nest_kwargs(draw, td: TensorDict, pad: int) -> dict:
    """pad_token_id plus, sometimes, strict / rules / ignore_dense (and an unknown dense field
    that one of them covers)."""
    kwargs: dict[str, Any] = {"pad_token_id": pad}
    extra = draw(st.sampled_from(["none", "none", "ignored", "ruled"]))
    if extra != "none":
        td[EXTRA_DENSE] = torch.ones(td["input_ids"].shape, dtype=torch.float32) * 0.25
    if extra == "ignored":
        kwargs["ignore_dense"] = (EXTRA_DENSE,)
    if extra == "ruled":
        kwargs["rules"] = {EXTRA_DENSE: ("attention_mask", 0.0)}
    if draw(st.booleans()):
        kwargs["strict"] = True
    return kwargs


@st.composite
def nest_cases(draw) -> Case:
    td, pad = draw(verl_batches())
    return Case((td,), draw(nest_kwargs(td, pad)))


def nest_quietly(td: TensorDict, **kwargs) -> TensorDict:
    """The reference nest (looked up now, so a planted oracle bug is used), warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ref_nesting.nest_by_mask(td, **kwargs)


@st.composite
def nested_batches(draw, *, orphans: bool = True,
                   pairs: st.SearchStrategy[list[tuple[int, int]]] | None = None) -> TensorDict:
    td, pad = draw(verl_batches(orphans=orphans, pairs=pairs))
    return nest_quietly(td, **draw(nest_kwargs(td, pad)))


def _pairs(min_rows: int = 1, max_rows: int = hs.MAX_ROWS) -> st.SearchStrategy:
    """`verl_batches`' default length pairs (up to 6 prompt and 8 response tokens)."""
    return hs.length_pairs(min_rows=min_rows, max_rows=max_rows, max_prompt=6, max_response=8)


@st.composite
def pairs_with_empty_row(draw) -> list[tuple[int, int]]:
    """Length pairs with an empty row (p = r = 0: no run in attention_mask's RLE) inserted before
    another row, so a row without runs sits between rows with runs."""
    pairs = draw(_pairs(max_rows=hs.MAX_ROWS - 1))
    at = draw(st.integers(0, len(pairs) - 1))
    return [*pairs[:at], (0, 0), *pairs[at:]]


@st.composite
def row_slices(draw, td: TensorDictBase) -> TensorDictBase:
    """The whole batch, or a contiguous chunk of its rows (td[a:b], b > a)."""
    batch = td.batch_size[0]
    if batch == 1 or draw(st.booleans()):
        return td
    start = draw(st.integers(0, batch - 1))
    stop = draw(st.integers(start + 1, batch))
    return td[start:stop]


@st.composite
def unnest_cases(draw) -> Case:
    """A nested batch or a slice of it. In the first regime (Hypothesis draws the first of
    `sampled_from`'s choices most often) the batch has an empty row (no run in its RLE) before
    another row; otherwise empty rows come only from `hs.length_pairs`' shapes, by chance."""
    shape = draw(st.sampled_from(["empty_row", "any"]))
    pairs = pairs_with_empty_row() if shape == "empty_row" else None
    return Case((draw(row_slices(draw(nested_batches(pairs=pairs)))),))


@st.composite
def chunk_cases(draw) -> Case:
    """A nested batch and n: first (Hypothesis draws the first of `sampled_from`'s choices most
    often) an uneven split of 4-6 rows, 1 < n < B with B % n != 0, where torch.chunk's
    ceil(B / n) pieces can differ from balanced ones (4 in 3: [2, 2], not [2, 1, 1]); else any
    batch and any n in 1..B + 2."""
    if draw(st.sampled_from(["uneven", "any"])) == "uneven":
        nested = draw(nested_batches(pairs=_pairs(min_rows=4)))
        batch = nested.batch_size[0]
        return Case((nested, draw(st.sampled_from([n for n in range(2, batch) if batch % n]))))
    nested = draw(nested_batches())
    return Case((nested, draw(st.integers(1, nested.batch_size[0] + 2))))


@st.composite
def extract_cases(draw) -> Case:
    """(dense or nested batch, model output over its real tokens: jagged or flat)."""
    td, pad = draw(verl_batches(orphans=False))
    if draw(st.booleans()):
        td = draw(row_slices(nest_quietly(td, pad_token_id=pad)))
    totals = _attention(td).sum(1).tolist()
    trailing = draw(st.sampled_from([(), (1,), (3,)]))
    # the model output in any floating dtype: the result keeps it (docs/nesting.md)
    flat = special_floats((sum(totals), *trailing), draw(hs.generators()))
    flat = flat.to(draw(st.sampled_from([torch.float32, *hs.FLOAT_DTYPES])))
    if draw(st.booleans()):
        return Case((td, flat))
    offsets = torch.tensor([0] + list(_cumsum(totals)), dtype=torch.int64)
    return Case((td, torch.nested.nested_tensor_from_jagged(flat, offsets=offsets)))


@st.composite
def pad_cases(draw) -> Case:
    nested = draw(row_slices(draw(nested_batches())))
    stash = ref_nesting.stash_of(nested)
    names = [f for f, rule in stash["fields"].items() if rule["mask"] in
             ("response_attention_mask", "response_mask")]
    chosen = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    return Case((nested, *chosen))


@st.composite
def payload_cases(draw) -> Case:
    td, pad = draw(st.one_of(verl_batches(), verl_batches(), verl_batches(wide=True)))
    return Case((td, nest_quietly(td, pad_token_id=pad)))


def _cumsum(values):
    total = 0
    for v in values:
        total += v
        yield total


# --------------------------------------------------------------------------- invalid inputs


@st.composite
def bad_nest_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on a drawn batch with pad_token_id, or on a call `valid` draws (its keyword
    arguments kept; a defect in the batch on a copy of it)."""
    if valid is None:
        td, pad = draw(verl_batches())
        kw: dict[str, Any] = {"pad_token_id": pad}
    else:
        good = draw(valid)
        (td,), kw = good.args, dict(good.kwargs)
        pad = kw["pad_token_id"]
    bare = {k: v for k, v in kw.items() if k != "pad_token_id"}
    kind = draw(st.sampled_from(["no_pad", "pad_type", "wrong_mask", "not_binary", "strict",
                                 "missing_mask", "not_td", "nested", "ignore_str", "rules_type",
                                 "no_width"]))
    prompt_width, _ = ref_nesting.batch_widths(td)
    if kind == "wrong_mask" and prompt_width == 0:  # then (B, R) == (B, S): nothing is wrong
        kind = "missing_mask"
    if kind == "not_binary" and td["attention_mask"].shape[1] == 0:
        kind = "no_pad"
    if kind == "no_pad":
        return BadCase(Case((td,), bare), ValueError, "PAD_TOKEN_ID fields and pad_token_id=None")
    if kind == "pad_type":
        value = draw(st.sampled_from(["0", 0.0, True]))
        return BadCase(Case((td,), kw | {"pad_token_id": value}), TypeError,
                       "pad_token_id not int")
    if kind == "wrong_mask":
        # only a field whose width differs from the attention mask's is detectably misregistered
        width = td["attention_mask"].shape[1]
        names = [n for n in ("response_mask", "loss_mask", "prompts")
                 if n in td.keys() and td[n].shape[1] != width]
        if not names:
            return BadCase(Case((td,), bare), ValueError,
                           "PAD_TOKEN_ID fields and pad_token_id=None")
        name = draw(st.sampled_from(names))
        return BadCase(Case((td,), kw | {"rules": {name: ("attention_mask", 0)}}),
                       ValueError, f"{name} registered against attention_mask")
    if kind == "not_binary":  # in the dtype that can hold the value: a fraction or NaN in a
        row = draw(st.integers(0, td.batch_size[0] - 1))  # floating mask
        value = draw(st.sampled_from([2, -1, 0.5, float("nan")]))
        dtype = torch.int64 if float(value).is_integer() else draw(
            st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
        mask = td["attention_mask"].to(dtype).clone()
        mask[row, -1] = value
        td = td.clone()
        td["attention_mask"] = mask
        return BadCase(Case((td,), kw), ValueError, f"mask row {row} not 0/1")
    if kind == "strict":
        td = td.clone()  # (a field the valid call's rules or ignore_dense do not cover)
        td[EXTRA_DENSE if valid is None else "attention_scale"] = torch.zeros(
            td["input_ids"].shape)
        return BadCase(Case((td,), kw | {"strict": True}),
                       ref_nesting.DenseFieldError, "an unruled (B, S) field under strict=True")
    if kind == "missing_mask":
        return BadCase(Case((td,), kw | {"rules": {"input_ids": ("no_such_mask", 0)}}),
                       ValueError, "rule names a mask td does not hold")
    if kind == "not_td":
        return BadCase(Case((dict(td.items()),), kw), TypeError, "a dict")
    if kind == "nested":
        return BadCase(Case((nest_quietly(td, pad_token_id=pad, **bare),), kw),
                       ValueError, "already nested")
    if kind == "ignore_str":
        return BadCase(Case((td,), kw | {"ignore_dense": EXTRA_DENSE}),
                       TypeError, "ignore_dense is a str")
    if kind == "rules_type":
        return BadCase(Case((td,), kw | {"rules": [("input_ids", "x")]}),
                       TypeError, "rules is not a mapping")
    td = td.clone()
    for key in ("prompts", "responses", "response_mask", "max_response_length"):
        if key in td.keys():
            del td[key]
    td["old_log_probs"] = torch.zeros(td.batch_size[0], 3)
    return BadCase(Case((td,), kw), ValueError, "a response field but no way to find P")


@st.composite
def bad_unnest_cases(draw) -> BadCase:
    """One defect each. No `valid=`: the call has one argument (no two defects on different
    arguments)."""
    td, pad = draw(verl_batches())
    kind = draw(st.sampled_from(["dense", "not_td", "short_row", "no_encoding", "run_counts",
                                 "run_outside", "field_dense"]))
    if kind == "dense":
        return BadCase(Case((td,)), ValueError, "a dense batch")
    if kind == "not_td":
        return BadCase(Case(([td],)), TypeError, "a list")
    nested = nest_quietly(td, pad_token_id=pad)
    if kind == "no_encoding":
        del nested["attention_mask_lengths"]
        return BadCase(Case((nested,)), ValueError, "an encoding is missing")
    if kind in ("run_counts", "run_outside"):  # run lengths that do not pair with the starts,
        nested["attention_mask_lengths"] = _bad_run_lengths(  # or a run past the mask's width
            nested["attention_mask_lengths"], kind == "run_counts",
            ref_nesting.stash_of(nested)["masks"]["attention_mask"]["width"])
        return BadCase(Case((nested,)), ValueError, f"attention_mask runs: {kind}")
    if kind == "field_dense":
        nested["input_ids"] = td["input_ids"]
        return BadCase(Case((nested,)), ValueError, "input_ids dense in a nested batch")
    ids = nested["input_ids"]
    shorter = torch.nested.nested_tensor_from_jagged(
        torch.cat([ids.values(), torch.tensor([5])]),
        offsets=torch.cat([ids.offsets()[:-1], ids.offsets()[-1:] + 1]))
    nested["input_ids"] = shorter
    return BadCase(Case((nested,)), ValueError, "a row longer than its mask")


def _bad_run_lengths(lengths: torch.Tensor, move_one: bool, width: int) -> torch.Tensor:
    """The run lengths of a mask encoding, with a row's count changed (one run moved to the
    next row, so the starts no longer pair) or, when there is a run, its length past `width`
    (a run count change when the rows hold no run)."""
    values, counts = lengths.values().clone(), torch.diff(lengths.offsets())
    if move_one or values.numel() == 0:
        counts = torch.cat([counts[:1] + 1, counts[1:]])
        values = torch.cat([values, values.new_ones(1)])
    else:
        values[0] = width + 1
    offsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    return torch.nested.nested_tensor_from_jagged(values, offsets=offsets)


@st.composite
def bad_chunk_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on a drawn nested batch and n = 2, or on a call `valid` draws."""
    nested, n = draw(valid).args if valid is not None else (draw(nested_batches()), 2)
    kind = draw(st.sampled_from(["zero", "negative", "float", "bool", "not_td"]))
    if kind in ("zero", "negative"):
        return BadCase(Case((nested, 0 if kind == "zero" else -2)), ValueError, "n < 1")
    if kind == "not_td":
        return BadCase(Case(({"a": 1}, n)), TypeError, "not a TensorDict")
    return BadCase(Case((nested, 2.0 if kind == "float" else True)), TypeError, "n not an int")


@st.composite
def bad_extract_cases(draw) -> BadCase:
    td, pad = draw(verl_batches())
    kind = draw(st.sampled_from(["orphan", "too_long", "row_length", "not_tensor", "flat_size",
                                 "strided_output", "output_rows"]))
    if kind in ("orphan", "too_long") and not _has_response_columns(td):
        kind = "flat_size"
    if kind == "orphan":
        row = draw(st.integers(0, td.batch_size[0] - 1))
        td = _make_orphan(td, row)
    if kind == "too_long":
        td = _shrink_max_response(td)
    if draw(st.booleans()):
        td = nest_quietly(td, pad_token_id=pad)
    totals = _attention(td).sum(1).tolist()
    flat = torch.zeros(sum(totals))
    if kind == "orphan":
        return BadCase(Case((td, flat)), ValueError, "an empty prompt with a response")
    if kind == "too_long":
        return BadCase(Case((td, flat)), ValueError, "a response longer than R")
    if kind == "not_tensor":
        return BadCase(Case((td, flat.tolist())), TypeError, "output is a list")
    if kind == "flat_size":
        return BadCase(Case((td, torch.zeros(sum(totals) + 1))), ValueError, "nnz + 1 values")
    if kind == "strided_output":
        output = _strided([torch.zeros(t) for t in totals])
        return BadCase(Case((td, output)), TypeError, "a strided nested output")
    if kind == "output_rows":
        output = torch.nested.nested_tensor([torch.zeros(t) for t in totals + [1]],
                                            layout=torch.jagged)
        return BadCase(Case((td, output)), ValueError, "one output row too many")
    lengths = list(totals)
    lengths[0] += 1
    offsets = torch.tensor([0] + list(_cumsum(lengths)), dtype=torch.int64)
    output = torch.nested.nested_tensor_from_jagged(torch.zeros(sum(lengths)), offsets=offsets)
    return BadCase(Case((td, output)), ValueError, "output row 0 one token too long")


def _has_response_columns(td: TensorDict) -> bool:
    prompt_width, _ = ref_nesting.batch_widths(td)
    return td["attention_mask"].shape[1] > prompt_width


def _real_tokens(td: TensorDictBase) -> int:
    return int(_attention(td).sum())


def _make_orphan(td: TensorDict, row: int) -> TensorDict:
    """Row `row` loses its prompt and keeps (or gets) a response token."""
    td = td.clone()
    prompt_width, _ = ref_nesting.batch_widths(td)
    attention = td["attention_mask"].clone()
    attention[row, :prompt_width] = 0
    attention[row, prompt_width] = 1
    td["attention_mask"] = attention
    return td


def _shrink_max_response(td: TensorDict) -> TensorDict:
    """A non-tensor max_response_length one below the longest response (P from prompts)."""
    td = td.clone()
    prompt_width, _ = ref_nesting.batch_widths(td)
    attention = td["attention_mask"].clone()
    if "prompts" not in td.keys():
        td["prompts"] = td["input_ids"][:, :prompt_width].clone()
    attention[0, prompt_width] = 1
    td["attention_mask"] = attention
    longest = int(attention[:, prompt_width:].to(torch.int64).sum(1).max())
    td.set_non_tensor("max_response_length", longest - 1)
    return td


@st.composite
def bad_pad_cases(draw) -> BadCase:
    """One defect each. No `valid=`: the call's field names are variadic (a defect changes
    how many there are) and the batch defects replace the whole call."""
    td, pad = draw(verl_batches())
    nested = nest_quietly(td, pad_token_id=pad)
    kind = draw(st.sampled_from(["absent", "sequence_axis", "not_str", "dense", "beyond_r",
                                 "no_r"]))
    if kind == "no_r":  # a batch nested without knowing R (no response widths at all)
        nested = nest_quietly(td.select("input_ids", "attention_mask"), pad_token_id=pad)
        return BadCase(Case((nested,)), ValueError, "the nested batch has no R")
    if kind == "beyond_r" and not _has_response_columns(td):
        kind = "absent"
    if kind == "absent":
        return BadCase(Case((nested, "no_such_field")), ValueError, "not a nested field")
    if kind == "sequence_axis":
        return BadCase(Case((nested, "input_ids")), ValueError, "input_ids is sequence-axis")
    if kind == "not_str":
        return BadCase(Case((nested, 3)), TypeError, "a field name that is not a str")
    if kind == "dense":
        return BadCase(Case((td, "response_mask")), ValueError, "a dense batch")
    td = _shrink_max_response(td)
    return BadCase(Case((nest_quietly(td, pad_token_id=pad), "response_mask")), ValueError,
                   "a real response token beyond R")


@st.composite
def bad_payload_cases(draw) -> BadCase:
    """One defect each, on `nested_td`. No `valid=`: every defect is on the same argument."""
    td, pad = draw(verl_batches())
    if draw(st.booleans()):
        return BadCase(Case((td, td)), ValueError, "nested_td is not nested")
    return BadCase(Case((td, [1])), TypeError, "nested_td is not a TensorDict")


# --------------------------------------------------------------------------- property helpers


def _assert(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _asserting(check: Callable) -> Callable:
    """A property fails with an AssertionError, also when a helper it calls on a broken output
    raises (the reference's unnest on a corrupt encoding, say)."""

    @functools.wraps(check)
    def wrapped(*args):
        try:
            return check(*args)
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as the property's failure
            raise AssertionError(f"{check.__name__}: {type(exc).__name__}: {exc}") from exc

    return wrapped


def _dense_of(td: TensorDictBase) -> TensorDictBase:
    return ref_nesting.unnest_by_mask(td) if ref_nesting.STASH in td.keys() else td


def _attention(td: TensorDictBase) -> torch.Tensor:
    """attention_mask as int64 0/1, of a dense or nested batch."""
    return _dense_of(td)["attention_mask"].to(torch.int64)


def _widths(td: TensorDictBase) -> tuple[int, int]:
    """(P, R) per the spec (R: non-tensor max_response_length, responses, response_mask)."""
    if ref_nesting.STASH in td.keys():
        stash = td.get_non_tensor(ref_nesting.STASH)
        return stash["max_prompt_length"], stash["max_response_length"]
    if "max_response_length" in td.keys():
        response_width = td.get_non_tensor("max_response_length")
    else:
        response_width = td["responses" if "responses" in td.keys() else "response_mask"].shape[1]
    if "prompts" in td.keys():
        return td["prompts"].shape[1], response_width
    return td["attention_mask"].shape[1] - response_width, response_width


def spec_masks(td: TensorDictBase, names) -> dict[str, torch.Tensor]:
    """The named masks of a dense batch as bool tensors; prompt_mask and
    response_attention_mask, when absent, are attention_mask split at P."""
    masks = {}
    for name in names:
        if name in td.keys() and not td.is_non_tensor(name):
            masks[name] = td[name] != 0
        elif name in ("prompt_mask", "response_attention_mask") and "attention_mask" in td.keys():
            prompt_width, _ = _widths(td)
            attention = td["attention_mask"] != 0
            masks[name] = attention[:, :prompt_width] if name == "prompt_mask" \
                else attention[:, prompt_width:]
    return masks


def rule_masks(case: Case) -> dict[str, torch.Tensor]:
    """The masks the case's ruled fields use."""
    return spec_masks(case.args[0], {mask for mask, _ in spec_rules(case).values()})


def spec_rules(case: Case) -> dict[str, tuple[str, Any]]:
    """field -> (mask, pad) per the spec table and the case's overrides, pads resolved, only for
    tensor fields of the input that are not themselves used as masks."""
    td = case.args[0]
    pad_token_id = case.kwargs.get("pad_token_id")
    rules = dict(SPEC_RULES)
    for name, rule in (case.kwargs.get("rules") or {}).items():
        rules[name] = None if rule is None else tuple(rule)
    present = {k for k in td.keys() if not td.is_non_tensor(k)}
    used_as_masks = {rule[0] for k, rule in rules.items() if k in present and rule}
    out = {}
    for name in present - used_as_masks:
        rule = rules.get(name)
        if rule is None:
            continue
        mask, pad = rule
        if pad == PAD or pad is ref_nesting.PAD_TOKEN_ID:
            pad = pad_token_id
        out[name] = (mask, pad)
    return out


def masked_input(case: Case) -> TensorDict:
    """The input with every mask-0 position of every ruled field replaced by its pad value."""
    td = case.args[0]
    masks = rule_masks(case)
    out = td.clone()
    for name, (mask, pad) in spec_rules(case).items():
        value = td[name]
        keep = masks[mask]
        if name == "position_ids" and value.dim() == 3:
            keep = keep[:, None, :]
        keep = keep.reshape(*keep.shape, *([1] * (value.dim() - keep.dim())))
        out[name] = torch.where(keep, value, torch.tensor(pad, dtype=value.dtype))
    return out


def _same_bits(expected: torch.Tensor, actual: torch.Tensor, what: str) -> None:
    assert_identical(expected, actual, compared=what)


# --------------------------------------------------------------------------- nest properties


@_asserting
def prop_round_trip(case: Case, nested) -> None:
    """unnest(nest(td)) == td with every mask-0 position of every nested field set to its pad,
    exactly, dtypes included (the masks per the spec's table, tool tokens kept)."""
    assert_identical(masked_input(case), ref_nesting.unnest_by_mask(nested),
                     compared="reference.nesting.unnest_by_mask(output) vs masked input")


@_asserting
def prop_row_lengths(case: Case, nested) -> None:
    """Each ruled field is jagged (int64 offsets) and its row lengths equal the row sums of its
    spec mask: the response attention for every response-axis field (tool tokens included)."""
    masks = rule_masks(case)
    for name, (mask, _) in spec_rules(case).items():
        _assert(name in nested.keys(), f"{name} is missing from the nested batch (used as a "
                "mask?)")
        value = nested[name]
        _assert(value.is_nested and value.layout == torch.jagged, f"{name} is not jagged")
        offsets = value.offsets()
        _assert(offsets.dtype == torch.int64, f"{name}: offsets are {offsets.dtype}, not int64")
        lengths = torch.diff(offsets).tolist()
        want = masks[mask].sum(1).tolist()
        _assert(lengths == want, f"{name}: row lengths {lengths} != row sums {want} of {mask}")


@_asserting
def prop_shared_offsets(case: Case, nested) -> None:
    """Fields nested by the same mask share one offsets tensor (one jagged dim): all
    response-axis fields line up row for row, and the storage counts once."""
    groups: dict[str, list[str]] = {}
    for name, (mask, _) in spec_rules(case).items():
        groups.setdefault(mask, []).append(name)
    for key in nested.keys():
        for suffix in ("_offsets", "_lengths"):
            if key.endswith(suffix) and nested[key].is_nested:
                groups.setdefault(f"encoding of {key.removesuffix(suffix)}", []).append(key)
    for mask, names in groups.items():
        missing = [name for name in names if name not in nested.keys()]
        _assert(not missing, f"{missing} missing from the nested batch (used as a mask?)")
        first = nested[names[0]]
        for name in names[1:]:
            other = nested[name]
            _assert(other.shape[1] == first.shape[1] and torch.equal(other.offsets(),
                                                                     first.offsets()),
                    f"{name} and {names[0]} (both by {mask}) do not share offsets")


@_asserting
def prop_strict_coverage(case: Case, nested) -> None:
    """No tensor with a sequence axis is left dense: every field of the spec's table (and of the
    case's rules) is nested, masks are replaced by their encoding; only the case's ignore_dense
    and unruled fields may stay (and then strict=True would have raised)."""
    td = case.args[0]
    ruled = set(spec_rules(case))
    masks = set(rule_masks(case)) & set(td.keys())
    ignored = set(case.kwargs.get("ignore_dense", ()))
    for key in td.keys():
        if td.is_non_tensor(key) or key in ignored:
            continue
        if key in masks:
            _assert(key not in nested.keys(), f"mask {key} is still in the nested batch")
        elif key in ruled:
            value = nested[key]
            _assert(value.is_nested, f"{key} {tuple(value.shape)} was left dense")
    for key in nested.keys():
        if nested.is_non_tensor(key) or key in ignored or key not in ruled | masks:
            continue
        _assert(nested[key].is_nested, f"{key} was left dense")


# --------------------------------------------------------------------------- unnest properties


def rules_from_stash(stash: dict) -> dict:
    """Rules that nest a dense batch exactly as `stash` says (defaults not in it dropped)."""
    rules: dict[str, Any] = {name: None for name in SPEC_RULES}
    rules.update({name: (rule["mask"], rule["pad"]) for name, rule in stash["fields"].items()})
    return rules


@_asserting
def prop_inverse(case: Case, dense) -> None:
    """nest(unnest(n)) == n for a nested batch or chunk n: masks come back with their dtype and
    full width, fields with their pads, whatever the chunk."""
    nested = case.args[0]
    stash = nested.get_non_tensor(ref_nesting.STASH)
    if not _as_nested(nested, stash):  # edited after nesting: nothing to invert
        return
    again = nest_quietly(dense, rules=rules_from_stash(stash))
    assert_identical(nested, again, compared="nest_by_mask(unnest_by_mask(n)) vs n")


def _as_nested(nested: TensorDictBase, stash: dict) -> bool:
    """Whether `nested` holds exactly the entries nest_by_mask made (no field or entry removed
    or added since)."""
    made = ({k for k in stash["order"] if k not in stash["masks"]} | set(stash["added"])
            | {k for m in stash["masks"] for k in ref_nesting.rle_keys(m)} | {ref_nesting.STASH})
    return set(nested.keys()) == made


def prop_chunk_commutes(case: Case, dense, candidate) -> None:
    """Unnesting chunks == chunking the unnested batch (widths never depend on the chunk)."""
    nested = case.args[0]
    batch = nested.batch_size[0]
    for n in (2,):
        for piece in torch.chunk(torch.arange(batch), n):
            start, stop = int(piece[0]), int(piece[-1]) + 1
            try:
                part = candidate(nested[start:stop])
            except Exception as exc:  # noqa: BLE001
                raise AssertionError(f"unnest of rows [{start}, {stop}) raised {exc!r}") from exc
            assert_identical(dense[start:stop], part,
                             compared=f"unnest(n[{start}:{stop}]) vs unnest(n)[{start}:{stop}]")


# --------------------------------------------------------------------------- chunk properties


@_asserting
def prop_torch_chunk_sizes(case: Case, pieces) -> None:
    """As many pieces, of the same sizes, as torch.chunk makes; each a nested batch."""
    nested, n = case.args
    want = [len(p) for p in torch.chunk(torch.arange(nested.batch_size[0]), n)]
    got = [p.batch_size[0] for p in pieces]
    _assert(got == want, f"chunk sizes {got} != torch.chunk's {want}")
    for piece in pieces:
        _assert(ref_nesting.STASH in piece.keys(), "a chunk lost the nesting stash")


@_asserting
def prop_unnest_commutes(case: Case, pieces) -> None:
    """unnest(chunk) == chunk of unnest, piece by piece (same widths in every piece)."""
    nested, n = case.args
    dense = ref_nesting.unnest_by_mask(nested)
    start = 0
    for piece in pieces:
        stop = start + piece.batch_size[0]
        assert_identical(dense[start:stop], ref_nesting.unnest_by_mask(piece),
                         compared=f"unnest(chunk rows [{start}, {stop}))")
        start = stop


# --------------------------------------------------------------------------- extract properties


@_asserting
def prop_matches_dense_slice(case: Case, result) -> None:
    """result[i, j] == dense_output[i, P-1+j] for j < r_i on the un-nested batch (dense_output:
    the output scattered back to the attended columns), zeros after; r_i from the attention."""
    td, output = case.args
    dense = _dense_of(td)
    attention = dense["attention_mask"] != 0
    prompt_width, response_width = _widths(td)
    flat = output.values() if output.is_nested else output
    batch, width = attention.shape
    scattered = torch.zeros((batch, width, *flat.shape[1:]), dtype=flat.dtype)
    scattered[attention] = flat
    responses = attention[:, prompt_width:].sum(1)
    expected = torch.zeros((batch, response_width, *flat.shape[1:]), dtype=flat.dtype)
    for i in range(batch):
        r = int(responses[i])
        expected[i, :r] = scattered[i, prompt_width - 1:prompt_width - 1 + r]
    assert_identical(expected, result, compared="dense slice output[i, P-1+j]")


def prop_nested_equals_dense(case: Case, result, candidate) -> None:
    """The same call on the other form of the batch (nested ↔ dense) gives the same tensor."""
    td, output = case.args
    if ref_nesting.STASH in td.keys():
        other = ref_nesting.unnest_by_mask(td)
    else:
        other = nest_quietly(td, pad_token_id=0)
    try:
        again = candidate(other, output)
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"extract_response on the other form raised {exc!r}") from exc
    assert_identical(result, again, compared="extract_response(nest(td)) vs (unnest(td))")


# --------------------------------------------------------------------------- pad properties


@_asserting
def prop_canonical_width(case: Case, out) -> None:
    """Every returned field is (B, R, *trailing) with the stashed R, whatever the chunk."""
    nested, *fields = case.args
    _, response_width = _widths(nested)
    _assert(sorted(out.keys()) == sorted(fields), f"keys {sorted(out.keys())} != {fields}")
    for name in fields:
        want = (nested.batch_size[0], response_width, *nested[name].shape[2:])
        _assert(tuple(out[name].shape) == want,
                f"{name}: shape {tuple(out[name].shape)}, expected {want}")


@_asserting
def prop_values_in_place(case: Case, out) -> None:
    """Values sit at their original response columns (holes of response_mask included), zeros
    at every other column."""
    nested, *fields = case.args
    dense = ref_nesting.unnest_by_mask(nested)
    stash = nested.get_non_tensor(ref_nesting.STASH)
    _, response_width = _widths(nested)
    masks = spec_masks(dense, {stash["fields"][name]["mask"] for name in fields})
    for name in fields:
        value = dense[name]
        mask = masks[stash["fields"][name]["mask"]]
        keep = mask.reshape(*mask.shape, *([1] * (value.dim() - 2)))
        kept = torch.where(keep, value, torch.zeros((), dtype=value.dtype))
        expected = torch.zeros((value.shape[0], response_width, *value.shape[2:]),
                               dtype=value.dtype)
        columns = min(response_width, value.shape[1])
        expected[:, :columns] = kept[:, :columns]
        assert_identical(expected, out[name], compared=f"{name} at its original columns")


# --------------------------------------------------------------------------- payload properties


def held_bytes(td: TensorDictBase) -> int:
    """Bytes of every distinct storage a TensorDict's tensors hold (jagged: values, offsets)."""
    storages: dict[int, int] = {}
    for _, value in td.items(include_nested=False, leaves_only=True):
        if not isinstance(value, torch.Tensor):
            continue
        parts = [value.values(), value.offsets()] if value.is_nested else [value]
        for part in parts:
            storages[part.untyped_storage().data_ptr()] = part.untyped_storage().nbytes()
    return sum(storages.values())


def ceiling_bytes(dense: TensorDictBase, nested: TensorDictBase) -> int:
    """Real elements only: ruled fields count ones-in-mask × bytes per position, masks nothing,
    anything else in full."""
    stash = nested.get_non_tensor(ref_nesting.STASH)
    rules = {name: rule[0] for name, rule in SPEC_RULES.items()}
    rules.update({name: rule["mask"] for name, rule in stash["fields"].items()})
    masks = spec_masks(dense, set(rules.values()))
    total = 0
    for key in dense.keys():
        if dense.is_non_tensor(key) or key in masks or key in stash["masks"]:
            continue
        value = dense[key]
        mask = masks.get(rules.get(key, ""))
        if mask is None or value.dim() < 2 or mask.numel() == 0:
            total += value.numel() * value.element_size()
        else:
            total += int(mask.sum()) * (value.numel() // mask.numel()) * value.element_size()
    return total


def _saved(td: TensorDictBase) -> int:
    buffer = io.BytesIO()
    torch.save(td, buffer)
    return len(buffer.getvalue())


@_asserting
def prop_accounting(case: Case, report) -> None:
    """nested_bytes / dense_bytes are the storage actually held (shared offsets once),
    ceiling_bytes the real elements, the ratios follow, wire bytes are torch.save sizes."""
    dense, nested = case.args
    want = {"dense_bytes": held_bytes(dense), "nested_bytes": held_bytes(nested),
            "ceiling_bytes": ceiling_bytes(dense, nested),
            "wire_bytes_dense": _saved(dense), "wire_bytes_nested": _saved(nested)}
    for name, value in want.items():
        _assert(getattr(report, name) == value, f"{name} = {getattr(report, name)}, the "
                f"storage walk gives {value}")
    _assert(report.compression == _ratio(report.dense_bytes, report.nested_bytes), "compression")
    _assert(report.ceiling == _ratio(report.dense_bytes, report.ceiling_bytes), "ceiling")
    _assert(report.efficiency == _ratio(report.ceiling_bytes, report.nested_bytes), "efficiency")


def _ratio(a: int, b: int) -> float:
    """a / b; 0 / 0 = 1 (nothing to compress), a / 0 = inf."""
    if b:
        return a / b
    return 1.0 if a == 0 else float("inf")


@_asserting
def prop_efficiency(case: Case, report) -> None:
    """efficiency >= 0.99 when rows hold on average 1,000 real tokens or more."""
    dense, _ = case.args
    real_per_row = float(_attention(dense).sum()) / dense.batch_size[0]
    if real_per_row >= 1000:
        _assert(report.efficiency >= 0.99, f"efficiency {report.efficiency:.4f} < 0.99 with "
                f"{real_per_row:.0f} real tokens per row ({report})")


def compare_reports(expected, actual, **kwargs) -> None:
    """PayloadReport: every field equal (ints exactly, ratios bit for bit)."""
    assert_identical(expected, actual, **kwargs)
    for name in ("compression", "ceiling", "efficiency"):
        a, b = getattr(expected, name), getattr(actual, name)
        _assert(torch.tensor(a, dtype=torch.float64).view(torch.int64)
                == torch.tensor(b, dtype=torch.float64).view(torch.int64), f"{name} bits differ")


# --------------------------------------------------------------------------- pictures


def describe_row(case: Case, row: int) -> str:
    td = case.args[0]
    if not isinstance(td, TensorDictBase) or row >= td.batch_size[0]:
        return ""
    try:
        dense = _dense_of(td)
        prompt_width, _ = _widths(td)
        attention = dense["attention_mask"].to(torch.int64)[row]
    except Exception:  # noqa: BLE001 - a description never fails a check
        return ""
    p, r = int(attention[:prompt_width].sum()), int(attention[prompt_width:].sum())
    tools = ""
    if "response_mask" in dense.keys() and not dense["response_mask"].is_nested:
        tools = f" tool tokens {r - int(dense['response_mask'][row].ne(0).sum())}"
    return f"p={p} r={r}{tools} (P={prompt_width})"


def picture(td: TensorDictBase) -> dict[str, list[str]]:
    """One character per column of a dense batch: `.` pad, `p` prompt, `r` trained response,
    `t` real response token with response_mask 0 (tool output) — for sequence columns and for
    response columns."""
    dense = _dense_of(td)
    if "attention_mask" not in dense.keys():
        return {}
    prompt_width, _ = _widths(dense)
    attention = (dense["attention_mask"] != 0).tolist()
    trained = None
    if "response_mask" in dense.keys():
        trained = (dense["response_mask"] != 0).tolist()
    sequence, responses = [], []
    for i, row in enumerate(attention):
        chars = []
        for j, real in enumerate(row):
            if not real:
                chars.append(".")
            elif j < prompt_width:
                chars.append("p")
            else:
                k = j - prompt_width
                tool = trained is not None and k < len(trained[i]) and not trained[i][k]
                chars.append("t" if tool else "r")
        sequence.append("".join(chars))
        responses.append("".join(chars[prompt_width:]))
    return {"sequence": sequence, "response": responses}


def draw(td: TensorDictBase) -> list[str]:
    """`batchproof show --op nesting`: the dense layout, then what nesting keeps of each row."""
    nested = td if ref_nesting.STASH in td.keys() else nest_quietly(
        td, pad_token_id=td.get_non_tensor("pad_token_id") if "pad_token_id" in td.keys()
        else 0)
    dense = _dense_of(nested)
    prompt_width, response_width = _widths(nested)
    rows = picture(dense)["sequence"]
    lines = [f"dense batch: B={dense.batch_size[0]}, P={prompt_width}, R={response_width}, "
             f"S={dense['attention_mask'].shape[1]}  (. pad, p prompt, r response, t tool)"]
    for i, row in enumerate(rows):
        lines.append(f"  row {i}  {row[:prompt_width]}|{row[prompt_width:]}")
    lines.append("nested (jagged rows = the real tokens only):")
    for i, row in enumerate(rows):
        kept = row.replace(".", "")
        runs = nested["attention_mask_offsets"][i].tolist(), \
            nested["attention_mask_lengths"][i].tolist()
        lines.append(f"  row {i}  {kept:<{len(row)}}  attention runs (start, length) "
                     f"{list(zip(*runs))}")
    report = ref_nesting.payload_report(dense, nested)
    lines.append(f"payload: dense {report.dense_bytes} B, nested {report.nested_bytes} B, "
                 f"ceiling {report.ceiling_bytes} B, efficiency {report.efficiency:.2f}")
    return lines


def show(case: Case, output) -> list[str]:
    """`batchproof show` for a record whose first argument is a (dense or nested) batch."""
    return draw(case.args[0])


# --------------------------------------------------------------------------- pins


def example_batch() -> TensorDict:
    """Three rows: a multi-turn response with a tool token, a short one, an empty row."""
    base = build_rl_batch([[11, 12], [21, 22, 23], []], [[13, 14, 15, 16], [24], []],
                          pad_token_id=0, layout="two_segment")
    return extend_to_verl(base, holes=[[1, 0, 1, 1], [1], []],
                          floats={"old_log_probs": [[-0.5, -1.0, -0.25, -2.0, 9.0],
                                                    [-1.5, 9.0, 9.0, 9.0, 9.0],
                                                    [9.0, 9.0, 9.0, 9.0, 9.0]]},
                          trail=1)


def chunk_width_batch() -> TensorDict:
    """Row 0 has a long response (R = 12, verl's 14336); rows 1-3 short ones (verl's 301)."""
    base = build_rl_batch([[1, 2], [3], [4, 5], [6]],
                          [list(range(10, 22)), [30, 31], [40], [50, 51, 52]],
                          pad_token_id=0, layout="two_segment")
    return extend_to_verl(base, holes=[[1] * 12, [1, 0], [1], [1, 1, 0]], floats={})


def empty_row_batch() -> TensorDict:
    """Row 1 is empty (no prompt, no response) between two full rows."""
    base = build_rl_batch([[1, 2], [], [3]], [[4, 5], [], [6, 7, 8]], pad_token_id=0,
                          layout="two_segment")
    return extend_to_verl(base, holes=[[1, 1], [], [1, 0, 1]], floats={})


def _expect_tool_tokens_kept(case: Case, nested) -> None:
    _assert(nested["responses"][0].tolist() == [13, 14, 15, 16],
            f"row 0's responses must keep the tool token 14: {nested['responses'][0].tolist()}")
    _assert(nested["response_mask"][0].tolist() == [1, 0, 1, 1],
            "row 0's response_mask keeps its 0 on the tool token")


def _expect_all_nested(case: Case, nested) -> None:
    for key in ("prompts", "responses", "loss_mask", "response_mask", "input_ids"):
        _assert(nested[key].is_nested, f"{key} must be nested")


def _expect_multi_axis(case: Case, nested) -> None:
    _assert(nested["position_ids"].values().shape[1:] == (3,),
            f"(B, 3, S) position_ids nest as (B, S, 3): {nested['position_ids'].shape}")


def _expect_empty_row(case: Case, dense) -> None:
    _assert(dense["attention_mask"][1].tolist() == [0] * dense["attention_mask"].shape[1],
            f"the empty row's attention must stay empty: {dense['attention_mask'][1].tolist()}")


def _expect_full_width(case: Case, dense) -> None:
    _assert(tuple(dense["responses"].shape) == (3, 12) and dense["attention_mask"].shape[1] == 14,
            f"a chunk of short rows keeps R = 12: responses {tuple(dense['responses'].shape)}")


def _expect_chunk_width(case: Case, out) -> None:
    _assert(tuple(out["responses"].shape) == (3, 12),
            f"a chunk of short rows must pad to R = 12, got {tuple(out['responses'].shape)}")


def _expect_tool_alignment(case: Case, result) -> None:
    # row 0: real tokens 11 12 | 13 14 15 16 -> output 0..5; response j <- output 1 + j
    _assert(result[0].tolist() == [1.0, 2.0, 3.0, 4.0], f"row 0: {result[0].tolist()}")
    _assert(result[1].tolist() == [8.0, 0.0, 0.0, 0.0], f"row 1: {result[1].tolist()}")


def _expect_verl_efficiency(case: Case, report) -> None:
    _assert(report.efficiency >= 0.99 and report.compression > 10,
            f"verl-shaped batch at ~8% fill: {report}")


def _zero_output_case(td: TensorDict) -> Case:
    return Case((td, torch.zeros(_real_tokens(td))))


def _example_nested() -> TensorDict:
    return ref_nesting.nest_by_mask(example_batch(), pad_token_id=0)


def _verl_fill_case() -> Case:
    """Two rows at verl's widths (P = 2048, R = 14336), ~8% real tokens."""
    generator = torch.Generator().manual_seed(6009)
    prompts, responses = torch.tensor([1200, 400]), torch.tensor([1000, 21])  # 2621 = 8%
    td = synthetic_verl_batch(prompts, responses, max_prompt=2048, max_response=14336,
                              generator=generator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import batchproof.impl.nesting as impl_nesting  # fast; the function under test is payload_report

        return Case((td, impl_nesting.nest_by_mask(td, pad_token_id=0)))


def _with_views(td: TensorDict) -> TensorDict:
    """prompts and responses as column slices of input_ids (non-contiguous views)."""
    prompt_width = td["prompts"].shape[1]
    td["prompts"] = td["input_ids"][:, :prompt_width]
    td["responses"] = td["input_ids"][:, prompt_width:]
    return td


def _bad_nest_pins() -> list[tuple]:
    """(name, td, kwargs, exception, why): each argument check of plan_nesting (which
    reference and impl share), on the example batch."""
    td = example_batch
    njt = torch.nested.nested_tensor([torch.zeros(i + 1) for i in range(3)], layout=torch.jagged)
    return [
        ("strict_not_a_bool", td(), {"strict": 1}, TypeError, "strict=1"),
        ("derived_mask_without_attention", td().select("responses"), {}, ValueError,
         "responses need the response attention, derived from an absent attention_mask"),
        ("prompts_wider_than_attention", td().set("prompts", torch.zeros(3, 9)), {}, ValueError,
         "P = 9 > the attention width 8"),
        ("encoding_name_taken", td().set("attention_mask_offsets", torch.zeros(3, 1)), {},
         ValueError, "td already holds attention_mask_offsets"),
        ("rule_name_not_str", td(), {"rules": {1: None}}, TypeError, "a rule for field 1"),
        ("rule_not_a_pair", td(), {"rules": {"x": "attention_mask"}}, TypeError,
         "a rule that is not (mask, pad)"),
        ("rule_mask_not_str", td(), {"rules": {"x": (1, 0)}}, TypeError, "mask 1"),
        ("rule_pad_not_a_number", td(), {"rules": {"x": ("attention_mask", "0")}}, TypeError,
         "pad '0'"),
        ("no_batch_dimension", TensorDict({}, []), {}, ValueError, "batch_size []"),
        ("nested_tensordict_field", td().set("sub", TensorDict({"x": torch.zeros(3)}, [3])), {},
         TypeError, "a sub-TensorDict"),
        ("jagged_field", td().set("ragged", njt), {}, TypeError, "an already jagged field"),
        ("max_response_length_tensor",
         td().exclude("max_response_length").set("max_response_length", torch.ones(3)), {},
         TypeError, "max_response_length as a tensor"),
        ("max_response_length_str", _with_entry(td(), "max_response_length", "5"), {}, TypeError,
         "max_response_length '5'"),
        ("max_response_length_negative", _with_entry(td(), "max_response_length", -1), {},
         ValueError, "max_response_length -1"),
        ("response_width_over_attention",
         _with_entry(td().exclude("prompts"), "max_response_length", 9), {}, ValueError,
         "R = 9 > the attention width 8"),
        ("prompts_1d", td().set("prompts", torch.zeros(3)), {}, ValueError, "prompts is (B,)"),
        ("attention_mask_1d", td().set("attention_mask", torch.ones(3)), {}, ValueError,
         "attention_mask is (B,)"),
        ("ignore_dense_str", td(), {"ignore_dense": "loss_mask"}, TypeError,
         "ignore_dense a str"),
        ("ignore_dense_not_names", td(), {"ignore_dense": [1]}, TypeError, "ignore_dense [1]"),
    ]


def _one_more_in_row_0(njt: torch.Tensor) -> torch.Tensor:
    values, offsets = njt.values(), njt.offsets()
    return torch.nested.nested_tensor_from_jagged(
        torch.cat([values[:1], values]), offsets=torch.cat([offsets[:1], offsets[1:] + 1]))


def _with_entry(td: TensorDict, key: str, value) -> TensorDict:
    td.set_non_tensor(key, value)
    return td


def _strided(rows: list[torch.Tensor]) -> torch.Tensor:
    """A strided (not jagged) nested tensor, without torch's prototype-API warning: the records
    are built at import, and a warning there reaches every user's command line."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.nested.nested_tensor(rows)


def _bad_extract_pins() -> list[tuple]:
    """(name, td, output, exception, why) of extract_response's rarer bad inputs."""
    td = example_batch()
    totals = td["attention_mask"].sum(1).tolist()
    flat = torch.zeros(sum(totals))
    jagged = [torch.zeros(t) for t in totals]
    not_binary = td.clone()
    not_binary["attention_mask"] = td["attention_mask"] * 2
    no_attention = ref_nesting.nest_by_mask(
        td.select("responses", "response_mask"), pad_token_id=0,
        rules={"responses": ("response_mask", ref_nesting.PAD_TOKEN_ID), "response_mask": None})
    return [
        ("attention_not_binary", not_binary, flat, ValueError, "attention_mask holds 2"),
        ("strided_nested_output", td, _strided(jagged), TypeError, "a strided nested output"),
        ("output_ragged_on_dim_2", td, torch.nested.nested_tensor(
            [torch.zeros(t, 2) for t in totals], layout=torch.jagged).transpose(1, 2),
         ValueError, "an output ragged on dim 2"),
        ("output_rows_differ", td, torch.nested.nested_tensor(jagged[:2], layout=torch.jagged),
         ValueError, "2 output rows for 3 batch rows"),
        ("output_row_too_long", td, torch.nested.nested_tensor(
            [torch.zeros(t + (i == 0)) for i, t in enumerate(totals)], layout=torch.jagged),
         ValueError, "output row 0 one token longer than its real tokens"),
        ("no_attention_mask", td.exclude("attention_mask"), flat, ValueError,
         "a dense batch without attention_mask"),
        ("response_width_unknown", td.select("input_ids", "attention_mask"), flat, ValueError,
         "a dense batch without responses, response_mask or max_response_length"),
        ("no_attention_encoding", no_attention, torch.zeros(3), ValueError,
         "a nested batch whose stash has no attention_mask"),
    ]


EXAMPLE = Case((example_batch(),), {"pad_token_id": 0})

NEST_PINS = [
    Pin("wrong_mask_registration",
        BadCase(Case((example_batch(),), {"pad_token_id": 0,
                                          "rules": {"old_log_probs": ("attention_mask", 0.0)}}),
                ValueError, "a (B, R) field registered against the (B, P+R) attention_mask"),
        "verl registered the logprob fields against attention_mask; only a shape assertion "
        "caught it — the check must name field, shape and mask (ValueError)"),
    Pin("pad_token_id_missing",
        BadCase(Case((example_batch(),), {}), ValueError, "pad_token_id=None"),
        "verl silently skipped PAD_TOKEN_ID fields when pad_token_id was None (left dense)"),
    Pin("tool_tokens_kept", EXAMPLE,
        "verl nested responses by response_mask, dropping tool tokens inside multi-turn "
        "responses and misaligning extract_response", _expect_tool_tokens_kept),
    Pin("loss_mask_alias_and_prompts_nested", Case((example_batch(),),
                                                   {"pad_token_id": 0, "strict": True}),
        "verl's registry lacked the loss_mask alias and left prompts/responses dense",
        _expect_all_nested),
    Pin("multi_axis_position_ids",
        Case((extend_to_verl(build_rl_batch([[1], [2, 3]], [[4, 5], []], pad_token_id=0,
                                            layout="two_segment"),
                             holes=[[1, 1], []], floats={}, channels=3),),
             {"pad_token_id": 0}),
        "(B, C, S) position_ids (multi-axis RoPE) must nest as (B, S, C)", _expect_multi_axis),
    *[Pin(name, BadCase(Case((td,), {"pad_token_id": 0} | kwargs), raises, why), why)
      for name, td, kwargs, raises, why in _bad_nest_pins()],
    Pin("non_contiguous_fields",
        Case((_with_views(example_batch()),), {"pad_token_id": 0}),
        "fields that are views (prompts and responses sliced from input_ids, as verl makes "
        "them) are read through their strides, not as if contiguous"),
    Pin("max_prompt_length_given",
        Case((_with_entry(example_batch(), "max_prompt_length", 3),), {"pad_token_id": 0}),
        "a batch that already carries max_prompt_length keeps it: nesting adds only what is "
        "absent (and unnesting drops only what it added)",
        lambda case, nested: _assert(nested.get_non_tensor("max_prompt_length") == 3
                                     and "max_prompt_length" not in
                                     ref_nesting.stash_of(nested)["added"],
                                     "max_prompt_length replaced or listed as added")),
]

UNNEST_PINS = [
    Pin("empty_row_rle", Case((ref_nesting.nest_by_mask(empty_row_batch(), pad_token_id=0),)),
        "an RLE scatter that takes row i's run at offsets[i] reads the next row's segment for an "
        "empty row", _expect_empty_row),
    Pin("chunk_widths_disagree",
        Case((ref_nesting.nest_by_mask(chunk_width_batch(), pad_token_id=0)[1:4],)),
        "verl: after chunking, unnested response tensors were 301 wide in one chunk and 14336 "
        "in another (the chunk's own maximum instead of the stashed R)", _expect_full_width),
    Pin("field_removed_after_nesting", Case((_example_nested().exclude("old_log_probs"),)),
        "a field removed from the nested batch stays removed (not restored as padding)",
        lambda case, dense: _assert("old_log_probs" not in dense.keys(), "old_log_probs back")),
    Pin("entry_removed_after_nesting", Case((_example_nested().exclude("max_response_length"),)),
        "an entry of the dense batch removed after nesting stays removed",
        lambda case, dense: _assert("max_response_length" not in dense.keys(),
                                    "max_response_length back")),
    Pin("entry_added_after_nesting",
        Case((_example_nested().set("scores", torch.tensor([0.5, 1.5, 2.5])),)),
        "an entry added to the nested batch (a per-row score) is kept by unnesting",
        lambda case, dense: _assert(dense["scores"].tolist() == [0.5, 1.5, 2.5], "scores lost")),
    *[Pin(name, BadCase(Case((nested,)), ValueError, why), why) for name, nested, why in [
        ("run_counts_differ",
         _example_nested().set("attention_mask_lengths", _bad_run_lengths(
             _example_nested()["attention_mask_lengths"], True, 8)),
         "attention_mask's run starts and lengths differ in row 0"),
        ("run_outside_width",
         _example_nested().set("attention_mask_lengths", _bad_run_lengths(
             _example_nested()["attention_mask_lengths"], False, 8)),
         "an attention_mask run past the mask's width"),
        ("field_not_jagged", _example_nested().set("input_ids", example_batch()["input_ids"]),
         "input_ids dense in a nested batch"),
    ]],
]

CHUNK_PINS = [
    Pin("uneven_chunks", Case((ref_nesting.nest_by_mask(chunk_width_batch(),
                                                        pad_token_id=0), 3)),
        "4 rows in 3 chunks: torch.chunk makes [2, 2] (not [2, 1, 1])",
        lambda case, pieces: _assert([p.batch_size[0] for p in pieces] == [2, 2],
                                     f"chunk sizes {[p.batch_size[0] for p in pieces]} != [2, 2]")),
    Pin("no_rows", Case((_example_nested()[0:0], 3)),
        "a batch of no rows gives n empty slices, as torch.chunk does",
        lambda case, pieces: _assert([p.batch_size[0] for p in pieces] == [0, 0, 0],
                                     f"chunk sizes {[p.batch_size[0] for p in pieces]}")),
]

EXTRACT_PINS = [
    Pin("empty_prompt_previous_logit",
        BadCase(_zero_output_case(_make_orphan(example_batch(), 1)), ValueError,
                "p_i == 0 with r_i > 0"),
        "with an empty prompt, position p_i - 1 = -1 reads the previous sample's last logit"),
    Pin("response_longer_than_R",
        BadCase(_zero_output_case(_shrink_max_response(example_batch())), ValueError,
                "r_i > R"),
        "a response longer than R must not be truncated silently"),
    Pin("tool_tokens_alignment",
        Case((_example_nested(), torch.arange(10, dtype=torch.float32))),
        "r_i and the columns come from the response attention, never from response_mask",
        _expect_tool_alignment),
    *[Pin(name, BadCase(Case((td, output)), raises, why), why)
      for name, td, output, raises, why in _bad_extract_pins()],
]

PAD_PINS = [
    Pin("to_padded_tensor_total_width",
        Case((ref_nesting.nest_by_mask(chunk_width_batch(), pad_token_id=0)[1:4], "responses",
              "loss_mask")),
        "NJT.to_padded_tensor pads to the values' total length (or the chunk's maximum), not R",
        _expect_chunk_width),
    Pin("row_longer_than_its_mask",
        BadCase(Case((_example_nested().set("responses", _one_more_in_row_0(
            _example_nested()["responses"])), "responses")), ValueError,
            "responses row 0 holds one value more than its mask's ones"),
        "a field row that does not match its mask is rejected, not cut or shifted"),
    Pin("no_response_width",
        BadCase(Case((ref_nesting.nest_by_mask(example_batch().select("input_ids",
                                                                      "attention_mask"),
                                               pad_token_id=0),)), ValueError, "no R"),
        "a batch nested without R (no responses, response_mask or max_response_length) has no "
        "response axis to pad to"),
]

PAYLOAD_PINS = [
    Pin("verl_fill_8_percent", _verl_fill_case(),
        "verl PR #6009: at 8.4% fill nesting reached 0.94 of the ceiling after fixing fields "
        "left dense; the target here is 0.99", _expect_verl_efficiency),
]


# --------------------------------------------------------------------------- device support


def _to_device(case: Case, device: str) -> Case:
    def move(value):
        if isinstance(value, (torch.Tensor, TensorDictBase)):
            return value.to(device)
        return value

    return Case(tuple(move(a) for a in case.args), dict(case.kwargs), case.label)


def _flat_output(case: Case) -> Case:
    td, output = case.args
    return Case((td, output.values() if output.is_nested else output), dict(case.kwargs))


# --------------------------------------------------------------------------- records

COMMON = dict(devices=("cpu", "cuda"), to_device=_to_device, describe_row=describe_row,
              picture=picture)
# the CPU finds a mask's runs in one scan with a host read (_runs_of); CUDA copies the runs
# of a field with one Triton kernel (both directions)
_RUNS = "cpu:nesting._runs_of"
_COPY_RUNS = ("triton:nesting._copy_runs",)

NEST_BY_MASK = register(OpInfo(
    op="nesting",
    function="nest_by_mask",
    valid=nest_cases(),
    invalid=hs.one_or_two_defects(bad_nest_cases, nest_cases(), ref_nesting.nest_by_mask),
    compare=assert_identical,
    properties=[
        Property.of(prop_round_trip),
        Property.of(prop_row_lengths),
        Property.of(prop_shared_offsets),
        Property.of(prop_strict_coverage),
    ],
    pins=NEST_PINS,
    paths=Paths(kernel=(_RUNS,), cpu=(_RUNS,), triton=_COPY_RUNS),
    example=EXAMPLE,
    show=show,
    doc="padded verl batch → jagged fields by mask + run-length-encoded masks",
    **COMMON,
))

UNNEST_BY_MASK = register(OpInfo(
    op="nesting",
    function="unnest_by_mask",
    valid=unnest_cases(),
    invalid=bad_unnest_cases(),
    compare=assert_identical,
    properties=[
        Property.of(prop_inverse),
        Property.of(prop_chunk_commutes, metamorphic=True),
    ],
    pins=UNNEST_PINS,
    paths=Paths(triton=_COPY_RUNS),
    example=Case((_example_nested(),)),
    show=show,
    doc="nested batch (or chunk) → the dense batch, pads at mask-0 positions",
    **COMMON,
))

CHUNK_NESTED = register(OpInfo(
    op="nesting",
    function="chunk_nested",
    valid=chunk_cases(),
    invalid=hs.one_or_two_defects(bad_chunk_cases, chunk_cases(), ref_nesting.chunk_nested),
    compare=assert_identical,
    properties=[
        Property.of(prop_torch_chunk_sizes),
        Property.of(prop_unnest_commutes),
    ],
    pins=CHUNK_PINS,
    doc="a nested batch in n row chunks (TensorDict slices), as torch.chunk",
    **COMMON,
))

EXTRACT_RESPONSE = register(OpInfo(
    op="nesting",
    function="extract_response",
    valid=extract_cases(),
    invalid=bad_extract_cases(),
    compare=assert_identical,
    properties=[
        Property.of(prop_matches_dense_slice),
        Property.of(prop_nested_equals_dense, metamorphic=True),
    ],
    pins=EXTRACT_PINS,
    # (a dense batch's runs come from _runs_of too; its one valid pin is nested: undeclared)
    forms={"given": lambda c: c, "flat_output": _flat_output},
    doc="model output over real tokens → (B, R, ...) response-level tensor",
    **COMMON,
))

PAD_TO_RESPONSE_WIDTH = register(OpInfo(
    op="nesting",
    function="pad_to_response_width",
    valid=pad_cases(),
    invalid=bad_pad_cases(),
    compare=assert_identical,
    properties=[
        Property.of(prop_canonical_width),
        Property.of(prop_values_in_place),
    ],
    pins=PAD_PINS,
    doc="response-axis jagged fields → dense (B, R) at their original columns",
    **COMMON,
))

PAYLOAD_REPORT = register(OpInfo(
    op="nesting",
    function="payload_report",
    valid=payload_cases(),
    invalid=bad_payload_cases(),
    compare=compare_reports,
    properties=[
        Property.of(prop_accounting),
        Property.of(prop_efficiency),
    ],
    pins=PAYLOAD_PINS,
    doc="dense vs nested vs ceiling bytes, and torch.save sizes",
    # CPU only: the report measures its inputs' storage, and a copy to a device does not keep
    # it (TensorDict.to copies each field's shared offsets separately; torch.save writes a CUDA
    # tensor's bytes differently): the H100 run of 2026-11-24 saw 91980 nested bytes for the
    # CPU input's 91740 (docs/nesting.md)
    **{**COMMON, "devices": ("cpu",), "to_device": None},
))

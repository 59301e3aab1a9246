"""Registry records for `rl_batch`: `build_rl_batch` and `response_values` (spec: rl_batch.md)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from batchproof import blocks as hs
from batchproof import replay
from batchproof.compare import assert_identical
from batchproof.reference import rl_batch as _reference
from batchproof.registry import (
    BadCase,
    Case,
    OpInfo,
    Paths,
    Pin,
    Property,
    register,
    tensors_on,
)

# --------------------------------------------------------------------------- strategies


REWARD_KINDS = ("none", "per_token", "scalar", "mixed")
"""How `rewards` is given: absent, per-token lists, one scalar per sample, or a mix of both."""


@st.composite
def rl_batch_cases(
    draw,
    *,
    layouts: Sequence[str] = ("left", "two_segment"),
    pairs: st.SearchStrategy[list[tuple[int, int]]] | None = None,
    pad_token_ids: Sequence[int] = (0, 1, 49),
    rewards: Sequence[str] = REWARD_KINDS,
    loss_masks: bool | None = None,
    logprobs: bool | None = None,
    max_seq_len: bool | None = None,
    value_dtypes: Sequence[torch.dtype] = (),
    routed_experts: bool | None = False,
    sample_support: bool | None = False,
) -> Case:
    """A valid `build_rl_batch` call: structure (lengths) first, then tokens and per-token values.

    `pairs`: the (prompt, response) lengths (default `blocks.length_pairs()`).
    `rewards`: the kinds of `REWARD_KINDS` to draw from. `loss_masks`, `logprobs`,
    `max_seq_len`: None draws whether to pass it, True always passes it, False never.
    `value_dtypes`: when given, each per-token argument may come as 1-D tensors of one of these
    dtypes instead of lists (the placement tests draw all four float dtypes so; the registry
    keeps lists and narrows the values in a lossy input form instead).
    `routed_experts`, `sample_support` (router replay, `batchproof.replay`): None draws each in
    a third of the examples, True always passes it, False (the default) never does: the
    registry draws them (`BUILD_RL_BATCH`); the framework adapters, whose functions take no
    routes, and `batchproof.strategies.rl_batch_inputs` do not. The other defaults are
    what the registry draws (`batchproof.strategies.rl_batch_inputs` exposes the options)."""
    pairs = draw(pairs if pairs is not None else hs.length_pairs())
    p_lens, r_lens = [p for p, _ in pairs], [r for _, r in pairs]
    prompts = draw(hs.token_rows(p_lens))
    responses = draw(hs.token_rows(r_lens))
    kwargs = {"pad_token_id": draw(st.sampled_from(pad_token_ids))}
    layout = draw(st.sampled_from(layouts))
    if layout != "left" or draw(st.booleans()):
        kwargs["layout"] = layout
    given = [kind for kind in rewards if kind != "none"]
    if given and ("none" not in rewards or _passed(draw, None)):
        kwargs["rewards"] = draw(_rewards(r_lens, given))
    if _passed(draw, loss_masks):
        kwargs["loss_masks"] = draw(st.one_of(hs.mask_rows(r_lens), hs.float_rows(r_lens)))
    if _passed(draw, logprobs):
        kwargs["logprobs"] = draw(hs.float_rows(r_lens))
    if max_seq_len or (max_seq_len is None and draw(st.integers(0, 2)) == 0):
        tight = max(p + r for p, r in pairs)  # near the tight width, on both sides of it
        kwargs["max_seq_len"] = max(0, tight + draw(st.integers(-3, 2)))
    for name in PER_TOKEN_ARGS:
        if kwargs.get(name) is not None and value_dtypes and draw(st.booleans()):
            dtype = draw(st.sampled_from(value_dtypes))
            kwargs[name] = [torch.tensor(row, dtype=dtype) if isinstance(row, list) else row
                            for row in kwargs[name]]
    # router replay, drawn last (the draws above stay as they were without it)
    if _replayed(draw, routed_experts):
        kwargs["routed_experts"] = draw(replay.route_entries([p + r for p, r in pairs]))
    if _replayed(draw, sample_support):
        kwargs["sample_support"] = draw(replay.support_entries(r_lens))
    return Case((prompts, responses), kwargs)


def _replayed(draw, option: bool | None) -> bool:
    """Whether a router-replay input is passed: drawn in a third of the examples when
    `option` is None (shrinks to not passing it)."""
    return draw(st.integers(0, 2)) == 2 if option is None else option


PER_TOKEN_ARGS = ("rewards", "loss_masks", "logprobs")


def _is_row(values) -> bool:
    """A per-token row (a list, or a 1-D tensor), not a scalar reward."""
    return isinstance(values, list) or isinstance(values, torch.Tensor) and values.dim() == 1


def _as_float32(values) -> torch.Tensor:
    """A row of values rounded to float32 as the contract does (torch.tensor(v, float32)); a
    tensor row read as the reference reads it, each value through a Python float (a signaling
    NaN becomes quiet)."""
    if isinstance(values, torch.Tensor):
        return torch.tensor(values.detach().float().tolist(), dtype=torch.float32)
    return torch.tensor(values, dtype=torch.float32)


def _passed(draw, option: bool | None) -> bool:
    """Whether an optional argument is passed: drawn when `option` is None, passing first (its
    values are where the alignment bugs show; `st.booleans()` gives False in about two thirds
    of a run's examples)."""
    return draw(st.sampled_from([True, False])) if option is None else option


def _rewards(r_lens, kinds: Sequence[str] = REWARD_KINDS[1:]):
    """Per-token reward lists, one scalar per sample, or a mix of both (the `kinds` given)."""
    scalar = hs.float32s()
    per_token = hs.float_rows(r_lens)
    mixed = st.tuples(*[st.one_of(scalar, st.lists(hs.float32s(), min_size=n, max_size=n))
                        for n in r_lens]).map(list)
    choices = {"per_token": per_token,
               "scalar": st.lists(scalar, min_size=len(r_lens), max_size=len(r_lens)),
               "mixed": mixed}
    return st.one_of(*[choices[kind] for kind in REWARD_KINDS[1:] if kind in kinds])


SILENT_DEFECTS = ("token_type", "value_type", "values_length")
LOUD_DEFECTS = ("pad_type", "pad_bool", "pad_range", "layout", "count", "empty", "values_count",
                "reward_2d", "loss_2d_tensor", "not_a_list", "token_tensor", "tokens_type")
REPLAY_DEFECTS = ("routed_experts",) * 4 + ("sample_support",) * 2
"""With `replay_defects=True`: a bad router-replay input (`batchproof.replay`: each error of
docs/conventions.md, "Router replay": 13 kinds for routes, 10 for support), routes twice as
often as support; together about a fifth of the defects, so that a run draws most kinds."""


@st.composite
def bad_rl_batch_cases(draw, *, valid: st.SearchStrategy[Case] | None = None,
                       replay_defects: bool = False) -> BadCase:
    """Invalid calls, one defect each, with the exception type the spec requires; each starts
    from a valid call (`valid`, default `rl_batch_cases()`). The defect is drawn first:
    drawn after the valid call, Hypothesis' generator picks the first kind in about a third of
    the examples and some kinds in none of a 40-example run. The defects an implementation
    can take silently (a float or str token id truncated, None or a str value turned into a
    number, a per-token row of the wrong length aligned by its own length) come first and
    three times as often as the others, which most implementations reject by crashing.
    `replay_defects`: the router-replay defects too (`REPLAY_DEFECTS`; the registry's record
    draws them, the framework adapters do not)."""
    kind = draw(st.sampled_from([*SILENT_DEFECTS * 3, *LOUD_DEFECTS,
                                 *(REPLAY_DEFECTS if replay_defects else ())]))
    bad_token = draw(st.sampled_from([1.5, "3", None]))  # for token_type
    bad_value = draw(st.sampled_from([None, "0.5", b"1"]))  # for value_type
    name = draw(st.sampled_from(["rewards", "loss_masks", "logprobs"]))  # the per-token argument
    good = draw(valid if valid is not None else rl_batch_cases())
    prompts, responses = good.args
    kwargs = dict(good.kwargs)
    r_lens = [len(r) for r in responses]
    batch = len(prompts)
    if kind in ("routed_experts", "sample_support"):
        return draw(_replay_defect(prompts, responses, kwargs, kind))
    if kind == "token_tensor":  # row tensors that are not 1-D integer ids, as a list or an NJT
        shape, dtype, raises = draw(st.sampled_from([
            ((1, 1), torch.int64, ValueError), ((1,), torch.float32, TypeError),
            ((1,), torch.bool, TypeError)]))
        rows = [torch.ones(shape, dtype=dtype) for _ in prompts]
        if draw(st.booleans()):
            rows = torch.nested.nested_tensor(rows, layout=torch.jagged)
        return BadCase(Case((rows, responses), kwargs), raises,
                       f"prompts[0] is a {dtype} tensor of shape {shape}")
    if kind == "tokens_type":
        bad = draw(st.sampled_from([5, "12", None]))
        return BadCase(Case((bad, responses), kwargs), TypeError, "prompts is not a sequence")
    if kind == "pad_type":
        kwargs["pad_token_id"] = draw(st.sampled_from([0.0, "0", None]))
        return BadCase(Case((prompts, responses), kwargs), TypeError, "pad_token_id not an int")
    if kind == "pad_bool":
        kwargs["pad_token_id"] = False
        return BadCase(Case((prompts, responses), kwargs), TypeError, "pad_token_id is a bool")
    if kind == "pad_range":  # even when no row needs padding
        kwargs["pad_token_id"] = draw(st.sampled_from([2**63, -2**63 - 1, 2**64]))
        return BadCase(Case((prompts, responses), kwargs), ValueError, "pad_token_id beyond int64")
    if kind == "layout":
        kwargs["layout"] = draw(st.sampled_from(["right", "LEFT", ""]))
        return BadCase(Case((prompts, responses), kwargs), ValueError, "unknown layout")
    if kind == "count":
        drop = draw(st.sampled_from(["prompts", "responses"]))
        extra = [[1]]
        args = (prompts + extra, responses) if drop == "responses" else (prompts, responses + extra)
        return BadCase(Case(args, kwargs), ValueError, "prompts and responses counts differ")
    if kind == "empty":
        return BadCase(Case(([], []), {"pad_token_id": 0}), ValueError, "empty batch")
    if kind == "token_type":  # a float, str or None token id (a bool is an int: index() takes it)
        name, rows = draw(st.sampled_from([("prompts", prompts), ("responses", responses)]))
        filled = [i for i, row in enumerate(rows) if row]
        if not filled:  # every row empty: a prompt token changes no per-token length
            name, rows, filled = "prompts", prompts, [0]
        row, bad = draw(st.sampled_from(filled)), bad_token
        changed = [list(r) for r in rows]
        changed[row] = (changed[row] or [0])[:-1] + [bad] if name == "responses" or rows[row] \
            else [bad]
        args = (changed, responses) if name == "prompts" else (prompts, changed)
        return BadCase(Case(args, kwargs), TypeError, f"{name}[{row}] holds a {type(bad).__name__}")
    kwargs.pop(name, None)
    if kind == "values_count":
        kwargs[name] = [[0.0] * n for n in r_lens] + [[0.0]]
        return BadCase(Case((prompts, responses), kwargs), ValueError, f"{name}: {batch + 1} rows")
    if kind == "values_length":
        row = draw(st.integers(0, batch - 1))
        rows = [[0.5] * n for n in r_lens]
        rows[row] = rows[row] + [0.5] if draw(st.booleans()) or not rows[row] else rows[row][1:]
        return BadCase(Case((prompts, responses), kwargs | {name: rows}), ValueError,
                       f"{name}[{row}] has the wrong length")
    if kind == "reward_2d":
        row = draw(st.integers(0, batch - 1))
        rows = [torch.zeros(n) for n in r_lens]
        rows[row] = torch.zeros(1, max(r_lens[row], 1))
        return BadCase(Case((prompts, responses), kwargs | {"rewards": rows}), ValueError,
                       f"rewards[{row}] is 2-D")
    if kind == "loss_2d_tensor":
        row = draw(st.integers(0, batch - 1))
        rows = [[1.0] * n for n in r_lens]
        rows[row] = [[1.0] * r_lens[row]]
        return BadCase(Case((prompts, responses), kwargs | {"loss_masks": rows}), ValueError,
                       f"loss_masks[{row}] is a nested list")
    if kind == "value_type":  # a per-token entry that is not a real number
        rows = [[0.5] * n for n in r_lens]
        filled = [i for i, n in enumerate(r_lens) if n]
        if filled:
            row = draw(st.sampled_from(filled))
            rows[row][draw(st.integers(0, r_lens[row] - 1))] = bad_value
            return BadCase(Case((prompts, responses), kwargs | {name: rows}), TypeError,
                           f"{name}[{row}] holds a non-number")
    kwargs[name] = 3
    return BadCase(Case((prompts, responses), kwargs), TypeError, f"{name} is not a list")


@st.composite
def _replay_defect(draw, prompts, responses, kwargs: dict, name: str) -> BadCase:
    """The call with a bad `routed_experts` or `sample_support` (built on the call's own, or
    on one drawn valid first when it has none); its other arguments kept as they are."""
    if name == "routed_experts":
        counts = [len(p) + len(r) for p, r in zip(prompts, responses)]
        valid = kwargs.get(name) or draw(replay.route_entries(counts))
        bad, raises, why = draw(replay.route_defect(valid, counts))
    else:
        lengths = [len(r) for r in responses]
        valid = kwargs.get(name) or draw(replay.support_entries(lengths))
        bad, raises, why = draw(replay.support_defect(valid, lengths))
    return BadCase(Case((prompts, responses), kwargs | {name: bad}), raises, why)


# --------------------------------------------------------------------------- input forms

REPLAY_ARGS = ("routed_experts", "sample_support")


def _replay_form(kwargs: dict, convert) -> dict:
    """`kwargs` with each router-replay input given as a list of arrays converted by
    `convert` (the forms are applied to valid calls)."""
    out = dict(kwargs)
    for name in REPLAY_ARGS:
        value = kwargs.get(name)
        if isinstance(value, list) and all(isinstance(e, (torch.Tensor, np.ndarray))
                                           for e in value):
            out[name] = convert(value)
    return out


def _to_tensors(case: Case) -> Case:
    prompts, responses = case.args
    kwargs = dict(case.kwargs)
    for name in ("rewards", "loss_masks", "logprobs"):
        if name in kwargs:
            kwargs[name] = [_as_float32(v) for v in kwargs[name]]
    # router-replay inputs as lists of torch tensors (the lists form mixes NumPy arrays in)
    kwargs = _replay_form(kwargs, lambda entries: [replay.as_tensor(e) for e in entries])
    return Case((hs.tensor_rows(prompts, torch.int64), hs.tensor_rows(responses, torch.int64)),
                kwargs)


def _to_jagged(case: Case, device: str = "cpu", holes: bool = False) -> Case:
    """Every per-sample argument a jagged tensor (`holes`: with a filler after each row)."""
    prompts, responses = case.args
    kwargs = dict(case.kwargs)
    for name in ("rewards", "loss_masks", "logprobs"):
        value = kwargs.get(name)
        if value is not None and all(isinstance(v, list) for v in value):
            kwargs[name] = hs.jagged(value, torch.float32, device, holes=holes)
        elif value is not None and all(isinstance(v, torch.Tensor) for v in value):
            rows = list(value.unbind(0)) if isinstance(value, torch.Tensor) else list(value)
            dtype = rows[0].dtype if len({v.dtype for v in rows}) == 1 else torch.float32
            kwargs[name] = hs.jagged_of_tensors(rows, dtype, device, holes=holes)
    kwargs = _replay_form(kwargs, lambda entries: replay.jagged_entries(
        entries, holes=holes).to(device))
    return Case((hs.jagged(prompts, torch.int64, device, holes=holes),
                 hs.jagged(responses, torch.int64, device, holes=holes)), kwargs)


NARROW_FORM = "values in float16 / bfloat16 / float64"


def narrow_dtype(case: Case) -> torch.dtype:
    """float16, bfloat16 or float64, by the batch size: each drawn across examples."""
    return (torch.float16, torch.bfloat16, torch.float64)[len(case.args[0]) % 3]


def _values_narrowed(case: Case) -> Case:
    """Per-token rows as 1-D tensors of another float dtype (float16 and bfloat16 round the
    values: a lossy form, compared with the reference on the same rounded input)."""
    dtype = narrow_dtype(case)
    kwargs = {name: [torch.tensor(row, dtype=dtype) if isinstance(row, list) else row
                     for row in rows] if rows is not None and name in PER_TOKEN_ARGS else rows
              for name, rows in case.kwargs.items()}
    return Case(case.args, kwargs, case.label)


def _on_device(case: Case, device: str) -> Case:
    """Each input form's tensors on `device` (lists stay lists: the op copies them there)."""
    return tensors_on(case, device, device_kwarg=True)


# --------------------------------------------------------------------------- helpers


def _lengths(case: Case) -> tuple[list[int], list[int]]:
    prompts, responses = case.args
    return [len(p) for p in prompts], [len(r) for r in responses]


def _layout(case: Case) -> str:
    return case.kwargs.get("layout", "left")


def _f32(values) -> list[float]:
    return _as_float32(values).tolist()


def describe_row(case: Case, row: int) -> str:
    p_lens, r_lens = _lengths(case)
    return f"p={p_lens[row]} r={r_lens[row]} (layout {_layout(case)!r})"


def picture(td) -> dict[str, list[str]]:
    """One character per column: `.` pad, `p` prompt, `r` response — for sequence and response
    tensors (the response tensor's columns are sequence columns `T-R ...` in both layouts)."""
    attention, response = td["attention_mask"].tolist(), td["response_mask"].tolist()
    width, r_width = td["attention_mask"].shape[1], td["response_mask"].shape[1]
    offset = width - r_width
    sequence, responses = [], []
    for att, resp in zip(attention, response):
        row = ["." if a == 0 else "p" for a in att]
        for j, flag in enumerate(resp):
            if flag and 0 <= offset + j < width and att[offset + j]:
                row[offset + j] = "r"
        sequence.append("".join(row))
        responses.append("".join("r" if flag else "." for flag in resp))
    return {"sequence": sequence, "response": responses}


def _assert(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


# --------------------------------------------------------------------------- properties


def prop_shapes_and_dtypes(case: Case, td) -> None:
    """Property 1: keys, shapes, dtypes; T = max(p+r) (left) or max p + max r (two_segment)."""
    p_lens, r_lens = _lengths(case)
    batch, max_r = len(p_lens), max(r_lens)
    if _layout(case) == "left":
        width = max(p + r for p, r in zip(p_lens, r_lens))
        tight = any(p == max(p_lens) and r == max_r for p, r in zip(p_lens, r_lens))
        _assert(width <= max(p_lens) + max_r and (width == max(p_lens) + max_r) == tight,
                "T <= max p + max r, with equality iff one sample has both maxima")
    else:
        width = max(p_lens) + max_r
    expected = {"input_ids": ((batch, width), torch.int64),
                "attention_mask": ((batch, width), torch.int64),
                "position_ids": ((batch, width), torch.int64),
                "response_mask": ((batch, max_r), torch.int64),
                "loss_mask": ((batch, max_r), torch.float32)}
    optional = {"rewards": "rewards", "logprobs": "rollout_logprobs"}
    for arg, key in optional.items():
        if case.kwargs.get(arg) is not None:
            expected[key] = ((batch, max_r), torch.float32)
    routes = replay_entries(case, "routed_experts")
    if routes is not None:  # router replay: the routes' and the support's dtypes, as given
        expected["routed_experts"] = ((batch, width, *routes[0].shape[1:]), routes[0].dtype)
        expected["router_padding_mask"] = ((batch, width), torch.bool)
    support = replay_entries(case, "sample_support")
    if support is not None:
        expected["sample_support"] = ((batch, max_r, support[0].shape[1]), support[0].dtype)
    tensor_keys = {k for k in td.keys() if not td.is_non_tensor(k)}
    _assert(tensor_keys == set(expected), f"tensor keys {sorted(tensor_keys)} != "
            f"{sorted(expected)}")
    for key, (shape, dtype) in expected.items():
        value = td[key]
        _assert(tuple(value.shape) == shape and value.dtype == dtype,
                f"{key}: got {tuple(value.shape)} {value.dtype}, expected {shape} {dtype}")
    _assert(td.get_non_tensor("max_response_length") == max_r, "max_response_length != R")
    _assert(td.get_non_tensor("layout") == _layout(case), "layout entry differs")
    _assert(td.get_non_tensor("pad_token_id") == case.kwargs["pad_token_id"],
            "pad_token_id entry differs")


def prop_tokens_preserved(case: Case, td) -> None:
    """Property 2: the attended columns are exactly prompt + response; the rest is pad."""
    prompts, responses = case.args
    pad = case.kwargs["pad_token_id"]
    for i, (ids, att) in enumerate(zip(td["input_ids"].tolist(), td["attention_mask"].tolist())):
        kept = [t for t, a in zip(ids, att) if a == 1]
        _assert(kept == list(prompts[i]) + list(responses[i]),
                f"row {i}: attended tokens {kept} != prompt + response")
        _assert(all(t == pad for t, a in zip(ids, att) if a == 0),
                f"row {i}: a masked-out column does not hold pad_token_id {pad}")


def prop_masks_are_steps(case: Case, td) -> None:
    """Property 3: masks are 0…0 1…1 steps (left) — two_segment: 0…0 1…1 0…0 and 1…1 0…0 —
    with sums p+r and r, whatever the token values (never derived from `token != pad`)."""
    p_lens, r_lens = _lengths(case)
    left = _layout(case) == "left"
    for i, (att, resp) in enumerate(zip(td["attention_mask"].tolist(),
                                        td["response_mask"].tolist())):
        n, r = p_lens[i] + r_lens[i], r_lens[i]
        width, r_width = len(att), len(resp)
        start = width - n if left else width - r_width - p_lens[i]
        _assert(att == [0] * start + [1] * n + [0] * (width - start - n),
                f"row {i}: attention_mask {att} is not the step for p+r={n}")
        want = [0] * (r_width - r) + [1] * r if left else [1] * r + [0] * (r_width - r)
        _assert(resp == want, f"row {i}: response_mask {resp} is not the step for r={r}")


def prop_positions(case: Case, td) -> None:
    """position_ids = max(cumsum(attention_mask) - 1, 0) per row."""
    for i, (att, pos) in enumerate(zip(td["attention_mask"].tolist(),
                                       td["position_ids"].tolist())):
        running, want = 0, []
        for a in att:
            running += a
            want.append(max(running - 1, 0))
        _assert(pos == want, f"row {i}: position_ids {pos} != {want}")


def prop_alignment(case: Case, td) -> None:
    """Property 4: response column j is sequence column T-R+j (left) / P+j (two_segment), and
    every per-token value sits on its token (bit for bit, float32); zeros elsewhere."""
    prompts, responses = case.args
    ids = td["input_ids"].tolist()
    width, r_width = td["input_ids"].shape[1], td["response_mask"].shape[1]
    left = _layout(case) == "left"
    for i, response in enumerate(responses):
        r = len(response)
        first = r_width - r if left else 0
        for k, token in enumerate(response):
            _assert(ids[i][width - r_width + first + k] == token,
                    f"row {i}: response token {k} is not at sequence column T-R+{first + k}")
        for arg, key in (("loss_masks", "loss_mask"), ("rewards", "rewards"),
                         ("logprobs", "rollout_logprobs")):
            given = case.kwargs.get(arg)
            if given is None:
                continue
            row = td[key][i]
            values = given[i]
            if not _is_row(values):  # a scalar reward: on the last response token
                values = [0.0] * (r - 1) + [values] if r else []
            want = torch.zeros(r_width, dtype=torch.float32)
            want[first:first + r] = _as_float32(values)
            _assert(torch.equal(row.view(torch.int32), want.view(torch.int32)),
                    f"row {i}: {key} {row.tolist()} != {want.tolist()} (bitwise)")


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and bits (a NaN equals the NaN of the same bits: torch.equal says a
    NaN equals nothing)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        holder = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(holder), b.contiguous().view(holder))
    return torch.equal(a, b)


def prop_permutation(case: Case, td, candidate) -> None:
    """Property 5: permuting the samples permutes the rows and nothing else."""
    prompts, responses = case.args
    order = list(range(len(prompts)))[::-1]
    kwargs = dict(case.kwargs)
    for name in ("rewards", "loss_masks", "logprobs"):
        if kwargs.get(name) is not None:
            kwargs[name] = [kwargs[name][i] for i in order]
    for name in REPLAY_ARGS:
        if kwargs.get(name) is not None:
            kwargs[name] = replay.permuted(kwargs[name], order)
    permuted = candidate([prompts[i] for i in order], [responses[i] for i in order], **kwargs)
    index = torch.tensor(order)
    for key in td.keys():
        if not td.is_non_tensor(key):
            _assert(_same_bits(permuted[key], td[key][index]), f"{key}: rows not permuted")


def prop_layouts_agree(case: Case, td, candidate) -> None:
    """Property 6: `left` and `two_segment` carry the same tokens and per-token values."""
    other = "two_segment" if _layout(case) == "left" else "left"
    twin = candidate(*case.args, **(dict(case.kwargs) | {"layout": other}))
    for i in range(td.batch_size[0]):
        for a, b in ((td, twin),):
            real_a = a["input_ids"][i][a["attention_mask"][i].bool()]
            real_b = b["input_ids"][i][b["attention_mask"][i].bool()]
            _assert(torch.equal(real_a, real_b), f"row {i}: layouts carry different tokens")
        for key in ("loss_mask", "rewards", "rollout_logprobs"):
            if key in td.keys():
                va = td[key][i][td["response_mask"][i].bool()]
                vb = twin[key][i][twin["response_mask"][i].bool()]
                _assert(torch.equal(va.view(torch.int32), vb.view(torch.int32)),
                        f"row {i}: {key} differs between layouts")
        # router replay: token by token, the same route (and mask) on the same token, the same
        # support row on the same response token
        for key in ("routed_experts", "router_padding_mask"):
            if key in td.keys():
                _assert(key in twin.keys() and torch.equal(
                    td[key][i][td["attention_mask"][i].bool()],
                    twin[key][i][twin["attention_mask"][i].bool()]),
                    f"row {i}: {key} differs between layouts on the row's tokens")
        if "sample_support" in td.keys():
            _assert("sample_support" in twin.keys() and torch.equal(
                td["sample_support"][i][td["response_mask"][i].bool()],
                twin["sample_support"][i][twin["response_mask"][i].bool()]),
                f"row {i}: sample_support differs between layouts on the response tokens")


# --------------------------------------------------------------------------- router replay


def replay_entries(case: Case, name: str) -> list[torch.Tensor] | None:
    """A router-replay input's per-sample arrays as CPU tensors, or None when not passed."""
    value = case.kwargs.get(name)
    return None if value is None else [replay.as_tensor(e) for e in replay.entries_of(value)]


def token_starts(case: Case, width: int) -> list[int]:
    """The sequence column of each row's token 0, from the lengths alone: `T - p_i - r_i`
    (left), `P - p_i` (two_segment)."""
    p_lens, r_lens = _lengths(case)
    if _layout(case) == "left":
        return [width - p - r for p, r in zip(p_lens, r_lens)]
    return [max(p_lens) - p for p in p_lens]


def _absent(td, keys: tuple[str, ...], given: str) -> None:
    extra = [key for key in keys if key in td.keys()]
    _assert(not extra, f"{extra} in the output, but no {given} was given: without router "
            "replay the outputs are as before")


def prop_routes_on_their_tokens(case: Case, td) -> None:
    """Every captured route reaches its own token exactly once, in both layouts: route j of
    sample i sits at column start_i + j of row i of routed_experts (B, T, layers, topk), bit for
    bit and in the given dtype; router_padding_mask (B, T, bool) is False exactly on those
    columns. Without routes, neither output is there."""
    entries = replay_entries(case, "routed_experts")
    if entries is None:
        return _absent(td, ("routed_experts", "router_padding_mask"), "routed_experts")
    batch, width = td["input_ids"].shape
    layers, topk = entries[0].shape[1:]
    routes, mask = td["routed_experts"].cpu(), td["router_padding_mask"].cpu()
    _assert(tuple(routes.shape) == (batch, width, layers, topk)
            and routes.dtype == entries[0].dtype,
            f"routed_experts is {tuple(routes.shape)} {routes.dtype}, expected "
            f"{(batch, width, layers, topk)} {entries[0].dtype} (the dtype as given)")
    _assert(tuple(mask.shape) == (batch, width) and mask.dtype == torch.bool,
            f"router_padding_mask is {tuple(mask.shape)} {mask.dtype}, expected "
            f"({batch}, {width}) bool")
    for i, (entry, start) in enumerate(zip(entries, token_starts(case, width))):
        columns = list(range(start, start + entry.shape[0]))
        unmasked = (~mask[i]).nonzero().flatten().tolist()
        _assert(unmasked == columns, f"row {i}: router_padding_mask is False on columns "
                f"{unmasked}, but its captured tokens sit on columns {columns}")
        for j, column in enumerate(columns):
            _assert(torch.equal(routes[i, column], entry[j]),
                    f"row {i}, column {column} (token {j}) holds route "
                    f"{routes[i, column].tolist()}, its captured route is {entry[j].tolist()}")


def prop_dummy_routes_where_masked(case: Case, td) -> None:
    """Every column where router_padding_mask is True (pads, uncaptured tokens) holds the dummy
    route 0 .. topk-1 on every layer: topk distinct experts, never zeros (verl #7524), never a
    stale real route (SGLang #36404)."""
    if replay_entries(case, "routed_experts") is None:
        return
    routes, mask = td["routed_experts"].cpu(), td["router_padding_mask"].cpu()
    for i in range(routes.shape[0]):
        replay.assert_dummy_where_masked(routes[i], mask[i], f"row {i}, column")


def prop_route_count_per_layer(case: Case, td) -> None:
    """Per layer the batch's B * T slots send B * T * topk distinct (token, expert) assignments
    (a dropless dispatcher's invariant; all-zero padding routes send one per slot)."""
    entries = replay_entries(case, "routed_experts")
    if entries is not None:
        replay.assert_route_count(td["routed_experts"].cpu(), entries, "the batch")


def prop_support_on_response_slots(case: Case, td) -> None:
    """sample_support (B, R, top_k), in the given dtype: row i's support rows on its response
    columns, aligned as loss_mask (the last r_i columns in "left", the first r_i in
    "two_segment"), a row of -1 on every other column, bit for bit. Without sample_support, no
    such output."""
    entries = replay_entries(case, "sample_support")
    if entries is None:
        return _absent(td, ("sample_support",), "sample_support")
    support = td["sample_support"].cpu()
    batch, r_width = td["response_mask"].shape
    top_k = entries[0].shape[1]
    _assert(tuple(support.shape) == (batch, r_width, top_k)
            and support.dtype == entries[0].dtype,
            f"sample_support is {tuple(support.shape)} {support.dtype}, expected "
            f"{(batch, r_width, top_k)} {entries[0].dtype}")
    left = _layout(case) == "left"
    for i, entry in enumerate(entries):
        first = r_width - entry.shape[0] if left else 0
        for column in range(r_width):
            k = column - first
            want = entry[k] if 0 <= k < entry.shape[0] else torch.full((top_k,), -1,
                                                                       dtype=entry.dtype)
            _assert(torch.equal(support[i, column], want),
                    f"row {i}, response column {column}: sample_support "
                    f"{support[i, column].tolist()}, expected {want.tolist()}"
                    + (f" (response token {k})" if 0 <= k < entry.shape[0] else ""))


def prop_max_seq_len_only_warns(case: Case, td, candidate) -> None:
    """`max_seq_len` never truncates: outputs are identical without it; one WARNING iff T > it."""
    kwargs = {k: v for k, v in case.kwargs.items() if k != "max_seq_len"}
    assert_identical(candidate(*case.args, **kwargs), td)
    limit = case.kwargs.get("max_seq_len")
    if limit is None:
        return
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        candidate(*case.args, **case.kwargs)
    finally:
        root.removeHandler(handler)
    warnings = [r for r in records if r.levelno == logging.WARNING]
    width = td["input_ids"].shape[1]
    if width > limit:
        _assert(len(warnings) == 1 and str(width) in warnings[0].getMessage()
                and str(limit) in warnings[0].getMessage(),
                f"expected one WARNING naming {width} and {limit}, got "
                f"{[w.getMessage() for w in warnings]}")
    else:
        _assert(not warnings, "a warning although T <= max_seq_len")


# --------------------------------------------------------------------------- pins

ANTI_CORRELATED = Case(([[11], [21, 22, 23, 24, 25]], [[12, 13, 14, 15, 16], [26]]),
                       {"pad_token_id": 0})


def _expect_tight_width(case: Case, td) -> None:
    _assert(tuple(td["input_ids"].shape) == (2, 6),
            f"anti-correlated lengths (1+5, 5+1) must give T = 6, got {tuple(td['input_ids'].shape)}")


PAD_COLLISION = Case(([[0, 5, 0], [7]], [[0, 0], [9, 0, 0]]),
                     {"pad_token_id": 0, "loss_masks": [[1, 0], [1, 1, 0]]})


def _expect_masks_from_lengths(case: Case, td) -> None:
    _assert(td["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]],
            f"attention_mask must come from lengths, got {td['attention_mask'].tolist()}")


def _expect_literal(key: str, rows: list):
    def expect(case: Case, td) -> None:
        _assert(td[key].tolist() == rows, f"{key} {td[key].tolist()} != {rows}")
    return expect


def _signaling_nans(dtype: torch.dtype, *others: float) -> torch.Tensor:
    """A row whose first value is a signaling NaN of `dtype` (its quiet bit clear), then
    `others`."""
    bits = {torch.float32: (0x7F800001, torch.int32), torch.float16: (0x7C01, torch.int16),
            torch.bfloat16: (0x7F81, torch.int16)}
    pattern, holder = bits[dtype]
    nan = torch.tensor([pattern], dtype=holder).view(dtype)
    return torch.cat([nan, torch.tensor(others, dtype=dtype)])


SIGNALING_NANS = Case(
    ([[1], [2, 3]], [[4, 5], [6]]),
    {"pad_token_id": 0, "rewards": [_signaling_nans(torch.float32, 0.5), _signaling_nans(
        torch.float32)], "loss_masks": [_signaling_nans(torch.float16, 1.0),
                                        torch.tensor([1.0], dtype=torch.float16)],
     "logprobs": torch.nested.nested_tensor([_signaling_nans(torch.bfloat16, -1.0),
                                             torch.tensor([-0.5], dtype=torch.bfloat16)],
                                            layout=torch.jagged)})

BUILD_PINS = [
    Pin("signaling_nan_values", SIGNALING_NANS,
        "a signaling NaN in a tensor row of per-token values (float32, float16, a bfloat16 "
        "jagged row) is read as the reference reads every value, through a Python float: the "
        "quiet NaN of the same payload. The impl copied the tensors' bits as they were (the "
        "jagged path, and the tensor rows path added 2026-12-01), a bit-for-bit difference no "
        "strategy drew (drawn values come from Python floats, quiet already)",
        forms=("tensors", "jagged")),
    Pin("two_segment_width_inflation", ANTI_CORRELATED,
        "legacy layout padded prompts and responses separately: width max p + max r (10 here) "
        "instead of max(p + r) = 6 on anti-correlated multi-turn lengths (SkyRL #1285)",
        _expect_tight_width),
    Pin("mask_from_token_not_pad", PAD_COLLISION,
        "masks derived from `token != pad` drop real tokens whose id equals the pad id",
        _expect_masks_from_lengths),
    Pin("scalar_reward_on_last_token",
        Case(([[1, 2], [3]], [[4], [5, 6, 7]]), {"pad_token_id": 0, "rewards": [1.5, -2.0]}),
        "a scalar reward belongs on the row's last response token (column R-1 in the left "
        "layout), not its first; response tensors right-aligned",
        _expect_literal("rewards", [[0.0, 0.0, 1.5], [0.0, 0.0, -2.0]])),
    Pin("empty_response_and_empty_row",
        Case(([[1, 2], [], []], [[], [3], []]), {"pad_token_id": 0, "rewards": [0.5, 1.0, 2.0],
                                                "layout": "two_segment"}),
        "empty responses, an empty prompt and an all-pad row (p + r == 0) are legal; a scalar "
        "reward of a row without response tokens is dropped, not an error",
        _expect_literal("rewards", [[0.0], [1.0], [0.0]])),
    Pin("max_seq_len_never_truncates",
        Case(([[1, 2, 3], [4]], [[5, 6], [7]]), {"pad_token_id": 0, "max_seq_len": 3}),
        "a width over max_seq_len is logged, never truncated (truncation silently drops tokens)"),
    Pin("max_seq_len_equal_to_width",
        Case(([[1, 2, 3], [4]], [[5, 6], [7]]), {"pad_token_id": 0, "max_seq_len": 5}),
        "the bound is exclusive: T == max_seq_len (5) fits and logs nothing; only T > "
        "max_seq_len warns (property max_seq_len_only_warns runs on this case)"),
    Pin("loss_mask_length_mismatch",
        BadCase(Case(([[1], [2]], [[3, 4], [5]]), {"pad_token_id": 0,
                                                   "loss_masks": [[1, 1], [1, 1]]}),
                ValueError, "SkyRL right-aligns a too-long list silently"),
        "a per-token list of the wrong length must be rejected, not right-aligned by its own length"),
    Pin("float_token_id",
        BadCase(Case(([[1.5]], [[2]]), {"pad_token_id": 0}), TypeError, "a float token id"),
        "a float token id must be a TypeError: SkyRL turns the whole batch into float32 "
        "sequences, numpy.fromiter with an int dtype truncates it"),
    Pin("none_per_token_value",
        BadCase(Case(([[1]], [[2, 3]]), {"pad_token_id": 0, "rewards": [[None, 0.5]]}),
                TypeError, "a None reward entry"),
        "a None per-token value must be a TypeError: numpy.fromiter(dtype=float32) makes it NaN "
        "(batchproof's own impl did, until 2026-11-24; SkyRL 0.4.0 does)"),
    Pin("output_device_given", Case(([[1, 2]], [[3]]), {"pad_token_id": 0, "device": "cpu"}),
        "an explicit device places the outputs there"),
    Pin("count_mismatch", BadCase(Case(([[1], [2]], [[3]]), {"pad_token_id": 0}), ValueError,
                                  "2 prompts, 1 response"),
        "prompts and responses pair up one to one: never zip-truncate"),
    Pin("prompts_not_a_sequence", BadCase(Case((5, [[3]]), {"pad_token_id": 0}), TypeError,
                                          "prompts is an int"),
        "prompts must be a sequence of rows"),
    Pin("tensor_row_2d",
        BadCase(Case(([torch.ones(1, 2, dtype=torch.int64)], [[3]]), {"pad_token_id": 0}),
                ValueError, "prompts[0] is 2-D"),
        "a 2-D row tensor is a ValueError naming the row, never flattened"),
    Pin("tensor_row_float",
        BadCase(Case(([torch.tensor([1.0])], [[3]]), {"pad_token_id": 0}), TypeError,
                "prompts[0] holds floats"),
        "a float row tensor is a TypeError naming the row, never truncated to ids"),
    Pin("jagged_float_prompts",
        BadCase(Case((torch.nested.nested_tensor([torch.tensor([1.0])], layout=torch.jagged),
                      [[3]]), {"pad_token_id": 0}), TypeError, "float jagged prompts"),
        "a float jagged tensor is read row by row: the reference's TypeError naming row 0 (the "
        "impl raised its own message until 2026-11-24, and a TypeError for a 3-D one)"),
    Pin("jagged_3d_prompts",
        BadCase(Case((torch.nested.nested_tensor([torch.ones(1, 2, dtype=torch.int64)],
                                                 layout=torch.jagged), [[3]]),
                     {"pad_token_id": 0}), ValueError, "prompts[0] is 2-D"),
        "a 3-D jagged tensor's rows are 2-D: the reference's ValueError naming row 0"),
    *[Pin(name, BadCase(Case((prompts, [[2]]), {"pad_token_id": 0} | kwargs), raises, why), why)
      for name, prompts, kwargs, raises, why in [
          ("row_not_a_sequence", [5], {}, TypeError, "prompts[0] is an int"),
          ("scalar_loss_mask", [[1]], {"loss_masks": [1.0]}, ValueError,
           "a scalar per-row value is a reward only"),
          ("string_reward_row", [[1]], {"rewards": ["1"]}, TypeError, "rewards[0] is a str"),
          ("tensor_entry_in_values", [[1]], {"logprobs": [[torch.zeros(2)]]}, ValueError,
           "a 1-D tensor inside a per-token list"),
      ]],
]

# router replay: the public reports of routes placed on the wrong slot (docs/rl_batch.md)


def _routes(dtype: torch.dtype, *rows: list) -> list[torch.Tensor]:
    """One `[c_i, 1, topk]` tensor of `dtype` per sample, from each sample's captured routes."""
    return [torch.tensor(row, dtype=dtype).reshape(len(row), 1, -1) for row in rows]


def _expect_routes(routes: list, mask: list):
    """A pin's literal expectation: routed_experts[:, :, 0] (layer 0, as lists) and
    router_padding_mask."""
    def expect(case: Case, td) -> None:
        got = td["routed_experts"][:, :, 0].tolist(), td["router_padding_mask"].tolist()
        _assert(got == (routes, mask), f"routed_experts[:, :, 0] {got[0]}, router_padding_mask "
                f"{got[1]}: expected {routes}, {mask}")
    return expect


_F, _T, _D2, _D3 = False, True, [0, 1], [0, 1, 2]  # the dummy routes of topk 2 and 3

REPLAY_PINS = [
    Pin("sglang_36404_stale_rows_repeated",
        Case(([[1, 2], [3]], [[4, 5], [6]]), {"pad_token_id": 0, "routed_experts": _routes(
            torch.int32, [[4, 7], [2, 5], [6, 1]], [[3, 6]])}),
        "SGLang #36404: the rows past the captured ones came back holding a stale routing row "
        "(one real route repeated over the padded region): every slot without a captured "
        "route (the last sampled token, the left pad) holds the dummy route, never a repeat of "
        "the row's last route",
        _expect_routes([[[4, 7], [2, 5], [6, 1], _D2], [_D2, _D2, [3, 6], _D2]],
                       [[_F, _F, _F, _T], [_T, _T, _F, _T]])),
    Pin("verl_7524_padding_routes_not_zeros",
        Case(([[1], [2, 3]], [[4, 5], [6]]), {
            "pad_token_id": 0, "layout": "two_segment", "routed_experts": _routes(
                torch.int16, [[5, 2, 9], [1, 8, 3]], [[7, 0, 4], [6, 2, 1]])}),
        "verl #7524: the padding slots of a two-segment batch (verl's own layout) were given "
        "the all-zero route (topk times expert 0: a dropless dispatcher's tokens * topk "
        "broken); the left pad, the uncaptured tokens and the right pad get 0, 1, 2",
        _expect_routes([[_D3, [5, 2, 9], [1, 8, 3], _D3], [[7, 0, 4], [6, 2, 1], _D3, _D3]],
                       [[_T, _F, _F, _T], [_F, _F, _T, _T]])),
    Pin("rllm_543_offset_from_longest_prompt",
        Case(([[1], [2, 3, 4]], [[5, 6, 7], [8]]), {"pad_token_id": 0, "routed_experts": _routes(
            torch.uint8, [[9, 8], [7, 6], [5, 4], [3, 2]], [[1, 9], [8, 2], [7, 3]])}),
        "rllm #543 places a sample's routes at [max_prompt_length - len(prompt), "
        "max_prompt_length + len(response)), the two-segment offset; in the left layout the "
        "row's tokens start at T - p_i - r_i (here sample 0 at 0, not 2), in uint8 as given",
        _expect_routes([[[9, 8], [7, 6], [5, 4], [3, 2]], [[1, 9], [8, 2], [7, 3], _D2]],
                       [[_F, _F, _F, _F], [_F, _F, _F, _T]])),
    Pin("routes_across_prompt_response_boundary",
        Case(([[1, 2], [3]], [[4, 5], [6, 7]]), {"pad_token_id": 0, "routed_experts": _routes(
            torch.int64, [[10, 11], [12, 13], [14, 15]], [[20, 21], [22, 23]])}),
        "the first response token's route on the first response token: a layout that places "
        "prompt and response routes separately and shifts the response part by one puts it "
        "on the last prompt token (the logits' shift applied to the routes)",
        _expect_routes([[[10, 11], [12, 13], [14, 15], _D2], [_D2, [20, 21], [22, 23], _D2]],
                       [[_F, _F, _F, _T], [_T, _F, _F, _T]])),
    Pin("loss_masked_tokens_replayed",
        Case(([[1]], [[2, 3, 4]]), {"pad_token_id": 0, "loss_masks": [[0.0, 1.0, 0.0]],
                                    "routed_experts": _routes(torch.int32, [[3, 1], [2, 0],
                                                                            [1, 3]])}),
        "a captured token outside the loss (a tool or prompt token, loss mask 0) conditions the "
        "tokens after it: its route is replayed and unmasked, never swapped for the dummy route",
        _expect_routes([[[3, 1], [2, 0], [1, 3], _D2]], [[_F, _F, _F, _T]])),
    Pin("support_follows_loss_mask_columns",
        Case(([[1, 2], [3]], [[4], [5, 6]]), {"pad_token_id": 0, "layout": "two_segment",
                                               "sample_support": [
            torch.tensor([[7, -1]], dtype=torch.int32),
            torch.tensor([[8, 9], [5, -1]], dtype=torch.int32)]}),
        "sample support sits on the response columns as loss_mask does (left-aligned in "
        "two_segment, right-aligned in left), a row of -1 elsewhere",
        _expect_literal("sample_support", [[[7, -1], [-1, -1]], [[8, 9], [5, -1]]])),
    *[Pin(name, BadCase(Case(([[1, 2], [3]], [[4], [5]]), {"pad_token_id": 0} | kwargs),
                        raises, why), why)
      for name, kwargs, raises, why in [
          ("routes_longer_than_sample",
           {"routed_experts": [torch.zeros((4, 1, 2), dtype=torch.uint8),
                               torch.zeros((0, 1, 2), dtype=torch.uint8)]}, ValueError,
           "4 routes for 3 tokens: never truncated"),
          ("routes_dtypes_differ",
           {"routed_experts": [torch.zeros((1, 1, 2), dtype=torch.uint8),
                               torch.zeros((1, 1, 2), dtype=torch.int32)]}, TypeError,
           "uint8 and int32 routes in one batch: never widened"),
          ("support_rows_not_per_response_token",
           {"sample_support": [torch.full((2, 2), -1, dtype=torch.int32),
                               torch.full((1, 2), -1, dtype=torch.int32)]}, ValueError,
           "2 support rows for 1 response token"),
          ("routes_checked_after_per_token_values",
           {"rewards": [[0.5, 0.5], [0.5]],
            "routed_experts": [torch.zeros((1, 1, 2)), torch.zeros((1, 1, 2))]}, ValueError,
           "a reward row of the wrong length and float routes: the rewards' error first")]],
]

BUILD_PINS += REPLAY_PINS

# --------------------------------------------------------------------------- response_values


@st.composite
def response_values_cases(draw) -> Case:
    counts = draw(hs.lengths(draw(hs.batch_sizes())))
    width = max(counts) + draw(st.integers(0, 2))
    mask = torch.tensor([[0] * (width - n) + [1] * n for n in counts], dtype=torch.int64)
    values = torch.tensor(draw(hs.float_rows([width] * len(counts))), dtype=torch.float32)
    return Case((values.reshape(len(counts), width), mask))


@st.composite
def bad_response_values_cases(draw) -> BadCase:
    values = torch.zeros(2, 3)
    mask = draw(st.sampled_from([torch.ones(2, 4, dtype=torch.int64),
                                 torch.ones(3, dtype=torch.int64)]))
    return BadCase(Case((values, mask)), ValueError, "mask shape differs from values")


def prop_last_n_entries(case: Case, rows) -> None:
    """Row i is exactly the last n_i entries of values[i]; n_i == 0 gives an empty tensor."""
    values, mask = case.args
    _assert(isinstance(rows, list) and len(rows) == values.shape[0], "one tensor per row")
    for i, row in enumerate(rows):
        n = int(mask[i].sum())
        want = values[i][values.shape[1] - n:]
        _assert(row.dtype == values.dtype and tuple(row.shape) == (n,),
                f"row {i}: shape {tuple(row.shape)} {row.dtype}, expected ({n},) {values.dtype}")
        _assert(torch.equal(row.view(torch.int32), want.view(torch.int32)),
                f"row {i}: {row.tolist()} != last {n} entries {want.tolist()}")


X_MINUS_ZERO = Case((torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
                     torch.tensor([[0, 1, 1], [0, 0, 0]])))
RIGHT_ALIGNED = Case((torch.tensor([[9.0, 2.0, 3.0], [7.0, 8.0, 6.0]]),
                      torch.tensor([[0, 1, 1], [0, 0, 1]])))

VALUES_PINS = [
    Pin("x_minus_zero", X_MINUS_ZERO,
        "`x[-n:]` with n == 0 returns the whole row instead of nothing (SkyRL #1367)"),
    Pin("left_aligned_slice", RIGHT_ALIGNED,
        "`x[:n]` on right-aligned response tensors returns pad/prompt columns (SkyRL #1367)"),
]

# --------------------------------------------------------------------------- records

EXAMPLE = Case(([[11, 12, 13], [21], [31, 32]], [[14, 15], [22, 23, 24, 25], []]),
               {"pad_token_id": 0, "rewards": [1.0, 0.0, 0.5]})

# lists: packed by struct (_write_lists); tensors and jagged: the one-pass kernel (Numba on the
# CPU, Triton on CUDA); scalar rewards: the torch composition, with the CPU's row copies
_CPU_PATHS = ("cpu:rl_batch._write_lists", "cpu:rl_batch._copy_rows_cpu",
              "cpu:rl_batch._window_rows")
_TRITON_PATHS = ("triton:rl_batch._sequence_rows", "triton:rl_batch._response_rows")
BUILD_PATHS = Paths(kernel=("numba:rl_batch.write_rows", *_CPU_PATHS), cpu=_CPU_PATHS,
                    triton=_TRITON_PATHS,
                    # list rows reach the device through a pinned copy (device=cuda is passed)
                    cuda=(*_TRITON_PATHS, "cuda:_sync.host_put"))

BUILD_RL_BATCH = register(OpInfo(
    op="rl_batch",
    function="build_rl_batch",
    valid=rl_batch_cases(routed_experts=None, sample_support=None),
    # one defect, or two on different arguments: the reference's first check decides
    invalid=hs.one_or_two_defects(
        functools.partial(bad_rl_batch_cases, replay_defects=True),
        rl_batch_cases(routed_experts=None, sample_support=None), _reference.build_rl_batch),
    compare=assert_identical,
    properties=[
        Property.of(prop_shapes_and_dtypes),
        Property.of(prop_tokens_preserved),
        Property.of(prop_masks_are_steps),
        Property.of(prop_positions),
        Property.of(prop_alignment),
        Property.of(prop_permutation, metamorphic=True),
        Property.of(prop_layouts_agree, metamorphic=True, varies=("layout",)),
        Property.of(prop_max_seq_len_only_warns, metamorphic=True),
        Property.of(prop_routes_on_their_tokens),
        Property.of(prop_dummy_routes_where_masked),
        Property.of(prop_route_count_per_layer),
        Property.of(prop_support_on_response_slots),
    ],
    pins=BUILD_PINS,
    forms={"lists": lambda c: c, "tensors": _to_tensors, "jagged": _to_jagged,
           "jagged with holes": lambda c: _to_jagged(c, holes=True),
           NARROW_FORM: _values_narrowed},
    lossy_forms=(NARROW_FORM,),
    devices=("cpu", "cuda"),
    to_device=_on_device,
    paths=BUILD_PATHS,
    describe_row=describe_row,
    picture=picture,
    example=EXAMPLE,
    targets=lambda case: {"padding waste": _padding_waste(case), "batch size": len(case.args[0])},
    doc="prompts + responses → RL training batch, left (SkyRL unified) or two_segment layout",
))


def _padding_waste(case: Case) -> float:
    p_lens, r_lens = _lengths(case)
    width = max(p + r for p, r in zip(p_lens, r_lens))
    return len(p_lens) * width - sum(p_lens) - sum(r_lens)


RESPONSE_VALUES = register(OpInfo(
    op="rl_batch",
    function="response_values",
    valid=response_values_cases(),
    invalid=bad_response_values_cases(),
    compare=assert_identical,
    properties=[Property.of(prop_last_n_entries)],
    pins=VALUES_PINS,
    example=X_MINUS_ZERO,
    doc="the valid entries of a right-aligned response tensor, row by row",
))

"""Registry records for `rl_batch`: `build_rl_batch` and `response_values` (spec: rl_batch.md)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from hypothesis import strategies as st

from batchproof import blocks as hs
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
) -> Case:
    """A valid `build_rl_batch` call: structure (lengths) first, then tokens and per-token values.

    `pairs`: the (prompt, response) lengths (default `blocks.length_pairs()`).
    `rewards`: the kinds of `REWARD_KINDS` to draw from. `loss_masks`, `logprobs`,
    `max_seq_len`: None draws whether to pass it, True always passes it, False never.
    `value_dtypes`: when given, each per-token argument may come as 1-D tensors of one of these
    dtypes instead of lists (the placement tests draw all four float dtypes so; the registry
    keeps lists and narrows the values in a lossy input form instead). The other defaults are
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
    return Case((prompts, responses), kwargs)


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


@st.composite
def bad_rl_batch_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """Invalid calls, one defect each, with the exception type the spec requires; each starts
    from a valid call (`valid`, default `rl_batch_cases()`). The defect is drawn first:
    drawn after the valid call, Hypothesis' generator picks the first kind in about a third of
    the examples and some kinds in none of a 40-example run. The defects an implementation
    can take silently (a float or str token id truncated, None or a str value turned into a
    number, a per-token row of the wrong length aligned by its own length) come first and
    three times as often as the others, which most implementations reject by crashing."""
    kind = draw(st.sampled_from([*SILENT_DEFECTS * 3, *LOUD_DEFECTS]))
    bad_token = draw(st.sampled_from([1.5, "3", None]))  # for token_type
    bad_value = draw(st.sampled_from([None, "0.5", b"1"]))  # for value_type
    name = draw(st.sampled_from(["rewards", "loss_masks", "logprobs"]))  # the per-token argument
    good = draw(valid if valid is not None else rl_batch_cases())
    prompts, responses = good.args
    kwargs = dict(good.kwargs)
    r_lens = [len(r) for r in responses]
    batch = len(prompts)
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


# --------------------------------------------------------------------------- input forms


def _to_tensors(case: Case) -> Case:
    prompts, responses = case.args
    kwargs = dict(case.kwargs)
    for name in ("rewards", "loss_masks", "logprobs"):
        if name in kwargs:
            kwargs[name] = [_as_float32(v) for v in kwargs[name]]
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
        "strategy drew (drawn values come from Python floats, quiet already)"),
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
    valid=rl_batch_cases(),
    # one defect, or two on different arguments: the reference's first check decides
    invalid=hs.one_or_two_defects(bad_rl_batch_cases, rl_batch_cases(),
                                  _reference.build_rl_batch),
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

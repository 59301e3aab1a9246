"""Internal building blocks of the registry's strategies: structure first, then contents.

(Internal: the public strategies are `batchproof.strategies`, docs/api.md.)

Structure (how many rows, how long each part is) is drawn before contents (token ids, per-token
floats), so shrinking first removes rows and shortens them, then simplifies values. Sizes are
small: one example must run in milliseconds. No strategy touches torch's global RNG: when a test
needs randomness it draws a seed and builds a `torch.Generator` from it (`generators()`).

    lengths:          [3, 0, 7]            one non-negative length per row
    length_pairs:     [(2, 5), (0, 3)]     (prompt, response) per row, in one of several shapes
    token_rows:       [[5, 0, 9], [], [1]] ids for given lengths, pad-token collisions included
    float_rows:       [[-0.0, 1e-40], []]  float32-exact values, -0.0/subnormals/large included
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st

MAX_ROWS = 6
MAX_LEN = 12
VOCAB = 50

# float32-exact values that break naive code: signed zeros, subnormals, huge magnitudes
SPECIAL_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-40, -1e-40, 3.0e38, -3.0e38, 1.17549435e-38]


def batch_sizes(min_size: int = 1, max_size: int = MAX_ROWS) -> st.SearchStrategy[int]:
    return st.integers(min_size, max_size)


def lengths(
    n: int, *, min_len: int = 0, max_len: int = MAX_LEN
) -> st.SearchStrategy[list[int]]:
    """`n` lengths: uniform, all equal, heavy-tailed (one long row), or zeros mixed in."""
    length = st.integers(min_len, max_len)
    return st.one_of(
        st.lists(length, min_size=n, max_size=n),
        length.map(lambda v: [v] * n),
        st.tuples(st.integers(0, n - 1), st.lists(st.integers(min_len, min(max_len, 2)),
                  min_size=n, max_size=n)).map(lambda t: _with_long_row(t[1], t[0], max_len)),
        st.lists(st.sampled_from(sorted({min_len, max_len})), min_size=n, max_size=n),
    )


def _with_long_row(values: list[int], row: int, max_len: int) -> list[int]:
    out = list(values)
    out[row] = max_len
    return out


def length_pairs(
    *,
    min_rows: int = 1,
    max_rows: int = MAX_ROWS,
    max_prompt: int = MAX_LEN,
    max_response: int = MAX_LEN,
    min_prompt: int = 0,
    min_response: int = 0,
) -> st.SearchStrategy[list[tuple[int, int]]]:
    """(prompt length, response length) per row, in one of the shapes that break layouts:

    independent | anti-correlated (multi-turn step-wise: long prompt ↔ short response) |
    all equal | empty prompts | empty responses | empty rows mixed in | single sample
    """
    rows = functools.partial(_length_rows, min_prompt=min_prompt, max_prompt=max_prompt,
                             min_response=min_response, max_response=max_response)
    return st.integers(min_rows, max_rows).flatmap(rows)


@functools.lru_cache(maxsize=4096)
def _length_rows(n: int, *, min_prompt: int, max_prompt: int, min_response: int,
                 max_response: int) -> st.SearchStrategy[list[tuple[int, int]]]:
    """`length_pairs`' shapes for n rows (built once per n and bounds: a flatmap calls this on
    every draw, and building strategies inside a draw is most of what shrinking costs)."""
    prompt = st.integers(min_prompt, max_prompt)
    response = st.integers(min_response, max_response)
    pair = st.tuples(prompt, response)
    return st.one_of(
        st.lists(pair, min_size=n, max_size=n),
        _anti_correlated(n, min_prompt, max_prompt, min_response, max_response),
        pair.map(lambda pr: [pr] * n),
        st.lists(response, min_size=n, max_size=n).map(
            lambda rs: [(min_prompt, r) for r in rs]),
        st.lists(prompt, min_size=n, max_size=n).map(
            lambda ps: [(p, min_response) for p in ps]),
        st.lists(st.one_of(pair, st.just((min_prompt, min_response))), min_size=n,
                 max_size=n),
    )


def _anti_correlated(n, min_p, max_p, min_r, max_r) -> st.SearchStrategy:
    """Turn k of a step-wise trajectory: the prompt grows by what came before, the response shrinks."""

    def build(total_and_jitter):
        total, jitter = total_and_jitter
        out = []
        for k in range(n):
            frac = k / max(n - 1, 1)
            p = min(max_p, max(min_p, round(frac * total) + jitter[k]))
            r = min(max_r, max(min_r, round((1 - frac) * total) - jitter[k]))
            out.append((p, r))
        return out

    total = st.integers(max(min_p, min_r), max(max_p, max_r))
    jitter = st.lists(st.integers(-1, 1), min_size=n, max_size=n)
    return st.tuples(total, jitter).map(build)


@functools.cache
def token_ids(*, vocab: int = VOCAB) -> st.SearchStrategy[int]:
    """Token ids biased to small values, so ids equal to the pad token (usually 0) show up."""
    return st.one_of(st.integers(0, min(3, vocab - 1)), st.integers(0, vocab - 1))


def token_rows(
    row_lengths: Sequence[int], *, vocab: int = VOCAB
) -> st.SearchStrategy[list[list[int]]]:
    return _rows(token_ids(vocab=vocab), tuple(row_lengths))


@functools.lru_cache(maxsize=4096)
def _rows(element: st.SearchStrategy, row_lengths: tuple[int, ...]) -> st.SearchStrategy[list]:
    """One row of `element`s per length (built once per element and lengths: the row builders
    are called inside draws, and building strategies there is most of what shrinking costs)."""
    return st.tuples(*[st.lists(element, min_size=n, max_size=n)
                       for n in row_lengths]).map(list)


@functools.cache
def float32s(*, special: bool = True) -> st.SearchStrategy[float]:
    """float32-exact finite floats, including -0.0, subnormals and large magnitudes; never NaN."""
    plain = st.floats(-1e6, 1e6, width=32, allow_nan=False, allow_infinity=False)
    return st.one_of(st.sampled_from(SPECIAL_FLOATS), plain) if special else plain


FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def float_dtypes() -> st.SearchStrategy[torch.dtype]:
    """Each floating dtype a contract may take or give: float16, bfloat16, float32, float64."""
    return st.sampled_from(FLOAT_DTYPES)


def float_rows(row_lengths: Sequence[int]) -> st.SearchStrategy[list[list[float]]]:
    return _rows(float32s(), tuple(row_lengths))


def mask_rows(row_lengths: Sequence[int]) -> st.SearchStrategy[list[list[int]]]:
    """0/1 masks with interior zeros (multi-turn: tool or user tokens inside the trained span)."""
    return _rows(_MASK_VALUES, tuple(row_lengths))


_MASK_VALUES = st.sampled_from([0, 1, 1])


def generators() -> st.SearchStrategy[torch.Generator]:
    """A seeded `torch.Generator` (never torch's global RNG); the seed shrinks toward 0."""
    return st.integers(0, 2**32 - 1).map(lambda seed: torch.Generator().manual_seed(seed))


def tensor_rows(rows: list[list], dtype: torch.dtype) -> list[torch.Tensor]:
    """The list-of-tensors input form."""
    return [torch.tensor(r, dtype=dtype) for r in rows]


HOLE = 7  # the value of the filler a jagged tensor with holes holds between its rows


def jagged(rows: list[list], dtype: torch.dtype, device: str | torch.device = "cpu", *,
           holes: bool = False) -> torch.Tensor:
    """The jagged input form: one flat values tensor plus offsets, as a torch jagged NJT. With
    `holes`, one filler value (`HOLE`) follows each row, outside it (`lengths` given): then
    values() is not the rows concatenated.

        rows [5 6] [8], holes  ->  values 5 6 7 8 7, offsets 0 3 5, lengths 2 1
    """
    filler = [HOLE] if holes else []
    row_lengths = torch.tensor([len(r) for r in rows], dtype=torch.int64)
    offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(row_lengths + len(filler), 0)
    flat = torch.tensor([v for r in rows for v in [*r, *filler]], dtype=dtype)
    return torch.nested.nested_tensor_from_jagged(
        flat.to(device), offsets=offsets.to(device),
        lengths=row_lengths.to(device) if holes else None)


def jagged_of_tensors(rows: list[torch.Tensor], dtype: torch.dtype,
                      device: str | torch.device = "cpu", *, holes: bool = False
                      ) -> torch.Tensor:
    """`jagged` of rows that are tensors already, their values kept bit for bit (a NaN's
    payload too: `jagged` goes through Python floats, which keep no float16 or bfloat16 NaN
    payload)."""
    filler = [torch.full((1,), HOLE, dtype=dtype)] if holes else []
    row_lengths = torch.tensor([row.shape[0] for row in rows], dtype=torch.int64)
    offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(row_lengths + len(filler), 0)
    parts = [part for row in rows for part in (row.detach().to(dtype), *filler)]
    flat = torch.cat(parts) if parts else torch.zeros(0, dtype=dtype)
    return torch.nested.nested_tensor_from_jagged(
        flat.to(device), offsets=offsets.to(device),
        lengths=row_lengths.to(device) if holes else None)


# --------------------------------------------------------------------------- several defects


@st.composite
def two_defects(draw, bad, valid, reference) -> Any:
    """An invalid call with two independent defects, on two different arguments of one valid
    call, and the exception the reference raises for it: its first check decides (the
    precedence an implementation must share). `bad(valid)` draws one-defect `BadCase`s built on
    the calls `valid` draws (e.g. `bad_rl_batch_cases(valid=...)`); the second defect is drawn
    again (up to 8 times) while it touches an argument the first one does; compositions where
    both still do, or where the reference raises neither defect's type (one defect hid the
    other), are not drawn."""
    from hypothesis import assume

    from batchproof.registry import BadCase, Case

    base = draw(valid)
    first = draw(bad(st.just(base)))
    for _ in range(8):  # a second defect on another argument: a few tries, not a filter
        second = draw(bad(st.just(base)))
        merged = _merged(base, first.case, second.case)
        if merged is not None:
            break
    assume(merged is not None)
    try:
        merged.call(reference)
    except (first.raises, second.raises) as err:
        return BadCase(merged, type(err), f"{first.why}, and {second.why}")
    except Exception:  # noqa: BLE001 - another type: the defects interact, not drawn
        pass
    assume(False)
    return Case()


# a record's invalid strategy (one or two defects) -> (that strategy, its one-defect part)
_ONE_DEFECT: dict[int, tuple[st.SearchStrategy, st.SearchStrategy]] = {}


def one_or_two_defects(bad, valid, reference) -> st.SearchStrategy:
    """A record's invalid inputs: one defect (`bad()`, its own valid calls) or two on different
    arguments of one call `valid` draws (`two_defects`), the reference's first error deciding.
    `one_defect` gives back the first part."""
    one = bad()
    both = st.one_of(one, two_defects(lambda call: bad(valid=call), valid, reference))
    _ONE_DEFECT[id(both)] = (both, one)
    return both


def one_defect(invalid: st.SearchStrategy) -> st.SearchStrategy:
    """The one-defect part of a record's invalid strategy (`one_or_two_defects`); the strategy
    itself when it draws one defect per call. What a framework's adapter draws: which of two
    simultaneous defects is reported first is owed by an implementation of the contract, not by
    a framework's function (docs/frameworks.md)."""
    both, one = _ONE_DEFECT.get(id(invalid), (None, None))
    return one if both is invalid else invalid


def with_argument(case, names: Sequence[str], name: str, value: Any):
    """`case` with its argument `name` set to `value`: in place where the call passes it by
    position (`names`: the positional parameters, in order), by keyword otherwise; every other
    argument kept as it is (by identity, as `two_defects` tells the changed ones)."""
    from batchproof.registry import Case

    index = list(names).index(name) if name in names else len(case.args)
    if index < len(case.args):
        return Case((*case.args[:index], value, *case.args[index + 1:]), dict(case.kwargs),
                    case.label)
    return Case(case.args, {**case.kwargs, name: value}, case.label)


def _merged(base, one, two):
    """`base` with the arguments `one` changed and those `two` changed (by identity); None when
    both change the same one, or change the number of positional arguments."""
    if not len(base.args) == len(one.args) == len(two.args):
        return None
    args = []
    for b, x, y in zip(base.args, one.args, two.args):
        if x is not b and y is not b:
            return None
        args.append(x if x is not b else y)
    kwargs = dict(base.kwargs)
    changed = set()
    for case in (one, two):
        keys = {k for k in set(case.kwargs) | set(base.kwargs)
                if k not in case.kwargs or k not in base.kwargs or case.kwargs[k] is not base.kwargs[k]}
        if keys & changed:
            return None
        changed |= keys
        for key in keys:
            if key in case.kwargs:
                kwargs[key] = case.kwargs[key]
            else:
                kwargs.pop(key, None)
    if not changed and all(a is b for a, b in zip(args, base.args)):  # `==` of tensors: no
        return None
    touched = sum(x is not b for b, x in zip(base.args, one.args)) + \
        sum(y is not b for b, y in zip(base.args, two.args))
    if touched + len(changed) < 2:
        return None
    return dataclasses.replace(base, args=tuple(args), kwargs=kwargs)  # a ModelCase keeps its model

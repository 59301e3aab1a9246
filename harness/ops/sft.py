"""Registry records for `sft`: `collate_sft`, `align_size`, `ffd_bins`, `pack_sft` (spec: sft.md).

    pack_sft, a = 2, dp = 1:   input_ids   a a a . b b b b c .     (letters: sub-sequences)
                               loss_mask   r r . . r . r . .       (r: a target, W - 1 columns)

Strategies draw structure first (how many examples, their lengths and num_actions, which masks
are given, the parallel config), then contents (token ids with pad-id collisions, 0/1 loss masks
with interior zeros or float weights). Properties that need the bins use the reference
`ffd_bins` (the oracle of the sub-step), and unpack rows with the reference `align_size`.
"""

from __future__ import annotations

import math
from collections import Counter, UserDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import strategies as st
from tensordict import TensorDict

from batchproof import blocks as hs
from batchproof.compare import assert_identical
from batchproof.reference import sft as oracle
from batchproof.registry import BadCase, Case, OpInfo, Paths, Pin, Property, register

MAX_EXAMPLES = 6
WEIGHTS = [0.0, 1.0, 0.5, 2.0, -0.0, 0.25, 1e-40]

# --------------------------------------------------------------------------- strategies


@dataclass(frozen=True)
class ParallelConfig:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    fp8: bool = False
    fp8_recipe: str = "tensorwise"

    def kwargs(self) -> dict:
        return {"dp_size": self.dp, "tp_size": self.tp, "pp_size": self.pp,
                "cp_size": self.cp, "fp8": self.fp8, "fp8_recipe": self.fp8_recipe}


# (dp, tp, pp, cp) configs that broke packers in practice, always in the mix
NAMED_CONFIGS = [(1, 1, 1, 1), (2, 1, 1, 2), (1, 2, 1, 2), (2, 1, 2, 1), (4, 1, 1, 4)]


def parallel_configs(*, max_dp: int = 4, max_tp: int = 4, max_pp: int = 4, max_cp: int = 4,
                     fp8: bool | None = None,
                     fp8_recipes: Sequence[str] = oracle.FP8_RECIPES,
                     ) -> st.SearchStrategy[ParallelConfig]:
    """dp, tp, pp, cp each in [1, its maximum] (the named configs within them first), fp8 on or
    off (None: drawn), the FP8 recipe one of `fp8_recipes`."""
    limits = (max_dp, max_tp, max_pp, max_cp)
    named = [c for c in NAMED_CONFIGS if all(v <= m for v, m in zip(c, limits))]
    shape = st.tuples(*[st.integers(1, m) for m in limits])
    if named:
        shape = st.one_of(st.sampled_from(named), shape)
    flag = st.booleans() if fp8 is None else st.just(fp8)
    recipe = st.sampled_from(list(fp8_recipes))
    return st.tuples(shape, flag, recipe).map(
        lambda t: ParallelConfig(*t[0], fp8=t[1], fp8_recipe=t[2]))


def _num_actions(s: int) -> st.SearchStrategy[int]:
    """num_actions in [1, s], biased to the edges: the whole sequence, one token."""
    return st.one_of(st.just(s), st.just(1), st.integers(1, s))


class _PerLength(dict):
    """One strategy per row length, each built once, on first use (building strategies per draw
    is slow)."""

    def __init__(self, make) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, n: int) -> st.SearchStrategy:
        self[n] = strategy = self.make(n)
        return strategy


def _per_length(make) -> dict[int, st.SearchStrategy]:
    return _PerLength(make)


def _from_bytes(convert) -> dict[int, st.SearchStrategy]:
    """Rows drawn as one byte string each (one draw per row, not per value: fast), shrinking
    toward zero bytes; `convert` maps a byte to a value."""
    return _per_length(lambda n: st.binary(min_size=n, max_size=n).map(
        lambda raw: [convert(b) for b in raw]))


def _token(byte: int) -> int:
    """Half the ids in [0, 4) (pad-id collisions: pads are 0, 1, 49), half in [0, VOCAB)."""
    return byte % 4 if byte < 128 else byte % hs.VOCAB


_LENGTHS = _per_length(lambda n: hs.lengths(n, min_len=1))
_NUM_ACTIONS = _per_length(_num_actions)
_TOKENS = _from_bytes(_token)
_BINARY = _from_bytes(lambda b: int(b % 3 != 0))  # 0/1 with interior zeros, 2/3 ones
# 0/1 masks (ints or bools) or float weights, which pass through unchecked
_LOSS_KINDS = {"binary": _BINARY, "bools": _from_bytes(lambda b: b % 3 != 0),
               "weights": _from_bytes(lambda b: WEIGHTS[b % len(WEIGHTS)]),
               "floats": _per_length(lambda n: st.lists(hs.float32s(), min_size=n, max_size=n))}
_LOSS_KIND = st.sampled_from(["binary", "binary", "bools", "weights", "floats"])
_MASK_TYPE = st.sampled_from([int, int, bool, float])


LOSS_KINDS = ("binary", "bools", "weights", "floats")
ATTENTION_KINDS = ("absent", "ones", "zeros")


@st.composite
def sft_examples(draw, *, min_size: int = 1, max_size: int = MAX_EXAMPLES,
                 packed: bool = False, max_len: int = hs.MAX_LEN,
                 loss_kinds: Sequence[str] | None = None,
                 attention_kinds: Sequence[str] | None = None) -> list[dict]:
    """Examples: lengths (>= 1, at most `max_len`; uniform, equal, heavy-tailed), num_actions
    (s and 1 favoured), which masks are given; then token ids (pad-id collisions), loss masks
    (0/1 with interior zeros, bools or float weights), attention masks (interior zeros only if
    not packed). `loss_kinds` (of `LOSS_KINDS`) and `attention_kinds` (of `ATTENTION_KINDS`)
    narrow the choice; the defaults are what the registry draws."""
    n = draw(st.integers(min_size, max_size))
    lengths = draw(_LENGTHS[n] if max_len == hs.MAX_LEN else hs.lengths(n, min_len=1,
                                                                          max_len=max_len))
    actions = [draw(_NUM_ACTIONS[s]) for s in lengths]
    if attention_kinds is None:
        attention_kinds = ATTENTION_KINDS[:2] if packed else ATTENTION_KINDS
    kinds = draw(st.lists(st.sampled_from(list(attention_kinds)), min_size=n, max_size=n))
    loss_kind = _LOSS_KINDS[draw(_LOSS_KIND if loss_kinds is None
                                 else st.sampled_from(list(loss_kinds)))]
    examples = []
    for s, num, kind in zip(lengths, actions, kinds, strict=True):
        example = {"input_ids": draw(_TOKENS[s]), "num_actions": num,
                   "loss_mask": draw(loss_kind[num])}
        if kind == "ones":
            example["attention_mask"] = [1] * s
        elif kind == "zeros":  # 0/1 as ints, bools or floats (compared by value)
            example["attention_mask"] = list(map(draw(_MASK_TYPE), draw(_BINARY[s])))
        examples.append(example)
    return examples


@st.composite
def collate_cases(draw) -> Case:
    examples = draw(sft_examples())
    kwargs = {"pad_token_id": draw(st.sampled_from([0, 1, 49, -100]))}
    if draw(st.booleans()):
        kwargs["normalize"] = draw(st.booleans())
    return Case((examples,), kwargs)


# normalize's total at its magnitude edges (sft.md, the exactness rule): each scenario's core
# values, always present, and a pool the other values come from
_BIG = float(2**53)
MAGNITUDES = ("past_2_24", "beyond_float32", "cancellation", "infinities")
_MAGNITUDE_CORES = {
    "past_2_24": st.sampled_from([[2.0**24], [16777215.0, 1.0], [2.0**23, 2.0**23]]),
    "beyond_float32": st.lists(st.sampled_from([3e38, 2e38, 3.4e38]), min_size=2, max_size=3),
    "cancellation": st.sampled_from([1.0, 3.0]).map(lambda small: [_BIG, small, -_BIG, 1.5]),
    "infinities": st.sampled_from([[math.inf, -math.inf], [-math.inf, 1.0, math.inf]]),
}
_MAGNITUDE_POOLS = {"past_2_24": [1.0, 2.0, 3.0, 5.0, 0.0], "beyond_float32": [1e38, 1.0, 0.0],
                    "cancellation": [1.0, 1.5, 3.0, 0.5, 0.0],
                    "infinities": [1.0, 0.5, 0.0, math.inf, -math.inf]}


@st.composite
def magnitude_cases(draw, scenarios: Sequence[str] = MAGNITUDES) -> Case:
    """normalize=True on loss masks whose total a float32 sum, a float64 sum in order or
    math.fsum alone gets wrong: an odd integer just past 2**24 (not a float32), a total beyond
    float32's maximum, +-2**53 cancelling around a small value (the core in that order, pool
    values after it), +inf and -inf together (NaN). The values, in batch order, are cut
    into examples (num_actions = the piece's length, 0-3 untrained tokens before it)."""
    scenario = draw(st.sampled_from(list(scenarios)))
    core = draw(_MAGNITUDE_CORES[scenario])
    pool = st.sampled_from(_MAGNITUDE_POOLS[scenario])
    before = [] if scenario == "cancellation" else draw(st.lists(pool, max_size=3))
    after = draw(st.lists(pool, max_size=4))  # (values before 2**53 could round back the 1)
    if scenario == "past_2_24":  # the order does not matter; the total must be odd
        values = draw(st.permutations(core + before + after))
        if sum(values) % 2 == 0:
            values.append(1.0)
    else:
        values = before + core + after
    cuts = sorted(draw(st.sets(st.integers(1, len(values) - 1), max_size=3)))
    examples = []
    for a, b in zip([0, *cuts], [*cuts, len(values)]):
        s = b - a + draw(st.integers(0, 3))
        examples.append({"input_ids": draw(_TOKENS[s]), "num_actions": b - a,
                         "loss_mask": values[a:b]})
    return Case((examples,), {"pad_token_id": draw(st.sampled_from([0, 1, 49, -100])),
                              "normalize": True})


def collate_valid_cases() -> st.SearchStrategy[Case]:
    """What the collate_sft record draws: the magnitude regime first (Hypothesis draws the
    first alternative most often, about 2 in 5), then `collate_cases`."""
    return st.one_of(magnitude_cases(), collate_cases())


@st.composite
def pack_cases(draw) -> Case:
    config = draw(parallel_configs())
    examples = draw(sft_examples(min_size=config.dp, max_size=config.dp + MAX_EXAMPLES - 1,
                                 packed=True))
    align = oracle.align_size(config.tp, config.cp, fp8=config.fp8, fp8_recipe=config.fp8_recipe)
    if align <= 16 and draw(st.sampled_from([True, False])):  # first: about half the draws
        examples = _slot_filling(draw, examples, align)
    lengths = [len(ex["input_ids"]) for ex in examples]
    capacity = max(lengths) + draw(st.one_of(st.just(0), st.integers(0, 3),
                                             st.integers(0, 2 * hs.MAX_LEN)))
    if not _packable(lengths, capacity, config.dp):
        capacity = sum(lengths)  # one FFD bin; dp bins from >= dp sequences always work
    kwargs = {"pad_token_id": draw(st.sampled_from([0, 1, 49])), "capacity": capacity}
    defaults = {"fp8": False, "fp8_recipe": "tensorwise"}
    for name, value in config.kwargs().items():
        if value != defaults.get(name, 1) or draw(st.booleans()):  # defaults spelled out or
            kwargs[name] = value                                    # left implicit
    return Case((examples,), kwargs)


def _slot_filling(draw, examples: list[dict], align: int) -> list[dict]:
    """Each example lengthened to a multiple of the alignment by untrained tokens before it (its
    loss mask kept): every sub-sequence fills its slot, so the widest row's last one ends
    exactly at W, where its last target sits in column W - 2 (the W - 1 clamp erases it)."""
    out = []
    for ex in examples:
        extra = _round_up(len(ex["input_ids"]), align) - len(ex["input_ids"])
        if extra:
            ex = {**ex, "input_ids": draw(_TOKENS[extra]) + list(ex["input_ids"])}
            if "attention_mask" in ex:
                ex["attention_mask"] = [1] * len(ex["input_ids"])
        out.append(ex)
    return out


def _packable(lengths: list[int], capacity: int, dp: int) -> bool:
    try:
        oracle.ffd_bins(lengths, capacity, min_bins=dp, bin_multiple=dp)
    except ValueError:
        return False
    return True


@st.composite
def ffd_cases(draw) -> Case:
    lengths = draw(hs.lengths(draw(st.integers(1, 10)), min_len=1))
    capacity = max(lengths) + draw(st.one_of(st.just(0), st.integers(0, 30)))
    min_bins, multiple = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    try:
        oracle.ffd_bins(lengths, capacity, min_bins=min_bins, bin_multiple=multiple)
    except ValueError:
        min_bins, multiple = 1, 1
    kwargs = {}
    if min_bins != 1 or draw(st.booleans()):
        kwargs["min_bins"] = min_bins
    if multiple != 1 or draw(st.booleans()):
        kwargs["bin_multiple"] = multiple
    return Case((lengths, capacity), kwargs)


@st.composite
def align_cases(draw) -> Case:
    tp, cp = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    fp8 = draw(st.booleans())
    kwargs = {"fp8": fp8}
    recipe = draw(st.sampled_from([None, *oracle.FP8_RECIPES]))  # None: the default
    if recipe is not None:
        kwargs["fp8_recipe"] = recipe
    if draw(st.booleans()):
        return Case((tp, cp), kwargs)
    return Case((), {"tp_size": tp, "cp_size": cp, **kwargs})


# --------------------------------------------------------------------------- invalid inputs

EXAMPLE_DEFECTS = [
    "not_a_sequence", "not_a_mapping", "empty", "missing_key", "loss_length", "broadcast",
    "num_actions_zero", "num_actions_over_s", "num_actions_type", "attention_length",
    "attention_value", "token_type", "token_overflow", "loss_value_type", "ids_2d",
    "ids_float_tensor",
]


def _break_example(draw, examples: list[dict], kind: str) -> tuple[object, type, str]:
    """Damage one example (or the list) in one way: (examples, exception type, why)."""
    examples = [dict(ex) for ex in examples]
    i = draw(st.integers(0, len(examples) - 1))
    ex = examples[i]
    s, n = len(ex["input_ids"]), ex["num_actions"]
    if kind == "not_a_sequence":
        return draw(st.sampled_from([examples[0], 5, "examples"])), TypeError, "not a list"
    if kind == "not_a_mapping":
        examples[i] = list(ex["input_ids"])
        return examples, TypeError, f"examples[{i}] is a list"
    if kind == "empty":
        return [], ValueError, "no examples"
    if kind == "missing_key":
        del ex[draw(st.sampled_from(oracle.REQUIRED_KEYS))]
        return examples, ValueError, f"examples[{i}] misses a key"
    if kind == "loss_length":
        ex["loss_mask"] = list(ex["loss_mask"]) + [1]
        return examples, ValueError, f"examples[{i}]: len(loss_mask) == num_actions + 1"
    if kind == "broadcast":  # SkyRL broadcasts a length-1 mask over num_actions
        ex["input_ids"] = list(ex["input_ids"]) + [7] * max(0, 2 - s)
        ex.pop("attention_mask", None)
        ex["num_actions"], ex["loss_mask"] = max(n, 2), [1]
        return examples, ValueError, f"examples[{i}]: a length-1 loss_mask for num_actions > 1"
    if kind == "num_actions_zero":
        ex["num_actions"], ex["loss_mask"] = draw(st.sampled_from([0, -1])), []
        if ex["num_actions"] < 0:
            ex["loss_mask"] = []
        return examples, ValueError, f"examples[{i}]: num_actions < 1"
    if kind == "num_actions_over_s":
        ex["num_actions"], ex["loss_mask"] = s + 1, [1] * (s + 1)
        return examples, ValueError, f"examples[{i}]: num_actions > len(input_ids)"
    if kind == "num_actions_type":
        ex["num_actions"] = draw(st.sampled_from([float(n), True, str(n)]))
        return examples, TypeError, f"examples[{i}]: num_actions not an int"
    if kind == "attention_length":
        ex["attention_mask"] = [1] * (s + draw(st.sampled_from([-1, 1])))
        return examples, ValueError, f"examples[{i}]: len(attention_mask) != len(input_ids)"
    if kind == "attention_value":
        mask = [1] * s
        mask[draw(st.integers(0, s - 1))] = draw(st.sampled_from([2, -1, 0.5, "1", None]))
        ex["attention_mask"] = mask
        return examples, ValueError, f"examples[{i}]: an attention value other than 0/1"
    if kind == "token_type":
        ids = list(ex["input_ids"])
        ids[draw(st.integers(0, s - 1))] = draw(st.sampled_from([1.0, 2.5, "3", None]))
        ex["input_ids"] = ids
        return examples, TypeError, f"examples[{i}]: a token id that is not an int"
    if kind == "token_overflow":
        ids = list(ex["input_ids"])
        ids[draw(st.integers(0, s - 1))] = draw(st.sampled_from([2**63, -(2**63) - 1, 2**70]))
        ex["input_ids"] = ids
        return examples, ValueError, f"examples[{i}]: a token id outside int64"
    if kind == "loss_value_type":
        loss = list(ex["loss_mask"])
        loss[draw(st.integers(0, n - 1))] = draw(st.sampled_from(["1", None, b"1", 1j]))
        ex["loss_mask"] = loss
        return examples, TypeError, f"examples[{i}]: a loss value that is not a number"
    if kind == "ids_2d":
        ex["input_ids"] = torch.tensor([list(ex["input_ids"])])
        return examples, ValueError, f"examples[{i}]: 2-D input_ids tensor"
    assert kind == "ids_float_tensor"
    ex["input_ids"] = torch.tensor(list(ex["input_ids"]), dtype=torch.float32)
    return examples, TypeError, f"examples[{i}]: float input_ids tensor"


# defects that a TensorDict of jagged fields holds as they are (the others are not ints a jagged
# int64 tensor can hold, or are no example at all)
BATCH_DEFECTS = {"loss_length", "broadcast", "num_actions_zero", "num_actions_over_s",
                 "attention_length", "over_capacity"}


def _as_batch(draw, examples, kind: str):
    """Sometimes the damaged examples as one TensorDict of jagged fields (`jagged_batch`), when
    the defect survives it: the impl then declines the whole-tensor path and reads the rows.
    The SkyRL broadcast (`broadcast`) stays a list 7 times in 8: its historical form."""
    if kind not in BATCH_DEFECTS or draw(st.integers(0, 7 if kind == "broadcast" else 1)):
        return examples
    return jagged_batch(examples)


# the defect kinds of the error strategies; the SkyRL broadcast of a length-1 loss mask (a
# silent wrong answer, not a crash, in the framework this op replaces) five times, so that one
# 40-example run draws it as a list in >= 95% of runs (once: 1 run in 4)
_COLLATE_DEFECTS = st.sampled_from(["pad_type", "pad_range", "normalize_type",
                                    *EXAMPLE_DEFECTS, *["broadcast"] * 4])


@st.composite
def bad_collate_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on a valid call (`valid`, default `collate_cases()`), with the exception type the
    spec requires."""
    good = draw(valid if valid is not None else collate_cases())
    kwargs = dict(good.kwargs)
    kind = draw(_COLLATE_DEFECTS)
    if kind == "pad_type":
        kwargs["pad_token_id"] = draw(st.sampled_from([0.0, "0", None, True]))
        return BadCase(Case(good.args, kwargs), TypeError, "pad_token_id not an int")
    if kind == "pad_range":
        kwargs["pad_token_id"] = draw(st.sampled_from([2**63, -2**63 - 1]))
        return BadCase(Case(good.args, kwargs), ValueError, "pad_token_id beyond int64")
    if kind == "normalize_type":
        kwargs["normalize"] = draw(st.sampled_from([1, "yes", None]))
        return BadCase(Case(good.args, kwargs), TypeError, "normalize not a bool")
    examples, raises, why = _break_example(draw, good.args[0], kind)
    return BadCase(Case((_as_batch(draw, examples, kind),), kwargs), raises, why)


@st.composite
def bad_pack_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on a valid call (`valid`, default `pack_cases()`), with the exception type the
    spec requires."""
    good = draw(valid if valid is not None else pack_cases())
    examples, kwargs = good.args[0], dict(good.kwargs)
    kind = draw(st.sampled_from(["pad_type", "pad_range", "size_value", "size_type", "fp8_type",
                                 "over_capacity", "fewer_than_dp", "attention_zeros",
                                 *EXAMPLE_DEFECTS]))
    sizes = ["capacity", "dp_size", "tp_size", "pp_size", "cp_size"]
    if kind == "pad_type":
        kwargs["pad_token_id"] = draw(st.sampled_from([0.0, None, False]))
        return BadCase(Case((examples,), kwargs), TypeError, "pad_token_id not an int")
    if kind == "pad_range":
        kwargs["pad_token_id"] = draw(st.sampled_from([2**63, -2**63 - 1]))
        return BadCase(Case((examples,), kwargs), ValueError, "pad_token_id beyond int64")
    if kind == "size_value":
        name = draw(st.sampled_from(sizes))
        kwargs[name] = draw(st.sampled_from([0, -1, -4]))
        return BadCase(Case((examples,), kwargs), ValueError, f"{name} < 1")
    if kind == "size_type":
        name = draw(st.sampled_from(sizes))
        kwargs[name] = draw(st.sampled_from([2.0, True, "2", None]))
        return BadCase(Case((examples,), kwargs), TypeError, f"{name} not an int")
    if kind == "fp8_type":
        if draw(st.booleans()):
            kwargs["fp8_recipe"] = draw(st.sampled_from([None, "auto", "delayed"]))
            raises = TypeError if kwargs["fp8_recipe"] is None else ValueError
            return BadCase(Case((examples,), kwargs), raises, "fp8_recipe not a recipe")
        kwargs["fp8"] = draw(st.sampled_from([1, 0, "fp8"]))
        return BadCase(Case((examples,), kwargs), TypeError, "fp8 not a bool")
    if kind == "over_capacity":
        kwargs["capacity"] = max(len(ex["input_ids"]) for ex in examples) - 1
        if kwargs["capacity"] < 1:
            kwargs["capacity"] = 1
            examples = [dict(examples[0], input_ids=[3, 4], num_actions=1, loss_mask=[1])]
            examples[0].pop("attention_mask", None)
        return BadCase(Case((_as_batch(draw, examples, kind),), kwargs), ValueError,
                       "a length over capacity")
    if kind == "fewer_than_dp":
        kwargs["dp_size"] = len(examples) + draw(st.integers(1, 3))
        return BadCase(Case((examples,), kwargs), ValueError,
                       f"{len(examples)} sequences for dp_size={kwargs['dp_size']}")
    if kind == "attention_zeros":
        i = draw(st.integers(0, len(examples) - 1))
        examples = [dict(ex) for ex in examples]
        s = len(examples[i]["input_ids"])
        mask = [1] * s
        mask[draw(st.integers(0, s - 1))] = 0
        examples[i]["attention_mask"] = mask
        return BadCase(Case((examples,), kwargs), ValueError, f"examples[{i}]: attention zeros")
    broken, raises, why = _break_example(draw, examples, kind)
    return BadCase(Case((_as_batch(draw, broken, kind),), kwargs), raises, why)


@st.composite
def bad_ffd_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on a valid call (`valid`, default `ffd_cases()`), with the exception type the
    spec requires."""
    good = draw(valid if valid is not None else ffd_cases())
    lengths, capacity = good.args
    kwargs = dict(good.kwargs)
    kind = draw(st.sampled_from(["size_value", "length_value", "over_capacity", "too_few",
                                 "length_type", "not_a_list"]))
    if kind == "size_value":
        name = draw(st.sampled_from(["capacity", "min_bins", "bin_multiple"]))
        if name == "capacity":
            return BadCase(Case((lengths, draw(st.sampled_from([0, -3]))), kwargs), ValueError,
                           "capacity < 1")
        kwargs[name] = draw(st.sampled_from([0, -2]))
        return BadCase(Case((lengths, capacity), kwargs), ValueError, f"{name} < 1")
    if kind == "length_value":
        lengths = list(lengths)
        lengths[draw(st.integers(0, len(lengths) - 1))] = draw(st.sampled_from([0, -1]))
        return BadCase(Case((lengths, capacity), kwargs), ValueError, "a length < 1")
    if kind == "over_capacity":
        return BadCase(Case((lengths, max(lengths) - 1 or 1), kwargs) if max(lengths) > 1 else
                       Case(([2], 1), kwargs), ValueError, "a length over capacity")
    if kind == "too_few":
        kwargs["min_bins"] = len(lengths) + draw(st.integers(1, 3))
        return BadCase(Case((lengths, capacity), kwargs), ValueError, "more bins than items")
    if kind == "length_type":
        lengths = list(lengths)
        lengths[draw(st.integers(0, len(lengths) - 1))] = draw(st.sampled_from([2.0, True, "2"]))
        return BadCase(Case((lengths, capacity), kwargs), TypeError, "a length not an int")
    return BadCase(Case((draw(st.sampled_from([5, "123", None])), capacity), kwargs), TypeError,
                   "lengths not a sequence")


@st.composite
def bad_align_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on sizes drawn here (1..4, by keyword) or on a valid call `valid` draws
    (`align_cases()`: tp_size and cp_size by position or by keyword)."""
    kind = draw(st.sampled_from(["value", "type", "fp8"]))
    good = Case((), {"tp_size": draw(st.integers(1, 4)), "cp_size": draw(st.integers(1, 4))}) \
        if valid is None else draw(valid)
    name = draw(st.sampled_from(["tp_size", "cp_size"]))
    if kind == "value":
        return BadCase(hs.with_argument(good, ("tp_size", "cp_size"), name,
                                        draw(st.sampled_from([0, -1]))), ValueError, f"{name} < 1")
    if kind == "type":
        return BadCase(hs.with_argument(good, ("tp_size", "cp_size"), name,
                                        draw(st.sampled_from([2.0, True, None]))),
                       TypeError, f"{name} not an int")
    if draw(st.booleans()):
        return BadCase(Case(good.args, {**good.kwargs, "fp8": draw(st.sampled_from([1, "no"]))}),
                       TypeError, "fp8 not a bool")
    recipe = draw(st.sampled_from([None, 1, "auto", "delayed", "MXFP8", ""]))
    raises = TypeError if not isinstance(recipe, str) else ValueError
    return BadCase(Case(good.args, {**good.kwargs, "fp8_recipe": recipe}), raises,
                   "fp8_recipe not one of the recipes")


# --------------------------------------------------------------------------- input forms


def _fresh(values, dtype: torch.dtype, device: str) -> torch.Tensor:
    """A new tensor of `values` (a list, or a tensor already: copied, never shared)."""
    if isinstance(values, torch.Tensor):
        return values.detach().to(dtype=dtype, device=device, copy=True)
    return torch.tensor(values, dtype=dtype, device=device)


def _tensor_example(ex: dict, device: str = "cpu", loss_dtype=torch.float64) -> dict:
    out = dict(ex)
    out["input_ids"] = _fresh(ex["input_ids"], torch.int64, device)
    out["loss_mask"] = torch.tensor([float(v) for v in ex["loss_mask"]], dtype=loss_dtype,
                                    device=device)
    if "attention_mask" in ex:
        out["attention_mask"] = _fresh(ex["attention_mask"], torch.int64, device)
    return out


def _to_tensors(case: Case) -> Case:
    """Every field a 1-D tensor (loss masks in float64: rounded to float32 by the op)."""
    return Case(([_tensor_example(ex) for ex in case.args[0]],), case.kwargs, case.label)


def _to_float32_tensors(case: Case) -> Case:
    """Every field a 1-D tensor, loss masks in float32 (what the CPU kernel of pack_sft takes)."""
    return Case(([_tensor_example(ex, loss_dtype=torch.float32) for ex in case.args[0]],),
                case.kwargs, case.label)


def _to_mixed(case: Case) -> Case:
    """Even examples as tensors, odd ones as tuples."""
    examples = [_tensor_example(ex) if i % 2 == 0 else
                {k: tuple(v) if isinstance(v, list) else v for k, v in ex.items()}
                for i, ex in enumerate(case.args[0])]
    return Case((examples,), case.kwargs, case.label)


def jagged_batch(examples: list[dict], loss_dtype=torch.float32, device="cpu",
                 attention_dtype=torch.int64) -> TensorDict:
    """The examples as one batch: a TensorDict of jagged input_ids (int64) and loss_mask, an
    (N,) num_actions, and a jagged attention_mask when any example gives one (all ones for
    those that do not: the default).

        [{"input_ids": [5, 6, 7], "num_actions": 2, "loss_mask": [1, 0]},
         {"input_ids": [8, 9], "num_actions": 1, "loss_mask": [1]}]
        ->  input_ids [[5, 6, 7], [8, 9]], loss_mask [[1., 0.], [1.]], num_actions [2, 1]
    """
    fields = {
        "input_ids": hs.jagged([ex["input_ids"] for ex in examples], torch.int64, device),
        "loss_mask": hs.jagged([[float(v) for v in ex["loss_mask"]] for ex in examples],
                               loss_dtype, device),
        "num_actions": torch.tensor([ex["num_actions"] for ex in examples], device=device),
    }
    if any("attention_mask" in ex for ex in examples):
        fields["attention_mask"] = hs.jagged(
            [[int(v) for v in ex.get("attention_mask", [1] * len(ex["input_ids"]))]
             for ex in examples], attention_dtype, device)
    return TensorDict(fields, batch_size=[len(examples)])


def _to_jagged(case: Case, loss_dtype=torch.float32) -> Case:
    """The examples as one TensorDict of jagged fields (loss masks in `loss_dtype`, attention
    masks in it too when it is not float32: a float 0/1 mask)."""
    attention = torch.int64 if loss_dtype == torch.float32 else loss_dtype
    return Case((jagged_batch(case.args[0], loss_dtype, attention_dtype=attention),),
                case.kwargs, case.label)


def _on_device(case: Case, device: str) -> Case:
    examples = case.args[0]
    if isinstance(examples, list) and all(isinstance(ex, dict) for ex in examples):
        try:
            examples = [_tensor_example(ex, device) for ex in examples]
        except (TypeError, ValueError, RuntimeError, OverflowError):
            pass  # bad input that cannot even become a tensor: keep it as given
    return Case((examples,), {**case.kwargs, "device": device}, case.label)


NARROW_FORM = "float16 / bfloat16 tensors"


def _to_narrow_tensors(case: Case) -> Case:
    """Every field a 1-D tensor, loss masks in float16 or bfloat16 (by the batch size): they
    round the values, a lossy form, compared with the reference on the same rounded input."""
    dtype = (torch.float16, torch.bfloat16)[len(case.args[0]) % 2]
    return Case(([_tensor_example(ex, loss_dtype=dtype) for ex in case.args[0]],),
                case.kwargs, case.label)


FORMS = {"lists": lambda c: c, "tensors": _to_tensors, "float32 tensors": _to_float32_tensors,
         "mixed": _to_mixed, "jagged": _to_jagged,
         "jagged float64": lambda c: _to_jagged(c, torch.float64), NARROW_FORM: _to_narrow_tensors}

# --------------------------------------------------------------------------- helpers


def _assert(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _f32(values) -> list[float]:
    return torch.tensor([float(v) for v in values], dtype=torch.float32).tolist()


def _fsum(values: list[float]) -> float:
    """math.fsum, with IEEE's answer where both infinities meet (NaN; fsum raises)."""
    return math.nan if math.inf in values and -math.inf in values else math.fsum(values)


def _scale(total: float) -> float:
    return torch.tensor(1.0 / max(total, 1), dtype=torch.float32).item()


def _scaled(values: list[float], scale: float) -> list[float]:
    """float32(v) * float32(scale), computed in float32 (what the op does)."""
    return (torch.tensor(values, dtype=torch.float32)
            * torch.tensor(scale, dtype=torch.float32)).tolist()


def _bits(values) -> list[int]:
    """float32 bit patterns, every NaN as one pattern: a NaN's sign and payload are the
    device's (x86 makes inf - inf a negative NaN, CUDA a positive one; H100 run, 2026-11-24)."""
    values = torch.tensor(values, dtype=torch.float32)
    return values.masked_fill(values.isnan(), float("nan")).view(torch.int32).tolist()


def _full(ex: dict) -> list[float]:
    """[0] * (s - num_actions) + loss_mask, float32-rounded (length s)."""
    s = len(ex["input_ids"])
    return [0.0] * (s - ex["num_actions"]) + _f32(ex["loss_mask"])


def _examples(case: Case) -> list[dict]:
    return case.args[0]


def _align(case: Case) -> int:
    kw = case.kwargs
    return oracle.align_size(kw.get("tp_size", 1), kw.get("cp_size", 1), fp8=kw.get("fp8", False),
                             fp8_recipe=kw.get("fp8_recipe", "tensorwise"))


def _rows_of(case: Case) -> list[list[int]]:
    """The example indices of each packed row per the spec: reference FFD, shard-major."""
    lengths = [len(ex["input_ids"]) for ex in _examples(case)]
    dp = case.kwargs.get("dp_size", 1)
    bins = oracle.ffd_bins(lengths, case.kwargs["capacity"], min_bins=dp, bin_multiple=dp)
    return [bins[k] for shard in range(dp) for k in range(shard, len(bins), dp)]


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _sub_lengths(td) -> list[list[int]]:
    nested = td["sub_seq_lengths"]
    offsets, values = nested.offsets().tolist(), nested.values().tolist()
    return [values[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


def _unpack(td, align: int) -> list[list[dict]]:
    """Each row's sub-sequences at the offsets that sub_seq_lengths and the alignment give."""
    ids, pos = td["input_ids"].tolist(), td["position_ids"].tolist()
    att, loss = td["attention_mask"].tolist(), td["loss_mask"].tolist()
    rows = []
    for r, lengths in enumerate(_sub_lengths(td)):
        offset, subs = 0, []
        for s in lengths:
            subs.append({"ids": ids[r][offset:offset + s], "positions": pos[r][offset:offset + s],
                         "attention": att[r][offset:offset + s],
                         "targets": loss[r][offset:offset + s - 1], "offset": offset, "s": s})
            offset += _round_up(s, align)
        rows.append(subs)
    return rows


def _total(case: Case) -> float:
    """The unscaled loss total of pack_sft: the exact sum of every example's full[1:]."""
    return _fsum([v for ex in _examples(case) for v in _full(ex)[1:]])


def _binary(case: Case) -> bool:
    return all(float(v) in (0.0, 1.0) for ex in _examples(case) for v in ex["loss_mask"])


def _tensor_keys(td) -> set[str]:
    return {k for k in td.keys() if not td.is_non_tensor(k)}


# --------------------------------------------------------------------------- collate properties


def prop_collate_shapes(case: Case, td) -> None:
    """Keys, shapes and dtypes: (N, S) int64 ids and attention, (N, A) float32 loss mask,
    response_length == A (S = max s, A = max num_actions)."""
    examples = _examples(case)
    n = len(examples)
    width = max(len(ex["input_ids"]) for ex in examples)
    response = max(ex["num_actions"] for ex in examples)
    expected = {"input_ids": ((n, width), torch.int64),
                "attention_mask": ((n, width), torch.int64),
                "loss_mask": ((n, response), torch.float32)}
    _assert(_tensor_keys(td) == set(expected), f"tensor keys {sorted(_tensor_keys(td))}")
    for key, (shape, dtype) in expected.items():
        _assert(tuple(td[key].shape) == shape and td[key].dtype == dtype,
                f"{key}: {tuple(td[key].shape)} {td[key].dtype}, expected {shape} {dtype}")
    _assert(td.get_non_tensor("response_length") == response,
            f"response_length {td.get_non_tensor('response_length')} != A = {response}")


def prop_left_padded(case: Case, td) -> None:
    """Row i: input_ids = [pad] * (S - s) + ids, attention = [0] * (S - s) + the example's own
    mask (interior zeros kept; never derived from token values)."""
    pad = case.kwargs["pad_token_id"]
    ids, att = td["input_ids"].tolist(), td["attention_mask"].tolist()
    width = len(ids[0])
    for i, ex in enumerate(_examples(case)):
        tokens = list(ex["input_ids"])
        own = list(ex.get("attention_mask") or [1] * len(tokens))
        left = width - len(tokens)
        _assert(ids[i] == [pad] * left + tokens, f"row {i}: input_ids {ids[i]} is not "
                f"{left} pads + the example's tokens")
        _assert(att[i] == [0] * left + own, f"row {i}: attention_mask {att[i]} is not "
                f"{left} zeros + the example's own mask")


def prop_loss_right_aligned(case: Case, td) -> None:
    """Row i: loss_mask = [0] * (A - n) + loss_mask_i, times float32(1 / max(total, 1)) with
    normalize (total: exact sum over the batch), bit for bit."""
    examples = _examples(case)
    loss = td["loss_mask"]
    response = loss.shape[1]
    scale = 1.0
    if case.kwargs.get("normalize", False):
        scale = _scale(_fsum([v for ex in examples for v in _f32(ex["loss_mask"])]))
    for i, ex in enumerate(examples):
        want = [0.0] * (response - ex["num_actions"]) + _f32(ex["loss_mask"])
        if scale != 1.0 or case.kwargs.get("normalize", False):
            want = _scaled(want, scale)
        _assert(_bits(loss[i].tolist()) == _bits(want),
                f"row {i}: loss_mask {loss[i].tolist()} != {want} (bitwise)")


def prop_collate_normalized(case: Case, td) -> None:
    """normalize=True with 0/1 masks: every non-zero entry is float32(1 / max(count, 1)), count
    the number of ones in the batch (a token mean over the batch, not a per-sequence mean)."""
    if not case.kwargs.get("normalize", False) or not _binary(case):
        return
    count = sum(float(v) for ex in _examples(case) for v in ex["loss_mask"])
    values = td["loss_mask"][td["loss_mask"] != 0].tolist()
    _assert(len(values) == count, f"{len(values)} non-zero entries for {count} ones")
    _assert(all(v == _scale(count) for v in values),
            f"non-zero entries {sorted(set(values))} != 1/max({count}, 1)")


# --------------------------------------------------------------------------- align properties


def _requirements(tp: int, cp: int, fp8: bool, recipe: str = "tensorwise") -> list[int]:
    """What a must be a multiple of: tp (SP), 2*cp*tp chunks (CP); with FP8, what the recipe
    needs of the tokens each rank holds (docs/sft.md, "FP8 alignment"): per CP rank 16 (every
    recipe's GEMM), per TP rank 8 (per-tensor), 128 (block scaling, when tp > 1: its all-gather
    is quantized in 128-token tiles) or 32 (MXFP8 blocks)."""
    needs = [tp]
    if cp > 1:
        needs.append(2 * cp * tp)
    if fp8:
        per_tp_rank = {"tensorwise": 8, "blockwise": 128 if tp > 1 else 1, "mxfp8": 32}[recipe]
        needs += [16 * cp, per_tp_rank * tp * cp]
    return needs


def _align_args(case: Case) -> tuple[int, int, bool, str]:
    args = dict(zip(("tp_size", "cp_size"), case.args, strict=False)) | dict(case.kwargs)
    return (args.get("tp_size", 1), args.get("cp_size", 1), args.get("fp8", False),
            args.get("fp8_recipe", "tensorwise"))


def prop_align_divisible(case: Case, a) -> None:
    """a is a multiple of tp, of 2 * tp * cp when cp > 1, and with fp8 of what its recipe
    needs per CP and TP rank."""
    needs = _requirements(*_align_args(case))
    _assert(type(a) is int and a >= 1, f"align_size returned {a!r}, not a positive int")
    _assert(all(a % need == 0 for need in needs), f"align {a} is not a multiple of {needs}")


def prop_align_minimal(case: Case, a) -> None:
    """No smaller alignment works: for every prime p | a, a / p misses a requirement."""
    needs = _requirements(*_align_args(case))
    for p in _primes(a):
        _assert(any((a // p) % need for need in needs),
                f"align {a} is not minimal: {a // p} also satisfies {needs}")


def _primes(value: int) -> list[int]:
    out, p = [], 2
    while p * p <= value:
        if value % p == 0:
            out.append(p)
            while value % p == 0:
                value //= p
        p += 1
    return out + ([value] if value > 1 else [])


# --------------------------------------------------------------------------- ffd properties


def prop_ffd_partition(case: Case, bins) -> None:
    """Every index appears in exactly one bin."""
    lengths = case.args[0]
    flat = sorted(i for b in bins for i in b)
    _assert(flat == list(range(len(lengths))), f"bins {bins} are not a partition of the indices")


def prop_ffd_capacity(case: Case, bins) -> None:
    """Raw lengths per bin <= capacity."""
    lengths, capacity = case.args
    for k, b in enumerate(bins):
        used = sum(lengths[i] for i in b)
        _assert(used <= capacity, f"bin {k} {b} holds {used} > capacity {capacity}")


def prop_ffd_bin_count(case: Case, bins) -> None:
    """#bins >= min_bins and a multiple of bin_multiple."""
    min_bins, multiple = case.kwargs.get("min_bins", 1), case.kwargs.get("bin_multiple", 1)
    _assert(len(bins) >= min_bins and len(bins) % multiple == 0,
            f"{len(bins)} bins: need >= {min_bins} and a multiple of {multiple}")


def prop_ffd_non_empty(case: Case, bins) -> None:
    """No bin is empty (the adjustment moves items; it never pads with empty bins)."""
    _assert(all(len(b) > 0 for b in bins), f"an empty bin in {bins}")


def prop_ffd_visit_order(case: Case, bins) -> None:
    """Inside a bin, items are in visit order: (length, index) strictly decreasing (ties: the
    larger index first); the adjustment only removes a bin's last item."""
    lengths = case.args[0]
    for k, b in enumerate(bins):
        keys = [(lengths[i], i) for i in b]
        _assert(keys == sorted(keys, reverse=True),
                f"bin {k} {b} is not in (length, index)-descending order: {keys}")


# --------------------------------------------------------------------------- pack properties


def prop_pack_shapes(case: Case, td) -> None:
    """Keys and dtypes: (rows, W) int64 ids / attention / positions, (rows, W - 1) float32
    loss_mask, jagged int64 sub_seq_lengths, int32 cu_seqlens_padded, response_length W - 1."""
    rows, width = td["input_ids"].shape
    expected = {"input_ids": ((rows, width), torch.int64),
                "attention_mask": ((rows, width), torch.int64),
                "position_ids": ((rows, width), torch.int64),
                "loss_mask": ((rows, width - 1), torch.float32)}
    _assert(_tensor_keys(td) == set(expected) | {"sub_seq_lengths"},
            f"tensor keys {sorted(_tensor_keys(td))}")
    for key, (shape, dtype) in expected.items():
        _assert(tuple(td[key].shape) == shape and td[key].dtype == dtype,
                f"{key}: {tuple(td[key].shape)} {td[key].dtype}, expected {shape} {dtype}")
    nested = td["sub_seq_lengths"]
    _assert(nested.is_nested and nested.layout == torch.jagged and nested.dtype == torch.int64,
            "sub_seq_lengths must be a jagged int64 nested tensor")
    cu = td.get_non_tensor("cu_seqlens_padded")
    _assert(isinstance(cu, torch.Tensor) and cu.dtype == torch.int32 and cu.dim() == 1,
            f"cu_seqlens_padded must be a 1-D int32 tensor, got {cu!r}")
    _assert(td.get_non_tensor("response_length") == width - 1, "response_length != W - 1")


def prop_pack_each_example_once(case: Case, td) -> None:
    """Every example appears in exactly one row: the multiset of packed sub-sequences (their
    tokens) is the multiset of the examples."""
    packed = Counter(tuple(sub["ids"]) for row in _unpack(td, _align(case)) for sub in row)
    given = Counter(tuple(ex["input_ids"]) for ex in _examples(case))
    _assert(packed == given, f"packed sub-sequences {dict(packed)} != examples {dict(given)}")


def prop_pack_rows_multiple_of_dp(case: Case, td) -> None:
    """rows % dp_size == 0 (each DP rank gets the same number of rows)."""
    rows, dp = td["input_ids"].shape[0], case.kwargs.get("dp_size", 1)
    _assert(rows % dp == 0, f"{rows} rows for dp_size={dp}")


def prop_pack_within_capacity(case: Case, td) -> None:
    """Raw tokens per row (bin) <= capacity (alignment padding does not count)."""
    for r, lengths in enumerate(_sub_lengths(td)):
        _assert(sum(lengths) <= case.kwargs["capacity"],
                f"row {r} holds {sum(lengths)} raw tokens > capacity {case.kwargs['capacity']}")


def prop_pack_width_aligned(case: Case, td) -> None:
    """W % a == 0 and W = max over rows of sum roundup(s, a) (no slack)."""
    align, width = _align(case), td["input_ids"].shape[1]
    tight = max(sum(_round_up(s, align) for s in row) for row in _sub_lengths(td))
    _assert(width % align == 0, f"W = {width} is not a multiple of a = {align}")
    _assert(width == tight, f"W = {width}, but the widest row needs {tight}")


def prop_pack_attention_counts(case: Case, td) -> None:
    """Per row attention_mask.sum() == sum(sub_seq_lengths)."""
    att = td["attention_mask"].sum(dim=1).tolist()
    for r, lengths in enumerate(_sub_lengths(td)):
        _assert(att[r] == sum(lengths), f"row {r}: attention sums to {att[r]}, "
                f"sub-sequences hold {sum(lengths)} tokens")


def prop_pack_tokens_in_bin_order(case: Case, td) -> None:
    """The non-pad tokens of row r (attention 1) are its bin's examples' tokens, in bin order,
    rows shard-major (bin k on DP shard k mod dp)."""
    examples = _examples(case)
    ids, att = td["input_ids"].tolist(), td["attention_mask"].tolist()
    rows = _rows_of(case)
    _assert(len(ids) == len(rows), f"{len(ids)} rows, the spec's packing has {len(rows)}")
    for r, row in enumerate(rows):
        kept = [t for t, a in zip(ids[r], att[r], strict=True) if a == 1]
        want = [t for i in row for t in examples[i]["input_ids"]]
        _assert(kept == want, f"row {r}: tokens {kept} != examples {row} in order {want}")


def prop_pack_round_trip(case: Case, td) -> None:
    """Unpacking row r by sub_seq_lengths and the alignment gives back its examples exactly:
    ids, attention 1, positions 0..s-1, and loss targets full[1:] (times the scale)."""
    examples = _examples(case)
    scale = _scale(_total(case))
    rows = _rows_of(case)
    unpacked = _unpack(td, _align(case))
    _assert(len(unpacked) == len(rows), f"{len(unpacked)} rows, expected {len(rows)}")
    for r, (row, subs) in enumerate(zip(rows, unpacked, strict=True)):
        _assert(len(row) == len(subs), f"row {r}: {len(subs)} sub-sequences, expected {len(row)}")
        for i, sub in zip(row, subs, strict=True):
            ex = examples[i]
            s = len(ex["input_ids"])
            where = f"row {r}, example {i} at column {sub['offset']}"
            _assert(sub["ids"] == list(ex["input_ids"]), f"{where}: ids {sub['ids']}")
            _assert(sub["attention"] == [1] * s, f"{where}: attention {sub['attention']}")
            _assert(sub["positions"] == list(range(s)), f"{where}: positions {sub['positions']}")
            want = _scaled(_full(ex)[1:], scale)
            _assert(_bits(sub["targets"]) == _bits(want),
                    f"{where}: loss targets {sub['targets']} != full[1:] * scale = {want}")


def prop_pack_no_target_across_boundary(case: Case, td) -> None:
    """The first token of a sub-sequence is never a target: every sub-sequence's last column,
    the alignment gaps and the row tail hold 0 in loss_mask (so a length-1 sub-sequence
    contributes nothing)."""
    loss = td["loss_mask"].tolist()
    for r, subs in enumerate(_unpack(td, _align(case))):
        inside = set()
        for sub in subs:
            inside.update(range(sub["offset"], sub["offset"] + sub["s"] - 1))
        stray = [c for c, v in enumerate(loss[r]) if c not in inside and v != 0]
        _assert(not stray, f"row {r}: loss_mask non-zero at columns {stray}, outside every "
                "sub-sequence's [off, off + s - 1)")


def prop_pack_loss_total(case: Case, td) -> None:
    """The unscaled loss total is the sum over examples of full[1:]: the scaled output holds
    exactly the values full[1:] * float32(1 / max(total, 1)) (compared as exact sums)."""
    scale = _scale(_total(case))
    want = _fsum(_scaled([v for ex in _examples(case) for v in _full(ex)[1:]], scale))
    got = _fsum(td["loss_mask"].flatten().tolist())
    _assert(got == want or (math.isnan(got) and math.isnan(want)),
            f"loss_mask sums to {got!r}, expected {want!r} (sum of scaled full[1:])")


def prop_pack_normalized(case: Case, td) -> None:
    """With 0/1 masks every non-zero entry equals float32(1 / max(total, 1)), total the number
    of targets (the shifted ones: full[0] is never a target)."""
    if not _binary(case):
        return
    total = _total(case)
    values = td["loss_mask"][td["loss_mask"] != 0].tolist()
    _assert(len(values) == total, f"{len(values)} non-zero entries for {total} targets")
    _assert(all(v == _scale(total) for v in values),
            f"non-zero entries {sorted(set(values))} != 1/max({total}, 1) = {_scale(total)}")


def prop_pack_cu_seqlens(case: Case, td) -> None:
    """cu_seqlens_padded: prefix sums of roundup(s, a) over all sub-sequences in row order (THD
    stream offsets, row tails dropped), int32."""
    align = _align(case)
    sums = [0]
    for row in _sub_lengths(td):
        for s in row:
            sums.append(sums[-1] + _round_up(s, align))
    cu = td.get_non_tensor("cu_seqlens_padded")
    _assert(cu.dtype == torch.int32, f"cu_seqlens_padded is {cu.dtype}, not int32")
    _assert(cu.tolist() == sums, f"cu_seqlens_padded {cu.tolist()} != {sums}")


def prop_pack_pp_invariant(case: Case, td, candidate) -> None:
    """Changing pp_size changes nothing (it is validated only)."""
    pp = case.kwargs.get("pp_size", 1)
    twin = candidate(*case.args, **(dict(case.kwargs) | {"pp_size": pp % 4 + 1}))
    assert_identical(td, twin, allow_device=True)


def prop_pack_deterministic(case: Case, td, candidate) -> None:
    """The packing is deterministic: a second call gives the identical batch."""
    assert_identical(td, candidate(*case.args, **case.kwargs), allow_device=True)


# --------------------------------------------------------------------------- pictures


def collate_picture(td) -> dict[str, list[str]]:
    """`p` attended token, `.` masked column; loss: `r` a weighted target, `.` zero."""
    return {"sequence": ["".join("p" if a else "." for a in row)
                         for row in td["attention_mask"].tolist()],
            "loss": ["".join("r" if v != 0 else "." for v in row)
                     for row in td["loss_mask"].tolist()]}


def pack_picture(td) -> dict[str, list[str]]:
    """Sub-sequences as letters a, b, c, ... (`.` pad and gaps); loss: `r` target, `.` zero.
    Slot widths come from cu_seqlens_padded (so a wrong alignment shows as shifted letters)."""
    width = td["input_ids"].shape[1]
    cu = td.get_non_tensor("cu_seqlens_padded").tolist()
    slots = iter([b - a for a, b in zip(cu[:-1], cu[1:])])
    sequence = []
    for lengths in _sub_lengths(td):
        row, offset = ["."] * width, 0
        for k, s in enumerate(lengths):
            for c in range(offset, min(offset + s, width)):
                row[c] = "abcdefghijklmnopqrstuvwxyz"[k % 26]
            offset += next(slots, s)
        sequence.append("".join(row))
    return {"sequence": sequence,
            "loss": ["".join("r" if v != 0 else "." for v in row)
                     for row in td["loss_mask"].tolist()]}


def describe_collate_row(case: Case, row: int) -> str:
    ex = _examples(case)[row]
    return (f"s={len(ex['input_ids'])} num_actions={ex['num_actions']} "
            f"loss_mask={list(ex['loss_mask'])}")


def describe_pack_row(case: Case, row: int) -> str:
    rows = _rows_of(case)
    if row >= len(rows):
        return "(no such row in the spec's packing)"
    lengths = [len(_examples(case)[i]["input_ids"]) for i in rows[row]]
    return f"examples {rows[row]} (lengths {lengths}), a={_align(case)}"


# --------------------------------------------------------------------------- pins


def _ex(ids, num_actions, loss, **extra) -> dict:
    return {"input_ids": list(ids), "num_actions": num_actions, "loss_mask": list(loss), **extra}


def _t(values, dtype=torch.int64, device="cpu") -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, device=device)


def _structure_pins(kwargs: dict) -> list[Pin]:
    """Bad and valid examples every `--profile ci` run must reach, for collate_sft and pack_sft
    (`kwargs` their keywords): the per-example checks' slow path (an example the fast path does
    not take: a missing key, a non-int num_actions, a numpy int, a mapping not a dict), tensors
    and batches the whole-tensor paths decline (then the rows are read as the reference reads
    them), and two devices (a meta tensor stands for the second on a machine with one)."""
    one = {"input_ids": [1, 2, 3], "num_actions": 2, "loss_mask": [1, 0]}
    batch = jagged_batch([one, _ex([4, 5], 1, [1])])
    bad = [
        ("missing_num_actions", [{"input_ids": [1, 2], "loss_mask": [1]}], ValueError),
        ("num_actions_float", [dict(one, num_actions=2.0)], TypeError),
        ("attention_longer_than_ids", [dict(one, attention_mask=[1, 1, 1, 1])], ValueError),
        ("attention_value_two", [dict(one, attention_mask=[1, 2, 1])], ValueError),
        ("ids_2d_tensor", [dict(one, input_ids=_t([[1, 2, 3]]))], ValueError),
        ("ids_float_tensor", [dict(one, input_ids=_t([1, 2, 3], torch.float32))], TypeError),
        ("complex_loss_mask", [dict(one, loss_mask=_t([1, 0], torch.complex64))], TypeError),
        ("loss_mask_a_string", [dict(one, loss_mask="10")], TypeError),
        ("token_beyond_int64", [dict(one, input_ids=[1, 2**63, 3])], ValueError),
        ("tensor_attention_value_two",
         [{"input_ids": _t([1, 2]), "num_actions": 1, "loss_mask": _t([1.0], torch.float32),
           "attention_mask": _t([1, 2])}], ValueError),
        ("tensors_on_two_devices",
         [{"input_ids": _t([1, 2]), "num_actions": 1,
           "loss_mask": _t([1.0], torch.float32, "meta")}], ValueError),
        ("batch_loss_mask_longer",  # (a non-tensor entry too: no field of a row)
         jagged_batch([dict(one, loss_mask=[1, 0, 1])]).set_non_tensor("source", "sft"),
         ValueError),
        ("batch_num_actions_float", batch.clone().set("num_actions", _t([2.0, 1.0], torch.float32)),
         TypeError),
        ("batch_of_no_rows", batch[0:0], ValueError),
        ("batch_without_batch_dimension", TensorDict({"input_ids": _t([[1, 2]])}, []),
         ValueError),
        ("batch_attention_longer",
         batch.clone().set("attention_mask", hs.jagged([[1, 1, 1, 1], [1, 1]], torch.int64)),
         ValueError),
        ("batch_attention_value_two",
         batch.clone().set("attention_mask", hs.jagged([[1, 2, 1], [1, 1]], torch.int64)),
         ValueError),
    ]
    valid = [
        ("numpy_num_actions", [dict(one, num_actions=np.int64(2), attention_mask=[1, 1, 1]),
                               _ex([4, 5], np.int64(1), [1])]),
        ("mappings_not_dicts", [UserDict(one), UserDict(
            _ex([4, 5], 1, [1], attention_mask=[1, 1]))]),
    ]
    return ([Pin(name, BadCase(Case((examples,), kwargs), raises, name.replace("_", " ")),
                 "rejected as the reference rejects it, whichever path the impl takes")
             for name, examples, raises in bad]
            + [Pin(name, Case((examples,), kwargs), "the per-example checks' slow path accepts "
                   "what the fast path does not take, with the same output")
               for name, examples in valid]
            + [Pin("output_device_given", Case(([one],), kwargs | {"device": "cpu"}),
                   "an explicit device places the outputs there")])


def _expect(key: str, want):
    def check(case: Case, td) -> None:
        got = td[key].tolist() if not td.is_non_tensor(key) else td.get_non_tensor(key)
        got = got.tolist() if isinstance(got, torch.Tensor) else got
        _assert(got == want, f"{key}: expected {want}, got {got}")
    return check


def _expect_loss_values(want: list[float]):
    """The non-zero loss_mask entries, in order, bit for bit (NaN matches NaN)."""
    def check(case: Case, td) -> None:
        got = [v for v in td["loss_mask"].flatten().tolist() if v != 0.0]
        same = len(got) == len(want) and all(
            math.isnan(a) and math.isnan(b) or _bits([a]) == _bits([b]) for a, b in zip(got, want))
        _assert(same, f"loss_mask non-zero values {got}, expected {want}")
    return check


def _expect_rows(want: list[list[int]]):
    """Row r holds the sub-sequences whose first tokens are want[r] (token = 100 + index)."""
    def check(case: Case, td) -> None:
        firsts = [[sub["ids"][0] - 100 for sub in row] for row in _unpack(td, _align(case))]
        _assert(firsts == want, f"rows hold examples {firsts}, expected {want}")
    return check


def _indexed(lengths: list[int]) -> list[dict]:
    """Example i: tokens 100 + i (recognisable in a packed row), all targets."""
    return [_ex([100 + i] * s, s, [1] * s) for i, s in enumerate(lengths)]


COLLATE_PINS = [
    Pin("broadcast_length1_loss_mask",
        BadCase(Case(([_ex([5, 6, 7], 3, [1])],), {"pad_token_id": 0}), ValueError,
                "a length-1 loss_mask for num_actions = 3"),
        "SkyRL collate_sft_batch broadcasts a length-1 loss_mask over num_actions silently"),
    Pin("pad_id_inside_tokens",
        Case(([_ex([0, 5, 0], 2, [1, 0], attention_mask=[1, 0, 1]), _ex([7], 1, [1])],),
             {"pad_token_id": 0}),
        "masks derived from `token != pad` drop real tokens equal to the pad id and "
        "ignore the example's own interior zeros",
        _expect("attention_mask", [[1, 0, 1], [0, 0, 1]])),
    Pin("token_mean_normalization",
        Case(([_ex([1, 2, 3], 3, [1, 1, 1]), _ex([4, 5], 1, [1])],),
             {"pad_token_id": 0, "normalize": True}),
        "normalize divides by the batch's total (token mean), not per sequence",
        _expect("loss_mask", [[0.25, 0.25, 0.25], [0.0, 0.0, 0.25]])),
    *[Pin(f"total_{name}", Case(([_ex([1] * len(loss), len(loss), loss)],),
                                {"pad_token_id": 0, "normalize": True}),
          why, _expect_loss_values(want)) for name, loss, why, want in [
        ("at_2_24", [16777215.0, 1.0], "total 2**24: exact in any float (the boundary)",
         [0.9999999403953552, 5.960464477539063e-08]),
        ("past_2_24", [16777216.0, 1.0],
         "total 2**24 + 1: a float32 sum loses the 1 (scale 2**-24, loss 1.0 instead of "
         "0.99999994)", [0.9999999403953552, 5.9604641222676946e-08]),
        ("beyond_float32", [3e38, 3e38],
         "total 6e38 overflows float32: a float32 sum is inf and scales every weight to 0",
         [0.4999999701976776, 0.4999999701976776]),
        ("needs_fsum", [2.0**53, 1.0, -2.0**53, 1.5],
         "a float64 sum in order drops the 1 (2**53 + 1 rounds to 2**53): total 1.5, not 2.5",
         [3602879755583488.0, 0.4000000059604645, -3602879755583488.0, 0.6000000238418579])]],
    Pin("opposite_infinities_make_nan",
        Case(([{"input_ids": [1, 2, 3], "num_actions": 2,
                "loss_mask": torch.tensor([3e38, -3e38], dtype=torch.float16)}],),
             {"pad_token_id": 0, "normalize": True}),
        "float16 weights beyond 65504 are +-inf; their exact sum (math.fsum) raised ValueError "
        "in reference and impl alike, where IEEE addition gives NaN (found 2026-11-24 when the "
        "strategies began to draw float16 loss masks)",
        _expect_loss_values([math.nan, math.nan])),
    *_structure_pins({"pad_token_id": 0}),
]

def _expect_int(want: int):
    def check(case: Case, a) -> None:
        _assert(a == want, f"align_size{case.args or tuple(case.kwargs.values())} = {a}, "
                f"expected {want}")
    return check


ALIGN_PINS = [
    Pin("tp_only", Case((4, 1)), "sequence parallelism alone: a = tp (4)", _expect_int(4)),
    Pin("cp_doubles", Case((1, 2)),
        "context parallelism splits each segment into 2*cp chunks: a = tp*cp*2 = 4, not tp*cp",
        _expect_int(4)),
    Pin("fp8_tp", Case((4, 1), {"fp8": True}),
        "per-tensor fp8 with tp 4: each TP rank needs 8 tokens: lcm(4, 16, 32) = 32 (SkyRL "
        "0.3.0's lcm(4, 16) = 16 leaves 4 per rank: TE's dim assertion)", _expect_int(32)),
    Pin("fp8_blockwise_tp", Case((2, 1), {"fp8": True, "fp8_recipe": "blockwise"}),
        "block-scaled fp8 with tp 2: the sequence-parallel all-gather is quantized in 128-token "
        "tiles per TP rank: lcm(2, 256) = 256, not 16", _expect_int(256)),
    Pin("fp8_blockwise_no_tp", Case((1, 2), {"fp8": True, "fp8_recipe": "blockwise"}),
        "block-scaled fp8 without tp: no quantized all-gather: lcm(4, 32) = 32",
        _expect_int(32)),
    Pin("fp8_mxfp8", Case((1, 1), {"fp8": True, "fp8_recipe": "mxfp8"}),
        "MXFP8 quantizes in blocks of 32 even with tp = cp = 1: 32, not 16", _expect_int(32)),
    Pin("fp8_recipe_unresolved", BadCase(Case((2, 1), {"fp8": True, "fp8_recipe": "auto"}),
                                         ValueError, "fp8_recipe 'auto'"),
        "the recipe must be resolved before packing: controller and workers must agree"),
    Pin("fp8_cp", Case((1, 2), {"fp8": True}),
        "fp8 needs each CP rank's slab 16-aligned: lcm(4, 16*2) = 32, not lcm(4, 16)",
        _expect_int(32)),
    Pin("size_zero", BadCase(Case((0, 1)), ValueError, "tp_size = 0"), "sizes < 1 are rejected"),
]


def _expect_bins(want):
    def check(case: Case, bins) -> None:
        _assert(bins == want, f"bins {bins}, expected {want}")
    return check


FFD_PINS = [
    Pin("spec_tie_order", Case(([10] * 8, 128), {"min_bins": 4, "bin_multiple": 4}),
        "FFD ties go to the larger index first; the adjustment drains the largest bin's tail "
        "(sft.md example 1)", _expect_bins([[7, 6, 5, 4, 3], [0], [1], [2]])),
    Pin("spec_min_bins", Case(([10, 15, 8, 12], 64), {"min_bins": 2, "bin_multiple": 2}),
        "sft.md example 2", _expect_bins([[1, 3, 0], [2]])),
    Pin("spec_bin_multiple", Case(([40, 30, 20, 10, 5], 100), {"bin_multiple": 4}),
        "sft.md example 3: a bin filled exactly to capacity, then two bins split off it",
        _expect_bins([[0, 1], [4], [3], [2]])),
    Pin("split_bin_with_most_items", Case(([5, 4, 1, 1, 1], 9), {"min_bins": 3}),
        "the adjustment splits the bin with the most items ([4, 3, 2], 3 tokens), not the one "
        "with the most tokens ([0, 1], 9 tokens)", _expect_bins([[0, 1], [4, 3], [2]])),
    Pin("drain_one_bin_first", Case(([1] * 6, 3), {"min_bins": 4}),
        "the adjustment drains one bin before the next: both new bins come from [2, 1, 0], not "
        "one from each bin in turn", _expect_bins([[5, 4, 3], [2], [0], [1]])),
    Pin("length_over_capacity", BadCase(Case(([3, 9, 2], 8)), ValueError, "lengths[1] = 9 > 8"),
        "a sequence longer than the capacity must be rejected, not packed alone"),
    Pin("too_few_sequences", BadCase(Case(([3, 2], 8), {"min_bins": 4}), ValueError,
                                     "4 bins from 2 sequences"),
        "fewer sequences than DP shards cannot fill every shard"),
]

SHIFT_CASE = Case(([_ex([11, 12, 13], 3, [1, 1, 0]), _ex([21, 22, 23, 24], 2, [0, 1]),
                    _ex([31], 1, [1])],), {"pad_token_id": 0, "capacity": 16})

PACK_PINS = [
    Pin("ffd_tie_order", Case((_indexed([3] * 8),), {"pad_token_id": 0, "capacity": 12,
                                                     "dp_size": 4}),
        "equal lengths: FFD visits the larger index first; rows shard-major",
        _expect_rows([[7, 6, 5, 4], [3, 2], [0], [1]])),
    Pin("shard_major_order", Case((_indexed([4, 4, 3, 3]),), {"pad_token_id": 0, "capacity": 4,
                                                             "dp_size": 2}),
        "bins [1], [0], [3], [2] (FFD by length): shard 0 gets bins 0 and 2, shard 1 bins 1 and "
        "3, so a contiguous split gives each DP rank its bins (not bin-major order)",
        _expect_rows([[1], [3], [0], [2]])),
    Pin("loss_shift", SHIFT_CASE,
        "column off+p holds full[p+1] (the target predicted from token p), not full[p]; "
        "num_actions == s drops full[0]; a length-1 sequence contributes nothing",
        _expect("loss_mask", [[0.0, 0.0, 0.5, 0.0, 0.5, 0.0, 0.0]])),
    Pin("last_target_at_width",
        Case(([_ex([5, 6, 7, 8], 4, [1, 1, 1, 1]), _ex([9, 9], 2, [1, 1])],),
             {"pad_token_id": 0, "capacity": 6}),
        "the widest row's last sub-sequence ends exactly at W: its last target is column W-2; "
        "a write of its (nonexistent) final target clamped to W-2 erases it",
        _expect("loss_mask", [[0.25, 0.25, 0.25, 0.0, 0.25]])),
    Pin("cp_alignment_doubled",
        Case(([_ex([1, 2, 3], 1, [1]), _ex([4, 5, 6, 7, 8], 2, [1, 1])],),
             {"pad_token_id": 0, "capacity": 8, "cp_size": 2}),
        "cp=2 splits every segment into 4 chunks: slots are multiples of tp*cp*2 = 4 "
        "(8 + 4 = 12 columns), not tp*cp = 2",
        _expect("cu_seqlens_padded", [0, 8, 12])),
    Pin("pp_has_no_effect",
        Case((_indexed([2, 5, 3, 1]),), {"pad_token_id": 0, "capacity": 6, "dp_size": 2,
                                         "pp_size": 2}),
        "pipeline parallelism does not change the layout (config dp2/tp1/pp2/cp1)"),
    Pin("fp8_context_parallel",
        Case((_indexed([5, 3, 7, 2]),), {"pad_token_id": 7, "capacity": 8, "dp_size": 2,
                                         "cp_size": 2, "fp8": True}),
        "fp8 with cp=2: every slot a multiple of lcm(4, 32) = 32"),
    Pin("over_capacity", BadCase(Case(([_ex([1] * 5, 1, [1])],), {"pad_token_id": 0,
                                                                    "capacity": 4}),
                                 ValueError, "a 5-token example, capacity 4"),
        "a sequence over the capacity is an error (not truncated, not packed alone)"),
    Pin("fewer_sequences_than_dp",
        BadCase(Case((_indexed([2, 2, 2]),), {"pad_token_id": 0, "capacity": 8, "dp_size": 4}),
                ValueError, "3 sequences, 4 DP shards"),
        "every DP rank needs at least one sequence"),
    Pin("attention_zeros",
        BadCase(Case(([_ex([1, 2], 1, [1], attention_mask=[1, 0])],), {"pad_token_id": 0,
                                                                       "capacity": 4}),
                ValueError, "attention zeros in a packed example"),
        "a packed row cannot express interior attention zeros: rejected, not dropped"),
    Pin("batch_over_capacity",
        BadCase(Case((jagged_batch([_ex([1] * 5, 1, [1])]),), {"pad_token_id": 0,
                                                                 "capacity": 4}),
                ValueError, "a 5-token example in a jagged batch, capacity 4"),
        "a jagged batch is checked whole, and still names the reference's error"),
    *_structure_pins({"pad_token_id": 0, "capacity": 8}),
    Pin("no_loss_target", Case(([_ex([5], 1, [1]), _ex([6], 1, [0.5])],),
                               {"pad_token_id": 0, "capacity": 4}),
        "one-token examples lose their only loss value to the shift: an all-zero loss_mask "
        "(scale 1 / max(0, 1)), no NaN",
        lambda case, td: _assert(not bool(td["loss_mask"].any()), "a loss value survived")),
]

# --------------------------------------------------------------------------- records

# lists: each example's ids packed by struct straight into the output (_write_ints); tensors
# and jagged batches: the compiled kernels (a 0/1 check of attention masks first); first-fit
# compiled over the lengths; CUDA: pack_sft's Triton kernel (collate_sft has none)
_FIRST_FIT = "numba:sft._first_fit"
COLLATE_PATHS = Paths(kernel=("numba:sft.collate", "numba:sft.zero_one", "cpu:sft._write_ints"),
                      cpu=("cpu:sft._write_ints",))
PACK_PATHS = Paths(kernel=("numba:sft.write_rows", "numba:sft.zero_one", _FIRST_FIT,
                           "cpu:sft._write_ints"),
                   cpu=("cpu:sft._write_ints",), triton=("triton:sft._rows",))

PACK_EXAMPLE = Case(([_ex([11, 12, 13], 2, [1, 1]), _ex([21, 22, 23, 24], 4, [1, 0, 1, 1]),
                      _ex([31], 1, [1]), _ex([41, 42, 43, 44, 45], 3, [1, 1, 1])],),
                    {"pad_token_id": 0, "capacity": 8, "dp_size": 2, "tp_size": 2})

COLLATE_SFT = register(OpInfo(
    op="sft",
    function="collate_sft",
    valid=collate_valid_cases(),
    invalid=hs.one_or_two_defects(bad_collate_cases, collate_cases(), oracle.collate_sft),
    compare=assert_identical,
    properties=[
        Property.of(prop_collate_shapes, name="shapes_and_dtypes"),
        Property.of(prop_left_padded),
        Property.of(prop_loss_right_aligned),
        Property.of(prop_collate_normalized, name="normalized_weights"),
    ],
    pins=COLLATE_PINS,
    forms=FORMS,
    lossy_forms=(NARROW_FORM,),
    devices=("cpu", "cuda"),
    to_device=_on_device,
    paths=COLLATE_PATHS,
    describe_row=describe_collate_row,
    picture=collate_picture,
    example=Case(PACK_EXAMPLE.args, {"pad_token_id": 0}),
    targets=lambda case: {"padding waste": _collate_waste(case), "batch size": len(case.args[0])},
    doc="SFT examples → left-padded batch, loss masks right-aligned (SkyRL collate_sft_batch)",
))


def _collate_waste(case: Case) -> float:
    lengths = [len(ex["input_ids"]) for ex in _examples(case)]
    return len(lengths) * max(lengths) - sum(lengths)


ALIGN_SIZE = register(OpInfo(
    op="sft",
    function="align_size",
    valid=align_cases(),
    invalid=hs.one_or_two_defects(bad_align_cases, align_cases(), oracle.align_size),
    compare=assert_identical,
    properties=[
        Property.of(prop_align_divisible, name="divisible"),
        Property.of(prop_align_minimal, name="minimal"),
    ],
    pins=ALIGN_PINS,
    example=Case((1, 2), {"fp8": True}),
    doc="columns each packed sub-sequence is padded to a multiple of (TP / CP / FP8)",
))

FFD_BINS = register(OpInfo(
    op="sft",
    function="ffd_bins",
    valid=ffd_cases(),
    invalid=hs.one_or_two_defects(bad_ffd_cases, ffd_cases(), oracle.ffd_bins),
    compare=assert_identical,
    properties=[
        Property.of(prop_ffd_partition, name="partition"),
        Property.of(prop_ffd_capacity, name="within_capacity"),
        Property.of(prop_ffd_bin_count, name="bin_count"),
        Property.of(prop_ffd_non_empty, name="non_empty"),
        Property.of(prop_ffd_visit_order, name="visit_order"),
    ],
    pins=FFD_PINS,
    paths=Paths(kernel=(_FIRST_FIT,)),
    example=FFD_PINS[0].case,
    doc="first-fit-decreasing bins with the DP bin-count adjustment",
))

PACK_SFT = register(OpInfo(
    op="sft",
    function="pack_sft",
    valid=pack_cases(),
    invalid=hs.one_or_two_defects(bad_pack_cases, pack_cases(), oracle.pack_sft),
    compare=assert_identical,
    properties=[
        Property.of(prop_pack_shapes, name="shapes_and_dtypes"),
        Property.of(prop_pack_each_example_once, name="each_example_once"),
        Property.of(prop_pack_rows_multiple_of_dp, name="rows_multiple_of_dp"),
        Property.of(prop_pack_within_capacity, name="within_capacity"),
        Property.of(prop_pack_width_aligned, name="width_aligned"),
        Property.of(prop_pack_attention_counts, name="attention_counts"),
        Property.of(prop_pack_tokens_in_bin_order, name="tokens_in_bin_order"),
        Property.of(prop_pack_round_trip, name="round_trip"),
        Property.of(prop_pack_no_target_across_boundary, name="no_target_across_boundary"),
        Property.of(prop_pack_loss_total, name="loss_total"),
        Property.of(prop_pack_normalized, name="normalized_weights"),
        Property.of(prop_pack_cu_seqlens, name="cu_seqlens"),
        Property.of(prop_pack_pp_invariant, name="pp_invariant", metamorphic=True),
        Property.of(prop_pack_deterministic, name="deterministic", metamorphic=True),
    ],
    pins=PACK_PINS,
    forms=FORMS,
    lossy_forms=(NARROW_FORM,),
    devices=("cpu", "cuda"),
    to_device=_on_device,
    paths=PACK_PATHS,
    describe_row=describe_pack_row,
    picture=pack_picture,
    example=PACK_EXAMPLE,
    targets=lambda case: {"batch size": len(case.args[0])},
    doc="SFT examples → FFD-packed THD rows, shard-major, TP/CP/FP8-aligned (SkyRL "
        "PackedDataCollator)",
))

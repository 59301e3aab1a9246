"""Registry records for `balance` (spec: balance.md): Karmarkar–Karp partitions, token-budget
micro-batches, restoring their order, and sequence-parallel padding of a packed row."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch
from hypothesis import strategies as st
from tensordict import TensorDict

from batchproof import blocks as hs
from batchproof.compare import assert_identical
from batchproof.reference import balance as _reference
from batchproof.reference.sft import ffd_bins as _reference_ffd_bins
from batchproof.registry import BadCase, Case, OpInfo, Paths, Pin, Property, register

MAX_VALUES = 12


def _assert(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


# --------------------------------------------------------------------------- partition strategies


def partition_values(n: int) -> st.SearchStrategy[list]:
    """`n` non-negative values: ties and zeros (small ints), spread ints, all equal, or floats."""
    ints = st.one_of(
        st.lists(st.integers(0, 3), min_size=n, max_size=n),
        st.lists(st.integers(0, 100), min_size=n, max_size=n),
        st.integers(0, 9).map(lambda v: [v] * n),
        hs.lengths(n, max_len=20),
    )
    floats = st.lists(st.one_of(st.sampled_from([0.0, 0.5, 1.5, 1e-3, 2.0**-20]),
                                st.floats(0, 1000, width=32)), min_size=n, max_size=n)
    return st.one_of(ints, ints, floats)


@st.composite
def partition_cases(draw) -> Case:
    """`(values, k)` with 1 <= k <= n; `equal_size=True` only with k dividing n."""
    n = draw(st.integers(1, MAX_VALUES))
    values = draw(partition_values(n))
    equal = draw(st.booleans())
    if equal:
        proper = [d for d in range(2, n) if n % d == 0]  # first: the cases where sizes matter
        k = draw(st.sampled_from(proper + [1, n] if n > 1 else [1]))
        return Case((values, k), {"equal_size": True})
    k = draw(st.integers(1, n))
    return Case((values, k), draw(st.sampled_from([{}, {"equal_size": False}])))


@st.composite
def bad_partition_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect each. Alone (no `valid`), a defect of the values comes with k = 1 and one of
    k with the default equal_size; on a call `valid` draws, the call's other arguments are
    kept. `not_divisible` replaces the whole call (so it is never one of two defects)."""
    # the defect before the valid call: drawn after it, Hypothesis favours the first kind
    kind = draw(st.sampled_from(["k_over_n", "k_zero", "k_type", "not_divisible", "negative",
                                 "not_finite", "bool_value", "values_type", "values_tensor"]))
    good = draw(valid if valid is not None else partition_cases())
    values, k = good.args
    n = len(values)
    kw = dict(good.kwargs) if valid is not None else {}
    k = k if valid is not None else 1  # with a defect of the values
    if kind == "values_tensor":  # a tensor that is not 1-D, not real, or holds a bad value
        bad, raises = draw(st.sampled_from(BAD_VALUE_TENSORS))
        return BadCase(Case((bad, k), kw), raises,
                       f"values tensor {bad.dtype} {tuple(bad.shape)}")
    if kind == "k_over_n":
        return BadCase(Case((values, n + draw(st.integers(1, 3))), kw), ValueError, "k > n")
    if kind == "k_zero":
        return BadCase(Case((values, draw(st.integers(-2, 0))), kw), ValueError, "k < 1")
    if kind == "k_type":
        return BadCase(Case((values, draw(st.sampled_from([2.0, True, "2"]))), kw), TypeError,
                       "k is not an int")
    if kind == "not_divisible":
        values = values + [1] if n % 2 == 0 else values
        return BadCase(Case((values, 2), {"equal_size": True}), ValueError,
                       "equal_size with n not divisible by k")
    row = draw(st.integers(0, n - 1))
    broken = list(values)
    if kind == "negative":
        broken[row] = draw(st.sampled_from([-1, -0.5, -1e-30]))
        return BadCase(Case((broken, k), kw), ValueError, f"values[{row}] is negative")
    if kind == "not_finite":
        broken[row] = draw(st.sampled_from([math.inf, math.nan]))
        return BadCase(Case((broken, k), kw), ValueError, f"values[{row}] is not finite")
    if kind == "bool_value":
        broken[row] = True
        return BadCase(Case((broken, k), kw), TypeError, f"values[{row}] is a bool")
    return BadCase(Case((3, k), kw), TypeError, "values is not a sequence")


BAD_VALUE_TENSORS = [
    (torch.ones(2, 1), ValueError), (torch.tensor([True, False]), TypeError),
    (torch.tensor([1j]), TypeError), (torch.tensor([2, -1]), ValueError),
    (torch.tensor([0.5, math.nan, -1.0]), ValueError), (torch.tensor([1.0, -0.5]), ValueError),
]


def _values_as_tensor(case: Case) -> Case:
    values = case.args[0]
    dtype = torch.int64 if all(isinstance(v, int) for v in values) else torch.float64
    return Case((torch.tensor(values, dtype=dtype), *case.args[1:]), case.kwargs)


# --------------------------------------------------------------------------- partition properties


def _exact_sums(values, partitions) -> list[Fraction]:
    return [sum((Fraction(values[i]) for i in p), Fraction(0)) for p in partitions]


def _slack(values) -> Fraction:
    """Float sums round: allow a few ulps of the total; integer values are checked exactly."""
    if all(isinstance(v, int) for v in values):
        return Fraction(0)
    return Fraction(sum(values)) * Fraction(1, 2**40)


def prop_partition(case: Case, partitions) -> None:
    """Exactly k lists of ints, none empty, disjoint, covering range(n)."""
    values, k = case.args
    _assert(isinstance(partitions, list) and all(isinstance(p, list) for p in partitions),
            "the result must be a list of lists")
    _assert(len(partitions) == k, f"{len(partitions)} partitions, expected k={k}")
    _assert(all(len(p) > 0 for p in partitions), f"an empty partition in {partitions}")
    flat = [i for p in partitions for i in p]
    _assert(all(type(i) is int for i in flat), "indices must be Python ints")
    _assert(sorted(flat) == list(range(len(values))),
            f"{partitions} is not a partition of range({len(values)})")


def prop_equal_size(case: Case, partitions) -> None:
    """With equal_size, every partition holds n/k indices."""
    values, k = case.args
    if case.kwargs.get("equal_size"):
        sizes = [len(p) for p in partitions]
        _assert(sizes == [len(values) // k] * k, f"equal_size: sizes {sizes}, expected n/k each")


def prop_largest_sum_bound(case: Case, partitions) -> None:
    """The largest partition sum is >= ceil(total/k) (total/k for floats) and >= max(values)."""
    values, k = case.args
    sums = _exact_sums(values, partitions)
    total = sum((Fraction(v) for v in values), Fraction(0))
    floor = Fraction(math.ceil(total / k)) if _slack(values) == 0 else total / k
    _assert(max(sums) >= floor and max(sums) >= max(Fraction(v) for v in values),
            f"largest partition sum {float(max(sums))} below max(ceil(total/k), max value)")


def prop_spread_bound(case: Case, partitions) -> None:
    """Largest differencing keeps max - min partition sum <= max(values) (an invariant of every
    merge: combining two states in opposite order never widens beyond the wider spread)."""
    values, _ = case.args
    sums = _exact_sums(values, partitions)
    bound = max(Fraction(v) for v in values) + _slack(values)
    _assert(max(sums) - min(sums) <= bound,
            f"spread {float(max(sums) - min(sums))} exceeds max value {float(bound)}: "
            f"sums {[float(s) for s in sums]}")


def _assert_descending(case: Case, partitions, what: str, tie_ordered, tie_rule: str) -> None:
    """Sums non-increasing (within float slack); two neighbours with exactly equal sums must
    satisfy `tie_ordered(first, second)`, else the failure names `tie_rule`."""
    values, _ = case.args
    sums = _exact_sums(values, partitions)
    slack = _slack(values)
    for a, b, pa, pb in zip(sums, sums[1:], partitions, partitions[1:]):
        _assert(a + slack >= b, f"{what} not in descending order of sums: {partitions}")
        if slack == 0 and a == b:
            _assert(tie_ordered(pa, pb), f"equal sums, but {tie_rule}: {partitions}")


def prop_descending(case: Case, partitions) -> None:
    """Sets come in descending set order: by sum, then size, then first index (insertion order)."""
    def key(p):
        return len(p), p[0] if p else -1

    _assert_descending(case, partitions, "sets", lambda pa, pb: key(pa) > key(pb),
                       "sets not ordered by size then first index")


def prop_partitions_descending(case: Case, partitions) -> None:
    """The lists keep karmarkar_karp's descending set order: sums non-increasing, equal sums
    ordered by item count (more items first); only the indices inside a list are sorted."""
    _assert_descending(case, partitions, "partitions", lambda pa, pb: len(pa) >= len(pb),
                       "fewer items first")


def prop_sorted_indices(case: Case, partitions) -> None:
    """Every partition's indices are ascending."""
    for p in partitions:
        _assert(p == sorted(p), f"partition {p} is not sorted ascending")


# --------------------------------------------------------------------------- partition pins


def _expect(literal):
    def expect(case: Case, output) -> None:
        _assert(output == literal, f"expected {literal}, got {output}")
    return expect


ONE_TO_EIGHT = list(range(1, 9))
KK_PINS = [
    Pin("spec_example_1_to_8_equal", Case((ONE_TO_EIGHT, 2), {"equal_size": True}),
        "spec example: exact tie-breaking, equal sizes", _expect([[7, 4, 2, 1], [6, 5, 3, 0]])),
    Pin("spec_example_1_to_8", Case((ONE_TO_EIGHT, 2)),
        "spec example: exact tie-breaking (verl seqlen_balancing)",
        _expect([[7, 5, 2, 0], [1, 6, 4, 3]])),
    Pin("spec_example_10_1_1", Case(([10, 1, 1], 2)),
        "spec example: one dominant value", _expect([[0], [2, 1]])),
    Pin("spec_example_100_and_ones_equal", Case(([100, 1, 1, 1, 1, 1], 2), {"equal_size": True}),
        "spec example: equal sizes against a dominant value", _expect([[0, 3, 1], [5, 4, 2]])),
    Pin("zeros_and_ties", Case(([0, 0, 0, 5, 0, 5], 3)),
        "zeros tie with empty sets on sum: the item count must break the tie",
        _expect([[5], [3], [4, 2, 1, 0]])),
    Pin("k_greater_than_n", BadCase(Case(([3, 1], 3)), ValueError, "k > n"),
        "more partitions than values cannot all be non-empty"),
    Pin("equal_size_not_divisible",
        BadCase(Case(([1, 2, 3], 2), {"equal_size": True}), ValueError, "3 % 2 != 0"),
        "equal sizes need n divisible by k"),
    *[Pin(f"values_tensor_{name}", BadCase(Case((bad, 1)), raises, name),
          f"a values tensor ({name}) is rejected as its list is, naming the first bad value")
      for name, (bad, raises) in zip(["2d", "bool", "complex", "negative_int", "nan_first",
                                      "negative_float"], BAD_VALUE_TENSORS)],
]

GREEDY_ZEROS = Case(([0, 0, 0, 5], 2))
PARTITION_PINS = [
    Pin("greedy_empty_on_zeros", GREEDY_ZEROS,
        "a greedy partitioner (argmin of partition sums) puts every zero into partition 0 and "
        "leaves another partition empty (verl greedy_partition)", _expect([[3], [0, 1, 2]])),
    Pin("spec_example_sorted", Case((ONE_TO_EIGHT, 2)),
        "karmarkar_karp's spec example with sorted partitions", _expect([[0, 2, 5, 7],
                                                                          [1, 3, 4, 6]])),
    Pin("spec_example_equal_sorted", Case(([100, 1, 1, 1, 1, 1], 2), {"equal_size": True}),
        "equal sizes against a dominant value, sorted", _expect([[0, 1, 3], [2, 4, 5]])),
]

# --------------------------------------------------------------------------- micro_batches


def _group_sums(lengths: list[int], group_size: int) -> list[int]:
    """Tokens per group of `group_size` consecutive samples."""
    return [sum(lengths[i:i + group_size]) for i in range(0, len(lengths), group_size)]


def _split(draw, total: int, parts: int) -> list[int]:
    """`total` as `parts` positive ints (in random order); `parts <= total`."""
    cuts = sorted(draw(st.lists(st.integers(1, total - 1), min_size=parts - 1,
                                max_size=parts - 1, unique=True))) if parts > 1 else []
    bounds = [0, *cuts, total]
    return [b - a for a, b in zip(bounds, bounds[1:])]


@st.composite
def first_fit_traps(draw) -> tuple[list[int], int]:
    """(group sums, budget) that fill two or three micro-batches exactly, where
    first-fit-decreasing needs one more: `{L1, s, s}` and `{L2, m, s}` with `s < m < 2s`
    (first-fit-decreasing puts `m` beside `L1`, then the third `s` fits nowhere: the
    `balanced_beats_first_fit` pin, generalized), half of the time with a third full
    micro-batch cut at random into 2-4 groups; shuffled. Random lengths almost never reach
    this regime (first-fit-decreasing is usually optimal on small batches)."""
    small = draw(st.integers(2, 6))
    medium = draw(st.integers(small + 1, 2 * small - 1))
    budget = draw(st.integers(max(2 * medium + small, 3 * small + medium) + 1, 40))
    sums = [budget - 2 * small, small, small, budget - medium - small, medium, small]
    if draw(st.booleans()):
        sums += _split(draw, budget, draw(st.integers(2, 4)))
    return draw(st.permutations(sums)), budget


@st.composite
def micro_batch_cases(draw) -> Case:
    """Lengths in groups, a budget from capacity-exact to roomy or just above `total / count`
    (2 <= count <= 4), optional count constraints; a third of the cases are first-fit traps
    (`first_fit_traps`), where the balanced split is the answer and first-fit-decreasing is
    not."""
    group_size = draw(st.sampled_from([1, 1, 2, 3]))
    tight = False
    if draw(st.integers(0, 2)) == 0:  # balancing beats first-fit-decreasing
        sums, budget = draw(first_fit_traps())
        groups = len(sums)
        lengths = [v for total in sums for v in (
            _split(draw, total, group_size) if total >= group_size else [total])]
        if len(lengths) != groups * group_size:  # a group sum below group_size: single samples
            group_size, lengths = 1, sums
    else:
        tight = draw(st.booleans())  # a budget just above total / count, 2 <= count <= 4
        groups = draw(st.integers(3 if tight else 1, 10))
        lengths = draw(hs.lengths(groups * group_size, min_len=1, max_len=20))
        sums = _group_sums(lengths, group_size)
        budget = max(sums) + draw(st.one_of(st.just(0), st.integers(0, 10),
                                            st.integers(0, 200)))
        if tight:  # little slack: a balanced split at the lower bound often overflows it
            count = draw(st.integers(2, 4))
            budget = max(max(sums), -(-sum(sums) // count) + draw(st.integers(0, 2)))
    kwargs = {}
    if group_size != 1 or draw(st.booleans()):
        kwargs["group_size"] = group_size
    if not tight or draw(st.booleans()):  # a tight budget half of the time unconstrained: a
        if draw(st.booleans()):           # raised count would give the budget room again
            kwargs["min_count"] = draw(st.integers(1, groups))
        if draw(st.booleans()):
            kwargs["count_multiple"] = draw(st.integers(1, 4))
    case = Case((lengths, budget), kwargs)
    if not _accepted(case):  # the count constraints ask for more micro-batches than groups
        case = Case((lengths, budget), {k: v for k, v in kwargs.items() if k == "group_size"})
    return case


def _accepted(case: Case) -> bool:
    try:
        case.call(_reference.micro_batches)
    except ValueError:
        return False
    return True


@st.composite
def bad_micro_batch_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect each. Alone (no `valid`), the call has no keyword arguments but the one the
    defect sets; on a call `valid` draws, its keyword arguments are kept.
    `group_over_budget` and `not_divisible` replace the whole call (never one of two)."""
    # the defect before the valid call: drawn after it, Hypothesis favours the first kind
    kind = draw(st.sampled_from(["over_budget", "group_over_budget", "not_divisible",
                                 "too_many", "zero_length", "float_length", "budget_zero",
                                 "empty", "min_count_zero", "first_fault_wins", "lengths_type",
                                 "budget_type"]))
    good = draw(valid if valid is not None else micro_batch_cases())
    lengths, budget = good.args
    kw = dict(good.kwargs) if valid is not None else {}
    if kind == "lengths_type":  # not a sequence, or a tensor that is not 1-D integers
        bad, raises = draw(st.sampled_from([
            (5, TypeError), ("12", TypeError), (torch.ones(2, 1, dtype=torch.int64), ValueError),
            (torch.tensor([1.0, 2.0]), TypeError), (torch.tensor([True]), TypeError)]))
        return BadCase(Case((bad, budget), kw), raises, f"lengths is {type(bad).__name__}")
    if kind == "over_budget":
        row = draw(st.integers(0, len(lengths) - 1))
        broken = list(lengths)
        broken[row] = budget + draw(st.integers(1, 5))
        return BadCase(Case((broken, budget), kw), ValueError, f"lengths[{row}] > max_tokens")
    if kind == "group_over_budget":
        return BadCase(Case(([5, 5, 1, 1], 9), {"group_size": 2}), ValueError,
                       "group 0 holds 10 > 9 tokens")
    if kind == "not_divisible":
        return BadCase(Case((lengths + [1] if len(lengths) % 2 == 0 else lengths, budget),
                            {"group_size": 2}), ValueError, "len(lengths) % group_size != 0")
    if kind == "too_many":
        return BadCase(Case((lengths, budget), kw | {"min_count": len(lengths) + 1}), ValueError,
                       "min_count above the number of samples")
    if kind == "zero_length":
        return BadCase(Case((lengths + [0], budget), kw), ValueError, "a sample of 0 tokens")
    if kind == "float_length":
        return BadCase(Case((lengths[:-1] + [1.0], budget), kw), TypeError, "a float length")
    if kind == "first_fault_wins":  # a 0 before a float: both report the first faulty index
        return BadCase(Case(([0, 1.0] + lengths, budget), kw), ValueError,
                       "lengths[0] = 0 comes before the float")
    if kind == "budget_zero":
        return BadCase(Case((lengths, 0), kw), ValueError, "max_tokens < 1")
    if kind == "budget_type":
        return BadCase(Case((lengths, draw(st.sampled_from([8.0, True, "8", None]))), kw),
                       TypeError, "max_tokens not an int")
    if kind == "empty":
        return BadCase(Case(([], budget), kw), ValueError, "no samples")
    return BadCase(Case((lengths, budget), kw | {"min_count": 0}), ValueError, "min_count < 1")


def _lengths_as_tensor(case: Case) -> Case:
    return Case((torch.tensor(case.args[0], dtype=torch.int64), case.args[1]), case.kwargs)


def _lengths_as_numpy(case: Case) -> Case:
    """numpy integers, as a dataset's length column gives them (ints, though not `int`)."""
    return Case(([np.int64(v) for v in case.args[0]], case.args[1]), case.kwargs)


def _budget_facts(case: Case) -> tuple[list[int], int, int, int, int]:
    lengths, budget = case.args
    group_size = case.kwargs.get("group_size", 1)
    min_count = case.kwargs.get("min_count") or 1
    step = case.kwargs.get("count_multiple") or 1
    return list(lengths), budget, group_size, min_count, step


def prop_budget(case: Case, batches) -> None:
    """Every micro-batch holds at most max_tokens tokens (verl only used it to pick the count)."""
    lengths, budget, *_ = _budget_facts(case)
    for j, batch in enumerate(batches):
        tokens = sum(lengths[i] for i in batch)
        _assert(tokens <= budget, f"micro-batch {j} {batch} holds {tokens} > {budget} tokens")


def prop_cover(case: Case, batches) -> None:
    """Every sample exactly once; no micro-batch empty."""
    lengths, *_ = _budget_facts(case)
    flat = [i for b in batches for i in b]
    _assert(all(batches), f"an empty micro-batch in {batches}")
    _assert(sorted(flat) == list(range(len(lengths))),
            f"{batches} does not hold every index of range({len(lengths)}) exactly once")


def prop_groups(case: Case, batches) -> None:
    """Consecutive groups of group_size samples share a micro-batch."""
    _, _, group_size, *_ = _budget_facts(case)
    for batch in batches:
        groups = {i // group_size for i in batch}
        _assert(len(batch) == len(groups) * group_size,
                f"micro-batch {batch} splits a group of {group_size}")


def prop_ascending(case: Case, batches) -> None:
    """Indices ascend inside each micro-batch."""
    for batch in batches:
        _assert(batch == sorted(batch), f"micro-batch {batch} is not ascending")


def count_bounds(case: Case) -> tuple[int, int]:
    """[lower, upper] for the micro-batch count: lower = ceil(total/max_tokens) (raised to
    min_count, rounded up to count_multiple); upper = the same with ceil(2 total/max_tokens),
    because first-fit leaves at most one bin at most half full."""
    lengths, budget, _, min_count, step = _budget_facts(case)
    total = sum(lengths)

    def rounded(count: int) -> int:
        return -(-max(count, min_count) // step) * step

    return rounded(-(-total // budget)), rounded(-(-2 * total // budget))


def prop_count(case: Case, batches) -> None:
    """The count is a multiple of count_multiple, >= min_count, within count_bounds."""
    lower, upper = count_bounds(case)
    _, _, _, min_count, step = _budget_facts(case)
    count = len(batches)
    _assert(count % step == 0 and count >= min_count,
            f"{count} micro-batches: not a multiple of {step} or below min_count {min_count}")
    _assert(lower <= count <= upper, f"{count} micro-batches outside [{lower}, {upper}]")


def prop_composition(case: Case, batches) -> None:
    """The contract's steps, on the group sums, with the sub-steps' own oracles (reference
    `balanced_partitions` and `sft.ffd_bins`): the balanced partition at the fewest count
    `m0, m0 + step, ...` below first-fit-decreasing's bin count whose every micro-batch fits
    the budget, else the first-fit-decreasing bins; each expanded to its samples, in the order
    the step produced them."""
    lengths, budget, group_size, min_count, step = _budget_facts(case)
    sums = _group_sums([int(v) for v in lengths], group_size)
    chosen = fallback = _reference_ffd_bins(sums, budget, min_bins=min_count, bin_multiple=step)
    count, how = int(count_bounds(case)[0]), "first-fit"
    while count < len(fallback):
        partitions = _reference.balanced_partitions(sums, count)
        if all(sum(sums[g] for g in p) <= budget for p in partitions):
            chosen, how = partitions, f"the balanced partition at count {count}"
            break
        count += step
    want = [sorted(i for g in p for i in range(g * group_size, (g + 1) * group_size))
            for p in chosen]
    _assert(batches == want, f"{batches} is not {how}: {want}")


VERL_BUDGET = Case(([14, 2, 9, 17, 16], 29))
MICRO_PINS = [
    Pin("verl_budget_only_count", VERL_BUDGET,
        "verl rearrange_micro_batches uses max_token_len only to choose the count: "
        "2 micro-batches of 30 and 28 tokens for a budget of 29", _expect([[1, 2, 3], [4], [0]])),
    Pin("balanced_beats_first_fit", Case(([6, 2, 2, 7, 2, 3], 11)),
        "22 tokens fit exactly into 2 balanced micro-batches of 11, where first-fit-decreasing "
        "needs 3", _expect([[1, 3, 4], [0, 2, 5]])),
    Pin("groups_with_count_multiple",
        Case(([3, 4, 1, 1, 5, 2, 2, 2], 12), {"group_size": 2, "count_multiple": 2,
                                              "min_count": 3}),
        "groups of 2 stay together; min_count 3 rounded up to count_multiple 2 gives 4",
        _expect([[4, 5], [0, 1], [2, 3], [6, 7]])),
    Pin("length_over_budget", BadCase(Case(([3, 40, 2], 32)), ValueError, "lengths[1] > 32"),
        "a sample longer than the budget cannot be placed; verl let it through"),
    *[Pin(name, BadCase(Case((lengths, 8)), raises, why), why)
      for name, lengths, raises, why in [
          ("zero_length", [3, 0, 2], ValueError, "lengths[1] is 0: a sample has a token"),
          ("no_lengths", [], ValueError, "no samples"),
          ("lengths_not_a_sequence", 5, TypeError, "lengths is an int"),
          ("lengths_2d_tensor", torch.ones(2, 1, dtype=torch.int64), ValueError,
           "a 2-D lengths tensor"),
          ("float_lengths_tensor", torch.tensor([1.0, 2.0]), TypeError, "a float tensor"),
          ("zero_before_float", [0, 1.0, 2], ValueError,
           "lengths[0] = 0 is named before the float at 1 (the first fault wins)"),
      ]],
    Pin("group_over_budget", BadCase(Case(([5, 5, 1, 1], 9), {"group_size": 2}), ValueError,
                                     "group 0 holds 10 > 9 tokens"),
        "a group is placed whole: one over the budget cannot be, though each sample fits"),
]

# --------------------------------------------------------------------------- restore_order


@st.composite
def restore_cases(draw) -> Case:
    """Rows tagged with their original index (row i = [i, -i, 7i]), permuted into micro-batches."""
    n = draw(st.integers(0, 10))
    order = draw(st.permutations(list(range(n))))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    bounds = [0, *cuts, n]
    batches = [list(order[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a] or [[]]
    rows = torch.tensor([[i, -i, 7 * i] for i in range(n)], dtype=torch.int64).reshape(n, 3)
    parts = [rows[torch.tensor(b, dtype=torch.int64)] for b in batches]
    shape = draw(st.sampled_from(["list", "tensor", "tensordict"]))
    if shape == "tensor":
        return Case((torch.cat(parts), batches))
    if shape == "tensordict":
        parts = [TensorDict({"row": p, "score": p[:, 0].float()}, batch_size=[len(p)])
                 for p in parts]
    return Case((parts, batches))


@st.composite
def bad_restore_cases(draw) -> BadCase:
    kind = draw(st.sampled_from(["rows", "duplicate", "count", "kind", "batches_type",
                                 "batch_type", "index_type", "outputs_0d", "outputs_empty",
                                 "outputs_type"]))
    if kind == "outputs_0d":
        return BadCase(Case((torch.tensor(1), [[0]])), ValueError, "a 0-d output")
    if kind == "outputs_empty":
        return BadCase(Case(([], [])), ValueError, "no outputs, no micro-batches")
    if kind == "outputs_type":
        return BadCase(Case((5, [[0]])), TypeError, "outputs is an int")
    rows = torch.arange(6).reshape(3, 2)
    if kind == "batches_type":
        return BadCase(Case((rows, draw(st.sampled_from([3, "012"])))), TypeError,
                       "micro_batches is not a list of lists")
    if kind == "batch_type":
        return BadCase(Case((rows, [[0, 1], draw(st.sampled_from([2, "2"]))])), TypeError,
                       "micro_batches[1] is not a list")
    if kind == "index_type":
        return BadCase(Case((rows, [[0, 1], [draw(st.sampled_from([2.0, True, None]))]])),
                       TypeError, "micro_batches[1] holds a non-int")
    if kind == "rows":
        return BadCase(Case((rows, [[0, 1]])), ValueError, "3 rows for 2 indices")
    if kind == "duplicate":
        return BadCase(Case((rows, [[0, 1], [1]])), ValueError, "index 1 twice")
    if kind == "count":
        return BadCase(Case(([rows], [[0], [1, 2]])), ValueError, "1 output for 2 micro-batches")
    return BadCase(Case(([rows.tolist()], [[0, 1, 2]])), TypeError, "a list, not a tensor")


def _rows_of(output) -> torch.Tensor:
    return output.get("row") if isinstance(output, TensorDict) else output


def prop_inverse(case: Case, output) -> None:
    """restore ∘ split = identity: output row i is the row tagged i."""
    n = sum(len(b) for b in case.args[1])
    want = torch.tensor([[i, -i, 7 * i] for i in range(n)], dtype=torch.int64).reshape(n, 3)
    _assert(torch.equal(_rows_of(output), want), f"rows not restored: {_rows_of(output).tolist()}")


def _restore_on(case: Case, device: str) -> Case:
    outputs, batches = case.args
    moved = [o.to(device) for o in outputs] if isinstance(outputs, list) else outputs.to(device)
    return Case((moved, batches), case.kwargs)


# --------------------------------------------------------------------------- sequence parallel


@st.composite
def ulysses_cases(draw) -> Case:
    sp = draw(st.sampled_from([1, 2, 3, 4, 8, 16]))
    length = draw(st.one_of(st.integers(0, 200), st.integers(0, 8).map(lambda q: q * sp)))
    return Case((length, sp))


@st.composite
def bad_ulysses_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on (8, 4), or on a call `valid` draws."""
    kind = draw(st.sampled_from(["negative", "sp_zero", "float"]))
    length, sp = draw(valid).args if valid is not None else (8, 4)
    if kind == "negative":
        return BadCase(Case((-1, sp)), ValueError, "length < 0")
    if kind == "sp_zero":
        return BadCase(Case((length, draw(st.integers(-2, 0)))), ValueError, "sp_size < 1")
    return BadCase(Case((float(length), sp)), TypeError, "length not an int")


def prop_pad_range(case: Case, pad) -> None:
    """0 <= pad < sp_size and (length + pad) % sp_size == 0."""
    length, sp = case.args
    _assert(type(pad) is int and 0 <= pad < sp and (length + pad) % sp == 0,
            f"pad {pad!r} for length {length}, sp_size {sp}")


def packed_row(lengths: list[int], tokens: list[int], tail: int = 0) -> TensorDict:
    """A packed row as `varlen.pack_varlen` lays it out (tail pad `tail` as its own segment)."""
    positions = [p for n in lengths for p in range(n)] + list(range(tail))
    bounds = [0]
    for n in lengths + ([tail] if tail else []):
        bounds.append(bounds[-1] + n)
    width = len(positions)
    td = TensorDict({
        "input_ids": torch.tensor(tokens + [0] * tail, dtype=torch.int64).reshape(1, width),
        "position_ids": torch.tensor(positions, dtype=torch.int64).reshape(1, width),
        "cu_seqlens": torch.tensor(bounds, dtype=torch.int32),
        "sample_lengths": torch.tensor(lengths, dtype=torch.int64),
    }, batch_size=[])
    td.set_non_tensor("max_seqlen", max(lengths + [tail]))
    return td


@st.composite
def sequence_parallel_cases(draw) -> Case:
    lengths = draw(st.lists(st.integers(1, 9), min_size=1, max_size=5))
    tokens = draw(st.lists(hs.token_ids(), min_size=sum(lengths), max_size=sum(lengths)))
    tail = draw(st.sampled_from([0, 0, 1, 3]))
    sp = draw(st.sampled_from([1, 2, 3, 4, 8, 16]))
    packed = packed_row(lengths, tokens, tail)
    drop = draw(st.sampled_from([(), (), ("cu_seqlens",), ("max_seqlen",)]))  # both optional
    return Case((packed.exclude(*drop) if drop else packed, sp))


@st.composite
def bad_sequence_parallel_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on a packed row of [3, 2] tokens with sp_size 4, or on a call `valid` draws
    (the defect on a copy of its row)."""
    kind = draw(st.sampled_from(["sp_zero", "missing", "per_token", "not_td", "cu_end",
                                 "ids_1d", "shapes_differ"]))
    if valid is not None:
        good = draw(valid)
        original, sp = good.args
        packed = original.clone()
        width = packed["input_ids"].shape[1]
    else:
        original, sp, width = None, 4, 5
        packed = packed_row([3, 2], [1, 2, 3, 4, 5])
    if kind == "ids_1d":
        packed.set("input_ids", packed["input_ids"][0])
        return BadCase(Case((packed, sp)), ValueError, "input_ids is (N,), not (1, N)")
    if kind == "shapes_differ":
        packed.set("position_ids", torch.zeros(1, width + 1, dtype=torch.int64))
        return BadCase(Case((packed, sp)), ValueError, "position_ids wider than input_ids")
    if kind == "sp_zero":
        return BadCase(Case((original if original is not None else packed, 0)), ValueError,
                       "sp_size < 1")
    if kind == "missing":
        return BadCase(Case((packed.exclude("position_ids"), sp)), ValueError, "no position_ids")
    if kind == "per_token":
        packed.set("loss_mask", torch.ones(1, width))
        return BadCase(Case((packed, sp)), ValueError, "a per-token field it cannot pad")
    if kind == "cu_end":
        packed.set("cu_seqlens", torch.tensor([0, width - 2], dtype=torch.int32))
        return BadCase(Case((packed, sp)), ValueError, "cu_seqlens does not end at N")
    return BadCase(Case(({"input_ids": [[1]]}, sp)), TypeError, "not a TensorDict")


def _sp_facts(case: Case, out) -> tuple[int, int, int]:
    packed, sp = case.args
    before = packed["input_ids"].shape[1]
    return before, out["input_ids"].shape[1], sp


def prop_length_multiple(case: Case, out) -> None:
    """N' is a multiple of sp_size, N <= N' < N + sp_size; every tensor keeps its dtype."""
    before, after, sp = _sp_facts(case, out)
    _assert(after % sp == 0 and before <= after < before + sp,
            f"padded length {after} for N={before}, sp_size {sp}")
    for key in ("input_ids", "position_ids", "cu_seqlens"):
        if key in case.args[0].keys():
            _assert(out[key].dtype == case.args[0][key].dtype, f"{key} changed dtype")


def prop_pad_segment(case: Case, out) -> None:
    """The pad holds token 0 and positions 0..pad-1: its own segment, never continuing a sample."""
    before, after, _ = _sp_facts(case, out)
    pad = after - before
    _assert(out["input_ids"][0, before:].tolist() == [0] * pad, "pad tokens are not 0")
    _assert(out["position_ids"][0, before:].tolist() == list(range(pad)),
            f"pad positions {out['position_ids'][0, before:].tolist()} != 0..{pad - 1}")


def prop_segments(case: Case, out) -> None:
    """cu_seqlens gains the boundary N' only when pad > 0 (strictly increasing, no zero-length
    segment); max_seqlen covers the pad segment; other fields pass through."""
    packed = case.args[0]
    before, after, _ = _sp_facts(case, out)
    for key in ("cu_seqlens", "max_seqlen"):  # optional: absent entries stay absent
        _assert((key in out.keys()) == (key in packed.keys()), f"{key} added or dropped")
    if "cu_seqlens" in packed.keys():
        cu = out["cu_seqlens"].tolist()
        want = packed["cu_seqlens"].tolist() + ([after] if after > before else [])
        _assert(cu == want, f"cu_seqlens {cu} != {want}")
        _assert(all(a < b for a, b in zip(cu, cu[1:])), f"cu_seqlens {cu} not strictly increasing")
    if "max_seqlen" in packed.keys():
        want_max = max(packed.get_non_tensor("max_seqlen"), after - before)
        _assert(out.get_non_tensor("max_seqlen") == want_max,
                f"max_seqlen {out.get_non_tensor('max_seqlen')} != {want_max}")
    _assert(torch.equal(out["sample_lengths"], packed["sample_lengths"]),
            "sample_lengths changed")


def prop_chunk_roundtrip(case: Case, out) -> None:
    """Slice into sp_size equal chunks, concatenate, drop the pad: the original row exactly."""
    packed, sp = case.args
    before, *_ = _sp_facts(case, out)
    for key in ("input_ids", "position_ids"):
        chunks = torch.chunk(out[key], sp, dim=1) if out[key].shape[1] else (out[key],)
        sizes = {c.shape[1] for c in chunks}
        _assert(len(sizes) == 1, f"{key}: chunks of unequal sizes {sizes}")
        joined = torch.cat(chunks, dim=1)[:, :before]
        _assert(torch.equal(joined, packed[key]), f"{key}: the original row is not a prefix")


SP_PINS = [
    Pin("divisible_needs_no_pad", Case((packed_row([3, 5], list(range(1, 9))), 4)),
        "N % sp == 0: no pad and no duplicate cu_seqlens boundary (a zero-length segment)",
        lambda case, out: _assert(out["cu_seqlens"].tolist() == [0, 3, 8], "cu_seqlens changed")),
    Pin("pad_longer_than_samples", Case((packed_row([1, 1], [5, 6]), 8)),
        "the pad segment (6) is longer than every sample: max_seqlen grows",
        lambda case, out: _assert(out.get_non_tensor("max_seqlen") == 6, "max_seqlen != 6")),
]


def _packed_on(case: Case, device: str) -> Case:
    return Case((case.args[0].to(device), *case.args[1:]), case.kwargs)


# --------------------------------------------------------------------------- records

_PARTITION_FORMS = {"lists": lambda c: c, "tensor": _values_as_tensor}

KARMARKAR_KARP = register(OpInfo(
    op="balance",
    function="karmarkar_karp",
    valid=partition_cases(),
    invalid=hs.one_or_two_defects(
        bad_partition_cases, partition_cases(), _reference.karmarkar_karp),
    compare=assert_identical,
    properties=[
        Property.of(prop_partition),
        Property.of(prop_equal_size),
        Property.of(prop_largest_sum_bound),
        Property.of(prop_spread_bound),
        Property.of(prop_descending),
    ],
    pins=KK_PINS,
    forms=_PARTITION_FORMS,
    example=Case((ONE_TO_EIGHT, 2)),
    doc="largest differencing method with the spec's exact tie-breaking",
))

BALANCED_PARTITIONS = register(OpInfo(
    op="balance",
    function="balanced_partitions",
    valid=partition_cases(),
    invalid=hs.one_or_two_defects(
        bad_partition_cases, partition_cases(), _reference.balanced_partitions),
    compare=assert_identical,
    properties=[
        Property.of(prop_partition),
        Property.of(prop_equal_size),
        Property.of(prop_sorted_indices),
        Property.of(prop_partitions_descending, name="descending"),
    ],
    pins=PARTITION_PINS,
    forms=_PARTITION_FORMS,
    example=GREEDY_ZEROS,
    doc="karmarkar_karp with sorted, non-empty partitions",
))

MICRO_BATCHES = register(OpInfo(
    op="balance",
    function="micro_batches",
    valid=micro_batch_cases(),
    invalid=hs.one_or_two_defects(
        bad_micro_batch_cases, micro_batch_cases(), _reference.micro_batches),
    compare=assert_identical,
    properties=[
        Property.of(prop_budget),
        Property.of(prop_cover),
        Property.of(prop_groups),
        Property.of(prop_ascending),
        Property.of(prop_count),
        Property.of(prop_composition),
    ],
    pins=MICRO_PINS,
    forms={"lists": lambda c: c, "tensor": _lengths_as_tensor, "numpy_ints": _lengths_as_numpy},
    paths=Paths(kernel=("numba:sft._first_fit",)),  # the groups' first-fit, compiled
    example=VERL_BUDGET,
    targets=lambda case: {"count bound width": float(count_bounds(case)[1]
                                                     - count_bounds(case)[0])},
    doc="token-budget micro-batches: strict budget, groups kept, balanced sums",
))

RESTORE_ORDER = register(OpInfo(
    op="balance",
    function="restore_order",
    valid=restore_cases(),
    invalid=bad_restore_cases(),
    compare=assert_identical,
    properties=[Property.of(prop_inverse)],
    devices=("cpu", "cuda"),
    to_device=_restore_on,
    doc="undo the micro-batch permutation",
))

ULYSSES_PAD = register(OpInfo(
    op="balance",
    function="ulysses_pad",
    valid=ulysses_cases(),
    invalid=hs.one_or_two_defects(bad_ulysses_cases, ulysses_cases(), _reference.ulysses_pad),
    compare=assert_identical,
    properties=[Property.of(prop_pad_range)],
    pins=[Pin("divisible_length", Case((8, 4)), "N % sp == 0 needs no pad (not sp of them)",
              _expect(0))],
    doc="pad tokens that make a packed length a multiple of sp_size",
))

PAD_FOR_SEQUENCE_PARALLEL = register(OpInfo(
    op="balance",
    function="pad_for_sequence_parallel",
    valid=sequence_parallel_cases(),
    invalid=hs.one_or_two_defects(
        bad_sequence_parallel_cases, sequence_parallel_cases(), _reference.pad_for_sequence_parallel),
    compare=assert_identical,
    properties=[
        Property.of(prop_length_multiple),
        Property.of(prop_pad_segment),
        Property.of(prop_segments),
        Property.of(prop_chunk_roundtrip),
    ],
    pins=SP_PINS,
    devices=("cpu", "cuda"),
    to_device=_packed_on,
    example=Case((packed_row([3, 2], [11, 12, 13, 21, 22]), 4)),
    doc="pad a packed row to a multiple of the Ulysses sequence-parallel size",
))

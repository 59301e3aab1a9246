"""`balance` beyond the generic registry checks: the spec's literal examples, scale (the impl's
fast representation against the reference on thousands of values), error messages, the
micro-batch count bound, and restoring order with TensorDicts."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import batchproof.impl.balance as impl
import batchproof.reference.balance as ref
from batchproof.ops.balance import count_bounds, packed_row
from batchproof.registry import Case

SPEC_EXAMPLES = [
    ((list(range(1, 9)), 2, True), [[7, 4, 2, 1], [6, 5, 3, 0]]),
    ((list(range(1, 9)), 2, False), [[7, 5, 2, 0], [1, 6, 4, 3]]),
    (([10, 1, 1], 2, False), [[0], [2, 1]]),
    (([100, 1, 1, 1, 1, 1], 2, True), [[0, 3, 1], [5, 4, 2]]),
]


@pytest.mark.parametrize("module", [ref, impl], ids=["reference", "impl"])
@pytest.mark.parametrize("args, expected", SPEC_EXAMPLES)
def test_karmarkar_karp_spec_examples(module, args, expected) -> None:
    values, k, equal = args
    assert module.karmarkar_karp(values, k, equal_size=equal) == expected


@pytest.mark.parametrize("seed", range(4))
def test_karmarkar_karp_identical_at_scale(seed: int) -> None:
    """The impl's flat-tuple/linked-list representation gives the same lists on large inputs,
    heavy in ties (values from a small range) and zeros."""
    rng = random.Random(seed)
    n, k = rng.choice([(600, 8), (512, 64), (300, 300)])
    values = [rng.choice([0, rng.randint(1, 6), rng.randint(50, 4000)]) for _ in range(n)]
    for equal in (False, n % k == 0):
        assert impl.karmarkar_karp(values, k, equal_size=equal) == ref.karmarkar_karp(
            values, k, equal_size=equal)


def test_micro_batches_identical_at_scale() -> None:
    """Hundreds of samples: tight budgets (several balanced attempts before one fits), groups,
    count constraints."""
    rng = random.Random(7)
    lengths = [rng.randint(50, 2000) for _ in range(256)]
    for budget, kwargs in ((2500, {}), (3000, {}), (9000, {"group_size": 4}),
                           (8192, {"count_multiple": 4, "min_count": 8})):
        assert impl.micro_batches(lengths, budget, **kwargs) == ref.micro_batches(
            lengths, budget, **kwargs)


@pytest.mark.parametrize("module", [ref, impl], ids=["reference", "impl"])
def test_strict_budget_where_verl_overflows(module) -> None:
    """verl: [14, 2, 9, 17, 16] with max_token_len 29 → 2 micro-batches of 30 and 28 tokens."""
    lengths = [14, 2, 9, 17, 16]
    verl_like = module.balanced_partitions(lengths, 2)
    assert sorted(sum(lengths[i] for i in p) for p in verl_like) == [28, 30]
    batches = module.micro_batches(lengths, 29)
    assert batches == [[1, 2, 3], [4], [0]]
    assert max(sum(lengths[i] for i in b) for b in batches) <= 29


def test_micro_batch_count_within_documented_bound() -> None:
    """ceil(total/max) <= count <= ceil(2 total/max) on many random batches (first-fit leaves at
    most one micro-batch at most half full)."""
    rng = random.Random(0)
    for _ in range(200):
        lengths = [rng.randint(1, 100) for _ in range(rng.randint(1, 60))]
        budget = max(lengths) + rng.randint(0, 300)
        lower, upper = count_bounds(Case((lengths, budget)))
        assert lower <= len(impl.micro_batches(lengths, budget)) <= upper


@pytest.mark.parametrize("module", [ref, impl], ids=["reference", "impl"])
@pytest.mark.parametrize("call, words", [
    (lambda m: m.karmarkar_karp([1, 2], 3), ["k=3", "2"]),
    (lambda m: m.karmarkar_karp([1, 2, 3], 2, equal_size=True), ["divisible", "k=2"]),
    (lambda m: m.karmarkar_karp([1, -2], 1), ["values[1]"]),
    (lambda m: m.micro_batches([3, 40, 2], 32), ["lengths[1]=40", "max_tokens=32"]),
    (lambda m: m.micro_batches([5, 5, 1, 1], 9, group_size=2), ["group 0", "10"]),
    (lambda m: m.micro_batches([1, 2, 3], 9, group_size=2), ["group_size=2"]),
    (lambda m: m.micro_batches([1, 2], 9, min_count=3), ["3 bins", "2"]),
    (lambda m: m.ulysses_pad(5, 0), ["sp_size"]),
])
def test_bad_input_names_the_culprit(module, call, words) -> None:
    with pytest.raises(ValueError) as info:
        call(module)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("module", [ref, impl], ids=["reference", "impl"])
def test_restore_order_tensordicts(module) -> None:
    batches = [[2, 0], [1]]
    parts = [TensorDict({"x": torch.tensor([[2.0], [0.0]])}, batch_size=[2]),
             TensorDict({"x": torch.tensor([[1.0]])}, batch_size=[1])]
    out = module.restore_order(parts, batches)
    assert out["x"].flatten().tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("module", [ref, impl], ids=["reference", "impl"])
def test_pad_for_sequence_parallel_no_pad_is_identity(module) -> None:
    packed = packed_row([3, 5], list(range(8)))
    assert module.pad_for_sequence_parallel(packed, 4) is packed
    padded = module.pad_for_sequence_parallel(packed, 3)
    assert padded["input_ids"].shape == (1, 9) and padded["cu_seqlens"].tolist() == [0, 3, 8, 9]
    assert packed["input_ids"].shape == (1, 8)  # input untouched


@pytest.mark.gpu
def test_pad_for_sequence_parallel_on_cuda() -> None:
    packed = packed_row([3, 2], [1, 2, 3, 4, 5]).to("cuda")
    out = impl.pad_for_sequence_parallel(packed, 4)
    assert out["input_ids"].device.type == "cuda" and out["cu_seqlens"].device.type == "cuda"
    assert out["position_ids"].cpu().tolist() == [[0, 1, 2, 0, 1, 0, 1, 2]]


# --------------------------------------------------------------------------- mutation-driven pins


def _raised(call) -> BaseException | None:
    """The exception `call()` raises, or None."""
    try:
        call()
    except Exception as error:  # any exception is the observation
        return error
    return None


def _same_error(call) -> tuple[BaseException, BaseException]:
    """`call(impl)` and `call(ref)` both raise, the same exception type; returns (impl, ref)."""
    mine, theirs = _raised(lambda: call(impl)), _raised(lambda: call(ref))
    assert theirs is not None and mine is not None, (mine, theirs)
    assert type(mine) is type(theirs), (mine, theirs)
    return mine, theirs


def test_karmarkar_karp_ties_in_spread_and_sum_break_by_count() -> None:
    """Two states with the same spread and the same largest sum: the one whose largest set holds
    more items is merged first (the set order's count), not the one with the later first index."""
    values = [1, 2, 1, 2, 2]
    assert impl.karmarkar_karp(values, 2) == ref.karmarkar_karp(values, 2) == [[2, 0, 3], [1, 4]]


def test_karmarkar_karp_equal_size_sums_exact_for_tiny_floats() -> None:
    """equal_size: a set's sum is its values' sum, nothing added (1 + 1e-20 == 1 would tie them)."""
    values = [2e-20, 1e-20]
    assert impl.karmarkar_karp(values, 2, equal_size=True) == [[0], [1]]
    assert ref.karmarkar_karp(values, 2, equal_size=True) == [[0], [1]]


def test_values_mixed_list_keeps_ints_exact() -> None:
    """A list mixing ints and floats keeps the ints as ints: 2**53 + 1 stays above 2**53 (as
    floats they tie), and an int culprit is printed as an int."""
    values = [2**53 + 1, 2**53, 0.5]
    assert impl.karmarkar_karp(values, 3) == ref.karmarkar_karp(values, 3) == [[0], [1], [2]]
    mine, theirs = _same_error(lambda m: m.karmarkar_karp([0.5, -1], 1))
    assert str(mine) == str(theirs) == "values[1]=-1 is negative"


def test_values_float_tensor_accepted() -> None:
    """A 1-D float tensor of finite values >= 0 (zero and fractions included) is accepted and
    partitioned as its list."""
    values = torch.tensor([0.0, 0.5, 2.5, 1.0, 0.25])
    assert impl.karmarkar_karp(values, 2) == ref.karmarkar_karp(values, 2)
    assert impl.karmarkar_karp(values, 2) == impl.karmarkar_karp(values.tolist(), 2)


@pytest.mark.parametrize("values", [
    torch.tensor([1, -2, 3, -4]),
    torch.tensor([-1]),
    torch.tensor([1.0, float("nan"), -1.0]),
    torch.tensor([2.0, -0.5, float("inf")]),
    torch.tensor([0.0, float("-inf")]),
], ids=["int-negatives", "int-single", "float-nan", "float-negative", "float-neg-inf"])
def test_values_bad_tensor_names_the_culprit(values: torch.Tensor) -> None:
    """A bad value in a tensor: ValueError naming the first bad index and its value, as the
    reference (`values[i]=v is ...`)."""
    mine, theirs = _same_error(lambda m: m.karmarkar_karp(values, 1))
    assert isinstance(mine, ValueError)
    assert str(mine).split(" is ")[0] == str(theirs).split(" is ")[0]


def test_values_bad_tensor_message_matches_reference() -> None:
    """impl raises the reference's exact message for a bad value in a tensor."""
    for values in (torch.tensor([1, -2]), torch.tensor([1.0, float("nan")])):
        mine, theirs = _same_error(lambda m, values=values: m.karmarkar_karp(values, 1))
        assert str(mine) == str(theirs)


def test_values_list_error_names_first_negative() -> None:
    """[1, -1, -5]: the reference names values[1]=-1, the first negative value."""
    mine, theirs = _same_error(lambda m: m.karmarkar_karp([1, -1, -5], 1))
    assert str(mine) == str(theirs) == "values[1]=-1 is negative"


@pytest.mark.parametrize("values", [
    torch.zeros(2, 2), torch.tensor(3.0), torch.tensor([True, False]),
    torch.tensor([1 + 1j]), [1.0, float("inf")], [0.5, float("nan")], [2.0, -1.0], 5, "12",
    [1, True], [1, "2"],
], ids=["2d", "0d", "bool", "complex", "inf", "nan", "neg-float", "int", "str", "bool-item",
        "str-item"])
def test_values_error_messages_match_reference(values) -> None:
    """Shape, dtype, non-finite floats in a list, non-sequences and non-numbers: the reference's
    exception type and exact message."""
    mine, theirs = _same_error(lambda m: m.karmarkar_karp(values, 1))
    assert str(mine) == str(theirs)


@pytest.mark.parametrize("lengths", [
    torch.ones(2, 2, dtype=torch.int64), torch.tensor([True, True]), torch.tensor([1.0, 2.0]),
    torch.tensor([1 + 1j]), 5, "12", [1, 2.5], [2.5, 3.0], [4.0], [1, 20.5], [20.5], [0.5], [],
    [1, True], [1, 0, 3],
], ids=["2d", "bool", "float", "complex", "int", "str", "mixed-float", "floats", "float-int",
        "mixed-over-budget", "float-over-budget", "float-below-one", "empty", "bool-item", "zero"])
def test_lengths_error_messages_match_reference(lengths) -> None:
    """Every invalid `lengths` form: the reference's exception type and exact message (a float
    length is a TypeError before any budget check)."""
    mine, theirs = _same_error(lambda m: m.micro_batches(lengths, 10))
    assert str(mine) == str(theirs)


def test_lengths_integral_non_int_values_accepted() -> None:
    """numpy integers (Integral, not `int`) are valid lengths, read as ints."""
    lengths = [np.int64(3), np.int64(7), 4]
    assert impl.micro_batches(lengths, 8) == ref.micro_batches(lengths, 8) == [[1], [0, 2]]


def test_lengths_error_names_first_short_length() -> None:
    """[3, 0, -1]: the reference names lengths[1]=0, the first length below 1."""
    mine, theirs = _same_error(lambda m: m.micro_batches([3, 0, -1], 10))
    assert str(mine) == str(theirs)


@pytest.mark.parametrize("kwargs", [
    {"group_size": 0}, {"group_size": 1.5}, {"count_multiple": 0}, {"count_multiple": "2"},
    {"min_count": 0}, {"max_tokens": 0},
])
def test_micro_batches_option_errors_name_the_option(kwargs) -> None:
    """A bad option: the reference's exception type and exact message, naming the option."""
    options = {"max_tokens": 10, **kwargs}
    mine, theirs = _same_error(lambda m: m.micro_batches([1, 2], **options))
    assert str(mine) == str(theirs) and next(iter(kwargs)) in str(mine)


@pytest.mark.parametrize("batches", [
    5, None, [5], [[0], 7], [[0, 1.5]], [[0], [True]], [[1, -1]], [[0, 2]], [[0, 0]], [[1], [1]],
], ids=["int", "none", "int-batch", "int-second-batch", "float-index", "bool-index", "negative",
        "too-large", "twice", "twice-across"])
def test_restore_order_bad_micro_batches_match_reference(batches) -> None:
    """Malformed micro-batch lists: the reference's exception type and exact message."""
    mine, theirs = _same_error(lambda m: m.restore_order(torch.arange(2), batches))
    assert str(mine) == str(theirs)


@pytest.mark.parametrize("module", [ref, impl], ids=["reference", "impl"])
def test_pad_for_sequence_parallel_keeps_dtypes_and_shares_other_fields(module) -> None:
    """The pad keeps each field's dtype (int32 positions stay int32), and the fields it does not
    pad are the input's own tensors (a shallow clone)."""
    packed = packed_row([3, 2], [1, 2, 3, 4, 5])
    packed.set("input_ids", packed["input_ids"].to(torch.int32))
    packed.set("position_ids", packed["position_ids"].to(torch.int32))
    out = module.pad_for_sequence_parallel(packed, 4)
    assert out["input_ids"].dtype == out["position_ids"].dtype == torch.int32
    assert out["cu_seqlens"].dtype == torch.int32
    assert out["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2]]
    assert out.get("sample_lengths") is packed.get("sample_lengths")


def test_micro_batches_names_first_length_over_budget() -> None:
    """[40, 50] with max_tokens 32: the reference names lengths[0]=40, the first over budget."""
    mine, theirs = _same_error(lambda m: m.micro_batches([40, 50], 32))
    assert str(mine) == str(theirs) == "lengths[0]=40 exceeds max_tokens=32"


def test_micro_batches_names_first_group_over_budget() -> None:
    """Groups of 39 and 51 tokens, max_tokens 35: the reference names group 0, the first over."""
    mine, theirs = _same_error(lambda m: m.micro_batches([24, 15, 25, 26], 35, group_size=2))
    assert str(mine) == str(theirs)
    assert str(theirs).startswith("group 0 (samples 0..1) holds 39 tokens")


def test_micro_batches_a_length_or_group_at_the_budget_fits() -> None:
    """Exactly max_tokens fits: the error names the later length / group that exceeds it."""
    mine, theirs = _same_error(lambda m: m.micro_batches([32, 40], 32))
    assert str(mine) == str(theirs) == "lengths[1]=40 exceeds max_tokens=32"
    mine, theirs = _same_error(lambda m: m.micro_batches([20, 15, 25, 26], 35, group_size=2))
    assert str(mine) == str(theirs)
    assert str(theirs).startswith("group 1 (samples 2..3) holds 51 tokens")


# --------------------------------------------------------------------------- two defects


def _checks_first(fn, position: int, name: str):
    """`fn` checking its positional argument `position` (a positive int, `name`) before the
    others: the reference's exception on every one-defect input."""
    def call(*args, **kwargs):
        ref._positive_int(args[position], name)
        return fn(*args, **kwargs)
    return call


@pytest.mark.parametrize("name, bad, candidate", [
    ("balance.karmarkar_karp", "bad_partition_cases", _checks_first(ref.karmarkar_karp, 1, "k")),
    ("balance.balanced_partitions", "bad_partition_cases",
     _checks_first(ref.balanced_partitions, 1, "k")),
    ("balance.micro_batches", "bad_micro_batch_cases",
     _checks_first(ref.micro_batches, 1, "max_tokens")),
    ("balance.ulysses_pad", "bad_ulysses_cases", _checks_first(ref.ulysses_pad, 1, "sp_size")),
    ("balance.pad_for_sequence_parallel", "bad_sequence_parallel_cases",
     _checks_first(ref.pad_for_sequence_parallel, 1, "sp_size")),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) else "")
def test_invalid_inputs_with_two_defects_follow_the_references_first_error(
        name, bad, candidate) -> None:
    """Each record's invalid inputs include two defects on different arguments (issue 32): a
    validation order other than the reference's passes every one-defect input and fails."""
    from two_defects import assert_first_error_decides

    from batchproof.ops import balance as records

    assert_first_error_decides(name, getattr(records, bad)(), candidate)

"""`balance` beyond the generic registry checks: the spec's literal examples, scale (the impl's
fast representation against the reference on thousands of values), error messages, the
micro-batch count bound, and restoring order with TensorDicts."""

from __future__ import annotations

import random

import pytest
import torch
from tensordict import TensorDict

import impl.balance as impl
import reference.balance as ref
from harness.ops.balance import count_bounds, packed_row
from harness.registry import Case

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

"""`sft`-specific tests beyond the generic registry checks (tests/test_registry.py, test_zoo.py):
error messages identical in reference and impl and naming the culprit, the list fast paths'
fallbacks, FFD at scale, realistic sizes, and list inputs placed on CUDA."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.compare import assert_identical
from harness.ops import sft as records
from impl import sft as impl
from reference import sft as reference


def _ex(ids, num_actions, loss, **extra) -> dict:
    return {"input_ids": list(ids), "num_actions": num_actions, "loss_mask": list(loss), **extra}


def _raised(fn, *args, **kwargs) -> BaseException:
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    return info.value


def _same_error(function: str, *args, **kwargs) -> BaseException:
    """Both implementations raise the same exception type with the same message."""
    expected = _raised(getattr(reference, function), *args, **kwargs)
    actual = _raised(getattr(impl, function), *args, **kwargs)
    assert type(actual) is type(expected), (expected, actual)
    assert str(actual) == str(expected)
    return expected


TWO = [_ex([1, 2, 3], 2, [1, 1]), _ex([4, 5], 1, [1])]
PACK = {"pad_token_id": 0, "capacity": 8}

# (what, function, args, kwargs, exception type, words the message must contain)
NAMED_ERRORS = [
    ("length over capacity", "pack_sft", ([_ex([1] * 9, 1, [1])] + TWO,), PACK, ValueError,
     ["lengths[0]", "9", "capacity 8"]),
    ("fewer sequences than DP shards", "pack_sft", (TWO,), PACK | {"dp_size": 4}, ValueError,
     ["4 bins", "2 sequences"]),
    ("len(loss_mask) != num_actions", "collate_sft", ([TWO[0], _ex([4, 5, 6], 3, [1])],),
     {"pad_token_id": 0}, ValueError, ["examples[1]", "loss_mask", "num_actions"]),
    ("len(loss_mask) != num_actions (packed)", "pack_sft", ([TWO[0], _ex([4, 5, 6], 3, [1])],),
     PACK, ValueError, ["examples[1]", "loss_mask"]),
    ("num_actions > len(input_ids)", "collate_sft", ([TWO[0], _ex([4, 5], 3, [1, 1, 1])],),
     {"pad_token_id": 0}, ValueError, ["examples[1]", "num_actions", "3"]),
    ("num_actions > len(input_ids) (packed)", "pack_sft", ([_ex([4, 5], 3, [1, 1, 1])],), PACK,
     ValueError, ["examples[0]", "num_actions"]),
    ("dp_size < 1", "pack_sft", (TWO,), PACK | {"dp_size": 0}, ValueError, ["dp_size", "0"]),
    ("tp_size < 1", "pack_sft", (TWO,), PACK | {"tp_size": -1}, ValueError, ["tp_size"]),
    ("pp_size < 1", "pack_sft", (TWO,), PACK | {"pp_size": 0}, ValueError, ["pp_size"]),
    ("cp_size < 1", "pack_sft", (TWO,), PACK | {"cp_size": 0}, ValueError, ["cp_size"]),
    ("capacity < 1", "pack_sft", (TWO,), PACK | {"capacity": 0}, ValueError, ["capacity"]),
    ("align tp_size < 1", "align_size", (0, 2), {}, ValueError, ["tp_size"]),
    ("ffd min_bins < 1", "ffd_bins", ([3], 4), {"min_bins": 0}, ValueError, ["min_bins"]),
    ("attention zeros in a packed example", "pack_sft",
     ([TWO[0], _ex([4, 5], 1, [1], attention_mask=[0, 1])],), PACK, ValueError,
     ["examples[1]", "attention_mask"]),
    ("a float token id", "collate_sft", ([TWO[0], _ex([4, 5.0], 1, [1])],),
     {"pad_token_id": 0}, TypeError, ["examples[1]", "input_ids", "float"]),
    ("a token id over int64", "pack_sft", ([TWO[0], _ex([4, 2**63], 1, [1])],), PACK,
     ValueError, ["examples[1]", "input_ids", "int64"]),
    ("a string in a loss mask", "collate_sft", ([TWO[0], _ex([4, 5], 1, ["1"])],),
     {"pad_token_id": 0}, TypeError, ["examples[1]", "loss_mask", "str"]),
    ("a bad value in a loss mask's dropped first entry", "pack_sft",
     ([TWO[0], _ex([4], 1, ["x"])],), PACK, TypeError, ["examples[1]", "loss_mask"]),
    ("an attention value other than 0/1", "collate_sft",
     ([TWO[0], _ex([4, 5], 1, [1], attention_mask=[1, 2])],), {"pad_token_id": 0}, ValueError,
     ["examples[1]", "attention_mask", "0/1"]),
    ("a missing key", "collate_sft", ([TWO[0], {"input_ids": [1], "num_actions": 1}],),
     {"pad_token_id": 0}, ValueError, ["examples[1]", "loss_mask"]),
]


@pytest.mark.parametrize("what, function, args, kwargs, raises, words", NAMED_ERRORS,
                         ids=[e[0] for e in NAMED_ERRORS])
def test_bad_input_names_the_culprit(what, function, args, kwargs, raises, words) -> None:
    error = _same_error(function, *args, **kwargs)
    assert isinstance(error, raises), f"{what}: {error!r}"
    for word in words:
        assert word in str(error), f"{what}: {word!r} not in {str(error)!r}"


def test_value_errors_come_in_reference_order() -> None:
    """A bad value in an early example wins over a later structural-free problem (the impl's
    fast paths defer value checks, then replay the reference's order)."""
    examples = [_ex([1, 2.5], 1, [1]), _ex([1] * 9, 1, [1]), _ex([3], 1, ["x"])]
    error = _same_error("pack_sft", examples, **PACK)
    assert isinstance(error, TypeError) and "examples[0]" in str(error)


@pytest.mark.parametrize("record", ["collate_sft", "pack_sft", "ffd_bins", "align_size"])
def test_error_messages_identical(record: str) -> None:
    """Every drawn bad input: same exception type *and* message in reference and impl."""
    info = getattr(records, record.upper())

    @settings(max_examples=40, deadline=None, database=None, derandomize=True)
    @given(bad=info.invalid)
    def run(bad) -> None:
        error = _same_error(record, *bad.case.args, **dict(bad.case.kwargs))
        assert isinstance(error, bad.raises), (bad, error)

    run()


FALLBACKS = [
    ("loss weights > 255 (array path)", [_ex([1, 2, 3], 2, [300, 1]), _ex([4], 1, [2])]),
    ("negative int loss values", [_ex([1, 2, 3], 3, [-1, 0, 1])]),
    ("float and bool loss values", [_ex([1, 2], 2, [0.5, True]), _ex([4], 1, [False])]),
    ("numpy values", [_ex(np.array([1, 2, 3]).astype(np.int32).tolist(), 1, [np.float32(0.5)]),
                      _ex([np.int64(7), np.int64(8)], 2, [np.int64(1), np.int64(0)])]),
    ("bool and huge token ids", [_ex([True, 2**40, -(2**63)], 2, [1, 1])]),
    ("tuples", [{"input_ids": (1, 2, 3), "num_actions": 2, "loss_mask": (1, 0)}]),
    ("0/1 attention as floats, bools, numpy", [
        _ex([1, 2], 1, [1], attention_mask=[1.0, 0.0]), _ex([3, 4], 1, [1], attention_mask=[True, 1]),
        _ex([5, 6], 1, [1], attention_mask=[np.float32(0), np.int64(1)])]),
    ("all-ones attention as floats", [_ex([1, 2], 1, [1], attention_mask=[1.0, 1.0])]),
]


@pytest.mark.parametrize("what, examples", FALLBACKS, ids=[f[0] for f in FALLBACKS])
def test_list_fallbacks_match_reference(what, examples) -> None:
    assert_identical(reference.collate_sft(examples, pad_token_id=0),
                     impl.collate_sft(examples, pad_token_id=0))
    assert_identical(reference.collate_sft(examples, pad_token_id=0, normalize=True),
                     impl.collate_sft(examples, pad_token_id=0, normalize=True))
    if all(0 not in ex.get("attention_mask", [1]) for ex in examples):
        kwargs = {"pad_token_id": 0, "capacity": 8, "tp_size": 2}
        assert_identical(reference.pack_sft(examples, **kwargs), impl.pack_sft(examples, **kwargs))


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(lengths=st.lists(st.integers(1, 64), min_size=1, max_size=300),
       extra=st.integers(0, 200), min_bins=st.integers(1, 16), multiple=st.integers(1, 8))
def test_ffd_segment_tree_at_scale(lengths, extra, min_bins, multiple) -> None:
    """The O(n log n) first fit gives the reference's bins on hundreds of items."""
    capacity = max(lengths) + extra
    kwargs = {"min_bins": min_bins, "bin_multiple": multiple}
    try:
        expected = reference.ffd_bins(lengths, capacity, **kwargs)
    except ValueError as err:
        assert str(_raised(impl.ffd_bins, lengths, capacity, **kwargs)) == str(err)
        return
    assert impl.ffd_bins(lengths, capacity, **kwargs) == expected


def _realistic(seed: int, n: int = 48, max_len: int = 400) -> list[dict]:
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        s = rng.randint(1, max_len)
        k = rng.choice([s, 1, rng.randint(1, s)])
        examples.append(_ex([rng.randrange(32000) for _ in range(s)], k,
                            [int(rng.random() < 0.9) for _ in range(k)],
                            attention_mask=[1] * s))
    return examples


@pytest.mark.parametrize("seed", range(3))
def test_realistic_sizes(seed: int) -> None:
    examples = _realistic(seed)
    assert_identical(reference.collate_sft(examples, pad_token_id=0, normalize=True),
                     impl.collate_sft(examples, pad_token_id=0, normalize=True))
    kwargs = {"pad_token_id": 0, "capacity": 1024, "dp_size": 4, "tp_size": 2, "cp_size": 2,
              "fp8": seed == 1}
    assert_identical(reference.pack_sft(examples, **kwargs), impl.pack_sft(examples, **kwargs))


def test_spec_alignment_examples() -> None:
    assert [impl.align_size(4, 1), impl.align_size(1, 2), impl.align_size(4, 1, fp8=True),
            impl.align_size(1, 2, fp8=True)] == [4, 4, 16, 32]


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(2))
def test_list_inputs_on_cuda(seed: int) -> None:
    """Lists flattened on the host, laid out on the GPU: same values as the CPU oracle."""
    examples = _realistic(seed)
    kwargs = {"pad_token_id": 0, "capacity": 1024, "dp_size": 2, "cp_size": 2}
    for function, kw in (("collate_sft", {"pad_token_id": 0, "normalize": True}),
                         ("pack_sft", kwargs)):
        out = getattr(impl, function)(examples, device="cuda", **kw)
        assert out["input_ids"].is_cuda and out["loss_mask"].is_cuda
        assert_identical(getattr(reference, function)(examples, **kw), out, allow_device=True)


@pytest.mark.gpu
def test_cuda_tensor_inputs_stay_on_cuda() -> None:
    examples = [{k: torch.as_tensor(v).cuda() if isinstance(v, list) else v
                 for k, v in ex.items()} for ex in _realistic(0, n=16, max_len=64)]
    out = impl.pack_sft(examples, pad_token_id=0, capacity=256, dp_size=2)
    assert out["input_ids"].is_cuda and out["sub_seq_lengths"].is_cuda
    assert out.get_non_tensor("cu_seqlens_padded").is_cuda

"""`sft`-specific tests beyond the generic registry checks (tests/test_registry.py, test_zoo.py):
error messages identical in reference and impl and naming the culprit, the list fast paths'
fallbacks, FFD at scale, realistic sizes, and list inputs placed on CUDA."""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from batchproof.compare import assert_identical
from batchproof.impl import kernels
from batchproof.impl import sft as impl
from batchproof.impl.kernels import sft as sft_kernel
from batchproof.ops import sft as records
from batchproof.ops.sft import _tensor_example, collate_cases, jagged_batch, pack_cases
from batchproof.reference import sft as reference


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


def _use_kernel(patch: pytest.MonkeyPatch, kernel: bool, python_path: str,
                kernel_path: str) -> None:
    """Run the compiled kernel (impl.kernels.sft.<kernel_path>) or the torch / Python path
    (impl.sft.<python_path>); the one not chosen fails if called."""
    if kernel and kernels.numba is None:
        pytest.skip("numba is not installed: the kernel cannot run")
    patch.setattr(kernels, "ENABLED", kernel)
    if kernel:
        patch.setattr(impl, python_path, _no_fallback)
    else:
        patch.setattr(sft_kernel, kernel_path, _no_fallback)


# the two forms the kernels take: per-example float32 tensors, and one jagged batch
KERNEL_FORMS = {
    "tensors": lambda examples: [_tensor_example(ex, loss_dtype=torch.float32)
                                 for ex in examples],
    "jagged": jagged_batch,
}


# function -> (its cases, its torch path (impl.sft), its kernel (impl.kernels.sft))
PATHS = {"collate_sft": (collate_cases(), "_flat_floats", "collate"),
         "pack_sft": (pack_cases(), "_packed_rows", "write_rows")}


@pytest.mark.parametrize("function", PATHS)
@pytest.mark.parametrize("form", KERNEL_FORMS)
@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "torch"])
@given(data=st.data())
def test_kernel_and_torch_paths_equal_the_reference(data, kernel: bool, form: str,
                                                    function: str) -> None:
    """Tensor examples (int64 ids, float32 loss masks) and jagged batches: the compiled CPU
    kernel and the torch composition each give the reference's output, bit for bit."""
    cases, python_path, kernel_path = PATHS[function]
    case = data.draw(cases, label="case")
    expected = getattr(reference, function)(*case.args, **case.kwargs)
    examples = KERNEL_FORMS[form](case.args[0])
    with pytest.MonkeyPatch.context() as patch:
        _use_kernel(patch, kernel, python_path=python_path, kernel_path=kernel_path)
        patch.setattr(impl, "_write_ints", _no_fallback)  # the list writer: never for tensors
        actual = getattr(impl, function)(examples, **case.kwargs)
    assert_identical(expected, actual)


def test_pack_sft_kernel_sums_non_integral_loss_values_exactly() -> None:
    """Weights whose float64 running sum rounds (and a NaN) normalise as the reference's fsum."""
    weights = [[0.1] * 7 + [1e8, -1e8, 0.3], [3e38, 3.0, -3e38], [float("nan"), 0.5]]
    for masks in (weights[:1], weights[1:2], weights):  # [3e38, 3, -3e38]: float64 sums to 0
        examples = [_ex(list(range(1, len(m) + 2)), len(m), m) for m in masks]
        expected = reference.pack_sft(examples, pad_token_id=0, capacity=64)
        tensors = [_tensor_example(ex, loss_dtype=torch.float32) for ex in examples]
        with pytest.MonkeyPatch.context() as patch:
            _use_kernel(patch, True, python_path="_packed_rows", kernel_path="write_rows")
            assert_identical(expected, impl.pack_sft(tensors, pad_token_id=0, capacity=64))


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
    """docs/sft.md's table of align_size (layout, and fp8 per recipe)."""
    assert [impl.align_size(4, 1), impl.align_size(1, 2), impl.align_size(4, 1, fp8=True),
            impl.align_size(1, 2, fp8=True)] == [4, 4, 32, 32]
    table = {(1, 1): (16, 16, 32), (2, 1): (16, 256, 64), (3, 1): (48, 384, 96),
             (4, 1): (32, 512, 128), (8, 1): (64, 1024, 256), (1, 2): (32, 32, 64),
             (2, 2): (32, 512, 128), (4, 2): (64, 1024, 256), (1, 4): (64, 64, 128)}
    for (tp, cp), want in table.items():
        got = tuple(impl.align_size(tp, cp, fp8=True, fp8_recipe=recipe)
                    for recipe in ("tensorwise", "blockwise", "mxfp8"))
        assert got == want, (tp, cp, got)


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


@pytest.mark.gpu
def test_jagged_batches_on_cuda() -> None:
    """A jagged batch on the GPU: the reference's values, on the GPU; a field on another device
    than the others: the reference's "several devices" error (through the rows)."""
    examples = _realistic(1, n=16, max_len=64)
    batch = jagged_batch(examples, device="cuda")
    for function, kw in (("collate_sft", {"pad_token_id": 0, "normalize": True}),
                         ("pack_sft", {"pad_token_id": 0, "capacity": 256, "dp_size": 2})):
        out = getattr(impl, function)(batch, **kw)
        assert out["input_ids"].is_cuda
        assert_identical(getattr(reference, function)(examples, **kw), out, allow_device=True)
        mixed = batch.clone()
        mixed["attention_mask"] = jagged_batch(examples)["attention_mask"]  # on the CPU
        error = _same_error(function, mixed, **kw)
        assert "several devices" in str(error)


# -- contracts pinned by mutation testing (mutmut survivors of impl/sft.py) ---------------------

CPU = torch.device("cpu")


def _no_fallback(*args, **kwargs):
    raise AssertionError("valid input took a slow path")


def _proxy(ex: dict) -> types.MappingProxyType:
    """A mapping that is not a dict: its example goes through the full structure checks."""
    return types.MappingProxyType(ex)


def _same_calls(examples: list, calls: list[tuple[str, dict]]) -> list:
    """The reference's outputs for each (function, kwargs) call, computed outside any patch."""
    return [getattr(reference, function)(examples, **kwargs) for function, kwargs in calls]


FAST_LISTS = [  # plain dicts of lists: n == 1, n == s, tuples, attention lists with zeros
    _ex([5, 6, 7], 1, [1]),
    {"input_ids": (8, 9), "num_actions": 2, "loss_mask": (0, 1), "attention_mask": (1, 1)},
    _ex([-3, 2**63 - 1, -(2**63), 4], 3, [1, 0, 2]),
]
FAST_CALLS = [("collate_sft", {"pad_token_id": 7, "normalize": True, "device": "cpu"}),
              ("collate_sft", {"pad_token_id": -1}),
              ("pack_sft", {"pad_token_id": 0, "capacity": 8, "dp_size": 2}),
              ("pack_sft", {"pad_token_id": 0, "capacity": 6, "tp_size": 2, "cp_size": 2}),
              ("pack_sft", {"pad_token_id": 0, "capacity": 5, "fp8": True})]


def test_plain_lists_take_the_fast_paths() -> None:
    """Dicts of lists on the CPU: no structure re-check, no value replay, ids written in place
    (never flattened), 0/1 loss masks read as bytes with their exact sum handed to the scale,
    0/1 attention lists read as bytes; same outputs as the reference."""
    cases = [(FAST_LISTS, FAST_CALLS),
             (FAST_LISTS + [_ex([1, 2, 3], 2, [1, 1], attention_mask=[0, 1, 1])], FAST_CALLS[:2])]
    scale = impl._scale

    def exact_scale(values: torch.Tensor, total: float | None) -> torch.Tensor:
        assert total is not None, "0/1 list masks lost their free exact sum"
        return scale(values, total)

    for examples, calls in cases:
        expected = _same_calls(examples, calls)
        with pytest.MonkeyPatch.context() as patch:
            for name in ("_check_structure", "_check_values", "_flat_ints", "_packed"):
                patch.setattr(impl, name, _no_fallback)
            patch.setattr(impl, "operator", types.SimpleNamespace(eq=_no_fallback))
            patch.setattr(impl, "_scale", exact_scale)
            for want, (function, kwargs) in zip(expected, calls, strict=True):
                assert_identical(want, getattr(impl, function)(examples, **kwargs))


def test_all_ones_attention_needs_no_values() -> None:
    """collate_sft skips building attention values when every given list mask is all ones."""
    examples = [_ex([1, 2], 1, [1]), _ex([3], 1, [1], attention_mask=[1]),
                {"input_ids": (4, 5), "num_actions": 1, "loss_mask": (1,), "attention_mask": (1, 1)}]
    for subset in (examples[:1], examples):
        batch = impl._parse_examples(subset)
        assert impl._attention_values(batch, CPU) is None


TENSOR_CASES = [  # (examples, every id row a tensor: nothing goes through struct packing)
    ([{"input_ids": torch.tensor([1, 2, 3]), "num_actions": 2,
       "loss_mask": torch.tensor([0.5, 1.0]), "attention_mask": torch.tensor([0, 1, 1])},
      {"input_ids": torch.tensor([4, 5], dtype=torch.int32), "num_actions": 1,
       "loss_mask": torch.tensor([1], dtype=torch.uint8),
       "attention_mask": torch.tensor([True, True])}], True),
    ([{"input_ids": torch.tensor([1, 2, 3]), "num_actions": 2, "loss_mask": [1, 0]},
      {"input_ids": torch.tensor([4, 5]), "num_actions": 1, "loss_mask": (1,)}], True),
    ([_ex([1, 2, 3], 2, [1, 1]),
      {"input_ids": [4, 5], "num_actions": 1, "loss_mask": torch.tensor([0.25])}], False),
    ([_ex([1, 2, 3], 2, [1, 1]),
      _ex([4, 5], 1, [1], attention_mask=torch.tensor([1.0, 1.0]))], False),
]


@pytest.mark.parametrize("examples, tensor_ids", TENSOR_CASES,
                         ids=["all_tensors", "tensor_ids", "tensor_loss", "tensor_attention"])
def test_tensor_inputs_skip_the_list_writers(examples: list, tensor_ids: bool) -> None:
    """An example holding any tensor makes the batch a tensor batch: no in-place struct writes,
    no value replay; with tensor ids, no struct packing at all; same outputs as the reference."""
    pack_examples = [{k: v for k, v in ex.items() if k != "attention_mask"} for ex in examples]
    if any("attention_mask" in ex for ex in examples):  # all-ones tensor masks pack
        pack_examples[-1]["attention_mask"] = torch.ones(len(examples[-1]["input_ids"]))
    runs = [(examples, "collate_sft", {"pad_token_id": 0}),
            (examples, "collate_sft", {"pad_token_id": 0, "normalize": True}),
            (pack_examples, "pack_sft", {"pad_token_id": 9, "capacity": 4, "tp_size": 2})]
    expected = [getattr(reference, function)(exs, **kw) for exs, function, kw in runs]
    with pytest.MonkeyPatch.context() as patch:
        for name in ("_check_structure", "_check_values", "_write_ints"):
            patch.setattr(impl, name, _no_fallback)
        if tensor_ids:
            patch.setattr(impl, "_packed", _no_fallback)
        for want, (exs, function, kw) in zip(expected, runs, strict=True):
            assert_identical(want, getattr(impl, function)(exs, **kw))


def test_structure_checked_examples_match_reference() -> None:
    """Mappings that are not dicts (and dicts the fast path declines) go through the full
    structure check and give the reference's outputs, tensors and interior zeros included."""
    examples = [
        _proxy(_ex([1, 2, 3], 2, [1, 0], attention_mask=[1, 0, 1])),
        _proxy({"input_ids": [4, 5], "num_actions": 1, "loss_mask": torch.tensor([0.5]),
                "attention_mask": torch.tensor([0.0, 1.0], dtype=torch.float64)}),
        _ex([6], np.int64(1), [1]),
    ]
    for kwargs in ({"pad_token_id": 0}, {"pad_token_id": 3, "normalize": True}):
        assert_identical(reference.collate_sft(examples, **kwargs),
                         impl.collate_sft(examples, **kwargs))
    packed = [_proxy(_ex([1, 2, 3], 2, [1, 0], attention_mask=[1, 1, 1])),
              _proxy({"input_ids": [4, 5], "num_actions": 2, "loss_mask": torch.tensor([0.5, 1.0]),
                      "attention_mask": torch.tensor([1.0, 1.0])}),
              _proxy(_ex((6,), 1, (1,)))]
    assert_identical(reference.pack_sft(packed, pad_token_id=0, capacity=4),
                     impl.pack_sft(packed, pad_token_id=0, capacity=4))


META = torch.device("meta")
TWO_DEVICES = {"input_ids": torch.tensor([1, 2]), "num_actions": 1,
               "loss_mask": torch.ones(1, device=META)}

# (what, function, examples, kwargs)
MORE_ERRORS = [
    ("tensor attention value 2", "collate_sft",
     [TWO[0], {"input_ids": torch.tensor([4, 5]), "num_actions": 1, "loss_mask": torch.ones(1),
               "attention_mask": torch.tensor([1, 2])}], {"pad_token_id": 0}),
    ("tensor attention zero (packed)", "pack_sft",
     [TWO[0], {"input_ids": [4, 5], "num_actions": 1, "loss_mask": [1],
               "attention_mask": torch.tensor([1, 0])}], PACK),
    ("tensors on two devices", "collate_sft", [TWO[0], TWO_DEVICES], {"pad_token_id": 0}),
    ("two devices, then a checked example", "collate_sft", [TWO_DEVICES, _proxy(TWO[0])],
     {"pad_token_id": 0}),
    ("two devices in a checked example", "pack_sft", [_proxy(TWO_DEVICES)], PACK),
    ("loss_mask a string (checked)", "collate_sft", [TWO[0], _proxy(_ex([1], 1, [1]) | {
        "loss_mask": "ab"})], {"pad_token_id": 0}),
    ("attention_mask a string (checked)", "collate_sft",
     [TWO[0], _proxy(_ex([1], 1, [1], attention_mask="ab"))], {"pad_token_id": 0}),
    ("fp8 not a bool", "pack_sft", [TWO[0]], PACK | {"fp8": "yes"}),
    ("list id over int64 beside tensors", "collate_sft",
     [{"input_ids": torch.tensor([1]), "num_actions": 1, "loss_mask": [1]}, _ex([2**63], 1, [1])],
     {"pad_token_id": 0}),
    ("negative list ids beside tensors are fine, a string loss is not", "collate_sft",
     [{"input_ids": torch.tensor([1]), "num_actions": 1, "loss_mask": [1]},
      _ex([-2, 3], 1, [1]), _ex([4], 1, ["x"])], {"pad_token_id": 0}),
    ("list id over int64 onto another device", "collate_sft", [TWO[0], _ex([2**63], 1, [1])],
     {"pad_token_id": 0, "device": "meta"}),
    ("a tuple mask's dropped bad value", "pack_sft",
     [TWO[0], {"input_ids": (4,), "num_actions": 1, "loss_mask": ("x",)}], PACK),
]


@pytest.mark.parametrize("what, function, examples, kwargs", MORE_ERRORS,
                         ids=[e[0] for e in MORE_ERRORS])
def test_more_errors_identical(what: str, function: str, examples: list, kwargs: dict) -> None:
    """Inputs reaching each deferred check: the reference's exception type and message."""
    _same_error(function, examples, **kwargs)


def test_mixed_list_and_tensor_ids_with_negative_values() -> None:
    """Negative list ids beside tensor rows are packed as signed int64."""
    examples = [{"input_ids": torch.tensor([1]), "num_actions": 1, "loss_mask": [1]},
                _ex([-2, 3], 1, [1])]
    assert_identical(reference.collate_sft(examples, pad_token_id=0),
                     impl.collate_sft(examples, pad_token_id=0))
    assert_identical(reference.pack_sft(examples, pad_token_id=0, capacity=4),
                     impl.pack_sft(examples, pad_token_id=0, capacity=4))


P, Q = 2.0**22 + 0.5, -(2.0**22 - 0.5)  # float32 values whose float64 sum loses small terms
VALUE_CASES = [
    ("int32 tensor ids", [{"input_ids": torch.tensor([1, 2], dtype=torch.int32),
                           "num_actions": 1, "loss_mask": torch.tensor([1.0])}]),
    ("float32 tensor losses", [{"input_ids": torch.tensor([1, 2]), "num_actions": 2,
                                "loss_mask": torch.tensor([0.5, 0.25])}]),
    ("int64 tensor loss rounded through float64",
     [{"input_ids": [1, 2], "num_actions": 1, "loss_mask": torch.tensor([2**60 + 2**36 + 1])}]),
    ("large integral weights cancel", [_ex([1, 2, 3], 3, [2.0**60, 3.0, -(2.0**60)])]),
    ("large weights with a fraction cancel", [_ex([1, 2, 3], 3, [2.0**60, 3.5, -(2.0**60)])]),
    ("small fractions lost by a float64 sum", [_ex([1, 2, 3, 4], 4, [P, 1.5 * 2**-40, Q, 2**-25])]),
]


@pytest.mark.parametrize("what, examples", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_values_and_scale_match_reference(what: str, examples: list) -> None:
    """Dtype promotion, float64 rounding of loss values and the exact (fsum) normalization."""
    for kwargs in ({"pad_token_id": 0}, {"pad_token_id": 0, "normalize": True}):
        assert_identical(reference.collate_sft(examples, **kwargs),
                         impl.collate_sft(examples, **kwargs))
    assert_identical(reference.pack_sft(examples, pad_token_id=0, capacity=8),
                     impl.pack_sft(examples, pad_token_id=0, capacity=8))


def test_align_size_defaults() -> None:
    """tp_size and cp_size default to 1: alignment 1, and tp alone without cp."""
    assert impl.align_size() == reference.align_size() == 1
    assert impl.align_size(4) == reference.align_size(4) == 4
    assert impl.align_size(cp_size=2) == reference.align_size(cp_size=2) == 4


def _on_device_like(expected, actual, device: torch.device) -> None:
    """Every tensor of `actual` (non-tensor entries too) is on `device`, with the reference's
    keys, dtypes and shapes (values cannot be read on the meta device)."""
    assert set(actual.keys()) == set(expected.keys())
    for key in expected.keys():
        if expected.is_non_tensor(key):
            want, got = expected.get_non_tensor(key), actual.get_non_tensor(key)
        else:
            want, got = expected.get(key), actual.get(key)
        if isinstance(want, torch.Tensor):
            assert got.device == device, (key, got.device)
            assert got.dtype == want.dtype, key
            if not want.is_nested:
                assert got.shape == want.shape, key
        else:
            assert got == want, key


META_CASES = [
    ("lists", FAST_LISTS + [_ex([1, 2, 3], 2, [0.5, 1], attention_mask=[0, 1, 1])], True),
    ("cpu tensors", [{k: v for k, v in ex.items() if k != "attention_mask"}
                     for ex in TENSOR_CASES[0][0]], False),
    ("mixed", TENSOR_CASES[1][0], False),
]


@pytest.mark.parametrize("what, examples, lists", META_CASES, ids=[c[0] for c in META_CASES])
def test_outputs_land_on_the_requested_device(what: str, examples: list, lists: bool) -> None:
    """`device=` places every output (and every intermediate it meets) on that device: the meta
    device, on a CPU-only machine, shows any tensor left on the CPU. (Normalization and packing
    only where the exact sum comes from the host: a sum over meta values cannot be read.)"""
    calls = [("collate_sft", examples, {"pad_token_id": 0})]
    if lists:
        calls += [("collate_sft", FAST_LISTS, {"pad_token_id": 0, "normalize": True}),
                  ("pack_sft", FAST_LISTS, {"pad_token_id": 0, "capacity": 8, "dp_size": 2}),
                  ("pack_sft", FAST_LISTS, {"pad_token_id": 0, "capacity": 6, "cp_size": 2,
                                            "fp8": True})]
    with pytest.MonkeyPatch.context() as patch:
        for name in ("_flat_ints", "_flat_floats", "_packed_floats", "_attention_values"):
            patch.setattr(impl, name, _made_on(getattr(impl, name), META))
        for function, exs, kwargs in calls:
            expected = getattr(reference, function)(exs, **kwargs)
            for device in ("meta", META):
                _on_device_like(expected, getattr(impl, function)(exs, device=device, **kwargs),
                                META)


def _made_on(helper, device: torch.device):
    """`helper`, checking that the values it flattens come out on `device` (masked_scatter_
    onto a meta tensor would accept a CPU source silently)."""

    def spy(*args, **kwargs):
        out = helper(*args, **kwargs)
        values = out[0] if isinstance(out, tuple) else out
        assert values is None or values.device == device, (helper.__name__, values.device)
        return out

    return spy


@pytest.mark.parametrize("function", ["collate_sft", "pack_sft"])
def test_pad_ids_beyond_int64_are_a_value_error_naming_the_argument(function: str) -> None:
    """Even when nothing needs padding (the reference used to raise torch.tensor's ValueError
    only when a pad cell existed, the impl RuntimeError or OverflowError)."""
    kwargs = {"capacity": 8} if function == "pack_sft" else {}
    for pad in (2**63, -2**63 - 1):
        for module in (reference, impl):
            with pytest.raises(ValueError, match="pad_token_id must fit int64"):
                getattr(module, function)([_ex([1, 2], 1, [1])], pad_token_id=pad, **kwargs)
    examples = [_ex([1, 2, 3], 2, [1, 0]), _ex([4], 1, [1])]
    tensors = [_tensor_example(ex, loss_dtype=torch.float32) for ex in examples]
    for pad in (2**63 - 1, -2**63):  # the bounds themselves are valid (the kernel writes them)
        expected = getattr(reference, function)(examples, pad_token_id=pad, **kwargs)
        assert_identical(expected, getattr(impl, function)(tensors, pad_token_id=pad, **kwargs))


def test_valid_length_lists_skip_the_reference_checks(monkeypatch) -> None:
    """ffd_bins: a list of plain ints in [1, capacity] (both bounds included) is accepted at C
    speed, without the reference's per-length loop (which would give the same bins)."""
    monkeypatch.setattr(impl, "_check_lengths", _no_fallback)
    assert impl.ffd_bins([1, 8, 3], 8) == reference.ffd_bins([1, 8, 3], 8)


# -- examples as one TensorDict batch (jagged fields) ------------------------------------------


def _nj(rows: list[list], dtype=torch.int64) -> torch.Tensor:
    flat = torch.tensor([v for r in rows for v in r], dtype=dtype)
    offsets = torch.tensor([0] + [len(r) for r in rows]).cumsum(0)
    return torch.nested.nested_tensor_from_jagged(flat, offsets=offsets)


def _td(**fields) -> TensorDict:
    fields = {"input_ids": _nj([[5, 6, 7], [8, 9]]), "num_actions": torch.tensor([2, 1]),
              "loss_mask": _nj([[1, 0], [1]], torch.float32)} | fields
    return TensorDict({k: v for k, v in fields.items() if v is not None}, batch_size=[2])


def _with_note(batch: TensorDict) -> TensorDict:
    batch.set_non_tensor("source", "a non-tensor entry: skipped")
    return batch


HOLES = torch.nested.nested_tensor_from_jagged(torch.tensor([5, 6, 7, 0, 8, 9]),
                                               offsets=torch.tensor([0, 4, 6]),
                                               lengths=torch.tensor([3, 2]))
JAGGED_BATCHES = [  # (what, batch): valid ones must equal the reference, bad ones its error
    ("plain", _td()),
    ("attention all ones", _td(attention_mask=_nj([[1, 1, 1], [1, 1]]))),
    ("attention with zeros", _td(attention_mask=_nj([[0, 1, 1], [1, 0]]))),
    ("attention as bools, loss as float64", _td(attention_mask=_nj([[1, 1, 1], [1, 1]],
                                                                   torch.bool),
                                                loss_mask=_nj([[0.1, 1], [2]], torch.float64))),
    ("int32 ids, uint8 attention, int32 num_actions, bool loss",
     _td(input_ids=_nj([[5, 6, 7], [8, 9]], torch.int32),
         attention_mask=_nj([[1, 1, 1], [1, 1]], torch.uint8),
         num_actions=torch.tensor([2, 1], dtype=torch.int32),
         loss_mask=_nj([[True, False], [True]], torch.bool))),
    ("a jagged field with holes", _td(input_ids=HOLES)),
    ("strided input_ids (equal lengths)", _td(input_ids=torch.tensor([[5, 6, 7], [8, 9, 4]]))),
    ("an extra field", _td(labels=torch.tensor([1, 2]))),
    ("a non-tensor entry", _with_note(_td())),
    ("float attention with zeros", _td(attention_mask=_nj([[0, 1, 1], [1, 0]], torch.float64))),
    ("num_actions == s", _td(num_actions=torch.tensor([3, 1]),
                             loss_mask=_nj([[1, 0, 1], [1]], torch.float32))),
    ("float64 loss values that float32 rounds", _td(loss_mask=_nj([[0.1, 0.7], [1 / 3]],
                                                                  torch.float64))),
    ("trailing values past the last offset", _td(input_ids=torch.nested.nested_tensor_from_jagged(
        torch.tensor([5, 6, 7, 8, 9, 4]), offsets=torch.tensor([0, 3, 5])))),
    ("offsets starting past 0", _td(input_ids=torch.nested.nested_tensor_from_jagged(
        torch.tensor([4, 5, 6, 7, 8, 9]), offsets=torch.tensor([1, 4, 6])))),
    ("empty sequences", _td(input_ids=_nj([[], []]), attention_mask=_nj([[], []]),
                            num_actions=torch.tensor([1, 1]))),
    ("no rows (jagged)", TensorDict({"input_ids": _nj([]), "loss_mask": _nj([], torch.float32),
                                     "num_actions": torch.zeros(0, dtype=torch.int64)},
                                    batch_size=[0])),
    ("float attention value 2", _td(attention_mask=_nj([[1, 1, 1], [2.0, 1]], torch.float32))),
    ("float attention value 0.5", _td(attention_mask=_nj([[1, 1, 1], [0.5, 1]], torch.float32))),
    ("float64 loss values just past a float32 tie", _td(
        loss_mask=_nj([[1 + 2**-24 + 2**-40, 0.1], [3 + 2**-22 + 2**-40]], torch.float64))),
    ("trailing loss values past the last offset", _td(
        loss_mask=torch.nested.nested_tensor_from_jagged(torch.tensor([1.0, 0.0, 1.0, 1.0]),
                                                         offsets=torch.tensor([0, 2, 3])))),
    ("num_actions > s", _td(num_actions=torch.tensor([2, 3]),
                            loss_mask=_nj([[1, 0], [1, 1, 1]], torch.float32))),
    ("num_actions 0", _td(num_actions=torch.tensor([2, 0]),
                          loss_mask=_nj([[1, 0], []], torch.float32))),
    ("len(loss_mask) != num_actions", _td(num_actions=torch.tensor([1, 1]))),
    ("attention value 2", _td(attention_mask=_nj([[1, 1, 1], [2, 1]]))),
    ("attention shorter than input_ids", _td(attention_mask=_nj([[1, 1], [1, 1, 1]]))),
    ("float input_ids", _td(input_ids=_nj([[5, 6, 7], [8, 9]], torch.float32))),
    ("float num_actions", _td(num_actions=torch.tensor([2.0, 1.0]))),
    ("num_actions missing", _td(num_actions=None)),
    ("loss_mask missing", _td(loss_mask=None)),
    ("no rows", TensorDict({"input_ids": torch.zeros(0, 3, dtype=torch.int64)},
                           batch_size=[0])),
    ("batch_size [2, 1]", TensorDict({"input_ids": torch.zeros(2, 1, 3, dtype=torch.int64)},
                                     batch_size=[2, 1])),
]


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "torch"])
@pytest.mark.parametrize("function", ["collate_sft", "pack_sft"])
@pytest.mark.parametrize("what, batch", JAGGED_BATCHES, ids=[b[0] for b in JAGGED_BATCHES])
def test_jagged_batches_read_as_their_rows(what: str, batch: TensorDict, function: str,
                                           kernel: bool, monkeypatch) -> None:
    """A TensorDict batch means the list of its rows (reference.sft.batch_rows): the impl gives
    the reference's output, or raises its exception type and message (with the compiled
    kernels, and with the torch paths, whose whole-tensor checks differ)."""
    monkeypatch.setattr(kernels, "ENABLED", kernel)
    kwargs = {"pad_token_id": 0} | (PACK if function == "pack_sft" else {"normalize": True})
    try:
        expected = getattr(reference, function)(batch, **kwargs)
    except Exception:  # noqa: BLE001 - any error: the same one (torch's own, for bad offsets)
        _same_error(function, batch, **kwargs)
        return
    before = batch.clone()
    assert_identical(expected, getattr(impl, function)(batch, **kwargs))
    assert_identical(before, batch)


WHOLE_TENSOR_BATCHES = {  # valid for both functions, unless named for collate_sft
    "plain": _td(),
    "one row": TensorDict({"input_ids": _nj([[5, 6, 7]]), "num_actions": torch.tensor([3]),
                           "loss_mask": _nj([[1, 0, 1]], torch.float32)}, batch_size=[1]),
    "num_actions == s": dict(JAGGED_BATCHES)["num_actions == s"],
    "int32 ids, bool loss": dict(JAGGED_BATCHES)[
        "int32 ids, uint8 attention, int32 num_actions, bool loss"],
    **{f"{dtype} attention": _td(attention_mask=_nj([[1, 1, 1], [1, 1]], dtype))
       for dtype in (torch.int64, torch.uint8, torch.bool, torch.float32)},
    **{f"{dtype} attention with zeros (collate_sft)": _td(
        attention_mask=_nj([[0, 1, 1], [1, 0]], dtype))
       for dtype in (torch.int64, torch.bool, torch.float32)},
}


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "torch"])
@pytest.mark.parametrize("what, function", [
    (what, function) for what in WHOLE_TENSOR_BATCHES for function in ("collate_sft", "pack_sft")
    if function == "collate_sft" or "collate_sft" not in what])
def test_jagged_batches_take_the_whole_tensor_path(what: str, function: str, kernel: bool,
                                                   monkeypatch) -> None:
    """A valid jagged batch is checked on whole tensors, by the compiled check on the CPU (the
    torch reduction otherwise): its rows are never read one by one, and never re-checked
    value by value when packing fails (too long a sequence)."""
    if kernel and kernels.numba is None:
        pytest.skip("numba is not installed: the kernel cannot run")
    batch = WHOLE_TENSOR_BATCHES[what]
    expected = _outcome(getattr(reference, function), reference.batch_rows(batch), function)
    monkeypatch.setattr(kernels, "ENABLED", kernel)
    for slow in ("batch_rows", "_parse_examples", "_int64", "_write_ints"):
        monkeypatch.setattr(impl, slow, _no_fallback)
    monkeypatch.setattr(*(sft_kernel, "zero_one") if not kernel else (impl, "_zero_one_check"),
                        _no_fallback)
    assert_identical(expected, _outcome(getattr(impl, function), batch, function))
    if function == "pack_sft":  # a sequence over capacity: the FFD error, values not re-read
        error = _raised(impl.pack_sft, batch, pad_token_id=0, capacity=2)
        assert "capacity 2" in str(error)


def _outcome(fn, batch, function: str):
    kwargs = {"pad_token_id": 0} | (PACK if function == "pack_sft" else {"normalize": True})
    return fn(batch, **kwargs)


def test_batch_rows_reads_rows_of_every_field() -> None:
    """The reference's reading of a TensorDict batch, as its docstring draws it."""
    rows = reference.batch_rows(_td())
    assert [{k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in row.items()}
            for row in rows] == [
        {"input_ids": [5, 6, 7], "num_actions": 2, "loss_mask": [1.0, 0.0]},
        {"input_ids": [8, 9], "num_actions": 1, "loss_mask": [1.0]}]
    assert reference.batch_rows(TWO) is TWO


@pytest.mark.parametrize("packed", [False, True])
def test_all_ones_jagged_attention_is_not_read_again(packed: bool) -> None:
    """The compiled check finds an all-ones attention mask: the batch then drops it (the
    kernels write the ones without reading 8 bytes a token again); 0/1 values are kept."""
    if kernels.numba is None:
        pytest.skip("numba is not installed: the compiled check cannot run")
    ones = impl._parse(_td(attention_mask=_nj([[1, 1, 1], [1, 1]])), packed=packed)
    assert ones.flat is not None and ones.flat.attention_mask is None
    if not packed:
        zeros = impl._parse(_td(attention_mask=_nj([[0, 1, 1], [1, 1]])))
        assert zeros.flat.attention_mask.tolist() == [0, 1, 1, 1, 1]


@pytest.mark.parametrize("form", ["lists", "tensors", "jagged"])
@given(case=pack_cases())
def test_pack_sft_triton_kernel_equals_the_reference(case, form: str) -> None:
    """The Triton kernel CUDA runs, under Triton's interpreter on the CPU (the torch composition
    fails if called): equal to the reference, bit for bit."""
    import importlib.util

    from batchproof.impl import _cpu

    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed: pip install 'batchproof[triton]'")
    expected = reference.pack_sft(*case.args, **case.kwargs)
    examples = case.args[0] if form == "lists" else KERNEL_FORMS[form](case.args[0])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "ENABLED", False)
        patch.setattr(_cpu, "FAST_PATHS", False)
        patch.setattr(kernels, "TRITON_ON_CPU", True)
        patch.setattr(impl, "_packed_rows", _no_fallback)
        actual = impl.pack_sft(examples, **case.kwargs)
    assert_identical(expected, actual)


def _inexact_totals(values: list[float]) -> dict[str, object]:
    """The totals the magnitude zoo entries take: a float32 sum, a float64 sum in order, and
    math.fsum alone (which raises on opposite infinities)."""
    import math
    f32 = torch.tensor(values, dtype=torch.float32)
    try:
        fsum = math.fsum(f32.tolist())
    except ValueError:
        fsum = "raises"
    return {"float32": float(f32.sum()), "in_order": sum(f32.double().tolist()), "fsum": fsum}


@pytest.mark.parametrize("scenario, wrong", [("past_2_24", "float32"),
                                             ("beyond_float32", "float32"),
                                             ("cancellation", "in_order"),
                                             ("infinities", "fsum")])
def test_magnitude_cases_defeat_an_inexact_total(scenario, wrong) -> None:
    """Every draw of a magnitude scenario has a total that its inexact sum gets wrong (so each
    drawn example can see the matching zoo entry), and normalize is on."""
    @settings(max_examples=30, deadline=None, database=None)
    @given(records.magnitude_cases([scenario]))
    def check(case) -> None:
        assert case.kwargs["normalize"] is True
        values = [float(v) for ex in case.args[0] for v in ex["loss_mask"]]
        exact = reference.exact_sum(torch.tensor(values, dtype=torch.float32).tolist())
        got = _inexact_totals(values)[wrong]
        assert got == "raises" or not (got == exact or (got != got and exact != exact))
    check()


SLOT_EXAMPLES = [{"input_ids": [5, 6, 7], "num_actions": 2, "loss_mask": [1, 1],
                  "attention_mask": [1, 1, 1]},
                 {"input_ids": [8, 9, 10, 11], "num_actions": 1, "loss_mask": [1]}]


@settings(max_examples=10, deadline=None, database=None)
@given(st.composite(lambda draw: records._slot_filling(draw, SLOT_EXAMPLES, 4))())
def test_slot_filling_lengths_are_multiples_of_the_alignment(filled) -> None:
    examples = SLOT_EXAMPLES
    assert [len(ex["input_ids"]) for ex in filled] == [4, 4]
    assert filled[0]["input_ids"][1:] == [5, 6, 7] and filled[0]["attention_mask"] == [1] * 4
    assert filled[1] == examples[1] and examples[0]["input_ids"] == [5, 6, 7]


# --------------------------------------------------------------------------- two defects


def _examples_first(fn):
    """`fn` validating its examples before its other arguments (the reference checks them
    last): the reference's exception on every one-defect input."""
    def call(examples, **kwargs):
        reference._parse_examples(reference.batch_rows(examples),
                                  packed=fn is reference.pack_sft)
        return fn(examples, **kwargs)
    return call


def _recipe_first(*args, **kwargs):
    """align_size checking fp8_recipe before the sizes."""
    reference.check_fp8_recipe(kwargs.get("fp8_recipe", "tensorwise"))
    return reference.align_size(*args, **kwargs)


def _lengths_first(lengths, capacity, **kwargs):
    """ffd_bins checking the lengths' types before capacity, min_bins and bin_multiple."""
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, (list, tuple)):
        raise TypeError("lengths must be a sequence")
    if any(not isinstance(n, int) or isinstance(n, bool) for n in lengths):
        raise TypeError("a length is not an int")
    return reference.ffd_bins(lengths, capacity, **kwargs)


@pytest.mark.parametrize("name, one_defect, candidate", [
    ("sft.collate_sft", records.bad_collate_cases(), _examples_first(reference.collate_sft)),
    ("sft.pack_sft", records.bad_pack_cases(), _examples_first(reference.pack_sft)),
    ("sft.align_size", records.bad_align_cases(), _recipe_first),
    ("sft.ffd_bins", records.bad_ffd_cases(), _lengths_first),
], ids=["collate_sft", "pack_sft", "align_size", "ffd_bins"])
def test_invalid_inputs_with_two_defects_follow_the_references_first_error(
        name, one_defect, candidate) -> None:
    """Each record's invalid inputs include two defects on different arguments (issue 32): a
    validation order other than the reference's passes every one-defect input and fails."""
    from two_defects import assert_first_error_decides

    assert_first_error_decides(name, one_defect, candidate)

"""`trainer` beyond the generic registry checks: identity when no padding is needed, a real
masked loss over a padded batch, the no-response-columns case, error messages, and CUDA."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from tensordict import TensorDict

import batchproof.impl.trainer as impl
import batchproof.reference.trainer as ref
from batchproof.compare import assert_identical
from batchproof.reference.rl_batch import build_rl_batch

MODULES = pytest.mark.parametrize("module", [ref, impl], ids=["reference", "impl"])


def _batch(**kwargs):
    return build_rl_batch([[1, 2, 3], [4], [5, 6]], [[7, 8], [9, 10, 11], [12]], pad_token_id=0,
                          rewards=[[0.5, -1.0], [1.0, 2.0, -3.0], [4.0]], **kwargs)


@MODULES
def test_no_padding_needed_returns_the_input(module) -> None:
    td = _batch()
    assert module.pad_to_multiple(td, 3, eos_token_id=2) is td
    assert "is_padding" not in td.keys()
    assert module.real_rows(td) is td


@MODULES
@pytest.mark.parametrize("layout", ["left", "two_segment"])
def test_padding_rows_add_nothing_to_a_masked_loss(module, layout) -> None:
    """A token-level policy-gradient loss summed over the padded batch equals the loss over the
    real rows: every padding term is exactly 0 (not -0.0, not a tiny number)."""
    td = _batch(layout=layout)
    td.set("advantages", torch.tensor([[-0.0, -2.5, 1.0], [3.0, -1.0, 0.25], [-7.0, 1.0, 2.0]]))
    padded = module.pad_to_multiple(td, 8, eos_token_id=2, min_length=4)
    loss = -(padded["advantages"] * padded["rewards"] * padded["loss_mask"])
    padding_terms = loss[padded["is_padding"]]
    assert torch.equal(padding_terms.abs().sum(), torch.tensor(0.0))
    real = module.real_rows(padded)
    assert_identical(td, real.exclude("is_padding"))
    assert loss.sum() == -(td["advantages"] * td["rewards"] * td["loss_mask"]).sum()


@MODULES
def test_batch_without_response_columns_pads_with_prompt_tokens(module) -> None:
    td = build_rl_batch([[1, 2], [3]], [[], []], pad_token_id=0)
    out = module.pad_to_multiple(td, 3, eos_token_id=5)
    assert out["input_ids"][-1].tolist() == [5, 5]
    assert out["response_mask"].shape == (3, 0)


@MODULES
@pytest.mark.parametrize("call, error, words", [
    (lambda m, td: m.pad_to_multiple(td, 0, eos_token_id=2), ValueError, ["multiple"]),
    (lambda m, td: m.pad_to_multiple(td.exclude("layout"), 2, eos_token_id=2), ValueError,
     ["layout"]),
    (lambda m, td: m.pad_to_multiple(td, 2, eos_token_id=2, min_length=9), ValueError,
     ["min_length=9", "wider"]),
    (lambda m, td: m.pad_to_multiple(_with_uids(td), 2, eos_token_id=2), ValueError, ["uids"]),
    (lambda m, td: m.broadcast_stepwise_advantages([1.0], [0, 1, 0], td["response_mask"]),
     ValueError, ["traj_ids[1]=1"]),
    (lambda m, td: m.required_multiple(2, mini_batch_size=0), ValueError, ["mini_batch_size"]),
])
def test_bad_input_names_the_culprit(module, call, error, words) -> None:
    with pytest.raises(error) as info:
        call(module, _batch())
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def _with_uids(td):
    td.set_non_tensor("uids", ["a", "b", "c"])
    return td


@MODULES
def test_required_multiple_spec_example(module) -> None:
    assert module.required_multiple(2, mini_batch_size=15, n=8) == 120


@pytest.mark.gpu
def test_pad_and_broadcast_on_cuda() -> None:
    td = _batch().to("cuda")
    out = impl.pad_to_multiple(td, 4, eos_token_id=2)
    assert_identical(ref.pad_to_multiple(td, 4, eos_token_id=2), out)
    assert out["is_padding"].device.type == "cuda"
    adv = impl.broadcast_stepwise_advantages(torch.tensor([1.0, -2.0], device="cuda"),
                                             torch.tensor([0, 1, 1], device="cuda"),
                                             td["response_mask"])
    assert adv.device.type == "cuda"
    assert adv.cpu().tolist() == [[0.0, 1.0, 1.0], [-2.0, -2.0, -2.0], [0.0, 0.0, -2.0]]


def _raised(call) -> tuple[type, str]:
    """The type and message of the exception `call()` raises."""
    try:
        call()
    except Exception as error:  # noqa: BLE001 - any exception is compared with the reference's
        return type(error), str(error)
    raise AssertionError("no exception raised")


def _td(fields: dict, batch: int = 2) -> TensorDict:
    return TensorDict(fields, batch_size=[batch])


def _pad(td, **kwargs):
    return lambda m: m.pad_to_multiple(td, 4, **{"eos_token_id": 2, **kwargs})


def _resized(key: str, shape: tuple[int, ...]):
    td = _batch()
    td.set(key, torch.ones(shape, dtype=torch.int64))
    return td


MASK = torch.tensor([[0, 1, 1], [1, 1, 0]])
BAD_INPUT = {
    "td-not-tensordict": _pad([1, 2]),
    "td-two-batch-dims": _pad(TensorDict({}, batch_size=[2, 2])),
    "min_length-not-int": _pad(_batch(), min_length="4"),
    "layout-unknown": _pad(_batch(), layout="right"),
    "pad_token_id-not-int": _pad(_batch(), pad_token_id=0.0),
    "no-input_ids": _pad(_td({"x": torch.zeros(2)}), layout="left", pad_token_id=0),
    "input_ids-3d": _pad(_td({"input_ids": torch.zeros(2, 3, 1, dtype=torch.int64)}),
                         layout="left", pad_token_id=0),
    "attention_mask-shape": _pad(_resized("attention_mask", (3, 4))),
    "position_ids-width": _pad(_resized("position_ids", (3, 4))),
    "position_ids-4d": _pad(_resized("position_ids", (3, 1, 1, 5))),
    "response-wider-than-sequence": _pad(
        _td({"input_ids": torch.zeros(2, 2, dtype=torch.int64),
             "response_mask": torch.zeros(2, 3, dtype=torch.int64)}), layout="left", pad_token_id=0),
    "left-min_length-wider-than-T": _pad(_batch(), min_length=6),
    "left-response-tokens-wider-than-R": _pad(build_rl_batch([[1, 2, 3]], [[4]], pad_token_id=0),
                                              min_length=4),
    "actor_updates-not-bool": lambda m: m.required_multiple(2, actor_updates=1),
    "mask-not-tensor": lambda m: m.broadcast_stepwise_advantages([1.0], [0, 0], [[1, 0], [0, 1]]),
    "mask-one-bad-value": lambda m: m.broadcast_stepwise_advantages(
        [1.0], [0, 0], torch.tensor([[0, 1, 1], [1, 2, 0]])),
    "scalars-2d": lambda m: m.broadcast_stepwise_advantages(torch.ones(1, 1), [0, 0], MASK),
    "scalars-bool-tensor": lambda m: m.broadcast_stepwise_advantages(torch.tensor([True]), [0, 0],
                                                                     MASK),
    "scalars-inf-in-float32": lambda m: m.broadcast_stepwise_advantages(
        torch.tensor([1.0, 1e300], dtype=torch.float64), [0, 0], MASK),
    "scalars-str": lambda m: m.broadcast_stepwise_advantages("12", [0, 0], MASK),
    "scalars-not-iterable": lambda m: m.broadcast_stepwise_advantages(1.0, [0, 0], MASK),
    "scalars-bool-item": lambda m: m.broadcast_stepwise_advantages([1.0, True], [0, 0], MASK),
    "scalars-str-item": lambda m: m.broadcast_stepwise_advantages([1.0, "2"], [0, 0], MASK),
    "traj_ids-2d": lambda m: m.broadcast_stepwise_advantages([1.0], torch.zeros(2, 1, dtype=torch.int64),
                                                             MASK),
    "traj_ids-bool-tensor": lambda m: m.broadcast_stepwise_advantages(
        [1.0], torch.tensor([False, False]), MASK),
    "traj_ids-str": lambda m: m.broadcast_stepwise_advantages([1.0], "00", MASK),
    "traj_ids-not-iterable": lambda m: m.broadcast_stepwise_advantages([1.0], 0, MASK),
    "traj_ids-bool-item": lambda m: m.broadcast_stepwise_advantages([1.0], [0, False], MASK),
    "traj_ids-str-item": lambda m: m.broadcast_stepwise_advantages([1.0], [0, "0"], MASK),
}


@pytest.mark.parametrize("call", BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_raises_the_reference_error(call) -> None:
    """Every invalid-input branch raises the reference's exception type with its exact message."""
    assert _raised(lambda: call(impl)) == _raised(lambda: call(ref))


@pytest.mark.parametrize("drop", [("attention_mask",), ("position_ids",),
                                  ("attention_mask", "position_ids")])
def test_padding_without_optional_token_fields(drop) -> None:
    """attention_mask and position_ids are optional: a batch without them pads like the reference."""
    td = _batch().exclude(*drop)
    assert_identical(ref.pad_to_multiple(td, 4, eos_token_id=2),
                     impl.pad_to_multiple(td, 4, eos_token_id=2))


def test_padding_keeps_token_field_dtypes() -> None:
    """int32 input_ids / position_ids and a bool attention_mask keep their dtype after padding."""
    td = _batch()
    for key, dtype in [("input_ids", torch.int32), ("position_ids", torch.int32),
                       ("attention_mask", torch.bool)]:
        td.set(key, td.get(key).to(dtype))
    out = impl.pad_to_multiple(td, 4, eos_token_id=2)
    assert out["input_ids"].dtype == torch.int32 and out["attention_mask"].dtype == torch.bool
    assert_identical(ref.pad_to_multiple(td, 4, eos_token_id=2), out)


def test_padding_keeps_the_batch_device() -> None:
    """A TensorDict with a device gives a padded TensorDict on that device, as in the reference."""
    td = _batch().to("cpu")
    assert td.device == torch.device("cpu")
    assert impl.pad_to_multiple(td, 4, eos_token_id=2).device == torch.device("cpu")
    assert ref.pad_to_multiple(td, 4, eos_token_id=2).device == torch.device("cpu")


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.uint8])
def test_small_integer_traj_ids(dtype) -> None:
    """traj_ids of any integer dtype index the scalars like int64 ids do."""
    ids = torch.tensor([1, 0], dtype=dtype)
    expected = ref.broadcast_stepwise_advantages([1.5, -2.0], ids, MASK)
    assert_identical(expected, impl.broadcast_stepwise_advantages([1.5, -2.0], ids, MASK))


@pytest.mark.parametrize("traj_ids", [[], torch.zeros(0, dtype=torch.int64)])
def test_empty_batch_advantages(traj_ids) -> None:
    """A response_mask with no rows and no traj_ids gives an empty float32 (0, R) tensor."""
    mask = torch.zeros(0, 3, dtype=torch.int64)
    out = impl.broadcast_stepwise_advantages([1.0], traj_ids, mask)
    assert_identical(ref.broadcast_stepwise_advantages([1.0], traj_ids, mask), out)
    assert out.dtype == torch.float32 and out.shape == (0, 3)


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def test_advantages_are_float32_under_a_float64_default_dtype() -> None:
    """Scalars are rounded to float32 and the output is float32 whatever torch's default dtype."""
    with _default_dtype(torch.float64):
        out = impl.broadcast_stepwise_advantages([0.1, -2.0], [1, 0], MASK)
        error = _raised(lambda: impl.broadcast_stepwise_advantages([0.1, 1e300], [0, 0], MASK))
    assert_identical(ref.broadcast_stepwise_advantages([0.1, -2.0], [1, 0], MASK), out)
    assert error == _raised(lambda: ref.broadcast_stepwise_advantages([0.1, 1e300], [0, 0], MASK))


# --------------------------------------------------------------------------- two defects


def _flag_first(*args, **kwargs):
    """required_multiple checking actor_updates before the sizes."""
    if not isinstance(kwargs.get("actor_updates", True), bool):
        raise TypeError("actor_updates must be a bool")
    return ref.required_multiple(*args, **kwargs)


def _multiple_last(td, multiple, **kwargs):
    """pad_to_multiple validating every other argument (a multiple of 1 pads nothing) before
    `multiple` (the reference checks it third)."""
    ref.pad_to_multiple(td, 1, **kwargs)
    return ref.pad_to_multiple(td, multiple, **kwargs)


def _scalars_first(scalars, traj_ids, response_mask):
    """broadcast_stepwise_advantages checking the scalars before the mask and the ids."""
    ref._scalars(scalars)
    return ref.broadcast_stepwise_advantages(scalars, traj_ids, response_mask)


@pytest.mark.parametrize("name, bad, candidate", [
    ("trainer.required_multiple", "bad_required_multiple_cases", _flag_first),
    ("trainer.pad_to_multiple", "bad_pad_to_multiple_cases", _multiple_last),
    ("trainer.broadcast_stepwise_advantages", "bad_stepwise_cases", _scalars_first),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) and "." in v else "")
def test_invalid_inputs_with_two_defects_follow_the_references_first_error(
        name, bad, candidate) -> None:
    """Each record's invalid inputs include two defects on different arguments (issue 32): a
    validation order other than the reference's passes every one-defect input and fails.
    (real_rows takes one argument: one defect only.)"""
    from two_defects import assert_first_error_decides

    from batchproof.ops import trainer as records

    assert_first_error_decides(name, getattr(records, bad)(), candidate)

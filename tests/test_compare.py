"""The comparator's failure messages (`batchproof.assert_identical`)."""

from __future__ import annotations

import pytest
import torch

from batchproof import Mismatch, assert_identical


def test_a_mismatch_of_zero_signs_points_at_the_first_real_difference() -> None:
    expected = torch.tensor([[0.0, 0.0, 1.5], [2.0, 0.0, 0.0]])
    actual = torch.tensor([[-0.0, 0.0, 1.5], [2.5, 0.0, 0.0]])
    with pytest.raises(Mismatch) as info:
        assert_identical(expected, actual)
    message = str(info.value)
    assert "first mismatch at [0, 0]: expected 0.0, actual -0.0" in message
    assert "first mismatch other than the sign of a zero at [1, 0]: expected 2.0, actual 2.5" \
        in message


def test_a_mismatch_of_zero_signs_only_says_so() -> None:
    with pytest.raises(Mismatch, match=r"differ only in the sign of zero \(2 elements"):
        assert_identical(torch.tensor([0.0, -0.0, 1.0]), torch.tensor([-0.0, 0.0, 1.0]))


def test_other_mismatches_carry_no_zero_sign_note() -> None:
    with pytest.raises(Mismatch) as info:
        assert_identical(torch.tensor([0.0, 1.0]), torch.tensor([0.5, -0.0]))
    assert "sign of" not in str(info.value)
    with pytest.raises(Mismatch) as info:  # integers have no signed zero
        assert_identical(torch.tensor([0, 1]), torch.tensor([0, 2]))
    assert "sign of" not in str(info.value)


# --------------------------------------------------------------------------- every promise
#
# Each strictness promise of `assert_identical` (its docstring) and of `assert_logprobs_close`,
# asserted as a rejection of two values that differ in that one respect only, beside an accepted
# twin: a more lenient comparator fails here, whatever its message says.

from tensordict import TensorDict  # noqa: E402

from batchproof.compare import assert_logprobs_close  # noqa: E402


def _jagged(rows: list[list[float]]) -> torch.Tensor:
    return torch.nested.nested_tensor([torch.tensor(r) for r in rows], layout=torch.jagged)


def _nan(payload: int) -> torch.Tensor:
    return torch.tensor([payload], dtype=torch.int32).view(torch.float32)


def _td(**entries) -> TensorDict:
    td = TensorDict({k: v for k, v in entries.items() if isinstance(v, torch.Tensor)},
                    batch_size=[2])
    for key, value in entries.items():
        if not isinstance(value, torch.Tensor):
            td.set_non_tensor(key, value)
    return td


REJECTED = {
    "dtype": (torch.tensor([1, 2]), torch.tensor([1, 2], dtype=torch.int32)),
    "float dtype": (torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64)),
    "shape": (torch.zeros(2, 3), torch.zeros(3, 2)),
    "an extra axis": (torch.zeros(2), torch.zeros(2, 1)),
    "signed zero": (torch.tensor([0.0]), torch.tensor([-0.0])),
    "NaN payload": (_nan(0x7FC00000), _nan(0x7FC00001)),
    "NaN sign": (_nan(0x7FC00000), _nan(-0x00400000)),
    "one ulp": (torch.tensor([1.0]), torch.nextafter(torch.tensor([1.0]), torch.tensor([2.0]))),
    "strided vs jagged": (torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
                          _jagged([[1.0, 2.0], [3.0, 4.0]])),
    "jagged offsets": (_jagged([[1.0], [2.0, 3.0]]), _jagged([[1.0, 2.0], [3.0]])),
    "jagged values": (_jagged([[1.0], [2.0, 3.0]]), _jagged([[1.0], [2.0, 4.0]])),
    "jagged values dtype": (_jagged([[1.0], [2.0]]),
                            torch.nested.nested_tensor([torch.tensor([1.0], dtype=torch.float64),
                                                        torch.tensor([2.0], dtype=torch.float64)],
                                                       layout=torch.jagged)),
    "device": (torch.zeros(1), torch.zeros(1, device="meta")),
    "keys": (_td(a=torch.zeros(2)), _td(b=torch.zeros(2))),
    "a missing key": (_td(a=torch.zeros(2), b=torch.zeros(2)), _td(a=torch.zeros(2))),
    "batch size": (TensorDict({"a": torch.zeros(2)}, batch_size=[2]),
                   TensorDict({"a": torch.zeros(2)}, batch_size=[])),
    "non-tensor type: int vs bool": (_td(n=1), _td(n=True)),
    "non-tensor type: int vs float": (_td(n=1), _td(n=1.0)),
    "non-tensor value": (_td(n=3), _td(n=4)),
    "non-tensor vs tensor": (_td(a=torch.zeros(2), n=2),
                             _td(a=torch.zeros(2), n=torch.tensor([2, 2]))),
    "TensorDict vs dict": (_td(a=torch.zeros(2)), {"a": torch.zeros(2)}),
    "tuple vs list": ((torch.zeros(1),), [torch.zeros(1)]),
    "list length": ([torch.zeros(1)], [torch.zeros(1), torch.zeros(1)]),
    "dict key order": ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
    "scalar type": (1, 1.0),
    "tensor vs int": (torch.tensor(1), 1),
    "complex values": (torch.tensor([1 + 1j]), torch.tensor([1 + 2j])),
    "complex signed zero": (torch.tensor([complex(0.0, 1.0)]), torch.tensor([complex(-0.0, 1.0)])),
}

ACCEPTED = {
    "equal ints": (torch.tensor([1, 2]), torch.tensor([1, 2])),
    "the same NaN": (_nan(0x7FC00001), _nan(0x7FC00001)),
    "equal jagged": (_jagged([[1.0], [2.0, 3.0]]), _jagged([[1.0], [2.0, 3.0]])),
    "equal TensorDicts": (_td(a=torch.ones(2), n=1), _td(a=torch.ones(2), n=1)),
    "equal complex": (torch.tensor([1 + 1j]), torch.tensor([1 + 1j])),
    # strides are not a promise: a column-major copy holds the same tensor
    "another stride": (torch.arange(6.0).reshape(2, 3),
                       torch.arange(6.0).reshape(2, 3).t().contiguous().t()),
}


@pytest.mark.parametrize("what", sorted(REJECTED))
def test_every_strictness_promise_rejects(what: str) -> None:
    expected, actual = REJECTED[what]
    with pytest.raises(Mismatch):
        assert_identical(expected, actual)


@pytest.mark.parametrize("what", sorted(ACCEPTED))
def test_what_is_identical_is_accepted(what: str) -> None:
    expected, actual = ACCEPTED[what]
    assert_identical(expected, actual)


def test_across_devices_only_the_device_and_a_nans_bits_are_excused() -> None:
    assert_identical(_nan(0x7FC00000), _nan(-0x00400000), allow_device=True)  # any NaN
    for what in ("dtype", "signed zero", "shape", "jagged offsets"):
        expected, actual = REJECTED[what]
        with pytest.raises(Mismatch):
            assert_identical(expected, actual, allow_device=True)
    with pytest.raises(Mismatch):  # a NaN is not a number
        assert_identical(_nan(0x7FC00000), torch.tensor([0.0]), allow_device=True)


def _logprobs(*values: float) -> torch.Tensor:
    return torch.tensor([list(values)])


MASK = torch.tensor([[0, 1, 1]])


@pytest.mark.parametrize("expected, actual, dtype", [
    (_logprobs(0.0, -1.0, -2.0), _logprobs(1e-9, -1.0, -2.0), torch.float32),  # off the mask
    (_logprobs(1e-9, -1.0, -2.0), _logprobs(0.0, -1.0, -2.0), torch.float32),  # either side
    (_logprobs(0.0, -1.0, -2.0), _logprobs(0.0, -1.0, -2.0 + 2e-5), torch.float32),  # max
    (_logprobs(0.0, -1.0, float("nan")), _logprobs(0.0, -1.0, -2.0), torch.float32),
    (_logprobs(0.0, -1.0, float("inf")), _logprobs(0.0, -1.0, float("nan")), torch.float32),
    (_logprobs(0.0, -1.0, -2.0), _logprobs(0.0, -1.0, -2.0).double(), torch.float32),
    (_logprobs(0.0, -1.0, -2.0), _logprobs(0.0, -1.0), torch.float32),  # shape
    # bf16: every token within the max (2e-2) but the mean beyond 2e-3
    (_logprobs(0.0, -1.0, -2.0), _logprobs(0.0, -1.0 + 1e-2, -2.0 + 1e-2), torch.bfloat16),
])
def test_every_logprob_tolerance_promise_rejects(expected, actual, dtype) -> None:
    with pytest.raises(Mismatch):
        assert_logprobs_close(expected, actual, MASK, dtype)


def test_logprobs_within_tolerance_are_accepted_and_measured() -> None:
    close = assert_logprobs_close(_logprobs(0.0, -1.0, -2.0), _logprobs(0.0, -1.0, -2.0 + 5e-6),
                                  MASK, torch.float32)
    assert close["max_abs"] == pytest.approx(5e-6, rel=0.1)
    same = assert_logprobs_close(_logprobs(0.0, -1.0, float("-inf")),
                                 _logprobs(0.0, -1.0, float("-inf")), MASK, torch.float32)
    assert same == {"max_abs": 0.0, "mean_abs": 0.0}


# --------------------------------------------------------------------------- found everywhere
#
# Mutation testing of this module (`batchproof mutate --mutmut --harness compare`, docs/
# mutation.md) found these promises untested: a difference inside a list or a dict, equal
# values across devices, no finite token under the mask, and what a report says.


def test_a_difference_inside_a_list_or_a_mapping_is_found() -> None:
    for expected, actual in [([torch.zeros(1)], [torch.ones(1)]),
                             ((torch.zeros(1), 1), (torch.zeros(1), 2)),
                             ({"a": torch.zeros(1)}, {"a": torch.ones(1)}),
                             ({"k": [torch.zeros(2), (1, 2.0)]}, {"k": [torch.zeros(2), (1, 2)]})]:
        with pytest.raises(Mismatch):
            assert_identical(expected, actual)
    with pytest.raises(Mismatch) as info:
        assert_identical({"k": [torch.zeros(2), (1, 2.0)]}, {"k": [torch.zeros(2), (1, 2)]})
    assert str(info.value) == ".k[1][1]: expected 2.0 (float), got 2 (int)"
    assert info.value.path == ".k[1][1]"


def test_equal_values_across_devices_are_identical() -> None:
    values = torch.tensor([[0.5, -0.0, 3.0]])
    assert_identical(values, values.clone(), allow_device=True)


def test_logprobs_with_no_finite_token_under_the_mask() -> None:
    nan = float("nan")
    measured = assert_logprobs_close(_logprobs(0.0, nan, float("-inf")),
                                     _logprobs(0.0, nan, float("-inf")), MASK, torch.float32)
    assert measured == {"max_abs": 0.0, "mean_abs": 0.0}


def test_a_reports_first_difference_rows_and_picture() -> None:
    from batchproof import registry
    from batchproof.reference.rl_batch import build_rl_batch

    expected = build_rl_batch([[5, 6], [7]], [[8], [9, 10]], pad_token_id=0)
    actual = expected.clone()
    actual["input_ids"][1, 1], actual["input_ids"][1, 2] = 99, 98
    with pytest.raises(Mismatch) as info:
        assert_identical(expected, actual, picture=registry.get("rl_batch.build_rl_batch").picture,
                         describe_row=lambda row: f"sample {row}", compared="the two")
    assert str(info.value).splitlines() == [
        "input_ids: values differ: first mismatch at [1, 1]: expected 9, actual 99 (2 elements "
        "in 1 row(s)); shape (2, 3), torch.int64",
        "row 1: sample 1", "  expected  prr", "  actual    pxx",
        "  (. pad, p prompt, r response, x mismatch)", "compared: the two"]
    assert info.value.path == info.value.field == "input_ids"


def test_a_shape_difference_draws_the_first_row_of_each() -> None:
    from tensordict import TensorDict

    with pytest.raises(Mismatch) as info:
        assert_identical(TensorDict({"a": torch.zeros(2, 3)}, batch_size=[2]),
                         TensorDict({"a": torch.zeros(2, 4)}, batch_size=[2]))
    assert str(info.value).splitlines() == [
        "a: shape differs: expected (2, 3), got (2, 4)", "row 0:", "  expected  ###",
        "  actual    ####", "  (# a column, x mismatch)"]
    with pytest.raises(Mismatch) as info:
        assert_identical(torch.zeros(2, 3), torch.zeros(3, 3))
    assert str(info.value) == "output: shape differs: expected (2, 3), got (3, 3)"


# ------------------------------------------------ each promise exactly (the harness's mutants)


def _mismatch(expected, actual, **kwargs) -> Mismatch:
    with pytest.raises(Mismatch) as info:
        assert_identical(expected, actual, **kwargs)
    return info.value


def test_a_bare_mismatch_has_no_message_and_no_path() -> None:
    bare = Mismatch()
    assert str(bare) == "" and bare.path == "" and bare.field == ""


def test_a_type_difference_names_both_kinds() -> None:
    from tensordict import TensorDict

    td = TensorDict({"a": torch.zeros(1)}, batch_size=[1])
    t = torch.zeros(2, dtype=torch.int64)
    cases = {
        "tensor vs list": (t, [0, 0], "output: expected Tensor(strided (2,), torch.int64), "
                                       "got list"),
        "list vs tensor": ([0, 0], t, "output: expected list, got Tensor(strided (2,), "
                                       "torch.int64)"),
        "TensorDict vs list": (td, [1], "output: expected TensorDict, got list"),
        "list vs TensorDict": ([1], td, "output: expected list, got TensorDict"),
        "list vs tuple": ([1, 2], (1, 2), "output: expected list of 2, got tuple of 2"),
        "list vs int": ([1], 1, "output: expected [1] (list), got 1 (int)"),
        "dict vs int": ({"a": 1}, 1, "output: expected {'a': 1} (dict), got 1 (int)"),
        "int vs dict": (1, {"a": 1}, "output: expected 1 (int), got {'a': 1} (dict)"),
    }
    for name, (expected, actual, message) in cases.items():
        assert str(_mismatch(expected, actual)) == message, name


def test_a_dense_tensor_against_a_sparse_one_is_a_layout_difference() -> None:
    dense = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    found = _mismatch(dense, dense.to_sparse())
    assert str(found).startswith("output: layout differs"), str(found)


def test_nested_paths_name_the_key_inside_the_key() -> None:
    from tensordict import TensorDict

    def outer(value: float) -> TensorDict:
        inner = TensorDict({"b": torch.tensor([[value]])}, batch_size=[1])
        return TensorDict({"a": inner}, batch_size=[1])

    assert _mismatch(outer(1.0), outer(2.0)).path == "a.b"
    assert _mismatch([outer(1.0)], [outer(2.0)]).path == "[0].a.b"  # inside a list
    assert _mismatch(_jagged([[1.0], [2.0]]), _jagged([[1.0, 2.0]])).path == ".offsets()"
    found = _mismatch(_jagged([[1.0], [2.0, 3.0]]), _jagged([[1.0], [2.0, 4.0]]))
    assert found.path == ".values()"


def test_a_tensor_stored_as_a_non_tensor_entry_is_named() -> None:
    from tensordict import NonTensorData, TensorDict

    tensor = TensorDict({"a": torch.zeros(1)}, batch_size=[1])
    other = TensorDict({"a": NonTensorData("text", batch_size=[1])}, batch_size=[1])
    found = _mismatch(tensor, other)
    assert str(found) == ("a: one side stores it as a non-tensor entry, the other as a tensor")
    assert found.path == "a"


def test_allow_device_ignores_nan_payloads_inside_every_container() -> None:
    """Under `allow_device`, NaN payloads are the device's: equal at any depth."""
    from tensordict import TensorDict

    nan = torch.tensor([float("nan"), 1.0])
    other = nan.clone()
    other.view(torch.int32)[0] ^= 1  # another NaN payload
    assert not torch.equal(nan.view(torch.int32), other.view(torch.int32))
    for wrap in (lambda t: [t], lambda t: {"k": t},
                 lambda t: TensorDict({"k": t[None]}, batch_size=[1]),
                 lambda t: torch.nested.nested_tensor([t, t], layout=torch.jagged)):
        assert_identical(wrap(nan), wrap(other), allow_device=True)
        _mismatch(wrap(nan), wrap(other))  # without it, the payload differs


def test_a_complex_mismatch_counts_elements_not_components() -> None:
    expected = torch.zeros(2, 3, dtype=torch.complex64)
    actual = expected.clone()
    actual[1, 2] = 1 + 1j
    message = str(_mismatch(expected, actual))
    assert "first mismatch at [1, 2]" in message and "(1 elements in 1 row(s))" in message


def test_a_one_dimensional_mismatch_has_no_rows() -> None:
    message = str(_mismatch(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 0, 3, 0])))
    assert "(2 elements in 1 row(s))" in message and "row " not in message


def test_at_most_two_rows_are_drawn() -> None:
    message = str(_mismatch(torch.zeros(3, 2), torch.ones(3, 2)))
    assert "(6 elements in 3 row(s))" in message
    assert "row 0:" in message and "row 1:" in message and "row 2:" not in message


def test_a_three_dimensional_mismatch_marks_the_position_along_the_row() -> None:
    """A (batch, position, vocab) output is drawn one character per position: the mismatch at
    position 2 (vocab entry 0) is marked there (it used to be marked at the vocab index)."""
    from tensordict import TensorDict

    expected = TensorDict({"logits": torch.zeros(1, 4, 3)}, batch_size=[1])
    actual = expected.clone()
    actual["logits"][0, 2, 0] = 1.0
    message = str(_mismatch(expected, actual))
    assert "  expected  ####\n  actual    ##x#\n" in message, message


def test_the_zero_sign_count_counts_only_differing_zeros() -> None:
    message = str(_mismatch(torch.tensor([0.0, 0.0, 0.0]), torch.tensor([-0.0, 0.0, 0.0])))
    assert "differ only in the sign of zero (1 elements" in message


def test_a_transposed_jagged_tensor_differs_in_its_ragged_dimension() -> None:
    nested = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(1, 3)],
                                        layout=torch.jagged)
    assert str(_mismatch(nested, nested.transpose(1, 2))) == (
        "output: jagged (ragged) dimension differs")


def _td(tensor: torch.Tensor):
    from tensordict import TensorDict

    return TensorDict({"ids": tensor}, batch_size=[tensor.shape[0]])


def test_a_row_without_a_picture_says_so() -> None:
    message = str(_mismatch(torch.zeros(2, 2), torch.eye(2)))  # not a TensorDict: no picture
    assert "row 0:\n  expected  (no picture)\n  actual    (no picture)\n" \
           "  (# a column, x mismatch)" in message


def test_a_row_past_the_width_is_drawn_too() -> None:
    expected = torch.zeros(3, 2)
    actual = expected.clone()
    actual[2, 1] = 1.0
    message = str(_mismatch(_td(expected), _td(actual)))
    assert "row 2:\n  expected  ##\n  actual    #x\n" in message, message


def test_a_jagged_three_dimensional_mismatch_has_no_picture() -> None:
    def jagged(value: float) -> torch.Tensor:  # differs in the first rows of its values
        return torch.nested.nested_tensor([torch.full((2, 3), value), torch.zeros(1, 3)],
                                          layout=torch.jagged)

    from tensordict import TensorDict

    expected = TensorDict({"h": jagged(0.0)}, batch_size=[2])
    actual = TensorDict({"h": jagged(1.0)}, batch_size=[2])
    message = str(_mismatch(expected, actual))
    assert "h.values(): values differ" in message
    assert "  expected  (no picture)\n  actual    (no picture)\n" in message, message


def test_an_output_of_no_rows_has_no_picture() -> None:
    from tensordict import TensorDict

    expected = TensorDict({"ids": torch.zeros(0, 2)}, batch_size=[0])
    actual = TensorDict({"ids": torch.zeros(0, 3)}, batch_size=[0])
    message = str(_mismatch(expected, actual))
    assert "ids: shape differs: expected (0, 2), got (0, 3)" in message
    assert "row 0:\n  expected  (no picture)\n  actual    (no picture)\n" in message, message


def test_a_picture_is_used_only_where_it_fits_and_may_fail() -> None:
    expected, actual = torch.zeros(3, 2), torch.zeros(3, 2)
    actual[2, 0] = 1.0

    def drawn(families):
        return str(_mismatch(_td(expected), _td(actual), picture=lambda td: families))

    assert "  expected  pr\n  actual    xr\n" in drawn({"ids": ["..", "..", "pr"]})
    assert "  expected  ##\n" in drawn({"ids": ["..", ".."]})  # no picture of row 2
    assert "  expected  ##\n" in drawn({"ids": ["..", "..", "ppp"]})  # another width

    def broken(td):
        raise RuntimeError("a broken output")

    message = str(_mismatch(_td(expected), _td(actual), picture=broken))
    assert "  expected  ##\n  actual    x#\n" in message


def test_logprob_mismatches_say_exactly_what_and_where() -> None:
    f32 = torch.float32
    mask = torch.tensor([[1, 0, 0, 1]])
    base = torch.tensor([[-1.0, 0.0, 0.0, -2.0]])

    def message(expected, actual, m=mask) -> str:
        with pytest.raises(Mismatch) as info:
            assert_logprobs_close(expected, actual, m, f32)
        return str(info.value)

    assert message(base, base[:, :3]) == "logprob shapes differ: expected (1, 4), got (1, 3)"
    assert message(base, base.double()) == (
        "logprob dtypes differ: expected torch.float32, got torch.float64")
    off = base.clone()
    off[0, 2] = 0.5  # off the mask, after an on-mask value and an off-mask zero
    assert message(off, base) == "expected is not exactly 0 off the mask at [0, 2]: 0.5"
    assert message(base, off) == "actual is not exactly 0 off the mask at [0, 2]: 0.5"
    nan = base.clone()
    nan[0, 3] = float("nan")
    assert message(base, nan) == "NaN/inf positions differ between expected and actual"
    far = base.clone()
    far[0, 0] += 1e-6  # within the tolerance
    far[0, 3] += 0.5  # the largest difference, at [0, 3]
    assert message(base, far) == (
        "logprobs differ beyond the torch.float32 tolerance (max 1e-05, mean None): "
        "max |Δ| = 0.5 at [0, 3] (expected -2, actual -1.5), mean |Δ| = 0.25")

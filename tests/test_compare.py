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

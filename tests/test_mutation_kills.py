"""Tests written to kill mutmut survivors that the registry checks let through (docs/mutation.md).

Each test states a contract the spec already makes but no registry check enforced:
- bad input gets an error *naming the argument and the row* (the `errors` check compares types);
- per-token float outputs are float32 whatever the global default dtype;
- the max_seq_len warning says which width exceeded which limit.
Test names contain the op name, so `batchproof mutate --mutmut --op rl_batch` (`-k rl_batch`) runs
them.
"""

from __future__ import annotations

import logging
import re

import pytest
import torch
from hypothesis import given

from batchproof import registry
from batchproof.compare import assert_identical
from batchproof.registry import Case

BUILD = registry.get("rl_batch.build_rl_batch")
VALUES = registry.get("rl_batch.response_values")
P, R = [[1, 2], [3]], [[4], [5, 6]]
NJT = lambda rows, dtype: torch.nested.nested_tensor(  # noqa: E731
    [torch.tensor(r, dtype=dtype) for r in rows], layout=torch.jagged)

# (call, exception type, regex the message must match): one per error path of impl/rl_batch.py
BAD_RL_BATCH = {
    "pad_token_id float": ((P, R), {"pad_token_id": 0.5}, TypeError, r"\bpad_token_id\b.*float"),
    "unknown layout": ((P, R), {"pad_token_id": 0, "layout": "right"}, ValueError,
                       r"\blayout\b.*'right'"),
    "counts differ": ((P, R + [[7]]), {"pad_token_id": 0}, ValueError,
                      r"\bprompts and responses\b.*\b2 prompts and 3 responses"),
    "empty batch": (([], []), {"pad_token_id": 0}, ValueError, r"^prompts is empty"),
    "prompts not a list": (("ab", R), {"pad_token_id": 0}, TypeError, r"^prompts\b.*\bstr\b"),
    "responses float token": ((P, [[4], [5, 6.5]]), {"pad_token_id": 0}, TypeError,
                              r"^responses\[1\]"),
    "prompts str token": (([[1], [2, "3"]], R), {"pad_token_id": 0}, TypeError,
                          r"^prompts\[1\].*\bstr\b"),
    "prompts float tensor": (([torch.tensor([1]), torch.tensor([2.0])], R), {"pad_token_id": 0},
                             TypeError, r"^prompts\[1\].*float"),
    "responses 2-D tensor": ((P, [torch.tensor([4]), torch.tensor([[5, 6]])]),
                             {"pad_token_id": 0}, ValueError, r"^responses\[1\].*1-D"),
    "prompts float jagged": ((NJT(P, torch.float32), R), {"pad_token_id": 0}, TypeError,
                             r"\bprompts\b.*integer"),
    "responses bool jagged": ((P, NJT(R, torch.bool)), {"pad_token_id": 0}, TypeError,
                              r"\bresponses\b.*integer"),
    "rewards count": ((P, R), {"pad_token_id": 0, "rewards": [[1.0]]}, ValueError,
                      r"^rewards\b.*\b1 entries for 2 samples"),
    "logprobs jagged count": ((P, R), {"pad_token_id": 0, "logprobs": NJT([[0.5]], torch.float32)},
                              ValueError, r"^logprobs\b.*\b1 entries for 2 samples"),
    "loss_masks row length": ((P, R), {"pad_token_id": 0, "loss_masks": [[1.0], [1.0]]},
                              ValueError, r"^loss_masks\[1\] has 1 entries.*response 1 has 2"),
    "logprobs jagged row length": ((P, R), {"pad_token_id": 0,
                                            "logprobs": NJT([[0.5], [0.5, 0.5, 0.5]],
                                                            torch.float32)},
                                   ValueError, r"^logprobs\[1\] has 3 entries.*response 1 has 2"),
    "rewards 2-D tensor row": ((P, R), {"pad_token_id": 0,
                                        "rewards": [torch.zeros(1), torch.zeros(1, 2)]},
                               ValueError, r"^rewards\[1\].*1-D"),
    "rewards 1x1 tensor row": ((P, R), {"pad_token_id": 0,
                                        "rewards": [torch.zeros(1, 1), torch.zeros(2)]},
                               ValueError, r"^rewards\[0\].*1-D"),
    "loss_masks scalar row": ((P, R), {"pad_token_id": 0, "loss_masks": [[1.0], 1.0]},
                              ValueError, r"^loss_masks\[1\].*scalar"),
    "logprobs scalar row": ((P, R), {"pad_token_id": 0, "logprobs": [-0.5, [0.1, 0.2]]},
                            ValueError, r"^logprobs\[0\].*scalar"),
    "rewards scalar tensor row length": ((P, R), {"pad_token_id": 0,
                                                  "rewards": [[0.5], torch.zeros(3)]},
                                         ValueError, r"^rewards\[1\]"),
    "loss_masks not a list": ((P, R), {"pad_token_id": 0, "loss_masks": 3}, TypeError,
                              r"^loss_masks\b.*\bint\b"),
}

BAD_RESPONSE_VALUES = {
    "1-D values": ((torch.zeros(3), torch.ones(2, 3)), ValueError, r"\bvalues\b.*2-D \(B, R\)"),
    "1-D mask": ((torch.zeros(2, 3), torch.ones(3)), ValueError, r"\bresponse_mask\b.*2-D"),
    "shapes differ": ((torch.zeros(2, 3), torch.ones(2, 4)), ValueError,
                      r"^values \(2, 3\) and response_mask \(2, 4\) must have the same shape"),
}


def _raised(call, *args, **kwargs) -> BaseException:
    with pytest.raises(Exception) as info:
        call(*args, **kwargs)
    return info.value


@pytest.mark.parametrize("name", BAD_RL_BATCH)
def test_rl_batch_error_names_argument_and_row(name: str) -> None:
    args, kwargs, kind, pattern = BAD_RL_BATCH[name]
    expected = _raised(BUILD.reference, *args, **kwargs)
    assert type(expected) is kind, f"the reference raised {expected!r}"
    actual = _raised(BUILD.impl, *args, **kwargs)
    assert type(actual) is kind, f"impl raised {actual!r}, reference {expected!r}"
    assert re.search(pattern, str(actual)), f"{name}: {actual!r} does not match {pattern!r}"


@pytest.mark.parametrize("name", BAD_RESPONSE_VALUES)
def test_rl_batch_response_values_error_messages(name: str) -> None:
    args, kind, pattern = BAD_RESPONSE_VALUES[name]
    actual = _raised(VALUES.impl, *args)
    assert type(actual) is kind and re.search(pattern, str(actual)), repr(actual)


def _argument_named(message: str) -> str:
    """`rewards[1] has ...` → `rewards[1]`; `layout must ...` → `layout`."""
    match = re.match(r"(\w+)(\[\d+\])?", message)
    assert match, message
    return match[0]


@given(bad=BUILD.invalid)
def test_rl_batch_errors_name_what_the_reference_names(bad) -> None:
    """Whatever the wording, impl's message names the argument (and row) the reference's does."""
    expected = _raised(bad.case.call, BUILD.reference)
    actual = _raised(bad.case.call, BUILD.impl)
    named = _argument_named(str(expected))
    assert re.search(rf"(?<!\w){re.escape(named)}(?!\w)", str(actual)), (
        f"{bad.why}: impl said {actual!r}, which does not name {named!r} ({expected!r})")


@given(case=BUILD.valid)
def test_rl_batch_float_outputs_are_float32_under_float64_default(case: Case) -> None:
    """torch.set_default_dtype(torch.float64) (common in scientific code) must not leak into the
    float32 per-token outputs."""
    expected = case.call(BUILD.reference)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        actual = case.call(BUILD.impl)
    finally:
        torch.set_default_dtype(previous)
    assert_identical(expected, actual)


def test_rl_batch_max_seq_len_warning_names_width_and_limit(caplog) -> None:
    case = Case(([[1, 2, 3], [4]], [[5, 6], [7]]), {"pad_token_id": 0, "max_seq_len": 3})
    messages = []
    for function in (BUILD.reference, BUILD.impl):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            case.call(function)
        messages.append([r.getMessage() for r in caplog.records if r.levelno == logging.WARNING])
    assert messages[0] == ["batch sequence width 5 exceeds max_seq_len 3 (not truncated)"]
    assert messages[1] == messages[0]


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_rl_batch_jagged_values_of_any_float_dtype_become_float32(dtype: torch.dtype) -> None:
    """A float64/bf16 jagged logprobs or rewards tensor is converted to float32 like a list."""
    rows = [[0.1, 1 / 3], [2.0 ** -20, -7.25, 1e-3]]
    kwargs = {"pad_token_id": 0, "logprobs": NJT(rows, dtype), "rewards": NJT(rows, dtype),
              "loss_masks": NJT([[1, 0], [0, 1, 1]], dtype)}
    case = Case(([[1], [2, 3]], [[4, 5], [6, 7, 8]]), kwargs)
    as_lists = Case(case.args, {k: [r.tolist() for r in v.unbind()] if k != "pad_token_id"
                                else v for k, v in kwargs.items()})
    assert_identical(as_lists.call(BUILD.reference), case.call(BUILD.impl))

"""Comparators: exact structural identity and the per-token logprob tolerance policy.

`assert_identical(expected, actual)` is stricter than `torch.equal` (which ignores dtype) and than
tensordict's `assert_close` (which ignores non-tensor entries and jagged offsets):

    structure   same TensorDict keys, batch size, non-tensor entries (type and value)
    per tensor  same layout (strided / jagged), jagged offsets identical, shape, dtype,
                device (unless the op is device-generic), and values: floats by bit pattern,
                so -0.0 vs +0.0 and NaN payloads count as differences (across devices a NaN
                matches any NaN: x86 makes inf - inf a negative NaN, CUDA a positive one)

A failure reads like this (the op supplies the row description and the layout picture):

    'input_ids' differs: first mismatch at [1, 4]: expected 17, actual 0 (2 elements, 1 row)
    row 1: p=2 r=3
      expected  ..pprrr
      actual    ..pxxrr      (. pad, p prompt, r response, x mismatch)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

Picture = Callable[[Any], Mapping[str, list[str]]]
RowInfo = Callable[[int], str]

_INT_VIEW = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}

LOGPROB_TOLERANCE = {
    # dtype: (max |Δ|, mean |Δ| or None) — see the varlen spec
    torch.float32: (1e-5, None),
    torch.bfloat16: (2e-2, 2e-3),
    torch.float16: (2e-2, 2e-3),
}


class Mismatch(AssertionError):
    """Raised by the comparators; the message is meant for a person. `path` names where the
    first difference is (`"loss_mask"`, `"loss_mask.offsets()"`, `"[0]"`), "" when unknown."""

    def __init__(self, message: str = "", path: str = "") -> None:
        super().__init__(message)
        self.path = path

    @property
    def field(self) -> str:
        """Where in the output the first difference is: a TensorDict key (`"loss_mask"`), an
        element of a tuple or list output (`"[2]"`), or "" (the output itself: a tensor)."""
        path = self.path.lstrip(".")
        if path.startswith("["):
            return path[: path.index("]") + 1]
        return path.split(".")[0].split("[")[0]


def assert_identical(
    expected: Any,
    actual: Any,
    *,
    allow_device: bool = False,
    picture: Picture | None = None,
    describe_row: RowInfo | None = None,
    compared: str = "",
    case: Any = None,  # the drawn call; tolerance comparators read masks and dtypes from it
) -> None:
    """Raise `Mismatch` (an `AssertionError`) unless `actual` is exactly `expected`.

    Exactly: TensorDicts with the same keys, batch size and non-tensor entries (type and value:
    `1`, `True` and `1.0` differ); tensors with the same layout (strided or jagged; jagged
    offsets identical), shape, dtype, device and values, floats compared by bit pattern (so
    `-0.0` and `0.0` differ, and NaN payloads count); lists, tuples, dicts and scalars
    recursively, with their types. The message names the first difference, counts the
    mismatching elements and rows, and draws up to two rows.

    allow_device: tensors may sit on different devices (a CUDA result against a CPU oracle).
    picture: output -> {tensor family: one string per row} (`.` pad, `p` prompt, `r`
        response), used to draw a mismatching row; without it a row is drawn as `#`s.
    describe_row: row index -> a description of that row's input (`p=2 r=3`).
    compared: what was compared, added as the message's last line.

    >>> import torch
    >>> from batchproof import assert_identical
    >>> assert_identical(torch.tensor([0.0, 1.0]), torch.tensor([-0.0, 1.0]))
    Traceback (most recent call last):
    ...
    batchproof.compare.Mismatch: output: values differ: first mismatch at [0]: expected 0.0, ...
    """
    problem = _first_difference(expected, actual, "", allow_device)
    if problem is None:
        return
    path, text, rows, columns = problem
    lines = [f"{path or 'output'}: {text}"]
    for row in rows[:2]:
        lines += _row_report(expected, actual, path, row, columns.get(row, ()), picture, describe_row)
    if compared:
        lines.append(f"compared: {compared}")
    raise Mismatch("\n".join(lines), path=path)


def _first_difference(expected: Any, actual: Any, path: str, allow_device: bool):
    """(path, description, mismatching rows, {row: columns}) of the first difference, or None."""
    if isinstance(expected, TensorDictBase) or isinstance(actual, TensorDictBase):
        return _diff_tensordict(expected, actual, path, allow_device)
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        return _diff_tensor(expected, actual, path, allow_device)
    if isinstance(expected, np.ndarray) or isinstance(actual, np.ndarray):
        return _diff_array(expected, actual, path)
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        if type(expected) is not type(actual) or len(expected) != len(actual):
            return path, f"expected {_kind(expected)} of {len(expected)}, got "\
                f"{_kind(actual)} of {len(actual)}", [], {}
        for i, (e, a) in enumerate(zip(expected, actual)):
            found = _first_difference(e, a, f"{path}[{i}]", allow_device)
            if found is not None:
                return found
        return None
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        if list(expected) != list(actual):
            return path, f"keys differ: expected {list(expected)}, got {list(actual)}", [], {}
        for key in expected:
            found = _first_difference(expected[key], actual[key], f"{path}.{key}", allow_device)
            if found is not None:
                return found
        return None
    if type(expected) is not type(actual) or expected != actual:
        return path, f"expected {expected!r} ({_kind(expected)}), got {actual!r} "\
            f"({_kind(actual)})", [], {}
    return None


def _diff_array(expected: Any, actual: Any, path: str):
    """NumPy arrays (per-sample inputs such as router-replay routes): the same type, dtype,
    shape and bytes."""
    if not (isinstance(expected, np.ndarray) and isinstance(actual, np.ndarray)):
        return path, f"expected {_kind(expected)}, got {_kind(actual)}", [], {}
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        return path, (f"expected a NumPy array {expected.shape} {expected.dtype}, got "
                      f"{actual.shape} {actual.dtype}"), [], {}
    if expected.tobytes() != actual.tobytes():
        return path, "NumPy array values differ", [], {}
    return None


def _diff_tensordict(expected: Any, actual: Any, path: str, allow_device: bool):
    if not (isinstance(expected, TensorDictBase) and isinstance(actual, TensorDictBase)):
        return path, f"expected {_kind(expected)}, got {_kind(actual)}", [], {}
    if expected.batch_size != actual.batch_size:
        return path, f"batch_size differs: expected {list(expected.batch_size)}, "\
            f"got {list(actual.batch_size)}", [], {}
    e_keys, a_keys = set(expected.keys()), set(actual.keys())
    if e_keys != a_keys:
        return path, f"keys differ: missing {sorted(e_keys - a_keys)}, "\
            f"unexpected {sorted(a_keys - e_keys)}", [], {}
    for key in sorted(e_keys):
        e_nt, a_nt = expected.is_non_tensor(key), actual.is_non_tensor(key)
        sub = f"{path}.{key}" if path else key
        if e_nt != a_nt:
            return sub, "one side stores it as a non-tensor entry, the other as a tensor", [], {}
        e_val = expected.get_non_tensor(key) if e_nt else expected.get(key)
        a_val = actual.get_non_tensor(key) if a_nt else actual.get(key)
        found = _first_difference(e_val, a_val, sub, allow_device)
        if found is not None:
            return found
    return None


def _diff_tensor(expected: Any, actual: Any, path: str, allow_device: bool):
    if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
        return path, f"expected {_kind(expected)}, got {_kind(actual)}", [], {}
    if expected.is_nested != actual.is_nested or expected.layout != actual.layout:
        return path, f"layout differs: expected {_layout(expected)}, got {_layout(actual)}", [], {}
    if expected.dtype != actual.dtype:
        return path, f"dtype differs: expected {expected.dtype}, got {actual.dtype}", [], {}
    if expected.device != actual.device and not allow_device:
        return path, f"device differs: expected {expected.device}, got {actual.device}", [], {}
    if expected.is_nested:
        found = _diff_tensor(expected.offsets(), actual.offsets(), f"{path}.offsets()", allow_device)
        if found is not None:
            return found
        if expected._ragged_idx != actual._ragged_idx:  # noqa: SLF001 - part of the layout
            return path, "jagged (ragged) dimension differs", [], {}
        return _diff_tensor(expected.values(), actual.values(), f"{path}.values()", allow_device)
    if expected.shape != actual.shape:
        return path, f"shape differs: expected {tuple(expected.shape)}, "\
            f"got {tuple(actual.shape)}", _rows_of_shape(expected, actual), {}
    e, a = expected.detach().cpu(), actual.detach().cpu()  # one copy each from a device
    differ = _bits(e) != _bits(a)
    if e.is_complex():  # compared as (real, imaginary) pairs: an element differs if either does
        differ = differ.any(-1)
    if allow_device and e.is_floating_point():  # a NaN's sign and payload: the device's
        differ &= ~(e.isnan() & a.isnan())
    if not bool(differ.any()):
        return None
    where = differ.nonzero()
    first = tuple(int(i) for i in where[0])
    e_val, a_val = e[first].item(), a[first].item()
    rows = sorted({int(w[0]) for w in where}) if expected.dim() >= 2 else []
    # a row's picture runs along dim 1 (a 3-D output's rows are drawn by position, not by the
    # last axis): the columns to mark are those positions
    columns = {r: sorted({int(w[1]) for w in where if int(w[0]) == r}) for r in rows[:2]}
    text = (f"values differ: first mismatch at {list(first)}: expected {e_val!r}, actual {a_val!r} "
            f"({int(differ.sum())} elements in {max(len(rows), 1)} row(s)); "
            f"shape {tuple(expected.shape)}, {expected.dtype}")
    if expected.is_floating_point() and e_val == 0 and a_val == 0:
        text += _beyond_signed_zeros(e, a, differ)
    return path, text, rows, columns


def _beyond_signed_zeros(expected: torch.Tensor, actual: torch.Tensor,
                         differ: torch.Tensor) -> str:
    """When the first mismatch is 0.0 against -0.0: the first mismatch that is not a zero of the
    other sign, or the news that there is none (a shifted row of zeros reads as pedantry)."""
    zero_signs = differ & (expected == 0) & (actual == 0)
    other = differ & ~zero_signs
    if not bool(other.any()):
        return (f"; the tensors differ only in the sign of zero ({int(zero_signs.sum())} "
                "elements: -0.0 against 0.0)")
    where = tuple(int(i) for i in other.nonzero()[0])
    return (f"; first mismatch other than the sign of a zero at {list(where)}: expected "
            f"{expected[where].item()!r}, actual {actual[where].item()!r}")


def _rows_of_shape(expected: torch.Tensor, actual: torch.Tensor) -> list[int]:
    if expected.dim() >= 2 and actual.dim() >= 2 and expected.shape[0] == actual.shape[0]:
        return [0]
    return []


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Integer view of a tensor so that comparison is by bit pattern for floats."""
    if t.dtype in _INT_VIEW:
        return t.contiguous().view(_INT_VIEW[t.dtype])
    if t.is_complex():
        return _bits(torch.view_as_real(t))
    return t


def _row_report(expected, actual, path, row, columns, picture, describe_row) -> list[str]:
    lines = [f"row {row}: {describe_row(row)}" if describe_row else f"row {row}:"]
    key = path.split(".")[0].split("[")[0]
    e_row = _picture_row(expected, key, row, picture)
    a_row = _picture_row(actual, key, row, picture)
    if a_row is not None:
        a_row = "".join("x" if j in columns else c for j, c in enumerate(a_row))
    lines.append(f"  expected  {e_row if e_row is not None else '(no picture)'}")
    lines.append(f"  actual    {a_row if a_row is not None else '(no picture)'}")
    pictured = e_row is not None and set(e_row) - {"#"}
    lines.append("  (. pad, p prompt, r response, x mismatch)" if pictured
                 else "  (# a column, x mismatch)")
    return lines


def _picture_row(td: Any, key: str, row: int, picture: Picture | None) -> str | None:
    """The layout picture of `row` for the tensor `key`, chosen by width."""
    if not isinstance(td, TensorDictBase) or key not in td.keys() or td.is_non_tensor(key):
        return None
    tensor = td.get(key)
    if not isinstance(tensor, torch.Tensor):  # a TensorDict inside the TensorDict: no picture
        return None
    if tensor.is_nested or tensor.dim() < 2 or row >= tensor.shape[0]:
        return None
    width = tensor.shape[-1] if tensor.dim() == 2 else tensor.shape[1]
    if picture is not None:
        try:
            families = picture(td)
        except Exception:  # a broken output may not support its own picture
            families = {}
        for rows in families.values():
            if row < len(rows) and len(rows[row]) == width:
                return rows[row]
    return "#" * width


def assert_logprobs_close(
    expected: torch.Tensor, actual: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype
) -> dict[str, float]:
    """Per-token comparison under `mask` with the tolerance of `dtype` (varlen spec).

    Off the mask both must be exactly zero; NaN/inf positions must be identical. Returns the
    measured `max_abs` and `mean_abs` |Δ| under the mask.
    """
    max_tol, mean_tol = LOGPROB_TOLERANCE[dtype]
    if expected.shape != actual.shape:
        raise Mismatch(f"logprob shapes differ: expected {tuple(expected.shape)}, "
                       f"got {tuple(actual.shape)}")
    if expected.dtype != actual.dtype:
        raise Mismatch(f"logprob dtypes differ: expected {expected.dtype}, got {actual.dtype}")
    e, a, m = expected.detach().cpu(), actual.detach().cpu(), mask.detach().cpu().bool()
    for name, t in (("expected", e), ("actual", a)):
        off = t[~m]
        if bool((off != 0).any()):
            bad = (~m & (t != 0)).nonzero()[0].tolist()
            raise Mismatch(f"{name} is not exactly 0 off the mask at {bad}: {t[tuple(bad)].item()}")
    e_bad, a_bad = ~torch.isfinite(e) & m, ~torch.isfinite(a) & m
    if not torch.equal(e_bad, a_bad) or not torch.equal(e[e_bad].isnan(), a[a_bad].isnan()):
        raise Mismatch("NaN/inf positions differ between expected and actual")
    finite = m & ~e_bad
    delta = (e[finite].double() - a[finite].double()).abs()
    max_abs = float(delta.max()) if delta.numel() else 0.0
    mean_abs = float(delta.mean()) if delta.numel() else 0.0
    if max_abs > max_tol or (mean_tol is not None and mean_abs > mean_tol):
        where = (finite & ((e.double() - a.double()).abs() == max_abs)).nonzero()[0].tolist()
        raise Mismatch(
            f"logprobs differ beyond the {dtype} tolerance (max {max_tol}, mean {mean_tol}): "
            f"max |Δ| = {max_abs:.3g} at {where} (expected {e[tuple(where)].item():.6g}, "
            f"actual {a[tuple(where)].item():.6g}), mean |Δ| = {mean_abs:.3g}"
        )
    return {"max_abs": max_abs, "mean_abs": mean_abs}


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor({_layout(value)}, {value.dtype})"
    return type(value).__name__


def _layout(t: torch.Tensor) -> str:
    if t.is_nested:
        return f"jagged, values {tuple(t.values().shape)}"
    return f"strided {tuple(t.shape)}"

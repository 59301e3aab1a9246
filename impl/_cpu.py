"""What the ops' CPU fast paths share: whether they apply, which inputs are plain Python rows,
and the bytes of a tensor that rows are packed (`struct.pack_into`) or copied (memoryview slice
assignment) into."""

from __future__ import annotations

import marshal

import numpy as np
import torch

FAST_PATHS = True  # off: the CPU runs the device-generic code CUDA runs (batchproof.placements)
ASKED = 0  # how many times fast_paths() was asked: an op that never asks has one code path


def fast_paths(device: torch.device) -> bool:
    """Whether the CPU-only code applies (list packing, row copies, the compiled kernels): a CPU
    device with FAST_PATHS on. Off, the CPU runs exactly the device-generic torch code that CUDA
    runs, which is how `batchproof verify` checks that code on a machine without a GPU."""
    global ASKED
    ASKED += 1
    return device.type == "cpu" and FAST_PATHS


def plain_rows(rows) -> bool:
    """A list or tuple whose rows are all lists or tuples (what `struct.pack_into` can take)."""
    return isinstance(rows, (list, tuple)) and set(map(type, rows)) <= {list, tuple}


def byte_view(tensor: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor as a writable memoryview (a zero-size tensor gives an
    empty one: a zero-size buffer cannot be cast)."""
    if tensor.numel() == 0:
        return memoryview(bytearray())
    return memoryview(tensor.contiguous().numpy()).cast("B")


_INT_CODE, _ROW_CODES = ord("i"), (ord("["), ord("("))


def small_int_rows(rows) -> np.ndarray | None:
    """One or more rows (lists / tuples) of plain ints in the int32 range, concatenated (int32),
    read and type-checked in C by `marshal`; None if any value is anything else (a bool, a float,
    a numpy or other int-like, an int beyond int32): the caller's general path decides then.

    marshal format 2 (no back-references) writes such a row as 5-byte units, each a type code
    and a little-endian int32:

        [1, 2]  ->  '[' 2 | 'i' 1 | 'i' 2          a row header, then one unit per int

    Any other value writes another type code (or another size) at its unit's first byte; as
    the rows' headers sit where their lengths say, one count of 'i' codes checks every value.
    """
    try:
        blob = b"".join([marshal.dumps(row, 2) for row in rows])
    except ValueError:  # not marshallable at all
        return None
    lengths = np.fromiter(map(len, rows), np.int64, count=len(rows))
    items = int(lengths.sum())
    if len(blob) != 5 * (len(rows) + items):
        return None
    codes = np.frombuffer(blob, np.uint8)[::5]
    headers = np.cumsum(lengths + 1) - lengths - 1
    if np.count_nonzero(codes == _INT_CODE) != items or not np.isin(codes[headers],
                                                                     _ROW_CODES).all():
        return None
    units = np.ndarray((len(rows) + items,), "<i4", blob, offset=1, strides=(5,))
    is_item = np.ones(units.shape[0], dtype=bool)
    is_item[headers] = False
    return units[is_item]

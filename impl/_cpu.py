"""What the ops' CPU fast paths share: which inputs are plain Python rows, and the bytes of a
tensor that rows are packed (`struct.pack_into`) or copied (memoryview slice assignment) into."""

from __future__ import annotations

import torch


def plain_rows(rows) -> bool:
    """A list or tuple whose rows are all lists or tuples (what `struct.pack_into` can take)."""
    return isinstance(rows, (list, tuple)) and set(map(type, rows)) <= {list, tuple}


def byte_view(tensor: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor as a writable memoryview (a zero-size tensor gives an
    empty one: a zero-size buffer cannot be cast)."""
    if tensor.numel() == 0:
        return memoryview(bytearray())
    return memoryview(tensor.contiguous().numpy()).cast("B")

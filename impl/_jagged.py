"""What the ops share about jagged (NJT) inputs."""

from __future__ import annotations

from torch.nested._internal.nested_tensor import NestedTensor

from batchproof.impl._sync import documented


def without_holes(value) -> bool:
    """A 2-D jagged tensor whose values are its rows back to back (no `lengths()`: no holes),
    so `values()` and `offsets()` describe it whole; anything else is read row by row.

        offsets 0 3 5, values 5 6 7 8 9              rows [5 6 7] [8 9]    yes
        offsets 0 4 6, lengths 3 2, values 5 6 7 0 8 9  rows [5 6 7] [8 9]  no: values hold a hole

    Read from its parts: the public accessors dispatch through `__torch_function__` (~10 us).
    """
    return (type(value) is NestedTensor and value._ragged_idx == 1 and value._lengths is None
            and value._values.dim() == 1)


def rows_of(value) -> list:
    """The rows of a jagged tensor, as a list of tensors: a documented host read (its offsets
    and lengths), for the forms that are read row by row (holes, rows the reference rejects)."""
    with documented():
        return list(value.unbind())

"""Argument checks that several ops' contracts share (and that `impl/` imports from here, so
reference and impl raise the same exception with the same message)."""

from __future__ import annotations


def check_pad_token_id(pad_token_id) -> None:
    """An int (not a bool) that fits int64, the dtype of every `input_ids` output: checked up
    front, whether or not the batch needs any padding."""
    if not isinstance(pad_token_id, int) or isinstance(pad_token_id, bool):
        raise TypeError(f"pad_token_id must be an int, got {type(pad_token_id).__name__}")
    if not -2**63 <= pad_token_id < 2**63:
        raise ValueError(f"pad_token_id must fit int64 (the dtype of input_ids), got {pad_token_id}")

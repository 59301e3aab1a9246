"""Argument checks that several ops' contracts share (and that `impl/` imports from here, so
reference and impl raise the same exception with the same message)."""

from __future__ import annotations


def check_pad_token_id(pad_token_id) -> None:
    """An int (not a bool) that fits int64, the dtype of every `input_ids` output: checked up
    front, whether or not the batch needs any padding."""
    check_token_id(pad_token_id, "pad_token_id")


def check_token_id(value, name: str) -> None:
    """A token id given as an argument (`pad_token_id`, `eos_token_id`): an int, not a bool,
    that fits int64, the dtype of `input_ids`."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not -2**63 <= value < 2**63:
        raise ValueError(f"{name} must fit int64 (the dtype of input_ids), got {value}")

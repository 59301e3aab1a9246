"""What a predicate sees: one call of a contract function, read by the contract's parameter names.

A `Call` is a `Case` (`.args`, `.kwargs`) with accessors that never raise, whatever the arguments
hold (an invalid input may hold an int where rows are expected, a meta tensor, a str):

    call.arg("prompts")        the argument by its contract name (positional or keyword), or the
                               contract's default
    call.rows("prompts")       its rows (a list, a tuple, a tensor's first axis), or None
    call.lengths("prompts")    the rows' lengths, or None
    call.values(x)             a row's values as a plain list, or None
    call.valid / call.bad      whether the input is valid; for an invalid one, its `BadCase`

The adapters' predicates (`batchproof.adapters`, which re-exports `Call`) and the regime
predicates (`batchproof.regimes`) read their inputs through it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from batchproof.models import ModelCase
from batchproof.registry import BadCase, Case


@dataclass(frozen=True, repr=False)
class Call(Case):
    """One call of the contract function, as an adapter's predicates see it (module docstring):
    valid or invalid, generated or pinned. A `Case` (`.args`, `.kwargs`), plus accessors that
    never raise, whatever the arguments hold."""

    bad: BadCase | None = None  # set for an invalid input
    parameters: tuple[str, ...] = ()  # the contract's parameter names, in order
    defaults: Mapping[str, Any] = field(default_factory=dict)  # the contract's defaults

    @classmethod
    def of(cls, case: Case | BadCase, contract: Callable[..., Any] | None = None) -> Call:
        """The `Call` of a case or bad case; `contract` (the reference function) names the
        arguments."""
        if isinstance(case, Call):
            return case
        bad = case if isinstance(case, BadCase) else None
        inputs = case.case if bad is not None else case
        parameters, defaults = _signature(contract)
        args = inputs.args
        if isinstance(inputs, ModelCase):  # its model is the contract's first argument
            args = (inputs.model, *args)
        return cls(args, inputs.kwargs, inputs.label, bad, parameters, defaults)

    @property
    def valid(self) -> bool:
        return self.bad is None

    def arg(self, name: str, default: Any = None) -> Any:
        """The argument `name`: passed by keyword, or by position in the contract's signature,
        or the contract's default (else `default`)."""
        if name in self.kwargs:
            return self.kwargs[name]
        if name in self.parameters:
            index = self.parameters.index(name)
            if index < len(self.args):
                return self.args[index]
        return self.defaults.get(name, default)

    def rows(self, name: str) -> list | None:
        """The argument's rows: a list or tuple as a list, a tensor with at least one axis as
        the list of its first-axis slices; None for anything else."""
        return rows(self.arg(name))

    def lengths(self, name: str) -> list[int] | None:
        """`len()` of each row of the argument; None when it has no rows or a row has no
        length."""
        found = self.rows(name)
        if found is None:
            return None
        lengths = []
        for row in found:
            try:
                lengths.append(len(row))
            except TypeError:  # an int, a 0-d tensor
                return None
        return lengths

    @staticmethod
    def values(value: Any) -> list | None:
        """A row's values as a plain list (a tensor's `tolist()`), or None when they cannot be
        read (a meta tensor, a scalar, an object that is not a sequence)."""
        return values(value)


def rows(value: Any) -> list | None:
    """`Call.rows` of one value."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, torch.Tensor) and not value.is_nested and value.dim() >= 1:
        return list(value.unbind(0))
    return None


def values(value: Any) -> list | None:
    """`Call.values`."""
    if isinstance(value, torch.Tensor):
        if value.is_meta or value.is_nested or value.dim() == 0:
            return None
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return list(value)
    return None


def _signature(function: Callable[..., Any] | None) -> tuple[tuple[str, ...], dict[str, Any]]:
    if function is None:
        return (), {}
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return (), {}
    names = tuple(p.name for p in parameters
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    defaults = {p.name: p.default for p in parameters if p.default is not p.empty}
    return names, defaults

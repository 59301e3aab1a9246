"""Adapter liveness: can every output field an adapter compares fail?

An adapter (`batchproof.adapters.Adapter`) converts what a framework's function returns into the
contract's output. A field that the conversion fills from anything but that return value (the
inputs, the reference, a constant) never diverges, and its check passes forever.
`check_liveness(adapter, function)` finds such fields, in three steps:

    probe    the adapter runs on a few valid inputs of its record (the record's example, its
             valid pins, derandomized draws of the adapter's strategy; each in the adapter's
             domain, matched by no known divergence, and agreeing with the contract there),
             the framework's function tapped: every leaf of what it returns (a tensor, an
             array, a number, a list of numbers) is recorded at its path (`return[2]`,
             `return()['sequences']`, `return.pack()`: the call of a returned object, an item,
             a method's result);
    sweep    each leaf in turn is corrupted in the framework's own return value, before the
             adapter's conversion (`adapter.wrap(corrupted function)`): every element + 1 (a
             bool flipped), zeroed, rows reversed, the last column (element) dropped; on each
             input the contract fields that then differ are recorded, all of them (a field seen
             to differ is taken from the contract's output and the comparison repeats);
    confirm  for each compared field, a corruption that hit it is handed to `check_adapter`
             (`equivalence`, derandomized, no shrinking) with every other compared field taken
             from the contract's output: the check must report a new divergence naming that
             field.

A compared field (the record's outputs on those inputs, minus `not_provided`) that no corruption
makes differ is *dead*; one that differs but that the check does not name is *unconfirmed*.
Either is a fault of the adapter: its conversion does not take that field from the framework's
output (fix the conversion, or, when the field is not the framework's, declare it in
`not_provided`). An adapter whose `equivalence` check is skipped compares no field; its
corruptions must make one of its other checks fail instead (`Liveness.seen_by`).

Where the framework is not installed, a stand-in function of the framework's signature and
return form does as well (`tests/liveness_stand_ins.py`): the conversion is the adapter's.

Floor 2 (docs/harness.md): imports the core and `batchproof.adapters.runner`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import numbers
import warnings
from collections.abc import Callable, ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from tensordict import TensorDictBase

from batchproof import registry
from batchproof.adapters import Adapter
from batchproof.checks import HarnessError
from batchproof.registry import Case, OpInfo
from batchproof.statuses import Outcome

Path = tuple[str, ...]

# how each kind of leaf is corrupted, in the order tried (value changes before shape changes)
CORRUPTIONS = {
    "tensor": ("plus_one", "zeroed", "rows_reversed", "last_dropped"),
    "jagged": ("plus_one", "zeroed"),
    "array": ("plus_one", "zeroed", "rows_reversed", "last_dropped"),
    "number": ("plus_one", "zeroed"),
    "numbers": ("plus_one", "zeroed", "rows_reversed", "last_dropped"),
}
WHOLE_OUTPUT = ""  # the field of an output that is one tensor or one list
DRAWS = 20  # derandomized draws of the adapter's strategy per liveness run
PINS = 8  # valid pins per liveness run (the first ones)
KEEP = 4  # inputs the sweep runs on (more where fewer cannot show every field)
CONFIRM_EXAMPLES = 10  # examples of a confirming equivalence check


class LivenessError(HarnessError):
    """The liveness of an adapter could not be judged (no input to run it on): batchproof's
    failure, never a verdict on the adapter."""


@dataclass(frozen=True)
class Leaf:
    """A value in what the framework's function returns, at `path` from its return value."""

    path: Path
    kind: str  # a key of CORRUPTIONS

    def __str__(self) -> str:
        return "return" + "".join(self.path)


@dataclass(frozen=True)
class Corruption:
    """One leaf of the framework's return value changed one way (`CORRUPTIONS`)."""

    leaf: Leaf
    how: str

    def __str__(self) -> str:
        return f"{self.how} at {self.leaf}"


# --------------------------------------------------------------------------- the leaves


def _is_number(value: Any) -> bool:
    return isinstance(value, (numbers.Number, np.number, np.bool_)) and not isinstance(
        value, complex)


def _all_numbers(value: Any) -> bool:
    """A (nested) list of numbers, empty lists included."""
    return isinstance(value, list) and all(
        _is_number(item) or _all_numbers(item) for item in value)


def leaf_kind(value: Any) -> str | None:
    """The kind of leaf `value` is (a key of `CORRUPTIONS`), or None when it is not one."""
    if isinstance(value, torch.Tensor):
        return "jagged" if value.is_nested else "tensor"
    if isinstance(value, np.ndarray):
        return "array"
    if _is_number(value):
        return "number"
    if _all_numbers(value):
        return "numbers"
    return None


# --------------------------------------------------------------------------- the corruptions


def corrupt(value: Any, how: str) -> Any:
    """`value` changed the way `how` says (a new object; `value` is left as it is), or `value`
    itself where that change does not apply (reversing one row, dropping from nothing)."""
    if isinstance(value, torch.Tensor):
        return _jagged(value, how) if value.is_nested else _tensor(value, how)
    if isinstance(value, np.ndarray):
        return _array(value, how)
    if _is_number(value):
        return _number(value, how)
    if isinstance(value, list):
        return _numbers(value, how)
    return value


def _tensor(value: torch.Tensor, how: str) -> torch.Tensor:
    if how == "plus_one":
        return ~value if value.dtype == torch.bool else value + 1
    if how == "zeroed":
        return torch.zeros_like(value)
    if how == "rows_reversed":
        return value.flip(0) if value.dim() >= 1 and value.shape[0] > 1 else value
    if how == "last_dropped":
        return value[..., :-1] if value.dim() >= 1 and value.shape[-1] > 0 else value
    raise ValueError(f"unknown corruption {how!r}")


def _jagged(value: torch.Tensor, how: str) -> torch.Tensor:
    if value.layout != torch.jagged:
        return value
    values = _tensor(value.values(), how)
    return torch.nested.nested_tensor_from_jagged(
        values, offsets=value.offsets(), jagged_dim=value._ragged_idx)  # noqa: SLF001


def _array(value: np.ndarray, how: str) -> np.ndarray:
    if how == "plus_one":
        return ~value if value.dtype == np.bool_ else value + 1
    if how == "zeroed":
        return np.zeros_like(value)
    if how == "rows_reversed":
        return value[::-1].copy() if value.ndim >= 1 and value.shape[0] > 1 else value
    if how == "last_dropped":
        return value[..., :-1].copy() if value.ndim >= 1 and value.shape[-1] > 0 else value
    raise ValueError(f"unknown corruption {how!r}")


def _number(value: Any, how: str) -> Any:
    if isinstance(value, (bool, np.bool_)):
        return (not value) if how == "plus_one" else (False if how == "zeroed" else value)
    if how == "plus_one":
        return value + 1
    if how == "zeroed":
        return type(value)(0)
    return value


def _numbers(value: list, how: str) -> list:
    if how in ("plus_one", "zeroed"):
        return [_numbers(item, how) if isinstance(item, list) else _number(item, how)
                for item in value]
    if how == "rows_reversed":
        return value[::-1] if len(value) > 1 else value
    if how == "last_dropped":
        return value[:-1] if value else value
    raise ValueError(f"unknown corruption {how!r}")


# --------------------------------------------------------------------------- the tap


class Tap:
    """What a tapped framework function returns flows through `flow`: every leaf is recorded,
    and the one at the corruption's path (if any) is corrupted on its way to the adapter.

    Containers (tuples, lists, mappings, TensorDicts, dataclasses) are walked and rebuilt only
    where a leaf changed; any other object (a collator the adapter calls, a batch object it
    indexes, a packer whose method it calls) is handed over behind a `Tapped` proxy, so that
    what the adapter takes from it flows through the tap too."""

    def __init__(self, corruption: Corruption | None = None) -> None:
        self.corruption = corruption
        self.leaves: dict[Path, str] = {}
        self.changed = 0  # how many values the corruption changed

    def flow(self, value: Any, path: Path, nested: bool = False) -> Any:
        """`value` as the adapter receives it: itself, corrupted, rebuilt around a corrupted
        leaf, or (an object handed to the adapter itself, not `nested` in a container) behind
        a `Tapped` proxy."""
        kind = leaf_kind(value)
        if kind is not None:
            self.leaves.setdefault(path, kind)
            return self._corrupted(value, path)
        if value is None or isinstance(value, (str, bytes, type, KeysView, ValuesView,
                                               ItemsView)):
            return value
        if not nested and (callable(value) or not _plain(value)):
            # a collator, a packer, a batch object read by key: what the adapter takes from
            # it is tapped (a proxy is never put into a container, which may check types)
            return Tapped(value, path, self)
        if isinstance(value, TensorDictBase):
            return self._tensordict(value, path)
        if isinstance(value, tuple):
            items = [self.flow(item, (*path, f"[{i}]"), True) for i, item in enumerate(value)]
            return value if _same(items, value) else _tuple_like(value, items)
        if isinstance(value, list):
            items = [self.flow(item, (*path, "[*]"), True) for item in value]
            return value if _same(items, value) else type(value)(items)
        if isinstance(value, Mapping):
            return self._mapping(value, path)
        if dataclasses.is_dataclass(value):
            return self._attributes(value, path, [f.name for f in dataclasses.fields(value)])
        if callable(value):
            return value  # a function in a container: not data
        return self._attributes(value, path, [name for name in getattr(value, "__dict__", {})
                                              if not name.startswith("_")])

    def _corrupted(self, value: Any, path: Path) -> Any:
        if self.corruption is None or self.corruption.leaf.path != path:
            return value
        changed = corrupt(value, self.corruption.how)
        self.changed += changed is not value
        return changed

    def _tensordict(self, td: TensorDictBase, path: Path) -> TensorDictBase:
        out = td
        for key in list(td.keys()):
            non_tensor = td.is_non_tensor(key)
            value = td.get_non_tensor(key) if non_tensor else td.get(key)
            new = self.flow(value, (*path, f"[{key!r}]"), True)
            if new is value:
                continue
            out = out.clone(recurse=False) if out is td else out
            try:
                if non_tensor:
                    out.set_non_tensor(key, new)
                else:
                    out.set(key, new)
            except Exception:  # noqa: BLE001 - a shape the TensorDict refuses: not applicable
                self.changed -= 1
        return out

    def _mapping(self, value: Mapping, path: Path) -> Mapping:
        changes = {}
        for key in list(value.keys()):
            item = value[key]
            new = self.flow(item, (*path, f"[{key!r}]"), True)
            if new is not item:
                changes[key] = new
        if not changes:
            return value
        out = copy.copy(value)
        try:
            for key, new in changes.items():
                out[key] = new
        except Exception:  # noqa: BLE001 - a value the mapping refuses: not applicable
            self.changed -= 1
            return value
        return out

    def _attributes(self, value: Any, path: Path, names: list[str]) -> Any:
        """An object in a container (a dataclass, an object holding tensors), walked by its
        attributes; a copy where one changed."""
        changes = {}
        for name in names:
            item = getattr(value, name)
            new = self.flow(item, (*path, f".{name}"), True)
            if new is not item:
                changes[name] = new
        if not changes:
            return value
        out = copy.copy(value)
        for name, new in changes.items():
            object.__setattr__(out, name, new)
        return out


def _plain(value: Any) -> bool:
    """Plain data, walked where it is: a tuple, a list, a dict, a TensorDict, a dataclass."""
    return (isinstance(value, (tuple, list, TensorDictBase)) or type(value) is dict
            or (dataclasses.is_dataclass(value) and not isinstance(value, type)))


def _same(items: list, originals: Iterable) -> bool:
    return all(a is b for a, b in zip(items, originals))


def _tuple_like(original: tuple, items: list) -> tuple:
    if hasattr(original, "_fields"):  # a namedtuple
        return type(original)(*items)
    return type(original)(items)


def _key(key: Any) -> str:
    if isinstance(key, slice):
        parts = ["" if part is None else str(part) for part in (key.start, key.stop)]
        return ":".join(parts) + (f":{key.step}" if key.step is not None else "")
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return "*"  # a row of a sequence: every row is one leaf
    return repr(key)


class Tapped:
    """A framework's object (not plain data) as the adapter sees it through a `Tap`: what the
    adapter takes from it (an attribute, an item, a row, the result of calling it or one of
    its methods) flows through the tap, at the path that names how it was taken."""

    __slots__ = ("_path", "_tap", "_target")

    def __init__(self, target: Any, path: Path, tap: Tap) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_tap", tap)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if callable(value) and not isinstance(value, (type, torch.Tensor)):
            def method(*args: Any, **kwargs: Any) -> Any:
                return self._tap.flow(value(*args, **kwargs), (*self._path, f".{name}()"))

            return method
        return self._tap.flow(value, (*self._path, f".{name}"))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tap.flow(self._target(*args, **kwargs), (*self._path, "()"))

    def __getitem__(self, key: Any) -> Any:
        return self._tap.flow(self._target[key], (*self._path, f"[{_key(key)}]"))

    def __iter__(self):
        for item in self._target:
            yield self._tap.flow(item, (*self._path, "[*]"))

    def __len__(self) -> int:
        return len(self._target)

    def __contains__(self, item: Any) -> bool:
        return item in self._target

    def __bool__(self) -> bool:
        return bool(self._target)

    def __repr__(self) -> str:
        return f"Tapped({self._target!r})"


def tapped(function: Callable[..., Any], tap: Tap) -> Callable[..., Any]:
    """`function` (the framework's: a function or a class) with its return value flowing
    through `tap`."""
    def framework(*args: Any, **kwargs: Any) -> Any:
        return tap.flow(function(*args, **kwargs), ())

    framework.__name__ = getattr(function, "__name__", "framework")
    framework.__qualname__ = getattr(function, "__qualname__", framework.__name__)
    framework.__module__ = getattr(function, "__module__", __name__)
    return framework


def corrupted(function: Callable[..., Any], corruption: Corruption) -> Callable[..., Any]:
    """The framework's function with one leaf of its return value corrupted."""
    return tapped(function, Tap(corruption))


# --------------------------------------------------------------------------- the fields


def output_fields(output: Any) -> list[str]:
    """The fields of a contract output, as a check's `Mismatch.field` names them: a TensorDict's
    keys, a tuple's elements (`"[2]"`), or `""` for an output that is one tensor or one list."""
    if isinstance(output, TensorDictBase):
        return list(output.keys())
    if isinstance(output, tuple):
        return [f"[{i}]" for i in range(len(output))]
    return [WHOLE_OUTPUT]


def _named(shown_field: str, fields: set[str]) -> str | None:
    """The compared field a mismatch's field is (an element of a list output is the output)."""
    if shown_field in fields:
        return shown_field
    if fields == {WHOLE_OUTPUT}:
        return WHOLE_OUTPUT
    return None


def splice(out: Any, expected: Any, hidden: set[str]) -> Any:
    """`out` with the `hidden` fields taken from `expected` (removed where `expected` has none);
    `out` itself when the two are not of one structure (the comparison then says so)."""
    if not hidden:
        return out
    if isinstance(out, TensorDictBase) and isinstance(expected, TensorDictBase):
        spliced = out.clone(recurse=False)
        for key in hidden:
            try:
                if key in expected.keys():
                    if expected.is_non_tensor(key):
                        spliced.set_non_tensor(key, expected.get_non_tensor(key))
                    else:
                        spliced.set(key, expected.get(key))
                elif key in spliced.keys():
                    del spliced[key]
            except Exception:  # noqa: BLE001 - another batch size: the comparison says so
                return out
        return spliced
    if (isinstance(out, tuple) and isinstance(expected, tuple)
            and len(out) == len(expected)):
        return tuple(expected[i] if f"[{i}]" in hidden else item for i, item in enumerate(out))
    return out


def only_showing(candidate: Callable[..., Any], reference: Callable[..., Any],
                 hidden: set[str]) -> Callable[..., Any]:
    """`candidate` with its `hidden` fields replaced by the reference's (on the same call)."""
    if not hidden:
        return candidate

    def spliced(*args: Any, **kwargs: Any) -> Any:
        out = candidate(*args, **kwargs)
        return splice(out, reference(*args, **kwargs), hidden)

    return spliced


def _blind_to(info: OpInfo, hidden: set[str]) -> OpInfo:
    """`info` whose comparator takes the `hidden` fields of the actual output from the
    expected one (they cannot differ)."""
    if not hidden:
        return info
    compare = info.compare

    def compare_the_rest(expected: Any, actual: Any, **kwargs: Any) -> None:
        compare(expected, splice(actual, expected, hidden), **kwargs)

    return dataclasses.replace(info, compare=compare_the_rest)


def fields_differing(info: OpInfo, case: Case, candidate: Callable[..., Any],
                     fields: set[str], hidden: Iterable[str] = ()) -> set[str]:
    """The compared fields, beyond `hidden`, in which `candidate` differs from the contract on
    `case`: the check names the first; each one named is hidden and the comparison repeats."""
    from batchproof.adapters.runner import observe

    hidden = set(hidden)
    found: set[str] = set()
    while True:
        try:
            shown = observe(_blind_to(info, hidden | found), case, candidate)
        except HarnessError:  # the corrupted output broke a form or the comparator
            return found
        name = _named(shown.field, fields) if shown.what == "differs" else None
        if name is None or name in hidden | found:
            return found
        found.add(name)


# --------------------------------------------------------------------------- the inputs


def drawn(strategy, count: int) -> list[Case]:
    """`count` derandomized draws of `strategy` (no database, no shrinking)."""
    found: list[Case] = []

    @settings(database=None, derandomize=True, max_examples=count, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), deadline=None)
    @given(strategy)
    def collect(case: Case) -> None:
        found.append(case)

    collect()
    return found[:count]


def liveness_inputs(adapter: Adapter, info: OpInfo, candidate: Callable[..., Any], *,
                    draws: int = DRAWS, pins: int = PINS, keep: int = KEEP) -> list[Case]:
    """A few valid inputs to run the adapter on, chosen from the record's example, its first
    valid pins and derandomized draws of the adapter's strategy: each in the adapter's domain,
    matched by no known divergence and agreeing with the contract there; together they show
    every compared field non-empty where any of them does (`_richness`), the richest first."""
    from batchproof.adapters.runner import observe

    base = registry.get(adapter.record)
    cases = [base.example] if isinstance(base.example, Case) else []
    cases += [p.case for p in base.pins if isinstance(p.case, Case)
              and f"pin:{p.name}" not in adapter.skip][:pins]
    cases += drawn(adapter.valid if adapter.valid is not None else base.valid, draws)
    usable = []
    for case in cases:
        call = adapter.call_of(case)
        if not adapter.in_domain(call) or adapter.matching(call):
            continue
        if observe(info, case, candidate).what == "agreed":
            usable.append((case, _richness(case.call(base.reference), adapter.not_provided,
                                             adapter.compared)))
    usable.sort(key=lambda pair: -pair[1][1])
    chosen, shown = [], set()
    for case, (filled, _) in usable:  # a cover of the fields shown non-empty, richest first
        if filled - shown:
            chosen.append(case)
            shown |= filled
    for case, _ in usable:
        if len(chosen) >= keep:
            break
        if not any(case is other for other in chosen):
            chosen.append(case)
    return chosen


def _richness(output: Any, not_provided: tuple[str, ...],
              compared: tuple[str, ...] | None) -> tuple[set[str], int]:
    """(the compared fields of a contract output that hold something, how many values in
    all)."""
    filled, size = set(), 0
    for name in output_fields(output):
        if name in not_provided or (compared is not None and name not in compared):
            continue
        value = _field_value(output, name)
        count = _size(value)
        size += count
        if count:
            filled.add(name)
    return filled, size


def _field_value(output: Any, name: str) -> Any:
    if isinstance(output, TensorDictBase):
        return output.get_non_tensor(name) if output.is_non_tensor(name) else output.get(name)
    if isinstance(output, tuple):
        return output[int(name.strip("[]"))]
    return output


def _size(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.values().numel() if value.is_nested else value.numel())
    if isinstance(value, TensorDictBase):
        return sum(_size(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_size(v) for v in value)
    return 0 if value is None else 1


# --------------------------------------------------------------------------- the verdict


@dataclass
class Liveness:
    """One adapter's liveness (see the module docstring)."""

    adapter: str
    target: str
    inputs: int  # valid inputs the sweep ran on
    fields: list[str]  # the compared fields
    leaves: list[Leaf]  # of the framework's return value
    hits: dict[str, Corruption] = field(default_factory=dict)  # field -> the first that hit it
    where: dict[str, list[Case]] = field(default_factory=dict)  # field -> inputs it differed on
    confirmed: dict[str, str] = field(default_factory=dict)  # field -> the check's detail
    unconfirmed: dict[str, str] = field(default_factory=dict)  # field -> what the check said
    seen_by: dict[str, str] = field(default_factory=dict)  # no field compared: check -> detail

    @property
    def dead(self) -> list[str]:
        """Compared fields that no corruption of the framework's return value made differ."""
        return [name for name in self.fields if not self.hits.get(name)]

    @property
    def live(self) -> bool:
        if not self.fields:
            return bool(self.seen_by)
        return not self.dead and not self.unconfirmed

    def lines(self) -> list[str]:
        """The verdict as a person reads it."""
        head = (f"{self.adapter} ({self.target}): {len(self.leaves)} leaf/leaves of the "
                f"framework's return value, {self.inputs} input(s)")
        lines = [head]
        for name in self.fields:
            label = repr(name) if name else "the output"
            if name in self.confirmed:
                lines.append(f"  {label}: live ({self.hits[name]}; the check named it)")
            elif name in self.unconfirmed:
                lines.append(f"  {label}: UNCONFIRMED: hit by {self.hits[name]}, but the "
                             f"check said: {self.unconfirmed[name]}")
            else:
                lines.append(f"  {label}: DEAD: no corruption of the framework's return value "
                             "makes it differ (filled from the inputs, the reference or a "
                             "constant?)")
        if not self.fields:
            if self.seen_by:
                lines += [f"  no field compared (equivalence skipped); a corruption fails "
                          f"{check}" for check in self.seen_by]
            else:
                lines.append("  no field compared (equivalence skipped), and no corruption "
                             "fails another check: the output is never looked at")
        return lines


def check_liveness(adapter: Adapter, function: Callable[..., Any] | None = None, *,
                   draws: int = DRAWS, pins: int = PINS,
                   confirm_examples: int = CONFIRM_EXAMPLES) -> Liveness:
    """Whether every output field `adapter` compares can fail (module docstring); `function` is
    the framework's (default: the adapter's target, imported) or a stand-in of it. Raises
    `LivenessError` when no valid input reaches the framework."""
    function = function if function is not None else adapter.load()
    with _quiet():
        return _liveness(adapter, function, draws, pins, confirm_examples)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No warning and no log record while it runs: the reference's and the framework's, on
    inputs and corruptions of the liveness run's own making, are not the verdict."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def _liveness(adapter: Adapter, function: Callable[..., Any], draws: int, pins: int,
              confirm_examples: int) -> Liveness:
    from batchproof.adapters.runner import adapter_view

    # a function that writes its output into an argument: what it wrote is its return value
    function = adapter.framework_output(function)
    adapter = dataclasses.replace(adapter, output_of=None)
    probe = Tap()
    candidate = adapter.wrap(tapped(function, probe))
    info = adapter_view(adapter)  # on its first input form only: the conversion is one
    info = dataclasses.replace(info, forms=dict(list(info.forms.items())[:1]))
    cases = liveness_inputs(adapter, info, candidate, draws=draws, pins=pins)
    if not cases:
        raise LivenessError(f"{adapter.name}: no valid input reached {adapter.target} (none in "
                            "its domain, free of known divergences, agreeing with the "
                            "contract): its liveness cannot be judged")
    if not probe.leaves:
        raise LivenessError(f"{adapter.name}: {adapter.target} returned nothing to corrupt "
                            "(no tensor, array, number or list of numbers) on "
                            f"{len(cases)} input(s): its liveness cannot be judged")
    fields = _compared(adapter, cases)
    leaves = [Leaf(path, kind) for path, kind in probe.leaves.items()]
    result = Liveness(adapter.name, adapter.target, len(cases),
                      fields if "equivalence" not in adapter.skip else [], leaves)
    for corruption in _corruptions(leaves):
        if not set(fields) - set(result.hits):
            break  # every compared field is hit
        hit = _sweep(adapter, info, function, corruption, cases, set(fields),
                     hidden=set(result.hits))
        for name, where in hit.items():
            result.hits[name] = corruption
            result.where[name] = where
    if result.fields:
        _confirm(adapter, function, result, confirm_examples)
    else:
        _seen_by_another_check(adapter, function, result, cases, confirm_examples)
    return result


def _compared(adapter: Adapter, cases: list[Case]) -> list[str]:
    """The fields the check compares on `cases`: the contract's outputs minus `not_provided`."""
    base = registry.get(adapter.record)
    names: dict[str, None] = {}
    for case in cases:
        for name in output_fields(case.call(base.reference)):
            if name not in adapter.not_provided and (adapter.compared is None
                                                     or name in adapter.compared):
                names[name] = None
    return list(names)


def _corruptions(leaves: list[Leaf]) -> list[Corruption]:
    """Every corruption of every leaf, the value changes of all leaves first."""
    order = {how: i for i, how in enumerate(CORRUPTIONS["tensor"])}
    every = [Corruption(leaf, how) for leaf in leaves for how in CORRUPTIONS[leaf.kind]]
    return sorted(every, key=lambda c: order[c.how])


def _sweep(adapter: Adapter, info: OpInfo, function: Callable[..., Any],
           corruption: Corruption, cases: list[Case], fields: set[str],
           hidden: set[str]) -> dict[str, list[Case]]:
    """The compared fields beyond `hidden` that differ with `corruption` applied, each with the
    inputs on which it does."""
    tap = Tap(corruption)
    candidate = adapter.wrap(tapped(function, tap))
    hit: dict[str, list[Case]] = {}
    for case in cases:
        if fields <= hidden | set(hit):
            break  # nothing left to find
        before = tap.changed
        differs = fields_differing(info, case, candidate, fields, hidden | set(hit))
        if tap.changed > before:  # the corruption applied on this input
            for name in differs:
                hit.setdefault(name, []).append(case)
    return hit


def _quick(examples: int) -> settings:
    """Derandomized, no database, no shrinking: the first failure found is the verdict."""
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=list(HealthCheck))


def _confirm(adapter: Adapter, function: Callable[..., Any], result: Liveness,
             examples: int) -> None:
    """For each hit field: the equivalence check, drawing the inputs on which the field was
    seen to differ and every other compared field the contract's, must report a new divergence
    naming it."""
    from batchproof.adapters.runner import check_adapter

    reference = registry.get(adapter.record).reference
    for name in result.fields:
        corruption = result.hits.get(name)
        if corruption is None:
            continue
        others = set(result.fields) - {name}
        candidate = only_showing(adapter.guarded(corrupted(function, corruption)),
                                 reference, others)
        on_those = _on(adapter, result.where[name])
        report = check_adapter(on_those, candidate, checks=["equivalence"],
                               report_multiple_bugs=False, replay_database=False,
                               base_settings=_quick(examples))
        outcome = report.outcomes[0]
        if outcome.status == Outcome.NEW and _names(outcome.detail, name):
            result.confirmed[name] = outcome.detail.splitlines()[0]
        else:
            result.unconfirmed[name] = (f"{outcome.status} ({outcome.examples} examples)"
                                        + (f": {outcome.detail.splitlines()[0]}"
                                           if outcome.detail else ""))


def _without_pins(adapter: Adapter) -> Adapter:
    """The adapter with the record's pins skipped: a liveness check runs none, and the runner
    would still sort each one (run it where a known divergence applies)."""
    pins = {f"pin:{pin.name}": "liveness: not run" for pin in
            registry.get(adapter.record).pins}
    return dataclasses.replace(adapter, skip={**pins, **adapter.skip})


def _on(adapter: Adapter, cases: list[Case]) -> Adapter:
    """The adapter without its pins, its valid inputs drawn from `cases`."""
    return dataclasses.replace(_without_pins(adapter), valid=st.sampled_from(cases))


def _names(detail: str, name: str) -> bool:
    """Whether a new divergence's message names the field (`Mismatch: loss_mask...`, `Mismatch:
    [2]...`, `Mismatch: output...` or an element of it for the whole output)."""
    first = detail.splitlines()[0] if detail else ""
    text = first.removeprefix("Mismatch: ")
    if name == WHOLE_OUTPUT:  # the output is the one field: any mismatch is in it
        return first.startswith("Mismatch")
    return text.startswith((f"{name}:", f"{name}.", f"{name}["))


def _seen_by_another_check(adapter: Adapter, function: Callable[..., Any], result: Liveness,
                           cases: list[Case], examples: int) -> None:
    """Equivalence skipped: the corruptions are handed to the adapter's other checks (not the
    bad-input ones, drawing the liveness inputs) until one of them reports a new
    divergence."""
    from batchproof.adapters.runner import check_adapter

    base = registry.get(adapter.record)
    checks = [c for c in base.check_names() if c not in adapter.skip
              and c not in ("equivalence", "errors") and not c.startswith("pin:")]
    if not checks:
        return
    for leaf in result.leaves:
        for how in CORRUPTIONS[leaf.kind]:
            candidate = adapter.guarded(corrupted(function, Corruption(leaf, how)))
            report = check_adapter(_on(adapter, cases), candidate, checks=checks,
                                   report_multiple_bugs=False, replay_database=False,
                                   base_settings=_quick(examples))
            for outcome in report.new:
                result.seen_by.setdefault(outcome.check, f"{how} at {leaf}: "
                                          + outcome.detail.splitlines()[0])
            if result.seen_by:
                return


# --------------------------------------------------------------------------- the command line


def run_liveness(adapters: list[Adapter], *, confirm_examples: int = CONFIRM_EXAMPLES,
                 say: Callable[[str], None] = print) -> int:
    """`batchproof check --liveness`: each adapter's verdict, then one summary line. The exit
    status: 0 when every compared field of every adapter is live; 3 (`HARNESS`: a fault of an
    adapter, which is batchproof's, or no verdict at all: the framework not importable, no
    input reaching it) otherwise."""
    from batchproof.adapters import FrameworkMissing

    live, faulty, unjudged = 0, [], []
    for adapter in adapters:
        try:
            result = check_liveness(adapter, confirm_examples=confirm_examples)
        except (LivenessError, FrameworkMissing) as err:
            say(f"{adapter.name}: NO VERDICT: {err}")
            unjudged.append(adapter.name)
            continue
        for line in result.lines():
            say(line)
        if result.live:
            live += 1
        else:
            faulty.append(adapter.name)
    say(f"liveness: {live} adapter(s) live, {len(faulty)} with a dead or unconfirmed field"
        + (f" ({', '.join(faulty)})" if faulty else "")
        + (f", {len(unjudged)} not judged ({', '.join(unjudged)})" if unjudged else ""))
    return 3 if faulty or unjudged else 0

"""The op registry: one declarative record per public op function (in the spirit of PyTorch's OpInfo).

A record says everything the generic checks need to know about one function:

    OpInfo(
        op="rl_batch", function="build_rl_batch",       # reference.rl_batch / impl.rl_batch
        valid=<strategy of Case>,                        # inputs that must work
        invalid=<strategy of BadCase>,                   # inputs that must raise a given type
        compare=assert_identical,                        # or a tolerance policy
        properties=[Property(...), ...],                 # invariants of any correct output
        pins=[Pin(...), ...],                            # one @example per historical bug
        forms={"lists": identity, "jagged": to_jagged}, # input forms the impl must accept
        requires=("transformers",),                      # optional modules its checks need
    )

The checks derived from a record (see `harness.checks`) are named:

    equivalence        reference(case) == candidate(form(case)) for every input form
    errors             reference and candidate raise the same exception type on bad input
    property:<name>    the invariant holds on the candidate's output
    pin:<name>         the pinned historical case: equivalence, properties, literal expectation

Adding a record to `batchproof.ops` enrols the function in every check, in `batchproof verify`, in
the pytest suite (`tests/test_registry.py`) and in the bug zoo's kill matrix.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st
from tensordict import TensorDictBase

Candidate = Callable[..., Any]


@dataclass(frozen=True)
class Case:
    """One call: positional and keyword arguments, plus a human-readable label."""

    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""

    def call(self, fn: Candidate) -> Any:
        return fn(*self.args, **dict(self.kwargs))

    def replace(self, *args: Any, **kwargs: Any) -> Case:
        """A copy with the positional args replaced (if given) and kwargs updated."""
        new_kwargs = {**self.kwargs, **kwargs}
        return Case(args if args else self.args, new_kwargs, self.label)

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"Case({', '.join(parts)})"

    def as_call(self, function: str) -> str:
        """The call written out: `build_rl_batch([[1, 2]], [[3]], pad_token_id=0)`."""
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{function}({', '.join(parts)})"

    def short(self, limit: int = 300) -> str:
        """A one-line description for tables and progress output."""
        parts = [_short_repr(a, limit) for a in self.args]
        parts += [f"{k}={_short_repr(v, limit)}" for k, v in self.kwargs.items()]
        head = f"[{self.label}] " if self.label else ""
        return f"{head}Case({', '.join(parts)})"


def tensors_on(case: Case, device: str, *, device_kwarg: bool = False) -> Case:
    """`case` with every tensor in its arguments (inside lists, tuples and dicts too) on
    `device`, nothing else converted: lists stay lists, so a bad input keeps its defect. A meta
    tensor stays where it is (it stands for another device); a case with a model (`on`) moves
    the model too. `device_kwarg`: also pass `device=device` (the functions that take one)."""
    moved = case.on(device) if hasattr(case, "on") else case
    kwargs = {k: _tensors_on(v, device) for k, v in moved.kwargs.items()}
    if device_kwarg and "device" not in kwargs:
        kwargs["device"] = device
    return dataclasses.replace(moved, args=tuple(_tensors_on(a, device) for a in moved.args),
                               kwargs=kwargs)


def _tensors_on(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value if value.is_meta else value.to(device)
    if isinstance(value, TensorDictBase):
        return value.to(device)
    if type(value) in (list, tuple):
        return type(value)(_tensors_on(v, device) for v in value)
    if type(value) is dict:
        return {k: _tensors_on(v, device) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class BadCase:
    """An invalid call and the exception type both implementations must raise."""

    case: Case
    raises: type[BaseException]
    why: str = ""

    def __repr__(self) -> str:
        return f"BadCase({self.case!r} -> {self.raises.__name__}: {self.why})"


@dataclass(frozen=True)
class Property:
    """An invariant of any correct output. `check(case, output)` raises AssertionError.

    A metamorphic property (permuting the samples permutes the rows, ...) calls the function under
    test again: its check is `check(case, output, candidate)`. `varies` names the arguments it
    calls it with other values of (`("layout",)`): a check scoped to one value of such an
    argument (`batchproof check --layout left`) skips the property.
    """

    name: str
    check: Callable[..., None]
    doc: str = ""
    metamorphic: bool = False
    varies: tuple[str, ...] = ()

    @classmethod
    def of(cls, check: Callable[..., None], *, name: str | None = None,
           metamorphic: bool = False, varies: tuple[str, ...] = ()) -> Property:
        """The property a check function states: named after it (less a `prop_` prefix) unless
        `name` says otherwise, documented by its docstring. `Property.of(prop_alignment)` is
        `Property("alignment", prop_alignment, prop_alignment.__doc__)`."""
        return cls(name or check.__name__.removeprefix("prop_"), check, check.__doc__ or "",
                   metamorphic=metamorphic, varies=varies)

    def verify(self, case: Case, output: Any, candidate: Callable[..., Any]) -> None:
        if self.metamorphic:
            self.check(case, output, candidate)
        else:
            self.check(case, output)


@dataclass(frozen=True)
class Pin:
    """A regression pin: a concrete case reproducing a historical bug.

    `expect(case, output)` may add a literal expectation (e.g. the spec's worked examples); the pin
    also runs reference == candidate and every property on this case.
    """

    name: str
    case: Case | BadCase
    why: str
    expect: Callable[[Case, Any], None] | None = None
    # the record's input forms the case is written in, when not its first (list) form alone:
    # a target given only other forms (an adapter's `forms=`, `--forms`) is not given the pin
    forms: tuple[str, ...] = ()


def _identity(case: Case) -> Case:
    return case


# the kinds of path each placement may run (`batchproof.placements`): a path of another kind
# that runs under it fails the placement (docs/harness.md, "Placements")
PLACEMENT_KINDS = {
    "kernel": ("numba", "cpu"),  # the compiled CPU kernels and the CPU fast paths
    "cpu": ("cpu",),  # the CPU fast paths, kernels off
    "generic": (),  # the device-generic torch code: no kernel, no fast path
    "triton": ("triton",),  # the Triton kernels, interpreted
    # the Triton kernels compiled and CUDA's own paths; and, as the CPU's switches are all on
    # there, the CPU's paths on data an op keeps on the host (ffd_bins' first fit over the
    # lengths; the batches rl_step's controller builds on the CPU)
    "cuda": ("triton", "cuda", "numba", "cpu"),
}
PATH_KINDS = ("numba", "cpu", "triton", "cuda")


@dataclass(frozen=True)
class Paths:
    """The compiled kernels and fast paths of `impl/` that each placement of a record runs,
    named as `impl/` counts them (`batchproof.impl._paths`: `KIND:MODULE.FUNCTION`).
    `batchproof verify` fails a placement when one of its paths never ran on any input its
    checks drew (the op silently took slower code, with equal outputs), or when a path of a
    kind it may not run did (`PLACEMENT_KINDS`: it did not check the code it names).

        Paths(kernel=("numba:rl_batch.write_rows", "cpu:rl_batch._write_lists"),
              cpu=("cpu:rl_batch._write_lists",),
              triton=("triton:rl_batch._sequence_rows",))

    Declare only paths the record's valid pins take (every run includes them): a path that
    only drawn inputs reach would make the verdict depend on the draw. `generic` runs none (the
    device-generic code is what is left when none is taken).
    """

    # `kernel`: the compiled CPU kernels (numba:) and the CPU fast paths (cpu:) it takes
    kernel: tuple[str, ...] = ()
    # `cpu`: the CPU fast paths (cpu:) taken with the kernels off
    cpu: tuple[str, ...] = ()
    # `triton`: the Triton kernels (triton:), under the interpreter
    triton: tuple[str, ...] = ()
    # `cuda`: the Triton kernels compiled (triton:) and CUDA's own paths (cuda:, the pinned
    # host copy); None: the same as `triton` (the kernels it checks on the CPU)
    cuda: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for placement in ("kernel", "cpu", "triton", "cuda"):
            kinds = PLACEMENT_KINDS[placement]
            wrong = [p for p in self.of(placement) if p.partition(":")[0] not in kinds]
            if wrong:
                raise ValueError(f"Paths.{placement}: {wrong[0]!r} is not a path it runs "
                                 f"(kinds: {', '.join(kinds)})")

    def of(self, placement: str, kinds: Sequence[str] | None = None) -> tuple[str, ...]:
        """The declared paths of `placement` (of `kinds` only, when given)."""
        paths = self.triton if placement == "cuda" and self.cuda is None else \
            getattr(self, placement, ()) or ()
        return tuple(p for p in paths if kinds is None or p.partition(":")[0] in kinds)

    def __bool__(self) -> bool:
        return any(self.of(placement) for placement in PLACEMENT_KINDS)


@dataclass
class OpInfo:
    """The declarative record of one op function."""

    op: str
    function: str
    valid: st.SearchStrategy[Case]
    compare: Callable[..., None]
    invalid: st.SearchStrategy[BadCase] | None = None
    properties: Sequence[Property] = ()
    pins: Sequence[Pin] = ()
    forms: Mapping[str, Callable[[Case], Case]] = field(default_factory=lambda: {"lists": _identity})
    # forms that change values (a narrower float dtype): equivalence compares the candidate with
    # the reference on the formed input itself, not on the drawn one
    lossy_forms: tuple[str, ...] = ()
    devices: tuple[str, ...] = ("cpu",)
    to_device: Callable[[Case, str], Case] | None = None
    describe_row: Callable[[Case, int], str] | None = None
    picture: Callable[[Any], list[str]] | None = None
    example: Case | None = None  # what `batchproof show` draws
    show: Callable[[Case, Any], list[str]] | None = None  # custom drawing for `batchproof show`
    targets: Callable[[Case], dict[str, float]] | None = None  # hypothesis.target() in `nightly`
    requires: tuple[str, ...] = ()  # optional modules its checks import (see `missing()`)
    # how properties and pins reach a candidate that does not take the first (list) form: that
    # input form, applied to their arguments (None: they call it with lists)
    as_called: Callable[[Case], Case] | None = None
    # the compiled kernels and fast paths of impl/ each placement must run (see `Paths`);
    # empty: the record's function has one code path, or none that `verify` counts
    paths: Paths = field(default_factory=Paths)
    doc: str = ""

    @property
    def name(self) -> str:
        return f"{self.op}.{self.function}"

    @property
    def reference(self) -> Candidate:
        return getattr(importlib.import_module(f"batchproof.reference.{self.op}"), self.function)

    @property
    def impl(self) -> Candidate:
        return getattr(importlib.import_module(f"batchproof.impl.{self.op}"), self.function)

    def candidate_from(self, package: str) -> Candidate:
        """The function of this op in any package that mirrors the `impl/` layout."""
        return getattr(importlib.import_module(f"{package}.{self.op}"), self.function)

    def missing(self) -> list[str]:
        """The modules of `requires` that are not installed, each with the extra that brings it:
        `["transformers (pip install 'batchproof[models]')"]`; empty when the record can run."""
        return [f"{module} (pip install 'batchproof[{EXTRAS.get(module, module)}]')"
                for module in self.requires if importlib.util.find_spec(module) is None]

    def check_names(self) -> list[str]:
        names = ["equivalence"]
        if self.invalid is not None:
            names.append("errors")
        names += [f"property:{p.name}" for p in self.properties]
        names += [f"pin:{p.name}" for p in self.pins]
        return names

    def path_checks(self) -> list[str]:
        """`paths:PLACEMENT` for every placement, when the record declares paths: under that
        placement, its checks that compare with the reference (equivalence, errors, pins) run
        and count the paths `impl/` takes (`batchproof.checks.check_paths`). Only
        batchproof's own `impl/` has them; `verify` runs them from the counts of its checks."""
        return [f"paths:{placement}" for placement in PLACEMENT_KINDS] if self.paths else []


# optional module -> the extra of batchproof that installs it (pyproject.toml)
EXTRAS = {"transformers": "models", "numba": "kernels", "mutmut": "mutation"}

_REGISTRY: dict[str, OpInfo] = {}


def register(info: OpInfo) -> OpInfo:
    if info.name in _REGISTRY:
        raise ValueError(f"op {info.name!r} registered twice")
    for pin in info.pins:
        if unknown := [form for form in pin.forms if form not in info.forms]:
            raise ValueError(f"op {info.name!r}: pin {pin.name!r} names input form "
                             f"{unknown[0]!r}, which the record does not have")
    _REGISTRY[info.name] = info
    return info


def all_ops() -> list[OpInfo]:
    """Every record, in registration order (importing `batchproof.ops.<op>` registers them)."""
    from batchproof.ops import OP_MODULES

    for name in OP_MODULES:
        if importlib.util.find_spec(f"batchproof.ops.{name}") is not None:
            importlib.import_module(f"batchproof.ops.{name}")
    # in OP_MODULES order whatever was imported first (sorted() keeps each op's own order)
    return sorted(_REGISTRY.values(), key=lambda info: OP_MODULES.index(info.op))


def op_names() -> list[str]:
    """The op modules that have at least one record (`rl_batch`, `sft`, ...)."""
    return list(dict.fromkeys(info.op for info in all_ops()))


def select(ops: Sequence[str] | None = None) -> list[OpInfo]:
    """Records of the named ops; a name is an op module (`rl_batch`) or one record (`op.function`)."""
    infos = all_ops()
    if not ops:
        return infos
    known = {i.op for i in infos} | {i.name for i in infos}
    unknown = [o for o in ops if o not in known]
    if unknown:
        raise ValueError(f"unknown op {unknown[0]!r}{did_you_mean(unknown[0], known)}; ops: "
                         f"{', '.join(dict.fromkeys(i.op for i in infos))}")
    return [i for i in infos if i.op in ops or i.name in ops]


def get(name: str) -> OpInfo:
    all_ops()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown op record {name!r}{did_you_mean(name, _REGISTRY)} "
                         "(`batchproof list records`)") from None


def did_you_mean(name: str, known) -> str:
    """`; did you mean 'rl_batch'?` when a known name is close, else ""."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=2)
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""


def _short_repr(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 15] + f"...<{len(text)} chars>"

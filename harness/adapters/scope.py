"""The scope of a check: which part of a contract a function is checked on.

One value, built once — from the command line (`Scope.from_args`, for `batchproof check` and
`batchproof mutate --impl`) or from `batchproof.check(...)`'s keywords — and then carried:

    Scope(forms=("lists",), skip={"errors": "..."}, layout="left", ...)
        .narrow(adapter)      the adapter restricted to it (domain, forms, skips, outputs);
                              the narrowed adapter keeps it as `adapter.scope`
        .words()              the command-line flags that give it back (the replay line, the
                              scope hint of a report)
        .keywords()           the same as `batchproof.check` keywords (the test `mutate --impl`
                              writes for every mutant)

What each option scopes, for every check that calls the function (searches, properties and
pins alike):

    forms          the input forms the function is given (`batchproof list records`)
    skip           checks not run, or {check: why}; `errors` skips every bad-input check (the
                   errors search and the bad-input pins)
    not_provided   contract outputs the function does not produce: not compared
    layout         the only layout it builds (records with a `layout` argument): inputs in
                   another are outside its domain, and properties that call it with another
                   (`Property.varies`) are skipped
    output_names   "theirs=contract": its outputs renamed to the contract's keys
    adapter_files  Python files that register adapters, loaded first
    checks         only these checks (default: all)
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import HealthCheck, settings
from tensordict import TensorDict, TensorDictBase

from batchproof import registry
from batchproof.profiles import draws_independent_of_loaded_modules
from batchproof.registry import BadCase, Case, OpInfo

SCOPE_FLAGS = ("--forms", "--skip", "--not-provided", "--layout", "--output-name")


@dataclass(frozen=True)
class Scope:
    """See the module docstring."""

    forms: tuple[str, ...] | None = None
    skip: Mapping[str, str] = field(default_factory=dict)
    not_provided: tuple[str, ...] = ()
    layout: str | None = None
    output_names: tuple[str, ...] = ()  # "theirs=contract"
    adapter_files: tuple[str, ...] = ()
    checks: tuple[str, ...] | None = None

    @classmethod
    def of(cls, *, forms: Sequence[str] | None = None,
           skip: Sequence[str] | Mapping[str, str] | None = (),
           not_provided: Sequence[str] | None = (),
           layout: str | None = None,
           output_names: Sequence[str] | Mapping[str, str] | None = (),
           adapter_files: Sequence[str] | None = (), checks: Sequence[str] | None = None) -> Scope:
        """A scope from keyword values in any of the shapes the CLI and `batchproof.check`
        take (lists or tuples, None for none; `skip` as names or {name: why}; `output_names`
        as pairs or {theirs: contract})."""
        why = dict(skip) if isinstance(skip, Mapping) else {
            name: "skipped by the caller" for name in skip or ()}
        pairs = ([f"{k}={v}" for k, v in output_names.items()]
                 if isinstance(output_names, Mapping) else list(output_names or ()))
        renames(pairs)  # validates the pairs
        return cls(forms=tuple(forms) if forms else None, skip=why,
                   not_provided=tuple(dict.fromkeys(not_provided or ())), layout=layout,
                   output_names=tuple(pairs), adapter_files=tuple(adapter_files or ()),
                   checks=tuple(checks) if checks else None)

    @classmethod
    def from_args(cls, args: Any) -> Scope:
        """The scope `batchproof check` / `mutate --impl` was given on the command line."""
        return cls.of(forms=getattr(args, "forms", None), skip=getattr(args, "skip", None),
                      not_provided=getattr(args, "not_provided", None),
                      layout=getattr(args, "layout", None),
                      output_names=getattr(args, "output_name", None),
                      adapter_files=getattr(args, "adapter_file", None),
                      checks=getattr(args, "check", None))

    # ----------------------------------------------------------------------- validation

    def validate(self, records: Iterable[str]) -> None:
        """`ValueError` for a check, form or output that none of `records` has (a scope given
        for several adapters applies each option where its record has it)."""
        infos = [registry.get(name) for name in dict.fromkeys(records)]
        names = {c for info in infos for c in info.check_names()}
        for check in [*self.skip, *(self.checks or ())]:
            if check not in names:
                where = infos[0].name if len(infos) == 1 else f"none of {[i.name for i in infos]}"
                raise ValueError(f"{where} has no check {check!r} (see `batchproof list "
                                 "checks`)")
        for form in self.forms or ():
            if not any(form in info.forms for info in infos):
                raise ValueError(f"{infos[0].name} has no input form {form!r}; its forms: "
                                 f"{list(infos[0].forms)}")

    # ----------------------------------------------------------------------- applying it

    def narrow(self, adapter):
        """The adapter restricted to this scope (it keeps the scope as `adapter.scope`)."""
        info = registry.get(adapter.record)
        forms = [f for f in self.forms or () if f in info.forms] or None
        if self.forms and forms is None:
            raise ValueError(f"{info.name} has none of the input forms {list(self.forms)}; "
                             f"its forms: {list(info.forms)}")
        mapping = renames(self.output_names)
        named = [*self.not_provided, *mapping.values()]
        outputs = output_keys(info) if named else set()
        unknown = [k for k in named if outputs and k not in outputs]
        if unknown:
            raise ValueError(f"{info.name} has no output {unknown[0]!r}; its outputs: "
                             f"{', '.join(sorted(outputs))}")
        checks = set(info.check_names())
        why = {c: reason for c, reason in self.skip.items() if c in checks}
        if "errors" in why:  # the bad-input checks: the errors search and every bad-input pin
            why |= {f"pin:{pin.name}": f"a bad-input pin ({why['errors']})" for pin in info.pins
                    if isinstance(pin.case, BadCase) and f"pin:{pin.name}" not in why}
        changes: dict[str, Any] = {}
        if forms:
            changes["forms"] = tuple(forms)
        if self.layout is not None:
            changes["supports"] = with_layout(info, adapter.supports, self.layout)
            why |= {f"property:{p.name}": f"calls the function with another layout (outside "
                    f"--layout {self.layout})" for p in info.properties
                    if "layout" in p.varies and f"property:{p.name}" not in why}
        if mapping:
            changes["wrap"] = renamed(adapter.wrap, mapping)
        return dataclasses.replace(
            adapter, skip={**adapter.skip, **why},
            not_provided=tuple(dict.fromkeys([*adapter.not_provided, *self.not_provided])),
            scope=self, **changes)

    # ----------------------------------------------------------------------- giving it back

    def words(self) -> list[str]:
        """The command-line flags of this scope (`--adapter-file` first, as they load
        first)."""
        words: list[str] = []
        for path in self.adapter_files:
            words += ["--adapter-file", path]
        for flag, values in (("--forms", self.forms or ()), ("--not-provided", self.not_provided),
                             ("--skip", list(self.skip)), ("--output-name", self.output_names),
                             ("--layout", [self.layout] if self.layout else ())):
            for value in values:
                words += [flag, value]
        return words

    def keywords(self) -> dict[str, Any]:
        """This scope as `batchproof.check` keywords."""
        return {"forms": list(self.forms) if self.forms else None,
                "skip": list(self.skip), "not_provided": list(self.not_provided),
                "layout": self.layout, "output_names": renames(self.output_names) or None,
                "checks": list(self.checks) if self.checks else None}

    def widened(self, **changes: Any) -> Scope:
        """A copy with options added (a hint: `skip` and `not_provided` grow, the rest is
        replaced)."""
        skip = {**self.skip, **{c: "skipped by the caller" for c in changes.pop("skip", ())}}
        not_provided = tuple(dict.fromkeys([*self.not_provided,
                                            *changes.pop("not_provided", ())]))
        return dataclasses.replace(self, skip=skip, not_provided=not_provided, **changes)


def with_layout(info: OpInfo, supports, layout: str):
    """`supports`, restricted to calls in `layout` (the contract's default when not passed)."""
    parameter = inspect.signature(info.reference).parameters.get("layout")
    if parameter is None:
        raise ValueError(f"{info.name} has no layout argument (--layout)")
    default = parameter.default

    def in_layout(call) -> bool:
        return call.arg("layout", default) == layout and supports(call)

    return in_layout


def renamed(wrap, renames: dict[str, str]):
    """The adapter's wrap, with the target's outputs renamed to the contract's keys; a dict of
    outputs becomes a TensorDict (batch size: the first tensor's first dimension; Python scalars
    become non-tensor entries)."""

    def renaming_wrap(function):
        candidate = wrap(function)

        @functools.wraps(candidate)  # the signature stays the wrapped function's
        def named(*args, **kwargs):
            out = candidate(*args, **kwargs)
            if isinstance(out, Mapping) and not isinstance(out, TensorDictBase):
                return as_tensordict({renames.get(k, k): v for k, v in out.items()})
            if isinstance(out, TensorDictBase):
                for theirs, contract in renames.items():
                    if theirs in out.keys():
                        out.rename_key_(theirs, contract)
            return out

        return named

    return renaming_wrap


def as_tensordict(values: Mapping[str, Any]):
    """A dict of outputs as the contract's TensorDict: tensors as entries (batch size from the
    first one), everything else as non-tensor entries."""
    tensors = {k: v for k, v in values.items() if isinstance(v, torch.Tensor)}
    batch = [next(iter(tensors.values())).shape[0]] if tensors else []
    td = TensorDict(tensors, batch_size=batch)
    for key, value in values.items():
        if key not in tensors:
            td.set_non_tensor(key, value)
    return td


def output_keys(info: OpInfo, draws: int = 40) -> set[str]:
    """The output keys the oracle produces on the record's valid pins and on `draws`
    derandomized valid inputs (empty when its outputs are not TensorDicts)."""
    from hypothesis import Phase, given

    keys: set[str] = set()

    def collect(case: Case) -> None:
        try:
            out = case.call(info.reference)
        except Exception:  # noqa: BLE001 - e.g. a model record without its extra
            return
        if isinstance(out, TensorDictBase):
            keys.update(out.keys())

    for pin in info.pins:
        if isinstance(pin.case, Case):
            collect(pin.case)
    search = settings(max_examples=draws, derandomize=True, database=None, deadline=None,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    with draws_independent_of_loaded_modules():
        search(given(info.valid)(collect))()
    return keys


def renames(output_names: Iterable[str]) -> dict[str, str]:
    """["theirs=contract", ...] -> {"theirs": "contract"}."""
    mapping = {}
    for pair in output_names or ():
        theirs, sep, contract = pair.partition("=")
        if not sep or not theirs or not contract:
            raise ValueError(f"--output-name {pair!r}: expected THEIRS=CONTRACT")
        mapping[theirs] = contract
    return mapping

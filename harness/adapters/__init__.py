"""Adapters: check a third-party function against an op's contract (`batchproof check`).

An adapter maps a framework's function onto one registry record: it wraps the function so that the
wrapper takes the op's contract arguments and returns the op's contract output, says which inputs
and input forms the function supports, which contract outputs it does not produce, and lists its
known, documented divergences, each with a predicate on the input case saying when it applies.

    Adapter(
        name="skyrl.rl_batch", framework="skyrl", record="rl_batch.build_rl_batch",
        target="skyrl.train.dataset.preprocess:convert_prompts_responses_to_batch_tensors",
        wrap=to_contract,                      # third-party function -> contract callable
        known=[KnownDivergence("per_token_length_unchecked", applies=..., doc=...)],
    )

`batchproof check` runs the record's checks on `adapter.wrap(function)` with every input that a known
divergence applies to set aside (filtered out of the strategies and the pins, counted, and re-run
once to confirm the divergence is still there), so Hypothesis keeps searching for *new* ones. A new
divergence is shrunk and printed with its layout picture; only new ones make the exit status non-0.

The framework modules (`batchproof.adapters.skyrl`, `batchproof.adapters.verl`) register their
adapters on import without importing the framework; the framework is imported when an adapter is
loaded (docs/frameworks.md says how to install each one beside batchproof).

What an adapter's predicates see. `Adapter.supports` and every `KnownDivergence.applies` are
given one `Call` for every input of the record, valid or invalid, generated or pinned:

    call.args, call.kwargs     the arguments as the contract function receives them (lists form;
                               a model case's `ModelSpec` first, where the contract takes the
                               model — `varlen.response_logprobs`)
    call.arg("prompts")        one argument by its name in the contract's signature, positional
                               or keyword, or the contract's default when it is not passed
    call.rows("prompts")       the argument's rows (a list, a tuple, or a tensor's first axis),
                               or None when it has none (an int, a str, a 0-d tensor)
    call.lengths("prompts")    the rows' lengths, or None when the argument or a row has none
    call.values(x)             a plain list of a row's values, or None (a meta tensor has none)
    call.valid / call.bad      whether it is a valid input; for an invalid one, the `BadCase`
                               (the exception type the contract raises there, and why)

An invalid input may hold anything in any argument (an int where rows are expected, a tensor on
the meta device, a str), so a predicate must be total: the accessors above return None instead of
raising. A predicate that raises anyway is the adapter's fault, not the framework's: the check
stops with `PredicateError` (batchproof's own failure, exit status 3), naming the adapter, the
predicate and the input. So does the adapter's `wrap` when it raises on its own, outside the
framework's function (`AdapterError`): an adapter passes what it is given on to the framework.

Floor 2 (docs/harness.md, "The house, by floor"): imports the core; imported by `mutation`,
`api` and the command line, never by the core.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st
from tensordict import TensorDictBase

from batchproof.adapters.scope import Scope
from batchproof.calls import Call, rows, values  # noqa: F401 - part of this module's face
from batchproof.checks import HarnessError
from batchproof.registry import BadCase, Candidate, Case

# batchproof's own adapter modules, one per framework (each imports its framework only when an
# adapter is loaded); a module that is not there is skipped
FRAMEWORK_MODULES = ("skyrl", "skyrl_replay", "skyrl_sft", "skyrl_megatron", "verl", "verl_mcore",
                     "verl_padding", "huggingface", "trl", "openrlhf", "megatron")


def _always(call: Case) -> bool:
    return True


class PredicateError(HarnessError):
    """An adapter's predicate (`supports`, a known divergence's `applies`) raised: a fault of the
    adapter, which is batchproof's (exit status 3), never a divergence of the framework."""


class AdapterError(HarnessError):
    """An adapter's `wrap` raised on its own, outside the framework's function (before calling
    it, or while mapping its output): batchproof's fault (exit status 3), not the framework's."""


@dataclass(frozen=True)
class KnownDivergence:
    """A documented difference between a framework function and the op's contract.

    applies: predicate on the input's `Call` (valid or invalid; see the module docstring) that is
    true exactly when the divergence can show; such inputs are set aside by `batchproof check`.
    It must not raise on any input of the record (`PredicateError` otherwise).
    kind: `"valid"` (a valid input where the output differs or an exception escapes), `"errors"`
    (an invalid input that is accepted or raises another exception type), or `"both"`.

    How it shows — at least one of, and a set-aside input counts as confirming the divergence
    only when the target did one of these (anything else it did is a new divergence):
    raises: the exception type(s) the target raises where the contract returns or raises
        another type; accepts: on bad input, the target returns instead of raising;
    fields: on valid input, where the output differs: TensorDict keys (`"loss_mask"`), elements
        of a tuple output (`"[2]"`), or `""` for an output that is one tensor.
    """

    name: str
    applies: Callable[[Case], bool]
    doc: str
    kind: str = "both"
    upstream: str = ""  # where the framework's code or discussion lives
    raises: tuple[type[BaseException], ...] = ()
    accepts: bool = False
    fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ("valid", "errors", "both"):
            raise ValueError(f"KnownDivergence.kind must be valid/errors/both, got {self.kind!r}")
        if isinstance(self.raises, type):
            object.__setattr__(self, "raises", (self.raises,))
        if isinstance(self.fields, str):
            object.__setattr__(self, "fields", (self.fields,))
        if not (self.raises or self.accepts or self.fields):
            raise ValueError(f"KnownDivergence {self.name!r}: say how it shows (raises=, "
                             "accepts=True or fields=), so that a confirmation means something")

    def concerns(self, kind: str) -> bool:
        """Whether it can show on `"valid"` inputs or on `"errors"` (invalid) inputs."""
        return self.kind in ("both", kind)

    def describes(self, shown: Shown) -> bool:
        """Whether what the target did on a set-aside input is this divergence."""
        if shown.what == "raised":
            return issubclass(shown.exception, self.raises) if self.raises else False
        if shown.what == "accepted":
            return self.accepts
        if shown.what == "differs":
            return shown.field in self.fields
        return False


@dataclass(frozen=True)
class Shown:
    """What a target did on one input, against the contract: `"agreed"`, `"raised"` (an
    exception the contract does not raise there), `"accepted"` (bad input returned), or
    `"differs"` (an output differs: `field` is the key)."""

    what: str
    exception: type[BaseException] | None = None
    field: str = ""
    text: str = ""

    def __str__(self) -> str:
        if self.what == "raised":
            return f"raised {self.exception.__name__}: {self.text}"
        if self.what == "differs":
            return f"output {self.field or '?'} differs: {self.text}"
        return {"accepted": "accepted the bad input", "agreed": "agreed with the contract"}[
            self.what]


@dataclass(frozen=True)
class Adapter:
    """How one third-party function meets one registry record (see the module docstring)."""

    name: str
    framework: str
    record: str
    target: str  # "module:function" of the third-party function
    wrap: Callable[[Callable[..., Any]], Candidate]
    doc: str = ""
    distribution: str | None = None  # the PyPI distribution whose version is reported
    devices: tuple[str, ...] = ("cpu",)
    dtypes: tuple[torch.dtype, ...] = ()
    forms: tuple[str, ...] | None = ("lists",)  # the record's input forms it accepts (None: all)
    # the input domain, a predicate on the input's `Call` (module docstring); other inputs are
    # not run
    supports: Callable[[Call], bool] = _always
    valid: st.SearchStrategy[Case] | None = None  # default: the record's
    invalid: st.SearchStrategy[BadCase] | None = None  # default: the record's
    known: tuple[KnownDivergence, ...] = ()
    not_provided: tuple[str, ...] = ()  # contract outputs it does not produce (not compared)
    # the only contract outputs that come from the framework, where that is the shorter list
    # (None: every output but `not_provided`); the others are not compared. The wrapper still
    # returns them (the reference's), for the properties that read them
    compared: tuple[str, ...] | None = None
    skip: Mapping[str, str] = field(default_factory=dict)  # check name -> why it does not apply
    versions: str = ""  # the distribution's versions it fits (a PEP 440 specifier; "" = any)
    # a context manager the target is imported inside (an import step the framework needs on
    # this Python: a patched typing.TypedDict, a stand-in for a missing compiled extension)
    importing: Callable[[], AbstractContextManager] | None = None
    # the scope it was narrowed to (`Scope.narrow`): what the report and its replay line say
    scope: Scope = field(default_factory=lambda: Scope())
    # PyPI distributions the target imports beyond `distribution` (a framework's optional
    # dependency: verl's Megatron helpers need megatron-core); without them `--impl FRAMEWORK`
    # leaves the adapter out with a note, and naming it with --adapter is batchproof's error
    needs: tuple[str, ...] = ()
    # for a function that writes its output into an argument instead of returning it (verl's
    # router-replay hand-over sets each router's replay target): `output_of(function)` is a
    # function that calls it and returns what it wrote, as the framework left it (no
    # conversion); `wrap` is then given that function. Adapter liveness corrupts what it
    # returns, as it corrupts other functions' return values
    output_of: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None

    def framework_output(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function` as `wrap` is given it: itself, or `output_of(function)`."""
        return function if self.output_of is None else self.output_of(function)

    def fits(self, version: str) -> bool:
        """Whether this adapter is for `version` of its distribution (any, without `versions`)."""
        if not self.versions:
            return True
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            return Version(version) in SpecifierSet(self.versions)
        except InvalidVersion:
            return False

    def load(self) -> Callable[..., Any]:
        """Import the third-party function, inside `importing` when given (raises
        `FrameworkMissing` with an install hint)."""
        with self.import_step():
            return load_target(self.target, self.distribution)

    def import_step(self) -> AbstractContextManager:
        """The context the framework is imported in (`importing`, or nothing to do)."""
        return self.importing() if self.importing is not None else contextlib.nullcontext()

    def candidate(self) -> Candidate:
        """The framework's function, imported and wrapped (`guarded`)."""
        return self.guarded(self.load())

    def guarded(self, function: Callable[..., Any]) -> Candidate:
        """`wrap(function)`, with what `wrap` raises on its own (not passing on an exception of
        `function`) turned into an `AdapterError`: batchproof's fault, not the framework's."""
        return _guarded(self, function)

    def call_of(self, case: Case | BadCase) -> Call:
        """The `Call` the predicates see for `case`."""
        from batchproof import registry

        return Call.of(case, registry.get(self.record).reference)

    def in_domain(self, call: Call) -> bool:
        """`supports(call)`; a predicate that raises is a `PredicateError`."""
        return _ask(self, "supports", self.supports, call)

    def matching(self, call: Call) -> list[KnownDivergence]:
        """The known divergences that apply to `call` (those of its kind: valid or errors); a
        predicate that raises is a `PredicateError`."""
        kind = "valid" if call.valid else "errors"
        return [k for k in self.known if k.concerns(kind)
                and _ask(self, f"known divergence {k.name!r}", k.applies, call)]

    def version(self) -> str:
        return distribution_version(self.distribution)

    def missing_needs(self) -> list[str]:
        """The distributions of `needs` that are not installed."""
        return [name for name in self.needs if distribution_version(name) == "not installed"]

    def without(self, *names: str) -> Adapter:
        """A copy with the named known divergences removed (to see them fail as new ones)."""
        missing = set(names) - {k.name for k in self.known}
        if missing:
            raise ValueError(f"{self.name} has no known divergence {sorted(missing)}")
        known = tuple(k for k in self.known if k.name not in names)
        return _replace(self, known=known)

    def retarget(self, target: str) -> Adapter:
        return _replace(self, target=target, distribution=None)


REPLAY_ARGUMENTS = ("routed_experts", "sample_support", "router_padding_mask")
"""The router-replay inputs (docs/conventions.md, "Router replay"), keyword arguments of the
contracts that take them, and per-token fields of cp's padded rows."""


def replays(call: Call) -> bool:
    """Whether a call carries router-replay data: one of `REPLAY_ARGUMENTS` passed, or a
    mapping argument (cp.shard's padded row) with a field of that name. Total: an invalid
    input of any shape is read by its keys only."""
    if any(call.kwargs.get(name) is not None for name in REPLAY_ARGUMENTS):
        return True
    for value in call.args:
        if isinstance(value, (Mapping, TensorDictBase)) and any(
                name in value.keys() for name in REPLAY_ARGUMENTS):
            return True
    return False


def without_replay(supports: Callable[[Call], bool]) -> Callable[[Call], bool]:
    """`supports` less the calls that carry router-replay data: the domain of an adapter whose
    framework function takes no routes (docs/frameworks.md, "Router replay")."""
    def supported(call: Call) -> bool:
        return not replays(call) and supports(call)

    supported.__name__ = supported.__qualname__ = f"{supports.__name__}_without_replay"
    supported.__doc__ = f"{supports.__doc__ or supports.__name__} (and no router replay)"
    return supported


def keywords_taken(function: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword arguments `function` can be called with, read from its signature (through
    `__wrapped__`), or None: any (it takes `**kwargs`, or has no signature to read)."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters
                     if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def within_its_signature(adapter: Adapter, candidate: Candidate) -> Adapter:
    """`adapter`, its domain less the calls that pass a router-replay keyword argument its
    callable (`guarded`'s, as `wrap` made it) cannot take: a function written before a contract
    took routes is checked on the rest of the contract, never handed an argument its signature
    rejects (docs/frameworks.md, "Router replay"). Unchanged when the callable takes them, or
    `**kwargs`, or when its signature is unknown."""
    taken = getattr(candidate, "keywords_taken", None)
    missing = [] if taken is None else [n for n in REPLAY_ARGUMENTS if n not in taken]
    if not missing:
        return adapter
    supports = adapter.supports

    def supported(call: Call) -> bool:
        return not any(call.kwargs.get(name) is not None for name in missing) \
            and supports(call)

    supported.__name__ = supported.__qualname__ = getattr(supports, "__name__", "supports")
    supported.__doc__ = supports.__doc__
    return _replace(adapter, supports=supported)


def _ask(adapter: Adapter, what: str, predicate: Callable[[Call], bool], call: Call) -> bool:
    try:
        return bool(predicate(call))
    except Exception as err:
        raise PredicateError(
            f"adapter {adapter.name}: {what} raised {type(err).__name__}: {err} on "
            f"{call.short(200)}{' (an invalid input)' if not call.valid else ''}. A fault of "
            f"the adapter (batchproof's), not of {adapter.target}: its predicates must accept "
            "every input of the record, valid or invalid (docs/frameworks.md, 'Writing an "
            "adapter')") from err


def _guarded(adapter: Adapter, function: Callable[..., Any]) -> Candidate:
    """See `Adapter.guarded`."""
    state: dict[str, Any] = {}

    @functools.wraps(function)  # its signature is the function's (`keywords_taken`)
    def target(*args: Any, **kwargs: Any) -> Any:
        state["called"] = True
        try:
            return function(*args, **kwargs)
        except BaseException as err:
            state["raised"] = err
            raise

    wrapped = adapter.wrap(adapter.framework_output(target))
    # the framework's top-level package: an exception raised in its code (a class the wrapper
    # instantiates, then calls; a function the target returns) is the framework's too
    package = adapter.target.partition(":")[0].split(".")[0]

    def candidate(*args: Any, **kwargs: Any) -> Any:
        state.clear()
        try:
            return wrapped(*args, **kwargs)
        except HarnessError:
            raise
        except Exception as err:
            if _raised_by(err, state.get("raised")) or _raised_in(err, package):
                raise  # the framework's own exception (or one the adapter made of it)
            when = ("while mapping what it returned" if state.get("called")
                    else "before calling it")
            raise AdapterError(
                f"adapter {adapter.name}: its wrapper raised {type(err).__name__}: {err} "
                f"{when}, not {adapter.target}. A fault of the adapter (batchproof's): it must "
                "pass every input it is given on to the framework's function") from err

    candidate.keywords_taken = keywords_taken(wrapped)  # what `within_its_signature` reads
    return candidate


def _raised_by(err: BaseException, raised: BaseException | None) -> bool:
    """Whether `err` is `raised` or was raised while handling it (`raise ... from`)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if err is raised:
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def _raised_in(err: BaseException, package: str) -> bool:
    """Whether `err`'s traceback (or a cause's) passes through a module of `package`."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        trace = err.__traceback__
        while trace is not None:
            name = trace.tb_frame.f_globals.get("__name__", "")
            if name == package or name.startswith(package + "."):
                return True
            trace = trace.tb_next
        err = err.__cause__ or err.__context__
    return False


def _replace(adapter: Adapter, **changes: Any) -> Adapter:
    import dataclasses

    return dataclasses.replace(adapter, **changes)


class FrameworkMissing(ImportError):
    """The function an adapter (or `--impl module:function`) names cannot be imported."""


def load_target(target: str, distribution: str | None = None) -> Callable[..., Any]:
    """`module:function` (or `module:Class.attr`) -> the object, importing only that module, from
    the current folder too (as `python -m` does)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"target must be module:function, got {target!r}")
    current_folder_importable()
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - ImportError, or an import that fails on this Python
        hint = (f" (is {distribution} installed? docs/frameworks.md says how to install it "
                "beside batchproof)" if distribution else "")
        raise FrameworkMissing(f"cannot import {module_name}: {type(err).__name__}: {err}"
                               f"{hint}") from err
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise FrameworkMissing(f"{module_name} has no attribute {attr!r}") from None
    if not callable(obj):
        raise FrameworkMissing(f"{target} is not callable")
    return obj


def current_folder_importable() -> None:
    """Put the current folder first on `sys.path`, as `python -m` and `python -m pytest` do."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def distribution_version(distribution: str | None) -> str:
    if distribution is None:
        return "-"
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def identity_adapter(record: str, target: str) -> Adapter:
    """For a `module:function` that already follows the record's contract."""
    return Adapter(name=f"{target} as {record}", framework="custom", record=record,
                   target=target, wrap=lambda fn: fn, forms=None)


# --------------------------------------------------------------------------- registry of adapters

_ADAPTERS: dict[str, Adapter] = {}
# adapter name -> what a fresh `batchproof check` process needs to find it again (`origin`)
_ORIGINS: dict[str, str | None] = {}
_LOADING: str | None = None  # what registers adapters now: "" (our modules, an entry point)


def register_adapter(adapter: Adapter) -> Adapter:
    if adapter.name in _ADAPTERS:
        raise ValueError(f"adapter {adapter.name!r} registered twice")
    _ADAPTERS[adapter.name] = adapter
    _ORIGINS[adapter.name] = _LOADING if _LOADING is not None else _origin_of(sys._getframe(1))
    return adapter


def origin(name: str) -> str | None:
    """What a fresh `batchproof check` process needs to find the registered adapter `name`
    (so that a replay line finds it): "" nothing (batchproof's own, an installed package's
    entry point), a file to give it with `--adapter-file` (an adapter file, or a module that
    registers it when imported), or None: code no command runs registered it (a call inside a
    function), and only that code can replay it."""
    return _ORIGINS.get(name)


def _origin_of(frame) -> str | None:
    """`origin` of an adapter that code running in `frame` registered."""
    if frame.f_globals.get("__name__", "").startswith("batchproof."):
        return ""
    if frame.f_code.co_name == "<module>" and frame.f_globals.get("__file__"):
        return frame.f_globals["__file__"]
    return None


@contextlib.contextmanager
def _registering(what: str):
    """Adapters registered in the body come from `what` (`origin`)."""
    global _LOADING
    before, _LOADING = _LOADING, what
    try:
        yield
    finally:
        _LOADING = before


ENTRY_POINTS = "batchproof.adapters"
"""The entry-point group through which an installed package contributes adapters: each entry
point names a module (imported: it calls `register_adapter`) or an object that is an `Adapter`
or an iterable of them."""

_LOADED_ENTRY_POINTS: set[str] = set()
LOAD_PROBLEMS: list[str] = []  # entry points that failed to load, one line each


def all_adapters() -> list[Adapter]:
    """Every adapter: batchproof's own, and those of installed packages' entry points."""
    with _registering(""):
        for module in FRAMEWORK_MODULES:
            if importlib.util.find_spec(f"{__name__}.{module}") is not None:
                importlib.import_module(f"{__name__}.{module}")
        _load_entry_points()
    return list(_ADAPTERS.values())


def _load_entry_points() -> None:
    for entry in importlib.metadata.entry_points(group=ENTRY_POINTS):
        key = f"{entry.name}={entry.value}"
        if key in _LOADED_ENTRY_POINTS:
            continue
        _LOADED_ENTRY_POINTS.add(key)
        try:
            register_objects(entry.load())
        except Exception as err:  # noqa: BLE001 - one broken plug-in must not stop the others
            LOAD_PROBLEMS.append(f"adapter entry point {entry.name} ({entry.value}) failed to "
                                 f"load: {type(err).__name__}: {err}")


def register_objects(loaded: Any) -> None:
    """Register what an entry point or adapter file gave: an `Adapter`, an iterable of them, or
    a module (which registered its adapters when imported)."""
    if isinstance(loaded, Adapter):
        loaded = [loaded]
    if isinstance(loaded, (list, tuple)):
        for adapter in loaded:
            if adapter.name not in _ADAPTERS or _ADAPTERS[adapter.name] is not adapter:
                register_adapter(adapter)


def load_adapter_file(path: str) -> list[Adapter]:
    """Import a Python file that defines adapters (`register_adapter(...)` calls, or a module
    attribute `ADAPTERS`); the adapters it registered. Its folder is importable while it loads,
    so it can import a module beside it."""
    import importlib.util
    from pathlib import Path

    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--adapter-file {path}: no such file")
    before = set(_ADAPTERS)
    name = f"batchproof_adapter_file_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.resolve().parent))
    try:
        with _registering(str(file.resolve())):
            spec.loader.exec_module(module)
    except Exception as err:
        raise FrameworkMissing(f"--adapter-file {path} failed: {type(err).__name__}: "
                               f"{err}") from err
    finally:
        sys.path.remove(str(file.resolve().parent))
    with _registering(str(file.resolve())):
        register_objects(getattr(module, "ADAPTERS", None))
    added = [a for n, a in _ADAPTERS.items() if n not in before]
    if not added:
        raise ValueError(f"--adapter-file {path} registers no adapter (call "
                         "batchproof.register_adapter(...) or define ADAPTERS)")
    return added


def get_adapter(name: str) -> Adapter:
    adapters = {a.name: a for a in all_adapters()}
    if name not in adapters:
        from batchproof.registry import did_you_mean

        raise ValueError(f"unknown adapter {name!r}{did_you_mean(name, adapters)} "
                         "(`batchproof list adapters`)")
    return adapters[name]


def frameworks() -> list[str]:
    return list(dict.fromkeys(a.framework for a in all_adapters()))

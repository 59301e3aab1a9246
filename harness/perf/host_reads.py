"""Where `impl/`'s device paths read the device from the host — found on the CPU, proved on CUDA.

A host read on CUDA (a scalar or list read back, a data-dependent shape, a copy between host and
device memory) stalls the host until the device has finished all the work queued before it. An
op given device-resident inputs may read only through `batchproof.impl._sync.host_read` (its
output widths and validation verdicts, docs/performance.md "Host reads"). `survey` runs a
record's checks and lists every other read with the `impl/` line it came from:

- on CUDA, the real thing: `torch.cuda.set_sync_debug_mode("warn")`, each warning traced back
  to its line;
- on the CPU, a model of it, so that CI finds a new read on every push: a torch function mode
  and a dispatch mode see the calls that synchronize on CUDA (`CUDA_READS`: `item`/`bool`/`int`
  of a tensor, `tolist`, `nonzero`, boolean-mask indexing, `torch.equal`, `unique`,
  `repeat_interleave` without `output_size`, `unbind` of a nested tensor) and the copies between
  host and device memory. Which CPU tensors stand for host memory is followed from how they
  were made: from Python data or NumPy, or by a factory, without a `device` (`torch.tensor(rows)`,
  `torch.arange(n)`), by `.cpu()` or `.to("cpu")`, or computed from such tensors only. Moving one
  `.to(device)`, making a tensor from host data with a `device`, or mixing a host tensor with
  more than one element into a device op is a copy to the device (CUDA syncs on those too).

Run it on the code CUDA runs: the `generic` placement (and `triton`, interpreted) on the CPU.
Only calls whose tensor inputs are all device-resident are surveyed: copying host data in is
the point of the others.

    >>> from batchproof import registry
    >>> from batchproof.perf import host_reads
    >>> found = host_reads.survey(registry.get("rl_batch.build_rl_batch"), placement="generic")
    >>> found.undocumented          # Counter of Read(what, where, function, line) -> count
"""

from __future__ import annotations

import collections
import contextlib
import os
import traceback
import warnings
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import hypothesis
import torch
from tensordict import TensorDictBase
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from batchproof import placements
from batchproof.impl import _sync

IMPL = os.path.dirname(os.path.abspath(_sync.__file__)) + os.sep
ROOTS = (IMPL,)  # the code whose reads count (tests add their own folder)

# aten ops that wait for the device on CUDA whatever their arguments
CUDA_READS = {
    "aten._local_scalar_dense": "reads a scalar (item, int, bool of a tensor)",
    "aten.nonzero": "nonzero (output size from the data)",
    "aten.masked_select": "masked_select (output size from the data)",
    "aten.equal": "torch.equal (a bool on the host)",
    "aten.is_nonzero": "bool of a tensor",
    "aten._unique2": "unique (output size from the data)",
    "aten.unique_dim": "unique (output size from the data)",
    "aten.unique_consecutive": "unique_consecutive (output size from the data)",
    "aten.bincount": "bincount (output size from the data)",
}
_READ_METHODS = {"tolist": "tolist", "numpy": "numpy"}
# factories: without a `device`, what they make is host memory; from host data with one, a copy
_FACTORIES = {getattr(torch, name) for name in (
    "tensor", "as_tensor", "asarray", "from_numpy", "frombuffer", "zeros", "ones", "full",
    "empty", "arange", "linspace", "eye", "randperm")}
_FROM_DATA = {torch.tensor, torch.as_tensor, torch.asarray}


@dataclass(frozen=True)
class Read:
    """One kind of host read at one line of `impl/`."""

    what: str
    where: str  # impl/<file>:<line>
    function: str
    line: str

    def __str__(self) -> str:
        return f"{self.where} {self.function}: {self.what}   | {self.line}"


@dataclass
class Survey:
    """What `survey` found: undocumented reads (with how many times each happened), documented
    reads, and how many calls were surveyed and passed over (host inputs)."""

    undocumented: collections.Counter = field(default_factory=collections.Counter)
    documented: int = 0
    surveyed: int = 0
    passed_over: int = 0

    def lines(self) -> list[str]:
        return [f"{count:5d}x {read}" for read, count in sorted(
            self.undocumented.items(), key=lambda kv: kv[0].where)]


def _site(what: str) -> Read | None:
    """The innermost `impl/` frame of the current stack, or None: a read outside `impl/` (the
    harness moving inputs) or under Triton's interpreter (a launch reads nothing on CUDA)."""
    stack = traceback.extract_stack()
    for depth in range(len(stack) - 1, -1, -1):
        frame = stack[depth]
        root = next((r for r in ROOTS if frame.filename.startswith(r)), None)
        if root is not None and not frame.filename.endswith("_sync.py"):
            if any(f"{os.sep}triton{os.sep}" in f.filename for f in stack[depth + 1:]):
                return None
            where = ("impl/" if root == IMPL else "") + frame.filename[len(root):] + \
                f":{frame.lineno}"
            return Read(what, where, frame.name, (frame.line or "").strip()[:100])
    return None


class _Recorder:
    """The reads of one surveyed call, and which tensors stand for host memory."""

    def __init__(self, found: Survey) -> None:
        self.found = found
        self.host: dict[int, weakref.ref] = {}

    def is_host(self, tensor: torch.Tensor) -> bool:
        ref = self.host.get(id(tensor))
        return ref is not None and ref() is tensor

    def mark_host(self, value) -> None:
        for leaf in tree_leaves(value):
            if isinstance(leaf, torch.Tensor):
                self.host[id(leaf)] = weakref.ref(leaf)

    def on_device(self, out, source):
        """`out`, a copy of host memory to the device. On the CPU `.to(device)` returns its
        input itself: a clone then stands for the copy, so that the input stays host memory."""
        if isinstance(out, torch.Tensor) and out is source:
            out = out.clone()  # (which the dispatch mode marks as host memory: unmarked here)
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self.host.pop(id(leaf), None)
        return out

    def read(self, what: str) -> None:
        if _sync.READING:
            return
        site = _site(what)
        if site is not None:
            self.found.undocumented[site] += 1


def _tensors(args, kwargs) -> list[torch.Tensor]:
    return [leaf for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]


def _target_device(args, kwargs):
    """The device argument of `.to(...)` / `as_tensor(..., device=)`: a str, a torch.device, a
    tensor (`to(other)`), or None (a dtype-only conversion)."""
    if kwargs.get("device") is not None:
        return kwargs["device"]
    for arg in args[1:]:
        if isinstance(arg, (str, torch.device, torch.Tensor)):
            return arg
    return None


def _to_host(target) -> bool:
    """`.to("cpu")` spelled out: a copy to the host. (A torch.device is the op's own device,
    which is the CPU in a CPU survey: a no-op there, a device-to-device no-op on CUDA.)"""
    return isinstance(target, str) and torch.device(target).type == "cpu"


class _FunctionReads(TorchFunctionMode):
    """Copies between host and device memory, `tolist`, and which tensors are host memory."""

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.rec = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        out = func(*args, **kwargs)
        rec = self.rec
        inputs = _tensors(args, kwargs)
        self_host = bool(args) and isinstance(args[0], torch.Tensor) and rec.is_host(args[0])
        if func in _FACTORIES:
            device_given = kwargs.get("device") is not None
            from_data = func in _FROM_DATA and args and not isinstance(args[0], torch.Tensor)
            if device_given and (from_data or inputs and all(map(rec.is_host, inputs))):
                rec.read("host data copied to the device")
                out = rec.on_device(out, args[0] if args else None)
            elif not device_given and all(map(rec.is_host, inputs)):
                rec.mark_host(out)
            return out
        if name in _READ_METHODS:
            if not self_host:
                rec.read(_READ_METHODS[name])
            return out
        if name == "cpu" or name == "to" and _to_host(_target_device(args, kwargs)):
            if not self_host:
                rec.read("copy to the host")
            rec.mark_host(out)
            return out
        if name in ("to", "cuda", "new_tensor"):
            if name == "new_tensor" and not self_host:
                rec.read("host data copied to the device")
            elif self_host and (name == "cuda" or _target_device(args, kwargs) is not None):
                rec.read("host tensor copied to the device")
                out = rec.on_device(out, args[0])
            elif self_host:
                rec.mark_host(out)
            return out
        host = [t for t in inputs if rec.is_host(t)]
        if inputs and len(host) == len(inputs):
            rec.mark_host(out)
        elif any(t.dim() > 0 for t in host):
            rec.read("host tensor used in a device op (copied to the device)")
        return out


class _AtenReads(TorchDispatchMode):
    """The aten ops that synchronize on CUDA (`CUDA_READS`, boolean-mask indexing,
    `repeat_interleave` without `output_size`, `unbind` of a nested tensor)."""

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.rec = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = _tensors(args, kwargs)
        all_host = bool(inputs) and all(map(self.rec.is_host, inputs))
        what = self._what(func, args, kwargs)
        if what is not None and not all_host:
            self.rec.read(what)
        out = func(*args, **kwargs)
        if all_host:  # inside a composite op too: what host memory computes is host memory
            self.rec.mark_host(out)
        return out

    @staticmethod
    def _what(func, args, kwargs) -> str | None:
        packet = f"aten.{func.__name__.split('.')[0]}"
        if packet in CUDA_READS:
            return CUDA_READS[packet]
        if packet in ("aten.index", "aten.index_put", "aten.index_put_", "aten._index_put_impl_"):
            indices = args[1]  # (dispatch passes the schema's positional arguments by position)
            if any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in indices):
                return "boolean-mask indexing (output size from the data)"
        # only its `repeats`-tensor overload reaches dispatch (the others decompose into it,
        # or into a static expand for an int `repeats`)
        if packet == "aten.repeat_interleave" and kwargs.get("output_size") is None:
            return "repeat_interleave without output_size"
        # a nested tensor's rows (its offsets read); it splits only along a dense dimension
        if packet == "aten.unbind" and args[0].is_nested:
            return "rows of a nested tensor (its offsets read)"
        return None


# factories that no torch function mode sees (torch.overrides ignores them): what they make is
# host memory all the same, so the survey wraps them while it records
_UNSEEN_FACTORIES = ("from_numpy", "frombuffer")


@contextlib.contextmanager
def _unseen_factories_marked(rec: _Recorder) -> Iterator[None]:
    """`torch.from_numpy` and `torch.frombuffer` marking what they make as host memory (a copy
    to the device is then seen where it is moved or mixed into a device op)."""
    originals = {name: getattr(torch, name) for name in _UNSEEN_FACTORIES}

    def marking(make):
        def factory(*args, **kwargs):
            out = make(*args, **kwargs)
            rec.mark_host(out)
            return out
        return factory

    for name, make in originals.items():
        setattr(torch, name, marking(make))
    try:
        yield
    finally:
        for name, make in originals.items():
            setattr(torch, name, make)


@contextlib.contextmanager
def recording(found: Survey, device: str, sync_mode: str = "warn") -> Iterator[None]:
    """Record the body's reads into `found`: CUDA's own sync warnings on CUDA, the model on the
    CPU. `_sync.documented` switches both off for the documented reads. `sync_mode="error"`
    (CUDA): a read raises where it happens (`torch.cuda.set_sync_debug_mode("error")`)."""
    if device == "cpu":
        rec = _Recorder(found)
        with _unseen_factories_marked(rec), _FunctionReads(rec), _AtenReads(rec):
            yield
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" in str(message):
            site = _site("synchronizing call (CUDA)")
            if site is not None:
                found.undocumented[site] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode(sync_mode)
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(0)


def device_resident(value, device: str) -> bool:
    """Whether `value` holds no host data: every tensor on `device`'s type, no rows of Python
    numbers (a scalar argument — a pad id, a width, a flag — is configuration, not data)."""
    if isinstance(value, torch.Tensor):
        return value.device.type == torch.device(device).type
    if isinstance(value, TensorDictBase):
        return all(device_resident(leaf, device)
                   for leaf in value.values(include_nested=True, leaves_only=True))
    if isinstance(value, (list, tuple)):
        return all(isinstance(v, (torch.Tensor, TensorDictBase, list, tuple, dict))
                   and device_resident(v, device) for v in value)
    if isinstance(value, dict):
        return all(device_resident(v, device) for v in value.values())
    return True


def watched(call, found: Survey, device: str, sync_mode: str = "warn"):
    """`call` with its device-resident calls recorded into `found`."""
    def candidate(*args, **kwargs):
        inputs = [a for a in args if not isinstance(a, torch.nn.Module)]
        inputs += [v for k, v in kwargs.items() if k != "device"]
        if not all(device_resident(v, device) for v in inputs):
            found.passed_over += 1
            return call(*args, **kwargs)
        found.surveyed += 1
        before = _sync.READS
        with recording(found, device, sync_mode):
            result = call(*args, **kwargs)
        found.documented += _sync.READS - before
        return result
    return candidate


def survey(info, *, device: str = "cpu", placement: str = "generic",
           checks: Sequence[str] | None = None, max_examples: int = 30, seed: int = 0,
           call=None, sync_mode: str = "warn") -> Survey:
    """Run `info`'s `checks` (default: `equivalence`, and `errors` where the record has invalid
    inputs; a check that fails raises, as in `run_check`) on `call` (default: the record's
    `impl/` function) with its device-resident calls recorded; on the CPU under `placement`.
    On CUDA, `sync_mode="error"` makes a read fail the check it happens in."""
    from batchproof.checks import run_check  # checks imports the registry, which imports ops

    found = Survey()
    chosen = hypothesis.settings(max_examples=max_examples, deadline=None, database=None,
                                 suppress_health_check=list(hypothesis.HealthCheck))
    if checks is None:
        checks = ("equivalence",) + (("errors",) if info.invalid is not None else ())
    with placements.placed(placement if device == "cpu" else device):
        for check in checks:
            run_check(info, check, watched(call or info.impl, found, device, sync_mode),
                      settings=chosen,
                      device=device, seed=seed)
    return found

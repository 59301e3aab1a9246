"""`batchproof.perf.host_reads`' model of CUDA's sync points, read by read: what each kind of
call is (a read, a copy in either direction, nothing), which tensors stand for host memory, the
site a read is reported at, CUDA's own warnings (a stand-in `set_sync_debug_mode` here), which
calls are surveyed, and what `survey` runs (a stand-in `run_check`, and one tiny real survey).
All in this process and fast: these tests are the killers of `batchproof mutate --mutmut
--harness perf/host_reads` (tests/test_host_reads.py surveys every record)."""

from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path

import hypothesis
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from batchproof import placements, registry
from batchproof.impl import _sync
from batchproof.perf import host_reads

GENERIC = (False, False, False)  # the switches under `generic`: no kernel, no fast path
HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
THIS = os.path.basename(__file__)


@pytest.fixture
def here(monkeypatch):
    """Reads made in this file count (as reads made in impl/ do)."""
    monkeypatch.setattr(host_reads, "ROOTS", host_reads.ROOTS + (HERE,))


def reads(body) -> list[str]:
    """What the CPU model reports `body(x)` reading, sorted; `x` is device memory (made before
    the recording, as a call's inputs are)."""
    found = host_reads.Survey()
    x = device()
    with host_reads.recording(found, "cpu"):
        body(x)
    return sorted(read.what for found_read, count in found.undocumented.items()
                  for read in [found_read] * count)


def device() -> torch.Tensor:
    """An input: device memory, in a CPU survey."""
    return torch.arange(6)


def host() -> torch.Tensor:
    return torch.arange(3)  # made by a factory without a device: host memory


# --------------------------------------------------------------------------- reads


@pytest.mark.parametrize("body, what", [
    (lambda x: torch.bincount(x), "bincount (output size from the data)"),
    (lambda x: torch.unique(x, dim=0), "unique (output size from the data)"),
    (lambda x: torch.unique_consecutive(x), "unique_consecutive (output size from the data)"),
    (lambda x: torch.masked_select(x, x > 2), "masked_select (output size from the data)"),
    (lambda x: torch.is_nonzero(x[:1]), "reads a scalar (item, int, bool of a tensor)"),
    (lambda x: bool(x[:1]), "reads a scalar (item, int, bool of a tensor)"),
    (lambda x: x.sum().item(), "reads a scalar (item, int, bool of a tensor)"),
    (lambda x: torch.equal(x, x), "torch.equal (a bool on the host)"),
    (lambda x: x.numpy(), "numpy"),
    (lambda x: x.tolist(), "tolist"),
    (lambda x: x.to("cpu"), "copy to the host"),
    (lambda x: x.to(device="cpu"), "copy to the host"),
    (lambda x: x.new_tensor([1, 2]), "host data copied to the device"),
    (lambda x: torch.as_tensor([1, 2], device=x.device), "host data copied to the device"),
    (lambda x: torch.asarray(np.zeros(2), device=x.device), "host data copied to the device"),
    (lambda x: torch.repeat_interleave(x, x, dim=0), "repeat_interleave without output_size"),
    (lambda x: torch.repeat_interleave(x), "repeat_interleave without output_size"),
])
def test_each_sync_point_is_one_read_of_its_kind(here, body, what) -> None:
    assert reads(body) == [what]


def test_boolean_mask_indexing_reads_a_get_and_a_put() -> None:
    assert reads_here(lambda x: x[x > 2]) == ["boolean-mask indexing (output size from the data)"]
    assert reads_here(lambda x: x.__setitem__(x > 2, 0)) == [
        "boolean-mask indexing (output size from the data)"]
    assert reads_here(lambda x: x.index_put((x > 2,), torch.tensor(1))) == [
        "boolean-mask indexing (output size from the data)"]
    assert reads_here(lambda x: x.view(2, 3)[:, x[:3] > 0]) == [
        "boolean-mask indexing (output size from the data)"]
    # integer indices have a static size
    assert reads_here(lambda x: x[torch.zeros(2, dtype=torch.int64, device=x.device)]) == []
    assert reads_here(lambda x: x.view(2, 3)[:, x[:2]]) == []


def reads_here(body) -> list[str]:
    """`reads` of `body(device())`, with this file counted as impl/."""
    roots = host_reads.ROOTS
    host_reads.ROOTS = roots + (HERE,)
    try:
        return reads(body)
    finally:
        host_reads.ROOTS = roots


def test_a_split_of_a_nested_tensor_along_a_dense_dimension_reads_nothing(here) -> None:
    nested = torch.nested.nested_tensor_from_jagged(torch.arange(10).view(5, 2),
                                                    offsets=torch.tensor([0, 2, 5]))
    assert reads(lambda x: nested.split(1, dim=-1)) == []
    assert reads(lambda x: nested.split([1, 1], dim=2)) == []


def test_index_put_impl_called_itself_is_a_boolean_mask_read(here) -> None:
    assert reads(lambda x: torch._index_put_impl_(x.clone(), (x > 2,), x[:1])) == [
        "boolean-mask indexing (output size from the data)"]


def test_inputs_given_by_keyword_count(here) -> None:
    assert reads(lambda x: torch.add(x[:3], other=host())) == [
        "host tensor used in a device op (copied to the device)"]
    # a host input written into a device `out=`: a device op, and nonzero syncs
    assert reads(lambda x: torch.nonzero(host(), out=x.new_zeros(0, 1))) == [
        "host tensor used in a device op (copied to the device)",
        "nonzero (output size from the data)"]


def test_a_device_factory_of_a_host_tensor_leaves_the_source_host_memory(here) -> None:
    def same_device(x):
        source = host()
        copied = torch.as_tensor(source, device="cpu")  # on the CPU: `source` itself
        source.tolist()
        copied.tolist()
    assert reads(same_device) == ["host data copied to the device", "tolist"]
    assert reads(lambda x: torch.as_tensor(data=host(), device="cpu").tolist()) == [
        "host data copied to the device", "tolist"]


def test_what_a_composite_op_computes_inside_from_host_memory_is_host_memory(here) -> None:
    # one_hot reads its input's maximum: an intermediate of host memory, read on the host
    assert reads(lambda x: torch.nn.functional.one_hot(host()).tolist()) == []
    assert set(reads(lambda x: torch.nn.functional.one_hot(x).tolist())) == {
        "reads a scalar (item, int, bool of a tensor)", "tolist"}


def test_a_host_function_s_output_is_host_memory_whatever_its_aten_ops_see(here) -> None:
    # the scalar 0 becomes a tensor inside `where`: its aten op has an input nobody made
    assert reads(lambda x: torch.where(host() > 0, host(), 0).tolist()) == []
    assert reads(lambda x: torch.where(host() > 0, 1, host()).tolist()) == []


def test_repeat_interleave_with_its_output_size_or_an_int_reads_nothing(here) -> None:
    assert reads(lambda x: torch.repeat_interleave(x, x, output_size=15)) == []
    assert reads(lambda x: torch.repeat_interleave(x, 2)) == []


def test_rows_of_a_nested_tensor_read_its_offsets(here) -> None:
    nested = torch.nested.nested_tensor_from_jagged(torch.arange(5),
                                                    offsets=torch.tensor([0, 2, 5]))
    assert reads(lambda x: nested.unbind()) == ["rows of a nested tensor (its offsets read)"]
    assert reads(lambda x: x.unbind()) == []
    assert reads(lambda x: x.split([2, 4])) == []
    assert reads(lambda x: x.split(3)) == []


def test_a_read_of_host_memory_is_no_read(here) -> None:
    assert reads(lambda x: host().tolist()) == []
    assert reads(lambda x: host().numpy()) == []
    assert reads(lambda x: torch.bincount(host())) == []
    assert reads(lambda x: host()[host() > 0]) == []
    assert reads(lambda x: torch.tensor([1, 2]).sum().item()) == []
    assert reads(lambda x: torch.tensor(np.arange(3)).tolist()) == []


def test_what_host_memory_computes_is_host_memory(here) -> None:
    assert reads(lambda x: (host() * 2 + host()).tolist()) == []
    assert reads(lambda x: torch.cumsum(host(), 0).tolist()) == []
    assert reads(lambda x: host().to(torch.float64).tolist()) == []
    assert reads(lambda x: host().to("cpu").tolist()) == []
    assert reads(lambda x: host().new_tensor([1, 2]).tolist()) == []
    assert reads(lambda x: torch.as_tensor(host()).tolist()) == []


def test_what_device_memory_computes_is_device_memory(here) -> None:
    assert reads(lambda x: (x * 2).tolist()) == ["tolist"]
    assert reads(lambda x: x.to(torch.float64).tolist()) == ["tolist"]
    assert reads(lambda x: torch.as_tensor(x, device="cpu").tolist()) == ["tolist"]
    assert reads(lambda x: torch.zeros(3, device="cpu").tolist()) == ["tolist"]
    assert reads(lambda x: (x + host()[0]).tolist()) == ["tolist"]


def test_a_copy_to_the_host_is_host_memory(here) -> None:
    assert reads(lambda x: x.cpu().tolist()) == ["copy to the host"]
    assert reads(lambda x: x.to("cpu").sum().item()) == ["copy to the host"]
    assert reads(lambda x: host().cpu()) == []


def test_a_host_tensor_moved_to_the_device_is_device_memory(here) -> None:
    def moved(x):
        source = host()
        on_device = source.to(x.device)
        on_device.tolist()  # device memory now
        source.tolist()  # and the source still host memory
    assert reads(moved) == ["host tensor copied to the device", "tolist"]
    assert reads(lambda x: host().to(device=x.device).tolist()) == [
        "host tensor copied to the device", "tolist"]
    assert reads(lambda x: host().to(x).tolist()) == [
        "host tensor copied to the device", "tolist"]
    assert reads(lambda x: host().to("cpu", torch.int32).tolist()) == []
    assert reads(lambda x: x.to("cpu", torch.int32).tolist()) == ["copy to the host"]


def test_host_data_made_on_the_device_is_device_memory(here) -> None:
    assert reads(lambda x: torch.tensor([1, 2], device="cpu").tolist()) == [
        "host data copied to the device", "tolist"]
    assert reads(lambda x: torch.as_tensor(host(), device="cpu").tolist()) == [
        "host data copied to the device", "tolist"]
    # a factory without data makes its tensor where it is told: no copy
    assert reads(lambda x: torch.zeros(3, device="cpu")) == []
    assert reads(lambda x: torch.arange(3, device="cpu")) == []


def test_a_host_tensor_in_a_device_op_is_a_copy_unless_a_scalar(here) -> None:
    assert reads(lambda x: x[:3] + host()) == [
        "host tensor used in a device op (copied to the device)"]
    assert reads(lambda x: torch.stack([x[:3], host()])) == [
        "host tensor used in a device op (copied to the device)"]
    assert reads(lambda x: x + torch.tensor(2)) == []
    assert reads(lambda x: x + 2) == []


def test_cuda_of_a_host_tensor_is_a_copy_to_the_device() -> None:
    """`.cuda()` (called here on the mode itself: no CUDA needed) copies host memory in."""
    found = host_reads.Survey()
    rec = host_reads._Recorder(found)
    mode = host_reads._FunctionReads(rec)
    source = torch.arange(3)
    rec.mark_host(source)

    def cuda(tensor):
        return tensor
    roots = host_reads.ROOTS
    host_reads.ROOTS = roots + (HERE,)
    try:
        out = mode.__torch_function__(cuda, (torch.Tensor,), (source,))
    finally:
        host_reads.ROOTS = roots
    assert [read.what for read in found.undocumented] == ["host tensor copied to the device"]
    assert out is not source and torch.equal(out, source)
    assert rec.is_host(source) and not rec.is_host(out)


def test_a_documented_read_is_no_read(here) -> None:
    assert reads(lambda x: _sync.host_read(x.max())) == []
    assert reads(lambda x: _sync.host_put([1, 2], dtype=torch.int64, device="cpu")) == []
    with _sync.documented(count=False):
        assert reads(lambda x: x.tolist()) == []
    assert reads(lambda x: x.tolist()) == ["tolist"]


def test_reads_outside_the_roots_are_not_reported() -> None:
    assert reads(lambda x: x.tolist()) == []


# --------------------------------------------------------------------------- host memory


def test_is_host_is_this_tensor_and_not_another_at_its_address() -> None:
    rec = host_reads._Recorder(host_reads.Survey())
    marked, other = torch.arange(2), torch.arange(2)
    assert not rec.is_host(marked)
    rec.mark_host([marked, 3, {"x": None}])
    assert rec.is_host(marked) and not rec.is_host(other)
    rec.host[id(other)] = rec.host[id(marked)]  # an address reused by another tensor
    assert not rec.is_host(other)


def test_on_device_unmarks_every_tensor_it_is_given() -> None:
    rec = host_reads._Recorder(host_reads.Survey())
    a, b = torch.arange(2), torch.arange(3)
    rec.mark_host((a, b))
    out = rec.on_device((a, b), None)
    assert out == (a, b) and not rec.is_host(a) and not rec.is_host(b)
    c = torch.arange(2)
    rec.mark_host(c)
    assert rec.on_device(c, c) is not c and rec.is_host(c)
    d = torch.arange(2)
    rec.mark_host(d)
    assert rec.on_device(d, torch.arange(2)) is d and not rec.is_host(d)


def test_target_device() -> None:
    t = torch.arange(2)
    assert host_reads._target_device((t, "cpu"), {}) == "cpu"
    assert host_reads._target_device((t,), {"device": "cpu"}) == "cpu"
    assert host_reads._target_device((t, torch.float32), {"device": "meta"}) == "meta"
    assert host_reads._target_device((t, torch.float32, torch.device("cpu")), {}) == \
        torch.device("cpu")
    assert host_reads._target_device((t, t), {}) is t
    assert host_reads._target_device(("cpu",), {}) is None  # the tensor itself is no target
    assert host_reads._target_device((t, torch.float32), {"device": None}) is None
    assert host_reads._to_host("cpu") and host_reads._to_host("cpu:0")
    assert not host_reads._to_host("meta") and not host_reads._to_host(torch.device("cpu"))


# --------------------------------------------------------------------------- where a read is


def make_module(folder: Path, name: str, source: str):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"_host_reads_test_{folder.name}_{name}",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def site_of_this_line():
    return host_reads._site("a read")  # the line reported


def test_a_read_is_reported_at_its_innermost_root_frame(here) -> None:
    site = site_of_this_line()
    assert site.what == "a read" and site.function == "site_of_this_line"
    assert site.where == f"{THIS}:{site_of_this_line.__code__.co_firstlineno + 1}"
    assert site.line == 'return host_reads._site("a read")  # the line reported'
    assert str(site) == (f"{site.where} site_of_this_line: a read   | "
                         'return host_reads._site("a read")  # the line reported')
    assert host_reads._site("x").function == \
        "test_a_read_is_reported_at_its_innermost_root_frame"


def test_a_read_in_impl_is_named_by_its_impl_path(tmp_path, monkeypatch) -> None:
    impl = str(tmp_path / "impl") + os.sep
    other = str(tmp_path / "other") + os.sep
    monkeypatch.setattr(host_reads, "IMPL", impl)
    monkeypatch.setattr(host_reads, "ROOTS", (impl, other))
    probe = "from batchproof.perf import host_reads\ndef f():\n    return host_reads._site('w')\n"
    assert make_module(tmp_path / "impl" / "sub", "op", probe).f().where == "impl/sub/op.py:3"
    assert make_module(tmp_path / "other", "mine", probe).f().where == "mine.py:3"
    assert make_module(tmp_path / "elsewhere", "op", probe).f() is None


def test_a_root_frame_called_from_triton_s_code_is_reported(tmp_path, monkeypatch) -> None:
    """Only frames below the innermost root frame (the read's own callees) say "under Triton's
    interpreter"; Triton calling into the root's code is no such read."""
    monkeypatch.setattr(host_reads, "ROOTS", host_reads.ROOTS + (str(tmp_path / "code") + os.sep,))
    code = make_module(tmp_path / "code", "body", "from batchproof.perf import host_reads\n"
                       "def g():\n    return host_reads._site('w')\n")
    launcher = make_module(tmp_path / "lib" / "triton", "launch", "def run(f):\n"
                           "    return f()\n")
    assert launcher.run(code.g).where == "body.py:3"


def test_a_frame_without_source_has_an_empty_line(tmp_path, monkeypatch) -> None:
    import linecache

    monkeypatch.setattr(host_reads, "ROOTS", host_reads.ROOTS + (str(tmp_path) + os.sep,))
    module = make_module(tmp_path, "gone", "from batchproof.perf import host_reads\n"
                         "def f():\n    return host_reads._site('w')\n")
    os.remove(module.__file__)
    linecache.clearcache()
    site = module.f()
    assert site.where == "gone.py:3" and site.line == ""


def test_sync_py_frames_are_passed_over(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(host_reads, "ROOTS", host_reads.ROOTS + (str(tmp_path) + os.sep,))
    inner = make_module(tmp_path, "_sync", "from batchproof.perf import host_reads\n"
                        "def f():\n    return host_reads._site('w')\n")
    outer = make_module(tmp_path, "caller", "import importlib\n"
                        "def g(inner):\n    return inner.f()\n")
    site = outer.g(inner)
    assert site.where == "caller.py:3" and site.function == "g"
    assert site.line == "return inner.f()"
    assert inner.f() is None  # only a _sync.py frame and frames outside the roots


def test_a_read_under_tritons_interpreter_is_none(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(host_reads, "ROOTS", host_reads.ROOTS + (str(tmp_path / "code") + os.sep,))
    probe = "from batchproof.perf import host_reads\ndef f():\n    return host_reads._site('w')\n"
    under_triton = make_module(tmp_path / "lib" / "triton", "interp", probe)
    elsewhere = make_module(tmp_path / "lib" / "tritonic", "interp", probe)
    caller = make_module(tmp_path / "code", "kernel", "def g(m):\n    return m.f()\n")
    assert caller.g(under_triton) is None
    assert caller.g(elsewhere).where == "kernel.py:2"


def test_a_long_line_is_cut_at_100_characters(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(host_reads, "ROOTS", host_reads.ROOTS + (str(tmp_path) + os.sep,))
    long = "    return (host_reads._site('w')" + ", 1" * 60 + ")[0]\n"
    module = make_module(tmp_path, "long", "from batchproof.perf import host_reads\n"
                         "def f():\n" + long)
    site = module.f()
    assert site.line == long.strip()[:100] and len(site.line) == 100


def test_lines_are_sorted_by_site_with_their_counts() -> None:
    found = host_reads.Survey()
    b = host_reads.Read("tolist", "impl/b.py:3", "g", "x.tolist()")
    a = host_reads.Read("nonzero", "impl/a.py:9", "f", "x.nonzero()")
    found.undocumented[b] += 2
    found.undocumented[a] += 12
    assert found.lines() == ["   12x impl/a.py:9 f: nonzero   | x.nonzero()",
                             "    2x impl/b.py:3 g: tolist   | x.tolist()"]
    assert host_reads.Survey().lines() == []


# --------------------------------------------------------------------------- CUDA's warnings


@pytest.fixture
def sync_modes(monkeypatch) -> list:
    modes = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    return modes


def warn_sync(times: int = 1) -> None:
    for _ in range(times):
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)


def test_on_cuda_each_sync_warning_is_a_read_at_its_site(here, sync_modes) -> None:
    found = host_reads.Survey()
    with host_reads.recording(found, "cuda"):
        warn_sync(3)
        warnings.warn("something else", UserWarning, stacklevel=1)
    assert sync_modes == ["warn", 0]
    [(read, count)] = found.undocumented.items()
    assert count == 3 and read.what == "synchronizing call (CUDA)"
    assert read.function == "warn_sync"


def test_on_cuda_the_sync_mode_is_the_one_asked_and_reset_after_a_failure(here,
                                                                       sync_modes) -> None:
    found = host_reads.Survey()
    with pytest.raises(RuntimeError), host_reads.recording(found, "cuda", sync_mode="error"):
        raise RuntimeError("a read raised")
    assert sync_modes == ["error", 0]


def test_on_cuda_a_warning_outside_the_roots_is_no_read(sync_modes) -> None:
    found = host_reads.Survey()
    with host_reads.recording(found, "cuda"):
        warn_sync()
    assert not found.undocumented
    with warnings.catch_warnings(record=True) as shown:  # the handler is put back after
        warnings.simplefilter("always")
        warnings.warn("after", UserWarning, stacklevel=1)
    assert [str(w.message) for w in shown] == ["after"]


def test_on_the_cpu_the_sync_mode_is_left_alone(here, sync_modes) -> None:
    found = host_reads.Survey()
    x = device()
    with host_reads.recording(found, "cpu", sync_mode="error"):
        x.tolist()
    assert sync_modes == [] and len(found.undocumented) == 1


# --------------------------------------------------------------------------- what is surveyed


def test_device_resident_is_every_tensor_on_the_device_and_no_python_rows() -> None:
    t = torch.zeros(2)
    assert host_reads.device_resident(t, "cpu") and host_reads.device_resident(t, "cpu:0")
    assert not host_reads.device_resident(t, "meta")
    assert host_reads.device_resident(torch.zeros(2, device="meta"), "meta")
    assert host_reads.device_resident([t, (t, [t])], "cpu")
    assert not host_reads.device_resident([t, (t, [t])], "meta")
    assert not host_reads.device_resident([t, 3], "cpu")  # a row of Python numbers
    assert not host_reads.device_resident([[1, 2]], "cpu")
    assert not host_reads.device_resident((t, 1.5), "cpu")
    assert host_reads.device_resident([], "cpu")
    assert host_reads.device_resident({"a": t, "b": 3}, "cpu")  # a scalar option
    assert not host_reads.device_resident({"a": [1]}, "cpu")
    assert not host_reads.device_resident({"a": t}, "meta")
    assert host_reads.device_resident([{"a": t}], "cpu")
    assert not host_reads.device_resident([{"a": [1]}], "cpu")
    assert host_reads.device_resident(3, "meta") and host_reads.device_resident(None, "meta")
    td = TensorDict({"a": t, "n": TensorDict({"b": t}, batch_size=[2])}, batch_size=[2])
    assert host_reads.device_resident(td, "cpu") and host_reads.device_resident([td], "cpu")
    assert not host_reads.device_resident(td, "meta")
    meta_inside = TensorDict({"a": t, "n": TensorDict({"b": torch.zeros(2, device="meta")},
                                                       batch_size=[2])}, batch_size=[2])
    assert not host_reads.device_resident(meta_inside, "cpu")


def test_watched_surveys_device_resident_calls_only(here) -> None:
    found = host_reads.Survey()
    calls = []

    def target(*args, **kwargs):
        calls.append((args, kwargs))
        if args and isinstance(args[0], torch.Tensor):
            args[0].tolist()
        return "out"

    watched = host_reads.watched(target, found, "cpu")
    assert watched(device(), width=3) == "out"
    assert calls[-1][1] == {"width": 3}
    assert found.surveyed == 1 and found.passed_over == 0 and len(found.undocumented) == 1
    assert watched([1, 2], device()) == "out"  # rows of Python numbers: passed over
    assert watched(device(), rows=[[1]]) == "out"
    assert calls[-1][1] == {"rows": [[1]]}
    assert found.surveyed == 1 and found.passed_over == 2
    assert sum(found.undocumented.values()) == 1
    # a model argument and the device option are no data
    assert watched(torch.nn.Linear(1, 1), device(), device=[1]) == "out"
    assert found.surveyed == 2 and found.passed_over == 2
    assert len(calls) == 4 and calls[1] == (([1, 2], calls[1][0][1]), {})


def test_watched_counts_the_documented_reads() -> None:
    found = host_reads.Survey()
    watched = host_reads.watched(lambda x: (_sync.host_read(x.max()), _sync.host_read(x.min())),
                                 found, "cpu")
    assert watched(device()) == (5, 0)
    assert found.documented == 2 and not found.undocumented
    host_reads.watched(lambda x: x, found, "cpu")([1])
    assert found.documented == 2
    watched(device())
    assert found.documented == 4 and found.surveyed == 2


def test_watched_passes_the_sync_mode_on(here, sync_modes) -> None:
    found = host_reads.Survey()
    host_reads.watched(lambda: warn_sync(), found, "cuda", sync_mode="error")()
    assert sync_modes == ["error", 0] and sum(found.undocumented.values()) == 1
    host_reads.watched(lambda: None, found, "cuda")()
    assert sync_modes[2:] == ["warn", 0]


@pytest.fixture
def profile():
    """`hypothesis.settings.load_profile` for the test; the profile it found is loaded back."""
    current = hypothesis.settings._current_profile
    yield hypothesis.settings.load_profile
    hypothesis.settings.load_profile(current)


def test_survey_on_cuda_warns_by_default_and_passes_the_mode_on(run_checks, sync_modes,
                                                               monkeypatch) -> None:
    monkeypatch.setattr(host_reads, "device_resident", lambda value, device: True)
    info = registry.get("trainer.real_rows")
    host_reads.survey(info, device="cuda", checks=["equivalence"], call=lambda x: None)
    host_reads.survey(info, device="cuda", checks=["equivalence"], call=lambda x: None,
                      sync_mode="error")
    assert sync_modes == ["warn", 0, "error", 0]


def test_survey_has_no_deadline_database_or_health_check_under_any_profile(run_checks,
                                                                          profile) -> None:
    profile("default")  # Hypothesis' own: a deadline, a database, every health check
    host_reads.survey(registry.get("trainer.real_rows"), checks=["equivalence"],
                      call=lambda x: None)
    assert run_checks[0]["deadline"] is None and run_checks[0]["database"] is None
    assert set(run_checks[0]["health_checks"]) == set(hypothesis.HealthCheck)


# --------------------------------------------------------------------------- survey


@pytest.fixture
def run_checks(monkeypatch) -> list:
    """A stand-in `run_check` that calls its candidate once on device data, and records what
    it ran (the placement active too)."""
    from batchproof import checks

    ran = []

    def stand_in(info, check, candidate, *, settings, device, seed):
        ran.append(dict(record=info.name, check=check, max_examples=settings.max_examples,
                        deadline=settings.deadline, database=settings.database,
                        health_checks=settings.suppress_health_check,
                        device=device, seed=seed, placement=(
                            placements.kernels.ENABLED, placements._cpu.FAST_PATHS,
                            placements.kernels.TRITON_ON_CPU)))
        candidate(torch.arange(4))

    monkeypatch.setattr(checks, "run_check", stand_in)
    return ran


def test_survey_runs_equivalence_and_errors_on_the_placement(run_checks, here) -> None:
    info = registry.get("trainer.real_rows")
    assert info.invalid is not None
    seen = []
    found = host_reads.survey(info, placement="generic", max_examples=7, seed=3,
                              call=lambda x: seen.append(x) or x.tolist())
    assert [r["check"] for r in run_checks] == ["equivalence", "errors"]
    assert all(r["max_examples"] == 7 and r["seed"] == 3 and r["device"] == "cpu"
               and r["deadline"] is None and r["database"] is None
               and r["placement"] == GENERIC for r in run_checks)
    assert len(seen) == 2 and found.surveyed == 2
    assert sum(found.undocumented.values()) == 2


def test_survey_defaults(run_checks) -> None:
    info = registry.get("trainer.real_rows")
    called = []
    found = host_reads.survey(info, checks=["property:x"], call=called.append)
    assert [r["check"] for r in run_checks] == ["property:x"]
    assert run_checks[0]["max_examples"] == 30 and run_checks[0]["seed"] == 0
    assert run_checks[0]["placement"] == GENERIC
    assert len(called) == 1 and found.surveyed == 1


def test_survey_of_a_record_without_invalid_inputs_runs_equivalence(run_checks) -> None:
    info = next(i for i in registry.all_ops() if i.invalid is None)
    host_reads.survey(info, call=lambda x: None, placement="triton")
    assert [r["check"] for r in run_checks] == ["equivalence"]
    assert run_checks[0]["placement"] == (False, False, True)


def test_survey_calls_the_record_s_impl_by_default(run_checks, monkeypatch) -> None:
    from batchproof.impl import trainer

    called = []
    monkeypatch.setattr(trainer, "real_rows", called.append)
    host_reads.survey(registry.get("trainer.real_rows"), checks=["equivalence"])
    assert len(called) == 1


def test_survey_on_cuda_places_the_device(run_checks, sync_modes, monkeypatch) -> None:
    placed = []
    real = placements.placed

    def spy(name):
        placed.append(name)
        return real("generic")

    monkeypatch.setattr(placements, "placed", spy)
    info = registry.get("trainer.real_rows")
    found = host_reads.survey(info, device="cuda", placement="triton", checks=["equivalence"],
                              call=lambda x: None, sync_mode="error")
    assert found.passed_over == 1 and sync_modes == []  # a CPU tensor is host data on CUDA
    assert placed == ["cuda"] and run_checks[0]["device"] == "cuda"


def test_a_real_survey_of_a_clean_record_finds_no_read() -> None:
    found = host_reads.survey(registry.get("trainer.real_rows"), max_examples=5)
    assert found.surveyed > 0 and not found.undocumented and found.documented > 0

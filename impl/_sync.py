"""The documented host reads of `impl/`'s device paths.

On CUDA a host read (`.tolist()`, `int(t)`, `bool(t)`, `nonzero`, a copy to or from host
memory) waits for the device to finish everything queued before it. An op of `impl/` given
device-resident inputs reads the device only through `host_read`: the output widths its shapes
need, and the validation verdicts it raises the reference's errors from, read together in one
transfer where the op can. Anything else is a defect that `tests/test_host_reads.py` finds:
on the CPU with `batchproof.perf.host_reads`' model of CUDA's sync points, and on CUDA (its `gpu`
test) under `torch.cuda.set_sync_debug_mode("error")`.

    widths = host_read(torch.stack([lengths.max(), bad.sum()]))     # one read, a list of ints
    lengths = host_put([3, 1, 2], dtype=torch.int64, device=device)  # host data in, no wait

`host_read` and `documented` (a block of reads, for an error path that finds the row to name)
are the only ways `impl/` reads the device; `host_put` is how it copies host data to it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from batchproof.impl._paths import took

READING = 0  # > 0 while a documented read runs (batchproof.perf.host_reads counts it as documented)
READS = 0  # documented reads so far (in this process)


@contextlib.contextmanager
def documented(*, count: bool = True) -> Iterator[None]:
    """A documented read: the body may read the device (on CUDA, with sync debugging off).
    `count=False`: not a read (a copy to the device the host does not wait for)."""
    global READING, READS
    # (a debug mode is only ever set on an initialized CUDA: no device query otherwise)
    mode = torch.cuda.get_sync_debug_mode() if torch.cuda.is_initialized() else 0
    READING += 1
    READS += count
    if mode:
        torch.cuda.set_sync_debug_mode(0)
    try:
        yield
    finally:
        READING -= 1
        if mode:
            torch.cuda.set_sync_debug_mode(mode)


@contextlib.contextmanager
def callers_code() -> Iterator[None]:
    """The caller's own code run by an op (a model's forward): its reads are not the op's."""
    with documented(count=False):
        yield


def host_read(tensor: torch.Tensor) -> list:
    """`tensor.tolist()`, counted as a documented read."""
    with documented():
        return tensor.tolist()


def host_put(data, *, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Host data (a list, a CPU tensor or NumPy array) as a tensor on `device` (of `dtype`;
    None: the data's own, or what torch infers from a list), without making the host wait: on
    CUDA a copy from pinned memory, queued behind the device's work. A tensor already on a
    device is moved as `.to(device)` moves it (not copied where it already is)
    (`torch.tensor(data, device="cuda")` copies from pageable memory, which waits for the
    device to finish everything queued before it)."""
    device = torch.device(device)
    if device.type == "cuda":
        host = torch.as_tensor(data, dtype=dtype)
        if host.device.type != "cpu":  # not host data after all (a row on another GPU)
            return host.to(device)
        took("cuda:_sync.host_put")  # the pinned copy
        return host.pin_memory().to(device, non_blocking=True)
    with documented(count=False):
        return torch.as_tensor(data, dtype=dtype, device=device)


class Verdicts:
    """Validation verdicts computed on the device, read together in one documented read.

    An op queues each check as a 0-dim bool tensor (True: the input is bad) with the error
    the reference raises for it, in the reference's order; `settle()` reads them all at once
    and raises the first bad one's error. Checks made on the host (types, shapes) run between
    them: used as a context manager, a host check's `ValueError`/`TypeError` first settles the
    verdicts queued before it, so the error the caller sees is the reference's first one.

        with Verdicts() as verdicts:
            verdicts.add((mask > 1).any(), lambda: ValueError("mask holds values beyond 1"))
            check_shape_on_host(ids)          # its error waits for the mask's verdict
            width = verdicts.settle(also=lengths.max())[0]  # the verdicts and a width: one read
        # leaving the block settles what is still queued
    """

    def __init__(self) -> None:
        self.pending: list[tuple[torch.Tensor, object]] = []

    def add(self, bad: torch.Tensor, error) -> None:
        """Queue a verdict: `error()` (an exception, built after the read) if `bad` is True."""
        self.pending.append((bad, error))

    def settle(self, also: torch.Tensor | None = None) -> list:
        """Read the queued verdicts, with `also` (integer values the caller needs on the host,
        such as output widths) in the same transfer; raise the first bad verdict's error;
        return `also`'s values as a list."""
        pending, self.pending = self.pending, []
        parts = [bad.reshape(1).long() for bad, _ in pending]
        parts += [] if also is None else [also.reshape(-1).long()]
        if not parts:
            return []
        read = host_read(torch.cat(parts))
        for flag, (_, error) in zip(read, pending):
            if flag:
                with documented():  # the error path: which row, which value
                    raise error()
        return read[len(pending):]

    def __enter__(self) -> Verdicts:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None or issubclass(kind, (ValueError, TypeError)):
            self.settle()

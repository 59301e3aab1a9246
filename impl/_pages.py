"""Recycled memory for the outputs of the CPU fast paths.

A CPU op that returns 100 MB of new tensors writes 100 MB of memory, and where those pages come
from can decide half its time. A page the process has never written (or gave back to the
system) costs a page fault and the kernel's zeroing on its first write; a page freed by the
previous call and handed out again costs neither. Which one an allocation gets is up to the C
library: glibc maps a large block afresh (`mmap`) and unmaps it on `free`, or serves it from the
heap and trims the heap's top back to the system when enough is free there — both depend on
what the process allocated before (its mmap threshold moves). Timed in fresh processes
(docs/performance.md, "In a user's process"), `build_rl_batch` from lists at B = 1024 took
about 57 ms in some and 91–110 ms in others, the slow ones faulting all 26 000 pages of its
outputs on every call, the fast ones about 1 000; telling glibc to keep freed memory
(`mallopt`) made every process fast — a setting of the whole process, not the op's to make.

This module makes it the op's own: an output buffer of at least `MIN_BYTES` is taken from a pool
of anonymous memory maps, and when the last tensor viewing it is freed the buffer goes back to
the pool (a `weakref.finalize` on the NumPy array the tensor is made from), to be written again
by the next call, its pages resident. The pool keeps idle at most the most bytes of outputs the
caller ever held at once (what a loop of same-sized calls needs to reuse everything; glibc
told to keep freed memory keeps as much), never more than `LIMIT_BYTES`; beyond that a freed
buffer is unmapped at once. Nothing else in the process is touched: other
allocations, torch's and the user's, go through the C library as before.

What differs for the user: an output's storage is not resizable (`Tensor.resize_` beyond its
size raises, as for any tensor made from a NumPy array); every other use — views, `clone`,
`share_memory_`, pickling, `torch.save`, `.numpy()`, `pin_memory` — is a tensor's as usual. The
variable `BATCHPROOF_RECYCLE_PAGES=0` turns the pool off (every output from `torch.empty`).

    take(shape, dtype)          a new, uninitialized CPU tensor, its bytes from the pool
    stats()                     buffers and bytes held now, and how many takes found one
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
import weakref
from dataclasses import dataclass

import numpy as np
import torch

MIN_BYTES = 1 << 20  # smaller outputs come from torch.empty: the heap serves them warm anyway
LIMIT_BYTES = 4 << 30  # the most the pool ever holds idle
ALIGN = 2 << 20  # buffers are whole huge pages (on Linux with transparent huge pages: fewer faults)
SLACK = 1.5  # a free buffer is reused for a request at least 1/SLACK of its size
ENABLED = os.environ.get("BATCHPROOF_RECYCLE_PAGES", "1") != "0"

_MADV_HUGEPAGE = 14  # Linux's value; madvise is asked only on Linux


@dataclass
class Stats:
    held_buffers: int
    held_bytes: int
    takes: int  # buffers handed out (requests of at least MIN_BYTES)
    reused: int  # of those, taken from the pool rather than mapped anew


class _Pool:
    """Idle buffers, and how much may stay idle: the most bytes ever handed out at once (the
    op's outputs the caller held together at its peak), at most `LIMIT_BYTES`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.free: list[mmap.mmap] = []  # idle buffers, oldest first
        self.held = 0  # bytes in `free`
        self.out = 0  # bytes handed out and not back yet
        self.peak = 0  # the most `out` has been
        self.takes = 0
        self.reused = 0

    def take(self, nbytes: int) -> mmap.mmap:
        size = -(-nbytes // ALIGN) * ALIGN
        with self.lock:
            self.takes += 1
            fits = [b for b in self.free if size <= len(b) <= size * SLACK]
            if fits:
                buffer = min(fits, key=len)
                self.free.remove(buffer)
                self.held -= len(buffer)
                self.reused += 1
            else:
                buffer = None
        if buffer is None:
            buffer = _mapped(size)
        with self.lock:
            self.out += len(buffer)
            self.peak = max(self.peak, self.out)
        return buffer

    def give_back(self, buffer: mmap.mmap) -> None:
        """A buffer no tensor views any more: kept for the next take, or unmapped."""
        close = []
        with self.lock:
            self.out -= len(buffer)
            self.free.append(buffer)
            self.held += len(buffer)
            while self.held > min(self.peak, LIMIT_BYTES) and self.free:
                oldest = self.free.pop(0)
                self.held -= len(oldest)
                close.append(oldest)
        for old in close:  # outside the lock: nothing views it any more
            old.close()


def _mapped(size: int) -> mmap.mmap:
    buffer = mmap.mmap(-1, size)
    if sys.platform.startswith("linux") and hasattr(buffer, "madvise"):
        try:
            buffer.madvise(_MADV_HUGEPAGE)
        except OSError:  # no transparent huge pages here: 4 KiB pages, as malloc's
            pass
    return buffer


_POOL = _Pool()


def take(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A new, uninitialized, contiguous CPU tensor of `shape` and `dtype` (as `torch.empty`);
    at least `MIN_BYTES` of it come from the pool (module docstring)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    count = 1
    for n in shape:
        count *= n
    nbytes = count * itemsize
    if not ENABLED or nbytes < MIN_BYTES:
        return torch.empty(shape, dtype=dtype)
    buffer = _POOL.take(nbytes)
    array = np.frombuffer(buffer, dtype=np.uint8, count=nbytes)
    weakref.finalize(array, _POOL.give_back, buffer)
    return torch.from_numpy(array).view(dtype).view(shape)


def stats() -> Stats:
    with _POOL.lock:
        return Stats(len(_POOL.free), _POOL.held, _POOL.takes, _POOL.reused)

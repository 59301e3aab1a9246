"""impl/_pages.py: the CPU fast paths' outputs written into recycled, resident memory.

What is asserted is what the pool promises (impl/_pages.py's docstring): a buffer freed by the
last tensor viewing it is handed to the next take, so a steady loop of calls writes into pages it
already has — counted as the process's minor page faults, not timed — and the pool never holds
idle more than the caller ever held at once. A planted twin (the pool off) faults every page of
an output larger than glibc's largest mmap threshold (32 MiB): the fault test can fail.
"""

from __future__ import annotations

import gc
import io
import pickle
import resource
import threading

import pytest
import torch

from batchproof.impl import _pages as pages

BIG = 40 << 20  # bytes: beyond glibc's largest mmap threshold (32 MiB), mapped afresh by malloc
PAGE = resource.getpagesize()


@pytest.fixture(autouse=True)
def fresh_pool(monkeypatch):
    """Each test starts from an empty pool of its own (the module's is put back after)."""
    monkeypatch.setattr(pages, "_POOL", pages._Pool())
    monkeypatch.setattr(pages, "ENABLED", True)
    yield
    gc.collect()


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _write_twice(take) -> int:
    """The minor page faults of writing a BIG output, freeing it, and writing one again."""
    first = take((BIG // 8,), torch.int64)
    first.fill_(1)
    del first
    gc.collect()
    before = _faults()
    second = take((BIG // 8,), torch.int64)
    second.fill_(2)
    return _faults() - before


def test_a_freed_buffer_is_written_again_without_faulting() -> None:
    pages_of_output = BIG // PAGE
    assert _write_twice(pages.take) < pages_of_output // 20
    assert pages.stats().reused == 1


def test_without_the_pool_the_same_loop_faults_every_page(monkeypatch) -> None:
    """The planted twin: `torch.empty` itself (what the ops used before)."""
    monkeypatch.setattr(pages, "ENABLED", False)
    assert _write_twice(pages.take) > (BIG // PAGE) // 2
    assert pages.stats().takes == 0


def test_a_take_is_a_new_uninitialized_tensor_of_the_shape_and_dtype() -> None:
    for dtype in (torch.int64, torch.float32, torch.int32, torch.bool, torch.uint8):
        out = pages.take((3, pages.MIN_BYTES), dtype)
        assert out.shape == (3, pages.MIN_BYTES) and out.dtype == dtype
        assert out.is_contiguous() and out.device.type == "cpu"
        out.fill_(1)
        assert bool((out == 1).all())


def test_small_and_empty_outputs_come_from_torch_empty() -> None:
    small = pages.take((pages.MIN_BYTES // 8 - 1,), torch.int64)
    empty = pages.take((0, 5), torch.float32)
    assert small.numel() * 8 < pages.MIN_BYTES and empty.shape == (0, 5)
    assert pages.stats().takes == 0
    small.resize_(small.numel() + 1)  # an ordinary, resizable tensor


def test_a_view_keeps_its_buffer_out_of_the_pool() -> None:
    out = pages.take((pages.MIN_BYTES,), torch.uint8)
    out.fill_(7)
    view = out[10:20]
    del out
    gc.collect()
    assert pages.stats().held_buffers == 0  # still viewed
    again = pages.take((pages.MIN_BYTES,), torch.uint8)
    again.fill_(9)
    assert view.tolist() == [7] * 10  # not handed out while viewed
    del view, again
    gc.collect()
    assert pages.stats().held_buffers == 2


def test_the_pool_holds_idle_no_more_than_the_caller_held_at_once() -> None:
    size = 4 << 20
    held = [pages.take((size,), torch.uint8) for _ in range(3)]  # the peak: 3 buffers
    del held
    gc.collect()
    assert pages.stats().held_bytes == 3 * size
    one = pages.take((size,), torch.uint8)  # reused
    two = [pages.take((2 * size,), torch.uint8) for _ in range(2)]  # new: none fits
    del one, two
    gc.collect()
    stats = pages.stats()
    assert stats.reused == 1
    # the peak was 2 * 2s + s = 5s out at once: at most that stays idle, oldest unmapped first
    assert stats.held_bytes <= 5 * size
    assert stats.held_bytes == 5 * size  # the two 2s-buffers and one s-buffer


def test_the_limit_bounds_what_the_pool_holds(monkeypatch) -> None:
    monkeypatch.setattr(pages, "LIMIT_BYTES", 4 << 20)
    held = [pages.take((4 << 20,), torch.uint8) for _ in range(3)]
    del held
    gc.collect()
    assert pages.stats().held_bytes == 4 << 20


def test_a_buffer_is_reused_only_for_a_request_near_its_size() -> None:
    big = pages.take((16 << 20,), torch.uint8)
    del big
    gc.collect()
    small = pages.take((2 << 20,), torch.uint8)  # 16 MiB would waste 14: a new buffer
    near = pages.take((12 << 20,), torch.uint8)  # within SLACK of 16 MiB: reused
    assert pages.stats().reused == 1
    del small, near


def test_outputs_share_pickle_and_save_as_tensors_do() -> None:
    out = pages.take((pages.MIN_BYTES // 8,), torch.int64)
    out.copy_(torch.arange(out.numel()))
    expected = out.clone()
    assert torch.equal(pickle.loads(pickle.dumps(out)), expected)
    buffer = io.BytesIO()
    torch.save(out, buffer)
    buffer.seek(0)
    assert torch.equal(torch.load(buffer), expected)
    out.share_memory_()
    assert out.is_shared() and torch.equal(out, expected)
    with pytest.raises(RuntimeError, match="not resizable"):  # documented: the one difference
        out.resize_(out.numel() + 1)


def test_takes_and_frees_from_several_threads_keep_the_counts() -> None:
    def work() -> None:
        for _ in range(20):
            out = pages.take((pages.MIN_BYTES,), torch.uint8)
            out.fill_(1)
            del out

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    gc.collect()
    stats = pages.stats()
    assert stats.takes == 80
    assert pages._POOL.out == 0 and stats.held_bytes == stats.held_buffers * pages.ALIGN


def test_build_rl_batch_from_lists_reuses_its_pages() -> None:
    """The op as a user calls it, twice with the same sizes: the second call's outputs (about
    9 MB here) land on resident pages."""
    from batchproof.impl.rl_batch import build_rl_batch

    prompts = [[1] * 300] * 128
    responses = [[2] * 2000] * 128
    values = [[0.5] * 2000] * 128
    build_rl_batch(prompts, responses, pad_token_id=0, rewards=values, loss_masks=values)
    gc.collect()
    before = _faults()
    out = build_rl_batch(prompts, responses, pad_token_id=0, rewards=values, loss_masks=values)
    faults = _faults() - before
    written = sum(out[key].numel() * out[key].element_size() for key in out.keys()
                  if not out.is_non_tensor(key))
    assert written > 8 << 20
    assert faults < (written // PAGE) // 10, (faults, written // PAGE)

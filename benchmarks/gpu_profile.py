"""Where the time of each `bench --scale h100` workload goes, kernel by kernel (issue 19).

    python benchmarks/gpu_profile.py [WORKLOAD ...] [--quick]

For each device workload: its impl variant and its torch path, warmed up, then one call under
`torch.profiler` (CUDA activity): the device time per kernel (top 12), the sum of kernel time,
and the wall time of the call, so that the gap between kernels (launches, host reads) shows.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from batchproof.perf import bench, workloads


def _wall(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def _events(fn, activity: ProfilerActivity) -> list:
    """The profiler's per-op averages of one call of `fn`, the device synchronized inside."""
    with profile(activities=[activity]) as prof:
        fn()
        torch.cuda.synchronize()
    return list(prof.key_averages())


def profile_variant(name: str, fn) -> None:
    for _ in range(2):
        fn()
    wall = min(_wall(fn) for _ in range(3))
    events = [e for e in _events(fn, ProfilerActivity.CUDA) if e.device_time_total > 0]
    total = sum(e.self_device_time_total for e in events)
    print(f"--- {name}: wall {wall * 1e3:.2f} ms, kernels {total / 1e3:.2f} ms")
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:12]:
        print(f"  {e.self_device_time_total / 1e3:8.3f} ms  x{e.count:<4d} {e.key[:110]}")


def host_profile(name: str, fn) -> None:
    """The host side of one call: the torch ops by self CPU time (top 12)."""
    events = sorted(_events(fn, ProfilerActivity.CPU), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    print(f"--- {name} host ops: {total / 1e3:.2f} ms self CPU time in torch ops")
    for e in events[:12]:
        print(f"  {e.self_cpu_time_total / 1e3:8.3f} ms  x{e.count:<4d} {e.key[:110]}")


ALIGNED: dict[str, dict] = {}  # --aligned: workload keyword arguments (see main)


def sweep(keys) -> None:
    """Each workload's impl under every (BLOCK, num_warps), for rl_batch also with its flat
    sequence kernel: best wall of 10 calls and the kernel time of one, to choose
    `kernels.TRITON_BLOCK` / `TRITON_WARPS` / `TRITON_FLAT_ROWS`."""
    from batchproof.impl import kernels

    chosen = kernels.TRITON_BLOCK, kernels.TRITON_WARPS, kernels.TRITON_FLAT_ROWS
    for key in keys:
        workload = bench.DEVICE_WORKLOADS[key](device="cuda", **ALIGNED.get(key, {}))
        fn = next(f for n, f in workload.variants.items() if n.startswith("impl"))
        floor = next(f for n, f in workload.variants.items() if n.startswith("floor"))
        floor_wall = min(_wall(floor) for _ in range(10))
        print(f"=== sweep {key}: floor {floor_wall * 1e3:.2f} ms")
        configs = [(block, warps, flat) for flat in ((False, True) if key == "rl_batch"
                                                     else (False,))
                   for block in (1024, 2048, 4096) for warps in (4, 8)]
        for block, warps, flat in configs:
            kernels.TRITON_BLOCK, kernels.TRITON_WARPS = block, warps
            kernels.TRITON_FLAT_ROWS = flat
            for _ in range(2):
                fn()
            wall = min(_wall(fn) for _ in range(10))
            triton = sum(e.self_device_time_total for e in _events(fn, ProfilerActivity.CUDA)
                         if e.self_device_time_total > 0 and not e.key.startswith(
                             ("void", "Memcpy", "Memset")))
            print(f"  BLOCK {block:5d} warps {warps}{' flat' if flat else '':5s}: wall "
                  f"{wall * 1e3:6.2f} ms ({floor_wall / wall:4.0%} of the floor), Triton "
                  f"kernels {triton / 1e3:6.2f} ms")
        kernels.TRITON_BLOCK, kernels.TRITON_WARPS, kernels.TRITON_FLAT_ROWS = chosen
        del workload, fn, floor
        torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workloads", nargs="*")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sweep", action="store_true", help="BLOCK x num_warps per workload")
    parser.add_argument("--aligned", action="store_true",
                        help="rl_batch with widths that are multiples of 16 (16-byte stores)")
    args = parser.parse_args()
    if args.aligned:
        ALIGNED["rl_batch"] = {"longest_first": True}
    if args.sweep:
        sweep(args.workloads or list(bench.DEVICE_WORKLOADS))
        return
    for key in args.workloads or list(bench.DEVICE_WORKLOADS):
        kwargs = bench.QUICK_DEVICE_SIZE if args.quick else {}
        try:
            workload = bench.DEVICE_WORKLOADS[key](device="cuda", **kwargs,
                                                   **ALIGNED.get(key, {}))
        except TypeError:  # a workload with its own quick size names
            workload = bench.DEVICE_WORKLOADS[key](device="cuda")
        print(f"=== {key}: {workload.size}, {workload.output_bytes / 1e6:.0f} MB of outputs")
        for name, fn in list(workload.variants.items()):
            if name.startswith("impl"):
                profile_variant(name, fn)
                host_profile(name, fn)
                profile_variant(f"{name} torch path", workloads.torch_path(fn))
            elif name.startswith("floor"):
                profile_variant(name, fn)
        del workload
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

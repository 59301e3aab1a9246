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

from batchproof import bench, workloads


def _wall(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def profile_variant(name: str, fn) -> None:
    for _ in range(2):
        fn()
    wall = min(_wall(fn) for _ in range(3))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_time_total > 0]
    total = sum(e.self_device_time_total for e in events)
    print(f"--- {name}: wall {wall * 1e3:.2f} ms, kernels {total / 1e3:.2f} ms")
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:12]:
        print(f"  {e.self_device_time_total / 1e3:8.3f} ms  x{e.count:<4d} {e.key[:110]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workloads", nargs="*")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for key in args.workloads or list(bench.DEVICE_WORKLOADS):
        kwargs = bench.QUICK_DEVICE_SIZE if args.quick else {}
        try:
            workload = bench.DEVICE_WORKLOADS[key](device="cuda", **kwargs)
        except TypeError:  # a workload with its own quick size names
            workload = bench.DEVICE_WORKLOADS[key](device="cuda")
        print(f"=== {key}: {workload.size}, {workload.output_bytes / 1e6:.0f} MB of outputs")
        for name, fn in list(workload.variants.items()):
            if name.startswith("impl"):
                profile_variant(name, fn)
                profile_variant(f"{name} torch path", workloads.torch_path(fn))
            elif name.startswith("floor"):
                profile_variant(name, fn)
        del workload
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

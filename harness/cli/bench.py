"""`batchproof bench`: the benchmarks as ratios (`batchproof.perf`)."""

from __future__ import annotations

import argparse

from batchproof.cli.common import (
    UsageError,
    _need_cuda,
)


def bench(args: argparse.Namespace) -> int:
    from batchproof.perf import bench as bench_module

    if args.device == "cuda":
        _need_cuda()
    try:
        return bench_module.main(ops=args.op, device=args.device, json_path=args.json,
                                 quick=args.quick, pages=args.pages, scale=args.scale,
                                 per_core_mode=args.per_core, batches=args.batch,
                                 processes=args.processes, conditions=args.condition,
                                 clock=args.clock)
    except ValueError as err:
        raise UsageError(str(err)) from None

"""Where do impl/'s CUDA paths read the device from the host? (issue 19; run on a GPU)

    python benchmarks/gpu_sync_probe.py [--examples N] [RECORD ...]

Runs each CUDA record's `equivalence` and `errors` checks on CUDA with the candidate called under
`torch.cuda.set_sync_debug_mode("warn")`, and prints every synchronizing call with the innermost
impl/ frame it came from (file:line, function, source line), the record, and how many calls hit
it. This is the survey that `tests/test_registry.py::test_cuda_paths_sync_only_where_documented`
turns into a test (`error` mode; the documented reads are wrapped in `impl._sync.host_read`).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import traceback
import warnings

import hypothesis
import torch
from tensordict import TensorDictBase

from batchproof import registry
from batchproof.checks import run_check

SITES: collections.Counter = collections.Counter()
OTHER: collections.Counter = collections.Counter()
CALLS: collections.Counter = collections.Counter()
CUDA = torch.cuda.is_available()  # without one: a smoke run on the CPU (no sync is reported)


def _site(record: str, check: str, message: str) -> tuple:
    stack = traceback.extract_stack()[:-2]
    ours = [f for f in stack if "/impl/" in f.filename and "batchproof" in f.filename]
    if not ours:
        return (record, check, "outside impl", stack[-1].filename.rsplit("/", 2)[-1],
                stack[-1].lineno, stack[-1].name, (stack[-1].line or "")[:90], message[:60])
    frame = ours[-1]
    return (record, check, frame.filename.split("/impl/")[-1], "", frame.lineno, frame.name,
            (frame.line or "")[:90], message[:60])


@contextlib.contextmanager
def sync_survey(record: str, check: str):
    def show(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" in str(message):
            SITES[_site(record, check, str(message))] += 1
        else:
            OTHER[(filename.rsplit("/", 1)[-1], lineno, str(message)[:100])] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        if CUDA:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            if CUDA:
                torch.cuda.set_sync_debug_mode(0)


def device_resident(value) -> bool:
    """Whether every tensor in `value` is on CUDA and no host data (lists of numbers, CPU
    tensors) is in it: the calls whose host reads are the op's own, not an input copy."""
    if isinstance(value, torch.Tensor):
        return value.is_cuda
    if isinstance(value, TensorDictBase):
        return value.device is not None and value.device.type == "cuda"
    if isinstance(value, (list, tuple)):  # rows of numbers are host data; a list of tensors
        return all(device_resident(v) if isinstance(v, (torch.Tensor, TensorDictBase, list,
                                                        tuple, dict)) else False
                   for v in value)
    if isinstance(value, dict):
        return all(device_resident(v) for v in value.values())
    return True  # a scalar argument (pad id, a width, a flag) is configuration, not data
    # (an argument's rows of numbers are host data: the list branch above; 2026-11-24's runs
    # tested the argument tuple itself as rows, so every call with a scalar argument, every
    # rl_batch, sft and pad_to_multiple call among them, went unsurveyed)


def surveyed(info, check: str, resident_only: bool):
    def call(*args, **kwargs):
        inputs = tuple(a for a in args if not isinstance(a, torch.nn.Module)) + \
            tuple(v for k, v in kwargs.items() if k != "device")
        if resident_only and not all(device_resident(v) for v in inputs):
            CALLS[(info.name, check, "host input (not surveyed)")] += 1
            return info.impl(*args, **kwargs)
        CALLS[(info.name, check, "device-resident input")] += 1
        with sync_survey(info.name, check):
            return info.impl(*args, **kwargs)
    return call


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("records", nargs="*")
    parser.add_argument("--examples", type=int, default=30)
    parser.add_argument("--all-inputs", action="store_true",
                        help="survey host-input calls too (lists, CPU tensors: their copies sync)")
    args = parser.parse_args()
    infos = [registry.get(r) for r in args.records] or [
        i for i in registry.all_ops() if "cuda" in i.devices]
    chosen = hypothesis.settings(max_examples=args.examples, deadline=None, database=None,
                                 suppress_health_check=list(hypothesis.HealthCheck))
    failures = []
    for info in infos:
        for check in ("equivalence", "errors"):
            try:
                run_check(info, check, surveyed(info, check, not args.all_inputs), settings=chosen,
                          device="cuda" if CUDA else "cpu")
            except Exception as exc:  # noqa: BLE001 - a survey: report and go on
                failures.append(f"{info.name} {check}: {type(exc).__name__}: {str(exc)[:300]}")
    print(f"{'count':>6}  record / check / where")
    for key, count in sorted(SITES.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][4])):
        record, check, where, outside, lineno, name, line, message = key
        print(f"{count:6d}  {record} [{check}] {where}{outside}:{lineno} {name}: {line.strip()}"
              f"   ({message})")
    for (filename, lineno, message), count in OTHER.most_common(10):
        print(f"other warning x{count}: {filename}:{lineno} {message}")
    for (record, check, kind), count in sorted(CALLS.items()):
        print(f"calls: {record} [{check}] {kind}: {count}")
    print(f"{len(SITES)} sites; failures while surveying: {len(failures)}")
    for text in failures:
        print("  " + text.replace("\n", " | "))


if __name__ == "__main__":
    main()

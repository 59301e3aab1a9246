"""Where do impl/'s CUDA paths read the device from the host? (issue 19; run on a GPU)

    python benchmarks/gpu_sync_probe.py [--examples N] [--model] [RECORD ...]

For each CUDA record (default: all but pipeline.rl_step), `batchproof.perf.host_reads.survey` on
CUDA: the record's `equivalence` and `errors` checks with each device-resident call under
`torch.cuda.set_sync_debug_mode("warn")`, every synchronizing call outside `impl._sync`'s
documented reads listed with its impl/ line. `--model`: the CPU model's survey of the same
records beside it (the `generic` placement), to compare the two. Without CUDA, only the model
runs. `tests/test_host_reads.py` is the test built on the same survey.
"""

from __future__ import annotations

import argparse

import torch

from batchproof import registry
from batchproof.perf import host_reads


def _show(label: str, found: host_reads.Survey) -> None:
    print(f"== {label}: {found.surveyed} calls surveyed, {found.passed_over} passed over "
          f"(host inputs), {found.documented} documented reads, "
          f"{len(found.undocumented)} other read sites")
    for line in found.lines():
        print("   " + line)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("records", nargs="*")
    parser.add_argument("--examples", type=int, default=30)
    parser.add_argument("--model", action="store_true", help="the CPU model's survey too")
    args = parser.parse_args()
    names = args.records or [info.name for info in registry.all_ops()
                             if "cuda" in info.devices and info.name != "pipeline.rl_step"]
    cuda = torch.cuda.is_available()
    failures = []
    for name in names:
        info = registry.get(name)
        for device in (["cuda"] if cuda else []) + (["cpu"] if args.model or not cuda else []):
            try:
                found = host_reads.survey(info, device=device, max_examples=args.examples)
            except Exception as exc:  # noqa: BLE001 - a survey: report and go on
                failures.append(f"{name} on {device}: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            _show(f"{name} on {device if device == 'cuda' else 'the CPU (model)'}", found)
    print(f"failures while surveying: {len(failures)}")
    for text in failures:
        print("  " + text.replace("\n", " | "))


if __name__ == "__main__":
    main()

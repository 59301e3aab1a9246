"""`batchproof bench`: reference vs impl vs the floor, as ratios measured in one run.

Each workload (see `harness.workloads`) has named variants; every variant is timed in the same
process, interleaved round by round, and the table reports each variant's best time and its ratio
to the floor of its input form. GPU timings synchronize the device. Ratios, not absolute times, are
what to compare: these machines are noisy.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import torch
from rich.console import Console
from rich.table import Table

from batchproof import terminal
from batchproof.perf import workloads

console = Console(width=None if Console().is_terminal else 140)

WORKLOADS: dict[str, Callable[..., workloads.Workload]] = {
    "rl_batch": workloads.rl_batch_workload,
    "varlen": workloads.pack_varlen_workload,
    "nesting": workloads.nesting_workload,
    "sft.collate_sft": workloads.collate_sft_workload,
    "sft.pack_sft": workloads.pack_sft_workload,
    "cp.shard": workloads.cp_shard_workload,
}


# trainer scale from tensors made on the device (no lists; the reference only in `--quick`'s
# check): `--scale h100`
DEVICE_WORKLOADS: dict[str, Callable[..., workloads.Workload]] = {
    "rl_batch": workloads.rl_batch_device_workload,
    "varlen": workloads.pack_varlen_device_workload,
    "nesting": workloads.nest_device_workload,
    "nesting.unnest_by_mask": workloads.unnest_device_workload,
    "sft.pack_sft": workloads.pack_sft_device_workload,
    "cp.shard": workloads.cp_shard_device_workload,
}
QUICK_DEVICE_SIZE = {"batch": 64, "prompt_max": 64, "response_max": 256}
QUICK_DEVICE_SIZES = {"sft.pack_sft": {"batch": 64, "length_max": 256}}  # other size names
# input forms whose variants are measured against the output write floor (`impl (dense)`:
# nest_by_mask's padded batch)
DEVICE_FORMS = ("jagged", "tensors", "dense")


def keep_freed_memory() -> bool:
    """Tell glibc to keep freed memory for reuse (see the module docstring); False elsewhere."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 1 << 30)) and bool(mallopt(m_trim_threshold, 2 << 30))


def _selected(ops, table=WORKLOADS) -> list[str]:
    """Workload names for `--op`: an op (`sft`) selects all of its `sft.<function>` workloads."""
    if not ops:
        return list(table)
    return [name for name in table if any(name == op or name.startswith(op + ".")
                                           for op in ops)] or list(ops)


def _device_form(name: str) -> bool:
    return any(form in name for form in DEVICE_FORMS)


def time_variants(workload: workloads.Workload, rounds: int, device: str,
                  slow: tuple[str, ...] = ("reference",), progress=None) -> dict[str, float]:
    """Best wall time per variant; slow variants (the reference) run once."""
    best = {name: float("inf") for name in workload.variants}
    for round_index in range(rounds):
        for name, fn in workload.variants.items():
            if name in slow and round_index > 0:
                continue
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            best[name] = min(best[name], time.perf_counter() - start)
            if progress:
                progress()
    return best


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def ratios(best: dict[str, float]) -> dict[str, str]:
    """Each variant against the floor of its input form (lists or jagged/output write)."""
    floors = {"lists": best.get("floor (lists)"), "jagged": best.get("floor (output write)")}
    if floors["lists"] is None and floors["jagged"] is None:  # ops with their own floors
        own = {n: s for n, s in best.items() if n.startswith("floor")}
        return {n: "1.00x (floor)" if n in own else
                ", ".join(f"{s / f:.2f}x {fn}" for fn, f in own.items()) for n, s in best.items()}
    out = {}
    for name, seconds in best.items():
        if name.startswith("floor"):
            out[name] = "1.00x (floor)"
        elif _device_form(name) and floors["jagged"]:
            out[name] = f"{seconds / floors['jagged']:.2f}x floor (output write)"
        elif floors["lists"]:
            out[name] = f"{seconds / floors['lists']:.2f}x floor (lists)"
    if floors["jagged"]:  # what a write-once op could reach: the floor's bandwidth
        for name, seconds in best.items():
            if name in out and not name.startswith("floor") and _device_form(name):
                out[name] += f"; {floors['jagged'] / seconds:.0%} of the write bandwidth"
    if "reference" in best and "impl (lists)" in best:
        out["reference"] += f"; impl (lists) is {best['reference'] / best['impl (lists)']:.0f}x faster"
    for form in ("lists", "jagged", "tensors"):  # the impl against the NumPy per-row baseline
        impl, baseline = best.get(f"impl ({form})"), best.get(f"numpy rows ({form})")
        if impl and baseline:
            out[f"impl ({form})"] += f"; {baseline / impl:.2f}x faster than numpy rows ({form})"
    return out


# --------------------------------------------------------------------------- per core, busy host


@contextlib.contextmanager
def threads(count: int | None) -> Iterator[int]:
    """torch's intra-op threads (and Numba's pool, which follows them) set to `count` while
    open (None: as they are); yields the count in force."""
    from batchproof.impl import kernels

    saved = torch.get_num_threads()
    torch.set_num_threads(count or saved)
    if kernels.available():
        kernels.use_threads()
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(saved)
        if kernels.available():
            kernels.use_threads()


@contextlib.contextmanager
def busy_neighbours(busy: bool) -> Iterator[int]:
    """While open, a spinning process on every core but one: the data loaders and actors a
    trainer's controller shares its cores with. Yields their count. Each spins only while its
    parent lives (it checks `getppid`), so a bench killed outright leaves no spinner behind."""
    count = max(1, (os.cpu_count() or 2) - 1) if busy else 0
    spin = f"import os\nparent = {os.getpid()}\nwhile os.getppid() == parent: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]
    try:
        if spinners:
            time.sleep(0.2)  # let them reach the scheduler
        yield count
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


CONDITIONS = (("quiet", None), ("quiet", 1), ("busy", None), ("busy", 1))


def per_core_variants(workload: workloads.Workload) -> tuple[dict[str, Callable], list[str]]:
    """Every variant but the reference (too slow to time four times over) and the framework
    peers that return the impl's output on this workload's lists call; notes on the peers that
    are not timed."""
    from batchproof.perf.peers import peers_for

    chosen = {name: fn for name, fn in workload.variants.items() if name != "reference"}
    notes = []
    if workload.lists_call is not None and "impl (lists)" in chosen:
        record, case = workload.lists_call
        for peer in peers_for(record, case, chosen["impl (lists)"]()):
            if peer.run is None:
                notes.append(f"{peer.name}: not timed: {peer.why}")
            else:
                chosen[peer.name] = peer.run
    return chosen, notes


def per_core(workload: workloads.Workload, rounds: int, progress=None) -> dict[str, dict]:
    """Best time of every per-core variant in each condition (quiet / busy host, torch's
    threads / one thread), each condition interleaved round by round."""
    variants, notes = per_core_variants(workload)
    for note in notes:
        console.print(note)
    timed = dataclasses.replace(workload, variants=variants)
    results = {}
    for host, count in CONDITIONS:
        with busy_neighbours(host == "busy") as spinning, threads(count) as in_force:
            label = (f"{host}, 1 thread" if count == 1 else
                     f"{host}, torch's {in_force} thread{'s' if in_force > 1 else ''}")
            results[label] = {"spinning": spinning, "threads": in_force,
                              "seconds": time_variants(timed, rounds, "cpu", slow=(),
                                                       progress=progress)}
    return results


def per_core_table(workload: workloads.Workload, results: dict[str, dict]) -> Table:
    conditions = list(results)
    table = Table(title=f"{workload.op}.{workload.name} — {workload.size}, per core and on a "
                        "busy host (best of the rounds; ratio of a lists variant: its time / "
                        "impl (lists)'s)")
    table.add_column("variant")
    for label in conditions:
        table.add_column(label, justify="right")
    names = list(next(iter(results.values()))["seconds"])
    for name in names:
        cells = []
        for label in conditions:
            seconds = results[label]["seconds"]
            impl = seconds.get("impl (lists)")
            ratio = (f" ({seconds[name] / impl:.2f}x)" if impl and name.endswith("(lists)")
                     and name != "impl (lists)" else "")
            cells.append(f"{seconds[name] * 1e3:.1f} ms{ratio}")
        table.add_row(name, *cells)
    return table


def main(ops=None, device: str = "cpu", json_path: str | None = None, quick: bool = False,
         pages: str = "warm", scale: str = "default", per_core_mode: bool = False,
         batches: list[int] | None = None) -> int:
    table_of = DEVICE_WORKLOADS if scale == "h100" else WORKLOADS
    names = _selected(ops, table_of)
    unknown = [n for n in names if n not in table_of]
    if unknown:
        console.print(f"[red]no benchmark workload for {unknown}; available: {list(table_of)}")
        return 2
    if device == "cuda" and not torch.cuda.is_available():
        console.print("[red]--device cuda: no CUDA device here[/red]")
        return 2
    if pages == "warm" and not keep_freed_memory():
        pages = "system (this C library has no glibc mallopt)"
    if per_core_mode and (device != "cpu" or scale != "default"):
        raise ValueError("--per-core times the CPU lists forms: it takes neither --device cuda "
                         "nor --scale h100")
    if batches and (scale != "default" or quick):
        raise ValueError("--batch sizes the default-scale workloads: not with --scale h100 or "
                         "--quick")
    if batches and min(batches) < 1:
        raise ValueError(f"--batch must be at least 1, got {min(batches)}")
    sizes = [{"batch": b} for b in batches] if batches else [{"batch": 64} if quick else {}]
    report = {}
    rounds = 2 if quick else 7
    if per_core_mode:
        return _per_core_main(names, rounds, sizes, pages, json_path)
    runs = [(name, size) for name in names for size in sizes] if scale == "default" else \
        [(name, QUICK_DEVICE_SIZES.get(name, QUICK_DEVICE_SIZE) if quick else {})
         for name in names]
    for name, kwargs in runs:
        workload = table_of[name](device=device, **kwargs)
        if quick and workload.check is not None:  # the reference is cheap at this size only
            workload.check()
            console.print(f"{name}: the impl's output is the reference's")
        if device == "cuda":  # the Triton kernels against the torch composition they replace
            for form in DEVICE_FORMS:
                if f"impl ({form})" in workload.variants:
                    workload.variants[f"impl torch path ({form})"] = workloads.torch_path(
                        workload.variants[f"impl ({form})"])
        total = rounds * len(workload.variants) - (rounds - 1)
        with terminal.progress(console, transient=True) as progress:
            task = progress.add_task(f"{name} ({workload.size})", total=total)
            best = time_variants(workload, rounds, device,
                                 progress=lambda task=task: progress.advance(task))
        table = Table(title=f"{workload.op}.{workload.name} — {workload.size}, device={device}, "
                            f"{workload.output_bytes / 1e6:.0f} MB of outputs, pages {pages}")
        table.add_column("variant")
        table.add_column("best time", justify="right")
        table.add_column("ratio")
        for variant, text in ratios(best).items():
            table.add_row(variant, f"{best[variant] * 1e3:.1f} ms", text)
        console.print(table)
        floor = best.get("floor (output write)")
        if floor:
            console.print(f"write bandwidth (floor): {workload.output_bytes / floor / 1e9:.1f} GB/s")
        report[name if len(sizes) == 1 else f"{name} {workload.size}"] = {
                        "size": workload.size, "device": device, "seconds": best,
                        "output_bytes": workload.output_bytes, "pages": pages,
                        "write_bandwidth_gbps": workload.output_bytes / floor / 1e9
                        if floor else None}
        del workload  # its inputs: free before the next workload's are made (device memory)
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(report, handle, indent=2)
    return 0


def _per_core_main(names: list[str], rounds: int, sizes: list[dict], pages: str,
                   json_path: str | None) -> int:
    report = {}
    for name, size in [(name, size) for name in names for size in sizes]:
        workload = WORKLOADS[name](device="cpu", **size)
        total = len(CONDITIONS) * rounds * 8
        with terminal.progress(console, transient=True) as progress:
            task = progress.add_task(f"{name} per core ({workload.size})", total=total)
            results = per_core(workload, rounds, lambda task=task: progress.advance(task))
        console.print(per_core_table(workload, results))
        report[f"{name} {workload.size}"] = {"size": workload.size, "pages": pages,
                                             "cpu_count": os.cpu_count(), "conditions": results}
        del workload
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(report, handle, indent=2)
    return 0

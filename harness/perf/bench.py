"""`batchproof bench`: reference vs impl vs the floor, as ratios measured in one run.

Each workload (see `batchproof.perf.workloads`) has named variants; every variant is timed in the
same process, interleaved round by round, and the table reports each variant's median time and
its ratio to the floor of its input form. GPU timings synchronize the device. Ratios, not
absolute times, are what to compare: these machines are noisy.

Measured as a user's process runs: by default each CPU workload is timed in several fresh
processes (`processes`, `python -m batchproof.perf.bench SPEC` each), none of which tunes the C
library's allocator, and the table gives the median of the processes' medians with their spread
(the slowest and the fastest process), never the best. Where an op's speed depends on the
process (where its outputs' pages come from: docs/performance.md, "In a user's process"), the
spread shows it. `pages="warm"` (glibc told to keep freed memory in each measuring process) is
there to compare with, not what a user's process gets.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import json
import os
import statistics
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


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}  # `--clock`


def time_variants(workload: workloads.Workload, rounds: int, device: str,
                  slow: tuple[str, ...] = ("reference",), progress=None, clock: str = "wall"
                  ) -> dict[str, list[float]]:
    """The wall time of every round of each variant, the variants interleaved round by round;
    slow variants (the reference) run once. Each other variant is called once before, untimed:
    a first call compiles a kernel or loads it from Numba's cache, no call a user's loop
    repeats. `clock`: wall time, or the process's CPU time (every thread's user and system
    time: what a call costs the cores, whatever else the machine runs; blind to waiting)."""
    now = CLOCKS[clock]
    samples: dict[str, list[float]] = {name: [] for name in workload.variants}
    for name, fn in workload.variants.items():
        if name not in slow:
            fn()
    _sync(device)
    for round_index in range(rounds):
        for name, fn in workload.variants.items():
            if name in slow and round_index > 0:
                continue
            _sync(device)
            start = now()
            fn()
            _sync(device)
            samples[name].append(now() - start)
            if progress:
                progress()
    return samples


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    """The median of each variant's samples."""
    return {name: statistics.median(values) for name, values in samples.items() if values}


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
            out[f"impl ({form})"] += (
                f"; {baseline / impl:.2f}x faster than numpy rows ({form})" if baseline >= impl
                else f"; {impl / baseline:.2f}x slower than numpy rows ({form}), which checks "
                     "nothing")
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


# per-core conditions (`--condition`): a quiet or busy host, torch's threads or one
CONDITIONS = {"quiet": ("quiet", None), "quiet-1": ("quiet", 1), "busy": ("busy", None),
              "busy-1": ("busy", 1)}
# what the rows that are not the op do (printed under a table that has them)
LEGEND = {
    "floor": "the physical limit of the input form: (lists) flatten every input list once and "
             "write every output byte once; (output write) write every output byte once",
    "numpy rows": "a NumPy collator of the same contract: the outputs allocated, then one "
                  "slice assignment per row and field, bit for bit the op's outputs "
                  "(tests/test_baselines.py), but no input checked and no TensorDict built: "
                  "the impl's validation and its fixed cost per call are what it does not do",
}
PROCESSES = 5  # fresh processes per CPU workload unless asked otherwise (docs/performance.md)


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


def per_core(workload: workloads.Workload, rounds: int, conditions=tuple(CONDITIONS),
             progress=None, clock: str = "wall") -> tuple[dict[str, dict], list[str]]:
    """Every round of every per-core variant in each condition (`CONDITIONS`: quiet / busy
    host, torch's threads / one thread), each condition interleaved round by round; and the
    notes on peers not timed."""
    variants, notes = per_core_variants(workload)
    timed = dataclasses.replace(workload, variants=variants)
    results = {}
    for key in conditions:
        host, count = CONDITIONS[key]
        with busy_neighbours(host == "busy") as spinning, threads(count) as in_force:
            label = (f"{host}, 1 thread" if count == 1 else
                     f"{host}, torch's {in_force} thread{'s' if in_force > 1 else ''}")
            results[label] = {"condition": key, "spinning": spinning, "threads": in_force,
                              "samples": time_variants(timed, rounds, "cpu", slow=(),
                                                       progress=progress, clock=clock)}
    return results, notes


# --------------------------------------------------------------------------- one measurement


def measure(spec: dict, progress=None) -> dict:
    """One workload timed in this process, as `spec` says (see `_spec`): its samples (or, per
    core, each condition's), what it is, and whether the impl's output was checked."""
    if spec["pages"] == "warm":
        keep_freed_memory()
    table = DEVICE_WORKLOADS if spec["scale"] == "h100" else WORKLOADS
    workload = table[spec["name"]](device=spec["device"], **spec["size"])
    if not spec["slow"]:
        workload.variants.pop("reference", None)
    out = {"op": workload.op, "function": workload.name, "size": workload.size,
           "output_bytes": workload.output_bytes, "checked": False, "clock": spec["clock"]}
    if spec["quick"] and workload.check is not None:  # the reference is cheap at this size only
        workload.check()
        out["checked"] = True
    if spec["device"] == "cuda":  # the Triton kernels against the torch composition they replace
        for form in DEVICE_FORMS:
            if f"impl ({form})" in workload.variants:
                workload.variants[f"impl torch path ({form})"] = workloads.torch_path(
                    workload.variants[f"impl ({form})"])
    if spec["per_core"]:
        out["conditions"], out["notes"] = per_core(workload, spec["rounds"],
                                                   spec["conditions"], progress, spec["clock"])
    else:
        out["samples"] = time_variants(workload, spec["rounds"], spec["device"],
                                       progress=progress, clock=spec["clock"])
    return out


def measure_in_fresh_processes(spec: dict, processes: int, done=None) -> list[dict]:
    """`measure(spec)` in `processes` new Python processes, one after the other, none tuning
    its allocator unless the spec asks (`pages="warm"`); the slow variants (the reference) in
    the first only. A process that fails is a `RuntimeError` with what it printed."""
    runs = []
    for index in range(processes):
        run_spec = dict(spec, slow=spec["slow"] and index == 0)
        result = subprocess.run([sys.executable, "-m", "batchproof.perf.bench",
                                 json.dumps(run_spec)], capture_output=True, text=True)
        lines = result.stdout.strip().splitlines()
        if result.returncode != 0 or not lines:
            tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
            raise RuntimeError(f"measuring process {index + 1} of {processes} for "
                               f"{spec['name']} exited with {result.returncode}: "
                               + " | ".join(tail))
        runs.append(json.loads(lines[-1]))
        if done:
            done()
    return runs


def _spec(name: str, size: dict, device: str, rounds: int, quick: bool, scale: str, pages: str,
          per_core_mode: bool = False, conditions=tuple(CONDITIONS), clock: str = "wall"
          ) -> dict:
    return {"name": name, "size": size, "device": device, "rounds": rounds, "quick": quick,
            "scale": scale, "pages": pages, "per_core": per_core_mode,
            "conditions": list(conditions), "slow": True, "clock": clock}


# --------------------------------------------------------------------------- the statistics


@dataclasses.dataclass
class Timing:
    """One variant over the processes: each process's median, their median, and the spread
    (the fastest and the slowest process; in one process, its fastest and slowest round)."""

    per_process: list[float]
    median: float
    low: float
    high: float


def timings(sample_sets: list[dict[str, list[float]]]) -> dict[str, Timing]:
    """Each variant's `Timing` over the processes' samples (a variant a process did not time,
    the reference after the first, is over those that did)."""
    names = list(dict.fromkeys(name for samples in sample_sets for name in samples))
    out = {}
    for name in names:
        runs = [samples[name] for samples in sample_sets if samples.get(name)]
        per_process = [statistics.median(run) for run in runs]
        spread = per_process if len(runs) > 1 else runs[0]
        out[name] = Timing(per_process, statistics.median(per_process), min(spread),
                           max(spread))
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def _spread(timing: Timing) -> str:
    return f"{_ms(timing.low)}–{_ms(timing.high)} ms"


def _where(processes: int, rounds: int) -> str:
    return (f"median of {processes} fresh processes' medians of {rounds} rounds" if processes > 1
            else f"median of {rounds} rounds in this process")


def _clock_note(clock: str) -> str:
    return "" if clock == "wall" else " (CPU time)"


def per_core_table(title: str, results: dict[str, dict[str, Timing]],
                   ratios_of: dict[str, dict[str, list[float]]]) -> Table:
    """A column per condition: each variant's median and spread, and for a lists variant its
    ratio to `impl (lists)` (in each process: the lowest and highest of those ratios)."""
    table = Table(title=title)
    table.add_column("variant")
    for label in results:
        table.add_column(label, justify="right")
    names = list(next(iter(results.values())))
    for name in names:
        cells = []
        for label, variants in results.items():
            timing = variants.get(name)
            if timing is None:
                cells.append("-")
                continue
            ratio = ratios_of[label].get(name)
            text = f"{_ms(timing.median)} ms ({_spread(timing)})"
            if ratio:
                low, high = min(ratio), max(ratio)
                text += (f"; {statistics.median(ratio):.2f}x" if low == high else
                         f"; {statistics.median(ratio):.2f}x ({low:.2f}–{high:.2f}x)")
            cells.append(text)
        table.add_row(name, *cells)
    return table


def lists_ratios(sample_sets: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """For every lists variant but the impl's: its median / impl (lists)'s median, in each
    process (the ratio a user's process sees)."""
    out: dict[str, list[float]] = {}
    for samples in sample_sets:
        impl = samples.get("impl (lists)")
        if not impl:
            continue
        for name, values in samples.items():
            if name.endswith("(lists)") and name != "impl (lists)" and values:
                out.setdefault(name, []).append(statistics.median(values)
                                                / statistics.median(impl))
    return out


def forms_line(medians_of: dict[str, float]) -> str | None:
    """Each `impl (FORM)` variant against the fastest of them: a form far slower than another
    is a cliff between two accepted inputs (issue 39)."""
    forms = {name: seconds for name, seconds in medians_of.items()
             if name.startswith("impl (") and "torch path" not in name}
    if len(forms) < 2:
        return None
    fastest = min(forms.values())
    return "input forms against the fastest: " + ", ".join(
        f"{name.removeprefix('impl ')} {seconds / fastest:.2f}x" for name, seconds in
        sorted(forms.items(), key=lambda item: item[1]))


# --------------------------------------------------------------------------- the command


def main(ops=None, device: str = "cpu", json_path: str | None = None, quick: bool = False,
         pages: str = "system", scale: str = "default", per_core_mode: bool = False,
         batches: list[int] | None = None, processes: int | None = None,
         conditions: list[str] | None = None, clock: str = "wall") -> int:
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
    if conditions and not per_core_mode:
        raise ValueError("--condition chooses the conditions of --per-core")
    if conditions and set(conditions) - set(CONDITIONS):
        raise ValueError(f"--condition must be one of {list(CONDITIONS)}, got "
                         f"{sorted(set(conditions) - set(CONDITIONS))}")
    if batches and (scale != "default" or quick):
        raise ValueError("--batch sizes the default-scale workloads: not with --scale h100 or "
                         "--quick")
    if batches and min(batches) < 1:
        raise ValueError(f"--batch must be at least 1, got {min(batches)}")
    if clock not in CLOCKS:
        raise ValueError(f"--clock must be one of {list(CLOCKS)}, got {clock!r}")
    if clock == "cpu" and device == "cuda":
        raise ValueError("--clock cpu counts the host's CPU time: not with --device cuda")
    if processes is not None and processes < 1:
        raise ValueError(f"--processes must be at least 1, got {processes}")
    if processes is None:  # a user's processes by default; one for a smoke test or a GPU
        processes = 1 if quick or device == "cuda" or scale != "default" else PROCESSES
    sizes = [{"batch": b} for b in batches] if batches else [{"batch": 64} if quick else {}]
    rounds = 2 if quick else 7
    runs = [(name, size) for name in names for size in sizes] if scale == "default" else \
        [(name, QUICK_DEVICE_SIZES.get(name, QUICK_DEVICE_SIZE) if quick else {})
         for name in names]
    chosen = list(conditions or CONDITIONS)
    report = {}
    try:
        for name, size in runs:
            spec = _spec(name, size, device, rounds, quick, scale, pages.split(" ")[0],
                         per_core_mode, chosen, clock)
            results = _measured(spec, processes)
            key = name if len(sizes) == 1 else f"{name} {results[0]['size']}"
            if per_core_mode:
                report[key] = _per_core_report(results, processes, rounds, pages)
            else:
                report[key] = _report(results, device, processes, rounds, pages)
            report[key]["clock"] = clock
    except RuntimeError as err:
        console.print(f"[red]bench: {err}[/red]")
        return 3
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(report, handle, indent=2)
    return 0


def _measured(spec: dict, processes: int) -> list[dict]:
    """`measure(spec)` here (one process) or in fresh processes, with a progress bar on a
    terminal."""
    mode = "per core, " if spec["per_core"] else ""
    label = f"{spec['name']} ({mode}{spec['size'] or 'default size'})"
    with terminal.progress(console, transient=True) as progress:
        if processes == 1:
            task = progress.add_task(label, total=None)
            results = [measure(spec, progress=lambda: progress.advance(task))]
        else:
            task = progress.add_task(f"{label}, {processes} processes", total=processes)
            results = measure_in_fresh_processes(spec, processes,
                                                 done=lambda: progress.advance(task))
    if results[0]["checked"]:
        console.print(f"{spec['name']}: the impl's output is the reference's")
    return results


def _report(results: list[dict], device: str, processes: int, rounds: int, pages: str) -> dict:
    first = results[0]
    timed = timings([r["samples"] for r in results])
    middle = {name: t.median for name, t in timed.items()}
    table = Table(title=f"{first['op']}.{first['function']} — {first['size']}, device={device}, "
                        f"{first['output_bytes'] / 1e6:.0f} MB of outputs, pages {pages}; "
                        f"{_where(processes, rounds)}{_clock_note(first['clock'])}")
    table.add_column("variant")
    table.add_column("median", justify="right")
    table.add_column("spread" + (" over processes" if processes > 1 else " over rounds"),
                     justify="right")
    table.add_column("ratio (of the medians)")
    for variant, text in ratios(middle).items():
        timing = timed[variant]
        table.add_row(variant, f"{_ms(timing.median)} ms", _spread(timing), text)
    console.print(table)
    floor = middle.get("floor (output write)")
    if floor:
        console.print(f"write bandwidth (floor): {first['output_bytes'] / floor / 1e9:.1f} GB/s")
    line = forms_line(middle)
    if line:
        console.print(line)
    for prefix, text in LEGEND.items():
        if any(name.startswith(prefix) for name in middle):
            console.print(f"{prefix}: {text}")
    return {"size": first["size"], "device": device, "pages": pages, "processes": processes,
            "rounds": rounds, "seconds": middle,
            "spread": {name: [t.low, t.high] for name, t in timed.items()},
            "per_process": {name: t.per_process for name, t in timed.items()},
            "output_bytes": first["output_bytes"],
            "write_bandwidth_gbps": first["output_bytes"] / floor / 1e9 if floor else None}


def _per_core_report(results: list[dict], processes: int, rounds: int, pages: str) -> dict:
    first = results[0]
    for note in first.get("notes", []):
        console.print(note)
    labels = list(first["conditions"])
    timed = {label: timings([r["conditions"][label]["samples"] for r in results])
             for label in labels}
    ratios_of = {label: lists_ratios([r["conditions"][label]["samples"] for r in results])
                 for label in labels}
    title = (f"{first['op']}.{first['function']} — {first['size']}, per core and on a busy host "
             f"({_where(processes, rounds)}{_clock_note(first['clock'])}; ratio of a lists "
             "variant: its median / impl "
             "(lists)'s in the same process, over the processes)")
    console.print(per_core_table(title, timed, ratios_of))
    conditions = {}
    for label in labels:
        info = first["conditions"][label]
        conditions[label] = {
            "condition": info["condition"], "spinning": info["spinning"],
            "threads": info["threads"],
            "seconds": {name: t.median for name, t in timed[label].items()},
            "spread": {name: [t.low, t.high] for name, t in timed[label].items()},
            "per_process": {name: t.per_process for name, t in timed[label].items()},
            "ratios": ratios_of[label]}
    return {"size": first["size"], "pages": pages, "cpu_count": os.cpu_count(),
            "processes": processes, "rounds": rounds, "notes": first.get("notes", []),
            "conditions": conditions}


def _worker(argv: list[str]) -> int:
    """`python -m batchproof.perf.bench SPEC`: one measurement in this fresh process; its result
    as one JSON line on standard output (what the workload prints goes to standard error)."""
    spec = json.loads(argv[0])
    with contextlib.redirect_stdout(sys.stderr):
        result = measure(spec)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))

"""`batchproof mutate --zoo`: the bug zoo's kill matrix.

For each zoo entry the entry is planted (`batchproof.mutation.zoo.planted`) and every check of
every record of its op runs against it under the `mutation` Hypothesis profile (derandomized, no
shrinking, few examples). A check *kills* the entry when it fails. An entry survives when no check
fails; an entry is *misdeclared* when one of its declared killers does not fail on it.

`detection(entries, seeds)` measures what one user run gets instead: each entry under each seed
of the `dev` profile (40 random examples per check, pins included, no database, no shrinking),
and per entry and per declared killer the fraction of seeds whose run kills it. A seeded run
runs the entry's declared killers first and the op's other checks only when those all missed:
the entry's rate is what running every check gives, at a fraction of the cost.
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import Phase, settings

from batchproof import profiles, registry
from batchproof.checks import run_check
from batchproof.mutation.zoo import ZooEntry, all_entries, planted


@dataclass
class EntryResult:
    """One row of the kill matrix: check name (record/check) → killed?"""

    entry: str
    op: str
    declared: list[str]
    killed_by: dict[str, bool] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def killed(self) -> bool:
        return any(self.killed_by.values())

    @property
    def missed_killers(self) -> list[str]:
        """Declared killers that did not kill the entry by a failed assertion (a crash inside the
        mutant is not what the killer is meant to show)."""
        return [k for k in self.declared
                if not self.killed_by.get(k, False) or k in self.crashed]

    @property
    def crashed(self) -> set[str]:
        return {k for k, text in self.errors.items() if not text.startswith("assert")}


def check_key(record: str, check: str) -> str:
    return f"{record}/{check}"


def run_entry(
    entry: ZooEntry,
    checks: Sequence[tuple[str, str]] | None = None,
    profile: str = "mutation",
    disabled: Sequence[str] = (),
    seed: int | None = None,
    search_only: bool = False,
) -> EntryResult:
    """Plant `entry` and run `checks` ((record, check) pairs; default: every check of its op);
    with `seed`, one seeded run of `profile` without database or shrinking (`detection`);
    `search_only`: without the pins (neither the `pin:` checks nor the `@example`s that put them
    in front of each search), so only what the random search finds kills."""
    profiles.load(profile)
    chosen = settings()
    if seed is not None:  # what a user's run finds; shrinking only makes the report smaller
        chosen = settings(chosen, database=None, report_multiple_bugs=False,
                          phases=[p for p in chosen.phases if p not in (Phase.shrink, Phase.explain)])
    if search_only:
        chosen = settings(chosen, phases=[p for p in chosen.phases if p != Phase.explicit])
    if checks is None:  # every check of the op, and the entry's `paths:` killers (a paths
        # check reruns a record's checks under one placement: only where an entry names it)
        checks = [(info.name, c) for info in registry.select([entry.op])
                  for c in info.check_names()]
        checks += [(r, c) for r, c in entry.killer_checks() if c.startswith("paths:")]
    checks = [(r, c) for r, c in checks if check_key(r, c) not in disabled
              and not (search_only and c.startswith("pin:"))]
    result = EntryResult(entry.name, entry.op, [check_key(r, c) for r, c in
                                                 entry.killer_checks()])
    start = time.perf_counter()
    with planted(entry):
        for record, check in checks:
            key = check_key(record, check)
            try:
                run_check(registry.get(record), check, settings=chosen, seed=seed)
            except Exception as exc:  # noqa: BLE001 - any failure kills the mutant
                result.killed_by[key] = True
                kind = "assert" if isinstance(exc, AssertionError) else "crash"
                first_line = (str(exc).splitlines() or [""])[0][:200]
                result.errors[key] = f"{kind} {type(exc).__name__}: {first_line}"
            else:
                result.killed_by[key] = False
    result.seconds = time.perf_counter() - start
    return result


def _run_entry_by_name(name: str, profile: str, only_declared: bool,
                       disabled: Sequence[str], search_only: bool = False) -> EntryResult:
    from batchproof.mutation import zoo

    entry = zoo.get(name)
    checks = entry.killer_checks() if only_declared else None
    return run_entry(entry, checks, profile, disabled, search_only=search_only)


def _detect_once(name: str, disabled: Sequence[str], seed: int,
                 search_only: bool = False) -> EntryResult:
    """One seeded `dev` run of entry `name`: its declared killers first, and the op's other
    checks only when none of them killed it. Whether the run kills the entry is the same as
    running every check (it is killed when any check fails); each declared killer's count is
    exact, another check's counts only the runs its declared killers missed (`Detection`)."""
    from batchproof.mutation import zoo

    entry = zoo.get(name)
    declared = entry.killer_checks()
    result = run_entry(entry, declared, DETECTION_PROFILE, disabled, seed, search_only)
    if result.killed:
        return result
    rest = [(info.name, c) for info in registry.select([entry.op]) for c in info.check_names()
            if (info.name, c) not in declared]
    others = run_entry(entry, rest, DETECTION_PROFILE, disabled, seed, search_only)
    result.killed_by.update(others.killed_by)
    result.errors.update(others.errors)
    result.seconds += others.seconds
    return result


def kill_matrix(
    entries: Sequence[ZooEntry] | None = None,
    *,
    profile: str = "mutation",
    jobs: int | None = None,
    only_declared: bool = False,
    disabled: Sequence[str] = (),
    search_only: bool = False,
    progress=None,
) -> list[EntryResult]:
    """Run every entry (in `jobs` worker processes) and return one result per entry, in order."""
    entries = list(entries) if entries is not None else all_entries()
    jobs = jobs or min(len(entries), os.cpu_count() or 1)
    if jobs <= 1:
        results = []
        for entry in entries:
            results.append(run_entry(entry, entry.killer_checks() if only_declared else None,
                                     profile, disabled, search_only=search_only))
            if progress:
                progress(results[-1])
        return results
    context = multiprocessing.get_context("spawn")
    with futures.ProcessPoolExecutor(jobs, mp_context=context,
                                     initializer=_single_thread) as pool:
        pending = {pool.submit(_run_entry_by_name, e.name, profile, only_declared,
                               tuple(disabled), search_only): e.name for e in entries}
        done: dict[str, EntryResult] = {}
        for future in futures.as_completed(pending):
            done[pending[future]] = future.result()
            if progress:
                progress(done[pending[future]])
    return [done[e.name] for e in entries]


DETECTION_PROFILE = "dev"
DETECTION_TARGET = 0.95


@dataclass
class Detection:
    """One entry under `seeds` seeded runs: how many killed it, in all and per check."""

    entry: str
    op: str
    declared: list[str]
    seeds: int
    killed: int = 0  # runs in which some check failed
    # record/check -> runs it failed in; exact for a declared killer, for another check only
    # the runs in which every declared killer missed (the only runs it was asked about)
    by_check: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.killed / self.seeds

    def check_rate(self, key: str) -> float:
        return self.by_check.get(key, 0) / self.seeds

    def rescuers(self) -> dict[str, int]:
        """Checks other than the declared killers that killed the entry, with the number of runs
        (all of them runs in which every declared killer missed)."""
        return {k: n for k, n in self.by_check.items() if n and k not in self.declared}


def detection(
    entries: Sequence[ZooEntry] | None = None,
    *,
    seeds: int,
    jobs: int | None = None,
    disabled: Sequence[str] = (),
    search_only: bool = False,
    progress=None,
) -> list[Detection]:
    """Each entry under seeds 0 .. seeds-1 of the `dev` profile; one `Detection` per entry.
    `search_only`: without the pins, what the random search alone catches (`run_entry`)."""
    if seeds < 1:
        raise ValueError(f"--seeds must be at least 1, got {seeds}")
    entries = list(entries) if entries is not None else all_entries()
    results = {e.name: Detection(e.name, e.op, [check_key(r, c) for r, c in e.killer_checks()
                                                if not (search_only and c.startswith("pin:"))],
                                 seeds) for e in entries}

    def add(run: EntryResult) -> None:
        found = results[run.entry]
        found.killed += run.killed
        found.seconds += run.seconds
        for key, hit in run.killed_by.items():
            found.by_check[key] = found.by_check.get(key, 0) + hit
        if progress:
            progress(run)

    runs = [(e.name, seed) for seed in range(seeds) for e in entries]
    jobs = jobs or min(len(runs), os.cpu_count() or 1)
    if jobs <= 1:
        for name, seed in runs:
            add(_detect_once(name, tuple(disabled), seed, search_only))
    else:
        context = multiprocessing.get_context("spawn")
        with futures.ProcessPoolExecutor(jobs, mp_context=context,
                                         initializer=_single_thread) as pool:
            pending = [pool.submit(_detect_once, name, tuple(disabled), seed, search_only)
                       for name, seed in runs]
            for future in futures.as_completed(pending):
                add(future.result())
    for found in results.values():  # every check that ran, in a stable order
        found.by_check = dict(sorted(found.by_check.items(), key=lambda kv: (-kv[1], kv[0])))
    return [results[e.name] for e in entries]


def weakest(found: Detection) -> tuple[str, float] | None:
    """The declared killer that killed in the fewest seeds, with its rate."""
    if not found.declared:
        return None
    key = min(found.declared, key=lambda k: (found.check_rate(k), k))
    return key, found.check_rate(key)


def _single_thread() -> None:
    import logging

    import torch

    torch.set_num_threads(1)
    logging.getLogger().addHandler(logging.NullHandler())  # ops' warnings are checked, not shown

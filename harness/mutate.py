"""Mutation testing: the bug zoo's kill matrix (and the mutmut driver, `harness.mutmut_driver`).

For each zoo entry the entry is planted (`harness.zoo.planted`) and every check of every record of
its op runs against it under the `mutation` Hypothesis profile (derandomized, no shrinking, few
examples). A check *kills* the entry when it fails. An entry survives when no check fails; an
entry is *misdeclared* when one of its declared killers does not fail on it.
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import settings

from batchproof import profiles, registry
from batchproof.checks import run_check
from batchproof.zoo import ZooEntry, all_entries, planted


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
) -> EntryResult:
    """Plant `entry` and run `checks` ((record, check) pairs; default: every check of its op)."""
    profiles.load(profile)
    chosen = settings()
    if checks is None:
        checks = [(info.name, c) for info in registry.select([entry.op])
                  for c in info.check_names()]
    checks = [(r, c) for r, c in checks if check_key(r, c) not in disabled]
    result = EntryResult(entry.name, entry.op, [check_key(r, c) for r, c in
                                                 entry.killer_checks()])
    start = time.perf_counter()
    with planted(entry):
        for record, check in checks:
            key = check_key(record, check)
            try:
                run_check(registry.get(record), check, settings=chosen)
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
                       disabled: Sequence[str]) -> EntryResult:
    from batchproof import zoo

    entry = zoo.get(name)
    checks = entry.killer_checks() if only_declared else None
    return run_entry(entry, checks, profile, disabled)


def kill_matrix(
    entries: Sequence[ZooEntry] | None = None,
    *,
    profile: str = "mutation",
    jobs: int | None = None,
    only_declared: bool = False,
    disabled: Sequence[str] = (),
    progress=None,
) -> list[EntryResult]:
    """Run every entry (in `jobs` worker processes) and return one result per entry, in order."""
    entries = list(entries) if entries is not None else all_entries()
    jobs = jobs or min(len(entries), os.cpu_count() or 1)
    if jobs <= 1:
        results = []
        for entry in entries:
            results.append(run_entry(entry, entry.killer_checks() if only_declared else None,
                                     profile, disabled))
            if progress:
                progress(results[-1])
        return results
    context = multiprocessing.get_context("spawn")
    with futures.ProcessPoolExecutor(jobs, mp_context=context,
                                     initializer=_single_thread) as pool:
        pending = {pool.submit(_run_entry_by_name, e.name, profile, only_declared,
                               tuple(disabled)): e.name for e in entries}
        done: dict[str, EntryResult] = {}
        for future in futures.as_completed(pending):
            done[pending[future]] = future.result()
            if progress:
                progress(done[pending[future]])
    return [done[e.name] for e in entries]


def _single_thread() -> None:
    import logging

    import torch

    torch.set_num_threads(1)
    logging.getLogger().addHandler(logging.NullHandler())  # ops' warnings are checked, not shown

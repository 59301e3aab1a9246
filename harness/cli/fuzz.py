"""`batchproof fuzz`: HypoFuzz over the registry's searched checks (docs/fuzzing.md)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.table import Table

from batchproof.cli.common import (
    PROG,
    UsageError,
    _cores,
    _load_profile,
    console,
    say,
    select_checks,
    select_records,
)

if TYPE_CHECKING:
    from batchproof.registry import OpInfo

FUZZ_MISSING = "batchproof fuzz needs HypoFuzz: pip install 'batchproof[fuzz]'"

# `hypothesis fuzz`, with the ops' logged warnings unshown (checked, as in `verify`; HypoFuzz's
# worker processes inherit the handler)
HYPOFUZZ_MAIN = ("import logging; logging.getLogger().addHandler(logging.NullHandler()); "
                 "from hypothesis.extra.cli import main; main(prog_name='hypothesis')")
NOT_COUNTED = "not counted"  # a cell of the summary whose count is not known (why: below it)

def fuzz(args: argparse.Namespace) -> int:
    """HypoFuzz over the registry's searched checks on impl/ (`batchproof.fuzz_targets`), on
    `-n` processes, until stopped. Its pytest collection has the package folder as rootdir, so
    that a test's node id, which HypoFuzz keys its examples by, gives the Hypothesis database key
    `run_check` uses: what it finds replays in `verify` (docs/fuzzing.md). Stopped (Ctrl-C,
    SIGTERM), it prints per check what HypoFuzz did and exits 130; else HypoFuzz's status (it
    ends by itself only when every test has failed, with 1)."""
    import subprocess

    from batchproof import checks

    if importlib.util.find_spec("hypofuzz") is None:
        raise UsageError(FUZZ_MISSING)
    profile = args.profile or "nightly"
    if profile in ("ci", "mutation"):
        raise UsageError(f"--profile {profile} is derandomized, without a database: HypoFuzz "
                         "fuzzes none of its tests (nightly or dev)")
    _load_profile(profile)  # an unknown name, a malformed shared database: one line
    _read_shared_database_once()
    workers = args.workers if args.workers is not None else _cores()
    if workers < 1:
        raise UsageError(f"-n must be at least 1, got {workers}")
    infos, _ = select_records(args.op)  # records missing an optional module are left out
    wanted = select_checks(infos, args.check)
    pairs = [(i, c) for i in infos for c in wanted[i.name] if checks.searched(c)]
    if not pairs:
        raise UsageError("no searched check selected: a pin is one example, nothing to fuzz "
                         "(`batchproof verify` runs it)")
    tests = [f"{fuzz_module()}::test_{checks.check_test_name(i, c)}" for i, c in pairs]
    dashboard = (["--dashboard-only"] if args.dashboard_only else ["--dashboard"]
                 if args.dashboard else ["--no-dashboard"])
    if args.dashboard or args.dashboard_only:
        dashboard += ["--port", str(args.port)]
    pytest_args = fuzz_pytest_args(profile, tests if args.op or args.check else None)
    doing = "dashboard only" if args.dashboard_only else \
        f"HypoFuzz on {workers} process{'es' * (workers > 1)}"
    say(f"{PROG} fuzz: {doing}, {len(tests)} checks, profile {profile}; until stopped (Ctrl-C)")
    command = [sys.executable, "-c", HYPOFUZZ_MAIN, "fuzz", "-n", str(workers), *dashboard,
               "--", *pytest_args]
    started = time.time()
    # `timeout` and CI stop it with SIGTERM (sent to the whole process group): HypoFuzz's
    # processes end, and this one prints what they did
    previous = signal.signal(signal.SIGTERM, _interrupt)
    child = subprocess.Popen(command)
    try:
        code = child.wait()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: HypoFuzz's processes have it too
        code = 130
        try:
            child.wait(timeout=30)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            child.kill()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not args.dashboard_only:
        _fuzz_summary(pairs, started)
    return 128 - code if code < 0 else code  # killed by a signal: the shell's status

def _read_shared_database_once() -> None:
    """A `github:` shared database downloads its artifact here, once (Hypothesis keeps it a day
    under .hypothesis/github-artifacts/): HypoFuzz's processes then read this copy, rather than
    each downloading its own at the same moment and deleting the others' (it keeps one zip)."""
    from hypothesis import settings

    if settings().database is not None:
        list(settings().database.fetch(b"batchproof fuzz: read the shared database once"))

def fuzz_module():
    """The path of `batchproof.fuzz_targets`' file (not imported)."""
    from pathlib import Path

    from batchproof import checks

    return Path(checks.__file__).parent / checks.FUZZ_MODULE

def fuzz_pytest_args(profile: str, tests: Sequence[str] | None = None) -> list[str]:
    """pytest's arguments for HypoFuzz's collection: the package folder as rootdir (node ids
    `fuzz_targets.py::test_…`, which key the examples as `run_check` does), no ini file (not
    the addopts of a project batchproof is installed in), batchproof's plugin and `profile`,
    and `tests` (node ids; default: every test of the module)."""
    module = fuzz_module()
    return [f"--rootdir={module.parent}", "-c", os.devnull, "-p", "batchproof.plugin", "-p",
            "no:cacheprovider", f"--hypothesis-profile={profile}", *(tests or [str(module)])]

def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt

@dataclass
class FuzzCount:
    """What HypoFuzz reported of one check since the run started: `cases` (test cases run, by
    all processes) and `behaviours` (the most any one process saw) are None when they cannot be
    counted, and `why` says why; `failing` counts the failing examples saved for it (shrunk)."""

    record: str
    check: str
    cases: int | None = None
    behaviours: int | None = None
    failing: int = 0
    why: str = ""

def fuzz_database_key(info: OpInfo, check: str) -> bytes:
    """The key HypoFuzz keeps a check's reports and failing examples under: Hypothesis' digest
    of the fuzz target with its node id hashed in (`checks.given_test` sets it on the test; the
    digest of the test's inner function alone is another key, under which nothing is kept)."""
    from batchproof.checks import given_test

    return given_test(info, check)._hypothesis_internal_database_key

def latest_reports(reports: Iterable[Any], since: float) -> list[Any]:
    """Each HypoFuzz process's last report since `since` (a report's counts are that process's
    totals for the test so far, so the last one holds them all): one per worker."""
    latest: dict[str, Any] = {}
    for report in reports:
        last = latest.get(report.worker_uuid)
        if report.timestamp >= since and (last is None
                                          or report.elapsed_time >= last.elapsed_time):
            latest[report.worker_uuid] = report
    return list(latest.values())

def fuzz_counts(pairs, since: float) -> list[FuzzCount]:
    """Per (record, check), what HypoFuzz reported in the example database since `since`;
    a check with no report of an input says why instead of a count."""
    from hypofuzz.database import HypofuzzDatabase
    from hypofuzz.database.models import FailureState
    from hypothesis import settings

    if settings().database is None:
        return [FuzzCount(info.name, check, why="the profile has no example database")
                for info, check in pairs]
    db = HypofuzzDatabase(settings().database)
    counts = []
    for info, check in pairs:
        key = fuzz_database_key(info, check)
        count = FuzzCount(info.name, check,
                          failing=len(list(db.failures(state=FailureState.SHRUNK).fetch(key))))
        latest = latest_reports(db.reports.fetch(key), since)
        cases = sum(sum(r.status_counts.values()) for r in latest)
        if cases:
            count.cases, count.behaviours = cases, max(r.behaviors for r in latest)
        else:
            count.why = _why_not_counted(db, key, latest)
        counts.append(count)
    return counts

def _why_not_counted(db: Any, key: bytes, latest: list[Any]) -> str:
    fatal = db.fatal_failures.fetch(key)
    if fatal is not None:
        lines = fatal.traceback.strip().splitlines() or ["?"]
        return f"HypoFuzz could not run it ({lines[-1]})"
    if latest:
        return "HypoFuzz started it but reported no input yet (a process reports every " \
               "second at first, then every minute: the inputs since are not counted)"
    return "no report of HypoFuzz since the run started (it had not reached this check)"

def _fuzz_summary(pairs, since: float) -> None:
    """Per check, what HypoFuzz did since `since` (the reports it keeps in the example
    database: test cases run by all processes, behaviours seen) and the failing examples saved
    for it (shrunk; `verify` replays them). A check it cannot count says why, never 0."""
    try:
        counts = fuzz_counts(pairs, since)
    except Exception as err:  # noqa: BLE001 - a summary, not the result
        say(f"{PROG} fuzz: could not count what HypoFuzz ran ({type(err).__name__}: {err})")
        return
    print_fuzz_counts(counts, time.time() - since)
    from batchproof.shared_database import failures_since

    for line in failures_since(since):  # HypoFuzz's workers lost the shared database
        say(line)

def print_fuzz_counts(counts: list[FuzzCount], seconds: float) -> None:
    """The summary table; below it, why each check not counted could not be."""
    table = Table(title=f"HypoFuzz, {seconds:.0f} s", title_justify="left")
    for column in ("record", "check", "test cases", "behaviours", "failing examples saved"):
        table.add_column(column, justify="left" if column in ("record", "check") else "right")
    for c in counts:
        table.add_row(c.record, c.check, NOT_COUNTED if c.cases is None else str(c.cases),
                      NOT_COUNTED if c.behaviours is None else str(c.behaviours),
                      f"[red]{c.failing}[/red]" if c.failing else "0")
    console.print(table)
    for c in counts:
        if c.cases is None:
            say(f"{c.record} {c.check}: could not count: {c.why}")
    failed = sorted({c.record for c in counts if c.failing})
    if failed:
        say(f"failing examples are saved for {', '.join(failed)}: `{PROG} verify --profile "
            "nightly` replays them first")

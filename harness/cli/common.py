"""Shared by the commands: exit statuses, the two errors that end a command with one line,
the console, and what verify, check, mutate, bench and fuzz all need to select and run checks."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from batchproof import terminal
from batchproof.statuses import ExitStatus

OK, DIVERGENCE, USAGE, HARNESS = (ExitStatus.OK, ExitStatus.DIVERGENCE, ExitStatus.USAGE,
                                  ExitStatus.HARNESS)


console = Console(width=None if Console().is_terminal else 140)

PROG = "batchproof"

class UsageError(Exception):
    """A mistake in the command line: one line on stderr, exit status 2."""

class TargetError(Exception):
    """The function under test cannot be imported: one line on stderr, exit status 3."""

def say(text: str = "", **kwargs: Any) -> None:
    """Print text as it is: no rich markup (`[frameworks]` stays), no hard-wrapped lines."""
    console.print(text, markup=False, highlight=False, soft_wrap=True, **kwargs)

def import_target(target: str) -> Any:
    """`module:function` (or `module:Class.attr`), importing from the current folder as
    `python -m` does; a `TargetError` says why it cannot be had."""
    from batchproof.adapters import FrameworkMissing, load_target

    try:
        return load_target(target)
    except ValueError:
        raise UsageError(f"--impl {target!r}: expected module:function") from None
    except FrameworkMissing as err:
        raise TargetError(f"--impl {target}: {err}") from None

def select_records(ops: Sequence[str] | None):
    """The records `--op` names (all by default), and those left out because an optional module
    is missing; naming such a record itself is an error (exit 3)."""
    from batchproof import registry

    try:
        infos = registry.select(ops)
    except ValueError as err:
        raise UsageError(f"{err} (see `batchproof list records`)") from None
    runnable = [i for i in infos if not i.missing()]
    left_out = [i for i in infos if i.missing()]
    named = [i for i in left_out if ops and i.name in ops]
    if named:
        raise TargetError(f"{named[0].name} needs {', '.join(named[0].missing())}")
    return runnable, left_out

def select_checks(infos, checks: Sequence[str] | None) -> dict[str, list[str]]:
    """record name -> the checks to run (`--check` names, or all)."""
    if not checks:
        return {i.name: i.check_names() for i in infos}
    known = {c for i in infos for c in i.check_names()}
    unknown = [c for c in checks if c not in known]
    if unknown:
        from batchproof.registry import did_you_mean

        raise UsageError(f"unknown check {unknown[0]!r}{did_you_mean(unknown[0], known)} "
                         "(`batchproof list checks`)")
    return {i.name: [c for c in i.check_names() if c in checks] for i in infos}

def run_settings(max_examples: int | None):
    """The loaded profile, one failure per check (the minimal one), no explain phase,
    `--max-examples` applied."""
    from hypothesis import settings

    if max_examples is not None and max_examples < 1:
        raise UsageError(f"--max-examples must be at least 1, got {max_examples}")
    from batchproof.report import without_explain

    return settings(report_multiple_bugs=False,  # the rest: the loaded profile's
                    phases=without_explain(settings().phases),
                    **({"max_examples": max_examples} if max_examples else {}))

def reproduce_of(blob: str | None) -> tuple[str, str] | None:
    """(Hypothesis version, blob) for `run_check`; a blob Hypothesis cannot decode is a usage
    error."""
    import hypothesis

    from batchproof.report import check_blob

    if not blob:
        return None
    try:
        check_blob(blob)
    except ValueError as err:
        raise UsageError(str(err)) from None
    return (hypothesis.__version__, blob)

def _need_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device here")

def _load_profile(name: str | None) -> str:
    from batchproof import profiles

    try:
        return profiles.load(name)
    except ValueError as err:
        raise UsageError(str(err)) from None

def _one_thread_unless_asked() -> None:
    """The checks run many tiny tensor ops: intra-op threads only contend (OMP_NUM_THREADS wins)."""
    import torch

    if not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(1)

def _progress() -> Progress:
    """The commands' progress bar: on a terminal only (`batchproof.terminal`)."""
    return terminal.progress(console, TextColumn("{task.description:<48}"), BarColumn(),
                             MofNCompleteColumn(), TimeElapsedColumn())

def _cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


# what `batchproof list` can list (`regimes` draws each strategy's budget: only when named)
LISTS = ("ops", "records", "checks", "adapters", "profiles", "placements", "regimes")

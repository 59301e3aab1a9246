"""Every status a report says, as enums (one vocabulary per kind of result).

Each is a `str` enum: it compares equal to its value (`Verdict.PASS == "pass"`), prints and
serializes (JSON) as it, so reports and their readers keep the words they had.

    Verdict        one check of `batchproof verify`: pass, fail, error
    Outcome        one check of `batchproof check` / `batchproof.check`: pass, new, known,
                   skipped, not tested, error, not run
    KnownStatus    one known divergence of an adapter: confirmed, not met, not reproduced,
                   diverged otherwise
    ExitStatus     what a command's exit status says; `exit_status` is the one policy that
                   `verify`, `check` and `mutate --impl`'s first check share
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum, IntEnum


class _Status(str, Enum):
    def __str__(self) -> str:
        return self.value


class Verdict(_Status):
    """A `batchproof verify` check."""

    PASS = "pass"
    FAIL = "fail"  # the candidate diverged
    ERROR = "error"  # batchproof's own failure, or a check that ran no example


class Outcome(_Status):
    """A `batchproof check` check (docs/frameworks.md, "What a report claims")."""

    PASS = "pass"
    NEW = "new"  # a new divergence
    KNOWN = "known"  # a pin set aside by a known divergence, which it showed as described
    SKIPPED = "skipped"  # the adapter or the scope leaves it out
    NOT_TESTED = "not tested"  # every drawn input was set aside by the adapter's declarations
    ERROR = "error"  # batchproof's own failure (a predicate, a wrapper, a strategy), or a
    # check that ran no example with nothing set aside
    NOT_RUN = "not run"  # the adapter does not fit the installed framework


class KnownStatus(_Status):
    """A known divergence, after the check (`runner.known_status`)."""

    CONFIRMED = "confirmed"
    NOT_MET = "not met"  # no input matched it
    NOT_REPRODUCED = "not reproduced"  # matched, and the target agreed every time
    DIVERGED_OTHERWISE = "diverged otherwise"  # a new divergence behind a known one


class ExitStatus(IntEnum):
    """What a command's exit status says (the same for every command)."""

    OK = 0  # every check passed (mutate: every planted bug or mutant killed)
    DIVERGENCE = 1  # a divergence was found (mutate: one survived)
    USAGE = 2  # a mistake in the command line
    HARNESS = 3  # the target could not be imported, or batchproof itself failed


OURS = (Verdict.ERROR, Outcome.ERROR, Outcome.NOT_RUN)
DIVERGED = (Verdict.FAIL, Outcome.NEW)


def exit_status(statuses: Iterable[_Status], *, ours: bool = False,
                diverged: bool = False) -> ExitStatus:
    """The exit policy of every command that runs checks (`verify`, `check`, the check
    `mutate --impl` runs first), one status per check run:

        HARNESS     nothing ran, or batchproof could not do its job (`ours`): an error of its
                    own, an adapter that does not fit the installed framework, a check that ran
                    no example although nothing was set aside (each an ERROR or NOT RUN)
        DIVERGENCE  else, a check found a divergence (`diverged`: also a known divergence whose
                    inputs diverged another way than it says)
        OK          else. NOT TESTED (every input drawn was set aside by the adapter's declared
                    domain or known divergences) is never a pass: reports count it apart, and
                    `batchproof.check` fails on it; it does not change the exit status.
    """
    statuses = list(statuses)
    if not statuses or ours or any(s in OURS for s in statuses):
        return ExitStatus.HARNESS
    if diverged or any(s in DIVERGED for s in statuses):
        return ExitStatus.DIVERGENCE
    return ExitStatus.OK

"""Every status a report says, as enums (one vocabulary per kind of result).

Each is a `str` enum: it compares equal to its value (`Verdict.PASS == "pass"`), prints and
serializes (JSON) as it, so reports and their readers keep the words they had.

    Verdict        one check of `batchproof verify`: pass, fail, error, not tested
    Outcome        one check of `batchproof check` / `batchproof.check`: pass, new, known,
                   skipped, not tested, error, not run
    KnownStatus    one known divergence of an adapter: confirmed, not met, not reproduced,
                   diverged otherwise
"""

from __future__ import annotations

from enum import Enum


class _Status(str, Enum):
    def __str__(self) -> str:
        return self.value


class Verdict(_Status):
    """A `batchproof verify` check."""

    PASS = "pass"
    FAIL = "fail"  # the candidate diverged
    ERROR = "error"  # batchproof's own failure
    NOT_TESTED = "not tested"  # no example ran: never a pass


class Outcome(_Status):
    """A `batchproof check` check (docs/frameworks.md, "What a report claims")."""

    PASS = "pass"
    NEW = "new"  # a new divergence
    KNOWN = "known"  # a pin set aside by a known divergence, which it showed as described
    SKIPPED = "skipped"  # the adapter or the scope leaves it out
    NOT_TESTED = "not tested"  # no input reached the target
    ERROR = "error"  # batchproof's own failure (a predicate, a wrapper, a strategy)
    NOT_RUN = "not run"  # the adapter does not fit the installed framework


class KnownStatus(_Status):
    """A known divergence, after the check (`runner.known_status`)."""

    CONFIRMED = "confirmed"
    NOT_MET = "not met"  # no input matched it
    NOT_REPRODUCED = "not reproduced"  # matched, and the target agreed every time
    DIVERGED_OTHERWISE = "diverged otherwise"  # a new divergence behind a known one

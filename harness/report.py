"""Failure reports for people: what failed, on which minimal input, and how to replay it.

One failed check reads the same from the CLI (`batchproof verify`, `batchproof check`) and from
`batchproof.check()` in a user's pytest test:

    Mismatch: loss_mask: values differ: first mismatch at [1, 0]: expected 0.0, actual 1.0 ...
    row 1: p=1 r=1 (layout 'left')
      expected  .r
      actual    xx
      (. pad, p prompt, r response, x mismatch)
    minimal case: build_rl_batch([[0], [0]], [[0], [0]], pad_token_id=0, loss_masks=[[1], [0]])
    replay: batchproof verify --impl mycollate:build --op rl_batch.build_rl_batch \\
            --check equivalence --reproduce AAEAAQ...

Hypothesis' own notes that speak to a test author ("Falsifying example: ...", "add
@reproduce_failure(...) as a decorator on your test") are replaced by the minimal case and a
replay command; its other notes are kept.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import errors as hypothesis_errors

from batchproof.checks import CheckStats, HarnessError
from batchproof.registry import BadCase, Case

_BLOB = re.compile(r"@reproduce_failure\('([^']+)', b'([^']+)'\)")
_TARGET_SCORE = re.compile(r"^\s*[-+\d.e]+\s+\(label=")  # a line of "Highest target scores"
# notes that speak to a test author, or about batchproof's own lines ("Explanation: these lines
# were always and only run by failing test cases"), or Hypothesis' target scores
_REPLACED_NOTES = ("Falsifying example", "Falsifying explicit example", "Failing test case",
                   "Failing explicit example", "You can reproduce", "Explanation:",
                   "Highest target scores")
# Hypothesis refusing to run a check is batchproof's problem, not the candidate's
_HARNESS_ERRORS = (HarnessError, hypothesis_errors.FailedHealthCheck,
                   hypothesis_errors.Unsatisfiable, hypothesis_errors.InvalidArgument,
                   hypothesis_errors.InvalidDefinition)

MINIMAL_LIMIT = 4000  # characters of the minimal case shown; longer ones are cut


@dataclass
class Failure:
    """One failed check, described for a person (see the module docstring)."""

    kind: str  # "divergence" (the candidate is wrong) or "harness" (batchproof is)
    message: str  # the exception: type, message, layout picture
    minimal: str = ""  # the minimal failing input as a call of the contract function
    blob: str = ""  # Hypothesis' reproduction blob of a generated (not pinned) failure
    notes: list[str] = field(default_factory=list)  # Hypothesis' other notes

    def lines(self, replay: str = "") -> list[str]:
        out = [self.message, *self.notes]
        if self.minimal:
            out.append(f"minimal case: {self.minimal}")
        if replay:
            out.append(f"replay: {replay}")
        return out


def kind_of(exc: BaseException) -> str:
    """`"harness"` when batchproof itself failed — one of its own errors, or any exception
    raised while Hypothesis drew the input (a strategy, a filter, an adapter's predicate: the
    function under test is not called there) — else `"divergence"`."""
    first = _first(exc)
    if isinstance(first, _HARNESS_ERRORS) or while_drawing(first):
        return "harness"
    return "divergence"


def while_drawing(exc: BaseException) -> bool:
    """Whether Hypothesis says `exc` was raised while it generated an input (its note
    "while generating 'case' from ...")."""
    return any(str(note).startswith("while generating")
               for note in getattr(exc, "__notes__", ()))


def describe(exc: BaseException, stats: CheckStats, function: str) -> Failure:
    """The `Failure` of a check that raised `exc`; `function` names the contract function in
    the minimal case (`build_rl_batch`)."""
    first = _first(exc)
    notes = [str(n) for n in getattr(exc, "__notes__", [])]
    if first is not exc:
        notes += [str(n) for n in getattr(first, "__notes__", [])]
    blob = next((m[2] for n in notes for m in [_BLOB.search(n)] if m), "")
    kept = [n for n in notes if not n.lstrip().startswith(_REPLACED_NOTES)
            and not _TARGET_SCORE.match(n)]
    message = f"{type(first).__name__}: {first}".rstrip()
    if while_drawing(first) and not isinstance(first, HarnessError):
        message = ("batchproof failed while drawing an input (a strategy, a filter or an "
                   f"adapter's predicate; the function under test was not called): {message}")
    return Failure(kind_of(exc), message, minimal_call(stats.failing, function), blob, kept)


def minimal_call(case: Case | BadCase | None, function: str) -> str:
    """`build_rl_batch([[1]], [[2]], pad_token_id=0)`; a bad input adds what it must raise."""
    if case is None:
        return ""
    if isinstance(case, BadCase):
        why = f": {case.why}" if case.why else ""
        return f"{minimal_call(case.case, function)} must raise {case.raises.__name__}{why}"
    text = case.as_call(function)
    if len(text) > MINIMAL_LIMIT:
        text = text[: MINIMAL_LIMIT - 30] + f" ...<{len(text)} characters in all>"
    return text


def command(words: Sequence[str]) -> str:
    """A shell command line from its words, quoted where the shell needs it."""
    return " ".join(shlex.quote(str(w)) for w in words)


def replay_words(check: str, failure: Failure) -> list[str]:
    """What to add to a command that runs one record to replay this failure alone."""
    words = ["--check", check]
    if failure.blob:
        words += ["--reproduce", failure.blob]
    return words


def check_blob(blob: str) -> None:
    """A `ValueError` unless `blob` is a reproduction blob Hypothesis can decode."""
    from hypothesis.core import decode_failure
    from hypothesis.errors import InvalidArgument

    try:
        decode_failure(blob.encode())
    except (InvalidArgument, ValueError) as err:
        raise ValueError(f"--reproduce {blob!r} is not a failure's blob: {err}") from None


def without_explain(phases) -> tuple:
    """Hypothesis' phases less `explain`: after shrinking it re-runs the failure many times to
    tell which lines of batchproof's own code only failing cases ran — minutes on a tensor
    check, for notes a report leaves out anyway."""
    from hypothesis import Phase

    return tuple(phase for phase in phases if phase != Phase.explain)


def _first(exc: BaseException) -> BaseException:
    """The first failure of a group (Hypothesis reports several distinct bugs as a group)."""
    group = getattr(exc, "exceptions", None)
    if isinstance(group, tuple) and group:
        return _first(group[0])
    return exc

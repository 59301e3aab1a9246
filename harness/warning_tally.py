"""The Python warnings raised while a check runs, tallied: one entry per distinct warning (its
category, message, first location and count) instead of a line per call.

A framework called a few hundred times per check can repeat one warning on every call (SkyRL
0.4.0's CP adapter printed 108 identical torch warnings in one `check --impl skyrl`). Python
shows a warning once per location only until anything changes the warning filters, which
Hypothesis and torch do between calls; a check's report then drowns in copies of one line.
`tallied_warnings()` takes over showing them for the duration of a check: every warning that
would have been shown is counted instead (`default`, `once` and `module` filters count each
occurrence), and the report prints each distinct one once with its count. Filters that `ignore`
a warning still ignore it, and `error` filters still raise it: what the user or the framework
decided about a warning stands (docs/frameworks.md, "The framework's warnings").
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from batchproof.checks import HarnessError

# the distinct warnings kept per check; past it, occurrences are counted in `WarningTally.more`
DISTINCT_LIMIT = 50
_COUNTED = {"default": "always", "once": "always", "module": "always"}


@dataclass
class SeenWarning:
    """One distinct warning (category and message) raised during a check."""

    category: str  # e.g. "UserWarning", "torch.jit.TracerWarning"
    message: str
    location: str  # "file:line" of its first occurrence
    count: int = 1

    def line(self, width: int = 160) -> str:
        """`108 x UserWarning: message (first at file:line)`, the message's first line cut to
        `width` characters."""
        text = (self.message.splitlines() or [""])[0]
        if len(text) > width:
            text = text[:width - 4] + " ..."
        return f"{self.count} x {self.category}: {text} (first at {self.location})"


class WarningTally:
    """Distinct warnings in the order first seen, with their counts."""

    def __init__(self, limit: int = DISTINCT_LIMIT) -> None:
        self.limit = limit
        self._seen: dict[tuple[str, str], SeenWarning] = {}
        self.more = 0  # occurrences of distinct warnings past `limit` (counted, not kept)

    def show(self, message: Warning | str, category: type[Warning], filename: str,
             lineno: int, file: Any = None, line: str | None = None) -> None:
        """`warnings.showwarning`'s signature: count the warning instead of printing it."""
        key = (_category_name(category), str(message))
        seen = self._seen.get(key)
        if seen is not None:
            seen.count += 1
        elif len(self._seen) < self.limit:
            self._seen[key] = SeenWarning(*key, location=f"{filename}:{lineno}")
        else:
            self.more += 1

    @property
    def seen(self) -> list[SeenWarning]:
        return list(self._seen.values())

    @property
    def total(self) -> int:
        """Every occurrence counted, kept or not."""
        return sum(s.count for s in self._seen.values()) + self.more


def _category_name(category: type[Warning]) -> str:
    module = category.__module__
    return category.__qualname__ if module == "builtins" else f"{module}.{category.__qualname__}"


@contextmanager
def tallied_warnings(tally: WarningTally | None = None) -> Iterator[WarningTally]:
    """Within the block, warnings are counted into the tally instead of shown; each occurrence
    is counted (the once-per-location actions become `always`), `ignore` and `error` filters
    act as before. Everything is restored on leaving (`warnings.catch_warnings`)."""
    tally = tally if tally is not None else WarningTally()
    with warnings.catch_warnings():
        # the filters as they are (a pattern or a plain string each, as the interpreter keeps
        # them), counting; then `always` for what no filter names (Python's own default), which
        # also tells the interpreter that the filters changed
        warnings.filters[:] = [(_COUNTED.get(action, action), *rest)
                               for action, *rest in warnings.filters]
        warnings.simplefilter("always", append=True)
        warnings.showwarning = tally.show
        yield tally


def summary_lines(per_check: list[tuple[str, list[SeenWarning], int]]) -> list[str]:
    """The report's lines for the warnings of each (check, distinct warnings, occurrences not
    kept): a heading with the total, then one line per check and distinct warning; none when
    nothing warned."""
    total = sum(sum(s.count for s in seen) + more for _, seen, more in per_check)
    if not total:
        return []
    lines = [f"warnings raised by the target: {total}, each distinct one once per check with "
             "its count"]
    for check, seen, more in per_check:
        lines += [f"  {check}: {s.line()}" for s in seen]
        if more:
            lines.append(f"  {check}: {more} more, of other distinct warnings (the first "
                         f"{len(seen)} are listed)")
    return lines


class TalliedCall:
    """`call`, the warnings of each of its calls counted into one tally until `take()` hands
    them over and starts the next (`batchproof check` takes them after each check). A failure
    to set the counting up is batchproof's own (`HarnessError`), never the call's."""

    def __init__(self, call: Callable[..., Any]) -> None:
        functools.update_wrapper(self, call)
        self.call = call
        self.tally = WarningTally()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with ExitStack() as stack:
            try:
                stack.enter_context(tallied_warnings(self.tally))
            except Exception as err:  # noqa: BLE001 - ours, not the target's
                raise HarnessError(f"could not count the target's warnings: "
                                   f"{type(err).__name__}: {err}") from err
            return self.call(*args, **kwargs)

    def take(self) -> WarningTally:
        """The warnings counted so far; the next ones go into a new tally."""
        taken, self.tally = self.tally, WarningTally()
        return taken

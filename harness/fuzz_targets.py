"""The registry's searched checks as pytest tests, for HypoFuzz: run them with `batchproof fuzz`.

One test per record and check that draws its examples (equivalence, errors, property:NAME; a pin
is one example, nothing to fuzz), on `impl/`, named `test_OP__FUNCTION__CHECK` — the very
Hypothesis test `batchproof.checks.run_check` runs for that check (`checks.given_test`), with the
same Hypothesis database key. HypoFuzz keys a test by its pytest node id, and `run_check` keys it
by the node id it has here when the package folder is pytest's rootdir (`fuzz_targets.py::test_…`),
which is how `batchproof fuzz` collects this module: what HypoFuzz finds, and saves in the
example database, is replayed first by `batchproof verify`, the pytest suite, and CI (reading the
nightly database, docs/fuzzing.md). Collected any other way, the node ids differ and the
`batchproof.plugin` refuses a HypoFuzz run (its finds would be saved where nothing reads them).

The tests carry no settings of their own: the loaded profile's apply (HypoFuzz fuzzes only tests
whose database is the profile's, and none that is derandomized: `batchproof fuzz` loads
`nightly`). A record whose optional modules are missing is collected and skipped.

Not collected by the project's own suite (pytest looks in tests/), and harmless to run under
plain pytest: each test then runs once under the loaded profile, like `batchproof verify`.
"""

from __future__ import annotations

import pytest

from batchproof import registry
from batchproof.checks import check_test_name, given_test, searched

# test name -> (record, check)
TARGETS: dict[str, tuple[str, str]] = {}


def _hypofuzz_compat() -> None:
    """HypoFuzz 25.11.1 reads `slice_comments` off Hypothesis' shrunk failure, which Hypothesis
    (6.170) calls `span_comments`: without this alias, the worker that found a failure crashes
    (AttributeError) before it saves it, and nothing replays."""
    from hypothesis.internal.conjecture.data import ConjectureData, ConjectureResult

    if hasattr(ConjectureResult, "slice_comments") or not hasattr(ConjectureResult,
                                                                   "span_comments"):
        return
    ConjectureResult.slice_comments = property(lambda self: self.span_comments)
    ConjectureData.slice_comments = property(
        lambda self: self.span_comments,
        lambda self, comments: setattr(self, "span_comments", comments))


def _expose() -> None:
    for info in registry.all_ops():
        for check in info.check_names():
            if not searched(check):
                continue
            name = f"test_{check_test_name(info, check)}"
            test = given_test(info, check)
            if info.missing():
                test = pytest.mark.skip(reason=f"{info.name} needs "
                                        f"{', '.join(info.missing())}")(test)
            globals()[name] = test
            TARGETS[name] = (info.name, check)


_hypofuzz_compat()
_expose()

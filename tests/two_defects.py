"""The check every op's two-defect test makes (issue 32): a planted validation order that
differs from the reference's passes the record's one-defect inputs and fails its invalid
strategy, which draws calls with two defects on different arguments (`blocks.two_defects`)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from batchproof import registry
from batchproof.checks import run_check
from batchproof.registry import Candidate


@contextlib.contextmanager
def without_local_constants() -> Iterator[None]:
    """Hypothesis draws now and then a constant it found in the modules imported so far (its
    "local constants"), so one derandomized run draws differently after other tests imported
    other modules (the cause of a red CI run, docs/harness.md "Regimes"). Inside this block it
    finds none: a derandomized run draws the same inputs whatever the process imported. (A
    private hook of Hypothesis 6.x; without it the runs are merely derandomized.)"""
    from hypothesis.internal.conjecture import providers

    hook = getattr(providers, "_get_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if hook is None or cache is None:
        yield
        return
    providers._get_local_constants = lambda: providers.Constants()
    cache.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = hook
        cache.cache.clear()


SEARCH = settings(max_examples=60, derandomize=True, database=None, deadline=None,
                  phases=[Phase.explicit, Phase.generate])  # the failure, not shrunk


def assert_first_error_decides(name: str, one_defect: st.SearchStrategy, candidate: Candidate,
                               *, drawn: int = 10, examples: int = 100) -> None:
    """`candidate` (another validation order) passes `one_defect` and fails record `name`'s
    invalid strategy on a two-defect input with "exception types differ"; the strategy draws
    at least `drawn` two-defect calls of `examples`. Pins are left out of both runs: the drawn inputs
    alone catch it."""
    info = dataclasses.replace(registry.get(name), pins=[])
    search = settings(SEARCH, max_examples=examples)
    whys: list[str] = []
    with without_local_constants():
        settings(search, phases=[Phase.generate], suppress_health_check=list(HealthCheck))(
            given(info.invalid)(lambda bad: whys.append(bad.why)))()
        assert sum(", and " in why for why in whys) >= drawn, whys
        run_check(dataclasses.replace(info, invalid=one_defect), "errors", candidate,
                  settings=search)
        with pytest.raises(AssertionError,
                           match=r"exception types differ on bad input \([^)]*, and "):
            run_check(info, "errors", candidate, settings=search)

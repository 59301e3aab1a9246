"""The check every op's two-defect test makes (issue 32): a planted validation order that
differs from the reference's passes the record's one-defect inputs and fails its invalid
strategy, which draws calls with two defects on different arguments (`blocks.two_defects`)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from batchproof import registry
from batchproof.checks import run_check
from batchproof.registry import Candidate

SEARCH = settings(max_examples=60, derandomize=True, database=None, deadline=None,
                  phases=[Phase.explicit, Phase.generate])  # the failure, not shrunk


def assert_first_error_decides(name: str, one_defect: st.SearchStrategy, candidate: Candidate,
                               *, drawn: int = 10) -> None:
    """`candidate` (another validation order) passes `one_defect` and fails record `name`'s
    invalid strategy on a two-defect input with "exception types differ"; the strategy draws
    at least `drawn` two-defect calls of 60. Pins are left out of both runs: the drawn inputs
    alone catch it."""
    info = dataclasses.replace(registry.get(name), pins=[])
    whys: list[str] = []
    settings(SEARCH, phases=[Phase.generate], suppress_health_check=list(HealthCheck))(
        given(info.invalid)(lambda bad: whys.append(bad.why)))()
    assert sum(", and " in why for why in whys) >= drawn, whys
    run_check(dataclasses.replace(info, invalid=one_defect), "errors", candidate, settings=SEARCH)
    with pytest.raises(AssertionError, match=r"exception types differ on bad input \([^)]*, and "):
        run_check(info, "errors", candidate, settings=SEARCH)

"""Regime coverage: every regime a record's strategy advertises is drawn by the `ci` profile's
budget (`batchproof.regimes`). A change that narrows a strategy makes every check pass more
easily and is silent everywhere else; here it fails, naming the regime no longer drawn."""

from __future__ import annotations

import pytest

from batchproof import regimes, registry
from batchproof.profiles import PROFILES

BUDGET = PROFILES["ci"].max_examples


@pytest.mark.parametrize("record", regimes.records())
def test_every_advertised_regime_is_drawn(record: str) -> None:
    counts = regimes.coverage(record, examples=BUDGET)
    assert counts, f"{record} declares no regime"
    missing = [name for name, hits in counts.items() if hits == 0]
    assert not missing, f"{record}: not drawn in {BUDGET} examples: {missing} ({counts})"


def test_a_narrowed_strategy_fails_the_coverage() -> None:
    """A planted narrowing — the strategy no longer draws an empty prompt — is found."""
    info = registry.get("rl_batch.build_rl_batch")
    narrowed = info.valid.filter(lambda case: all(len(p) for p in case.args[0]))
    missing = regimes.uncovered("rl_batch.build_rl_batch", examples=BUDGET, strategy=narrowed)
    assert "every_prompt_empty" in missing and "empty_row_among_others" in missing


def test_a_regime_is_not_true_of_everything() -> None:
    """Each regime tells inputs apart: on every record some drawn input is outside it."""
    for record in regimes.records():
        counts = regimes.coverage(record, examples=BUDGET)
        always = [name for name, hits in counts.items() if hits == BUDGET]
        assert not always, f"{record}: {always} hold on every drawn input"

"""Regime coverage: every regime a record's strategy advertises is drawn at a rate a `ci` run
reaches (`batchproof.regimes`: at least MIN_HITS in four `ci` budgets). A change that narrows a
strategy makes every check pass more easily and is silent everywhere else; here it fails, naming
the regime no longer drawn. The rate, not one 60-draw sample, is what is asserted: which draws a
derandomized run makes depends on the modules loaded before it (Hypothesis draws constants from
them), so a sample's counts differ between a fresh process and an xdist worker."""

from __future__ import annotations

import pytest

from batchproof import regimes, registry


@pytest.mark.parametrize("record", regimes.records())
def test_every_advertised_regime_is_drawn(record: str) -> None:
    counts = regimes.coverage(record)
    assert counts, f"{record} declares no regime"
    rare = [name for name, hits in counts.items() if hits < regimes.MIN_HITS]
    assert not rare, (f"{record}: drawn fewer than {regimes.MIN_HITS} times in "
                      f"{regimes.default_examples()} examples: {rare} ({counts})")
    # and each regime tells inputs apart: some drawn input of the record is outside it
    always = [name for name, hits in counts.items() if hits == regimes.default_examples()]
    assert not always, f"{record}: {always} hold on every drawn input"


def test_a_narrowed_strategy_fails_the_coverage() -> None:
    """A planted narrowing — the strategy no longer draws an empty prompt — is found."""
    info = registry.get("rl_batch.build_rl_batch")
    narrowed = info.valid.filter(lambda case: all(len(p) for p in case.args[0]))
    missing = regimes.uncovered("rl_batch.build_rl_batch", strategy=narrowed)
    assert "every_prompt_empty" in missing and "empty_row_among_others" in missing

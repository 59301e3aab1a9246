"""Fixtures shared by the test modules."""

from __future__ import annotations

import sys

import pytest
import torch
from hypothesis import settings

from batchproof.profiles import draws_independent_of_loaded_modules


@pytest.fixture
def cli_state(monkeypatch):
    """The CLI runs in this process: give back the Hypothesis profile, torch's thread count and
    sys.path it changes."""
    profile, threads = settings._current_profile, torch.get_num_threads()
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    settings.load_profile(profile)
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _same_draws_in_any_order():
    """A test's own derandomized `@given` draws what it draws whatever ran before it in the
    process (docs/harness.md, "The same draws in any process"): the harness does this for its
    checks, a test that builds its own search gets it here."""
    with draws_independent_of_loaded_modules():
        yield

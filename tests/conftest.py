"""Fixtures shared by the test modules."""

from __future__ import annotations

import sys

import pytest
import torch
from hypothesis import settings


@pytest.fixture
def cli_state(monkeypatch):
    """The CLI runs in this process: give back the Hypothesis profile, torch's thread count and
    sys.path it changes."""
    profile, threads = settings._current_profile, torch.get_num_threads()
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    settings.load_profile(profile)
    torch.set_num_threads(threads)

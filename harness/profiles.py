"""Hypothesis profiles: `dev`, `ci`, `nightly`, `mutation`.

Chosen by pytest's `--hypothesis-profile NAME`, the `HYPOTHESIS_PROFILE` environment variable, or
`batchproof verify --profile NAME`. Without a choice: `ci` when the `CI` variable is set (Hypothesis
would otherwise load its *own* `ci` profile there, so ours is registered under that name on
purpose), else `dev`. Deadlines are off everywhere: tensor code has first-call warm-ups that make
deadlines flaky; pytest-timeout guards against hangs instead.

Importing this module registers nothing: `register()` does, and only the places that opted in call
it (the CLI, and the pytest plugin `batchproof.plugin` when a suite loads it). A user's test that
imports batchproof keeps its own profiles, Hypothesis' own `ci` profile included.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, Verbosity, settings

_COMMON = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

PROFILES = {
    # fast, randomized: the developer's default
    "dev": settings(max_examples=40, **_COMMON),
    # derandomized, no database: the same examples on every CI run
    "ci": settings(max_examples=60, derandomize=True, database=None, **_COMMON),
    # many examples, randomized, database kept (uploaded as an artifact by gpu-nightly.yml)
    "nightly": settings(max_examples=1000, **_COMMON),
    # for the bug zoo and mutmut: derandomized, no shrinking, few examples, stop at first failure
    "mutation": settings(
        max_examples=25,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        **_COMMON,
    ),
}


def register() -> None:
    """Register batchproof's profiles with Hypothesis (idempotent); loads none of them."""
    for name, profile in PROFILES.items():
        settings.register_profile(name, profile)


def default_profile() -> str:
    if os.environ.get("HYPOTHESIS_PROFILE"):
        return os.environ["HYPOTHESIS_PROFILE"]
    return "ci" if os.environ.get("CI") else "dev"


def load(name: str | None = None) -> str:
    """Load a profile by name (default: `default_profile()`); returns the name loaded."""
    name = name or default_profile()
    if name not in PROFILES:
        raise ValueError(f"unknown Hypothesis profile {name!r}; known: {sorted(PROFILES)}")
    register()
    settings.load_profile(name)
    return name

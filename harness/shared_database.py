"""The shared example database that `BATCHPROOF_SHARED_DATABASE` names (docs/fuzzing.md, docs/scale.md).

    github:OWNER/REPO[/ARTIFACT]   the latest GitHub Actions artifact of that name: read only
    redis://[:PASSWORD@]HOST:PORT/DB  Hypothesis' `RedisExampleDatabase` (also rediss://, unix://):
                                   read by every profile but `mutation`, written by `nightly`
                                   (the profile of `batchproof fuzz`) as it finds failures and
                                   corpus
    PATH                           a directory another machine writes: read only

Where the profiles use it is `batchproof.profiles.with_shared`. A Redis database is reached once
when the profiles are registered: unreachable there, it is `SharedDatabaseUnreachable` (the CLI:
one line, exit 3), and nothing runs. Later, Redis going away loses nothing: the local directory
database is always written beside it, a failed write or read is recorded here instead of
raised (`UNWRITTEN_LOG`, read by the reports of `verify`, `fuzz` and pytest), and the run goes on.
A URL's password is never printed: every message shows `redacted(spec)`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    GitHubArtifactDatabase,
    ReadOnlyDatabase,
)

VARIABLE = "BATCHPROOF_SHARED_DATABASE"
REDIS_SCHEMES = ("redis", "rediss", "unix")
REDIS_MISSING = "pip install redis"
# every process of a run (xdist workers, HypoFuzz's workers) appends here the first write and
# the first read of the shared database that failed: the run's report reads it
UNWRITTEN_LOG = Path(".hypothesis") / "shared-database-failures.log"
_CONNECT_TIMEOUT_S = 3.0


class SharedDatabaseUnreachable(Exception):
    """The shared database named in `BATCHPROOF_SHARED_DATABASE` cannot be reached at start:
    batchproof's own failure (exit 3), never a check's result."""


def redacted(spec: str) -> str:
    """`spec` with the password of a URL replaced by `***` (`redis://:***@host:6379/0`)."""
    parts = urlsplit(spec)
    if parts.password is None:
        return spec
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port is not None else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))


def is_redis(spec: str) -> bool:
    return urlsplit(spec.strip()).scheme in REDIS_SCHEMES


_OPENED: dict[str, ExampleDatabase] = {}  # spec -> the database (one client per process)


def shared_database(spec: str) -> ExampleDatabase | None:
    """The database `spec` names, or None for "": a Redis database writable (wrapped in
    `Tolerant`), any other read-only. A malformed spec is a `ValueError` naming the variable;
    Redis without its client a `ValueError` saying what to install; Redis unreachable
    `SharedDatabaseUnreachable`."""
    spec = spec.strip()
    if not spec:
        return None
    if spec.startswith("github:"):
        return ReadOnlyDatabase(_github(spec))
    if is_redis(spec):
        if spec not in _OPENED:
            _OPENED[spec] = Tolerant(_redis(spec), redacted(spec))
        return _OPENED[spec]
    return ReadOnlyDatabase(DirectoryBasedExampleDatabase(spec))


def writable(database: ExampleDatabase | None) -> bool:
    """Whether the profiles that write a shared database may write this one (Redis only)."""
    return isinstance(database, Tolerant)


def _github(spec: str) -> ExampleDatabase:
    parts = spec.removeprefix("github:").split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(f"{VARIABLE}={spec!r}: expected github:OWNER/REPO or "
                         "github:OWNER/REPO/ARTIFACT")
    owner, repo, *artifact = parts
    return NamedArtifactDatabase(owner, repo,
                                 artifact_name=artifact[0] if artifact else "hypothesis-db")


class NamedArtifactDatabase(GitHubArtifactDatabase):
    """Hypothesis' `GitHubArtifactDatabase`, asking GitHub for the artifacts of its name only.

    Hypothesis lists the repository's artifacts of every name, one page of the 30 newest, and
    looks for its name there: where CI uploads 30 other artifacts (reports) between two nightly
    runs, it finds none and reads nothing (a warning, and every check runs as if no night had
    been). Asking with `?name=` finds the newest `hypothesis-db` however many others came after."""

    def _get_bytes(self, url: str) -> bytes | None:
        if url == f"https://api.github.com/repos/{self.owner}/{self.repo}/actions/artifacts":
            url += f"?name={quote(self.artifact_name)}&per_page=100"
        return super()._get_bytes(url)


def _redis(spec: str) -> ExampleDatabase:
    shown = redacted(spec)
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise ValueError(f"{VARIABLE}={shown}: a Redis database needs its client: "
                         f"{REDIS_MISSING}") from None
    try:
        client = redis.Redis.from_url(spec, socket_connect_timeout=_CONNECT_TIMEOUT_S,
                                      socket_timeout=_CONNECT_TIMEOUT_S * 2)
    except ValueError as err:  # a malformed URL (redis-py says why; no password in it)
        raise ValueError(f"{VARIABLE}={shown}: {err}") from None
    try:
        client.ping()
    except (redis.RedisError, OSError) as err:
        raise SharedDatabaseUnreachable(
            f"shared example database {shown} unreachable: {type(err).__name__}: "
            f"{_without_password(str(err), spec)}") from None
    return RedisExampleDatabase(client)


def _without_password(text: str, spec: str) -> str:
    password = urlsplit(spec).password
    return text.replace(password, "***") if password else text


def _failure_types() -> tuple[type[BaseException], ...]:
    try:
        import redis
    except ImportError:  # pragma: no cover - a Redis database is never opened without it
        return (OSError,)
    return (redis.RedisError, OSError)


class Tolerant(ExampleDatabase):
    """A shared database whose outages cost nothing but the sharing: a write or read that fails
    is recorded (once per process and kind, in `UNWRITTEN_LOG`) and dropped, never raised into
    a check. Hypothesis writes the local database beside it, so what a run found is kept."""

    def __init__(self, inner: ExampleDatabase, shown: str) -> None:
        super().__init__()
        self.inner, self.shown = inner, shown
        self.failed: dict[str, int] = {}  # "write"/"read" -> failures in this process

    def __repr__(self) -> str:
        return f"Tolerant({self.shown})"  # never the password

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tolerant) and self.inner == other.inner

    def __hash__(self) -> int:
        return hash(self.shown)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        try:
            values = list(self.inner.fetch(key))
        except _failure_types() as err:
            self._record("read", err)
            return
        yield from values

    def save(self, key: bytes, value: bytes) -> None:
        self._write(self.inner.save, key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        self._write(self.inner.delete, key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self._write(self.inner.move, src, dest, value)

    def _write(self, how, *args: bytes) -> None:
        try:
            how(*args)
        except _failure_types() as err:
            self._record("write", err)

    def _start_listening(self) -> None:
        try:
            self.inner.add_listener(self._broadcast_change)
        except _failure_types() as err:
            self._record("read", err)

    def _stop_listening(self) -> None:
        try:
            self.inner.remove_listener(self._broadcast_change)
        except _failure_types() as err:
            self._record("read", err)

    def _record(self, kind: str, err: BaseException) -> None:
        self.failed[kind] = self.failed.get(kind, 0) + 1
        if self.failed[kind] > 1:
            return
        try:
            UNWRITTEN_LOG.parent.mkdir(parents=True, exist_ok=True)
            with UNWRITTEN_LOG.open("a") as log:
                log.write(f"{time.time():.3f}\t{os.getpid()}\t{kind}\t{self.shown}\t"
                          f"{type(err).__name__}\n")
        except OSError:  # pragma: no cover - the report then misses it; the run goes on
            pass


_WHAT_FAILED = {
    "write": "was not written ({error} in {processes}): what this run found is in the local "
             "database only",
    "read": "could not be read ({error} in {processes})",
}


def failures_since(started: float) -> list[str]:
    """One line per kind of shared-database failure recorded by any process since `started`:
    `the shared database redis://:***@host:6379/0 was not written (ConnectionError in 2
    processes): …`."""
    try:
        lines = UNWRITTEN_LOG.read_text().splitlines()
    except OSError:
        return []
    seen: dict[tuple[str, str], tuple[set[str], str]] = {}
    for line in lines:
        fields = line.split("\t")
        if len(fields) != 5 or float(fields[0]) < started:
            continue
        _, pid, kind, shown, error = fields
        seen.setdefault((kind, shown), (set(), error))[0].add(pid)
    said = []
    for (kind, shown), (pids, error) in seen.items():
        processes = f"{len(pids)} process{'es' * (len(pids) > 1)}"
        what = _WHAT_FAILED.get(kind, kind + " ({error} in {processes})")
        said.append(f"the shared database {shown} "
                    + what.format(error=error, processes=processes))
    return said

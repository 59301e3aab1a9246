#!/usr/bin/env python3
"""The framework matrix: every release with an adapter, installed as a user would, checked.

    python .ci/frameworks.py [--only NAME ...] [--wheel PATH] [--venvs DIR] [--jobs N]
                             [--max-examples N] [--json FILE] [--commands]

For each release in `.ci/frameworks.toml` (verl 0.9.1, TRL 1.16.0, SkyRL 0.3.0 and 0.4.0,
transformers 5.23.0 and 5.24.0, OpenRLHF 0.11.2, Megatron-Core 0.16.1):

1. its venv: kept between runs under --venvs (default `$BATCHPROOF_FRAMEWORK_VENVS`, else
   `~/.cache/batchproof/frameworks`), rebuilt only when its stamp changes (the release's entry
   but its test files, the Python version, the torch pin, the requirements of batchproof's
   wheel); a rebuild is torch==2.13.0, batchproof's wheel with `[test,models]` under a
   constraints file holding the torch pin, then the release's own install steps;
2. batchproof's wheel of this run installed into it (`--no-deps --force-reinstall`);
3. its adapter tests (`python -m pytest tests/test_adapters*.py`, the files the entry names);
4. `batchproof check --impl FRAMEWORK --profile ci --max-examples N --strict`, from a folder
   outside the repository, with a JSON report (`--strict`: a known divergence not reproduced,
   one the release no longer shows, fails the release).

One line per release: adapters, checks, examples run against the framework, the check's exit
status, the tests' outcome, seconds, and whether the venv was warm. Exit status 1 when a release
failed: check exit 3 (batchproof's own failure, an adapter that could not run) or 1 (a new
divergence, a known one that diverged otherwise, or a known one not reproduced), a failing
adapter test, or a venv that could not be built; the failing output is printed. Releases run
`--jobs` at a time (default 2).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
RELEASES = Path(__file__).resolve().parent / "frameworks.toml"
TORCH = "torch==2.13.0"
EXTRAS = "test,models"
DEFAULT_VENVS = Path(os.environ.get("BATCHPROOF_FRAMEWORK_VENVS")
                     or Path.home() / ".cache" / "batchproof" / "frameworks")


@dataclass
class Release:
    name: str
    impl: str
    distribution: str
    version: str
    tests: list[str]
    install: list[str]


@dataclass
class Outcome:
    release: str
    venv: str = ""  # warm | built | failed
    adapters: int = 0
    checks: int = 0
    examples: int = 0
    check_exit: int | None = None
    tests: str = ""  # pytest's summary line
    tests_exit: int | None = None
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    output: list[str] = field(default_factory=list)  # what to print when it failed

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        exit_text = "-" if self.check_exit is None else str(self.check_exit)
        return (f"{self.release:<20} adapters {self.adapters:>2}  checks {self.checks:>3}  "
                f"examples {self.examples:>5}  exit {exit_text}  tests: {self.tests or '-'}  "
                f"{self.seconds:5.0f} s  (venv {self.venv})"
                + ("" if self.ok else f"  FAILED: {'; '.join(self.problems)}"))


def releases() -> list[Release]:
    return [Release(**entry) for entry in tomllib.loads(RELEASES.read_text())["release"]]


def user_commands(release: Release) -> str:
    """The release's install as a user types it in a fresh venv (docs/frameworks.md)."""
    lines = ["python3.11 -m venv venv && . venv/bin/activate", f"pip install {TORCH}",
             f"echo {TORCH} > constraints.txt",
             f"pip install -c constraints.txt 'batchproof[{EXTRAS}]'"]
    lines += [step.format(constraints="constraints.txt", downloads="wheels")
              for step in release.install]
    lines.append(f"batchproof check --impl {release.impl}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the wheel


def build_wheel(into: Path) -> Path:
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                             "--no-build-isolation", "-w", str(into), str(REPO)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"cannot build batchproof's wheel:\n{result.stdout}\n{result.stderr}")
    (wheel,) = into.glob("batchproof-*.whl")
    return wheel


def wheel_requirements(wheel: Path) -> list[str]:
    """The Requires-Dist lines of the wheel's metadata (part of every venv's stamp)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    return sorted(line for line in metadata.splitlines() if line.startswith("Requires-Dist:"))


# --------------------------------------------------------------------------- one release


def stamp_of(release: Release, wheel: Path) -> str:
    """What a venv is built from: the release's entry but its `tests` (a test file added to
    the matrix rebuilds nothing), the Python version, the torch pin, the wheel's requirements."""
    built_from = {key: value for key, value in release.__dict__.items() if key != "tests"}
    text = json.dumps({"release": built_from, "python": sys.version.split()[0],
                       "torch": TORCH, "extras": EXTRAS,
                       "requires": wheel_requirements(wheel)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def sh(command: str, venv: Path, cwd: Path, outcome: Outcome,
       env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a shell command with the venv's bin/ first on PATH; its output kept for the report."""
    environment = dict(os.environ, **(env or {}), VIRTUAL_ENV=str(venv),
                       PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    environment.pop("PYTHONPATH", None)
    started = time.perf_counter()
    result = subprocess.run(command, shell=True, cwd=cwd, env=environment, capture_output=True,
                            text=True)
    outcome.output.append(f"$ {command}  (exit {result.returncode}, "
                          f"{time.perf_counter() - started:.0f} s)")
    return result


def ensure_venv(release: Release, root: Path, wheel: Path, outcome: Outcome,
                torch_index: str | None = None) -> Path | None:
    venv = root / release.name
    stamp = stamp_of(release, wheel)
    stamp_file = venv / ".batchproof-matrix-stamp"
    if stamp_file.exists() and stamp_file.read_text() == stamp:
        outcome.venv = "warm"
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    constraints = venv / "constraints.txt"
    downloads = venv / "downloads"
    steps = [f"{shlex.quote(sys.executable)} -m venv {shlex.quote(str(venv))}",
             "python -m pip install -q --upgrade pip",
             f"pip install -q {TORCH}" + (f" --index-url {torch_index}" if torch_index else ""),
             f"echo {TORCH} > {shlex.quote(str(constraints))}",
             f"pip install -q -c {shlex.quote(str(constraints))} "
             f"{shlex.quote(f'batchproof[{EXTRAS}] @ {wheel.as_uri()}')}"]
    steps += [step.format(constraints=shlex.quote(str(constraints)),
                          downloads=shlex.quote(str(downloads))).replace(
                              "pip install ", "pip install -q ", 1) for step in release.install]
    for step in steps:
        result = sh(step, venv, root, outcome)
        if result.returncode != 0:
            outcome.output.append((result.stdout + result.stderr)[-6000:])
            outcome.venv = "failed"
            outcome.problems.append("the venv could not be built")
            return None
    stamp_file.write_text(stamp)
    outcome.venv = "built"
    return venv


def run_release(release: Release, root: Path, wheel: Path, max_examples: int,
                reports: Path, torch_index: str | None = None) -> Outcome:
    outcome = Outcome(release.name)
    started = time.perf_counter()
    try:
        venv = ensure_venv(release, root, wheel, outcome, torch_index)
        if venv is not None:
            check_release(release, venv, wheel, max_examples, reports, outcome)
    finally:
        outcome.seconds = time.perf_counter() - started
    return outcome


def check_release(release: Release, venv: Path, wheel: Path, max_examples: int, reports: Path,
                  outcome: Outcome) -> None:
    constraints = venv / "constraints.txt"
    install = (f"pip install -q --no-deps --force-reinstall -c {shlex.quote(str(constraints))} "
               f"{shlex.quote(str(wheel))}")
    result = sh(install, venv, REPO, outcome)
    if result.returncode != 0:
        outcome.output.append((result.stdout + result.stderr)[-6000:])
        outcome.problems.append("batchproof's wheel could not be installed")
        return
    single = {"OMP_NUM_THREADS": "1", "CI": "true", "PYTHONDONTWRITEBYTECODE": "1"}
    version = ('python -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" '
               + release.distribution)
    installed = sh(version, venv, REPO, outcome)
    if installed.stdout.strip() != release.version:
        outcome.problems.append(f"{release.distribution} {installed.stdout.strip() or '?'} "
                                f"installed, not {release.version}")
    # the liveness test runs the adapters of this release's framework only (transformers, a
    # dependency of batchproof[models], is in every venv: its own releases run its adapters)
    tests = sh("python -m pytest -q -p no:cacheprovider -p no:randomly "
               + " ".join(shlex.quote(t) for t in release.tests), venv, REPO, outcome,
               {**single, "BATCHPROOF_MATRIX_IMPL": release.impl})
    outcome.tests_exit = tests.returncode
    outcome.tests = _pytest_summary(tests.stdout)
    if tests.returncode != 0:
        outcome.problems.append("adapter tests failed")
        outcome.output.append(tests.stdout[-6000:])
    report_file = reports / f"check-{release.name}.json"
    with tempfile.TemporaryDirectory(prefix="batchproof-matrix-") as elsewhere:
        check = sh(f"batchproof check --impl {release.impl} --profile ci --max-examples "
                   f"{max_examples} --strict --json {shlex.quote(str(report_file))}", venv,
                   Path(elsewhere), outcome, single)
    outcome.check_exit = check.returncode
    if report_file.exists():
        report = json.loads(report_file.read_text())
        outcome.adapters = len(report["reports"])
        outcomes = [o for r in report["reports"] for o in r["outcomes"]]
        outcome.checks = len(outcomes)
        outcome.examples = sum(o["examples"] for o in outcomes)
    if check.returncode != 0:
        what = {1: "a new divergence, or a known one not reproduced (--strict)",
                3: "batchproof failed (exit 3)"}.get(
            check.returncode, f"exit {check.returncode}")
        outcome.problems.append(f"check: {what}")
        outcome.output.append(_failures_of(check.stdout) + check.stderr[-3000:])


PAGES = {"skyrl.rl_batch_0_4": "frameworks-skyrl04.md", "skyrl.rl_batch": "frameworks.md",
         "skyrl.cp_": "cp.md",
         "skyrl.": "frameworks-skyrl-sft.md", "verl.cp_": "cp.md", "verl.": "frameworks.md",
         "transformers.": "frameworks-transformers.md", "trl.": "frameworks-trl.md",
         "openrlhf.": "frameworks-openrlhf.md", "megatron.": "cp.md"}


def markdown_rows(releases_run: list[Release], reports: Path) -> str:
    """The matrix table of docs/frameworks.md, one row per adapter, from the check reports."""
    lines = ["| release | adapter: function → record | checks: pass / known / skipped / NOT "
             "TESTED | examples run | known divergences: confirmed (not met, not reproduced, "
             "too broad) | new | exit |", "|---|---|---|---|---|---|---|"]
    for release in releases_run:
        file = reports / f"check-{release.name}.json"
        if not file.exists():
            lines.append(f"| {release.name} | (no report) | | | | | |")
            continue
        data = json.loads(file.read_text())
        for report in data["reports"]:
            statuses = [o["status"] for o in report["outcomes"]]
            counts = " / ".join(str(statuses.count(s)) for s in
                                ("pass", "known", "skipped", "not tested"))
            known = report["known"]
            flags = [f"{sum(k['status'] == s for k in known)} {s}" for s in
                     ("not met", "not reproduced") if any(k["status"] == s for k in known)]
            broad = sum(bool(k["too_broad"] and k["diverged"]) for k in known)
            flags += [f"{broad} too broad"] if broad else []
            confirmed = sum(k["status"] == "confirmed" for k in known)
            new = sum(s == "new" for s in statuses) + sum(
                k["status"] == "diverged otherwise" for k in known)
            page = next((v for k, v in PAGES.items() if report["adapter"].startswith(k)),
                        "frameworks.md")
            function = report["target"].rpartition(":")[2]
            lines.append(
                f"| {release.name} | [`{report['adapter']}`]({page}): `{function}` → "
                f"`{report['record']}` | {counts} | "
                f"{sum(o['examples'] for o in report['outcomes'])} | {confirmed}"
                f"{' (' + ', '.join(flags) + ')' if flags else ''} | {new} | "
                f"{data['exit_status']} |")
    return "\n".join(lines) + "\n"


def _failures_of(stdout: str) -> str:
    """What a failing `batchproof check` printed about its failures: each new divergence's
    or error's section and the summary line (the tables of passing checks left out)."""
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines)
              if "new divergence:" in line or "error (batchproof's own)" in line
              or "DIVERGED OTHERWISE" in line or "NEW: diverged" in line
              or line.startswith("not reproduced (")]
    kept = [lines[i] for i in range(len(lines))
            if any(0 <= i - s < 12 for s in starts)] + lines[-2:]
    return "\n".join(kept)[-12000:] + "\n"


def _pytest_summary(stdout: str) -> str:
    lines = [line.strip("= ") for line in stdout.splitlines() if line.strip()]
    return lines[-1] if lines else ""


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME",
                        help="releases to run (default: all)")
    parser.add_argument("--wheel", type=Path, help="batchproof's wheel (default: build one)")
    parser.add_argument("--venvs", type=Path, default=DEFAULT_VENVS,
                        help=f"where the venvs are kept (default: {DEFAULT_VENVS})")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--max-examples", type=int, default=20,
                        help="examples per check (the ci profile, derandomized)")
    parser.add_argument("--json", type=Path, help="write the summary as JSON")
    parser.add_argument("--reports", type=Path, help="keep the check reports in this folder")
    parser.add_argument("--torch-index-url", help="where pip finds torch==2.13.0 (default: "
                        "pip's configuration; on these machines, a CPU wheel on local disk)")
    parser.add_argument("--markdown", type=Path,
                        help="write the matrix table (one row per adapter) as Markdown")
    parser.add_argument("--commands", action="store_true",
                        help="print each release's install as a user types it, and stop")
    args = parser.parse_args()
    chosen = releases()
    if args.only:
        unknown = set(args.only) - {r.name for r in chosen}
        if unknown:
            parser.error(f"unknown release {sorted(unknown)}; known: {[r.name for r in chosen]}")
        chosen = [r for r in chosen if r.name in args.only]
    if args.commands:
        for release in chosen:
            print(f"# {release.name}\n{user_commands(release)}\n")
        return 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="batchproof-matrix-") as scratch:
        wheel = args.wheel or build_wheel(Path(scratch))
        reports = args.reports or Path(scratch)
        reports.mkdir(parents=True, exist_ok=True)
        print(f"framework matrix: {len(chosen)} releases, {args.jobs} at a time, venvs in "
              f"{args.venvs}, {wheel.name}", flush=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run_release, r, args.venvs, wheel, args.max_examples,
                                   reports, args.torch_index_url) for r in chosen]
            results = []
            for future in concurrent.futures.as_completed(futures):
                results.append(future.result())
                print(results[-1].line(), flush=True)
        if args.markdown:
            args.markdown.write_text(markdown_rows(chosen, reports))
    results.sort(key=lambda o: [r.name for r in chosen].index(o.release))
    failed = [o for o in results if not o.ok]
    for outcome in failed:
        print(f"\n----- {outcome.release}: {'; '.join(outcome.problems)}")
        print("\n".join(outcome.output))
    total = time.perf_counter() - started
    print(f"framework matrix: {len(results) - len(failed)}/{len(results)} releases passed in "
          f"{total:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"seconds": round(total, 1), "releases": [
            {k: v for k, v in o.__dict__.items() if k != "output"} for o in results]}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

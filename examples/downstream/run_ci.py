"""CI for the downstream example: batchproof as a framework team installs it, from its wheel.

    python examples/downstream/run_ci.py [--keep]

1. builds batchproof's wheel from this repository;
2. installs it into a fresh virtual environment outside the repository (torch==2.13.0 first, as
   the README's set-up does; no extra: the core install), with pytest;
3. checks the installed layout: site-packages holds `batchproof` and none of `harness`, `impl`,
   `reference`, and `import batchproof` works from a folder that has its own `reference/` and
   `impl/` packages;
4. runs the example's tests and the CLI on a copy of the example with a bug planted in its
   collate (both must fail, on `property:alignment`), then on the example as it is (both must
   pass);
5. runs `batchproof --version`, `list`, `verify`, `show`, `check`, `bench --quick`,
   `mutate --zoo` from the wheel (small scopes), and `mutate --mutmut`, which must refuse.

Exit status 0 when every expectation held; each failed one is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent
REPO = EXAMPLE.parent.parent
COLLATE = "minirl/collate.py"
CORRECT = "response_start = longest - r  # right-aligned response columns"
PLANTED = "response_start = np.zeros_like(r)  # planted bug: left-aligned in the left layout"
CHECK = ["check", "--impl", "minirl.collate:collate_rollouts", "--op", "rl_batch.build_rl_batch",
         "--forms", "lists", "--skip", "errors"]
RIGHT_CHECK = "property:alignment"

failures: list[str] = []


def expect(condition: bool, what: str, output: str = "") -> None:
    print(("  ok    " if condition else "  FAIL  ") + what, flush=True)
    if not condition:
        failures.append(what)
        if output:
            print(output[-3000:])


def run(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    started = time.perf_counter()
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    print(f"  $ {' '.join(map(str, args))}  (exit {result.returncode}, "
          f"{time.perf_counter() - started:.0f}s)", flush=True)
    return result


def build_wheel(work: Path) -> Path:
    dist = work / "dist"
    result = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                  "-w", str(dist), str(REPO)], cwd=work)
    if result.returncode != 0:
        sys.exit(f"cannot build the wheel:\n{result.stdout}\n{result.stderr}")
    (wheel,) = dist.glob("batchproof-*.whl")
    return wheel


def make_venv(work: Path, wheel: Path, torch_index: str | None) -> Path:
    venv = work / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=work)
    python = venv / "bin" / "python"
    torch = ["torch==2.13.0"] + (["--index-url", torch_index] if torch_index else [])
    # the example itself is not installed: `python -m pytest` and the CLI import it from the
    # current folder (a copy, with or without the planted bug)
    for step in (torch, [str(wheel), "pytest"]):
        result = run([str(python), "-m", "pip", "install", "-q", *step], cwd=work)
        if result.returncode != 0:
            sys.exit(f"pip install {step} failed:\n{result.stdout}\n{result.stderr}")
    return venv


def check_layout(venv: Path, work: Path) -> None:
    print("installed layout", flush=True)
    python = venv / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(run([str(python), "-c", where], cwd=work).stdout.strip())
    top = {p.name for p in site.iterdir()}
    expect("batchproof" in top, "site-packages holds batchproof")
    clashes = sorted(top & {"harness", "impl", "reference"})
    expect(not clashes, f"site-packages holds none of harness, impl, reference (found {clashes})")
    folder = work / "their_project"
    for name in ("reference", "impl"):
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(f"WHOSE = 'theirs: {name}'\n")
    code = ("import batchproof, reference, impl\n"
            "from batchproof.reference import rl_batch\n"
            "from batchproof.impl import rl_batch as fast\n"
            "from batchproof import registry\n"
            "assert reference.WHOSE == 'theirs: reference' and impl.WHOSE == 'theirs: impl'\n"
            "assert len(registry.all_ops()) > 20\n"
            "print(batchproof.__version__)")
    result = run([str(python), "-c", code], cwd=folder)
    expect(result.returncode == 0, "import batchproof works beside a project's own reference/ "
           "and impl/", result.stdout + result.stderr)


def downstream(venv: Path, work: Path, planted: bool) -> None:
    label = "with the planted bug" if planted else "as it is"
    print(f"the downstream example, {label}", flush=True)
    copy = work / ("minirl-planted" if planted else "minirl")
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info",
                                                                   "build", ".hypothesis"))
    collate = copy / COLLATE
    source = collate.read_text()
    if planted:
        expect(CORRECT in source, "the line to plant the bug in is in the collate")
        collate.write_text(source.replace(CORRECT, PLANTED))
    env = dict(os.environ, CI="true", PYTHONDONTWRITEBYTECODE="1")
    bin_dir = venv / "bin"
    junit = work / f"junit-{copy.name}.xml"
    tests = run([str(bin_dir / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 f"--junitxml={junit}"], cwd=copy, env=env)
    failed = _failed_tests(junit)
    report = {}
    cli_json = work / f"check-{copy.name}.json"
    cli = run([str(bin_dir / "batchproof"), *CHECK, "--json", str(cli_json)], cwd=copy, env=env)
    if cli_json.exists():
        report = json.loads(cli_json.read_text())
    new = [o["check"] for r in report.get("reports", []) for o in r["outcomes"]
           if o["status"] == "new"]
    if planted:
        expect(tests.returncode == 1, "pytest fails", tests.stdout + tests.stderr)
        expect(failed == {"test_collate_follows_the_rl_batch_contract": True},
               f"exactly the contract test fails (failed: {sorted(failed)})", tests.stdout)
        text = _failure_text(junit)
        expect(f"new divergence: minirl.collate:collate_rollouts as rl_batch.build_rl_batch "
               f"— {RIGHT_CHECK}" in text, f"pytest's failure is a new divergence in "
               f"{RIGHT_CHECK}", text)
        expect("replay: batchproof check --impl minirl.collate:collate_rollouts" in text,
               "its report gives a one-line CLI replay", text)
        expect(cli.returncode == 1, "the CLI exits 1 (a divergence)", cli.stdout + cli.stderr)
        expect(RIGHT_CHECK in new, f"the CLI reports a new divergence in {RIGHT_CHECK} "
               f"(new: {new})", cli.stdout)
    else:
        expect(tests.returncode == 0, "pytest passes", tests.stdout + tests.stderr)
        expect(cli.returncode == 0 and not new, "the CLI exits 0 with no divergence",
               cli.stdout + cli.stderr)


def _failed_tests(junit: Path) -> dict[str, bool]:
    if not junit.exists():
        return {}
    cases = ET.parse(junit).getroot().iter("testcase")
    return {c.get("name"): True for c in cases
            if c.find("failure") is not None or c.find("error") is not None}


def _failure_text(junit: Path) -> str:
    return "\n".join((f.get("message") or "") + "\n" + (f.text or "")
                     for f in ET.parse(junit).getroot().iter("failure"))


def smoke(venv: Path, work: Path) -> None:
    print("the CLI from the wheel (core install: no numba, no transformers)", flush=True)
    cli = str(venv / "bin" / "batchproof")
    folder = work / "elsewhere"
    folder.mkdir()
    env = dict(os.environ, CI="true")
    version = run([cli, "--version"], cwd=folder, env=env)
    expect(version.returncode == 0 and "batchproof" in version.stdout, "--version",
           version.stdout + version.stderr)
    for args, code, what in [
        (["list"], 0, "list"),
        (["verify", "--op", "trainer", "--op", "rl_batch"], 0, "verify (trainer, rl_batch)"),
        (["verify", "--op", "varlen", "--check", "equivalence"], 0,
         "verify without transformers: the model record is not run, the rest passes"),
        (["verify", "--op", "varlen.response_logprobs"], 3,
         "verify of a record that needs transformers: exit 3"),
        (["show", "--op", "rl_batch.build_rl_batch"], 0, "show"),
        (["check", "--impl", "batchproof.reference.balance:karmarkar_karp", "--op",
          "balance.karmarkar_karp"], 0, "check of a module:function"),
        (["bench", "--quick", "--op", "rl_batch"], 0, "bench --quick"),
        (["mutate", "--zoo", "--op", "trainer"], 0, "mutate --zoo (trainer)"),
        (["mutate", "--mutmut"], 3, "mutate --mutmut refuses outside a clone"),
        (["verify", "--op", "no_such_op"], 2, "an unknown op is a usage error"),
    ]:
        result = run([cli, *args], cwd=folder, env=env)
        output = result.stdout + result.stderr
        expect(result.returncode == code, f"{what}: exit {code}", output)
        if code in (2, 3):
            expect(len(result.stderr.strip().splitlines()) == 1
                   and "Traceback" not in output, f"{what}: one line, no traceback", output)
        if "response_logprobs" not in " ".join(args) and args[:2] == ["verify", "--op"] \
                and "varlen" in args:
            expect("not run: varlen.response_logprobs needs transformers" in output,
                   "the report says which record did not run and why", output)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--torch-index-url", help="where pip finds torch==2.13.0 (default: "
                        "pip's configuration; on these machines, a CPU wheel on local disk)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="batchproof-downstream-"))
    started = time.perf_counter()
    try:
        print(f"work folder {work}", flush=True)
        wheel = build_wheel(work)
        print(f"built {wheel.name}", flush=True)
        venv = make_venv(work, wheel, args.torch_index_url)
        check_layout(venv, work)
        downstream(venv, work, planted=True)
        downstream(venv, work, planted=False)
        smoke(venv, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'FAILED: ' + '; '.join(failures) if failures else 'all expectations held'} "
          f"in {time.perf_counter() - started:.0f}s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""`batchproof mutate --mutmut`: mutmut 3 over `impl/`, scoped to ops or to functions changed since a
git revision, with a guard against runs that are vacuously green.

How a run goes::

    repo/harness/    ──copy──▶  $TMP/batchproof-mutmut-*/batchproof/            (the installed
    repo/impl/       ──copy──▶  $TMP/batchproof-mutmut-*/batchproof/impl/        namespace: the
    repo/reference/  ──copy──▶  $TMP/batchproof-mutmut-*/batchproof/reference/   tests import
    repo/tests/, pyproject.toml ──copy──▶ $TMP/...  (+ [tool.mutmut])             batchproof.impl)
    $TMP/...$ mutmut run --max-children 2 [batchproof.impl.<op>.x_<function>__mutmut_* ...]
    $TMP/.../mutants/batchproof/impl/<op>.py.meta  ──▶  score, survivors  ──▶  rm -r $TMP

The copy is laid out as the installed package, not as the repository: mutmut names a mutant
after its file's path (`batchproof/impl/sft.py` → `batchproof.impl.sft.x_...`) and its trampoline
compares that name with the module the tests imported, `batchproof.impl.sft`. mutmut puts its
`mutants/` folder first on `sys.path`, ahead of the editable install's finder.

mutmut 3 reads its configuration only from `[tool.mutmut]` in `./pyproject.toml` (or `[mutmut]` in
`./setup.cfg`) and writes `./mutants/`; running it in a throw-away copy keeps the configuration
next to the code that drives it and leaves the working tree untouched.

What is mutated: only `impl/` (never `reference/` or `harness/`, which are copied unmutated so
the tests can import them), restricted by `only_mutate` to `impl/<op>.py` (and
`impl/kernels/<op>.py`) for each `--op`; reports name the repository's paths.
What kills a mutant: the registry checks of the op (`tests/test_registry.py`) and the extra
killers in `tests/test_mutation_kills.py`, selected with `-k <op>`, under the `mutation`
Hypothesis profile (derandomized, 25 examples, no shrinking). mutmut runs, for each mutant, only
the tests that called the mutated function in its coverage pass. No `-n`: mutmut forks its own
workers (at most `--max-children`, default 2), each with one torch thread.

Exit status: 0 when every mutant was killed or is a documented equivalent
(`harness/mutation/equivalents/<op>.py`; for `--harness` runs,
`harness/mutation/equivalents/harness.py`),
1 when a mutant survived, 3 when the run is not trustworthy (too few mutants, mutmut failed,
mutants left unchecked or without tests) or cannot run (an installed batchproof: this command
needs a clone of the repository, whose tests are the mutants' killers). The CLI's codes:
2 is a usage error.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from batchproof import terminal
from batchproof.mutation.equivalents import Equivalent, all_equivalents, diff_sides
from batchproof.mutation.mutant import Mutant

REPO = Path(__file__).resolve().parents[2]  # harness/mutation/ -> the repository
IMPL = "impl"
# repository folder -> its place in the installed namespace, which the work directory copies
NAMESPACE = {"harness": "batchproof", "impl": "batchproof/impl", "reference": "batchproof/reference"}
COPIED = ("tests", "pyproject.toml")
TEST_FILES = ("tests/test_registry.py", "tests/test_mutation_kills.py")  # + tests/test_<op>.py
CLASS_SEPARATOR = "ǁ"  # mutmut's mangling of methods: x<sep>Class<sep>method
MAX_CHILDREN = 2

# mutmut exit codes → what they mean for the score (mutmut.stats.status_by_exit_code)
KILLED = {1: "killed", 3: "killed", 36: "timeout", 24: "timeout", -24: "timeout",
          152: "timeout", 255: "timeout", -11: "segfault", -9: "segfault"}
SURVIVED = {0: "survived", 35: "suspicious"}
UNTESTED = {None: "not checked", 5: "no tests", 33: "no tests", 34: "skipped",
            2: "interrupted", 37: "caught by type check"}


def equivalents() -> tuple[Equivalent, ...]:
    """Every documented equivalent mutant: each op's (`harness/mutation/equivalents/<op>.py`) and the
    harness modules' (`harness/mutation/equivalents/harness.py`)."""
    return all_equivalents()


@dataclass
class Report:
    scope: list[str]
    patterns: list[str]
    mutants: list[Mutant] = field(default_factory=list)
    seconds: float = 0.0
    command: str = ""

    def count(self, statuses: Iterable[str]) -> int:
        wanted = set(statuses)
        return sum(m.status in wanted for m in self.mutants)

    @property
    def killed(self) -> int:
        return self.count(KILLED.values())

    @property
    def survivors(self) -> list[Mutant]:
        return [m for m in self.mutants if m.status in SURVIVED.values()]

    @property
    def untested(self) -> list[Mutant]:
        return [m for m in self.mutants if m.status in UNTESTED.values()]

    @property
    def equivalent(self) -> list[Mutant]:
        return [m for m in self.survivors if m.equivalent]

    @property
    def score(self) -> float:
        """Killed / non-equivalent mutants (untested ones count as not killed)."""
        relevant = len(self.mutants) - len(self.equivalent)
        return self.killed / relevant if relevant else 0.0


# --------------------------------------------------------------------------- scope


def op_files(ops: Sequence[str] | None, root: Path = REPO) -> list[str]:
    """`impl/<op>.py` for each op, and `impl/kernels/<op>.py` where the op has compiled kernels
    (their Python wrappers are mutated; mutmut skips the decorated `@njit` functions); default:
    every module of `impl/` and `impl/kernels/`."""
    if ops:
        paths = [f"{IMPL}/{op.split('.')[0]}.py" for op in ops]
        missing = [p for p in paths if not (root / p).is_file()]
        if missing:
            raise ValueError(f"no such op file: {', '.join(missing)}")
        kernels = [f"{IMPL}/kernels/{op.split('.')[0]}.py" for op in ops]
        return list(dict.fromkeys(paths + [p for p in kernels if (root / p).is_file()]))
    return sorted(str(p.relative_to(root)) for pattern in ("*.py", "kernels/*.py")
                  for p in (root / IMPL).glob(pattern) if p.name != "__init__.py")


# harness modules mutmut can mutate (`--harness NAME`), each with the tests that kill its
# mutants: a comparator, a predicate mechanism or a strategy that is made more lenient passes
# every check of impl/, so only tests of the harness itself can tell
HARNESS_KILLERS = {
    "compare": ["tests/test_compare.py"],
    "report": ["tests/test_report.py"],
    "adapters/__init__": ["tests/test_adapter_triage.py"],
    "calls": ["tests/test_adapter_triage.py"],  # `Call`, moved out of adapters/__init__
    "checks": ["tests/test_checks.py"],
    "adapters/scope": ["tests/test_scope_mutants.py"],  # issue 39: its own fast killers
    "regimes": ["tests/test_regimes_mutants.py"],  # issue 39: its own fast killers
    "perf/host_reads": ["tests/test_host_reads_mutants.py"],  # issue 39
    "models": ["tests/test_models_mutants.py"],  # issue 39
    "blocks": ["tests/test_regimes.py", "tests/test_rl_batch.py"],
    # the exit policy and what applies it (issue 39); tests/test_replay.py runs the CLI in fresh
    # processes, which import the installed batchproof, not mutmut's mutants: no killer here
    "statuses": ["tests/test_verdict.py"],
    # its own fast file (stand-in adapters on a few examples) and the exit policy's properties
    "adapters/runner": ["tests/test_runner.py", "tests/test_verdict.py"],
    # its own fast file (a user's module, mutmut a stand-in) and the policy's properties
    "mutation/target": ["tests/test_mutation_target.py", "tests/test_verdict.py"],
    # the command line (issue 39), each module with a fast test file of its own: the commands
    # run in this process (`batchproof.cli.main`), on stand-ins or one tiny record
    "cli/__init__": ["tests/test_cli_main.py"],
    "cli/parser": ["tests/test_cli_parser.py"],
    "cli/common": ["tests/test_cli_common.py"],
    "cli/verify": ["tests/test_cli_verify.py", "tests/test_verdict.py"],
    "cli/check": ["tests/test_cli_check.py"],
    "cli/mutation": ["tests/test_cli_mutation.py"],
    "cli/bench": ["tests/test_cli_bench.py"],
    "cli/fuzz": ["tests/test_cli_fuzz.py"],
    "cli/listing": ["tests/test_cli_listing.py"],
    "cli/branch_coverage": ["tests/test_branch_coverage.py"],
    # the framework adapters' conversion modules (issue 39): in-process tests on stand-ins of
    # each framework's functions (the frameworks are not installed in the default venv)
    "adapters/skyrl_megatron": ["tests/test_conversion_skyrl_megatron.py"],
    "adapters/megatron": ["tests/test_conversion_megatron.py"],
    "adapters/verl_mcore": ["tests/test_conversion_verl_mcore.py"],
    "adapters/openrlhf": ["tests/test_conversion_openrlhf.py"],
    "adapters/trl": ["tests/test_conversion_trl.py"],
    "adapters/verl": ["tests/test_conversion_verl.py"],
    "adapters/skyrl_sft": ["tests/test_conversion_skyrl_sft.py"],
    "adapters/huggingface": ["tests/test_conversion_huggingface.py"],
}


def harness_files(names: Sequence[str]) -> list[str]:
    """`harness/<name>.py` for each name of `HARNESS_KILLERS`."""
    unknown = [n for n in names if n not in HARNESS_KILLERS]
    if unknown:
        raise ValueError(f"no harness module {unknown[0]!r} to mutate; known: "
                         f"{sorted(HARNESS_KILLERS)}")
    return [f"harness/{name}.py" for name in names]


def mangled(function: str, cls: str | None = None) -> str:
    """mutmut's name of a function (`x_f`) or method (`xǁCǁf`)."""
    return f"x{CLASS_SEPARATOR}{cls}{CLASS_SEPARATOR}{function}" if cls else f"x_{function}"


def installed_path(path: str) -> str:
    """A repository path in the installed namespace: `impl/sft.py` → `batchproof/impl/sft.py`."""
    folder, _, rest = path.partition("/")
    return f"{NAMESPACE[folder]}/{rest}"


def module_of(path: str) -> str:
    """The module a repository path is imported as: `impl/sft.py` → `batchproof.impl.sft`."""
    return installed_path(path)[: -len(".py")].replace("/", ".")


def functions_touching(source: str, lines: set[int] | None) -> list[str]:
    """Mangled names of the top-level functions and methods whose span meets `lines`
    (None: every function)."""

    def hit(node: ast.AST) -> bool:
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        return lines is None or any(first <= n <= node.end_lineno for n in lines)

    names = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and hit(node):
            names.append(mangled(node.name))
        elif isinstance(node, ast.ClassDef):
            names += [mangled(f.name, node.name) for f in node.body
                      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and hit(f)]
    return names


_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


def changed_lines(diff: str) -> set[int]:
    """New-file line numbers touched by a `git diff -U0` of one file (a pure deletion touches the
    lines on both sides of it)."""
    lines: set[int] = set()
    for match in _HUNK.finditer(diff):
        start, count = int(match[1]), int(match[2] or 1)
        lines |= set(range(start, start + count)) if count else {start, start + 1}
    return lines


def _git(*args: str, root: Path = REPO) -> str:
    result = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if result.returncode != 0:
        raise ValueError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def changed_functions(since: str, paths: Sequence[str], root: Path = REPO) -> dict[str, list[str]]:
    """path → mangled names of the functions changed since `since` (committed, staged, unstaged
    and untracked changes alike)."""
    untracked = set(_git("ls-files", "--others", "--exclude-standard", "--", *paths,
                         root=root).split())
    out = {}
    for path in paths:
        file = root / path
        if not file.is_file():
            continue
        source = file.read_text()
        if path in untracked:
            names = functions_touching(source, None)
        else:
            diff = _git("diff", "-U0", since, "--", path, root=root)
            names = functions_touching(source, changed_lines(diff)) if diff else []
        if names:
            out[path] = names
    return out


def patterns_for(functions: dict[str, list[str]]) -> list[str]:
    """mutmut mutant-name globs for the given functions."""
    return [f"{module_of(path)}.{name}__mutmut_*"
            for path, names in functions.items() for name in names]


# --------------------------------------------------------------------------- configuration


def mutmut_config(paths: Sequence[str], ops: Sequence[str] | None,
                  harness: Sequence[str] = ()) -> dict:
    """The `[tool.mutmut]` table of a run (see docs/mutation.md); with `harness` (names of
    `HARNESS_KILLERS`), a run over those harness modules with their own tests as killers."""
    if harness:
        selection = list(dict.fromkeys(t for name in harness for t in HARNESS_KILLERS[name]))
        return {
            "source_paths": [f"{NAMESPACE['harness']}/"],
            "only_mutate": [installed_path(p) for p in paths],
            "also_copy": [],
            "pytest_add_cli_args": ["-p", "no:xdist", "-p", "no:cacheprovider",
                                    "-p", "no:benchmark", "--hypothesis-profile=mutation"],
            "pytest_add_cli_args_test_selection": selection,
            "use_git_change_detection": False,
            "track_dependencies": False,
        }
    op_tests = [f"tests/test_{Path(p).stem}.py" for p in paths]  # an op's own tests kill too
    selection = [t for t in (*TEST_FILES, *op_tests) if (REPO / t).is_file()]
    if ops:
        selection += ["-k", " or ".join(op.split(".")[0] for op in ops)]
    return {
        "source_paths": [f"{NAMESPACE[IMPL]}/"],
        "only_mutate": [installed_path(p) for p in paths],
        "also_copy": [f"{NAMESPACE['harness']}/"],
        "pytest_add_cli_args": ["-p", "no:xdist", "-p", "no:cacheprovider",
                                "-p", "no:benchmark", "--hypothesis-profile=mutation"],
        "pytest_add_cli_args_test_selection": selection,
        "use_git_change_detection": False,
        "track_dependencies": False,
    }


def toml_table(table: dict) -> str:
    lines = ["[tool.mutmut]"]
    for key, value in table.items():
        lines.append(f"{key} = {json.dumps(value, ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def prepare_workdir(config: dict, root: Path = REPO) -> Path:
    """A throw-away copy of the project, laid out as the installed namespace, with `[tool.mutmut]`
    appended to its pyproject.toml."""
    workdir = Path(tempfile.mkdtemp(prefix="batchproof-mutmut-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
    for folder, target in NAMESPACE.items():  # harness first: impl/ and reference/ go inside it
        shutil.copytree(root / folder, workdir / target, ignore=ignore)
    for name in COPIED:
        source = root / name
        if source.is_dir():
            shutil.copytree(source, workdir / name, ignore=ignore)
        elif source.is_file():
            shutil.copy2(source, workdir / name)
    pyproject = workdir / "pyproject.toml"
    text = pyproject.read_text() if pyproject.exists() else ""
    if "[tool.mutmut]" in text:
        raise SystemExit("pyproject.toml already has [tool.mutmut]; the driver owns that table")
    pyproject.write_text(text.rstrip() + "\n\n" + toml_table(config))
    return workdir


def mutmut_env() -> dict[str, str]:
    env = dict(os.environ, HYPOTHESIS_PROFILE="mutation", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _mutmut(args: Sequence[str], workdir: Path, capture: bool = False):
    """Run the mutmut CLI in `workdir` (imported, so `mutmut.__main__` is what it expects), in its
    own process group so that an interrupted run takes mutmut's forked workers down with it."""
    code = "import sys; from mutmut.__main__ import cli; cli(sys.argv[1:])"
    # mutmut redraws a spinner line whatever its output is: off a terminal, each line is
    # copied settled to its last frame (`batchproof.terminal`)
    settle = not capture and not terminal.on_terminal()
    with subprocess.Popen([sys.executable, "-c", code, *args], cwd=workdir, env=mutmut_env(),
                          stdout=subprocess.PIPE if capture or settle else None,
                          stderr=subprocess.PIPE if capture else None, text=capture,
                          start_new_session=True) as process:
        try:
            if settle:
                terminal.copy_settled(process.stdout, sys.stdout)
            stdout, stderr = process.communicate()
        except BaseException:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


# --------------------------------------------------------------------------- results


def read_results(workdir: Path, paths: Sequence[str], patterns: Sequence[str],
                 located=installed_path) -> list[Mutant]:
    """Mutants of `paths` (filtered by `patterns`) from mutmut's meta files; `located` maps a
    reported path to its place in the work directory."""
    import fnmatch

    out = []
    for path in paths:
        meta = workdir / "mutants" / f"{located(path)}.meta"
        if not meta.exists():
            continue
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        for name, code in codes.items():
            if patterns and not any(fnmatch.fnmatch(name, p) for p in patterns):
                continue
            status = {**KILLED, **SURVIVED, **UNTESTED}.get(code, "suspicious")
            out.append(Mutant(name, path, function_of(name), status))
    return sorted(out, key=lambda m: (m.path, m.function, _number(m.name)))


def function_of(name: str) -> str:
    """`batchproof.impl.rl_batch.xǁ_Valuesǁ__init____mutmut_3` → `_Values.__init__`."""
    mangled_name = name.partition("__mutmut_")[0].rpartition(".")[2]
    if mangled_name.startswith("x" + CLASS_SEPARATOR):
        _, cls, function = mangled_name.split(CLASS_SEPARATOR)
        return f"{cls}.{function}"
    return mangled_name[2:]


def _number(name: str) -> int:
    return int(name.rpartition("__mutmut_")[2] or 0)


def attach_diffs(mutants: Sequence[Mutant], workdir: Path) -> None:
    for mutant in mutants:
        shown = _mutmut(["show", mutant.name], workdir, capture=True)
        mutant.diff = "\n".join(line for line in shown.stdout.splitlines()
                                if line.startswith(("-", "+")) and not line.startswith(
                                    ("---", "+++")))
        known = next((k for k in equivalents() if k.matches(mutant)), None)
        mutant.equivalent = known.reason if known else ""


# --------------------------------------------------------------------------- report


def print_report(report: Report, min_mutants: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"mutmut over {', '.join(report.scope)}")
    for column in ("function", "mutants", "killed", "survived", "equivalent", "untested"):
        table.add_column(column, justify="left" if column == "function" else "right")
    for function in dict.fromkeys(f"{m.path}:{m.function}" for m in report.mutants):
        rows = [m for m in report.mutants if f"{m.path}:{m.function}" == function]
        survived = [m for m in rows if m.status in SURVIVED.values()]
        table.add_row(function, str(len(rows)),
                      str(sum(m.status in KILLED.values() for m in rows)),
                      str(sum(not m.equivalent for m in survived)),
                      str(sum(bool(m.equivalent) for m in survived)),
                      str(sum(m.status in UNTESTED.values() for m in rows)))
    console.print(table)
    for mutant in report.survivors:
        label = "equivalent" if mutant.equivalent else "SURVIVED"
        console.rule(f"{label}: {mutant.name}")
        console.print(mutant.diff, markup=False, highlight=False)
        if mutant.equivalent:
            console.print(f"  reason: {mutant.equivalent}", markup=False, highlight=False)
    for mutant in report.untested:
        console.print(f"[red]{mutant.status}[/red]: {mutant.name}", highlight=False)
    relevant = len(report.mutants) - len(report.equivalent)
    console.print(
        f"{len(report.mutants)} mutants, {report.killed} killed, "
        f"{len(report.survivors) - len(report.equivalent)} survived, "
        f"{len(report.equivalent)} equivalent, {len(report.untested)} untested: "
        f"kill rate {100 * report.score:.1f}% of {relevant} non-equivalent mutants "
        f"in {report.seconds:.0f}s (guard: at least {min_mutants} mutants)")


def markdown(report: Report) -> str:
    """The score per file, then every documented equivalent mutant with its reason, as Markdown
    (what docs/mutation.md shows)."""
    lines = ["| file | mutants | killed | equivalent | survived | untested | kill rate |",
             "|---|---|---|---|---|---|---|"]
    for path in report.scope:
        rows = [m for m in report.mutants if m.path == path]
        equivalent = sum(bool(m.equivalent) for m in rows)
        killed = sum(m.status in KILLED.values() for m in rows)
        survived = sum(m.status in SURVIVED.values() and not m.equivalent for m in rows)
        untested = sum(m.status in UNTESTED.values() for m in rows)
        relevant = len(rows) - equivalent
        rate = f"{100 * killed / relevant:.1f}%" if relevant else "—"
        lines.append(f"| `{path}` | {len(rows)} | {killed} | {equivalent} | {survived} | "
                     f"{untested} | {rate} of {relevant} |")
    relevant = len(report.mutants) - len(report.equivalent)
    lines.append(f"| **all** | **{len(report.mutants)}** | **{report.killed}** | "
                 f"**{len(report.equivalent)}** | **{len(report.survivors) - len(report.equivalent)}"
                 f"** | **{len(report.untested)}** | **{100 * report.score:.1f}% of {relevant}** |")
    lines += ["", f"mutmut time {report.seconds:.0f} s. Equivalent mutants:", "",
              "| mutant | mutation (removed → added) | why no CPU test can kill it |",
              "|---|---|---|"]
    for mutant in report.equivalent:
        removed, added = diff_sides(mutant.diff)
        change = f"`{_cell(removed)}` → `{_cell(added)}`"
        lines.append(f"| `{mutant.path}:{mutant.function}` #{_number(mutant.name)} | {change} | "
                     f"{_cell(mutant.equivalent, limit=None)} |")
    return "\n".join(lines) + "\n"


def _cell(text: str, limit: int | None = 110) -> str:
    text = text.replace("|", "\\|").replace("`", "'")
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def verdict(report: Report, min_mutants: int, since: str | None) -> int:
    if len(report.mutants) < min_mutants and not since:
        print(f"error: only {len(report.mutants)} mutants (< --min-mutants {min_mutants}): "
              "the run is misconfigured, its score means nothing", file=sys.stderr)
        return 3
    if not report.mutants or report.untested:
        print("error: mutants were left unchecked or without a covering test", file=sys.stderr)
        return 3
    return 1 if len(report.survivors) > len(report.equivalent) else 0


# --------------------------------------------------------------------------- main


def main(ops: Sequence[str] | None = None, since: str | None = None, min_mutants: int = 20,
         max_children: int = MAX_CHILDREN, json_path: str | None = None,
         keep: bool = False, markdown_path: str | None = None,
         harness: Sequence[str] = ()) -> int:
    """Run mutmut over `impl/<op>.py` for each op (default: all of `impl/`), restricted to the
    functions changed since `since` when given; print the score and the survivors."""
    if not (REPO / "tests").is_dir() or not (REPO / IMPL).is_dir():
        print("error: `batchproof mutate --mutmut` runs from a clone of the batchproof repository "
              "(its tests/ kill the mutants of impl/); this batchproof is installed from a wheel. "
              "`batchproof mutate --zoo` works anywhere.", file=sys.stderr)
        return 3
    if harness and ops:
        raise ValueError("--harness mutates harness modules: not with --op")
    paths = harness_files(harness) if harness else op_files(ops)
    patterns: list[str] = []
    if since:
        changed = changed_functions(since, paths)
        if not changed:
            print(f"no function of {', '.join(paths)} changed since {since}: nothing to mutate")
            return 0
        paths, patterns = list(changed), patterns_for(changed)
        print("functions changed since", since + ":",
              ", ".join(f"{p}:{n}" for p, names in changed.items() for n in names))
    workdir = prepare_workdir(mutmut_config(paths, ops, harness))
    _exit_on_sigterm()
    args = ["run", "--max-children", str(max_children), *patterns]
    report = Report(scope=paths, patterns=patterns,
                    command=f"mutmut {' '.join(args)}  (in {workdir})")
    try:
        started = time.perf_counter()
        completed = _mutmut(args, workdir)
        report.seconds = time.perf_counter() - started
        report.mutants = read_results(workdir, paths, patterns)
        if completed.returncode != 0:
            print(f"error: mutmut exited with {completed.returncode}", file=sys.stderr)
            return 3
        total = len(report.mutants)
        if total < min_mutants and not since:
            print(f"error: mutmut generated {total} mutants for {paths}, fewer than "
                  f"--min-mutants {min_mutants}: misconfigured run", file=sys.stderr)
            return 3
        attach_diffs(report.survivors, workdir)
        print_report(report, min_mutants)
        if json_path:
            Path(json_path).write_text(json.dumps(
                {**asdict(report), "killed": report.killed, "score": report.score}, indent=2))
        if markdown_path:
            Path(markdown_path).write_text(markdown(report))
        return verdict(report, min_mutants, since)
    finally:
        if keep:
            print(f"mutmut work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _exit_on_sigterm() -> None:
    """A SIGTERM (CI cancel, `timeout`) unwinds through `finally`: mutmut's process group is
    killed and the work directory removed."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m batchproof.mutation.mutmut_driver",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", action="append")
    parser.add_argument("--since", help="only functions changed since this git revision")
    parser.add_argument("--min-mutants", type=int, default=20)
    parser.add_argument("--max-children", type=int, default=MAX_CHILDREN)
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--markdown", help="write the score and the equivalents as Markdown")
    parser.add_argument("--keep", action="store_true", help="keep mutmut's work directory")
    return parser


if __name__ == "__main__":
    a = build_parser().parse_args()
    try:
        sys.exit(main(ops=a.op, since=a.since, min_mutants=a.min_mutants,
                      max_children=a.max_children, json_path=a.json, keep=a.keep,
                      markdown_path=a.markdown))
    except ValueError as err:  # a usage error: an unknown op, a bad --since revision
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)

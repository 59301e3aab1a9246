"""Branch coverage of `impl/` and `reference/` over a `batchproof verify` run (coverage.py).

`batchproof verify --coverage` measures, in branch mode, which lines and branches of the
built-in implementation and of the oracle the checks reached, over every placement they ran
(the compiled kernels, the CPU fast paths, the device-generic code: `batchproof.placements`),
and prints per file the branch figure and the branches never taken:

    impl/rl_batch.py   212 statements   96 branches   94/96 taken   97.9%
      not taken: 162->163, 301->exit

A branch is written `line->line` (from the line of a decision to the line it would go to;
`exit` leaves the function). `docs/coverage.md` lists the branches that a CPU run cannot take,
each with its reason.

The compiled kernels (Numba) run as Python while measuring (`NUMBA_DISABLE_JIT=1`, set before
Numba is imported): coverage.py cannot see inside compiled code. The plain run, without
`--coverage`, checks the compiled kernels themselves.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGES = ("batchproof.impl", "batchproof.reference")
MISSING = "--coverage needs coverage.py: pip install 'batchproof[coverage]'"


@dataclass
class FileCoverage:
    """One source file: its name as the repository writes it (`impl/rl_batch.py`), counts, and
    the branches never taken (`"162->163"`)."""

    name: str
    statements: int
    missing_lines: list[int]
    branches: int
    taken: int
    missing_branches: list[str] = field(default_factory=list)

    @property
    def percent(self) -> float:
        return 100.0 * self.taken / self.branches if self.branches else 100.0


def available() -> bool:
    return importlib.util.find_spec("coverage") is not None


def start() -> Any:
    """Start measuring (before `impl/` or `reference/` is imported: their import-time lines
    count too). The kernels will run as Python."""
    import coverage

    if any(name in sys.modules for name in PACKAGES):
        raise RuntimeError("start coverage before batchproof.impl / reference are imported")
    os.environ["NUMBA_DISABLE_JIT"] = "1"
    measure = coverage.Coverage(branch=True, source_pkgs=list(PACKAGES), data_file=None,
                                config_file=False)
    measure.start()
    return measure


def finish(measure: Any) -> list[FileCoverage]:
    """Stop measuring; per file of impl/ and reference/, what was reached."""
    measure.stop()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "coverage.json"
        measure.json_report(outfile=str(path), show_contexts=False)
        data = json.loads(path.read_text())
    # every file measured is under impl/ or reference/ (`source_pkgs`): by name, impl/ first
    return sorted((_file(name, entry) for name, entry in data["files"].items()),
                  key=lambda f: f.name)


def _file(path: str, entry: dict) -> FileCoverage:
    summary = entry["summary"]
    return FileCoverage(
        name=_repository_name(path),
        statements=summary["num_statements"],
        missing_lines=list(entry["missing_lines"]),
        branches=summary["num_branches"],
        taken=summary["covered_branches"],
        missing_branches=[f"{a}->{'exit' if b < 0 else b}" for a, b in entry["missing_branches"]],
    )


def _repository_name(path: str) -> str:
    """`.../harness/../impl/rl_batch.py` or `.../batchproof/impl/rl_batch.py` -> `impl/...`."""
    parts = Path(path).parts
    for top in ("impl", "reference"):
        if top in parts:
            index = len(parts) - 1 - parts[::-1].index(top)
            return "/".join(parts[index:])
    return path


def totals(files: list[FileCoverage], top: str) -> tuple[int, int]:
    """(branches taken, branches) over the files under `top` (`impl` or `reference`)."""
    chosen = [f for f in files if f.name.startswith(top + "/")]
    return sum(f.taken for f in chosen), sum(f.branches for f in chosen)


def as_json(files: list[FileCoverage]) -> dict:
    out: dict[str, Any] = {}
    for top in ("impl", "reference"):
        taken, branches = totals(files, top)
        out[top] = {"branches": branches, "taken": taken,
                    "percent": round(100.0 * taken / branches, 2) if branches else 100.0}
    out["files"] = {f.name: {"statements": f.statements, "branches": f.branches,
                             "taken": f.taken, "missing_branches": f.missing_branches,
                             "missing_lines": f.missing_lines} for f in files}
    return out

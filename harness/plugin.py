"""batchproof's pytest plugin: opt-in, never loaded by installing batchproof.

A suite asks for it with `-p batchproof.plugin` (on the command line or in `addopts`, as this
project's pyproject.toml does) or `pytest_plugins = ["batchproof.plugin"]` in its root
conftest.py. Then:

- batchproof's Hypothesis profiles are registered, and one is loaded: `--hypothesis-profile NAME`,
  else `$HYPOTHESIS_PROFILE`, else `ci` when `$CI` is set, else `dev` (`batchproof.profiles`);
- `gpu` marker: such tests are skipped cleanly when CUDA is not available; `slow` marker;
- one intra-op torch thread per process (per xdist worker under `-n auto`), unless
  `OMP_NUM_THREADS` is set: the tensors under test are tiny, threads only add contention.

A suite that does not load it keeps its own profile, thread count and markers
(`tests/test_packaging.py::test_a_foreign_suite_runs_unchanged`).
"""

from __future__ import annotations

import logging
import os
import sys
import time

import pytest

from batchproof import profiles
from batchproof.shared_database import SharedDatabaseUnreachable

try:  # before Hypothesis' own plugin reads --hypothesis-profile in pytest_configure
    profiles.register()
except SharedDatabaseUnreachable as err:  # one line, not a traceback
    raise pytest.UsageError(str(err)) from None
# tensordict calls torch.fx.is_fx_tracing(), which logs a one-time deprecation warning
logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)


_STARTED = time.time()  # what the run's processes failed to write to a shared database since


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped cleanly without one")
    config.addinivalue_line("markers", "slow: long-running; still part of the default suite")
    chosen = config.getoption("hypothesis_profile", default=None)
    profiles.load(chosen or profiles.default_profile())
    # tiny tensors: intra-op threads only add contention (2 threads made the model checks ~10x
    # slower without xdist on a 2-core machine); set OMP_NUM_THREADS to choose otherwise
    if os.environ.get("PYTEST_XDIST_WORKER") or not os.environ.get("OMP_NUM_THREADS"):
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _fuzz_targets_keyed_as_run_check(items)
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (gpu marker); no CUDA device here")
    for item in gpu_items:
        item.add_marker(skip)


def pytest_report_header(config: pytest.Config) -> str:
    from hypothesis import settings

    return f"batchproof: hypothesis profile {settings._current_profile!r}"


def _fuzz_targets_keyed_as_run_check(items: list[pytest.Item]) -> None:
    """Refuse a HypoFuzz run of `batchproof.fuzz_targets` collected under other node ids than
    `batchproof fuzz` gives them: HypoFuzz keys a test's examples by its node id, and `verify`
    would never replay what it found."""
    detection = sys.modules.get("hypofuzz.detection")
    if detection is None or not detection.in_hypofuzz_run():
        return
    for item in items:
        module = getattr(item, "module", None)
        if getattr(module, "__name__", "").rpartition(".")[2] != "fuzz_targets" \
                or not hasattr(module, "TARGETS"):
            continue
        from batchproof.checks import FUZZ_MODULE

        expected = f"{FUZZ_MODULE}::{item.name}"
        if item.nodeid != expected:
            raise pytest.UsageError(
                f"{item.nodeid}: batchproof's fuzz targets must be collected as {expected!r} "
                "(what `batchproof fuzz` does: the package folder as rootdir), or what HypoFuzz "
                "finds is saved under database keys `batchproof verify` never reads")


def pytest_terminal_summary(terminalreporter) -> None:
    """A shared database (Redis) lost during the run: said once, not hidden."""
    from batchproof.shared_database import failures_since

    for line in failures_since(_STARTED):
        terminalreporter.write_line(f"batchproof: {line}", yellow=True)

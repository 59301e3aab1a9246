"""batchproof as an installed library: one namespace, nothing else in site-packages, an opt-in
pytest plugin that leaves a foreign suite as it was, a light `import batchproof`, a core install
without the optional extras. (The whole route — wheel, fresh venv, downstream example — is
`examples/downstream/run_ci.py`, which CI runs.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
NAMESPACE = {"harness": "batchproof", "impl": "batchproof.impl",
             "reference": "batchproof.reference"}


def test_every_package_folder_is_in_the_wheel_under_batchproof() -> None:
    """A new subpackage left out of `packages` would be missing from the wheel only."""
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert setuptools["package-dir"] == {package: folder for folder, package in NAMESPACE.items()}
    found = sorted(
        ".".join([NAMESPACE[init.relative_to(REPO).parts[0]],
                  *init.relative_to(REPO).parent.parts[1:]])
        for folder in NAMESPACE for init in (REPO / folder).rglob("__init__.py"))
    assert sorted(setuptools["packages"]) == found


def test_core_dependencies_leave_the_extras_out() -> None:
    core = " ".join(PYPROJECT["project"]["dependencies"])
    for optional in ("numba", "transformers", "mutmut", "pytest"):
        assert optional not in core, optional
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert extras["kernels"] == ["numba>=0.60"] and extras["mutation"] == ["mutmut>=3"]
    assert any(d.startswith("transformers") for d in extras["models"])
    assert "pytest11" not in PYPROJECT["project"].get("entry-points", {})  # opt-in plugin


def test_the_wheel_installs_only_batchproof(tmp_path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path), str(REPO)], check=True,
                   capture_output=True)
    (wheel,) = tmp_path.glob("batchproof-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"batchproof", wheel.name.split("-py3")[0] + ".dist-info"}, top
    for module in ("batchproof/impl/rl_batch.py", "batchproof/reference/rl_batch.py",
                   "batchproof/impl/kernels/sft.py", "batchproof/ops/rl_batch.py",
                   "batchproof/strategies.py", "batchproof/api.py"):
        assert module in names, module
    assert not any(name.startswith(("batchproof/tests", "tests/")) for name in names)
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "batchproof = batchproof.cli:main" in entry_points
    assert "pytest11" not in entry_points


def test_import_batchproof_is_light_and_beside_their_own_reference_and_impl(tmp_path) -> None:
    for name in ("reference", "impl", "harness"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"WHOSE = 'theirs: {name}'\n")
    code = textwrap.dedent("""\
        import sys
        import batchproof
        assert "torch" not in sys.modules, "import batchproof imported torch"
        import reference, impl, harness
        from batchproof.reference import rl_batch
        from batchproof import registry
        assert reference.WHOSE == "theirs: reference" and impl.WHOSE == "theirs: impl"
        assert len(registry.all_ops()) > 20
        """)
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr


FOREIGN_CONFTEST = textwrap.dedent("""\
    import torch
    from hypothesis import settings

    settings.register_profile("theirs", max_examples=7)
    settings.load_profile("theirs")
    torch.set_num_threads(2)
    """)

FOREIGN_TESTS = textwrap.dedent("""\
    import pytest
    import torch
    from hypothesis import given, settings, strategies as st

    import batchproof  # a suite that uses batchproof's API, without its plugin
    import batchproof.strategies
    from batchproof.impl.rl_batch import build_rl_batch

    DRAWN = []


    @given(st.integers())
    def test_draws(x):
        DRAWN.append(x)


    def test_their_profile_is_the_one_loaded():
        assert settings._current_profile == "theirs" and settings().max_examples == 7
        assert len(DRAWN) == 7


    def test_their_thread_count():
        build_rl_batch([[1]], [[2]], pad_token_id=0)
        assert torch.get_num_threads() == 2


    @pytest.mark.gpu
    def test_their_own_gpu_marker_runs():
        pass
    """)


def _foreign_suite(tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(FOREIGN_CONFTEST)
    (tmp_path / "test_theirs.py").write_text(FOREIGN_TESTS)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "HYPOTHESIS_PROFILE", "PYTEST_XDIST_WORKER",
                        "OMP_NUM_THREADS")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                           "no:randomly", "-rA", *options], cwd=tmp_path, env=env,
                          capture_output=True, text=True)


def test_a_foreign_suite_runs_unchanged(tmp_path) -> None:
    """Installed (and imported) but not opted into, batchproof changes nothing: the suite's own
    Hypothesis profile and torch thread count hold, and its `gpu` tests are not skipped."""
    result = _foreign_suite(tmp_path)
    assert result.returncode == 0, result.stdout
    assert "4 passed" in result.stdout and "skipped" not in result.stdout, result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the opted-in gpu marker skips on CPU")
def test_opting_in_gives_batchproofs_own_behaviour(tmp_path) -> None:
    """The control: the same suite with `-p batchproof.plugin` gets batchproof's profile, one
    torch thread and the `gpu` skip (so the test above could fail)."""
    result = _foreign_suite(tmp_path, "-p", "batchproof.plugin")
    assert "FAILED test_theirs.py::test_their_profile_is_the_one_loaded" in result.stdout
    assert "FAILED test_theirs.py::test_their_thread_count" in result.stdout
    assert "SKIPPED" in result.stdout and "needs CUDA (gpu marker)" in result.stdout

"""Every replay line batchproof prints reproduces its failure (issue 39).

For each door a failure comes out of — `batchproof verify` (the built-in impl, a bug-zoo entry
planted in the fresh process), `verify --impl PACKAGE`, `check --impl FRAMEWORK` (a stand-in
framework's adapter from `--adapter-file`), `check --impl module:function`, `mutate --impl`'s
check before mutation, and `batchproof.check` in a user's pytest test — a test runs the command
in a fresh process, takes the printed `replay:` line as a user copies it (shlex-split, the same
folder, the same environment), runs it in another fresh process and asserts the same failure:
the same check (its header), the same minimal input (the `minimal case:` line), the same replay
line, and exit status 1 (a divergence) both times.

Each run is small (one record, one check, a few examples): two fresh processes per door. The
first run's search is made deterministic (`--profile ci`, `--seed`, `derandomize`), so that it
finds the failure every time; the replay line carries no seed: its blob is the input.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent  # the environment's `batchproof` script is beside python
RECORD = "trainer.required_multiple"

# a function of the contract that diverges on a third of the inputs: the minimal case is a
# shrunk one (dp_size 3), so a replay of another input fails otherwise or passes
THEIRS = '''
from batchproof.reference.trainer import required_multiple


def multiple(dp_size, **kwargs):
    """Right except when dp_size is a multiple of 3."""
    return required_multiple(dp_size, **kwargs) * (2 if dp_size % 3 == 0 else 1)
'''

# applies a bug-zoo entry in every process of the environment that names it: the built-in impl
# is then faulty with no file of it edited
SITECUSTOMIZE = '''
import contextlib
import os

_PLANTED = contextlib.ExitStack()
if os.environ.get("PLANTED_ZOO_ENTRY"):
    from batchproof.mutation.zoo import get, planted

    _PLANTED.enter_context(planted(get(os.environ["PLANTED_ZOO_ENTRY"])))
'''


@dataclass(frozen=True)
class Failure:
    """One failure as a person reads it in a command's output."""

    header: str  # the rule above it: which target and which check
    minimal: str  # the `minimal case:` line
    replay: str  # the `replay:` line

    def same_as(self, other: Failure) -> bool:
        """The same failure: the same header (less verify's placement note: a run over every
        placement says `any` of an op that never asked where it runs, where the replay, on the
        one placement it names, says it), minimal case and replay line."""
        return (_PLACED.sub("", self.header), self.minimal, self.replay) == (
            _PLACED.sub("", other.header), other.minimal, other.replay)

    @property
    def check(self) -> str:
        words = shlex.split(self.replay)
        return words[words.index("--check") + 1]


_RULE = re.compile(r"^─+ (.+ — .+?) ─+$")
_PLACED = re.compile(r" on (kernel|cpu|generic|triton)(?= \()")


def failure_of(output: str) -> Failure:
    """The one failure a command printed (its header rule, minimal case and replay line)."""
    lines = output.splitlines()
    (header,) = [m[1] for line in lines for m in [_RULE.match(line.strip())] if m]
    (minimal,) = [line.removeprefix("minimal case: ") for line in lines
                  if line.startswith("minimal case: ")]
    (replay,) = [line.removeprefix("replay: ") for line in lines if line.startswith("replay: ")]
    return Failure(header, minimal, replay)


def environment(**extra: str) -> dict[str, str]:
    """This environment, `batchproof` first on PATH, without this pytest run's own settings (a
    profile, a shared database, pytest options)."""
    drop = ("BATCHPROOF_SHARED_DATABASE", "HYPOTHESIS_PROFILE", "PYTEST_ADDOPTS", "PYTHONPATH",
            "PLANTED_ZOO_ENTRY")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    return env | extra


def run(words: list[str], folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(words, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300)


def replayed(words: list[str], folder: Path, env: dict[str, str], *, blob: bool = True
             ) -> Failure:
    """Run `words`; take its replay line as a user would and run it in another process; assert
    both fail the same way (exit 1, the same check, minimal case and replay line). `blob`: the
    failure is one Hypothesis generated, replayed from its blob (`--reproduce`), not searched
    for again; else one of the explicit examples a search starts with (verify's pins), which
    has none: the replay runs the check again, explicit examples first."""
    first = run(words, folder, env)
    assert first.returncode == 1, first.stdout + first.stderr
    failure = failure_of(first.stdout)
    assert ("--reproduce" in failure.replay) == blob, failure
    again = run(shlex.split(failure.replay), folder, env)
    assert again.returncode == 1, f"{failure.replay}\n{again.stdout}{again.stderr}"
    assert failure_of(again.stdout).same_as(failure), again.stdout
    return failure


@pytest.fixture
def theirs(tmp_path) -> Path:
    (tmp_path / "theirs.py").write_text(THEIRS)
    return tmp_path


def test_verify_of_the_built_in_impl_replays(tmp_path) -> None:
    """A zoo entry planted in the fresh processes (sitecustomize on PYTHONPATH): `verify`'s
    replay line, with its placement, fails the same way."""
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = environment(PYTHONPATH=str(plant), PLANTED_ZOO_ENTRY="trainer.multiple_product_not_lcm")
    failure = replayed(["batchproof", "verify", "--op", RECORD, "--check", "equivalence",
                        "--max-examples", "20", "--profile", "ci"], tmp_path, env, blob=False)
    assert failure.check == "equivalence" and "--placement" in failure.replay, failure
    # the pin critic_only_when_actor_frozen, an explicit example of the search, fails first
    # (less the keywords it fails without); the package door below replays a blob
    assert failure.minimal == "required_multiple(4, critic_mini_batch_size=2, n=2)", failure


def test_verify_of_a_placement_whose_kernel_never_ran_replays(tmp_path) -> None:
    """A dispatch fault planted in the fresh processes (`rl_batch.numba_kernel_never_dispatched`:
    equal outputs, the Numba kernel never chosen): verify's `paths:kernel` failure is about
    every input its checks drew, so it has no minimal case; its replay line reruns the
    placement's reference checks alone and fails the same way, naming the same path."""
    pytest.importorskip("numba")
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = environment(PYTHONPATH=str(plant),
                      PLANTED_ZOO_ENTRY="rl_batch.numba_kernel_never_dispatched")
    first = run(["batchproof", "verify", "--op", "rl_batch.build_rl_batch", "--placement",
                 "kernel", "--max-examples", "5", "--profile", "ci"], tmp_path, env)
    assert first.returncode == 1, first.stdout + first.stderr
    lines = first.stdout.splitlines()
    (header,) = [m[1] for line in lines for m in [_RULE.match(line.strip())] if m]
    (replay,) = [line.removeprefix("replay: ") for line in lines if line.startswith("replay: ")]
    assert header == "rl_batch.build_rl_batch — paths:kernel on kernel (fail)", header
    assert replay.endswith("--placement kernel --check paths:kernel"), replay
    assert not any(line.startswith("minimal case: ") for line in lines)
    named = "numba:rl_batch.write_rows, which never ran"
    assert named in first.stdout
    again = run(shlex.split(replay), tmp_path, env)
    assert again.returncode == 1, f"{replay}\n{again.stdout}{again.stderr}"
    assert [m[1] for line in again.stdout.splitlines() for m in [_RULE.match(line.strip())]
            if m] == [header]
    assert named in again.stdout and f"replay: {replay}" in again.stdout


def test_verify_of_a_package_replays(tmp_path) -> None:
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "trainer.py").write_text(THEIRS.replace("def multiple(", "def required_multiple(")
                                        .replace("import required_multiple",
                                                 "import required_multiple as _contract")
                                        .replace("return required_multiple(", "return _contract("))
    failure = replayed(["batchproof", "verify", "--impl", "mypkg", "--op", RECORD, "--check",
                        "equivalence", "--max-examples", "20", "--seed", "1"], tmp_path,
                       environment())
    assert "--impl mypkg" in failure.replay and failure.minimal == "required_multiple(3)", failure


ADAPTERS = '''
import batchproof

batchproof.register_adapter(batchproof.Adapter(
    name="standin.multiple", framework="standin", record="trainer.required_multiple",
    target="theirs:multiple", wrap=lambda fn: fn))
'''


def test_check_of_a_framework_replays(theirs) -> None:
    """A stand-in framework's adapter, from `--adapter-file`: the replay line loads it again."""
    (theirs / "standin_adapters.py").write_text(ADAPTERS)
    failure = replayed(["batchproof", "check", "--adapter-file", "standin_adapters.py", "--impl",
                        "standin", "--check", "equivalence", "--max-examples", "20", "--profile",
                        "ci"], theirs, environment())
    assert failure.header == "new divergence: standin.multiple — equivalence", failure
    assert "--adapter-file standin_adapters.py" in failure.replay, failure
    assert failure.minimal == "required_multiple(3)", failure


def test_check_of_a_module_function_replays(theirs) -> None:
    failure = replayed(["batchproof", "check", "--impl", "theirs:multiple", "--op", RECORD,
                        "--check", "equivalence", "--max-examples", "20", "--seed", "1"], theirs,
                       environment())
    assert failure.minimal == "required_multiple(3)" and "--reproduce" in failure.replay, failure


def test_mutate_of_a_function_that_fails_first_replays(theirs) -> None:
    """`mutate --impl` checks the function before mutating it (no shrinking there): a failure
    stops it with a replay line, which fails the same way."""
    pytest.importorskip("mutmut")
    failure = replayed(["batchproof", "mutate", "--impl", "theirs:multiple", "--op", RECORD,
                        "--check", "equivalence", "--max-examples", "20"], theirs, environment())
    assert failure.check == "equivalence" and "--reproduce" in failure.replay, failure


USER_TEST = '''
import batchproof
import standin_adapters  # noqa: F401 - registers standin.multiple, as docs/checking.md does
from hypothesis import settings

from theirs import multiple


def test_multiple():
    batchproof.check(multiple, "trainer.required_multiple", adapter="standin.multiple",
                     checks=["equivalence"],
                     settings=settings(max_examples=20, database=None, derandomize=True))
'''


def test_the_python_api_replays(theirs) -> None:
    """`batchproof.check` in a user's test, with an adapter an adapter file registers (the flow
    of docs/checking.md): the replay line in its failure is a CLI command that loads that file
    (a fresh process knows no adapter the test registered)."""
    (theirs / "standin_adapters.py").write_text(ADAPTERS)
    (theirs / "test_user.py").write_text(USER_TEST)
    first = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                 "no:randomly", "-p", "no:xdist", "test_user.py"], theirs, environment())
    assert first.returncode == 1, first.stdout
    # pytest prints the assertion's text with its "E   " prefix; under CI=true its short test
    # summary repeats the whole message (pytest truncates it only outside CI): the failure is
    # read above that summary
    traceback = first.stdout.split(" short test summary info ")[0]
    text = "\n".join(line.removeprefix("E").strip() for line in traceback.splitlines())
    failure = failure_of(text)
    assert "--reproduce" in failure.replay and "--adapter-file" in failure.replay, failure
    again = run(shlex.split(failure.replay), theirs, environment())
    assert again.returncode == 1, f"{failure.replay}\n{again.stdout}{again.stderr}"
    assert failure_of(again.stdout).same_as(failure), again.stdout

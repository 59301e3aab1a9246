"""The `batchproof` command line as a user meets it: exit codes (0 pass, 1 divergence, 2 usage
error, 3 target or harness failure), one-line errors, the current folder importable for
`--impl module:function`, failure reports with a minimal case and a CLI replay line."""

from __future__ import annotations

import json
import shlex
import sys
import textwrap

import pytest
from hypothesis import strategies as st

from batchproof import registry
from batchproof.cli import main
from batchproof.mutation import mutmut_driver
from batchproof.registry import Case
from batchproof.statuses import Outcome, Verdict, exit_status

THEIRS = textwrap.dedent('''\
    from batchproof.reference.rl_batch import build_rl_batch
    from batchproof.reference.trainer import required_multiple


    def multiple(*args, **kwargs):
        return required_multiple(*args, **kwargs)


    def collate(prompts, responses, **kwargs):
        """Right on every batch except those padded with id 49 and of two rows or more."""
        td = build_rl_batch(prompts, responses, **kwargs)
        if kwargs.get("pad_token_id") == 49 and len(prompts) >= 2:
            td["position_ids"] = td["position_ids"] * 2
        return td


    def shifted(prompts, responses, **kwargs):
        """The loss mask one column to the right (wrapping around)."""
        td = build_rl_batch(prompts, responses, **kwargs)
        td["loss_mask"] = td["loss_mask"].roll(1, 1)
        return td
    ''')


@pytest.fixture(autouse=True)
def _restore_global_state(cli_state):
    """The CLI runs in this process (conftest.cli_state); its imports of `theirs` go too."""
    yield
    sys.modules.pop("theirs", None)


@pytest.fixture
def theirs(tmp_path, monkeypatch):
    """A folder with the user's module `theirs`, as the current folder (not on sys.path)."""
    (tmp_path / "theirs.py").write_text(THEIRS)
    monkeypatch.chdir(tmp_path)
    assert str(tmp_path) not in sys.path
    return tmp_path


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("batchproof ") and "torch" in out and "kernels: numba" in out


@pytest.mark.parametrize("argv, words", [
    (["verify", "--op", "no_such_op"], "unknown op"),
    (["verify", "--op", "trainer", "--check", "property:nope"], "unknown check"),
    (["verify", "--device", "tpu"], "invalid choice"),
    (["verify", "--profile", "fast"], "unknown Hypothesis profile"),
    (["verify", "--op", "trainer", "--max-examples", "0"], "--max-examples"),
    (["verify", "--impl", "theirs:multiple"], "exactly one record"),
    (["verify", "--impl", "theirs:multiple", "--op", "trainer.required_multiple",
      "--placement", "kernel"], "only batchproof's own impl"),
    (["verify", "--impl", "theirs:multiple", "--op", "trainer.required_multiple",
      "--coverage"], "--coverage measures batchproof's own"),
    (["check", "--impl", "theirs:multiple", "--op", "trainer.required_multiple",
      "--device", "gpu"], "invalid choice"),
    (["verify", "--op", "trainer", "--reproduce", "AAA"], "--check"),
    (["show", "--op", "nope"], "unknown op"),
    (["list", "nothing"], "invalid choice"),
    (["check", "--impl", "no_such_framework"], "unknown --impl"),
    (["check", "--impl", "theirs:multiple", "--op", "trainer.required_multiple",
      "--forms", "jagged"], "no input form"),
    (["mutate", "--zoo", "--op", "nope"], "no zoo entries"),
    (["frobnicate"], "invalid choice"),
])
def test_a_usage_mistake_is_one_line_and_exit_2(argv, words, capsys, theirs) -> None:
    assert main(argv) == 2
    assert words in _one_line_error(capsys)


def test_a_malformed_shared_database_is_a_usage_mistake(capsys, monkeypatch) -> None:
    monkeypatch.setenv("BATCHPROOF_SHARED_DATABASE", "github:only-owner")
    assert main(["verify", "--op", "balance.restore_order"]) == 2
    assert "BATCHPROOF_SHARED_DATABASE" in _one_line_error(capsys)


@pytest.mark.parametrize("impl", ["no_such_module_xyz:f", "json:no_such_function",
                                  "no_such_package_xyz"])
def test_an_unimportable_target_is_one_line_and_exit_3(impl, capsys) -> None:
    assert main(["verify", "--impl", impl, "--op", "trainer.required_multiple"]) == 3
    assert "--impl" in _one_line_error(capsys)


def test_impl_is_imported_from_the_current_folder(theirs, capsys) -> None:
    report = theirs / "report.json"
    code = main(["verify", "--impl", "theirs:multiple", "--op", "trainer.required_multiple",
                 "--max-examples", "3", "--json", str(report)])
    assert code == 0, capsys.readouterr().out
    (checked,) = json.loads(report.read_text())["reports"]  # `batchproof check`'s report
    checks = checked["outcomes"]
    assert {c["check"] for c in checks} == set(
        registry.get("trainer.required_multiple").check_names())
    assert all(c["status"] == "pass" and c["examples"] >= 1 for c in checks)
    equivalence = next(c for c in checks if c["check"] == "equivalence")
    assert equivalence["examples"] <= 3  # --max-examples (the pins run as their own checks)


def test_a_divergence_exits_1_with_a_minimal_case_and_a_replay_line(theirs, capsys) -> None:
    argv = ["verify", "--impl", "theirs:collate", "--op", "rl_batch.build_rl_batch",
            "--check", "equivalence", "--profile", "ci"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "@reproduce_failure" not in out and "decorator" not in out, out
    (minimal,) = [line for line in out.splitlines() if line.startswith("minimal case: ")]
    assert "pad_token_id=49" in minimal and minimal.startswith("minimal case: build_rl_batch(")
    (replay,) = [line for line in out.splitlines() if line.startswith("replay: ")]
    words = shlex.split(replay.removeprefix("replay: "))
    # one path: verify --impl module:function is checked, and replayed, as `batchproof check`
    assert words[:2] == ["batchproof", "check"] and "--reproduce" in words, replay
    # the replay line runs that one failure again, as it says
    assert main(words[1:] + ["--json", str(theirs / "replay.json")]) == 1
    ((check,),) = [r["outcomes"] for r in
                   json.loads((theirs / "replay.json").read_text())["reports"]]
    assert check["status"] == "new" and check["minimal"] == minimal.removeprefix(
        "minimal case: ")
    # once fixed, the same replay passes and says so; a blob that is not one is a usage error
    fixed = [("theirs:multiple" if w == "theirs:collate" else w) for w in words[1:]]
    fixed[fixed.index("theirs:multiple")] = "batchproof.reference.rl_batch:build_rl_batch"
    capsys.readouterr()
    assert main(fixed) == 0
    assert "the replayed failure no longer reproduces" in capsys.readouterr().out
    blob = fixed.index("--reproduce") + 1
    assert main(fixed[:blob] + ["not-a-blob"]) == 2
    assert "not a failure's blob" in _one_line_error(capsys)


def test_long_report_lines_are_not_hard_wrapped(theirs, capsys) -> None:
    """A terminal-width wrap would break the minimal case and file paths in two."""
    assert main(["verify", "--impl", "theirs:shifted", "--op", "rl_batch.build_rl_batch",
                 "--check", "pin:two_segment_width_inflation"]) == 1
    lines = capsys.readouterr().out.splitlines()
    minimal = next(line for line in lines if line.startswith("minimal case: "))
    assert minimal.endswith(")") and len(minimal) > 80
    why = next(line for line in lines if line.startswith("Mismatch: pin "))
    assert why.endswith("(SkyRL #1285)):") and len(why) > 140, why


def test_a_failure_of_batchproof_itself_exits_3(monkeypatch, capsys) -> None:
    """The oracle rejecting an input its strategy calls valid is a registry error, not a
    divergence of the candidate."""
    info = registry.get("trainer.required_multiple")
    monkeypatch.setattr(info, "valid", st.just(Case((0,))))
    assert main(["verify", "--op", "trainer.required_multiple", "--check", "equivalence"]) == 3
    out = capsys.readouterr().out
    assert "ERROR" in out and "registry error: the reference" in out


def test_a_record_whose_optional_module_is_missing_is_not_run(monkeypatch, capsys) -> None:
    info = registry.get("trainer.required_multiple")
    monkeypatch.setattr(info, "requires", ("no_such_module_xyz",))
    assert main(["verify", "--op", "trainer", "--check", "equivalence"]) == 0
    out = capsys.readouterr().out
    assert "not run: trainer.required_multiple needs no_such_module_xyz" in out
    assert "1 record(s) not run" in out
    assert main(["verify", "--op", "trainer.required_multiple"]) == 3
    assert "needs no_such_module_xyz" in _one_line_error(capsys)


def test_check_exit_codes(theirs, capsys) -> None:
    base = ["check", "--impl", "theirs:collate", "--op", "rl_batch.build_rl_batch",
            "--profile", "ci"]
    assert main([*base, "--check", "pin:scalar_reward_on_last_token"]) == 0
    assert main([*base, "--check", "equivalence"]) == 1
    out = capsys.readouterr().out
    assert "replay: batchproof check --impl theirs:collate --op rl_batch.build_rl_batch" in out


def test_list_names_every_record_adapter_and_profile(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("rl_batch.build_rl_batch", "varlen.response_logprobs", "skyrl.rl_batch",
                 "mutation", "pin:two_segment_width_inflation"):
        assert name in out, name


def test_mutmut_outside_a_clone_refuses_in_one_line(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setattr(mutmut_driver, "REPO", tmp_path)
    assert main(["mutate", "--mutmut"]) == 3
    assert "clone of the batchproof repository" in _one_line_error(capsys)


def test_verify_and_check_share_one_exit_policy(theirs, monkeypatch, capsys) -> None:
    """A check that ran no example, with nothing set aside, is batchproof's failure through
    both doors (exit 3), and so is an error; a divergence is 1 (issue 31: one exit policy)."""
    from batchproof.adapters import runner

    def ran_nothing(*args, **kwargs) -> None:
        return None

    monkeypatch.setattr("batchproof.checks.run_check", ran_nothing)  # verify's lazy import
    monkeypatch.setattr(runner, "run_check", ran_nothing)
    for command in ("verify", "check"):
        assert main([command, "--impl", "theirs:multiple", "--op", "trainer.required_multiple",
                     "--check", "equivalence"]) == 3, command
        assert "no example" in capsys.readouterr().out, command


@pytest.mark.parametrize(("statuses", "ours", "diverged", "expected"), [
    ([], False, False, 3),  # nothing ran
    ([Verdict.PASS, Verdict.ERROR, Verdict.FAIL], False, False, 3),
    ([Outcome.PASS, Outcome.NOT_RUN], False, False, 3),
    ([Outcome.PASS, Outcome.NEW, Outcome.ERROR], False, False, 3),
    ([Outcome.PASS], True, False, 3),  # an adapter that does not fit
    ([Verdict.PASS, Verdict.FAIL], False, False, 1),
    ([Outcome.PASS, Outcome.NEW, Outcome.NOT_TESTED], False, False, 1),
    ([Outcome.PASS, Outcome.KNOWN], False, True, 1),  # a known divergence diverged otherwise
    ([Outcome.PASS, Outcome.KNOWN, Outcome.SKIPPED, Outcome.NOT_TESTED], False, False, 0),
    ([Verdict.PASS], False, False, 0),
])
def test_exit_status_policy(statuses, ours, diverged, expected) -> None:
    assert exit_status(statuses, ours=ours, diverged=diverged) == expected


@pytest.mark.gpu
def test_one_function_is_checked_on_cuda_through_both_doors(tmp_path) -> None:
    """`--device cuda` makes the checked inputs on the GPU in `check`, and so in `verify --impl
    module:function`, which is checked the same way: the built-in function passes."""
    for command in ("verify", "check"):
        report = tmp_path / f"{command}.json"
        assert main([command, "--impl", "batchproof.impl.rl_batch:build_rl_batch", "--op",
                     "rl_batch.build_rl_batch", "--device", "cuda", "--max-examples", "5",
                     "--json", str(report)]) == 0, command
        (checked,) = json.loads(report.read_text())["reports"]
        assert all(o["status"] == "pass" for o in checked["outcomes"]), command

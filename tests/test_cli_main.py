"""`batchproof.cli.main`, the door every command goes through: which module and function each
command runs, the plain int it returns, and how a command's end becomes one line on stderr and
an exit status (a usage mistake 2, an unimportable target 3, batchproof's own failure 3 unless
BATCHPROOF_DEBUG asks for the traceback, Ctrl-C 130). These tests are the killers of
`batchproof mutate --mutmut --harness cli/__init__`; each command runs a stand-in here, so
they take milliseconds."""

from __future__ import annotations

import importlib
import logging

import pytest

from batchproof import cli
from batchproof.cli import COMMANDS, TargetError, UsageError, main
from batchproof.cli import fuzz as fuzz_cli
from batchproof.statuses import ExitStatus


def _stand_in(monkeypatch, command: str, result=None, raises: BaseException | None = None):
    """Replace the function `command` runs; the namespaces it is called with are recorded."""
    module, function = COMMANDS[command]
    calls = []

    def run(args):
        calls.append(args)
        if raises is not None:
            raise raises
        return result

    monkeypatch.setattr(importlib.import_module(f"batchproof.cli.{module}"), function, run)
    return calls


@pytest.mark.parametrize(("argv", "module", "function"), [
    (["verify"], "verify", "verify"),
    (["check", "--impl", "verl"], "check", "check"),
    (["show", "--op", "trainer"], "listing", "show"),
    (["list", "ops"], "listing", "list_things"),
    (["mutate", "--zoo"], "mutation", "mutate"),
    (["bench", "--quick"], "bench", "bench"),
    (["fuzz", "-n", "1"], "fuzz", "fuzz"),
])
def test_each_command_runs_its_modules_function(argv, module, function, monkeypatch,
                                                capsys) -> None:
    ran = []
    for other_module, other_function in COMMANDS.values():
        monkeypatch.setattr(importlib.import_module(f"batchproof.cli.{other_module}"),
                            other_function,
                            lambda args, name=f"{other_module}.{other_function}": ran.append(
                                (name, args)) or 0)
    assert main(argv) == 0
    ((name, args),) = ran
    assert name == f"{module}.{function}"
    assert args.command == argv[0]
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("result", [ExitStatus.DIVERGENCE, True, 1.0])
def test_what_a_command_returns_is_a_plain_int(result, monkeypatch) -> None:
    _stand_in(monkeypatch, "verify", result=result)
    code = main(["verify"])
    assert code == 1 and type(code) is int


def test_the_command_gets_the_parsed_options(monkeypatch) -> None:
    calls = _stand_in(monkeypatch, "verify", result=0)
    assert main(["verify", "--op", "trainer", "--op", "sft", "--max-examples", "3"]) == 0
    (args,) = calls
    assert (args.op, args.max_examples, args.impl) == (["trainer", "sft"], 3, "impl")


@pytest.mark.parametrize(("error", "code"), [(UsageError("--op: no such op 'x'"), 2),
                                             (TargetError("--impl m:f: no module named 'm'"), 3)])
def test_a_usage_or_target_error_is_one_line_on_stderr(error, code, monkeypatch, capsys) -> None:
    _stand_in(monkeypatch, "verify", raises=error)
    assert main(["verify"]) == code
    assert capsys.readouterr() == ("", f"batchproof: error: {error}\n")


def test_a_usage_mistake_of_the_parser_is_exit_2(capsys) -> None:
    assert main(["verify", "--no-such-option"]) == 2
    assert capsys.readouterr() == ("", "batchproof: error: unrecognized arguments: "
                                       "--no-such-option (see `batchproof --help`)\n")


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys) -> None:
    _stand_in(monkeypatch, "list", raises=KeyboardInterrupt())
    assert main(["list"]) == 130
    assert capsys.readouterr() == ("", "batchproof: interrupted\n")


def test_batchproofs_own_failure_is_one_line_and_exit_3(monkeypatch, capsys) -> None:
    monkeypatch.delenv("BATCHPROOF_DEBUG", raising=False)
    _stand_in(monkeypatch, "bench", raises=ZeroDivisionError("division by zero"))
    assert main(["bench"]) == 3
    assert capsys.readouterr() == ("", "batchproof: internal error: ZeroDivisionError: "
                                       "division by zero (set BATCHPROOF_DEBUG=1 for the "
                                       "traceback)\n")


def test_batchproof_debug_raises_its_own_failure(monkeypatch, capsys) -> None:
    monkeypatch.setenv("BATCHPROOF_DEBUG", "1")
    failure = ZeroDivisionError("division by zero")
    _stand_in(monkeypatch, "bench", raises=failure)
    with pytest.raises(ZeroDivisionError) as raised:
        main(["bench"])
    assert raised.value is failure
    assert capsys.readouterr() == ("", "")
    # a usage mistake is still one line: only batchproof's own failures are raised
    _stand_in(monkeypatch, "bench", raises=UsageError("--op: no"))
    assert main(["bench"]) == 2
    assert capsys.readouterr().err == "batchproof: error: --op: no\n"


def test_the_ops_logged_warnings_are_not_shown(monkeypatch, capsys) -> None:
    """Without a handler of its own, logging would print a library's warning on stderr (its
    last resort); the checks check warnings, they do not show them."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # as in a fresh process (pytest adds its own)
    fx = logging.getLogger("torch.fx._symbolic_trace")
    monkeypatch.setattr(fx, "level", logging.NOTSET)

    def warns(args) -> int:
        logging.getLogger("some.library").warning("a warning nobody asked to see")
        return 0

    monkeypatch.setattr(importlib.import_module("batchproof.cli.listing"), "list_things", warns)
    assert main(["list"]) == 0
    assert capsys.readouterr() == ("", "")
    assert [type(h) for h in root.handlers] == [logging.NullHandler]
    assert fx.level == logging.ERROR  # tensordict's one-time torch.fx deprecation warning


def test_fuzz_helpers_are_those_of_the_fuzz_command() -> None:
    assert cli.fuzz_module() == fuzz_cli.fuzz_module()
    assert cli.fuzz_pytest_args("dev") == fuzz_cli.fuzz_pytest_args("dev")
    tests = ["fuzz_targets.py::test_a"]
    assert cli.fuzz_pytest_args("nightly", tests) == fuzz_cli.fuzz_pytest_args("nightly", tests)
    assert cli.fuzz_pytest_args("nightly", tests)[-2:] == ["--hypothesis-profile=nightly",
                                                           *tests]

"""`batchproof.cli.parser`: the command line's options as a user meets them. Every option of
every command — its names, what it takes, its default, its choices, its help — is compared with
`tests/cli_options.md`, the options as they were reviewed: an option changed on purpose is a
change of that file in the same commit (`python tests/test_cli_parser.py` rewrites it); one
changed by accident fails here. Then what the options do that a table cannot show: a mistake is
one line naming the command's `--help`, the version line, the synopsis above the commands, the
shared scope and search options. These tests are the killers of `batchproof mutate --mutmut
--harness cli/parser` (the parser is built in milliseconds)."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed
from pathlib import Path

import pytest

from batchproof import cli
from batchproof.cli import UsageError
from batchproof.cli import parser as cli_parser
from batchproof.cli.common import LISTS
from batchproof.ops import OP_MODULES

SNAPSHOT = Path(__file__).with_name("cli_options.md")
KINDS = {argparse._StoreAction: "value", argparse._StoreTrueAction: "flag",
         argparse._AppendAction: "repeatable", argparse._VersionAction: "version",
         argparse._HelpAction: "help"}


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _option(action: argparse.Action, exclusive: dict[str, str]) -> str:
    takes = "" if action.nargs == 0 else (
        "{" + ",".join(action.choices) + "}" if action.choices is not None
        else action.metavar or action.dest.upper())
    if action.nargs not in (None, 0):
        takes += f" (nargs {action.nargs})"
    kind = KINDS[type(action)] + (f", {action.type.__name__}" if action.type else "") + (
        ", required" if action.required else "") + (
        f", one of {exclusive[action.dest]}" if action.dest in exclusive else "")
    names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}` (positional)"
    return (f"| {names} | {_cell(takes)} | {kind} | {_cell(action.default)} | "
            f"{_cell(action.help)} |")


def describe(parser: argparse.ArgumentParser) -> str:
    """Every command and option `parser` declares, as Markdown (what tests/cli_options.md holds)."""
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    lines = ["# The command line's options", "",
             "Written by `python tests/test_cli_parser.py` from `batchproof.cli.parser`; "
             "`tests/test_cli_parser.py` fails when the parser declares anything else.", "",
             f"`{parser.prog}` ({type(parser).__name__}, {parser.formatter_class.__name__}); "
             f"commands (`{commands.dest}`, metavar `{commands.metavar}`"
             f"{', required' if commands.required else ''}):", ""]
    lines += [f"- `{c.dest}`: {c.help}" for c in commands._choices_actions]
    for name, sub in [("", parser), *commands.choices.items()]:
        exclusive = {a.dest: " \\| ".join(f"`{b.option_strings[0]}`" for b in g._group_actions)
                     for g in sub._mutually_exclusive_groups for a in g._group_actions}
        lines += ["", f"## `{sub.prog}`" + (f" ({type(sub).__name__}, "
                                            f"{sub.formatter_class.__name__})" if name else ""),
                  "", "| option | takes | kind | default | help |", "|---|---|---|---|---|"]
        lines += [_option(a, exclusive) for a in sub._actions
                  if not isinstance(a, argparse._SubParsersAction)]
    return "\n".join(lines) + "\n"


def test_the_options_are_those_reviewed() -> None:
    described = describe(cli_parser.build_parser())
    assert described == SNAPSHOT.read_text(), (
        "the parser's options differ from tests/cli_options.md: if the change is meant, run "
        "`python tests/test_cli_parser.py` and commit the file with it")


def _error(argv) -> str:
    with pytest.raises(UsageError) as raised:
        cli_parser.build_parser().parse_args(argv)
    return str(raised.value)


def test_a_mistake_is_one_usage_error_naming_the_commands_help() -> None:
    assert _error(["verify", "--device", "tpu"]) == (
        "argument --device: invalid choice: 'tpu' (choose from 'cpu', 'cuda') "
        "(see `batchproof verify --help`)")
    assert _error(["verify", "--nope"]) == (
        "unrecognized arguments: --nope (see `batchproof --help`)")
    assert _error([]) == "the following arguments are required: COMMAND (see `batchproof --help`)"
    assert _error(["mutate", "--zoo", "--mutmut"]) == (
        "argument --mutmut: not allowed with argument --zoo (see `batchproof mutate --help`)")
    assert _error(["show"]) == (
        "the following arguments are required: --op (see `batchproof show --help`)")
    assert _error(["bench", "--batch", "many"]) == (
        "argument --batch: invalid int value: 'many' (see `batchproof bench --help`)")


def test_the_version_line_names_batchproof_python_and_each_dependency(monkeypatch,
                                                                      capsys) -> None:
    """Each distribution's own version, or `not installed` (names are looked up as
    importlib.metadata does: case-insensitively)."""
    versions = {"batchproof": "1.2.3", "torch": "2.13.0", "hypothesis": "6.1", "tensordict":
                "0.9", "numba": "0.60", "transformers": "4.5"}

    def version(name: str) -> str:
        if name.lower() not in versions:
            raise PackageNotFoundError(name)
        return versions[name.lower()]

    monkeypatch.setattr(cli_parser, "version", version)
    with pytest.raises(SystemExit) as exit_:
        cli_parser.build_parser().parse_args(["--version"])
    assert exit_.value.code == 0
    python = ".".join(map(str, sys.version_info[:3]))
    assert capsys.readouterr().out == (
        f"batchproof 1.2.3 (Python {python}; torch 2.13.0, hypothesis 6.1, tensordict 0.9; "
        "extras: kernels: numba 0.60, models: transformers 4.5, mutation: mutmut not "
        "installed)\n")
    versions["mutmut"] = "3.8"
    assert cli_parser.version_text().endswith("numba 0.60, models: transformers 4.5, mutation: "
                                              "mutmut 3.8)")
    monkeypatch.setattr(cli_parser, "version", installed)  # the real look-up, as installed
    assert cli_parser.version_text().startswith(f"batchproof {installed('batchproof')} ")


def test_the_help_opens_with_the_synopsis_and_the_exit_statuses(capsys) -> None:
    with pytest.raises(SystemExit):
        cli_parser.build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    synopsis = cli.__doc__.partition("\nThe package:")[0].rstrip()
    assert synopsis.startswith("The `batchproof` command line")
    assert "Exit status: 0 every check passed" in synopsis
    # as written: the synopsis' lines keep their indentation (not re-wrapped)
    assert out.startswith("usage: batchproof [-h] [--version] COMMAND ...\n\n" + synopsis +
                          "\n\npositional arguments:\n")
    assert "The package:" not in out


def test_every_command_main_runs_is_parsed_and_has_help() -> None:
    parser = cli_parser.build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(commands.choices) == set(cli.COMMANDS)
    assert all(c.help for c in commands._choices_actions)


def test_the_scope_and_search_options_are_the_same_where_shared() -> None:
    """`check` and `mutate --impl` scope a check alike; `verify` and `check` search alike."""
    commands = next(a for a in cli_parser.build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction)).choices

    def options(command: str, names: tuple[str, ...]) -> list[str]:
        return [_option(a, {}) for a in commands[command]._actions
                if set(a.option_strings) & set(names)]

    scope = ("--skip", "--forms", "--not-provided", "--output-name", "--layout",
             "--adapter-file")
    search = ("--profile", "--max-examples", "--seed", "--reproduce")
    assert len(options("check", scope)) == len(scope)
    assert options("check", scope) == options("mutate", scope)
    assert len(options("verify", search)) == len(search)
    assert options("verify", search) == options("check", search)


def test_the_shared_help_names_every_op_and_list() -> None:
    assert cli_parser.OP_HELP.startswith(f"an op ({', '.join(OP_MODULES)}) or one of")
    commands = next(a for a in cli_parser.build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction)).choices
    (what,) = [a for a in commands["list"]._actions if a.dest == "what"]
    assert tuple(what.choices) == LISTS


if __name__ == "__main__":
    SNAPSHOT.write_text(describe(cli_parser.build_parser()))
    print(f"wrote {SNAPSHOT}")

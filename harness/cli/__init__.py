"""The `batchproof` command line (`harness` is the same program under its old name).

    batchproof verify [--op NAME ...] [--check NAME ...] [--profile dev|ci|nightly|mutation]
                      [--impl impl|reference|PACKAGE|module:function] [--device cpu|cuda]
                      [--max-examples N] [--seed N] [--reproduce BLOB] [--json FILE]
    batchproof check --impl skyrl|verl|module:function [--op NAME] [--adapter NAME]
                     [--check NAME ...] [--profile P] [--max-examples N] [--seed N]
                     [--device cpu|cuda] [--reproduce BLOB] [--json FILE]
    batchproof show --op NAME
    batchproof list [ops|records|checks|adapters|profiles|placements|regimes]
    batchproof mutate --zoo [--op NAME ...] [--seeds N] [--search-only] [--jobs N]
                      [--without CHECK ...] [--json FILE]
    batchproof mutate --mutmut [--op NAME ... | --harness MODULE ...] [--since GIT_REV] [--jobs N]
                      (in a clone of the repository)
    batchproof mutate --impl MODULE:FUNCTION --op RECORD   (mutmut over your function's module)
    batchproof bench [--op NAME ...] [--device cpu|cuda] [--quick] [--json FILE]
    batchproof fuzz [--op NAME ...] [--check NAME ...] [-n WORKERS] [--profile nightly|dev]
                    [--dashboard | --dashboard-only] [--port N]   (HypoFuzz: docs/fuzzing.md)

Exit status: 0 every check passed (mutate: every planted bug or mutant was killed); 1 a divergence
was found (mutate: one survived); 2 a usage error; 3 the target could not be imported, or
batchproof itself failed (a registry error, a check that could not run an example).

The package: `parser` (the sub-parsers; the scope and search options declared once), one module
per command (`verify`, `check`, `mutation`, `bench`, `fuzz`, `listing`: list and show), and
`common` (`UsageError`/`TargetError`, the exit statuses re-exported from `statuses`, what the
commands share). A command's module
is imported only when it runs, so `batchproof --version` and a usage error stay fast.

The top floor (docs/harness.md, "The house, by floor"): imports anything below it; nothing
imports it but `batchproof.__main__` and the console scripts.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

from batchproof.cli.common import (
    DIVERGENCE,
    HARNESS,
    OK,
    PROG,
    USAGE,
    ExitStatus,
    TargetError,
    UsageError,
)
from batchproof.shared_database import SharedDatabaseUnreachable

# command -> (module of batchproof.cli, function)
COMMANDS = {"verify": ("verify", "verify"), "check": ("check", "check"),
            "show": ("listing", "show"), "list": ("listing", "list_things"),
            "mutate": ("mutation", "mutate"), "bench": ("bench", "bench"),
            "fuzz": ("fuzz", "fuzz")}

__all__ = ["DIVERGENCE", "HARNESS", "OK", "USAGE", "ExitStatus", "TargetError", "UsageError",
           "fuzz_module", "fuzz_pytest_args", "main"]


def main(argv: list[str] | None = None) -> int:
    from batchproof.cli.parser import build_parser

    logging.getLogger().addHandler(logging.NullHandler())  # ops' warnings are checked, not shown
    # tensordict calls torch.fx.is_fx_tracing(), which logs a one-time deprecation warning
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)
    try:
        args = build_parser().parse_args(argv)
        module, function = COMMANDS[args.command]
        command = getattr(importlib.import_module(f"batchproof.cli.{module}"), function)
        return int(command(args))
    except UsageError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return USAGE
    except (TargetError, SharedDatabaseUnreachable) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return HARNESS
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - batchproof's own failure: one line, exit 3
        if os.environ.get("BATCHPROOF_DEBUG"):
            raise
        print(f"{PROG}: internal error: {type(err).__name__}: {err} (set BATCHPROOF_DEBUG=1 "
              "for the traceback)", file=sys.stderr)
        return HARNESS


def fuzz_module():
    """The path of `batchproof.fuzz_targets`' file (see `batchproof.cli.fuzz`)."""
    from batchproof.cli.fuzz import fuzz_module as path

    return path()


def fuzz_pytest_args(profile, tests=None):
    """pytest's arguments for HypoFuzz's collection (see `batchproof.cli.fuzz`)."""
    from batchproof.cli.fuzz import fuzz_pytest_args as args

    return args(profile, tests)


if __name__ == "__main__":
    sys.exit(main())

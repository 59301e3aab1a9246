"""The command line's parser: one sub-parser per command; the options that scope a check and
the options of a search are declared once and shared (`check`, `mutate --impl`)."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version

from batchproof.cli.common import (
    LISTS,
    PROG,
    UsageError,
)
from batchproof.ops import OP_MODULES


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (`UsageError`), not the usage text and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `{self.prog} --help`)")

def version_text() -> str:
    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return (f"{PROG} {of('batchproof')} (Python {sys.version.split()[0]}; torch {of('torch')}, "
            f"hypothesis {of('hypothesis')}, tensordict {of('tensordict')}; extras: "
            f"kernels: numba {of('numba')}, models: transformers {of('transformers')}, "
            f"mutation: mutmut {of('mutmut')})")

OP_HELP = (f"an op ({', '.join(OP_MODULES)}) or one of its records, op.function "
           "(`batchproof list records`); repeatable")

STRICT_HELP = ("exit 1 also when a known divergence of an adapter is not reproduced: its "
               "inputs were matched and the target agreed with the contract every time (the "
               "framework fixed it, or the adapter changed); one no input matched (not met) "
               "never fails. CI should pass it")

def description() -> str:
    """`batchproof --help`'s text above the commands: the synopsis and the exit statuses, as the
    package's docstring states them (less its notes on the code, from "The package:" on).

    The package is read from `sys.modules`, not imported: Python imports a package before any of
    its modules, so it is there, and the package importing this module stays the one way round.
    """
    cli = sys.modules[__package__]
    return cli.__doc__.partition("\nThe package:")[0]

def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description=description(),
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("verify", help="run every check of every op on an implementation")
    p.add_argument("--op", action="append", metavar="NAME", help=OP_HELP)
    p.add_argument("--check", action="append", metavar="NAME",
                   help="run only this check (equivalence, errors, property:NAME, pin:NAME; "
                        "`batchproof list checks`); repeatable")
    _search_options(p)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--placement", default="all",
                   choices=["all", "kernel", "cpu", "generic", "triton"],
                   help="which of impl/'s code paths to check on the CPU (default all: the "
                        "compiled kernels, the CPU fast paths, the device-generic code CUDA "
                        "runs, and its Triton kernels under Triton's interpreter when triton is "
                        "installed; each against the reference; `batchproof list placements`)")
    p.add_argument("--coverage", action="store_true",
                   help="measure branch coverage of impl/ and reference/ over the run "
                        "(coverage.py; needs batchproof[coverage]; docs/coverage.md)")
    p.add_argument("--impl", default="impl", help="impl (default: batchproof's own), reference, "
                   "a package mirroring impl/ (PACKAGE.rl_batch.build_rl_batch, ...), or "
                   "module:function with --op naming one record; the current folder is "
                   "importable")
    p.add_argument("--strict", action="store_true",
                   help="as `check --strict` (with --impl module:function, which is checked "
                        "as `check` checks it); the checks of impl/, a package or a function "
                        "of the contract have no known divergence, so it changes nothing there")
    p.add_argument("--json", metavar="FILE", help="write a JSON report to this file")

    p = sub.add_parser("check", help="fuzz a third-party implementation through an adapter")
    p.add_argument("--impl", help="a framework (`batchproof list adapters`) or "
                   "module:function (the current folder is importable); optional with "
                   "--adapter, which names its own function")
    p.add_argument("--op", action="append", metavar="NAME", help=OP_HELP)
    p.add_argument("--adapter", help="adapter name (`batchproof list adapters`), also for a "
                   "module:function target that it maps")
    p.add_argument("--check", action="append", metavar="NAME",
                   help="run only this check; repeatable")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="make the checked inputs on this device (default cpu)")
    p.add_argument("--liveness", action="store_true",
                   help="instead of the checks: corrupt the framework's own return value, "
                        "leaf by leaf, and show that every output field the adapter compares "
                        "can fail (exit 3 naming a field that cannot; docs/frameworks.md, "
                        "'Liveness')")
    _scope_options(p)
    _search_options(p)
    p.add_argument("--strict", action="store_true", help=STRICT_HELP)
    p.add_argument("--json", metavar="FILE")

    p = sub.add_parser("show", help="draw the layout of a small example")
    p.add_argument("--op", action="append", required=True, metavar="NAME", help=OP_HELP)

    p = sub.add_parser("list", help="ops, records, checks, adapters, profiles, placements, "
                                    "regimes")
    p.add_argument("what", nargs="?", choices=LISTS)

    p = sub.add_parser("mutate", help="mutation testing: bug zoo, mutmut over impl/, or mutmut "
                                      "over your function's module (--impl)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--zoo", action="store_true", help="run the bug zoo's kill matrix")
    mode.add_argument("--mutmut", action="store_true",
                      help="run mutmut 3 over impl/ (in a clone of the repository)")
    p.add_argument("--impl", metavar="MODULE:FUNCTION",
                   help="run mutmut over the module holding your function, with batchproof's "
                        "checks of --op RECORD as the tests; lists the surviving mutants")
    p.add_argument("--adapter", help="--impl: an adapter mapping your function")
    _scope_options(p)
    p.add_argument("--check", action="append", metavar="NAME",
                   help="--impl: the checks that kill mutants (default: all)")
    p.add_argument("--max-examples", type=int, default=20, metavar="N",
                   help="--impl: examples per check for each mutant (default 20)")
    p.add_argument("--op", action="append", metavar="NAME", help=OP_HELP)
    p.add_argument("--profile", default="mutation")
    p.add_argument("--seeds", type=int, metavar="N",
                   help="--zoo: run each entry under seeds 0..N-1 of the dev profile and report "
                        "the fraction of runs that kill it (target: 0.95)")
    p.add_argument("--jobs", type=int,
                   help="worker processes (--zoo: default every core; --mutmut and --impl: "
                        "mutmut's forked workers, default 2)")
    p.add_argument("--without", action="append", default=[],
                   help="disable a check (record/check), to see what it alone kills")
    p.add_argument("--search-only", action="store_true",
                   help="--zoo: without the pins (pin: checks and the @examples of each search): "
                        "what the random search alone kills, as on a bug no pin was written for")
    p.add_argument("--since", help="mutmut: only functions changed since this git revision")
    p.add_argument("--harness", action="append", default=[], metavar="MODULE",
                   help="mutmut: mutate this harness module (compare, checks, cli/verify, ...: "
                        "the keys of HARNESS_KILLERS in harness/mutation/mutmut_driver.py; an "
                        "unknown one lists them) instead of impl/, its own tests as the "
                        "killers; repeatable")
    p.add_argument("--markdown", help="also write the result as Markdown (zoo: the kill matrix; "
                                      "mutmut: the score per file and every equivalent with its "
                                      "reason)")
    p.add_argument("--min-mutants", type=int, default=20,
                   help="mutmut: fail if fewer mutants are generated (misconfiguration guard)")
    p.add_argument("--json")

    p = sub.add_parser("bench", help="reference vs impl vs the floor, as ratios in one run")
    p.add_argument("--op", action="append", metavar="NAME", help=OP_HELP)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--json")
    p.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    p.add_argument("--scale", default="default", choices=["default", "h100"],
                   help="h100: trainer scale from jagged device tensors (B = 8192, prompts up to "
                        "2048, responses up to 14336 tokens; rl_batch and varlen), impl vs its "
                        "torch path vs the write floor (docs/performance.md)")
    p.add_argument("--pages", default="system", choices=["warm", "system"],
                   help="system (default): the C library's allocator as a user's process has "
                        "it; warm: glibc told to keep freed memory in each measuring process "
                        "(to compare with: no user's process does this)")
    p.add_argument("--processes", type=int, metavar="N",
                   help="time each workload in N fresh processes and report the median of "
                        "their medians and their spread (default 5 on the CPU; 1 with --quick, "
                        "--device cuda or --scale h100: in this process)")
    p.add_argument("--batch", type=int, action="append", metavar="B",
                   help="the batch size of the default-scale workloads (repeatable; default "
                        "each workload's own, 1024 for rl_batch)")
    p.add_argument("--per-core", action="store_true",
                   help="every variant but the reference, and the framework peers installed "
                        "here that return the impl's output, quiet and beside a spinning "
                        "process on every other core, with torch's threads and with one "
                        "(docs/performance.md)")
    p.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                   help="wall (default): elapsed time; cpu: the measuring process's CPU time "
                        "(every thread's user and system time: what a call costs the cores, "
                        "steadier on a shared machine)")
    p.add_argument("--condition", action="append", choices=["quiet", "quiet-1", "busy", "busy-1"],
                   help="--per-core: only this condition (quiet or busy host; -1: one "
                        "thread); repeatable; default all four")
    p = sub.add_parser("fuzz", help="HypoFuzz over every searched check, on every core, until "
                                    "stopped (needs batchproof[fuzz])")
    p.add_argument("--op", action="append", metavar="NAME", help=OP_HELP)
    p.add_argument("--check", action="append", metavar="NAME",
                   help="fuzz only this check (equivalence, errors, property:NAME); repeatable")
    p.add_argument("-n", "--workers", type=int, metavar="N",
                   help="fuzzing processes (default: every core)")
    p.add_argument("--profile", help="Hypothesis profile whose database is used: "
                   "nightly (default) or dev")
    p.add_argument("--dashboard", action="store_true",
                   help="serve HypoFuzz's live dashboard on localhost")
    p.add_argument("--dashboard-only", action="store_true",
                   help="serve the dashboard of what the database holds (e.g. the nightly "
                        "runs', with BATCHPROOF_SHARED_DATABASE), without fuzzing")
    p.add_argument("--port", type=int, default=9999, help="the dashboard's port (default 9999)")
    return parser

def _scope_options(p: argparse.ArgumentParser) -> None:
    """The options that scope a check to what a function does (`batchproof.adapters.scope`):
    the same for `check` and `mutate --impl`."""
    p.add_argument("--skip", action="append", default=[], metavar="CHECK",
                   help="do not run this check (reported as skipped); `errors` skips every "
                        "bad-input check; repeatable")
    p.add_argument("--forms", action="append", metavar="FORM",
                   help="an input form the function accepts (lists, tensors, jagged, ...: "
                        "`batchproof list records`); repeatable; default: every form")
    p.add_argument("--not-provided", action="append", default=[], metavar="KEY",
                   help="an output the function does not produce (not compared); repeatable")
    p.add_argument("--output-name", action="append", default=[], metavar="THEIRS=CONTRACT",
                   help="an output of the function under another name than the contract's "
                        "(a dict of outputs becomes a TensorDict); repeatable")
    p.add_argument("--layout", help="the only layout the function builds (records with a "
                   "layout argument, e.g. --layout left for rl_batch.build_rl_batch)")
    p.add_argument("--adapter-file", action="append", default=[], metavar="PATH.py",
                   help="a Python file that registers adapters (batchproof.register_adapter); "
                        "then --adapter NAME or --impl FRAMEWORK picks one; repeatable")

def _search_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", help="Hypothesis profile: dev, ci, nightly, "
                   "mutation (default: ci if $CI is set, else dev)")
    p.add_argument("--max-examples", type=int, metavar="N",
                   help="examples per check (default: the profile's)")
    p.add_argument("--seed", type=int, metavar="N", help="seed Hypothesis' random search")
    p.add_argument("--reproduce", metavar="BLOB",
                   help="replay one failure: the blob a failure report's replay line gives")

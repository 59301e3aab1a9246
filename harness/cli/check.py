"""`batchproof check`: a framework's function (or yours) through an adapter.

    scope (one value: `batchproof.adapters.scope.Scope.from_args`)
      -> the adapters `--impl/--op/--adapter` select, each narrowed to it
      -> `runner.run_adapter` for each (one adapter's failure is reported, the others run)
      -> the report, its replay lines, the summary, the scope hint; `--json`

Exit status (`batchproof.statuses.exit_status`, the policy `verify` shares, over every check of
every adapter selected, whatever their order): 0 no new divergence, 1 a new one (or a known one
that diverged otherwise), 2 a usage error, 3 the target could not be imported, an adapter does
not fit the installed framework, or a check could not be carried out (batchproof's own failure;
it wins over 1).

`--strict` (what the framework matrix runs): a known divergence *not reproduced* — its inputs
were matched and the target agreed with the contract on every one (the framework fixed it, or
the adapter changed) — is exit status 1 too, as news about the target. Without it, it is counted
in the summary line and named below it, and the exit status is that of a clean run. A known
divergence *not met* (no input matched it) never fails a run, strict or not: it was not tested,
and the report says so. The JSON report holds `strict` and the summary's counts (`summary`:
new, errors, not_tested, known, not_reproduced, targets).

`--liveness` runs, instead of the checks, `batchproof.adapters.liveness` on the selected adapters:
whether every output each one compares can fail (exit 0, or 3 naming a field that cannot).

`batchproof verify --impl module:function` comes here too: one function of a record's contract
is checked the same way through either door (the identity adapter, the same report, replay line
and exit status).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from batchproof.cli.common import (
    HARNESS,
    UsageError,
    _load_profile,
    _need_cuda,
    _one_thread_unless_asked,
    import_target,
    reproduce_of,
    run_settings,
)


def check(args: argparse.Namespace) -> int:
    from batchproof import registry
    from batchproof.adapters import FrameworkMissing, load_adapter_file
    from batchproof.adapters.runner import (
        console,
        exit_code,
        print_report,
        print_summary,
        replayer,
        run_adapter,
        scope_hint,
        select_adapters,
        summary_counts,
    )
    from batchproof.adapters.scope import Scope

    device = getattr(args, "device", "cpu")
    if device == "cuda":
        _need_cuda()
    profile = _load_profile(args.profile)
    _one_thread_unless_asked()  # as verify: tiny tensors (and tiny models) only contend
    if args.max_examples is not None and args.max_examples < 1:
        raise UsageError(f"--max-examples must be at least 1, got {args.max_examples}")
    if args.reproduce and not args.check:
        raise UsageError("--reproduce replays one failure: give its --op and --check too")
    try:
        scope = Scope.from_args(args)
        for path in scope.adapter_files:
            load_adapter_file(path)
        selected = select_adapters(args.impl, args.op, args.adapter)
        scope.validate(a.record for a in selected)
        adapters = [scope.narrow(a) for a in selected
                    if scope.checks is None
                    or set(scope.checks) & set(registry.get(a.record).check_names())]
    except ValueError as err:
        raise UsageError(str(err)) from None
    except FrameworkMissing as err:
        print(f"batchproof: error: {err}", file=sys.stderr)
        return HARNESS
    reproduce = reproduce_of(args.reproduce)
    custom = args.impl is not None and ":" in args.impl
    if custom and not args.adapter:
        import_target(args.impl)  # one line and exit 3 when it cannot be imported
    if getattr(args, "liveness", False):
        return _liveness(adapters, args)
    reports = []
    for chosen in adapters:
        report = run_adapter(chosen, scope, seed=args.seed, reproduce=reproduce,
                             base_settings=run_settings(args.max_examples), device=device)
        reports.append(report)
        print_report(report, profile, replay=replayer(
            args.impl, chosen, adapter=args.adapter or (None if custom else chosen.name),
            profile=args.profile, device=device))
    strict = getattr(args, "strict", False)
    code = exit_code(reports, strict=strict)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"profile": profile, "impl": args.impl, "exit_status": code,
                       "strict": strict, "summary": summary_counts(reports),
                       "reports": [asdict(r) for r in reports]}, handle, indent=2)
        console.print(f"report written to {args.json}", markup=False, highlight=False)
    print_summary(reports, strict=strict)
    hint = scope_hint(reports, args.impl, adapter=args.adapter, profile=args.profile)
    if hint:
        console.print(hint, markup=False, highlight=False, soft_wrap=True)
    return code


def _liveness(adapters: list, args: argparse.Namespace) -> int:
    """`--liveness`: can every output field each adapter compares fail
    (`batchproof.adapters.liveness`)? Exit 0 when all can, 3 otherwise."""
    from batchproof.adapters.liveness import CONFIRM_EXAMPLES, run_liveness

    if args.check or args.reproduce or args.json:
        raise UsageError("--liveness runs its own equivalence checks: give no --check, "
                         "--reproduce or --json with it")
    return run_liveness(adapters, confirm_examples=args.max_examples or CONFIRM_EXAMPLES)

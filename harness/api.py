"""`batchproof.check`: batchproof's checks of one contract, run on your function from your test.

    import batchproof

    def test_my_collate_follows_the_rl_batch_contract():
        batchproof.check(my_collate, "rl_batch.build_rl_batch", forms=["lists"])

It runs what `batchproof check --impl mymodule:my_collate --op rl_batch.build_rl_batch` runs, and
fails with the same report (`CheckFailed`, an `AssertionError`, so pytest shows it as a failed
assertion). Hypothesis runs under your settings (your loaded profile), with the deadline off;
nothing global is changed.
"""

from __future__ import annotations

import dataclasses
import io
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hypothesis import settings as Settings
from rich.console import Console

from batchproof.adapters import Adapter, all_adapters, get_adapter, identity_adapter, origin
from batchproof.adapters.runner import (
    AdapterReport,
    CheckOutcome,
    check_adapter,
    print_report,
    replayer,
    scope_hint,
)
from batchproof.adapters.scope import Scope
from batchproof.report import check_blob
from batchproof.statuses import Outcome

CheckReport = AdapterReport
"""What `check` returns: `.outcomes` (one `CheckOutcome` per check: `.check`, `.status` —
pass, new, known, skipped, not tested, error —, `.examples` run against your function,
`.seconds`), `.known` (known divergences: matched, diverged, confirmed, status), `.new`,
`.unexplained`, `.errors`, `.untested`, `.not_reproduced` (known divergences matched but never
shown)."""


class CheckFailed(AssertionError):
    """A check found a divergence, or could not be carried out (or, under `strict`, a known
    divergence was not reproduced); `str()` is the whole report and `.report` the
    `CheckReport`."""

    def __init__(self, text: str, report: CheckReport) -> None:
        super().__init__(text)
        self.report = report

    @property
    def failed_checks(self) -> list[str]:
        """The checks that found a new divergence, ran no input, or could not be carried out."""
        return [o.check for o in self.report.outcomes if o.status in (
            Outcome.NEW, Outcome.ERROR, Outcome.NOT_TESTED, Outcome.NOT_RUN)]


def check(
    fn: Callable[..., Any],
    record: str,
    *,
    adapter: Adapter | str | None = None,
    checks: Sequence[str] | None = None,
    skip: Sequence[str] | Mapping[str, str] = (),
    forms: Sequence[str] | None = None,
    not_provided: Sequence[str] = (),
    output_names: Mapping[str, str] | None = None,
    layout: str | None = None,
    max_examples: int | None = None,
    seed: int | None = None,
    reproduce: str | None = None,
    settings: Settings | None = None,
    strict: bool = False,
) -> CheckReport:
    """Run batchproof's checks of `record` on `fn`; raise `CheckFailed` with the report if one
    finds a divergence or cannot run.

    fn: your function. Without `adapter` it must take the contract's arguments and return its
        output (docs/<op>.md); with one, it is your framework's function and the adapter maps it.
    record: the contract, `"op.function"` (`batchproof list records`).
    adapter: an `Adapter`, or the name of a registered one (`batchproof list adapters`).
    checks: run only these (default: every check of the record: equivalence, errors,
        property:NAME, pin:NAME). skip: checks not to run, or {check: why} (reported as
        skipped, with the reason).
    forms: the input forms `fn` accepts (default: every form of the record, e.g. lists,
        tensors, jagged). not_provided: output keys `fn` does not produce (not compared).
    output_names: {fn's output name: the contract's} (a dict of outputs becomes a
        TensorDict). layout: the only layout `fn` builds (records with a `layout` argument).
    max_examples, seed, reproduce: examples per check, a seed for Hypothesis' search, and a
        failure's blob to replay (from a report's replay line).
    settings: Hypothesis settings to start from (default: the currently loaded profile).
    strict: fail also when a known divergence of the adapter is not reproduced (its inputs
        were matched and `fn` agreed with the contract every time: your fork fixed it, or the
        adapter no longer sees it), as `batchproof check --strict` does; a known divergence
        no input matched (not met) never fails.

    Returns the `CheckReport` when every check that ran passed.
    """
    __tracebackhide__ = True  # pytest shows the report, not this function's source
    registry_record(record)
    scope = Scope.of(forms=forms, skip=skip, not_provided=not_provided, layout=layout,
                     output_names=output_names or {}, checks=checks)
    base = _adapter(fn, record, adapter)
    scope.validate([record])
    chosen = scope.narrow(base)
    if max_examples is not None and (not isinstance(max_examples, int) or max_examples < 1):
        raise ValueError(f"max_examples must be a positive int, got {max_examples!r}")
    if settings is not None and not isinstance(settings, Settings):
        raise TypeError(f"settings must be hypothesis.settings, got {type(settings).__name__}")
    import hypothesis

    if reproduce:
        check_blob(reproduce)
    report = check_adapter(
        chosen, chosen.guarded(fn), checks=list(scope.checks) if scope.checks else None,
        max_examples=max_examples, report_multiple_bugs=False, seed=seed,
        reproduce=(hypothesis.__version__, reproduce) if reproduce else None,
        base_settings=settings)
    stale = report.not_reproduced if strict else []
    if report.new or report.unexplained or report.errors or report.untested or stale:
        text = render(report, fn, chosen, replay_scope(base, chosen))
        if stale:
            text += ("\nstrict: known divergence(s) not reproduced (their inputs were matched "
                     "and the function agreed with the contract every time): "
                     + ", ".join(k["name"] for k in stale))
        raise CheckFailed(text, report)
    return report


def registry_record(name: str):
    from batchproof import registry

    info = registry.get(name)
    if info.missing():
        raise ModuleNotFoundError(f"{name} needs {', '.join(info.missing())}")
    return info


def _adapter(fn: Callable[..., Any], record: str, adapter: Adapter | str | None) -> Adapter:
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if isinstance(adapter, str):
        adapter = get_adapter(adapter)
    if adapter is None:
        return identity_adapter(record, _target_of(fn) or getattr(fn, "__qualname__", "fn"))
    if not isinstance(adapter, Adapter):
        raise TypeError(f"adapter must be an Adapter or an adapter's name, got "
                        f"{type(adapter).__name__}")
    if adapter.record != record:
        raise ValueError(f"adapter {adapter.name} is for {adapter.record}, not {record}")
    return adapter


def _target_of(fn: Callable[..., Any]) -> str | None:
    """`module:qualname` when the CLI could import `fn` by that name, else None."""
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in name:
        return None
    return f"{module}:{name}"


def replay_scope(base: Adapter, chosen: Adapter) -> Scope | None:
    """The scope a `batchproof check` command line replays a failure of `chosen` in, in a fresh
    process: `chosen.scope`, with `--adapter-file` for an adapter that a file registers
    (`adapters.origin`); None when no command finds the adapter: it is not the one registered
    under its name (made in the test, or changed: `.without(...)`), or code that no command runs
    registered it."""
    if base.framework == "custom":
        return chosen.scope
    if {a.name: a for a in all_adapters()}.get(base.name) != base:
        return None
    found = origin(base.name)
    if found is None:
        return None
    files = (_as_given(found),) if found else ()
    return dataclasses.replace(chosen.scope, adapter_files=(*files, *chosen.scope.adapter_files))


def _as_given(path: str) -> str:
    """`path` relative to the current folder when it is inside it (a replay line runs there),
    else as it is."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def render(report: CheckReport, fn: Callable[..., Any], adapter: Adapter,
           scope: Scope | None = None) -> str:
    """The report as `batchproof check` prints it, with replay lines for this call (in `scope`,
    `replay_scope`'s: None when no command line can replay it) and the scope hint."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=120, no_color=True, highlight=False,
                      force_terminal=False)
    target = _target_of(fn)
    custom = adapter.framework == "custom"
    if target is not None and scope is not None:
        replay = replayer(target, adapter, adapter=None if custom else adapter.name,
                          scope=scope)
    else:
        def replay(outcome: CheckOutcome) -> str:
            extra = f", reproduce={outcome.blob!r}" if outcome.blob else ""
            return (f"batchproof.check(fn, {adapter.record!r}, <the same options>, "
                    f"checks=[{outcome.check!r}]{extra})")
    print_report(report, "your Hypothesis settings", replay=replay, console=console)
    hint = scope_hint([report], target, adapter=None if custom else adapter.name)
    if hint:
        console.print(hint, markup=False, highlight=False, soft_wrap=True)
    return "\n" + buffer.getvalue().rstrip()

"""The strongest peers `batchproof bench` can time beside the impl: the framework functions it has
adapters for, where the framework is installed here (docs/performance.md, "Per core and on a busy
host").

A peer is an adapter's candidate (the framework's function behind the contract's signature,
`batchproof.adapters`) for the workload's record, given the workload's lists-form call. It is
timed only where it returns the impl's outputs on that call, bit for bit (the fields it provides):
a faster function that computes something else is not a peer. The adapter's own wrapping (a
TensorDict around the framework's tensors) is timed with it: microseconds against milliseconds.

Floor 3 (docs/harness.md): imports the adapters and the core; imported by `perf.bench`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from batchproof.registry import Case


@dataclass(frozen=True)
class Peer:
    """A framework function timed beside the impl, or why it is not."""

    name: str  # "skyrl.rl_batch_0_4 0.4.0 (lists)": the adapter, the framework's version
    run: Callable[[], Any] | None  # None: not timed (see `why`)
    why: str = ""


def peers_for(record: str, case: Case, impl_output: Any) -> list[Peer]:
    """Every installed framework's adapter for `record` that fits its installed version, has
    what it needs, takes the lists form and this call: timed when its output on `case` is the
    impl's (`impl_output`)."""
    from batchproof import adapters
    from batchproof.adapters import FrameworkMissing
    from batchproof.compare import Mismatch, assert_identical

    found = []
    for adapter in adapters.all_adapters():
        version = adapter.version()
        if (adapter.record != record or version in ("-", "not installed")
                or not adapter.fits(version) or adapter.missing_needs()
                or adapter.forms is not None and "lists" not in adapter.forms):
            continue
        name = f"{adapter.name} {version} (lists)"
        try:
            candidate = adapter.candidate()
        except FrameworkMissing as err:
            found.append(Peer(name, None, f"cannot be imported: {err}"))
            continue
        if not adapter.supports(adapter.call_of(case)):
            found.append(Peer(name, None, "this input is outside its adapter's domain"))
            continue
        try:
            output = candidate(*case.args, **case.kwargs)
            expected = impl_output.exclude(*adapter.not_provided) if adapter.not_provided \
                else impl_output
            assert_identical(expected, output.exclude(*adapter.not_provided)
                             if adapter.not_provided else output)
        except (Mismatch, Exception) as err:  # noqa: BLE001 - not a peer on this input
            found.append(Peer(name, None, f"not the impl's output here: {type(err).__name__}: "
                                          f"{str(err).splitlines()[0][:120]}"))
            continue
        found.append(Peer(name, lambda c=candidate: c(*case.args, **case.kwargs)))
    return found

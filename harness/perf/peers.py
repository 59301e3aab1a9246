"""The strongest peers `batchproof bench` can time beside the impl: the framework functions it has
adapters for, where the framework is installed here (docs/performance.md, "Per core and on a busy
host").

A peer is an adapter's candidate (the framework's function behind the contract's signature,
`batchproof.adapters`) for the workload's record, given the workload's lists-form call. It is
timed only where it returns the impl's outputs on that call by the record's comparator (bit for
bit for every record with a peer today), on the fields it provides (as `check` compares them):
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
    from batchproof import adapters, registry
    from batchproof.adapters import FrameworkMissing
    from batchproof.adapters.runner import _compare_provided

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
        if not adapter.in_domain(adapter.call_of(case)):
            found.append(Peer(name, None, "this input is outside its adapter's domain"))
            continue
        # the record's comparator, blind to what the adapter does not provide (as `check`)
        compare = _compare_provided(registry.get(record).compare, adapter.not_provided)
        try:
            compare(impl_output, candidate(*case.args, **case.kwargs))
        except Exception as err:  # noqa: BLE001 - a Mismatch or a raise: not a peer here
            found.append(Peer(name, None, f"not the impl's output here: {type(err).__name__}: "
                                          f"{str(err).splitlines()[0][:120]}"))
            continue
        found.append(Peer(name, lambda c=candidate: c(*case.args, **case.kwargs)))
    return found

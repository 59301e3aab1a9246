"""The bug zoo: named, hand-written faulty variants of `impl/` functions, one per real bug class.

Each entry says which function it replaces, which real-world bug it reproduces (with its public
reference where one exists) and which checks must kill it. `batchproof mutate --zoo` plants every
entry (monkeypatching `batchproof.impl.<op>.<function>`, and `batchproof.reference.<op>.<function>`
too for `oracle=True` entries: bugs in the *specification* that only properties and pins can
catch), runs the checks of the op's records against it and prints the kill matrix.

One module per op (`harness/mutation/zoo/rl_batch.py`, ...) holds a list `ENTRIES`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from batchproof.ops import OP_MODULES


@dataclass(frozen=True)
class ZooEntry:
    """One planted bug.

    killers: the checks that must fail on it, as `check` (a check of the record
    `<op>.<function>`) or `<op>.<function>/<check>` for a check of another record of the op.
    oracle: replace the reference too (a spec-level bug: equivalence cannot see it).
    target: the attribute of `impl.<op>` replaced, where it is not the record's function (a
    private helper: `_one_pass_kernel`, the dispatch of build_rl_batch's one-pass kernels).
    """

    name: str
    op: str
    function: str
    bug: str
    killers: tuple[str, ...]
    replacement: Callable
    reference: str = ""
    oracle: bool = False
    target: str = ""

    @property
    def replaced(self) -> str:
        """The attribute of `impl.<op>` the entry replaces."""
        return self.target or self.function

    @property
    def record(self) -> str:
        return f"{self.op}.{self.function}"

    def killer_checks(self) -> list[tuple[str, str]]:
        """(record name, check name) for each declared killer."""
        out = []
        for killer in self.killers:
            record, _, check = killer.rpartition("/")
            out.append((record or self.record, check))
        return out


def all_entries() -> list[ZooEntry]:
    entries: list[ZooEntry] = []
    for name in OP_MODULES:
        if importlib.util.find_spec(f"{__name__}.{name}") is not None:
            entries += importlib.import_module(f"{__name__}.{name}").ENTRIES
    names = [e.name for e in entries]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"duplicate zoo entry names: {duplicated}")
    return entries


def get(name: str) -> ZooEntry:
    for entry in all_entries():
        if entry.name == name:
            return entry
    raise ValueError(f"no zoo entry named {name!r}")


@contextlib.contextmanager
def planted(entry: ZooEntry) -> Iterator[None]:
    """Temporarily replace the entry's function (or `target`) in `impl.<op>` (and
    `reference.<op>` if oracle)."""
    packages = ["batchproof.impl", "batchproof.reference"] if entry.oracle else ["batchproof.impl"]
    modules = [importlib.import_module(f"{p}.{entry.op}") for p in packages]
    originals = [getattr(m, entry.replaced) for m in modules]
    try:
        for module in modules:
            setattr(module, entry.replaced, entry.replacement)
        yield
    finally:
        for module, original in zip(modules, originals):
            setattr(module, entry.replaced, original)

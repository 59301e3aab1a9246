"""Surviving mutmut mutants that no CPU test can kill, documented per op.

`harness/mutation/equivalents/<op>.py` holds `EQUIVALENT`, the entries for `impl/<op>.py` and
`impl/kernels/<op>.py`; `harness/mutation/equivalents/harness.py` those for the harness modules that
`batchproof mutate --mutmut --harness` mutates. Each entry names the file, the function (`*`:
any), regular expressions for the diff's removed and added lines, and the reason no test can
tell the mutant from the original (mirrored in docs/mutation.md). The mutmut driver treats a
survivor as equivalent only when an entry matches it; any other survivor fails the run.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from batchproof.mutation.mutant import Mutant

ON_CPU = ("CPU-equivalent: the tensor is created on (or moved to) the default device, which is "
          "the target device on CPU; killed on CUDA by tests/test_registry.py::test_impl_on_cuda "
          "(gpu marker), not run on this machine")
NO_DEVICE = r"^(?!.*\bdevice\b)"  # an added line without `device`: the argument was dropped


@dataclass(frozen=True)
class Equivalent:
    """Surviving mutants no CPU test can kill, because they do not change what a CPU user sees.

    Matched by file, function (`*`: any) and regular expressions searched in the diff's removed
    (`original`) and added (`mutated`) lines — stable across renumbering, unlike mutant names.
    """

    path: str
    function: str
    original: str
    mutated: str
    reason: str

    def matches(self, mutant: Mutant) -> bool:
        removed, added = diff_sides(mutant.diff)
        return (self.path == mutant.path and self.function in ("*", mutant.function)
                and re.search(self.original, removed) is not None
                and re.search(self.mutated, added) is not None)


def diff_sides(diff: str) -> tuple[str, str]:
    """(removed lines, added lines) of a mutant's diff, each joined into one line."""
    lines = [line for line in diff.splitlines() if not line.startswith(("---", "+++"))]
    return tuple(" ".join(line[1:].strip() for line in lines if line.startswith(sign))
                 for sign in "-+")


def all_equivalents() -> tuple[Equivalent, ...]:
    """The entries of every op module in this package."""
    entries: list[Equivalent] = []
    for module in pkgutil.iter_modules(__path__):
        entries += importlib.import_module(f"{__name__}.{module.name}").EQUIVALENT
    return tuple(entries)

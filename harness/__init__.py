"""batchproof: property-based verification of LLM post-training batch layouts.

The public API (docs/api.md):

    batchproof.check(fn, "rl_batch.build_rl_batch", *, adapter=None, ...)   run the CLI's checks
    batchproof.assert_identical(expected, actual)                            the exact comparator
    batchproof.strategies                                                    input generators
    batchproof.CheckFailed, batchproof.Mismatch                              what they raise
    batchproof.Adapter, batchproof.KnownDivergence, batchproof.register_adapter   adapters

Everything else (`batchproof.registry`, `.checks`, `.ops`, `.mutation`, `.impl`, `.reference`, ...) is
internal: it may change in any release. `batchproof.impl` and `batchproof.reference` hold the
built-in implementation and the oracle; call them, but do not import their private names.

Names are loaded on first use, so `import batchproof` stays cheap and changes no global state.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from batchproof import strategies
    from batchproof.adapters import Adapter, KnownDivergence, register_adapter
    from batchproof.api import CheckFailed, CheckReport, check
    from batchproof.compare import Mismatch, assert_identical

try:
    __version__ = version("batchproof")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["Adapter", "CheckFailed", "CheckReport", "KnownDivergence", "Mismatch", "__version__",
           "assert_identical", "check", "register_adapter", "strategies"]

_LAZY = {
    "check": "batchproof.api",
    "CheckFailed": "batchproof.api",
    "CheckReport": "batchproof.api",
    "assert_identical": "batchproof.compare",
    "Mismatch": "batchproof.compare",
    "Adapter": "batchproof.adapters",
    "KnownDivergence": "batchproof.adapters",
    "register_adapter": "batchproof.adapters",
}


def __getattr__(name: str) -> Any:
    if name == "strategies":
        return importlib.import_module("batchproof.strategies")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'batchproof' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

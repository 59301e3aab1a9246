"""mutmut survivors of `impl/pipeline.py` that no CPU test can kill (see the package docstring)."""

from harness.equivalents import Equivalent

EQUIVALENT: tuple[Equivalent, ...] = ()

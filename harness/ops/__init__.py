"""Registry records, one module per op (mirroring `reference/` and `impl/`).

Importing this package registers every record; the order below is the order of `harness verify`.
"""

import importlib
import importlib.util

OP_MODULES = ["rl_batch", "sft", "nesting", "varlen", "balance", "trainer", "pipeline"]

for _name in OP_MODULES:
    if importlib.util.find_spec(f"{__name__}.{_name}") is not None:
        importlib.import_module(f"{__name__}.{_name}")

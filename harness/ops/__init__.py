"""Registry records, one module per op (mirroring `reference/` and `impl/`).

`batchproof.registry.all_ops()` imports these modules, which registers their records; the order
below is the order of `batchproof verify`. Importing this package alone registers nothing (the
CLI reads `OP_MODULES` for its help without importing torch).

The core's floor (docs/harness.md, "The house, by floor"): imports the other core modules,
`impl/` and `reference/`; imported by the registry's discovery and by everything above it.
"""

OP_MODULES = ("rl_batch", "sft", "nesting", "varlen", "balance", "trainer", "pipeline", "cp")

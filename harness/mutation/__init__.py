"""Mutation testing: does batchproof catch bugs, and would it catch yours (docs/mutation.md).

    kill_matrix    `batchproof mutate --zoo`: every zoo entry planted, every check of its op run
                   against it; the kill matrix and the seeded detection rates
    zoo/           the bug zoo: hand-written faulty variants of `impl/`, one per real bug class,
                   each with the checks that must kill it
    mutmut_driver  `batchproof mutate --mutmut`: mutmut over `impl/` (or `--harness` modules) in a
                   throw-away copy laid out as the installed package
    equivalents/   the survivors no test can kill, documented per op with the reason
    mutant         one mutant as mutmut reports it (what the driver reads and the equivalents match)
    target         `batchproof mutate --impl module:function`: mutmut over *your* module, with
                   batchproof's checks (through the adapter) as the tests

Imports the core (registry, checks, profiles, ops, impl, reference) and `adapters` (`target`
checks through an adapter); only the command line imports it (and the tests).
"""

"""The pytest-benchmark runs (the benchmark gate's included) measure as a user's process runs:
nothing here tunes the C library's allocator. The floors write their outputs where the ops'
CPU fast paths write theirs (`batchproof.impl._pages`: freed outputs' pages written again), so a
floor is the write itself in any process (docs/performance.md, "In a user's process")."""

"""Performance: what is measured, and how (`batchproof bench`, docs/performance.md).

    workloads   realistic inputs (trainer-scale batches, made on the device where asked), the
                variants each benchmark times and the floor it is measured against
    bench       `batchproof bench`: the workloads timed in one run, as ratios
    baselines   the strongest peers we have (SkyRL's vectorized collation ...), side by side
    host_reads  which device reads an op makes (on CUDA with set_sync_debug_mode; on the CPU with
                a model of CUDA's sync points)

Imports the core (registry, ops, impl); nothing below imports it but the command line.
"""

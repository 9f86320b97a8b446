"""Fault injection for tests and benchmarks: wrappers around the real storage layers that fail the way disks
and stores fail.

    tier1   FaultyFileOperations (the local log's file-operations seam: failed syncs, torn writes, crash
            points, latency), FaultyDurableDataLog (any DurableDataLog: failed appends, delayed acks),
            SimulatedCrash
    tier2   FaultyChunkStorage (any ChunkStorage: latency, hangs, unavailability, failed or torn calls)

Test support only: they import server internals, and nothing under server/ imports them.
"""

"""Settings of ChunkedSegmentStorage (SLTS, design §5). Every bound SLTS keeps in memory is named here."""

from __future__ import annotations

import dataclasses

MiB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class StorageConfig:
    # Rolling size: a chunk never grows beyond this many bytes. Recorded per segment at creation
    # (``max_rolling_length``), so changing it later affects only new segments.
    max_chunk_size: int = 64 * MiB
    # How long a garbage chunk waits before the collector deletes it. The wait lets an operation
    # that registered a chunk before creating it commit first (design §5.8).
    gc_delay_seconds: float = 5.0
    # Journal batches between two snapshots of the system segments' layout (design §5.9).
    journal_snapshot_every: int = 100
    # Concat stitches only runs of chunks each smaller than this (0 disables defragmentation).
    defrag_min_chunk_size: int = 4 * MiB
    # Upper bound of a stitched chunk; the segment's rolling size bounds it too.
    defrag_max_size: int = 64 * MiB
    # Segment and chunk records kept in the metadata cache (system segments' records are extra:
    # they are pinned).
    metadata_cache_records_max: int = 10_000
    # Segments whose offset -> chunk read index is kept (least recently used ones are dropped).
    read_index_segments_max: int = 1_000
    # Garbage tasks waiting in memory; past this, new tasks are dropped and counted (the orphan
    # sweep of the next start finds their chunks again).
    gc_queue_tasks_max: int = 100_000
    # A garbage task failing this many times with a transient error is dropped (same recovery).
    gc_attempts_max: int = 5

    def __post_init__(self):
        if self.max_chunk_size <= 0:
            raise ValueError("max_chunk_size must be positive")
        if self.gc_delay_seconds < 0:
            raise ValueError("gc_delay_seconds must not be negative")
        if self.journal_snapshot_every <= 0:
            raise ValueError("journal_snapshot_every must be positive")
        if self.defrag_min_chunk_size < 0 or self.defrag_max_size < 0:
            raise ValueError("defrag sizes must not be negative")
        for name in ("metadata_cache_records_max", "read_index_segments_max", "gc_queue_tasks_max",
                     "gc_attempts_max"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")

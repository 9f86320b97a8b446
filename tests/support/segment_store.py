"""An in-process segment store with test defaults (loopback, any free port, Tier-1 in memory).

The Tier-1 log is ``InMemoryDurableDataLog`` (``tier1="memory"``): a store stopped and started again in the
test's process recovers its records, and no test pays for preallocating and fsyncing log files. A test of
durability on disk passes ``tier1="local"`` (its log files are then as small as a local log allows).
"""

from __future__ import annotations

import contextlib

from server.config import SegmentStoreConfig
from server.service import SegmentStoreService

TEST_LOG_FILE_SIZE = 16 << 20  # the minimum: tests start many stores, each preallocating its log files


def segment_store(data_dir, chunk_storage=None, **config) -> SegmentStoreService:
    """A (not yet started) segment store on ``data_dir``; ``config`` overrides SegmentStoreConfig fields.

    ``chunk_storage`` replaces the configured Tier-2 (e.g. a FaultyChunkStorage for fault tests).
    """
    config = {"port": 0, "container_count": 2, "tier1": "memory", "log_file_size": TEST_LOG_FILE_SIZE, **config}
    return SegmentStoreService(SegmentStoreConfig(data_dir=data_dir, **config), chunk_storage=chunk_storage)


@contextlib.asynccontextmanager
async def running_segment_store(data_dir, **config):
    """Starts a segment store for the block and stops it afterwards."""
    service = segment_store(data_dir, **config)
    await service.start()
    try:
        yield service
    finally:
        await service.stop()

"""Tier-1 space comes back once Tier-2 holds the data: a container that goes quiet logs a checkpoint when
its newest one grows old (``checkpoint_interval_seconds``), so its log is truncated past everything
flushed and the freed files are deleted (``log_spare_files``); the age checkpoint never lets the log
drop bytes Tier-2 does not hold yet. In-process segment stores, bytes checked over the wire."""

from __future__ import annotations

import asyncio
import pathlib
import time

import pytest

from server.tier2.filesystem import FileSystemChunkStorage
from tests.integration.test_tier2_segment_store import create, flush
from tests.support.bulk import MiB, append_pattern, verify_pattern
from tests.support.faults.tier2 import FaultyChunkStorage
from tests.support.segment_store import TEST_LOG_FILE_SIZE, running_segment_store

pytestmark = pytest.mark.timeout(120)

SEGMENT = "scope/stream/0.#epoch.0"
# One container with its log in files (what these tests measure); checkpoints by size never come within a
# test (256 MiB), only by age.
QUIET = {"tier1": "local", "container_count": 1, "cache_size": 64 * MiB, "flush_size": 1 * MiB, "flush_interval": 0.2,
         "max_chunk_size": 8 * MiB, "checkpoint_every_bytes": 256 * MiB, "checkpoint_interval_seconds": 0.5,
         "log_spare_files": 0}


def tier1_bytes(data_dir: pathlib.Path) -> int:
    """Bytes of every Tier-1 log file (the few bytes of METADATA and LOCK files aside)."""
    return sum(path.stat().st_size for path in (data_dir / "tier1").rglob("*.tlog"))


async def wait_for_tier1_at_most(data_dir: pathlib.Path, limit: int, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    while (size := tier1_bytes(data_dir)) > limit and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return size


async def test_a_quiet_container_truncates_its_log_by_an_age_checkpoint(tmp_path):
    """40 MiB fill three log files; with no checkpoint by size in sight, the log shrinks to the live file and
    the one prepared ahead only because the newest checkpoint grew old. The bytes survive a restart."""
    async with running_segment_store(tmp_path, **QUIET) as store:
        await create(store.port)
        assert await append_pattern(store.port, SEGMENT, 40 * MiB) == 40 * MiB
        grown = tier1_bytes(tmp_path)
        assert grown >= 3 * TEST_LOG_FILE_SIZE
        await flush(store.port)
        shrunk = await wait_for_tier1_at_most(tmp_path, 2 * TEST_LOG_FILE_SIZE, 15.0)
        print(f"\ntier-1 bytes: {grown / MiB:.0f} MiB after 40 MiB of appends, {shrunk / MiB:.0f} MiB once quiet")
        assert shrunk <= 2 * TEST_LOG_FILE_SIZE  # the live file + the spare prepared ahead
        assert await verify_pattern(store.port, SEGMENT, 40 * MiB) == 40 * MiB

    async with running_segment_store(tmp_path, **QUIET) as store:
        assert await verify_pattern(store.port, SEGMENT, 40 * MiB) == 40 * MiB


@pytest.mark.slow
async def test_age_checkpoints_never_truncate_what_tier2_does_not_hold(tmp_path):
    """Tier-2 goes down after 8 MiB reached it; 24 MiB more are acknowledged from Tier-1 while age
    checkpoints keep being logged. The store stops with Tier-2 still down and restarts with it back:
    every acknowledged byte is there (so the log kept everything Tier-2 lacked)."""
    storage = FaultyChunkStorage(FileSystemChunkStorage(tmp_path / "tier2"))
    config = {**QUIET, "tier2_timeout": 0.5}
    async with running_segment_store(tmp_path / "data", chunk_storage=storage, **config) as store:
        await create(store.port)
        assert await append_pattern(store.port, SEGMENT, 8 * MiB) == 8 * MiB
        await flush(store.port)
        storage.unavailable = True
        assert await append_pattern(store.port, SEGMENT, 24 * MiB, first_block=8) == 32 * MiB
        await asyncio.sleep(2.0)  # four checkpoint intervals
        assert tier1_bytes(tmp_path / "data") >= 2 * TEST_LOG_FILE_SIZE  # 24 MiB span at least two files

    async with running_segment_store(tmp_path / "data", chunk_storage=FileSystemChunkStorage(tmp_path / "tier2"),
                                     **config) as store:
        assert await verify_pattern(store.port, SEGMENT, 32 * MiB) == 32 * MiB
        await flush(store.port)
        assert await wait_for_tier1_at_most(tmp_path / "data", 2 * TEST_LOG_FILE_SIZE, 15.0) \
            <= 2 * TEST_LOG_FILE_SIZE
        assert await verify_pattern(store.port, SEGMENT, 32 * MiB) == 32 * MiB

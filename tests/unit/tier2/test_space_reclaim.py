"""SLTS gives space back: truncation and deletion release chunks, the collector deletes them and their
records after the configured delay (a fake clock moves time), and each step is logged at info with
what it released."""

from __future__ import annotations

import logging

import pytest

from server.tier2.chunked_storage import ChunkedSegmentStorage
from server.tier2.config import StorageConfig
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from tests.support.doubles.slts_metadata import InMemoryMetadataStore

pytestmark = pytest.mark.timeout(30)

CONFIG = StorageConfig(max_chunk_size=10, defrag_min_chunk_size=0, gc_delay_seconds=30.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def parts():
    """(storage, chunk storage, metadata store, clock): one SLTS on a clock the test moves."""
    chunks, metadata, clock = InMemoryChunkStorage(), InMemoryMetadataStore(), Clock()
    storage = ChunkedSegmentStorage(7, chunks, metadata, config=CONFIG, clock=clock)
    await storage.bootstrap(1)
    await storage.finish_bootstrap()
    yield storage, chunks, metadata, clock
    await storage.close()


def records(caplog, message: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage() == message]


async def test_truncated_chunks_and_their_records_go_once_the_delay_passed(parts, caplog):
    """35 bytes in chunks of 10: truncating at 25 releases two chunks (20 bytes); they and their records
    stay for the delay (a concurrent reader may still use them), then the collector deletes them."""
    storage, chunks, metadata, clock = parts
    await storage.create("s")
    await storage.write("s", 0, bytes(35))
    head = [chunk.name for chunk in await storage.list_chunks("s")][:2]
    caplog.set_level(logging.INFO, logger="tributary.tier2")
    await storage.truncate("s", 25)
    [truncated] = records(caplog, "tier-2 segment truncated")
    assert (truncated.container, truncated.segment, truncated.start_offset) == (7, "s", 25)
    assert (truncated.chunks_released, truncated.bytes_released, truncated.gc_delay_seconds) == (2, 20, 30.0)

    clock.now += 29.9
    assert await storage._context.collector.collect() == 0  # not due yet
    assert all([await chunks.exists(name) for name in head])
    clock.now += 0.2
    assert await storage._context.collector.collect() == 2
    assert not any([await chunks.exists(name) for name in head])
    assert not set(head) & set(await metadata.keys())  # the chunk records went first
    [collected] = records(caplog, "tier-2 garbage chunks deleted")
    assert (collected.container, collected.chunks, collected.bytes) == (7, 2, 20)
    assert await storage.read("s", 25, 10) == bytes(10)


async def test_a_truncation_inside_the_head_chunk_releases_nothing(parts, caplog):
    """Only whole chunks are freed: the chunk holding the new start offset stays (and nothing is logged)."""
    storage, _, _, _ = parts
    await storage.create("s")
    await storage.write("s", 0, bytes(35))
    caplog.set_level(logging.INFO, logger="tributary.tier2")
    await storage.truncate("s", 9)
    assert records(caplog, "tier-2 segment truncated") == []
    assert (await storage.get_info("s")).chunk_count == 4
    assert await storage.collect_garbage() == 0


async def test_a_deleted_segment_releases_every_chunk_and_record(parts, caplog):
    storage, chunks, metadata, clock = parts
    await storage.create("s")
    await storage.write("s", 0, bytes(25))
    await storage.create("kept")
    await storage.write("kept", 0, b"k")
    caplog.set_level(logging.INFO, logger="tributary.tier2")
    await storage.delete("s")
    [deleted] = records(caplog, "tier-2 segment deleted")
    assert (deleted.container, deleted.segment, deleted.chunks_released, deleted.bytes_released) == (7, "s", 3, 25)
    clock.now += 30.0
    assert await storage._context.collector.collect() == 3
    assert [name for name in await chunks.list() if name.startswith("s.")] == []
    kept_chunk = (await storage.list_chunks("kept"))[0].name
    assert sorted(await metadata.keys()) == sorted(["kept", kept_chunk])

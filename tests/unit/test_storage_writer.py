"""The storage writer against a real SLTS (in-memory chunks and metadata), with the metadata store's
commits held back where a test needs to decide the interleaving."""

from __future__ import annotations

import asyncio

from server.containers.metadata import SegmentMetadata, SegmentType
from server.containers.storage_writer import StorageWriter, StorageWriterConfig
from server.tier2.chunked_storage import ChunkedSegmentStorage
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from tests.support.doubles.slts_metadata import InMemoryMetadataStore

NAME = "scope/stream/0.#epoch.0"


class GatedMetadataStore(InMemoryMetadataStore):
    """Holds every commit that removes ``NAME``'s record (a segment deletion) until ``release``."""

    def __init__(self):
        super().__init__()
        self.gate = asyncio.Event()
        self.held = asyncio.Event()

    async def write(self, writes):
        writes = list(writes)
        if any(write.key == NAME and write.value is None for write in writes):
            self.held.set()
            await self.gate.wait()
        return await super().write(writes)


async def test_a_recreated_name_is_written_only_after_tier2_deleted_the_old_segment():
    """The old segment's deletion commits slowly; the new segment of the same name must not be written
    (or judged already written, from the old one's length) before it: its bytes would be lost."""
    metadata = GatedMetadataStore()
    storage = ChunkedSegmentStorage(0, InMemoryChunkStorage(), metadata)
    await storage.bootstrap(1)
    await storage.finish_bootstrap()
    writer = StorageWriter(0, storage, None, config=StorageWriterConfig(flush_size=1, flush_interval=60.0))
    writer.start()
    try:
        old = SegmentMetadata(1, NAME, SegmentType.STREAM, {}, 0)
        old.data.append(b"o" * 100)
        writer.appended(old, 0, 100, 1)
        await writer.flush(1)
        assert (await storage.get_info(NAME)).length == 100

        writer.deleted(old, 2)
        new = SegmentMetadata(2, NAME, SegmentType.STREAM, {}, 0)
        new.data.append(b"n" * 50)
        writer.appended(new, 0, 50, 3)
        flushing = asyncio.ensure_future(writer.flush(3))
        await asyncio.wait_for(metadata.held.wait(), 5)  # the deletion is committing...
        await asyncio.sleep(0.1)  # ...while the new segment's work could run
        metadata.gate.set()
        await asyncio.wait_for(flushing, 5)

        assert (await storage.get_info(NAME)).length == 50
        assert await storage.read(NAME, 0, 50) == b"n" * 50
    finally:
        await writer.stop()
        await storage.close()

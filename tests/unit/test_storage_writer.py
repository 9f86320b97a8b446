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


async def test_a_replayed_deletion_that_tier2_already_did_skips_the_segment_s_earlier_work():
    """A restart replays, from a checkpoint that saw bytes of a segment in Tier-2, appends to it, a transaction
    merged into it, its seal and its deletion, all of which Tier-2 did before the restart: the segment is gone
    from Tier-2. Its deletion is what counts: the writer must not take the missing bytes for an inconsistency
    (the container would then fail at every restart, for good), nor bring the segment or its source back."""
    source_name = NAME + "#transaction.00000000000000000000000000000001"
    storage = ChunkedSegmentStorage(0, InMemoryChunkStorage(), InMemoryMetadataStore())
    await storage.bootstrap(1)
    await storage.finish_bootstrap()

    def life(writer: StorageWriter, target: SegmentMetadata, first_sequence: int) -> int:
        """After the checkpoint: 20 more bytes, a transaction of 10 merged, the seal, the deletion."""
        at = target.length
        target.data.append(b"u" * 20)
        writer.appended(target, at, 20, first_sequence)
        source = SegmentMetadata(2, source_name, SegmentType.STREAM, {}, 0)
        source.data.append(b"s" * 10)
        writer.appended(source, 0, 10, first_sequence + 1)
        target.data.append_index(source.data)
        writer.merged(target, source, first_sequence + 2)
        target.sealed = True
        writer.sealed(target, first_sequence + 3)
        writer.deleted(target, first_sequence + 4)
        return first_sequence + 4

    before = StorageWriter(0, storage, None, config=StorageWriterConfig(flush_size=1, flush_interval=60.0))
    before.start()
    try:
        target = SegmentMetadata(1, NAME, SegmentType.STREAM, {}, 0)
        target.data.append(b"t" * 100)
        before.appended(target, 0, 100, 1)
        await before.flush(1)  # a checkpoint taken now records 100 bytes of the segment in Tier-2
        await before.flush(life(before, target, 2))
    finally:
        await before.stop()
    assert not await storage.exists(NAME) and not await storage.exists(source_name)

    failures: list[BaseException] = []
    after = StorageWriter(0, storage, None, config=StorageWriterConfig(flush_size=1, flush_interval=60.0),
                          on_fatal=failures.append)
    restored = SegmentMetadata(1, NAME, SegmentType.STREAM, {}, 0, length=100)  # as the checkpoint has it
    assert restored.data.storage_length == 100
    last = life(after, restored, 2)  # the replay
    after.start()
    try:
        await asyncio.wait_for(after.flush(last), 5)
    finally:
        await after.stop()
        await storage.close()
    assert not failures
    assert not await storage.exists(NAME) and not await storage.exists(source_name)

"""Failover in Tier-2 (invariant F2): after a container is reopened with a higher epoch it writes new
chunks named with its epoch, and whatever the old owner still writes to Tier-2 is never visible."""

from __future__ import annotations

import pytest

from server.containers.cache import CacheManager
from server.containers.container import SegmentContainer, Tier2Settings
from server.containers.storage_writer import StorageWriterConfig
from server.tier1 import LocalDurableDataLog
from server.tier2 import errors as storage_errors
from server.tier2.chunked_storage import ChunkedSegmentStorage
from server.tier2.filesystem import FileSystemChunkStorage
from server.tier2.metadata_store import MetadataStoreError

SEGMENT = "scope/stream/0.#epoch.0"
MiB = 1024 * 1024


def container(tmp_path, chunks) -> SegmentContainer:
    return SegmentContainer(0, LocalDurableDataLog(tmp_path / "log", file_size=16 * MiB),
                            tier2=Tier2Settings(chunks, CacheManager(64 * MiB),
                                                writer=StorageWriterConfig(flush_interval=0.1)))


async def read_all(owner: SegmentContainer, name: str = SEGMENT) -> bytes:
    info = owner.get_info(name)
    data, offset = b"", info.start_offset
    while offset < info.length:
        result = await owner.read(name, offset, 1 << 20)
        data += bytes(result.data())
        offset += result.length
    return data


async def test_old_owner_tier2_writes_after_failover_are_never_visible(tmp_path):
    chunks = FileSystemChunkStorage(tmp_path / "tier2")
    old = container(tmp_path, chunks)
    await old.start()
    await old.create_segment(SEGMENT)
    await old.append(SEGMENT, b"A" * 1000)
    await old.flush_to_storage()
    old_epoch = old.epoch
    # The old owner's SLTS, as it was when the owner lost the container (its log now belongs to a newer owner).
    zombie = ChunkedSegmentStorage(0, chunks, old._tier2.metadata_store(),
                                   system_segments=(old.storage_metadata_name,))
    await zombie.bootstrap(old_epoch)
    assert (await zombie.get_info(SEGMENT)).length == 1000
    await old.stop()

    new = container(tmp_path, chunks)
    await new.start()
    assert new.epoch > old_epoch
    await new.append(SEGMENT, b"B" * 500)
    await new.flush_to_storage()

    # The zombie keeps writing where it believes the segment ends: its metadata commit cannot succeed.
    written_before = chunks.counters.bytes_written
    with pytest.raises((storage_errors.StorageError, MetadataStoreError)):
        await zombie.write(SEGMENT, 1000, b"Z" * 300)
    assert chunks.counters.bytes_written == written_before + 300  # the bytes did reach a chunk
    assert await read_all(new) == b"A" * 1000 + b"B" * 500
    listed = await new.storage_chunks(SEGMENT)
    assert sum(chunk.length for chunk in listed) == 1500
    assert all(f"E-{new.epoch}-" in chunk.name for chunk in listed if chunk.start_offset >= 1000)
    await new.stop()

    again = container(tmp_path, chunks)  # and after one more restart, from Tier-2 and the log
    await again.start()
    assert await read_all(again) == b"A" * 1000 + b"B" * 500
    await again.stop()
    await zombie.close()
    await chunks.close()


async def test_a_recreated_segment_survives_the_tier2_deletion_of_its_predecessor(tmp_path):
    """Delete then create the same name with bytes still unflushed, through a whole container and a
    restart. (The interleaving this guards against is forced in tests/unit/test_storage_writer.py.)"""
    chunks = FileSystemChunkStorage(tmp_path / "tier2")
    owner = container(tmp_path, chunks)
    await owner.start()
    await owner.create_segment(SEGMENT)
    await owner.append(SEGMENT, b"old" * 1000)
    await owner.flush_to_storage()
    await owner.append(SEGMENT, b"more")
    await owner.delete(SEGMENT)
    await owner.create_segment(SEGMENT)
    await owner.append(SEGMENT, b"new" * 500)
    await owner.flush_to_storage()
    assert (await owner.storage.get_info(SEGMENT)).length == 1500
    await owner.stop()
    again = container(tmp_path, chunks)
    await again.start()
    assert await read_all(again) == b"new" * 500
    await again.stop()
    await chunks.close()

"""Persisted chunk index hints (issue 25: chunk-list lookups by offset without walking the list).

The first read of a segment with many chunks after a restart used to walk the chunk list from the first chunk,
one metadata lookup per chunk (2,000 chunks: ~2,000 lookups). With a hint per index block it looks up a few
records and walks at most a block's worth of chunks, whatever the segment's size.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.tier2 import chunk_index
from server.tier2.chunked_storage import ChunkedSegmentStorage
from server.tier2.config import StorageConfig
from server.tier2.records import IndexHintRecord, decode
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from tests.support.doubles.slts_metadata import InMemoryMetadataStore

CHUNK = 64
CONFIG = StorageConfig(max_chunk_size=CHUNK, defrag_min_chunk_size=0)  # an index block: 16 chunks, 1 KiB
CHUNKS = 2_000
NAME = "scope/stream/0.#epoch.0"


def content(length: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(length)


async def started(chunks, metadata, epoch: int, config: StorageConfig = CONFIG) -> ChunkedSegmentStorage:
    storage = ChunkedSegmentStorage(0, chunks, metadata, config=config)
    await storage.bootstrap(epoch)
    await storage.finish_bootstrap()
    return storage


async def written(metadata, chunks, name: str = NAME, count: int = CHUNKS, seed: int = 0,
                  config: StorageConfig = CONFIG, epoch: int = 1) -> bytes:
    storage = await started(chunks, metadata, epoch, config)
    data = content(count * CHUNK, seed)
    await storage.create(name)
    for offset in range(0, len(data), 16 * CHUNK):  # 16 chunks a write
        await storage.write(name, offset, data[offset:offset + 16 * CHUNK])
    await storage.close()
    return data


async def hints(metadata: InMemoryMetadataStore, name: str) -> dict[int, tuple[int, str]]:
    """block -> (start offset, chunk) of every hint of ``name`` in the metadata store."""
    found = {}
    for key in await metadata.keys():
        segment, separator, block = key.rpartition("\0")
        if separator and segment == name:
            record = decode((await metadata.get(key)).value)
            found[int(block)] = (record.start_offset, record.chunk)
    return found


async def test_a_first_read_after_a_restart_looks_up_a_block_not_the_whole_list():
    chunks, metadata = InMemoryChunkStorage(), InMemoryMetadataStore()
    data = await written(metadata, chunks)
    assert len(await hints(metadata, NAME)) == CHUNKS // 16 - 1  # none for block 0: its first chunk serves it
    for offset in (CHUNK * CHUNKS // 2 + 7, CHUNK * (CHUNKS - 40), 3 * 1024 + 1023, 5):
        storage = await started(chunks, metadata, 2)  # a restart: nothing in the in-memory read index
        before = metadata.gets
        assert await storage.read(NAME, offset, 100) == data[offset:offset + 100]
        assert metadata.gets - before <= 25, (offset, metadata.gets - before)  # a walk from the first: ~1,000
        await storage.close()
    storage = await started(chunks, metadata, 3)
    rng = random.Random(1)
    for offset in sorted(rng.randrange(len(data)) for _ in range(200)):
        assert await storage.read(NAME, offset, 300) == data[offset:offset + 300]
    await storage.close()


async def test_truncation_drops_the_hints_below_the_first_chunk_and_reads_still_work():
    chunks, metadata = InMemoryChunkStorage(), InMemoryMetadataStore()
    data = await written(metadata, chunks)
    storage = await started(chunks, metadata, 2)
    cut = len(data) // 2 + 10
    await storage.truncate(NAME, cut)
    first = (await storage.list_chunks(NAME))[0].start_offset
    assert all(start >= first for start, _ in (await hints(metadata, NAME)).values())
    await storage.collect_garbage()  # the unlinked chunks' records go too
    await storage.close()
    storage = await started(chunks, metadata, 3)
    assert await storage.read(NAME, cut, 500) == data[cut:cut + 500]
    assert await storage.read(NAME, len(data) - 300, 300) == data[-300:]
    await storage.close()


async def test_a_delete_removes_every_hint_and_a_new_segment_of_the_name_gets_its_own():
    chunks, metadata = InMemoryChunkStorage(), InMemoryMetadataStore()
    await written(metadata, chunks)
    storage = await started(chunks, metadata, 2)
    await storage.delete(NAME)
    assert await hints(metadata, NAME) == {}
    await storage.close()
    data = await written(metadata, chunks, count=300, seed=2, epoch=3)
    assert len(await hints(metadata, NAME)) == 300 // 16
    storage = await started(chunks, metadata, 4)
    assert await storage.read(NAME, 250 * CHUNK, 1000) == data[250 * CHUNK:250 * CHUNK + 1000]
    await storage.close()


@pytest.mark.parametrize("defrag", [False, True])
async def test_a_concat_moves_the_sources_range_under_the_targets_hints(defrag):
    config = StorageConfig(max_chunk_size=CHUNK, defrag_min_chunk_size=CHUNK if defrag else 0,
                           defrag_max_size=CHUNK)
    chunks, metadata = InMemoryChunkStorage(), InMemoryMetadataStore()
    target = await written(metadata, chunks, "scope/target", count=101, seed=3, config=config)
    source = await written(metadata, chunks, "scope/source", count=500, seed=4, config=config)
    storage = await started(chunks, metadata, 2, config)
    await storage.seal("scope/source")
    assert await storage.concat("scope/target", len(target), "scope/source") == len(target) + len(source)
    assert await hints(metadata, "scope/source") == {}
    await storage.close()
    whole = target + source
    storage = await started(chunks, metadata, 3, config)
    before = metadata.gets
    offset = len(target) + 400 * CHUNK + 5
    assert await storage.read("scope/target", offset, 200) == whole[offset:offset + 200]
    assert metadata.gets - before <= 25
    for offset in range(0, len(whole), 777):
        assert await storage.read("scope/target", offset, 100) == whole[offset:offset + 100]
    await storage.close()


async def test_hints_of_unlinked_chunks_are_skipped():
    """A hint is only a hint: one naming a chunk no longer linked (its record inactive or gone) is not used."""
    chunks, metadata = InMemoryChunkStorage(), InMemoryMetadataStore()
    data = await written(metadata, chunks)
    storage = await started(chunks, metadata, 2)
    transaction = storage._begin(NAME)  # white box: a stale hint, as a bug or an old format would leave
    segment = await transaction.segment(NAME)
    key = chunk_index.hint_key(NAME, 60)
    await transaction.get(key)
    transaction.put(IndexHintRecord(key, "no such chunk", 60 * 1024))
    transaction.put(segment)
    await transaction.commit()
    await storage.close()
    storage = await started(chunks, metadata, 3)
    offset = 60 * 1024 + 100
    assert await storage.read(NAME, offset, 100) == data[offset:offset + 100]
    await storage.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(writes=st.lists(st.integers(1, 300), min_size=1, max_size=30), cut=st.floats(0, 1),
       source_writes=st.lists(st.integers(1, 300), max_size=10), defrag=st.booleans(),
       reads=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 500)), min_size=1, max_size=10))
def test_cold_reads_match_what_was_written_truncated_and_concatenated(writes, cut, source_writes, defrag, reads):
    """Whatever writes, truncation and concat made the chunk lists, a restarted instance (reading through the
    hints) reads the right bytes, and every hint names a linked chunk of a live segment at its start."""
    asyncio.run(_cold_reads(writes, cut, source_writes, defrag, reads))


async def _cold_reads(writes, cut, source_writes, defrag, reads):
    config = StorageConfig(max_chunk_size=CHUNK, defrag_min_chunk_size=CHUNK if defrag else 0, defrag_max_size=CHUNK)
    block_chunks, chunk_index.BLOCK_CHUNKS = chunk_index.BLOCK_CHUNKS, 2  # many blocks for few bytes
    try:
        chunks, metadata = InMemoryChunkStorage(), InMemoryMetadataStore()
        storage = await started(chunks, metadata, 1, config)
        data, random_bytes = b"", random.Random(len(writes))
        await storage.create(NAME)
        for size in writes:
            piece = random_bytes.randbytes(size)
            await storage.write(NAME, len(data), piece)
            data += piece
        if source_writes:
            await storage.create("scope/source")
            source = random_bytes.randbytes(sum(source_writes))
            offset = 0
            for size in source_writes:
                await storage.write("scope/source", offset, source[offset:offset + size])
                offset += size
            await storage.seal("scope/source")
            await storage.concat(NAME, len(data), "scope/source")
            data += source
        start = int(cut * len(data))
        await storage.truncate(NAME, start)
        await storage.close()

        storage = await started(chunks, metadata, 2, config)
        for fraction, length in reads:
            offset = start + int(fraction * (len(data) - start))
            assert await storage.read(NAME, offset, length) == data[offset:offset + length]
        linked = {chunk.start_offset: chunk.name for chunk in await storage.list_chunks(NAME)}
        for block, (hint_start, hint_chunk) in (await hints(metadata, NAME)).items():
            assert linked.get(hint_start) == hint_chunk, (block, hint_start, hint_chunk)
        assert await hints(metadata, "scope/source") == {}
        await storage.close()
    finally:
        chunk_index.BLOCK_CHUNKS = block_chunks

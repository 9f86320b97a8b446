"""ChunkedSegmentStorage (SLTS): every operation and error, rolling, storage without append,
metadata-only concat and defragmentation, truncation and deletion with garbage collection,
orphans after failed commits and crashes, retries, fencing of a zombie owner (F2)."""

from __future__ import annotations

import asyncio
import os

import pytest

from server.tier2.chunk_names import parse_segment_chunk
from server.tier2.chunk_storage import ChunkStorageUnavailable
from server.tier2.chunked_storage import ChunkedSegmentStorage
from server.tier2.config import StorageConfig
from server.tier2.errors import (BadOffset, SegmentExists, SegmentNotFound, SegmentNotSealed, SegmentSealed,
                                 SegmentTruncated, StorageNotPrimary)
from server.tier2.filesystem import FileSystemChunkStorage
from server.tier2.metadata_store import MetadataStoreUnavailable, VersionMismatch
from server.tier2.records import ChunkRecord, decode
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from tests.support.doubles.slts_metadata import InMemoryMetadataStore
from tests.support.faults.tier2 import FaultyChunkStorage
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(30)

SMALL = StorageConfig(max_chunk_size=10, defrag_min_chunk_size=0)


class NoConcatChunkStorage(InMemoryChunkStorage):
    supports_concat = False


@pytest.fixture
def chunks():
    return InMemoryChunkStorage()


@pytest.fixture
def metadata():
    return InMemoryMetadataStore()


@pytest.fixture
async def open_storage(chunks, metadata):
    """``open_storage(epoch=1, config=SMALL, ...)``: a bootstrapped instance over the shared stores."""
    opened = []

    async def open_(epoch=1, config=SMALL, chunk_storage=None, **options):
        storage = ChunkedSegmentStorage(1, chunk_storage or chunks, metadata, config=config, **options)
        await storage.bootstrap(epoch)
        await storage.finish_bootstrap()
        opened.append(storage)
        return storage

    yield open_
    for storage in opened:
        await storage.close()


@pytest.fixture
async def storage(open_storage):
    return await open_storage()


async def segment_with(storage, name, *writes):
    await storage.create(name)
    for data in writes:
        await storage.write(name, (await storage.get_info(name)).length, data)


async def chunk_lengths(storage, name):
    return [chunk.length for chunk in await storage.list_chunks(name)]


async def test_create_exists_and_info(storage):
    """A new segment exists, is empty and owned by the creating epoch; a second create fails."""
    assert not await storage.exists("s")
    await storage.create("s")
    assert await storage.exists("s")
    info = await storage.get_info("s")
    assert (info.name, info.length, info.start_offset, info.sealed, info.owner_epoch, info.chunk_count) == \
        ("s", 0, 0, False, 1, 0)
    with pytest.raises(SegmentExists):
        await storage.create("s")


@pytest.mark.parametrize("operation", ["get_info", "write", "read", "seal", "truncate", "delete", "list_chunks",
                                       "concat target", "concat source"])
async def test_operations_on_a_missing_segment_raise_not_found(storage, operation):
    """Every operation naming a segment that does not exist raises SegmentNotFound with its name."""
    await storage.create("target")
    await storage.create("sealed")
    await storage.seal("sealed")
    calls = {"get_info": lambda: storage.get_info("nope"), "write": lambda: storage.write("nope", 0, b"x"),
             "read": lambda: storage.read("nope", 0, 1), "seal": lambda: storage.seal("nope"),
             "truncate": lambda: storage.truncate("nope", 0), "delete": lambda: storage.delete("nope"),
             "list_chunks": lambda: storage.list_chunks("nope"),
             "concat target": lambda: storage.concat("nope", 0, "sealed"),
             "concat source": lambda: storage.concat("target", 0, "nope")}
    with pytest.raises(SegmentNotFound) as raised:
        await calls[operation]()
    assert raised.value.segment == "nope"


async def test_writes_and_reads_of_parts_and_ranges(storage):
    """Writes of bytes-likes and lists of parts append; reads return exactly the bytes in range."""
    await segment_with(storage, "s", b"hello ", [b"wor", bytearray(b"ld"), memoryview(b"!!")])
    assert await storage.read("s", 0, 100) == b"hello world!!"
    assert await storage.read("s", 4, 5) == b"o wor"
    assert await storage.read("s", 13, 10) == b""
    with pytest.raises(BadOffset):
        await storage.read("s", 14, 1)
    await storage.write("s", 13, b"")
    assert (await storage.get_info("s")).length == 13


async def test_a_write_at_another_offset_than_the_length_fails(storage):
    """BadOffset carries the segment's length and the offset given; nothing is written."""
    await segment_with(storage, "s", b"abc")
    for offset in (0, 2, 4):
        with pytest.raises(BadOffset) as raised:
            await storage.write("s", offset, b"x")
        assert (raised.value.expected, raised.value.given) == (3, offset)
    assert await storage.read("s", 0, 10) == b"abc"


async def test_writes_roll_over_into_chunks_named_with_epoch_and_offset(storage):
    """Chunks never exceed max_chunk_size; each is named <segment>.E-<epoch>-O-<offset>.<uuid>."""
    data = bytes(range(37))
    await segment_with(storage, "s", data[:25], data[25:28], data[28:])
    layout = await storage.list_chunks("s")
    assert [(c.start_offset, c.length) for c in layout] == [(0, 10), (10, 10), (20, 10), (30, 7)]
    assert all(c.exists_in_storage for c in layout)
    assert [parse_segment_chunk(c.name)[:3] for c in layout] == [("s", 1, c.start_offset) for c in layout]
    assert await storage.read("s", 0, 100) == data
    assert await storage.read("s", 8, 15) == data[8:23]
    assert (await storage.get_info("s")).chunk_count == 4


async def test_without_append_every_write_is_a_new_chunk(open_storage):
    """On storage that cannot append (S3), each write (or each rolling piece of one) is its own chunk."""
    storage = await open_storage(chunk_storage=InMemoryChunkStorage(supports_append=False))
    await segment_with(storage, "s", b"abc", b"de", b"f" * 23)
    assert await chunk_lengths(storage, "s") == [3, 2, 10, 10, 3]
    assert await storage.read("s", 0, 100) == b"abcde" + b"f" * 23


async def test_seal_is_idempotent_and_refuses_writes(storage):
    await segment_with(storage, "s", b"abc")
    await storage.seal("s")
    await storage.seal("s")
    assert (await storage.get_info("s")).sealed
    with pytest.raises(SegmentSealed):
        await storage.write("s", 3, b"x")
    assert await storage.read("s", 0, 10) == b"abc"


async def test_concat_of_big_chunks_moves_no_bytes(open_storage, chunks):
    """Concat splices chunk lists in one transaction: no byte is read, written or copied."""
    storage = await open_storage(config=StorageConfig(max_chunk_size=100, defrag_min_chunk_size=50))
    await segment_with(storage, "target", b"t" * 150)
    await segment_with(storage, "source", b"s" * 120)
    await storage.seal("source")
    before = chunks.counters.snapshot()
    assert await storage.concat("target", 150, "source") == 270
    after = chunks.counters
    assert (after.bytes_written, after.bytes_read, after.bytes_concatenated, after.chunks_created) == \
        (before.bytes_written, before.bytes_read, before.bytes_concatenated, before.chunks_created)
    assert await storage.read("target", 0, 300) == b"t" * 150 + b"s" * 120
    assert await chunk_lengths(storage, "target") == [100, 50, 100, 20]
    assert not await storage.exists("source")
    with pytest.raises(SegmentNotFound):
        await storage.read("source", 0, 1)
    assert (await storage.get_info("target")).chunk_count == 4


async def test_concat_checks(storage):
    """Unsealed or truncated sources, a wrong offset and a sealed target are refused, changing nothing."""
    await segment_with(storage, "target", b"abc")
    await segment_with(storage, "open", b"x")
    await segment_with(storage, "truncated", b"xyz")
    await storage.truncate("truncated", 1)
    await storage.seal("truncated")
    await segment_with(storage, "sealed", b"123")
    await storage.seal("sealed")
    with pytest.raises(SegmentNotSealed):
        await storage.concat("target", 3, "open")
    with pytest.raises(SegmentTruncated):
        await storage.concat("target", 3, "truncated")
    with pytest.raises(BadOffset) as raised:
        await storage.concat("target", 2, "sealed")
    assert (raised.value.expected, raised.value.given) == (3, 2)
    await storage.seal("target")
    with pytest.raises(SegmentSealed):
        await storage.concat("target", 3, "sealed")
    assert await storage.read("target", 0, 10) == b"abc"
    assert await storage.exists("sealed") and await storage.exists("open")


async def test_concat_of_an_empty_source_just_removes_it(storage):
    await segment_with(storage, "target", b"abc")
    await storage.create("empty")
    await storage.seal("empty")
    assert await storage.concat("target", 3, "empty") == 3
    assert not await storage.exists("empty")
    assert await chunk_lengths(storage, "target") == [3]


async def test_concat_into_an_empty_target_adopts_the_source_chunks(storage):
    await storage.create("target")
    await segment_with(storage, "source", b"0123456789abc")
    await storage.seal("source")
    assert await storage.concat("target", 0, "source") == 13
    assert await storage.read("target", 0, 20) == b"0123456789abc"
    await storage.write("target", 13, b"!")
    assert await storage.read("target", 5, 20) == b"56789abc!"


async def test_defragmentation_stitches_small_chunks_into_the_target_last_chunk(open_storage, chunks):
    """With append, a small source is appended in place to the target's small last chunk (native concat)."""
    storage = await open_storage(config=StorageConfig(max_chunk_size=100, defrag_min_chunk_size=20))
    await segment_with(storage, "target", b"t" * 5)
    await segment_with(storage, "source", b"s" * 7)
    await storage.seal("source")
    source_chunk = (await storage.list_chunks("source"))[0].name
    before = chunks.counters.snapshot()
    await storage.concat("target", 5, "source")
    assert chunks.counters.bytes_concatenated - before.bytes_concatenated == 7
    assert await chunk_lengths(storage, "target") == [12]
    await storage.write("target", 12, b"!")  # the stitched chunk is ours: appended to
    assert await chunk_lengths(storage, "target") == [13]
    assert await storage.read("target", 0, 20) == b"t" * 5 + b"s" * 7 + b"!"
    assert await storage.collect_garbage() == 1
    assert not await chunks.exists(source_chunk)


@pytest.mark.parametrize("make_chunk_storage", [lambda: InMemoryChunkStorage(supports_append=False),
                                                lambda: NoConcatChunkStorage()],
                         ids=["native concat, no append", "append, no native concat"])
async def test_defragmentation_stitches_a_run_of_small_chunks_into_a_new_chunk(open_storage, make_chunk_storage):
    """A run of small source chunks becomes one new chunk; big chunks and the rest stay where they are."""
    chunk_storage = make_chunk_storage()
    storage = await open_storage(chunk_storage=chunk_storage,
                                 config=StorageConfig(max_chunk_size=10, defrag_min_chunk_size=4))
    await segment_with(storage, "target", b"T" * 10)
    await storage.create("source")
    for piece in (b"ab", b"cd", b"e", b"fghij", b"k"):  # new chunks: one per write (no append or new epochs)
        await storage.close()
        storage = await open_storage(epoch=storage.epoch + 1, chunk_storage=chunk_storage,
                                     config=StorageConfig(max_chunk_size=10, defrag_min_chunk_size=4))
        await storage.write("source", (await storage.get_info("source")).length, piece)
    await storage.seal("source")
    assert await chunk_lengths(storage, "source") == [2, 2, 1, 5, 1]
    before = chunk_storage.counters.snapshot()
    await storage.concat("target", 10, "source")
    moved = chunk_storage.counters.bytes_concatenated + chunk_storage.counters.bytes_written - \
        before.bytes_concatenated - before.bytes_written
    assert moved == 5
    assert await chunk_lengths(storage, "target") == [10, 5, 5, 1]
    assert await storage.read("target", 0, 30) == b"T" * 10 + b"abcdefghijk"
    stitched = [c.name for c in await storage.list_chunks("target")]
    await storage.collect_garbage()
    assert [name for name in await chunk_storage.list() if not name.startswith("_system/")] == sorted(stitched)


async def test_truncate_unlinks_head_chunks_and_gc_deletes_them(storage, chunks, metadata):
    """Reads below the start offset fail; whole chunks below it are deleted, the one holding it stays."""
    await segment_with(storage, "s", bytes(range(35)))
    head = [c.name for c in await storage.list_chunks("s")][:1]
    await storage.truncate("s", 15)
    info = await storage.get_info("s")
    assert (info.start_offset, info.length, info.chunk_count) == (15, 35, 3)
    with pytest.raises(SegmentTruncated) as raised:
        await storage.read("s", 14, 5)
    assert raised.value.start_offset == 15
    assert await storage.read("s", 15, 5) == bytes(range(15, 20))
    assert await chunks.exists(head[0])  # until the collector runs
    assert await storage.collect_garbage() == 1
    assert not await chunks.exists(head[0]) and head[0] not in await metadata.keys()
    await storage.truncate("s", 3)  # never lowered
    assert (await storage.get_info("s")).start_offset == 15
    with pytest.raises(BadOffset):
        await storage.truncate("s", 36)


async def test_truncate_to_the_length_drops_every_chunk_and_writes_go_on(storage):
    await segment_with(storage, "s", b"x" * 25)
    await storage.truncate("s", 25)
    info = await storage.get_info("s")
    assert (info.start_offset, info.chunk_count) == (25, 0)
    assert await storage.collect_garbage() == 3
    await storage.write("s", 25, b"abc")
    assert await storage.read("s", 25, 10) == b"abc"
    assert [c.start_offset for c in await storage.list_chunks("s")] == [25]


async def test_delete_removes_the_segment_and_gc_its_chunks_and_records(storage, chunks, metadata):
    await segment_with(storage, "s", b"x" * 25)
    await segment_with(storage, "other", b"y")
    await storage.delete("s")
    assert not await storage.exists("s")
    with pytest.raises(SegmentNotFound):
        await storage.delete("s")
    assert await storage.collect_garbage() == 3
    assert [name for name in await chunks.list() if name.startswith("s.")] == []
    assert sorted(await metadata.keys()) == sorted(["other", (await storage.list_chunks("other"))[0].name])
    await storage.create("s")  # the name can be used again
    assert (await storage.get_info("s")).length == 0


async def test_a_failed_commit_leaves_only_an_orphan_chunk_which_gc_deletes(storage, chunks, metadata):
    """G1: the chunk of a write whose commit failed is unreferenced, invisible, and collected."""
    await segment_with(storage, "s", b"abc")
    before = set(await chunks.list())
    metadata.fail_writes = 1
    with pytest.raises(MetadataStoreUnavailable):
        await storage.write("s", 3, b"x" * 12)  # appends 7 bytes to the chunk, opens a new one for 5
    orphans = set(await chunks.list()) - before
    assert len(orphans) == 1
    assert (await storage.get_info("s")).length == 3
    assert await storage.read("s", 0, 100) == b"abc"
    assert await storage.collect_garbage() == 1
    assert set(await chunks.list()) == before


async def test_a_retried_write_never_duplicates_bytes(storage, metadata):
    """After a commit failure the first chunk holds uncommitted bytes; the retry goes to a new chunk."""
    await segment_with(storage, "s", b"abc")
    metadata.fail_writes = 1
    with pytest.raises(MetadataStoreUnavailable):
        await storage.write("s", 3, b"def")
    await storage.write("s", 3, b"def")
    assert await storage.read("s", 0, 100) == b"abcdef"
    assert await chunk_lengths(storage, "s") == [3, 3]


@pytest.mark.parametrize("fault", ["write reached the chunk", "torn write", "create failed"])
async def test_a_write_retried_after_a_chunk_storage_failure_succeeds_once(open_storage, chunks, fault):
    faulty = FaultyChunkStorage(chunks)
    storage = await open_storage(chunk_storage=faulty)
    await segment_with(storage, "s", b"abc")
    if fault == "write reached the chunk":
        faulty.fail_next(1, "write", after_inner=True)
    elif fault == "torn write":
        faulty.tear_next_write(2)
    else:
        faulty.fail_next(1, "create_with_content")
    payload = b"0123456789" * 2  # fills the first chunk and opens a second
    with pytest.raises(ChunkStorageUnavailable):
        await storage.write("s", 3, payload)
    assert await storage.read("s", 0, 100) == b"abc"
    await storage.write("s", 3, payload)
    assert await storage.read("s", 0, 100) == b"abc" + payload
    await storage.collect_garbage()
    assert all(c.exists_in_storage for c in await storage.list_chunks("s"))


async def test_a_version_mismatch_surfaces_and_the_retry_reads_the_store(storage, metadata):
    """A commit against a record changed behind the cache fails; the cache forgets it, so a retry works."""
    await segment_with(storage, "s", b"abc")
    current = await metadata.get("s")
    await metadata.write([("s", current.value, current.version)])  # same record, new version
    with pytest.raises(VersionMismatch):
        await storage.write("s", 3, b"def")
    await storage.write("s", 3, b"def")
    assert await storage.read("s", 0, 10) == b"abcdef"


async def test_a_zombie_owner_cannot_make_its_bytes_visible(open_storage, chunks):
    """F2: after B (epoch 2) writes, A (epoch 1) cannot commit, and B never sees A's bytes."""
    a = await open_storage(epoch=1)
    await segment_with(a, "s", b"aaa")
    b = await open_storage(epoch=2)
    await b.write("s", 3, b"bbb")
    with pytest.raises((StorageNotPrimary, VersionMismatch)):
        await a.write("s", 3, b"zzz")  # reaches A's own chunk, never the metadata
    with pytest.raises(StorageNotPrimary):
        await a.write("s", 3, b"zzz")
    for operation in (lambda: a.seal("s"), lambda: a.truncate("s", 1), lambda: a.delete("s")):
        with pytest.raises(StorageNotPrimary):
            await operation()
    await b.write("s", 6, b"!")
    assert await b.read("s", 0, 100) == b"aaabbb!"
    layout = await b.list_chunks("s")
    assert [parse_segment_chunk(c.name).epoch for c in layout] == [1, 2]
    assert await chunks.read(layout[0].name, 0, 100) == b"aaazzz"  # A's bytes sit beyond the committed length
    assert (await b.get_info("s")).owner_epoch == 2
    await a.collect_garbage()
    await b.collect_garbage()
    assert await b.read("s", 0, 100) == b"aaabbb!"


async def test_a_fenced_metadata_store_means_not_primary(storage, metadata):
    await segment_with(storage, "s", b"abc")
    metadata.fenced = True
    with pytest.raises(StorageNotPrimary):
        await storage.write("s", 3, b"def")
    with pytest.raises(StorageNotPrimary):
        await storage.create("t")
    metadata.fenced = False
    assert await storage.read("s", 0, 10) == b"abc"
    assert not await storage.exists("t")


async def test_orphans_of_a_crashed_owner_are_swept_at_the_next_start(open_storage, chunks, metadata):
    """After a crash the in-memory garbage queue is gone; finish_bootstrap finds the orphans again."""
    crashed = await open_storage(epoch=1, owns_segment=lambda name: name != "foreign")
    await segment_with(crashed, "s", b"abc")
    await segment_with(crashed, "foreign", b"f")
    metadata.fail_writes = 1
    with pytest.raises(MetadataStoreUnavailable):
        await crashed.write("s", 3, b"0123456789")
    await segment_with(crashed, "deleted", b"x" * 15)
    await crashed.delete("deleted")
    await chunks.create_with_content("foreign.E-1-O-0." + "0" * 32, b"not ours")  # another container's chunk
    live = {c.name for name in ("s", "foreign") for c in await crashed.list_chunks(name)}
    await crashed.close()  # dies with its queue
    restarted = await open_storage(epoch=2, owns_segment=lambda name: name != "foreign")
    await restarted.collect_garbage()  # the failed write's chunk, the deleted segment's two chunks
    remaining = {name for name in await chunks.list() if not name.startswith("_system/")}
    assert remaining == live | {"foreign.E-1-O-0." + "0" * 32}
    assert await restarted.read("s", 0, 10) == b"abc"


async def test_the_collector_spares_chunks_of_operations_in_flight(open_storage, chunks):
    """G1: a chunk registered before creation is not deleted while its operation is still running."""

    class SlowCreate(InMemoryChunkStorage):
        def __init__(self):
            super().__init__()
            self.created, self.release = asyncio.Event(), asyncio.Event()

        async def create_with_content(self, name, data):
            length = await super().create_with_content(name, data)
            if name.startswith("s."):
                self.created.set()
                await self.release.wait()
            return length

    slow = SlowCreate()
    storage = await open_storage(chunk_storage=slow, config=StorageConfig(max_chunk_size=10, gc_delay_seconds=0))
    await storage.create("s")
    write = asyncio.create_task(storage.write("s", 0, b"abc"))
    await slow.created.wait()
    assert await storage.collect_garbage() == 0
    slow.release.set()
    await write
    assert await storage.collect_garbage() == 0
    assert await storage.read("s", 0, 10) == b"abc"


async def test_the_background_collector_deletes_after_the_delay(open_storage, chunks):
    storage = await open_storage(config=StorageConfig(max_chunk_size=10, gc_delay_seconds=0.01))
    await segment_with(storage, "s", b"x" * 25)
    head = (await storage.list_chunks("s"))[0].name
    await storage.truncate("s", 10)
    async def deleted() -> bool:
        return not await chunks.exists(head)

    await eventually(deleted, "the collector to delete the truncated chunk", timeout=5)
    assert not await chunks.exists(head)
    await storage.close()
    await storage.close()


async def test_warm_reads_do_not_touch_the_metadata_store(open_storage, chunks, metadata):
    """Reads find chunks through the in-memory index; a cold instance walks from the nearest persisted hint."""
    writer_config = StorageConfig(max_chunk_size=16, defrag_min_chunk_size=0)
    writer = await open_storage(config=writer_config)
    data = bytes(i % 251 for i in range(16 * 200))
    await segment_with(writer, "s", data)
    reader = ChunkedSegmentStorage(1, chunks, metadata, config=writer_config)  # cold: no sweep warmed it
    await reader.bootstrap(1)
    metadata.gets = 0
    assert await reader.read("s", 16 * 150 + 3, 40) == data[16 * 150 + 3:16 * 150 + 43]
    # the segment, the persisted hint of index block 9 and its chunk (144), the walk on to 150, then 151 and 152
    # (without hints: 1 + 151 + 2, the whole list walked from its first chunk)
    assert metadata.gets == 1 + 2 + 6 + 2
    for offset in range(0, len(data), 24):
        assert await reader.read("s", offset, 24) == data[offset:offset + 24]
    metadata.gets = 0
    for offset in [*range(0, len(data), 24), 3001, 17, 1600, 5]:
        assert await reader.read("s", offset, 24) == data[offset:offset + 24]
    assert await reader.read("s", 7, 3000) == data[7:3007]
    assert metadata.gets == 0


async def test_list_chunks_reports_chunks_missing_from_storage(storage, chunks):
    await segment_with(storage, "s", b"x" * 15)
    layout = await storage.list_chunks("s")
    await chunks.delete(layout[1].name)
    assert [c.exists_in_storage for c in await storage.list_chunks("s")] == [True, False]


async def test_concurrent_writes_at_one_offset_serialize(storage):
    """Operations on a segment run one at a time: of two writes at offset 0, exactly one wins."""
    await storage.create("s")
    results = await asyncio.gather(storage.write("s", 0, b"first"), storage.write("s", 0, b"second"),
                                   return_exceptions=True)
    assert sum(isinstance(result, BadOffset) for result in results) == 1
    assert await storage.read("s", 0, 10) in (b"first", b"second")


async def test_records_in_the_store_are_versioned_binary_records(storage, metadata):
    await segment_with(storage, "s", b"abc")
    chunk = (await storage.list_chunks("s"))[0].name
    record = decode((await metadata.get(chunk)).value)
    assert record == ChunkRecord(chunk, 3)
    assert (await metadata.get("s")).value[0] == 1  # the format version byte


async def test_on_the_filesystem_binding(tmp_path):
    """The same layout over real files (names with slashes and dots), across a restart."""
    metadata = InMemoryMetadataStore()
    system = "_system/containers/storage_metadata_1"
    storage = ChunkedSegmentStorage(1, FileSystemChunkStorage(tmp_path), metadata, config=SMALL,
                                    system_segments=[system])
    await storage.bootstrap(1)
    await storage.finish_bootstrap()
    await segment_with(storage, "scope/stream/0.#epoch.0", b"y" * 23)
    await storage.write(system, 0, b"z" * 12)
    await storage.close()
    restarted = ChunkedSegmentStorage(1, FileSystemChunkStorage(tmp_path), metadata, config=SMALL,
                                      system_segments=[system])
    await restarted.bootstrap(2)
    await restarted.finish_bootstrap()
    assert await restarted.read("scope/stream/0.#epoch.0", 0, 100) == b"y" * 23
    assert await restarted.read(system, 0, 100) == b"z" * 12
    assert await restarted.collect_garbage() == 2  # epoch 1's journal file and snapshot
    await restarted.close()


async def region_bytes(region) -> bytes:
    try:
        return os.pread(region.fd, region.length, region.offset)
    finally:
        region.release()


async def test_regions_lend_one_chunk_of_the_segment_at_a_time(tmp_path):
    """read_region cuts at the end of the chunk holding the offset, checks the start offset and the
    length like read, and its bytes outlive the chunk's deletion until released."""
    chunk_storage = FileSystemChunkStorage(tmp_path)
    config = StorageConfig(max_chunk_size=10, defrag_min_chunk_size=0, gc_delay_seconds=0)
    storage = ChunkedSegmentStorage(1, chunk_storage, InMemoryMetadataStore(), config=config)
    await storage.bootstrap(1)
    await storage.finish_bootstrap()
    assert storage.serves_regions
    data = bytes(range(256)) * 2  # 512 bytes in chunks of at most 10
    await segment_with(storage, "s", data[:7], data[7:100], data[100:])
    offset, seen = 0, bytearray()
    while offset < len(data):
        region = await storage.read_region("s", offset, 64)
        assert 1 <= region.length <= 10  # never past its chunk
        seen += await region_bytes(region)
        offset += region.length
    assert bytes(seen) == data
    assert await storage.read_region("s", len(data), 10) is None  # at the end: nothing to lend
    with pytest.raises(BadOffset):
        await storage.read_region("s", len(data) + 1, 10)
    await storage.truncate("s", 33)
    with pytest.raises(SegmentTruncated):
        await storage.read_region("s", 32, 10)
    region = await storage.read_region("s", 40, 10)
    assert [path for path in tmp_path.rglob("s.*") if path.is_file()]  # the chunk files, before the delete
    await storage.delete("s")
    await storage.collect_garbage()
    assert not [path for path in tmp_path.rglob("s.*") if path.is_file()]  # the chunks are gone from disk
    assert await region_bytes(region) == data[40:40 + region.length]  # the lent bytes are not
    with pytest.raises(SegmentNotFound):
        await storage.read_region("s", 40, 10)
    await storage.close()


async def test_stores_without_regions_say_so(storage):
    assert not storage.serves_regions

"""Tier-2 through the whole segment store, over the wire: flushing, eviction and cold reads, log
truncation, restart from Tier-2 (table segments included), metadata-only merges, and Tier-2 outages."""

from __future__ import annotations

import asyncio
import errno
import pathlib
import uuid

import pytest

from clients.connection import WireConnection, next_request_id
from server.config import SegmentStoreConfig
from server.service import SegmentStoreService, StartupError, memory_log_factory
from server.tier2.chunk_storage import ChunkStorageError
from server.tier2.filesystem import FileSystemChunkStorage
from tests.support.bulk import MiB, append_pattern, verify_pattern
from tests.support.faults.tier1 import FaultyDurableDataLog
from tests.support.faults.tier2 import FaultyChunkStorage
from tests.support.segment_store import running_segment_store, segment_store
from tests.support.waiting import eventually
from wire import commands as c
from wire.constants import NO_VERSION

SEGMENT = "scope/stream/0.#epoch.0"
TABLE = "scope/_tables/metadata"

# Small everything, so that a few dozen MiB exercise eviction, rolling, checkpoints and truncation.
SMALL = dict(container_count=2, cache_size=16 * MiB, flush_size=1 * MiB, flush_interval=0.2,
             max_chunk_size=8 * MiB, checkpoint_every_bytes=4 * MiB)


def tier1_bytes(data_dir: pathlib.Path) -> int:
    return sum(path.stat().st_size for path in (data_dir / "tier1").rglob("*") if path.is_file())


async def request(port, command):
    connection = await WireConnection.connect("127.0.0.1", port)
    try:
        return await connection.request(command, timeout=120)
    finally:
        await connection.close()


async def create(port, name=SEGMENT, table=False):
    make = c.CreateTableSegment(next_request_id(), name, "") if table else \
        c.CreateSegment(next_request_id(), name, 0, 0, "", 0)
    reply = await request(port, make)
    assert isinstance(reply, c.SegmentCreated), reply


async def flush(port):
    reply = await request(port, c.FlushToStorage(-1, "", next_request_id()))
    assert isinstance(reply, c.StorageFlushed), reply


async def chunks(port, name=SEGMENT):
    reply = await request(port, c.ListStorageChunks(name, "", next_request_id()))
    assert isinstance(reply, c.StorageChunksListed), reply
    return reply.chunks


async def test_bytes_reach_tier2_are_evicted_read_back_cold_and_survive_a_restart(tmp_path):
    total = 128 * MiB
    async with running_segment_store(tmp_path, **SMALL) as store:
        await create(store.port)
        await create(store.port, TABLE, table=True)
        table_reply = await request(store.port, c.UpdateTableEntries(next_request_id(), TABLE, "", [
            c.TableEntry(f"key-{i}".encode(), NO_VERSION, f"value-{i}".encode()) for i in range(500)]))
        assert isinstance(table_reply, c.TableEntriesUpdated), table_reply
        assert await append_pattern(store.port, SEGMENT, total) == total
        await flush(store.port)

        listed = await chunks(store.port)
        assert len(listed) >= total // (8 * MiB)  # rolled at the maximum chunk size
        assert sum(chunk.length_in_metadata for chunk in listed) == total
        assert [chunk.start_offset for chunk in listed] == sorted(chunk.start_offset for chunk in listed)
        assert store.cache.size <= store.cache.budget
        assert store.cache.evicted_bytes > 0  # most of the segment was evicted: reads below come from Tier-2
        # the log was truncated behind the flush: each container keeps at most its current log file, one
        # being recycled and a preallocated spare (16 MiB each), whatever was written
        assert tier1_bytes(tmp_path) <= 3 * 16 * MiB * SMALL["container_count"] < total
        assert await verify_pattern(store.port, SEGMENT, total) == total

    async with running_segment_store(tmp_path, **SMALL) as store:  # recovery: log tail + Tier-2
        info = await request(store.port, c.GetStreamSegmentInfo(next_request_id(), SEGMENT, ""))
        assert info.write_offset == total
        assert await verify_pattern(store.port, SEGMENT, total) == total
        read = await request(store.port, c.ReadTable(next_request_id(), TABLE, "", [
            c.TableKey(f"key-{i}".encode(), NO_VERSION) for i in (0, 250, 499)]))
        assert [bytes(entry.value) for entry in read.entries] == [b"value-0", b"value-250", b"value-499"]
        # appends continue where the segment ended, into new chunks of the new epoch
        assert await append_pattern(store.port, SEGMENT, 4 * MiB, first_block=total // MiB) == total + 4 * MiB
        await flush(store.port)
        assert await verify_pattern(store.port, SEGMENT, total + 4 * MiB) == total + 4 * MiB


async def test_merging_a_100_mib_transaction_moves_no_chunk_bytes(tmp_path):
    storage = FileSystemChunkStorage(tmp_path / "tier2")
    transaction = "scope/stream/0.#epoch.0#transaction.00000000000000000000000000000001"
    size = 100 * MiB
    async with running_segment_store(tmp_path / "data", chunk_storage=storage,
                                     **{**SMALL, "cache_size": 64 * MiB, "max_chunk_size": 32 * MiB}) as store:
        await create(store.port)
        await create(store.port, transaction)
        assert await append_pattern(store.port, SEGMENT, 2 * MiB, seed=7) == 2 * MiB
        assert await append_pattern(store.port, transaction, size, first_block=2, seed=7) == size
        await flush(store.port)
        before = storage.counters.snapshot()

        merged = await request(store.port, c.MergeSegments(next_request_id(), SEGMENT, transaction, ""))
        assert isinstance(merged, c.SegmentsMerged), merged
        assert merged.new_target_write_offset == size + 2 * MiB
        await flush(store.port)
        after = storage.counters

        assert after.bytes_concatenated == before.bytes_concatenated  # no chunk was stitched
        assert after.bytes_read == before.bytes_read  # nothing read back to be copied
        assert after.bytes_written - before.bytes_written < 256 * 1024  # only metadata (system journal, table)
        listed = await chunks(store.port)
        assert sum(chunk.length_in_metadata for chunk in listed) == size + 2 * MiB
        assert any(transaction in chunk.chunk_name for chunk in listed)  # the transaction's chunks, re-linked
        assert await verify_pattern(store.port, SEGMENT, size + 2 * MiB, seed=7) == size + 2 * MiB


async def test_a_merge_with_header_reaches_tier2_header_included_and_survives_a_restart(tmp_path):
    """MergeSegmentsWithHeader (a large event's commit) puts the header into Tier-2 right before the
    concatenated source: the target flushes, reads back cold with the header at its place, and
    recovers after a restart (the storage writer once failed here, expecting the source at the
    header's offset)."""
    header = b"HEADER-8"
    async with running_segment_store(tmp_path, **SMALL) as store:
        await create(store.port)
        assert await append_pattern(store.port, SEGMENT, 2 * MiB, seed=3) == 2 * MiB
        connection = await WireConnection.connect("127.0.0.1", store.port)
        try:
            created = await connection.request(c.CreateTransientSegment(next_request_id(), uuid.uuid4(), SEGMENT,
                                                                        ""))
            assert isinstance(created, c.SegmentCreated), created
            transient = created.segment
            assert await append_pattern(store.port, transient, 3 * MiB, seed=4) == 3 * MiB
            merged = await connection.request(c.MergeSegmentsWithHeader(next_request_id(), SEGMENT, transient,
                                                                        header, ""))
            assert isinstance(merged, c.SegmentsMerged), merged
            assert merged.new_target_write_offset == 5 * MiB + len(header)
        finally:
            await connection.close()
        await flush(store.port)
        assert sum(chunk.length_in_metadata for chunk in await chunks(store.port)) == 5 * MiB + len(header)

    async with running_segment_store(tmp_path, **SMALL) as store:
        assert await verify_pattern(store.port, SEGMENT, 2 * MiB, seed=3) == 2 * MiB
        read = await request(store.port, c.ReadSegment(SEGMENT, 2 * MiB, len(header), "", next_request_id()))
        assert isinstance(read, c.SegmentRead) and bytes(read.data) == header, read
        tail = await request(store.port, c.ReadSegment(SEGMENT, 2 * MiB + len(header), 1024, "", next_request_id()))
        expected = await request(store.port, c.GetStreamSegmentInfo(next_request_id(), SEGMENT, ""))
        assert expected.write_offset == 5 * MiB + len(header)
        assert isinstance(tail, c.SegmentRead) and len(tail.data) > 0, tail


@pytest.mark.parametrize("fault", ["errors", "timeouts"])
async def test_tier2_outage_keeps_appends_acknowledged_and_never_truncates_unflushed_log(tmp_path, fault):
    storage = FaultyChunkStorage(FileSystemChunkStorage(tmp_path / "tier2"))
    config = {**SMALL, "cache_size": 64 * MiB, "tier2_timeout": 0.5}
    async with running_segment_store(tmp_path / "data", chunk_storage=storage, **config) as store:
        await create(store.port)
        assert await append_pattern(store.port, SEGMENT, 8 * MiB) == 8 * MiB
        await flush(store.port)
        flushed_before = sum(container.writer.bytes_flushed for container in store.containers.values())

        if fault == "errors":
            storage.unavailable = True
        else:
            storage.hang(30.0)  # every call blocks; the writer's timeout gives up on it
        truncation = {cid: container._log.truncation_address for cid, container in store.containers.items()}
        # Tier-2 is down: appends are still acknowledged (from Tier-1), for a while
        assert await append_pattern(store.port, SEGMENT, 24 * MiB, first_block=8) == 32 * MiB
        await eventually(lambda: sum(container.writer.failures for container in store.containers.values()) > 0,
                         "the storage writer to fail against the Tier-2 outage")
        assert sum(container.writer.bytes_flushed for container in store.containers.values()) == flushed_before
        for cid, container in store.containers.items():
            assert container._log.truncation_address == truncation[cid]  # the unflushed tail stays in the log
        assert await verify_pattern(store.port, SEGMENT, 32 * MiB) == 32 * MiB  # cached: reads still work

    # The store stopped with Tier-2 still down; it restarts with Tier-2 back, recovering from the log.
    async with running_segment_store(tmp_path / "data", chunk_storage=FileSystemChunkStorage(tmp_path / "tier2"),
                                     **config) as store:
        await flush(store.port)
        listed = await chunks(store.port)
        assert sum(chunk.length_in_metadata for chunk in listed) == 32 * MiB
        assert await verify_pattern(store.port, SEGMENT, 32 * MiB) == 32 * MiB


async def test_s3_tier2_by_configuration(tmp_path, s3_bucket):
    """The same store on S3 (moto's server on loopback): no appends, so every flush writes new objects."""
    endpoint, bucket = s3_bucket
    config = {**SMALL, "tier2": "s3", "s3_endpoint": endpoint, "s3_bucket": bucket, "s3_prefix": "tributary/"}
    async with running_segment_store(tmp_path, **config) as store:
        await create(store.port)
        assert await append_pattern(store.port, SEGMENT, 24 * MiB) == 24 * MiB
        await flush(store.port)
        listed = await chunks(store.port)
        assert len(listed) >= 3 and sum(chunk.length_in_metadata for chunk in listed) == 24 * MiB
        assert await verify_pattern(store.port, SEGMENT, 24 * MiB) == 24 * MiB
    async with running_segment_store(tmp_path, **config) as store:
        assert await verify_pattern(store.port, SEGMENT, 24 * MiB) == 24 * MiB


async def test_table_segment_history_is_evicted_and_read_back_from_tier2(tmp_path):
    """A table updated far beyond the cache budget: its flushed history leaves memory, delta reads page
    through it from Tier-2, and after a restart its index is rebuilt from Tier-2 (streamed, not cached)."""
    value = b"v" * 10_000
    async with running_segment_store(tmp_path, **SMALL) as store:
        await create(store.port, TABLE, table=True)
        for round_number in range(8):  # 8 rounds x 500 keys x ~10 KB: ~40 MiB of table history
            reply = await request(store.port, c.UpdateTableEntries(next_request_id(), TABLE, "", [
                c.TableEntry(f"key-{i}".encode(), NO_VERSION, value + b"%d" % round_number) for i in range(500)]))
            assert isinstance(reply, c.TableEntriesUpdated), reply
        await flush(store.port)
        store.cache.evict()
        assert store.cache.size <= store.cache.budget  # the table's history did not stay in memory
        latest, position, done = {}, 0, False
        while not done:
            page = await request(store.port, c.ReadTableEntriesDelta(next_request_id(), TABLE, "", position, 1000))
            assert isinstance(page, c.TableEntriesDeltaRead), page
            latest.update((bytes(entry.key), bytes(entry.value)) for entry in page.entries)
            position, done = page.last_position, page.reached_end
        assert len(latest) == 500 and set(latest.values()) == {value + b"7"}
    async with running_segment_store(tmp_path, **SMALL) as store:
        read = await request(store.port, c.ReadTable(next_request_id(), TABLE, "", [
            c.TableKey(b"key-0", NO_VERSION), c.TableKey(b"key-499", NO_VERSION)]))
        assert [bytes(entry.value) for entry in read.entries] == [value + b"7"] * 2
        info = await request(store.port, c.GetTableSegmentInfo(next_request_id(), TABLE, ""))
        assert info.entry_count == 500


async def test_admin_requests_on_odd_input(tmp_path):
    """FlushToStorage for a container id this store does not run answers WrongHost (as Java answers a
    request for a container it does not own), a negative id flushes every container; ListStorageChunks
    of a missing segment is NoSuchSegment, of a segment never flushed an empty list."""
    async with running_segment_store(tmp_path, **SMALL) as store:
        for container_id in (999, 2**31 - 1):
            reply = await request(store.port, c.FlushToStorage(container_id, "", next_request_id()))
            assert isinstance(reply, c.WrongHost), reply
        reply = await request(store.port, c.FlushToStorage(-5, "", next_request_id()))
        assert isinstance(reply, c.StorageFlushed), reply
        missing = await request(store.port, c.ListStorageChunks("no/such/0.#epoch.0", "", next_request_id()))
        assert isinstance(missing, c.NoSuchSegment), missing
        await create(store.port)
        assert await chunks(store.port) == ()


async def test_cold_reads_are_sent_from_chunk_files_and_never_past_truncation_or_deletion(tmp_path):
    """Reads of flushed bytes that the cache no longer holds go out with sendfile from the chunk files
    (the storage lends regions instead of reading): the bytes are exact, a read is cut at a chunk's end,
    and after a truncation or a deletion no read returns bytes of the segment."""
    storage = FileSystemChunkStorage(tmp_path / "tier2")
    total = 48 * MiB
    async with running_segment_store(tmp_path / "data", chunk_storage=storage, **SMALL) as store:
        await create(store.port)
        assert await append_pattern(store.port, SEGMENT, total) == total
        await flush(store.port)
        assert store.cache.evicted_bytes > 0
        before = storage.counters.snapshot()
        assert await verify_pattern(store.port, SEGMENT, total) == total
        assert storage.counters.bytes_read - before.bytes_read >= total // 2  # most of it lent from Tier-2

        chunk_end = (await chunks(store.port))[0].length_in_metadata
        connection = await WireConnection.connect("127.0.0.1", store.port)
        try:
            straddling = await connection.request(c.ReadSegment(SEGMENT, chunk_end - 100, 4096, "",
                                                                next_request_id()))
            assert isinstance(straddling, c.SegmentRead) and straddling.offset == chunk_end - 100
            assert 0 < len(straddling.data) <= 4096  # cut at the chunk's end, or answered from the cache

            truncated = await connection.request(c.TruncateSegment(next_request_id(), SEGMENT, 16 * MiB, ""))
            assert isinstance(truncated, c.SegmentTruncated), truncated
            below = await connection.request(c.ReadSegment(SEGMENT, 16 * MiB - 1, 4096, "", next_request_id()))
            assert isinstance(below, c.SegmentIsTruncated), below
            above = await connection.request(c.ReadSegment(SEGMENT, 16 * MiB, 1 << 20, "", next_request_id()))
            assert isinstance(above, c.SegmentRead) and len(above.data) > 0

            deleted = await connection.request(c.DeleteSegment(next_request_id(), SEGMENT, ""))
            assert isinstance(deleted, c.SegmentDeleted), deleted
            gone = await connection.request(c.ReadSegment(SEGMENT, 20 * MiB, 4096, "", next_request_id()))
            assert isinstance(gone, c.NoSuchSegment), gone
        finally:
            await connection.close()


async def test_a_store_started_during_a_tier2_outage_waits_for_it_a_while_then_says_why(tmp_path):
    """A restart while the object store is briefly down (found by the simulation: the restarted store gave up at
    once and never served again): the containers keep trying for ``tier2_open_wait`` seconds and start once
    Tier-2 answers, with what was written before. An outage longer than that fails start with a clear error."""
    config = {**SMALL, "tier2_open_wait": 5.0}
    async with running_segment_store(tmp_path / "data", chunk_storage=FileSystemChunkStorage(tmp_path / "tier2"),
                                     **config) as store:
        await create(store.port)
        assert await append_pattern(store.port, SEGMENT, 2 * MiB) == 2 * MiB
        await flush(store.port)

    storage = FaultyChunkStorage(FileSystemChunkStorage(tmp_path / "tier2"))
    storage.set_unavailable(True)
    store = segment_store(tmp_path / "data", chunk_storage=storage, **config)
    starting = asyncio.create_task(store.start())
    await asyncio.sleep(1.0)
    assert not starting.done() and storage.calls, "start gave up, or never asked Tier-2"
    storage.set_unavailable(False)
    await asyncio.wait_for(starting, 30)
    try:
        assert await verify_pattern(store.port, SEGMENT, 2 * MiB) == 2 * MiB
    finally:
        await store.stop()

    storage.set_unavailable(True)
    store = segment_store(tmp_path / "data", chunk_storage=storage, **{**config, "tier2_open_wait": 1.0})
    with pytest.raises(StartupError, match="is not usable: .*storage unavailable"):
        await asyncio.wait_for(store.start(), 30)


async def test_a_failed_start_leaves_no_container_opening_in_the_background(tmp_path):
    """One container's start fails while the other is still opening: start fails, and the other is cancelled and
    closed, not left to finish in the background holding its log (found by the simulation: a store started again
    in the same process then found its log held by a live owner, for ever)."""
    storage = FaultyChunkStorage(FileSystemChunkStorage(tmp_path / "tier2"))
    storage.latency_seconds = 0.2  # each call takes a while: the other container is still opening
    storage.fail_next(1, "list", error=ChunkStorageError)  # the first container to list fails, for good
    config = {**SMALL, "tier1": "local", "log_open_wait": 2.0}
    store = segment_store(tmp_path / "data", chunk_storage=storage, **config)
    with pytest.raises(StartupError, match="injected list failure"):
        await store.start()
    await asyncio.sleep(1.0)  # what a leaked opening would do by now: open its log
    storage.latency_seconds = 0.0
    async with running_segment_store(tmp_path / "data", chunk_storage=storage, **config) as store:
        await create(store.port)
        assert await append_pattern(store.port, SEGMENT, 1 * MiB) == 1 * MiB


@pytest.mark.parametrize("tier1", ["local", "memory"])
async def test_a_container_restart_that_fails_on_tier2_leaves_its_log_free_for_the_next(tmp_path, tier1):
    """A container failed (its log's disk full, say) and its first restart met Tier-2 not answering: that restart
    closes the log it opened, so the next one opens it, recovers, and the store serves the segment again. Found by
    the simulation: the failed restart kept the log's lock, and every later restart met a log "held by a live
    owner", for as long as the process lived."""
    storage = FaultyChunkStorage(FileSystemChunkStorage(tmp_path / "tier2"))
    async with running_segment_store(tmp_path / "data", chunk_storage=storage, **SMALL, tier1=tier1) as store:
        await create(store.port)
        assert await append_pattern(store.port, SEGMENT, 2 * MiB) == 2 * MiB
        failed = store.container_for(SEGMENT)
        restarts = store.container_failures
        storage.fail_next(1, "list")  # the first restart's recovery lists the container's Tier-2 files
        failed.fail(OSError(28, "injected: no space left on device"))
        await eventually(lambda: store.container_failures > restarts, "the failure is seen")

        def serving() -> bool:
            try:
                return store.container_for(SEGMENT) is not failed
            except Exception:  # noqa: BLE001 - not running yet
                return False

        await eventually(serving, "the container restarted", timeout=30)
        assert not storage._armed, "the first restart met the Tier-2 failure"
        assert await verify_pattern(store.port, SEGMENT, 2 * MiB) == 2 * MiB
        assert await append_pattern(store.port, SEGMENT, 1 * MiB, first_block=2) == 3 * MiB


class _FullDiskAtOpen(FaultyDurableDataLog):
    """A log whose disk is full when it is opened, for the next ``failures`` opens (of any container)."""

    failures = 0

    async def open(self) -> int:
        if _FullDiskAtOpen.failures > 0:
            _FullDiskAtOpen.failures -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return await super().open()


async def test_a_store_started_on_a_full_disk_waits_for_it_to_be_freed_or_says_so_in_one_line(tmp_path):
    """Started while its Tier-1 disk is full, the store retries for ``log_open_wait`` (an operator may free the disk)
    and then serves; if the disk stays full, start fails with StartupError naming the disk's error, not with a raw
    OSError (found by the simulation: a store restarted during a full disk crashed, and nobody started it again)."""
    def full_disk_logs(config, container_id):
        return _FullDiskAtOpen(memory_log_factory(config, container_id))

    _FullDiskAtOpen.failures = 3
    store = SegmentStoreService(SegmentStoreConfig(data_dir=tmp_path / "data", port=0, container_count=2,
                                                   tier1="memory", log_open_wait=30.0), log_factory=full_disk_logs)
    await store.start()
    try:
        assert _FullDiskAtOpen.failures == 0
        await create(store.port)
        assert await append_pattern(store.port, SEGMENT, 1 * MiB) == 1 * MiB
    finally:
        await store.stop()

    _FullDiskAtOpen.failures = 1_000_000
    store = SegmentStoreService(SegmentStoreConfig(data_dir=tmp_path / "other", port=0, container_count=2,
                                                   tier1="memory", log_open_wait=1.0), log_factory=full_disk_logs)
    with pytest.raises(StartupError, match=r"tier-1 \(memory\) is not usable: .*No space left on device"):
        await asyncio.wait_for(store.start(), 30)
    _FullDiskAtOpen.failures = 0

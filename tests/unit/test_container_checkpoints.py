"""Checkpoints of any size, writer attributes that cannot overflow a count, and a checkpoint that fails.

A container whose snapshot no longer fits one Tier-1 record used to skip its checkpoints ("checkpoint too large
for one log record"): its log could never be truncated again and every restart replayed everything ever
logged. With records of 64 KiB the old cliff comes at about 600 segments; these containers go well past it.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from server import errors
from server.containers import operations as ops
from server.containers.cache import CacheManager
from server.containers.container import SegmentContainer, Tier2Settings
from server.containers.storage_writer import StorageWriterConfig
from server.containers.views import ContainerStatus
from server.tier1 import LocalDurableDataLog
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from tests.support.segment_store import running_segment_store
from tests.support.waiting import eventually

RECORD_BYTES_MAX = 64 * 1024
SEGMENTS = 3_000  # a snapshot of ~280 KB: five records' worth


def small_record_log(tmp_path) -> LocalDurableDataLog:
    return LocalDurableDataLog(tmp_path / "log", file_size=1 << 20, max_append_size=RECORD_BYTES_MAX,
                               spare_files_max=0)


def container(tmp_path, chunks, **options) -> SegmentContainer:
    return SegmentContainer(0, small_record_log(tmp_path), checkpoint_interval_seconds=0.2,
                            tier2=Tier2Settings(chunks, CacheManager(16 << 20),
                                                writer=StorageWriterConfig(flush_size=1024, flush_interval=0.05)),
                            **options)


async def logged_operations(tmp_path) -> list[ops.Operation]:
    """Every operation the (closed) log at ``tmp_path`` still holds, in order."""
    log = small_record_log(tmp_path)
    await log.open()
    try:
        return [operation async for _, record in log.read() for operation in ops.decode_frame(record)[2]]
    finally:
        await log.close()


async def checkpointed(owner: SegmentContainer) -> None:
    """Asks for a checkpoint the way the container does (mutations held, frames in flight committed first) and
    waits until it is durable."""
    pipeline = owner._pipeline  # white box
    logged = pipeline.checkpoints_logged
    pipeline.request_checkpoint()
    await eventually(lambda: pipeline.checkpoints_logged > logged, "a checkpoint")


def last_truncated(log) -> int:
    return log.truncation_address.sequence if log.truncation_address is not None else 0


def last_sequence(log) -> int:
    """The sequence number of the last record ``log`` holds (records after the truncation point, plus it)."""
    return last_truncated(log) + log.readable_records()


async def test_a_snapshot_larger_than_a_record_goes_in_parts_and_the_log_still_truncates(tmp_path):
    chunks = InMemoryChunkStorage()
    owner = container(tmp_path, chunks)
    await owner.start()
    names = [f"scope/stream-{number}/0.#epoch.0" for number in range(SEGMENTS)]
    await asyncio.gather(*(owner.create_segment(name) for name in names))
    await asyncio.gather(*(owner.append(name, f"event of {name}".encode()) for name in names[::10]))
    await owner.flush_to_storage()
    durable_log = owner._pipeline._log  # white box: the one log of this container
    created = last_sequence(durable_log)  # every creation is logged at or before this record
    # Age checkpoints follow the flush; the storage writer's next pass truncates the log before the newest.
    # (An earlier pass may truncate before the container's first, empty checkpoint: that one is not awaited.)
    await eventually(lambda: last_truncated(durable_log) > created, "the log to be truncated past the creations")
    await owner.stop()

    logged = await logged_operations(tmp_path)
    assert isinstance(logged[0], ops.CheckpointPart) and logged[0].number == 0 and logged[0].parts >= 4, logged[:1]
    assert not any(isinstance(operation, ops.CreateSegment) for operation in logged)  # all truncated away

    again = container(tmp_path, chunks)
    await again.start()
    assert len([name for name in again.segment_names() if name.startswith("scope/")]) == SEGMENTS
    for name in names[::10]:
        read = await again.read(name, 0, 1024)
        assert b"".join(bytes(part) for part in read.parts) == f"event of {name}".encode()
    await again.stop()


async def test_a_checkpoint_cut_short_by_a_crash_is_ignored_and_the_one_before_it_is_used(tmp_path):
    """Parts of a checkpoint whose last part never became durable: replay starts from the complete one before."""
    chunks = InMemoryChunkStorage()
    owner = container(tmp_path, chunks)
    await owner.start()
    await asyncio.gather(*(owner.create_segment(f"scope/s-{number}/0.#epoch.0") for number in range(SEGMENTS)))
    await checkpointed(owner)  # a complete one, in parts
    await owner.create_segment("scope/after/0.#epoch.0")
    await owner.stop()
    durable_log = small_record_log(tmp_path)  # append the first two parts of another checkpoint, as a crash would
    await durable_log.open()
    snapshot_parts = ops.checkpoint_operations(b"x" * (3 * RECORD_BYTES_MAX), RECORD_BYTES_MAX - 8192)
    for part in snapshot_parts[:2]:
        await durable_log.append(ops.encode_frame(0, 10**9 + part.number, [part]))
    await durable_log.close()

    again = container(tmp_path, chunks)
    await again.start()
    assert "scope/after/0.#epoch.0" in again.segment_names()
    assert len([name for name in again.segment_names() if name.startswith("scope/")]) == SEGMENTS + 1
    await again.stop()


@pytest.mark.slow
async def test_seventy_thousand_writers_on_one_segment_keep_it_writable(tmp_path):
    """Every writer id that appended stays an attribute of its segment: 70,000 of them overflowed the 16-bit
    attribute count of the snapshot, the checkpoint task died and the container held every later write."""
    chunks = InMemoryChunkStorage()
    owner = container(tmp_path, chunks, checkpoint_every_operations=20_000)
    await owner.start()
    name = "scope/busy/0.#epoch.0"
    await owner.create_segment(name)
    for start in range(0, 70_000, 5_000):
        await asyncio.gather(*(owner.submit_event_append(name, b"e", uuid.UUID(int=writer + 1), 0, -9223372036854775808,
                                                         1) for writer in range(start, start + 5_000)))
    await checkpointed(owner)
    await asyncio.wait_for(owner.create_segment("scope/later/0.#epoch.0"), 10)  # not held
    assert owner.get_info(name).length == 70_000
    await owner.stop()

    again = container(tmp_path, chunks)
    await again.start()
    assert again.get_info(name).length == 70_000
    assert again.get_attribute(name, uuid.UUID(int=70_000)) == 0
    await asyncio.wait_for(again.append(name, b"x"), 10)
    await again.stop()


async def test_a_checkpoint_that_fails_fails_the_container_instead_of_holding_writes(tmp_path):
    """The checkpoint task used to die unawaited and leave every later mutation held for good."""
    chunks = InMemoryChunkStorage()
    failures: list[BaseException] = []
    owner = container(tmp_path, chunks, checkpoint_every_operations=5,
                      on_failure=lambda _, error: failures.append(error))
    await owner.start()
    broken = RuntimeError("snapshot failed")

    def failing_snapshot() -> bytes:
        raise broken

    owner._pipeline._state.snapshot = failing_snapshot  # white box: the next checkpoint fails
    with pytest.raises(errors.ContainerUnavailable):  # a mutation held for the checkpoint fails; it does not hang
        for number in range(20):
            await asyncio.wait_for(owner.create_segment(f"scope/s-{number}/0.#epoch.0"), 10)
    assert failures == [broken]
    assert owner.status is ContainerStatus.FAILED
    await owner.stop()


async def test_a_segment_store_restarts_a_container_whose_checkpoint_failed(tmp_path):
    """In a segment store, the failed container is replaced by a new instance recovered from its log (counted in
    ``container_failures``, the metric tributary_segmentstore_container_failures_total); writes go on there."""
    async with running_segment_store(tmp_path, container_count=1, checkpoint_every_operations=5) as store:
        first = store.containers[0]
        first._pipeline._state.snapshot = lambda: (_ for _ in ()).throw(RuntimeError("snapshot failed"))
        acknowledged = []
        with pytest.raises(errors.ContainerUnavailable):
            for number in range(20):
                await asyncio.wait_for(first.create_segment(f"scope/s-{number}/0.#epoch.0"), 10)
                acknowledged.append(f"scope/s-{number}/0.#epoch.0")
        await eventually(lambda: store.containers.get(0) not in (None, first)
                         and store.containers[0].status is ContainerStatus.RUNNING, "the container to be restarted")
        assert store.container_failures == 1
        again = store.containers[0]
        await asyncio.wait_for(again.create_segment("scope/after/0.#epoch.0"), 10)
        assert set(acknowledged) <= set(again.segment_names())  # what was acknowledged survived the failure


class SlowListing(InMemoryChunkStorage):
    """Listing every chunk (no prefix: the orphan sweep) takes until the test lets it finish (a Tier-2 with a
    very large number of chunks); the system journal's listings of its own files are not slowed."""

    def __init__(self):
        super().__init__()
        self.listing_allowed = asyncio.Event()
        self.listings = 0

    async def list(self, prefix: str = "") -> list[str]:
        if not prefix:
            self.listings += 1
            await self.listing_allowed.wait()
        return await super().list(prefix)


async def test_start_up_does_not_wait_for_the_tier2_orphan_sweep(tmp_path):
    """The sweep for orphan chunks lists all of Tier-2 (it grew restart time with every chunk ever written): it
    runs beside the container's work, and the orphans it finds are still collected."""
    chunks = SlowListing()
    chunks.listing_allowed.set()
    owner = container(tmp_path, chunks)
    await owner.start()
    await owner.create_segment("scope/kept/0.#epoch.0")
    await owner.append("scope/kept/0.#epoch.0", b"kept")
    await owner.flush_to_storage()
    await owner.stop()
    orphan = "scope/gone/0.#epoch.0.E-1-O-0." + "0" * 32
    await chunks.create_with_content(orphan, b"left by a crash")

    chunks.listing_allowed.clear()
    again = container(tmp_path, chunks)
    await asyncio.wait_for(again.start(), 10)  # serves while the listing is still running
    assert chunks.listings >= 1 and orphan in await InMemoryChunkStorage.list(chunks, "scope/")
    await again.append("scope/kept/0.#epoch.0", b" and more")
    chunks.listing_allowed.set()
    await again.storage.collect_garbage()
    assert orphan not in await InMemoryChunkStorage.list(chunks, "scope/")
    read = await again.read("scope/kept/0.#epoch.0", 0, 100)
    assert b"".join(bytes(part) for part in read.parts) == b"kept and more"
    await again.stop()

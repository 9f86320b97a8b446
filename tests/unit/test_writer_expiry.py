"""Writer attributes that do not accumulate (issue 25): the attribute of a writer that stopped appending is
removed after the writer retention, unless a connection has the writer set up.

Each writer id that appends becomes an attribute of its segment (its last event number, for deduplication when it
reconnects), and the SDK makes a fresh id per segment writer: without expiry a segment whose writers come and go
(Spark tasks, functions, restarts) kept every id in memory and in every checkpoint forever.
"""

from __future__ import annotations

import asyncio
import uuid

from server.containers import attributes as attrs
from server.containers.cache import CacheManager
from server.containers.container import SegmentContainer, Tier2Settings
from server.containers.storage_writer import StorageWriterConfig
from server.tier1 import LocalDurableDataLog
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from tests.support.waiting import eventually
from tests.unit.test_container_checkpoints import checkpointed, last_sequence, last_truncated, logged_operations
from wire.constants import NULL_ATTRIBUTE_VALUE

SEGMENT = "scope/busy/0.#epoch.0"
RETENTION_MS = 60_000
WRITERS = 20_000


class Clock:
    def __init__(self):
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


def container(tmp_path, chunks, clock: Clock) -> SegmentContainer:
    log = LocalDurableDataLog(tmp_path / "log", file_size=1 << 20, max_append_size=64 * 1024, spare_files_max=0)
    return SegmentContainer(0, log, wall_clock_ms=clock, writer_retention_seconds=RETENTION_MS / 1000,
                            checkpoint_interval_seconds=0.2,
                            tier2=Tier2Settings(chunks, CacheManager(16 << 20),
                                                writer=StorageWriterConfig(flush_size=1024, flush_interval=0.05)))


def writer(number: int) -> uuid.UUID:
    return uuid.UUID(int=number + 1)


async def write_once(owner: SegmentContainer, numbers) -> None:
    """Each writer appends one event (event number 0) and goes away."""
    await asyncio.gather(*(owner.submit_event_append(SEGMENT, b"e", writer(number), 0, NULL_ATTRIBUTE_VALUE, 1)
                           for number in numbers))


async def started(tmp_path) -> tuple[SegmentContainer, Clock, InMemoryChunkStorage]:
    """A started container holding SEGMENT, its clock, and its Tier-2 (for restarts on the same log)."""
    clock, chunks = Clock(), InMemoryChunkStorage()
    owner = container(tmp_path, chunks, clock)
    await owner.start()
    await owner.create_segment(SEGMENT)
    return owner, clock, chunks


def snapshot_size(owner: SegmentContainer) -> int:
    return len(owner._state.snapshot())  # white box: what the next checkpoint writes


async def test_writers_that_went_away_expire_and_their_checkpoint_cost_goes_with_them(tmp_path):
    owner, clock, chunks = await started(tmp_path)
    empty = snapshot_size(owner)
    for start in range(0, WRITERS, 5_000):
        await write_once(owner, range(start, start + 5_000))
    assert owner.writer_attribute_count() == WRITERS
    assert snapshot_size(owner) > empty + WRITERS * 40  # each id: its value and its last use

    clock.now_ms += RETENTION_MS // 2
    await write_once(owner, [WRITERS])  # a writer still at work
    assert await owner.expire_writers() == 0  # nobody idle for the retention yet
    clock.now_ms += RETENTION_MS // 2 + 1
    assert await owner.expire_writers() == WRITERS
    assert owner.writer_attribute_count() == 1
    assert owner.get_attribute(SEGMENT, writer(0)) == NULL_ATTRIBUTE_VALUE
    assert owner.get_attribute(SEGMENT, writer(WRITERS)) == 0
    assert owner.get_info(SEGMENT).length == WRITERS + 1
    assert snapshot_size(owner) < empty + 100
    # The event count is a core attribute: it never expires.
    assert owner.get_attribute(SEGMENT, attrs.EVENT_COUNT) == WRITERS + 1
    await checkpointed(owner)
    await owner.stop()

    again = container(tmp_path, chunks, clock)
    await again.start()
    assert again.get_attribute(SEGMENT, writer(0)) == NULL_ATTRIBUTE_VALUE
    assert again.get_attribute(SEGMENT, writer(WRITERS)) == 0
    assert again.writer_attribute_count() == 1
    # A writer that comes back after the retention starts afresh; its appends go on.
    await again.submit_event_append(SEGMENT, b"e", writer(0), 1, NULL_ATTRIBUTE_VALUE, 1)
    assert again.get_attribute(SEGMENT, writer(0)) == 1
    await again.stop()


async def test_a_writer_set_up_on_a_connection_keeps_its_attribute_however_idle(tmp_path):
    owner, clock, chunks = await started(tmp_path)
    await write_once(owner, [1, 2])
    first = owner.claim_writer(SEGMENT, writer(1))
    second = owner.claim_writer(SEGMENT, writer(1))  # set up again on another connection
    assert not first.live and second.live
    clock.now_ms += 10 * RETENTION_MS
    assert await owner.expire_writers() == 1
    owner.release_writer(first)  # the old connection closes: the writer is still set up on the new one
    assert await owner.expire_writers() == 0
    # Its next append still finds the event number it was set up with: no fencing error.
    await owner.submit_event_append(SEGMENT, b"e", writer(1), 1, 0, 1)
    owner.release_writer(second)
    clock.now_ms += RETENTION_MS + 1
    assert await owner.expire_writers() == 1
    assert owner.get_attribute(SEGMENT, writer(1)) == NULL_ATTRIBUTE_VALUE
    await owner.stop()


async def test_the_last_use_of_writers_survives_a_restart(tmp_path):
    """A restart neither forgets writers' idle time (they expire when due, not a retention after the restart) nor
    expires anything early; the removal is logged, so a restart after it replays it."""
    owner, clock, chunks = await started(tmp_path)
    await write_once(owner, range(10))
    clock.now_ms += RETENTION_MS // 2
    await write_once(owner, range(10, 20))
    await checkpointed(owner)
    await owner.stop()

    again = container(tmp_path, chunks, clock)
    await again.start()
    clock.now_ms += RETENTION_MS // 2 + 1
    assert await again.expire_writers() == 10
    assert [again.get_attribute(SEGMENT, writer(n)) for n in (9, 10)] == [NULL_ATTRIBUTE_VALUE, 0]
    await again.stop()  # no checkpoint after the expiry: the restart replays it

    third = container(tmp_path, chunks, clock)
    await third.start()
    assert [third.get_attribute(SEGMENT, writer(n)) for n in (9, 10)] == [NULL_ATTRIBUTE_VALUE, 0]
    assert third.writer_attribute_count() == 10
    await third.stop()


async def test_attributes_set_by_attribute_updates_never_expire_and_a_null_update_removes_one(tmp_path):
    """Only writers' attributes (set by appends) expire: an application's own (UpdateSegmentAttribute, e.g. a
    revisioned stream client's mark) stays. Setting any attribute to NULL removes it from memory and snapshots."""
    owner, clock, chunks = await started(tmp_path)
    mark, other = uuid.UUID(int=77), uuid.UUID(int=78)
    await owner.update_attributes(SEGMENT, [attrs.AttributeUpdate(mark, attrs.REPLACE, 5),
                                            attrs.AttributeUpdate(other, attrs.REPLACE, 6)])
    clock.now_ms += 10 * RETENTION_MS
    assert await owner.expire_writers() == 0
    assert owner.get_attribute(SEGMENT, mark) == 5
    await owner.update_attributes(SEGMENT, [attrs.AttributeUpdate(other, attrs.REPLACE, NULL_ATTRIBUTE_VALUE)])
    assert other not in owner._state.by_name[SEGMENT].attributes  # white box: gone, not kept as NULL
    await owner.stop()
    assert any(getattr(operation, "attributes", None) == {other: NULL_ATTRIBUTE_VALUE}
               for operation in await logged_operations(tmp_path))


async def test_an_append_decided_after_the_expiry_looked_keeps_its_writer(tmp_path):
    """The expiry is conditional on the value it saw: a writer that appends meanwhile is not removed."""
    owner, clock, chunks = await started(tmp_path)
    await write_once(owner, [1, 2])
    clock.now_ms += RETENTION_MS + 1
    racing = owner.submit_event_append(SEGMENT, b"e", writer(1), 1, 0, 1)  # decided, not yet durable
    assert await owner.expire_writers() == 1
    await racing
    assert owner.get_attribute(SEGMENT, writer(1)) == 1
    assert owner.get_attribute(SEGMENT, writer(2)) == NULL_ATTRIBUTE_VALUE
    await owner.stop()


# ---------------------------------------------------------------- deleted segments' writers (simulation seed 196)


async def test_a_deleted_segment_s_writers_outlive_it_through_restarts_and_checkpoints_until_the_retention(tmp_path):
    """A writer that lost its acks while its segment was sealed and deleted (a truncation) sets up again: the
    store still names the last event it stored there, after a restart replaying the delete and after one from a
    checkpoint holding it. Without that the writer hears only NoSuchSegment and sends every unacknowledged event
    to the successors, the ones stored here too. A segment created again under the name forgets them; so does
    the retention."""
    owner, clock, chunks = await started(tmp_path)
    await write_once(owner, [1, 2])
    await owner.submit_event_append(SEGMENT, b"e", writer(1), 5, 0, 1)
    await owner.seal(SEGMENT)
    await owner.delete(SEGMENT)
    assert [owner.deleted_writer(SEGMENT, writer(n)) for n in (1, 2, 3)] == [5, 0, None]
    assert owner.deleted_writer("scope/busy/1.#epoch.0", writer(1)) is None
    await owner.stop()

    again = container(tmp_path, chunks, clock)  # the delete replayed from the log
    await again.start()
    assert [again.deleted_writer(SEGMENT, writer(n)) for n in (1, 2, 3)] == [5, 0, None]
    durable_log = again._pipeline._log  # white box: the one log of this container
    deleted = last_sequence(durable_log)  # the delete is logged at or before this record
    await again.flush_to_storage()
    # age checkpoints follow; the storage writer's next pass truncates the log before the newest, past the delete
    await eventually(lambda: last_truncated(durable_log) > deleted, "the log to be truncated past the delete")
    await again.stop()

    third = container(tmp_path, chunks, clock)  # restored from a checkpoint's snapshot: the delete is not replayed
    await third.start()
    assert [third.deleted_writer(SEGMENT, writer(n)) for n in (1, 2)] == [5, 0]
    clock.now_ms += RETENTION_MS // 2
    await third.expire_writers()
    assert third.deleted_writer(SEGMENT, writer(1)) == 5
    clock.now_ms += RETENTION_MS // 2 + 1
    await third.expire_writers()
    assert third.deleted_writer(SEGMENT, writer(1)) is None
    await third.stop()


async def test_a_segment_created_again_under_a_deleted_one_s_name_starts_without_its_writers(tmp_path):
    owner, _, _ = await started(tmp_path)
    await write_once(owner, [1])
    await owner.delete(SEGMENT)
    assert owner.deleted_writer(SEGMENT, writer(1)) == 0
    await owner.create_segment(SEGMENT)
    assert owner.deleted_writer(SEGMENT, writer(1)) is None
    assert owner.get_attribute(SEGMENT, writer(1)) == NULL_ATTRIBUTE_VALUE
    await owner.stop()

"""Dormant segments (issue 25): a segment neither changed for the idle time nor read meanwhile keeps only its packed
snapshot record, and whatever uses it again (a read, an append, an info request, a seal, a merge, a delete, a
replayed operation) makes it live with the same metadata and bytes. A restore leaves every stream segment dormant.

Before, every segment a container ever held stayed a live object with its read index (~1 KB each, ~1.2 GB for a
million) and a restart made all of them again before serving.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import uuid

import pytest

from server import errors
from server.containers import attributes as attrs
from server.containers import operations as ops
from server.containers.cache import CacheManager
from server.containers.container import SegmentContainer, Tier2Settings
from server.containers.metadata import SegmentType
from server.containers.state import ContainerState
from server.containers.storage_writer import StorageWriterConfig
from server.tier1 import LocalDurableDataLog, LogAddress
from tests.support.doubles.chunk_storage import InMemoryChunkStorage
from tests.support.waiting import eventually
from tests.unit.test_container_checkpoints import checkpointed
from tests.unit.test_writer_expiry import Clock
from wire.constants import NULL_ATTRIBUTE_VALUE

IDLE_MS = 60_000
SEGMENTS = 300


def name_of(number: int) -> str:
    return f"scope/stream-{number}/0.#epoch.0"


def container(tmp_path, chunks, clock: Clock, tier2: bool = True, working_set: int = 100_000) -> SegmentContainer:
    log = LocalDurableDataLog(tmp_path / "log", file_size=1 << 20, max_append_size=64 * 1024, spare_files_max=0)
    settings = Tier2Settings(chunks, CacheManager(16 << 20),
                             writer=StorageWriterConfig(flush_size=1024, flush_interval=0.05)) if tier2 else None
    return SegmentContainer(0, log, wall_clock_ms=clock, segment_idle_seconds=IDLE_MS / 1000,
                            checkpoint_interval_seconds=0.2, tier2=settings, segment_working_set=working_set)


async def populated(tmp_path, chunks=None, clock=None) -> tuple[SegmentContainer, Clock, InMemoryChunkStorage]:
    """A started container holding SEGMENTS stream segments with two events each, in Tier-2, a table and a
    transient segment; the clock moved past the idle time."""
    clock, chunks = clock or Clock(), chunks or InMemoryChunkStorage()
    owner = container(tmp_path, chunks, clock)
    await owner.start()
    await asyncio.gather(*(owner.create_segment(name_of(number)) for number in range(SEGMENTS)))
    await asyncio.gather(*(owner.append(name_of(number), f"first of {number};".encode()) for number in range(SEGMENTS)))
    await asyncio.gather(*(owner.append(name_of(number), f"second of {number}".encode())
                           for number in range(SEGMENTS)))
    await owner.create_segment("scope/table", SegmentType.TABLE)
    await owner.create_transient_segment(name_of(0), uuid.uuid4())
    await owner.flush_to_storage()
    await eventually(lambda: all(not owner.writer.has_work(segment.segment_id)
                                 for segment in owner._state.by_id.values()), "the storage writer to be idle")
    clock.now_ms += IDLE_MS + 1
    return owner, clock, chunks


def expected_bytes(number: int) -> bytes:
    return f"first of {number};second of {number}".encode()


async def read_all(owner: SegmentContainer, name: str) -> bytes:
    info = owner.get_info(name)
    return await owner._reader.read_range(name, info.start_offset, info.length)  # white box: a whole-range read


async def test_idle_segments_go_dormant_and_wake_with_their_metadata_and_bytes(tmp_path):
    owner, clock, _ = await populated(tmp_path)
    before = {name_of(number): owner.get_info(name_of(number)) for number in range(SEGMENTS)}
    for segment in owner._state.by_id.values():
        segment.used = False  # the infos just read count as uses: forget them
    assert await owner.dormancy.sweep() == SEGMENTS
    assert owner.dormant_segment_count() == SEGMENTS
    assert owner._state.by_name.keys() >= {"scope/table", owner.storage_metadata_name}  # tables stay live
    assert sum(segment.segment_type is SegmentType.TRANSIENT for segment in owner._state.by_id.values()) == 1
    assert owner.segment_count() == SEGMENTS + 2  # dormant ones still count
    assert set(owner.segment_names()) >= set(before)

    for number in range(0, SEGMENTS, 7):  # a read wakes the segment: same bytes, same metadata
        name = name_of(number)
        assert await read_all(owner, name) == expected_bytes(number)
        info = owner.get_info(name)
        assert (info.length, info.start_offset, info.sealed, info.last_modified) == \
            (before[name].length, before[name].start_offset, before[name].sealed, before[name].last_modified)
        assert owner.get_attribute(name, attrs.CREATION_TIME) == before[name].attributes[attrs.CREATION_TIME]
    woken = len(range(0, SEGMENTS, 7))
    assert owner.dormant_segment_count() == SEGMENTS - woken

    # Every mutation wakes what it touches.
    assert await owner.append(name_of(1), b"+more") == before[name_of(1)].length + 5
    await owner.seal(name_of(2))
    assert owner.get_info(name_of(2)).sealed
    await owner.truncate(name_of(3), 5)
    assert owner.get_info(name_of(3)).start_offset == 5
    await owner.delete(name_of(4))
    with pytest.raises(errors.NoSuchSegment):
        owner.get_info(name_of(4))
    with pytest.raises(errors.SegmentAlreadyExists):
        await owner.create_segment(name_of(5))  # a dormant name exists
    await owner.seal(name_of(6))
    await owner.merge(name_of(8), name_of(6))
    assert await read_all(owner, name_of(8)) == expected_bytes(8) + expected_bytes(6)
    await owner.update_attributes(name_of(9), [attrs.AttributeUpdate(attrs.EVENT_COUNT, attrs.REPLACE, 42)])
    assert owner.get_attribute(name_of(9), attrs.EVENT_COUNT) == 42
    await owner.stop()


async def test_only_segments_with_nothing_to_lose_go_dormant(tmp_path):
    owner, clock, _ = await populated(tmp_path)
    for segment in owner._state.by_id.values():
        segment.used = False
    owner.get_info(name_of(0))  # read since the previous look: stays live this time
    parked = asyncio.ensure_future(owner.read(name_of(1), len(expected_bytes(1)), wait_timeout=30))  # at the tail
    await eventually(lambda: owner._state.by_name[name_of(1)].waiters, "the read to park at the tail")
    owner._state.by_name[name_of(1)].used = False  # what keeps it live is the parked read
    owner.writer._wake.clear()  # white box: the next append stays unflushed until the writer is woken
    fresh = clock.now_ms
    await owner.append(name_of(2), b"recent")  # changed within the idle time (and not in Tier-2 yet)
    assert owner._state.by_name[name_of(2)].last_modified >= fresh
    made = await owner.dormancy.sweep()
    assert made == SEGMENTS - 3
    assert {name_of(0), name_of(1), name_of(2)} <= owner._state.by_name.keys()

    await owner.append(name_of(1), b"!")  # the parked read is answered (it was not stranded on a dormant object)
    assert (await asyncio.wait_for(parked, 5)).data() == b"!"
    clock.now_ms += IDLE_MS + 1
    await owner.flush_to_storage()
    await eventually(lambda: not owner.writer.has_work(owner._state.by_name[name_of(2)].segment_id), "the flush")
    # 0: its use is a look old now; 2: flushed and idle; 1: read again once the append woke its parked read
    assert await owner.dormancy.sweep() == 2
    assert await owner.dormancy.sweep() == 1
    assert owner.dormant_segment_count() == SEGMENTS
    await owner.stop()


async def test_past_the_working_set_unused_segments_go_dormant_without_waiting_for_the_idle_time(tmp_path):
    """A burst of creations (or of reads waking dormant segments) keeps at most about the working set live,
    oldest first, the segments in use aside; the idle time plays no part."""
    clock, chunks = Clock(), InMemoryChunkStorage()
    owner = container(tmp_path, chunks, clock, working_set=100)
    await owner.start()
    for start in range(0, 1_000, 50):
        await asyncio.gather(*(owner.create_segment(name_of(number)) for number in range(start, start + 50)))
    await eventually(lambda: owner.dormancy.shrinking is None or owner.dormancy.shrinking.done(), "the shrink")
    live_streams = [segment for segment in owner._state.by_id.values() if segment.segment_type is SegmentType.STREAM]
    assert len(live_streams) <= 100 + 50, len(live_streams)  # the working set, and what came after the shrink
    assert owner.segment_count() == 1_000
    assert name_of(0) in owner._state.dormant and name_of(999) in owner._state.by_name  # the oldest went first
    for number in range(0, 1_000, 3):  # reads wake them; the working set holds again
        assert owner.get_info(name_of(number)).length == 0
        await asyncio.sleep(0)
    await eventually(lambda: owner.dormancy.shrinking.done(), "the shrink")
    assert len(owner._state.by_id) <= 100 + 150
    await owner.append(name_of(500), b"data")
    assert await read_all(owner, name_of(500)) == b"data"
    await owner.stop()


async def test_without_tier2_nothing_goes_dormant(tmp_path):
    clock = Clock()
    owner = container(tmp_path, None, clock, tier2=False)
    await owner.start()
    await owner.create_segment(name_of(0))
    await owner.append(name_of(0), b"only in the cache")
    clock.now_ms += 10 * IDLE_MS
    assert await owner.dormancy.sweep() == 0
    assert await read_all(owner, name_of(0)) == b"only in the cache"
    await owner.stop()


def truncated_to(owner: SegmentContainer, checkpoint: LogAddress) -> bool:
    """White box: the container's log starts at ``checkpoint`` (recovery replays from there)."""
    truncation = owner._log.truncation_address
    return truncation is not None and truncation.sequence >= checkpoint.sequence - 1


async def test_a_restart_restores_stream_segments_dormant_and_replays_onto_them(tmp_path):
    owner, clock, chunks = await populated(tmp_path)
    writer_id = uuid.uuid4()
    await owner.submit_event_append(name_of(10), b"by a writer", writer_id, 0, NULL_ATTRIBUTE_VALUE, 1)
    await owner.flush_to_storage()
    await eventually(lambda: not owner.writer.has_work(owner._state.by_name[name_of(10)].segment_id), "the flush")
    for segment in owner._state.by_id.values():
        segment.used = False
    clock.now_ms += IDLE_MS + 1
    assert await owner.dormancy.sweep() == SEGMENTS
    await checkpointed(owner)  # a checkpoint of dormant records...
    (_, dormant_checkpoint, _) = owner._pipeline.checkpoints[-1]  # white box: where it lies in the log
    await eventually(lambda: truncated_to(owner, dormant_checkpoint), "the log to be truncated to that checkpoint")
    await owner.append(name_of(11), b"+after")  # ...then operations on dormant segments, replayed at the restart
    await owner.seal(name_of(12))
    await checkpointed(owner)  # a later checkpoint, compared with the replayed state (matches_snapshot)
    await owner.delete(name_of(13))
    described = owner._state.describe()
    await owner.stop()

    again = container(tmp_path, chunks, clock)
    await again.start()
    assert again._state.describe() == described
    live_streams = [segment.name for segment in again._state.by_id.values()
                    if segment.segment_type is SegmentType.STREAM]
    assert len(live_streams) <= 3, live_streams  # only what the replay touched (none if the log was truncated)
    assert again.dormant_segment_count() >= SEGMENTS - 4
    assert await read_all(again, name_of(11)) == expected_bytes(11) + b"+after"
    assert again.get_info(name_of(12)).sealed
    assert again.get_attribute(name_of(10), writer_id) == 0  # the writer's attribute came back with the segment
    with pytest.raises(errors.NoSuchSegment):
        again.get_info(name_of(13))
    for number in range(20, SEGMENTS, 13):
        assert await read_all(again, name_of(number)) == expected_bytes(number)
    await again.stop()


async def test_writer_expiry_reaches_dormant_segments(tmp_path):
    clock, chunks = Clock(), InMemoryChunkStorage()
    owner = container(tmp_path, chunks, clock)
    owner.writers.retention_ms = IDLE_MS
    await owner.start()
    await owner.create_segment(name_of(0))
    await owner.submit_event_append(name_of(0), b"e", uuid.uuid4(), 0, NULL_ATTRIBUTE_VALUE, 1)
    await owner.flush_to_storage()
    await eventually(lambda: not owner.writer.has_work(owner._state.by_name[name_of(0)].segment_id), "the flush")
    clock.now_ms += IDLE_MS + 1
    assert await owner.dormancy.sweep() == 1
    assert await owner.expire_writers() == 1
    assert owner.writer_attribute_count() == 0
    assert len(owner.get_info(name_of(0)).attributes) == 3  # creation time, type, event count
    await owner.stop()


@pytest.mark.slow
def test_a_dormant_segment_costs_a_third_of_a_live_one():
    """What a million idle segments cost is what one costs times a million: measured, not assumed."""
    count = 20_000
    live = ContainerState(CacheManager(1 << 20))
    tracemalloc.start()
    try:
        start = tracemalloc.take_snapshot()
        for number in range(count):
            live.apply(ops.CreateSegment(number + 1, 0, name_of(number),
                                         {attrs.CREATION_TIME: 1_700_000_000_000, attrs.SEGMENT_TYPE: 0}),
                       1_700_000_000_000, number + 1)
        gc.collect()
        live_bytes = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(start, "filename"))
        snapshot = live.snapshot()
        del live
        gc.collect()
        start = tracemalloc.take_snapshot()
        restored = ContainerState(CacheManager(1 << 20))
        restored.restore(snapshot)
        gc.collect()
        dormant_bytes = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(start, "filename"))
    finally:
        tracemalloc.stop()
    assert len(restored.dormant) == count and not restored.by_id
    per_live, per_dormant = live_bytes / count, dormant_bytes / count
    assert per_dormant < 400, per_dormant
    assert per_dormant * 2.5 < per_live, (per_live, per_dormant)
    assert restored.snapshot() == snapshot  # dormant records are written back verbatim


def created(state: ContainerState, number: int, policy: int = 0, rate: int = 0) -> None:
    attributes = {attrs.CREATION_TIME: 1_700_000_000_000, attrs.SEGMENT_TYPE: 0}
    if policy or rate:
        attributes.update({attrs.SCALE_POLICY_TYPE: policy, attrs.SCALE_POLICY_RATE: rate})
    state.apply(ops.CreateSegment(number + 1, 0, name_of(number), attributes), 1_700_000_000_000,
                state.last_sequence + 1)


def test_a_replayed_checkpoint_is_compared_with_dormant_records():
    """A later checkpoint met in a replay must match the replayed state, dormant segments included: the same
    records pass, any difference in a dormant or a live segment fails."""
    source = ContainerState()
    for number in range(50):
        created(source, number)
    snapshot = source.snapshot()
    replayed = ContainerState()
    replayed.restore(snapshot)
    assert len(replayed.dormant) == 50 and replayed.matches_snapshot(snapshot)
    source.apply(ops.Seal(7, 0), 1_700_000_000_001, source.last_sequence + 1)  # id 7: name_of(6), dormant there
    assert not replayed.matches_snapshot(source.snapshot())
    replayed.apply(ops.Seal(7, 0), 1_700_000_000_001, replayed.last_sequence + 1)  # wakes it
    assert name_of(6) in replayed.by_name and replayed.matches_snapshot(source.snapshot())
    source.apply(ops.Seal(9, 0), 1_700_000_000_002, source.last_sequence + 1)
    replayed.get(name_of(8))  # live, but not sealed
    assert not replayed.matches_snapshot(source.snapshot())


def test_the_load_meter_starts_with_the_rate_policies_of_dormant_segments():
    source = ContainerState()
    created(source, 0)  # no policy attributes
    created(source, 1, policy=0, rate=0)  # a fixed number of segments
    created(source, 2, policy=1, rate=1024)  # by kilobytes
    created(source, 3, policy=2, rate=100)  # by events
    created(source, 4, policy=2, rate=100)
    source.apply(ops.Seal(5, 0), 1_700_000_000_001, source.last_sequence + 1)  # sealed: not metered
    restored = ContainerState()
    restored.restore(source.snapshot())
    assert not restored.by_id
    candidates = dict(restored.policy_candidates())
    assert set(candidates) == {name_of(2), name_of(3)}
    assert candidates[name_of(3)][attrs.SCALE_POLICY_RATE] == 100
    assert len(restored.dormant) == 5  # looked at, not woken

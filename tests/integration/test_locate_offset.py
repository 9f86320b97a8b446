"""LocateOffset over the wire against the real segment store: the first event boundary at or after a
target, checked against brute force for events of random sizes, with data cached, flushed to Tier-2 and
evicted, recovered after a restart, truncated, merged (a transaction, a large event), and for segments
whose bytes are not events."""

from __future__ import annotations

import asyncio
import bisect
import random
import uuid

import pytest

from clients import errors
from clients.connection import WireConnection, next_request_id
from clients.segment_store_client import SegmentStoreClient
from tests.support.processes import ServerProcess
from tests.support.segment_store import running_segment_store
from wire import commands as c
from wire.envelope import envelope_all, envelope_header

SEGMENT = "scope/stream/0.#epoch.0"
TRANSACTION = SEGMENT + "#transaction." + "0" * 31 + "1"
MiB = 1024 * 1024
# Small Tier-2 settings: a few dozen MiB are flushed, evicted, and the log truncated behind checkpoints.
SMALL = {"container_count": 2, "cache_size": 16 * MiB, "flush_size": 1 * MiB, "flush_interval": 0.2,
         "max_chunk_size": 8 * MiB, "checkpoint_every_bytes": 4 * MiB}


def rid() -> int:
    return next_request_id()


class Segment:
    """What a test wrote to one segment: its true event boundaries and payload sizes, for brute force."""

    def __init__(self, name: str):
        self.name = name
        self.start = 0
        self.boundaries = [0]  # every boundary, the length last
        self.sizes: dict[int, int] = {}  # boundary -> payload size of the event there

    @property
    def length(self) -> int:
        return self.boundaries[-1]

    def add_event(self, size: int) -> None:
        self.sizes[self.length] = size
        self.boundaries.append(self.length + 8 + size)

    def add_raw(self, size: int) -> None:
        """Bytes that are not events: a walk meeting them answers the length."""
        self.boundaries.append(self.length + size)
        if getattr(self, "garbage_from", None) is None:
            self.garbage_from = self.boundaries[-2]

    def expected(self, target: int) -> int:
        if target <= self.start:
            return self.start
        if target >= self.length:
            return self.length
        if getattr(self, "garbage_from", None) is not None and target > self.garbage_from:
            return self.length
        return self.boundaries[bisect.bisect_left(self.boundaries, target)]

    def targets(self, every: int = 1) -> list[int]:
        """Targets before the start, past the end, and at, just after, mid-header and mid-payload of
        every ``every``-th boundary."""
        found = [self.start - 5, -1, 0, self.start, self.length, self.length + 1, self.length + 10_000]
        for boundary in self.boundaries[::every]:
            size = self.sizes.get(boundary, 0)
            found += [boundary - 1, boundary, boundary + 1, boundary + 4, boundary + 7, boundary + 8,
                      boundary + 8 + size // 2, boundary + 8 + max(size - 1, 0)]
        return found


async def write_events(connection: WireConnection, segment: Segment, sizes, *, block_bytes: int = 256 * 1024,
                       seed: int = 0) -> None:
    """Appends events of these payload sizes in blocks of whole events (pipelined), recording boundaries."""
    writer = uuid.uuid4()
    setup = await connection.request(c.SetupAppend(rid(), writer, segment.name, ""))
    assert isinstance(setup, c.AppendSetup), setup
    blocks, block, block_size = [], [], 0
    for index, size in enumerate(sizes):
        if block and block_size + size + 8 > block_bytes:
            blocks.append(block)
            block, block_size = [], 0
        block.append(bytes([(seed + index) % 251]) * size)
        block_size += size + 8
    if block:
        blocks.append(block)
    futures, number = [], 0
    for block in blocks:
        number += len(block)
        data = envelope_all(block)
        request_id = rid()
        futures.append(connection.expect(request_id))
        connection.send(c.AppendBlockEnd(writer, len(data), data, len(block), number, request_id))
        for payload in block:
            segment.add_event(len(payload))
    for reply in await asyncio.wait_for(asyncio.gather(*futures), 120):
        assert isinstance(reply, c.DataAppended), reply
    assert reply.current_segment_write_offset == segment.length


async def append_raw(connection: WireConnection, segment: Segment, data: bytes) -> None:
    writer = uuid.uuid4()
    assert isinstance(await connection.request(c.SetupAppend(rid(), writer, segment.name, "")), c.AppendSetup)
    request_id = rid()
    future = connection.expect(request_id)
    connection.send(c.AppendBlockEnd(writer, len(data), data, 1, 1, request_id))
    assert isinstance(await asyncio.wait_for(future, 30), c.DataAppended)
    segment.add_raw(len(data))


async def locate_all(connection: WireConnection, name: str, targets) -> list[int]:
    """LocateOffset for every target, pipelined on one connection."""
    futures = []
    for target in targets:
        request_id = rid()
        futures.append(connection.expect(request_id))
        connection.send(c.LocateOffset(request_id, name, target, ""))
    replies = await asyncio.wait_for(asyncio.gather(*futures), 300)
    for reply in replies:
        assert isinstance(reply, c.OffsetLocated) and reply.segment == name, reply
    return [reply.offset for reply in replies]


async def check(connection: WireConnection, segment: Segment, targets) -> None:
    targets = list(targets)
    answers = await locate_all(connection, segment.name, targets)
    wrong = [(target, answer, segment.expected(target)) for target, answer in zip(targets, answers)
             if answer != segment.expected(target)]
    assert not wrong, f"{len(wrong)} wrong answers (target, answer, expected), first: {wrong[:5]}"


def random_sizes(seed: int, count: int, largest: int = 3000) -> list[int]:
    rng = random.Random(seed)
    return [rng.choice((0, 1, 7, 8, 9, rng.randint(0, largest), rng.randint(0, largest))) for _ in range(count)]


async def create(connection: WireConnection, name: str) -> None:
    reply = await connection.request(c.CreateSegment(rid(), name, 0, 0, ""))
    assert isinstance(reply, c.SegmentCreated), reply


async def flush(connection: WireConnection) -> None:
    assert isinstance(await connection.request(c.FlushToStorage(-1, "", rid()), timeout=120), c.StorageFlushed)


@pytest.fixture
async def store(tmp_path):
    async with running_segment_store(tmp_path, **SMALL) as service:
        yield service


@pytest.fixture
async def connection(store):
    connection = await WireConnection.connect("127.0.0.1", store.port)
    yield connection
    await connection.close()


async def test_every_boundary_mid_header_mid_payload_before_the_start_and_past_the_end(connection):
    """Events of random sizes (zero-length ones included): each target answers the first boundary at
    or after it; a target on a boundary answers itself."""
    segment = Segment(SEGMENT)
    await create(connection, SEGMENT)
    await write_events(connection, segment, random_sizes(seed=11, count=1500), block_bytes=20_000)
    await check(connection, segment, segment.targets())
    rng = random.Random(12)
    await check(connection, segment, [rng.randint(-100, segment.length + 100) for _ in range(2000)])


async def test_the_sdk_call_and_error_replies(store, connection):
    """SegmentStoreClient.locate_offset; a missing segment is NoSuchSegment; sealed segments are answered
    (readers of a scaled stream cut batches in them); table segments answer their length."""
    segment = Segment(SEGMENT)
    await create(connection, SEGMENT)
    await write_events(connection, segment, [5, 100, 0, 30])  # boundaries 0, 13, 121, 129, 167
    client = SegmentStoreClient(("127.0.0.1", store.port))
    try:
        assert [await client.locate_offset(SEGMENT, target) for target in (-1, 0, 1, 13, 14, 121, 122, 500)] == [
            0, 0, 13, 13, 121, 121, 129, 167]
        with pytest.raises(errors.NoSuchSegment):
            await client.locate_offset("scope/stream/7.#epoch.0", 3)
        await client.seal_segment(SEGMENT)
        assert await client.locate_offset(SEGMENT, 14) == 121
        await client.create_table("scope/_tables/t")
        await client.update_table("scope/_tables/t", [(b"key", -(2**63), b"value")])
        table_length = (await connection.request(c.GetTableSegmentInfo(rid(), "scope/_tables/t", ""))).length
        assert await client.locate_offset("scope/_tables/t", 1) == table_length
    finally:
        await client.close()


async def test_after_truncation(connection):
    """Targets at or below the new start offset answer it; later ones the boundary as before."""
    segment = Segment(SEGMENT)
    await create(connection, SEGMENT)
    await write_events(connection, segment, random_sizes(seed=21, count=800), block_bytes=10_000)
    await check(connection, segment, segment.targets(every=3))  # the index learns boundaries below the cut
    segment.start = segment.boundaries[len(segment.boundaries) // 2]
    assert isinstance(await connection.request(c.TruncateSegment(rid(), SEGMENT, segment.start, "")),
                      c.SegmentTruncated)
    await check(connection, segment, segment.targets())
    await write_events(connection, segment, random_sizes(seed=22, count=100))
    await check(connection, segment, segment.targets(every=2))


async def test_a_segment_of_many_mib_walked_across_reads_in_cache(store, connection):
    """With the boundary hints forgotten, a walk from the start crosses many reads of cached bytes."""
    segment = Segment(SEGMENT)
    await create(connection, SEGMENT)
    await write_events(connection, segment, random_sizes(seed=31, count=6000, largest=2000), block_bytes=MiB)
    container = store.container_for(SEGMENT)
    container._state.boundaries.removed(container._committed(SEGMENT))  # white box: no hints at all
    rng = random.Random(32)
    far = [rng.randint(segment.length // 2, segment.length - 1) for _ in range(5)]
    await check(connection, segment, far)  # the first walks from offset 0, over MiBs
    await check(connection, segment, segment.targets(every=7))


@pytest.mark.slow
async def test_flushed_evicted_and_after_a_restart(tmp_path):
    """~40 MiB of events with a few large ones (> 1 MiB): answers are right while the bytes are in the
    cache, once flushed to Tier-2 and evicted, and after a restart (the index starts empty for bytes
    recovered from Tier-2; appends replayed from the log feed it again)."""
    segment = Segment(SEGMENT)
    rng = random.Random(41)
    sizes = []
    for _ in range(8):
        sizes += [rng.randint(0, 30_000) for _ in range(300)]
        sizes.append(rng.randint(MiB + 1, 3 * MiB))  # a large event, in a block of its own
    async with running_segment_store(tmp_path, **SMALL) as store:
        connection = await WireConnection.connect("127.0.0.1", store.port)
        try:
            await create(connection, SEGMENT)
            await write_events(connection, segment, sizes, block_bytes=512 * 1024, seed=1)
            await check(connection, segment, segment.targets(every=5))
            await flush(connection)
            store.cache.evict()
            data = store.container_for(SEGMENT)._committed(SEGMENT).data
            assert data.storage_length == segment.length
            assert not data.is_cached(0) and not data.is_cached(segment.length // 3)  # read back from Tier-2
            await check(connection, segment, segment.targets(every=3))
            # more events after the flush: only in the log (and the cache) when the store stops
            await write_events(connection, segment, random_sizes(seed=42, count=500, largest=20_000), seed=2)
        finally:
            await connection.close()

    async with running_segment_store(tmp_path, **SMALL) as store:
        connection = await WireConnection.connect("127.0.0.1", store.port)
        try:
            info = await connection.request(c.GetStreamSegmentInfo(rid(), SEGMENT, ""))
            assert info.write_offset == segment.length
            rng = random.Random(43)
            await check(connection, segment, [rng.randint(segment.length // 2, segment.length) for _ in range(5)])
            await check(connection, segment, segment.targets(every=2))
            await write_events(connection, segment, random_sizes(seed=44, count=300), seed=3)
            await check(connection, segment, segment.targets(every=4))
        finally:
            await connection.close()


async def test_replayed_appends_feed_the_index_after_a_restart(tmp_path):
    """Without Tier-2 every append is replayed from the log on restart; the index is rebuilt from them."""
    segment = Segment(SEGMENT)
    config = {"container_count": 1, "tier2": "none"}
    async with running_segment_store(tmp_path, **config) as store:
        connection = await WireConnection.connect("127.0.0.1", store.port)
        try:
            await create(connection, SEGMENT)
            await write_events(connection, segment, random_sizes(seed=51, count=3000, largest=5000))
        finally:
            await connection.close()
    async with running_segment_store(tmp_path, **config) as store:
        container = store.container_for(SEGMENT)
        known = list(container._state.boundaries.index_of(container._committed(SEGMENT)))  # white box
        assert len(known) >= segment.length // (512 * 1024) and set(known) <= set(segment.boundaries)
        connection = await WireConnection.connect("127.0.0.1", store.port)
        try:
            await check(connection, segment, segment.targets(every=2))
        finally:
            await connection.close()


async def test_a_merged_transaction(connection):
    """Events, a transaction of events merged into the segment, then more events."""
    segment = Segment(SEGMENT)
    transaction = Segment(TRANSACTION)
    await create(connection, SEGMENT)
    await create(connection, TRANSACTION)
    await write_events(connection, segment, random_sizes(seed=61, count=400))
    await write_events(connection, transaction, random_sizes(seed=62, count=900, largest=10_000), seed=5)
    await check(connection, transaction, transaction.targets(every=3))  # the transaction learns hints itself
    merged = await connection.request(c.MergeSegments(rid(), SEGMENT, TRANSACTION, ""))
    assert isinstance(merged, c.SegmentsMerged), merged
    base = segment.length
    for boundary in transaction.boundaries[:-1]:
        segment.add_event(transaction.sizes[boundary])
    assert merged.new_target_write_offset == segment.length == base + transaction.length
    await write_events(connection, segment, random_sizes(seed=63, count=100), seed=6)
    await check(connection, segment, segment.targets())
    assert isinstance(await connection.request(c.LocateOffset(rid(), TRANSACTION, 1, "")), c.NoSuchSegment)


async def write_transient(connection: WireConnection, parent: str, data: bytes) -> str:
    """A transient segment beside ``parent`` holding ``data``, written in 8 MiB conditional appends."""
    created = await connection.request(c.CreateTransientSegment(rid(), uuid.uuid4(), parent, ""))
    assert isinstance(created, c.SegmentCreated), created
    writer = uuid.uuid4()
    assert isinstance(await connection.request(c.SetupAppend(rid(), writer, created.segment, "")), c.AppendSetup)
    chunk = 8 * MiB
    for number, start in enumerate(range(0, len(data), chunk)):
        request_id = rid()
        future = connection.expect(request_id)
        connection.send(c.ConditionalBlockEnd(writer, number, start, data[start:start + chunk], request_id))
        assert isinstance(await asyncio.wait_for(future, 30), c.DataAppended)
    return created.segment


async def test_large_events_through_transient_segments_and_one_append(connection):
    """Large events: 12 MiB written to a transient segment and merged with its header (Tributary's SDK),
    9 MiB written header included and merged plainly (the Rust client), and 3 MiB in one append.
    Targets inside them answer the boundary after them. The payloads are zeros, so a chunk of a large
    event taken for an event boundary would give wrong answers."""
    segment = Segment(SEGMENT)
    await create(connection, SEGMENT)
    await write_events(connection, segment, random_sizes(seed=71, count=200))
    payload = bytes(12 * MiB)
    transient = await write_transient(connection, SEGMENT, payload)
    merged = await connection.request(c.MergeSegmentsWithHeader(rid(), SEGMENT, transient,
                                                                envelope_header(len(payload)), ""))
    assert isinstance(merged, c.SegmentsMerged), merged
    segment.add_event(len(payload))
    await write_events(connection, segment, random_sizes(seed=72, count=50))
    payload = bytes(9 * MiB)
    transient = await write_transient(connection, SEGMENT, envelope_header(len(payload)) + payload)
    merged = await connection.request(c.MergeSegments(rid(), SEGMENT, transient, ""))
    assert isinstance(merged, c.SegmentsMerged), merged
    segment.add_event(len(payload))
    assert merged.new_target_write_offset == segment.length
    await write_events(connection, segment, [3 * MiB] + random_sizes(seed=73, count=200), block_bytes=MiB)
    await check(connection, segment, segment.targets())
    rng = random.Random(74)
    await check(connection, segment, [rng.randint(0, segment.length) for _ in range(2000)])


async def test_bytes_that_are_not_events(connection):
    """A byte stream, and events followed by raw bytes: targets the walk cannot place in events answer
    the length, and the server goes on answering."""
    raw = Segment("scope/bytes/0.#epoch.0")
    await create(connection, raw.name)
    for _ in range(3):  # appends far enough apart to be recorded, were they taken for events
        await append_raw(connection, raw, b"raw bytes of a byte stream, no envelopes here " * 7000)
    await check(connection, raw, [-1, 0, 1, 7, 8, 100, raw.length // 2, raw.length - 1, raw.length, raw.length + 1]
                + raw.boundaries)

    mixed = Segment(SEGMENT)
    await create(connection, SEGMENT)
    await write_events(connection, mixed, random_sizes(seed=81, count=300))
    await append_raw(connection, mixed, b"\x00\x00\x00\x09 not an event" * 100)
    await check(connection, mixed, mixed.targets())
    info = await connection.request(c.GetStreamSegmentInfo(rid(), SEGMENT, ""))
    assert info.write_offset == mixed.length


@pytest.mark.process
async def test_after_a_crash(tmp_path):
    """A segment store process SIGKILLed with events in Tier-2 and in the log only: after its recovery,
    every answer is right (the index is in memory only; replay and walks rebuild it)."""
    segment = Segment(SEGMENT)
    server = ServerProcess("segmentstore", tmp_path / "data", extra_args=["--containers", "2", "--log-file-size", "16"],
                           log_path=tmp_path / "server.log").start()
    try:
        connection = await WireConnection.connect("127.0.0.1", server.port)
        try:
            await create(connection, SEGMENT)
            await write_events(connection, segment, random_sizes(seed=91, count=3000, largest=4000))
            await flush(connection)
            await write_events(connection, segment, random_sizes(seed=92, count=1000, largest=4000), seed=1)
        finally:
            await connection.close()
        server.kill()
        server.start()
        connection = await WireConnection.connect("127.0.0.1", server.port)
        try:
            info = await connection.request(c.GetStreamSegmentInfo(rid(), SEGMENT, ""))
            assert info.write_offset == segment.length
            await check(connection, segment, segment.targets())
        finally:
            await connection.close()
    finally:
        server.kill()

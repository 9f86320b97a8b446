"""Tributary's SDK against `tributary standalone`: event writers, reader groups (rebalancing,
checkpoints, resets, bounded and tail reads), transactions and large events."""

from __future__ import annotations

import asyncio
import hashlib
import time

import pytest

from clients.config import WriterConfig
from clients import errors
from clients.errors import TransactionFailed
from clients.model import ScalingPolicy, StreamConfiguration, TransactionState
from clients.reader.reader_group import ReaderGroupConfig
from tests.support.sdk import check_each_once_in_key_order, event_of, parse_event, read_all, sdk, write_keyed
from tests.support.standalone import serve

pytestmark = pytest.mark.process

MIB = 1024 * 1024
FAST_GROUP = ReaderGroupConfig(reader_timeout_ms=3000, refresh_ms=100)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    yield from serve(tmp_path_factory, "sdk-events")


@pytest.fixture
async def client(standalone):
    async with sdk.connect(standalone.controller_uri) as client:
        yield client


async def stream_of(client, scope: str, stream: str = "s", segments: int = 4) -> None:
    await client.create_scope(scope)
    assert await client.create_stream(scope, stream, StreamConfiguration(ScalingPolicy.fixed(segments)))


async def test_an_event_that_fills_its_block_exactly_is_acknowledged(client):
    """The ack write() returns is the event's own, also when the event fills the append block exactly or is a
    block on its own: SegmentWriter.add once returned the next block's ack then, which never settled while
    nothing followed (found by the pravega_client compat module's writer)."""
    await stream_of(client, "fill-block", segments=1)
    config = WriterConfig(block_size_bytes=4096)
    async with client.create_writer("fill-block", "s", config=config) as writer:
        await asyncio.wait_for(await writer.write(b"x" * (4096 - 8)), 10)  # exactly one block
        await asyncio.wait_for(await writer.write(b"y" * 10_000), 10)  # more than a block
        first = await writer.write(b"a" * (2048 - 8))
        second = await writer.write(b"b" * (2048 - 8))  # the two fill the block exactly
        await asyncio.wait_for(asyncio.gather(first, second), 10)
    (events,) = await read_all(client, "fill-block", "s", "fill-block-readers")
    assert [len(event.data) for event in events] == [4088, 10_000, 2040, 2040]


async def test_keyed_events_come_back_each_once_in_key_order(client):
    """20,000 events over 13 keys into 4 segments: every ack completes, and one reader reads each
    event once, each key's in write order, from the segment its key routes to."""
    await stream_of(client, "events")
    async with client.create_writer("events", "s") as writer:
        acks = await write_keyed(writer, 20_000, 13)
        await writer.flush()
    assert all(ack.done() and ack.exception() is None for ack in acks)
    (events,) = await read_all(client, "events", "s", "g1")
    check_each_once_in_key_order([event.data for event in events], 20_000, 13)
    segment_of_key = {}
    for event in events:
        key, _ = parse_event(event.data)
        assert segment_of_key.setdefault(key, event.segment) == event.segment, f"{key} read from two segments"
    assert len(set(segment_of_key.values())) > 1


@pytest.mark.parametrize("write", ["join", "acquire"])
async def test_a_group_write_whose_reply_is_lost_is_not_done_twice_or_forgotten(client, write):
    """A reader's state write (its join, or the step that acquires the segments) is applied, but its reply is
    lost (the store crashed or the connection dropped): the client retries and finds its own write there. The
    join must not fail as "already online", and the segments the lost write acquired must still be read (found
    by the simulation, seed 111: segments owned by the reader and never read)."""
    scope = f"lost-reply-{write}"
    await stream_of(client, scope)
    async with client.create_writer(scope, "s") as writer:
        await asyncio.gather(*await write_keyed(writer, 400, keys=8))
    end = await client.tail_cut(scope, "s")
    group = await client.create_reader_group(scope, "g", ["s"], end_cuts=[end], config=FAST_GROUP)
    raw, lost = group.store._raw, []
    update_table = raw.update_table
    marker = b'"assigned":{"r":{}' if write == "join" else f'"assigned":{{"r":{{"{scope}/s/'.encode()

    async def update_losing_one_reply(table, entries, *args, **kwargs):
        result = await update_table(table, entries, *args, **kwargs)
        if not lost and marker in bytes(entries[0][2]):
            lost.append(table)  # applied, and then the connection drops before the reply is read
            if write == "acquire":  # and another write comes first: the retry's transition sees a changed state
                await group.store.update(lambda state: state.create_checkpoint("between", True, 3))
            raise errors.ConnectionFailed("the connection dropped before the reply")
        return result

    raw.update_table = update_losing_one_reply
    received = []
    async with group.create_reader("r") as reader:
        async for event in reader:
            received.append(event.data)
    assert lost, "no state write acquired segments: the test did not test"
    check_each_once_in_key_order(received, 400, keys=8)


async def test_readers_joining_later_take_a_share_and_each_event_is_read_once(client):
    """Three readers join one group at different times while a writer writes 30,000 events: the
    later readers get segments released by the first, every reader reads something, and all of
    them together read each event exactly once."""
    await stream_of(client, "share", segments=6)
    group = await client.create_reader_group("share", "g", ["s"], config=FAST_GROUP)
    count, keys = 30_000, 17
    received: list[list[bytes]] = [[], [], []]
    done = asyncio.Event()

    async def read(index: int, delay: float) -> None:
        await asyncio.sleep(delay)
        async with group.create_reader(f"r{index}") as reader:
            while not done.is_set():
                event = await reader.read_next(0.3)  # a timeout cancels nothing the group relies on
                if event is None:
                    continue
                received[index].append(event.data)
                await asyncio.sleep(0)
                if sum(map(len, received)) >= count:
                    done.set()

    async def write() -> None:
        async with client.create_writer("share", "s") as writer:
            for start in range(0, count, 1000):
                await write_keyed(writer, 1000, keys, start=start)
                await writer.flush()
                await asyncio.sleep(0.05)

    async with asyncio.timeout(120):
        await asyncio.gather(write(), read(0, 0), read(1, 0.5), read(2, 1.0))
    assert all(received), [len(r) for r in received]
    everything = [data for reader in received for data in reader]
    assert len(everything) == count and len(set(everything)) == count
    for reader in received:  # each reader sees each key's events in order
        last = {}
        for data in reader:
            key, sequence = parse_event(data)
            assert sequence > last.get(key, -1)
            last[key] = sequence


async def test_a_group_reset_to_a_checkpoint_resumes_exactly_there(client):
    """A reader that sees checkpoint events stops at a checkpoint; after reading on, the group is
    reset to that checkpoint and a new reader reads exactly the events after it."""
    await stream_of(client, "cp", segments=3)
    async with client.create_writer("cp", "s") as writer:
        await write_keyed(writer, 3000, 7)
    group = await client.create_reader_group("cp", "g", ["s"], config=FAST_GROUP)
    before, after_marker = [], []
    async with group.create_reader("r", checkpoint_events=True) as reader:
        checkpoint_task = None
        marker_seen = False
        async for event in reader:
            if event.is_checkpoint:
                assert event.checkpoint_name == "cp1"
                marker_seen = True
            else:
                (after_marker if marker_seen else before).append(event.data)
            if len(before) == 1000 and checkpoint_task is None:
                checkpoint_task = asyncio.create_task(group.initiate_checkpoint("cp1", timeout_seconds=30))
            if checkpoint_task is not None and not marker_seen:
                await asyncio.sleep(0.001)  # slow down so that the checkpoint lands mid-stream
            if marker_seen and len(before) + len(after_marker) >= 3000:
                break
        checkpoint = await checkpoint_task
    assert checkpoint.name == "cp1" and 1000 <= len(before) < 3000
    await group.reset(checkpoint)
    resumed = []
    async with group.create_reader("r2") as reader:
        async with asyncio.timeout(30):
            async for event in reader:
                resumed.append(event.data)
                if len(resumed) >= len(after_marker):
                    break
    assert sorted(resumed) == sorted(after_marker)
    assert not set(resumed) & set(before)


async def test_a_tail_reader_gets_new_events_and_a_bounded_reader_stops_at_its_end_cut(client):
    """A reader waiting at the tail receives events as they are written (within a second); a group
    bounded by an end cut ends its iteration there, even while the writer goes on."""
    await stream_of(client, "tail", segments=2)
    group = await client.create_reader_group("tail", "g", ["s"], start_at="tail", config=FAST_GROUP)
    async with group.create_reader("r") as reader, client.create_writer("tail", "s") as writer:
        for number in range(5):
            started = time.monotonic()
            await (await writer.write(event_of(0, number), "key-0"))
            async with asyncio.timeout(5):
                event = await reader.__anext__()
            assert parse_event(event.data) == ("k0", number)
            assert time.monotonic() - started < 1.0
        end = await client.tail_cut("tail", "s")
        bounded = await client.create_reader_group("tail", "bounded", ["s"], end_cuts=[end])
        await write_keyed(writer, 100, 3, start=5)
        await writer.flush()
        async with bounded.create_reader("b") as bounded_reader:
            async with asyncio.timeout(30):
                got = [event.data async for event in bounded_reader]
    assert sorted(got) == sorted(event_of(0, number) for number in range(5))


async def test_committed_transactions_appear_whole_and_aborted_ones_never(client):
    """Events of a committed transaction are all read, in key order; those of an aborted one never;
    a transaction used after its commit raises TransactionFailed."""
    await stream_of(client, "txn", segments=3)
    writer = client.create_transactional_writer("txn", "s")
    committed = await writer.begin()
    for number in range(300):
        await committed.write(event_of(number % 5, number // 5), f"key-{number % 5}")
    aborted = await writer.begin()
    await aborted.write(b"aborted", "key-0")
    await aborted.abort()
    await committed.commit(wait=True)
    assert await committed.status() is TransactionState.COMMITTED
    with pytest.raises(TransactionFailed):
        await committed.write(b"late")
    with pytest.raises(TransactionFailed):
        await committed.commit()
    assert await aborted.wait(30) is TransactionState.ABORTED
    (events,) = await read_all(client, "txn", "s", "g")
    check_each_once_in_key_order([event.data for event in events], 300, 5)


async def test_a_large_event_sits_between_its_neighbours_and_is_read_as_chunks(client):
    """A 40 MiB event written in pieces between two small events of the same key is read back in
    order, its bytes (checked by hash) as chunks; small events stay whole."""
    await stream_of(client, "large", segments=2)
    payload_hash = hashlib.sha256()
    piece = bytes(range(256)) * 4096  # 1 MiB
    async with client.create_writer("large", "s", WriterConfig(large_event_buffer_bytes=4 * MIB)) as writer:
        await writer.write(b"before", "k")
        async with writer.write_large("k") as large:
            for _ in range(40):
                await large.write(piece)
                payload_hash.update(piece)
        await writer.write(b"after", "k")
    end = await client.tail_cut("large", "s")
    group = await client.create_reader_group("large", "g", ["s"], end_cuts=[end])
    seen = []
    async with group.create_reader("r") as reader:
        async for event in reader:
            if event.data is not None:
                seen.append(event.data)
                continue
            assert event.payload_size == 40 * MIB
            read_hash, largest = hashlib.sha256(), 0
            async for chunk in event.chunks():
                read_hash.update(chunk)
                largest = max(largest, len(chunk))
            seen.append(read_hash.hexdigest())
    assert seen == [b"before", payload_hash.hexdigest(), b"after"]
    assert largest <= 2 * MIB  # chunks are at most one read: the event was never buffered whole


async def _read_past_a_truncation(client, scope: str, segments: int, keys: int) -> tuple[int, list[bytes]]:
    """Writes 2 x 100 events per segment, truncates at the cut between them (before the group's reader
    joins) and reads: returns how often TruncatedData was raised and the events read after it."""
    count = 100 * segments
    await stream_of(client, scope, segments=segments)
    async with client.create_writer(scope, "s") as writer:
        await write_keyed(writer, count, keys)
        await writer.flush()
        cut = await client.tail_cut(scope, "s")
        await write_keyed(writer, count, keys, start=count)
    group = await client.create_reader_group(scope, "g", ["s"], config=FAST_GROUP)
    await client.truncate_stream(cut)
    got, signalled = [], 0
    async with group.create_reader("r") as reader:
        while len(got) < count:
            try:
                event = await reader.read_next(5)
            except errors.TruncatedData:
                signalled += 1
                continue
            assert event is not None
            got.append(event.data)
    return signalled, got


async def test_truncation_is_signalled_and_reading_goes_on_from_the_new_head(client):
    """A reader positioned before a truncation point gets TruncatedData once, then reads on from
    the stream's new head: exactly the events after the cut."""
    signalled, got = await _read_past_a_truncation(client, "trunc", segments=1, keys=1)
    assert signalled == 1 and [parse_event(data)[1] for data in got] == list(range(100, 200))


async def test_truncation_of_several_segments_is_signalled_for_each(client):
    """Two segments truncated before the reader joins: TruncatedData comes once per segment, and then
    the events after the cut."""
    signalled, got = await _read_past_a_truncation(client, "trunc2", segments=2, keys=10)
    assert signalled == 2 and sorted(got) == sorted(event_of(n % 10, n // 10) for n in range(200, 400))


async def test_sealing_under_a_writer_fails_its_pending_and_later_writes_and_ends_readers(client):
    """Sealing the stream while a writer holds it: later writes raise StreamSealed; an unbounded
    reader reads everything that was written and then its iteration ends."""
    await stream_of(client, "seal", segments=2)
    writer = client.create_writer("seal", "s")
    await write_keyed(writer, 500, 5)
    await writer.flush()
    await client.seal_stream("seal", "s")
    with pytest.raises(errors.StreamSealed):
        for _ in range(100):  # the writer learns of the seal from its next append
            await (await writer.write(b"late", "key-0"))
    with pytest.raises(errors.StreamSealed):
        await writer.write(b"later")
    await writer.close()
    group = await client.create_reader_group("seal", "g", ["s"], config=FAST_GROUP)
    async with group.create_reader("r") as reader:
        async with asyncio.timeout(30):
            got = [event.data async for event in reader]
    check_each_once_in_key_order(got, 500, 5)


async def test_note_time_reports_the_writers_position(client):
    """note_time flushes and reports a writer mark; a mark older than the previous one is refused."""
    await stream_of(client, "marks", segments=2)
    async with client.create_writer("marks", "s", WriterConfig(writer_id="w1")) as writer:
        await write_keyed(writer, 10, 2)
        await writer.note_time(2_000_000)
        with pytest.raises(errors.InvalidArgument):
            await writer.note_time(1_000_000)

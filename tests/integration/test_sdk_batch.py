"""The SDK's batch client (slices between cuts, bulk reads) and transactions handed over by id
(``Transaction.release`` in one place, ``commit_transaction`` / ``abort_transaction`` in another),
against `tributary standalone`."""

from __future__ import annotations

import asyncio

import pytest

from clients import errors
from clients.config import WriterConfig
from clients.model import ScalingPolicy, StreamConfiguration, TransactionState
from clients.stream_cut import StreamCut
from tests.support.sdk import check_each_once_in_key_order, event_of, sdk, write_keyed
from tests.support.standalone import serve

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    yield from serve(tmp_path_factory, "sdk-batch")


@pytest.fixture
async def client(standalone):
    async with sdk.connect(standalone.controller_uri) as client:
        yield client


async def stream_of(client, scope: str, segments: int = 4) -> None:
    await client.create_scope(scope)
    assert await client.create_stream(scope, "s", StreamConfiguration(ScalingPolicy.fixed(segments)))


async def read_slices(batch, slices) -> list[tuple[int, int, bytes]]:
    """(segment id, offset, payload) of every event of every slice."""
    events = []
    for piece in slices:
        async for chunk in batch.read(piece):
            assert chunk.segment == piece.segment
            events.extend((piece.segment.segment_id, offset, payload)
                          for offset, payload in zip(chunk.offsets, chunk.payloads))
    return events


async def test_slices_cover_a_stream_once_with_exact_offsets(client):
    """Between head and tail there is one slice per segment, and reading them all returns each event once;
    every offset is the event's envelope offset (offset + 8 + size is the next event's offset)."""
    await stream_of(client, "batch-whole")
    async with client.create_writer("batch-whole", "s") as writer:
        await write_keyed(writer, 5000, keys=16, size=300)
    batch = client.create_batch_client()
    slices = await batch.slices("batch-whole", "s")
    assert len(slices) == 4 and all(piece.start_offset == 0 for piece in slices)
    events = await read_slices(batch, slices)
    check_each_once_in_key_order([payload for _, _, payload in events], 5000, 16)
    by_segment: dict[int, list] = {}
    for segment_id, offset, payload in events:
        by_segment.setdefault(segment_id, []).append((offset, len(payload)))
    for piece in slices:
        expected = 0
        for offset, size in by_segment[piece.segment.segment_id]:
            assert offset == expected
            expected = offset + 8 + size
        assert expected == piece.end_offset


async def test_a_slice_splits_at_event_boundaries_into_pieces_that_cover_it_once(client):
    """split() cuts a slice at the first event boundary at or after every max_bytes: pieces of about that
    size (at most one event more), consecutive, and together each event once, in order; a short slice and
    an event longer than max_bytes stay whole."""
    await stream_of(client, "batch-split", segments=1)
    async with client.create_writer("batch-split", "s") as writer:
        await write_keyed(writer, 3000, keys=16, size=300)  # envelopes of 8 + ~310 bytes
        await writer.write(b"x" * 50_000)  # one event longer than the pieces
        await write_keyed(writer, 100, keys=16, start=3000, size=300)
    batch = client.create_batch_client()
    (whole,) = await batch.slices("batch-split", "s")
    pieces = await batch.split(whole, 64 * 1024)
    assert abs(len(pieces) - whole.length / (64 * 1024)) <= 1.5  # the large event may swallow one cut
    assert pieces[0].start_offset == whole.start_offset and pieces[-1].end_offset == whole.end_offset
    assert all(left.end_offset == right.start_offset for left, right in zip(pieces, pieces[1:], strict=False))
    assert all(piece.length < 64 * 1024 + 400 for piece in pieces if piece.length < 50_000)
    events = await read_slices(batch, [whole])
    assert await read_slices(batch, pieces) == events  # the same events at the same offsets
    assert await batch.split(whole, whole.length) == [whole]
    middle = type(whole)(whole.segment, pieces[3].start_offset, pieces[5].end_offset)  # cut from its own start
    parts = await batch.split(middle, 64 * 1024)
    assert len(parts) == 3
    assert (parts[0].start_offset, parts[-1].end_offset) == (middle.start_offset, middle.end_offset)
    assert {part.start_offset for part in parts} <= {offset for _, offset, _ in events}
    with pytest.raises(errors.InvalidArgument):
        await batch.split(whole, 0)


async def test_slices_between_two_cuts_and_across_a_scale(client):
    """A read between two cuts returns exactly the events written between them, and a stream scaled in
    between reads its predecessors and successors; predecessors' slices come first."""
    await stream_of(client, "batch-cuts", segments=2)
    async with client.create_writer("batch-cuts", "s") as writer:
        await write_keyed(writer, 1000, keys=32)
        await writer.flush()
        start = await client.tail_cut("batch-cuts", "s")
        await write_keyed(writer, 1000, keys=32, start=1000)
        await writer.flush()
        segments = await client.get_segments("batch-cuts", "s")
        await client.scale_stream("batch-cuts", "s", [segments[0].segment], [(0.0, 0.25), (0.25, 0.5)])
        await write_keyed(writer, 1000, keys=32, start=2000)
        await writer.flush()
        end = await client.tail_cut("batch-cuts", "s")
        await write_keyed(writer, 500, keys=32, start=3000)
    batch = client.create_batch_client()
    slices = await batch.slices("batch-cuts", "s", start, end)
    ids = [piece.segment.segment_id for piece in slices]
    assert ids == sorted(ids) and len(ids) == 4, slices
    events = await read_slices(batch, slices)
    numbers = sorted(int(payload.split(b":")[1]) * 32 + int(payload[1:payload.index(b":")])
                     for _, _, payload in events)
    assert numbers == list(range(1000, 3000))


async def test_a_cut_of_another_stream_and_reversed_cuts_are_refused(client):
    await stream_of(client, "batch-bad", segments=1)
    batch = client.create_batch_client()
    with pytest.raises(errors.InvalidArgument):
        await batch.slices("batch-bad", "s", StreamCut("batch-bad", "other", {0: 0}))
    async with client.create_writer("batch-bad", "s") as writer:
        await writer.write(b"x" * 100)
    tail = await client.tail_cut("batch-bad", "s")
    with pytest.raises(errors.InvalidArgument):
        await batch.slices("batch-bad", "s", tail, StreamCut("batch-bad", "s", {0: 0}))


async def test_a_byte_stream_is_not_read_as_events(client):
    await client.create_scope("batch-bytes")
    await client.create_stream("batch-bytes", "s")
    async with client.create_byte_writer("batch-bytes", "s") as writer:
        await writer.write(b"\x07" * 64)
    batch = client.create_batch_client()
    with pytest.raises(errors.InvalidEvent):
        await read_slices(batch, await batch.slices("batch-bytes", "s"))


async def test_a_released_transaction_is_committed_elsewhere_by_id_and_kept_alive(client, standalone):
    """A transaction written in one client and released stays open past its lease (the releasing side
    pings it) and is committed by id from another client; then its events are readable."""
    await stream_of(client, "batch-txn", segments=2)
    config = WriterConfig(transaction_lease_ms=10_000)
    writer = client.create_transactional_writer("batch-txn", "s", config)
    txn = await writer.begin()
    for number in range(100):
        await txn.write(event_of(number % 4, number // 4), f"key-{number % 4}")
    transaction_id = await txn.release()
    assert txn.state == "released"
    with pytest.raises(errors.TransactionFailed):
        await txn.write(b"more")
    await asyncio.sleep(12)  # longer than the lease: only the pings keep it open
    async with sdk.connect(standalone.controller_uri) as other:
        coordinator = other.create_transactional_writer("batch-txn", "s")
        assert await coordinator.transaction_state(transaction_id) is TransactionState.OPEN
        await coordinator.commit_transaction(transaction_id, wait=True)
        await coordinator.commit_transaction(transaction_id)  # idempotent
        with pytest.raises(errors.TransactionFailed):
            await coordinator.abort_transaction(transaction_id)
        batch = other.create_batch_client()
        events = await read_slices(batch, await batch.slices("batch-txn", "s"))
    check_each_once_in_key_order([payload for _, _, payload in events], 100, 4)
    await writer.close()


async def test_transactions_of_one_writer_share_connections_and_abort_by_id(client):
    await stream_of(client, "batch-abort", segments=2)
    writer = client.create_transactional_writer("batch-abort", "s")
    first, second = await writer.begin(), await writer.begin()
    await first.write(b"a", "k")
    await second.write(b"b", "k")
    assert first._connections is second._connections  # one connection per store for all of them
    ids = [await first.release(), await second.release()]
    await writer.abort_transaction(ids[0])
    await writer.commit_transaction(ids[1], wait=True)
    assert await writer.transaction_state(ids[0]) is TransactionState.ABORTED
    with pytest.raises(errors.TransactionFailed):
        await writer.commit_transaction(ids[0], wait=True)
    batch = client.create_batch_client()
    events = await read_slices(batch, await batch.slices("batch-abort", "s"))
    assert [payload for _, _, payload in events] == [b"b"]
    await writer.close()


@pytest.mark.parametrize("scope", [".", ".."])
async def test_dot_scope_and_stream_names_work_end_to_end(client, scope):
    """Pravega's names allow "." and "..": a scope and stream so named are created, listed, written and read
    (before, the controller's metadata table for them was refused and createScope failed as retriable)."""
    assert await client.create_scope(scope)
    assert await client.create_stream(scope, "..", StreamConfiguration(ScalingPolicy.fixed(2)))
    assert [stream async for stream in client.list_streams(scope)] == [".."]
    async with client.create_writer(scope, "..") as writer:
        await writer.write_many([f"dot-{n}".encode() for n in range(20)])
    batch = client.create_batch_client()
    events = await read_slices(batch, await batch.slices(scope, ".."))
    assert sorted(payload for _, _, payload in events) == sorted(f"dot-{n}".encode() for n in range(20))

"""Byte streams of Tributary's SDK (clients.byte_stream) against `tributary standalone`: round trips,
tail reads, fencing of concurrent writers, truncation, sealing, reconnects, and interop with the real
`pravega` client in both directions."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random

import pravega_client
import pytest

from clients.byte_stream import ByteStreamReader, ByteStreamWriter
from clients.client import connect
from clients.config import WriterConfig
from clients.errors import InvalidArgument, OffsetConflict, StreamSealed, TruncatedData
from clients.model import ScalingPolicy, StreamConfiguration
from tests.support.standalone import serve
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    yield from serve(tmp_path_factory, "sdk-bytes")


@pytest.fixture
async def client(standalone):
    client = connect(standalone.controller_uri)
    try:
        yield client
    finally:
        await client.close()


async def byte_stream(client, scope: str, stream: str = "bytes") -> None:
    await client.create_scope(scope)
    assert await client.create_stream(scope, stream, StreamConfiguration(ScalingPolicy.fixed(1)))


def writer_of(client, scope: str, stream: str = "bytes", **options) -> ByteStreamWriter:
    return ByteStreamWriter(client._controller, client._stores, scope, stream, **options)


def reader_of(client, scope: str, stream: str = "bytes", **options) -> ByteStreamReader:
    return ByteStreamReader(client._controller, client._stores, scope, stream, **options)


async def read_exactly(reader: ByteStreamReader, count: int, timeout: float = 20.0) -> bytes:
    parts, got = [], 0
    async with asyncio.timeout(timeout):
        while got < count:
            chunk = await reader.read(count - got)
            assert chunk, f"end of stream after {got} of {count} bytes"
            parts.append(chunk)
            got += len(chunk)
    return b"".join(parts)


async def read_all(client, scope: str, stream: str = "bytes") -> bytes:
    """Everything from the head to the tail as it is now."""
    async with reader_of(client, scope, stream) as reader:
        return await read_exactly(reader, await reader.current_tail_offset() - reader.tell())


def pravega_manager(uri: str):
    return pravega_client.StreamManager(uri, False, False)


def pravega_read_exactly(byte_stream, count: int) -> bytes:
    """Reads ``count`` bytes with the real client's blocking readinto (it may return fewer at a time)."""
    result = bytearray()
    while len(result) < count:
        buffer = bytearray(min(count - len(result), MIB))
        got = byte_stream.readinto(buffer) or 0
        result += buffer[:got]
    return bytes(result)


async def test_round_trip_of_random_bytes_in_many_write_sizes(client):
    """About 14 MiB of random bytes written in writes of 1 byte to 9 MiB (so pieces are coalesced and
    cut at 8 MiB) come back byte for byte to a reader reading concurrently (checked by a streaming hash
    and the total length), and the offsets agree at the end."""
    await byte_stream(client, "roundtrip")
    rng = random.Random(7)
    sizes = [rng.choice([1, 2, 17, 255, 4096, 65_537, 300_000]) for _ in range(600)] + [1 * MIB + 3, 9 * MIB]
    rng.shuffle(sizes)
    data = rng.randbytes(sum(sizes))

    async def read_back() -> tuple[int, bytes]:
        digest, got = hashlib.sha256(), 0
        async with reader_of(client, "roundtrip", buffer_size=256 * 1024) as reader:
            while got < len(data):
                chunk = await reader.read(rng.choice([1, 1000, 100_000, -1]))
                digest.update(chunk)
                got += len(chunk)
            assert reader.tell() == got
        return got, digest.digest()

    reading = asyncio.create_task(read_back())
    async with writer_of(client, "roundtrip", max_inflight_bytes=16 * MIB) as writer:
        position = 0
        for size in sizes:
            await writer.write(data[position:position + size])
            position += size
        assert writer.offset == len(data)
        await writer.flush()
        assert await writer.current_tail_offset() == len(data)
        assert await writer.current_head_offset() == 0
    got, digest = await asyncio.wait_for(reading, 30)
    assert got == len(data)
    assert digest == hashlib.sha256(data).digest()


def parked_at(reader: ByteStreamReader, offset: int) -> bool:
    """White box: the reader's read at ``offset`` is sent and unanswered (the server holds it at the tail)."""
    return reader._connection is not None and reader._outstanding == offset


async def test_reader_started_before_the_writer_waits_at_the_tail_across_a_lost_connection(client):
    """A reader opened on an empty stream waits at the tail; its connection dropping while it waits (as
    when the server ends a long tail read) does not fail it: it reconnects, and gets each write as it
    comes, in order. After a seek back, the answer to the read abandoned at the tail is ignored."""
    await byte_stream(client, "tail")
    async with reader_of(client, "tail", buffer_size=16) as reader, writer_of(client, "tail") as writer:
        waiting = asyncio.create_task(reader.read(100))
        await eventually(lambda: parked_at(reader, 0), "the read to be parked at the tail")
        assert not waiting.done() and reader.available == 0 and reader.tell() == 0
        lost = reader._connection
        lost.abort()
        await eventually(lambda: reader._connection not in (None, lost) and parked_at(reader, 0),
                         "the reader to reconnect and park its read again")
        assert not waiting.done()
        await writer.write(b"hello")
        assert await asyncio.wait_for(waiting, 10) == b"hello"
        for word in (b" byte", b" streams"):
            await writer.write(word)
            await writer.flush()
            assert await read_exactly(reader, len(word)) == word
        assert reader.tell() == len(b"hello byte streams")
        await eventually(lambda: parked_at(reader, 18), "the reader's next read to be parked at the tail")
        assert await reader.seek(0) == 0
        await eventually(lambda: reader.available == 16 and reader._outstanding is None,
                         "16 bytes from 0 buffered, nothing outstanding")
        await writer.write(b"!")  # answers the abandoned read at 18: that reply must be ignored
        await writer.flush()
        await asyncio.sleep(0.1)  # the answer to the abandoned read arrives: nothing tells when it was ignored
        assert await read_exactly(reader, 19) == b"hello byte streams!"


async def test_concurrent_writers_fence_each_other_and_reset_recovers(client):
    """Two writers opened at the same tail: the second's write conflicts (OffsetConflict from flush and
    from every later call, nothing of it written) until reset() moves it to the new tail; then the first
    is fenced in turn. A writer opened after another closed appends after it."""
    await byte_stream(client, "fence")
    first, second = writer_of(client, "fence"), writer_of(client, "fence")
    async with first, second:
        assert first.offset == second.offset == 0
        await first.write(b"a" * 100)
        await first.flush()
        await second.write(b"b" * 100)
        await second.write(b"B" * 10)
        with pytest.raises(OffsetConflict):
            await second.flush()
        with pytest.raises(OffsetConflict):
            await second.write(b"c")
        await second.reset()
        assert second.offset == 100
        await second.write(b"c" * 50)
        await second.flush()
        await first.write(b"d" * 10)
        with pytest.raises(OffsetConflict):
            await first.flush()
        await first.reset()
        assert first.offset == 150
    async with writer_of(client, "fence") as third:
        assert third.offset == 150
        await third.write(b"e" * 5)
    assert await read_all(client, "fence") == b"a" * 100 + b"c" * 50 + b"e" * 5


async def test_truncation_skips_the_reader_to_the_head(client):
    """truncate_data_before(5000): a reader still at an old offset gets the bytes it had already
    buffered, then TruncatedData with its position moved to the new head, then the data from there on;
    seeking below the head or past the tail is refused, truncating below the head is a no-op and
    beyond the tail an error."""
    await byte_stream(client, "truncate")
    data = random.Random(3).randbytes(20_000)
    async with writer_of(client, "truncate") as writer, reader_of(client, "truncate", buffer_size=1024) as reader:
        await writer.write(data)
        await writer.flush()
        assert await reader.read(10) == data[:10]
        await writer.truncate_data_before(5000)
        assert await reader.current_head_offset() == 5000
        before = bytearray(data[:10])
        with pytest.raises(TruncatedData):
            while True:
                before += await reader.read()
        assert bytes(before) == data[:len(before)] and len(before) < 5000
        assert reader.tell() == 5000
        assert await read_exactly(reader, 1000) == data[5000:6000]
        with pytest.raises(InvalidArgument):
            await reader.seek(4999)
        with pytest.raises(InvalidArgument):
            await reader.seek(1, os.SEEK_END)
        assert await reader.seek(-100, os.SEEK_END) == 19_900
        assert await read_exactly(reader, 100) == data[-100:]
        await writer.truncate_data_before(100)
        assert await writer.current_head_offset() == 5000
        with pytest.raises(InvalidArgument):
            await writer.truncate_data_before(20_001)
    async with reader_of(client, "truncate") as fresh:
        assert fresh.tell() == 5000
        assert await read_exactly(fresh, 15_000) == data[5000:]


async def test_seal_ends_readers_and_refuses_writes(client):
    """seal() flushes, then seals: a reader waiting at the tail gets b"", reading to the end gives
    b"" and async iteration stops there; later writes (of this writer and of one opened afterwards,
    also once the stream itself is sealed) raise StreamSealed, and sealing again succeeds."""
    await byte_stream(client, "seal")
    data = random.Random(5).randbytes(300_000)
    async with reader_of(client, "seal") as reader, writer_of(client, "seal") as writer:
        await writer.write(data)
        assert await read_exactly(reader, len(data)) == data
        at_tail = asyncio.create_task(reader.read())
        await eventually(lambda: parked_at(reader, len(data)), "the read to be parked at the tail")
        assert not at_tail.done()
        await writer.seal()
        assert await asyncio.wait_for(at_tail, 10) == b""
        with pytest.raises(StreamSealed):
            await writer.write(b"late")
        await writer.seal()
    await client.seal_stream("seal", "bytes")  # now no current segment: found through the head cut
    async with reader_of(client, "seal") as reader:
        chunks = [chunk async for chunk in reader]
        assert b"".join(chunks) == data
        assert await reader.read() == b""
    async with writer_of(client, "seal") as late:
        assert late.offset == len(data)
        with pytest.raises(StreamSealed):
            await late.write(b"x")
        await late.seal()


async def test_interop_with_the_real_pravega_client_both_ways(client, standalone):
    """Bytes our writer writes are read back byte for byte by the real pravega ByteStream; bytes it
    writes are read by our reader, and our writer appends after them (it starts at the tail) so that
    both clients read the concatenation and agree on head and tail offsets."""
    rng = random.Random(11)
    ours, theirs, more = rng.randbytes(3 * MIB + 5), rng.randbytes(2 * MIB + 7), rng.randbytes(100_003)
    await byte_stream(client, "interop", "ours")
    await byte_stream(client, "interop2", "theirs")
    async with writer_of(client, "interop", "ours") as writer:
        for start in range(0, len(ours), 200_000):
            await writer.write(ours[start:start + 200_000])
    manager = await asyncio.to_thread(pravega_manager, standalone.controller_uri)
    stream_io = await asyncio.to_thread(manager.create_byte_stream, "interop", "ours")
    assert await asyncio.to_thread(pravega_read_exactly, stream_io, len(ours)) == ours
    assert await asyncio.to_thread(stream_io.current_tail_offset) == len(ours)

    their_io = await asyncio.to_thread(manager.create_byte_stream, "interop2", "theirs")
    for start in range(0, len(theirs), MIB):
        piece = theirs[start:start + MIB]
        assert await asyncio.to_thread(their_io.write, piece) == len(piece)
    await asyncio.to_thread(their_io.flush)
    async with writer_of(client, "interop2", "theirs") as writer:
        assert writer.offset == len(theirs)
        await writer.write(more)
    assert await read_all(client, "interop2", "theirs") == theirs + more
    assert await asyncio.to_thread(pravega_read_exactly, their_io, len(theirs) + len(more)) == theirs + more
    assert await asyncio.to_thread(their_io.current_tail_offset) == len(theirs) + len(more)
    assert await asyncio.to_thread(their_io.current_head_offset) == 0


async def test_writer_survives_dropped_connections_without_losing_or_duplicating_bytes(client):
    """The writer's connection is aborted at least ten times while appends are in flight, alternately
    just after a piece was sent (its acknowledgement is lost) and after its frames were lost on the way
    to the server: it reconnects, takes AppendSetup's event number as acknowledged and re-sends the
    rest in order, so the segment holds exactly the bytes written, once, in order; a reader reading
    meanwhile, whose connection is dropped too, sees the same."""
    await byte_stream(client, "drops")
    rng = random.Random(13)
    reader_rng = random.Random(14)  # the reader's own: the writer's sizes (and so its drops) stay fixed
    data = rng.randbytes(8 * MIB)
    received = bytearray()

    async def read_along() -> None:
        async with reader_of(client, "drops") as reader:
            while len(received) < len(data):
                received.extend(await reader.read())
                if len(received) > 2 * MIB and reader._connection is not None and reader_rng.random() < 0.05:
                    reader._connection.abort()

    reading = asyncio.create_task(read_along())
    drops = 0
    config = WriterConfig(block_size_bytes=64 * 1024)
    async with writer_of(client, "drops", config=config, max_inflight_bytes=8 * MIB) as writer:
        position, next_drop = 0, 500_000
        while position < len(data):
            at_drop = position >= next_drop
            if at_drop:
                async with asyncio.timeout(10):
                    while writer._state.value != "ready":  # let it come back from the last drop first
                        await asyncio.sleep(0.005)
            lose_frames = at_drop and drops % 2
            if lose_frames:  # from now on this connection's frames are lost on the way to the server
                writer._connection.send = lambda command: None
            for _ in range(3 if lose_frames else 1):  # 3 pieces of their own (>= the block size) to lose
                size = rng.choice([70_000, 250_000]) if lose_frames else rng.choice([1000, 30_000, 250_000])
                await writer.write(data[position:position + size])
                position = writer.offset
            if at_drop:
                await asyncio.sleep(0)  # the coalesced piece is sent (and lost, or its acknowledgement is)
                assert writer._inflight
                connection = writer._connection
                if connection is not None:  # None: the reader's abort of the connection they share came first
                    connection.abort()
                drops += 1
                next_drop = position + MIB // 3
        await writer.flush()
        assert await writer.current_tail_offset() == len(data)
    assert drops >= 10
    await asyncio.wait_for(reading, 30)
    assert hashlib.sha256(received).digest() == hashlib.sha256(data).digest()
    assert await read_all(client, "drops") == data


async def test_write_waits_only_while_the_window_is_full(client):
    """With a 256 KiB window and the connection silently losing frames, writes return at once until
    the unacknowledged bytes fill the window; then the next write waits, and goes on once the
    connection is replaced and the lost pieces are re-sent and acknowledged. Nothing is lost."""
    await byte_stream(client, "window")
    data = random.Random(17).randbytes(300_000)
    async with writer_of(client, "window", max_inflight_bytes=256 * 1024) as writer:
        lossy = writer._connection
        lossy.send = lambda command: None
        for start in range(0, 200_000, 50_000):
            await asyncio.wait_for(writer.write(data[start:start + 50_000]), 1)
        await asyncio.wait_for(writer.write(data[200_000:290_000]), 1)  # now 290,000 bytes are pending
        blocked = asyncio.create_task(writer.write(data[290_000:]))
        # Nothing can acknowledge (every frame is lost): a write that did not wait would be done within a few
        # turns of the loop, so a short while shows that it waits.
        await asyncio.sleep(0.05)
        assert not blocked.done()
        lossy.abort()
        await asyncio.wait_for(blocked, 10)
        await writer.flush()
    assert await read_all(client, "window") == data


async def test_a_stream_of_several_segments_is_not_a_byte_stream(client):
    """Opening a writer or a reader on a stream with two segments raises InvalidArgument."""
    await client.create_scope("two")
    assert await client.create_stream("two", "s", StreamConfiguration(ScalingPolicy.fixed(2)))
    with pytest.raises(InvalidArgument):
        await writer_of(client, "two", "s").open()
    with pytest.raises(InvalidArgument):
        await reader_of(client, "two", "s").open()

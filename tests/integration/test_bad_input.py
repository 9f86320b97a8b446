"""Bad input: garbage, wrong versions, oversize frames, protocol violations, unknown segments and
invalid names each get their error reply or a close of that connection only; a bystander
connection keeps working throughout."""

from __future__ import annotations

import asyncio
import struct
import uuid

import pytest

import wire
from clients.connection import WireConnection, next_request_id
from wire import commands as c
from wire.envelope import envelope
from tests.support.segment_store import running_segment_store

SEGMENT = "bad/input/0.#epoch.0"


@pytest.fixture
async def store(tmp_path):
    async with running_segment_store(tmp_path) as service:
        yield service


@pytest.fixture
async def bystander(store):
    connection = await WireConnection.connect("127.0.0.1", store.port)
    await connection.request(c.CreateSegment(next_request_id(), SEGMENT, 0, 0, ""))
    yield connection
    assert not connection.closed
    info = await connection.request(c.GetStreamSegmentInfo(next_request_id(), SEGMENT, ""))
    assert isinstance(info, c.StreamSegmentInfo)
    await connection.close()


async def raw_exchange(port: int, data: bytes, read_timeout: float = 5.0, end: bool = False) -> tuple[bytes, bool]:
    """Sends raw bytes; returns (bytes received, whether the server closed the connection).

    With ``end`` the client then ends its side of the stream, which the server answers by closing: what was
    received is everything the server ever sent on that connection, with no timeout involved.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    if end:
        writer.write_eof()
    await writer.drain()
    received = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), read_timeout):
            received += chunk
        closed = True
    except asyncio.TimeoutError:
        closed = False
    except ConnectionResetError:
        closed = True
    writer.close()
    return received, closed


def decode_all(data: bytes) -> list:
    decoder = wire.Decoder()
    decoder.feed(data)
    return list(decoder.commands())


async def test_garbage_bytes_close_the_connection(store, bystander):
    """Random bytes (an unknown type code) close the connection with no reply."""
    received, closed = await raw_exchange(store.port, b"\x13\x37" * 40)
    assert closed and received == b""


async def test_wrong_hello_version_gets_hello_then_close(store, bystander):
    """A client speaking only versions 1..3 gets the server's Hello(15, 5), then the connection closes."""
    received, closed = await raw_exchange(store.port, wire.encode(c.Hello(3, 1)))
    assert closed and decode_all(received) == [c.Hello(15, 5)]


async def test_frame_over_16_mib_is_rejected_without_buffering(store, bystander):
    """A header announcing 20 MiB closes the connection at once, before any payload is sent."""
    received, closed = await raw_exchange(store.port, struct.pack(">ii", c.AppendBlockEnd.TYPE, 20 << 20),
                                          read_timeout=5)
    assert closed and received == b""


async def test_negative_length_closes(store, bystander):
    received, closed = await raw_exchange(store.port, struct.pack(">ii", c.KeepAlive.TYPE, -5))
    assert closed


async def test_truncated_payload_of_a_known_command_closes(store, bystander):
    """A SetupAppend whose payload is cut short (but framed) is malformed: close."""
    frame = wire.encode(c.SetupAppend(1, uuid.uuid4(), SEGMENT, ""))
    body = frame[8:20]
    received, closed = await raw_exchange(store.port, struct.pack(">ii", c.SetupAppend.TYPE, len(body)) + body)
    assert closed and received == b""


async def test_append_without_setup_closes(store, bystander):
    received, closed = await raw_exchange(
        store.port, wire.encode(c.AppendBlockEnd(uuid.uuid4(), 9, envelope(b"x"), 1, 1, 1)))
    assert closed and received == b""


async def test_valid_requests_before_a_bad_frame_are_answered(store, bystander):
    """Frames before a malformed one in the same packet are processed and answered first."""
    request_id = next_request_id()
    data = wire.encode(c.GetStreamSegmentInfo(request_id, SEGMENT, "")) + b"\xff" * 16
    received, closed = await raw_exchange(store.port, data)
    replies = decode_all(received)
    assert closed and len(replies) == 1 and replies[0].request_id == request_id


async def test_unknown_segment_and_invalid_names(store, bystander):
    """Unknown segments get NoSuchSegment and invalid names ErrorMessage, on a connection that stays open."""
    connection = await WireConnection.connect("127.0.0.1", store.port)
    try:
        missing = await connection.request(c.SetupAppend(next_request_id(), uuid.uuid4(), "no/such/0", ""))
        assert isinstance(missing, c.NoSuchSegment)
        for name in ["", "/etc/passwd", "a//b", "a\nb"]:
            reply = await connection.request(c.CreateTableSegment(next_request_id(), name, ""))
            assert isinstance(reply, c.ErrorMessage), reply
        oversized_key = c.UpdateTableEntries(next_request_id(), SEGMENT, "",
                                             [c.TableEntry(b"k" * 8000, -(2**63), b"v" * 1_100_000)])
        assert isinstance(await connection.request(oversized_key), c.ErrorMessage)
        assert not connection.closed
    finally:
        await connection.close()


async def test_dot_names_are_ordinary_and_stay_inside_tier2(store, tmp_path):
    """Names are opaque, as in Pravega: "." and ".." are valid scope and stream names, so a name made of
    them is a segment like any other, and its Tier-2 chunks stay under the Tier-2 directory."""
    connection = await WireConnection.connect("127.0.0.1", store.port)
    name = "../../escaped/0.#epoch.0"
    try:
        assert isinstance(await connection.request(c.CreateSegment(next_request_id(), name, 0, 0, "")),
                          c.SegmentCreated)
        writer = uuid.uuid4()
        await connection.request(c.SetupAppend(next_request_id(), writer, name, ""))
        data = envelope(b"dotted")
        appended = await connection.request(c.AppendBlockEnd(writer, len(data), data, 1, 1, next_request_id()))
        assert isinstance(appended, c.DataAppended), appended
        assert isinstance(await connection.request(c.FlushToStorage(-1, "", next_request_id())), c.StorageFlushed)
        read = await connection.request(c.ReadSegment(name, 0, 100, "", next_request_id()))
        assert bytes(read.data) == data
    finally:
        await connection.close()
    tier2 = tmp_path / "tier2"
    assert any(path.is_file() for path in tier2.rglob("*")), "nothing was flushed"
    assert not (tmp_path.parent / "escaped").exists() and not (tmp_path / "escaped").exists()


async def test_a_hostile_flood_does_not_disturb_others(store, bystander):
    """Many connections sending garbage and half frames while a bystander keeps reading and writing; a half
    frame is never answered (each connection ends its stream, so all the server sent is seen)."""
    async def hostile(index: int):
        return await raw_exchange(store.port, struct.pack(">ii", 10, 1000) + b"x" * (index % 900), end=True)

    results = await asyncio.gather(*(hostile(i) for i in range(30)))
    assert all(received == b"" and closed for received, closed in results)
    reply = await bystander.request(c.GetStreamSegmentInfo(next_request_id(), SEGMENT, ""))
    assert isinstance(reply, c.StreamSegmentInfo)


async def test_v11_client_is_closed_instead_of_sent_error_message(store, bystander):
    """A client that said Hello(11, 5) cannot decode ErrorMessage: an invalid name closes its connection."""
    hello = wire.encode(c.Hello(11, 5))
    received, closed = await raw_exchange(store.port, hello + wire.encode(c.CreateSegment(7, "", 0, 0, "")))
    assert closed and decode_all(received) == [c.Hello(15, 5)]

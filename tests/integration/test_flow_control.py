"""Per-connection limits: a client that pipelines many large reads and never reads the replies
cannot grow the server's memory; a flood of requests is taken in bounded steps; transient segments
idle too long are expired; requests on the wrong kind of segment are refused."""

from __future__ import annotations

import asyncio
import socket
import uuid
from types import SimpleNamespace

import pytest

import wire
from clients.connection import WireConnection, next_request_id
from wire import commands as c
from server.connection import SegmentStoreConnection
from wire.constants import NO_VERSION
from tests.support.segment_store import running_segment_store

SEGMENT = "flow/control/0.#epoch.0"
WRITE_BUFFER_HIGH = 1 << 20
READ_SIZE = 2 << 20


@pytest.fixture
async def store(tmp_path):
    async with running_segment_store(tmp_path, container_count=1, write_buffer_high=WRITE_BUFFER_HIGH,
                                     transient_idle_seconds=0.3) as service:
        yield service


@pytest.fixture
def output_watch(monkeypatch):
    """Records the server's unsent output after every reply it writes (``peak``) and sets ``paused`` when a
    connection's transport first goes above its high-water mark: explicit events instead of sleeping."""
    watch = SimpleNamespace(peak=0, paused=asyncio.Event())
    send, pause_writing = SegmentStoreConnection.send, SegmentStoreConnection.pause_writing

    def recording_send(self, reply):
        send(self, reply)
        if self._transport is not None and not self._transport.is_closing():
            watch.peak = max(watch.peak, self._transport.get_write_buffer_size())

    def recording_pause_writing(self):
        pause_writing(self)
        watch.paused.set()

    monkeypatch.setattr(SegmentStoreConnection, "send", recording_send)
    monkeypatch.setattr(SegmentStoreConnection, "pause_writing", recording_pause_writing)
    return watch


async def test_slow_reader_does_not_grow_server_output(store, output_watch):
    """300 pipelined 2 MiB reads from a client that reads nothing: the server's unsent output stays
    within the high-water mark plus one reply after every reply it writes, and its request tasks within
    their limit; once the client reads, every reply arrives."""
    bound = WRITE_BUFFER_HIGH + 2 * READ_SIZE + 65536
    client = await WireConnection.connect("127.0.0.1", store.port)
    await client.request(c.CreateSegment(next_request_id(), SEGMENT, 0, 0, ""))
    writer = uuid.uuid4()
    await client.request(c.SetupAppend(next_request_id(), writer, SEGMENT, ""))
    block = b"\0\0\0\0" + (READ_SIZE - 8).to_bytes(4, "big") + b"r" * (READ_SIZE - 8)
    await client.request(c.AppendBlockEnd(writer, len(block), block, 1, 1, next_request_id()))
    await client.close()

    sock = socket.create_connection(("127.0.0.1", store.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    requests = b"".join(wire.encode(c.ReadSegment(SEGMENT, 0, READ_SIZE, "", n)) for n in range(1, 301))
    sock.sendall(wire.encode(c.Hello(15, 5)) + requests)
    await asyncio.wait_for(output_watch.paused.wait(), 20)  # the client's buffers are full: the server holds back
    (connection,) = [conn for conn in store._connections]
    assert output_watch.peak <= bound, output_watch.peak
    assert len(connection._tasks) <= connection._limits.request_tasks_max

    sock.setblocking(False)
    decoder, replies = wire.Decoder(), 0
    loop = asyncio.get_running_loop()
    while replies < 301:
        data = await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 20)
        assert data, "server closed the connection"
        decoder.feed(data)
        for reply in decoder.commands():
            replies += 1
            assert isinstance(reply, (c.Hello, c.SegmentRead))
            assert len(connection._tasks) <= connection._limits.request_tasks_max
    assert output_watch.peak <= bound, output_watch.peak
    sock.close()


async def transient_expires(port: int, polls: int) -> bool:
    """Creates a transient segment, leaves it idle (its connection open), and says whether it is deleted
    within ``polls`` looks 50 ms apart."""
    client = await WireConnection.connect("127.0.0.1", port)
    try:
        await client.request(c.CreateSegment(next_request_id(), SEGMENT, 0, 0, ""))
        created = await client.request(c.CreateTransientSegment(next_request_id(), uuid.uuid4(), SEGMENT, ""))
        for _ in range(polls):
            reply = await client.request(c.GetStreamSegmentInfo(next_request_id(), created.segment, ""))
            if isinstance(reply, c.NoSuchSegment):
                return True
            await asyncio.sleep(0.05)
        return False
    finally:
        await client.close()


async def test_idle_transient_segments_expire(store):
    """A transient segment left idle longer than the configured time is deleted, even while its
    connection stays open."""
    assert await transient_expires(store.port, 60)


async def test_table_requests_on_a_stream_segment_are_unsupported(store):
    """Table requests on a segment that is not a table get OperationUnsupported."""
    client = await WireConnection.connect("127.0.0.1", store.port)
    await client.request(c.CreateSegment(next_request_id(), SEGMENT, 0, 0, ""))
    read = await client.request(c.ReadTable(next_request_id(), SEGMENT, "", [c.TableKey(b"k", NO_VERSION)]))
    assert isinstance(read, c.OperationUnsupported) and read.operation_name == "readTable"
    update = await client.request(c.UpdateTableEntries(next_request_id(), SEGMENT, "",
                                                       [c.TableEntry(b"k", NO_VERSION, b"v")]))
    assert isinstance(update, c.OperationUnsupported) and update.operation_name == "updateTableEntries"
    await client.close()


async def test_transient_expiry_survives_an_unexpected_error(store, caplog, monkeypatch):
    """A background loop that meets an unexpected error logs it and is started again: here the expiry
    loop fails once, and idle transient segments are still deleted afterwards."""
    container = next(iter(store.containers.values()))
    original = type(container).transients_to_expire
    failures = []

    def failing_once(self, now_ms, idle_ms):
        if not failures:
            failures.append(now_ms)
            raise RuntimeError("injected expiry failure")
        return original(self, now_ms, idle_ms)

    monkeypatch.setattr(type(container), "transients_to_expire", failing_once)
    assert await transient_expires(store.port, 100)
    assert failures, "the injected failure never happened"
    assert any("injected expiry failure" in (record.exc_text or "") or "restarting" in record.getMessage()
               for record in caplog.records)

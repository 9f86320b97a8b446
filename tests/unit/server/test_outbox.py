"""The outbox over real loopback sockets (asyncio's and uvloop's transports): frames sent from files
come out in order with the others, held frames block and unblock the writer, closing stops a send that
waits for a reader that never reads, and every lent region is released exactly once."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import struct
import time

import pytest
import uvloop

from server import outbox as outbox_module
from server.outbox import FileFrame, Outbox
from server.tier2.chunk_storage import ChunkRegion
from server.tls import server_tls_context
from tests.support.certs import make_certificates
from tests.support.waiting import eventually

LIMIT = 1 << 20
LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


class Releases:
    """Counts the releases of each region it lends."""

    def __init__(self):
        self.counts: dict[int, int] = {}

    def region(self, fd: int, offset: int, length: int) -> ChunkRegion:
        key = len(self.counts)
        self.counts[key] = 0

        def release() -> None:
            self.counts[key] += 1

        return ChunkRegion(fd, offset, length, release)

    def all_once(self) -> bool:
        return all(count == 1 for count in self.counts.values())


class Sender(asyncio.Protocol):
    """The server side: an outbox on the accepted connection, forwarding the transport's flow control."""

    def __init__(self, connected: asyncio.Future):
        self.connected = connected
        self.outbox: Outbox | None = None
        self.unblocked = 0
        self.failures: list[str] = []
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.transport = transport
        self.outbox = Outbox(transport, asyncio.get_running_loop(), limit=LIMIT, on_unblocked=self._unblocked,
                             on_failure=self.failures.append)
        self.connected.set_result(self)

    def _unblocked(self) -> None:
        self.unblocked += 1

    def resume_writing(self) -> None:
        self.outbox.writing_resumed()

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(None)


async def connected_pair() -> tuple[Sender, asyncio.StreamReader, asyncio.StreamWriter, asyncio.AbstractServer]:
    loop = asyncio.get_running_loop()
    connected = loop.create_future()
    server = await loop.create_server(lambda: Sender(connected), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=64 << 20)
    sender = await asyncio.wait_for(connected, 5)
    return sender, reader, writer, server


async def tls_pair(directory) -> tuple[Sender, asyncio.StreamReader, asyncio.StreamWriter, asyncio.AbstractServer]:
    """A sender on a TLS server connection, and a TLS client that checks the server's certificate."""
    certificates = make_certificates(directory)
    loop = asyncio.get_running_loop()
    connected = loop.create_future()
    server = await loop.create_server(lambda: Sender(connected), "127.0.0.1", 0,
                                      ssl=server_tls_context(certificates.certificate, certificates.key))
    port = server.sockets[0].getsockname()[1]
    client_context = ssl.create_default_context(cafile=str(certificates.ca))
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context, limit=64 << 20)
    sender = await asyncio.wait_for(connected, 5)
    return sender, reader, writer, server


async def released(releases: Releases) -> None:
    """Waits (bounded) for the send threads' completions to release every region once."""
    await eventually(releases.all_once, "every region to be released once", timeout=5)


def waiting_for_room(sender: Sender) -> bool:
    """White box: the outbox's file frame has filled the socket and waits for it to be writable."""
    return sender.outbox._writable is not None


async def raw_client_pair() -> tuple[Sender, socket.socket, asyncio.AbstractServer]:
    """A sender whose client is a plain blocking socket that reads only if the test makes it."""
    loop = asyncio.get_running_loop()
    connected = loop.create_future()
    server = await loop.create_server(lambda: Sender(connected), "127.0.0.1", 0)
    client = socket.create_connection(server.sockets[0].getsockname()[:2])
    return await asyncio.wait_for(connected, 5), client, server


def run(loop_name: str, coroutine_function, *args) -> None:
    loop = LOOPS[loop_name]()
    try:
        loop.run_until_complete(asyncio.wait_for(coroutine_function(*args), 60))
    finally:
        loop.close()


def run_with_file(loop_name: str, tmp_path, size: int, scenario) -> None:
    """Runs ``scenario(fd, data)`` on the named loop, ``fd`` open on a file holding ``size`` random ``data``."""
    data = os.urandom(size)
    path = tmp_path / "chunk"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        run(loop_name, scenario, fd, data)
    finally:
        os.close(fd)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_file_frames_keep_their_place_among_other_frames(tmp_path, loop_name):
    async def scenario(fd, data):
        sender, reader, writer, server = await connected_pair()
        releases = Releases()
        expected = bytearray()
        for index in range(20):  # alternate plain frames and file frames of various sizes
            plain = [f"plain {index} ".encode(), os.urandom(index * 1000)]
            sender.outbox.send(plain)
            expected += b"".join(plain)
            offset, length = index * 100_000, 1 + index * 50_000
            frame = FileFrame(f"<head {index}>".encode(), releases.region(fd, offset, length), b"<tail>")
            sender.outbox.send_file(frame)
            expected += frame.head + data[offset:offset + length] + frame.tail
        received = await reader.readexactly(len(expected))
        assert received == expected
        await released(releases)
        assert len(releases.counts) == 20
        assert not sender.failures
        writer.close()
        server.close()

    run_with_file(loop_name, tmp_path, 3 << 20, scenario)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_frames_held_behind_a_file_frame_block_the_writer_until_sent(tmp_path, loop_name):
    async def scenario(fd, data):
        sender, reader, writer, server = await connected_pair()
        releases = Releases()
        outbox = sender.outbox
        outbox.send_file(FileFrame(b"H", releases.region(fd, 0, 16 << 20), b"T"))  # more than the socket holds
        held = os.urandom(LIMIT + 1)
        outbox.send([held])  # behind the file frame, over the limit
        assert outbox.blocked and sender.unblocked == 0
        received = await reader.readexactly(1 + (16 << 20) + 1 + len(held))
        assert received == b"H" + data + b"T" + held
        assert not outbox.blocked and sender.unblocked == 1
        await released(releases)
        writer.close()
        server.close()

    run_with_file(loop_name, tmp_path, 16 << 20, scenario)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_file_frame_waits_for_bytes_the_transport_still_buffers(tmp_path, loop_name):
    async def scenario(fd, data):
        sender, reader, writer, server = await connected_pair()
        releases = Releases()
        big = os.urandom(32 << 20)  # far more than the socket takes at once: the transport buffers the rest
        sender.outbox.send([big])
        await asyncio.sleep(0)  # frames go to the transport once per turn of the loop
        assert sender.transport.get_write_buffer_size() > 0
        sender.outbox.send_file(FileFrame(b"H", releases.region(fd, 0, 1 << 20), b"T"))
        sender.outbox.send([b"after"])
        received = await reader.readexactly(len(big) + 2 + (1 << 20) + 5)
        assert received == big + b"H" + data + b"T" + b"after"
        await released(releases)
        writer.close()
        server.close()

    run_with_file(loop_name, tmp_path, 1 << 20, scenario)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_closing_stops_a_send_stuck_on_a_reader_that_never_reads(tmp_path, loop_name):
    async def scenario(fd, data):
        sender, client, server = await raw_client_pair()  # the client never reads
        releases = Releases()
        sender.outbox.send_file(FileFrame(b"H", releases.region(fd, 0, 32 << 20), b"T"))
        sender.outbox.send_file(FileFrame(b"H", releases.region(fd, 0, 100), b"T"))  # held
        await eventually(lambda: waiting_for_room(sender), "the first frame to wait for room in the socket")
        assert releases.counts == {0: 0, 1: 0}
        started = time.monotonic()
        sender.outbox.close()
        sender.transport.close()
        assert releases.counts[1] == 1  # a held frame is given back at once
        await eventually(lambda: releases.counts[0] > 0, "the stopped send to release its region")
        assert time.monotonic() - started < 3
        await released(releases)
        assert not sender.failures
        sender.outbox.send([b"late"])  # after close: ignored
        late = releases.region(fd, 0, 10)
        sender.outbox.send_file(FileFrame(b"", late, b""))
        assert releases.counts[2] == 1
        client.close()
        server.close()

    run_with_file(loop_name, tmp_path, 32 << 20, scenario)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_reader_that_goes_away_fails_the_send_and_releases(tmp_path, loop_name):
    async def scenario(fd, data):
        sender, client, server = await raw_client_pair()
        releases = Releases()
        sender.outbox.send_file(FileFrame(b"H", releases.region(fd, 0, 32 << 20), b"T"))
        await eventually(lambda: waiting_for_room(sender), "the socket to be full and the send to wait for room")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # the client resets the connection mid-frame
        await released(releases)
        assert sender.failures and "failed" in sender.failures[0]
        server.close()

    run_with_file(loop_name, tmp_path, 32 << 20, scenario)


class MemoryTransport:
    """A transport with no socket: the outbox must read regions itself. Counts ``writelines`` calls."""

    def __init__(self):
        self.output = bytearray()
        self.calls = 0

    def writelines(self, parts) -> None:
        self.calls += 1
        for part in parts:
            self.output += part

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name, default=None):
        return default

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_file_frames_on_a_tls_connection_arrive_encrypted_like_the_others(tmp_path, loop_name):
    """A TLS transport reports its TCP socket too: a file frame must not be sendfile'd past the encryption
    (the client then fails with WRONG_VERSION_NUMBER), but read and written through the transport."""
    async def scenario(fd, data):
        sender, reader, writer, server = await tls_pair(tmp_path / "certs")
        releases = Releases()
        sender.outbox.send([b"before "])
        sender.outbox.send_file(FileFrame(b"<", releases.region(fd, 3, 200_000), b">"))
        sender.outbox.send([b" after"])
        received = await asyncio.wait_for(reader.readexactly(7 + 200_002 + 6), 10)
        assert received == b"before <" + data[3:200_003] + b"> after"
        await released(releases)
        assert not sender.failures
        writer.close()
        server.close()

    run_with_file(loop_name, tmp_path, 1 << 20, scenario)


def test_without_a_socket_regions_are_read_and_written(tmp_path):
    async def scenario(fd, data):
        transport = MemoryTransport()
        outbox = Outbox(transport, asyncio.get_running_loop(), limit=LIMIT, on_unblocked=lambda: None,
                        on_failure=pytest.fail)
        releases = Releases()
        outbox.send([b"a"])
        outbox.send_file(FileFrame(b"<", releases.region(fd, 5, 1000), b">"))
        outbox.send([b"b"])
        await eventually(lambda: len(transport.output) >= 1004, "the frames to be written")
        assert bytes(transport.output) == b"a<" + data[5:1005] + b">b"
        await released(releases)

    run_with_file("asyncio", tmp_path, 1 << 20, scenario)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_frames_of_one_turn_of_the_loop_go_to_the_transport_in_one_call(tmp_path, loop_name):
    """Acknowledgements completed together leave in one writev; a file frame and closing flush what is
    pending first, so the byte stream keeps the order of the calls."""
    async def scenario(fd, data):
        transport = MemoryTransport()
        outbox = Outbox(transport, asyncio.get_running_loop(), limit=LIMIT, on_unblocked=lambda: None,
                        on_failure=pytest.fail)
        for frame in (b"a", b"b", b"c"):
            outbox.send([frame])
        assert transport.calls == 0
        await asyncio.sleep(0)
        assert (transport.calls, bytes(transport.output)) == (1, b"abc")
        releases = Releases()
        outbox.send([b"d"])
        outbox.send_file(FileFrame(b"<", releases.region(fd, 0, 10), b">"))
        assert bytes(transport.output) == b"abcd"  # flushed before the file frame starts
        outbox.send([b"e"])
        await eventually(lambda: len(transport.output) == 17, "the file frame and what follows")
        assert bytes(transport.output) == b"abcd<" + data[:10] + b">e"
        await released(releases)
        outbox.send([b"last"])
        outbox.close()
        assert bytes(transport.output).endswith(b"e" + b"last")  # a reply sent before closing still leaves
        await asyncio.sleep(0)
        assert transport.output.count(b"last") == 1

    run_with_file(loop_name, tmp_path, 1 << 20, scenario)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_readers_that_stop_reading_hold_no_thread_from_the_others(tmp_path, loop_name):
    """More stuck readers than send threads: a reader that reads still gets its file frame at once."""
    async def scenario(fd, data):
        stuck, releases = [], Releases()
        for _ in range(outbox_module._SEND_THREADS + 2):
            sender, client, server = await raw_client_pair()  # never reads
            sender.outbox.send_file(FileFrame(b"H", releases.region(fd, 0, 32 << 20), b"T"))
            stuck.append((sender, client, server))
        await eventually(lambda: all(waiting_for_room(stuck_sender) for stuck_sender, _, _ in stuck),
                         "every stuck frame to fill its socket")
        sender, reader, writer, server = await connected_pair()
        sender.outbox.send_file(FileFrame(b"<", releases.region(fd, 7, 4096), b">"))
        received = await asyncio.wait_for(reader.readexactly(4098), 5)
        assert received == b"<" + data[7:4103] + b">"
        writer.close()
        server.close()
        for stuck_sender, client, stuck_server in stuck:
            stuck_sender.outbox.close()
            stuck_sender.transport.close()
            client.close()
            stuck_server.close()
        await released(releases)

    run_with_file(loop_name, tmp_path, 32 << 20, scenario)

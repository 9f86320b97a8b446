"""The test proxy's blackhole (tests/support/tcp_proxy.py): a partition, not a reset. Live connections move no
byte either way and are not closed; a connection made meanwhile reaches no upstream; after heal() everything
held back arrives in order and the held connection gets through."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.tcp_proxy import FaultyProxy

HOST = "127.0.0.1"
pytestmark = pytest.mark.timeout(30)


class RecordingUpstream:
    """A loopback server that records what each connection sends and lets the test write back."""

    def __init__(self) -> None:
        self.connections: list[tuple[bytearray, asyncio.StreamWriter]] = []
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self) -> RecordingUpstream:
        self._server = await asyncio.start_server(self._handle, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())
        received = bytearray()
        self.connections.append((received, writer))
        try:
            while data := await reader.read(65536):
                received += data
        except ConnectionError:
            pass
        finally:
            writer.transport.abort()
            self._tasks.discard(asyncio.current_task())

    async def stop(self) -> None:
        self._server.close()
        for _, writer in self.connections:
            writer.transport.abort()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._server.wait_closed()


async def quiet_for(reader: asyncio.StreamReader, seconds: float) -> bool:
    """True if nothing (no byte, no EOF, no reset) arrives within ``seconds``."""
    try:
        await asyncio.wait_for(reader.read(1), seconds)
    except TimeoutError:
        return True
    return False


async def until(condition, timeout: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_a_blackhole_holds_everything_without_closing_and_heal_delivers_it():
    upstream = await RecordingUpstream().start()
    try:
        async with FaultyProxy(HOST, upstream.port) as proxy:
            reader, writer = await asyncio.open_connection(HOST, proxy.port)
            writer.write(b"before")
            await until(lambda: upstream.connections and upstream.connections[0][0] == b"before")
            received, server = upstream.connections[0]

            assert proxy.blackhole() == 1
            writer.write(b"-during")
            server.write(b"to-client")
            late_reader, late_writer = await asyncio.open_connection(HOST, proxy.port)  # accepted, reaches nothing
            late_writer.write(b"late")
            assert await quiet_for(reader, 0.3) and await quiet_for(late_reader, 0.05)
            assert received == b"before" and len(upstream.connections) == 1
            assert proxy.stats.blackhole_events == 1 and proxy.stats.held == 1
            assert proxy.faults[-1].kind == "blackhole"
            proxy.stall(0.05)  # a stall that ends inside the blackhole does not reopen anything
            await asyncio.sleep(0.1)
            assert received == b"before" and proxy.blackholed

            proxy.heal()
            assert await asyncio.wait_for(reader.readexactly(9), 2) == b"to-client"
            await until(lambda: received == b"before-during")
            await until(lambda: len(upstream.connections) == 2 and upstream.connections[1][0] == b"late")
            upstream.connections[1][1].write(b"hi")
            assert await asyncio.wait_for(late_reader.readexactly(2), 2) == b"hi"
            writer.transport.abort()
            late_writer.transport.abort()
        assert not proxy.tasks
    finally:
        await upstream.stop()

"""A wire-protocol connection to a segment store, multiplexing requests by request id.

Theory of operation. ``connect`` opens TCP, exchanges Hello and starts a
reader task that decodes replies and completes the future registered under
each reply's request id. Requests may be pipelined; replies may come in any
order. Appends are fire-and-forget frames whose acknowledgements (DataAppended
and friends, which carry the append's request id) complete the same table.
Losing the connection fails every pending future with ConnectionFailed,
chained to its cause.
"""

from __future__ import annotations

import asyncio
import itertools

import wire
from wire import commands as wc

from .errors import ConnectionFailed, ProtocolViolation

_request_ids = itertools.count(1)


# Bytes the stream reader may buffer before it stops reading the socket, and the most one read takes:
# large enough that a 2 MiB SegmentRead arrives in a few reads, not dozens of 64 KiB ones.
_STREAM_BUFFER = 4 * 1024 * 1024


def next_request_id() -> int:
    """A process-wide increasing request id (as the Rust client does)."""
    return next(_request_ids)


class WireConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_pending: int = 100_000):
        self._reader = reader
        self._writer = writer
        self._decoder = wire.Decoder()
        self._pending: dict[int, asyncio.Future] = {}
        self._max_pending = max_pending
        self._failure: BaseException | None = None
        self._reader_task: asyncio.Task | None = None
        self.server_versions: tuple[int, int] | None = None

    @classmethod
    async def connect(cls, host: str, port: int, timeout: float = 10.0) -> "WireConnection":
        """Connects and completes the Hello exchange. Raises ConnectionFailed."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=_STREAM_BUFFER), timeout)
        except (OSError, asyncio.TimeoutError) as error:
            raise ConnectionFailed(f"cannot connect to {host}:{port}: {error!r}") from error
        connection = cls(reader, writer)
        hello_future = connection._register(0)
        connection._reader_task = asyncio.get_running_loop().create_task(connection._read_replies())
        connection.send(wc.Hello(wire.WIRE_VERSION, wire.OLDEST_COMPATIBLE_VERSION))
        hello = await asyncio.wait_for(hello_future, timeout)
        connection.server_versions = (hello.high_version, hello.low_version)
        return connection

    @property
    def closed(self) -> bool:
        return self._failure is not None

    def send(self, command) -> None:
        """Writes one frame (no reply is awaited). Raises ConnectionFailed."""
        if self._failure is not None:
            raise ConnectionFailed("connection is closed") from self._failure
        self._writer.writelines(wire.encode_parts(command))

    def expect(self, request_id: int) -> asyncio.Future:
        """Registers interest in the reply carrying ``request_id`` (before sending its request)."""
        if self._failure is not None:
            raise ConnectionFailed("connection is closed") from self._failure
        return self._register(request_id)

    async def request(self, command, timeout: float | None = 30.0):
        """Sends ``command`` and returns its reply (error replies are returned, not raised)."""
        future = self.expect(command.request_id)
        self.send(command)
        return await asyncio.wait_for(future, timeout)

    async def drain(self) -> None:
        await self._writer.drain()

    async def close(self) -> None:
        self._fail(ConnectionFailed("closed by the client"))
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except OSError:
            pass
        if self._reader_task is not None:
            self._reader_task.cancel()

    def _register(self, request_id: int) -> asyncio.Future:
        if len(self._pending) >= self._max_pending:
            raise ProtocolViolation(f"more than {self._max_pending} requests pending")
        if request_id in self._pending:
            raise ProtocolViolation(f"request id {request_id} is already pending")
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        return future

    async def _read_replies(self) -> None:
        try:
            while data := await self._reader.read(_STREAM_BUFFER):
                self._decoder.feed(data)
                for reply in self._decoder.commands():
                    self._deliver(reply)
            self._fail(ConnectionFailed("the server closed the connection"))
        except wire.ProtocolError as error:
            self._fail(ProtocolViolation(f"undecodable reply: {error}"))
        except (OSError, asyncio.IncompleteReadError) as error:
            self._fail(ConnectionFailed(f"connection lost: {error!r}"))

    def _deliver(self, reply) -> None:
        future = self._pending.pop(reply.request_id, None)
        if future is None:
            self._fail(ProtocolViolation(f"unsolicited reply {reply!r}"))
            self._writer.close()
            return
        if not future.done():
            future.set_result(reply)

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(ConnectionFailed(str(error)) if not isinstance(error, ConnectionFailed)
                                     else error)

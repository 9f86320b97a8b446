"""``StreamWriter``: the binding's event writer, on the SDK's :class:`~clients.writer.event_writer.EventWriter`.

``write_event`` / ``write_event_bytes`` block while the writer holds ``max_inflight_events`` events
not yet acknowledged: with the default 0, each call returns once its event is durable; with N, a
call waits for the oldest of N + 1 events (and raises its failure). ``flush`` waits for all of
them. ``write_event_async`` returns an awaitable that completes once the event is durable. Calls
take their place in the writer's order when they are made, so events of one key are stored in
call order, also for ``write_event_async`` calls awaited together. When the writer is garbage
collected it is flushed and closed in the background (the binding flushes on drop).

Events above 8 MiB are written as large events (bytes written beside the segment, then merged into
it as one event), as the Rust client does; such a write returns once the event is in the stream.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Awaitable, Generator
from typing import Any

from clients.config import WriterConfig
from clients.errors import TributaryError
from clients.writer.event_writer import EventWriter
from wire.constants import MAX_EVENT_SIZE

from ._common import Internal, check_routing_key, check_type, error_text, scoped_stream_text
from ._connection import Connection
from ._runtime import Runtime

WRITE_TIMEOUT_SECONDS = 120.0  # how long a blocking write waits for its acknowledgement (the binding's bound)

# The SDK's SegmentWriter.add returns the ack of the *next* block when an event fills its block exactly
# (or alone reaches the block size), so that ack may never complete. A prime block size just under the
# largest append (8 MiB + 8) leaves one way to fill a block exactly: a single event that large, which
# goes through write_batch (whose ack is the event's own). Events of equal size never add up to a prime.
BLOCK_SIZE = 8_388_593
_ENVELOPE = 8


class _Done:
    """The acknowledgement of a large event: written and committed by the time it is accepted."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


_DONE = _Done()


class _Writer:
    """The loop-side state of one StreamWriter: the SDK writer and the acknowledgements held."""

    def __init__(self, writer: EventWriter, max_inflight: int):
        self.writer = writer
        self.max_inflight = max_inflight
        self.inflight: deque[Awaitable[None]] = deque()
        self.order = asyncio.Lock()  # FIFO: writes enter the SDK writer in the order they were called

    async def _accept(self, payload: bytes, routing_key: str | None) -> Awaitable[None]:
        """Hands the event to the SDK writer; returns what completes once it is durable."""
        async with self.order:
            if len(payload) > MAX_EVENT_SIZE:  # as the Rust client: a large event (its bytes beside the segment)
                await self.writer.write_large_event(payload, routing_key)
                return _DONE
            if len(payload) + _ENVELOPE >= BLOCK_SIZE:
                return await self.writer.write_batch([payload], routing_key)
            return await self.writer.write(payload, routing_key)

    async def write(self, payload: bytes, routing_key: str | None) -> None:
        try:
            self.inflight.append(await self._accept(payload, routing_key))
            async with asyncio.timeout(WRITE_TIMEOUT_SECONDS):
                while len(self.inflight) > self.max_inflight:
                    await self.inflight.popleft()
        except TimeoutError:
            raise ValueError("Write timed out, please check connectivity with Pravega.") from None
        except TributaryError as error:
            raise ValueError(f"Error observed while writing an event: {error_text(error)}") from error

    async def write_async(self, payload: bytes, routing_key: str | None) -> None:
        try:
            await (await self._accept(payload, routing_key))
        except TributaryError as error:
            raise OSError(f"Error observed while writing an event: {error_text(error)}") from error

    async def flush(self) -> None:
        try:
            while self.inflight:
                await self.inflight.popleft()
            await self.writer.flush()
        except TributaryError as error:
            raise ValueError(f"Error observed while writing an event: {error_text(error)}") from error

    async def close(self) -> None:
        try:
            await self.writer.close()
        except TributaryError:
            pass  # the failure was raised to the application already (or nobody waited for it)


def _close_later(loop_runtime: Runtime, writer: _Writer) -> None:
    loop_runtime.later(writer.close())


class StreamWriter(Internal):
    """Writes events to one stream (made by ``StreamManager.create_writer``)."""

    _connection: Connection
    _scope: str
    _stream: str
    _writer: _Writer

    @classmethod
    def _make(cls, connection: Connection, scope: str, stream: str, max_inflight_events: int) -> StreamWriter:
        writer = cls._new()
        writer._connection, writer._scope, writer._stream = connection, scope, stream
        if max_inflight_events < 0:
            raise OverflowError("can't convert negative int to unsigned")
        writer._writer = connection.call(_make_writer(connection, scope, stream, max_inflight_events))
        weakref.finalize(writer, _close_later, connection.runtime, writer._writer)
        return writer

    def write_event(self, event: str, routing_key: str | None = None) -> None:
        """Writes ``event`` (UTF-8) with an optional routing key; blocks as the class docstring says."""
        check_type(event, str, "event")
        self.write_event_bytes(event.encode("utf-8"), routing_key)

    def write_event_async(self, event: str, routing_key: str | None = None) -> asyncio.Future[None]:
        """Writes ``event`` (UTF-8); the returned future (of the running loop) completes once it is durable.

        Raises (through the future):
            OSError: the write failed.
        """
        check_type(event, str, "event")
        check_routing_key(routing_key)
        return self._connection.runtime.for_caller(self._writer.write_async(event.encode("utf-8"), routing_key))

    def write_event_bytes(self, event: bytes, routing_key: str | None = None) -> None:
        """Writes the bytes ``event`` with an optional routing key.

        Raises:
            ValueError: the write failed (the stream is sealed or gone, the server could not be reached).
        """
        check_type(event, bytes, "event")
        check_routing_key(routing_key)
        self._connection.call(self._writer.write(event, routing_key))

    def flush(self) -> None:
        """Waits until every event written so far is durable. Raises ValueError if one failed."""
        self._connection.call(self._writer.flush())

    def to_str(self) -> str:
        return f"Stream: {scoped_stream_text(self._scope, self._stream)} "

    def __repr__(self) -> str:
        return f"StreamWriter({self.to_str()})"


async def _make_writer(connection: Connection, scope: str, stream: str, max_inflight: int) -> _Writer:
    config = WriterConfig(block_size_bytes=BLOCK_SIZE)
    return _Writer(connection.client.create_writer(scope, stream, config), max_inflight)



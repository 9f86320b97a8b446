"""Large events (PDP-43): events above 8 MiB, up to 2 GiB - 9 bytes (1 GiB tested), written as a stream.

Theory of operation. ``writer.write_large(key)`` picks the key's segment and
holds back that segment's later events, so the large event takes its place in
the writer's order at the moment it was begun; events written before it are
flushed first. On a connection of its own, it creates a transient segment beside
the target (CreateTransientSegment), and bytes go there as they come, in
chunks of up to 8 MiB pipelined as conditional appends, at most
``large_event_buffer_bytes`` in flight: client memory stays bounded whatever the
event's size. Commit is one MergeSegmentsWithHeader (Tributary's extension of
the protocol, PDP-43's "merge with header"): the server appends the event's
8-byte envelope header, whose length is only known now, and the transient
segment's bytes to the target atomically -- the event appears whole, in order,
or not at all. Abandoning the event (abort, an exception, or the process dying)
closes the dedicated connection, and the server deletes transient segments
created on a connection when it closes.

If the target was sealed by a scale meanwhile, the merge fails; the bytes are
then copied (streamed, bounded) from the transient segment to a new one beside
the successor owning the key, and merged there.
"""

from __future__ import annotations

import asyncio
import uuid
from types import TracebackType
from typing import Protocol

from wire import commands as wc
from wire.base import Reply
from wire.constants import MAX_EVENT_SIZE, NULL_ATTRIBUTE_VALUE
from wire.fields import BytesLike

from ..config import WriterConfig
from ..connection import Endpoint, WireConnection, next_request_id
from ..errors import ClosedError, InvalidArgument, NoSuchSegment, SegmentSealed, StreamSealed, TributaryError
from ..segment_store_client import raise_for
from .segment_writer import SegmentWriter, WriterGone, envelope_header

_CHUNK_MAX = MAX_EVENT_SIZE
_OPEN_ATTEMPTS = 10  # the key's segment may be sealed (scaled) while earlier events are flushed
MAX_LARGE_EVENT_SIZE = 2**31 - 1 - 8
"""The envelope's length field is a signed 32-bit integer."""


class LargeEventOwner(Protocol):
    """What a large event needs from the event writer it belongs to."""

    config: WriterConfig

    async def endpoint_of(self, segment: str) -> Endpoint: ...

    async def private_connection(self, endpoint: Endpoint) -> WireConnection: ...

    def token_for(self, segment: str) -> str: ...

    async def large_event_segment(self, routing_key: str | None) -> SegmentWriter: ...

    async def successor_for(self, sealed: str, routing_key: str | None) -> str | None: ...


class LargeEventWriter:

    """One large event being written; ``async with writer.write_large(key) as event: await event.write(b)``.

    Leaving the ``async with`` block normally commits; an exception aborts.
    """

    def __init__(self, owner: LargeEventOwner, routing_key: str | None):
        self._owner = owner
        self._key = routing_key
        self._budget = owner.config.large_event_buffer_bytes
        self._chunk_size = min(_CHUNK_MAX, max(64 * 1024, self._budget // 2))
        self._writer_id = uuid.uuid4()
        self._segment_writer: SegmentWriter | None = None
        self._connection: WireConnection | None = None
        self._transient = ""
        self._buffer = bytearray()
        self._size = 0  # bytes appended or buffered
        self._sent = 0  # bytes appended (acknowledged or in flight)
        self._event_number = 0
        self._inflight: list[tuple[asyncio.Future[Reply], int]] = []  # (future, size) of appends in flight
        self._state = "new"

    def __repr__(self) -> str:
        return f"<LargeEventWriter {self._transient or '(not open)'} {self._state} size={self._size}>"

    @property
    def transient_segment(self) -> str:
        """The transient segment holding the event's bytes until commit ("" before it is opened)."""
        return self._transient

    @property
    def size(self) -> int:
        """Bytes written so far."""
        return self._size

    async def __aenter__(self) -> LargeEventWriter:
        await self.open()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        if self._state != "open":
            return
        if exc_type is None:
            await self.commit()
        else:
            await self.abort()

    async def open(self) -> None:
        """Holds the key's segment, flushes what was written before, and creates the transient segment."""
        if self._state != "new":
            raise InvalidArgument("a large event is opened once")
        self._state = "open"
        try:
            for attempt in range(_OPEN_ATTEMPTS):
                writer = await self._owner.large_event_segment(self._key)
                boundary = writer.pause()
                self._segment_writer = writer
                try:
                    await writer.wait_acked(boundary)
                    break
                except WriterGone:
                    self._segment_writer = None
                    writer.resume()
                    if attempt == _OPEN_ATTEMPTS - 1:
                        raise
            await self._create_transient(writer.segment)
        except BaseException:
            await self.abort()
            raise

    async def _create_transient(self, parent: str) -> None:
        endpoint = await self._owner.endpoint_of(parent)
        connection = self._connection = await self._owner.private_connection(endpoint)
        token = self._owner.token_for(parent)  # the transient segment belongs to the parent's stream
        reply = await connection.request(wc.CreateTransientSegment(next_request_id(), self._writer_id,
                                                                   parent, token))
        self._transient = raise_for(reply, (wc.SegmentCreated,)).segment
        reply = await connection.request(wc.SetupAppend(next_request_id(), self._writer_id,
                                                        self._transient, token))
        setup = raise_for(reply, (wc.AppendSetup,))
        if setup.last_event_number != NULL_ATTRIBUTE_VALUE:
            raise TributaryError(f"new transient segment {self._transient} already has writer state")

    # ------------------------------------------------------------------ writing

    async def write(self, data: BytesLike) -> None:
        """Appends ``data`` to the event (waits while ``large_event_buffer_bytes`` are in flight).

        Raises:
            InvalidArgument: the event would exceed 2 GiB - 9 bytes (the envelope's length field).
            ClosedError: the event was committed or aborted.
            The transport's failure: the event is then lost; abort and write it again.
        """
        if self._state != "open":
            raise ClosedError(f"large event is {self._state}")
        if self._size + len(data) > MAX_LARGE_EVENT_SIZE:
            raise InvalidArgument(f"an event cannot exceed {MAX_LARGE_EVENT_SIZE} bytes")
        self._size += len(data)
        view = memoryview(data).cast("B")
        while view:
            room = self._chunk_size - len(self._buffer)
            self._buffer += view[:room]
            view = view[room:]
            if len(self._buffer) >= self._chunk_size:
                await self._send_chunk()

    async def _send_chunk(self) -> None:
        chunk, self._buffer = bytes(self._buffer), bytearray()
        if not chunk:
            return
        while self._inflight and self._inflight_bytes() + len(chunk) > self._budget:
            await self._settle_oldest()
        self._event_number += 1
        request_id = next_request_id()
        connection = self._open_connection
        future = connection.expect(request_id)
        connection.send(wc.ConditionalBlockEnd(self._writer_id, self._event_number, self._sent, chunk,
                                                     request_id))
        self._sent += len(chunk)
        self._inflight.append((future, len(chunk)))

    @property
    def _open_connection(self) -> WireConnection:
        """The connection to the transient segment's store (open from ``open`` until the event ends)."""
        assert self._connection is not None, "the large event is open"
        return self._connection

    def _inflight_bytes(self) -> int:
        return sum(size for _, size in self._inflight)

    async def _settle_oldest(self) -> None:
        future, _ = self._inflight.pop(0)
        raise_for(await future, (wc.DataAppended,))

    # ------------------------------------------------------------------ ending

    async def commit(self) -> None:
        """Makes the event visible: all of it, at its place in the writer's order.

        Raises:
            StreamSealed: the stream was sealed (nothing is visible).
            The transport's failure (nothing is visible; write the event again).
        """
        if self._state != "open":
            raise ClosedError(f"large event is {self._state}")
        try:
            await self._send_chunk()
            while self._inflight:
                await self._settle_oldest()
            assert self._segment_writer is not None, "an open large event holds its segment's writer"
            await self._merge(self._segment_writer.segment, self._transient)
            self._state = "committed"
        except BaseException:
            await self.abort()
            raise
        finally:
            await self._release()

    async def _merge(self, target: str, source: str) -> None:
        connection = self._open_connection
        reply = await connection.request(wc.MergeSegmentsWithHeader(
            next_request_id(), target, source, envelope_header(self._size), self._owner.token_for(target)),
            timeout=None)
        try:
            raise_for(reply, (wc.SegmentsMerged,))
        except (SegmentSealed, NoSuchSegment):
            info = await connection.request(wc.GetStreamSegmentInfo(next_request_id(), target,
                                                                    self._owner.token_for(target)))
            if isinstance(info, wc.StreamSegmentInfo) and info.exists and not info.is_sealed:
                raise
            await self._merge_into_successor(target)

    async def _merge_into_successor(self, sealed: str) -> None:
        """The target was sealed by a scale: copy the bytes beside the key's successor and merge there."""
        successor = await self._owner.successor_for(sealed, self._key)
        if successor is None:
            raise StreamSealed("the stream was sealed while a large event was being written")
        old_connection, old_transient = self._open_connection, self._transient

        self._connection, self._writer_id, self._sent, self._event_number = None, uuid.uuid4(), 0, 0
        try:
            await self._create_transient(successor)
            offset = 0
            while offset < self._size:
                reply = await old_connection.request(wc.ReadSegment(
                    old_transient, offset, _CHUNK_MAX, self._owner.token_for(old_transient), next_request_id()))
                data = bytes(raise_for(reply, (wc.SegmentRead,)).data)
                offset += len(data)
                self._buffer += data
                await self._send_chunk()
            while self._inflight:
                await self._settle_oldest()
            await self._merge(successor, self._transient)
        finally:
            await old_connection.close()

    async def abort(self) -> None:
        """Abandons the event: nothing of it becomes visible, and the transient segment is deleted."""
        if self._state in ("aborted", "committed"):
            return
        self._state = "aborted"
        self._buffer = bytearray()
        for future, _ in self._inflight:
            future.cancel()
        self._inflight.clear()
        if self._connection is not None and self._transient:
            try:
                await self._connection.request(wc.DeleteSegment(
                    next_request_id(), self._transient, self._owner.token_for(self._transient)), timeout=10)
            except TributaryError:
                pass  # closing the connection deletes it too
        await self._release()

    async def _release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()
        writer, self._segment_writer = self._segment_writer, None
        if writer is not None:
            writer.resume()


__all__ = ["LargeEventWriter", "MAX_LARGE_EVENT_SIZE", "WriterGone"]

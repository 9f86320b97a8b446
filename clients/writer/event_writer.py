"""The event writer: routes events by key to segment writers and keeps them flowing across scaling.

Theory of operation. ``write`` serializes the event, waits only while the
in-flight window (events and bytes written but not acknowledged) is full, picks
the segment owning the routing key's place in the key space and hands the event
to that segment's writer, returning the block's :class:`WriteAck`. Per-key order
and exactly-once delivery per writer session come from the segment writers
(``segment_writer``). When a segment is sealed (a scale), the writer asks the
controller for its successors, replaces its range in the routing map (clipped,
client reference §2.6), takes the sealed writer's unacknowledged events in order
and re-routes each by its original key: all in one step of the event loop, so no
event written meanwhile can overtake them. An empty successor list means the
stream was sealed: pending and later writes fail with StreamSealed.

Events without a routing key have no order to keep, so they go where they cost least: a random
segment, kept while its open block fills (the "sticky" choice of Kafka's producer, KIP-480), then
another random one. A burst of keyless events becomes a few full appends, not one small append per
segment, while over time they spread over all segments as evenly as per-event choices would.

A segment writer that cannot reconnect within its retry budget fails the whole
writer: every pending ack fails with the cause and later calls raise it.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterable, Callable, Iterable, Sequence
from typing import Any

from wire.constants import MAX_EVENT_SIZE
from wire.fields import BytesLike

from ..config import WriterConfig
from ..connection import ConnectionCache, Endpoint, WireConnection
from ..controller_client import Controller
from ..errors import ClosedError, EventTooLarge, InvalidArgument, StreamSealed, TributaryError
from ..model import Segment, Successors
from ..routing import KeyHasher, RoutingKey, SegmentMap
from ..segment_stores import SegmentStores, segment_of
from ..serializers import BytesSerializer, Serializer
from ..stream_cut import StreamCut
from .acks import WriteAck
from .large_events import LargeEventWriter
from .segment_writer import SegmentWriter
from .time_mark import WriterTimeMark

_KEY_CACHE_MAX = 100_000
log = logging.getLogger("tributary.writer")


class _Phase(enum.Enum):
    NEW = "new"
    OPEN = "open"
    SEALED = "sealed"
    FAILED = "failed"
    CLOSED = "closed"


class WriterBase:
    """What event writers and transactions share: connections, endpoints, the window, failure."""

    _serialize: Callable[[Any], BytesLike] | None  # set by subclasses: None passes bytes through

    def __init__(self, controller: Controller, stores: SegmentStores, config: WriterConfig,
                 connections: ConnectionCache | None = None):
        self.config = config
        self._controller = controller
        self._stores = stores
        self._own_connections = connections is None  # else shared with other writers: not ours to close
        self._connections = stores.connection_cache() if connections is None else connections
        self._max_bytes = config.max_inflight_bytes
        self._max_events = config.max_inflight_events
        self._inflight_bytes = 0
        self._inflight_events = 0
        self._room_waiter: asyncio.Future[None] | None = None
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._failure: BaseException | None = None
        self._monitor: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ WriterOwner

    async def endpoint_of(self, segment: str) -> Endpoint:
        return await self._stores.endpoint_of(segment)

    async def connection(self, endpoint: Endpoint) -> WireConnection:
        return await self._connections.get(endpoint)

    def forget_endpoint(self, segment: str) -> None:
        self._stores.forget(segment)

    def token_for(self, segment: str) -> str:
        return self._stores.token_for(segment)

    async def private_connection(self, endpoint: Endpoint) -> WireConnection:
        return await self._stores.connect(endpoint)

    def token_expired(self, segment: str) -> None:
        self._stores.tokens.expired(segment)

    def released(self, size: int, events: int) -> None:
        self._inflight_bytes -= size
        self._inflight_events -= events
        waiter = self._room_waiter
        if waiter is not None and self._inflight_bytes < self._max_bytes and self._inflight_events < self._max_events:
            self._room_waiter = None
            if not waiter.done():
                waiter.set_result(None)
        if not self._inflight_events:
            self._wake_drained()

    def failed(self, writer: SegmentWriter, error: BaseException) -> None:
        self._fail(error)

    # ------------------------------------------------------------------ events

    @staticmethod
    def _sized(payload: object, routing_key: object) -> int:
        """The enveloped size of an event.

        Raises:
            InvalidArgument: the event is not bytes (for this serializer) or the key not a str.
            EventTooLarge: the event is above the 8 MiB of one append.
        """
        if type(payload) is not bytes and not isinstance(payload, (bytearray, memoryview)):
            raise InvalidArgument(f"events must be bytes-like for this serializer, not {type(payload).__name__}")
        if routing_key is not None and type(routing_key) is not str:
            raise InvalidArgument(f"routing keys are strings, not {type(routing_key).__name__}")
        size = len(payload) + 8
        if size > MAX_EVENT_SIZE + 8:
            raise EventTooLarge(f"an event of {size - 8} bytes is above the 8 MiB limit of one append; "
                                f"use write_large()")
        return size

    async def write_many(self, events: Iterable[Any], routing_keys: Iterable[RoutingKey] | None = None) -> None:
        """Writes each of ``events`` as ``write`` would (with ``routing_keys[i]``, or without keys), doing
        the per-call work once: for bulk loaders. ``flush()`` waits for them. Raises like ``write``."""
        await self._ready()
        serialize, sized, writer_for = self._serialize, self._sized, self._writer_for
        keys = itertools.repeat(None) if routing_keys is None else routing_keys
        for event, key in zip(events, keys, strict=False):  # keys may be an endless repeat(None)
            payload: BytesLike = event if serialize is None else serialize(event)
            size = sized(payload, key)
            if self._inflight_bytes + size > self._max_bytes or self._inflight_events >= self._max_events:
                await self._wait_for_room(size)
                await self._ready()
            writer_for(key).add(payload, key)
            self._inflight_bytes += size
            self._inflight_events += 1

    async def _ready(self) -> None:
        """Returns when events may be added (raises when they may not)."""
        raise NotImplementedError

    def _writer_for(self, routing_key: RoutingKey) -> SegmentWriter:
        """The segment writer that takes events of ``routing_key``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ window

    async def _wait_for_room(self, size: int) -> None:
        while self._inflight_bytes + size > self._max_bytes or self._inflight_events >= self._max_events:
            if self._failure is not None:
                raise self._failure
            if not self._inflight_events:
                return  # an event larger than what is left of an empty window goes alone
            if self._room_waiter is None or self._room_waiter.done():
                self._room_waiter = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._room_waiter)

    async def _wait_drained(self) -> None:
        while self._inflight_events and self._failure is None:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter
        if self._failure is not None:
            raise self._failure

    def _wake_drained(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _writers(self) -> list[SegmentWriter]:
        raise NotImplementedError

    def _fail(self, error: BaseException) -> None:
        if self._failure is not None:
            return
        self._failure = error
        for writer in self._writers():
            size, events = writer.fail_all(error)
            self._inflight_bytes -= size
            self._inflight_events -= events
            writer.close()
        if self._room_waiter is not None and not self._room_waiter.done():
            self._room_waiter.set_exception(error)
            self._room_waiter.exception()
        self._wake_drained()

    async def _watch_acks(self) -> None:
        """Drops connections on which an ack or a setup waited longer than ``ack_timeout_seconds``."""
        timeout = self.config.ack_timeout_seconds
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(1.0, timeout / 4))
            now = loop.time()
            stalled = {connection for writer in self._writers()
                       if (connection := writer.check_progress(now, timeout)) is not None}
            for connection in stalled:
                connection.abort()

    async def _close_resources(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
        for writer in self._writers():
            writer.close()
        if self._own_connections:
            await self._connections.close()


class EventWriter(WriterBase):
    """Writes events to one stream. Use as ``async with client.create_writer(scope, stream) as writer``.

    ``await writer.write(event, routing_key)`` returns a :class:`WriteAck` once the
    event is accepted (waiting only while the in-flight window is full); awaiting
    the ack waits until the event is durable. Events with the same routing key are
    stored and read in the order written; events without a key go to random
    segments, with no order among them.
    """

    def __init__(self, controller: Controller, stores: SegmentStores, scope: str, stream: str,
                 config: WriterConfig | None = None, serializer: Serializer | None = None):
        super().__init__(controller, stores, config or WriterConfig())
        self.scope = scope
        self.stream = stream
        self.writer_id = self.config.writer_id or str(uuid.uuid4())
        self._serializer = serializer or BytesSerializer()
        self._serialize = None if isinstance(self._serializer, BytesSerializer) else self._serializer.serialize
        self._phase = _Phase.NEW
        self._map: SegmentMap  # the routing map, made by start (which every path to routing goes through)
        self._segment_writers: dict[Segment, SegmentWriter] = {}
        self._key_writers: dict[str, SegmentWriter] = {}
        self._keyless: SegmentWriter | None = None  # where events without a key go while its open block fills
        self._hasher = KeyHasher()
        self._sealed: deque[SegmentWriter] = deque()
        self._seal_task: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()
        self._time_mark = WriterTimeMark(controller, self.writer_id, scope, stream)

    def __repr__(self) -> str:
        return (f"<EventWriter {self.scope}/{self.stream} {self._phase.value} segments={len(self._segment_writers)} "
                f"inflight={self._inflight_events}>")

    async def __aenter__(self) -> EventWriter:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Looks up the stream's segments and connects. Raises StreamNotFound, StreamSealed."""
        async with self._start_lock:
            if self._phase is not _Phase.NEW:
                return
            ranges = await self._controller.get_current_segments(self.scope, self.stream)
            if not ranges:
                raise StreamSealed(f"stream {self.scope}/{self.stream} is sealed")
            self._map = SegmentMap.of_ranges(ranges)
            for segment in self._map.segments:
                self._add_segment_writer(segment)
            self._monitor = asyncio.get_running_loop().create_task(self._watch_acks())
            self._phase = _Phase.OPEN

    # ------------------------------------------------------------------ writing

    async def write(self, event: Any, routing_key: str | None = None) -> WriteAck:
        """Accepts ``event`` for the segment owning ``routing_key``; returns its ack.

        Raises:
            EventTooLarge: the serialized event is larger than 8 MiB (use ``write_large``).
            InvalidArgument: the event is not bytes (for the bytes serializer) or the key not a str.
            StreamSealed: the stream is sealed.
            ClosedError: the writer was closed.
            The failure that broke the writer, if one did.
        """
        payload: BytesLike = event if self._serialize is None else self._serialize(event)
        size = self._sized(payload, routing_key)
        if self._phase is not _Phase.OPEN:
            await self._ensure_open()
        if self._inflight_bytes + size > self._max_bytes or self._inflight_events >= self._max_events:
            await self._wait_for_room(size)
            if self._phase is not _Phase.OPEN:
                await self._ensure_open()
        return self._add(payload, size, routing_key)

    def write_nowait(self, event: Any, routing_key: str | None = None) -> WriteAck | None:
        """``write`` for code that does not await (a bridge from another thread): the event's ack, or None, with
        nothing written, where ``write`` would wait (the writer is not open yet or is replacing sealed
        segments, or its in-flight window is full); call ``write`` then. Raises like ``write`` for the event."""
        payload: BytesLike = event if self._serialize is None else self._serialize(event)
        size = self._sized(payload, routing_key)
        if (self._phase is not _Phase.OPEN or self._inflight_bytes + size > self._max_bytes
                or self._inflight_events >= self._max_events):
            return None
        return self._add(payload, size, routing_key)

    def _add(self, payload: BytesLike, size: int, routing_key: RoutingKey) -> WriteAck:
        """Hands an accepted event (``size``: enveloped) to its segment's writer, counted in the window."""
        writer = self._writer_for(routing_key)
        self._inflight_bytes += size
        self._inflight_events += 1
        return writer.add(payload, routing_key)

    async def _ready(self) -> None:
        if self._phase is not _Phase.OPEN:
            await self._ensure_open()

    def _writer_for(self, routing_key: RoutingKey) -> SegmentWriter:
        if routing_key is None:
            writer = self._keyless
            if writer is None or not writer.filling():
                writer = self._keyless = self._route(None)
            return writer
        writer = self._key_writers.get(routing_key)
        return writer if writer is not None else self._route(routing_key)

    async def write_batch(self, events: Sequence[Any], routing_key: str | None = None) -> WriteAck:
        """Writes ``events`` atomically, in order, into one segment: all become visible together, or none.

        The batch must fit one append (8 MiB with envelopes). Raises like :meth:`write`.
        """
        payloads = [event if self._serialize is None else self._serialize(event) for event in events]
        if not payloads:
            raise InvalidArgument("a batch holds at least one event")
        size = sum(self._sized(payload, routing_key) for payload in payloads)
        if size > MAX_EVENT_SIZE + 8:
            raise EventTooLarge(f"a batch of {size} bytes is above the 8 MiB limit of one append")
        if self._phase is not _Phase.OPEN:
            await self._ensure_open()
        await self._wait_for_room(size)
        if self._phase is not _Phase.OPEN:
            await self._ensure_open()
        writer = self._route(routing_key)
        self._inflight_bytes += size
        self._inflight_events += len(payloads)
        return writer.add_batch(payloads, routing_key)

    async def flush(self) -> None:
        """Returns once every event written so far is durable. Raises the failure of any that failed."""
        if self._phase is _Phase.CLOSED:
            raise ClosedError(f"writer of {self.scope}/{self.stream} is closed")
        for writer in self._segment_writers.values():
            writer.flush_now()
        await self._wait_drained()

    async def close(self) -> None:
        """Flushes, then releases connections. Later writes raise ClosedError.

        A writer that noted times then tells the controller it is gone (removeWriter), so its last
        mark stops holding the stream's watermarks back; if the controller cannot be told within
        ``time_mark.REMOVE_WRITER_SECONDS_MAX``, the mark times out there instead.
        """
        if self._phase is _Phase.CLOSED:
            return
        try:
            if self._phase is _Phase.OPEN:
                await self.flush()
        finally:
            self._phase = _Phase.CLOSED
            if self._seal_task is not None:
                self._seal_task.cancel()
            await self._close_resources()
            await self._time_mark.gone()

    async def note_time(self, timestamp_ms: int | None = None) -> None:
        """Reports this writer's time mark for watermarks: every event written so far is at or before it.

        Flushes first, then sends the writer's position (the acknowledged length of each
        segment) with ``timestamp_ms`` (now, by default) to the controller.
        """
        await self.flush()
        timestamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        position = {writer_segment.segment_id: writer.write_offset
                    for writer_segment, writer in self._segment_writers.items()}
        self._time_mark.noted = True
        await self._controller.note_timestamp(self.writer_id, StreamCut(self.scope, self.stream, position), timestamp)

    # ------------------------------------------------------------------ large events

    def write_large(self, routing_key: str | None = None) -> LargeEventWriter:
        """A large event (any size up to 2 GiB - 9 bytes) written as a stream of chunks:
        ``async with writer.write_large(key) as event: await event.write(chunk)``.

        The event takes its place in this writer's order when it is opened; later events
        of its segment wait until it is committed or aborted. See ``large_events``.
        """
        return LargeEventWriter(self, routing_key)

    async def write_large_event(self, data: BytesLike | Iterable[BytesLike] | AsyncIterable[BytesLike],
                                routing_key: str | None = None) -> None:
        """Writes one large event from bytes, or from an (async) iterable of byte chunks."""
        async with self.write_large(routing_key) as event:
            if isinstance(data, (bytes, bytearray, memoryview)):
                await event.write(data)
            elif isinstance(data, AsyncIterable):
                async for chunk in data:
                    await event.write(chunk)
            else:
                for chunk in data:
                    await event.write(chunk)

    async def large_event_segment(self, routing_key: str | None) -> SegmentWriter:
        """The segment writer a large event for ``routing_key`` goes beside (after pending seals are handled)."""
        if self._phase is not _Phase.OPEN:
            await self._ensure_open()
        while self._seal_task is not None and not self._seal_task.done():
            await asyncio.shield(self._seal_task)
        if self._phase is not _Phase.OPEN:
            await self._ensure_open()
        return self._route(routing_key)

    async def successor_for(self, sealed: str, routing_key: str | None) -> str | None:
        """The successor of sealed segment ``sealed`` owning ``routing_key`` (None: the stream is sealed)."""
        segment = segment_of(sealed)
        successors = await self._controller.get_successors(segment)
        if successors.stream_sealed:
            return None
        # Where this writer's own events of the key will go once it learns of the seal.
        return self._map.replace(segment, successors).segment_for(self._hasher.fraction(routing_key)).qualified_name

    # ------------------------------------------------------------------ routing

    def _route(self, routing_key: RoutingKey) -> SegmentWriter:
        if routing_key is not None and type(routing_key) is not str:
            raise InvalidArgument(f"routing keys are strings, not {type(routing_key).__name__}")
        writer = self._segment_writers[self._map.segment_for(self._hasher.fraction(routing_key))]
        if routing_key is not None:
            if len(self._key_writers) >= _KEY_CACHE_MAX:
                self._key_writers.clear()
            self._key_writers[routing_key] = writer
        return writer

    def _add_segment_writer(self, segment: Segment) -> SegmentWriter:
        writer = self._segment_writers.get(segment)
        if writer is None:
            writer = self._segment_writers[segment] = SegmentWriter(segment.qualified_name, self)
            writer.start()
        return writer

    def _writers(self) -> list[SegmentWriter]:
        return list(self._segment_writers.values())

    async def _ensure_open(self) -> None:
        if self._phase is _Phase.NEW:
            await self.start()
        if self._phase is _Phase.OPEN:
            return
        if self._phase is _Phase.CLOSED:
            raise ClosedError(f"writer of {self.scope}/{self.stream} is closed")
        failure = self._failure
        assert failure is not None, "a sealed or failed writer has its failure"
        raise failure

    # ------------------------------------------------------------------ seals

    def sealed(self, writer: SegmentWriter) -> None:
        self._sealed.append(writer)
        if self._seal_task is None or self._seal_task.done():
            self._seal_task = asyncio.get_running_loop().create_task(self._handle_seals())

    async def _handle_seals(self) -> None:
        while self._sealed and self._failure is None:
            writer = self._sealed.popleft()
            segment = segment_of(writer.segment)
            try:
                successors = await self._controller.get_successors(segment)  # retried within its budget
            except Exception as error:  # noqa: BLE001 - the writer cannot continue without them
                self._fail(error if isinstance(error, TributaryError) else TributaryError(repr(error)))
                return
            if successors.stream_sealed:
                self._phase = _Phase.SEALED
                self._fail(StreamSealed(f"stream {self.scope}/{self.stream} is sealed"))
                return
            self._replace(writer, segment, successors)

    def _replace(self, writer: SegmentWriter, segment: Segment, successors: Successors) -> None:
        """Re-routes the sealed writer's events to its successors (synchronously: nothing interleaves)."""
        routes = self._map = self._map.replace(segment, successors)
        for successor in routes.segments:
            self._add_segment_writer(successor)
        events = writer.take_events()
        writer.close()
        del self._segment_writers[segment]
        self._key_writers.clear()
        self._keyless = None
        touched = set()
        for envelope, key, ack in events:
            target = self._segment_writers[routes.segment_for(self._hasher.fraction(key))]

            target.add_moved(envelope, key, ack)
            touched.add(target)
        for target in touched:
            target.flush_now()

    def _fail(self, error: BaseException) -> None:
        if self._phase is _Phase.OPEN:
            self._phase = _Phase.FAILED
        super()._fail(error)


__all__ = ["EventWriter", "WriteAck"]

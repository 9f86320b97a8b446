"""One segment's append pipeline: writer id, event numbers, blocks in flight, acks, reconnects.

Theory of operation (client reference §2.2-2.4). A segment writer has a random
128-bit writer id and numbers its events 1, 2, 3, ...; a block of n events
carries the number of its last one. Events written go into an open buffer of
envelopes (8-byte header + payload); the buffer becomes a block when it reaches
``block_size_bytes`` or at the end of the event-loop turn in which it was
written, so a fast producer sends large blocks and a slow one gets low latency.
Blocks are pipelined (many in flight, as Java does) as standalone AppendBlockEnd
frames, all carrying this writer's one request id, so every reply about them
comes back to this object (a *flow* of the connection).

Connecting, setting up, re-sending after AppendSetup(L) and reconnecting follow
the table of ``clients/append_flow.py`` (:class:`SegmentWriter` is an
:class:`~clients.append_flow.AppendFlow`): reconnects neither lose nor duplicate
an event. Here SegmentIsSealed and NoSuchSegment are SEALED (the unacknowledged
events are handed back to the owner, which writes them to the successors), and
a block whose acknowledgement does not come within ``ack_timeout_seconds``
makes the owner drop the connection (``check_progress``), which is LOST.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from coordination.retry import Backoff
from wire import commands as wc
from wire.base import Reply
from wire.fields import BytesLike

from ..append_flow import AppendFlow, Event, State
from ..config import WriterConfig
from ..connection import Endpoint, WireConnection, next_request_id
from ..errors import ConnectionFailed, TributaryError
from ..routing import RoutingKey
from .acks import WriteAck

_HEADER = struct.Struct(">ii")
_HEADER_SIZE = _HEADER.size
_headers: dict[int, bytes] = {}


def envelope_header(size: int) -> bytes:
    """The 8-byte event header for a payload of ``size`` bytes (cached for the sizes seen)."""
    header = _headers.get(size)
    if header is None:
        if len(_headers) > 4096:
            _headers.clear()
        header = _headers[size] = _HEADER.pack(0, size)
    return header


class WriterGone(TributaryError):
    """The segment writer was sealed, failed or closed before the awaited events were acknowledged."""

    retriable = True

    def __init__(self, state: State):
        super().__init__(f"segment writer is {state.value}")
        self.state = state


class WriterOwner(Protocol):
    """What a segment writer needs from the event writer or transaction that owns it."""

    config: WriterConfig

    async def endpoint_of(self, segment: str) -> Endpoint: ...

    async def connection(self, endpoint: Endpoint) -> WireConnection: ...

    def forget_endpoint(self, segment: str) -> None: ...

    def token_for(self, segment: str) -> str: ...

    def token_expired(self, segment: str) -> None: ...

    def released(self, size: int, events: int) -> None: ...

    def sealed(self, writer: SegmentWriter) -> None: ...

    def failed(self, writer: SegmentWriter, error: BaseException) -> None: ...


class Block:
    """Events sent (or to send) as one append: their envelopes, routing keys and acks."""

    __slots__ = ("last_event_number", "data", "keys", "runs")

    def __init__(self, last_event_number: int, data: bytearray, keys: list[RoutingKey],
                 runs: list[tuple[WriteAck, int]]):
        self.last_event_number = last_event_number
        self.data = data
        self.keys = keys
        self.runs = runs  # [(WriteAck, events)] in event order

    def events(self) -> Iterator[tuple[memoryview, RoutingKey, WriteAck]]:
        """Each event's envelope, routing key and ack, in order."""
        view = memoryview(self.data)
        position = 0
        keys = iter(self.keys)
        for ack, count in self.runs:
            for _ in range(count):
                _, size = _HEADER.unpack_from(view, position)
                end = position + _HEADER_SIZE + size
                yield view[position:end], next(keys), ack
                position = end


class SegmentWriter(AppendFlow):
    """Appends events to one segment for its owner; see the module docstring."""

    _wrong_host_delay = 0.0  # the owner forgot the endpoint: ask the controller again at once

    def __init__(self, segment: str, owner: WriterOwner):
        self.segment = segment
        self.writer_id = uuid.uuid4()
        self._request_id = next_request_id()
        self.write_offset = -1  # the largest segment length an acknowledgement reported
        self.last_progress = 0.0
        self._owner = owner
        self._loop = asyncio.get_running_loop()
        self._block_size = owner.config.block_size_bytes
        self._state = State.NEW
        self._connection: WireConnection | None = None
        self._attacher = None  # made by the first attempt to connect
        self._event_number = 0
        self._buffer = bytearray()
        self._buffer_keys: list[RoutingKey] = []
        self._runs: list[tuple[WriteAck, int]] = []  # closed runs of the open buffer
        self._ack = WriteAck()  # the ack of the run being written
        self._ack_count = 0
        self._unsent: deque[Block] = deque()
        self._inflight: deque[Block] = deque()
        self._flush_scheduled = False
        self._hold_after: int | None = None  # events numbered above are held back (a large event)
        self._acked = 0  # the highest event number acknowledged
        self._ack_waiters: list[tuple[int, asyncio.Future[None]]] = []

    def __repr__(self) -> str:
        return (f"<SegmentWriter {self.segment} {self._state.value} inflight={len(self._inflight)} "
                f"unsent={len(self._unsent)} buffered={len(self._buffer_keys)}>")

    @property
    def state(self) -> State:
        return self._state

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Starts connecting (events can be added at once; they are sent after setup)."""
        self.last_progress = self._loop.time()
        self._step(Event.OPEN)
        self._connect_later(0.0)

    def close(self) -> None:
        """Stops the writer; pending events are left as they are (callers flush first)."""
        self._finish(Event.CLOSED)
        self._wake_ack_waiters(WriterGone(self._state))
        self._stop_attaching()

    def pause(self) -> int:
        """Holds back every event added from now on (a large event of this segment is being written);
        what was added before is still sent. Returns the number of the last event not held back."""
        self._close_run()
        if self._buffer_keys:
            self._close_buffer()
        self._pump()
        self._hold_after = self._event_number
        return self._event_number

    def resume(self) -> None:
        self._hold_after = None
        self._pump()

    async def wait_acked(self, event_number: int) -> None:
        """Returns once every event up to ``event_number`` is durable.

        Raises:
            SegmentSealed-like ``WriterGone``: the writer was sealed, failed or closed first.
        """
        if self._acked >= event_number:
            return
        if self._state in (State.SEALED, State.FAILED, State.CLOSED):
            raise WriterGone(self._state)
        waiter = self._loop.create_future()
        self._ack_waiters.append((event_number, waiter))
        await waiter

    # ------------------------------------------------------------------ adding events (the hot path)

    def add(self, payload: BytesLike, key: RoutingKey) -> WriteAck:
        """Buffers one event; returns the ack it will be settled under."""
        buffer = self._buffer
        size = len(payload)
        if buffer and len(buffer) + size + _HEADER_SIZE > self._block_size:
            self._close_buffer()
            self._pump()
            buffer = self._buffer
        buffer += envelope_header(size)
        buffer += payload
        self._buffer_keys.append(key)
        self._ack_count += 1
        ack = self._ack  # this event's: closing a full buffer below starts the next run's
        if len(buffer) >= self._block_size:
            self._close_buffer()
            self._pump()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_soon)
        return ack

    def filling(self) -> bool:
        """Whether a block is open with events in it (not yet closed for sending)."""
        return bool(self._buffer_keys)

    def add_batch(self, payloads: list[BytesLike], key: RoutingKey) -> WriteAck:
        """Buffers events that must go into one block (atomic in this segment)."""
        self.flush_now()
        for payload in payloads:
            self._buffer += envelope_header(len(payload))
            self._buffer += payload
            self._buffer_keys.append(key)
            self._ack_count += 1
        ack = self._ack
        self.flush_now()
        return ack

    def add_moved(self, envelope: BytesLike, key: RoutingKey, ack: WriteAck) -> None:
        """Buffers an event taken from a sealed segment (already counted by ``ack``)."""
        self._close_run()
        buffer = self._buffer
        if buffer and len(buffer) + len(envelope) > self._block_size:
            self._close_buffer()
        self._buffer += envelope
        self._buffer_keys.append(key)
        if self._runs and self._runs[-1][0] is ack:
            self._runs[-1] = (ack, self._runs[-1][1] + 1)
        else:
            self._runs.append((ack, 1))

    def flush_now(self) -> None:
        """Sends what is buffered (if the writer is ready)."""
        if self._buffer_keys:
            self._close_buffer()
        self._pump()

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        if self._buffer_keys:
            self._close_buffer()
            self._pump()

    def _close_run(self) -> None:
        if self._ack_count:
            self._ack.expect(self._ack_count)
            self._runs.append((self._ack, self._ack_count))
            self._ack = WriteAck()
            self._ack_count = 0

    def _close_buffer(self) -> None:
        self._close_run()
        keys = self._buffer_keys
        self._event_number += len(keys)
        self._unsent.append(Block(self._event_number, self._buffer, keys, self._runs))
        self._buffer, self._buffer_keys, self._runs = bytearray(), [], []

    def _pump(self) -> None:
        if self._state is not State.READY:
            return
        unsent, inflight, hold_after = self._unsent, self._inflight, self._hold_after
        while unsent:
            if hold_after is not None and unsent[0].last_event_number > hold_after:
                return
            block = unsent.popleft()
            if not inflight:
                self.last_progress = self._loop.time()
            inflight.append(block)
            self._send(block)

    def _send(self, block: Block) -> None:
        assert self._connection is not None, "blocks are sent only while set up"
        try:
            self._connection.send(wc.AppendBlockEnd(self.writer_id, len(block.data), block.data, len(block.keys),
                                                    block.last_event_number, self._request_id))
        except ConnectionFailed:
            pass  # connection_failed follows and reconnects; the block is resent after setup

    # ------------------------------------------------------------------ replies (the connection's flow)

    def reply_received(self, reply: Reply) -> None:
        if isinstance(reply, wc.DataAppended):
            self._acknowledge(reply.event_number)
            if reply.current_segment_write_offset > self.write_offset:
                self.write_offset = reply.current_segment_write_offset
        elif isinstance(reply, wc.AppendSetup):
            self._setup_done(reply.last_event_number)
        elif isinstance(reply, (wc.SegmentIsSealed, wc.NoSuchSegment)):
            self._seal()
        elif self._reconnect_reply(reply):
            pass  # WrongHost or AuthTokenCheckFailed: reconnecting, or failed
        elif isinstance(reply, wc.InvalidEventNumber):
            pass  # the server closes the connection: connection_failed reconnects and sets up afresh
        else:
            self._fail(TributaryError(f"unexpected reply on the append flow of {self.segment}: {reply!r}"))

    def _acknowledge(self, event_number: int) -> None:
        inflight = self._inflight
        size = events = 0
        while inflight and inflight[0].last_event_number <= event_number:
            block = inflight.popleft()
            size += len(block.data)
            events += len(block.keys)
            for ack, count in block.runs:
                ack.settle(count)
        if event_number > self._acked:
            self._acked = event_number
            if self._ack_waiters:
                self._wake_ack_waiters(None)
        if events:
            self.last_progress = self._loop.time()
            self._owner.released(size, events)

    def _wake_ack_waiters(self, error: BaseException | None) -> None:
        waiting = []
        for number, waiter in self._ack_waiters:
            if waiter.done():
                continue
            if error is not None:
                waiter.set_exception(error)
            elif number <= self._acked:
                waiter.set_result(None)
            else:
                waiting.append((number, waiter))
        self._ack_waiters = waiting

    def _seal(self) -> None:
        if not self._finish(Event.SEALED):
            return
        self._wake_ack_waiters(WriterGone(self._state))
        self._owner.sealed(self)

    # ------------------------------------------------------------------ the append flow's hooks (connecting)

    @property
    def _flow_segment(self) -> str:
        return self.segment

    def _now(self) -> float:
        return self._loop.time()

    def _retry_policy(self) -> Backoff:
        return self._owner.config.retry

    async def _endpoint_of(self, segment: str) -> Endpoint:
        return await self._owner.endpoint_of(segment)

    async def _connection_for(self, endpoint: Endpoint) -> WireConnection:
        return await self._owner.connection(endpoint)

    def _forget_endpoint(self, segment: str) -> None:
        self._owner.forget_endpoint(segment)

    def _token_for(self, segment: str) -> str:
        return self._owner.token_for(segment)

    def _token_expired(self, segment: str) -> None:
        self._owner.token_expired(segment)

    def _flow_failed(self, error: BaseException) -> None:
        self._fail(error)

    def check_progress(self, now: float, timeout: float) -> WireConnection | None:
        """The connection to drop if this writer waited ``timeout`` for an ack or its setup."""
        return self._connection if self._silent_too_long(now, timeout) else None

    # ------------------------------------------------------------------ handing events back, failing

    def take_events(self) -> list[tuple[memoryview, RoutingKey, WriteAck]]:

        """Removes and returns every unacknowledged event, in write order (after a seal)."""
        self._close_run()
        if self._buffer_keys:
            self._close_buffer()
        events = [event for block in (*self._inflight, *self._unsent) for event in block.events()]
        self._inflight.clear()
        self._unsent.clear()
        return events

    def fail_all(self, error: BaseException) -> tuple[int, int]:
        """Fails every pending event; returns the (bytes, events) released."""
        self._close_run()
        if self._buffer_keys:
            self._close_buffer()
        size = events = 0
        for block in (*self._inflight, *self._unsent):
            size += len(block.data)
            events += len(block.keys)
            for ack, _ in block.runs:
                ack.fail(error)
        self._inflight.clear()
        self._unsent.clear()
        return size, events

    def _fail(self, error: BaseException) -> None:
        if not self._finish(Event.FAILED):
            return
        self._wake_ack_waiters(WriterGone(self._state))
        self._owner.failed(self, error)

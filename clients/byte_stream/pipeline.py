"""The append pipeline under :class:`~clients.byte_stream.ByteStreamWriter`: pieces, acks, reconnects.

See the package docstring for the theory of operation. Connecting, setting up,
re-sending after AppendSetup(L) and reconnecting follow the table of
``clients/append_flow.py`` (:class:`AppendPipeline` is an
:class:`~clients.append_flow.AppendFlow`). Here SegmentIsSealed, or ``seal()``,
is SEALED, and NoSuchSegment FAILED: both fail the pieces not yet acknowledged.

An OffsetConflict is not a state: it is a sticky error (``_error``) that
``reset()`` clears; the connection and the pieces' numbering go on.

A caveat of the protocol (Java's server behaves the same): after a
ConditionalCheckFailed the server forgets the failed event number once nothing
else of the writer is outstanding, so a piece sent *before* the writer learnt
of the conflict but arriving *after* that can still be appended, if its expected
offset happens to equal the segment's length. The pipeline cannot recall it; it
logs a warning when such a piece is acknowledged, and ``reset()`` waits for every
piece sent to be answered before reading the tail.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque

from coordination.retry import Backoff
from wire import commands as wc
from wire.base import Reply
from wire.constants import MAX_EVENT_SIZE

from ..append_flow import LIVE, AppendFlow, Event, State
from ..config import WriterConfig
from ..connection import Endpoint, WireConnection, next_request_id
from ..controller_client import Controller
from ..errors import (
    ClosedError,
    ConnectionFailed,
    InvalidArgument,
    OffsetConflict,
    ProtocolViolation,
    StreamNotFound,
    StreamSealed,
)
from ..segment_stores import SegmentStores
from ._segment import Change

log = logging.getLogger("tributary.byte_stream")

MAX_PIECE = MAX_EVENT_SIZE
"""The most bytes one ConditionalBlockEnd carries (8 MiB, as Rust's byte writer)."""


class _Piece:
    """Bytes sent as one conditional append: its event number and the offset of its first byte."""

    __slots__ = ("event_number", "offset", "data")

    def __init__(self, event_number: int, offset: int, data: bytes):
        self.event_number = event_number
        self.offset = offset
        self.data = data


class AppendPipeline(AppendFlow):
    """Pieces of written bytes, their conditional appends in flight, and the connection they go over.

    The base of :class:`~clients.byte_stream.ByteStreamWriter`, which adds the public calls.
    """

    def __init__(self, controller: Controller, stores: SegmentStores, scope: str, stream: str, *,
                 config: WriterConfig | None = None, retry_policy: Backoff | None = None,
                 max_inflight_bytes: int | None = None):
        config = config or WriterConfig()
        self.scope = scope
        self.stream = stream
        self.segment: str | None = None
        self.writer_id = uuid.uuid4()
        self._request_id = next_request_id()
        self._controller = controller
        self._stores = stores
        self._connections = stores.connection_cache()
        self._retry = retry_policy or config.retry
        self._window = max_inflight_bytes or config.max_inflight_bytes
        if self._window < 1:
            raise InvalidArgument("max_inflight_bytes must be positive")
        self._block_size = config.block_size_bytes
        self._ack_timeout = config.ack_timeout_seconds
        self._state = State.NEW
        self._offset = 0  # the offset after the last byte written
        self._event_number = 0  # of the last piece made
        self._acked = 0  # the highest event number acknowledged
        self._buffer = bytearray()  # written, not yet a piece
        self._unsent: deque[_Piece] = deque()
        self._inflight: deque[_Piece] = deque()
        self._pending = 0  # bytes written and not yet acknowledged (or failed)
        self._changed = Change()
        self._error: BaseException | None = None
        self._error_reported = True
        self._failed_upto = 0  # the highest event number failed by a conflict
        self._last_sent = 0
        self._last_answered = 0  # the highest event number the server has answered on this connection
        self._connection: WireConnection | None = None
        self._attacher = None  # made by the first attempt to connect (once the segment is known)
        self._watchdog: asyncio.Task[None] | None = None
        self._flush_scheduled = False
        self.last_progress = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def _segment(self) -> str:
        """The segment's qualified name (known once the writer is open)."""
        assert self.segment is not None, "the byte writer is open"
        return self.segment

    @property
    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The loop the writer was opened on."""
        assert self._loop is not None, "the byte writer is open"
        return self._loop

    def _check_writable(self) -> None:
        if self._state is State.CLOSED:
            raise ClosedError(f"byte writer of {self.scope}/{self.stream} is closed")
        if self._error is not None:
            raise self._raise_error()
        if self._state is State.SEALED:
            raise StreamSealed(f"byte stream {self.scope}/{self.stream} is sealed")

    def _raise_error(self) -> BaseException:
        """The sticky error to raise (callers check there is one), now reported."""
        self._error_reported = True
        assert self._error is not None, "there is an error to raise"
        return self._error

    def _add(self, view: memoryview) -> None:
        buffer = self._buffer
        while view:
            if not buffer and len(view) >= self._block_size:
                piece = view[:MAX_PIECE]
                self._offset += len(piece)
                self._pending += len(piece)
                self._make_piece(bytes(piece))
                view = view[len(piece):]
                continue
            take = view[:MAX_PIECE - len(buffer)]
            buffer += take
            view = view[len(take):]
            self._offset += len(take)
            self._pending += len(take)
            if len(buffer) >= self._block_size:
                self._flush_buffer()
                buffer = self._buffer
        if buffer and not self._flush_scheduled:
            self._flush_scheduled = True
            self._event_loop.call_soon(self._flush_soon)
        self._pump()

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        self._flush_buffer()

    def _flush_buffer(self) -> None:
        if self._buffer:
            data, self._buffer = bytes(self._buffer), bytearray()
            self._make_piece(data)
        self._pump()

    def _make_piece(self, data: bytes) -> None:
        self._event_number += 1
        self._unsent.append(_Piece(self._event_number, self._offset - len(self._buffer) - len(data), data))

    def _pump(self) -> None:
        if self._state is not State.READY:
            return
        while self._unsent:
            piece = self._unsent.popleft()
            if not self._inflight:
                self.last_progress = self._event_loop.time()
            self._inflight.append(piece)
            self._send(piece)

    def _send(self, piece: _Piece) -> None:
        assert self._connection is not None, "pieces are sent only while set up"
        try:
            self._connection.send(wc.ConditionalBlockEnd(self.writer_id, piece.event_number, piece.offset,
                                                         piece.data, self._request_id))
            self._last_sent = max(self._last_sent, piece.event_number)
        except ConnectionFailed:
            pass  # connection_failed follows: the piece is re-sent after the next AppendSetup

    def _fail_pending(self, error: BaseException, from_event: int = 0) -> None:
        """Fails the buffer and every piece numbered ``from_event`` or later."""
        failed = [p for p in (*self._inflight, *self._unsent) if p.event_number >= from_event]
        self._inflight = deque(p for p in self._inflight if p.event_number < from_event)
        self._unsent.clear()
        self._pending -= sum(len(p.data) for p in failed) + len(self._buffer)
        self._buffer = bytearray()
        if failed:
            self._failed_upto = max(self._failed_upto, failed[-1].event_number)
        if self._error is None:
            self._error, self._error_reported = error, False
        self._changed.notify()

    def _end(self, error: BaseException, event: Event) -> None:
        """SEALED or FAILED (``event``): ``error`` fails what is pending."""
        if self._state not in LIVE or not self._finish(event):
            return
        if self._pending:
            self._fail_pending(error)
        elif event is Event.FAILED and self._error is None:
            self._error, self._error_reported = error, True
        self._changed.notify()

    # ------------------------------------------------------------------ replies (the connection's flow)

    def reply_received(self, reply: Reply) -> None:
        """Handles a reply about this writer's appends (called by the connection)."""
        if isinstance(reply, wc.DataAppended):
            self._answered(reply.event_number)
            self._acknowledge(reply.event_number)
        elif isinstance(reply, wc.AppendSetup):
            self._setup_done(reply.last_event_number)
        elif isinstance(reply, wc.ConditionalCheckFailed):
            self._answered(reply.event_number)
            self._conflict(reply.event_number)
        elif isinstance(reply, wc.SegmentIsSealed):
            self._end(StreamSealed(f"byte stream {self.scope}/{self.stream} is sealed"), Event.SEALED)
        elif isinstance(reply, wc.NoSuchSegment):
            self._end(StreamNotFound(f"segment {self.segment} no longer exists"), Event.FAILED)
        elif self._reconnect_reply(reply):
            pass  # WrongHost or AuthTokenCheckFailed: reconnecting, or failed
        elif isinstance(reply, wc.InvalidEventNumber):
            self._answered(reply.event_number)  # the server closes the connection; we set up again
        else:
            self._end(ProtocolViolation(f"unexpected reply on the byte writer of {self.segment}: {reply!r}"),
                      Event.FAILED)

    def _answered(self, event_number: int) -> None:
        if event_number > self._last_answered:
            self._last_answered = event_number
            self._changed.notify()

    def _acknowledge(self, event_number: int) -> None:
        released = 0
        inflight = self._inflight
        while inflight and inflight[0].event_number <= event_number:
            released += len(inflight.popleft().data)
        if released:
            self._pending -= released
            self.last_progress = self._event_loop.time()
            self._changed.notify()
        elif self._acked < event_number <= self._failed_upto:
            log.warning("a byte-stream append failed by a conflict was acknowledged anyway (a later piece "
                        "matched the other writer's offset)", extra={"segment": self.segment,
                                                                     "event_number": event_number})
        self._acked = max(self._acked, event_number)

    def _conflict(self, event_number: int) -> None:
        if not self._inflight or event_number < self._inflight[0].event_number:
            return  # a piece already failed
        piece = self._inflight[0]
        self._fail_pending(OffsetConflict(
            f"{self.segment} is not at offset {piece.offset}: another writer appended; call reset()"),
            event_number)

    # ------------------------------------------------------------------ the append flow's hooks (connecting)

    @property
    def _flow_segment(self) -> str:
        return self._segment

    def _now(self) -> float:
        return self._event_loop.time()

    def _retry_policy(self) -> Backoff:
        return self._retry

    async def _endpoint_of(self, segment: str) -> Endpoint:
        return await self._stores.endpoint_of(segment)

    async def _connection_for(self, endpoint: Endpoint) -> WireConnection:
        return await self._connections.get(endpoint)

    def _forget_endpoint(self, segment: str) -> None:
        self._stores.forget(segment)

    def _token_for(self, segment: str) -> str:
        return self._stores.token_for(segment)

    def _token_expired(self, segment: str) -> None:
        self._stores.tokens.expired(segment)

    def _flow_failed(self, error: BaseException) -> None:
        self._end(error, Event.FAILED)

    def _disconnected(self) -> None:
        self._last_answered = self._last_sent  # nothing more will be answered on that connection

    def _flow_changed(self) -> None:
        self._changed.notify()

    async def _watch(self) -> None:
        """Drops a connection that leaves appends (or the setup) unanswered for the ack timeout."""
        period = min(1.0, self._ack_timeout / 4)
        while self._state in LIVE:
            await asyncio.sleep(period)
            if self._connection is not None and self._silent_too_long(self._event_loop.time(), self._ack_timeout):
                log.warning("byte writer got no acknowledgement in time; reconnecting",
                            extra={"segment": self.segment})
                self._connection.abort()

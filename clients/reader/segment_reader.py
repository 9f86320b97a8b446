"""Reading one segment: one read outstanding ahead, bounded buffering, events cut from the bytes.

Theory of operation (client reference §4.9). A segment reader is a *flow* of its
owner's connection: every ReadSegment it sends carries its one request id, and
at most one is outstanding, so a reply always answers the last request. Replies
append to a buffer; the next read is asked for as soon as the buffer holds less
than one read's worth, so one read is in flight while the application consumes
the previous one. Events are cut from the buffer by their 8-byte envelopes.

The position that matters for the group is ``processed``: the offset after the
last event the application has finished with (the owner moves it when the
application asks for the next event). Releasing the segment, checkpoints and
heartbeats use it, so no event is skipped when a segment changes hands.

Ends: a sealed segment read to its end, the end offset of an end cut, or a
segment that no longer exists set ``finished`` once the buffer is drained.
Truncation below the read offset moves to the new start and is reported once
through ``truncated``. A lost connection or WrongHost re-issues the read at the
same offset on a new connection.
"""

from __future__ import annotations

import logging
from typing import Protocol, TypeAlias

from wire import commands as wc
from wire.base import Reply
from wire.constants import EVENT_TYPE_CODE
from wire.envelope import ENVELOPE_HEADER, ENVELOPE_HEADER_SIZE
from wire.fields import BytesLike

from ..attach import FlowAttacher
from ..config import ReaderConfig
from ..connection import Endpoint, WireConnection, next_request_id
from ..errors import ConnectionFailed, InvalidEvent, ProtocolViolation, TokenRejected

log = logging.getLogger("tributary.reader")

Item: TypeAlias = tuple[bytes, int, int]
"""A complete event: (payload, offset of its envelope, envelope and payload size)."""

Found: TypeAlias = Item | tuple[None, int, int]
"""An event, or the start of a large event (no payload: its bytes come as chunks)."""

Next: TypeAlias = Found | None
"""What :meth:`SegmentReader.next_event` returns: an event, a large event's start, or nothing yet."""



class ReaderOwner(Protocol):
    """What a segment reader needs from the event reader that owns it."""

    config: ReaderConfig

    async def endpoint_of(self, segment: str) -> Endpoint: ...

    async def connection(self, endpoint: Endpoint) -> WireConnection: ...

    def forget_endpoint(self, segment: str) -> None: ...

    def token_for(self, segment: str) -> str: ...

    def token_expired(self, segment: str) -> None: ...

    def data_arrived(self) -> None: ...

    def truncated(self) -> None: ...

    def segment_failed(self, reader: SegmentReader, error: BaseException) -> None: ...


def cut_events(data: bytes, position: int, base: int, maximum: int, items: list[Item]) -> tuple[int, int]:
    """Cuts the complete events of ``data[position:]`` into ``items`` as (payload, offset, size).

    ``base`` is the segment offset of ``data[0]``; an event's offset is that of its envelope.
    Stops at the first incomplete event, at an envelope that is not an event, or at one longer
    than ``maximum`` (the caller looks at what is there).

    Returns:
        (the position after the last event cut, the bytes the incomplete event at that position
        needs in all, or 0).
    """
    size = len(data)
    unpack = ENVELOPE_HEADER.unpack_from
    append = items.append
    while size - position >= ENVELOPE_HEADER_SIZE:
        type_code, length = unpack(data, position)
        if type_code != EVENT_TYPE_CODE or length < 0 or length > maximum:
            return position, 0
        end = position + ENVELOPE_HEADER_SIZE + length
        if end > size:
            return position, ENVELOPE_HEADER_SIZE + length
        append((data[position + ENVELOPE_HEADER_SIZE:end], base + position, ENVELOPE_HEADER_SIZE + length))
        position = end
    return position, 0


class SegmentReader:
    """Reads one segment from ``offset`` (to ``end_offset`` if given) for an event reader."""

    def __init__(self, segment: str, offset: int, end_offset: int | None, owner: ReaderOwner, read_size: int,
                 max_event_size: int):
        self.segment = segment
        self.processed = offset  # offset after the last event the application finished with
        self.offset = offset  # offset of the next event to hand out
        self.end_offset = end_offset
        self.finished = False
        self.truncated: int | None = None  # the new start offset, once, after data was truncated away
        self.request_id = next_request_id()
        self._owner = owner
        self._read_size = read_size
        self._max_event_size = max_event_size
        self._read_offset = offset  # where the next read starts
        self._data = b""  # received bytes not yet parsed into events (from self._position on)
        self._position = 0
        self._ready: list[Item] = []  # events parsed from the data, handed out from self._ready_index on
        self._ready_index = 0
        self._outstanding = False
        self._end_of_segment = False
        self._connection: WireConnection | None = None
        self._attacher = FlowAttacher(segment, self.request_id, self, endpoint_of=owner.endpoint_of,
                                      connection_for=owner.connection, policy=owner.config.retry,
                                      on_attached=self._attached, on_failed=self._failed, purpose="read",
                                      forget_endpoint=owner.forget_endpoint)
        self._closed = False
        self.large_remaining = 0  # bytes of a large event still to hand out as chunks

    def __repr__(self) -> str:
        return (f"<SegmentReader {self.segment} at {self.offset} read={self._read_offset} "
                f"buffered={self.buffered} finished={self.finished}>")

    @property
    def buffered(self) -> int:
        return len(self._data) - self._position

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._check_finished()
        if not self.finished:
            self._attacher.attach(0.0)

    def close(self) -> None:
        self._closed = True
        self._attacher.cancel()
        if self._connection is not None:
            self._connection.close_flow(self.request_id)
            self._connection = None

    def _attached(self, connection: WireConnection) -> None:
        if self._closed:
            connection.close_flow(self.request_id)
            return
        self._connection = connection
        self._outstanding = False
        self._request()

    def _failed(self, error: BaseException) -> None:
        if not self._closed:
            self._owner.segment_failed(self, error)

    def _reconnect(self) -> None:
        if self._connection is not None:
            self._connection.close_flow(self.request_id)
            self._connection = None
        self._outstanding = False
        if not self._closed:
            self._attacher.attach(None)

    # ------------------------------------------------------------------ reads

    def _request(self, needed: int = 0) -> None:
        """Asks for the next read unless one is outstanding or enough is buffered (``needed``: the size of an
        incomplete event, which may exceed one read)."""
        if (self._outstanding or self._end_of_segment or self._closed or self._connection is None
                or self.buffered >= max(self._read_size, needed)):
            return
        length = self._read_size
        if self.end_offset is not None:
            length = min(length, self.end_offset - self._read_offset)
            if length <= 0:
                self._end_of_segment = True
                self._check_finished()
                return
        self._outstanding = True
        try:
            self._connection.send(wc.ReadSegment(self.segment, self._read_offset, length,
                                                 self._owner.token_for(self.segment), self.request_id))
        except ConnectionFailed:
            self._outstanding = False  # connection_failed follows

    def reply_received(self, reply: Reply) -> None:
        if isinstance(reply, wc.SegmentRead):
            if reply.offset != self._read_offset or not self._outstanding:
                return  # an answer to a request from before a reset
            self._outstanding = False
            self._attacher.progress()
            data = reply.data
            if data:
                self._append(data)
            if reply.end_of_segment:
                self._end_of_segment = True
            self._check_finished()
            self._request()
            self._owner.data_arrived()
        elif isinstance(reply, wc.SegmentIsSealed):
            self._outstanding = False
            self._end_of_segment = True
            self._check_finished()
            self._owner.data_arrived()
        elif isinstance(reply, wc.SegmentIsTruncated):
            self._outstanding = False
            self._truncated_to(reply.start_offset)
        elif isinstance(reply, wc.NoSuchSegment):
            log.warning("segment vanished while being read", extra={"segment": self.segment})
            self._outstanding = False
            self._end_of_segment = True
            self._check_finished()
            self._owner.data_arrived()
        elif isinstance(reply, wc.WrongHost):
            self._owner.forget_endpoint(self.segment)
            self._reconnect()
        elif isinstance(reply, wc.AuthTokenCheckFailed):
            if reply.error_code != wc.AuthTokenCheckFailed.TOKEN_EXPIRED:
                self._owner.segment_failed(self, TokenRejected(reply))
                return
            self._owner.token_expired(self.segment)  # reconnecting fetches a new one
            self._reconnect()
        else:
            self._owner.segment_failed(self, ProtocolViolation(f"unexpected reply reading {self.segment}: {reply!r}"))

    def connection_failed(self, error: ConnectionFailed) -> None:
        self._connection = None
        self._reconnect()

    def _append(self, data: BytesLike) -> None:
        if self._position >= len(self._data):
            self._data = bytes(data)
        else:
            self._data = b"".join((memoryview(self._data)[self._position:], data))
        self._position = 0
        self._read_offset += len(data)

    def _truncated_to(self, start_offset: int) -> None:
        """The data at our offset is gone: go on from the segment's new start, and say so once."""
        self._data, self._position, self._ready, self._ready_index = b"", 0, [], 0
        self.offset = self.processed = self._read_offset = max(start_offset, self._read_offset)
        self.truncated = self.offset
        self._request()
        self._owner.truncated()

    def _check_finished(self) -> None:
        at_end = self.end_offset is not None and self.offset >= self.end_offset
        if (self._end_of_segment or at_end) and self.buffered == 0 and self._ready_index >= len(self._ready):
            self.finished = True

    # ------------------------------------------------------------------ events

    def next_event(self) -> Next:
        """(payload bytes, offset, length) of the next complete event, or None if none is buffered.

        Events are parsed from the received bytes a whole read at a time (one tight loop) and then
        handed out one by one.

        Raises:
            InvalidEvent: the bytes are not an event stream (a byte stream, or corruption).
        """
        index = self._ready_index
        ready = self._ready
        if index < len(ready):
            item = ready[index]
            self._ready_index = index + 1
            self.offset = item[1] + item[2]
            return item
        return self._parse()

    def _parse(self) -> Next:
        """Parses every complete event buffered; returns the first (or None, or a large event's start)."""
        if self.large_remaining:
            return None
        data = self._data
        size = len(data)
        items: list[Item] = []
        position, needed = cut_events(data, self._position, self._read_offset - size, self._max_event_size, items)
        if needed:
            self._request(needed)
        if position >= size:
            self._data, position = b"", 0
        self._position = position
        if items:
            self._ready, self._ready_index = items, 1
            first = items[0]
            self.offset = first[1] + first[2]
            self._request()
            return first
        self._ready, self._ready_index = items, 0
        if size - position >= ENVELOPE_HEADER_SIZE:
            type_code, length = ENVELOPE_HEADER.unpack_from(data, position)
            if type_code != EVENT_TYPE_CODE or length < 0:
                raise InvalidEvent(f"{self.segment} at {self.offset}: not an event (type {type_code}, "
                                   f"length {length})")
            if length > self._max_event_size:
                return self._begin_large(length)
        self._check_finished()
        self._request()
        return None

    # ------------------------------------------------------------------ large events, as chunks

    def _begin_large(self, length: int) -> tuple[None, int, int]:

        """Starts handing out an event too large to buffer: (None, offset, size), then its chunks."""
        offset = self.offset
        self._position += ENVELOPE_HEADER_SIZE
        self.offset += ENVELOPE_HEADER_SIZE
        self.large_remaining = length
        return None, offset, ENVELOPE_HEADER_SIZE + length

    def large_chunk(self) -> bytes | None:
        """The next buffered piece of the large event being read (None: wait for data)."""
        take = min(self.large_remaining, self.buffered)
        if take <= 0:
            self._request()
            return None
        chunk = self._data[self._position:self._position + take]
        self._position += take
        self.offset += take
        self.large_remaining -= take
        if self._position >= len(self._data):
            self._data, self._position = b"", 0
        self._check_finished()
        self._request()
        return chunk

    def skip_large(self) -> bool:
        """Drops what is buffered of the large event being read; True once all of it is skipped."""
        while self.large_remaining and self.large_chunk() is not None:
            pass
        return not self.large_remaining

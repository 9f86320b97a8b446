"""The byte-stream reader: a prefetching, seekable reader of a stream's one segment.

See the package docstring for the theory of operation. The reader keeps:

* ``_position``: the offset of the next byte :meth:`ByteStreamReader.read` hands out;
* ``_chunks``: bytes received and not yet handed out (``_buffered`` of them), which
  start at ``_position``;
* ``_read_offset`` = ``_position + _buffered``: where the next ReadSegment starts;
* ``_outstanding``: the offset of the one read in flight (None: none). A reply
  whose offset differs answers a read abandoned by ``seek`` or a reconnect and is
  ignored.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque

from coordination.retry import Backoff
from wire import commands as wc
from wire.base import Reply
from wire.constants import MAX_READ_SIZE

from ..attach import FlowAttacher
from ..config import ReaderConfig
from ..connection import WireConnection, next_request_id
from ..controller_client import Controller
from ..errors import (
    ClosedError,
    ConnectionFailed,
    InvalidArgument,
    ProtocolViolation,
    StreamNotFound,
    TokenRejected,
    TruncatedData,
)
from ..segment_stores import SegmentStores
from ._segment import Change, locate_segment, segment_info

DEFAULT_BUFFER_SIZE = 1024 * 1024
"""Java's byte reader buffer; reads ask for half of it (Rust: two prefetched reads of 512 KiB)."""

_EMPTY_REPLY_PAUSE = 0.05  # before asking again after an empty reply at the tail
_LONG_LIVED = 5.0  # a connection lost after this many seconds (e.g. a tail long-poll the server ended)
# does not count against the retry policy


class ByteStreamReader:
    """Reads raw bytes from a byte stream; use ``async with ByteStreamReader(...) as reader:``.

    Starts at the segment's head (its start offset), as Java does. ``buffer_size`` bounds the bytes
    buffered ahead of the application; ``retry_policy`` (default: ``ReaderConfig().retry``) bounds
    how long the reader keeps reconnecting without getting a reply.
    """

    def __init__(self, controller: Controller, stores: SegmentStores, scope: str, stream: str, *,
                 buffer_size: int = DEFAULT_BUFFER_SIZE, retry_policy: Backoff | None = None):
        if buffer_size < 16:
            raise InvalidArgument(f"buffer_size must be at least 16 bytes, not {buffer_size}")
        self.scope = scope
        self.stream = stream
        self.segment: str | None = None
        self._controller = controller
        self._stores = stores
        self._buffer_size = buffer_size
        self._read_size = max(8, min(MAX_READ_SIZE, buffer_size // 2))
        self._retry = retry_policy or ReaderConfig().retry
        self._request_id = next_request_id()
        self._connections = stores.connection_cache()
        self._opened = False
        self._closed = False
        self._position = 0
        self._chunks: deque[bytes] = deque()
        self._chunk_position = 0  # of _position within _chunks[0]
        self._buffered = 0
        self._read_offset = 0
        self._outstanding: int | None = None
        self._end_of_segment = False
        self._truncated_to: int | None = None  # the new head, once data below it was found truncated
        self._error: BaseException | None = None
        self._changed = Change()
        self._connection: WireConnection | None = None
        self._connected_at = 0.0
        self._attacher: FlowAttacher | None = None  # made once the segment is known
        self._paused: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def _segment(self) -> str:
        """The segment's qualified name (known once the reader is open)."""
        assert self.segment is not None, "the byte reader is open"
        return self.segment

    @property
    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The loop the reader was opened on."""
        assert self._loop is not None, "the byte reader is open"
        return self._loop

    def __repr__(self) -> str:
        return (f"<ByteStreamReader {self.scope}/{self.stream} at {self._position} buffered={self._buffered} "
                f"outstanding={self._outstanding}>")

    async def __aenter__(self) -> ByteStreamReader:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __aiter__(self) -> ByteStreamReader:
        return self

    async def __anext__(self) -> bytes:
        """The next chunk (whatever is buffered, at least 1 byte). Raises StopAsyncIteration at the end
        of a sealed segment, TruncatedData as :meth:`read` does (iterating again continues)."""
        data = await self.read()
        if not data:
            raise StopAsyncIteration
        return data

    async def open(self) -> None:
        """Finds the segment, starts at its head and starts prefetching (the first read does it too).

        Raises:
            StreamNotFound: no such stream.
            InvalidArgument: the stream has more than one segment.
            ClosedError: the reader was closed.
        """
        self._check_open()
        if self._opened:
            return
        self._loop = asyncio.get_running_loop()
        segment = await locate_segment(self._controller, self.scope, self.stream)
        info = await segment_info(self._stores, segment)
        self._check_open()
        if self._opened:
            return
        self.segment, self._opened = segment, True
        self._reset_to(info.start_offset)

    # ------------------------------------------------------------------ the application's calls

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (``n < 0``: everything buffered) from the current position.

        Returns:
            At least 1 byte, waiting at the tail until data arrives; ``b""`` at the end of a sealed
            segment (or when ``n == 0``).
        Raises:
            TruncatedData: the bytes at the position were truncated away; the position is now the
                segment's head, and the next read continues from there.
            StreamNotFound: the segment was deleted.
            ConnectionFailed: the reader could not reconnect within its retry policy.
            ClosedError: the reader was closed.
        """
        if not self._opened:
            await self.open()
        while True:
            self._check_open()
            if n == 0:
                return b""
            if self._buffered:
                return self._take(n)
            if self._truncated_to is not None:
                raise self._skip_truncated()
            if self._error is not None:
                raise self._error
            if self._end_of_segment:
                return b""
            self._request()
            await self._changed.wait()

    async def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Moves the position, dropping buffered data and the outstanding read.

        ``whence`` is ``os.SEEK_SET`` (from offset 0), ``os.SEEK_CUR`` (from the position) or
        ``os.SEEK_END`` (from the tail). The target must lie between the segment's head and its tail,
        both included (seeking to the tail waits there for new data). It is checked against the
        segment's state with one request.

        Returns:
            The new position.
        Raises:
            InvalidArgument: the target is below the head or beyond the tail, or ``whence`` is invalid.
        """
        if not self._opened:
            await self.open()
        self._check_open()
        if whence not in (os.SEEK_SET, os.SEEK_CUR, os.SEEK_END):
            raise InvalidArgument(f"invalid whence {whence}")
        info = await segment_info(self._stores, self._segment)
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: info.write_offset}[whence]
        target = base + offset
        if not info.start_offset <= target <= info.write_offset:
            raise InvalidArgument(f"cannot seek to {target}: {self.segment} holds offsets {info.start_offset} "
                                  f"to {info.write_offset}")
        self._check_open()
        self._reset_to(target)
        return target

    def tell(self) -> int:
        """The offset of the next byte :meth:`read` returns."""
        return self._position

    @property
    def available(self) -> int:
        """The number of bytes buffered: what :meth:`read` can return without waiting."""
        return self._buffered

    async def current_head_offset(self) -> int:
        """The segment's first readable offset now. Raises StreamNotFound, ConnectionFailed."""
        if not self._opened:
            await self.open()
        return (await segment_info(self._stores, self._segment)).start_offset

    async def current_tail_offset(self) -> int:
        """The segment's length now. Raises StreamNotFound, ConnectionFailed."""
        if not self._opened:
            await self.open()
        return (await segment_info(self._stores, self._segment)).write_offset

    async def close(self) -> None:
        """Stops reading and releases the connection; later calls raise ClosedError."""
        if self._closed:
            return
        self._closed = True
        if self._attacher is not None:
            self._attacher.cancel()
        if self._paused is not None:
            self._paused.cancel()
        self._drop_connection()
        self._changed.notify()
        await self._connections.close()

    # ------------------------------------------------------------------ buffer

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"byte reader of {self.scope}/{self.stream} is closed")

    def _take(self, n: int) -> bytes:
        want = self._buffered if n < 0 else min(n, self._buffered)
        parts, remaining = [], want
        while remaining:
            chunk, start = self._chunks[0], self._chunk_position
            available = len(chunk) - start
            if available <= remaining:
                parts.append(chunk[start:] if start else chunk)
                self._chunks.popleft()
                self._chunk_position = 0
                remaining -= available
            else:
                parts.append(chunk[start:start + remaining])
                self._chunk_position += remaining
                remaining = 0
        self._buffered -= want
        self._position += want
        self._request()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _skip_truncated(self) -> TruncatedData:
        head, self._truncated_to = self._truncated_to, None
        assert head is not None, "called after a truncation was found"
        skipped = self._position
        self._reset_to(max(head, self._position))
        return TruncatedData(f"{self.segment}: the data at offset {skipped} was truncated; the reader "
                             f"continues from the head at {self._position}")

    def _reset_to(self, offset: int) -> None:
        self._chunks.clear()
        self._chunk_position = self._buffered = 0
        self._position = self._read_offset = offset
        self._outstanding = None
        self._end_of_segment = False
        self._truncated_to = None
        if self._paused is not None:
            self._paused.cancel()
            self._paused = None
        self._request()

    # ------------------------------------------------------------------ reads (the connection's flow)

    def _request(self) -> None:
        """Asks for the next read unless one is outstanding, enough is buffered, or reading must stop."""
        if (self._closed or self._outstanding is not None or self._end_of_segment or self._paused is not None
                or self._error is not None or self._truncated_to is not None
                or self._buffered + self._read_size > self._buffer_size):
            return
        if self._connection is None:
            self._connect_later(0.0)
            return
        self._outstanding = self._read_offset
        try:
            self._connection.send(wc.ReadSegment(self._segment, self._read_offset, self._read_size,
                                                 self._stores.token_for(self._segment), self._request_id))
        except ConnectionFailed:
            self._outstanding = None  # connection_failed follows and reconnects

    def _answers(self, offset: int) -> bool:
        """True if a reply about ``offset`` (-1: not given) answers the outstanding read."""
        return self._outstanding is not None and (offset < 0 or offset == self._outstanding)

    def reply_received(self, reply: Reply) -> None:
        """Handles a reply to this reader's reads (called by the connection)."""
        if isinstance(reply, wc.SegmentRead):
            if not self._answers(reply.offset):
                return
            self._outstanding = None
            assert self._attacher is not None, "reads go out once attached"
            self._attacher.progress()
            data = reply.data
            if data:
                self._chunks.append(bytes(data))
                self._buffered += len(data)
                self._read_offset += len(data)
            if reply.end_of_segment:
                self._end_of_segment = True
            elif not data:  # an empty reply at the tail: ask again shortly rather than spin
                self._paused = self._event_loop.call_later(_EMPTY_REPLY_PAUSE, self._resume)
                return
            self._request()
            self._changed.notify()
        elif isinstance(reply, wc.SegmentIsTruncated):
            if self._answers(reply.offset):
                self._outstanding = None
                self._truncated_to = reply.start_offset
                self._changed.notify()
        elif isinstance(reply, wc.SegmentIsSealed):
            if self._answers(reply.offset):  # a read at or past the end of a sealed segment
                self._outstanding = None
                self._end_of_segment = True
                self._changed.notify()
        elif isinstance(reply, wc.NoSuchSegment):
            self._fail(StreamNotFound(f"segment {self.segment} no longer exists"))
        elif isinstance(reply, wc.WrongHost):
            self._stores.forget(self._segment)
            self._drop_connection()
            self._connect_later(None)
        elif isinstance(reply, wc.AuthTokenCheckFailed):
            if reply.error_code != wc.AuthTokenCheckFailed.TOKEN_EXPIRED:
                self._fail(TokenRejected(reply))
                return
            self._stores.tokens.expired(self._segment)  # reconnecting fetches a new one
            self._drop_connection()
            self._connect_later(None)
        else:
            self._fail(ProtocolViolation(f"unexpected reply reading {self.segment}: {reply!r}"))

    def connection_failed(self, error: ConnectionFailed) -> None:
        """Reconnects and re-issues the read after the connection was lost (called by the connection)."""
        self._connection = None
        self._outstanding = None
        if self._event_loop.time() - self._connected_at >= _LONG_LIVED and self._attacher is not None:
            self._attacher.progress()  # e.g. the server ended a long tail read: not a run of failures

        self._connect_later(None)

    def _resume(self) -> None:
        self._paused = None
        self._request()

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._drop_connection()
        self._changed.notify()

    # ------------------------------------------------------------------ connecting

    def _connect_later(self, delay: float | None) -> None:
        """Starts a connect attempt after ``delay`` (None: the retry policy's next delay)."""
        if self._closed or self._error is not None:
            return
        if self._attacher is None:
            self._attacher = FlowAttacher(self._segment, self._request_id, self, endpoint_of=self._stores.endpoint_of,
                                          connection_for=self._connections.get, policy=self._retry,
                                          on_attached=self._attached, on_failed=self._fail, purpose="read",
                                          forget_endpoint=self._stores.forget)
        self._attacher.attach(delay)

    def _attached(self, connection: WireConnection) -> None:
        if self._closed:
            connection.close_flow(self._request_id)
            return
        self._connection = connection
        self._connected_at = self._event_loop.time()
        self._outstanding = None
        self._request()

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close_flow(self._request_id)
        self._outstanding = None

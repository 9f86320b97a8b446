"""The byte-stream writer: conditional, pipelined appends of raw bytes to a stream's one segment.

See the package docstring for the theory of operation; the pipeline itself (pieces,
acknowledgements, reconnects) is :mod:`clients.byte_stream.pipeline`.
"""

from __future__ import annotations

import asyncio

from coordination.retry import Backoff
from wire.fields import BytesLike

from ..append_flow import LIVE, Event, State
from ..config import WriterConfig
from ..controller_client import Controller
from ..errors import ClosedError, InvalidArgument, OffsetConflict, SegmentTruncated, StreamSealed
from ..segment_stores import SegmentStores
from ._segment import locate_segment, segment_info
from .pipeline import AppendPipeline

__all__ = ["ByteStreamWriter"]


class ByteStreamWriter(AppendPipeline):
    """Appends raw bytes to a byte stream; use ``async with ByteStreamWriter(...) as writer:``.

    ``config`` supplies ``max_inflight_bytes`` (the window), ``block_size_bytes`` (how far small
    writes are coalesced), ``retry`` (how long to keep reconnecting) and ``ack_timeout_seconds``;
    ``retry_policy`` and ``max_inflight_bytes`` override those two.
    """

    def __init__(self, controller: Controller, stores: SegmentStores, scope: str, stream: str, *,
                 config: WriterConfig | None = None, retry_policy: Backoff | None = None,
                 max_inflight_bytes: int | None = None):
        super().__init__(controller, stores, scope, stream, config=config, retry_policy=retry_policy,
                         max_inflight_bytes=max_inflight_bytes)

    def __repr__(self) -> str:
        return (f"<ByteStreamWriter {self.scope}/{self.stream} {self._state.value} offset={self._offset} "
                f"pending={self._pending}>")

    @property
    def offset(self) -> int:
        """The offset after the last byte written (acknowledged or not); where the next write goes."""
        return self._offset

    async def __aenter__(self) -> ByteStreamWriter:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Finds the segment, starts at its tail, connects and sets up appends (the first write does it too).

        Raises:
            StreamNotFound: no such stream.
            InvalidArgument: the stream has more than one segment.
            ClosedError: the writer was closed.
            ConnectionFailed (or another error): the append connection could not be set up.
        """
        if self._state is State.CLOSED:
            raise ClosedError(f"byte writer of {self.scope}/{self.stream} is closed")
        if self._state is not State.NEW:
            return
        self._loop = asyncio.get_running_loop()
        segment = await locate_segment(self._controller, self.scope, self.stream)
        info = await segment_info(self._stores, segment)
        if self._state is not State.NEW:
            return  # opened (or closed) by a concurrent call meanwhile
        self.segment, self._offset = segment, info.write_offset
        if info.is_sealed:
            self._step(Event.SEALED)
            return
        self._step(Event.OPEN)
        self._connect_later(0.0)
        self._watchdog = self._loop.create_task(self._watch())
        while self._state in (State.CONNECTING, State.SETTING_UP):
            await self._changed.wait()
        if self._state is State.FAILED:  # type: ignore[comparison-overlap]  # _step moved it (mypy cannot see)
            raise self._raise_error()

    # ------------------------------------------------------------------ writing

    async def write(self, data: BytesLike) -> None:
        """Queues ``data`` to be appended at :attr:`offset`; waits only while the in-flight window is full.

        The bytes are durable once :meth:`flush` returns. A cancelled write queued nothing.

        Raises:
            OffsetConflict: another writer appended to the segment (this or an earlier write failed);
                nothing more is written until :meth:`reset`.
            StreamSealed: the segment is sealed.
            ClosedError: the writer was closed.
            ConnectionFailed: the writer could not reconnect within its retry policy.
        """
        if self._state is State.NEW:
            await self.open()
        self._check_writable()
        view = memoryview(data).cast("B")
        if not view:
            return
        while self._pending >= self._window:
            await self._changed.wait()
            self._check_writable()
        self._add(view)

    async def flush(self) -> None:
        """Returns once every byte written so far is acknowledged (durable on the segment store).

        Raises:
            OffsetConflict, StreamSealed, ConnectionFailed: some written bytes were not appended.
            ClosedError: the writer was closed.
        """
        if self._state is State.CLOSED:
            raise ClosedError(f"byte writer of {self.scope}/{self.stream} is closed")
        self._flush_buffer()
        while True:
            # mypy keeps the narrowing of the check above across the await below, hence the ignore
            if self._state is State.CLOSED:  # type: ignore[comparison-overlap]
                raise ClosedError(f"byte writer of {self.scope}/{self.stream} was closed during flush")

            if self._error is not None:
                raise self._raise_error()
            if not self._pending:
                return
            await self._changed.wait()

    async def reset(self) -> None:
        """Clears an OffsetConflict and moves :attr:`offset` to the segment's current tail.

        Waits (up to the ack timeout) for the server to answer every piece already sent, so that the
        tail read includes whatever they did. Without a conflict, flushes first.

        Raises:
            StreamSealed: the segment is sealed.
            ClosedError / ConnectionFailed: the writer was closed or has failed.
        """
        if self._state is State.NEW:
            await self.open()
        if not isinstance(self._error, OffsetConflict):
            try:
                await self.flush()
            except OffsetConflict:
                pass
        deadline = self._event_loop.time() + self._ack_timeout
        while self._last_answered < self._last_sent and self._state is State.READY:
            remaining = deadline - self._event_loop.time()
            if remaining <= 0:
                break
            await self._changed.wait(remaining)
        info = await segment_info(self._stores, self._segment)
        if isinstance(self._error, OffsetConflict):
            self._error, self._error_reported = None, True
        self._check_writable()
        if info.is_sealed:
            self._end(StreamSealed(f"{self.segment} is sealed"), Event.SEALED)
            self._check_writable()
        self._offset = info.write_offset

    async def truncate_data_before(self, offset: int) -> None:
        """Removes the segment's bytes below ``offset``; offsets at or below the current head are a no-op.

        Raises:
            InvalidArgument: ``offset`` is negative or beyond the segment's tail.
        """
        if self._state is State.NEW:
            await self.open()
        if offset < 0:
            raise InvalidArgument(f"cannot truncate at negative offset {offset}")
        try:
            await self._stores.raw.truncate_segment(self._segment, offset)
        except SegmentTruncated:
            info = await segment_info(self._stores, self._segment)
            if offset > info.write_offset:
                raise InvalidArgument(f"cannot truncate {self.segment} at {offset}: its tail is at "
                                      f"{info.write_offset}") from None

    async def seal(self) -> None:
        """Flushes, then seals the segment (already sealed counts as success); later writes raise StreamSealed.

        Raises:
            OffsetConflict, StreamSealed, ConnectionFailed: written bytes could not be appended first.
        """
        if self._state is State.NEW:
            await self.open()
        await self.flush()
        await self._stores.raw.seal_segment(self._segment)
        if self._state in LIVE:
            self._finish(Event.SEALED)
        self._changed.notify()

    async def close(self) -> None:
        """Flushes, then releases the connection. Later calls raise ClosedError.

        Raises:
            The failure of written bytes not yet reported by ``write``/``flush`` (OffsetConflict, ...).
        """
        if self._state is State.CLOSED:
            return
        try:
            if self._error is None and self._pending and self._state in LIVE:
                await self.flush()
            if self._error is not None and not self._error_reported:
                raise self._raise_error()
        finally:
            self._finish(Event.CLOSED)  # releases the connection
            self._stop_attaching()
            if self._watchdog is not None:
                self._watchdog.cancel()
            self._changed.notify()
            await self._connections.close()

    async def current_head_offset(self) -> int:
        """The segment's first readable offset. Raises StreamNotFound, ConnectionFailed."""
        if self._state is State.NEW:
            await self.open()
        return (await segment_info(self._stores, self._segment)).start_offset

    async def current_tail_offset(self) -> int:
        """The segment's length as the server sees it now. Raises StreamNotFound, ConnectionFailed."""
        if self._state is State.NEW:
            await self.open()
        return (await segment_info(self._stores, self._segment)).write_offset


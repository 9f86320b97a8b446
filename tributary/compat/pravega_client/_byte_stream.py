"""``ByteStream``: the binding's file-like view of a one-segment stream, on the SDK's byte writer and reader.

``write`` queues bytes (``flush`` makes them durable); ``readinto`` fills a bytearray with what is
available at the read position (waiting at the tail for at least one byte; 0 at the end of a
sealed stream); ``seek``/``tell`` move and report the read position. As in the binding, ``seek``
accepts any offset that is not negative: a position before the head makes the next ``readinto``
raise OSError, one beyond the tail makes it wait until the stream grows that far. Byte stream
failures raise OSError; a bad ``whence`` or a negative position ValueError. When the object is
garbage collected its writer is flushed and closed in the background (the binding flushes on drop).
"""

from __future__ import annotations

import asyncio
import os
import weakref

from clients.byte_stream import ByteStreamReader, ByteStreamWriter
from clients.errors import InvalidArgument, TributaryError

from ._common import Internal, check_type, error_text, scoped_stream_text
from ._connection import Connection
from ._runtime import Runtime

TIMEOUT_SECONDS = 120.0  # the binding's bound on fetching the tail and on truncating
_BEYOND_TAIL_POLL_SECONDS = 0.05


class _Bytes:
    """The loop-side state: the SDK's writer and reader, and a read position the reader could not take yet."""

    def __init__(self, writer: ByteStreamWriter, reader: ByteStreamReader):
        self.writer = writer
        self.reader = reader
        self.target: int | None = None  # a position seek() accepted outside the segment's current range

    async def open(self) -> None:
        try:
            await self.writer.open()
            await self.reader.open()
        except TributaryError as error:
            await self.close()
            raise OSError(f"Error while opening the ByteStream: {error_text(error)}") from error

    async def close(self) -> None:
        for part in (self.writer, self.reader):
            try:
                await part.close()
            except TributaryError:
                pass  # a failed flush was raised to the application's flush() already, if it called one

    async def write(self, data: bytes) -> int:
        try:
            await self.writer.write(data)
        except TributaryError as error:
            raise OSError(f"Error while writing into ByteStream: {error_text(error)}") from error
        return len(data)

    async def flush(self) -> None:
        try:
            await self.writer.flush()
        except TributaryError as error:
            raise OSError(f"Error while flushing data into ByteStream: {error_text(error)}") from error

    async def readinto(self, buffer: bytearray) -> int:
        wanted = len(buffer)
        if wanted == 0:
            return 0
        try:
            if self.target is not None:
                await self._reach_target()
            data = await self.reader.read(wanted)
            while len(data) < wanted and self.reader.available:  # whatever else is here already
                data += await self.reader.read(wanted - len(data))
        except TributaryError as error:  # TruncatedData too: once, then reading goes on from the head
            raise OSError(f"Error while reading from ByteStream: {error_text(error)}") from error
        buffer[:len(data)] = data
        return len(data)

    async def _reach_target(self) -> None:
        """Moves the SDK reader to the position seek() accepted: an error below the head, a wait beyond the tail."""
        target = self.target
        assert target is not None
        while True:
            head = await self.reader.current_head_offset()
            if target < head:
                raise OSError(f"Error while reading from ByteStream: offset {target} was truncated "
                              f"(the stream starts at {head})")
            if target <= await self.reader.current_tail_offset():
                break
            await asyncio.sleep(_BEYOND_TAIL_POLL_SECONDS)
        await self.reader.seek(target)
        self.target = None

    def tell(self) -> int:
        return self.target if self.target is not None else self.reader.tell()

    async def seek(self, position: int, whence: int) -> int:
        try:
            if whence == os.SEEK_SET:
                target = position
            elif whence == os.SEEK_CUR:
                target = self.tell() + position
            else:
                target = await self.reader.current_tail_offset() + position
            if target < 0:
                raise ValueError(f"Error while seeking to offset: cannot seek to a negative offset ({target})")
            try:
                await self.reader.seek(target)
                self.target = None
            except InvalidArgument:  # outside the segment's current range: as the binding, later
                self.target = target
        except TributaryError as error:
            raise ValueError(f"Error while seeking to offset: {error_text(error)}") from error
        return target

    async def head(self) -> int:
        try:
            return await self.reader.current_head_offset()
        except TributaryError as error:
            raise OSError(f"Error while fetching the head offset of ByteStream: {error_text(error)}") from error

    async def tail(self) -> int:
        try:
            async with asyncio.timeout(TIMEOUT_SECONDS):
                return await self.reader.current_tail_offset()
        except TimeoutError:
            raise OSError("Fetching tail offset timed out, please check connectivity with Pravega.") from None
        except TributaryError as error:
            raise OSError(f"Error while fetching tail offset ByteStream: {error_text(error)}") from error

    async def truncate(self, offset: int) -> None:
        try:
            async with asyncio.timeout(TIMEOUT_SECONDS):
                await self.writer.truncate_data_before(offset)
        except TimeoutError:
            raise OSError("Truncation timed out, please check connectivity with Pravega.") from None
        except TributaryError as error:
            raise OSError(f"Error while truncating ByteStream: {error_text(error)}") from error


def _close_later(runtime: Runtime, state: _Bytes) -> None:
    runtime.later(state.close())


async def _make(connection: Connection, scope: str, stream: str) -> _Bytes:
    client = connection.client
    state = _Bytes(client.create_byte_writer(scope, stream), client.create_byte_reader(scope, stream))
    await state.open()
    return state


class ByteStream(Internal):
    """Bytes of a one-segment stream, read and written like a binary file (``StreamManager.create_byte_stream``)."""

    _connection: Connection
    _scope: str
    _stream: str
    _bytes: _Bytes

    @classmethod
    def _make(cls, connection: Connection, scope: str, stream: str) -> ByteStream:
        byte_stream = cls._new()
        byte_stream._connection, byte_stream._scope, byte_stream._stream = connection, scope, stream
        byte_stream._bytes = connection.call(_make(connection, scope, stream))
        weakref.finalize(byte_stream, _close_later, connection.runtime, byte_stream._bytes)
        return byte_stream

    def write(self, byte_array: bytes) -> int:
        """Appends ``byte_array`` (durable after ``flush``); returns its length."""
        check_type(byte_array, bytes, "byte_array")
        return self._connection.call(self._bytes.write(byte_array))

    def flush(self) -> None:
        """Waits until everything written is durable."""
        self._connection.call(self._bytes.flush())

    def readinto(self, buf: bytearray) -> int:
        """Reads into ``buf`` what is available at the read position (at least one byte; 0 at the end of a
        sealed stream); returns how many bytes."""
        check_type(buf, bytearray, "buf")
        return self._connection.call(self._bytes.readinto(buf))

    def seek(self, position: int, whence: int | None = None) -> int:
        """Moves the read position: ``whence`` 0 (default) from the start, 1 from the position, 2 from the
        tail. Returns the new position."""
        whence = 0 if whence is None else whence
        if whence not in (os.SEEK_SET, os.SEEK_CUR, os.SEEK_END):
            raise ValueError("whence should be one of 0: seek from start, 1: seek from current, or 2: seek from end")
        return self._connection.call(self._bytes.seek(position, whence))

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        """The read position."""
        return self._bytes.tell()

    def current_head_offset(self) -> int:
        """The first offset still in the stream."""
        return self._connection.call(self._bytes.head())

    def current_tail_offset(self) -> int:
        """The stream's length (what was flushed and acknowledged)."""
        return self._connection.call(self._bytes.tail())

    def truncate(self, offset: int) -> None:
        """Drops the stream's bytes before ``offset``."""
        self._connection.call(self._bytes.truncate(offset))

    def to_str(self) -> str:
        return f"Stream: {scoped_stream_text(self._scope, self._stream)} "

    def __repr__(self) -> str:
        return f"ByteStream({self.to_str()})"

"""One connection's outgoing frames, in order, some of them sent straight from files.

Theory of operation. Most replies are lists of buffers and go to the transport
with ``writelines``. A SegmentRead of bytes that only Tier-2 holds can instead
carry a ``FileFrame``: the frame's head and tail as bytes and, between them, a
region of a chunk file that is sent with ``os.sendfile``, so that those bytes
never pass through Python (page cache -> socket in the kernel).

``sendfile`` runs in a worker thread (a page-cache miss blocks it on the disk),
on a duplicate of the connection's socket descriptor, so the descriptor stays
valid even if the transport closes meanwhile. The socket is non-blocking: a
thread sends until the socket is full and returns; the event loop then waits
for the duplicate to become writable (``add_writer``) before the next step. So
a reader that stops reading holds no thread, only its own frame. A file frame starts only when
the transport holds no unsent bytes, and frames sent while it is in flight are
held and written after it, so the byte stream keeps the order of ``send`` calls.

Frames sent in one turn of the event loop go to the transport together: the first ``send`` of a
turn schedules a flush (``call_soon``) and later ones join it, so the acknowledgements that one
Tier-1 batch completes for a connection leave in one ``writev`` instead of one system call (and
one wake-up of the client) each. A file frame, and closing, flush what is pending first.

Held frames count against the connection's write limit like the transport's
own buffer: ``blocked`` says the caller should stop producing replies until
``on_unblocked`` is called. A region is released as soon as it is sent (or
dropped when the connection closes), never before.

Where there is no plain socket to send a file to, a file frame's region is read
into memory in a thread and written like any other frame. That is the case of a
transport without a socket (a test's fake) and of every TLS transport: asyncio's
and uvloop's TLS transports still report their TCP socket, but bytes written to
it directly bypass the encryption, and the client's TLS layer sees garbage.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from wire.fields import BytesLike

log = logging.getLogger("tributary.connection")

_SEND_THREADS = 8  # file frames in flight at once, across all connections of the process
_executor: ThreadPoolExecutor | None = None


class Region(Protocol):
    """Bytes of an open file, lent until released (``server.tier2.chunk_storage.ChunkRegion``)."""

    @property
    def fd(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def length(self) -> int: ...

    def release(self) -> None: ...


class FileFrame:
    """A frame made of ``head``, the bytes of ``region``, then ``tail``."""

    __slots__ = ("head", "region", "tail")

    def __init__(self, head: bytes, region: Region, tail: bytes):
        self.head, self.region, self.tail = head, region, tail

    def __len__(self) -> int:
        return len(self.head) + self.region.length + len(self.tail)


class Transport(Protocol):
    """What the outbox needs of an asyncio transport."""

    def writelines(self, data: Sequence[BytesLike], /) -> None: ...

    def get_write_buffer_size(self) -> int: ...

    def get_extra_info(self, name: str, default: object = None) -> object: ...

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None: ...


class Outbox:
    """Writes one connection's frames in order; see the module docstring."""

    def __init__(self, transport: Transport, loop: asyncio.AbstractEventLoop, *, limit: int,
                 on_unblocked: Callable[[], None], on_failure: Callable[[str], None]):
        self._transport = transport
        self._limit = limit
        self._on_unblocked = on_unblocked
        self._on_failure = on_failure
        self._loop = loop
        self._held: deque[list[BytesLike] | FileFrame] = deque()
        self._held_bytes = 0
        self._in_flight: FileFrame | None = None  # the file frame being sent
        self._flushed: asyncio.Future[None] | None = None  # resolved once the transport's buffer is empty
        self._writable: asyncio.Future[None] | None = None  # resolved once the full socket takes bytes again
        self._closed = False
        self._pending: list[BytesLike] = []  # frames of this turn of the loop, written by _flush_pending
        self.blocked = False

    def send(self, parts: list[BytesLike]) -> None:
        if self._closed:
            return
        if self._in_flight is None:
            if not self._pending:
                self._loop.call_soon(self._flush_pending)
            self._pending += parts
        else:
            self._hold(parts, sum(map(len, parts)))

    def send_file(self, frame: FileFrame) -> None:
        if self._closed:
            frame.region.release()
            return
        if self._in_flight is None:
            self._flush_pending()
            self._start(frame)
        else:
            self._hold(frame, len(frame))

    def writing_resumed(self) -> None:
        """The transport called ``resume_writing``: its buffer may be empty now."""
        flushed = self._flushed
        if flushed is not None and not flushed.done() and not self._transport.get_write_buffer_size():
            flushed.set_result(None)

    def close(self) -> None:
        """Writes the frames pending in this turn (the transport sends them before closing, if it still
        can), drops held frames (releasing their regions) and stops a send in flight."""
        self._flush_pending()
        self._closed = True
        for waiter in (self._flushed, self._writable):
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        while self._held:
            item = self._held.popleft()
            if isinstance(item, FileFrame):
                item.region.release()
        self._held_bytes = 0

    # ------------------------------------------------------------------ internals

    def _flush_pending(self) -> None:
        pending = self._pending
        if pending and not self._closed:
            self._pending = []
            self._transport.writelines(pending)

    def _hold(self, item: list[BytesLike] | FileFrame, size: int) -> None:
        self._held.append(item)
        self._held_bytes += size
        if self._held_bytes > self._limit:
            self.blocked = True

    def _start(self, frame: FileFrame) -> None:
        self._in_flight = frame
        self._loop.create_task(self._send_file(frame))

    async def _send_file(self, frame: FileFrame) -> None:
        try:
            await self._until_transport_flushed()
            if self._closed:
                return
            fileno = _plain_socket_fileno(self._transport)
            if fileno is None:
                data = await self._loop.run_in_executor(_send_threads(), _read_region, frame.region)
                if self._closed:
                    return
                self._transport.writelines([frame.head, data, frame.tail])
            else:
                await self._send_steps(os.dup(fileno()), _Progress(frame))
            if self._closed:
                return
        except OSError as error:
            if not self._closed:
                self._on_failure(f"sending a file region failed: {error}")
            return
        finally:
            frame.region.release()
            self._in_flight = None
        self._drain()

    async def _send_steps(self, descriptor: int, progress: _Progress) -> None:
        """Sends in worker-thread steps, each until done or the socket is full; waits for room between.

        Owns ``descriptor`` (a dup of the socket's): closed when done, but never while a step still uses it.
        """
        step: asyncio.Future[bool] | None = None
        try:
            while not self._closed:
                step = self._loop.run_in_executor(_send_threads(), progress.send_some, descriptor)
                if await asyncio.shield(step):
                    return
                self._writable = self._loop.create_future()
                self._loop.add_writer(descriptor, _resolve, self._writable)
                try:
                    await self._writable
                finally:
                    self._loop.remove_writer(descriptor)
                    self._writable = None
        finally:
            if step is not None and not step.done():  # cancelled mid-step: the thread closes it when done
                step.add_done_callback(lambda _: os.close(descriptor))
            else:
                os.close(descriptor)

    async def _until_transport_flushed(self) -> None:
        """Waits (without polling) until the transport has written every byte given to it.

        With both water marks at zero the transport pauses the protocol now and resumes it when
        its buffer is empty (``writing_resumed``); the connection's own limit is restored after.
        """
        if not self._transport.get_write_buffer_size():
            return
        self._flushed = self._loop.create_future()
        self._transport.set_write_buffer_limits(high=0, low=0)
        try:
            await self._flushed
        finally:
            self._flushed = None
            if not self._closed:
                self._transport.set_write_buffer_limits(high=self._limit)

    def _drain(self) -> None:
        """Writes held frames after a file frame, up to the next file frame (which starts)."""
        while self._held and self._in_flight is None and not self._closed:
            item = self._held.popleft()
            if isinstance(item, FileFrame):
                self._held_bytes -= len(item)
                self._start(item)
            else:
                self._held_bytes -= sum(map(len, item))
                self._transport.writelines(item)
        if self.blocked and self._held_bytes <= self._limit // 2:
            self.blocked = False
            self._on_unblocked()


def _plain_socket_fileno(transport: Transport) -> Callable[[], int] | None:
    """The ``fileno`` of the transport's socket if bytes written to it reach the peer as they are (no TLS)."""
    if transport.get_extra_info("sslcontext") is not None or transport.get_extra_info("ssl_object") is not None:
        return None
    fileno = getattr(transport.get_extra_info("socket"), "fileno", None)
    return fileno if callable(fileno) else None


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _send_threads() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(_SEND_THREADS, thread_name_prefix="tributary-sendfile")
    return _executor


def _read_region(region: Region) -> bytes:
    data = os.pread(region.fd, region.length, region.offset)
    if len(data) != region.length:
        raise OSError(errno.EIO, f"a file region of {region.length} bytes gave {len(data)}")
    return data


class _Progress:
    """How much of a file frame is sent; ``send_some`` runs in a worker thread, one step at a time."""

    def __init__(self, frame: FileFrame):
        self._frame = frame
        self._head = memoryview(frame.head)
        self._offset = frame.region.offset
        self._end = frame.region.offset + frame.region.length
        self._tail = memoryview(frame.tail)

    def send_some(self, socket_fd: int) -> bool:
        """Sends head, region (sendfile), tail on the non-blocking ``socket_fd`` until done (True) or full (False)."""
        try:
            while self._head:
                self._head = self._head[os.write(socket_fd, self._head):]
            region_fd = self._frame.region.fd
            while self._offset < self._end:
                sent = os.sendfile(socket_fd, region_fd, self._offset, self._end - self._offset)
                if sent == 0:
                    raise OSError(errno.EIO, "the file region ended early")
                self._offset += sent
            while self._tail:
                self._tail = self._tail[os.write(socket_fd, self._tail):]
        except BlockingIOError:
            return False
        return True

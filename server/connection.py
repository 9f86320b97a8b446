"""One client connection: decoding, dispatch in arrival order, replies, flow control.

Theory of operation. Bytes go into a ``wire.Decoder``; decoded commands join a
backlog that is pumped (in the same turn as the read) strictly in arrival order,
whatever their kind:

* Hello, KeepAlive and SetupAppend are answered at once;
* appends are submitted to their container synchronously (no task) and
  acknowledged from callbacks, in order per writer (``server.appends``); once a
  read's commands are dispatched, they go to an idle log at once;
* every other request runs as a task whose first step decides its effect, so
  a tail read waiting for data never blocks later frames.

A protocol violation or an error without a reply closes this connection only.
Flow control, so that no client can grow server memory without bound: the
pump stops while the append bytes not yet acknowledged exceed their limit,
while the transport's unsent output is above its high-water mark, or while the
connection already runs its maximum of request tasks; reading from the socket
pauses whenever the backlog is not empty. Replies from tasks wait until the
transport is writable, so unsent output stays near one reply above the mark. Closing the connection deletes
the transient segments created on it that were not merged.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

import wire
from wire import commands as wc

from . import errors
from .appends import AppendProcessor
from .auth import TokenChecker
from .containers import CacheManager, SegmentContainer
from .handlers import RequestHandlers
from .outbox import FileFrame, Outbox
from .replies import CloseConnection

log = logging.getLogger("tributary.connection")

_ERROR_MESSAGE_VERSION = 15  # the first version whose Rust decoder knows ErrorMessage (protocol reference §3.1)


class ConnectionLimits:
    def __init__(self, *, append_bytes_outstanding_max: int = 64 * 1024 * 1024,
                 write_buffer_high: int = 8 * 1024 * 1024, tail_read_timeout: float = 60.0,
                 max_frame_size: int = wire.MAX_WIRECOMMAND_SIZE, request_tasks_max: int = 256):
        self.request_tasks_max = request_tasks_max
        self.append_bytes_outstanding_max = append_bytes_outstanding_max
        self.write_buffer_high = write_buffer_high
        self.tail_read_timeout = tail_read_timeout
        self.max_frame_size = max_frame_size


class Routes(Protocol):
    """Where a connection finds containers (the SegmentStoreService)."""

    cache: CacheManager | None  # whose throttling pauses appends (None: no Tier-2, never throttled)

    def container_for(self, segment: str) -> SegmentContainer:
        """The running container that owns ``segment``. Raises ContainerUnavailable (or WrongHost)."""
        ...

    def container_by_id(self, container_id: int) -> list[SegmentContainer]:
        """The running container ``container_id``, or every running one for a negative id."""
        ...


class SegmentStoreConnection(asyncio.Protocol):
    """One client connection, routed to containers by ``routes``."""

    def __init__(self, routes: Routes, limits: ConnectionLimits,
                 on_closed: Callable[[SegmentStoreConnection], None] | None = None, tokens: TokenChecker | None = None):
        container_for = routes.container_for
        self._tokens = tokens  # None: no authorization (every request is served)
        self._container_for = container_for
        self._cache = routes.cache
        self._limits = limits
        self._on_closed = on_closed
        self._decoder = wire.Decoder(limits.max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._outbox: Outbox | None = None  # every reply goes out through it, in order
        self._loop = asyncio.get_event_loop()
        self._transients: set[str] = set()
        self._appends = AppendProcessor(container_for, self.send, self.close, self._append_bytes_settled)
        self._handlers = RequestHandlers(container_for, tail_read_timeout=limits.tail_read_timeout,
                                         transients=self._transients, container_by_id=routes.container_by_id)
        # One lookup per command: appends return the bytes they leave outstanding; the others answer at once.
        self._appending: dict[type, Callable[[Any], int]] = {
            wc.AppendBlockEnd: self._appends.append_block_end, wc.ConditionalAppend: self._appends.conditional_append,
            wc.ConditionalBlockEnd: self._appends.conditional_block_end}
        self._immediate: dict[type, Callable[[Any], None]] = {
            wc.Hello: self._hello, wc.KeepAlive: self._keep_alive,
            wc.SetupAppend: self._setup_append}
        self._tasks: set[asyncio.Task[None]] = set()
        # decoded commands not yet dispatched, in arrival order
        self._backlog: deque[wire.Command | _ProtocolFailure] = deque()
        self._pump_scheduled = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._append_bytes_outstanding = 0
        self._paused_for_appends = False
        self._paused_for_writes = False  # the transport's buffer or the outbox is over its limit
        self._transport_paused = False  # the transport said pause_writing
        self._waiting_for_cache = False  # appends wait while the cache is throttled (Tier-2 behind)
        self._closed = False
        self._closing = False  # a protocol error was seen: finish what was taken, then close
        self._settled: asyncio.Future[None] | None = None  # while closing: resolved once nothing taken is pending
        self._closer: asyncio.Task[None] | None = None
        self._client_version = wire.WIRE_VERSION  # the client's high version, from its Hello
        self.peer: object = None  # the client's address (the transport's "peername"), once connected

    def __repr__(self) -> str:
        return f"<SegmentStoreConnection {self.peer} closed={self._closed}>"

    # ------------------------------------------------------------------ transport callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream server's transport: an asyncio.Transport in all but name (uvloop's does not subclass it).
        self._transport = stream = cast(asyncio.Transport, transport)
        self.peer = stream.get_extra_info("peername")
        stream.set_write_buffer_limits(high=self._limits.write_buffer_high)
        self._outbox = Outbox(stream, self._loop, limit=self._limits.write_buffer_high,
                              on_unblocked=self._refresh_writable, on_failure=self.close)

    def data_received(self, data: bytes) -> None:
        if self._closed or self._closing:
            return
        self._decoder.feed(data)
        try:
            while (command := self._decoder.next_command()) is not None:
                self._backlog.append(command)
        except wire.ProtocolError as error:
            self._backlog.append(_ProtocolFailure(str(error)))
        if not self._pump_scheduled:
            self._pump()  # now, not on the next turn: a lone append should not wait for one

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, error: Exception | None) -> None:
        self._closed = True
        self._appends.close()
        if self._outbox is not None:
            self._outbox.close()
        for task in self._tasks:
            task.cancel()
        self._delete_transients()
        self._notify_if_settled()
        if self._on_closed is not None:
            self._on_closed(self)

    def pause_writing(self) -> None:
        self._transport_paused = True
        self._refresh_writable()

    def resume_writing(self) -> None:
        self._transport_paused = False
        if self._outbox is not None:
            self._outbox.writing_resumed()
        self._refresh_writable()

    def _refresh_writable(self) -> None:
        """Writing pauses while the transport's buffer or the outbox's held frames are over their limit."""
        paused = self._transport_paused or (self._outbox is not None and self._outbox.blocked)
        if paused == self._paused_for_writes:
            return
        self._paused_for_writes = paused
        if paused:
            self._writable.clear()
            self._update_reading()
        else:
            self._writable.set()
            self._update_reading()
            self._schedule_pump()

    # ------------------------------------------------------------------ dispatch

    def _schedule_pump(self) -> None:
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self._loop.call_soon(self._pump)

    def _pump(self) -> None:
        """Dispatches backlog commands in order until the backlog is empty or a limit stops it."""
        self._pump_scheduled = False
        backlog = self._backlog
        while backlog and not self._closed:
            if (self._paused_for_writes or self._paused_for_appends
                    or len(self._tasks) >= self._limits.request_tasks_max):
                break
            if type(backlog[0]) in self._appending and self._cache is not None and self._cache.throttled:
                if not self._waiting_for_cache:
                    self._waiting_for_cache = True
                    self._cache.when_relieved(self._cache_relieved)
                break
            command = backlog.popleft()
            if isinstance(command, _ProtocolFailure):
                backlog.clear()
                self._appends.flush_submitted()
                self._close_after_pending(f"protocol error: {command.reason}")
                return
            self._dispatch(command)
        self._appends.flush_submitted()
        self._update_reading()

    def _cache_relieved(self) -> None:
        self._waiting_for_cache = False
        self._schedule_pump()

    def _dispatch(self, command: wire.Command) -> None:
        kind = type(command)
        try:
            if self._tokens is not None:
                refusal = self._tokens.check(command)
                if refusal is not None:
                    self.send(refusal)
                    return
            append = self._appending.get(kind)
            if append is not None:
                self._append_bytes_outstanding += append(command)
                if self._append_bytes_outstanding > self._limits.append_bytes_outstanding_max:
                    self._paused_for_appends = True
                return
            answer = self._immediate.get(kind)
            if answer is not None:
                answer(command)
                return
            self._spawn_answer(command)
        except CloseConnection as close:
            self.close(str(close))

    def _hello(self, command: wc.Hello) -> None:
        self._client_version = command.high_version
        self.send(wc.Hello(wire.WIRE_VERSION, wire.OLDEST_COMPATIBLE_VERSION))
        if command.low_version > wire.WIRE_VERSION or command.high_version < wire.OLDEST_COMPATIBLE_VERSION:
            self.close(f"incompatible client versions {command.low_version}..{command.high_version}")

    def _keep_alive(self, command: wc.KeepAlive) -> None:
        self.send(wc.KeepAlive())

    def _setup_append(self, command: wc.SetupAppend) -> None:
        reply = self._appends.setup_append(command)
        if reply is not None:
            self.send(reply)
            return
        # an append to the segment is being logged: answered once it is durable or failed
        self._spawn_answer(command, self._appends.setup_append_settled(command))

    def _spawn_answer(self, command: wire.Command, reply: Awaitable[wire.Reply | FileFrame] | None = None) -> None:
        task = self._loop.create_task(self._answer_later(command, reply))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    async def _answer_later(self, command: wire.Command,
                            answer: Awaitable[wire.Reply | FileFrame] | None = None) -> None:
        """Sends the reply to ``command`` (``answer``, or the request handlers' answer) once it is ready."""
        try:
            reply = await (answer if answer is not None else self._handlers.handle(command))
        except CloseConnection as close:
            self.close(str(close))
            return
        except errors.ContainerUnavailable as error:
            self.close(f"container unavailable: {error}")
            return
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: this connection closes, the server stays up
            log.exception("request handler failed", extra={"request": type(command).__name__})
            self.close("internal error")
            return
        try:
            while self._paused_for_writes and not self._closed:
                await self._writable.wait()
        except BaseException:
            if isinstance(reply, FileFrame):
                reply.region.release()
            raise
        self.send(reply)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._backlog:
            self._schedule_pump()
        self._notify_if_settled()

    # ------------------------------------------------------------------ output and lifecycle

    def send(self, reply: wire.Reply | FileFrame) -> None:
        outbox = self._outbox
        if self._closed or outbox is None:
            if isinstance(reply, FileFrame):
                reply.region.release()
            return
        kind = type(reply)
        if kind is FileFrame:
            outbox.send_file(reply)  # type: ignore[arg-type]  # checked just above
            if outbox.blocked:
                self._refresh_writable()
            return
        if kind is wc.ErrorMessage and self._client_version < _ERROR_MESSAGE_VERSION:
            # Clients older than v15 cannot decode ErrorMessage; closing gives them the same outcome.
            self.close(f"error for a v{self._client_version} client: {reply.message}")  # type: ignore[union-attr]
            return
        outbox.send(wire.encode_parts(reply))  # type: ignore[arg-type]  # not a FileFrame
        if outbox.blocked:
            self._refresh_writable()

    def close(self, reason: str = "") -> None:
        if self._closed:
            return
        self._closed = True
        if reason:
            log.info("closing connection", extra={"peer": str(self.peer), "reason": reason})
        if self._outbox is not None:
            self._outbox.close()
        if self._transport is not None:
            self._transport.close()

    def _close_after_pending(self, reason: str, grace_seconds: float = 2.0) -> None:
        """Stops reading, lets the requests and appends already taken finish (bounded), then closes.

        No polling: the last request task or append to finish resolves ``_settled`` (``_notify_if_settled``).
        """
        if self._closed or self._closing or self._transport is None:
            return
        self._closing = True
        self._transport.pause_reading()
        settled = self._settled = self._loop.create_future()
        self._notify_if_settled()

        async def close_when_settled() -> None:
            try:
                await asyncio.wait_for(settled, grace_seconds)
            except TimeoutError:
                pass
            self.close(reason)

        self._closer = self._loop.create_task(close_when_settled())

    def _notify_if_settled(self) -> None:
        """Wakes ``_close_after_pending`` once no request task or append bytes remain (or the connection is lost).

        The waiter resumes on a later turn of the loop, so the reply being sent when this is called goes out first.
        """
        settled = self._settled
        if settled is not None and not settled.done() and (
                self._closed or not (self._tasks or self._append_bytes_outstanding)):
            settled.set_result(None)

    def _append_bytes_settled(self, size: int) -> None:
        self._append_bytes_outstanding -= size
        self._notify_if_settled()
        resume_at = self._limits.append_bytes_outstanding_max // 2
        if self._paused_for_appends and self._append_bytes_outstanding <= resume_at:
            self._paused_for_appends = False
            self._schedule_pump()

    def _update_reading(self) -> None:
        if self._transport is None or self._closed:
            return
        if self._closing or self._backlog or self._paused_for_appends or self._paused_for_writes:
            self._transport.pause_reading()
        else:
            self._transport.resume_reading()

    def _delete_transients(self) -> None:
        for name in list(self._transients):
            try:
                container = self._container_for(name)
                future = container.delete_soon(name)
                future.add_done_callback(_ignore_outcome)
            except errors.SegmentStoreError:
                pass
        self._transients.clear()


class _ProtocolFailure:
    """Marks, in the backlog, where the byte stream became malformed."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


def _ignore_outcome(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()

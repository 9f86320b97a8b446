"""``StreamWriter``: the binding's event writer, on the SDK's :class:`~clients.writer.event_writer.EventWriter`.

``write_event`` / ``write_event_bytes`` block while the writer holds ``max_inflight_events`` events
not yet acknowledged: with the default 0, each call returns once its event is durable; with N, a
call waits for the oldest of N + 1 events (and raises its failure). ``flush`` waits for all of
them. ``write_event_async`` returns a future of the running loop that completes once the event is
durable. When the writer is garbage collected it is flushed and closed in the background (the
binding flushes on drop).

Theory of operation. Every call puts its event, with a :class:`concurrent.futures.Future` to settle,
on a queue that one task of the runtime loop drains in order (the first event after a pause wakes the
loop; later ones ride along), so events of one key are stored in call order, blocking and async calls
alike, and a call that need not wait costs no trip to the loop. The task hands each event to the SDK
writer and settles the futures of each acknowledgement once it completes; a call waits on its
future (or on the oldest one held) only where the binding's would wait.

Events above 8 MiB are written as large events (bytes written beside the segment, then merged into
it as one event), as the Rust client does; such an event is settled once it is in the stream.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections import deque
from collections.abc import Awaitable, Generator
from typing import Any

from clients.config import WriterConfig
from clients.errors import TributaryError
from clients.writer.event_writer import EventWriter
from wire.constants import MAX_EVENT_SIZE

from ._common import Internal, check_routing_key, check_type, error_text, scoped_stream_text
from ._connection import Connection
from ._runtime import Runtime

WRITE_TIMEOUT_SECONDS = 120.0  # how long a blocking write waits for its acknowledgement (the binding's bound)

# The SDK's SegmentWriter.add returns the ack of the *next* block when an event fills its block exactly
# (or alone reaches the block size), so that ack may never complete. A prime block size just under the
# largest append (8 MiB + 8) leaves one way to fill a block exactly: a single event that large, which
# goes through write_batch (whose ack is the event's own). Events of equal size never add up to a prime.
BLOCK_SIZE = 8_388_593
_ENVELOPE = 8

Settled = concurrent.futures.Future  # settled with None once the event is durable, or with its failure


class _Done:
    """The acknowledgement of a large event: written and committed by the time it is accepted."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


_DONE = _Done()


def _settle(future: Settled[None], kind: type[Exception] | None, failure: BaseException | None) -> None:
    """Settles ``future``: done, or failed with ``kind`` (ValueError, OSError) caused by ``failure``."""
    if future.done():
        return  # cancelled by its caller (an async write whose awaiting task was cancelled)
    if failure is None:
        future.set_result(None)
        return
    error = (kind or ValueError)(f"Error observed while writing an event: {error_text(failure)}")
    error.__cause__ = failure
    future.set_exception(error)


class _Writer:
    """The queue of one StreamWriter's events and the SDK writer it feeds (see the module docstring)."""

    def __init__(self, runtime: Runtime, writer: EventWriter, max_inflight: int):
        self.runtime = runtime
        self.writer = writer
        self.max_inflight = max_inflight
        self._lock = threading.Lock()
        self._queue: deque[tuple[bytes, str | None, Settled[None], type[Exception]]] = deque()
        self._draining = False  # a drain is scheduled or running (set and cleared under _lock)
        self._drain_task: asyncio.Task[None] | None = None
        self._held: deque[Settled[None]] = deque()  # the blocking writes' futures not yet waited for
        self._held_lock = threading.Lock()

    # ------------------------------------------------------------------ the application's threads

    def submit(self, payload: bytes, routing_key: str | None, kind: type[Exception]) -> Settled[None]:
        """Queues an event; the future settles once it is durable (failures as ``kind``)."""
        if not self.runtime.alive:
            raise RuntimeError("this pravega_client object belongs to another process (made before a fork), "
                               "or the interpreter is shutting down")
        future: Settled[None] = concurrent.futures.Future()
        with self._lock:
            self._queue.append((payload, routing_key, future, kind))
            start, self._draining = not self._draining, True
        if start:
            self.runtime.loop.call_soon_threadsafe(self._start)
        return future

    def write(self, payload: bytes, routing_key: str | None) -> None:
        """A blocking write: queues the event, then waits for the oldest held beyond ``max_inflight``."""
        if self.runtime.in_loop_thread():
            raise RuntimeError("a blocking pravega_client call cannot run on the client's own event loop")
        future = self.submit(payload, routing_key, ValueError)
        with self._held_lock:
            self._held.append(future)
            due = [self._held.popleft() for _ in range(len(self._held) - self.max_inflight)]
        for held in due:
            _wait(held)

    def flush(self, connection: Connection) -> None:
        """Waits for every blocking write held, then for everything handed to the SDK writer."""
        with self._held_lock:
            held, self._held = self._held, deque()
        failure: ValueError | None = None
        for future in held:
            try:
                _wait(future)
            except ValueError as error:
                failure = failure or error
        if failure is not None:
            raise failure
        connection.call(self._flush())

    # ------------------------------------------------------------------ the loop

    def _start(self) -> None:
        self._drain_task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._queue:
                        self._draining = False
                        return
                    batch = list(self._queue)
                    self._queue.clear()
                acks: dict[Awaitable[None], list[tuple[Settled[None], type[Exception]]]] = {}
                for payload, routing_key, future, kind in batch:
                    try:
                        ack = await self._accept(payload, routing_key)
                    except Exception as failure:  # noqa: BLE001 - the failure goes to the caller's future
                        _settle(future, kind, failure)
                        continue
                    acks.setdefault(ack, []).append((future, kind))
                for ack, waiters in acks.items():
                    if ack is _DONE:
                        for future, kind in waiters:
                            _settle(future, kind, None)
                    else:
                        asyncio.get_running_loop().create_task(_settle_when(ack, waiters))
        except BaseException as failure:  # the loop is going away: nothing queued is written
            with self._lock:
                rest, self._draining = list(self._queue), False
                self._queue.clear()
            for _, _, future, kind in rest:
                _settle(future, kind, failure)
            raise

    async def _accept(self, payload: bytes, routing_key: str | None) -> Awaitable[None]:
        """Hands the event to the SDK writer; returns what completes once it is durable."""
        if len(payload) > MAX_EVENT_SIZE:  # as the Rust client: a large event (its bytes beside the segment)
            await self.writer.write_large_event(payload, routing_key)
            return _DONE
        if len(payload) + _ENVELOPE >= BLOCK_SIZE:
            return await self.writer.write_batch([payload], routing_key)
        return await self.writer.write(payload, routing_key)

    async def _drained(self) -> None:
        """Returns once every event queued so far was handed to the SDK writer."""
        while self._drain_task is not None and not self._drain_task.done():
            await asyncio.wait({self._drain_task})

    async def _flush(self) -> None:
        await self._drained()
        try:
            await self.writer.flush()
        except TributaryError as error:
            raise ValueError(f"Error observed while writing an event: {error_text(error)}") from error

    async def close(self) -> None:
        """Writes what is queued, flushes and closes the SDK writer (garbage collection, exit)."""
        await self._drained()
        try:
            await self.writer.close()
        except TributaryError:
            pass  # the failure was raised to the application already (or nobody waited for it)


async def _settle_when(ack: Awaitable[None], waiters: list[tuple[Settled[None], type[Exception]]]) -> None:
    failure: BaseException | None = None
    try:
        await ack
    except Exception as error:  # noqa: BLE001 - the failure goes to the callers' futures
        failure = error
    for future, kind in waiters:
        _settle(future, kind, failure)


def _wait(future: Settled[None]) -> None:
    """Waits (without the GIL) for a blocking write's event to be durable; its failure raises ValueError."""
    try:
        future.result(WRITE_TIMEOUT_SECONDS)
    except TimeoutError:
        raise ValueError("Write timed out, please check connectivity with Pravega.") from None


def _close_later(loop_runtime: Runtime, writer: _Writer) -> None:
    loop_runtime.later(writer.close())


class StreamWriter(Internal):
    """Writes events to one stream (made by ``StreamManager.create_writer``)."""

    _connection: Connection
    _scope: str
    _stream: str
    _writer: _Writer

    @classmethod
    def _make(cls, connection: Connection, scope: str, stream: str, max_inflight_events: int) -> StreamWriter:
        writer = cls._new()
        writer._connection, writer._scope, writer._stream = connection, scope, stream
        if max_inflight_events < 0:
            raise OverflowError("can't convert negative int to unsigned")
        writer._writer = connection.call(_make_writer(connection, scope, stream, max_inflight_events))
        connection.writers.add(writer._writer)
        weakref.finalize(writer, _close_later, connection.runtime, writer._writer)
        return writer

    def write_event(self, event: str, routing_key: str | None = None) -> None:
        """Writes ``event`` (UTF-8) with an optional routing key; blocks as the class docstring says."""
        check_type(event, str, "event")
        self.write_event_bytes(event.encode("utf-8"), routing_key)

    def write_event_async(self, event: str, routing_key: str | None = None) -> asyncio.Future[None]:
        """Writes ``event`` (UTF-8); the returned future (of the running loop) completes once it is durable.

        Raises (through the future):
            OSError: the write failed.
        """
        check_type(event, str, "event")
        check_routing_key(routing_key)
        caller = asyncio.get_running_loop()  # before anything is written (RuntimeError without one)
        return asyncio.wrap_future(self._writer.submit(event.encode("utf-8"), routing_key, OSError), loop=caller)

    def write_event_bytes(self, event: bytes, routing_key: str | None = None) -> None:
        """Writes the bytes ``event`` with an optional routing key.

        Raises:
            ValueError: the write failed (the stream is sealed or gone, the server could not be reached).
        """
        check_type(event, bytes, "event")
        check_routing_key(routing_key)
        self._writer.write(event, routing_key)

    def flush(self) -> None:
        """Waits until every event written so far is durable. Raises ValueError if one failed."""
        self._writer.flush(self._connection)

    def to_str(self) -> str:
        return f"Stream: {scoped_stream_text(self._scope, self._stream)} "

    def __repr__(self) -> str:
        return f"StreamWriter({self.to_str()})"


async def _make_writer(connection: Connection, scope: str, stream: str, max_inflight: int) -> _Writer:
    config = WriterConfig(block_size_bytes=BLOCK_SIZE)
    return _Writer(connection.runtime, connection.client.create_writer(scope, stream, config), max_inflight)

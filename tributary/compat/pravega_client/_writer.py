"""``StreamWriter``: the binding's event writer, on the SDK's :class:`~clients.writer.event_writer.EventWriter`.

``write_event`` / ``write_event_bytes`` block while the writer holds ``max_inflight_events`` events
not yet acknowledged: with the default 0, each call returns once its event is durable; with N, a
call waits for the oldest of N + 1 events (and raises its failure). ``flush`` waits for all of
them. ``write_event_async`` returns a future of the running loop that completes once the event is
durable. When the writer is garbage collected it is flushed and closed in the background (the
binding flushes on drop).

Theory of operation. Every call puts its event, with a future to settle, on a queue that one task of
the runtime loop drains in order, so events of one key are stored in call order, blocking and async
calls alike, and a call that need not wait costs no trip to the loop. The first event after a pause
wakes the runtime loop (later ones ride along): a blocking call's at once, an async call's once
the caller's loop ends its current step, so the events a task writes in one go are drained
together. A blocking call's future is a
:class:`concurrent.futures.Future`; an async call's is an asyncio future of the caller's own loop. The
task hands each event to the SDK writer, whose acknowledgements cover blocks of events, and settles
the futures of each acknowledgement once it completes: the async ones of one caller's loop with one
wake-up of that loop (``call_soon_threadsafe``) for the whole block, not one per event. A call waits on
its future (or on the oldest one held) only where the binding's would wait.

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
from clients.loop_thread import current_pid
from clients.writer.event_writer import EventWriter
from wire.constants import MAX_EVENT_SIZE

from ._common import Internal, check_routing_key, check_type, error_text, scoped_stream_text
from ._connection import Connection
from ._runtime import Runtime

WRITE_TIMEOUT_SECONDS = 120.0  # how long a blocking write waits for its acknowledgement (the binding's bound)

Settled = concurrent.futures.Future  # a blocking write's: settled with None once the event is durable, or failed
# What a queued event settles: a blocking write's concurrent future, or an async write's future of its caller's loop
Target = concurrent.futures.Future[None] | asyncio.Future[None]
Waiters = list[tuple[Target, type[Exception]]]


class _Done:
    """The acknowledgement of a large event: written and committed by the time it is accepted."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


_DONE = _Done()


def _settle(future: Target, kind: type[Exception] | None, failure: BaseException | None) -> None:
    """Settles ``future`` (in its own loop's thread if it is an asyncio future): done, or failed with ``kind``
    (ValueError, OSError) caused by ``failure``."""
    if future.done():
        return  # cancelled by its caller (an async write whose awaiting task was cancelled)
    if failure is None:
        future.set_result(None)
        return
    error = (kind or ValueError)(f"Error observed while writing an event: {error_text(failure)}")
    error.__cause__ = failure
    future.set_exception(error)


def _settle_all(waiters: Waiters, failure: BaseException | None) -> None:
    if failure is None:
        for future, _ in waiters:
            if not future.done():
                future.set_result(None)
        return
    for future, kind in waiters:
        _settle(future, kind, failure)


def _settle_group(loop: asyncio.AbstractEventLoop | None, waiters: Waiters, failure: BaseException | None) -> None:
    """Settles futures of one kind: blocking writes' (``loop`` None) here, async writes' of one caller's ``loop``
    there, with one wake-up of it for them all."""
    if loop is None:
        _settle_all(waiters, failure)
        return
    try:
        loop.call_soon_threadsafe(_settle_all, waiters, failure)
    except RuntimeError:
        pass  # that loop is closed: nobody can await those futures any more


class _Writer:
    """The queue of one StreamWriter's events and the SDK writer it feeds (see the module docstring)."""

    def __init__(self, runtime: Runtime, writer: EventWriter, max_inflight: int):
        self.runtime = runtime
        self.writer = writer
        self.max_inflight = max_inflight
        # events to write: payload, routing key, the future to settle, the failure's type, and the future's loop
        # (None for a blocking write's concurrent future)
        self._queue: deque[tuple[bytes, str | None, Target, type[Exception], asyncio.AbstractEventLoop | None]] = (
            deque())
        self._draining = False  # a drain is scheduled or running (cleared only by the drain, with the queue empty)
        self._deferred_on: asyncio.AbstractEventLoop | None = None  # a caller's loop that will wake the runtime
        self._drain_task: asyncio.Task[None] | None = None
        self._held: deque[Settled[None]] = deque()  # the blocking writes' futures not yet waited for
        self._held_lock = threading.Lock()

    # ------------------------------------------------------------------ the application's threads

    def submit(self, payload: bytes, routing_key: str | None, kind: type[Exception]) -> Settled[None]:
        """Queues an event; the future settles once it is durable (failures as ``kind``)."""
        future: Settled[None] = concurrent.futures.Future()
        self.enqueue((payload, routing_key, future, kind, None))
        return future

    def submit_async(self, payload: bytes, routing_key: str | None) -> asyncio.Future[None]:
        """Queues an event; the returned future, of the caller's running loop, settles once it is durable
        (failures as OSError). RuntimeError without a running loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self.enqueue((payload, routing_key, future, OSError, loop), loop)
        return future

    def enqueue(self, entry: tuple[bytes, str | None, Target, type[Exception], asyncio.AbstractEventLoop | None],
                caller: asyncio.AbstractEventLoop | None = None) -> None:
        """Queues ``entry`` and makes sure the runtime loop drains the queue.

        A blocking write wakes the runtime loop at once (unless a drain is on its way). An async write
        (``caller``: its loop) wakes it once the caller's loop ends its current step, so that the writes a
        task makes in one go travel together, and the runtime's thread does not compete for the GIL while
        they are made. Should the caller's loop close before it runs that callback, nothing is lost:
        ``flush`` and ``close`` start the drain themselves, and so does any later write.

        Lock-free (deque operations are atomic): see ``_drain`` for the other half.
        """
        runtime = self.runtime
        if runtime.pid != current_pid():  # made before a fork (the loop's closing is checked when it is woken)
            runtime.check_alive()
        self._queue.append(entry)
        if self._draining:
            return
        if caller is None:
            self._draining = True
            self._wake()
        elif self._deferred_on is not caller:  # the first write of this step of the caller's loop
            self._deferred_on = caller
            caller.call_soon(self._wake_deferred, caller)

    def _wake_deferred(self, caller: asyncio.AbstractEventLoop) -> None:
        if self._deferred_on is caller:
            self._deferred_on = None
        if not self._draining:
            self._draining = True
            self._wake()

    def _wake(self) -> None:
        try:
            self.runtime.loop.call_soon_threadsafe(self._start)
        except RuntimeError:  # the loop is closed: the interpreter is exiting
            self.runtime.check_alive()
            raise

    def write(self, payload: bytes, routing_key: str | None) -> None:
        """A blocking write: queues the event, then waits for the oldest held beyond ``max_inflight``."""
        if self.runtime.in_loop_thread():
            raise RuntimeError("a blocking call cannot run on the event loop it waits for")
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
        """Starts draining the queue, unless a drain runs already (on the runtime loop)."""
        if self._drain_task is None or self._drain_task.done():
            self._drain_task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        queue, take = self._queue, self._queue.popleft
        try:
            while True:
                batch = [take() for _ in range(len(queue))]  # not list(queue): writers may append meanwhile
                if not batch:
                    self._draining = False
                    if not queue:  # checked again: a writer that saw the flag still set did not wake anyone
                        return
                    self._draining = True
                    continue
                # the futures to settle by acknowledgement and loop; most events share the previous one's
                groups: dict[tuple[Awaitable[None], asyncio.AbstractEventLoop | None], Waiters] = {}
                last_ack: Awaitable[None] | None = None
                last_loop: asyncio.AbstractEventLoop | None = None
                last: Waiters = []
                write, write_nowait = self.writer.write, self.writer.write_nowait
                for payload, routing_key, future, kind, loop in batch:
                    try:
                        if len(payload) > MAX_EVENT_SIZE:  # as the Rust client: a large event (beside the segment)
                            await self.writer.write_large_event(payload, routing_key)
                            ack: Awaitable[None] = _DONE
                        else:
                            ack = write_nowait(payload, routing_key) or await write(payload, routing_key)
                    except Exception as failure:  # noqa: BLE001 - the failure goes to the caller's future
                        _settle_group(loop, [(future, kind)], failure)
                        continue
                    if ack is not last_ack or loop is not last_loop:
                        last_ack, last_loop = ack, loop
                        last = groups.setdefault((ack, loop), [])
                    last.append((future, kind))
                for (ack, loop), waiters in groups.items():
                    if ack is _DONE:
                        _settle_group(loop, waiters, None)
                    else:
                        asyncio.get_running_loop().create_task(_settle_when(ack, loop, waiters))
        except BaseException as failure:  # the loop is going away: nothing queued is written
            rest = [take() for _ in range(len(queue))]
            self._draining = False
            for _, _, future, kind, loop in rest:
                _settle_group(loop, [(future, kind)], failure)
            raise

    async def _drained(self) -> None:
        """Returns once every event queued so far was handed to the SDK writer."""
        if self._queue or self._draining:  # its wake-up may be on its way, or lost with a closed caller's loop
            self._start()
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


async def _settle_when(ack: Awaitable[None], loop: asyncio.AbstractEventLoop | None, waiters: Waiters) -> None:
    failure: BaseException | None = None
    try:
        await ack
    except Exception as error:  # noqa: BLE001 - the failure goes to the callers' futures
        failure = error
    _settle_group(loop, waiters, failure)


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
        if type(event) is not str:  # the checks inline: this is the hot path of async writers
            check_type(event, str, "event")
        if routing_key is not None and type(routing_key) is not str:
            check_routing_key(routing_key)
        return self._writer.submit_async(event.encode("utf-8"), routing_key)

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
    return _Writer(connection.runtime, connection.client.create_writer(scope, stream, WriterConfig()), max_inflight)

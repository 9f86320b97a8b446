"""The log's one dedicated I/O thread, and how work crosses between it and the event loop.

Appends do not go through a generic executor. The event loop only puts records on a shared
deque (``deque.append``/``popleft`` are atomic in CPython) and, when the thread is idle, posts a
single wake-up. The awake thread then *drains*: it repeatedly takes a batch from the front of the
deque (everything queued, up to ``batch_bytes_max``, never splitting a record), writes and syncs it,
posts one completion callback to the loop (``call_soon_threadsafe``), and goes straight on to
the next batch. So each batch costs exactly one hand-off back to the loop, and a batch never
waits for the loop to be scheduled before the next one starts. When nothing is left queued after
a batch, that same callback also reports the thread idle (no second hand-off), and the loop wakes
it again if records slipped in meanwhile.

Everything else (open/recovery, truncate, read chunks, close) is a job on the same thread, run
between two batches, so file state is touched by one thread only.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

from .api import AppendData, LogAddress
from .record_format import HEADER_SIZE

T = TypeVar("T")

# A record queued for the writer thread: (sequence, data, length, the future of its address once durable).
QueuedRecord: TypeAlias = tuple[int, AppendData, int, asyncio.Future[LogAddress]]

_DRAIN = object()
_STOP = object()


class WriterThread:
    """Runs batches and submitted jobs on one thread, reporting back to ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str, write_one_batch: Callable[[], bool]):
        self._loop = loop
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._write_one_batch = write_one_batch
        self._thread.start()

    def __repr__(self) -> str:
        return f"<WriterThread {self._thread.name} alive={self._thread.is_alive()}>"

    def submit(self, function: Callable[..., T], *arguments: Any) -> asyncio.Future[T]:
        """Runs ``function(*arguments)`` on the thread; the returned loop future gets its outcome."""
        future: asyncio.Future[T] = self._loop.create_future()
        self._jobs.put((function, arguments, future))
        return future

    def wake_to_drain(self) -> None:
        """Makes the thread call ``write_one_batch`` until it returns False (nothing left queued).

        Jobs submitted meanwhile run between two batches, so a truncate never waits for a lull.
        """
        self._jobs.put(_DRAIN)

    def stop(self) -> None:
        """Lets the thread finish the jobs already submitted, then end."""
        self._jobs.put(_STOP)

    def _run(self) -> None:
        draining = False
        while True:
            if draining and self._jobs.empty():  # this thread is the only consumer: get() won't block
                draining = self._write_one_batch()
                continue
            job = self._jobs.get()
            if job is _STOP:
                # Finish the drain first: every queued record must be reported, even if only as failed.
                while draining:
                    draining = self._write_one_batch()
                return
            if job is _DRAIN:
                draining = True
            else:
                self._run_job(*job)

    def _run_job(self, function: Callable, arguments: tuple, future: asyncio.Future) -> None:
        try:
            result = function(*arguments)
        except BaseException as error:  # noqa: BLE001 - every outcome goes back to the caller
            self.post(_set_exception, future, error)
        else:
            self.post(_set_result, future, result)

    def post(self, callback: Callable, *arguments) -> None:
        """Schedules ``callback(*arguments)`` on the event loop (from the thread)."""
        try:
            self._loop.call_soon_threadsafe(callback, *arguments)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more


def _set_result(future: asyncio.Future, result) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class BatchTaker:
    """Takes batches off the shared deque on the writer thread, holding back one record that did not fit."""

    def __init__(self, pending: deque[QueuedRecord], batch_bytes_max: int):
        self._pending = pending
        self._batch_bytes_max = batch_bytes_max
        self._carried: QueuedRecord | None = None

    def take(self) -> tuple[list[QueuedRecord], int]:
        """The next batch and its size on disk (empty when nothing is queued).

        Whole records up to batch_bytes_max, at least one.
        """
        records: list[QueuedRecord] = [] if self._carried is None else [self._carried]
        size = 0 if self._carried is None else HEADER_SIZE + self._carried[2]
        self._carried = None
        pending, limit = self._pending, self._batch_bytes_max
        while True:
            try:
                record = pending.popleft()
            except IndexError:
                return records, size
            record_size = HEADER_SIZE + record[2]
            if records and size + record_size > limit:
                self._carried = record
                return records, size
            records.append(record)
            size += record_size

    def has_more(self) -> bool:
        """Whether ``take`` would return a record right now."""
        return self._carried is not None or bool(self._pending)

"""LocalDurableDataLog: the embedded Tier-1 log, fsync'd files in one directory.

Theory of operation. The log lives in one directory:

    LOCK                 flock'd by the owner (ownership.py explains why that fences)
    METADATA             epoch, truncation point, live files in order (log_metadata.py)
    log-<index>.tlog     preallocated data files holding records (record_format.py)

This module is the event-loop half. ``append`` validates, assigns the next sequence number and
puts the record, with its future, on a deque shared with the log's I/O thread, and returns the
future (no task per record); nothing else happens per record on the loop. If the thread is idle,
the first queued record wakes it at once (records queued while it wakes join its first batch).
The thread then writes batches until the deque is empty (writer_thread.py): each batch is
everything queued up to ``batch_bytes_max`` bytes, never splitting a record, written with one
pwritev sequence and one fdatasync (batch_writer.py), and reported back with one callback that
resolves its futures in order. That is group commit with one batch in flight.

If a batch fails, its records and everything queued behind it fail with the same kind of error,
the log becomes FAILED, and the files and the lock are released: a new instance recovers. A
record reaches the disk only through a batch, and batch k+1 is written only after batch k was
synced, which is what the reader relies on to tell a torn tail from corruption.

Payloads are not copied on the loop: the caller must leave them unchanged until append returns.

Space: ``truncate`` drops whole files the truncation point has passed; up to ``spare_files_max``
of them are kept for reuse and the rest are deleted (log_files.py), logged at info.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Sequence

from .api import DEFAULT_MAX_APPEND_SIZE, AppendData, DurableDataLog, LogAddress
from .batch_writer import BatchWriter
from .errors import LogClosed, LogError, LogWriteFailed, RecordTooLarge
from .file_operations import FileOperations
from .log_files import LogFilePool
from .log_metadata import LogFileEntry
from .ownership import DirectoryLock
from .record_format import HEADER_SIZE, LENGTH_MAX
from .recovery import RecoveredLog, recover_log
from .scanner import LogFileScanner, corruption_in_file
from .writer_thread import BatchTaker, QueuedRecord, WriterThread

BytesLike = bytes | bytearray | memoryview  # one part of AppendData
log = logging.getLogger("tributary.tier1")

DEFAULT_FILE_SIZE = 64 * 1024 * 1024
DEFAULT_BATCH_BYTES_MAX = 1024 * 1024
DEFAULT_SPARE_FILES_MAX = 2
READ_CHUNK_BYTES = 1024 * 1024  # records handed from the I/O thread per hop while reading


class LogState(enum.Enum):
    NEW = "new"
    OPEN = "open"
    FAILED = "failed"
    CLOSED = "closed"


class LocalDurableDataLog(DurableDataLog):
    """A DurableDataLog kept in fsync'd, preallocated, recycled files of one directory."""

    def __init__(self, directory: str | os.PathLike, *, file_size: int = DEFAULT_FILE_SIZE,
                 batch_bytes_max: int = DEFAULT_BATCH_BYTES_MAX, max_append_size: int = DEFAULT_MAX_APPEND_SIZE,
                 spare_files_max: int = DEFAULT_SPARE_FILES_MAX, file_operations: FileOperations | None = None):
        if not 0 < max_append_size <= LENGTH_MAX:
            raise ValueError(f"max_append_size {max_append_size} out of range")
        if file_size < HEADER_SIZE + max_append_size:
            raise ValueError(f"file_size {file_size} cannot hold a record of max_append_size {max_append_size}")
        if batch_bytes_max < HEADER_SIZE:
            raise ValueError(f"batch_bytes_max {batch_bytes_max} is smaller than a record header")
        self.directory = os.fspath(directory)
        self.max_append_size = max_append_size
        self.file_size = file_size
        self.batch_bytes_max = batch_bytes_max
        self.spare_files_max = spare_files_max
        # Replaceable until open(): the fault-injection seam (tests/support/faults/tier1.py wraps it).
        self.file_operations = file_operations or FileOperations()
        self._lock = DirectoryLock(self.directory)
        self._state = LogState.NEW
        self._epoch: int | None = None
        # Set by a successful open(); used only once it succeeded (open, or failed or closed after that).
        self._loop: asyncio.AbstractEventLoop
        self._thread: WriterThread
        self._writer: BatchWriter
        self._pending: deque[QueuedRecord] = deque()  # shared with the I/O thread
        self._taker = BatchTaker(self._pending, batch_bytes_max)
        self._unacknowledged_bytes = 0
        self._drain_requested = False  # the thread was asked to drain and has not reported idle since
        self._drained: asyncio.Future | None = None  # set when the thread goes idle, for close()
        self._next_sequence = 1
        self._acknowledged_sequence = 0
        self._truncation_sequence = 0
        self._failure: LogError | None = None
        self._release_task: asyncio.Task | None = None

    def __repr__(self) -> str:
        return (f"<LocalDurableDataLog {self.directory} {self._state.value} epoch={self._epoch} "
                f"acknowledged={self._acknowledged_sequence} queued={len(self._pending)}>")

    # ------------------------------------------------------------------ properties

    @property
    def epoch(self) -> int:
        if self._epoch is None:
            raise LogClosed(f"log {self.directory} was never opened")
        return self._epoch

    def readable_records(self) -> int | None:
        return max(0, self._acknowledged_sequence - self._truncation_sequence)

    @property
    def truncation_address(self) -> LogAddress | None:
        return LogAddress(self._truncation_sequence) if self._truncation_sequence else None

    @property
    def append_bytes_unacknowledged(self) -> int:
        """Bytes appended but not yet durable (for the caller's throttling, design §2.11)."""
        return self._unacknowledged_bytes

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> int:
        if self._state is not LogState.NEW:
            raise LogClosed(f"log {self.directory} instance was already opened; create a new instance")
        loop = asyncio.get_running_loop()
        os.makedirs(self.directory, exist_ok=True)
        self._lock.acquire()
        thread = WriterThread(loop, f"tier1-writer {os.path.basename(self.directory)}", self._write_one_batch)
        pool = LogFilePool(self.directory, self.file_size, self.file_operations, self.spare_files_max)
        recovered_on_thread: list[RecoveredLog] = []  # filled and read on the I/O thread only

        def recover() -> RecoveredLog:
            recovered_on_thread.append(recover_log(self.directory, self.file_operations, pool, self.batch_bytes_max))
            return recovered_on_thread[0]

        try:
            recovered = await asyncio.shield(thread.submit(recover))
        except BaseException as error:
            # Give up ownership, but only once the thread is done with the files.
            abandon = thread.submit(_close_after_failed_open, recovered_on_thread, pool)
            thread.stop()
            if isinstance(error, asyncio.CancelledError):
                abandon.add_done_callback(lambda _: self._lock.release())
            else:
                await asyncio.wait([abandon])
                self._lock.release()
            raise
        self._loop, self._thread, self._writer = loop, thread, recovered.writer
        self._epoch = recovered.writer.epoch
        self._acknowledged_sequence = recovered.last_sequence
        self._next_sequence = recovered.last_sequence + 1
        self._truncation_sequence = recovered.writer.metadata.truncation_sequence
        self._state = LogState.OPEN
        return self._epoch

    async def close(self) -> None:
        if self._state is LogState.NEW:
            self._state = LogState.CLOSED
            return
        if self._state is LogState.OPEN:
            self._state = LogState.CLOSED  # refuse new appends; the queued ones are still written
            if self._drain_requested:  # always so while records are queued
                self._drained = self._loop.create_future()
                await self._drained
            self._fail_records(self._take_all_pending(), LogClosed(f"log {self.directory} was closed"))
            if self._release_task is None:
                self._release_task = asyncio.ensure_future(self._release())
        self._state = LogState.CLOSED
        if self._release_task is not None:
            await asyncio.shield(self._release_task)

    async def _release(self) -> None:
        """Closes the files on the I/O thread, ends it, then gives up the lock."""
        try:
            await self._thread.submit(self._writer.close)
        finally:
            self._thread.stop()
            self._lock.release()

    # ------------------------------------------------------------------ append

    def append(self, data: AppendData) -> asyncio.Future[LogAddress]:
        if self._state is not LogState.OPEN:
            raise self._not_open_error()
        kind = type(data)
        if kind is bytes or kind is bytearray:
            length = len(data)
        elif type(data) is list or type(data) is tuple:
            data, length = _parts_and_length(data)
        else:
            # One buffer of another type (a memoryview, an array): mypy does not narrow on exact types, so it
            # still sees a Sequence of parts here; a sequence other than a list or tuple fails in memoryview().
            data = _byte_view(data)  # type: ignore[arg-type]
            length = len(data)
        if length > self.max_append_size:
            raise RecordTooLarge(f"record of {length} bytes exceeds max_append_size {self.max_append_size}")
        sequence = self._next_sequence
        self._next_sequence = sequence + 1
        future = self._loop.create_future()
        self._pending.append((sequence, data, length, future))
        self._unacknowledged_bytes += HEADER_SIZE + length
        if not self._drain_requested:
            # At once: waking the thread takes longer than the callers queueing records meanwhile, and
            # the pipeline hands over a whole frame of operations per call anyway.
            self._drain_requested = True
            self._thread.wake_to_drain()
        return future

    def _write_one_batch(self) -> bool:
        """On the I/O thread: writes the next batch and reports it. Returns False once nothing is queued.

        The last batch of a drain is reported together with the thread going idle: one hand-off.
        """
        records, size = self._taker.take()
        error = None
        if records:
            try:
                self._writer.write_batch(records)
            except BaseException as caught:  # noqa: BLE001 - reported to the loop, which fails the log
                error = caught
        more = self._taker.has_more()
        self._thread.post(self._on_batch_done, records, size, error, more)
        return more

    def _on_batch_done(self, records: list[QueuedRecord], size: int, error: BaseException | None,
                       more: bool) -> None:
        self._unacknowledged_bytes -= size
        if error is not None:
            self._fail(error, records)
        elif records:
            for sequence, _, _, future in records:
                if not future.done():  # a caller that gave up does not withdraw its record
                    future.set_result(LogAddress(sequence))
            self._acknowledged_sequence = records[-1][0]
        if not more:
            self._on_thread_idle()

    def _on_thread_idle(self) -> None:
        if self._pending and self._state is not LogState.FAILED:
            self._thread.wake_to_drain()  # records queued after the thread last looked
            return
        self._drain_requested = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # ------------------------------------------------------------------ failure

    def _fail(self, error: BaseException, records: list[QueuedRecord]) -> None:
        """Fails ``records`` and everything queued; an open log becomes FAILED and lets go of its files."""
        if not isinstance(error, LogError):
            wrapped = LogWriteFailed(f"log {self.directory}: {error!r}")
            wrapped.__cause__ = error
            error = wrapped
        if self._failure is None:
            self._failure = error
        self._fail_records(records + self._take_all_pending(), error)
        if self._state is LogState.OPEN:
            self._state = LogState.FAILED
            self._release_task = asyncio.ensure_future(self._release())

    def _take_all_pending(self) -> list[QueuedRecord]:
        records: list[QueuedRecord] = []
        while True:  # popleft, not clear(): the I/O thread may be taking records concurrently
            try:
                record = self._pending.popleft()
            except IndexError:
                return records
            records.append(record)
            self._unacknowledged_bytes -= HEADER_SIZE + record[2]

    @staticmethod
    def _fail_records(records: list[QueuedRecord], error: LogError) -> None:
        for _, _, _, future in records:
            if not future.done():
                failure = type(error)(str(error))  # one instance per waiter: tracebacks stay apart
                failure.__cause__ = error
                future.set_exception(failure)

    def _not_open_error(self) -> LogError:
        failure = self._failure  # set before the state becomes FAILED
        if failure is not None and self._state in (LogState.FAILED, LogState.CLOSED):
            error = type(failure)(f"the log failed earlier: {failure}")
            error.__cause__ = failure
            return error
        return LogClosed(f"log {self.directory} is {self._state.value}")

    # ------------------------------------------------------------------ truncate and read

    async def truncate(self, upto: LogAddress) -> None:
        if self._state is not LogState.OPEN:
            raise self._not_open_error()
        if upto.sequence > self._acknowledged_sequence:
            raise ValueError(f"cannot truncate at {upto.sequence}: only {self._acknowledged_sequence} acknowledged")
        if upto.sequence <= self._truncation_sequence:
            return
        try:
            metadata, released, deleted = await self._thread.submit(self._writer.truncate, upto.sequence)
        except LogError as error:
            self._fail(error, [])
            raise
        self._truncation_sequence = max(self._truncation_sequence, metadata.truncation_sequence)
        if released:  # what changes on disk (truncations inside a file are only a metadata update)
            log.info("tier-1 log truncated", extra={
                "log": self.directory, "sequence": metadata.truncation_sequence, "files_released": released,
                "files_deleted": deleted, "bytes_deleted": deleted * self.file_size,
                "files_live": len(metadata.files)})

    async def read(self, after: LogAddress | None = None) -> AsyncIterator[tuple[LogAddress, memoryview]]:
        """See DurableDataLog.read. Reads up to the last acknowledged record as of the call.

        Payloads are views into 1 MiB read windows (no copies): keeping one alive keeps its window.
        """
        if self._state is not LogState.OPEN:
            raise self._not_open_error()
        start = max(after.sequence if after is not None else 0, self._truncation_sequence)
        end_of_log = self._acknowledged_sequence
        files = self._writer.metadata.files
        for index, entry in enumerate(files):
            file_end = end_of_log if index == len(files) - 1 else files[index + 1].first_sequence - 1
            if file_end > start:
                async for address, payload in self._read_file(entry, start, file_end):
                    yield address, payload

    async def _read_file(self, entry: LogFileEntry, start: int,
                         end_sequence: int) -> AsyncIterator[tuple[LogAddress, memoryview]]:
        path = os.path.join(self.directory, entry.name)
        fd = self.file_operations.open_for_reading(path)
        try:
            scanner = LogFileScanner(fd, self.file_operations, location=path, first_sequence=entry.first_sequence,
                                     epoch_minimum=entry.epoch, epoch_maximum=self.epoch)
            while True:
                if self._state is not LogState.OPEN:
                    raise self._not_open_error()
                records = await self._thread.submit(scanner.read_records, READ_CHUNK_BYTES, end_sequence)
                if not records:
                    break
                for sequence, payload in records:
                    if sequence > start:
                        yield LogAddress(sequence), payload
            if scanner.last_sequence < end_sequence:
                raise await self._thread.submit(corruption_in_file, scanner, end_sequence)
        finally:
            self.file_operations.close(fd)


def _close_after_failed_open(recovered: list[RecoveredLog], pool: LogFilePool) -> None:
    """On the I/O thread, after a failed or cancelled open: close whatever recovery left open.

    ``recovered`` is filled on this same thread, so it is current; the loop future of the recovery
    job is not (its result is still on its way to the loop when a cancelled open gets here).
    """
    if recovered:
        recovered[0].writer.close()
    else:
        pool.close()


def _byte_view(data: BytesLike) -> memoryview:
    """A flat byte view of any contiguous buffer (so len() counts bytes)."""
    view = memoryview(data)
    if not view.c_contiguous:  # also a strided 1-D byte view: pwritev and xxhash refuse those
        raise ValueError("append data must be a contiguous buffer")
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _parts_and_length(parts: Sequence[BytesLike]) -> tuple[Sequence[BytesLike], int]:
    """The parts as flat byte buffers (``parts`` itself if they already are, as a container's are) and their length."""
    length = 0
    for part in parts:
        kind = type(part)
        if kind is bytes or kind is bytearray or (  # (memoryview cannot be subclassed: isinstance is exact)
                isinstance(part, memoryview) and part.format == "B" and part.ndim == 1 and part.c_contiguous):
            length += len(part)
        else:
            views = [_byte_view(part) for part in parts]
            return views, sum(map(len, views))
    return parts, length

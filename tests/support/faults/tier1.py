"""Fault injection for Tier-1, for tests and benchmarks: only the faults we promise to survive (habit 8).

Two layers, both wrapping the real implementation:

* ``FaultyFileOperations`` sits in the local log's file-operations seam and breaks the disk the
  way disks break: a failed fdatasync (the data may or may not have reached the disk), a torn
  write (only a prefix of a batch written, then an error), a crash point (writing stops for good
  after a byte budget; unsynced data is kept, lost, or lost page by page as after a power cut),
  and latency. The local log turns each into its own ``LogWriteFailed`` path.
* ``FaultyDurableDataLog`` wraps any DurableDataLog: it fails a chosen append (its record reaching
  the log first, or not), delays acknowledgements, and exposes the file faults when the wrapped
  log has the seam. After an injected append failure it behaves as design §2.9 demands: the log
  closes and every later append fails.

The promise every test checks afterwards: a new instance on the same log recovers exactly a
prefix of the appended records that includes every acknowledged one, with no partial record.
"""

from __future__ import annotations

import asyncio
import errno
import random
import threading
import time
from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from server.buffers import prefix_views
from server.tier1.api import AppendData, DurableDataLog, LogAddress
from server.tier1.errors import LogError, LogWriteFailed
from server.tier1.file_operations import FileOperations

PAGE_BYTES = 4096


class SimulatedCrash(OSError):
    """The process "died": this file-operations object performs no more writes or syncs."""


class FaultyFileOperations(FileOperations):
    """A FileOperations that trips armed faults. Arm from any thread; faults trip on the writer thread."""

    def __init__(self, inner: FileOperations | None = None, *, seed: int | None = None):
        self._inner = inner or FileOperations()
        self._random = random.Random(seed)
        self._guard = threading.Lock()
        self._sync_failures = 0
        self._syncs_to_skip = 0
        self._lose_data_on_sync_failure = False
        self._torn_write: int | None | bool = False  # False: not armed; None: random prefix
        self._crash_budget: int | None = None
        self._crash_mode = "keep"
        self.crashed = False
        self._write_delay = self._sync_delay = 0.0
        self._pre_images: list[tuple[int, int, bytes]] = []  # (fd, offset, old bytes) not yet synced

    # ------------------------------------------------------------------ arming

    def fail_next_syncs(self, count: int = 1, *, skip: int = 0, lose_unsynced_data: bool = False) -> None:
        """After ``skip`` more successful fdatasyncs, the next ``count`` raise EIO.

        The bytes written since the last good sync stay on disk, or are rolled back with
        ``lose_unsynced_data`` (the data "may or may not" have reached the disk).
        """
        with self._guard:
            self._syncs_to_skip = skip
            self._sync_failures = count
            self._lose_data_on_sync_failure = lose_unsynced_data

    def tear_next_write(self, prefix_bytes: int | None = None) -> None:
        """The next write puts only ``prefix_bytes`` (random if None) of its batch on disk, then raises EIO."""
        with self._guard:
            self._torn_write = prefix_bytes

    def crash_after(self, byte_count: int, *, unsynced_data: str = "keep") -> None:
        """Writes stop for good once ``byte_count`` more bytes were written (mid-batch, mid-record).

        ``unsynced_data`` says what happens to bytes written since the last sync: "keep" (a process
        crash: the page cache survives), "lose" (a power cut), or "scramble" (a power cut that
        persisted a random subset of the unsynced 4 KiB pages).
        """
        if unsynced_data not in ("keep", "lose", "scramble"):
            raise ValueError(f"unknown unsynced_data mode {unsynced_data!r}")
        with self._guard:
            self._crash_budget = byte_count
            self._crash_mode = unsynced_data

    def add_latency(self, *, write_seconds: float = 0.0, sync_seconds: float = 0.0) -> None:
        self._write_delay, self._sync_delay = write_seconds, sync_seconds

    # ------------------------------------------------------------------ tripping

    def write(self, fd: int, buffers, offset: int) -> None:
        self._raise_if_crashed()
        if self._write_delay:
            time.sleep(self._write_delay)
        total = sum(len(buffer) for buffer in buffers)
        with self._guard:
            torn, self._torn_write = self._torn_write, False
            budget = self._crash_budget
            if budget is not None:
                self._crash_budget = max(0, budget - total)
            if self._needs_pre_images():
                self._pre_images.append((fd, offset, self._inner.read(fd, total, offset)))
        if torn is not False:
            prefix = self._random.randrange(total) if torn is None else min(torn, total)
            self._inner.write(fd, prefix_views(buffers, prefix), offset)
            raise OSError(errno.EIO, f"injected torn write: {prefix} of {total} bytes written")
        if budget is not None and budget < total:
            self._inner.write(fd, prefix_views(buffers, budget), offset)
            self._crash()
            raise SimulatedCrash(errno.EIO, f"injected crash after {budget} of {total} bytes")
        self._inner.write(fd, buffers, offset)

    def sync(self, fd: int) -> None:
        self._raise_if_crashed()
        if self._sync_delay:
            time.sleep(self._sync_delay)
        with self._guard:
            failing = self._sync_failures > 0 and self._syncs_to_skip == 0
            if self._sync_failures and self._syncs_to_skip:
                self._syncs_to_skip -= 1
            if failing:
                self._sync_failures -= 1
                if self._lose_data_on_sync_failure:
                    self._restore([image for image in self._pre_images if image[0] == fd], every_page=True)
            self._pre_images = [image for image in self._pre_images if image[0] != fd]
        if failing:
            raise OSError(errno.EIO, "injected fdatasync failure")
        self._inner.sync(fd)

    def _needs_pre_images(self) -> bool:
        return ((self._sync_failures and self._lose_data_on_sync_failure)
                or (self._crash_budget is not None and self._crash_mode != "keep"))

    def _crash(self) -> None:
        with self._guard:
            self.crashed = True
            if self._crash_mode != "keep":
                self._restore(self._pre_images, every_page=self._crash_mode == "lose")
            self._pre_images = []

    def _restore(self, images: list, *, every_page: bool) -> None:
        """Puts back the old bytes of unsynced writes: all of them, or a random subset of pages."""
        for fd, offset, old in reversed(images):
            for start in range(0, len(old), PAGE_BYTES):
                if every_page or self._random.random() < 0.5:
                    self._inner.write(fd, [old[start:start + PAGE_BYTES]], offset + start)

    def _raise_if_crashed(self) -> None:
        if self.crashed:
            raise SimulatedCrash(errno.EIO, "injected crash: no more I/O")

    # ------------------------------------------------------------------ passed through

    def open_for_update(self, path: str) -> int:
        self._raise_if_crashed()
        return self._inner.open_for_update(path)

    def open_for_reading(self, path: str) -> int:
        return self._inner.open_for_reading(path)

    def close(self, fd: int) -> None:
        self._inner.close(fd)  # a dead process's files are closed too

    def size(self, fd: int) -> int:
        return self._inner.size(fd)

    def read(self, fd: int, size: int, offset: int) -> bytes:
        return self._inner.read(fd, size, offset)

    def create_preallocated(self, path: str, temporary_path: str, size: int) -> None:
        self._raise_if_crashed()
        self._inner.create_preallocated(path, temporary_path, size)

    def replace_file(self, path: str, data: bytes) -> int:
        self._raise_if_crashed()
        return self._inner.replace_file(path, data)

    def read_file(self, path: str) -> bytes | None:
        return self._inner.read_file(path)

    def inode(self, path: str) -> int:
        return self._inner.inode(path)

    def remove(self, path: str) -> None:
        self._raise_if_crashed()
        self._inner.remove(path)

    def sync_directory(self, directory: str) -> None:
        self._raise_if_crashed()
        self._inner.sync_directory(directory)


@runtime_checkable
class _FileOperationsSeam(Protocol):
    """A log whose file I/O goes through a replaceable ``file_operations`` (LocalDurableDataLog, until open())."""

    file_operations: FileOperations


class FaultyDurableDataLog(DurableDataLog):
    """Wraps a DurableDataLog and injects append failures, latency and (through the seam) disk faults.

    With no fault armed it behaves exactly like the wrapped log (it runs the conformance suite).
    File faults need a wrapped log with a ``file_operations`` seam, installed before ``open()``.
    """

    def __init__(self, inner: DurableDataLog, *, seed: int | None = None):
        self.inner = inner
        self.max_append_size = inner.max_append_size
        self._random = random.Random(seed)
        self.file_faults: FaultyFileOperations | None = None
        if isinstance(inner, _FileOperationsSeam) and isinstance(inner.file_operations, FileOperations):
            seam = inner.file_operations
            self.file_faults = seam if isinstance(seam, FaultyFileOperations) else FaultyFileOperations(seam, seed=seed)
            inner.file_operations = self.file_faults
        self._appends_to_skip: int | None = None  # armed: this many succeed, then one fails
        self._data_reaches_disk = False
        self._ack_delay_seconds = 0.0
        self._ack_jitter_seconds = 0.0
        self._failure: LogWriteFailed | None = None

    def __repr__(self) -> str:
        return f"<FaultyDurableDataLog {self.inner!r} failed={self._failure is not None}>"

    # ------------------------------------------------------------------ arming

    def fail_next_append(self, *, skip: int = 0, data_reaches_disk: bool = False) -> None:
        """After ``skip`` more appends, the next one fails with LogWriteFailed, as if its fsync failed.

        With ``data_reaches_disk`` its record is appended (durably) to the wrapped log before the
        failure is reported; otherwise it never reaches it. Either way the log then closes, so
        every later append fails too (there is no "N-th" failure after the first).
        """
        self._appends_to_skip = skip
        self._data_reaches_disk = data_reaches_disk

    def add_latency(self, seconds: float, jitter_seconds: float = 0.0) -> None:
        """Delays every acknowledgement (after durability, so ordering guarantees are untouched)."""
        self._ack_delay_seconds, self._ack_jitter_seconds = seconds, jitter_seconds

    def _file_faults(self) -> FaultyFileOperations:
        if self.file_faults is None:
            raise TypeError(f"{type(self.inner).__name__} has no file-operations seam for disk faults")
        return self.file_faults

    def fail_next_sync(self, *, skip: int = 0, lose_unsynced_data: bool = False) -> None:
        """After ``skip`` good fdatasyncs the next one fails (see FaultyFileOperations.fail_next_syncs)."""
        self._file_faults().fail_next_syncs(1, skip=skip, lose_unsynced_data=lose_unsynced_data)

    def tear_next_write(self, prefix_bytes: int | None = None) -> None:
        self._file_faults().tear_next_write(prefix_bytes)

    def crash_after(self, byte_count: int, *, unsynced_data: str = "keep") -> None:
        self._file_faults().crash_after(byte_count, unsynced_data=unsynced_data)

    # ------------------------------------------------------------------ DurableDataLog

    @property
    def epoch(self) -> int:
        return self.inner.epoch

    @property
    def truncation_address(self) -> LogAddress | None:
        return self.inner.truncation_address

    def readable_records(self) -> int | None:
        return self.inner.readable_records()

    async def open(self) -> int:
        return await self.inner.open()

    def read(self, after: LogAddress | None = None) -> AsyncIterator[tuple[LogAddress, memoryview]]:
        return self.inner.read(after)

    async def append(self, data: AppendData) -> LogAddress:
        if self._failure is not None:
            raise LogWriteFailed(f"the log failed earlier: {self._failure}") from self._failure
        if self._appends_to_skip is not None:
            if self._appends_to_skip == 0:
                self._appends_to_skip = None
                return await self._fail_append(data)
            self._appends_to_skip -= 1
        address = await self.inner.append(data)
        if self._ack_delay_seconds or self._ack_jitter_seconds:
            await asyncio.sleep(self._ack_delay_seconds + self._random.uniform(0, self._ack_jitter_seconds))
        return address

    async def _fail_append(self, data: AppendData) -> LogAddress:
        # Set before any await: appends called after this one must fail even if they finish first.
        self._failure = LogWriteFailed("injected append failure"
                                       + (" (the record reached the log)" if self._data_reaches_disk else ""))
        if self._data_reaches_disk:
            try:
                await self.inner.append(data)
            except LogError:
                pass
        await self.inner.close()
        raise self._failure

    async def truncate(self, upto: LogAddress) -> None:
        if self._failure is not None:
            raise LogWriteFailed(f"the log failed earlier: {self._failure}") from self._failure
        await self.inner.truncate(upto)

    async def close(self) -> None:
        await self.inner.close()

"""The writer-thread half of the local log: turns a batch of records into one write and one sync.

Theory of operation. The event-loop half (``local.py``) assigns sequence numbers and queues
records; the log's I/O thread (``writer_thread.py``) takes them off in batches and calls
``write_batch`` for each, reporting back to the loop once per batch. ``write_batch`` then:

1. checks that the metadata file is still the one this owner wrote (fencing, see ownership.py);
2. encodes the headers, and copies small payloads next to them, into one reused staging buffer
   (large payloads stay where they are and become their own iovecs, so nothing big is copied);
3. writes everything with pwritev at the tail of the current file and calls fdatasync once.

A batch that does not fit in the current file is split at a record boundary: the part that fits
is written and synced, the log rolls into a spare file (metadata replaced first, so the new file
is live before any record in it can be acknowledged), and the rest goes there. Each synced part
is its own "batch" for the on-disk ``batch_index`` (record_format.py).

Any I/O error is fatal: the writer remembers it and refuses every later call, because after a
failed fdatasync nothing more can be known about what reached the disk; recovery by a new
instance decides (design §2.4, "fail-stop on log write failure").
"""

from __future__ import annotations

import os
import time
from typing import NoReturn

import xxhash

from .. import metrics
from .errors import LogClosed, LogError, LogFenced, LogWriteFailed
from .file_operations import FileOperations
from .log_files import LogFilePool
from .log_metadata import METADATA_FILE_NAME, LogFileEntry, LogMetadata, load_metadata, store_metadata
from .record_format import CHECKSUM_SIZE, HEADER_SIZE, checksum_of, pack_checksum_into, pack_fields_into
from .writer_thread import QueuedRecord

# Payloads up to this size are copied into the staging buffer (a cheap memcpy) so that a batch of
# small records is a handful of iovecs; larger ones are written from the caller's buffer.
COPY_BYTES_MAX = 8 * 1024


class BatchWriter:
    """Owns the open log files of one log instance. Every method runs on the writer thread."""

    def __init__(self, directory: str, file_operations: FileOperations, pool: LogFilePool, *,
                 metadata: LogMetadata, metadata_inode: int, fd: int, offset: int, batch_bytes_max: int):
        self.directory = directory
        self.metadata = metadata
        self.epoch = metadata.epoch
        self._file_operations = file_operations
        self._pool = pool
        self._metadata_path = os.path.join(directory, METADATA_FILE_NAME)
        self._metadata_inode = metadata_inode
        self._fd: int | None = fd
        self._offset = offset
        self._capacity = file_operations.size(fd)
        self._staging = memoryview(bytearray(max(batch_bytes_max, COPY_BYTES_MAX) + HEADER_SIZE))
        self._failure: LogError | None = None

    def __repr__(self) -> str:
        state = f"failed: {self._failure}" if self._failure else "ok"
        current = self.metadata.files[-1].name if self.metadata.files else "-"
        return f"<BatchWriter {current} offset={self._offset} epoch={self.epoch} {state}>"

    def write_batch(self, records: list[QueuedRecord]) -> None:
        """Writes ``records`` ((sequence, data, length, waiter) tuples, in order) durably.

        Raises:
            LogWriteFailed: an I/O error; nothing later will be written by this instance.
            LogFenced: another owner replaced the metadata.
        """
        self._raise_if_failed()
        try:
            self._check_metadata_unchanged()
            start = 0
            while start < len(records):
                end = self._records_fitting(records, start)
                if end == start:
                    self._roll(records[start][0], records[start][2])
                    continue
                self._write_group(records, start, end)
                start = end
        except Exception as error:  # noqa: BLE001 - any failure fails the log (fail-stop), never vanishes
            self._fail_with(error)

    def truncate(self, sequence: int) -> tuple[LogMetadata, int, int]:
        """Persists the truncation point and recycles the files it frees.

        Returns:
            The new metadata, how many files left it, and how many of those were deleted (not kept as spares).
        """
        self._raise_if_failed()
        try:
            self._check_epoch_unchanged()
            metadata, dropped = self.metadata.truncated(sequence)
            deleted = 0
            if metadata != self.metadata:
                # Metadata first: it must never name a file that is already being reused.
                self._metadata_inode = store_metadata(self.directory, metadata, self._file_operations)
                self.metadata = metadata
                deleted = self._pool.give_back(entry.name for entry in dropped)
            return metadata, len(dropped), deleted
        except Exception as error:  # noqa: BLE001 - any failure fails the log (fail-stop), never vanishes
            self._fail_with(error)

    def close(self) -> None:
        """Closes the current file and waits for a background preallocation (idempotent)."""
        fd, self._fd = self._fd, None
        try:
            if fd is not None:
                self._file_operations.close(fd)
        finally:
            self._pool.close()

    def _records_fitting(self, records: list[QueuedRecord], start: int) -> int:
        room = self._capacity - self._offset
        end = start
        while end < len(records):
            size = HEADER_SIZE + records[end][2]
            if size > room:
                break
            room -= size
            end += 1
        return end

    def _write_group(self, records: list[QueuedRecord], start: int, end: int) -> None:
        fd = self._open_fd()
        buffers, size = self._encode(records, start, end)
        began = time.perf_counter() if metrics.enabled else 0.0
        self._file_operations.write_durably(fd, buffers, self._offset, size)
        if began:
            metrics.observe_group_commit(True, size, time.perf_counter() - began)
        self._offset += size

    def _encode(self, records: list[QueuedRecord], start: int, end: int) -> tuple[list, int]:
        """Headers (and small payloads) into the staging buffer; returns the iovecs and their size."""
        staging, epoch = self._staging, self.epoch
        buffers: list = []
        first_sequence = records[start][0]
        position = region_start = size = 0
        for index in range(start, end):
            sequence, data, length, _ = records[index]
            header_at = position
            pack_fields_into(staging, header_at, length, sequence, epoch, sequence - first_sequence)
            position += HEADER_SIZE
            size += HEADER_SIZE + length
            parts = data if type(data) is list or type(data) is tuple else (data,)
            if length <= COPY_BYTES_MAX:
                for part in parts:
                    staging[position:position + len(part)] = part
                    position += len(part)
                checksum = checksum_of(staging[header_at + CHECKSUM_SIZE:position])
                pack_checksum_into(staging, header_at, checksum)
            else:
                hasher = xxhash.xxh3_64(staging[header_at + CHECKSUM_SIZE:position])
                for part in parts:
                    hasher.update(part)
                pack_checksum_into(staging, header_at, hasher.intdigest())
                buffers.append(staging[region_start:position])
                buffers.extend(parts)
                region_start = position
        if position > region_start:
            buffers.append(staging[region_start:position])
        return buffers, size

    def _roll(self, first_sequence: int, length: int) -> None:
        """Makes a spare file the current one, starting at ``first_sequence``."""
        old_fd = self._open_fd()
        self._check_epoch_unchanged()
        name = self._pool.take()
        fd = self._file_operations.open_for_update(self._pool.path(name))
        capacity = self._file_operations.size(fd)
        if HEADER_SIZE + length > capacity:
            self._file_operations.close(fd)
            raise LogWriteFailed(f"a record of {length} bytes does not fit in log file {name} ({capacity} bytes)")
        metadata = self.metadata.with_file(LogFileEntry(name, first_sequence, self.epoch))
        try:
            self._metadata_inode = store_metadata(self.directory, metadata, self._file_operations)
        except BaseException:
            self._file_operations.close(fd)
            raise
        self.metadata = metadata
        self._fd, self._offset, self._capacity = fd, 0, capacity
        self._file_operations.close(old_fd)
        self._pool.prepare_ahead()

    def _open_fd(self) -> int:
        """The current file's descriptor (writes and rolls happen before ``close``, on the same thread)."""
        fd = self._fd
        if fd is None:
            raise LogClosed(f"log {self.directory}: the writer is closed")
        return fd

    def _check_metadata_unchanged(self) -> None:
        """One stat per batch: another owner replacing the metadata changes its inode."""
        try:
            inode = self._file_operations.inode(self._metadata_path)
        except FileNotFoundError:
            inode = None
        if inode != self._metadata_inode:
            raise LogFenced(f"log {self.directory}: metadata was replaced by another owner (epoch {self.epoch})")

    def _check_epoch_unchanged(self) -> None:
        self._check_metadata_unchanged()
        stored = load_metadata(self.directory, self._file_operations)
        if stored is None or stored.epoch != self.epoch:
            found = stored.epoch if stored else "none"
            raise LogFenced(f"log {self.directory}: epoch {self.epoch} is no longer current (found {found})")

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise type(self._failure)(f"the log already failed: {self._failure}") from self._failure

    def _fail_with(self, error: Exception) -> NoReturn:
        """Remembers the first failure and raises it as a LogError (I/O errors become LogWriteFailed)."""
        if isinstance(error, LogError):
            self._failure = error
            raise error
        self._failure = LogWriteFailed(f"log {self.directory}: {error!r}")
        raise self._failure from error

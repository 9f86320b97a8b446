"""Reading and validating the records of one log file (the reader side of ``record_format``).

A scanner walks one file from offset 0, accepting records while they are valid (see
``record_format``: magic, bounds, sequence continuity, epoch order, checksum) and stopping at the
first spot that is not. What that spot means is decided by the caller, because it depends on
where the file sits in the log:

* the last file: a torn tail unless ``find_later_record`` finds a record of a later batch
  (``corruption_after_tail``), and the writer resumes at ``scanner.offset``;
* any other file: it must end exactly before the next file's first sequence, so stopping earlier
  is corruption (``corruption_in_file``).

Scanners are blocking and run on the log's writer thread. The file is read in windows of
``window_bytes`` (one pread each); yielded payloads are memoryviews into those windows, so the
records are never copied.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import LogCorrupted
from .file_operations import FileOperations
from .record_format import HEADER_SIZE, MAGIC, MAGIC_OFFSET, RecordHeader, checksum_matches, parse_header

WINDOW_BYTES = 1 << 20


class LogFileScanner:
    """Validating, windowed reader of one log file."""

    def __init__(self, fd: int, file_operations: FileOperations, *, location: str, first_sequence: int,
                 epoch_minimum: int, epoch_maximum: int, window_bytes: int = WINDOW_BYTES):
        self.fd = fd
        self.location = location
        self.size = file_operations.size(fd)
        self.offset = 0  # where the next record starts; after the scan, the end of the good records
        self.next_sequence = first_sequence
        self.last_epoch = epoch_minimum
        self.epoch_maximum = epoch_maximum
        self.stop_reason: str | None = None  # why the scan stopped, once it has
        self._file_operations = file_operations
        self._window_bytes = window_bytes
        self._window = memoryview(b"")
        self._window_start = 0

    def __repr__(self) -> str:
        state = self.stop_reason or "scanning"
        return f"<LogFileScanner {self.location} offset={self.offset} next={self.next_sequence} {state}>"

    @property
    def last_sequence(self) -> int:
        return self.next_sequence - 1

    def read_records(self, byte_budget: int, end_sequence: int) -> list[tuple[int, memoryview]]:
        """The next valid records, about ``byte_budget`` bytes of them, up to ``end_sequence``.

        Returns an empty list once the scan has finished; ``stop_reason`` then says why.
        """
        records: list[tuple[int, memoryview]] = []
        taken = 0
        while taken < byte_budget and self.stop_reason is None:
            if self.next_sequence > end_sequence:
                self.stop_reason = "end"
                break
            payload = self._next_payload()
            if payload is not None:
                records.append((self.next_sequence - 1, payload))
                taken += len(payload) + HEADER_SIZE
        return records

    def skip_to_end(self) -> None:
        """Validates every remaining record without keeping any (tail recovery)."""
        while self.stop_reason is None:
            self._next_payload()

    def find_later_record(self, start: int, wanted: Callable[[RecordHeader], bool]) -> int | None:
        """Offset of the first valid record at or after ``start`` whose header ``wanted`` accepts.

        Looks only at offsets where the magic occurs (``bytes.find``), so stale and zeroed
        stretches cost little.
        """
        position = start
        while position < self.size:
            chunk = self._file_operations.read(self.fd, self._window_bytes + HEADER_SIZE, position)
            end = min(len(chunk), self._window_bytes + MAGIC_OFFSET + len(MAGIC) - 1)
            index = chunk.find(MAGIC, MAGIC_OFFSET, end)
            while index >= 0:
                header_offset = index - MAGIC_OFFSET
                if header_offset + HEADER_SIZE <= len(chunk):
                    header = parse_header(chunk, header_offset)
                    if wanted(header) and self._is_valid_at(position + header_offset, header):
                        return position + header_offset
                index = chunk.find(MAGIC, index + 1, end)
            position += self._window_bytes
        return None

    def _next_payload(self) -> memoryview | None:
        offset = self.offset
        header_view = self._view(offset, HEADER_SIZE)
        if header_view is None:
            self.stop_reason = "end of file"
            return None
        header = parse_header(header_view)
        reason = self._judge(header, offset)
        record = self._view(offset, HEADER_SIZE + header.length) if reason is None else None
        if record is None or not checksum_matches(header, record):
            self.stop_reason = reason or "checksum mismatch"
            return None
        self.offset = offset + HEADER_SIZE + header.length
        self.next_sequence += 1
        self.last_epoch = header.epoch
        return record[HEADER_SIZE:]

    def _judge(self, header: RecordHeader, offset: int) -> str | None:
        """Why the header at ``offset`` cannot be the next record (checksum aside), or None."""
        if header.magic != MAGIC:
            return "no record header"
        if offset + HEADER_SIZE + header.length > self.size:
            return f"length {header.length} runs past the end of the file"
        if header.sequence != self.next_sequence:
            return f"sequence {header.sequence} where {self.next_sequence} was expected"
        if not self.last_epoch <= header.epoch <= self.epoch_maximum:
            return f"epoch {header.epoch} outside [{self.last_epoch}, {self.epoch_maximum}]"
        return None

    def _is_valid_at(self, offset: int, header: RecordHeader) -> bool:
        if header.magic != MAGIC or offset + HEADER_SIZE + header.length > self.size:
            return False
        record = self._file_operations.read(self.fd, HEADER_SIZE + header.length, offset)
        return len(record) == HEADER_SIZE + header.length and checksum_matches(header, memoryview(record))

    def _view(self, offset: int, size: int) -> memoryview | None:
        """Bytes [offset, offset + size) of the file, from the current window or a new one."""
        start = offset - self._window_start
        if start >= 0 and start + size <= len(self._window):
            return self._window[start:start + size]
        if offset + size > self.size:
            return None
        data = self._file_operations.read(self.fd, max(self._window_bytes, size), offset)
        self._window, self._window_start = memoryview(data), offset
        return self._window[:size] if len(data) >= size else None


def later_batch_after(scanner: LogFileScanner) -> Callable[[RecordHeader], bool]:
    """Accepts records of a batch that began after the scanner's expected sequence (evidence of corruption)."""
    expected, epoch_minimum, epoch_maximum = scanner.next_sequence, scanner.last_epoch, scanner.epoch_maximum
    return lambda header: (header.batch_first_sequence > expected
                           and epoch_minimum <= header.epoch <= epoch_maximum)


def same_lineage_after(scanner: LogFileScanner) -> Callable[[RecordHeader], bool]:
    """Accepts records that could continue the scanned log past the bad spot (resynchronisation)."""
    expected, epoch_minimum, epoch_maximum = scanner.next_sequence, scanner.last_epoch, scanner.epoch_maximum
    return lambda header: header.sequence > expected and epoch_minimum <= header.epoch <= epoch_maximum


def corruption_after_tail(scanner: LogFileScanner) -> LogCorrupted | None:
    """For the last file, once scanned: the corruption error if the stop was not a torn tail."""
    if scanner.stop_reason in ("end", "end of file"):
        return None
    later = scanner.find_later_record(scanner.offset + 1, later_batch_after(scanner))
    if later is None:
        return None
    return _corrupted(scanner, later - scanner.offset, f"a later batch's record follows at offset {later}")


def corruption_in_file(scanner: LogFileScanner, end_sequence: int) -> LogCorrupted:
    """For a file whose records must reach ``end_sequence`` but stopped earlier."""
    later = scanner.find_later_record(scanner.offset + 1, same_lineage_after(scanner))
    byte_count = (later if later is not None else scanner.size) - scanner.offset
    where = f"the next valid record is at offset {later}" if later is not None else "nothing valid follows"
    return _corrupted(scanner, byte_count, f"records up to {end_sequence} were expected; {where}")


def _corrupted(scanner: LogFileScanner, byte_count: int, detail: str) -> LogCorrupted:
    return LogCorrupted(
        f"log file {scanner.location} is corrupted at offset {scanner.offset} (expected sequence "
        f"{scanner.next_sequence}: {scanner.stop_reason}); {byte_count} bytes dropped; {detail}",
        location=scanner.location, offset=scanner.offset, byte_count=byte_count)

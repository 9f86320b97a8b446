"""A log store's journal: ledger entries, fences and deletions in append-only files, and the index
rebuilt from them at start (docs/replicated-log.md; record format in ``journal_format``).

Blocking and confined to one thread (the log store runs it on its I/O thread, as the local log
does). ``append`` writes a group of records after the last one of the newest file with one pwritev
and one fdatasync: when it returns, every record in the group is durable and indexed, and only then
may the store acknowledge them.

Files are preallocated to ``file_size_max`` with ``fallocate`` (and fsync'd), so that a group's
fdatasync never has to grow the file. Not by writing zeros, as the local log does for its recycled
files: the journal's files are not recycled, and writing the zeros cost as much disk bandwidth as the
data (measured here, 1.5 MB groups: 784 MB/s with zero-written files, 1,182 MB/s with fallocated
ones). But fallocated space is *unwritten* to the filesystem: the first write into it changes the
file's extent map, and the fdatasync that follows must commit the filesystem's journal too, which
doubles the cost of a small group's sync (4 KiB write + fdatasync, p50: 295 us into fallocated
space, 142 us into written space; three replicas, the second of three: 575 vs 295 us). So while
groups are small (the store is not bandwidth bound), a helper thread zeroes the space just ahead
of the data, ``ZERO_STEP`` bytes at a time with ``O_DIRECT`` and its own fdatasync, keeping up to
``ZERO_RUNWAY`` bytes written ahead; a group never writes into a range being zeroed (it waits for
that step first). Large groups amortise the extent change and start no zeroing, so a bandwidth-bound
store writes its data once. The next file is prepared on a helper thread once the current one is
half full, and the journal rolls over to it at ``file_size_max``. Zeros after the last record are
unused space, never damage. ``open`` scans the
files in order and rebuilds the index; a torn tail of the newest file is zeroed (it was never
acknowledged), damage anywhere else raises ``JournalCorrupted``. ``collect`` deletes
files whose every ledger is deleted, but keeps a file holding a ledger's DELETE record while an
older file still holds that ledger's entries (else a restart would bring the ledger back).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from wire.fields import BytesLike

from ...direct_writes import ALIGNMENT, pwrite_all, write_pages
from ...fsync import fsync_directory
from .journal_format import Kind, encode, scan

log = logging.getLogger("tributary.logstore.journal")

_FILE_NAME = re.compile(r"^journal-(\d{12})\.tj$")
_PREPARING = ".preparing"
DIRECT_GROUP_BYTES = 256 * 1024  # groups this large are written with O_DIRECT (and start no zeroing ahead)
ZERO_STEP = 1024 * 1024  # bytes of fallocated space zeroed ahead of the data at a time
ZERO_RUNWAY = 4 * 1024 * 1024  # written bytes kept ahead of the data while groups are small
DEFAULT_FILE_SIZE_MAX = 64 * 1024 * 1024

# One record to append: (kind, ledger, entry, last_add_confirmed, payload).
NewRecord = tuple[Kind, int, int, int, BytesLike]
# Where ``write`` put a record: (file, kind, ledger, entry, last_add_confirmed, payload offset, length).
Placed = tuple[int, Kind, int, int, int, int, int]


@dataclasses.dataclass
class LedgerState:
    """What the journal knows of one ledger."""

    # entry -> (file number, payload offset, payload length)
    entries: dict[int, tuple[int, int, int]] = dataclasses.field(default_factory=dict)
    fenced: bool = False
    last_add_confirmed: int = -1  # the highest the writer told us
    files: set[int] = dataclasses.field(default_factory=set)  # files holding its records

    @property
    def last_entry(self) -> int:
        return max(self.entries, default=-1)


class StoreJournal(Protocol):
    """What a log store uses of its journal: ``Journal``, or a stand-in (the simulated world's, kept in memory)."""

    ledgers: dict[int, LedgerState]
    deleted: dict[int, tuple[set[int], int]]

    def open(self) -> None: ...

    def close(self) -> None: ...

    def write(self, records: Sequence[NewRecord]) -> list[Placed]: ...

    def index(self, placed: Iterable[Placed]) -> None: ...

    def read(self, ledger: int, entry: int) -> bytes | None: ...

    def collect(self) -> list[int]: ...


class Journal:
    """The journal files of one directory; see the module docstring."""

    def __init__(self, directory: str | os.PathLike, file_size_max: int = DEFAULT_FILE_SIZE_MAX):
        self.directory = os.fspath(directory)
        self.file_size_max = file_size_max
        self._preparer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="journal-prealloc")
        self._prepared: concurrent.futures.Future[None] | None = None  # the next file, being preallocated
        self.ledgers: dict[int, LedgerState] = {}
        # ledger -> (files holding its other records, the file holding its DELETE), while any of them exists
        self.deleted: dict[int, tuple[set[int], int]] = {}
        self._files: dict[int, int] = {}  # file number -> descriptor
        self._current = 0  # number of the file appended to
        self._offset = 0  # its length
        self._page = b""  # the bytes of the current file's last, partly filled page (up to _offset)
        self._written_end = 0  # the current file's bytes before this are written (data or zeros), not fallocated
        self._zeroing: tuple[concurrent.futures.Future[None], int] | None = None  # a zeroing step and its start
        # The two calls that make a group durable; tests replace them to inject disk-full or fsync failures.
        self.write_at: Callable[[int, Sequence[BytesLike], int], object] = self._write_pages
        self.sync: Callable[[int], None] = os.fdatasync

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Scans every file (oldest first), rebuilds the index, cuts a torn tail, opens for appends."""
        os.makedirs(self.directory, exist_ok=True)
        for name in os.listdir(self.directory):
            if name.endswith(_PREPARING):  # a preallocation cut short
                os.unlink(os.path.join(self.directory, name))
        numbers = sorted(int(match.group(1)) for name in os.listdir(self.directory)
                         if (match := _FILE_NAME.match(name)))
        # The newest file may be a prepared one with nothing in it yet: the torn-tail rule is then the one before's.
        newest_with_data = len(numbers) - (2 if numbers and self._is_empty(numbers[-1]) else 1)
        for position, number in enumerate(numbers):
            fd = os.open(self._path(number), os.O_RDWR | os.O_CLOEXEC)
            self._files[number] = fd
            size = os.fstat(fd).st_size
            data = os.pread(fd, size, 0) if size else b""
            records, end = scan(data, newest=position >= newest_with_data)
            for record in records:
                self._index(number, record.kind, record.ledger, record.entry, record.last_add_confirmed,
                            record.payload_offset, record.length)
            written_end = len(data.rstrip(b"\0"))
            if end < written_end:  # a torn tail of the newest file (never acknowledged): zeroed, keeping the space
                pwrite_all(fd, [bytes(written_end - end)], end)
                os.fsync(fd)
            self._current, self._offset = number, end
            self._page = data[end - end % ALIGNMENT:end]
            self._written_end = _page_end(written_end)
        if not numbers:
            self._prepare(1)
            self._start_file(1)

    def close(self) -> None:
        for pending in (self._prepared, self._zeroing[0] if self._zeroing is not None else None):
            if pending is not None:
                concurrent.futures.wait([pending])
        self._preparer.shutdown(wait=True)
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()

    # ------------------------------------------------------------------ writing and reading

    def append(self, records: Sequence[NewRecord]) -> None:
        """Writes ``records`` durably, in order, then indexes them."""
        self.index(self.write(records))

    def write(self, records: Sequence[NewRecord]) -> list[Placed]:
        """Writes ``records`` durably, in order; returns where they went, for ``index``.

        The two halves let a server write on its I/O thread and index on its event loop thread.
        """
        if not records:
            return []
        if self._offset >= self.file_size_max:
            self._start_file(self._current + 1)
        elif self._prepared is None and self._offset >= self.file_size_max // 2:
            self._prepare(self._current + 1)
        parts: list[BytesLike] = []
        placed: list[Placed] = []
        offset = self._offset
        for kind, ledger, entry, last_add_confirmed, payload in records:
            encoded = encode(kind, ledger, entry, last_add_confirmed, payload)
            header_size = len(encoded[0])
            placed.append((self._current, kind, ledger, entry, last_add_confirmed, offset + header_size, len(payload)))
            parts.extend(encoded)
            offset += header_size + len(payload)
        fd = self._files[self._current]
        group_bytes, end = offset - self._offset, _page_end(offset)
        self._wait_for_zeroing(end)
        self.write_at(fd, parts, self._offset)
        self.sync(fd)
        self._offset = offset
        self._written_end = max(self._written_end, end)
        if group_bytes < DIRECT_GROUP_BYTES:
            self._zero_ahead(fd)
        return placed

    def index(self, placed: Iterable[Placed]) -> None:
        """Records what ``write`` made durable in the index."""
        for number, kind, ledger, entry, last_add_confirmed, payload_offset, length in placed:
            self._index(number, kind, ledger, entry, last_add_confirmed, payload_offset, length)

    def read(self, ledger: int, entry: int) -> bytes | None:
        """The entry's payload, or None if this journal does not hold it."""
        state = self.ledgers.get(ledger)
        location = state.entries.get(entry) if state is not None else None
        if location is None:
            return None
        number, offset, length = location
        return os.pread(self._files[number], length, offset)

    def collect(self) -> list[int]:
        """Deletes the files (but the current one) whose every ledger is deleted; returns their numbers."""
        dropped: list[int] = []
        while True:  # dropping files can free the tombstones that kept others: until nothing changes
            live: set[int] = {self._current}
            for state in self.ledgers.values():
                live |= state.files
            for files, tombstone in self.deleted.values():
                if files & (self._files.keys() - {tombstone}):  # its entries are still on disk elsewhere
                    live.add(tombstone)
            now = [number for number in self._files if number not in live]
            if not now:
                break
            for number in now:
                os.close(self._files.pop(number))
                os.unlink(self._path(number))
            self._sync_directory()  # durably gone before a tombstone they needed can go in the next pass
            dropped += now
        if dropped:
            self.deleted = {ledger: (files, tombstone) for ledger, (files, tombstone) in self.deleted.items()
                            if tombstone in self._files or files & self._files.keys()}
        return sorted(dropped)

    # ------------------------------------------------------------------ internals

    def _index(self, number: int, kind: Kind, ledger: int, entry: int, last_add_confirmed: int,
               payload_offset: int, length: int) -> None:
        if kind is Kind.DELETE:
            state = self.ledgers.pop(ledger, None)
            self.deleted[ledger] = (state.files if state is not None else set(), number)
            return
        if ledger in self.deleted:
            return
        state = self.ledgers.setdefault(ledger, LedgerState())
        state.files.add(number)
        state.last_add_confirmed = max(state.last_add_confirmed, last_add_confirmed)
        if kind is Kind.FENCE:
            state.fenced = True
        else:
            state.entries[entry] = (number, payload_offset, length)

    def _write_pages(self, fd: int, parts: Sequence[BytesLike], offset: int) -> None:
        """Writes a group at the end of the data, whole pages at a time: from the start of the last, partly
        filled page (its earlier bytes, kept in memory, written again unchanged) to the end of the page the
        group ends in (zero-padded), so the kernel never reads a page to change part of it. Groups of
        ``DIRECT_GROUP_BYTES`` or more go with ``O_DIRECT`` and leave nothing dirty for fdatasync (a 1.5 MB
        group: 2.9 -> 1.75 ms here); smaller ones through the page cache (a 4 KiB direct write and then an
        fdatasync took longer than a buffered page and the fdatasync that writes it)."""
        assert offset == self._offset
        end = offset + sum(len(part) for part in parts)
        pages = [self._page, *parts, bytes(-end % ALIGNMENT)]
        start = offset - len(self._page)
        if end - offset < DIRECT_GROUP_BYTES or not write_pages(fd, pages, start):
            pwrite_all(fd, pages, start)
        self._page = _last_bytes([self._page, *parts], end % ALIGNMENT)

    def _wait_for_zeroing(self, end: int) -> None:
        """Waits for the zeroing step in flight if the group would write where it zeroes."""
        if self._zeroing is not None and (self._zeroing[0].done() or end > self._zeroing[1]):
            future, _ = self._zeroing
            self._zeroing = None
            try:
                future.result()
            except OSError as error:  # the space stays fallocated: slower syncs, nothing lost
                log.warning("zeroing journal space ahead failed", extra={"error": repr(error)})

    def _zero_ahead(self, fd: int) -> None:
        """Starts zeroing the next ``ZERO_STEP`` bytes of fallocated space if the runway is short."""
        start = self._written_end
        stop = min(self.file_size_max, start + ZERO_STEP)
        if self._zeroing is not None or start - self._offset >= ZERO_RUNWAY or stop <= start:
            return
        self._written_end = stop
        self._zeroing = (self._preparer.submit(_zero, fd, start, stop - start), start)

    def _is_empty(self, number: int) -> bool:
        with open(self._path(number), "rb") as file:
            return not file.read().rstrip(b"\0")

    def _prepare(self, number: int) -> None:
        """Starts preallocating file ``number`` on the helper thread (fallocate, fsync, rename, directory fsync)."""
        self._prepared = self._preparer.submit(_preallocate, self._path(number), self._path(number) + _PREPARING,
                                               self.file_size_max)

    def _start_file(self, number: int) -> None:
        if self._prepared is None:
            self._prepare(number)
        assert self._prepared is not None
        prepared, self._prepared = self._prepared, None
        prepared.result()  # raises the preallocation's OSError: the group fails, the store stops acknowledging
        self._wait_for_zeroing(self.file_size_max)  # (of the previous file: its descriptor stays open)
        self._files[number] = os.open(self._path(number), os.O_RDWR | os.O_CLOEXEC)
        self._current, self._offset, self._page, self._written_end = number, 0, b"", 0

    def _sync_directory(self) -> None:
        fsync_directory(self.directory)

    def _path(self, number: int) -> str:
        return os.path.join(self.directory, f"journal-{number:012d}.tj")


def _preallocate(path: str, temporary_path: str, size: int) -> None:
    fd = os.open(temporary_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)  # glibc writes zeros itself where the filesystem cannot
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temporary_path, path)
    fsync_directory(os.path.dirname(path))


def _zero(fd: int, offset: int, length: int) -> None:
    """Writes zeros over ``length`` bytes at ``offset`` (page multiples) and makes them durable."""
    zeros = [bytes(length)]
    if not write_pages(fd, zeros, offset):
        pwrite_all(fd, zeros, offset)
    os.fdatasync(fd)


def _page_end(offset: int) -> int:
    return offset + -offset % ALIGNMENT


def _last_bytes(parts: Sequence[BytesLike], count: int) -> bytes:
    """The last ``count`` bytes of the parts laid end to end."""
    taken: list[bytes] = []
    for part in reversed(parts):
        if count <= 0:
            break
        view = memoryview(part).cast("B")
        piece = view[max(0, view.nbytes - count):]
        taken.append(bytes(piece))
        count -= piece.nbytes
    return b"".join(reversed(taken))


def entries_of(journal: StoreJournal, ledger: int, first: int, last: int,
               max_bytes: int = 4 * 1024 * 1024) -> Iterable[tuple[int, bytes]]:
    """(entry, payload) for the entries ``first..last`` the journal holds, stopping at the first gap, and
    after the entry that brings the payloads to ``max_bytes`` (so a reply stays well within a frame)."""
    total = 0
    for entry in range(first, last + 1):
        payload = journal.read(ledger, entry)
        if payload is None:
            return
        yield entry, payload
        total += len(payload)
        if total >= max_bytes:
            return

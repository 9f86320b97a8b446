"""Naming, preallocation and recycling of the local log's data files.

Files are named ``log-<index>.tlog`` with an ever-growing index; the name says nothing about
their content, because a file is reused for a later stretch of the log after truncation made it
unnecessary ("recycling": no rename, no new allocation, already-written blocks). Which files are
live, and which sequence each starts at, is known only from the metadata file; every other
``log-*.tlog`` in the directory is a *spare*, ready to be rolled into.

One spare is kept ready ahead of need: when the writer takes the last one, a background thread
preallocates the next (zeros written once and fsync'd, ~0.2 s for 64 MiB), so a rollover
normally costs one metadata replacement and no data-sized write.

Space: files freed by truncation are kept as spares up to ``spare_files_max`` and deleted beyond
it, so once the log is truncated a directory holds its live files plus at most
``max(spare_files_max, 1)`` spares, whatever was written before.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import threading

from .file_operations import FileOperations

_LOG_FILE_PATTERN = re.compile(r"^log-(\d{12})\.tlog$")
TEMPORARY_SUFFIX = ".tmp"


def log_file_name(index: int) -> str:
    return f"log-{index:012d}.tlog"


class LogFilePool:
    """The spare files of one log directory. ``take`` and ``give_back`` run on the writer thread."""

    def __init__(self, directory: str, file_size: int, file_operations: FileOperations, spare_files_max: int):
        self.directory = directory
        self.file_size = file_size
        self._file_operations = file_operations
        self._spare_files_max = spare_files_max
        self._lock = threading.Lock()  # guards _spares and _next_index against the preparer thread
        self._spares: list[str] = []
        self._next_index = 1
        self._preparer: concurrent.futures.ThreadPoolExecutor | None = None
        self._preparation: concurrent.futures.Future | None = None

    def __repr__(self) -> str:
        return f"<LogFilePool {self.directory} spares={len(self._spares)}>"

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def adopt(self, live_names: set[str]) -> None:
        """Sorts the directory at open: unlisted full-size log files become spares, leftovers go."""
        indexes = [0]
        for name in sorted(os.listdir(self.directory)):
            match = _LOG_FILE_PATTERN.match(name)
            if name.endswith(TEMPORARY_SUFFIX) and name.startswith("log-"):
                self._file_operations.remove(self.path(name))  # an interrupted preallocation
            elif match:
                indexes.append(int(match.group(1)))
                if name not in live_names:
                    self._keep_or_remove(name)
        with self._lock:
            self._next_index = max(indexes) + 1

    def take(self) -> str:
        """A spare file name to roll into; waits for the one being prepared, or makes one now."""
        preparation = self._preparation
        if preparation is not None:
            preparation.result()
        with self._lock:
            if self._spares:
                return self._spares.pop(0)
        return self._create()

    def give_back(self, names) -> int:
        """Turns files the log no longer needs into spares; beyond the limit they are deleted.

        Returns:
            How many of them were deleted.
        """
        return sum(not self._keep_or_remove(name) for name in names)

    def prepare_ahead(self) -> None:
        """Starts preallocating a spare in the background unless one is ready or on its way."""
        with self._lock:
            if self._spares or (self._preparation is not None and not self._preparation.done()):
                return
            if self._preparer is None:
                self._preparer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tier1-preallocate")
            self._preparation = self._preparer.submit(self._prepare_one)

    def close(self) -> None:
        """Waits for a preallocation in progress (it must not outlive our ownership)."""
        if self._preparer is not None:
            self._preparer.shutdown(wait=True)
            self._preparer = None

    def _prepare_one(self) -> None:
        name = self._create()
        with self._lock:
            self._spares.append(name)

    def _create(self) -> str:
        with self._lock:
            name = log_file_name(self._next_index)
            self._next_index += 1
        path = self.path(name)
        self._file_operations.create_preallocated(path, path + TEMPORARY_SUFFIX, self.file_size)
        return name

    def _keep_or_remove(self, name: str) -> bool:
        """Keeps ``name`` as a spare if it is whole and there is room; else deletes it. Returns whether kept."""
        path = self.path(name)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            return False
        with self._lock:
            if size == self.file_size and len(self._spares) < self._spare_files_max:
                self._spares.append(name)
                return True
        self._file_operations.remove(path)
        return False

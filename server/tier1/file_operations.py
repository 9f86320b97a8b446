"""The narrow seam between the local log and the operating system (habit 8).

Every byte the local log reads or writes, every sync and every metadata replacement goes
through one ``FileOperations`` object passed to its constructor. The tests' ``FaultyFileOperations``
(tests/support/faults/tier1.py) wraps it to inject the faults we promise to survive (failed fsync,
torn write, crash point, latency). All methods are blocking and run on the log's own threads, never on the event loop.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

from ..direct_writes import IOV_MAX, pwrite_all, write_parts, write_remainder
from ..fsync import fsync_directory

PREALLOCATION_CHUNK_BYTES = 1 << 20

_ZEROS = bytes(PREALLOCATION_CHUNK_BYTES)


_RWF_DSYNC: int = getattr(os, "RWF_DSYNC", 0)  # Linux >= 4.7 with Python's pwritev flags (0: none)
# Fused only up to this size: where latency is made (small batches under light load); a big batch, where
# throughput is made, spends its time in the disk either way, and its page-cache write-back goes faster alone.
FUSED_BYTES_MAX = 256 * 1024


class FileOperations:
    """Plain POSIX file I/O, as the local log needs it."""

    # write_durably fuses the write and the sync into one system call (pwritev2 with RWF_DSYNC) unless a
    # subclass changes write or sync (the fault-injecting seam must see both steps), or the kernel refuses.
    _fuse_write_and_sync: bool = bool(_RWF_DSYNC)

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.write is not FileOperations.write or cls.sync is not FileOperations.sync:
            cls._fuse_write_and_sync = False

    def open_for_update(self, path: str) -> int:
        """Opens an existing file for reading and in-place writing."""
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)

    def open_for_reading(self, path: str) -> int:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def close(self, fd: int) -> None:
        os.close(fd)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def read(self, fd: int, size: int, offset: int) -> bytes:
        """Reads up to ``size`` bytes at ``offset``; fewer only at the end of the file."""
        data = os.pread(fd, size, offset)
        if len(data) == size or not data:
            return data
        parts = [data]
        got = len(data)
        while got < size:
            more = os.pread(fd, size - got, offset + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def write(self, fd: int, buffers: Sequence, offset: int) -> None:
        """Writes every buffer back to back at ``offset`` (``direct_writes.pwrite_all``: one pwritev per
        IOV_MAX buffers). Raises OSError unless all bytes were written."""
        pwrite_all(fd, buffers, offset)

    def sync(self, fd: int) -> None:
        """Makes written data durable (fdatasync: preallocated files need no size update)."""
        os.fdatasync(fd)

    def write_durably(self, fd: int, buffers: Sequence, offset: int, size: int) -> None:
        """``write`` then ``sync``: on return every buffer (``size`` bytes in all) is on the disk at ``offset``.
        Raises OSError.

        In one system call where it can (``pwritev2(RWF_DSYNC)``, the durability of O_DSYNC for this write
        only) for batches up to FUSED_BYTES_MAX: on the log's thread that is one release of the GIL per batch
        instead of two, and one wake-up fewer after the disk answers.
        """
        if self._fuse_write_and_sync and size <= FUSED_BYTES_MAX and len(buffers) <= IOV_MAX:
            try:
                written = os.pwritev(fd, buffers, offset, _RWF_DSYNC)
            except OSError as error:
                if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                type(self)._fuse_write_and_sync = False  # a file system without per-write sync flags
            else:
                if written < size:  # rare: only the written prefix is durable; finish and sync the rest
                    write_remainder(fd, buffers, offset, written)
                    os.fdatasync(fd)
                return
        self.write(fd, buffers, offset)
        self.sync(fd)

    def create_preallocated(self, path: str, temporary_path: str, size: int) -> None:
        """Creates ``path`` holding ``size`` zero bytes, written and fsync'd, then renamed in place.

        Writing real zeros once (not fallocate) makes later overwrites pure data writes whose
        fdatasync commits no file metadata (PERF-NOTES: 1.3-2x faster than appending).
        """
        fd = os.open(temporary_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            whole, rest = divmod(size, PREALLOCATION_CHUNK_BYTES)
            # Around the page cache (direct_writes): zeros must not take pages that the flush to Tier-2 needs.
            write_parts(fd, [_ZEROS] * whole + [_ZEROS[:rest]], 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temporary_path, path)
        self.sync_directory(os.path.dirname(path))

    def replace_file(self, path: str, data: bytes) -> int:
        """Atomically replaces ``path`` with ``data``: temp file, fsync, rename, fsync directory.

        Returns:
            The inode number of the new file (the log watches it to notice another owner).
        """
        temporary_path = path + ".tmp"
        fd = os.open(temporary_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            inode = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        os.rename(temporary_path, path)
        self.sync_directory(os.path.dirname(path))
        return inode

    def read_file(self, path: str) -> bytes | None:
        """The whole content of a small file, or None if it does not exist."""
        try:
            with open(path, "rb") as file:
                return file.read()
        except FileNotFoundError:
            return None

    def inode(self, path: str) -> int:
        """The inode number behind ``path``; raises FileNotFoundError if it is gone."""
        return os.stat(path).st_ino

    def remove(self, path: str) -> None:
        os.unlink(path)

    def sync_directory(self, directory: str) -> None:
        fsync_directory(directory)


"""Large chunk writes that bypass the page cache (``O_DIRECT``), for a steady Tier-2 flush.

Why. A buffered write must first get a page-cache page for every 4 KiB it writes. On a
virtual machine, a guest page that was never touched before costs a host page fault; a
flush of a gigabyte into fresh page cache then runs at a third of the disk's speed, and how
fast depends on which pages the kernel happens to hand out (the swings of the Tier-2 flush
between runs). Writing with ``O_DIRECT`` takes no page-cache pages at all: the bytes go from
one reused, page-aligned staging buffer per thread straight to the device.

How. ``write_parts`` splits a write into a head up to the first 4 KiB boundary, an aligned
middle and a tail of less than 4 KiB. The head and tail are written through the caller's
ordinary descriptor (the page they share with neighbouring writes stays in the page cache);
the middle is copied into the staging buffer in pieces of ``STAGING_BYTES`` and written
through a second descriptor of the same file opened with ``O_DIRECT`` (by reopening
``/proc/self/fd/N``, which works for a temporary file too). Writes too small to gain from it,
and filesystems that refuse ``O_DIRECT`` (tmpfs) or a direct write's alignment, are written
buffered. Durability is the
caller's: an ``fdatasync`` of either descriptor covers both (it syncs the inode).
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from collections.abc import Sequence

from wire.fields import BytesLike

ALIGNMENT = 4096  # offsets, lengths and buffer addresses of O_DIRECT writes are multiples of this
STAGING_BYTES = 8 * 1024 * 1024  # one staging buffer per writing thread
DIRECT_MIN_BYTES = 1024 * 1024  # smaller writes go through the page cache
IOV_MAX = os.sysconf("SC_IOV_MAX")
_REFUSED = (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP)  # the filesystem has no O_DIRECT

_staging = threading.local()
_ZERO_PAGE = memoryview(bytes(ALIGNMENT))
_devices_without_direct: set[int] = set()


def write_parts(fd: int, parts: Sequence[BytesLike], offset: int) -> int:
    """Writes ``parts`` back to back at ``offset`` of the file open (writable) as ``fd``; returns the count."""
    views = [view for view in (memoryview(part).cast("B") for part in parts) if view.nbytes]
    total = sum(view.nbytes for view in views)
    head = min(total, -offset % ALIGNMENT)
    middle = (total - head) // ALIGNMENT * ALIGNMENT
    if middle < DIRECT_MIN_BYTES:
        return pwrite_all(fd, views, offset)
    direct_fd = _open_direct(fd)
    if direct_fd is None:
        return pwrite_all(fd, views, offset)
    try:
        pieces = _Pieces(views)
        written = pwrite_all(fd, pieces.take(head), offset) if head else 0
        written += _write_direct(direct_fd, pieces, middle, offset + written)
        return written + pwrite_all(fd, pieces.take(total - written), offset + written)
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
        # The device wants a larger alignment than ALIGNMENT: write it all again, buffered (same bytes,
        # same offsets), and never try O_DIRECT on this device again.
        _devices_without_direct.add(os.fstat(fd).st_dev)
        return pwrite_all(fd, views, offset)
    finally:
        os.close(direct_fd)


def write_pages(fd: int, parts: Sequence[BytesLike], offset: int) -> bool:
    """Writes ``parts`` back to back at the page-aligned ``offset`` with ``O_DIRECT`` only, the last page
    padded with zeros: no page-cache page is read, modified or left dirty. For files whose bytes after the
    data are zeros or unused (a preallocated journal). Returns False, having written nothing, where the
    filesystem refuses ``O_DIRECT`` or the alignment (the caller then writes buffered)."""
    if offset % ALIGNMENT:
        raise ValueError(f"offset {offset} is not a multiple of {ALIGNMENT}")
    views = [view for view in (memoryview(part).cast("B") for part in parts) if view.nbytes]
    total = sum(view.nbytes for view in views)
    padding = -total % ALIGNMENT
    direct_fd = _open_direct(fd)
    if direct_fd is None:
        return False
    try:
        _write_direct(direct_fd, _Pieces(views + [_ZERO_PAGE[:padding]]), total + padding, offset)
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
        _devices_without_direct.add(os.fstat(fd).st_dev)  # refused before anything was written
        return False
    finally:
        os.close(direct_fd)
    return True


def pwrite_all(fd: int, buffers: Sequence[BytesLike], offset: int) -> int:
    """Writes byte buffers back to back at ``offset``: one pwritev per IOV_MAX buffers, a short write
    finished by hand. Returns the bytes written (all of them; an error raises OSError)."""
    total = 0
    for index in range(0, len(buffers), IOV_MAX):
        chunk = buffers[index:index + IOV_MAX]
        written = os.pwritev(fd, chunk, offset + total)
        expected = sum(map(len, chunk))
        if written < expected:  # rare on regular files (a signal, a full disk)
            write_remainder(fd, chunk, offset + total, written)
        total += expected
    return total


def write_remainder(fd: int, chunk: Sequence[BytesLike], offset: int, written: int) -> None:
    """Writes what a short (p)write of ``chunk`` at ``offset`` left: all but its first ``written`` bytes."""
    skip, position = written, offset + written
    for buffer in chunk:
        view = memoryview(buffer).cast("B")
        if skip >= len(view):
            skip -= len(view)
            continue
        view, skip = view[skip:], 0
        while view:
            count = os.pwrite(fd, view, position)
            if count == 0:
                raise OSError(errno.EIO, "pwrite wrote nothing")
            view = view[count:]
            position += count


def _open_direct(fd: int) -> int | None:
    device = os.fstat(fd).st_dev
    if device in _devices_without_direct:
        return None
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError as error:
        if error.errno not in _REFUSED:
            raise
        _devices_without_direct.add(device)
        return None


def _write_direct(direct_fd: int, pieces: _Pieces, length: int, offset: int) -> int:
    staging = _staging_buffer()
    written = 0
    while written < length:
        size = min(STAGING_BYTES, length - written)
        filled = 0
        for view in pieces.take(size):
            staging[filled:filled + view.nbytes] = view
            filled += view.nbytes
        done = 0
        while done < size:  # a short direct write ends on an aligned boundary: resume there
            done += os.pwrite(direct_fd, staging[done:size], offset + written + done)
        written += size
    return written


def _staging_buffer() -> memoryview:
    buffer = getattr(_staging, "buffer", None)
    if buffer is None:
        buffer = _staging.buffer = memoryview(mmap.mmap(-1, STAGING_BYTES))  # page-aligned, reused
    return buffer


class _Pieces:
    """Consumes a list of byte views front to back, in pieces of any size."""

    def __init__(self, views: list[memoryview]):
        self._views = views
        self._index = 0
        self._used = 0  # bytes of the current view already taken

    def take(self, count: int) -> list[memoryview]:
        taken = []
        while count:
            view = self._views[self._index]
            piece = view[self._used:self._used + count]
            taken.append(piece)
            count -= piece.nbytes
            self._used += piece.nbytes
            if self._used == view.nbytes:
                self._index += 1
                self._used = 0
        return taken

"""A ChunkStorage keeping each chunk in a file under one root directory (design §5.2).

Appendable, with concat by copying. Every acknowledged operation is durable: ``write`` ends with
``fdatasync``; ``create`` and ``create_with_content`` also fsync the directory holding the chunk
(and any directory they had to create); ``create_with_content`` writes a temporary file, syncs it,
then hard-links it into place (atomic, and failing if the name exists), so a failure never leaves
a partial chunk under the name.

Names to paths. A chunk name is split at ``/`` into components; each component is UTF-8 encoded
(lone surrogates allowed) with ``%`` and NUL escaped as ``%25`` / ``%00`` and gets a two-byte
suffix: ``.d`` for a directory (a component followed by ``/``), ``.f`` for the chunk's file. A
component longer than 250 encoded bytes is cut into 250-byte pieces, each but the last a directory
ending in ``.s`` (a continuation, no ``/``). So ``scope/stream/0.E-1`` is
``root/scope.d/stream.d/0.E-1.f``. The mapping is injective and reversible (``list`` decodes the
paths back into names), a file never has the name of a directory (``a/b`` and ``a/b/c`` coexist),
no path component exceeds 252 bytes, and ``.``/``..``/empty components are harmless. Temporary
files are ``.<hex>.tmp`` in the chunk's directory: no known suffix, so never listed (one left by a
crash is ignored). Directories are never removed. Assumes Linux (fdatasync, copy_file_range), a
case-sensitive, non-normalizing filesystem (ext4, xfs) and encoded paths within PATH_MAX (names
up to ~1 KiB fit).

Read-only chunks have mode 0444 (``write`` checks the mode bits, so it holds even for root).

Open descriptors are kept in a small LRU cache (with use counts, so a descriptor is closed only
once no thread uses it). I/O is ``os.pwritev``/``os.pread`` on those descriptors, one executor
hop per operation (``aiofiles.os.wrap``); concat copies with ``copy_file_range``. Large writes
bypass the page cache (``direct_writes``). The cache
assumes this instance is the only one deleting chunks under its root. ``open_region`` lends a
cached descriptor itself (counted as a user until released), so that a segment read can be
sent from the file with ``sendfile`` without the bytes passing through Python.
"""

from __future__ import annotations

import collections
import errno
import functools
import os
import pathlib
import re
import stat
import uuid
from collections.abc import Sequence

import aiofiles.os

from ..direct_writes import write_parts
from ..fsync import fsync_directory
from .chunk_storage import (
    ChunkAlreadyExists,
    ChunkInfo,
    ChunkNotFound,
    ChunkReadOnly,
    ChunkRegion,
    ChunkStorage,
    ChunkStorageUnavailable,
    InvalidOffset,
    WriteData,
    as_parts,
)

FILE, DIRECTORY, CONTINUATION = b".f", b".d", b".s"
PIECE_BYTES = 250
DEFAULT_OPEN_FILES = 64
COPY_BLOCK_BYTES = 8 << 20
_NO_COPY_FILE_RANGE = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP)  # then pread + pwrite
_UNESCAPES = {b"%25": b"%", b"%00": b"\0"}


def encode_name(name: str) -> list[bytes]:
    """The path entries (relative to the root) of chunk ``name``."""
    components = name.split("/")
    entries = []
    for index, component in enumerate(components):
        escaped = component.encode("utf-8", "surrogatepass")
        if b"%" in escaped or b"\0" in escaped:
            escaped = escaped.replace(b"%", b"%25").replace(b"\0", b"%00")
        while len(escaped) > PIECE_BYTES:
            entries.append(escaped[:PIECE_BYTES] + CONTINUATION)
            escaped = escaped[PIECE_BYTES:]
        entries.append(escaped + (FILE if index == len(components) - 1 else DIRECTORY))
    return entries


def _unescape(escaped: bytes) -> str:
    if b"%" in escaped:
        escaped = re.sub(rb"%25|%00", lambda match: _UNESCAPES[match[0]], escaped)
    return escaped.decode("utf-8", "surrogatepass")


class _OpenFile:
    __slots__ = ("fd", "users", "evicted")

    def __init__(self, fd: int):
        self.fd, self.users, self.evicted = fd, 1, False


class _DescriptorCache:
    """Open descriptors by chunk name, least recently used first. Used from the event loop thread only.

    An entry in use when evicted is closed by its last ``release``. ``generation`` grows with every
    eviction: a descriptor opened by a call that started before (perhaps before a delete) is used by
    that call only, never cached.
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError("the descriptor cache needs room for at least one file")
        self.capacity = capacity
        self.generation = 0
        self._files: collections.OrderedDict[str, _OpenFile] = collections.OrderedDict()

    def acquire(self, name: str) -> _OpenFile | None:
        entry = self._files.get(name)
        if entry is not None:
            self._files.move_to_end(name)
            entry.users += 1
        return entry

    def insert(self, name: str, fd: int, generation: int) -> _OpenFile:
        """Caches ``fd`` for ``name`` (replacing any entry) unless evictions happened since ``generation``."""
        entry = _OpenFile(fd)
        if generation != self.generation:
            entry.evicted = True
            return entry
        self._discard(self._files.pop(name, None))
        self._files[name] = entry
        while len(self._files) > self.capacity:
            self._discard(self._files.popitem(last=False)[1])
        return entry

    def release(self, entry: _OpenFile) -> None:
        entry.users -= 1
        if entry.evicted and entry.users == 0:
            os.close(entry.fd)

    def evict(self, name: str) -> None:
        self.generation += 1
        self._discard(self._files.pop(name, None))

    def clear(self) -> None:
        self.generation += 1
        while self._files:
            self._discard(self._files.popitem()[1])

    @staticmethod
    def _discard(entry: _OpenFile | None) -> None:
        if entry is not None:
            entry.evicted = True
            if entry.users == 0:
                os.close(entry.fd)


class FileSystemChunkStorage(ChunkStorage):
    supports_append = True
    supports_concat = True
    supports_regions = True

    def __init__(self, root: pathlib.Path, *, open_files: int = DEFAULT_OPEN_FILES):
        super().__init__()
        self.root = pathlib.Path(root)
        self._root = os.fsencode(self.root)
        self._descriptors = _DescriptorCache(open_files)

    def __repr__(self) -> str:
        return f"<FileSystemChunkStorage {self.root}>"

    def _path(self, name: str) -> bytes:
        return os.path.join(self._root, *encode_name(name))

    async def _acquire(self, name: str) -> _OpenFile:
        entry = self._descriptors.acquire(name)
        if entry is None:
            generation = self._descriptors.generation
            entry = self._descriptors.insert(name, await _call(name, _open_existing, self._path(name)), generation)
        return entry

    async def _with_file(self, name: str, function, *args):
        """Runs ``function(name, fd, *args)`` in a thread on the chunk's cached descriptor."""
        entry = await self._acquire(name)
        try:
            return await _call(name, function, name, entry.fd, *args)
        finally:
            self._descriptors.release(entry)

    async def _create(self, name: str, function, *args):
        """Runs ``function(path, *args)`` -> (new descriptor, result) and caches the descriptor."""
        generation = self._descriptors.generation
        fd, result = await _call(name, function, self._path(name), *args)
        self._descriptors.release(self._descriptors.insert(name, fd, generation))
        self.counters.chunks_created += 1
        return result

    async def exists(self, name: str) -> bool:
        return await _call(name, _exists, self._path(name))

    async def get_info(self, name: str) -> ChunkInfo:
        status = await _call(name, os.stat, self._path(name))
        return ChunkInfo(name, status.st_size, _is_read_only(status))

    async def create(self, name: str) -> None:
        await self._create(name, _create_empty)

    async def create_with_content(self, name: str, data: WriteData) -> int:
        length = await self._create(name, _create_with_content, as_parts(data))
        self.counters.bytes_written += length
        self.counters.writes += 1
        return length

    async def delete(self, name: str) -> None:
        try:
            await _call(name, os.unlink, self._path(name))
        finally:
            self._descriptors.evict(name)
        self.counters.chunks_deleted += 1

    async def read(self, name: str, offset: int, length: int) -> bytes:
        data = await self._with_file(name, _read_at, offset, length)
        self.counters.bytes_read += len(data)
        self.counters.reads += 1
        return data

    async def open_region(self, name: str, offset: int, length: int) -> ChunkRegion:
        """The cached descriptor itself: it stays open (even if evicted or the chunk deleted) until released."""
        if offset < 0 or length < 0:
            raise ValueError(f"{name}: region of {length} at {offset}")
        entry = await self._acquire(name)
        self.counters.bytes_read += length
        self.counters.reads += 1
        return ChunkRegion(entry.fd, offset, length, functools.partial(self._descriptors.release, entry))

    async def write(self, name: str, offset: int, data: WriteData) -> int:
        written = await self._with_file(name, _append_at, offset, as_parts(data))
        self.counters.bytes_written += written
        self.counters.writes += 1
        return written

    async def concat(self, target: str, sources: Sequence[tuple[str, int]]) -> int:
        entries = []
        try:
            for source, _ in sources:
                entries.append(await self._acquire(source))
            target_entry = await self._acquire(target)
            entries.append(target_entry)
            # entries end with the target's: the sources' are the first len(sources)
            pieces = [(source, entry.fd, length)
                      for (source, length), entry in zip(sources, entries[:len(sources)], strict=True)]
            new_length = await _call(target, _concat, target, target_entry.fd, pieces)
        finally:
            for entry in entries:
                self._descriptors.release(entry)
        self.counters.bytes_concatenated += sum(length for _, length in sources)
        return new_length

    async def set_read_only(self, name: str, read_only: bool = True) -> None:
        await _call(name, os.chmod, self._path(name), 0o444 if read_only else 0o644)
        self._descriptors.evict(name)  # a read-only chunk may have been opened O_RDONLY

    async def list(self, prefix: str = "") -> list[str]:
        return sorted(await _call(prefix, _list, self._root, prefix))

    async def close(self) -> None:
        self._descriptors.clear()


@aiofiles.os.wrap
def _in_thread(function, *args):
    return function(*args)


async def _call(name: str, function, *args):
    """Runs ``function(*args)`` in aiofiles' executor, turning OSError into ChunkStorage errors."""
    try:
        return await _in_thread(function, *args)
    except OSError as error:
        if error.errno == errno.ENOENT:
            raise ChunkNotFound(name) from error
        if error.errno == errno.EEXIST:
            raise ChunkAlreadyExists(name) from error
        raise ChunkStorageUnavailable(name, f"{type(error).__name__}: {error}") from error


# ---------------------------------------------------------------------- run in executor threads

def _is_read_only(status: os.stat_result) -> bool:
    return not status.st_mode & stat.S_IWUSR


def _exists(path: bytes) -> bool:
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    return True


def _open_existing(path: bytes) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except PermissionError:  # a read-only chunk, when not root
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def _make_directory(path: bytes) -> None:
    """Creates ``path`` and missing ancestors, syncing the parent of each directory created."""
    try:
        os.mkdir(path)
    except FileExistsError:
        return
    except FileNotFoundError:
        _make_directory(os.path.dirname(path))
        try:
            os.mkdir(path)
        except FileExistsError:
            return
    fsync_directory(os.path.dirname(path))


def _create_empty(path: bytes) -> tuple[int, None]:
    directory = os.path.dirname(path)
    _make_directory(directory)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        os.fsync(fd)
        fsync_directory(directory)
    except BaseException:
        os.close(fd)
        raise
    return fd, None


def _create_with_content(path: bytes, parts: list) -> tuple[int, int]:
    """Writes a synced temporary file and links it to ``path``; returns (descriptor, length)."""
    directory = os.path.dirname(path)
    _make_directory(directory)
    temporary = os.path.join(directory, b"." + uuid.uuid4().hex.encode() + b".tmp")
    fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        try:
            length = write_parts(fd, parts, 0)
            os.fsync(fd)
            os.link(temporary, path)
        finally:
            os.unlink(temporary)
        fsync_directory(directory)
    except BaseException:
        os.close(fd)
        raise
    return fd, length


def _append_at(name: str, fd: int, offset: int, parts: list) -> int:
    status = os.fstat(fd)
    if _is_read_only(status):
        raise ChunkReadOnly(name)
    if offset != status.st_size:
        raise InvalidOffset(name, status.st_size, offset)
    written = write_parts(fd, parts, offset)
    if written:
        os.fdatasync(fd)
    return written


def _read_at(name: str, fd: int, offset: int, length: int) -> bytes:
    if offset < 0 or length < 0:
        raise ValueError(f"{name}: read of {length} at {offset}")
    data = os.pread(fd, length, offset)
    if data and len(data) == length:  # the common case: no need to know the chunk's length
        return data
    size = os.fstat(fd).st_size
    if offset > size:
        raise ValueError(f"{name}: read of {length} at {offset}, chunk length {size}")
    wanted, pieces = min(length, size - offset), [data]
    got = len(data)
    while got < wanted:  # a read beyond what the kernel does at once (2 GiB), or a racing append
        piece = os.pread(fd, wanted - got, offset + got)
        if not piece:
            raise OSError(errno.EIO, f"{name} shrank while being read")
        pieces.append(piece)
        got += len(piece)
    return b"".join(pieces)


def _concat(target: str, fd: int, sources: list[tuple[str, int, int]]) -> int:
    """Copies the first ``length`` bytes of each source to the end of the target, then syncs it.

    On failure the target is cut back to its old length, so that a retry appends at the same place.
    """
    status = os.fstat(fd)
    if _is_read_only(status):
        raise ChunkReadOnly(target)
    for source, source_fd, length in sources:
        source_length = os.fstat(source_fd).st_size
        if not 0 <= length <= source_length:
            raise ValueError(f"{source}: concat of {length} bytes, chunk length {source_length}")
    position = status.st_size
    try:
        for _, source_fd, length in sources:
            _copy(source_fd, fd, length, position)
            position += length
        os.fdatasync(fd)
    except BaseException:
        os.ftruncate(fd, status.st_size)
        raise
    return position


def _copy(source_fd: int, target_fd: int, length: int, position: int) -> None:
    copied = 0
    while copied < length:
        count = min(length - copied, COPY_BLOCK_BYTES)
        try:
            count = os.copy_file_range(source_fd, target_fd, count, copied, position + copied)
        except OSError as error:
            if error.errno not in _NO_COPY_FILE_RANGE:
                raise
            count = os.pwrite(target_fd, os.pread(source_fd, count, copied), position + copied)
        if count == 0:
            raise OSError(errno.EIO, "source shrank during concat")
        copied += count


def _list(root: bytes, prefix: str) -> list[str]:
    names: list[str] = []

    def walk(directory: bytes, parent: str, pending: bytes) -> None:
        """``parent``: the decoded name so far; ``pending``: escaped bytes of a continued component."""
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            return
        for entry in entries:
            piece, suffix = entry.name[:-2], entry.name[-2:]
            if suffix == FILE:
                name = parent + _unescape(pending + piece)
                if name.startswith(prefix):
                    names.append(name)
            elif suffix == DIRECTORY:
                below = parent + _unescape(pending + piece) + "/"
                if below.startswith(prefix) or prefix.startswith(below):
                    walk(entry.path, below, b"")
            elif suffix == CONTINUATION:
                walk(entry.path, parent, pending + piece)

    walk(root, "", b"")
    return names

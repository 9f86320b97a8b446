"""The ChunkStorage contract (design §5.2): named, immutable-once-written blobs ("chunks").

SLTS (``chunked_storage.py``) builds segments out of chunks; a ChunkStorage knows
nothing of segments. There is no concurrency control here: SLTS guarantees a
single writer per chunk. Once an operation returns it is permanent and strongly
consistent: ``get_info`` and ``read`` reflect every completed write.

Rules every implementation follows (checked by ``tests/unit/tier2/chunk_storage_contract.py``):

* ``create`` and ``create_with_content`` fail with ChunkAlreadyExists if the chunk exists.
* ``write`` appends only: ``offset`` must equal the current length, otherwise InvalidOffset
  carrying the expected offset. It is durable (fsync'd, or stored) before it returns. Stores
  that cannot append (plain S3) set ``supports_append = False`` and raise NotSupported;
  SLTS then writes each piece as a new chunk with ``create_with_content``.
* ``read`` returns exactly ``min(length, chunk length - offset)`` bytes; an offset beyond the
  chunk's length raises ValueError.
* ``delete`` of a missing chunk raises ChunkNotFound (not idempotent), as every operation on
  a missing chunk does.
* ``concat`` (when ``supports_concat``) appends whole source chunks to a target chunk, in
  order, leaving the sources in place. Sources are given with the lengths SLTS knows; bytes
  beyond those lengths are not copied.
* ``open_region`` (when ``supports_regions``) hands out bytes of a chunk as an open file
  descriptor rather than in memory, so that they can go to a socket with ``sendfile``. The
  region stays readable until released, even if the chunk is deleted meanwhile.
* Transient failures (I/O errors, timeouts, throttling) raise ChunkStorageUnavailable;
  callers retry.

Every implementation counts what it moves in ``counters`` so tests and benchmarks can assert
that, e.g., a metadata-only concat moved no bytes.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence

BytesLike = bytes | bytearray | memoryview
# What write() and create_with_content() accept: one buffer, or parts written back to back.
WriteData = BytesLike | Sequence[BytesLike]


class ChunkStorageError(Exception):
    """Base of every ChunkStorage error."""

    def __init__(self, chunk: str, message: str = ""):
        super().__init__(f"{chunk}: {message}" if message else chunk)
        self.chunk = chunk


class ChunkNotFound(ChunkStorageError):
    pass


class ChunkAlreadyExists(ChunkStorageError):
    pass


class InvalidOffset(ChunkStorageError):
    """A write at an offset other than the chunk's length."""

    def __init__(self, chunk: str, expected: int, given: int):
        super().__init__(chunk, f"write at {given}, the chunk's length is {expected}")
        self.expected = expected
        self.given = given


class ChunkReadOnly(ChunkStorageError):
    pass


class NotSupported(ChunkStorageError):
    """The operation is outside this store's capabilities (see the ``supports_*`` flags)."""


class ChunkStorageUnavailable(ChunkStorageError):
    """A transient failure (I/O error, timeout, throttling): the operation may be retried."""


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkInfo:
    name: str
    length: int
    read_only: bool = False


@dataclasses.dataclass(slots=True)
class ChunkStorageCounters:
    """What a store moved since it was created (monotonic; tests diff two snapshots)."""

    bytes_written: int = 0  # by write() and create_with_content()
    bytes_read: int = 0  # by read()
    bytes_concatenated: int = 0  # copied by concat() (native stitching)
    chunks_created: int = 0
    chunks_deleted: int = 0
    writes: int = 0
    reads: int = 0

    def snapshot(self) -> ChunkStorageCounters:
        return dataclasses.replace(self)


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkRegion:
    """``length`` bytes at ``offset`` of the file open as ``fd``, readable until ``release()`` is called.

    The descriptor belongs to the storage: the holder reads it (``os.sendfile``, ``os.pread``)
    and never closes it. ``release`` must be called once, from the thread that opened the region.
    """

    fd: int
    offset: int
    length: int
    release: Callable[[], None]


def as_parts(data: WriteData) -> Sequence[BytesLike]:
    """``data`` as a sequence of parts (no copy of a given sequence)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return (data,)
    return data


class ChunkStorage(abc.ABC):
    """Named chunks with append-only writes; see the module docstring for the rules."""

    supports_append: bool = True
    supports_concat: bool = False
    supports_truncation: bool = False  # no binding truncates: SLTS drops whole head chunks
    supports_regions: bool = False  # open_region serves bytes as a file descriptor (local files)

    def __init__(self) -> None:
        self.counters = ChunkStorageCounters()

    @abc.abstractmethod
    async def exists(self, name: str) -> bool: ...

    @abc.abstractmethod
    async def get_info(self, name: str) -> ChunkInfo:
        """Raises ChunkNotFound."""

    @abc.abstractmethod
    async def create(self, name: str) -> None:
        """Creates an empty chunk. Raises ChunkAlreadyExists (or NotSupported without append)."""

    @abc.abstractmethod
    async def create_with_content(self, name: str, data: WriteData) -> int:
        """Creates a chunk holding ``data``, durably; returns its length. Raises ChunkAlreadyExists."""

    @abc.abstractmethod
    async def delete(self, name: str) -> None:
        """Raises ChunkNotFound."""

    @abc.abstractmethod
    async def read(self, name: str, offset: int, length: int) -> bytes:
        """Returns ``min(length, chunk length - offset)`` bytes. Raises ChunkNotFound, ValueError."""

    async def open_region(self, name: str, offset: int, length: int) -> ChunkRegion:
        """The chunk's bytes ``[offset, offset + length)`` as an open descriptor (see ChunkRegion).

        Only when ``supports_regions``; the caller knows the chunk holds those bytes (SLTS's
        metadata says so). Raises ChunkNotFound, NotSupported.
        """
        raise NotSupported(name, f"{type(self).__name__} cannot hand out file regions")

    @abc.abstractmethod
    async def write(self, name: str, offset: int, data: WriteData) -> int:
        """Appends ``data`` at ``offset`` (== current length), durably; returns the bytes written.

        Raises ChunkNotFound, InvalidOffset, ChunkReadOnly, NotSupported.
        """

    async def concat(self, target: str, sources: Sequence[tuple[str, int]]) -> int:
        """Appends the first ``length`` bytes of each ``(source, length)`` to ``target``; returns its new length.

        Only when ``supports_concat``. Raises ChunkNotFound, NotSupported.
        """
        raise NotSupported(target, f"{type(self).__name__} cannot concatenate chunks")

    @abc.abstractmethod
    async def set_read_only(self, name: str, read_only: bool = True) -> None:
        """Raises ChunkNotFound."""

    @abc.abstractmethod
    async def list(self, prefix: str = "") -> list[str]:
        """Names of every chunk starting with ``prefix``, sorted."""

    async def used_space(self) -> int:
        """Bytes held by every chunk (may be slow: meant for tools and tests)."""
        total = 0
        for name in await self.list():
            try:
                total += (await self.get_info(name)).length
            except ChunkNotFound:
                pass
        return total

    async def close(self) -> None:  # noqa: B027 - a default most storages keep: nothing to release
        """Releases connections and threads; idempotent."""

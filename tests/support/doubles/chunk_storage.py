"""An in-memory ChunkStorage for tests: appendable, with native concat, nothing durable."""

from __future__ import annotations

from collections.abc import Sequence

from server.tier2.chunk_storage import (
    ChunkAlreadyExists,
    ChunkInfo,
    ChunkNotFound,
    ChunkReadOnly,
    ChunkStorage,
    InvalidOffset,
    NotSupported,
    WriteData,
    as_parts,
)


class InMemoryChunkStorage(ChunkStorage):
    supports_append = True
    supports_concat = True

    def __init__(self, *, supports_append: bool = True):
        super().__init__()
        self.supports_append = supports_append
        self._chunks: dict[str, bytearray] = {}
        self._read_only: set[str] = set()

    def _chunk(self, name: str) -> bytearray:
        try:
            return self._chunks[name]
        except KeyError:
            raise ChunkNotFound(name) from None

    async def exists(self, name: str) -> bool:
        return name in self._chunks

    async def get_info(self, name: str) -> ChunkInfo:
        return ChunkInfo(name, len(self._chunk(name)), name in self._read_only)

    async def create(self, name: str) -> None:
        if not self.supports_append:
            raise NotSupported(name, "create empty chunks only on appendable storage")
        if name in self._chunks:
            raise ChunkAlreadyExists(name)
        self._chunks[name] = bytearray()
        self.counters.chunks_created += 1

    async def create_with_content(self, name: str, data: WriteData) -> int:
        if name in self._chunks:
            raise ChunkAlreadyExists(name)
        chunk = self._chunks[name] = bytearray()
        for part in as_parts(data):
            chunk += part
        self.counters.chunks_created += 1
        self.counters.bytes_written += len(chunk)
        self.counters.writes += 1
        return len(chunk)

    async def delete(self, name: str) -> None:
        self._chunk(name)
        del self._chunks[name]
        self._read_only.discard(name)
        self.counters.chunks_deleted += 1

    async def read(self, name: str, offset: int, length: int) -> bytes:
        chunk = self._chunk(name)
        if offset < 0 or offset > len(chunk) or length < 0:
            raise ValueError(f"{name}: read of {length} at {offset}, chunk length {len(chunk)}")
        data = bytes(chunk[offset:offset + length])
        self.counters.bytes_read += len(data)
        self.counters.reads += 1
        return data

    async def write(self, name: str, offset: int, data: WriteData) -> int:
        if not self.supports_append:
            raise NotSupported(name, "this storage cannot append")
        chunk = self._chunk(name)
        if name in self._read_only:
            raise ChunkReadOnly(name)
        if offset != len(chunk):
            raise InvalidOffset(name, len(chunk), offset)
        for part in as_parts(data):
            chunk += part
        written = len(chunk) - offset
        self.counters.bytes_written += written
        self.counters.writes += 1
        return written

    async def concat(self, target: str, sources: Sequence[tuple[str, int]]) -> int:
        chunk = self._chunk(target)
        pieces = []
        for source, length in sources:
            source_chunk = self._chunk(source)
            if not 0 <= length <= len(source_chunk):
                raise ValueError(f"{source}: concat of {length} bytes, chunk length {len(source_chunk)}")
            pieces.append(source_chunk[:length])
        if target in self._read_only:
            raise ChunkReadOnly(target)
        for piece in pieces:
            chunk += piece
            self.counters.bytes_concatenated += len(piece)
        return len(chunk)

    async def set_read_only(self, name: str, read_only: bool = True) -> None:
        self._chunk(name)
        (self._read_only.add if read_only else self._read_only.discard)(name)

    async def list(self, prefix: str = "") -> list[str]:
        return sorted(name for name in self._chunks if name.startswith(prefix))

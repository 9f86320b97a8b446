"""SLTS metadata records (design §5.3) and their binary format, plus the values SLTS returns.

A segment is a ``SegmentRecord`` (key: the segment name) and a singly linked list of
``ChunkRecord`` s (key: the chunk name), from ``first_chunk`` to ``last_chunk``. Records are
immutable values: a transaction replaces a record with an updated copy.

Format (little-endian; every record starts with the same two bytes)::

    u8  format version (1)       u8  kind (1 = segment, 2 = chunk)
    segment:  u32 flags (ACTIVE 1, SEALED 2, SYSTEM 4, OWNERSHIP_CHANGED 8)
              u64 length, start_offset, chunk_count, first_chunk_start_offset,
                  last_chunk_start_offset, max_rolling_length, owner_epoch,
                  last_modified (wall-clock milliseconds; informational only)
              str name, first_chunk, last_chunk
    chunk:    u32 flags (ACTIVE 1)
              u64 length
              str name, next_chunk

A ``str`` is a u16 byte count and UTF-8 bytes; an absent chunk name is the empty string. Later
versions may append fields: readers ignore bytes after the fields they know. The version byte
changes only for an incompatible layout, which readers of older versions refuse. There is no
checksum here: records are stored by the metadata store (a table segment in Tier-1, which
checksums) or inside the system journal's checksummed batches.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from collections.abc import Iterable

from .errors import StorageCorrupted

FORMAT_VERSION = 1
_KIND_SEGMENT = 1
_KIND_CHUNK = 2
_KIND_INDEX_HINT = 3

_HEADER = struct.Struct("<BB")
_SEGMENT_FIELDS = struct.Struct("<I8Q")
_CHUNK_FIELDS = struct.Struct("<IQ")
_INDEX_HINT_FIELDS = struct.Struct("<Q")
_STRING_LENGTH = struct.Struct("<H")


class SegmentFlags(enum.IntFlag):
    ACTIVE = 1
    SEALED = 2
    SYSTEM = 4  # a pinned system segment: its records live in the system journal, not the store
    OWNERSHIP_CHANGED = 8  # owner_epoch was raised without opening a chunk: the next write must


class ChunkFlags(enum.IntFlag):
    ACTIVE = 1


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentRecord:
    name: str
    length: int = 0
    start_offset: int = 0
    chunk_count: int = 0
    first_chunk: str | None = None
    first_chunk_start_offset: int = 0
    last_chunk: str | None = None
    last_chunk_start_offset: int = 0
    max_rolling_length: int = 0
    owner_epoch: int = 0
    last_modified: int = 0
    flags: SegmentFlags = SegmentFlags.ACTIVE

    @property
    def sealed(self) -> bool:
        return bool(self.flags & SegmentFlags.SEALED)

    @property
    def active(self) -> bool:
        return bool(self.flags & SegmentFlags.ACTIVE)

    @property
    def ownership_changed(self) -> bool:
        return bool(self.flags & SegmentFlags.OWNERSHIP_CHANGED)

    def check_invariants(self) -> None:
        """Raises StorageCorrupted unless the record is self-consistent (design §5.3)."""
        problems = []
        if not self.first_chunk_start_offset <= self.start_offset <= self.length:
            problems.append("first chunk start <= start offset <= length")
        if not self.first_chunk_start_offset <= self.last_chunk_start_offset <= self.length:
            problems.append("first chunk start <= last chunk start <= length")
        if self.chunk_count == 0:
            if self.first_chunk is not None or self.last_chunk is not None:
                problems.append("no chunks, yet a first or last chunk")
            if not self.length == self.start_offset == self.first_chunk_start_offset == self.last_chunk_start_offset:
                problems.append("no chunks, yet offsets differ")
        elif self.first_chunk is None or self.last_chunk is None:
            problems.append("chunks, yet no first or last chunk")
        elif self.chunk_count == 1 and (self.first_chunk != self.last_chunk
                                        or self.first_chunk_start_offset != self.last_chunk_start_offset):
            problems.append("one chunk, yet first and last differ")
        if self.chunk_count < 0 or self.owner_epoch < 0 or self.max_rolling_length <= 0:
            problems.append("negative count or epoch, or no rolling length")
        if problems:
            raise StorageCorrupted(f"segment record {self}: broken invariants: {'; '.join(problems)}")


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkRecord:
    name: str
    length: int = 0
    next_chunk: str | None = None
    flags: ChunkFlags = ChunkFlags.ACTIVE

    @property
    def active(self) -> bool:
        return bool(self.flags & ChunkFlags.ACTIVE)


@dataclasses.dataclass(frozen=True, slots=True)
class IndexHintRecord:
    """Where a segment's index block starts to be served from: the first chunk starting in it (``chunk_index``)."""

    name: str  # the hint's key (chunk_index.hint_key)
    chunk: str
    start_offset: int


Record = SegmentRecord | ChunkRecord | IndexHintRecord


def check_chain(segment: SegmentRecord, chain: Iterable[ChunkRecord]) -> None:
    """Raises StorageCorrupted unless ``chain`` (first to last) is exactly the segment's chunk list."""
    chain = list(chain)
    lengths = sum(chunk.length for chunk in chain)
    if (len(chain) != segment.chunk_count
            or (chain and (chain[0].name != segment.first_chunk or chain[-1].name != segment.last_chunk))
            or (chain and chain[-1].next_chunk is not None)
            or lengths != segment.length - segment.first_chunk_start_offset
            or (chain and segment.length - chain[-1].length != segment.last_chunk_start_offset)
            or not all(chunk.active for chunk in chain)):
        raise StorageCorrupted(f"segment {segment.name}: chunk list {[c.name for c in chain]} does not match {segment}")


@dataclasses.dataclass(frozen=True, slots=True)
class StorageSegmentInfo:
    """What ``ChunkedSegmentStorage.get_info`` reports."""

    name: str
    length: int
    start_offset: int
    sealed: bool
    owner_epoch: int
    chunk_count: int


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkLayout:
    """One chunk of a segment, as ``ChunkedSegmentStorage.list_chunks`` reports it (ListStorageChunks)."""

    name: str
    start_offset: int
    length: int
    exists_in_storage: bool


def encode(record: Record) -> bytes:
    if isinstance(record, SegmentRecord):
        fields = _SEGMENT_FIELDS.pack(int(record.flags), record.length, record.start_offset, record.chunk_count,
                                      record.first_chunk_start_offset, record.last_chunk_start_offset,
                                      record.max_rolling_length, record.owner_epoch, record.last_modified)
        strings: tuple[str | None, ...] = (record.name, record.first_chunk, record.last_chunk)
        kind = _KIND_SEGMENT
    elif isinstance(record, ChunkRecord):
        fields = _CHUNK_FIELDS.pack(int(record.flags), record.length)
        strings = (record.name, record.next_chunk)
        kind = _KIND_CHUNK
    else:
        fields = _INDEX_HINT_FIELDS.pack(record.start_offset)
        strings = (record.name, record.chunk)
        kind = _KIND_INDEX_HINT
    return b"".join([_HEADER.pack(FORMAT_VERSION, kind), fields, *(_encode_string(s) for s in strings)])


def decode(data: bytes) -> Record:
    """Raises StorageCorrupted for a record of an unknown version or kind, or a short one."""
    view = memoryview(data)
    try:
        version, kind = _HEADER.unpack_from(view)
        if version != FORMAT_VERSION:
            raise StorageCorrupted(f"record format version {version} is not {FORMAT_VERSION}")
        position = _HEADER.size
        if kind == _KIND_SEGMENT:
            flags, *numbers = _SEGMENT_FIELDS.unpack_from(view, position)
            (name, first, last), _ = _decode_strings(view, position + _SEGMENT_FIELDS.size, 3)
            if name is None:
                raise StorageCorrupted("segment record without a name")
            return SegmentRecord(name, numbers[0], numbers[1], numbers[2], first, numbers[3], last, numbers[4],
                                 numbers[5], numbers[6], numbers[7], SegmentFlags(flags))
        if kind == _KIND_CHUNK:
            flags, length = _CHUNK_FIELDS.unpack_from(view, position)
            (name, next_chunk), _ = _decode_strings(view, position + _CHUNK_FIELDS.size, 2)
            if name is None:
                raise StorageCorrupted("chunk record without a name")
            return ChunkRecord(name, length, next_chunk, ChunkFlags(flags))
        if kind == _KIND_INDEX_HINT:
            (start_offset,) = _INDEX_HINT_FIELDS.unpack_from(view, position)
            (name, chunk), _ = _decode_strings(view, position + _INDEX_HINT_FIELDS.size, 2)
            if name is None or chunk is None:
                raise StorageCorrupted("index hint record without a name or a chunk")
            return IndexHintRecord(name, chunk, start_offset)
    except (struct.error, UnicodeDecodeError) as error:
        raise StorageCorrupted(f"malformed metadata record: {error}") from error
    raise StorageCorrupted(f"unknown metadata record kind {kind}")


def _encode_string(value: str | None) -> bytes:
    text = value or ""
    encoded = text.encode()
    if len(encoded) > 0xFFFF:
        raise ValueError(f"name longer than 65535 bytes: {text[:80]}...")
    return _STRING_LENGTH.pack(len(encoded)) + encoded


def _decode_strings(view: memoryview, position: int, count: int) -> tuple[list[str | None], int]:
    values: list[str | None] = []
    for _ in range(count):
        (size,) = _STRING_LENGTH.unpack_from(view, position)
        position += _STRING_LENGTH.size
        if position + size > len(view):
            raise struct.error("string runs past the end of the record")
        values.append(bytes(view[position:position + size]).decode() or None)
        position += size
    return values, position

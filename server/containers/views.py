"""What the container answers: read-only values, never its live state.

It sees the container's segment metadata only through ``SegmentProperties`` (what an info reads), so
that the metadata, the table index and everything else in the package may import these values.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from wire.fields import BytesLike

    from ..tier2.chunk_storage import ChunkRegion


class ContainerStatus(enum.Enum):
    NEW = "new"
    RECOVERING = "recovering"
    RUNNING = "running"
    FAILED = "failed"
    STOPPED = "stopped"


class ReadResult:
    """The answer to a read: views of the data plus the tail flags of SegmentRead.

    A read that asked for files (``lend_files``) may instead get its bytes as ``region``, a
    Tier-2 chunk file's bytes to send with sendfile; ``parts`` is then empty and the holder
    must release the region once sent.
    """

    __slots__ = ("parts", "region", "length", "at_tail", "end_of_segment")

    def __init__(self, parts: Sequence[BytesLike], at_tail: bool, end_of_segment: bool,
                 region: ChunkRegion | None = None):
        self.parts = parts
        self.region = region
        self.length = sum(map(len, parts)) if region is None else region.length
        self.at_tail = at_tail
        self.end_of_segment = end_of_segment

    def data(self) -> BytesLike:
        """The data as one buffer (a view if it lies in one block, otherwise one copy)."""
        if len(self.parts) == 1:
            return self.parts[0]
        return b"".join(self.parts)


class TableSize(Protocol):
    """What an info reads of a table segment's key index (``table.TableIndex`` is one)."""

    @property
    def entry_count(self) -> int: ...


class SegmentProperties(Protocol):
    """What an info reads of a segment (``metadata.SegmentMetadata`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def segment_type(self) -> int: ...  # a metadata.SegmentType
    @property
    def start_offset(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def sealed(self) -> bool: ...
    @property
    def last_modified(self) -> int: ...
    @property
    def attributes(self) -> Mapping[uuid.UUID, int]: ...
    @property
    def table(self) -> TableSize | None: ...


class SegmentInfo:
    """A segment's properties when asked (GetStreamSegmentInfo, GetTableSegmentInfo)."""

    __slots__ = ("name", "segment_type", "start_offset", "length", "sealed", "last_modified", "attributes",
                 "table_entry_count")

    def __init__(self, segment: SegmentProperties):
        self.name = segment.name
        self.segment_type = segment.segment_type
        self.start_offset = segment.start_offset
        self.length = segment.length
        self.sealed = segment.sealed
        self.last_modified = segment.last_modified
        self.attributes = MappingProxyType(segment.attributes)  # read-only view: no copy per info request
        self.table_entry_count = segment.table.entry_count if segment.table is not None else 0


class TableEntry(NamedTuple):
    key: bytes
    version: int
    value: BytesLike  # bytes, or a view of a table's data (delta pages)


class TableDelta(NamedTuple):
    """A page of a table's change log (ReadTableEntriesDelta): the latest entry of each key changed."""

    entries: list[TableEntry]
    reached_end: bool
    last_position: int

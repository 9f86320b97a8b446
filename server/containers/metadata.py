"""Committed metadata of segments: what reads, info replies and checkpoints see."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .attributes import TABLE_KEY_LENGTH
from .read_index import ReadIndex
from .table import TableIndex

if TYPE_CHECKING:
    import asyncio

    from .cache import CacheManager


class SegmentType(enum.IntEnum):
    STREAM = 0
    TABLE = 1
    TRANSIENT = 2


class SegmentMetadata:
    """One segment as made durable by the log: identity, lengths, flags, attributes, bytes."""

    __slots__ = ("segment_id", "name", "segment_type", "sealed", "attributes", "last_modified", "data", "table",
                 "waiters", "table_incomplete", "used")

    def __init__(self, segment_id: int, name: str, segment_type: SegmentType, attributes: Mapping[uuid.UUID, int],
                 last_modified: int, start_offset: int = 0, length: int | None = None,
                 cache: CacheManager | None = None):
        self.segment_id = segment_id
        self.name = name
        self.segment_type = segment_type if type(segment_type) is SegmentType else SegmentType(segment_type)
        self.sealed = False
        self.attributes = dict(attributes)
        self.last_modified = last_modified
        self.table = TableIndex(max(0, self.attributes.get(TABLE_KEY_LENGTH, 0))) \
            if self.segment_type == SegmentType.TABLE else None
        self.data = ReadIndex(start_offset, length, cache)
        self.waiters: list[asyncio.Future[None]] = []  # futures of reads parked at the tail
        self.table_incomplete = False  # restored with bytes in Tier-2 that its key index does not hold yet
        self.used = False  # read (or asked about) since the container's last look for idle segments

    def __repr__(self) -> str:
        flags = " sealed" if self.sealed else ""
        return f"<Segment {self.segment_id} {self.name!r} {self.segment_type.name} {self.data!r}{flags}>"

    @property
    def length(self) -> int:
        return self.data.length

    @property
    def start_offset(self) -> int:
        return self.data.start_offset

    @property
    def is_table(self) -> bool:
        return self.table is not None

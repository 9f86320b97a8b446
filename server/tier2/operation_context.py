"""What the SLTS segment operations share, and the checks they all make."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from .chunk_storage import ChunkStorage
from .config import StorageConfig
from .errors import SegmentNotFound, StorageNotPrimary
from .garbage import GarbageCollector
from .metadata_transaction import MetadataTransaction
from .read_index import ReadIndex
from .records import SegmentRecord


@dataclasses.dataclass
class OperationContext:
    chunks: ChunkStorage
    config: StorageConfig
    collector: GarbageCollector
    read_index: ReadIndex
    begin: Callable[[str], MetadataTransaction]  # a transaction on the record source of a segment
    epoch: int = 0  # this owner's epoch (set by bootstrap)


async def load_segment(transaction: MetadataTransaction, name: str) -> SegmentRecord:
    """The segment's record. Raises SegmentNotFound."""
    segment = await transaction.segment(name)
    if segment is None:
        raise SegmentNotFound(name)
    return segment


def check_owner(segment: SegmentRecord, epoch: int) -> None:
    """Raises StorageNotPrimary if a newer owner (a higher epoch) claimed the segment."""
    if segment.owner_epoch > epoch:
        raise StorageNotPrimary(segment.name, f"{segment.name} is owned by epoch {segment.owner_epoch}, "
                                              f"this owner's epoch is {epoch}")


def stamped(segment: SegmentRecord) -> SegmentRecord:
    """``segment`` with ``last_modified`` set to now (wall clock; informational only)."""
    return dataclasses.replace(segment, last_modified=time.time_ns() // 1_000_000)

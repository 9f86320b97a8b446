"""A key-value table's partitions, and which one a primary key belongs to.

Partition ``n`` of table ``T`` in scope ``S`` is the table segment ``S/T_kvtable/n.#epoch.0``; the
controller gives each a slice of the key space [0, 1) (``getCurrentSegmentsKeyValueTable``). A
primary key belongs to the partition whose slice holds its fraction (:mod:`clients.kvt.hashing`);
as in Java's ``SegmentCollection``, that is the partition with the smallest upper bound at or above
the fraction (``ceilingEntry``), so only a fraction exactly on a boundary differs from [low, high).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Iterator

from wire import naming

from ..errors import OperationFailed
from ..model import SegmentRange
from .hashing import primary_key_fraction


@dataclasses.dataclass(frozen=True, slots=True)
class Partition:
    """One partition: its segment's id and qualified name, and its slice of the key space."""

    segment_id: int
    name: str
    low: float
    high: float


class Partitions:
    """The partitions of one table, in key-space order."""

    __slots__ = ("_partitions", "_highs")

    def __init__(self, scope: str, table: str, ranges: Iterable[SegmentRange]):
        ordered = sorted(ranges, key=lambda r: r.low)
        if not ordered or ordered[0].low != 0.0 or not 1.0 <= ordered[-1].high < 1.0001 or any(
                before.high != after.low for before, after in zip(ordered, ordered[1:], strict=False)):
            raise OperationFailed(f"the partitions of key-value table {scope}/{table} do not cover the key space: "
                                  f"{[(r.low, r.high) for r in ordered]}")
        self._partitions = tuple(
            Partition(r.segment.segment_id, naming.table_segment_name(
                scope, table, naming.segment_number_of(r.segment.segment_id), naming.epoch_of(r.segment.segment_id)),
                      r.low, r.high) for r in ordered)
        self._highs = [partition.high for partition in self._partitions]

    def __len__(self) -> int:
        return len(self._partitions)

    def __iter__(self) -> Iterator[Partition]:
        return iter(self._partitions)

    def of(self, primary_key: bytes) -> Partition:
        """The partition of every key whose primary key is ``primary_key``."""
        index = bisect.bisect_left(self._highs, primary_key_fraction(primary_key))
        return self._partitions[min(index, len(self._partitions) - 1)]


__all__ = ["Partition", "Partitions"]

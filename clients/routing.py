"""Routing keys to segments: the key-space hash and the map of key ranges to segments.

A routing key hashes to a fraction of the key space [0, 1) exactly as Pravega's
Java and Rust clients compute it (``wire.naming.routing_key_fraction``), so this
SDK and the ``pravega`` client put a key in the same segment. The map answers
"which segment holds fraction k" with the entry of smallest upper bound >= k
(Java's ``ceilingEntry``), and is rebuilt when a segment is sealed by the
replacement rule of client reference §2.6: successors are clipped to the sealed
segment's own range, so keys of a neighbour that is not sealed yet keep going to
that neighbour until its own seal is seen (which keeps per-key order in merges).
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Iterable
from typing import TypeAlias

from wire import naming

from .errors import InvalidArgument
from .model import Segment, SegmentRange, Successors

_KEY_CACHE_MAX = 100_000


class SegmentMap:
    """An immutable map from key-space fractions to segments."""

    __slots__ = ("_uppers", "_segments")

    def __init__(self, entries: Iterable[tuple[float, Segment]]):
        ordered = sorted(entries, key=lambda entry: entry[0])
        self._uppers = [upper for upper, _ in ordered]
        self._segments = [segment for _, segment in ordered]

    @classmethod
    def of_ranges(cls, ranges: Iterable[SegmentRange]) -> SegmentMap:
        """The map of a stream's current segments. Raises InvalidArgument if they do not cover [0, 1)."""
        ranges = sorted(ranges, key=lambda r: r.high)
        if not ranges:
            raise InvalidArgument("a stream with no segments cannot be routed to (is it sealed?)")
        if ranges[0].high <= 0.0 or not 1.0 <= ranges[-1].high < 1.0001:
            raise InvalidArgument(f"segment ranges do not cover the key space: {ranges}")
        return cls((r.high, r.segment) for r in ranges)

    def __len__(self) -> int:
        return len(self._segments)

    def __repr__(self) -> str:
        return f"SegmentMap({list(zip(self._uppers, self._segments, strict=True))})"

    @property
    def segments(self) -> set[Segment]:
        return set(self._segments)

    def segment_for(self, fraction: float) -> Segment:
        """The segment owning ``fraction`` of the key space."""
        index = bisect.bisect_left(self._uppers, fraction)
        return self._segments[min(index, len(self._segments) - 1)]

    def replace(self, sealed: Segment, successors: Successors) -> SegmentMap:
        """The map after ``sealed`` is replaced by its successors, clipped to its own range."""
        covering = sorted(((r.high, r.low, r.segment) for r, predecessors in successors.successors
                           if sealed.segment_id in predecessors), reverse=True)
        for (_, low, _), (next_high, _, _) in itertools.pairwise(covering):
            if next_high != low:
                raise InvalidArgument(f"successors of {sealed} are not contiguous: {successors}")
        entries = []
        for index, (upper, segment) in enumerate(zip(self._uppers, self._segments, strict=True)):
            if segment != sealed:
                entries.append((upper, segment))
                continue
            lower = self._uppers[index - 1] if index > 0 else None
            for high, _, successor in reversed(covering):  # lowest first: of successors clipped to the
                if lower is None or high >= lower:          # same bound, the lowest owns it (as in Java)
                    entries.append((min(high, upper), successor))
        return SegmentMap(_collapse(sorted(entries, key=lambda entry: entry[0])))


def _collapse(entries: list[tuple[float, Segment]]) -> list[tuple[float, Segment]]:
    """Drops an entry whose next entry names the same segment (Java collapses such runs)."""
    kept: list[tuple[float, Segment]] = []
    for index, (upper, segment) in enumerate(entries):
        if index + 1 < len(entries) and entries[index + 1][1] == segment:
            continue
        if kept and kept[-1][0] == upper:
            continue
        kept.append((upper, segment))
    return kept


RoutingKey: TypeAlias = str | None
"""An event's routing key: events with one key stay in order; None places an event anywhere."""


class KeyHasher:

    """Routing key -> key-space fraction, with a bounded cache (hashing a key costs about a microsecond)."""

    __slots__ = ("_cache", "_random")

    def __init__(self) -> None:
        self._cache: dict[str, float] = {}

        self._random = random.random

    def fraction(self, routing_key: str | None) -> float:
        """Where ``routing_key`` falls in [0, 1); a random place for None (no ordering)."""
        if routing_key is None:
            return self._random()
        fraction = self._cache.get(routing_key)
        if fraction is None:
            if len(self._cache) >= _KEY_CACHE_MAX:
                self._cache.clear()
            fraction = self._cache[routing_key] = naming.routing_key_fraction(routing_key)
        return fraction

"""Event boundaries of stream segments, and LocateOffset's search for the first one at or after an offset.

A stream segment holds enveloped events back to back (protocol reference §4.1):
``type:i32 (0) | length:i32 | length payload bytes``. An *event boundary* is an
offset where an envelope starts, or the segment's length.

LocateOffset(segment, target) answers, for a segment with start offset ``start``
(after truncation) and length ``length``:

* ``target <= start``: ``start``;
* ``target >= length``: ``length``;
* otherwise the smallest event boundary ``b`` with ``target <= b <= length``
  (a ``target`` exactly on a boundary answers itself).

Theory of operation.

* **Known boundaries.** Every append the container applies to a stream segment
  starts at a boundary: append blocks and conditional appends carry whole events,
  and a merge puts whole events (a transaction's, or a large event's header and
  payload) at the target's old length. ``ContainerState.apply`` reports appends,
  merges, truncations and removals here, during normal operation and during
  recovery's replay alike. Each segment keeps a sparse :class:`BoundaryIndex`:
  a sorted array holding at most one boundary per ``spacing`` bytes and at most
  ``capacity`` of them (past that the spacing doubles and the array is thinned),
  so memory stays bounded whatever the segment's size. The index holds hints
  only: dropping any of them never changes an answer, only its cost.
* **Search.** LocateOffset starts at the largest known boundary at or below the
  target (the start offset when none is known, e.g. for bytes flushed to Tier-2
  before a restart) and walks envelope headers forward, jumping over payloads,
  with large reads through the container's ordinary read path (cache or Tier-2)
  until it reaches a boundary at or above the target. Reads start at 64 KiB,
  double while the walk steps through them header by header, and start small
  again after a jump over a payload, so a large event costs one header read.
  A walk records what it learns (boundaries about ``spacing`` bytes apart, and
  its answer, as far as the spacing allows): where boundaries are known a call
  reads about ``spacing`` bytes at most (plus headers of events larger than
  that). The index is not persisted: after a restart, bytes recovered from
  Tier-2 (not replayed from the log) are known again only once a first walk has
  gone over them (the first call reads from the start offset up to its target). The start
  offset is taken to be a boundary (streams are truncated at event boundaries);
  a start offset inside an event makes the walk read garbage (see below).
* **Not an event stream.** Bytes that do not parse as envelopes (a byte stream,
  garbage: a type code other than 0, a negative length, an envelope running past
  the segment's length) end the walk, and the answer is the segment's length.
  Bytes that happen to parse as envelopes are taken as events. Appends whose
  first bytes do not look like an envelope are not recorded as boundaries, and
  table and transient segments are never walked: their answer above the start
  offset is their length.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from wire.constants import EVENT_TYPE_CODE, MAX_READ_SIZE
from wire.envelope import ENVELOPE_HEADER, ENVELOPE_HEADER_SIZE

from .metadata import SegmentMetadata, SegmentType

if TYPE_CHECKING:
    from wire.fields import BytesLike

DEFAULT_SPACING = 256 * 1024  # at most one known boundary per this many bytes (it grows past capacity)
DEFAULT_CAPACITY = 4096  # known boundaries kept per segment (8 bytes each)
READ_SIZE = MAX_READ_SIZE  # bytes asked of the read path per read while walking
_MIN_READ = 64 * 1024

Read = Callable[[int, int], Awaitable["BytesLike"]]
"""``read(offset, max_length)``: bytes-like data of the segment from ``offset`` (at least one byte)."""


class BoundaryIndex:
    """Known event boundaries of one segment: sorted, sparse (``spacing`` apart at least), bounded."""

    __slots__ = ("_offsets", "_start", "capacity", "spacing")

    def __init__(self, spacing: int = DEFAULT_SPACING, capacity: int = DEFAULT_CAPACITY):
        if spacing < 1 or capacity < 2:
            raise ValueError("spacing must be positive and capacity at least 2")
        self._offsets = array("q")
        self._start = 0  # boundaries below the segment's start offset are not kept
        self.spacing = spacing
        self.capacity = capacity

    def __len__(self) -> int:
        return len(self._offsets)

    def __iter__(self) -> Iterator[int]:
        return iter(self._offsets)

    def __repr__(self) -> str:
        return f"<BoundaryIndex {len(self._offsets)} boundaries, spacing {self.spacing}>"

    def floor(self, offset: int) -> int | None:
        """The largest known boundary at or below ``offset``, or None."""
        index = bisect.bisect_right(self._offsets, offset)
        return self._offsets[index - 1] if index else None

    def due(self, offset: int) -> bool:
        """Whether a boundary at ``offset``, past every known one, is worth recording."""
        return not self._offsets or offset - self._offsets[-1] >= self.spacing

    def add(self, offset: int) -> None:
        """Records the boundary ``offset`` unless a known one is less than ``spacing`` away."""
        offsets = self._offsets
        index = bisect.bisect_left(offsets, offset)
        if offset < self._start or (index < len(offsets) and offsets[index] - offset < self.spacing) or (
                index and offset - offsets[index - 1] < self.spacing):
            return
        offsets.insert(index, offset)
        if len(offsets) > self.capacity:
            self._thin()

    def extend(self, other: BoundaryIndex, base: int) -> None:
        """Records ``other``'s boundaries shifted by ``base`` (a merged source's, all past the known ones)."""
        for offset in other:
            if self.due(base + offset):
                self._offsets.append(base + offset)
                if len(self._offsets) > self.capacity:
                    self._thin()

    def truncate(self, start: int) -> None:
        """Forgets the boundaries below ``start`` (the segment's new start offset), and ignores them from now on."""
        self._start = max(self._start, start)
        del self._offsets[:bisect.bisect_left(self._offsets, start)]

    def _thin(self) -> None:
        """Doubles the spacing and keeps the boundaries at least that far apart, first one first."""
        while len(self._offsets) > self.capacity:
            self.spacing *= 2
            kept = array("q")
            for offset in self._offsets:
                if not kept or offset - kept[-1] >= self.spacing:
                    kept.append(offset)
            self._offsets = kept


class SegmentBoundaries:
    """The boundary indexes of one container's stream segments, fed by ``ContainerState.apply``."""

    __slots__ = ("_indexes", "capacity", "spacing")

    def __init__(self, spacing: int = DEFAULT_SPACING, capacity: int = DEFAULT_CAPACITY):
        self._indexes: dict[int, BoundaryIndex] = {}
        self.spacing = spacing
        self.capacity = capacity

    def index_of(self, segment: SegmentMetadata) -> BoundaryIndex | None:
        """The index of a stream segment (created on first use); None for table and transient segments."""
        if segment.segment_type != SegmentType.STREAM:
            return None
        index = self._indexes.get(segment.segment_id)
        if index is None:
            index = self._indexes[segment.segment_id] = BoundaryIndex(self.spacing, self.capacity)
        return index

    def appended(self, segment: SegmentMetadata, offset: int, data: BytesLike) -> None:
        """``data`` was appended at ``offset``: a boundary, if the bytes look like an event."""
        if segment.segment_type != SegmentType.STREAM:
            return  # transient segments get a large event in chunks: their appends are not boundaries
        index = self._indexes.get(segment.segment_id)
        if index is None:
            index = self._indexes[segment.segment_id] = BoundaryIndex(self.spacing, self.capacity)
        if index.due(offset) and looks_like_events(data):
            index.add(offset)

    def merged(self, target: SegmentMetadata, source: SegmentMetadata, offset: int, with_header: bool) -> None:
        """``source`` (and a header, if any) went into ``target`` at ``offset``, a boundary."""
        source_index = self._indexes.pop(source.segment_id, None)
        index = self.index_of(target)
        if index is None:
            return
        if index.due(offset):
            index.add(offset)
        if source_index is not None and not with_header:  # a transaction: its own boundaries, shifted
            index.extend(source_index, offset)

    def truncated(self, segment: SegmentMetadata, offset: int) -> None:
        index = self._indexes.get(segment.segment_id)
        if index is not None:
            index.truncate(offset)

    def removed(self, segment: SegmentMetadata) -> None:
        self._indexes.pop(segment.segment_id, None)


def looks_like_events(data: BytesLike) -> bool:
    """Whether ``data`` begins with an envelope that fits in it (a cheap check, not a proof)."""
    if len(data) < ENVELOPE_HEADER_SIZE:
        return False
    type_code, length = ENVELOPE_HEADER.unpack_from(data, 0)
    return type_code == EVENT_TYPE_CODE and 0 <= length <= len(data) - ENVELOPE_HEADER_SIZE


async def locate(index: BoundaryIndex | None, start: int, length: int, target: int, read: Read) -> int:
    """The first event boundary at or after ``target`` in ``[start, length]`` (see the module docstring).

    ``index`` None means the segment is not an event stream: the answer above ``start`` is ``length``.
    """
    if target <= start:
        return start
    if target >= length or index is None:
        return length
    known = index.floor(target)
    position = start if known is None or known < start else known
    learned_at = position
    view, view_at, read_size = memoryview(b""), position, _MIN_READ
    while position < target:
        if position + ENVELOPE_HEADER_SIZE > length:
            return length  # the segment ends inside an envelope header: not events
        at = position - view_at
        if at + ENVELOPE_HEADER_SIZE > len(view):
            # Reads grow while the walk goes through them header by header (small events), and start
            # small again after a jump over a payload (large events are not read, only their headers).
            read_size = min(READ_SIZE, 2 * read_size) if at <= len(view) else _MIN_READ
            size = min(read_size, max(_MIN_READ, target + ENVELOPE_HEADER_SIZE - position), length - position)
            got = await _read_at_least(read, position, size)
            if got is None:
                return length  # the read path had no bytes there (cannot happen below the length)
            view, view_at, at = got, position, 0
        type_code, event_length = ENVELOPE_HEADER.unpack_from(view, at)
        if type_code != EVENT_TYPE_CODE or event_length < 0:
            return length
        position += ENVELOPE_HEADER_SIZE + event_length
        if position > length:
            return length  # an envelope running past the end: not events
        if position - learned_at >= index.spacing and position < target:
            index.add(position)
            learned_at = position
    if position < length:
        index.add(position)
    return position


async def _read_at_least(read: Read, offset: int, size: int) -> memoryview | None:
    """A view of ``size`` bytes or fewer from ``offset``, but at least an envelope header's worth (or None)."""
    data = await read(offset, size)
    if len(data) < ENVELOPE_HEADER_SIZE:  # a read ending at a cache block's edge: join the next ones
        parts, got = [bytes(data)], len(data)
        while got < ENVELOPE_HEADER_SIZE:
            more = await read(offset + got, size - got)
            if not len(more):
                return None
            parts.append(bytes(more))
            got += len(more)
        data = b"".join(parts)
    return memoryview(data)


__all__ = ["BoundaryIndex", "SegmentBoundaries", "locate", "looks_like_events"]

"""A reader group's time window on a stream, from the stream's watermarks (Java's
``EventStreamReader.getCurrentTimeWindow``).

Theory of operation. The controller appends watermarks (``wire.watermark``) to the stream's mark
segment; each holds a time window [lower, upper] and a stream cut. The group's *position* in the
stream is every segment it is reading (owned by a reader, or not yet) with the offset reached.
``compare(position, mark)`` says whether the position is past the mark's cut (+1: at or after it
on every overlapping segment, or nowhere overlapping), before it (-1), or across it (0). Segments
are compared by offset when they are the same one and by id otherwise (a higher id is a later
segment of the same key range).

``TimeWindowTracker`` (pure) keeps the marks read but not yet passed (``in_flight``, oldest first)
and the lower bound of the newest mark passed. ``advance(position)`` drops the passed marks from
the front, then takes more marks from those offered until the newest in flight is ahead of the
position; it asks for more (returns True) when it needs marks it was not offered. The window's
lower bound is the newest passed mark's lower bound (so it never goes back), its upper bound the
upper bound of the newest mark in flight (None when there is none: the position is near the
stream's tail, or no watermark exists).

``TimeWindowFollower`` does the I/O: reads the mark segment in batches (only when the tracker asks)
and gives each segment of the position its key range (``getEpochSegments``, cached per epoch).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Mapping

from wire.watermark import SegmentWithRange, Watermark, mark_stream

from ..controller_client import Controller
from ..errors import SegmentTruncated, StreamNotFound
from ..mark_segment import marks_between, segment_bounds
from ..segment_store_client import SegmentStoreClient
from ..segment_stores import segment_of
from .group_state import GroupState

MARKS_PER_READ_MAX = 256  # marks read from the mark segment per batch


@dataclasses.dataclass(frozen=True)
class TimeWindow:
    """Bounds on the times writers noted around a reader group's position in a stream.

    ``lower_time_bound``: every event the writers wrote before noting this time has been read
    (None: no watermark passed yet). ``upper_time_bound``: no event read so far was written after
    the writers noted this time (None: unknown, e.g. near the tail of the stream).
    """

    lower_time_bound: int | None
    upper_time_bound: int | None

    @property
    def is_near_head_of_stream(self) -> bool:
        """Java's name for "no upper bound is known yet": the position is near the newest data."""
        return self.upper_time_bound is None


def _compare_segment(segment: SegmentWithRange, offset: int, other: SegmentWithRange, other_offset: int) -> int:
    if segment.segment_id != other.segment_id:
        return 1 if segment.segment_id > other.segment_id else -1
    return (offset > other_offset) - (offset < other_offset)


def compare(position: Mapping[SegmentWithRange, int], mark: Watermark) -> int:
    """+1 if ``position`` is at or past ``mark``'s cut, -1 if before it, 0 if partly before and partly after."""
    below = above = False
    for segment, offset in position.items():
        if segment in mark.stream_cut:
            matching: Iterable[tuple[SegmentWithRange, int]] = ((segment, mark.stream_cut[segment]),)
        else:
            matching = [(other, other_offset) for other, other_offset in mark.stream_cut.items()
                        if other.overlaps(segment)]
        for other, other_offset in matching:
            comparison = _compare_segment(segment, offset, other, other_offset)
            below, above = below or comparison < 0, above or comparison > 0
    if below:
        return 0 if above else -1
    return 1  # past it, exactly at it, or nowhere overlapping: time advances


def group_position(state: GroupState, reports: Mapping[str, Mapping[str, int]], scope: str,
                   stream: str) -> dict[int, int]:
    """The group's position in ``scope/stream`` (segment id -> offset): unassigned segments where
    reading will start, owned ones where their readers last reported (``reports``: reader ->
    positions, newest first in precedence over the offsets recorded in the state). Finished
    segments and successors not yet readable are left out, as Java leaves them out."""
    offsets = dict(state.unassigned)
    for reader, owned in state.assigned.items():
        reported = reports.get(reader, {})
        offsets.update({segment: reported.get(segment, offset) for segment, offset in owned.items()})
    position = {}
    for name, offset in offsets.items():
        segment = segment_of(name)
        if segment.scope == scope and segment.stream == stream:
            position[segment.segment_id] = offset
    return position


class TimeWindowTracker:
    """The pure part: marks offered, marks in flight, the newest passed lower bound."""

    def __init__(self) -> None:
        self._offered: deque[Watermark] = deque()
        self._in_flight: deque[Watermark] = deque()
        self._passed_lower: int | None = None

    def offer(self, marks: Iterable[Watermark]) -> None:
        """Marks read from the mark segment, in order."""
        self._offered.extend(marks)

    def advance(self, position: Mapping[SegmentWithRange, int]) -> bool:
        """Moves past the marks ``position`` has passed. Returns True if it needs more marks offered."""
        in_flight = self._in_flight
        while in_flight and compare(position, in_flight[0]) > 0:
            self._passed_lower = in_flight.popleft().lower_time_bound
        while not in_flight or compare(position, in_flight[-1]) >= 0:
            if not self._offered:
                return True
            mark = self._offered.popleft()
            if compare(position, mark) <= 0:
                in_flight.append(mark)
            else:
                self._passed_lower = mark.lower_time_bound
        return False

    @property
    def window(self) -> TimeWindow:
        upper = self._in_flight[-1].upper_time_bound if self._in_flight else None
        return TimeWindow(self._passed_lower, upper)


class TimeWindowFollower:
    """Follows one stream's mark segment for one reader (the I/O around a :class:`TimeWindowTracker`)."""

    def __init__(self, controller: Controller, raw: SegmentStoreClient, scope: str, stream: str):
        self._controller = controller
        self._raw = raw
        self.scope, self.stream = scope, stream
        self._segment: str | None = None  # the mark segment, looked up on first use
        self._offset: int | None = None  # where the next unread mark starts
        self._tracker = TimeWindowTracker()
        self._ranges: dict[int, SegmentWithRange] = {}

    async def window(self, position: Mapping[int, int]) -> TimeWindow:
        """The time window at ``position`` (segment id -> offset, this stream's segments only).

        A stream without a mark stream (created before watermarks existed, and no writer noted a
        time since) has no watermarks: the window stays (None, None).
        """
        ranged = await self._with_ranges(position)
        while self._tracker.advance(ranged):
            if not await self._read_more():
                break
        return self._tracker.window

    async def _read_more(self) -> bool:
        """Offers the tracker the next batch of marks. Returns False if there were none."""
        segment = self._segment
        if segment is None:
            try:
                current = await self._controller.get_current_segments(self.scope, mark_stream(self.stream))
            except StreamNotFound:
                return False
            if len(current) != 1:
                return False  # no mark stream (yet): no watermarks
            segment = self._segment = current[0].segment.qualified_name
        start, length = await segment_bounds(self._raw, segment)
        offset = start if self._offset is None or self._offset < start else self._offset
        marks = []
        try:
            async for _, after, mark in marks_between(self._raw, segment, offset, length):
                marks.append(mark)
                offset = after
                if len(marks) >= MARKS_PER_READ_MAX:
                    break
        except SegmentTruncated:
            pass  # older marks went meanwhile: the next read starts at the segment's new start
        self._offset = offset
        self._tracker.offer(marks)
        return bool(marks)

    async def _with_ranges(self, position: Mapping[int, int]) -> dict[SegmentWithRange, int]:
        missing = {segment_id >> 32 for segment_id in position if segment_id not in self._ranges}
        for epoch in missing:
            for found in await self._controller.get_epoch_segments(self.scope, self.stream, epoch):
                self._ranges[found.segment.segment_id] = SegmentWithRange(found.segment.segment_id, found.low,
                                                                          found.high)
        return {self._ranges[segment_id]: offset for segment_id, offset in position.items()
                if segment_id in self._ranges}

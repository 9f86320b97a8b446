"""Where retention truncates a stream: the policy's min/max bounds and the subscribers' lower bound (PDP-19).

Theory of operation. Retention records a stream cut every period (``retention.py``); each recorded
cut has a time and the stream's size up to it, so truncating there would *retain* ``now - time``
(TIME policies) or ``newest size - size`` (SIZE policies). The policy gives a minimum to keep
(``retentionParam``) and a maximum (``retentionMax``, "keep at most"). Two recorded cuts bound the
choice:

* *min cut*: the newest cut that still retains at least the minimum -- truncating there frees the
  most while honouring the minimum;
* *max cut*: the oldest cut that retains between the minimum and the maximum -- the least
  truncation that honours the maximum (the min cut when none does).

Without subscribers the stream is truncated at the min cut. Reader groups that subscribe
(consumption-based retention) report how far they have read; their *lower bound* is the earliest
position any of them still needs, per key range (``subscribers_lower_bound``). Then:

* SIZE: if truncating at the lower bound would retain less than the minimum, truncate at the min
  cut when it lies before the lower bound, else at the newest recorded cut before the lower bound;
  if it would retain between minimum and maximum, truncate at the lower bound; if more than the
  maximum (a lagging or silent subscriber), truncate at the max cut when that retains less, so no
  subscriber holds data back past the maximum.
* TIME: if the min cut lies before the lower bound, truncate at the min cut (the subscribers have
  read past it); if the two overlap (ahead in some key ranges, behind in others), at the newest
  recorded cut before the lower bound; if the lower bound lies before the min cut, at the lower
  bound -- unless it is also before the newest cut older than the maximum ("max bound"), then at
  the max cut (or at the max bound itself when they overlap).

Subscribers that have not reported a cut yet do not hold anything back, as in Pravega.

Everything here is pure: cut comparisons come in as a function over (segment id -> offset) maps.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence

from controller_api.model import RetentionPolicy, RetentionType

from ..store.records import SegmentRecord

Cut = dict[int, int]


class Comparison(enum.Enum):
    """How one stream cut lies relative to another over the whole key space."""

    EQUAL_OR_AFTER = "equal or after"
    BEFORE = "before"
    OVERLAPS = "overlaps"  # after in some key ranges, before in others


def _position(cut: Cut, point: float, segments: Mapping[int, SegmentRecord]) -> tuple[int, int] | None:
    """(segment id, offset) where ``cut`` stands at key ``point``: the segment it is reading there, or
    the future segment (offset -1) it waits to start when its predecessors there are done."""
    found = None
    for segment_id, offset in cut.items():
        segment = segments[segment_id]
        if segment.key_start <= point < segment.key_end and (found is None or found[1] < 0 <= offset):
            found = (segment_id, offset)
    return found


def compare_cuts(cut: Cut, other: Cut, segments: Mapping[int, SegmentRecord]) -> Comparison:
    """``cut`` relative to ``other``, key range by key range; ``segments`` holds every segment either names.

    Where both stand in the same segment the offsets compare; where they stand in different
    segments the later one (larger id: key ranges that overlap never share an epoch) is ahead.
    """
    edges = sorted({edge for segment_id in (*cut, *other)
                    for edge in (segments[segment_id].key_start, segments[segment_id].key_end)})
    after = before = False
    for start, end in itertools.pairwise(edges):  # elementary key ranges
        point = (start + end) / 2
        mine, theirs = _position(cut, point, segments), _position(other, point, segments)
        if mine is None or theirs is None or mine == theirs:
            continue
        ahead = mine[1] > theirs[1] if mine[0] == theirs[0] else mine[0] > theirs[0]
        after, before = after or ahead, before or not ahead
    if after and before:
        return Comparison.OVERLAPS
    return Comparison.BEFORE if before else Comparison.EQUAL_OR_AFTER


def _covers(start: float, end: float, ranges: Iterable[tuple[float, float]]) -> bool:
    """True if the union of ``ranges`` covers [start, end)."""
    position = start
    for range_start, range_end in sorted(ranges):
        if range_start > position:
            break
        position = max(position, range_end)
        if position >= end:
            return True
    return position >= end


def subscribers_lower_bound(cuts: Iterable[Mapping[int, int]], segments: Mapping[int, SegmentRecord]) -> Cut:
    """The earliest position any of ``cuts`` needs, per key range, as one stream cut.

    A segment enters the bound with its smallest offset unless an earlier (overlapping, smaller id)
    segment is already in it; when it enters, the later segments it overlaps leave. A *future*
    segment (negative offset) stays only while its predecessors in the bound leave part of its
    range uncovered. Empty cuts (subscribers that never reported) contribute nothing.
    """
    bound: Cut = {}
    for cut in cuts:
        for segment_id, offset in cut.items():
            if segment_id in bound:
                bound[segment_id] = min(bound[segment_id], offset)
                continue
            segment = segments[segment_id]
            overlapping = [other for other in bound if segments[other].overlaps(segment)]
            earlier = [other for other in overlapping if other < segment_id]
            later = [other for other in overlapping if other > segment_id]
            if not overlapping:
                bound[segment_id] = offset
            elif offset < 0:
                if not _covers(segment.key_start, segment.key_end,
                               ((segments[other].key_start, segments[other].key_end) for other in earlier)):
                    bound[segment_id] = offset
            elif not earlier:
                bound[segment_id] = offset
                for other in later:
                    if bound[other] >= 0:
                        del bound[other]
                        continue
                    future = segments[other]
                    predecessors = ((segments[s].key_start, segments[s].key_end) for s in bound
                                    if s < other and segments[s].overlaps(future))
                    if _covers(future.key_start, future.key_end, predecessors):
                        del bound[other]
    return bound


@dataclasses.dataclass(frozen=True)
class RecordedCut:
    """A retention cut: when it was recorded, the stream's size up to it, and the cut."""

    time: int
    size: int
    cut: Cut


def retained(policy: RetentionPolicy, now: int, newest_size: int, record: RecordedCut) -> int:
    """What truncating at ``record`` would keep, in the policy's unit (ms or bytes)."""
    if policy.retention_type == RetentionType.TIME:
        return now - record.time
    return newest_size - record.size


def bound_cuts(policy: RetentionPolicy, now: int,
               records: Sequence[RecordedCut]) -> tuple[RecordedCut | None, RecordedCut | None]:
    """(max cut, min cut) as the module docstring defines them; (None, None) if no cut keeps the minimum."""
    if not records:
        return None, None
    newest_size = records[-1].size
    keeping = [(retained(policy, now, newest_size, record), record) for record in records]
    keeping = [(kept, record) for kept, record in keeping if kept >= policy.minimum]
    if not keeping:
        return None, None
    minimum = min(keeping, key=lambda row: row[0])[1]
    within = [(kept, record) for kept, record in keeping if kept <= policy.upper_bound]
    maximum = max(within, key=lambda row: row[0])[1] if within else minimum
    return maximum, minimum


Compare = Callable[[Cut, Cut], Comparison]


def newest_before(records: Sequence[RecordedCut], bound: Cut, compare: Compare) -> RecordedCut | None:
    """The newest recorded cut that ``bound`` is at or after."""
    for record in reversed(records):
        if compare(bound, record.cut) == Comparison.EQUAL_OR_AFTER:
            return record
    return None


def truncation_cut(policy: RetentionPolicy, now: int, records: Sequence[RecordedCut], lower_bound: Cut,
                   lower_bound_size: int, compare: Compare) -> Cut | None:
    """Where to truncate (None: nowhere yet). ``lower_bound`` is the subscribers' ({} if none) and
    ``lower_bound_size`` the stream's size up to it (ignored without a lower bound)."""
    maximum, minimum = bound_cuts(policy, now, records)
    if not lower_bound:
        return minimum.cut if minimum is not None else None
    if policy.retention_type == RetentionType.SIZE:
        return _by_size(policy, records, lower_bound, lower_bound_size, maximum, minimum, compare)
    return _by_time(policy, now, records, lower_bound, maximum, minimum, compare)


def _cut(record: RecordedCut | None) -> Cut | None:
    return record.cut if record is not None else None


def _by_size(policy: RetentionPolicy, records: Sequence[RecordedCut], lower_bound: Cut, lower_bound_size: int,
             maximum: RecordedCut | None, minimum: RecordedCut | None, compare: Compare) -> Cut | None:
    newest_size = records[-1].size if records else lower_bound_size
    kept_at_bound = newest_size - lower_bound_size
    if kept_at_bound < policy.minimum:
        if minimum is None:
            return None
        if compare(minimum.cut, lower_bound) == Comparison.BEFORE:
            return minimum.cut
        return _cut(newest_before(records, lower_bound, compare))
    if kept_at_bound < policy.upper_bound:
        return lower_bound
    if maximum is not None and newest_size - maximum.size < kept_at_bound:
        return maximum.cut
    return lower_bound


def _by_time(policy: RetentionPolicy, now: int, records: Sequence[RecordedCut], lower_bound: Cut,
             maximum: RecordedCut | None, minimum: RecordedCut | None, compare: Compare) -> Cut | None:
    if minimum is None:
        return None
    order = compare(minimum.cut, lower_bound)
    if order == Comparison.BEFORE:
        return minimum.cut
    if order == Comparison.OVERLAPS:
        return _cut(newest_before(records, lower_bound, compare))
    too_old = [record for record in records if now - record.time >= policy.upper_bound]
    if not too_old:
        return lower_bound
    max_bound = too_old[-1]
    against_max = compare(lower_bound, max_bound.cut)
    if against_max == Comparison.EQUAL_OR_AFTER:
        return lower_bound
    if against_max == Comparison.BEFORE:
        return _cut(maximum)
    return max_bound.cut

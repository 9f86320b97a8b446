"""The pure rules of watermarking (Pravega's ``PeriodicWatermarking``): which writers count, whether
a round emits, its time bounds, and its stream cut.

Theory of operation. Each round looks at every stored writer mark (time, position, alive) of a
stream and at the previous watermark's lower time bound ``previous_lower`` (None before the
first one):

* a writer *participates* if its time is above ``previous_lower`` (every writer does before the
  first watermark);
* a writer that does not participate starts a timeout clock (``not_participating_since``, kept
  by the caller across rounds); it stays *active* while it is alive (not shut down by
  removeWriter) and its clock has run less than the writer timeout (:func:`writer_timeout_ms`:
  the stream's ``timestampAggregationTimeout``, or ``DEFAULT_TIMEOUT_PERIODS`` watermark periods
  when that is 0). Participating writers are always active and their clock is cleared;
* inactive writers are removed from the store;
* if any active writer does not participate, nothing is emitted (the round waits for it to
  report, or to time out); otherwise lower bound = min of the active writers' times, upper =
  max; emitted only if lower > ``previous_lower`` (watermarks never go back).

The stream cut is the upper bound of the active writers' positions (per segment the highest
offset; a segment is dropped when a successor of it -- an overlapping segment with a higher id
-- is present), superimposed on the previous watermark's cut (so cuts never go back), then
completed so the key space [0, 1) is covered: missing ranges are filled with the segments of the
highest epoch present, at offset 0. Time is an argument (``now`` in ms).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from wire.watermark import SegmentWithRange

from ..store.key_space import uncovered
from ..store.records import WriterMarkRecord

DEFAULT_TIMEOUT_PERIODS = 6  # a stream's timeout of 0 (unset, the default) means this many watermark periods


def writer_timeout_ms(stream_timeout_ms: int, period_seconds: float) -> int:
    """How long a live writer behind the newest watermark still holds the watermarks back: the
    stream's ``timestampAggregationTimeout`` (ms), or ``DEFAULT_TIMEOUT_PERIODS`` watermark periods
    when it is 0.

    Pravega's controller reads 0 literally and drops such a writer at the first round that finds
    it behind; a live writer noting less often than the period would then never hold the
    watermarks back, so here it counts while it notes a later time at least every
    ``DEFAULT_TIMEOUT_PERIODS`` periods (60 s with the 10 s default), until it closes."""
    if stream_timeout_ms > 0:
        return stream_timeout_ms
    return round(DEFAULT_TIMEOUT_PERIODS * period_seconds * 1000)


@dataclasses.dataclass(frozen=True)
class RoundDecision:
    """What a round does: the writers to remove, and the time bounds to emit (None: no watermark)."""

    active: tuple[str, ...]
    inactive: tuple[str, ...]
    bounds: tuple[int, int] | None


def participates(timestamp: int, previous_lower: int | None) -> bool:
    return previous_lower is None or timestamp > previous_lower


def decide(marks: Mapping[str, WriterMarkRecord], previous_lower: int | None,
           not_participating_since: dict[str, int], now: int, timeout_ms: int) -> RoundDecision:
    """One round's decision. Updates ``not_participating_since`` (writer -> ms first seen behind);
    writers it names but ``marks`` does not are forgotten."""
    active, inactive = [], []
    all_participate = True
    for writer, mark in marks.items():
        if participates(mark.timestamp, previous_lower):
            not_participating_since.pop(writer, None)
            active.append(writer)
            continue
        since = not_participating_since.setdefault(writer, now)
        if mark.is_alive and now - since < timeout_ms:
            active.append(writer)
            all_participate = False
        else:
            inactive.append(writer)
    for writer in set(not_participating_since) - set(marks) | set(inactive):
        not_participating_since.pop(writer, None)
    bounds = None
    if active and all_participate:
        times = [marks[writer].timestamp for writer in active]
        lower, upper = min(times), max(times)
        if previous_lower is None or lower > previous_lower:
            bounds = (lower, upper)
    return RoundDecision(tuple(active), tuple(inactive), bounds)


# --------------------------------------------------------------------------- stream cuts


def add_to_upper_bound(position: Mapping[SegmentWithRange, int], upper_bound: dict[SegmentWithRange, int]) -> None:
    """Raises ``upper_bound`` to cover ``position``: per segment the higher offset; a segment with a
    successor already in the bound is left out, and its predecessors in the bound are dropped."""
    for segment, offset in position.items():
        if segment in upper_bound:
            upper_bound[segment] = max(offset, upper_bound[segment])
            continue
        if any(segment.overlaps(other) and other.segment_id > segment.segment_id for other in upper_bound):
            continue
        for other in [other for other in upper_bound
                      if segment.overlaps(other) and other.segment_id < segment.segment_id]:
            del upper_bound[other]
        upper_bound[segment] = offset


def missing_ranges(cut: Iterable[SegmentWithRange]) -> list[tuple[float, float]]:
    """The parts of [0, 1) no segment of ``cut`` covers, in key order."""
    return uncovered((segment.range_low, segment.range_high) for segment in cut)


def highest_epoch(cut: Iterable[SegmentWithRange]) -> int | None:
    epochs = [segment.segment_id >> 32 for segment in cut]
    return max(epochs) if epochs else None


def complete_cut(cut: dict[SegmentWithRange, int], epoch_segments: Iterable[SegmentWithRange]) -> None:
    """Fills the key ranges ``cut`` misses with ``epoch_segments`` (those of its highest epoch, which
    cover the whole key space) at offset 0, until nothing is missing.

    Raises:
        ValueError: ``epoch_segments`` do not cover what is missing (they are not a whole epoch).
    """
    epoch = list(epoch_segments)
    for _ in range(len(epoch) + 1):  # each pass adds at least one of the epoch's segments for good
        gaps = missing_ranges(cut)
        if not gaps:
            return
        filling = {segment: 0 for segment in epoch if segment not in cut
                   and any(segment.range_low < high and segment.range_high > low for low, high in gaps)}
        if not filling:
            break
        add_to_upper_bound(filling, cut)
    if missing_ranges(cut):
        raise ValueError(f"the epoch's segments leave {missing_ranges(cut)} uncovered")


def upper_bound(positions: Iterable[Mapping[SegmentWithRange, int]],
                previous: Mapping[SegmentWithRange, int]) -> dict[SegmentWithRange, int]:
    """The writers' positions' upper bound raised over the previous watermark's cut (not yet complete:
    pass it to :func:`complete_cut` with the segments of its :func:`highest_epoch`)."""
    cut: dict[SegmentWithRange, int] = {}
    for position in positions:
        add_to_upper_bound(position, cut)
    add_to_upper_bound(previous, cut)
    return cut

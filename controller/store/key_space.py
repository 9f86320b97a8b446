"""Pure key-space algorithms: epoch 0, scale input checks, the next epoch, duplicates, successors.

Every epoch's segments tile [0.0, 1.0) exactly: sorted by key_start, the first starts at 0.0, each
starts where the previous ends (float equality, no epsilon), and the last ends at exactly 1.0.
Ranges are only ever copied or split with the last piece ending at the original end, so the
tiling survives any sequence of scales without rounding drift.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from wire.naming import segment_id

from .errors import ScaleInputInvalid
from .records import EpochRecord, EpochTransitionRecord, HistoryTimeSeriesRecord, NewSegment, SegmentRecord


def equal_ranges(start: float, end: float, count: int) -> list[tuple[float, float]]:
    """``count`` equal sub-ranges of [start, end); the last one ends at exactly ``end``."""
    if count < 1:
        raise ValueError("at least one range")
    width = (end - start) / count
    bounds = [start + width * index for index in range(count)] + [end]
    return list(itertools.pairwise(bounds))


def uncovered(ranges: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of [0, 1) that no range of ``ranges`` covers, in key order."""
    gaps, position = [], 0.0
    for start, end in sorted(ranges):
        if start > position:
            gaps.append((position, start))
        position = max(position, end)
    if position < 1.0:
        gaps.append((position, 1.0))
    return gaps


def initial_epoch(segment_count: int, starting_number: int, creation_time: int) -> EpochRecord:
    """Epoch 0 of a new stream: ``segment_count`` equal ranges numbered from ``starting_number``."""
    segments = tuple(SegmentRecord(segment_id(starting_number + index, 0), creation_time, start, end)
                     for index, (start, end) in enumerate(equal_ranges(0.0, 1.0, segment_count)))
    return EpochRecord(0, 0, creation_time, segments)


def tiling_error(segments: Sequence[SegmentRecord]) -> str | None:
    """Why ``segments`` (ordered by key_start) do not tile [0, 1) exactly, or None if they do."""
    if not segments:
        return "no segments"
    position = 0.0
    for segment in segments:
        if segment.key_start != position:
            return f"segment {segment.segment_id} starts at {segment.key_start}, expected {position}"
        if not segment.key_start < segment.key_end:
            return f"segment {segment.segment_id} has an empty range"
        position = segment.key_end
    return None if position == 1.0 else f"the last segment ends at {position}, not 1.0"


def merged_intervals(ranges: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted ranges with touching neighbours joined. Raises ScaleInputInvalid on overlap or emptiness."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(ranges):
        if not 0.0 <= start < end <= 1.0:
            raise ScaleInputInvalid(f"range [{start}, {end}) is empty or outside [0, 1]")
        if merged and start < merged[-1][1]:
            raise ScaleInputInvalid(f"range [{start}, {end}) overlaps another new range")
        if merged and start == merged[-1][1]:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def plan_epoch_transition(current: EpochRecord, segments_to_seal: Sequence[int],
                          new_ranges: Sequence[tuple[float, float]], time: int) -> EpochTransitionRecord:
    """The epoch transition that seals ``segments_to_seal`` of ``current`` and creates ``new_ranges``.

    New segments are numbered above every number in ``current`` (which holds the highest number
    the stream ever used) and carry the new epoch in their ids.

    Raises:
        ScaleInputInvalid: unknown or repeated segments, or new ranges that do not cover exactly
            the key space of the sealed segments.
    """
    if not segments_to_seal or not new_ranges:
        raise ScaleInputInvalid("a scale seals at least one segment and creates at least one")
    if len(set(segments_to_seal)) != len(segments_to_seal):
        raise ScaleInputInvalid("a segment to seal is named twice")
    found = [current.segment(sealed_id) for sealed_id in segments_to_seal]
    sealed = [segment for segment in found if segment is not None]
    if len(sealed) != len(found):
        raise ScaleInputInvalid(f"segments to seal must be in the current epoch {current.epoch}")
    sealed_space = merged_intervals((segment.key_start, segment.key_end) for segment in sealed)
    if merged_intervals(new_ranges) != sealed_space:
        raise ScaleInputInvalid("the new ranges must cover exactly the key ranges of the sealed segments")
    first_number = current.highest_segment_number + 1
    new_segments = tuple(NewSegment(segment_id(first_number + index, current.epoch + 1), start, end)
                         for index, (start, end) in enumerate(new_ranges))
    return EpochTransitionRecord(current.epoch, time, tuple(segments_to_seal), new_segments)


def apply_delta(segments: Iterable[SegmentRecord], sealed_ids: Iterable[int],
                created: Iterable[SegmentRecord]) -> tuple[SegmentRecord, ...]:
    """``segments`` without ``sealed_ids``, plus ``created``, ordered by key_start: the next epoch's segments."""
    sealed = frozenset(sealed_ids)
    kept = [segment for segment in segments if segment.segment_id not in sealed]
    return tuple(sorted(kept + list(created), key=lambda segment: segment.key_start))


def next_epoch(current: EpochRecord, transition: EpochTransitionRecord) -> tuple[EpochRecord, HistoryTimeSeriesRecord]:
    """The epoch after ``current`` under ``transition``, and its history delta.

    Its creation time is at least one past the current epoch's, so epoch times strictly increase
    and the time index can binary-search them.
    """
    if transition.active_epoch != current.epoch:
        raise ValueError(f"transition from epoch {transition.active_epoch} applied to epoch {current.epoch}")
    epoch = current.epoch + 1
    time = max(transition.time, current.creation_time + 1)
    created = tuple(SegmentRecord(new.segment_id, time, new.key_start, new.key_end) for new in transition.new_segments)
    record = EpochRecord(epoch, epoch, time, apply_delta(current.segments, transition.segments_to_seal, created))
    return record, HistoryTimeSeriesRecord(epoch, epoch, time, tuple(transition.segments_to_seal), created)


def duplicate_epoch(source: EpochRecord, epoch: int, time: int) -> tuple[EpochRecord, HistoryTimeSeriesRecord]:
    """A rolling-transaction duplicate of ``source`` as epoch ``epoch``: same ranges, new ids.

    The duplicate keeps the source's reference epoch, so transactions of either group together,
    and its history entry carries no delta (readers of the history fetch the epoch record).
    """
    segments = tuple(SegmentRecord(segment_id(segment.number, epoch), time, segment.key_start, segment.key_end)
                     for segment in source.segments)
    record = EpochRecord(epoch, source.reference_epoch, time, segments)
    return record, HistoryTimeSeriesRecord(epoch, source.reference_epoch, time, (), ())


def successors_with_predecessors(segment_id_value: int, sealed_epoch: EpochRecord,
                                 previous_epoch: EpochRecord) -> dict[SegmentRecord, list[int]]:
    """The segments that replace ``segment_id_value`` in ``sealed_epoch``, each with its predecessors.

    ``previous_epoch`` is the epoch before ``sealed_epoch``, the last one holding the segment.
    Successors are the segments new in ``sealed_epoch`` whose range overlaps the segment's; the
    predecessors of a successor are the segments of ``previous_epoch`` it overlaps that did not
    survive into ``sealed_epoch``.
    """
    segment = previous_epoch.segment(segment_id_value)
    if segment is None:
        return {}
    previous_ids, sealed_ids = previous_epoch.segment_ids, sealed_epoch.segment_ids
    result = {}
    for successor in sealed_epoch.segments:
        if successor.segment_id in previous_ids or not successor.overlaps(segment):
            continue
        result[successor] = sorted(predecessor.segment_id for predecessor in previous_epoch.segments
                                   if predecessor.segment_id not in sealed_ids and predecessor.overlaps(successor))
    return result

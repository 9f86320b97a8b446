"""Pure stream-cut algorithms: span, segments between two cuts, truncation overlay (spec §6.6).

One fact carries all of them: two segments whose ranges overlap never share an epoch, so the one
with the larger id (a later creation epoch) comes after the other in the stream. A cut segment
that overlaps a segment with a smaller id has therefore read past it.
"""

from __future__ import annotations

from collections.abc import Sequence

from wire.naming import epoch_of

from .errors import NotFound
from .records import EpochRecord, SegmentRecord, TruncationRecord


def creation_epoch_range(*cuts: dict[int, int]) -> tuple[int, int]:
    """The lowest and highest creation epoch of the segments named in ``cuts`` (all non-empty)."""
    epochs = [epoch_of(segment_id) for cut in cuts for segment_id in cut]
    return min(epochs), max(epochs)


def compute_span(cut: dict[int, int], epochs: Sequence[EpochRecord]) -> dict[SegmentRecord, int]:
    """Each cut segment -> the highest epoch, up to the cut's highest creation epoch, that holds it.

    ``epochs`` are consecutive and ascending and cover the cut's creation epochs.

    Raises:
        NotFound: a cut segment is in none of those epochs (not a segment of this stream).
    """
    _, highest = creation_epoch_range(cut)
    candidates = [epoch for epoch in reversed(epochs) if epoch.epoch <= highest]
    span = {}
    for segment_id in cut:
        for epoch in candidates:
            if epoch.epoch < epoch_of(segment_id):
                break
            segment = epoch.segment(segment_id)
            if segment is not None:
                span[segment] = epoch.epoch
                break
        else:
            raise NotFound(f"segment {segment_id} of the stream cut is not in the stream")
    return span


def segments_between(span_from: dict[SegmentRecord, int], span_to: dict[SegmentRecord, int],
                     epochs: Sequence[EpochRecord]) -> set[SegmentRecord]:
    """Every segment holding data between the cuts spanned by ``span_from`` and ``span_to``.

    A segment counts if it lies in an epoch fully between the two cuts, or if every segment of
    ``span_from`` it overlaps has an id <= its own and every segment of ``span_to`` it overlaps
    has an id >= its own. ``epochs`` cover [lowest epoch of span_from, highest of span_to].
    """
    from_high = max(span_from.values())
    to_low = min(span_to.values())
    segments: set[SegmentRecord] = set()
    for epoch in epochs:
        if from_high <= epoch.epoch <= to_low:
            segments.update(epoch.segments)
            continue
        for segment in epoch.segments:
            if segment in segments:
                continue
            after_from = all(other.segment_id <= segment.segment_id for other in span_from if other.overlaps(segment))
            before_to = all(segment.segment_id <= other.segment_id for other in span_to if other.overlaps(segment))
            if after_from and before_to:
                segments.add(segment)
    return segments


def is_truncated(segment: SegmentRecord, truncation: TruncationRecord) -> bool:
    """True if the truncation cut has read past ``segment`` (see the module docstring)."""
    return any(cut_segment.segment_id > segment.segment_id and cut_segment.overlaps(segment)
               for cut_segment in truncation.span)


def overlay_truncation(epoch: EpochRecord, truncation: TruncationRecord) -> dict[SegmentRecord, int]:
    """The stream cut at ``epoch`` seen from the head: later of the epoch's segments and the truncation cut.

    Over each key range, the segment with the larger id wins; a segment in both keeps the cut's offset.
    Segments of the epoch start at offset 0.
    """
    if truncation.is_empty:
        return dict.fromkeys(epoch.segments, 0)
    cut_segments = list(truncation.span)
    result = {}
    for segment in epoch.segments:
        if segment.segment_id in truncation.stream_cut:
            result[segment] = truncation.stream_cut[segment.segment_id]
        elif not is_truncated(segment, truncation):
            result[segment] = 0
    epoch_ids = epoch.segment_ids
    for cut_segment in cut_segments:
        if cut_segment.segment_id in epoch_ids:
            continue
        if not any(segment.segment_id > cut_segment.segment_id and segment.overlaps(cut_segment)
                   for segment in epoch.segments):
            result[cut_segment] = truncation.stream_cut[cut_segment.segment_id]
    return result

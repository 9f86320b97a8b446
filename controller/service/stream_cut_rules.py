"""Pure rules over stream cuts (spec §5.7, §6.6): is a cut well formed, and is one cut at or after another.

A cut maps segment id -> offset; a negative offset marks a *future* segment (one whose
predecessors in the cut are not finished). One fact carries both rules: two segments whose key
ranges overlap never share an epoch, so the one with the larger id was created later (rolling
transaction duplicates included: same number, later epoch).
"""

from __future__ import annotations

import itertools

from ..store.key_space import uncovered
from ..store.records import SegmentRecord


def _covered(gap: tuple[float, float], segments: list[SegmentRecord]) -> bool:
    """True if the union of ``segments`` covers ``gap``."""
    position = gap[0]
    for segment in sorted(segments, key=lambda segment: segment.key_start):
        if segment.key_start <= position < segment.key_end:
            position = segment.key_end
        if position >= gap[1]:
            return True
    return position >= gap[1]


def cut_error(cut: dict[int, int], segments: dict[int, SegmentRecord]) -> str | None:
    """Why ``cut`` is not a well-formed stream cut, or None if it is one.

    ``segments`` holds the record of every segment named in the cut.
    """
    if not cut:
        return "the stream cut is empty"
    present = sorted((segments[segment_id] for segment_id, offset in cut.items() if offset >= 0),
                     key=lambda segment: segment.key_start)
    future = [segments[segment_id] for segment_id, offset in cut.items() if offset < 0]
    for first, second in itertools.pairwise(present):
        if second.key_start < first.key_end:
            return f"segments {first.segment_id} and {second.segment_id} overlap"
    for index, segment in enumerate(future):
        if any(other.overlaps(segment) for other in future[index + 1:]):
            return f"future segment {segment.segment_id} overlaps another future segment"
        predecessors = [other for other in present if other.overlaps(segment)]
        if any(other.segment_id >= segment.segment_id for other in predecessors):
            return f"future segment {segment.segment_id} overlaps a later segment of the cut"
        if not predecessors:
            return f"future segment {segment.segment_id} has no unfinished predecessor in the cut"
    for gap in uncovered((segment.key_start, segment.key_end) for segment in present):
        if not _covered(gap, future):
            return f"key range [{gap[0]}, {gap[1]}) is not covered by the cut"
    return None


def is_equal_or_after(cut: dict[int, int], segments: dict[int, SegmentRecord],
                      other_cut: dict[int, int], other_segments: dict[int, SegmentRecord]) -> bool:
    """True if ``cut`` is at or after ``other_cut`` over the whole key space.

    Not so if a segment in both has a smaller offset in ``cut``, or a segment of ``cut``
    overlaps a later (larger id) segment of ``other_cut``.
    """
    for segment_id, offset in cut.items():
        segment = segments[segment_id]
        for other_id, other_offset in other_cut.items():
            if other_id == segment_id:
                if offset < other_offset:
                    return False
            elif segment_id < other_id and segment.overlaps(other_segments[other_id]):
                return False
    return True

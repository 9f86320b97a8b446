"""A small scaling history for pure stream-cut tests, and cuts over it by segment letter.

Epoch 0: A [0, .5), B [.5, 1). Epoch 1: A split into C [0, .25), D [.25, .5). Epoch 2: C, D merged into E.
"""

from __future__ import annotations

from controller.store.records import SegmentRecord
from wire.naming import segment_id

A, B = SegmentRecord(0, 0, 0.0, 0.5), SegmentRecord(1, 0, 0.5, 1.0)
C, D = SegmentRecord(segment_id(2, 1), 1, 0.0, 0.25), SegmentRecord(segment_id(3, 1), 1, 0.25, 0.5)
E = SegmentRecord(segment_id(4, 2), 2, 0.0, 0.5)
ALL = {segment.segment_id: segment for segment in (A, B, C, D, E)}
BY_NAME = {"A": A, "B": B, "C": C, "D": D, "E": E}


def cut(**offsets: int) -> dict[int, int]:
    """``cut(A=5, B=0)`` -> {segment id: offset}."""
    return {BY_NAME[name].segment_id: offset for name, offset in offsets.items()}

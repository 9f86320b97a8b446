"""The reader's time window rules (clients/reader/time_window.py): comparing a group's position
with a watermark's cut, and the tracker's window over a sequence of marks (pure, no I/O)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from clients.reader.group_state import GroupState
from clients.reader.time_window import TimeWindow, TimeWindowTracker, compare, group_position
from wire import naming
from wire.watermark import SegmentWithRange, Watermark

LEFT, RIGHT = SegmentWithRange(0, 0.0, 0.5), SegmentWithRange(1, 0.5, 1.0)
RIGHT_LOW, RIGHT_HIGH = SegmentWithRange(1 << 32 | 2, 0.5, 0.75), SegmentWithRange(1 << 32 | 3, 0.75, 1.0)


def mark(lower: int, upper: int, cut) -> Watermark:
    return Watermark(lower, upper, cut)


def test_compare_by_offset_in_the_same_segments():
    cut = mark(1, 2, {LEFT: 10, RIGHT: 20})
    assert compare({LEFT: 10, RIGHT: 20}, cut) == 1  # exactly at the cut: passed
    assert compare({LEFT: 11, RIGHT: 25}, cut) == 1
    assert compare({LEFT: 9, RIGHT: 20}, cut) == -1
    assert compare({LEFT: 9, RIGHT: 21}, cut) == 0  # across it


def test_compare_across_a_scale_uses_segment_order():
    """A successor is after any offset of its predecessor; a predecessor before any of its successors'."""
    cut = mark(1, 2, {LEFT: 10, RIGHT_LOW: 0, RIGHT_HIGH: 0})
    assert compare({LEFT: 10, RIGHT: 10**9}, cut) == -1  # still in the old right half: not passed
    assert compare({LEFT: 10, RIGHT_LOW: 0, RIGHT_HIGH: 5}, cut) == 1
    assert compare({LEFT: 3, RIGHT_LOW: 0, RIGHT_HIGH: 0}, mark(1, 2, {LEFT: 5, RIGHT: 7})) == 0


def test_tracker_window_moves_as_marks_are_passed():
    """Lower: the newest mark passed; upper: the upper bound of the newest mark in flight."""
    marks = [mark(10, 15, {LEFT: 100, RIGHT: 100}), mark(20, 25, {LEFT: 200, RIGHT: 200}),
             mark(30, 35, {LEFT: 300, RIGHT: 300})]
    tracker = TimeWindowTracker()
    assert tracker.advance({LEFT: 0, RIGHT: 0}) is True  # wants marks
    tracker.offer(marks)
    assert tracker.advance({LEFT: 0, RIGHT: 0}) is False
    assert tracker.window == TimeWindow(None, 15)
    tracker.advance({LEFT: 150, RIGHT: 120})
    assert tracker.window == TimeWindow(10, 25)
    assert tracker.advance({LEFT: 400, RIGHT: 400}) is True  # past every mark: wants newer ones
    assert tracker.window == TimeWindow(30, None) and tracker.window.is_near_head_of_stream


def test_group_position_uses_reports_over_recorded_offsets_and_skips_other_streams():
    name = naming.stream_segment_name
    state = GroupState(readers=["r1", "r2"],
                       assigned={"r1": {name("sc", "s", 0): 5}, "r2": {name("sc", "s", 1): 7, name("sc", "t", 0): 1}},
                       unassigned={name("sc", "s", 1 << 32 | 2): 0}, completed={name("sc", "s", 9): 40})
    position = group_position(state, {"r1": {name("sc", "s", 0): 50}}, "sc", "s")
    assert position == {0: 50, 1: 7, 1 << 32 | 2: 0}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), max_size=30),
       st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=30))
def test_lower_bound_never_goes_back_whatever_the_positions(steps, positions):
    """Marks at growing cuts with growing times; positions move back and forth (a re-read after a
    reader went offline): the window's lower bound never decreases."""
    marks, left, right, time = [], 0, 0, 0
    for step_left, step_right in steps:
        left, right, time = left + step_left, right + step_right, time + 1
        marks.append(mark(time, time, {LEFT: left, RIGHT: right}))
    tracker, lowest = TimeWindowTracker(), None
    tracker.offer(marks)
    for position_left, position_right in positions:
        tracker.advance({LEFT: position_left, RIGHT: position_right})
        lower = tracker.window.lower_time_bound
        assert lowest is None or (lower is not None and lower >= lowest)
        lowest = lower

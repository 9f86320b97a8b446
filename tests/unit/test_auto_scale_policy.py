"""The controller's report-driven auto-scaling policy (controller/service/auto_scale.py, pure): DOWN reports
mark segments cold (silent ones until sealed), UP reports split into min(max(2, splits), max(2,
scaleFactor)) equal ranges and clear marks, adjacent marked segments merge at most three at a time and
never below minNumSegments, and one round's decisions make one scale whose new ranges tile exactly the
sealed ones. Time is an argument, so nothing sleeps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.service.auto_scale import Merge, Split, decide, hot_segments, mark, scale_request
from controller.service.auto_scale_settings import AutoScaleSettings
from controller.store.key_space import equal_ranges, initial_epoch
from controller.store.records import SegmentRecord
from controller.store.records.cold import SILENT_EXPIRY
from controller_api.errors import InvalidArgument
from controller_api.model import ScaleType, ScalingPolicy
from wire.load_reports import Direction, LoadReport

TIMINGS = AutoScaleSettings(cold_mark_seconds=10)
NOW = 100_000
EVENTS = ScaleType.BY_RATE_IN_EVENTS_PER_SEC


def policy(target: int = 10, factor: int = 4, minimum: int = 1, scale_type: ScaleType = EVENTS) -> ScalingPolicy:
    return ScalingPolicy(scale_type, target, factor, minimum)


def segments(count: int) -> list[SegmentRecord]:
    return list(initial_epoch(count, 0, 0).segments)


def up(segment_id: int, splits: int, at: int = NOW) -> LoadReport:
    return LoadReport("s", "t", segment_id, Direction.UP, at, splits)


def down(segment_id: int, at: int = NOW, silent: bool = False) -> LoadReport:
    return LoadReport("s", "t", segment_id, Direction.DOWN, at, silent=silent)


def test_down_reports_mark_segments_cold_for_the_cold_mark_period_silent_ones_until_sealed():
    """A DOWN marks until its time + 10 s; a silent DOWN marks forever; a later DOWN extends; UP clears."""
    active = segments(3)
    marks = mark({}, [down(0, NOW - 2000), down(1, silent=True)], active, NOW, TIMINGS)
    assert marks == {0: NOW + 8000, 1: SILENT_EXPIRY}
    assert mark(marks, [down(0, NOW)], active, NOW, TIMINGS)[0] == NOW + 10_000
    assert mark(marks, [down(0, NOW - 5000)], active, NOW, TIMINGS)[0] == NOW + 8000  # an older one does not shorten
    assert mark(marks, [up(1, 2)], active, NOW, TIMINGS) == {0: NOW + 8000}


def test_marks_of_sealed_segments_and_expired_marks_are_dropped():
    active = segments(2)
    assert mark({0: NOW + 1, 1: NOW, 7: SILENT_EXPIRY}, [], active, NOW, TIMINGS) == {0: NOW + 1}


def test_up_report_splits_its_segment_into_capped_equal_ranges():
    """20 pieces asked, scaleFactor 4: 4 equal ranges tiling the segment's own; scaleFactor 1 still 2 (0 is
    refused by the Controller API's model, and a stored 0 reads back as 1); fewer than 2 asked still 2."""
    first, second = segments(2)
    assert decide([first, second], {1: 20}, {}, NOW, policy(factor=4)) == [
        Split(1, tuple(equal_ranges(0.5, 1.0, 4)))]
    assert len(decide([first], {0: 20}, {}, NOW, policy(factor=1))[0].ranges) == 2
    with pytest.raises(InvalidArgument):
        policy(factor=0)
    assert len(decide([first], {0: 1}, {}, NOW, policy(factor=9))[0].ranges) == 2
    assert decide([first], {0: 3}, {}, NOW, policy(factor=9)) == [Split(0, tuple(equal_ranges(0.0, 0.5, 3)))]


def test_hot_segments_take_the_largest_ask():
    assert hot_segments([up(1, 3), down(2), up(1, 7), up(4, 2)]) == {1: 7, 4: 2}


def test_adjacent_cold_segments_merge_at_most_three_at_a_time():
    """Four marked segments: the first three merge (a segment and its two neighbours); the fourth waits."""
    cold = dict.fromkeys(range(4), SILENT_EXPIRY)
    assert decide(segments(4), {}, cold, NOW, policy()) == [Merge((0, 1, 2), (0.0, 0.75))]


def test_merges_need_adjacent_unexpired_marks_and_skip_hot_segments():
    """Cold, warm, cold, cold: only the last two merge; an expired mark does not count; a marked segment
    reported hot in the same round is split, not merged."""
    assert decide(segments(4), {}, {0: NOW + 1, 2: NOW + 1, 3: NOW + 1}, NOW, policy()) == [Merge((2, 3), (0.5, 1.0))]
    assert decide(segments(2), {}, {0: NOW + 1, 1: NOW}, NOW, policy()) == []
    decisions = decide(segments(3), {1: 2}, dict.fromkeys(range(3), NOW + 1), NOW, policy())
    assert decisions == [Split(1, tuple(equal_ranges(segments(3)[1].key_start, segments(3)[1].key_end, 2)))]


def test_merges_never_go_below_min_num_segments():
    """Four cold segments with minNumSegments 3 merge only two; with 4, none; six with 3 merge 3 + 2."""
    four, six = dict.fromkeys(range(4), SILENT_EXPIRY), dict.fromkeys(range(6), SILENT_EXPIRY)
    assert decide(segments(4), {}, four, NOW, policy(minimum=3)) == [Merge((0, 1), (0.0, 0.5))]
    assert decide(segments(4), {}, four, NOW, policy(minimum=4)) == []
    layout = segments(6)
    assert decide(layout, {}, six, NOW, policy(minimum=3)) == [
        Merge((0, 1, 2), (0.0, layout[2].key_end)), Merge((3, 4), (layout[3].key_start, layout[4].key_end))]


def test_fixed_policy_never_scales_and_zero_target_is_refused():
    """A zero target rate is refused by the Controller API's model (a stored one reads back as a fixed policy)."""
    cold = dict.fromkeys(range(3), SILENT_EXPIRY)
    assert decide(segments(3), {0: 5}, cold, NOW, ScalingPolicy(ScaleType.FIXED_NUM_SEGMENTS, 10, 4, 1)) == []
    with pytest.raises(InvalidArgument):
        policy(target=0)


def test_one_scale_request_for_a_round():
    """A split and a merge of one round become one scale whose new ranges tile exactly the sealed ones."""
    decisions = decide(segments(4), {0: 2}, {2: SILENT_EXPIRY, 3: SILENT_EXPIRY}, NOW, policy(factor=2))
    assert decisions == [Split(0, ((0.0, 0.125), (0.125, 0.25))), Merge((2, 3), (0.5, 1.0))]
    assert scale_request(decisions) == ([0, 2, 3], [(0.0, 0.125), (0.125, 0.25), (0.5, 1.0)])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.data())
def test_any_round_seals_disjoint_segments_replaced_exactly(count, data):
    """Whatever is hot or cold: each segment is sealed at most once, the new ranges tile exactly the key
    space of the sealed ones, and the stream keeps at least minNumSegments segments."""
    layout = segments(count)
    ids = [segment.segment_id for segment in layout]
    hot = data.draw(st.dictionaries(st.sampled_from(ids), st.integers(0, 50), max_size=count))
    cold = data.draw(st.dictionaries(st.sampled_from(ids), st.sampled_from([NOW, NOW + 1, SILENT_EXPIRY]),
                                     max_size=count))
    rules = policy(factor=data.draw(st.integers(1, 6)), minimum=data.draw(st.integers(1, count)))
    to_seal, ranges = scale_request(decide(layout, hot, cold, NOW, rules))
    assert len(to_seal) == len(set(to_seal))
    sealed = sorted((segment.key_start, segment.key_end) for segment in layout if segment.segment_id in to_seal)
    assert _union(sealed) == _union(sorted(ranges))
    assert count - len(to_seal) + len(ranges) >= min(count, rules.min_num_segments)


def _union(ranges: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in ranges:
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged

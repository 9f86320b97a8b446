"""The auto-scaler's pure policy (spec §6.10, segment-store design §3.12): window rates from samples,
hot segments split into min(max(2, rate / target), max(2, scaleFactor)) equal ranges, adjacent cold
segments merged (at most three, never below minNumSegments), cooldown and mute, KB/s versus events/s.
Time is an argument, so nothing sleeps."""

from __future__ import annotations

import pytest

from controller.service.auto_scale import (EVENT_COUNT, Merge, SegmentLoad, Split, Sample, decide, rates, scale_request,
                                           window_rate)
from controller.service.auto_scale_settings import AutoScaleSettings
from controller.store.key_space import initial_epoch
from controller.store.records import ScaleType, ScalingPolicy, SegmentRecord

# Windows of 2/5/10/20 s, cooldown 10 s, mute 10 s: the defaults divided by 60.
TIMINGS = AutoScaleSettings(sample_interval_seconds=1, short_window_seconds=2, medium_window_seconds=5,
                            long_window_seconds=10, idle_window_seconds=20, cooldown_seconds=10, mute_seconds=10)
NOW = 100_000
EVENTS = ScaleType.BY_RATE_IN_EVENTS_PER_SEC
KBYTES = ScaleType.BY_RATE_IN_KBYTES_PER_SEC


def policy(target: int = 10, factor: int = 4, minimum: int = 1, scale_type: ScaleType = EVENTS) -> ScalingPolicy:
    return ScalingPolicy(scale_type, target, factor, minimum)


def steady(rate: float, seconds: int = 30, now: int = NOW) -> tuple[Sample, ...]:
    """A sample every second for ``seconds`` up to ``now``, the counter growing by ``rate`` per second."""
    return tuple(Sample(now - 1000 * back, int(rate * (seconds - back))) for back in range(seconds, -1, -1))


def segments(count: int, created: int = 0) -> list[SegmentRecord]:
    return list(initial_epoch(count, 0, created).segments)


def loads(*per_segment_rates: float, created: int = 0, seconds: int = 30) -> list[SegmentLoad]:
    return [SegmentLoad(segment, steady(rate, seconds)) for segment, rate in
            zip(segments(len(per_segment_rates), created), per_segment_rates)]


def test_event_count_is_core_attribute_one_without_importing_the_server():
    """The controller's EVENT_COUNT is the segment store's (core attribute 1)."""
    from server.containers.attributes import EVENT_COUNT as SERVER_EVENT_COUNT

    assert EVENT_COUNT == SERVER_EVENT_COUNT


def test_window_rate_needs_samples_spanning_the_window():
    """A window's rate exists only once a sample is at least that old; it is the increase per second."""
    samples = (Sample(0, 0), Sample(1000, 50), Sample(2000, 100), Sample(3000, 400))
    assert window_rate(samples, 3000, 2000) == 175.0  # (400 - 50) / 2 s, based on the sample at t = 1 s
    assert window_rate(samples, 3000, 3000) == pytest.approx(400 / 3)
    assert window_rate(samples, 3000, 3001) is None
    assert window_rate((), 3000, 1000) is None
    assert window_rate(samples, 3000, 1000, unit=10) == 30.0


def test_hot_segment_splits_into_rate_over_target_ranges():
    """A segment at 3x target (over 2x on the medium window, under 5x on the short one) splits into 3
    equal ranges tiling its own; its neighbour at half the target neither splits nor merges."""
    (split,) = decide(loads(5, 30), NOW, policy(target=10, factor=8), TIMINGS)
    assert split.segment_id == 1 and len(split.ranges) == 3
    assert split.ranges[0][0] == 0.5 and split.ranges[-1][1] == 1.0
    assert all(a[1] == b[0] for a, b in zip(split.ranges, split.ranges[1:]))


def test_split_count_is_capped_by_scale_factor_and_at_least_two():
    """100x target with scaleFactor 4 splits in 4; scaleFactor 0 or 1 still splits in 2."""
    assert len(decide(loads(1000), NOW, policy(factor=4), TIMINGS)[0].ranges) == 4
    assert len(decide(loads(1000), NOW, policy(factor=1), TIMINGS)[0].ranges) == 2
    assert len(decide(loads(1000), NOW, policy(factor=0), TIMINGS)[0].ranges) == 2
    # just over target on the long window: floor(rate / target) = 1, still 2 ranges
    assert len(decide(loads(11), NOW, policy(factor=9), TIMINGS)[0].ranges) == 2


def test_each_threshold_alone_triggers_a_split():
    """Short rate > 5x target, medium > 2x, long > target: each alone is hot; a short burst of 4x is not."""
    target = policy(target=10)
    base = segments(1)[0]

    def burst(rate: float, seconds: int) -> tuple[Sample, ...]:  # idle for 30 s, then ``rate`` for ``seconds``
        return tuple(Sample(NOW - 1000 * back, int(rate * max(0, seconds - back))) for back in range(30, -1, -1))

    assert decide([SegmentLoad(base, burst(60, 2))], NOW, target, TIMINGS)  # 2 s at 60/s: short 60 > 50
    assert not decide([SegmentLoad(base, burst(45, 2))], NOW, target, TIMINGS)  # short 45, medium 18, long 9
    assert decide([SegmentLoad(base, burst(25, 5))], NOW, target, TIMINGS)  # medium 25 > 20
    assert decide([SegmentLoad(base, burst(11, 10))], NOW, target, TIMINGS)  # long 11 > 10


def test_windows_count_only_when_the_segment_is_old_enough():
    """With 3 s of samples at 40/s (> 2x, < 5x target), no window but the short one exists: no split yet."""
    assert not decide(loads(40, seconds=3), NOW, policy(target=10), TIMINGS)
    assert decide(loads(40, seconds=6), NOW, policy(target=10), TIMINGS)


def test_cold_adjacent_segments_merge_at_most_three_at_a_time():
    """Four idle segments: the first three merge (a segment and its two neighbours); the fourth waits."""
    decisions = decide(loads(0, 0, 0, 0), NOW, policy(), TIMINGS)
    assert decisions == [Merge((0, 1, 2), (0.0, 0.75))]


def test_merges_skip_warm_segments_and_need_a_cold_neighbour():
    """Cold, warm, cold, cold: only the last two are adjacent and cold; a lone cold segment stays."""
    assert decide(loads(0, 8, 0, 0), NOW, policy(target=10), TIMINGS) == [Merge((2, 3), (0.5, 1.0))]
    assert decide(loads(0, 8), NOW, policy(target=10), TIMINGS) == []


def test_cold_needs_the_idle_rate_under_half_the_target():
    """Rates of 6/s are under target but over target / 2 on the idle window: no merge; 4/s merges."""
    assert decide(loads(6, 6), NOW, policy(target=10), TIMINGS) == []
    assert decide(loads(4, 4), NOW, policy(target=10), TIMINGS) == [Merge((0, 1), (0.0, 1.0))]
    assert decide(loads(0, 0, seconds=15), NOW, policy(target=10), TIMINGS) == []  # idle window not spanned yet


def test_merges_never_go_below_min_num_segments():
    """Four cold segments with minNumSegments 3 merge only two; with 4, none; six with 3 merge 3 + 2."""
    assert decide(loads(0, 0, 0, 0), NOW, policy(minimum=3), TIMINGS) == [Merge((0, 1), (0.0, 0.5))]
    assert decide(loads(0, 0, 0, 0), NOW, policy(minimum=4), TIMINGS) == []
    six = segments(6)
    assert decide(loads(0, 0, 0, 0, 0, 0), NOW, policy(minimum=3), TIMINGS) == [
        Merge((0, 1, 2), (0.0, six[2].key_end)), Merge((3, 4), (six[3].key_start, six[4].key_end))]


def test_cooldown_after_creation():
    """A hot or cold segment created less than the cooldown ago is left alone."""
    young = NOW - 9_000
    assert decide(loads(1000, created=young), NOW, policy(), TIMINGS) == []
    assert decide(loads(0, 0, created=young), NOW, policy(), TIMINGS) == []
    assert decide(loads(1000, created=NOW - 10_000), NOW, policy(), TIMINGS) != []


def test_mute_between_requests():
    """A segment requested less than the mute ago is left alone, and is no merge partner either."""
    hot = [SegmentLoad(segment, steady(1000), last_request=NOW - 9_000) for segment in segments(1)]
    assert decide(hot, NOW, policy(), TIMINGS) == []
    hot = [SegmentLoad(segment, steady(1000), last_request=NOW - 10_000) for segment in segments(1)]
    assert decide(hot, NOW, policy(), TIMINGS) != []
    first, second = segments(2)
    cold = [SegmentLoad(first, steady(0), last_request=NOW - 1_000), SegmentLoad(second, steady(0))]
    assert decide(cold, NOW, policy(), TIMINGS) == []


def test_kbytes_policy_counts_kibibytes_and_events_policy_counts_events():
    """The same counter growth of 20,480 per second is 20 KiB/s: hot for an events target of 10, not
    for a KB/s target of 10 ... but it is hot for a KB/s target of 3 (20 > 5 x 3)."""
    samples = steady(20 * 1024)
    assert rates(samples, NOW, KBYTES, TIMINGS).short == pytest.approx(20.0)
    assert rates(samples, NOW, EVENTS, TIMINGS).short == pytest.approx(20 * 1024)
    load = [SegmentLoad(segments(1)[0], samples)]
    assert len(decide(load, NOW, policy(target=10, factor=100, scale_type=EVENTS), TIMINGS)[0].ranges) == 100
    assert decide(load, NOW, policy(target=30, scale_type=KBYTES), TIMINGS) == []
    assert len(decide(load, NOW, policy(target=3, factor=100, scale_type=KBYTES), TIMINGS)[0].ranges) == 6


def test_fixed_policy_or_zero_target_never_scales():
    """FIXED_NUM_SEGMENTS and a target rate of 0 mean no auto-scaling, whatever the load."""
    assert decide(loads(1000, 0, 0), NOW, ScalingPolicy(ScaleType.FIXED_NUM_SEGMENTS, 10, 4, 1), TIMINGS) == []
    assert decide(loads(1000, 0, 0), NOW, policy(target=0), TIMINGS) == []


def test_one_scale_request_for_a_round():
    """A split and a merge of one round become one scale whose new ranges tile exactly the sealed ones."""
    decisions = decide(loads(1000, 8, 0, 0), NOW, policy(target=10, factor=2), TIMINGS)
    assert decisions == [Split(0, ((0.0, 0.125), (0.125, 0.25))), Merge((2, 3), (0.5, 1.0))]
    to_seal, ranges = scale_request(decisions)
    assert to_seal == [0, 2, 3]
    assert ranges == [(0.0, 0.125), (0.125, 0.25), (0.5, 1.0)]

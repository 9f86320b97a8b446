"""The segment store's load meter (server/containers/load_meter.py): exponentially weighted rates per
window, hot and cold decisions with Pravega's thresholds, cooldown, mute, the report interval, idle
segments reported once (silently) and started afresh on new traffic, transactions amortised, and a
tick that never walks idle segments. Time is an argument: nothing sleeps."""

from __future__ import annotations

import dataclasses
import itertools
import math
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.containers.load_meter import BY_EVENTS, BY_KBYTES, LoadMeter, LoadSettings
from wire import naming
from wire.load_reports import Direction, LoadReport

# The defaults divided by 60 (tick 1 s instead of 5 s).
SETTINGS = LoadSettings(tick_seconds=1, short_window_seconds=2, medium_window_seconds=5, long_window_seconds=10,
                        idle_window_seconds=20, cooldown_seconds=10, mute_seconds=10, report_interval_seconds=2)
SEGMENT = naming.stream_segment_name("scope", "stream", 0)
TARGET = 100  # events/s


def meter_with(*names: str, target: int = TARGET, scale_type: int = BY_EVENTS,
               settings_: LoadSettings = SETTINGS) -> LoadMeter:
    meter = LoadMeter(settings_)
    for name in names:
        meter.track(name, scale_type, target, 0)
    return meter


def run(meter: LoadMeter, per_second: dict[str, float], start_s: int, end_s: int, byte_size: int = 100
        ) -> list[tuple[int, LoadReport]]:
    """Ticks once a second from ``start_s`` (exclusive) to ``end_s`` (inclusive), each segment getting its rate
    of events in the second before each tick; returns (second, report) pairs."""
    found = []
    for second in range(start_s + 1, end_s + 1):
        for name, rate in per_second.items():
            if rate:
                meter.record(name, int(rate) * byte_size, int(rate))
        found += [(second, report) for report in meter.tick(second * 1000)]
    return found


def test_steady_rate_converges_on_every_window():
    """At a steady 50 events/s every window's rate is 50 (the first fold takes the instant rate)."""
    meter = meter_with(SEGMENT)
    run(meter, {SEGMENT: 50}, 0, 30)
    load = meter.load(SEGMENT)
    assert load is not None
    assert meter.rates(load) == type(meter.rates(load))(50, 50, 50, 50)


def test_silent_time_decays_the_rates_in_closed_form():
    """100 events/s for 3 s, 4 s of silence, 100 events/s for 1 s: each window's rate is the exponentially
    weighted mean of that traffic over the 8 s measured (the silence counting as 0)."""
    meter = meter_with(SEGMENT)
    run(meter, {SEGMENT: 100}, 0, 3)
    run(meter, {SEGMENT: 0}, 3, 7)
    run(meter, {SEGMENT: 100}, 7, 8)
    load = meter.load(SEGMENT)
    assert load is not None

    def weight(start_s: float, end_s: float, window_s: float) -> float:  # of [start, end] in a mean at 8 s
        return math.exp(-(8 - end_s) / window_s) - math.exp(-(8 - start_s) / window_s)

    expected = [100 * (weight(0, 3, window) + weight(7, 8, window)) / weight(0, 8, window)
                for window in SETTINGS.windows_seconds]
    assert list(dataclasses.astuple(meter.rates(load))) == pytest.approx(expected)


def test_hot_segment_reports_up_after_cooldown_with_rate_over_target_splits():
    """2,000 events/s against a target of 100: nothing during the 10 s cooldown, then one UP asking for
    20 pieces; it is muted for 10 s after that (no second UP), and then reported again."""
    meter = meter_with(SEGMENT)
    found = run(meter, {SEGMENT: 2000}, 0, 30)
    ups = [(second, report) for second, report in found if report.direction == Direction.UP]
    assert [second for second, _ in ups] == [12, 24]  # judged every 2 s: after 10 s of cooldown, after the mute
    second, report = ups[0]
    assert report == LoadReport("scope", "stream", 0, Direction.UP, 12_000, splits=20)
    assert all(report.direction == Direction.UP for _, report in found)


@pytest.mark.parametrize(("rate", "first_up"), [
    (501, 4),  # > 5x target on the short window, which counts at an age over 2 s (judged every 2 s: at 4)
    (450, 6),  # 4.5x: under 5x, but over 2x on the medium window, which counts at an age over 5 s
    (201, 6),
    (101, 12),  # just over the target: only the long window (age over 10 s)
    (99, None),
])
def test_each_window_alone_calls_a_segment_hot(rate, first_up):
    """Each threshold alone (short 5x, medium 2x, long 1x) makes a steady segment hot once its window counts."""
    settings_ = LoadSettings(tick_seconds=1, short_window_seconds=2, medium_window_seconds=5,
                             long_window_seconds=10, idle_window_seconds=20, cooldown_seconds=1,
                             mute_seconds=1, report_interval_seconds=2)
    meter = meter_with(SEGMENT, settings_=settings_)
    ups = [second for second, report in run(meter, {SEGMENT: rate}, 0, 14) if report.direction == Direction.UP]
    assert ups[:1] == ([first_up] if first_up else [])


def test_cold_segment_with_low_traffic_reports_down_after_the_idle_window():
    """10 events/s against 100: cold (all rates < target, idle rate < 50) only once older than the idle
    window (20 s); muted 10 s between DOWN reports; never silent while it has traffic."""
    meter = meter_with(SEGMENT)
    found = run(meter, {SEGMENT: 10}, 0, 40)
    downs = [second for second, report in found if report.direction == Direction.DOWN]
    assert downs == [22, 34]
    assert not any(report.silent for _, report in found)


def test_idle_segment_is_reported_once_silently_and_restarts_on_traffic():
    """No traffic for the idle window: one silent DOWN; nothing more while idle. Traffic afterwards starts
    the segment afresh (cooldown again), so a hot load is reported only 10 s after it came back."""
    meter = meter_with(SEGMENT)
    found = run(meter, {}, 0, 60)
    assert found == [(20, LoadReport("scope", "stream", 0, Direction.DOWN, 20_000, silent=True))]
    back = run(meter, {SEGMENT: 2000}, 60, 80)
    # restarted at 61, judged every 2 s from there, past the cooldown (age > 10 s) at 73
    assert [second for second, report in back if report.direction == Direction.UP] == [73]


def test_segment_gone_idle_after_traffic_is_reported_silently_idle_window_after_its_last_traffic():
    meter = meter_with(SEGMENT)
    run(meter, {SEGMENT: 50}, 0, 5)
    found = run(meter, {}, 5, 40)
    assert [(second, report.silent) for second, report in found] == [(25, True)]


def test_kbytes_policy_counts_kibibytes():
    """A KB/s policy counts bytes in KiB: 100 events/s of 1 KiB is 100 KiB/s, 10x a target of 10 KiB/s (10
    pieces); 30 events/s of 1 KiB against a target of 30 KiB/s is not hot (an events/s count would be)."""
    meter = meter_with(SEGMENT, target=10, scale_type=BY_KBYTES)
    found = run(meter, {SEGMENT: 100}, 0, 12, byte_size=1024)
    assert [(second, report.splits) for second, report in found] == [(12, 10)]
    meter = meter_with(SEGMENT, target=30, scale_type=BY_KBYTES)
    assert run(meter, {SEGMENT: 30}, 0, 12, byte_size=1024) == []


def test_fixed_policy_zero_target_and_other_names_are_not_tracked():
    """Only plain stream segments with a rate policy and a positive target are tracked."""
    meter = LoadMeter(SETTINGS)
    meter.track(SEGMENT, 0, 100, 0)
    meter.track(naming.stream_segment_name("s", "t", 1), BY_EVENTS, 0, 0)
    meter.track(naming.transaction_segment_name(SEGMENT, uuid.uuid4()), BY_EVENTS, 10, 0)
    meter.track(naming.load_report_segment_name(0), BY_EVENTS, 10, 0)
    meter.track(naming.table_segment_name("s", "kvt"), BY_EVENTS, 10, 0)
    meter.track("not a segment name", BY_EVENTS, 10, 0)
    assert len(meter) == 0


def test_policy_updates_and_forgetting():
    """A new target keeps the rates; a new type starts afresh; a fixed policy or forget stops tracking."""
    meter = meter_with(SEGMENT)
    run(meter, {SEGMENT: 50}, 0, 5)
    meter.track(SEGMENT, BY_EVENTS, 10, 5000)
    load = meter.load(SEGMENT)
    assert load is not None and load.target_rate == 10 and meter.rates(load).short == pytest.approx(50)
    meter.track(SEGMENT, BY_KBYTES, 10, 5000)
    renewed = meter.load(SEGMENT)
    assert renewed is not None and renewed is not load and renewed.rates == [0.0] * 4
    meter.record(SEGMENT, 100, 1)
    meter.forget(SEGMENT)
    assert meter.tick(6000) == [] and len(meter) == 0  # a forgotten segment in the touched list is skipped
    meter.track(SEGMENT, BY_EVENTS, 10, 7000)
    meter.track(SEGMENT, 0, 10, 7000)
    assert len(meter) == 0


def test_transactions_are_amortised_over_their_life():
    """A 10 s old transaction of 1,000 events counts as one tick (1 s) of its average rate: 100 events."""
    meter = meter_with(SEGMENT)
    meter.merged(SEGMENT, 100_000, 1000, 10_000)
    meter.tick(1000)
    load = meter.load(SEGMENT)
    assert load is not None and meter.rates(load).short == pytest.approx(100)
    meter.merged(SEGMENT, 1000, 10, 500)  # younger than a tick: counted whole
    meter.tick(2000)
    kept = math.exp(-1 / 2)  # the first second's weight relative to the second's, on the 2 s window
    assert meter.rates(load).short == pytest.approx((100 * kept + 10) / (kept + 1))


def test_untracked_appends_cost_nothing_and_ticks_skip_idle_segments():
    """10,000 idle tracked segments: a tick before the idle window looks at none of them (nothing touched,
    the oldest not idle yet), and the idle reports come at most ``reports_per_tick_max`` per tick."""
    settings_ = LoadSettings(tick_seconds=1, idle_window_seconds=20, reports_per_tick_max=4000)
    names = [naming.stream_segment_name("scope", "idle", number) for number in range(10_000)]
    meter = meter_with(*names, settings_=settings_)
    meter.record("scope/other/0.#epoch.0", 100, 1)
    assert meter.tick(19_000) == []
    counts = [len(meter.tick(second * 1000)) for second in (20, 21, 22, 23)]
    assert counts == [4000, 4000, 2000, 0]


def test_settings_are_checked():
    with pytest.raises(ValueError):
        LoadSettings(tick_seconds=0)
    with pytest.raises(ValueError):
        LoadSettings(mute_seconds=-1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=60))
def test_reports_follow_the_rules_for_any_traffic(rates):
    """Any per-second traffic: every UP names >= 2 pieces and comes after the cooldown, UP reports are at
    least a mute apart, and no report of either kind comes within the cooldown; silent reports only
    after the idle window without traffic."""
    meter = meter_with(SEGMENT)
    found = []
    for second, rate in enumerate(rates, start=1):
        if rate:
            meter.record(SEGMENT, rate * 100, rate)
        found += [(second, rate, report) for report in meter.tick(second * 1000)]
    ups = [second for second, _, report in found if report.direction == Direction.UP]
    assert all(report.splits >= 2 for _, _, report in found if report.direction == Direction.UP)
    assert all(later - earlier > SETTINGS.mute_seconds for earlier, later in itertools.pairwise(ups))
    assert all(second > SETTINGS.cooldown_seconds for second, _, report in found if not report.silent)
    for second, _, report in found:
        if report.silent:
            assert all(rate == 0 for rate in rates[max(0, second - 20):second])


def test_a_late_tick_spreads_the_count_over_the_time_that_passed():
    """On a busy host a tick can run late; the count of a steady 50 events/s is then that of the longer interval
    (not a silent tick plus a short one, which read 133 events/s and split a segment under its target)."""
    meter = meter_with(SEGMENT)
    run(meter, {SEGMENT: 50}, 0, 10)
    meter.record(SEGMENT, 80 * 100, 80)  # 1.6 s of traffic at 50/s
    meter.tick(11_600)
    load = meter.load(SEGMENT)
    assert load is not None
    assert meter.rates(load).short == pytest.approx(50)


def test_a_tick_just_after_a_late_one_weighs_what_its_span_is_worth():
    """A tick that runs late is followed at once by the one it was late for (the reporter keeps its cadence):
    that tick's span is a millisecond. A block of 3 events arriving in it is a rate of 3,000 events/s over
    that millisecond, but it weighs a millisecond: a steady 30 events/s against a target of 40 stays under
    the target on every window (it was read as hot and split on a loaded CI host)."""
    settings_ = LoadSettings(tick_seconds=0.1, short_window_seconds=0.5, medium_window_seconds=1.0,
                             long_window_seconds=1.5, idle_window_seconds=2.0, cooldown_seconds=0.5,
                             mute_seconds=1.0, report_interval_seconds=0.2)
    meter = meter_with(SEGMENT, target=40, settings_=settings_)
    reports = []
    for tick in range(1, 31):  # 3 events each 100 ms
        meter.record(SEGMENT, 300, 3)
        reports += meter.tick(tick * 100)
    meter.record(SEGMENT, 600, 6)  # the tick at 3.1 s ran at 3.29 s
    reports += meter.tick(3290)
    meter.record(SEGMENT, 300, 3)  # and the one for 3.2 s a millisecond later
    reports += meter.tick(3291)
    for tick in range(33, 60):
        meter.record(SEGMENT, 300, 3)
        reports += meter.tick(tick * 100)
    load = meter.load(SEGMENT)
    assert load is not None
    assert max(dataclasses.astuple(meter.rates(load))) < 40
    assert reports == []


def test_a_young_segment_s_rate_is_the_mean_of_all_its_traffic_not_its_first_fold():
    """A segment tracked a millisecond before a tick whose first fold holds a block of 3 events: that fold
    alone reads 3,000 events/s. The rates weigh it by its millisecond, so by the time the long window counts
    (1.5 s) they read the steady 30 events/s of what followed, and the segment is not called hot."""
    settings_ = LoadSettings(tick_seconds=0.1, short_window_seconds=0.5, medium_window_seconds=1.0,
                             long_window_seconds=1.5, idle_window_seconds=2.0, cooldown_seconds=0.5,
                             mute_seconds=1.0, report_interval_seconds=0.2)
    meter = LoadMeter(settings_)
    meter.track(SEGMENT, BY_EVENTS, 40, 99)
    reports = []
    for tick in range(1, 25):
        meter.record(SEGMENT, 300, 3)
        reports += meter.tick(tick * 100)
    load = meter.load(SEGMENT)
    assert load is not None
    assert meter.rates(load).long == pytest.approx(30, rel=0.05)
    assert reports == []

"""The pure watermarking rules (controller/service/watermark_rules.py): which writers count, when a
round emits, the time bounds, and the stream cut (upper bound of positions, completed over the key
space). Time is passed in; no process runs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.service import watermark_rules as rules
from controller.store.records import WriterMarkRecord
from wire.watermark import SegmentWithRange


def mark(time: int, alive: bool = True, position=None) -> WriterMarkRecord:
    return WriterMarkRecord(time, position or {}, is_alive=alive)


def test_first_round_emits_min_and_max_of_all_writers():
    """Before any watermark every writer participates: lower = slowest, upper = fastest."""
    since: dict[str, int] = {}
    decision = rules.decide({"a": mark(30), "b": mark(10), "c": mark(20)}, None, since, now=0, timeout_ms=1000)
    assert decision.bounds == (10, 30)
    assert set(decision.active) == {"a", "b", "c"} and decision.inactive == ()


def test_a_lagging_live_writer_holds_the_round_until_it_times_out():
    """A writer at or below the previous lower bound stops emission while its clock runs; once the
    timeout passes it is inactive (to be removed) and the others emit without it."""
    marks = {"fast": mark(50), "slow": mark(10)}
    since: dict[str, int] = {}
    held = rules.decide(marks, 10, since, now=1_000, timeout_ms=500)
    assert held.bounds is None and set(held.active) == {"fast", "slow"} and since == {"slow": 1_000}
    still = rules.decide(marks, 10, since, now=1_499, timeout_ms=500)
    assert still.bounds is None and since == {"slow": 1_000}  # the clock started when first seen behind
    timed_out = rules.decide(marks, 10, since, now=1_500, timeout_ms=500)
    assert timed_out.inactive == ("slow",) and timed_out.bounds == (50, 50) and since == {}


def test_a_stream_timeout_of_zero_means_six_watermark_periods():
    """Issue 24: the default timestampAggregationTimeout (0) is not "drop at once" (Pravega's reading)
    but six watermark periods; a timeout the stream sets is used as it is."""
    assert rules.DEFAULT_TIMEOUT_PERIODS == 6
    assert rules.writer_timeout_ms(0, 10.0) == 60_000
    assert rules.writer_timeout_ms(0, 0.2) == 1_200
    assert rules.writer_timeout_ms(1, 10.0) == 1
    assert rules.writer_timeout_ms(5_000, 10.0) == 5_000


def test_with_the_default_timeout_a_writer_noting_every_one_and_a_half_periods_always_holds_the_watermarks():
    """Rounds every 10 s at times 10, 20, ...; a slow writer notes its time every 15 s, a fast one
    every second. No emitted lower bound passes the slow writer's last time, the slow writer is never
    dropped, and the watermarks still advance with it. Once it stops noting, it is dropped at the
    first round 60 s after the round that first found it behind, not earlier."""
    timeout = rules.writer_timeout_ms(0, 10.0)
    marks = {"slow": mark(0), "fast": mark(0)}
    since: dict[str, int] = {}
    previous, lowers = None, []
    for now in range(1_000, 300_001, 1_000):  # one step per second
        marks["fast"] = mark(now)
        if now % 15_000 == 0:
            marks["slow"] = mark(now)
        if now % 10_000 == 0:
            decision = rules.decide(marks, previous, since, now, timeout)
            assert decision.inactive == ()
            if decision.bounds is not None:
                assert decision.bounds[0] <= marks["slow"].timestamp
                previous = decision.bounds[0]
                lowers.append(previous)
    assert len(lowers) >= 15 and lowers[-1] >= 285_000
    # The slow writer's last time is 300_000; it stops noting and stays open.
    first_behind = None
    for now in range(301_000, 500_001, 1_000):
        marks["fast"] = mark(now)
        if now % 10_000 == 0:
            decision = rules.decide(marks, previous, since, now, timeout)
            if "slow" in since and first_behind is None:
                first_behind = since["slow"]
            if decision.inactive:
                assert decision.inactive == ("slow",) and first_behind is not None
                assert now == first_behind + timeout
                assert decision.bounds is not None and decision.bounds[0] > 300_000
                break
            assert decision.bounds is None or decision.bounds[0] <= 300_000
            if decision.bounds is not None:
                previous = decision.bounds[0]
    else:
        raise AssertionError("the silent writer was never dropped")


def test_a_writer_that_reports_again_resets_its_clock():
    since = {"w": 100}
    decision = rules.decide({"w": mark(20)}, 10, since, now=10_000, timeout_ms=500)
    assert decision.bounds == (20, 20) and since == {}


def test_a_shut_down_writer_counts_while_it_participates_then_is_dropped():
    """removeWriter does not drop a writer whose last time is still ahead of the watermark (its events
    count once more); once behind, a shut-down writer is inactive at once, whatever the timeout."""
    marks = {"open": mark(40), "closed": mark(20, alive=False)}
    first = rules.decide(marks, 10, {}, now=0, timeout_ms=60_000)
    assert first.bounds == (20, 40) and first.inactive == ()
    second = rules.decide(marks, 20, {}, now=1, timeout_ms=60_000)
    assert second.inactive == ("closed",) and second.bounds == (40, 40)


def test_watermarks_never_go_back_or_repeat():
    """An emission needs lower > previous lower: equal times emit nothing."""
    assert rules.decide({"a": mark(30), "b": mark(30)}, 29, {}, 0, 0).bounds == (30, 30)
    assert rules.decide({"a": mark(30)}, 30, {"a": 0}, 0, 10).bounds is None


def test_no_writers_no_watermark_and_stale_clocks_are_forgotten():
    since = {"gone": 5}
    assert rules.decide({}, 10, since, 100, 10).bounds is None
    assert since == {}


def seg(segment_id: int, low: float, high: float) -> SegmentWithRange:
    return SegmentWithRange(segment_id, low, high)


EPOCH0 = [seg(0, 0.0, 0.5), seg(1, 0.5, 1.0)]
EPOCH1 = [seg(0, 0.0, 0.5), seg(1 << 32 | 2, 0.5, 0.75), seg(1 << 32 | 3, 0.75, 1.0)]  # segment 1 split


def test_upper_bound_takes_the_highest_offset_per_segment_and_drops_predecessors():
    """Per segment the higher offset; a successor replaces its predecessor, in either order."""
    cut = rules.upper_bound([{EPOCH0[0]: 10, EPOCH0[1]: 5}, {EPOCH0[0]: 7, EPOCH1[1]: 3}], {})
    assert cut == {EPOCH0[0]: 10, EPOCH1[1]: 3}
    assert rules.upper_bound([{EPOCH1[1]: 3}, {EPOCH0[1]: 99}], {}) == {EPOCH1[1]: 3}


def test_upper_bound_is_raised_over_the_previous_cut():
    assert rules.upper_bound([{EPOCH0[0]: 4}], {EPOCH0[0]: 9, EPOCH0[1]: 2}) == {EPOCH0[0]: 9, EPOCH0[1]: 2}


def test_cut_completion_fills_missing_ranges_from_the_highest_epoch():
    """Writers touched only [0, 0.5) and the new [0.5, 0.75): the rest comes from epoch 1 at 0."""
    cut = {EPOCH0[0]: 10, EPOCH1[1]: 3}
    assert rules.highest_epoch(cut) == 1
    rules.complete_cut(cut, EPOCH1)
    assert cut == {EPOCH0[0]: 10, EPOCH1[1]: 3, EPOCH1[2]: 0}
    assert rules.missing_ranges(cut) == []


def test_cut_completion_of_an_empty_cut_takes_the_whole_epoch():
    cut: dict[SegmentWithRange, int] = {}
    assert rules.highest_epoch(cut) is None
    rules.complete_cut(cut, EPOCH0)
    assert cut == {EPOCH0[0]: 0, EPOCH0[1]: 0}


def test_missing_ranges():
    assert rules.missing_ranges([seg(0, 0.25, 0.5), seg(1, 0.75, 1.0)]) == [(0.0, 0.25), (0.5, 0.75)]


# --------------------------------------------------------------------------- a property over many rounds


actions = st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(["note", "close", "wait"]),
                             st.integers(0, 50)), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(actions, st.integers(0, 200))
def test_emitted_lower_bounds_only_grow_and_never_pass_an_active_writer(steps, timeout_ms):
    """Writers note growing times, close, or time passes; a round runs after every step, removing
    what it calls inactive. Every emitted lower bound is above the previous one and at or below the
    time of every writer the round counted active."""
    store: dict[str, WriterMarkRecord] = {}
    clocks = {"a": 0, "b": 0, "c": 0}
    since: dict[str, int] = {}
    previous, now = None, 0
    for writer, action, amount in steps:
        now += amount
        if action == "note":
            clocks[writer] += amount
            store[writer] = mark(clocks[writer])
        elif action == "close" and writer in store:
            store[writer] = mark(store[writer].timestamp, alive=False)
        decision = rules.decide(dict(store), previous, since, now, timeout_ms)
        for gone in decision.inactive:
            del store[gone]
        if decision.bounds is not None:
            lower, upper = decision.bounds
            assert previous is None or lower > previous
            assert lower <= upper
            assert all(lower <= store[active].timestamp for active in decision.active)
            previous = lower

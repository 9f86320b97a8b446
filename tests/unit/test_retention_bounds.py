"""Where retention truncates (controller/service/retention_bounds.py): cut comparison, the subscribers'
lower bound, and the min/max bounds of SIZE and TIME policies, as pure functions."""

from __future__ import annotations

import functools

from hypothesis import assume, given
from hypothesis import strategies as st

from controller.service.retention_bounds import (
    Comparison,
    RecordedCut,
    bound_cuts,
    compare_cuts,
    subscribers_lower_bound,
    truncation_cut,
)
from controller.service.stream_cut_rules import cut_error
from controller.store.records import SegmentRecord
from controller_api.model import RetentionPolicy, RetentionType
from tests.support.stream_history import ALL, B, cut

compare = functools.partial(compare_cuts, segments=ALL)


# ---------------------------------------------------------------------- comparison

def test_cuts_compare_by_offset_then_by_later_segments():
    assert compare(cut(A=5, B=5), cut(A=5, B=5)) == Comparison.EQUAL_OR_AFTER
    assert compare(cut(A=6, B=5), cut(A=5, B=5)) == Comparison.EQUAL_OR_AFTER
    assert compare(cut(A=4, B=5), cut(A=5, B=5)) == Comparison.BEFORE
    assert compare(cut(C=0, D=0, B=5), cut(A=99, B=5)) == Comparison.EQUAL_OR_AFTER  # C, D come after A
    assert compare(cut(A=99, B=5), cut(C=0, D=0, B=5)) == Comparison.BEFORE
    assert compare(cut(C=0, D=0, B=1), cut(A=99, B=5)) == Comparison.OVERLAPS  # ahead on [0,.5), behind on B


# ---------------------------------------------------------------------- subscribers' lower bound

def test_lower_bound_takes_the_smaller_offset_of_a_shared_segment():
    assert subscribers_lower_bound([cut(A=10, B=20), cut(A=5, B=30)], ALL) == cut(A=5, B=20)


def test_an_earlier_segment_replaces_its_successors():
    """One group read past the split (C, D), the other is still in A: the bound keeps A only."""
    assert subscribers_lower_bound([cut(C=3, D=4, B=9), cut(A=7, B=10)], ALL) == cut(A=7, B=9)
    assert subscribers_lower_bound([cut(A=7, B=10), cut(C=3, D=4, B=9)], ALL) == cut(A=7, B=9)


def test_future_segment_stays_while_its_range_is_not_covered():
    """C finished-waiting on E (future) with D done: E (-1) stays beside C; A in another cut drops both."""
    assert subscribers_lower_bound([cut(C=4, E=-1, B=0)], ALL) == cut(C=4, E=-1, B=0)
    assert subscribers_lower_bound([cut(C=4, E=-1, B=0), cut(A=2, B=1)], ALL) == cut(A=2, B=0)


def test_empty_cuts_hold_nothing_back():
    assert subscribers_lower_bound([{}, cut(A=1, B=2)], ALL) == cut(A=1, B=2)
    assert subscribers_lower_bound([{}], ALL) == {}


LEFT_HALF = st.one_of(
    st.builds(lambda a: cut(A=a), st.integers(0, 50)),
    st.builds(lambda c, d: cut(C=c, D=d), st.integers(0, 50), st.integers(0, 50)),
    st.builds(lambda e: cut(E=e), st.integers(0, 50)),
    st.builds(lambda c: cut(C=c, E=-1), st.integers(0, 50)),
    st.builds(lambda d: cut(D=d, E=-1), st.integers(0, 50)),
)
VALID_CUTS = st.builds(lambda left, b: {**left, B.segment_id: b}, LEFT_HALF, st.integers(0, 50))


@given(st.lists(VALID_CUTS, min_size=1, max_size=5))
def test_lower_bound_is_a_valid_cut_at_or_before_every_subscriber(cuts):
    bound = subscribers_lower_bound(cuts, ALL)
    assert cut_error(bound, ALL) is None
    for subscriber in cuts:
        assert compare(subscriber, bound) == Comparison.EQUAL_OR_AFTER
    for segment, offset in bound.items():  # every position of the bound is some subscriber's
        assert any(subscriber.get(segment) == offset for subscriber in cuts)


# ---------------------------------------------------------------------- SIZE: min 100, max 300 bytes

SIZE = RetentionPolicy(RetentionType.SIZE, 100, 300)
# One segment: the cut {0: size} was recorded at time = size / 100; the newest has 900 bytes before it.
SIZE_RECORDS = [RecordedCut(size // 100, size, {0: size}) for size in range(0, 1000, 100)]
ONE = {0: SegmentRecord(0, 0, 0.0, 1.0)}
compare_one = functools.partial(compare_cuts, segments=ONE)


def size_choice(bound: int | None) -> dict[int, int] | None:
    lower = {} if bound is None else {0: bound}
    return truncation_cut(SIZE, 0, SIZE_RECORDS, lower, bound or 0, compare_one)


def test_size_without_subscribers_truncates_at_the_min_cut():
    assert size_choice(None) == {0: 800}  # keeps 100, the newest that keeps the minimum


def test_size_caught_up_subscribers_do_not_break_the_minimum():
    assert size_choice(850) == {0: 800}


def test_size_truncates_at_the_slowest_subscriber_within_the_bounds():
    assert size_choice(700) == {0: 700}
    assert size_choice(800) == {0: 800}
    assert size_choice(601) == {0: 601}


def test_size_lagging_subscriber_is_cut_off_at_the_max_bound():
    assert size_choice(500) == {0: 600}  # keeps 300 = max rather than 400
    assert size_choice(0) == {0: 600}


def test_bound_cuts_max_is_the_oldest_within_the_maximum():
    maximum, minimum = bound_cuts(SIZE, 0, SIZE_RECORDS)
    assert (maximum.size, minimum.size) == (600, 800)
    unbounded = RetentionPolicy(RetentionType.SIZE, 100)
    maximum, minimum = bound_cuts(unbounded, 0, SIZE_RECORDS)
    assert (maximum.size, minimum.size) == (0, 800)


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=12, unique=True), st.integers(0, 10_000),
       st.integers(0, 3_000), st.integers(0, 6_000))
def test_size_choice_honours_min_max_and_subscribers(sizes, bound, minimum, extra):
    """Over one segment: the chosen cut keeps >= min; never passes the subscribers unless they would keep
    >= max; and then keeps <= max when some recorded cut lies within the bounds."""
    sizes.sort()
    records = [RecordedCut(index, size, {0: size}) for index, size in enumerate(sizes)]
    policy = RetentionPolicy(RetentionType.SIZE, minimum, minimum + extra)
    newest = sizes[-1]
    assume(bound <= newest)
    chosen = truncation_cut(policy, 0, records, {0: bound}, bound, compare_one)
    if chosen is None:
        return
    kept = newest - chosen[0]
    assert kept >= policy.minimum
    if newest - bound < policy.upper_bound:
        assert chosen[0] <= bound
    elif any(policy.minimum <= newest - size <= policy.upper_bound for size in sizes):
        assert kept <= policy.upper_bound


# ---------------------------------------------------------------------- TIME: min 1 s, max 3 s

TIME = RetentionPolicy(RetentionType.TIME, 1000, 3000)
# One segment, 1 byte a millisecond: the cut recorded at t is {0: t}; now = 10 s.
TIME_RECORDS = [RecordedCut(time, time, {0: time}) for time in range(0, 10_000, 1000)]


def time_choice(bound: int | None, policy: RetentionPolicy = TIME) -> dict[int, int] | None:
    lower = {} if bound is None else {0: bound}
    return truncation_cut(policy, 10_000, TIME_RECORDS, lower, bound or 0, compare_one)


def test_time_without_subscribers_truncates_at_the_min_cut():
    assert time_choice(None) == {0: 9000}


def test_time_subscribers_past_the_min_cut_do_not_break_the_minimum():
    assert time_choice(9500) == {0: 9000}


def test_time_truncates_at_the_slowest_subscriber_within_the_bounds():
    assert time_choice(8000) == {0: 8000}
    assert time_choice(7000) == {0: 7000}


def test_time_lagging_subscriber_is_cut_off_at_the_max_bound():
    assert time_choice(5000) == {0: 7000}  # the oldest cut no older than 3 s


def test_time_without_a_maximum_waits_for_the_subscriber():
    assert time_choice(5000, RetentionPolicy(RetentionType.TIME, 1000)) == {0: 5000}


def test_time_overlapping_subscriber_truncates_before_it():
    """Two segments: the subscriber is ahead of the min cut on B but behind it on A."""
    records = [RecordedCut(time, 0, cut(A=time, B=time)) for time in range(0, 10_000, 1000)]
    chosen = truncation_cut(TIME, 10_000, records, cut(A=4500, B=9900), 0, compare)
    assert chosen == cut(A=4000, B=4000)  # the newest recorded cut the subscriber is at or after

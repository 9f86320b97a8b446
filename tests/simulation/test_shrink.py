"""Shrinking a failing schedule (shrink.py): the result still fails, and is 1-minimal; failure kinds."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from tests.simulation.shrink import failure_kind, shrink


@given(st.integers(2, 24).flatmap(lambda size: st.tuples(st.just(size), st.sets(st.integers(0, size - 1),
                                                                                max_size=4))))
def test_a_shrunk_schedule_still_fails_and_no_fault_of_it_can_go(case):
    """A bug that needs every fault of a hidden set: shrinking finds exactly that set, in few runs."""
    size, needed = case
    runs = 0

    def fails(subset):
        nonlocal runs
        runs += 1
        return needed <= set(subset)

    smallest = shrink(range(size), fails)
    assert set(smallest) == needed
    assert runs <= 4 * size + 2


def test_a_bug_that_needs_one_of_two_faults_is_shrunk_to_one():
    smallest = shrink(range(8), lambda subset: 2 in subset or 5 in subset)
    assert smallest in ([2], [5])


def test_an_order_dependent_failure_keeps_a_failing_subset():
    """Whatever the predicate, the result fails and is 1-minimal (no single fault can be left out)."""
    def fails(subset):
        return sum(subset) % 3 == 1 and len(subset) >= 2

    for size in range(2, 10):
        if not fails(list(range(size))):
            continue
        smallest = shrink(range(size), fails)
        assert fails(smallest)
        assert not any(fails(list(rest)) for rest in itertools.combinations(smallest, len(smallest) - 1))


def test_failure_kinds_leave_the_particulars_out():
    assert failure_kind("invariant broken: 7 events read more than once, e.g. [('t0', 54)]; key t0: 54 read "
                        "after 58") == "invariant broken: events read more than once"
    assert failure_kind("invariant broken: 12 acknowledged events never read, e.g. [('w0k0', 810)]") == \
        "invariant broken: acknowledged events never read"
    assert failure_kind("Quiescent: nothing is ready and no timer is scheduled") == "Quiescent"

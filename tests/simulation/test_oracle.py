"""The workload's oracle (tests/simulation/workload.py ``check``) on hand-made histories: what it accepts and what
it reports, so that a run's verdict means what the invariants say."""

from __future__ import annotations

import pytest

from tests.simulation.workload import Oracle, Violation, check


def transactions_read_in_reverse(*, first_returned: bool) -> Oracle:
    """Two transactions of key t0 (sequences 0 and 1), both commits asked for, the second committed; read in the
    reverse order (the first's commit took effect after the second's)."""
    oracle = Oracle(issued={"t0": 2}, transactions=[[("t0", 0)], [("t0", 1)]], commit_asked={0, 1}, committed={1})
    if first_returned:
        oracle.committed.add(0)
    oracle.read = [("t0", 1), ("t0", 0)]
    oracle.read_where = [("s/t/1.#epoch.1", 0, 0), ("s/t/1.#epoch.2", 0, 0)]
    return oracle


def test_a_transaction_whose_commit_never_returned_may_land_after_later_ones():
    """Pravega orders transactions by commit: a commit the writer gave up waiting for may take effect after the
    writer's later transactions' (found by the simulation, cluster seed 59, as a false failure)."""
    check(transactions_read_in_reverse(first_returned=False))


def test_transactions_whose_commits_returned_keep_their_keys_order():
    with pytest.raises(Violation, match="key t0: 0 read after 1"):
        check(transactions_read_in_reverse(first_returned=True))


def test_plain_events_out_of_order_and_lost_ones_are_reported():
    oracle = Oracle(issued={"k": 3}, acknowledged={("k", 0), ("k", 1), ("k", 2)})
    oracle.read = [("k", 1), ("k", 0)]
    oracle.read_where = [("s/t/0.#epoch.0", 10, 0), ("s/t/0.#epoch.0", 20, 0)]
    with pytest.raises(Violation, match=r"1 acknowledged events never read.*key k: 0 read after 1"):
        check(oracle)

"""The leader's balancing rule: every container gets a live owner, a store's death moves only its containers,
a join moves only what evens the counts, stores within their grace keep theirs, and the result is stable."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from controller.cluster.balancer import balance

STORES = [f"127.0.0.1:{port}" for port in range(12340, 12346)]


def counts(owners: dict[int, str]) -> Counter:
    return Counter(owners.values())


def test_a_first_assignment_spreads_containers_evenly():
    owners = balance(8, {}, STORES[:3])
    assert sorted(owners) == list(range(8))
    assert sorted(counts(owners).values()) == [2, 3, 3]


def test_a_dead_store_loses_only_its_containers():
    before = balance(8, {}, STORES[:2])
    dead = STORES[0]
    after = balance(8, before, [STORES[1]])
    assert set(after.values()) == {STORES[1]}
    assert all(after[container] == owner for container, owner in before.items() if owner != dead)


def test_a_store_within_its_grace_keeps_its_containers():
    before = balance(6, {}, STORES[:2])
    after = balance(6, before, [STORES[1]], keep=[STORES[0]])
    assert after == before


def test_a_joining_store_takes_only_enough_to_even_the_counts():
    before = balance(12, {}, STORES[:2])
    after = balance(12, before, STORES[:3])
    moved = [container for container in before if before[container] != after[container]]
    assert len(moved) == 4 and {after[container] for container in moved} == {STORES[2]}
    assert sorted(counts(after).values()) == [4, 4, 4]


def test_with_no_live_store_the_map_stays_as_it_is():
    before = {0: STORES[0], 1: STORES[1]}
    assert balance(2, before, []) == before


@given(count=st.integers(1, 40), live=st.sets(st.sampled_from(STORES), min_size=1),
       previous=st.dictionaries(st.integers(0, 45), st.sampled_from(STORES)),
       kept=st.sets(st.sampled_from(STORES)))
def test_properties(count, live, previous, kept):
    owners = balance(count, previous, live, kept)
    kept_now = kept - live
    assert sorted(owners) == list(range(count))
    assert set(owners.values()) <= live | kept_now
    for container, owner in previous.items():
        if container < count and owner in kept_now:
            assert owners[container] == owner  # a store in its grace keeps everything
    live_counts = [sum(1 for owner in owners.values() if owner == store) for store in live]
    assert max(live_counts) - min(live_counts) <= 1
    assert balance(count, owners, live, kept) == owners  # balanced: nothing more to move

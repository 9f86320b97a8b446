"""Routing (clients/routing.py): the key hash, ceiling lookup in the segment map, and the
range replacement rule of client reference §2.6 applied to splits and merges."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from clients.errors import InvalidArgument
from clients.model import Segment, SegmentRange, Successors
from clients.routing import KeyHasher, SegmentMap
from wire import naming

SCOPE, STREAM = "sc", "st"


def seg(number: int, epoch: int = 0) -> Segment:
    return Segment(SCOPE, STREAM, naming.segment_id(number, epoch))


def rng(segment: Segment, low: float, high: float) -> SegmentRange:
    return SegmentRange(segment, low, high)


def successors(*entries: tuple[SegmentRange, set[Segment]]) -> Successors:
    return Successors(tuple((r, frozenset(p.segment_id for p in preds)) for r, preds in entries))


def routes(segment_map: SegmentMap, fractions) -> list[Segment]:
    return [segment_map.segment_for(f) for f in fractions]


# ---------------------------------------------------------------------- key hashing


def test_routing_key_fraction_vector():
    """The controller reference §5.6 vector: "hello" hashes to exactly 0.658716230571337."""
    assert naming.routing_key_fraction("hello") == 0.658716230571337


def test_key_hasher_matches_naming_and_caches():
    """KeyHasher.fraction equals routing_key_fraction, is stable across calls and stays in [0, 1)."""
    hasher = KeyHasher()
    assert hasher.fraction("hello") == 0.658716230571337
    for key in ("", "a", "key-1", "ключ", "🎉", "x" * 1000):
        first = hasher.fraction(key)
        assert first == naming.routing_key_fraction(key) == hasher.fraction(key)
        assert 0.0 <= first < 1.0


def test_key_hasher_without_key_is_random():
    """A None routing key gets a random fraction in [0, 1), not a hash (and different keys spread)."""
    hasher = KeyHasher()
    values = {hasher.fraction(None) for _ in range(50)}
    assert len(values) > 40 and all(0.0 <= v < 1.0 for v in values)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=30))
def test_routing_key_fraction_is_in_the_key_space(key):
    """Every routing key falls in [0, 1), deterministically."""
    fraction = naming.routing_key_fraction(key)
    assert 0.0 <= fraction < 1.0
    assert KeyHasher().fraction(key) == fraction


# ---------------------------------------------------------------------- lookup


def test_segment_for_is_a_ceiling_lookup():
    """A fraction goes to the segment with the smallest upper bound >= it; a boundary goes to the lower segment."""
    a, b, c = seg(0), seg(1), seg(2)
    m = SegmentMap.of_ranges([rng(c, 0.5, 1.0), rng(a, 0.0, 0.25), rng(b, 0.25, 0.5)])
    assert len(m) == 3 and m.segments == {a, b, c}
    assert routes(m, [0.0, 0.1, 0.25, 0.2500001, 0.49, 0.5, 0.75, 0.999999, 1.0]) == [a, a, a, b, b, b, c, c, c]


def test_of_ranges_rejects_empty_and_incomplete_ranges():
    """of_ranges needs at least one range, a positive first upper bound and a last upper bound of 1.0."""
    with pytest.raises(InvalidArgument):
        SegmentMap.of_ranges([])
    with pytest.raises(InvalidArgument):
        SegmentMap.of_ranges([rng(seg(0), 0.0, 0.5)])
    with pytest.raises(InvalidArgument):
        SegmentMap.of_ranges([rng(seg(0), 0.0, 0.5), rng(seg(1), 0.5, 0.99)])
    with pytest.raises(InvalidArgument):
        SegmentMap.of_ranges([rng(seg(0), 0.0, 0.5), rng(seg(1), 0.5, 1.5)])
    with pytest.raises(InvalidArgument):
        SegmentMap.of_ranges([rng(seg(0), 0.0, 0.0), rng(seg(1), 0.0, 1.0)])
    assert SegmentMap.of_ranges([rng(seg(0), 0.0, 1.0)]).segment_for(0.3) == seg(0)


# ---------------------------------------------------------------------- replacement: splits and merges


def test_split_into_two():
    """A segment split in two routes each half to its successor; other segments are untouched."""
    a, b = seg(0), seg(1)
    b1, b2 = seg(2, 1), seg(3, 1)
    m = SegmentMap.of_ranges([rng(a, 0.0, 0.5), rng(b, 0.5, 1.0)])
    m2 = m.replace(b, successors((rng(b1, 0.5, 0.75), {b}), (rng(b2, 0.75, 1.0), {b})))
    assert m2.segments == {a, b1, b2}
    assert routes(m2, [0.2, 0.6, 0.74, 0.8, 0.99]) == [a, b1, b1, b2, b2]
    assert m.segments == {a, b}  # the original map is immutable


def test_split_into_three_in_any_successor_order():
    """A three-way split works whatever order the controller lists the successors in."""
    a = seg(0)
    s1, s2, s3 = seg(1, 1), seg(2, 1), seg(3, 1)
    m = SegmentMap.of_ranges([rng(a, 0.0, 1.0)])
    parts = [(rng(s2, 0.25, 0.5), {a}), (rng(s3, 0.5, 1.0), {a}), (rng(s1, 0.0, 0.25), {a})]
    m2 = m.replace(a, successors(*parts))
    assert len(m2) == 3
    assert routes(m2, [0.0, 0.1, 0.3, 0.6, 0.99]) == [s1, s1, s2, s3, s3]


def test_merge_keeps_the_unsealed_neighbour_until_its_seal_is_seen():
    """Merging A and B into C: after only A's seal, B's keys still go to B (C clipped to A's range); after both, all go to C."""
    a, b, c, d = seg(0), seg(1), seg(2), seg(3, 1)
    m = SegmentMap.of_ranges([rng(a, 0.0, 0.25), rng(b, 0.25, 0.5), rng(c, 0.5, 1.0)])
    merged = successors((rng(d, 0.0, 0.5), {a, b}))
    after_a = m.replace(a, merged)
    assert routes(after_a, [0.1, 0.3, 0.45, 0.7]) == [d, b, b, c]
    after_both = after_a.replace(b, merged)
    assert routes(after_both, [0.1, 0.3, 0.45, 0.7]) == [d, d, d, c]
    assert len(after_both) == 2  # adjacent entries of the merged segment collapse into one


def test_merge_seals_seen_in_the_other_order():
    """Seeing the upper predecessor's seal first sends only its keys to the merged segment."""
    a, b, c = seg(0), seg(1), seg(2, 1)
    m = SegmentMap.of_ranges([rng(a, 0.0, 0.5), rng(b, 0.5, 1.0)])
    merged = successors((rng(c, 0.0, 1.0), {a, b}))
    after_b = m.replace(b, merged)
    assert routes(after_b, [0.1, 0.49, 0.51, 0.9]) == [a, a, c, c]
    assert routes(after_b.replace(a, merged), [0.1, 0.49, 0.51, 0.9]) == [c, c, c, c]


def test_scale_that_splits_and_merges_at_once():
    """A, B -> D [0,.2), E [.2,.6): A's seal brings D and E (clipped to .3), B's extends E."""
    a, b, c = seg(0), seg(1), seg(2)
    d, e = seg(3, 1), seg(4, 1)
    m = SegmentMap.of_ranges([rng(a, 0.0, 0.3), rng(b, 0.3, 0.6), rng(c, 0.6, 1.0)])
    succ_a = successors((rng(d, 0.0, 0.2), {a}), (rng(e, 0.2, 0.6), {a, b}))
    succ_b = successors((rng(e, 0.2, 0.6), {a, b}))
    after_a = m.replace(a, succ_a)
    assert routes(after_a, [0.1, 0.25, 0.35, 0.7]) == [d, e, b, c]
    after_b = after_a.replace(b, succ_b)
    assert routes(after_b, [0.1, 0.25, 0.35, 0.7]) == [d, e, e, c]


def test_non_contiguous_successors_are_invalid_argument():
    """Successors of the sealed segment that leave a gap (or overlap) raise InvalidArgument."""
    a = seg(0)
    m = SegmentMap.of_ranges([rng(a, 0.0, 1.0)])
    gap = successors((rng(seg(1, 1), 0.0, 0.4), {a}), (rng(seg(2, 1), 0.5, 1.0), {a}))
    overlap = successors((rng(seg(1, 1), 0.0, 0.6), {a}), (rng(seg(2, 1), 0.5, 1.0), {a}))
    for bad in (gap, overlap):
        with pytest.raises(InvalidArgument):
            m.replace(a, bad)


def test_successors_of_other_segments_are_ignored():
    """Only successors listing the sealed segment as a predecessor replace it."""
    a, b = seg(0), seg(1)
    a2, b2 = seg(2, 1), seg(3, 1)
    m = SegmentMap.of_ranges([rng(a, 0.0, 0.5), rng(b, 0.5, 1.0)])
    m2 = m.replace(a, successors((rng(a2, 0.0, 0.5), {a}), (rng(b2, 0.5, 1.0), {b})))
    assert routes(m2, [0.1, 0.9]) == [a2, b]


def test_successor_sealed_before_the_other_merge_seal_is_seen():
    """A,B -> E [0,.6) then E -> F [0,.3), G [.3,.6): seen as A, E, B, E, keys below .3 must end in F, not G."""
    a, b, c = seg(0), seg(1), seg(2)
    e, f, g = seg(3, 1), seg(4, 2), seg(5, 2)
    m = SegmentMap.of_ranges([rng(a, 0.0, 0.3), rng(b, 0.3, 0.6), rng(c, 0.6, 1.0)])
    succ_ab = successors((rng(e, 0.0, 0.6), {a, b}))
    succ_e = successors((rng(f, 0.0, 0.3), {e}), (rng(g, 0.3, 0.6), {e}))
    m = m.replace(a, succ_ab)          # [.3: E, .6: B, 1: C]
    m = m.replace(e, succ_e)           # E occupies only [0, .3] in this map: F owns it
    assert m.segment_for(0.1) == f
    m = m.replace(b, succ_ab).replace(e, succ_e)
    assert routes(m, [0.1, 0.4, 0.7]) == [f, g, c]


# ---------------------------------------------------------------------- property: any scale history

GRID = 1024  # boundaries are multiples of 1/1024, exact as floats


@st.composite
def histories(draw):
    """A stream's initial segments and a sequence of scales (each seals a contiguous run and re-tiles it).

    Returns (initial ranges, {sealed id: Successors}, [sealed segments per scale], final ranges,
    all boundaries on the grid).
    """
    count = draw(st.integers(1, 4))
    cuts = sorted(draw(st.sets(st.integers(1, GRID - 1), min_size=count - 1, max_size=count - 1)))
    bounds = [0, *cuts, GRID]
    number = 0
    current: list[tuple[int, int, Segment]] = []
    for low, high in zip(bounds, bounds[1:]):
        current.append((low, high, seg(number, 0)))
        number += 1
    initial = list(current)
    sealed: dict[int, Successors] = {}
    scales: list[list[Segment]] = []
    all_bounds = set(bounds)
    for epoch in range(1, draw(st.integers(1, 6)) + 1):
        start = draw(st.integers(0, len(current) - 1))
        run = current[start:start + draw(st.integers(1, min(3, len(current) - start)))]
        low, high = run[0][0], run[-1][1]
        inner = list(range(low + 1, high))
        pieces = draw(st.integers(1 if len(run) > 1 or not inner else 2, min(3, len(inner) + 1)))
        new_cuts = sorted(draw(st.sets(st.sampled_from(inner), min_size=pieces - 1, max_size=pieces - 1))
                          if inner and pieces > 1 else [])
        new_bounds = [low, *new_cuts, high]
        all_bounds.update(new_bounds)
        created = []
        for a, b in zip(new_bounds, new_bounds[1:]):
            created.append((a, b, seg(number, epoch)))
            number += 1
        entries = []
        for a, b, new in created:
            predecessors = frozenset(old.segment_id for lo, hi, old in run if lo < b and a < hi)
            entries.append((a, b, new, predecessors))
        for lo, hi, old in run:
            ordered = draw(st.permutations([(SegmentRange(new, a / GRID, b / GRID), preds)
                                            for a, b, new, preds in entries if old.segment_id in preds]))
            sealed[old.segment_id] = Successors(tuple(ordered))
        scales.append([old for _, _, old in run])
        current[start:start + len(run)] = created
    return initial, sealed, scales, current, sorted(all_bounds)


def _probe_fractions(bounds: list[int]) -> list[float]:
    """The midpoint of every cell between boundaries (never a boundary itself)."""
    return [(a + b) / 2 / GRID for a, b in zip(bounds, bounds[1:])]


def _lineage(fraction: float, initial, sealed) -> list[Segment]:
    """The segments that held ``fraction``, oldest first."""
    chain = [next(s for lo, hi, s in initial if lo / GRID <= fraction < hi / GRID)]
    while chain[-1].segment_id in sealed:
        chain.append(next(r.segment for r, _ in sealed[chain[-1].segment_id].successors
                          if r.low <= fraction < r.high))
    return chain


def _check_final(segment_map: SegmentMap, final, bounds):
    ranges = {s: (lo / GRID, hi / GRID) for lo, hi, s in final}
    assert segment_map.segments == set(ranges)
    for fraction in _probe_fractions(bounds):
        low, high = ranges[segment_map.segment_for(fraction)]
        assert low <= fraction < high
    for bound in bounds[:-1]:  # a boundary goes to the lower neighbour (ceiling lookup) or, at 0, the first
        low, high = ranges[segment_map.segment_for(bound / GRID)]
        assert low <= bound / GRID <= high


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.data())
def test_any_scale_history_applied_seal_by_seal_routes_every_key_to_its_owner(history, data):
    """Splits/merges applied one sealed segment at a time (each scale's seals in any order) end with every fraction routed to its owner."""
    initial, sealed, scales, final, bounds = history
    m = SegmentMap.of_ranges(SegmentRange(s, lo / GRID, hi / GRID) for lo, hi, s in initial)
    for scale in scales:
        for old in data.draw(st.permutations(scale)):
            assert old in m.segments
            m = m.replace(old, sealed[old.segment_id])
    _check_final(m, final, bounds)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(history=(
    [(0, 512, seg(0)), (512, GRID, seg(1))],
    {seg(0).segment_id: successors((rng(seg(2, 1), 0.0, 1.0), {seg(0), seg(1)})),
     seg(1).segment_id: successors((rng(seg(2, 1), 0.0, 1.0), {seg(0), seg(1)})),
     seg(2, 1).segment_id: successors((rng(seg(3, 2), 0.0, 0.5), {seg(2, 1)}),
                                      (rng(seg(4, 2), 0.5, 1.0), {seg(2, 1)}))},
    [[seg(0), seg(1)], [seg(2, 1)]],
    [(0, 512, seg(3, 2)), (512, GRID, seg(4, 2))],
    [0, 512, GRID]),
    order=[0, 1] + [0] * 58)
@given(histories(), st.lists(st.integers(0, 10), min_size=60, max_size=60))
def test_any_causal_seal_order_keeps_keys_on_their_lineage(history, order):
    """Seals seen in any order a writer can see them (a segment's seal only once it is in the map) keep every key
    on its own lineage, never going back, and end with every fraction routed to its owner."""
    initial, sealed, scales, final, bounds = history
    m = SegmentMap.of_ranges(SegmentRange(s, lo / GRID, hi / GRID) for lo, hi, s in initial)
    probes = _probe_fractions(bounds)
    lineages = {f: _lineage(f, initial, sealed) for f in probes}
    progress = {f: 0 for f in probes}
    for step in range(200):
        candidates = sorted(s for s in m.segments if s.segment_id in sealed)
        if not candidates:
            break
        choice = candidates[order[step % len(order)] % len(candidates)]
        m = m.replace(choice, sealed[choice.segment_id])
        for fraction in probes:
            position = lineages[fraction].index(m.segment_for(fraction))  # ValueError: off its lineage
            assert position >= progress[fraction]
            progress[fraction] = position
    else:
        pytest.fail("replacements did not converge")
    _check_final(m, final, bounds)

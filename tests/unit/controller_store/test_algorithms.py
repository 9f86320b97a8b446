"""The pure algorithms under the store: key-space planning, the time index, stream-cut overlay and
the two transition tables (checked against the spec's tables)."""

from __future__ import annotations

import pytest

from controller.store import ChunkSizes, CorruptRecord, ScaleInputInvalid, State, TransactionStatus
from controller.store.history import append_to_chunk, chunks_spanning, find_epoch, find_leaf, index_epoch
from controller.store.key_space import (equal_ranges, initial_epoch, merged_intervals, next_epoch,
                                        plan_epoch_transition, tiling_error)
from controller.store.records import (EpochRecord, HistoryIndexRoot, HistoryTimeSeriesRecord, SegmentRecord,
                                      TruncationRecord)
from controller.store.states import state_transition_allowed, transaction_transition_allowed
from controller.store.stream_cuts import is_truncated, overlay_truncation, segments_between


def test_equal_ranges_end_exactly_where_asked():
    """Splitting into thirds ends at exactly the original end, though 3 * (1/3) != 1 in floats."""
    ranges = equal_ranges(0.1, 0.7, 3)
    assert ranges[-1][1] == 0.7 and ranges[0][0] == 0.1
    assert all(first[1] == second[0] for first, second in zip(ranges, ranges[1:]))
    epoch = initial_epoch(7, 5, 100)
    assert tiling_error(epoch.segments) is None and [s.number for s in epoch.segments] == list(range(5, 12))


def test_tiling_errors_are_reported():
    """Gaps, overlaps, empty ranges and a short last segment are all caught."""
    good = [SegmentRecord(0, 0, 0.0, 0.5), SegmentRecord(1, 0, 0.5, 1.0)]
    assert tiling_error(good) is None
    assert "starts at" in tiling_error([good[0], SegmentRecord(1, 0, 0.6, 1.0)])
    assert "ends at" in tiling_error([SegmentRecord(0, 0, 0.0, 0.5)])
    assert "empty" in tiling_error([SegmentRecord(0, 0, 0.0, 0.0), SegmentRecord(1, 0, 0.0, 1.0)])
    assert tiling_error([]) == "no segments"


def test_merged_intervals_join_touching_ranges_and_refuse_overlaps():
    """Touching ranges merge; overlapping, empty or out-of-range ones are ScaleInputInvalid."""
    assert merged_intervals([(0.5, 0.7), (0.0, 0.2), (0.2, 0.3)]) == [(0.0, 0.3), (0.5, 0.7)]
    for bad in ([(0.0, 0.3), (0.2, 0.4)], [(0.3, 0.3)], [(0.5, 1.5)]):
        with pytest.raises(ScaleInputInvalid):
            merged_intervals(bad)


def test_new_epoch_times_strictly_increase_and_numbers_continue():
    """A scale requested with a time before the current epoch still gets a later creation time,
    and new segments are numbered above every existing one, carrying the new epoch in their ids."""
    current = initial_epoch(2, 0, 1000)
    transition = plan_epoch_transition(current, [0], [(0.0, 0.25), (0.25, 0.5)], 500)
    epoch, delta = next_epoch(current, transition)
    assert epoch.creation_time == 1001 == delta.scale_time
    assert [(s.number, s.creation_epoch) for s in epoch.segments] == [(2, 1), (3, 1), (1, 0)]
    with pytest.raises(ValueError):
        next_epoch(epoch, transition)


def test_time_index_two_levels():
    """Indexing epochs opens a new leaf every L epochs and touches the root only then; lookups
    find the epoch current at any time, clamping before the first epoch."""
    sizes = ChunkSizes(index_leaf_epochs=3)
    root, leaves = HistoryIndexRoot(()), {}
    for epoch in range(8):
        number = sizes.leaf_of(epoch)
        root, leaves[number] = index_epoch(root, leaves.get(number), epoch, 100 + 10 * epoch, sizes)
    assert root.leaf_start_times == (100, 130, 160)
    assert index_epoch(root, leaves[2], 7, 170, sizes) == (root, leaves[2])  # indexing twice is a no-op
    for time, expected in ((0, 0), (100, 0), (129, 2), (130, 3), (155, 5), (10_000, 7)):
        assert find_epoch(leaves[find_leaf(root, time)], time, sizes) == expected
    with pytest.raises(CorruptRecord):
        index_epoch(root, None, 10, 200, sizes)  # a leaf that should exist is missing
    with pytest.raises(ValueError):
        index_epoch(root, leaves[2], 9, 190, sizes)  # the wrong leaf


def test_history_chunks_refuse_gaps():
    """A chunk appends consecutive epochs only; re-appending is a no-op."""
    sizes = ChunkSizes(history_chunk_epochs=4)
    record = HistoryTimeSeriesRecord(4, 4, 10, (), ())
    chunk = append_to_chunk(None, record, sizes)
    assert append_to_chunk(chunk, record, sizes) == chunk
    with pytest.raises(CorruptRecord):
        append_to_chunk(chunk, HistoryTimeSeriesRecord(6, 6, 12, (), ()), sizes)
    with pytest.raises(CorruptRecord):
        append_to_chunk(None, HistoryTimeSeriesRecord(5, 5, 12, (), ()), sizes)
    with pytest.raises(ValueError):
        append_to_chunk(chunk, HistoryTimeSeriesRecord(8, 8, 12, (), ()), sizes)


def test_chunks_spanning_reads_only_chunks_with_needed_deltas():
    """The deltas of epochs (first, last] start at first + 1: first's own chunk is read only if it holds them."""
    sizes = ChunkSizes(history_chunk_epochs=3)
    assert list(chunks_spanning(2, 7, sizes)) == [1, 2]  # epochs 3..7
    assert list(chunks_spanning(1, 4, sizes)) == [0, 1]  # epochs 2..4
    assert list(chunks_spanning(4, 4, sizes)) == [] and list(chunks_spanning(5, 4, sizes)) == []


A = SegmentRecord(0, 0, 0.0, 0.5)
B = SegmentRecord(1, 0, 0.5, 1.0)
C = SegmentRecord((1 << 32) | 2, 1, 0.0, 0.25)
D = SegmentRecord((1 << 32) | 3, 1, 0.25, 0.5)
EPOCH0 = EpochRecord(0, 0, 0, (A, B))
EPOCH1 = EpochRecord(1, 1, 1, (C, D, B))


def test_truncation_overlay_takes_the_later_segment_per_range():
    """Before the cut the cut wins, after it the epoch wins, and a shared segment keeps the cut's offset."""
    truncation = TruncationRecord({C.segment_id: 5, D.segment_id: 6, B.segment_id: 7}, {C: 1, D: 1, B: 1})
    assert overlay_truncation(EPOCH0, truncation) == {C: 5, D: 6, B: 7}
    assert overlay_truncation(EPOCH1, truncation) == {C: 5, D: 6, B: 7}
    early = TruncationRecord({A.segment_id: 3, B.segment_id: 4}, {A: 0, B: 0})
    assert overlay_truncation(EPOCH1, early) == {C: 0, D: 0, B: 4}
    assert is_truncated(A, truncation) and not is_truncated(B, truncation) and not is_truncated(C, early)


def test_segments_between_cuts():
    """Between the head (A, B) and a cut on (C, D, B) lie A, B, C and D; between (C, D, B) and itself,
    only those three."""
    head = {A: 0, B: 0}
    cut = {C: 1, D: 1, B: 1}
    assert segments_between(head, cut, [EPOCH0, EPOCH1]) == {A, B, C, D}
    assert segments_between(cut, cut, [EPOCH1]) == {B, C, D}


SPEC_STATE_TABLE = {  # controller-api.md §6.2, copied by hand
    State.UNKNOWN: {State.CREATING},
    State.CREATING: {State.ACTIVE},
    State.ACTIVE: {State.SCALING, State.TRUNCATING, State.COMMITTING_TXN, State.SEALING, State.SEALED,
                   State.UPDATING},
    State.SCALING: {State.ACTIVE},
    State.COMMITTING_TXN: {State.ACTIVE},
    State.TRUNCATING: {State.ACTIVE},
    State.UPDATING: {State.ACTIVE},
    State.SEALING: {State.SEALED},
    State.SEALED: set(),
}


@pytest.mark.parametrize("current", list(State))
def test_state_transitions_match_the_spec(current):
    """Every (from, to) pair is allowed exactly when the spec's table (or from == to) says so."""
    for requested in State:
        expected = requested == current or requested in SPEC_STATE_TABLE[current]
        assert state_transition_allowed(current, requested) is expected, (current, requested)


def test_transaction_status_transitions():
    """OPEN -> COMMITTING -> COMMITTED and OPEN -> ABORTING -> ABORTED; nothing crosses over or goes back."""
    status = TransactionStatus
    allowed = {(status.UNKNOWN, status.OPEN), (status.OPEN, status.COMMITTING), (status.OPEN, status.ABORTING),
               (status.COMMITTING, status.COMMITTED), (status.ABORTING, status.ABORTED)}
    for current in TransactionStatus:
        for requested in TransactionStatus:
            expected = current == requested or (current, requested) in allowed
            assert transaction_transition_allowed(current, requested) is expected

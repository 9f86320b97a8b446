"""SLTS record and journal formats: round trips, the version byte, forward-compatible trailing fields,
invariant checks, and the reader's treatment of torn and damaged journal frames and snapshots."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.tier2 import records
from server.tier2.errors import StorageCorrupted
from server.tier2.journal_format import Snapshot, decode_batches, decode_snapshot, encode_batch, encode_snapshot
from server.tier2.records import ChunkFlags, ChunkRecord, SegmentFlags, SegmentRecord, check_chain

names = st.text(min_size=1, max_size=40)
sizes = st.integers(0, 2**63)
segment_records = st.builds(SegmentRecord, names, sizes, sizes, sizes, st.none() | names, sizes, st.none() | names,
                            sizes, sizes, sizes, sizes, st.sampled_from(list(SegmentFlags)))
chunk_records = st.builds(ChunkRecord, names, sizes, st.none() | names, st.sampled_from(list(ChunkFlags)))


@given(st.one_of(segment_records, chunk_records))
def test_records_round_trip(record):
    assert records.decode(records.encode(record)) == record


def test_unknown_versions_and_kinds_are_refused_and_trailing_fields_ignored():
    encoded = records.encode(ChunkRecord("c", 5, "d"))
    assert records.decode(encoded + b"a later field") == ChunkRecord("c", 5, "d")
    with pytest.raises(StorageCorrupted):
        records.decode(bytes([2]) + encoded[1:])
    with pytest.raises(StorageCorrupted):
        records.decode(encoded[:1] + bytes([9]) + encoded[2:])
    with pytest.raises(StorageCorrupted):
        records.decode(encoded[:-1])


def test_segment_invariants():
    good = SegmentRecord("s", length=30, start_offset=12, chunk_count=2, first_chunk="a", first_chunk_start_offset=10,
                         last_chunk="b", last_chunk_start_offset=20, max_rolling_length=10)
    good.check_invariants()
    SegmentRecord("s", length=7, start_offset=7, first_chunk_start_offset=7, last_chunk_start_offset=7,
                  max_rolling_length=10).check_invariants()
    for broken in (dict(start_offset=9), dict(start_offset=31), dict(last_chunk_start_offset=31),
                   dict(chunk_count=0), dict(last_chunk=None), dict(chunk_count=1),
                   dict(max_rolling_length=0)):
        with pytest.raises(StorageCorrupted):
            dataclasses.replace(good, **broken).check_invariants()
    check_chain(good, [ChunkRecord("a", 10, "b"), ChunkRecord("b", 10)])
    for chain in ([ChunkRecord("a", 10, "b"), ChunkRecord("b", 9)], [ChunkRecord("a", 10, "b")],
                  [ChunkRecord("a", 10, "b"), ChunkRecord("b", 10, flags=ChunkFlags(0))]):
        with pytest.raises(StorageCorrupted):
            check_chain(good, chain)


def test_journal_reader_stops_at_a_torn_or_damaged_frame():
    batches = [{"s": SegmentRecord("s", max_rolling_length=4), "c": None}, {"c": ChunkRecord("c", 3)}]
    data = b"".join(encode_batch(batch) for batch in batches)
    assert list(decode_batches(data)) == batches
    assert list(decode_batches(data[:-1])) == batches[:1]
    damaged = bytearray(data)
    damaged[-2] ^= 0xFF
    assert list(decode_batches(bytes(damaged))) == batches[:1]
    assert list(decode_batches(data[:5])) == []


def test_snapshots_are_all_or_nothing():
    snapshot = Snapshot(3, 7, 12, {"s": SegmentRecord("s", max_rolling_length=4), "c": ChunkRecord("c", 1)})
    data = encode_snapshot(snapshot)
    assert decode_snapshot(data) == snapshot
    for damaged in (data[:-1], data[:10], data[:20] + bytes([data[20] ^ 1]) + data[21:]):
        with pytest.raises(StorageCorrupted):
            decode_snapshot(damaged)

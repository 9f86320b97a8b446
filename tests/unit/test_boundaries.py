"""The boundary index of stream segments and LocateOffset's walk over envelope headers
(server/containers/boundaries.py), against brute force over generated segments."""

from __future__ import annotations

import asyncio
import bisect
import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from server.containers.boundaries import BoundaryIndex, SegmentBoundaries, locate, looks_like_events
from server.containers.metadata import SegmentMetadata, SegmentType
from wire.envelope import ENVELOPE_HEADER, envelope, envelope_all


def boundaries_of(sizes, base=0) -> list[int]:
    """Every event boundary of events with these payload sizes laid from ``base`` (the end included)."""
    offsets = [base]
    for size in sizes:
        offsets.append(offsets[-1] + 8 + size)
    return offsets


def expected(true_boundaries, start, length, target) -> int:
    if target <= start:
        return start
    if target >= length:
        return length
    return true_boundaries[bisect.bisect_left(true_boundaries, target)]


class Reader:
    """``read(offset, size)`` over ``data`` laid at ``base``: short reads of random sizes, counted."""

    def __init__(self, data: bytes, base: int = 0, seed: int = 0, max_piece: int | None = None):
        self.data, self.base = memoryview(data), base
        self.random = random.Random(seed)
        self.max_piece = max_piece
        self.bytes_read = 0
        self.calls = 0

    async def __call__(self, offset: int, size: int):
        assert self.base <= offset < self.base + len(self.data), offset
        if self.max_piece is not None:
            size = min(size, self.random.randint(1, self.max_piece))
        piece = self.data[offset - self.base:offset - self.base + size]
        self.bytes_read += len(piece)
        self.calls += 1
        return piece


def run(coroutine):
    return asyncio.run(coroutine)


# ------------------------------------------------------------------ the index


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("add"), st.integers(0, 10_000)),
                          st.tuples(st.just("truncate"), st.integers(0, 10_000)),
                          st.tuples(st.just("tail"), st.integers(0, 400))), max_size=200),
       st.integers(1, 300), st.integers(2, 12))
def test_index_stays_sorted_sparse_bounded_and_holds_only_what_it_was_given(actions, spacing, capacity):
    index = BoundaryIndex(spacing, capacity)
    given_offsets, start, tail = set(), 0, 0
    for action, value in actions:
        if action == "add":
            index.add(value)
            given_offsets.add(value)
        elif action == "truncate":
            start = max(start, value)
            index.truncate(start)
            given_offsets = {offset for offset in given_offsets if offset >= start}
        else:
            tail += value
            if index.due(tail):
                index.add(tail)
                given_offsets.add(tail)
        offsets = list(index)
        assert offsets == sorted(set(offsets))
        assert len(offsets) <= capacity
        assert all(b - a >= index.spacing for a, b in itertools.pairwise(offsets))
        assert set(offsets) <= given_offsets
        assert all(offset >= start for offset in offsets)
        for probe in (0, value, value + 1, 10_000, 20_000):
            below = [offset for offset in offsets if offset <= probe]
            assert index.floor(probe) == (below[-1] if below else None)


def test_index_thins_by_doubling_its_spacing_past_capacity():
    index = BoundaryIndex(spacing=10, capacity=4)
    for offset in range(0, 100, 10):
        if index.due(offset):
            index.add(offset)
    assert len(index) <= 4 and index.spacing >= 20
    assert next(iter(index)) == 0  # the first boundary is kept
    index.add(5)  # within spacing of 0: not recorded
    assert 5 not in list(index)


def test_looks_like_events():
    assert looks_like_events(envelope(b"abc"))
    assert looks_like_events(envelope_all([b"a", b"bb"]))
    assert looks_like_events(envelope(b""))
    assert not looks_like_events(envelope(b"abc")[:10])  # an event that does not fit
    assert not looks_like_events(b"\x00\x00\x00\x01" + b"\x00" * 8)  # not type 0
    assert not looks_like_events(b"hello world, raw bytes")
    assert not looks_like_events(b"\x00" * 7)


# ------------------------------------------------------------------ the segment registry


def segment(segment_id: int, segment_type=SegmentType.STREAM) -> SegmentMetadata:
    return SegmentMetadata(segment_id, f"s/t/{segment_id}", segment_type, {}, 0)


def test_appends_to_stream_segments_are_recorded_sparsely_and_only_when_they_look_like_events():
    registry = SegmentBoundaries(spacing=100)
    stream = segment(1)
    event = envelope(b"x" * 42)  # 50 bytes
    for offset in range(0, 1000, 50):
        registry.appended(stream, offset, event)
    assert list(registry.index_of(stream)) == list(range(0, 1000, 100))
    registry.appended(stream, 1100, b"raw bytes of a byte stream, no envelope")
    assert 1100 not in list(registry.index_of(stream))
    for kind in (SegmentType.TABLE, SegmentType.TRANSIENT):
        other = segment(2 if kind == SegmentType.TABLE else 3, kind)
        registry.appended(other, 0, event)
        assert registry.index_of(other) is None
    registry.truncated(stream, 350)
    assert next(iter(registry.index_of(stream))) == 400
    registry.removed(stream)
    assert list(registry.index_of(stream)) == []  # a fresh index


def test_a_merged_transaction_brings_its_boundaries_but_a_transient_or_a_header_does_not():
    registry = SegmentBoundaries(spacing=10)
    target, transaction, transient = segment(1), segment(2), segment(3, SegmentType.TRANSIENT)
    registry.appended(target, 0, envelope(b"x" * 92))  # 100 bytes
    for offset in (0, 20, 40):
        registry.appended(transaction, offset, envelope(b"y" * 12))
    registry.merged(target, transaction, 100, with_header=False)
    assert list(registry.index_of(target)) == [0, 100, 120, 140]
    registry.appended(transient, 0, envelope(b"z" * 30)[:20])  # chunks of a large event: never recorded
    registry.merged(target, transient, 160, with_header=False)
    assert list(registry.index_of(target)) == [0, 100, 120, 140, 160]
    third = segment(4)
    registry.appended(third, 0, envelope(b"w" * 40))
    registry.appended(third, 48, envelope(b"w" * 40))
    registry.merged(target, third, 200, with_header=True)  # header + source: one event at 200
    assert list(registry.index_of(target)) == [0, 100, 120, 140, 160, 200]
    assert list(registry.index_of(third)) == []  # the source's index is gone (a fresh one)


# ------------------------------------------------------------------ the walk


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=60), st.data())
def test_locate_agrees_with_brute_force(sizes, draw):
    base = draw.draw(st.integers(0, 5000), label="segment base")  # the offset of the first event
    true = boundaries_of(sizes, base)
    data = envelope_all([bytes([i % 256]) * size for i, size in enumerate(sizes)])
    length = base + len(data)
    start = draw.draw(st.sampled_from(true), label="start (truncated at a boundary)")
    spacing = draw.draw(st.integers(1, 5000), label="spacing")
    index = BoundaryIndex(spacing, capacity=draw.draw(st.integers(2, 20), label="capacity"))
    for hint in draw.draw(st.lists(st.sampled_from(true)), label="known boundaries"):
        index.add(hint)
    index.truncate(start)
    reader = Reader(data, base, seed=draw.draw(st.integers(0, 1000)), max_piece=draw.draw(
        st.sampled_from([None, 3, 9, 100, 5000]), label="largest piece a read returns"))
    targets = draw.draw(st.lists(st.integers(base - 20, length + 20), max_size=30), label="targets")
    for target in targets + true + [b + 1 for b in true] + [b + 7 for b in true]:
        answer = run(locate(index, start, length, target, reader))
        assert answer == expected(true, start, length, target), target
        assert set(index) <= set(true)  # everything learned is a real boundary


def test_every_target_around_every_boundary():
    rng = random.Random(1234)
    sizes = [rng.choice([0, 1, 7, 8, 9, 100, 4000]) for _ in range(300)]
    true = boundaries_of(sizes)
    data = envelope_all([b"e" * size for size in sizes])
    index = BoundaryIndex(spacing=1000)
    reader = Reader(data, seed=5, max_piece=700)
    for boundary in true:
        for target in (boundary - 1, boundary, boundary + 1, boundary + 4, boundary + 8):
            assert run(locate(index, 0, len(data), target, reader)) == expected(true, 0, len(data), target)


def test_a_large_payload_is_jumped_over_not_read():
    payload = 20 * 1024 * 1024
    data = bytearray(ENVELOPE_HEADER.pack(0, payload)) + bytearray(payload) + envelope(b"tail")
    reader = Reader(bytes(data))
    assert run(locate(BoundaryIndex(), 0, len(data), 5_000_000, reader)) == 8 + payload
    assert reader.bytes_read < 256 * 1024  # one header read, not the 20 MiB payload


def test_a_walk_records_what_it_learns_so_the_next_call_is_short():
    sizes = [100] * 50_000  # ~5.4 MB of small events
    data = envelope_all([b"p" * size for size in sizes])
    true = boundaries_of(sizes)
    index = BoundaryIndex(spacing=256 * 1024)
    first = Reader(data)
    target = len(data) - 1000
    assert run(locate(index, 0, len(data), target, first)) == expected(true, 0, len(data), target)
    assert first.bytes_read >= target - 2 * 1024 * 1024  # no hint: a walk from the start
    assert len(index) >= 15
    again = Reader(data)
    assert run(locate(index, 0, len(data), target + 50, again)) == expected(true, 0, len(data), target + 50)
    assert again.bytes_read <= 256 * 1024 + 64 * 1024  # at most one spacing from a known boundary
    nearby = Reader(data)
    assert run(locate(index, 0, len(data), len(data) // 2, nearby)) == expected(true, 0, len(data), len(data) // 2)
    assert nearby.bytes_read <= 256 * 1024 + 64 * 1024  # at most one spacing from a learned boundary


def test_bytes_that_are_not_events_answer_the_length():
    events = envelope_all([b"a" * 10, b"b" * 20])  # boundaries 0, 18, 46
    for garbage in (b"\x00\x00\x00\x07" + b"\x00" * 20,  # a type code other than 0
                    b"\x00\x00\x00\x00\xff\xff\xff\xf0" + b"\x00" * 20,  # a negative length
                    b"\x00\x00\x00\x00\x00\x00\x10\x00" + b"\x00" * 20,  # an event running past the end
                    b"\x00\x00\x00"):  # the segment ends inside a header
        data = events + garbage
        for target, answer in ((1, 18), (18, 18), (19, 46), (46, 46), (47, len(data))):
            assert run(locate(BoundaryIndex(), 0, len(data), target, Reader(data))) == answer, (garbage, target)
    raw = b"this is a byte stream, not events" * 1000
    assert run(locate(BoundaryIndex(), 0, len(raw), 5, Reader(raw))) == len(raw)


def test_segments_that_are_not_event_streams_are_never_walked():
    async def no_reads(offset, size):
        raise AssertionError("read")

    assert run(locate(None, 10, 100, 50, no_reads)) == 100
    assert run(locate(None, 10, 100, 5, no_reads)) == 10
    assert run(locate(BoundaryIndex(), 10, 100, 10, no_reads)) == 10  # on the start: no read either
    assert run(locate(BoundaryIndex(), 10, 100, 100, no_reads)) == 100

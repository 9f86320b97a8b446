"""Segment, epoch and history records (PDP-32's replacement for the monolithic segment/history tables).

Formats (after the format-version byte; see ``codec`` for the primitive encodings)::

    SegmentRow          segment_id:i64 creation_time:i64 key_start:f64 key_end:f64      (32 bytes)
    EpochRecord         epoch:i32 reference_epoch:i32 creation_time:i64 segments:[SegmentRow]
    HistoryChunk        chunk:i32 count:u32 then per record:
                          epoch:i32 reference_epoch:i32 scale_time:i64
                          sealed:[segment_id:i64] created:[SegmentRow]
    HistoryIndexRoot    leaf_start_times:[i64]            (first epoch time of each leaf)
    HistoryIndexLeaf    leaf:i32 epoch_times:[i64]        (creation time of each epoch in the leaf)
    SealedEpochRecord   epoch:i32                         (the epoch in which a segment stops)
    SealedSizesShard    shard:i32 sizes:[segment_id:i64 size:i64]
    EpochTransition     active_epoch:i32 (-1: none) time:i64 to_seal:[i64] new:[id:i64 start:f64 end:f64]

A segment's id holds its creation epoch and number (wire/naming), so a segment needs no record of
its own: its range and creation time are in the epoch record of its creation epoch.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import NamedTuple

from wire.naming import epoch_of, segment_number_of

from ..codec import Decoder, Encoder

FORMAT_VERSION = 1
_SEGMENT_ROW = struct.Struct(">qqdd")
_NEW_SEGMENT_ROW = struct.Struct(">qdd")


class SegmentRecord(NamedTuple):
    """One segment: its id, when it was created and the key range [key_start, key_end) it owns."""

    segment_id: int
    creation_time: int
    key_start: float
    key_end: float

    @property
    def number(self) -> int:
        return segment_number_of(self.segment_id)

    @property
    def creation_epoch(self) -> int:
        return epoch_of(self.segment_id)

    def overlaps(self, other: SegmentRecord) -> bool:
        return self.key_start < other.key_end and other.key_start < self.key_end


def _segments(rows) -> tuple[SegmentRecord, ...]:
    return tuple(SegmentRecord(*row) for row in rows)


@dataclasses.dataclass(frozen=True, slots=True)
class EpochRecord:
    """The segments of one epoch, ordered by key_start; they tile [0, 1) exactly."""

    epoch: int
    reference_epoch: int  # == epoch, except for rolling-transaction duplicates (spec §6.5)
    creation_time: int
    segments: tuple[SegmentRecord, ...]

    @property
    def segment_ids(self) -> frozenset[int]:
        return frozenset(segment.segment_id for segment in self.segments)

    def segment(self, segment_id: int) -> SegmentRecord | None:
        for segment in self.segments:
            if segment.segment_id == segment_id:
                return segment
        return None

    @property
    def highest_segment_number(self) -> int:
        return max(segment.number for segment in self.segments)

    def encode(self) -> bytes:
        return (Encoder(FORMAT_VERSION).i32(self.epoch).i32(self.reference_epoch).i64(self.creation_time)
                .packed(_SEGMENT_ROW, self.segments).to_bytes())

    @classmethod
    def decode(cls, data: bytes) -> EpochRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.i32(), decoder.i32(), decoder.i64(), _segments(decoder.packed(_SEGMENT_ROW)))


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryTimeSeriesRecord:
    """The delta from the previous epoch. Duplicates (epoch != reference) carry no delta."""

    epoch: int
    reference_epoch: int
    scale_time: int
    sealed_segment_ids: tuple[int, ...]
    created_segments: tuple[SegmentRecord, ...]

    @property
    def is_duplicate(self) -> bool:
        """A rolling-transaction duplicate: its epoch record must be read, the delta is empty."""
        return self.epoch != self.reference_epoch


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryChunk:
    """History deltas of epochs [chunk * size, (chunk + 1) * size), appended one epoch at a time."""

    chunk: int
    records: tuple[HistoryTimeSeriesRecord, ...]

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).i32(self.chunk).sequence(self.records, _encode_delta).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> HistoryChunk:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.i32(), decoder.sequence(_decode_delta))


def _encode_delta(encoder: Encoder, record: HistoryTimeSeriesRecord) -> None:
    (encoder.i32(record.epoch).i32(record.reference_epoch).i64(record.scale_time)
     .i64s(record.sealed_segment_ids).packed(_SEGMENT_ROW, record.created_segments))


def _decode_delta(decoder: Decoder) -> HistoryTimeSeriesRecord:
    return HistoryTimeSeriesRecord(decoder.i32(), decoder.i32(), decoder.i64(), decoder.i64s(),
                                   _segments(decoder.packed(_SEGMENT_ROW)))


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryIndexRoot:
    """Level 1 of the time index: the first epoch time of every leaf, in leaf order."""

    leaf_start_times: tuple[int, ...]

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).i64s(self.leaf_start_times).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> HistoryIndexRoot:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.i64s())


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryIndexLeaf:
    """Level 2 of the time index: creation times of epochs [leaf * size, leaf * size + len)."""

    leaf: int
    epoch_times: tuple[int, ...]

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).i32(self.leaf).i64s(self.epoch_times).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> HistoryIndexLeaf:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.i32(), decoder.i64s())


@dataclasses.dataclass(frozen=True, slots=True)
class SealedEpochRecord:
    """The epoch in which a segment stops being part of the stream (its successors' epoch)."""

    epoch: int

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).i32(self.epoch).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> SealedEpochRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.i32())


@dataclasses.dataclass(frozen=True, slots=True)
class SealedSizesShard:
    """Sizes at sealing time of the segments created in one range of epochs (spec §6.1)."""

    shard: int
    sizes: dict[int, int]

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).i32(self.shard).pairs(self.sizes).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> SealedSizesShard:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.i32(), decoder.pairs())


class NewSegment(NamedTuple):
    """A segment an epoch transition will create: its id and key range."""

    segment_id: int
    key_start: float
    key_end: float


@dataclasses.dataclass(frozen=True, slots=True)
class EpochTransitionRecord:
    """A pending scale: seal ``segments_to_seal`` of ``active_epoch``, create ``new_segments``."""

    active_epoch: int
    time: int
    segments_to_seal: tuple[int, ...]
    new_segments: tuple[NewSegment, ...]

    @property
    def is_empty(self) -> bool:
        return self.active_epoch < 0

    @property
    def new_epoch(self) -> int:
        return self.active_epoch + 1

    def encode(self) -> bytes:
        return (Encoder(FORMAT_VERSION).i32(self.active_epoch).i64(self.time).i64s(self.segments_to_seal)
                .packed(_NEW_SEGMENT_ROW, self.new_segments).to_bytes())

    @classmethod
    def decode(cls, data: bytes) -> EpochTransitionRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.i32(), decoder.i64(), decoder.i64s(),
                       tuple(NewSegment(*row) for row in decoder.packed(_NEW_SEGMENT_ROW)))


EMPTY_EPOCH_TRANSITION = EpochTransitionRecord(-1, 0, (), ())

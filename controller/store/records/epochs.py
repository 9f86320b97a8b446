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
_SEGMENT_ID = struct.Struct(">q")
_NEW_SEGMENT_ROW = struct.Struct(">qdd")
_TIME = struct.Struct(">q")


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
    def is_duplicate(self) -> bool:
        return self.epoch != self.reference_epoch

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
        decoder = Decoder(data, cls.__name__, FORMAT_VERSION)
        record = cls(decoder.i32(), decoder.i32(), decoder.i64(), _segments(decoder.packed(_SEGMENT_ROW)))
        decoder.finish()
        return record


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryTimeSeriesRecord:
    """The delta from the previous epoch. Duplicates (epoch != reference) carry no delta."""

    epoch: int
    reference_epoch: int
    scale_time: int
    sealed_segment_ids: tuple[int, ...]
    created_segments: tuple[SegmentRecord, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryChunk:
    """History deltas of epochs [chunk * size, (chunk + 1) * size), appended one epoch at a time."""

    chunk: int
    records: tuple[HistoryTimeSeriesRecord, ...]

    def encode(self) -> bytes:
        encoder = Encoder(FORMAT_VERSION).i32(self.chunk).count(len(self.records))
        for record in self.records:
            encoder.i32(record.epoch).i32(record.reference_epoch).i64(record.scale_time)
            encoder.packed(_SEGMENT_ID, ((segment_id,) for segment_id in record.sealed_segment_ids))
            encoder.packed(_SEGMENT_ROW, record.created_segments)
        return encoder.to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> HistoryChunk:
        decoder = Decoder(data, cls.__name__, FORMAT_VERSION)
        chunk = decoder.i32()
        records = []
        for _ in range(decoder.count()):
            epoch, reference_epoch, scale_time = decoder.i32(), decoder.i32(), decoder.i64()
            sealed = tuple(row[0] for row in decoder.packed(_SEGMENT_ID))
            records.append(HistoryTimeSeriesRecord(epoch, reference_epoch, scale_time, sealed,
                                                   _segments(decoder.packed(_SEGMENT_ROW))))
        decoder.finish()
        return cls(chunk, tuple(records))


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryIndexRoot:
    """Level 1 of the time index: the first epoch time of every leaf, in leaf order."""

    leaf_start_times: tuple[int, ...]

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).packed(_TIME, ((time,) for time in self.leaf_start_times)).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> HistoryIndexRoot:
        decoder = Decoder(data, cls.__name__, FORMAT_VERSION)
        record = cls(tuple(row[0] for row in decoder.packed(_TIME)))
        decoder.finish()
        return record


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryIndexLeaf:
    """Level 2 of the time index: creation times of epochs [leaf * size, leaf * size + len)."""

    leaf: int
    epoch_times: tuple[int, ...]

    def encode(self) -> bytes:
        return (Encoder(FORMAT_VERSION).i32(self.leaf)
                .packed(_TIME, ((time,) for time in self.epoch_times)).to_bytes())

    @classmethod
    def decode(cls, data: bytes) -> HistoryIndexLeaf:
        decoder = Decoder(data, cls.__name__, FORMAT_VERSION)
        record = cls(decoder.i32(), tuple(row[0] for row in decoder.packed(_TIME)))
        decoder.finish()
        return record


@dataclasses.dataclass(frozen=True, slots=True)
class SealedEpochRecord:
    """The epoch in which a segment stops being part of the stream (its successors' epoch)."""

    epoch: int

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).i32(self.epoch).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> SealedEpochRecord:
        decoder = Decoder(data, cls.__name__, FORMAT_VERSION)
        record = cls(decoder.i32())
        decoder.finish()
        return record


@dataclasses.dataclass(frozen=True, slots=True)
class SealedSizesShard:
    """Sizes at sealing time of the segments created in one range of epochs (spec §6.1)."""

    shard: int
    sizes: dict[int, int]

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).i32(self.shard).pairs(self.sizes).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> SealedSizesShard:
        decoder = Decoder(data, cls.__name__, FORMAT_VERSION)
        record = cls(decoder.i32(), decoder.pairs())
        decoder.finish()
        return record


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
        return (Encoder(FORMAT_VERSION).i32(self.active_epoch).i64(self.time)
                .packed(_SEGMENT_ID, ((segment_id,) for segment_id in self.segments_to_seal))
                .packed(_NEW_SEGMENT_ROW, self.new_segments).to_bytes())

    @classmethod
    def decode(cls, data: bytes) -> EpochTransitionRecord:
        decoder = Decoder(data, cls.__name__, FORMAT_VERSION)
        active_epoch, time = decoder.i32(), decoder.i64()
        to_seal = tuple(row[0] for row in decoder.packed(_SEGMENT_ID))
        new = tuple(NewSegment(*row) for row in decoder.packed(_NEW_SEGMENT_ROW))
        decoder.finish()
        return cls(active_epoch, time, to_seal, new)


EMPTY_EPOCH_TRANSITION = EpochTransitionRecord(-1, 0, (), ())

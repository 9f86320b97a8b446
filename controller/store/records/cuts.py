"""Stream-cut records: the truncation record (head of the stream), retention set and stream cuts.

Formats (after the format-version byte)::

    TruncationRecord   cut:[segment_id:i64 offset:i64]
                       span:[segment_id:i64 creation_time:i64 key_start:f64 key_end:f64 epoch:i32]
                       to_delete:[segment_id:i64] size_till:i64 updating:bool
    RetentionSet       records:[recording_time:i64 recording_size:i64]   (oldest first)
    StreamCutRecord    recording_time:i64 recording_size:i64 cut:[segment_id:i64 offset:i64]

The truncation record keeps no ever-growing "deleted segments" set (Java's does): a segment is
truncated exactly when a segment of the truncation cut overlaps it with a larger id, because
overlapping segments never share an epoch, so the smaller one was sealed before the larger one
was created (see ``stream_cuts.is_truncated``).
"""

from __future__ import annotations

import dataclasses
import struct

from ..codec import Decoder, Encoder
from .epochs import SegmentRecord

FORMAT_VERSION = 1
_SPAN_ROW = struct.Struct(">qqddi")
_RETENTION_ROW = struct.Struct(">qq")


@dataclasses.dataclass(frozen=True, slots=True)
class TruncationRecord:
    """Where the stream starts: the truncation cut, its span, and the pending truncation's work."""

    stream_cut: dict[int, int]  # segment id -> offset; empty: never truncated
    span: dict[SegmentRecord, int]  # each cut segment -> the highest epoch (in the cut's range) holding it
    to_delete: frozenset[int] = frozenset()  # segments the running truncation deletes
    size_till: int = 0  # bytes before the cut, over the stream's whole life
    updating: bool = False  # a truncation is in progress

    @property
    def is_empty(self) -> bool:
        return not self.stream_cut

    def encode(self) -> bytes:
        span_rows = sorted((*segment, epoch) for segment, epoch in self.span.items())
        return (Encoder(FORMAT_VERSION).pairs(self.stream_cut).packed(_SPAN_ROW, span_rows)
                .i64s(sorted(self.to_delete)).i64(self.size_till).boolean(self.updating).to_bytes())

    @classmethod
    def decode(cls, data: bytes) -> TruncationRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.pairs(), {SegmentRecord(*row[:4]): row[4] for row in decoder.packed(_SPAN_ROW)},
                       frozenset(decoder.i64s()), decoder.i64(), decoder.boolean())


EMPTY_TRUNCATION = TruncationRecord({}, {})


@dataclasses.dataclass(frozen=True, slots=True)
class RetentionSet:
    """(recording time, size till the cut) of every stored retention stream cut, oldest first."""

    records: tuple[tuple[int, int], ...] = ()

    def encode(self) -> bytes:
        return Encoder(FORMAT_VERSION).packed(_RETENTION_ROW, self.records).to_bytes()

    @classmethod
    def decode(cls, data: bytes) -> RetentionSet:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(tuple(decoder.packed(_RETENTION_ROW)))


@dataclasses.dataclass(frozen=True, slots=True)
class StreamCutRecord:
    """A stream cut recorded for retention, with the stream size up to it."""

    recording_time: int
    recording_size: int
    stream_cut: dict[int, int]

    def encode(self) -> bytes:
        return (Encoder(FORMAT_VERSION).i64(self.recording_time).i64(self.recording_size)
                .pairs(self.stream_cut).to_bytes())

    @classmethod
    def decode(cls, data: bytes) -> StreamCutRecord:
        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.i64(), decoder.i64(), decoder.pairs())

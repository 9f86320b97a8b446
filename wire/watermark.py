"""Watermarks as Pravega stores them in a stream's mark stream (``_MARK<stream>``).

Theory of operation. The controller's watermarking job appends one *watermark* per round to the
single segment of the stream's mark stream, as an ordinary event (inside the 8-byte event
envelope, ``wire.envelope``). A watermark says: every writer that reports time marks had reached
at least ``lower_time_bound`` (and at most ``upper_time_bound``) when its events ended at or
before ``stream_cut``. Readers compare their positions with the cuts to know their time window.

The payload is Java's ``VersionedSerializer`` form (``io.pravega.shared.watermarks``), big-endian:

========================  ==================================================================
field                     layout
========================  ==================================================================
header                    ``00`` serializer version, ``00`` format version, ``01`` revision
                          count, ``00`` revision id
revision length           int32: bytes of the revision body that follows
lower_time_bound          int64
upper_time_bound          int64
stream cut size n         compact int: < 0x80 one byte; <= 0x3FFF two bytes | 0x8000;
                          < 2^30 four bytes | 0xC0000000
n x segment               a nested SegmentWithRange: header ``00 00 01 00``, int32 length 24,
                          int64 segment id, float64 range low, float64 range high
n x offset                int64 (after each segment)
========================  ==================================================================

Decoding follows Java's rules for compatibility: a revision body may hold more than this
revision's fields (a later writer's additions), which are skipped; later revisions are skipped;
an unknown format version or a body that ends early is an error (``ProtocolError``). Everything
here is pure computation.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from typing import Any

from .errors import ProtocolError

MARK_STREAM_PREFIX = "_MARK"
INTERNAL_STREAM_PREFIX = "_"

_HEADER = bytes((0, 0, 1, 0))  # serializer version 0, format version 0, one revision, revision 0
_INT32 = struct.Struct(">i")
_TIMES = struct.Struct(">qq")
_SEGMENT_BODY = struct.Struct(">qdd")
_OFFSET = struct.Struct(">q")
COMPACT_INT_MAX = 0x3FFF_FFFF


def mark_stream(stream: str) -> str:
    """The name of ``stream``'s mark stream (in the same scope)."""
    return MARK_STREAM_PREFIX + stream


def is_internal_stream(stream: str) -> bool:
    """Mark streams, reader-group streams and other ``_``-names: they get no mark stream of their own."""
    return stream.startswith(INTERNAL_STREAM_PREFIX)


@dataclasses.dataclass(frozen=True)
class SegmentWithRange:
    """A segment of a watermark's stream cut, with the key range it owns: [range_low, range_high)."""

    segment_id: int
    range_low: float
    range_high: float

    def __post_init__(self) -> None:
        if not 0 <= self.segment_id < 2**63:
            raise ValueError(f"segment id {self.segment_id} out of range")
        if not 0.0 <= self.range_low < self.range_high <= 1.0:
            raise ValueError(f"key range [{self.range_low}, {self.range_high}) is not within [0, 1)")

    def overlaps(self, other: SegmentWithRange) -> bool:
        return other.range_low < self.range_high and other.range_high > self.range_low


@dataclasses.dataclass(frozen=True)
class Watermark:
    """One watermark: the time window and the stream cut (segment -> offset) it holds at."""

    lower_time_bound: int
    upper_time_bound: int
    stream_cut: dict[SegmentWithRange, int]

    def __post_init__(self) -> None:
        if not -(2**63) <= self.lower_time_bound <= self.upper_time_bound < 2**63:
            raise ValueError(f"time bounds {self.lower_time_bound} > {self.upper_time_bound} or out of range")
        if len(self.stream_cut) > COMPACT_INT_MAX:
            raise ValueError(f"a stream cut of {len(self.stream_cut)} segments is too large")
        if any(not -(2**63) <= offset < 2**63 for offset in self.stream_cut.values()):
            raise ValueError("a stream cut offset is out of range")


# --------------------------------------------------------------------------- encoding


def push_compact_int(out: bytearray, value: int) -> None:
    """Java's ``writeCompactInt``: 1, 2 or 4 bytes, the two top bits of the first byte saying which."""
    if not 0 <= value <= COMPACT_INT_MAX:
        raise ValueError(f"compact int {value} out of range")
    if value > 0x3FFF:
        out += struct.pack(">I", value | 0xC000_0000)
    elif value > 0x7F:
        out += struct.pack(">H", value | 0x8000)
    else:
        out.append(value)


def _push_versioned(out: bytearray, body: bytes | bytearray) -> None:
    out += _HEADER
    out += _INT32.pack(len(body))
    out += body


def encode_segment_with_range(segment: SegmentWithRange) -> bytes:
    out = bytearray()
    _push_versioned(out, _SEGMENT_BODY.pack(segment.segment_id, segment.range_low, segment.range_high))
    return bytes(out)


def encode_watermark(watermark: Watermark) -> bytes:
    """The event payload (no envelope) of ``watermark``; cut entries in the mapping's order."""
    body = bytearray(_TIMES.pack(watermark.lower_time_bound, watermark.upper_time_bound))
    push_compact_int(body, len(watermark.stream_cut))
    for segment, offset in watermark.stream_cut.items():
        _push_versioned(body, _SEGMENT_BODY.pack(segment.segment_id, segment.range_low, segment.range_high))
        body += _OFFSET.pack(offset)
    out = bytearray()
    _push_versioned(out, body)
    return bytes(out)


# --------------------------------------------------------------------------- decoding


class _Reader:
    """A cursor over bytes that raises ProtocolError instead of reading past its end."""

    def __init__(self, data: bytes | bytearray | memoryview, what: str):
        self._data = memoryview(data).cast("B")
        self._position = 0
        self._what = what

    @property
    def remaining(self) -> int:
        return len(self._data) - self._position

    def take(self, count: int) -> memoryview:
        if count < 0 or count > self.remaining:
            raise ProtocolError(f"{self._what}: {count} bytes wanted, {self.remaining} left")
        start, self._position = self._position, self._position + count
        return self._data[start:self._position]

    def unpack(self, layout: struct.Struct) -> tuple[Any, ...]:
        return layout.unpack(self.take(layout.size))

    def byte(self) -> int:
        return self.take(1)[0]

    def compact_int(self) -> int:
        first = self._data[self._position] if self.remaining else None
        if first is None:
            raise ProtocolError(f"{self._what}: a compact int is missing")
        if first & 0x80 == 0:
            return self.byte()
        if first & 0x40 == 0:
            return int.from_bytes(self.take(2), "big") & 0x3FFF
        return int.from_bytes(self.take(4), "big") & 0x3FFF_FFFF


def _revision_body(reader: _Reader) -> memoryview:
    """The body of revision 0 of a versioned object at the reader's position (later revisions skipped)."""
    serializer_version, format_version, revisions = reader.byte(), reader.byte(), reader.byte()
    if serializer_version != 0 or format_version != 0:
        raise ProtocolError(f"unsupported serialization (serializer {serializer_version}, format {format_version})")
    if revisions < 1 or revisions > 0x7F:
        raise ProtocolError(f"bad revision count {revisions}")
    body = None
    for index in range(revisions):
        revision = reader.byte()
        (length,) = reader.unpack(_INT32)
        if index == 0 and revision != 0:
            raise ProtocolError(f"first revision is {revision}, not 0")
        data = reader.take(length)
        if index == 0:
            body = data
    assert body is not None  # revisions >= 1
    return body


def _decode_segment(reader: _Reader) -> SegmentWithRange:
    body = _Reader(_revision_body(reader), "SegmentWithRange")
    segment_id, low, high = body.unpack(_SEGMENT_BODY)
    if math.isnan(low) or math.isnan(high):
        raise ProtocolError("SegmentWithRange: a NaN key range")
    try:
        return SegmentWithRange(segment_id, low, high)
    except ValueError as error:
        raise ProtocolError(f"SegmentWithRange: {error}") from None


def decode_watermark(data: bytes | bytearray | memoryview) -> Watermark:
    """The watermark in an event payload (no envelope).

    Raises:
        ProtocolError: the bytes are not a watermark (bad header, short body, invalid values,
            a segment named twice) or trailing bytes follow it.
    """
    outer = _Reader(data, "Watermark")
    body = _Reader(_revision_body(outer), "Watermark")
    if outer.remaining:
        raise ProtocolError(f"Watermark: {outer.remaining} bytes after it")
    lower, upper = body.unpack(_TIMES)
    count = body.compact_int()
    cut: dict[SegmentWithRange, int] = {}
    for _ in range(count):
        segment = _decode_segment(body)
        (offset,) = body.unpack(_OFFSET)
        if segment in cut:
            raise ProtocolError(f"Watermark: segment {segment.segment_id} appears twice")
        cut[segment] = offset
    try:
        return Watermark(lower, upper, cut)
    except ValueError as error:
        raise ProtocolError(f"Watermark: {error}") from None


__all__ = ["MARK_STREAM_PREFIX", "SegmentWithRange", "Watermark", "decode_watermark", "encode_segment_with_range",
           "encode_watermark", "is_internal_stream", "mark_stream", "push_compact_int"]

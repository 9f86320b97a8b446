"""Stream cuts: a position in a stream (segment -> offset), in Pravega's text and binary forms.

The text form is Java's ``StreamCut.asText()`` (client reference §7.1)::

    plain = "0:" scope "/" stream ":" numbers ":" epochs ":" offsets      (comma-separated lists)
    text  = base64(gzip(utf8(plain)))                                   ("UNBOUNDED" for the unbounded cut)

so cuts move between this SDK, Spark jobs and Java tools. The binary form is
``StreamCut.toBytes()`` (§7.2): Pravega's versioned serialization with compact
integers. Offsets below zero mark *future* segments (not readable yet).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import struct
import zlib
from collections.abc import Iterable, Mapping

from wire import naming

from .errors import InvalidArgument
from .model import Segment

_TEXT_VERSION = "0"
_UNBOUNDED_TEXT = "UNBOUNDED"
_GZIP_OS_BYTE = 9  # JDK writes OS = 255 (unknown); Python writes 3. Either decodes; we match the JDK.
_SERIALIZER_HEADER = bytes([0, 1, 1, 0])  # format 0, write version 1, one revision, revision 0


class StreamCut:
    """Offsets of a stream's segments (``{segment_id: offset}``), or the unbounded cut.

    Immutable and hashable. ``StreamCut.UNBOUNDED`` means "no bound" (the head for a
    start, no end for an end).
    """

    __slots__ = ("scope", "stream", "_positions")

    UNBOUNDED: StreamCut

    def __init__(self, scope: str, stream: str, positions: Mapping[int, int]):
        self.scope = scope
        self.stream = stream
        self._positions = tuple(sorted((int(segment), int(offset)) for segment, offset in positions.items()))

    @classmethod
    def of_segments(cls, positions: Mapping[Segment, int]) -> StreamCut:
        """A cut from ``{Segment: offset}`` (every segment of one stream)."""
        streams = {(segment.scope, segment.stream) for segment in positions}
        if len(streams) != 1:
            raise InvalidArgument("a stream cut covers exactly one stream")
        (scope, stream), = streams
        return cls(scope, stream, {segment.segment_id: offset for segment, offset in positions.items()})

    @property
    def is_unbounded(self) -> bool:
        return not self.scope and not self._positions

    @property
    def positions(self) -> dict[int, int]:
        """A copy of ``{segment_id: offset}``."""
        return dict(self._positions)

    @property
    def segments(self) -> dict[Segment, int]:
        """``{Segment: offset}``."""
        return {Segment(self.scope, self.stream, segment): offset for segment, offset in self._positions}

    @property
    def scoped_stream(self) -> str:
        return f"{self.scope}/{self.stream}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreamCut):
            return NotImplemented
        return (self.scope, self.stream, self._positions) == (other.scope, other.stream, other._positions)

    def __hash__(self) -> int:
        return hash((self.scope, self.stream, self._positions))

    def __repr__(self) -> str:
        if self.is_unbounded:
            return "StreamCut.UNBOUNDED"
        return f"StreamCut({self.scope!r}, {self.stream!r}, {dict(self._positions)!r})"

    # ------------------------------------------------------------------ text form

    def as_text(self) -> str:
        """Java's ``StreamCut.asText()``: base64 of the gzipped plain form, or ``UNBOUNDED``."""
        if self.is_unbounded:
            return _UNBOUNDED_TEXT
        numbers = ",".join(str(naming.segment_number_of(segment)) for segment, _ in self._positions)
        epochs = ",".join(str(naming.epoch_of(segment)) for segment, _ in self._positions)
        offsets = ",".join(str(offset) for _, offset in self._positions)
        plain = f"{_TEXT_VERSION}:{self.scope}/{self.stream}:{numbers}:{epochs}:{offsets}"
        compressed = bytearray(gzip.compress(plain.encode("utf-8"), compresslevel=6, mtime=0))
        compressed[_GZIP_OS_BYTE] = 0xFF
        return base64.b64encode(bytes(compressed)).decode("ascii")

    @classmethod
    def from_text(cls, text: str) -> StreamCut:
        """Parses :meth:`as_text` output (also Java's).

        Raises:
            InvalidArgument: not a stream cut's text form.
        """
        text = text.strip()
        if text == _UNBOUNDED_TEXT:
            return cls.UNBOUNDED
        try:
            plain = gzip.decompress(base64.b64decode(text, validate=True)).decode("utf-8")
        except (binascii.Error, OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError) as error:
            raise InvalidArgument(f"not a stream cut: {error}") from None
        parts = plain.split(":", 4)
        if len(parts) != 5 or parts[0] != _TEXT_VERSION:
            raise InvalidArgument(f"not a stream cut of version {_TEXT_VERSION}: {plain!r}")
        scope, slash, stream = parts[1].partition("/")
        if not slash or not scope or not stream:
            raise InvalidArgument(f"stream cut names no scope/stream: {parts[1]!r}")
        try:
            numbers, epochs, offsets = (_integers(part) for part in parts[2:])
        except ValueError:
            raise InvalidArgument(f"stream cut lists are not integers: {plain!r}") from None
        if not (len(numbers) == len(epochs) == len(offsets)):
            raise InvalidArgument(f"stream cut lists differ in length: {plain!r}")
        try:
            positions = {naming.segment_id(number, epoch): offset
                         for number, epoch, offset in zip(numbers, epochs, offsets, strict=True)}
        except ValueError as error:
            raise InvalidArgument(f"not a stream cut: {error}") from None
        return cls(scope, stream, positions)

    # ------------------------------------------------------------------ binary form

    def to_bytes(self) -> bytes:
        """Java's ``StreamCut.toBytes()`` (empty for the unbounded cut)."""
        if self.is_unbounded:
            return b""
        body = bytearray(_modified_utf8(f"{self.scope}/{self.stream}"))
        body += _compact_int(len(self._positions))
        for segment, offset in self._positions:
            body += _compact_long(segment)
            body += _compact_signed_long(offset)
        return _SERIALIZER_HEADER + struct.pack(">i", len(body)) + bytes(body)

    @classmethod
    def from_bytes(cls, data: bytes) -> StreamCut:
        """Parses :meth:`to_bytes` output (also Java's, versions 0 and 1).

        Raises:
            InvalidArgument: not a serialized stream cut.
        """
        if not data:
            return cls.UNBOUNDED
        try:
            return _BytesReader(bytes(data)).stream_cut()
        except (IndexError, struct.error, UnicodeDecodeError, ValueError) as error:
            raise InvalidArgument(f"not a serialized stream cut: {error}") from None


StreamCut.UNBOUNDED = StreamCut("", "", {})


def _integers(text: str) -> list[int]:
    return [int(item.strip()) for item in text.split(",")] if text.strip() else []


# ---------------------------------------------------------------------- Pravega's compact encodings


def _modified_utf8(text: str) -> bytes:
    """Java's ``writeUTF``: u16 length + modified UTF-8 (NUL as C0 80, supplementary chars as surrogates)."""
    encoded = text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")
    out = bytearray()
    for char in encoded:
        code = ord(char)
        if 0 < code < 0x80:
            out.append(code)
        elif code < 0x800:
            out += bytes([0xC0 | code >> 6, 0x80 | code & 0x3F])
        else:
            out += bytes([0xE0 | code >> 12, 0x80 | code >> 6 & 0x3F, 0x80 | code & 0x3F])
    if len(out) > 0xFFFF:
        raise InvalidArgument("stream name too long to serialize")
    return struct.pack(">H", len(out)) + bytes(out)


def _compact_int(value: int) -> bytes:
    if not 0 <= value < 0x3FFFFFFF:
        raise InvalidArgument(f"compact int out of range: {value}")
    if value > 0x3FFF:
        return struct.pack(">I", value | 0xC0000000)
    if value > 0x7F:
        return struct.pack(">H", value | 0x8000)
    return bytes([value])


def _compact_long(value: int) -> bytes:
    if not 0 <= value < 0x3FFFFFFFFFFFFFFF:
        raise InvalidArgument(f"compact long out of range: {value}")
    if value > 0x3FFFFFFF:
        return struct.pack(">Q", value | 0xC000000000000000)
    if value > 0x3FFF:
        return struct.pack(">I", value | 0x80000000)
    if value > 0x3F:
        return struct.pack(">H", value | 0x4000)
    return bytes([value])


def _compact_signed_long(value: int) -> bytes:
    if not -0x1FFFFFFFFFFFFFFF <= value < 0x1FFFFFFFFFFFFFFF:
        raise InvalidArgument(f"compact signed long out of range: {value}")
    negative = value < 0
    magnitude = -value - 1 if negative else value
    if magnitude > 0x1FFFFFFF:
        return struct.pack(">Q", magnitude | (0xE000000000000000 if negative else 0x6000000000000000))
    if magnitude > 0x1FFF:
        return struct.pack(">I", magnitude | (0xC0000000 if negative else 0x40000000))
    if magnitude > 0x1F:
        return struct.pack(">H", magnitude | (0xA000 if negative else 0x2000))
    return bytes([magnitude | (0x80 if negative else 0)])


class _BytesReader:
    def __init__(self, data: bytes):
        self._data = data
        self._position = 0

    def _take(self, count: int) -> bytes:
        end = self._position + count
        if end > len(self._data):
            raise ValueError("truncated")
        chunk, self._position = self._data[self._position:end], end
        return chunk

    def stream_cut(self) -> StreamCut:
        serializer_format, version, revisions = self._take(3)
        if serializer_format != 0 or version not in (0, 1) or revisions < 1:
            raise ValueError(f"unknown serialization (format {serializer_format}, version {version})")
        self._take(1)  # revision id 0
        length, = struct.unpack(">i", self._take(4))
        end = self._position + length
        name_length, = struct.unpack(">H", self._take(2))
        scoped = self._take(name_length).decode("utf-8")
        scope, _, stream = scoped.partition("/")
        positions = {}
        for _ in range(self._compact_int()):
            segment = self._compact_long()
            positions[segment] = self._compact_signed_long() if version == 1 else self._compact_long()
        if self._position > end:
            raise ValueError("revision longer than declared")
        return StreamCut(scope, stream, positions)

    def _compact_int(self) -> int:
        first = self._data[self._position]
        if first & 0x80 == 0:
            return self._take(1)[0]
        if first & 0x40 == 0:
            short: int = struct.unpack(">H", self._take(2))[0]
            return short & 0x3FFF
        long: int = struct.unpack(">I", self._take(4))[0]
        return long & 0x3FFFFFFF


    def _compact_long(self) -> int:
        selector = self._data[self._position] >> 6
        size = (1, 2, 4, 8)[selector]
        value = int.from_bytes(self._take(size), "big")
        return value & ((1 << (8 * size - 2)) - 1)

    def _compact_signed_long(self) -> int:
        first = self._data[self._position]
        negative = bool(first & 0x80)
        size = (1, 2, 4, 8)[(first >> 5) & 0x3]
        magnitude = int.from_bytes(self._take(size), "big") & ((1 << (8 * size - 3)) - 1)
        return -magnitude - 1 if negative else magnitude


def parse_stream_cut(value: StreamCut | str | bytes) -> StreamCut:
    """A StreamCut from itself, its text form, or its binary form. Raises InvalidArgument."""
    if isinstance(value, StreamCut):
        return value
    if isinstance(value, str):
        return StreamCut.from_text(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return StreamCut.from_bytes(bytes(value))
    raise InvalidArgument(f"not a stream cut: {value!r}")


def cuts_by_stream(cuts: Iterable[StreamCut]) -> dict[str, StreamCut]:
    """``{"scope/stream": cut}``; raises InvalidArgument if two cuts name one stream."""
    result: dict[str, StreamCut] = {}
    for cut in cuts:
        if cut.scoped_stream in result:
            raise InvalidArgument(f"two stream cuts for {cut.scoped_stream}")
        result[cut.scoped_stream] = cut
    return result

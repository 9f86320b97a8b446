"""Load reports: what a segment store tells the controller about hot and cold segments (sans-IO).

Theory of operation. Each segment container measures the rate-policy segments it owns and appends
what it finds to its own *report segment*, ``_system/containers/load_reports_<container id>``
(``wire.naming.load_report_segment_name``; pinned to that container, so appending is local). The
controller tails those few segments and scales from what they say. A report is Pravega's
``AutoScaleEvent`` in Tributary's own encoding: the segment (scope, stream, segment id), the
direction (UP: split it, DOWN: it is cold), when the store decided it, how many pieces an UP asks
for, and whether a DOWN is *silent* (the segment saw no traffic for the idle window; the controller
keeps such a mark until the segment is gone, instead of for a while).

Record layout (big-endian), records back to back in the segment::

    length:i32                         bytes of the body that follows (REPORT_SIZE_MAX at most)
    body:  version:u8                  FORMAT_VERSION (1); a newer version may only append fields
           direction:u8                0 UP, 1 DOWN
           silent:u8                   0 or 1 (DOWN only)
           splits:i32                  UP: pieces asked for (>= 2); DOWN: 0
           timestamp_ms:i64            the store's wall clock when it decided
           segment_id:i64              epoch << 32 | number
           scope:u16 + UTF-8, stream:u16 + UTF-8

The segment store's log checksums what it stores, so records carry no checksum. A reader feeds
whatever bytes it read to :class:`ReportSplitter`, which returns the complete reports and keeps an
incomplete tail for the next read; malformed bytes raise ``ProtocolError``.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from collections.abc import Iterable

from .errors import ProtocolError
from .fields import BytesLike

FORMAT_VERSION = 1
REPORT_SIZE_MAX = 4096  # a body: fixed fields + two names of at most 1,020 UTF-8 bytes each, with room to grow
NAME_BYTES_MAX = 1020
_LENGTH = struct.Struct(">i")
_FIXED = struct.Struct(">BBBiqq")
_NAME_LENGTH = struct.Struct(">H")


class Direction(enum.IntEnum):
    UP = 0  # hot: split the segment
    DOWN = 1  # cold: merge it with cold neighbours


@dataclasses.dataclass(frozen=True, slots=True)
class LoadReport:
    """One hot or cold segment, as a segment store decided at ``timestamp_ms``."""

    scope: str
    stream: str
    segment_id: int
    direction: Direction
    timestamp_ms: int
    splits: int = 0  # UP: how many pieces the load calls for
    silent: bool = False  # DOWN: no traffic at all for the idle window

    def __post_init__(self) -> None:
        if not 0 <= self.segment_id < 2**63:
            raise ValueError(f"segment id {self.segment_id} out of range")
        if not -2**63 <= self.timestamp_ms < 2**63:
            raise ValueError(f"timestamp {self.timestamp_ms} out of range")
        if not 0 <= self.splits < 2**31:
            raise ValueError(f"splits {self.splits} out of range")
        for name in (self.scope, self.stream):
            if len(name.encode("utf-8", "surrogatepass")) > NAME_BYTES_MAX:
                raise ValueError(f"name of more than {NAME_BYTES_MAX} bytes: {name[:40]!r}...")

    @property
    def stream_key(self) -> tuple[str, str]:
        return self.scope, self.stream


def encode_report(report: LoadReport) -> bytes:
    """One record: the length prefix and the body."""
    scope = report.scope.encode("utf-8", "surrogatepass")
    stream = report.stream.encode("utf-8", "surrogatepass")
    body = b"".join((_FIXED.pack(FORMAT_VERSION, int(report.direction), int(report.silent), report.splits,
                                 report.timestamp_ms, report.segment_id),
                     _NAME_LENGTH.pack(len(scope)), scope, _NAME_LENGTH.pack(len(stream)), stream))
    return _LENGTH.pack(len(body)) + body


def encode_reports(reports: Iterable[LoadReport]) -> bytes:
    """Records back to back (what one append of a report segment carries)."""
    return b"".join(encode_report(report) for report in reports)


def decode_body(body: BytesLike) -> LoadReport:
    """One record's body. Raises ProtocolError."""
    view = memoryview(body)
    if len(view) < _FIXED.size:
        raise ProtocolError(f"load report of {len(view)} bytes is too short")
    version, direction, silent, splits, timestamp_ms, segment_id = _FIXED.unpack_from(view, 0)
    if version < 1:
        raise ProtocolError(f"load report of format version {version}")
    if direction not in (Direction.UP, Direction.DOWN) or silent > 1:
        raise ProtocolError(f"load report with direction {direction} and silent flag {silent}")
    position = _FIXED.size
    scope, position = _name(view, position)
    stream, position = _name(view, position)
    if position != len(view) and version == FORMAT_VERSION:
        raise ProtocolError(f"load report with {len(view) - position} bytes left over")
    try:
        return LoadReport(scope, stream, segment_id, Direction(direction), timestamp_ms, splits, bool(silent))
    except ValueError as error:
        raise ProtocolError(f"load report out of range: {error}") from None


def _name(view: memoryview, position: int) -> tuple[str, int]:
    if len(view) - position < _NAME_LENGTH.size:
        raise ProtocolError("load report cut inside a name")
    (length,) = _NAME_LENGTH.unpack_from(view, position)
    position += _NAME_LENGTH.size
    if length > NAME_BYTES_MAX or len(view) - position < length:
        raise ProtocolError(f"load report name of {length} bytes")
    try:
        return bytes(view[position:position + length]).decode("utf-8", "surrogatepass"), position + length
    except UnicodeDecodeError as error:
        raise ProtocolError(f"load report name is not UTF-8: {error}") from None


def split_reports(data: BytesLike) -> tuple[list[LoadReport], int]:
    """The complete records at the front of ``data``.

    Returns:
        (the reports, how many bytes they took; the rest is an incomplete record).
    Raises:
        ProtocolError: a length out of range or a malformed body.
    """
    ended, consumed = split_records(data)
    return [report for _, report in ended], consumed


def split_records(data: BytesLike) -> tuple[list[tuple[int, LoadReport]], int]:
    """Like ``split_reports``, each report with the offset in ``data`` where its record ends."""
    view = memoryview(data)
    ended: list[tuple[int, LoadReport]] = []
    position, size = 0, len(view)
    while size - position >= _LENGTH.size:
        (length,) = _LENGTH.unpack_from(view, position)
        if not _FIXED.size <= length <= REPORT_SIZE_MAX:
            raise ProtocolError(f"load report of length {length} at offset {position}")
        end = position + _LENGTH.size + length
        if end > size:
            break
        ended.append((end, decode_body(view[position + _LENGTH.size:end])))
        position = end
    return ended, position


class ReportSplitter:
    """Cuts the bytes of consecutive reads of a report segment into reports (keeps an incomplete tail).

    ``position`` counts the bytes of complete records so far: a reader that started the splitter at
    segment offset ``o`` finds the record ending at ``o + end`` for each ``end`` ``feed_records`` gives.
    """

    def __init__(self) -> None:
        self._pending = b""
        self.position = 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes of a record not yet complete."""
        return len(self._pending)

    def feed(self, data: BytesLike) -> list[LoadReport]:
        """The reports completed by ``data``. Raises ProtocolError (the splitter is then unusable)."""
        return [report for _, report in self.feed_records(data)]

    def feed_records(self, data: BytesLike) -> list[tuple[int, LoadReport]]:
        """The reports completed by ``data``, each with where its record ends (counted as ``position``)."""
        buffer = self._pending + bytes(data) if self._pending else data
        ended, consumed = split_records(buffer)
        self._pending = bytes(memoryview(buffer)[consumed:])
        base = self.position
        self.position += consumed
        return [(base + end, report) for end, report in ended]

"""Reading watermarks from a stream's mark segment (the one segment of ``_MARK<stream>``), for the
SDK's readers and the controller's watermarking job alike.

Watermarks are events (``wire.watermark`` payloads in event envelopes) appended one after another.
``marks_between`` reads the bytes from an offset up to a length learned beforehand -- never at the
segment's end, where the store would hold the read until data came -- in reads of at most
``read_size`` bytes, and yields each whole watermark with its offset and the offset after it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from wire import naming
from wire.envelope import ENVELOPE_HEADER, ENVELOPE_HEADER_SIZE
from wire.errors import ProtocolError
from wire.watermark import Watermark, decode_watermark, mark_stream

from .errors import InvalidEvent
from .segment_store_client import SegmentStoreClient

READ_SIZE_DEFAULT = 64 * 1024
MARK_BYTES_MAX = 16 * 1024 * 1024  # one watermark of ~400,000 segments; anything longer is corrupt


def mark_segment(scope: str, stream: str, segment_id: int = 0) -> str:
    """The qualified name of ``scope/stream``'s mark segment. The mark stream never scales, so its one
    segment is 0 -- unless the stream was deleted and created again, when segment numbers start above
    the old ones: ask for the mark stream's current segment to know."""
    return naming.stream_segment_name(scope, mark_stream(stream), segment_id)


async def segment_bounds(client: SegmentStoreClient, segment: str) -> tuple[int, int]:
    """(start offset, length) of the segment. Raises NoSuchSegment."""
    info = await client.segment_info(segment)
    return info.start_offset, info.write_offset


async def marks_between(client: SegmentStoreClient, segment: str, offset: int, end: int,
                        read_size: int = READ_SIZE_DEFAULT) -> AsyncIterator[tuple[int, int, Watermark]]:
    """Yields (offset, offset after it, watermark) for each watermark in [offset, end).

    ``offset`` must be where a watermark starts (or ``end``). Bytes after the last whole watermark
    before ``end`` are left for a later call.

    Raises:
        InvalidEvent: the bytes are not watermarks in event envelopes.
        SegmentTruncated / NoSuchSegment: as the store answers.
    """
    buffer = bytearray()
    buffer_offset = offset
    read_offset = offset
    while True:
        while len(buffer) >= ENVELOPE_HEADER_SIZE:
            type_code, length = ENVELOPE_HEADER.unpack_from(buffer)
            if type_code != 0 or not 0 <= length <= MARK_BYTES_MAX:
                raise InvalidEvent(f"{segment} at {buffer_offset}: not a watermark event "
                                   f"(type {type_code}, length {length})")
            size = ENVELOPE_HEADER_SIZE + length
            if len(buffer) < size:
                break
            try:
                watermark = decode_watermark(memoryview(buffer)[ENVELOPE_HEADER_SIZE:size])
            except ProtocolError as error:
                raise InvalidEvent(f"{segment} at {buffer_offset}: {error}") from None
            yield buffer_offset, buffer_offset + size, watermark
            del buffer[:size]
            buffer_offset += size
        if read_offset >= end:
            return
        reply = await client.read_segment(segment, read_offset, min(read_size, end - read_offset))
        data = bytes(reply.data)[:end - read_offset]
        if not data:
            return
        buffer += data
        read_offset += len(data)

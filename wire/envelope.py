"""The event envelope writers put around each event inside appended data (§4.1).

An event stored in a segment is an Event frame serialized in place:
``00 00 00 00``, ``length:i32``, then ``length`` payload bytes. Events sit back
to back. Byte streams store raw bytes without envelopes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, MutableSequence

from .constants import EVENT_TYPE_CODE, FRAME_HEADER_SIZE, MAX_PAYLOAD_SIZE
from .errors import ProtocolError
from .fields import BytesLike

ENVELOPE_HEADER = struct.Struct(">ii")
ENVELOPE_HEADER_SIZE = FRAME_HEADER_SIZE


def envelope_header(payload_length: int) -> bytes:
    """The 8-byte header of an event of ``payload_length`` bytes."""
    if not 0 <= payload_length < 2**31:
        raise ValueError(f"event length {payload_length} out of range")
    return ENVELOPE_HEADER.pack(EVENT_TYPE_CODE, payload_length)


def envelope(payload: BytesLike) -> bytes:
    """One event with its envelope (one copy of the payload)."""
    return b"".join((envelope_header(len(payload)), payload))


def envelope_all(payloads: Iterable[BytesLike]) -> bytes:
    """Many events, each in its envelope, back to back (one copy of each payload)."""
    parts: list[BytesLike] = []
    for payload in payloads:
        parts.append(ENVELOPE_HEADER.pack(EVENT_TYPE_CODE, len(payload)))
        parts.append(payload)
    return b"".join(parts)


class EventSplitter:
    """Splits a stream of enveloped events, fed in any split, into event payloads.

    Sans-IO: feed it the data of consecutive SegmentRead replies; it returns the
    payloads of the events completed so far (memoryview slices where an event
    lies within one fed chunk, otherwise a joined copy).
    """

    def __init__(self, max_event_size: int = MAX_PAYLOAD_SIZE):
        self._max_event_size = max_event_size
        self._pending = bytearray()

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an event not yet complete."""
        return len(self._pending)

    def feed(self, data: BytesLike) -> list[memoryview]:
        """Returns the payloads completed by ``data``.

        Raises:
            ProtocolError: an envelope with a type other than 0 or a bad length.
        """
        view = memoryview(data)
        if self._pending:
            self._pending += view
            view = memoryview(bytes(self._pending))
            self._pending.clear()
        payloads, consumed = split_events(view, self._max_event_size)
        if consumed < len(view):
            self._pending += view[consumed:]
        return payloads


def split_events(data: BytesLike, max_event_size: int = MAX_PAYLOAD_SIZE) -> tuple[list[memoryview], int]:
    """Splits whole enveloped events off the front of ``data``.

    Returns:
        (payloads as memoryview slices, number of bytes consumed).
    Raises:
        ProtocolError: an envelope with a type other than 0 or a bad length.
    """
    view = memoryview(data)
    payloads: list[memoryview] = []
    position, size = 0, len(view)
    unpack = ENVELOPE_HEADER.unpack_from
    while size - position >= ENVELOPE_HEADER_SIZE:
        type_code, length = unpack(view, position)
        if type_code != EVENT_TYPE_CODE:
            raise ProtocolError(f"event envelope of type {type_code} at offset {position}")
        if not 0 <= length <= max_event_size:
            raise ProtocolError(f"event envelope of length {length} at offset {position}")
        end = position + ENVELOPE_HEADER_SIZE + length
        if end > size:
            break
        payloads.append(view[position + ENVELOPE_HEADER_SIZE:end])
        position = end
    return payloads, position


def envelope_bounds(data: BytesLike, position: int, maximum: int, bounds: MutableSequence[int]) -> tuple[int, int]:
    """Appends to ``bounds`` (an ``array('q')``), for each complete event of ``data[position:]``, the
    position of its envelope and of its payload. Stops at the first incomplete event, at an envelope
    that is not an event, or at one longer than ``maximum`` (the caller looks at what is there).

    For bulk consumers (batch reads, Arrow) that want no object per event. The SDK's event reader
    keeps its own single loop (``clients.reader.segment_reader.cut_events``, building its tuples
    from these bounds instead costs it 0.25 us more per event, measured), and :func:`split_events`
    is the strict form for whole buffers.

    Returns:
        (the position after the last complete event, the bytes an incomplete event there needs, or 0).
    """
    size = len(data)
    unpack = ENVELOPE_HEADER.unpack_from
    append = bounds.append
    while size - position >= ENVELOPE_HEADER_SIZE:
        type_code, length = unpack(data, position)
        if type_code != EVENT_TYPE_CODE or length < 0 or length > maximum:
            return position, 0
        end = position + ENVELOPE_HEADER_SIZE + length
        if end > size:
            return position, ENVELOPE_HEADER_SIZE + length
        append(position)
        append(position + ENVELOPE_HEADER_SIZE)
        position = end
    return position, 0

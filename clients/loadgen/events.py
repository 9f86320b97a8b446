"""The loadgen's event format: a fixed header padded to the event size.

Every event starts with ``HEADER_SIZE`` bytes, big-endian:

====== ===== =====================================================================
offset bytes field
====== ===== =====================================================================
0      4     magic ``b"TLG\\x01"`` (loadgen events, format 1)
4      4     writer id (random per run and writer, so two runs never collide)
8      4     key index (``NO_KEY`` when events carry no routing key)
12     8     sequence number, per writer and key (from 0, no holes)
20     8     wall-clock send time, ``time.time_ns()``
====== ===== =====================================================================

The rest of the event is zero padding up to ``--event-size``.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

MAGIC = b"TLG\x01"
_HEADER = struct.Struct(">4sIIQQ")
HEADER_SIZE = _HEADER.size
"""Bytes of the header; the smallest event the loadgen can write."""
NO_KEY = 0xFFFFFFFF
"""The key index of events written without a routing key."""


class Header(NamedTuple):
    """A decoded event header."""

    writer: int
    key: int
    sequence: int
    sent_ns: int


class EventCodec:
    """Makes events of one size and reads their headers back."""

    def __init__(self, event_size: int):
        if event_size < HEADER_SIZE:
            raise ValueError(f"events need at least {HEADER_SIZE} bytes for the header, not {event_size}")
        self.event_size = event_size
        self._padding = bytes(event_size - HEADER_SIZE)

    def encode(self, writer: int, key: int, sequence: int, sent_ns: int) -> bytes:
        """The event bytes for this header (``event_size`` long)."""
        return _HEADER.pack(MAGIC, writer, key, sequence, sent_ns) + self._padding


def key_name(key: int) -> str | None:
    """The routing key of key index ``key`` (None for ``NO_KEY``)."""
    return None if key == NO_KEY else f"key-{key}"


def decode(data: bytes | bytearray) -> Header | None:
    """The header of a loadgen event, or None if ``data`` is not one (too short, wrong magic)."""
    if len(data) < HEADER_SIZE:
        return None
    magic, writer, key, sequence, sent_ns = _HEADER.unpack_from(data)
    if magic != MAGIC:
        return None
    return Header(writer, key, sequence, sent_ns)


__all__ = ["HEADER_SIZE", "MAGIC", "NO_KEY", "EventCodec", "Header", "decode", "key_name"]

"""On-disk record format of a log store's journal files (docs/replicated-log.md), sans-IO.

A journal file holds records back to back from offset 0; files are appended, never preallocated
or reused, and each group of records is fdatasync'd before any of them is acknowledged. All
integers are little-endian.

    offset  size  field
    ------  ----  -----------------------------------------------------------------
         0     8  checksum            xxh3_64 (seed 0) of bytes [8, 48 + length): every header
                                      field below, then the payload
         8     4  magic               b"TJr" and the format version byte, currently 1
        12     1  kind                1 ADD (an entry), 2 FENCE (the ledger takes no more adds
                                      from its writer), 3 DELETE (the ledger is gone)
        13     3  zero
        16     8  ledger              ledger id (u64)
        24     8  entry               entry id (i64); -1 for FENCE and DELETE
        32     8  last_add_confirmed  the writer's LAC when it sent the entry (i64; -1: none)
        40     4  length              payload length (u32); 0 for FENCE and DELETE
        44     4  zero
        48     n  payload

Torn tail versus corruption. Only the newest file can end in a partly written group (a crash
before its fdatasync). A scan stops at the first spot that is not a valid record; if only zeros
follow, that is the end of the data (files are preallocated with zeros). In the newest
file, if no valid record follows that spot, it is a torn tail: the records before it are the
file's content and the rest is cut off (it was never acknowledged). If a valid record follows,
or the file is not the newest, the damage hit synced data: ``JournalCorrupted``.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

import xxhash

from wire.fields import BytesLike

MAGIC = b"TJr\x01"
HEADER_SIZE = 48
CHECKSUM_SIZE = 8
NO_ENTRY = -1
_CHECKSUM = struct.Struct("<Q")
_FIELDS = struct.Struct("<4sB3xQqqI4x")  # magic, kind, ledger, entry, last_add_confirmed, length


class Kind(enum.IntEnum):
    ADD = 1
    FENCE = 2
    DELETE = 3


class JournalCorrupted(Exception):
    """Bytes that were made durable no longer read back as records."""


class Record(NamedTuple):
    kind: Kind
    ledger: int
    entry: int
    last_add_confirmed: int
    payload_offset: int  # where the payload starts in the file
    length: int

    @property
    def end(self) -> int:
        return self.payload_offset + self.length


def encode(kind: Kind, ledger: int, entry: int = NO_ENTRY, last_add_confirmed: int = NO_ENTRY,
           payload: BytesLike = b"") -> list[BytesLike]:
    """The record's header and payload, to be written back to back (no copy of the payload)."""
    fields = _FIELDS.pack(MAGIC, kind, ledger, entry, last_add_confirmed, len(payload))
    hasher = xxhash.xxh3_64(fields)
    hasher.update(payload)
    header = _CHECKSUM.pack(hasher.intdigest()) + fields
    return [header, payload] if len(payload) else [header]


def scan(data: BytesLike, newest: bool) -> tuple[list[Record], int]:
    """The records of one file's bytes and where the valid ones end.

    Raises:
        JournalCorrupted: damage that a crash cannot explain (see the module docstring).
    """
    view = memoryview(data).cast("B")
    records: list[Record] = []
    offset = 0
    while offset < len(view):
        record = _record_at(view, offset)
        if record is None:
            break
        records.append(record)
        offset = record.end
    if offset < len(view) and view[offset:].tobytes().rstrip(b"\0") \
            and (not newest or _valid_record_after(view, offset)):
        raise JournalCorrupted(f"journal damaged at offset {offset} of {len(view)} bytes")
    return records, offset


def _record_at(view: memoryview, offset: int) -> Record | None:
    if offset + HEADER_SIZE > len(view):
        return None
    magic, kind, ledger, entry, last_add_confirmed, length = _FIELDS.unpack_from(view, offset + CHECKSUM_SIZE)
    end = offset + HEADER_SIZE + length
    if magic != MAGIC or kind not in _KINDS or end > len(view):
        return None
    (checksum,) = _CHECKSUM.unpack_from(view, offset)
    if xxhash.xxh3_64_intdigest(view[offset + CHECKSUM_SIZE:end]) != checksum:
        return None
    return Record(Kind(kind), ledger, entry, last_add_confirmed, offset + HEADER_SIZE, length)


def _valid_record_after(view: memoryview, offset: int) -> bool:
    data = bytes(view)  # only after damage was found: one copy to search in
    position = data.find(MAGIC, offset + 1)
    while position != -1:
        if position >= CHECKSUM_SIZE and _record_at(view, position - CHECKSUM_SIZE) is not None:
            return True
        position = data.find(MAGIC, position + 1)
    return False


_KINDS = frozenset(int(kind) for kind in Kind)

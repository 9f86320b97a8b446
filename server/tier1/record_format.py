"""On-disk record format of the local log files (habit 10: documented before it was coded).

A log file is a preallocated run of bytes holding records back to back from offset 0. Each
record is a 32-byte header followed by its payload; there is no padding and no file header.
All integers are little-endian.

    offset  size  field
    ------  ----  -----------------------------------------------------------------
         0     8  checksum     xxh3_64 (seed 0) of bytes [8, 32 + length) of the record:
                               every header field below, then the payload
         8     4  magic        b"TLg" followed by the format version byte, currently 1
        12     4  length       payload length in bytes (u32)
        16     8  sequence     the record's LogAddress sequence (u64); the first record of a
                               log is 1 and each record is exactly one more than the previous
        24     4  epoch        epoch of the owner that wrote the record (u32)
        28     4  batch_index  how many records precede this one in its write batch (u32),
                               so ``sequence - batch_index`` is the batch's first sequence
        32     n  payload      ``length`` bytes, opaque to the log

What a valid record is. A reader that expects sequence S, and last saw epoch E_prev, at offset O
of a file accepts the record there only if: the magic matches, the record fits inside the file,
sequence == S, E_prev <= epoch <= the log's current epoch, and the checksum matches. Anything
else ends the file's records at O. Zeros never look valid (the magic is not zero), but the reader
never relies on zeros: files are recycled, so the bytes after the tail are usually stale records
of an earlier lap (smaller sequences) or of an earlier owner's torn tail (smaller epoch).

Torn tail versus corruption. The writer syncs batch k before it writes batch k+1, so only the
last batch written before a crash can be partly on disk, in any order of its pages. After the
first invalid spot at offset O (expected sequence S), the reader searches the rest of the file
for a valid record whose batch began after S (``sequence - batch_index > S``):

* none: a torn tail. The reader drops everything from O on, and the next append overwrites the
  file from O (the end of the last good record).
* one: a later batch was written, so the batch holding S had been synced and is now damaged.
  The reader raises ``LogCorrupted`` naming the file, O, and the number of dropped bytes (up to
  that later record).

Damage inside the very last batch is indistinguishable from a torn write and is treated as one.
A file that is not the last one must end exactly at the record before the next file's first
sequence; ending earlier is ``LogCorrupted`` too (the writer syncs a file before rolling over).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import xxhash

MAGIC = b"TLg\x01"
HEADER_SIZE = 32
CHECKSUM_SIZE = 8  # the checksum covers everything from here on
EPOCH_MAX = 2**32 - 1
LENGTH_MAX = 2**32 - 1

_CHECKSUM = struct.Struct("<Q")
_FIELDS = struct.Struct("<4sIQII")  # magic, length, sequence, epoch, batch_index
_HEADER = struct.Struct("<Q4sIQII")
MAGIC_OFFSET = CHECKSUM_SIZE

checksum_of = xxhash.xxh3_64_intdigest


class RecordHeader(NamedTuple):
    checksum: int
    magic: bytes
    length: int
    sequence: int
    epoch: int
    batch_index: int

    @property
    def batch_first_sequence(self) -> int:
        return self.sequence - self.batch_index


def pack_fields_into(buffer, offset: int, length: int, sequence: int, epoch: int, batch_index: int) -> None:
    """Writes every header field except the checksum at ``buffer[offset:offset + 32]``."""
    _FIELDS.pack_into(buffer, offset + CHECKSUM_SIZE, MAGIC, length, sequence, epoch, batch_index)


def pack_checksum_into(buffer, offset: int, checksum: int) -> None:
    _CHECKSUM.pack_into(buffer, offset, checksum)


def encode_record(payload: bytes, sequence: int, epoch: int, batch_index: int = 0) -> bytes:
    """One whole record as bytes; used by tests and tools (the writer encodes in place instead)."""
    record = bytearray(HEADER_SIZE + len(payload))
    pack_fields_into(record, 0, len(payload), sequence, epoch, batch_index)
    record[HEADER_SIZE:] = payload
    pack_checksum_into(record, 0, checksum_of(memoryview(record)[CHECKSUM_SIZE:]))
    return bytes(record)


def parse_header(buffer, offset: int = 0) -> RecordHeader:
    """Unpacks the 32 header bytes at ``offset`` without judging them."""
    return RecordHeader(*_HEADER.unpack_from(buffer, offset))


def checksum_matches(header: RecordHeader, record: memoryview) -> bool:
    """Whether ``record`` (header and payload, exactly 32 + length bytes) carries a correct checksum."""
    return checksum_of(record[CHECKSUM_SIZE:]) == header.checksum

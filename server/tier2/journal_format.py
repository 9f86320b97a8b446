"""On-Tier-2 format of the system journal: batches and snapshots (design §5.9).

The journal is physical: a batch carries the after-image of every record a committed
transaction changed (or the key it removed), so replaying batches in order rebuilds the exact
pinned layout, and replaying a batch twice changes nothing.

A journal file is a sequence of framed batches (little-endian)::

    u32 payload length   u32 CRC-32 of the payload   payload
    payload = u8 version (1)  u32 entry count  entries
    entry   = u8 op 1 (put)    u32 length  record (records.encode)
            | u8 op 2 (remove) u16 length  key (UTF-8)

A reader stops at the first frame that is short or whose CRC does not match: that is the torn
tail of a write that failed or was cut by a crash. The writer never appends after such a tail (it
moves to a new file and snapshots first), so nothing valid follows a bad frame in the same file.

A snapshot is one whole chunk::

    "SLTS" u8 version (1)  u64 epoch  u64 snapshot index  u64 first journal file to replay
    u32 record count  (u32 length, record)*  u32 CRC-32 of every byte before it

A snapshot whose CRC does not match, or that is short, is invalid as a whole.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from . import records
from .errors import StorageCorrupted
from .records import Record

FORMAT_VERSION = 1
_OP_PUT = 1
_OP_REMOVE = 2

_FRAME = struct.Struct("<II")
_BATCH_HEADER = struct.Struct("<BI")
_SNAPSHOT_MAGIC = b"SLTS"
_SNAPSHOT_HEADER = struct.Struct("<4sBQQQI")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_U8 = struct.Struct("<B")

Changes = Mapping[str, "Record | None"]  # key -> after-image, None for a removed key


class Snapshot(NamedTuple):
    epoch: int
    # Shadows tuple.index on purpose (callers read ``.index``; nothing calls the tuple method on these).
    index: int  # type: ignore[assignment]
    next_journal_file: int  # journal files of ``epoch`` from this index on follow the snapshot
    records: dict[str, Record]


def encode_batch(changes: Changes) -> bytes:
    entries = []
    for key, record in changes.items():
        if record is None:
            encoded_key = key.encode()
            entries += [_U8.pack(_OP_REMOVE), _U16.pack(len(encoded_key)), encoded_key]
        else:
            encoded = records.encode(record)
            entries += [_U8.pack(_OP_PUT), _U32.pack(len(encoded)), encoded]
    payload = b"".join([_BATCH_HEADER.pack(FORMAT_VERSION, len(changes)), *entries])
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def decode_batches(data: bytes) -> Iterator[dict[str, Record | None]]:
    """The batches of one journal file, in order, up to the first torn or damaged frame."""
    view = memoryview(data)
    position = 0
    while position + _FRAME.size <= len(view):
        length, checksum = _FRAME.unpack_from(view, position)
        payload = view[position + _FRAME.size:position + _FRAME.size + length]
        if len(payload) < length or zlib.crc32(payload) != checksum:
            return
        yield _decode_batch(payload)
        position += _FRAME.size + length


def _decode_batch(payload: memoryview) -> dict[str, Record | None]:
    version, count = _BATCH_HEADER.unpack_from(payload)
    if version != FORMAT_VERSION:
        raise StorageCorrupted(f"journal batch format version {version} is not {FORMAT_VERSION}")
    position = _BATCH_HEADER.size
    changes: dict[str, Record | None] = {}
    try:
        for _ in range(count):
            (op,) = _U8.unpack_from(payload, position)
            position += _U8.size
            if op == _OP_PUT:
                (length,) = _U32.unpack_from(payload, position)
                record = records.decode(bytes(payload[position + _U32.size:position + _U32.size + length]))
                changes[record.name] = record
                position += _U32.size + length
            elif op == _OP_REMOVE:
                (length,) = _U16.unpack_from(payload, position)
                changes[bytes(payload[position + _U16.size:position + _U16.size + length]).decode()] = None
                position += _U16.size + length
            else:
                raise StorageCorrupted(f"unknown journal operation {op}")
    except (struct.error, UnicodeDecodeError) as error:
        raise StorageCorrupted(f"malformed journal batch (its checksum matched): {error}") from error
    return changes


def encode_snapshot(snapshot: Snapshot) -> bytes:
    parts = [_SNAPSHOT_HEADER.pack(_SNAPSHOT_MAGIC, FORMAT_VERSION, snapshot.epoch, snapshot.index,
                                   snapshot.next_journal_file, len(snapshot.records))]
    for record in snapshot.records.values():
        encoded = records.encode(record)
        parts += [_U32.pack(len(encoded)), encoded]
    body = b"".join(parts)
    return body + _U32.pack(zlib.crc32(body))


def decode_snapshot(data: bytes) -> Snapshot:
    """Raises StorageCorrupted if ``data`` is not one whole, intact snapshot."""
    if len(data) < _SNAPSHOT_HEADER.size + _U32.size:
        raise StorageCorrupted("snapshot too short")
    body, (checksum,) = memoryview(data)[:-_U32.size], _U32.unpack_from(data, len(data) - _U32.size)
    if zlib.crc32(body) != checksum:
        raise StorageCorrupted("snapshot checksum mismatch")
    magic, version, epoch, index, next_file, count = _SNAPSHOT_HEADER.unpack_from(body)
    if magic != _SNAPSHOT_MAGIC or version != FORMAT_VERSION:
        raise StorageCorrupted(f"not a version {FORMAT_VERSION} snapshot")
    position = _SNAPSHOT_HEADER.size
    layout: dict[str, Record] = {}
    try:
        for _ in range(count):
            (length,) = _U32.unpack_from(body, position)
            record = records.decode(bytes(body[position + _U32.size:position + _U32.size + length]))
            layout[record.name] = record
            position += _U32.size + length
    except struct.error as error:
        raise StorageCorrupted(f"malformed snapshot (its checksum matched): {error}") from error
    return Snapshot(epoch, index, next_file, layout)

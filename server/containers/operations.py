"""Container operations as logged decisions, and their binary record format.

An operation is logged after validation, with every value it depends on
decided (offsets, lengths, final attribute values). Replay applies it without
re-checking anything: the log records decisions, not requests.

Frame format (one Tier-1 log record holds one frame of operations)::

    frame   = version:u8 (1) | timestamp_ms:i64 | first_sequence:i64 | count:u32 | op*
    op      = type:u8 | body_length:u32 | body
    attrs   = count:u32 | (attribute_id:16 bytes | value:i64)*

Version 0 frames (written before attribute counts were widened) have ``count:u16`` in ``attrs`` and are
still read; frames are written as version 1.

====  ================  ============================================================
type  operation         body
====  ================  ============================================================
1     Append            segment_id:i64 offset:i64 attrs data (the rest of the body)
2     Seal              segment_id:i64 length:i64
3     Merge             target_id:i64 source_id:i64 target_offset:i64 source_length:i64
                        header_length:u32 header attrs
4     CreateSegment     segment_id:i64 segment_type:u8 name_length:u16 name(utf-8) attrs
6     UpdateAttributes  segment_id:i64 attrs
7     Truncate          segment_id:i64 offset:i64
8     Checkpoint        snapshot (see ``state.ContainerState.snapshot``)
10    Delete            segment_id:i64
11    CheckpointPart    number:u32 parts:u32 data: part ``number`` (from 0) of ``parts`` of a snapshot
                        too large for one record (each part alone in a frame, the parts in
                        consecutive records; the snapshot is their concatenation)
====  ================  ============================================================

Type ids are stable and never reused. The timestamp is the wall-clock time the
frame was built; replay uses it for ``last_modified`` so that replay is
deterministic. Checksums are the log's business (each log record is checked).
"""

from __future__ import annotations

import struct
import uuid
from typing import TYPE_CHECKING, NamedTuple, TypeAlias

if TYPE_CHECKING:
    from wire.fields import BytesLike

FRAME_VERSION = 1
_FRAME_VERSIONS = (0, 1)
_FRAME_HEADER = struct.Struct(">BqqI")
_OP_HEADER = struct.Struct(">BI")
ATTRIBUTE_COUNT = struct.Struct(">I")
ATTRIBUTE_COUNT_V0 = struct.Struct(">H")  # frames and snapshots of version 0
_PART = struct.Struct(">II")
_ATTR = struct.Struct(">16sq")
_Q = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_QQQQ = struct.Struct(">qqqq")
_CREATE = struct.Struct(">qBH")
_HEADER_LENGTH = struct.Struct(">I")


class CorruptFrame(Exception):
    """A log record that does not parse as a frame of operations (data corruption)."""


class Append(NamedTuple):
    segment_id: int
    offset: int
    data: BytesLike
    attributes: dict[uuid.UUID, int]


class Seal(NamedTuple):
    segment_id: int
    length: int


class Merge(NamedTuple):
    target_id: int
    source_id: int
    target_offset: int
    source_length: int
    header: BytesLike  # written to the target just before the source's bytes
    attributes: dict[uuid.UUID, int]


class CreateSegment(NamedTuple):
    segment_id: int
    segment_type: int
    name: str
    attributes: dict[uuid.UUID, int]


class UpdateAttributes(NamedTuple):
    segment_id: int
    attributes: dict[uuid.UUID, int]


class Truncate(NamedTuple):
    segment_id: int
    offset: int


class Checkpoint(NamedTuple):
    snapshot: bytes


class Delete(NamedTuple):
    segment_id: int


class CheckpointPart(NamedTuple):
    number: int  # 0, 1, ... of
    parts: int
    data: bytes


Operation: TypeAlias = (Append | Seal | Merge | CreateSegment | UpdateAttributes | Truncate | Checkpoint | Delete
                        | CheckpointPart)

TYPE_IDS = {Append: 1, Seal: 2, Merge: 3, CreateSegment: 4, UpdateAttributes: 6, Truncate: 7, Checkpoint: 8,
            Delete: 10, CheckpointPart: 11}


def checkpoint_operations(snapshot: bytes, part_bytes_max: int) -> list[Checkpoint] | list[CheckpointPart]:
    """A snapshot as the operations that log it: one Checkpoint if it fits ``part_bytes_max``, else parts of at
    most that many bytes each (every one to go alone in its own frame)."""
    if len(snapshot) <= part_bytes_max:
        return [Checkpoint(snapshot)]
    count = -(-len(snapshot) // part_bytes_max)
    return [CheckpointPart(index, count, snapshot[index * part_bytes_max:(index + 1) * part_bytes_max])
            for index in range(count)]


# --------------------------------------------------------------------------- encoding


def encode_attributes(attributes: dict[uuid.UUID, int]) -> bytes:
    parts = [ATTRIBUTE_COUNT.pack(len(attributes))]
    parts.extend(_ATTR.pack(key.bytes, value) for key, value in attributes.items())
    return b"".join(parts)


def encode_frame(timestamp_ms: int, first_sequence: int, operations: list[Operation]) -> list[BytesLike]:
    """Encodes a frame as a list of byte chunks (payloads are included without copying)."""
    parts: list[BytesLike] = [_FRAME_HEADER.pack(FRAME_VERSION, timestamp_ms, first_sequence, len(operations))]
    for operation in operations:
        _encode_operation(operation, parts)
    return parts


def _encode_operation(operation: Operation, parts: list[BytesLike]) -> None:
    kind = type(operation)
    if isinstance(operation, Append):
        fixed = _QQ.pack(operation.segment_id, operation.offset) + encode_attributes(operation.attributes)
        parts.append(_OP_HEADER.pack(1, len(fixed) + len(operation.data)))
        parts.append(fixed)
        parts.append(operation.data)
        return
    if isinstance(operation, Merge):
        fixed = _QQQQ.pack(operation.target_id, operation.source_id, operation.target_offset,
                           operation.source_length) + _HEADER_LENGTH.pack(len(operation.header))
        body = [fixed, bytes(operation.header), encode_attributes(operation.attributes)]
    elif isinstance(operation, Seal):
        body = [_QQ.pack(operation.segment_id, operation.length)]
    elif isinstance(operation, CreateSegment):
        name = operation.name.encode("utf-8", "surrogatepass")
        body = [_CREATE.pack(operation.segment_id, operation.segment_type, len(name)), name,
                encode_attributes(operation.attributes)]
    elif isinstance(operation, UpdateAttributes):
        body = [_Q.pack(operation.segment_id), encode_attributes(operation.attributes)]
    elif isinstance(operation, Truncate):
        body = [_QQ.pack(operation.segment_id, operation.offset)]
    elif isinstance(operation, Checkpoint):
        body = [operation.snapshot]
    elif isinstance(operation, Delete):
        body = [_Q.pack(operation.segment_id)]
    elif isinstance(operation, CheckpointPart):
        body = [_PART.pack(operation.number, operation.parts), operation.data]
    else:
        raise TypeError(f"not an operation: {operation!r}")
    payload = b"".join(body)
    parts.append(_OP_HEADER.pack(TYPE_IDS[kind], len(payload)))
    parts.append(payload)


# --------------------------------------------------------------------------- decoding


_CORE_PREFIX = b"\x80" + bytes(7)  # core attribute ids repeat in every segment and operation: made once each
_core_ids: dict[bytes, uuid.UUID] = {}


def decode_attributes(view: memoryview, position: int, count_format: struct.Struct = ATTRIBUTE_COUNT
                      ) -> tuple[dict[uuid.UUID, int], int]:
    """(attributes, the position after them); ``count_format`` is the count's (version 0: u16)."""
    (count,) = count_format.unpack_from(view, position)
    position += count_format.size
    attributes: dict[uuid.UUID, int] = {}
    end = position + 24 * count
    if end > len(view):
        raise struct.error(f"{count} attributes need {end - position} bytes, {len(view) - position} are left")
    core_ids, make_id = _core_ids, uuid.UUID
    for key, value in _ATTR.iter_unpack(view[position:end]):
        if key[:8] == _CORE_PREFIX:
            attribute_id = core_ids.get(key)
            if attribute_id is None:
                attribute_id = core_ids[key] = make_id(bytes=key)
        else:
            attribute_id = make_id(bytes=key)
        attributes[attribute_id] = value
    return attributes, end


def decode_frame(record: BytesLike) -> tuple[int, int, list[Operation]]:
    """Decodes one log record into (timestamp_ms, first_sequence, operations).

    Payloads of Append operations are memoryview slices of ``record``.
    Raises CorruptFrame for anything malformed.
    """
    view = memoryview(record)
    try:
        version, timestamp_ms, first_sequence, count = _FRAME_HEADER.unpack_from(view, 0)
        if version not in _FRAME_VERSIONS:
            raise CorruptFrame(f"unknown frame version {version}")
        count_format = ATTRIBUTE_COUNT if version >= 1 else ATTRIBUTE_COUNT_V0
        position = _FRAME_HEADER.size
        operations: list[Operation] = []
        for _ in range(count):
            type_id, length = _OP_HEADER.unpack_from(view, position)
            position += _OP_HEADER.size
            end = position + length
            if end > len(view):
                raise CorruptFrame("operation runs past the end of its frame")
            operations.append(_decode_operation(type_id, view[position:end], count_format))
            position = end
        if position != len(view):
            raise CorruptFrame(f"{len(view) - position} stray bytes after the frame's operations")
        return timestamp_ms, first_sequence, operations
    except (struct.error, UnicodeDecodeError, ValueError) as error:
        raise CorruptFrame(str(error)) from error


def _decode_operation(type_id: int, body: memoryview, count_format: struct.Struct) -> Operation:
    if type_id == 1:
        segment_id, offset = _QQ.unpack_from(body, 0)
        attributes, position = decode_attributes(body, 16, count_format)
        return Append(segment_id, offset, body[position:], attributes)
    if type_id == 2:
        return Seal(*_QQ.unpack_from(body, 0))
    if type_id == 3:
        target_id, source_id, target_offset, source_length = _QQQQ.unpack_from(body, 0)
        (header_length,) = _HEADER_LENGTH.unpack_from(body, 32)
        header = bytes(body[36:36 + header_length])
        attributes, _ = decode_attributes(body, 36 + header_length, count_format)
        return Merge(target_id, source_id, target_offset, source_length, header, attributes)
    if type_id == 4:
        segment_id, segment_type, name_length = _CREATE.unpack_from(body, 0)
        name = bytes(body[_CREATE.size:_CREATE.size + name_length]).decode("utf-8", "surrogatepass")
        attributes, _ = decode_attributes(body, _CREATE.size + name_length, count_format)
        return CreateSegment(segment_id, segment_type, name, attributes)
    if type_id == 6:
        (segment_id,) = _Q.unpack_from(body, 0)
        return UpdateAttributes(segment_id, decode_attributes(body, 8, count_format)[0])
    if type_id == 7:
        return Truncate(*_QQ.unpack_from(body, 0))
    if type_id == 8:
        return Checkpoint(bytes(body))
    if type_id == 10:
        return Delete(*_Q.unpack_from(body, 0))
    if type_id == 11:
        index, count = _PART.unpack_from(body, 0)
        if not index < count:
            raise CorruptFrame(f"checkpoint part {index} of {count}")
        return CheckpointPart(index, count, bytes(body[_PART.size:]))
    raise CorruptFrame(f"unknown operation type {type_id}")

"""The log store's wire protocol (docs/replicated-log.md), sans-IO: messages <-> checksummed frames.

Frame layout, little-endian:

    offset  size  field
    ------  ----  -----------------------------------------------------------------
         0     4  length      bytes after this field (u32): checksum, kind, request id, body
         4     8  checksum    xxh3_64 of every byte after it
        12     1  kind        a message kind below
        13     8  request_id  chosen by the requester, echoed by the reply (u64)
        21     n  body        the kind's fields

Requests: HELLO (version), ADD (ledger, entry, last-add-confirmed, flags, payload), READ (ledger,
first, last), FENCE (ledger), DELETE (ledger). Replies carry a ``Status`` first: HELLO_REPLY
(version, replica id), ADDED (ledger, entry), ENTRIES (ledger, then entry/payload pairs), FENCE_RESULT
(ledger, last entry, last-add-confirmed), DELETED (ledger). A frame that is too long, fails its
checksum, has an unknown kind or a body of the wrong size raises ``ProtocolError``: the peer closes
that connection, and only it.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from typing import ClassVar

import xxhash

from wire.fields import BytesLike

VERSION = 1
FRAME_LENGTH = struct.Struct("<I")
_PREFIX = struct.Struct("<IQBQ")  # length, checksum, kind, request id
PREFIX_SIZE = _PREFIX.size
MAX_FRAME_SIZE = 16 * 1024 * 1024 + 1024  # one largest entry (8 MiB + headers) with room to spare
RECOVERY = 1  # ADD flag: re-replication by a recovering writer, allowed on a fenced ledger


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # a message class's fields after request_id, in order


class ProtocolError(Exception):
    """Bytes that are not a valid frame of this protocol."""


class Status(enum.IntEnum):
    OK = 0
    FENCED = 1
    NO_SUCH_LEDGER = 2
    NO_SUCH_ENTRY = 3
    BAD_REQUEST = 4
    UNAVAILABLE = 5  # the store cannot make writes durable (disk full, failed fsync)


@dataclasses.dataclass(frozen=True)
class Message:
    KIND: ClassVar[int]
    FIELDS: ClassVar[struct.Struct]
    request_id: int

    def body(self) -> list[BytesLike]:
        return [self.FIELDS.pack(*self._fixed())]

    def _fixed(self) -> tuple:
        names = _FIELD_NAMES.get(type(self))
        if names is None:
            names = _FIELD_NAMES[type(self)] = tuple(field.name for field in dataclasses.fields(self)[1:])
        return tuple(getattr(self, name) for name in names)

    @classmethod
    def parse(cls, request_id: int, body: memoryview) -> Message:
        if len(body) != cls.FIELDS.size:
            raise ProtocolError(f"{cls.__name__}: body of {len(body)} bytes, {cls.FIELDS.size} expected")
        return cls(request_id, *cls.FIELDS.unpack(body))


@dataclasses.dataclass(frozen=True)
class Hello(Message):
    KIND = 1
    FIELDS = struct.Struct("<H")
    version: int


@dataclasses.dataclass(frozen=True)
class Add(Message):
    KIND = 2
    FIELDS = struct.Struct("<QqqB")
    ledger: int
    entry: int
    last_add_confirmed: int
    flags: int
    payload: BytesLike = b""

    def body(self) -> list[BytesLike]:
        return [self.FIELDS.pack(self.ledger, self.entry, self.last_add_confirmed, self.flags), self.payload]

    @classmethod
    def parse(cls, request_id: int, body: memoryview) -> Message:
        if len(body) < cls.FIELDS.size:
            raise ProtocolError(f"Add: body of {len(body)} bytes is shorter than its fields")
        ledger, entry, last_add_confirmed, flags = cls.FIELDS.unpack_from(body)
        return cls(request_id, ledger, entry, last_add_confirmed, flags, body[cls.FIELDS.size:])


@dataclasses.dataclass(frozen=True)
class Read(Message):
    KIND = 3
    FIELDS = struct.Struct("<Qqq")
    ledger: int
    first: int
    last: int


@dataclasses.dataclass(frozen=True)
class Fence(Message):
    KIND = 4
    FIELDS = struct.Struct("<Q")
    ledger: int


@dataclasses.dataclass(frozen=True)
class Delete(Message):
    KIND = 5
    FIELDS = struct.Struct("<Q")
    ledger: int


@dataclasses.dataclass(frozen=True)
class HelloReply(Message):
    KIND = 129
    FIELDS = struct.Struct("<BH16s")
    status: int
    version: int
    replica_id: bytes


@dataclasses.dataclass(frozen=True)
class Added(Message):
    KIND = 130
    FIELDS = struct.Struct("<BQq")
    status: int
    ledger: int
    entry: int


_ENTRY = struct.Struct("<qI")


@dataclasses.dataclass(frozen=True)
class Entries(Message):
    KIND = 131
    FIELDS = struct.Struct("<BQI")
    status: int
    ledger: int
    entries: tuple[tuple[int, BytesLike], ...] = ()

    def body(self) -> list[BytesLike]:
        parts: list[BytesLike] = [self.FIELDS.pack(self.status, self.ledger, len(self.entries))]
        for entry, payload in self.entries:
            parts += [_ENTRY.pack(entry, len(payload)), payload]
        return parts

    @classmethod
    def parse(cls, request_id: int, body: memoryview) -> Message:
        if len(body) < cls.FIELDS.size:
            raise ProtocolError("Entries: body shorter than its fields")
        status, ledger, count = cls.FIELDS.unpack_from(body)
        position, entries = cls.FIELDS.size, []
        for _ in range(count):
            if position + _ENTRY.size > len(body):
                raise ProtocolError("Entries: an entry header runs past the body")
            entry, length = _ENTRY.unpack_from(body, position)
            position += _ENTRY.size
            if position + length > len(body):
                raise ProtocolError("Entries: an entry runs past the body")
            entries.append((entry, body[position:position + length]))
            position += length
        if position != len(body):
            raise ProtocolError("Entries: bytes after the last entry")
        return cls(request_id, status, ledger, tuple(entries))


@dataclasses.dataclass(frozen=True)
class FenceResult(Message):
    KIND = 132
    FIELDS = struct.Struct("<BQqq")
    status: int
    ledger: int
    last_entry: int
    last_add_confirmed: int


@dataclasses.dataclass(frozen=True)
class Deleted(Message):
    KIND = 133
    FIELDS = struct.Struct("<BQ")
    status: int
    ledger: int


MESSAGES: dict[int, type[Message]] = {cls.KIND: cls for cls in (Hello, Add, Read, Fence, Delete, HelloReply, Added,
                                                                  Entries, FenceResult, Deleted)}


def encode(message: Message) -> list[BytesLike]:
    """The frame of ``message`` as parts to write back to back (payloads are not copied)."""
    body = message.body()
    kind_and_id = struct.pack("<BQ", message.KIND, message.request_id)
    hasher = xxhash.xxh3_64(kind_and_id)
    for part in body:
        hasher.update(part)
    length = 8 + len(kind_and_id) + sum(len(part) for part in body)
    if length + FRAME_LENGTH.size > MAX_FRAME_SIZE:
        raise ValueError(f"a {type(message).__name__} frame of {length} bytes exceeds the limit")
    return [struct.pack("<IQ", length, hasher.intdigest()), kind_and_id, *body]


class Decoder:
    """Bytes in, messages out. Raises ProtocolError on the first malformed frame (then stop using it)."""

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE):
        self._buffer = bytearray()
        self._max = max_frame_size

    def feed(self, data: BytesLike) -> list[Message]:
        self._buffer += data
        messages = []
        view = memoryview(self._buffer)
        position = 0
        try:
            while len(view) - position >= FRAME_LENGTH.size:
                (length,) = FRAME_LENGTH.unpack_from(view, position)
                if length + FRAME_LENGTH.size > self._max or length < PREFIX_SIZE - FRAME_LENGTH.size:
                    raise ProtocolError(f"frame length {length} out of range")
                end = position + FRAME_LENGTH.size + length
                if end > len(view):
                    break
                _, checksum, kind, request_id = _PREFIX.unpack_from(view, position)
                if xxhash.xxh3_64_intdigest(view[position + 12:end]) != checksum:
                    raise ProtocolError("frame checksum mismatch")
                message_class = MESSAGES.get(kind)
                if message_class is None:
                    raise ProtocolError(f"unknown message kind {kind}")
                body = bytes(view[position + PREFIX_SIZE:end])  # owned: the buffer is reused
                messages.append(message_class.parse(request_id, memoryview(body)))
                position = end
        except struct.error as error:
            raise ProtocolError(str(error)) from error
        finally:
            view.release()
        del self._buffer[:position]
        return messages

"""Symmetric binary encoder/decoder for metadata records (big-endian, struct-based, no schema library).

Every record value starts with one byte, its *format version* (currently 1 for every record).
Then come its fields in a fixed order: integers as i32/i64, floats as IEEE-754 f64 (key ranges
round-trip exactly), booleans as one byte, strings as u16 length + UTF-8, byte strings as u32
length + bytes, UUIDs as 16 raw bytes, and lists as a u32 count followed by the items.

Evolution rule: a newer writer may only *append* fields and bump the version byte. A reader
that knows version N decodes the prefix it knows from any version >= N and ignores the rest; at
exactly its own version, leftover bytes are corruption. (A reader of version N + 1 meeting an
older value will have to default the appended fields; every record is at version 1 today, so
an older version is corruption.) Version 0 and truncated values are corruption too. Errors
raise ``CorruptRecord`` naming the record type.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, Self, TypeVar

from .errors import CorruptRecord, RecordTooLarge

Item = TypeVar("Item")
EnumType = TypeVar("EnumType", bound=enum.Enum)


class Record(Protocol):
    """What every stored record is: a value that encodes itself and decodes from its bytes."""

    def encode(self) -> bytes: ...

    @classmethod
    def decode(cls, data: bytes) -> Self: ...

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_PAIR = struct.Struct(">qq")


class Encoder:
    """Accumulates one record's fields; ``to_bytes`` joins them once."""

    __slots__ = ("_parts",)

    def __init__(self, format_version: int):
        self._parts: list[bytes] = [_U8.pack(format_version)]

    def _pack(self, layout: struct.Struct, value) -> Encoder:
        self._parts.append(layout.pack(value))
        return self

    def u8(self, value: int) -> Encoder:
        return self._pack(_U8, value)

    def i32(self, value: int) -> Encoder:
        return self._pack(_I32, value)

    def i64(self, value: int) -> Encoder:
        return self._pack(_I64, value)

    def f64(self, value: float) -> Encoder:
        return self._pack(_F64, value)

    def boolean(self, value: bool) -> Encoder:
        return self._pack(_U8, 1 if value else 0)

    def text(self, value: str) -> Encoder:
        data = value.encode("utf-8")
        if len(data) > 0xFFFF:
            raise RecordTooLarge(f"strings in records are at most 65535 bytes, got {len(data)}")
        self._parts.append(_U16.pack(len(data)))
        self._parts.append(data)
        return self

    def blob(self, value: bytes) -> Encoder:
        self._parts.append(_U32.pack(len(value)))
        self._parts.append(bytes(value))
        return self

    def uuid(self, value: uuid.UUID) -> Encoder:
        self._parts.append(value.bytes)
        return self

    def count(self, value: int) -> Encoder:
        return self._pack(_U32, value)

    def sequence(self, items: Sequence[Item], write: Callable[[Encoder, Item], object]) -> Encoder:
        """A list as a count and each item written by ``write(encoder, item)``, e.g. ``Encoder.text``."""
        self.count(len(items))
        for item in items:
            write(self, item)
        return self

    def i64s(self, values: Iterable[int]) -> Encoder:
        """A list of int64 (ids, times) as a count and the packed values."""
        values = tuple(values)
        self._parts.append(struct.pack(f">I{len(values)}q", len(values), *values))
        return self

    def packed(self, layout: struct.Struct, rows) -> Encoder:
        """A list of fixed-layout rows (tuples) as a count and the packed rows: fast for long lists."""
        rows = list(rows)
        self._parts.append(_U32.pack(len(rows)))
        self._parts.append(b"".join(layout.pack(*row) for row in rows))
        return self

    def pairs(self, mapping: dict[int, int]) -> Encoder:
        """An int64 -> int64 map (stream cuts, sizes) sorted by key, so equal maps encode equally."""
        return self.packed(_PAIR, sorted(mapping.items()))

    def to_bytes(self) -> bytes:
        return b"".join(self._parts)


class Decoder:
    """Reads the fields an ``Encoder`` wrote, in the same order.

    Used as a context manager, it calls ``finish`` when the block ends without an error::

        with Decoder(data, cls.__name__, FORMAT_VERSION) as decoder:
            return cls(decoder.i32(), decoder.text())
    """

    __slots__ = ("_data", "_position", "_record", "version", "_known_version")

    def __init__(self, data: bytes, record: str, known_version: int):
        self._data = memoryview(data)
        self._record = record
        self._position = 0
        self._known_version = known_version
        self.version = self._unpack(_U8)
        if self.version == 0:
            raise CorruptRecord(f"{record}: format version 0")
        if self.version < known_version:
            raise CorruptRecord(f"{record}: format version {self.version} predates {known_version}")

    def __enter__(self) -> Decoder:
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        if error_type is None:
            self.finish()

    def _take(self, size: int) -> memoryview:
        end = self._position + size
        if end > len(self._data):
            raise CorruptRecord(f"{self._record}: truncated at byte {self._position} (needs {size} more)")
        view = self._data[self._position:end]
        self._position = end
        return view

    def _unpack(self, layout: struct.Struct):
        return layout.unpack(self._take(layout.size))[0]

    def u8(self) -> int:
        return self._unpack(_U8)

    def i32(self) -> int:
        return self._unpack(_I32)

    def i64(self) -> int:
        return self._unpack(_I64)

    def f64(self) -> float:
        return self._unpack(_F64)

    def boolean(self) -> bool:
        value = self._unpack(_U8)
        if value > 1:
            raise CorruptRecord(f"{self._record}: boolean byte {value}")
        return value == 1

    def text(self) -> str:
        try:
            return bytes(self._take(self._unpack(_U16))).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecord(f"{self._record}: a string is not UTF-8") from None

    def blob(self) -> bytes:
        return bytes(self._take(self._unpack(_U32)))

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def count(self) -> int:
        count = self._unpack(_U32)
        if count > len(self._data) - self._position:  # each item takes at least one byte
            raise CorruptRecord(f"{self._record}: count {count} exceeds the remaining bytes")
        return count

    def sequence(self, read: Callable[[Decoder], Item]) -> tuple[Item, ...]:
        """The items ``Encoder.sequence`` wrote, each read by ``read(decoder)``, e.g. ``Decoder.text``."""
        return tuple(read(self) for _ in range(self.count()))

    def i64s(self) -> tuple[int, ...]:
        count = self._unpack(_U32)
        return struct.unpack(f">{count}q", self._take(count * _I64.size))

    def packed(self, layout: struct.Struct) -> list[tuple]:
        count = self._unpack(_U32)
        return list(layout.iter_unpack(self._take(count * layout.size))) if count else []

    def pairs(self) -> dict[int, int]:
        return dict(self.packed(_PAIR))

    def enum(self, enum_type: type[EnumType], value: int) -> EnumType:
        """Converts a decoded number to ``enum_type``; an unknown member is corruption."""
        try:
            return enum_type(value)
        except ValueError:
            raise CorruptRecord(f"{self._record}: {value} is not a {enum_type.__name__}") from None

    def finish(self) -> None:
        """Checks that nothing is left over (unless the writer was a newer format version)."""
        if self.version == self._known_version and self._position != len(self._data):
            raise CorruptRecord(f"{self._record}: {len(self._data) - self._position} bytes left over")

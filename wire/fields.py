"""Field types of the wire protocol, declared as ``construct`` constructs.

Every command's layout is a ``construct.Struct`` of the fields below. Two
things consume a layout:

* ``construct`` itself, which interprets it: the slow *reference* codec that
  the tests use as an oracle;
* :mod:`wire.compiler`, which reads the same declaration and generates the
  fast straight-line ``struct`` code the codec really runs.

Primitive encodings (protocol reference §1.5):

==========  ===============================================================
``I8``      1 byte, two's complement
``I32``     4 bytes big-endian, two's complement
``I64``     8 bytes big-endian, two's complement
``Bool``    1 byte; ``01`` true, ``00`` false; any non-zero reads as true
``Uuid``    16 bytes: most then least significant 64 bits, big-endian
``Utf``     u16 byte count, then (modified) UTF-8 text
``Buffer``  i32 byte count (>= 0), then the bytes
``Rest``    the rest of the payload, no length prefix (AppendBlock data)
``ListOf``  i32 element count (>= 0), then the elements back to back
==========  ===============================================================

``Trailing`` marks an optional trailing field of a versioned command: the
decoder reads it only if enough bytes remain (Java's tolerance), otherwise it
takes its default. Encoders always write every field.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from typing import IO, Any, ClassVar, Protocol, TypeAlias

import construct as c

from .errors import ProtocolError

BytesLike: TypeAlias = bytes | bytearray | memoryview
"""A buffer field's value: what a constructor accepts (decoded buffers are memoryview slices)."""

# construct ships no type information: its objects (and so these field declarations) are Any to mypy.
Context: TypeAlias = Any

I8 = c.Int8sb
I32 = c.Int32sb
I64 = c.Int64sb
Bool = c.Flag
Rest = c.GreedyBytes

MAX_UTF_BYTES = 0xFFFF


def encode_utf(text: str) -> bytes:
    """Encodes a string as the protocol's UTF-8 text (without the length prefix).

    Standard UTF-8 is produced, which Java's modified-UTF-8 reader and the Rust
    client both accept. Lone surrogates (as decoded from a Java peer's CESU
    surrogate pairs) are written back as the same 3-byte sequences, so a name
    is echoed with exactly the bytes it arrived with.
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def decode_utf(data: BytesLike) -> str:
    """Decodes protocol UTF-8 text leniently (standard or Java modified UTF-8).

    Raises:
        UnicodeDecodeError: the bytes are neither.
    """
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError:
        return bytes(data).replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")


def _remaining(stream: IO[bytes]) -> int:
    here = stream.tell()
    end = stream.seek(0, io.SEEK_END)
    stream.seek(here)
    return end - here


class JavaUtf(c.Construct):
    """A ``utf`` field: u16 byte count then the text."""

    def _parse(self, stream: IO[bytes], context: Context, path: str) -> str:
        length = c.Int16ub._parsereport(stream, context, path)
        return decode_utf(c.stream_read(stream, length, path))

    def _build(self, obj: str, stream: IO[bytes], context: Context, path: str) -> str:
        data = encode_utf(obj)
        c.Int16ub._build(len(data), stream, context, path)
        c.stream_write(stream, data, len(data), path)
        return obj


class BufferField(c.Construct):
    """A ``bytes`` field: i32 byte count (never negative) then the bytes."""

    def _parse(self, stream: IO[bytes], context: Context, path: str) -> bytes:
        length = c.Int32sb._parsereport(stream, context, path)
        if length < 0:
            raise ProtocolError(f"negative buffer length {length}")
        data: bytes = c.stream_read(stream, length, path)
        return data

    def _build(self, obj: BytesLike, stream: IO[bytes], context: Context, path: str) -> BytesLike:
        data = bytes(obj)
        c.Int32sb._build(len(data), stream, context, path)
        c.stream_write(stream, data, len(data), path)
        return obj


class UuidField(c.Construct):
    """A ``uuid`` field: 16 bytes, most significant half first."""

    def _parse(self, stream: IO[bytes], context: Context, path: str) -> uuid.UUID:
        return uuid.UUID(bytes=c.stream_read(stream, 16, path))

    def _build(self, obj: uuid.UUID, stream: IO[bytes], context: Context, path: str) -> uuid.UUID:
        c.stream_write(stream, obj.bytes, 16, path)
        return obj


class ListOf(c.Subconstruct):
    """A ``list<T>`` field: i32 element count then the elements. Parses to a tuple."""

    def _parse(self, stream: IO[bytes], context: Context, path: str) -> tuple[Any, ...]:
        count = c.Int32sb._parsereport(stream, context, path)
        if count < 0:
            raise ProtocolError(f"negative list count {count}")
        return tuple(self.subcon._parsereport(stream, context, path) for _ in range(count))

    def _build(self, obj: tuple[Any, ...], stream: IO[bytes], context: Context, path: str) -> tuple[Any, ...]:
        c.Int32sb._build(len(obj), stream, context, path)
        for item in obj:
            self.subcon._build(item, stream, context, path)
        return obj


class Trailing(c.Subconstruct):
    """An optional trailing field: read only if at least ``min_bytes`` remain.

    Java reads an optional i64 when 8 bytes remain, an i32 when 4 remain, a bool
    when 1 remains and a string or list when any byte remains; a few i64s are
    read when any byte remains (then fewer than 8 is malformed).
    """

    def __init__(self, subcon: Any, default: Any, min_bytes: int | None = None):
        super().__init__(subcon)
        self.default = default
        self.min_bytes = min_bytes if min_bytes is not None else _natural_min_bytes(subcon)

    def _parse(self, stream: IO[bytes], context: Context, path: str) -> Any:
        if _remaining(stream) >= self.min_bytes:
            return self.subcon._parsereport(stream, context, path)
        return self.default

    def _build(self, obj: Any, stream: IO[bytes], context: Context, path: str) -> Any:
        return self.subcon._build(obj, stream, context, path)


def _natural_min_bytes(subcon: Any) -> int:
    if isinstance(subcon, c.FormatField):
        length: int = subcon.length
        return length
    if isinstance(subcon, BufferField):
        return 4
    if subcon is Bool:
        return 1
    return 1


class EventEnvelope(c.Construct):
    """An embedded Event frame (``0:i32``, ``len:i32``, bytes); the value is the payload.

    Used by ConditionalAppend, whose event carries its own envelope on the wire.
    """

    def _parse(self, stream: IO[bytes], context: Context, path: str) -> bytes:
        type_code = c.Int32sb._parsereport(stream, context, path)
        if type_code != 0:
            raise ProtocolError(f"embedded event has type {type_code}, expected 0")
        return Buffer._parse(stream, context, path)

    def _build(self, obj: BytesLike, stream: IO[bytes], context: Context, path: str) -> BytesLike:
        c.Int32sb._build(0, stream, context, path)
        return Buffer._build(obj, stream, context, path)


class PayloadSize(c.Construct):
    """An i32 holding the byte size of the next ``field_count`` fields of a composite.

    Written computed; read and ignored (Java validates it only loosely, Rust not
    at all). ``size_of(context)`` computes it for the construct reference codec.
    """

    def __init__(self, field_count: int, size_of: Callable[[Context], int]):
        super().__init__()
        self.field_count = field_count
        self.size_of = size_of
        self.flagbuildnone = True  # computed: construct builds it without a value

    def _parse(self, stream: IO[bytes], context: Context, path: str) -> int:
        size: int = c.Int32sb._parsereport(stream, context, path)
        return size

    def _build(self, obj: Any, stream: IO[bytes], context: Context, path: str) -> Any:
        c.Int32sb._build(self.size_of(context), stream, context, path)
        return obj


class DeclaredValue(Protocol):
    """What a nested structure's field sees of its value class: one that ``compiler.build`` made from its
    layout (every ``base.WireValue`` class declared with ``@composite``)."""

    LAYOUT: ClassVar[Any]  # the construct Struct
    FIELD_NAMES: ClassVar[tuple[str, ...]]

    def __init__(self, *fields: Any) -> None: ...


class CompositeField(c.Adapter):
    """A nested structure (TableKey, ChunkInfo, ...) mapped to its value class."""

    def __init__(self, value_class: type[DeclaredValue]):
        super().__init__(value_class.LAYOUT)
        self.value_class = value_class

    def _decode(self, obj: Context, context: Context, path: str) -> DeclaredValue:
        names = self.value_class.FIELD_NAMES
        return self.value_class(*(obj[name] for name in names))

    def _encode(self, obj: DeclaredValue, context: Context, path: str) -> dict[str, Any]:
        return {name: getattr(obj, name) for name in self.value_class.FIELD_NAMES}


Utf = JavaUtf()
Buffer = BufferField()
Uuid = UuidField()
Event = EventEnvelope()

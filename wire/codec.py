"""Frames <-> commands: the frame header, encoding, and decoding of one frame's payload.

Frame layout (protocol reference §1.2): ``type:i32``, ``length:i32``, then
``length`` payload bytes, all big-endian. Decoding a payload ignores bytes left
unread at its end (Java's tolerance for newer peers); missing mandatory bytes
are a ProtocolError.
"""

from __future__ import annotations

import struct
import types

from . import commands as _commands  # noqa: F401 - importing registers every command
from .base import REGISTRY, Command
from .constants import MAX_PAYLOAD_SIZE
from .errors import ProtocolError
from .fields import BytesLike

FRAME_HEADER = struct.Struct(">ii")

_DECODE_FAILURES = (struct.error, UnicodeDecodeError, ValueError, IndexError, OverflowError)


def encode_parts(command: Command) -> list[BytesLike]:
    """Encodes ``command`` as a list of byte chunks, frame header first.

    Payload buffers are included as they are (no copy), so a large SegmentRead
    goes to ``transport.writelines`` without being copied.

    Raises:
        ValueError: the frame would exceed the protocol's maximum frame size.
    """
    parts: list[BytesLike] = [b""]
    command._write(command, parts)
    size = sum(map(len, parts))
    if size > MAX_PAYLOAD_SIZE:
        raise ValueError(f"{type(command).__name__} payload of {size} bytes exceeds the frame limit")
    parts[0] = FRAME_HEADER.pack(command.TYPE, size)
    return parts


class _Gap:
    """Stands, in an encoding, for a buffer field's bytes that the caller sends itself."""

    __slots__ = ("size",)

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size


def encode_around(command: Command, field: str, size: int) -> tuple[bytes, bytes]:
    """The frame of ``command`` with buffer field ``field`` standing for ``size`` bytes given elsewhere.

    Returns the frame's bytes before those ``size`` bytes and after them, so that a transport
    can send the field's bytes from somewhere else (``sendfile`` from a file) in between. The
    value ``command`` holds in ``field`` is ignored (an empty buffer will do).

    Raises:
        ValueError: ``field`` is not a buffer field of ``command``, ``size`` is negative, or the
            frame would exceed the protocol's maximum frame size.
    """
    kinds = dict(zip(command.FIELD_NAMES, command.KINDS, strict=True))
    if field not in kinds or kinds[field].name != "buffer" or size < 0:
        raise ValueError(f"{type(command).__name__}.{field} is not a buffer field that can stand for {size} bytes")
    gap = _Gap(size)
    values = {name: getattr(command, name) for name in command.FIELD_NAMES}
    values[field] = gap
    parts: list[BytesLike] = [b""]
    command._write(types.SimpleNamespace(**values), parts)  # what the writer reads
    total = sum(map(len, parts))
    if total > MAX_PAYLOAD_SIZE:
        raise ValueError(f"{type(command).__name__} payload of {total} bytes exceeds the frame limit")
    parts[0] = FRAME_HEADER.pack(command.TYPE, total)
    at = [id(part) for part in parts].index(id(gap))  # where the writer put the stand-in
    return b"".join(parts[:at]), b"".join(parts[at + 1:])


def encode(command: Command) -> bytes:
    """Encodes ``command`` as one whole frame (a single copy of any payload).

    Raises:
        ValueError: the frame would exceed the protocol's maximum frame size.
    """
    return b"".join(encode_parts(command))


def decode_frame(type_code: int, payload: BytesLike) -> Command:
    """Decodes one frame's payload (bytes-like) into its command.

    Buffers in the result are memoryview slices of ``payload``.

    Raises:
        ProtocolError: unknown type code, or a payload that does not fit the layout.
    """
    command_class = REGISTRY.get(type_code)
    if command_class is None:
        raise ProtocolError(f"unknown wire command type {type_code}")
    view = payload if isinstance(payload, memoryview) else memoryview(payload)
    try:
        command, _ = command_class._read(view, 0, len(view))
    except ProtocolError as error:
        raise ProtocolError(f"malformed {command_class.__name__}: {error}") from None
    except _DECODE_FAILURES as error:
        raise ProtocolError(f"malformed {command_class.__name__}: {error}") from error
    return command


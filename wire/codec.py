"""Frames <-> commands: the frame header, encoding, and decoding of one frame's payload.

Frame layout (protocol reference §1.2): ``type:i32``, ``length:i32``, then
``length`` payload bytes, all big-endian. Decoding a payload ignores bytes left
unread at its end (Java's tolerance for newer peers); missing mandatory bytes
are a ProtocolError.
"""

from __future__ import annotations

import struct

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


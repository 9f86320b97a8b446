"""Tributary's sans-IO codec of Pravega's segment-store wire protocol (v15).

Bytes in, commands out, and back; nothing here touches sockets, event loops or
clocks. Entry points:

* :class:`Decoder` -- incremental stream decoding, with append-block reassembly;
* :func:`encode` / :func:`encode_parts` -- command to frame bytes (:func:`encode_around`: all but one buffer);
* :func:`decode_frame` -- one frame's payload to its command;
* :mod:`wire.commands` -- every command as an immutable value class;
* :mod:`wire.envelope` -- the event envelope inside segment data;
* :class:`ProtocolError` -- the one error raised for malformed input.

Beside the codec, and as pure: the names and byte formats the processes share (:mod:`wire.naming`,
:mod:`wire.watermark`, :mod:`wire.load_reports`, :mod:`wire.auth`). Code that waits, sleeps or talks to
another process is in ``coordination``.
"""

from . import commands, constants, envelope
from .base import REGISTRY, Command, ErrorReply, Reply, Request
from .codec import FRAME_HEADER, decode_frame, encode, encode_around, encode_parts
from .commands import *  # noqa: F403 - the command classes are the package's vocabulary
from .constants import MAX_WIRECOMMAND_SIZE, NULL_ATTRIBUTE_VALUE, OLDEST_COMPATIBLE_VERSION, WIRE_VERSION
from .decoder import Decoder
from .errors import ProtocolError

__all__ = [
    "REGISTRY", "Command", "Decoder", "ErrorReply", "FRAME_HEADER", "MAX_WIRECOMMAND_SIZE",
    "NULL_ATTRIBUTE_VALUE", "OLDEST_COMPATIBLE_VERSION", "ProtocolError", "Reply", "Request", "WIRE_VERSION",
    "commands", "constants", "decode_frame", "encode", "encode_around", "encode_parts", "envelope",
    *commands.__all__,
]

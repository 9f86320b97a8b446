"""An incremental, sans-IO decoder from a byte stream to commands.

Theory of operation. Bytes are fed in any split. The decoder reads the 8-byte
frame header, checks the payload length against the limit *before* buffering
anything of it, and then:

* if the whole frame is inside the fed chunk, decodes it in place: its buffers
  are memoryview slices of that chunk (no copy);
* otherwise keeps views of the pieces as they arrive and joins them into one
  payload when the last piece comes (one copy), then decodes that.

Decoded commands and pending pieces refer to the fed chunks, so a chunk must
never change afterwards: immutable input (``bytes``, as asyncio hands over) is
used as is, and writable input (``bytearray``, a reused receive buffer) is
copied once when fed. Either way no byte is copied more than once, and memory
is bounded by one frame plus the chunks its pieces came in.

Append blocks are reassembled as the reference server's append decoder does
(protocol reference §1.7): an AppendBlock is held until its AppendBlockEnd, and
the pair comes out as one standalone AppendBlockEnd whose ``data`` is the whole
append (whole events, plus a split event's two halves joined; padding dropped).
So the consumer sees every append as a standalone AppendBlockEnd, a
ConditionalAppend or a ConditionalBlockEnd. A top-level Padding is dropped; a
top-level Event or PartialEvent, any append frame other than the matching
AppendBlockEnd while a block is open, or ``num_events <= 0`` is a protocol
error.

Usage (h11's shape): ``feed(data)`` takes bytes; ``next_command()`` returns the
next whole command, or None when more bytes are needed. A malformed frame
raises ProtocolError from ``next_command()`` only after every command before
it has been returned, so a server acts on the valid frames that preceded the
bad one, then closes. After a ProtocolError the decoder stays failed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from .base import Command
from .codec import FRAME_HEADER, decode_frame
from .commands import (
    AppendBlock,
    AppendBlockEnd,
    ConditionalAppend,
    ConditionalBlockEnd,
    Event,
    Padding,
    PartialEvent,
    SetupAppend,
)
from .constants import FRAME_HEADER_SIZE, MAX_WIRECOMMAND_SIZE
from .errors import ProtocolError
from .fields import BytesLike

_APPEND_FRAMES = frozenset(
    {SetupAppend.TYPE, AppendBlock.TYPE, ConditionalAppend.TYPE, ConditionalBlockEnd.TYPE, Padding.TYPE})
_NEVER_TOP_LEVEL = frozenset({Event.TYPE, PartialEvent.TYPE})


class Decoder:
    """Feed bytes with :meth:`feed`; take whole commands with :meth:`next_command`."""

    def __init__(self, max_frame_size: int = MAX_WIRECOMMAND_SIZE):
        if not FRAME_HEADER_SIZE <= max_frame_size <= MAX_WIRECOMMAND_SIZE:
            raise ValueError(f"max_frame_size must be in [{FRAME_HEADER_SIZE}, {MAX_WIRECOMMAND_SIZE}]")
        self._max_payload = max_frame_size - FRAME_HEADER_SIZE
        self._header = bytearray()  # a partial frame header
        self._payload_length: int | None = None  # of the frame being assembled, once its header is known
        self._payload_type = 0
        self._pieces: list[memoryview] = []  # views of the payload bytes received so far
        self._pieces_size = 0
        self._block: AppendBlock | None = None  # an AppendBlock awaiting its AppendBlockEnd
        self._ready: deque[Command] = deque()  # decoded commands not yet taken
        self._failure: ProtocolError | None = None

    def __repr__(self) -> str:
        state = "failed" if self._failure else "in-frame" if self._payload_length is not None else "idle"
        return f"<Decoder {state} buffered={self.buffered_bytes}>"

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for frames not yet complete (partial header, partial payload, open block)."""
        held = len(self._header) + self._pieces_size
        return held + (len(self._block.data) if self._block is not None else 0)

    @property
    def in_append_block(self) -> bool:
        """True while an AppendBlock waits for its AppendBlockEnd."""
        return self._block is not None

    def feed(self, data: BytesLike) -> None:
        """Consumes ``data`` (bytes-like). Decoded commands wait for :meth:`next_command`.

        Decoding stops at the first malformed frame; the error is raised by
        ``next_command`` once the commands before it are taken. Feeding a failed
        decoder does nothing.
        """
        if self._failure is not None:
            return
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        if not view.readonly:
            view = memoryview(bytes(view))
        try:
            self._feed(view, self._ready)
        except ProtocolError as error:
            self._failure = error

    def next_command(self) -> Command | None:
        """Returns the next decoded command, or None if more bytes are needed.

        Raises:
            ProtocolError: the next frame is malformed (and so is the stream from then on).
        """
        if self._ready:
            return self._ready.popleft()
        if self._failure is not None:
            raise self._failure
        return None

    def commands(self) -> Iterator[Command]:
        """Yields every command decoded so far (raising ProtocolError where the stream broke)."""
        while (command := self.next_command()) is not None:
            yield command

    def receive(self, data: BytesLike) -> list[Command]:
        """``feed(data)`` then take every command it completed.

        Raises:
            ProtocolError: the stream is malformed; commands before the bad frame are lost
                to this caller, so servers use feed/next_command instead.
        """
        self.feed(data)
        return list(self.commands())

    def _feed(self, view: memoryview, commands: deque[Command]) -> None:
        position, size = 0, len(view)
        if self._header or self._payload_length is not None:
            position = self._resume(view, commands)
            if self._header or self._payload_length is not None:
                return
        unpack_header = FRAME_HEADER.unpack_from
        while size - position >= FRAME_HEADER_SIZE:
            type_code, length = unpack_header(view, position)
            self._check_length(type_code, length)
            start = position + FRAME_HEADER_SIZE
            end = start + length
            if end <= size:
                self._dispatch(type_code, view[start:end], commands)
                position = end
            else:
                self._begin_payload(type_code, length)
                self._add_piece(view[start:])
                return
        if position < size:
            self._header += view[position:]

    def _resume(self, view: memoryview, commands: deque[Command]) -> int:
        """Continues a frame split across feeds; returns how many bytes of ``view`` it used."""
        used = 0
        if self._payload_length is None:
            used = min(FRAME_HEADER_SIZE - len(self._header), len(view))
            self._header += view[:used]
            if len(self._header) < FRAME_HEADER_SIZE:
                return used
            type_code, length = FRAME_HEADER.unpack(self._header)
            self._header.clear()
            self._check_length(type_code, length)
            self._begin_payload(type_code, length)
        used += self._add_piece(view[used:])
        if self._pieces_size == self._payload_length:
            payload = self._pieces[0] if len(self._pieces) == 1 else memoryview(b"".join(self._pieces))
            self._pieces, self._pieces_size, self._payload_length = [], 0, None
            self._dispatch(self._payload_type, payload, commands)
        return used

    def _check_length(self, type_code: int, length: int) -> None:
        if length < 0 or length > self._max_payload:
            raise ProtocolError(f"frame of type {type_code} declares {length} payload bytes "
                                f"(limit {self._max_payload})")

    def _begin_payload(self, type_code: int, length: int) -> None:
        self._payload_length = length
        self._payload_type = type_code

    def _add_piece(self, view: memoryview) -> int:
        assert self._payload_length is not None, "a payload is begun before its pieces come"
        taken = min(self._payload_length - self._pieces_size, len(view))
        if taken:
            self._pieces.append(view[:taken])
            self._pieces_size += taken
        return taken

    def _dispatch(self, type_code: int, payload: memoryview, commands: deque[Command]) -> None:
        command = decode_frame(type_code, payload)
        if isinstance(command, AppendBlockEnd):
            commands.append(self._close_block(command))
        elif isinstance(command, AppendBlock):
            if self._block is not None:
                raise ProtocolError("AppendBlock while another block is open")
            self._block = command
        elif type_code in _APPEND_FRAMES and self._block is not None:
            raise ProtocolError(f"{type(command).__name__} inside an open append block")
        elif type_code == Padding.TYPE:
            return
        elif type_code in _NEVER_TOP_LEVEL:
            raise ProtocolError(f"{type(command).__name__} is not a top-level frame")
        else:
            commands.append(command)

    def _close_block(self, end: AppendBlockEnd) -> AppendBlockEnd:
        if end.num_events <= 0:
            raise ProtocolError(f"append of {end.num_events} events")
        block, self._block = self._block, None
        if block is None:
            return end
        if block.writer_id != end.writer_id:
            raise ProtocolError("AppendBlockEnd for a different writer than its AppendBlock")
        data = _reassemble(block.data, end.size_of_whole_events, end.data)
        return AppendBlockEnd(end.writer_id, len(data), data, end.num_events, end.last_event_number,
                              end.request_id)


def _reassemble(block_data: BytesLike, whole_size: int, end_data: BytesLike) -> BytesLike:
    """Joins an AppendBlock's data with its AppendBlockEnd into the appended bytes (§1.7)."""
    if not 0 <= whole_size <= len(block_data):
        raise ProtocolError(f"sizeOfWholeEvents {whole_size} outside the block of {len(block_data)} bytes")
    whole, rest = block_data[:whole_size], block_data[whole_size:]
    if not rest:
        return whole
    if len(rest) < FRAME_HEADER_SIZE:
        raise ProtocolError("truncated frame at the end of an append block")
    type_code, length = FRAME_HEADER.unpack_from(rest)
    if length != len(rest) - FRAME_HEADER_SIZE:
        raise ProtocolError("the frame closing an append block does not fill it")
    if type_code == PartialEvent.TYPE:
        return b"".join((whole, rest[FRAME_HEADER_SIZE:], end_data))
    if type_code == Padding.TYPE:
        if len(end_data):
            raise ProtocolError("data after a padded append block")
        return whole
    raise ProtocolError(f"frame type {type_code} closing an append block")

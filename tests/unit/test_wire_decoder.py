"""The stream decoder: any split of the input, zero/one copy, the frame limit, append-block reassembly."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wire
from tests.support.wire_strategies import any_command
from wire import commands as c
from wire.envelope import envelope

WRITER = uuid.UUID(int=0xABCDEF)
OTHER_WRITER = uuid.UUID(int=0x123456)


def frames_of(*commands) -> bytes:
    return b"".join(wire.encode(command) for command in commands)


def _stream_visible(command) -> bool:
    """Commands the stream decoder passes through unchanged (not inner frames, not held blocks)."""
    if isinstance(command, (c.Event, c.Padding, c.PartialEvent, c.AppendBlock)):
        return False
    return not (isinstance(command, c.AppendBlockEnd) and command.num_events <= 0)


@settings(max_examples=150, deadline=None)
@given(st.lists(any_command.filter(_stream_visible), max_size=6), st.data())
def test_any_split_gives_the_same_commands(commands, data):
    """Fed whole, byte by byte, or in random chunks, a frame sequence decodes to the same commands."""
    stream = frames_of(*commands)
    assert wire.Decoder().receive(stream) == commands
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder, decoded, start = wire.Decoder(), [], 0
    for cut in cuts + [len(stream)]:
        decoded += decoder.receive(stream[start:cut])
        start = cut
    assert decoded == commands
    assert decoder.buffered_bytes == 0


def test_byte_by_byte():
    """Every frame survives being fed one byte at a time."""
    commands = [c.Hello(15, 5), c.KeepAlive(), c.SegmentRead("s/t/0", 5, False, True, b"x" * 300, 2)]
    decoder, decoded = wire.Decoder(), []
    for byte in frames_of(*commands):
        decoded += decoder.receive(bytes([byte]))
    assert decoded == commands


def test_whole_frames_are_decoded_in_place_without_copying():
    """A frame that arrives whole yields a data view into the very chunk that was fed."""
    chunk = wire.encode(c.SegmentRead("s/t/0", 0, True, False, b"d" * 100_000, 1))
    (read,) = wire.Decoder().receive(chunk)
    assert isinstance(read.data, memoryview) and read.data.obj is chunk
    assert bytes(read.data) == b"d" * 100_000


def test_split_frames_are_copied_once_into_an_exact_buffer():
    """A frame split across feeds is joined once into a buffer the size of its payload."""
    chunk = wire.encode(c.SegmentRead("s/t/0", 0, True, False, b"d" * 100_000, 1))
    decoder = wire.Decoder()
    assert decoder.receive(chunk[:50_000]) == []
    assert decoder.buffered_bytes == 50_000 - 8
    (read,) = decoder.receive(chunk[50_000:])
    assert isinstance(read.data.obj, bytes) and len(read.data.obj) == len(chunk) - 8
    assert bytes(read.data) == b"d" * 100_000


def test_writable_input_is_copied_so_later_reuse_cannot_corrupt_commands():
    """A reused receive buffer (bytearray) may be overwritten after feeding without changing results."""
    receive_buffer = bytearray(wire.encode(c.SegmentRead("s/t/0", 0, True, False, b"a" * 1000, 1)))
    decoder = wire.Decoder()
    decoder.feed(receive_buffer[:500])  # a slice: a copy already; now feed the buffer itself
    decoder.feed(memoryview(receive_buffer)[500:])
    receive_buffer[:] = b"\xff" * len(receive_buffer)
    (read,) = decoder.commands()
    assert bytes(read.data) == b"a" * 1000


@pytest.mark.parametrize("length", [wire.MAX_WIRECOMMAND_SIZE - 7, 2**31 - 1, -1, -(2**31)])
def test_length_over_the_limit_is_rejected_before_buffering(length):
    """A header announcing a payload over 16,777,207 bytes (or negative) fails at once, buffering nothing."""
    decoder = wire.Decoder()
    with pytest.raises(wire.ProtocolError, match="payload bytes"):
        decoder.receive(struct.pack(">ii", c.SegmentRead.TYPE, length))
    assert decoder.buffered_bytes == 0


def test_largest_legal_payload_is_accepted():
    """A payload of exactly 16,777,207 bytes (a 16,777,215-byte frame) is accepted."""
    payload_size = wire.MAX_WIRECOMMAND_SIZE - 8
    event = b"e" * (payload_size - 44)  # writer 16, size 4, length 4, count 4, number 8, id 8
    frame = wire.encode(c.AppendBlockEnd(WRITER, len(event), event, 1, 1, 1))
    assert len(frame) == wire.MAX_WIRECOMMAND_SIZE
    (append,) = wire.Decoder().receive(frame)
    assert len(append.data) == len(event)


def test_smaller_configured_limit():
    """A decoder configured with a smaller frame limit enforces it."""
    decoder = wire.Decoder(max_frame_size=1024)
    with pytest.raises(wire.ProtocolError):
        decoder.receive(wire.encode(c.SegmentRead("s", 0, False, False, b"x" * 2000, 1))[:8])


def test_encoder_refuses_oversized_frames():
    """The encoder never produces a frame above the protocol maximum."""
    with pytest.raises(ValueError):
        wire.encode(c.ConditionalBlockEnd(WRITER, 1, 0, b"x" * (wire.MAX_WIRECOMMAND_SIZE - 8 - 44 + 1), 1))


def test_unknown_type_code_is_a_protocol_error_and_the_decoder_stays_failed():
    """An unknown type closes the stream for good: later feeds raise the same error."""
    decoder = wire.Decoder()
    with pytest.raises(wire.ProtocolError, match="unknown"):
        decoder.receive(struct.pack(">ii", 6, 0))
    with pytest.raises(wire.ProtocolError):
        decoder.receive(wire.encode(c.KeepAlive()))


@pytest.mark.parametrize("command", [c.Event(b"x"), c.PartialEvent(b"x")])
def test_inner_frames_at_top_level_are_protocol_errors(command):
    """Event and PartialEvent never appear as top-level frames."""
    with pytest.raises(wire.ProtocolError):
        wire.Decoder().receive(wire.encode(command))


def test_top_level_padding_is_ignored():
    """A Padding frame outside a block is accepted and dropped."""
    assert wire.Decoder().receive(frames_of(c.Padding(b"\0" * 10), c.KeepAlive())) == [c.KeepAlive()]


# ---------------------------------------------------------------- append-block reassembly

EVENTS = [envelope(bytes([n]) * (10 + n)) for n in range(5)]
WHOLE = b"".join(EVENTS[:4])
SPLIT = EVENTS[4]


def test_block_of_whole_events():
    """AppendBlock(events) + AppendBlockEnd(size = all) gives one append of those events."""
    stream = frames_of(c.AppendBlock(WRITER, WHOLE), c.AppendBlockEnd(WRITER, len(WHOLE), b"", 4, 40, 7))
    assert wire.Decoder().receive(stream) == [c.AppendBlockEnd(WRITER, len(WHOLE), WHOLE, 4, 40, 7)]


def test_block_closed_by_a_partial_event():
    """A split event's head (PartialEvent in the block) and tail (AppendBlockEnd.data) are joined."""
    block = WHOLE + wire.encode(c.PartialEvent(SPLIT[:7]))
    stream = frames_of(c.AppendBlock(WRITER, block), c.AppendBlockEnd(WRITER, len(WHOLE), SPLIT[7:], 5, 50, 8))
    (append,) = wire.Decoder().receive(stream)
    assert bytes(append.data) == WHOLE + SPLIT
    assert (append.num_events, append.last_event_number, append.request_id) == (5, 50, 8)


def test_block_closed_by_padding():
    """Padding at the end of a block is dropped."""
    block = WHOLE + wire.encode(c.Padding(b"\0" * 33))
    stream = frames_of(c.AppendBlock(WRITER, block), c.AppendBlockEnd(WRITER, len(WHOLE), b"", 4, 4, 1))
    (append,) = wire.Decoder().receive(stream)
    assert bytes(append.data) == WHOLE


def test_non_append_frames_may_pass_while_a_block_is_open():
    """As in Java, requests that are not append frames are processed while a block is open."""
    stream = frames_of(c.AppendBlock(WRITER, WHOLE), c.KeepAlive(),
                       c.AppendBlockEnd(WRITER, len(WHOLE), b"", 4, 4, 1))
    decoded = wire.Decoder().receive(stream)
    assert decoded[0] == c.KeepAlive() and bytes(decoded[1].data) == WHOLE


@pytest.mark.parametrize("stream", [
    frames_of(c.AppendBlock(WRITER, WHOLE), c.AppendBlockEnd(OTHER_WRITER, len(WHOLE), b"", 4, 4, 1)),
    frames_of(c.AppendBlock(WRITER, WHOLE), c.AppendBlock(WRITER, WHOLE)),
    frames_of(c.AppendBlock(WRITER, WHOLE), c.SetupAppend(1, WRITER, "s", "")),
    frames_of(c.AppendBlock(WRITER, WHOLE), c.ConditionalBlockEnd(WRITER, 1, 0, b"", 1)),
    frames_of(c.AppendBlock(WRITER, WHOLE), c.AppendBlockEnd(WRITER, len(WHOLE) + 1, b"", 4, 4, 1)),
    frames_of(c.AppendBlock(WRITER, WHOLE), c.AppendBlockEnd(WRITER, -1, b"", 4, 4, 1)),
    frames_of(c.AppendBlock(WRITER, WHOLE + b"\0\0\0"), c.AppendBlockEnd(WRITER, len(WHOLE), b"", 4, 4, 1)),
    frames_of(c.AppendBlock(WRITER, WHOLE + wire.encode(c.KeepAlive())),
              c.AppendBlockEnd(WRITER, len(WHOLE), b"", 4, 4, 1)),
    frames_of(c.AppendBlock(WRITER, WHOLE + wire.encode(c.Padding(b"\0"))),
              c.AppendBlockEnd(WRITER, len(WHOLE), b"tail", 4, 4, 1)),
    frames_of(c.AppendBlockEnd(WRITER, 0, b"x", 0, 4, 1)),
], ids=["other-writer", "nested-block", "setup-inside", "conditional-inside", "size-too-big", "size-negative",
        "garbage-after-events", "foreign-frame-closing", "data-after-padding", "zero-events"])
def test_append_block_violations_are_protocol_errors(stream):
    """Every sequencing or size violation of the append-block framing raises ProtocolError."""
    with pytest.raises(wire.ProtocolError):
        wire.Decoder().receive(stream)


def test_block_buffering_is_reported():
    """An open block counts towards the decoder's buffered bytes until its end arrives."""
    decoder = wire.Decoder()
    decoder.receive(frames_of(c.AppendBlock(WRITER, WHOLE)))
    assert decoder.in_append_block and decoder.buffered_bytes == len(WHOLE)


def test_commands_before_a_malformed_frame_are_delivered_first():
    """Valid frames that precede a bad one in the same chunk are returned before the error."""
    decoder = wire.Decoder()
    decoder.feed(frames_of(c.Hello(15, 5), c.KeepAlive()) + struct.pack(">ii", 6, 0) + frames_of(c.KeepAlive()))
    assert decoder.next_command() == c.Hello(15, 5)
    assert decoder.next_command() == c.KeepAlive()
    with pytest.raises(wire.ProtocolError, match="unknown"):
        decoder.next_command()
    decoder.feed(frames_of(c.KeepAlive()))
    with pytest.raises(wire.ProtocolError):
        decoder.next_command()

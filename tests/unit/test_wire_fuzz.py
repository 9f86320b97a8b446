"""Fuzzing the decoder: random and mutated input either decodes or raises ProtocolError,
nothing else escapes, and feeding whole or byte by byte gives the same outcome."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wire
from tests.support.wire_strategies import any_command

_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(chunks) -> tuple:
    """Decodes the chunks in order; returns (commands, error message or None)."""
    decoder, commands = wire.Decoder(max_frame_size=1 << 20), []
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            commands += decoder.commands()
    except wire.ProtocolError:
        return [wire.encode(command) for command in commands], "error"
    return [wire.encode(command) for command in commands], None


def _check(data: bytes) -> None:
    """Whole and byte-by-byte feeding yield the same commands and the same end (error or not)."""
    whole = _outcome([data])
    byte_by_byte = _outcome([data[i:i + 1] for i in range(len(data))])
    assert whole == byte_by_byte


@_SETTINGS
@given(st.binary(max_size=300))
def test_random_bytes(data):
    """Arbitrary bytes decode or raise ProtocolError, the same way whole and byte by byte."""
    _check(data)


@_SETTINGS
@given(st.sampled_from(sorted(wire.REGISTRY)), st.binary(max_size=200))
def test_random_payloads_under_valid_headers(type_code, payload):
    """A valid type code with an arbitrary payload decodes or raises ProtocolError."""
    _check(struct.pack(">ii", type_code, len(payload)) + payload)


@st.composite
def mutated_frames(draw):
    frame = bytearray(wire.encode(draw(any_command)))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "truncate", "insert", "length"]))
        position = draw(st.integers(0, max(len(frame) - 1, 0)))
        if action == "flip" and frame:
            frame[position] ^= 1 << draw(st.integers(0, 7))
        elif action == "truncate":
            del frame[position:]
        elif action == "insert":
            frame[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif len(frame) >= 8:
            frame[4:8] = struct.pack(">i", draw(st.integers(-(2**31), 2**31 - 1)))
    return bytes(frame)


@_SETTINGS
@given(mutated_frames())
def test_mutated_valid_frames(data):
    """Valid frames with flipped bits, truncations, insertions or forged lengths never escape ProtocolError."""
    _check(data)

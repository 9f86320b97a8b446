"""The log store's wire protocol: every message survives encode -> decode however the bytes are cut
into reads; a flipped bit, an unknown kind, a body of the wrong size or an oversized length is a
ProtocolError, never a wrong message."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.tier1.logstore import protocol as p

u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
status = st.sampled_from(list(p.Status))
payload = st.binary(max_size=2000)

messages = st.one_of(
    st.builds(p.Hello, u64, st.integers(0, 65535)),
    st.builds(p.Add, u64, u64, i64, i64, st.integers(0, 255), payload),
    st.builds(p.Read, u64, u64, i64, i64),
    st.builds(p.Fence, u64, u64),
    st.builds(p.Delete, u64, u64),
    st.builds(p.HelloReply, u64, status, st.integers(0, 65535), st.binary(min_size=16, max_size=16)),
    st.builds(p.Added, u64, status, u64, i64),
    st.builds(p.Entries, u64, status, u64, st.lists(st.tuples(i64, payload), max_size=5).map(tuple)),
    st.builds(p.FenceResult, u64, status, u64, i64, i64),
    st.builds(p.Deleted, u64, status, u64),
)


def frame(message) -> bytes:
    return b"".join(bytes(part) for part in p.encode(message))


def normalized(message):
    """Buffers as bytes, for comparison (decoded payloads are views)."""
    if isinstance(message, p.Add):
        return (message.request_id, message.ledger, message.entry, message.last_add_confirmed, message.flags,
                bytes(message.payload))
    if isinstance(message, p.Entries):
        return (message.request_id, message.status, message.ledger,
                tuple((entry, bytes(data)) for entry, data in message.entries))
    return message


@settings(max_examples=300, deadline=None)
@given(st.lists(messages, min_size=1, max_size=6), st.data())
def test_messages_round_trip_however_the_bytes_are_cut(sent, data):
    stream = b"".join(frame(message) for message in sent)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder, received, start = p.Decoder(), [], 0
    for cut in [*cuts, len(stream)]:
        received += decoder.feed(stream[start:cut])
        start = cut
    assert [type(m) for m in received] == [type(m) for m in sent]
    assert [normalized(m) for m in received] == [normalized(m) for m in sent]


@settings(max_examples=300, deadline=None)
@given(messages, st.data())
def test_any_flipped_bit_is_refused(message, data):
    encoded = bytearray(frame(message))
    position = data.draw(st.integers(4, len(encoded) - 1))  # a flipped length is the next test's business
    encoded[position] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(p.ProtocolError):
        p.Decoder().feed(bytes(encoded))


def raw_frame(kind: int, body: bytes, request_id: int = 1) -> bytes:
    import xxhash
    rest = struct.pack("<BQ", kind, request_id) + body
    return struct.pack("<IQ", 8 + len(rest), xxhash.xxh3_64_intdigest(rest)) + rest


@pytest.mark.parametrize("bad", [
    raw_frame(99, b""),  # unknown kind
    raw_frame(p.Fence.KIND, b"\0" * 7),  # body too short
    raw_frame(p.Fence.KIND, b"\0" * 9),  # body too long
    raw_frame(p.Add.KIND, b"\0" * 10),  # shorter than Add's fixed fields
    raw_frame(p.Entries.KIND, struct.pack("<BQI", 0, 1, 2) + struct.pack("<qI", 0, 100) + b"x"),  # runs past
    struct.pack("<I", p.MAX_FRAME_SIZE) + b"\0" * 20,  # too long to accept
    struct.pack("<I", 3) + b"\0" * 20,  # too short for a frame
], ids=["unknown kind", "short body", "long body", "short add", "entry past body", "oversize", "undersize"])
def test_malformed_frames_are_protocol_errors(bad):
    with pytest.raises(p.ProtocolError):
        p.Decoder().feed(bad)


def test_an_incomplete_frame_waits_for_more():
    encoded = frame(p.Fence(7, 42))
    decoder = p.Decoder()
    assert decoder.feed(encoded[:10]) == []
    assert decoder.feed(encoded[10:]) == [p.Fence(7, 42)]

"""Event envelope helpers: wrapping events and splitting a byte stream back into them."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wire
from wire.envelope import EventSplitter, envelope, envelope_all, envelope_bounds, envelope_header, split_events


def test_envelope_matches_the_reference_example():
    """The reference's example: the event "hello" is 00 00 00 00 00 00 00 05 68 65 6c 6c 6f."""
    assert envelope(b"hello") == bytes.fromhex("00000000 00000005 68656c6c6f")
    assert envelope_header(5) == bytes.fromhex("0000000000000005")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20), st.lists(st.integers(0, 7000), max_size=10))
def test_splitter_recovers_events_from_any_chunking(events, cuts):
    """Enveloped events fed in arbitrary chunks come back whole, in order, once each."""
    stream = envelope_all(events)
    splitter, seen, start = EventSplitter(), [], 0
    for cut in sorted(min(cut, len(stream)) for cut in cuts) + [len(stream)]:
        seen += [bytes(event) for event in splitter.feed(stream[start:cut])]
        start = cut
    assert seen == events
    assert splitter.buffered_bytes == 0


def test_split_events_stops_at_an_incomplete_event():
    """split_events returns whole events only, and how many bytes they took."""
    stream = envelope_all([b"a", b"bb"]) + envelope(b"ccc")[:5]
    payloads, consumed = split_events(stream)
    assert [bytes(p) for p in payloads] == [b"a", b"bb"] and consumed == 9 + 10


@pytest.mark.parametrize("data", [b"\x00\x00\x00\x01\x00\x00\x00\x00", b"\x00\x00\x00\x00\xff\xff\xff\xff"])
def test_bad_envelopes_are_protocol_errors(data):
    """A type other than 0 or a negative length is a ProtocolError."""
    with pytest.raises(wire.ProtocolError):
        split_events(data)


@given(st.lists(st.binary(max_size=300), max_size=30), st.integers(0, 40))
def test_envelope_bounds_agree_with_split_events(events, cut):
    """On any prefix of enveloped events the bounds name the same events split_events finds: headers at
    the even places, payloads between the odd ones and the next header (or the end)."""
    data = envelope_all(events)
    prefix = data[:max(0, len(data) - cut)]
    bounds = array("q")
    position, needed = envelope_bounds(prefix, 0, 1 << 20, bounds)
    payloads, consumed = split_events(prefix)
    assert position == consumed and len(bounds) == 2 * len(payloads)
    ends = [*bounds[2::2], position]
    assert [prefix[bounds[2 * i + 1]:ends[i]] for i in range(len(payloads))] == [bytes(p) for p in payloads]
    assert (needed > 0) == (len(prefix) - position >= 8)
